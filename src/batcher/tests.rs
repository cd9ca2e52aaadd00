//! The actor under a paused clock, against a mock backend (the only place a mock is used).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;

use super::*;
use crate::backend::{Backend, BackendError, NamedTensor, Signature, TensorSpec};
use crate::error_kind::ErrorKind;

type Error = BatcherError;
use crate::tensor::{DataType, Tensor};

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

#[tokio::test(start_paused = true)]
async fn a_full_batch_runs_without_waiting_for_the_delay() {
    let mock = Arc::new(Mock::new(Behaviour::Double));
    let handle = spawn(&mock, &settings(4, Duration::from_secs(1)));
    let t0 = Instant::now();
    let pending = enqueue_all(&handle, &[1.0, 2.0, 3.0, 4.0]);
    for (reply, value) in join_all(pending)
        .await
        .into_iter()
        .zip([1.0, 2.0, 3.0, 4.0])
    {
        assert_eq!(doubled(reply, value), vec![1, 2]);
    }
    assert_eq!(t0.elapsed(), Duration::ZERO);
    assert_eq!(batches(&mock), vec![vec![1.0, 2.0, 3.0, 4.0]]);
}

#[tokio::test(start_paused = true)]
async fn a_partial_batch_runs_after_the_oldest_request_waited_the_delay() {
    let mock = Arc::new(Mock::new(Behaviour::Double));
    let handle = spawn(&mock, &settings(8, Duration::from_millis(10)));
    let t0 = Instant::now();
    let first = handle.enqueue(request(1.0, 1, 2)).unwrap();
    tokio::time::sleep(Duration::from_millis(4)).await;
    let second = handle.enqueue(request(2.0, 2, 2)).unwrap();
    let (a, b) = tokio::join!(first, second);
    assert_eq!(doubled(a, 1.0), vec![1, 2]);
    assert_eq!(doubled(b, 2.0), vec![2, 2]);
    assert_eq!(t0.elapsed(), Duration::from_millis(10));
    assert_eq!(batches(&mock), vec![vec![1.0, 2.0, 2.0]]);
}

#[tokio::test(start_paused = true)]
async fn a_preferred_size_is_cut_early_and_the_rest_waits() {
    let mock = Arc::new(Mock::new(Behaviour::Double));
    let mut config = settings(8, Duration::from_millis(10));
    config.preferred_batch_sizes = vec![2, 4];
    let handle = spawn(&mock, &config);
    let t0 = Instant::now();
    let mut pending = enqueue_all(&handle, &[1.0, 2.0, 3.0, 4.0, 5.0]);
    let last = pending.pop().unwrap();
    join_all(pending).await;
    assert_eq!(t0.elapsed(), Duration::ZERO);
    doubled(last.await, 5.0);
    assert_eq!(t0.elapsed(), Duration::from_millis(10));
    assert_eq!(batches(&mock), vec![vec![1.0, 2.0, 3.0, 4.0], vec![5.0]]);
}

#[tokio::test(start_paused = true)]
async fn requests_of_different_shapes_or_outputs_are_not_merged() {
    let mock = Arc::new(Mock::new(Behaviour::Double));
    let handle = spawn(&mock, &settings(8, Duration::from_millis(1)));
    let sums = request_for("sum", 5.0, 1, 2);
    let pending = vec![
        handle.enqueue(request(1.0, 1, 2)).unwrap(),
        handle.enqueue(request(2.0, 1, 3)).unwrap(),
        handle.enqueue(request(3.0, 2, 2)).unwrap(),
        handle.enqueue(request(4.0, 1, 3)).unwrap(),
        handle.enqueue(sums).unwrap(),
    ];
    let replies = join_all(pending).await;
    // Elements of x per run: the two [.., 2] requests, the two [1, 3] ones, the `sum` one.
    let sizes: Vec<usize> = mock.runs().iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![6, 6, 2]);
    let mut replies = replies.into_iter();
    assert_eq!(doubled(replies.next().unwrap(), 1.0), vec![1, 2]);
    assert_eq!(doubled(replies.next().unwrap(), 2.0), vec![1, 3]);
    assert_eq!(doubled(replies.next().unwrap(), 3.0), vec![2, 2]);
    assert_eq!(doubled(replies.next().unwrap(), 4.0), vec![1, 3]);
    let sum = replies.next().unwrap().unwrap();
    assert_eq!(sum[0].0, "sum");
    assert_eq!(sum[0].1.view::<f32>().unwrap().as_ref(), &[10.0]);
}

