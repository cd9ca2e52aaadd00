//! `[instances] count = N`: up to N batches of one model version run at once, each on its own
//! ONNX Runtime session, and the server says so (Triton's model configuration, the metrics).

// Test code fails loudly: a panic is a failed test with its message.
#![allow(clippy::expect_used)]

mod common;

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use common::{onnx_runtime, repo_path, TestResult, TestServer};
use tensorport::backend::onnx::OnnxSessionOptions;
use tensorport::backend::RuntimeThreads;
use tensorport::backend::{Backend, BackendError, NamedTensor, OutputTarget, Signature};
use tensorport::batcher::{BatchSettings, Batcher, Telemetry, ValidRequest};
use tensorport::tensor::Tensor;
use tensorport::ServerOptions;

const FEATURES: usize = 16;
const RANKER: &str = "examples/models/ranker/2/model.onnx";

/// Lets runs through only once `expected` of them are inside at the same time, so a test
/// learns that they overlapped without depending on how long anything takes. A run that
/// waits in vain fails (after a generous bound) instead of hanging the test.
struct Rendezvous {
    inner: Arc<dyn Backend>,
    expected: usize,
    arrived: Mutex<usize>,
    all_in: Condvar,
}

impl Rendezvous {
    fn meet(&self) -> Result<(), BackendError> {
        let mut arrived = self.arrived.lock().unwrap_or_else(|p| p.into_inner());
        *arrived += 1;
        self.all_in.notify_all();
        let (arrived, wait) = self
            .all_in
            .wait_timeout_while(arrived, Duration::from_secs(60), |n| *n < self.expected)
            .unwrap_or_else(|p| p.into_inner());
        if wait.timed_out() {
            return Err(BackendError::runtime(format!(
                "only {} of {} runs were ever in flight together",
                *arrived, self.expected
            )));
        }
        Ok(())
    }
}

impl Backend for Rendezvous {
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
        self.meet()?;
        self.inner.run(signature, inputs, outputs)
    }

    fn run_into(
        &self,
        signature: &Signature,
        inputs: Vec<NamedTensor>,
        outputs: &[String],
        targets: &[OutputTarget],
    ) -> Result<Vec<NamedTensor>, BackendError> {
        self.meet()?;
        self.inner.run_into(signature, inputs, outputs, targets)
    }
}

