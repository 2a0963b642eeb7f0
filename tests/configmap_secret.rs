//! ConfigMap and Secret changes roll exactly the workloads that depend on them.

mod support;

use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;
use support::*;

const CONFIG_HASH: &str = "nudge.dev/config-hash";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_deployment_is_stamped_once_per_data_change_and_not_for_metadata() {
    let cluster = TestCluster::start("auto-deployment").await;
    cluster.put_configmap("app-config", &[("a", "1")]).await;
    cluster
        .create_workload(
            "Deployment",
            "web",
            &[("nudge.dev/auto", "true")],
            &[],
            pod_mounting_configmap("app-config"),
        )
        .await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    let first = wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, None).await;

    let patches = cluster.patch_counter("Deployment", "web").await;
    cluster.put_configmap("app-config", &[("a", "2")]).await;
    let second = wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, Some(&first)).await;
    settle().await;
    assert_eq!(
        patches.count(&cluster).await,
        1,
        "one data change, one PATCH"
    );

    let patches = cluster.patch_counter("Deployment", "web").await;
    cluster
        .merge_patch::<ConfigMap>(
            "app-config",
            json!({"metadata": {"labels": {"team": "x"}, "annotations": {"note": "y"}}}),
        )
        .await;
    settle().await;
    assert_eq!(
        patches.count(&cluster).await,
        0,
        "metadata-only change, no PATCH"
    );
    assert_eq!(
        cluster.template_annotations("Deployment", "web").await[CONFIG_HASH],
        second
    );
    nudge.stop().await;
}