#[tokio::test(start_paused = true)]
async fn a_request_whose_deadline_passes_in_the_queue_is_answered_not_run() {
    let (mock, permits, mut starts) = Mock::gated(Behaviour::Double);
    let mock = Arc::new(mock);
    let handle = spawn(&mock, &settings(4, Duration::ZERO));
    let running = handle.enqueue(request(1.0, 1, 2)).unwrap();
    starts.recv().await.unwrap();

    let late = request(2.0, 1, 2).with_deadline(Some(Instant::now() + Duration::from_millis(5)));
    let late = handle.enqueue(late).unwrap();
    let patient = handle.enqueue(request(3.0, 1, 2)).unwrap();
    // Let the actor queue both and go to sleep until the deadline.
    tokio::task::yield_now().await;
    assert_eq!(handle.queue_depth(), 2);
    // The backend is busy (and holds the paused clock), so move time by hand: the deadline is
    // answered by the actor's timer while the first batch still runs.
    tokio::time::advance(Duration::from_millis(5)).await;
    let err = late.await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::DeadlineExceeded);
    assert_eq!(handle.queue_depth(), 1);

    permits.send(()).unwrap();
    permits.send(()).unwrap();
    doubled(running.await, 1.0);
    doubled(patient.await, 3.0);
    assert_eq!(batches(&mock), vec![vec![1.0], vec![3.0]]);

    let expired = request(4.0, 1, 2).with_deadline(Some(Instant::now()));
    let refused = handle.enqueue(expired).err().unwrap();
    assert_eq!(refused.kind(), ErrorKind::DeadlineExceeded);
}

