//! Answers a client never reads, against the real server on loopback: they stay charged to
//! the request memory budget (`--max-inflight-request-bytes`) until their bytes are written,
//! and the send timeout (`--send-timeout-secs`) cuts them off: an HTTP/2 stream whose answer
//! the client makes no room for is reset, an HTTP/1 connection whose socket takes nothing is
//! closed. A request that needs the budget is refused while they are held and admitted once
//! they are gone. What the tests wait for they read from the server's metrics (the budget's
//! gauge, the cut-off counters) or from the client's own connection; no test sleeps for a
//! timer to have run.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::{TestResult, TestServer};
use tensorport::batcher::BatchSettings;
use tensorport::overload::OverloadSettings;
use tensorport::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorport::proto::inference::model_infer_request::InferInputTensor;
use tensorport::proto::inference::ModelInferRequest;
use tensorport::transport::TransportSettings;
use tensorport::ServerOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const MODELS: &str = "tests/models";
/// Only a bound on how long a broken server may hang a test; nothing waits for it to pass.
const HANG: Duration = Duration::from_secs(60);
const MIB: usize = 1 << 20;

async fn start(budget: usize, send_timeout: Duration) -> TestServer {
    let options = ServerOptions {
        overload: OverloadSettings {
            max_inflight_request_bytes: budget as u64,
            ..OverloadSettings::default()
        },
        transport: TransportSettings {
            send_timeout,
            ..TransportSettings::default()
        },
        ..ServerOptions::default()
    };
    TestServer::start_with(MODELS, BatchSettings::default(), options).await
}

fn host(url: &str) -> &str {
    url.trim_start_matches("http://")
}

