//! The measuring run: the cluster is seeded, nudge is started, stamps everything, waits
//! for the rollouts it started to settle, idles,
//! follows changes of each source kind, and is restarted twice; every phase is
//! measured as it happens and analysed afterwards (`report`).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, Result, bail};

use super::consul_proxy::{self, ConsulProxy, Overhead};
use super::consul_support::ConsulAgent;
use super::double::{Double, Request};
use super::model::{Model, NUDGE_NAMESPACE, SourceKind};
use super::nudge::Nudge;
use super::phases::{Mark, Meter, Phase};
use super::procfs::{clock_ticks, cpu_time};
use super::requests::{USER_AGENT, stamps_since, wait_for_stamps};
use super::scale::{Layout, Scale};
use super::stats::mib;
use super::{Options, binaries};

/// Round trips each way when measuring the Consul proxy's overhead.
const OVERHEAD_SAMPLES: usize = 200;

/// One change the benchmark made.
#[derive(Debug, Clone, Copy)]
pub struct Write {
    /// Index into [`Model::sources`].
    pub source: usize,
    /// When the benchmark sent it.
    pub written_at: SystemTime,
}

/// Memory of one process at a moment, bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    pub rss: u64,
    pub peak: u64,
}

/// A restart of nudge: its start-up, then a watch for PATCHes.
#[derive(Debug, Clone)]
pub struct Restart {
    pub secrets: usize,
    pub ready: Duration,
    pub patches: usize,
    pub memory: Memory,
}

/// Everything a run measured, for the report.
pub struct Measured {
    pub scale: Scale,
    pub model: Model,
    pub nudge_binary: PathBuf,
    pub double_binary: PathBuf,
    pub out: PathBuf,
    pub log: PathBuf,
    pub double_log: PathBuf,
    /// Seeding: the objects through the double's bulk endpoint, then Consul.
    pub seeded_objects: u64,
    pub seeded_kubernetes: Duration,
    /// From the end of seeding until the double's controllers were done with
    /// the seeded workloads, and the double's CPU time in it.
    pub double_settled: Duration,
    pub double_settle_cpu: Duration,
    pub seeded_consul: Duration,
    pub seeded_unreferenced: Duration,
    pub double_after_seeding: Memory,
    pub double_at_end: Memory,
    pub cpu_resolution: Duration,
    pub ready: Duration,
    pub initial: Vec<Request>,
    pub initial_done: Duration,
    pub rss_ready: u64,
    pub rss_stamped: u64,
    pub rss_steady: u64,
    pub idle_rss_max: u64,
    pub rss_after_changes: u64,
    pub peak_run1: u64,
    pub idle: Phase,
    pub phases: Vec<Phase>,
    /// The change phases by kind (also in `phases`).
    pub change_phases: Vec<(SourceKind, Phase)>,
    pub writes: Vec<Write>,
    /// nudge's stamps during the changes.
    pub change_stamps: Vec<Request>,
    pub changes_began: SystemTime,
    pub changes_ended: SystemTime,
    pub restart: Restart,
    pub restart_more: Restart,
    pub consul_peak: u64,
    pub proxy_overhead: Overhead,
    pub exchanges: Vec<consul_proxy::Exchange>,
    /// The double's whole request log (nudge's and the benchmark's).
    pub requests: Vec<Request>,
    pub total: Duration,
}

fn progress(options: &Options, started: Instant, message: &str) {
    if options.verbose {
        eprintln!("[{:7.1}s] {message}", started.elapsed().as_secs_f64());
    }
}

/// Where a run writes: the JSON, nudge's and the double's logs, the double's
/// kubeconfig.
struct Paths {
    out: PathBuf,
    log: PathBuf,
    double_log: PathBuf,
    work: PathBuf,
}

