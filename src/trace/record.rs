//! What a finished span and trace hold: plain records, shared by the spans' recorder and the
//! exporter.

use std::sync::Arc;

use super::context::{SpanId, TraceId};

/// The spans' names.
pub const REQUEST: &str = "request";
pub const RECEIVE_DECODE: &str = "receive/decode";
pub const QUEUE_WAIT: &str = "queue wait";
pub const BATCH_RUN: &str = "batch run";
pub const ENCODE_SEND: &str = "encode/send";
pub const ENSEMBLE_STEP: &str = "ensemble step";

/// What a span says besides its name and times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpanDetail {
    None,
    Batch { size: usize, instance: usize },
    Step { model: Arc<str> },
}

/// One finished span.
#[derive(Debug, Clone)]
pub struct SpanRecord {
    pub id: SpanId,
    pub parent: SpanId,
    pub name: &'static str,
    pub start_unix_ns: u64,
    pub end_unix_ns: u64,
    pub detail: SpanDetail,
}

/// What every span of the trace shares.
#[derive(Debug)]
pub struct TraceIdentity {
    pub trace_id: TraceId,
    pub root: SpanId,
    pub remote_parent: Option<SpanId>,
    pub tracestate: String,
    pub model: Arc<str>,
    pub version: u64,
    pub protocol: &'static str,
}

/// A request's spans, ready to export.
#[derive(Debug)]
pub struct FinishedTrace {
    pub identity: TraceIdentity,
    pub spans: Vec<SpanRecord>,
}
