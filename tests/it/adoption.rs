//! The adoption race against a cluster: a change nudge observes after it first
//! saw a workload rolls that workload once, with the new content, even when the
//! change comes inside the first debounce or pause-period window, when an
//! adopting workload has not been written yet. Each test also runs against a
//! real cluster (`NUDGE_TEST_KUBECONFIG`).
//!
//! "Rolled once" is judged by what rolls pods: the values the pod template
//! held, as a watch saw them; never by `metadata.generation`, which a real
//! kube-apiserver also bumps for the adoption's metadata-only write.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::CronJob;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

const CONFIG_HASH: &str = "nudge.dev/config-hash";
const RELOADER_STATE: &str = "nudge.dev/reloader-state";
const LAST_RELOADED_FROM: &str = "reloader.stakater.com/last-reloaded-from";
const CHECKSUM: &str = "nudge.dev/checksum-cfg";
const RELOADER_AUTO: (&str, &str) = ("reloader.stakater.com/auto", "true");
/// Long enough for the test to change the ConfigMap inside the first window
/// after `/ready`, even on a loaded machine.
const WINDOW: Duration = Duration::from_secs(6);

/// Every value a pod-template annotation took, in order, as a watch saw it.
struct TemplateHistory {
    values: Arc<Mutex<Vec<Option<String>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl TemplateHistory {
    /// Watches object `name` through `api`; `template` is the pointer to its
    /// pod template.
    fn watch<K>(api: Api<K>, name: &str, template: &'static str, key: &'static str) -> Self
    where
        K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
        K: serde::Serialize + Send + Sync + 'static,
    {
        let values: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
        let seen = values.clone();
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let task = tokio::spawn(async move {
            // With a backoff the stream waits between failed attempts. Without
            // one it retries at once, and once the server is gone each attempt
            // fails without waiting: the task never yields, so neither its abort
            // nor the runtime's shutdown at the test's end can stop it (the test
            // process hung after its test passed).
            let stream = watcher(api, config).default_backoff();
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                let objects = match event {
                    Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => vec![obj],
                    _ => continue,
                };
                for obj in objects {
                    let object = serde_json::to_value(&obj).unwrap();
                    let value = object
                        .pointer(template)
                        .and_then(|t| t.pointer("/metadata/annotations"))
                        .and_then(|a| a.get(key))
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                    let mut values = seen.lock().unwrap();
                    if values.last() != Some(&value) {
                        values.push(value);
                    }
                }
            }
        });
        Self { values, task }
    }

    /// The values once the watch has seen `count` of them.
    async fn first(&self, count: usize) -> Vec<Option<String>> {
        wait_for("the pod-template history", WAIT, || async {
            let values = self.values.lock().unwrap().clone();
            (values.len() >= count).then_some(values)
        })
        .await
    }
}

