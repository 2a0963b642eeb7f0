use serde_json::json;

use super::*;
use crate::model::{Combine, StampSpec, Workload};
use crate::stamp::{DesiredStamp, decide_admission};

const HASH: &str = "nudge.dev/config-hash";
const LAST: &str = "nudge.dev/last-updated";
const NOW: &str = "2026-11-22T05:00:00Z";

fn mk_spec(output: Output) -> StampSpec {
    StampSpec {
        output,
        combine: Combine::Single,
        inputs: Vec::new(),
        origins: Vec::new(),
    }
}

fn hash_output() -> Output {
    Output::PodTemplateAnnotation(HASH.into())
}

fn mk_desired(values: &[(Output, &str)]) -> DesiredStamp {
    DesiredStamp {
        values: values
            .iter()
            .map(|(o, v)| (o.clone(), (*v).to_owned()))
            .collect(),
        ..DesiredStamp::default()
    }
}

/// A Deployment with the given pod-template metadata (`None`: no metadata at all).
fn mk_deployment(template_metadata: Option<Value>) -> Value {
    let mut template = json!({"spec": {"containers": [{"name": "app", "image": "x"}]}});
    if let Some(m) = template_metadata {
        template["metadata"] = m;
    }
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {"template": template},
    })
}

fn patch_for(
    object: &Value,
    old: Option<&Value>,
    specs: &[StampSpec],
    desired: &DesiredStamp,
) -> Vec<Value> {
    let kind = WorkloadKind::deployment();
    let parse = |o: &Value| Workload::from_object(&kind, o.clone()).ok();
    let Some(incoming) = parse(object) else {
        return Vec::new();
    };
    let stored = old.and_then(parse);
    let decision = decide_admission(&incoming, stored.as_ref(), specs, desired);
    let patch = admission_patch(
        object,
        old,
        &kind,
        &decision,
        &AnnotationScheme::default(),
        NOW,
    );
    patch
        .0
        .iter()
        .map(|op| serde_json::to_value(op).unwrap())
        .collect()
}

fn op(kind: &str, path: &str, value: impl Into<Value>) -> Value {
    json!({"op": kind, "path": path, "value": value.into()})
}

/// Applies `ops` with an RFC 6902 implementation; panics when it would fail (the
/// apiserver would answer 500).
fn apply(object: &Value, ops: &[Value]) -> Value {
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(ops.to_vec())).expect("ops are RFC 6902");
    let mut doc = object.clone();
    json_patch::patch(&mut doc, &patch).expect("patch applies");
    doc
}

#[test]
fn missing_annotations_map_is_added_whole_never_into() {
    let object = mk_deployment(Some(json!({"labels": {"app": "web"}})));
    let specs = [mk_spec(hash_output())];
    let ops = patch_for(
        &object,
        None,
        &specs,
        &mk_desired(&[(hash_output(), "sha256-1")]),
    );
    assert_eq!(
        ops[0],
        op(
            "add",
            "/spec/template/metadata/annotations",
            json!({HASH: "sha256-1"})
        )
    );
    let patched = apply(&object, &ops);
    assert_eq!(
        patched["spec"]["template"]["metadata"]["annotations"][HASH],
        "sha256-1"
    );
}

#[test]
fn transcript_create_gets_the_patch_the_apiserver_accepted() {
    // The object of `webhook_received[1]` in admission_review.json: no annotations.
    let object = mk_deployment(Some(json!({"labels": {"app": "hooked"}})));
    let specs = [mk_spec(hash_output())];
    let ops = patch_for(
        &object,
        None,
        &specs,
        &mk_desired(&[(hash_output(), "sha256-from-webhook")]),
    );
    let template_op = ops[0].clone();
    assert_eq!(
        template_op,
        json!({"op": "add", "path": "/spec/template/metadata/annotations",
               "value": {"nudge.dev/config-hash": "sha256-from-webhook"}})
    );
}

#[test]
fn missing_template_metadata_is_added_with_the_annotations_inside() {
    let object = mk_deployment(None);
    let specs = [mk_spec(hash_output())];
    let ops = patch_for(&object, None, &specs, &mk_desired(&[(hash_output(), "v")]));
    assert_eq!(ops[0]["path"], "/spec/template/metadata");
    assert_eq!(ops[0]["value"], json!({"annotations": {HASH: "v"}}));
    apply(&object, &ops);
}

