//! The Secrets Store CSI preset (`[sources.kubernetes.<name>] preset =
//! "secrets-store-csi"`), with the driver's CRD installed and its
//! `SecretProviderClassPodStatus` objects written by the tests (no CSI driver
//! runs here): a rotation rolls a workload once, a pod recording the versions
//! already seen rolls nothing, a workload Reloader 2 stamped is adopted with
//! no restart, and a CRD installed after start is picked up.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::*;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use nudge::__private::fingerprint;
use nudge::config::{Config, KubernetesSourceConfig, KubernetesSourcePreset};
use serde_json::{Value, json};

const GROUP: &str = "secrets-store.csi.x-k8s.io";
const KIND: &str = "SecretProviderClassPodStatus";
/// The preset's output under `nudge.dev/auto`, for source `csi`.
const STAMP: &str = "nudge.dev/checksum-csi";

/// The driver's CRD as its chart installs it: namespaced, served at `v1`, no
/// status subresource (the driver creates the objects with their status).
fn pod_status_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("secretproviderclasspodstatuses.{GROUP}") },
        "spec": {
            "group": GROUP,
            "names": { "kind": KIND, "listKind": format!("{KIND}List"),
                       "plural": "secretproviderclasspodstatuses",
                       "singular": "secretproviderclasspodstatus" },
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "status": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                    },
                }},
            }],
        },
    })
}

fn with_preset(mut config: Config) -> Config {
    let preset = KubernetesSourceConfig::preset(KubernetesSourcePreset::SecretsStoreCsi);
    config.sources.kubernetes.insert("csi".to_owned(), preset);
    config
}

/// The test namespace's `SecretProviderClassPodStatus` API (served).
async fn pod_statuses(cluster: &TestCluster) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(GROUP, "v1", KIND);
    let (resource, _) = kube::discovery::pinned_kind(&cluster.client(), &gvk)
        .await
        .unwrap();
    Api::namespaced_with(cluster.client(), cluster.namespace(), &resource)
}

/// Writes the status the driver records for `pod` mounting `class`:
/// created, or replaced as its rotation reconciler does.
async fn record(
    api: &Api<DynamicObject>,
    namespace: &str,
    pod: &str,
    class: &str,
    objects: &[(&str, &str)],
) {
    let name = format!("{pod}-{namespace}-{class}");
    let objects: Vec<Value> = objects
        .iter()
        .map(|(id, version)| json!({ "id": id, "version": version }))
        .collect();
    let status = json!({
        "podName": pod, "secretProviderClassName": class, "mounted": true,
        "targetPath": format!("/var/lib/kubelet/pods/{pod}/volumes/secrets"),
        "objects": objects,
    });
    if api.get_opt(&name).await.unwrap().is_some() {
        let patch = json!({ "status": status });
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        return;
    }
    let body = json!({
        "apiVersion": format!("{GROUP}/v1"), "kind": KIND,
        "metadata": { "name": name, "labels": { "internal.secrets-store.csi.k8s.io/node-name": "node-1" } },
        "status": status,
    });
    let object: DynamicObject = serde_json::from_value(body).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
}

/// A pod spec mounting SecretProviderClass `class` through the driver.
fn pod_mounting_class(class: &str) -> Value {
    json!({
        "containers": [{
            "name": "app", "image": "busybox",
            "volumeMounts": [{ "name": "secrets", "mountPath": "/mnt/secrets", "readOnly": true }],
        }],
        "volumes": [{ "name": "secrets", "csi": {
            "driver": "secrets-store.csi.k8s.io", "readOnly": true,
            "volumeAttributes": { "secretProviderClass": class },
        }}],
    })
}

/// The sentinel of the preset's watch: a Deployment referencing class
/// `sentinel` by annotation, stamped with no debounce; each flush records a new
/// version for it, so once its stamp changes every earlier event of the
/// namespace's watch has reached nudge.
struct CsiSentinel {
    api: Api<DynamicObject>,
    deployments: Api<Deployment>,
    namespace: String,
    round: AtomicUsize,
}

impl CsiSentinel {
    const STAMP: &str = "nudge.dev/checksum-sentinel";

    async fn create(cluster: &TestCluster, api: Api<DynamicObject>) -> Self {
        let sentinel = Self {
            api,
            deployments: cluster.api(),
            namespace: cluster.namespace().to_owned(),
            round: AtomicUsize::new(0),
        };
        sentinel.record().await;
        cluster
            .create_workload(
                "Deployment",
                "sentinel-csi",
                &[
                    ("nudge.dev/csi-sentinel", "sentinel"),
                    ("nudge.dev/debounce", "0s"),
                    ("nudge.dev/min-interval", "0s"),
                ],
                &[],
                plain_pod(),
            )
            .await;
        sentinel.stamp(None).await;
        sentinel
    }

