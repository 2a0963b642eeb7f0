//! nudge's benchmark (issue 7): the API server double (in this process) and a real
//! `consul agent -dev` are loaded with a cluster, the `nudge` binary runs as its own
//! process against them, and the benchmark drives changes and measures nudge from
//! the outside: start-to-ready time, RSS and CPU from `/proc/<pid>`, change-to-PATCH
//! latency and API requests from the double's request log, connections to Consul
//! from `/proc/net/tcp` matched against nudge's own sockets.
//!
//! ```sh
//! cargo run --release --example loadtest -- --scale small   # 1 workload, 1 ConfigMap, 1 Consul key
//! cargo run --release --example loadtest -- --scale large   # 1×: 2k workloads, 20k objects
//! cargo run --release --example loadtest -- --scale xl      # 10×: 20k workloads, 200k objects
//! cargo run --release --example loadtest -- --scale ci      # counts only; CI runs it as a test
//! ```
//!
//! Options: `--scale ci|small|large|xl` (default large), `--nudge PATH` (default: build and use the `nudge`
//! binary of this example's profile), `--out PATH` (default
//! `<target>/loadtest-<scale>.json`), `--log PATH` (nudge's log; default beside the
//! JSON), `--plot-only` (redraw the plot and exit). After each run, the plot
//! `loadtest-scales.svg` beside the JSON is redrawn from the `loadtest-<scale>.json`
//! files there: steady and peak RSS and change→PATCH p99 against scale. Prints one table and writes the same figures as JSON. Exits 1 when a
//! count check fails (LISTs per change, PATCHes per change, PATCHes after restart);
//! timing targets are reported, never enforced.
//!
//! All traffic stays on 127.0.0.1. Every wait has a deadline.

#[path = "../tests/it/support/consul.rs"]
mod consul_support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, Result, bail};
use apiserver_double::{ApiServerDouble, RecordedRequest};
use base64::Engine as _;
use serde_json::{Value, json};

use consul_support::ConsulAgent;

/// The user agent of the benchmark's own requests, told apart from nudge's.
const USER_AGENT: &str = "nudge-loadtest";
/// nudge's field manager (the default).
const FIELD_MANAGER: &str = "nudge";
/// nudge's own namespace (its fingerprint-key Secret lives there).
const NUDGE_NAMESPACE: &str = "nudge-system";
/// Workloads per namespace, with fixed roles (see [`Model::build`]).
const WORKLOADS_PER_NAMESPACE: usize = 10;
/// Consul keys per Consul-referencing workload.
const KEYS_PER_WORKLOAD: usize = 4;
const KINDS: [&str; 3] = ["Deployment", "StatefulSet", "DaemonSet"];

/// How a run's workloads are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Ten workloads per namespace with fixed roles (see [`Model::build`]);
    /// changes are made every `change_interval` and never share a dependent.
    Standard,
    /// One workload (a Deployment) with a ConfigMap volume under `nudge.dev/auto`
    /// and one Consul key: the smallest real install. Changes alternate between the
    /// ConfigMap and the key, each made once the previous one's PATCH arrived
    /// (at least `change_interval` apart), so each owes exactly one PATCH.
    Single,
}

/// The issue's targets for one scale (reported, never enforced).
#[derive(Debug, Clone, Copy)]
pub struct Targets {
    pub steady_mib: f64,
    pub peak_mib: f64,
    pub ready_seconds: f64,
    pub p99_ms: f64,
}

/// How big a run is.
#[derive(Debug, Clone)]
pub struct Scale {
    pub name: &'static str,
    pub layout: Layout,
    pub namespaces: usize,
    pub configmaps_per_namespace: usize,
    pub secrets_per_namespace: usize,
    /// Unreferenced Secrets added per namespace before the last nudge run.
    pub extra_secrets_per_namespace: usize,
    /// Sizes of ConfigMap and Secret content, bytes.
    pub object_bytes: (usize, usize),
    pub changes: usize,
    /// Time between two changes.
    pub change_interval: Duration,
    /// Idle period over which CPU is measured.
    pub idle: Duration,
    /// How long a restarted nudge is watched for PATCHes after it is ready.
    pub restart_watch: Duration,
    /// The targets of this scale; `None`: counts only (CI).
    pub targets: Option<Targets>,
}

impl Scale {
    /// The smallest real install: one workload, one ConfigMap, one Consul key.
    pub fn small() -> Self {
        Self {
            name: "small",
            layout: Layout::Single,
            namespaces: 1,
            configmaps_per_namespace: 1,
            secrets_per_namespace: 0,
            extra_secrets_per_namespace: 100,
            object_bytes: (1024, 20 * 1024),
            changes: 100,
            change_interval: Duration::from_millis(600),
            idle: Duration::from_secs(60),
            restart_watch: Duration::from_secs(10),
            targets: Some(Targets {
                steady_mib: 16.0,
                peak_mib: 24.0,
                ready_seconds: 1.0,
                p99_ms: 50.0,
            }),
        }
    }

    /// Issue 7's scale (1×): 10k ConfigMaps, 10k Secrets, 200 namespaces, 2k
    /// workloads, 2k Consul keys.
    pub fn large() -> Self {
        Self {
            name: "large",
            layout: Layout::Standard,
            namespaces: 200,
            configmaps_per_namespace: 50,
            secrets_per_namespace: 50,
            extra_secrets_per_namespace: 150,
            object_bytes: (1024, 20 * 1024),
            changes: 500,
            change_interval: Duration::from_millis(100),
            idle: Duration::from_secs(60),
            restart_watch: Duration::from_secs(20),
            targets: Some(Targets {
                steady_mib: 32.0,
                peak_mib: 64.0,
                ready_seconds: 5.0,
                p99_ms: 50.0,
            }),
        }
    }

    /// 10×: large's namespace, 2,000 times: 100k ConfigMaps, 100k Secrets, 20k
    /// workloads, 20k Consul keys; +300k unreferenced Secrets for the last run.
    pub fn xl() -> Self {
        Self {
            name: "xl",
            namespaces: 2000,
            targets: Some(Targets {
                steady_mib: 64.0,
                peak_mib: 128.0,
                ready_seconds: 10.0,
                p99_ms: 50.0,
            }),
            ..Self::large()
        }
    }

    /// The CI scale: counts only, well under 60 s on a debug build.
    pub fn ci() -> Self {
        Self {
            name: "ci",
            layout: Layout::Standard,
            namespaces: 10,
            configmaps_per_namespace: 20,
            secrets_per_namespace: 20,
            extra_secrets_per_namespace: 20,
            object_bytes: (1024, 20 * 1024),
            changes: 45,
            change_interval: Duration::from_millis(100),
            idle: Duration::from_secs(3),
            restart_watch: Duration::from_secs(4),
            targets: None,
        }
    }

    /// The scale called `name`.
    pub fn named(name: &str) -> Option<Self> {
        Some(match name {
            "ci" => Self::ci(),
            "small" => Self::small(),
            "large" => Self::large(),
            "xl" => Self::xl(),
            _ => return None,
        })
    }

