//! A small cluster for the core's tests: one workload as stored, the core and
//! its clock, sources that report what they hold, and a target whose writes
//! either apply at once or stay in flight until a test ends them (applied,
//! retried, or refused for good). Leadership changes and restarts (a new core
//! with an empty store) are driven from here too.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::annotations::AnnotationScheme;
use crate::config::EngineConfig;
use crate::engine::EngineMetrics;
use crate::engine::core::{Core, CoreSettings, Effect, Input, StampWrite, WriteOutcome};
use crate::fingerprint::{self, DataValue, Fingerprint, ObjectData, Observation};
use crate::model::{
    Algorithm, Output, Scope, SourceCatalog, SourceName, Tracked, Workload, WorkloadKind,
};
use crate::outcome::Conclusion;
use crate::sources::SourceUpdate;
use crate::stamp::{self, Release, StampPatch};
use crate::targets::{TargetError, WorkloadEvent};

/// How a write held in flight ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WriteEnd {
    /// Applied to the stored workload.
    Applied,
    /// A retryable failure (a conflict): nothing written.
    Retry,
    /// Refused for good: nothing written.
    Failed,
}

/// A write the target applied to the stored workload.
#[derive(Debug)]
pub(super) struct AppliedWrite {
    /// Whether it changed the pod template (rolled the pods).
    pub(super) rolls: bool,
    /// The process (see [`Harness::epoch`]) that requested it.
    pub(super) epoch: u32,
    /// The stored workload before and after.
    pub(super) before: Workload,
    pub(super) after: Workload,
}

/// A write requested and not answered yet.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) write: StampWrite,
    pub(super) epoch: u32,
}

/// One workload under one core, with a target that applies every write (or
/// holds them in flight, see [`Harness::hold_writes`]).
pub(super) struct Harness {
    pub(super) core: Core,
    pub(super) now: Instant,
    /// The workload as stored in the cluster.
    pub(super) workload: Workload,
    /// What the current core tracks.
    pub(super) tracked: Vec<Tracked>,
    /// What every tracked input holds (`None`: nothing said yet); a source
    /// reports it when the core starts tracking an input.
    pub(super) source: Option<String>,
    /// Every write applied.
    pub(super) writes: Vec<AppliedWrite>,
    /// When each write that changed the pod template went out.
    pub(super) rolled_at: Vec<Instant>,
    pub(super) notes: Vec<String>,
    /// Whether writes stay in flight until [`Harness::finish`] ends them.
    pub(super) hold_writes: bool,
    /// Writes in flight, oldest first.
    pub(super) in_flight: Vec<Pending>,
    /// Every observation reported to a core: the process and the content.
    pub(super) reports: Vec<(u32, String)>,
    /// Watch events not delivered yet: the stored workload after each write
    /// and [`Harness::status_update`], in order (see [`Harness::deliver`]).
    pub(super) watch: VecDeque<Workload>,
    /// Which process this is: 0, then one more at each restart.
    pub(super) epoch: u32,
    pub(super) leader: bool,
    /// Every rollout outcome the core concluded aloud.
    pub(super) conclusions: Vec<Conclusion>,
}

impl Harness {
    pub(super) fn new(workload: Workload) -> Self {
        Self::with_leader(workload, true)
    }

    pub(super) fn with_leader(mut workload: Workload, leader: bool) -> Self {
        if workload.resource_version.is_none() {
            workload.resource_version = Some("1".to_owned());
        }
        Self {
            core: new_core(leader),
            now: Instant::now(),
            workload,
            tracked: Vec::new(),
            source: None,
            writes: Vec::new(),
            rolled_at: Vec::new(),
            notes: Vec::new(),
            hold_writes: false,
            in_flight: Vec::new(),
            reports: Vec::new(),
            watch: VecDeque::new(),
            epoch: 0,
            leader,
            conclusions: Vec::new(),
        }
    }

    /// A watch event of the workload as stored. The first is the core's first
    /// sight of it; the sources then report what they hold.
    pub(super) fn see(&mut self) {
        let workload = self.workload.clone();
        self.input(Input::workload(WorkloadEvent::Apply(workload)));
        assert!(!self.tracked.is_empty(), "the workload tracks something");
    }

    /// Delivers the oldest watch event not delivered yet; `false` when none is.
    /// The driver handles a finished write before the workload events already
    /// queued, so the core may get a workload as it was before a write it
    /// knows to be applied.
    pub(super) fn deliver(&mut self) -> bool {
        let Some(workload) = self.watch.pop_front() else {
            return false;
        };
        self.input(Input::workload(WorkloadEvent::Apply(workload)));
        true
    }

