//! Holds on a new workload's pods while its required config is missing: nudge's
//! scheduling gate and Wave's `scheduling-disabled` scheduler swap, each lifted
//! together with the stamp, in one change, once the config exists.

use crate::support::*;
use serde_json::{Value, json};

const GATE: &str = "nudge.dev/awaiting-config";
const WAVE_DISABLED: &str = "wave.pusher.com/scheduling-disabled";

/// Waits for nudge's `MissingConfig` Event about `name`: nudge has looked at the
/// workload and found its config missing.
async fn missing_reported(cluster: &TestCluster, name: &str) {
    wait_for("the MissingConfig Event", WAIT, || async {
        let events = cluster.events_for(name, "MissingConfig").await;
        (!events.is_empty()).then_some(())
    })
    .await;
}

fn generation(workload: &Value) -> i64 {
    workload["metadata"]["generation"].as_i64().unwrap_or(0)
}

fn pod_spec(workload: &Value) -> &Value {
    &workload["spec"]["template"]["spec"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_workload_is_released_with_its_stamp_in_one_change() {
    let cluster = TestCluster::start("holds-gate").await;
    let mut pod = pod_mounting_configmap("late-config");
    pod["schedulingGates"] = json!([{ "name": "team.example/own" }, { "name": GATE }]);
    // As the webhook leaves a new workload whose config is missing.
    cluster
        .create_workload(
            "Deployment",
            "gated",
            &[
                ("nudge.dev/auto", "true"),
                ("nudge.dev/scheduling-gate", "true"),
            ],
            &[],
            pod,
        )
        .await;
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    missing_reported(&cluster, "gated").await;
    let held = cluster.workload("Deployment", "gated").await;
    assert_eq!(
        generation(&held),
        1,
        "nothing written while the config is missing"
    );

    cluster.put_configmap("late-config", &[("a", "1")]).await;
    let released = wait_for("the gate to be lifted", WAIT, || async {
        let workload = cluster.workload("Deployment", "gated").await;
        let gates = pod_spec(&workload)["schedulingGates"].clone();
        (!gates.to_string().contains(GATE)).then_some(workload)
    })
    .await;
    assert_eq!(
        pod_spec(&released)["schedulingGates"],
        json!([{ "name": "team.example/own" }]),
        "only nudge's gate is lifted"
    );
    let stamp = released["spec"]["template"]["metadata"]["annotations"]["nudge.dev/config-hash"]
        .as_str()
        .unwrap_or_default();
    assert!(
        stamp.starts_with("sha256-"),
        "stamped in the same change: {released}"
    );
    assert_eq!(generation(&released), 2, "one change to the pod template");
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waves_scheduler_swap_is_restored_with_the_wave_hash() {
    let cluster = TestCluster::start("holds-wave").await;
    let mut pod = pod_mounting_configmap("wave-config");
    pod["schedulerName"] = json!("wave.pusher.com/invalid");
    // As Wave's webhook left a workload created while its config was missing.
    cluster
        .create_workload(
            "Deployment",
            "waved",
            &[
                ("wave.pusher.com/update-on-config-change", "true"),
                (WAVE_DISABLED, "default-scheduler"),
            ],
            &[],
            pod,
        )
        .await;
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    missing_reported(&cluster, "waved").await;
    let held = cluster.workload("Deployment", "waved").await;
    assert_eq!(pod_spec(&held)["schedulerName"], "wave.pusher.com/invalid");
    assert_eq!(generation(&held), 1);

    cluster.put_configmap("wave-config", &[("a", "1")]).await;
    let restored = wait_for("the scheduler to be restored", WAIT, || async {
        let workload = cluster.workload("Deployment", "waved").await;
        (pod_spec(&workload)["schedulerName"] == "default-scheduler").then_some(workload)
    })
    .await;
    assert!(
        restored["metadata"]["annotations"]
            .get(WAVE_DISABLED)
            .is_none()
    );
    let hash =
        &restored["spec"]["template"]["metadata"]["annotations"]["wave.pusher.com/config-hash"];
    assert!(
        hash.is_string(),
        "Wave's hash in the same change: {restored}"
    );
    assert_eq!(generation(&restored), 2);
    nudge.stop().await;
}
