//! nudge's configuration: one [`Config`] loaded by figment from defaults, a TOML
//! file, `NUDGE_<SECTION>__<KEY>` environment variables and CLI flags, in that order
//! of precedence (later wins). `config.example.toml` mirrors [`Config::default`].

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::{Figment, Metadata};
use serde::{Deserialize, Serialize};

mod duration;
mod selector;

pub use crate::snapshot::SnapshotMode;

/// Prefix of the environment variables that configure nudge.
pub(crate) const ENV_PREFIX: &str = "NUDGE_";

/// Separator between section and key in environment variable names
/// (`NUDGE_ENGINE__DEBOUNCE`). Variables without it (e.g. `NUDGE_CONFIG`) are not
/// configuration keys and are left alone.
pub(crate) const ENV_SEPARATOR: &str = "__";

/// Why configuration could not be loaded.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A key is unknown, has the wrong type or does not parse.
    #[error("invalid configuration: {key}: {problem} (from {origin})")]
    Load {
        /// Dotted key, e.g. `engine.burst`, or the section when the key is unknown.
        key: String,
        /// figment's description of the problem.
        problem: String,
        /// Where the value came from (file path or environment variable).
        origin: String,
    },
    /// The config file named explicitly does not exist.
    #[error("config file {path} does not exist")]
    MissingFile {
        /// The path given.
        path: PathBuf,
    },
    /// A key parsed but its value is out of range.
    #[error("invalid configuration: {key} {problem} (from {origin})")]
    Invalid {
        /// Dotted key, e.g. `engine.burst`.
        key: &'static str,
        /// What is wrong with it.
        problem: String,
        /// Where the value came from (file path, environment variable or default).
        origin: String,
    },
}

/// The whole configuration. Every field has a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Annotation names.
    pub annotations: AnnotationsConfig,
    /// Debounce and pacing of stamps.
    pub engine: EngineConfig,
    /// Which part of the cluster nudge works on, and how it writes.
    pub kubernetes: KubernetesConfig,
    /// Secret fingerprint key.
    pub fingerprint: FingerprintConfig,
    /// Config sources other than ConfigMaps and Secrets.
    pub sources: SourcesConfig,
    /// Logging.
    pub log: LogConfig,
    /// The mutating admission webhook.
    pub webhook: WebhookConfig,
    /// The admin HTTP server (`/live`, `/ready`, `/metrics`).
    pub admin: AdminConfig,
    /// Leader election: only the Lease holder stamps.
    pub leader_election: LeaderElectionConfig,
    /// Notifications: one message per stamp to a chat or HTTP webhook.
    pub notify: NotifyConfig,
    /// Workload kinds stamped besides the built-in ones (`[[targets]]`), e.g.
    /// Argo Rollouts or OpenKruise CloneSets: any namespaced kind with a pod
    /// template; and the sections of custom targets (`[targets.<key>]`).
    pub targets: TargetsConfig,
}

/// `targets`: as an array (`[[targets]]`), the kinds to stamp. To configure
/// custom targets as well, a table: the kinds under `[[targets.kinds]]` and
/// each custom target's section under `[targets.<key>]` (TOML cannot mix the two
/// forms in one document).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TargetsConfig {
    /// The kinds stamped by configuration.
    pub kinds: Vec<TargetConfig>,
    /// `[targets.<key>]` of custom targets, as written: read into each
    /// target's typed configuration when it is registered
    /// ([`Controller::with_configured_target`](crate::Controller::with_configured_target)).
    pub custom: BTreeMap<String, figment::value::Value>,
}

impl From<Vec<TargetConfig>> for TargetsConfig {
    fn from(kinds: Vec<TargetConfig>) -> Self {
        Self {
            kinds,
            custom: BTreeMap::new(),
        }
    }
}

impl Serialize for TargetsConfig {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        if self.custom.is_empty() {
            return self.kinds.serialize(serializer);
        }
        let mut map = serializer.serialize_map(Some(self.custom.len() + 1))?;
        map.serialize_entry("kinds", &self.kinds)?;
        for (key, value) in &self.custom {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for TargetsConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Form;
        impl<'de> serde::de::Visitor<'de> for Form {
            type Value = TargetsConfig;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "[[targets]] entries, or a table of [[targets.kinds]] and [targets.<key>]",
                )
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                seq: A,
            ) -> Result<Self::Value, A::Error> {
                let kinds = Vec::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))?;
                Ok(kinds.into())
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut targets = TargetsConfig::default();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "kinds" {
                        targets.kinds = map.next_value()?;
                    } else {
                        let value = map.next_value()?;
                        targets.custom.insert(key, value);
                    }
                }
                Ok(targets)
            }
        }
        deserializer.deserialize_any(Form)
    }
}

/// One `[[targets]]` entry: a kind with a pod template, served through kube's
/// dynamic API (its plural is found by API discovery at start-up).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetConfig {
    /// API group, e.g. `apps.kruise.io` (empty: the core group).
    #[serde(default)]
    pub group: String,
    /// API version, e.g. `v1alpha1`.
    pub version: String,
    /// Kind, e.g. `CloneSet`.
    pub kind: String,
    /// Where the pod template is, as dot-separated field names.
    #[serde(default = "default_template_path")]
    pub template: String,
}

fn default_template_path() -> String {
    "spec.template".to_owned()
}

/// `[annotations]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AnnotationsConfig {
    /// Prefix of nudge's own annotations (`<prefix>/auto`, `<prefix>/checksum-x`).
    pub prefix: String,
    /// Reloader's `--auto-reload-all`: every workload that no annotation of any
    /// scheme manages is Reloader-`auto` unless it opts out with
    /// `reloader.stakater.com/auto: "false"`.
    pub reloader_auto_all: bool,
}

impl Default for AnnotationsConfig {
    fn default() -> Self {
        Self {
            prefix: "nudge.dev".to_owned(),
            reloader_auto_all: false,
        }
    }
}

impl AnnotationsConfig {
    /// The annotation scheme these settings describe.
    pub(crate) fn scheme(&self) -> crate::annotations::AnnotationScheme {
        crate::annotations::AnnotationScheme::new(self.prefix.clone())
            .with_reloader_auto_all(self.reloader_auto_all)
    }
}

/// `[engine]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Changes to a workload's references within this window produce one stamp.
    #[serde(with = "duration")]
    pub debounce: Duration,
    /// A workload whose references keep changing is still stamped this long after
    /// the first unstamped change.
    #[serde(with = "duration")]
    pub max_delay: Duration,
    /// Global rate of stamps (token bucket refill per second).
    pub stamps_per_second: f64,
    /// Global burst of stamps (token bucket size).
    pub burst: u32,
    /// Minimum time between two stamps of the same workload.
    #[serde(with = "duration")]
    pub min_interval: Duration,
    /// Stamp a deleted required reference as `absent` instead of keeping the
    /// current stamp.
    pub stamp_on_delete: bool,
    /// How long a rollout nudge started may run before nudge reports it failed,
    /// for kinds without a progress deadline of their own (every kind but
    /// Deployment, whose `progressDeadlineSeconds` kube-controller-manager
    /// enforces); a CronJob's counts from the start of its run. Override per
    /// workload: `<prefix>/progress-deadline`.
    #[serde(with = "duration")]
    pub progress_deadline: Duration,
    /// Config revisions kept in each workload's `<prefix>/history` annotation.
    pub history_limit: usize,
    /// The default maintenance window of rolling stamps (design §5d), e.g.
    /// `"Mon-Fri 22:00-06:00 Europe/Berlin"`; `None` (an empty string in TOML):
    /// always open. Override per workload: `<prefix>/window`.
    #[serde(with = "crate::window::optional")]
    pub window: Option<crate::window::Window>,
    /// Which workloads take snapshots (design §5e): immutable copies of the
    /// ConfigMaps and Secrets their pod template references, one per config
    /// revision, so pods that start later still get their revision's config
    /// and a rollback takes the config back with the pods.
    pub snapshots: SnapshotMode,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            debounce: Duration::from_secs(5),
            max_delay: Duration::from_secs(60),
            stamps_per_second: 5.0,
            burst: 50,
            min_interval: Duration::from_secs(30),
            stamp_on_delete: false,
            progress_deadline: Duration::from_secs(600),
            history_limit: 10,
            window: None,
            snapshots: SnapshotMode::Off,
        }
    }
}

/// `[kubernetes]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KubernetesConfig {
    /// Namespaces whose workloads, ConfigMaps and Secrets are watched; empty
    /// means all namespaces.
    pub namespaces: Vec<String>,
    /// Namespaces never watched (left out server-side).
    pub ignore_namespaces: Vec<String>,
    /// Label selector on Namespace objects: only workloads in matching namespaces
    /// are stamped (empty: no such restriction). Followed live. Reloader's
    /// `key:value` form is read as `key=value` (`key:*`: has the label).
    pub namespace_selector: String,
    /// Server-side label selector for the ConfigMap and Secret watches (empty:
    /// every object). Objects outside it are never fetched nor fingerprinted.
    /// Reloader's `key:value` form is read as for `namespace_selector`.
    pub source_label_selector: String,
    /// Built-in workload kinds never stamped, by kind or plural, any case:
    /// `Deployment`, `StatefulSet`, `DaemonSet`, `CronJob`, `Job`, `Rollout`
    /// (Argo). Reloader's `--ignored-workload-types=jobs,cronjobs` is
    /// `["jobs", "cronjobs"]`.
    pub ignore_kinds: Vec<String>,
    /// Field manager of nudge's server-side applies.
    pub field_manager: String,
    /// The namespace nudge runs in (its key Secret, Lease and webhook Secret live
    /// there). Empty: the pod's namespace in a cluster, else the current kubeconfig
    /// context's namespace (as kubectl does). The manifests set it from the pod.
    pub namespace: String,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        Self {
            namespaces: Vec::new(),
            ignore_namespaces: Vec::new(),
            namespace_selector: String::new(),
            source_label_selector: String::new(),
            ignore_kinds: Vec::new(),
            field_manager: "nudge".to_owned(),
            namespace: String::new(),
        }
    }
}