#[tokio::test(start_paused = true)]
async fn a_request_whose_client_left_is_dropped_before_running() {
    let (mock, permits, mut starts) = Mock::gated(Behaviour::Double);
    let mock = Arc::new(mock);
    let handle = spawn(&mock, &settings(4, Duration::ZERO));
    let running = handle.enqueue(request(1.0, 1, 2)).unwrap();
    starts.recv().await.unwrap();
    drop(handle.enqueue(request(2.0, 1, 2)).unwrap());
    let stays = handle.enqueue(request(3.0, 1, 2)).unwrap();
    permits.send(()).unwrap();
    permits.send(()).unwrap();
    doubled(running.await, 1.0);
    doubled(stays.await, 3.0);
    assert_eq!(batches(&mock), vec![vec![1.0], vec![3.0]]);
    assert_eq!(handle.queue_depth(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_refuses_at_once() {
    let (mock, permits, mut starts) = Mock::gated(Behaviour::Double);
    let mock = Arc::new(mock);
    let mut config = settings(4, Duration::ZERO);
    config.max_queue_size = 2;
    let handle = spawn(&mock, &config);
    let running = handle.enqueue(request(1.0, 1, 2)).unwrap();
    starts.recv().await.unwrap();
    let queued = enqueue_all(&handle, &[2.0, 3.0]);
    assert_eq!(handle.queue_depth(), 2);
    let refused = handle.enqueue(request(4.0, 1, 2)).err().unwrap();
    assert!(matches!(refused, BatcherError::QueueFull { .. }));
    assert_eq!(refused.kind(), ErrorKind::ResourceExhausted);

    permits.send(()).unwrap();
    permits.send(()).unwrap();
    doubled(running.await, 1.0);
    for (reply, value) in join_all(queued).await.into_iter().zip([2.0, 3.0]) {
        doubled(reply, value);
    }
    assert_eq!(handle.queue_depth(), 0);
    assert_eq!(batches(&mock), vec![vec![1.0], vec![2.0, 3.0]]);
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_still_admits_high_priority_requests_and_runs_them_first() {
    let (mock, permits, mut starts) = Mock::gated(Behaviour::Double);
    let mock = Arc::new(mock);
    let mut config = settings(1, Duration::ZERO);
    config.max_queue_size = 2;
    let handle = spawn(&mock, &config);
    let running = handle.enqueue(request(1.0, 1, 2)).unwrap();
    starts.recv().await.unwrap();
    let queued = enqueue_all(&handle, &[2.0, 3.0]);
    assert!(matches!(
        handle.enqueue(request(4.0, 1, 2)),
        Err(BatcherError::QueueFull { .. })
    ));
    let urgent = |value| request(value, 1, 2).with_priority(Priority::High);
    // A queue of 2 has a reserve of 1 for high priority, and no more.
    let first = handle.enqueue(urgent(5.0)).unwrap();
    assert!(matches!(
        handle.enqueue(urgent(6.0)),
        Err(BatcherError::QueueFull { .. })
    ));

    for _ in 0..4 {
        permits.send(()).unwrap();
    }
    doubled(running.await, 1.0);
    doubled(first.await, 5.0);
    join_all(queued).await;
    assert_eq!(
        batches(&mock),
        vec![vec![1.0], vec![5.0], vec![2.0], vec![3.0]]
    );
}

#[tokio::test(start_paused = true)]
async fn batching_off_runs_each_request_alone_in_arrival_order() {
    let mock = Arc::new(Mock::new(Behaviour::Double));
    let handle = spawn(&mock, &BatchSettings::default());
    let pending = enqueue_all(&handle, &[1.0, 2.0, 3.0]);
    for (reply, value) in join_all(pending).await.into_iter().zip([1.0, 2.0, 3.0]) {
        doubled(reply, value);
    }
    assert_eq!(batches(&mock), vec![vec![1.0], vec![2.0], vec![3.0]]);
}

#[tokio::test(start_paused = true)]
async fn a_lone_request_reaches_the_backend_by_reference() {
    let mock = Arc::new(Mock::new(Behaviour::Double));
    let handle = spawn(&mock, &settings(4, Duration::ZERO));
    let lone = request(1.0, 3, 2);
    let address = lone.inputs()[0].1.bytes().unwrap().as_ptr() as usize;
    doubled(handle.submit(lone).await, 1.0);
    assert_eq!(mock.runs.lock().unwrap()[0].1, address);
}

#[tokio::test(start_paused = true)]
async fn a_backend_error_fails_every_request_of_the_batch() {
    let mock = Arc::new(Mock::new(Behaviour::Fail));
    let handle = spawn(&mock, &settings(4, Duration::ZERO));
    let pending = enqueue_all(&handle, &[1.0, 2.0, 3.0]);
    for reply in join_all(pending).await {
        let err = reply.unwrap_err();
        assert!(
            matches!(err, BatcherError::Backend(BackendError::Runtime(_))),
            "{err}"
        );
        assert!(err.to_string().contains("boom"));
    }
    // The merged run, then each request alone.
    assert_eq!(mock.runs().len(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_failed_merged_batch_fails_only_the_request_that_caused_it() {
    let mock = Arc::new(Mock::new(Behaviour::FailNegative));
    let handle = spawn(&mock, &settings(4, Duration::ZERO));
    let replies = join_all(enqueue_all(&handle, &[1.0, -2.0, 3.0])).await;
    let mut replies = replies.into_iter();
    doubled(replies.next().unwrap(), 1.0);
    let err = replies.next().unwrap().unwrap_err();
    assert!(err.to_string().contains("negative"), "{err}");
    doubled(replies.next().unwrap(), 3.0);
    assert_eq!(mock.runs().len(), 4, "one merged run, then three alone");
}

#[tokio::test(start_paused = true)]
async fn a_backend_panic_fails_its_batch_and_the_batcher_carries_on() {
    let mock = Arc::new(Mock::new(Behaviour::PanicOnce));
    let handle = spawn(&mock, &settings(4, Duration::ZERO));
    let pending = enqueue_all(&handle, &[1.0, 2.0]);
    for reply in join_all(pending).await {
        let err = reply.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Internal);
        assert!(err.to_string().contains("fell over"), "{err}");
    }
    doubled(handle.submit(request(3.0, 1, 2)).await, 3.0);
}

#[tokio::test(start_paused = true)]
async fn outputs_without_a_batch_dimension_fail_merged_batches_only() {
    let mock = Arc::new(Mock::new(Behaviour::OneRow));
    let handle = spawn(&mock, &settings(4, Duration::ZERO));
    let pending = enqueue_all(&handle, &[1.0, 2.0]);
    for reply in join_all(pending).await {
        let err = reply.unwrap_err();
        assert!(
            matches!(
                err,
                BatcherError::Batch(BatchError::OutputNotBatched { .. })
            ),
            "{err}"
        );
    }
    doubled(handle.submit(request(3.0, 1, 2)).await, 3.0);
}

#[tokio::test(start_paused = true)]
async fn shutdown_runs_what_is_queued_then_stops() {
    let mock = Arc::new(Mock::new(Behaviour::Double));
    let handle = spawn(&mock, &settings(4, Duration::from_secs(1)));
    let t0 = Instant::now();
    let pending = enqueue_all(&handle, &[1.0, 2.0, 3.0]);
    handle.shutdown().await;
    assert_eq!(t0.elapsed(), Duration::ZERO);
    for (reply, value) in join_all(pending).await.into_iter().zip([1.0, 2.0, 3.0]) {
        doubled(reply, value);
    }
    assert_eq!(batches(&mock), vec![vec![1.0, 2.0, 3.0]]);
}

#[tokio::test(start_paused = true)]
async fn two_instances_run_two_batches_at_once_and_a_third_waits() {
    let (mock, permits, mut starts) = Mock::gated(Behaviour::Double);
    let mock = Arc::new(mock);
    let telemetry = Telemetry::default();
    let stats = telemetry.stats.clone();
    let handle = Batcher::spawn_instances(
        "m",
        mock.clone(),
        &settings(0, Duration::ZERO),
        2,
        telemetry,
    );
    assert_eq!(handle.instances(), 2);
    let first = handle.enqueue(request(1.0, 1, 2)).unwrap();
    let second = handle.enqueue(request(2.0, 1, 2)).unwrap();
    let third = handle.enqueue(request(3.0, 1, 2)).unwrap();
    // Both instances start a run before either is allowed to finish: with one instance the
    // second start would never come.
    starts.recv().await.unwrap();
    starts.recv().await.unwrap();
    tokio::task::yield_now().await;
    assert!(starts.try_recv().is_err(), "a third run started");
    assert_eq!(handle.queue_depth(), 1);

    for _ in 0..3 {
        permits.send(()).unwrap();
    }
    doubled(first.await, 1.0);
    doubled(second.await, 2.0);
    doubled(third.await, 3.0);
    let busy = stats.instance_busy();
    assert_eq!(busy.len(), 2, "{busy:?}");
    assert_eq!(busy.iter().map(|(runs, _)| runs).sum::<u64>(), 3);
    assert!(busy.iter().all(|(runs, _)| *runs >= 1), "{busy:?}");
}

#[tokio::test(start_paused = true)]
async fn with_every_instance_busy_queued_requests_still_merge() {
    let (mock, permits, mut starts) = Mock::gated(Behaviour::Double);
    let mock = Arc::new(mock);
    let handle = Batcher::spawn_instances(
        "m",
        mock.clone(),
        &settings(8, Duration::ZERO),
        2,
        Telemetry::default(),
    );
    // One at a time, so that the two do not merge into one batch.
    let first = handle.enqueue(request(1.0, 1, 2)).unwrap();
    starts.recv().await.unwrap();
    let second = handle.enqueue(request(2.0, 1, 2)).unwrap();
    starts.recv().await.unwrap();
    let busy = [first, second];
    // Both instances run; these three wait together and leave as one batch.
    let waiting = [
        handle.enqueue(request(3.0, 1, 2)).unwrap(),
        handle.enqueue(request(4.0, 1, 2)).unwrap(),
        handle.enqueue(request(5.0, 1, 2)).unwrap(),
    ];
    tokio::task::yield_now().await;
    assert_eq!(handle.queue_depth(), 3);
    for _ in 0..3 {
        permits.send(()).unwrap();
    }
    for (pending, value) in busy.into_iter().zip([1.0, 2.0]) {
        doubled(pending.await, value);
    }
    for (pending, value) in waiting.into_iter().zip([3.0, 4.0, 5.0]) {
        doubled(pending.await, value);
    }
    let mut runs = batches(&mock);
    runs.sort_by_key(Vec::len);
    assert_eq!(runs.len(), 3, "{runs:?}");
    assert_eq!(runs[2], vec![3.0, 4.0, 5.0]);
}
