//! The Consul source against a real `consul agent`: each test starts its own agent,
//! so they run in parallel.

use crate::support::consul as consul_support;

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use consul_support::{
    ConnectionSampler, ConsulAgent, Driver, cx, fast_watch, put_at, source, source_with, tracked,
};
use nudge::__private::fingerprint::{Algorithm, Observation, md5_value, native_value};
use nudge::__private::sources::consul::{
    ClientSettings, ONE_OFF_READS, TlsSettings, WatchSettings,
};
use nudge::source::{Source, SourceError};
use nudge::testing::SourceUpdate;

/// Generous bound for a change to show up (min_query_interval is 50 ms in tests).
const SOON: Duration = Duration::from_secs(5);
/// Consul's default `limits.http_max_conns_per_client`; beyond it the agent
/// answers 429.
const AGENT_CONNECTION_LIMIT: u64 = 200;
/// How long a change held by the token bucket (8 s) is watched for not showing.
const QUIET: Duration = Duration::from_millis(1500);
/// Generous bound for a change to be read by the rechecks (every second) that
/// stand in for a refused blocking query.
const RECHECKED: Duration = Duration::from_secs(3);

fn native(value: &[u8]) -> Observation {
    Observation::Present(native_value(value))
}

fn md5(value: &[u8]) -> Observation {
    Observation::Present(md5_value(value))
}

fn update(key: &str, algorithm: Algorithm, observation: Observation) -> SourceUpdate {
    SourceUpdate::new(tracked(key, algorithm), observation)
}

