//! Following the rollouts nudge starts: complete, failed, superseded, each
//! concluded aloud once, across restarts and leader changes.

use serde_json::json;

use super::harness::{CHECKSUM, Harness, batch, cron_job, job, native_deployment, reloader_auto};
use super::*;
use crate::fingerprint::Observation;
use crate::model::{ControllerRef, RolloutFailure, WorkloadKind};
use crate::outcome::history::{Change, Outcome, Revision};

const MARKER: &str = "nudge.dev/rollout";

fn marker(h: &Harness) -> Option<Revision> {
    h.workload
        .annotations
        .get(MARKER)
        .and_then(|m| Revision::parse(m))
}

/// A native Deployment stamped with `v1`: its first rollout in flight.
fn stamped(workload: Workload) -> Harness {
    let mut h = Harness::new(workload);
    h.content("v1");
    h.see();
    // The debounce, well short of any progress deadline.
    h.advance(Duration::from_secs(10));
    assert!(
        marker(&h).is_some(),
        "the stamp carries the rollout it starts"
    );
    h
}

fn outcomes(h: &Harness) -> Vec<(u32, Outcome)> {
    h.conclusions
        .iter()
        .map(|c| (c.revision.revision, c.revision.outcome.unwrap()))
        .collect()
}

#[test]
fn a_rolling_stamp_is_followed_until_its_controller_completes_it() {
    let mut h = stamped(native_deployment());
    let first = marker(&h).unwrap();
    assert_eq!(first.revision, 1);
    assert_eq!(first.stamp[0].key, CHECKSUM);
    assert_eq!(first.stamp[0].before, None);
    assert!(first.stamp[0].after.starts_with("sha256-"));
    h.rollout_status(Rollout::InProgress);
    assert!(h.conclusions.is_empty(), "still rolling");
    h.rollout_status(Rollout::Complete);
    assert_eq!(outcomes(&h), [(1, Outcome::Complete)]);
    h.rollout_status(Rollout::Complete);
    assert_eq!(h.conclusions.len(), 1, "concluded once");
    h.record_outcome();
    assert!(marker(&h).is_none());

    // The next change is revision 2: what it replaces, and what changed.
    h.content("v2");
    h.settle();
    let second = marker(&h).unwrap();
    assert_eq!(second.revision, 2);
    assert_eq!(
        second.stamp[0].before.as_deref(),
        Some(&*first.stamp[0].after)
    );
    assert_eq!(second.changed[0].reference, "configmap/ns/cfg");
    let kind = WorkloadKind::deployment();
    assert_eq!(h.core.metrics.rollouts(&kind, "configmap", "started"), 2);
    assert_eq!(h.core.metrics.rollouts(&kind, "configmap", "complete"), 1);
}

#[test]
fn a_deployment_past_its_progress_deadline_fails_by_its_controllers_word() {
    let mut h = stamped(native_deployment());
    h.advance(Duration::from_secs(3600));
    assert!(
        h.conclusions.is_empty(),
        "Deployments keep their own deadline"
    );
    h.rollout_status(Rollout::Failed {
        reason: RolloutFailure::ProgressDeadlineExceeded,
    });
    assert_eq!(outcomes(&h), [(1, Outcome::Failed)]);
    assert_eq!(
        h.conclusions[0].revision.reason.as_deref(),
        Some("ProgressDeadlineExceeded")
    );
}

#[test]
fn kinds_without_a_deadline_get_nudges_own() {
    // Stamped 5 s in (the debounce), seen at 10 s.
    let mut h = stamped(batch(WorkloadKind::stateful_set()));
    h.advance(Duration::from_secs(590));
    assert!(h.conclusions.is_empty());
    h.advance(Duration::from_secs(10));
    assert_eq!(outcomes(&h), [(1, Outcome::Failed)]);
    let reason = h.conclusions[0].revision.reason.clone().unwrap();
    assert!(reason.contains("progress deadline (10m)"), "{reason}");

    // Per workload: <prefix>/progress-deadline.
    let mut workload = batch(WorkloadKind::daemon_set());
    workload
        .annotations
        .insert("nudge.dev/progress-deadline".into(), "2m".into());
    let mut h = stamped(workload);
    h.advance(Duration::from_secs(110));
    assert!(h.conclusions.is_empty());
    h.advance(Duration::from_secs(10));
    assert_eq!(outcomes(&h), [(1, Outcome::Failed)]);
}

