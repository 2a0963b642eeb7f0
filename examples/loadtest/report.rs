//! The report of a run: its analysis printed as tables and written as JSON,
//! and the plot redrawn.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result};
use serde_json::{Value, json};

use super::analysis::{Analysis, Split};
use super::measure::Measured;
use super::model::{KINDS, SourceKind, WORKLOADS_PER_NAMESPACE};
use super::plot::write_plot;
use super::scale::Targets;
use super::stats::{Summary, mib, ms};

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
/// Aligns rows into columns two spaces apart.
fn columns(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..rows.iter().map(Vec::len).max().unwrap_or(0))
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if c + 1 < row.len() {
                line.push_str(&" ".repeat(widths[c] - cell.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn seconds(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
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

impl Analysis<'_> {
    fn json(&self) -> Value {
        let m = self.m;
        let (scale, model) = (&m.scale, &m.model);
        let secrets_before = m.restart.secrets;
        let secrets_after = m.restart_more.secrets;
        let workloads_by_kind: serde_json::Map<String, Value> = KINDS
            .iter()
            .map(|k| {
                (
                    k.to_string(),
                    json!(model.workloads.iter().filter(|w| w.kind == *k).count()),
                )
            })
            .collect();
        let referencing_in_roles = |roles: std::ops::Range<usize>| {
            model
                .workloads
                .iter()
                .enumerate()
                .filter(|(i, w)| w.referencing && roles.contains(&(i % WORKLOADS_PER_NAMESPACE)))
                .count()
        };
        let changes_by_source: serde_json::Map<String, Value> = SourceKind::ALL
            .iter()
            .map(|k| {
                let n = m
                    .writes
                    .iter()
                    .filter(|w| model.sources[w.source].kind == *k)
                    .count();
                (k.label().to_owned(), json!(n))
            })
            .collect();
        let (d50, p50, o50) = self.overhead_at(50.0);
        let (d99, p99, _) = self.overhead_at(99.0);
        json!({
            "scale": scale.name,
            "machine": machine(),
            "nudge_binary": m.nudge_binary.display().to_string(),
            "double_binary": m.double_binary.display().to_string(),
            "settings": {
                "engine.debounce": "0s", "engine.max_delay": "10s", "engine.min_interval": "0s",
                "engine.stamps_per_second": 1000, "engine.burst": 2000,
                "leader_election.enabled": false,
                "sources.consul": "defaults (wait 5m, max_concurrent_queries 64, min_query_interval 1s, query_burst 5), through the benchmark's proxy",
                "log": "info,consulrs=warn (plain, to a file)",
                "change_interval_ms": ms(scale.change_interval),
                "double": "apiserver-double as its own process, its defaults (controller latency 5 ms)",
            },
            "cluster": {
                "namespaces": scale.namespaces,
                "configmaps": scale.namespaces * scale.configmaps_per_namespace,
                "secrets": secrets_before,
                "object_bytes": [scale.object_bytes.0, scale.object_bytes.1],
                "workloads": model.workloads.len(),
                "workloads_by_kind": workloads_by_kind,
                "workloads_referencing_configmaps_secrets": referencing_in_roles(0..5),
                "workloads_referencing_consul": referencing_in_roles(5..WORKLOADS_PER_NAMESPACE),
                "referenced_configmaps_secrets": model.sources.iter().filter(|s| s.kind != SourceKind::Consul).count(),
                "consul_keys": model.consul_keys.len(),
                "seeded_seconds": (m.seeded_kubernetes + m.seeded_consul).as_secs_f64(),
            },
            "seeding": {
                "api_objects": m.seeded_objects,
                "api_objects_seconds": m.seeded_kubernetes.as_secs_f64(),
                "double_settled_seconds": m.double_settled.as_secs_f64(),
                "double_settle_cpu_seconds": m.double_settle_cpu.as_secs_f64(),
                "consul_keys_seconds": m.seeded_consul.as_secs_f64(),
                "unreferenced_secrets": secrets_after - secrets_before,
                "unreferenced_secrets_seconds": m.seeded_unreferenced.as_secs_f64(),
            },
            "double_rss_mib": {
                "after_seeding": mib(m.double_after_seeding.rss),
                "at_end": mib(m.double_at_end.rss),
                "peak": mib(m.double_at_end.peak),
            },
            "ready_seconds": m.ready.as_secs_f64(),
            "initial_stamps": {
                "patches": m.initial.len(),
                "workloads": self.initial_workloads,
                "last_after_start_seconds": m.initial_done.as_secs_f64(),
            },
            "rss_mib": {
                "at_ready": mib(m.rss_ready),
                "after_initial_stamps": mib(m.rss_stamped),
                "steady_after_idle": mib(m.rss_steady),
                "idle_max": mib(m.idle_rss_max),
                "after_changes": mib(m.rss_after_changes),
                "peak": mib(m.peak_run1),
                "restart": { "secrets": secrets_before, "rss": mib(m.restart.memory.rss), "peak": mib(m.restart.memory.peak) },
                "restart_more_secrets": { "secrets": secrets_after, "rss": mib(m.restart_more.memory.rss), "peak": mib(m.restart_more.memory.peak) },
                "growth": self.growth_mib,
            },
            "idle": {
                "seconds": m.idle.wall().as_secs_f64(),
                "cpu_seconds": m.idle.nudge_cpu().as_secs_f64(),
                "cpu_percent_of_a_core": self.idle_cpu_percent,
            },
            "cpu_resolution_seconds": m.cpu_resolution.as_secs_f64(),
            "phases": m.phases.iter().map(|phase| phase.json(&m.requests)).collect::<Vec<_>>(),
            "changes": {
                "count": m.writes.len(),
                "by_source": changes_by_source,
                "dependent_workloads": self.expected_total,
                "patches": m.change_stamps.len(),
                "wrong_counts": self.wrong_counts,
                "missing": self.lat.missing,
            },
            "latency_ms": self.lat.all.json(),
            "latency_ms_by_source": self.lat.by_kind.iter().map(|(k, s)| (k.label().to_owned(), Summary::new(s.total.clone()).json())).collect::<serde_json::Map<_, _>>(),
            "latency_split_ms": self.lat.by_kind.iter().map(|(k, s)| (k.label().to_owned(), s.json(*k))).collect::<serde_json::Map<_, _>>(),
            "double_service_ms": self.services.iter().map(|(k, s)| (k.clone(), json!({
                "count": s.len(), "p50": s.p(50.0), "p99": s.p(99.0), "max": s.max(), "total": s.total(),
            }))).collect::<serde_json::Map<_, _>>(),
            "consul_agent": {
                "proxy_overhead_us": {
                    "samples": m.proxy_overhead.samples,
                    "direct_p50": d50, "proxied_p50": p50, "added_p50": o50,
                    "direct_p99": d99, "proxied_p99": p99,
                },
                "reads_without_index_ms": self.agent.reads.json(),
                "blocking_queries_sent": self.agent.blocking_sent,
                "blocking_queries_answered": self.agent.blocking_answered,
                "blocking_queries_abandoned": self.agent.blocking_abandoned,
                "answered_during_consul_changes": self.agent.answered_during_changes,
                "requests_failed_by_agent": self.agent.failed(),
                "requests_failed_by_agent_by_phase": self.agent.failed_by_phase.iter()
                    .map(|(phase, n)| (phase.clone(), json!(n)))
                    .collect::<serde_json::Map<_, _>>(),
            },
            "requests_per_change": self.per_change(),
            "requests_during_changes": self.verbs,
            "requests_during_changes_detail": self.detail,
            "patches_per_change": m.change_stamps.len() as f64 / self.changes_made(),
            "dependents_per_change": self.expected_total as f64 / self.changes_made(),
            "restart": { "ready_seconds": m.restart.ready.as_secs_f64(), "watched_seconds": scale.restart_watch.as_secs_f64(), "patches": m.restart.patches },
            "restart_more_secrets": { "ready_seconds": m.restart_more.ready.as_secs_f64(), "patches": m.restart_more.patches },
            "consul_peak_connections": m.consul_peak,
            "count_failures": self.count_failures,
            "target_misses": self.target_misses,
            "targets": scale.targets.map(|t| json!({
                "steady_rss_mib": t.steady_mib, "peak_rss_mib": t.peak_mib,
                "ready_seconds": t.ready_seconds, "latency_p99_ms": t.p99_ms,
            })),
            "total_seconds": m.total.as_secs_f64(),
        })
    }

    /// The headline figures, each with its target.
    fn headline(&self) -> String {
        let m = self.m;
        let (scale, model) = (&m.scale, &m.model);
        let (secrets_before, secrets_after) = (m.restart.secrets, m.restart_more.secrets);
        let target = |f: fn(&Targets) -> String| scale.targets.as_ref().map(f).unwrap_or_default();
        let lat = &self.lat.all;
        let mut rows: Vec<Vec<String>> = Vec::new();
        let mut row = |name: &str, value: String, target: String| {
            let value = if target.is_empty() {
                value
            } else {
                format!("{value}   [target: {target}]")
            };
            rows.push(vec![name.to_owned(), value]);
        };
        row(
            "cluster",
            format!(
                "{} ns, {} ConfigMaps, {secrets_before} Secrets, {} workloads ({} referencing), {} Consul keys",
                scale.namespaces,
                scale.namespaces * scale.configmaps_per_namespace,
                model.workloads.len(),
                model.referencing(),
                model.consul_keys.len()
            ),
            String::new(),
        );
        row(
            "seeding",
            format!(
                "{} objects in {}, the double's controllers done {} later ({} CPU); later {} Secrets in {}; Consul keys in {}; double RSS {:.0} MiB, peak {:.0} MiB",
                m.seeded_objects,
                seconds(m.seeded_kubernetes),
                seconds(m.double_settled),
                seconds(m.double_settle_cpu),
                secrets_after - secrets_before,
                seconds(m.seeded_unreferenced),
                seconds(m.seeded_consul),
                mib(m.double_after_seeding.rss),
                mib(m.double_at_end.peak),
            ),
            String::new(),
        );
        row(
            "start to ready",
            seconds(m.ready),
            target(|t| format!("≤ {} s", t.ready_seconds)),
        );
        row(
            "initial stamps",
            format!(
                "{} PATCHes, done {} after start",
                m.initial.len(),
                seconds(m.initial_done)
            ),
            "one per referencing workload".into(),
        );
        row(
            "RSS at ready / after initial stamps",
            format!("{:.1} / {:.1} MiB", mib(m.rss_ready), mib(m.rss_stamped)),
            String::new(),
        );
        row(
            "steady RSS (after idle)",
            format!("{:.1} MiB", mib(m.rss_steady)),
            target(|t| format!("≤ {} MiB", t.steady_mib)),
        );
        row(
            "peak RSS (VmHWM, run 1)",
            format!("{:.1} MiB", mib(m.peak_run1)),
            target(|t| format!("≤ {} MiB", t.peak_mib)),
        );
        row(
            "idle CPU",
            format!(
                "{:.2} s over {:.0} s = {:.2}% of a core",
                m.idle.nudge_cpu().as_secs_f64(),
                m.idle.wall().as_secs_f64(),
                self.idle_cpu_percent
            ),
            "≤ 1%".into(),
        );
        row(
            "change→PATCH latency p50/p95/p99/max",
            format!(
                "{:.1} / {:.1} / {:.1} / {:.1} ms (n={})",
                lat.p(50.0),
                lat.p(95.0),
                lat.p(99.0),
                lat.max(),
                lat.len()
            ),
            target(|t| format!("p99 ≤ {} ms", t.p99_ms)),
        );
        for (kind, split) in &self.lat.by_kind {
            let s = Summary::new(split.total.clone());
            row(
                &format!("  {} p50/p95/p99", kind.label()),
                format!(
                    "{:.1} / {:.1} / {:.1} ms (n={})",
                    s.p(50.0),
                    s.p(95.0),
                    s.p(99.0),
                    s.len()
                ),
                String::new(),
            );
        }
        let per_change = self
            .detail
            .iter()
            .map(|(v, n)| format!("{v} {:.2}", *n as f64 / self.changes_made()))
            .collect::<Vec<_>>()
            .join(", ");
        row(
            "API requests per change",
            format!("LIST {:.2}, {per_change}", self.per_change()["LIST"]),
            "LIST = 0".into(),
        );
        row(
            "PATCHes per change",
            format!(
                "{:.3} ({} for {} changes; dependents {})",
                m.change_stamps.len() as f64 / self.changes_made(),
                m.change_stamps.len(),
                m.writes.len(),
                self.expected_total
            ),
            "= dependents".into(),
        );
        row(
            "PATCHes after restart",
            format!(
                "{} (ready in {})",
                m.restart.patches,
                seconds(m.restart.ready)
            ),
            "0".into(),
        );
        row(
            &format!("RSS at {secrets_before} vs {secrets_after} Secrets"),
            format!(
                "{:.1} → {:.1} MiB ({:+.1} MiB; PATCHes {})",
                mib(m.restart.memory.rss),
                mib(m.restart_more.memory.rss),
                self.growth_mib,
                m.restart_more.patches
            ),
            "growth ≤ 10 MiB".into(),
        );
        row(
            "peak connections to Consul",
            m.consul_peak.to_string(),
            String::new(),
        );
        columns(&rows)
    }

    /// Per phase: wall time, each process's CPU time, the double's service of
    /// nudge's requests.
    fn phases_table(&self) -> String {
        let m = self.m;
        let mut rows = vec![
            [
                "phase",
                "wall",
                "nudge CPU",
                "double CPU",
                "Consul CPU",
                "double serving nudge",
                "nudge's requests",
            ]
            .map(str::to_owned)
            .to_vec(),
        ];
        for phase in &m.phases {
            let served = phase.served(&m.requests);
            let count: usize = served.nudge_requests.values().sum();
            let by_verb = served
                .nudge_requests
                .iter()
                .map(|(v, n)| format!("{v} {n}"))
                .collect::<Vec<_>>()
                .join(", ");
            rows.push(vec![
                phase.name.clone(),
                seconds(phase.wall()),
                seconds(phase.nudge_cpu()),
                seconds(phase.double_cpu()),
                seconds(phase.consul_cpu()),
                format!("{:.1} ms", ms(served.nudge_service)),
                if count == 0 {
                    "0".into()
                } else {
                    format!("{count} ({by_verb})")
                },
            ]);
        }
        format!(
            "\nper phase (CPU time from /proc/<pid>/stat, in steps of {:.0} ms; the double's service time of nudge's requests from its log):\n{}",
            m.cpu_resolution.as_secs_f64() * 1000.0,
            columns(&rows)
        )
    }

    /// The double's service time per kind of request, largest total first.
    fn services_table(&self) -> String {
        let mut rows = vec![
            ["nudge's request", "n", "p50 / p99 ms", "max ms", "total"]
                .map(str::to_owned)
                .to_vec(),
        ];
        let mut by_total: Vec<(&String, &Summary)> = self.services.iter().collect();
        by_total.sort_by(|a, b| b.1.total().total_cmp(&a.1.total()));
        for (key, s) in by_total {
            rows.push(vec![
                key.clone(),
                s.len().to_string(),
                format!("{:.2} / {:.2}", s.p(50.0), s.p(99.0)),
                format!("{:.2}", s.max()),
                format!("{:.3} s", s.total() / 1000.0),
            ]);
        }
        format!(
            "\nthe double's service time per request (whole run; a WATCH's until its stream starts):\n{}",
            columns(&rows)
        )
    }

    /// Each source's change→PATCH latency, split.
    fn split_table(&self) -> String {
        let mut rows = vec![
            [
                "source",
                "n",
                "total p50 / p99 ms",
                "double or agent p50 / p99 ms",
                "nudge p50 / p99 ms",
                "not split",
            ]
            .map(str::to_owned)
            .to_vec(),
        ];
        for (kind, s) in &self.lat.by_kind {
            let who = if *kind == SourceKind::Consul {
                "agent"
            } else {
                "double"
            };
            rows.push(vec![
                kind.title().to_owned(),
                s.total.len().to_string(),
                Summary::new(s.total.clone()).p50_p99(),
                format!("{who} {}", Summary::new(s.other.clone()).p50_p99()),
                Summary::new(s.nudge.clone()).p50_p99(),
                s.unmatched.to_string(),
            ]);
        }
        format!(
            "\nchange→PATCH, split (double: from the write until it answered, plus its service of nudge's requests on the workload in between; agent: from the write until the answer that carried it was handed to nudge, plus its service of the reads narrowing that query to the change; nudge: the rest):\n{}",
            columns(&rows)
        )
    }

    /// The Consul agent's side, as the proxy saw it.
    fn consul_line(&self) -> String {
        let (direct50, proxied50, added) = self.overhead_at(50.0);
        let (direct99, proxied99, _) = self.overhead_at(99.0);
        let agent = &self.agent;
        let carried = self
            .lat
            .by_kind
            .get(&SourceKind::Consul)
            .map(|s| {
                let bytes = Summary::new(s.answer_bytes.clone());
                format!(
                    "; answers that carried a change (with the reads narrowing it): {:.0} B p50, {:.0} B max",
                    bytes.p(50.0),
                    bytes.max()
                )
            })
            .unwrap_or_default();
        let failed = if agent.failed_by_phase.is_empty() {
            String::new()
        } else {
            let by_phase: Vec<String> = agent
                .failed_by_phase
                .iter()
                .map(|(phase, n)| format!("{n} in {phase}"))
                .collect();
            format!(
                "; requests the agent refused (its connection limit) {}: {}",
                agent.failed(),
                by_phase.join(", ")
            )
        };
        format!(
            "Consul agent through the benchmark's proxy (a read of a key takes {proxied50:.0} / {proxied99:.0} µs p50 / p99 through it, {direct50:.0} / {direct99:.0} µs direct: +{added:.0} µs p50; n={}): reads without index p50 / p99 {} ms (n={}); blocking queries sent {}, answered {} ({} during the Consul changes), given up by nudge {}{failed}{carried}\n",
            self.m.proxy_overhead.samples,
            agent.reads.p50_p99(),
            agent.reads.len(),
            agent.blocking_sent,
            agent.blocking_answered,
            agent.answered_during_changes,
            agent.blocking_abandoned,
        )
    }
}

impl Split {
    fn json(&self, kind: SourceKind) -> Value {
        let other = if kind == SourceKind::Consul {
            "agent"
        } else {
            "double"
        };
        let mut v = json!({
            "count": self.total.len(),
            other: Summary::new(self.other.clone()).json(),
            "nudge": Summary::new(self.nudge.clone()).json(),
            "unmatched": self.unmatched,
        });
        if kind == SourceKind::Consul {
            v["answer_bytes"] = Summary::new(self.answer_bytes.clone()).json();
        }
        v
    }
}

/// Analyses `m`, writes the JSON and the plot, and returns the report.
pub fn report(m: &Measured) -> Result<Report> {
    let analysis = Analysis::new(m);
    let json = analysis.json();
    let mut table = format!("nudge load test, scale {}\n", m.scale.name);
    table.push_str(&analysis.headline());
    table.push_str(&analysis.phases_table());
    table.push_str(&analysis.services_table());
    table.push_str(&analysis.split_table());
    table.push_str(&analysis.consul_line());
    for failure in &analysis.count_failures {
        table.push_str(&format!("COUNT CHECK FAILED: {failure}\n"));
    }
    for miss in &analysis.target_misses {
        table.push_str(&format!("target missed: {miss}\n"));
    }
    std::fs::write(&m.out, serde_json::to_vec_pretty(&json)?)
        .with_context(|| format!("write {}", m.out.display()))?;
    table.push_str(&format!(
        "JSON: {}\nnudge log: {}\ndouble log: {}\n",
        m.out.display(),
        m.log.display(),
        m.double_log.display()
    ));
    let plot = m.out.with_file_name("loadtest-scales.svg");
    match write_plot(m.out.parent().unwrap_or(Path::new(".")), &plot) {
        Ok(()) => table.push_str(&format!("plot: {}\n", plot.display())),
        Err(error) => table.push_str(&format!("no plot: {error:#}\n")),
    }
    Ok(Report {
        json,
        count_failures: analysis.count_failures,
        target_misses: analysis.target_misses,
        table,
    })
}
