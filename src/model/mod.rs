//! The shared vocabulary of nudge: source names, slots, references, workloads, and
//! the stamp specifications that annotations and discovery produce and the engine consumes.
//!
//! Everything here is plain data: no I/O, no Kubernetes client types.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use smol_str::SmolStr;

mod catalog;
mod kind;
mod workload;

pub use catalog::{PodSpecRule, ReferenceCheck, SourceCatalog, default_reference_check};
pub use kind::{TemplatePath, TemplatePathError, WorkloadKind};
pub use workload::{ControllerRef, Rollout, RolloutFailure, Workload, WorkloadError};
pub(crate) use workload::{GENERATED_JOB_LABELS, is_job};

/// Wave's annotation holding the original `schedulerName` while it keeps a
/// workload's pods from scheduling.
pub const WAVE_SCHEDULING_DISABLED: &str = "wave.pusher.com/scheduling-disabled";

/// Reloader's annotation on a Deployment it paused (`spec.paused: true`) for
/// its `pause-period`: when it paused it (RFC 3339). Reloader removes it, and
/// resumes the Deployment, when the period ends.
pub const RELOADER_PAUSED_AT: &str = "deployment.reloader.stakater.com/paused-at";

/// Longest name part a Kubernetes annotation key may have.
pub const MAX_ANNOTATION_NAME_LEN: usize = 63;

/// Why a source name or slot was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    /// The string is empty.
    #[error("must not be empty")]
    Empty,
    /// The string contains a character or shape the grammar does not allow.
    #[error("{value:?} does not match {grammar}")]
    Grammar {
        /// The rejected value.
        value: String,
        /// The grammar it had to match.
        grammar: &'static str,
    },
    /// The string is longer than an annotation name allows.
    #[error("{value:?} is longer than {max} characters")]
    TooLong {
        /// The rejected value.
        value: String,
        /// The longest allowed length.
        max: usize,
    },
}

/// Name of a config source as it appears in annotations: `configmap`, `secret`,
/// `consul`, `consul.eu`. Grammar: `[a-z0-9]+(\.[a-z0-9]+)*` (no `-`, since the
/// first `-` of an annotation name ends the source name).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct SourceName(SmolStr);

impl SourceName {
    /// Grammar a source name must match.
    pub(crate) const GRAMMAR: &'static str = "[a-z0-9]+(.[a-z0-9]+)*";

    /// Validates and wraps a source name.
    pub fn new(value: impl Into<String>) -> Result<Self, NameError> {
        let value = value.into();
        if value.is_empty() {
            return Err(NameError::Empty);
        }
        let valid = value.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        });
        if !valid {
            return Err(NameError::Grammar {
                value,
                grammar: Self::GRAMMAR,
            });
        }
        if value.len() > MAX_ANNOTATION_NAME_LEN {
            return Err(NameError::TooLong {
                value,
                max: MAX_ANNOTATION_NAME_LEN,
            });
        }
        Ok(Self(value.into()))
    }

    /// The built-in ConfigMap source.
    pub(crate) fn configmap() -> Self {
        Self(SmolStr::new_static("configmap"))
    }

    /// The built-in Secret source.
    pub(crate) fn secret() -> Self {
        Self(SmolStr::new_static("secret"))
    }

    /// The default Consul source.
    pub(crate) fn consul() -> Self {
        Self(SmolStr::new_static("consul"))
    }

    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The per-workload name of an explicit reference; it names the written annotation
/// (`nudge.dev/checksum-<slot>`). Grammar: `[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Slot(String);

impl Slot {
    /// Grammar a slot must match.
    pub const GRAMMAR: &'static str = "[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?";

