//! Overload benchmark: measures the server's capacity, then offers about 4x that rate,
//! open-loop (requests start on a fixed schedule whether or not earlier ones have finished),
//! for 20 s, once with overload protection on and once with it off, over KServe gRPC and HTTP.
//! It reports goodput, the latency of accepted requests, and how the rest were answered.
//!
//! `make bench-overload`, or after `cargo build --release`:
//! `taskset -c 1 cargo bench --bench overload -- [--seconds 20] [--factor 4] [--limit 8]`.
//! The server is the release binary, pinned to core 0 (when `taskset` exists); this process
//! is the load, and should run on the other core.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tensorport::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorport::proto::inference::model_infer_request::InferInputTensor;
use tensorport::proto::inference::ModelInferRequest;
use tonic::transport::Channel;

type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Rounds of the `spin` test model per request: about 0.6 ms of work on one core, so that
/// one core of load generator can offer several times what one core of server can serve.
const ROUNDS: i64 = 100;
/// gRPC connections the load is spread over.
const CHANNELS: usize = 4;
/// How long the client waits for any one answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

struct Options {
    binary: PathBuf,
    seconds: u64,
    factor: f64,
    limit: usize,
}

fn options() -> Options {
    let mut options = Options {
        binary: built_beside_this_bench(),
        seconds: 20,
        factor: 4.0,
        limit: 8,
    };
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        args.iter()
            .position(|arg| arg == name)
            .and_then(|at| args.get(at + 1))
            .cloned()
    };
    if let Some(binary) = value("--binary") {
        options.binary = PathBuf::from(binary);
    }
    if let Some(seconds) = value("--seconds").and_then(|v| v.parse().ok()) {
        options.seconds = seconds;
    }
    if let Some(factor) = value("--factor").and_then(|v| v.parse().ok()) {
        options.factor = factor;
    }
    if let Some(limit) = value("--limit").and_then(|v| v.parse().ok()) {
        options.limit = limit;
    }
    options
}

/// The server process, killed when dropped.
struct Server {
    child: Child,
    grpc: String,
    rest: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `<target>/release/tensorport`: this bench runs as `<target>/release/deps/<bench>`, wherever
/// CARGO_TARGET_DIR or build.target-dir put the target directory.
fn built_beside_this_bench() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("tensorport")))
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/tensorport"))
}

