//! The webhook's serving certificate: read from files and re-read when they change,
//! or handed over by the self-managed certificate task.
//!
//! With files, every new connection re-reads the (small) certificate and key files
//! and compares their bytes with the loaded ones, so a rotation (cert-manager
//! rewriting the Secret volume) takes effect on the next connection without a
//! restart, however coarse the file system's timestamps. A pair that does not load
//! (half-written, key and certificate not matching) is logged and counted, and the
//! previous certificate stays in use.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::watch;

use super::metrics::WebhookCounters;

/// Why a certificate could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A certificate or key file could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The certificate PEM holds no certificate, or cannot be parsed.
    #[error("no certificate in {what}")]
    NoCertificate {
        /// The file or Secret key it came from.
        what: String,
    },
    /// The key PEM holds no private key, or cannot be parsed.
    #[error("no private key in {what}")]
    NoKey {
        /// The file or Secret key it came from.
        what: String,
    },
    /// rustls refused the pair (unsupported key type, key not matching the
    /// certificate).
    #[error("unusable certificate and key")]
    Rustls(#[source] rustls::Error),
    /// No certificate has been loaded yet (self-managed mode before its first
    /// Secret read).
    #[error("no serving certificate yet")]
    NotReady,
}

impl TlsError {
    /// A short, static label for metrics and logs.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Read { .. } => "read",
            Self::NoCertificate { .. } => "no_certificate",
            Self::NoKey { .. } => "no_key",
            Self::Rustls(_) => "rustls",
            Self::NotReady => "not_ready",
        }
    }
}

/// The crypto provider nudge uses everywhere (ring), explicitly, so that no
/// process-wide default has to be installed.
pub fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A rustls server configuration from PEM certificate chain and key. Offers
/// HTTP/1.1 by ALPN (the kube-apiserver falls back to it).
pub fn server_config(
    cert_pem: &[u8],
    key_pem: &[u8],
    what: &str,
) -> Result<Arc<ServerConfig>, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|_| TlsError::NoCertificate {
            what: what.to_owned(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            what: what.to_owned(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| TlsError::NoKey {
        what: what.to_owned(),
    })?;
    let mut config = ServerConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Rustls)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(TlsError::Rustls)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Where the serving certificate comes from.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum CertificateSource {
    /// PEM files, re-read per connection.
    Files(Arc<FileCertificate>),
    /// The self-managed certificate task publishes each new configuration here.
    Managed(watch::Receiver<Option<Arc<ServerConfig>>>),
}

impl CertificateSource {
    /// Certificate and key files.
    pub fn files(
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
        counters: Arc<WebhookCounters>,
    ) -> Self {
        Self::Files(Arc::new(FileCertificate {
            cert: cert.into(),
            key: key.into(),
            counters,
            loaded: Mutex::new(None),
        }))
    }

    /// The configuration to use for a new connection.
    pub async fn current(&self) -> Result<Arc<ServerConfig>, TlsError> {
        match self {
            Self::Files(files) => files.current().await,
            Self::Managed(rx) => rx.borrow().clone().ok_or(TlsError::NotReady),
        }
    }
}

/// A certificate and key in PEM files, reloaded when their content changes.
pub struct FileCertificate {
    cert: PathBuf,
    key: PathBuf,
    counters: Arc<WebhookCounters>,
    loaded: Mutex<Option<Loaded>>,
}

impl std::fmt::Debug for FileCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileCertificate")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

struct Loaded {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    config: Arc<ServerConfig>,
}

impl FileCertificate {
    /// The configuration for the files' current content; the last good one when the
    /// files do not load now.
    pub async fn current(&self) -> Result<Arc<ServerConfig>, TlsError> {
        let read = async {
            let cert = read(&self.cert).await?;
            let key = read(&self.key).await?;
            Ok::<_, TlsError>((cert, key))
        };
        let fresh = match read.await {
            Ok((cert_pem, key_pem)) => {
                if let Some(loaded) = self.loaded().as_ref()
                    && loaded.cert_pem == cert_pem
                    && loaded.key_pem == key_pem
                {
                    return Ok(loaded.config.clone());
                }
                server_config(&cert_pem, &key_pem, &self.cert.display().to_string()).map(|config| {
                    Loaded {
                        cert_pem,
                        key_pem,
                        config,
                    }
                })
            }
            Err(error) => Err(error),
        };
        match fresh {
            Ok(loaded) => {
                WebhookCounters::bump(&self.counters.certificate_loads);
                tracing::info!(cert = %self.cert.display(), "serving certificate loaded");
                let config = loaded.config.clone();
                *self.loaded() = Some(loaded);
                Ok(config)
            }
            Err(error) => {
                WebhookCounters::bump(&self.counters.certificate_load_failures);
                let previous = self.loaded().as_ref().map(|l| l.config.clone());
                match previous {
                    Some(config) => {
                        tracing::warn!(%error, category = error.category(), "cannot load the new certificate; keeping the previous one");
                        Ok(config)
                    }
                    None => Err(error),
                }
            }
        }
    }

    fn loaded(&self) -> std::sync::MutexGuard<'_, Option<Loaded>> {
        self.loaded.lock().unwrap_or_else(|e| e.into_inner())
    }
}

async fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    tokio::fs::read(path)
        .await
        .map_err(|source| TlsError::Read {
            path: path.to_owned(),
            source,
        })
}
