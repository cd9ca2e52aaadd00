//! What `--model-memory-budget` charges a version, and when an evicted version's memory is
//! really free (the red team's finding: six 24 MiB models round-robin under an 80 MiB budget
//! took the process 180 MiB past its base).
//!
//! - A version's runtime can hold more after serving than at load: ONNX Runtime's arena keeps
//!   the working memory of the largest run so far. The charge follows it, and the budget
//!   evicts the least recently used versions for it at once, not at the next load.
//! - An eviction is over when the evicted version's session is gone, not when its last
//!   request has let go: a run its client abandoned still holds the session, and the next
//!   load must not start (nor its measurement) while it does.
//!
//! Loads are measured by file size, as in `model_budget.rs`; what the runtime grows by comes
//! from ONNX Runtime's own statistics, so every figure here is exact and repeatable.

// Test code fails loudly: a panic is a failed test with its message.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::budget::{
    entry, file_size, index, infer, infer_rows, scrape, start, sum, TempRepo, RANKER,
};
use common::gate::{Gate, OpenOnDrop};
use common::TestResult;
use serde_json::{json, Value};
use tensorport::backend::{Backend, BackendError, NamedTensor, OutputTarget, Signature};
use tensorport::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorport::proto::inference::model_infer_request::InferInputTensor;
use tensorport::proto::inference::ModelInferRequest;
use tensorport::repository::BackendDecorator;

/// Far more rows than warmup's one: the ranker's arena grows for a batch this large (from
/// 1 MiB to 3 MiB with ONNX Runtime 1.31).
const BIG_BATCH: usize = 16_384;

/// The bytes a ranker version is charged beyond its file after one run of [`BIG_BATCH`]
/// rows, measured on a server of its own (no budget: the charge is kept all the same).
async fn growth_after_a_big_batch() -> u64 {
    let repo = TempRepo::new("growth-probe");
    repo.add("probe", 1, RANKER, None);
    let server = start(&repo, None, None).await;
    let client = reqwest::Client::new();
    let (status, body) = infer(&client, &server.rest_url, "probe").await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = infer_rows(&client, &server.rest_url, "probe", BIG_BATCH).await;
    assert_eq!(status, 200, "{body}");
    let listed = index(&client, &server.rest_url).await;
    let charged = charged(&listed, "probe");
    server.stop().await;
    charged.saturating_sub(file_size(RANKER))
}

