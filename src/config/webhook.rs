//! `[webhook]`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Problem, duration, is_dns_label, is_dns_subdomain};

/// `[webhook]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct WebhookConfig {
    /// Whether `nudge run` serves the admission webhook. Off by default (it needs a
    /// certificate and a MutatingWebhookConfiguration); the install manifests in
    /// `deploy/` turn it on with the self-managed certificate.
    pub enabled: bool,
    /// HTTPS listen address.
    pub bind: SocketAddr,
    /// PEM certificate chain, re-read when it changes (e.g. cert-manager's
    /// `tls.crt` mounted from a Secret). Unused with `self_managed_certificate`.
    pub cert_file: PathBuf,
    /// PEM private key, re-read with the certificate.
    pub key_file: PathBuf,
    /// Generate a CA and serving certificate, keep them in `secret_name` and patch
    /// the `caBundle` of `configuration_name` (no cert-manager needed).
    pub self_managed_certificate: bool,
    /// The MutatingWebhookConfiguration whose `caBundle` nudge patches.
    pub configuration_name: String,
    /// Secret in `kubernetes.namespace` holding the self-managed certificate.
    pub secret_name: String,
    /// The Service in front of the webhook; the self-managed certificate is valid
    /// for `<service_name>.<namespace>.svc` and its other in-cluster names.
    pub service_name: String,
    /// More names (DNS names or IP addresses) for the self-managed certificate.
    pub extra_names: Vec<String>,
    /// Lifetime of a self-managed serving certificate.
    #[serde(with = "duration")]
    pub certificate_validity: Duration,
    /// Renew the self-managed certificate this long before it expires.
    #[serde(with = "duration")]
    pub renew_before: Duration,
    /// Total time a review may spend reading inputs nudge has not observed yet;
    /// outputs whose inputs are not read in time are left as they are. Keep it
    /// below the configuration's `timeoutSeconds`.
    #[serde(with = "duration")]
    pub observe_timeout: Duration,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            bind: SocketAddr::from(([0, 0, 0, 0], 8443)),
            cert_file: PathBuf::from("/etc/nudge/webhook/tls.crt"),
            key_file: PathBuf::from("/etc/nudge/webhook/tls.key"),
            self_managed_certificate: false,
            configuration_name: "nudge".to_owned(),
            secret_name: "nudge-webhook-tls".to_owned(),
            service_name: "nudge-webhook".to_owned(),
            extra_names: Vec::new(),
            certificate_validity: Duration::from_secs(365 * 24 * 3600),
            renew_before: Duration::from_secs(30 * 24 * 3600),
            observe_timeout: Duration::from_secs(2),
        }
    }
}

impl WebhookConfig {
    pub(super) fn problem(&self) -> Problem {
        for (key, name) in [
            ("webhook.configuration_name", &self.configuration_name),
            ("webhook.secret_name", &self.secret_name),
        ] {
            if !is_dns_subdomain(name) {
                return Some((key, format!("{name:?} is not an object name")));
            }
        }
        if !is_dns_label(&self.service_name) {
            return Some((
                "webhook.service_name",
                format!("{:?} is not a Service name", self.service_name),
            ));
        }
        if self.observe_timeout.is_zero() {
            return Some(("webhook.observe_timeout", "must be above 0".to_owned()));
        }
        if self.renew_before >= self.certificate_validity {
            return Some((
                "webhook.renew_before",
                "must be shorter than webhook.certificate_validity".to_owned(),
            ));
        }
        None
    }
}
