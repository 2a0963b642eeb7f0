//! Snapshots (design §5e): immutable per-revision copies of the ConfigMaps
//! and Secrets a pod template references, so the pods of a config revision
//! see that revision's content whenever they start.
//!
//! Everything here is pure: what a copy is called, what it holds, which
//! copies a pod template names, and how a template is pointed at copies and
//! back. Creating and deleting copies is the `copies` adapter's I/O, done by
//! the engine's driver before the stamp that names them is written.
//!
//! - A [`SnapshotKey`] is one object and the keys the template uses of it
//!   (`configmap/app-config`, `secret/db[password]`).
//! - A [`Snapshot`] is what a template's snapshot holds: for each key, the
//!   fingerprint of the content its copy holds. It is written on the pod
//!   template as `<prefix>/snapshots` (canonical JSON), and it is the value
//!   the stamp compares: a template is at a revision's snapshot exactly when
//!   the two are equal.
//! - [`copy_name`] names a copy from its workload, key and fingerprint, so
//!   the name says which content the copy holds and the same revision always
//!   names the same copy (creation is idempotent by name).
//! - [`TemplateSnapshot`] reads a pod template: the snapshot it really uses
//!   (entries whose copies it references), and its references with copies
//!   mapped back to the objects they copy.
//! - [`rewrite()`] lists the reference names to replace to move a template
//!   (as JSON) from one snapshot to another, or back to the live objects.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::fingerprint::{DataValue, ObjectData, ObjectKind};
use crate::model::{KeySelection, Name, WorkloadId};

mod rewrite;
mod rollback;
mod template;

pub use rewrite::{Replacement, rewrite};
pub use rollback::{RecordedRevision, RollbackError, Verdict, choose, judge};
pub use template::{TemplateSnapshot, admitted};

/// Hex digits of a copy name's suffix (as kustomize's generated names, 10).
pub const SUFFIX_LEN: usize = 10;
/// The longest object name Kubernetes accepts (a DNS-1123 subdomain).
pub const MAX_NAME_LEN: usize = 253;
/// What [`copy_name`] keeps of a source name: the rest of [`MAX_NAME_LEN`]
/// after `-` and the suffix.
const MAX_STEM_LEN: usize = MAX_NAME_LEN - 1 - SUFFIX_LEN;
/// Secret type whose objects Kubernetes populates itself: a copy of one is
/// `Opaque` (the content is what counts to a pod).
const SERVICE_ACCOUNT_TOKEN: &str = "kubernetes.io/service-account-token";
/// The type of a Secret copy whose source has none, or whose keys are
/// narrowed (a typed Secret's required keys may be left out).
const OPAQUE: &str = "Opaque";

/// The names of nudge's snapshot annotations and labels, from the annotation
/// scheme (`AnnotationScheme::snapshot_names`), so this module spells none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotNames {
    /// `<prefix>/snapshots`, on the pod template: the [`Snapshot`] it uses.
    pub template: String,
    /// `<prefix>/snapshot-copy`, a label on every copy (`"true"`).
    pub copy_label: String,
    /// `<prefix>/snapshot-of`, on a copy: its [`SnapshotKey`].
    pub copy_of: String,
    /// `<prefix>/fingerprint`, on a copy: the fingerprint of what it holds.
    pub fingerprint: String,
    /// `<prefix>/snapshot-bytes`, on a copy: the size of its values.
    pub bytes: String,
}

/// `engine.snapshots`: which workloads take snapshots. Copies need `create`,
/// `patch` and `delete` on ConfigMaps and Secrets, which the chart and the
/// overlays grant only with snapshots on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum SnapshotMode {
    /// No workload (the default): a workload asking for snapshots is told
    /// they are off, and one that has copies is pointed back at the live
    /// objects.
    #[default]
    Off,
    /// Workloads annotated `<prefix>/snapshot: "true"`.
    OptIn,
    /// Every workload nudge stamps, unless annotated `<prefix>/snapshot:
    /// "false"` (never a Job: nudge recreates a Job to change its template,
    /// and its copies would go with the old one).
    All,
}

/// The value of a snapshot that copies nothing: what a template without
/// `<prefix>/snapshots` holds.
pub const NO_SNAPSHOT: &str = "{}";

/// The label every tool reads for "who manages this object".
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// One ConfigMap or Secret of a pod template, and the keys the template uses
/// of it (every place it is referenced, merged): what one copy holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SnapshotKey {
    /// ConfigMap or Secret.
    pub kind: ObjectKind,
    /// The object's name, in the workload's namespace.
    pub name: Name,
    /// The keys the template uses.
    pub keys: KeySelection,
}

impl SnapshotKey {
    /// The key of `name` of `kind`, narrowed to `keys`.
    pub fn new(kind: ObjectKind, name: impl Into<Name>, keys: KeySelection) -> Self {
        Self {
            kind,
            name: name.into(),
            keys,
        }
    }
}

