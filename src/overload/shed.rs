//! The server-wide limit on requests in flight, with load shedding: a request over the limit
//! is answered at once (429 / RESOURCE_EXHAUSTED), never queued. Queueing here would only move
//! the wait in front of the model's own bounded queue, where deadlines cannot see it.
//!
//! Admission also charges the request's decoded footprint to the request memory budget
//! ([`super::memory`]), under the same rule: refused at once when it does not fit.

use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::http::{Request, Response};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::{Layer, Service};

use super::answer::{Answer, Passed};
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

/// Layer 4 of the stack: admits each request under the [`Limit`] or refuses it at once.
pub struct ShedLayer<B> {
    limit: Limit,
    _body: PhantomData<fn() -> B>,
}

impl<B> Clone for ShedLayer<B> {
    fn clone(&self) -> Self {
        Self::new(self.limit.clone())
    }
}

impl<B> ShedLayer<B> {
    pub fn new(limit: Limit) -> Self {
        Self {
            limit,
            _body: PhantomData,
        }
    }
}

impl<S, B> Layer<S> for ShedLayer<B> {
    type Service = Shed<S, B>;

    fn layer(&self, inner: S) -> Shed<S, B> {
        Shed {
            inner,
            limit: self.limit.clone(),
            _body: PhantomData,
        }
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

impl<S, ReqBody, B> Service<Request<ReqBody>> for Shed<S, B>
where
    S: Service<Request<ReqBody>, Response = Response<B>>,
    B: Transport,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = Answer<Passed<S::Future>, InFlight>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let footprint = request.extensions().get::<DecodedFootprint>().copied();
        match self.limit.admit(footprint) {
            Ok(guard) => Answer::admitted(Passed::new(self.inner.call(request)), guard),
            Err(refusal) => Answer::refused(refusal),
        }
    }
}
