//! `ModelStreamInfer` under the overload limits, against the real server on loopback with a
//! real tonic client: each message of a stream is admitted as a call is (a concurrency slot,
//! a memory charge, its own deadline), refused in the stream when it does not fit, and
//! messages sent without waiting run at once. Runs stay in flight because the `spin` model's
//! runs wait at a [`Gate`] the test opens, never because a model is slow enough.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::gate::{Gate, OpenOnDrop};
use common::{TestResult, TestServer};
use futures::channel::mpsc;
use tensorport::batcher::BatchSettings;
use tensorport::metrics::{Metrics, RefusalReason};
use tensorport::overload::OverloadSettings;
use tensorport::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorport::proto::inference::model_infer_request::InferInputTensor;
use tensorport::proto::inference::{ModelInferRequest, ModelStreamInferResponse};
use tensorport::request::Protocol;
use tensorport::ServerOptions;
use tonic::transport::Channel;

const MODELS: &str = "tests/models";
/// How long a test waits for an answer before it fails; nothing depends on it being short.
const ANSWER_WAIT: Duration = Duration::from_secs(60);

/// A request for the spin model (one round) whose `x` input is `values` long and starts with
/// `tag`, the gate's record of which run reached the model.
fn spin(id: &str, tag: f32, values: usize) -> ModelInferRequest {
    let tensor = |name: &str, datatype: &str, len: usize| InferInputTensor {
        name: name.into(),
        datatype: datatype.into(),
        shape: vec![i64::try_from(len).unwrap()],
        ..Default::default()
    };
    let x: Vec<u8> = std::iter::once(tag)
        .chain(std::iter::repeat_n(0.5, values - 1))
        .flat_map(f32::to_le_bytes)
        .collect();
    ModelInferRequest {
        model_name: "spin".into(),
        id: id.into(),
        inputs: vec![tensor("x", "FP32", values), tensor("rounds", "INT64", 1)],
        raw_input_contents: vec![x.into(), 1i64.to_le_bytes().to_vec().into()],
        ..Default::default()
    }
}

/// A small request: one value.
fn small(id: &str, tag: f32) -> ModelInferRequest {
    spin(id, tag, 1)
}

/// 256 Ki values: a 1 MiB message, charged about 2 MiB.
const LARGE: usize = 256 << 10;

/// One open stream: what the test sends on it, and the answers.
struct Stream {
    send: mpsc::UnboundedSender<ModelInferRequest>,
    answers: tonic::Streaming<ModelStreamInferResponse>,
}

impl Stream {
    async fn open(client: &GrpcInferenceServiceClient<Channel>) -> Self {
        let (send, messages) = mpsc::unbounded();
        let answers = client
            .clone()
            .model_stream_infer(messages)
            .await
            .expect("the stream opens")
            .into_inner();
        Self { send, answers }
    }

    fn send(&self, message: ModelInferRequest) {
        self.send
            .unbounded_send(message)
            .expect("the stream is open");
    }

    async fn answer(&mut self) -> ModelStreamInferResponse {
        tokio::time::timeout(ANSWER_WAIT, self.answers.message())
            .await
            .expect("an answer in time")
            .expect("the stream still answers")
            .expect("the stream did not end")
    }
}

/// The id a stream's answer echoes.
fn id(answer: &ModelStreamInferResponse) -> &str {
    answer.infer_response.as_ref().map_or("", |r| r.id.as_str())
}

/// The first value of the answer's `y` output.
fn first_y(answer: &ModelStreamInferResponse) -> Option<f32> {
    let raw = answer
        .infer_response
        .as_ref()?
        .raw_output_contents
        .first()?;
    Some(f32::from_le_bytes(raw.get(..4)?.try_into().ok()?))
}

/// Starts the server with the spin model's runs held at a closed gate (warmup ran while it
/// was open); the gate opens when the returned handle drops.
async fn start_gated(overload: OverloadSettings) -> (TestServer, OpenOnDrop) {
    let gate = Gate::new();
    let options = ServerOptions {
        overload,
        ..ServerOptions::default()
    };
    let server = TestServer::start_decorated(
        MODELS,
        BatchSettings::default(),
        options,
        Some(gate.decorator("spin")),
    )
    .await;
    gate.close();
    (server, OpenOnDrop(gate))
}

async fn kserve(server: &TestServer) -> GrpcInferenceServiceClient<Channel> {
    GrpcInferenceServiceClient::connect(server.grpc_url.clone())
        .await
        .expect("gRPC connects")
}

