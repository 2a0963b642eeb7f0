//! Every annotation scheme nudge understands, parsed into typed [`StampSpec`]s.
//!
//! - **Native** (design §2, prefix `nudge.dev`, configurable): `auto`, explicit
//!   `<source>-<slot>: <reference>`, `exclude`, `debounce`, `min-interval`.
//! - **Wave** (design §4): `wave.pusher.com/update-on-config-change` plus
//!   `extra-configmaps` / `extra-secrets`.
//! - **k8s-consul-mutator**: `k8s-consul-mutator.io/key-<name>`, opt-out `skip`.
//! - **Reloader**: `reloader.stakater.com/auto`, `{configmap,secret}.reloader.stakater.com/{auto,reload}`.
//!
//! Annotations are read from the workload's own metadata and from its pod template;
//! the workload's metadata wins when both carry the same key. Every annotation is
//! parsed on its own: an invalid one becomes an [`AnnotationError`] and never stops
//! its valid siblings.
//!
//! The names nudge writes (`<prefix>/checksum-<slot>`, `<prefix>/config-hash`,
//! `<prefix>/last-updated`, `wave.pusher.com/config-hash`,
//! `k8s-consul-mutator.io/checksum-<name>` and `…/last-updated`) are reserved: they
//! never parse as references and never produce errors, so nudge can re-read a
//! workload it stamped. Under the native prefix every other unknown name is an
//! error; under the other tools' prefixes unknown names are left alone (they may
//! belong to features nudge does not emulate).
//!
//! `<prefix>/ignore` belongs on ConfigMaps and Secrets (see [`is_ignored`]); on a
//! workload it means nothing and is skipped silently.
//!
//! Choices worth knowing:
//! - One [`StampSpec`] per output. Inputs of the combined hashes are merged per
//!   object (keys union, optional only if every occurrence is), so Reloader's
//!   fallback and `<prefix>/auto` share one `<prefix>/config-hash`.
//! - `<prefix>/auto: "true"` and Wave's `update-on-config-change: "true"` always
//!   yield their spec, even with no inputs (the stamp is then the hash of nothing),
//!   so a workload whose last reference is removed is still kept in sync.
//! - `<prefix>/exclude` narrows `<prefix>/auto` only, not Reloader's `auto`.
//! - Yes/no annotations of every scheme accept exactly `"true"` and `"false"`;
//!   anything else is reported and counts as `"false"`.
//! - Wave's extras are merged with discovered objects per (namespace, name).
//! - Two references that would write one output (same slot, or two Reloader
//!   objects with one env var name, or a native and a k8s-consul-mutator checksum
//!   under one key when the native prefix is `k8s-consul-mutator.io`) are reported
//!   on every annotation involved and none of them is used.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::PodSpec;

use crate::discovery::{self, Discovered};
use crate::fingerprint::{self, Algorithm, ObjectKind};
use crate::model::{
    Combine, Gate, Input, KeySelection, MAX_ANNOTATION_NAME_LEN, Name, NameError, Origin, Output,
    Reference, Scope, Slot, SourceCatalog, SourceName, StampSpec, Tracked, TrackedItem,
    WAVE_SCHEDULING_DISABLED, Workload,
};

// === names ===

/// The default native annotation prefix.
pub const DEFAULT_PREFIX: &str = "nudge.dev";

/// Longest slot: what `checksum-<slot>` leaves of a 63-character annotation name.
pub const MAX_SLOT_LEN: usize = MAX_ANNOTATION_NAME_LEN - CHECKSUM_PREFIX.len();

const AUTO: &str = "auto";
const EXCLUDE: &str = "exclude";
const DEBOUNCE: &str = "debounce";
const MIN_INTERVAL: &str = "min-interval";
const IGNORE: &str = "ignore";
const CONFIG_HASH: &str = "config-hash";
const LAST_UPDATED: &str = "last-updated";
const RUN_ON_CHANGE: &str = "run-on-change";
const RELOADER_STATE: &str = "reloader-state";
const SCHEDULING_GATE: &str = "scheduling-gate";
const AWAITING_CONFIG: &str = "awaiting-config";
const CHECKSUM_PREFIX: &str = "checksum-";

/// Wave: `"true"` makes the workload Wave-managed.
pub const WAVE_UPDATE_ON_CONFIG_CHANGE: &str = "wave.pusher.com/update-on-config-change";
/// Wave: comma list of extra ConfigMaps (`name` or `namespace/name`).
pub const WAVE_EXTRA_CONFIGMAPS: &str = "wave.pusher.com/extra-configmaps";
/// Wave: comma list of extra Secrets (`name` or `namespace/name`).
pub const WAVE_EXTRA_SECRETS: &str = "wave.pusher.com/extra-secrets";
/// Wave: the pod-template annotation nudge writes in Wave's format.
pub const WAVE_CONFIG_HASH: &str = "wave.pusher.com/config-hash";

/// k8s-consul-mutator: the annotation prefix.
pub const MUTATOR_PREFIX: &str = "k8s-consul-mutator.io/";
/// k8s-consul-mutator: present (any value) opts the workload out.
pub const MUTATOR_SKIP: &str = "k8s-consul-mutator.io/skip";
/// k8s-consul-mutator: the workload-metadata timestamp nudge writes.
pub const MUTATOR_LAST_UPDATED: &str = "k8s-consul-mutator.io/last-updated";
const MUTATOR_KEY_PREFIX: &str = "key-";

/// Reloader: `"true"` tracks every ConfigMap and Secret the pod template uses.
pub const RELOADER_AUTO: &str = "reloader.stakater.com/auto";
/// Reloader: `"true"` tracks every ConfigMap the pod template uses.
pub const RELOADER_CONFIGMAP_AUTO: &str = "configmap.reloader.stakater.com/auto";
/// Reloader: `"true"` tracks every Secret the pod template uses.
pub const RELOADER_SECRET_AUTO: &str = "secret.reloader.stakater.com/auto";
/// Reloader: comma list of ConfigMap names to track.
pub const RELOADER_CONFIGMAP_RELOAD: &str = "configmap.reloader.stakater.com/reload";
/// Reloader: comma list of Secret names to track.
pub const RELOADER_SECRET_RELOAD: &str = "secret.reloader.stakater.com/reload";
/// Reloader: `"true"` on a ConfigMap or Secret makes its changes stamp nothing.
pub const RELOADER_IGNORE: &str = "reloader.stakater.com/ignore";
/// Reloader: on the workload, `"true"` tracks only referenced objects that carry
/// [`RELOADER_MATCH`].
pub const RELOADER_SEARCH: &str = "reloader.stakater.com/search";
/// Reloader: on a ConfigMap or Secret, `"true"` lets `search` workloads follow it.
pub const RELOADER_MATCH: &str = "reloader.stakater.com/match";
/// Reloader: on the workload's own metadata, ConfigMaps never to reload for.
pub const RELOADER_CONFIGMAPS_EXCLUDE: &str = "configmaps.exclude.reloader.stakater.com/reload";
/// Reloader: on the workload's own metadata, Secrets never to reload for.
pub const RELOADER_SECRETS_EXCLUDE: &str = "secrets.exclude.reloader.stakater.com/reload";
/// Reloader: a Go duration; Reloader pauses the Deployment that long after a
/// change. nudge waits that long (debounce and ceiling) and rolls once.
pub const RELOADER_PAUSE_PERIOD: &str = "deployment.reloader.stakater.com/pause-period";
/// Reloader: `restart` patches an Argo Rollout's `spec.restartAt` instead of its
/// template.
pub const RELOADER_ROLLOUT_STRATEGY: &str = "reloader.stakater.com/rollout-strategy";
/// Reloader's annotations strategy: the pod-template annotation it writes.
pub const RELOADER_LAST_RELOADED_FROM: &str = "reloader.stakater.com/last-reloaded-from";

/// The native annotation prefix in use (`nudge.dev` unless configured otherwise),
/// and the one place that spells nudge's annotation names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotationScheme {
    /// The prefix before `/`, e.g. `nudge.dev`.
    pub prefix: String,
    /// Reloader's `--auto-reload-all`: a workload that no other scheme manages is
    /// Reloader-`auto` unless it opts out (`reloader.stakater.com/auto: "false"`).
    pub reloader_auto_all: bool,
}

impl Default for AnnotationScheme {
    fn default() -> Self {
        Self::new(DEFAULT_PREFIX)
    }
}

impl AnnotationScheme {
    /// A scheme with this prefix (a DNS subdomain, without the `/`).
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            reloader_auto_all: false,
        }
    }

    /// The same scheme with Reloader's `--auto-reload-all` on or off.
    pub fn with_reloader_auto_all(mut self, on: bool) -> Self {
        self.reloader_auto_all = on;
        self
    }

    /// `<prefix>/<name>`.
    pub fn key(&self, name: &str) -> String {
        format!("{}/{name}", self.prefix)
    }

    /// `<prefix>/config-hash`: the combined fingerprint of `auto` references.
    pub fn config_hash(&self) -> String {
        self.key(CONFIG_HASH)
    }

    /// `<prefix>/checksum-<slot>`: the fingerprint of one explicit reference.
    pub fn checksum(&self, slot: &Slot) -> String {
        self.key(&format!("{CHECKSUM_PREFIX}{slot}"))
    }

    /// `<prefix>/last-updated`: written on workload metadata only.
    pub fn last_updated(&self) -> String {
        self.key(LAST_UPDATED)
    }

    /// `<prefix>/ignore`: on a ConfigMap or Secret, see [`is_ignored`].
    pub fn ignore(&self) -> String {
        self.key(IGNORE)
    }

    /// `<prefix>/reloader-state`: on a workload under Reloader's annotations
    /// strategy, the combined fingerprint nudge compares (Reloader's own
    /// `last-reloaded-from` is informational and never read back).
    pub fn reloader_state(&self) -> String {
        self.key(RELOADER_STATE)
    }

    /// `<prefix>/run-on-change`: on a CronJob, `"false"` stamps without starting
    /// a Job when the stamp changes.
    pub fn run_on_change(&self) -> String {
        self.key(RUN_ON_CHANGE)
    }

    /// `<prefix>/scheduling-gate`: on a workload, `"true"` asks the admission
    /// webhook to hold a new workload's pods while required config is missing
    /// (on by default for Wave workloads), `"false"` opts out.
    pub fn scheduling_gate(&self) -> String {
        self.key(SCHEDULING_GATE)
    }

    /// `<prefix>/awaiting-config`: the name of the pod scheduling gate that holds
    /// a new workload's pods until its required config exists.
    pub fn awaiting_config_gate(&self) -> String {
        self.key(AWAITING_CONFIG)
    }

    /// The `last-updated` annotations written on the workload's own metadata
    /// beside `outputs`: `<prefix>/last-updated`, plus k8s-consul-mutator's when
    /// its checksums are among them.
    pub fn last_updated_keys<'a>(
        &self,
        outputs: impl IntoIterator<Item = &'a Output>,
    ) -> Vec<String> {
        let mut keys = vec![self.last_updated()];
        if outputs
            .into_iter()
            .any(|output| output.key().starts_with(MUTATOR_PREFIX))
        {
            keys.push(MUTATOR_LAST_UPDATED.to_owned());
        }
        keys
    }
}

/// `k8s-consul-mutator.io/checksum-<name>`, written for `k8s-consul-mutator.io/key-<name>`.
pub fn mutator_checksum(name: &Slot) -> String {
    format!("{MUTATOR_PREFIX}{CHECKSUM_PREFIX}{name}")
}

/// Whether a ConfigMap or Secret opted out: `<prefix>/ignore: "true"` or
/// `reloader.stakater.com/ignore: "true"`.
pub fn is_ignored(
    object_annotations: &BTreeMap<String, String>,
    scheme: &AnnotationScheme,
) -> bool {
    let is_true = |key: &str| object_annotations.get(key).is_some_and(|v| v == "true");
    is_true(&scheme.ignore()) || is_true(RELOADER_IGNORE)
}

