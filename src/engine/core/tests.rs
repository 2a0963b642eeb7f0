//! The core with plain `#[test]`s and explicit instants: inputs in, effects out.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::fingerprint::{Algorithm, Fingerprint, Observation};
use crate::model::{Scope, WorkloadKind};

const CHECKSUM: &str = "nudge.dev/checksum-cfg";
const DEBOUNCE: Duration = Duration::from_secs(5);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The stamp values a patch writes, without the rollout it starts
/// (`nudge.dev/rollout`, see `follow`).
fn stamped_values(patch: &StampPatch) -> usize {
    patch
        .values
        .keys()
        .filter(|output| output.key() != "nudge.dev/rollout")
        .count()
}

fn mk_settings() -> CoreSettings {
    CoreSettings {
        engine: EngineConfig {
            debounce: DEBOUNCE,
            max_delay: secs(60),
            stamps_per_second: 1000.0,
            burst: 1000,
            min_interval: secs(30),
            stamp_on_delete: false,
            ..EngineConfig::default()
        },
        scheme: AnnotationScheme::default(),
        catalog: SourceCatalog::new().with(SourceName::configmap(), Scope::Namespaced, |r| {
            crate::annotations::check_object_name(r).map_err(str::to_owned)
        }),
        namespace_selector: false,
        snapshot_kinds: Default::default(),
        leader: true,
        clock: crate::window::WallClock::anchored(
            tokio::time::Instant::now(),
            jiff::Timestamp::UNIX_EPOCH,
        ),
    }
}

fn mk_core(settings: CoreSettings) -> Core {
    Core::new(settings, Arc::default(), EngineMetrics::default()).unwrap()
}

fn mk_id(name: &str) -> WorkloadId {
    WorkloadId::new(WorkloadKind::deployment(), "ns", name)
}

/// A Deployment with `nudge.dev/configmap-cfg: <configmap>` and, when given, the
/// stamp already on its pod template.
fn mk_workload(name: &str, configmap: &str, stamped: Option<&str>) -> Workload {
    let template_annotations: BTreeMap<String, String> = stamped
        .map(|v| BTreeMap::from([(CHECKSUM.to_owned(), v.to_owned())]))
        .unwrap_or_default();
    Workload {
        id: mk_id(name),
        annotations: BTreeMap::from([("nudge.dev/configmap-cfg".to_owned(), configmap.to_owned())]),
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                annotations: Some(template_annotations),
                ..ObjectMeta::default()
            }),
            spec: None,
        },
        rollout: Rollout::Unknown,
        ordered_pods: false,
        resource_version: None,
        uid: None,
        controller: None,
    }
}

fn mk_tracked(configmap: &str) -> Tracked {
    Tracked::new(
        Reference::object(SourceName::configmap(), "ns", configmap),
        Algorithm::Native,
    )
}

fn observed(configmap: &str, digest: &str) -> Input {
    Input::Observation(SourceUpdate::new(
        mk_tracked(configmap),
        Observation::Present(Fingerprint::digest(digest)),
    ))
}

fn absent(configmap: &str) -> Input {
    Input::Observation(SourceUpdate::new(
        mk_tracked(configmap),
        Observation::Absent,
    ))
}

fn applied(workload: Workload) -> Input {
    Input::WriteFinished {
        id: workload.id.clone(),
        outcome: WriteOutcome::Applied(Box::new(workload)),
    }
}

fn writes(effects: &[Effect]) -> Vec<&StampWrite> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Write(write) => Some(&**write),
            _ => None,
        })
        .collect()
}

fn notices(effects: &[Effect]) -> Vec<&Notice> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Publish(notice) => Some(notice),
            _ => None,
        })
        .collect()
}

fn wake(effects: &[Effect]) -> Option<Instant> {
    effects.iter().find_map(|e| match e {
        Effect::WakeAt(at) => Some(*at),
        _ => None,
    })
}

