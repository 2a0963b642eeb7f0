use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::model::{Output, TemplatePath, WorkloadId};

const MANAGER: &str = "nudge";
const CHECKSUM_A: &str = "nudge.dev/checksum-a";
const CHECKSUM_B: &str = "nudge.dev/checksum-b";
const ENV_A: &str = "STAKATER_A_CONFIGMAP";
const ENV_B: &str = "STAKATER_B_CONFIGMAP";

fn rollout_kind() -> WorkloadKind {
    WorkloadKind::new(
        "argoproj.io",
        "v1alpha1",
        "Rollout",
        TemplatePath::parse("spec.template").unwrap(),
    )
}

/// A patch writing `values` on the Rollout.
fn mk_patch(values: &[(Output, &str)]) -> StampPatch {
    StampPatch {
        id: WorkloadId::new(rollout_kind(), "ns", "web"),
        changed: values.iter().map(|(output, _)| output.clone()).collect(),
        values: values
            .iter()
            .map(|(output, value)| (output.clone(), (*value).to_owned()))
            .collect(),
        releases: Vec::new(),
    }
}

fn template(key: &str) -> Output {
    Output::PodTemplateAnnotation(key.to_owned())
}

/// A `managedFields` entry.
fn mk_entry(manager: &str, operation: &str, fields: serde_json::Value) -> serde_json::Value {
    json!({ "manager": manager, "operation": operation, "apiVersion": "argoproj.io/v1alpha1",
            "fieldsType": "FieldsV1", "fieldsV1": fields })
}

/// fieldsV1 owning these workload and pod-template annotations.
fn annotation_fields(own: &[&str], template: &[&str]) -> serde_json::Value {
    let keys = |keys: &[&str]| -> serde_json::Value {
        keys.iter()
            .map(|key| (format!("f:{key}"), json!({})))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    json!({
        "f:metadata": { "f:annotations": keys(own) },
        "f:spec": { "f:template": { "f:metadata": { "f:annotations": keys(template) } } },
    })
}

/// fieldsV1 owning the values of `vars` in container `app`, keyed by name.
fn env_value_fields(vars: &[&str]) -> serde_json::Value {
    let env: serde_json::Map<String, serde_json::Value> = vars
        .iter()
        .map(|var| {
            (
                format!("k:{{\"name\":\"{var}\"}}"),
                json!({ "f:value": {} }),
            )
        })
        .collect();
    json!({ "f:spec": { "f:template": { "f:spec": { "f:containers": {
        "k:{\"name\":\"app\"}": { "f:env": env },
    } } } } })
}

/// A Rollout carrying `own` and `template` annotations, container `app` with
/// `env`, and `managed` as its `managedFields`.
fn mk_object(
    own: &[(&str, &str)],
    template: &[(&str, &str)],
    env: &[(&str, &str)],
    managed: Vec<serde_json::Value>,
) -> serde_json::Value {
    let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let env: Vec<serde_json::Value> = env
        .iter()
        .map(|(name, value)| json!({ "name": name, "value": value }))
        .collect();
    json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
        "metadata": { "name": "web", "namespace": "ns", "annotations": map(own),
                      "managedFields": managed },
        "spec": { "template": {
            "metadata": { "annotations": map(template) },
            "spec": { "containers": [
                { "name": "sidecar", "image": "busybox" },
                { "name": "app", "image": "busybox", "env": env },
            ] },
        } },
    })
}

fn ops_of(object: &serde_json::Value, patch: &StampPatch) -> serde_json::Value {
    let ops = given_up_ops(
        object,
        &rollout_kind(),
        patch,
        MANAGER,
        &AnnotationScheme::default(),
    );
    serde_json::to_value(ops).unwrap()
}

#[test]
fn annotations_nudge_wrote_and_no_longer_writes_are_removed() {
    let object = mk_object(
        &[
            ("nudge.dev/last-updated", "T"),
            (CHECKSUM_B, "sha256-b"),
            ("nudge.dev/rollout", "{}"),
            ("nudge.dev/history", "[]"),
        ],
        &[(CHECKSUM_A, "sha256-a"), (CHECKSUM_B, "sha256-b")],
        &[],
        vec![
            mk_entry("kubectl", "Update", json!({ "f:spec": {} })),
            mk_entry(
                MANAGER,
                "Update",
                annotation_fields(
                    &[
                        "nudge.dev/last-updated",
                        CHECKSUM_B,
                        "nudge.dev/rollout",
                        "nudge.dev/history",
                    ],
                    &[CHECKSUM_A, CHECKSUM_B],
                ),
            ),
        ],
    );
    let patch = mk_patch(&[(template(CHECKSUM_A), "sha256-a2")]);
    assert_eq!(
        ops_of(&object, &patch),
        json!([
            { "op": "remove", "path": "/metadata/annotations/nudge.dev~1checksum-b" },
            { "op": "remove", "path": "/spec/template/metadata/annotations/nudge.dev~1checksum-b" },
        ]),
        "last-updated goes with every write; the rollout in flight and the history are not outputs"
    );
}

