//! The admin server of a running nudge: `/ready` turns 200 once every watch has
//! listed, `/metrics` reflects what the engine tracks.

use std::time::Duration;

use crate::support::*;
use nudge::__private::runtime::metrics::Metrics;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_after_every_watch_listed_and_metrics_show_tracked_workloads() {
    let cluster = TestCluster::start("admin-ready").await;
    cluster
        .auto_deployment("web", "app-config", &[("a", "1")])
        .await;
    let mut config = cluster.nudge_config();
    let addr = free_port();
    config.admin.bind = addr;
    let metrics = Metrics::new();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(nudge::__private::runtime::run_with_metrics(
        config,
        cluster.client(),
        shutdown.clone(),
        metrics,
    ));

    wait_for("/live", WAIT, || async {
        http_get(addr, "/live").await.filter(|(s, _)| *s == 200)
    })
    .await;
    wait_for("/ready", WAIT, || async {
        http_get(addr, "/ready").await.filter(|(s, _)| *s == 200)
    })
    .await;
    wait_for_stamp(&cluster, "Deployment", "web", "nudge.dev/config-hash", None).await;
    let body = wait_for("metrics of the tracked workload", WAIT, || async {
        http_get(addr, "/metrics")
            .await
            .map(|(_, body)| body)
            .filter(|b| b.contains("nudge_tracked_workloads 1"))
    })
    .await;
    assert!(body.contains("nudge_tracked_references 1"), "{body}");
    assert!(body.contains("nudge_leader 1"), "{body}");
    assert!(
        body.contains(
            r#"nudge_stamps_total{kind="deployment",source="configmap",result="applied"} 1"#
        ),
        "{body}"
    );
    let latency_count = body
        .lines()
        .find_map(|l| l.strip_prefix("nudge_stamp_latency_seconds_count "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(
        latency_count >= 1.0,
        "the stamp moved the latency histogram: {body}"
    );

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("nudge stops")
        .unwrap()
        .unwrap();
    assert!(
        http_get(addr, "/live").await.is_none(),
        "the admin server stops last"
    );
}

/// Needs the double: its ConfigMap lists fail on purpose, and its request log
/// shows nudge trying them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_only_not_ready_while_an_initial_list_keeps_failing() {
    let cluster = TestCluster::start_double_only("admin-not-ready").await;
    let double = cluster.double().unwrap();
    // Every ConfigMap list and watch fails until the failures are cleared.
    double.fail_next(
        100_000,
        500,
        apiserver_double::RequestFilter::any()
            .method("GET")
            .path_contains("/configmaps"),
    );
    let mut config = cluster.nudge_config();
    let addr = free_port();
    config.admin.bind = addr;
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(nudge::__private::runtime::run_with_metrics(
        config,
        cluster.client(),
        shutdown.clone(),
        Metrics::new(),
    ));
    wait_for("/live", WAIT, || async {
        http_get(addr, "/live").await.filter(|(s, _)| *s == 200)
    })
    .await;
    // nudge has tried the ConfigMap list (and failed) at least twice, and every
    // other watch has listed: what keeps it unready is the ConfigMap list alone.
    wait_for("failed ConfigMap lists", WAIT, || async {
        let failed = double
            .requests()
            .iter()
            .filter(|r| r.method == "GET" && r.path.ends_with("/configmaps") && r.status == 500)
            .count();
        (failed >= 2).then_some(())
    })
    .await;
    let body = wait_for("/ready to wait for the ConfigMaps only", WAIT, || async {
        http_get(addr, "/ready")
            .await
            .filter(|(s, body)| *s == 503 && !body.contains(','))
            .map(|(_, body)| body)
    })
    .await;
    assert!(body.contains("configmap"), "{body}");

    double.clear_failures();
    wait_for("/ready after the lists", WAIT, || async {
        http_get(addr, "/ready").await.filter(|(s, _)| *s == 200)
    })
    .await;
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("nudge stops")
        .unwrap()
        .unwrap();
}

/// `nudge_stamps_outstanding` counts a stamp until the answer to its write:
/// with every API response 1.5 s late, it reads 1 while the write is on its way
/// (a gauge of the queue alone would read 1 only for the instant between the
/// change and its dispatch, with no debounce), then 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_only_outstanding_stamps_count_a_write_until_it_is_answered() {
    const APPLIED: &str =
        r#"nudge_stamps_total{kind="deployment",source="configmap",result="applied"}"#;
    let cluster = TestCluster::start_double_only("admin-outstanding").await;
    cluster
        .auto_deployment("web", "app-config", &[("a", "1")])
        .await;
    let mut config = cluster.nudge_config();
    config.engine.debounce = Duration::ZERO;
    let nudge = cluster.start_ready_nudge(config).await;
    wait_for_stamp(&cluster, "Deployment", "web", "nudge.dev/config-hash", None).await;
    wait_idle(&nudge).await;
    let metrics = nudge.metrics_at();
    let applied = metrics.sum(APPLIED).await.expect("metrics");

    let double = cluster.double().expect("on the double");
    double.set_latency(Duration::from_millis(1500));
    cluster.put_configmap("app-config", &[("a", "2")]).await;
    let outstanding = std::sync::atomic::AtomicUsize::new(0);
    wait_for("the stamp to be written", WAIT, || async {
        let text = metrics.text().await?;
        if sample(&text, OUTSTANDING) == Some(1.0) {
            outstanding.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        (sample(&text, APPLIED)? > applied).then_some(())
    })
    .await;
    double.set_latency(Duration::ZERO);
    let outstanding_reads = outstanding.into_inner();
    assert!(
        outstanding_reads >= 3,
        "the write in flight read as outstanding {outstanding_reads} times"
    );
    wait_idle(&nudge).await;
    nudge.stop().await;
}
