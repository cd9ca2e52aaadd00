//! The generator against the real server binary on free loopback ports, over every protocol:
//! each short run must finish with no errors and some throughput. Also the floor, through the
//! generator's own binary (ONNX Runtime allows one environment per process).
//!
//! Needs the server built (`cargo build --bins`, as `make test` does) or TENSORPORT_BIN, and
//! ONNX Runtime (`make venv`, or ORT_DYLIB_PATH).

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use tensorport::backend::onnx_library;
use tensorport_loadgen::{Config, InputSpec, Protocol, Report};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `<target>/<profile>/tensorport`: this test runs as `<target>/<profile>/deps/<test>`, and
/// `cargo build --bins` of the same profile puts the server two levels up, wherever
/// CARGO_TARGET_DIR or build.target-dir put the target directory.
fn built_beside_this_test() -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    exe.parent()
        .and_then(Path::parent)
        .map(|profile| profile.join("tensorport"))
        .expect("the test runs from <target>/<profile>/deps")
}

fn ort_library() -> PathBuf {
    let env_path = std::env::var_os("ORT_DYLIB_PATH").map(PathBuf::from);
    onnx_library::find(None, env_path.as_deref(), &[repo_root()])
        .unwrap_or_else(|| panic!("{}", onnx_library::HOW_TO_GET_IT))
}

/// `tensorport serve` on examples/models, killed on drop.
struct Server {
    child: Child,
    grpc: String,
    rest: String,
}

impl Server {
    fn start() -> Self {
        let binary = std::env::var_os("TENSORPORT_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(built_beside_this_test);
        assert!(
            binary.exists(),
            "no server binary at {}: run `cargo build --bins` or set TENSORPORT_BIN",
            binary.display()
        );
        let mut child = Command::new(&binary)
            .args([
                "serve",
                "--host",
                "127.0.0.1",
                "--grpc-port",
                "0",
                "--rest-port",
                "0",
            ])
            .arg("--model-dir")
            .arg(repo_root().join("examples/models"))
            .env("ORT_DYLIB_PATH", ort_library())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("server starts");
        let stderr = child.stderr.take().expect("server stderr");
        let mut lines = BufReader::new(stderr).lines();
        let mut listening = None;
        // The ports are bound first; the models serve once the load at start-up settles.
        for line in lines.by_ref().map_while(Result::ok) {
            if line.contains("initial load settled") {
                break;
            }
            listening = listening.or_else(|| {
                let fields = line.split("listening ").nth(1)?;
                let field = |key: &str| {
                    fields
                        .split_whitespace()
                        .find_map(|f| f.strip_prefix(key))
                        .map(str::to_owned)
                };
                Some((field("grpc=")?, field("rest=")?))
            });
        }
        let listening = listening.unwrap_or_else(|| panic!("the server exited before listening"));
        // Keep draining the log so the server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Self {
            child,
            grpc: listening.0,
            rest: listening.1,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ranker(protocol: Protocol, target: &str) -> Config {
    let features: InputSpec = "features:16".parse().unwrap();
    let mut config = Config::new(protocol, target, "ranker", vec![features]);
    config.duration = 1.0;
    config.warmup = 0.2;
    config.concurrency = Some(2);
    config.batch = 4;
    config
}

fn assert_clean(report: &Report) {
    assert_eq!(
        report.error_count, 0,
        "{} {}: errors {:?}",
        report.protocol, report.label, report.errors
    );
    assert!(
        report.requests > 0,
        "{}: no request completed",
        report.protocol
    );
    assert!(report.p50_us > 0.0 && report.p50_us <= report.max_us);
    assert_eq!(report.inferences_per_s, report.requests_per_s * 4.0);
}

#[tokio::test]
async fn every_protocol_runs_without_errors() {
    let server = Server::start();
    let mut configs = vec![
        ranker(Protocol::KserveGrpc, &server.grpc),
        ranker(Protocol::TfsGrpc, &server.grpc),
        ranker(Protocol::KserveHttp, &server.rest),
        ranker(Protocol::KserveHttpBinary, &server.rest),
        ranker(Protocol::TfsRest, &server.rest),
        ranker(Protocol::HealthLive, &server.rest),
    ];
    for (protocol, target) in [
        (Protocol::KserveGrpc, &server.grpc),
        (Protocol::KserveHttp, &server.rest),
    ] {
        let mut shm = ranker(protocol, target);
        shm.shm = true;
        shm.outputs = vec!["score:1".parse().unwrap()];
        shm.label = "shm".into();
        configs.push(shm);
    }
    let mut open = ranker(Protocol::KserveGrpc, &server.grpc);
    open.concurrency = None;
    open.rate = Some(200.0);
    open.label = "open loop".into();
    configs.push(open);

    for config in &configs {
        let report = tensorport_loadgen::run(config).await.unwrap();
        assert_clean(&report);
    }
}

#[tokio::test]
async fn a_wrong_model_is_counted_as_errors_by_kind() {
    let server = Server::start();
    let mut grpc = ranker(Protocol::KserveGrpc, &server.grpc);
    grpc.model = "no_such_model".into();
    let report = tensorport_loadgen::run(&grpc).await.unwrap();
    assert_eq!(report.requests, 0);
    assert!(
        report.errors.contains_key("grpc:NotFound"),
        "{:?}",
        report.errors
    );

    let mut http = ranker(Protocol::KserveHttp, &server.rest);
    http.model = "no_such_model".into();
    let report = tensorport_loadgen::run(&http).await.unwrap();
    assert!(
        report.errors.contains_key("http:404"),
        "{:?}",
        report.errors
    );
}

#[test]
fn the_floor_runs_the_model_in_process() {
    let output = Command::new(env!("CARGO_BIN_EXE_tensorport-loadgen"))
        .args([
            "--protocol",
            "floor",
            "--model",
            "ranker",
            "--input",
            "features:16",
        ])
        .args([
            "--batch",
            "4",
            "--duration",
            "1",
            "--warmup",
            "0.2",
            "--format",
            "json",
        ])
        .arg("--model-file")
        .arg(repo_root().join("examples/models/ranker/1/model.onnx"))
        .arg("--ort-library")
        .arg(ort_library())
        .output()
        .expect("loadgen runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["protocol"], "floor");
    assert_eq!(report["error_count"], 0);
    assert!(report["requests"].as_u64().unwrap() > 0);
}
