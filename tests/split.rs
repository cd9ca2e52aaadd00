//! `[batching] split_rows`: a request with more rows than that runs as pieces, on as many
//! instances as are free at once, and its answer is the pieces' outputs joined in order; a
//! piece that fails (here: past the request's deadline) fails the whole request.

// Test code fails loudly: a panic is a failed test with its message.
#![allow(clippy::expect_used)]

mod common;

use common::budget::TempRepo;
use common::gate::{Gate, OpenOnDrop};
use common::{TestResult, TestServer};
use serde_json::{json, Value};
use tensorport::batcher::BatchSettings;
use tensorport::ServerOptions;

const ECHO: &str = "tests/models/echo_float32/1/model.onnx";

/// A server over `echo` (y = x, x: FP32[-1, -1]) with `config`, its runs behind a gate.
async fn echo_server(repo: &TempRepo, config: &str) -> (TestServer, OpenOnDrop) {
    repo.add("echo", 1, ECHO, Some(config));
    let gate = Gate::new();
    let server = TestServer::start_decorated(
        repo.path(),
        BatchSettings::default(),
        ServerOptions::default(),
        Some(gate.decorator("echo")),
    )
    .await;
    (server, OpenOnDrop(gate))
}

/// `rows` rows of three values each, counting up from 0.
fn rows_of(rows: usize) -> Vec<f32> {
    (0..rows * 3).map(|i| i as f32).collect()
}

fn infer_body(rows: usize) -> Value {
    json!({ "inputs": [{ "name": "x", "datatype": "FP32", "shape": [rows, 3], "data": rows_of(rows) }] })
}

