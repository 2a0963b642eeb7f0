//! Tests of the annotation schemes, one file per scheme; the builders and
//! helpers they share live here.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    ConfigMapKeySelector, ConfigMapVolumeSource, Container, EnvFromSource, EnvVar, EnvVarSource,
    KeyToPath, PodSpec, PodTemplateSpec, SecretEnvSource, SecretVolumeSource, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::fingerprint::Algorithm;
use crate::model::{
    Combine, Input, Origin, Output, Reference, Scope, Slot, SourceCatalog, SourceName, StampSpec,
    TemplatePath, Tracked, Workload, WorkloadId, WorkloadKind,
};

const NS: &str = "shop";

mod csi;
mod delivery;
mod mutator;
mod native;
mod pusher_wave;
mod reloader;
mod scheduling_gates;
mod scheme;
mod snapshot;

// --- builders ---

fn mk_catalog() -> SourceCatalog {
    mk_catalog_without_consul().with(SourceName::consul(), Scope::External, key_path)
}

fn mk_catalog_without_consul() -> SourceCatalog {
    SourceCatalog::new()
        .with(SourceName::configmap(), Scope::Namespaced, object_name)
        .with(SourceName::secret(), Scope::Namespaced, object_name)
}

/// What the ConfigMap and Secret sources check.
fn object_name(reference: &str) -> Result<(), String> {
    check_object_name(reference).map_err(str::to_owned)
}

/// Stands in for Consul's own check (`sources::consul::check_key`, tested
/// there; this layer may not import sources): not empty, not `/`-led, no
/// whitespace or control characters.
fn key_path(reference: &str) -> Result<(), String> {
    if reference.is_empty() || reference.starts_with('/') {
        return Err("a key must not be empty or start with '/'".to_owned());
    }
    if reference
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err("a key must not contain whitespace".to_owned());
    }
    Ok(())
}

fn mk_map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn mk_workload(meta: &[(&str, &str)], template: &[(&str, &str)], spec: PodSpec) -> Workload {
    Workload {
        id: WorkloadId::new(WorkloadKind::deployment(), NS, "web"),
        rollout: crate::model::Rollout::Unknown,
        ordered_pods: false,
        resource_version: None,
        uid: None,
        controller: None,
        annotations: mk_map(meta),
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                annotations: Some(mk_map(template)),
                ..ObjectMeta::default()
            }),
            spec: Some(spec),
        },
    }
}

fn mk_annotated(meta: &[(&str, &str)]) -> Workload {
    mk_workload(meta, &[], PodSpec::default())
}

fn mk_pod(volumes: Vec<Volume>, containers: Vec<Container>, init: Vec<Container>) -> PodSpec {
    PodSpec {
        volumes: Some(volumes),
        containers,
        init_containers: Some(init),
        ..PodSpec::default()
    }
}

fn mk_cm_volume(name: &str, items: &[&str]) -> Volume {
    let items = items
        .iter()
        .map(|k| KeyToPath {
            key: (*k).to_owned(),
            path: (*k).to_owned(),
            ..KeyToPath::default()
        })
        .collect::<Vec<_>>();
    Volume {
        name: format!("vol-{name}"),
        config_map: Some(ConfigMapVolumeSource {
            name: name.to_owned(),
            items: (!items.is_empty()).then_some(items),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn mk_secret_volume(name: &str, optional: bool) -> Volume {
    Volume {
        name: format!("vol-{name}"),
        secret: Some(SecretVolumeSource {
            secret_name: Some(name.to_owned()),
            optional: Some(optional),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn mk_container(name: &str, env_from_secrets: &[&str], env: Vec<EnvVar>) -> Container {
    Container {
        name: name.to_owned(),
        env_from: Some(
            env_from_secrets
                .iter()
                .map(|s| EnvFromSource {
                    secret_ref: Some(SecretEnvSource {
                        name: (*s).to_owned(),
                        optional: None,
                    }),
                    ..EnvFromSource::default()
                })
                .collect(),
        ),
        env: Some(env),
        ..Container::default()
    }
}

fn mk_env_cm_key(var: &str, name: &str, key: &str) -> EnvVar {
    EnvVar {
        name: var.to_owned(),
        value_from: Some(EnvVarSource {
            config_map_key_ref: Some(ConfigMapKeySelector {
                name: name.to_owned(),
                key: key.to_owned(),
                optional: None,
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

fn mk_env_value(var: &str, value: &str) -> EnvVar {
    EnvVar {
        name: var.to_owned(),
        value: Some(value.to_owned()),
        ..EnvVar::default()
    }
}

fn mk_auto_pod() -> PodSpec {
    mk_pod(
        vec![
            mk_cm_volume("app", &["a.yaml"]),
            mk_secret_volume("tls", true),
        ],
        vec![mk_container(
            "app",
            &["db"],
            vec![mk_env_cm_key("MODE", "flags", "mode")],
        )],
        vec![mk_container("init", &["bootstrap"], vec![])],
    )
}

fn mk_reloader_pod() -> PodSpec {
    mk_pod(
        vec![mk_cm_volume("app", &[]), mk_cm_volume("flags", &[])],
        vec![mk_container("app", &["db"], vec![])],
        vec![],
    )
}

// --- helpers ---

fn parse(workload: &Workload) -> Dependencies {
    dependencies(workload, &AnnotationScheme::default(), &mk_catalog())
}

fn stamp<'a>(deps: &'a Dependencies, output_key: &str) -> &'a StampSpec {
    deps.stamps
        .iter()
        .find(|s| s.output.key() == output_key)
        .unwrap_or_else(|| panic!("no stamp {output_key} in {:?}", deps.stamps))
}

fn inputs(spec: &StampSpec) -> Vec<String> {
    spec.inputs
        .iter()
        .map(|i| format!("{}{}", i.tracked, if i.optional { " optional" } else { "" }))
        .collect()
}

fn categories(deps: &Dependencies) -> Vec<(&str, &'static str)> {
    deps.errors
        .iter()
        .map(|e| (e.key(), e.category()))
        .collect()
}

fn outputs(deps: &Dependencies) -> Vec<String> {
    deps.stamps.iter().map(|s| s.output.to_string()).collect()
}
