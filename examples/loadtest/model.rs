//! The cluster a run seeds: namespaces, ConfigMaps, Secrets, workloads and Consul
//! keys, and which workloads depend on which source; the changes to make.

use std::collections::{HashMap, HashSet};

use base64::Engine as _;
use serde_json::{Value, json};

use super::scale::{Layout, Scale};

/// nudge's own namespace (its fingerprint-key Secret lives there).
pub const NUDGE_NAMESPACE: &str = "nudge-system";
/// Workloads per namespace, with fixed roles (see [`Model::build`]).
pub const WORKLOADS_PER_NAMESPACE: usize = 10;
/// Consul keys per Consul-referencing workload.
const KEYS_PER_WORKLOAD: usize = 4;
pub const KINDS: [&str; 3] = ["Deployment", "StatefulSet", "DaemonSet"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceKind {
    ConfigMap,
    Secret,
    Consul,
}

impl SourceKind {
    /// In the order the change phases run.
    pub const ALL: [SourceKind; 3] = [
        SourceKind::ConfigMap,
        SourceKind::Secret,
        SourceKind::Consul,
    ];

    pub fn label(self) -> &'static str {
        match self {
            SourceKind::ConfigMap => "configmap",
            SourceKind::Secret => "secret",
            SourceKind::Consul => "consul",
        }
    }

    /// What a change of this kind changes, for the table.
    pub fn title(self) -> &'static str {
        match self {
            SourceKind::ConfigMap => "ConfigMap",
            SourceKind::Secret => "Secret",
            SourceKind::Consul => "Consul key",
        }
    }
}

#[derive(Debug)]
pub struct WorkloadSpec {
    pub kind: &'static str,
    /// `/apis/apps/v1/namespaces/<ns>/<plural>/<name>`.
    pub path: String,
    /// Whether it references anything (and is stamped at all).
    pub referencing: bool,
}

/// A referenced source object: a ConfigMap, Secret (in a namespace) or Consul key.
#[derive(Debug)]
pub struct SourceObject {
    pub kind: SourceKind,
    pub namespace: usize,
    /// Object name, or the Consul key.
    pub name: String,
    pub dependents: Vec<usize>,
}

#[derive(Debug)]
pub struct Model {
    pub namespaces: Vec<String>,
    pub workloads: Vec<WorkloadSpec>,
    /// Workload bodies, in `workloads` order.
    pub bodies: Vec<Value>,
    pub sources: Vec<SourceObject>,
    pub consul_keys: Vec<String>,
}

