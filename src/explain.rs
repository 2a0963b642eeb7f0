//! `nudge explain <kind>/<name>`: what a workload tracks, the current and desired
//! fingerprints, and in one line why it is or is not in sync. Run it through
//! [`Controller::explain`](crate::Controller::explain), which knows an
//! embedder's sources and targets. The [`Report`] prints as `nudge explain`'s
//! table and serializes as its `-o json`; its parts are nudge's own.
//!
//! Two halves, as everywhere in nudge:
//!
//! - `build_report` is pure: from the workload, its dependencies, what each
//!   input was observed as, when each referenced object was last written, the
//!   timing settings and the current time, it builds a [`Report`]. It computes the
//!   desired stamp with the controller's own stamp decision and reads the stamped
//!   value the same way, so explain and the controller cannot disagree about what
//!   "in sync" means.
//! - `explain_with` is the thin I/O part: it reads the workload through its target,
//!   builds the same sources as `nudge run`, observes every input within a
//!   deadline, and reads each referenced ConfigMap's, Secret's and configured
//!   kind's object's metadata for its last write time (`managedFields[].time`). It never writes to the cluster: the
//!   installation key is read without creating anything.
//!
//! Whether an out-of-sync workload is merely waiting is inferred, not asked of the
//! running controller (explain talks to the API server only): a change written less
//! than `debounce` ago (plus two seconds of clock slack) is "waiting for debounce";
//! a workload stamped less than `min_interval` ago (its `last-updated` annotation)
//! is "waiting for min-interval"; anything older means the controller should have
//! stamped by now. Consul keys carry no write time, so their changes cannot be
//! dated.
//!
//! Nothing here prints content: fingerprints only, and Wave fragments (which hold
//! base64 content) print as their size, as a fingerprint's `Display` does.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, GroupVersionKind, ObjectMeta};
use serde::Serialize;

use crate::annotations::{self, AnnotationScheme, Dependencies, MUTATOR_LAST_UPDATED};
use crate::config::Config;
use crate::config::TargetConfig;
use crate::errors::error_chain;
use crate::fingerprint::{Algorithm, FingerprintKey, ObjectKind, Observation};
use crate::model::TemplatePath;
use crate::model::{
    Input, Origin, Output, Reference, SourceCatalog, SourceName, StampSpec, Tracked, Workload,
    WorkloadId,
};
use crate::outcome::history;
pub(crate) use crate::outcome::history::Revision;
use crate::scope::NamespaceScope;
use crate::sources::consul::ConsulMetrics;
use crate::sources::secret::read_installation_key;
use crate::sources::{ObjectSourceSettings, ObserveContext, Source, SourceError};
use crate::stamp::{self, BlockReason, FingerprintLookup};
use crate::targets::{KubeTarget, Target, TargetError, TargetSettings, builtin_kinds};

/// Allowance for the second granularity of `managedFields[].time` and for clock
/// skew between this machine and the API server, added to debounce and
/// min-interval before concluding that nudge is late.
pub(crate) const CLOCK_SLACK: Duration = Duration::from_secs(2);

// === report ===

/// Everything `nudge explain` says about one workload. Serialized as is by
/// `-o json`; field names are stable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The workload explained.
    pub(crate) workload: WorkloadId,
    /// The one-line answer for the whole workload (the most pressing output's).
    pub(crate) verdict: Verdict,
    /// One entry per value nudge keeps up to date on the workload.
    pub(crate) outputs: Vec<OutputReport>,
    /// Annotations nudge cannot use; the workload's other references still work.
    pub(crate) annotation_errors: Vec<AnnotationProblem>,
    /// The timing the verdicts were judged against.
    pub(crate) timing: Timing,
    /// The rollout nudge started and is following (`<prefix>/rollout`), if any.
    pub(crate) rollout: Option<Revision>,
    /// The workload's config history (`<prefix>/history`), oldest first.
    pub(crate) history: Vec<Revision>,
    /// Its delivery settings and the config they hold back (design §5d).
    pub(crate) delivery: DeliveryReport,
    /// Its snapshots (design §5e), when it takes them or its template names
    /// copies (left out of the JSON otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) snapshot: Option<SnapshotReport>,
}

/// A state and a one-line explanation of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Verdict {
    /// Machine-readable state.
    pub state: State,
    /// What to tell a human, e.g. `waiting for debounce (changed 2s ago, debounce 5s)`.
    pub message: String,
}

/// Why an output (or a workload) is or is not in sync. Ordered from least to most
/// pressing; the workload's verdict is its most pressing output's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub(crate) enum State {
    /// The stamped value is the desired one.
    InSync,
    /// A referenced object changed within the debounce window; nudge stamps soon.
    WaitingForDebounce,
    /// The workload was stamped within its min-interval; nudge stamps soon.
    WaitingForMinInterval,
    /// Changed config waits for the workload's own delivery settings: mode
    /// `notify`, an approval, or a maintenance window (design §5d).
    Held,
    /// Some annotation is invalid (the valid ones are in sync).
    InvalidAnnotation,
    /// The stamped value differs from the desired one and no wait explains it.
    OutOfSync,
    /// An input could not be read (source unreachable, no installation key, …).
    Unknown,
    /// The output cannot be computed for a reason other than a missing or unknown
    /// input (e.g. a fingerprint format its combine cannot use).
    Blocked,
    /// A required input does not exist; the workload keeps its current stamp.
    MissingConfig,
    /// The workload carries no annotation nudge acts on.
    NotTracked,
    /// The configuration leaves the workload alone: its namespace is outside
    /// `kubernetes.namespaces`, ignored or not selected, its kind is turned
    /// off, or it opts out by annotation.
    NotManaged,
}

/// One value nudge keeps up to date on the workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct OutputReport {
    /// The annotation key or env var name.
    pub output: String,
    /// Where it lives: `annotation`, `annotation+metadata` or `env`.
    pub output_kind: &'static str,
    /// The value nudge would write now; `None` when it cannot be computed.
    pub desired: Option<String>,
    /// The value on the workload now; `None` when unset or inconsistent.
    pub stamped: Option<String>,
    /// Whether and why this output is or is not in sync.
    pub verdict: Verdict,
    /// The inputs the value is computed from.
    pub references: Vec<ReferenceReport>,
}

