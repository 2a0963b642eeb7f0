//! The API server double as its own process (`apiserver-double`), so that its CPU
//! is told apart from nudge's: started with a kubeconfig, seeded in bulk through
//! `POST /_double/objects`, and its request log followed through
//! `GET /_double/request-log`, a stream of every request with its arrival
//! (wall-clock microseconds, comparable with this process's clock) and the
//! double's service time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;
use tokio::io::AsyncBufReadExt as _;
use tokio::task::JoinHandle;

/// A batch of objects for `POST /_double/objects`: under the double's 3 MiB
/// request body limit.
const BATCH_BYTES: usize = 2 * 1024 * 1024;
/// How long the double may take to start, and to stop after SIGTERM.
const START_WITHIN: Duration = Duration::from_secs(60);
const STOP_WITHIN: Duration = Duration::from_secs(60);
/// How long one batch of objects may take (a few hundred objects).
const BATCH_WITHIN: Duration = Duration::from_secs(120);
/// How long without a write means the double's imitated
/// kube-controller-manager is done: it acts within milliseconds of each write.
const SETTLED_AFTER: Duration = Duration::from_secs(1);
/// How long it may take to get there (20,000 new workloads at 10×).
const SETTLE_WITHIN: Duration = Duration::from_secs(600);

/// One request from the double's log (without body).
#[derive(Debug, Clone)]
pub struct Request {
    pub seq: u64,
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub status: u16,
    pub user_agent: Option<String>,
    pub content_type: Option<String>,
    /// When the double received it (its clock: the machine's wall clock).
    pub received_at: SystemTime,
    /// How long the double took to answer (to the response head).
    pub service: Duration,
}

impl Request {
    /// The first value of a query parameter.
    pub fn query_param(&self, name: &str) -> Option<String> {
        let q = self.query.as_deref()?;
        form_urlencoded(q)
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_owned())
    }

    pub fn is_watch(&self) -> bool {
        matches!(self.query_param("watch").as_deref(), Some("1" | "true"))
    }

    /// When the double had answered it.
    pub fn answered_at(&self) -> SystemTime {
        self.received_at + self.service
    }
}

/// `name=value` pairs of a query string. The parameters read here (`watch`,
/// `fieldManager`) hold no escapes.
fn form_urlencoded(query: &str) -> impl Iterator<Item = (&str, &str)> {
    query
        .split('&')
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
}

/// A line of `GET /_double/request-log`.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct LogLine {
    seq: u64,
    method: String,
    path: String,
    query: Option<String>,
    headers: BTreeMap<String, String>,
    status: u16,
    received_at_micros: u64,
    service_micros: u64,
}

impl From<LogLine> for Request {
    fn from(mut l: LogLine) -> Self {
        Self {
            seq: l.seq,
            user_agent: l.headers.remove("user-agent"),
            content_type: l.headers.remove("content-type"),
            method: l.method,
            path: l.path,
            query: l.query,
            status: l.status,
            received_at: UNIX_EPOCH + Duration::from_micros(l.received_at_micros),
            service: Duration::from_micros(l.service_micros),
        }
    }
}

/// The `apiserver-double` process and this process's copy of its request log.
pub struct Double {
    child: tokio::process::Child,
    pub pid: u32,
    url: String,
    token: String,
    kubeconfig: PathBuf,
    admin: reqwest::Client,
    log: Arc<Mutex<Vec<Request>>>,
    follower: JoinHandle<Result<()>>,
}

