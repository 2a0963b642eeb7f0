//! Holds, windows and waves (design §5d) in the core: explicit instants, a
//! wall clock anchored where each test needs it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::fingerprint::{Algorithm, Fingerprint, Observation};
use crate::model::{RolloutFailure, Scope, WorkloadKind};
use crate::window::WallClock;

const CHECKSUM: &str = "nudge.dev/checksum-cfg";
const DEBOUNCE: Duration = Duration::from_secs(5);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A core whose wall clock reads `wall` at `t0`, with `window` as
/// `engine.window`, whose targets have all listed.
fn mk_core(t0: Instant, wall: &str, window: Option<&str>) -> Core {
    let mut core = mk_listing_core(t0, wall, window);
    core.handle(Input::Listed, t0);
    core
}

/// [`mk_core`] before every target has delivered its initial listing (a
/// process that has just started).
fn mk_listing_core(t0: Instant, wall: &str, window: Option<&str>) -> Core {
    let settings = CoreSettings {
        engine: EngineConfig {
            debounce: DEBOUNCE,
            max_delay: secs(60),
            stamps_per_second: 1000.0,
            burst: 1000,
            min_interval: secs(30),
            window: window.map(|w| w.parse().unwrap()),
            ..EngineConfig::default()
        },
        scheme: AnnotationScheme::default(),
        catalog: SourceCatalog::new().with(SourceName::configmap(), Scope::Namespaced, |r| {
            crate::annotations::check_object_name(r).map_err(str::to_owned)
        }),
        namespace_selector: false,
        snapshot_kinds: Default::default(),
        leader: true,
        clock: WallClock::anchored(t0, wall.parse().unwrap()),
    };
    Core::new(settings, Arc::default(), EngineMetrics::default()).unwrap()
}

/// A Deployment referencing ConfigMap `cfg`, with `stamped` on its template,
/// these extra annotations, and this rollout status.
fn mk_workload(name: &str, stamped: &str, extra: &[(&str, &str)], rollout: Rollout) -> Workload {
    let mut annotations =
        BTreeMap::from([("nudge.dev/configmap-cfg".to_owned(), "cfg".to_owned())]);
    for (key, value) in extra {
        annotations.insert((*key).to_owned(), (*value).to_owned());
    }
    Workload {
        id: WorkloadId::new(WorkloadKind::deployment(), "ns", name),
        annotations,
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                annotations: Some(BTreeMap::from([(CHECKSUM.to_owned(), stamped.to_owned())])),
                ..ObjectMeta::default()
            }),
            spec: None,
        },
        rollout,
        ordered_pods: false,
        resource_version: None,
        uid: None,
        controller: None,
    }
}

fn apply(workload: Workload) -> Input {
    Input::workload(WorkloadEvent::Apply(workload))
}

fn observed(digest: &str) -> Input {
    Input::Observation(SourceUpdate::new(
        Tracked::new(
            Reference::object(SourceName::configmap(), "ns", "cfg"),
            Algorithm::Native,
        ),
        Observation::Present(Fingerprint::digest(digest)),
    ))
}

/// The workloads written and the value each write sets.
fn writes(effects: &[Effect]) -> Vec<(String, String)> {
    let output = Output::PodTemplateAnnotation(CHECKSUM.to_owned());
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Write(write) => Some((
                write.patch.id.name.to_string(),
                write.patch.values[&output].clone(),
            )),
            _ => None,
        })
        .collect()
}

fn notices(effects: &[Effect], reason: Reason) -> Vec<&Notice> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Publish(notice) if notice.reason == reason => Some(notice),
            _ => None,
        })
        .collect()
}

/// The pending fingerprint a `ConfigPending` note names.
fn pending_in(note: &str) -> String {
    let start = note.find("sha256-").expect("a fingerprint");
    note[start..start + 19].to_owned()
}

/// Ends the write of `name` as applied: stamped `digest`, rolling out.
fn finish(
    core: &mut Core,
    name: &str,
    digest: &str,
    extra: &[(&str, &str)],
    at: Instant,
) -> Vec<Effect> {
    let workload = mk_workload(name, digest, extra, Rollout::InProgress);
    core.handle(
        Input::WriteFinished {
            id: workload.id.clone(),
            outcome: WriteOutcome::Applied(Box::new(workload)),
        },
        at,
    )
}

