//! Reloader's annotations as a migrating user has them: `search` + `match`
//! followed live, `--auto-reload-all` with opt-outs, `pause-period`, regular
//! expressions in `reload` lists, and env vars in either of Reloader's hashes.

use crate::support::*;
use k8s_openapi::api::core::v1::ConfigMap;
use nudge::__private::fingerprint::{self, Fingerprint, ObjectData, ObjectKind};
use serde_json::json;

const CONFIG_HASH: &str = "nudge.dev/config-hash";

/// A pod mounting every ConfigMap in `names`.
fn pod_mounting(names: &[&str]) -> serde_json::Value {
    let volumes: Vec<_> = names
        .iter()
        .map(|n| json!({ "name": n, "configMap": { "name": n } }))
        .collect();
    json!({ "containers": [{ "name": "app", "image": "busybox" }], "volumes": volumes })
}

async fn metadata_hash(cluster: &TestCluster, name: &str) -> Option<String> {
    cluster.workload("Deployment", name).await["metadata"]["annotations"][CONFIG_HASH]
        .as_str()
        .map(str::to_owned)
}

async fn set_match(cluster: &TestCluster, configmap: &str, matched: bool) {
    let value = if matched {
        json!("true")
    } else {
        serde_json::Value::Null
    };
    cluster
        .merge_patch::<k8s_openapi::api::core::v1::ConfigMap>(
            configmap,
            json!({ "metadata": { "annotations": { "reloader.stakater.com/match": value } } }),
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_follows_only_objects_carrying_match_and_adding_match_counts_at_once() {
    let cluster = TestCluster::start("reloader-search").await;
    let sentinel = cluster.sentinel().await;
    cluster.put_configmap("matched", &[("k", "1")]).await;
    cluster.put_configmap("other", &[("k", "1")]).await;
    set_match(&cluster, "matched", true).await;
    cluster
        .create_workload(
            "Deployment",
            "web",
            &[("reloader.stakater.com/search", "true")],
            &[],
            pod_mounting(&["matched", "other"]),
        )
        .await;
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    let adopted = wait_for("the adoption", WAIT, || metadata_hash(&cluster, "web")).await;

    // A change to an object without `match` stamps nothing.
    cluster.put_configmap("other", &[("k", "2")]).await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(metadata_hash(&cluster, "web").await, Some(adopted.clone()));
    assert!(
        cluster
            .template_annotations("Deployment", "web")
            .await
            .is_empty()
    );

    // Given `match`, its current content counts: one stamp.
    set_match(&cluster, "other", true).await;
    let stamped = wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, None).await;
    assert_ne!(stamped, adopted);

    // Without `match` again, its changes stop counting.
    set_match(&cluster, "other", false).await;
    cluster.put_configmap("other", &[("k", "3")]).await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(
        cluster
            .template_annotations("Deployment", "web")
            .await
            .get(CONFIG_HASH),
        Some(&stamped)
    );
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_reload_all_adopts_every_workload_and_respects_auto_false() {
    let cluster = TestCluster::start("reloader-auto-all").await;
    let sentinel = cluster.sentinel().await;
    cluster.put_configmap("cfg", &[("k", "1")]).await;
    cluster
        .create_workload("Deployment", "plain", &[], &[], pod_mounting(&["cfg"]))
        .await;
    cluster
        .create_workload(
            "Deployment",
            "opted-out",
            &[("reloader.stakater.com/auto", "false")],
            &[],
            pod_mounting(&["cfg"]),
        )
        .await;
    let mut config = cluster.nudge_config();
    config.annotations.reloader_auto_all = true;
    let nudge = cluster.start_ready_nudge(config).await;
    wait_for("the adoption", WAIT, || metadata_hash(&cluster, "plain")).await;
    cluster.put_configmap("cfg", &[("k", "2")]).await;
    wait_for_stamp(&cluster, "Deployment", "plain", CONFIG_HASH, None).await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(metadata_hash(&cluster, "opted-out").await, None);
    assert!(
        cluster
            .template_annotations("Deployment", "opted-out")
            .await
            .is_empty()
    );
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_period_turns_changes_within_it_into_one_rollout() {
    let cluster = TestCluster::start("reloader-pause").await;
    let sentinel = cluster.sentinel().await;
    cluster.put_configmap("cfg", &[("k", "1")]).await;
    cluster
        .create_workload(
            "Deployment",
            "web",
            &[
                ("reloader.stakater.com/auto", "true"),
                ("deployment.reloader.stakater.com/pause-period", "3s"),
            ],
            &[],
            pod_mounting(&["cfg"]),
        )
        .await;
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    let adopted = wait_for("the adoption", WAIT, || metadata_hash(&cluster, "web")).await;
    wait_idle(&nudge).await;
    let patches = cluster.patch_counter("Deployment", "web").await;
    cluster.put_configmap("cfg", &[("k", "2")]).await;
    // The second change comes while nudge holds the first in the pause period.
    wait_holding(&nudge).await;
    cluster.put_configmap("cfg", &[("k", "3")]).await;
    let stamped = wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, None).await;
    assert_ne!(stamped, adopted);
    sentinel.quiesce(&nudge).await;
    assert_eq!(
        patches.count(&cluster).await,
        1,
        "both changes in one rollout"
    );
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotations_strategy_workloads_are_adopted_and_later_changes_use_reloaders_format() {
    use nudge::__private::fingerprint::{self, ObjectData, ObjectKind};
    const LAST_RELOADED: &str = "reloader.stakater.com/last-reloaded-from";
    let cluster = TestCluster::start("reloader-annotations").await;
    cluster
        .put_configmap("cfg", &[("LOG_LEVEL", "debug")])
        .await;
    let reloaded = r#"{"type":"CONFIGMAP","name":"cfg","namespace":"x","hash":"05bc310690167ce7f2482d808d2b38ff56e6f72b","containerRefs":["app"],"observedAt":1717171717}"#;
    cluster
        .create_workload(
            "Deployment",
            "web",
            &[("reloader.stakater.com/auto", "true")],
            &[(LAST_RELOADED, reloaded)],
            pod_mounting(&["cfg"]),
        )
        .await;
    let before = cluster.rollout_marker("Deployment", "web").await;
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    let state = wait_for("the adoption", WAIT, || async {
        cluster.workload("Deployment", "web").await["metadata"]["annotations"]
            ["nudge.dev/reloader-state"]
            .as_str()
            .map(str::to_owned)
    })
    .await;
    assert!(state.starts_with("sha256-"), "{state}");
    // The state is on the Deployment's own metadata: its generation moves on a
    // kube-apiserver, its pods do not.
    assert_no_rollout(&before, &cluster.rollout_marker("Deployment", "web").await);
    assert_eq!(
        cluster.template_annotations("Deployment", "web").await[LAST_RELOADED],
        reloaded
    );

    cluster.put_configmap("cfg", &[("LOG_LEVEL", "info")]).await;
    let written =
        wait_for_stamp(&cluster, "Deployment", "web", LAST_RELOADED, Some(reloaded)).await;
    let document: serde_json::Value = serde_json::from_str(&written).unwrap();
    let cm = cluster
        .api::<k8s_openapi::api::core::v1::ConfigMap>()
        .get("cfg")
        .await
        .unwrap();
    let hash =
        fingerprint::reloader_object(ObjectKind::ConfigMap, &ObjectData::from_config_map(&cm));
    assert_eq!(document["type"], "CONFIGMAP");
    assert_eq!(document["name"], "cfg");
    assert_eq!(document["namespace"], cluster.namespace());
    assert_eq!(document["hash"], hash.to_string());
    assert_eq!(document["containerRefs"], json!([]));
    assert!(document["observedAt"].as_i64().unwrap() > 1717171717);
    // Reloader's field order.
    assert!(
        written.starts_with(r#"{"type":"CONFIGMAP","name":"cfg","namespace":"#),
        "{written}"
    );
    nudge.stop().await;
}

/// One of Reloader's object hashes.
type ReloaderHash = fn(ObjectKind, &ObjectData) -> Fingerprint;

/// Reloader's value for `configmap` as it is now, by `hash`.
async fn reloader_value(cluster: &TestCluster, configmap: &str, hash: ReloaderHash) -> String {
    let cm = cluster.api::<ConfigMap>().get(configmap).await.unwrap();
    let fp = hash(ObjectKind::ConfigMap, &ObjectData::from_config_map(&cm));
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

/// A pod mounting `names`, whose container carries `var: value`.
fn pod_with_env(names: &[&str], var: &str, value: &str) -> serde_json::Value {
    let mut pod = pod_mounting(names);
    pod["containers"][0]["env"] = json!([{ "name": var, "value": value }]);
    pod
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pattern_lists_and_both_reloader_hashes_migrate_without_a_restart() {
    let cluster = TestCluster::start("reloader-regex").await;
    cluster.put_configmap("app-config-v2", &[("k", "1")]).await;
    cluster.put_configmap("other", &[("k", "1")]).await;
    let var = fingerprint::reloader_env_var(ObjectKind::ConfigMap, "app-config-v2");
    // One workload per Reloader hash, each as that Reloader left it.
    let hashes: [(&str, ReloaderHash); 2] = [
        ("sha1", fingerprint::reloader_object),
        ("sha512", fingerprint::reloader_object_sha512_256),
    ];
    let mut patches = Vec::new();
    for (name, hash) in hashes {
        let value = reloader_value(&cluster, "app-config-v2", hash).await;
        cluster
            .create_workload(
                "Deployment",
                name,
                &[("configmap.reloader.stakater.com/reload", "app-config-.*")],
                &[],
                pod_with_env(&["app-config-v2", "other"], &var, &value),
            )
            .await;
        patches.push(cluster.patch_counter("Deployment", name).await);
    }
    let sentinel = cluster.sentinel().await;
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    sentinel.wait_stamped().await;

    // A referenced object the pattern does not match counts for nothing.
    cluster.put_configmap("other", &[("k", "2")]).await;
    sentinel.flush_configmaps().await;
    for counter in &patches {
        assert_eq!(
            counter.count(&cluster).await,
            0,
            "in sync: nothing to write"
        );
    }

    // A change to the matched object: each env var updated once, in its own hash.
    cluster.put_configmap("app-config-v2", &[("k", "2")]).await;
    for ((name, hash), counter) in hashes.into_iter().zip(&patches) {
        let expected = reloader_value(&cluster, "app-config-v2", hash).await;
        wait_for("the env var updated", WAIT, || async {
            (env_value(&cluster, name, &var).await.as_deref() == Some(expected.as_str()))
                .then_some(())
        })
        .await;
        sentinel.flush_configmaps().await;
        assert_eq!(counter.count(&cluster).await, 1, "{name}: one write");
    }
    nudge.stop().await;
}

const PAUSED_AT: &str = "deployment.reloader.stakater.com/paused-at";

/// Pauses Deployment `name` as Reloader's `pause-period` does: `spec.paused`
/// and the time in its `paused-at` annotation, in one strategic-merge patch.
async fn pause_as_reloader(cluster: &TestCluster, name: &str) {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    cluster
        .merge_patch::<k8s_openapi::api::apps::v1::Deployment>(
            name,
            json!({ "spec": { "paused": true },
                    "metadata": { "annotations": { PAUSED_AT: now } } }),
        )
        .await;
}

/// Whether Deployment `name` is paused, and its `paused-at`.
async fn pause_of(cluster: &TestCluster, name: &str) -> (bool, Option<String>) {
    let deployment = cluster.workload("Deployment", name).await;
    (
        deployment["spec"]["paused"].as_bool().unwrap_or(false),
        deployment["metadata"]["annotations"][PAUSED_AT]
            .as_str()
            .map(str::to_owned),
    )
}

async fn reloader_deployment(cluster: &TestCluster, name: &str, pause_period: &str) {
    cluster
        .create_workload(
            "Deployment",
            name,
            &[
                ("reloader.stakater.com/auto", "true"),
                (
                    "deployment.reloader.stakater.com/pause-period",
                    pause_period,
                ),
            ],
            &[],
            pod_mounting(&["cfg"]),
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_reloader_left_paused_is_resumed_once_after_its_pause_period() {
    let cluster = TestCluster::start("reloader-left-paused").await;
    let sentinel = cluster.sentinel().await;
    cluster.put_configmap("cfg", &[("k", "1")]).await;
    reloader_deployment(&cluster, "web", "2s").await;
    // Running (its first ReplicaSet made) when Reloader paused it.
    let before = cluster.rollout_marker("Deployment", "web").await;
    pause_as_reloader(&cluster, "web").await;
    // Paused by hand, with no paused-at: not Reloader's to resume, nor nudge's.
    reloader_deployment(&cluster, "by-hand", "2s").await;
    cluster
        .merge_patch::<k8s_openapi::api::apps::v1::Deployment>(
            "by-hand",
            json!({ "spec": { "paused": true } }),
        )
        .await;

    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    wait_for("web to be resumed", WAIT, || async {
        (pause_of(&cluster, "web").await == (false, None)).then_some(())
    })
    .await;
    let events = cluster.wait_events("web", "ConfigChanged").await;
    assert!(
        events
            .iter()
            .any(|e| e.note.as_deref().unwrap_or("").contains(PAUSED_AT)),
        "{events:#?}"
    );
    let patches = cluster.patch_counter("Deployment", "web").await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(patches.count(&cluster).await, 0, "resumed once");
    assert_eq!(pause_of(&cluster, "by-hand").await, (true, None));
    // Resuming changes no pod template: no rollout of its own.
    assert_no_rollout(&before, &cluster.rollout_marker("Deployment", "web").await);
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_a_reloader_still_running_lifts_itself_is_left_to_it() {
    let cluster = TestCluster::start("reloader-overlap").await;
    let sentinel = cluster.sentinel().await;
    cluster.put_configmap("cfg", &[("k", "1")]).await;
    reloader_deployment(&cluster, "web", "10s").await;
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    wait_for("the adoption", WAIT, || metadata_hash(&cluster, "web")).await;
    wait_idle(&nudge).await;

    // Reloader, still running during the migration, pauses the Deployment and
    // resumes it when its pause period ends (well within nudge's wait, which
    // that same period sets and which starts later). nudge's writes move its
    // last-updated (the pause and resume move the generation themselves, so a
    // patch counter cannot tell).
    let last_updated = || async {
        cluster.workload("Deployment", "web").await["metadata"]["annotations"]
            ["nudge.dev/last-updated"]
            .clone()
    };
    let adopted_at = last_updated().await;
    assert!(adopted_at.is_string(), "{adopted_at}");
    pause_as_reloader(&cluster, "web").await;
    wait_holding(&nudge).await;
    cluster
        .merge_patch::<k8s_openapi::api::apps::v1::Deployment>(
            "web",
            json!({ "spec": { "paused": false },
                    "metadata": { "annotations": { PAUSED_AT: null } } }),
        )
        .await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(last_updated().await, adopted_at, "nothing to resume");
    assert_eq!(pause_of(&cluster, "web").await, (false, None));
    nudge.stop().await;
}
