//! What a run's measurements mean: the count checks, the missed targets,
//! change→PATCH latencies split between nudge and the double or the Consul
//! agent, the double's service times, what the agent did.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, SystemTime};

use super::consul_proxy::Exchange;
use super::double::Request;
use super::measure::Measured;
use super::model::SourceKind;
use super::requests::{USER_AGENT, by_nudge, verb, verb_and_resource};
use super::stats::{Summary, mib, ms, percentile};

/// Change→PATCH latencies of one source kind, each split in two: the part of
/// the double (the write until it was answered, and its service of nudge's
/// requests on the dependent in between) or of the Consul agent (the write until
/// the answer of the blocking query that carried it was handed to nudge, and its
/// service of the reads that narrowed that query down to the change), and the
/// rest, nudge's.
#[derive(Debug, Default)]
pub struct Split {
    pub total: Vec<f64>,
    pub other: Vec<f64>,
    pub nudge: Vec<f64>,
    /// Latencies whose answer from the agent was not found.
    pub unmatched: usize,
    /// Body sizes of the agent's answers that carried a change (the blocking
    /// answer and the reads narrowing it, summed).
    pub answer_bytes: Vec<f64>,
}

/// The latencies of the changes, per source kind.
pub struct Latencies {
    pub all: Summary,
    pub by_kind: BTreeMap<SourceKind, Split>,
    pub missing: Vec<String>,
    pub expected_per_path: HashMap<String, usize>,
}

/// The logs a change's latency is read from, indexed.
struct Evidence<'a> {
    /// nudge's stamps during the changes, per workload path.
    stamps: HashMap<&'a str, Vec<SystemTime>>,
    /// nudge's other requests (not watches) during the changes, per path.
    nudge: HashMap<&'a str, Vec<&'a Request>>,
    /// The benchmark's writes as the double logged them, per path.
    writes: HashMap<&'a str, Vec<&'a Request>>,
    /// The agent's complete answers, by when their head came.
    answers: Vec<&'a Exchange>,
}

impl<'a> Evidence<'a> {
    fn new(m: &'a Measured) -> Self {
        let mut evidence = Self {
            stamps: HashMap::new(),
            nudge: HashMap::new(),
            writes: HashMap::new(),
            answers: m
                .exchanges
                .iter()
                .filter(|e| e.status == 200 && e.head_at.is_some() && e.done_at.is_some())
                .collect(),
        };
        evidence.answers.sort_by_key(|e| e.head_at);
        for r in &m.change_stamps {
            evidence
                .stamps
                .entry(&r.path)
                .or_default()
                .push(r.received_at);
        }
        let during =
            |r: &&Request| r.received_at >= m.changes_began && r.received_at <= m.changes_ended;
        for r in m.requests.iter().filter(during) {
            if r.user_agent.as_deref() == Some(USER_AGENT) {
                evidence.writes.entry(&r.path).or_default().push(r);
            } else if !r.is_watch() {
                evidence.nudge.entry(&r.path).or_default().push(r);
            }
        }
        evidence
    }

    /// When the first stamp of `workload` at or after `t` arrived.
    fn stamp_after(&self, workload: &str, t: SystemTime) -> Option<SystemTime> {
        let stamps = self.stamps.get(workload)?;
        stamps.iter().filter(|s| **s >= t).min().copied()
    }

    /// The double's part of a change written to `source` at `written` until the
    /// stamp of `workload`: the write until the double answered it, and its
    /// service of nudge's requests on the workload in between.
    fn double_part(
        &self,
        source: &str,
        workload: &str,
        written: SystemTime,
        stamp: SystemTime,
    ) -> Option<Duration> {
        let write = self
            .writes
            .get(source)?
            .iter()
            .find(|r| r.received_at >= written)?;
        let in_between: Duration = self
            .nudge
            .get(workload)
            .into_iter()
            .flatten()
            .filter(|r| r.received_at >= written && r.received_at < stamp)
            .map(|r| r.service)
            .sum();
        Some(write.answered_at().duration_since(written).ok()? + in_between)
    }