/// `[fingerprint]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FingerprintConfig {
    /// File holding the installation key for Secret fingerprints (at least 32
    /// bytes). Empty: nudge generates a key once and keeps it in `key_secret`.
    pub key_file: Option<PathBuf>,
    /// Secret in `kubernetes.namespace` holding the generated key.
    pub key_secret: String,
}

impl Default for FingerprintConfig {
    fn default() -> Self {
        Self {
            key_file: None,
            key_secret: "nudge-fingerprint-key".to_owned(),
        }
    }
}

/// `[log]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `plain` or `json`.
    pub format: LogFormat,
    /// A `tracing` env-filter directive.
    pub filter: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Plain,
            // consulrs logs every request at INFO.
            filter: "info,consulrs=warn".to_owned(),
        }
    }
}

/// `[admin]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Address of the admin HTTP server (`/live`, `/ready`, `/metrics`).
    pub bind: SocketAddr,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([0, 0, 0, 0], 9090)),
        }
    }
}

/// `[leader_election]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LeaderElectionConfig {
    /// Elect a leader through a Lease; when false every replica stamps.
    pub enabled: bool,
    /// Name of the `coordination.k8s.io/v1` Lease in `kubernetes.namespace`.
    pub lease_name: String,
    /// How long a lease is valid after its last renewal; a follower takes over an
    /// expired lease. Whole seconds (rounded up).
    #[serde(with = "duration")]
    pub lease_duration: Duration,
    /// A leader that could not renew for this long steps down (shorter than
    /// `lease_duration`, so it stops before anyone may take over).
    #[serde(with = "duration")]
    pub renew_deadline: Duration,
    /// Interval between attempts to acquire or renew the lease.
    #[serde(with = "duration")]
    pub retry_period: Duration,
}

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            lease_name: "nudge".to_owned(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// `[webhook]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
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

/// `[notify]`: one message per stamp, POSTed to a webhook (Slack, Microsoft Teams,
/// Google Chat, or nudge's own JSON). Off by default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NotifyConfig {
    /// Whether stamps are notified.
    pub enabled: bool,
    /// The webhook URL. It usually embeds a token: prefer `url_file`.
    pub url: WebhookUrl,
    /// File holding the webhook URL (read once at start-up, surrounding whitespace
    /// trimmed), e.g. a key of a Secret mounted as a volume.
    pub url_file: String,
    /// The payload: `slack`, `teams`, `gchat` or `json`.
    pub format: NotifyFormat,
    /// Deadline of one POST, connection included. Failed POSTs are not retried.
    #[serde(with = "duration")]
    pub timeout: Duration,
    /// Text put before every message as `<additional_info> : <message>` (e.g. the
    /// cluster's name), like Reloader's `ALERT_ADDITIONAL_INFO`. Empty: none.
    pub additional_info: String,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            url: WebhookUrl::default(),
            url_file: String::new(),
            format: NotifyFormat::Json,
            timeout: Duration::from_secs(10),
            additional_info: String::new(),
        }
    }
}

impl NotifyConfig {
    /// Checks the values; returns the offending key and the problem. Never repeats
    /// the URL (it embeds a token).
    pub(crate) fn problem(&self) -> Option<(&'static str, String)> {
        if !self.url.is_empty() && !self.url_file.is_empty() {
            return Some((
                "notify.url",
                "set either url or url_file, not both".to_owned(),
            ));
        }
        if self.enabled && self.url.is_empty() && self.url_file.is_empty() {
            return Some((
                "notify.enabled",
                "is true but neither notify.url nor notify.url_file is set".to_owned(),
            ));
        }
        if !self.url.is_empty()
            && let Err(problem) = parse_webhook_url(&self.url.0)
        {
            return Some(("notify.url", problem.to_owned()));
        }
        if self.timeout.is_zero() {
            return Some(("notify.timeout", "must be above 0".to_owned()));
        }
        None
    }
}

/// Parses a webhook URL: absolute `http` or `https` with a host. The error says
/// what is wrong without repeating the URL (it embeds a token).
pub(crate) fn parse_webhook_url(text: &str) -> Result<reqwest::Url, &'static str> {
    let url = reqwest::Url::parse(text).map_err(|_| "is not a URL")?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("must be an http:// or https:// URL");
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("has no host");
    }
    Ok(url)
}

/// A webhook URL from the configuration; never printed (Slack, Teams and Google
/// Chat URLs embed the token that lets anyone post).
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WebhookUrl(pub String);

impl WebhookUrl {
    /// Whether no URL is configured.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for WebhookUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() {
            "\"\""
        } else {
            "<redacted>"
        })
    }
}

/// The payload of notifications.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum NotifyFormat {
    /// A Slack incoming webhook: one attachment with the message.
    Slack,
    /// A Microsoft Teams incoming webhook: `{"text": …}`.
    Teams,
    /// A Google Chat webhook: `{"text": …}`.
    Gchat,
    /// nudge's own structured JSON (workload, references, message, time).
    Json,
}

impl NotifyFormat {
    /// The name in the configuration and in the `format` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Slack => "slack",
            Self::Teams => "teams",
            Self::Gchat => "gchat",
            Self::Json => "json",
        }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum LogFormat {
    /// Human-readable lines.
    Plain,
    /// One JSON object per line.
    Json,
}

/// `[sources]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct SourcesConfig {
    /// `[sources.configmap]`: the built-in ConfigMap source (`configmap`).
    pub configmap: BuiltinSourceConfig,
    /// `[sources.secret]`: the built-in Secret source (`secret`).
    pub secret: BuiltinSourceConfig,
    /// `[sources.consul]`: the default Consul cluster (source name `consul`), and extra
    /// clusters under `[sources.consul.instances.<name>]` (source name `consul.<name>`).
    pub consul: ConsulConfig,
    /// `[sources.kubernetes.<name>]`: the objects of one namespaced Kubernetes
    /// kind (a custom resource, or any other) as the source `<name>`, which
    /// workloads reference as `<prefix>/<name>-<slot>: <object name>`.
    pub kubernetes: BTreeMap<String, KubernetesSourceConfig>,
    /// `[sources.<key>]` of custom sources, as written: each is read into its
    /// source's own typed configuration when the source is registered
    /// ([`Controller::with_configured_source`](crate::Controller::with_configured_source)),
    /// and a section no source is registered for is an error then.
    #[serde(flatten)]
    pub custom: BTreeMap<String, figment::value::Value>,
}

/// Section names under `[sources]` that nudge's own sources take; a custom
/// source cannot be configured under them.
pub(crate) const BUILTIN_SOURCE_SECTIONS: [&str; 4] =
    ["configmap", "secret", "consul", "kubernetes"];

/// `[sources.configmap]` and `[sources.secret]`: a built-in source of
/// Kubernetes objects. Turned off (Reloader's `--resources-to-ignore`), it is
/// not watched, its objects are not tracked (`<prefix>/auto` and the other
/// schemes leave them out, so they roll nothing), and an annotation naming it
/// is an unknown source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct BuiltinSourceConfig {
    /// Whether the source runs.
    pub enabled: bool,
}

impl Default for BuiltinSourceConfig {
    fn default() -> Self {
        Self { enabled: true }
    }
}

/// `[sources.kubernetes.<name>]`: Kubernetes objects of one namespaced kind as
/// a config source. Watched metadata-only; an object some workload references
/// is read (GET) when it changes, fingerprinted and dropped. Its plural is
/// found by API discovery; a kind not served yet (CRD not installed) is
/// picked up once it is. `preset` fills in a shipped entry instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct KubernetesSourceConfig {
    /// A shipped entry (design §5b): it sets `group`, `version`, `kind`,
    /// `fields`, `reference_field` and `discover`, which are then left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<KubernetesSourcePreset>,
    /// API group, e.g. `example.com` (empty: the core group).
    #[serde(default)]
    pub group: String,
    /// API version, e.g. `v1`.
    #[serde(default)]
    pub version: String,
    /// Kind, e.g. `FeatureFlags`.
    #[serde(default)]
    pub kind: String,
    /// JSON pointers (RFC 6901) of the fields whose content is the
    /// fingerprint, e.g. `["/spec"]` or `["/data", "/status/objects"]`. Empty:
    /// everything but `apiVersion`, `kind`, `metadata` and `status`.
    #[serde(default)]
    pub fields: Vec<String>,
    /// The content is secret: fingerprint it keyed with the installation key
    /// (`hmac-sha256-…`), as Secrets are, instead of a plain `sha256-…`.
    #[serde(default)]
    pub secret: bool,
    /// JSON pointer of a string field, e.g. `/status/secretProviderClassName`:
    /// a reference then names every object of the kind, in the workload's
    /// namespace, whose field holds it (not an object name), and its
    /// fingerprint follows the one of them written last. Empty: references
    /// are object names.
    #[serde(default)]
    pub reference_field: String,
    /// `[sources.kubernetes.<name>.discover]`: where workloads reference these
    /// objects in their pod spec, so that `<prefix>/auto` finds them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discover: Option<DiscoverConfig>,
}

