//! Knowing that config was deployed: nudge follows the rollouts it starts and
//! says how each ended (Events, notifications, `nudge.dev/history`), from the
//! workload's own status as its controller writes it. With no nodes (the
//! double, and the maintainers' real control plane), `replicas: 0` completes
//! and `replicas: 1` never becomes available: a short
//! `progressDeadlineSeconds` ends in `ProgressDeadlineExceeded`, a short
//! `nudge.dev/progress-deadline` in nudge's own verdict. Where no controller
//! runs (Argo Rollouts, a `[[targets]]` kind) or none can finish (a Job's
//! pods stay Pending without nodes), the test writes the status as that
//! controller would.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{
    CrdGuard, InProcessNudge, Running, TestCluster, WAIT, pod_mounting_configmap, recorded_history,
    rollout_crd, wait_for, wait_for_stamp,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use nudge::config::{Config, NotifyConfig, NotifyFormat, Secret, TargetConfig};
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
    let events = cluster.wait_events(name, reason).await;
    events
        .last()
        .and_then(|e| e.note.clone())
        .unwrap_or_default()
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
    cluster.history("Deployment", "web", 1).await;

    cluster.put_configmap("app-config", &[("a", "2")]).await;
    wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, Some(&first)).await;
    let revisions = cluster.history("Deployment", "web", 2).await;
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
    cluster.history("Deployment", "web", 1).await;

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
    let revisions = cluster.history("Deployment", "web", 2).await;
    assert_eq!(revisions[1]["outcome"], "failed");
    assert_eq!(revisions[1]["reason"], "ProgressDeadlineExceeded");
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_whose_marker_someone_removed_is_reported_without_its_changes() {
    let cluster = TestCluster::start("rollout-unmarked").await;
    cluster.put_configmap("app-config", &[("a", "1")]).await;
    // One replica, no node to run it: revision 1 stays in flight.
    deployment(&cluster, "web", 1, 600).await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, None).await;
    assert!(marker(&cluster.workload("Deployment", "web").await).is_some());

    // Someone removes the marker; then the rollout fails (a 2 s deadline, long
    // passed since it started).
    cluster
        .merge_patch::<Deployment>(
            "web",
            json!({"metadata": {"annotations": {"nudge.dev/rollout": null}}}),
        )
        .await;
    cluster
        .merge_patch::<Deployment>("web", json!({"spec": {"progressDeadlineSeconds": 2}}))
        .await;
    let note = event_note(&cluster, "web", "RolloutFailed").await;
    assert!(
        note.starts_with("config revision 1 failed after "),
        "{note}"
    );
    assert!(
        note.contains(
            "(ProgressDeadlineExceeded): its changes are not known (its rollout annotation \
             was removed or replaced before the outcome was recorded)"
        ),
        "{note}"
    );
    let revisions = cluster.history("Deployment", "web", 1).await;
    assert_eq!(revisions[0]["outcome"], "failed");
    assert!(revisions[0]["changed"].is_null(), "{}", revisions[0]);
    assert_eq!(revisions[0]["stamp"], json!([]), "{}", revisions[0]);
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
    let revisions = cluster.history("StatefulSet", "db", 1).await;
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
    let revisions = cluster.history("Deployment", "web", 1).await;
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

// === History, restarts and failovers ===

