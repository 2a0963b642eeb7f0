//! Namespace scoping: `ignore_namespaces` is a server-side filter, and
//! `namespace_selector` is followed live.

use crate::support::*;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const CONFIG_HASH: &str = "nudge.dev/config-hash";

/// Sets (or, with `None`, removes) label `nudge-test-scope` of `namespace`.
async fn label_namespace(cluster: &TestCluster, namespace: &str, value: Option<&str>) {
    let api: Api<Namespace> = Api::all(cluster.client());
    let patch = json!({"metadata": {"labels": {"nudge-test-scope": value}}});
    api.patch(namespace, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("label the namespace");
}

/// Three namespaces in `kubernetes.namespaces`: the test's (selected only for a
/// while), `sel-on` (selected throughout) and `sel-late` (selected at the end),
/// each of the other two with a [`Sentinel`] to show what nudge has processed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_selector_is_followed_live() {
    let cluster = TestCluster::start("ns-selector").await;
    let selected = cluster.namespace().to_owned();
    let label = [("nudge-test-scope", selected.as_str())];
    let on = cluster.extra_namespace("sel-on", &label).await;
    let late = cluster.extra_namespace("sel-late", &[]).await;
    let on_sentinel = Sentinel::create(cluster.client(), &on).await;
    let late_sentinel = Sentinel::create(cluster.client(), &late).await;
    cluster.auto_deployment("sel", "cfg", &[("v", "1")]).await;
    let mut config = cluster.nudge_config();
    config.kubernetes.namespaces = vec![selected.clone(), on.clone(), late.clone()];
    config.kubernetes.namespace_selector = format!("nudge-test-scope={selected}");
    let nudge = cluster.start_nudge(config);
    // nudge has listed every namespace, selected `sel-on`, and decided about
    // what it listed (the test's namespace is not selected yet).
    on_sentinel.quiesce(&nudge).await;
    assert!(
        !cluster
            .template_annotations("Deployment", "sel")
            .await
            .contains_key(CONFIG_HASH),
        "an unselected namespace is left alone"
    );

    label_namespace(&cluster, cluster.namespace(), Some(&selected)).await;
    let stamp = wait_for_stamp(&cluster, "Deployment", "sel", CONFIG_HASH, None).await;

    // Deselected: nudge parks the workload and stops tracking cfg, the one
    // reference that changes the configmap source's count meanwhile.
    let configmaps = r#"nudge_source_tracked_references{source="configmap"}"#;
    let tracked = nudge.metrics_at().sum(configmaps).await.unwrap_or(0.0);
    label_namespace(&cluster, cluster.namespace(), None).await;
    wait_for("nudge to stop tracking cfg", WAIT, || async {
        (nudge.metrics_at().sum(configmaps).await? == tracked - 1.0).then_some(())
    })
    .await;
    // Then `sel-late` is selected, live.
    label_namespace(&cluster, &late, Some(&selected)).await;
    late_sentinel.wait_stamped().await;
    let patches = cluster.patch_counter("Deployment", "sel").await;
    // A change of a ConfigMap nudge no longer tracks: nothing to fetch, nothing
    // to decide, and nothing outstanding.
    cluster.put_configmap("cfg", &[("v", "2")]).await;
    on_sentinel.quiesce(&nudge).await;
    assert_eq!(
        patches.count(&cluster).await,
        0,
        "deselected again: not stamped"
    );
    assert_eq!(
        cluster.template_annotations("Deployment", "sel").await[CONFIG_HASH],
        stamp
    );
    nudge.stop().await;
}

/// On the double only: nudge watches all namespaces here, which is safe only on a
/// private cluster, and the field selector shows in the double's request log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_only_ignored_namespaces_are_filtered_out_by_the_api_server() {
    let cluster = TestCluster::start_double_only("ns-ignore").await;
    let other = format!("{}-ignored", cluster.namespace());
    let namespaces: Api<Namespace> = Api::all(cluster.client());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": other}})).unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    cluster
        .auto_deployment("watched", "cfg", &[("v", "1")])
        .await;
    let double = cluster.double().unwrap();
    for object in [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": other}, "data": {"v": "1"}}),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "ignored", "namespace": other, "annotations": {"nudge.dev/auto": "true"}},
            "spec": {
                "selector": {"matchLabels": {"app": "ignored"}},
                "template": {"metadata": {"labels": {"app": "ignored"}}, "spec": pod_mounting_configmap("cfg")},
            },
        }),
    ] {
        double.create(object).unwrap();
    }
    let mut config = cluster.nudge_config();
    config.kubernetes.namespaces = Vec::new();
    config.kubernetes.ignore_namespaces = vec![other.clone()];
    let nudge = cluster.start_nudge(config);
    wait_for_stamp(&cluster, "Deployment", "watched", CONFIG_HASH, None).await;
    // One all-namespace list: nudge had everything the API server sent it
    // before it stamped anything, and has decided about all of it.
    wait_ready(nudge.admin()).await;
    wait_idle(&nudge).await;
    let ignored: k8s_openapi::api::apps::v1::Deployment = Api::namespaced(cluster.client(), &other)
        .get("ignored")
        .await
        .unwrap();
    let annotations = ignored
        .spec
        .unwrap()
        .template
        .metadata
        .unwrap()
        .annotations
        .unwrap_or_default();
    assert!(
        !annotations.contains_key(CONFIG_HASH),
        "the ignored namespace is not stamped"
    );
    let selector = format!("metadata.namespace!={other}");
    assert!(
        double
            .requests()
            .iter()
            .filter(|r| r.path == "/apis/apps/v1/deployments" || r.path == "/api/v1/configmaps")
            .all(|r| r.query_param("fieldSelector").as_deref() == Some(selector.as_str())),
        "every all-namespace list/watch carries the field selector"
    );
    nudge.stop().await;
}
