//! The server-side apply renderer of a [`StampPatch`]: only nudge's fields.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::StampPatch;
use crate::annotations::AnnotationScheme;
use crate::model::{Output, Workload};

/// Renders the apply configuration for `patch` on `current`: every annotation and
/// env var nudge owns, plus the `last-updated` annotations (from `scheme`) set to
/// `now` on the workload's own metadata, never on the pod template. The pod
/// template is placed at the kind's template path.
pub fn apply_body(
    current: &Workload,
    patch: &StampPatch,
    scheme: &AnnotationScheme,
    now: &str,
) -> Value {
    let mut template_annotations = BTreeMap::new();
    let mut workload_annotations = BTreeMap::new();
    let mut env = BTreeMap::new();
    let mut restart = false;
    for (output, value) in &patch.values {
        match output {
            Output::PodTemplateAnnotation(key) => {
                let value = super::with_observed_at(value, now);
                template_annotations.insert(key.clone(), value);
            }
            // An adopted output reaches the renderer resolved; both, to be safe.
            Output::PodTemplateAndWorkloadAnnotation(key) | Output::Adopted(key) => {
                template_annotations.insert(key.clone(), value.clone());
                workload_annotations.insert(key.clone(), value.clone());
            }
            // Resolved into the annotations above by the decision; the state on
            // metadata, to be safe.
            Output::WorkloadAnnotation(key) | Output::ReloaderSource(key) => {
                workload_annotations.insert(key.clone(), value.clone());
            }
            // Holds are lifted by `StampPatch::releases`, never written as values.
            Output::SchedulingGate(_) | Output::WaveSchedulingDisabled | Output::ReloaderPause => {}
            Output::ContainerEnv(name) => {
                env.insert(name.clone(), value.clone());
            }
            // Its state reaches the renderer as a workload annotation.
            Output::RestartAt(_) => restart = true,
            // Written with its references by JSON patch only (a target
            // changes it that way), never by apply: apply would own the
            // annotation apart from the references it names.
            Output::Snapshots(_) => {}
        }
    }
    for key in scheme.last_updated_keys(patch.values.keys()) {
        workload_annotations.insert(key, now.to_owned());
    }

    let mut template = json!({ "metadata": { "annotations": template_annotations } });
    let (containers, init_containers) = containers_with_env(current, &env);
    if !containers.is_empty() || !init_containers.is_empty() {
        let mut spec = Map::new();
        if !containers.is_empty() {
            spec.insert("containers".into(), Value::Array(containers));
        }
        if !init_containers.is_empty() {
            spec.insert("initContainers".into(), Value::Array(init_containers));
        }
        template["spec"] = Value::Object(spec);
    }
    let kind = &current.id.kind;
    let mut body = json!({
        "apiVersion": kind.api_version(),
        "kind": kind.as_str(),
        "metadata": {
            "name": current.id.name,
            "namespace": current.id.namespace,
            "annotations": workload_annotations,
        },
    });
    let segments: Vec<&str> = kind.template_path().segments().collect();
    let nested = segments
        .iter()
        .skip(1)
        .rev()
        .fold(template, |inner, segment| json!({ *segment: inner }));
    body[segments[0]] = nested;
    if restart {
        let [spec, field] = super::RESTART_AT;
        body[spec][field] = Value::from(super::restart_time(now));
    }
    body
}