/// A shipped `[sources.kubernetes.<name>]` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum KubernetesSourcePreset {
    /// `"secrets-store-csi"`: what the Secrets Store CSI driver mounted. The
    /// `SecretProviderClassPodStatus` objects (`secrets-store.csi.x-k8s.io/v1`)
    /// of the class a `csi` volume of driver `secrets-store.csi.k8s.io` names
    /// in `volumeAttributes.secretProviderClass`, fingerprinted by their
    /// `status.objects` (`id`/`version` pairs). Reloader 2's
    /// `secretproviderclass` annotations and env var are read with it.
    #[serde(rename = "secrets-store-csi")]
    SecretsStoreCsi,
}

impl KubernetesSourcePreset {
    /// The preset's name, as configured.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SecretsStoreCsi => "secrets-store-csi",
        }
    }
}

/// `[sources.kubernetes.<name>.discover]`: a pod-spec rule. Every `csi`
/// volume of driver `csi_driver` references the object (or, with
/// `reference_field`, the objects) named by its
/// `volumeAttributes[volume_attribute]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct DiscoverConfig {
    /// The CSI driver's name, e.g. `secrets-store.csi.k8s.io`.
    pub csi_driver: String,
    /// The volume attribute naming the object, e.g. `secretProviderClass`.
    pub volume_attribute: String,
}

impl DiscoverConfig {
    /// `csi` volumes of `driver`, naming their object in `volume_attribute`.
    pub fn csi(driver: impl Into<String>, attribute: impl Into<String>) -> Self {
        Self {
            csi_driver: driver.into(),
            volume_attribute: attribute.into(),
        }
    }

    /// What is wrong with this rule, if anything (field name and problem).
    fn problem(&self) -> Option<(&'static str, String)> {
        if !is_dns_subdomain(&self.csi_driver) {
            let problem = format!(
                "{:?} is not a CSI driver name (a DNS subdomain, e.g. secrets-store.csi.k8s.io)",
                self.csi_driver
            );
            return Some(("discover.csi_driver", problem));
        }
        let attribute_ok = !self.volume_attribute.is_empty()
            && self
                .volume_attribute
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/'));
        if !attribute_ok {
            let problem = format!(
                "{:?} is not a volume attribute name (e.g. secretProviderClass)",
                self.volume_attribute
            );
            return Some(("discover.volume_attribute", problem));
        }
        None
    }
}

impl KubernetesSourceConfig {
    /// Objects of `group/version` `kind`, fingerprinted by the default fields,
    /// in the clear.
    pub fn new(
        group: impl Into<String>,
        version: impl Into<String>,
        kind: impl Into<String>,
    ) -> Self {
        Self {
            preset: None,
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            fields: Vec::new(),
            secret: false,
            reference_field: String::new(),
            discover: None,
        }
    }

    /// The entry `preset` ships.
    pub fn preset(preset: KubernetesSourcePreset) -> Self {
        Self {
            preset: Some(preset),
            ..Self::new("", "", "")
        }
    }

    /// The entry as it takes effect: a preset's fields filled in.
    pub fn resolved(&self) -> Self {
        match self.preset {
            None => self.clone(),
            Some(KubernetesSourcePreset::SecretsStoreCsi) => Self {
                preset: self.preset,
                fields: vec!["/status/objects".to_owned()],
                secret: self.secret,
                reference_field: "/status/secretProviderClassName".to_owned(),
                discover: Some(DiscoverConfig::csi(
                    "secrets-store.csi.k8s.io",
                    "secretProviderClass",
                )),
                ..Self::new(
                    "secrets-store.csi.x-k8s.io",
                    "v1",
                    "SecretProviderClassPodStatus",
                )
            },
        }
    }

    /// The kind a reference of this entry names, as `(apiVersion, kind)`, for
    /// the related object of Events: the entry's own kind; with
    /// `reference_field`, none (a reference names many objects), except for
    /// the CSI preset, whose references name SecretProviderClasses.
    pub(crate) fn referenced_kind(&self) -> Option<(String, String)> {
        let entry = self.resolved();
        match entry.preset {
            Some(KubernetesSourcePreset::SecretsStoreCsi) => Some((
                "secrets-store.csi.x-k8s.io/v1".to_owned(),
                "SecretProviderClass".to_owned(),
            )),
            None if entry.reference_field.is_empty() => {
                Some((entry.api_version(), entry.kind.clone()))
            }
            None => None,
        }
    }

    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// What is wrong with this entry, if anything (field name and problem).
    fn problem(&self) -> Option<(&'static str, String)> {
        if let Some(preset) = self.preset {
            return self.preset_problem(preset);
        }
        if !self.group.is_empty() && !is_dns_subdomain(&self.group) {
            return Some((
                "group",
                format!("{:?} is not an API group (a DNS subdomain)", self.group),
            ));
        }
        if self.version.is_empty() {
            return Some(("version", "missing (e.g. v1), or set a preset".to_owned()));
        }
        if !is_dns_label(&self.version) {
            return Some((
                "version",
                format!("{:?} is not an API version (e.g. v1)", self.version),
            ));
        }
        if self.kind.is_empty() {
            let problem = "missing (e.g. FeatureFlags), or set a preset".to_owned();
            return Some(("kind", problem));
        }
        let kind_ok = self.kind.starts_with(|c: char| c.is_ascii_alphabetic())
            && self.kind.chars().all(|c| c.is_ascii_alphanumeric());
        if !kind_ok {
            return Some((
                "kind",
                format!("{:?} is not a kind (e.g. FeatureFlags)", self.kind),
            ));
        }
        for (i, pointer) in self.fields.iter().enumerate() {
            if let Err(error) = crate::fingerprint::check_pointer(pointer) {
                return Some(("fields", format!("entry {i}: {error}")));
            }
        }
        if !self.reference_field.is_empty()
            && let Err(error) = crate::fingerprint::check_pointer(&self.reference_field)
        {
            return Some(("reference_field", error.to_string()));
        }
        self.discover.as_ref().and_then(DiscoverConfig::problem)
    }

    /// A preset sets every field but `secret`; one written beside it is a
    /// mistake, named.
    fn preset_problem(&self, preset: KubernetesSourcePreset) -> Option<(&'static str, String)> {
        let set = [
            ("group", !self.group.is_empty()),
            ("version", !self.version.is_empty()),
            ("kind", !self.kind.is_empty()),
            ("fields", !self.fields.is_empty()),
            ("reference_field", !self.reference_field.is_empty()),
            ("discover", self.discover.is_some()),
        ];
        let (field, _) = set.into_iter().find(|(_, set)| *set)?;
        let problem = format!(
            "set by preset {:?}; leave it out, or drop the preset",
            preset.as_str()
        );
        Some((field, problem))
    }
}

/// `[sources.consul]` and `[sources.consul.instances.<name>]`: one Consul cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsulConfig {
    /// Whether this cluster is watched. Unset means `false` for `[sources.consul]` and
    /// `true` for each listed instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// HTTP(S) address of a Consul agent or server. Empty: `$CONSUL_HTTP_ADDR`, else
    /// `http://127.0.0.1:8500` (default instance only; instances must set it).
    pub address: String,
    /// ACL token. Empty: `token_file`, else `$CONSUL_HTTP_TOKEN` (default instance only).
    pub token: ConsulToken,
    /// File holding the ACL token (read at start-up). Empty: `$CONSUL_HTTP_TOKEN_FILE`
    /// (default instance only).
    pub token_file: String,
    /// Datacenter to read from. Empty: the agent's own.
    pub datacenter: String,
    /// Namespace (Consul Enterprise). Empty: the token's default.
    pub namespace: String,
    /// Admin partition (Consul Enterprise). Empty: the token's default.
    pub partition: String,
    /// TLS towards Consul.
    pub tls: ConsulTlsConfig,
    /// Longest time one blocking query waits for a change (Consul caps it at 10m).
    #[serde(with = "duration")]
    pub wait: Duration,
    /// Most blocking queries (and so HTTP connections) in flight at once. When more
    /// keys are tracked, keys under common prefixes share one recursive query.
    pub max_concurrent_queries: usize,
    /// Time between two queries of the same watch once its burst is spent (a key
    /// that keeps changing must not spin the loop). Changes of different keys
    /// under one prefix query are not churn: they may run `query_burst` queries
    /// per interval. `0s`: no limit.
    #[serde(with = "duration")]
    pub min_query_interval: Duration,
    /// Queries one watch may run back to back after a quiet period, so that a few
    /// changes in a row under one prefix are each read at once.
    pub query_burst: u32,
    /// Longest pause between retries while Consul is unreachable or failing.
    #[serde(with = "duration")]
    pub max_retry_interval: Duration,
    /// Deadline of one non-blocking read.
    #[serde(with = "duration")]
    pub timeout: Duration,
    /// Further Consul clusters, by name; `eu` becomes the source `consul.eu`. Only
    /// valid under `[sources.consul]`.
    pub instances: BTreeMap<String, ConsulConfig>,
}

