//! Sends probes and scrapes around the protective layers (see [`crate::request::is_probe`]).

use std::task::{Context, Poll};

use axum::http::Request;
use futures::future::Either;
use tower::{Layer, Service};

use crate::request::is_probe;

/// Layer 2 of the stack: routes probes around `protection` (layers 3 to 5), everything else
/// through it.
#[derive(Clone)]
pub struct BypassLayer<L> {
    protection: L,
}

impl<L> BypassLayer<L> {
    pub fn new(protection: L) -> Self {
        Self { protection }
    }
}

impl<S: Clone, L: Layer<S>> Layer<S> for BypassLayer<L> {
    type Service = Bypass<S, L::Service>;

    fn layer(&self, routes: S) -> Self::Service {
        Bypass::new(routes.clone(), self.protection.layer(routes))
    }
}

#[derive(Clone)]
pub struct Bypass<S, P> {
    plain: S,
    protected: P,
}

impl<S, P> Bypass<S, P> {
    pub fn new(plain: S, protected: P) -> Self {
        Self { plain, protected }
    }
}

impl<S, P, ReqBody> Service<Request<ReqBody>> for Bypass<S, P>
where
    S: Service<Request<ReqBody>>,
    P: Service<Request<ReqBody>, Response = S::Response, Error = S::Error>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Either<S::Future, P::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Both must be ready, since either may take the next request.
        match (self.plain.poll_ready(cx)?, self.protected.poll_ready(cx)?) {
            (Poll::Ready(()), Poll::Ready(())) => Poll::Ready(Ok(())),
            _ => Poll::Pending,
        }
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        if is_probe(request.uri().path()) {
            Either::Left(self.plain.call(request))
        } else {
            Either::Right(self.protected.call(request))
        }
    }
}

/// A layer that may be switched off, without boxing: `On` is the wrapped service, `Off` the
/// service it would have wrapped.
#[derive(Clone)]
pub enum Optional<A, B> {
    On(A),
    Off(B),
}

impl<A, B, ReqBody> Service<Request<ReqBody>> for Optional<A, B>
where
    A: Service<Request<ReqBody>>,
    B: Service<Request<ReqBody>, Response = A::Response, Error = A::Error>,
{
    type Response = A::Response;
    type Error = A::Error;
    type Future = Either<A::Future, B::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        match self {
            Self::On(service) => service.poll_ready(cx),
            Self::Off(service) => service.poll_ready(cx),
        }
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        match self {
            Self::On(service) => Either::Left(service.call(request)),
            Self::Off(service) => Either::Right(service.call(request)),
        }
    }
}
