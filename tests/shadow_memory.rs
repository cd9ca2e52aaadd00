//! What shadow copies hold, against the real server on loopback: a copy is charged to the
//! request memory budget (`--max-inflight-request-bytes`) from the moment it is queued until
//! it has run and been compared, a copy that does not fit what is left of the budget is
//! dropped and counted, and the copies queued or running are bounded in bytes, not only in
//! number. The copies' target is held busy by a gate that lets runs through by their tag (the
//! first value of `x`), so each step happens in the order the test sets.

// Test code fails loudly: a panic is a failed test with its message.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::budget::TempRepo;
use common::gate::{Gate, OpenOnDrop};
use common::{TestResult, TestServer};
use serde_json::json;
use tensorport::batcher::BatchSettings;
use tensorport::metrics::{Metrics, ShadowDropReason};
use tensorport::overload::OverloadSettings;
use tensorport::transport::footprint;
use tensorport::ServerOptions;

const ECHO: &str = "tests/models/echo_float32/1/model.onnx";

/// Both versions served; every request to version 1 gets a copy on version 2.
const SHADOWED: &str =
    "[version_policy]\nall = true\n\n[traffic.shadow]\ntarget = \"2\"\npercent = 100\n";

/// Elements of each request's one input.
const ELEMENTS: usize = 4096;

/// What a copy of one request is charged: its input `x` and the primary's output `y`, each
/// its bytes and its name, and as much as the primary's output again for the copy's own.
const COPY_BYTES: u64 = (4 * ELEMENTS as u64 + 1) + 2 * (4 * ELEMENTS as u64 + 1);

/// How long a test waits for the server to reach a state before it fails; nothing depends on
/// the wait being short.
const EVENT_WAIT: Duration = Duration::from_secs(60);

/// `echo` versions 1 and 2, copies of version 1's requests to version 2, both behind a closed
/// gate; the server's budget is `budget` bytes (0: none) and the copies' queue `queue_bytes`.
async fn shadow_server(repo: &TempRepo, budget: u64, queue_bytes: u64) -> (TestServer, OpenOnDrop) {
    repo.add("echo", 1, ECHO, Some(SHADOWED));
    repo.add("echo", 2, ECHO, Some(SHADOWED));
    let gate = Gate::new();
    let options = ServerOptions {
        overload: OverloadSettings {
            max_inflight_request_bytes: budget,
            ..OverloadSettings::default()
        },
        ..ServerOptions::default()
    };
    let server = TestServer::start_serving(
        repo.path(),
        BatchSettings::default(),
        options,
        Some(gate.decorator("echo")),
        Duration::ZERO,
        |repository| repository,
        // More CPUs than the machine has: the copies' CPU checks never drop one here, so
        // what drops a copy is what the test arranges.
        |infer| infer.with_shadow(|shadow| shadow.with_cpus(64).with_queue_bytes(queue_bytes)),
    )
    .await;
    gate.close();
    (server, OpenOnDrop(gate))
}

fn body(tag: f32) -> Vec<u8> {
    serde_json::to_vec(&json!({"inputs": [{
        "name": "x", "shape": [1, ELEMENTS], "datatype": "FP32", "data": vec![tag; ELEMENTS]
    }]}))
    .unwrap()
}

/// Sends request `tag` to version 1, lets its run through the gate, and returns the status.
async fn answered(server: &TestServer, gate: &Gate, tag: f32) -> u16 {
    let url = format!("{}/v2/models/echo/versions/1/infer", server.rest_url);
    let waiting = gate.arrivals().len();
    let send = tokio::spawn(async move {
        reqwest::Client::new()
            .post(url)
            .header("content-type", "application/json")
            .body(body(tag))
            .send()
            .await
    });
    gate.wait_for_arrivals(waiting + 1).await;
    gate.release_tag(tag);
    send.await.unwrap().unwrap().status().as_u16()
}