impl Drop for TemplateHistory {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn history(cluster: &TestCluster, name: &str, key: &'static str) -> TemplateHistory {
    TemplateHistory::watch(cluster.api::<Deployment>(), name, "/spec/template", key)
}

/// The workload's own annotation `key`, once set.
async fn own_annotation(cluster: &TestCluster, name: &str, key: &str) -> String {
    wait_for(&format!("{name}'s {key}"), WAIT, || async {
        cluster.workload("Deployment", name).await["metadata"]["annotations"][key]
            .as_str()
            .map(str::to_owned)
    })
    .await
}

/// What nudge adopts for a Reloader-`auto` workload first seen with the
/// current content of `configmap`: a witness created now, adopted on its
/// metadata.
async fn adopted_now(
    cluster: &TestCluster,
    witness: &str,
    configmap: &str,
    template: &[(&str, &str)],
    key: &str,
) -> String {
    cluster
        .create_workload(
            "Deployment",
            witness,
            &[RELOADER_AUTO],
            template,
            pod_mounting_configmap(configmap),
        )
        .await;
    own_annotation(cluster, witness, key).await
}

/// ConfigMap `acfg` (`a=1`) and Deployment `app` mounting it, with
/// `annotations` and, on its pod template, `template`.
async fn reloader_app(
    cluster: &TestCluster,
    annotations: &[(&str, &str)],
    template: &[(&str, &str)],
) {
    cluster.put_configmap("acfg", &[("a", "1")]).await;
    cluster
        .create_workload(
            "Deployment",
            "app",
            annotations,
            template,
            pod_mounting_configmap("acfg"),
        )
        .await;
}

fn config_with_debounce(cluster: &TestCluster, debounce: Duration) -> nudge::config::Config {
    let mut config = cluster.nudge_config();
    config.engine.debounce = debounce;
    config.engine.max_delay = debounce * 4;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloader_auto_a_change_in_the_first_debounce_window_rolls_once_with_the_new_content() {
    let cluster = TestCluster::start("adopt-race").await;
    reloader_app(&cluster, &[RELOADER_AUTO], &[]).await;
    let template = history(&cluster, "app", CONFIG_HASH);
    let nudge = cluster
        .start_ready_nudge(config_with_debounce(&cluster, WINDOW))
        .await;
    // nudge has listed the workload: this change comes after its first sight,
    // inside the first debounce window, before anything was adopted.
    cluster.put_configmap("acfg", &[("a", "2")]).await;

    let rolled = wait_for_stamp(&cluster, "Deployment", "app", CONFIG_HASH, None).await;
    let witness = adopted_now(&cluster, "witness", "acfg", &[], CONFIG_HASH).await;
    assert_eq!(rolled, witness, "the pod template carries the new content");
    assert_eq!(own_annotation(&cluster, "app", CONFIG_HASH).await, rolled);

    // A later change rolls once more: the template held exactly these values.
    cluster.put_configmap("acfg", &[("a", "3")]).await;
    let again = wait_for_stamp(&cluster, "Deployment", "app", CONFIG_HASH, Some(&rolled)).await;
    assert_eq!(
        template.first(3).await,
        [None, Some(rolled), Some(again)],
        "one rollout per change, none for the adoption"
    );
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloader_pause_period_changes_in_the_first_period_roll_once_at_its_end() {
    let cluster = TestCluster::start("adopt-pause").await;
    let paused = ("deployment.reloader.stakater.com/pause-period", "8s");
    reloader_app(&cluster, &[RELOADER_AUTO, paused], &[]).await;
    let template = history(&cluster, "app", CONFIG_HASH);
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    for value in ["2", "3", "4"] {
        cluster.put_configmap("acfg", &[("a", value)]).await;
    }
    let rolled = wait_for_stamp(&cluster, "Deployment", "app", CONFIG_HASH, None).await;
    let witness = adopted_now(&cluster, "witness", "acfg", &[], CONFIG_HASH).await;
    assert_eq!(rolled, witness, "the last content, once");

    cluster.put_configmap("acfg", &[("a", "5")]).await;
    let again = wait_for_stamp(&cluster, "Deployment", "app", CONFIG_HASH, Some(&rolled)).await;
    assert_eq!(template.first(3).await, [None, Some(rolled), Some(again)]);
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloader_annotations_strategy_a_change_in_the_first_window_rewrites_its_document_once() {
    let cluster = TestCluster::start("adopt-annotations").await;
    let document = r#"{"type":"CONFIGMAP","name":"acfg","namespace":"x","hash":"h","containerRefs":null,"observedAt":1}"#;
    reloader_app(
        &cluster,
        &[RELOADER_AUTO],
        &[(LAST_RELOADED_FROM, document)],
    )
    .await;
    let template = history(&cluster, "app", LAST_RELOADED_FROM);
    let nudge = cluster
        .start_ready_nudge(config_with_debounce(&cluster, WINDOW))
        .await;
    cluster.put_configmap("acfg", &[("a", "2")]).await;

    let rewritten = wait_for_stamp(
        &cluster,
        "Deployment",
        "app",
        LAST_RELOADED_FROM,
        Some(document),
    )
    .await;
    let state = own_annotation(&cluster, "app", RELOADER_STATE).await;
    let witness = adopted_now(
        &cluster,
        "witness",
        "acfg",
        &[(LAST_RELOADED_FROM, document)],
        RELOADER_STATE,
    )
    .await;
    assert_eq!(state, witness, "the state of the new content");
    assert_eq!(
        template.first(2).await,
        [Some(document.to_owned()), Some(rewritten)],
        "one rewrite of Reloader's document"
    );
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_job_a_change_in_the_first_window_reaches_its_job_template_once() {
    let cluster = TestCluster::start("adopt-cron").await;
    cluster.put_configmap("acfg", &[("a", "1")]).await;
    let cron_job: CronJob = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "nightly", "annotations": {
            "nudge.dev/configmap-cfg": "acfg",
            "nudge.dev/run-on-change": "false",
        }},
        "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "job", "image": "busybox"}],
        }}}}},
    }))
    .unwrap();
    let api = cluster.api::<CronJob>();
    api.create(&PostParams::default(), &cron_job).await.unwrap();
    let template = TemplateHistory::watch(
        api.clone(),
        "nightly",
        "/spec/jobTemplate/spec/template",
        CHECKSUM,
    );
    let nudge = cluster
        .start_ready_nudge(config_with_debounce(&cluster, WINDOW))
        .await;
    cluster.put_configmap("acfg", &[("a", "2")]).await;

    // What a Deployment referencing the same ConfigMap gets on its template.
    cluster
        .create_workload(
            "Deployment",
            "witness",
            &[("nudge.dev/configmap-cfg", "acfg")],
            &[],
            plain_pod(),
        )
        .await;
    let expected = wait_for_stamp(&cluster, "Deployment", "witness", CHECKSUM, None).await;
    assert_eq!(
        template.first(2).await,
        [None, Some(expected)],
        "the new content on the job template, once"
    );
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloader_auto_a_change_while_nudge_is_stopped_rolls_once_after_the_adoption() {
    let cluster = TestCluster::start("adopt-restart").await;
    reloader_app(&cluster, &[RELOADER_AUTO], &[]).await;
    let template = history(&cluster, "app", CONFIG_HASH);
    // The adoption is written at once, whatever the debounce.
    let nudge = cluster.start_nudge(config_with_debounce(&cluster, WINDOW));
    let adopted = own_annotation(&cluster, "app", CONFIG_HASH).await;
    nudge.stop().await;

    cluster.put_configmap("acfg", &[("a", "2")]).await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    let rolled = wait_for_stamp(&cluster, "Deployment", "app", CONFIG_HASH, None).await;
    assert_ne!(rolled, adopted);
    let witness = adopted_now(&cluster, "witness", "acfg", &[], CONFIG_HASH).await;
    assert_eq!(rolled, witness);
    cluster.put_configmap("acfg", &[("a", "3")]).await;
    let again = wait_for_stamp(&cluster, "Deployment", "app", CONFIG_HASH, Some(&rolled)).await;
    assert_eq!(template.first(3).await, [None, Some(rolled), Some(again)]);
    nudge.stop().await;
}