    /// Validates and wraps a slot. `max_len` is what is left of the 63-character
    /// annotation name once the fixed part (e.g. `checksum-`) is taken.
    pub fn new(value: impl Into<String>, max_len: usize) -> Result<Self, NameError> {
        let value = value.into();
        let bytes = value.as_bytes();
        let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
            return Err(NameError::Empty);
        };
        let inner_ok = bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if !(first.is_ascii_alphanumeric() && last.is_ascii_alphanumeric() && inner_ok) {
            return Err(NameError::Grammar {
                value,
                grammar: Self::GRAMMAR,
            });
        }
        if value.len() > max_len {
            return Err(NameError::TooLong {
                value,
                max: max_len,
            });
        }
        Ok(Self(value))
    }

    /// The slot as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A namespace, object name or key path as the model keeps it: names up to 23
/// bytes are stored inline and longer ones are shared on clone, so the many
/// copies of a reference across the graph, the sources and the fingerprint store
/// cost no allocation each. Derefs to `str`; build one with `.into()`.
pub type Name = SmolStr;

/// A value held by many structures at once, as one shared copy: clones point at
/// it, and equality, hashing, order, `Debug`, `Display` and serialization are
/// those of the contents. Fields are read through `Deref`. What the graph, the
/// fingerprint store, the sources and the queues hold tens of thousands of at
/// scale ([`Tracked`], [`WorkloadId`]) is held this way.
#[derive(Clone, Eq, PartialOrd, Ord)]
pub struct Shared<T>(Arc<T>);

impl<T> Shared<T> {
    /// Shares `value`.
    pub fn new_shared(value: T) -> Self {
        Self(Arc::new(value))
    }

    /// Whether both handles point at the same copy (not only equal contents).
    pub fn shares(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl<T: Clone> Shared<T> {
    /// The contents, without a copy when this is the only handle.
    pub fn into_inner(self) -> T {
        Arc::unwrap_or_clone(self.0)
    }
}

impl<T> std::ops::Deref for Shared<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: PartialEq> PartialEq for Shared<T> {
    fn eq(&self, other: &Self) -> bool {
        // Shared copies are the common case.
        self.shares(other) || self.0 == other.0
    }
}

impl<T: std::hash::Hash> std::hash::Hash for Shared<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // The contents, as equality compares them.
        self.0.hash(state);
    }
}

impl<T: fmt::Debug> fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<T: fmt::Display> fmt::Display for Shared<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<T: Serialize> Serialize for Shared<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// Identity of one workload: its kind, namespace and name. Cheap to clone:
/// the records, the graph's dependent sets and the queue hold one shared copy
/// between them.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct WorkloadId(Shared<WorkloadIdParts>);

/// The contents of a [`WorkloadId`], read inside the crate through `Deref`
/// (`id.namespace`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct WorkloadIdParts {
    /// Its kind.
    pub(crate) kind: WorkloadKind,
    /// Its namespace.
    pub(crate) namespace: Name,
    /// Its name.
    pub(crate) name: Name,
}

impl WorkloadId {
    /// Builds an id.
    pub fn new(kind: WorkloadKind, namespace: impl AsRef<str>, name: impl AsRef<str>) -> Self {
        Self(Shared::new_shared(WorkloadIdParts {
            kind,
            namespace: Name::from(namespace.as_ref()),
            name: Name::from(name.as_ref()),
        }))
    }

    /// Its namespace.
    pub fn namespace(&self) -> &str {
        &self.0.namespace
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Whether both handles point at the same copy (not only equal contents).
    #[cfg(test)]
    pub(crate) fn shares(&self, other: &Self) -> bool {
        self.0.shares(&other.0)
    }
}

impl std::ops::Deref for WorkloadId {
    type Target = WorkloadIdParts;

    fn deref(&self) -> &WorkloadIdParts {
        &self.0
    }
}

impl fmt::Debug for WorkloadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for WorkloadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for WorkloadIdParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

/// Which keys of an object a reference covers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[non_exhaustive]
pub enum KeySelection {
    /// Every key of the object.
    All,
    /// Only these keys (from `items`, `configMapKeyRef`, `secretKeyRef`).
    Only(BTreeSet<String>),
}

impl KeySelection {
    /// A selection of exactly one key.
    pub(crate) fn one(key: impl Into<String>) -> Self {
        Self::Only(BTreeSet::from([key.into()]))
    }