    /// The agent's part of a change of `key` written at `written`: from the
    /// write (or from when nudge asked, if later) until its answer to the first
    /// query covering the key that was answered after the write was handed on
    /// to nudge, plus the time it spent on the reads nudge then sent under that
    /// query's prefix before the stamp (the probes and reads that narrow a
    /// prefix query down to what changed; overlapping reads counted once); with
    /// the bytes of those answers.
    fn agent_part(
        &self,
        key: &str,
        written: SystemTime,
        stamp: SystemTime,
    ) -> Option<(Duration, u64)> {
        let answer = self.answers.iter().find(|e| {
            e.head_at.is_some_and(|head| head > written)
                && e.covers(key)
                && e.done_at.is_some_and(|done| done <= stamp)
        })?;
        let woke = answer.done_at?;
        let under = answer.kv_path()?;
        let follow_ups: Vec<&Exchange> = self
            .answers
            .iter()
            .copied()
            .filter(|e| {
                !e.is_blocking()
                    && e.sent_at >= woke
                    && e.done_at.is_some_and(|done| done <= stamp)
                    && e.kv_path().is_some_and(|path| path.starts_with(under))
            })
            .collect();
        let mut spans: Vec<(SystemTime, SystemTime)> =
            std::iter::once((answer.sent_at.max(written), woke))
                .chain(
                    follow_ups
                        .iter()
                        .filter_map(|e| Some((e.sent_at, e.done_at?))),
                )
                .collect();
        spans.sort();
        let mut busy = Duration::ZERO;
        let mut covered_to = SystemTime::UNIX_EPOCH;
        for (from, to) in spans {
            let from = from.max(covered_to);
            if to > from {
                busy += to.duration_since(from).ok()?;
                covered_to = to;
            }
        }
        let bytes = answer.body_bytes + follow_ups.iter().map(|e| e.body_bytes).sum::<u64>();
        Some((busy, bytes))
    }
}

fn latencies(m: &Measured) -> Latencies {
    let evidence = Evidence::new(m);
    let mut all = Vec::new();
    let mut by_kind: BTreeMap<SourceKind, Split> = BTreeMap::new();
    let mut missing = Vec::new();
    let mut expected_per_path: HashMap<String, usize> = HashMap::new();
    for w in &m.writes {
        let source = &m.model.sources[w.source];
        let source_path = m.model.source_path(w.source);
        for &d in &source.dependents {
            let workload = m.model.workloads[d].path.as_str();
            *expected_per_path.entry(workload.to_owned()).or_default() += 1;
            let Some(stamp) = evidence.stamp_after(workload, w.written_at) else {
                missing.push(workload.to_owned());
                continue;
            };
            let total = stamp.duration_since(w.written_at).unwrap_or_default();
            all.push(ms(total));
            let split = by_kind.entry(source.kind).or_default();
            split.total.push(ms(total));
            let other =
                match source.kind {
                    SourceKind::Consul => evidence
                        .agent_part(&source.name, w.written_at, stamp)
                        .map(|(part, bytes)| {
                            split.answer_bytes.push(bytes as f64);
                            part
                        }),
                    SourceKind::ConfigMap | SourceKind::Secret => {
                        evidence.double_part(&source_path, workload, w.written_at, stamp)
                    }
                };
            match other.filter(|o| *o <= total) {
                Some(other) => {
                    split.other.push(ms(other));
                    split.nudge.push(ms(total - other));
                }
                None => split.unmatched += 1,
            }
        }
    }
    Latencies {
        all: Summary::new(all),
        by_kind,
        missing,
        expected_per_path,
    }
}

/// The double's service times of nudge's requests over the whole run, per
/// `VERB resource`, in ms.
fn service_times(requests: &[Request]) -> BTreeMap<String, Summary> {
    let mut by: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in requests.iter().filter(|r| by_nudge(r)) {
        by.entry(verb_and_resource(r))
            .or_default()
            .push(ms(r.service));
    }
    by.into_iter().map(|(k, v)| (k, Summary::new(v))).collect()
}

/// What the Consul agent did for nudge, from the proxy's log.
pub struct Agent {
    /// Reads without `index=` (start-up, checks): response time, ms.
    pub reads: Summary,
    /// Blocking queries nudge sent, those the agent answered (to the last
    /// byte), and those nudge gave up before (when it stopped).
    pub blocking_sent: usize,
    pub blocking_answered: usize,
    pub blocking_abandoned: usize,
    /// Blocking queries answered during the Consul change phase.
    pub answered_during_changes: usize,
    /// Requests the agent closed or reset instead of answering (its connection
    /// limit), by the phase they were sent in (phases with none left out).
    pub failed_by_phase: Vec<(String, usize)>,
}