impl Model {
    /// Per namespace, ten workloads `w-0`…`w-9` (kinds rotate over the three):
    /// `w-0`–`w-2` `nudge.dev/auto` (a ConfigMap volume `cm-<j>`, `envFrom` Secret
    /// `sec-<j>`; `w-0`, `w-1` also mount the shared `cm-5`); `w-3`, `w-4` explicit
    /// (`configmap-app: cm-<j>`, `secret-db: sec-<j>`, shared `secret-shared: sec-5`);
    /// `w-5`, `w-6` and, in every other namespace, `w-7` reference four Consul keys
    /// each; the rest reference nothing.
    pub fn build(scale: &Scale) -> Self {
        if scale.layout == Layout::Single {
            return Self::single();
        }
        let mut namespaces = Vec::new();
        let mut workloads = Vec::new();
        let mut bodies = Vec::new();
        let mut sources = Vec::new();
        let mut consul_keys = Vec::new();
        for n in 0..scale.namespaces {
            let ns = format!("bench-{n:03}");
            let first = workloads.len();
            let w = |j: usize| first + j;
            for (kind, prefix) in [(SourceKind::ConfigMap, "cm"), (SourceKind::Secret, "sec")] {
                for j in 0..6 {
                    let dependents = match (kind, j) {
                        (SourceKind::ConfigMap, 5) => vec![w(0), w(1)],
                        (SourceKind::Secret, 5) => vec![w(3), w(4)],
                        _ => vec![w(j)],
                    };
                    sources.push(SourceObject {
                        kind,
                        namespace: n,
                        name: format!("{prefix}-{j}"),
                        dependents,
                    });
                }
            }
            for j in 0..WORKLOADS_PER_NAMESPACE {
                let global = first + j;
                let kind = KINDS[global % KINDS.len()];
                let name = format!("w-{j}");
                let mut annotations = serde_json::Map::new();
                let mut pod =
                    json!({ "containers": [{ "name": "app", "image": "registry.example/app:1" }] });
                let consul = j == 5 || j == 6 || (j == 7 && n % 2 == 0);
                match j {
                    0..=2 => {
                        annotations.insert("nudge.dev/auto".into(), json!("true"));
                        let mut volumes = vec![
                            json!({ "name": "cfg", "configMap": { "name": format!("cm-{j}") } }),
                        ];
                        let mut mounts = vec![json!({ "name": "cfg", "mountPath": "/etc/app" })];
                        if j < 2 {
                            volumes
                                .push(json!({ "name": "shared", "configMap": { "name": "cm-5" } }));
                            mounts.push(json!({ "name": "shared", "mountPath": "/etc/shared" }));
                        }
                        pod["volumes"] = json!(volumes);
                        pod["containers"][0]["volumeMounts"] = json!(mounts);
                        pod["containers"][0]["envFrom"] =
                            json!([{ "secretRef": { "name": format!("sec-{j}") } }]);
                    }
                    3 | 4 => {
                        annotations
                            .insert("nudge.dev/configmap-app".into(), json!(format!("cm-{j}")));
                        annotations.insert("nudge.dev/secret-db".into(), json!(format!("sec-{j}")));
                        annotations.insert("nudge.dev/secret-shared".into(), json!("sec-5"));
                    }
                    _ if consul => {
                        for k in 0..KEYS_PER_WORKLOAD {
                            let key = format!("bench/{ns}/{name}/k{k}");
                            annotations.insert(format!("nudge.dev/consul-k{k}"), json!(key));
                            consul_keys.push(key.clone());
                            sources.push(SourceObject {
                                kind: SourceKind::Consul,
                                namespace: n,
                                name: key,
                                dependents: vec![global],
                            });
                        }
                    }
                    _ => {}
                }
                let referencing = j < 5 || consul;
                bodies.push(workload_body(kind, &ns, &name, annotations, pod));
                workloads.push(WorkloadSpec {
                    kind,
                    path: workload_path(&ns, kind, &name),
                    referencing,
                });
            }
            namespaces.push(ns);
        }
        Self {
            namespaces,
            workloads,
            bodies,
            sources,
            consul_keys,
        }
    }

    /// [`Layout::Single`]: in `bench-000`, the Deployment `w-0` mounts `cm-0` under
    /// `nudge.dev/auto` and references one Consul key.
    fn single() -> Self {
        let ns = "bench-000".to_owned();
        let name = "w-0";
        let key = format!("bench/{ns}/{name}/k0");
        let mut annotations = serde_json::Map::new();
        annotations.insert("nudge.dev/auto".into(), json!("true"));
        annotations.insert("nudge.dev/consul-k0".into(), json!(key));
        let pod = json!({
            "containers": [{
                "name": "app", "image": "registry.example/app:1",
                "volumeMounts": [{ "name": "cfg", "mountPath": "/etc/app" }],
            }],
            "volumes": [{ "name": "cfg", "configMap": { "name": "cm-0" } }],
        });
        let kind = KINDS[0];
        Self {
            bodies: vec![workload_body(kind, &ns, name, annotations, pod)],
            workloads: vec![WorkloadSpec {
                kind,
                path: workload_path(&ns, kind, name),
                referencing: true,
            }],
            sources: vec![
                SourceObject {
                    kind: SourceKind::ConfigMap,
                    namespace: 0,
                    name: "cm-0".into(),
                    dependents: vec![0],
                },
                SourceObject {
                    kind: SourceKind::Consul,
                    namespace: 0,
                    name: key.clone(),
                    dependents: vec![0],
                },
            ],
            consul_keys: vec![key],
            namespaces: vec![ns],
        }
    }

    pub fn referencing(&self) -> usize {
        self.workloads.iter().filter(|w| w.referencing).count()
    }

