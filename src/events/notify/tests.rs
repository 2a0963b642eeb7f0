//! Rendering with plain `#[test]`s; the queue and the worker against a tiny HTTP
//! receiver on 127.0.0.1.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;
use crate::model::{KeySelection, SourceName, WorkloadKind};

const TIME: &str = "2025-01-02T03:04:05Z";

fn mk_id() -> WorkloadId {
    WorkloadId::new(WorkloadKind::deployment(), "shop", "web")
}

fn mk_stamp(changed: Vec<Reference>) -> Notice {
    Notice::new(
        mk_id(),
        Reason::ConfigChanged,
        "stamped nudge.dev/config-hash".into(),
    )
    .with_changed(changed)
}

fn configmap(name: &str) -> Reference {
    Reference::object(SourceName::configmap(), "shop", name)
}

fn secret(name: &str) -> Reference {
    Reference::object(SourceName::secret(), "shop", name)
}

fn consul(key: &str) -> Reference {
    Reference::key(SourceName::consul(), key)
}

fn mk_settings(url: &str) -> NotifySettings {
    NotifySettings::new(reqwest::Url::parse(url).unwrap(), NotifyFormat::Slack)
}

// === rendering ===

#[test]
fn slack_gets_one_good_attachment_authored_by_nudge() {
    let notice = mk_stamp(vec![secret("db"), configmap("app-config")]);
    assert_eq!(
        payload(NotifyFormat::Slack, &notice, "", TIME),
        json!({
            "attachments": [{
                "author_name": "nudge",
                "color": "good",
                "text": "nudge detected changes in *configmap shop/app-config*, *secret shop/db*. \
                         Hence rolled *web* of type *Deployment* in namespace *shop*",
            }],
        })
    );
}

#[test]
fn teams_and_google_chat_get_the_text_alone() {
    let notice = mk_stamp(vec![configmap("app-config")]);
    let expected = json!({
        "text": "nudge detected changes in *configmap shop/app-config*. \
                 Hence rolled *web* of type *Deployment* in namespace *shop*",
    });
    assert_eq!(payload(NotifyFormat::Teams, &notice, "", TIME), expected);
    assert_eq!(payload(NotifyFormat::Gchat, &notice, "", TIME), expected);
}

#[test]
fn nudges_json_names_the_workload_and_each_reference_in_fields() {
    let notice = mk_stamp(vec![consul("app/config"), configmap("app-config")]);
    assert_eq!(
        payload(NotifyFormat::Json, &notice, "", TIME),
        json!({
            "workload": { "kind": "Deployment", "namespace": "shop", "name": "web" },
            "references": [
                { "source": "configmap", "namespace": "shop", "name": "app-config" },
                { "source": "consul", "key": "app/config" },
            ],
            "reason": "ConfigChanged",
            "message": "nudge detected changes in configmap shop/app-config, consul key app/config. \
                        Hence rolled web of type Deployment in namespace shop",
            "time": TIME,
        })
    );
}

#[test]
fn additional_info_goes_before_the_message_like_reloaders() {
    let notice = mk_stamp(vec![configmap("app-config")]);
    let text = "prod-eu : nudge detected changes in *configmap shop/app-config*. \
                Hence rolled *web* of type *Deployment* in namespace *shop*";
    assert_eq!(
        payload(NotifyFormat::Teams, &notice, "prod-eu", TIME),
        json!({ "text": text })
    );
    let json = payload(NotifyFormat::Json, &notice, "prod-eu", TIME);
    assert!(
        json["message"]
            .as_str()
            .unwrap()
            .starts_with("prod-eu : nudge detected changes in configmap shop/app-config."),
        "{json}"
    );
}

#[test]
fn an_object_referenced_through_several_keys_is_named_once() {
    let notice = mk_stamp(vec![
        configmap("app-config").with_keys(KeySelection::one("a")),
        configmap("app-config"),
    ]);
    assert_eq!(notice.changed.len(), 2, "the notice keeps both");
    let json = payload(NotifyFormat::Json, &notice, "", TIME);
    assert_eq!(
        json["references"],
        json!([{ "source": "configmap", "namespace": "shop", "name": "app-config" }])
    );
    assert_eq!(
        json["message"],
        "nudge detected changes in configmap shop/app-config. \
         Hence rolled web of type Deployment in namespace shop"
    );
}

#[test]
fn a_stamp_without_changed_references_says_what_was_stamped() {
    let notice = mk_stamp(Vec::new());
    assert_eq!(
        payload(NotifyFormat::Gchat, &notice, "", TIME),
        json!({
            "text": "nudge rolled *web* of type *Deployment* in namespace *shop* \
                     (stamped nudge.dev/config-hash)",
        })
    );
    assert_eq!(
        payload(NotifyFormat::Json, &notice, "", TIME)["references"],
        json!([])
    );
}

