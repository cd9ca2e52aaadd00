//! Per-client rate limiting with `tower_governor`: a token bucket per client.
//!
//! A client is its peer address, unless it sends an API key the server was told about
//! (`--rate-limit-keys-file`): only listed keys get buckets of their own. A key the server has
//! never seen is ignored and the request counts against its address, so a client cannot
//! escape its budget, nor grow the limiter's store, by sending a new key with every request.
//! IPv6 peers are keyed by their /64 prefix (one host usually holds a whole /64) and
//! IPv4-mapped IPv6 peers by their IPv4 address, for the same reason.
//!
//! The store keeps one bucket per client it has seen; [`prune`] drops the buckets that have
//! refilled (clients idle for at least one burst's worth of time) so that memory returns
//! after a burst of distinct clients.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
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

/// The longest API key accepted in the keys file; a longer header value is never a key.
const MAX_API_KEY_LEN: usize = 256;

/// How often buckets of idle clients are dropped from the limiter's store.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(10);

/// The API keys that get a bucket of their own, and the header that carries them.
#[derive(Debug, Clone)]
pub struct ApiKeys {
    pub header: HeaderName,
    known: Arc<HashSet<Arc<str>>>,
}

/// Why the keys file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ApiKeysError {
    #[error("--rate-limit-keys-file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "--rate-limit-keys-file {path}: line {line}: a key is at most {MAX_API_KEY_LEN} bytes"
    )]
    TooLong { path: PathBuf, line: usize },
    #[error("--rate-limit-keys-file {path}: no keys (one a line; # starts a comment)")]
    Empty { path: PathBuf },
}

impl ApiKeys {
    /// Reads one key a line; blank lines and lines starting with `#` are skipped.
    pub fn read(header: HeaderName, path: &Path) -> Result<Self, ApiKeysError> {
        let text = std::fs::read_to_string(path).map_err(|source| ApiKeysError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(header, &text, path)
    }

    fn parse(header: HeaderName, text: &str, path: &Path) -> Result<Self, ApiKeysError> {
        let mut known = HashSet::new();
        for (index, line) in text.lines().enumerate() {
            let key = line.trim();
            if key.is_empty() || key.starts_with('#') {
                continue;
            }
            if key.len() > MAX_API_KEY_LEN {
                return Err(ApiKeysError::TooLong {
                    path: path.to_path_buf(),
                    line: index + 1,
                });
            }
            known.insert(Arc::from(key));
        }
        if known.is_empty() {
            return Err(ApiKeysError::Empty {
                path: path.to_path_buf(),
            });
        }
        Ok(Self {
            header,
            known: Arc::new(known),
        })
    }

    /// A key set from memory (the server reads it from a file with [`ApiKeys::read`]).
    pub fn from_keys<'a>(header: HeaderName, keys: impl IntoIterator<Item = &'a str>) -> Self {
        Self {
            header,
            known: Arc::new(keys.into_iter().map(Arc::from).collect()),
        }
    }

    /// How many keys were listed.
    pub fn len(&self) -> usize {
        self.known.len()
    }

    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }

    /// The request's key, when it sent one of the listed keys.
    fn find(&self, headers: &axum::http::HeaderMap) -> Option<Arc<str>> {
        let sent = headers.get(&self.header)?.to_str().ok()?;
        self.known.get(sent).cloned()
    }
}

/// Who a request counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ClientKey {
    /// A listed API key (shared with the key set, not copied per request).
    ApiKey(Arc<str>),
    Ip(IpAddr),
    /// Neither: requests that arrived without a socket address (in-process tests) share one
    /// bucket.
    Unknown,
}

/// Finds a request's [`ClientKey`] on either server: axum's `ConnectInfo` or tonic's
/// `TcpConnectInfo` carries the peer address.
#[derive(Debug, Clone)]
pub struct ClientKeys {
    api_keys: Option<ApiKeys>,
}

impl KeyExtractor for ClientKeys {
    type Key = ClientKey;

    fn extract<T>(&self, request: &Request<T>) -> Result<ClientKey, GovernorError> {
        if let Some(key) = self
            .api_keys
            .as_ref()
            .and_then(|keys| keys.find(request.headers()))
        {
            return Ok(ClientKey::ApiKey(key));
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
        Ok(peer.map_or(ClientKey::Unknown, |ip| ClientKey::Ip(client_address(ip))))
    }
}

/// The address a peer is counted under: IPv4 as is (also when mapped into IPv6), IPv6 by its
/// /64 prefix.
fn client_address(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(Ipv6Addr::from(prefix))
            }
        },
    }
}

