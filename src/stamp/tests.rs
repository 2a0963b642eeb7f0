use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, PodSpec, PodTemplateSpec, SecretKeySelector,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::fingerprint::{Algorithm, DataValue, ObjectData, WaveFragment, wave_fragment};
use crate::model::{SourceName, WorkloadKind};

const HASH: &str = "nudge.dev/config-hash";
const WAVE: &str = "wave.pusher.com/config-hash";

fn mk_tracked(source: SourceName, name: &str, algorithm: Algorithm) -> Tracked {
    Tracked::new(Reference::object(source, "ns", name), algorithm)
}

fn mk_cm(name: &str) -> Tracked {
    mk_tracked(SourceName::configmap(), name, Algorithm::Native)
}

fn mk_input(tracked: &Tracked, optional: bool) -> Input {
    Input {
        tracked: tracked.clone(),
        optional,
    }
}

fn mk_spec(output: Output, combine: Combine, inputs: Vec<Input>) -> StampSpec {
    StampSpec {
        output,
        combine,
        inputs,
        origins: Vec::new(),
    }
}

fn mk_annotation(key: &str) -> Output {
    Output::PodTemplateAnnotation(key.to_owned())
}

fn mk_checksum(slot: &str, tracked: &Tracked) -> StampSpec {
    mk_spec(
        mk_annotation(&format!("nudge.dev/checksum-{slot}")),
        Combine::Single,
        vec![mk_input(tracked, false)],
    )
}

fn mk_store(entries: &[(&Tracked, Observation)]) -> FingerprintStore {
    let mut store = FingerprintStore::new();
    for (tracked, observation) in entries {
        store.set((*tracked).clone(), observation.clone());
    }
    store
}

fn present(digest: &str) -> Observation {
    Observation::Present(Fingerprint::digest(digest))
}

/// A Wave fragment of an object with one text key.
fn mk_fragment(key: &str, value: &str) -> WaveFragment {
    wave_fragment(&ObjectData(BTreeMap::from([(
        key.to_owned(),
        DataValue::Text(value.to_owned()),
    )])))
}

fn mk_container(name: &str, env: &[(&str, &str)]) -> Container {
    Container {
        name: name.to_owned(),
        env: Some(
            env.iter()
                .map(|(name, value)| EnvVar {
                    name: (*name).to_owned(),
                    value: Some((*value).to_owned()),
                    ..EnvVar::default()
                })
                .collect(),
        ),
        ..Container::default()
    }
}

fn mk_workload(
    template: &[(&str, &str)],
    own: &[(&str, &str)],
    containers: Vec<Container>,
    init_containers: Vec<Container>,
) -> Workload {
    let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    Workload {
        id: WorkloadId::new(WorkloadKind::deployment(), "ns", "web"),
        rollout: crate::model::Rollout::Unknown,
        ordered_pods: false,
        resource_version: None,
        uid: None,
        controller: None,
        annotations: map(own),
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                annotations: Some(map(template)),
                ..ObjectMeta::default()
            }),
            spec: Some(PodSpec {
                containers,
                init_containers: Some(init_containers),
                ..PodSpec::default()
            }),
        },
    }
}

fn mk_annotated(template: &[(&str, &str)]) -> Workload {
    mk_workload(template, &[], Vec::new(), Vec::new())
}

// === FingerprintStore ===

#[test]
fn store_set_reports_only_real_changes() {
    let cfg = mk_cm("cfg");
    let mut store = FingerprintStore::new();
    assert!(store.set(cfg.clone(), present("sha256-1")));
    assert!(!store.set(cfg.clone(), present("sha256-1")));
    assert!(store.set(cfg.clone(), Observation::Absent));
    assert_eq!(store.remove(&cfg), Some(Observation::Absent));
    assert!(store.observation(&cfg).is_none());
}

// === desired ===

#[test]
fn single_output_is_the_input_digest() {
    let cfg = mk_cm("cfg");
    let store = mk_store(&[(&cfg, present("sha256-aa"))]);
    let stamp = desired(&[mk_checksum("cfg", &cfg)], &store, false);
    assert_eq!(
        stamp
            .values
            .get(&mk_annotation("nudge.dev/checksum-cfg"))
            .map(String::as_str),
        Some("sha256-aa")
    );
    assert!(stamp.blocked.is_empty());
}

/// The hash of no input: what `<prefix>/auto` on a pod spec without a
/// ConfigMap or Secret once stamped.
fn hash_of_nothing() -> String {
    crate::fingerprint::combine_native(std::iter::empty()).to_string()
}

#[test]
fn an_output_of_no_input_has_no_value_and_no_patch() {
    let store = FingerprintStore::new();
    let specs = [
        mk_spec(mk_annotation(HASH), Combine::NativeHash, Vec::new()),
        mk_spec(mk_annotation(WAVE), Combine::Wave, Vec::new()),
        mk_spec(
            Output::Adopted(HASH.to_owned()),
            Combine::NativeHash,
            Vec::new(),
        ),
    ];
    let stamp = desired(&specs, &store, false);
    assert_eq!(stamp, DesiredStamp::default());
    assert_eq!(diff(&mk_annotated(&[]), &specs, &stamp), None);
    let decision = decide_admission(&mk_annotated(&[]), None, &specs, &stamp);
    assert!(decision.values.is_empty() && !decision.stamp_changed);
}