// === holds ===

#[test]
fn notify_mode_reports_each_pending_config_once_and_never_stamps() {
    let t0 = Instant::now();
    let mut core = mk_core(t0, "2026-11-27T12:00:00Z", None);
    let notify = [("nudge.dev/mode", "notify")];
    core.handle(
        apply(mk_workload("web", "sha256-0", &notify, Rollout::Complete)),
        t0,
    );
    core.handle(observed("sha256-0"), t0);
    core.handle(observed("sha256-1"), t0);
    let effects = core.handle(Input::Tick, t0 + DEBOUNCE);
    assert_eq!(writes(&effects), []);
    let pending = notices(&effects, Reason::ConfigPending);
    assert_eq!(pending.len(), 1, "{effects:?}");
    assert!(
        pending[0].note.contains("mode notify"),
        "{}",
        pending[0].note
    );
    assert_eq!(pending[0].changed.len(), 1, "names the changed ConfigMap");
    assert_eq!(core.metrics.held("notify"), 1);
    // The same config again: no new report; a new one: reported.
    let effects = core.handle(
        apply(mk_workload("web", "sha256-0", &notify, Rollout::Complete)),
        t0 + secs(6),
    );
    let effects = [effects, core.handle(Input::Tick, t0 + secs(12))].concat();
    assert_eq!(notices(&effects, Reason::ConfigPending).len(), 0);
    core.handle(observed("sha256-2"), t0 + secs(20));
    let effects = core.handle(Input::Tick, t0 + secs(25));
    assert_eq!(writes(&effects), []);
    assert_eq!(notices(&effects, Reason::ConfigPending).len(), 1);
    // Back to auto: the newest content is stamped, and nothing is held.
    core.handle(
        apply(mk_workload("web", "sha256-0", &[], Rollout::Complete)),
        t0 + secs(30),
    );
    let effects = core.handle(Input::Tick, t0 + secs(35));
    assert_eq!(
        writes(&effects),
        [("web".to_owned(), "sha256-2".to_owned())]
    );
    assert_eq!(core.metrics.held("notify"), 0);
}

#[test]
fn manual_mode_stamps_exactly_the_approved_fingerprint() {
    let t0 = Instant::now();
    let mut core = mk_core(t0, "2026-11-27T12:00:00Z", None);
    let manual = |approve: Option<&str>| {
        let mut extra = vec![("nudge.dev/mode", "manual")];
        extra.extend(approve.map(|a| ("nudge.dev/approve", a)));
        mk_workload("web", "sha256-0", &extra, Rollout::Complete)
    };
    core.handle(apply(manual(None)), t0);
    core.handle(observed("sha256-0"), t0);
    core.handle(observed("sha256-1"), t0);
    let effects = core.handle(Input::Tick, t0 + DEBOUNCE);
    let first = pending_in(&notices(&effects, Reason::ConfigPending)[0].note);
    core.handle(observed("sha256-2"), t0 + secs(10));
    let effects = core.handle(Input::Tick, t0 + secs(15));
    let second = pending_in(&notices(&effects, Reason::ConfigPending)[0].note);
    assert_ne!(first, second);
    assert_eq!(core.metrics.held("manual"), 1);

    // An approval of the older config lets nothing through.
    core.handle(apply(manual(Some(&first))), t0 + secs(20));
    let effects = core.handle(Input::Tick, t0 + secs(25));
    assert_eq!(writes(&effects), []);
    let stale = notices(&effects, Reason::ConfigPending);
    assert!(
        stale[0].note.contains(&format!("approves {first}")),
        "{}",
        stale[0].note
    );

    // The pending one is stamped, with the newest content.
    core.handle(apply(manual(Some(&second))), t0 + secs(30));
    let effects = core.handle(Input::Tick, t0 + secs(35));
    assert_eq!(
        writes(&effects),
        [("web".to_owned(), "sha256-2".to_owned())]
    );
    assert_eq!(core.metrics.held("manual"), 0);
}

