//! Requests cut into pieces by `split_rows`: how many pieces one request may make, and that
//! its pieces are queued all together or not at all.

use super::*;

fn split_settings(max_queue_size: usize) -> BatchSettings {
    BatchSettings {
        split_rows: 1,
        max_queue_size,
        ..BatchSettings::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_request_that_would_make_too_many_pieces_is_refused_before_any_is_made() {
    let mock = Arc::new(Mock::new(Behaviour::Double));
    // Every piece is queued at once, so a queue of 64 bounds a request to 64 pieces.
    let handle = spawn(&mock, &split_settings(64));
    assert_eq!(handle.policy().max_pieces(), 64);
    let err = handle.submit(request(1.0, 65, 2)).await.unwrap_err();
    assert!(matches!(err, BatcherError::TooManyPieces(_)), "{err:?}");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    let text = err.to_string();
    for part in ["split_rows = 1", "65 rows", "65 pieces", "at most 64 rows"] {
        assert!(text.contains(part), "{text}");
    }
    assert_eq!(handle.queue_depth(), 0);
    assert!(mock.runs().is_empty());

    // At the bound it runs, as that many pieces, joined in order.
    let answer = handle.submit(request(2.0, 64, 2)).await;
    assert_eq!(doubled(answer, 2.0), vec![64, 2]);
    assert_eq!(mock.runs().len(), 64);
}

#[tokio::test(start_paused = true)]
async fn the_pieces_of_a_request_are_queued_all_together_or_not_at_all() {
    let (mock, permits, mut starts) = Mock::gated(Behaviour::Double);
    let mock = Arc::new(mock);
    let handle = spawn(&mock, &split_settings(4));
    let running = handle.enqueue(request(1.0, 1, 2)).unwrap();
    starts.recv().await.unwrap();
    let queued = handle.enqueue(request(2.0, 1, 2)).unwrap();
    // Four pieces need four places and three are left: none is queued, so none is left
    // behind to withdraw and nothing else is refused meanwhile.
    let refused = handle.submit(request(3.0, 4, 2)).await.unwrap_err();
    assert!(
        matches!(refused, BatcherError::QueueFull { .. }),
        "{refused:?}"
    );
    assert_eq!(handle.queue_depth(), 1);

    for _ in 0..5 {
        permits.send(()).unwrap();
    }
    let (three, running, queued) = tokio::join!(handle.submit(request(4.0, 3, 2)), running, queued);
    assert_eq!(doubled(three, 4.0), vec![3, 2]);
    doubled(running, 1.0);
    doubled(queued, 2.0);
    assert_eq!(handle.queue_depth(), 0);
    assert_eq!(
        batches(&mock),
        vec![vec![1.0], vec![2.0], vec![4.0], vec![4.0], vec![4.0]]
    );
}
