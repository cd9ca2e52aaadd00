//! What to run: the command line, also built directly by tests.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::error::LoadgenError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Protocol {
    /// KServe v2 gRPC `ModelInfer`, tensors in `raw_input_contents` (or in shared memory).
    KserveGrpc,
    /// KServe v2 HTTP with JSON tensors.
    KserveHttp,
    /// KServe v2 HTTP with the binary-tensor extension (raw bytes after a JSON header).
    KserveHttpBinary,
    /// TF Serving gRPC `Predict`, tensors in `tensor_content`.
    TfsGrpc,
    /// TF Serving REST `:predict`, columnar JSON (`inputs`).
    TfsRest,
    /// No server: the model run in-process through ONNX Runtime.
    Floor,
    /// KServe `GET /v2/health/live`: the HTTP stack alone, no model (`--model` and `--input`
    /// are still required, and ignored), as the ceiling KServe HTTP cells are compared with.
    HealthLive,
    /// KServe gRPC `ServerLive`: the gRPC stack alone, no model (`--model` and `--input` are
    /// still required, and ignored), as the ceiling KServe gRPC cells are compared with.
    HealthGrpc,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Self::KserveGrpc => "kserve-grpc",
            Self::KserveHttp => "kserve-http",
            Self::KserveHttpBinary => "kserve-http-binary",
            Self::TfsGrpc => "tfs-grpc",
            Self::TfsRest => "tfs-rest",
            Self::Floor => "floor",
            Self::HealthLive => "health-live",
            Self::HealthGrpc => "health-grpc",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A human-readable table.
    Table,
    /// One JSON object on one line, for scripts.
    Json,
}

/// A float32 input: its name and the shape of one row (the batch dimension is prepended).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputSpec {
    pub name: String,
    pub row_shape: Vec<usize>,
}

impl InputSpec {
    pub fn row_elements(&self) -> usize {
        self.row_shape.iter().product()
    }
}

/// `NAME:D1,D2,...`
impl FromStr for InputSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (name, dims) = text
            .split_once(':')
            .ok_or_else(|| format!("'{text}' is not NAME:D1,D2,..."))?;
        let row_shape = dims
            .split(',')
            .map(|d| {
                d.trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|&d| d > 0)
                    .ok_or_else(|| format!("'{d}' in '{text}' is not a positive dimension"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if name.is_empty() {
            return Err(format!("'{text}' has no input name"));
        }
        Ok(Self {
            name: name.to_owned(),
            row_shape,
        })
    }
}

/// A float32 output written to shared memory: its name and elements per row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputSpec {
    pub name: String,
    pub row_elements: usize,
}

/// `NAME:ELEMENTS_PER_ROW`
impl FromStr for OutputSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let input = InputSpec::from_str(text)?;
        Ok(Self {
            row_elements: input.row_elements(),
            name: input.name,
        })
    }
}

/// How requests are issued.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Load {
    /// `concurrency` requests always in flight; each worker sends its next when one returns.
    Closed { concurrency: usize },
    /// Requests sent at `rate` per second on a fixed schedule, whatever the replies do.
    Open { rate: f64 },
}

/// Drives a model server (or the in-process floor) and reports throughput and latency.
#[derive(Debug, Clone, Parser)]
#[command(name = "tensorport-loadgen", version)]
pub struct Config {
    /// Wire protocol, or `floor` for ONNX Runtime in-process.
    #[arg(long, value_enum)]
    pub protocol: Protocol,
    /// Server address, HOST:PORT (gRPC port for the gRPC protocols, HTTP port otherwise).
    #[arg(long, default_value = "127.0.0.1:8500")]
    pub target: String,
    /// Model name on the server.
    #[arg(long)]
    pub model: String,
    /// A float32 input, NAME:ROW_SHAPE (e.g. features:16); repeat for several.
    #[arg(long = "input", required = true)]
    pub inputs: Vec<InputSpec>,
    /// With --shm: a float32 output to place in the region, NAME:ELEMENTS_PER_ROW.
    #[arg(long = "output")]
    pub outputs: Vec<OutputSpec>,
    /// Rows per request.
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Closed loop with this many requests in flight (the default, 1).
    #[arg(long, conflicts_with = "rate")]
    pub concurrency: Option<usize>,
    /// Open loop at this many requests per second.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Measured seconds (after the warm-up).
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds of load before measuring starts.
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// KServe only: inputs and outputs in a system shared-memory region the generator
    /// creates and registers with the server.
    #[arg(long)]
    pub shm: bool,
    /// gRPC: HTTP/2 connections to open; worker `i` sends on connection `i % N`. (HTTP/1.1
    /// opens one connection per request in flight.)
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// KServe gRPC only: typed `contents.fp32_contents` instead of `raw_input_contents`
    /// (for servers without raw contents).
    #[arg(long)]
    pub typed_contents: bool,
    /// Open loop: requests allowed in flight; beyond it a send is counted as a
    /// `client:backlog` error instead of being made.
    #[arg(long, default_value_t = 4096)]
    pub max_in_flight: usize,
    /// Floor: the .onnx file.
    #[arg(long)]
    pub model_file: Option<PathBuf>,
    /// Floor: libonnxruntime.so (default: ORT_DYLIB_PATH).
    #[arg(long, env = "ORT_DYLIB_PATH")]
    pub ort_library: Option<PathBuf>,
    /// Floor: ONNX Runtime intra-op threads (the server's default is 1).
    #[arg(long, default_value_t = 1)]
    pub intra_threads: usize,
    /// Floor: ONNX Runtime inter-op threads.
    #[arg(long, default_value_t = 1)]
    pub inter_threads: usize,
    /// A label carried into the report.
    #[arg(long, default_value = "")]
    pub label: String,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

impl Config {
    /// A closed-loop run of `protocol` against `target` with every other option at its default.
    pub fn new(protocol: Protocol, target: &str, model: &str, inputs: Vec<InputSpec>) -> Self {
        Self {
            protocol,
            target: target.to_owned(),
            model: model.to_owned(),
            inputs,
            outputs: Vec::new(),
            batch: 1,
            concurrency: None,
            rate: None,
            duration: 10.0,
            warmup: 2.0,
            shm: false,
            connections: 1,
            typed_contents: false,
            max_in_flight: 4096,
            model_file: None,
            ort_library: None,
            intra_threads: 1,
            inter_threads: 1,
            label: String::new(),
            format: Format::Table,
        }
    }

