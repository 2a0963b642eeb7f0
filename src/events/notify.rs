//! Notifications (`[notify]`): one message per stamp, POSTed to a chat or HTTP
//! webhook (Slack, Microsoft Teams, Google Chat, or nudge's own JSON), as
//! Reloader's alerts do. A message names the workload and the references whose
//! change it carries; never content, never fingerprints.
//!
//! [`Notifier`] is an [`EventSink`] that reacts to `ConfigChanged` (a stamp),
//! `RolloutComplete` and `RolloutFailed` (how the rollout it started ended; the
//! message carries the Event's note: references, who changed them, and values
//! as nudge's history keeps them, keyed or redacted, never content),
//! `ConfigPending` (changed config a hold keeps back until someone acts) and
//! `WavesHalted` (a failed rollout holds the later waves; design §5d). Its
//! `publish` renders the message and queues it without waiting (a full queue
//! drops it); a [`NotifyWorker`] POSTs the queue one message at a time, with a
//! deadline and no retries, and refuses redirects. Every outcome is counted
//! ([`NotifyMetrics`]) and failures are logged by category and status, never with
//! the URL (it embeds a token). Nothing here can delay a stamp.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{EventSink, Notice, Reason};
use crate::config::{NotifyConfig, NotifyFormat, parse_webhook_url};
use crate::model::{Reference, WorkloadId};

/// Messages waiting for the worker; beyond this, new ones are dropped (counted).
pub const QUEUE_CAPACITY: usize = 256;
/// How long the worker may go on sending what is queued once shutdown starts.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// References named in a message's text; the rest are counted ("and 3 more").
/// nudge's JSON lists every one in `references`.
const MAX_NAMED_REFERENCES: usize = 20;

/// Why notifications could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NotifyError {
    /// `notify.url_file` could not be read (not mounted, no permission).
    #[error("cannot read notify.url_file {path}")]
    ReadUrlFile {
        /// The configured path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `notify.url_file` holds nothing but whitespace.
    #[error("notify.url_file {path} is empty")]
    EmptyUrlFile {
        /// The configured path.
        path: PathBuf,
    },
    /// The webhook URL is not an absolute http(s) URL. The URL itself is never
    /// repeated: it embeds a token.
    #[error("the webhook URL in {from} {problem}")]
    InvalidUrl {
        /// Where it came from: `notify.url`, or `notify.url_file <path>`.
        from: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The HTTP client could not be built (TLS set-up).
    #[error("cannot build the notification HTTP client")]
    Client(#[source] reqwest::Error),
}

impl NotifyError {
    /// What an operator should do about it.
    pub(crate) fn hint(&self) -> Option<String> {
        match self {
            Self::ReadUrlFile { .. } | Self::EmptyUrlFile { .. } => Some(
                "mount the Secret holding the webhook URL at notify.url_file \
                 (NUDGE_NOTIFY__URL_FILE), or set notify.enabled = false"
                    .into(),
            ),
            Self::InvalidUrl { .. } => {
                Some("give the full webhook URL, starting with https://".into())
            }
            Self::Client(_) => None,
        }
    }
}

/// Where and how to notify. The URL is never printed; [`host`](Self::host) is.
#[derive(Clone)]
pub struct NotifySettings {
    url: reqwest::Url,
    /// The payload format.
    pub format: NotifyFormat,
    /// Deadline of one POST, connection included.
    pub timeout: Duration,
    /// Put before every message as `<additional_info> : <message>`; empty: none.
    pub additional_info: String,
}

impl fmt::Debug for NotifySettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NotifySettings")
            .field("host", &self.host())
            .field("format", &self.format)
            .field("timeout", &self.timeout)
            .field("additional_info", &self.additional_info)
            .finish()
    }
}

impl NotifySettings {
    /// Settings posting `format` messages to `url` (the defaults of `[notify]`
    /// for the rest).
    pub fn new(url: reqwest::Url, format: NotifyFormat) -> Self {
        let defaults = NotifyConfig::default();
        Self {
            url,
            format,
            timeout: defaults.timeout,
            additional_info: defaults.additional_info,
        }
    }

    /// The settings `[notify]` describes, reading `url_file` now; `None` when
    /// notifications are off.
    pub fn from_config(config: &NotifyConfig) -> Result<Option<Self>, NotifyError> {
        if !config.enabled {
            return Ok(None);
        }
        let url = if config.url_file.is_empty() {
            parse_webhook_url(config.url.0.trim()).map_err(|problem| NotifyError::InvalidUrl {
                from: "notify.url".into(),
                problem,
            })?
        } else {
            read_url_file(Path::new(&config.url_file))?
        };
        Ok(Some(Self {
            url,
            format: config.format,
            timeout: config.timeout,
            additional_info: config.additional_info.trim().to_owned(),
        }))
    }