#[test]
fn approve_latest_lets_every_change_through_while_set() {
    let t0 = Instant::now();
    let mut core = mk_core(t0, "2026-11-27T12:00:00Z", None);
    let latest = [
        ("nudge.dev/mode", "manual"),
        ("nudge.dev/approve", "latest"),
    ];
    core.handle(
        apply(mk_workload("web", "sha256-0", &latest, Rollout::Complete)),
        t0,
    );
    core.handle(observed("sha256-1"), t0);
    let effects = core.handle(Input::Tick, t0 + DEBOUNCE);
    assert_eq!(
        writes(&effects),
        [("web".to_owned(), "sha256-1".to_owned())]
    );
}

#[test]
fn an_invalid_mode_holds_and_names_the_annotation() {
    let t0 = Instant::now();
    let mut core = mk_core(t0, "2026-11-27T12:00:00Z", None);
    let effects = core.handle(
        apply(mk_workload(
            "web",
            "sha256-0",
            &[("nudge.dev/mode", "manul")],
            Rollout::Complete,
        )),
        t0,
    );
    let invalid = notices(&effects, Reason::InvalidAnnotation);
    assert!(
        invalid[0].note.contains("nudge.dev/mode"),
        "{}",
        invalid[0].note
    );
    core.handle(observed("sha256-1"), t0);
    let effects = core.handle(Input::Tick, t0 + DEBOUNCE);
    assert_eq!(writes(&effects), []);
    assert_eq!(core.metrics.held("invalid"), 1);
}

// === windows ===

#[test]
fn a_window_opening_applies_the_newest_content_once() {
    let t0 = Instant::now();
    // Friday 21:58 UTC; the window opens at 22:00.
    let mut core = mk_core(t0, "2026-11-27T21:58:00Z", Some("Mon-Fri 22:00-06:00 UTC"));
    core.handle(
        apply(mk_workload("web", "sha256-0", &[], Rollout::Complete)),
        t0,
    );
    core.handle(observed("sha256-0"), t0);
    core.handle(observed("sha256-1"), t0);
    let effects = core.handle(Input::Tick, t0 + DEBOUNCE);
    assert_eq!(writes(&effects), []);
    let pending = notices(&effects, Reason::ConfigWaiting);
    assert!(
        pending[0]
            .note
            .contains("opens 2026-11-27T22:00:00+00:00[UTC]"),
        "{}",
        pending[0].note
    );
    assert_eq!(core.metrics.held("window"), 1);
    core.handle(observed("sha256-2"), t0 + secs(30));
    let effects = core.handle(Input::Tick, t0 + secs(35));
    assert_eq!(writes(&effects), []);
    let opening = t0 + secs(120);
    assert_eq!(
        effects.iter().find_map(|e| match e {
            Effect::WakeAt(at) => Some(*at),
            _ => None,
        }),
        Some(opening)
    );
    assert_eq!(writes(&core.handle(Input::Tick, opening - secs(1))), []);
    let effects = core.handle(Input::Tick, opening);
    assert_eq!(
        writes(&effects),
        [("web".to_owned(), "sha256-2".to_owned())]
    );
    finish(&mut core, "web", "sha256-2", &[], opening + secs(1));
    assert_eq!(writes(&core.handle(Input::Tick, opening + secs(60))), []);
}

#[test]
fn always_opts_a_workload_out_of_the_engine_window() {
    let t0 = Instant::now();
    let mut core = mk_core(t0, "2026-11-28T12:00:00Z", Some("Mon-Fri 22:00-06:00 UTC"));
    let always = [("nudge.dev/window", "always")];
    core.handle(
        apply(mk_workload("web", "sha256-0", &always, Rollout::Complete)),
        t0,
    );
    core.handle(observed("sha256-1"), t0);
    let effects = core.handle(Input::Tick, t0 + DEBOUNCE);
    assert_eq!(
        writes(&effects),
        [("web".to_owned(), "sha256-1".to_owned())]
    );
}

// === waves ===

fn wave(n: &'static str) -> [(&'static str, &'static str); 1] {
    [("nudge.dev/wave", n)]
}

/// `first` (wave 0), `second` (wave 1), `third` (wave 2), stamped
/// `sha256-0` and complete, sharing ConfigMap `cfg`.
fn three_waves(core: &mut Core, t0: Instant) {
    for name in ["first", "second", "third"] {
        status(core, name, "sha256-0", Rollout::Complete, t0);
    }
    core.handle(observed("sha256-0"), t0);
}