// === errors ===

/// A workload annotation nudge cannot use. Each variant names the annotation key;
/// the workload's other annotations keep working.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AnnotationError {
    /// The name part of the key (after `/`) is longer than the 63 characters
    /// Kubernetes allows.
    #[error("annotation {key}: name is longer than {max} characters")]
    NameTooLong {
        /// The annotation key.
        key: String,
        /// The longest allowed name part.
        max: usize,
    },
    /// A name under nudge's prefix that is neither a setting, a name nudge writes,
    /// nor of the form `<source>-<slot>`.
    #[error(
        "annotation {key}: not a nudge annotation (expected <source>-<slot>, auto, exclude, debounce or min-interval)"
    )]
    UnknownAnnotation {
        /// The annotation key.
        key: String,
    },
    /// The annotation names a source that is not configured in this installation
    /// (for k8s-consul-mutator annotations: no `consul` source).
    #[error("annotation {key}: unknown source {source_name:?}")]
    UnknownSource {
        /// The annotation key.
        key: String,
        /// The source name as written.
        source_name: String,
    },
    /// The slot (or k8s-consul-mutator name) does not match the slot grammar or is
    /// too long for the `checksum-<slot>` annotation nudge would write.
    #[error("annotation {key}: invalid slot: {error}")]
    InvalidSlot {
        /// The annotation key.
        key: String,
        /// Why the slot was rejected.
        #[source]
        error: NameError,
    },
    /// The value is not a valid reference for the source: not a DNS-1123 object
    /// name for ConfigMaps/Secrets, or an empty / `/`-led / whitespace-holding key
    /// path for external sources.
    #[error("annotation {key}: invalid reference {value:?}: {reason}")]
    InvalidReference {
        /// The annotation key.
        key: String,
        /// The start of the rejected value.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A yes/no annotation holds something other than `"true"` or `"false"`.
    #[error("annotation {key}: expected \"true\" or \"false\", got {value:?}")]
    InvalidBool {
        /// The annotation key.
        key: String,
        /// The start of the rejected value.
        value: String,
    },
    /// A duration annotation (`debounce`, `min-interval`) does not parse as a
    /// humantime duration such as `30s` or `2m 30s`.
    #[error("annotation {key}: invalid duration {value:?}: {error}")]
    InvalidDuration {
        /// The annotation key.
        key: String,
        /// The start of the rejected value.
        value: String,
        /// The parse error.
        #[source]
        error: humantime::DurationError,
    },
    /// One item of a comma list (`exclude`, Wave's extras, Reloader's `reload`) is
    /// malformed; the list's other items still apply.
    #[error("annotation {key}: invalid item {item:?}: {reason}")]
    InvalidListItem {
        /// The annotation key.
        key: String,
        /// The start of the rejected item.
        item: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Several references would write the same output (two sources using one slot,
    /// two Reloader objects mapping to one env var); none of them is used.
    #[error(
        "annotation {key}: {output} is also claimed by another reference; none of them is used"
    )]
    DuplicateOutput {
        /// The annotation key.
        key: String,
        /// The contested annotation or env var name.
        output: String,
    },
    /// The value is not one the annotation allows.
    #[error("annotation {key}: invalid value {value:?}: expected {expected}")]
    InvalidValue {
        /// The annotation key.
        key: String,
        /// The start of the rejected value.
        value: String,
        /// What is allowed.
        expected: &'static str,
    },
    /// Another tool's setting nudge does not emulate; the message says what nudge
    /// does instead.
    #[error("annotation {key}: {value:?} is not supported: {instead}")]
    Unsupported {
        /// The annotation key.
        key: String,
        /// The value.
        value: String,
        /// What nudge does instead.
        instead: &'static str,
    },
}

impl AnnotationError {
    /// A low-cardinality label for metrics and Events.
    pub fn category(&self) -> &'static str {
        match self {
            Self::NameTooLong { .. } => "name_too_long",
            Self::UnknownAnnotation { .. } => "unknown_annotation",
            Self::UnknownSource { .. } => "unknown_source",
            Self::InvalidSlot { .. } => "bad_slot",
            Self::InvalidReference { .. } => "bad_reference",
            Self::InvalidBool { .. } => "bad_bool",
            Self::InvalidDuration { .. } => "bad_duration",
            Self::InvalidListItem { .. } => "bad_list_item",
            Self::DuplicateOutput { .. } => "duplicate_slot",
            Self::InvalidValue { .. } => "bad_value",
            Self::Unsupported { .. } => "unsupported",
        }
    }

    /// The annotation key the error is about.
    pub fn key(&self) -> &str {
        match self {
            Self::NameTooLong { key, .. }
            | Self::UnknownAnnotation { key }
            | Self::UnknownSource { key, .. }
            | Self::InvalidSlot { key, .. }
            | Self::InvalidReference { key, .. }
            | Self::InvalidBool { key, .. }
            | Self::InvalidDuration { key, .. }
            | Self::InvalidListItem { key, .. }
            | Self::DuplicateOutput { key, .. }
            | Self::InvalidValue { key, .. }
            | Self::Unsupported { key, .. } => key,
        }
    }
}

// === result ===

/// Everything a workload's annotations ask for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dependencies {
    /// One spec per output, sorted by output.
    pub stamps: Vec<StampSpec>,
    /// Every invalid annotation, each naming its key.
    pub errors: Vec<AnnotationError>,
    /// `<prefix>/debounce`, when set and valid.
    pub debounce: Option<Duration>,
    /// `<prefix>/min-interval`, when set and valid.
    pub min_interval: Option<Duration>,
    /// The ceiling of the debounce window, when the workload sets one (Reloader's
    /// `pause-period`).
    pub max_delay: Option<Duration>,
    /// Objects `<prefix>/exclude` drops from `auto` discovery (whole-object
    /// references in the workload's namespace).
    pub excluded: BTreeSet<Reference>,
}

impl Dependencies {
    /// Every tracked input of every stamp.
    pub fn tracked(&self) -> impl Iterator<Item = &Tracked> {
        self.stamps
            .iter()
            .flat_map(|s| s.inputs.iter().map(|i| &i.tracked))
    }
}

/// Parses every annotation scheme on `workload` into stamp specs.
pub fn dependencies(
    workload: &Workload,
    scheme: &AnnotationScheme,
    catalog: &SourceCatalog,
) -> Dependencies {
    let annotations = merged_annotations(workload);
    let mut parser = Parser {
        workload,
        scheme,
        catalog,
        stamps: Stamps::default(),
        deps: Dependencies::default(),
        gate_choice: None,
        wave: false,
    };
    parser.native(&annotations);
    parser.wave(&annotations);
    parser.mutator(&annotations);
    parser.reloader(&annotations);
    parser.finish()
}

/// Pod-template annotations overlaid with the workload's own (which win).
fn merged_annotations(workload: &Workload) -> BTreeMap<&str, &str> {
    let template = workload.template_annotations().iter();
    template
        .chain(&workload.annotations)
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

// === parser ===

struct Parser<'a> {
    workload: &'a Workload,
    scheme: &'a AnnotationScheme,
    catalog: &'a SourceCatalog,
    stamps: Stamps,
    deps: Dependencies,
    /// `<prefix>/scheduling-gate`, when set and valid.
    gate_choice: Option<bool>,
    /// Whether Wave manages the workload.
    wave: bool,
}

type Annotations<'a> = BTreeMap<&'a str, &'a str>;

impl Parser<'_> {
    fn finish(mut self) -> Dependencies {
        self.deps.stamps = std::mem::take(&mut self.stamps).build(&mut self.deps.errors);
        self.holds();
        if self.workload.id.kind.adopts_first_stamp() {
            // A CronJob runs, a Job is recreated, when its template changes: the
            // first stamp is adopted into metadata, never written there.
            for spec in &mut self.deps.stamps {
                if let Output::PodTemplateAnnotation(key) = &spec.output {
                    spec.output = Output::Adopted(key.clone());
                }
            }
        }
        // Last: adoption changes outputs, and with them their order.
        self.deps.stamps.sort_by(|a, b| a.output.cmp(&b.output));
        self.deps
    }

    fn report(&mut self, result: Result<(), AnnotationError>) {
        if let Err(error) = result {
            self.deps.errors.push(error);
        }
    }

    fn namespace(&self) -> &str {
        &self.workload.id.namespace
    }

    fn discover(&self, rules: fn(&PodSpec) -> Vec<Discovered>) -> Vec<Discovered> {
        self.workload
            .template
            .spec
            .as_ref()
            .map(rules)
            .unwrap_or_default()
    }

    fn object(&self, kind: ObjectKind, namespace: Option<&str>, name: &str) -> Reference {
        let namespace = namespace.unwrap_or(self.namespace());
        Reference::object(kind.source(), namespace, name)
    }

    /// Reads a yes/no annotation; invalid values are reported and count as no.
    fn flag(&mut self, annotations: &Annotations<'_>, key: &str) -> bool {
        let Some(value) = annotations.get(key) else {
            return false;
        };
        match parse_bool(key, value) {
            Ok(on) => on,
            Err(error) => {
                self.deps.errors.push(error);
                false
            }
        }
    }
}

// === native ===

impl Parser<'_> {
    fn native(&mut self, annotations: &Annotations<'_>) {
        let prefix = format!("{}/", self.scheme.prefix);
        let mut auto_key = None;
        for (&key, &value) in annotations {
            let Some(name) = key.strip_prefix(&prefix) else {
                continue;
            };
            let result = self.native_entry(key, name, value);
            if matches!(result, Ok(Some(true))) {
                auto_key = Some(key);
            }
            self.report(result.map(drop));
        }
        if let Some(key) = auto_key {
            self.auto(key);
        }
    }

    /// Parses one `<prefix>/<name>` annotation; `Ok(Some(on))` for `auto`.
    fn native_entry(
        &mut self,
        key: &str,
        name: &str,
        value: &str,
    ) -> Result<Option<bool>, AnnotationError> {
        check_name_len(key, name)?;
        match name {
            AUTO => return parse_bool(key, value).map(Some),
            EXCLUDE => self.exclude(key, value),
            DEBOUNCE => self.deps.debounce = Some(parse_duration(key, value)?),
            MIN_INTERVAL => self.deps.min_interval = Some(parse_duration(key, value)?),
            // Read by the CronJob target; checked here so a typo is reported.
            RUN_ON_CHANGE => {
                parse_bool(key, value)?;
            }
            SCHEDULING_GATE => self.gate_choice = Some(parse_bool(key, value)?),
            IGNORE | CONFIG_HASH | LAST_UPDATED | RELOADER_STATE => {}
            _ if name.starts_with(CHECKSUM_PREFIX) => {}
            _ => self.explicit(key, name, value)?,
        }
        Ok(None)
    }

    /// `<prefix>/<source>-<slot>: <reference>`.
    fn explicit(&mut self, key: &str, name: &str, value: &str) -> Result<(), AnnotationError> {
        let Some((source, slot)) = name.split_once('-') else {
            return Err(AnnotationError::UnknownAnnotation {
                key: key.to_owned(),
            });
        };
        let (source, scope) = self.configured(key, source)?;
        let slot = Slot::new(slot, MAX_SLOT_LEN).map_err(|error| AnnotationError::InvalidSlot {
            key: key.to_owned(),
            error,
        })?;
        let reference = match scope {
            Scope::Namespaced => {
                check_object_name(value).map_err(|reason| invalid_reference(key, value, reason))?;
                Reference::object(source, self.namespace(), value)
            }
            Scope::External => {
                check_key_path(value).map_err(|reason| invalid_reference(key, value, reason))?;
                Reference::key(source, value)
            }
        };
        self.stamps.add(Contribution {
            output: Output::PodTemplateAnnotation(self.scheme.checksum(&slot)),
            combine: Combine::Single,
            annotation: key.to_owned(),
            tracked: Tracked::new(reference, Algorithm::Native),
            optional: false,
            origins: vec![Origin::Annotation(key.to_owned())],
        });
        Ok(())
    }

    /// The configured source called `source`, and its scope.
    fn configured(&self, key: &str, source: &str) -> Result<(SourceName, Scope), AnnotationError> {
        SourceName::new(source)
            .ok()
            .and_then(|name| self.catalog.scope(&name).map(|scope| (name, scope)))
            .ok_or_else(|| AnnotationError::UnknownSource {
                key: key.to_owned(),
                source_name: excerpt(source),
            })
    }

    /// `<prefix>/exclude: configmap/x,secret/y`.
    fn exclude(&mut self, key: &str, value: &str) {
        for item in split_list(value) {
            match parse_exclude_item(item) {
                Ok((kind, name)) => {
                    let reference = self.object(kind, None, name);
                    self.deps.excluded.insert(reference);
                }
                Err(reason) => self.deps.errors.push(invalid_item(key, item, reason)),
            }
        }
    }

    /// `<prefix>/auto: "true"`: every discovered object not excluded.
    fn auto(&mut self, key: &str) {
        let output = Output::PodTemplateAnnotation(self.scheme.config_hash());
        self.stamps.declare(&output, Combine::NativeHash, key);
        for found in self.discover(discovery::native) {
            let whole = self.object(found.kind, None, &found.name);
            if self.deps.excluded.contains(&whole) {
                continue;
            }
            self.stamps.add(Contribution {
                output: output.clone(),
                combine: Combine::NativeHash,
                annotation: key.to_owned(),
                tracked: Tracked::new(whole.with_keys(found.keys), Algorithm::Native),
                optional: found.optional,
                origins: found.origins.into_iter().map(Origin::Discovered).collect(),
            });
        }
    }
}