/// The value a write sets on the checksum.
fn written(write: &StampWrite) -> &str {
    let output = Output::PodTemplateAnnotation(CHECKSUM.to_owned());
    &write.patch.values[&output]
}

/// `name` stamped with `digest` on the pod template, as a target reports it back.
fn stamped(name: &str, digest: &str, rollout: Rollout) -> Workload {
    Workload {
        rollout,
        ..mk_workload(name, "cfg", Some(digest))
    }
}

#[test]
fn a_new_workload_tracks_its_reference_and_is_stamped_after_the_debounce() {
    let t0 = Instant::now();
    let mut core = mk_core(mk_settings());
    let effects = core.handle(
        Input::workload(WorkloadEvent::Apply(mk_workload("web", "cfg", None))),
        t0,
    );
    assert_eq!(effects, [Effect::Track(mk_tracked("cfg"))]);

    let effects = core.handle(observed("cfg", "sha256-1"), t0 + ms(10));
    assert!(writes(&effects).is_empty(), "debounced");
    assert_eq!(wake(&effects), Some(t0 + ms(10) + DEBOUNCE));

    let effects = core.handle(Input::Tick, t0 + ms(10) + DEBOUNCE);
    let writes = writes(&effects);
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].patch.id, mk_id("web"));
    assert_eq!(written(writes[0]), "sha256-1");
    assert_eq!(core.writes_in_flight(), 1);
}

#[test]
fn changes_within_the_debounce_window_give_one_write() {
    let t0 = Instant::now();
    let mut core = mk_core(mk_settings());
    core.handle(
        Input::workload(WorkloadEvent::Apply(mk_workload(
            "web",
            "cfg",
            Some("sha256-0"),
        ))),
        t0,
    );
    core.handle(observed("cfg", "sha256-1"), t0);
    let effects = core.handle(observed("cfg", "sha256-2"), t0 + secs(3));
    assert_eq!(wake(&effects), Some(t0 + secs(8)), "the window restarts");
    assert!(writes(&core.handle(Input::Tick, t0 + secs(7))).is_empty());
    let effects = core.handle(Input::Tick, t0 + secs(8));
    assert_eq!(writes(&effects).len(), 1);
    assert_eq!(written(writes(&effects)[0]), "sha256-2");
}

#[test]
fn a_workload_already_in_sync_is_never_written() {
    let t0 = Instant::now();
    let mut core = mk_core(mk_settings());
    core.handle(
        Input::workload(WorkloadEvent::Apply(mk_workload(
            "web",
            "cfg",
            Some("sha256-1"),
        ))),
        t0,
    );
    let effects = core.handle(observed("cfg", "sha256-1"), t0);
    assert_eq!(wake(&effects), None, "nothing queued");
    assert!(writes(&core.handle(Input::Tick, t0 + secs(100))).is_empty());
}

#[test]
fn a_change_while_a_write_is_in_flight_is_written_after_it() {
    let t0 = Instant::now();
    let mut settings = mk_settings();
    settings.engine.min_interval = Duration::ZERO;
    let mut core = mk_core(settings);
    core.handle(
        Input::workload(WorkloadEvent::Apply(mk_workload(
            "web",
            "cfg",
            Some("sha256-0"),
        ))),
        t0,
    );
    core.handle(observed("cfg", "sha256-1"), t0);
    assert_eq!(writes(&core.handle(Input::Tick, t0 + DEBOUNCE)).len(), 1);
    // The source changes again while the first write is in flight.
    core.handle(observed("cfg", "sha256-2"), t0 + DEBOUNCE + ms(1));
    let effects = core.handle(Input::Tick, t0 + DEBOUNCE * 2 + ms(1));
    assert!(
        writes(&effects).is_empty(),
        "one write per workload at a time"
    );
    let done_at = t0 + DEBOUNCE * 2 + ms(2);
    let effects = core.handle(
        applied(stamped("web", "sha256-1", Rollout::Unknown)),
        done_at,
    );
    assert_eq!(notices(&effects)[0].reason, Reason::ConfigChanged);
    let effects = core.handle(Input::Tick, wake(&effects).expect("queued again"));
    assert_eq!(written(writes(&effects)[0]), "sha256-2");
}

