//! Shared input generators of the fuzz targets: workloads, pod specs and
//! annotations built from `arbitrary` data, biased towards the names nudge's
//! parsers look for so that the fuzzer reaches deep code quickly, with arbitrary
//! strings mixed in everywhere.

use std::collections::BTreeMap;

use arbitrary::{Arbitrary, Result, Unstructured};
use k8s_openapi::api::core::v1::{
    ConfigMapEnvSource, ConfigMapKeySelector, ConfigMapProjection, ConfigMapVolumeSource,
    Container, EnvFromSource, EnvVar, EnvVarSource, KeyToPath, PodSchedulingGate, PodSpec,
    PodTemplateSpec, ProjectedVolumeSource, SecretEnvSource, SecretKeySelector, SecretProjection,
    SecretVolumeSource, Volume, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use nudge::__private::annotations::{self, AnnotationScheme};
use nudge::__private::model::{
    Rollout, Scope, SourceCatalog, SourceName, WAVE_SCHEDULING_DISABLED, Workload, WorkloadId,
    WorkloadKind,
};
use serde_json::{Value, json};

/// Either one of `choices` or an arbitrary string (one time in four).
pub fn pick(u: &mut Unstructured<'_>, choices: &[&str]) -> Result<String> {
    if u.ratio(1, 4)? {
        return String::arbitrary(u);
    }
    Ok((*u.choose(choices)?).to_owned())
}

/// Object names: a few shared ones, so annotations and the pod spec meet.
pub const NAMES: &[&str] = &[
    "cfg",
    "app-config",
    "db",
    "db.creds",
    "a",
    "b-",
    "Cfg",
    "",
    "x/y",
    "ns/cfg",
    "a..b",
];

/// Keys inside ConfigMaps and Secrets.
pub const DATA_KEYS: &[&str] = &["k", "app.toml", "password", "", "a=b", "é"];

/// Env var names, including the ones Reloader keeps for the names above.
pub const ENV_NAMES: &[&str] = &[
    "FOO",
    "STAKATER_CFG_CONFIGMAP",
    "STAKATER_APP_CONFIG_CONFIGMAP",
    "STAKATER_DB_SECRET",
    "STAKATER_DB_CREDS_SECRET",
    "STAKATER_A_SECRET",
    "STAKATER_B__CONFIGMAP",
];

/// Prefixes of the native scheme; the other tools' own prefixes are valid DNS
/// subdomains too, so an installation may (unwisely) pick one.
pub const PREFIXES: &[&str] = &[
    "nudge.dev",
    "k8s-consul-mutator.io",
    "wave.pusher.com",
    "reloader.stakater.com",
    "example.com",
];

/// Annotation values worth trying on any key.
pub const VALUES: &[&str] = &[
    "true",
    "false",
    "1",
    "T",
    "FALSE",
    "",
    "cfg",
    "app-config",
    "db",
    "cfg,db",
    " cfg , ,db,",
    "ns/cfg",
    "configmap/cfg",
    "secret/db,configmap/app-config",
    "app/config",
    "/abs",
    "a b",
    "30s",
    "2m 30s",
    "1.5h",
    "1h30m",
    "+0",
    "300ms",
    "µs",
    ".5s",
    "rollout",
    "restart",
    "default-scheduler",
];

/// Native names after `<prefix>/`.
const NATIVE_NAMES: &[&str] = &[
    "auto",
    "exclude",
    "debounce",
    "min-interval",
    "ignore",
    "config-hash",
    "last-updated",
    "run-on-change",
    "reloader-state",
    "scheduling-gate",
    "awaiting-config",
    "checksum-a",
    "configmap-a",
    "secret-a",
    "consul-a",
    "consul-b",
    "key-a",
    "configmap-",
    "unknown",
];

/// Keys of the other schemes.
const OTHER_KEYS: &[&str] = &[
    annotations::WAVE_UPDATE_ON_CONFIG_CHANGE,
    annotations::WAVE_EXTRA_CONFIGMAPS,
    annotations::WAVE_EXTRA_SECRETS,
    annotations::WAVE_CONFIG_HASH,
    WAVE_SCHEDULING_DISABLED,
    annotations::MUTATOR_SKIP,
    annotations::MUTATOR_LAST_UPDATED,
    "k8s-consul-mutator.io/key-a",
    "k8s-consul-mutator.io/key-b",
    "k8s-consul-mutator.io/checksum-a",
    "k8s-consul-mutator.io/key-",
    annotations::RELOADER_AUTO,
    annotations::RELOADER_CONFIGMAP_AUTO,
    annotations::RELOADER_SECRET_AUTO,
    annotations::RELOADER_CONFIGMAP_RELOAD,
    annotations::RELOADER_SECRET_RELOAD,
    annotations::RELOADER_IGNORE,
    annotations::RELOADER_SEARCH,
    annotations::RELOADER_MATCH,
    annotations::RELOADER_CONFIGMAPS_EXCLUDE,
    annotations::RELOADER_SECRETS_EXCLUDE,
    annotations::RELOADER_PAUSE_PERIOD,
    annotations::RELOADER_ROLLOUT_STRATEGY,
    annotations::RELOADER_LAST_RELOADED_FROM,
];

/// A slot-ish suffix: short, mostly from the slot alphabet.
fn slot(u: &mut Unstructured<'_>) -> Result<String> {
    if u.ratio(1, 8)? {
        // Long enough to cross the 63-character limits.
        let len = u.int_in_range(40..=70)?;
        return Ok("s".repeat(len));
    }
    pick(u, &["a", "b", "x1", "-", "A", "a.b", "a_b"])
}

/// One annotation key of any scheme, under `prefix` for the native one.
pub fn annotation_key(u: &mut Unstructured<'_>, prefix: &str) -> Result<String> {
    Ok(match u.int_in_range(0..=5)? {
        0 | 1 => format!("{prefix}/{}", u.choose(NATIVE_NAMES)?),
        2 => {
            let source = pick(u, &["configmap", "secret", "consul", "vault", "checksum"])?;
            format!("{prefix}/{source}-{}", slot(u)?)
        }
        3 => format!("k8s-consul-mutator.io/key-{}", slot(u)?),
        4 => (*u.choose(OTHER_KEYS)?).to_owned(),
        _ => String::arbitrary(u)?,
    })
}

/// A map of annotations of every scheme.
pub fn annotations_map(u: &mut Unstructured<'_>, prefix: &str) -> Result<BTreeMap<String, String>> {
    let mut map = BTreeMap::new();
    let count = u.int_in_range(0..=8)?;
    for _ in 0..count {
        map.insert(annotation_key(u, prefix)?, pick(u, VALUES)?);
    }
    Ok(map)
}

fn optional(u: &mut Unstructured<'_>) -> Result<Option<bool>> {
    Ok(match u.int_in_range(0..=2)? {
        0 => None,
        1 => Some(false),
        _ => Some(true),
    })
}

fn items(u: &mut Unstructured<'_>) -> Result<Option<Vec<KeyToPath>>> {
    if u.ratio(1, 2)? {
        return Ok(None);
    }
    let count = u.int_in_range(0..=2)?;
    let mut items = Vec::new();
    for _ in 0..count {
        items.push(KeyToPath {
            key: pick(u, DATA_KEYS)?,
            path: "p".to_owned(),
            ..KeyToPath::default()
        });
    }
    Ok(Some(items))
}

fn volume(u: &mut Unstructured<'_>) -> Result<Volume> {
    let mut volume = Volume {
        name: pick(u, &["v", "w"])?,
        ..Volume::default()
    };
    match u.int_in_range(0..=2)? {
        0 => {
            volume.config_map = Some(ConfigMapVolumeSource {
                name: pick(u, NAMES)?,
                items: items(u)?,
                optional: optional(u)?,
                ..ConfigMapVolumeSource::default()
            })
        }
        1 => {
            volume.secret = Some(SecretVolumeSource {
                secret_name: if u.ratio(1, 8)? {
                    None
                } else {
                    Some(pick(u, NAMES)?)
                },
                items: items(u)?,
                optional: optional(u)?,
                ..SecretVolumeSource::default()
            })
        }
        _ => {
            let count = u.int_in_range(0..=3)?;
            let mut sources = Vec::new();
            for _ in 0..count {
                let mut source = VolumeProjection::default();
                if u.arbitrary()? {
                    source.config_map = Some(ConfigMapProjection {
                        name: pick(u, NAMES)?,
                        items: items(u)?,
                        optional: optional(u)?,
                    });
                } else {
                    source.secret = Some(SecretProjection {
                        name: pick(u, NAMES)?,
                        items: items(u)?,
                        optional: optional(u)?,
                    });
                }
                sources.push(source);
            }
            volume.projected = Some(ProjectedVolumeSource {
                sources: Some(sources),
                ..ProjectedVolumeSource::default()
            });
        }
    }
    Ok(volume)
}

fn env_var(u: &mut Unstructured<'_>) -> Result<EnvVar> {
    let name = pick(u, ENV_NAMES)?;
    let (value, value_from) = match u.int_in_range(0..=3)? {
        0 => (Some(pick(u, &["1", "abc", ""])?), None),
        1 => (None, None),
        2 => (
            None,
            Some(EnvVarSource {
                config_map_key_ref: Some(ConfigMapKeySelector {
                    name: pick(u, NAMES)?,
                    key: pick(u, DATA_KEYS)?,
                    optional: optional(u)?,
                }),
                ..EnvVarSource::default()
            }),
        ),
        _ => (
            None,
            Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: pick(u, NAMES)?,
                    key: pick(u, DATA_KEYS)?,
                    optional: optional(u)?,
                }),
                ..EnvVarSource::default()
            }),
        ),
    };
    Ok(EnvVar {
        name,
        value,
        value_from,
    })
}

