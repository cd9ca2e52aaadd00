//! KServe BYTES inputs sent as length-prefixed raw bytes (gRPC `raw_input_contents`, the HTTP
//! binary extension, a shared-memory window) against the real server on loopback: data that
//! goes on past its declared shape is refused without being read to its end, and what a valid
//! input holds once decoded (an offset per element here, a string per element in the runtime)
//! is charged to `--max-inflight-request-bytes` before it is built, however small the body
//! that carried it. Requests stay in flight where a test needs it because `echo_string`'s runs
//! wait at a gate the test opens.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::path::PathBuf;

use bytes::Bytes;
use common::gate::{Gate, OpenOnDrop};
use common::{TestResult, TestServer};
use tensorport::batcher::BatchSettings;
use tensorport::metrics::RefusalReason;
use tensorport::overload::OverloadSettings;
use tensorport::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorport::proto::inference::infer_parameter::ParameterChoice;
use tensorport::proto::inference::model_infer_request::InferInputTensor;
use tensorport::proto::inference::{
    InferParameter, ModelInferRequest, SystemSharedMemoryRegisterRequest,
    SystemSharedMemoryUnregisterRequest,
};
use tensorport::request::Protocol;
use tensorport::ServerOptions;
use tonic::transport::Channel;

const MODELS: &str = "tests/models";

fn with_budget(bytes: u64) -> ServerOptions {
    ServerOptions {
        overload: OverloadSettings {
            max_inflight_request_bytes: bytes,
            ..OverloadSettings::default()
        },
        ..ServerOptions::default()
    }
}

/// `elements` as KServe's raw BYTES: a 4-byte little-endian length before each.
fn length_prefixed<'e>(elements: impl IntoIterator<Item = &'e [u8]>) -> Vec<u8> {
    let mut raw = Vec::new();
    for element in elements {
        raw.extend_from_slice(&u32::try_from(element.len()).unwrap().to_le_bytes());
        raw.extend_from_slice(element);
    }
    raw
}

/// One empty element (all that shape [1, 1] declares), then `more` empty ones, then a length
/// prefix that claims 4 GiB. A decoder that reads past the declared element reaches the bad
/// prefix and complains about it; one that stops where the shape ends never sees it.
fn past_the_shape(more: usize) -> Vec<u8> {
    let mut raw = vec![0u8; 4 * (1 + more)];
    raw.extend_from_slice(&u32::MAX.to_le_bytes());
    raw
}

fn shape_of(count: usize) -> Vec<i64> {
    vec![1, i64::try_from(count).unwrap()]
}

fn raw_request(shape: Vec<i64>, raw: Vec<u8>) -> ModelInferRequest {
    ModelInferRequest {
        model_name: "echo_string".into(),
        inputs: vec![InferInputTensor {
            name: "x".into(),
            datatype: "BYTES".into(),
            shape,
            ..Default::default()
        }],
        raw_input_contents: vec![Bytes::from(raw)],
        ..Default::default()
    }
}

async fn grpc_client(server: &TestServer) -> GrpcInferenceServiceClient<Channel> {
    GrpcInferenceServiceClient::connect(server.grpc_url.clone())
        .await
        .expect("connect")
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX)
}

/// A KServe HTTP request with `raw` as the binary-extension data of BYTES input `x`.
async fn http_binary(
    server: &TestServer,
    shape: Vec<i64>,
    raw: Vec<u8>,
) -> reqwest::Result<reqwest::Response> {
    let header = serde_json::to_vec(&serde_json::json!({
        "inputs": [{"name": "x", "shape": shape, "datatype": "BYTES",
                    "parameters": {"binary_data_size": raw.len()}}],
        "outputs": [{"name": "y", "parameters": {"binary_data": true}}],
    }))
    .unwrap();
    let json_length = header.len();
    let mut body = header;
    body.extend_from_slice(&raw);
    reqwest::Client::new()
        .post(format!("{}/v2/models/echo_string/infer", server.rest_url))
        .header("inference-header-content-length", json_length)
        .header("content-type", "application/octet-stream")
        .body(body)
        .send()
        .await
}

/// A model folder of its own holding `echo_string` with two instances, so that a second
/// request can reach the runtime while the first is held at the gate; removed when dropped.
struct TwoInstances(PathBuf);