#[test]
fn a_failed_write_is_retried_with_growing_delays() {
    let t0 = Instant::now();
    let mut core = mk_core(mk_settings());
    core.handle(
        Input::workload(WorkloadEvent::Apply(mk_workload(
            "web",
            "cfg",
            Some("sha256-0"),
        ))),
        t0,
    );
    core.handle(observed("cfg", "sha256-1"), t0);
    core.handle(Input::Tick, t0 + DEBOUNCE);
    let mut at = t0 + DEBOUNCE;
    let mut delays = Vec::new();
    for _ in 0..4 {
        let conflict = TargetError::Conflict {
            id: mk_id("web"),
            message: "the object has been modified".into(),
        };
        let effects = core.handle(
            Input::WriteFinished {
                id: mk_id("web"),
                outcome: WriteOutcome::Retry(conflict),
            },
            at,
        );
        let retry = wake(&effects).expect("a retry is scheduled");
        assert!(writes(&core.handle(Input::Tick, retry - ms(1))).is_empty());
        let effects = core.handle(Input::Tick, retry);
        assert_eq!(writes(&effects).len(), 1, "retried at {retry:?}");
        delays.push(retry - at);
        at = retry;
    }
    assert!(delays[0] >= ms(500) && delays[0] < secs(1), "{delays:?}");
    assert!(delays[3] >= secs(4), "{delays:?}");
}

#[test]
fn a_rejected_write_publishes_stamp_failed_and_is_not_retried() {
    let t0 = Instant::now();
    let mut core = mk_core(mk_settings());
    core.handle(
        Input::workload(WorkloadEvent::Apply(mk_workload(
            "web",
            "cfg",
            Some("sha256-0"),
        ))),
        t0,
    );
    core.handle(observed("cfg", "sha256-1"), t0);
    core.handle(Input::Tick, t0 + DEBOUNCE);
    let rejected = TargetError::Rejected {
        id: mk_id("web"),
        message: "admission webhook denied the request".into(),
    };
    let effects = core.handle(
        Input::WriteFinished {
            id: mk_id("web"),
            outcome: WriteOutcome::Failed(rejected),
        },
        t0 + DEBOUNCE,
    );
    assert_eq!(notices(&effects)[0].reason, Reason::StampFailed);
    assert_eq!(wake(&effects), None);
}

#[test]
fn a_custom_sources_invalid_reference_is_one_event_with_its_reason_and_counted_once() {
    let t0 = Instant::now();
    let mut settings = mk_settings();
    // A custom external source whose rule wants absolute paths: Consul's rules
    // (no leading '/') are not its.
    settings.catalog = settings.catalog.with(
        SourceName::new("files").expect("valid"),
        Scope::External,
        |r: &str| {
            r.starts_with('/')
                .then_some(())
                .ok_or_else(|| "files wants an absolute path".to_owned())
        },
    );
    let metrics = EngineMetrics::default();
    let mut core = Core::new(settings, Arc::default(), metrics.clone()).unwrap();
    let kind = WorkloadKind::deployment();
    let mut workload = mk_workload("web", "cfg", None);
    let annotate = |w: &mut Workload, key: &str, value: &str| {
        w.annotations.insert(key.to_owned(), value.to_owned());
    };
    annotate(&mut workload, "nudge.dev/files-motd", "etc/motd");
    annotate(&mut workload, "nudge.dev/files-root", "/etc/hosts");
    let effects = core.handle(Input::workload(WorkloadEvent::Apply(workload.clone())), t0);
    let invalid = notices(&effects);
    assert_eq!(invalid.len(), 1, "{invalid:?}");
    assert_eq!(invalid[0].reason, Reason::InvalidAnnotation);
    assert_eq!(
        invalid[0].note,
        r#"annotation nudge.dev/files-motd: invalid reference "etc/motd": files wants an absolute path"#
    );
    assert_eq!(metrics.annotation_errors(&kind, "bad_reference"), 1);
    // The valid sibling with a leading '/' is tracked.
    let files_root = Tracked::new(
        Reference::key(SourceName::new("files").expect("valid"), "/etc/hosts"),
        Algorithm::Native,
    );
    assert!(effects.contains(&Effect::Track(files_root)), "{effects:?}");

    // Seen again (a status update): no second Event, not counted again.
    let effects = core.handle(
        Input::workload(WorkloadEvent::Apply(workload.clone())),
        t0 + secs(1),
    );
    assert!(notices(&effects).is_empty());
    assert_eq!(metrics.annotation_errors(&kind, "bad_reference"), 1);

    // A second bad reference: one Event for the new set, only the new error counted.
    annotate(&mut workload, "nudge.dev/files-other", "");
    let effects = core.handle(
        Input::workload(WorkloadEvent::Apply(workload)),
        t0 + secs(2),
    );
    assert_eq!(notices(&effects).len(), 1);
    assert_eq!(metrics.annotation_errors(&kind, "bad_reference"), 2);
}