fn start_server(binary: &Path, flags: &[String]) -> BenchResult<Server> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let log = std::env::temp_dir().join(format!("tensorport-overload-{}.log", std::process::id()));
    let file = std::fs::File::create(&log)?;
    let mut command = if Path::new("/usr/bin/taskset").exists() {
        let mut command = Command::new("taskset");
        command.args(["-c", "0"]).arg(binary);
        command
    } else {
        Command::new(binary)
    };
    command
        .args(["serve", "--model-dir"])
        .arg(root.join("tests/models"))
        .args([
            "--host",
            "127.0.0.1",
            "--grpc-port",
            "0",
            "--rest-port",
            "0",
        ])
        .args(flags)
        .env("RUST_LOG", "warn,tensorport=info")
        .stdout(Stdio::null())
        .stderr(file);
    let child = command.spawn()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        // The ports are bound first; the models are ready once the load at start-up settles.
        let settled = text.contains("initial load settled");
        if let Some(line) = text
            .lines()
            .find(|line| line.contains("listening grpc="))
            .filter(|_| settled)
        {
            let field = |name: &str| {
                line.split_whitespace()
                    .find_map(|word| word.strip_prefix(name))
                    .map(str::to_owned)
                    .unwrap_or_default()
            };
            return Ok(Server {
                child,
                grpc: format!("http://{}", field("grpc=")),
                rest: format!("http://{}", field("rest=")),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("the server did not start; see {}", log.display()).into())
}

fn request() -> ModelInferRequest {
    let tensor = |name: &str, datatype: &str| InferInputTensor {
        name: name.into(),
        datatype: datatype.into(),
        shape: vec![1],
        ..Default::default()
    };
    ModelInferRequest {
        model_name: "spin".into(),
        inputs: vec![tensor("x", "FP32"), tensor("rounds", "INT64")],
        raw_input_contents: vec![
            1.5f32.to_le_bytes().to_vec().into(),
            ROUNDS.to_le_bytes().to_vec().into(),
        ],
        ..Default::default()
    }
}

fn json_request() -> serde_json::Value {
    json!({"inputs": [
        {"name": "x", "shape": [1], "datatype": "FP32", "data": [1.5]},
        {"name": "rounds", "shape": [1], "datatype": "INT64", "data": [ROUNDS]},
    ]})
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Protocol {
    Grpc,
    Http,
}

/// One answered request: how, and how long it took.
struct Sample {
    outcome: String,
    /// What the failure said, for the report's notes.
    detail: Option<String>,
    latency: Duration,
    finished: Instant,
}

#[derive(Clone)]
struct Clients {
    grpc: Vec<GrpcInferenceServiceClient<Channel>>,
    http: reqwest::Client,
    rest: String,
}

impl Clients {
    async fn connect(server: &Server) -> BenchResult<Self> {
        let mut grpc = Vec::new();
        for _ in 0..CHANNELS {
            grpc.push(GrpcInferenceServiceClient::connect(server.grpc.clone()).await?);
        }
        Ok(Self {
            grpc,
            http: reqwest::Client::builder()
                .timeout(CLIENT_TIMEOUT)
                .pool_max_idle_per_host(1024)
                .build()?,
            rest: server.rest.clone(),
        })
    }

    async fn call(&self, protocol: Protocol, n: usize) -> Sample {
        let started = Instant::now();
        let mut detail = None;
        let outcome = match protocol {
            Protocol::Grpc => {
                let mut client = self.grpc[n % self.grpc.len()].clone();
                let mut call = tonic::Request::new(request());
                call.set_timeout(CLIENT_TIMEOUT);
                match client.model_infer(call).await {
                    Ok(_) => "ok".to_owned(),
                    Err(status) => {
                        detail = Some(status.message().chars().take(120).collect());
                        format!("{:?}", status.code())
                    }
                }
            }
            Protocol::Http => {
                let url = format!("{}/v2/models/spin/infer", self.rest);
                match self.http.post(url).json(&json_request()).send().await {
                    Ok(response) if response.status().is_success() => {
                        // Read the body, as a client would.
                        match response.bytes().await {
                            Ok(_) => "ok".to_owned(),
                            Err(err) => format!("body: {err}"),
                        }
                    }
                    Ok(response) => format!("HTTP {}", response.status().as_u16()),
                    Err(err) if err.is_timeout() => "client timeout".to_owned(),
                    Err(err) => {
                        detail = Some(format!("{err:?}").chars().take(160).collect());
                        "transport error".to_owned()
                    }
                }
            }
        };
        Sample {
            outcome,
            detail,
            latency: started.elapsed(),
            finished: Instant::now(),
        }
    }
}

/// Requests per second served with `concurrency` clients each sending back to back.
async fn capacity(clients: &Clients, protocol: Protocol, seconds: u64) -> f64 {
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut workers = Vec::new();
    for worker in 0..8 {
        let clients = clients.clone();
        workers.push(tokio::spawn(async move {
            let mut ok = 0u64;
            while Instant::now() < end {
                if clients.call(protocol, worker).await.outcome == "ok" {
                    ok += 1;
                }
            }
            ok
        }));
    }
    let mut ok = 0;
    for worker in workers {
        ok += worker.await.unwrap_or(0);
    }
    ok as f64 / seconds as f64
}

struct Report {
    offered: f64,
    outcomes: BTreeMap<String, u64>,
    ok_latencies: Vec<Duration>,
    /// One example message per failing outcome.
    details: BTreeMap<String, String>,
    seconds: f64,
    answered_for: f64,
    unfinished: u64,
}

/// Starts `rate` requests per second for `seconds`, whatever happens to earlier ones.
async fn open_loop(clients: &Clients, protocol: Protocol, rate: f64, seconds: u64) -> Report {
    let samples = Arc::new(Mutex::new(Vec::<Sample>::new()));
    let started = Instant::now();
    let total = (rate * seconds as f64) as usize;
    let mut tasks = Vec::with_capacity(total);
    for n in 0..total {
        let due = started + Duration::from_secs_f64(n as f64 / rate);
        tokio::time::sleep_until(due.into()).await;
        let (clients, samples) = (clients.clone(), samples.clone());
        tasks.push(tokio::spawn(async move {
            let sample = clients.call(protocol, n).await;
            if let Ok(mut samples) = samples.lock() {
                samples.push(sample);
            }
        }));
    }
    let offered_for = started.elapsed();
    let grace = Instant::now() + CLIENT_TIMEOUT + Duration::from_secs(5);
    let mut unfinished = 0;
    for task in tasks {
        if task.is_finished() {
            continue;
        }
        if Instant::now() > grace || tokio::time::timeout_at(grace.into(), task).await.is_err() {
            unfinished += 1;
        }
    }
    let samples = std::mem::take(&mut *samples.lock().unwrap_or_else(|e| e.into_inner()));
    let mut outcomes = BTreeMap::new();
    let mut ok_latencies = Vec::new();
    // Goodput over the whole time answers took, backlog included: without protection the
    // last answers come long after the offer stopped.
    let last = samples
        .iter()
        .map(|sample| sample.finished)
        .max()
        .unwrap_or(started);
    let mut details = BTreeMap::new();
    for sample in samples {
        if let Some(detail) = sample.detail {
            details.entry(sample.outcome.clone()).or_insert(detail);
        }
        if sample.outcome == "ok" {
            ok_latencies.push(sample.latency);
        }
        *outcomes.entry(sample.outcome).or_insert(0) += 1;
    }
    ok_latencies.sort_unstable();
    Report {
        offered: total as f64 / offered_for.as_secs_f64(),
        outcomes,
        ok_latencies,
        details,
        seconds: offered_for.as_secs_f64(),
        answered_for: last.duration_since(started).as_secs_f64(),
        unfinished,
    }
}

/// The server's own p99 for answered `spin` requests: the upper bound of the first bucket of
/// `tensorport_request_duration_seconds` holding 99% of them, in ms.
async fn server_p99(clients: &Clients, protocol: Protocol) -> f64 {
    let label = match protocol {
        Protocol::Grpc => "kserve-grpc",
        Protocol::Http => "kserve-http",
    };
    let Ok(response) = clients
        .http
        .get(format!("{}/metrics", clients.rest))
        .send()
        .await
    else {
        return f64::NAN;
    };
    let text = response.text().await.unwrap_or_default();
    let suffix = format!("model=\"spin\",protocol=\"{label}\"}}");
    let buckets: Vec<(f64, f64)> = text
        .lines()
        .filter_map(|line| line.strip_prefix("tensorport_request_duration_seconds_bucket{le=\""))
        .filter_map(|rest| {
            let (le, rest) = rest.split_once("\",")?;
            let (labels, count) = rest.split_once(' ')?;
            (labels == suffix).then_some((le.parse().ok()?, count.parse().ok()?))
        })
        .collect();
    let total = buckets.last().map_or(0.0, |(_, count)| *count);
    buckets
        .iter()
        .find(|(_, count)| *count >= 0.99 * total)
        .map_or(f64::NAN, |(le, _)| le * 1000.0)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let at = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at].as_secs_f64() * 1000.0
}

fn main() -> BenchResult<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(run(options()))
}