/// One input of an output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ReferenceReport {
    /// The reference, short: `secret/db[password]`, `consul/app/config`; the
    /// namespace appears only when it is not the workload's.
    pub reference: String,
    /// The source that holds it.
    pub source: SourceName,
    /// Where it was found: an annotation key, or `pod spec: <what>` for discovery.
    pub from: Vec<String>,
    /// An `optional: true` reference (absent is fine).
    pub optional: bool,
    /// The fingerprint format used for it.
    pub algorithm: Algorithm,
    /// `present`, `absent` or `unknown`.
    pub state: ReferenceState,
    /// Its current fingerprint, when present.
    pub fingerprint: Option<String>,
    /// Why it could not be read, when unknown.
    pub error: Option<String>,
    /// The object's last write (RFC 3339), for ConfigMaps and Secrets.
    pub last_write: Option<String>,
    /// The object carries the ignore annotation: nudge does not follow its changes.
    pub ignored: bool,
}

/// What is known about one input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub(crate) enum ReferenceState {
    /// It exists; its fingerprint is known.
    Present,
    /// It does not exist.
    Absent,
    /// It could not be read.
    Unknown,
}

/// An annotation nudge cannot use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct AnnotationProblem {
    /// The annotation key.
    pub annotation: String,
    /// What is wrong with it.
    pub message: String,
}

/// The timing a report's verdicts were judged against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Timing {
    /// When the report was made (RFC 3339).
    pub now: String,
    /// Effective debounce (the workload's override, else `engine.debounce`).
    pub debounce: String,
    /// `engine.max_delay`.
    pub max_delay: String,
    /// Effective min-interval (the workload's override, else `engine.min_interval`).
    pub min_interval: String,
    /// The workload's `last-updated` annotation, when set (RFC 3339).
    pub last_stamped: Option<String>,
}

// === facts ===

/// What could be learned about one input.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum InputState {
    /// The source answered.
    Observed(Observation),
    /// It could not be read; the message says why, without content (e.g.
    /// `consul unreachable (…)`).
    Failed(String),
}

/// A Kubernetes object a reference names (a ConfigMap, a Secret, an object of
/// a `[sources.kubernetes.<name>]` kind), as write times are keyed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ObjectRef {
    /// `configmap`, `secret` or a configured kind's source.
    pub source: SourceName,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl ObjectRef {
    /// The object a reference of a namespaced source names. Whether its
    /// metadata can be read is [`object_facts`]' business: only for
    /// ConfigMaps, Secrets and configured kinds.
    pub(crate) fn of(reference: &Reference) -> Option<Self> {
        Some(Self {
            source: reference.source.clone(),
            namespace: reference.namespace.as_deref()?.to_owned(),
            name: reference.name.to_string(),
        })
    }
}

/// What the metadata of a referenced ConfigMap or Secret says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ObjectFacts {
    /// The newest `managedFields[].time` (else `creationTimestamp`).
    pub last_write: Option<Timestamp>,
    /// It carries `<prefix>/ignore: "true"` (or Reloader's ignore).
    pub ignored: bool,
}

/// The settings verdicts depend on, from [`Config`].
#[derive(Debug, Clone)]
pub(crate) struct ExplainSettings {
    /// nudge's annotation names (for `last-updated`).
    pub scheme: AnnotationScheme,
    /// `engine.debounce`.
    pub debounce: Duration,
    /// `engine.max_delay`.
    pub max_delay: Duration,
    /// `engine.min_interval`.
    pub min_interval: Duration,
    /// `engine.stamp_on_delete`.
    pub stamp_on_delete: bool,
    /// `kubernetes.namespaces` (empty: all).
    pub namespaces: Vec<String>,
    /// `kubernetes.ignore_namespaces`.
    pub ignore_namespaces: Vec<String>,
    /// `kubernetes.namespace_selector` (empty: none).
    pub namespace_selector: String,
    /// `kubernetes.ignore_kinds`.
    pub ignore_kinds: Vec<String>,
    /// `engine.window`.
    pub window: Option<crate::window::Window>,
}

impl ExplainSettings {
    /// The settings of `config`.
    pub(crate) fn from_config(config: &Config) -> Self {
        Self {
            scheme: config.scheme(),
            debounce: config.engine.debounce,
            max_delay: config.engine.max_delay,
            min_interval: config.engine.min_interval,
            stamp_on_delete: config.engine.stamp_on_delete,
            namespaces: config.kubernetes.namespaces.clone(),
            ignore_namespaces: config.kubernetes.ignore_namespaces.clone(),
            namespace_selector: config.kubernetes.namespace_selector.clone(),
            ignore_kinds: config.kubernetes.ignore_kinds.clone(),
            window: config.engine.window.clone(),
        }
    }
}

/// Everything [`build_report`] needs, gathered by [`explain_with`] (or a test).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Facts<'a> {
    /// The workload as read.
    pub workload: &'a Workload,
    /// `annotations::dependencies` of it.
    pub deps: &'a Dependencies,
    /// What each tracked input was observed as; an input missing here is unknown.
    pub inputs: &'a BTreeMap<Tracked, InputState>,
    /// Metadata of the referenced Kubernetes objects that could be read.
    pub objects: &'a BTreeMap<ObjectRef, ObjectFacts>,
    /// Timing and scope.
    pub settings: &'a ExplainSettings,
    /// The current time.
    pub now: Timestamp,
    /// The workloads sharing an input with it (read only for a workload in a
    /// wave after the first).
    pub neighbours: &'a [Neighbour],
    /// Whether its namespace matches `kubernetes.namespace_selector`; `None`
    /// without a selector, or when the namespace could not be read.
    pub namespace_selected: Option<bool>,
    /// The snapshot copies that exist in its namespace (design §5e).
    pub copies: &'a BTreeSet<(ObjectKind, String)>,
}

// === build_report ===

/// The observations that were read, as the stamp code looks them up.
struct Observed<'a>(&'a BTreeMap<Tracked, InputState>);

impl FingerprintLookup for Observed<'_> {
    fn observation(&self, tracked: &Tracked) -> Option<&Observation> {
        match self.0.get(tracked)? {
            InputState::Observed(observation) => Some(observation),
            InputState::Failed(_) => None,
        }
    }
}