#[test]
fn a_follower_neither_writes_nor_publishes_until_it_leads() {
    let t0 = Instant::now();
    let mut settings = mk_settings();
    settings.leader = false;
    let mut core = mk_core(settings);
    let mut workload = mk_workload("web", "cfg", Some("sha256-0"));
    workload
        .annotations
        .insert("nudge.dev/bogus".into(), "x".into());
    let effects = core.handle(Input::workload(WorkloadEvent::Apply(workload)), t0);
    assert!(
        notices(&effects).is_empty(),
        "followers keep problems to themselves"
    );
    core.handle(observed("cfg", "sha256-1"), t0);
    assert!(writes(&core.handle(Input::Tick, t0 + DEBOUNCE)).is_empty());

    let effects = core.handle(Input::Leadership(true), t0 + secs(10));
    assert_eq!(notices(&effects)[0].reason, Reason::InvalidAnnotation);
    let effects = core.handle(Input::Tick, wake(&effects).expect("re-evaluated"));
    assert_eq!(written(writes(&effects)[0]), "sha256-1");
}

#[test]
fn a_missing_required_reference_is_reported_once_and_keeps_the_stamp() {
    let t0 = Instant::now();
    let mut core = mk_core(mk_settings());
    core.handle(
        Input::workload(WorkloadEvent::Apply(mk_workload(
            "web",
            "cfg",
            Some("sha256-0"),
        ))),
        t0,
    );
    core.handle(absent("cfg"), t0);
    let effects = core.handle(Input::Tick, t0 + DEBOUNCE);
    assert!(writes(&effects).is_empty());
    assert_eq!(notices(&effects)[0].reason, Reason::MissingConfig);
    // The workload is seen again (a status update): no second Event.
    let effects = core.handle(
        Input::workload(WorkloadEvent::Apply(mk_workload(
            "web",
            "cfg",
            Some("sha256-0"),
        ))),
        t0 + secs(6),
    );
    let effects = match wake(&effects) {
        Some(at) => core.handle(Input::Tick, at),
        None => effects,
    };
    assert!(notices(&effects).is_empty(), "{effects:?}");
}

