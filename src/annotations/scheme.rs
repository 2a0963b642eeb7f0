//! The native annotation names (`<prefix>/…`) and [`AnnotationScheme`], the one
//! place that spells the names nudge reads and writes under its prefix; plus
//! [`is_ignored`], the opt-out a ConfigMap or Secret carries.

use std::collections::BTreeMap;

use super::reloader::RELOADER_IGNORE;
use crate::model::{MAX_ANNOTATION_NAME_LEN, Output, Slot};
use crate::snapshot::{SnapshotMode, SnapshotNames};

/// k8s-consul-mutator: the annotation prefix (its names are read in
/// `mutator.rs`; here because [`AnnotationScheme::last_updated_keys`] writes
/// beside its checksums).
pub const MUTATOR_PREFIX: &str = "k8s-consul-mutator.io/";
/// k8s-consul-mutator: the workload-metadata timestamp nudge writes.
pub const MUTATOR_LAST_UPDATED: &str = "k8s-consul-mutator.io/last-updated";

/// The default native annotation prefix.
pub const DEFAULT_PREFIX: &str = "nudge.dev";

/// Longest slot: what `checksum-<slot>` leaves of a 63-character annotation name.
pub const MAX_SLOT_LEN: usize = MAX_ANNOTATION_NAME_LEN - CHECKSUM_PREFIX.len();

pub(super) const AUTO: &str = "auto";
pub(super) const EXCLUDE: &str = "exclude";
pub(super) const DEBOUNCE: &str = "debounce";
pub(super) const MIN_INTERVAL: &str = "min-interval";
pub(super) const IGNORE: &str = "ignore";
pub(super) const CONFIG_HASH: &str = "config-hash";
pub(super) const LAST_UPDATED: &str = "last-updated";
pub(super) const RUN_ON_CHANGE: &str = "run-on-change";
pub(super) const RELOADER_STATE: &str = "reloader-state";
pub(super) const SCHEDULING_GATE: &str = "scheduling-gate";
pub(super) const PROGRESS_DEADLINE: &str = "progress-deadline";
pub(super) const ROLLOUT: &str = "rollout";
pub(super) const HISTORY: &str = "history";
pub(super) const MODE: &str = "mode";
pub(super) const APPROVE: &str = "approve";
pub(super) const WINDOW: &str = "window";
pub(super) const WAVE: &str = "wave";
const AWAITING_CONFIG: &str = "awaiting-config";
pub(super) const SNAPSHOT: &str = "snapshot";
pub(super) const SNAPSHOTS: &str = "snapshots";
pub(super) const ROLLBACK_TO: &str = "rollback-to";
const SNAPSHOT_COPY: &str = "snapshot-copy";
const SNAPSHOT_OF: &str = "snapshot-of";
const SNAPSHOT_BYTES: &str = "snapshot-bytes";
const FINGERPRINT: &str = "fingerprint";
pub(super) const CHECKSUM_PREFIX: &str = "checksum-";

/// The native annotation prefix in use (`nudge.dev` unless configured otherwise),
/// and the one place that spells nudge's annotation names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotationScheme {
    /// The prefix before `/`, e.g. `nudge.dev`.
    pub prefix: String,
    /// Reloader's `--auto-reload-all`: a workload that no other scheme manages is
    /// Reloader-`auto` unless it opts out (`reloader.stakater.com/auto: "false"`).
    pub reloader_auto_all: bool,
    /// `engine.snapshots`: which workloads take snapshots (design §5e).
    pub snapshots: SnapshotMode,
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
            snapshots: SnapshotMode::Off,
        }
    }

    /// The same scheme with Reloader's `--auto-reload-all` on or off.
    pub fn with_reloader_auto_all(mut self, on: bool) -> Self {
        self.reloader_auto_all = on;
        self
    }

    /// The same scheme with snapshots taken as `mode` says (`engine.snapshots`).
    pub fn with_snapshots(mut self, mode: SnapshotMode) -> Self {
        self.snapshots = mode;
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

    /// `<prefix>/rollout`: on a workload, the rollout nudge started and follows
    /// (written with the stamp, removed when its outcome is recorded).
    pub fn rollout(&self) -> String {
        self.key(ROLLOUT)
    }

    /// `<prefix>/history`: on a workload, its last config revisions and how
    /// each rollout ended.
    pub fn history(&self) -> String {
        self.key(HISTORY)
    }

    /// `<prefix>/mode`: on a workload, `auto`, `notify` or `manual` (design §5d).
    pub fn mode(&self) -> String {
        self.key(MODE)
    }

    /// `<prefix>/approve`: on a workload in `manual` mode, `latest` or the
    /// pending fingerprint approved.
    pub fn approve(&self) -> String {
        self.key(APPROVE)
    }

    /// `<prefix>/window`: on a workload, its maintenance window.
    pub fn window(&self) -> String {
        self.key(WINDOW)
    }

    /// `<prefix>/wave`: on a workload, its wave among workloads sharing inputs.
    pub fn wave(&self) -> String {
        self.key(WAVE)
    }

    /// `<prefix>/snapshot`: on a workload, `"true"` asks for snapshots (with
    /// `engine.snapshots = "opt-in"`), `"false"` refuses them (with `"all"`).
    pub fn snapshot(&self) -> String {
        self.key(SNAPSHOT)
    }

    /// `<prefix>/snapshots`: on a pod template, written by nudge: the
    /// snapshot it uses (each object copied and the fingerprint its copy holds).
    pub fn snapshots(&self) -> String {
        self.key(SNAPSHOTS)
    }

    /// `<prefix>/rollback-to`: on a workload, the config revision whose
    /// snapshot its pod template is held at (`nudge rollback` sets it).
    pub fn rollback_to(&self) -> String {
        self.key(ROLLBACK_TO)
    }

    /// The annotations and label of snapshots, for the pure `snapshot` module.
    pub fn snapshot_names(&self) -> SnapshotNames {
        SnapshotNames {
            template: self.snapshots(),
            copy_label: self.key(SNAPSHOT_COPY),
            copy_of: self.key(SNAPSHOT_OF),
            fingerprint: self.key(FINGERPRINT),
            bytes: self.key(SNAPSHOT_BYTES),
        }
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

/// Whether a ConfigMap or Secret opted out: `<prefix>/ignore: "true"` or
/// `reloader.stakater.com/ignore: "true"`.
pub fn is_ignored(
    object_annotations: &BTreeMap<String, String>,
    scheme: &AnnotationScheme,
) -> bool {
    let is_true = |key: &str| object_annotations.get(key).is_some_and(|v| v == "true");
    is_true(&scheme.ignore()) || is_true(RELOADER_IGNORE)
}
