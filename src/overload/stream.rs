//! Overload protection for each message of a stream (`ModelStreamInfer`, the gRPC method
//! whose request is a stream of inference requests).
//!
//! A stream passes the stack once, when it opens, as a call does: it spends a token of its
//! client's rate, and takes a concurrency slot until its handler has answered with headers.
//! Holding that slot for the stream's life would be wrong: a stream is idle most of it
//! (Triton's clients keep one open for as long as they run), so N idle streams would hold N
//! slots and starve the calls that have work to do. Letting the stream's admission stand for
//! its messages is the other mistake (the one this module replaces): they then ran without a
//! token, a slot or a memory charge. So each message is admitted on its own, through the very
//! services that admit a call (layers 1 and 3 to 5: [`ObserveFuture::message`] around
//! [`Protected`], here over [`Run`]), at the moment it is received: it spends a token, takes a
//! slot, charges its decoded size to the memory budget, runs under its own deadline and is
//! counted like a call, and it holds its slot and its charge until its answer is handed to the
//! transport. What an open stream holds is then exactly what its messages in flight hold, and
//! the adapter bounds how many those are (its window). Layer 2 does not apply (a message is
//! never a probe), nor does authentication, which the stream passed as it opened.
//!
//! A refused message is answered with the refusal's status, which the adapter puts in the
//! stream: the stream stays open for the next message, as Triton answers a message that fails.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::Map;
use futures::FutureExt;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response};
use tokio::time::Instant;
use tonic::body::Body;
use tonic::transport::server::TcpConnectInfo;
use tonic::Status;
use tower::Service;

use super::observe::{request_span, MessageOrigin, ObserveFuture, Observer};
use super::protection::Protected;
use crate::request::{
    client_timeout, DecodedFootprint, Protocol, RequestContext, REQUEST_ID_HEADER,
};
use crate::trace::context::{TRACEPARENT, TRACESTATE};
use crate::trace::TraceStart;

/// What admits the messages of every stream one server serves; see the module documentation.
#[derive(Clone)]
pub struct Streams {
    observer: Arc<Observer>,
    protected: Protected<Run, Body>,
    /// The header that carries an API key the rate limit counts on its own, if any.
    key_header: Option<HeaderName>,
}

impl Streams {
    pub(super) fn new(
        observer: Arc<Observer>,
        protected: Protected<Run, Body>,
        key_header: Option<HeaderName>,
    ) -> Self {
        Self {
            observer,
            protected,
            key_header,
        }
    }

    /// The gate for the messages of the stream that `request`, a call to the method at
    /// `path`, opened.
    pub fn open<T>(&self, request: &tonic::Request<T>, path: &'static str) -> StreamGate {
        let sent = request.metadata().as_ref();
        // Only what the layers read from a request's headers travels with each message: its
        // id (a client's id names every message of its stream), its API key and its trace
        // context (each message's trace continues the stream's caller).
        let mut headers = HeaderMap::new();
        let names = [
            Some(HeaderName::from_static(REQUEST_ID_HEADER)),
            self.key_header.clone(),
            Some(HeaderName::from_static(TRACEPARENT)),
            Some(HeaderName::from_static(TRACESTATE)),
        ];
        for name in names.into_iter().flatten() {
            if let Some(value) = sent.get(&name) {
                headers.insert(name, value.clone());
            }
        }
        // The client's deadline is the whole stream's (gRPC's); the server's default timeout
        // bounds each message from its arrival instead, as it bounds each call. A malformed
        // header has already refused the stream.
        let stream_deadline = client_timeout(sent, true)
            .ok()
            .flatten()
            .and_then(|timeout| Instant::now().checked_add(timeout));
        StreamGate {
            observer: self.observer.clone(),
            protected: self.protected.clone(),
            headers,
            // The stream's values of the headers a split is sticky on: every message of one
            // user's stream goes to that user's version.
            sticky: self.observer.sticky.capture(sent),
            peer: request.extensions().get::<TcpConnectInfo>().cloned(),
            path,
            stream_deadline,
        }
    }
}

