//! The stamp decision (design §2–§6): the desired stamp of a workload, the value
//! currently on it, and what to write. Kube-free: plain data in, plain data out.
//!
//! [`desired`] computes each output's value from the fingerprints a
//! [`FingerprintLookup`] knows; outputs whose inputs are unknown, missing or
//! unusable are [`Blocked`] and keep their current value. [`diff`] compares with the
//! workload and returns a [`StampPatch`] only when something would change, so an
//! identical stamp is never written; [`decide_admission`] makes the same decision
//! for an object under admission review.
//!
//! Two small renderers write a decision: [`apply_body`] (the controller's
//! server-side apply) and [`admission_patch`] (the webhook's JSON patch). Every
//! annotation name comes from [`AnnotationScheme`](crate::annotations::AnnotationScheme).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Container;

use crate::fingerprint::{ABSENT, Fingerprint, ObjectKind, Observation, combine_native, wave_hash};
use crate::model::{Combine, Input, Output, Reference, StampSpec, Tracked, Workload, WorkloadId};

mod admission;
mod apply;
mod current_outputs;
mod given_up;

pub use admission::{admission_patch, release_ops};
pub use apply::apply_body;
pub use current_outputs::CurrentOutputs;
pub(crate) use given_up::given_up_ops;

/// The desired value of a hold ([`Combine::Release`]) once it may be lifted.
pub const RELEASED: &str = "released";

/// Where an Argo Rollout takes the time its pods must be younger than: setting
/// it to now restarts them ([`Output::RestartAt`]).
const RESTART_AT: [&str; 2] = ["spec", "restartAt"];

/// Read access to what sources currently know about tracked items.
pub trait FingerprintLookup {
    /// The latest observation of `tracked`, or `None` when nothing is known yet (the
    /// source has not reported, or cannot reach its backend).
    fn observation(&self, tracked: &Tracked) -> Option<&Observation>;
}

/// The latest [`Observation`] of every tracked item, as sources report them.
#[derive(Debug, Clone, Default)]
pub struct FingerprintStore {
    observations: HashMap<Tracked, Observation>,
}

impl FingerprintStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records an observation; returns whether it differs from the previous one
    /// (only then do the dependents of `tracked` need another look).
    pub fn set(&mut self, tracked: Tracked, observation: Observation) -> bool {
        if self.observations.get(&tracked) == Some(&observation) {
            return false;
        }
        self.observations.insert(tracked, observation);
        true
    }

    /// Forgets an item (nobody tracks it any more); returns its last observation.
    pub fn remove(&mut self, tracked: &Tracked) -> Option<Observation> {
        self.observations.remove(tracked)
    }

    /// Number of items with an observation (metric).
    pub fn len(&self) -> usize {
        self.observations.len()
    }

    /// Whether no item has an observation.
    pub fn is_empty(&self) -> bool {
        self.observations.is_empty()
    }
}

impl FingerprintLookup for FingerprintStore {
    fn observation(&self, tracked: &Tracked) -> Option<&Observation> {
        self.observations.get(tracked)
    }
}

/// Reads the current observation of one input on demand: how the admission
/// webhook and `nudge explain` get what the [`FingerprintStore`] lacks. The runtime
/// implements it over the configured sources, so the layers that use it never
/// import them.
#[async_trait::async_trait]
pub trait InputReader: Send + Sync + 'static {
    /// The observation of `tracked` now. Errors are not content: an error must
    /// never be reported as [`Observation::Absent`].
    async fn read(&self, tracked: &Tracked) -> Result<Observation, ReadError>;
}

/// Why an input could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ReadError {
    /// A low-cardinality label (the source error's category).
    pub category: &'static str,
    /// What went wrong, without content.
    pub message: String,
}

/// Why an output cannot be computed now. The output keeps its current value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BlockReason {
    /// The source has not reported this input yet, or cannot reach its backend.
    /// Errors are not content: nothing is stamped until the state is known.
    #[error("{tracked} is not known yet")]
    Unknown {
        /// The input without an observation.
        tracked: Tracked,
    },
    /// A required input does not exist (and `stamp_on_delete` is off). Reported as a
    /// `MissingConfig` Event.
    #[error("required {reference} does not exist")]
    Missing {
        /// The missing reference.
        reference: Reference,
    },
    /// The input's fingerprint has a shape the output's combine cannot use (a Wave
    /// fragment in a digest output, or a digest in a Wave output): the spec and the
    /// source disagree on the algorithm.
    #[error("{tracked} has a {found} fingerprint, which a {combine:?} output cannot use")]
    WrongShape {
        /// The input with the unusable fingerprint.
        tracked: Tracked,
        /// How the output combines its inputs.
        combine: Combine,
        /// What the fingerprint is (`digest` or `wave fragment`).
        found: &'static str,
    },
    /// A [`Combine::Single`] output has no input or more than one.
    #[error("a single-value output needs exactly one input, it has {count}")]
    InputCount {
        /// How many inputs the spec has.
        count: usize,
    },
    /// A [`Combine::Wave`] input comes from a source other than `configmap` or
    /// `secret`, which Wave's document cannot hold.
    #[error("{reference} is not a ConfigMap or Secret, which Wave's hash cannot include")]
    NotWaveSource {
        /// The offending reference.
        reference: Reference,
    },
}

impl BlockReason {
    /// A short, static label for metrics and Event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Unknown { .. } => "unknown",
            Self::Missing { .. } => "missing",
            Self::WrongShape { .. } => "wrong_shape",
            Self::InputCount { .. } => "input_count",
            Self::NotWaveSource { .. } => "not_wave_source",
        }
    }
}