impl Paths {
    fn new(options: &Options, target: &Path) -> Self {
        let out = options
            .out
            .clone()
            .unwrap_or_else(|| target.join(format!("loadtest-{}.json", options.scale.name)));
        let log = options
            .log
            .clone()
            .unwrap_or_else(|| out.with_extension("nudge.log"));
        Self {
            double_log: out.with_extension("double.log"),
            work: std::env::temp_dir().join(format!("nudge-loadtest-{}", std::process::id())),
            out,
            log,
        }
    }
}

/// Runs the benchmark and returns what it measured.
pub async fn run(options: &Options) -> Result<Measured> {
    let began = Instant::now();
    let target = binaries::target_dir()?;
    let paths = Paths::new(options, &target);
    if let Some(parent) = paths.out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let _ = std::fs::remove_file(&paths.log);
    let nudge_binary = match &options.nudge {
        Some(path) => path.clone(),
        None => binaries::build(&target, env!("CARGO_PKG_NAME"), "nudge")?,
    };
    let double_binary = match &options.double {
        Some(path) => path.clone(),
        None => binaries::build(&target, "apiserver-double", "apiserver-double")?,
    };
    progress(
        options,
        began,
        &format!(
            "nudge: {}; double: {}",
            nudge_binary.display(),
            double_binary.display()
        ),
    );
    let double = Double::start(&double_binary, &paths.work, &paths.double_log)
        .await
        .context("start the API server double")?;
    let result = async {
        let (bench, mut rng) = Bench::prepare(options, began, &paths, double, nudge_binary).await?;
        bench.measure(&mut rng, double_binary).await
    }
    .await;
    let _ = std::fs::remove_dir_all(&paths.work);
    result
}

/// How seeding went.
struct Seeding {
    objects: u64,
    kubernetes: Duration,
    /// Until the double's controllers were done with the seeded workloads, and
    /// the CPU time that took the double.
    settled: Duration,
    settle_cpu: Duration,
    consul: Duration,
    double_after: Memory,
}

/// A seeded cluster, Consul behind the proxy, and the means to measure nudge
/// against them.
struct Bench<'a> {
    options: &'a Options,
    scale: &'a Scale,
    began: Instant,
    paths: &'a Paths,
    model: Model,
    seeding: Seeding,
    double: Double,
    consul: ConsulAgent,
    proxy: ConsulProxy,
    proxy_overhead: Overhead,
    nudge_binary: PathBuf,
    env: Vec<(String, String)>,
    http: reqwest::Client,
    meter: Meter,
}

/// A nudge just started and ready.
struct Started {
    nudge: Nudge,
    start: Mark,
    ready: Duration,
    ready_mark: Mark,
}

/// What nudge's first run did after its initial stamps.
struct Changes {
    writes: Vec<Write>,
    phases: Vec<(SourceKind, Phase)>,
    began: SystemTime,
    ended: SystemTime,
    stamps: Vec<Request>,
}

