//! One connection: the TLS handshake, then hyper (HTTP/1 and HTTP/2, or HTTP/2 only for gRPC)
//! with timers, an idle watch, each request's body read before it reaches the application,
//! each answer charged until it is sent, and the drain at shutdown (see [`super::drain`]).

use std::future::Future;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderValue, Request, Response, Version};
use http_body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit};
use tower::{Service, ServiceExt};

use crate::overload::MemoryBudget;
use crate::request::DecodedFootprint;

use super::activity::{Activity, Expired, Limits};
use super::body::{ReceiveBudget, Received};
use super::drain::{stopped, IDLE_GRACE};
use super::endpoint::Endpoint;
use super::send::{Delivery, Sending};
use super::settings::TransportSettings;
use super::stream::{self, StreamExecutor};
use super::watched::Watched;
use super::wire::Wire;

/// HTTP/2 flow-control windows: per stream, and per connection (several requests in flight
/// on one connection). The default 64 KiB makes a client wait for a window update every
/// 64 KiB of a large request; a few MiB let a tensor arrive in one flight.
const STREAM_WINDOW: u32 = 4 << 20;
const CONNECTION_WINDOW: u32 = 16 << 20;

/// The largest HTTP/2 frame a client may send. At the protocol's default 16 KiB a 1 MiB
/// tensor comes as 64 DATA frames, each framed by the client and parsed, counted and joined
/// here (measured: the server's CPU per 1,000-row request 4 to 13% lower, the client's about
/// 40%, docs/BENCHMARKS.md); at 1 MiB it comes as one. Native Triton advertises 4 MiB. A frame
/// is held whole before its bytes are handed on, so a frame in progress adds at most this to
/// the 16 MiB a connection's window already lets a client have in flight.
const MAX_FRAME: u32 = 1 << 20;

/// What a port serves: a tower service from requests (body already read) to responses.
pub trait App<W: Wire>:
    Service<
        Request<W::RequestBody>,
        Response = Response<W::ResponseBody>,
        Error: Into<axum::BoxError>,
        Future: Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<W: Wire, S> App<W> for S where
    S: Service<
            Request<W::RequestBody>,
            Response = Response<W::ResponseBody>,
            Error: Into<axum::BoxError>,
            Future: Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

/// The hyper settings of one port. HTTP/2 streams run under `executor`, which resets those
/// whose answers the client does not take.
pub fn builder<W: Wire>(
    settings: &TransportSettings,
    executor: StreamExecutor,
) -> auto::Builder<StreamExecutor> {
    let mut builder = auto::Builder::new(executor);
    // The header-read timeout is the connection's own (see `activity`): hyper's would also
    // run while a kept-alive connection waits for its next request.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(settings.http2_keepalive_interval)
        .keep_alive_timeout(settings.http2_keepalive_timeout)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME);
    if W::HTTP2_ONLY {
        builder.http2_only()
    } else {
        builder
    }
}

/// Everything a connection task needs, owned.
pub struct Accepted<S> {
    pub stream: TcpStream,
    pub peer: SocketAddr,
    pub app: S,
    pub endpoint: Endpoint,
    pub builder: Arc<auto::Builder<StreamExecutor>>,
    pub stop: watch::Receiver<bool>,
    /// Its place under the connection cap, given back when the connection ends.
    pub permit: OwnedSemaphorePermit,
    /// Dropped when the connection ends; the accept loop waits for all of them at shutdown.
    pub alive: mpsc::Sender<()>,
}