/// Builds the report from what was read. Pure.
pub(crate) fn build_report(facts: &Facts<'_>) -> Report {
    let Facts {
        workload,
        deps,
        inputs,
        settings,
        now,
        ..
    } = *facts;
    let decision = stamp::decide(
        workload,
        &deps.stamps,
        &Observed(inputs),
        &BTreeMap::new(),
        settings.stamp_on_delete,
    );
    let desired = &decision.desired;
    let last_stamped = last_stamped(workload, &settings.scheme);
    let timing = Timing {
        now: now.to_string(),
        debounce: human(deps.debounce.unwrap_or(settings.debounce)),
        max_delay: human(settings.max_delay),
        min_interval: human(deps.min_interval.unwrap_or(settings.min_interval)),
        last_stamped: last_stamped.map(|t| t.to_string()),
    };
    let outputs: Vec<OutputReport> = deps
        .stamps
        .iter()
        .map(|spec| {
            let reasons: Vec<&BlockReason> = desired
                .blocked
                .iter()
                .filter(|b| b.output == spec.output)
                .map(|b| &b.reason)
                .collect();
            let want = desired.values.get(&spec.output).cloned();
            let stamped = stamp::current(workload, &spec.output);
            let verdict = output_verdict(
                facts,
                spec,
                &reasons,
                want.as_deref(),
                stamped.as_deref(),
                last_stamped,
            );
            OutputReport {
                output: spec.output.key().to_owned(),
                output_kind: output_kind(&spec.output),
                desired: want,
                stamped,
                verdict,
                references: spec
                    .inputs
                    .iter()
                    .map(|i| reference_report(facts, spec, i))
                    .collect(),
            }
        })
        .collect();
    let annotation_errors: Vec<AnnotationProblem> = deps
        .errors
        .iter()
        .map(|error| AnnotationProblem {
            annotation: error.key().to_owned(),
            message: error.to_string(),
        })
        .collect();
    let pending_change = outputs
        .iter()
        .any(|output| output.desired.is_some() && output.desired != output.stamped);
    let delivery = delivery_report(
        (workload, deps, &decision),
        pending_change,
        facts.neighbours,
        &Observed(inputs),
        settings,
        now,
    );
    let verdict = held_verdict(
        &delivery,
        workload_verdict(facts, &outputs, &annotation_errors),
    );
    // An output waiting only because the workload is held says so, as the
    // workload's verdict does, not "waiting for debounce".
    let outputs = outputs
        .into_iter()
        .map(|output| OutputReport {
            verdict: held_verdict(&delivery, output.verdict),
            ..output
        })
        .collect();
    let annotation = |key: String| workload.annotations.get(&key).map(String::as_str);
    Report {
        workload: workload.id.clone(),
        verdict,
        outputs,
        annotation_errors,
        timing,
        rollout: annotation(settings.scheme.rollout()).and_then(Revision::parse),
        history: history::parse_history(annotation(settings.scheme.history())),
        delivery,
        snapshot: snapshot::snapshot_report(workload, deps, &settings.scheme, facts.copies),
    }
}

fn workload_verdict(
    facts: &Facts<'_>,
    outputs: &[OutputReport],
    errors: &[AnnotationProblem],
) -> Verdict {
    if let Some(why) = excluded(facts) {
        return Verdict {
            state: State::NotManaged,
            message: format!("not managed: {why}"),
        };
    }
    let invalid = errors.first().map(|first| Verdict {
        state: State::InvalidAnnotation,
        message: format!(
            "InvalidAnnotation: {}{}",
            first.message,
            more(errors.len() - 1, "annotation")
        ),
    });
    let Some(worst) = outputs.iter().map(|o| &o.verdict).max_by_key(|v| v.state) else {
        let opted_out = annotations::opted_out_by(facts.workload, &facts.settings.scheme);
        return invalid.unwrap_or_else(|| match opted_out {
            Some(annotation) => Verdict {
                state: State::NotManaged,
                message: format!("not managed: opted out by {annotation}"),
            },
            None => Verdict {
                state: State::NotTracked,
                message: "not tracked: no nudge, Wave, Reloader or k8s-consul-mutator annotation"
                    .to_owned(),
            },
        });
    };
    if let Some(invalid) = invalid.filter(|_| worst.state < State::InvalidAnnotation) {
        return invalid;
    }
    let others = outputs
        .iter()
        .filter(|o| o.verdict.state != State::InSync)
        .count()
        .saturating_sub(1);
    Verdict {
        state: worst.state,
        message: format!("{}{}", worst.message, more(others, "output")),
    }
}

/// Why the configuration leaves the workload alone, whatever its annotations
/// say: its namespace is outside `kubernetes.namespaces`, in
/// `ignore_namespaces` or not selected by `namespace_selector`, or its kind
/// is turned off (`ignore_kinds`).
fn excluded(facts: &Facts<'_>) -> Option<String> {
    let settings = facts.settings;
    let id = &facts.workload.id;
    let namespace = &id.namespace;
    let namespaces = &settings.namespaces;
    if !namespaces.is_empty() && !namespaces.iter().any(|n| n == namespace) {
        return Some(format!(
            "namespace {namespace} is outside kubernetes.namespaces ({})",
            namespaces.join(", ")
        ));
    }
    if settings.ignore_namespaces.iter().any(|n| n == namespace) {
        return Some(format!(
            "namespace {namespace} is ignored (kubernetes.ignore_namespaces)"
        ));
    }
    if facts.namespace_selected == Some(false) {
        return Some(format!(
            "namespace {namespace} does not match kubernetes.namespace_selector ({})",
            settings.namespace_selector
        ));
    }
    let kind = &id.kind;
    if is_builtin_kind(kind) && crate::config::ignores_kind(&settings.ignore_kinds, kind.as_str()) {
        return Some(format!("{kind} is turned off (kubernetes.ignore_kinds)"));
    }
    None
}

/// Whether `kind` is one nudge stamps without configuration (the kinds
/// `kubernetes.ignore_kinds` can turn off).
fn is_builtin_kind(kind: &crate::model::WorkloadKind) -> bool {
    let (group, kind) = (kind.group(), kind.as_str());
    matches!(group, "apps" | "batch") || (group == "argoproj.io" && kind == "Rollout")
}

/// ` (and 2 more outputs)`, or nothing.
fn more(count: usize, what: &str) -> String {
    match count {
        0 => String::new(),
        1 => format!(" (and 1 more {what})"),
        n => format!(" (and {n} more {what}s)"),
    }
}