    /// The changes to make: kinds rotate ConfigMap, Secret, Consul; namespaces
    /// rotate; no two changes share a dependent workload, so that every change is
    /// owed exactly one PATCH per dependent however fast or slow nudge is.
    pub fn plan_changes(&self, layout: Layout, count: usize, seed: u64) -> Vec<usize> {
        if layout == Layout::Single {
            // Each change waits for the previous one's PATCH: sources may repeat.
            return (0..count).map(|i| i % self.sources.len()).collect();
        }
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut by_ns_kind: HashMap<(usize, SourceKind), Vec<usize>> = HashMap::new();
        for (i, s) in self.sources.iter().enumerate() {
            by_ns_kind.entry((s.namespace, s.kind)).or_default().push(i);
        }
        let mut used: HashSet<usize> = HashSet::new();
        let mut plan = Vec::new();
        let kinds = [
            SourceKind::ConfigMap,
            SourceKind::Secret,
            SourceKind::Consul,
        ];
        let namespaces = self.namespaces.len();
        for i in 0..count {
            let mut chosen = None;
            'search: for kind_offset in 0..kinds.len() {
                let kind = kinds[(i + kind_offset) % kinds.len()];
                for ns_offset in 0..namespaces {
                    let ns = (i + ns_offset) % namespaces;
                    let Some(candidates) = by_ns_kind.get(&(ns, kind)) else {
                        continue;
                    };
                    let mut candidates = candidates.clone();
                    rng.shuffle(&mut candidates);
                    if let Some(&s) = candidates
                        .iter()
                        .find(|&&s| self.sources[s].dependents.iter().all(|d| !used.contains(d)))
                    {
                        chosen = Some(s);
                        break 'search;
                    }
                }
            }
            let Some(s) = chosen else { break };
            used.extend(self.sources[s].dependents.iter().copied());
            plan.push(s);
        }
        plan
    }

    /// The planned changes in phases of one source kind each (ConfigMaps, then
    /// Secrets, then Consul keys), so that what each kind costs is measured apart.
    pub fn change_phases(&self, plan: &[usize]) -> Vec<(SourceKind, Vec<usize>)> {
        SourceKind::ALL
            .into_iter()
            .map(|kind| {
                let changes = plan
                    .iter()
                    .copied()
                    .filter(|&s| self.sources[s].kind == kind)
                    .collect::<Vec<_>>();
                (kind, changes)
            })
            .filter(|(_, changes)| !changes.is_empty())
            .collect()
    }

    /// The objects of the cluster in creation order (namespaces, then per
    /// namespace its ConfigMaps and Secrets, then the workloads), drawn as they
    /// are taken so the content of 200,000 objects is never held at once.
    pub fn cluster_objects<'a>(
        &'a self,
        scale: &'a Scale,
        rng: &'a mut fastrand::Rng,
    ) -> impl Iterator<Item = Value> + 'a {
        let namespaces = self
            .namespaces
            .iter()
            .map(String::as_str)
            .chain([NUDGE_NAMESPACE])
            .map(
                |ns| json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": ns } }),
            )
            .collect::<Vec<_>>();
        let sizes = scale.object_bytes;
        let content = self.namespaces.iter().flat_map(move |ns| {
            let configmaps =
                (0..scale.configmaps_per_namespace).map(move |i| (ns, i, SourceKind::ConfigMap));
            let secrets =
                (0..scale.secrets_per_namespace).map(move |i| (ns, i, SourceKind::Secret));
            configmaps.chain(secrets)
        });
        let content = content.map(move |(ns, i, kind)| {
            let data = object_data(rng, sizes);
            match kind {
                SourceKind::ConfigMap => configmap_body(ns, &format!("cm-{i}"), data),
                _ => secret_body(ns, &format!("sec-{i}"), data),
            }
        });
        namespaces
            .into_iter()
            .chain(content)
            .chain(self.bodies.iter().cloned())
    }

    /// The unreferenced Secrets added before the last run, `unref-<i>` per namespace.
    pub fn unreferenced_secrets<'a>(
        &'a self,
        scale: &'a Scale,
        rng: &'a mut fastrand::Rng,
    ) -> impl Iterator<Item = Value> + 'a {
        let sizes = scale.object_bytes;
        self.namespaces
            .iter()
            .flat_map(move |ns| (0..scale.extra_secrets_per_namespace).map(move |i| (ns, i)))
            .map(move |(ns, i)| secret_body(ns, &format!("unref-{i}"), object_data(rng, sizes)))
    }

    /// The Consul keys with values of 100 B to 4 KiB.
    pub fn consul_entries(&self, rng: &mut fastrand::Rng) -> Vec<(String, Vec<u8>)> {
        self.consul_keys
            .iter()
            .map(|k| (k.clone(), consul_value(rng).into_bytes()))
            .collect()
    }

    /// Where a change of `source` is written: its path on the API server, or
    /// the key's path on Consul's KV endpoint.
    pub fn source_path(&self, source: usize) -> String {
        let source = &self.sources[source];
        let ns = &self.namespaces[source.namespace];
        match source.kind {
            SourceKind::ConfigMap => format!("/api/v1/namespaces/{ns}/configmaps/{}", source.name),
            SourceKind::Secret => format!("/api/v1/namespaces/{ns}/secrets/{}", source.name),
            SourceKind::Consul => format!("/v1/kv/{}", source.name),
        }
    }

    /// The write that changes `source`: its path (see
    /// [`source_path`](Self::source_path)), content type and body.
    pub fn change(
        &self,
        source: usize,
        rng: &mut fastrand::Rng,
        sizes: (usize, usize),
    ) -> (String, &'static str, String) {
        let path = self.source_path(source);
        let b64 = base64::engine::general_purpose::STANDARD;
        match self.sources[source].kind {
            SourceKind::ConfigMap => {
                let data = object_data(rng, sizes);
                let body = json!({ "data": { "app.properties": data.0, "extra.conf": data.1 } });
                (path, "application/merge-patch+json", body.to_string())
            }
            SourceKind::Secret => {
                let data = object_data(rng, sizes);
                let body = json!({ "data": { "credentials": b64.encode(data.0), "token": b64.encode(data.1) } });
                (path, "application/merge-patch+json", body.to_string())
            }
            SourceKind::Consul => (path, "application/octet-stream", consul_value(rng)),
        }
    }
}