/// Waits until `done` holds of the server's metrics.
async fn wait_for(metrics: &Metrics, what: &str, done: impl Fn(&Metrics) -> bool) {
    let deadline = Instant::now() + EVENT_WAIT;
    while !done(metrics) {
        assert!(Instant::now() < deadline, "never saw {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn budget_used(metrics: &Metrics) -> u64 {
    u64::try_from(metrics.request_memory().get()).unwrap()
}

fn dropped(metrics: &Metrics, reason: ShadowDropReason) -> u64 {
    metrics.traffic().shadow_dropped("echo", reason)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_copy_holds_its_charge_on_the_budget_until_it_has_run() -> TestResult {
    let repo = TempRepo::new("shadow-charge");
    let (server, gate) = shadow_server(&repo, 64 << 20, 1 << 30).await;
    let metrics = server.metrics.clone();

    assert_eq!(answered(&server, &gate, 1.0).await, 200);
    // The copy reached its target, which the gate holds: the primary's own charges are
    // given back, and the copy's input and both answers are what the budget still holds.
    gate.wait_for_arrivals(2).await;
    wait_for(&metrics, "the copy's charge alone", |m| {
        budget_used(m) == COPY_BYTES
    })
    .await;
    assert_eq!(metrics.traffic().shadow_sent("echo"), 1);

    gate.open();
    wait_for(&metrics, "the charge given back", |m| budget_used(m) == 0).await;
    for reason in ShadowDropReason::ALL {
        assert_eq!(dropped(&metrics, reason), 0, "{reason:?}");
    }
    assert_eq!(gate.arrivals(), vec![1.0, 1.0]);
    drop(gate);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_that_does_not_fit_the_budget_is_dropped_and_counted() -> TestResult {
    let repo = TempRepo::new("shadow-budget");
    // The primary's admission fits; with the copy beside it, the budget would not.
    let admitted = footprint::http(&http::HeaderMap::new(), &body(1.0));
    let (server, gate) = shadow_server(&repo, admitted + COPY_BYTES / 2, 1 << 30).await;
    let metrics = server.metrics.clone();

    assert_eq!(answered(&server, &gate, 1.0).await, 200);
    // The copy was offered before the answer left, so it is counted by now.
    assert_eq!(dropped(&metrics, ShadowDropReason::Memory), 1);
    assert_eq!(metrics.traffic().shadow_sent("echo"), 0);
    wait_for(&metrics, "the budget empty", |m| budget_used(m) == 0).await;

    // The dropped copy took nothing: a request that fits is still served.
    assert_eq!(answered(&server, &gate, 2.0).await, 200);
    assert_eq!(dropped(&metrics, ShadowDropReason::Memory), 2);
    assert_eq!(gate.arrivals(), vec![1.0, 2.0]);
    drop(gate);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_queued_or_running_are_bounded_in_bytes() -> TestResult {
    let repo = TempRepo::new("shadow-queue-bytes");
    // No budget: the copies' own bound is all that stops them. Room for two copies.
    let (server, gate) = shadow_server(&repo, 0, 2 * COPY_BYTES).await;
    let metrics = server.metrics.clone();

    // The first copy runs and waits at the gate; the second waits in the queue.
    assert_eq!(answered(&server, &gate, 1.0).await, 200);
    gate.wait_for_arrivals(2).await;
    assert_eq!(answered(&server, &gate, 2.0).await, 200);
    assert_eq!(dropped(&metrics, ShadowDropReason::QueueFull), 0);
    // A third would take the copies past their bytes, though the queue has 62 places left.
    assert_eq!(answered(&server, &gate, 3.0).await, 200);
    assert_eq!(dropped(&metrics, ShadowDropReason::QueueFull), 1);

    gate.open();
    wait_for(&metrics, "both copies run", |m| {
        m.traffic().shadow_sent("echo") == 2
    })
    .await;
    // The bound was given back: a copy fits again.
    gate.close();
    assert_eq!(answered(&server, &gate, 4.0).await, 200);
    gate.open();
    wait_for(&metrics, "the fourth copy run", |m| {
        m.traffic().shadow_sent("echo") == 3
    })
    .await;
    assert_eq!(dropped(&metrics, ShadowDropReason::QueueFull), 1);
    drop(gate);
    server.stop().await;
    Ok(())
}