    /// The union of two selections; `All` absorbs everything.
    pub(crate) fn union(&self, other: &KeySelection) -> KeySelection {
        match (self, other) {
            (Self::Only(a), Self::Only(b)) => Self::Only(a.union(b).cloned().collect()),
            _ => Self::All,
        }
    }

    /// The keys of a narrowed selection, comma-separated in byte order
    /// (`k1,k2`), as references and snapshot keys print them; `None` for
    /// every key.
    pub(crate) fn listed(&self) -> Option<String> {
        match self {
            Self::All => None,
            Self::Only(keys) => Some(
                keys.iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        }
    }

    /// Whether `key` is covered.
    pub(crate) fn contains(&self, key: &str) -> bool {
        match self {
            Self::All => true,
            Self::Only(keys) => keys.contains(key),
        }
    }
}

/// One thing a workload depends on: an object or key in a source, possibly narrowed
/// to some keys.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Reference {
    /// The source that holds it.
    pub(crate) source: SourceName,
    /// Namespace, for namespaced sources (ConfigMap, Secret); `None` for Consul and
    /// other cluster-external sources.
    pub(crate) namespace: Option<Name>,
    /// Object name (ConfigMap/Secret) or key path (Consul).
    pub(crate) name: Name,
    /// Which keys count.
    pub(crate) keys: Keys,
}

/// A reference's [`KeySelection`], kept in 8 bytes: most references take
/// every key, and a reference is held in every tracked item (tens of
/// thousands at scale), so the narrowed set is boxed and "every key" costs
/// nothing. Reads as a [`KeySelection`] (`Deref`), orders and serializes as one.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Keys(Option<Box<KeySelection>>);

impl From<KeySelection> for Keys {
    fn from(keys: KeySelection) -> Self {
        match keys {
            // Never boxed: `None` is every key, so that equality and order
            // stay those of the selection.
            KeySelection::All => Self(None),
            only => Self(Some(Box::new(only))),
        }
    }
}

impl Keys {
    /// The selection, without a copy.
    pub(crate) fn into_selection(self) -> KeySelection {
        self.0.map_or(KeySelection::All, |keys| *keys)
    }
}

impl std::ops::Deref for Keys {
    type Target = KeySelection;

    fn deref(&self) -> &KeySelection {
        const ALL: &KeySelection = &KeySelection::All;
        self.0.as_deref().unwrap_or(ALL)
    }
}

impl PartialEq<KeySelection> for Keys {
    fn eq(&self, other: &KeySelection) -> bool {
        **self == *other
    }
}

impl Serialize for Keys {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl Reference {
    /// A reference to a whole namespaced object.
    pub(crate) fn object(
        source: SourceName,
        namespace: impl AsRef<str>,
        name: impl AsRef<str>,
    ) -> Self {
        Self {
            source,
            namespace: Some(Name::from(namespace.as_ref())),
            name: Name::from(name.as_ref()),
            keys: Keys::default(),
        }
    }

    /// A reference to a key of a cluster-external source such as Consul.
    pub(crate) fn key(source: SourceName, path: impl AsRef<str>) -> Self {
        Self {
            source,
            namespace: None,
            name: Name::from(path.as_ref()),
            keys: Keys::default(),
        }
    }

    /// The same reference narrowed to `keys`.
    pub(crate) fn with_keys(mut self, keys: KeySelection) -> Self {
        self.keys = keys.into();
        self
    }

    /// The source that holds it.
    pub fn source(&self) -> &SourceName {
        &self.source
    }