#[test]
fn min_interval_holds_a_restamp_only_while_the_previous_rollout_is_in_progress() {
    let t0 = Instant::now();
    let mut core = mk_core(mk_settings());
    core.handle(
        Input::workload(WorkloadEvent::Apply(mk_workload(
            "web",
            "cfg",
            Some("sha256-0"),
        ))),
        t0,
    );
    core.handle(observed("cfg", "sha256-1"), t0);
    core.handle(Input::Tick, t0 + DEBOUNCE);
    let stamped_at = t0 + DEBOUNCE;
    core.handle(
        applied(stamped("web", "sha256-1", Rollout::InProgress)),
        stamped_at,
    );

    // Changed again 1 s later: debounced, then held by min-interval (30 s).
    core.handle(observed("cfg", "sha256-2"), stamped_at + secs(1));
    let effects = core.handle(Input::Tick, stamped_at + secs(1) + DEBOUNCE);
    assert!(writes(&effects).is_empty());
    assert_eq!(wake(&effects), Some(stamped_at + secs(30)));

    // The controller reports the rollout complete: released at once.
    let completed = stamped_at + secs(12);
    let effects = core.handle(
        Input::workload(WorkloadEvent::Apply(stamped(
            "web",
            "sha256-1",
            Rollout::Complete,
        ))),
        completed,
    );
    assert!(wake(&effects).is_some_and(|at| at <= completed), "due now");
    let effects = core.handle(Input::Tick, completed);
    assert_eq!(written(writes(&effects)[0]), "sha256-2");
}

#[test]
fn a_completed_rollout_lets_the_next_change_through_after_the_debounce_alone() {
    let t0 = Instant::now();
    let mut core = mk_core(mk_settings());
    core.handle(
        Input::workload(WorkloadEvent::Apply(mk_workload(
            "web",
            "cfg",
            Some("sha256-0"),
        ))),
        t0,
    );
    core.handle(observed("cfg", "sha256-1"), t0);
    core.handle(Input::Tick, t0 + DEBOUNCE);
    core.handle(
        applied(stamped("web", "sha256-1", Rollout::InProgress)),
        t0 + DEBOUNCE,
    );
    core.handle(
        Input::workload(WorkloadEvent::Apply(stamped(
            "web",
            "sha256-1",
            Rollout::Complete,
        ))),
        t0 + secs(8),
    );
    let changed = t0 + secs(10);
    let effects = core.handle(observed("cfg", "sha256-2"), changed);
    assert_eq!(wake(&effects), Some(changed + DEBOUNCE));
    let effects = core.handle(Input::Tick, changed + DEBOUNCE);
    assert_eq!(written(writes(&effects)[0]), "sha256-2");
}

#[test]
fn inputs_queued_together_are_written_once() {
    let t0 = Instant::now();
    let mut settings = mk_settings();
    settings.engine.debounce = Duration::ZERO;
    let mut core = mk_core(settings);
    let mut workload = mk_workload("web", "cfg", None);
    workload
        .annotations
        .insert("nudge.dev/configmap-other".into(), "other".into());
    core.handle(Input::workload(WorkloadEvent::Apply(workload)), t0);
    // Both references observed before the driver gets to the tick.
    core.handle(observed("cfg", "sha256-1"), t0);
    let effects = core.handle(observed("other", "sha256-2"), t0);
    assert_eq!(wake(&effects), Some(t0));
    let effects = core.handle(Input::Tick, t0);
    let writes = writes(&effects);
    assert_eq!(writes.len(), 1);
    assert_eq!(stamped_values(&writes[0].patch), 2, "{:?}", writes[0].patch);
}

#[test]
fn no_more_than_eight_writes_are_in_flight() {
    let t0 = Instant::now();
    let mut settings = mk_settings();
    settings.engine.debounce = Duration::ZERO;
    let mut core = mk_core(settings);
    let mut total = 0;
    for i in 0..20 {
        let name = format!("w{i}");
        core.handle(
            Input::workload(WorkloadEvent::Apply(mk_workload(
                &name,
                "cfg",
                Some("sha256-0"),
            ))),
            t0,
        );
    }
    let effects = core.handle(observed("cfg", "sha256-1"), t0);
    assert!(writes(&effects).is_empty(), "only on a tick");
    let effects = core.handle(Input::Tick, t0);
    let first = writes(&effects);
    assert_eq!(first.len(), MAX_WRITES_IN_FLIGHT);
    total += first.len();
    let done: Vec<Workload> = first
        .iter()
        .map(|w| stamped(&w.patch.id.name, "sha256-1", Rollout::Unknown))
        .collect();
    for workload in done {
        core.handle(applied(workload), t0 + ms(5));
        total += writes(&core.handle(Input::Tick, t0 + ms(5))).len();
    }
    assert_eq!(core.writes_in_flight(), MAX_WRITES_IN_FLIGHT);
    assert_eq!(total, 16);
}

