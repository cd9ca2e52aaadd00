//! The one future every admitting layer returns: the inner service's answer while the layer's
//! guard is held, or the layer's [`Refusal`], rendered through [`Transport::refusal`] (the
//! error table) in one place. A layer decides; it never builds a response itself.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::http::Response;
use pin_project_lite::pin_project;

use super::refusal::{Refusal, Transport};

pin_project! {
    /// The inner answer, passed on as it is: admitted work that a layer never cuts short.
    pub struct Passed<F> {
        #[pin]
        future: F,
    }
}

impl<F> Passed<F> {
    pub fn new(future: F) -> Self {
        Self { future }
    }
}

impl<F, B, E> Future for Passed<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Result<Response<B>, E>, Refusal>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().future.poll(cx).map(Ok)
    }
}

pin_project! {
    /// What an admitting layer's `call` returns; `G` is held until the answer is ready (a
    /// concurrency slot and memory charge, or nothing). Admitted work may still end in a
    /// refusal (a deadline passing while it runs): `F`'s output is the inner answer, or the
    /// refusal that cut it short.
    #[project = AnswerProj]
    pub enum Answer<F, G> {
        Admitted { #[pin] future: F, guard: G },
        Refused { refusal: Option<Refusal> },
    }
}

impl<F, G> Answer<F, G> {
    pub fn admitted(future: F, guard: G) -> Self {
        Self::Admitted { future, guard }
    }

    pub fn refused(refusal: Refusal) -> Self {
        Self::Refused {
            refusal: Some(refusal),
        }
    }
}

impl<F, G, B, E> Future for Answer<F, G>
where
    F: Future<Output = Result<Result<Response<B>, E>, Refusal>>,
    B: Transport,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // The guard is given back when the future is dropped, after the answer is built. A
        // streaming answer's body is not counted beyond its headers.
        let refusal = match self.project() {
            AnswerProj::Admitted { future, .. } => match future.poll(cx) {
                Poll::Ready(Ok(answer)) => return Poll::Ready(answer),
                Poll::Ready(Err(refusal)) => refusal,
                Poll::Pending => return Poll::Pending,
            },
            AnswerProj::Refused { refusal } => match refusal.take() {
                Some(refusal) => refusal,
                // Polled again after it was ready.
                None => return Poll::Pending,
            },
        };
        Poll::Ready(Ok(B::refusal(&refusal)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    type Body = axum::body::Body;

    fn ok() -> std::future::Ready<Result<Response<Body>, std::convert::Infallible>> {
        std::future::ready(Ok(Response::new(Body::empty())))
    }

    #[tokio::test]
    async fn a_refusal_is_rendered_through_the_error_table() {
        type Work = std::future::Ready<Result<Response<Body>, std::convert::Infallible>>;
        let refused: Answer<Passed<Work>, ()> = Answer::refused(Refusal::Overloaded { limit: 1 });
        let response = refused.await.unwrap_or_else(|never| match never {});
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    }

    #[tokio::test]
    async fn admitted_work_passes_its_answer_or_the_refusal_that_cut_it_short() {
        let passed = Answer::admitted(Passed::new(ok()), ());
        let response = passed.await.unwrap_or_else(|never| match never {});
        assert_eq!(response.status(), StatusCode::OK);

        let cut_short = std::future::ready(Err::<
            Result<Response<Body>, std::convert::Infallible>,
            _,
        >(Refusal::DeadlineExceeded));
        let response = Answer::admitted(cut_short, ())
            .await
            .unwrap_or_else(|never| match never {});
        assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    }
}
