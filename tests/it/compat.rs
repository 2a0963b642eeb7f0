//! Zero-restart migration: workloads already managed by Wave or Reloader keep
//! their format, are not patched while in sync, and get the tool-correct value
//! after a change.

use crate::support::*;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use nudge::__private::fingerprint::{self, ObjectData, ObjectKind};
use serde_json::json;

const WAVE_HASH: &str = "wave.pusher.com/config-hash";

async fn wave_hash_of(cluster: &TestCluster, configmap: &str, secret: &str) -> String {
    let cm = cluster.api::<ConfigMap>().get(configmap).await.unwrap();
    let secret_obj = cluster.api::<Secret>().get(secret).await.unwrap();
    let cm_fragment = fingerprint::wave_fragment(&ObjectData::from_config_map(&cm));
    let secret_fragment = fingerprint::wave_fragment(&ObjectData::from_secret(&secret_obj));
    fingerprint::wave_hash([(configmap, &cm_fragment)], [(secret, &secret_fragment)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wave_workload_in_sync_is_not_patched_and_gets_the_wave_hash_after_a_change() {
    let cluster = TestCluster::start("wave").await;
    cluster
        .put_configmap("app", &[("app.yaml", "x: 1\n")])
        .await;
    cluster.put_secret("creds", &[("user", "admin")]).await;
    let current = wave_hash_of(&cluster, "app", "creds").await;
    let pod = json!({
        "containers": [{
            "name": "app", "image": "busybox",
            "envFrom": [{ "secretRef": { "name": "creds" } }],
            "volumeMounts": [{ "name": "config", "mountPath": "/etc/app" }],
        }],
        "volumes": [{ "name": "config", "configMap": { "name": "app" } }],
    });
    cluster
        .create_workload(
            "Deployment",
            "waved",
            &[("wave.pusher.com/update-on-config-change", "true")],
            &[(WAVE_HASH, current.as_str())],
            pod,
        )
        .await;
    let patches = cluster.patch_counter("Deployment", "waved").await;
    let sentinel = cluster.sentinel().await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    // nudge has listed, and decided about and stamped what needed it.
    sentinel.quiesce(&nudge).await;
    assert_eq!(
        patches.count(&cluster).await,
        0,
        "Wave's own hash is already right"
    );

    cluster
        .put_configmap("app", &[("app.yaml", "x: 2\n")])
        .await;
    let stamped = wait_for_stamp(&cluster, "Deployment", "waved", WAVE_HASH, Some(&current)).await;
    assert_eq!(stamped, wave_hash_of(&cluster, "app", "creds").await);
    sentinel.quiesce(&nudge).await;
    assert_eq!(patches.count(&cluster).await, 1);
    let annotations = cluster.template_annotations("Deployment", "waved").await;
    assert!(
        !annotations.contains_key("nudge.dev/config-hash"),
        "Wave format only"
    );
    nudge.stop().await;
}

async fn reloader_value(cluster: &TestCluster, configmap: &str) -> String {
    let cm = cluster.api::<ConfigMap>().get(configmap).await.unwrap();
    let fp = fingerprint::reloader_object(ObjectKind::ConfigMap, &ObjectData::from_config_map(&cm));
    fp.as_digest().unwrap().into_owned()
}

async fn env_value(cluster: &TestCluster, name: &str, var: &str) -> Option<String> {
    let workload = cluster.workload("Deployment", name).await;
    workload["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == var)
        .and_then(|e| e["value"].as_str().map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloader_env_var_in_sync_is_not_patched_and_is_updated_in_place_after_a_change() {
    let cluster = TestCluster::start("reloader").await;
    cluster
        .put_configmap("app-config", &[("a", "1"), ("b", "2")])
        .await;
    let var = fingerprint::reloader_env_var(ObjectKind::ConfigMap, "app-config");
    let current = reloader_value(&cluster, "app-config").await;
    let pod = json!({
        "containers": [{
            "name": "app", "image": "busybox",
            "env": [{ "name": var, "value": current }, { "name": "OTHER", "value": "kept" }],
            "volumeMounts": [{ "name": "config", "mountPath": "/etc/app" }],
        }],
        "volumes": [{ "name": "config", "configMap": { "name": "app-config" } }],
    });
    cluster
        .create_workload(
            "Deployment",
            "reloaded",
            &[("reloader.stakater.com/auto", "true")],
            &[],
            pod,
        )
        .await;
    let patches = cluster.patch_counter("Deployment", "reloaded").await;
    let sentinel = cluster.sentinel().await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    // nudge has listed, and decided about and stamped what needed it.
    sentinel.quiesce(&nudge).await;
    assert_eq!(
        patches.count(&cluster).await,
        0,
        "Reloader's own env var is already right"
    );

    cluster
        .put_configmap("app-config", &[("a", "1"), ("b", "3")])
        .await;
    let expected = reloader_value(&cluster, "app-config").await;
    wait_for("env var updated", WAIT, || async {
        (env_value(&cluster, "reloaded", &var).await.as_deref() == Some(expected.as_str()))
            .then_some(())
    })
    .await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(patches.count(&cluster).await, 1);
    assert_eq!(
        env_value(&cluster, "reloaded", "OTHER").await.as_deref(),
        Some("kept")
    );
    let workload = cluster.workload("Deployment", "reloaded").await;
    let container = &workload["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["image"], "busybox",
        "the rest of the container is untouched"
    );
    let annotations = cluster.template_annotations("Deployment", "reloaded").await;
    assert!(
        !annotations.contains_key("nudge.dev/config-hash"),
        "env var covers it"
    );
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloader_workload_reloader_never_reloaded_is_adopted_without_a_rollout() {
    let cluster = TestCluster::start("reloader-new").await;
    cluster.put_configmap("plain", &[("a", "1")]).await;
    cluster
        .create_workload(
            "Deployment",
            "fresh",
            &[("configmap.reloader.stakater.com/reload", "plain")],
            &[],
            plain_pod(),
        )
        .await;
    let before = cluster.rollout_marker("Deployment", "fresh").await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    // Adopted: the fingerprint is kept on the workload's own metadata; the pod
    // template (what rolls pods) is untouched, as Reloader would have left it.
    let adopted = wait_for("the adoption", WAIT, || async {
        let workload = cluster.workload("Deployment", "fresh").await;
        workload["metadata"]["annotations"]["nudge.dev/config-hash"]
            .as_str()
            .map(str::to_owned)
    })
    .await;
    // A kube-apiserver bumps the Deployment's generation for that annotation;
    // what rolls pods is the template (and the ReplicaSets made for it).
    assert_no_rollout(
        &before,
        &cluster.rollout_marker("Deployment", "fresh").await,
    );
    assert!(
        cluster
            .template_annotations("Deployment", "fresh")
            .await
            .is_empty()
    );

    // The first change reaches the pod template: one rollout, as with Reloader.
    cluster.put_configmap("plain", &[("a", "2")]).await;
    let stamped = wait_for_stamp(
        &cluster,
        "Deployment",
        "fresh",
        "nudge.dev/config-hash",
        None,
    )
    .await;
    assert_ne!(stamped, adopted);
    let workload = cluster.workload("Deployment", "fresh").await;
    assert_eq!(
        workload["metadata"]["annotations"]["nudge.dev/config-hash"],
        stamped
    );
    nudge.stop().await;
}