impl Default for ConsulConfig {
    fn default() -> Self {
        Self {
            enabled: None,
            address: String::new(),
            token: ConsulToken::default(),
            token_file: String::new(),
            datacenter: String::new(),
            namespace: String::new(),
            partition: String::new(),
            tls: ConsulTlsConfig::default(),
            wait: Duration::from_secs(300),
            max_concurrent_queries: 64,
            min_query_interval: Duration::from_secs(1),
            query_burst: 5,
            max_retry_interval: Duration::from_secs(30),
            timeout: Duration::from_secs(10),
            instances: BTreeMap::new(),
        }
    }
}

impl ConsulConfig {
    /// Checks one cluster's values; `instance` is `None` for `[sources.consul]`.
    /// Returns the offending key (relative to the cluster's section) and the problem.
    pub(crate) fn problem(&self, instance: Option<&str>) -> Option<(&'static str, String)> {
        if instance.is_some() {
            if !self.instances.is_empty() {
                return Some(("instances", "instances cannot be nested".to_owned()));
            }
            if self.address.is_empty() {
                return Some(("address", "must be set for an extra instance".to_owned()));
            }
        }
        if !self.token.is_empty() && !self.token_file.is_empty() {
            return Some((
                "token",
                "set either token or token_file, not both".to_owned(),
            ));
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(600)).contains(&self.wait) {
            return Some((
                "wait",
                format!(
                    "must be between 1s and 10m (Consul's limit), got {}",
                    duration::human(self.wait)
                ),
            ));
        }
        if self.max_concurrent_queries == 0 {
            return Some(("max_concurrent_queries", "must be at least 1".to_owned()));
        }
        if self.query_burst == 0 {
            return Some(("query_burst", "must be at least 1".to_owned()));
        }
        if self.max_retry_interval < Duration::from_secs(1) {
            return Some(("max_retry_interval", "must be at least 1s".to_owned()));
        }
        if self.timeout.is_zero() {
            return Some(("timeout", "must be above 0".to_owned()));
        }
        let tls = &self.tls;
        if tls.cert_file.is_empty() != tls.key_file.is_empty() {
            return Some((
                "tls.cert_file",
                "tls.cert_file and tls.key_file must be set together".to_owned(),
            ));
        }
        None
    }
}

/// `[sources.consul.tls]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsulTlsConfig {
    /// PEM file of the CA that signed Consul's certificate. Empty: the built-in roots.
    pub ca_file: String,
    /// PEM client certificate (with `key_file`), for `verify_incoming` clusters.
    pub cert_file: String,
    /// PEM private key of `cert_file` (PKCS#8, RSA or SEC1).
    pub key_file: String,
    /// Name to verify Consul's certificate against, when it differs from the host in
    /// `address` (e.g. `server.dc1.consul`).
    pub server_name: String,
    /// Verify Consul's certificate. Turning it off is for experiments only.
    pub verify: bool,
}

impl Default for ConsulTlsConfig {
    fn default() -> Self {
        Self {
            ca_file: String::new(),
            cert_file: String::new(),
            key_file: String::new(),
            server_name: String::new(),
            verify: true,
        }
    }
}

/// A Consul ACL token from the configuration; never printed.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ConsulToken(pub String);

impl ConsulToken {
    /// Whether no token is configured.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for ConsulToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() {
            "\"\""
        } else {
            "<redacted>"
        })
    }
}

/// Values from CLI flags; `None` leaves the lower layers' value.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--log-format`
    pub log_format: Option<LogFormat>,
    /// `--log-filter`
    pub log_filter: Option<String>,
}

impl Overrides {
    /// The flags as a figment provider layer, keyed by dotted config keys.
    fn figment(&self) -> Figment {
        let mut figment = Figment::new();
        if let Some(format) = self.log_format {
            figment = figment.merge(Serialized::default("log.format", format));
        }
        if let Some(filter) = &self.log_filter {
            figment = figment.merge(Serialized::default("log.filter", filter));
        }
        figment
    }
}

// === impl Config ===

/// What secret settings read as in printed configuration.
const REDACTED: &str = "<redacted>";

impl Config {
    /// The annotation scheme: the names of `[annotations]`, and which
    /// workloads take snapshots (`engine.snapshots`), which decides how their
    /// annotations read.
    pub(crate) fn scheme(&self) -> crate::annotations::AnnotationScheme {
        self.annotations
            .scheme()
            .with_snapshots(self.engine.snapshots)
    }

    /// The same configuration with every secret value (Consul tokens, the
    /// notification URL, which carries its token) replaced by `<redacted>`,
    /// for printing. Empty values stay empty.
    pub fn redacted(&self) -> Self {
        fn redact_consul(consul: &mut ConsulConfig) {
            if !consul.token.is_empty() {
                consul.token = ConsulToken(REDACTED.to_owned());
            }
            consul.instances.values_mut().for_each(redact_consul);
        }
        let mut config = self.clone();
        redact_consul(&mut config.sources.consul);
        if !config.notify.url.is_empty() {
            config.notify.url = WebhookUrl(REDACTED.to_owned());
        }
        config
    }

    /// Loads defaults, then `file` (if given it must exist), then `NUDGE_*`
    /// environment variables, then `overrides`, and validates the result.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Self, ConfigError> {
        Self::from_figment(&Self::providers(file, overrides)?)
    }

    /// nudge's configuration providers: defaults, then `file` (if given it must
    /// exist), then `NUDGE_*` environment variables, then `overrides`. Merge
    /// providers of your own into it before
    /// [`from_figment`](Self::from_figment).
    pub fn providers(file: Option<&Path>, overrides: &Overrides) -> Result<Figment, ConfigError> {
        if let Some(path) = file
            && !path.exists()
        {
            return Err(ConfigError::MissingFile {
                path: path.to_owned(),
            });
        }
        Ok(Self::figment(file, overrides))
    }

    /// The configuration `figment` holds, validated.
    pub fn from_figment(figment: &Figment) -> Result<Self, ConfigError> {
        let config: Config = figment.extract().map_err(load_error)?;
        config.validate(figment)?;
        Ok(config.normalized())
    }

    /// The same configuration as nudge acts on it: label selectors in
    /// Kubernetes' form (Reloader's `key:value` items translated). A selector
    /// that does not parse is left as it is (validation reports it).
    pub(crate) fn normalized(mut self) -> Self {
        let kubernetes = &mut self.kubernetes;
        for selector in [
            &mut kubernetes.namespace_selector,
            &mut kubernetes.source_label_selector,
        ] {
            if let Ok(translated) = selector::label_selector(selector) {
                *selector = translated;
            }
        }
        self
    }

    fn figment(file: Option<&Path>, overrides: &Overrides) -> Figment {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = file {
            figment = figment.merge(Toml::file_exact(path));
        }
        let env = Env::prefixed(ENV_PREFIX)
            .filter(|key| key.as_str().contains(ENV_SEPARATOR))
            .split(ENV_SEPARATOR);
        figment.merge(env).merge(overrides.figment())
    }

    /// The first invalid value, in the order of the sections below, as a
    /// [`ConfigError::Invalid`] naming its key and where it was set.
    fn validate(&self, figment: &Figment) -> Result<(), ConfigError> {
        let problem = self
            .annotations
            .problem()
            .or_else(|| self.engine.problem())
            .or_else(|| self.kubernetes.namespaces_problem())
            .or_else(|| self.kubernetes.selectors_problem())
            .or_else(|| self.kubernetes.kinds_problem())
            .or_else(|| targets_problem(&self.targets.kinds))
            .or_else(|| self.kubernetes.field_manager_problem())
            .or_else(|| self.fingerprint.problem())
            .or_else(|| consul_problem(&self.sources.consul))
            .or_else(|| kubernetes_sources_problem(&self.sources.kubernetes))
            .or_else(|| self.leader_election.problem())
            .or_else(|| self.webhook.problem())
            .or_else(|| self.notify.problem())
            .or_else(|| self.log.problem());
        match problem {
            Some((key, problem)) => Err(ConfigError::Invalid {
                key,
                problem,
                origin: origin(figment.find_metadata(key), key),
            }),
            None => Ok(()),
        }
    }
}

// === validation, one section at a time ===

