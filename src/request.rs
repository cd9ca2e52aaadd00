//! What the server knows about one request besides its body: an id for the logs, the protocol
//! it arrived on, its deadline, the memory budget its decoded data is charged to, and (once an
//! adapter has resolved it) the model version it is for. The outermost layer of
//! [`crate::overload`] creates a [`RequestContext`] and puts it in the request's extensions;
//! adapters read the deadline from it, charge what their decoded tensors hold, and name the
//! model in it; the same layer reads the model back when it counts the answer.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use std::fmt::Write;

mod after_answer;

pub use after_answer::{AnswerSent, StickyHeaders, MODEL_VERSION_HEADER};

use bytes::BytesMut;
use http::{HeaderMap, HeaderName, HeaderValue};
use tokio::time::Instant;

use crate::trace::{TraceHandle, TraceStart};

mod deadline;

pub use deadline::{
    client_timeout, parse_grpc_timeout, parse_http_timeout, DeadlineError, GRPC_TIMEOUT_HEADER,
    HTTP_TIMEOUT_HEADER,
};

/// The client's request id header, echoed on the response (and generated when absent).
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The longest request id accepted from a client; longer (or non-printable) ones are replaced,
/// since the id goes into every log line of the request.
const MAX_CLIENT_ID_LEN: usize = 128;

/// The API a request speaks, as metrics label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    TfServingGrpc,
    TfServingRest,
    KserveGrpc,
    KserveHttp,
    /// Health checks, `/metrics`, unknown paths.
    Other,
}

impl Protocol {
    /// The protocols that serve models.
    pub const SERVING: [Self; 4] = [
        Self::TfServingGrpc,
        Self::TfServingRest,
        Self::KserveGrpc,
        Self::KserveHttp,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Self::TfServingGrpc => "tfserving-grpc",
            Self::TfServingRest => "tfserving-rest",
            Self::KserveGrpc => "kserve-grpc",
            Self::KserveHttp => "kserve-http",
            Self::Other => "other",
        }
    }

    /// The protocol of a gRPC method path (`/package.Service/Method`).
    pub fn of_grpc_path(path: &str) -> Self {
        if path.starts_with("/tensorflow.serving.") {
            Self::TfServingGrpc
        } else if path.starts_with("/inference.GRPCInferenceService/") {
            Self::KserveGrpc
        } else {
            Self::Other
        }
    }

    /// The protocol of an HTTP path on the REST port.
    pub fn of_http_path(path: &str) -> Self {
        if path.starts_with("/v1/") {
            Self::TfServingRest
        } else if path == "/v2" || path.starts_with("/v2/") {
            Self::KserveHttp
        } else {
            Self::Other
        }
    }
}

/// Paths that overload protection never refuses: probes and scrapes. A busy server must still
/// answer them, or Kubernetes would restart it for being busy and monitoring would go blind
/// exactly when it matters.
pub fn is_probe(path: &str) -> bool {
    matches!(
        path,
        "/metrics"
            | "/livez"
            | "/readyz"
            | "/v2/health/live"
            | "/v2/health/ready"
            | "/inference.GRPCInferenceService/ServerLive"
            | "/inference.GRPCInferenceService/ServerReady"
    ) || path.starts_with("/grpc.health.v1.Health/")
}

/// Hands out request ids: the process's start time and a counter, so ids from restarts of the
/// same server do not collide in aggregated logs.
#[derive(Debug)]
pub struct RequestIds {
    prefix: u32,
    next: AtomicU64,
}

impl Default for RequestIds {
    fn default() -> Self {
        Self::new()
    }
}

impl RequestIds {
    pub fn new() -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        // Truncation is the point: a short prefix that differs between restarts.
        let prefix = (now.as_secs() as u32) ^ now.subsec_nanos() ^ std::process::id();
        Self {
            prefix,
            next: AtomicU64::new(1),
        }
    }

    /// The client's id when it sent a usable one, else a new one; as it goes back in the
    /// answer's `x-request-id` header. A client's id is the request's own header value, shared
    /// rather than copied, and a new one is written once into a buffer the answer shares too.
    pub fn for_request(&self, headers: &HeaderMap) -> HeaderValue {
        let client = headers.get(REQUEST_ID_HEADER).filter(|id| {
            let id = id.as_bytes();
            !id.is_empty() && id.len() <= MAX_CLIENT_ID_LEN && id.iter().all(u8::is_ascii_graphic)
        });
        if let Some(id) = client {
            return id.clone();
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut id = BytesMut::with_capacity(GENERATED_ID_MAX_LEN);
        // Writing into a `BytesMut` cannot fail, and hex digits and '-' are a valid value.
        let _ = write!(id, "{:08x}-{n:x}", self.prefix);
        HeaderValue::from_maybe_shared(id.freeze()).unwrap_or(HeaderValue::from_static("-"))
    }
}