/// Serves one accepted connection to its end.
pub async fn run<W: Wire, S: App<W>>(accepted: Accepted<S>) {
    let Accepted {
        stream,
        peer,
        app,
        endpoint,
        builder,
        stop,
        permit,
        alive,
    } = accepted;
    let settings = endpoint.settings.clone();
    let service = ConnService::<W, S> {
        app,
        peer,
        local: stream.local_addr().ok(),
        activity: Activity::new(endpoint.pools.traffic.clone()),
        body_read_timeout: settings.body_read_timeout,
        max_body_bytes: endpoint.max_body_bytes,
        receiving: endpoint.pools.receiving.clone(),
        answers: endpoint.pools.answers.clone(),
        _wire: PhantomData,
    };
    let closed_stalled = &endpoint.send_timeouts.connections;
    match &endpoint.tls {
        None => drive(stream, service, &builder, &settings, stop, closed_stalled).await,
        Some(acceptor) => {
            let handshake =
                tokio::time::timeout(settings.header_read_timeout, acceptor.accept(stream)).await;
            match handshake {
                Ok(Ok(tls)) => {
                    drive(tls, service, &builder, &settings, stop, closed_stalled).await;
                }
                Ok(Err(err)) => tracing::debug!(%peer, error = %err, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        }
    }
    drop(permit);
    drop(alive);
}

async fn drive<W, S, IO>(
    io: IO,
    service: ConnService<W, S>,
    builder: &auto::Builder<StreamExecutor>,
    settings: &TransportSettings,
    mut stop: watch::Receiver<bool>,
    closed_stalled: &prometheus_client::metrics::counter::Counter,
) where
    W: Wire,
    S: App<W>,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let peer = service.peer;
    let activity = service.activity.clone();
    let io = Watched::new(io, activity.clone(), W::HTTP2_ONLY);
    let connection = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    let expired = activity.expired(Limits {
        idle: settings.idle_timeout,
        header: settings.header_read_timeout,
        send: settings.send_timeout,
    });
    tokio::pin!(expired);
    // Armed when an HTTP/1 connection starts to drain.
    let grace = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(grace);
    let mut phase = Phase::Serving;
    let result = loop {
        tokio::select! {
            result = connection.as_mut() => break result,
            () = stopped(&mut stop), if phase == Phase::Serving => {
                activity.start_draining();
                if activity.speaks_http2() {
                    // GOAWAY; the streams the client sent before it heard are served.
                    connection.as_mut().graceful_shutdown();
                    phase = Phase::Closing;
                } else {
                    grace.as_mut().reset(tokio::time::Instant::now() + IDLE_GRACE);
                    phase = Phase::Grace;
                }
            }
            () = &mut grace, if phase == Phase::Grace => phase = Phase::AwaitingQuiet,
            () = activity.traffic().quiet(), if phase == Phase::AwaitingQuiet => {
                if activity.is_idle() {
                    tracing::debug!(%peer, "closing an idle connection: the drain is done");
                    connection.as_mut().graceful_shutdown();
                    break bounded(connection.as_mut(), settings.header_read_timeout).await;
                }
                // A head is arriving: its answer will say `Connection: close`, or the
                // header-read timeout will end it.
                phase = Phase::Closing;
            }
            why = &mut expired => match why {
                Expired::SlowHead => {
                    // Nothing is owed to a client that has not finished asking.
                    tracing::debug!(%peer, "closing a connection whose request head is too slow");
                    return;
                }
                Expired::Stalled => {
                    closed_stalled.inc();
                    tracing::debug!(
                        %peer,
                        timeout_secs = settings.send_timeout.as_secs(),
                        "closing a connection whose client took none of its answers"
                    );
                    return;
                }
                Expired::Idle => {
                    tracing::debug!(%peer, "closing a connection idle for the idle timeout");
                    connection.as_mut().graceful_shutdown();
                    break bounded(connection.as_mut(), settings.header_read_timeout).await;
                }
            },
        }
    };
    if let Err(err) = result {
        tracing::debug!(%peer, error = %err, "connection ended with an error");
    }
}

/// Where a connection is in the drain (see [`super::drain`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Serving,
    /// HTTP/1: open for [`IDLE_GRACE`] whatever happens.
    Grace,
    /// HTTP/1: closed once no connection has a request in flight, if it is idle then.
    AwaitingQuiet,
    /// Closing on its own: after GOAWAY (HTTP/2), or after its next answer (HTTP/1).
    Closing,
}