/// The offending key (dotted, from the top) and what is wrong with its value.
type Problem = Option<(&'static str, String)>;

impl AnnotationsConfig {
    fn problem(&self) -> Problem {
        if !is_dns_subdomain(&self.prefix) {
            return Some((
                "annotations.prefix",
                format!(
                    "{:?} is not a DNS subdomain (an annotation prefix)",
                    self.prefix
                ),
            ));
        }
        None
    }
}

/// The most config revisions a workload's history may keep: annotations share
/// 256 KiB per object with everyone else's.
const MAX_HISTORY: usize = 50;

impl EngineConfig {
    fn problem(&self) -> Problem {
        if !(self.stamps_per_second.is_finite() && self.stamps_per_second > 0.0) {
            return Some((
                "engine.stamps_per_second",
                format!("must be above 0, got {}", self.stamps_per_second),
            ));
        }
        if self.burst == 0 {
            return Some(("engine.burst", "must be at least 1".to_owned()));
        }
        if self.progress_deadline.is_zero() {
            return Some((
                "engine.progress_deadline",
                "must be above 0 (a rollout cannot complete in no time)".to_owned(),
            ));
        }
        if !(1..=MAX_HISTORY).contains(&self.history_limit) {
            return Some((
                "engine.history_limit",
                format!(
                    "must be between 1 and {MAX_HISTORY} (each revision is a few hundred bytes of a workload annotation), got {}",
                    self.history_limit
                ),
            ));
        }
        if self.max_delay < self.debounce {
            return Some((
                "engine.max_delay",
                format!(
                    "({}) must not be shorter than engine.debounce ({})",
                    duration::human(self.max_delay),
                    duration::human(self.debounce)
                ),
            ));
        }
        None
    }
}

impl KubernetesConfig {
    fn namespaces_problem(&self) -> Problem {
        let lists = [
            ("kubernetes.namespaces", &self.namespaces),
            ("kubernetes.ignore_namespaces", &self.ignore_namespaces),
        ];
        for (key, namespaces) in lists {
            for (i, namespace) in namespaces.iter().enumerate() {
                if !is_dns_label(namespace) {
                    return Some((
                        key,
                        format!("entry {i} ({namespace:?}) is not a namespace name"),
                    ));
                }
            }
        }
        if !self.namespace.is_empty() && !is_dns_label(&self.namespace) {
            return Some((
                "kubernetes.namespace",
                format!("{:?} is not a namespace name", self.namespace),
            ));
        }
        None
    }

    /// The label selectors, each as kube-apiserver would parse it.
    pub(crate) fn selectors_problem(&self) -> Problem {
        let selectors = [
            ("kubernetes.namespace_selector", &self.namespace_selector),
            (
                "kubernetes.source_label_selector",
                &self.source_label_selector,
            ),
        ];
        selectors.into_iter().find_map(|(key, text)| {
            selector::label_selector(text).err().map(|problem| {
                (
                    key,
                    format!("({text:?}) is not a label selector: {problem}"),
                )
            })
        })
    }

    /// Every `ignore_kinds` entry names a built-in kind.
    pub(crate) fn kinds_problem(&self) -> Problem {
        let unknown = self
            .ignore_kinds
            .iter()
            .find(|name| builtin_kind(name).is_none())?;
        let known: Vec<&str> = BUILTIN_KINDS.iter().map(|(kind, _)| *kind).collect();
        Some((
            "kubernetes.ignore_kinds",
            format!(
                "{unknown:?} is not a built-in kind ({}; a [[targets]] kind is turned off by removing its entry)",
                known.join(", ")
            ),
        ))
    }

    /// Whether the built-in kind `kind` (`CronJob`, …) is turned off by
    /// `ignore_kinds`.
    pub fn ignores_kind(&self, kind: &str) -> bool {
        ignores_kind(&self.ignore_kinds, kind)
    }

    /// Checked after `[[targets]]`, as it always was.
    fn field_manager_problem(&self) -> Problem {
        if self.field_manager.is_empty() {
            return Some(("kubernetes.field_manager", "must not be empty".to_owned()));
        }
        None
    }
}

/// The built-in workload kinds `kubernetes.ignore_kinds` turns off: each kind
/// and its plural (Reloader's `--ignored-workload-types` takes `jobs` and
/// `cronjobs`).
const BUILTIN_KINDS: [(&str, &str); 6] = [
    ("Deployment", "deployments"),
    ("StatefulSet", "statefulsets"),
    ("DaemonSet", "daemonsets"),
    ("CronJob", "cronjobs"),
    ("Job", "jobs"),
    ("Rollout", "rollouts"),
];

/// Whether `ignore_kinds` (`kubernetes.ignore_kinds`) names the built-in kind
/// `kind`.
pub(crate) fn ignores_kind(ignore_kinds: &[String], kind: &str) -> bool {
    ignore_kinds
        .iter()
        .any(|name| builtin_kind(name).is_some_and(|k| k.eq_ignore_ascii_case(kind)))
}

/// The built-in kind `name` names, by kind or plural, in any case.
fn builtin_kind(name: &str) -> Option<&'static str> {
    BUILTIN_KINDS
        .iter()
        .find(|(kind, plural)| name.eq_ignore_ascii_case(kind) || name.eq_ignore_ascii_case(plural))
        .map(|(kind, _)| *kind)
}

fn targets_problem(targets: &[TargetConfig]) -> Problem {
    for (i, target) in targets.iter().enumerate() {
        if target.kind.is_empty() || target.version.is_empty() {
            return Some((
                "targets",
                format!("entry {i}: version and kind must not be empty"),
            ));
        }
        if let Err(error) = crate::model::TemplatePath::parse(&target.template) {
            return Some(("targets", format!("entry {i} ({}): {error}", target.kind)));
        }
    }
    None
}

impl FingerprintConfig {
    fn problem(&self) -> Problem {
        if !is_dns_subdomain(&self.key_secret) {
            return Some((
                "fingerprint.key_secret",
                format!("{:?} is not a Secret name", self.key_secret),
            ));
        }
        None
    }
}

/// `[sources.consul]`, then each of its instances.
fn consul_problem(consul: &ConsulConfig) -> Problem {
    if let Some((key, problem)) = consul.problem(None) {
        return Some((consul_key(key), problem));
    }
    for (name, instance) in &consul.instances {
        if let Err(e) = crate::model::SourceName::new(format!("consul.{name}")) {
            return Some((
                "sources.consul.instances",
                format!("{name:?} cannot name a source: {e}"),
            ));
        }
        if let Some((key, problem)) = instance.problem(Some(name)) {
            return Some((
                "sources.consul.instances",
                format!("{name}.{key}: {problem}"),
            ));
        }
    }
    None
}

/// Each `[sources.kubernetes.<name>]`: its name must make a source name that no
/// built-in source has, and its entry must be valid.
pub(crate) fn kubernetes_sources_problem(
    sources: &BTreeMap<String, KubernetesSourceConfig>,
) -> Problem {
    const KEY: &str = "sources.kubernetes";
    for (name, source) in sources {
        if let Err(error) = crate::model::SourceName::new(name.as_str()) {
            return Some((KEY, format!("{name:?} cannot name a source: {error}")));
        }
        let builtin = ["configmap", "secret", "consul"];
        if builtin.contains(&name.as_str()) || name.starts_with("consul.") {
            return Some((
                KEY,
                format!("{name:?} is the name of a built-in source; choose another"),
            ));
        }
        if let Some((field, problem)) = source.problem() {
            return Some((KEY, format!("{name}.{field}: {problem}")));
        }
    }
    None
}

impl LeaderElectionConfig {
    fn problem(&self) -> Problem {
        if !is_dns_subdomain(&self.lease_name) {
            return Some((
                "leader_election.lease_name",
                format!("{:?} is not a Lease name", self.lease_name),
            ));
        }
        if self.retry_period.is_zero() {
            return Some(("leader_election.retry_period", "must be above 0".to_owned()));
        }
        if self.renew_deadline <= self.retry_period {
            return Some((
                "leader_election.renew_deadline",
                format!(
                    "({}) must be longer than leader_election.retry_period ({})",
                    duration::human(self.renew_deadline),
                    duration::human(self.retry_period)
                ),
            ));
        }
        if self.lease_duration <= self.renew_deadline {
            return Some((
                "leader_election.lease_duration",
                format!(
                    "({}) must be longer than leader_election.renew_deadline ({})",
                    duration::human(self.lease_duration),
                    duration::human(self.renew_deadline)
                ),
            ));
        }
        None
    }
}

