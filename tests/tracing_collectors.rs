//! The trace exporter against collectors written on raw sockets: one that answers an export
//! with an 8 GiB body (announced, or chunked without end) costs the server at most a bounded
//! read and a new connection; exports go out in origin form with a `Host` header, batch after
//! batch on one kept-alive connection, carrying the `OTEL_EXPORTER_OTLP_HEADERS`; and an
//! `https://` collector whose CA `OTEL_EXPORTER_OTLP_CERTIFICATE` names receives them over
//! TLS (OTLP/HTTP and OTLP/gRPC).

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use common::otlp::{
    collector_tls, grpc_receiver, grpc_receiver_tls, raw_collector, Answer, Received, HOSTILE_CAP,
};
use common::{TestResult, TestServer};
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::json;
use tensorport::batcher::BatchSettings;
use tensorport::trace::config::parse_entries;
use tensorport::trace::env;
use tensorport::trace::TraceConfig;
use tensorport::ServerOptions;

const FEATURES: usize = 16;

/// Answer bytes an exporter may leave in flight before it hangs up: what the kernel buffers
/// on both ends of a loopback connection (tcp_rmem and tcp_wmem at most 32 and 4 MiB here)
/// and the exporter's own bounded read, with room to spare; far below [`HOSTILE_CAP`].
const IN_FLIGHT: u64 = 64 << 20;

/// Serves the example models, tracing every request to `url` with the OpenTelemetry
/// variables `vars` (and no others) and `extra` `--trace-config` values.
async fn tracing_to(url: &str, extra: &[&str], vars: &[(&str, &str)]) -> TestServer {
    let mut values = vec![
        "mode=opentelemetry".to_owned(),
        "rate=1".to_owned(),
        "level=TIMESTAMPS".to_owned(),
        "opentelemetry,bsp_schedule_delay=20".to_owned(),
        format!("opentelemetry,url={url}"),
    ];
    values.extend(extra.iter().map(|v| (*v).to_owned()));
    let entries: Vec<_> = values
        .iter()
        .flat_map(|value| parse_entries(value).unwrap())
        .collect();
    let mut config = TraceConfig::from_entries(&entries, |name| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| (*v).to_owned())
    })
    .unwrap();
    // Long enough that the export timeout never ends a hostile answer first: what bounds the
    // bytes read must be the exporter's own limit.
    config.export.timeout = std::time::Duration::from_secs(120);
    TestServer::start_with(
        "examples/models",
        BatchSettings::default(),
        ServerOptions::default().with_trace(config),
    )
    .await
}

