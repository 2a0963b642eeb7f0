//! Self-managed serving certificate (`webhook.self_managed_certificate = true`),
//! so cert-manager is optional.
//!
//! nudge generates a CA and a serving certificate signed by it ([`generate`]), and
//! keeps both in a Secret in its own namespace so that every replica serves the same
//! certificate: the first replica creates the Secret, a replica that loses the
//! create race (409) reads the winner's. Each replica re-reads the Secret every
//! minute; when the serving certificate is within `renew_before` of expiry, one
//! replica renews it (an optimistic-concurrency update; the losers read the
//! winner's), reusing the CA so the `caBundle` stays valid. The CA (ten years) is
//! replaced only when it would expire before a new serving certificate; between the
//! Secret update and the `caBundle` patch the apiserver may then fail calls, which
//! `failurePolicy: Ignore` turns into unstamped admissions that the controller
//! stamps a moment later.
//!
//! Every replica keeps the `caBundle` of every webhook in the configured
//! MutatingWebhookConfiguration equal to the CA (read, compare, update).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::ServerConfig;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::metrics::WebhookCounters;
use super::tls::{TlsError, server_config};

/// Lifetime of a generated CA.
const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// Certificates are valid from this long before their creation (clock skew).
const BACKDATE: Duration = Duration::from_secs(3600);
/// Common name of the generated CA.
const CA_NAME: &str = "nudge-webhook-ca";
/// How often replicas re-read the Secret and the webhook configuration.
const CHECK_INTERVAL: Duration = Duration::from_secs(60);
/// Longest wait after a failed attempt.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Secret keys.
const TLS_CRT: &str = "tls.crt";
const TLS_KEY: &str = "tls.key";
const CA_CRT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";

/// Why a certificate could not be generated, stored or published.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CertificateError {
    /// rcgen could not generate a key or sign a certificate (e.g. a SAN that is
    /// neither an IP address nor a valid DNS name).
    #[error("cannot generate the certificate")]
    Generate(#[from] rcgen::Error),
    /// The generated or stored pair does not load as a serving certificate.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// Reading or writing the Secret or the MutatingWebhookConfiguration failed.
    #[error("{action} failed")]
    Api {
        /// What was being done, e.g. `create Secret nudge-system/nudge-webhook-tls`.
        action: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// Other replicas kept changing the Secret between our read and write.
    #[error("{what} kept changing under concurrent writers")]
    Contended {
        /// The Secret.
        what: String,
    },
}

impl CertificateError {
    /// A short, static label for metrics and logs.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Generate(_) => "generate",
            Self::Tls(_) => "tls",
            Self::Api { .. } => "api",
            Self::Contended { .. } => "contended",
        }
    }

    fn api(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let action = action.into();
        move |source| Self::Api { action, source }
    }
}

/// A CA and a serving certificate signed by it, all PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct CertificateBundle {
    /// The CA certificate (what goes into `caBundle`).
    pub ca_cert_pem: String,
    /// The CA's private key.
    pub ca_key_pem: String,
    /// The serving certificate.
    pub cert_pem: String,
    /// The serving certificate's private key.
    pub key_pem: String,
    /// The names (DNS names and IP addresses) the serving certificate is valid for.
    pub names: Vec<String>,
    /// When the CA expires.
    pub ca_not_after: Timestamp,
    /// When the serving certificate expires.
    pub not_after: Timestamp,
}

impl std::fmt::Debug for CertificateBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateBundle")
            .field("names", &self.names)
            .field("ca_not_after", &self.ca_not_after)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

impl CertificateBundle {
    /// Whether the serving certificate must be replaced at `now`: it expires within
    /// `renew_before`, or was made for other names.
    pub fn needs_renewal(&self, names: &[String], renew_before: Duration, now: Timestamp) -> bool {
        self.names != names || seconds_left(self.not_after, now) <= renew_before.as_secs() as i64
    }

    /// When the serving certificate becomes due for renewal.
    pub fn renewal_due_in(&self, renew_before: Duration, now: Timestamp) -> Duration {
        let left = seconds_left(self.not_after, now) - renew_before.as_secs() as i64;
        Duration::from_secs(u64::try_from(left).unwrap_or(0))
    }
}

fn seconds_left(until: Timestamp, now: Timestamp) -> i64 {
    until.as_second().saturating_sub(now.as_second())
}