fn output_verdict(
    facts: &Facts<'_>,
    spec: &StampSpec,
    reasons: &[&BlockReason],
    desired: Option<&str>,
    stamped: Option<&str>,
    last_stamped: Option<Timestamp>,
) -> Verdict {
    if let Some(verdict) = blocked_verdict(facts, reasons) {
        return verdict;
    }
    if spec.inputs.is_empty() && desired.is_none() {
        // Nothing to hash: not written (design §2), whatever it holds.
        return Verdict {
            state: State::InSync,
            message: "nothing to stamp: it references no config".to_owned(),
        };
    }
    if desired.is_some() && desired == stamped {
        return Verdict {
            state: State::InSync,
            message: "in sync".to_owned(),
        };
    }
    let Facts {
        deps,
        objects,
        settings,
        now,
        ..
    } = *facts;
    let mut latest: Option<Timestamp> = None;
    let mut undated: Option<&SourceName> = None;
    let mut ignored: Option<&Reference> = None;
    for input in &spec.inputs {
        let reference = &input.tracked.reference;
        let object = ObjectRef::of(reference).and_then(|o| objects.get(&o));
        match object.and_then(|o| o.last_write) {
            Some(t) => latest = latest.max(Some(t)),
            None => undated = undated.or(Some(&reference.source)),
        }
        if object.is_some_and(|o| o.ignored) {
            ignored = ignored.or(Some(reference));
        }
    }
    let debounce = deps.debounce.unwrap_or(settings.debounce);
    let changed_ago = latest.map(|t| age(now, t));
    if let Some(ago) = changed_ago.filter(|ago| *ago < debounce.saturating_add(CLOCK_SLACK)) {
        return Verdict {
            state: State::WaitingForDebounce,
            message: format!(
                "waiting for debounce (changed {} ago, debounce {})",
                human_age(ago),
                human(debounce)
            ),
        };
    }
    let min_interval = deps.min_interval.unwrap_or(settings.min_interval);
    if let Some(ago) = last_stamped
        .map(|t| age(now, t))
        .filter(|ago| !min_interval.is_zero() && *ago < min_interval.saturating_add(CLOCK_SLACK))
    {
        return Verdict {
            state: State::WaitingForMinInterval,
            message: format!(
                "waiting for min-interval (last stamped {} ago, min-interval {})",
                human_age(ago),
                human(min_interval)
            ),
        };
    }
    let message = if let Some(reference) = ignored {
        format!(
            "out of sync: {} carries the ignore annotation, so nudge does not follow its changes",
            short_reference(reference, &facts.workload.id.namespace)
        )
    } else if let Some(source) = undated {
        format!("out of sync ({source} change time unknown)")
    } else {
        let mut message =
            "out of sync: nudge should have stamped by now — is it running and leader?".to_owned();
        if let Some(ago) = changed_ago {
            let _ = write!(message, " (changed {} ago)", human_age(ago));
        }
        message
    };
    Verdict {
        state: State::OutOfSync,
        message,
    }
}

/// The verdict of an output that cannot be computed, most pressing reason first.
fn blocked_verdict(facts: &Facts<'_>, reasons: &[&BlockReason]) -> Option<Verdict> {
    let namespace = &facts.workload.id.namespace;
    let missing = reasons.iter().find_map(|r| match r {
        BlockReason::Missing { reference } => Some(reference),
        _ => None,
    });
    if let Some(reference) = missing {
        return Some(Verdict {
            state: State::MissingConfig,
            message: format!(
                "MissingConfig: {} {} not found",
                reference.source,
                object_name(reference, namespace)
            ),
        });
    }
    let unknown = reasons.iter().find_map(|r| match r {
        BlockReason::Unknown { tracked } => Some(tracked),
        _ => None,
    });
    if let Some(tracked) = unknown {
        let message = match facts.inputs.get(tracked) {
            Some(InputState::Failed(why)) => format!("unknown: {why}"),
            _ => format!(
                "unknown: {} was not read",
                short_reference(&tracked.reference, namespace)
            ),
        };
        return Some(Verdict {
            state: State::Unknown,
            message,
        });
    }
    reasons.first().map(|reason| Verdict {
        state: State::Blocked,
        message: format!("blocked: {reason}"),
    })
}

fn reference_report(facts: &Facts<'_>, spec: &StampSpec, input: &Input) -> ReferenceReport {
    let reference = &input.tracked.reference;
    let namespace = &facts.workload.id.namespace;
    let object = ObjectRef::of(reference).and_then(|o| facts.objects.get(&o));
    let (state, fingerprint, error) = match facts.inputs.get(&input.tracked) {
        Some(InputState::Observed(Observation::Present(fp))) => {
            (ReferenceState::Present, Some(fp.to_string()), None)
        }
        Some(InputState::Observed(Observation::Absent)) => (ReferenceState::Absent, None, None),
        Some(InputState::Failed(why)) => (ReferenceState::Unknown, None, Some(why.clone())),
        None => (ReferenceState::Unknown, None, Some("not read".to_owned())),
    };
    let from = spec
        .origins
        .iter()
        .filter(|(r, _)| same_object(r, reference))
        .map(|(_, origin)| match origin {
            Origin::Annotation(key) => key.clone(),
            Origin::Discovered(what) => format!("pod spec: {what}"),
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    ReferenceReport {
        reference: short_reference(reference, namespace),
        source: reference.source.clone(),
        from,
        optional: input.optional,
        algorithm: input.tracked.algorithm,
        state,
        fingerprint,
        error,
        last_write: object.and_then(|o| o.last_write).map(|t| t.to_string()),
        ignored: object.is_some_and(|o| o.ignored),
    }
}

fn same_object(a: &Reference, b: &Reference) -> bool {
    a.source == b.source && a.namespace == b.namespace && a.name == b.name
}

/// `name`, or `namespace/name` when the object lives outside the workload's namespace.
fn object_name(reference: &Reference, workload_namespace: &str) -> String {
    match &reference.namespace {
        Some(ns) if ns != workload_namespace => format!("{ns}/{}", reference.name),
        _ => reference.name.to_string(),
    }
}

/// `source/name[keys]`, with the namespace only when it is not the workload's.
fn short_reference(reference: &Reference, workload_namespace: &str) -> String {
    let mut text = format!(
        "{}/{}",
        reference.source,
        object_name(reference, workload_namespace)
    );
    if let Some(keys) = reference.keys.listed() {
        let _ = write!(text, "[{keys}]");
    }
    text
}

fn output_kind(output: &Output) -> &'static str {
    match output {
        Output::PodTemplateAnnotation(_) => "annotation",
        Output::PodTemplateAndWorkloadAnnotation(_) => "annotation+metadata",
        Output::ContainerEnv(_) => "env",
        Output::WorkloadAnnotation(_) => "metadata",
        Output::Adopted(_) => "annotation (adopted)",
        Output::ReloaderSource(_) => "metadata + last-reloaded-from",
        Output::RestartAt(_) => "metadata + restartAt",
        Output::SchedulingGate(_) => "scheduling gate",
        Output::WaveSchedulingDisabled => "Wave scheduler",
        Output::ReloaderPause => "Reloader's pause",
        Output::Snapshots(_) => "snapshot",
    }
}

/// The newest `last-updated` annotation nudge wrote on the workload's metadata.
fn last_stamped(workload: &Workload, scheme: &AnnotationScheme) -> Option<Timestamp> {
    [scheme.last_updated().as_str(), MUTATOR_LAST_UPDATED]
        .iter()
        .filter_map(|key| workload.annotations.get(*key)?.parse::<Timestamp>().ok())
        .max()
}

/// `now - then`, zero when `then` is in the future (clock skew).
fn age(now: Timestamp, then: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(then)).unwrap_or(Duration::ZERO)
}

