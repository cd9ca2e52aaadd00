//! Several instances: batches that run at once, and requests that merge while all are busy.

use super::*;

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

/// Yields until `handle`'s queue holds `depth` requests, or gives up after many tries.
async fn settle_at(handle: &BatcherHandle, depth: usize) -> usize {
    for _ in 0..1000 {
        if handle.queue_depth() == depth {
            break;
        }
        tokio::task::yield_now().await;
    }
    handle.queue_depth()
}

#[tokio::test(start_paused = true)]
async fn a_long_run_takes_a_full_batch_behind_it_and_still_runs_one_at_a_time() {
    let (mock, permits, mut starts) = Mock::gated(Behaviour::Double);
    let mock = Arc::new(mock);
    let handle = Batcher::spawn_instances(
        "m",
        mock.clone(),
        &settings(2, Duration::ZERO),
        1,
        Telemetry::default(),
    );
    // A first run held open for a few real milliseconds measures the model as long, so its
    // next runs go to the instance's own thread (when the process has more than one CPU).
    let first = handle.enqueue(request(1.0, 2, 2)).unwrap();
    starts.recv().await.unwrap();
    std::thread::sleep(2 * crate::batcher::instance_threads::LONG_RUN);
    permits.send(()).unwrap();
    doubled(first.await, 1.0);

    let running = handle.enqueue(request(2.0, 2, 2)).unwrap();
    starts.recv().await.unwrap();
    // A full batch and one short of full wait while the instance runs: the full one leaves
    // the queue to wait on the instance's thread, the other stays to gather company.
    let full = handle.enqueue(request(3.0, 2, 2)).unwrap();
    let short = handle.enqueue(request(4.0, 1, 2)).unwrap();
    let spread = std::thread::available_parallelism().map_or(1, usize::from) > 1;
    assert_eq!(settle_at(&handle, 1).await, if spread { 1 } else { 2 });
    assert!(
        starts.try_recv().is_err(),
        "a second run started beside the first"
    );

    permits.send(()).unwrap();
    doubled(running.await, 2.0);
    starts.recv().await.unwrap();
    assert!(starts.try_recv().is_err(), "two runs at once");
    permits.send(()).unwrap();
    doubled(full.await, 3.0);
    starts.recv().await.unwrap();
    permits.send(()).unwrap();
    doubled(short.await, 4.0);
    assert_eq!(
        batches(&mock),
        [vec![1.0; 2], vec![2.0; 2], vec![3.0; 2], vec![4.0]]
    );
}