/// Rate-limit settings, checked: both numbers are at least 1.
#[derive(Debug, Clone)]
pub struct RateSettings {
    pub per_second: u32,
    pub burst: u32,
    /// Listed API keys with buckets of their own; everyone else is counted by address.
    pub api_keys: Option<ApiKeys>,
}

pub type Config = Arc<GovernorConfig<ClientKeys, NoOpMiddleware>>;

/// One limiter for the whole server: a client's budget covers both ports.
pub fn config(settings: &RateSettings) -> Option<Config> {
    let per_second = u64::from(settings.per_second.max(1));
    GovernorConfigBuilder::default()
        .period(Duration::from_nanos(1_000_000_000 / per_second))
        .burst_size(settings.burst.max(1))
        .key_extractor(ClientKeys {
            api_keys: settings.api_keys.clone(),
        })
        .finish()
        .map(Arc::new)
}

/// Drops the buckets of clients that have been idle long enough for theirs to refill, and
/// gives the memory back. Run every [`PRUNE_INTERVAL`].
pub fn prune(config: &Config) {
    let limiter = config.limiter();
    limiter.retain_recent();
    limiter.shrink_to_fit();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(text: &str) -> Result<ApiKeys, ApiKeysError> {
        ApiKeys::parse(
            HeaderName::from_static("x-api-key"),
            text,
            Path::new("keys.txt"),
        )
    }

    fn request(key: Option<&str>, peer: &str) -> Request<()> {
        let mut builder = Request::builder();
        if let Some(key) = key {
            builder = builder.header("x-api-key", key);
        }
        let mut request = builder.body(()).unwrap_or_default();
        let addr: SocketAddr = peer
            .parse()
            .unwrap_or_else(|_| SocketAddr::from(([0; 4], 0)));
        request.extensions_mut().insert(ConnectInfo(addr));
        request
    }

    #[test]
    fn only_listed_keys_get_a_bucket_of_their_own() -> Result<(), Box<dyn std::error::Error>> {
        let extractor = ClientKeys {
            api_keys: Some(keys("# team keys\nalpha\n\n  beta  \n")?),
        };
        let listed = extractor.extract(&request(Some("beta"), "10.0.0.1:5"))?;
        assert_eq!(listed, ClientKey::ApiKey(Arc::from("beta")));
        let ip = ClientKey::Ip("10.0.0.1".parse()?);
        for unknown in [Some("gamma"), Some(""), Some("# team keys"), None] {
            assert_eq!(extractor.extract(&request(unknown, "10.0.0.1:5"))?, ip);
        }
        Ok(())
    }

    #[test]
    fn a_keys_file_without_keys_or_with_an_overlong_one_is_refused() {
        assert!(matches!(
            keys("# nothing\n\n"),
            Err(ApiKeysError::Empty { .. })
        ));
        let long = "k".repeat(MAX_API_KEY_LEN + 1);
        assert!(matches!(
            keys(&format!("ok\n{long}\n")),
            Err(ApiKeysError::TooLong { line: 2, .. })
        ));
    }

    #[test]
    fn ipv6_peers_count_by_their_64_prefix_and_mapped_ipv4_as_ipv4(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let extractor = ClientKeys { api_keys: None };
        let a = extractor.extract(&request(None, "[2001:db8:1:2::1]:80"))?;
        let b = extractor.extract(&request(None, "[2001:db8:1:2:ffff::9]:80"))?;
        let other = extractor.extract(&request(None, "[2001:db8:1:3::1]:80"))?;
        assert_eq!(a, b);
        assert_ne!(a, other);
        let mapped = extractor.extract(&request(None, "[::ffff:127.0.0.1]:80"))?;
        assert_eq!(mapped, ClientKey::Ip("127.0.0.1".parse()?));
        Ok(())
    }

    #[test]
    fn pruning_drops_the_buckets_of_idle_clients() -> Result<(), Box<dyn std::error::Error>> {
        let config = config(&RateSettings {
            per_second: 1_000_000,
            burst: 1,
            api_keys: None,
        })
        .ok_or("a valid rate")?;
        let limiter = config.limiter();
        for n in 0..10_000u32 {
            let _ = limiter.check_key(&ClientKey::Ip(IpAddr::from(n.to_be_bytes())));
        }
        assert_eq!(limiter.len(), 10_000);
        // At a million a second a bucket of one refills within a microsecond.
        std::thread::sleep(Duration::from_millis(5));
        prune(&config);
        assert_eq!(limiter.len(), 0);
        Ok(())
    }
}