    fn workloads(&self) -> usize {
        match self.layout {
            Layout::Standard => self.namespaces * WORKLOADS_PER_NAMESPACE,
            Layout::Single => 1,
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    pub scale: Scale,
    /// The `nudge` binary; `None`: build this profile's and use it.
    pub nudge: Option<PathBuf>,
    /// Where the JSON goes; `None`: `<target>/loadtest-<scale>.json`.
    pub out: Option<PathBuf>,
    /// nudge's log file; `None`: beside the JSON.
    pub log: Option<PathBuf>,
    /// Progress lines on stderr.
    pub verbose: bool,
    /// Extra environment for nudge (experiments, e.g. allocator settings).
    pub nudge_env: Vec<(String, String)>,
    /// How long nudge may take to become ready (120 s; longer for a nudge
    /// under a heap profiler, which slows xl's start-up past that).
    pub ready_within: Duration,
}

// ---------------------------------------------------------------- the cluster model

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum SourceKind {
    ConfigMap,
    Secret,
    Consul,
}

impl SourceKind {
    fn label(self) -> &'static str {
        match self {
            SourceKind::ConfigMap => "configmap",
            SourceKind::Secret => "secret",
            SourceKind::Consul => "consul",
        }
    }
}

#[derive(Debug)]
struct WorkloadSpec {
    kind: &'static str,
    /// `/apis/apps/v1/namespaces/<ns>/<plural>/<name>`.
    path: String,
    /// Whether it references anything (and is stamped at all).
    referencing: bool,
}

/// A referenced source object: a ConfigMap, Secret (in a namespace) or Consul key.
#[derive(Debug)]
struct SourceObject {
    kind: SourceKind,
    namespace: usize,
    /// Object name, or the Consul key.
    name: String,
    dependents: Vec<usize>,
}

#[derive(Debug)]
struct Model {
    namespaces: Vec<String>,
    workloads: Vec<WorkloadSpec>,
    /// Workload bodies, in `workloads` order.
    bodies: Vec<Value>,
    sources: Vec<SourceObject>,
    consul_keys: Vec<String>,
}

impl Model {
    /// Per namespace, ten workloads `w-0`…`w-9` (kinds rotate over the three):
    /// `w-0`–`w-2` `nudge.dev/auto` (a ConfigMap volume `cm-<j>`, `envFrom` Secret
    /// `sec-<j>`; `w-0`, `w-1` also mount the shared `cm-5`); `w-3`, `w-4` explicit
    /// (`configmap-app: cm-<j>`, `secret-db: sec-<j>`, shared `secret-shared: sec-5`);
    /// `w-5`, `w-6` and, in every other namespace, `w-7` reference four Consul keys
    /// each; the rest reference nothing.
    fn build(scale: &Scale) -> Self {
        if scale.layout == Layout::Single {
            return Self::single();
        }
        let mut namespaces = Vec::new();
        let mut workloads = Vec::new();
        let mut bodies = Vec::new();
        let mut sources = Vec::new();
        let mut consul_keys = Vec::new();
        for n in 0..scale.namespaces {
            let ns = format!("bench-{n:03}");
            let first = workloads.len();
            let w = |j: usize| first + j;
            for (kind, prefix) in [(SourceKind::ConfigMap, "cm"), (SourceKind::Secret, "sec")] {
                for j in 0..6 {
                    let dependents = match (kind, j) {
                        (SourceKind::ConfigMap, 5) => vec![w(0), w(1)],
                        (SourceKind::Secret, 5) => vec![w(3), w(4)],
                        _ => vec![w(j)],
                    };
                    sources.push(SourceObject {
                        kind,
                        namespace: n,
                        name: format!("{prefix}-{j}"),
                        dependents,
                    });
                }
            }
            for j in 0..WORKLOADS_PER_NAMESPACE {
                let global = first + j;
                let kind = KINDS[global % KINDS.len()];
                let name = format!("w-{j}");
                let mut annotations = serde_json::Map::new();
                let mut pod =
                    json!({ "containers": [{ "name": "app", "image": "registry.example/app:1" }] });
                let consul = j == 5 || j == 6 || (j == 7 && n % 2 == 0);
                match j {
                    0..=2 => {
                        annotations.insert("nudge.dev/auto".into(), json!("true"));
                        let mut volumes = vec![
                            json!({ "name": "cfg", "configMap": { "name": format!("cm-{j}") } }),
                        ];
                        let mut mounts = vec![json!({ "name": "cfg", "mountPath": "/etc/app" })];
                        if j < 2 {
                            volumes
                                .push(json!({ "name": "shared", "configMap": { "name": "cm-5" } }));
                            mounts.push(json!({ "name": "shared", "mountPath": "/etc/shared" }));
                        }
                        pod["volumes"] = json!(volumes);
                        pod["containers"][0]["volumeMounts"] = json!(mounts);
                        pod["containers"][0]["envFrom"] =
                            json!([{ "secretRef": { "name": format!("sec-{j}") } }]);
                    }
                    3 | 4 => {
                        annotations
                            .insert("nudge.dev/configmap-app".into(), json!(format!("cm-{j}")));
                        annotations.insert("nudge.dev/secret-db".into(), json!(format!("sec-{j}")));
                        annotations.insert("nudge.dev/secret-shared".into(), json!("sec-5"));
                    }
                    _ if consul => {
                        for k in 0..KEYS_PER_WORKLOAD {
                            let key = format!("bench/{ns}/{name}/k{k}");
                            annotations.insert(format!("nudge.dev/consul-k{k}"), json!(key));
                            consul_keys.push(key.clone());
                            sources.push(SourceObject {
                                kind: SourceKind::Consul,
                                namespace: n,
                                name: key,
                                dependents: vec![global],
                            });
                        }
                    }
                    _ => {}
                }
                let referencing = j < 5 || consul;
                bodies.push(workload_body(kind, &ns, &name, annotations, pod));
                workloads.push(WorkloadSpec {
                    kind,
                    path: workload_path(&ns, kind, &name),
                    referencing,
                });
            }
            namespaces.push(ns);
        }
        Self {
            namespaces,
            workloads,
            bodies,
            sources,
            consul_keys,
        }
    }

    /// [`Layout::Single`]: in `bench-000`, the Deployment `w-0` mounts `cm-0` under
    /// `nudge.dev/auto` and references one Consul key.
    fn single() -> Self {
        let ns = "bench-000".to_owned();
        let name = "w-0";
        let key = format!("bench/{ns}/{name}/k0");
        let mut annotations = serde_json::Map::new();
        annotations.insert("nudge.dev/auto".into(), json!("true"));
        annotations.insert("nudge.dev/consul-k0".into(), json!(key));
        let pod = json!({
            "containers": [{
                "name": "app", "image": "registry.example/app:1",
                "volumeMounts": [{ "name": "cfg", "mountPath": "/etc/app" }],
            }],
            "volumes": [{ "name": "cfg", "configMap": { "name": "cm-0" } }],
        });
        let kind = KINDS[0];
        Self {
            bodies: vec![workload_body(kind, &ns, name, annotations, pod)],
            workloads: vec![WorkloadSpec {
                kind,
                path: workload_path(&ns, kind, name),
                referencing: true,
            }],
            sources: vec![
                SourceObject {
                    kind: SourceKind::ConfigMap,
                    namespace: 0,
                    name: "cm-0".into(),
                    dependents: vec![0],
                },
                SourceObject {
                    kind: SourceKind::Consul,
                    namespace: 0,
                    name: key.clone(),
                    dependents: vec![0],
                },
            ],
            consul_keys: vec![key],
            namespaces: vec![ns],
        }
    }

    fn referencing(&self) -> usize {
        self.workloads.iter().filter(|w| w.referencing).count()
    }