/// `name` reports its rollout of `digest` as `rollout`.
fn status(core: &mut Core, name: &str, digest: &str, rollout: Rollout, at: Instant) -> Vec<Effect> {
    let extra: &[(&str, &str)] = match name {
        "second" => &wave("1"),
        "third" => &wave("2"),
        _ => &[],
    };
    core.handle(apply(mk_workload(name, digest, extra, rollout)), at)
}

#[test]
fn three_waves_are_stamped_in_order() {
    let t0 = Instant::now();
    let mut core = mk_core(t0, "2026-11-27T12:00:00Z", None);
    three_waves(&mut core, t0);
    core.handle(observed("sha256-1"), t0);
    let effects = core.handle(Input::Tick, t0 + DEBOUNCE);
    assert_eq!(
        writes(&effects),
        [("first".to_owned(), "sha256-1".to_owned())]
    );
    assert_eq!(core.metrics.held("wave"), 2);
    // One wave in flight: the first one's rollout; the second waits itself.
    assert_eq!(core.metrics.wave_rollouts("rolling"), 1);
    finish(&mut core, "first", "sha256-1", &[], t0 + secs(6));
    assert_eq!(writes(&core.handle(Input::Tick, t0 + secs(20))), []);
    assert_eq!(core.metrics.wave_rollouts("rolling"), 1);

    status(
        &mut core,
        "first",
        "sha256-1",
        Rollout::Complete,
        t0 + secs(30),
    );
    let effects = core.handle(Input::Tick, t0 + secs(35));
    assert_eq!(
        writes(&effects),
        [("second".to_owned(), "sha256-1".to_owned())]
    );
    finish(&mut core, "second", "sha256-1", &wave("1"), t0 + secs(36));
    assert_eq!(writes(&core.handle(Input::Tick, t0 + secs(45))), []);
    assert_eq!(
        core.metrics.wave_rollouts("rolling"),
        1,
        "the second wave's rollout, not the first's again"
    );

    status(
        &mut core,
        "second",
        "sha256-1",
        Rollout::Complete,
        t0 + secs(50),
    );
    let effects = core.handle(Input::Tick, t0 + secs(55));
    assert_eq!(
        writes(&effects),
        [("third".to_owned(), "sha256-1".to_owned())]
    );
    assert_eq!(core.metrics.held("wave"), 0);
    assert_eq!(core.metrics.wave_rollouts("rolling"), 0);
}

#[test]
fn a_failed_wave_halts_the_rest_until_a_fix_releases_them_with_it() {
    let t0 = Instant::now();
    let mut core = mk_core(t0, "2026-11-27T12:00:00Z", None);
    three_waves(&mut core, t0);
    core.handle(observed("sha256-1"), t0);
    core.handle(Input::Tick, t0 + DEBOUNCE);
    finish(&mut core, "first", "sha256-1", &[], t0 + secs(6));
    let failed = Rollout::Failed {
        reason: RolloutFailure::ProgressDeadlineExceeded,
    };
    let effects = status(&mut core, "first", "sha256-1", failed, t0 + secs(30));
    let effects = [effects, core.handle(Input::Tick, t0 + secs(35))].concat();
    assert_eq!(writes(&effects), []);
    let halted = notices(&effects, Reason::WavesHalted);
    assert_eq!(halted.len(), 1, "one per halted change: {effects:?}");
    assert_eq!(halted[0].workload.name.as_str(), "first");
    assert!(halted[0].note.contains("second"), "{}", halted[0].note);
    assert!(halted[0].note.contains("third"), "{}", halted[0].note);
    assert!(halted[0].note.contains("configmap"), "{}", halted[0].note);
    let held: Vec<&str> = notices(&effects, Reason::ConfigWaiting)
        .iter()
        .map(|n| n.workload.name.as_str())
        .collect();
    assert_eq!(held.len(), 2, "one Event per held workload: {held:?}");
    assert_eq!(core.metrics.held("halted"), 2);
    assert_eq!(
        (
            core.metrics.wave_rollouts("halted"),
            core.metrics.wave_rollouts("rolling")
        ),
        (1, 0),
        "one halted rollout holds both"
    );
    // Nothing more while halted.
    let effects = core.handle(Input::Tick, t0 + secs(90));
    assert_eq!(notices(&effects, Reason::WavesHalted).len(), 0);

    // A fix: the first wave again, then the others, with the fix.
    core.handle(observed("sha256-2"), t0 + secs(100));
    let effects = core.handle(Input::Tick, t0 + secs(105));
    assert_eq!(
        writes(&effects),
        [("first".to_owned(), "sha256-2".to_owned())]
    );
    finish(&mut core, "first", "sha256-2", &[], t0 + secs(106));
    status(
        &mut core,
        "first",
        "sha256-2",
        Rollout::Complete,
        t0 + secs(120),
    );
    let effects = core.handle(Input::Tick, t0 + secs(125));
    assert_eq!(
        writes(&effects),
        [("second".to_owned(), "sha256-2".to_owned())]
    );
    assert_eq!(core.metrics.wave_rollouts("halted"), 0);
}