/// The revision numbers in `web`'s history once its newest is `last` and no
/// rollout is in flight.
async fn recorded(cluster: &TestCluster, last: u64) -> Vec<u64> {
    wait_for(
        &format!("config revision {last} recorded"),
        WAIT,
        || async {
            let workload = cluster.workload("Deployment", "web").await;
            let history = recorded_history(&workload)?;
            let numbers: Vec<u64> = history
                .iter()
                .filter_map(|r| r["revision"].as_u64())
                .collect();
            (numbers.last() == Some(&last) && marker(&workload).is_none()).then_some(numbers)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_keeps_the_last_revisions_up_to_its_limit_across_a_restart() {
    let cluster = TestCluster::start("rollout-history-limit").await;
    cluster.put_configmap("app-config", &[("a", "1")]).await;
    deployment(&cluster, "web", 0, 600).await;
    let mut config = cluster.nudge_config();
    config.engine.history_limit = 2;
    let nudge = cluster.start_nudge(config.clone());
    assert_eq!(recorded(&cluster, 1).await, [1]);
    cluster.put_configmap("app-config", &[("a", "2")]).await;
    assert_eq!(recorded(&cluster, 2).await, [1, 2]);
    cluster.put_configmap("app-config", &[("a", "3")]).await;
    assert_eq!(recorded(&cluster, 3).await, [2, 3]);
    nudge.stop().await;

    // A new process numbers on from the history and keeps its limit.
    let nudge = cluster.start_nudge(config);
    cluster.put_configmap("app-config", &[("a", "4")]).await;
    assert_eq!(recorded(&cluster, 4).await, [3, 4]);
    nudge.stop().await;
}

/// A webhook receiver on 127.0.0.1 keeping the body of every notification.
struct Receiver {
    url: String,
    bodies: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let bodies: Arc<Mutex<Vec<String>>> = Arc::default();
        let kept = bodies.clone();
        let app = axum::Router::new().fallback(move |body: String| {
            kept.lock().unwrap().push(body);
            std::future::ready(axum::http::StatusCode::OK)
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver {
            url: format!("http://{addr}/hook"),
            bodies,
            task,
        }
    }

    /// nudge's `[notify]` configuration to send here.
    fn config(&self) -> NotifyConfig {
        let mut config = NotifyConfig::default();
        config.enabled = true;
        config.url = Secret::new(self.url.clone());
        config.format = NotifyFormat::Json;
        config
    }

    /// The notifications so far whose text contains `text`.
    fn count(&self, text: &str) -> usize {
        let bodies = self.bodies.lock().unwrap();
        bodies.iter().filter(|body| body.contains(text)).count()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `RolloutComplete` Events on `web` (a repeated Event counts each time).
async fn completions(cluster: &TestCluster) -> i32 {
    let events = cluster.events_for("web", "RolloutComplete").await;
    events
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum()
}

/// A Deployment `web` whose first rollout stays in flight (one replica, no
/// node, a long deadline) until it is scaled to zero.
async fn rollout_in_flight(cluster: &TestCluster) {
    cluster.put_configmap("app-config", &[("a", "1")]).await;
    deployment(cluster, "web", 1, 600).await;
}

async fn in_flight_on_web(cluster: &TestCluster) {
    wait_for("the rollout in flight on the workload", WAIT, || async {
        marker(&cluster.workload("Deployment", "web").await).map(drop)
    })
    .await;
}

async fn scale_web_to_zero(cluster: &TestCluster) {
    cluster
        .merge_patch::<Deployment>("web", json!({"spec": {"replicas": 0}}))
        .await;
}

const COMPLETE_1: &str = "config revision 1 complete in ";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_in_flight_across_a_restart_is_concluded_once_by_the_new_process() {
    let cluster = TestCluster::start("rollout-restart-mid").await;
    let receiver = Receiver::start().await;
    rollout_in_flight(&cluster).await;
    let mut config = cluster.nudge_config();
    config.notify = receiver.config();
    let nudge = cluster.start_nudge(config.clone());
    in_flight_on_web(&cluster).await;
    nudge.stop().await;

    // The new process follows the rollout from its marker; it ends now.
    let nudge = cluster.start_ready_nudge(config).await;
    scale_web_to_zero(&cluster).await;
    assert_eq!(recorded(&cluster, 1).await, [1]);
    // Stopped, nudge has sent what it queued.
    nudge.stop().await;
    assert_eq!(completions(&cluster).await, 1, "one Event");
    assert_eq!(receiver.count(COMPLETE_1), 1, "one notification");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_in_flight_across_a_failover_is_concluded_by_the_new_leader_at_most_twice() {
    let cluster = TestCluster::start("rollout-failover").await;
    let receiver = Receiver::start().await;
    rollout_in_flight(&cluster).await;
    let mut config = cluster.nudge_config();
    config.notify = receiver.config();
    config.leader_election.lease_duration = Duration::from_secs(2);
    config.leader_election.renew_deadline = Duration::from_secs(1);
    config.leader_election.retry_period = Duration::from_millis(400);
    let a = cluster.start_ready_nudge(config.clone()).await;
    let b = cluster.start_ready_nudge(config).await;
    in_flight_on_web(&cluster).await;
    let leads = |nudge: &InProcessNudge| {
        let metrics = nudge.metrics_at();
        async move { metrics.sum("nudge_leader").await == Some(1.0) }
    };
    let a_leads = wait_for("one leader", WAIT, || async {
        match (leads(&a).await, leads(&b).await) {
            (true, false) => Some(true),
            (false, true) => Some(false),
            _ => None,
        }
    })
    .await;
    let (leader, follower) = if a_leads { (a, b) } else { (b, a) };

    // The leader steps down (its lease released) and the rollout ends while
    // the other takes over: the new leader concludes it.
    leader.stop().await;
    scale_web_to_zero(&cluster).await;
    assert_eq!(recorded(&cluster, 1).await, [1], "recorded once");
    follower.stop().await;
    let events = completions(&cluster).await;
    assert!((1..=2).contains(&events), "{events} Events");
    let sent = receiver.count(COMPLETE_1);
    assert!((1..=2).contains(&sent), "{sent} notifications");
}

// === Every kind: complete, failed, superseded ===

/// A kind whose rollouts nudge follows, as these tests make and finish them.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    StatefulSet,
    DaemonSet,
    /// Argo Rollouts (no Argo controller runs: the test writes its status).
    Rollout,
    /// A `[[targets]]` kind, its pod template at `spec.worker.template`.
    Gadget,
    CronJob,
    Job,
}

/// The group of this file's `[[targets]]` kind: its CRD is this file's alone
/// (tests/it/targets.rs has a Gadget of its own).
const GADGETS: &str = "rollouts.nudge.test";

/// How a test ends the rollout in flight.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Finish {
    Complete,
    Failed,
}

impl Kind {
    fn gvk(self) -> GroupVersionKind {
        let (group, version, kind) = match self {
            Self::StatefulSet => ("apps", "v1", "StatefulSet"),
            Self::DaemonSet => ("apps", "v1", "DaemonSet"),
            Self::Rollout => ("argoproj.io", "v1alpha1", "Rollout"),
            Self::Gadget => (GADGETS, "v1", "Gadget"),
            Self::CronJob => ("batch", "v1", "CronJob"),
            Self::Job => ("batch", "v1", "Job"),
        };
        GroupVersionKind::gvk(group, version, kind)
    }

    /// Where its pod template is.
    fn template(self) -> &'static str {
        match self {
            Self::Gadget => "/spec/worker/template",
            Self::CronJob => "/spec/jobTemplate/spec/template",
            _ => "/spec/template",
        }
    }

    /// Whether nudge adopts its first stamp (no rollout): its first rollout
    /// is the first change after that.
    fn adopts_first_stamp(self) -> bool {
        matches!(self, Self::CronJob | Self::Job)
    }

    /// The CRD the cluster must serve for it, if any.
    fn crd(self) -> Option<Value> {
        match self {
            Self::Rollout => Some(rollout_crd()),
            Self::Gadget => {
                let mut crd = rollout_crd();
                crd["metadata"]["name"] = json!(format!("gadgets.{GADGETS}"));
                crd["spec"]["group"] = json!(GADGETS);
                crd["spec"]["names"] = json!({"kind": "Gadget", "listKind": "GadgetList",
                                               "plural": "gadgets", "singular": "gadget"});
                crd["spec"]["versions"][0]["name"] = json!("v1");
                Some(crd)
            }
            _ => None,
        }
    }

    /// nudge's configuration for it.
    fn config(self, cluster: &TestCluster) -> Config {
        let mut config = cluster.nudge_config();
        if self == Self::Gadget {
            config.targets.kinds = vec![{
                let mut kind = TargetConfig::new(GADGETS, "v1", "Gadget");
                kind.template = "spec.worker.template".into();
                kind
            }];
        }
        config
    }

    /// Object `name` with `nudge.dev/auto` and `annotations`, mounting
    /// ConfigMap `app-config`; a StatefulSet with `replicas: 0` when it is to
    /// complete by itself.
    fn object(self, name: &str, annotations: &[(&str, &str)], completes: bool) -> Value {
        let mut metadata = json!({ "name": name, "annotations": { "nudge.dev/auto": "true" } });
        for (key, value) in annotations {
            metadata["annotations"][*key] = json!(value);
        }
        let mut pod = pod_mounting_configmap("app-config");
        if matches!(self, Self::CronJob | Self::Job) {
            pod["restartPolicy"] = json!("Never");
        }
        let template = json!({ "metadata": { "labels": { "app": name } }, "spec": pod });
        let selector = json!({ "matchLabels": { "app": name } });
        let spec = match self {
            Self::StatefulSet => json!({ "replicas": if completes { 0 } else { 1 },
                "serviceName": name, "selector": selector, "template": template }),
            Self::DaemonSet => json!({ "selector": selector, "template": template }),
            Self::Rollout => json!({ "replicas": 1, "selector": selector, "template": template,
                "strategy": { "canary": { "steps": [{ "setWeight": 50 }] } } }),
            Self::Gadget => json!({ "worker": { "template": template } }),
            Self::CronJob => json!({ "schedule": "0 0 1 1 *", "suspend": true,
                "jobTemplate": { "spec": { "template": template } } }),
            Self::Job => json!({ "backoffLimit": 1, "template": template }),
        };
        let gvk = self.gvk();
        let api_version = if gvk.group.is_empty() {
            gvk.version.clone()
        } else {
            format!("{}/{}", gvk.group, gvk.version)
        };
        json!({ "apiVersion": api_version, "kind": gvk.kind, "metadata": metadata, "spec": spec })
    }
}

/// The test namespace's API for `gvk` (served).
async fn dynamic_api(cluster: &TestCluster, gvk: &GroupVersionKind) -> Api<DynamicObject> {
    let (resource, _) = kube::discovery::pinned_kind(&cluster.client(), gvk)
        .await
        .unwrap_or_else(|e| panic!("{gvk:?} is served: {e}"));
    Api::namespaced_with(cluster.client(), cluster.namespace(), &resource)
}

/// One workload of a kind under test, nudge running, its first rollout begun.
struct Fixture {
    cluster: TestCluster,
    kind: Kind,
    api: Api<DynamicObject>,
    nudge: InProcessNudge,
    _crd: Option<CrdGuard>,
}

const NAME: &str = "app";

impl Fixture {
    /// Creates `app` of `kind` (with `annotations`) and starts nudge; a kind
    /// that adopts its first stamp gets a config change once adopted. Its
    /// first rollout (config revision 1) is then under way.
    async fn begin(kind: Kind, test: &str, annotations: &[(&str, &str)], completes: bool) -> Self {
        let cluster = TestCluster::start(test).await;
        let crd = match kind.crd() {
            Some(crd) => Some(cluster.ensure_crd(crd).await),
            None => None,
        };
        let api = dynamic_api(&cluster, &kind.gvk()).await;
        cluster.put_configmap("app-config", &[("a", "1")]).await;
        let object: DynamicObject =
            serde_json::from_value(kind.object(NAME, annotations, completes)).unwrap();
        api.create(&PostParams::default(), &object).await.unwrap();
        let nudge = cluster.start_nudge(kind.config(&cluster));
        let fixture = Self {
            cluster,
            kind,
            api,
            nudge,
            _crd: crd,
        };
        if kind.adopts_first_stamp() {
            wait_for("the first stamp's adoption", WAIT, || async {
                let object = fixture.get().await;
                object["metadata"]["annotations"][CONFIG_HASH]
                    .as_str()
                    .map(drop)
            })
            .await;
            fixture.change_config("2").await;
        }
        fixture
    }

    /// The workload now; `null` while it is gone (a Job between its deletion
    /// and its recreation).
    async fn get(&self) -> Value {
        serde_json::to_value(self.api.get_opt(NAME).await.unwrap()).unwrap()
    }

    async fn change_config(&self, value: &str) {
        self.cluster
            .put_configmap("app-config", &[("a", value)])
            .await;
    }

    /// The rollout marked in flight, once it is config revision `revision`.
    async fn in_flight(&self, revision: u64) -> Value {
        wait_for(
            &format!("config revision {revision} in flight"),
            WAIT,
            || async {
                let marker: Value = serde_json::from_str(marker(&self.get().await)?).ok()?;
                (marker["revision"] == revision).then_some(marker)
            },
        )
        .await
    }

    /// Someone else (`kubectl patch`) changes the pod template.
    async fn edit_template(&self) {
        let mut patch = json!({});
        let mut at = &mut patch;
        for segment in self.kind.template().trim_start_matches('/').split('/') {
            at = &mut at[segment];
        }
        *at = json!({ "metadata": { "annotations": { "example.com/edited": "by hand" } } });
        self.api
            .patch(NAME, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Ends config revision 1 as `finish`, as the kind's controller would
    /// (nothing to do where it runs, or where nudge's deadline decides).
    async fn finish(&self, finish: Finish) {
        match (self.kind, finish) {
            (Kind::StatefulSet | Kind::DaemonSet, _) | (Kind::Gadget, Finish::Failed) => {}
            (Kind::Rollout, _) => {
                self.in_flight(1).await;
                let generation = self.get().await["metadata"]["generation"].as_i64().unwrap();
                let phase = match finish {
                    Finish::Complete => "Healthy",
                    Finish::Failed => "Degraded",
                };
                let status = json!({ "observedGeneration": generation.to_string(),
                    "phase": phase, "replicas": 1, "updatedReplicas": 1 });
                self.write_status(&self.api, NAME, status).await;
            }
            (Kind::Gadget, Finish::Complete) => {
                self.in_flight(1).await;
                let generation = self.get().await["metadata"]["generation"].as_i64().unwrap();
                let status = json!({ "observedGeneration": generation, "replicas": 1,
                    "updatedReplicas": 1, "readyReplicas": 1 });
                self.write_status(&self.api, NAME, status).await;
            }
            (Kind::CronJob | Kind::Job, _) => {
                let jobs = dynamic_api(&self.cluster, &Kind::Job.gvk()).await;
                let job = self.run().await;
                let status = job_status(&job, finish);
                self.write_status(&jobs, job["metadata"]["name"].as_str().unwrap(), status)
                    .await;
            }
        }
    }

    /// The Job running config revision 1: the CronJob's run of its stamped
    /// job template, or the recreated Job.
    async fn run(&self) -> Value {
        let marker = self.in_flight(1).await;
        let stamp = marker["stamp"][0]["after"].as_str().unwrap().to_owned();
        // Kept shortened in the marker: `sha256-` and 12 hex digits.
        let prefix = stamp.trim_end_matches('…').to_owned();
        let jobs = dynamic_api(&self.cluster, &Kind::Job.gvk()).await;
        wait_for("the Job of config revision 1", WAIT, || async {
            let list = jobs.list(&Default::default()).await.ok()?;
            list.items
                .into_iter()
                .map(|job| serde_json::to_value(job).unwrap())
                .find(|job| {
                    job["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH]
                        .as_str()
                        .is_some_and(|s| s.starts_with(&prefix))
                })
        })
        .await
    }

    async fn write_status(&self, api: &Api<DynamicObject>, name: &str, status: Value) {
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": status })),
        )
        .await
        .unwrap_or_else(|e| panic!("write the status of {name}: {e}"));
    }

    /// The note of the Event `reason` on the workload that contains `text`.
    async fn event(&self, reason: &str, text: &str) -> String {
        wait_for(
            &format!("a {reason} Event saying {text:?}"),
            WAIT,
            || async {
                let events = self.cluster.events_for(NAME, reason).await;
                events
                    .into_iter()
                    .filter_map(|e| e.note)
                    .find(|note| note.contains(text))
            },
        )
        .await
    }

    async fn history(&self, count: usize) -> Vec<Value> {
        wait_for(&format!("{count} revisions recorded"), WAIT, || async {
            let object = self.get().await;
            let history = recorded_history(&object)?;
            (history.len() >= count && marker(&object).is_none()).then_some(history)
        })
        .await
    }
}

/// A Job's status as kube-controller-manager's Job controller (1.34) writes
/// it when the Job ends, and as the API server's status validation accepts
/// it: the terminal condition after the one that precedes it
/// (`SuccessCriteriaMet`, `FailureTarget`), `startTime` kept (set, when the
/// controller has not), `completionTime` only on success, no active pods.
fn job_status(job: &Value, finish: Finish) -> Value {
    let now = Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .unwrap()
        .to_string();
    let start = job["status"]["startTime"]
        .as_str()
        .unwrap_or(&now)
        .to_owned();
    let condition = |kind: &str, reason: &str, message: &str| {
        json!({ "type": kind, "status": "True", "reason": reason, "message": message,
                "lastProbeTime": now, "lastTransitionTime": now })
    };
    match finish {
        Finish::Complete => {
            let (reason, message) = (
                "CompletionsReached",
                "Reached expected number of succeeded pods",
            );
            json!({ "startTime": start, "completionTime": now, "active": 0, "ready": 0,
                "succeeded": 1, "conditions": [
                    condition("SuccessCriteriaMet", reason, message),
                    condition("Complete", reason, message)] })
        }
        Finish::Failed => {
            let (reason, message) = (
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            );
            json!({ "startTime": start, "active": 0, "ready": 0, "failed": 1, "conditions": [
                condition("FailureTarget", reason, message),
                condition("Failed", reason, message)] })
        }
    }
}

async fn completes(kind: Kind) {
    let fixture = Fixture::begin(kind, &format!("{kind:?}-complete"), &[], true).await;
    fixture.finish(Finish::Complete).await;
    let note = fixture
        .event("RolloutComplete", "config revision 1 complete in ")
        .await;
    assert!(note.contains("nudge.dev/config-hash "), "{note}");
    if kind == Kind::CronJob {
        assert!(note.contains("(ran as Job app-"), "{note}");
    }
    let history = fixture.history(1).await;
    assert_eq!(history[0]["outcome"], "complete", "{history:?}");
    fixture.nudge.stop().await;
}

async fn fails(kind: Kind) {
    // nudge's own deadline decides where no controller says "failed".
    let deadline = [("nudge.dev/progress-deadline", "2s")];
    let own_deadline = matches!(kind, Kind::StatefulSet | Kind::Gadget);
    let annotations: &[(&str, &str)] = if own_deadline { &deadline } else { &[] };
    let fixture = Fixture::begin(kind, &format!("{kind:?}-failed"), annotations, false).await;
    fixture.finish(Finish::Failed).await;
    let note = fixture
        .event("RolloutFailed", "config revision 1 failed after ")
        .await;
    let reason = match kind {
        Kind::StatefulSet | Kind::Gadget => "(not complete within its progress deadline (2s))",
        Kind::Rollout => "(Degraded)",
        Kind::CronJob => " failed)",
        Kind::Job => "(the Job failed)",
        Kind::DaemonSet => unreachable!("a DaemonSet wants no pod without nodes"),
    };
    assert!(note.contains(reason), "{note}");
    let history = fixture.history(1).await;
    assert_eq!(history[0]["outcome"], "failed", "{history:?}");
    fixture.nudge.stop().await;
}

async fn is_superseded(kind: Kind) {
    let fixture = Fixture::begin(kind, &format!("{kind:?}-superseded"), &[], false).await;
    fixture.in_flight(1).await;
    let next = if kind.adopts_first_stamp() { "3" } else { "2" };
    fixture.change_config(next).await;
    let note = fixture
        .event("RolloutSuperseded", "config revision 1 superseded after ")
        .await;
    assert!(note.contains("(superseded by config revision 2)"), "{note}");
    fixture.in_flight(2).await;
    if kind == Kind::Job {
        // A Job's pod template is immutable: nobody else changes it.
        fixture.nudge.stop().await;
        return;
    }
    fixture.edit_template().await;
    let note = fixture
        .event("RolloutSuperseded", "config revision 2 superseded after ")
        .await;
    assert!(
        note.contains("(the pod template was changed by someone else)"),
        "{note}"
    );
    let history = fixture.history(2).await;
    let outcomes: Vec<(&Value, &Value)> = history
        .iter()
        .map(|r| (&r["revision"], &r["outcome"]))
        .collect();
    assert_eq!(
        outcomes,
        [
            (&json!(1), &json!("superseded")),
            (&json!(2), &json!("superseded"))
        ]
    );
    fixture.nudge.stop().await;
}

/// Per kind, a module of tests (`stateful_set::completes`, …) running the
/// scenarios above. A DaemonSet wants no pod on a cluster without nodes: its
/// every rollout completes at once, so it neither fails nor stays in flight
/// long enough to be superseded there (the core's tests cover both).
macro_rules! per_kind {
    ($($module:ident: $kind:expr => [$($scenario:ident),*];)*) => {$(
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario($kind).await;
                }
            )*
        }
    )*};
}

per_kind! {
    stateful_set: super::Kind::StatefulSet => [completes, fails, is_superseded];
    daemon_set: super::Kind::DaemonSet => [completes];
    argo_rollout: super::Kind::Rollout => [completes, fails, is_superseded];
    targets_kind: super::Kind::Gadget => [completes, fails, is_superseded];
    cron_job: super::Kind::CronJob => [completes, fails, is_superseded];
    job: super::Kind::Job => [completes, fails, is_superseded];
}