/// A duration in whole seconds (`2s`, `3m 12s`), or milliseconds below a second.
fn human(duration: Duration) -> String {
    let rounded = if duration < Duration::from_secs(1) {
        Duration::from_millis(duration.as_millis().try_into().unwrap_or(u64::MAX))
    } else {
        Duration::from_secs(duration.as_secs())
    };
    humantime::format_duration(rounded).to_string()
}

/// An age in whole seconds (`2s`, `3m 12s`), or `<1s`: write times have second
/// precision, so finer output would be noise.
fn human_age(age: Duration) -> String {
    if age < Duration::from_secs(1) {
        "<1s".to_owned()
    } else {
        human(age)
    }
}

// === table ===

/// The human table, as `nudge explain` prints it: one row per reference, then
/// annotation errors, then the verdict line.
impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_table())
    }
}

impl Report {
    /// The human table: one row per reference, then annotation errors, then the
    /// verdict line (`verdict: …`).
    pub(crate) fn to_table(&self) -> String {
        let namespace = &self.workload.namespace;
        let mut rows: Vec<[String; 6]> = vec![[
            "OUTPUT".into(),
            "REFERENCE".into(),
            "FROM".into(),
            "FINGERPRINT".into(),
            "DESIRED vs STAMPED".into(),
            "STATUS".into(),
        ]];
        for output in &self.outputs {
            let values = desired_vs_stamped(output);
            let mut first = Some([
                output.output.clone(),
                values,
                output.verdict.message.clone(),
            ]);
            let references: Vec<Option<&ReferenceReport>> = if output.references.is_empty() {
                vec![None]
            } else {
                output.references.iter().map(Some).collect()
            };
            for reference in references {
                let [out, values, status] = first.take().unwrap_or_default();
                let (name, from, fingerprint) = match reference {
                    Some(r) => (r.reference.clone(), r.from.join(", "), reference_cell(r)),
                    None => ("-".into(), "-".into(), "-".into()),
                };
                rows.push([out, name, from, fingerprint, values, status]);
            }
        }
        let mut widths = [0_usize; 6];
        for row in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut text = format!(
            "{} {namespace}/{}\n",
            self.workload.kind, self.workload.name
        );
        if !self.outputs.is_empty() {
            for row in &rows {
                let mut line = String::new();
                for (i, (cell, width)) in row.iter().zip(widths).enumerate() {
                    if i + 1 == row.len() {
                        line.push_str(cell);
                    } else {
                        let pad = width - cell.chars().count();
                        let _ = write!(line, "{cell}{}  ", " ".repeat(pad));
                    }
                }
                text.push_str(line.trim_end());
                text.push('\n');
            }
        }
        if !self.annotation_errors.is_empty() {
            text.push_str("invalid annotations:\n");
            for problem in &self.annotation_errors {
                let _ = writeln!(text, "  {}", problem.message);
            }
        }
        if let Some(rollout) = &self.rollout {
            let _ = writeln!(text, "rollout in progress: {}", revision_line(rollout));
        }
        if let Some(line) = self.delivery.line() {
            let _ = writeln!(text, "delivery: {line}");
        }
        if !self.delivery.plan.is_empty() {
            text.push_str("wave plan (workloads sharing its inputs):\n");
            for line in self.delivery.plan_lines() {
                let _ = writeln!(text, "  {line}");
            }
        }
        for line in self.snapshot.iter().flat_map(SnapshotReport::lines) {
            let _ = writeln!(text, "{line}");
        }
        if let Some(last) = self.history.last() {
            let _ = writeln!(text, "last outcome: {}", revision_line(last));
        }
        let _ = writeln!(text, "verdict: {}", self.verdict.message);
        text
    }

    /// The config history, newest first: one block per revision (`nudge
    /// explain --history`).
    pub fn history_table(&self) -> String {
        if self.history.is_empty() {
            return "no config history: nudge has not finished following a rollout of this workload\n".to_owned();
        }
        let mut text = String::from("config history (newest first):\n");
        for revision in self.history.iter().rev() {
            let _ = writeln!(text, "  {}", revision_line(revision));
            if !revision.changed.is_empty() {
                let _ = writeln!(text, "    changed: {}", revision.changes_text());
            }
            if !revision.stamp.is_empty() {
                let _ = writeln!(text, "    values:  {}", revision.values_text());
            }
            let snapshot = self.snapshot.as_ref();
            if let Some(line) = snapshot.and_then(|s| s.revision_line(revision.revision)) {
                let _ = writeln!(text, "    {line}");
            }
        }
        text
    }
}

/// `config revision 4: failed after 10m (ProgressDeadlineExceeded), ended
/// 2026-11-25T13:12:00Z`; a revision in flight says what it carries instead.
fn revision_line(revision: &Revision) -> String {
    let number = revision.revision;
    let Some(outcome) = revision.outcome else {
        let what = if revision.changed.is_empty() {
            "the workload itself changed".to_owned()
        } else {
            format!("{} changed", revision.changes_text())
        };
        return format!(
            "config revision {number}: {what}; {}",
            revision.values_text()
        );
    };
    let took = humantime::format_duration(Duration::from_secs(revision.seconds.unwrap_or(0)));
    let mut line = format!(
        "config revision {number}: {} after {took}",
        outcome.as_str()
    );
    if let Some(reason) = &revision.reason {
        let _ = write!(line, " ({reason})");
    }
    if let Some(ended) = &revision.ended {
        let _ = write!(line, ", ended {ended}");
    }
    line
}

/// The fingerprint cell of a reference: short fingerprint, `absent`, or `? (why)`.
fn reference_cell(reference: &ReferenceReport) -> String {
    let mut cell = match (&reference.state, &reference.fingerprint) {
        (ReferenceState::Present, Some(fp)) => short(fp),
        (ReferenceState::Absent, _) => "absent".to_owned(),
        _ => "?".to_owned(),
    };
    if reference.optional {
        cell.push_str(" (optional)");
    }
    if reference.ignored {
        cell.push_str(" (ignored)");
    }
    cell
}

