//! A small cluster for the core's tests: one workload as stored, the core and
//! its clock, and a target that applies every write.

use std::collections::BTreeMap;
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
use crate::sources::SourceUpdate;
use crate::stamp::{self, Release, StampPatch};
use crate::targets::WorkloadEvent;

/// One workload under one core, with a target that applies every write.
pub(super) struct Harness {
    pub(super) core: Core,
    pub(super) now: Instant,
    pub(super) workload: Workload,
    pub(super) tracked: Vec<Tracked>,
    /// Every write applied, with whether it changed the pod template.
    pub(super) writes: Vec<(StampWrite, bool)>,
    /// When each write that changed the pod template went out.
    pub(super) rolled_at: Vec<Instant>,
    pub(super) notes: Vec<String>,
}

impl Harness {
    pub(super) fn new(workload: Workload) -> Self {
        Self::with_leader(workload, true)
    }

    pub(super) fn with_leader(workload: Workload, leader: bool) -> Self {
        let mut settings = settings();
        settings.leader = leader;
        Self {
            core: Core::new(settings, Arc::default(), EngineMetrics::default()).unwrap(),
            now: Instant::now(),
            workload,
            tracked: Vec::new(),
            writes: Vec::new(),
            rolled_at: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// The core's first sight of the workload.
    pub(super) fn see(&mut self) {
        let workload = self.workload.clone();
        self.input(Input::workload(WorkloadEvent::Apply(workload)));
        assert!(!self.tracked.is_empty(), "the workload tracks something");
    }

    /// Every input of the workload now has `content`.
    pub(super) fn content(&mut self, content: &str) {
        for tracked in self.tracked.clone() {
            let observation = Observation::Present(fingerprint_of(&tracked, content));
            self.input(Input::Observation(SourceUpdate {
                tracked,
                observation,
            }));
        }
    }

    pub(super) fn advance(&mut self, by: Duration) {
        self.run_until(self.now + by);
    }

    /// Ticks at every wake-up up to `until`, applying each write.
    pub(super) fn run_until(&mut self, until: Instant) {
        let mut wake = Some(self.now);
        while let Some(at) = wake.filter(|at| *at <= until) {
            self.now = self.now.max(at);
            wake = self.input(Input::Tick);
        }
        self.now = until;
    }

    /// Runs for long enough for every delay to pass (ten minutes).
    pub(super) fn settle(&mut self) {
        self.advance(Duration::from_secs(600));
    }

    pub(super) fn input(&mut self, input: Input) -> Option<Instant> {
        let effects = self.core.handle(input, self.now);
        let mut wake = None;
        for effect in effects {
            match effect {
                Effect::Track(tracked) => self.tracked.push(tracked),
                Effect::Write(write) => {
                    let rolls = stamp::changes_pod_template(&self.workload, &write.patch);
                    self.workload = applied(&self.workload, &write.patch);
                    self.writes.push((*write, rolls));
                    if rolls {
                        self.rolled_at.push(self.now);
                    }
                    let stored = self.workload.clone();
                    if let Some(at) = self.input(Input::WriteFinished {
                        id: stored.id.clone(),
                        outcome: WriteOutcome::Applied(Box::new(stored)),
                    }) {
                        wake = Some(wake.map_or(at, |w: Instant| w.min(at)));
                    }
                }
                Effect::Publish(notice) => self.notes.push(notice.note),
                Effect::WakeAt(at) => wake = Some(wake.map_or(at, |w: Instant| w.min(at))),
                Effect::Untrack(_) => {}
            }
        }
        wake
    }

    pub(super) fn rollouts(&self) -> usize {
        self.writes.iter().filter(|(_, rolls)| *rolls).count()
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

pub(super) fn settings() -> CoreSettings {
    CoreSettings {
        engine: EngineConfig {
            debounce: Duration::from_secs(5),
            max_delay: Duration::from_secs(60),
            stamps_per_second: 1000.0,
            burst: 1000,
            min_interval: Duration::from_secs(30),
            stamp_on_delete: false,
        },
        scheme: AnnotationScheme::default(),
        catalog: SourceCatalog(BTreeMap::from([
            (SourceName::configmap(), Scope::Namespaced),
            (SourceName::secret(), Scope::Namespaced),
            (SourceName::consul(), Scope::External),
        ])),
        namespace_selector: false,
        leader: true,
    }
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

/// `workload` after a target wrote `patch` (annotations, env is not used here,
/// and the holds it lifts).
pub(super) fn applied(workload: &Workload, patch: &StampPatch) -> Workload {
    let mut next = workload.clone();
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