#[test]
fn a_newer_change_mid_plan_supersedes_it() {
    let t0 = Instant::now();
    let mut core = mk_core(t0, "2026-11-27T12:00:00Z", None);
    three_waves(&mut core, t0);
    core.handle(observed("sha256-1"), t0);
    core.handle(Input::Tick, t0 + DEBOUNCE);
    finish(&mut core, "first", "sha256-1", &[], t0 + secs(6));
    status(
        &mut core,
        "first",
        "sha256-1",
        Rollout::Complete,
        t0 + secs(30),
    );
    core.handle(Input::Tick, t0 + secs(35));
    finish(&mut core, "second", "sha256-1", &wave("1"), t0 + secs(36));

    // Wave 1 rolls content 1 when content 2 arrives: wave 0 goes first again.
    core.handle(observed("sha256-2"), t0 + secs(40));
    let effects = core.handle(Input::Tick, t0 + secs(45));
    assert_eq!(
        writes(&effects),
        [("first".to_owned(), "sha256-2".to_owned())]
    );
    finish(&mut core, "first", "sha256-2", &[], t0 + secs(46));
    // Wave 1 completes content 1: the third wave still waits (wave 0, and wave 1 itself, are behind).
    status(
        &mut core,
        "second",
        "sha256-1",
        Rollout::Complete,
        t0 + secs(50),
    );
    assert_eq!(writes(&core.handle(Input::Tick, t0 + secs(60))), []);
    status(
        &mut core,
        "first",
        "sha256-2",
        Rollout::Complete,
        t0 + secs(70),
    );
    let effects = core.handle(Input::Tick, t0 + secs(75));
    assert_eq!(
        writes(&effects),
        [("second".to_owned(), "sha256-2".to_owned())]
    );
    finish(&mut core, "second", "sha256-2", &wave("1"), t0 + secs(76));
    status(
        &mut core,
        "second",
        "sha256-2",
        Rollout::Complete,
        t0 + secs(90),
    );
    let effects = core.handle(Input::Tick, t0 + secs(95));
    assert_eq!(
        writes(&effects),
        [("third".to_owned(), "sha256-2".to_owned())],
        "never content 1"
    );
}

#[test]
fn a_new_leader_resumes_the_plan_from_the_workloads() {
    // The old leader stamped wave 0 and it completed; wave 1 was not stamped.
    let t0 = Instant::now();
    let mut core = mk_core(t0, "2026-11-27T12:00:00Z", None);
    core.handle(Input::Leadership(false), t0);
    status(&mut core, "first", "sha256-1", Rollout::Complete, t0);
    status(&mut core, "second", "sha256-0", Rollout::Complete, t0);
    status(&mut core, "third", "sha256-0", Rollout::Complete, t0);
    core.handle(observed("sha256-1"), t0);
    assert_eq!(
        writes(&core.handle(Input::Tick, t0 + DEBOUNCE)),
        [],
        "a follower writes nothing"
    );
    core.handle(Input::Leadership(true), t0 + secs(10));
    let effects = core.handle(Input::Tick, t0 + secs(15));
    assert_eq!(
        writes(&effects),
        [("second".to_owned(), "sha256-1".to_owned())],
        "wave 0 is not stamped again"
    );
    assert_eq!(
        core.metrics.held("wave"),
        1,
        "the third waits for the second"
    );
}

