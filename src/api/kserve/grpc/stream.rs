//! `ModelStreamInfer`: a stream of `ModelInferRequest`s, each admitted as a call is (the
//! overload stack's [`StreamGate`]), run as `ModelInfer` runs it, and answered in the stream.
//!
//! Messages are pipelined, as Triton pipelines them: a client that sends several without
//! waiting has them run at once, up to [`STREAM_WINDOW`] of them, and gets each answer as it is
//! ready, which is not always the order they were sent in; Triton's clients match answers to
//! requests by the request's `id`, which every answer echoes, a failed one too. A message that
//! is refused or fails is answered in the stream, which stays open for the next one.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::stream::FuturesUnordered;
use futures::{FutureExt, Stream, StreamExt};
use pin_project_lite::pin_project;
use prost::Message;
use tonic::{Status, Streaming};

use super::message_footprint::footprint;
use super::model_infer::model_infer;
use crate::error_kind::ErrorKind;
use crate::infer::InferService;
use crate::overload::StreamGate;
use crate::proto::inference as pb;
use crate::shm::Peer;

/// The method's path, as the overload layers and the logs name it.
pub const MODEL_STREAM_INFER: &str = "/inference.GRPCInferenceService/ModelStreamInfer";

/// How many messages of one stream may be in flight at once. The server-wide limits apply to
/// each of them as well; this bounds what one stream holds when they are generous (or off).
/// Past it the server reads no further message of that stream until an answer has gone,
/// and HTTP/2 flow control holds the client back.
pub const STREAM_WINDOW: usize = 16;

/// The answers to the messages of `messages`, a stream from `peer`, admitted by `gate`.
pub fn answers(
    service: Arc<InferService>,
    mut gate: StreamGate,
    peer: Peer,
    messages: Streaming<pb::ModelInferRequest>,
) -> impl Stream<Item = Result<pb::ModelStreamInferResponse, Status>> + Send + 'static {
    let start = move |message: pb::ModelInferRequest| {
        let charge = footprint(&message);
        let wire_bytes = u64::try_from(message.encoded_len()).unwrap_or(u64::MAX);
        // Kept for a failed answer, which carries the id alone.
        let id = message.id.clone();
        let service = service.clone();
        gate.admit(charge, wire_bytes, move |context| async move {
            model_infer(&service, message, peer, Some(&context))
                .await
                .map_err(Status::from)
        })
        .map(move |answer| in_stream(answer, id))
    };
    Pipeline::new(messages, STREAM_WINDOW, start)
}

/// A message's answer as the stream carries it. A failed one has the request's id in an
/// otherwise empty `infer_response`, as Triton answers, so that clients can tell which request
/// failed.
fn in_stream(
    answer: Result<pb::ModelInferResponse, Status>,
    id: String,
) -> pb::ModelStreamInferResponse {
    match answer {
        Ok(response) => pb::ModelStreamInferResponse {
            error_message: String::new(),
            infer_response: Some(response),
        },
        Err(status) => pb::ModelStreamInferResponse {
            error_message: error_message(&status),
            infer_response: Some(pb::ModelInferResponse {
                id,
                ..Default::default()
            }),
        },
    }
}

/// A failure as the stream reports it: the gRPC code's name, then what failed. A message's
/// answer has no status of its own, as a call's has, and a client must still tell a refusal
/// for overload (retry later) from a request that can never succeed.
fn error_message(status: &Status) -> String {
    let name = ErrorKind::ALL
        .into_iter()
        .find(|kind| kind.table().grpc_code == status.code())
        .map_or("unknown", |kind| kind.table().error_type);
    // The table's labels are the codes' canonical names, in lower case.
    format!("{}: {}", name.to_ascii_uppercase(), status.message())
}

pin_project! {
    /// Answers to a stream of messages, `start` turning each into the future of its answer as
    /// soon as it is received, up to `window` at once, and answers coming out as they are
    /// ready. If the incoming stream fails (a message that cannot be read), its status ends
    /// the answers, after the answers to the messages before it.
    struct Pipeline<S, W, F> {
        #[pin]
        incoming: S,
        start: W,
        in_flight: FuturesUnordered<F>,
        window: usize,
        // Set once the incoming stream has ended: with its failure, until that is reported.
        ended: Option<Option<Status>>,
    }
}

impl<S, W, F> Pipeline<S, W, F> {
    fn new(incoming: S, window: usize, start: W) -> Self {
        Self {
            incoming,
            start,
            in_flight: FuturesUnordered::new(),
            window: window.max(1),
            ended: None,
        }
    }
}