async fn executions(
    client: &reqwest::Client,
    server: &TestServer,
) -> Result<(u64, u64), Box<dyn std::error::Error>> {
    let stats: Value = client
        .get(format!("{}/v2/models/echo/stats", server.rest_url))
        .send()
        .await?
        .json()
        .await?;
    let model = &stats["model_stats"][0];
    let count = |field: &str| model[field].as_u64().unwrap_or_default();
    Ok((count("execution_count"), count("inference_count")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_request_runs_as_pieces_on_both_instances_at_once() -> TestResult {
    let repo = TempRepo::new("split-pieces");
    let (server, gate) = echo_server(
        &repo,
        "[instances]\ncount = 2\n[batching]\nmax_batch_size = 8\nsplit_rows = 2\n",
    )
    .await;
    gate.close();
    let client = reqwest::Client::new();
    let url = format!("{}/v2/models/echo/infer", server.rest_url);
    let answer = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move { client.post(url).json(&infer_body(4)).send().await }
    });
    // Both halves are inside the model at the same time, each on an instance of its own.
    gate.wait_for_waiting(2).await;
    let mut tags = gate.arrivals();
    tags.sort_by(f32::total_cmp);
    assert_eq!(tags, vec![0.0, 6.0]);
    gate.open();
    let answer: Value = answer.await??.error_for_status()?.json().await?;
    let output = &answer["outputs"][0];
    assert_eq!(output["shape"], json!([4, 3]));
    assert_eq!(output["data"], json!(rows_of(4)));
    assert_eq!(executions(&client, &server).await?, (2, 4));

    // A request within the split size runs whole.
    let small: Value = client
        .post(&url)
        .json(&infer_body(2))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    assert_eq!(small["outputs"][0]["data"], json!(rows_of(2)));
    assert_eq!(executions(&client, &server).await?, (3, 6));
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uneven_pieces_come_back_in_order() -> TestResult {
    let repo = TempRepo::new("split-order");
    let (server, _gate) = echo_server(
        &repo,
        "[instances]\ncount = 2\n[batching]\nsplit_rows = 3\n",
    )
    .await;
    // Seven rows at three a piece: pieces of 3, 2 and 2 rows, more pieces than instances.
    let client = reqwest::Client::new();
    let answer: Value = client
        .post(format!("{}/v2/models/echo/infer", server.rest_url))
        .json(&infer_body(7))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    assert_eq!(answer["outputs"][0]["shape"], json!([7, 3]));
    assert_eq!(answer["outputs"][0]["data"], json!(rows_of(7)));
    assert_eq!(executions(&client, &server).await?, (3, 7));
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_piece_past_the_deadline_fails_the_whole_request() -> TestResult {
    let repo = TempRepo::new("split-deadline");
    let (server, gate) = echo_server(
        &repo,
        "[instances]\ncount = 2\n[batching]\nsplit_rows = 2\n",
    )
    .await;
    gate.close();
    let client = reqwest::Client::new();
    let url = format!("{}/v2/models/echo/infer", server.rest_url);
    // Five rows: pieces of 2, 2 and 1. The gate holds the first two on both instances, so
    // the third waits in the queue until the request's deadline passes.
    let answer = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move {
            client
                .post(url)
                .header("x-request-timeout-ms", "200")
                .json(&infer_body(5))
                .send()
                .await
        }
    });
    gate.wait_for_waiting(2).await;
    let answer = answer.await??;
    assert_eq!(answer.status(), 504);
    let text = answer.text().await?;
    assert!(text.contains("deadline"), "{text}");
    // Only the two running pieces reached the model; the queued one never ran.
    gate.open();
    let after: Value = client
        .post(&url)
        .json(&infer_body(1))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    assert_eq!(after["outputs"][0]["data"], json!(rows_of(1)));
    let mut tags = gate.arrivals();
    tags.sort_by(f32::total_cmp);
    assert_eq!(tags, vec![0.0, 6.0]);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_of_sixty_thousand_one_row_pieces_is_refused_clearly() -> TestResult {
    let repo = TempRepo::new("split-many");
    // The review's attack: one row a piece, every request alone, and a queue long enough to
    // take every piece. Queued, 60,000 pieces cost the batcher the square of their number.
    let (server, _gate) = echo_server(
        &repo,
        "[batching]\nmax_batch_size = 1\nsplit_rows = 1\nmax_queue_size = 1048576\n",
    )
    .await;
    let client = reqwest::Client::new();
    let answer = client
        .post(format!("{}/v2/models/echo/infer", server.rest_url))
        .json(&infer_body(60_000))
        .send()
        .await?;
    assert_eq!(answer.status(), 400);
    let text = answer.text().await?;
    for part in ["split_rows = 1", "60000 rows", "at most 4096 rows"] {
        assert!(text.contains(part), "{text}");
    }
    // Refused before anything was queued or run.
    assert_eq!(executions(&client, &server).await?, (0, 0));
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_within_the_piece_bound_runs_as_that_many_pieces() -> TestResult {
    let repo = TempRepo::new("split-bound");
    let (server, _gate) = echo_server(
        &repo,
        "[batching]\nmax_batch_size = 1\nsplit_rows = 1\nmax_queue_size = 4096\n",
    )
    .await;
    let client = reqwest::Client::new();
    let answer: Value = client
        .post(format!("{}/v2/models/echo/infer", server.rest_url))
        .json(&infer_body(2_000))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    assert_eq!(answer["outputs"][0]["shape"], json!([2_000, 3]));
    assert_eq!(answer["outputs"][0]["data"], json!(rows_of(2_000)));
    assert_eq!(executions(&client, &server).await?, (2_000, 2_000));
    server.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_split_size_past_a_preferred_batch_size_is_refused_at_load() -> TestResult {
    let repo = TempRepo::new("split-bad");
    repo.add(
        "echo",
        1,
        ECHO,
        Some("[batching]\nmax_batch_size = 8\npreferred_batch_sizes = [8]\nsplit_rows = 4\n"),
    );
    let server = TestServer::start_with(
        repo.path(),
        BatchSettings::default(),
        ServerOptions::default(),
    )
    .await;
    let index: Value = reqwest::Client::new()
        .post(format!("{}/v2/repository/index", server.rest_url))
        .send()
        .await?
        .json()
        .await?;
    let reason = index[0]["reason"].as_str().unwrap_or_default().to_owned();
    assert!(reason.contains("split_rows"), "{index}");
    server.stop().await;
    Ok(())
}
