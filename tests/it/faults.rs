//! Changes survive dropped and expired watches and failing PATCHes. These tests
//! inject faults, so they run only on the in-process API server double (hence
//! `double_only_` in their names).

use std::time::Duration;

use crate::support::*;
use apiserver_double::RequestFilter;

const CONFIG_HASH: &str = "nudge.dev/config-hash";

async fn stamped_auto_deployment(cluster: &TestCluster, name: &str) -> String {
    cluster.auto_deployment(name, "cfg", &[("k", "1")]).await;
    wait_for_stamp(cluster, "Deployment", name, CONFIG_HASH, None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_only_change_made_while_watches_are_down_and_expired_is_still_stamped_once() {
    let cluster = TestCluster::start_double_only("watch-expired").await;
    let sentinel = cluster.sentinel().await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    let first = stamped_auto_deployment(&cluster, "web").await;
    let double = cluster.double().unwrap();
    let patches = cluster.patch_counter("Deployment", "web").await;

    // Watches go down and cannot come back for a while; meanwhile the config
    // changes and the history nudge would resume from is compacted away (410).
    double.fail_next(6, 500, RequestFilter::any().method("GET").watch(true));
    double.drop_watches();
    cluster.put_configmap("cfg", &[("k", "2")]).await;
    double.compact_history();

    wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, Some(&first)).await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(patches.count(&cluster).await, 1);
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_only_failing_patches_are_retried_until_the_stamp_lands() {
    let cluster = TestCluster::start_double_only("patch-500").await;
    let sentinel = cluster.sentinel().await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    let first = stamped_auto_deployment(&cluster, "api").await;
    let double = cluster.double().unwrap();
    let patches = cluster.patch_counter("Deployment", "api").await;

    double.fail_next(
        2,
        500,
        RequestFilter::any()
            .method("PATCH")
            .path_contains("/deployments/api"),
    );
    cluster.put_configmap("cfg", &[("k", "2")]).await;
    wait_for_stamp(&cluster, "Deployment", "api", CONFIG_HASH, Some(&first)).await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(
        patches.count(&cluster).await,
        3,
        "two failed attempts, then one that landed"
    );
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_only_throttled_patches_are_retried() {
    let cluster = TestCluster::start_double_only("patch-429").await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    let first = stamped_auto_deployment(&cluster, "api").await;
    let double = cluster.double().unwrap();
    double.fail_next_with_retry_after(
        1,
        429,
        1,
        RequestFilter::any()
            .method("PATCH")
            .path_contains("/deployments/api"),
    );
    cluster.put_configmap("cfg", &[("k", "2")]).await;
    wait_for_stamp(&cluster, "Deployment", "api", CONFIG_HASH, Some(&first)).await;
    nudge.stop().await;
}

/// A burst of stamps opens a bounded number of connections: with every response
/// 300 ms late, no 250 ms window sees more PATCHes arrive than writes may be in
/// flight (8), although the token bucket would let all 30 start at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_only_a_burst_of_stamps_keeps_a_bounded_number_of_writes_in_flight() {
    let cluster = TestCluster::start_double_only("write-bound").await;
    const WORKLOADS: usize = 30;
    for i in 0..WORKLOADS {
        cluster
            .auto_deployment(&format!("w{i}"), "shared", &[("k", "1")])
            .await;
    }
    let double = cluster.double().unwrap();
    double.set_latency(Duration::from_millis(300));
    let mut config = cluster.nudge_config();
    config.engine.debounce = Duration::ZERO;
    config.engine.stamps_per_second = 1000.0;
    config.engine.burst = 1000;
    let nudge = cluster.start_nudge(config);
    for i in 0..WORKLOADS {
        wait_for_stamp(&cluster, "Deployment", &format!("w{i}"), CONFIG_HASH, None).await;
    }
    let mut arrivals: Vec<std::time::SystemTime> = double
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.path.contains("/deployments/"))
        .map(|r| r.received_at)
        .collect();
    arrivals.sort();
    assert!(arrivals.len() >= WORKLOADS, "{} PATCHes", arrivals.len());
    let window = Duration::from_millis(250);
    let densest = arrivals
        .iter()
        .map(|start| {
            arrivals
                .iter()
                .filter(|t| **t >= *start && **t < *start + window)
                .count()
        })
        .max()
        .unwrap_or(0);
    assert!(densest <= 8, "{densest} PATCHes arrived within {window:?}");
    double.set_latency(Duration::ZERO);
    nudge.stop().await;
}
