//! Many models in bounded memory: `--model-memory-budget`, loading on demand, least recently
//! used eviction, pinned models, models larger than the budget, and `reload = "unload-first"`.
//!
//! The models are copies of the real ONNX ranker (and the larger two-tower model) in a
//! temporary repository. Loads are measured by file size here (`MemoryMeter::FileSize`):
//! process memory moves with everything else a test process does, and these tests assert on
//! the server's own accounting.

// Test code fails loudly: a panic is a failed test with its message.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use common::budget::{
    entry, file_size, index, infer, scrape, start, sum, TempRepo, RANKER, TWO_TOWER,
};
use common::gate::{Gate, OpenOnDrop};
use common::{TestResult, TestServer};
use serde_json::{json, Value};
use tensorport::backend::Backend;
use tensorport::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorport::proto::inference::{ModelConfigRequest, ModelMetadataRequest, ModelReadyRequest};
use tensorport::proto::tensorflow::serving::prediction_service_client::PredictionServiceClient;
use tensorport::proto::tensorflow::serving::{GetModelMetadataRequest, ModelSpec};
use tensorport::repository::BackendDecorator;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn round_robin_over_more_models_than_fit_stays_under_the_budget() -> TestResult {
    let repo = TempRepo::new("round-robin");
    let models: Vec<String> = (0..6).map(|i| format!("m{i}")).collect();
    for model in &models {
        repo.add(model, 1, RANKER, None);
    }
    repo.add("pinned", 1, RANKER, Some("[lifecycle]\npinned = true\n"));
    // The pinned model and two others fit; six others do not.
    let budget = 3 * file_size(RANKER) + 100;
    let server = start(&repo, Some(budget), None).await;
    let client = reqwest::Client::new();

    // Discovered, not loaded; the pinned model loaded at start; ready either way.
    let before = index(&client, &server.rest_url).await;
    assert_eq!(entry(&before, "m0")["state"], "UNAVAILABLE");
    assert_eq!(
        entry(&before, "m0")["reason"],
        "not loaded; loads on its first request"
    );
    assert_eq!(entry(&before, "pinned")["state"], "READY");
    let ready = client
        .get(format!("{}/v2/health/ready", server.rest_url))
        .send()
        .await?;
    assert_eq!(ready.status(), 200);

    let mut clients = Vec::new();
    for client_id in 0..3 {
        let models = models.clone();
        let rest_url = server.rest_url.clone();
        let server_ref = rest_url.clone();
        clients.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut totals = Vec::new();
            for round in 0..4 {
                for i in 0..models.len() {
                    let model = &models[(i + client_id + round) % models.len()];
                    let (status, body) = infer(&client, &server_ref, model).await;
                    assert_eq!(status, 200, "{model}: {body}");
                    let (status, body) = infer(&client, &server_ref, "pinned").await;
                    assert_eq!(status, 200, "pinned: {body}");
                    let exposition = scrape(&client, &server_ref).await;
                    totals.push(sum(&exposition, "tensorport_model_memory_bytes", ""));
                }
            }
            totals
        }));
    }
    for client in clients {
        for total in client.await? {
            assert!(
                total <= budget as f64,
                "resident total {total} exceeds the budget {budget}"
            );
        }
    }

    let exposition = scrape(&client, &server.rest_url).await;
    assert!(sum(&exposition, "tensorport_model_memory_bytes", "") <= budget as f64);
    assert!(sum(&exposition, "tensorport_model_evictions_total", "") > 0.0);
    assert!(sum(&exposition, "tensorport_model_loads_on_demand_total", "") >= 6.0);
    assert_eq!(
        sum(
            &exposition,
            "tensorport_model_evictions_total",
            "model=\"pinned\""
        ),
        0.0
    );
    assert_eq!(
        sum(
            &exposition,
            "tensorport_model_loads_on_demand_total",
            "model=\"pinned\""
        ),
        0.0
    );
    assert!(sum(&exposition, "tensorport_model_load_wait_seconds_count", "") > 0.0);

    // Evicted versions say so, in both protocols; the pinned one still serves.
    let after = index(&client, &server.rest_url).await;
    assert_eq!(entry(&after, "pinned")["state"], "READY");
    assert_eq!(entry(&after, "pinned")["memory_bytes"], file_size(RANKER));
    let evicted = after
        .iter()
        .find(|e| e["reason"] == "evicted")
        .unwrap_or_else(|| panic!("no evicted version in {after:?}"));
    assert_eq!(evicted["state"], "UNAVAILABLE");
    let name = evicted["name"].as_str().unwrap_or_default().to_owned();
    let status: Value = client
        .get(format!("{}/v1/models/{name}", server.rest_url))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(
        status["model_version_status"][0]["state"], "END",
        "{status}"
    );

    // And it serves again on its next request.
    let (code, body) = infer(&client, &server.rest_url, &name).await;
    assert_eq!(code, 200, "{body}");
    let again = index(&client, &server.rest_url).await;
    assert_eq!(entry(&again, &name)["state"], "READY");
    server.stop().await;
    Ok(())
}