impl fmt::Display for SnapshotKey {
    /// `configmap/<name>`, or `secret/<name>[k1,k2]` when narrowed (keys in
    /// byte order): the form [`Snapshot`]s are written in.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind.source(), self.name)?;
        if let Some(keys) = self.keys.listed() {
            write!(f, "[{keys}]")?;
        }
        Ok(())
    }
}

/// Why a snapshot annotation could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The value is not a JSON object of strings.
    #[error("not a JSON object of strings")]
    NotAnObject,
    /// A key is not `configmap/<name>` or `secret/<name>`, optionally with
    /// `[keys]`.
    #[error("{key:?} is not configmap/<name> or secret/<name>, with [keys] optionally")]
    Key {
        /// The key as written (cut short).
        key: String,
    },
}

impl FromStr for SnapshotKey {
    type Err = SnapshotError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || SnapshotError::Key {
            key: crate::errors::excerpt(text, 80),
        };
        let (source, rest) = text.split_once('/').ok_or_else(bad)?;
        let kind = match source {
            "configmap" => ObjectKind::ConfigMap,
            "secret" => ObjectKind::Secret,
            _ => return Err(bad()),
        };
        let (name, keys) = match rest.split_once('[') {
            None => (rest, KeySelection::All),
            Some((name, keys)) => {
                let keys = keys.strip_suffix(']').ok_or_else(bad)?;
                let keys: BTreeSet<String> = keys.split(',').map(str::to_owned).collect();
                if keys.iter().any(String::is_empty) {
                    return Err(bad());
                }
                (name, KeySelection::Only(keys))
            }
        };
        if name.is_empty() {
            return Err(bad());
        }
        Ok(Self::new(kind, name, keys))
    }
}

/// What a pod template's snapshot holds: for each object and the keys used,
/// the fingerprint (nudge's native one: `sha256-…`, `hmac-sha256-…` for a
/// Secret) of the content its copy holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Snapshot(BTreeMap<SnapshotKey, String>);

impl Snapshot {
    /// An empty snapshot: every reference names the live object.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the copy of `key` holding content `fingerprint`.
    pub fn insert(&mut self, key: SnapshotKey, fingerprint: impl Into<String>) {
        self.0.insert(key, fingerprint.into());
    }

    /// The fingerprint the copy of `key` holds.
    pub fn get(&self, key: &SnapshotKey) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// Each key and the fingerprint of its copy, in key order.
    pub fn entries(&self) -> impl Iterator<Item = (&SnapshotKey, &str)> {
        self.0.iter().map(|(k, v)| (k, v.as_str()))
    }

    /// Whether no object is snapshotted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many objects are snapshotted.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Each key with the name of its copy for the workload `owner`.
    pub fn copies<'a>(
        &'a self,
        owner: &'a WorkloadId,
    ) -> impl Iterator<Item = (&'a SnapshotKey, String)> + 'a {
        self.0
            .iter()
            .map(move |(key, fingerprint)| (key, copy_name(owner, key, fingerprint)))
    }

    /// The annotation value: a compact JSON object, keys in byte order, so
    /// that equal snapshots are equal text. [`NO_SNAPSHOT`] when empty.
    pub fn to_annotation(&self) -> String {
        let entries: BTreeMap<String, &str> = self
            .0
            .iter()
            .map(|(key, fingerprint)| (key.to_string(), fingerprint.as_str()))
            .collect();
        serde_json::to_string(&entries).unwrap_or_else(|_| "{}".to_owned())
    }

    /// What it copies, for people: `copies of configmap/app-config,
    /// secret/db`, or `no copies`.
    pub fn summary(&self) -> String {
        if self.is_empty() {
            return "no copies".to_owned();
        }
        let keys: Vec<String> = self.0.keys().map(ToString::to_string).collect();
        format!("copies of {}", keys.join(", "))
    }

    /// Reads an annotation value written by [`to_annotation`](Self::to_annotation).
    pub fn parse(text: &str) -> Result<Self, SnapshotError> {
        let entries: BTreeMap<String, String> =
            serde_json::from_str(text).map_err(|_| SnapshotError::NotAnObject)?;
        let mut snapshot = Self::new();
        for (key, fingerprint) in entries {
            snapshot.insert(key.parse()?, fingerprint);
        }
        Ok(snapshot)
    }
}

/// The name of the copy of `key` holding content `fingerprint`, for the
/// workload `owner`: the object's name (cut to fit) and 10 hex digits of a
/// SHA-256 over the owner's group, kind and name, the key and the
/// fingerprint. One copy per workload (design §5e: a copy is owned by one
/// workload, so pruning and garbage collection never weigh another's use);
/// the hash covers a Secret's keyed fingerprint only, so a name reveals
/// nothing of its content.
pub fn copy_name(owner: &WorkloadId, key: &SnapshotKey, fingerprint: &str) -> String {
    let mut hasher = Sha256::new();
    let kind = &owner.kind;
    let key_text = key.to_string();
    for part in [
        "nudge-snapshot/1",
        kind.group(),
        kind.as_str(),
        &owner.name,
        &key_text,
        fingerprint,
    ] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    let digest = hex::encode(hasher.finalize());
    format!("{}-{}", stem(&key.name), &digest[..SUFFIX_LEN])
}