/// A connection asked to close with nothing in flight: there is nothing to lose in cutting
/// it off after `limit`; a client that has not even finished the HTTP/2 preface would
/// otherwise keep it open.
async fn bounded<F, E>(connection: Pin<&mut F>, limit: Duration) -> Result<(), E>
where
    F: Future<Output = Result<(), E>>,
{
    tokio::time::timeout(limit, connection)
        .await
        .unwrap_or(Ok(()))
}

/// The hyper service of one connection: the peer's address into the request, the body read
/// (within the body-read timeout), then the application.
struct ConnService<W, S> {
    app: S,
    peer: SocketAddr,
    local: Option<SocketAddr>,
    activity: Activity,
    body_read_timeout: Duration,
    max_body_bytes: usize,
    receiving: ReceiveBudget,
    /// Charged with each answer until it is sent.
    answers: MemoryBudget,
    _wire: PhantomData<fn() -> W>,
}

type ConnFuture<B> =
    Pin<Box<dyn Future<Output = Result<Response<Sending<B>>, axum::BoxError>> + Send>>;

impl<W: Wire, S: App<W>> hyper::service::Service<Request<Incoming>> for ConnService<W, S> {
    type Response = Response<Sending<W::ResponseBody>>;
    type Error = axum::BoxError;
    type Future = ConnFuture<W::ResponseBody>;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        let busy = self.activity.begin();
        W::name_peer(request.extensions_mut(), self.local, self.peer);
        let app = self.app.clone();
        let timeout = self.body_read_timeout;
        let limit = self.max_body_bytes;
        let receiving = self.receiving.clone();
        let peer = self.peer;
        let answers = self.answers.clone();
        let activity = self.activity.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let http2 = parts.version == Version::HTTP_2;
            // Read here, in the stream's own task: `call` runs in the connection's.
            let clock = if http2 { stream::current_clock() } else { None };
            let tracked = |mut response: Response<W::ResponseBody>| {
                let delivery = if http2 {
                    Delivery::Http2(clock)
                } else {
                    // Decided when the answer is made: an answer made during the drain
                    // closes its connection, so that the client goes elsewhere.
                    if activity.is_draining() {
                        response
                            .headers_mut()
                            .insert(header::CONNECTION, HeaderValue::from_static("close"));
                    }
                    Delivery::Http1(activity)
                };
                response.map(|inner| Sending::new(inner, busy, answers, delivery))
            };
            // A body that announces more than the limit is refused at once, without waiting
            // for bytes that would not be taken.
            let announced = body.size_hint().lower();
            if announced > u64::try_from(limit).unwrap_or(u64::MAX) {
                return Ok(tracked(W::body_too_large(announced, limit)));
            }
            let received = if body.is_end_stream() || W::streams(parts.uri.path()) {
                Received::streaming(body)
            } else {
                let lead = |first: &[u8]| W::body_lead(&parts, first);
                match tokio::time::timeout(timeout, Received::read(body, limit, &receiving, lead))
                    .await
                {
                    Ok(Ok(received)) => received,
                    Ok(Err(err)) => {
                        tracing::debug!(%peer, error = %err, "request body unreadable");
                        return Ok(tracked(W::body_unreadable()));
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "request body too slow; answered and closed");
                        return Ok(tracked(W::body_too_slow(timeout)));
                    }
                }
            };
            let mut parts = parts;
            if let Some(body) = received.whole() {
                let footprint = W::footprint(&parts, body);
                parts.extensions.insert(DecodedFootprint(footprint));
            }
            let request = Request::from_parts(parts, W::request_body(received));
            let response = app.oneshot(request).await.map_err(Into::into)?;
            Ok(tracked(response))
        })
    }
}