#[test]
fn long_lists_are_cut_in_the_text_but_complete_in_the_json() {
    let changed: Vec<Reference> = (0..25).map(|i| configmap(&format!("cm-{i:02}"))).collect();
    let notice = mk_stamp(changed);
    let text = message(&notice, Emphasis::Bold, "");
    assert!(
        text.contains("*configmap shop/cm-19* and 5 more."),
        "{text}"
    );
    assert!(!text.contains("cm-20"), "{text}");
    let json = payload(NotifyFormat::Json, &notice, "", TIME);
    assert_eq!(json["references"].as_array().unwrap().len(), 25);
}

// === settings ===

fn temp_file(name: &str, contents: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("nudge-notify-{}-{name}", std::process::id()));
    std::fs::write(&path, contents).unwrap();
    path
}

fn enabled_with_file(path: &Path) -> NotifyConfig {
    NotifyConfig {
        enabled: true,
        url_file: path.display().to_string(),
        ..NotifyConfig::default()
    }
}

#[test]
fn disabled_notifications_need_no_url() {
    assert!(
        NotifySettings::from_config(&NotifyConfig::default())
            .unwrap()
            .is_none()
    );
}

#[test]
fn the_url_file_is_read_trimmed_and_never_printed() {
    let path = temp_file("trimmed", "  https://hooks.example.com/services/s3cr3t\n");
    let settings = NotifySettings::from_config(&enabled_with_file(&path))
        .unwrap()
        .expect("enabled");
    std::fs::remove_file(&path).unwrap();
    assert_eq!(settings.host(), "hooks.example.com");
    assert_eq!(settings.url.path(), "/services/s3cr3t");
    assert!(!format!("{settings:?}").contains("s3cr3t"), "{settings:?}");
}

#[test]
fn an_unreadable_url_file_is_a_start_up_error_naming_the_file() {
    let path = std::env::temp_dir().join("nudge-notify-does-not-exist/url");
    let error = NotifySettings::from_config(&enabled_with_file(&path)).unwrap_err();
    assert!(
        matches!(error, NotifyError::ReadUrlFile { .. }),
        "{error:?}"
    );
    let text = crate::errors::error_chain(&error);
    assert!(text.contains("notify.url_file"), "{text}");
    assert!(text.contains("nudge-notify-does-not-exist/url"), "{text}");
    assert!(error.hint().unwrap().contains("NUDGE_NOTIFY__URL_FILE"));
}

#[test]
fn an_empty_url_file_is_a_start_up_error() {
    let path = temp_file("empty", " \n");
    let error = NotifySettings::from_config(&enabled_with_file(&path)).unwrap_err();
    std::fs::remove_file(&path).unwrap();
    assert!(
        matches!(error, NotifyError::EmptyUrlFile { .. }),
        "{error:?}"
    );
}

#[test]
fn a_url_file_without_an_http_url_is_rejected_without_repeating_it() {
    for (name, contents) in [
        ("garbage", "s3cr3t"),
        ("scheme", "ftp://hooks.example.com/s3cr3t"),
    ] {
        let path = temp_file(name, contents);
        let error = NotifySettings::from_config(&enabled_with_file(&path)).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(error, NotifyError::InvalidUrl { .. }), "{error:?}");
        let text = error.to_string();
        assert!(text.contains("notify.url_file"), "{text}");
        assert!(!text.contains("s3cr3t"), "the URL is a secret: {text}");
    }
}

#[test]
fn a_failed_rollout_is_sent_in_red_with_the_events_note() {
    let note = "config revision 4 failed after 10m (ProgressDeadlineExceeded): \
                configmap/shop/app-config (by kubectl-edit) changed; last good: config revision 3";
    let notice = Notice::new(mk_id(), Reason::RolloutFailed, note.into())
        .with_changed(vec![configmap("app-config")]);
    assert_eq!(
        payload(NotifyFormat::Slack, &notice, "", TIME),
        json!({
            "attachments": [{
                "author_name": "nudge",
                "color": "danger",
                "text": format!(
                    "nudge: the rollout of *web* of type *Deployment* in namespace *shop* FAILED: {note}"
                ),
            }],
        })
    );
    let json = payload(NotifyFormat::Json, &notice, "", TIME);
    assert_eq!(json["reason"], "RolloutFailed");
    let complete = Notice::new(
        mk_id(),
        Reason::RolloutComplete,
        "config revision 4 complete in 42s".into(),
    );
    assert_eq!(
        payload(NotifyFormat::Teams, &complete, "", TIME)["text"],
        "nudge: the rollout of *web* of type *Deployment* in namespace *shop* completed: \
         config revision 4 complete in 42s"
    );
}