/// One output that cannot be computed now, and one reason why. An output with
/// several blocking inputs appears once per input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    /// The output that keeps its current value.
    pub output: Output,
    /// Why.
    pub reason: BlockReason,
}

/// The values a workload's outputs should have given the current source state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DesiredStamp {
    /// The value of every output that could be computed.
    pub values: BTreeMap<Output, String>,
    /// The outputs that could not, with reasons; none of them is in `values`.
    pub blocked: Vec<Blocked>,
    /// For [`Output::ReloaderSource`] outputs: the `last-reloaded-from` document to
    /// write when the value changes (its `observedAt` set when written).
    pub reloader_sources: BTreeMap<Output, String>,
}

impl DesiredStamp {
    /// The pending fingerprint (design §5d): `sha256-` and 12 hex digits of the
    /// desired values of every output, so that "the config a stamp would write
    /// now" has one short name in the core, its Events and `nudge explain`, and
    /// an approval can name it. The values are fingerprints already; this
    /// reveals no content.
    pub fn pending_fingerprint(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        for (output, value) in &self.values {
            hasher.update(output.key().as_bytes());
            hasher.update(b"=");
            hasher.update(value.as_bytes());
            hasher.update(b"\n");
        }
        let digest = hex::encode(hasher.finalize());
        format!("sha256-{}", &digest[..12])
    }
}

/// What to write to one workload. A target renders it with
/// [`TargetSettings::apply_patch`](crate::target::TargetSettings::apply_patch)
/// or [`TargetSettings::json_patch`](crate::target::TargetSettings::json_patch).
///
/// The patch is applied by **server-side apply with field manager `nudge`**, and a
/// field nudge owned but leaves out of an apply is removed. So `values` holds every
/// value nudge owns on the workload after the patch, not only the changed ones:
/// changed outputs at their new value, unchanged outputs at their current value,
/// and blocked outputs at their current value when they have one. Bookkeeping
/// fields the writer adds itself (such as `last-updated`) are not in `values`.
/// One entry is a request rather than a value: an `Output::RestartAt` key is
/// there only when the write restarts the pods (`spec.restartAt` set to now).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StampPatch {
    /// The workload to patch.
    pub(crate) id: WorkloadId,
    /// The outputs whose value changes, in spec order (never empty).
    pub(crate) changed: Vec<Output>,
    /// Every value nudge owns on the workload after the patch.
    pub(crate) values: BTreeMap<Output, String>,
    /// What to lift in the same change: fields nudge does not own (a scheduling
    /// gate the webhook added to the user's object, Wave's scheduler swap), so a
    /// writer must remove them explicitly rather than by leaving them out.
    pub(crate) releases: Vec<Release>,
}

/// A hold on a workload's pods that nudge lifts once its config exists.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Release {
    /// Remove the pod scheduling gate of this name.
    SchedulingGate(String),
    /// Restore `spec.template.spec.schedulerName` to `scheduler_name` and remove
    /// Wave's `wave.pusher.com/scheduling-disabled`.
    WaveScheduler {
        /// The scheduler Wave replaced.
        scheduler_name: String,
    },
    /// Resume a Deployment Reloader left paused (`spec.paused: false`, when it
    /// is paused) and remove its `deployment.reloader.stakater.com/paused-at`,
    /// as Reloader's own resume does.
    ReloaderPause,
}

/// Computes the desired value of each spec's output. With `stamp_on_delete`, an
/// absent required input is stamped as absent instead of blocking its output.
pub fn desired<L>(specs: &[StampSpec], lookup: &L, stamp_on_delete: bool) -> DesiredStamp
where
    L: FingerprintLookup + ?Sized,
{
    let mut stamp = DesiredStamp::default();
    for spec in specs.iter().filter(|spec| !hashes_nothing(spec)) {
        match evaluate(spec, lookup, stamp_on_delete) {
            Ok(value) => {
                if spec.combine == Combine::ReloaderSource
                    && let Some(source) = reloader_source(spec, lookup)
                {
                    stamp.reloader_sources.insert(spec.output.clone(), source);
                }
                stamp.values.insert(spec.output.clone(), value);
            }
            Err(reasons) => stamp
                .blocked
                .extend(reasons.into_iter().map(|reason| Blocked {
                    output: spec.output.clone(),
                    reason,
                })),
        }
    }
    stamp
}

/// Whether `spec` combines no input into a hash (`<prefix>/auto` on a pod spec
/// that references no ConfigMap or Secret, only Secrets Store CSI volumes say):
/// such an output has no desired value. Written, the hash of nothing would
/// roll the pods for no config at all; left out, the output keeps what it
/// holds, so one an older nudge wrote stays (removing it would roll them too).
/// A hold ([`Combine::Release`]) with no input is released at once.
fn hashes_nothing(spec: &StampSpec) -> bool {
    spec.inputs.is_empty()
        && matches!(
            spec.combine,
            Combine::NativeHash | Combine::Wave | Combine::ReloaderSource
        )
}

/// The value of `output` now on the workload, or `None` when it is unset or
/// inconsistent. A [`Output::PodTemplateAndWorkloadAnnotation`] has a value only
/// when both annotations carry the same one; a [`Output::ContainerEnv`] only when
/// every container and initContainer carrying the variable has the same plain
/// `value`. `None` differs from every desired value.
pub fn current(workload: &Workload, output: &Output) -> Option<String> {
    observe(workload, output).consistent().map(str::to_owned)
}

/// The patch that brings `workload` to `desired`, or `None` when every output that
/// is not blocked already has its desired value. The controller's decision; the
/// [`apply_body`] renderer writes it.
pub fn diff(
    workload: &Workload,
    specs: &[StampSpec],
    desired: &DesiredStamp,
) -> Option<StampPatch> {
    diff_since(workload, specs, desired, &BTreeMap::new())
}