#[test]
fn an_output_of_no_input_that_an_older_nudge_wrote_is_kept_as_it_is() {
    let nothing = hash_of_nothing();
    let workload = mk_annotated(&[(HASH, nothing.as_str())]);
    let spec = mk_spec(mk_annotation(HASH), Combine::NativeHash, Vec::new());
    let stamp = desired(std::slice::from_ref(&spec), &FingerprintStore::new(), false);
    assert_eq!(diff(&workload, std::slice::from_ref(&spec), &stamp), None);
    // Another output's write keeps it (an apply leaving it out would remove it
    // and roll the pods).
    let cfg = mk_cm("cfg");
    let specs = [spec, mk_checksum("cfg", &cfg)];
    let store = mk_store(&[(&cfg, present("sha256-aa"))]);
    let patch = diff(&workload, &specs, &desired(&specs, &store, false)).unwrap();
    assert_eq!(patch.values.get(&mk_annotation(HASH)), Some(&nothing));
}

#[test]
fn a_hold_with_no_input_is_released() {
    let spec = mk_spec(
        Output::SchedulingGate("nudge.dev/awaiting-config".to_owned()),
        Combine::Release,
        Vec::new(),
    );
    let stamp = desired(&[spec], &FingerprintStore::new(), false);
    assert_eq!(
        stamp.values.values().next().map(String::as_str),
        Some(RELEASED)
    );
}

#[test]
fn unknown_input_blocks_its_output_only() {
    let known = mk_cm("known");
    let unknown = mk_cm("unknown");
    let store = mk_store(&[(&known, present("sha256-aa"))]);
    let specs = [
        mk_checksum("known", &known),
        mk_checksum("unknown", &unknown),
    ];
    let stamp = desired(&specs, &store, false);
    assert_eq!(stamp.values.len(), 1);
    assert_eq!(
        stamp.blocked,
        [Blocked {
            output: mk_annotation("nudge.dev/checksum-unknown"),
            reason: BlockReason::Unknown { tracked: unknown },
        }]
    );
}

#[test]
fn missing_required_input_blocks_and_gives_no_patch() {
    let db = mk_tracked(SourceName::secret(), "db", Algorithm::Native);
    let store = mk_store(&[(&db, Observation::Absent)]);
    let specs = [mk_checksum("db", &db)];
    let stamp = desired(&specs, &store, false);
    assert!(stamp.values.is_empty());
    assert_eq!(stamp.blocked.len(), 1);
    assert_eq!(
        stamp.blocked[0].reason,
        BlockReason::Missing {
            reference: db.reference.clone()
        }
    );
    assert_eq!(stamp.blocked[0].reason.category(), "missing");

    let stamped = mk_annotated(&[("nudge.dev/checksum-db", "hmac-sha256-old")]);
    assert_eq!(diff(&stamped, &specs, &stamp), None);
}

#[test]
fn missing_required_input_in_combined_hash_blocks_it() {
    let a = mk_cm("a");
    let b = mk_cm("b");
    let store = mk_store(&[(&a, present("sha256-a")), (&b, Observation::Absent)]);
    let spec = mk_spec(
        mk_annotation(HASH),
        Combine::NativeHash,
        vec![mk_input(&a, false), mk_input(&b, false)],
    );
    let stamp = desired(&[spec], &store, false);
    assert!(stamp.values.is_empty());
    assert!(
        matches!(&stamp.blocked[..], [Blocked { reason: BlockReason::Missing { reference }, .. }] if *reference == b.reference)
    );
}

#[test]
fn stamp_on_delete_stamps_missing_required_as_absent() {
    let db = mk_tracked(SourceName::secret(), "db", Algorithm::Native);
    let store = mk_store(&[(&db, Observation::Absent)]);
    let specs = [mk_checksum("db", &db)];
    let stamp = desired(&specs, &store, true);
    assert!(stamp.blocked.is_empty());
    let output = mk_annotation("nudge.dev/checksum-db");
    assert_eq!(stamp.values.get(&output).map(String::as_str), Some(ABSENT));

    let stamped = mk_annotated(&[("nudge.dev/checksum-db", "hmac-sha256-old")]);
    let patch = diff(&stamped, &specs, &stamp).expect("absence is stamped");
    assert_eq!(patch.changed, [output]);
}

#[test]
fn stamp_on_delete_counts_missing_required_as_absent_in_combined_hash() {
    let a = mk_cm("a");
    let b = mk_cm("b");
    let store = mk_store(&[(&a, present("sha256-a")), (&b, Observation::Absent)]);
    let spec = mk_spec(
        mk_annotation(HASH),
        Combine::NativeHash,
        vec![mk_input(&a, false), mk_input(&b, false)],
    );
    let stamp = desired(&[spec], &store, true);
    let expected = combine_native([
        (a.reference.to_string().as_str(), Some("sha256-a")),
        (b.reference.to_string().as_str(), None),
    ]);
    assert_eq!(
        stamp.values.get(&mk_annotation(HASH)),
        Some(&expected.to_string())
    );
}

#[test]
fn optional_single_absent_is_stamped_absent() {
    let flags = mk_cm("flags");
    let store = mk_store(&[(&flags, Observation::Absent)]);
    let spec = mk_spec(
        mk_annotation("nudge.dev/checksum-flags"),
        Combine::Single,
        vec![mk_input(&flags, true)],
    );
    let stamp = desired(&[spec], &store, false);
    assert_eq!(
        stamp.values.values().next().map(String::as_str),
        Some(ABSENT)
    );
}

