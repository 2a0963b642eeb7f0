//! nudge's configuration: one [`Config`] loaded by figment from defaults, a TOML
//! file, `NUDGE_<SECTION>__<KEY>` environment variables and CLI flags, in that order
//! of precedence (later wins). `config.example.toml` mirrors [`Config::default`].

use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Serialized, Toml};
use figment::{Figment, Metadata};
use serde::{Deserialize, Serialize};

mod admin;
mod annotations;
mod consul;
mod duration;
mod engine;
mod fingerprint;
mod kubernetes;
mod leader_election;
mod logging;
mod notify;
mod selector;
mod sources;
mod targets;
mod webhook;

pub use crate::snapshot::SnapshotMode;
pub use admin::AdminConfig;
pub use annotations::AnnotationsConfig;
pub use consul::{ConsulConfig, ConsulTlsConfig};
pub use engine::EngineConfig;
pub use fingerprint::FingerprintConfig;
pub use kubernetes::KubernetesConfig;
pub(crate) use kubernetes::ignores_kind;
pub use leader_election::LeaderElectionConfig;
pub use logging::{LogConfig, LogFormat};
pub(crate) use notify::parse_webhook_url;
pub use notify::{NotifyConfig, NotifyFormat};
pub(crate) use sources::{BUILTIN_SOURCE_SECTIONS, kubernetes_sources_problem};
pub use sources::{
    BuiltinSourceConfig, DiscoverConfig, KubernetesSourceConfig, KubernetesSourcePreset,
    SourcesConfig,
};
pub use targets::{TargetConfig, TargetsConfig};
pub use webhook::WebhookConfig;

pub use crate::window::{Window, WindowError};

use consul::consul_problem;
use targets::targets_problem;

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
#[non_exhaustive]
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

/// Values from CLI flags; `None` leaves the lower layers' value.
#[derive(Debug, Clone, Default)]
pub(crate) struct Overrides {
    /// `--log-format`
    pub(crate) log_format: Option<LogFormat>,
    /// `--log-filter`
    pub(crate) log_filter: Option<String>,
}

impl Overrides {
    /// The flags as a figment provider layer, keyed by dotted config keys, to
    /// merge over [`Config::providers`].
    pub(crate) fn figment(&self) -> Figment {
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

/// A secret value of the configuration (a Consul ACL token; a notification
/// webhook URL, which embeds the token that lets anyone post): never printed
/// (`Debug` and [`Controller::effective_config`](crate::Controller::effective_config)
/// show `<redacted>`), and read only by nudge.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub(crate) String);

impl Secret {
    /// Wraps a value given in code rather than in the configuration.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// Whether no value is set.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() { "\"\"" } else { REDACTED })
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
    pub(crate) fn redacted(&self) -> Self {
        fn redact_consul(consul: &mut ConsulConfig) {
            if !consul.token.is_empty() {
                consul.token = Secret::new(REDACTED);
            }
            consul.instances.values_mut().for_each(redact_consul);
        }
        let mut config = self.clone();
        redact_consul(&mut config.sources.consul);
        if !config.notify.url.is_empty() {
            config.notify.url = Secret::new(REDACTED);
        }
        config
    }

    /// Loads defaults, then `file` (if given it must exist), then `NUDGE_*`
    /// environment variables, and validates the result.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        Self::from_figment(&Self::providers(file)?)
    }

    /// nudge's configuration providers: defaults, then `file` (if given it must
    /// exist), then `NUDGE_*` environment variables. Merge providers of your
    /// own into it before [`from_figment`](Self::from_figment).
    pub fn providers(file: Option<&Path>) -> Result<Figment, ConfigError> {
        if let Some(path) = file
            && !path.exists()
        {
            return Err(ConfigError::MissingFile {
                path: path.to_owned(),
            });
        }
        Ok(Self::figment(file))
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

    fn figment(file: Option<&Path>) -> Figment {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = file {
            figment = figment.merge(Toml::file_exact(path));
        }
        let env = Env::prefixed(ENV_PREFIX)
            .filter(|key| key.as_str().contains(ENV_SEPARATOR))
            .split(ENV_SEPARATOR);
        figment.merge(env)
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
mod tests;