#[test]
fn null_annotations_map_is_replaced_whole() {
    let object = mk_deployment(Some(json!({"annotations": null})));
    let specs = [mk_spec(hash_output())];
    let ops = patch_for(&object, None, &specs, &mk_desired(&[(hash_output(), "v")]));
    assert_eq!(ops[0]["path"], "/spec/template/metadata/annotations");
    let patched = apply(&object, &ops);
    assert_eq!(
        patched["spec"]["template"]["metadata"]["annotations"][HASH],
        "v"
    );
}

#[test]
fn existing_map_gets_one_escaped_add_per_key() {
    let object = mk_deployment(Some(json!({"annotations": {"other": "x"}})));
    let key = "nudge.dev/checksum-a~b";
    let output = Output::PodTemplateAnnotation(key.into());
    let specs = [mk_spec(output.clone())];
    let ops = patch_for(&object, None, &specs, &mk_desired(&[(output, "v")]));
    assert_eq!(ops[0]["op"], "add");
    assert_eq!(
        ops[0]["path"],
        "/spec/template/metadata/annotations/nudge.dev~1checksum-a~0b"
    );
    let patched = apply(&object, &ops);
    assert_eq!(
        patched["spec"]["template"]["metadata"]["annotations"][key],
        "v"
    );
    assert_eq!(
        patched["spec"]["template"]["metadata"]["annotations"]["other"],
        "x"
    );
}

#[test]
fn different_value_is_replaced_and_last_updated_set() {
    let object = mk_deployment(Some(json!({"annotations": {HASH: "old"}})));
    let specs = [mk_spec(hash_output())];
    let ops = patch_for(
        &object,
        None,
        &specs,
        &mk_desired(&[(hash_output(), "new")]),
    );
    assert!(ops.contains(&op(
        "replace",
        "/spec/template/metadata/annotations/nudge.dev~1config-hash",
        "new"
    )));
    let patched = apply(&object, &ops);
    assert_eq!(patched["metadata"]["annotations"][LAST], NOW);
}

#[test]
fn object_already_stamped_gets_an_empty_patch() {
    let object = mk_deployment(Some(json!({"annotations": {HASH: "v"}})));
    let specs = [mk_spec(hash_output())];
    let ops = patch_for(&object, None, &specs, &mk_desired(&[(hash_output(), "v")]));
    assert!(ops.is_empty(), "{ops:?}");
}

#[test]
fn no_specs_no_patch() {
    let object = mk_deployment(None);
    assert!(patch_for(&object, None, &[], &DesiredStamp::default()).is_empty());
}

#[test]
fn blocked_output_keeps_the_incoming_value() {
    let object = mk_deployment(Some(json!({"annotations": {HASH: "mine"}})));
    let old = mk_deployment(Some(json!({"annotations": {HASH: "stored"}})));
    let specs = [mk_spec(hash_output())];
    let ops = patch_for(&object, Some(&old), &specs, &DesiredStamp::default());
    assert!(ops.is_empty(), "{ops:?}");
}

#[test]
fn blocked_output_on_create_without_value_gets_nothing() {
    let object = mk_deployment(Some(json!({"labels": {"app": "web"}})));
    let specs = [mk_spec(hash_output())];
    assert!(patch_for(&object, None, &specs, &DesiredStamp::default()).is_empty());
}

#[test]
fn reapply_dropping_a_blocked_stamp_restores_it_from_the_old_object() {
    let object = mk_deployment(Some(json!({"labels": {"app": "web"}})));
    let mut old = mk_deployment(Some(
        json!({"labels": {"app": "web"}, "annotations": {HASH: "stored"}}),
    ));
    old["metadata"]["annotations"] = json!({LAST: "2026-01-01T00:00:00Z"});
    let specs = [mk_spec(hash_output())];
    let ops = patch_for(&object, Some(&old), &specs, &DesiredStamp::default());
    let patched = apply(&object, &ops);
    assert_eq!(
        patched["spec"]["template"]["metadata"]["annotations"][HASH],
        "stored"
    );
    assert_eq!(
        patched["metadata"]["annotations"][LAST], "2026-01-01T00:00:00Z",
        "unchanged stamp: last-updated restored, not bumped"
    );
}