    /// Its namespace, for namespaced sources (ConfigMap, Secret); `None` for
    /// Consul and other cluster-external sources.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The object's name (ConfigMap, Secret) or key path (Consul): what the
    /// annotation wrote.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Reference {
    /// The reference's identity as nudge's combined `config-hash` encodes it: a
    /// wire format, pinned by golden vectors (`tests/fixtures/golden-vectors.json`)
    /// and independent of [`Display`](fmt::Display), so that changing how
    /// references print never changes a stamp. `source/name` or
    /// `source/namespace/name`, then `[k1,k2]` (keys in byte order) when narrowed.
    pub(crate) fn canonical_id(&self) -> String {
        let mut id = format!("{}/", self.source.as_str());
        if let Some(ns) = &self.namespace {
            id.push_str(ns);
            id.push('/');
        }
        id.push_str(&self.name);
        if let Some(keys) = self.keys.listed() {
            id.push('[');
            id.push_str(&keys);
            id.push(']');
        }
        id
    }
}

impl fmt::Display for Reference {
    /// `source/name`, or `source/namespace/name`, plus `[k1,k2]` when narrowed.
    /// Never contains content. For people; the stamp uses `canonical_id`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/", self.source)?;
        if let Some(ns) = &self.namespace {
            write!(f, "{ns}/")?;
        }
        f.write_str(&self.name)?;
        if let Some(keys) = self.keys.listed() {
            write!(f, "[{keys}]")?;
        }
        Ok(())
    }
}

/// How a source turns content into a fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[non_exhaustive]
pub enum Algorithm {
    /// nudge's own format: `sha256-<hex>` of the canonical encoding, or
    /// `hmac-sha256-<hex>` keyed by the installation key for sources holding secrets.
    Native,
    /// k8s-consul-mutator: `md5-<hex>` of the raw value bytes.
    Md5,
    /// Reloader: lowercase hex SHA-1 of the sorted `key=value` strings joined by `;`.
    Reloader,
    /// Reloader's SHA-512/256 builds: lowercase hex SHA-512/256 of the same
    /// string (see `fingerprint::reloader_object_sha512_256`).
    ReloaderSha512,
    /// Wave: the object's part of Wave's hash document (see `fingerprint::WaveFragment`).
    Wave,
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Native => "native",
            Self::Md5 => "md5",
            Self::Reloader => "reloader",
            Self::ReloaderSha512 => "reloader-sha512/256",
            Self::Wave => "wave",
        })
    }
}

/// What a source must fingerprint: a reference and the algorithm to use on it.
/// This is the unit sources track and the fingerprint store is keyed by.
///
/// Cheap to clone: the graph, the fingerprint store and the sources hold one
/// shared copy between them (at 10× scale there are tens of thousands, each
/// held in five places).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Tracked(Shared<TrackedItem>);

/// The contents of a [`Tracked`], read inside the crate through `Deref`
/// (`tracked.reference`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct TrackedItem {
    /// What is fingerprinted.
    pub(crate) reference: Reference,
    /// How.
    pub(crate) algorithm: Algorithm,
    /// When the object's changes count.
    pub(crate) gate: Gate,
}

/// When changes of a tracked object count. Outside the gate the source keeps the
/// last observation it reported (as for an ignored object).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[non_exhaustive]
pub enum Gate {
    /// Always (unless the object is ignored).
    #[default]
    Always,
    /// Only while the object carries `reloader.stakater.com/match: "true"`
    /// (Reloader's `search` mode), followed live.
    ReloaderMatch,
}

impl Tracked {
    /// Builds a tracked item whose changes always count.
    pub(crate) fn new(reference: Reference, algorithm: Algorithm) -> Self {
        Self(Shared::new_shared(TrackedItem {
            reference,
            algorithm,
            gate: Gate::Always,
        }))
    }

    /// What is fingerprinted.
    pub fn reference(&self) -> &Reference {
        &self.0.reference
    }

    /// How it is fingerprinted.
    pub fn algorithm(&self) -> Algorithm {
        self.0.algorithm
    }

    /// The same item, counting changes only inside `gate`.
    pub(crate) fn gated(mut self, gate: Gate) -> Self {
        Arc::make_mut(&mut (self.0).0).gate = gate;
        self
    }

    /// Whether both handles point at the same copy (not only equal contents).
    #[cfg(test)]
    pub(crate) fn shares(&self, other: &Self) -> bool {
        self.0.shares(&other.0)
    }

    /// The contents, without a copy when this is the only handle.
    pub(crate) fn into_inner(self) -> TrackedItem {
        self.0.into_inner()
    }
}

impl std::ops::Deref for Tracked {
    type Target = TrackedItem;