#[test]
fn a_restart_mid_rollout_keeps_later_waves_waiting() {
    let t0 = Instant::now();
    let mut core = mk_core(t0, "2026-11-27T12:00:00Z", None);
    status(&mut core, "first", "sha256-1", Rollout::InProgress, t0);
    status(&mut core, "second", "sha256-0", Rollout::Complete, t0);
    core.handle(observed("sha256-1"), t0);
    assert_eq!(writes(&core.handle(Input::Tick, t0 + DEBOUNCE)), []);
    status(
        &mut core,
        "first",
        "sha256-1",
        Rollout::Complete,
        t0 + secs(30),
    );
    let effects = core.handle(Input::Tick, t0 + secs(35));
    assert_eq!(
        writes(&effects),
        [("second".to_owned(), "sha256-1".to_owned())]
    );
}

#[test]
fn without_wave_annotations_everything_is_stamped_at_once() {
    let t0 = Instant::now();
    let mut core = mk_core(t0, "2026-11-27T12:00:00Z", None);
    core.handle(
        apply(mk_workload("a", "sha256-0", &[], Rollout::Complete)),
        t0,
    );
    core.handle(
        apply(mk_workload("b", "sha256-0", &[], Rollout::InProgress)),
        t0,
    );
    core.handle(observed("sha256-1"), t0);
    let effects = core.handle(Input::Tick, t0 + DEBOUNCE);
    assert_eq!(writes(&effects).len(), 2);
}

/// A StatefulSet `name` (a kind judged by nudge's own deadline).
fn sts(name: &str, stamped: &str, extra: &[(&str, &str)], rollout: Rollout) -> Workload {
    let mut workload = mk_workload(name, stamped, extra, rollout);
    workload.id = WorkloadId::new(WorkloadKind::stateful_set(), "ns", name);
    workload
}

const DEADLINE: (&str, &str) = ("nudge.dev/progress-deadline", "60s");

/// StatefulSets `db` (wave 0, nudge's deadline 60 s) and `replica` (wave 1)
/// sharing `cfg`; `cfg` changes, `db` is stamped and never completes: at
/// `t0 + 66 s` its rollout fails. The effects of the ticks after it.
fn past_nudges_deadline(core: &mut Core, t0: Instant) -> Vec<Effect> {
    core.handle(
        apply(sts("db", "sha256-0", &[DEADLINE], Rollout::Complete)),
        t0,
    );
    core.handle(
        apply(sts("replica", "sha256-0", &wave("1"), Rollout::Complete)),
        t0,
    );
    core.handle(observed("sha256-0"), t0);
    core.handle(observed("sha256-1"), t0);
    assert_eq!(
        writes(&core.handle(Input::Tick, t0 + DEBOUNCE)),
        [("db".to_owned(), "sha256-1".to_owned())]
    );
    let written = sts("db", "sha256-1", &[DEADLINE], Rollout::InProgress);
    core.handle(
        Input::WriteFinished {
            id: written.id.clone(),
            outcome: WriteOutcome::Applied(Box::new(written)),
        },
        t0 + secs(6),
    );
    assert_eq!(core.metrics.held("wave"), 1);
    let effects = core.handle(Input::Tick, t0 + secs(66));
    [effects, core.handle(Input::Tick, t0 + secs(71))].concat()
}

/// The `<prefix>/history` the driver records for the outcome in `effects`.
fn recorded_history(effects: &[Effect]) -> String {
    let conclusion = effects
        .iter()
        .find_map(|e| match e {
            Effect::Conclude(conclusion) => Some(conclusion),
            _ => None,
        })
        .expect("an outcome to record");
    crate::outcome::history::recorded(None, conclusion.revision.clone(), 10)
}

#[test]
fn a_rollout_past_nudges_own_deadline_halts_the_later_waves() {
    let t0 = Instant::now();
    let mut core = mk_core(t0, "2026-11-27T12:00:00Z", None);
    // nudge's deadline passes: the rollout failed, and the later wave halts.
    let effects = past_nudges_deadline(&mut core, t0);
    assert_eq!(writes(&effects), []);
    assert_eq!(
        notices(&effects, Reason::WavesHalted).len(),
        1,
        "{effects:?}"
    );
    assert_eq!(core.metrics.held("halted"), 1);
}

