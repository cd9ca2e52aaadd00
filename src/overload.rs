//! Overload protection: the one tower stack both servers (axum and tonic) run in front of
//! their routes. Read from the outside in, it is the policy:
//!
//! 1. **Observe** ([`observe`]): request id, `tracing` span, deadline, and on the way out the
//!    count, the latency and one debug log line. Outermost, so that every answer is counted
//!    and logged exactly once, refusals included, with the time they really took.
//! 2. **Bypass** ([`bypass`]): probes and `/metrics` skip everything below. A saturated server
//!    must still say it is alive and still be observable; refusing those would get it
//!    restarted or leave monitoring blind at the worst moment.
//! 3. **Rate limit** ([`rate`], `tower_governor`): per client (API key or peer IP). Before the
//!    global limit, so that one noisy client is turned away before it takes a slot that every
//!    other client shares.
//! 4. **Concurrency limit with load shedding** ([`shed`]): server-wide, across both ports.
//!    Over the limit is an immediate refusal, never a wait: a wait here would be invisible to
//!    deadlines and to the model queues' own bound, and would only add latency. The same
//!    admission charges the request's decoded size to the request memory budget
//!    ([`memory`], `--max-inflight-request-bytes`), estimated by [`crate::transport`] from
//!    the body before anything decodes it, and refuses at once what would not fit. The
//!    transport charges each answer to the same budget until its bytes are written.
//! 5. **Deadline** ([`deadline`]): the client's (`grpc-timeout`, or the
//!    `x-request-timeout-ms` header over HTTP) or the server's default. Innermost, so that only
//!    admitted requests pay for a timer. The deadline also travels with the request (its
//!    [`RequestContext`]) into the model's batcher, which drops expired work unrun.
//! 6. **Authentication** ([`crate::auth`], `--auth-token-file`), added by [`crate::server`]
//!    inside this stack, right in front of the routes: its 401 / 403 answers are observed
//!    like any other, and probes, which bypass layers 3 to 5, still pass it. Being after the
//!    limits costs little: the check answers at once, so a refused request holds a
//!    concurrency slot only for that instant, and spends only its own client's rate.
//! 7. **Body size** is enforced where the body is read: the HTTP body's own cap
//!    (`api::http::body::Capped`) and tonic's `max_decoding_message_size`, both from
//!    `--max-request-bytes` (see [`crate::server`]).
//!
//! Above all of this, [`crate::transport`] reads each request's body in full (within the
//! body-read timeout) before the request enters the stack, so that a client that sends slowly
//! never holds a slot of layer 4.
//!
//! Below all of this, each model version's queue is bounded (`max_queue_size`); high-priority
//! requests (KServe parameter `priority: 1`) may use a reserve past that bound and run first
//! (see [`crate::batcher::BatchPolicy::admits`]).
//!
//! Each layer is its own [`Layer`] (`ObserveLayer`, `BypassLayer`, the governor's, `ShedLayer`,
//! `DeadlineLayer`), composed once below with a [`ServiceBuilder`]. A layer that refuses
//! returns a typed [`Refusal`] through the one answer future ([`answer`]), which renders it
//! through the error table in one place ([`Transport::refusal`]).
//!
//! A stream's messages (`ModelStreamInfer`) pass layers 1 and 3 to 5 again, each on its own,
//! through the same services ([`stream`]): a stream is admitted as a call when it opens, and
//! each message as a call when it arrives. Layers 3 to 5 are composed once, in [`protection`],
//! the leaf both this stack and [`stream`] build on, so that neither imports the other.
//!
//! Every refusal for overload (rate limit, concurrency, memory, full queue, deadline) is
//! RESOURCE_EXHAUSTED (or DEADLINE_EXCEEDED) over gRPC and 429 with `Retry-After` (or 504) over
//! HTTP, decided without waiting, and counted in `tensorport_refusals_total{reason}`.
//!
//! [`RequestContext`]: crate::request::RequestContext

mod access_log;
mod answer;
mod bypass;
mod deadline;
mod drain;
mod memory;
mod observe;
mod protection;
mod rate;
mod refusal;
mod shed;
mod stream;
#[cfg(test)]
mod tests;

pub use access_log::{AccessEntry, AccessLogFormat};
pub use memory::{MemoryBudget, MemoryCharge, DEFAULT_MAX_INFLIGHT_REQUEST_BYTES};
pub use protection::Protected;
pub use rate::{ApiKeys, ApiKeysError, ClientKey, RateSettings};
pub use refusal::{Outcome, Refusal, Transport};
pub use stream::{StreamGate, Streams};

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use tower::{Layer, ServiceBuilder};

use crate::metrics::Metrics;
use crate::request::{RequestIds, StickyHeaders};
use crate::trace::Tracer;
use bypass::{Bypass, BypassLayer};
use observe::{Observe, ObserveLayer, Observer};
use protection::Protection;
use shed::Limit;
use stream::Run;

