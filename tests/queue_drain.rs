//! The SIGTERM drain and dynamic batching: a request waiting in a batch queue for company is
//! run when the drain begins, not left to wait out its `max_queue_delay` past the drain's end.

// Test code fails loudly: a panic is a failed test with its message.
#![allow(clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::budget::TempRepo;
use common::{TestResult, TestServer};
use serde_json::{json, Value};
use tensorport::batcher::BatchSettings;
use tensorport::ServerOptions;

const ECHO: &str = "tests/models/echo_float32/1/model.onnx";

/// Waits until the echo model's queue holds `count` requests, as a scrape samples it.
async fn wait_queued(server: &TestServer, count: usize) -> TestResult {
    let line = format!("tensorport_queue_depth_requests{{model=\"echo\",version=\"1\"}} {count}\n");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = reqwest::get(format!("{}/metrics", server.rest_url))
            .await?
            .text()
            .await?;
        if text.contains(&line) {
            return Ok(());
        }
        assert!(Instant::now() < deadline, "never saw {line}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_queued_under_a_long_delay_is_answered_when_the_drain_begins() -> TestResult {
    let repo = TempRepo::new("drain-queue");
    // A batch waits an hour to fill; the drain lasts half a minute. Only a queue that stops
    // waiting when the drain begins answers the request before the drain cuts it off.
    repo.add(
        "echo",
        1,
        ECHO,
        Some("[batching]\nmax_batch_size = 8\nmax_queue_delay_us = 3600000000\n"),
    );
    let options = ServerOptions {
        drain: Duration::from_secs(30),
        ..ServerOptions::default()
    };
    let mut server = TestServer::start_with(repo.path(), BatchSettings::default(), options).await;
    let url = format!("{}/v2/models/echo/infer", server.rest_url);
    let body = json!({
        "inputs": [{ "name": "x", "datatype": "FP32", "shape": [2, 3], "data": [0, 1, 2, 3, 4, 5] }]
    });
    // The client gives up long after the drain has ended: the request is answered within the
    // drain, or never (the server holds it for the hour, or cuts it off at the drain's end).
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()?;
    let answer = tokio::spawn(async move { client.post(url).json(&body).send().await });
    wait_queued(&server, 1).await?;

    server.begin_stop();
    let answer = answer
        .await?
        .expect("the queued request is answered within the drain");
    assert_eq!(answer.status(), 200);
    let answer: Value = answer.json().await?;
    assert_eq!(answer["outputs"][0]["shape"], json!([2, 3]));
    assert_eq!(
        answer["outputs"][0]["data"],
        json!([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    );
    server.stop().await;
    Ok(())
}