#[test]
fn held_config_and_halted_waves_say_so() {
    let pending = Notice::new(
        mk_id(),
        Reason::ConfigPending,
        "config sha256-3c1f09ab77e2 is pending: mode notify, nudge does not roll this workload"
            .into(),
    );
    assert_eq!(
        payload(NotifyFormat::Teams, &pending, "", TIME)["text"],
        "nudge: config of *web* of type *Deployment* in namespace *shop* changed and waits: \
         config sha256-3c1f09ab77e2 is pending: mode notify, nudge does not roll this workload"
    );
    let halted = Notice::new(
        mk_id(),
        Reason::WavesHalted,
        "the rollout of config sha256-3c1f09ab77e2 (wave 0) failed; held: Deployment/shop/eu (wave 1)"
            .into(),
    );
    let slack = payload(NotifyFormat::Slack, &halted, "", TIME);
    assert_eq!(slack["attachments"][0]["color"], "danger");
    assert_eq!(
        slack["attachments"][0]["text"],
        "nudge: later waves HALTED, the rollout of *web* of type *Deployment* in namespace *shop* failed: \
         the rollout of config sha256-3c1f09ab77e2 (wave 0) failed; held: Deployment/shop/eu (wave 1)"
    );
}

// === the queue ===

#[tokio::test]
async fn only_stamps_and_rollout_outcomes_are_queued() {
    let metrics = NotifyMetrics::default();
    let (notifier, mut worker) =
        Notifier::with_capacity(mk_settings("http://127.0.0.1:9/hook"), metrics.clone(), 8)
            .unwrap();
    for reason in [
        Reason::InvalidAnnotation,
        Reason::MissingConfig,
        Reason::StampFailed,
        Reason::RolloutSuperseded,
        Reason::ConfigWaiting,
    ] {
        notifier
            .publish(Notice::new(
                mk_id(),
                reason,
                "configmap shop/x not found".into(),
            ))
            .await;
    }
    assert!(worker.queue.try_recv().is_err(), "nothing to send");
    notifier
        .publish(mk_stamp(vec![configmap("app-config")]))
        .await;
    let message = worker.queue.try_recv().expect("the stamp is queued");
    assert_eq!(message.workload, mk_id());
    for reason in [
        Reason::RolloutComplete,
        Reason::RolloutFailed,
        Reason::ConfigPending,
        Reason::WavesHalted,
    ] {
        notifier
            .publish(Notice::new(mk_id(), reason, "config revision 2".into()))
            .await;
        assert!(worker.queue.try_recv().is_ok(), "{reason:?} is sent");
    }
    for result in NotifyResult::ALL {
        assert_eq!(metrics.count(NotifyFormat::Slack, result), 0);
    }
}

#[tokio::test]
async fn a_full_queue_drops_and_counts_without_waiting() {
    let metrics = NotifyMetrics::default();
    let (notifier, worker) =
        Notifier::with_capacity(mk_settings("http://127.0.0.1:9/hook"), metrics.clone(), 1)
            .unwrap();
    for _ in 0..3 {
        notifier
            .publish(mk_stamp(vec![configmap("app-config")]))
            .await;
    }
    assert_eq!(metrics.count(NotifyFormat::Slack, NotifyResult::Dropped), 2);
    drop(worker);
}

// === the worker, against a receiver on 127.0.0.1 ===

