//! Progressive config delivery (design §5d): `nudge.dev/mode` holds,
//! approvals, and waves, against the double and a real control plane alike.
//! With no nodes, `replicas: 0` completes its rollout and `replicas: 1` with a
//! short `progressDeadlineSeconds` fails (`ProgressDeadlineExceeded`).
//! Maintenance windows depend on the wall clock: they are tested in the core
//! with an injected one (`engine/core/plan_tests.rs`, `window/tests.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::support::{MetricsAt, Running, Sentinel, free_port};
use crate::support::{TestCluster, WAIT, pod_mounting_configmap, wait_for, wait_for_stamp};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use nudge::__private::runtime::metrics::Metrics;
use nudge::target::{
    ApplyOutcome, KubeTarget, StampPatch, Target, TargetContext, TargetError, TargetSettings,
    TemplatePath, Workload, WorkloadId, WorkloadKind,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const CONFIG_HASH: &str = "nudge.dev/config-hash";

/// A Deployment `name` with `nudge.dev/auto` mounting ConfigMap `app-config`,
/// with `replicas`, a `progressDeadlineSeconds` and these extra annotations.
async fn deployment(
    cluster: &TestCluster,
    name: &str,
    replicas: i64,
    deadline: i64,
    extra: &[(&str, &str)],
) {
    let mut annotations = json!({ "nudge.dev/auto": "true" });
    for (key, value) in extra {
        annotations[*key] = json!(value);
    }
    let body = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": name, "annotations": annotations },
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

async fn annotate(cluster: &TestCluster, name: &str, key: &str, value: &str) {
    cluster
        .merge_patch::<Deployment>(name, json!({"metadata": {"annotations": {key: value}}}))
        .await;
}

async fn stamp(cluster: &TestCluster, name: &str) -> Option<String> {
    cluster
        .template_annotations("Deployment", name)
        .await
        .get(CONFIG_HASH)
        .cloned()
}

/// The first note of a `reason` Event on `name` that `accept` takes.
async fn event_note(
    cluster: &TestCluster,
    name: &str,
    reason: &str,
    accept: impl Fn(&str) -> bool,
) -> String {
    wait_for(&format!("a {reason} Event on {name}"), WAIT, || async {
        let events = cluster.events_for(name, reason).await;
        events
            .into_iter()
            .filter_map(|e| e.note)
            .find(|note| accept(note))
    })
    .await
}

/// The pending fingerprint a `ConfigPending` note names.
fn pending_in(note: &str) -> String {
    let start = note.find("sha256-").expect("a fingerprint in the note");
    note[start..start + 19].to_owned()
}

async fn last_updated(cluster: &TestCluster, name: &str) -> String {
    let workload = cluster.workload("Deployment", name).await;
    workload["metadata"]["annotations"]["nudge.dev/last-updated"]
        .as_str()
        .expect("stamped")
        .to_owned()
}

/// `nudge explain deployment/<name>` as a table, run as the binary against
/// the cluster, with nudge's namespace set to the test namespace.
async fn explain(cluster: &TestCluster, name: &str) -> String {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_nudge"))
        .args(["explain", &format!("deployment/{name}")])
        .args(["-n", cluster.namespace()])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("KUBECONFIG", cluster.kubeconfig())
        .env("NUDGE_KUBERNETES__NAMESPACE", cluster.namespace())
        .output()
        .await
        .expect("run nudge explain");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).expect("UTF-8")
}

async fn held(nudge: &impl Running, reason: &str) -> f64 {
    let series = format!(r#"nudge_held_workloads{{reason="{reason}"}}"#);
    let text = nudge.metrics_at().text().await.expect("metrics");
    crate::support::sample(&text, &series).expect("exported")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_mode_reports_changed_config_and_never_stamps() {
    let cluster = TestCluster::start("delivery-notify").await;
    cluster.put_configmap("app-config", &[("a", "1")]).await;
    deployment(&cluster, "web", 0, 600, &[]).await;
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    let first = wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, None).await;
    let sentinel = Sentinel::create(cluster.client(), cluster.namespace()).await;
    annotate(&cluster, "web", "nudge.dev/mode", "notify").await;
    sentinel.quiesce(&nudge).await;

    cluster.put_configmap("app-config", &[("a", "2")]).await;
    let note = event_note(&cluster, "web", "ConfigPending", |_| true).await;
    assert!(note.contains("mode notify"), "{note}");
    sentinel.quiesce(&nudge).await;
    assert_eq!(stamp(&cluster, "web").await, Some(first), "never stamped");
    assert_eq!(held(&nudge, "notify").await, 1.0);
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_mode_stamps_exactly_the_approved_config() {
    let cluster = TestCluster::start("delivery-manual").await;
    cluster.put_configmap("app-config", &[("a", "1")]).await;
    deployment(&cluster, "web", 0, 600, &[]).await;
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    let first = wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, None).await;
    let sentinel = Sentinel::create(cluster.client(), cluster.namespace()).await;
    annotate(&cluster, "web", "nudge.dev/mode", "manual").await;
    sentinel.quiesce(&nudge).await;

    cluster.put_configmap("app-config", &[("a", "2")]).await;
    let older = pending_in(&event_note(&cluster, "web", "ConfigPending", |_| true).await);
    cluster.put_configmap("app-config", &[("a", "3")]).await;
    let newer =
        pending_in(&event_note(&cluster, "web", "ConfigPending", |n| !n.contains(&older)).await);

    // Approving the older config lets nothing through: it is not pending.
    annotate(&cluster, "web", "nudge.dev/approve", &older).await;
    event_note(&cluster, "web", "ConfigPending", |n| {
        n.contains(&format!("approves {older}"))
    })
    .await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(
        stamp(&cluster, "web").await.as_deref(),
        Some(first.as_str())
    );

    annotate(&cluster, "web", "nudge.dev/approve", &newer).await;
    let approved = wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, Some(&first)).await;
    // It was the newest content: back in auto mode, nothing is left to stamp.
    annotate(&cluster, "web", "nudge.dev/mode", "auto").await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(stamp(&cluster, "web").await, Some(approved));
    assert_eq!(held(&nudge, "manual").await, 0.0);
    nudge.stop().await;
}

/// Deployments `wave-0`, `wave-1`, `wave-2` sharing `app-config`, each in its
/// wave, `wave-0` with `first_replicas`.
async fn three_waves(cluster: &TestCluster, first_replicas: i64) {
    deployment(cluster, "wave-0", first_replicas, 2, &[]).await;
    deployment(cluster, "wave-1", 0, 600, &[("nudge.dev/wave", "1")]).await;
    deployment(cluster, "wave-2", 0, 600, &[("nudge.dev/wave", "2")]).await;
}

/// Gives `wave-0` a replica no node runs (its next rollout cannot complete),
/// then changes `app-config` to `a = content`.
async fn change_with_wave_0_unfinishable(cluster: &TestCluster, content: &str) {
    cluster
        .merge_patch::<Deployment>("wave-0", json!({"spec": {"replicas": 1}}))
        .await;
    cluster.put_configmap("app-config", &[("a", content)]).await;
}

/// `later` was stamped after `earlier`'s newest rollout completed.
async fn stamped_after(cluster: &TestCluster, earlier: &str, later: &str, revisions: usize) {
    let done = cluster.history("Deployment", earlier, revisions).await;
    let done = &done[revisions - 1];
    assert_eq!(done["outcome"], "complete", "{done}");
    // `ended` is when nudge saw the rollout complete, which releases the
    // next wave; compared as times (RFC 3339 strings of different precision
    // do not sort as text).
    let at = |text: &str| -> k8s_openapi::jiff::Timestamp { text.parse().expect("RFC 3339") };
    let ended = at(done["ended"].as_str().expect("ended"));
    let stamped = at(&last_updated(cluster, later).await);
    assert!(
        stamped >= ended,
        "{later} stamped at {stamped}, before {earlier} completed at {ended}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_waves_complete_in_order() {
    let cluster = TestCluster::start("delivery-waves").await;
    cluster.put_configmap("app-config", &[("a", "1")]).await;
    three_waves(&cluster, 0).await;
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    let first = wait_for_stamp(&cluster, "Deployment", "wave-2", CONFIG_HASH, None).await;
    cluster.history("Deployment", "wave-2", 1).await;

    cluster.put_configmap("app-config", &[("a", "2")]).await;
    let second = wait_for_stamp(&cluster, "Deployment", "wave-2", CONFIG_HASH, Some(&first)).await;
    for name in ["wave-0", "wave-1"] {
        assert_eq!(
            stamp(&cluster, name).await.as_deref(),
            Some(second.as_str())
        );
    }
    stamped_after(&cluster, "wave-0", "wave-1", 2).await;
    stamped_after(&cluster, "wave-1", "wave-2", 2).await;
    let waiting = event_note(&cluster, "wave-2", "ConfigWaiting", |_| true).await;
    assert!(waiting.contains("waits for wave"), "{waiting}");
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_wave_halts_the_rest_until_a_fix_releases_them() {
    let cluster = TestCluster::start("delivery-halt").await;
    cluster.put_configmap("app-config", &[("a", "1")]).await;
    three_waves(&cluster, 0).await;
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    let first = wait_for_stamp(&cluster, "Deployment", "wave-2", CONFIG_HASH, None).await;
    cluster.history("Deployment", "wave-2", 1).await;

    // One replica and no node: wave 0's next rollout fails after 2 s.
    change_with_wave_0_unfinishable(&cluster, "broken").await;
    let halted = event_note(&cluster, "wave-0", "WavesHalted", |_| true).await;
    assert!(halted.contains("wave-1 (wave 1)"), "{halted}");
    assert!(halted.contains("wave-2 (wave 2)"), "{halted}");
    assert!(halted.contains("app-config"), "{halted}");
    for name in ["wave-1", "wave-2"] {
        event_note(&cluster, name, "ConfigWaiting", |n| n.contains("halted")).await;
    }
    let sentinel = Sentinel::create(cluster.client(), cluster.namespace()).await;
    sentinel.flush_events(&nudge).await;
    assert_eq!(cluster.events_for("wave-0", "WavesHalted").await.len(), 1);
    for name in ["wave-1", "wave-2"] {
        assert_eq!(
            stamp(&cluster, name).await.as_deref(),
            Some(first.as_str()),
            "{name} held"
        );
    }
    assert_eq!(held(&nudge, "halted").await, 2.0);
    let table = explain(&cluster, "wave-1").await;
    eprintln!("nudge explain deployment/wave-1:\n{table}");
    assert!(
        table.contains(&format!(
            "wave 0 halted, the rollout of Deployment/{}/wave-0 failed",
            cluster.namespace()
        )),
        "{table}"
    );
    assert!(
        table.contains("wave 0  Deployment/wave-0  failed"),
        "{table}"
    );
    assert!(
        table.contains("wave 2  Deployment/wave-2  not stamped"),
        "{table}"
    );

    // The fix: wave 0 rolls it (and completes once scaled to what the
    // cluster can run), then the others follow with it. Scaling first would
    // complete the broken revision and release it.
    let broken = stamp(&cluster, "wave-0").await.expect("stamped");
    cluster.put_configmap("app-config", &[("a", "fixed")]).await;
    let fixed = wait_for_stamp(&cluster, "Deployment", "wave-0", CONFIG_HASH, Some(&broken)).await;
    cluster
        .merge_patch::<Deployment>("wave-0", json!({"spec": {"replicas": 0}}))
        .await;
    let last = wait_for_stamp(&cluster, "Deployment", "wave-2", CONFIG_HASH, Some(&first)).await;
    assert_eq!(
        last, fixed,
        "released with the fix, never the broken config"
    );
    assert_eq!(
        stamp(&cluster, "wave-1").await.as_deref(),
        Some(fixed.as_str())
    );
    stamped_after(&cluster, "wave-1", "wave-2", 2).await;
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_mid_plan_resumes_it_without_stamping_a_wave_twice() {
    let cluster = TestCluster::start("delivery-restart").await;
    cluster.put_configmap("app-config", &[("a", "1")]).await;
    deployment(&cluster, "wave-0", 0, 600, &[]).await;
    deployment(&cluster, "wave-1", 0, 600, &[("nudge.dev/wave", "1")]).await;
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    let first = wait_for_stamp(&cluster, "Deployment", "wave-1", CONFIG_HASH, None).await;
    cluster.history("Deployment", "wave-1", 1).await;

    // Wave 0 rolls out to a replica no node runs, within a long deadline:
    // wave 1 waits while nudge restarts.
    change_with_wave_0_unfinishable(&cluster, "2").await;
    let second = wait_for_stamp(&cluster, "Deployment", "wave-0", CONFIG_HASH, Some(&first)).await;
    event_note(&cluster, "wave-1", "ConfigWaiting", |n| {
        n.contains("waits for wave 0")
    })
    .await;
    nudge.stop().await;

    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    let sentinel = Sentinel::create(cluster.client(), cluster.namespace()).await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(
        stamp(&cluster, "wave-1").await.as_deref(),
        Some(first.as_str()),
        "still waiting"
    );

    cluster
        .merge_patch::<Deployment>("wave-0", json!({"spec": {"replicas": 0}}))
        .await;
    let resumed = wait_for_stamp(&cluster, "Deployment", "wave-1", CONFIG_HASH, Some(&first)).await;
    assert_eq!(resumed, second);
    let revisions = cluster.history("Deployment", "wave-0", 2).await;
    assert_eq!(
        revisions.len(),
        2,
        "wave 0 was stamped once for the change: {revisions:?}"
    );
    assert_eq!(revisions[1]["outcome"], "complete");
    assert!(
        cluster.workload("Deployment", "wave-0").await["metadata"]["annotations"]["nudge.dev/rollout"]
            .is_null(),
        "no rollout of wave 0 in flight"
    );
    nudge.stop().await;
}

/// nudge in this process under leader election with short lease timings,
/// its metrics read from `metrics`.
fn start_replica(
    cluster: &TestCluster,
    metrics: &Metrics,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let mut config = cluster.nudge_config();
    config.leader_election.lease_duration = Duration::from_secs(2);
    config.leader_election.renew_deadline = Duration::from_secs(1);
    config.leader_election.retry_period = Duration::from_millis(400);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(nudge::__private::runtime::run_with_metrics(
        config,
        cluster.client(),
        shutdown.clone(),
        metrics.clone(),
    ));
    let task = tokio::spawn(async move {
        task.await
            .expect("nudge does not panic")
            .expect("nudge runs");
    });
    (shutdown, task)
}

fn leads(metrics: &Metrics) -> bool {
    crate::support::sample_sum(&metrics.encode().unwrap(), "nudge_leader") == 1.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_resumes_the_plan_where_the_workloads_say_it_is() {
    let cluster = TestCluster::start("delivery-failover").await;
    cluster.put_configmap("app-config", &[("a", "1")]).await;
    deployment(&cluster, "wave-0", 0, 600, &[]).await;
    deployment(&cluster, "wave-1", 0, 600, &[("nudge.dev/wave", "1")]).await;
    let (a, b) = (Metrics::new(), Metrics::new());
    let replicas = [start_replica(&cluster, &a), start_replica(&cluster, &b)];
    let first = wait_for_stamp(&cluster, "Deployment", "wave-1", CONFIG_HASH, None).await;
    cluster.history("Deployment", "wave-1", 1).await;

    // Wave 0 rolls out to a replica no node runs: wave 1 waits.
    change_with_wave_0_unfinishable(&cluster, "2").await;
    let second = wait_for_stamp(&cluster, "Deployment", "wave-0", CONFIG_HASH, Some(&first)).await;
    event_note(&cluster, "wave-1", "ConfigWaiting", |n| {
        n.contains("waits for wave 0")
    })
    .await;

    // The leader goes; the other replica takes over mid-plan.
    let leader = wait_for("one leader", WAIT, || async {
        match (leads(&a), leads(&b)) {
            (true, false) => Some(0),
            (false, true) => Some(1),
            _ => None,
        }
    })
    .await;
    let [(stop_a, task_a), (stop_b, task_b)] = replicas;
    let (stop, task, (next_stop, next_task), next) = if leader == 0 {
        (stop_a, task_a, (stop_b, task_b), &b)
    } else {
        (stop_b, task_b, (stop_a, task_a), &a)
    };
    stop.cancel();
    task.await.unwrap();
    wait_for("the other replica to lead", WAIT, || async {
        leads(next).then_some(())
    })
    .await;
    let sentinel = Sentinel::create(cluster.client(), cluster.namespace()).await;
    sentinel.quiesce(next).await;
    assert_eq!(
        stamp(&cluster, "wave-1").await.as_deref(),
        Some(first.as_str()),
        "wave 1 still waits for wave 0"
    );

    cluster
        .merge_patch::<Deployment>("wave-0", json!({"spec": {"replicas": 0}}))
        .await;
    let resumed = wait_for_stamp(&cluster, "Deployment", "wave-1", CONFIG_HASH, Some(&first)).await;
    assert_eq!(resumed, second);
    let revisions = cluster.history("Deployment", "wave-1", 2).await;
    assert_eq!(revisions[1]["outcome"], "complete");
    sentinel.quiesce(next).await;
    let wave_0 = cluster.history("Deployment", "wave-0", 2).await;
    assert_eq!(
        wave_0.len(),
        2,
        "wave 0 stamped once for the change: {wave_0:?}"
    );
    assert_eq!(revisions.len(), 2, "wave 1 stamped once for the change");
    next_stop.cancel();
    next_task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_change_mid_plan_supersedes_it() {
    let cluster = TestCluster::start("delivery-supersede").await;
    cluster.put_configmap("app-config", &[("a", "1")]).await;
    deployment(&cluster, "wave-0", 0, 600, &[]).await;
    deployment(&cluster, "wave-1", 0, 600, &[("nudge.dev/wave", "1")]).await;
    deployment(&cluster, "wave-2", 0, 600, &[("nudge.dev/wave", "2")]).await;
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    let first = wait_for_stamp(&cluster, "Deployment", "wave-2", CONFIG_HASH, None).await;
    cluster.history("Deployment", "wave-2", 1).await;

    // Change 2 reaches wave 0, whose rollout cannot finish yet.
    change_with_wave_0_unfinishable(&cluster, "2").await;
    let second = wait_for_stamp(&cluster, "Deployment", "wave-0", CONFIG_HASH, Some(&first)).await;
    // Change 3 supersedes it there, and is what the later waves get.
    cluster.put_configmap("app-config", &[("a", "3")]).await;
    let third = wait_for_stamp(&cluster, "Deployment", "wave-0", CONFIG_HASH, Some(&second)).await;
    let sentinel = Sentinel::create(cluster.client(), cluster.namespace()).await;
    sentinel.quiesce(&nudge).await;
    for name in ["wave-1", "wave-2"] {
        assert_eq!(
            stamp(&cluster, name).await.as_deref(),
            Some(first.as_str()),
            "{name} waits"
        );
    }
    cluster
        .merge_patch::<Deployment>("wave-0", json!({"spec": {"replicas": 0}}))
        .await;
    let last = wait_for_stamp(&cluster, "Deployment", "wave-2", CONFIG_HASH, Some(&first)).await;
    assert_eq!(last, third, "the later waves never get change 2");
    assert_eq!(
        stamp(&cluster, "wave-1").await.as_deref(),
        Some(third.as_str())
    );
    let wave_1 = cluster.history("Deployment", "wave-1", 2).await;
    assert_eq!(wave_1.len(), 2, "wave 1 rolled once: {wave_1:?}");
    let wave_0 = cluster.history("Deployment", "wave-0", 3).await;
    assert_eq!(wave_0[1]["outcome"], "superseded", "{wave_0:?}");
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_judges_a_wave_plan_across_kinds() {
    let cluster = TestCluster::start("delivery-explain-kinds").await;
    cluster.put_configmap("app-config", &[("a", "1")]).await;
    cluster.put_configmap("other-config", &[("a", "1")]).await;
    let auto = [("nudge.dev/auto", "true")];
    cluster
        .create_workload(
            "StatefulSet",
            "db",
            &auto,
            &[],
            pod_mounting_configmap("app-config"),
        )
        .await;
    cluster
        .create_workload(
            "DaemonSet",
            "agent",
            &auto,
            &[],
            pod_mounting_configmap("other-config"),
        )
        .await;
    deployment(&cluster, "web", 0, 600, &[("nudge.dev/wave", "1")]).await;
    // No nudge runs: nothing is stamped, so wave 1 waits for the StatefulSet.
    let table = explain(&cluster, "web").await;
    eprintln!("nudge explain deployment/web:\n{table}");
    assert!(
        table.contains("wave 0  StatefulSet/db  not stamped"),
        "{table}"
    );
    assert!(
        table.contains(&format!(
            "waits for wave 0: StatefulSet/{}/db has not completed its rollout",
            cluster.namespace()
        )),
        "{table}"
    );
    assert!(
        !table.contains("DaemonSet/agent"),
        "shares no input: {table}"
    );
}

/// nudge's StatefulSet target, whose watch starts only once `open` is
/// notified: after a start, StatefulSets are listed after the other kinds
/// (a slow or failing list of one kind, made to order).
struct LateStatefulSets {
    inner: Arc<KubeTarget>,
    open: Arc<tokio::sync::Notify>,
}

#[nudge::async_trait]
impl Target for LateStatefulSets {
    fn kind(&self) -> &WorkloadKind {
        self.inner.kind()
    }

    async fn run(self: Arc<Self>, ctx: TargetContext) {
        tokio::select! {
            () = self.open.notified() => {}
            () = ctx.cancelled() => return,
        }
        self.inner.clone().run(ctx).await;
    }

    async fn apply(
        &self,
        current: &Workload,
        patch: &StampPatch,
    ) -> Result<ApplyOutcome, TargetError> {
        self.inner.apply(current, patch).await
    }

    async fn get(&self, id: &WorkloadId) -> Result<Option<Workload>, TargetError> {
        self.inner.get(id).await
    }

    async fn annotate(
        &self,
        current: &Workload,
        annotations: &BTreeMap<String, Option<String>>,
    ) -> Result<bool, TargetError> {
        self.inner.annotate(current, annotations).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_a_later_wave_waits_for_an_earlier_wave_of_a_kind_listed_later() {
    let cluster = TestCluster::start("delivery-late-kind").await;
    cluster.put_configmap("app-config", &[("a", "1")]).await;
    cluster
        .create_workload(
            "StatefulSet",
            "db",
            &[("nudge.dev/auto", "true")],
            &[],
            pod_mounting_configmap("app-config"),
        )
        .await;
    cluster
        .merge_patch::<StatefulSet>("db", json!({"spec": {"replicas": 0}}))
        .await;
    deployment(&cluster, "web", 0, 600, &[("nudge.dev/wave", "1")]).await;
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    let first = wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, None).await;
    cluster.history("StatefulSet", "db", 1).await;
    cluster.history("Deployment", "web", 1).await;
    nudge.stop().await;

    // The config changes while nudge is down; the new process lists
    // Deployments (`web`, wave 1) before StatefulSets (`db`, wave 0).
    cluster.put_configmap("app-config", &[("a", "2")]).await;
    let mut config = cluster.nudge_config();
    let admin = free_port();
    config.admin.bind = admin;
    let statefulsets = KubeTarget::new(
        cluster.client(),
        WorkloadKind::new(
            "apps",
            "v1",
            "StatefulSet",
            TemplatePath::parse("spec.template").unwrap(),
        ),
        "statefulsets",
        TargetSettings::from_config(&config),
    );
    let open = Arc::new(tokio::sync::Notify::new());
    let late = LateStatefulSets {
        inner: Arc::new(statefulsets),
        open: open.clone(),
    };
    let shutdown = CancellationToken::new();
    let controller = nudge::Controller::from_config(config, cluster.client())
        .operate_as_configured()
        .with_target(Arc::new(late));
    let task = tokio::spawn(controller.run(shutdown.clone()));
    let metrics = MetricsAt::Admin(admin);
    wait_for("web held until every kind is listed", WAIT, || async {
        let text = metrics.text().await?;
        let held = crate::support::sample(&text, r#"nudge_held_workloads{reason="wave"}"#)?;
        (held == 1.0).then_some(())
    })
    .await;
    assert_eq!(
        stamp(&cluster, "web").await.as_deref(),
        Some(first.as_str()),
        "wave 1 waits"
    );
    // StatefulSets are listed: wave 0 rolls the new config, then wave 1.
    open.notify_one();
    let second = wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, Some(&first)).await;
    let db = cluster.workload("StatefulSet", "db").await;
    assert_eq!(
        db["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH].as_str(),
        Some(second.as_str())
    );
    let history = cluster.history("StatefulSet", "db", 2).await;
    assert_eq!(
        history.len(),
        2,
        "db stamped once for the change: {history:?}"
    );
    assert_eq!(history[1]["outcome"], "complete", "{history:?}");
    // The outcome's `ended` is when it was written, which may be after wave 1
    // was stamped on a busy machine; that wave 1 waits for wave 0 to
    // complete is the core's tests' to show. Here: wave 0 went first.
    let at = |text: &str| -> k8s_openapi::jiff::Timestamp { text.parse().expect("RFC 3339") };
    let db_stamped = at(db["metadata"]["annotations"]["nudge.dev/last-updated"]
        .as_str()
        .expect("db stamped"));
    let web_stamped = at(&last_updated(&cluster, "web").await);
    assert!(
        web_stamped > db_stamped,
        "web stamped at {web_stamped}, before db at {db_stamped}"
    );
    // Every Event published so far is out: none was for the wait.
    let sentinel = Sentinel::create(cluster.client(), cluster.namespace()).await;
    sentinel.flush_events(&metrics).await;
    let waiting = cluster.events_for("web", "ConfigWaiting").await;
    assert!(
        waiting
            .iter()
            .filter_map(|e| e.note.as_deref())
            .all(|note| !note.contains("listed")),
        "a wait for the listing is no Event: {waiting:?}"
    );
    shutdown.cancel();
    task.await.unwrap().unwrap();
}
