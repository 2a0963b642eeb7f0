//! Knowing that config was deployed: nudge follows the rollouts it starts and
//! says how each ended (Events, `nudge.dev/history`), from the workload's own
//! status as kube-controller-manager writes it. With no nodes (the double, and
//! the maintainers' real control plane), `replicas: 0` completes and
//! `replicas: 1` never becomes available: a short `progressDeadlineSeconds`
//! ends in `ProgressDeadlineExceeded`.

use crate::support::{TestCluster, WAIT, pod_mounting_configmap, wait_for, wait_for_stamp};
use k8s_openapi::api::apps::v1::Deployment;
use serde_json::{Value, json};

const CONFIG_HASH: &str = "nudge.dev/config-hash";

/// A Deployment `name` with `nudge.dev/auto` mounting ConfigMap `app-config`,
/// with `replicas` and `progressDeadlineSeconds`.
async fn deployment(cluster: &TestCluster, name: &str, replicas: i64, deadline: i64) {
    let body = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": name, "annotations": { "nudge.dev/auto": "true" } },
        "spec": {
            "replicas": replicas,
            "progressDeadlineSeconds": deadline,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": pod_mounting_configmap("app-config"),
            },
        },
    });
    cluster.apply_as_user::<Deployment>(name, body).await;
}

/// The note of the one Event `reason` about `name`, once it exists.
async fn event_note(cluster: &TestCluster, name: &str, reason: &str) -> String {
    wait_for(&format!("a {reason} Event on {name}"), WAIT, || async {
        let events = cluster.events_for(name, reason).await;
        events.last().and_then(|e| e.note.clone())
    })
    .await
}

/// The revisions in the workload's `nudge.dev/history`, once it has `count`.
async fn history(cluster: &TestCluster, kind: &str, name: &str, count: usize) -> Vec<Value> {
    wait_for(
        &format!("{count} revisions in {name}'s history"),
        WAIT,
        || async {
            let workload = cluster.workload(kind, name).await;
            let history: Vec<Value> = workload["metadata"]["annotations"]["nudge.dev/history"]
                .as_str()
                .and_then(|h| serde_json::from_str(h).ok())?;
            (history.len() >= count).then_some(history)
        },
    )
    .await
}