impl Double {
    /// Starts `binary` with its kubeconfig in `dir` and its log in `log`, and
    /// begins following its request log.
    pub async fn start(binary: &Path, dir: &Path, log: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let kubeconfig = dir.join("kubeconfig");
        let token: String = std::iter::repeat_with(fastrand::alphanumeric)
            .take(32)
            .collect();
        let log_file =
            std::fs::File::create(log).with_context(|| format!("create {}", log.display()))?;
        let mut child = tokio::process::Command::new(binary)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--token", &token])
            // Every request of a run is kept, without bodies.
            .args(["--max-recorded-requests", "100000000", "--no-record-bodies"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("run {}", binary.display()))?;
        let pid = child.id().context("the double exited at once")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut first = String::new();
        tokio::time::timeout(
            START_WITHIN,
            tokio::io::BufReader::new(stdout).read_line(&mut first),
        )
        .await
        .with_context(|| format!("the double printed no kubeconfig within {START_WITHIN:?}"))??;
        if first.trim() != kubeconfig.to_string_lossy() {
            bail!(
                "the double printed {first:?}, not its kubeconfig (its log: {})",
                log.display()
            );
        }
        let url = server_of(&kubeconfig)?;
        let admin = reqwest::Client::builder()
            .user_agent("nudge-loadtest-admin")
            .build()?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let follower = tokio::spawn(follow(admin.clone(), url.clone(), requests.clone()));
        Ok(Self {
            child,
            pid,
            url,
            token,
            kubeconfig,
            admin,
            log: requests,
            follower,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// `(VmRSS, VmHWM)` in bytes.
    pub fn memory(&self) -> Result<(u64, u64)> {
        super::procfs::memory(self.pid)
    }

    /// Creates `objects` (as `POST /_double/objects` does: the defaulting and
    /// validation of a POST, not recorded), in batches sent while the next is
    /// drawn. Returns how many were created.
    pub async fn create_all(&self, objects: impl Iterator<Item = Value>) -> Result<u64> {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<(Vec<u8>, u64)>(2);
        let sender = {
            let (admin, url) = (self.admin.clone(), format!("{}/_double/objects", self.url));
            tokio::spawn(async move {
                let mut created = 0;
                while let Some((batch, count)) = rx.recv().await {
                    created += post_batch(&admin, &url, batch, count).await?;
                }
                anyhow::Ok(created)
            })
        };
        let mut batch = Vec::with_capacity(BATCH_BYTES + 64 * 1024);
        let mut count = 0;
        for object in objects {
            serde_json::to_writer(&mut batch, &object)?;
            batch.push(b'\n');
            count += 1;
            if batch.len() >= BATCH_BYTES {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH_BYTES));
                if tx.send((full, count)).await.is_err() {
                    break; // The sender failed; its error is returned below.
                }
                count = 0;
            }
        }
        if count > 0 {
            let _ = tx.send((batch, count)).await;
        }
        drop(tx);
        sender.await?
    }

    /// Waits until the double's resourceVersion has stood still for a second:
    /// its imitated kube-controller-manager has done what seeding gave it (a
    /// ReplicaSet or ControllerRevision and status for each new workload) and
    /// will not compete with the nudge started next. Returns how long that took.
    pub async fn settle(&self) -> Result<Duration> {
        let began = Instant::now();
        let url = format!("{}/_double/state", self.url);
        let mut last = Value::Null;
        let mut still_since = Instant::now();
        loop {
            let version = get_json(&self.admin, &url).await?["resourceVersion"].take();
            if version != last {
                last = version;
                still_since = Instant::now();
            } else if still_since.elapsed() >= SETTLED_AFTER {
                return Ok(began.elapsed());
            }
            if began.elapsed() > SETTLE_WITHIN {
                bail!("the double's controllers still wrote after {SETTLE_WITHIN:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until this process's copy of the request log holds every request
    /// the double has recorded so far.
    pub async fn sync(&self) -> Result<()> {
        let state: Value = get_json(&self.admin, &format!("{}/_double/state", self.url)).await?;
        let last = state["lastRequestSeq"]
            .as_u64()
            .context("the double's state has no lastRequestSeq")?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if lock(&self.log).last().map_or(0, |r| r.seq) >= last {
                return Ok(());
            }
            self.check_following()?;
            if Instant::now() > deadline {
                bail!("the double's request log did not reach seq {last} within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The logged requests for which `keep` holds, oldest first.
    pub fn requests(&self, keep: impl Fn(&Request) -> bool) -> Vec<Request> {
        lock(&self.log)
            .iter()
            .filter(|r| keep(r))
            .cloned()
            .collect()
    }

    /// Fails when the request log is no longer followed: the double exited,
    /// or its stream failed.
    pub fn check_following(&self) -> Result<()> {
        if self.follower.is_finished() {
            bail!(
                "the double's request log stream ended (has the double exited? its log is beside the JSON)"
            );
        }
        Ok(())
    }

    /// SIGTERM, then an exit within a minute.
    pub async fn stop(mut self) -> Result<()> {
        self.follower.abort();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status();
        tokio::time::timeout(STOP_WITHIN, self.child.wait())
            .await
            .context("the double did not exit within a minute of SIGTERM")??;
        Ok(())
    }
}

fn lock(log: &Mutex<Vec<Request>>) -> MutexGuard<'_, Vec<Request>> {
    // A panic while holding it cannot leave the log half-written.
    log.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The `server:` of the kubeconfig the double wrote.
fn server_of(kubeconfig: &Path) -> Result<String> {
    let text = std::fs::read_to_string(kubeconfig)
        .with_context(|| format!("read {}", kubeconfig.display()))?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .map(|s| s.trim_matches('"').to_owned())
        .with_context(|| format!("no server in {}", kubeconfig.display()))
}

async fn get_json(http: &reqwest::Client, url: &str) -> Result<Value> {
    let response = http
        .get(url)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    let status = response.status();
    let body = response.bytes().await?;
    if !status.is_success() {
        bail!("GET {url}: {status}: {}", String::from_utf8_lossy(&body));
    }
    Ok(serde_json::from_slice(&body)?)
}

async fn post_batch(http: &reqwest::Client, url: &str, batch: Vec<u8>, count: u64) -> Result<u64> {
    let response = http
        .post(url)
        .header("content-type", "application/x-ndjson")
        .timeout(BATCH_WITHIN)
        .body(batch)
        .send()
        .await
        .with_context(|| format!("POST {url}"))?;
    let status = response.status();
    let body: Value = serde_json::from_slice(&response.bytes().await?)?;
    let created = body["created"].as_u64().unwrap_or(0);
    if !status.is_success() || created != count {
        bail!("seeding: {status}: {body} ({count} objects sent)");
    }
    Ok(created)
}

/// Appends the double's request log to `log` as it grows, until the stream ends.
async fn follow(http: reqwest::Client, url: String, log: Arc<Mutex<Vec<Request>>>) -> Result<()> {
    let mut response = http
        .get(format!("{url}/_double/request-log?after=0"))
        .send()
        .await?;
    if !response.status().is_success() {
        bail!("GET /_double/request-log: {}", response.status());
    }
    let mut pending = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        pending.extend_from_slice(&chunk);
        let Some(end) = pending.iter().rposition(|b| *b == b'\n') else {
            continue;
        };
        let complete: Vec<u8> = pending.drain(..=end).collect();
        let mut parsed = Vec::new();
        for line in complete.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let line: LogLine = serde_json::from_slice(line).with_context(|| {
                format!("a request-log line: {}", String::from_utf8_lossy(line))
            })?;
            parsed.push(Request::from(line));
        }
        lock(&log).extend(parsed);
    }
    Ok(())
}