    /// Another writer (the workload's own controller, updating its status)
    /// makes a new version of the workload: one more watch event to deliver.
    pub(super) fn status_update(&mut self) {
        bump(&mut self.workload);
        self.watch.push_back(self.workload.clone());
    }

    /// Every input of the workload now has `content`; the sources report it to
    /// the core when it tracks them.
    pub(super) fn content(&mut self, content: &str) {
        self.source = Some(content.to_owned());
        for tracked in self.tracked.clone() {
            self.report(tracked);
        }
    }

    /// The source of `tracked` reports what it holds, if anything.
    fn report(&mut self, tracked: Tracked) {
        let Some(content) = self.source.clone() else {
            return;
        };
        let observation = Observation::Present(fingerprint_of(&tracked, &content));
        self.reports.push((self.epoch, content));
        self.input(Input::Observation(SourceUpdate::new(tracked, observation)));
    }

    pub(super) fn advance(&mut self, by: Duration) {
        self.run_until(self.now + by);
    }

    /// Ticks at every wake-up up to `until`, as the driver does.
    pub(super) fn run_until(&mut self, until: Instant) {
        let mut wake = Some(self.now);
        let mut ticks_now = 0;
        while let Some(at) = wake.filter(|at| *at <= until) {
            if at <= self.now {
                ticks_now += 1;
                assert!(ticks_now < 1_000, "the core wakes at {at:?} without end");
            } else {
                ticks_now = 0;
            }
            self.now = self.now.max(at);
            wake = self.input(Input::Tick);
        }
        self.now = until;
    }

    /// The workload's controller reports `rollout` in its status (a new
    /// version of the workload, delivered with every event still queued).
    pub(super) fn rollout_status(&mut self, rollout: crate::model::Rollout) {
        self.workload.rollout = rollout;
        self.status_update();
        while self.deliver() {}
    }

    /// The driver's part of the latest conclusion: its revision into the
    /// history and the marker off, in one write (delivered).
    pub(super) fn record_outcome(&mut self) {
        let conclusion = self.conclusions.last().expect("a conclusion").clone();
        let scheme = AnnotationScheme::default();
        let history = self.workload.annotations.get(&scheme.history()).cloned();
        let marker = self.workload.annotations.get(&scheme.rollout());
        let (revision, _) = conclusion.revision.filled_from(marker.map(String::as_str));
        let recorded = crate::outcome::history::recorded(history.as_deref(), revision, 10);
        self.workload.annotations.insert(scheme.history(), recorded);
        self.workload.annotations.remove(&scheme.rollout());
        self.status_update();
        while self.deliver() {}
    }

    /// Runs for long enough for every delay to pass (ten minutes).
    pub(super) fn settle(&mut self) {
        self.advance(Duration::from_secs(600));
    }

    /// This replica gains or loses leadership.
    pub(super) fn lead(&mut self, leader: bool) {
        self.leader = leader;
        self.input(Input::Leadership(leader));
    }

    /// Ends the oldest write in flight; `false` when none is.
    pub(super) fn finish(&mut self, end: WriteEnd) -> bool {
        if self.in_flight.is_empty() {
            return false;
        }
        let Pending { write, epoch } = self.in_flight.remove(0);
        let id = write.workload.id.clone();
        let outcome = match end {
            WriteEnd::Applied => {
                self.apply(write, epoch);
                WriteOutcome::Applied(Box::new(self.workload.clone()))
            }
            WriteEnd::Retry => WriteOutcome::Retry(TargetError::Conflict {
                id: id.clone(),
                message: "the object has been modified".to_owned(),
            }),
            WriteEnd::Failed => WriteOutcome::Failed(TargetError::Rejected {
                id: id.clone(),
                message: "forbidden".to_owned(),
            }),
        };
        self.input(Input::WriteFinished { id, outcome });
        true
    }

    /// The process stops and a new one starts: a new core with an empty
    /// store, leading as this replica did, sees the workload as stored, and
    /// the sources report to it what they hold. A write in flight either
    /// reached the API server (`in_flight_applied`) or was lost.
    pub(super) fn restart(&mut self, in_flight_applied: bool) {
        for Pending { write, epoch } in std::mem::take(&mut self.in_flight) {
            if in_flight_applied {
                self.apply(write, epoch);
            }
        }
        // The new process's watch starts with a list of what is stored.
        self.watch.clear();
        self.core = new_core(self.leader);
        self.tracked.clear();
        self.epoch += 1;
        self.see();
    }