/// Sends one traced KServe request; waits until the collector has its root span.
async fn traced_request(server: &TestServer, received: &Received, n: u8) {
    let trace = [n; 16];
    let header = format!("00-{}-{}-01", hex(&trace), hex(&[n.wrapping_add(1); 8]));
    let answer = reqwest::Client::new()
        .post(format!("{}/v2/models/ranker/infer", server.rest_url))
        .header("traceparent", header)
        .json(&json!({"inputs": [{"name": "features", "datatype": "FP32",
                                  "shape": [1, FEATURES], "data": vec![0.5f32; FEATURES]}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    received
        .wait_for(&trace, |spans: &[Span]| {
            spans.iter().any(|s| s.name == "request")
        })
        .await;
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The attack of the security review: `200` with `Content-Length: 8 GiB`, then zeros.
#[tokio::test]
async fn an_8_gib_answer_is_not_read_past_a_bound_and_the_next_export_reconnects() -> TestResult {
    hostile_answer_is_bounded(Answer::Huge).await
}

#[tokio::test]
async fn an_endless_chunked_answer_is_not_read_past_a_bound() -> TestResult {
    hostile_answer_is_bounded(Answer::Endless).await
}

async fn hostile_answer_is_bounded(answer: Answer) -> TestResult {
    let mut collector = raw_collector(answer, None).await;
    let server = tracing_to(&collector.url, &[], &[]).await;
    traced_request(&server, &collector.received, 1).await;
    // The collector writes until the exporter hangs up: what it got written is at most
    // what the exporter read plus what the sockets hold.
    let written = collector.written.recv().await.unwrap();
    assert!(
        written < IN_FLIGHT,
        "{answer:?}: the collector wrote {written} bytes of answer (cap {HOSTILE_CAP}) before \
         the exporter hung up"
    );
    // The server still traces: the next export goes out on a new connection.
    traced_request(&server, &collector.received, 2).await;
    assert_eq!(
        collector.accepted.load(std::sync::atomic::Ordering::SeqCst),
        2
    );
    server.stop().await;
    Ok(())
}

#[tokio::test]
async fn batches_go_out_in_origin_form_on_one_kept_alive_connection() -> TestResult {
    let collector = raw_collector(Answer::Normal, None).await;
    let server = tracing_to(&collector.url, &[], &[]).await;
    for n in 1..=3 {
        traced_request(&server, &collector.received, n).await;
    }
    let requests = collector.received.requests();
    assert!(requests.len() >= 3, "{requests:?}");
    let authority = collector.url.trim_start_matches("http://");
    let authority = &authority[..authority.find('/').unwrap()];
    for seen in &requests {
        assert_eq!(seen.target, "/v1/traces");
        assert_eq!(seen.headers["host"], authority);
        assert_eq!(seen.headers["content-type"], "application/x-protobuf");
        assert_eq!(seen.connection, 0, "{requests:?}");
    }
    server.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_collector_that_closes_its_connections_gets_every_batch_on_a_new_one() -> TestResult {
    let collector = raw_collector(Answer::Close, None).await;
    let server = tracing_to(&collector.url, &[], &[]).await;
    for n in 1..=3 {
        traced_request(&server, &collector.received, n).await;
    }
    let requests = collector.received.requests();
    let connections: Vec<usize> = requests.iter().map(|seen| seen.connection).collect();
    assert_eq!(connections, (0..requests.len()).collect::<Vec<_>>());
    server.stop().await;
    Ok(())
}

#[tokio::test]
async fn the_otlp_headers_variable_reaches_the_collector() -> TestResult {
    let collector = raw_collector(Answer::Normal, None).await;
    let vars = [(env::HEADERS, "api-key=secret%20one , x-tenant=ranking")];
    let server = tracing_to(&collector.url, &[], &vars).await;
    traced_request(&server, &collector.received, 1).await;
    for seen in collector.received.requests() {
        assert_eq!(seen.headers["api-key"], "secret one");
        assert_eq!(seen.headers["x-tenant"], "ranking");
    }
    server.stop().await;
    Ok(())
}

#[tokio::test]
async fn the_otlp_headers_reach_a_grpc_collector_as_metadata() -> TestResult {
    let (url, received) = grpc_receiver().await;
    let vars = [(env::TRACES_HEADERS, "api-key=secret%20two")];
    let server = tracing_to(&url, &["opentelemetry,protocol=grpc"], &vars).await;
    traced_request(&server, &received, 1).await;
    let requests = received.requests();
    assert!(!requests.is_empty());
    for seen in requests {
        assert_eq!(seen.headers["api-key"], "secret two");
    }
    server.stop().await;
    Ok(())
}

#[tokio::test]
async fn an_https_collector_trusted_through_the_certificate_variable_gets_the_spans() -> TestResult
{
    let (acceptor, ca) = collector_tls("otlp-https", &[b"http/1.1"]);
    let collector = raw_collector(Answer::Normal, Some(acceptor)).await;
    assert!(collector.url.starts_with("https://"));
    let ca = ca.to_string_lossy().into_owned();
    let server = tracing_to(&collector.url, &[], &[(env::CERTIFICATE, &ca)]).await;
    for n in 1..=2 {
        traced_request(&server, &collector.received, n).await;
    }
    for seen in collector.received.requests() {
        assert_eq!(seen.target, "/v1/traces");
        assert_eq!(seen.connection, 0);
    }
    server.stop().await;
    Ok(())
}

#[tokio::test]
async fn an_https_grpc_collector_gets_the_spans_and_the_headers() -> TestResult {
    let (acceptor, ca) = collector_tls("otlp-grpcs", &[b"h2"]);
    let (url, received) = grpc_receiver_tls(acceptor).await;
    let ca = ca.to_string_lossy().into_owned();
    let vars = [
        (env::TRACES_CERTIFICATE, ca.as_str()),
        (env::HEADERS, "api-key=secret%20three"),
    ];
    let server = tracing_to(&url, &["opentelemetry,protocol=grpc"], &vars).await;
    traced_request(&server, &received, 1).await;
    for seen in received.requests() {
        assert_eq!(seen.headers["api-key"], "secret three");
    }
    server.stop().await;
    Ok(())
}

#[tokio::test]
async fn an_https_collector_signed_by_another_ca_gets_nothing() -> TestResult {
    let (acceptor, _) = collector_tls("otlp-https-theirs", &[b"http/1.1"]);
    let (_, ours) = collector_tls("otlp-https-ours", &[b"http/1.1"]);
    let mut collector = raw_collector(Answer::Normal, Some(acceptor)).await;
    let ours = ours.to_string_lossy().into_owned();
    let server = tracing_to(&collector.url, &[], &[(env::CERTIFICATE, &ours)]).await;
    let answer = reqwest::Client::new()
        .post(format!("{}/v2/models/ranker/infer", server.rest_url))
        .json(&json!({"inputs": [{"name": "features", "datatype": "FP32",
                                  "shape": [1, FEATURES], "data": vec![0.5f32; FEATURES]}]}))
        .send()
        .await?;
    assert_eq!(answer.status(), 200);
    // The exporter refuses the collector's certificate: the handshake fails, nothing is sent.
    collector.refused.recv().await.unwrap();
    assert!(collector.received.requests().is_empty());
    server.stop().await;
    Ok(())
}