/// The longest model name [`RequestContext::name_model`] keeps for the access log.
pub const ADDRESSED_NAME_MAX: usize = 256;

/// The longest id [`RequestIds`] makes: eight hex digits, '-', and up to sixteen more.
const GENERATED_ID_MAX_LEN: usize = 8 + 1 + 16;

/// One request's context; see the module documentation for who writes what.
#[derive(Debug)]
pub struct RequestContext {
    /// ASCII (see [`RequestIds::for_request`]), so it also reads as text.
    id: HeaderValue,
    protocol: Protocol,
    deadline: Option<Instant>,
    model: OnceLock<(Arc<str>, u64)>,
    /// The model the request names, as the client spelled it, whether or not it resolved:
    /// for the access log only. Metrics label only [`RequestContext::model`], whose names
    /// are those of loaded models.
    addressed: OnceLock<Box<str>>,
    /// `None`: no overload layer made this context (some tests), so nothing is charged.
    memory: Option<Arc<dyn MemoryPool>>,
    /// Set when a charge to `memory` was refused, so that the answer is counted as a refusal
    /// for memory rather than for a full queue (both are RESOURCE_EXHAUSTED).
    memory_refused: AtomicBool,
    /// The values of the headers some model's split is sticky on (usually none).
    sticky: Vec<(HeaderName, HeaderValue)>,
    answer_sent: after_answer::AnswerSignal,
    /// Set while tracing may sample this request, until its model is known.
    trace_start: Option<TraceStart>,
    /// The request's trace, once sampled.
    trace: OnceLock<TraceHandle>,
}

impl RequestContext {
    pub fn new(id: HeaderValue, protocol: Protocol, deadline: Option<Instant>) -> Self {
        Self {
            id,
            protocol,
            deadline,
            model: OnceLock::new(),
            addressed: OnceLock::new(),
            memory: None,
            memory_refused: AtomicBool::new(false),
            sticky: Vec::new(),
            answer_sent: Default::default(),
            trace_start: None,
            trace: OnceLock::new(),
        }
    }

    /// Lets tracing sample the request once it names its model ([`Self::start_trace`]).
    pub fn with_trace(mut self, start: Option<TraceStart>) -> Self {
        self.trace_start = start;
        self
    }

    /// Makes the sampling decision for an inference on `model`; the trace, when sampled.
    pub fn start_trace(&self, model: &Arc<str>, version: u64) -> Option<TraceHandle> {
        if let Some(trace) = self.trace.get() {
            return Some(trace.clone());
        }
        let start = self.trace_start.as_ref()?;
        let trace = start.sample(model, version, self.protocol.label())?;
        Some(self.trace.get_or_init(|| trace).clone())
    }

    /// The request's trace, if it was sampled.
    pub fn trace(&self) -> Option<&TraceHandle> {
        self.trace.get()
    }

    /// Carries `sticky`, the request's values of the sticky headers ([`StickyHeaders`]).
    pub fn with_sticky(mut self, sticky: Vec<(HeaderName, HeaderValue)>) -> Self {
        self.sticky = sticky;
        self
    }

    /// The request's value of the sticky header `name`, if it sent one.
    pub fn sticky_value(&self, name: &HeaderName) -> Option<&[u8]> {
        let found = self.sticky.iter().find(|(n, _)| n == name);
        found.map(|(_, value)| value.as_bytes())
    }

    /// Released when [`Self::answered`] runs (or the context is dropped).
    pub fn after_answer(&self) -> AnswerSent {
        self.answer_sent.subscribe()
    }

    /// The answer is being handed to the transport: names the version that served in its
    /// headers (gRPC's initial metadata) and releases what waits for the answer.
    pub fn answered(&self, headers: &mut HeaderMap) {
        if let Some((_, version)) = self.model() {
            headers.insert(
                HeaderName::from_static(MODEL_VERSION_HEADER),
                HeaderValue::from(version),
            );
        }
        self.ended();
    }

    /// The request ended without an answer to hand over.
    pub fn ended(&self) {
        if let Some(trace) = self.trace.get() {
            trace.answered();
        }
        self.answer_sent.release();
    }

    /// Charges what the request's decoded data holds beyond its body to `pool`.
    pub fn with_memory(mut self, pool: Arc<dyn MemoryPool>) -> Self {
        self.memory = Some(pool);
        self
    }

    /// Charges `bytes` more to the request memory budget into `held`, or refuses at once
    /// when they are more than is left. Nothing is charged without a budget.
    pub fn hold_memory(&self, bytes: u64, held: &mut HeldMemory) -> Result<(), MemoryRefused> {
        let Some(pool) = &self.memory else {
            return Ok(());
        };
        match pool.hold(bytes) {
            Ok(hold) => {
                held.0.push(hold);
                Ok(())
            }
            Err(refused) => {
                self.memory_refused.store(true, Ordering::Relaxed);
                Err(refused)
            }
        }
    }