    /// The receiver's host, the most of the URL that may be logged.
    pub fn host(&self) -> &str {
        self.url.host_str().unwrap_or_default()
    }
}

fn read_url_file(path: &Path) -> Result<reqwest::Url, NotifyError> {
    let text = std::fs::read_to_string(path).map_err(|source| NotifyError::ReadUrlFile {
        path: path.to_owned(),
        source,
    })?;
    let text = text.trim();
    if text.is_empty() {
        return Err(NotifyError::EmptyUrlFile {
            path: path.to_owned(),
        });
    }
    parse_webhook_url(text).map_err(|problem| NotifyError::InvalidUrl {
        from: format!("notify.url_file {}", path.display()),
        problem,
    })
}

// === metrics ===

/// How one notification ended (`result` label of `nudge_notifications_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NotifyResult {
    /// The receiver answered 2xx.
    Sent,
    /// A transport error (connection, TLS, timeout) or an answer other than 2xx
    /// (a redirect included: redirects are refused). Not retried.
    Failed,
    /// Not sent: the queue was full, or it was still queued when nudge stopped.
    Dropped,
}

impl NotifyResult {
    /// Every result, in a stable order.
    pub const ALL: [NotifyResult; 3] = [Self::Sent, Self::Failed, Self::Dropped];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sent => "sent",
            Self::Failed => "failed",
            Self::Dropped => "dropped",
        }
    }
}

impl EncodeLabelValue for NotifyResult {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
        fmt::Write::write_str(encoder, self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct NotifyLabels {
    format: &'static str,
    result: NotifyResult,
}

/// Notifications by format and result. Clones share the series.
#[derive(Debug, Clone, Default)]
pub struct NotifyMetrics {
    notifications: Family<NotifyLabels, Counter>,
}

impl NotifyMetrics {
    /// Metrics registered into `registry` as `notifications_total{format, result}`
    /// (`nudge_notifications_total` under nudge's registry).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "notifications",
            "Notifications of stamps by payload format and result",
            metrics.notifications.clone(),
        );
        metrics
    }

    /// Exposes every result of `format` at zero.
    fn expose(&self, format: NotifyFormat) {
        for result in NotifyResult::ALL {
            drop(self.counter(format, result));
        }
    }

    /// Counts one notification.
    pub fn record(&self, format: NotifyFormat, result: NotifyResult) {
        self.counter(format, result).inc();
    }

    /// Notifications of `format` that ended with `result` so far.
    pub fn count(&self, format: NotifyFormat, result: NotifyResult) -> u64 {
        self.counter(format, result).get()
    }

    fn counter(&self, format: NotifyFormat, result: NotifyResult) -> Counter {
        self.notifications
            .get_or_create(&NotifyLabels {
                format: format.as_str(),
                result,
            })
            .clone()
    }
}

// === rendering ===

/// How names are set off in a message: `*bold*` for chat (Slack, Teams and Google
/// Chat, as Reloader sends them), plain for JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Emphasis {
    Bold,
    Plain,
}

impl Emphasis {
    fn mark(self, text: &str) -> String {
        match self {
            Self::Bold => format!("*{text}*"),
            Self::Plain => text.to_owned(),
        }
    }
}

/// A changed reference as a message names it: the object, never its keys.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Named<'a> {
    source: &'a str,
    namespace: Option<&'a str>,
    name: &'a str,
}

impl<'a> Named<'a> {
    fn of(reference: &'a Reference) -> Self {
        Self {
            source: reference.source.as_str(),
            namespace: reference.namespace.as_deref(),
            name: &reference.name,
        }
    }
}

impl fmt::Display for Named<'_> {
    /// `configmap shop/app-config`, `consul key app/config`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.namespace {
            Some(namespace) => write!(f, "{} {namespace}/{}", self.source, self.name),
            None => write!(f, "{} key {}", self.source, self.name),
        }
    }
}

/// The changed objects of a notice, each once (two key selections of one
/// ConfigMap are one object), sorted.
fn named(notice: &Notice) -> Vec<Named<'_>> {
    let set: BTreeSet<Named<'_>> = notice.changed.iter().map(Named::of).collect();
    set.into_iter().collect()
}

