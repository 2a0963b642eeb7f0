//! The snapshot annotations (design §5e): `snapshot` and `rollback-to`.

use super::*;
use crate::snapshot::SnapshotMode;

fn parse_with(mode: SnapshotMode, workload: &Workload) -> Dependencies {
    let scheme = AnnotationScheme::default().with_snapshots(mode);
    dependencies(workload, &scheme, &mk_catalog())
}

fn auto_with(extra: &[(&str, &str)]) -> Workload {
    let mut meta = vec![("nudge.dev/auto", "true")];
    meta.extend_from_slice(extra);
    mk_workload(&meta, &[], mk_auto_pod())
}

#[test]
fn engine_snapshots_and_the_annotation_decide_who_takes_snapshots() {
    let cases = [
        (SnapshotMode::Off, None, false),
        (SnapshotMode::OptIn, None, false),
        (SnapshotMode::OptIn, Some("true"), true),
        (SnapshotMode::OptIn, Some("false"), false),
        (SnapshotMode::All, None, true),
        (SnapshotMode::All, Some("false"), false),
        (SnapshotMode::All, Some("true"), true),
    ];
    for (mode, annotation, wanted) in cases {
        let extra: Vec<(&str, &str)> = annotation
            .map(|v| ("nudge.dev/snapshot", v))
            .into_iter()
            .collect();
        let deps = parse_with(mode, &auto_with(&extra));
        assert_eq!(deps.snapshot.wanted, wanted, "{mode:?} {annotation:?}");
        assert!(
            deps.errors.is_empty(),
            "{mode:?} {annotation:?}: {:?}",
            deps.errors
        );
    }
}

#[test]
fn asking_for_snapshots_nudge_cannot_take_is_reported() {
    let deps = parse_with(
        SnapshotMode::Off,
        &auto_with(&[("nudge.dev/snapshot", "true")]),
    );
    assert!(!deps.snapshot.wanted);
    assert_eq!(categories(&deps), [("nudge.dev/snapshot", "unsupported")]);
    assert!(
        deps.errors[0].to_string().contains("engine.snapshots"),
        "{}",
        deps.errors[0]
    );
}

#[test]
fn a_job_never_takes_snapshots() {
    let job_kind = WorkloadKind::new("batch", "v1", "Job", TemplatePath::spec_template())
        .with_immutable_template();
    let mut job = auto_with(&[]);
    job.id = WorkloadId::new(job_kind.clone(), NS, "migrate");
    assert!(!parse_with(SnapshotMode::All, &job).snapshot.wanted);
    let mut asked = auto_with(&[("nudge.dev/snapshot", "true")]);
    asked.id = WorkloadId::new(job_kind, NS, "migrate");
    let deps = parse_with(SnapshotMode::All, &asked);
    assert!(!deps.snapshot.wanted);
    assert_eq!(categories(&deps), [("nudge.dev/snapshot", "unsupported")]);
    assert!(
        deps.errors[0].to_string().contains("recreates the Job"),
        "{}",
        deps.errors[0]
    );
}

#[test]
fn rollback_to_names_a_revision_of_a_snapshotting_workload() {
    let deps = parse_with(
        SnapshotMode::All,
        &auto_with(&[("nudge.dev/rollback-to", "3")]),
    );
    assert_eq!(deps.snapshot.rollback_to, Some(3));
    assert!(deps.errors.is_empty(), "{:?}", deps.errors);
    for bad in ["0", "-1", "three", "", "+3", "4294967296"] {
        let deps = parse_with(
            SnapshotMode::All,
            &auto_with(&[("nudge.dev/rollback-to", bad)]),
        );
        assert_eq!(deps.snapshot.rollback_to, None, "{bad:?}");
        assert_eq!(
            categories(&deps),
            [("nudge.dev/rollback-to", "bad_value")],
            "{bad:?}"
        );
    }
    // Nothing to roll back to without snapshots: said, and not held at anything.
    let deps = parse_with(
        SnapshotMode::OptIn,
        &auto_with(&[("nudge.dev/rollback-to", "3")]),
    );
    assert_eq!(deps.snapshot.rollback_to, None);
    assert_eq!(
        categories(&deps),
        [("nudge.dev/rollback-to", "unsupported")]
    );
}

#[test]
fn the_snapshot_nudge_writes_on_the_template_is_reserved() {
    let workload = mk_workload(
        &[("nudge.dev/auto", "true")],
        &[("nudge.dev/snapshots", "{}")],
        mk_auto_pod(),
    );
    let deps = parse_with(SnapshotMode::All, &workload);
    assert!(deps.errors.is_empty(), "{:?}", deps.errors);
}