impl<S, M, W, F> Stream for Pipeline<S, W, F>
where
    S: Stream<Item = Result<M, Status>>,
    W: FnMut(M) -> F,
    F: Future,
{
    type Item = Result<F::Output, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        while this.ended.is_none() && this.in_flight.len() < *this.window {
            match this.incoming.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(message))) => this.in_flight.push((this.start)(message)),
                Poll::Ready(Some(Err(status))) => *this.ended = Some(Some(status)),
                Poll::Ready(None) => *this.ended = Some(None),
                Poll::Pending => break,
            }
        }
        match this.in_flight.poll_next_unpin(cx) {
            Poll::Ready(Some(answer)) => Poll::Ready(Some(Ok(answer))),
            // Nothing in flight: done once the incoming stream is (its waker is registered
            // otherwise).
            Poll::Ready(None) => match this.ended {
                Some(failure) => Poll::Ready(failure.take().map(Err)),
                None => Poll::Pending,
            },
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::channel::oneshot;
    use futures::task::noop_waker_ref;

    /// Polls `stream` once, as a transport would when it can send.
    fn poll<S: Stream + Unpin>(stream: &mut S) -> Poll<Option<S::Item>> {
        stream.poll_next_unpin(&mut Context::from_waker(noop_waker_ref()))
    }

    #[test]
    fn at_most_the_window_runs_at_once_and_answers_come_as_they_are_ready() {
        let started = Arc::new(AtomicUsize::new(0));
        let mut senders = Vec::new();
        let mut receivers = Vec::new();
        for _ in 0..5 {
            let (tx, rx) = oneshot::channel::<usize>();
            senders.push(Some(tx));
            receivers.push(Some(rx));
        }
        let incoming = futures::stream::iter((0..5).map(Ok::<usize, Status>));
        let count = started.clone();
        let mut pipeline = Box::pin(Pipeline::new(incoming, 2, move |n: usize| {
            count.fetch_add(1, Ordering::SeqCst);
            receivers[n].take().map_or_else(
                || futures::future::ready(usize::MAX).left_future(),
                |rx| rx.map(|r| r.unwrap_or(usize::MAX)).right_future(),
            )
        }));
        assert!(poll(&mut pipeline).is_pending());
        assert!(poll(&mut pipeline).is_pending());
        assert_eq!(started.load(Ordering::SeqCst), 2, "only the window started");

        // The second finishes first and is answered first; a third message starts.
        let _ = senders[1].take().map(|tx| tx.send(1));
        assert!(matches!(poll(&mut pipeline), Poll::Ready(Some(Ok(1)))));
        assert!(poll(&mut pipeline).is_pending());
        assert_eq!(started.load(Ordering::SeqCst), 3);

        for n in [0, 2, 3, 4] {
            let _ = senders[n].take().map(|tx| tx.send(n));
        }
        let mut rest = Vec::new();
        while let Poll::Ready(Some(answer)) = poll(&mut pipeline) {
            rest.push(answer.unwrap_or(usize::MAX));
        }
        rest.sort_unstable();
        assert_eq!(rest, vec![0, 2, 3, 4]);
        assert!(matches!(poll(&mut pipeline), Poll::Ready(None)));
    }

    #[test]
    fn a_broken_incoming_stream_ends_after_the_answers_before_it() {
        let incoming = futures::stream::iter(vec![
            Ok(1),
            Ok(2),
            Err(Status::out_of_range("too large")),
            Ok(3),
        ]);
        let mut pipeline = Box::pin(Pipeline::new(incoming, 8, futures::future::ready));
        let mut answers = Vec::new();
        let mut failure = None;
        while let Poll::Ready(Some(item)) = poll(&mut pipeline) {
            match item {
                Ok(n) => answers.push(n),
                Err(status) => failure = Some(status.code()),
            }
        }
        answers.sort_unstable();
        assert_eq!(answers, vec![1, 2]);
        assert_eq!(failure, Some(tonic::Code::OutOfRange));
    }

    #[test]
    fn a_failed_answer_names_its_code_and_echoes_the_id() {
        let refused = in_stream(
            Err(Status::resource_exhausted("the server is at its limit")),
            "m7".into(),
        );
        assert_eq!(
            refused.error_message,
            "RESOURCE_EXHAUSTED: the server is at its limit"
        );
        assert_eq!(refused.infer_response.map(|r| r.id), Some("m7".into()));
    }
}
