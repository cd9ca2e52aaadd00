//! The batcher under a paused clock, against a mock backend (the only place a mock is used):
//! the mock and the helpers here, the tests by concern in the children (queue.rs: when batches
//! are cut and what is refused or dropped; failures.rs: backend errors, panics and shutdown;
//! instances.rs: several batches at once; inline.rs: requests that run on the caller's thread;
//! split.rs: requests cut into pieces).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;

use super::*;
use crate::backend::{Backend, BackendError, NamedTensor, Signature, TensorSpec};
use crate::error_kind::ErrorKind;

use crate::tensor::{DataType, Tensor};

mod failures;
mod inline;
mod instances;
mod queue;
mod split;

type Error = BatcherError;

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Behaviour {
    /// `y = 2 * x` and `sum` = the sum of each row.
    Double,
    Fail,
    /// Fails any run that has a negative `x`: a runtime that rejects one request's data.
    FailNegative,
    PanicOnce,
    /// Panics on any run that has a negative `x`.
    PanicNegative,
    /// Returns one row whatever the batch size: a model without a batch dimension.
    OneRow,
}

/// Records every run; optionally waits for a permit before running, and reports each start.
pub(super) struct Mock {
    signatures: Vec<Signature>,
    behaviour: Behaviour,
    panicked: AtomicBool,
    /// The values of `x` of each run, and the address of its buffer.
    runs: Mutex<Vec<(Vec<f32>, usize)>>,
    gate: Option<Mutex<std_mpsc::Receiver<()>>>,
    started: Option<tokio::sync::mpsc::Sender<()>>,
}

impl Mock {
    pub(super) fn new(behaviour: Behaviour) -> Self {
        let spec = |name: &str, shape: Vec<i64>| TensorSpec::new(name, DataType::F32, shape);
        Self {
            signatures: vec![Signature {
                name: "serving_default".into(),
                inputs: vec![spec("x", vec![-1, -1])],
                outputs: vec![spec("y", vec![-1, -1]), spec("sum", vec![-1])],
            }],
            behaviour,
            panicked: AtomicBool::new(false),
            runs: Mutex::new(Vec::new()),
            gate: None,
            started: None,
        }
    }

    /// Each run announces itself on the returned receiver and waits for a permit.
    pub(super) fn gated(
        behaviour: Behaviour,
    ) -> (Self, std_mpsc::Sender<()>, tokio::sync::mpsc::Receiver<()>) {
        let (permits, gate) = std_mpsc::channel();
        let (started, starts) = tokio::sync::mpsc::channel(16);
        let mock = Self {
            gate: Some(Mutex::new(gate)),
            started: Some(started),
            ..Self::new(behaviour)
        };
        (mock, permits, starts)
    }

    pub(super) fn runs(&self) -> Vec<Vec<f32>> {
        let runs = self.runs.lock().unwrap();
        runs.iter().map(|(values, _)| values.clone()).collect()
    }
}

impl Backend for Mock {
    fn platform(&self) -> &'static str {
        "mock"
    }

    fn signatures(&self) -> &[Signature] {
        &self.signatures
    }

    fn run(
        &self,
        _signature: &Signature,
        inputs: Vec<NamedTensor>,
        outputs: &[String],
    ) -> Result<Vec<NamedTensor>, BackendError> {
        if let Some(started) = &self.started {
            // Not `blocking_send`: a run may happen inline, on the runtime's own thread.
            started.try_send(()).unwrap();
        }
        if let Some(gate) = &self.gate {
            gate.lock().unwrap().recv().unwrap();
        }
        let x = &inputs[0].1;
        let values = x.view::<f32>().unwrap().into_owned();
        let address = x.bytes().unwrap().as_ptr() as usize;
        self.runs.lock().unwrap().push((values.clone(), address));
        match self.behaviour {
            Behaviour::Fail => return Err(BackendError::Runtime("boom".into())),
            Behaviour::FailNegative if values.iter().any(|v| *v < 0.0) => {
                return Err(BackendError::Runtime("negative".into()))
            }
            Behaviour::PanicOnce if !self.panicked.swap(true, Ordering::SeqCst) => {
                panic!("the mock runtime fell over")
            }
            Behaviour::PanicNegative if values.iter().any(|v| *v < 0.0) => {
                panic!("the mock runtime fell over a negative value")
            }
            _ => {}
        }
        let shape = x.shape().to_vec();
        let (rows, width) = (shape[0], shape[1]);
        let result = |name: &str| match (name, self.behaviour) {
            ("y", Behaviour::OneRow) => Tensor::from_vec(
                vec![1, width],
                values[..width].iter().map(|v| v * 2.0).collect(),
            ),
            ("y", _) => Tensor::from_vec(shape.clone(), values.iter().map(|v| v * 2.0).collect()),
            _ => Tensor::from_vec(
                vec![rows],
                values
                    .chunks(width)
                    .map(|row| row.iter().sum::<f32>())
                    .collect(),
            ),
        };
        Ok(outputs
            .iter()
            .map(|name| (name.clone(), result(name).unwrap()))
            .collect())
    }
}

pub(super) fn settings(max_batch_size: usize, delay: Duration) -> BatchSettings {
    BatchSettings {
        max_batch_size,
        max_queue_delay_us: u64::try_from(delay.as_micros()).unwrap(),
        ..BatchSettings::default()
    }
}

fn spawn(mock: &Arc<Mock>, settings: &BatchSettings) -> BatcherHandle {
    Batcher::spawn("m", mock.clone(), settings, Telemetry::default())
}

/// A request with `rows` rows of `x`, each row `width` copies of `value`, asking for `y`.
pub(super) fn request(value: f32, rows: usize, width: usize) -> ValidRequest {
    request_for("y", value, rows, width)
}

/// Like [`request`], asking for `output`.
fn request_for(output: &str, value: f32, rows: usize, width: usize) -> ValidRequest {
    let x = Tensor::from_vec(vec![rows, width], vec![value; rows * width]).unwrap();
    let signatures = Mock::new(Behaviour::Double).signatures;
    ValidRequest::new(
        &signatures,
        0,
        vec![("x".into(), x)],
        vec![output.into()],
        Vec::new(),
    )
    .unwrap()
}

/// The `y` of an answer, checked to be twice the request's `value` in every element.
pub(super) fn doubled(reply: Result<Vec<NamedTensor>, Error>, value: f32) -> Vec<usize> {
    let outputs = reply.unwrap();
    assert_eq!(outputs.len(), 1);
    let (name, y) = &outputs[0];
    assert_eq!(name, "y");
    assert!(y.view::<f32>().unwrap().iter().all(|&v| v == 2.0 * value));
    y.shape().to_vec()
}

fn enqueue_all(handle: &BatcherHandle, values: &[f32]) -> Vec<Pending> {
    values
        .iter()
        .map(|&value| handle.enqueue(request(value, 1, 2)).unwrap())
        .collect()
}

/// The first element of each row of each run: which requests ran together.
pub(super) fn batches(mock: &Mock) -> Vec<Vec<f32>> {
    mock.runs()
        .into_iter()
        .map(|values| values.chunks(2).map(|row| row[0]).collect())
        .collect()
}
