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
use tower::Service;

use super::refusal::{Refusal, Transport};
use crate::request::RequestContext;

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

impl<S, B> Deadline<S, B> {
    pub fn new(inner: S) -> Self {
        Self {
            inner,
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
    type Future = DeadlineFuture<S::Future, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let deadline = request
            .extensions()
            .get::<Arc<RequestContext>>()
            .and_then(|context| context.deadline());
        if deadline.is_some_and(|deadline| deadline <= Instant::now()) {
            return DeadlineFuture::Expired {
                response: Some(B::refusal(&Refusal::DeadlineExceeded)),
            };
        }
        DeadlineFuture::Running {
            future: self.inner.call(request),
            sleep: deadline.map(tokio::time::sleep_until),
        }
    }
}

pin_project! {
    #[project = DeadlineProj]
    pub enum DeadlineFuture<F, B> {
        Running { #[pin] future: F, #[pin] sleep: Option<Sleep> },
        Expired { response: Option<Response<B>> },
    }
}

impl<F, E, B> Future for DeadlineFuture<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Transport,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            DeadlineProj::Running { future, sleep } => {
                // The answer first: one that is ready at the deadline is still delivered.
                if let Poll::Ready(result) = future.poll(cx) {
                    return Poll::Ready(result);
                }
                let expired = sleep
                    .as_pin_mut()
                    .is_some_and(|sleep| sleep.poll(cx).is_ready());
                if expired {
                    Poll::Ready(Ok(B::refusal(&Refusal::DeadlineExceeded)))
                } else {
                    Poll::Pending
                }
            }
            DeadlineProj::Expired { response } => match response.take() {
                Some(response) => Poll::Ready(Ok(response)),
                None => Poll::Pending,
            },
        }
    }
}
