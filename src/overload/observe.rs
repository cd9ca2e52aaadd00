//! The outermost layer: gives each request an id, a [`RequestContext`] (protocol, deadline) and
//! a `tracing` span, and when the answer leaves, counts it, times it, logs one debug line and
//! (with `--access-log`) writes its access-log line.

use std::future::Future;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use axum::body::HttpBody;
use axum::extract::ConnectInfo;
use axum::http::{header, HeaderName, HeaderValue, Request, Response, Version};
use pin_project_lite::pin_project;
use tokio::time::Instant;
use tonic::transport::server::TcpConnectInfo;
use tower::Service;
use tracing::instrument::Instrumented;
use tracing::{Instrument, Span};

use super::access_log::{content_length, AccessEntry, AccessLog};
use super::drain::RequestBody;
use super::refusal::{BodyUnread, Outcome, Refusal, Refused, Transport};
use crate::metrics::{Metrics, RefusalReason};
use crate::request::{
    client_timeout, MemoryPool, Protocol, RequestContext, RequestIds, StickyHeaders,
    REQUEST_ID_HEADER,
};
use crate::trace::{TraceStart, Tracer};

/// What every [`Observe`] service of one server shares.
pub struct Observer {
    pub metrics: Arc<Metrics>,
    pub ids: RequestIds,
    /// Deadline for requests whose client set none.
    pub default_timeout: Option<Duration>,
    /// `None`: `--access-log off`.
    pub access_log: Option<AccessLog>,
    /// The request memory budget, for adapters to charge decoded tensors to through each
    /// request's context.
    pub memory: Arc<dyn MemoryPool>,
    /// The headers models' splits are sticky on, copied into each request's context.
    pub sticky: Arc<StickyHeaders>,
    /// `None`: no request is traced.
    pub tracer: Option<Arc<Tracer>>,
}

pub struct Observe<S, B> {
    inner: S,
    observer: Arc<Observer>,
    _body: PhantomData<fn() -> B>,
}

impl<S: Clone, B> Clone for Observe<S, B> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            observer: self.observer.clone(),
            _body: PhantomData,
        }
    }
}

/// Layer 1 of the stack: every answer counted, timed and logged once.
pub struct ObserveLayer<B> {
    observer: Arc<Observer>,
    _body: PhantomData<fn() -> B>,
}

impl<B> ObserveLayer<B> {
    pub fn new(observer: Arc<Observer>) -> Self {
        Self {
            observer,
            _body: PhantomData,
        }
    }
}

impl<B> Clone for ObserveLayer<B> {
    fn clone(&self) -> Self {
        Self::new(self.observer.clone())
    }
}

impl<S, B> tower::Layer<S> for ObserveLayer<B> {
    type Service = Observe<S, B>;

    fn layer(&self, inner: S) -> Observe<S, B> {
        Observe {
            inner,
            observer: self.observer.clone(),
            _body: PhantomData,
        }
    }
}

impl<S, ReqBody, B> Service<Request<ReqBody>> for Observe<S, B>
where
    S: Service<Request<ReqBody>, Response = Response<B>>,
    ReqBody: RequestBody,
    B: Transport + HttpBody,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = ObserveFuture<S::Future, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let started = Instant::now();
        let path = request.uri().path();
        let protocol = if B::GRPC {
            Protocol::of_grpc_path(path)
        } else {
            Protocol::of_http_path(path)
        };
        let id = self.observer.ids.for_request(request.headers());
        let span = request_span(&id, protocol, path);
        let timeout = client_timeout(request.headers(), B::GRPC);
        let deadline = timeout
            .as_ref()
            .ok()
            .and_then(|timeout| timeout.or(self.observer.default_timeout))
            .and_then(|timeout| started.checked_add(timeout));
        let context = RequestContext::new(id, protocol, deadline)
            .with_memory(self.observer.memory.clone())
            .with_sticky(self.observer.sticky.capture(request.headers()))
            .with_trace(TraceStart::begin(
                self.observer.tracer.as_ref(),
                request.headers(),
            ));
        let context = Arc::new(context);
        let access = self.observer.access_log.is_some().then(|| Access {
            time: SystemTime::now(),
            client: client_address(&request),
            method: request.method().as_str().to_owned(),
            path: path.to_owned(),
            bytes_in: content_length(request.headers()),
        });
        let record = Record {
            context: context.clone(),
            observer: self.observer.clone(),
            started,
            span: span.clone(),
            access,
            // A refusal of an HTTP/1 request with a body too large to drain closes the
            // connection (see `drain`).
            close_after_refusal: !B::GRPC
                && request.version() <= Version::HTTP_11
                && !request.body().drainable(),
        };
        let mut request = request.map(RequestBody::guard);
        let state = match timeout {
            Err(err) => State::Answered {
                response: Some(B::refusal(&Refusal::from(err))),
            },
            Ok(_) => {
                request.extensions_mut().insert(context);
                let future = span.in_scope(|| self.inner.call(request));
                State::Running {
                    future: future.instrument(span),
                }
            }
        };
        ObserveFuture {
            state,
            record: Pending(Some(record)),
        }
    }
}