/// Waits until `count` requests are in flight (admitted by the concurrency layer).
async fn wait_in_flight(metrics: &Metrics, count: usize) {
    let line = format!("tensorport_requests_in_flight {count}\n");
    let deadline = Instant::now() + ANSWER_WAIT;
    while !metrics.encode().contains(&line) {
        assert!(Instant::now() < deadline, "never saw {line}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Waits until the spin model's queue holds `count` requests.
async fn wait_queued(server: &TestServer, count: usize) {
    let url = format!("{}/metrics", server.rest_url);
    let line = format!("tensorport_queue_depth_requests{{model=\"spin\",version=\"1\"}} {count}\n");
    let deadline = Instant::now() + ANSWER_WAIT;
    // A scrape samples the queue depths.
    while !reqwest::get(&url)
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
        .contains(&line)
    {
        assert!(Instant::now() < deadline, "never saw {line}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_messages_take_concurrency_slots_and_past_the_limit_are_refused_in_the_stream(
) -> TestResult {
    let (server, gate) = start_gated(OverloadSettings {
        max_concurrent_requests: 3,
        ..OverloadSettings::default()
    })
    .await;
    let mut client = kserve(&server).await;
    let mut streams = Vec::new();
    for _ in 0..4 {
        streams.push(Stream::open(&client).await);
    }
    // Four idle streams, three slots: an open stream holds none, so a call still gets one.
    gate.release(1);
    client.model_infer(small("call", 0.0)).await?;

    // Each message takes a slot: one runs (held at the gate), two wait in the queue.
    for (n, stream) in streams.iter().take(3).enumerate() {
        let tag = n as f32 + 1.0;
        stream.send(small(&format!("s{n}"), tag));
        wait_in_flight(&server.metrics, n + 1).await;
    }
    gate.wait_for_waiting(1).await;
    wait_queued(&server, 2).await;

    // The fourth stream's message finds no slot: refused in the stream, which stays open.
    streams[3].send(small("over", 4.0));
    let refused = streams[3].answer().await;
    assert!(
        refused
            .error_message
            .starts_with("RESOURCE_EXHAUSTED: the server is at its limit of 3 requests"),
        "{refused:?}"
    );
    assert_eq!(id(&refused), "over");
    // The messages hold their slots against calls too.
    let call = client.model_infer(small("late call", 5.0)).await;
    assert_eq!(
        call.map_err(|status| status.code()).err(),
        Some(tonic::Code::ResourceExhausted)
    );
    assert_eq!(
        server
            .metrics
            .refusals(RefusalReason::Concurrency, Protocol::KserveGrpc),
        2
    );

    // (Released rather than opened, so that the gate still records what reaches the model.)
    gate.release(3);
    for (n, stream) in streams.iter_mut().take(3).enumerate() {
        let answer = stream.answer().await;
        assert_eq!(answer.error_message, "", "{answer:?}");
        assert_eq!(id(&answer), format!("s{n}"));
    }
    // Every slot is given back once the answers have gone, and the refused stream's next
    // message runs.
    wait_in_flight(&server.metrics, 0).await;
    gate.release(1);
    streams[3].send(small("again", 6.0));
    let answer = streams[3].answer().await;
    assert_eq!((answer.error_message.as_str(), id(&answer)), ("", "again"));
    assert_eq!(first_y(&answer), Some(6.0));
    assert_eq!(gate.arrivals(), vec![0.0, 1.0, 2.0, 3.0, 6.0]);
    drop(streams);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_messages_are_charged_to_the_request_memory_budget() -> TestResult {
    // Room for two large messages (about 2 MiB each once decoded), not three.
    let (server, gate) = start_gated(OverloadSettings {
        max_inflight_request_bytes: 5 << 20,
        ..OverloadSettings::default()
    })
    .await;
    let mut client = kserve(&server).await;
    let mut streams = Vec::new();
    for _ in 0..3 {
        streams.push(Stream::open(&client).await);
    }
    streams[0].send(spin("big0", 1.0, LARGE));
    gate.wait_for_waiting(1).await;
    streams[1].send(spin("big1", 2.0, LARGE));
    wait_queued(&server, 1).await;
    wait_in_flight(&server.metrics, 2).await;

    // The third large message does not fit what the two in flight left.
    streams[2].send(spin("big2", 3.0, LARGE));
    let refused = streams[2].answer().await;
    assert!(
        refused
            .error_message
            .starts_with("RESOURCE_EXHAUSTED: the request would take")
            && refused.error_message.contains("byte budget"),
        "{}",
        refused.error_message
    );
    assert_eq!(id(&refused), "big2");
    // Nor does a large call: the messages' charges are the same budget's.
    let call = client.model_infer(spin("big call", 4.0, LARGE)).await;
    assert_eq!(
        call.map_err(|status| status.code()).err(),
        Some(tonic::Code::ResourceExhausted)
    );
    // A small message fits, on the same stream, which stayed open.
    streams[2].send(small("small", 5.0));
    wait_in_flight(&server.metrics, 3).await;
    assert_eq!(
        server
            .metrics
            .refusals(RefusalReason::Memory, Protocol::KserveGrpc),
        2
    );

    gate.open();
    let mut answered = HashMap::new();
    for stream in streams.iter_mut() {
        let answer = stream.answer().await;
        assert_eq!(answer.error_message, "", "{answer:?}");
        answered.insert(id(&answer).to_owned(), first_y(&answer));
    }
    assert_eq!(
        answered,
        HashMap::from([
            ("big0".to_owned(), Some(1.0)),
            ("big1".to_owned(), Some(2.0)),
            ("small".to_owned(), Some(5.0)),
        ])
    );
    // Once the answers have gone the charges are back: the refused message now fits.
    wait_in_flight(&server.metrics, 0).await;
    streams[2].send(spin("big2 again", 3.0, LARGE));
    let answer = streams[2].answer().await;
    assert_eq!(
        (answer.error_message.as_str(), id(&answer)),
        ("", "big2 again")
    );
    drop(streams);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_sent_without_waiting_run_at_once_and_are_answered_by_id() -> TestResult {
    let (server, gate) = start_gated(OverloadSettings::default()).await;
    let client = kserve(&server).await;
    let mut stream = Stream::open(&client).await;
    for n in 1..=4 {
        stream.send(small(&format!("p{n}"), n as f32));
    }
    // All four are in the server at once: one at the gate, three queued behind it.
    gate.wait_for_waiting(1).await;
    wait_queued(&server, 3).await;
    wait_in_flight(&server.metrics, 4).await;

    gate.open();
    let mut answered = HashMap::new();
    for _ in 1..=4 {
        let answer = stream.answer().await;
        assert_eq!(answer.error_message, "", "{answer:?}");
        answered.insert(id(&answer).to_owned(), first_y(&answer));
    }
    let expected = (1..=4)
        .map(|n| (format!("p{n}"), Some(n as f32)))
        .collect::<HashMap<_, _>>();
    assert_eq!(answered, expected);
    drop(stream);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_message_has_its_own_deadline_from_its_arrival() -> TestResult {
    let timeout = Duration::from_millis(500);
    let (server, gate) = start_gated(OverloadSettings {
        request_timeout: Some(timeout),
        ..OverloadSettings::default()
    })
    .await;
    let client = kserve(&server).await;
    let opened = Instant::now();
    let mut stream = Stream::open(&client).await;
    // A call with a long deadline of its own holds the model.
    let held = tokio::spawn({
        let mut client = client.clone();
        let mut call = tonic::Request::new(small("held", 1.0));
        call.set_timeout(Duration::from_secs(600));
        async move { client.model_infer(call).await }
    });
    gate.wait_for_waiting(1).await;

    // A message queued behind it past the server's default timeout is answered in the stream
    // at its deadline, without waiting for the run ahead of it.
    stream.send(small("late", 2.0));
    let late = stream.answer().await;
    assert!(
        late.error_message.to_lowercase().contains("deadline"),
        "{late:?}"
    );
    assert_eq!(id(&late), "late");
    assert!(!held.is_finished());
    gate.release(1);
    held.await??;

    // The stream is now older than the default timeout; a new message still has its own.
    assert!(opened.elapsed() > timeout);
    gate.release(1);
    stream.send(small("fresh", 3.0));
    let fresh = stream.answer().await;
    assert_eq!((fresh.error_message.as_str(), id(&fresh)), ("", "fresh"));
    assert_eq!(gate.arrivals(), vec![1.0, 3.0]);
    assert_eq!(
        server
            .metrics
            .refusals(RefusalReason::Deadline, Protocol::KserveGrpc),
        1
    );
    drop(stream);
    server.stop().await;
    Ok(())
}