/// `name` cut to [`MAX_STEM_LEN`], without a trailing `-` or `.`, so that
/// `<stem>-<suffix>` is a DNS-1123 subdomain.
fn stem(name: &str) -> &str {
    let cut = name.get(..MAX_STEM_LEN.min(name.len())).unwrap_or(name);
    cut.trim_end_matches(['-', '.'])
}

/// The workload that owns a copy, as its owner reference names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// `apps/v1`, …
    pub api_version: String,
    /// `Deployment`, …
    pub kind: String,
    /// The workload's name.
    pub name: String,
    /// The workload's `metadata.uid`: a copy belongs to this object, not to
    /// a later one of the same name.
    pub uid: String,
}

impl Owner {
    /// The owner reference a copy carries: neither `controller` (no
    /// controller manages copies) nor `blockOwnerDeletion` (which needs
    /// permission on the owner's finalizers, and would hold a foreground
    /// deletion of the workload on nudge's copies).
    pub fn reference(&self) -> Value {
        json!({
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
        })
    }

    /// Whether `object`'s owner references name this owner (by uid).
    pub fn owns(&self, object: &Value) -> bool {
        owner_uids(object).any(|uid| uid == self.uid)
    }
}

/// The uids an object's owner references name.
pub fn owner_uids(object: &Value) -> impl Iterator<Item = &str> {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|owner| owner.get("uid").and_then(Value::as_str))
}

/// One copy to make: what it copies, the content it must hold and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyPlan {
    /// The object and keys copied.
    pub key: SnapshotKey,
    /// The fingerprint the copy's content must have: the one the stamp
    /// naming the copy carries.
    pub fingerprint: String,
    /// [`copy_name`] of both, for the workload.
    pub name: String,
}

impl CopyPlan {
    /// The plan for `owner`'s copy of `key` holding `fingerprint`.
    pub fn new(owner: &WorkloadId, key: SnapshotKey, fingerprint: impl Into<String>) -> Self {
        let fingerprint = fingerprint.into();
        let name = copy_name(owner, &key, &fingerprint);
        Self {
            key,
            fingerprint,
            name,
        }
    }
}

/// The copy `plan` describes, as the object to create in `namespace`:
/// `data` (the source's content narrowed to the plan's keys), `immutable:
/// true`, nudge's label and annotations (never the source's: a GitOps tool's
/// tracking label copied along would have it prune the copy), and `owner`'s
/// reference. A Secret keeps its source's `type` when every key is copied,
/// else is `Opaque`.
pub fn copy_object(
    plan: &CopyPlan,
    namespace: &str,
    owner: &Owner,
    data: &ObjectData,
    secret_type: Option<&str>,
    names: &SnapshotNames,
) -> Value {
    let mut text = Map::new();
    let mut binary = Map::new();
    let b64 = |bytes: &[u8]| Value::from(base64::engine::general_purpose::STANDARD.encode(bytes));
    for (key, value) in &data.0 {
        match (plan.key.kind, value) {
            (ObjectKind::ConfigMap, DataValue::Text(text_value)) => {
                text.insert(key.clone(), Value::from(text_value.as_str()));
            }
            (_, value) => {
                binary.insert(key.clone(), b64(value.bytes()));
            }
        }
    }
    let mut object = json!({
        "apiVersion": "v1",
        "kind": plan.key.kind.as_str(),
        "metadata": {
            "name": plan.name,
            "namespace": namespace,
            "labels": {MANAGED_BY: "nudge", names.copy_label.as_str(): "true"},
            "annotations": {
                names.copy_of.as_str(): plan.key.to_string(),
                names.fingerprint.as_str(): plan.fingerprint,
                names.bytes.as_str(): content_bytes(data).to_string(),
            },
            "ownerReferences": [owner.reference()],
        },
        "immutable": true,
    });
    match plan.key.kind {
        ObjectKind::ConfigMap => {
            if !text.is_empty() {
                object["data"] = Value::Object(text);
            }
            if !binary.is_empty() {
                object["binaryData"] = Value::Object(binary);
            }
        }
        ObjectKind::Secret => {
            let kind = match secret_type {
                Some(kind)
                    if kind != SERVICE_ACCOUNT_TOKEN && plan.key.keys == KeySelection::All =>
                {
                    kind
                }
                _ => OPAQUE,
            };
            object["type"] = Value::from(kind);
            if !binary.is_empty() {
                object["data"] = Value::Object(binary);
            }
        }
    }
    object
}

/// The size of a copy's content: its values' bytes (what a
/// `nudge_snapshot_bytes` gauge adds up).
pub fn content_bytes(data: &ObjectData) -> u64 {
    data.0
        .values()
        .map(|value| value.bytes().len() as u64)
        .sum()
}

#[cfg(test)]
mod tests;
