//! Where the collector is and how a connection to it is made: its address from the URL, TCP,
//! and for an `https://` collector TLS over it (rustls with ring, trusting the CA file that
//! `OTEL_EXPORTER_OTLP_CERTIFICATE` names or else the system's roots, and presenting a client
//! certificate when one is configured).

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::uri::{PathAndQuery, Scheme};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use super::env::CollectorTls;
use super::export_error::{ExportError, SendError};

/// A collector's address, and the TLS to speak to it when its URL is `https://`.
#[derive(Clone)]
pub struct Collector {
    /// The host to dial, without an IPv6 address's brackets.
    host: String,
    port: u16,
    /// `host[:port]` as the URL wrote it: the `Host` header, and gRPC's `:authority`.
    authority: String,
    /// The request target, in origin form.
    path: PathAndQuery,
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

impl Collector {
    /// The collector at `url`, spoken to over `alpn` when it is `https://`.
    pub fn parse(url: &str, files: &CollectorTls, alpn: &[u8]) -> Result<Self, ExportError> {
        let fail = |why| ExportError::Url {
            url: url.to_owned(),
            why,
        };
        let uri: http::Uri = url.parse().map_err(|source| ExportError::Uri {
            url: url.to_owned(),
            source,
        })?;
        let secure = match uri.scheme() {
            Some(s) if *s == Scheme::HTTP => false,
            Some(s) if *s == Scheme::HTTPS => true,
            _ => return Err(fail("the scheme is neither http nor https")),
        };
        let authority = uri.authority().ok_or_else(|| fail("no host"))?;
        if authority.as_str().contains('@') {
            return Err(fail("user information is not sent to a collector"));
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let port = authority
            .port_u16()
            .unwrap_or(if secure { 443 } else { 80 });
        let tls = if secure {
            let name = ServerName::try_from(host.to_owned())
                .map_err(|_| fail("the host is no DNS name or IP address"))?;
            Some((client_config(files, alpn)?, name))
        } else {
            None
        };
        Ok(Self {
            host: host.to_owned(),
            port,
            authority: authority.as_str().to_owned(),
            path: uri
                .path_and_query()
                .cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/")),
            tls,
        })
    }

    pub fn authority(&self) -> &str {
        &self.authority
    }

    pub fn path(&self) -> &PathAndQuery {
        &self.path
    }

    /// `http(s)://authority`, the origin gRPC requests are made against.
    pub fn origin(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.authority)
    }

    /// A new connection, TLS done when the collector is `https://`.
    pub async fn connect(&self) -> Result<Stream, SendError> {
        let tcp = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(SendError::Connect)?;
        // Exports are single writes followed by a wait for the answer.
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            None => Ok(Stream::Plain(tcp)),
            Some((connector, name)) => connector
                .connect(name.clone(), tcp)
                .await
                .map(|tls| Stream::Tls(Box::new(tls)))
                .map_err(SendError::Handshake),
        }
    }
}

fn client_config(files: &CollectorTls, alpn: &[u8]) -> Result<TlsConnector, ExportError> {
    let mut roots = RootCertStore::empty();
    match &files.ca {
        Some(path) => {
            for cert in certificates("CA file", path)? {
                roots.add(cert).map_err(|source| ExportError::Certificate {
                    path: path.clone(),
                    source,
                })?;
            }
        }
        None => {
            // Unreadable entries in the system store are skipped; none at all is an error.
            let (added, _) =
                roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            if added == 0 {
                return Err(ExportError::NoRoots);
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let mut config = match (&files.client_cert, &files.client_key) {
        (Some(cert), Some(key)) => {
            let chain = certificates("client certificate", cert)?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|source| ExportError::Pem {
                what: "client key",
                path: key.clone(),
                source,
            })?;
            builder.with_client_auth_cert(chain, key)?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

fn certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, ExportError> {
    let error = |source| ExportError::Pem {
        what,
        path: path.to_owned(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(error)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(error)?;
    if certs.is_empty() {
        return Err(ExportError::NoCertificate {
            what,
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

/// A connection to the collector, plain or TLS.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<Collector, ExportError> {
        Collector::parse(url, &CollectorTls::default(), b"http/1.1")
    }

    #[test]
    fn the_target_is_origin_form_and_the_port_defaults_by_scheme() {
        let c = parse("http://collector:4318/v1/traces").unwrap();
        assert_eq!((c.host.as_str(), c.port), ("collector", 4318));
        assert_eq!(c.authority(), "collector:4318");
        assert_eq!(c.path().as_str(), "/v1/traces");
        let c = parse("http://[::1]/v1/traces?x=1").unwrap();
        assert_eq!((c.host.as_str(), c.port), ("::1", 80));
        assert_eq!(c.path().as_str(), "/v1/traces?x=1");
        assert_eq!(parse("http://collector").unwrap().path().as_str(), "/");
    }

    #[test]
    fn other_schemes_and_user_information_are_refused() {
        for url in [
            "ftp://c/v1/traces",
            "c:4318/v1/traces",
            "http://u:p@c/v1/traces",
        ] {
            assert!(parse(url).is_err(), "{url}");
        }
    }

    #[test]
    fn a_missing_ca_file_is_named() {
        let files = CollectorTls {
            ca: Some("/nonexistent/ca.pem".into()),
            ..CollectorTls::default()
        };
        let err = Collector::parse("https://c/v1/traces", &files, b"http/1.1")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("/nonexistent/ca.pem"), "{err}");
    }
}
