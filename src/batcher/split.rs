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
    if limit == 0 || rows <= limit {
        return vec![rows];
    }
    let pieces = rows.div_ceil(limit);
    let (base, longer) = (rows / pieces, rows % pieces);
    (0..pieces)
        .map(|i| base + usize::from(i < longer))
        .collect()
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
