//! Requests that run on the caller's thread: when they may, and that the queue, instances and
//! statistics stay right around them. Whether a request ran inline is read from the counter,
//! never from timing: the bound is set so that every measured run is "fast" (or none is).

use super::*;

/// A bound no run of the mock comes near: once measured, the mock counts as fast.
const ANY_MEASURED: Duration = Duration::from_secs(3600);

fn spawn_inline(
    mock: &Arc<Mock>,
    settings: &BatchSettings,
    instances: usize,
    inline_max: Duration,
    telemetry: Telemetry,
) -> BatcherHandle {
    let execution = Execution {
        instances,
        inline_max,
        ..Execution::default()
    };
    Batcher::spawn_with("m", mock.clone(), settings, execution, telemetry)
}

#[tokio::test(start_paused = true)]
async fn an_unmeasured_model_queues_then_runs_inline_once_measured_fast() {
    let mock = Arc::new(Mock::new(Behaviour::Double));
    let telemetry = Telemetry::default();
    let stats = telemetry.stats.clone();
    let handle = spawn_inline(
        &mock,
        &settings(8, Duration::ZERO),
        1,
        ANY_MEASURED,
        telemetry,
    );
    doubled(handle.submit(request(1.0, 1, 2)).await, 1.0);
    assert_eq!(handle.inline_runs(), 0, "nothing was measured yet");
    doubled(handle.submit(request(2.0, 1, 2)).await, 2.0);
    doubled(handle.submit(request(3.0, 2, 2)).await, 3.0);
    assert_eq!(handle.inline_runs(), 2);
    assert_eq!(batches(&mock), vec![vec![1.0], vec![2.0], vec![3.0, 3.0]]);
    // Counted as any run is: one execution per request, its rows, its instance's busy time,
    // and a queue entry of no wait.
    assert_eq!(
        stats
            .execution_count
            .load(std::sync::atomic::Ordering::Relaxed),
        3
    );
    assert_eq!(
        stats
            .inference_count
            .load(std::sync::atomic::Ordering::Relaxed),
        4
    );
    assert_eq!(stats.queue.get().0, 3);
    assert_eq!(stats.instance_busy()[0].0, 3);
}