#[test]
fn a_recorded_failure_keeps_the_later_waves_halted_until_the_status_completes() {
    let t0 = Instant::now();
    let mut core = mk_core(t0, "2026-11-27T12:00:00Z", None);
    let effects = past_nudges_deadline(&mut core, t0);
    assert_eq!(core.metrics.held("halted"), 1);
    // The outcome is recorded: the marker goes, the history says failed, and
    // the StatefulSet's status still says rolling (no node runs its pod).
    let history = recorded_history(&effects);
    let recorded = [DEADLINE, ("nudge.dev/history", history.as_str())];
    core.handle(
        apply(sts("db", "sha256-1", &recorded, Rollout::InProgress)),
        t0 + secs(80),
    );
    // The held workload decides again (any event of its own does that).
    core.handle(
        apply(sts("replica", "sha256-0", &wave("1"), Rollout::Complete)),
        t0 + secs(81),
    );
    let effects = core.handle(Input::Tick, t0 + secs(90));
    assert_eq!(writes(&effects), []);
    assert_eq!(
        notices(&effects, Reason::ConfigWaiting).len(),
        0,
        "still halted, nothing new to say: {effects:?}"
    );
    assert_eq!(core.metrics.held("halted"), 1);
    assert_eq!(core.metrics.held("wave"), 0);

    // Its status completes after all: it failed nothing any more.
    core.handle(
        apply(sts("db", "sha256-1", &recorded, Rollout::Complete)),
        t0 + secs(100),
    );
    let effects = core.handle(Input::Tick, t0 + secs(110));
    assert_eq!(
        writes(&effects),
        [("replica".to_owned(), "sha256-1".to_owned())]
    );
}

#[test]
fn a_restart_after_a_recorded_failure_holds_the_later_waves_as_halted() {
    let t0 = Instant::now();
    let mut before = mk_core(t0, "2026-11-27T12:00:00Z", None);
    let history = recorded_history(&past_nudges_deadline(&mut before, t0));

    // A new process: only what the workloads say.
    let mut core = mk_core(t0, "2026-11-27T12:00:00Z", None);
    let recorded = [DEADLINE, ("nudge.dev/history", history.as_str())];
    core.handle(
        apply(sts("db", "sha256-1", &recorded, Rollout::InProgress)),
        t0,
    );
    core.handle(
        apply(sts("replica", "sha256-0", &wave("1"), Rollout::Complete)),
        t0,
    );
    core.handle(observed("sha256-1"), t0);
    let effects = core.handle(Input::Tick, t0 + DEBOUNCE);
    assert_eq!(writes(&effects), []);
    let waiting = notices(&effects, Reason::ConfigWaiting);
    assert_eq!(waiting.len(), 1, "{effects:?}");
    assert!(waiting[0].note.contains("halted"), "{}", waiting[0].note);
    assert_eq!(core.metrics.held("halted"), 1);
    assert_eq!(core.metrics.held("wave"), 0);
}

#[test]
fn a_deployments_recorded_failure_is_its_status_to_say() {
    // A Deployment that progresses again after a failure says so itself.
    let t0 = Instant::now();
    let mut core = mk_core(t0, "2026-11-27T12:00:00Z", None);
    let failed = r#"[{"revision":1,"stamp":[],"outcome":"failed"}]"#;
    core.handle(
        apply(mk_workload(
            "first",
            "sha256-1",
            &[("nudge.dev/history", failed)],
            Rollout::InProgress,
        )),
        t0,
    );
    core.handle(
        apply(mk_workload(
            "second",
            "sha256-0",
            &wave("1"),
            Rollout::Complete,
        )),
        t0,
    );
    core.handle(observed("sha256-1"), t0);
    core.handle(Input::Tick, t0 + DEBOUNCE);
    assert_eq!(core.metrics.held("wave"), 1);
    assert_eq!(core.metrics.held("halted"), 0);
}

