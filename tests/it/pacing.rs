//! Pacing as designed (design §5): `min_interval` holds a re-stamp only while
//! the previous rollout has not caught up; a source rewriting itself in a loop
//! still rolls a workload at most twice.
//!
//! The workloads are Deployments scaled to zero, so a rollout completes as soon
//! as the Deployment controller observes it: kube-controller-manager on a real
//! cluster, its imitation on the API server double.

use std::time::Duration;

use crate::support::*;
use k8s_openapi::api::apps::v1::Deployment;
use serde_json::{Value, json};

const CONFIG_HASH: &str = "nudge.dev/config-hash";

/// A pod reading ConfigMap `configmap` as a volume and Secret `secret` as env.
fn pod_with_both(configmap: &str, secret: &str) -> Value {
    let mut pod = pod_mounting_configmap(configmap);
    pod["containers"][0]["envFrom"] = json!([{ "secretRef": { "name": secret } }]);
    pod
}

/// Creates an auto Deployment `name` scaled to zero.
async fn scaled_to_zero(cluster: &TestCluster, name: &str, pod: Value) {
    cluster
        .create_workload("Deployment", name, &[("nudge.dev/auto", "true")], &[], pod)
        .await;
    cluster
        .merge_patch::<Deployment>(name, json!({ "spec": { "replicas": 0 } }))
        .await;
}

/// Waits until the Deployment's status has caught up with its generation.
async fn rollout_complete(cluster: &TestCluster, name: &str) {
    wait_for("the rollout to complete", WAIT, || async {
        let deployment = cluster.workload("Deployment", name).await;
        let generation = deployment["metadata"]["generation"].as_i64();
        (deployment["status"]["observedGeneration"].as_i64() == generation).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_completed_rollout_two_changes_within_the_debounce_roll_once() {
    let cluster = TestCluster::start("pacing-complete").await;
    let sentinel = cluster.sentinel().await;
    cluster.put_configmap("pace-cm", &[("a", "1")]).await;
    cluster.put_secret("pace-secret", &[("s", "1")]).await;
    scaled_to_zero(&cluster, "paced", pod_with_both("pace-cm", "pace-secret")).await;
    let mut config = cluster.nudge_config();
    config.engine.debounce = Duration::from_secs(2);
    // Far longer than the test waits: a stamp proves it did not hold.
    config.engine.min_interval = Duration::from_secs(600);
    let nudge = cluster.start_nudge(config);
    let first = wait_for_stamp(&cluster, "Deployment", "paced", CONFIG_HASH, None).await;
    rollout_complete(&cluster, "paced").await;
    // The scenario: the next change comes after the rollout completed,
    // and nudge knows it did (it has seen the status and holds nothing).
    sentinel.quiesce(&nudge).await;

    let counter = cluster.patch_counter("Deployment", "paced").await;
    cluster.put_configmap("pace-cm", &[("a", "2")]).await;
    // The second change comes while nudge holds the first in its window.
    wait_holding(&nudge).await;
    cluster.put_secret("pace-secret", &[("s", "2")]).await;
    let second = wait_for_stamp(&cluster, "Deployment", "paced", CONFIG_HASH, Some(&first)).await;
    // A stamp for the Secret alone would be held (the rollout just started)
    // and written once it completes: nothing is outstanding once it would have.
    sentinel.quiesce(&nudge).await;
    assert_eq!(
        counter.count(&cluster).await,
        1,
        "one roll for both changes"
    );
    let now = cluster.template_annotations("Deployment", "paced").await;
    assert_eq!(now.get(CONFIG_HASH), Some(&second));
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_rewritten_every_200ms_for_30s_rolls_at_most_twice() {
    let cluster = TestCluster::start("pacing-loop").await;
    let sentinel = cluster.sentinel().await;
    cluster.put_configmap("looping", &[("n", "0")]).await;
    scaled_to_zero(&cluster, "looped", pod_mounting_configmap("looping")).await;
    let mut config = cluster.nudge_config();
    // The defaults, but a short debounce so the test ends soon after the loop.
    let config_debounce = Duration::from_secs(1);
    config.engine.debounce = config_debounce;
    config.engine.max_delay = nudge::Config::default().engine.max_delay;
    config.engine.min_interval = nudge::Config::default().engine.min_interval;
    let nudge = cluster.start_nudge(config);
    let first = wait_for_stamp(&cluster, "Deployment", "looped", CONFIG_HASH, None).await;
    rollout_complete(&cluster, "looped").await;

    let counter = cluster.patch_counter("Deployment", "looped").await;
    // The loop is the scenario: a source rewriting itself every 200 ms.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut n = 0;
    // Rewrites more than half the debounce apart: on a loaded machine a write
    // can take that long, and a pause of a whole debounce window is a quiet
    // period after which nudge rightly stamps.
    let mut pauses = 0;
    let mut last_written = None;
    while tokio::time::Instant::now() < deadline {
        n += 1;
        cluster
            .put_configmap("looping", &[("n", &n.to_string())])
            .await;
        let written = tokio::time::Instant::now();
        if last_written.is_some_and(|at| written - at > config_debounce / 2) {
            pauses += 1;
        }
        last_written = Some(written);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Once the loop stops, nudge has seen every rewrite and written what they
    // caused: the last content is on the template (else a stamp would still be
    // outstanding) and nothing rolls it again. Two rolls: one when max-delay
    // ends the first window, one after the loop; and one per pause at most.
    sentinel.quiesce(&nudge).await;
    let rolls = counter.count(&cluster).await;
    assert!(
        (1..=2 + pauses).contains(&rolls),
        "{rolls} rolls for {n} rewrites with {pauses} pauses"
    );
    let now = cluster.template_annotations("Deployment", "looped").await;
    assert_ne!(now.get(CONFIG_HASH), Some(&first));
    nudge.stop().await;
}