impl<'a> Bench<'a> {
    /// Seeds the double and Consul, starts the proxy and measures its overhead.
    async fn prepare(
        options: &'a Options,
        began: Instant,
        paths: &'a Paths,
        double: Double,
        nudge_binary: PathBuf,
    ) -> Result<(Self, fastrand::Rng)> {
        let scale = &options.scale;
        let model = Model::build(scale);
        let mut rng = fastrand::Rng::with_seed(7);
        let seeding = Instant::now();
        let objects = double
            .create_all(model.cluster_objects(scale, &mut rng))
            .await
            .context("seed the double")?;
        let kubernetes = seeding.elapsed();
        let ticks = clock_ticks();
        let cpu_before = cpu_time(double.pid, ticks)?;
        let settled = double.settle().await?;
        let settle_cpu = cpu_time(double.pid, ticks)?.saturating_sub(cpu_before);
        let (rss, peak) = double.memory()?;
        let seeding = Instant::now();
        let consul = tokio::task::block_in_place(ConsulAgent::start).context("start consul")?;
        consul
            .put_many(&model.consul_entries(&mut rng))
            .await
            .context("seed consul")?;
        let seeding = Seeding {
            objects,
            kubernetes,
            settled,
            settle_cpu,
            consul: seeding.elapsed(),
            double_after: Memory { rss, peak },
        };
        let agent = format!("127.0.0.1:{}", consul.http_port());
        let proxy = ConsulProxy::start(agent.parse().context("the agent's address")?).await?;
        let probe_key = model.consul_keys.first().context("no Consul key")?;
        let proxy_overhead =
            consul_proxy::overhead(&consul.addr(), &proxy.addr(), probe_key, OVERHEAD_SAMPLES)
                .await
                .context("measure the Consul proxy's overhead")?;
        proxy.wait_closed().await;
        proxy.clear();
        let bench = Self {
            env: nudge_env(options, &double, &proxy),
            http: reqwest::Client::builder()
                .user_agent(USER_AGENT)
                .timeout(Duration::from_secs(10))
                .build()?,
            meter: Meter::new(double.pid, consul.pid()),
            options,
            scale,
            began,
            paths,
            model,
            seeding,
            double,
            consul,
            proxy,
            proxy_overhead,
            nudge_binary,
        };
        bench.progress(&format!(
            "seeded {} objects ({} ConfigMaps, {} Secrets, {} workloads) in {:.1?}, the double's controllers done {:.1?} later ({:.1?} CPU), double RSS {:.0} MiB; {} Consul keys in {:.1?}",
            bench.seeding.objects,
            scale.namespaces * scale.configmaps_per_namespace,
            scale.namespaces * scale.secrets_per_namespace,
            bench.model.workloads.len(),
            bench.seeding.kubernetes,
            bench.seeding.settled,
            bench.seeding.settle_cpu,
            mib(rss),
            bench.model.consul_keys.len(),
            bench.seeding.consul,
        ));
        Ok((bench, rng))
    }

    fn progress(&self, message: &str) {
        progress(self.options, self.began, message);
    }

    /// Run 1 (start, initial stamps, idle, changes), then run 2 (a restart of
    /// an in-sync nudge patches nothing), then run 3 (with more unreferenced
    /// Secrets, memory must not follow them).
    async fn measure(self, rng: &mut fastrand::Rng, double_binary: PathBuf) -> Result<Measured> {
        let mut phases = Vec::new();
        let Started {
            mut nudge,
            start,
            ready,
            ready_mark,
        } = self.start_nudge(&mut phases, "start").await?;
        let (rss_ready, _) = nudge.memory()?;
        self.progress(&format!("nudge ready in {ready:.2?}"));
        let initial = self.initial_stamps(&mut nudge, start.wall).await?;
        phases.push(Phase::new(
            "initial stamps",
            ready_mark,
            self.meter.mark(Some(nudge.pid))?,
        ));
        let initial_done = initial
            .iter()
            .map(|r| r.received_at)
            .max()
            .and_then(|t| t.duration_since(start.wall).ok())
            .unwrap_or_default();
        let (rss_stamped, _) = nudge.memory()?;
        phases.push(self.settle_rollouts(&nudge).await?);
        let (idle, idle_rss_max) = self.idle(&nudge).await?;
        phases.push(idle.clone());
        let (rss_steady, _) = nudge.memory()?;
        let changes = self.changes(&mut nudge, rng).await?;
        phases.extend(changes.phases.iter().map(|(_, phase)| phase.clone()));
        let (rss_after_changes, peak_run1) = nudge.memory()?;
        nudge.stop().await?;
        let consul_peak_run1 = self.proxy.take_peak_connections();

        let secrets_before = self.scale.namespaces * self.scale.secrets_per_namespace;
        let (restart, consul_peak_run2) =
            self.restart(&mut phases, "restart", secrets_before).await?;
        let seeding = Instant::now();
        self.double
            .create_all(self.model.unreferenced_secrets(self.scale, rng))
            .await
            .context("seed the unreferenced Secrets")?;
        self.double.settle().await?;
        let seeded_unreferenced = seeding.elapsed();
        let secrets_after =
            secrets_before + self.scale.namespaces * self.scale.extra_secrets_per_namespace;
        let name = format!("restart at {secrets_after} Secrets");
        let (restart_more, _) = self.restart(&mut phases, &name, secrets_after).await?;

        self.double.sync().await?;
        let requests = self.double.requests(|_| true);
        let (rss, peak) = self.double.memory()?;
        let exchanges = self.proxy.exchanges();
        self.double.stop().await?;
        drop(self.consul);
        Ok(Measured {
            scale: self.scale.clone(),
            model: self.model,
            nudge_binary: self.nudge_binary,
            double_binary,
            out: self.paths.out.clone(),
            log: self.paths.log.clone(),
            double_log: self.paths.double_log.clone(),
            seeded_objects: self.seeding.objects,
            seeded_kubernetes: self.seeding.kubernetes,
            double_settled: self.seeding.settled,
            double_settle_cpu: self.seeding.settle_cpu,
            seeded_consul: self.seeding.consul,
            seeded_unreferenced,
            double_after_seeding: self.seeding.double_after,
            double_at_end: Memory { rss, peak },
            cpu_resolution: self.meter.resolution(),
            ready,
            initial,
            initial_done,
            rss_ready,
            rss_stamped,
            rss_steady,
            idle_rss_max,
            rss_after_changes,
            peak_run1,
            idle,
            phases,
            change_phases: changes.phases,
            writes: changes.writes,
            change_stamps: changes.stamps,
            changes_began: changes.began,
            changes_ended: changes.ended,
            restart,
            restart_more,
            consul_peak: consul_peak_run1.max(consul_peak_run2),
            proxy_overhead: self.proxy_overhead,
            exchanges,
            requests,
            total: self.began.elapsed(),
        })
    }

