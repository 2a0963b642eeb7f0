//! What the engine keeps of a workload between events.
//!
//! A full [`Workload`] carries the whole pod template: k8s-openapi's `PodSpec`,
//! `Container` and `Volume` are 1–3 KiB each even when nearly empty, so 2,000
//! workloads cost tens of MiB. Between events the engine only needs the current
//! values of the workload's outputs, which is all [`diff`](super::diff) and
//! [`Target::apply`](crate::targets::Target::apply) read.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, EnvVar, PodSchedulingGate, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::annotations::RELOADER_LAST_RELOADED_FROM;
use crate::fingerprint;
use crate::model::{
    Name, Output, RELOADER_PAUSED_AT, Rollout, WAVE_SCHEDULING_DISABLED, Workload, WorkloadId,
};

/// The current values of a workload's outputs, and nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentOutputs {
    id: WorkloadId,
    /// Workload annotations that are outputs. Keys are usually short enough to
    /// be stored inline; there are two or three per workload, for every workload.
    /// Boxed slices, not vectors: built once, and 16 bytes each instead of 24
    /// in every workload's record.
    annotations: Box<[(Name, Value)]>,
    /// Pod-template annotations that are outputs.
    template_annotations: Box<[(Name, Value)]>,
    /// The outputs in the pod spec, which few workloads have: `None` when
    /// there are none (8 bytes in every record instead of 32).
    spec: Option<Box<SpecOutputs>>,
}

/// The outputs a workload has in its pod spec.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SpecOutputs {
    /// Containers carrying an output env var, in pod-spec order.
    containers: Vec<ContainerOutputs>,
    /// Scheduling gates that are outputs, present on the pod template.
    gates: Vec<String>,
}

/// An annotation's value. What nudge writes most, a `sha256-` digest in
/// lowercase hex, is kept as its 32 bytes: 40 bytes inline instead of an
/// 80-byte allocation, for each output of every workload.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Sha256([u8; 32]),
    Text(Box<str>),
}

impl Value {
    fn new(text: &str) -> Self {
        match fingerprint::sha256_bytes(text) {
            Some(bytes) => Self::Sha256(bytes),
            None => Self::Text(text.into()),
        }
    }