/// Admits the messages of one stream, each as a call is admitted.
pub struct StreamGate {
    observer: Arc<Observer>,
    protected: Protected<Run, Body>,
    /// The stream's headers the layers read (see [`Streams::open`]).
    headers: HeaderMap,
    sticky: Vec<(HeaderName, HeaderValue)>,
    /// The peer, which the rate limit counts against when no API key says otherwise.
    peer: Option<TcpConnectInfo>,
    path: &'static str,
    /// The client's deadline for the stream, if it set one.
    stream_deadline: Option<Instant>,
}

impl StreamGate {
    /// Admits a message just received, `wire_bytes` long and charged `footprint`, and runs
    /// `work` (given the message's own context) if it is admitted. Admission happens here, in
    /// the order messages arrive, not when the returned future is first polled. The answer is
    /// the work's, or the status of the refusal (or failure) that took its place; the slot
    /// and the memory charge are held until the returned future is ready or dropped.
    pub fn admit<W, F, T>(
        &mut self,
        footprint: DecodedFootprint,
        wire_bytes: u64,
        work: W,
    ) -> impl Future<Output = Result<T, Status>> + Send + 'static
    where
        W: FnOnce(Arc<RequestContext>) -> F,
        F: Future<Output = Result<T, Status>> + Send + 'static,
        T: Clone + Send + Sync + 'static,
    {
        let started = Instant::now();
        let own = self
            .observer
            .default_timeout
            .and_then(|timeout| started.checked_add(timeout));
        let deadline = match (self.stream_deadline, own) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let id = self.observer.ids.for_request(&self.headers);
        let protocol = Protocol::of_grpc_path(self.path);
        let span = request_span(&id, protocol, self.path);
        // The message's decoded tensors are charged to the budget through its own context.
        // Each message is its own trace, continuing the `traceparent` the stream opened with.
        let context = RequestContext::new(id, protocol, deadline)
            .with_memory(self.observer.memory.clone())
            .with_sticky(self.sticky.clone())
            .with_trace(TraceStart::begin(
                self.observer.tracer.as_ref(),
                &self.headers,
            ));
        let context = Arc::new(context);

        let mut request = Request::new(work(context.clone()));
        *request.headers_mut() = self.headers.clone();
        let extensions = request.extensions_mut();
        extensions.insert(context.clone());
        extensions.insert(footprint);
        if let Some(peer) = &self.peer {
            extensions.insert(peer.clone());
        }
        // Every layer of the stack is always ready (overload is refused, never waited for,
        // and `Run` waits for nothing), so `call` needs no `poll_ready` before it.
        let answer = span.in_scope(|| self.protected.call(request));
        let origin = MessageOrigin {
            client: self.peer.as_ref().and_then(TcpConnectInfo::remote_addr),
            path: self.path,
            bytes_in: wire_bytes,
        };
        let observed = ObserveFuture::<_, Body>::message(
            &self.observer,
            context,
            started,
            span,
            origin,
            answer,
        );
        async move {
            let Ok(mut response) = observed.await;
            match response.extensions_mut().remove::<Answered<T>>() {
                Some(Answered(answer)) => Ok(answer),
                None => Err(Status::from_header_map(response.headers())
                    .unwrap_or_else(|| Status::unknown("the answer carried no status"))),
            }
        }
    }
}

/// A message's answer, carried out of the stack in its response's extensions.
#[derive(Clone)]
struct Answered<T>(T);

/// The innermost service of a message's stack: runs the message's work, which travels as the
/// request's body, and answers as a gRPC call is answered, so that the layers above (and the
/// observing one) read it as they read a call's: a failure's status in the headers; a
/// success, here, with the work's answer in the extensions.
#[derive(Debug, Clone, Copy, Default)]
pub struct Run;

type Answer = Result<Response<Body>, Infallible>;

impl<F, T> Service<Request<F>> for Run
where
    F: Future<Output = Result<T, Status>>,
    T: Clone + Send + Sync + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Map<F, fn(Result<T, Status>) -> Answer>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<F>) -> Self::Future {
        request.into_body().map(respond::<T> as fn(_) -> _)
    }
}

fn respond<T: Clone + Send + Sync + 'static>(answer: Result<T, Status>) -> Answer {
    Ok(match answer {
        Ok(answer) => {
            let mut response = Response::new(Body::default());
            response.extensions_mut().insert(Answered(answer));
            response
        }
        Err(status) => status.into_http(),
    })
}