fn desired_vs_stamped(output: &OutputReport) -> String {
    let stamped = output
        .stamped
        .as_deref()
        .map_or("(unset)".to_owned(), short);
    match &output.desired {
        Some(want) if output.stamped.as_deref() == Some(want.as_str()) => format!("= {stamped}"),
        Some(want) => format!("{} vs {stamped}", short(want)),
        None => format!("(cannot compute) vs {stamped}"),
    }
}

/// A fingerprint cut to its prefix and 8 hex digits: `hmac-sha256-1a2b3c4d…`;
/// a snapshot (design §5e) as what it copies.
fn short(value: &str) -> String {
    if let Ok(snapshot) = crate::snapshot::Snapshot::parse(value) {
        return snapshot.summary();
    }
    const HEX_SHOWN: usize = 8;
    let (prefix, rest) = match value.rfind('-') {
        Some(at) if value[at + 1..].bytes().all(|b| b.is_ascii_hexdigit()) => {
            value.split_at(at + 1)
        }
        _ => ("", value),
    };
    if rest.len() <= HEX_SHOWN + 4 || !rest.bytes().all(|b| b.is_ascii_hexdigit()) {
        return value.to_owned();
    }
    format!("{prefix}{}…", &rest[..HEX_SHOWN])
}

// === explain (I/O) ===

/// Why `nudge explain` could not explain.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExplainError {
    /// The workload does not exist.
    #[error("{} {}/{} not found", .0.kind, .0.namespace, .0.name)]
    NotFound(WorkloadId),
    /// The workload could not be read (API error, permissions).
    #[error("cannot read {id}")]
    Workload {
        /// The workload.
        id: WorkloadId,
        /// The API error, classified.
        #[source]
        source: TargetError,
    },
    /// The workloads of a kind nudge stamps could not be listed (a workload
    /// in a wave after the first is judged with the workloads of every kind
    /// sharing its inputs), or the namespaces `namespace_selector` selects.
    #[error(
        "cannot list the {kind} objects of {} for the wave plan",
        namespaces_text(namespace)
    )]
    Neighbours {
        /// The kind listed.
        kind: String,
        /// The namespace; empty: all namespaces.
        namespace: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The kind is not one nudge stamps (built in, Argo Rollouts, or a
    /// `[[targets]]` entry).
    #[error(
        "unknown kind {0:?} (deployment, statefulset, daemonset, cronjob, job, rollout, or a [[targets]] kind)"
    )]
    UnknownKind(String),
    /// The kind is not served by the API server (its CRD is not installed).
    #[error(transparent)]
    NotServed(Box<dyn std::error::Error + Send + Sync>),
    /// A Consul source could not be set up (address, token file, TLS files).
    #[error(transparent)]
    Consul(Box<dyn std::error::Error + Send + Sync>),
    /// The configuration is invalid (a custom source's section).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// No installation key could be read and no placeholder generated (the
    /// operating system's random number generator failed).
    #[error("cannot set up fingerprinting")]
    Fingerprint(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// `namespace shop`, or `all namespaces` for the empty name.
fn namespaces_text(namespace: &str) -> String {
    if namespace.is_empty() {
        "all namespaces".to_owned()
    } else {
        format!("namespace {namespace}")
    }
}

/// A kind as `nudge explain` accepts it: `deployment` (`deploy`), `statefulset`
/// (`sts`), `daemonset` (`ds`), `rollout` (`ro`), or the kind of a `[[targets]]`
/// entry, in any case. Returns `(group, version, kind, template path)`.
pub(crate) fn resolve_kind(name: &str, config: &Config) -> Option<TargetConfig> {
    let entry = |group: &str, version: &str, kind: &str| TargetConfig {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        template: "spec.template".into(),
    };
    let lower = name.to_ascii_lowercase();
    match lower.as_str() {
        "deployment" | "deployments" | "deploy" => Some(entry("apps", "v1", "Deployment")),
        "statefulset" | "statefulsets" | "sts" => Some(entry("apps", "v1", "StatefulSet")),
        "daemonset" | "daemonsets" | "ds" => Some(entry("apps", "v1", "DaemonSet")),
        "rollout" | "rollouts" | "ro" => Some(entry("argoproj.io", "v1alpha1", "Rollout")),
        "cronjob" | "cronjobs" | "cj" => Some(TargetConfig {
            template: "spec.jobTemplate.spec.template".into(),
            ..entry("batch", "v1", "CronJob")
        }),
        "job" | "jobs" => Some(entry("batch", "v1", "Job")),
        _ => config
            .targets
            .kinds
            .iter()
            .find(|t| t.kind.to_ascii_lowercase() == lower)
            .cloned(),
    }
}

/// Explains the workload `name` of `kind` in `namespace`: reads it (with the
/// embedder's target for `kind`, when it registered one), observes every input
/// with `config`'s sources and the embedder's within `timeout`, and builds the
/// [`Report`]. Writes nothing to the cluster.
#[expect(
    clippy::too_many_arguments,
    reason = "the report's inputs, each needed"
)]
pub(crate) async fn explain_with(
    client: kube::Client,
    config: &Config,
    kind: &TargetConfig,
    namespace: &str,
    name: &str,
    timeout: Duration,
    custom_sources: &[Arc<dyn Source>],
    custom_targets: &[Arc<dyn Target>],
) -> Result<Report, ExplainError> {
    let settings = ExplainSettings::from_config(config);
    let custom_target = custom_targets
        .iter()
        .find(|t| t.kind().group() == kind.group && t.kind().as_str() == kind.kind)
        .cloned();
    let target = match custom_target {
        Some(target) => target,
        None => workload_target(&client, config, kind, &settings.scheme).await?,
    };
    let workload = read_workload(&*target, namespace, name).await?;
    let key = load_key(&client, config).await;
    let observe_cx = observe_context(&key)?;
    let sources = configured_sources(&client, config, &settings.scheme, custom_sources)?;
    let catalog = catalog(&sources);
    let deps = annotations::dependencies(&workload, &settings.scheme, &catalog);
    // What the template uses of its snapshot, not what its annotation claims.
    let workload = stamp::settle_snapshots(workload, &deps.stamps);
    let copies = existing_copies(&client, namespace, &deps, &settings.scheme).await;
    let mut tracked: BTreeSet<Tracked> = deps.tracked().cloned().collect();
    let neighbours = if deps.delivery.wave > 0 {
        let lookup = neighbours::Lookup {
            client: &client,
            config,
            scheme: &settings.scheme,
            catalog: &catalog,
            custom: custom_targets,
        };
        neighbours::neighbours(&lookup, &workload, &tracked).await?
    } else {
        Vec::new()
    };
    tracked.extend(neighbours.iter().flat_map(|n| n.deps.tracked().cloned()));
    let objects: BTreeSet<ObjectRef> = tracked
        .iter()
        .filter_map(|t| ObjectRef::of(&t.reference))
        .collect();
    let kinds = configured_kinds(config);
    let (inputs, objects, namespace_selected) = futures::join!(
        observe_inputs(tracked, &sources, &observe_cx, &key, timeout),
        read_objects(&client, objects, (&settings.scheme, &kinds), timeout),
        namespace_selected(&client, namespace, &settings.namespace_selector, timeout),
    );
    Ok(build_report(&Facts {
        workload: &workload,
        deps: &deps,
        inputs: &inputs,
        objects: &objects,
        settings: &settings,
        now: Timestamp::now(),
        neighbours: &neighbours,
        namespace_selected,
        copies: &copies,
    }))
}