    /// The changes to make: kinds rotate ConfigMap, Secret, Consul; namespaces
    /// rotate; no two changes share a dependent workload, so that every change is
    /// owed exactly one PATCH per dependent however fast or slow nudge is.
    fn plan_changes(&self, layout: Layout, count: usize, seed: u64) -> Vec<usize> {
        if layout == Layout::Single {
            // Each change waits for the previous one's PATCH: sources may repeat.
            return (0..count).map(|i| i % self.sources.len()).collect();
        }
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut by_ns_kind: HashMap<(usize, SourceKind), Vec<usize>> = HashMap::new();
        for (i, s) in self.sources.iter().enumerate() {
            by_ns_kind.entry((s.namespace, s.kind)).or_default().push(i);
        }
        let mut used: HashSet<usize> = HashSet::new();
        let mut plan = Vec::new();
        let kinds = [
            SourceKind::ConfigMap,
            SourceKind::Secret,
            SourceKind::Consul,
        ];
        let namespaces = self.namespaces.len();
        for i in 0..count {
            let mut chosen = None;
            'search: for kind_offset in 0..kinds.len() {
                let kind = kinds[(i + kind_offset) % kinds.len()];
                for ns_offset in 0..namespaces {
                    let ns = (i + ns_offset) % namespaces;
                    let Some(candidates) = by_ns_kind.get(&(ns, kind)) else {
                        continue;
                    };
                    let mut candidates = candidates.clone();
                    rng.shuffle(&mut candidates);
                    if let Some(&s) = candidates
                        .iter()
                        .find(|&&s| self.sources[s].dependents.iter().all(|d| !used.contains(d)))
                    {
                        chosen = Some(s);
                        break 'search;
                    }
                }
            }
            let Some(s) = chosen else { break };
            used.extend(self.sources[s].dependents.iter().copied());
            plan.push(s);
        }
        plan
    }
}

fn workload_body(
    kind: &str,
    ns: &str,
    name: &str,
    annotations: serde_json::Map<String, Value>,
    pod: Value,
) -> Value {
    let mut spec = json!({
        "selector": { "matchLabels": { "app": name } },
        "template": { "metadata": { "labels": { "app": name } }, "spec": pod },
    });
    if kind == "StatefulSet" {
        spec["serviceName"] = json!(name);
    }
    if kind != "DaemonSet" {
        spec["replicas"] = json!(2);
    }
    json!({
        "apiVersion": "apps/v1", "kind": kind,
        "metadata": { "name": name, "namespace": ns, "labels": { "app": name, "team": "bench" }, "annotations": annotations },
        "spec": spec,
    })
}

fn workload_path(ns: &str, kind: &str, name: &str) -> String {
    let plural = match kind {
        "Deployment" => "deployments",
        "StatefulSet" => "statefulsets",
        _ => "daemonsets",
    };
    format!("/apis/apps/v1/namespaces/{ns}/{plural}/{name}")
}

/// `len` bytes of printable text, like a config file's worth of entropy.
fn text(rng: &mut fastrand::Rng, len: usize) -> String {
    let mut s = String::with_capacity(len);
    while s.len() < len {
        let line = rng.usize(20..80).min(len - s.len());
        for _ in 0..line.saturating_sub(1) {
            s.push(rng.alphanumeric());
        }
        s.push('\n');
    }
    s
}

fn configmap_body(ns: &str, name: &str, data: (String, String)) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": name, "namespace": ns, "labels": { "team": "bench" } },
        "data": { "app.properties": data.0, "extra.conf": data.1 },
    })
}

fn secret_body(ns: &str, name: &str, data: (String, String)) -> Value {
    let b64 = base64::engine::general_purpose::STANDARD;
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": { "name": name, "namespace": ns, "labels": { "team": "bench" } },
        "data": { "credentials": b64.encode(data.0), "token": b64.encode(data.1) },
    })
}

/// Two values totalling between the scale's object sizes (base64 grows Secrets by
/// a third on the wire; the decoded size is what is drawn).
fn object_data(rng: &mut fastrand::Rng, (min, max): (usize, usize)) -> (String, String) {
    let total = rng.usize(min..=max);
    let first = total * 3 / 4;
    (text(rng, first), text(rng, total - first))
}

// ---------------------------------------------------------------- measuring nudge

/// `(VmRSS, VmHWM)` of `pid` in bytes.
fn memory(pid: u32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status"))?;
    let field = |name: &str| -> Result<u64> {
        let line = status
            .lines()
            .find(|l| l.starts_with(name))
            .with_context(|| format!("{name} missing from /proc/{pid}/status"))?;
        let kib: u64 = line
            .split_whitespace()
            .nth(1)
            .context("malformed /proc status line")?
            .parse()?;
        Ok(kib * 1024)
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// User + system CPU time of `pid`.
fn cpu_time(pid: u32, ticks_per_second: f64) -> Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("malformed /proc stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let utime: f64 = fields.get(11).context("no utime")?.parse()?;
    let stime: f64 = fields.get(12).context("no stime")?.parse()?;
    Ok(Duration::from_secs_f64((utime + stime) / ticks_per_second))
}

fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Socket inodes held by `pid`.
fn socket_inodes(pid: u32) -> HashSet<u64> {
    let mut inodes = HashSet::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return inodes;
    };
    for entry in dir.flatten() {
        if let Ok(target) = std::fs::read_link(entry.path())
            && let Some(inode) = target
                .to_str()
                .and_then(|t| t.strip_prefix("socket:["))
                .and_then(|t| t.strip_suffix(']'))
                .and_then(|t| t.parse().ok())
        {
            inodes.insert(inode);
        }
    }
    inodes
}

/// Established TCP connections from `pid` to `port`.
fn connections_of(pid: u32, port: u16) -> u64 {
    const ESTABLISHED: &str = "01";
    let inodes = socket_inodes(pid);
    let mut count = 0;
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(table) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in table.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(remote), Some(state), Some(inode)) =
                (fields.get(2), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let remote_port = remote
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if *state == ESTABLISHED
                && remote_port == Some(port)
                && inode.parse().is_ok_and(|i: u64| inodes.contains(&i))
            {
                count += 1;
            }
        }
    }
    count
}