/// [`diff`] for a workload whose outputs still to adopt (see [`adopting`]) had
/// the values `first_sight` when nudge first saw it. Adoption takes over what
/// was already there without a rollout; an output whose desired value differs
/// from its first-sight value changed while nudge was watching, so it is
/// written to the pod template (and rolls the pods) instead of adopted.
pub fn diff_since(
    workload: &Workload,
    specs: &[StampSpec],
    desired: &DesiredStamp,
    first_sight: &BTreeMap<Output, String>,
) -> Option<StampPatch> {
    let Plan {
        changed,
        values,
        releases,
    } = plan(
        workload,
        None,
        specs,
        desired,
        Adoption::Controller(first_sight),
    );
    (!changed.is_empty()).then(|| StampPatch {
        id: workload.id.clone(),
        changed,
        values,
        releases,
    })
}

/// The decision on one workload as the controller makes it, and `nudge
/// explain` reads it: its desired stamp, the patch that brings it there, and
/// whether that patch rolls it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The values its outputs should have now.
    pub desired: DesiredStamp,
    /// What to write; `None` when it is in sync.
    pub patch: Option<StampPatch>,
    /// Whether `patch` changes the pod template ([`changes_pod_template`]), not
    /// only metadata: only such a stamp is held by the delivery rules.
    pub rolls: bool,
}

impl Decision {
    /// Writing `patch` on `current` toward `desired`; whether it rolls is
    /// [`changes_pod_template`] of the patch.
    fn new(current: &Workload, desired: DesiredStamp, patch: Option<StampPatch>) -> Self {
        let rolls = patch
            .as_ref()
            .is_some_and(|patch| changes_pod_template(current, patch));
        Self {
            desired,
            patch,
            rolls,
        }
    }
}

/// [`desired`] from `lookup`, [`diff_since`] `first_sight` (empty: nothing
/// seen first, see [`diff_since`]) and [`changes_pod_template`], in that order.
pub fn decide<L>(
    current: &Workload,
    specs: &[StampSpec],
    lookup: &L,
    first_sight: &BTreeMap<Output, String>,
    stamp_on_delete: bool,
) -> Decision
where
    L: FingerprintLookup + ?Sized,
{
    let desired = desired(specs, lookup, stamp_on_delete);
    let patch = diff_since(current, specs, &desired, first_sight);
    Decision::new(current, desired, patch)
}

/// Whether writing `patch` changes `workload`'s pod template (and so rolls its
/// pods, runs a CronJob, or must recreate a Job), not only its metadata. A
/// restart through `spec.restartAt` ([`Output::RestartAt`]) counts as one: it
/// replaces every pod as a template change does, so it is a rollout to follow.
pub fn changes_pod_template(workload: &Workload, patch: &StampPatch) -> bool {
    !patch.releases.is_empty()
        || patch.values.iter().any(|(output, value)| {
            let on_template = match output {
                // Resolved values carry it only when the pods restart.
                Output::RestartAt(_) => return true,
                Output::PodTemplateAnnotation(key)
                | Output::PodTemplateAndWorkloadAnnotation(key)
                | Output::Adopted(key) => {
                    workload.template_annotations().get(key).map(String::as_str)
                }
                Output::ContainerEnv(_) | Output::Snapshots(_) => {
                    observe(workload, output).consistent()
                }
                Output::WorkloadAnnotation(_)
                | Output::ReloaderSource(_)
                | Output::SchedulingGate(_)
                | Output::WaveSchedulingDisabled
                | Output::ReloaderPause => return false,
            };
            on_template != Some(value.as_str())
        })
}

/// Whether `patch` changes `workload`'s pod template beyond its snapshot
/// (design §5e): a change of the config its pods run with, not only of the
/// copies they read it from. A CronJob starts a Job on the first only.
pub fn changes_config(workload: &Workload, patch: &StampPatch) -> bool {
    let mut config = patch.clone();
    config
        .values
        .retain(|output, _| !matches!(output, Output::Snapshots(_)));
    changes_pod_template(workload, &config)
}

/// The snapshot `patch` writes (design §5e), when the workload has one.
pub fn snapshot_of(patch: &StampPatch) -> Option<&str> {
    patch
        .values
        .iter()
        .find_map(|(output, value)| match output {
            Output::Snapshots(_) => Some(value.as_str()),
            _ => None,
        })
}

/// The decision on `current` held at a revision's snapshot (`snapshot`, its
/// value) by `rollback-to` (design §5e): the snapshot output at `snapshot`,
/// every other output at the value it holds, so only the copies the pods
/// read change.
pub fn pinned(current: &Workload, specs: &[StampSpec], snapshot: &str) -> Decision {
    let mut desired = DesiredStamp::default();
    for spec in specs {
        let value = match &spec.output {
            Output::Snapshots(_) => Some(snapshot.to_owned()),
            output => self::current(current, output),
        };
        if let Some(value) = value {
            desired.values.insert(spec.output.clone(), value);
        }
    }
    let patch = diff(current, specs, &desired);
    Decision::new(current, desired, patch)
}

/// Whether `patch` moves `workload`'s pod template to other snapshot copies
/// (design §5e): written by JSON patch, with the references it moves.
pub fn changes_snapshot(patch: &StampPatch) -> bool {
    patch
        .changed
        .iter()
        .any(|output| matches!(output, Output::Snapshots(_)))
}

