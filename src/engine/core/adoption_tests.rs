//! The adoption race, path by path: a change nudge observes after its first
//! sight of a workload rolls it once with the new content, whatever delay
//! (debounce, pause-period, pacing) stands between first sight and the write;
//! content that changed before first sight is adopted without a rollout.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;
use crate::fingerprint::{self, DataValue, Fingerprint, ObjectData, Observation};
use crate::model::{Algorithm, Scope, WorkloadKind};
use crate::stamp::Release;

// === a small cluster: the core, its clock, and the workload as stored ===

/// One workload under one core, with a target that applies every write.
struct Harness {
    core: Core,
    now: Instant,
    workload: Workload,
    tracked: Vec<Tracked>,
    /// Every write applied, with whether it changed the pod template.
    writes: Vec<(StampWrite, bool)>,
    /// When each write that changed the pod template went out.
    rolled_at: Vec<Instant>,
    notes: Vec<String>,
}

impl Harness {
    fn new(workload: Workload) -> Self {
        Self::with_leader(workload, true)
    }

    fn with_leader(workload: Workload, leader: bool) -> Self {
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
    fn see(&mut self) {
        let workload = self.workload.clone();
        self.input(Input::workload(WorkloadEvent::Apply(workload)));
        assert!(!self.tracked.is_empty(), "the workload tracks something");
    }

    /// Every input of the workload now has `content`.
    fn content(&mut self, content: &str) {
        for tracked in self.tracked.clone() {
            let observation = Observation::Present(fingerprint_of(&tracked, content));
            self.input(Input::Observation(SourceUpdate {
                tracked,
                observation,
            }));
        }
    }

    fn advance(&mut self, by: Duration) {
        self.run_until(self.now + by);
    }

    /// Ticks at every wake-up up to `until`, applying each write.
    fn run_until(&mut self, until: Instant) {
        let mut wake = Some(self.now);
        while let Some(at) = wake.filter(|at| *at <= until) {
            self.now = self.now.max(at);
            wake = self.input(Input::Tick);
        }
        self.now = until;
    }

    /// Runs for long enough for every delay to pass (ten minutes).
    fn settle(&mut self) {
        self.advance(Duration::from_secs(600));
    }

    fn input(&mut self, input: Input) -> Option<Instant> {
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

    fn rollouts(&self) -> usize {
        self.writes.iter().filter(|(_, rolls)| *rolls).count()
    }

    fn template(&self, key: &str) -> Option<&str> {
        self.workload
            .template_annotations()
            .get(key)
            .map(String::as_str)
    }

    fn metadata(&self, key: &str) -> Option<&str> {
        self.workload.annotations.get(key).map(String::as_str)
    }
}

fn settings() -> CoreSettings {
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
fn fingerprint_of(tracked: &Tracked, content: &str) -> Fingerprint {
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
fn applied(workload: &Workload, patch: &StampPatch) -> Workload {
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

// === the adoption paths ===

const CONFIG_HASH: &str = "nudge.dev/config-hash";
const RELOADER_STATE: &str = "nudge.dev/reloader-state";
const LAST_RELOADED_FROM: &str = "reloader.stakater.com/last-reloaded-from";
const CHECKSUM: &str = "nudge.dev/checksum-cfg";
const MUTATOR_CHECKSUM: &str = "k8s-consul-mutator.io/checksum-app";
const WAVE_HASH: &str = "wave.pusher.com/config-hash";

fn pod_mounting(configmap: &str) -> Value {
    json!({
        "containers": [{"name": "app", "image": "busybox",
                        "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}]}],
        "volumes": [{"name": "cfg", "configMap": {"name": configmap}}],
    })
}

fn workload(kind: WorkloadKind, meta: Value, template_meta: Value, pod: Value) -> Workload {
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
fn reloader_auto() -> Workload {
    workload(
        WorkloadKind::deployment(),
        json!({"reloader.stakater.com/auto": "true"}),
        json!({}),
        pod_mounting("cfg"),
    )
}

/// The same with Reloader's pause-period.
fn reloader_auto_paused(period: &str) -> Workload {
    workload(
        WorkloadKind::deployment(),
        json!({"reloader.stakater.com/auto": "true",
               "deployment.reloader.stakater.com/pause-period": period}),
        json!({}),
        pod_mounting("cfg"),
    )
}

/// Reloader's annotations strategy: its document on the pod template.
fn reloader_annotations_strategy() -> Workload {
    workload(
        WorkloadKind::deployment(),
        json!({"reloader.stakater.com/auto": "true"}),
        json!({LAST_RELOADED_FROM: "{\"type\":\"CONFIGMAP\",\"name\":\"old\"}"}),
        pod_mounting("cfg"),
    )
}

fn batch(kind: WorkloadKind) -> Workload {
    workload(
        kind,
        json!({"nudge.dev/configmap-cfg": "cfg"}),
        json!({}),
        json!({"containers": [{"name": "job", "image": "busybox"}]}),
    )
}

fn cron_job() -> Workload {
    batch(crate::targets::cron_job_kind())
}

fn job() -> Workload {
    batch(crate::targets::job_kind())
}

/// k8s-consul-mutator's key annotation, its checksum of `stamped` content on
/// the template (as the mutator's webhook left it).
fn consul_mutator(stamped: &str) -> Workload {
    let checksum = fingerprint::md5_value(stamped.as_bytes())
        .as_digest()
        .unwrap()
        .into_owned();
    workload(
        WorkloadKind::deployment(),
        json!({"k8s-consul-mutator.io/key-app": "app/config", MUTATOR_CHECKSUM: checksum}),
        json!({MUTATOR_CHECKSUM: checksum}),
        json!({"containers": [{"name": "app", "image": "busybox"}]}),
    )
}

/// A workload Wave held (its scheduler swapped) until its config exists.
fn wave_held() -> Workload {
    let mut pod = pod_mounting("cfg");
    pod["schedulerName"] = json!("wave.pusher.com/invalid");
    workload(
        WorkloadKind::deployment(),
        json!({"wave.pusher.com/update-on-config-change": "true",
               "wave.pusher.com/scheduling-disabled": "default-scheduler"}),
        json!({}),
        pod,
    )
}

/// What the workload holds for its adopted output, on metadata.
fn adopted_value(h: &Harness, key: &str) -> String {
    h.metadata(key).expect("adopted").to_owned()
}

/// The value a workload first seen with `content` adopts at `key`.
fn adoption_of(make: fn() -> Workload, content: &str, key: &str) -> String {
    let mut h = Harness::new(make());
    h.see();
    h.content(content);
    h.settle();
    assert_eq!(h.rollouts(), 0, "adoption rolls nothing");
    adopted_value(&h, key)
}

/// First sight at `A`, a change to `B` after `change_after`: one rollout, with
/// `B`'s value at `key` on the pod template.
fn assert_change_rolls_once(make: fn() -> Workload, key: &str, change_after: Duration) {
    let b = adoption_of(make, "B", key);
    assert_change_rolls_once_with(make, change_after, |h| {
        assert_eq!(
            h.template(key),
            Some(b.as_str()),
            "the pod template carries the new content"
        );
    });
}

/// First sight at `A` (the sources knowing it before or reporting it after),
/// a change to `B` after `change_after`: one rollout, then `check`.
fn assert_change_rolls_once_with(
    make: fn() -> Workload,
    change_after: Duration,
    check: impl Fn(&Harness),
) {
    for reported_first in [true, false] {
        let mut h = Harness::new(make());
        if reported_first {
            // The sources knew the content before the workload was seen: the
            // inputs are learnt on first sight, then reported again.
            h.see();
            h.content("A");
            h.core = Core::new(settings(), h.core.store.clone(), EngineMetrics::default()).unwrap();
            h.tracked.clear();
            h.see();
        } else {
            h.see();
            h.content("A");
        }
        h.advance(change_after);
        h.content("B");
        h.settle();
        assert_eq!(
            h.rollouts(),
            1,
            "one rollout (sources known first: {reported_first}); writes: {:#?}",
            h.writes
        );
        check(&h);
    }
}

#[test]
fn reloader_auto_a_change_after_first_sight_rolls_once_with_the_new_content() {
    assert_change_rolls_once(reloader_auto, CONFIG_HASH, Duration::from_secs(2));
    // At the very end of the debounce window, too.
    assert_change_rolls_once(reloader_auto, CONFIG_HASH, Duration::from_millis(4_999));
}

#[test]
fn reloader_auto_content_changed_before_first_sight_is_adopted_without_a_rollout() {
    let mut h = Harness::new(reloader_auto());
    h.see();
    h.content("B");
    h.settle();
    assert_eq!(h.rollouts(), 0);
    assert_eq!(h.writes.len(), 1, "one adoption write");
    assert_eq!(h.template(CONFIG_HASH), None);
    assert_eq!(
        h.metadata(CONFIG_HASH),
        Some(adoption_of(reloader_auto, "B", CONFIG_HASH).as_str())
    );
    assert!(
        h.notes[0].starts_with("adopted nudge.dev/config-hash=sha256-")
            && h.notes[0].ends_with("on the workload's metadata (no rollout)"),
        "{}",
        h.notes[0]
    );
}

#[test]
fn the_adoption_is_written_at_once_not_after_the_debounce() {
    let mut h = Harness::new(reloader_auto_paused("15s"));
    h.see();
    h.content("A");
    h.advance(Duration::ZERO);
    assert_eq!(h.writes.len(), 1, "what nudge first saw is kept at once");
    assert_eq!(h.rollouts(), 0);
    assert_eq!(
        h.metadata(CONFIG_HASH),
        Some(adoption_of(reloader_auto, "A", CONFIG_HASH).as_str())
    );
    // A later change waits for the period, then rolls once.
    h.content("B");
    h.advance(Duration::from_secs(14));
    assert_eq!(h.rollouts(), 0);
    h.settle();
    assert_eq!(h.rollouts(), 1);
}

#[test]
fn reloader_auto_a_change_reverted_within_the_window_rolls_nothing() {
    let mut h = Harness::new(reloader_auto());
    h.see();
    h.content("A");
    h.advance(Duration::from_secs(1));
    h.content("B");
    h.advance(Duration::from_secs(1));
    h.content("A");
    h.settle();
    assert_eq!(h.rollouts(), 0);
    assert_eq!(
        h.metadata(CONFIG_HASH),
        Some(adoption_of(reloader_auto, "A", CONFIG_HASH).as_str())
    );
}

#[test]
fn reloader_pause_period_changes_after_first_sight_roll_once_at_its_end() {
    let paused = || reloader_auto_paused("15s");
    let mut h = Harness::new(paused());
    h.see();
    h.content("A");
    for (i, content) in ["B", "C", "D"].into_iter().enumerate() {
        h.advance(Duration::from_secs(4));
        h.content(content);
        assert_eq!(h.rollouts(), 0, "no rollout before the period ends ({i})");
    }
    h.settle();
    assert_eq!(h.rollouts(), 1, "{:#?}", h.writes);
    assert_eq!(
        h.template(CONFIG_HASH),
        Some(adoption_of(reloader_auto, "D", CONFIG_HASH).as_str())
    );
}

#[test]
fn reloader_annotations_strategy_a_change_after_first_sight_rewrites_its_document_once() {
    let b = adoption_of(reloader_annotations_strategy, "B", RELOADER_STATE);
    assert_change_rolls_once_with(reloader_annotations_strategy, Duration::from_secs(2), |h| {
        assert_eq!(h.metadata(RELOADER_STATE), Some(b.as_str()));
        let document = h.template(LAST_RELOADED_FROM).unwrap();
        assert!(document.contains("\"name\":\"cfg\""), "{document}");
    });
}

#[test]
fn reloader_annotations_strategy_without_a_change_is_adopted_without_a_rollout() {
    let mut h = Harness::new(reloader_annotations_strategy());
    h.see();
    h.content("A");
    h.settle();
    assert_eq!(h.rollouts(), 0);
    assert!(h.metadata(RELOADER_STATE).is_some());
}

#[test]
fn cron_jobs_and_jobs_a_change_after_first_sight_reaches_the_template_once() {
    assert_change_rolls_once(cron_job, CHECKSUM, Duration::from_secs(2));
    assert_change_rolls_once(job, CHECKSUM, Duration::from_secs(2));
    for make in [cron_job as fn() -> Workload, job] {
        let mut h = Harness::new(make());
        h.see();
        h.content("A");
        h.settle();
        assert_eq!(h.rollouts(), 0, "adopted on metadata");
        assert!(h.metadata(CHECKSUM).is_some());
    }
}

#[test]
fn consul_mutator_a_change_after_first_sight_rolls_once_with_the_new_content() {
    let mut h = Harness::new(consul_mutator("A"));
    h.see();
    h.content("A");
    h.advance(Duration::from_secs(2));
    assert!(
        h.writes.is_empty(),
        "the mutator's checksum is already right"
    );
    h.content("B");
    h.settle();
    assert_eq!(h.rollouts(), 1);
    let b = fingerprint::md5_value(b"B")
        .as_digest()
        .unwrap()
        .into_owned();
    assert_eq!(h.template(MUTATOR_CHECKSUM), Some(b.as_str()));
    assert_eq!(h.metadata(MUTATOR_CHECKSUM), Some(b.as_str()));
}

#[test]
fn wave_held_workloads_are_released_once_with_the_latest_content() {
    let mut h = Harness::new(wave_held());
    h.see();
    h.content("A");
    h.advance(Duration::from_secs(2));
    h.content("B");
    h.settle();
    assert_eq!(h.writes.len(), 1, "{:#?}", h.writes);
    assert_eq!(h.rollouts(), 1, "the release itself");
    assert_eq!(h.metadata(crate::model::WAVE_SCHEDULING_DISABLED), None);
    let mut b = Harness::new(wave_held());
    b.see();
    b.content("B");
    b.settle();
    assert_eq!(h.template(WAVE_HASH), b.template(WAVE_HASH));
    assert!(h.template(WAVE_HASH).is_some());
}

#[test]
fn a_change_while_the_adoption_write_is_in_flight_rolls_next_and_each_note_says_what_it_carried() {
    let mut h = Harness::new(reloader_auto());
    h.see();
    h.content("A");
    // Let the adoption go out, but hold its answer.
    h.now += Duration::from_secs(5);
    let effects = h.core.handle(Input::Tick, h.now);
    let adoption = writes_of(effects);
    assert_eq!(adoption.len(), 1);
    h.content("B");
    // The adoption returns; then the change is written.
    h.workload = applied(&h.workload, &adoption[0].patch);
    let stored = h.workload.clone();
    h.input(Input::WriteFinished {
        id: stored.id.clone(),
        outcome: WriteOutcome::Applied(Box::new(stored)),
    });
    h.settle();
    assert_eq!(h.rollouts(), 1);
    let b = adoption_of(reloader_auto, "B", CONFIG_HASH);
    assert_eq!(h.template(CONFIG_HASH), Some(b.as_str()));
    assert!(
        h.notes[0].starts_with("adopted nudge.dev/config-hash=") && !h.notes[0].contains("changed"),
        "the adoption carried no change: {}",
        h.notes[0]
    );
    assert!(
        h.notes[1].starts_with("configmap/ns/cfg changed; wrote nudge.dev/config-hash=sha256-"),
        "{}",
        h.notes[1]
    );
    assert!(b.starts_with(h.notes[1].split('=').nth(1).unwrap().trim_end_matches('…')));
}

fn writes_of(effects: Vec<Effect>) -> Vec<StampWrite> {
    effects
        .into_iter()
        .filter_map(|e| match e {
            Effect::Write(write) => Some(*write),
            _ => None,
        })
        .collect()
}

#[test]
fn after_a_restart_an_adopted_workload_rolls_on_content_changed_meanwhile() {
    let mut h = Harness::new(reloader_auto());
    h.see();
    h.content("A");
    h.settle();
    assert_eq!(h.rollouts(), 0);
    // A new process sees the adopted workload while the content is B.
    let mut restarted = Harness::new(h.workload.clone());
    restarted.see();
    restarted.content("B");
    restarted.settle();
    assert_eq!(restarted.rollouts(), 1);
    assert_eq!(
        restarted.template(CONFIG_HASH),
        Some(adoption_of(reloader_auto, "B", CONFIG_HASH).as_str())
    );
    // And one that sees it with unchanged content writes nothing.
    let mut again = Harness::new(h.workload.clone());
    again.see();
    again.content("A");
    again.settle();
    assert!(again.writes.is_empty());
}

#[test]
fn a_follower_that_saw_the_change_rolls_it_once_when_it_leads() {
    let mut h = Harness::with_leader(reloader_auto(), false);
    h.see();
    h.content("A");
    h.advance(Duration::from_secs(2));
    h.content("B");
    h.settle();
    assert!(h.writes.is_empty(), "a follower writes nothing");
    h.input(Input::Leadership(true));
    h.settle();
    assert_eq!(h.rollouts(), 1, "{:#?}", h.writes);
    assert_eq!(
        h.template(CONFIG_HASH),
        Some(adoption_of(reloader_auto, "B", CONFIG_HASH).as_str())
    );
}

#[test]
fn an_adoption_write_does_not_count_as_a_rollout_for_pacing() {
    let mut h = Harness::new(reloader_auto());
    h.see();
    h.content("A");
    h.settle();
    // The stored Deployment's generation moved with its annotations: its
    // status looks in progress until the controller catches up.
    h.workload.rollout = Rollout::InProgress;
    let stored = h.workload.clone();
    h.input(Input::workload(WorkloadEvent::Apply(stored)));
    let changed_at = h.now;
    h.content("B");
    h.settle();
    assert_eq!(h.rollouts(), 1);
    // Written after the debounce alone: no min-interval hold (30 s) behind it.
    assert_eq!(h.rolled_at, [changed_at + Duration::from_secs(5)]);
}
