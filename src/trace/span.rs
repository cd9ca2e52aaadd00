//! One traced request's spans: a root span for the request, with children for receive and
//! decode, the queue wait, each batch run, encode and send, and each ensemble step (whose own
//! queue wait and batch run are its children). Spans are plain records kept with the request
//! and handed, whole, to the exporter's bounded queue when the last holder lets go of the
//! trace: nothing on the request path waits for the exporter.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::context::{hex, RemoteParent, SpanId, TraceHeaders};
use super::export::Tracer;
pub use super::record::{
    FinishedTrace, SpanDetail, SpanRecord, TraceIdentity, BATCH_RUN, ENCODE_SEND, ENSEMBLE_STEP,
    QUEUE_WAIT, RECEIVE_DECODE, REQUEST,
};

/// A sampled request's trace, shared by the request's context, its queued message and its
/// ensemble steps; exported when the last of them drops it.
pub struct RequestTrace {
    identity: TraceIdentity,
    /// When the request arrived, on both clocks: spans are timed on the monotonic one and
    /// written in Unix time.
    arrived: Instant,
    arrived_unix_ns: u64,
    spans: Mutex<Vec<SpanRecord>>,
    /// Nanoseconds after arrival when the last run ended (0: none ran), where encode and
    /// send begin.
    ran_ns: AtomicU64,
    /// Nanoseconds after arrival when the answer was handed over (0: not yet).
    ended_ns: AtomicU64,
    tracer: Arc<Tracer>,
}

impl std::fmt::Debug for RequestTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestTrace")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

/// Where a span of one trace is recorded: the trace and the span new spans are children of.
#[derive(Debug, Clone)]
pub struct TraceHandle {
    trace: Arc<RequestTrace>,
    parent: SpanId,
}

/// The request-side start of a trace, made for each request while any settings trace:
/// when it arrived and its trace headers (shared, not parsed), until the request names its
/// model and the sampling decision is made.
#[derive(Debug, Clone)]
pub struct TraceStart {
    tracer: Arc<Tracer>,
    arrived: Instant,
    headers: TraceHeaders,
}

impl TraceStart {
    /// A request's trace start while any settings may trace it, else `None` (one atomic
    /// load, nothing allocated).
    pub fn begin(tracer: Option<&Arc<Tracer>>, headers: &http::HeaderMap) -> Option<Self> {
        let tracer = tracer.filter(|tracer| tracer.settings().may_trace())?;
        Some(Self::new(tracer.clone(), TraceHeaders::of(headers)))
    }

    pub fn new(tracer: Arc<Tracer>, headers: TraceHeaders) -> Self {
        Self {
            tracer,
            arrived: Instant::now(),
            headers,
        }
    }

    /// The request's trace when it is sampled for `model`.
    pub fn sample(
        &self,
        model: &Arc<str>,
        version: u64,
        protocol: &'static str,
    ) -> Option<TraceHandle> {
        if !self.tracer.settings().sample(model) {
            return None;
        }
        let ids = self.tracer.ids();
        let parent: Option<RemoteParent> = self.headers.parent();
        let identity = TraceIdentity {
            trace_id: parent.map_or_else(|| ids.trace_id(), |p| p.trace_id),
            root: ids.span_id(),
            remote_parent: parent.map(|p| p.span_id),
            tracestate: self.headers.state(),
            model: model.clone(),
            version,
            protocol,
        };
        let now_unix = unix_ns(SystemTime::now());
        let since = u64::try_from(self.arrived.elapsed().as_nanos()).unwrap_or(0);
        let root = identity.root;
        let trace = RequestTrace {
            identity,
            arrived: self.arrived,
            arrived_unix_ns: now_unix.saturating_sub(since),
            spans: Mutex::new(Vec::with_capacity(6)),
            ran_ns: AtomicU64::new(0),
            ended_ns: AtomicU64::new(0),
            tracer: self.tracer.clone(),
        };
        Some(TraceHandle {
            trace: Arc::new(trace),
            parent: root,
        })
    }
}

fn unix_ns(time: SystemTime) -> u64 {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
}

impl RequestTrace {
    fn offset(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.arrived).as_nanos()).unwrap_or(u64::MAX)
    }

    fn unix(&self, offset_ns: u64) -> u64 {
        self.arrived_unix_ns.saturating_add(offset_ns)
    }
}