/// The message text, modeled on Reloader's: `nudge detected changes in
/// *configmap shop/app-config*, *secret shop/db*. Hence rolled *web* of type
/// *Deployment* in namespace *shop*`. A stamp with no changed reference (a new or
/// edited workload) says what it stamped instead.
fn message(notice: &Notice, emphasis: Emphasis, additional_info: &str) -> String {
    let workload = &notice.workload;
    let rolled = format!(
        "{} of type {} in namespace {}",
        emphasis.mark(&workload.name),
        emphasis.mark(workload.kind.as_str()),
        emphasis.mark(&workload.namespace)
    );
    let named = named(notice);
    let text = if let Some(ended) = rollout_ended(notice.reason) {
        format!("nudge: the rollout of {rolled} {ended}: {}", notice.note)
    } else if notice.reason == Reason::ConfigPending {
        format!(
            "nudge: config of {rolled} changed and waits: {}",
            notice.note
        )
    } else if notice.reason == Reason::WavesHalted {
        format!(
            "nudge: later waves HALTED, the rollout of {rolled} failed: {}",
            notice.note
        )
    } else if named.is_empty() {
        format!("nudge rolled {rolled} ({})", notice.note)
    } else {
        let names: Vec<String> = named
            .iter()
            .take(MAX_NAMED_REFERENCES)
            .map(|n| emphasis.mark(&n.to_string()))
            .collect();
        let mut listed = names.join(", ");
        if let Some(more) = named.len().checked_sub(MAX_NAMED_REFERENCES)
            && more > 0
        {
            listed.push_str(&format!(" and {more} more"));
        }
        format!("nudge detected changes in {listed}. Hence rolled {rolled}")
    };
    if additional_info.is_empty() {
        text
    } else {
        format!("{additional_info} : {text}")
    }
}

/// How a rollout outcome's message says it ended; `None` for other notices.
fn rollout_ended(reason: Reason) -> Option<&'static str> {
    match reason {
        Reason::RolloutComplete => Some("completed"),
        Reason::RolloutFailed => Some("FAILED"),
        _ => None,
    }
}

/// The JSON body POSTed for `notice` in `format`; `time` (RFC 3339) is when it
/// was published.
fn payload(format: NotifyFormat, notice: &Notice, additional_info: &str, time: &str) -> Value {
    match format {
        NotifyFormat::Slack => json!({
            "attachments": [{
                "author_name": "nudge",
                "color": if matches!(notice.reason, Reason::RolloutFailed | Reason::WavesHalted) { "danger" } else { "good" },
                "text": message(notice, Emphasis::Bold, additional_info),
            }],
        }),
        NotifyFormat::Teams | NotifyFormat::Gchat => json!({
            "text": message(notice, Emphasis::Bold, additional_info),
        }),
        NotifyFormat::Json => {
            let workload = &notice.workload;
            let references: Vec<Value> = named(notice)
                .into_iter()
                .map(|n| match n.namespace {
                    Some(namespace) => {
                        json!({ "source": n.source, "namespace": namespace, "name": n.name })
                    }
                    None => json!({ "source": n.source, "key": n.name }),
                })
                .collect();
            json!({
                "workload": {
                    "kind": workload.kind.as_str(),
                    "namespace": workload.namespace,
                    "name": workload.name,
                },
                "references": references,
                "reason": notice.reason.as_str(),
                "message": message(notice, Emphasis::Plain, additional_info),
                "time": time,
            })
        }
    }
}

// === the sink and its worker ===

/// One rendered notification.
struct Message {
    workload: WorkloadId,
    body: Vec<u8>,
}

/// The [`EventSink`] half: renders each stamp and rollout outcome and queues it for
/// the [`NotifyWorker`] without waiting.
pub struct Notifier {
    queue: mpsc::Sender<Message>,
    format: NotifyFormat,
    additional_info: String,
    metrics: NotifyMetrics,
}

impl fmt::Debug for Notifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Notifier")
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

/// The sending half: POSTs queued messages one at a time until the queue closes
/// or shutdown's grace period ends. Run it with [`run`](Self::run) on a task its
/// owner joins.
pub struct NotifyWorker {
    queue: mpsc::Receiver<Message>,
    client: reqwest::Client,
    url: reqwest::Url,
    format: NotifyFormat,
    metrics: NotifyMetrics,
    /// How long sending goes on once shutdown starts.
    grace: Duration,
}

impl fmt::Debug for NotifyWorker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NotifyWorker")
            .field("host", &self.url.host_str())
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

impl Notifier {
    /// A notifier and its worker, counting into `metrics`.
    pub fn new(
        settings: NotifySettings,
        metrics: NotifyMetrics,
    ) -> Result<(Self, NotifyWorker), NotifyError> {
        Self::with_capacity(settings, metrics, QUEUE_CAPACITY)
    }