#[test]
fn optional_absent_counts_as_absent_in_hash_and_appearing_later_changes_it_once() {
    let app = mk_cm("app");
    let extra = mk_cm("extra");
    let specs = [mk_spec(
        mk_annotation(HASH),
        Combine::NativeHash,
        vec![mk_input(&app, false), mk_input(&extra, true)],
    )];
    let mut store = mk_store(&[(&app, present("sha256-app")), (&extra, Observation::Absent)]);
    let before = desired(&specs, &store, false);
    let before_hash = before.values[&mk_annotation(HASH)].clone();
    let with_absent = combine_native([
        (app.reference.to_string().as_str(), Some("sha256-app")),
        (extra.reference.to_string().as_str(), None),
    ]);
    let without_extra = combine_native([(app.reference.to_string().as_str(), Some("sha256-app"))]);
    assert_eq!(before_hash, with_absent.to_string());
    assert_ne!(
        before_hash,
        without_extra.to_string(),
        "absent input must be in the hash"
    );

    let workload = mk_annotated(&[(HASH, &before_hash)]);
    assert_eq!(diff(&workload, &specs, &before), None);

    store.set(extra.clone(), present("sha256-extra"));
    let after = desired(&specs, &store, false);
    let patch = diff(&workload, &specs, &after).expect("creating the optional input stamps");
    assert_eq!(patch.changed, [mk_annotation(HASH)]);

    let restamped = mk_annotated(&[(HASH, &patch.values[&mk_annotation(HASH)])]);
    assert_eq!(
        diff(&restamped, &specs, &desired(&specs, &store, false)),
        None
    );
}

#[test]
fn combined_hash_does_not_depend_on_input_order() {
    let a = mk_cm("a");
    let b = mk_cm("b");
    let store = mk_store(&[(&a, present("sha256-a")), (&b, present("sha256-b"))]);
    let forward = mk_spec(
        mk_annotation(HASH),
        Combine::NativeHash,
        vec![mk_input(&a, false), mk_input(&b, false)],
    );
    let backward = mk_spec(
        mk_annotation(HASH),
        Combine::NativeHash,
        vec![mk_input(&b, false), mk_input(&a, false)],
    );
    assert_eq!(
        desired(&[forward], &store, false),
        desired(&[backward], &store, false)
    );
}

#[test]
fn wave_document_is_built_from_fragments_and_optional_missing_is_left_out() {
    let app = mk_tracked(SourceName::configmap(), "app", Algorithm::Wave);
    let extra = mk_tracked(SourceName::configmap(), "extra", Algorithm::Wave);
    let db = mk_tracked(SourceName::secret(), "db", Algorithm::Wave);
    let app_fragment = mk_fragment("a", "a");
    let db_fragment = mk_fragment("p", "p");
    let store = mk_store(&[
        (
            &app,
            Observation::Present(Fingerprint::Wave(app_fragment.clone())),
        ),
        (&extra, Observation::Absent),
        (
            &db,
            Observation::Present(Fingerprint::Wave(db_fragment.clone())),
        ),
    ]);
    let spec = mk_spec(
        mk_annotation(WAVE),
        Combine::Wave,
        vec![
            mk_input(&app, false),
            mk_input(&db, false),
            mk_input(&extra, true),
        ],
    );
    let stamp = desired(&[spec], &store, false);
    assert!(stamp.blocked.is_empty(), "{:?}", stamp.blocked);
    let expected = wave_hash([("app", &app_fragment)], [("db", &db_fragment)]);
    let swapped = wave_hash([("app", &app_fragment), ("db", &db_fragment)], []);
    assert_ne!(
        expected, swapped,
        "sections must matter for this test to mean anything"
    );
    assert_eq!(stamp.values[&mk_annotation(WAVE)], expected);
}

#[test]
fn wave_input_from_another_source_is_blocked() {
    let key = Tracked::new(
        Reference::key(SourceName::consul(), "app/config"),
        Algorithm::Wave,
    );
    let store = mk_store(&[(
        &key,
        Observation::Present(Fingerprint::Wave(mk_fragment("k", "v"))),
    )]);
    let spec = mk_spec(
        mk_annotation(WAVE),
        Combine::Wave,
        vec![mk_input(&key, false)],
    );
    let stamp = desired(&[spec], &store, false);
    assert!(stamp.values.is_empty());
    assert_eq!(stamp.blocked[0].reason.category(), "not_wave_source");
}

#[test]
fn wrong_fingerprint_shape_is_blocked_with_a_reason() {
    let cfg = mk_tracked(SourceName::configmap(), "cfg", Algorithm::Wave);
    let store = mk_store(&[(
        &cfg,
        Observation::Present(Fingerprint::Wave(mk_fragment("k", "v"))),
    )]);
    let stamp = desired(&[mk_checksum("cfg", &cfg)], &store, false);
    assert!(stamp.values.is_empty());
    let reason = &stamp.blocked[0].reason;
    assert!(matches!(
        reason,
        BlockReason::WrongShape {
            found: "wave fragment",
            ..
        }
    ));
    assert!(reason.to_string().contains("configmap/ns/cfg"), "{reason}");

    let digest_in_wave = mk_spec(
        mk_annotation(WAVE),
        Combine::Wave,
        vec![mk_input(&mk_cm("d"), false)],
    );
    let store = mk_store(&[(&mk_cm("d"), present("sha256-d"))]);
    let stamp = desired(&[digest_in_wave], &store, false);
    assert!(matches!(
        &stamp.blocked[0].reason,
        BlockReason::WrongShape {
            found: "digest",
            combine: Combine::Wave,
            ..
        }
    ));
}

