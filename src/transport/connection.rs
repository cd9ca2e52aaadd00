//! One connection: the TLS handshake, then hyper (HTTP/1 and HTTP/2, or HTTP/2 only for gRPC)
//! with timers, an idle watch, and each request's body read before it reaches the application.

use std::future::Future;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{Request, Response};
use http_body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit};
use tower::{Service, ServiceExt};

use crate::request::DecodedFootprint;

use super::activity::{Activity, Expired, Tracked, Watched};
use super::body::{ReceiveBudget, Received};
use super::wire::Wire;
use super::{Endpoint, TransportSettings};

/// HTTP/2 flow-control windows: per stream, and per connection (several requests in flight
/// on one connection). The default 64 KiB makes a client wait for a window update every
/// 64 KiB of a large request; a few MiB let a tensor arrive in one flight.
const STREAM_WINDOW: u32 = 4 << 20;
const CONNECTION_WINDOW: u32 = 16 << 20;

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

/// The hyper settings of one port.
pub fn builder<W: Wire>(settings: &TransportSettings) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
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
        .initial_connection_window_size(CONNECTION_WINDOW);
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
    pub builder: Arc<auto::Builder<TokioExecutor>>,
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
        activity: Activity::default(),
        body_read_timeout: settings.body_read_timeout,
        max_body_bytes: endpoint.max_body_bytes,
        receiving: endpoint.pools.receiving.clone(),
        _wire: PhantomData,
    };
    match &endpoint.tls {
        None => drive(stream, service, &builder, &settings, stop).await,
        Some(acceptor) => {
            let handshake =
                tokio::time::timeout(settings.header_read_timeout, acceptor.accept(stream)).await;
            match handshake {
                Ok(Ok(tls)) => drive(tls, service, &builder, &settings, stop).await,
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
    builder: &auto::Builder<TokioExecutor>,
    settings: &TransportSettings,
    mut stop: watch::Receiver<bool>,
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
    let expired = activity.expired(settings.idle_timeout, settings.header_read_timeout);
    tokio::pin!(expired);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = super::stopped(&mut stop) => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
        why = &mut expired => {
            if why == Expired::SlowHead {
                // Nothing is owed to a client that has not finished asking.
                tracing::debug!(%peer, "closing a connection whose request head is too slow");
                return;
            }
            tracing::debug!(%peer, "closing a connection idle for the idle timeout");
            connection.as_mut().graceful_shutdown();
            // With nothing in flight there is nothing to lose; a client that has not even
            // finished the HTTP/2 preface would otherwise keep the connection open.
            tokio::time::timeout(settings.header_read_timeout, connection)
                .await
                .unwrap_or(Ok(()))
        }
    };
    if let Err(err) = result {
        tracing::debug!(%peer, error = %err, "connection ended with an error");
    }
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
    _wire: PhantomData<fn() -> W>,
}

type ConnFuture<B> =
    Pin<Box<dyn Future<Output = Result<Response<Tracked<B>>, axum::BoxError>> + Send>>;

impl<W: Wire, S: App<W>> hyper::service::Service<Request<Incoming>> for ConnService<W, S> {
    type Response = Response<Tracked<W::ResponseBody>>;
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
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let tracked = |response: Response<W::ResponseBody>| {
                response.map(|inner| Tracked::new(inner, busy))
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
                match tokio::time::timeout(timeout, Received::read(body, limit, &receiving)).await {
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