    /// The target writes `write` to the stored workload.
    fn apply(&mut self, write: StampWrite, epoch: u32) {
        let before = self.workload.clone();
        let rolls = stamp::changes_pod_template(&before, &write.patch);
        self.workload = applied(&before, &write.patch);
        if rolls {
            self.rolled_at.push(self.now);
        }
        self.watch.push_back(self.workload.clone());
        self.writes.push(AppliedWrite {
            rolls,
            epoch,
            before,
            after: self.workload.clone(),
        });
    }

    /// Handles `input` and performs its effects: the sources report what they
    /// hold for what is newly tracked, writes apply (or stay in flight).
    /// Returns when the core asks to be woken.
    pub(super) fn input(&mut self, input: Input) -> Option<Instant> {
        let effects = self.core.handle(input, self.now);
        let mut wake = None;
        let mut earliest = |at: Instant| wake = Some(wake.map_or(at, |w: Instant| w.min(at)));
        let mut newly_tracked = Vec::new();
        for effect in effects {
            match effect {
                Effect::Track(tracked) => {
                    self.tracked.push(tracked.clone());
                    newly_tracked.push(tracked);
                }
                Effect::Write(mut write) => {
                    // The driver's part: the rollout it supersedes, as the
                    // core last saw its marker, published and carried.
                    if let Some(supersedes) = write.supersedes.take() {
                        let superseded = supersedes.carry(&mut write.patch);
                        self.notes.push(superseded.note(None));
                    }
                    let epoch = self.epoch;
                    if self.hold_writes {
                        self.in_flight.push(Pending {
                            write: *write,
                            epoch,
                        });
                        continue;
                    }
                    self.apply(*write, epoch);
                    let stored = self.workload.clone();
                    if let Some(at) = self.input(Input::WriteFinished {
                        id: stored.id.clone(),
                        outcome: WriteOutcome::Applied(Box::new(stored)),
                    }) {
                        earliest(at);
                    }
                }
                Effect::Publish(notice) => self.notes.push(notice.note),
                Effect::WakeAt(at) => earliest(at),
                Effect::Conclude(conclusion) => self.conclusions.push(*conclusion),
                Effect::Untrack(_) => {}
            }
        }
        for tracked in newly_tracked {
            self.report(tracked);
        }
        wake
    }

    pub(super) fn rollouts(&self) -> usize {
        self.writes.iter().filter(|w| w.rolls).count()
    }

    pub(super) fn template(&self, key: &str) -> Option<&str> {
        self.workload
            .template_annotations()
            .get(key)
            .map(String::as_str)
    }

    pub(super) fn metadata(&self, key: &str) -> Option<&str> {
        self.workload.annotations.get(key).map(String::as_str)
    }
}

fn new_core(leader: bool) -> Core {
    let mut settings = settings();
    settings.leader = leader;
    Core::new(settings, Arc::default(), EngineMetrics::default()).unwrap()
}

/// A 5 s debounce, a 60 s max-delay and a 30 s min-interval; pacing that never
/// holds a single workload.
pub(super) fn settings() -> CoreSettings {
    CoreSettings {
        engine: EngineConfig {
            debounce: Duration::from_secs(5),
            max_delay: Duration::from_secs(60),
            stamps_per_second: 1000.0,
            burst: 1000,
            min_interval: Duration::from_secs(30),
            stamp_on_delete: false,
            ..EngineConfig::default()
        },
        scheme: AnnotationScheme::default(),
        catalog: builtin_catalog(),
        namespace_selector: false,
        snapshot_kinds: [
            crate::model::WorkloadKind::deployment(),
            crate::model::WorkloadKind::stateful_set(),
            crate::model::WorkloadKind::daemon_set(),
        ]
        .into(),
        leader: true,
        clock: crate::window::WallClock::anchored(
            tokio::time::Instant::now(),
            jiff::Timestamp::UNIX_EPOCH,
        ),
    }
}

/// ConfigMaps, Secrets and Consul, with the checks those sources have.
pub(super) fn builtin_catalog() -> SourceCatalog {
    let object_name = |r: &str| crate::annotations::check_object_name(r).map_err(str::to_owned);
    SourceCatalog::new()
        .with(SourceName::configmap(), Scope::Namespaced, object_name)
        .with(SourceName::secret(), Scope::Namespaced, object_name)
        .with(
            SourceName::consul(),
            Scope::External,
            crate::sources::consul::check_key,
        )
}

/// The fingerprint a source reports for `tracked` holding `content`.
pub(super) fn fingerprint_of(tracked: &Tracked, content: &str) -> Fingerprint {
    let data = ObjectData(BTreeMap::from([(
        "k".to_owned(),
        DataValue::Text(content.to_owned()),
    )]));
    match tracked.algorithm {
        Algorithm::Wave => Fingerprint::Wave(fingerprint::wave_fragment(&data)),
        Algorithm::Md5 => fingerprint::md5_value(content.as_bytes()),
        _ => fingerprint::native_value(content.as_bytes()),
    }
}