#[test]
fn reapply_dropping_the_current_stamp_restores_it_without_bumping_last_updated() {
    let object = mk_deployment(Some(json!({"labels": {"app": "web"}})));
    let old = mk_deployment(Some(json!({"annotations": {HASH: "v"}})));
    let specs = [mk_spec(hash_output())];
    let ops = patch_for(
        &object,
        Some(&old),
        &specs,
        &mk_desired(&[(hash_output(), "v")]),
    );
    assert_eq!(ops.len(), 1, "{ops:?}");
    let patched = apply(&object, &ops);
    assert_eq!(
        patched["spec"]["template"]["metadata"]["annotations"][HASH],
        "v"
    );
    assert!(patched["metadata"].get("annotations").is_none());
}

#[test]
fn update_to_a_new_value_bumps_last_updated() {
    let object = mk_deployment(None);
    let old = mk_deployment(Some(json!({"annotations": {HASH: "v1"}})));
    let specs = [mk_spec(hash_output())];
    let ops = patch_for(
        &object,
        Some(&old),
        &specs,
        &mk_desired(&[(hash_output(), "v2")]),
    );
    let patched = apply(&object, &ops);
    assert_eq!(
        patched["spec"]["template"]["metadata"]["annotations"][HASH],
        "v2"
    );
    assert_eq!(patched["metadata"]["annotations"][LAST], NOW);
}

#[test]
fn consul_mutator_checksum_goes_on_template_and_workload_with_its_last_updated() {
    let key = "k8s-consul-mutator.io/checksum-db";
    let output = Output::PodTemplateAndWorkloadAnnotation(key.into());
    let mut object = mk_deployment(Some(json!({"labels": {"app": "web"}})));
    object["metadata"]["annotations"] = json!({"k8s-consul-mutator.io/key-db": "app/db"});
    let specs = [mk_spec(output.clone())];
    let ops = patch_for(&object, None, &specs, &mk_desired(&[(output, "md5-1")]));
    let patched = apply(&object, &ops);
    assert_eq!(
        patched["spec"]["template"]["metadata"]["annotations"][key],
        "md5-1"
    );
    assert_eq!(patched["metadata"]["annotations"][key], "md5-1");
    assert_eq!(
        patched["metadata"]["annotations"]["k8s-consul-mutator.io/last-updated"],
        NOW
    );
    assert_eq!(
        patched["metadata"]["annotations"]["k8s-consul-mutator.io/key-db"],
        "app/db"
    );
}

#[test]
fn blocked_consul_mutator_checksum_is_restored_in_both_places() {
    let key = "k8s-consul-mutator.io/checksum-db";
    let output = Output::PodTemplateAndWorkloadAnnotation(key.into());
    let object = mk_deployment(None);
    let mut old = mk_deployment(Some(json!({"annotations": {key: "md5-1"}})));
    old["metadata"]["annotations"] = json!({key: "md5-1"});
    let specs = [mk_spec(output)];
    let ops = patch_for(&object, Some(&old), &specs, &DesiredStamp::default());
    let patched = apply(&object, &ops);
    assert_eq!(
        patched["spec"]["template"]["metadata"]["annotations"][key],
        "md5-1"
    );
    assert_eq!(patched["metadata"]["annotations"][key], "md5-1");
}