impl TwoInstances {
    fn new() -> std::io::Result<Self> {
        let dir = std::env::temp_dir().join(format!("tensorport-raw-bytes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let version = dir.join("echo_string").join("1");
        std::fs::create_dir_all(&version)?;
        std::fs::copy(
            common::repo_path("tests/models/echo_string/1/model.onnx"),
            version.join("model.onnx"),
        )?;
        std::fs::write(
            dir.join("echo_string").join("config.toml"),
            "[instances]\ncount = 2\n",
        )?;
        Ok(Self(dir))
    }

    fn path(&self) -> String {
        self.0.display().to_string()
    }
}

impl Drop for TwoInstances {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A file under /dev/shm holding `contents`, removed when dropped.
struct ShmObject {
    key: String,
    path: PathBuf,
}

impl ShmObject {
    fn new(tag: &str, contents: &[u8]) -> Self {
        let name = format!("tp_raw_bytes_{tag}_{}", std::process::id());
        let path = PathBuf::from("/dev/shm").join(&name);
        std::fs::write(&path, contents).expect("write /dev/shm object");
        Self {
            key: format!("/{name}"),
            path,
        }
    }
}

impl Drop for ShmObject {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

async fn register(
    client: &mut GrpcInferenceServiceClient<Channel>,
    region: &str,
    object: &ShmObject,
    byte_size: usize,
) -> TestResult {
    client
        .system_shared_memory_register(SystemSharedMemoryRegisterRequest {
            name: region.into(),
            key: object.key.clone(),
            offset: 0,
            byte_size: byte_size as u64,
        })
        .await?;
    Ok(())
}

async fn unregister(client: &mut GrpcInferenceServiceClient<Channel>, region: &str) -> TestResult {
    client
        .system_shared_memory_unregister(SystemSharedMemoryUnregisterRequest {
            name: region.into(),
        })
        .await?;
    Ok(())
}

/// Input `x` of `shape` read from `byte_size` bytes at the start of `region`.
fn shm_request(shape: Vec<i64>, region: &str, byte_size: usize) -> ModelInferRequest {
    let string = |s: &str| InferParameter {
        parameter_choice: Some(ParameterChoice::StringParam(s.to_owned())),
    };
    let int = |v: usize| InferParameter {
        parameter_choice: Some(ParameterChoice::Int64Param(i64::try_from(v).unwrap())),
    };
    let parameters = HashMap::from([
        ("shared_memory_region".to_owned(), string(region)),
        ("shared_memory_byte_size".to_owned(), int(byte_size)),
    ]);
    ModelInferRequest {
        model_name: "echo_string".into(),
        inputs: vec![InferInputTensor {
            name: "x".into(),
            datatype: "BYTES".into(),
            shape,
            parameters,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The refusal a request must get (a served answer, megabytes of echoed elements, is not
/// printed).
fn refusal<T>(answer: Result<tonic::Response<T>, tonic::Status>) -> tonic::Status {
    match answer {
        Ok(_) => panic!("served, not refused"),
        Err(status) => status,
    }
}

/// The refusal of data past the shape: INVALID_ARGUMENT naming the input, the declared count
/// and what follows it, and nothing about the bad prefix further on (which the decoder must
/// not have reached).
fn assert_stopped_at_the_shape(message: &str, more: usize) {
    let follows = format!("declares 1 BYTES elements but {} more bytes", 4 * more + 4);
    assert!(message.contains("input 'x'"), "{message}");
    assert!(message.contains(&follows), "{message}");
    assert!(!message.contains("claims"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_past_the_declared_shape_are_refused_without_being_read() -> TestResult {
    // Two million empty elements (8 MB) where the shape declares one.
    let more = 2_000_000;
    let server = TestServer::start_with(MODELS, BatchSettings::default(), with_budget(0)).await;

    let mut client = grpc_client(&server).await;
    let refused = refusal(
        client
            .model_infer(raw_request(shape_of(1), past_the_shape(more)))
            .await,
    );
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert_stopped_at_the_shape(refused.message(), more);

    let response = http_binary(&server, shape_of(1), past_the_shape(more)).await?;
    assert_eq!(response.status(), 400);
    let body: serde_json::Value = response.json().await?;
    assert_stopped_at_the_shape(body["error"].as_str().unwrap_or_default(), more);

    let object = ShmObject::new("past", &past_the_shape(more));
    let size = 4 * (2 + more);
    register(&mut client, "past", &object, size).await?;
    let refused = refusal(
        client
            .model_infer(shm_request(shape_of(1), "past", size))
            .await,
    );
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert_stopped_at_the_shape(refused.message(), more);
    unregister(&mut client, "past").await?;

    // Well-formed BYTES still echo back exactly, NUL and non-UTF-8 bytes included.
    let elements: [&[u8]; 3] = [b"ab", b"", &[0, 255]];
    let raw = length_prefixed(elements);
    let answer = client
        .model_infer(raw_request(shape_of(3), raw.clone()))
        .await?
        .into_inner();
    assert_eq!(answer.outputs[0].shape, shape_of(3));
    assert_eq!(answer.raw_output_contents[0], raw);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bytes_input_whose_decoded_form_exceeds_the_budget_is_refused_though_its_body_fits(
) -> TestResult {
    // A million empty elements: 4 MiB on the wire, charged 8 MiB at admission, and more than
    // 64 MiB once decoded (an offset each, and a string each in the runtime).
    let count = 1 << 20;
    let server =
        TestServer::start_with(MODELS, BatchSettings::default(), with_budget(64 << 20)).await;
    let raw = || vec![0u8; 4 * count];

    let mut client = grpc_client(&server).await;
    let refused = refusal(
        client
            .model_infer(raw_request(shape_of(count), raw()))
            .await,
    );
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(refused.message().contains("input 'x'"), "{refused:?}");
    assert!(refused.message().contains("once decoded"), "{refused:?}");

    let response = http_binary(&server, shape_of(count), raw()).await?;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "1");
    let body: serde_json::Value = response.json().await?;
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("budget"),
        "{body}"
    );

    // Counted as refusals for memory, like admission's own.
    for protocol in [Protocol::KserveGrpc, Protocol::KserveHttp] {
        assert_eq!(
            server.metrics.refusals(RefusalReason::Memory, protocol),
            1,
            "{protocol:?}"
        );
        assert_eq!(
            server.metrics.refusals(RefusalReason::QueueFull, protocol),
            0,
            "{protocol:?}"
        );
    }

    // Nothing was kept: a request that fits is served on both ports.
    let raw = length_prefixed([&b"a"[..], b"bc"]);
    let answer = client
        .model_infer(raw_request(shape_of(2), raw.clone()))
        .await?
        .into_inner();
    assert_eq!(answer.raw_output_contents[0], raw);
    let response = http_binary(&server, shape_of(2), raw.clone()).await?;
    assert_eq!(response.status(), 200);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_memory_bytes_input_is_charged_while_it_runs() -> TestResult {
    // 100 k empty elements: a 400 kB window named by a request of a few hundred bytes, and
    // about 9 MB once decoded. The budget has room for one such request, not two.
    let count = 100_000;
    let size = 4 * count;
    let gate = Gate::new();
    let models = TwoInstances::new()?;
    let server = TestServer::start_decorated(
        &models.path(),
        BatchSettings::default(),
        with_budget(12 << 20),
        Some(gate.decorator("echo_string")),
    )
    .await;
    let mut client = grpc_client(&server).await;
    let object = ShmObject::new("held", &vec![0u8; size]);
    register(&mut client, "held", &object, size).await?;
    gate.close();
    let gate = OpenOnDrop(gate);

    let held = tokio::spawn({
        let mut client = client.clone();
        async move {
            client
                .model_infer(shm_request(shape_of(count), "held", size))
                .await
        }
    });
    gate.wait_for_waiting(1).await;

    // Refused while the first holds its charge. Were it not charged, it would run on the
    // second instance and wait at the gate too: seen as a second run waiting there.
    let second = client.model_infer(shm_request(shape_of(count), "held", size));
    let refused = tokio::select! {
        answer = second => refusal(answer),
        () = gate.wait_for_waiting(2) => panic!("a second window was not charged: it reached the model"),
    };
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(refused.message().contains("once decoded"), "{refused:?}");
    assert_eq!(
        server
            .metrics
            .refusals(RefusalReason::Memory, Protocol::KserveGrpc),
        1
    );

    gate.open();
    let answer = held.await??.into_inner();
    assert_eq!(answer.outputs[0].shape, shape_of(count));
    // The held request's charge came back with its answer.
    let answer = client
        .model_infer(shm_request(shape_of(count), "held", size))
        .await?
        .into_inner();
    assert_eq!(answer.raw_output_contents[0].len(), size);

    // A window whose decoded form is more than the whole budget is refused outright.
    let big = 1 << 20;
    let object = ShmObject::new("big", &vec![0u8; 4 * big]);
    register(&mut client, "big", &object, 4 * big).await?;
    let refused = refusal(
        client
            .model_infer(shm_request(shape_of(big), "big", 4 * big))
            .await,
    );
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    unregister(&mut client, "big").await?;
    unregister(&mut client, "held").await?;
    drop(gate);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_message_whose_bytes_exceed_the_budget_once_decoded_is_refused_in_the_stream(
) -> TestResult {
    // As the call above, as one message of a ModelStreamInfer stream, which stays open.
    let count = 1 << 20;
    let server =
        TestServer::start_with(MODELS, BatchSettings::default(), with_budget(64 << 20)).await;
    let client = grpc_client(&server).await;
    let (send, messages) = futures::channel::mpsc::unbounded();
    let mut answers = client
        .clone()
        .model_stream_infer(messages)
        .await?
        .into_inner();
    let mut big = raw_request(shape_of(count), vec![0u8; 4 * count]);
    big.id = "big".into();
    send.unbounded_send(big)?;
    let refused = answers.message().await?.expect("an answer");
    assert!(
        refused.error_message.starts_with("RESOURCE_EXHAUSTED")
            && refused.error_message.contains("once decoded"),
        "{}",
        refused.error_message
    );
    assert_eq!(refused.infer_response.map(|r| r.id), Some("big".to_owned()));

    let raw = length_prefixed([&b"a"[..], b""]);
    send.unbounded_send(raw_request(shape_of(2), raw.clone()))?;
    let answer = answers.message().await?.expect("an answer");
    assert_eq!(answer.error_message, "");
    assert_eq!(
        answer.infer_response.map(|r| r.raw_output_contents),
        Some(vec![Bytes::from(raw)])
    );
    assert_eq!(
        server
            .metrics
            .refusals(RefusalReason::Memory, Protocol::KserveGrpc),
        1
    );
    drop(send);
    server.stop().await;
    Ok(())
}