    /// The request memory budget itself, for what the request leaves behind past its answer
    /// (a shadow copy): that work charges it on its own, and a refusal there is not this
    /// request's. `None` without a budget.
    pub fn memory_pool(&self) -> Option<Arc<dyn MemoryPool>> {
        self.memory.clone()
    }

    /// Whether a charge of [`RequestContext::hold_memory`] was refused.
    pub fn memory_refused(&self) -> bool {
        self.memory_refused.load(Ordering::Relaxed)
    }

    pub fn id(&self) -> &str {
        self.id.to_str().unwrap_or_default()
    }

    /// The id as the answer's `x-request-id` header carries it.
    pub fn id_header(&self) -> &HeaderValue {
        &self.id
    }

    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The transport deadline: the client's header, or the server's default timeout.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// The earlier of the transport deadline and `timeout` from now (a timeout a protocol
    /// carries in its body, such as KServe's `timeout` parameter).
    pub fn deadline_within(&self, timeout: Option<Duration>) -> Option<Instant> {
        let body = timeout.and_then(|timeout| Instant::now().checked_add(timeout));
        match (self.deadline, body) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Names the model version the request resolved to. Only names of loaded models reach
    /// this, which keeps the metrics' label values bounded. The first call wins.
    pub fn set_model(&self, name: &Arc<str>, version: u64) {
        let _ = self.model.set((name.clone(), version));
    }

    pub fn model(&self) -> Option<(&str, u64)> {
        self.model
            .get()
            .map(|(name, version)| (name.as_ref(), *version))
    }

    /// Names the model a model-scoped request addresses, before (or without) resolving it, so
    /// that the access log names it for a metadata, readiness or statistics call and for a
    /// model that does not exist. A name longer than [`ADDRESSED_NAME_MAX`] bytes is cut
    /// there (at a character boundary): the log line stays bounded whatever a client sends.
    /// The first call wins.
    pub fn name_model(&self, name: &str) {
        if name.is_empty() || self.addressed.get().is_some() {
            return;
        }
        let mut end = name.len().min(ADDRESSED_NAME_MAX);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        let _ = self.addressed.set(name[..end].into());
    }

    /// The model and version the access log names: the version the request resolved to, or
    /// else the model it addressed, without a version.
    pub fn logged_model(&self) -> Option<(&str, Option<u64>)> {
        match self.model() {
            Some((name, version)) => Some((name, Some(version))),
            None => self.addressed.get().map(|name| (name.as_ref(), None)),
        }
    }

    /// [`RequestContext::model`], the name shared rather than borrowed (for metrics labels).
    pub fn model_shared(&self) -> Option<(&Arc<str>, u64)> {
        self.model.get().map(|(name, version)| (name, *version))
    }
}

/// The request memory budget (`--max-inflight-request-bytes`) as adapters see it. Admission
/// charges a body's estimated footprint before anything decodes it ([`DecodedFootprint`]);
/// what a decoded tensor holds beyond its bytes is known only once its declared shape is read
/// (a BYTES input's element count, an input in shared memory), so the adapter charges it to
/// the same budget then, before building the tensor. Implemented by `crate::overload`.
pub trait MemoryPool: Send + Sync + std::fmt::Debug {
    /// Takes `bytes` from the budget until the hold is dropped, or refuses at once.
    fn hold(&self, bytes: u64) -> Result<MemoryHold, MemoryRefused>;
}

/// A share of the request memory budget, given back when dropped.
pub struct MemoryHold {
    _charge: Box<dyn Send + Sync>,
}

impl MemoryHold {
    /// Holds `charge` (whatever gives the share back when dropped).
    pub fn new(charge: impl Send + Sync + 'static) -> Self {
        Self {
            _charge: Box::new(charge),
        }
    }
}

impl std::fmt::Debug for MemoryHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryHold")
    }
}

/// The shares of the budget one request's decoded tensors hold, kept with the request and
/// then its answer, and given back when the answer has been encoded.
#[derive(Debug, Default)]
pub struct HeldMemory(Vec<MemoryHold>);

/// A charge the request memory budget could not take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{needed} more bytes once decoded, more than the {left} bytes left of the server's \
     {total}-byte budget for requests in flight; retry later or send less"
)]
pub struct MemoryRefused {
    pub needed: u64,
    pub left: u64,
    pub total: u64,
}

/// The memory a request's body will take once decoded, estimated by the transport from the
/// body's bytes before any decoder runs (see `transport::footprint`), and charged against the
/// request memory budget by [`crate::overload`]. Absent for bodies passed on as they arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodedFootprint(pub u64);

#[cfg(test)]
mod tests;