/// The admission webhook's decision on an object under review (design §6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionDecision {
    /// Every value nudge owns on the object once admitted: desired values, and for
    /// blocked outputs the incoming value or, when the request dropped it, the
    /// stored object's (a GitOps re-apply must not drop the stamp).
    pub values: BTreeMap<Output, String>,
    /// Every output of the workload's specs, deduplicated, in spec order.
    pub outputs: Vec<Output>,
    /// Whether a desired value differs from the stored object's (UPDATE) or the
    /// incoming one's (CREATE): only then do the `last-updated` annotations move.
    pub stamp_changed: bool,
    /// Scheduling gates to add: a new workload whose required config is missing
    /// waits `Pending` instead of starting without it.
    pub gates: Vec<String>,
}

/// Decides what an admitted object carries: `incoming` is the object under review,
/// `stored` the object before an UPDATE (`None` on CREATE). The
/// [`admission_patch`] renderer writes it.
pub fn decide_admission(
    incoming: &Workload,
    stored: Option<&Workload>,
    specs: &[StampSpec],
    desired: &DesiredStamp,
) -> AdmissionDecision {
    // A new workload's pods start with the stamp on their template: adopting it
    // into metadata would only roll them later. An update leaves adoption to the
    // controller, which knows what the content was when it first saw the
    // workload (the webhook would adopt whatever the content is now).
    let adoption = if stored.is_some() {
        Adoption::LeftToController
    } else {
        Adoption::Never
    };
    let values = plan(incoming, stored, specs, desired, adoption).values;
    let changed = plan(stored.unwrap_or(incoming), None, specs, desired, adoption).changed;
    let mut outputs: Vec<Output> = Vec::new();
    for spec in specs {
        if !outputs.contains(&spec.output) {
            outputs.push(spec.output.clone());
        }
    }
    // Gates go on new workloads only: on a running one the template change would
    // itself roll the pods it means to hold.
    let gates = if stored.is_none() {
        desired
            .blocked
            .iter()
            .filter(|b| matches!(b.reason, BlockReason::Missing { .. }))
            .filter_map(|b| match &b.output {
                Output::SchedulingGate(name) => Some(name.clone()),
                _ => None,
            })
            .filter(|name| !has_gate(incoming, name))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
    } else {
        Vec::new()
    };
    AdmissionDecision {
        values,
        outputs,
        stamp_changed: !changed.is_empty(),
        gates,
    }
}

/// Whether `workload` has an output still to adopt: an [`Output::Adopted`]
/// output with its annotation neither on the pod template nor on the workload,
/// or an [`Output::ReloaderSource`] or [`Output::RestartAt`] output without its
/// state annotation.
pub fn adopting(workload: &Workload, specs: &[StampSpec]) -> bool {
    specs.iter().any(|spec| match &spec.output {
        Output::Adopted(key) => {
            !workload.template_annotations().contains_key(key)
                && !workload.annotations.contains_key(key)
        }
        Output::ReloaderSource(key) | Output::RestartAt(key) => {
            !workload.annotations.contains_key(key)
        }
        _ => false,
    })
}

/// How outputs still to adopt are decided.
#[derive(Debug, Clone, Copy)]
enum Adoption<'a> {
    /// The controller: adopt into metadata when the desired value is the one
    /// first seen (in the map; an output missing from it adopts what is there).
    Controller(&'a BTreeMap<Output, String>),
    /// An UPDATE under admission: leave adoption to the controller.
    LeftToController,
    /// A CREATE under admission: a new workload's pods start with the stamp.
    Never,
}

impl Adoption<'_> {
    /// Whether the desired value `want` of `output` may be adopted without a
    /// rollout; `None`: not decided here (left to the controller).
    fn allows(&self, output: &Output, want: &str) -> Option<bool> {
        match self {
            Self::Controller(first_sight) => {
                Some(first_sight.get(output).is_none_or(|first| first == want))
            }
            Self::LeftToController => None,
            Self::Never => Some(false),
        }
    }
}

/// The one decision both renderers rest on: for each output, its value after the
/// stamp (the desired one; for a blocked output the value `workload` holds, else
/// `fallback`'s), and which outputs change on `workload`. The values are keyed by
/// where they are written: an [`Output::Adopted`] output resolves to
/// [`Output::WorkloadAnnotation`] while it adopts and to
/// [`Output::PodTemplateAndWorkloadAnnotation`] otherwise (see [`Adoption`]);
/// an [`Output::RestartAt`] output to its state as [`Output::WorkloadAnnotation`],
/// plus itself when the pods restart.
fn plan(
    workload: &Workload,
    fallback: Option<&Workload>,
    specs: &[StampSpec],
    desired: &DesiredStamp,
    adoption: Adoption<'_>,
) -> Plan {
    let mut changed = Vec::new();
    let mut values = BTreeMap::new();
    let mut releases = Vec::new();
    let mut seen: Vec<&Output> = Vec::new();
    for output in specs.iter().map(|spec| &spec.output) {
        if seen.contains(&output) {
            continue;
        }
        seen.push(output);
        let want = desired.values.get(output).map(String::as_str);
        if let Output::ReloaderSource(_) = output {
            let source = desired.reloader_sources.get(output).map(String::as_str);
            if plan_reloader_source(
                workload,
                fallback,
                output,
                want,
                source,
                adoption,
                &mut values,
            ) {
                changed.push(output.clone());
            }
            continue;
        }
        if let Output::RestartAt(_) = output {
            if plan_restart(workload, fallback, output, want, adoption, &mut values) {
                changed.push(output.clone());
            }
            continue;
        }
        if let Some(release) = plan_release(workload, output, want) {
            releases.push(release);
            changed.push(output.clone());
            continue;
        }
        if matches!(
            output,
            Output::SchedulingGate(_) | Output::WaveSchedulingDisabled | Output::ReloaderPause
        ) {
            continue;
        }
        let (target, value, differs) = match output {
            Output::Adopted(key) => plan_adopted(workload, fallback, key, want, adoption),
            _ => plan_in_place(workload, fallback, output, want),
        };
        if differs {
            changed.push(output.clone());
        }
        if let Some(value) = value {
            values.insert(target, value.to_owned());
        }
    }
    Plan {
        changed,
        values,
        releases,
    }
}

