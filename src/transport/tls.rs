//! TLS for the HTTP and gRPC ports, with rustls: a certificate chain and key from PEM files,
//! and, when a client CA is given, client certificates required and checked against it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// The PEM files, as the command line names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// `--tls-cert`: the server's certificate chain, leaf first.
    pub cert: PathBuf,
    /// `--tls-key`: its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// `--tls-client-ca`: when set, every client must present a certificate this CA issued.
    pub client_ca: Option<PathBuf>,
}

/// Why TLS could not be set up. Raised at start-up only; nothing of it reaches a client.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{flag} {}: {source}", path.display())]
    Pem {
        flag: &'static str,
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{flag} {}: no certificate in the file", path.display())]
    NoCertificate { flag: &'static str, path: PathBuf },
    #[error("--tls-client-ca {}: {source}", path.display())]
    ClientCa {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("--tls-client-ca: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    #[error("--tls-cert / --tls-key: {0}")]
    Config(#[from] rustls::Error),
}

fn certificates(flag: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = |source| TlsError::Pem {
        flag,
        path: path.to_path_buf(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(pem)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            flag,
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// The server side of TLS, from the files; shared by both ports, which differ only in the
/// application protocols they offer.
#[derive(Clone)]
pub struct Tls {
    config: Arc<ServerConfig>,
}

impl Tls {
    pub fn load(files: &TlsFiles) -> Result<Self, TlsError> {
        let chain = certificates("--tls-cert", &files.cert)?;
        let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|source| TlsError::Pem {
            flag: "--tls-key",
            path: files.key.clone(),
            source,
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?;
        let builder = match &files.client_ca {
            None => builder.with_no_client_auth(),
            Some(path) => {
                let mut roots = RootCertStore::empty();
                for cert in certificates("--tls-client-ca", path)? {
                    roots.add(cert).map_err(|source| TlsError::ClientCa {
                        path: path.clone(),
                        source,
                    })?;
                }
                // Anonymous clients are refused in the handshake.
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let config = builder.with_single_cert(chain, key)?;
        Ok(Self {
            config: Arc::new(config),
        })
    }

    /// An acceptor that offers `alpn` (preferred first).
    pub fn acceptor(&self, alpn: &[&[u8]]) -> TlsAcceptor {
        let mut config = (*self.config).clone();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        TlsAcceptor::from(Arc::new(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_empty_files_name_the_flag() {
        let dir = std::env::temp_dir().join(format!("tensorport-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "").unwrap_or_default();
        let missing = TlsFiles {
            cert: dir.join("absent.pem"),
            key: dir.join("absent.key"),
            client_ca: None,
        };
        let message = Tls::load(&missing)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(message.starts_with("--tls-cert"), "{message}");
        let no_cert = TlsFiles {
            cert: empty.clone(),
            key: empty,
            client_ca: None,
        };
        let err = Tls::load(&no_cert).err();
        assert!(
            matches!(
                err,
                Some(TlsError::NoCertificate {
                    flag: "--tls-cert",
                    ..
                })
            ),
            "{err:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