#[test]
fn single_output_with_two_inputs_is_blocked() {
    let a = mk_cm("a");
    let b = mk_cm("b");
    let store = mk_store(&[(&a, present("sha256-a")), (&b, present("sha256-b"))]);
    let spec = mk_spec(
        mk_annotation("nudge.dev/checksum-x"),
        Combine::Single,
        vec![mk_input(&a, false), mk_input(&b, false)],
    );
    let stamp = desired(&[spec], &store, false);
    assert_eq!(
        stamp.blocked[0].reason,
        BlockReason::InputCount { count: 2 }
    );
}

// === current ===

#[test]
fn current_reads_the_pod_template_annotation_only() {
    let output = mk_annotation(HASH);
    let on_template = mk_annotated(&[(HASH, "sha256-x")]);
    assert_eq!(current(&on_template, &output).as_deref(), Some("sha256-x"));
    let on_workload = mk_workload(&[], &[(HASH, "sha256-x")], Vec::new(), Vec::new());
    assert_eq!(current(&on_workload, &output), None);
}

#[test]
fn pod_template_and_workload_annotation_must_match() {
    let key = "k8s-consul-mutator.io/checksum-cfg";
    let output = Output::PodTemplateAndWorkloadAnnotation(key.to_owned());
    let both = mk_workload(&[(key, "md5-1")], &[(key, "md5-1")], Vec::new(), Vec::new());
    assert_eq!(current(&both, &output).as_deref(), Some("md5-1"));
    let mismatch = mk_workload(&[(key, "md5-1")], &[(key, "md5-2")], Vec::new(), Vec::new());
    assert_eq!(current(&mismatch, &output), None);
    let template_only = mk_workload(&[(key, "md5-1")], &[], Vec::new(), Vec::new());
    assert_eq!(current(&template_only, &output), None);

    let cfg = Tracked::new(
        Reference::key(SourceName::consul(), "app/cfg"),
        Algorithm::Md5,
    );
    let specs = [mk_spec(
        output.clone(),
        Combine::Single,
        vec![mk_input(&cfg, false)],
    )];
    let store = mk_store(&[(&cfg, present("md5-1"))]);
    let patch = diff(&mismatch, &specs, &desired(&specs, &store, false))
        .expect("a mismatch between the two annotations differs");
    assert_eq!(patch.changed, [output]);
}

#[test]
fn container_env_is_detected_across_containers_and_init_containers() {
    let var = "STAKATER_APP_CONFIGMAP";
    let output = Output::ContainerEnv(var.to_owned());
    let consistent = mk_workload(
        &[],
        &[],
        vec![
            mk_container("app", &[(var, "abc")]),
            mk_container("sidecar", &[("OTHER", "x")]),
        ],
        vec![mk_container("init", &[(var, "abc")])],
    );
    assert_eq!(current(&consistent, &output).as_deref(), Some("abc"));

    let init_differs = mk_workload(
        &[],
        &[],
        vec![mk_container("app", &[(var, "abc")])],
        vec![mk_container("init", &[(var, "old")])],
    );
    assert_eq!(current(&init_differs, &output), None);

    let second_differs = mk_workload(
        &[],
        &[],
        vec![
            mk_container("app", &[(var, "abc")]),
            mk_container("b", &[(var, "old")]),
        ],
        Vec::new(),
    );
    assert_eq!(current(&second_differs, &output), None);

    let nowhere = mk_workload(&[], &[], vec![mk_container("app", &[])], Vec::new());
    assert_eq!(current(&nowhere, &output), None);
}