/// What [`plan`] decides.
struct Plan {
    changed: Vec<Output>,
    values: BTreeMap<Output, String>,
    releases: Vec<Release>,
}

/// A hold to lift: the output is released (every required input exists) and the
/// workload still carries it.
fn plan_release(workload: &Workload, output: &Output, want: Option<&str>) -> Option<Release> {
    want?;
    match output {
        Output::SchedulingGate(name) => {
            has_gate(workload, name).then(|| Release::SchedulingGate(name.clone()))
        }
        Output::WaveSchedulingDisabled => workload
            .annotations
            .get(crate::model::WAVE_SCHEDULING_DISABLED)
            .map(|scheduler_name| Release::WaveScheduler {
                scheduler_name: scheduler_name.clone(),
            }),
        Output::ReloaderPause => workload
            .annotations
            .contains_key(crate::model::RELOADER_PAUSED_AT)
            .then_some(Release::ReloaderPause),
        _ => None,
    }
}

/// Whether the pod template carries the scheduling gate `name`.
fn has_gate(workload: &Workload, name: &str) -> bool {
    workload
        .template
        .spec
        .as_ref()
        .and_then(|spec| spec.scheduling_gates.as_ref())
        .is_some_and(|gates| gates.iter().any(|gate| gate.name == name))
}

/// An output written where it is: the desired value, or when blocked the value
/// `workload` (else `fallback`) holds. Returns where, what, and whether it changes.
fn plan_in_place<'a>(
    workload: &'a Workload,
    fallback: Option<&'a Workload>,
    output: &Output,
    want: Option<&'a str>,
) -> (Output, Option<&'a str>, bool) {
    let observed = observe(workload, output);
    match want {
        Some(want) => (
            output.clone(),
            Some(want),
            observed.consistent() != Some(want),
        ),
        None => {
            let keep = observed
                .keep()
                .or_else(|| fallback.and_then(|f| observe(f, output).consistent()));
            (output.clone(), keep, false)
        }
    }
}

/// An [`Output::ReloaderSource`] output: the state `key` on metadata decides;
/// when it changes (not at adoption, when there was none) Reloader's
/// `last-reloaded-from` on the pod template is rewritten with `source`. The
/// template's current document is otherwise kept as it is (and owned, so a later
/// apply does not drop it). Returns whether the output changes.
fn plan_reloader_source(
    workload: &Workload,
    fallback: Option<&Workload>,
    output: &Output,
    want: Option<&str>,
    source: Option<&str>,
    adoption: Adoption<'_>,
    values: &mut BTreeMap<Output, String>,
) -> bool {
    let key = output.key();
    // A request that dropped the state is decided on the stored object's.
    let own = [Some(workload), fallback]
        .into_iter()
        .flatten()
        .find_map(|w| w.annotations.get(key))
        .map(String::as_str);
    let template_key = crate::annotations::RELOADER_LAST_RELOADED_FROM.to_owned();
    let template = workload.template_annotations().get(&template_key);
    let state = Output::WorkloadAnnotation(key.to_owned());
    let document = Output::PodTemplateAnnotation(template_key);
    let keep_document = |values: &mut BTreeMap<Output, String>| {
        if let Some(current) = template {
            values.insert(document.clone(), current.clone());
        }
    };
    let Some(want) = want else {
        if let Some(own) = own {
            values.insert(state, own.to_owned());
        }
        keep_document(values);
        return false;
    };
    let rolls = match (own, adoption) {
        (Some(own), _) => own != want,
        // A new workload keeps the document it was created with.
        (None, Adoption::Never) => false,
        (None, Adoption::LeftToController) => {
            keep_document(values);
            return false;
        }
        (None, Adoption::Controller(_)) => adoption.allows(output, want) == Some(false),
    };
    values.insert(state, want.to_owned());
    match source {
        Some(source) if rolls => {
            values.insert(document, source.to_owned());
        }
        _ => keep_document(values),
    }
    rolls || own.is_none()
}

/// An [`Output::RestartAt`] output: the fingerprint `key` on metadata decides;
/// when it changes (not at adoption, when there was none) the output itself goes
/// into `values`, which its writers render as `spec.restartAt` set to now. The
/// pod template is never touched. Returns whether the output changes.
fn plan_restart(
    workload: &Workload,
    fallback: Option<&Workload>,
    output: &Output,
    want: Option<&str>,
    adoption: Adoption<'_>,
    values: &mut BTreeMap<Output, String>,
) -> bool {
    let key = output.key();
    // A request that dropped the state is decided on the stored object's.
    let own = [Some(workload), fallback]
        .into_iter()
        .flatten()
        .find_map(|w| w.annotations.get(key))
        .map(String::as_str);
    let state = Output::WorkloadAnnotation(key.to_owned());
    let Some(want) = want else {
        if let Some(own) = own {
            values.insert(state, own.to_owned());
        }
        return false;
    };
    let restarts = match (own, adoption) {
        (Some(own), _) => own != want,
        // A new workload's pods start with the content they are created with.
        (None, Adoption::Never) => false,
        (None, Adoption::LeftToController) => return false,
        (None, Adoption::Controller(_)) => adoption.allows(output, want) == Some(false),
    };
    values.insert(state, want.to_owned());
    if restarts {
        values.insert(output.clone(), want.to_owned());
    }
    own != Some(want)
}

