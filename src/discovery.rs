//! Pod-spec discovery: which ConfigMaps and Secrets a pod template references.
//!
//! Two rule sets over one walk:
//!
//! - [`native`] (`nudge.dev/auto`, Reloader's `auto`): volumes, projected volumes,
//!   `envFrom` and `env[].valueFrom` of containers **and** initContainers; `items`
//!   narrow volumes to the listed keys.
//! - [`wave`] (design §4): Wave's own rules: plain `configMap`/`secret` volumes count
//!   with all their keys even when `items` are given, projected sources narrow to
//!   their `items`, and only `containers` (not initContainers) contribute env
//!   references.
//!
//! A configured source may have its own rule ([`by_rule`], `PodSpecRule`): the
//! Secrets Store CSI preset's finds `csi` volumes of its driver.
//!
//! Results are merged per object (keys union, `All` absorbs; optional only when
//! every occurrence is optional) and sorted by kind (ConfigMaps first), then name.
//! References with an empty name (an invalid pod spec the API server rejects) are
//! skipped.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EnvFromSource, EnvVar, KeyToPath, PodSpec, Volume, VolumeProjection,
};

use crate::fingerprint::ObjectKind;
use crate::model::{KeySelection, PodSpecRule};

/// One ConfigMap or Secret a pod spec references, merged over every place it is
/// referenced from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    /// ConfigMap or Secret.
    pub kind: ObjectKind,
    /// Object name, in the pod's namespace.
    pub name: String,
    /// The keys the pod uses (union over every occurrence).
    pub keys: KeySelection,
    /// `true` only when every occurrence is marked `optional: true`.
    pub optional: bool,
    /// Short human descriptions of where it was found (`volume "cfg"`,
    /// `envFrom in container "app"`, `env FOO in initContainer "init"`), in pod-spec
    /// order.
    pub origins: Vec<String>,
}

/// Every ConfigMap and Secret the pod spec references, by nudge's rules
/// (`nudge.dev/auto`).
pub fn native(spec: &PodSpec) -> Vec<Discovered> {
    walk(spec, &NATIVE)
}

/// Every ConfigMap and Secret the pod spec references, by Wave's rules (design §4).
pub fn wave(spec: &PodSpec) -> Vec<Discovered> {
    walk(spec, &WAVE)
}

/// One object a configured source's pod-spec rule finds (design §5b).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveredObject {
    /// Object name, in the pod's namespace.
    pub name: String,
    /// Where it was found (`csi volume "secrets"`), in pod-spec order.
    pub origins: Vec<String>,
}

/// The objects `rule` finds in the pod spec, sorted by name, each once. A
/// volume without the attribute, or with an empty one, names nothing.
pub fn by_rule(spec: &PodSpec, rule: &PodSpecRule) -> Vec<DiscoveredObject> {
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    match rule {
        PodSpecRule::CsiVolume { driver, attribute } => {
            let csi = spec.volumes.iter().flatten().filter_map(|volume| {
                let csi = volume.csi.as_ref().filter(|csi| csi.driver == *driver)?;
                let name = csi.volume_attributes.as_ref()?.get(attribute)?;
                Some((name, format!("csi volume {:?}", volume.name)))
            });
            for (name, origin) in csi.filter(|(name, _)| !name.is_empty()) {
                found.entry(name.clone()).or_default().push(origin);
            }
        }
    }
    found
        .into_iter()
        .map(|(name, origins)| DiscoveredObject { name, origins })
        .collect()
}

// === rule sets ===

/// What differs between the rule sets.
struct Rules {
    /// Whether `items` of plain `configMap`/`secret` volumes narrow the keys.
    narrow_plain_volumes: bool,
    /// Whether `envFrom` and `env[].valueFrom` of initContainers count.
    init_container_env: bool,
}

const NATIVE: Rules = Rules {
    narrow_plain_volumes: true,
    init_container_env: true,
};

const WAVE: Rules = Rules {
    narrow_plain_volumes: false,
    init_container_env: false,
};