fn env_from(u: &mut Unstructured<'_>) -> Result<EnvFromSource> {
    let mut source = EnvFromSource::default();
    if u.arbitrary()? {
        source.config_map_ref = Some(ConfigMapEnvSource {
            name: pick(u, NAMES)?,
            optional: optional(u)?,
        });
    } else {
        source.secret_ref = Some(SecretEnvSource {
            name: pick(u, NAMES)?,
            optional: optional(u)?,
        });
    }
    if u.ratio(1, 4)? {
        source.prefix = Some("P_".to_owned());
    }
    Ok(source)
}

fn container(u: &mut Unstructured<'_>) -> Result<Container> {
    let mut env = Vec::new();
    for _ in 0..u.int_in_range(0..=3)? {
        env.push(env_var(u)?);
    }
    let mut from = Vec::new();
    for _ in 0..u.int_in_range(0..=2)? {
        from.push(env_from(u)?);
    }
    Ok(Container {
        name: pick(u, &["app", "init", "side"])?,
        env: (!env.is_empty() || u.arbitrary()?).then_some(env),
        env_from: (!from.is_empty()).then_some(from),
        ..Container::default()
    })
}

/// A pod spec referencing ConfigMaps and Secrets in every way discovery knows.
pub fn pod_spec(u: &mut Unstructured<'_>) -> Result<PodSpec> {
    let mut containers = Vec::new();
    for _ in 0..u.int_in_range(0..=3)? {
        containers.push(container(u)?);
    }
    let init = if u.arbitrary()? {
        let mut init = Vec::new();
        for _ in 0..u.int_in_range(0..=2)? {
            init.push(container(u)?);
        }
        Some(init)
    } else {
        None
    };
    let volumes = if u.arbitrary()? {
        let mut volumes = Vec::new();
        for _ in 0..u.int_in_range(0..=4)? {
            volumes.push(volume(u)?);
        }
        Some(volumes)
    } else {
        None
    };
    let scheduling_gates = if u.ratio(1, 4)? {
        Some(vec![PodSchedulingGate {
            name: pick(u, &["nudge.dev/awaiting-config", "other"])?,
        }])
    } else {
        None
    };
    let scheduler_name = if u.ratio(1, 4)? {
        Some(pick(u, &["wave-invalid-scheduler", "default-scheduler"])?)
    } else {
        None
    };
    Ok(PodSpec {
        containers,
        init_containers: init,
        volumes,
        scheduling_gates,
        scheduler_name,
        ..PodSpec::default()
    })
}