impl Agent {
    /// Requests the agent failed, in every phase.
    pub fn failed(&self) -> usize {
        self.failed_by_phase.iter().map(|(_, n)| n).sum()
    }
}

fn agent(m: &Measured) -> Agent {
    let reads = m
        .exchanges
        .iter()
        .filter(|e| !e.is_blocking())
        .filter_map(|e| e.done_at?.duration_since(e.sent_at).ok())
        .map(ms)
        .collect();
    let blocking = || m.exchanges.iter().filter(|e| e.is_blocking());
    let consul_phase = m
        .change_phases
        .iter()
        .find(|(kind, _)| *kind == SourceKind::Consul);
    Agent {
        reads: Summary::new(reads),
        blocking_sent: blocking().count(),
        blocking_answered: blocking().filter(|e| e.done_at.is_some()).count(),
        blocking_abandoned: blocking()
            .filter(|e| e.done_at.is_none() && !e.agent_failed)
            .count(),
        answered_during_changes: consul_phase.map_or(0, |(_, phase)| {
            blocking()
                .filter_map(|e| e.head_at)
                .filter(|head| phase.contains_time(*head))
                .count()
        }),
        failed_by_phase: failed_by_phase(m),
    }
}

/// Requests the agent failed, by the phase they were sent in; those outside
/// every phase (between phases) under "between phases".
fn failed_by_phase(m: &Measured) -> Vec<(String, usize)> {
    let mut by: Vec<(String, usize)> = Vec::new();
    for exchange in m.exchanges.iter().filter(|e| e.agent_failed) {
        let name = m
            .phases
            .iter()
            .find(|p| p.contains_time(exchange.sent_at))
            .map_or("between phases", |p| p.name.as_str());
        match by.iter_mut().find(|(n, _)| n == name) {
            Some((_, count)) => *count += 1,
            None => by.push((name.to_owned(), 1)),
        }
    }
    by
}

