//! OpenTelemetry traces end to end: the real server with `--trace-config mode=opentelemetry`
//! exports the spans of requests on all four protocols to an OTLP receiver written here with
//! `opentelemetry-proto` (over OTLP/HTTP protobuf, Triton's way, and over OTLP/gRPC), each
//! trace continuing the `traceparent` the client sent; a collector that never answers costs
//! requests nothing and its spans are counted as dropped; and the access-log line of a traced
//! request carries the trace id that was exported.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::otlp::{attribute, by_id, grpc_receiver, http_receiver, silent_collector};
use common::{repo_path, TestResult, TestServer};
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{json, Value};
use tensorport::batcher::BatchSettings;
use tensorport::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorport::proto::inference::model_infer_request::InferInputTensor;
use tensorport::proto::inference::ModelInferRequest;
use tensorport::proto::tensorflow::serving::prediction_service_client::PredictionServiceClient;
use tensorport::proto::tensorflow::serving::{ModelSpec, PredictRequest};
use tensorport::proto::tensorflow::{tensor_shape_proto, DataType, TensorProto, TensorShapeProto};
use tensorport::trace::config::parse_entries;
use tensorport::trace::TraceConfig;
use tensorport::ServerOptions;

const FEATURES: usize = 16;

/// The server's options for `settings` (`--trace-config` values), reading no environment.
fn traced(settings: &[&str]) -> ServerOptions {
    let entries: Vec<_> = settings
        .iter()
        .flat_map(|value| parse_entries(value).unwrap())
        .collect();
    let config = TraceConfig::from_entries(&entries, |_| None).unwrap();
    ServerOptions::default().with_trace(config)
}

fn every_request(url: &str) -> Vec<String> {
    [
        "mode=opentelemetry",
        "rate=1",
        "level=TIMESTAMPS",
        "opentelemetry,bsp_schedule_delay=50",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain([format!("opentelemetry,url={url}")])
    .collect()
}

fn traceparent(trace: u8, span: u8) -> (String, Vec<u8>, Vec<u8>) {
    let trace_id = vec![trace; 16];
    let span_id = vec![span; 8];
    let header = format!("00-{}-{}-01", hex(&trace_id), hex(&span_id));
    (header, trace_id, span_id)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn kserve_json() -> Value {
    json!({"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, FEATURES],
                       "data": vec![0.5f32; FEATURES]}]})
}

fn kserve_grpc() -> ModelInferRequest {
    ModelInferRequest {
        model_name: "ranker".into(),
        inputs: vec![InferInputTensor {
            name: "features".into(),
            datatype: "FP32".into(),
            shape: vec![1, FEATURES as i64],
            ..Default::default()
        }],
        raw_input_contents: vec![0.5f32.to_le_bytes().repeat(FEATURES).into()],
        ..Default::default()
    }
}

fn tf_predict() -> PredictRequest {
    let shape = TensorShapeProto {
        dim: [1, FEATURES as i64]
            .into_iter()
            .map(|size| tensor_shape_proto::Dim {
                size,
                name: String::new(),
            })
            .collect(),
        unknown_rank: false,
    };
    let tensor = TensorProto {
        dtype: DataType::DtFloat as i32,
        tensor_shape: Some(shape),
        float_val: vec![0.5; FEATURES],
        ..Default::default()
    };
    PredictRequest {
        model_spec: Some(ModelSpec {
            name: "ranker".into(),
            ..Default::default()
        }),
        inputs: [("features".to_owned(), tensor)].into(),
        ..Default::default()
    }
}

fn with_traceparent<T>(message: T, header: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert("traceparent", header.parse().unwrap());
    request
        .metadata_mut()
        .insert("tracestate", "vendor=grpc".parse().unwrap());
    request
}