    fn deref(&self) -> &TrackedItem {
        &self.0
    }
}

impl fmt::Debug for Tracked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for Tracked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for TrackedItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.reference, self.algorithm)?;
        if self.gate == Gate::ReloaderMatch {
            f.write_str(" while matched")?;
        }
        Ok(())
    }
}

/// Where nudge writes one stamped value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[non_exhaustive]
pub enum Output {
    /// An annotation on the pod template (`spec.template.metadata.annotations`).
    PodTemplateAnnotation(String),
    /// The same annotation on the pod template and on the workload's own metadata
    /// (k8s-consul-mutator's checksums).
    PodTemplateAndWorkloadAnnotation(String),
    /// An environment variable already present in one or more containers of the pod
    /// template (Reloader's env-vars strategy); updated in place wherever it appears.
    ContainerEnv(String),
    /// An annotation on the workload's own metadata only: changing it rolls
    /// nothing. What an [`Output::Adopted`] output writes while it adopts.
    WorkloadAnnotation(String),
    /// An annotation adopted without a rollout: while the pod template does not
    /// carry it, its value is kept on the workload's own metadata; the first
    /// change after that writes it on both (and rolls). For workloads whose first
    /// stamp must not roll or run anything: Reloader-managed workloads that
    /// Reloader never reloaded, CronJobs, Jobs.
    Adopted(String),
    /// Reloader's annotations strategy: the combined fingerprint kept on the
    /// workload's own metadata under this key; when it changes,
    /// `reloader.stakater.com/last-reloaded-from` on the pod template is rewritten
    /// in Reloader's format (which is what rolls the pods).
    ReloaderSource(String),
    /// Argo Rollouts' restart (Reloader's `rollout-strategy: restart`): the
    /// combined fingerprint kept on the workload's own metadata under this key;
    /// when it changes, `spec.restartAt` is set to the time of the write, and
    /// Argo Rollouts restarts the pods without a pod-template change. Its first
    /// value is adopted like [`Output::Adopted`]'s: written on metadata only.
    RestartAt(String),
    /// A pod scheduling gate of this name (`spec.template.spec.schedulingGates`):
    /// the admission webhook adds it to a new workload whose required config is
    /// missing, so its pods wait `Pending`; nudge removes it, with the stamp, once
    /// the config exists.
    SchedulingGate(String),
    /// Wave's `wave.pusher.com/scheduling-disabled` (the original `schedulerName`
    /// kept while pods were sent to an invalid scheduler): restored once the
    /// config exists.
    WaveSchedulingDisabled,
    /// Reloader's pause of a Deployment (`spec.paused: true` with
    /// `deployment.reloader.stakater.com/paused-at`), left when Reloader went
    /// away within its `pause-period`: lifted (resumed, the annotation removed)
    /// once the workload's debounce, which that period sets, has passed.
    ReloaderPause,
    /// The pod template's snapshot (design §5e) under this annotation: the
    /// value (each ConfigMap and Secret copied, and the fingerprint of its
    /// copy) is written on the pod template, and its ConfigMap and Secret
    /// references are pointed at the copies it names. `{}`: every reference
    /// names the live object.
    Snapshots(String),
}