/// The kinds nudge stamps out of the box.
pub fn kinds() -> Vec<WorkloadKind> {
    let builtin = nudge::__private::targets::builtin_kinds();
    let batch = [
        nudge::__private::targets::cron_job_kind(),
        nudge::__private::targets::job_kind(),
    ];
    builtin
        .into_iter()
        .map(|(kind, _)| kind)
        .chain(batch)
        .collect()
}

/// Sources as a typical installation configures them.
pub fn catalog(with_consul: bool) -> SourceCatalog {
    let object_name = |r: &str| annotations::check_object_name(r).map_err(str::to_owned);
    let catalog = SourceCatalog::new()
        .with(
            SourceName::new("configmap").unwrap(),
            Scope::Namespaced,
            object_name,
        )
        .with(
            SourceName::new("secret").unwrap(),
            Scope::Namespaced,
            object_name,
        );
    if with_consul {
        catalog.with(
            SourceName::new("consul").unwrap(),
            Scope::External,
            nudge::__private::sources::consul::check_key,
        )
    } else {
        catalog
    }
}

/// An annotation scheme with one of [`PREFIXES`].
pub fn scheme(u: &mut Unstructured<'_>) -> Result<AnnotationScheme> {
    let prefix = *u.choose(PREFIXES)?;
    Ok(AnnotationScheme::new(prefix).with_reloader_auto_all(u.ratio(1, 4)?))
}