#[test]
fn a_newer_stamp_supersedes_the_rollout_in_flight_and_carries_it_to_the_history() {
    let mut h = stamped(native_deployment());
    h.content("v2");
    h.settle();
    assert!(h.conclusions.is_empty(), "no write of its own");
    assert!(
        h.notes
            .iter()
            .any(|n| n.starts_with("config revision 1 superseded after ")
                && n.contains("(superseded by config revision 2)")),
        "{:?}",
        h.notes
    );
    let in_flight = marker(&h).unwrap();
    assert_eq!(in_flight.revision, 2);
    assert_eq!(in_flight.superseded.len(), 1);
    assert_eq!(in_flight.superseded[0].outcome, Some(Outcome::Superseded));
    h.rollout_status(Rollout::Complete);
    assert_eq!(outcomes(&h), [(2, Outcome::Complete)]);
    h.record_outcome();
    let history = crate::outcome::history::parse_history(
        h.workload
            .annotations
            .get("nudge.dev/history")
            .map(String::as_str),
    );
    let recorded: Vec<(u32, Option<Outcome>)> =
        history.iter().map(|r| (r.revision, r.outcome)).collect();
    assert_eq!(
        recorded,
        [(1, Some(Outcome::Superseded)), (2, Some(Outcome::Complete))]
    );
    let kind = WorkloadKind::deployment();
    assert_eq!(h.core.metrics.rollouts(&kind, "configmap", "superseded"), 1);
}

#[test]
fn a_superseded_rollout_whose_marker_was_removed_is_carried_without_its_changes() {
    let mut h = stamped(native_deployment());
    // Someone removes the marker while revision 1 rolls; the watch says so.
    h.workload.annotations.remove(MARKER);
    h.status_update();
    while h.deliver() {}
    h.content("v2");
    h.settle();
    let note = h
        .notes
        .iter()
        .find(|n| n.starts_with("config revision 1 superseded after "))
        .expect("the superseded Event");
    assert!(
        note.contains("(superseded by config revision 2): its changes are not known"),
        "{note}"
    );
    let in_flight = marker(&h).unwrap();
    assert_eq!(in_flight.revision, 2);
    assert_eq!(in_flight.superseded.len(), 1);
    let carried = &in_flight.superseded[0];
    assert_eq!(
        (carried.revision, carried.outcome),
        (1, Some(Outcome::Superseded))
    );
    assert!(carried.stamp.is_empty() && carried.changed.is_empty());
}

#[test]
fn someone_elses_template_change_supersedes_the_rollout() {
    let mut h = stamped(native_deployment());
    h.workload
        .template
        .metadata
        .get_or_insert_default()
        .annotations
        .get_or_insert_default()
        .insert("kubectl.kubernetes.io/restartedAt".into(), "now".into());
    h.rollout_status(Rollout::InProgress);
    assert_eq!(outcomes(&h), [(1, Outcome::Superseded)]);
    assert!(
        h.conclusions[0]
            .revision
            .reason
            .as_deref()
            .unwrap()
            .contains("someone else")
    );
}

#[test]
fn kinds_without_status_verdicts_of_their_own_are_superseded_alike() {
    // What a cluster without nodes cannot show: a DaemonSet there wants no pod
    // and completes at once.
    for kind in [WorkloadKind::stateful_set(), WorkloadKind::daemon_set()] {
        let mut h = stamped(batch(kind.clone()));
        h.content("v2");
        h.settle();
        assert_eq!(marker(&h).map(|m| m.revision), Some(2), "{kind}");
        assert!(
            h.notes
                .iter()
                .any(|n| n.starts_with("config revision 1 superseded")),
            "{kind}: {:?}",
            h.notes
        );
        h.workload
            .template
            .metadata
            .get_or_insert_default()
            .annotations
            .get_or_insert_default()
            .insert("example.com/edited".into(), "by hand".into());
        h.rollout_status(Rollout::InProgress);
        assert_eq!(outcomes(&h), [(2, Outcome::Superseded)], "{kind}");
    }
}