#[test]
fn container_env_from_a_value_source_is_not_a_value() {
    let var = "STAKATER_DB_SECRET";
    let mut container = mk_container("app", &[]);
    container.env = Some(vec![EnvVar {
        name: var.to_owned(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: "db".to_owned(),
                key: "p".to_owned(),
                ..SecretKeySelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }]);
    let workload = mk_workload(&[], &[], vec![container], Vec::new());
    assert_eq!(
        current(&workload, &Output::ContainerEnv(var.to_owned())),
        None
    );
}

// === diff ===

#[test]
fn no_op_diff_gives_no_patch() {
    let a = mk_cm("a");
    let b = mk_cm("b");
    let store = mk_store(&[(&a, present("sha256-a")), (&b, present("sha256-b"))]);
    let specs = [mk_checksum("a", &a), mk_checksum("b", &b)];
    let stamp = desired(&specs, &store, false);
    let in_sync = mk_annotated(&[
        ("nudge.dev/checksum-a", "sha256-a"),
        ("nudge.dev/checksum-b", "sha256-b"),
    ]);
    assert_eq!(diff(&in_sync, &specs, &stamp), None);

    let one_stale = mk_annotated(&[
        ("nudge.dev/checksum-a", "sha256-a"),
        ("nudge.dev/checksum-b", "sha256-old"),
    ]);
    let patch = diff(&one_stale, &specs, &stamp).expect("b is stale");
    assert_eq!(patch.changed, [mk_annotation("nudge.dev/checksum-b")]);
}

#[test]
fn values_contain_unchanged_and_blocked_with_current_outputs() {
    let changed = mk_cm("changed");
    let unchanged = mk_cm("unchanged");
    let blocked = mk_cm("blocked");
    let blocked_new = mk_cm("blocked-new");
    let store = mk_store(&[
        (&changed, present("sha256-new")),
        (&unchanged, present("sha256-same")),
        (&blocked, Observation::Absent),
    ]);
    let specs = [
        mk_checksum("changed", &changed),
        mk_checksum("unchanged", &unchanged),
        mk_checksum("blocked", &blocked),
        mk_checksum("blocked-new", &blocked_new),
    ];
    let workload = mk_annotated(&[
        ("nudge.dev/checksum-changed", "sha256-old"),
        ("nudge.dev/checksum-unchanged", "sha256-same"),
        ("nudge.dev/checksum-blocked", "sha256-kept"),
        ("unrelated", "x"),
    ]);
    let patch = diff(&workload, &specs, &desired(&specs, &store, false)).expect("one change");
    assert_eq!(patch.id, workload.id);
    assert_eq!(patch.changed, [mk_annotation("nudge.dev/checksum-changed")]);
    let values: Vec<(&str, &str)> = patch
        .values
        .iter()
        .map(|(o, v)| (o.key(), v.as_str()))
        .collect();
    assert_eq!(
        values,
        [
            ("nudge.dev/checksum-blocked", "sha256-kept"),
            ("nudge.dev/checksum-changed", "sha256-new"),
            ("nudge.dev/checksum-unchanged", "sha256-same"),
        ]
    );
}

#[test]
fn blocked_pair_output_keeps_the_pod_template_value() {
    let key = "k8s-consul-mutator.io/checksum-cfg";
    let pair = Output::PodTemplateAndWorkloadAnnotation(key.to_owned());
    let cfg = Tracked::new(
        Reference::key(SourceName::consul(), "app/cfg"),
        Algorithm::Md5,
    );
    let other = mk_cm("other");
    let specs = [
        mk_spec(pair.clone(), Combine::Single, vec![mk_input(&cfg, false)]),
        mk_checksum("other", &other),
    ];
    let store = mk_store(&[(&other, present("sha256-new"))]);
    let workload = mk_workload(
        &[(key, "md5-pod")],
        &[(key, "md5-meta")],
        Vec::new(),
        Vec::new(),
    );
    let patch = diff(&workload, &specs, &desired(&specs, &store, false)).expect("other changed");
    assert_eq!(patch.values.get(&pair).map(String::as_str), Some("md5-pod"));
}

#[test]
fn container_env_output_is_diffed_against_every_carrier() {
    let var = "STAKATER_APP_CONFIGMAP";
    let output = Output::ContainerEnv(var.to_owned());
    let app = mk_tracked(SourceName::configmap(), "app", Algorithm::Reloader);
    let specs = [mk_spec(
        output.clone(),
        Combine::Single,
        vec![mk_input(&app, false)],
    )];
    let stamp = desired(&specs, &mk_store(&[(&app, present("abc"))]), false);
    let in_sync = mk_workload(
        &[],
        &[],
        vec![mk_container("app", &[(var, "abc")])],
        vec![mk_container("init", &[(var, "abc")])],
    );
    assert_eq!(diff(&in_sync, &specs, &stamp), None);
    let init_stale = mk_workload(
        &[],
        &[],
        vec![mk_container("app", &[(var, "abc")])],
        vec![mk_container("init", &[(var, "old")])],
    );
    let patch = diff(&init_stale, &specs, &stamp).expect("init container is stale");
    assert_eq!(patch.values.get(&output).map(String::as_str), Some("abc"));
}

// === CurrentOutputs ===

/// Digests are kept as bytes; every value, digest-like or not, reads back as
/// the same text.
#[test]
fn current_output_values_read_back_exactly() {
    let key = "nudge.dev/checksum-db";
    let output = mk_annotation(key);
    let hex = "0123456789abcdef".repeat(4);
    let values = [
        format!("sha256-{hex}"),
        format!("sha256-{}", hex.to_uppercase()),
        format!("sha256-{}", &hex[1..]),
        format!("sha256-{hex}0"),
        format!("hmac-sha256-{hex}"),
        "sha256-".to_owned(),
        "sha256-db".to_owned(),
        String::new(),
        "é".to_owned(),
    ];
    for value in values {
        let workload = mk_annotated(&[(key, &value)]);
        let kept = CurrentOutputs::new(&workload, [&output]).to_workload();
        assert_eq!(kept.template_annotations().get(key), Some(&value));
    }
}

/// What the engine keeps is all `diff` and the apply body read: for workloads that
/// carry much more than their outputs, both agree with the full workload.
#[test]
fn current_outputs_diff_and_apply_like_the_full_workload() {
    let var = "STAKATER_APP_CONFIGMAP";
    let pair = "k8s-consul-mutator.io/checksum-db";
    let app = mk_tracked(SourceName::configmap(), "app", Algorithm::Reloader);
    let db = mk_cm("db");
    let specs = [
        mk_spec(
            Output::ContainerEnv(var.to_owned()),
            Combine::Single,
            vec![mk_input(&app, false)],
        ),
        mk_spec(
            Output::PodTemplateAndWorkloadAnnotation(pair.to_owned()),
            Combine::Single,
            vec![mk_input(&db, false)],
        ),
        mk_checksum("db", &db),
    ];
    let mut value_from = mk_container("sidecar", &[]);
    value_from.env = Some(vec![EnvVar {
        name: var.to_owned(),
        value_from: Some(EnvVarSource::default()),
        ..EnvVar::default()
    }]);
    let workloads = [
        mk_workload(
            &[
                ("other", "x"),
                ("nudge.dev/checksum-db", "old"),
                (pair, "p"),
            ],
            &[
                ("kubectl.kubernetes.io/last-applied-configuration", "{}"),
                (pair, "q"),
            ],
            vec![
                mk_container("app", &[("PORT", "80"), (var, "abc")]),
                mk_container("plain", &[("PORT", "81")]),
            ],
            vec![mk_container("init", &[(var, "old")])],
        ),
        mk_workload(
            &[],
            &[],
            vec![value_from, mk_container("x", &[])],
            Vec::new(),
        ),
        mk_annotated(&[("nudge.dev/checksum-db", "sha256-db")]),
    ];
    let stores = [
        mk_store(&[(&app, present("abc")), (&db, present("sha256-db"))]),
        mk_store(&[(&app, present("new")), (&db, present("sha256-db2"))]),
        mk_store(&[(&db, Observation::Absent)]),
    ];
    let outputs: Vec<&Output> = specs.iter().map(|s| &s.output).collect();
    let mut patches = 0;
    let scheme = crate::annotations::AnnotationScheme::default();
    for workload in &workloads {
        let kept = CurrentOutputs::new(workload, outputs.iter().copied());
        assert_eq!(kept.id(), &workload.id);
        let rebuilt = kept.to_workload();
        for store in &stores {
            let stamp = desired(&specs, store, false);
            let full = diff(workload, &specs, &stamp);
            assert_eq!(diff(&rebuilt, &specs, &stamp), full);
            if let Some(patch) = full {
                patches += 1;
                assert_eq!(
                    crate::stamp::apply_body(&rebuilt, &patch, &scheme, "now"),
                    crate::stamp::apply_body(workload, &patch, &scheme, "now"),
                );
            }
        }
    }
    assert!(
        patches >= 4,
        "the cases must exercise the apply body: {patches}"
    );
}

// === adoption ===

fn adopted_spec(tracked: &Tracked) -> StampSpec {
    mk_spec(
        Output::Adopted(HASH.to_owned()),
        Combine::Single,
        vec![mk_input(tracked, false)],
    )
}

#[test]
fn an_adopted_output_is_first_written_on_metadata_only() {
    let cm = mk_cm("cfg");
    let specs = [adopted_spec(&cm)];
    let stamp = desired(&specs, &mk_store(&[(&cm, present("sha256-1"))]), false);
    let patch = diff(&mk_annotated(&[]), &specs, &stamp).expect("adopted");
    assert_eq!(patch.changed, [Output::Adopted(HASH.to_owned())]);
    assert_eq!(
        patch.values,
        BTreeMap::from([(
            Output::WorkloadAnnotation(HASH.to_owned()),
            "sha256-1".to_owned()
        )])
    );
    // Adopted and unchanged: nothing to write.
    let adopted = mk_workload(&[], &[(HASH, "sha256-1")], Vec::new(), Vec::new());
    assert_eq!(diff(&adopted, &specs, &stamp), None);
}

#[test]
fn a_change_after_adoption_reaches_the_pod_template() {
    let cm = mk_cm("cfg");
    let specs = [adopted_spec(&cm)];
    let stamp = desired(&specs, &mk_store(&[(&cm, present("sha256-2"))]), false);
    let adopted = mk_workload(&[], &[(HASH, "sha256-1")], Vec::new(), Vec::new());
    let patch = diff(&adopted, &specs, &stamp).expect("changed");
    let both = Output::PodTemplateAndWorkloadAnnotation(HASH.to_owned());
    assert_eq!(
        patch.values,
        BTreeMap::from([(both.clone(), "sha256-2".to_owned())])
    );
    // Once on the template it stays there, like any stamp.
    let rolled = mk_workload(
        &[(HASH, "sha256-2")],
        &[(HASH, "sha256-2")],
        Vec::new(),
        Vec::new(),
    );
    assert_eq!(diff(&rolled, &specs, &stamp), None);
    let stamp = desired(&specs, &mk_store(&[(&cm, present("sha256-3"))]), false);
    let patch = diff(&rolled, &specs, &stamp).expect("changed again");
    assert_eq!(
        patch.values,
        BTreeMap::from([(both, "sha256-3".to_owned())])
    );
}

#[test]
fn a_blocked_adopted_output_keeps_where_it_is() {
    let cm = mk_cm("cfg");
    let other = mk_cm("other");
    let specs = [adopted_spec(&cm), mk_checksum("other", &other)];
    let store = mk_store(&[(&other, present("sha256-9"))]);
    let stamp = desired(&specs, &store, false);
    let adopted = mk_workload(&[], &[(HASH, "sha256-1")], Vec::new(), Vec::new());
    let patch = diff(&adopted, &specs, &stamp).expect("the other output changes");
    assert_eq!(
        patch.values[&Output::WorkloadAnnotation(HASH.to_owned())],
        "sha256-1",
        "still owned, still only on metadata"
    );
}

#[test]
fn a_new_workload_under_admission_gets_an_adopted_output_on_its_template() {
    let cm = mk_cm("cfg");
    let specs = [adopted_spec(&cm)];
    let stamp = desired(&specs, &mk_store(&[(&cm, present("sha256-1"))]), false);
    let incoming = mk_annotated(&[]);
    let created = decide_admission(&incoming, None, &specs, &stamp);
    let both = Output::PodTemplateAndWorkloadAnnotation(HASH.to_owned());
    assert_eq!(
        created.values,
        BTreeMap::from([(both, "sha256-1".to_owned())])
    );
    // An update leaves adoption to the controller, which knows the content it
    // first saw; the webhook would adopt whatever the content is now.
    let updated = decide_admission(&incoming, Some(&incoming), &specs, &stamp);
    assert_eq!(updated.values, BTreeMap::new());
    assert!(!updated.stamp_changed);
    // Once adopted, an update that drops the annotation gets it back.
    let adopted = mk_workload(&[], &[(HASH, "sha256-1")], Vec::new(), Vec::new());
    let reapplied = decide_admission(&incoming, Some(&adopted), &specs, &stamp);
    assert_eq!(
        reapplied.values,
        BTreeMap::from([(
            Output::WorkloadAnnotation(HASH.to_owned()),
            "sha256-1".to_owned()
        )])
    );
    // And a change since the adoption reaches the template in the same request.
    let changed = desired(&specs, &mk_store(&[(&cm, present("sha256-2"))]), false);
    let rolled = decide_admission(&incoming, Some(&adopted), &specs, &changed);
    assert_eq!(
        rolled.values,
        BTreeMap::from([(
            Output::PodTemplateAndWorkloadAnnotation(HASH.to_owned()),
            "sha256-2".to_owned()
        )])
    );
}

#[test]
fn an_output_changed_since_first_sight_is_written_to_the_template_not_adopted() {
    let cm = mk_cm("cfg");
    let specs = [adopted_spec(&cm)];
    let unadopted = mk_annotated(&[]);
    assert!(adopting(&unadopted, &specs));
    let now = desired(&specs, &mk_store(&[(&cm, present("sha256-2"))]), false);
    let adopted = Output::Adopted(HASH.to_owned());
    let first_seen = |value: &str| BTreeMap::from([(adopted.clone(), value.to_owned())]);

    // Seen as it is now: adopted on metadata, no rollout.
    let patch = diff_since(&unadopted, &specs, &now, &first_seen("sha256-2")).unwrap();
    assert_eq!(
        patch.values,
        BTreeMap::from([(
            Output::WorkloadAnnotation(HASH.to_owned()),
            "sha256-2".to_owned()
        )])
    );
    assert!(!changes_pod_template(&unadopted, &patch));

    // Changed since: the new content goes to the template and rolls.
    let patch = diff_since(&unadopted, &specs, &now, &first_seen("sha256-1")).unwrap();
    let both = Output::PodTemplateAndWorkloadAnnotation(HASH.to_owned());
    assert_eq!(
        patch.values,
        BTreeMap::from([(both, "sha256-2".to_owned())])
    );
    assert!(changes_pod_template(&unadopted, &patch));

    // Once adopted, the metadata value is the baseline.
    let done = mk_workload(&[], &[(HASH, "sha256-2")], Vec::new(), Vec::new());
    assert!(!adopting(&done, &specs));
    assert_eq!(
        diff_since(&done, &specs, &now, &first_seen("sha256-1")),
        None
    );
}

// === holds ===

fn gated(workload: &mut Workload, gate: &str) {
    let spec = workload.template.spec.get_or_insert_with(PodSpec::default);
    spec.scheduling_gates = Some(vec![k8s_openapi::api::core::v1::PodSchedulingGate {
        name: gate.to_owned(),
    }]);
}

#[test]
fn the_gate_is_lifted_with_the_stamp_once_the_config_exists() {
    let cm = mk_cm("cfg");
    let gate = Output::SchedulingGate("nudge.dev/awaiting-config".to_owned());
    let specs = [
        mk_spec(
            mk_annotation(HASH),
            Combine::Single,
            vec![mk_input(&cm, false)],
        ),
        mk_spec(gate.clone(), Combine::Release, vec![mk_input(&cm, false)]),
    ];
    let mut workload = mk_annotated(&[]);
    gated(&mut workload, "nudge.dev/awaiting-config");

    let missing = desired(&specs, &mk_store(&[(&cm, Observation::Absent)]), false);
    assert!(
        diff(&workload, &specs, &missing).is_none(),
        "held while missing"
    );

    let present = desired(&specs, &mk_store(&[(&cm, present("sha256-1"))]), false);
    let patch = diff(&workload, &specs, &present).expect("release and stamp");
    assert_eq!(patch.changed, vec![mk_annotation(HASH), gate.clone()]);
    assert_eq!(
        patch.releases,
        vec![Release::SchedulingGate(
            "nudge.dev/awaiting-config".to_owned()
        )]
    );
    assert!(!patch.values.contains_key(&gate), "a hold is never a value");
    assert!(changes_pod_template(&workload, &patch));

    // Once lifted (by nudge or by hand) nothing more is asked for.
    let mut lifted = mk_annotated(&[(HASH, "sha256-1")]);
    lifted.template.spec.as_mut().unwrap().scheduling_gates = Some(Vec::new());
    assert!(diff(&lifted, &specs, &present).is_none());
    let current = CurrentOutputs::new(&workload, specs.iter().map(|s| &s.output));
    assert_eq!(diff(&current.to_workload(), &specs, &present), Some(patch));
}

#[test]
fn waves_scheduler_is_restored_once_the_config_exists() {
    let cm = mk_cm("cfg");
    let specs = [mk_spec(
        Output::WaveSchedulingDisabled,
        Combine::Release,
        vec![mk_input(&cm, false)],
    )];
    let held = mk_workload(
        &[],
        &[("wave.pusher.com/scheduling-disabled", "custom-scheduler")],
        Vec::new(),
        Vec::new(),
    );
    let missing = desired(&specs, &mk_store(&[(&cm, Observation::Absent)]), false);
    assert!(diff(&held, &specs, &missing).is_none());
    let present = desired(&specs, &mk_store(&[(&cm, present("sha256-1"))]), false);
    let patch = diff(&held, &specs, &present).expect("restore");
    assert_eq!(
        patch.releases,
        vec![Release::WaveScheduler {
            scheduler_name: "custom-scheduler".to_owned()
        }]
    );
    let current = CurrentOutputs::new(&held, specs.iter().map(|s| &s.output));
    assert_eq!(diff(&current.to_workload(), &specs, &present), Some(patch));
}

// === restart ===

fn restart_spec(tracked: &Tracked) -> StampSpec {
    mk_spec(
        Output::RestartAt(HASH.to_owned()),
        Combine::NativeHash,
        vec![mk_input(tracked, false)],
    )
}

fn restart_state(value: &str) -> Workload {
    mk_workload(&[], &[(HASH, value)], Vec::new(), Vec::new())
}

#[test]
fn a_restart_output_is_adopted_on_metadata_and_never_touches_the_template() {
    let cm = mk_cm("cfg");
    let specs = [restart_spec(&cm)];
    let output = Output::RestartAt(HASH.to_owned());
    let now = desired(&specs, &mk_store(&[(&cm, present("sha256-2"))]), false);
    let want = now.values[&output].clone();
    let unadopted = mk_annotated(&[]);
    assert!(adopting(&unadopted, &specs));

    // Seen as it is now: the fingerprint goes on metadata, nothing restarts.
    let first_seen = BTreeMap::from([(output.clone(), want.clone())]);
    let patch = diff_since(&unadopted, &specs, &now, &first_seen).unwrap();
    assert_eq!(patch.changed, std::slice::from_ref(&output));
    assert_eq!(
        patch.values,
        BTreeMap::from([(Output::WorkloadAnnotation(HASH.to_owned()), want.clone())])
    );
    assert!(!changes_pod_template(&unadopted, &patch));

    // Changed while nudge was watching: restarted, still without the template.
    let first_seen = BTreeMap::from([(output.clone(), "sha256-older".to_owned())]);
    let patch = diff_since(&unadopted, &specs, &now, &first_seen).unwrap();
    assert_eq!(
        patch.values,
        BTreeMap::from([
            (Output::WorkloadAnnotation(HASH.to_owned()), want.clone()),
            (output.clone(), want.clone()),
        ])
    );
    assert!(changes_pod_template(&unadopted, &patch), "a restart rolls");

    // Adopted: in sync, also for a fresh process with no first sight.
    let adopted = restart_state(&want);
    assert!(!adopting(&adopted, &specs));
    assert_eq!(diff(&adopted, &specs, &now), None);
}

#[test]
fn a_changed_fingerprint_restarts_once() {
    let cm = mk_cm("cfg");
    let specs = [restart_spec(&cm)];
    let output = Output::RestartAt(HASH.to_owned());
    let before = desired(&specs, &mk_store(&[(&cm, present("sha256-1"))]), false);
    let after = desired(&specs, &mk_store(&[(&cm, present("sha256-2"))]), false);
    let stamped = restart_state(&before.values[&output]);
    let patch = diff(&stamped, &specs, &after).expect("changed");
    let want = after.values[&output].clone();
    assert_eq!(patch.changed, std::slice::from_ref(&output));
    assert_eq!(
        patch.values,
        BTreeMap::from([
            (Output::WorkloadAnnotation(HASH.to_owned()), want.clone()),
            (output.clone(), want.clone()),
        ])
    );
    assert!(changes_pod_template(&stamped, &patch));
    assert_eq!(
        current(&stamped, &output).as_deref(),
        Some(before.values[&output].as_str()),
        "the value before, for the revision"
    );
    // Written: the same content restarts nothing more.
    assert_eq!(diff(&restart_state(&want), &specs, &after), None);
    let kept = CurrentOutputs::new(&restart_state(&want), specs.iter().map(|s| &s.output));
    assert_eq!(diff(&kept.to_workload(), &specs, &after), None);
}

#[test]
fn a_blocked_restart_output_keeps_its_state_and_restarts_nothing() {
    let cm = mk_cm("cfg");
    let other = mk_cm("other");
    let specs = [restart_spec(&cm), mk_checksum("other", &other)];
    let stamp = desired(&specs, &mk_store(&[(&other, present("sha256-9"))]), false);
    let stamped = restart_state("sha256-1");
    let patch = diff(&stamped, &specs, &stamp).expect("the other output changes");
    assert_eq!(
        patch.values[&Output::WorkloadAnnotation(HASH.to_owned())],
        "sha256-1"
    );
    assert!(
        !patch
            .values
            .contains_key(&Output::RestartAt(HASH.to_owned()))
    );
}

#[test]
fn under_admission_a_restart_output_is_kept_on_metadata() {
    let cm = mk_cm("cfg");
    let specs = [restart_spec(&cm)];
    let output = Output::RestartAt(HASH.to_owned());
    let stamp = desired(&specs, &mk_store(&[(&cm, present("sha256-1"))]), false);
    let want = stamp.values[&output].clone();
    let state = Output::WorkloadAnnotation(HASH.to_owned());
    let incoming = mk_annotated(&[]);
    // A new Rollout's pods start with the content: the state, no restart.
    let created = decide_admission(&incoming, None, &specs, &stamp);
    assert_eq!(
        created.values,
        BTreeMap::from([(state.clone(), want.clone())])
    );
    // An update leaves adoption to the controller.
    let updated = decide_admission(&incoming, Some(&incoming), &specs, &stamp);
    assert_eq!(updated.values, BTreeMap::new());
    // A re-apply that drops the state gets it back, restarting nothing.
    let adopted = restart_state(&want);
    let reapplied = decide_admission(&incoming, Some(&adopted), &specs, &stamp);
    assert_eq!(reapplied.values, BTreeMap::from([(state, want)]));
    assert!(!reapplied.stamp_changed);
}

#[test]
fn the_restart_time_is_whole_seconds_as_argo_rollouts_keeps_it() {
    assert_eq!(
        restart_time("2026-11-22T05:00:00.123456789Z"),
        "2026-11-22T05:00:00Z"
    );
    assert_eq!(restart_time("2026-11-22T05:00:07Z"), "2026-11-22T05:00:07Z");
    assert_eq!(restart_time("T"), "T");
}