    async fn record(&self) {
        let round = self.round.fetch_add(1, Ordering::SeqCst).to_string();
        let objects = [("flag", round.as_str())];
        record(
            &self.api,
            &self.namespace,
            "sentinel-pod",
            "sentinel",
            &objects,
        )
        .await;
    }

    async fn stamp(&self, previous: Option<&str>) -> String {
        wait_for("nudge to stamp the CSI sentinel", WAIT, || async {
            // An explicit reference of the preset is adopted: its value is
            // always on the workload's metadata (and on the template once it
            // changed).
            let deployment = self.deployments.get_opt("sentinel-csi").await.ok()??;
            let stamp = deployment.metadata.annotations?.remove(Self::STAMP)?;
            (Some(stamp.as_str()) != previous).then_some(stamp)
        })
        .await
    }

    /// Every event of the watch made before the call has reached nudge, and
    /// what they caused is written or decided against.
    async fn quiesce(&self, nudge: &impl Running) {
        let before = self.stamp(None).await;
        self.record().await;
        self.stamp(Some(&before)).await;
        wait_idle(nudge).await;
    }
}

async fn metadata_annotations(cluster: &TestCluster, name: &str) -> Value {
    cluster.workload("Deployment", name).await["metadata"]["annotations"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_rolls_once_and_pods_recording_versions_already_seen_roll_nothing() {
    let cluster = TestCluster::start("csi-rotation").await;
    let _crd = cluster.ensure_crd(pod_status_crd()).await;
    let api = pod_statuses(&cluster).await;
    let ns = cluster.namespace().to_owned();
    let nudge = cluster
        .start_ready_nudge(with_preset(cluster.nudge_config()))
        .await;
    let sentinel = CsiSentinel::create(&cluster, api.clone()).await;
    cluster
        .create_workload(
            "Deployment",
            "web",
            &[
                ("nudge.dev/auto", "true"),
                ("nudge.dev/debounce", "0s"),
                ("nudge.dev/min-interval", "0s"),
            ],
            &[],
            pod_mounting_class("vault"),
        )
        .await;
    let before = cluster.rollout_marker("Deployment", "web").await;
    // The first pod mounts: what it mounted is adopted on metadata, never
    // written on the template. `auto` finds no ConfigMap or Secret: its
    // config-hash, of no input, is not written either (design §2).
    record(&api, &ns, "web-1", "vault", &[("db", "1"), ("api", "7")]).await;
    let adopted = wait_for("the mounted versions adopted on metadata", WAIT, || async {
        let annotations = metadata_annotations(&cluster, "web").await;
        annotations[STAMP].as_str().map(str::to_owned)
    })
    .await;
    assert!(adopted.starts_with("sha256-"), "{adopted}");
    sentinel.quiesce(&nudge).await;
    let template = cluster.template_annotations("Deployment", "web").await;
    assert!(
        !template.contains_key(STAMP) && !template.contains_key("nudge.dev/config-hash"),
        "{template:?}"
    );
    assert_no_rollout(&before, &cluster.rollout_marker("Deployment", "web").await);

    // A second pod (a restart, a scale-up) mounts the same versions: nothing.
    let writes = cluster.patch_counter("Deployment", "web").await;
    record(&api, &ns, "web-2", "vault", &[("api", "7"), ("db", "1")]).await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(writes.count(&cluster).await, 0, "same versions, no write");

    // The driver records a rotation on one pod: one rollout.
    let writes = cluster.patch_counter("Deployment", "web").await;
    record(&api, &ns, "web-1", "vault", &[("db", "2"), ("api", "7")]).await;
    let rotated = wait_for_stamp(&cluster, "Deployment", "web", STAMP, None).await;
    assert_ne!(rotated, adopted);
    // The other pod rotates too, the new pods mount the new versions, an old
    // pod's status goes away: nothing more.
    record(&api, &ns, "web-2", "vault", &[("db", "2"), ("api", "7")]).await;
    record(&api, &ns, "web-3", "vault", &[("db", "2"), ("api", "7")]).await;
    api.delete(&format!("web-1-{ns}-vault"), &Default::default())
        .await
        .unwrap();
    sentinel.quiesce(&nudge).await;
    assert_eq!(writes.count(&cluster).await, 1, "one rollout per rotation");
    assert_eq!(
        cluster.template_annotations("Deployment", "web").await[STAMP],
        rotated
    );
    // The rollout's Event names the class as its related object.
    let event = wait_for("a ConfigChanged Event naming the class", WAIT, || async {
        let events = cluster.events_for("web", "ConfigChanged").await;
        events.into_iter().find(|e| {
            e.related.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("SecretProviderClass")
                    && r.name.as_deref() == Some("vault")
            })
        })
    })
    .await;
    let related = event.related.unwrap();
    assert_eq!(
        related.api_version.as_deref(),
        Some("secrets-store.csi.x-k8s.io/v1")
    );
    nudge.stop().await;
}

