//! `[[targets]]` (or `[targets]` with `kinds` and custom targets' sections).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::Problem;

/// `targets`: as an array (`[[targets]]`), the kinds to stamp. To configure
/// custom targets as well, a table: the kinds under `[[targets.kinds]]` and
/// each custom target's section under `[targets.<key>]` (TOML cannot mix the two
/// forms in one document).
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
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
#[non_exhaustive]
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

impl TargetConfig {
    /// The kind `group/version` `kind`, its pod template at `spec.template`
    /// (set `template` for another place).
    pub fn new(
        group: impl Into<String>,
        version: impl Into<String>,
        kind: impl Into<String>,
    ) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            template: default_template_path(),
        }
    }
}

fn default_template_path() -> String {
    "spec.template".to_owned()
}

pub(super) fn targets_problem(targets: &[TargetConfig]) -> Problem {
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