/// Generates a serving certificate for `names` valid for `validity` from `now`,
/// signed by `ca` when given (and still valid long enough), else by a new CA.
pub fn generate(
    names: &[String],
    validity: Duration,
    ca: Option<&CertificateBundle>,
    now: SystemTime,
) -> Result<CertificateBundle, CertificateError> {
    let not_before = time::OffsetDateTime::from(now) - BACKDATE;
    let not_after = time::OffsetDateTime::from(now) + validity;
    let now_ts = timestamp(now);
    let reusable =
        ca.filter(|ca| seconds_left(ca.ca_not_after, now_ts) > validity.as_secs() as i64);
    let (ca_params, ca_key, ca_cert_pem, ca_not_after) = match reusable {
        Some(ca) => (
            ca_params(not_before, not_before + CA_VALIDITY),
            KeyPair::from_pem(&ca.ca_key_pem)?,
            ca.ca_cert_pem.clone(),
            ca.ca_not_after,
        ),
        None => {
            let key = KeyPair::generate()?;
            let params = ca_params(not_before, time::OffsetDateTime::from(now) + CA_VALIDITY);
            let cert = params.self_signed(&key)?;
            (params, key, cert.pem(), timestamp(now + CA_VALIDITY))
        }
    };
    let ca_key_pem = ca_key.serialize_pem();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(names.to_vec())?;
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        names.first().map_or("nudge-webhook", String::as_str),
    );
    leaf.distinguished_name = dn;
    leaf.is_ca = IsCa::ExplicitNoCa;
    leaf.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.not_before = not_before;
    leaf.not_after = not_after;
    let cert = leaf.signed_by(&key, &issuer)?;
    Ok(CertificateBundle {
        ca_cert_pem,
        ca_key_pem,
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        names: names.to_vec(),
        ca_not_after,
        not_after: timestamp(now + validity),
    })
}

fn ca_params(
    not_before: time::OffsetDateTime,
    not_after: time::OffsetDateTime,
) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_NAME);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = not_before;
    params.not_after = not_after;
    params
}