    fn with_capacity(
        settings: NotifySettings,
        metrics: NotifyMetrics,
        capacity: usize,
    ) -> Result<(Self, NotifyWorker), NotifyError> {
        let client = reqwest::Client::builder()
            .use_rustls_tls()
            .user_agent(concat!("nudge/", env!("CARGO_PKG_VERSION")))
            // A webhook that redirects is misconfigured (Reloader: "incorrect
            // token"); following it could hand the message to someone else.
            .redirect(reqwest::redirect::Policy::none())
            .timeout(settings.timeout)
            .build()
            .map_err(NotifyError::Client)?;
        metrics.expose(settings.format);
        let (tx, rx) = mpsc::channel(capacity);
        let notifier = Self {
            queue: tx,
            format: settings.format,
            additional_info: settings.additional_info,
            metrics: metrics.clone(),
        };
        let worker = NotifyWorker {
            queue: rx,
            client,
            url: settings.url,
            format: settings.format,
            metrics,
            grace: SHUTDOWN_GRACE,
        };
        Ok((notifier, worker))
    }

    /// Renders and queues `notice` when it is a stamp or a rollout's end; never
    /// waits.
    fn queue(&self, notice: &Notice) {
        let notified = [
            Reason::ConfigChanged,
            Reason::RolloutComplete,
            Reason::RolloutFailed,
            Reason::ConfigPending,
            Reason::WavesHalted,
        ];
        if !notified.contains(&notice.reason) {
            return;
        }
        let time = k8s_openapi::jiff::Timestamp::now().to_string();
        let body = payload(self.format, notice, &self.additional_info, &time).to_string();
        let message = Message {
            workload: notice.workload.clone(),
            body: body.into_bytes(),
        };
        match self.queue.try_send(message) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(message)) => {
                self.metrics.record(self.format, NotifyResult::Dropped);
                tracing::warn!(workload = %message.workload, "notification queue full; dropping the notification");
            }
            Err(mpsc::error::TrySendError::Closed(message)) => {
                self.metrics.record(self.format, NotifyResult::Dropped);
                tracing::debug!(workload = %message.workload, "notifications stopped; dropping the notification");
            }
        }
    }
}

#[async_trait]
impl EventSink for Notifier {
    async fn publish(&self, notice: Notice) {
        self.queue(&notice);
    }
}

impl NotifyWorker {
    /// The receiver's host (for logs).
    pub fn host(&self) -> &str {
        self.url.host_str().unwrap_or_default()
    }

    /// Sends queued messages until every [`Notifier`] is gone and the queue is
    /// empty, or until `shutdown` was cancelled `SHUTDOWN_GRACE` ago; what is
    /// still queued or being sent then is dropped (counted).
    pub async fn run(self, shutdown: CancellationToken) {
        let NotifyWorker {
            mut queue,
            client,
            url,
            format,
            metrics,
            grace,
        } = self;
        let in_flight = AtomicBool::new(false);
        let deliver_all = async {
            while let Some(message) = queue.recv().await {
                in_flight.store(true, Ordering::Relaxed);
                deliver(&client, &url, format, &metrics, message).await;
                in_flight.store(false, Ordering::Relaxed);
            }
        };
        let grace_over = async {
            shutdown.cancelled().await;
            tokio::time::sleep(grace).await;
        };
        let finished = tokio::select! {
            () = deliver_all => true,
            () = grace_over => false,
        };
        if finished {
            return;
        }
        let mut dropped = u64::from(in_flight.load(Ordering::Relaxed));
        while queue.try_recv().is_ok() {
            dropped += 1;
        }
        for _ in 0..dropped {
            metrics.record(format, NotifyResult::Dropped);
        }
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "nudge is stopping; notifications not sent by now are dropped"
            );
        }
    }
}

/// POSTs one message and counts the outcome. Never logs the URL.
async fn deliver(
    client: &reqwest::Client,
    url: &reqwest::Url,
    format: NotifyFormat,
    metrics: &NotifyMetrics,
    message: Message,
) {
    let Message { workload, body } = message;
    let sent = client
        .post(url.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await;
    match sent {
        Ok(response) if response.status().is_success() => {
            metrics.record(format, NotifyResult::Sent);
            tracing::debug!(%workload, status = response.status().as_u16(), "notification sent");
        }
        Ok(response) => {
            metrics.record(format, NotifyResult::Failed);
            let status = response.status();
            let category = if status.is_redirection() {
                "redirect_refused"
            } else {
                "status"
            };
            tracing::warn!(%workload, status = status.as_u16(), category, "the notification receiver did not accept the notification; not retried");
        }
        Err(error) => {
            metrics.record(format, NotifyResult::Failed);
            let category = transport_category(&error);
            let error = crate::errors::error_chain(&error.without_url());
            tracing::warn!(%workload, category, %error, "cannot send the notification; not retried");
        }
    }
}

/// A low-cardinality name for a transport error, for logs.
fn transport_category(error: &reqwest::Error) -> &'static str {
    if error.is_timeout() {
        "timeout"
    } else if error.is_connect() {
        "connect"
    } else if error.is_redirect() {
        "redirect_refused"
    } else if error.is_body() || error.is_request() {
        "request"
    } else {
        "other"
    }
}

#[cfg(test)]
mod tests;
