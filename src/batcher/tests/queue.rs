//! When the actor cuts a batch, and what it refuses or drops instead of running.

use super::*;

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
async fn once_the_drain_begins_queued_requests_run_without_waiting_out_the_delay() {
    let mock = Arc::new(Mock::new(Behaviour::Double));
    let flush = Flush::default();
    let execution = Execution {
        flush: flush.clone(),
        ..Execution::default()
    };
    let config = settings(8, Duration::from_secs(3600));
    let handle = Batcher::spawn_with("m", mock.clone(), &config, execution, Telemetry::default());
    let t0 = Instant::now();
    let queued = handle.enqueue(request(1.0, 1, 2)).unwrap();
    // The actor queues it and sleeps until the delay runs out, an hour on.
    tokio::task::yield_now().await;
    assert_eq!(handle.queue_depth(), 1);
    flush.start();
    doubled(queued.await, 1.0);
    // Later requests do not wait either. (The clock is paused: it moves only when every
    // task waits on a timer, so a batch that waited for its delay would show here.)
    let later = handle.enqueue(request(2.0, 1, 2)).unwrap();
    doubled(later.await, 2.0);
    assert_eq!(t0.elapsed(), Duration::ZERO);
    assert_eq!(batches(&mock), vec![vec![1.0], vec![2.0]]);
}

#[tokio::test(start_paused = true)]
async fn a_batcher_started_after_the_drain_began_does_not_wait_either() {
    let mock = Arc::new(Mock::new(Behaviour::Double));
    let flush = Flush::default();
    flush.start();
    let execution = Execution {
        flush,
        ..Execution::default()
    };
    let config = settings(8, Duration::from_secs(3600));
    let handle = Batcher::spawn_with("m", mock.clone(), &config, execution, Telemetry::default());
    let t0 = Instant::now();
    doubled(handle.enqueue(request(1.0, 1, 2)).unwrap().await, 1.0);
    assert_eq!(t0.elapsed(), Duration::ZERO);
}