#[test]
fn a_relist_forgets_workloads_that_are_gone_and_untracks_their_references() {
    let t0 = Instant::now();
    let mut core = mk_core(mk_settings());
    let scope = WatchScope {
        kind: WorkloadKind::deployment(),
        namespace: None,
    };
    core.handle(
        Input::workload(WorkloadEvent::Apply(mk_workload("web", "cfg", None))),
        t0,
    );
    core.handle(
        Input::workload(WorkloadEvent::Apply(mk_workload("api", "other", None))),
        t0,
    );
    core.handle(Input::workload(WorkloadEvent::Init(scope.clone())), t0);
    core.handle(
        Input::workload(WorkloadEvent::InitApply(mk_workload("api", "other", None))),
        t0,
    );
    let effects = core.handle(Input::workload(WorkloadEvent::InitDone(scope)), t0);
    assert_eq!(effects, [Effect::Untrack(mk_tracked("cfg"))]);
    assert_eq!(core.workload_count(), 1);
}

#[test]
fn workloads_outside_the_selected_namespaces_wait_untracked() {
    let t0 = Instant::now();
    let mut settings = mk_settings();
    settings.namespace_selector = true;
    let mut core = mk_core(settings);
    let effects = core.handle(
        Input::workload(WorkloadEvent::Apply(mk_workload("web", "cfg", None))),
        t0,
    );
    assert!(
        effects.is_empty(),
        "nothing before the selector's first list"
    );
    let effects = core.handle(Input::Namespaces(BTreeSet::from(["ns".to_owned()])), t0);
    assert_eq!(effects, [Effect::Track(mk_tracked("cfg"))]);
    let effects = core.handle(Input::Namespaces(BTreeSet::new()), t0);
    assert_eq!(effects, [Effect::Untrack(mk_tracked("cfg"))]);
}

#[test]
fn a_restarted_source_is_told_everything_it_tracks() {
    let t0 = Instant::now();
    let mut core = mk_core(mk_settings());
    core.handle(
        Input::workload(WorkloadEvent::Apply(mk_workload("web", "cfg", None))),
        t0,
    );
    let effects = core.handle(Input::SourceStarted(SourceName::configmap()), t0);
    assert_eq!(effects, [Effect::Track(mk_tracked("cfg"))]);
    assert!(
        core.handle(Input::SourceStarted(SourceName::secret()), t0)
            .is_empty()
    );
}

#[test]
fn a_workload_deleted_before_its_write_returns_is_forgotten() {
    let t0 = Instant::now();
    let mut core = mk_core(mk_settings());
    core.handle(
        Input::workload(WorkloadEvent::Apply(mk_workload(
            "web",
            "cfg",
            Some("sha256-0"),
        ))),
        t0,
    );
    core.handle(observed("cfg", "sha256-1"), t0);
    core.handle(Input::Tick, t0 + DEBOUNCE);
    let effects = core.handle(
        Input::WriteFinished {
            id: mk_id("web"),
            outcome: WriteOutcome::Gone,
        },
        t0 + DEBOUNCE,
    );
    assert_eq!(effects, [Effect::Untrack(mk_tracked("cfg"))]);
    assert_eq!((core.workload_count(), core.writes_in_flight()), (0, 0));
}

fn two_reference_workload() -> Workload {
    let mut workload = mk_workload("web", "cfg", None);
    workload
        .annotations
        .insert("nudge.dev/configmap-other".into(), "other".into());
    workload
}

