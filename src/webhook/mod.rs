//! The mutating admission webhook (design §6).
//!
//! On CREATE and UPDATE of Deployments, StatefulSets and DaemonSets it answers with
//! a JSON patch that sets nudge's stamp, computed by the controller's own code, so
//! that a new workload starts stamped (no second rollout a moment later) and a
//! GitOps re-apply that drops nudge's annotations gets them back in the same
//! request. It never denies.
//!
//! - `admission`: the review handler ([`Admission`]); the decision and the JSON
//!   patch are the stamp module's ([`crate::stamp::decide_admission`],
//!   [`crate::stamp::admission_patch`]).
//! - `server`: HTTPS on its own port (rustls, HTTP/1.1).
//! - `tls`: serving certificate from files, re-read when they change.
//! - `certificates`: the self-managed CA and certificate in a Secret, and the
//!   `caBundle` patch.
//! - `metrics`: counters by result.

mod admission;
mod certificates;
mod metrics;
mod server;
mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use admission::{Admission, AdmissionParts, AdmissionSettings, ReviewAnswer};
pub use certificates::{
    CertificateBundle, CertificateError, ManagedCertificateSettings,
    generate as generate_certificate,
};
pub use metrics::{ReviewResult, WebhookCounters};
pub use tls::{CertificateSource, TlsError, crypto_provider};

use crate::config::WebhookConfig;

/// Why the webhook could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The configured address.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// A running webhook server (and, in self-managed mode, its certificate task).
#[derive(Debug)]
pub struct RunningWebhook {
    /// The address it listens on (the configured one, with the actual port).
    pub addr: SocketAddr,
    /// Its counters.
    pub counters: Arc<WebhookCounters>,
    tasks: JoinSet<()>,
}

impl RunningWebhook {
    /// Waits until every task has stopped (after the shutdown token is cancelled).
    pub async fn join(mut self) {
        while self.tasks.join_next().await.is_some() {}
    }
}

/// The names a self-managed certificate is made for: the Service's in-cluster
/// DNS names, then `extra_names`.
pub fn certificate_names(config: &WebhookConfig, namespace: &str) -> Vec<String> {
    let service = &config.service_name;
    let mut names = vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        format!("{service}.{namespace}"),
        service.clone(),
    ];
    for extra in &config.extra_names {
        if !names.contains(extra) {
            names.push(extra.clone());
        }
    }
    names
}

/// Binds the webhook's port and starts serving `admission` until `shutdown` is
/// cancelled; with `self_managed_certificate`, also starts the certificate task.
/// `namespace` is nudge's own namespace, `prefix` its annotation prefix.
pub async fn start(
    config: &WebhookConfig,
    admission: Arc<Admission>,
    client: kube::Client,
    namespace: &str,
    prefix: &str,
    shutdown: CancellationToken,
) -> Result<RunningWebhook, WebhookError> {
    let listener = TcpListener::bind(config.bind)
        .await
        .map_err(|source| WebhookError::Bind {
            addr: config.bind,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| WebhookError::Bind {
        addr: config.bind,
        source,
    })?;
    let counters = admission.counters().clone();
    let mut tasks = JoinSet::new();
    let certificates = if config.self_managed_certificate {
        let (tx, rx) = watch::channel(None);
        let settings = ManagedCertificateSettings {
            namespace: namespace.to_owned(),
            secret_name: config.secret_name.clone(),
            configuration_name: config.configuration_name.clone(),
            names: certificate_names(config, namespace),
            validity: config.certificate_validity,
            renew_before: config.renew_before,
            prefix: prefix.to_owned(),
        };
        let span = tracing::info_span!("webhook_certificate", secret = %config.secret_name);
        tasks.spawn(
            certificates::run(client, settings, tx, counters.clone(), shutdown.clone())
                .instrument(span),
        );
        CertificateSource::Managed(rx)
    } else {
        CertificateSource::files(&config.cert_file, &config.key_file, counters.clone())
    };
    tracing::info!(%addr, self_managed = config.self_managed_certificate, "admission webhook listening");
    let span = tracing::info_span!("webhook", %addr);
    tasks.spawn(server::serve(listener, certificates, admission, shutdown).instrument(span));
    Ok(RunningWebhook {
        addr,
        counters,
        tasks,
    })
}