/// How the test receiver answers.
#[derive(Clone, Copy)]
enum Answer {
    /// This status line, e.g. `200 OK`.
    Status(&'static str),
    /// 302 to another path of the same receiver.
    Redirect,
    /// Never.
    Hang,
}

/// A one-route HTTP/1.1 receiver recording each request (head and body).
struct Receiver {
    base: String,
    requests: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    async fn start(answer: Answer) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (recorded, location) = (requests.clone(), format!("{base}/elsewhere"));
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let (recorded, location) = (recorded.clone(), location.clone());
                tokio::spawn(async move {
                    let request = read_request(&mut stream).await;
                    recorded.lock().unwrap().push(request);
                    let head = match answer {
                        Answer::Status(status) => format!("HTTP/1.1 {status}\r\n"),
                        Answer::Redirect => {
                            format!("HTTP/1.1 302 Found\r\nLocation: {location}\r\n")
                        }
                        Answer::Hang => return std::future::pending().await,
                    };
                    let response = format!("{head}Content-Length: 0\r\nConnection: close\r\n\r\n");
                    let _ = stream.write_all(response.as_bytes()).await;
                });
            }
        });
        Receiver {
            base,
            requests,
            task,
        }
    }

    fn url(&self) -> String {
        format!("{}/hook/s3cr3t", self.base)
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// Reads one request: the head, then `Content-Length` bytes of body.
async fn read_request(stream: &mut tokio::net::TcpStream) -> String {
    let mut bytes = Vec::new();
    let mut buf = [0_u8; 4096];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&bytes);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if body.len() >= length {
                break;
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Sends `stamps` notifications through a worker with `settings` and waits until
/// it has handled them all.
async fn send(settings: NotifySettings, stamps: usize) -> NotifyMetrics {
    let metrics = NotifyMetrics::default();
    let (notifier, worker) = Notifier::new(settings, metrics.clone()).unwrap();
    let running = tokio::spawn(worker.run(CancellationToken::new()));
    for _ in 0..stamps {
        notifier
            .publish(mk_stamp(vec![configmap("app-config")]))
            .await;
    }
    drop(notifier);
    tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("the worker ends once its notifier is gone")
        .unwrap();
    metrics
}

#[tokio::test]
async fn a_2xx_answer_counts_as_sent_and_the_body_is_the_payload() {
    let receiver = Receiver::start(Answer::Status("204 No Content")).await;
    let metrics = send(mk_settings(&receiver.url()), 1).await;
    assert_eq!(metrics.count(NotifyFormat::Slack, NotifyResult::Sent), 1);
    let requests = receiver.requests();
    assert_eq!(requests.len(), 1);
    let (head, body) = requests[0].split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("POST /hook/s3cr3t HTTP/1.1"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{head}"
    );
    let body: Value = serde_json::from_str(body).unwrap();
    assert_eq!(
        body["attachments"][0]["text"],
        "nudge detected changes in *configmap shop/app-config*. \
         Hence rolled *web* of type *Deployment* in namespace *shop*"
    );
}

#[tokio::test]
async fn an_error_status_or_a_redirect_counts_as_failed_and_is_not_retried_nor_followed() {
    for answer in [
        Answer::Status("500 Internal Server Error"),
        Answer::Status("404 Not Found"),
        Answer::Redirect,
    ] {
        let receiver = Receiver::start(answer).await;
        let metrics = send(mk_settings(&receiver.url()), 1).await;
        assert_eq!(metrics.count(NotifyFormat::Slack, NotifyResult::Failed), 1);
        assert_eq!(metrics.count(NotifyFormat::Slack, NotifyResult::Sent), 0);
        let requests = receiver.requests();
        assert_eq!(requests.len(), 1, "one POST, no retry, no redirect");
    }
}

#[tokio::test]
async fn an_unreachable_receiver_counts_as_failed() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let metrics = send(mk_settings(&format!("http://127.0.0.1:{port}/hook")), 2).await;
    assert_eq!(metrics.count(NotifyFormat::Slack, NotifyResult::Failed), 2);
}

#[tokio::test]
async fn a_receiver_that_never_answers_fails_after_the_timeout() {
    let receiver = Receiver::start(Answer::Hang).await;
    let mut settings = mk_settings(&receiver.url());
    settings.timeout = Duration::from_millis(200);
    let metrics = send(settings, 1).await;
    assert_eq!(metrics.count(NotifyFormat::Slack, NotifyResult::Failed), 1);
}

#[tokio::test]
async fn at_shutdown_what_is_not_sent_within_the_grace_period_is_dropped() {
    let receiver = Receiver::start(Answer::Hang).await;
    let mut settings = mk_settings(&receiver.url());
    settings.timeout = Duration::from_secs(60);
    let metrics = NotifyMetrics::default();
    let (notifier, mut worker) = Notifier::new(settings, metrics.clone()).unwrap();
    worker.grace = Duration::from_millis(100);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    for _ in 0..3 {
        notifier
            .publish(mk_stamp(vec![configmap("app-config")]))
            .await;
    }
    // The first POST hangs at the receiver; two wait behind it.
    while receiver.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("the worker stops after its grace period, not the POST's timeout")
        .unwrap();
    assert_eq!(metrics.count(NotifyFormat::Slack, NotifyResult::Dropped), 3);
    assert_eq!(metrics.count(NotifyFormat::Slack, NotifyResult::Failed), 0);
    drop(notifier);
}

#[tokio::test]
async fn transport_errors_are_logged_without_the_url() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let error = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/hook/s3cr3t"))
        .send()
        .await
        .unwrap_err();
    assert!(
        crate::errors::error_chain(&error).contains("s3cr3t"),
        "reqwest names the URL"
    );
    assert_eq!(transport_category(&error), "connect");
    let text = crate::errors::error_chain(&error.without_url());
    assert!(!text.contains("s3cr3t"), "{text}");
}
