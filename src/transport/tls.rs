//! TLS for the HTTP and gRPC ports, with rustls: a certificate chain and key from PEM files
//! (or PEM text held in a TF Serving SSLConfig file), and, when a client CA is given, client
//! certificates required and checked against it.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// The PEM texts, as the command line names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// `--tls-cert`: the server's certificate chain, leaf first.
    pub cert: Pem,
    /// `--tls-key`: its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: Pem,
    /// `--tls-client-ca`: when set, every client must present a certificate this CA issued.
    pub client_ca: Option<Pem>,
}

/// Where a PEM text is: a file of its own, or a field of a file that holds it inline (TF
/// Serving's SSLConfig).
#[derive(Clone, PartialEq, Eq)]
pub enum Pem {
    File(PathBuf),
    Inline {
        file: PathBuf,
        field: &'static str,
        text: String,
    },
}

impl Pem {
    /// Where it is, for messages: the file, or the file and its field.
    fn origin(&self) -> PathBuf {
        match self {
            Self::File(path) => path.clone(),
            Self::Inline { file, field, .. } => {
                PathBuf::from(format!("{} ({field})", file.display()))
            }
        }
    }
}

/// Never the text: it may be a private key, and settings are logged.
impl std::fmt::Debug for Pem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pem({})", self.origin().display())
    }
}

impl From<PathBuf> for Pem {
    fn from(path: PathBuf) -> Self {
        Self::File(path)
    }
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
    /// The certificate does not go with the key, or rustls cannot read it (it takes X.509 v3
    /// certificates only).
    #[error("--tls-cert {} with --tls-key {}: {source}", cert.display(), key.display())]
    CertifiedKey {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: rustls::Error,
    },
}

fn certificates(flag: &'static str, pem: &Pem) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let path = pem.origin();
    let error = |source| TlsError::Pem {
        flag,
        path: path.clone(),
        source,
    };
    let certs = match pem {
        Pem::File(file) => CertificateDer::pem_file_iter(file)
            .map_err(error)?
            .collect::<Result<Vec<_>, _>>(),
        Pem::Inline { text, .. } => {
            CertificateDer::pem_slice_iter(text.as_bytes()).collect::<Result<Vec<_>, _>>()
        }
    }
    .map_err(error)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { flag, path });
    }
    Ok(certs)
}

fn private_key(pem: &Pem) -> Result<PrivateKeyDer<'static>, TlsError> {
    match pem {
        Pem::File(file) => PrivateKeyDer::from_pem_file(file),
        Pem::Inline { text, .. } => PrivateKeyDer::from_pem_slice(text.as_bytes()),
    }
    .map_err(|source| TlsError::Pem {
        flag: "--tls-key",
        path: pem.origin(),
        source,
    })
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
        let key = private_key(&files.key)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?;
        let builder = match &files.client_ca {
            None => builder.with_no_client_auth(),
            Some(pem) => {
                let mut roots = RootCertStore::empty();
                for cert in certificates("--tls-client-ca", pem)? {
                    roots.add(cert).map_err(|source| TlsError::ClientCa {
                        path: pem.origin(),
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
        let config =
            builder
                .with_single_cert(chain, key)
                .map_err(|source| TlsError::CertifiedKey {
                    cert: files.cert.origin(),
                    key: files.key.origin(),
                    source,
                })?;
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
            cert: dir.join("absent.pem").into(),
            key: dir.join("absent.key").into(),
            client_ca: None,
        };
        let message = Tls::load(&missing)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(message.starts_with("--tls-cert"), "{message}");
        let no_cert = TlsFiles {
            cert: empty.clone().into(),
            key: empty.into(),
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
