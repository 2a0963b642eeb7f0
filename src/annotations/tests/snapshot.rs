//! The snapshot annotations (design §5e): `snapshot` and `rollback-to`.

use super::*;
use crate::model::KeySelection;
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

fn snapshot_spec(deps: &Dependencies) -> Option<&StampSpec> {
    deps.stamps
        .iter()
        .find(|s| matches!(s.output, Output::Snapshots(_)))
}

#[test]
fn a_snapshotting_workload_copies_what_its_outputs_track_with_the_keys_its_template_uses() {
    let deps = parse_with(SnapshotMode::All, &auto_with(&[]));
    let spec = snapshot_spec(&deps).expect("a snapshot output");
    assert_eq!(spec.output, Output::Snapshots("nudge.dev/snapshots".into()));
    assert_eq!(spec.combine, Combine::Snapshot);
    assert_eq!(
        inputs(spec),
        inputs(stamp(&deps, "nudge.dev/config-hash")),
        "auto's own items: nothing more is tracked"
    );
    // What an explicit reference names is copied when the template uses it;
    // what no output tracks stays live.
    let explicit = mk_workload(
        &[
            ("nudge.dev/configmap-app", "app"),
            ("nudge.dev/snapshot", "true"),
        ],
        &[],
        mk_auto_pod(),
    );
    let deps = parse_with(SnapshotMode::OptIn, &explicit);
    let spec = snapshot_spec(&deps).expect("a snapshot output");
    assert_eq!(inputs(spec), ["configmap/shop/app[a.yaml] (native)"]);
    // Not taking snapshots, and never having taken any: no output.
    let deps = parse_with(SnapshotMode::OptIn, &auto_with(&[]));
    assert!(snapshot_spec(&deps).is_none());
}

#[test]
fn copies_the_template_names_count_as_the_objects_they_copy() {
    use crate::snapshot::{Snapshot, SnapshotKey, copy_name};
    let id = WorkloadId::new(WorkloadKind::deployment(), NS, "web");
    let key = SnapshotKey::new(
        crate::fingerprint::ObjectKind::ConfigMap,
        "app",
        KeySelection::Only(["a.yaml".to_owned()].into()),
    );
    let copy = copy_name(&id, &key, "sha256-aa");
    let mut snapshot = Snapshot::new();
    snapshot.insert(key, "sha256-aa");
    let mut pod = mk_auto_pod();
    pod.volumes.as_mut().unwrap()[0] = mk_cm_volume(&copy, &["a.yaml"]);
    let annotation = snapshot.to_annotation();
    let copied = mk_workload(
        &[("nudge.dev/auto", "true")],
        &[("nudge.dev/snapshots", &annotation)],
        pod,
    );
    let deps = parse_with(SnapshotMode::All, &copied);
    let hash = inputs(stamp(&deps, "nudge.dev/config-hash"));
    assert!(
        hash.contains(&"configmap/shop/app[a.yaml] (native)".to_owned()),
        "{hash:?}"
    );
    assert!(!hash.iter().any(|i| i.contains(&copy)), "{hash:?}");

    // Snapshots turned off: an output with no input, to point it back.
    let deps = parse_with(SnapshotMode::Off, &copied);
    let spec = snapshot_spec(&deps).expect("a snapshot output to undo");
    assert!(spec.inputs.is_empty());
    assert!(deps.errors.is_empty(), "{:?}", deps.errors);
}
