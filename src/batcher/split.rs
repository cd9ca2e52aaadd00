//! A request larger than its version's `split_rows` cut along dimension 0 into pieces that
//! queue as requests of their own, so that free instances run them at once, and the pieces'
//! outputs joined back in order (TF Serving's `enable_large_batch_splitting`).
//!
//! The pieces are views of the request's own input bytes (`scatter` slices, it does not
//! copy); joining the outputs is one copy, as merging a batch's inputs is. Each piece
//! carries the request's deadline, priority and trace; the first piece to fail fails the
//! request, and the others are withdrawn with it (dropping a piece's pending answer
//! withdraws it if it has not run), as they are when the caller goes away.

use std::future::Future;

use futures::future::try_join_all;

use super::channel::Reply;
use super::gather::{gather, scatter};
use super::{BatchError, BatcherError, ValidRequest};
use crate::backend::{NamedTensor, Signature};

/// The row counts of the pieces `rows` rows are cut into, each at most `limit` and as even as
/// possible (1,000 rows at a limit of 256: four pieces of 250), so that the pieces running
/// side by side finish together.
pub(super) fn piece_rows(rows: usize, limit: usize) -> Vec<usize> {
    let pieces = piece_count(rows, limit);
    if pieces < 2 {
        return vec![rows];
    }
    let (base, longer) = (rows / pieces, rows % pieces);
    (0..pieces)
        .map(|i| base + usize::from(i < longer))
        .collect()
}

/// How many pieces [`piece_rows`] cuts `rows` rows into, without making them: a request's
/// piece count is checked against its bound before anything is allocated per piece.
pub(super) fn piece_count(rows: usize, limit: usize) -> usize {
    if limit == 0 || rows <= limit {
        1
    } else {
        rows.div_ceil(limit)
    }
}

/// Whether [`cut`] can cut `request`, of `rows` rows, into `pieces` pieces: every input has
/// `rows` rows, and the signature takes the pieces' row counts (they differ by one at most).
/// The same checks the pieces would meet, made before they are made, so that a request that
/// would run whole anyway is not refused for the pieces it would have made.
pub(super) fn can_cut(
    request: &ValidRequest,
    rows: usize,
    pieces: usize,
    signatures: &[Signature],
) -> bool {
    let Some(signature) = signatures.get(request.signature()) else {
        return false;
    };
    let sizes = [rows / pieces.max(1), rows.div_ceil(pieces.max(1))];
    request.inputs().iter().all(|(name, tensor)| {
        let Some(spec) = signature.inputs.iter().find(|spec| spec.name == *name) else {
            return false;
        };
        let Some((&first, rest)) = tensor.shape().split_first() else {
            return false;
        };
        first == rows
            && sizes.iter().all(|&size| {
                let piece: Vec<usize> = std::iter::once(size).chain(rest.iter().copied()).collect();
                spec.accepts_shape(&piece)
            })
    })
}

/// `request` as pieces of `rows` rows each, or the request back when it cannot be cut: its
/// inputs disagree on dimension 0, or the signature fixes that dimension, so a piece would
/// not be a valid request. Output targets are dropped: the joined outputs are the caller's
/// to copy into them. (The request comes back boxed: an error variant as large as a request
/// would make every `Result` of this type that large.)
pub(super) fn cut(
    request: ValidRequest,
    rows: &[usize],
    signatures: &[Signature],
) -> Result<Vec<ValidRequest>, Box<ValidRequest>> {
    let pieces = match scatter(request.inputs().to_vec(), rows) {
        Ok(pieces) => pieces,
        Err(_) => return Err(Box::new(request)),
    };
    let mut cut = Vec::with_capacity(pieces.len());
    for inputs in pieces {
        let piece = ValidRequest::new(
            signatures,
            request.signature(),
            inputs,
            request.outputs().to_vec(),
            Vec::new(),
        );
        match piece {
            Ok(piece) => cut.push(
                piece
                    .with_deadline(request.deadline())
                    .with_priority(request.priority())
                    .with_trace(request.trace().cloned())
                    .with_run_time(request.run_time().cloned()),
            ),
            Err(_) => return Err(Box::new(request)),
        }
    }
    Ok(cut)
}