impl WebhookConfig {
    fn problem(&self) -> Problem {
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

impl LogConfig {
    fn problem(&self) -> Problem {
        tracing_subscriber::EnvFilter::try_new(&self.filter)
            .err()
            .map(|e| ("log.filter", format!("is not a valid filter: {e}")))
    }
}

/// The full dotted key of a `[sources.consul]` key, for error messages.
fn consul_key(key: &'static str) -> &'static str {
    match key {
        "instances" => "sources.consul.instances",
        "address" => "sources.consul.address",
        "token" => "sources.consul.token",
        "wait" => "sources.consul.wait",
        "max_concurrent_queries" => "sources.consul.max_concurrent_queries",
        "query_burst" => "sources.consul.query_burst",
        "max_retry_interval" => "sources.consul.max_retry_interval",
        "timeout" => "sources.consul.timeout",
        "tls.cert_file" => "sources.consul.tls.cert_file",
        _ => "sources.consul",
    }
}

/// Reads the section at dotted `path` of `figment` as `T`: its default when the
/// section is absent; a field `T` does not know is an error, as in nudge's own
/// sections.
pub(crate) fn section<T>(figment: &Figment, path: &str) -> Result<T, ConfigError>
where
    T: serde::de::DeserializeOwned + Default,
{
    let Ok(value) = figment.find_value(path) else {
        return Ok(T::default());
    };
    let typed: T = figment
        .extract_inner(path)
        .map_err(|error| load_error(with_section(error, path)))?;
    let mut unknown = Vec::new();
    let _: Result<T, figment::Error> =
        serde_ignored::deserialize(&value, |field| unknown.push(field.to_string()));
    if let Some(field) = unknown.first() {
        let key = format!("{path}.{field}");
        return Err(ConfigError::Load {
            origin: origin(figment.find_metadata(&key), &key),
            key,
            problem: "unknown field".to_owned(),
        });
    }
    Ok(typed)
}

/// `error` from reading the section at `path`, its path made whole: figment
/// appends the section's path after the field's instead of before it.
fn with_section(mut error: figment::Error, path: &str) -> figment::Error {
    let section: Vec<String> = path.split('.').map(str::to_owned).collect();
    if error.path.ends_with(&section) {
        let field = error.path.len() - section.len();
        error.path.truncate(field);
    }
    error.path.splice(0..0, section);
    error
}

/// Where the section at `key` came from, for error messages: the file, or the
/// environment variables under it (`NUDGE_SOURCES__FILE__*`).
pub(crate) fn origin_of(figment: &Figment, key: &str) -> String {
    let origin = origin(figment.find_metadata(key), key);
    if origin.starts_with("environment variable ") {
        format!("{origin}{ENV_SEPARATOR}*")
    } else {
        origin
    }
}

fn load_error(error: figment::Error) -> ConfigError {
    let key = error.path.join(".").to_lowercase();
    let origin = origin(error.metadata.as_ref(), &key);
    ConfigError::Load {
        key,
        problem: error.kind.to_string(),
        origin,
    }
}

/// Describes where the value of `key` came from, for error messages: the file, or
/// the exact environment variable.
fn origin(metadata: Option<&Metadata>, key: &str) -> String {
    let Some(metadata) = metadata else {
        return "defaults".to_owned();
    };
    if let Some(figment::Source::File(path)) = &metadata.source {
        return format!("file {}", path.display());
    }
    if metadata.name.contains("environment") {
        let var = key.replace('.', ENV_SEPARATOR).to_uppercase();
        return format!("environment variable {ENV_PREFIX}{var}");
    }
    metadata.name.to_string()
}

/// Whether `value` is a DNS-1123 label (a namespace name): at most 63 characters
/// of `[a-z0-9-]`, not starting or ending with `-`.
pub(crate) fn is_dns_label(value: &str) -> bool {
    !value.contains('.') && value.len() <= 63 && is_dns_subdomain(value)
}

/// Whether `value` is a DNS-1123 subdomain (lowercase labels of `[a-z0-9-]`,
/// separated by dots, at most 253 characters).
pub(crate) fn is_dns_subdomain(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 253
        && value.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

#[cfg(test)]
// figment's Jail closures return figment::Error, which is large by design.
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;
    use figment::Jail;

    fn example_path() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml")
    }

    /// In a Jail too: Config::load reads `NUDGE_*`, which the Jail tests beside
    /// it set for the process while they run.
    #[test]
    fn example_file_equals_defaults() {
        Jail::expect_with(|_| {
            let config = Config::load(Some(&example_path()), &Overrides::default())
                .expect("config.example.toml loads");
            assert_eq!(config, Config::default());
            Ok(())
        });
    }

    #[test]
    fn example_file_lists_every_key() {
        let text = std::fs::read_to_string(example_path()).unwrap();
        let example: toml::Table = toml::from_str(&text).unwrap();
        let defaults = toml::Table::try_from(Config::default()).unwrap();
        assert_eq!(
            keys(&example),
            keys(&defaults),
            "config.example.toml and Config::default() differ in keys"
        );
    }

    fn keys(table: &toml::Table) -> Vec<String> {
        let mut out = Vec::new();
        for (key, value) in table {
            match value.as_table() {
                Some(inner) => out.extend(keys(inner).into_iter().map(|k| format!("{key}.{k}"))),
                None => out.push(key.clone()),
            }
        }
        out.sort();
        out
    }

    #[test]
    fn env_overrides_file_and_flags_override_env() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "nudge.toml",
                "[engine]\ndebounce = \"10s\"\nburst = 7\n[log]\nformat = \"plain\"\n",
            )?;
            jail.set_env("NUDGE_ENGINE__BURST", "9");
            jail.set_env("NUDGE_LOG__FORMAT", "json");
            let overrides = Overrides {
                log_format: Some(LogFormat::Plain),
                log_filter: None,
            };
            let config = Config::load(Some(Path::new("nudge.toml")), &overrides).unwrap();
            assert_eq!(config.engine.debounce, Duration::from_secs(10));
            assert_eq!(config.engine.burst, 9);
            assert_eq!(config.log.format, LogFormat::Plain);
            Ok(())
        });
    }

    #[test]
    fn env_vars_without_section_separator_are_not_config() {
        Jail::expect_with(|jail| {
            jail.set_env("NUDGE_TEST_KUBECONFIG", "/tmp/kubeconfig");
            jail.set_env("NUDGE_CONFIG", "/etc/nudge.toml");
            assert_eq!(
                Config::load(None, &Overrides::default()).unwrap(),
                Config::default()
            );
            Ok(())
        });
    }

    #[test]
    fn unknown_key_in_file_names_key_and_file() {
        Jail::expect_with(|jail| {
            jail.create_file("nudge.toml", "[engine]\ndebounse = \"10s\"\n")?;
            let err = Config::load(Some(Path::new("nudge.toml")), &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("debounse"), "{err}");
            assert!(err.contains("nudge.toml"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn engine_window_parses_and_a_bad_one_names_the_key() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "nudge.toml",
                "[engine]\nwindow = \"Mon-Fri 22:00-06:00 Europe/Berlin\"\n",
            )?;
            let config = Config::load(Some(Path::new("nudge.toml")), &Overrides::default())
                .expect("a valid window");
            let window = config.engine.window.expect("set");
            assert_eq!(window.zone(), "Europe/Berlin");
            jail.set_env("NUDGE_ENGINE__WINDOW", "Mon-Fri 22:00 Europe/Berlin");
            let err = Config::load(Some(Path::new("nudge.toml")), &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("engine.window"), "{err}");
            assert!(err.contains("NUDGE_ENGINE__WINDOW"), "{err}");
            assert!(err.contains("invalid span"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn wrong_type_in_env_names_key_and_variable() {
        Jail::expect_with(|jail| {
            jail.set_env("NUDGE_ENGINE__BURST", "lots");
            let err = Config::load(None, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("burst"), "{err}");
            assert!(err.contains("NUDGE_ENGINE__BURST"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn unknown_section_in_env_is_rejected() {
        Jail::expect_with(|jail| {
            jail.set_env("NUDGE_ENGIN__BURST", "3");
            let err = Config::load(None, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("engin"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn unparsable_duration_names_key() {
        Jail::expect_with(|jail| {
            jail.create_file("nudge.toml", "[engine]\ndebounce = \"soon\"\n")?;
            let err = Config::load(Some(Path::new("nudge.toml")), &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("debounce"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn out_of_range_value_names_key_and_origin() {
        Jail::expect_with(|jail| {
            jail.set_env("NUDGE_ENGINE__BURST", "0");
            let err = Config::load(None, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("engine.burst"), "{err}");
            assert!(err.contains("NUDGE_ENGINE__BURST"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn max_delay_shorter_than_debounce_is_rejected() {
        Jail::expect_with(|jail| {
            jail.create_file("nudge.toml", "[engine]\ndebounce = \"2m\"\n")?;
            let err = Config::load(Some(Path::new("nudge.toml")), &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("engine.max_delay"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn bad_prefix_is_rejected() {
        Jail::expect_with(|jail| {
            jail.set_env("NUDGE_ANNOTATIONS__PREFIX", "Not_A_Domain");
            let err = Config::load(None, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("annotations.prefix"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn namespace_list_from_env_is_validated() {
        Jail::expect_with(|jail| {
            jail.set_env("NUDGE_KUBERNETES__NAMESPACES", "[team-a, Team_B]");
            let err = Config::load(None, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("kubernetes.namespaces"), "{err}");
            assert!(err.contains("Team_B"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn a_selector_that_does_not_parse_names_its_key_and_where_it_came_from() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "nudge.toml",
                "[kubernetes]\nnamespace_selector = \"team in (a,b\"\n",
            )?;
            let err = Config::load(Some(Path::new("nudge.toml")), &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("kubernetes.namespace_selector"), "{err}");
            assert!(err.contains("expected ',' or ')'"), "{err}");
            assert!(err.contains("nudge.toml"), "{err}");
            jail.set_env("NUDGE_KUBERNETES__SOURCE_LABEL_SELECTOR", "app=web)");
            let err = Config::load(None, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("kubernetes.source_label_selector"), "{err}");
            assert!(
                err.contains("NUDGE_KUBERNETES__SOURCE_LABEL_SELECTOR"),
                "{err}"
            );
            Ok(())
        });
    }

    #[test]
    fn reloaders_key_value_selectors_are_read_in_kubernetes_form() {
        Jail::expect_with(|jail| {
            jail.set_env("NUDGE_KUBERNETES__SOURCE_LABEL_SELECTOR", "app:web,tier:*");
            let config = Config::load(None, &Overrides::default()).unwrap();
            assert_eq!(config.kubernetes.source_label_selector, "app=web,tier");
            Ok(())
        });
    }

    #[test]
    fn ignore_kinds_takes_built_in_kinds_and_plurals_and_names_a_wrong_one() {
        Jail::expect_with(|jail| {
            jail.set_env("NUDGE_KUBERNETES__IGNORE_KINDS", "[jobs, CronJob, rollout]");
            let config = Config::load(None, &Overrides::default()).unwrap();
            for kind in ["Job", "CronJob", "Rollout"] {
                assert!(config.kubernetes.ignores_kind(kind), "{kind}");
            }
            assert!(!config.kubernetes.ignores_kind("Deployment"));
            jail.set_env("NUDGE_KUBERNETES__IGNORE_KINDS", "[jobs, Widget]");
            let err = Config::load(None, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("kubernetes.ignore_kinds"), "{err}");
            assert!(err.contains("\"Widget\" is not a built-in kind"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn configmaps_and_secrets_are_on_unless_turned_off() {
        Jail::expect_with(|jail| {
            let config = Config::load(None, &Overrides::default()).unwrap();
            assert!(config.sources.configmap.enabled && config.sources.secret.enabled);
            jail.set_env("NUDGE_SOURCES__CONFIGMAP__ENABLED", "false");
            let config = Config::load(None, &Overrides::default()).unwrap();
            assert!(!config.sources.configmap.enabled && config.sources.secret.enabled);
            assert!(config.sources.custom.is_empty());
            Ok(())
        });
    }

    #[test]
    fn durations_print_as_written_and_read_back_to_the_same_configuration() {
        let mut config = Config::default();
        config.webhook.certificate_validity = Duration::from_secs(365 * 86_400);
        config.engine.max_delay = Duration::from_secs(90 * 60);
        let text = toml::to_string(&config).unwrap();
        assert!(text.contains("certificate_validity = \"365d\""), "{text}");
        assert!(text.contains("max_delay = \"1h 30m\""), "{text}");
        let read: Config = Figment::from(Toml::string(&text)).extract().unwrap();
        assert_eq!(read, config);
    }

    #[test]
    fn consul_instances_read_from_toml() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "nudge.toml",
                r#"
[sources.consul]
enabled = true
address = "https://consul.service:8501"
max_concurrent_queries = 32

[sources.consul.tls]
ca_file = "/etc/consul/ca.pem"

[sources.consul.instances.eu]
address = "https://consul.eu.example.com:8501"
wait = "2m"
"#,
            )?;
            let config =
                Config::load(Some(Path::new("nudge.toml")), &Overrides::default()).unwrap();
            let consul = &config.sources.consul;
            assert_eq!(consul.enabled, Some(true));
            assert_eq!(consul.max_concurrent_queries, 32);
            assert_eq!(consul.tls.ca_file, "/etc/consul/ca.pem");
            let eu = &consul.instances["eu"];
            assert_eq!(eu.address, "https://consul.eu.example.com:8501");
            assert_eq!(eu.wait, Duration::from_secs(120));
            assert_eq!(eu.enabled, None);
            assert_eq!(eu.max_concurrent_queries, 64);
            Ok(())
        });
    }

    #[test]
    fn consul_env_vars_reach_the_default_and_extra_instances() {
        Jail::expect_with(|jail| {
            jail.set_env("NUDGE_SOURCES__CONSUL__ENABLED", "true");
            jail.set_env("NUDGE_SOURCES__CONSUL__ADDRESS", "http://consul:8500");
            jail.set_env("NUDGE_SOURCES__CONSUL__TLS__VERIFY", "false");
            jail.set_env(
                "NUDGE_SOURCES__CONSUL__INSTANCES__EU__ADDRESS",
                "http://eu:8500",
            );
            let config = Config::load(None, &Overrides::default()).unwrap();
            let consul = &config.sources.consul;
            assert_eq!(consul.enabled, Some(true));
            assert_eq!(consul.address, "http://consul:8500");
            assert!(!consul.tls.verify);
            assert_eq!(consul.instances["eu"].address, "http://eu:8500");
            Ok(())
        });
    }

    #[test]
    fn consul_token_is_never_printed() {
        let config = ConsulConfig {
            token: ConsulToken("s3cr3t".to_owned()),
            ..ConsulConfig::default()
        };
        assert!(!format!("{config:?}").contains("s3cr3t"));
    }

    #[test]
    fn consul_instance_without_address_is_rejected() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "nudge.toml",
                "[sources.consul.instances.eu]\nwait = \"1m\"\n",
            )?;
            let err = Config::load(Some(Path::new("nudge.toml")), &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("sources.consul.instances"), "{err}");
            assert!(err.contains("eu.address"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn consul_instance_name_must_make_a_source_name() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "nudge.toml",
                "[sources.consul.instances.eu-west]\naddress = \"http://x:8500\"\n",
            )?;
            let err = Config::load(Some(Path::new("nudge.toml")), &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("eu-west"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn consul_wait_beyond_consuls_limit_names_key_and_variable() {
        Jail::expect_with(|jail| {
            jail.set_env("NUDGE_SOURCES__CONSUL__WAIT", "11m");
            let err = Config::load(None, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("sources.consul.wait"), "{err}");
            assert!(err.contains("NUDGE_SOURCES__CONSUL__WAIT"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn kubernetes_sources_read_from_toml_with_defaults_for_what_is_left_out() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "nudge.toml",
                r#"
[sources.kubernetes.flags]
group = "example.com"
version = "v1"
kind = "FeatureFlags"
fields = ["/spec", "/status/objects"]
secret = true

[sources.kubernetes.settings]
version = "v1"
kind = "ConfigMap"
"#,
            )?;
            let config =
                Config::load(Some(Path::new("nudge.toml")), &Overrides::default()).unwrap();
            let sources = &config.sources.kubernetes;
            let flags = &sources["flags"];
            assert_eq!(flags.api_version(), "example.com/v1");
            assert_eq!(flags.kind, "FeatureFlags");
            assert_eq!(flags.fields, ["/spec", "/status/objects"]);
            assert!(flags.secret);
            assert_eq!(
                sources["settings"],
                KubernetesSourceConfig::new("", "v1", "ConfigMap")
            );
            assert_eq!(sources["settings"].api_version(), "v1");
            assert!(
                config.sources.custom.is_empty(),
                "{:?}",
                config.sources.custom
            );
            Ok(())
        });
    }

    #[test]
    fn a_kubernetes_source_can_be_configured_from_env() {
        Jail::expect_with(|jail| {
            jail.set_env("NUDGE_SOURCES__KUBERNETES__FLAGS__GROUP", "example.com");
            jail.set_env("NUDGE_SOURCES__KUBERNETES__FLAGS__VERSION", "v1");
            jail.set_env("NUDGE_SOURCES__KUBERNETES__FLAGS__KIND", "FeatureFlags");
            jail.set_env("NUDGE_SOURCES__KUBERNETES__FLAGS__FIELDS", "[/spec]");
            let config = Config::load(None, &Overrides::default()).unwrap();
            let flags = &config.sources.kubernetes["flags"];
            assert_eq!(flags.kind, "FeatureFlags");
            assert_eq!(flags.fields, ["/spec"]);
            Ok(())
        });
    }

    /// Each bad entry names `sources.kubernetes`, the entry's field and where
    /// it was written.
    #[test]
    fn a_bad_kubernetes_source_names_its_key_and_file() {
        let entry = |name: &str, body: &str| {
            format!("[sources.kubernetes.{name}]\nversion = \"v1\"\nkind = \"Gizmo\"\n{body}")
        };
        let cases = [
            (
                entry("flags", "fields = [\"spec\"]"),
                "flags.fields: entry 0",
            ),
            (
                entry("flags", "fields = [\"/a~2\"]"),
                "flags.fields: entry 0",
            ),
            (entry("flags", "group = \"Example_Com\""), "flags.group"),
            (
                "[sources.kubernetes.flags]\nversion = \"v1\"\nkind = \"a gizmo\"\n".to_owned(),
                "flags.kind",
            ),
            (
                "[sources.kubernetes.flags]\nversion = \"V 1\"\nkind = \"Gizmo\"\n".to_owned(),
                "flags.version",
            ),
            (
                entry("feature-flags", ""),
                "\"feature-flags\" cannot name a source",
            ),
            (entry("secret", ""), "built-in source"),
            (entry("\"consul.eu\"", ""), "built-in source"),
        ];
        for (toml, expected) in cases {
            Jail::expect_with(|jail| {
                jail.create_file("nudge.toml", &toml)?;
                let err = Config::load(Some(Path::new("nudge.toml")), &Overrides::default())
                    .unwrap_err()
                    .to_string();
                assert!(err.contains("sources.kubernetes"), "{err}");
                assert!(err.contains(expected), "{expected}: {err}");
                assert!(err.contains("nudge.toml"), "{err}");
                Ok(())
            });
        }
    }

    #[test]
    fn the_secrets_store_csi_preset_fills_in_its_entry_and_keeps_secret() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "nudge.toml",
                "[sources.kubernetes.csi]\npreset = \"secrets-store-csi\"\n",
            )?;
            let config =
                Config::load(Some(Path::new("nudge.toml")), &Overrides::default()).unwrap();
            let csi = &config.sources.kubernetes["csi"];
            assert_eq!(
                *csi,
                KubernetesSourceConfig::preset(KubernetesSourcePreset::SecretsStoreCsi)
            );
            let resolved = csi.resolved();
            assert_eq!(resolved.api_version(), "secrets-store.csi.x-k8s.io/v1");
            assert_eq!(resolved.kind, "SecretProviderClassPodStatus");
            assert_eq!(resolved.fields, ["/status/objects"]);
            assert_eq!(resolved.reference_field, "/status/secretProviderClassName");
            assert_eq!(
                resolved.discover,
                Some(DiscoverConfig::csi(
                    "secrets-store.csi.k8s.io",
                    "secretProviderClass"
                ))
            );
            assert!(!resolved.secret);
            assert_eq!(csi.problem(), None);
            // Events name the class a reference names, not its status objects.
            assert_eq!(
                csi.referenced_kind(),
                Some((
                    "secrets-store.csi.x-k8s.io/v1".to_owned(),
                    "SecretProviderClass".to_owned()
                ))
            );
            let mut by_field = KubernetesSourceConfig::new("example.com", "v1", "Gizmo");
            assert_eq!(
                by_field.referenced_kind(),
                Some(("example.com/v1".to_owned(), "Gizmo".to_owned()))
            );
            by_field.reference_field = "/spec/owner".to_owned();
            assert_eq!(by_field.referenced_kind(), None);
            Ok(())
        });
    }

    /// A discovery rule and a reference field are validated naming their key.
    #[test]
    fn a_bad_discovery_rule_or_preset_names_its_key() {
        let gizmo = "[sources.kubernetes.gizmo]\nversion = \"v1\"\nkind = \"Gizmo\"\n";
        let cases = [
            (
                format!("{gizmo}reference_field = \"status\"\n"),
                "gizmo.reference_field",
            ),
            (
                format!(
                    "{gizmo}[sources.kubernetes.gizmo.discover]\ncsi_driver = \"Not A Driver\"\nvolume_attribute = \"x\"\n"
                ),
                "gizmo.discover.csi_driver",
            ),
            (
                format!(
                    "{gizmo}[sources.kubernetes.gizmo.discover]\ncsi_driver = \"d.example.com\"\nvolume_attribute = \"\"\n"
                ),
                "gizmo.discover.volume_attribute",
            ),
            (
                "[sources.kubernetes.csi]\npreset = \"secrets-store-csi\"\nkind = \"Gizmo\"\n"
                    .to_owned(),
                "csi.kind: set by preset \"secrets-store-csi\"",
            ),
            (
                "[sources.kubernetes.csi]\npreset = \"vault\"\n".to_owned(),
                "preset",
            ),
        ];
        for (toml, expected) in cases {
            Jail::expect_with(|jail| {
                jail.create_file("nudge.toml", &toml)?;
                let err = Config::load(Some(Path::new("nudge.toml")), &Overrides::default())
                    .unwrap_err()
                    .to_string();
                assert!(err.contains("sources.kubernetes"), "{err}");
                assert!(err.contains(expected), "{expected}: {err}");
                Ok(())
            });
        }
    }

    #[test]
    fn a_kubernetes_source_without_a_kind_names_the_missing_field() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "nudge.toml",
                "[sources.kubernetes.flags]\nversion = \"v1\"\n",
            )?;
            let err = Config::load(Some(Path::new("nudge.toml")), &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("sources.kubernetes"), "{err}");
            assert!(err.contains("flags.kind: missing"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn renew_deadline_not_shorter_than_lease_duration_is_rejected() {
        Jail::expect_with(|jail| {
            jail.set_env("NUDGE_LEADER_ELECTION__RENEW_DEADLINE", "20s");
            let err = Config::load(None, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("leader_election.lease_duration"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn admin_bind_from_env_is_a_socket_address() {
        Jail::expect_with(|jail| {
            jail.set_env("NUDGE_ADMIN__BIND", "127.0.0.1:0");
            let config = Config::load(None, &Overrides::default()).unwrap();
            assert_eq!(config.admin.bind, SocketAddr::from(([127, 0, 0, 1], 0)));
            jail.set_env("NUDGE_ADMIN__BIND", "localhost");
            let err = Config::load(None, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("admin.bind"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn webhook_is_off_by_default_and_configurable_from_env() {
        Jail::expect_with(|jail| {
            assert!(!Config::default().webhook.enabled);
            jail.set_env("NUDGE_WEBHOOK__ENABLED", "true");
            jail.set_env("NUDGE_WEBHOOK__BIND", "127.0.0.1:9443");
            jail.set_env("NUDGE_WEBHOOK__EXTRA_NAMES", "[127.0.0.1]");
            let config = Config::load(None, &Overrides::default()).unwrap();
            assert!(config.webhook.enabled);
            assert_eq!(
                config.webhook.bind,
                SocketAddr::from(([127, 0, 0, 1], 9443))
            );
            assert_eq!(config.webhook.extra_names, vec!["127.0.0.1".to_owned()]);
            Ok(())
        });
    }

    #[test]
    fn webhook_renewal_window_must_fit_in_the_validity() {
        Jail::expect_with(|jail| {
            jail.set_env("NUDGE_WEBHOOK__RENEW_BEFORE", "400days");
            let err = Config::load(None, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("webhook.renew_before"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn notify_is_off_by_default_and_configurable_from_env() {
        Jail::expect_with(|jail| {
            assert!(!Config::default().notify.enabled);
            assert_eq!(Config::default().notify.format, NotifyFormat::Json);
            jail.set_env("NUDGE_NOTIFY__ENABLED", "true");
            jail.set_env("NUDGE_NOTIFY__URL", "https://hooks.example.com/T0/B0/tok3n");
            jail.set_env("NUDGE_NOTIFY__FORMAT", "gchat");
            jail.set_env("NUDGE_NOTIFY__TIMEOUT", "3s");
            jail.set_env("NUDGE_NOTIFY__ADDITIONAL_INFO", "prod-eu");
            let config = Config::load(None, &Overrides::default()).unwrap();
            let notify = &config.notify;
            assert!(notify.enabled);
            assert_eq!(notify.url.0, "https://hooks.example.com/T0/B0/tok3n");
            assert_eq!(notify.format, NotifyFormat::Gchat);
            assert_eq!(notify.timeout, Duration::from_secs(3));
            assert_eq!(notify.additional_info, "prod-eu");
            Ok(())
        });
    }

    #[test]
    fn notify_formats_are_named_in_lower_case() {
        Jail::expect_with(|jail| {
            for format in [
                NotifyFormat::Slack,
                NotifyFormat::Teams,
                NotifyFormat::Gchat,
                NotifyFormat::Json,
            ] {
                jail.set_env("NUDGE_NOTIFY__FORMAT", format.as_str());
                let config = Config::load(None, &Overrides::default()).unwrap();
                assert_eq!(config.notify.format, format);
            }
            jail.set_env("NUDGE_NOTIFY__FORMAT", "raw");
            let err = Config::load(None, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("notify.format"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn notify_enabled_without_a_url_is_rejected() {
        Jail::expect_with(|jail| {
            jail.create_file("nudge.toml", "[notify]\nenabled = true\n")?;
            let err = Config::load(Some(Path::new("nudge.toml")), &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("notify.enabled"), "{err}");
            assert!(err.contains("notify.url_file"), "{err}");
            assert!(
                err.contains("nudge.toml"),
                "names where enabled was set: {err}"
            );
            Ok(())
        });
    }

    #[test]
    fn notify_url_and_url_file_together_are_rejected() {
        Jail::expect_with(|jail| {
            jail.set_env("NUDGE_NOTIFY__URL", "https://hooks.example.com/x");
            jail.set_env("NUDGE_NOTIFY__URL_FILE", "/etc/nudge/notify/url");
            let err = Config::load(None, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("notify.url"), "{err}");
            assert!(err.contains("not both"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn a_notify_url_that_is_not_http_is_rejected_without_repeating_it() {
        for (url, problem) in [
            ("hooks.example.com/s3cr3t", "is not a URL"),
            ("ftp://hooks.example.com/s3cr3t", "http"),
            ("file:///s3cr3t", "http"),
        ] {
            Jail::expect_with(|jail| {
                jail.set_env("NUDGE_NOTIFY__ENABLED", "true");
                jail.set_env("NUDGE_NOTIFY__URL", url);
                let err = Config::load(None, &Overrides::default())
                    .unwrap_err()
                    .to_string();
                assert!(err.contains("notify.url"), "{err}");
                assert!(err.contains(problem), "{url}: {err}");
                assert!(err.contains("NUDGE_NOTIFY__URL"), "{err}");
                assert!(!err.contains("s3cr3t"), "the URL is a secret: {err}");
                Ok(())
            });
        }
    }

    #[test]
    fn a_zero_notify_timeout_is_rejected() {
        Jail::expect_with(|jail| {
            jail.set_env("NUDGE_NOTIFY__TIMEOUT", "0s");
            let err = Config::load(None, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("notify.timeout"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn the_webhook_url_is_never_printed() {
        let config = NotifyConfig {
            url: WebhookUrl("https://hooks.example.com/s3cr3t".to_owned()),
            ..NotifyConfig::default()
        };
        assert!(!format!("{config:?}").contains("s3cr3t"));
    }

    #[test]
    fn missing_explicit_file_is_an_error() {
        let err = Config::load(
            Some(Path::new("/nonexistent/nudge.toml")),
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(matches!(err, ConfigError::MissingFile { .. }));
    }
}