/// An [`Output::Adopted`] output: on the pod template once it is there; until
/// then on the workload's metadata, so that adopting a workload rolls nothing and
/// only a change of the adopted value reaches the pod template.
fn plan_adopted<'a>(
    workload: &'a Workload,
    fallback: Option<&'a Workload>,
    key: &str,
    want: Option<&'a str>,
    adoption: Adoption<'_>,
) -> (Output, Option<&'a str>, bool) {
    let both = Output::PodTemplateAndWorkloadAnnotation(key.to_owned());
    let metadata = Output::WorkloadAnnotation(key.to_owned());
    let held = |w: &'a Workload| {
        (
            w.template_annotations().get(key).map(String::as_str),
            w.annotations.get(key).map(String::as_str),
        )
    };
    let (template, own) = held(workload);
    match want {
        Some(want) => match (template, own) {
            (Some(t), o) => (both, Some(want), t != want || o != Some(want)),
            (None, Some(o)) if o == want => (metadata, Some(want), false),
            (None, None) => {
                let output = Output::Adopted(key.to_owned());
                match adoption.allows(&output, want) {
                    Some(true) => (metadata, Some(want), true),
                    Some(false) => (both, Some(want), true),
                    None => match fallback.map(held) {
                        // The request dropped what the stored object holds:
                        // decide on that.
                        Some((t, o)) if t.is_some() || o.is_some() => plan_adopted(
                            fallback.unwrap_or(workload),
                            None,
                            key,
                            Some(want),
                            adoption,
                        ),
                        _ => (metadata, None, false),
                    },
                }
            }
            (None, _) => (both, Some(want), true),
        },
        None => {
            let (template, own) = match (template, own, fallback) {
                (None, None, Some(f)) => held(f),
                _ => (template, own),
            };
            match (template, own) {
                (Some(t), _) => (both, Some(t), false),
                (None, o) => (metadata, o, false),
            }
        }
    }
}

// === desired ===

/// An input whose state is known: its fingerprint, or `None` for absent.
type Resolved<'a> = (&'a Input, Option<&'a Fingerprint>);

fn evaluate<L>(
    spec: &StampSpec,
    lookup: &L,
    stamp_on_delete: bool,
) -> Result<String, Vec<BlockReason>>
where
    L: FingerprintLookup + ?Sized,
{
    let inputs = resolve(&spec.inputs, lookup, stamp_on_delete)?;
    match spec.combine {
        Combine::Single => single(&inputs),
        Combine::NativeHash | Combine::ReloaderSource => native_hash(&inputs),
        Combine::Wave => wave(&inputs),
        Combine::Release => Ok(RELEASED.to_owned()),
        Combine::Snapshot => snapshot(&inputs),
    }
}