// === the walk ===

fn walk(spec: &PodSpec, rules: &Rules) -> Vec<Discovered> {
    let mut found = Found::default();
    for volume in spec.volumes.iter().flatten() {
        found.volume(volume, rules);
    }
    for container in &spec.containers {
        found.container(container, "container");
    }
    if rules.init_container_env {
        for container in spec.init_containers.iter().flatten() {
            found.container(container, "initContainer");
        }
    }
    found.into_sorted()
}

/// Occurrences merged per object, keyed by (kind order, name).
#[derive(Default)]
struct Found(BTreeMap<(u8, String), Discovered>);

impl Found {
    fn volume(&mut self, volume: &Volume, rules: &Rules) {
        let origin = || format!("volume {:?}", volume.name);
        if let Some(cm) = &volume.config_map {
            let keys = plain_volume_keys(cm.items.as_deref(), rules);
            self.add(ObjectKind::ConfigMap, &cm.name, keys, cm.optional, origin());
        }
        if let Some(secret) = &volume.secret {
            let keys = plain_volume_keys(secret.items.as_deref(), rules);
            let name = secret.secret_name.as_deref().unwrap_or_default();
            self.add(ObjectKind::Secret, name, keys, secret.optional, origin());
        }
        let projections = volume
            .projected
            .iter()
            .flat_map(|p| p.sources.iter().flatten());
        for projection in projections {
            self.projection(projection, &format!("projected volume {:?}", volume.name));
        }
    }

    fn projection(&mut self, projection: &VolumeProjection, origin: &str) {
        if let Some(cm) = &projection.config_map {
            let keys = item_keys(cm.items.as_deref());
            self.add(
                ObjectKind::ConfigMap,
                &cm.name,
                keys,
                cm.optional,
                origin.to_owned(),
            );
        }
        if let Some(secret) = &projection.secret {
            let keys = item_keys(secret.items.as_deref());
            self.add(
                ObjectKind::Secret,
                &secret.name,
                keys,
                secret.optional,
                origin.to_owned(),
            );
        }
    }

    fn container(&mut self, container: &Container, role: &str) {
        for env_from in container.env_from.iter().flatten() {
            self.env_from(env_from, &format!("envFrom in {role} {:?}", container.name));
        }
        for env in container.env.iter().flatten() {
            self.env(env, role, &container.name);
        }
    }

    fn env_from(&mut self, env_from: &EnvFromSource, origin: &str) {
        if let Some(cm) = &env_from.config_map_ref {
            self.add(
                ObjectKind::ConfigMap,
                &cm.name,
                KeySelection::All,
                cm.optional,
                origin.to_owned(),
            );
        }
        if let Some(secret) = &env_from.secret_ref {
            let origin = origin.to_owned();
            self.add(
                ObjectKind::Secret,
                &secret.name,
                KeySelection::All,
                secret.optional,
                origin,
            );
        }
    }

    fn env(&mut self, env: &EnvVar, role: &str, container: &str) {
        let Some(source) = &env.value_from else {
            return;
        };
        let origin = || format!("env {} in {role} {container:?}", env.name);
        if let Some(sel) = &source.config_map_key_ref {
            let keys = KeySelection::one(sel.key.clone());
            self.add(
                ObjectKind::ConfigMap,
                &sel.name,
                keys,
                sel.optional,
                origin(),
            );
        }
        if let Some(sel) = &source.secret_key_ref {
            let keys = KeySelection::one(sel.key.clone());
            self.add(ObjectKind::Secret, &sel.name, keys, sel.optional, origin());
        }
    }

    fn add(
        &mut self,
        kind: ObjectKind,
        name: &str,
        keys: KeySelection,
        optional: Option<bool>,
        origin: String,
    ) {
        if name.is_empty() {
            return;
        }
        let optional = optional.unwrap_or(false);
        let entry = self
            .0
            .entry((kind_order(kind), name.to_owned()))
            .or_insert_with(|| Discovered {
                kind,
                name: name.to_owned(),
                keys: keys.clone(),
                optional,
                origins: Vec::new(),
            });
        entry.keys = entry.keys.union(&keys);
        entry.optional &= optional;
        if !entry.origins.contains(&origin) {
            entry.origins.push(origin);
        }
    }

