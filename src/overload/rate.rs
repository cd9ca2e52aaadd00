//! Per-client rate limiting with `tower_governor`: a token bucket per client, keyed by the
//! API-key header when one is configured and sent, else by the peer's IP address.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::{HeaderName, Request};
use governor::middleware::NoOpMiddleware;
use tonic::transport::server::TcpConnectInfo;
use tower_governor::governor::{GovernorConfig, GovernorConfigBuilder};
use tower_governor::key_extractor::KeyExtractor;
use tower_governor::{GovernorError, GovernorLayer};

use super::refusal::{Refusal, Transport};

/// The longest API key used as a key as sent; longer ones are refused as a key (the client
/// falls back to its IP address), so a client cannot make the limiter store huge keys.
const MAX_API_KEY_LEN: usize = 256;

/// Who a request counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ClientKey {
    ApiKey(String),
    Ip(IpAddr),
    /// Neither: requests that arrived without a socket address (in-process tests) share one
    /// bucket.
    Unknown,
}

/// Finds a request's [`ClientKey`] on either server: axum's `ConnectInfo` or tonic's
/// `TcpConnectInfo` carries the peer address.
#[derive(Debug, Clone)]
pub struct ClientKeys {
    api_key_header: Option<HeaderName>,
}

impl KeyExtractor for ClientKeys {
    type Key = ClientKey;

    fn extract<T>(&self, request: &Request<T>) -> Result<ClientKey, GovernorError> {
        let api_key = self
            .api_key_header
            .as_ref()
            .and_then(|name| request.headers().get(name))
            .and_then(|value| value.to_str().ok())
            .filter(|key| !key.is_empty() && key.len() <= MAX_API_KEY_LEN);
        if let Some(key) = api_key {
            return Ok(ClientKey::ApiKey(key.to_owned()));
        }
        let extensions = request.extensions();
        let peer = extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.ip())
            .or_else(|| {
                extensions
                    .get::<TcpConnectInfo>()
                    .and_then(TcpConnectInfo::remote_addr)
                    .map(|addr| addr.ip())
            });
        Ok(peer.map_or(ClientKey::Unknown, ClientKey::Ip))
    }
}

/// Rate-limit settings, checked: both numbers are at least 1.
#[derive(Debug, Clone)]
pub struct RateSettings {
    pub per_second: u32,
    pub burst: u32,
    pub api_key_header: Option<HeaderName>,
}

pub type Config = Arc<GovernorConfig<ClientKeys, NoOpMiddleware>>;

/// One limiter for the whole server: a client's budget covers both ports.
pub fn config(settings: &RateSettings) -> Option<Config> {
    let per_second = u64::from(settings.per_second.max(1));
    GovernorConfigBuilder::default()
        .period(Duration::from_nanos(1_000_000_000 / per_second))
        .burst_size(settings.burst.max(1))
        .key_extractor(ClientKeys {
            api_key_header: settings.api_key_header.clone(),
        })
        .finish()
        .map(Arc::new)
}

/// The governor layer, answering in the transport's own refusal shape.
pub fn layer<B>(config: &Config) -> GovernorLayer<ClientKeys, NoOpMiddleware, B>
where
    B: Transport + 'static,
{
    GovernorLayer::new(config.clone()).error_handler(|err| {
        let retry_after_s = match err {
            GovernorError::TooManyRequests { wait_time, .. } => wait_time,
            // The key extractor above never fails; if it did, back off a second.
            GovernorError::UnableToExtractKey | GovernorError::Other { .. } => 1,
        };
        B::refusal(&Refusal::RateLimited { retry_after_s })
    })
}