/// The span a request's work runs in. Under the access-log target, so that enabling the
/// per-request line also enables the span that gives it (and everything logged under it) the
/// request id.
pub(super) fn request_span(id: &HeaderValue, protocol: Protocol, path: &str) -> Span {
    tracing::debug_span!(
        target: "tensorport::access",
        "request",
        id = id.to_str().unwrap_or_default(),
        protocol = protocol.label(),
        path = %path,
    )
}

pin_project! {
    #[project = StateProj]
    enum State<F, B> {
        Answered { response: Option<Response<B>> },
        Running { #[pin] future: Instrumented<F> },
    }
}

pin_project! {
    /// The answer of [`Observe`]; counted when it completes, or as cancelled when dropped
    /// before (the connection closed, or the server's own timeout won).
    pub struct ObserveFuture<F, B> {
        #[pin]
        state: State<F, B>,
        record: Pending,
    }
}

/// Where a message of a stream came from, for its access-log line.
pub(super) struct MessageOrigin {
    pub client: Option<SocketAddr>,
    /// The stream's method path.
    pub path: &'static str,
    /// The message's size on the wire.
    pub bytes_in: u64,
}

impl<F, B> ObserveFuture<F, B> {
    /// Observes `future`, the answer to one message of a stream, as [`Observe`] observes the
    /// answer to a call: counted, timed and logged once (its access-log line included),
    /// refusals too, or counted as cancelled when dropped before it is ready (the stream
    /// ended first). `context` and `span` are the message's own.
    pub(super) fn message(
        observer: &Arc<Observer>,
        context: Arc<RequestContext>,
        started: Instant,
        span: Span,
        origin: MessageOrigin,
        future: F,
    ) -> Self {
        let access = observer.access_log.is_some().then(|| Access {
            time: SystemTime::now(),
            client: origin.client,
            // Every gRPC message travels in a POST.
            method: "POST".to_owned(),
            path: origin.path.to_owned(),
            bytes_in: Some(origin.bytes_in),
        });
        let record = Record {
            context,
            observer: observer.clone(),
            started,
            span: span.clone(),
            access,
            close_after_refusal: false,
        };
        Self {
            state: State::Running {
                future: future.instrument(span),
            },
            record: Pending(Some(record)),
        }
    }
}

impl<F, E, B> Future for ObserveFuture<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Transport + HttpBody,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = match this.state.project() {
            StateProj::Answered { response } => match response.take() {
                Some(response) => Ok(response),
                None => return Poll::Pending,
            },
            StateProj::Running { future } => match future.poll(cx) {
                Poll::Ready(result) => result,
                Poll::Pending => return Poll::Pending,
            },
        };
        let Some(record) = this.record.0.take() else {
            return Poll::Ready(result);
        };
        Poll::Ready(match result {
            Ok(mut response) => {
                record.answered(&mut response);
                Ok(response)
            }
            Err(err) => {
                // Services below never fail (errors are answers); if one did, the transport
                // turns it into a 500 / INTERNAL.
                record.finish(
                    Outcome::Failed(crate::error_kind::ErrorKind::Internal),
                    None,
                    None,
                );
                Err(err)
            }
        })
    }
}

/// The bookkeeping of a request not yet counted.
struct Pending(Option<Record>);

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(record) = self.0.take() {
            record.finish(Outcome::Cancelled, None, None);
        }
    }
}