// === Wave ===

impl Parser<'_> {
    fn wave(&mut self, annotations: &Annotations<'_>) {
        if !self.flag(annotations, WAVE_UPDATE_ON_CONFIG_CHANGE) {
            return;
        }
        self.wave = true;
        let output = Output::PodTemplateAnnotation(WAVE_CONFIG_HASH.to_owned());
        self.stamps
            .declare(&output, Combine::Wave, WAVE_UPDATE_ON_CONFIG_CHANGE);
        for found in self.discover(discovery::wave) {
            let reference = self
                .object(found.kind, None, &found.name)
                .with_keys(found.keys);
            self.stamps.add(wave_input(
                &output,
                WAVE_UPDATE_ON_CONFIG_CHANGE,
                reference,
                found.optional,
                found.origins.into_iter().map(Origin::Discovered).collect(),
            ));
        }
        let extras = [
            (WAVE_EXTRA_CONFIGMAPS, ObjectKind::ConfigMap),
            (WAVE_EXTRA_SECRETS, ObjectKind::Secret),
        ];
        for (key, kind) in extras {
            let Some(value) = annotations.get(key) else {
                continue;
            };
            for item in split_list(value) {
                match parse_namespaced_name(item) {
                    Ok((namespace, name)) => {
                        let reference = self.object(kind, namespace, name);
                        let origins = vec![Origin::Annotation(key.to_owned())];
                        self.stamps
                            .add(wave_input(&output, key, reference, false, origins));
                    }
                    Err(reason) => self.deps.errors.push(invalid_item(key, item, reason)),
                }
            }
        }
    }
}

fn wave_input(
    output: &Output,
    key: &str,
    reference: Reference,
    optional: bool,
    origins: Vec<Origin>,
) -> Contribution {
    Contribution {
        output: output.clone(),
        combine: Combine::Wave,
        annotation: key.to_owned(),
        tracked: Tracked::new(reference, Algorithm::Wave),
        optional,
        origins,
    }
}

// === holds: scheduling gate, Wave's scheduler swap ===

impl Parser<'_> {
    /// Adds the release specs: the scheduling gate (opted in, or a Wave workload
    /// not opted out) and Wave's `scheduling-disabled` on a migrated workload,
    /// each released once every required input of every stamp exists.
    fn holds(&mut self) {
        let required: BTreeSet<Tracked> = self
            .deps
            .stamps
            .iter()
            .flat_map(|spec| &spec.inputs)
            .filter(|input| !input.optional)
            .map(|input| input.tracked.clone())
            .collect();
        let hold = |output: Output| StampSpec {
            output,
            combine: Combine::Release,
            inputs: required
                .iter()
                .map(|tracked| Input {
                    tracked: tracked.clone(),
                    optional: false,
                })
                .collect(),
            origins: Vec::new(),
        };
        let mut holds = Vec::new();
        // Nothing required, nothing to wait for: no gate. A Job's pod template is
        // immutable, so a gate could never be lifted from it.
        let mutable_template = !self.workload.id.kind.has_immutable_template();
        let wanted = self.gate_choice.unwrap_or(self.wave);
        if wanted && self.workload.ordered_pods {
            // kube's StatefulSet controller waits for a Pending pod-0 forever
            // (kubernetes#67250), so lifting the gate would not start it.
            if self.gate_choice == Some(true) {
                self.deps.errors.push(AnnotationError::Unsupported {
                    key: self.scheme.scheduling_gate(),
                    value: "true".to_owned(),
                    instead: "a StatefulSet with podManagementPolicy OrderedReady is not gated: \
                              its controller would wait for a held pod-0 forever; its pods start \
                              once the config exists",
                });
            }
        } else if wanted && !required.is_empty() && mutable_template {
            holds.push(hold(Output::SchedulingGate(
                self.scheme.awaiting_config_gate(),
            )));
        }
        if self
            .workload
            .annotations
            .contains_key(WAVE_SCHEDULING_DISABLED)
        {
            holds.push(hold(Output::WaveSchedulingDisabled));
        }
        self.deps.stamps.extend(holds);
    }
}

// === k8s-consul-mutator ===

impl Parser<'_> {
    fn mutator(&mut self, annotations: &Annotations<'_>) {
        if annotations.contains_key(MUTATOR_SKIP) {
            return;
        }
        for (&key, &value) in annotations {
            let Some(name) = key.strip_prefix(MUTATOR_PREFIX) else {
                continue;
            };
            if let Some(slot) = name.strip_prefix(MUTATOR_KEY_PREFIX) {
                let result = self.mutator_key(key, name, slot, value);
                self.report(result);
            }
        }
    }

    /// `k8s-consul-mutator.io/key-<slot>: <consul key>`.
    fn mutator_key(
        &mut self,
        key: &str,
        name: &str,
        slot: &str,
        value: &str,
    ) -> Result<(), AnnotationError> {
        check_name_len(key, name)?;
        let slot = Slot::new(slot, MAX_SLOT_LEN).map_err(|error| AnnotationError::InvalidSlot {
            key: key.to_owned(),
            error,
        })?;
        let consul = SourceName::consul();
        if self.catalog.scope(&consul).is_none() {
            return Err(AnnotationError::UnknownSource {
                key: key.to_owned(),
                source_name: consul.to_string(),
            });
        }
        check_key_path(value).map_err(|reason| invalid_reference(key, value, reason))?;
        self.stamps.add(Contribution {
            output: Output::PodTemplateAndWorkloadAnnotation(mutator_checksum(&slot)),
            combine: Combine::Single,
            annotation: key.to_owned(),
            tracked: Tracked::new(Reference::key(consul, value), Algorithm::Md5),
            optional: false,
            origins: vec![Origin::Annotation(key.to_owned())],
        });
        Ok(())
    }
}

// === Reloader ===

/// One object Reloader annotations ask to track.
struct ReloaderObject {
    kind: ObjectKind,
    name: String,
    optional: bool,
    origins: Vec<Origin>,
    annotation: &'static str,
    gate: Gate,
}

impl<'a> Parser<'a> {
    fn reloader(&mut self, annotations: &Annotations<'_>) {
        self.reloader_settings(annotations);
        let excluded = self.reloader_excluded();
        let mut objects = self.reloader_auto(annotations);
        objects.extend(self.reloader_lists(annotations));
        objects.extend(self.reloader_search(annotations));
        objects.retain(|o| !excluded.contains(&(o.kind, o.name.clone())));
        let env_vars = self.env_var_names();
        for object in objects {
            let contribution = self.reloader_contribution(object, &env_vars);
            self.stamps.add(contribution);
        }
    }

    /// `pause-period` (nudge's debounce and ceiling) and `rollout-strategy`.
    fn reloader_settings(&mut self, annotations: &Annotations<'_>) {
        if let Some(value) = annotations.get(RELOADER_PAUSE_PERIOD) {
            match parse_go_duration(RELOADER_PAUSE_PERIOD, value) {
                // Reloader pauses the Deployment for the period after the first
                // change and resumes it with whatever changed meanwhile: one
                // rollout at the end of the period.
                Ok(period) if self.deps.debounce.is_none() => {
                    self.deps.debounce = Some(period);
                    self.deps.max_delay = Some(period);
                }
                Ok(_) => {}
                Err(error) => self.deps.errors.push(error),
            }
        }
        match annotations.get(RELOADER_ROLLOUT_STRATEGY).copied() {
            None | Some("rollout") => {}
            Some("restart") => self.deps.errors.push(AnnotationError::Unsupported {
                key: RELOADER_ROLLOUT_STRATEGY.to_owned(),
                value: "restart".to_owned(),
                instead: "nudge rolls the Rollout through its pod template, as the default \"rollout\" strategy does; remove the annotation",
            }),
            Some(other) => self.deps.errors.push(AnnotationError::InvalidValue {
                key: RELOADER_ROLLOUT_STRATEGY.to_owned(),
                value: excerpt(other),
                expected: "\"rollout\" or \"restart\"",
            }),
        }
    }

    /// Objects the exclude lists drop from every Reloader mode. Read from the
    /// workload's own metadata only, as Reloader does.
    fn reloader_excluded(&mut self) -> BTreeSet<(ObjectKind, String)> {
        let lists = [
            (RELOADER_CONFIGMAPS_EXCLUDE, ObjectKind::ConfigMap),
            (RELOADER_SECRETS_EXCLUDE, ObjectKind::Secret),
        ];
        let mut excluded = BTreeSet::new();
        for (key, kind) in lists {
            let Some(value) = self.workload.annotations.get(key) else {
                continue;
            };
            for item in split_list(value) {
                match check_object_name(item) {
                    Ok(()) => {
                        excluded.insert((kind, item.to_owned()));
                    }
                    Err(reason) => self.deps.errors.push(invalid_item(key, item, reason)),
                }
            }
        }
        excluded
    }

    /// `configmap.reloader.stakater.com/reload` and `secret.…/reload`.
    fn reloader_lists(&mut self, annotations: &Annotations<'_>) -> Vec<ReloaderObject> {
        let lists = [
            (RELOADER_CONFIGMAP_RELOAD, ObjectKind::ConfigMap),
            (RELOADER_SECRET_RELOAD, ObjectKind::Secret),
        ];
        let mut objects = Vec::new();
        for (key, kind) in lists {
            let Some(value) = annotations.get(key) else {
                continue;
            };
            for item in split_list(value) {
                match check_object_name(item) {
                    Ok(()) => objects.push(ReloaderObject {
                        kind,
                        name: item.to_owned(),
                        optional: false,
                        origins: vec![Origin::Annotation(key.to_owned())],
                        annotation: key,
                        gate: Gate::Always,
                    }),
                    Err(reason) => self.deps.errors.push(invalid_item(key, item, reason)),
                }
            }
        }
        objects
    }

    /// `reloader.stakater.com/search: "true"`: referenced objects, counted only
    /// while they carry `reloader.stakater.com/match: "true"`.
    fn reloader_search(&mut self, annotations: &Annotations<'_>) -> Vec<ReloaderObject> {
        if !self.flag(annotations, RELOADER_SEARCH) {
            return Vec::new();
        }
        self.referenced(RELOADER_SEARCH, Gate::ReloaderMatch, |_| true)
    }