/// Samples nudge's connections to Consul every 20 ms on a thread; keeps the peak.
struct ConnectionSampler {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ConnectionSampler {
    fn start(pid: u32, port: u16) -> Self {
        let peak = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (peak, stop) = (peak.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(connections_of(pid, port), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        Self {
            peak,
            stop,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> u64 {
        self.stop_thread();
        self.peak.load(Ordering::Relaxed)
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for ConnectionSampler {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

/// The `nudge run` process.
struct Nudge {
    child: tokio::process::Child,
    pid: u32,
    admin: u16,
    started: Instant,
}

impl Nudge {
    fn spawn(binary: &Path, env: &[(String, String)], log: &Path) -> Result<Self> {
        let admin = free_port()?;
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("open {}", log.display()))?;
        let started = Instant::now();
        let child = tokio::process::Command::new(binary)
            .arg("run")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("NUDGE_ADMIN__BIND", format!("127.0.0.1:{admin}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("run {}", binary.display()))?;
        let pid = child.id().context("nudge exited at once")?;
        Ok(Self {
            child,
            pid,
            admin,
            started,
        })
    }

    /// Polls `/ready` every 10 ms; the time from spawn to the first 200.
    async fn wait_ready(&mut self, http: &reqwest::Client, within: Duration) -> Result<Duration> {
        let url = format!("http://127.0.0.1:{}/ready", self.admin);
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("nudge exited before it was ready: {status}");
            }
            if let Ok(r) = http.get(&url).send().await
                && r.status().is_success()
            {
                return Ok(self.started.elapsed());
            }
            if Instant::now() > deadline {
                bail!("nudge not ready within {within:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn memory(&self) -> Result<(u64, u64)> {
        memory(self.pid)
    }

    /// Fails when nudge (or the wrapper given as `--nudge`) has exited.
    fn check_running(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            Some(status) => bail!("nudge exited during the run: {status}"),
            None => Ok(()),
        }
    }

    /// SIGTERM, then a clean exit within 10 s.
    async fn stop(mut self) -> Result<()> {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status();
        let status = tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .context("nudge did not exit within 10 s of SIGTERM")??;
        if !status.success() {
            bail!("nudge exited with {status}");
        }
        Ok(())
    }
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

// ---------------------------------------------------------------- the request log

/// A Kubernetes verb for a recorded request.
fn verb(r: &RecordedRequest) -> &'static str {
    let segments: Vec<&str> = r.path.trim_matches('/').split('/').collect();
    // Drop `api/v1` or `apis/<group>/<version>`.
    let rest: &[&str] = match segments.first() {
        Some(&"api") => segments.get(2..).unwrap_or(&[]),
        Some(&"apis") => segments.get(3..).unwrap_or(&[]),
        _ => &[],
    };
    let rest = match rest {
        ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let item = rest.len() >= 2;
    match r.method.as_str() {
        // `/apis/<group>/<version>`: API discovery (an absent CRD's kind is
        // looked up again now and then), not a list of objects.
        "GET" if rest.is_empty() => "DISCOVERY",
        "GET" if r.is_watch() => "WATCH",
        "GET" if item => "GET",
        "GET" => "LIST",
        "POST" => "CREATE",
        "PUT" => "UPDATE",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        _ => "OTHER",
    }
}

fn by_nudge(r: &RecordedRequest) -> bool {
    r.headers.get("user-agent").map(String::as_str) != Some(USER_AGENT)
}

/// A stamp: nudge's server-side apply (or JSON patch) of a workload. Its merge
/// patches record how a rollout ended (`nudge.dev/history`), counted apart.
fn is_stamp(r: &RecordedRequest) -> bool {
    r.method == "PATCH"
        && r.path.starts_with("/apis/apps/v1/")
        && r.query_param("fieldManager").as_deref() == Some(FIELD_MANAGER)
        && !is_history_write(r)
}

fn is_history_write(r: &RecordedRequest) -> bool {
    r.headers.get("content-type").map(String::as_str) == Some("application/merge-patch+json")
}

/// nudge's stamps (2xx PATCHes of workloads) received at or after `since`.
fn stamps_since(double: &ApiServerDouble, since: SystemTime) -> Vec<RecordedRequest> {
    double
        .requests()
        .into_iter()
        .filter(|r| r.received_at >= since && is_stamp(r) && (200..300).contains(&r.status))
        .collect()
}

/// Waits until `done(stamps so far)` holds, then until no stamp arrived for `quiet`;
/// at `within`, returns what arrived. Fails at once when nudge exits meanwhile.
async fn wait_for_stamps(
    double: &ApiServerDouble,
    nudge: &mut Nudge,
    since: SystemTime,
    within: Duration,
    quiet: Duration,
    done: impl Fn(&[RecordedRequest]) -> bool,
) -> Result<Vec<RecordedRequest>> {
    let deadline = Instant::now() + within;
    loop {
        nudge.check_running()?;
        let stamps = stamps_since(double, since);
        if done(&stamps) {
            break;
        }
        if Instant::now() > deadline {
            // The count checks report what is missing.
            return Ok(stamps);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut count = stamps_since(double, since).len();
    loop {
        tokio::time::sleep(quiet).await;
        let now = stamps_since(double, since).len();
        if now == count || Instant::now() > deadline {
            return Ok(stamps_since(double, since));
        }
        count = now;
    }
}

// ---------------------------------------------------------------- the run

/// The measured figures.
#[derive(Debug, Default)]
pub struct Report {
    pub json: Value,
    /// Failed count checks (CI fails on these).
    pub count_failures: Vec<String>,
    /// Missed performance targets (reported only).
    pub target_misses: Vec<String>,
    /// The table, as printed.
    pub table: String,
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn progress(options: &Options, started: Instant, message: &str) {
    if options.verbose {
        eprintln!("[{:7.1}s] {message}", started.elapsed().as_secs_f64());
    }
}

/// Runs the benchmark.
pub async fn run(options: Options) -> Result<Report> {
    let began = Instant::now();
    let scale = options.scale.clone();
    let target_dir = target_dir()?;
    let out = options
        .out
        .clone()
        .unwrap_or_else(|| target_dir.join(format!("loadtest-{}.json", scale.name)));
    let log = options
        .log
        .clone()
        .unwrap_or_else(|| out.with_extension("nudge.log"));
    let _ = std::fs::remove_file(&log);
    let binary = match &options.nudge {
        Some(path) => path.clone(),
        None => build_nudge(&target_dir)?,
    };
    progress(
        &options,
        began,
        &format!("nudge binary: {}", binary.display()),
    );

    // The cluster.
    let double = ApiServerDouble::start_with(apiserver_double::Config {
        max_recorded_requests: 10_000_000,
        record_bodies: false,
        ..apiserver_double::Config::default()
    })
    .await
    .context("start the API server double")?;
    let model = Model::build(&scale);
    let seeding = Instant::now();
    let mut rng = fastrand::Rng::with_seed(7);
    for ns in model
        .namespaces
        .iter()
        .map(String::as_str)
        .chain([NUDGE_NAMESPACE])
    {
        double.create(
            json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": ns } }),
        )?;
    }
    for ns in &model.namespaces {
        for i in 0..scale.configmaps_per_namespace {
            let data = object_data(&mut rng, scale.object_bytes);
            double.create(configmap_body(ns, &format!("cm-{i}"), data))?;
        }
        for i in 0..scale.secrets_per_namespace {
            let data = object_data(&mut rng, scale.object_bytes);
            double.create(secret_body(ns, &format!("sec-{i}"), data))?;
        }
    }
    for body in &model.bodies {
        double.create(body.clone())?;
    }
    let consul = tokio::task::block_in_place(ConsulAgent::start).context("start consul")?;
    let entries: Vec<(String, Vec<u8>)> = model
        .consul_keys
        .iter()
        .map(|k| {
            let len = rng.usize(100..=4096);
            (k.clone(), text(&mut rng, len).into_bytes())
        })
        .collect();
    consul.put_many(&entries).await.context("seed consul")?;
    let seeded_in = seeding.elapsed();
    progress(
        &options,
        began,
        &format!(
            "seeded {} ConfigMaps, {} Secrets, {} workloads, {} Consul keys in {seeded_in:.1?}",
            scale.namespaces * scale.configmaps_per_namespace,
            scale.namespaces * scale.secrets_per_namespace,
            model.workloads.len(),
            model.consul_keys.len()
        ),
    );

    let env: Vec<(String, String)> = [
        ("KUBECONFIG", double.kubeconfig_path().display().to_string()),
        ("NUDGE_KUBERNETES__NAMESPACE", NUDGE_NAMESPACE.into()),
        ("NUDGE_ENGINE__DEBOUNCE", "0s".into()),
        ("NUDGE_ENGINE__MAX_DELAY", "10s".into()),
        ("NUDGE_ENGINE__MIN_INTERVAL", "0s".into()),
        ("NUDGE_ENGINE__STAMPS_PER_SECOND", "1000".into()),
        ("NUDGE_ENGINE__BURST", "2000".into()),
        ("NUDGE_LEADER_ELECTION__ENABLED", "false".into()),
        ("NUDGE_SOURCES__CONSUL__ENABLED", "true".into()),
        ("NUDGE_SOURCES__CONSUL__ADDRESS", consul.addr()),
        ("NUDGE_LOG__FORMAT", "plain".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .chain(options.nudge_env.iter().cloned())
    .collect();
    let http = reqwest::Client::builder()
        .user_agent(USER_AGENT)
        .timeout(Duration::from_secs(10))
        .build()?;
    let ticks = clock_ticks();
    let referencing = model.referencing();
    let deadline_scale = Duration::from_secs(60 + scale.workloads() as u64 / 20);

    // Run 1: start, stamp everything, idle, changes.
    let t0 = SystemTime::now();
    let mut nudge = Nudge::spawn(&binary, &env, &log)?;
    let sampler = ConnectionSampler::start(nudge.pid, consul.http_port());
    let ready = nudge.wait_ready(&http, options.ready_within).await?;
    let (rss_ready, _) = nudge.memory()?;
    progress(&options, began, &format!("nudge ready in {ready:.2?}"));
    let initial = wait_for_stamps(
        &double,
        &mut nudge,
        t0,
        deadline_scale,
        Duration::from_secs(3),
        |s| s.iter().map(|r| &r.path).collect::<HashSet<_>>().len() >= referencing,
    )
    .await?;
    let initial_done = initial
        .iter()
        .map(|r| r.received_at)
        .max()
        .and_then(|t| t.duration_since(t0).ok())
        .unwrap_or_default();
    let initial_paths: HashSet<&String> = initial.iter().map(|r| &r.path).collect();
    let (rss_stamped, _) = nudge.memory()?;
    progress(
        &options,
        began,
        &format!(
            "initial stamps: {} PATCHes on {} workloads, last {initial_done:.2?} after start",
            initial.len(),
            initial_paths.len()
        ),
    );

    let cpu_before = cpu_time(nudge.pid, ticks)?;
    let idle_began = Instant::now();
    let mut idle_rss = Vec::new();
    while idle_began.elapsed() < scale.idle {
        tokio::time::sleep(Duration::from_secs(1).min(scale.idle)).await;
        idle_rss.push(nudge.memory()?.0);
    }
    let idle_elapsed = idle_began.elapsed();
    let idle_cpu = cpu_time(nudge.pid, ticks)?.saturating_sub(cpu_before);
    let (rss_steady, _) = nudge.memory()?;
    let idle_rss_max = idle_rss.iter().copied().max().unwrap_or(rss_steady);
    progress(
        &options,
        began,
        &format!(
            "idle {idle_elapsed:.1?}: {idle_cpu:.3?} CPU, RSS {:.1} MiB",
            mib(rss_steady)
        ),
    );

    // Changes.
    let plan = model.plan_changes(scale.layout, scale.changes, 11);
    let changes_began = SystemTime::now();
    let mut writes: Vec<(usize, SystemTime)> = Vec::with_capacity(plan.len());
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut tick = tokio::time::interval(scale.change_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for &s in &plan {
        tick.tick().await;
        let source = &model.sources[s];
        let ns = &model.namespaces[source.namespace];
        let data = object_data(&mut rng, scale.object_bytes);
        let (url, content_type, body) = match source.kind {
            SourceKind::ConfigMap => (
                format!("{}/api/v1/namespaces/{ns}/configmaps/{}", double.url(), source.name),
                "application/merge-patch+json",
                json!({ "data": { "app.properties": data.0, "extra.conf": data.1 } }).to_string(),
            ),
            SourceKind::Secret => (
                format!("{}/api/v1/namespaces/{ns}/secrets/{}", double.url(), source.name),
                "application/merge-patch+json",
                json!({ "data": { "credentials": b64.encode(data.0), "token": b64.encode(data.1) } })
                    .to_string(),
            ),
            SourceKind::Consul => {
                let len = rng.usize(100..=4096);
                (
                    format!("{}/v1/kv/{}", consul.addr(), source.name),
                    "application/octet-stream",
                    text(&mut rng, len),
                )
            }
        };
        let request = match source.kind {
            SourceKind::Consul => http.put(&url),
            _ => http.patch(&url).bearer_auth(double.token()),
        };
        let written_at = SystemTime::now();
        let response = request
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .with_context(|| format!("write {url}"))?;
        if !response.status().is_success() {
            bail!("write {url}: {}", response.status());
        }
        writes.push((s, written_at));
        if scale.layout == Layout::Single {
            // One dependent; the next change only once this one's PATCH is in.
            let path = &model.workloads[source.dependents[0]].path;
            let within = Instant::now() + Duration::from_secs(30);
            while !stamps_since(&double, written_at)
                .iter()
                .any(|r| &r.path == path)
                && Instant::now() < within
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
    let expected_total: usize = plan
        .iter()
        .map(|&s| model.sources[s].dependents.len())
        .sum();
    let change_stamps = wait_for_stamps(
        &double,
        &mut nudge,
        changes_began,
        Duration::from_secs(120),
        Duration::from_secs(3),
        |s| s.len() >= expected_total,
    )
    .await?;
    let changes_ended = SystemTime::now();
    let (rss_after_changes, peak_run1) = nudge.memory()?;
    progress(
        &options,
        began,
        &format!(
            "{} changes: {} PATCHes (expected {expected_total})",
            plan.len(),
            change_stamps.len()
        ),
    );

    // Latency: per dependent, its first PATCH after the write.
    let mut first_patch: HashMap<&str, Vec<SystemTime>> = HashMap::new();
    for r in &change_stamps {
        first_patch
            .entry(r.path.as_str())
            .or_default()
            .push(r.received_at);
    }
    let mut latencies: Vec<f64> = Vec::new();
    let mut by_source: BTreeMap<SourceKind, Vec<f64>> = BTreeMap::new();
    let mut missing = Vec::new();
    let mut expected_per_path: HashMap<&str, usize> = HashMap::new();
    for &(s, written_at) in &writes {
        let source = &model.sources[s];
        for &d in &source.dependents {
            let path = model.workloads[d].path.as_str();
            *expected_per_path.entry(path).or_default() += 1;
            let first = first_patch
                .get(path)
                .and_then(|ts| ts.iter().filter(|t| **t >= written_at).min());
            match first.and_then(|t| t.duration_since(written_at).ok()) {
                Some(latency) => {
                    latencies.push(ms(latency));
                    by_source.entry(source.kind).or_default().push(ms(latency));
                }
                None => missing.push(path.to_owned()),
            }
        }
    }
    latencies.sort_by(f64::total_cmp);
    for v in by_source.values_mut() {
        v.sort_by(f64::total_cmp);
    }
    let mut wrong_counts = Vec::new();
    let mut observed_per_path: HashMap<&str, usize> = HashMap::new();
    for r in &change_stamps {
        *observed_per_path.entry(r.path.as_str()).or_default() += 1;
    }
    for (path, &n) in &observed_per_path {
        let want = expected_per_path.get(path).copied().unwrap_or(0);
        if n != want {
            wrong_counts.push(format!("{path}: {n} PATCHes, expected {want}"));
        }
    }
    for (path, &want) in &expected_per_path {
        if !observed_per_path.contains_key(path) {
            wrong_counts.push(format!("{path}: 0 PATCHes, expected {want}"));
        }
    }
    wrong_counts.sort();

    // API requests per change, by verb (nudge's only).
    let mut verbs: BTreeMap<&'static str, usize> = BTreeMap::new();
    for verb_name in [
        "LIST", "GET", "WATCH", "PATCH", "CREATE", "UPDATE", "DELETE",
    ] {
        verbs.insert(verb_name, 0);
    }
    let mut detail: BTreeMap<String, usize> = BTreeMap::new();
    for r in double.requests() {
        if r.received_at >= changes_began && r.received_at <= changes_ended && by_nudge(&r) {
            *verbs.entry(verb(&r)).or_default() += 1;
            let v = verb(&r);
            let mut segments = r.path.rsplit('/');
            let resource = match v {
                "LIST" | "WATCH" | "CREATE" => segments.next(),
                _ => segments.nth(1),
            }
            .unwrap_or_default();
            *detail.entry(format!("{v} {resource}")).or_default() += 1;
        }
    }
    let changes_made = writes.len().max(1) as f64;
    let per_change: BTreeMap<&str, f64> = verbs
        .iter()
        .map(|(v, n)| (*v, *n as f64 / changes_made))
        .collect();
    nudge.stop().await?;
    let consul_peak_run1 = sampler.finish();

    // Run 2: a restart of an in-sync nudge patches nothing.
    let t1 = SystemTime::now();
    let mut nudge = Nudge::spawn(&binary, &env, &log)?;
    let sampler = ConnectionSampler::start(nudge.pid, consul.http_port());
    let ready_restart = nudge.wait_ready(&http, options.ready_within).await?;
    tokio::time::sleep(scale.restart_watch).await;
    let restart_patches = stamps_since(&double, t1).len();
    let (rss_restart_10k, peak_restart_10k) = nudge.memory()?;
    nudge.stop().await?;
    let consul_peak_run2 = sampler.finish();
    progress(
        &options,
        began,
        &format!(
            "restart: ready in {ready_restart:.2?}, {restart_patches} PATCHes, RSS {:.1} MiB",
            mib(rss_restart_10k)
        ),
    );

    // Run 3: more unreferenced Secrets; memory must not follow them.
    let secrets_before = scale.namespaces * scale.secrets_per_namespace;
    for ns in &model.namespaces {
        for i in 0..scale.extra_secrets_per_namespace {
            let data = object_data(&mut rng, scale.object_bytes);
            double.create(secret_body(ns, &format!("unref-{i}"), data))?;
        }
    }
    let secrets_after = secrets_before + scale.namespaces * scale.extra_secrets_per_namespace;
    let t2 = SystemTime::now();
    let mut nudge = Nudge::spawn(&binary, &env, &log)?;
    let ready_more = nudge.wait_ready(&http, options.ready_within).await?;
    tokio::time::sleep(scale.restart_watch).await;
    let more_patches = stamps_since(&double, t2).len();
    let (rss_restart_more, peak_restart_more) = nudge.memory()?;
    nudge.stop().await?;
    progress(
        &options,
        began,
        &format!(
            "{secrets_after} Secrets: ready in {ready_more:.2?}, {more_patches} PATCHes, RSS {:.1} MiB",
            mib(rss_restart_more)
        ),
    );
    let growth = rss_restart_more as i64 - rss_restart_10k as i64;

    // Checks and targets.
    let mut count_failures = Vec::new();
    if verbs["LIST"] != 0 {
        count_failures.push(format!(
            "{} LISTs during the changes (must be 0)",
            verbs["LIST"]
        ));
    }
    if initial_paths.len() != referencing {
        count_failures.push(format!(
            "initial stamps reached {} workloads, expected {referencing}",
            initial_paths.len()
        ));
    }
    if writes.len() != scale.changes {
        count_failures.push(format!(
            "only {} of {} changes could be planned",
            writes.len(),
            scale.changes
        ));
    }
    if change_stamps.len() != expected_total || !wrong_counts.is_empty() {
        count_failures.push(format!(
            "{} PATCHes for {} changes, expected {expected_total} (one per dependent); {}",
            change_stamps.len(),
            writes.len(),
            wrong_counts
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    if restart_patches != 0 {
        count_failures.push(format!(
            "{restart_patches} PATCHes after a restart (must be 0)"
        ));
    }
    if more_patches != 0 {
        count_failures.push(format!(
            "{more_patches} PATCHes after a restart with {secrets_after} Secrets (must be 0)"
        ));
    }

    let p = |v: f64| percentile(&latencies, v);
    let idle_cpu_percent = 100.0 * idle_cpu.as_secs_f64() / idle_elapsed.as_secs_f64();
    let growth_mib = growth as f64 / (1024.0 * 1024.0);
    let mut targets: Vec<(&str, f64, f64, &str)> = vec![
        (
            "RSS growth with the unreferenced Secrets (MiB)",
            growth_mib,
            10.0,
            "≤",
        ),
        ("idle CPU (% of a core)", idle_cpu_percent, 1.0, "≤"),
    ];
    if let Some(t) = scale.targets {
        targets.extend([
            ("steady RSS (MiB)", mib(rss_steady), t.steady_mib, "≤"),
            ("peak RSS (MiB)", mib(peak_run1), t.peak_mib, "≤"),
            (
                "start to ready (s)",
                ready.as_secs_f64(),
                t.ready_seconds,
                "≤",
            ),
            ("latency p99 (ms)", p(99.0), t.p99_ms, "≤"),
        ]);
    }
    let target_misses: Vec<String> = targets
        .iter()
        .filter(|(_, value, limit, _)| {
            !matches!(
                value.partial_cmp(limit),
                Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
            )
        })
        .map(|(name, value, limit, _)| format!("{name}: {value:.2} > {limit}"))
        .collect();

    let latency_json = |v: &[f64]| {
        json!({
            "count": v.len(),
            "p50": percentile(v, 50.0), "p95": percentile(v, 95.0), "p99": percentile(v, 99.0),
            "max": v.last().copied().unwrap_or(f64::NAN),
        })
    };
    let changes_by_source: serde_json::Map<String, Value> = [
        SourceKind::ConfigMap,
        SourceKind::Secret,
        SourceKind::Consul,
    ]
    .iter()
    .map(|k| {
        let n = writes
            .iter()
            .filter(|(s, _)| model.sources[*s].kind == *k)
            .count();
        (k.label().to_owned(), json!(n))
    })
    .collect();
    let json = json!({
        "scale": scale.name,
        "machine": machine(),
        "nudge_binary": binary.display().to_string(),
        "settings": {
            "engine.debounce": "0s", "engine.max_delay": "10s", "engine.min_interval": "0s",
            "engine.stamps_per_second": 1000, "engine.burst": 2000,
            "leader_election.enabled": false, "sources.consul": "defaults (wait 5m, max_concurrent_queries 64, min_query_interval 1s, query_burst 5)",
            "log": "info,consulrs=warn (plain, to a file)",
            "change_interval_ms": ms(scale.change_interval),
        },
        "cluster": {
            "namespaces": scale.namespaces,
            "configmaps": scale.namespaces * scale.configmaps_per_namespace,
            "secrets": secrets_before,
            "object_bytes": [scale.object_bytes.0, scale.object_bytes.1],
            "workloads": model.workloads.len(),
            "workloads_by_kind": KINDS.iter().map(|k| (k.to_string(), json!(model.workloads.iter().filter(|w| w.kind == *k).count()))).collect::<serde_json::Map<_, _>>(),
            "workloads_referencing_configmaps_secrets": model.workloads.iter().enumerate().filter(|(i, w)| w.referencing && i % WORKLOADS_PER_NAMESPACE < 5).count(),
            "workloads_referencing_consul": model.workloads.iter().enumerate().filter(|(i, w)| w.referencing && i % WORKLOADS_PER_NAMESPACE >= 5).count(),
            "referenced_configmaps_secrets": model.sources.iter().filter(|s| s.kind != SourceKind::Consul).count(),
            "consul_keys": model.consul_keys.len(),
            "seeded_seconds": seeded_in.as_secs_f64(),
        },
        "ready_seconds": ready.as_secs_f64(),
        "initial_stamps": { "patches": initial.len(), "workloads": initial_paths.len(), "last_after_start_seconds": initial_done.as_secs_f64() },
        "rss_mib": {
            "at_ready": mib(rss_ready),
            "after_initial_stamps": mib(rss_stamped),
            "steady_after_idle": mib(rss_steady),
            "idle_max": mib(idle_rss_max),
            "after_changes": mib(rss_after_changes),
            "peak": mib(peak_run1),
            "restart": { "secrets": secrets_before, "rss": mib(rss_restart_10k), "peak": mib(peak_restart_10k) },
            "restart_more_secrets": { "secrets": secrets_after, "rss": mib(rss_restart_more), "peak": mib(peak_restart_more) },
            "growth": growth as f64 / (1024.0 * 1024.0),
        },
        "idle": { "seconds": idle_elapsed.as_secs_f64(), "cpu_seconds": idle_cpu.as_secs_f64(), "cpu_percent_of_a_core": idle_cpu_percent },
        "changes": {
            "count": writes.len(),
            "by_source": changes_by_source,
            "dependent_workloads": expected_total,
            "patches": change_stamps.len(),
            "wrong_counts": wrong_counts,
            "missing": missing,
        },
        "latency_ms": latency_json(&latencies),
        "latency_ms_by_source": by_source.iter().map(|(k, v)| (k.label().to_string(), latency_json(v))).collect::<serde_json::Map<_, _>>(),
        "requests_per_change": per_change,
        "requests_during_changes": verbs,
        "requests_during_changes_detail": detail,
        "patches_per_change": change_stamps.len() as f64 / changes_made,
        "dependents_per_change": expected_total as f64 / changes_made,
        "restart": { "ready_seconds": ready_restart.as_secs_f64(), "watched_seconds": scale.restart_watch.as_secs_f64(), "patches": restart_patches },
        "restart_more_secrets": { "ready_seconds": ready_more.as_secs_f64(), "patches": more_patches },
        "consul_peak_connections": consul_peak_run1.max(consul_peak_run2),
        "count_failures": count_failures,
        "target_misses": target_misses,
        "targets": scale.targets.map(|t| json!({
            "steady_rss_mib": t.steady_mib, "peak_rss_mib": t.peak_mib,
            "ready_seconds": t.ready_seconds, "latency_p99_ms": t.p99_ms,
        })),
        "total_seconds": began.elapsed().as_secs_f64(),
    });

    // The table.
    let target = |f: fn(&Targets) -> String| scale.targets.as_ref().map(f).unwrap_or_default();
    let ready_target = target(|t| format!("≤ {} s", t.ready_seconds));
    let steady_target = target(|t| format!("≤ {} MiB", t.steady_mib));
    let peak_target = target(|t| format!("≤ {} MiB", t.peak_mib));
    let p99_target = target(|t| format!("p99 ≤ {} ms", t.p99_ms));
    let mut rows: Vec<(String, String, String)> = Vec::new();
    let mut row = |name: &str, value: String, target: &str| {
        rows.push((name.to_owned(), value, target.to_owned()))
    };
    row(
        "cluster",
        format!(
            "{} ns, {} ConfigMaps, {} Secrets, {} workloads ({} referencing), {} Consul keys",
            scale.namespaces,
            scale.namespaces * scale.configmaps_per_namespace,
            secrets_before,
            model.workloads.len(),
            referencing,
            model.consul_keys.len()
        ),
        "",
    );
    row(
        "start to ready",
        format!("{:.2} s", ready.as_secs_f64()),
        &ready_target,
    );
    row(
        "initial stamps",
        format!(
            "{} PATCHes, done {:.2} s after start",
            initial.len(),
            initial_done.as_secs_f64()
        ),
        "one per referencing workload",
    );
    row(
        "RSS at ready / after initial stamps",
        format!("{:.1} / {:.1} MiB", mib(rss_ready), mib(rss_stamped)),
        "",
    );
    row(
        "steady RSS (after idle)",
        format!("{:.1} MiB", mib(rss_steady)),
        &steady_target,
    );
    row(
        "peak RSS (VmHWM, run 1)",
        format!("{:.1} MiB", mib(peak_run1)),
        &peak_target,
    );
    row(
        "idle CPU",
        format!(
            "{:.3} s over {:.0} s = {idle_cpu_percent:.2}% of a core",
            idle_cpu.as_secs_f64(),
            idle_elapsed.as_secs_f64()
        ),
        "≤ 1%",
    );
    row(
        "change→PATCH latency p50/p95/p99/max",
        format!(
            "{:.1} / {:.1} / {:.1} / {:.1} ms (n={})",
            p(50.0),
            p(95.0),
            p(99.0),
            latencies.last().copied().unwrap_or(f64::NAN),
            latencies.len()
        ),
        &p99_target,
    );
    for (kind, v) in &by_source {
        row(
            &format!("  {} p50/p95/p99", kind.label()),
            format!(
                "{:.1} / {:.1} / {:.1} ms (n={})",
                percentile(v, 50.0),
                percentile(v, 95.0),
                percentile(v, 99.0),
                v.len()
            ),
            "",
        );
    }
    row(
        "API requests per change",
        format!(
            "LIST {:.2}, {}",
            per_change["LIST"],
            detail
                .iter()
                .map(|(v, n)| format!("{v} {:.2}", *n as f64 / changes_made))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        "LIST = 0",
    );
    row(
        "PATCHes per change",
        format!(
            "{:.3} ({} for {} changes; dependents {expected_total})",
            change_stamps.len() as f64 / changes_made,
            change_stamps.len(),
            writes.len()
        ),
        "= dependents",
    );
    row(
        "PATCHes after restart",
        format!(
            "{restart_patches} (ready in {:.2} s)",
            ready_restart.as_secs_f64()
        ),
        "0",
    );
    row(
        &format!("RSS at {secrets_before} vs {secrets_after} Secrets"),
        format!(
            "{:.1} → {:.1} MiB ({:+.1} MiB; PATCHes {more_patches})",
            mib(rss_restart_10k),
            mib(rss_restart_more),
            growth as f64 / (1024.0 * 1024.0)
        ),
        "growth ≤ 10 MiB",
    );
    row(
        "peak connections to Consul",
        format!("{}", consul_peak_run1.max(consul_peak_run2)),
        "",
    );
    let width = rows.iter().map(|r| r.0.chars().count()).max().unwrap_or(0);
    let vwidth = rows.iter().map(|r| r.1.chars().count()).max().unwrap_or(0);
    let mut table = format!("nudge load test, scale {}\n", scale.name);
    for (name, value, target) in &rows {
        let pad = width - name.chars().count();
        let vpad = vwidth - value.chars().count();
        table.push_str(&format!(
            "{name}{}  {value}{}  {target}\n",
            " ".repeat(pad),
            " ".repeat(vpad)
        ));
    }
    for failure in &count_failures {
        table.push_str(&format!("COUNT CHECK FAILED: {failure}\n"));
    }
    for miss in &target_misses {
        table.push_str(&format!("target missed: {miss}\n"));
    }

    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&out, serde_json::to_vec_pretty(&json)?)
        .with_context(|| format!("write {}", out.display()))?;
    table.push_str(&format!(
        "JSON: {}\nnudge log: {}\n",
        out.display(),
        log.display()
    ));
    let plot = out.with_file_name("loadtest-scales.svg");
    match write_plot(out.parent().unwrap_or(Path::new(".")), &plot) {
        Ok(()) => table.push_str(&format!("plot: {}\n", plot.display())),
        Err(error) => table.push_str(&format!("no plot: {error:#}\n")),
    }
    drop(consul);
    double.shutdown().await;
    Ok(Report {
        json,
        count_failures,
        target_misses,
        table,
    })
}

// ---------------------------------------------------------------- the plot

/// One line of a plot panel: label, colour, (workloads, value) points, dashed.
type Series<'a> = (&'a str, &'a str, Vec<(f64, f64)>, bool);

/// The scales the plot shows, in order.
const PLOTTED: [&str; 3] = ["small", "large", "xl"];

/// Writes `svg`: steady and peak RSS, and change→PATCH p99, against scale, from the
/// `loadtest-<scale>.json` files in `dir` (those present), with the targets.
fn write_plot(dir: &Path, svg: &Path) -> Result<()> {
    struct Point {
        scale: &'static str,
        workloads: f64,
        steady: f64,
        peak: f64,
        p99: f64,
        targets: Option<(f64, f64, f64)>,
    }
    let mut points = Vec::new();
    for scale in PLOTTED {
        let Ok(text) = std::fs::read_to_string(dir.join(format!("loadtest-{scale}.json"))) else {
            continue;
        };
        let v: Value = serde_json::from_str(&text)?;
        let f = |p: &str| v.pointer(p).and_then(Value::as_f64).unwrap_or(f64::NAN);
        points.push(Point {
            scale,
            workloads: f("/cluster/workloads"),
            steady: f("/rss_mib/steady_after_idle"),
            peak: f("/rss_mib/peak"),
            p99: f("/latency_ms/p99"),
            targets: v.get("targets").filter(|t| t.is_object()).map(|_| {
                (
                    f("/targets/steady_rss_mib"),
                    f("/targets/peak_rss_mib"),
                    f("/targets/latency_p99_ms"),
                )
            }),
        });
    }
    if points.is_empty() {
        bail!("no loadtest-{{small,large,xl}}.json in {}", dir.display());
    }
    // Two panels, x = workloads on a log scale (1 … 20,000).
    let (w, h, pad) = (360.0, 260.0, 50.0);
    let x_of = |workloads: f64| pad + (workloads.max(1.0).log10() / 4.5) * (w - 1.5 * pad);
    let mut body = String::new();
    let mut panel = |dx: f64, title: &str, unit: &str, series: &[Series]| {
        let max = series
            .iter()
            .flat_map(|(_, _, v, _)| v.iter().map(|p| p.1))
            .filter(|v| v.is_finite())
            .fold(1.0_f64, f64::max)
            * 1.15;
        let y_of = |v: f64| h - pad - (v / max) * (h - 2.0 * pad);
        body.push_str(&format!(
            "<g transform=\"translate({dx},0)\">\n<text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-weight=\"bold\">{title}</text>\n",
            w / 2.0
        ));
        body.push_str(&format!(
            "<line x1=\"{pad}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"black\"/><line x1=\"{pad}\" y1=\"{pad}\" x2=\"{pad}\" y2=\"{0}\" stroke=\"black\"/>\n",
            h - pad,
            w - pad / 2.0
        ));
        for i in 0..=4 {
            let v = max * f64::from(i) / 4.0;
            body.push_str(&format!(
                "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"10\">{v:.0}</text>\n",
                pad - 4.0,
                y_of(v) + 3.0
            ));
        }
        body.push_str(&format!(
            "<text x=\"12\" y=\"{0}\" font-size=\"10\" transform=\"rotate(-90 12 {0})\" text-anchor=\"middle\">{unit}</text>\n",
            h / 2.0
        ));
        for p in &points {
            body.push_str(&format!(
                "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\">{} ({})</text>\n",
                x_of(p.workloads),
                h - pad + 14.0,
                p.scale,
                p.workloads
            ));
        }
        for (i, (name, color, values, dashed)) in series.iter().enumerate() {
            let path: Vec<String> = values
                .iter()
                .filter(|(_, v)| v.is_finite())
                .map(|(x, v)| format!("{:.1},{:.1}", x_of(*x), y_of(*v)))
                .collect();
            let dash = if *dashed {
                " stroke-dasharray=\"4 3\""
            } else {
                ""
            };
            body.push_str(&format!(
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"{dash}/>\n",
                path.join(" ")
            ));
            if !dashed {
                for p in &path {
                    let (x, y) = p.split_once(',').unwrap_or_default();
                    body.push_str(&format!(
                        "<circle cx=\"{x}\" cy=\"{y}\" r=\"3\" fill=\"{color}\"/>\n"
                    ));
                }
            }
            body.push_str(&format!(
                "<text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"{color}\">{name}</text>\n",
                pad + 8.0,
                pad - 8.0 + 12.0 * i as f64
            ));
        }
        body.push_str("</g>\n");
    };
    let series = |f: fn(&Point) -> f64| -> Vec<(f64, f64)> {
        points.iter().map(|p| (p.workloads, f(p))).collect()
    };
    let target_series = |f: fn(&(f64, f64, f64)) -> f64| -> Vec<(f64, f64)> {
        points
            .iter()
            .filter_map(|p| p.targets.as_ref().map(|t| (p.workloads, f(t))))
            .collect()
    };
    panel(
        0.0,
        "RSS against scale",
        "MiB",
        &[
            ("steady RSS", "#1f77b4", series(|p| p.steady), false),
            ("peak RSS", "#d62728", series(|p| p.peak), false),
            ("steady target", "#1f77b4", target_series(|t| t.0), true),
            ("peak target", "#d62728", target_series(|t| t.1), true),
        ],
    );
    panel(
        w,
        "change → PATCH p99 against scale",
        "ms",
        &[
            ("p99", "#2ca02c", series(|p| p.p99), false),
            ("target", "#2ca02c", target_series(|t| t.2), true),
        ],
    );
    let svg_text = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n{body}<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\">workloads (log scale); dashed: the issue's targets</text>\n</svg>\n",
        2.0 * w,
        w,
        h - 8.0
    );
    std::fs::write(svg, svg_text).with_context(|| format!("write {}", svg.display()))
}

fn machine() -> Value {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let meminfo = read("/proc/meminfo");
    let mem_kib: u64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let cpu_model = read("/proc/cpuinfo")
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_default();
    let os = read("/etc/os-release")
        .lines()
        .find(|l| l.starts_with("PRETTY_NAME="))
        .map(|l| {
            l.trim_start_matches("PRETTY_NAME=")
                .trim_matches('"')
                .to_owned()
        })
        .unwrap_or_default();
    json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu_model": cpu_model,
        "memory_gib": mem_kib as f64 / (1024.0 * 1024.0),
        "os": os,
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
    })
}

/// `<target>` from this executable's path (`<target>/<profile>/examples/loadtest`,
/// or `<target>/<profile>/deps/<test>` when run as a test).
fn target_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    exe.parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .map(Path::to_owned)
        .context("cannot locate the target directory from the executable path")
}

/// Builds the `nudge` binary with this example's profile (a no-op when it is up to
/// date) and returns its path.
fn build_nudge(target: &Path) -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .context("cannot locate the profile directory")?;
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev".to_owned(),
        Some(other) => other.to_owned(),
        None => bail!("cannot tell the build profile"),
    };
    let status = std::process::Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--bin", "nudge", "--profile", &profile])
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", target)
        .status()
        .context("run cargo build for the nudge binary")?;
    if !status.success() {
        bail!("cargo build --bin nudge failed: {status}");
    }
    Ok(profile_dir.join("nudge"))
}

fn parse_args() -> Result<Options> {
    let mut options = Options {
        scale: Scale::large(),
        nudge: None,
        out: None,
        log: None,
        verbose: true,
        nudge_env: Vec::new(),
        ready_within: Duration::from_secs(120),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--scale" => {
                let name = value()?;
                options.scale = Scale::named(&name)
                    .with_context(|| format!("unknown scale {name:?} (ci, small, large or xl)"))?;
            }
            "--nudge" => options.nudge = Some(value()?.into()),
            "--out" => options.out = Some(value()?.into()),
            "--log" => options.log = Some(value()?.into()),
            "--quiet" => options.verbose = false,
            "--ready-within" => {
                let seconds = value()?;
                let seconds: u64 = seconds
                    .parse()
                    .with_context(|| format!("--ready-within {seconds:?}: expected seconds"))?;
                options.ready_within = Duration::from_secs(seconds);
            }
            "--plot-only" => {
                // Redraws the plot from the JSON files of earlier runs.
                let dir = target_dir()?;
                let svg = dir.join("loadtest-scales.svg");
                write_plot(&dir, &svg)?;
                println!("plot: {}", svg.display());
                std::process::exit(0);
            }
            "--nudge-env" => {
                let pair = value()?;
                let (k, v) = pair
                    .split_once('=')
                    .with_context(|| format!("--nudge-env {pair:?}: expected NAME=VALUE"))?;
                options.nudge_env.push((k.to_owned(), v.to_owned()));
            }
            "-h" | "--help" => {
                println!(
                    "usage: loadtest [--scale ci|small|large|xl] [--nudge PATH] [--out PATH] [--log PATH] [--nudge-env NAME=VALUE]... [--ready-within SECONDS] [--quiet] [--plot-only]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    Ok(options)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let report = match parse_args() {
        Ok(options) => run(options).await,
        Err(error) => Err(error),
    };
    match report {
        Ok(report) => {
            print!("{}", report.table);
            if report.count_failures.is_empty() {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            }
        }
        Err(error) => {
            eprintln!("loadtest: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