#[test]
fn after_a_restart_the_rollout_in_flight_is_followed_from_its_marker() {
    let mut h = stamped(native_deployment());
    h.restart(false);
    assert!(h.conclusions.is_empty());
    h.rollout_status(Rollout::Complete);
    assert_eq!(outcomes(&h), [(1, Outcome::Complete)]);
    h.record_outcome();

    // The revision count goes on from the history.
    h.restart(false);
    h.content("v2");
    h.settle();
    assert_eq!(marker(&h).unwrap().revision, 2);
}

#[test]
fn a_new_leader_concludes_once_what_ended_under_the_old_one() {
    let mut h = stamped(native_deployment());
    h.lead(false);
    h.rollout_status(Rollout::Complete);
    assert!(
        h.conclusions.is_empty(),
        "a follower does not conclude aloud"
    );
    // The old leader died before recording: the marker is still there.
    h.lead(true);
    assert_eq!(outcomes(&h), [(1, Outcome::Complete)]);
    h.record_outcome();
    h.lead(false);
    h.lead(true);
    assert_eq!(h.conclusions.len(), 1, "recorded: not again");
}

#[test]
fn an_outcome_already_in_the_history_is_not_concluded_again() {
    let mut h = stamped(native_deployment());
    h.rollout_status(Rollout::Complete);
    let recorded = h.conclusions[0].revision.clone();
    // Recorded, and the marker left behind (a newer replica's view).
    let history = crate::outcome::history::recorded(None, recorded, 10);
    h.workload
        .annotations
        .insert("nudge.dev/history".into(), history);
    h.restart(false);
    h.rollout_status(Rollout::Complete);
    assert_eq!(h.conclusions.len(), 1);
}

#[test]
fn adoptions_start_nothing_to_follow() {
    let mut h = Harness::new(reloader_auto());
    h.content("v1");
    h.see();
    h.settle();
    assert!(!h.writes.is_empty(), "adopted");
    assert!(marker(&h).is_none());

    let mut h = Harness::new(cron_job());
    h.content("v1");
    h.see();
    h.settle();
    assert!(marker(&h).is_none(), "a CronJob's first stamp is adopted");
}

// === CronJobs and Jobs ===

/// A CronJob whose config changed once nudge adopted it: its job template
/// stamped, its rollout (the next run) in flight.
fn cron_job_in_flight() -> Harness {
    changed_after_adoption(cron_job())
}

/// A batch workload (adopting its first stamp) whose config changed once
/// nudge adopted it: its first rollout in flight.
fn changed_after_adoption(workload: Workload) -> Harness {
    let mut h = Harness::new(workload);
    h.content("v1");
    h.see();
    h.settle();
    h.content("v2");
    h.advance(Duration::from_secs(10));
    assert!(h.writes.iter().any(|w| w.rolls), "the job template changed");
    let first = marker(&h).unwrap();
    assert_eq!(first.revision, 1);
    // The adopted value is the one before; the one written, after.
    assert_eq!(first.stamp[0].key, CHECKSUM);
    assert!(first.stamp[0].before.is_some(), "{first:?}");
    assert_ne!(
        first.stamp[0].before.as_deref(),
        Some(&*first.stamp[0].after)
    );
    h
}