    fn into_sorted(self) -> Vec<Discovered> {
        self.0.into_values().collect()
    }
}

/// Keys of a plain `configMap`/`secret` volume under `rules`.
fn plain_volume_keys(items: Option<&[KeyToPath]>, rules: &Rules) -> KeySelection {
    if rules.narrow_plain_volumes {
        item_keys(items)
    } else {
        KeySelection::All
    }
}

/// The keys `items` select: all keys when `items` is absent or empty (the kubelet
/// projects every key then).
fn item_keys(items: Option<&[KeyToPath]>) -> KeySelection {
    match items {
        Some(items) if !items.is_empty() => {
            KeySelection::Only(items.iter().map(|item| item.key.clone()).collect())
        }
        _ => KeySelection::All,
    }
}

/// Sort order of kinds: ConfigMaps before Secrets.
fn kind_order(kind: ObjectKind) -> u8 {
    match kind {
        ObjectKind::ConfigMap => 0,
        ObjectKind::Secret => 1,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        ConfigMapEnvSource, ConfigMapKeySelector, ConfigMapProjection, ConfigMapVolumeSource,
        EnvVarSource, ProjectedVolumeSource, SecretEnvSource, SecretKeySelector, SecretProjection,
        SecretVolumeSource,
    };

    use super::*;

    fn mk_items(keys: &[&str]) -> Option<Vec<KeyToPath>> {
        Some(
            keys.iter()
                .map(|k| KeyToPath {
                    key: (*k).to_owned(),
                    path: format!("p/{k}"),
                    ..KeyToPath::default()
                })
                .collect(),
        )
    }

    fn mk_cm_volume(vol: &str, name: &str, items: &[&str], optional: Option<bool>) -> Volume {
        Volume {
            name: vol.to_owned(),
            config_map: Some(ConfigMapVolumeSource {
                name: name.to_owned(),
                items: if items.is_empty() {
                    None
                } else {
                    mk_items(items)
                },
                optional,
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        }
    }

    fn mk_secret_volume(vol: &str, name: &str, items: &[&str]) -> Volume {
        Volume {
            name: vol.to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(name.to_owned()),
                items: if items.is_empty() {
                    None
                } else {
                    mk_items(items)
                },
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        }
    }

    fn mk_projected(vol: &str, cm: (&str, &[&str]), secret: (&str, &[&str])) -> Volume {
        let cm_items = if cm.1.is_empty() {
            None
        } else {
            mk_items(cm.1)
        };
        let secret_items = if secret.1.is_empty() {
            None
        } else {
            mk_items(secret.1)
        };
        Volume {
            name: vol.to_owned(),
            projected: Some(ProjectedVolumeSource {
                sources: Some(vec![
                    VolumeProjection {
                        config_map: Some(ConfigMapProjection {
                            name: cm.0.to_owned(),
                            items: cm_items,
                            optional: None,
                        }),
                        ..VolumeProjection::default()
                    },
                    VolumeProjection {
                        secret: Some(SecretProjection {
                            name: secret.0.to_owned(),
                            items: secret_items,
                            optional: None,
                        }),
                        ..VolumeProjection::default()
                    },
                ]),
                ..ProjectedVolumeSource::default()
            }),
            ..Volume::default()
        }
    }

    fn mk_env_from_cm(name: &str, optional: Option<bool>) -> EnvFromSource {
        EnvFromSource {
            config_map_ref: Some(ConfigMapEnvSource {
                name: name.to_owned(),
                optional,
            }),
            ..EnvFromSource::default()
        }
    }

    fn mk_env_from_secret(name: &str) -> EnvFromSource {
        EnvFromSource {
            secret_ref: Some(SecretEnvSource {
                name: name.to_owned(),
                optional: None,
            }),
            ..EnvFromSource::default()
        }
    }

    fn mk_env_cm_key(var: &str, name: &str, key: &str, optional: Option<bool>) -> EnvVar {
        EnvVar {
            name: var.to_owned(),
            value_from: Some(EnvVarSource {
                config_map_key_ref: Some(ConfigMapKeySelector {
                    name: name.to_owned(),
                    key: key.to_owned(),
                    optional,
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        }
    }

    fn mk_env_secret_key(var: &str, name: &str, key: &str) -> EnvVar {
        EnvVar {
            name: var.to_owned(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: name.to_owned(),
                    key: key.to_owned(),
                    optional: None,
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        }
    }

    fn mk_container(name: &str, env_from: Vec<EnvFromSource>, env: Vec<EnvVar>) -> Container {
        Container {
            name: name.to_owned(),
            env_from: Some(env_from),
            env: Some(env),
            ..Container::default()
        }
    }

    fn mk_spec(volumes: Vec<Volume>, containers: Vec<Container>, init: Vec<Container>) -> PodSpec {
        PodSpec {
            volumes: Some(volumes),
            containers,
            init_containers: Some(init),
            ..PodSpec::default()
        }
    }

    fn only(keys: &[&str]) -> KeySelection {
        KeySelection::Only(keys.iter().map(|k| (*k).to_owned()).collect())
    }

    fn find<'a>(found: &'a [Discovered], kind: ObjectKind, name: &str) -> &'a Discovered {
        found
            .iter()
            .find(|d| d.kind == kind && d.name == name)
            .unwrap_or_else(|| panic!("{kind:?} {name} not discovered in {found:?}"))
    }

    #[test]
    fn empty_pod_spec_discovers_nothing() {
        assert!(native(&PodSpec::default()).is_empty());
        assert!(wave(&PodSpec::default()).is_empty());
    }

    #[test]
    fn native_volume_items_narrow_keys() {
        let spec = mk_spec(
            vec![
                mk_cm_volume("cfg", "app", &["a", "b"], None),
                mk_secret_volume("s", "db", &["pw"]),
            ],
            vec![],
            vec![],
        );
        let found = native(&spec);
        assert_eq!(
            find(&found, ObjectKind::ConfigMap, "app").keys,
            only(&["a", "b"])
        );
        assert_eq!(find(&found, ObjectKind::Secret, "db").keys, only(&["pw"]));
    }

    #[test]
    fn wave_plain_volumes_use_all_keys_even_with_items() {
        let spec = mk_spec(
            vec![
                mk_cm_volume("cfg", "app", &["a"], None),
                mk_secret_volume("s", "db", &["pw"]),
            ],
            vec![],
            vec![],
        );
        let found = wave(&spec);
        assert_eq!(
            find(&found, ObjectKind::ConfigMap, "app").keys,
            KeySelection::All
        );
        assert_eq!(
            find(&found, ObjectKind::Secret, "db").keys,
            KeySelection::All
        );
    }

    #[test]
    fn volume_without_items_uses_all_keys() {
        let spec = mk_spec(vec![mk_cm_volume("cfg", "app", &[], None)], vec![], vec![]);
        assert_eq!(
            find(&native(&spec), ObjectKind::ConfigMap, "app").keys,
            KeySelection::All
        );
    }

    #[test]
    fn empty_items_list_means_all_keys() {
        let mut volume = mk_cm_volume("cfg", "app", &[], None);
        if let Some(cm) = volume.config_map.as_mut() {
            cm.items = Some(vec![]);
        }
        let spec = mk_spec(vec![volume], vec![], vec![]);
        assert_eq!(
            find(&native(&spec), ObjectKind::ConfigMap, "app").keys,
            KeySelection::All
        );
    }

    #[test]
    fn projected_sources_narrow_to_items_in_both_rule_sets() {
        let spec = mk_spec(
            vec![mk_projected("p", ("app", &["x"]), ("db", &[]))],
            vec![],
            vec![],
        );
        for found in [native(&spec), wave(&spec)] {
            assert_eq!(
                find(&found, ObjectKind::ConfigMap, "app").keys,
                only(&["x"])
            );
            assert_eq!(
                find(&found, ObjectKind::Secret, "db").keys,
                KeySelection::All
            );
            assert_eq!(
                find(&found, ObjectKind::ConfigMap, "app").origins,
                vec![r#"projected volume "p""#.to_owned()]
            );
        }
    }

    #[test]
    fn env_from_covers_all_keys() {
        let c = mk_container(
            "app",
            vec![mk_env_from_cm("app", None), mk_env_from_secret("db")],
            vec![],
        );
        let found = native(&mk_spec(vec![], vec![c], vec![]));
        assert_eq!(
            find(&found, ObjectKind::ConfigMap, "app").keys,
            KeySelection::All
        );
        assert_eq!(
            find(&found, ObjectKind::Secret, "db").keys,
            KeySelection::All
        );
        assert_eq!(
            find(&found, ObjectKind::Secret, "db").origins,
            vec![r#"envFrom in container "app""#.to_owned()]
        );
    }

    #[test]
    fn config_map_key_ref_narrows_to_that_key() {
        let c = mk_container(
            "app",
            vec![],
            vec![
                mk_env_cm_key("FOO", "app", "foo", None),
                mk_env_secret_key("PW", "db", "pw"),
            ],
        );
        let found = native(&mk_spec(vec![], vec![c], vec![]));
        assert_eq!(
            find(&found, ObjectKind::ConfigMap, "app").keys,
            only(&["foo"])
        );
        assert_eq!(find(&found, ObjectKind::Secret, "db").keys, only(&["pw"]));
        assert_eq!(
            find(&found, ObjectKind::ConfigMap, "app").origins,
            vec![r#"env FOO in container "app""#.to_owned()]
        );
    }

    #[test]
    fn native_includes_init_container_env_but_wave_does_not() {
        let init = mk_container(
            "init",
            vec![mk_env_from_secret("boot")],
            vec![mk_env_cm_key("X", "init-cfg", "x", None)],
        );
        let spec = mk_spec(
            vec![],
            vec![mk_container("app", vec![], vec![])],
            vec![init],
        );
        let found = native(&spec);
        assert_eq!(
            find(&found, ObjectKind::ConfigMap, "init-cfg").origins,
            vec![r#"env X in initContainer "init""#.to_owned()]
        );
        find(&found, ObjectKind::Secret, "boot");
        assert!(wave(&spec).is_empty());
    }

    #[test]
    fn wave_includes_container_env() {
        let c = mk_container(
            "app",
            vec![mk_env_from_secret("db")],
            vec![mk_env_cm_key("X", "cfg", "x", None)],
        );
        let found = wave(&mk_spec(vec![], vec![c], vec![]));
        assert_eq!(
            find(&found, ObjectKind::Secret, "db").keys,
            KeySelection::All
        );
        assert_eq!(
            find(&found, ObjectKind::ConfigMap, "cfg").keys,
            only(&["x"])
        );
    }

    #[test]
    fn occurrences_merge_keys_and_all_absorbs() {
        let c = mk_container(
            "app",
            vec![],
            vec![
                mk_env_cm_key("A", "app", "a", None),
                mk_env_cm_key("B", "app", "b", None),
            ],
        );
        let found = native(&mk_spec(vec![], vec![c.clone()], vec![]));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].keys, only(&["a", "b"]));
        assert_eq!(found[0].origins.len(), 2);

        let spec = mk_spec(vec![mk_cm_volume("v", "app", &[], None)], vec![c], vec![]);
        assert_eq!(native(&spec)[0].keys, KeySelection::All);
    }

    #[test]
    fn optional_only_when_every_occurrence_is_optional() {
        let all_optional = mk_spec(
            vec![mk_cm_volume("v", "app", &[], Some(true))],
            vec![mk_container(
                "c",
                vec![mk_env_from_cm("app", Some(true))],
                vec![],
            )],
            vec![],
        );
        assert!(native(&all_optional)[0].optional);

        let mixed = mk_spec(
            vec![mk_cm_volume("v", "app", &[], Some(true))],
            vec![mk_container(
                "c",
                vec![],
                vec![mk_env_cm_key("A", "app", "a", Some(false))],
            )],
            vec![],
        );
        assert!(!native(&mixed)[0].optional);
    }

    #[test]
    fn configmap_and_secret_with_same_name_stay_separate_and_sorted() {
        let spec = mk_spec(
            vec![
                mk_secret_volume("s", "same", &[]),
                mk_cm_volume("z", "zeta", &[], None),
                mk_cm_volume("c", "same", &[], None),
            ],
            vec![],
            vec![],
        );
        let found: Vec<_> = native(&spec)
            .into_iter()
            .map(|d| (d.kind, d.name))
            .collect();
        assert_eq!(
            found,
            vec![
                (ObjectKind::ConfigMap, "same".to_owned()),
                (ObjectKind::ConfigMap, "zeta".to_owned()),
                (ObjectKind::Secret, "same".to_owned()),
            ]
        );
    }

    #[test]
    fn empty_names_are_skipped() {
        let mut no_secret_name = mk_secret_volume("s", "", &[]);
        if let Some(secret) = no_secret_name.secret.as_mut() {
            secret.secret_name = None;
        }
        let spec = mk_spec(
            vec![mk_cm_volume("v", "", &[], None), no_secret_name],
            vec![mk_container(
                "c",
                vec![mk_env_from_secret("")],
                vec![mk_env_cm_key("A", "", "a", None)],
            )],
            vec![],
        );
        assert!(native(&spec).is_empty());
    }

    #[test]
    fn same_origin_is_recorded_once() {
        let c = mk_container(
            "c",
            vec![mk_env_from_cm("app", None), mk_env_from_cm("app", None)],
            vec![],
        );
        let found = native(&mk_spec(vec![], vec![c], vec![]));
        assert_eq!(
            found[0].origins,
            vec![r#"envFrom in container "c""#.to_owned()]
        );
    }

    #[test]
    fn plain_volume_origin_names_the_volume() {
        let spec = mk_spec(vec![mk_cm_volume("cfg", "app", &[], None)], vec![], vec![]);
        assert_eq!(native(&spec)[0].origins, vec![r#"volume "cfg""#.to_owned()]);
    }

    fn mk_csi_volume(vol: &str, driver: &str, attributes: &[(&str, &str)]) -> Volume {
        let attributes = attributes
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Volume {
            name: vol.to_owned(),
            csi: Some(k8s_openapi::api::core::v1::CSIVolumeSource {
                driver: driver.to_owned(),
                volume_attributes: Some(attributes),
                ..Default::default()
            }),
            ..Volume::default()
        }
    }

    #[test]
    fn csi_rule_finds_volumes_of_its_driver_by_their_attribute_once_per_object() {
        let rule = PodSpecRule::csi_volume("secrets-store.csi.k8s.io", "secretProviderClass");
        let class = |name| [("secretProviderClass", name)];
        let spec = mk_spec(
            vec![
                mk_csi_volume("b", "secrets-store.csi.k8s.io", &class("vault")),
                mk_csi_volume("a", "secrets-store.csi.k8s.io", &class("aws")),
                mk_csi_volume("again", "secrets-store.csi.k8s.io", &class("vault")),
                mk_csi_volume("other", "example.com", &class("ignored")),
                mk_csi_volume("empty", "secrets-store.csi.k8s.io", &class("")),
                mk_csi_volume("none", "secrets-store.csi.k8s.io", &[("x", "y")]),
                mk_cm_volume("cfg", "app", &[], None),
            ],
            vec![],
            vec![],
        );
        let found = by_rule(&spec, &rule);
        let names: Vec<&str> = found.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["aws", "vault"]);
        assert_eq!(
            found[1].origins,
            [r#"csi volume "b""#, r#"csi volume "again""#]
        );
    }
}