    /// Starts nudge and waits until it is ready; adds the phase `<name> → ready`.
    async fn start_nudge(&self, phases: &mut Vec<Phase>, name: &str) -> Result<Started> {
        let start = self.meter.mark(None)?;
        let mut nudge = Nudge::spawn(&self.nudge_binary, &self.env, &self.paths.log)?;
        self.proxy.take_peak_connections();
        let ready = nudge
            .wait_ready(&self.http, self.options.ready_within)
            .await?;
        let ready_mark = self.meter.mark(Some(nudge.pid))?;
        phases.push(Phase::new(format!("{name} → ready"), start, ready_mark));
        Ok(Started {
            nudge,
            start,
            ready,
            ready_mark,
        })
    }

    /// Waits for a stamp of every referencing workload (and then for quiet).
    async fn initial_stamps(&self, nudge: &mut Nudge, since: SystemTime) -> Result<Vec<Request>> {
        let referencing = self.model.referencing();
        let within = Duration::from_secs(60 + self.scale.workloads() as u64 / 20);
        let initial = wait_for_stamps(&self.double, nudge, since, within, self.scale.quiet, |s| {
            s.iter().map(|r| &r.path).collect::<HashSet<_>>().len() >= referencing
        })
        .await?;
        let workloads = initial.iter().map(|r| &r.path).collect::<HashSet<_>>();
        self.progress(&format!(
            "initial stamps: {} PATCHes on {} workloads",
            initial.len(),
            workloads.len()
        ));
        Ok(initial)
    }

    /// Waits until the cluster is quiet after the initial stamps: the double's
    /// controllers have rolled what they can of the stamped workloads, and
    /// nudge has recorded the outcomes of the rollouts that ended. The phase is
    /// reported, so that what following costs while rollouts move is seen; the
    /// idle phase after it is what following costs while nothing changes.
    async fn settle_rollouts(&self, nudge: &Nudge) -> Result<Phase> {
        let from = self.meter.mark(Some(nudge.pid))?;
        self.double.settle().await?;
        let settled = Phase::new(
            "initial rollouts settle",
            from,
            self.meter.mark(Some(nudge.pid))?,
        );
        self.progress(&format!(
            "initial rollouts settled in {:.1?}: {:.2?} CPU",
            settled.wall(),
            settled.nudge_cpu()
        ));
        Ok(settled)
    }