/// Job `name` made from the CronJob's job template as it is now, with the
/// labels the API server adds, in state `rollout`.
fn run_of(h: &Harness, name: &str, rollout: Rollout) -> Workload {
    let mut template = h.workload.template.clone();
    let labels = template
        .metadata
        .get_or_insert_default()
        .labels
        .get_or_insert_default();
    for label in crate::model::GENERATED_JOB_LABELS {
        labels.insert(label.into(), name.into());
    }
    Workload {
        id: WorkloadId::new(crate::targets::job_kind(), "ns", name),
        annotations: std::collections::BTreeMap::new(),
        template,
        rollout,
        ordered_pods: false,
        resource_version: Some("900".into()),
        uid: None,
        controller: Some(ControllerRef {
            api_version: "batch/v1".into(),
            kind: "CronJob".into(),
            name: h.workload.id.name.to_string(),
        }),
    }
}

/// The Job target's watch reports Job `name`, a run of the job template as
/// it is now, in state `rollout`.
fn see_run(h: &mut Harness, name: &str, rollout: Rollout) {
    let job = run_of(h, name, rollout);
    see_job(h, job);
}

fn see_job(h: &mut Harness, job: Workload) {
    h.input(Input::workload(WorkloadEvent::Apply(job)));
}

#[test]
fn a_cron_jobs_rollout_is_its_next_run_of_the_stamped_template() {
    let mut h = cron_job_in_flight();
    let failed = Rollout::Failed {
        reason: RolloutFailure::JobFailed,
    };
    // A run of the template before the stamp: not this rollout's.
    let mut old = run_of(&h, "app-old", failed);
    old.template = h.writes.last().unwrap().before.template.clone();
    see_job(&mut h, old);
    assert!(h.conclusions.is_empty());

    see_run(&mut h, "app-29001", Rollout::InProgress);
    assert!(h.conclusions.is_empty(), "still running");
    see_run(&mut h, "app-29001", Rollout::Complete);
    assert_eq!(outcomes(&h), [(1, Outcome::Complete)]);
    assert_eq!(
        h.conclusions[0].revision.reason.as_deref(),
        Some("ran as Job app-29001")
    );
    see_run(&mut h, "app-29001", Rollout::Complete);
    assert_eq!(h.conclusions.len(), 1, "concluded once");
}

#[test]
fn a_cron_jobs_failed_run_fails_its_rollout() {
    let mut h = cron_job_in_flight();
    let failed = Rollout::Failed {
        reason: RolloutFailure::JobFailed,
    };
    see_run(&mut h, "app-29001", failed);
    assert_eq!(outcomes(&h), [(1, Outcome::Failed)]);
    assert_eq!(
        h.conclusions[0].revision.reason.as_deref(),
        Some("Job app-29001 failed")
    );
}

#[test]
fn a_cron_jobs_deadline_counts_from_its_runs_first_sight() {
    let mut h = cron_job_in_flight();
    // The next scheduled run may be hours away: no deadline until it starts.
    h.advance(Duration::from_secs(3 * 3600));
    assert!(h.conclusions.is_empty());
    see_run(&mut h, "app-29001", Rollout::InProgress);
    h.advance(Duration::from_secs(590));
    assert!(h.conclusions.is_empty());
    h.advance(Duration::from_secs(10));
    assert_eq!(outcomes(&h), [(1, Outcome::Failed)]);
    let reason = h.conclusions[0].revision.reason.clone().unwrap();
    assert!(reason.contains("progress deadline (10m)"), "{reason}");
}

#[test]
fn someone_elses_job_template_change_supersedes_a_cron_jobs_rollout() {
    let mut h = cron_job_in_flight();
    h.workload.template.spec.get_or_insert_default().containers[0].image = Some("busybox:2".into());
    h.status_update();
    while h.deliver() {}
    assert_eq!(outcomes(&h), [(1, Outcome::Superseded)]);
}

#[test]
fn a_run_seen_before_its_cron_job_after_a_restart_still_ends_the_rollout() {
    let mut h = cron_job_in_flight();
    let done = run_of(&h, "app-29001", Rollout::Complete);
    // The new process lists Jobs before CronJobs.
    h.core = Core::new(
        super::harness::settings(),
        Arc::default(),
        EngineMetrics::default(),
    )
    .unwrap();
    see_job(&mut h, done);
    assert!(h.conclusions.is_empty());
    h.tracked.clear();
    h.see();
    assert_eq!(outcomes(&h), [(1, Outcome::Complete)]);
}