/// The snapshot copies in `namespace` (ConfigMaps and Secrets labelled as
/// nudge's), when `deps` has a snapshot; metadata only. A copy that cannot
/// be listed counts as missing.
async fn existing_copies(
    client: &kube::Client,
    namespace: &str,
    deps: &Dependencies,
    scheme: &AnnotationScheme,
) -> BTreeSet<(ObjectKind, String)> {
    let snapshots = deps
        .stamps
        .iter()
        .any(|spec| matches!(spec.output, Output::Snapshots(_)));
    if !snapshots {
        return BTreeSet::new();
    }
    let params = kube::api::ListParams::default()
        .labels(&format!("{}=true", scheme.snapshot_names().copy_label));
    let maps = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    let secrets = Api::<Secret>::namespaced(client.clone(), namespace);
    let (maps, secrets) =
        futures::join!(maps.list_metadata(&params), secrets.list_metadata(&params));
    let names = |listed: Vec<Option<String>>, kind: ObjectKind| {
        listed.into_iter().flatten().map(move |name| (kind, name))
    };
    let map_names = maps
        .map(|list| list.items.into_iter().map(|o| o.metadata.name).collect())
        .unwrap_or_default();
    let secret_names = secrets
        .map(|list| list.items.into_iter().map(|o| o.metadata.name).collect())
        .unwrap_or_default();
    names(map_names, ObjectKind::ConfigMap)
        .chain(names(secret_names, ObjectKind::Secret))
        .collect()
}

/// Whether `namespace` matches the label selector `selector`, as the API
/// server judges it (as nudge's namespace feed does); `None` without a
/// selector or when it cannot be told within `timeout`.
async fn namespace_selected(
    client: &kube::Client,
    namespace: &str,
    selector: &str,
    timeout: Duration,
) -> Option<bool> {
    if selector.is_empty() {
        return None;
    }
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let params = kube::api::ListParams::default()
        .labels(selector)
        .fields(&format!("metadata.name={namespace}"));
    let listed = tokio::time::timeout(timeout, api.list_metadata(&params)).await;
    Some(!listed.ok()?.ok()?.items.is_empty())
}

/// The built-in kinds nudge stamps, with their plurals: the workload kinds
/// and the batch kinds (CronJob, Job).
fn builtin_kinds_with_batch() -> impl Iterator<Item = (crate::model::WorkloadKind, &'static str)> {
    builtin_kinds().into_iter().chain([
        (crate::targets::cron_job_kind(), "cronjobs"),
        (crate::targets::job_kind(), "jobs"),
    ])
}

/// The target for `kind`: a built-in one, or one discovered from the API.
pub(crate) async fn workload_target(
    client: &kube::Client,
    config: &Config,
    kind: &TargetConfig,
    scheme: &AnnotationScheme,
) -> Result<Arc<dyn Target>, ExplainError> {
    let target_settings = TargetSettings {
        field_manager: config.kubernetes.field_manager.clone(),
        scheme: scheme.clone(),
        scope: NamespaceScope::default(),
    };
    let template = TemplatePath::parse(&kind.template)
        .map_err(|_| ExplainError::UnknownKind(kind.kind.clone()))?;
    let builtin = builtin_kinds_with_batch()
        .find(|(k, _)| k.group() == kind.group && k.as_str() == kind.kind);
    let target: Arc<dyn Target> = match builtin {
        Some((builtin, plural)) => Arc::new(KubeTarget::new(
            client.clone(),
            builtin,
            plural,
            target_settings,
        )),
        None => Arc::new(
            KubeTarget::discover(
                client.clone(),
                &kind.group,
                &kind.version,
                &kind.kind,
                template,
                target_settings,
            )
            .await
            .map_err(|error| ExplainError::NotServed(Box::new(error)))?,
        ),
    };
    Ok(target)
}

/// The workload `namespace/name` as `target` reads it.
async fn read_workload(
    target: &dyn Target,
    namespace: &str,
    name: &str,
) -> Result<Workload, ExplainError> {
    let id = WorkloadId::new(target.kind().clone(), namespace, name);
    target
        .get(&id)
        .await
        .map_err(|source| ExplainError::Workload {
            id: id.clone(),
            source,
        })?
        .ok_or_else(|| ExplainError::NotFound(id.clone()))
}

/// The observe context: with the installation key when it could be read.
fn observe_context(key: &Result<FingerprintKey, String>) -> Result<ObserveContext, ExplainError> {
    let source_key = match key {
        Ok(key) => key.clone(),
        // Secret fingerprints made with this key are discarded by `observe`;
        // only absence is reported.
        Err(_) => FingerprintKey::try_generate()
            .map_err(|error| ExplainError::Fingerprint(Box::new(error)))?,
    };
    Ok(ObserveContext::new(source_key))
}

/// Every source `config` configures and the `custom` ones, by name.
fn configured_sources(
    client: &kube::Client,
    config: &Config,
    scheme: &AnnotationScheme,
    custom: &[Arc<dyn Source>],
) -> Result<BTreeMap<SourceName, Arc<dyn Source>>, ExplainError> {
    let source_settings = ObjectSourceSettings {
        scheme: scheme.clone(),
        scope: NamespaceScope {
            namespaces: config.kubernetes.namespaces.clone(),
            ignore: config.kubernetes.ignore_namespaces.clone(),
        },
        label_selector: config.kubernetes.source_label_selector.clone(),
    };
    let sources = crate::sources::builtin(
        client,
        source_settings,
        &config.sources,
        &ConsulMetrics::default(),
    )
    .map_err(ExplainError::Consul)?;
    Ok(sources
        .into_iter()
        .chain(custom.iter().cloned())
        .map(|s| (s.name().clone(), s))
        .collect())
}