/// `streams` KServe gRPC calls for 1 MiB answers on one HTTP/2 connection whose client makes
/// no room for any answer (its window is 0): the calls' answers, as the client awaits them.
async fn ask_for_answers_never_read(
    server: &TestServer,
    streams: usize,
) -> Result<Vec<h2::client::ResponseFuture>, Box<dyn std::error::Error>> {
    let tcp = TcpStream::connect(host(&server.grpc_url)).await?;
    let (client, connection) = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, bytes::Bytes>(tcp)
        .await?;
    tokio::spawn(connection);
    let mut client = client.ready().await?;
    let mut answers = Vec::new();
    for _ in 0..streams {
        let request = http::Request::post(format!(
            "{}/inference.GRPCInferenceService/ModelInfer",
            server.grpc_url
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())?;
        let (response, mut send) = client.send_request(request, false)?;
        send.send_data(grpc_frame(&echo(MIB)), true)?;
        answers.push(response);
        client = client.ready().await?;
    }
    Ok(answers)
}

/// Waits (polling) until `what` holds; fails after [`HANG`].
async fn until(what: impl Fn() -> bool, why: &str) {
    let start = Instant::now();
    while !what() {
        assert!(start.elapsed() < HANG, "never happened: {why}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `echo_float32` of `bytes` bytes of floats, whose answer is as large.
fn echo(bytes: usize) -> ModelInferRequest {
    let floats = bytes / 4;
    ModelInferRequest {
        model_name: "echo_float32".into(),
        inputs: vec![InferInputTensor {
            name: "x".into(),
            datatype: "FP32".into(),
            shape: vec![1, i64::try_from(floats).unwrap()],
            ..Default::default()
        }],
        raw_input_contents: vec![bytes::Bytes::from(vec![0u8; floats * 4])],
        ..Default::default()
    }
}

fn grpc_frame(message: &impl prost::Message) -> bytes::Bytes {
    let body = message.encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend_from_slice(&u32::try_from(body.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(&body);
    frame.into()
}

async fn kserve_client(
    server: &TestServer,
) -> GrpcInferenceServiceClient<tonic::transport::Channel> {
    GrpcInferenceServiceClient::connect(server.grpc_url.clone())
        .await
        .expect("connect")
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX)
}

/// A client opens four streams asking for 1 MiB answers and gives them no room in its
/// window (its initial stream window is 0, and it never sends WINDOW_UPDATE; h2 answers the
/// server's pings). Before the fix the answers' charge was given back once they were built,
/// so the request below was admitted, and the streams were held for as long as the
/// connection lived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_an_http2_client_makes_no_room_for_stay_charged_until_their_streams_are_reset(
) -> TestResult {
    let budget = 16 * MIB;
    let server = start(budget, Duration::from_secs(1)).await;
    let memory = server.metrics.request_memory();
    let in_flight = server.metrics.in_flight();
    let resets = server.metrics.send_timeouts().streams;

    let answers = ask_for_answers_never_read(&server, 4).await?;
    let mut bodies = Vec::new();
    for response in answers {
        let response = tokio::time::timeout(HANG, response).await??;
        assert_eq!(response.status(), 200);
        bodies.push(response.into_body());
    }
    // The four answers, built and unsent, are charged (nothing else is in flight).
    until(
        || in_flight.get() == 0 && memory.get() >= 4 * MIB as i64,
        "the unsent answers are charged",
    )
    .await;

    // 13 MiB of budget (6.5 MiB of floats, charged twice) does not fit beside them.
    let mut kserve = kserve_client(&server).await;
    let refused = kserve
        .model_infer(echo(13 * MIB / 2))
        .await
        .expect_err("refused while the answers are held");
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );

    // The send timeout resets every stream (awaited on the client's side)...
    for mut body in bodies {
        let data = tokio::time::timeout(HANG, body.data())
            .await
            .expect("the server resets the stream");
        match data {
            Some(Err(err)) => assert_eq!(err.reason(), Some(h2::Reason::CANCEL), "{err:?}"),
            other => panic!("expected a reset, got {other:?}"),
        }
    }
    assert_eq!(resets.get(), 4);
    // ...and their charge was given back before: the request is admitted now.
    assert_eq!(memory.get(), 0);
    let answer = kserve.model_infer(echo(13 * MIB / 2)).await?.into_inner();
    assert_eq!(answer.raw_output_contents[0].len(), 13 * MIB / 2);
    // An answer that was read is charged no longer.
    until(
        || memory.get() == 0,
        "the read answer's charge is given back",
    )
    .await;
    server.stop().await;
    Ok(())
}

/// A stalled client's answers, once the send timeout has reset them, leave memory that the
/// server's allocator would keep for good; once the server is idle it gives it back, counted
/// in `tensorport_memory_trims_total` (what it gives back is measured against the real
/// binary, whose allocator `main` tunes, in tests/python/test_stalled_client_memory.py).
/// Before the fix nothing was ever trimmed after request traffic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_a_stalled_client_made_the_server_take_is_given_back_once_idle() -> TestResult {
    const STREAMS: usize = 32;
    let server = start(256 * MIB, Duration::from_secs(1)).await;
    let memory = server.metrics.request_memory();
    let resets = server.metrics.send_timeouts().streams;
    let trims = server.metrics.memory_trims();
    assert_eq!(trims.get(), 0);

    let answers = ask_for_answers_never_read(&server, STREAMS).await?;
    for response in answers {
        let response = tokio::time::timeout(HANG, response).await??;
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        let data = tokio::time::timeout(HANG, body.data())
            .await
            .expect("the server resets the stream");
        assert!(matches!(data, Some(Err(_))), "expected a reset: {data:?}");
    }
    assert_eq!(resets.get(), STREAMS as u64);
    until(
        || memory.get() == 0,
        "the reset answers' charge is given back",
    )
    .await;
    until(|| trims.get() >= 1, "the idle server gives memory back").await;
    server.stop().await;
    Ok(())
}

/// An HTTP/1 client asks for an 8 MiB answer (KServe's binary extension) and reads nothing,
/// with a small receive buffer, so the server's socket fills and then refuses the rest.
/// Before the fix the answer was uncounted once built, and the connection was held until
/// the idle and header timeouts had both run (70 s by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_client_that_reads_nothing_holds_its_answer_charged_until_it_is_cut_off(
) -> TestResult {
    let budget = 20 * MIB;
    let server = start(budget, Duration::from_secs(1)).await;
    let memory = server.metrics.request_memory();
    let in_flight = server.metrics.in_flight();
    let closed = server.metrics.send_timeouts().connections;

    let binary = |bytes: usize| {
        let header = serde_json::json!({
            "inputs": [{"name": "x", "shape": [1, bytes / 4], "datatype": "FP32",
                        "parameters": {"binary_data_size": bytes}}],
            "parameters": {"binary_data_output": true},
        })
        .to_string();
        let json_length = header.len();
        let mut body = header.into_bytes();
        body.resize(json_length + bytes, 0);
        (json_length, body)
    };
    let (json_length, body) = binary(8 * MIB);
    let socket = TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(4096)?;
    let mut stalled = socket.connect(host(&server.rest_url).parse()?).await?;
    let head = format!(
        "POST /v2/models/echo_float32/infer HTTP/1.1\r\nhost: x\r\n\
         content-type: application/octet-stream\r\n\
         inference-header-content-length: {json_length}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stalled.write_all(head.as_bytes()).await?;
    stalled.write_all(&body).await?;
    until(
        || in_flight.get() == 0 && memory.get() >= 8 * MIB as i64,
        "the unsent answer is charged",
    )
    .await;

    // 14 MiB of budget (7 MiB charged twice) does not fit beside it.
    let probe = |bytes: usize| {
        let url = format!("{}/v2/models/echo_float32/infer", server.rest_url);
        let (json_length, body) = binary(bytes);
        async move {
            reqwest::Client::new()
                .post(url)
                .header("inference-header-content-length", json_length.to_string())
                .body(body)
                .send()
                .await
                .map(|answer| answer.status().as_u16())
        }
    };
    assert_eq!(probe(7 * MIB).await?, 429);

    // The send timeout closes the connection, and gives its answer's charge back.
    until(|| closed.get() == 1, "the stalled connection is closed").await;
    until(|| memory.get() == 0, "the answer's charge is given back").await;
    assert_eq!(probe(7 * MIB).await?, 200);
    until(
        || memory.get() == 0,
        "the read answer's charge is given back",
    )
    .await;
    let mut rest = Vec::new();
    let read = tokio::time::timeout(HANG, stalled.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the connection was closed");
    assert!(rest.len() < 8 * MIB, "the answer was cut off");
    server.stop().await;
    Ok(())
}