fn features(value: f32) -> Vec<NamedTensor> {
    let x = Tensor::from_vec(vec![1, FEATURES], vec![value; FEATURES]).expect("valid tensor");
    vec![("features".to_owned(), x)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_run_two_requests_of_one_version_at_once() -> TestResult {
    // Both runs reach the one shared session together: each waits at the rendezvous until
    // the other has arrived, then both call the runtime.
    two_requests_at_once(true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_with_sessions_of_their_own_run_at_once() -> TestResult {
    two_requests_at_once(false).await
}

async fn two_requests_at_once(shared: bool) -> TestResult {
    let runtime = onnx_runtime();
    let model = runtime.load_model(
        &repo_path(RANKER),
        RuntimeThreads::default(),
        &OnnxSessionOptions::default(),
        2,
        shared,
    )?;
    let alone = runtime.load_model(
        &repo_path(RANKER),
        RuntimeThreads::default(),
        &OnnxSessionOptions::default(),
        1,
        true,
    )?;
    let backend = Arc::new(Rendezvous {
        inner: Arc::new(model),
        expected: 2,
        arrived: Mutex::new(0),
        all_in: Condvar::new(),
    });
    let telemetry = Telemetry::default();
    let stats = telemetry.stats.clone();
    let batcher = Batcher::spawn_instances(
        "ranker",
        backend.clone(),
        &BatchSettings::default(),
        2,
        telemetry,
    );
    let signatures = backend.signatures().to_vec();
    let request = |value| ValidRequest::new(&signatures, 0, features(value), vec![], vec![]);
    let (a, b) = tokio::join!(
        batcher.submit(request(0.25)?),
        batcher.submit(request(-0.5)?)
    );
    // Each answer is the one its own inputs give when run alone.
    for (answer, value) in [(a?, 0.25), (b?, -0.5)] {
        let expected = alone.run(&signatures[0], features(value), &["score".to_owned()])?;
        assert_eq!(
            answer[0].1.view::<f32>()?.into_owned(),
            expected[0].1.view::<f32>()?.into_owned()
        );
    }
    let busy = stats.instance_busy();
    assert_eq!(
        busy.iter().map(|(runs, _)| *runs).collect::<Vec<_>>(),
        [1, 1]
    );
    batcher.shutdown().await;
    Ok(())
}

#[test]
fn many_threads_running_one_shared_session_each_get_their_own_answers() -> TestResult {
    let runtime = onnx_runtime();
    let shared = Arc::new(runtime.load_model(
        &repo_path(RANKER),
        RuntimeThreads::default(),
        &OnnxSessionOptions::default(),
        4,
        true,
    )?);
    let alone = runtime.load_model(
        &repo_path(RANKER),
        RuntimeThreads::default(),
        &OnnxSessionOptions::default(),
        1,
        true,
    )?;
    let signature = alone.signatures()[0].clone();
    let score = ["score".to_owned()];
    let values: Vec<f32> = (0..32).map(|i| i as f32 / 8.0 - 2.0).collect();
    let expected = values
        .iter()
        .map(|&v| {
            Ok(alone.run(&signature, features(v), &score)?[0]
                .1
                .view::<f32>()?
                .into_owned())
        })
        .collect::<Result<Vec<_>, Box<dyn std::error::Error>>>()?;
    let expected = Arc::new(expected);
    let threads: Vec<_> = (0..4)
        .map(|thread| {
            let (shared, expected, values, signature) = (
                shared.clone(),
                expected.clone(),
                values.clone(),
                signature.clone(),
            );
            std::thread::spawn(move || -> Result<usize, String> {
                let mut checked = 0;
                for round in 0..100 {
                    let i = (thread * 7 + round) % values.len();
                    let answer = shared
                        .run(&signature, features(values[i]), &["score".to_owned()])
                        .map_err(|err| err.to_string())?;
                    let got = answer[0].1.view::<f32>().map_err(|err| err.to_string())?;
                    if got.as_ref() != expected[i].as_slice() {
                        return Err(format!("input {i}: {got:?}, alone {:?}", expected[i]));
                    }
                    checked += 1;
                }
                Ok(checked)
            })
        })
        .collect();
    for thread in threads {
        let checked = thread.join().map_err(|_| "a thread panicked")??;
        assert_eq!(checked, 100);
    }
    Ok(())
}

/// A copy of the example ranker whose config.toml asks for `count` instances.
fn ranker_with_instances(count: usize) -> std::io::Result<tempdir::Dir> {
    let dir = tempdir::Dir::new(&format!("instances-{count}"))?;
    let version = dir.path().join("ranker").join("1");
    std::fs::create_dir_all(&version)?;
    std::fs::copy(repo_path(RANKER), version.join("model.onnx"))?;
    std::fs::write(
        dir.path().join("ranker").join("config.toml"),
        format!("[instances]\ncount = {count}\n"),
    )?;
    Ok(dir)
}

#[tokio::test]
async fn the_configured_count_is_reported_and_measured() -> TestResult {
    let models = ranker_with_instances(2)?;
    let server = TestServer::start_with(
        &models.path().display().to_string(),
        BatchSettings::default(),
        ServerOptions::default(),
    )
    .await;
    let client = reqwest::Client::new();
    let config: serde_json::Value = client
        .get(format!("{}/v2/models/ranker/config", server.rest_url))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(
        config["instance_group"],
        serde_json::json!([{ "name": "ranker", "kind": "KIND_CPU", "count": 2 }])
    );
    let body = serde_json::json!({
        "inputs": [{ "name": "features", "datatype": "FP32", "shape": [1, FEATURES],
                     "data": vec![0.5f32; FEATURES] }]
    });
    let answer = client
        .post(format!("{}/v2/models/ranker/infer", server.rest_url))
        .json(&body)
        .send()
        .await?;
    assert_eq!(answer.status(), 200);
    let metrics = client
        .get(format!("{}/metrics", server.rest_url))
        .send()
        .await?
        .text()
        .await?;
    for instance in ["0", "1"] {
        let series = format!(
            "tensorport_instance_busy_seconds_total{{model=\"ranker\",version=\"1\",instance=\"{instance}\"}}"
        );
        assert!(metrics.contains(&series), "no {series} in:\n{metrics}");
    }
    server.stop().await;
    Ok(())
}

/// A directory under the system's temporary one, removed when dropped.
mod tempdir {
    use std::path::{Path, PathBuf};

    pub struct Dir(PathBuf);

    impl Dir {
        pub fn new(name: &str) -> std::io::Result<Self> {
            let path =
                std::env::temp_dir().join(format!("tensorport-test-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path)?;
            Ok(Self(path))
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
