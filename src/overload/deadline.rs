//! Enforces the transport deadline around everything below: a request whose deadline has
//! passed on arrival is refused without running, and one still running at its deadline is
//! answered DEADLINE_EXCEEDED on time. Dropping the running future drops its place in the
//! model's queue too, so the batcher skips it (it also checks the deadline itself, since it
//! carries the request's own copy).

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::http::{Request, Response};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

use super::answer::Answer;
use super::refusal::{Refusal, Transport};
use crate::request::RequestContext;

/// Layer 5 of the stack: holds each admitted request to its deadline.
pub struct DeadlineLayer<B> {
    _body: PhantomData<fn() -> B>,
}

impl<B> Default for DeadlineLayer<B> {
    fn default() -> Self {
        Self { _body: PhantomData }
    }
}

impl<B> Clone for DeadlineLayer<B> {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl<S, B> Layer<S> for DeadlineLayer<B> {
    type Service = Deadline<S, B>;

    fn layer(&self, inner: S) -> Deadline<S, B> {
        Deadline {
            inner,
            _body: PhantomData,
        }
    }
}

pub struct Deadline<S, B> {
    inner: S,
    _body: PhantomData<fn() -> B>,
}

impl<S: Clone, B> Clone for Deadline<S, B> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            _body: PhantomData,
        }
    }
}

impl<S, ReqBody, B> Service<Request<ReqBody>> for Deadline<S, B>
where
    S: Service<Request<ReqBody>, Response = Response<B>>,
    B: Transport,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = Answer<Timed<S::Future>, ()>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let deadline = request
            .extensions()
            .get::<Arc<RequestContext>>()
            .and_then(|context| context.deadline());
        if deadline.is_some_and(|deadline| deadline <= Instant::now()) {
            return Answer::refused(Refusal::DeadlineExceeded);
        }
        let future = Timed {
            future: self.inner.call(request),
            sleep: deadline.map(tokio::time::sleep_until),
        };
        Answer::admitted(future, ())
    }
}

pin_project! {
    /// The inner answer, or [`Refusal::DeadlineExceeded`] once the deadline has passed.
    pub struct Timed<F> {
        #[pin]
        future: F,
        #[pin]
        sleep: Option<Sleep>,
    }
}

impl<F, B, E> Future for Timed<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Result<Response<B>, E>, Refusal>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        // The answer first: one that is ready at the deadline is still delivered.
        if let Poll::Ready(answer) = this.future.poll(cx) {
            return Poll::Ready(Ok(answer));
        }
        let expired = this
            .sleep
            .as_pin_mut()
            .is_some_and(|sleep| sleep.poll(cx).is_ready());
        if expired {
            Poll::Ready(Err(Refusal::DeadlineExceeded))
        } else {
            Poll::Pending
        }
    }
}