struct Record {
    context: Arc<RequestContext>,
    observer: Arc<Observer>,
    started: Instant,
    span: Span,
    close_after_refusal: bool,
    /// What the access log needs from the request; `None` when it is off.
    access: Option<Access>,
}

/// The request's side of an access-log line, taken when it arrives.
struct Access {
    time: SystemTime,
    client: Option<SocketAddr>,
    method: String,
    path: String,
    bytes_in: Option<u64>,
}

/// The peer, from axum's `ConnectInfo` or tonic's `TcpConnectInfo`.
fn client_address<T>(request: &Request<T>) -> Option<SocketAddr> {
    let extensions = request.extensions();
    extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| *addr)
        .or_else(|| {
            extensions
                .get::<TcpConnectInfo>()
                .and_then(TcpConnectInfo::remote_addr)
        })
}

/// The status the access log shows: the HTTP status, or for gRPC the status code (a success
/// carries it in the trailers, so no header means 0, OK).
fn logged_status<B: Transport>(response: &Response<B>) -> u16 {
    if !B::GRPC {
        return response.status().as_u16();
    }
    response
        .headers()
        .get("grpc-status")
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.parse().ok())
        .unwrap_or(0)
}

impl Record {
    fn answered<B: Transport + HttpBody>(self, response: &mut Response<B>) {
        self.context.answered(response.headers_mut());
        // A `HeaderName` built once: inserting by `&str` would copy the custom name on every
        // response. The value is shared with the request's context, not copied.
        response.headers_mut().insert(
            HeaderName::from_static(REQUEST_ID_HEADER),
            self.context.id_header().clone(),
        );
        if self.close_after_refusal && response.extensions().get::<BodyUnread>().is_some() {
            // The refusal did not read the request body, so the server closes the connection
            // after it; saying so keeps a client from sending its next request on a
            // connection that is going away (it reconnects instead of failing).
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        let outcome = B::outcome(response);
        let marked = response.extensions().get::<Refused>().map(|r| r.0);
        let status = response.status().as_u16();
        let bytes_out = response.body().size_hint().exact();
        self.finish(outcome, Some(status), bytes_out);
        if let Some(access) = &self.access {
            // The HTTP status is 200 on every gRPC answer; the log shows the gRPC code.
            self.write_access(access, outcome, Some(logged_status(response)), bytes_out);
        }
        // A charge an adapter made once the request was decoded was refused: the answer is
        // RESOURCE_EXHAUSTED like a full queue's, and counted for memory.
        let implied = outcome.implied_reason().map(|reason| match reason {
            RefusalReason::QueueFull if self.context.memory_refused() => RefusalReason::Memory,
            other => other,
        });
        if let Some(reason) = marked.or(implied) {
            self.observer
                .metrics
                .record_refusal(reason, self.context.protocol());
        }
    }

    fn write_access(
        &self,
        access: &Access,
        outcome: Outcome,
        status: Option<u16>,
        bytes_out: Option<u64>,
    ) {
        let Some(log) = &self.observer.access_log else {
            return;
        };
        log.write(&AccessEntry {
            time: access.time,
            client: access.client,
            method: &access.method,
            path: &access.path,
            protocol: self.context.protocol().label(),
            model: self.context.logged_model(),
            status,
            outcome: outcome.label(),
            duration: self.started.elapsed(),
            request_id: self.context.id(),
            trace_id: self.context.trace().map(|trace| trace.trace_id_hex()),
            bytes_in: access.bytes_in,
            bytes_out,
        });
    }

    /// Counts and logs the request; an answer that never came (`status` `None`) still gets
    /// its access-log line here.
    fn finish(&self, outcome: Outcome, status: Option<u16>, bytes_out: Option<u64>) {
        self.context.ended();
        if status.is_none() {
            if let Some(access) = &self.access {
                self.write_access(access, outcome, None, bytes_out);
            }
        }
        let took = self.started.elapsed();
        let protocol = self.context.protocol();
        self.observer.metrics.record_request(
            protocol,
            self.context.model_shared(),
            outcome.label(),
            took,
        );
        let model = self.context.model();
        let (model, version) = model.unwrap_or(("", 0));
        let latency_us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.span.in_scope(|| {
            tracing::debug!(
                target: "tensorport::access",
                outcome = outcome.label(),
                status,
                model,
                version,
                latency_us,
                "answered"
            )
        });
    }
}