#[test]
fn a_jobs_rollout_is_its_recreated_jobs_own_conditions() {
    let mut h = changed_after_adoption(job());
    h.rollout_status(Rollout::InProgress);
    assert!(h.conclusions.is_empty());
    h.rollout_status(Rollout::Failed {
        reason: RolloutFailure::JobFailed,
    });
    assert_eq!(outcomes(&h), [(1, Outcome::Failed)]);
    assert_eq!(
        h.conclusions[0].revision.reason.as_deref(),
        Some("the Job failed")
    );
    h.record_outcome();

    h.content("v3");
    h.settle();
    assert_eq!(marker(&h).map(|m| m.revision), Some(2));
    h.rollout_status(Rollout::Complete);
    assert_eq!(outcomes(&h)[1], (2, Outcome::Complete));
}

#[test]
fn secret_content_is_never_kept_in_a_form_that_reveals_it() {
    // Reloader's env-var strategy hashes Secret content with SHA-1: unkeyed.
    let workload = super::harness::workload(
        WorkloadKind::deployment(),
        json!({"reloader.stakater.com/auto": "true"}),
        json!({}),
        json!({"containers": [{"name": "app", "image": "busybox",
            "env": [{"name": "STAKATER_DB_SECRET", "value": "old"}],
            "envFrom": [{"secretRef": {"name": "db"}}]}]}),
    );
    let deps = crate::annotations::dependencies(
        &workload,
        &AnnotationScheme::default(),
        &super::harness::builtin_catalog(),
    );
    let spec = deps
        .stamps
        .iter()
        .find(|s| s.output.key() == "STAKATER_DB_SECRET")
        .expect("Reloader's env var");
    let patch = StampPatch {
        id: workload.id.clone(),
        changed: vec![spec.output.clone()],
        values: [(
            spec.output.clone(),
            "2fd4e1c67a2d28fced849ee1bb76e7391b93eb12".into(),
        )]
        .into(),
        releases: Vec::new(),
    };
    let change = |r: &Reference| Change {
        reference: r.to_string(),
        version: None,
        by: None,
        at: None,
    };
    let revision = Revision::started(1, &BTreeSet::new(), change, &workload, &deps.stamps, &patch);
    assert_eq!(revision.stamp[0].after, "(secret)");
    assert_eq!(revision.stamp[0].before.as_deref(), Some("(secret)"));
}

#[test]
fn a_followed_rollout_stays_small() {
    // Thousands are in flight on a large cluster without nodes; the revision
    // is kept as its marker's JSON text (beside this) and the related
    // reference is shared.
    assert!(
        size_of::<follow::Follow>() <= 104,
        "{} bytes",
        size_of::<follow::Follow>()
    );
}

#[test]
fn who_changed_an_item_is_kept_until_the_stamp_carrying_its_change_is_written() {
    let mut h = stamped(native_deployment());
    h.rollout_status(Rollout::Complete);
    h.record_outcome();
    // The ConfigMap changes, and its source says who changed it.
    h.source = Some("v2".to_owned());
    for tracked in h.tracked.clone() {
        let observation = Observation::Present(super::harness::fingerprint_of(&tracked, "v2"));
        let provenance = crate::sources::Provenance {
            version: Some("12".into()),
            changed_by: Some("kubectl-edit".into()),
            changed_at: Some("2026-11-25T13:02:11Z".into()),
        };
        h.input(Input::Observation(
            SourceUpdate::new(tracked, observation).with_provenance(provenance),
        ));
    }
    assert_eq!(h.core.provenance.len(), 1, "kept until the stamp");
    h.settle();
    let second = marker(&h).unwrap();
    assert_eq!(second.revision, 2);
    assert_eq!(second.changed[0].by.as_deref(), Some("kubectl-edit"));
    assert_eq!(second.changed[0].version.as_deref(), Some("12"));
    assert!(
        h.core.provenance.is_empty(),
        "written: no stamp is left to name it"
    );
}