    /// Leaves nudge alone for the scale's idle time, reading its RSS every
    /// second; returns the phase and the largest RSS read.
    async fn idle(&self, nudge: &Nudge) -> Result<(Phase, u64)> {
        let from = self.meter.mark(Some(nudge.pid))?;
        let mut rss_max = 0;
        while from.at.elapsed() < self.scale.idle {
            tokio::time::sleep(Duration::from_secs(1).min(self.scale.idle)).await;
            rss_max = rss_max.max(nudge.memory()?.0);
        }
        let idle = Phase::new(
            format!("idle {:.0} s", self.scale.idle.as_secs_f64()),
            from,
            self.meter.mark(Some(nudge.pid))?,
        );
        self.progress(&format!(
            "idle {:.1?}: {:.2?} CPU",
            idle.wall(),
            idle.nudge_cpu()
        ));
        Ok((idle, rss_max))
    }

    /// The changes, one phase per source kind. Each kind keeps the cadence it
    /// had when the kinds took turns (one change per `change_interval`, kinds
    /// in rotation): nudge paces its Consul queries (`min_query_interval`), and
    /// a key group changed faster than that would measure the pacing.
    async fn changes(&self, nudge: &mut Nudge, rng: &mut fastrand::Rng) -> Result<Changes> {
        let plan = self
            .model
            .plan_changes(self.scale.layout, self.scale.changes, 11);
        let planned = self.model.change_phases(&plan);
        let cadence = self.scale.change_interval * planned.len().max(1) as u32;
        let writer = Writer {
            http: &self.http,
            double: &self.double,
            consul_addr: self.consul.addr(),
            model: &self.model,
            scale: self.scale,
        };
        let began = SystemTime::now();
        let mut writes = Vec::with_capacity(plan.len());
        let mut phases = Vec::new();
        for (kind, changes) in planned {
            let from = self.meter.mark(Some(nudge.pid))?;
            let made = writer
                .make(&changes, cadence, rng)
                .await
                .with_context(|| format!("{} changes", kind.title()))?;
            let expected: usize = changes
                .iter()
                .map(|&s| self.model.sources[s].dependents.len())
                .sum();
            let within = Duration::from_secs(120);
            let stamps = wait_for_stamps(
                &self.double,
                nudge,
                from.wall,
                within,
                self.scale.quiet,
                |s| s.len() >= expected,
            )
            .await?;
            let phase = Phase::new(
                format!("{} changes ({})", kind.title(), changes.len()),
                from,
                self.meter.mark(Some(nudge.pid))?,
            );
            self.progress(&format!(
                "{}: {} PATCHes (expected {expected}), nudge CPU {:.2?}",
                phase.name,
                stamps.len(),
                phase.nudge_cpu()
            ));
            writes.extend(made);
            phases.push((kind, phase));
        }
        let ended = SystemTime::now();
        self.double.sync().await?;
        Ok(Changes {
            writes,
            phases,
            began,
            ended,
            stamps: stamps_since(&self.double, began),
        })
    }

    /// Starts nudge again, watches it for the scale's `restart_watch` after it
    /// is ready, and stops it; adds its two phases. Returns the restart and the
    /// peak of nudge's connections to Consul.
    async fn restart(
        &self,
        phases: &mut Vec<Phase>,
        name: &str,
        secrets: usize,
    ) -> Result<(Restart, u64)> {
        let Started {
            mut nudge,
            start,
            ready,
            ready_mark,
        } = self.start_nudge(phases, name).await?;
        tokio::time::sleep(self.scale.restart_watch).await;
        nudge.check_running()?;
        let watched = self.meter.mark(Some(nudge.pid))?;
        phases.push(Phase::new(
            format!(
                "{name}, watched {:.0} s",
                self.scale.restart_watch.as_secs_f64()
            ),
            ready_mark,
            watched,
        ));
        self.double.sync().await?;
        let patches = stamps_since(&self.double, start.wall).len();
        let (rss, peak) = nudge.memory()?;
        nudge.stop().await?;
        let restart = Restart {
            secrets,
            ready,
            patches,
            memory: Memory { rss, peak },
        };
        self.progress(&format!(
            "{name}: ready in {ready:.2?}, {patches} PATCHes, RSS {:.1} MiB",
            mib(rss)
        ));
        Ok((restart, self.proxy.take_peak_connections()))
    }
}