fn timestamp(at: SystemTime) -> Timestamp {
    Timestamp::try_from(at).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// Where the self-managed certificate lives and what it is for.
#[derive(Debug, Clone)]
pub struct ManagedCertificateSettings {
    /// nudge's namespace (holds the Secret).
    pub namespace: String,
    /// The Secret holding CA and serving certificate.
    pub secret_name: String,
    /// The MutatingWebhookConfiguration whose `caBundle`s are kept up to date.
    pub configuration_name: String,
    /// DNS names and IP addresses of the serving certificate.
    pub names: Vec<String>,
    /// Lifetime of a serving certificate.
    pub validity: Duration,
    /// Renew this long before expiry.
    pub renew_before: Duration,
    /// nudge's annotation prefix (for the Secret's bookkeeping annotations).
    pub prefix: String,
}

/// Keeps the self-managed certificate: makes sure the Secret exists and is fresh,
/// publishes its serving certificate on `publish`, keeps the `caBundle` patched;
/// until `shutdown`.
pub async fn run(
    client: Client,
    settings: ManagedCertificateSettings,
    publish: watch::Sender<Option<Arc<ServerConfig>>>,
    counters: Arc<WebhookCounters>,
    shutdown: CancellationToken,
) {
    let mut published: Option<String> = None;
    let mut backoff = Duration::from_secs(1);
    loop {
        let wait = match reconcile(&client, &settings, &publish, &mut published, &counters).await {
            Ok(next) => {
                backoff = Duration::from_secs(1);
                next
            }
            Err(error) => {
                tracing::warn!(%error, category = error.category(), retry_in = ?backoff, "self-managed certificate not in order");
                let wait = backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                wait
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// One pass; returns how long to wait before the next.
async fn reconcile(
    client: &Client,
    settings: &ManagedCertificateSettings,
    publish: &watch::Sender<Option<Arc<ServerConfig>>>,
    published: &mut Option<String>,
    counters: &WebhookCounters,
) -> Result<Duration, CertificateError> {
    let bundle = ensure_secret(client, settings).await?;
    if published.as_deref() != Some(bundle.cert_pem.as_str()) {
        match server_config(
            bundle.cert_pem.as_bytes(),
            bundle.key_pem.as_bytes(),
            &settings.secret_name,
        ) {
            Ok(config) => {
                WebhookCounters::bump(&counters.certificate_loads);
                publish.send_replace(Some(config));
                *published = Some(bundle.cert_pem.clone());
                tracing::info!(secret = %settings.secret_name, not_after = %bundle.not_after, "serving self-managed certificate");
            }
            Err(error) => {
                WebhookCounters::bump(&counters.certificate_load_failures);
                return Err(error.into());
            }
        }
    }
    patch_ca_bundle(client, &settings.configuration_name, &bundle.ca_cert_pem).await?;
    Ok(CHECK_INTERVAL.min(
        bundle
            .renewal_due_in(settings.renew_before, Timestamp::now())
            .max(Duration::from_secs(1)),
    ))
}

/// Reads the Secret, creating or renewing it when needed; returns the bundle every
/// replica now serves.
pub async fn ensure_secret(
    client: &Client,
    settings: &ManagedCertificateSettings,
) -> Result<CertificateBundle, CertificateError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &settings.namespace);
    let what = format!("Secret {}/{}", settings.namespace, settings.secret_name);
    for _ in 0..5 {
        let existing = api
            .get_opt(&settings.secret_name)
            .await
            .map_err(CertificateError::api(format!("get {what}")))?;
        let now = SystemTime::now();
        let Some(secret) = existing else {
            let bundle = generate(&settings.names, settings.validity, None, now)?;
            let secret = to_secret(&bundle, settings, None);
            match api.create(&PostParams::default(), &secret).await {
                Ok(_) => {
                    tracing::info!(%what, "created the webhook certificate");
                    return Ok(bundle);
                }
                // Another replica was first: use its certificate.
                Err(kube::Error::Api(status)) if status.code == 409 => continue,
                Err(error) => return Err(CertificateError::api(format!("create {what}"))(error)),
            }
        };
        let current = from_secret(&secret, &settings.prefix);
        let stale = current.as_ref().is_none_or(|b| {
            b.needs_renewal(&settings.names, settings.renew_before, timestamp(now))
                || server_config(b.cert_pem.as_bytes(), b.key_pem.as_bytes(), &what).is_err()
        });
        if let (Some(bundle), false) = (current.clone(), stale) {
            return Ok(bundle);
        }
        let bundle = generate(&settings.names, settings.validity, current.as_ref(), now)?;
        let renewed = to_secret(&bundle, settings, secret.metadata.resource_version.clone());
        match api
            .replace(&settings.secret_name, &PostParams::default(), &renewed)
            .await
        {
            Ok(_) => {
                tracing::info!(%what, not_after = %bundle.not_after, "renewed the webhook certificate");
                return Ok(bundle);
            }
            // Another replica renewed it first: read theirs.
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(error) => return Err(CertificateError::api(format!("update {what}"))(error)),
        }
    }
    Err(CertificateError::Contended { what })
}

fn annotation(prefix: &str, name: &str) -> String {
    format!("{prefix}/{name}")
}

fn to_secret(
    bundle: &CertificateBundle,
    settings: &ManagedCertificateSettings,
    resource_version: Option<String>,
) -> Secret {
    let data = [
        (TLS_CRT, &bundle.cert_pem),
        (TLS_KEY, &bundle.key_pem),
        (CA_CRT, &bundle.ca_cert_pem),
        (CA_KEY, &bundle.ca_key_pem),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
    .collect();
    let annotations = [
        (
            "webhook-certificate-not-after",
            bundle.not_after.to_string(),
        ),
        ("webhook-ca-not-after", bundle.ca_not_after.to_string()),
        ("webhook-certificate-names", bundle.names.join(",")),
    ]
    .into_iter()
    .map(|(k, v)| (annotation(&settings.prefix, k), v))
    .collect();
    Secret {
        metadata: ObjectMeta {
            name: Some(settings.secret_name.clone()),
            namespace: Some(settings.namespace.clone()),
            annotations: Some(annotations),
            resource_version,
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".to_owned()),
        data: Some(data),
        ..Default::default()
    }
}

/// The bundle in a Secret nudge wrote; `None` when anything is missing or unreadable.
fn from_secret(secret: &Secret, prefix: &str) -> Option<CertificateBundle> {
    let data = secret.data.as_ref()?;
    let text = |key: &str| {
        data.get(key)
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
    };
    let annotations = secret.metadata.annotations.as_ref()?;
    let time = |name: &str| {
        annotations
            .get(&annotation(prefix, name))?
            .parse::<Timestamp>()
            .ok()
    };
    let names = annotations
        .get(&annotation(prefix, "webhook-certificate-names"))?
        .split(',')
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect();
    Some(CertificateBundle {
        ca_cert_pem: text(CA_CRT)?,
        ca_key_pem: text(CA_KEY)?,
        cert_pem: text(TLS_CRT)?,
        key_pem: text(TLS_KEY)?,
        names,
        ca_not_after: time("webhook-ca-not-after")?,
        not_after: time("webhook-certificate-not-after")?,
    })
}

/// Sets `caBundle` of every webhook of configuration `name` to `ca_pem`, when it
/// differs. A configuration that does not exist (yet) is not an error: it is looked
/// at again on the next pass.
pub async fn patch_ca_bundle(
    client: &Client,
    name: &str,
    ca_pem: &str,
) -> Result<(), CertificateError> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let what = format!("MutatingWebhookConfiguration {name}");
    let Some(mut config) = api
        .get_opt(name)
        .await
        .map_err(CertificateError::api(format!("get {what}")))?
    else {
        tracing::debug!(%what, "not found; caBundle not patched yet");
        return Ok(());
    };
    let wanted = ByteString(ca_pem.as_bytes().to_vec());
    let mut changed = false;
    for webhook in config.webhooks.iter_mut().flatten() {
        if webhook.client_config.ca_bundle.as_ref() != Some(&wanted) {
            webhook.client_config.ca_bundle = Some(wanted.clone());
            changed = true;
        }
    }
    if !changed {
        return Ok(());
    }
    // resourceVersion is kept from the read: a concurrent writer makes this 409,
    // and the next pass reads again.
    api.replace(name, &PostParams::default(), &config)
        .await
        .map_err(CertificateError::api(format!("update {what}")))?;
    tracing::info!(%what, "caBundle patched");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["nudge-webhook.nudge-system.svc".into(), "127.0.0.1".into()]
    }

    #[test]
    fn generated_pair_loads_as_a_serving_certificate() {
        let bundle =
            generate(&names(), Duration::from_secs(3600), None, SystemTime::now()).unwrap();
        server_config(
            bundle.cert_pem.as_bytes(),
            bundle.key_pem.as_bytes(),
            "test",
        )
        .unwrap();
        assert!(
            bundle
                .ca_cert_pem
                .starts_with("-----BEGIN CERTIFICATE-----")
        );
    }

    #[test]
    fn renewal_reuses_a_ca_that_outlives_the_new_certificate() {
        let now = SystemTime::now();
        let first = generate(&names(), Duration::from_secs(3600), None, now).unwrap();
        let second = generate(&names(), Duration::from_secs(3600), Some(&first), now).unwrap();
        assert_eq!(first.ca_cert_pem, second.ca_cert_pem);
        assert_ne!(first.cert_pem, second.cert_pem);
    }

    #[test]
    fn ca_that_would_expire_first_is_replaced() {
        let now = SystemTime::now();
        let mut first = generate(&names(), Duration::from_secs(3600), None, now).unwrap();
        first.ca_not_after = timestamp(now + Duration::from_secs(60));
        let second = generate(&names(), Duration::from_secs(3600), Some(&first), now).unwrap();
        assert_ne!(first.ca_cert_pem, second.ca_cert_pem);
    }

    #[test]
    fn renewal_is_due_near_expiry_or_for_other_names() {
        let now = SystemTime::now();
        let bundle = generate(&names(), Duration::from_secs(3600), None, now).unwrap();
        let renew_before = Duration::from_secs(600);
        assert!(!bundle.needs_renewal(&names(), renew_before, timestamp(now)));
        assert!(bundle.needs_renewal(
            &names(),
            renew_before,
            timestamp(now + Duration::from_secs(3100))
        ));
        assert!(bundle.needs_renewal(&["other".into()], renew_before, timestamp(now)));
        assert_eq!(
            bundle
                .renewal_due_in(renew_before, timestamp(now))
                .as_secs(),
            3000
        );
    }

    #[test]
    fn secret_round_trips_the_bundle() {
        let bundle =
            generate(&names(), Duration::from_secs(3600), None, SystemTime::now()).unwrap();
        let settings = ManagedCertificateSettings {
            namespace: "nudge-system".into(),
            secret_name: "nudge-webhook-tls".into(),
            configuration_name: "nudge".into(),
            names: names(),
            validity: Duration::from_secs(3600),
            renew_before: Duration::from_secs(60),
            prefix: "nudge.dev".into(),
        };
        let secret = to_secret(&bundle, &settings, None);
        let mut back = from_secret(&secret, "nudge.dev").unwrap();
        // Timestamps are stored to the second.
        back.not_after = bundle.not_after;
        back.ca_not_after = bundle.ca_not_after;
        assert_eq!(back, bundle);
    }

    #[test]
    fn invalid_name_is_an_error_not_a_panic() {
        let error = generate(
            &["bäd.example".into()],
            Duration::from_secs(60),
            None,
            SystemTime::now(),
        );
        assert!(error.is_err());
    }
}