/// A new version of `workload`, as the API server makes one on every write.
fn bump(workload: &mut Workload) {
    let revision = workload.revision().unwrap_or(0) + 1;
    workload.resource_version = Some(revision.to_string());
}

/// `workload` after a target wrote `patch` (annotations, env is not used here,
/// and the holds it lifts).
pub(super) fn applied(workload: &Workload, patch: &StampPatch) -> Workload {
    let mut next = workload.clone();
    bump(&mut next);
    if stamp::changes_pod_template(workload, patch) {
        // A new template: the controller has not observed it yet.
        next.rollout = crate::model::Rollout::InProgress;
    }
    let meta = next.template.metadata.get_or_insert_default();
    let template = meta.annotations.get_or_insert_default();
    for (output, value) in &patch.values {
        match output {
            Output::PodTemplateAnnotation(key) => {
                template.insert(key.clone(), value.clone());
            }
            Output::PodTemplateAndWorkloadAnnotation(key) => {
                template.insert(key.clone(), value.clone());
                next.annotations.insert(key.clone(), value.clone());
            }
            Output::WorkloadAnnotation(key) => {
                next.annotations.insert(key.clone(), value.clone());
            }
            other => panic!("not resolved for a writer: {other:?}"),
        }
    }
    for release in &patch.releases {
        let spec = next.template.spec.get_or_insert_default();
        match release {
            Release::SchedulingGate(name) => {
                if let Some(gates) = spec.scheduling_gates.as_mut() {
                    gates.retain(|gate| &gate.name != name);
                }
            }
            Release::WaveScheduler { scheduler_name } => {
                spec.scheduler_name = Some(scheduler_name.clone());
                next.annotations
                    .remove(crate::model::WAVE_SCHEDULING_DISABLED);
            }
            Release::ReloaderPause => {
                next.annotations.remove(crate::model::RELOADER_PAUSED_AT);
            }
        }
    }
    next
}

// === workloads ===

pub(super) const CONFIG_HASH: &str = "nudge.dev/config-hash";
pub(super) const RELOADER_STATE: &str = "nudge.dev/reloader-state";
pub(super) const LAST_RELOADED_FROM: &str = "reloader.stakater.com/last-reloaded-from";
pub(super) const CHECKSUM: &str = "nudge.dev/checksum-cfg";

pub(super) fn pod_mounting(configmap: &str) -> Value {
    json!({
        "containers": [{"name": "app", "image": "busybox",
                        "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}]}],
        "volumes": [{"name": "cfg", "configMap": {"name": configmap}}],
    })
}

pub(super) fn workload(
    kind: WorkloadKind,
    meta: Value,
    template_meta: Value,
    pod: Value,
) -> Workload {
    let mut object = json!({
        "metadata": {"namespace": "ns", "name": "app", "annotations": meta},
    });
    let template = json!({"metadata": {"annotations": template_meta}, "spec": pod});
    let mut at = &mut object;
    for segment in kind.template_path().segments() {
        at = &mut at[segment];
    }
    *at = template;
    Workload::from_object(&kind, object).unwrap()
}

/// Reloader's `auto` on a workload without a `STAKATER_*` env var.
pub(super) fn reloader_auto() -> Workload {
    workload(
        WorkloadKind::deployment(),
        json!({"reloader.stakater.com/auto": "true"}),
        json!({}),
        pod_mounting("cfg"),
    )
}

/// Reloader's annotations strategy: its document on the pod template.
pub(super) fn reloader_annotations_strategy() -> Workload {
    workload(
        WorkloadKind::deployment(),
        json!({"reloader.stakater.com/auto": "true"}),
        json!({LAST_RELOADED_FROM: "{\"type\":\"CONFIGMAP\",\"name\":\"old\"}"}),
        pod_mounting("cfg"),
    )
}

/// A workload naming its ConfigMap in nudge's own annotation.
pub(super) fn batch(kind: WorkloadKind) -> Workload {
    workload(
        kind,
        json!({"nudge.dev/configmap-cfg": "cfg"}),
        json!({}),
        json!({"containers": [{"name": "job", "image": "busybox"}]}),
    )
}

pub(super) fn cron_job() -> Workload {
    batch(crate::targets::cron_job_kind())
}

pub(super) fn job() -> Workload {
    batch(crate::targets::job_kind())
}

/// A Deployment naming its ConfigMap in nudge's own annotation: stamped on its
/// pod template from the start (nothing to adopt).
pub(super) fn native_deployment() -> Workload {
    batch(WorkloadKind::deployment())
}