async fn run(options: Options) -> BenchResult<()> {
    let protected = vec![
        "--max-concurrent-requests".to_owned(),
        options.limit.to_string(),
    ];
    let unprotected = vec![
        "--max-concurrent-requests".to_owned(),
        "0".to_owned(),
        "--max-queue-size".to_owned(),
        "1048576".to_owned(),
    ];
    println!(
        "## Overload: about {}x capacity for {} s (model spin, {ROUNDS} rounds per request)\n",
        options.factor, options.seconds
    );
    println!(
        "| protocol | protection | capacity (req/s) | offered (req/s) | goodput (req/s) | \
         accepted p50 (ms) | accepted p99 (ms) | server p99 (ms, bucket) | \
         refused (429 / RESOURCE_EXHAUSTED) | other |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
    let mut notes = Vec::new();
    for protocol in [Protocol::Grpc, Protocol::Http] {
        let mut measured = None;
        for (label, flags) in [("on", &protected), ("off", &unprotected)] {
            let server = start_server(&options.binary, flags)?;
            let clients = Clients::connect(&server).await?;
            // Warm up connections and the model.
            capacity(&clients, protocol, 1).await;
            let capacity = match measured {
                Some(capacity) => capacity,
                None => {
                    let capacity = capacity(&clients, protocol, 5).await;
                    measured = Some(capacity);
                    capacity
                }
            };
            let report = open_loop(
                &clients,
                protocol,
                capacity * options.factor,
                options.seconds,
            )
            .await;
            let server_p99 = server_p99(&clients, protocol).await;
            let ok = report.outcomes.get("ok").copied().unwrap_or(0);
            let refused: u64 = report
                .outcomes
                .iter()
                .filter(|(outcome, _)| *outcome == "ResourceExhausted" || *outcome == "HTTP 429")
                .map(|(_, count)| count)
                .sum();
            let other: Vec<String> = report
                .outcomes
                .iter()
                .filter(|(outcome, _)| {
                    !matches!(outcome.as_str(), "ok" | "ResourceExhausted" | "HTTP 429")
                })
                .map(|(outcome, count)| format!("{count} {outcome}"))
                .chain((report.unfinished > 0).then(|| format!("{} unfinished", report.unfinished)))
                .collect();
            println!(
                "| {:?} | {label} | {capacity:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {} | {refused} | {} |",
                protocol,
                report.offered,
                ok as f64 / report.answered_for.max(report.seconds),
                percentile(&report.ok_latencies, 0.50),
                percentile(&report.ok_latencies, 0.99),
                if server_p99.is_nan() {
                    "-".to_owned()
                } else {
                    format!("≤ {server_p99:.0}")
                },
                if other.is_empty() {
                    "none".to_owned()
                } else {
                    other.join(", ")
                },
            );
            for (outcome, detail) in &report.details {
                notes.push(format!(
                    "- {protocol:?}, protection {label}, {outcome}: {detail}"
                ));
            }
            drop(server);
        }
    }
    println!("\nExample messages of the failures:\n");
    for note in notes {
        println!("{note}");
    }
    Ok(())
}