/// The kind of each `[sources.kubernetes.<name>]` source whose references
/// name one object, by source name (a `reference_field` reference names many:
/// no single last write).
fn configured_kinds(config: &Config) -> BTreeMap<SourceName, GroupVersionKind> {
    config
        .sources
        .kubernetes
        .iter()
        .map(|(name, kind)| (name, kind.resolved()))
        .filter(|(_, kind)| kind.reference_field.is_empty())
        .filter_map(|(name, kind)| {
            let gvk = GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
            Some((SourceName::new(name.as_str()).ok()?, gvk))
        })
        .collect()
}

/// Every source's scope and reference check, as annotations see them (as the
/// engine does: `sources::catalog`).
fn catalog(sources: &BTreeMap<SourceName, Arc<dyn Source>>) -> SourceCatalog {
    crate::sources::catalog(sources.values())
}

/// Observes every tracked input at once, each within `timeout`.
async fn observe_inputs(
    tracked: BTreeSet<Tracked>,
    sources: &BTreeMap<SourceName, Arc<dyn Source>>,
    cx: &ObserveContext,
    key: &Result<FingerprintKey, String>,
    timeout: Duration,
) -> BTreeMap<Tracked, InputState> {
    join_all(tracked.into_iter().map(|tracked| {
        let source = sources.get(&tracked.reference.source).cloned();
        async move {
            let state = observe(source, &tracked, cx, key.as_ref().err(), timeout).await;
            (tracked, state)
        }
    }))
    .await
    .into_iter()
    .collect()
}

/// Reads the facts of every referenced object at once, each within
/// `timeout`; those that cannot be read are left out. `kinds`: the
/// configured kinds, by source.
async fn read_objects(
    client: &kube::Client,
    objects: BTreeSet<ObjectRef>,
    (scheme, kinds): (&AnnotationScheme, &BTreeMap<SourceName, GroupVersionKind>),
    timeout: Duration,
) -> BTreeMap<ObjectRef, ObjectFacts> {
    join_all(objects.into_iter().map(|object| {
        let client = client.clone();
        let kind = kinds.get(&object.source);
        async move {
            let read = object_facts(client, &object, kind, scheme);
            let facts = tokio::time::timeout(timeout, read).await.ok().flatten();
            (object, facts)
        }
    }))
    .await
    .into_iter()
    .filter_map(|(object, facts)| Some((object, facts?)))
    .collect()
}

/// The installation key, or why Secret fingerprints cannot be computed.
async fn load_key(client: &kube::Client, config: &Config) -> Result<FingerprintKey, String> {
    let namespace = match config.kubernetes.namespace.as_str() {
        "" => client.default_namespace(),
        namespace => namespace,
    };
    let name = &config.fingerprint.key_secret;
    match read_installation_key(
        client,
        config.fingerprint.key_file.as_deref(),
        namespace,
        name,
    )
    .await
    {
        Ok(Some(key)) => Ok(key),
        Ok(None) => Err(format!(
            "the installation key Secret {namespace}/{name} does not exist (nudge creates it when it first runs; set kubernetes.namespace to nudge's namespace)"
        )),
        Err(error) => Err(error_chain(&error)),
    }
}

/// Observes one input within `timeout`. Without the installation key, a native
/// Secret fingerprint would be wrong: only absence is reported then.
async fn observe(
    source: Option<Arc<dyn Source>>,
    tracked: &Tracked,
    cx: &ObserveContext,
    key_problem: Option<&String>,
    timeout: Duration,
) -> InputState {
    let name = &tracked.reference.source;
    let Some(source) = source else {
        return InputState::Failed(format!("no source named {name} is configured"));
    };
    let result = match tokio::time::timeout(timeout, source.observe(tracked, cx)).await {
        Ok(result) => result,
        Err(_) => {
            return InputState::Failed(format!(
                "{name} unreachable (no answer within {})",
                human(timeout)
            ));
        }
    };
    match result {
        Ok(Observation::Present(_))
            if *name == SourceName::secret()
                && tracked.algorithm == Algorithm::Native
                && key_problem.is_some() =>
        {
            let why = key_problem.map(String::as_str).unwrap_or_default();
            InputState::Failed(format!(
                "secret fingerprint needs nudge's installation key, which cannot be read: {why}"
            ))
        }
        Ok(observation) => InputState::Observed(observation),
        Err(error @ (SourceError::Backend { .. } | SourceError::Timeout { .. })) => {
            InputState::Failed(format!("{name} unreachable ({})", error_chain(&error)))
        }
        Err(error) => InputState::Failed(error_chain(&error)),
    }
}

/// Last write and ignore flag of a ConfigMap, a Secret or an object of a
/// configured kind (`kind`, found by discovery); `None` when it does not
/// exist or cannot be read, or its source holds no Kubernetes objects.
async fn object_facts(
    client: kube::Client,
    object: &ObjectRef,
    kind: Option<&GroupVersionKind>,
    scheme: &AnnotationScheme,
) -> Option<ObjectFacts> {
    let (namespace, name) = (&object.namespace, &object.name);
    let meta: ObjectMeta = match (ObjectKind::of_source(&object.source), kind) {
        (Some(ObjectKind::Secret), _) => {
            let api: Api<Secret> = Api::namespaced(client, namespace);
            api.get_metadata_opt(name).await.ok()??.metadata
        }
        (Some(_), _) => {
            let api: Api<ConfigMap> = Api::namespaced(client, namespace);
            api.get_metadata_opt(name).await.ok()??.metadata
        }
        (None, Some(gvk)) => {
            let (resource, _) = kube::discovery::pinned_kind(&client, gvk).await.ok()?;
            let api: Api<DynamicObject> = Api::namespaced_with(client, namespace, &resource);
            api.get_metadata_opt(name).await.ok()??.metadata
        }
        (None, None) => return None,
    };
    let last_write = meta
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|entry| entry.time.as_ref().map(|t| t.0))
        .max()
        .or_else(|| meta.creation_timestamp.as_ref().map(|t| t.0));
    Some(ObjectFacts {
        last_write,
        ignored: annotations::is_ignored(&meta.annotations.unwrap_or_default(), scheme),
    })
}

mod delivery;
mod neighbours;
mod snapshot;

pub(crate) use delivery::DeliveryReport;
pub(crate) use delivery::Neighbour;
use delivery::{delivery_report, held_verdict};
pub(crate) use snapshot::SnapshotReport;

#[cfg(test)]
mod tests;
