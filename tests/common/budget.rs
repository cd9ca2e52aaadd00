//! What the model-budget test binaries share: a temporary model repository, a server over it
//! with a budget, and readers of the server's own accounting (the KServe repository index and
//! the metrics).

use std::path::PathBuf;

use serde_json::{json, Value};
use tensorport::batcher::BatchSettings;
use tensorport::repository::{BackendDecorator, MemoryMeter};
use tensorport::ServerOptions;

use super::{repo_path, TestServer};

pub const RANKER: &str = "examples/models/ranker/1/model.onnx";
pub const TWO_TOWER: &str = "examples/models/two_tower/1/model.onnx";

/// A model repository in a temporary folder, removed when dropped.
pub struct TempRepo(PathBuf);

impl TempRepo {
    pub fn new(test: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("tensorport-budget-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    /// Adds version `version` of `name`, a copy of `file`, with an optional config.toml.
    pub fn add(&self, name: &str, version: u64, file: &str, config: Option<&str>) -> &Self {
        let folder = self.0.join(name).join(version.to_string());
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::copy(repo_path(file), folder.join("model.onnx")).unwrap();
        if let Some(config) = config {
            std::fs::write(self.0.join(name).join("config.toml"), config).unwrap();
        }
        self
    }

    pub fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempRepo {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn file_size(file: &str) -> u64 {
    std::fs::metadata(repo_path(file)).unwrap().len()
}

pub async fn start(
    repo: &TempRepo,
    budget: Option<u64>,
    decorate: Option<BackendDecorator>,
) -> TestServer {
    TestServer::start_configured(
        repo.path(),
        BatchSettings::default(),
        ServerOptions::default(),
        decorate,
        |repository| {
            repository
                .with_memory_budget(budget)
                .with_memory_meter(MemoryMeter::FileSize)
        },
    )
    .await
}

/// A KServe v2 inference of one ranker row; returns the status and the body.
pub async fn infer(client: &reqwest::Client, rest: &str, model: &str) -> (u16, Value) {
    infer_rows(client, rest, model, 1).await
}

/// A KServe v2 inference of `rows` ranker rows in one request.
pub async fn infer_rows(
    client: &reqwest::Client,
    rest: &str,
    model: &str,
    rows: usize,
) -> (u16, Value) {
    let body = json!({"inputs": [{
        "name": "features", "shape": [rows, 16], "datatype": "FP32", "data": vec![0.5f32; rows * 16]
    }]});
    let response = client
        .post(format!("{rest}/v2/models/{model}/infer"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

pub async fn scrape(client: &reqwest::Client, rest: &str) -> String {
    client
        .get(format!("{rest}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The sum of the samples of `metric` whose labels include `label` (every sample for "").
pub fn sum(exposition: &str, metric: &str, label: &str) -> f64 {
    exposition
        .lines()
        .filter(|line| line.starts_with(&format!("{metric}{{")))
        .filter(|line| line.contains(label))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The KServe repository index: (name, version) -> (state, reason).
pub async fn index(client: &reqwest::Client, rest: &str) -> Vec<Value> {
    client
        .post(format!("{rest}/v2/repository/index"))
        .send()
        .await
        .unwrap()
        .json::<Vec<Value>>()
        .await
        .unwrap()
}

pub fn entry<'a>(index: &'a [Value], model: &str) -> &'a Value {
    index
        .iter()
        .find(|e| e["name"] == model)
        .unwrap_or_else(|| panic!("{model} is not in the index {index:?}"))
}