    /// Objects selected by the Reloader `auto` annotations, or by
    /// `--auto-reload-all` (the scheme's `reloader_auto_all`) on a workload that
    /// sets none of them and that no other scheme manages. Values are read as Go's
    /// `strconv.ParseBool` does, as Reloader reads them.
    fn reloader_auto(&mut self, annotations: &Annotations<'_>) -> Vec<ReloaderObject> {
        let all = self.go_flag(annotations, RELOADER_AUTO);
        let configmaps = self.go_flag(annotations, RELOADER_CONFIGMAP_AUTO);
        let secrets = self.go_flag(annotations, RELOADER_SECRET_AUTO);
        let unset = |key: &str| annotations.get(key).is_none_or(|v| v.is_empty());
        let by_default = self.scheme.reloader_auto_all && self.stamps.0.is_empty();
        let default_for = |typed: &str| unset(RELOADER_AUTO) && unset(typed) && by_default;
        let configmaps_by_default = default_for(RELOADER_CONFIGMAP_AUTO);
        let secrets_by_default = default_for(RELOADER_SECRET_AUTO);
        let enabled_by = move |kind| match kind {
            _ if all => Some(RELOADER_AUTO),
            ObjectKind::ConfigMap if configmaps || configmaps_by_default => {
                Some(RELOADER_CONFIGMAP_AUTO)
            }
            ObjectKind::Secret if secrets || secrets_by_default => Some(RELOADER_SECRET_AUTO),
            _ => None,
        };
        if [ObjectKind::ConfigMap, ObjectKind::Secret]
            .iter()
            .all(|kind| enabled_by(*kind).is_none())
        {
            return Vec::new();
        }
        self.discover(discovery::native)
            .into_iter()
            .filter_map(|found| {
                Some(ReloaderObject {
                    annotation: enabled_by(found.kind)?,
                    kind: found.kind,
                    name: found.name,
                    optional: found.optional,
                    origins: found.origins.into_iter().map(Origin::Discovered).collect(),
                    gate: Gate::Always,
                })
            })
            .collect()
    }

    /// Every object the pod spec references that `select` keeps, for `annotation`.
    fn referenced(
        &self,
        annotation: &'static str,
        gate: Gate,
        select: impl Fn(ObjectKind) -> bool,
    ) -> Vec<ReloaderObject> {
        self.discover(discovery::native)
            .into_iter()
            .filter(|found| select(found.kind))
            .map(|found| ReloaderObject {
                annotation,
                kind: found.kind,
                name: found.name,
                optional: found.optional,
                origins: found.origins.into_iter().map(Origin::Discovered).collect(),
                gate,
            })
            .collect()
    }

    /// A yes/no annotation of Reloader's, read as Go's `strconv.ParseBool`;
    /// anything else is reported and counts as no.
    fn go_flag(&mut self, annotations: &Annotations<'_>, key: &str) -> bool {
        let Some(value) = annotations.get(key) else {
            return false;
        };
        match *value {
            "1" | "t" | "T" | "TRUE" | "true" | "True" => true,
            "0" | "f" | "F" | "FALSE" | "false" | "False" | "" => false,
            other => {
                self.deps.errors.push(AnnotationError::InvalidBool {
                    key: key.to_owned(),
                    value: excerpt(other),
                });
                false
            }
        }
    }

    /// Reloader's env var when the pod template already carries it, nudge's
    /// `config-hash` otherwise.
    fn reloader_contribution(
        &self,
        object: ReloaderObject,
        env_vars: &BTreeSet<&str>,
    ) -> Contribution {
        let var = fingerprint::reloader_env_var(object.kind, &object.name);
        let reference = self.object(object.kind, None, &object.name);
        let annotations_strategy = self
            .workload
            .template_annotations()
            .contains_key(RELOADER_LAST_RELOADED_FROM);
        let (output, combine, algorithm) = if env_vars.contains(var.as_str()) {
            (
                Output::ContainerEnv(var),
                Combine::Single,
                Algorithm::Reloader,
            )
        } else if annotations_strategy {
            // Reloader's annotations strategy: adopted without a rollout, later
            // changes written in its format.
            let output = Output::ReloaderSource(self.scheme.reloader_state());
            (output, Combine::ReloaderSource, Algorithm::Reloader)
        } else {
            // Reloader had nothing on the pod template for this object yet:
            // adopted without a rollout, written on the template at its first
            // change (when Reloader would have added its env var).
            let output = Output::Adopted(self.scheme.config_hash());
            (output, Combine::NativeHash, Algorithm::Native)
        };
        Contribution {
            output,
            combine,
            annotation: object.annotation.to_owned(),
            tracked: Tracked::new(reference, algorithm).gated(object.gate),
            optional: object.optional,
            origins: object.origins,
        }
    }

    /// Names of the env vars of every container and initContainer.
    fn env_var_names(&self) -> BTreeSet<&'a str> {
        let workload: &'a Workload = self.workload;
        let Some(spec) = &workload.template.spec else {
            return BTreeSet::new();
        };
        spec.containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .flat_map(|c| c.env.iter().flatten())
            .map(|env| env.name.as_str())
            .collect()
    }
}

// === stamp assembly ===

/// One reference's part in one output.
struct Contribution {
    output: Output,
    combine: Combine,
    /// The annotation that asked for it, for errors.
    annotation: String,
    tracked: Tracked,
    optional: bool,
    origins: Vec<Origin>,
}

/// Contributions grouped per output, objects merged per reference identity.
#[derive(Default)]
struct Stamps(BTreeMap<Output, Group>);

struct Group {
    combine: Combine,
    /// Set when contributions disagree on how to combine (a prefix clash).
    mixed: bool,
    /// Every contribution asked for [`Output::Adopted`].
    adopted: bool,
    annotations: BTreeSet<String>,
    objects: BTreeMap<ObjectId, Merged>,
}

/// A reference without its key selection, plus the algorithm.
type ObjectId = (SourceName, Option<Name>, Name, Algorithm, Gate);

struct Merged {
    keys: KeySelection,
    optional: bool,
    origins: BTreeSet<Origin>,
}

impl Stamps {
    /// Makes sure `output` is written even with no inputs (e.g. `auto` with nothing
    /// to discover: the stamp is the hash of nothing).
    fn declare(&mut self, output: &Output, combine: Combine, annotation: &str) -> &mut Group {
        // An adopted annotation and the same annotation on the pod template are
        // one output (Reloader's fallback and `auto` share `config-hash`); it is
        // adopted only when every contribution asks for adoption.
        let (key, adopted) = match output {
            Output::Adopted(k) => (Output::PodTemplateAnnotation(k.clone()), true),
            other => (other.clone(), false),
        };
        let group = self.0.entry(key).or_insert_with(|| Group {
            combine,
            mixed: false,
            adopted,
            annotations: BTreeSet::new(),
            objects: BTreeMap::new(),
        });
        group.adopted &= adopted;
        group.mixed |= group.combine != combine;
        group.annotations.insert(annotation.to_owned());
        group
    }

    fn add(&mut self, c: Contribution) {
        let group = self.declare(&c.output, c.combine, &c.annotation);
        let TrackedItem {
            reference:
                Reference {
                    source,
                    namespace,
                    name,
                    keys,
                },
            algorithm,
            gate,
        } = c.tracked.into_inner();
        let merged = group
            .objects
            .entry((source, namespace, name, algorithm, gate))
            .or_insert_with(|| Merged {
                keys: keys.clone(),
                optional: c.optional,
                origins: BTreeSet::new(),
            });
        merged.keys = merged.keys.union(&keys);
        merged.optional &= c.optional;
        merged.origins.extend(c.origins);
    }

    /// One spec per output; contested outputs become errors instead.
    fn build(self, errors: &mut Vec<AnnotationError>) -> Vec<StampSpec> {
        // Outputs of different shapes can name one pod-template annotation (a
        // native prefix of `k8s-consul-mutator.io` makes `<prefix>/checksum-a` and
        // k8s-consul-mutator's `checksum-a` one key): a clash like any other.
        let mut writers: BTreeMap<String, usize> = BTreeMap::new();
        for output in self.0.keys() {
            if let Some(key) = template_annotation(output) {
                *writers.entry(key.to_owned()).or_default() += 1;
            }
        }
        let mut specs = Vec::new();
        for (output, group) in self.0 {
            let shared = template_annotation(&output).is_some_and(|key| writers[key] > 1);
            let contested = shared
                || group.mixed
                || (group.combine == Combine::Single && group.objects.len() != 1);
            if contested {
                errors.extend(group.annotations.into_iter().map(|key| {
                    AnnotationError::DuplicateOutput {
                        key,
                        output: output.key().to_owned(),
                    }
                }));
                continue;
            }
            specs.push(group.into_spec(output));
        }
        specs
    }
}

/// The pod-template annotation a grouped output writes, if any ([`Stamps`] keys
/// an adopted output as its pod-template annotation).
fn template_annotation(output: &Output) -> Option<&str> {
    match output {
        Output::PodTemplateAnnotation(key)
        | Output::PodTemplateAndWorkloadAnnotation(key)
        | Output::Adopted(key) => Some(key),
        _ => None,
    }
}

impl Group {
    fn into_spec(self, output: Output) -> StampSpec {
        let output = match output {
            Output::PodTemplateAnnotation(key) if self.adopted => Output::Adopted(key),
            other => other,
        };
        let mut inputs = Vec::new();
        let mut origins = Vec::new();
        for ((source, namespace, name, algorithm, gate), merged) in self.objects {
            let reference = Reference {
                source,
                namespace,
                name,
                keys: merged.keys,
            };
            origins.extend(merged.origins.into_iter().map(|o| (reference.clone(), o)));
            inputs.push(Input {
                tracked: Tracked::new(reference, algorithm).gated(gate),
                optional: merged.optional,
            });
        }
        inputs.sort();
        origins.sort();
        StampSpec {
            output,
            combine: self.combine,
            inputs,
            origins,
        }
    }
}

// === value grammar ===

fn check_name_len(key: &str, name: &str) -> Result<(), AnnotationError> {
    if name.len() > MAX_ANNOTATION_NAME_LEN {
        return Err(AnnotationError::NameTooLong {
            key: key.to_owned(),
            max: MAX_ANNOTATION_NAME_LEN,
        });
    }
    Ok(())
}

fn parse_bool(key: &str, value: &str) -> Result<bool, AnnotationError> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(AnnotationError::InvalidBool {
            key: key.to_owned(),
            value: excerpt(value),
        }),
    }
}

fn parse_duration(key: &str, value: &str) -> Result<Duration, AnnotationError> {
    humantime::parse_duration(value).map_err(|error| AnnotationError::InvalidDuration {
        key: key.to_owned(),
        value: excerpt(value),
        error,
    })
}

/// A Go duration (`300ms`, `1.5h`, `2h45m`), as Reloader's `time.ParseDuration`
/// reads it; humantime's forms are accepted too.
fn parse_go_duration(key: &str, value: &str) -> Result<Duration, AnnotationError> {
    if let Some(duration) = go_duration(value) {
        return Ok(duration);
    }
    parse_duration(key, value)
}

/// Go's duration grammar: an optional `+`, then one or more decimal numbers (with
/// an optional fraction), each followed by a unit (`ns`, `us`, `µs`, `ms`, `s`,
/// `m`, `h`). `0` alone is zero.
fn go_duration(value: &str) -> Option<Duration> {
    let mut rest = value.strip_prefix('+').unwrap_or(value);
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = 0.0_f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * seconds;
    }
    Duration::try_from_secs_f64(total).ok()
}

/// Items of a comma list, trimmed; empty items (a trailing comma) are skipped.
fn split_list(value: &str) -> impl Iterator<Item = &str> {
    value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
}