#[test]
fn reloader_env_var_is_updated_in_place_in_containers_and_init_containers() {
    let var = "STAKATER_APP_CONFIG_CONFIGMAP";
    let output = Output::ContainerEnv(var.into());
    let mut object = mk_deployment(Some(json!({"labels": {"app": "web"}})));
    object["spec"]["template"]["spec"] = json!({
        "containers": [
            {"name": "app", "env": [{"name": "A", "value": "1"}, {"name": var, "value": "old"}]},
            {"name": "side", "env": [{"name": var, "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]},
        ],
        "initContainers": [{"name": "init", "env": [{"name": var}]}],
    });
    let specs = [mk_spec(output.clone())];
    let ops = patch_for(&object, None, &specs, &mk_desired(&[(output, "new")]));
    let patched = apply(&object, &ops);
    let spec = &patched["spec"]["template"]["spec"];
    assert_eq!(spec["containers"][0]["env"][1]["value"], "new");
    assert_eq!(spec["containers"][0]["env"][0]["value"], "1");
    assert!(spec["containers"][1]["env"][0].get("value").is_none());
    assert_eq!(spec["initContainers"][0]["env"][0]["value"], "new");
    assert_eq!(patched["metadata"]["annotations"][LAST], NOW);
}

#[test]
fn several_outputs_share_one_whole_map_add() {
    let a = Output::PodTemplateAnnotation("nudge.dev/checksum-a".into());
    let wave = Output::PodTemplateAnnotation("wave.pusher.com/config-hash".into());
    let object = mk_deployment(Some(json!({})));
    let specs = [
        mk_spec(a.clone()),
        mk_spec(wave.clone()),
        mk_spec(a.clone()),
    ];
    let ops = patch_for(&object, None, &specs, &mk_desired(&[(a, "1"), (wave, "2")]));
    let template_ops: Vec<_> = ops
        .iter()
        .filter(|o| o["path"].as_str().unwrap().starts_with("/spec/"))
        .collect();
    assert_eq!(template_ops.len(), 1);
    assert_eq!(
        template_ops[0]["value"],
        json!({"nudge.dev/checksum-a": "1", "wave.pusher.com/config-hash": "2"})
    );
}

#[test]
fn malformed_shapes_never_panic_and_patches_always_apply() {
    let specs = [
        mk_spec(hash_output()),
        mk_spec(Output::PodTemplateAndWorkloadAnnotation(
            "k8s-consul-mutator.io/checksum-x".into(),
        )),
        mk_spec(Output::ContainerEnv("STAKATER_X_SECRET".into())),
    ];
    let desired = mk_desired(&[
        (specs[0].output.clone(), "1"),
        (specs[1].output.clone(), "2"),
        (specs[2].output.clone(), "3"),
    ]);
    let shapes = [
        json!(null),
        json!([]),
        json!("x"),
        json!({}),
        json!({"metadata": "x"}),
        json!({"metadata": null, "spec": null}),
        json!({"spec": {"template": "x"}}),
        json!({"spec": {"template": {"metadata": {"annotations": "x"}}}}),
        json!({"spec": {"template": {"metadata": {"annotations": {HASH: 7}}}}}),
        json!({"spec": {"template": {"spec": {"containers": "x", "initContainers": [1, {"env": "x"}, {"env": [null, {"name": 1}]}]}}}}),
        mk_deployment(Some(json!({"annotations": {}}))),
    ];
    for object in &shapes {
        for old in [None, Some(&shapes[8])] {
            let ops = patch_for(object, old, &specs, &desired);
            if object.is_object() {
                apply(object, &ops);
            } else {
                assert!(ops.is_empty());
            }
        }
    }
}

#[test]
fn last_updated_set_by_the_request_itself_is_kept() {
    let mut object = mk_deployment(Some(json!({"annotations": {HASH: "v2"}})));
    object["metadata"]["annotations"] = json!({LAST: "controller-time"});
    let mut old = mk_deployment(Some(json!({"annotations": {HASH: "v1"}})));
    old["metadata"]["annotations"] = json!({LAST: "earlier"});
    let specs = [mk_spec(hash_output())];
    let ops = patch_for(
        &object,
        Some(&old),
        &specs,
        &mk_desired(&[(hash_output(), "v2")]),
    );
    assert!(ops.is_empty(), "{ops:?}");
}

// --- holds ---

const GATE: &str = "nudge.dev/awaiting-config";

fn gate_specs() -> Vec<StampSpec> {
    vec![
        mk_spec(hash_output()),
        StampSpec {
            combine: Combine::Release,
            ..mk_spec(Output::SchedulingGate(GATE.into()))
        },
    ]
}

/// What the webhook decides when the config is missing: both outputs blocked.
fn missing_config(specs: &[StampSpec]) -> DesiredStamp {
    let reference =
        crate::model::Reference::object(crate::model::SourceName::configmap(), "ns", "cfg");
    DesiredStamp {
        blocked: specs
            .iter()
            .map(|spec| crate::stamp::Blocked {
                output: spec.output.clone(),
                reason: crate::stamp::BlockReason::Missing {
                    reference: reference.clone(),
                },
            })
            .collect(),
        ..DesiredStamp::default()
    }
}

fn gates_of(object: &Value) -> Vec<&str> {
    object["spec"]["template"]["spec"]["schedulingGates"]
        .as_array()
        .map(|gates| gates.iter().filter_map(|g| g["name"].as_str()).collect())
        .unwrap_or_default()
}

#[test]
fn a_new_workload_with_missing_config_gets_the_gate_and_an_update_never_does() {
    let object = mk_deployment(None);
    let specs = gate_specs();
    let desired = missing_config(&specs);
    let created = apply(&object, &patch_for(&object, None, &specs, &desired));
    assert_eq!(gates_of(&created), vec![GATE]);
    assert!(
        created["spec"]["template"]["metadata"].is_null(),
        "no stamp while missing"
    );

    let mut user_gated = mk_deployment(None);
    user_gated["spec"]["template"]["spec"]["schedulingGates"] = json!([{"name": "team/own"}]);
    let created = apply(&user_gated, &patch_for(&user_gated, None, &specs, &desired));
    assert_eq!(
        gates_of(&created),
        vec!["team/own", GATE],
        "theirs kept, ours appended"
    );
    let again = patch_for(&created, None, &specs, &desired);
    assert!(
        again
            .iter()
            .all(|op| !op["path"].as_str().unwrap().contains("schedulingGates"))
    );

    let updated = patch_for(&object, Some(&object), &specs, &desired);
    assert!(
        updated.is_empty(),
        "a running workload is never gated: {updated:?}"
    );
}

#[test]
fn releases_lift_only_what_is_there_and_patches_apply() {
    let kind = WorkloadKind::deployment();
    let mut object = mk_deployment(None);
    object["metadata"]["annotations"] =
        json!({"wave.pusher.com/scheduling-disabled": "default-scheduler"});
    object["spec"]["template"]["spec"]["schedulerName"] = json!("wave.pusher.com/invalid");
    object["spec"]["template"]["spec"]["schedulingGates"] =
        json!([{"name": GATE}, {"name": "team/own"}, {"name": "x/other"}]);
    let releases = [
        crate::stamp::Release::SchedulingGate(GATE.into()),
        crate::stamp::Release::SchedulingGate("x/other".into()),
        crate::stamp::Release::SchedulingGate("never/there".into()),
        crate::stamp::Release::WaveScheduler {
            scheduler_name: "default-scheduler".into(),
        },
    ];
    let ops: Vec<Value> = release_ops(&object, &kind, &releases)
        .iter()
        .map(|op| serde_json::to_value(op).unwrap())
        .collect();
    let released = apply(&object, &ops);
    assert_eq!(gates_of(&released), vec!["team/own"]);
    assert_eq!(
        released["spec"]["template"]["spec"]["schedulerName"],
        "default-scheduler"
    );
    assert!(
        released["metadata"]["annotations"]
            .get("wave.pusher.com/scheduling-disabled")
            .is_none()
    );
    assert!(
        release_ops(&released, &kind, &releases[..3]).is_empty(),
        "already lifted"
    );
}

#[test]
fn a_restart_sets_spec_restart_at_and_leaves_the_template_alone() {
    let output = Output::RestartAt(HASH.into());
    let state = Output::WorkloadAnnotation(HASH.into());
    let object = mk_deployment(Some(json!({"labels": {"app": "web"}})));
    let decision = AdmissionDecision {
        values: [
            (state, "sha256-2".to_owned()),
            (output.clone(), "sha256-2".to_owned()),
        ]
        .into_iter()
        .collect(),
        outputs: vec![output],
        stamp_changed: true,
        gates: Vec::new(),
    };
    let now = "2026-11-22T05:00:00.5Z";
    let kind = WorkloadKind::deployment();
    let scheme = AnnotationScheme::default();
    let patch = admission_patch(&object, None, &kind, &decision, &scheme, now);
    let ops: Vec<Value> = patch
        .0
        .iter()
        .map(|op| serde_json::to_value(op).unwrap())
        .collect();
    let patched = apply(&object, &ops);
    assert_eq!(patched["spec"]["restartAt"], "2026-11-22T05:00:00Z");
    assert_eq!(patched["metadata"]["annotations"][HASH], "sha256-2");
    assert_eq!(patched["spec"]["template"], object["spec"]["template"]);
    // Without a spec to hold it, no operation (and none that would fail).
    let bare = json!({"metadata": {"name": "web"}});
    let patch = admission_patch(&bare, None, &kind, &decision, &scheme, now);
    let ops: Vec<Value> = patch
        .0
        .iter()
        .map(|op| serde_json::to_value(op).unwrap())
        .collect();
    assert!(apply(&bare, &ops).get("spec").is_none());
}