/// The count checks: no LIST during the changes, every referencing workload
/// stamped at start, exactly one PATCH per dependent per change, none after a
/// restart.
fn count_failures(
    m: &Measured,
    lists: usize,
    initial_workloads: usize,
    wrong_counts: &[String],
    expected_total: usize,
) -> Vec<String> {
    let mut failures = Vec::new();
    if lists != 0 {
        failures.push(format!("{lists} LISTs during the changes (must be 0)"));
    }
    let referencing = m.model.referencing();
    if initial_workloads != referencing {
        failures.push(format!(
            "initial stamps reached {initial_workloads} workloads, expected {referencing}"
        ));
    }
    if m.writes.len() != m.scale.changes {
        failures.push(format!(
            "only {} of {} changes could be planned",
            m.writes.len(),
            m.scale.changes
        ));
    }
    if m.change_stamps.len() != expected_total || !wrong_counts.is_empty() {
        failures.push(format!(
            "{} PATCHes for {} changes, expected {expected_total} (one per dependent); {}",
            m.change_stamps.len(),
            m.writes.len(),
            wrong_counts
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    for restart in [&m.restart, &m.restart_more] {
        if restart.patches != 0 {
            failures.push(format!(
                "{} PATCHes after a restart with {} Secrets (must be 0)",
                restart.patches, restart.secrets
            ));
        }
    }
    failures
}

/// Everything derived from a run's measurements.
pub struct Analysis<'a> {
    pub m: &'a Measured,
    pub lat: Latencies,
    /// Dependents whose number of PATCHes was not the number of their changes.
    pub wrong_counts: Vec<String>,
    /// PATCHes the changes owe: one per dependent per change.
    pub expected_total: usize,
    /// nudge's requests during the changes, by verb and by `VERB resource`.
    pub verbs: BTreeMap<&'static str, usize>,
    pub detail: BTreeMap<String, usize>,
    pub initial_workloads: usize,
    pub count_failures: Vec<String>,
    pub target_misses: Vec<String>,
    pub idle_cpu_percent: f64,
    pub growth_mib: f64,
    pub services: BTreeMap<String, Summary>,
    pub agent: Agent,
}

impl<'a> Analysis<'a> {
    pub fn new(m: &'a Measured) -> Self {
        let lat = latencies(m);
        let wrong_counts = wrong_counts(m, &lat);
        let expected_total = m
            .writes
            .iter()
            .map(|w| m.model.sources[w.source].dependents.len())
            .sum();
        let mut verbs: BTreeMap<&'static str, usize> = [
            "LIST", "GET", "WATCH", "PATCH", "CREATE", "UPDATE", "DELETE",
        ]
        .into_iter()
        .map(|v| (v, 0))
        .collect();
        let mut detail: BTreeMap<String, usize> = BTreeMap::new();
        let during = |r: &&Request| {
            r.received_at >= m.changes_began && r.received_at <= m.changes_ended && by_nudge(r)
        };
        for r in m.requests.iter().filter(during) {
            *verbs.entry(verb(r)).or_default() += 1;
            *detail.entry(verb_and_resource(r)).or_default() += 1;
        }
        let initial_workloads = m
            .initial
            .iter()
            .map(|r| &r.path)
            .collect::<HashSet<_>>()
            .len();
        let count_failures = count_failures(
            m,
            verbs["LIST"],
            initial_workloads,
            &wrong_counts,
            expected_total,
        );
        let idle_cpu_percent =
            100.0 * m.idle.nudge_cpu().as_secs_f64() / m.idle.wall().as_secs_f64();
        let growth = m.restart_more.memory.rss as i64 - m.restart.memory.rss as i64;
        let mut analysis = Self {
            m,
            target_misses: Vec::new(),
            growth_mib: growth as f64 / (1024.0 * 1024.0),
            lat,
            wrong_counts,
            expected_total,
            verbs,
            detail,
            initial_workloads,
            count_failures,
            idle_cpu_percent,
            services: service_times(&m.requests),
            agent: agent(m),
        };
        analysis.target_misses = analysis.target_misses();
        analysis
    }

    pub fn changes_made(&self) -> f64 {
        self.m.writes.len().max(1) as f64
    }

    pub fn per_change(&self) -> BTreeMap<&'static str, f64> {
        self.verbs
            .iter()
            .map(|(v, n)| (*v, *n as f64 / self.changes_made()))
            .collect()
    }

    /// The scale's targets that were missed (reported, never enforced).
    fn target_misses(&self) -> Vec<String> {
        let m = self.m;
        let mut targets: Vec<(&str, f64, f64)> = vec![
            (
                "RSS growth with the unreferenced Secrets (MiB)",
                self.growth_mib,
                10.0,
            ),
            ("idle CPU (% of a core)", self.idle_cpu_percent, 1.0),
        ];
        if let Some(t) = m.scale.targets {
            targets.extend([
                ("steady RSS (MiB)", mib(m.rss_steady), t.steady_mib),
                ("peak RSS (MiB)", mib(m.peak_run1), t.peak_mib),
                ("start to ready (s)", m.ready.as_secs_f64(), t.ready_seconds),
                ("latency p99 (ms)", self.lat.all.p(99.0), t.p99_ms),
            ]);
        }
        targets
            .iter()
            .filter(|(_, value, limit)| !matches!(value.partial_cmp(limit), Some(o) if o.is_le()))
            .map(|(name, value, limit)| format!("{name}: {value:.2} > {limit}"))
            .collect()
    }

    /// The proxy's round trips at percentile `q`: direct, proxied, and the
    /// difference, µs.
    pub fn overhead_at(&self, q: f64) -> (f64, f64, f64) {
        let overhead = &self.m.proxy_overhead;
        let direct = percentile(&overhead.direct_us, q);
        let proxied = percentile(&overhead.proxied_us, q);
        (direct, proxied, proxied - direct)
    }
}

/// Dependents whose PATCHes during the changes were not one per change.
fn wrong_counts(m: &Measured, lat: &Latencies) -> Vec<String> {
    let mut observed: HashMap<&str, usize> = HashMap::new();
    for r in &m.change_stamps {
        *observed.entry(r.path.as_str()).or_default() += 1;
    }
    let mut wrong = Vec::new();
    for (path, &n) in &observed {
        let want = lat.expected_per_path.get(*path).copied().unwrap_or(0);
        if n != want {
            wrong.push(format!("{path}: {n} PATCHes, expected {want}"));
        }
    }
    for (path, &want) in &lat.expected_per_path {
        if !observed.contains_key(path.as_str()) {
            wrong.push(format!("{path}: 0 PATCHes, expected {want}"));
        }
    }
    wrong.sort();
    wrong
}