    fn to_text(&self) -> String {
        match self {
            Self::Sha256(bytes) => fingerprint::sha256_text(bytes),
            Self::Text(text) => text.to_string(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ContainerOutputs {
    init: bool,
    name: String,
    /// The output env vars of this container, in order: name and literal value.
    env: Vec<(String, Option<String>)>,
}

/// The keys `outputs` occupy, by where they live.
#[derive(Default)]
pub(super) struct OutputKeys<'a> {
    /// Annotations on the workload's own metadata.
    pub(super) own: BTreeSet<&'a str>,
    /// Annotations on the pod template.
    pub(super) template: BTreeSet<&'a str>,
    /// Env var names.
    pub(super) env: BTreeSet<&'a str>,
    gates: BTreeSet<&'a str>,
    /// Snapshot annotations on the pod template (design §5e).
    snapshots: BTreeSet<&'a str>,
}

impl<'a> OutputKeys<'a> {
    pub(super) fn of(outputs: impl IntoIterator<Item = &'a Output>) -> Self {
        let mut keys = Self::default();
        for output in outputs {
            match output {
                Output::PodTemplateAnnotation(key) => {
                    keys.template.insert(key);
                }
                Output::PodTemplateAndWorkloadAnnotation(key) => {
                    keys.template.insert(key);
                    keys.own.insert(key);
                }
                Output::ContainerEnv(name) => {
                    keys.env.insert(name);
                }
                Output::WorkloadAnnotation(key) => {
                    keys.own.insert(key);
                }
                Output::Adopted(key) => {
                    keys.template.insert(key);
                    keys.own.insert(key);
                }
                Output::ReloaderSource(key) => {
                    keys.own.insert(key);
                    keys.template.insert(RELOADER_LAST_RELOADED_FROM);
                }
                Output::RestartAt(key) => {
                    keys.own.insert(key);
                }
                Output::SchedulingGate(name) => {
                    keys.gates.insert(name);
                }
                Output::WaveSchedulingDisabled => {
                    keys.own.insert(WAVE_SCHEDULING_DISABLED);
                }
                Output::ReloaderPause => {
                    keys.own.insert(RELOADER_PAUSED_AT);
                }
                Output::Snapshots(key) => {
                    keys.snapshots.insert(key);
                }
            }
        }
        keys
    }
}

impl CurrentOutputs {
    /// The values of `outputs` on `workload`.
    pub fn new<'a>(workload: &Workload, outputs: impl IntoIterator<Item = &'a Output>) -> Self {
        let keys = OutputKeys::of(outputs);
        let containers: Vec<ContainerOutputs> = super::containers_by_role(workload)
            .filter_map(|(init, container)| ContainerOutputs::of(init, container, &keys.env))
            .collect();
        let gates: Vec<String> = workload
            .template
            .spec
            .as_ref()
            .and_then(|spec| spec.scheduling_gates.as_ref())
            .into_iter()
            .flatten()
            .filter(|gate| keys.gates.contains(gate.name.as_str()))
            .map(|gate| gate.name.clone())
            .collect();
        let mut template_annotations = pick(workload.template_annotations(), &keys.template);
        // What the template uses, not what its annotation claims: the values
        // are compared, and the references are not kept.
        for key in &keys.snapshots {
            if let Some(value) = super::settled_snapshot(workload, key) {
                template_annotations.push((Name::from(*key), Value::new(&value)));
            }
        }
        Self {
            id: workload.id.clone(),
            annotations: pick(&workload.annotations, &keys.own).into_boxed_slice(),
            template_annotations: template_annotations.into_boxed_slice(),
            spec: (!containers.is_empty() || !gates.is_empty())
                .then(|| Box::new(SpecOutputs { containers, gates })),
        }
    }

    /// The workload these values belong to.
    pub fn id(&self) -> &WorkloadId {
        &self.id
    }

    /// A workload holding only these values: enough for `diff` and `Target::apply`,
    /// which read nothing else.
    pub fn to_workload(&self) -> Workload {
        let (containers, gates) = self
            .spec
            .as_deref()
            .map_or((&[][..], &[][..]), |s| (&s.containers[..], &s.gates[..]));
        let (init, main): (Vec<&ContainerOutputs>, Vec<&ContainerOutputs>) =
            containers.iter().partition(|c| c.init);
        let gates = (!gates.is_empty()).then(|| {
            gates
                .iter()
                .map(|name| PodSchedulingGate { name: name.clone() })
                .collect()
        });
        let spec = (!containers.is_empty() || gates.is_some()).then(|| PodSpec {
            containers: main
                .into_iter()
                .map(ContainerOutputs::to_container)
                .collect(),
            init_containers: (!init.is_empty()).then(|| {
                init.into_iter()
                    .map(ContainerOutputs::to_container)
                    .collect()
            }),
            scheduling_gates: gates,
            ..PodSpec::default()
        });
        Workload {
            id: self.id.clone(),
            annotations: entries(&self.annotations),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    annotations: Some(entries(&self.template_annotations)),
                    ..ObjectMeta::default()
                }),
                spec,
            },
            rollout: Rollout::Unknown,
            ordered_pods: false,
            resource_version: None,
            uid: None,
            controller: None,
        }
    }
}

impl ContainerOutputs {
    fn of(init: bool, container: &Container, names: &BTreeSet<&str>) -> Option<Self> {
        let env: Vec<(String, Option<String>)> = container
            .env
            .iter()
            .flatten()
            .filter(|var| names.contains(var.name.as_str()))
            .map(|var| (var.name.clone(), var.value.clone()))
            .collect();
        (!env.is_empty()).then(|| Self {
            init,
            name: container.name.clone(),
            env,
        })
    }

    fn to_container(&self) -> Container {
        Container {
            name: self.name.clone(),
            env: Some(
                self.env
                    .iter()
                    .map(|(name, value)| EnvVar {
                        name: name.clone(),
                        value: value.clone(),
                        ..EnvVar::default()
                    })
                    .collect(),
            ),
            ..Container::default()
        }
    }
}

fn pick(map: &BTreeMap<String, String>, keys: &BTreeSet<&str>) -> Vec<(Name, Value)> {
    keys.iter()
        .filter_map(|key| map.get_key_value(*key))
        .map(|(k, v)| (Name::from(k.as_str()), Value::new(v)))
        .collect()
}

fn entries(picked: &[(Name, Value)]) -> BTreeMap<String, String> {
    picked
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_text()))
        .collect()
}