/// For each container and init container that already carries one of `env`'s
/// variables, the partial container (`name` plus those variables) to apply.
fn containers_with_env(
    current: &Workload,
    env: &BTreeMap<String, String>,
) -> (Vec<Value>, Vec<Value>) {
    if env.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let Some(spec) = &current.template.spec else {
        return (Vec::new(), Vec::new());
    };
    let partial = |containers: &[k8s_openapi::api::core::v1::Container]| -> Vec<Value> {
        containers
            .iter()
            .filter_map(|container| {
                let vars: Vec<Value> = container
                    .env
                    .iter()
                    .flatten()
                    .filter_map(|var| {
                        env.get(&var.name)
                            .map(|value| json!({ "name": var.name, "value": value }))
                    })
                    .collect();
                (!vars.is_empty()).then(|| json!({ "name": container.name, "env": vars }))
            })
            .collect()
    };
    (
        partial(&spec.containers),
        partial(spec.init_containers.as_deref().unwrap_or_default()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Rollout, TemplatePath, WorkloadId, WorkloadKind};
    use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, PodTemplateSpec};

    fn mk_container(name: &str, env: &[(&str, &str)]) -> Container {
        Container {
            name: name.into(),
            env: Some(
                env.iter()
                    .map(|(n, v)| EnvVar {
                        name: (*n).into(),
                        value: Some((*v).into()),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn mk_workload(
        kind: WorkloadKind,
        containers: Vec<Container>,
        init: Vec<Container>,
    ) -> Workload {
        Workload {
            id: WorkloadId::new(kind, "ns", "web"),
            annotations: BTreeMap::new(),
            template: PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    containers,
                    init_containers: Some(init),
                    ..Default::default()
                }),
            },
            rollout: Rollout::Unknown,
            ordered_pods: false,
            resource_version: None,
            uid: None,
            controller: None,
        }
    }

    fn mk_patch(values: &[(Output, &str)]) -> StampPatch {
        StampPatch {
            id: WorkloadId::new(WorkloadKind::deployment(), "ns", "web"),
            changed: values.iter().map(|(o, _)| o.clone()).collect(),
            values: values
                .iter()
                .map(|(o, v)| (o.clone(), (*v).to_owned()))
                .collect(),
            releases: Vec::new(),
        }
    }

    fn scheme() -> AnnotationScheme {
        AnnotationScheme::default()
    }

    #[test]
    fn template_annotations_and_last_updated_on_metadata_only() {
        let workload = mk_workload(
            WorkloadKind::deployment(),
            vec![mk_container("app", &[])],
            vec![],
        );
        let patch = mk_patch(&[(
            Output::PodTemplateAnnotation("nudge.dev/checksum-config".into()),
            "sha256-1",
        )]);
        let body = apply_body(&workload, &patch, &scheme(), "2026-11-22T00:00:00Z");
        assert_eq!(body["apiVersion"], "apps/v1");
        assert_eq!(body["kind"], "Deployment");
        assert_eq!(body["metadata"]["name"], "web");
        assert_eq!(
            body["spec"]["template"]["metadata"]["annotations"],
            json!({"nudge.dev/checksum-config": "sha256-1"})
        );
        assert_eq!(
            body["metadata"]["annotations"],
            json!({"nudge.dev/last-updated": "2026-11-22T00:00:00Z"})
        );
        assert!(body["spec"]["template"].get("spec").is_none());
    }

    #[test]
    fn the_template_goes_to_the_kinds_template_path() {
        let cron = WorkloadKind::new(
            "batch",
            "v1",
            "CronJob",
            TemplatePath::parse("spec.jobTemplate.spec.template").unwrap(),
        );
        let workload = mk_workload(cron, vec![], vec![]);
        let key = "nudge.dev/config-hash";
        let patch = mk_patch(&[(Output::PodTemplateAnnotation(key.into()), "sha256-1")]);
        let body = apply_body(&workload, &patch, &scheme(), "T");
        assert_eq!(body["apiVersion"], "batch/v1");
        assert_eq!(
            body["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["annotations"][key],
            "sha256-1"
        );
        assert!(body["spec"].get("template").is_none());
    }

    #[test]
    fn consul_mutator_checksums_go_on_both_and_get_their_own_last_updated() {
        let workload = mk_workload(
            WorkloadKind::deployment(),
            vec![mk_container("app", &[])],
            vec![],
        );
        let key = "k8s-consul-mutator.io/checksum-db";
        let patch = mk_patch(&[(
            Output::PodTemplateAndWorkloadAnnotation(key.into()),
            "md5-1",
        )]);
        let body = apply_body(&workload, &patch, &scheme(), "T");
        assert_eq!(
            body["spec"]["template"]["metadata"]["annotations"][key],
            "md5-1"
        );
        assert_eq!(body["metadata"]["annotations"][key], "md5-1");
        assert_eq!(
            body["metadata"]["annotations"]["k8s-consul-mutator.io/last-updated"],
            "T"
        );
    }

    #[test]
    fn env_vars_are_updated_in_every_container_that_carries_them() {
        let var = "STAKATER_APP_CONFIG_CONFIGMAP";
        let workload = mk_workload(
            WorkloadKind::deployment(),
            vec![
                mk_container("app", &[(var, "old"), ("OTHER", "x")]),
                mk_container("sidecar", &[("OTHER", "x")]),
            ],
            vec![mk_container("init", &[(var, "old")])],
        );
        let patch = mk_patch(&[(Output::ContainerEnv(var.into()), "new")]);
        let body = apply_body(&workload, &patch, &scheme(), "T");
        let spec = &body["spec"]["template"]["spec"];
        assert_eq!(
            spec["containers"],
            json!([{"name": "app", "env": [{"name": var, "value": "new"}]}])
        );
        assert_eq!(
            spec["initContainers"],
            json!([{"name": "init", "env": [{"name": var, "value": "new"}]}])
        );
    }

    #[test]
    fn a_restart_sets_spec_restart_at_in_whole_seconds_beside_its_state() {
        let workload = mk_workload(
            WorkloadKind::deployment(),
            vec![mk_container("app", &[])],
            vec![],
        );
        let key = "nudge.dev/config-hash";
        let patch = mk_patch(&[
            (Output::WorkloadAnnotation(key.into()), "sha256-2"),
            (Output::RestartAt(key.into()), "sha256-2"),
        ]);
        let body = apply_body(&workload, &patch, &scheme(), "2026-11-22T05:00:00.25Z");
        assert_eq!(body["spec"]["restartAt"], "2026-11-22T05:00:00Z");
        assert_eq!(body["metadata"]["annotations"][key], "sha256-2");
        assert!(
            body["spec"]["template"]["metadata"]["annotations"]
                .as_object()
                .is_some_and(|m| m.is_empty()),
            "{body}"
        );
    }
}