#[test]
fn what_nudge_applied_counts_as_what_it_wrote() {
    let object = mk_object(
        &[],
        &[(CHECKSUM_B, "sha256-b")],
        &[],
        vec![mk_entry(
            MANAGER,
            "Apply",
            annotation_fields(&[], &[CHECKSUM_B]),
        )],
    );
    let patch = mk_patch(&[(template(CHECKSUM_A), "sha256-a")]);
    assert_eq!(
        ops_of(&object, &patch),
        json!([{ "op": "remove", "path": "/spec/template/metadata/annotations/nudge.dev~1checksum-b" }])
    );
}

#[test]
fn a_value_someone_else_owns_too_or_wrote_is_never_removed() {
    let object = mk_object(
        &[],
        &[(CHECKSUM_B, "sha256-b"), ("team", "web")],
        &[],
        vec![
            // Applied by nudge and by the user's own apply alike.
            mk_entry(MANAGER, "Apply", annotation_fields(&[], &[CHECKSUM_B])),
            mk_entry("argocd", "Apply", annotation_fields(&[], &[CHECKSUM_B])),
            // Written by the user, never by nudge.
            mk_entry("kubectl", "Update", annotation_fields(&[], &["team"])),
            // nudge's name on a subresource is not its main-resource write.
            json!({ "manager": MANAGER, "operation": "Update", "subresource": "status",
                    "fieldsType": "FieldsV1", "fieldsV1": annotation_fields(&[], &["team"]) }),
        ],
    );
    let patch = mk_patch(&[(template(CHECKSUM_A), "sha256-a")]);
    assert_eq!(ops_of(&object, &patch), json!([]));
}

#[test]
fn env_values_nudge_wrote_and_no_longer_writes_lose_their_value_only() {
    let object = mk_object(
        &[],
        &[],
        &[("LOG_LEVEL", "debug"), (ENV_A, "hash-a"), (ENV_B, "hash-b")],
        vec![
            mk_entry("kubectl", "Update", json!({ "f:spec": {} })),
            mk_entry(MANAGER, "Update", env_value_fields(&[ENV_A, ENV_B])),
        ],
    );
    let patch = mk_patch(&[(Output::ContainerEnv(ENV_A.to_owned()), "hash-a2")]);
    assert_eq!(
        ops_of(&object, &patch),
        json!([{ "op": "remove", "path": "/spec/template/spec/containers/1/env/2/value" }])
    );
}

#[test]
fn env_values_in_an_atomic_container_list_are_left_alone() {
    let atomic = json!({ "f:spec": { "f:template": { "f:spec": { "f:containers": {} } } } });
    let object = mk_object(
        &[],
        &[],
        &[(ENV_B, "hash-b")],
        vec![mk_entry(MANAGER, "Update", atomic)],
    );
    let patch = mk_patch(&[(template(CHECKSUM_A), "sha256-a")]);
    assert_eq!(ops_of(&object, &patch), json!([]));
}

#[test]
fn what_is_already_gone_or_malformed_yields_nothing() {
    let owned = mk_entry(
        MANAGER,
        "Update",
        annotation_fields(&[CHECKSUM_B], &[CHECKSUM_B]),
    );
    let patch = mk_patch(&[(template(CHECKSUM_A), "sha256-a")]);
    // Owned by the record, but no longer on the object.
    let gone = mk_object(&[], &[], &[], vec![owned.clone()]);
    assert_eq!(ops_of(&gone, &patch), json!([]));
    let malformed = [
        json!({}),
        json!({ "metadata": { "managedFields": "nudge" } }),
        json!({ "metadata": { "managedFields": [{ "manager": MANAGER, "fieldsV1": [] }] } }),
        json!({ "metadata": { "managedFields": [owned], "annotations": [] },
                "spec": { "template": "none" } }),
        json!({ "metadata": { "managedFields": [mk_entry(MANAGER, "Update",
                json!({ "f:spec": { "f:template": { "f:spec": { "f:containers": {
                    "k:{not json": { "f:env": { "k:{\"name\":7}": { "f:value": {} } } },
                } } } } }))] } }),
    ];
    for object in malformed {
        assert_eq!(ops_of(&object, &patch), json!([]), "{object}");
    }
}