impl Output {
    /// The annotation key or env var name.
    pub fn key(&self) -> &str {
        match self {
            Self::PodTemplateAnnotation(k)
            | Self::PodTemplateAndWorkloadAnnotation(k)
            | Self::ContainerEnv(k)
            | Self::WorkloadAnnotation(k)
            | Self::Adopted(k)
            | Self::ReloaderSource(k)
            | Self::RestartAt(k)
            | Self::SchedulingGate(k)
            | Self::Snapshots(k) => k,
            Self::WaveSchedulingDisabled => WAVE_SCHEDULING_DISABLED,
            Self::ReloaderPause => RELOADER_PAUSED_AT,
        }
    }
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PodTemplateAnnotation(k) => write!(f, "annotation {k}"),
            Self::PodTemplateAndWorkloadAnnotation(k) => write!(f, "annotation {k} (+metadata)"),
            Self::ContainerEnv(k) => write!(f, "env {k}"),
            Self::WorkloadAnnotation(k) => write!(f, "annotation {k} (metadata)"),
            Self::Adopted(k) => write!(f, "annotation {k} (adopted)"),
            Self::ReloaderSource(k) => write!(f, "annotation {k} (Reloader's last-reloaded-from)"),
            Self::RestartAt(k) => {
                write!(f, "annotation {k} (metadata, restarts by spec.restartAt)")
            }
            Self::SchedulingGate(k) => write!(f, "scheduling gate {k}"),
            Self::WaveSchedulingDisabled => write!(f, "Wave's {WAVE_SCHEDULING_DISABLED}"),
            Self::ReloaderPause => write!(f, "Reloader's pause ({RELOADER_PAUSED_AT})"),
            Self::Snapshots(k) => write!(f, "snapshot {k} (copies the pods mount)"),
        }
    }
}

/// How the fingerprints of a stamp's inputs become the written value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[non_exhaustive]
pub enum Combine {
    /// Exactly one input; its fingerprint is the value (explicit slots, md5
    /// checksums, Reloader env vars).
    Single,
    /// nudge's combined `config-hash` over every input, sorted.
    NativeHash,
    /// Wave's `config-hash` document over every input object.
    Wave,
    /// Reloader's annotations strategy: nudge's combined hash over Reloader's
    /// per-object hashes, plus Reloader's `last-reloaded-from` document.
    ReloaderSource,
    /// Released (a scheduling gate lifted) once every required input exists.
    Release,
    /// A snapshot (design §5e): each input's fingerprint, by the object and
    /// keys it copies.
    Snapshot,
}

/// One input of a stamp.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Input {
    /// What is fingerprinted, and how.
    pub tracked: Tracked,
    /// An `optional: true` reference: when absent it counts as `absent` (or, for Wave,
    /// is left out) instead of blocking the stamp.
    pub optional: bool,
}

/// Where a reference was found, for `nudge explain` and Events.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[non_exhaustive]
pub enum Origin {
    /// An annotation, by its full key.
    Annotation(String),
    /// Pod-spec discovery, described briefly (`volume config`, `envFrom in container app`).
    Discovered(String),
}

/// One value nudge keeps up to date on a workload, and what it is computed from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StampSpec {
    /// Where the value is written.
    pub output: Output,
    /// How inputs combine.
    pub combine: Combine,
    /// The inputs, deduplicated and sorted.
    pub inputs: Vec<Input>,
    /// Where each input's reference was found; a reference found in several places
    /// has several entries.
    pub origins: Vec<(Reference, Origin)>,
}

/// Whether a source's references name objects in the workload's namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum Scope {
    /// ConfigMap, Secret: the reference is an object name in the workload's namespace.
    Namespaced,
    /// Consul and other external stores: the reference is a key path.
    External,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_keeps_every_key_without_a_box_and_orders_as_its_selection() {
        // A tracked item is held once per tracked reference (tens of
        // thousands at scale): its allocation stays within 112 bytes.
        let shared = size_of::<TrackedItem>() + 2 * size_of::<usize>();
        assert!(shared <= 112, "{shared} bytes with the Arc's counts");
        let whole = Reference::object(SourceName::configmap(), "ns", "app");
        let narrowed = whole.clone().with_keys(KeySelection::one("a"));
        assert_eq!(whole.keys, KeySelection::All);
        assert!(whole.keys.0.is_none());
        assert_eq!(whole.clone().with_keys(KeySelection::All), whole);
        assert!(
            whole < narrowed,
            "every key orders first, as KeySelection::All does"
        );
        assert!(narrowed.keys.contains("a") && !narrowed.keys.contains("b"));
        assert_eq!(
            serde_json::to_value(&narrowed).unwrap()["keys"],
            serde_json::to_value(KeySelection::one("a")).unwrap()
        );
        assert_eq!(
            narrowed.keys.clone().into_selection(),
            KeySelection::one("a")
        );
    }
}