    pub fn load(&self) -> Load {
        match self.rate {
            Some(rate) => Load::Open { rate },
            None => Load::Closed {
                concurrency: self.concurrency.unwrap_or(1),
            },
        }
    }

    pub fn measured(&self) -> Duration {
        Duration::from_secs_f64(self.duration)
    }

    pub fn warmup(&self) -> Duration {
        Duration::from_secs_f64(self.warmup)
    }

    /// Checks what clap cannot: combinations and ranges.
    pub fn validate(&self) -> Result<(), LoadgenError> {
        let bad = |message: &str| Err(LoadgenError::Config(message.to_owned()));
        if self.batch == 0 {
            return bad("--batch must be at least 1");
        }
        if self.connections == 0 {
            return bad("--connections must be at least 1");
        }
        if !(self.duration > 0.0 && self.duration.is_finite()) {
            return bad("--duration must be a positive number of seconds");
        }
        if !(self.warmup >= 0.0 && self.warmup.is_finite()) {
            return bad("--warmup must be a non-negative number of seconds");
        }
        match self.load() {
            Load::Closed { concurrency: 0 } => return bad("--concurrency must be at least 1"),
            Load::Open { rate } if !(rate > 0.0 && rate.is_finite()) => {
                return bad("--rate must be a positive number of requests per second")
            }
            _ => {}
        }
        let kserve = matches!(
            self.protocol,
            Protocol::KserveGrpc | Protocol::KserveHttp | Protocol::KserveHttpBinary
        );
        if self.shm && !kserve {
            return bad("--shm needs a KServe protocol");
        }
        if self.shm && self.protocol == Protocol::KserveHttpBinary {
            return bad("--shm sends no tensor bytes: use kserve-http");
        }
        if !self.shm && !self.outputs.is_empty() {
            return bad("--output places outputs in shared memory: it needs --shm");
        }
        if self.typed_contents && (self.protocol != Protocol::KserveGrpc || self.shm) {
            return bad("--typed-contents applies to kserve-grpc without --shm");
        }
        if self.protocol == Protocol::Floor && self.model_file.is_none() {
            return bad("--protocol floor needs --model-file");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_specs_parse_and_reject() {
        let spec: InputSpec = "features:16".parse().unwrap();
        assert_eq!(spec.row_shape, vec![16]);
        let spec: InputSpec = "x:3,4".parse().unwrap();
        assert_eq!(spec.row_elements(), 12);
        assert!("features".parse::<InputSpec>().is_err());
        assert!("x:0".parse::<InputSpec>().is_err());
        assert!(":4".parse::<InputSpec>().is_err());
    }

    #[test]
    fn options_that_do_not_combine_are_refused() {
        let inputs = vec!["x:4".parse().unwrap()];
        let mut config = Config::new(Protocol::TfsGrpc, "127.0.0.1:1", "m", inputs);
        assert!(config.validate().is_ok());
        config.shm = true;
        assert!(config.validate().is_err());
        config.shm = false;
        config.rate = Some(0.0);
        assert!(config.validate().is_err());
        config.rate = None;
        config.protocol = Protocol::Floor;
        assert!(config.validate().is_err());
    }
}