/// A Consul value: 100 B to 4 KiB of text.
fn consul_value(rng: &mut fastrand::Rng) -> String {
    let len = rng.usize(100..=4096);
    text(rng, len)
}

fn workload_body(
    kind: &str,
    ns: &str,
    name: &str,
    annotations: serde_json::Map<String, Value>,
    pod: Value,
) -> Value {
    let mut spec = json!({
        "selector": { "matchLabels": { "app": name } },
        "template": { "metadata": { "labels": { "app": name } }, "spec": pod },
    });
    if kind == "StatefulSet" {
        spec["serviceName"] = json!(name);
    }
    if kind != "DaemonSet" {
        spec["replicas"] = json!(2);
    }
    json!({
        "apiVersion": "apps/v1", "kind": kind,
        "metadata": { "name": name, "namespace": ns, "labels": { "app": name, "team": "bench" }, "annotations": annotations },
        "spec": spec,
    })
}

fn workload_path(ns: &str, kind: &str, name: &str) -> String {
    let plural = match kind {
        "Deployment" => "deployments",
        "StatefulSet" => "statefulsets",
        _ => "daemonsets",
    };
    format!("/apis/apps/v1/namespaces/{ns}/{plural}/{name}")
}

/// `len` bytes of printable text, like a config file's worth of entropy.
fn text(rng: &mut fastrand::Rng, len: usize) -> String {
    let mut s = String::with_capacity(len);
    while s.len() < len {
        let line = rng.usize(20..80).min(len - s.len());
        for _ in 0..line.saturating_sub(1) {
            s.push(rng.alphanumeric());
        }
        s.push('\n');
    }
    s
}

fn configmap_body(ns: &str, name: &str, data: (String, String)) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": name, "namespace": ns, "labels": { "team": "bench" } },
        "data": { "app.properties": data.0, "extra.conf": data.1 },
    })
}

fn secret_body(ns: &str, name: &str, data: (String, String)) -> Value {
    let b64 = base64::engine::general_purpose::STANDARD;
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": { "name": name, "namespace": ns, "labels": { "team": "bench" } },
        "data": { "credentials": b64.encode(data.0), "token": b64.encode(data.1) },
    })
}

/// Two values totalling between the scale's object sizes (base64 grows Secrets by
/// a third on the wire; the decoded size is what is drawn).
fn object_data(rng: &mut fastrand::Rng, (min, max): (usize, usize)) -> (String, String) {
    let total = rng.usize(min..=max);
    let first = total * 3 / 4;
    (text(rng, first), text(rng, total - first))
}
