//! `[sources]`: the built-in sources' switches, `[sources.kubernetes.<name>]`,
//! and custom sources' sections (Consul's is in `consul`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{ConsulConfig, Problem, is_dns_label, is_dns_subdomain};

/// `[sources]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
#[non_exhaustive]
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
    pub(crate) fn as_str(self) -> &'static str {
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
    pub(crate) fn resolved(&self) -> Self {
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
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// What is wrong with this entry, if anything (field name and problem).
    pub(super) fn problem(&self) -> Option<(&'static str, String)> {
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