/// `configmap/<name>` or `secret/<name>`.
fn parse_exclude_item(item: &str) -> Result<(ObjectKind, &str), &'static str> {
    const SHAPE: &str = "expected configmap/<name> or secret/<name>";
    let (kind, name) = item.split_once('/').ok_or(SHAPE)?;
    let kind = match kind {
        "configmap" => ObjectKind::ConfigMap,
        "secret" => ObjectKind::Secret,
        _ => return Err(SHAPE),
    };
    check_object_name(name)?;
    Ok((kind, name))
}

/// `name` or `namespace/name`.
fn parse_namespaced_name(item: &str) -> Result<(Option<&str>, &str), &'static str> {
    match item.split_once('/') {
        None => check_object_name(item).map(|()| (None, item)),
        Some((namespace, name)) => {
            check_namespace(namespace)?;
            check_object_name(name)?;
            Ok((Some(namespace), name))
        }
    }
}

/// A DNS-1123 subdomain of at most 253 characters (ConfigMap and Secret names).
fn check_object_name(value: &str) -> Result<(), &'static str> {
    if value.is_empty() {
        return Err("an object name must not be empty");
    }
    if value.len() > 253 {
        return Err("an object name must be at most 253 characters");
    }
    if !value.split('.').all(is_dns_label) {
        return Err("an object name must be a DNS-1123 subdomain (a-z, 0-9, '-', '.')");
    }
    Ok(())
}

/// A DNS-1123 label of at most 63 characters (namespace names).
fn check_namespace(value: &str) -> Result<(), &'static str> {
    if value.len() > 63 || !is_dns_label(value) {
        return Err("a namespace must be a DNS-1123 label (a-z, 0-9, '-', at most 63 characters)");
    }
    Ok(())
}

fn is_dns_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            alnum(first) && alnum(last) && bytes.iter().all(|b| alnum(b) || *b == b'-')
        }
        _ => false,
    }
}

/// A key path of an external source (Consul): non-empty, not `/`-led, no
/// whitespace or control characters.
fn check_key_path(value: &str) -> Result<(), &'static str> {
    if value.is_empty() {
        return Err("a key path must not be empty");
    }
    if value.starts_with('/') {
        return Err("a key path must not start with '/'");
    }
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("a key path must not contain whitespace or control characters");
    }
    Ok(())
}

fn invalid_reference(key: &str, value: &str, reason: &'static str) -> AnnotationError {
    AnnotationError::InvalidReference {
        key: key.to_owned(),
        value: excerpt(value),
        reason,
    }
}

fn invalid_item(key: &str, item: &str, reason: &'static str) -> AnnotationError {
    AnnotationError::InvalidListItem {
        key: key.to_owned(),
        item: excerpt(item),
        reason,
    }
}