/// A snapshot's value (design §5e): each present input's fingerprint by the
/// object and keys its copy holds; an absent one (optional) stays live.
fn snapshot(inputs: &[Resolved<'_>]) -> Result<String, Vec<BlockReason>> {
    let mut snapshot = crate::snapshot::Snapshot::new();
    let mut reasons = Vec::new();
    for (input, fingerprint) in inputs {
        let reference = &input.tracked.reference;
        let digest = match fingerprint {
            None => continue,
            Some(Fingerprint::Digest(digest)) => digest.text(),
            Some(Fingerprint::Wave(_)) => {
                reasons.push(wrong_shape(input, Combine::Snapshot, WAVE_FRAGMENT));
                continue;
            }
        };
        match ObjectKind::of_source(&reference.source) {
            Some(kind) => snapshot.insert(
                crate::snapshot::SnapshotKey::new(
                    kind,
                    reference.name.clone(),
                    (*reference.keys).clone(),
                ),
                digest,
            ),
            None => reasons.push(BlockReason::NotWaveSource {
                reference: reference.clone(),
            }),
        }
    }
    finish(reasons, || snapshot.to_annotation())
}

/// `workload` with the value of each snapshot output of `specs` settled:
/// what its pod template uses ([`crate::snapshot::TemplateSnapshot::current`]),
/// not what the annotation claims. A workload read from the cluster is
/// settled before its outputs are compared; the core's own copy of a
/// workload holds settled values already.
pub fn settle_snapshots(mut workload: Workload, specs: &[StampSpec]) -> Workload {
    for spec in specs {
        if let Output::Snapshots(key) = &spec.output {
            let value = settled_snapshot(&workload, key);
            let annotations = workload
                .template
                .metadata
                .get_or_insert_default()
                .annotations
                .get_or_insert_default();
            match value {
                Some(value) => annotations.insert(key.clone(), value),
                None => annotations.remove(key),
            };
        }
    }
    workload
}

/// The snapshot `workload`'s pod template uses under annotation `key`, as
/// its value; `None`: none (every reference live).
pub(crate) fn settled_snapshot(workload: &Workload, key: &str) -> Option<String> {
    let read = crate::snapshot::TemplateSnapshot::read(&workload.id, &workload.template, key);
    let current = read.current();
    (!current.is_empty()).then(|| current.to_annotation())
}

/// Reloader's `last-reloaded-from` document (its `ReloadSource` struct, fields in
/// its order) for the first input of `spec` that exists, with `observedAt: 0`
/// (set by [`with_observed_at`] when written). Reloader names the object that
/// changed; nudge, which compares states rather than events, names the first.
/// Informational either way: Reloader never reads it back.
fn reloader_source<L>(spec: &StampSpec, lookup: &L) -> Option<String>
where
    L: FingerprintLookup + ?Sized,
{
    let (input, hash) =
        spec.inputs
            .iter()
            .find_map(|input| match lookup.observation(&input.tracked)? {
                Observation::Present(Fingerprint::Digest(digest)) => Some((input, digest.clone())),
                _ => None,
            })?;
    let reference = &input.tracked.reference;
    let kind = match ObjectKind::of_source(&reference.source)? {
        ObjectKind::ConfigMap => "CONFIGMAP",
        _ => "SECRET",
    };
    let containers: Vec<&str> = spec
        .origins
        .iter()
        .filter(|(r, _)| r.name == reference.name && r.source == reference.source)
        .filter_map(|(_, origin)| match origin {
            crate::model::Origin::Discovered(text) => container_of(text),
            crate::model::Origin::Annotation(_) => None,
        })
        .take(1)
        .collect();
    let json = |v: &str| serde_json::to_string(v).unwrap_or_default();
    let refs: Vec<String> = containers.iter().map(|c| json(c)).collect();
    Some(format!(
        "{{\"type\":{},\"name\":{},\"namespace\":{},\"hash\":{},\"containerRefs\":[{}],\"observedAt\":0}}",
        json(kind),
        json(&reference.name),
        json(reference.namespace.as_deref().unwrap_or("")),
        json(&hash.text()),
        refs.join(",")
    ))
}

/// The container a discovery origin names (`env X in container "app"`,
/// `envFrom in initContainer "init"`); volumes name no container.
fn container_of(origin: &str) -> Option<&str> {
    let (_, role_and_name) = origin.rsplit_once(" in ")?;
    let quoted = role_and_name
        .strip_prefix("container ")
        .or_else(|| role_and_name.strip_prefix("initContainer "))?;
    quoted.strip_prefix('"')?.strip_suffix('"')
}

/// A `last-reloaded-from` document built by [`desired`] with `observedAt` set to
/// `now` (RFC 3339), as Reloader writes it (Unix seconds). Any other value,
/// including a document already written, is returned as it is.
pub fn with_observed_at(document: &str, now: &str) -> String {
    let seconds = now
        .parse::<k8s_openapi::jiff::Timestamp>()
        .map(|t| t.as_second())
        .unwrap_or(0);
    match document.strip_suffix("\"observedAt\":0}") {
        Some(head) => format!("{head}\"observedAt\":{seconds}}}"),
        None => document.to_owned(),
    }
}

/// `now` (RFC 3339) as the value of `spec.restartAt`: whole seconds, as
/// Reloader writes it. Argo Rollouts keeps the time it restarted at in whole
/// seconds (`status.restartedAt`, a `metav1.Time`) and counts a restart done
/// when the two are equal, so a fraction would keep it restarting for good. A
/// `now` that is not a timestamp is returned as it is.
fn restart_time(now: &str) -> String {
    now.parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .and_then(|t| k8s_openapi::jiff::Timestamp::from_second(t.as_second()).ok())
        .map_or_else(|| now.to_owned(), |t| t.to_string())
}

fn resolve<'a, L>(
    inputs: &'a [Input],
    lookup: &'a L,
    stamp_on_delete: bool,
) -> Result<Vec<Resolved<'a>>, Vec<BlockReason>>
where
    L: FingerprintLookup + ?Sized,
{
    let mut resolved = Vec::with_capacity(inputs.len());
    let mut reasons = Vec::new();
    for input in inputs {
        match lookup.observation(&input.tracked) {
            None => reasons.push(BlockReason::Unknown {
                tracked: input.tracked.clone(),
            }),
            Some(Observation::Absent) if !(input.optional || stamp_on_delete) => {
                reasons.push(BlockReason::Missing {
                    reference: input.tracked.reference.clone(),
                })
            }
            Some(Observation::Absent) => resolved.push((input, None)),
            Some(Observation::Present(fingerprint)) => resolved.push((input, Some(fingerprint))),
        }
    }
    if reasons.is_empty() {
        Ok(resolved)
    } else {
        Err(reasons)
    }
}