/// A source following `key` on `agent`, once it has reported `value` and its
/// blocking query waits for the next change.
async fn following(agent: &ConsulAgent, key: &str, value: &[u8]) -> Result<Driver> {
    let mut driver = Driver::run(source(&agent.addr(), fast_watch()), 16);
    driver.track(tracked(key, Algorithm::Native));
    assert_eq!(driver.next(SOON).await?.observation, native(value));
    driver
        .wait_until(SOON, "blocking", |s| s.blocking_queries_in_flight() == 1)
        .await?;
    Ok(driver)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_is_reported_with_its_modify_index_as_the_version() -> Result<()> {
    let agent = ConsulAgent::start()?;
    agent.put("app/config", b"v1").await?;
    let mut driver = Driver::run(source(&agent.addr(), fast_watch()), 16);
    driver.track(tracked("app/config", Algorithm::Native));
    let first = driver.next_with_provenance(SOON).await?;
    agent.put("app/config", b"v2").await?;
    let second = driver.next_with_provenance(SOON).await?;
    let version = |u: &SourceUpdate| -> u64 {
        let provenance = u
            .provenance
            .as_deref()
            .expect("a present key has a version");
        provenance.version.as_deref().unwrap().parse().unwrap()
    };
    assert!(version(&second) > version(&first), "ModifyIndex grows");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tracking_reports_the_value_then_each_change_once() -> Result<()> {
    let agent = ConsulAgent::start()?;
    agent.put("app/config", b"v1").await?;
    let mut driver = Driver::run(source(&agent.addr(), fast_watch()), 16);

    driver.track(tracked("app/config", Algorithm::Native));
    assert_eq!(
        driver.next(SOON).await?,
        update("app/config", Algorithm::Native, native(b"v1"))
    );

    agent.put("app/config", b"v2").await?;
    assert_eq!(
        driver.next(SOON).await?,
        update("app/config", Algorithm::Native, native(b"v2"))
    );

    // The same value with other flags bumps ModifyIndex but not the content:
    // the query answers past it (blocking again) without a report, and the next
    // change is the next report (a repeat of v2 would come first).
    driver.wait_blocking(1).await?;
    let started = driver.source.blocking_queries_started();
    agent.touch("app/config", b"v2", 1).await?;
    driver
        .wait_until(SOON, "the query to answer the identical write", |s| {
            s.blocking_queries_started() > started
        })
        .await?;
    agent.put("app/config", b"v3").await?;
    assert_eq!(
        driver.next(SOON).await?,
        update("app/config", Algorithm::Native, native(b"v3"))
    );
    assert_eq!(driver.source.query_errors(), 0);
    driver.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_and_md5_on_one_key_share_one_blocking_query() -> Result<()> {
    let agent = ConsulAgent::start()?;
    agent.put("shared", b"a").await?;
    let mut driver = Driver::run(source(&agent.addr(), fast_watch()), 16);

    driver.track(tracked("shared", Algorithm::Native));
    driver.track(tracked("shared", Algorithm::Md5));
    let mut first = vec![driver.next(SOON).await?, driver.next(SOON).await?];
    first.sort_by(|a, b| a.tracked.cmp(&b.tracked));
    assert_eq!(
        first,
        [
            update("shared", Algorithm::Native, native(b"a")),
            update("shared", Algorithm::Md5, md5(b"a"))
        ]
    );
    let Observation::Present(f) = &first[1].observation else {
        unreachable!()
    };
    assert!(f.to_string().starts_with("md5-"), "{f}");

    driver
        .wait_until(SOON, "one blocking query", |s| {
            s.blocking_queries_in_flight() == 1
        })
        .await?;
    let started = driver.source.blocking_queries_started();
    agent.put("shared", b"b").await?;
    let mut changed = vec![driver.next(SOON).await?, driver.next(SOON).await?];
    changed.sort_by(|a, b| a.tracked.cmp(&b.tracked));
    assert_eq!(
        changed,
        [
            update("shared", Algorithm::Native, native(b"b")),
            update("shared", Algorithm::Md5, md5(b"b"))
        ]
    );
    driver
        .wait_until(SOON, "blocking again", |s| {
            s.blocking_queries_in_flight() == 1
        })
        .await?;
    // One change wakes one query, which blocks again once.
    assert_eq!(driver.source.blocking_queries_started(), started + 1);
    driver.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_key_is_absent_once_and_recreated_key_present_once() -> Result<()> {
    let agent = ConsulAgent::start()?;
    agent.put("flags", b"on").await?;
    let mut driver = Driver::run(source(&agent.addr(), fast_watch()), 16);
    driver.track(tracked("flags", Algorithm::Md5));
    assert_eq!(driver.next(SOON).await?.observation, md5(b"on"));

    // Each report is the only one: the next change's report comes next.
    agent.delete("flags").await?;
    assert_eq!(
        driver.next(SOON).await?,
        update("flags", Algorithm::Md5, Observation::Absent)
    );
    driver.wait_blocking(1).await?;
    agent.put("flags", b"off").await?;
    assert_eq!(
        driver.next(SOON).await?,
        update("flags", Algorithm::Md5, md5(b"off"))
    );
    driver.wait_blocking(1).await?;
    agent.delete("flags").await?;
    assert_eq!(
        driver.next(SOON).await?,
        update("flags", Algorithm::Md5, Observation::Absent)
    );
    driver.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_key_is_absent_once_and_blocks_without_errors() -> Result<()> {
    let agent = ConsulAgent::start()?;
    let mut driver = Driver::run(source(&agent.addr(), fast_watch()), 16);
    driver.track(tracked("not/there", Algorithm::Native));
    assert_eq!(
        driver.next(SOON).await?,
        update("not/there", Algorithm::Native, Observation::Absent)
    );
    driver
        .wait_until(SOON, "blocking on the missing key", |s| {
            s.blocking_queries_in_flight() == 1
        })
        .await?;
    // Unrelated writes move the KV index and wake the query; the key stays
    // absent and is not re-reported: the next report is its creation's.
    let started = driver.source.blocking_queries_started();
    agent.put("elsewhere", b"x").await?;
    driver
        .wait_until(SOON, "the query to answer the unrelated write", |s| {
            s.blocking_queries_started() > started
        })
        .await?;
    assert_eq!(driver.source.query_errors(), 0);

    agent.put("not/there", b"now").await?;
    assert_eq!(
        driver.next(SOON).await?,
        update("not/there", Algorithm::Native, native(b"now"))
    );
    driver.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_churning_key_is_rate_limited() -> Result<()> {
    let agent = ConsulAgent::start()?;
    agent.put("hot", b"0").await?;
    let watch = WatchSettings {
        min_query_interval: Duration::from_millis(400),
        ..fast_watch()
    };
    let mut driver = Driver::run(source(&agent.addr(), watch), 256);
    driver.track(tracked("hot", Algorithm::Native));
    driver.next(SOON).await?;
    driver
        .wait_until(SOON, "blocking", |s| s.blocking_queries_in_flight() == 1)
        .await?;

    let started = driver.source.blocking_queries_started();
    // The churn is the scenario: a write every 20 ms.
    let churn = Instant::now();
    for i in 1..=100 {
        agent.put("hot", format!("{i}").as_bytes()).await?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = churn.elapsed();
    let last = update("hot", Algorithm::Native, native(b"100"));
    let updates = driver.collect_until(SOON, |u| *u == last).await?;
    let queries = driver.source.blocking_queries_started() - started;
    // At most the burst, then one query per 400 ms (plus the one in flight when the
    // churn began).
    let bound = (elapsed.as_millis() / 400) as u64 + u64::from(watch_burst()) + 2;
    assert!(
        queries <= bound,
        "{queries} queries in {elapsed:?} (bound {bound})"
    );
    assert!(updates.len() as u64 <= bound, "{} updates", updates.len());
    assert_eq!(
        updates.last().map(|u| u.observation.clone()),
        Some(native(b"100"))
    );
    driver.shutdown().await
}

fn watch_burst() -> u32 {
    fast_watch().query_burst
}

/// The rate limit is a token bucket: a few changes in a row are each read at once,
/// the next waits for `min_query_interval`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_in_a_row_are_read_at_once_until_the_burst_is_spent() -> Result<()> {
    let agent = ConsulAgent::start()?;
    agent.put("row", b"0").await?;
    let watch = WatchSettings {
        min_query_interval: Duration::from_secs(8),
        query_burst: 3,
        ..fast_watch()
    };
    let mut driver = Driver::run(source(&agent.addr(), watch), 256);
    driver.track(tracked("row", Algorithm::Native));
    assert_eq!(driver.next(SOON).await?.observation, native(b"0"));
    // The first read took a token; two more changes are read without waiting.
    for value in ["1", "2"] {
        driver
            .wait_until(SOON, "blocking", |s| s.blocking_queries_in_flight() == 1)
            .await?;
        agent.put("row", value.as_bytes()).await?;
        assert_eq!(
            driver.next(SOON).await?.observation,
            native(value.as_bytes())
        );
    }
    // The bucket is empty: the next change waits for a token (8 s after the
    // first); not showing within 1.5 s is the duration under test.
    agent.put("row", b"3").await?;
    assert_eq!(driver.collect_for(QUIET).await, []);
    assert_eq!(
        driver.next(Duration::from_secs(15)).await?.observation,
        native(b"3")
    );
    driver.shutdown().await
}

/// Under one recursive prefix query, changes of different keys in a row are not
/// churn: each is read at once, while the loop's burst (3, then one query per 8 s)
/// would hold the fourth for seconds and the sixth for more than 15 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_of_different_keys_under_one_prefix_query_are_each_read_at_once() -> Result<()> {
    let agent = ConsulAgent::start()?;
    let keys: Vec<String> = (0..6).map(|i| format!("deploy/k{i}")).collect();
    for key in &keys {
        agent.put(key, b"0").await?;
    }
    let watch = WatchSettings {
        max_concurrent_queries: 1,
        min_query_interval: Duration::from_secs(8),
        query_burst: 3,
        ..fast_watch()
    };
    let mut driver = Driver::run(source(&agent.addr(), watch), 256);
    for key in &keys {
        driver.track(tracked(key, Algorithm::Native));
    }
    for _ in &keys {
        driver.next(SOON).await?;
    }
    for key in &keys {
        driver
            .wait_until(SOON, "one prefix query blocking", |s| {
                s.blocking_queries_in_flight() == 1
            })
            .await?;
        agent.put(key, b"1").await?;
        assert_eq!(
            driver.next(SOON).await?,
            update(key, Algorithm::Native, native(b"1"))
        );
        // Spaced wider than the fresh bucket's refill (8 s / 3), so only churn
        // pacing could hold a change: a duration that is the scenario.
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    assert_eq!(driver.source.query_errors(), 0);
    driver.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrack_stops_the_query() -> Result<()> {
    let agent = ConsulAgent::start()?;
    agent.put("gone/soon", b"1").await?;
    let mut driver = Driver::run(source(&agent.addr(), fast_watch()), 16);
    let item = tracked("gone/soon", Algorithm::Native);
    driver.track(item.clone());
    driver.next(SOON).await?;
    driver
        .wait_until(SOON, "blocking", |s| s.blocking_queries_in_flight() == 1)
        .await?;

    driver.untrack(item);
    driver
        .wait_until(SOON, "query stopped", |s| {
            s.blocking_queries_in_flight() == 0
        })
        .await?;
    let started = driver.source.blocking_queries_started();
    agent.put("gone/soon", b"2").await?;
    // A key tracked after the write is read and blocked on; its report is the
    // first after the untrack, and its query the only one started since.
    agent.put("marker", b"m").await?;
    driver.track(tracked("marker", Algorithm::Native));
    assert_eq!(
        driver.next(SOON).await?,
        update("marker", Algorithm::Native, native(b"m"))
    );
    driver.wait_blocking(1).await?;
    assert_eq!(driver.source.blocking_queries_started(), started + 1);
    assert_eq!(driver.received(), []);
    driver.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_over_the_query_limit_share_a_prefix_query_and_regroup() -> Result<()> {
    let agent = ConsulAgent::start()?;
    for (key, value) in [("svc/a/x", "1"), ("svc/a/y", "2"), ("svc/b/z", "3")] {
        agent.put(key, value.as_bytes()).await?;
    }
    let watch = WatchSettings {
        max_concurrent_queries: 2,
        ..fast_watch()
    };
    let mut driver = Driver::run(source(&agent.addr(), watch), 16);
    for key in ["svc/a/x", "svc/a/y", "svc/b/z"] {
        driver.track(tracked(key, Algorithm::Native));
    }
    let mut first: Vec<String> = Vec::new();
    for _ in 0..3 {
        first.push(
            driver
                .next(SOON)
                .await?
                .tracked
                .reference()
                .name()
                .to_string(),
        );
    }
    first.sort();
    assert_eq!(first, ["svc/a/x", "svc/a/y", "svc/b/z"]);
    // `svc/a/` (recursive) and `svc/b/z`.
    driver
        .wait_until(SOON, "two queries", |s| s.blocking_queries_in_flight() == 2)
        .await?;

    agent.put("svc/a/y", b"2b").await?;
    assert_eq!(
        driver.next(SOON).await?,
        update("svc/a/y", Algorithm::Native, native(b"2b"))
    );
    driver.wait_blocking(2).await?;
    let started = driver.source.blocking_queries_started();
    agent.touch("svc/a/x", b"1", 1).await?; // same value, new ModifyIndex
    agent.put("svc/a/untracked", b"?").await?; // wakes the prefix query
    // The prefix query answered past the first write, without a report: the
    // next report (of a later write) comes next.
    driver
        .wait_until(SOON, "the prefix query to answer", |s| {
            s.blocking_queries_started() > started
        })
        .await?;
    agent.delete("svc/a/x").await?;
    assert_eq!(
        driver.next(SOON).await?,
        update("svc/a/x", Algorithm::Native, Observation::Absent)
    );

    // Two keys fit again: one query per key.
    driver.untrack(tracked("svc/b/z", Algorithm::Native));
    agent.put("svc/a/x", b"1c").await?;
    assert_eq!(
        driver.next(SOON).await?,
        update("svc/a/x", Algorithm::Native, native(b"1c"))
    );
    // Reported once: the next change's report comes next.
    driver.wait_blocking(2).await?;
    agent.put("svc/a/x", b"1d").await?;
    assert_eq!(
        driver.next(SOON).await?,
        update("svc/a/x", Algorithm::Native, native(b"1d"))
    );
    assert_eq!(driver.source.query_errors(), 0);
    driver.shutdown().await
}

/// A prefix query over many keys blocks on their names and, when they move, reads
/// the values of only the part that changed: a change of one key of 120 is found
/// by index probes and a read of its part of ten keys, a deletion by its name
/// missing, and a new untracked key reports nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_query_reads_only_the_part_that_changed() -> Result<()> {
    let agent = ConsulAgent::start()?;
    let keys: Vec<String> = (0..120)
        .map(|i| format!("big/g{:02}/k{}", i / 10, i % 10))
        .collect();
    let entries: Vec<(String, Vec<u8>)> = keys.iter().map(|k| (k.clone(), b"0".to_vec())).collect();
    agent.put_many(&entries).await?;
    let watch = WatchSettings {
        max_concurrent_queries: 1,
        ..fast_watch()
    };
    let mut driver = Driver::run(source(&agent.addr(), watch), 256);
    for key in &keys {
        driver.track(tracked(key, Algorithm::Native));
    }
    for _ in &keys {
        driver.next(SOON).await?;
    }
    driver.wait_blocking(1).await?;

    // One key changes: reported alone. The values read since are those of its
    // part (g07, ten keys): 2 levels of probes (`big/g0`, `big/g1`; then
    // `big/g00`…`big/g09`) and one read, not a read of the prefix.
    let sent = driver.source.requests_sent();
    agent.put("big/g07/k3", b"1").await?;
    assert_eq!(
        driver.next(SOON).await?,
        update("big/g07/k3", Algorithm::Native, native(b"1"))
    );
    driver.wait_blocking(1).await?;
    // 2 + 10 probes, one read, the next query.
    assert_eq!(driver.source.requests_sent() - sent, 12 + 1 + 1);

    // A deletion: the name is missing from the answer that woke the query.
    agent.delete("big/g11/k9").await?;
    assert_eq!(
        driver.next(SOON).await?,
        update("big/g11/k9", Algorithm::Native, Observation::Absent)
    );
    driver.wait_blocking(1).await?;

    // A new key no one tracks wakes the query and reports nothing; the next
    // change of a tracked key in another part is the next report.
    agent.put("big/g03/new", b"?").await?;
    agent.put("big/g10/k0", b"2").await?;
    assert_eq!(
        driver.next(SOON).await?,
        update("big/g10/k0", Algorithm::Native, native(b"2"))
    );
    driver.wait_blocking(1).await?;
    assert_eq!(driver.received(), []);
    assert_eq!(driver.source.query_errors(), 0);
    driver.shutdown().await
}

/// 5,000 keys with the default limit of 64 queries, against an agent with the
/// default `http_max_conns_per_client` (200). First 64 keys (one per group) get a
/// query each; then the other 4,936 arrive and the keys are regrouped into 64
/// recursive prefix queries, abandoning the 64 single-key queries mid-flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_thousand_keys_stay_within_the_connection_limit() -> Result<()> {
    const KEYS: usize = 5000;
    const MAX: usize = 64;
    let agent = ConsulAgent::start()?;
    let key = |i: usize| format!("scale/g{}/k{i}", i % MAX);
    let entries: Vec<(String, Vec<u8>)> = (0..KEYS)
        .map(|i| (key(i), format!("v{i}").into_bytes()))
        .collect();
    agent.put_many(&entries).await?;

    let sampler = ConnectionSampler::start(agent.http_port());
    let watch = WatchSettings {
        max_concurrent_queries: MAX,
        ..fast_watch()
    };
    let mut driver = Driver::run(source(&agent.addr(), watch), KEYS);
    for i in 0..MAX {
        driver.track(tracked(&key(i), Algorithm::Native));
    }
    for _ in 0..MAX {
        driver.next(SOON).await?;
    }
    driver
        .wait_until(SOON, "64 single-key queries", |s| {
            s.blocking_queries_in_flight() == MAX as u64
        })
        .await?;

    let began = Instant::now();
    for i in MAX..KEYS {
        driver.track(tracked(&key(i), Algorithm::Native));
    }
    for _ in MAX..KEYS {
        driver.next(Duration::from_secs(20)).await?;
    }
    let initial = began.elapsed();
    driver
        .wait_until(SOON, "64 prefix queries", |s| {
            s.blocking_queries_in_flight() == MAX as u64
        })
        .await?;
    // The 64 blocking queries hold a connection each from now on.
    sampler.wait_for_client(MAX as u64, SOON).await?;

    agent.put(&key(4242), b"changed").await?;
    assert_eq!(
        driver.next(SOON).await?,
        update(&key(4242), Algorithm::Native, native(b"changed"))
    );
    // Reported once (the other queries block on keys that did not change): the
    // next change's report comes next.
    driver.wait_blocking(MAX as u64).await?;
    agent.put(&key(4242), b"changed again").await?;
    assert_eq!(
        driver.next(SOON).await?,
        update(&key(4242), Algorithm::Native, native(b"changed again"))
    );

    let (client, held) = (sampler.client_peak(), sampler.agent_peak());
    eprintln!(
        "5000 keys: observed in {initial:?}; peak connections: {client} established by nudge, {held} held by the agent"
    );
    // In flight: 64 blocking queries + 2 one-off reads; idle in the pool: as many
    // again at most (queries abandoned while regrouping that were left to finish
    // give their connections back); + the test's own writer connection.
    let in_flight = MAX + ONE_OFF_READS;
    assert!(
        client <= (2 * in_flight + 1) as u64,
        "peak client connections {client}"
    );
    assert!(
        client >= MAX as u64,
        "the sampler saw only {client} connections"
    );
    // The agent also holds abandoned queries until their wait ends (at most 64)
    // and closed connections for a moment: it must stay under its limit.
    assert!(
        held < AGENT_CONNECTION_LIMIT,
        "the agent held {held} connections"
    );
    assert_eq!(driver.source.query_errors(), 0, "no 429s or other errors");
    driver.shutdown().await
}

/// Keys tracked in waves, as nudge's start-up tracks them page after page of
/// workloads listed: after the first wave most namespaces have a prefix query
/// of their own, and the keys of each later wave join those running queries.
/// They are read a part of a query at a time, not with a request each: one
/// by one, these 2,000 keys took about 1,500 reads besides the blocking
/// queries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_joining_running_queries_in_waves_are_read_in_parts() -> Result<()> {
    const NAMESPACES: usize = 50;
    const WORKLOADS: usize = 10;
    const KEYS: usize = NAMESPACES * WORKLOADS * 4;
    const WAVES: usize = 5;
    let agent = ConsulAgent::start()?;
    let key = |ns: usize, w: usize, k: usize| format!("waves/n{ns:02}/w{w:02}/k{k}");
    let all = || {
        (0..NAMESPACES)
            .flat_map(move |ns| (0..WORKLOADS).flat_map(move |w| (0..4).map(move |k| (ns, w, k))))
    };
    let entries: Vec<(String, Vec<u8>)> = all()
        .map(|(ns, w, k)| (key(ns, w, k), format!("v{ns}.{w}.{k}").into_bytes()))
        .collect();
    agent.put_many(&entries).await?;

    let mut driver = Driver::run(source(&agent.addr(), fast_watch()), KEYS);
    let mut seen = 0;
    for wave in 0..WAVES {
        // Each wave: two workloads of every namespace (as one kind's pages).
        let keys: Vec<String> = all()
            .filter(|(_, w, _)| w % WAVES == wave)
            .map(|(ns, w, k)| key(ns, w, k))
            .collect();
        for key in &keys {
            driver.track(tracked(key, Algorithm::Native));
        }
        for _ in 0..keys.len() {
            driver.next(SOON).await?;
        }
        seen += keys.len();
    }
    assert_eq!(seen, KEYS);
    let source = &driver.source;
    let reads = source.requests_sent() - source.blocking_queries_started();
    eprintln!("{KEYS} keys in {WAVES} waves: {reads} reads besides the blocking queries");
    // About 330: each query's first read, and the parts.
    assert!(reads < (KEYS / 4) as u64, "{reads} reads for {KEYS} keys");
    assert_eq!(source.query_errors(), 0);
    driver.shutdown().await
}

/// A nudge restarted at the same address finds the agent's connections taken:
/// Consul keeps serving the blocking queries the stopped process abandoned, and
/// counting their connections, until their `wait` ends (or what they watch
/// changes). Here a stopped process's query and the test's idle connections
/// take every connection but one, which the new process's pool gets. Its
/// blocking queries are refused and its rechecks on the pooled connection are
/// not: the refused queries back off (0.5–1 s, 1–2 s, …) instead of retrying
/// every second, changes made meanwhile are read by the rechecks within about a
/// second and each reported once, and blocking resumes once the abandoned query
/// ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_refused_at_the_connection_limit_back_off_and_lose_no_change() -> Result<()> {
    let agent = ConsulAgent::start_dev_with("limits { http_max_conns_per_client = 10 }")?;
    for (key, value) in [("old/x", "x1"), ("app/a", "a1"), ("app/b", "b1")] {
        agent.put(key, value.as_bytes()).await?;
    }
    let watch = WatchSettings {
        wait: Duration::from_secs(15),
        max_concurrent_queries: 1,
        max_retry_interval: Duration::from_secs(8),
        ..fast_watch()
    };
    let follow = |keys: &[&str]| {
        let driver = Driver::run(source(&agent.addr(), watch.clone()), 16);
        for key in keys {
            driver.track(tracked(key, Algorithm::Native));
        }
        driver
    };
    let mut stopped = follow(&["old/x"]);
    stopped.next(SOON).await?;
    stopped.wait_blocking(1).await?;
    // Sent, not only started.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let abandoned_at = Instant::now();
    stopped.shutdown().await?;

    let mut idle = agent.take_free_connections().await?;
    drop(idle.pop().context("the agent had no free connection")?);
    let mut driver = follow(&["app/a", "app/b"]);
    for _ in 0..2 {
        driver.next(SOON).await?;
    }
    // Four refused in a row: the next blocking query waits 4–8 s. The prefix
    // is rechecked every second meanwhile, so changes are read within about
    // that.
    driver
        .wait_until(SOON * 2, "four refused blocking queries", |s| {
            s.query_errors() >= 4
        })
        .await?;
    for (key, value) in [("app/a", "a2"), ("app/b", "b2")] {
        agent.put(key, value.as_bytes()).await?;
        assert_eq!(
            driver.next(RECHECKED).await?,
            update(key, Algorithm::Native, native(value.as_bytes()))
        );
    }

    // The abandoned query ends `wait` + at most `wait`/16 after it was sent.
    let freed = watch.wait + watch.wait / 16 + Duration::from_millis(500);
    tokio::time::sleep(freed.saturating_sub(abandoned_at.elapsed())).await;
    let errors = driver.source.query_errors();
    // Refused queries in a row wait 0.5–1 s, 1–2 s, 2–4 s, 4–8 s, then 8 s: at
    // most six fit in the 16.4 s the connection was held. Retrying every second
    // after each successful recheck (as before) failed about a dozen times.
    assert!(
        errors <= 6,
        "{errors} failures while the connection was held"
    );
    driver
        .wait_until(Duration::from_secs(10), "blocking again", |s| {
            s.blocking_queries_in_flight() == 1
        })
        .await?;
    drop(idle);
    let settled = driver.source.query_errors();
    agent.put("app/a", b"a3").await?;
    assert_eq!(
        driver.next(SOON).await?,
        update("app/a", Algorithm::Native, native(b"a3"))
    );
    assert_eq!(driver.collect_for(QUIET).await, [], "each change once");
    assert_eq!(
        driver.source.query_errors(),
        settled,
        "no failure once freed"
    );
    driver.shutdown().await
}

/// Regrouping abandons blocking queries, which Consul serves until their
/// `wait` ends. Once the lingering budget (`max_concurrent_queries`) is
/// spent, an abandoned query is left to finish and keeps its blocking slot, so
/// the query that replaced it finds none free. It rechecks every second
/// instead of waiting blind for the slot (before: until the abandoned query's
/// `wait` ended, up to 5 minutes after a start-up that regrouped often), reads
/// a change within about that, and blocks once the slot is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_without_a_free_slot_rechecks_and_loses_no_change() -> Result<()> {
    let agent = ConsulAgent::start()?;
    for (key, value) in [("q/a", "a1"), ("q/b", "b1"), ("r/c", "c1")] {
        agent.put(key, value.as_bytes()).await?;
    }
    let watch = WatchSettings {
        wait: Duration::from_secs(15),
        max_concurrent_queries: 1,
        ..fast_watch()
    };
    let mut driver = Driver::run(source(&agent.addr(), watch.clone()), 16);
    // Key `q/a`, then prefix `q/` (the key query dropped: it takes the one
    // lingering slot), then prefix `` (the `q/` query left to finish: it
    // keeps the one blocking slot until its wait ends).
    for key in ["q/a", "q/b", "r/c"] {
        driver.track(tracked(key, Algorithm::Native));
        driver.next(SOON).await?;
        driver.wait_blocking(1).await?;
        // Sent, not only started.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let started = driver.source.blocking_queries_started();
    // Not under `q/`: it does not end the abandoned query.
    agent.put("r/c", b"c2").await?;
    assert_eq!(
        driver.next(RECHECKED).await?,
        update("r/c", Algorithm::Native, native(b"c2"))
    );
    assert!(
        driver.source.blocking_slot_waits() > 0,
        "the wait for a slot is counted"
    );

    driver
        .wait_until(watch.wait + SOON, "the new query to block", |s| {
            s.blocking_queries_started() > started
        })
        .await?;
    agent.put("q/b", b"b2").await?;
    assert_eq!(
        driver.next(SOON).await?,
        update("q/b", Algorithm::Native, native(b"b2"))
    );
    assert_eq!(driver.collect_for(QUIET).await, [], "each change once");
    assert_eq!(driver.source.query_errors(), 0);
    driver.shutdown().await
}

/// Consul is killed for 20 s. Meanwhile the key changes: the server is brought up
/// on its data directory behind another HTTP port (the source's address stays
/// unreachable), written to, and killed again. Then it comes back on its usual
/// address with its data: nothing is reported during the outage, the change once
/// after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_reports_nothing_then_the_change_once() -> Result<()> {
    let data_dir = std::env::temp_dir().join(format!("nudge-consul-outage-{}", std::process::id()));
    let mut agent = ConsulAgent::start_persistent(&data_dir)?;
    agent.put("db/url", b"old").await?;
    let mut driver = following(&agent, "db/url", b"old").await?;

    let outage = Instant::now();
    agent.stop();
    let side = agent.start_on_side_port()?;
    put_at(&reqwest::Client::new(), &side, "db/url", b"new").await?;
    agent.stop();
    // The outage's length is the scenario.
    let during = driver
        .collect_for(Duration::from_secs(20).saturating_sub(outage.elapsed()))
        .await;
    assert_eq!(during, [], "nothing is reported while Consul is down");
    assert!(driver.source.query_errors() > 0);

    agent.restart()?;
    assert_eq!(
        driver.next(Duration::from_secs(10)).await?,
        update("db/url", Algorithm::Native, native(b"new"))
    );
    // Reported once: the next change's report comes next.
    driver.wait_blocking(1).await?;
    agent.put("db/url", b"newer").await?;
    assert_eq!(
        driver.next(SOON).await?,
        update("db/url", Algorithm::Native, native(b"newer"))
    );
    driver.shutdown().await?;
    drop(agent);
    let _ = std::fs::remove_dir_all(&data_dir);
    Ok(())
}

/// A Consul rebuilt empty (a dev agent restarted on the same port) answers with
/// indexes below the ones already seen: after a consistent read confirms it,
/// that is the new truth, and the key is reported absent, then its next value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuilt_consul_with_lower_indexes_is_believed_once_confirmed() -> Result<()> {
    let mut agent = ConsulAgent::start()?;
    for round in 0..20 {
        agent.put("filler", format!("{round}").as_bytes()).await?;
    }
    agent.put("db/url", b"old").await?;
    let mut driver = following(&agent, "db/url", b"old").await?;

    agent.restart()?;
    assert_eq!(
        driver.next(Duration::from_secs(10)).await?,
        update("db/url", Algorithm::Native, Observation::Absent),
        "the empty Consul's answer, confirmed, is believed"
    );
    agent.put("db/url", b"new").await?;
    assert_eq!(
        driver.next(SOON).await?,
        update("db/url", Algorithm::Native, native(b"new"))
    );
    driver.shutdown().await?;
    Ok(())
}

/// The token [`acl_agent`] lets do anything.
const ROOT_TOKEN: &str = "root-token";

/// A dev agent with ACLs on, denying what no token allows.
fn acl_agent() -> Result<ConsulAgent> {
    ConsulAgent::start_dev_with(&format!(
        r#"acl {{ enabled = true, default_policy = "deny", tokens {{ master = "{ROOT_TOKEN}" }} }}"#
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_token_is_sent_and_a_denial_is_an_error_not_absent() -> Result<()> {
    let agent = acl_agent()?;
    let http = reqwest::Client::new();
    let put = http
        .put(format!("{}/v1/kv/secret/key", agent.addr()))
        .header("X-Consul-Token", ROOT_TOKEN)
        .body("s")
        .send()
        .await?;
    assert!(put.status().is_success());

    let mut denied = Driver::run(source(&agent.addr(), fast_watch()), 16);
    denied.track(tracked("secret/key", Algorithm::Native));
    // A second denial means the first was handled (the query reads again only
    // after it): as an error, with nothing reported.
    denied
        .wait_until(SOON, "two denied reads", |s| s.query_errors() >= 2)
        .await?;
    assert_eq!(denied.received(), [], "403 is not content");
    let err = denied
        .source
        .observe(&tracked("secret/key", Algorithm::Native), &cx())
        .await
        .unwrap_err();
    assert!(matches!(err, SourceError::Backend { .. }), "{err}");
    denied.shutdown().await?;

    let client = ClientSettings {
        address: agent.addr(),
        token: Some(ROOT_TOKEN.to_owned()),
        ..ClientSettings::default()
    };
    let mut allowed = Driver::run(source_with(client, fast_watch()), 16);
    allowed.track(tracked("secret/key", Algorithm::Native));
    assert_eq!(allowed.next(SOON).await?.observation, native(b"s"));
    allowed.shutdown().await
}

/// A token that may read a prefix but not two keys under it: Consul leaves
/// those keys out of recursive reads, where a read of the key itself is
/// refused. A key left out of a prefix query's first read, or of the part
/// read for keys joining the query, is read alone: its denial is an error,
/// and it is never reported absent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_a_token_may_not_read_in_a_prefix_query_are_errors_not_absent() -> Result<()> {
    let agent = acl_agent()?;
    let http = reqwest::Client::new();
    let as_root =
        |request: reqwest::RequestBuilder| request.header("X-Consul-Token", ROOT_TOKEN).send();
    for key in ["p/a", "p/b", "p/c", "p/hidden", "p/secret"] {
        let put = as_root(http.put(format!("{}/v1/kv/{key}", agent.addr())).body("v")).await?;
        assert!(put.status().is_success());
    }
    let rules = r#"key_prefix "p/" { policy = "read" } key "p/hidden" { policy = "deny" } key "p/secret" { policy = "deny" }"#;
    let policy = serde_json::json!({ "Name": "p-but-secret", "Rules": rules });
    let created = as_root(
        http.put(format!("{}/v1/acl/policy", agent.addr()))
            .body(policy.to_string()),
    )
    .await?;
    assert!(created.status().is_success(), "{}", created.text().await?);
    let token = serde_json::json!({ "Policies": [{ "Name": "p-but-secret" }] });
    let created = as_root(
        http.put(format!("{}/v1/acl/token", agent.addr()))
            .body(token.to_string()),
    )
    .await?;
    let created: serde_json::Value = serde_json::from_slice(&created.bytes().await?)?;
    let secret_id = created["SecretID"]
        .as_str()
        .context("a token's SecretID")?
        .to_owned();

    let client = ClientSettings {
        address: agent.addr(),
        token: Some(secret_id),
        ..ClientSettings::default()
    };
    let watch = WatchSettings {
        max_concurrent_queries: 1,
        ..fast_watch()
    };
    let mut driver = Driver::run(source_with(client, watch), 16);
    // One `p/` query, whose first read leaves p/hidden out.
    for key in ["p/a", "p/b", "p/hidden"] {
        driver.track(tracked(key, Algorithm::Native));
    }
    let mut first: Vec<String> = Vec::new();
    for _ in 0..2 {
        let update = driver.next(SOON).await?;
        assert_eq!(update.observation, native(b"v"));
        first.push(update.tracked.reference().name().to_string());
    }
    first.sort();
    assert_eq!(first, ["p/a", "p/b"]);
    // p/c and p/secret join the running `p/` query, and are read together.
    for key in ["p/c", "p/secret"] {
        driver.track(tracked(key, Algorithm::Native));
    }
    assert_eq!(
        driver.next(SOON).await?,
        update("p/c", Algorithm::Native, native(b"v"))
    );
    // Each denied key's read refused at least twice: as errors, with
    // nothing reported.
    driver
        .wait_until(SOON, "the denied keys' reads refused", |s| {
            s.query_errors() >= 4
        })
        .await?;
    assert_eq!(driver.received(), [], "a denial is not an absent key");
    driver.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_reads_once_and_refuses_what_it_cannot_fingerprint() -> Result<()> {
    let agent = ConsulAgent::start()?;
    agent.put("one/off", b"x").await?;
    agent.put("empty", b"").await?;
    let source = source(&agent.addr(), fast_watch());
    assert_eq!(
        source
            .observe(&tracked("one/off", Algorithm::Native), &cx())
            .await?,
        native(b"x")
    );
    assert_eq!(
        source
            .observe(&tracked("one/off", Algorithm::Md5), &cx())
            .await?,
        md5(b"x")
    );
    assert_eq!(
        source
            .observe(&tracked("empty", Algorithm::Native), &cx())
            .await?,
        native(b"")
    );
    assert_eq!(
        source
            .observe(&tracked("nope", Algorithm::Native), &cx())
            .await?,
        Observation::Absent
    );
    assert_eq!(source.blocking_queries_started(), 0);
    assert!(matches!(
        source
            .observe(&tracked("one/off", Algorithm::Wave), &cx())
            .await,
        Err(SourceError::UnsupportedAlgorithm { .. })
    ));
    assert!(matches!(
        source
            .observe(&tracked("../agent/self", Algorithm::Native), &cx())
            .await,
        Err(SourceError::InvalidReference { .. })
    ));

    // A closed port is an error, never Absent.
    let port = agent.http_port();
    drop(agent);
    let down = consul_support::source(&format!("http://127.0.0.1:{port}"), fast_watch());
    assert!(matches!(
        down.observe(&tracked("one/off", Algorithm::Native), &cx())
            .await,
        Err(SourceError::Backend { .. })
    ));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_private_ca_client_certificate_and_server_name() -> Result<()> {
    let certs = std::env::temp_dir().join(format!("nudge-consul-tls-{}", std::process::id()));
    consul_support::make_certificates(&certs)?;
    let (agent, https) = ConsulAgent::start_dev_tls(&certs)?;
    agent.put("tls/key", b"t").await?;
    let settings = |client_cert: bool, server_name: &str| ClientSettings {
        address: https.clone(),
        tls: TlsSettings {
            ca_file: Some(certs.join("consul-agent-ca.pem")),
            client_cert: client_cert.then(|| {
                (
                    certs.join("dc1-client-consul-0.pem"),
                    certs.join("dc1-client-consul-0-key.pem"),
                )
            }),
            server_name: Some(server_name.to_owned()),
            verify: true,
        },
        ..ClientSettings::default()
    };
    let item = tracked("tls/key", Algorithm::Native);

    let good = source_with(settings(true, "server.dc1.consul"), fast_watch());
    assert_eq!(good.observe(&item, &cx()).await?, native(b"t"));
    let mut driver = Driver::run(good, 16);
    driver.track(item.clone());
    assert_eq!(driver.next(SOON).await?.observation, native(b"t"));
    agent.put("tls/key", b"u").await?;
    assert_eq!(driver.next(SOON).await?.observation, native(b"u"));
    driver.shutdown().await?;

    // The server name is what the certificate is checked against.
    let wrong_name = source_with(settings(true, "evil.example.com"), fast_watch());
    assert!(matches!(
        wrong_name.observe(&item, &cx()).await,
        Err(SourceError::Backend { .. })
    ));
    // The agent requires a client certificate.
    let anonymous = source_with(settings(false, "server.dc1.consul"), fast_watch());
    assert!(matches!(
        anonymous.observe(&item, &cx()).await,
        Err(SourceError::Backend { .. })
    ));
    drop(agent);
    let _ = std::fs::remove_dir_all(&certs);
    Ok(())
}