/// A workload of any kind, annotated under `prefix`.
pub fn workload(u: &mut Unstructured<'_>, prefix: &str) -> Result<Workload> {
    let kind = u.choose(&kinds())?.clone();
    let annotations = annotations_map(u, prefix)?;
    let template_annotations = annotations_map(u, prefix)?;
    let spec = if u.ratio(1, 8)? {
        None
    } else {
        Some(pod_spec(u)?)
    };
    let rollout = *u.choose(&[Rollout::Complete, Rollout::InProgress, Rollout::Unknown])?;
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            annotations: (!template_annotations.is_empty() || u.arbitrary()?)
                .then_some(template_annotations),
            ..ObjectMeta::default()
        }),
        spec,
    };
    let id = WorkloadId::new(kind, "shop", "web");
    let ordered_pods = u.arbitrary()?;
    Ok(nudge::__private::crate_fns::workload(
        id,
        annotations,
        template,
        rollout,
        ordered_pods,
    ))
}

/// A small arbitrary JSON value, for the places a review may carry garbage.
pub fn json_value(u: &mut Unstructured<'_>, depth: u8) -> Result<Value> {
    let limit = if depth == 0 { 3 } else { 5 };
    Ok(match u.int_in_range(0..=limit)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => json!(u.arbitrary::<i64>()?),
        3 => Value::String(pick(u, VALUES)?),
        4 => {
            let mut items = Vec::new();
            for _ in 0..u.int_in_range(0..=3)? {
                items.push(json_value(u, depth - 1)?);
            }
            Value::Array(items)
        }
        _ => {
            let mut map = serde_json::Map::new();
            for _ in 0..u.int_in_range(0..=3)? {
                map.insert(
                    pick(u, &["name", "annotations", "spec"])?,
                    json_value(u, depth - 1)?,
                );
            }
            Value::Object(map)
        }
    })
}

/// The JSON object of a workload of `kind`: its pod template where the kind keeps
/// it, sometimes with a piece of garbage somewhere.
pub fn workload_json(u: &mut Unstructured<'_>, kind: &WorkloadKind, prefix: &str) -> Result<Value> {
    let mut metadata = serde_json::Map::new();
    if !u.ratio(1, 16)? {
        metadata.insert("name".into(), json!(pick(u, &["web", ""])?));
    }
    if u.ratio(3, 4)? {
        metadata.insert(
            "namespace".into(),
            json!(pick(u, &["shop", "kube-system", ""])?),
        );
    }
    if u.ratio(1, 8)? {
        metadata.insert("generateName".into(), json!("web-"));
    }
    metadata.insert("annotations".into(), json!(annotations_map(u, prefix)?));
    let template = json!({
        "metadata": {"annotations": annotations_map(u, prefix)?, "labels": {"app": "web"}},
        "spec": pod_spec(u)?,
    });
    let mut object = json!({
        "apiVersion": kind.api_version(),
        "kind": kind.as_str(),
        "metadata": metadata,
        "spec": {},
    });
    // Put the template at the kind's path (`spec.template`,
    // `spec.jobTemplate.spec.template`).
    let segments = nudge::__private::crate_fns::template_segments(kind);
    let mut at = &mut object;
    for (index, segment) in segments.iter().enumerate() {
        let map = at.as_object_mut().expect("built as objects");
        if index + 1 == segments.len() {
            map.insert((*segment).to_owned(), template.clone());
            break;
        }
        at = map.entry(*segment).or_insert_with(|| json!({}));
    }
    if kind.as_str() == "StatefulSet" && u.arbitrary()? {
        object["spec"]["podManagementPolicy"] = json!(pick(u, &["Parallel", "OrderedReady"])?);
    }
    // Garbage: a wrong type at one of the places nudge reads.
    if u.ratio(1, 8)? {
        let place = *u.choose(&[
            "/metadata/annotations",
            "/metadata",
            "/spec",
            "/metadata/name",
        ])?;
        if let Some(slot) = object.pointer_mut(place) {
            *slot = json_value(u, 2)?;
        }
    }
    Ok(object)
}

// === the admission handler ===