/// The relist of `workloads` by the watch of their kind (all namespaces).
fn listed(core: &mut Core, workloads: Vec<Workload>, at: Instant) -> Vec<Effect> {
    let kind = workloads[0].id.kind.clone();
    let scope = crate::targets::WatchScope {
        kind,
        namespace: None,
    };
    let mut effects = core.handle(Input::workload(WorkloadEvent::Init(scope.clone())), at);
    for workload in workloads {
        effects.extend(core.handle(Input::workload(WorkloadEvent::InitApply(workload)), at));
    }
    effects.extend(core.handle(Input::workload(WorkloadEvent::InitDone(scope)), at));
    effects
}

#[test]
fn after_a_restart_a_later_wave_waits_for_every_kind_to_be_listed() {
    // `cfg` changed while nudge was down. The new process lists Deployments
    // first: `web` (wave 1), `api` (no wave) and the new content; the
    // StatefulSet `db` (wave 0, sharing `cfg`) comes with a later watch.
    let t0 = Instant::now();
    let mut core = mk_listing_core(t0, "2026-11-27T12:00:00Z", None);
    listed(
        &mut core,
        vec![
            mk_workload("web", "sha256-0", &wave("1"), Rollout::Complete),
            mk_workload("api", "sha256-0", &[], Rollout::Complete),
        ],
        t0,
    );
    core.handle(observed("sha256-1"), t0);
    let effects = core.handle(Input::Tick, t0 + DEBOUNCE);
    assert_eq!(
        writes(&effects),
        [("api".to_owned(), "sha256-1".to_owned())],
        "wave 0 never waits for the listing; wave 1 does"
    );
    assert_eq!(core.metrics.held("wave"), 1);
    assert_eq!(
        notices(&effects, Reason::ConfigWaiting).len(),
        0,
        "a wait of a moment is no Event: {effects:?}"
    );
    finish(&mut core, "api", "sha256-1", &[], t0 + secs(6));
    status(
        &mut core,
        "api",
        "sha256-1",
        Rollout::Complete,
        t0 + secs(7),
    );

    listed(
        &mut core,
        vec![sts("db", "sha256-0", &[], Rollout::Complete)],
        t0 + secs(8),
    );
    core.handle(Input::Listed, t0 + secs(8));
    let effects = core.handle(Input::Tick, t0 + secs(14));
    assert_eq!(writes(&effects), [("db".to_owned(), "sha256-1".to_owned())]);
    let waiting = notices(&effects, Reason::ConfigWaiting);
    assert_eq!(waiting.len(), 1, "{effects:?}");
    assert!(
        waiting[0].note.contains("StatefulSet/ns/db"),
        "{}",
        waiting[0].note
    );
    let written = sts("db", "sha256-1", &[], Rollout::InProgress);
    core.handle(
        Input::WriteFinished {
            id: written.id.clone(),
            outcome: WriteOutcome::Applied(Box::new(written)),
        },
        t0 + secs(15),
    );
    core.handle(
        apply(sts("db", "sha256-1", &[], Rollout::Complete)),
        t0 + secs(20),
    );
    let effects = core.handle(Input::Tick, t0 + secs(25));
    assert_eq!(
        writes(&effects),
        [("web".to_owned(), "sha256-1".to_owned())]
    );
}

#[test]
fn a_new_leader_judges_waves_only_once_every_kind_is_listed() {
    // A replica wins the lease while its StatefulSet watch is still listing.
    let t0 = Instant::now();
    let mut core = mk_listing_core(t0, "2026-11-27T12:00:00Z", None);
    core.handle(Input::Leadership(false), t0);
    listed(
        &mut core,
        vec![mk_workload(
            "web",
            "sha256-0",
            &wave("1"),
            Rollout::Complete,
        )],
        t0,
    );
    core.handle(observed("sha256-1"), t0);
    core.handle(Input::Leadership(true), t0 + secs(1));
    let effects = core.handle(Input::Tick, t0 + secs(6));
    assert_eq!(writes(&effects), []);
    assert_eq!(core.metrics.held("wave"), 1);
    listed(
        &mut core,
        vec![sts("db", "sha256-0", &[], Rollout::Complete)],
        t0 + secs(7),
    );
    core.handle(Input::Listed, t0 + secs(7));
    let effects = core.handle(Input::Tick, t0 + secs(12));
    assert_eq!(
        writes(&effects),
        [("db".to_owned(), "sha256-1".to_owned())],
        "wave 0 first, then wave 1 behind it"
    );
    assert_eq!(core.metrics.held("wave"), 1);
}
