//! The server-wide limit on requests in flight, with load shedding: a request over the limit
//! is answered at once (429 / RESOURCE_EXHAUSTED), never queued. Queueing here would only move
//! the wait in front of the model's own bounded queue, where deadlines cannot see it.
//!
//! Admission also charges the request's decoded footprint to the request memory budget
//! ([`super::memory`]), under the same rule: refused at once when it does not fit.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::http::{Request, Response};
use pin_project_lite::pin_project;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::Service;

use super::memory::{MemoryBudget, MemoryCharge};
use super::refusal::{Refusal, Transport};
use crate::request::DecodedFootprint;

/// The limit one server shares between its transports, so that HTTP and gRPC together stay
/// under it.
#[derive(Clone)]
pub struct Limit {
    /// `None`: no limit, only counting.
    permits: Option<Arc<Semaphore>>,
    max: usize,
    in_flight: Gauge,
    memory: MemoryBudget,
}

impl Limit {
    /// `max == 0` turns the limit off.
    pub fn new(max: usize, in_flight: Gauge, memory: MemoryBudget) -> Self {
        Self {
            permits: (max > 0).then(|| Arc::new(Semaphore::new(max))),
            max,
            in_flight,
            memory,
        }
    }

    fn admit(&self, footprint: Option<DecodedFootprint>) -> Result<InFlight, Refusal> {
        // Memory first: a refusal for memory then never holds a concurrency slot.
        let memory = self.memory.charge(footprint)?;
        let permit = match &self.permits {
            None => None,
            Some(permits) => Some(
                permits
                    .clone()
                    .try_acquire_owned()
                    .map_err(|_| Refusal::Overloaded { limit: self.max })?,
            ),
        };
        self.in_flight.inc();
        Ok(InFlight {
            _permit: permit,
            _memory: memory,
            gauge: self.in_flight.clone(),
        })
    }
}

/// Held while a request runs: its permit, its memory, and its place in the gauge.
pub struct InFlight {
    _permit: Option<OwnedSemaphorePermit>,
    _memory: MemoryCharge,
    gauge: Gauge,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

pub struct Shed<S, B> {
    inner: S,
    limit: Limit,
    _body: PhantomData<fn() -> B>,
}

impl<S: Clone, B> Clone for Shed<S, B> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            limit: self.limit.clone(),
            _body: PhantomData,
        }
    }
}

impl<S, B> Shed<S, B> {
    pub fn new(inner: S, limit: Limit) -> Self {
        Self {
            inner,
            limit,
            _body: PhantomData,
        }
    }
}

impl<S, ReqBody, B> Service<Request<ReqBody>> for Shed<S, B>
where
    S: Service<Request<ReqBody>, Response = Response<B>>,
    B: Transport,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = ShedFuture<S::Future, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let footprint = request.extensions().get::<DecodedFootprint>().copied();
        match self.limit.admit(footprint) {
            Ok(guard) => ShedFuture::Admitted {
                future: self.inner.call(request),
                guard,
            },
            Err(refusal) => ShedFuture::Refused {
                response: Some(B::refusal(&refusal)),
            },
        }
    }
}

pin_project! {
    /// The inner answer, holding the request's place until it is ready; or the refusal.
    #[project = ShedProj]
    pub enum ShedFuture<F, B> {
        Admitted { #[pin] future: F, guard: InFlight },
        Refused { response: Option<Response<B>> },
    }
}

impl<F, E, B> Future for ShedFuture<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            // The place is given back when the future is dropped, after the answer is built.
            // A streaming answer's body is not counted beyond its headers.
            ShedProj::Admitted { future, .. } => future.poll(cx),
            ShedProj::Refused { response } => match response.take() {
                Some(response) => Poll::Ready(Ok(response)),
                None => Poll::Pending,
            },
        }
    }
}