/// Sends one ranker request on each protocol, each with its own `traceparent`; the
/// (trace id, parent span id) of each, by protocol.
async fn one_request_per_protocol(server: &TestServer) -> Vec<(&'static str, Vec<u8>, Vec<u8>)> {
    let http = reqwest::Client::new();
    let mut sent = Vec::new();

    let (header, trace, parent) = traceparent(0x11, 0xa1);
    let answer = http
        .post(format!("{}/v2/models/ranker/infer", server.rest_url))
        .header("traceparent", &header)
        .header("tracestate", "vendor=http")
        .json(&kserve_json())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    sent.push(("kserve-http", trace, parent));

    let (header, trace, parent) = traceparent(0x22, 0xa2);
    let answer = http
        .post(format!("{}/v1/models/ranker:predict", server.rest_url))
        .header("traceparent", &header)
        .json(&json!({"instances": [vec![0.5f32; FEATURES]]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    sent.push(("tfserving-rest", trace, parent));

    let (header, trace, parent) = traceparent(0x33, 0xa3);
    let mut kserve = GrpcInferenceServiceClient::connect(server.grpc_url.clone())
        .await
        .unwrap();
    kserve
        .model_infer(with_traceparent(kserve_grpc(), &header))
        .await
        .unwrap();
    sent.push(("kserve-grpc", trace, parent));

    let (header, trace, parent) = traceparent(0x44, 0xa4);
    let mut tf = PredictionServiceClient::connect(server.grpc_url.clone())
        .await
        .unwrap();
    tf.predict(with_traceparent(tf_predict(), &header))
        .await
        .unwrap();
    sent.push(("tfserving-grpc", trace, parent));
    sent
}

/// The trace is complete: a root continuing `parent`, and a child of the root.
fn complete(parent: &[u8]) -> impl Fn(&[Span]) -> bool + '_ {
    move |spans| {
        let root = spans.iter().find(|s| s.parent_span_id == parent);
        root.is_some_and(|root| spans.iter().any(|s| s.parent_span_id == root.span_id))
    }
}

fn check_trace(protocol: &str, spans: &[Span], parent: &[u8]) {
    let root = spans
        .iter()
        .find(|s| s.parent_span_id == parent)
        .unwrap_or_else(|| panic!("{protocol}: no root span under the caller's span"));
    assert_eq!(root.name, "request", "{protocol}");
    assert_eq!(attribute(root, "protocol").as_deref(), Some(protocol));
    let ids = by_id(spans);
    for span in spans {
        assert_eq!(
            attribute(span, "model_name").as_deref(),
            Some("ranker"),
            "{protocol}: {span:?}"
        );
        if span.span_id != root.span_id {
            // Every other span hangs off the root, directly or through a parent here.
            assert!(
                ids.contains_key(&span.parent_span_id),
                "{protocol}: {span:?}"
            );
        }
        assert!(span.end_time_unix_nano >= span.start_time_unix_nano);
    }
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    for expected in ["receive/decode", "batch run", "encode/send"] {
        assert!(names.contains(&expected), "{protocol}: {names:?}");
    }
    let run = spans.iter().find(|s| s.name == "batch run").unwrap();
    assert_eq!(attribute(run, "batch_size").as_deref(), Some("1"));
    assert!(attribute(run, "instance").is_some());
}

#[tokio::test]
async fn every_protocol_continues_the_callers_trace_over_otlp_http() -> TestResult {
    let (url, received) = http_receiver().await;
    let server = tracing_every_request(&url).await;
    for (protocol, trace, parent) in one_request_per_protocol(&server).await {
        let spans = received.wait_for(&trace, complete(&parent)).await;
        check_trace(protocol, &spans, &parent);
        let root = spans.iter().find(|s| s.parent_span_id == parent).unwrap();
        let state = match protocol {
            "kserve-http" => "vendor=http",
            "kserve-grpc" | "tfserving-grpc" => "vendor=grpc",
            _ => "",
        };
        assert_eq!(root.trace_state, state, "{protocol}");
    }
    assert!(received.services().iter().all(|s| s == "tensorport"));
    server.stop().await;
    Ok(())
}

/// The example models served with every request traced to the collector at `url`.
async fn tracing_every_request(url: &str) -> TestServer {
    let settings = every_request(url);
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    TestServer::start_with(
        "examples/models",
        BatchSettings::default(),
        traced(&settings),
    )
    .await
}

#[tokio::test]
async fn each_message_of_a_stream_is_a_trace_under_the_streams_traceparent() -> TestResult {
    let (url, received) = http_receiver().await;
    let server = tracing_every_request(&url).await;
    let (header, trace, parent) = traceparent(0x55, 0xa5);
    let mut client = GrpcInferenceServiceClient::connect(server.grpc_url.clone()).await?;
    let messages = futures::stream::iter([kserve_grpc(), kserve_grpc()]);
    let mut answers = client
        .model_stream_infer(with_traceparent(messages, &header))
        .await?
        .into_inner();
    for _ in 0..2 {
        let answer = answers.message().await?.expect("an answer");
        assert_eq!(answer.error_message, "");
    }
    let two_roots = |spans: &[Span]| {
        let roots: Vec<&Span> = spans
            .iter()
            .filter(|s| s.parent_span_id == parent)
            .collect();
        roots.len() == 2
            && roots
                .iter()
                .all(|root| spans.iter().any(|s| s.parent_span_id == root.span_id))
    };
    let spans = received.wait_for(&trace, two_roots).await;
    let roots: Vec<&Span> = spans
        .iter()
        .filter(|s| s.parent_span_id == parent)
        .collect();
    assert_ne!(roots[0].span_id, roots[1].span_id);
    for root in roots {
        let own: Vec<Span> = spans
            .iter()
            .filter(|s| s.span_id == root.span_id || descends_from(&spans, s, &root.span_id))
            .cloned()
            .collect();
        check_trace("kserve-grpc", &own, &parent);
    }
    server.stop().await;
    Ok(())
}

/// Whether `span` hangs below the span `ancestor` among `spans`.
fn descends_from(spans: &[Span], span: &Span, ancestor: &[u8]) -> bool {
    let ids = by_id(spans);
    let mut at = span;
    for _ in 0..spans.len() {
        if at.parent_span_id == ancestor {
            return true;
        }
        match ids.get(&at.parent_span_id) {
            Some(parent) => at = parent,
            None => return false,
        }
    }
    false
}

#[tokio::test]
async fn spans_reach_an_otlp_grpc_collector_too() -> TestResult {
    let (url, received) = grpc_receiver().await;
    let settings = every_request(&url);
    let mut settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    settings.push("opentelemetry,protocol=grpc");
    settings.push("opentelemetry,resource=service.name=ranking");
    // Inline runs on: the fast path is traced as well.
    let server = TestServer::start_full(
        "examples/models",
        BatchSettings::default(),
        traced(&settings),
        None,
        Duration::from_secs(3600),
        |repository| repository,
    )
    .await;
    for (protocol, trace, parent) in one_request_per_protocol(&server).await {
        let spans = received.wait_for(&trace, complete(&parent)).await;
        check_trace(protocol, &spans, &parent);
    }
    assert!(received.services().iter().all(|s| s == "ranking"));
    server.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_collector_that_never_answers_costs_requests_nothing_and_drops_are_counted() -> TestResult
{
    let url = silent_collector().await;
    let settings = every_request(&url);
    let mut settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    // A small queue, so that it overflows while the export waits.
    settings.push("opentelemetry,bsp_max_queue_size=16");
    settings.push("opentelemetry,bsp_max_export_batch_size=8");
    let server = TestServer::start_with(
        "examples/models",
        BatchSettings::default(),
        traced(&settings),
    )
    .await;
    let http = reqwest::Client::new();
    let url = format!("{}/v2/models/ranker/infer", server.rest_url);
    let requests = (0..200).map(|_| {
        let (http, url) = (http.clone(), url.clone());
        async move { http.post(url).json(&kserve_json()).send().await }
    });
    for answer in futures::future::join_all(requests).await {
        assert_eq!(answer?.status(), 200);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let dropped = loop {
        let scrape = http
            .get(format!("{}/metrics", server.rest_url))
            .send()
            .await?
            .text()
            .await?;
        let dropped = scrape
            .lines()
            .find(|l| l.starts_with("tensorport_trace_spans_dropped_total "))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse::<f64>().ok())
            .unwrap_or(0.0);
        if dropped > 0.0 || tokio::time::Instant::now() > deadline {
            break dropped;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(dropped > 0.0, "no dropped spans counted");
    server.stop().await;
    Ok(())
}

/// The released binary as operators run it: its access log (stdout) names the trace id the
/// collector received, for a client that sent a `traceparent` and for one that sent none.
#[tokio::test]
async fn the_access_log_line_carries_the_exported_trace_id() -> TestResult {
    let (url, received) = http_receiver().await;
    let mut command = Command::new(env!("CARGO_BIN_EXE_tensorport"));
    command
        .args(["serve", "--model-dir"])
        .arg(repo_path("examples/models"))
        .args([
            "--host",
            "127.0.0.1",
            "--rest-port",
            "0",
            "--grpc-port",
            "0",
        ])
        .args(["--access-log", "json"])
        .args([
            "--trace-config",
            "mode=opentelemetry",
            "--trace-config",
            "rate=1",
        ])
        .args(["--trace-config", "level=TIMESTAMPS"])
        .args(["--trace-config", "opentelemetry,bsp_schedule_delay=50"])
        .arg("--trace-config")
        .arg(format!(
            "opentelemetry,url={}",
            url.trim_start_matches("http://")
        ))
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn()?;
    let stderr = child.stderr.take().unwrap();
    let (rest_tx, rest_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let (false, Some(at)) = (sent, line.find("rest=")) {
                let addr: String = line[at + 5..]
                    .chars()
                    .take_while(|c| !c.is_whitespace())
                    .collect();
                let _ = rest_tx.send(addr);
                sent = true;
            }
        }
    });
    let stdout = child.stdout.take().unwrap();
    let (line_tx, line_rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = line_tx.send(line);
        }
    });
    let rest = rest_rx.recv_timeout(Duration::from_secs(120))?;
    let rest_url = format!("http://{rest}");
    let http = reqwest::Client::new();
    // The models load after the ports are bound.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !http
        .get(format!("{rest_url}/v2/models/ranker/ready"))
        .send()
        .await
        .is_ok_and(|r| r.status() == 200)
    {
        assert!(tokio::time::Instant::now() < deadline, "ranker never ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (header, trace, parent) = traceparent(0x55, 0xa5);
    let with_parent = http
        .post(format!("{rest_url}/v2/models/ranker/infer"))
        .header("x-request-id", "with-parent")
        .header("traceparent", &header)
        .json(&kserve_json())
        .send()
        .await?;
    assert_eq!(with_parent.status(), 200);
    let without = http
        .post(format!("{rest_url}/v2/models/ranker/infer"))
        .header("x-request-id", "no-parent")
        .json(&kserve_json())
        .send()
        .await?;
    assert_eq!(without.status(), 200);

    let mut logged = std::collections::HashMap::new();
    while logged.len() < 2 {
        let line = line_rx.recv_timeout(Duration::from_secs(60))?;
        let Ok(record) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if let Some(id @ ("with-parent" | "no-parent")) = record["request_id"].as_str() {
            logged.insert(
                id.to_owned(),
                record["trace_id"].as_str().map(str::to_owned),
            );
        }
    }
    assert_eq!(logged["with-parent"].as_deref(), Some(hex(&trace).as_str()));
    received.wait_for(&trace, complete(&parent)).await;
    let own = logged["no-parent"]
        .clone()
        .expect("a trace id without a traceparent");
    let own_id: Vec<u8> = (0..own.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&own[i..i + 2], 16).unwrap())
        .collect();
    let spans = received
        .wait_for(&own_id, |spans| {
            spans
                .iter()
                .any(|s| s.name == "request" && s.parent_span_id.is_empty())
        })
        .await;
    assert!(spans.len() >= 2, "{spans:#?}");
    let _ = child.kill();
    let _ = child.wait();
    Ok(())
}