/// The overload settings, as the command line gives them.
#[derive(Debug, Clone, Default)]
pub struct OverloadSettings {
    /// `None`: no rate limit.
    pub rate_limit: Option<RateSettings>,
    /// Requests in flight across both ports; 0: no limit.
    pub max_concurrent_requests: usize,
    /// Memory decoded requests may take across both ports, in bytes; 0: no limit.
    pub max_inflight_request_bytes: u64,
    /// Deadline for requests whose client set none.
    pub request_timeout: Option<Duration>,
    /// One line per request on stdout (`--access-log`).
    pub access_log: AccessLogFormat,
    /// Samples requests for tracing and exports their spans (`--trace-config
    /// mode=opentelemetry`); `None`: no request is traced.
    pub tracer: Option<Arc<Tracer>>,
}

/// What the stacks of both servers share: one rate limiter, one concurrency limit, one source
/// of request ids.
pub struct Overload {
    observer: Arc<Observer>,
    limit: Limit,
    rate: Option<rate::Config>,
    /// The header of the API keys the rate limit counts on their own, if any.
    key_header: Option<HeaderName>,
    memory: MemoryBudget,
}

impl Overload {
    pub fn new(settings: &OverloadSettings, metrics: Arc<Metrics>) -> Self {
        Self::sticky_on(settings, metrics, Arc::default())
    }

    /// [`Self::new`], copying into each request's context its values of the headers that
    /// `sticky` names (the models' sticky split headers, kept current by the repository).
    pub fn sticky_on(
        settings: &OverloadSettings,
        metrics: Arc<Metrics>,
        sticky: Arc<StickyHeaders>,
    ) -> Self {
        // One budget: admission charges bodies to it, adapters their decoded tensors, the
        // transport the answers being sent.
        let memory = MemoryBudget::counted_in(
            settings.max_inflight_request_bytes,
            metrics.request_memory(),
        );
        Self {
            limit: Limit::new(
                settings.max_concurrent_requests,
                metrics.in_flight(),
                memory.clone(),
            ),
            memory: memory.clone(),
            rate: settings.rate_limit.as_ref().and_then(rate::config),
            key_header: settings
                .rate_limit
                .as_ref()
                .and_then(|rate| rate.api_keys.as_ref())
                .map(|keys| keys.header.clone()),
            observer: Arc::new(Observer {
                metrics,
                ids: RequestIds::new(),
                default_timeout: settings.request_timeout,
                access_log: access_log::AccessLog::start(settings.access_log),
                memory: Arc::new(memory),
                sticky,
                tracer: settings.tracer.clone(),
            }),
        }
    }

    /// The request memory budget, which the transport also charges with answers not yet
    /// sent.
    pub fn memory_budget(&self) -> MemoryBudget {
        self.memory.clone()
    }

    /// Keeps the rate limiter's store to the clients seen lately, until `stopped`: every
    /// [`rate::PRUNE_INTERVAL`] the buckets of idle clients are dropped. A no-op without a
    /// rate limit.
    pub async fn prune_rate_limiter(&self, stopped: impl std::future::Future<Output = ()>) {
        let Some(config) = self.rate.clone() else {
            return;
        };
        tokio::pin!(stopped);
        let mut ticks = tokio::time::interval(rate::PRUNE_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = &mut stopped => return,
                _ = ticks.tick() => rate::prune(&config),
            }
        }
    }

    /// What admits the messages of gRPC streams: layers 1 and 3 to 5, the same limits,
    /// budgets and counters as the gRPC port's stack (see [`stream`]).
    pub fn streams(&self) -> Streams {
        let protection =
            Protection::<tonic::body::Body>::new(self.limit.clone(), self.rate.clone());
        Streams::new(
            self.observer.clone(),
            protection.layer(Run),
            self.key_header.clone(),
        )
    }

    /// The stack for a server whose answers have body type `B` (axum's or tonic's).
    pub fn layer<B>(&self) -> OverloadLayer<B> {
        OverloadLayer {
            observer: self.observer.clone(),
            limit: self.limit.clone(),
            rate: self.rate.clone(),
            _body: PhantomData,
        }
    }
}

/// The stack as a [`Layer`]; see the module documentation for the order.
pub struct OverloadLayer<B> {
    observer: Arc<Observer>,
    limit: Limit,
    rate: Option<rate::Config>,
    _body: PhantomData<fn() -> B>,
}

impl<B> Clone for OverloadLayer<B> {
    fn clone(&self) -> Self {
        Self {
            observer: self.observer.clone(),
            limit: self.limit.clone(),
            rate: self.rate.clone(),
            _body: PhantomData,
        }
    }
}

impl<S: Clone, B: Transport + 'static> Layer<S> for OverloadLayer<B> {
    // Requests reach the routes with their body wrapped (see `drain`), in the same type.
    type Service = Observe<Bypass<S, Protected<S, B>>, B>;

    fn layer(&self, routes: S) -> Self::Service {
        // Read top to bottom as the module documentation lists them: 1, 2, then 3 to 5.
        ServiceBuilder::new()
            .layer(ObserveLayer::new(self.observer.clone()))
            .layer(BypassLayer::new(Protection::<B>::new(
                self.limit.clone(),
                self.rate.clone(),
            )))
            .service(routes)
    }
}