pub mod admission {
    //! An admission handler as `nudge run` builds it, over a reader that answers
    //! at once, and a runtime to drive it from a synchronous fuzz target.

    use std::collections::BTreeMap;
    use std::sync::{Arc, OnceLock};
    use std::time::Duration;

    use nudge::__private::annotations::AnnotationScheme;
    use nudge::__private::fingerprint::{self, DataValue, ObjectData, ObjectKind, Observation};
    use nudge::__private::model::{Algorithm, Tracked};
    use nudge::__private::stamp::{InputReader, ReadError};
    use nudge::__private::webhook::{Admission, AdmissionParts, AdmissionSettings, ReviewAnswer};

    /// Answers at once: `db` is absent, `a` cannot be read, anything else exists
    /// with content derived from its name, fingerprinted by the algorithm asked.
    struct Instant;

    #[async_trait::async_trait]
    impl InputReader for Instant {
        async fn read(&self, tracked: &Tracked) -> Result<Observation, ReadError> {
            let name = tracked.reference().name();
            match name {
                "db" => return Ok(Observation::Absent),
                "a" => {
                    return Err(ReadError {
                        category: "backend",
                        message: "unreachable".into(),
                    });
                }
                _ => {}
            }
            let data = ObjectData(BTreeMap::from([(
                "k".to_owned(),
                DataValue::Text(name.to_owned()),
            )]));
            let kind = ObjectKind::of_source(tracked.reference().source())
                .unwrap_or(ObjectKind::ConfigMap);
            let found = match tracked.algorithm() {
                Algorithm::Md5 => fingerprint::md5_value(name.as_bytes()),
                Algorithm::Reloader => fingerprint::reloader_object(kind, &data),
                Algorithm::Wave => {
                    fingerprint::Fingerprint::Wave(fingerprint::wave_fragment(&data))
                }
                _ => fingerprint::native_value(name.as_bytes()),
            };
            Ok(Observation::Present(found))
        }
    }

    /// The handler, with every built-in kind and a Consul source.
    pub fn handler(prefix: &str, stamp_on_delete: bool) -> Arc<Admission> {
        Arc::new(Admission::new(
            AdmissionSettings {
                scheme: AnnotationScheme::new(prefix),
                stamp_on_delete,
                scope: nudge::__private::scope::NamespaceScope {
                    namespaces: Vec::new(),
                    ignore: vec!["kube-system".to_owned()],
                },
                observe_timeout: Duration::from_secs(5),
            },
            AdmissionParts {
                catalog: super::catalog(true),
                kinds: super::kinds(),
                fingerprints: Arc::default(),
                reader: Arc::new(Instant),
                // Snapshots on for every kind, so reviews reach that code too.
                snapshot_kinds: super::kinds().into_iter().collect(),
            },
            Arc::default(),
        ))
    }

    /// Answers `body` on a runtime shared by every run of the target.
    pub fn review(admission: &Arc<Admission>, body: &[u8]) -> ReviewAnswer {
        static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
        let runtime = RUNTIME.get_or_init(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("a runtime")
        });
        runtime.block_on(admission.review(body, None))
    }

    /// Checks what every answer must be: 200 with an `AdmissionReview` that allows
    /// (never an internal error, which is how a panic in the handler shows), or a
    /// 400 `Status` for a body without a uid. Returns the decoded patch, if any.
    pub fn check(answer: &ReviewAnswer, uid: Option<&str>) -> Option<json_patch::Patch> {
        use base64::Engine as _;
        assert_ne!(
            answer.result,
            nudge::__private::webhook::ReviewResult::Error,
            "internal error (a panic in the handler?): {}",
            answer.body
        );
        match answer.status {
            200 => {
                let response = &answer.body["response"];
                // `apiVersion` and `kind` echo the request's (kube's types), which
                // a real apiserver always sets right: not checked.
                assert_eq!(response["allowed"], true, "{}", answer.body);
                if let Some(uid) = uid {
                    assert_eq!(response["uid"], uid, "{}", answer.body);
                }
                let patch = response.get("patch")?;
                assert_eq!(response["patchType"], "JSONPatch", "{}", answer.body);
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(patch.as_str().expect("a base64 string"))
                    .expect("valid base64");
                Some(serde_json::from_slice(&bytes).expect("the patch is a JSON patch"))
            }
            400 => {
                assert_eq!(answer.body["kind"], "Status", "{}", answer.body);
                None
            }
            other => panic!("status {other}: {}", answer.body),
        }
    }
}