impl TraceHandle {
    /// The trace id, as the access log writes it.
    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace.identity.trace_id)
    }

    /// A child span of this handle's span, from `start` to `end`.
    pub fn record(&self, name: &'static str, start: Instant, end: Instant, detail: SpanDetail) {
        let trace = &self.trace;
        let record = SpanRecord {
            id: trace.tracer.ids().span_id(),
            parent: self.parent,
            name,
            start_unix_ns: trace.unix(trace.offset(start)),
            end_unix_ns: trace.unix(trace.offset(end)),
            detail,
        };
        if name == BATCH_RUN {
            trace.ran_ns.fetch_max(trace.offset(end), Ordering::Relaxed);
        }
        trace
            .spans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(record);
    }

    /// Receive and decode: from the request's arrival until now, when it is valid.
    pub fn decoded(&self) {
        self.record(
            RECEIVE_DECODE,
            self.trace.arrived,
            Instant::now(),
            SpanDetail::None,
        );
    }

    /// Opens a child span (an ensemble step) whose own children are recorded through the
    /// handle it gives; it ends when [`OpenSpan::close`] runs or it is dropped.
    pub fn open(&self, name: &'static str, detail: SpanDetail) -> OpenSpan {
        OpenSpan {
            handle: TraceHandle {
                trace: self.trace.clone(),
                parent: self.trace.tracer.ids().span_id(),
            },
            parent: self.parent,
            name,
            start: Instant::now(),
            detail: Some(detail),
        }
    }

    /// The answer is being handed to the transport: the request span ends, and encode and
    /// send is the time since the last run ended. The first call counts.
    pub fn answered(&self) {
        let trace = &self.trace;
        let now = trace.offset(Instant::now()).max(1);
        if trace
            .ended_ns
            .compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        let ran = trace.ran_ns.load(Ordering::Acquire);
        if ran > 0 {
            let record = SpanRecord {
                id: trace.tracer.ids().span_id(),
                parent: trace.identity.root,
                name: ENCODE_SEND,
                start_unix_ns: trace.unix(ran),
                end_unix_ns: trace.unix(now),
                detail: SpanDetail::None,
            };
            trace
                .spans
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(record);
        }
    }
}

/// A span open while its children run (see [`TraceHandle::open`]).
pub struct OpenSpan {
    handle: TraceHandle,
    parent: SpanId,
    name: &'static str,
    start: Instant,
    detail: Option<SpanDetail>,
}

impl OpenSpan {
    /// Where this span's children are recorded.
    pub fn handle(&self) -> &TraceHandle {
        &self.handle
    }

    pub fn close(self) {}
}

impl Drop for OpenSpan {
    fn drop(&mut self) {
        let trace = &self.handle.trace;
        let record = SpanRecord {
            id: self.handle.parent,
            parent: self.parent,
            name: self.name,
            start_unix_ns: trace.unix(trace.offset(self.start)),
            end_unix_ns: trace.unix(trace.offset(Instant::now())),
            detail: self.detail.take().unwrap_or(SpanDetail::None),
        };
        trace
            .spans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(record);
    }
}

impl Drop for RequestTrace {
    /// Hands the spans to the exporter's queue (which drops and counts them when full).
    fn drop(&mut self) {
        let mut spans = std::mem::take(self.spans.get_mut().unwrap_or_else(|p| p.into_inner()));
        let ended = match self.ended_ns.load(Ordering::Acquire) {
            0 => self.offset(Instant::now()),
            ended => ended,
        };
        spans.push(SpanRecord {
            id: self.identity.root,
            parent: self.identity.remote_parent.unwrap_or([0; 8]),
            name: REQUEST,
            start_unix_ns: self.arrived_unix_ns,
            end_unix_ns: self.unix(ended),
            detail: SpanDetail::None,
        });
        let identity = TraceIdentity {
            trace_id: self.identity.trace_id,
            root: self.identity.root,
            remote_parent: self.identity.remote_parent,
            tracestate: std::mem::take(&mut self.identity.tracestate),
            model: self.identity.model.clone(),
            version: self.identity.version,
            protocol: self.identity.protocol,
        };
        self.tracer.submit(FinishedTrace { identity, spans });
    }
}