#[test]
fn a_stamp_waits_for_inputs_no_source_has_reported_yet() {
    let t0 = Instant::now();
    let mut core = mk_core(mk_settings());
    core.handle(
        Input::workload(WorkloadEvent::Apply(two_reference_workload())),
        t0,
    );
    core.handle(observed("cfg", "sha256-1"), t0);
    let effects = core.handle(Input::Tick, t0 + DEBOUNCE);
    assert!(writes(&effects).is_empty(), "`other` is not known yet");
    core.handle(observed("other", "sha256-2"), t0 + secs(6));
    let effects = core.handle(Input::Tick, t0 + secs(6) + DEBOUNCE);
    let writes = writes(&effects);
    assert_eq!(writes.len(), 1);
    assert_eq!(stamped_values(&writes[0].patch), 2, "one write with both");
}

#[test]
fn a_source_that_never_reports_delays_the_other_outputs_by_max_delay_at_most() {
    let t0 = Instant::now();
    let mut core = mk_core(mk_settings());
    core.handle(
        Input::workload(WorkloadEvent::Apply(two_reference_workload())),
        t0,
    );
    core.handle(observed("cfg", "sha256-1"), t0);
    let effects = core.handle(Input::Tick, t0 + DEBOUNCE);
    let retry = wake(&effects).expect("retried later");
    assert_eq!(retry, t0 + DEBOUNCE + secs(60));
    let effects = core.handle(Input::Tick, retry);
    let writes = writes(&effects);
    assert_eq!(writes.len(), 1);
    assert_eq!(stamped_values(&writes[0].patch), 1, "what is known");
}

#[test]
fn the_config_changed_notice_lists_every_changed_reference_sorted() {
    let t0 = Instant::now();
    let mut core = mk_core(mk_settings());
    core.handle(
        Input::workload(WorkloadEvent::Apply(two_reference_workload())),
        t0,
    );
    core.handle(observed("other", "sha256-2"), t0);
    core.handle(observed("cfg", "sha256-1"), t0);
    let effects = core.handle(Input::Tick, t0 + DEBOUNCE);
    assert_eq!(writes(&effects).len(), 1, "one write with both");

    let mut done = two_reference_workload();
    done.template.metadata = Some(ObjectMeta {
        annotations: Some(BTreeMap::from([
            (CHECKSUM.to_owned(), "sha256-1".to_owned()),
            ("nudge.dev/checksum-other".to_owned(), "sha256-2".to_owned()),
        ])),
        ..ObjectMeta::default()
    });
    let effects = core.handle(applied(done), t0 + DEBOUNCE + ms(1));
    let notices = notices(&effects);
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0].reason, Reason::ConfigChanged);
    let cfg = mk_tracked("cfg").reference.clone();
    let other = mk_tracked("other").reference.clone();
    assert_eq!(
        notices[0].changed,
        [cfg.clone(), other],
        "every one, sorted"
    );
    assert_eq!(notices[0].related, Some(cfg), "the Event's related object");
}

/// Each event and each write result carries its own copy of the id; the core
/// keeps one per workload (tables, graph and current outputs share it).
#[test]
fn a_workload_keeps_one_copy_of_its_id_across_events() {
    let t0 = Instant::now();
    let mut core = mk_core(mk_settings());
    for _ in 0..2 {
        let event = WorkloadEvent::Apply(mk_workload("web", "cfg", None));
        core.handle(Input::workload(event), t0);
    }
    core.handle(observed("cfg", "sha256-1"), t0);
    let effects = core.handle(Input::Tick, t0 + DEBOUNCE);
    assert_eq!(writes(&effects).len(), 1);
    core.handle(
        applied(stamped("web", "sha256-1", Rollout::Unknown)),
        t0 + DEBOUNCE,
    );
    let (key, record) = core.records.get_key_value(&mk_id("web")).unwrap();
    assert!(record.current.id().shares(key));
    let dependent = core.graph.dependents(&mk_tracked("cfg")).next().unwrap();
    assert!(dependent.shares(key));
}

/// There is a record per referencing workload (15,000 in the 10× benchmark):
/// one past 192 bytes costs the next allocator size class, 224.
#[test]
fn a_record_fits_a_192_byte_allocation() {
    assert!(size_of::<Record>() <= 192, "{} bytes", size_of::<Record>());
}