fn marker(workload: &Value) -> Option<&str> {
    workload["metadata"]["annotations"]["nudge.dev/rollout"].as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_rollout_is_reported_with_who_changed_what_and_recorded() {
    let cluster = TestCluster::start("rollout-complete").await;
    cluster.put_configmap("app-config", &[("a", "1")]).await;
    deployment(&cluster, "web", 0, 600).await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    let first = wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, None).await;
    history(&cluster, "Deployment", "web", 1).await;

    cluster.put_configmap("app-config", &[("a", "2")]).await;
    wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, Some(&first)).await;
    let revisions = history(&cluster, "Deployment", "web", 2).await;
    let second = &revisions[1];
    assert_eq!(second["revision"], 2);
    assert_eq!(second["outcome"], "complete");
    let change = &second["changed"][0];
    assert_eq!(
        change["ref"],
        format!("configmap/{}/app-config", cluster.namespace())
    );
    assert_eq!(
        change["by"], "test-user",
        "the field manager that changed it"
    );
    assert!(change["version"].is_string(), "{change}");
    assert!(
        marker(&cluster.workload("Deployment", "web").await).is_none(),
        "recorded: no rollout in flight"
    );
    let note = event_note(&cluster, "web", "RolloutComplete").await;
    assert!(note.starts_with("config revision 2 complete in "), "{note}");
    assert!(note.contains("app-config (by test-user"), "{note}");
    assert!(note.contains("nudge.dev/config-hash sha256-"), "{note}");
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_past_its_progress_deadline_fails_and_names_the_last_good_revision() {
    let cluster = TestCluster::start("rollout-failed").await;
    cluster.put_configmap("app-config", &[("a", "1")]).await;
    deployment(&cluster, "web", 0, 2).await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, None).await;
    history(&cluster, "Deployment", "web", 1).await;

    // One replica, no node to run it: kube-controller-manager gives up after
    // the 2 s deadline.
    cluster
        .merge_patch::<Deployment>("web", json!({"spec": {"replicas": 1}}))
        .await;
    cluster
        .put_configmap("app-config", &[("a", "broken")])
        .await;
    let note = event_note(&cluster, "web", "RolloutFailed").await;
    assert!(
        note.starts_with("config revision 2 failed after "),
        "{note}"
    );
    assert!(note.contains("(ProgressDeadlineExceeded)"), "{note}");
    assert!(
        note.contains("; last good: config revision 1 (nudge.dev/config-hash=sha256-"),
        "{note}"
    );
    let revisions = history(&cluster, "Deployment", "web", 2).await;
    assert_eq!(revisions[1]["outcome"], "failed");
    assert_eq!(revisions[1]["reason"], "ProgressDeadlineExceeded");
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_without_a_deadline_of_its_own_fails_by_nudges() {
    let cluster = TestCluster::start("rollout-own-deadline").await;
    cluster.put_configmap("app-config", &[("a", "1")]).await;
    cluster
        .create_workload(
            "StatefulSet",
            "db",
            &[
                ("nudge.dev/auto", "true"),
                ("nudge.dev/progress-deadline", "2s"),
            ],
            &[],
            pod_mounting_configmap("app-config"),
        )
        .await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    wait_for_stamp(&cluster, "StatefulSet", "db", CONFIG_HASH, None).await;
    let note = event_note(&cluster, "db", "RolloutFailed").await;
    assert!(
        note.contains("(not complete within its progress deadline (2s))"),
        "{note}"
    );
    let revisions = history(&cluster, "StatefulSet", "db", 1).await;
    assert_eq!(revisions[0]["outcome"], "failed");
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_that_ends_while_nudge_is_stopped_is_reported_once_after_the_restart() {
    let cluster = TestCluster::start("rollout-restart").await;
    cluster.put_configmap("app-config", &[("a", "1")]).await;
    // One replica and a long deadline: the first rollout stays in flight.
    deployment(&cluster, "web", 1, 600).await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, None).await;
    wait_for("the rollout in flight on the workload", WAIT, || async {
        marker(&cluster.workload("Deployment", "web").await).map(drop)
    })
    .await;
    nudge.stop().await;

    // Scaled to zero meanwhile: the rollout completes with nobody watching.
    cluster
        .merge_patch::<Deployment>("web", json!({"spec": {"replicas": 0}}))
        .await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    let revisions = history(&cluster, "Deployment", "web", 1).await;
    assert_eq!(revisions[0]["outcome"], "complete");
    event_note(&cluster, "web", "RolloutComplete").await;
    nudge.stop().await;
    let events = cluster.events_for("web", "RolloutComplete").await;
    let count: i32 = events
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum();
    assert_eq!(count, 1, "reported once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_change_supersedes_the_rollout_in_flight() {
    let cluster = TestCluster::start("rollout-superseded").await;
    cluster.put_configmap("app-config", &[("a", "1")]).await;
    deployment(&cluster, "web", 1, 600).await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    let first = wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, None).await;
    cluster.put_configmap("app-config", &[("a", "2")]).await;
    wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, Some(&first)).await;
    let note = event_note(&cluster, "web", "RolloutSuperseded").await;
    assert!(
        note.starts_with("config revision 1 superseded after "),
        "{note}"
    );
    assert!(note.contains("(superseded by config revision 2)"), "{note}");
    // Recorded with revision 2 when that one ends: until then it rides in
    // revision 2's marker.
    let in_flight: Value =
        serde_json::from_str(marker(&cluster.workload("Deployment", "web").await).unwrap())
            .unwrap();
    assert_eq!(in_flight["revision"], 2);
    assert_eq!(in_flight["superseded"][0]["revision"], 1);
    assert_eq!(in_flight["superseded"][0]["outcome"], "superseded");
    nudge.stop().await;
}