/// A workload Reloader 2 manages (`secretproviderclass.reloader.stakater.com/reload`,
/// its env var holding its hash of what the pods mounted) is taken over with
/// no write at all; the next rotation updates the env var in Reloader's hash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_reloader_two_stamped_is_adopted_with_no_restart() {
    let cluster = TestCluster::start("csi-reloader").await;
    let _crd = cluster.ensure_crd(pod_status_crd()).await;
    let api = pod_statuses(&cluster).await;
    let ns = cluster.namespace().to_owned();
    let mounted = [("secret/db", "3"), ("secret/api", "12")];
    record(&api, &ns, "api-1", "vault-db", &mounted).await;
    let pairs = |objects: &[(&str, &str)]| -> Vec<(String, String)> {
        objects
            .iter()
            .map(|(i, v)| ((*i).to_owned(), (*v).to_owned()))
            .collect()
    };
    let reloader_hash = |objects: &[(&str, &str)]| {
        let fingerprint = fingerprint::reloader_csi("vault-db", &pairs(objects));
        fingerprint.as_digest().unwrap().to_string()
    };
    let var = "STAKATER_VAULT_DB_SECRETPROVIDERCLASS";
    let mut pod = pod_mounting_class("vault-db");
    pod["containers"][0]["env"] = json!([{ "name": var, "value": reloader_hash(&mounted) }]);
    cluster
        .create_workload(
            "Deployment",
            "api",
            &[
                (
                    "secretproviderclass.reloader.stakater.com/reload",
                    "vault-db",
                ),
                ("nudge.dev/debounce", "0s"),
                ("nudge.dev/min-interval", "0s"),
            ],
            &[],
            pod,
        )
        .await;
    let before = cluster.rollout_marker("Deployment", "api").await;
    let writes = cluster.patch_counter("Deployment", "api").await;
    let nudge = cluster
        .start_ready_nudge(with_preset(cluster.nudge_config()))
        .await;
    let sentinel = CsiSentinel::create(&cluster, api.clone()).await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(writes.count(&cluster).await, 0, "adopted with no write");
    assert_no_rollout(&before, &cluster.rollout_marker("Deployment", "api").await);

    let rotated = [("secret/db", "4"), ("secret/api", "12")];
    record(&api, &ns, "api-1", "vault-db", &rotated).await;
    let expected = reloader_hash(&rotated);
    wait_for(
        "the env var in Reloader's hash of the rotation",
        WAIT,
        || async {
            let workload = cluster.workload("Deployment", "api").await;
            let env = &workload["spec"]["template"]["spec"]["containers"][0]["env"];
            let value = env.as_array()?.iter().find(|e| e["name"] == var)?["value"].clone();
            (value == json!(expected)).then_some(())
        },
    )
    .await;
    nudge.stop().await;
}

/// Needs a cluster without the driver's CRD (on a shared cluster another test
/// may have installed it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_only_the_preset_picks_up_the_drivers_crd_installed_after_start() {
    let cluster = TestCluster::start("csi-late-crd").await;
    let mut config = with_preset(cluster.nudge_config());
    let admin = free_port();
    config.admin.bind = admin;
    let nudge = cluster.start_nudge(config);
    let body = wait_ready(admin).await;
    assert!(
        body.contains("not watching source csi")
            && body.contains("secrets-store.csi.x-k8s.io/v1 SecretProviderClassPodStatus")
            && body.contains("(404): is its CRD installed?")
            && !body.contains("Failed to parse"),
        "{body}"
    );
    cluster
        .create_workload(
            "Deployment",
            "web",
            &[("nudge.dev/auto", "true"), ("nudge.dev/debounce", "0s")],
            &[],
            pod_mounting_class("vault"),
        )
        .await;
    let _crd = cluster.ensure_crd(pod_status_crd()).await;
    let api = pod_statuses(&cluster).await;
    let ns = cluster.namespace().to_owned();
    record(&api, &ns, "web-1", "vault", &[("db", "1")]).await;
    wait_for(
        "the mounted versions adopted on metadata",
        PICKED_UP,
        || async {
            let annotations = metadata_annotations(&cluster, "web").await;
            annotations[STAMP].as_str().map(str::to_owned)
        },
    )
    .await;
    record(&api, &ns, "web-1", "vault", &[("db", "2")]).await;
    wait_for_stamp(&cluster, "Deployment", "web", STAMP, None).await;
    let (status, body) = http_get(admin, "/ready").await.unwrap();
    assert_eq!(status, 200);
    assert!(!body.contains("not watching source csi"), "{body}");
    nudge.stop().await;
}

/// Discovery is checked again 5 s after start, then at most every 30 s.
const PICKED_UP: std::time::Duration = std::time::Duration::from_secs(60);
