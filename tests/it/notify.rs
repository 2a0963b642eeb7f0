//! `[notify]`: one message per stamp to a webhook receiver, naming the workload
//! and the references that changed, never their content; a receiver that fails
//! or hangs is counted and logged and never holds a stamp back.
//!
//! The receiver listens on 127.0.0.1 and nudge runs in this process, so these
//! tests work against a real cluster (`NUDGE_TEST_KUBECONFIG`) as well.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use nudge::config::{NotifyConfig, NotifyFormat, Secret};
use serde_json::{Value, json};

const CONFIG_HASH: &str = "nudge.dev/config-hash";
/// ConfigMap values that must never reach a receiver.
const FIRST_VALUE: &str = "first-value-7c1e";
const SECOND_VALUE: &str = "second-value-93ab";

/// How the receiver answers.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Status(StatusCode),
    /// Never: the request stays open until nudge gives up on it.
    Hang,
}

/// One POST the receiver got.
#[derive(Debug, Clone)]
struct Received {
    content_type: String,
    body: String,
}

impl Received {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// A webhook receiver on 127.0.0.1 recording every request; stopped on drop.
struct Receiver {
    url: String,
    received: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    async fn start(answer: Answer) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let record = received.clone();
        let app = axum::Router::new().fallback(move |headers: HeaderMap, body: Bytes| {
            let record = record.clone();
            async move {
                let content_type = headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                let body = String::from_utf8_lossy(&body).into_owned();
                record.lock().unwrap().push(Received { content_type, body });
                match answer {
                    Answer::Status(status) => status,
                    Answer::Hang => std::future::pending().await,
                }
            }
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver {
            // Shaped like a Slack URL: the path is the secret.
            url: format!("http://{addr}/services/T000/B000/s3cr3t-token"),
            received,
            task,
        }
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// The requests so far that are not about a [`Sentinel`] workload.
    fn received_about_tests(&self) -> Vec<Received> {
        let mut received = self.received();
        received.retain(|message| !message.body.contains("sentinel"));
        received
    }

    /// Waits until at least `count` requests have arrived; returns them all.
    async fn wait_for(&self, count: usize) -> Vec<Received> {
        wait_for(&format!("{count} notification(s)"), WAIT, || async {
            let received = self.received();
            (received.len() >= count).then_some(received)
        })
        .await
    }
}

fn notify_config(receiver: &Receiver, format: NotifyFormat) -> NotifyConfig {
    let mut config = NotifyConfig::default();
    config.enabled = true;
    config.url = Secret::new(receiver.url.clone());
    config.format = format;
    config
}

/// An auto Deployment `web` mounting ConfigMap `app-config`, nudge notifying the
/// receiver in `format`, and one change of the ConfigMap after the first stamp:
/// returns the message of that change, after checking that it was the only one
/// and that no message carried a ConfigMap value.
async fn message_of_one_change(cluster: &TestCluster, format: NotifyFormat) -> Received {
    let receiver = Receiver::start(Answer::Status(StatusCode::OK)).await;
    let sentinel = cluster.sentinel().await;
    cluster
        .auto_deployment("web", "app-config", &[("password", FIRST_VALUE)])
        .await;
    let mut config = cluster.nudge_config();
    config.notify = notify_config(&receiver, format);
    let nudge = cluster.start_nudge(config);
    let first = wait_for_stamp(cluster, "Deployment", "web", CONFIG_HASH, None).await;
    // The first stamp's message: notifications flow, and what came before the
    // change is counted.
    let about_web = || async {
        let received = receiver.received_about_tests();
        (!received.is_empty()).then_some(received)
    };
    let before = wait_for("web's first message", WAIT, about_web).await.len();

    cluster
        .put_configmap("app-config", &[("password", SECOND_VALUE)])
        .await;
    wait_for_stamp(cluster, "Deployment", "web", CONFIG_HASH, Some(&first)).await;
    // Every notification nudge decided on by now has been sent.
    sentinel.flush_events(&nudge).await;
    let received = receiver.received_about_tests();
    assert_eq!(received.len(), before + 1, "one message per stamp");
    for message in &received {
        for value in [FIRST_VALUE, SECOND_VALUE, "sha256-", "hmac-"] {
            assert!(!message.body.contains(value), "{value} in {}", message.body);
        }
    }
    nudge.stop().await;
    received[before].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_configmap_sends_one_slack_message_naming_the_workload_and_the_configmap() {
    let cluster = TestCluster::start("notify-slack").await;
    let message = message_of_one_change(&cluster, NotifyFormat::Slack).await;
    assert_eq!(message.content_type, "application/json");
    let ns = cluster.namespace();
    assert_eq!(
        message.json(),
        json!({
            "attachments": [{
                "author_name": "nudge",
                "color": "good",
                "text": format!(
                    "nudge detected changes in *configmap {ns}/app-config*. \
                     Hence rolled *web* of type *Deployment* in namespace *{ns}*"
                ),
            }],
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_configmap_sends_one_json_message_with_the_workload_and_its_reference() {
    let cluster = TestCluster::start("notify-json").await;
    let message = message_of_one_change(&cluster, NotifyFormat::Json).await;
    assert_eq!(message.content_type, "application/json");
    let ns = cluster.namespace();
    let mut body = message.json();
    let time = body["time"].take();
    let time = time.as_str().expect("a time");
    assert!(
        time.parse::<k8s_openapi::jiff::Timestamp>().is_ok(),
        "RFC 3339: {time}"
    );
    assert_eq!(
        body,
        json!({
            "workload": { "kind": "Deployment", "namespace": ns, "name": "web" },
            "reason": "ConfigChanged",
            "references": [{ "source": "configmap", "namespace": ns, "name": "app-config" }],
            "message": format!(
                "nudge detected changes in configmap {ns}/app-config. \
                 Hence rolled web of type Deployment in namespace {ns}"
            ),
            "time": Value::Null,
        })
    );
}

/// `nudge_notifications_total{format, result}` from the admin server.
async fn notifications(admin: std::net::SocketAddr, result: &str) -> Option<u64> {
    let (_, body) = http_get(admin, "/metrics").await?;
    let series = format!(r#"nudge_notifications_total{{format="slack",result="{result}"}} "#);
    body.lines()
        .find_map(|line| line.strip_prefix(&series))
        .and_then(|value| value.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_answering_500_is_counted_as_failed_and_stamps_go_on() {
    let cluster = TestCluster::start("notify-failing").await;
    let receiver = Receiver::start(Answer::Status(StatusCode::INTERNAL_SERVER_ERROR)).await;
    cluster
        .auto_deployment("web", "app-config", &[("a", "1")])
        .await;
    let mut config = cluster.nudge_config();
    config.notify = notify_config(&receiver, NotifyFormat::Slack);
    let admin = free_port();
    config.admin.bind = admin;
    let nudge = cluster.start_nudge(config);
    wait_ready(admin).await;
    let first = wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, None).await;
    let failed = wait_for("the first stamp's failed notification", WAIT, || async {
        notifications(admin, "failed").await.filter(|n| *n >= 1)
    })
    .await;

    cluster.put_configmap("app-config", &[("a", "2")]).await;
    wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, Some(&first)).await;
    wait_for("the second failed notification", WAIT, || async {
        notifications(admin, "failed").await.filter(|n| *n > failed)
    })
    .await;
    assert_eq!(notifications(admin, "sent").await, Some(0));
    assert_eq!(
        receiver.received().len(),
        usize::try_from(notifications(admin, "failed").await.unwrap()).unwrap(),
        "one POST per failure: no retries"
    );
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_never_answers_does_not_delay_stamps_of_another_workload() {
    let cluster = TestCluster::start("notify-hanging").await;
    let receiver = Receiver::start(Answer::Hang).await;
    cluster
        .auto_deployment("first", "first-config", &[("a", "1")])
        .await;
    cluster
        .auto_deployment("second", "second-config", &[("a", "1")])
        .await;
    let mut config = cluster.nudge_config();
    config.notify = notify_config(&receiver, NotifyFormat::Slack);
    // Far beyond WAIT: a stamp that waited for a POST would time the test out.
    config.notify.timeout = Duration::from_secs(300);
    let nudge = cluster.start_nudge(config);
    wait_for_stamp(&cluster, "Deployment", "first", CONFIG_HASH, None).await;
    let second = wait_for_stamp(&cluster, "Deployment", "second", CONFIG_HASH, None).await;
    // A POST now hangs at the receiver.
    receiver.wait_for(1).await;
    let events = wait_for("the first ConfigChanged Event of second", WAIT, || async {
        let n = config_changed_events(&cluster, "second").await;
        (n >= 1).then_some(n)
    })
    .await;

    let changed = std::time::Instant::now();
    cluster.put_configmap("second-config", &[("a", "2")]).await;
    wait_for_stamp(&cluster, "Deployment", "second", CONFIG_HASH, Some(&second)).await;
    eprintln!(
        "stamped {:?} after the change, a notification hanging",
        changed.elapsed()
    );
    // Kubernetes Events share the publisher with notifications: they go on too.
    wait_for("the ConfigChanged Event of the new stamp", WAIT, || async {
        (config_changed_events(&cluster, "second").await > events).then_some(())
    })
    .await;
    nudge.stop().await;
}

/// How often `ConfigChanged` was reported about `name`, counting the repeats
/// aggregated into an Event series.
async fn config_changed_events(cluster: &TestCluster, name: &str) -> i32 {
    cluster
        .events_for(name, "ConfigChanged")
        .await
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_url_file_stops_nudge_at_start_up_saying_what_to_do() {
    let cluster = TestCluster::start("notify-url-file").await;
    let path = std::env::temp_dir().join(format!("{}-absent/url", cluster.namespace()));
    let mut config = cluster.nudge_config();
    config.notify.enabled = true;
    config.notify.url_file = path.display().to_string();
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        nudge::__private::runtime::run_with_client(
            config,
            cluster.client(),
            tokio_util::sync::CancellationToken::new(),
        ),
    )
    .await
    .expect("nudge stops at once");
    let error = result.expect_err("an unreadable url_file is fatal");
    let text = nudge::__private::error_chain(&error);
    assert!(text.contains("notify.url_file"), "{text}");
    assert!(text.contains(&path.display().to_string()), "{text}");
    let hint = error.hint().expect("a hint");
    assert!(hint.contains("NUDGE_NOTIFY__URL_FILE"), "{hint}");
}

/// A Deployment `web` mounting `app-config`, with `replicas` and a 2 s
/// `progressDeadlineSeconds`.
async fn deployment_with_deadline(cluster: &TestCluster, replicas: i64) {
    let body = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": "web", "annotations": { "nudge.dev/auto": "true" } },
        "spec": {
            "replicas": replicas,
            "progressDeadlineSeconds": 2,
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": pod_mounting_configmap("app-config"),
            },
        },
    });
    cluster
        .apply_as_user::<k8s_openapi::api::apps::v1::Deployment>("web", body)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_rollout_is_sent_with_the_last_good_revision() {
    let cluster = TestCluster::start("notify-failed").await;
    let receiver = Receiver::start(Answer::Status(StatusCode::OK)).await;
    cluster.put_configmap("app-config", &[("a", "1")]).await;
    deployment_with_deadline(&cluster, 0).await;
    let mut config = cluster.nudge_config();
    config.notify = notify_config(&receiver, NotifyFormat::Slack);
    let nudge = cluster.start_nudge(config);
    // The first stamp's message, then its rollout's (replicas 0: complete).
    receiver.wait_for(2).await;

    // One replica and no node: kube-controller-manager gives up after 2 s.
    cluster
        .merge_patch::<k8s_openapi::api::apps::v1::Deployment>(
            "web",
            json!({"spec": {"replicas": 1}}),
        )
        .await;
    cluster.put_configmap("app-config", &[("a", "2")]).await;
    let failure = wait_for("the failure notification", WAIT, || async {
        receiver
            .received()
            .into_iter()
            .map(|m| m.json())
            .find(|m| m["attachments"][0]["color"] == "danger")
    })
    .await;
    let text = failure["attachments"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    println!("failure notification: {text}");
    let ns = cluster.namespace();
    assert!(
        text.starts_with(&format!(
            "nudge: the rollout of *web* of type *Deployment* in namespace *{ns}* FAILED: \
             config revision 2 failed after "
        )),
        "{text}"
    );
    assert!(text.contains("(ProgressDeadlineExceeded)"), "{text}");
    assert!(
        text.contains(&format!("configmap/{ns}/app-config (by test-user, at ")),
        "{text}"
    );
    assert!(
        text.contains("; last good: config revision 1 (nudge.dev/config-hash=sha256-"),
        "{text}"
    );
    let event = cluster.wait_events("web", "RolloutFailed").await;
    let note = event[0].note.clone().unwrap();
    println!("RolloutFailed Event: {note}");
    assert!(text.ends_with(&note), "the Event's note, as sent");
    nudge.stop().await;
}