/// The start of a user-supplied value, so that a huge value cannot flood Events
/// and logs.
fn excerpt(value: &str) -> String {
    const MAX_CHARS: usize = 100;
    match value.char_indices().nth(MAX_CHARS) {
        Some((end, _)) => format!("{}…", &value[..end]),
        None => value.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        ConfigMapKeySelector, ConfigMapVolumeSource, Container, EnvFromSource, EnvVar,
        EnvVarSource, KeyToPath, PodSpec, PodTemplateSpec, SecretEnvSource, SecretVolumeSource,
        Volume,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::model::{TemplatePath, WorkloadId, WorkloadKind};

    const NS: &str = "shop";

    // --- builders ---

    fn mk_catalog() -> SourceCatalog {
        let mut catalog = mk_catalog_without_consul();
        catalog.0.insert(SourceName::consul(), Scope::External);
        catalog
    }

    fn mk_catalog_without_consul() -> SourceCatalog {
        SourceCatalog(BTreeMap::from([
            (SourceName::configmap(), Scope::Namespaced),
            (SourceName::secret(), Scope::Namespaced),
        ]))
    }

    fn mk_map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn mk_workload(meta: &[(&str, &str)], template: &[(&str, &str)], spec: PodSpec) -> Workload {
        Workload {
            id: WorkloadId::new(WorkloadKind::deployment(), NS, "web"),
            rollout: crate::model::Rollout::Unknown,
            ordered_pods: false,
            resource_version: None,
            annotations: mk_map(meta),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    annotations: Some(mk_map(template)),
                    ..ObjectMeta::default()
                }),
                spec: Some(spec),
            },
        }
    }

    fn mk_annotated(meta: &[(&str, &str)]) -> Workload {
        mk_workload(meta, &[], PodSpec::default())
    }

    fn mk_pod(volumes: Vec<Volume>, containers: Vec<Container>, init: Vec<Container>) -> PodSpec {
        PodSpec {
            volumes: Some(volumes),
            containers,
            init_containers: Some(init),
            ..PodSpec::default()
        }
    }

    fn mk_cm_volume(name: &str, items: &[&str]) -> Volume {
        let items = items
            .iter()
            .map(|k| KeyToPath {
                key: (*k).to_owned(),
                path: (*k).to_owned(),
                ..KeyToPath::default()
            })
            .collect::<Vec<_>>();
        Volume {
            name: format!("vol-{name}"),
            config_map: Some(ConfigMapVolumeSource {
                name: name.to_owned(),
                items: (!items.is_empty()).then_some(items),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        }
    }

    fn mk_secret_volume(name: &str, optional: bool) -> Volume {
        Volume {
            name: format!("vol-{name}"),
            secret: Some(SecretVolumeSource {
                secret_name: Some(name.to_owned()),
                optional: Some(optional),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        }
    }

    fn mk_container(name: &str, env_from_secrets: &[&str], env: Vec<EnvVar>) -> Container {
        Container {
            name: name.to_owned(),
            env_from: Some(
                env_from_secrets
                    .iter()
                    .map(|s| EnvFromSource {
                        secret_ref: Some(SecretEnvSource {
                            name: (*s).to_owned(),
                            optional: None,
                        }),
                        ..EnvFromSource::default()
                    })
                    .collect(),
            ),
            env: Some(env),
            ..Container::default()
        }
    }

    fn mk_env_cm_key(var: &str, name: &str, key: &str) -> EnvVar {
        EnvVar {
            name: var.to_owned(),
            value_from: Some(EnvVarSource {
                config_map_key_ref: Some(ConfigMapKeySelector {
                    name: name.to_owned(),
                    key: key.to_owned(),
                    optional: None,
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        }
    }

    fn mk_env_value(var: &str, value: &str) -> EnvVar {
        EnvVar {
            name: var.to_owned(),
            value: Some(value.to_owned()),
            ..EnvVar::default()
        }
    }

    // --- helpers ---

    fn parse(workload: &Workload) -> Dependencies {
        dependencies(workload, &AnnotationScheme::default(), &mk_catalog())
    }

    fn stamp<'a>(deps: &'a Dependencies, output_key: &str) -> &'a StampSpec {
        deps.stamps
            .iter()
            .find(|s| s.output.key() == output_key)
            .unwrap_or_else(|| panic!("no stamp {output_key} in {:?}", deps.stamps))
    }

    fn inputs(spec: &StampSpec) -> Vec<String> {
        spec.inputs
            .iter()
            .map(|i| format!("{}{}", i.tracked, if i.optional { " optional" } else { "" }))
            .collect()
    }

    fn categories(deps: &Dependencies) -> Vec<(&str, &'static str)> {
        deps.errors
            .iter()
            .map(|e| (e.key(), e.category()))
            .collect()
    }

    // --- native explicit references ---

    #[test]
    fn explicit_consul_reference_yields_single_native_checksum() {
        let deps = parse(&mk_annotated(&[("nudge.dev/consul-config", "app/config")]));
        assert!(deps.errors.is_empty(), "{:?}", deps.errors);
        let reference = Reference::key(SourceName::consul(), "app/config");
        assert_eq!(
            deps.stamps,
            vec![StampSpec {
                output: Output::PodTemplateAnnotation("nudge.dev/checksum-config".into()),
                combine: Combine::Single,
                inputs: vec![Input {
                    tracked: Tracked::new(reference.clone(), Algorithm::Native),
                    optional: false,
                }],
                origins: vec![(
                    reference,
                    Origin::Annotation("nudge.dev/consul-config".into())
                )],
            }]
        );
    }

    #[test]
    fn explicit_namespaced_reference_gets_workload_namespace() {
        let deps = parse(&mk_annotated(&[("nudge.dev/secret-db", "db-credentials")]));
        let spec = stamp(&deps, "nudge.dev/checksum-db");
        assert_eq!(
            spec.inputs[0].tracked.reference,
            Reference::object(SourceName::secret(), NS, "db-credentials")
        );
    }

    #[test]
    fn slot_may_contain_dashes_after_the_source() {
        let deps = parse(&mk_annotated(&[(
            "nudge.dev/configmap-feature-flags",
            "flags",
        )]));
        assert!(deps.errors.is_empty());
        stamp(&deps, "nudge.dev/checksum-feature-flags");
    }

    #[test]
    fn template_annotation_is_used_when_metadata_lacks_it() {
        let workload = mk_workload(
            &[],
            &[("nudge.dev/consul-config", "app/config")],
            PodSpec::default(),
        );
        let deps = parse(&workload);
        let spec = stamp(&deps, "nudge.dev/checksum-config");
        assert_eq!(spec.inputs[0].tracked.reference.name, "app/config");
    }

    #[test]
    fn workload_metadata_wins_over_template_on_same_key() {
        let workload = mk_workload(
            &[("nudge.dev/consul-config", "from/metadata")],
            &[
                ("nudge.dev/consul-config", "from/template"),
                ("nudge.dev/debounce", "1s"),
            ],
            PodSpec::default(),
        );
        let deps = parse(&workload);
        let spec = stamp(&deps, "nudge.dev/checksum-config");
        assert_eq!(spec.inputs.len(), 1);
        assert_eq!(spec.inputs[0].tracked.reference.name, "from/metadata");
        assert_eq!(deps.debounce, Some(Duration::from_secs(1)));
    }

    #[test]
    fn bad_slot_is_reported_and_valid_sibling_still_works() {
        let deps = parse(&mk_annotated(&[
            ("nudge.dev/consul-bad_", "a/b"),
            ("nudge.dev/consul-good", "a/c"),
        ]));
        assert_eq!(
            categories(&deps),
            vec![("nudge.dev/consul-bad_", "bad_slot")]
        );
        assert_eq!(deps.stamps.len(), 1);
        stamp(&deps, "nudge.dev/checksum-good");
    }

    #[test]
    fn slot_longer_than_checksum_name_allows_is_reported() {
        let fits = format!("nudge.dev/consul-{}", "s".repeat(MAX_SLOT_LEN));
        let too_long = format!("nudge.dev/c-{}", "s".repeat(MAX_SLOT_LEN + 1));
        let mut catalog = mk_catalog();
        catalog
            .0
            .insert(SourceName::new("c").expect("valid"), Scope::External);
        let workload = mk_annotated(&[(fits.as_str(), "a"), (too_long.as_str(), "b")]);
        let deps = dependencies(&workload, &AnnotationScheme::default(), &catalog);
        assert_eq!(categories(&deps), vec![(too_long.as_str(), "bad_slot")]);
        let written = format!("nudge.dev/checksum-{}", "s".repeat(MAX_SLOT_LEN));
        assert_eq!(written.len() - "nudge.dev/".len(), MAX_ANNOTATION_NAME_LEN);
        stamp(&deps, &written);
    }

    #[test]
    fn unknown_source_is_reported_and_valid_sibling_still_works() {
        let deps = parse(&mk_annotated(&[
            ("nudge.dev/vault-db", "x"),
            ("nudge.dev/consul.eu-db", "x"),
            ("nudge.dev/Consul-db", "x"),
            ("nudge.dev/consul-ok", "a/b"),
        ]));
        assert_eq!(
            categories(&deps),
            vec![
                ("nudge.dev/Consul-db", "unknown_source"),
                ("nudge.dev/consul.eu-db", "unknown_source"),
                ("nudge.dev/vault-db", "unknown_source"),
            ]
        );
        stamp(&deps, "nudge.dev/checksum-ok");
    }

    #[test]
    fn second_consul_cluster_is_a_source_when_configured() {
        let mut catalog = mk_catalog();
        catalog.0.insert(
            SourceName::new("consul.eu").expect("valid"),
            Scope::External,
        );
        let workload = mk_annotated(&[("nudge.dev/consul.eu-db", "db/url")]);
        let deps = dependencies(&workload, &AnnotationScheme::default(), &catalog);
        let spec = stamp(&deps, "nudge.dev/checksum-db");
        assert_eq!(
            spec.inputs[0].tracked.reference.source.as_str(),
            "consul.eu"
        );
    }

    #[test]
    fn invalid_references_are_reported_per_scope() {
        let deps = parse(&mk_annotated(&[
            ("nudge.dev/configmap-upper", "Flags"),
            ("nudge.dev/configmap-slash", "a/b"),
            ("nudge.dev/configmap-empty", ""),
            ("nudge.dev/consul-lead", "/app/config"),
            ("nudge.dev/consul-space", "app config"),
            ("nudge.dev/consul-ctrl", "app\u{7}"),
            ("nudge.dev/consul-none", ""),
            ("nudge.dev/consul-unicode", "app/größe"),
            ("nudge.dev/secret-dotted", "db.creds-1"),
        ]));
        let bad: Vec<_> = categories(&deps);
        assert_eq!(bad.len(), 7, "{bad:?}");
        assert!(bad.iter().all(|(_, c)| *c == "bad_reference"));
        stamp(&deps, "nudge.dev/checksum-unicode");
        stamp(&deps, "nudge.dev/checksum-dotted");
    }

    #[test]
    fn same_slot_on_two_sources_errors_on_both_and_uses_neither() {
        let deps = parse(&mk_annotated(&[
            ("nudge.dev/consul-db", "db/url"),
            ("nudge.dev/secret-db", "db"),
            ("nudge.dev/configmap-other", "other"),
        ]));
        assert_eq!(
            categories(&deps),
            vec![
                ("nudge.dev/consul-db", "duplicate_slot"),
                ("nudge.dev/secret-db", "duplicate_slot"),
            ]
        );
        assert_eq!(deps.stamps.len(), 1);
        stamp(&deps, "nudge.dev/checksum-other");
    }

    // --- native settings ---

    #[test]
    fn durations_parse_and_bad_duration_is_reported_with_sibling_intact() {
        let deps = parse(&mk_annotated(&[
            ("nudge.dev/debounce", "2m 30s"),
            ("nudge.dev/min-interval", "soon"),
            ("nudge.dev/consul-config", "app/config"),
        ]));
        assert_eq!(deps.debounce, Some(Duration::from_secs(150)));
        assert_eq!(deps.min_interval, None);
        assert_eq!(
            categories(&deps),
            vec![("nudge.dev/min-interval", "bad_duration")]
        );
        stamp(&deps, "nudge.dev/checksum-config");

        let deps = parse(&mk_annotated(&[("nudge.dev/min-interval", "45s")]));
        assert_eq!(deps.min_interval, Some(Duration::from_secs(45)));
    }

    #[test]
    fn over_long_name_is_reported_and_sibling_still_works() {
        let long = format!("nudge.dev/consul-{}", "x".repeat(60));
        let deps = parse(&mk_annotated(&[
            (long.as_str(), "a"),
            ("nudge.dev/consul-ok", "b"),
        ]));
        assert_eq!(categories(&deps), vec![(long.as_str(), "name_too_long")]);
        stamp(&deps, "nudge.dev/checksum-ok");
    }

    #[test]
    fn names_without_a_dash_are_unknown_annotations() {
        let deps = parse(&mk_annotated(&[
            ("nudge.dev/autos", "true"),
            ("nudge.dev/checksum", "x"),
            ("nudge.dev/", "x"),
            ("nudge.dev/consul-ok", "b"),
        ]));
        assert_eq!(
            categories(&deps),
            vec![
                ("nudge.dev/", "unknown_annotation"),
                ("nudge.dev/autos", "unknown_annotation"),
                ("nudge.dev/checksum", "unknown_annotation"),
            ]
        );
        stamp(&deps, "nudge.dev/checksum-ok");
    }

    #[test]
    fn names_nudge_writes_never_produce_errors_or_references() {
        let written = [
            ("nudge.dev/checksum-x", "sha256-00"),
            ("nudge.dev/checksum-db_v2.x", "hmac-sha256-00"),
            ("nudge.dev/config-hash", "sha256-11"),
            ("nudge.dev/last-updated", "2024-01-01T00:00:00Z"),
            ("nudge.dev/ignore", "true"),
            ("k8s-consul-mutator.io/checksum-x", "md5-22"),
            ("k8s-consul-mutator.io/last-updated", "2024-01-01T00:00:00Z"),
            ("wave.pusher.com/config-hash", "33"),
        ];
        let deps = parse(&mk_workload(&written, &written, PodSpec::default()));
        assert_eq!(deps, Dependencies::default());
    }

    #[test]
    fn stamped_workload_rereads_to_the_same_specs() {
        let requested = [
            ("nudge.dev/consul-config", "app/config"),
            ("nudge.dev/auto", "true"),
        ];
        let before = parse(&mk_annotated(&requested));
        let stamped = mk_workload(
            &[
                requested[0],
                requested[1],
                ("nudge.dev/last-updated", "2024-01-01T00:00:00Z"),
            ],
            &[
                ("nudge.dev/checksum-config", "sha256-ab"),
                ("nudge.dev/config-hash", "sha256-cd"),
            ],
            PodSpec::default(),
        );
        assert_eq!(parse(&stamped), before);
        assert!(before.errors.is_empty());
    }

    #[test]
    fn ignore_on_a_workload_is_skipped_silently() {
        let deps = parse(&mk_annotated(&[("nudge.dev/ignore", "whatever")]));
        assert_eq!(deps, Dependencies::default());
    }

    // --- native auto ---

    fn mk_auto_pod() -> PodSpec {
        mk_pod(
            vec![
                mk_cm_volume("app", &["a.yaml"]),
                mk_secret_volume("tls", true),
            ],
            vec![mk_container(
                "app",
                &["db"],
                vec![mk_env_cm_key("MODE", "flags", "mode")],
            )],
            vec![mk_container("init", &["bootstrap"], vec![])],
        )
    }

    #[test]
    fn auto_tracks_every_discovered_object_in_config_hash() {
        let workload = mk_workload(&[("nudge.dev/auto", "true")], &[], mk_auto_pod());
        let deps = parse(&workload);
        assert!(deps.errors.is_empty());
        let spec = stamp(&deps, "nudge.dev/config-hash");
        assert_eq!(spec.combine, Combine::NativeHash);
        assert_eq!(
            inputs(spec),
            vec![
                "configmap/shop/app[a.yaml] (native)",
                "configmap/shop/flags[mode] (native)",
                "secret/shop/bootstrap (native)",
                "secret/shop/db (native)",
                "secret/shop/tls (native) optional",
            ]
        );
        let bootstrap_origin = spec
            .origins
            .iter()
            .find(|(r, _)| r.name == "bootstrap")
            .map(|(_, o)| o.clone());
        assert_eq!(
            bootstrap_origin,
            Some(Origin::Discovered(
                r#"envFrom in initContainer "init""#.into()
            ))
        );
    }

    #[test]
    fn auto_false_tracks_nothing_and_garbage_is_reported() {
        let pod = mk_auto_pod();
        let deps = parse(&mk_workload(
            &[("nudge.dev/auto", "false")],
            &[],
            pod.clone(),
        ));
        assert_eq!(deps, Dependencies::default());
        let deps = parse(&mk_workload(&[("nudge.dev/auto", "yes")], &[], pod));
        assert!(deps.stamps.is_empty());
        assert_eq!(categories(&deps), vec![("nudge.dev/auto", "bad_bool")]);
    }

    #[test]
    fn auto_with_nothing_to_discover_still_stamps_the_empty_hash() {
        let deps = parse(&mk_annotated(&[("nudge.dev/auto", "true")]));
        assert!(stamp(&deps, "nudge.dev/config-hash").inputs.is_empty());
    }

    #[test]
    fn exclude_drops_objects_and_reports_malformed_items() {
        let workload = mk_workload(
            &[
                ("nudge.dev/auto", "true"),
                (
                    "nudge.dev/exclude",
                    "secret/db, configmap/flags,,bogus,deployment/x,secret/Bad",
                ),
            ],
            &[],
            mk_auto_pod(),
        );
        let deps = parse(&workload);
        assert_eq!(
            inputs(stamp(&deps, "nudge.dev/config-hash")),
            vec![
                "configmap/shop/app[a.yaml] (native)",
                "secret/shop/bootstrap (native)",
                "secret/shop/tls (native) optional",
            ]
        );
        assert_eq!(deps.excluded.len(), 2);
        assert_eq!(deps.errors.len(), 3);
        assert!(
            deps.errors
                .iter()
                .all(|e| e.key() == "nudge.dev/exclude" && e.category() == "bad_list_item")
        );
    }

    // --- Wave ---

    #[test]
    fn wave_uses_its_own_discovery_rules_and_extras() {
        let workload = mk_workload(
            &[
                ("wave.pusher.com/update-on-config-change", "true"),
                ("wave.pusher.com/extra-configmaps", "flags, other-ns/shared"),
                ("wave.pusher.com/extra-secrets", "api-key,Bad Name"),
            ],
            &[],
            mk_auto_pod(),
        );
        let deps = parse(&workload);
        let spec = stamp(&deps, "wave.pusher.com/config-hash");
        assert_eq!(spec.combine, Combine::Wave);
        assert_eq!(
            inputs(spec),
            vec![
                "configmap/other-ns/shared (wave)",
                "configmap/shop/app (wave)",
                "configmap/shop/flags (wave)",
                "secret/shop/api-key (wave)",
                "secret/shop/db (wave)",
                "secret/shop/tls (wave) optional",
            ]
        );
        assert_eq!(
            categories(&deps),
            vec![("wave.pusher.com/extra-secrets", "bad_list_item")]
        );
    }

    #[test]
    fn wave_disabled_reads_no_extras() {
        let deps = parse(&mk_annotated(&[
            ("wave.pusher.com/update-on-config-change", "false"),
            ("wave.pusher.com/extra-configmaps", "flags"),
        ]));
        assert_eq!(deps, Dependencies::default());
    }

    #[test]
    fn wave_extra_merges_with_discovered_keys() {
        let workload = mk_workload(
            &[
                ("wave.pusher.com/update-on-config-change", "true"),
                ("wave.pusher.com/extra-configmaps", "flags"),
            ],
            &[],
            mk_pod(
                vec![],
                vec![mk_container(
                    "app",
                    &[],
                    vec![mk_env_cm_key("M", "flags", "mode")],
                )],
                vec![],
            ),
        );
        let spec = stamp(&parse(&workload), "wave.pusher.com/config-hash").clone();
        assert_eq!(spec.inputs.len(), 1);
        assert_eq!(spec.inputs[0].tracked.reference.keys, KeySelection::All);
        assert_eq!(spec.origins.len(), 2);
    }

    // --- k8s-consul-mutator ---

    #[test]
    fn mutator_key_yields_md5_checksum_on_template_and_workload() {
        let deps = parse(&mk_annotated(&[
            ("k8s-consul-mutator.io/key-app", "app/config"),
            ("k8s-consul-mutator.io/checksum-app", "md5-00"),
        ]));
        assert!(deps.errors.is_empty());
        let spec = stamp(&deps, "k8s-consul-mutator.io/checksum-app");
        assert_eq!(
            spec.output,
            Output::PodTemplateAndWorkloadAnnotation("k8s-consul-mutator.io/checksum-app".into())
        );
        assert_eq!(spec.combine, Combine::Single);
        assert_eq!(inputs(spec), vec!["consul/app/config (md5)"]);
    }

    #[test]
    fn mutator_skip_disables_every_key() {
        let deps = parse(&mk_annotated(&[
            ("k8s-consul-mutator.io/key-app", "app/config"),
            ("k8s-consul-mutator.io/skip", ""),
        ]));
        assert_eq!(deps, Dependencies::default());
    }

    #[test]
    fn mutator_without_consul_source_is_reported() {
        let workload = mk_annotated(&[("k8s-consul-mutator.io/key-app", "app/config")]);
        let deps = dependencies(
            &workload,
            &AnnotationScheme::default(),
            &mk_catalog_without_consul(),
        );
        assert!(deps.stamps.is_empty());
        assert_eq!(
            categories(&deps),
            vec![("k8s-consul-mutator.io/key-app", "unknown_source")]
        );
    }

    #[test]
    fn mutator_bad_name_or_key_is_reported_and_sibling_works() {
        let deps = parse(&mk_annotated(&[
            ("k8s-consul-mutator.io/key-", "a"),
            ("k8s-consul-mutator.io/key-bad", " "),
            ("k8s-consul-mutator.io/key-ok", "a/b"),
            ("k8s-consul-mutator.io/other", "ignored"),
        ]));
        assert_eq!(
            categories(&deps),
            vec![
                ("k8s-consul-mutator.io/key-", "bad_slot"),
                ("k8s-consul-mutator.io/key-bad", "bad_reference"),
            ]
        );
        stamp(&deps, "k8s-consul-mutator.io/checksum-ok");
    }

    // --- Reloader ---

    #[test]
    fn reloader_updates_env_var_the_template_already_carries() {
        let pod = mk_pod(
            vec![mk_cm_volume("app-config", &["only"])],
            vec![mk_container(
                "app",
                &[],
                vec![mk_env_value("STAKATER_APP_CONFIG_CONFIGMAP", "abc")],
            )],
            vec![],
        );
        let deps = parse(&mk_workload(
            &[("reloader.stakater.com/auto", "true")],
            &[],
            pod,
        ));
        assert!(deps.errors.is_empty());
        let spec = stamp(&deps, "STAKATER_APP_CONFIG_CONFIGMAP");
        assert_eq!(
            spec.output,
            Output::ContainerEnv("STAKATER_APP_CONFIG_CONFIGMAP".into())
        );
        assert_eq!(spec.combine, Combine::Single);
        assert_eq!(inputs(spec), vec!["configmap/shop/app-config (reloader)"]);
        assert_eq!(deps.stamps.len(), 1);
    }

    #[test]
    fn reloader_env_var_in_init_container_counts() {
        let pod = mk_pod(
            vec![],
            vec![mk_container("app", &["db"], vec![])],
            vec![mk_container(
                "init",
                &[],
                vec![mk_env_value("STAKATER_DB_SECRET", "x")],
            )],
        );
        let deps = parse(&mk_workload(
            &[("secret.reloader.stakater.com/reload", "db")],
            &[],
            pod,
        ));
        assert_eq!(
            inputs(stamp(&deps, "STAKATER_DB_SECRET")),
            vec!["secret/shop/db (reloader)"]
        );
    }

    #[test]
    fn reloader_without_env_var_falls_back_to_config_hash_merged_with_auto() {
        let pod = mk_pod(
            vec![mk_cm_volume("app", &["a.yaml"])],
            vec![mk_container("app", &["db"], vec![])],
            vec![],
        );
        let workload = mk_workload(
            &[
                ("reloader.stakater.com/auto", "true"),
                ("nudge.dev/auto", "true"),
            ],
            &[],
            pod,
        );
        let deps = parse(&workload);
        assert_eq!(deps.stamps.len(), 1);
        let spec = stamp(&deps, "nudge.dev/config-hash");
        assert_eq!(spec.combine, Combine::NativeHash);
        assert_eq!(
            inputs(spec),
            vec!["configmap/shop/app (native)", "secret/shop/db (native)"]
        );
    }

    #[test]
    fn reloader_kind_specific_auto_only_tracks_that_kind() {
        let pod = mk_pod(
            vec![mk_cm_volume("app", &[])],
            vec![mk_container("app", &["db"], vec![])],
            vec![],
        );
        let deps = parse(&mk_workload(
            &[("configmap.reloader.stakater.com/auto", "true")],
            &[],
            pod.clone(),
        ));
        assert_eq!(
            inputs(stamp(&deps, "nudge.dev/config-hash")),
            vec!["configmap/shop/app (native)"]
        );
        let deps = parse(&mk_workload(
            &[("secret.reloader.stakater.com/auto", "true")],
            &[],
            pod,
        ));
        assert_eq!(
            inputs(stamp(&deps, "nudge.dev/config-hash")),
            vec!["secret/shop/db (native)"]
        );
    }

    #[test]
    fn reloader_reload_lists_are_required_and_validated() {
        let deps = parse(&mk_annotated(&[
            ("configmap.reloader.stakater.com/reload", "a, b,"),
            ("secret.reloader.stakater.com/reload", "s,UPPER"),
        ]));
        assert_eq!(
            inputs(stamp(&deps, "nudge.dev/config-hash")),
            vec![
                "configmap/shop/a (native)",
                "configmap/shop/b (native)",
                "secret/shop/s (native)"
            ]
        );
        assert_eq!(
            categories(&deps),
            vec![("secret.reloader.stakater.com/reload", "bad_list_item")]
        );
    }

    #[test]
    fn reloader_objects_sharing_an_env_var_are_reported() {
        let pod = mk_pod(
            vec![],
            vec![mk_container(
                "app",
                &[],
                vec![mk_env_value("STAKATER_A_B_CONFIGMAP", "x")],
            )],
            vec![],
        );
        let workload = mk_workload(
            &[("configmap.reloader.stakater.com/reload", "a-b,a.b")],
            &[],
            pod,
        );
        let deps = parse(&workload);
        assert!(deps.stamps.is_empty());
        assert_eq!(
            categories(&deps),
            vec![("configmap.reloader.stakater.com/reload", "duplicate_slot")]
        );
    }

    #[test]
    fn reloader_garbage_auto_value_is_reported() {
        let deps = parse(&mk_annotated(&[("reloader.stakater.com/auto", "yes")]));
        assert!(deps.stamps.is_empty());
        assert_eq!(
            categories(&deps),
            vec![("reloader.stakater.com/auto", "bad_bool")]
        );
    }

    fn mk_reloader_pod() -> PodSpec {
        mk_pod(
            vec![mk_cm_volume("app", &[]), mk_cm_volume("flags", &[])],
            vec![mk_container("app", &["db"], vec![])],
            vec![],
        )
    }

    #[test]
    fn reloader_auto_values_read_as_go_parse_bool() {
        for value in ["1", "t", "T", "TRUE", "true", "True"] {
            let deps = parse(&mk_workload(
                &[("reloader.stakater.com/auto", value)],
                &[],
                mk_reloader_pod(),
            ));
            assert!(deps.errors.is_empty(), "{value}: {:?}", deps.errors);
            assert_eq!(
                inputs(stamp(&deps, "nudge.dev/config-hash")).len(),
                3,
                "{value}"
            );
        }
    }

    #[test]
    fn reloader_exclude_lists_drop_objects_from_every_mode() {
        let deps = parse(&mk_workload(
            &[
                ("reloader.stakater.com/auto", "true"),
                (
                    "configmaps.exclude.reloader.stakater.com/reload",
                    " flags , other",
                ),
                ("secrets.exclude.reloader.stakater.com/reload", "db"),
            ],
            &[],
            mk_reloader_pod(),
        ));
        assert_eq!(
            inputs(stamp(&deps, "nudge.dev/config-hash")),
            vec!["configmap/shop/app (native)"]
        );
        // On the pod template they are not Reloader's exclude lists.
        let deps = parse(&mk_workload(
            &[("reloader.stakater.com/auto", "true")],
            &[("secrets.exclude.reloader.stakater.com/reload", "db")],
            mk_reloader_pod(),
        ));
        assert_eq!(inputs(stamp(&deps, "nudge.dev/config-hash")).len(), 3);
    }

    #[test]
    fn auto_reload_all_makes_unannotated_workloads_auto_unless_they_opt_out() {
        let scheme = AnnotationScheme::default().with_reloader_auto_all(true);
        let plain = mk_workload(&[], &[], mk_reloader_pod());
        let deps = dependencies(&plain, &scheme, &mk_catalog());
        let spec = stamp(&deps, "nudge.dev/config-hash");
        assert_eq!(spec.output, Output::Adopted("nudge.dev/config-hash".into()));
        assert_eq!(inputs(spec).len(), 3);

        let opted_out = mk_workload(
            &[("reloader.stakater.com/auto", "false")],
            &[],
            mk_reloader_pod(),
        );
        assert!(
            dependencies(&opted_out, &scheme, &mk_catalog())
                .stamps
                .is_empty()
        );
        // A typed annotation set to false opts that kind out only.
        let secrets_out = mk_workload(
            &[("secret.reloader.stakater.com/auto", "false")],
            &[],
            mk_reloader_pod(),
        );
        let deps = dependencies(&secrets_out, &scheme, &mk_catalog());
        assert_eq!(
            inputs(stamp(&deps, "nudge.dev/config-hash")),
            vec![
                "configmap/shop/app (native)",
                "configmap/shop/flags (native)"
            ]
        );
        // Workloads another scheme manages are left to it.
        let wave = mk_workload(
            &[("wave.pusher.com/update-on-config-change", "true")],
            &[],
            mk_reloader_pod(),
        );
        let deps = dependencies(&wave, &scheme, &mk_catalog());
        assert!(
            deps.stamps
                .iter()
                .all(|s| s.output.key() != "nudge.dev/config-hash")
        );
        // Without the setting nothing happens.
        assert!(parse(&plain).stamps.is_empty());
    }

    #[test]
    fn reloader_search_tracks_referenced_objects_gated_by_match() {
        let deps = parse(&mk_workload(
            &[("reloader.stakater.com/search", "true")],
            &[],
            mk_reloader_pod(),
        ));
        let spec = stamp(&deps, "nudge.dev/config-hash");
        assert_eq!(
            inputs(spec),
            vec![
                "configmap/shop/app (native) while matched",
                "configmap/shop/flags (native) while matched",
                "secret/shop/db (native) while matched",
            ]
        );
        assert!(
            spec.inputs
                .iter()
                .all(|i| i.tracked.gate == Gate::ReloaderMatch)
        );
    }

    #[test]
    fn reloader_pause_period_is_the_debounce_and_its_ceiling() {
        for (value, secs) in [
            ("30s", 30.0),
            ("5m", 300.0),
            ("1h30m", 5400.0),
            ("1.5h", 5400.0),
            ("500ms", 0.5),
        ] {
            let deps = parse(&mk_annotated(&[(
                "deployment.reloader.stakater.com/pause-period",
                value,
            )]));
            assert!(deps.errors.is_empty(), "{value}: {:?}", deps.errors);
            assert_eq!(
                deps.debounce,
                Some(Duration::from_secs_f64(secs)),
                "{value}"
            );
            assert_eq!(deps.max_delay, deps.debounce);
        }
        let deps = parse(&mk_annotated(&[(
            "deployment.reloader.stakater.com/pause-period",
            "soon",
        )]));
        assert_eq!(
            categories(&deps),
            vec![(
                "deployment.reloader.stakater.com/pause-period",
                "bad_duration"
            )]
        );
    }

    #[test]
    fn reloader_rollout_strategy_restart_is_answered_with_what_nudge_does_instead() {
        let deps = parse(&mk_annotated(&[(
            "reloader.stakater.com/rollout-strategy",
            "restart",
        )]));
        assert_eq!(
            categories(&deps),
            vec![("reloader.stakater.com/rollout-strategy", "unsupported")]
        );
        assert!(
            deps.errors[0].to_string().contains("pod template"),
            "{}",
            deps.errors[0]
        );
        let deps = parse(&mk_annotated(&[(
            "reloader.stakater.com/rollout-strategy",
            "rollout",
        )]));
        assert!(deps.errors.is_empty());
        let deps = parse(&mk_annotated(&[(
            "reloader.stakater.com/rollout-strategy",
            "blue",
        )]));
        assert_eq!(
            categories(&deps),
            vec![("reloader.stakater.com/rollout-strategy", "bad_value")]
        );
    }

    // --- holds: scheduling gate, Wave's scheduler swap ---

    fn outputs(deps: &Dependencies) -> Vec<String> {
        deps.stamps.iter().map(|s| s.output.to_string()).collect()
    }

    #[test]
    fn wave_workloads_are_gated_on_every_required_input() {
        let wave = [("wave.pusher.com/update-on-config-change", "true")];
        let deps = parse(&mk_workload(&wave, &[], mk_auto_pod()));
        let gate = stamp(&deps, "nudge.dev/awaiting-config");
        assert_eq!(gate.combine, Combine::Release);
        let hash = stamp(&deps, "wave.pusher.com/config-hash");
        let required: Vec<String> = hash
            .inputs
            .iter()
            .filter(|i| !i.optional)
            .map(|i| i.tracked.to_string())
            .collect();
        assert!(!required.is_empty());
        assert_eq!(inputs(gate), required, "optional inputs never hold pods");
        assert!(deps.errors.is_empty());

        let opted_out = [wave[0], ("nudge.dev/scheduling-gate", "false")];
        let deps = parse(&mk_workload(&opted_out, &[], mk_auto_pod()));
        assert_eq!(
            outputs(&deps),
            vec!["annotation wave.pusher.com/config-hash"]
        );
    }

    #[test]
    fn native_workloads_are_gated_only_when_they_opt_in() {
        let auto = [("nudge.dev/auto", "true")];
        let deps = parse(&mk_workload(&auto, &[], mk_auto_pod()));
        assert!(deps.stamps.iter().all(|s| s.combine != Combine::Release));

        let opted_in = [auto[0], ("nudge.dev/scheduling-gate", "true")];
        let deps = parse(&mk_workload(&opted_in, &[], mk_auto_pod()));
        assert!(!stamp(&deps, "nudge.dev/awaiting-config").inputs.is_empty());

        let garbage = [auto[0], ("nudge.dev/scheduling-gate", "yes please")];
        let deps = parse(&mk_workload(&garbage, &[], mk_auto_pod()));
        assert_eq!(
            categories(&deps),
            vec![("nudge.dev/scheduling-gate", "bad_bool")]
        );
        assert!(deps.stamps.iter().all(|s| s.combine != Combine::Release));
    }

    #[test]
    fn nothing_required_means_no_gate() {
        let opted_in = [
            ("nudge.dev/auto", "true"),
            ("nudge.dev/scheduling-gate", "true"),
        ];
        let pod = mk_pod(vec![mk_secret_volume("tls", true)], vec![], vec![]);
        let deps = parse(&mk_workload(&opted_in, &[], pod));
        assert_eq!(outputs(&deps), vec!["annotation nudge.dev/config-hash"]);
    }

    #[test]
    fn ordered_statefulsets_and_jobs_are_never_gated() {
        let wave = [("wave.pusher.com/update-on-config-change", "true")];
        let mut sts = mk_workload(&wave, &[], mk_auto_pod());
        sts.id = WorkloadId::new(WorkloadKind::stateful_set(), NS, "db");
        sts.ordered_pods = true;
        let deps = parse(&sts);
        assert!(deps.stamps.iter().all(|s| s.combine != Combine::Release));
        assert!(deps.errors.is_empty(), "Wave's default is silent");

        let explicit = [
            ("nudge.dev/auto", "true"),
            ("nudge.dev/scheduling-gate", "true"),
        ];
        let mut sts = mk_workload(&explicit, &[], mk_auto_pod());
        sts.ordered_pods = true;
        let deps = parse(&sts);
        assert_eq!(
            categories(&deps),
            vec![("nudge.dev/scheduling-gate", "unsupported")]
        );
        assert!(deps.errors[0].to_string().contains("OrderedReady"));

        let mut job = mk_workload(&explicit, &[], mk_auto_pod());
        job.id = WorkloadId::new(
            WorkloadKind::new("batch", "v1", "Job", TemplatePath::spec_template())
                .with_immutable_template(),
            NS,
            "once",
        );
        let deps = parse(&job);
        assert!(deps.stamps.iter().all(|s| s.combine != Combine::Release));
    }

    #[test]
    fn waves_scheduling_disabled_is_released_with_the_wave_inputs() {
        let held = [
            ("wave.pusher.com/update-on-config-change", "true"),
            ("wave.pusher.com/scheduling-disabled", "default-scheduler"),
            ("nudge.dev/scheduling-gate", "false"),
        ];
        let deps = parse(&mk_workload(&held, &[], mk_auto_pod()));
        let restore = deps
            .stamps
            .iter()
            .find(|s| s.output == Output::WaveSchedulingDisabled)
            .expect("restore spec");
        assert_eq!(restore.combine, Combine::Release);
        assert!(!restore.inputs.is_empty());
        assert!(deps.errors.is_empty());
        // On the pod template it is not Wave's: nothing to restore.
        let deps = parse(&mk_workload(&[], &held[1..2], mk_auto_pod()));
        assert!(deps.stamps.is_empty());
    }

    // --- schemes, ordering, robustness ---

    /// Found by the `annotations` fuzz target: a CronJob's explicit checksum,
    /// adopted after the specs were sorted, came before the k8s-consul-mutator
    /// checksum it sorts after.
    #[test]
    fn adopted_outputs_are_sorted_with_the_others() {
        let mut cron = mk_annotated(&[
            ("nudge.dev/consul-a_b", "app/config"),
            ("k8s-consul-mutator.io/key-a", "app/other"),
        ]);
        let template = TemplatePath::parse("spec.jobTemplate.spec.template").unwrap();
        let kind = WorkloadKind::new("batch", "v1", "CronJob", template).adopting_first_stamp();
        cron.id = WorkloadId::new(kind, NS, "nightly");
        let deps = parse(&cron);
        assert!(deps.errors.is_empty(), "{:?}", deps.errors);
        let outputs: Vec<_> = deps.stamps.iter().map(|s| s.output.clone()).collect();
        assert_eq!(
            outputs,
            vec![
                Output::PodTemplateAndWorkloadAnnotation(
                    "k8s-consul-mutator.io/checksum-a".to_owned()
                ),
                Output::Adopted("nudge.dev/checksum-a_b".to_owned()),
            ]
        );
    }

    /// With k8s-consul-mutator's prefix as the native one, an explicit native
    /// reference and a mutator key write the same pod-template annotation through
    /// outputs of two shapes: a clash, reported on both, neither used.
    #[test]
    fn outputs_of_two_shapes_on_one_annotation_are_a_clash() {
        let scheme = AnnotationScheme::new("k8s-consul-mutator.io");
        let workload = mk_annotated(&[
            ("k8s-consul-mutator.io/consul-a", "app/config"),
            ("k8s-consul-mutator.io/key-a", "app/other"),
        ]);
        let deps = dependencies(&workload, &scheme, &mk_catalog());
        assert!(deps.stamps.is_empty(), "{:?}", deps.stamps);
        let clashes: Vec<_> = categories(&deps)
            .into_iter()
            .filter(|(_, category)| *category == "duplicate_slot")
            .collect();
        assert_eq!(
            clashes,
            vec![
                ("k8s-consul-mutator.io/consul-a", "duplicate_slot"),
                ("k8s-consul-mutator.io/key-a", "duplicate_slot"),
            ]
        );
    }

    #[test]
    fn custom_prefix_replaces_nudge_dev() {
        let scheme = AnnotationScheme::new("example.com");
        let workload =
            mk_annotated(&[("example.com/consul-config", "a"), ("nudge.dev/bogus", "x")]);
        let deps = dependencies(&workload, &scheme, &mk_catalog());
        assert!(deps.errors.is_empty());
        stamp(&deps, "example.com/checksum-config");
        assert_eq!(scheme.config_hash(), "example.com/config-hash");
        assert_eq!(scheme.last_updated(), "example.com/last-updated");
    }

    #[test]
    fn stamps_are_sorted_by_output() {
        let deps = parse(&mk_annotated(&[
            ("nudge.dev/consul-z", "z"),
            ("nudge.dev/consul-a", "a"),
            ("k8s-consul-mutator.io/key-m", "m"),
            ("nudge.dev/auto", "true"),
        ]));
        let outputs: Vec<_> = deps.stamps.iter().map(|s| s.output.clone()).collect();
        let mut sorted = outputs.clone();
        sorted.sort();
        assert_eq!(outputs, sorted);
        assert_eq!(outputs.len(), 4);
    }

    #[test]
    fn hostile_input_produces_errors_not_panics() {
        let huge = "x".repeat(1 << 20);
        let unicode_key = "nudge.dev/ünïcödé-slöt";
        let deps = parse(&mk_annotated(&[
            ("nudge.dev/-", ""),
            ("nudge.dev/consul-", "a"),
            ("nudge.dev/-slot", "a"),
            ("nudge.dev/debounce", huge.as_str()),
            ("nudge.dev/exclude", huge.as_str()),
            ("nudge.dev/configmap-big", huge.as_str()),
            (unicode_key, "ü"),
            ("nudge.dev/consul-ok", "a/b"),
        ]));
        assert_eq!(deps.errors.len(), 7, "{:?}", categories(&deps));
        assert!(deps.errors.iter().all(|e| e.to_string().len() < 500));
        stamp(&deps, "nudge.dev/checksum-ok");
    }

    #[test]
    fn errors_render_the_annotation_key() {
        let deps = parse(&mk_annotated(&[("nudge.dev/consul-bad_", "x")]));
        assert!(deps.errors[0].to_string().contains("nudge.dev/consul-bad_"));
    }

    #[test]
    fn template_without_spec_or_metadata_is_fine() {
        let workload = Workload {
            id: WorkloadId::new(WorkloadKind::stateful_set(), NS, "db"),
            rollout: crate::model::Rollout::Unknown,
            ordered_pods: false,
            resource_version: None,
            annotations: mk_map(&[
                ("nudge.dev/auto", "true"),
                ("wave.pusher.com/update-on-config-change", "true"),
            ]),
            template: PodTemplateSpec::default(),
        };
        let deps = parse(&workload);
        assert_eq!(deps.stamps.len(), 2);
        assert!(deps.stamps.iter().all(|s| s.inputs.is_empty()));
    }

    // --- ignore on sources ---

    #[test]
    fn sources_are_ignored_by_native_or_reloader_annotation() {
        let scheme = AnnotationScheme::default();
        assert!(is_ignored(
            &mk_map(&[("nudge.dev/ignore", "true")]),
            &scheme
        ));
        assert!(is_ignored(
            &mk_map(&[("reloader.stakater.com/ignore", "true")]),
            &scheme
        ));
        assert!(!is_ignored(
            &mk_map(&[("nudge.dev/ignore", "false")]),
            &scheme
        ));
        assert!(!is_ignored(
            &mk_map(&[("nudge.dev/ignore", "yes")]),
            &scheme
        ));
        assert!(!is_ignored(&BTreeMap::new(), &scheme));
        let custom = AnnotationScheme::new("example.com");
        assert!(is_ignored(
            &mk_map(&[("example.com/ignore", "true")]),
            &custom
        ));
        assert!(!is_ignored(
            &mk_map(&[("nudge.dev/ignore", "true")]),
            &custom
        ));
    }

    #[test]
    fn written_names_come_from_one_place() {
        let slot = Slot::new("db", MAX_SLOT_LEN).expect("valid slot");
        assert_eq!(
            AnnotationScheme::default().checksum(&slot),
            "nudge.dev/checksum-db"
        );
        assert_eq!(mutator_checksum(&slot), "k8s-consul-mutator.io/checksum-db");
    }
}