/// Holds every load of one model until released, and counts them.
#[derive(Default)]
struct LoadLatch {
    loads: AtomicUsize,
    released: Mutex<bool>,
    changed: Condvar,
}

impl LoadLatch {
    fn decorator(self: &Arc<Self>, model: &'static str) -> BackendDecorator {
        let latch = self.clone();
        Arc::new(move |name: &str, inner: Arc<dyn Backend>| {
            if name == model {
                latch.loads.fetch_add(1, Ordering::SeqCst);
                let released = latch.released.lock().unwrap();
                let _released = latch
                    .changed
                    .wait_while(released, |released| !*released)
                    .unwrap();
            }
            inner
        })
    }

    fn release(&self) {
        *self.released.lock().unwrap() = true;
        self.changed.notify_all();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn simultaneous_first_requests_share_one_load() -> TestResult {
    let repo = TempRepo::new("one-load");
    repo.add("m0", 1, RANKER, None).add("m1", 1, RANKER, None);
    let latch = Arc::new(LoadLatch::default());
    let server = start(&repo, Some(1 << 20), Some(latch.decorator("m0"))).await;
    let released = ReleaseOnDrop(latch.clone());

    const REQUESTS: usize = 8;
    let mut requests = Vec::new();
    for _ in 0..REQUESTS {
        let server_ref = server.rest_url.clone();
        requests.push(tokio::spawn(async move {
            infer(&reqwest::Client::new(), &server_ref, "m0").await
        }));
    }
    // Every request is waiting for the one load, which the latch holds.
    wait_until(|| {
        server.metrics.load_waiters("m0") >= REQUESTS as i64
            && latch.loads.load(Ordering::SeqCst) >= 1
    })
    .await;
    released.0.release();
    for request in requests {
        let (status, body) = request.await?;
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(latch.loads.load(Ordering::SeqCst), 1);
    let exposition = scrape(&reqwest::Client::new(), &server.rest_url).await;
    assert_eq!(
        sum(
            &exposition,
            "tensorport_model_loads_on_demand_total",
            "model=\"m0\""
        ),
        1.0
    );
    assert_eq!(
        sum(
            &exposition,
            "tensorport_model_load_wait_seconds_count",
            "model=\"m0\""
        ),
        REQUESTS as f64
    );
    assert_eq!(server.metrics.load_waiters("m0"), 0);
    server.stop().await;
    Ok(())
}

struct ReleaseOnDrop(Arc<LoadLatch>);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// Polls `done` until it holds; fails after a generous bound rather than hanging.
async fn wait_until(done: impl Fn() -> bool) {
    for _ in 0..30_000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("the condition never held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_model_larger_than_the_budget_is_refused_and_the_others_serve() -> TestResult {
    let repo = TempRepo::new("too-large");
    repo.add("m0", 1, RANKER, None)
        .add("m1", 1, RANKER, None)
        .add("big", 1, TWO_TOWER, None);
    let budget = 2 * file_size(RANKER) + 100;
    assert!(file_size(TWO_TOWER) > budget);
    let server = start(&repo, Some(budget), None).await;
    let client = reqwest::Client::new();

    for model in ["m0", "m1"] {
        let (status, body) = infer(&client, &server.rest_url, model).await;
        assert_eq!(status, 200, "{body}");
    }
    for _ in 0..2 {
        let (status, body) = infer(&client, &server.rest_url, "big").await;
        assert_eq!(status, 429, "{body}");
        let message = body["error"].as_str().unwrap_or_default();
        assert!(
            message.contains("more than the whole model memory budget")
                && message.contains(&budget.to_string()),
            "{message}"
        );
    }
    // Nothing was evicted for it, and the others still serve from memory.
    let exposition = scrape(&client, &server.rest_url).await;
    assert_eq!(
        sum(&exposition, "tensorport_model_evictions_total", ""),
        0.0
    );
    assert_eq!(
        sum(&exposition, "tensorport_model_loads_on_demand_total", ""),
        2.0
    );
    for model in ["m0", "m1"] {
        let (status, body) = infer(&client, &server.rest_url, model).await;
        assert_eq!(status, 200, "{body}");
    }
    let listed = index(&client, &server.rest_url).await;
    let big = entry(&listed, "big");
    assert_eq!(big["state"], "UNAVAILABLE");
    assert!(big["reason"]
        .as_str()
        .is_some_and(|r| r.contains("more than the whole model memory budget")));
    let status: Value = client
        .get(format!("{}/v1/models/big", server.rest_url))
        .send()
        .await?
        .json()
        .await?;
    let row = &status["model_version_status"][0];
    assert_eq!(row["state"], "END", "{status}");
    assert!(row["status"]["error_message"]
        .as_str()
        .is_some_and(|m| m.contains("memory budget")));
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_is_accounted_at_load_without_a_budget() -> TestResult {
    // The production meter (resident memory, at least the file size); every model loads at
    // start, as without the budget it always did.
    let server = TestServer::start().await;
    let client = reqwest::Client::new();
    let exposition = scrape(&client, &server.rest_url).await;
    let ranker = sum(
        &exposition,
        "tensorport_model_memory_bytes",
        "model=\"ranker\"",
    );
    assert!(ranker >= file_size("examples/models/ranker/2/model.onnx") as f64);
    let listed = index(&client, &server.rest_url).await;
    let entry = entry(&listed, "ranker");
    assert_eq!(entry["state"], "READY");
    assert!(entry["memory_bytes"]
        .as_u64()
        .is_some_and(|b| b as f64 == ranker));
    assert_eq!(
        sum(&exposition, "tensorport_model_loads_on_demand_total", ""),
        0.0
    );
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unload_first_drops_the_old_version_before_the_new_one_loads() -> TestResult {
    let repo = TempRepo::new("unload-first");
    repo.add(
        "swap",
        1,
        RANKER,
        Some("[lifecycle]\nreload = \"unload-first\"\n"),
    );
    let gate = Gate::new();
    let server = start(&repo, None, Some(gate.decorator("swap"))).await;
    let gate = OpenOnDrop(gate);
    let client = reqwest::Client::new();

    // A request on version 1 holds it.
    gate.close();
    let server_ref = server.rest_url.clone();
    let held =
        tokio::spawn(async move { infer(&reqwest::Client::new(), &server_ref, "swap").await });
    gate.wait_for_waiting(1).await;

    // Version 2 appears; the load API reconciles the model.
    repo.add("swap", 2, RANKER, None);
    let server_ref = server.rest_url.clone();
    let load = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("{server_ref}/v2/repository/models/swap/load"))
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    // Version 1 drains first; version 2 does not load while it does.
    let mut listed = index(&client, &server.rest_url).await;
    for _ in 0..30_000 {
        if listed
            .iter()
            .any(|e| e["version"] == "1" && e["state"] == "UNLOADING")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        listed = index(&client, &server.rest_url).await;
    }
    assert!(
        listed
            .iter()
            .any(|e| e["version"] == "1" && e["state"] == "UNLOADING"),
        "version 1 never started to drain: {listed:?}"
    );
    assert!(
        listed.iter().all(|e| e["version"] != "2"),
        "version 2 started before version 1 was dropped: {listed:?}"
    );
    // A request in the gap waits for the new version.
    let server_ref = server.rest_url.clone();
    let waiting =
        tokio::spawn(async move { infer(&reqwest::Client::new(), &server_ref, "swap").await });

    gate.open();
    let (status, body) = held.await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model_version"], "1");
    assert_eq!(load.await??, 200);
    let (status, body) = waiting.await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model_version"], "2");
    let listed = index(&client, &server.rest_url).await;
    let states: Vec<(String, String)> = listed
        .iter()
        .map(|e| (e["version"].to_string(), e["state"].to_string()))
        .collect();
    assert!(
        states.contains(&("\"1\"".into(), "\"UNAVAILABLE\"".into()))
            && states.contains(&("\"2\"".into(), "\"READY\"".into())),
        "{states:?}"
    );
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_waits_for_a_load_only_until_its_deadline() -> TestResult {
    let repo = TempRepo::new("deadline");
    repo.add("m0", 1, RANKER, None).add("m1", 1, RANKER, None);
    let latch = Arc::new(LoadLatch::default());
    let server = start(&repo, Some(1 << 20), Some(latch.decorator("m0"))).await;
    let released = ReleaseOnDrop(latch.clone());
    let client = reqwest::Client::new();

    // The load of m0 is held: a request with a 50 ms deadline gives up; the load goes on.
    let body = json!({"inputs": [{
        "name": "features", "shape": [1, 16], "datatype": "FP32", "data": vec![0.5f32; 16]
    }]});
    let response = client
        .post(format!("{}/v2/models/m0/infer", server.rest_url))
        .header("x-request-timeout-ms", "50")
        .json(&body)
        .send()
        .await?;
    assert_eq!(response.status(), 504);
    // So does one whose deadline is KServe's `timeout` parameter (microseconds) in its body.
    let timed = json!({
        "parameters": {"timeout": 50_000},
        "inputs": [{
            "name": "features", "shape": [1, 16], "datatype": "FP32", "data": vec![0.5f32; 16]
        }]
    });
    let response = client
        .post(format!("{}/v2/models/m0/infer", server.rest_url))
        .json(&timed)
        .send()
        .await?;
    assert_eq!(response.status(), 504);
    // So does a metadata request, which would load the version too.
    let metadata = client
        .get(format!("{}/v2/models/m0", server.rest_url))
        .header("x-request-timeout-ms", "50")
        .send()
        .await?;
    assert_eq!(metadata.status(), 504);
    // The status APIs answer meanwhile (loads run one at a time, so m1 would wait for it).
    let listed = index(&client, &server.rest_url).await;
    assert_eq!(entry(&listed, "m1")["state"], "UNAVAILABLE");

    released.0.release();
    let (status, body) = infer(&client, &server.rest_url, "m0").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(latch.loads.load(Ordering::SeqCst), 1);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn names_that_do_not_exist_load_nothing() -> TestResult {
    let repo = TempRepo::new("unknown");
    repo.add("m0", 1, RANKER, Some("[version_labels]\nstable = 1\n"));
    let server = start(&repo, Some(1 << 20), None).await;
    let client = reqwest::Client::new();
    for path in [
        "/v2/models/nope/infer",
        "/v2/models/m0/versions/7/infer",
        "/v2/models/m0/versions/canary/infer",
        "/v2/models/..%2Fm0/infer",
    ] {
        let response = client
            .post(format!("{}{path}", server.rest_url))
            .json(&json!({"inputs": []}))
            .send()
            .await?;
        let status = response.status().as_u16();
        assert!(status == 404 || status == 400, "{path}: {status}");
    }
    let exposition = scrape(&client, &server.rest_url).await;
    assert_eq!(
        sum(&exposition, "tensorport_model_loads_on_demand_total", ""),
        0.0
    );
    // The label and the number both reach the one version, through one load.
    let labelled = client
        .post(format!(
            "{}/v2/models/m0/versions/stable/infer",
            server.rest_url
        ))
        .json(&json!({"inputs": [{
            "name": "features", "shape": [1, 16], "datatype": "FP32", "data": vec![0.5f32; 16]
        }]}))
        .send()
        .await?;
    assert_eq!(labelled.status(), 200);
    let (status, body) = infer(&client, &server.rest_url, "m0").await;
    assert_eq!(status, 200, "{body}");
    let exposition = scrape(&client, &server.rest_url).await;
    assert_eq!(
        sum(&exposition, "tensorport_model_loads_on_demand_total", ""),
        1.0
    );
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_version_is_evicted_before_one_with_a_request_in_flight() -> TestResult {
    let repo = TempRepo::new("in-flight");
    for model in ["a", "b", "c"] {
        repo.add(model, 1, RANKER, None);
    }
    let gate = Gate::new();
    let budget = 2 * file_size(RANKER) + 100;
    let server = start(&repo, Some(budget), Some(gate.decorator("a"))).await;
    let gate = OpenOnDrop(gate);
    let client = reqwest::Client::new();
    let rest = server.rest_url.clone();

    let (status, body) = infer(&client, &rest, "a").await;
    assert_eq!(status, 200, "{body}");
    // A request holds a; then b serves, so a is the least recently used, but busy.
    gate.close();
    let held_rest = rest.clone();
    let held = tokio::spawn(async move { infer(&reqwest::Client::new(), &held_rest, "a").await });
    gate.wait_for_waiting(1).await;
    let (status, body) = infer(&client, &rest, "b").await;
    assert_eq!(status, 200, "{body}");

    // Room for c comes from b, the idle one. (Evicting a would wait for the held request:
    // the bound turns that into a failure instead of a hang.)
    let (status, body) = tokio::time::timeout(Duration::from_secs(60), infer(&client, &rest, "c"))
        .await
        .expect("c loaded without waiting for a's request");
    assert_eq!(status, 200, "{body}");
    let listed = index(&client, &rest).await;
    assert_eq!(entry(&listed, "a")["state"], "READY", "{listed:?}");
    assert_eq!(entry(&listed, "b")["reason"], "evicted", "{listed:?}");
    assert_eq!(entry(&listed, "c")["state"], "READY", "{listed:?}");

    gate.open();
    let (status, body) = held.await?;
    assert_eq!(status, 200, "{body}");
    server.stop().await;
    Ok(())
}

/// Evicts `evicted` by serving `other` (the budget holds one version) and checks the index says so.
async fn evict_by_serving(client: &reqwest::Client, rest: &str, other: &str, evicted: &str) {
    let (status, body) = infer(client, rest, other).await;
    assert_eq!(status, 200, "{body}");
    let listed = index(client, rest).await;
    assert_eq!(entry(&listed, evicted)["reason"], "evicted", "{listed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metadata_of_an_evicted_version_loads_it_and_ready_stays_false_until_then() -> TestResult {
    let repo = TempRepo::new("metadata");
    repo.add("a", 1, RANKER, None).add("b", 1, RANKER, None);
    let server = start(&repo, Some(file_size(RANKER) + 100), None).await;
    let client = reqwest::Client::new();
    let rest = server.rest_url.clone();
    let mut kserve = GrpcInferenceServiceClient::connect(server.grpc_url.clone()).await?;
    let mut tfs = PredictionServiceClient::connect(server.grpc_url.clone()).await?;
    let loads = |exposition: &str| {
        sum(
            exposition,
            "tensorport_model_loads_on_demand_total",
            "model=\"a\"",
        )
    };

    let (status, body) = infer(&client, &rest, "a").await;
    assert_eq!(status, 200, "{body}");
    evict_by_serving(&client, &rest, "b", "a").await;

    // Readiness tells the truth: an evicted version is not ready, and asking loads nothing.
    let ready = client
        .get(format!("{rest}/v2/models/a/ready"))
        .send()
        .await?;
    assert_ne!(ready.status(), 200);
    let ready = kserve
        .model_ready(ModelReadyRequest {
            name: "a".into(),
            version: String::new(),
        })
        .await?
        .into_inner();
    assert!(!ready.ready);
    assert_eq!(loads(&scrape(&client, &rest).await), 1.0);

    // Each metadata and configuration call loads it, as an inference request would.
    let metadata: Value = client
        .get(format!("{rest}/v2/models/a"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    assert_eq!(metadata["inputs"][0]["name"], "features", "{metadata}");
    assert_eq!(metadata["versions"], json!(["1"]), "{metadata}");
    let ready = client
        .get(format!("{rest}/v2/models/a/ready"))
        .send()
        .await?;
    assert_eq!(ready.status(), 200);

    evict_by_serving(&client, &rest, "b", "a").await;
    let config: Value = client
        .get(format!("{rest}/v2/models/a/versions/1/config"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    assert_eq!(config["input"][0]["name"], "features", "{config}");

    evict_by_serving(&client, &rest, "b", "a").await;
    let metadata = kserve
        .model_metadata(ModelMetadataRequest {
            name: "a".into(),
            version: String::new(),
        })
        .await?
        .into_inner();
    assert_eq!(metadata.inputs[0].name, "features");

    evict_by_serving(&client, &rest, "b", "a").await;
    let config = kserve
        .model_config(ModelConfigRequest {
            name: "a".into(),
            version: "1".into(),
        })
        .await?
        .into_inner();
    assert_eq!(config.config.unwrap().input[0].name, "features");

    evict_by_serving(&client, &rest, "b", "a").await;
    let metadata = tfs
        .get_model_metadata(GetModelMetadataRequest {
            model_spec: Some(ModelSpec {
                name: "a".into(),
                ..Default::default()
            }),
            metadata_field: vec!["signature_def".into()],
        })
        .await?
        .into_inner();
    assert_eq!(metadata.model_spec.unwrap().name, "a");

    evict_by_serving(&client, &rest, "b", "a").await;
    let metadata: Value = client
        .get(format!("{rest}/v1/models/a/metadata"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    assert!(
        metadata["metadata"]["signature_def"].is_object(),
        "{metadata}"
    );

    let exposition = scrape(&client, &rest).await;
    assert_eq!(loads(&exposition), 7.0);
    // Metadata of a name that does not exist is still 404 and loads nothing.
    let missing = client.get(format!("{rest}/v2/models/nope")).send().await?;
    assert_eq!(missing.status(), 404);
    assert_eq!(
        sum(&exposition, "tensorport_model_loads_on_demand_total", ""),
        sum(
            &scrape(&client, &rest).await,
            "tensorport_model_loads_on_demand_total",
            ""
        )
    );
    server.stop().await;
    Ok(())
}