/// Waits for every piece and joins their outputs along dimension 0, in the order of
/// `outputs`; the first failure is the request's.
pub(super) async fn join(
    pieces: Vec<impl Future<Output = Reply>>,
    outputs: &[String],
) -> Result<Vec<NamedTensor>, BatcherError> {
    let answers = try_join_all(pieces).await?;
    let mut joined = gather(answers).map_err(|err| match err {
        BatchError::Incompatible { input } => BatchError::PiecesDisagree { output: input },
        other => other,
    })?;
    // `gather` orders tensors by name; the answer keeps the request's order.
    let mut ordered = Vec::with_capacity(outputs.len());
    for name in outputs {
        let at = joined
            .iter()
            .position(|(joined_name, _)| joined_name == name)
            .ok_or(BatchError::NoAnswer)?;
        ordered.push(joined.swap_remove(at));
    }
    Ok(ordered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::TensorSpec;
    use crate::batcher::policy::{BatchPolicy, MAX_PIECES};
    use crate::batcher::{BatchSettings, Priority, MAX_QUEUE_SIZE};
    use crate::tensor::{DataType, Tensor};

    #[test]
    fn the_piece_count_is_known_before_the_pieces_are_made() {
        for (rows, limit) in [
            (1000, 256),
            (1001, 500),
            (7, 2),
            (10, 0),
            (500, 500),
            (3, 1),
        ] {
            assert_eq!(piece_count(rows, limit), piece_rows(rows, limit).len());
        }
        // Counted, not made: a count no memory could hold is still just a number.
        assert_eq!(piece_count(usize::MAX, 1), usize::MAX);
    }

    #[test]
    fn a_request_makes_at_most_max_pieces_and_they_are_admitted_together() {
        let policy = |max_queue_size| {
            BatchPolicy::new(&BatchSettings {
                split_rows: 1,
                max_queue_size,
                ..BatchSettings::default()
            })
        };
        assert_eq!(policy(MAX_QUEUE_SIZE).max_pieces(), MAX_PIECES);
        assert_eq!(policy(100).max_pieces(), 100);
        let four = policy(4);
        assert!(four.admits_all(0, 4, Priority::Default));
        assert!(!four.admits_all(1, 4, Priority::Default));
        assert!(four.admits_all(1, 3, Priority::Default));
        assert!(four.admits_all(4, 0, Priority::Default));
        // The reserve of one place past the limit is high priority's.
        assert!(four.admits_all(1, 4, Priority::High));
        assert!(!four.admits_all(usize::MAX, 2, Priority::High));
    }

    #[test]
    fn only_a_request_whose_pieces_its_signature_takes_can_be_cut() {
        let signature = |shape: Vec<i64>| Signature {
            name: "serving_default".into(),
            inputs: vec![TensorSpec::new("x", DataType::F32, shape)],
            outputs: vec![TensorSpec::new("y", DataType::F32, vec![-1, 2])],
        };
        let x = Tensor::from_vec(vec![5, 2], vec![0.0_f32; 10]).expect("a tensor");
        let request = |signatures: &[Signature]| {
            ValidRequest::new(
                signatures,
                0,
                vec![("x".into(), x.clone())],
                Vec::new(),
                Vec::new(),
            )
            .expect("a valid request")
        };
        let any_rows = [signature(vec![-1, 2])];
        assert!(can_cut(&request(&any_rows), 5, 3, &any_rows));
        // Five rows only: a piece of two or three would not be a valid request.
        let five_rows = [signature(vec![5, 2])];
        assert!(!can_cut(&request(&five_rows), 5, 3, &five_rows));
        // Rows other than the request's are not what it would be cut along.
        assert!(!can_cut(&request(&any_rows), 4, 2, &any_rows));
    }

    #[test]
    fn pieces_are_even_and_never_past_the_limit() {
        assert_eq!(piece_rows(1000, 500), vec![500, 500]);
        assert_eq!(piece_rows(1000, 256), vec![250, 250, 250, 250]);
        assert_eq!(piece_rows(1001, 500), vec![334, 334, 333]);
        assert_eq!(piece_rows(7, 2), vec![2, 2, 2, 1]);
        assert_eq!(piece_rows(500, 500), vec![500]);
        assert_eq!(piece_rows(10, 0), vec![10]);
        for (rows, limit) in [(1, 1), (999, 7), (4096, 1000), (3, 1)] {
            let pieces = piece_rows(rows, limit);
            assert_eq!(pieces.iter().sum::<usize>(), rows);
            assert!(pieces.iter().all(|&p| p > 0 && p <= limit), "{pieces:?}");
        }
    }
}