/// What the index says `model` is charged now.
fn charged(listed: &[Value], model: &str) -> u64 {
    entry(listed, model)["memory_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("{model} reports no memory: {listed:?}"))
}

/// Reads the index until `done` holds for it; fails after a generous bound.
async fn index_until(
    client: &reqwest::Client,
    rest: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    for _ in 0..10_000 {
        let listed = index(client, rest).await;
        if done(&listed) {
            return listed;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!(
        "the index never showed what was expected: {:?}",
        index(client, rest).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn what_a_version_holds_after_serving_is_charged_and_evicts_the_least_recently_used(
) -> TestResult {
    let file = file_size(RANKER);
    let growth = growth_after_a_big_batch().await;
    assert!(
        growth > file,
        "after a run of {BIG_BATCH} rows the ranker is charged only {growth} bytes more than its \
         {file}-byte file: what its runtime holds after serving is not charged"
    );
    let grown = file + growth;
    // Three versions fit as loaded, and so do two grown ones; two grown and one more do not.
    let budget = 2 * grown + file / 2;
    let repo = TempRepo::new("growth");
    for model in ["a", "b", "c"] {
        repo.add(model, 1, RANKER, None);
    }
    let server = start(&repo, Some(budget), None).await;
    let client = reqwest::Client::new();
    let rest = server.rest_url.clone();

    for model in ["a", "b", "c"] {
        let (status, body) = infer(&client, &rest, model).await;
        assert_eq!(status, 200, "{model}: {body}");
    }
    let listed = index(&client, &rest).await;
    for model in ["a", "b", "c"] {
        assert_eq!(entry(&listed, model)["state"], "READY", "{listed:?}");
        assert_eq!(charged(&listed, model), file, "{listed:?}");
    }

    // a serves a large batch: it is charged what its runtime now holds, and still fits.
    let (status, body) = infer_rows(&client, &rest, "a", BIG_BATCH).await;
    assert_eq!(status, 200, "{body}");
    let listed = index(&client, &rest).await;
    assert_eq!(charged(&listed, "a"), grown, "{listed:?}");
    for model in ["b", "c"] {
        assert_eq!(entry(&listed, model)["state"], "READY", "{listed:?}");
    }

    // b does too: together they no longer fit beside c, the least recently used, which goes.
    let (status, body) = infer_rows(&client, &rest, "b", BIG_BATCH).await;
    assert_eq!(status, 200, "{body}");
    let listed = index_until(&client, &rest, |listed| {
        entry(listed, "c")["reason"] == "evicted"
    })
    .await;
    assert_eq!(entry(&listed, "c")["state"], "UNAVAILABLE", "{listed:?}");
    for model in ["a", "b"] {
        assert_eq!(entry(&listed, model)["state"], "READY", "{listed:?}");
        assert_eq!(charged(&listed, model), grown, "{listed:?}");
    }
    let exposition = scrape(&client, &rest).await;
    assert_eq!(
        sum(&exposition, "tensorport_model_memory_bytes", ""),
        (2 * grown) as f64
    );
    assert_eq!(
        sum(&exposition, "tensorport_model_evictions_total", ""),
        1.0
    );

    // c's next request loads it at its load's size, and a, now the least recently used of
    // the grown two, makes room for it.
    let (status, body) = infer(&client, &rest, "c").await;
    assert_eq!(status, 200, "{body}");
    let listed = index(&client, &rest).await;
    assert_eq!(entry(&listed, "a")["reason"], "evicted", "{listed:?}");
    assert_eq!(charged(&listed, "b"), grown, "{listed:?}");
    assert_eq!(charged(&listed, "c"), file, "{listed:?}");
    let exposition = scrape(&client, &rest).await;
    assert!(sum(&exposition, "tensorport_model_memory_bytes", "") <= budget as f64);
    server.stop().await;
    Ok(())
}

/// Counts the live backends of model `a` and records, at each load of `b`, how many there
/// were.
#[derive(Default)]
struct Sessions {
    live: AtomicUsize,
    when_b_loaded: Mutex<Vec<usize>>,
}

impl Sessions {
    /// Applies `then` (the gate), then counts `a`'s backends and watches `b`'s loads.
    fn decorator(self: &Arc<Self>, then: BackendDecorator) -> BackendDecorator {
        let sessions = self.clone();
        Arc::new(move |name: &str, inner: Arc<dyn Backend>| {
            let inner = then(name, inner);
            match name {
                "a" => {
                    sessions.live.fetch_add(1, Ordering::SeqCst);
                    Arc::new(Counted {
                        inner,
                        sessions: sessions.clone(),
                    }) as Arc<dyn Backend>
                }
                "b" => {
                    let live = sessions.live.load(Ordering::SeqCst);
                    sessions.when_b_loaded.lock().unwrap().push(live);
                    inner
                }
                _ => inner,
            }
        })
    }

    fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }
}

/// One of `a`'s backends, counted while it lives.
struct Counted {
    inner: Arc<dyn Backend>,
    sessions: Arc<Sessions>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.sessions.live.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Backend for Counted {
    fn platform(&self) -> &'static str {
        self.inner.platform()
    }

    fn signatures(&self) -> &[Signature] {
        self.inner.signatures()
    }

    fn run(
        &self,
        signature: &Signature,
        inputs: Vec<NamedTensor>,
        outputs: &[String],
    ) -> Result<Vec<NamedTensor>, BackendError> {
        self.inner.run(signature, inputs, outputs)
    }

    fn run_into(
        &self,
        signature: &Signature,
        inputs: Vec<NamedTensor>,
        outputs: &[String],
        targets: &[OutputTarget],
    ) -> Result<Vec<NamedTensor>, BackendError> {
        self.inner.run_into(signature, inputs, outputs, targets)
    }
}

fn ranker_grpc(model: &str) -> ModelInferRequest {
    ModelInferRequest {
        model_name: model.into(),
        inputs: vec![InferInputTensor {
            name: "features".into(),
            datatype: "FP32".into(),
            shape: vec![1, 16],
            ..Default::default()
        }],
        raw_input_contents: vec![0.5f32.to_le_bytes().repeat(16).into()],
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_eviction_waits_until_an_abandoned_run_lets_go_of_the_session() -> TestResult {
    let repo = TempRepo::new("abandoned-run");
    repo.add("a", 1, RANKER, None).add("b", 1, RANKER, None);
    let gate = Gate::new();
    let sessions = Arc::new(Sessions::default());
    // One version fits.
    let budget = file_size(RANKER) + 100;
    let server = start(
        &repo,
        Some(budget),
        Some(sessions.decorator(gate.decorator("a"))),
    )
    .await;
    let gate = OpenOnDrop(gate);
    let client = reqwest::Client::new();
    let rest = server.rest_url.clone();

    let (status, body) = infer(&client, &rest, "a").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(sessions.live(), 1);

    // A gRPC client's run on a reaches the runtime; then the client gives up (its call is
    // dropped, which resets the stream): the server lets go of the version, but the run goes
    // on holding a's session.
    gate.close();
    let mut grpc = GrpcInferenceServiceClient::connect(server.grpc_url.clone()).await?;
    let abandoned = tokio::spawn(async move { grpc.model_infer(ranker_grpc("a")).await });
    gate.wait_for_waiting(1).await;
    abandoned.abort();

    // b needs a's room, which is not free while the run holds the session: b does not load,
    // and a request for it gives up at its deadline. (Before, the eviction ended as soon as
    // no request held a, and b loaded beside the session it was to replace.)
    let response = client
        .post(format!("{rest}/v2/models/b/infer"))
        .header("x-request-timeout-ms", "3000")
        .json(&json!({"inputs": [{
            "name": "features", "shape": [1, 16], "datatype": "FP32", "data": vec![0.5f32; 16]
        }]}))
        .send()
        .await?;
    let status = response.status().as_u16();
    assert_eq!(
        status,
        504,
        "b loaded while a's session was still held by a run: {}",
        response.text().await?
    );
    assert_eq!(sessions.live(), 1);
    assert!(sessions.when_b_loaded.lock().unwrap().is_empty());

    // The run ends and a's session goes; only then does b load.
    gate.open();
    let (status, body) = infer(&client, &rest, "b").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(sessions.live(), 0);
    assert_eq!(*sessions.when_b_loaded.lock().unwrap(), vec![0]);
    let listed = index(&client, &rest).await;
    assert_eq!(entry(&listed, "a")["reason"], "evicted", "{listed:?}");
    assert_eq!(entry(&listed, "b")["state"], "READY", "{listed:?}");
    server.stop().await;
    Ok(())
}
