//! Backend errors and panics fail only what they must; shutdown answers what is queued.

use super::*;

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