#[tokio::test(start_paused = true)]
async fn a_model_measured_slower_than_the_bound_always_queues() {
    let mock = Arc::new(Mock::new(Behaviour::Double));
    // No run of anything takes a nanosecond or less.
    let handle = spawn_inline(
        &mock,
        &settings(0, Duration::ZERO),
        1,
        Duration::from_nanos(1),
        Telemetry::default(),
    );
    for value in [1.0, 2.0, 3.0] {
        doubled(handle.submit(request(value, 1, 2)).await, value);
    }
    assert_eq!(handle.inline_runs(), 0);
    assert_eq!(mock.runs().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn with_the_instance_busy_requests_queue_and_merge_and_an_idle_one_runs_inline() {
    let (mock, permits, mut starts) = Mock::gated(Behaviour::Double);
    let mock = Arc::new(mock);
    let handle = Arc::new(spawn_inline(
        &mock,
        &settings(8, Duration::ZERO),
        1,
        ANY_MEASURED,
        Telemetry::default(),
    ));
    // Measure the model once (through the queue: `enqueue` never runs inline).
    permits.send(()).unwrap();
    doubled(handle.enqueue(request(1.0, 1, 2)).unwrap().await, 1.0);
    starts.recv().await.unwrap();

    // Hold the only instance on a blocking thread.
    let holding = handle.enqueue(request(2.0, 1, 2)).unwrap();
    starts.recv().await.unwrap();
    // The model is fast, but its instance is busy: these queue, and then the queue is not
    // empty, so none skips it.
    let waiting = tokio::spawn({
        let handle = handle.clone();
        async move { join_all([3.0, 4.0, 5.0].map(|value| handle.submit(request(value, 1, 2)))).await }
    });
    while handle.queue_depth() < 3 {
        tokio::task::yield_now().await;
    }
    assert_eq!(handle.inline_runs(), 0);
    permits.send(()).unwrap();
    permits.send(()).unwrap();
    doubled(holding.await, 2.0);
    for (reply, value) in waiting.await.unwrap().into_iter().zip([3.0, 4.0, 5.0]) {
        doubled(reply, value);
    }
    assert_eq!(
        batches(&mock),
        vec![vec![1.0], vec![2.0], vec![3.0, 4.0, 5.0]]
    );
    assert_eq!(handle.inline_runs(), 0);

    // Idle again: the next request runs inline (its permit given in advance, since it runs
    // on this very thread).
    while starts.try_recv().is_ok() {}
    permits.send(()).unwrap();
    doubled(handle.submit(request(6.0, 1, 2)).await, 6.0);
    assert_eq!(handle.inline_runs(), 1);
    assert_eq!(batches(&mock).last(), Some(&vec![6.0]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_run_holds_its_instance_and_hands_it_to_the_queue_when_done() {
    let (mock, permits, mut starts) = Mock::gated(Behaviour::Double);
    let mock = Arc::new(mock);
    let handle = Arc::new(spawn_inline(
        &mock,
        &settings(0, Duration::ZERO),
        1,
        ANY_MEASURED,
        Telemetry::default(),
    ));
    permits.send(()).unwrap();
    doubled(handle.enqueue(request(1.0, 1, 2)).unwrap().await, 1.0);
    starts.recv().await.unwrap();

    // An inline run on a worker thread, held at the gate.
    let inline = tokio::spawn({
        let handle = handle.clone();
        async move { handle.submit(request(2.0, 1, 2)).await }
    });
    starts.recv().await.unwrap();
    assert_eq!(handle.inline_runs(), 1);
    // Its instance is taken: this one queues, and the batcher may not start it.
    let queued = handle.enqueue(request(3.0, 1, 2)).unwrap();
    tokio::task::yield_now().await;
    assert_eq!(
        mock.runs().len(),
        1,
        "a second run started beside the inline one"
    );
    // Releasing the inline run frees the instance, and the batcher is told: the queued
    // request runs (without that, this would wait forever).
    permits.send(()).unwrap();
    permits.send(()).unwrap();
    doubled(inline.await.unwrap(), 2.0);
    let queued = tokio::time::timeout(Duration::from_secs(60), queued).await;
    doubled(queued.expect("the queued request never ran"), 3.0);
    assert_eq!(batches(&mock), vec![vec![1.0], vec![2.0], vec![3.0]]);
}

#[tokio::test(start_paused = true)]
async fn an_inline_panic_fails_that_request_only_and_frees_the_instance() {
    let mock = Arc::new(Mock::new(Behaviour::PanicNegative));
    let handle = spawn_inline(
        &mock,
        &settings(0, Duration::ZERO),
        1,
        ANY_MEASURED,
        Telemetry::default(),
    );
    doubled(handle.submit(request(1.0, 1, 2)).await, 1.0);
    let err = handle.submit(request(-1.0, 1, 2)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Internal);
    assert!(err.to_string().contains("negative value"), "{err}");
    assert_eq!(handle.inline_runs(), 1);
    doubled(handle.submit(request(2.0, 1, 2)).await, 2.0);
    assert_eq!(handle.inline_runs(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_expired_request_is_refused_not_run_inline() {
    let mock = Arc::new(Mock::new(Behaviour::Double));
    let handle = spawn_inline(
        &mock,
        &settings(0, Duration::ZERO),
        1,
        ANY_MEASURED,
        Telemetry::default(),
    );
    doubled(handle.submit(request(1.0, 1, 2)).await, 1.0);
    let expired = request(2.0, 1, 2).with_deadline(Some(tokio::time::Instant::now()));
    let err = handle.submit(expired).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::DeadlineExceeded);
    assert_eq!(handle.inline_runs(), 0);
    assert_eq!(mock.runs().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn inline_off_sends_every_request_through_the_queue() {
    let mock = Arc::new(Mock::new(Behaviour::Double));
    let handle = spawn_inline(
        &mock,
        &settings(0, Duration::ZERO),
        1,
        Duration::ZERO,
        Telemetry::default(),
    );
    for value in [1.0, 2.0, 3.0] {
        doubled(handle.submit(request(value, 1, 2)).await, value);
    }
    assert_eq!(handle.inline_runs(), 0);
}