/// nudge's environment: the double's kubeconfig, Consul through the proxy, and
/// the benchmark's settings (README, "Settings").
fn nudge_env(options: &Options, double: &Double, proxy: &ConsulProxy) -> Vec<(String, String)> {
    [
        ("KUBECONFIG", double.kubeconfig().display().to_string()),
        ("NUDGE_KUBERNETES__NAMESPACE", NUDGE_NAMESPACE.into()),
        ("NUDGE_ENGINE__DEBOUNCE", "0s".into()),
        ("NUDGE_ENGINE__MAX_DELAY", "10s".into()),
        ("NUDGE_ENGINE__MIN_INTERVAL", "0s".into()),
        ("NUDGE_ENGINE__STAMPS_PER_SECOND", "1000".into()),
        ("NUDGE_ENGINE__BURST", "2000".into()),
        ("NUDGE_LEADER_ELECTION__ENABLED", "false".into()),
        ("NUDGE_SOURCES__CONSUL__ENABLED", "true".into()),
        ("NUDGE_SOURCES__CONSUL__ADDRESS", proxy.addr()),
        ("NUDGE_LOG__FORMAT", "plain".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .chain(options.nudge_env.iter().cloned())
    .collect()
}

/// Makes changes: merge patches of ConfigMaps and Secrets on the double, PUTs
/// of keys straight to the agent (not through the proxy, whose log is nudge's).
struct Writer<'a> {
    http: &'a reqwest::Client,
    double: &'a Double,
    consul_addr: String,
    model: &'a Model,
    scale: &'a Scale,
}

impl Writer<'_> {
    /// Makes `changes` one every `cadence`; in [`Layout::Single`] each also
    /// once the previous one's PATCH arrived.
    async fn make(
        &self,
        changes: &[usize],
        cadence: Duration,
        rng: &mut fastrand::Rng,
    ) -> Result<Vec<Write>> {
        let mut tick = tokio::time::interval(cadence);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut writes = Vec::with_capacity(changes.len());
        for &s in changes {
            tick.tick().await;
            let written_at = self.write(s, rng).await?;
            writes.push(Write {
                source: s,
                written_at,
            });
            if self.scale.layout == Layout::Single {
                self.wait_for_patch(s, written_at).await?;
            }
        }
        Ok(writes)
    }

    /// Changes `source`; returns when the write was sent.
    async fn write(&self, source: usize, rng: &mut fastrand::Rng) -> Result<SystemTime> {
        let (path, content_type, body) = self.model.change(source, rng, self.scale.object_bytes);
        let request = match self.model.sources[source].kind {
            SourceKind::Consul => self.http.put(format!("{}{path}", self.consul_addr)),
            _ => self
                .http
                .patch(format!("{}{path}", self.double.url()))
                .bearer_auth(self.double.token()),
        };
        let written_at = SystemTime::now();
        let response = request
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .with_context(|| format!("write {path}"))?;
        if !response.status().is_success() {
            bail!("write {path}: {}", response.status());
        }
        Ok(written_at)
    }

    /// Waits (up to 30 s) for the PATCH of `source`'s one dependent.
    async fn wait_for_patch(&self, source: usize, written_at: SystemTime) -> Result<()> {
        let path = &self.model.workloads[self.model.sources[source].dependents[0]].path;
        let within = Instant::now() + Duration::from_secs(30);
        while !stamps_since(self.double, written_at)
            .iter()
            .any(|r| &r.path == path)
            && Instant::now() < within
        {
            self.double.check_following()?;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }
}