fn single(inputs: &[Resolved<'_>]) -> Result<String, Vec<BlockReason>> {
    let [(input, fingerprint)] = inputs else {
        return Err(vec![BlockReason::InputCount {
            count: inputs.len(),
        }]);
    };
    match fingerprint {
        None => Ok(ABSENT.to_owned()),
        Some(Fingerprint::Digest(digest)) => Ok(digest.to_string()),
        Some(Fingerprint::Wave(_)) => Err(vec![wrong_shape(input, Combine::Single, WAVE_FRAGMENT)]),
    }
}

fn native_hash(inputs: &[Resolved<'_>]) -> Result<String, Vec<BlockReason>> {
    let mut entries = Vec::with_capacity(inputs.len());
    let mut reasons = Vec::new();
    for (input, fingerprint) in inputs {
        let digest = match fingerprint {
            None => None,
            Some(Fingerprint::Digest(digest)) => Some(digest.text()),
            Some(Fingerprint::Wave(_)) => {
                reasons.push(wrong_shape(input, Combine::NativeHash, WAVE_FRAGMENT));
                continue;
            }
        };
        entries.push((input.tracked.reference.canonical_id(), digest));
    }
    finish(reasons, || {
        combine_native(
            entries
                .iter()
                .map(|(id, digest)| (id.as_str(), digest.as_deref())),
        )
        .to_string()
    })
}

fn wave(inputs: &[Resolved<'_>]) -> Result<String, Vec<BlockReason>> {
    let mut config_maps = Vec::new();
    let mut secrets = Vec::new();
    let mut reasons = Vec::new();
    for (input, fingerprint) in inputs {
        let reference = &input.tracked.reference;
        let fragment = match fingerprint {
            // Absent objects (optional, or with stamp_on_delete) are left out, as
            // Wave does.
            None => continue,
            Some(Fingerprint::Wave(fragment)) => fragment,
            Some(Fingerprint::Digest(_)) => {
                reasons.push(wrong_shape(input, Combine::Wave, DIGEST));
                continue;
            }
        };
        let entry = (reference.name.as_str(), fragment);
        match ObjectKind::of_source(&reference.source) {
            Some(ObjectKind::ConfigMap) => config_maps.push(entry),
            Some(ObjectKind::Secret) => secrets.push(entry),
            None => reasons.push(BlockReason::NotWaveSource {
                reference: reference.clone(),
            }),
        }
    }
    finish(reasons, || wave_hash(config_maps, secrets))
}

/// The value, unless something blocked it.
fn finish(
    reasons: Vec<BlockReason>,
    value: impl FnOnce() -> String,
) -> Result<String, Vec<BlockReason>> {
    if reasons.is_empty() {
        Ok(value())
    } else {
        Err(reasons)
    }
}

/// [`BlockReason::WrongShape::found`] for a Wave fragment.
const WAVE_FRAGMENT: &str = "wave fragment";
/// [`BlockReason::WrongShape::found`] for a digest.
const DIGEST: &str = "digest";

fn wrong_shape(input: &Input, combine: Combine, found: &'static str) -> BlockReason {
    BlockReason::WrongShape {
        tracked: input.tracked.clone(),
        combine,
        found,
    }
}

// === current ===

/// What one output looks like on a workload.
enum Observed<'a> {
    /// Nowhere to be seen.
    Unset,
    /// One value, everywhere the output lives.
    Consistent(&'a str),
    /// Different values in the places the output lives; `keep` is the value to hold
    /// while the output is blocked, when one value can stand for all.
    Inconsistent { keep: Option<&'a str> },
}

impl<'a> Observed<'a> {
    /// The value, when it is set and consistent.
    fn consistent(&self) -> Option<&'a str> {
        match self {
            Self::Consistent(value) => Some(value),
            Self::Unset | Self::Inconsistent { .. } => None,
        }
    }

    /// The value a blocked output keeps in the patch.
    fn keep(&self) -> Option<&'a str> {
        match self {
            Self::Consistent(value) => Some(value),
            Self::Inconsistent { keep } => *keep,
            Self::Unset => None,
        }
    }
}

fn observe<'a>(workload: &'a Workload, output: &Output) -> Observed<'a> {
    match output {
        Output::PodTemplateAnnotation(key) => match workload.template_annotations().get(key) {
            Some(value) => Observed::Consistent(value),
            None => Observed::Unset,
        },
        Output::PodTemplateAndWorkloadAnnotation(key) => {
            let template = workload.template_annotations().get(key).map(String::as_str);
            let own = workload.annotations.get(key).map(String::as_str);
            match (template, own) {
                (None, None) => Observed::Unset,
                (Some(t), Some(o)) if t == o => Observed::Consistent(t),
                // The pod template's value is the one that restarts pods: keep it.
                (template, _) => Observed::Inconsistent { keep: template },
            }
        }
        Output::ContainerEnv(name) => observe_env(workload, name),
        Output::WorkloadAnnotation(key) => match workload.annotations.get(key) {
            Some(value) => Observed::Consistent(value),
            None => Observed::Unset,
        },
        Output::Adopted(key) => {
            let template = workload.template_annotations().get(key);
            match template.or_else(|| workload.annotations.get(key)) {
                Some(value) => Observed::Consistent(value),
                None => Observed::Unset,
            }
        }
        Output::ReloaderSource(key) | Output::RestartAt(key) => {
            match workload.annotations.get(key) {
                Some(value) => Observed::Consistent(value),
                None => Observed::Unset,
            }
        }
        // A hold reads as released once it is gone.
        Output::SchedulingGate(name) if !has_gate(workload, name) => Observed::Consistent(RELEASED),
        Output::WaveSchedulingDisabled
            if !workload
                .annotations
                .contains_key(crate::model::WAVE_SCHEDULING_DISABLED) =>
        {
            Observed::Consistent(RELEASED)
        }
        Output::ReloaderPause
            if !workload
                .annotations
                .contains_key(crate::model::RELOADER_PAUSED_AT) =>
        {
            Observed::Consistent(RELEASED)
        }
        Output::SchedulingGate(_) | Output::WaveSchedulingDisabled | Output::ReloaderPause => {
            Observed::Unset
        }
        // No snapshot: every reference names the live object.
        Output::Snapshots(key) => Observed::Consistent(
            workload
                .template_annotations()
                .get(key)
                .map_or(crate::snapshot::NO_SNAPSHOT, String::as_str),
        ),
    }
}

fn observe_env<'a>(workload: &'a Workload, name: &str) -> Observed<'a> {
    let mut values = containers(workload)
        .filter_map(|c| c.env.as_ref())
        .flatten()
        .filter(|var| var.name == name)
        .map(|var| var.value.as_deref());
    let Some(first) = values.next() else {
        return Observed::Unset;
    };
    match first {
        Some(value) if values.all(|v| v == Some(value)) => Observed::Consistent(value),
        // One written value cannot restore several different ones.
        _ => Observed::Inconsistent { keep: None },
    }
}

/// Every container and initContainer of the pod template.
fn containers(workload: &Workload) -> impl Iterator<Item = &Container> {
    containers_by_role(workload).map(|(_, container)| container)
}

/// Every container, then every initContainer, each with whether it is an init
/// container.
fn containers_by_role(workload: &Workload) -> impl Iterator<Item = (bool, &Container)> {
    let spec = workload.template.spec.as_ref();
    let main = spec.map(|s| s.containers.as_slice()).unwrap_or_default();
    let init = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default();
    let main = main.iter().map(|c| (false, c));
    main.chain(init.iter().map(|c| (true, c)))
}

#[cfg(test)]
mod tests;
