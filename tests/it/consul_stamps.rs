//! Consul keys stamp the workloads that reference them: nudge runs in this process
//! against the API server double (or `NUDGE_TEST_KUBECONFIG`) and a real `consul
//! agent` per test, configured through `[sources.consul]` like a deployment would be.
//!
//! Consul's side is observed from outside nudge: blocking queries through a small
//! TCP proxy that reads the HTTP requests passing through it, and connections
//! through `/proc/net/tcp`.

use crate::support::consul as consul_support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use base64::Engine as _;
use kube::ResourceExt;
use md5::Md5;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::*;
use consul_support::{ConnectionSampler, ConsulAgent, SAMPLING_SLACK, put_at};
use nudge::__private::sources::consul::ONE_OFF_READS;
use nudge::__private::sources::consul::plan::Plan;
use nudge::config::Config;

const CHECKSUM_CONFIG: &str = "nudge.dev/checksum-config";
const MUTATOR_CHECKSUM_DB: &str = "k8s-consul-mutator.io/checksum-db";
const MUTATOR_LAST_UPDATED: &str = "k8s-consul-mutator.io/last-updated";

/// nudge's native fingerprint of a Consul value, computed here independently:
/// `sha256-<hex>` of the raw bytes.
fn sha256_of(value: &[u8]) -> String {
    format!("sha256-{}", hex::encode(Sha256::digest(value)))
}

/// k8s-consul-mutator's checksum: `md5-<hex>` of the raw bytes.
fn md5_of(value: &[u8]) -> String {
    format!("md5-{}", hex::encode(Md5::digest(value)))
}

/// The test's nudge configuration with the default Consul cluster at `address`,
/// timed for tests (short waits between queries and retries).
fn consul_config(cluster: &TestCluster, address: &str) -> Config {
    let mut config = cluster.nudge_config();
    let consul = &mut config.sources.consul;
    consul.enabled = Some(true);
    consul.address = address.to_owned();
    consul.wait = Duration::from_secs(30);
    consul.min_query_interval = Duration::from_millis(50);
    consul.max_retry_interval = Duration::from_secs(2);
    consul.timeout = Duration::from_secs(5);
    config
}

/// Creates a Deployment with the given workload and pod-template annotations.
async fn deployment(
    cluster: &TestCluster,
    name: &str,
    annotations: &[(&str, &str)],
    template_annotations: &[(&str, &str)],
) {
    cluster
        .create_workload(
            "Deployment",
            name,
            annotations,
            template_annotations,
            plain_pod(),
        )
        .await;
}

/// `consul kv put` as a person would type it.
async fn consul_kv_put(address: &str, key: &str, value: &str) {
    let output = tokio::process::Command::new("consul")
        .args(["kv", "put", &format!("-http-addr={address}"), key, value])
        .output()
        .await
        .expect("run consul kv put");
    assert!(
        output.status.success(),
        "consul kv put {key}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_change_stamps_its_checksum_once_and_an_identical_write_stamps_nothing() -> Result<()>
{
    let agent = ConsulAgent::start()?;
    agent.put("app/config", b"v1").await?;
    let tap = ConsulTap::start(agent.http_port()).await?;
    let cluster = TestCluster::start("consul-change").await;
    let sentinel = cluster.sentinel().await;
    let mut consul_sentinel = ConsulSentinel::create(&cluster, &agent).await?;
    deployment(
        &cluster,
        "web",
        &[("nudge.dev/consul-config", "app/config")],
        &[],
    )
    .await;
    let nudge = cluster.start_nudge(consul_config(&cluster, &tap.address()));
    let first = wait_for_stamp(&cluster, "Deployment", "web", CHECKSUM_CONFIG, None).await;
    assert_eq!(first, sha256_of(b"v1"));

    let patches = cluster.patch_counter("Deployment", "web").await;
    consul_kv_put(&agent.addr(), "app/config", "v2").await;
    let second = wait_for_stamp(&cluster, "Deployment", "web", CHECKSUM_CONFIG, Some(&first)).await;
    assert_eq!(second, sha256_of(b"v2"));
    sentinel.quiesce(&nudge).await;
    assert_eq!(patches.count(&cluster).await, 1, "one change, one PATCH");

    // A new ModifyIndex with the same content (other flags: Consul ignores a
    // write of the same value and flags) is not a change.
    let patches = cluster.patch_counter("Deployment", "web").await;
    let before = modify_index(&agent.addr(), "app/config").await?;
    agent.touch("app/config", b"v2", 1).await?;
    // nudge's blocking query returned with the write and blocks again past it.
    let written = modify_index(&agent.addr(), "app/config").await?;
    assert!(written > before, "the write made a new ModifyIndex");
    wait_for("nudge to query past the identical write", WAIT, || async {
        (tap.max_index("/v1/kv/app/config") >= written).then_some(())
    })
    .await;
    // That query's answer is queued for nudge's core; a later answer on
    // another key reaching the core proves it handled.
    consul_sentinel.flush(&cluster).await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(patches.count(&cluster).await, 0, "same value, no PATCH");
    assert_eq!(
        cluster.template_annotations("Deployment", "web").await[CHECKSUM_CONFIG],
        second
    );
    nudge.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workloads_sharing_a_key_share_one_blocking_query_and_are_each_stamped_once() -> Result<()>
{
    const KEY_PATH: &str = "/v1/kv/app/shared";
    let agent = ConsulAgent::start()?;
    agent.put("app/shared", b"a").await?;
    let tap = ConsulTap::start(agent.http_port()).await?;
    let cluster = TestCluster::start("consul-shared").await;
    let sentinel = cluster.sentinel().await;
    for name in ["frontend", "backend"] {
        deployment(
            &cluster,
            name,
            &[("nudge.dev/consul-config", "app/shared")],
            &[],
        )
        .await;
    }
    let nudge = cluster.start_nudge(consul_config(&cluster, &tap.address()));
    let mut before = Vec::new();
    for name in ["frontend", "backend"] {
        let stamp = wait_for_stamp(&cluster, "Deployment", name, CHECKSUM_CONFIG, None).await;
        assert_eq!(stamp, sha256_of(b"a"));
        before.push((name, stamp, cluster.patch_counter("Deployment", name).await));
    }
    // Both workloads track the key as one item: one Track, one plan, one query
    // (never two at once: peak_in_flight below covers the whole test).
    wait_for("one blocking query on the key", WAIT, || async {
        (tap.in_flight(KEY_PATH) == 1).then_some(())
    })
    .await;
    let started = tap.started(KEY_PATH);

    agent.put("app/shared", b"b").await?;
    for (name, stamp, _) in &before {
        let now = wait_for_stamp(&cluster, "Deployment", name, CHECKSUM_CONFIG, Some(stamp)).await;
        assert_eq!(now, sha256_of(b"b"));
    }
    sentinel.quiesce(&nudge).await;
    for (name, _, patches) in &before {
        assert_eq!(patches.count(&cluster).await, 1, "{name} patched once");
    }
    wait_for("the query to block again", WAIT, || async {
        (tap.in_flight(KEY_PATH) == 1).then_some(())
    })
    .await;
    // One change woke one query, which blocked again once.
    assert_eq!(tap.started(KEY_PATH), started + 1);
    assert_eq!(
        tap.peak_in_flight(KEY_PATH),
        1,
        "never two blocking queries on one key"
    );
    assert_eq!(
        tap.blocking_paths(),
        BTreeSet::from([KEY_PATH.to_owned()]),
        "nothing else is watched"
    );
    nudge.stop().await;
    Ok(())
}

/// 500 Deployments reference 10 keys each (5,000 distinct keys); `w123` and `w444`
/// also reference `w007`'s key `k3`. With the default limit of 64 queries the
/// keys are watched through recursive prefix queries, nudge's connections to
/// Consul stay within the limit (plus its two one-off reads), and a change to one
/// key stamps exactly the workloads that reference it. On the double only: it
/// seeds the Deployments without HTTP and counts PATCHes in the request log.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn double_only_five_thousand_keys_stay_within_the_query_limit_and_stamp_exactly_their_dependents()
-> Result<()> {
    const WORKLOADS: usize = 500;
    const KEYS_PER_WORKLOAD: usize = 10;
    const MAX: usize = 64;
    const SHARED: &str = "scale/w007/k3";
    const SHARERS: [usize; 2] = [123, 444];
    let cluster = TestCluster::start_double_only("consul-scale").await;
    let sentinel = cluster.sentinel().await;
    let double = cluster.double().expect("on the double");
    let test_began = Instant::now();
    let name = |w: usize| format!("w{w:03}");
    let key = |w: usize, k: usize| format!("scale/w{w:03}/k{k}");

    let agent = ConsulAgent::start()?;
    // The test writes from 127.0.0.2, so that nudge's connections (from 127.0.0.1)
    // can be told apart from the test's.
    let writer = Writer::new(&agent.addr())?;
    let entries: Vec<(String, Vec<u8>)> = (0..WORKLOADS)
        .flat_map(|w| (0..KEYS_PER_WORKLOAD).map(move |k| (w, k)))
        .map(|(w, k)| (key(w, k), format!("v-{w}-{k}").into_bytes()))
        .collect();
    writer.put_many(&entries).await?;
    for w in 0..WORKLOADS {
        let mut annotations: BTreeMap<String, String> = (0..KEYS_PER_WORKLOAD)
            .map(|k| (format!("nudge.dev/consul-k{k}"), key(w, k)))
            .collect();
        if SHARERS.contains(&w) {
            annotations.insert("nudge.dev/consul-extra".to_owned(), SHARED.to_owned());
        }
        double.create(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": name(w), "namespace": cluster.namespace(), "annotations": annotations },
            "spec": {
                "selector": { "matchLabels": { "app": name(w) } },
                "template": {
                    "metadata": { "labels": { "app": name(w) } },
                    "spec": { "containers": [{ "name": "app", "image": "busybox" }] },
                },
            },
        }))?;
    }
    let seeded = test_began.elapsed();

    let sampler = ConnectionSampler::start_counting(agent.http_port(), loopback_connections);
    let mut config = consul_config(&cluster, &agent.addr());
    config.sources.consul.max_concurrent_queries = MAX;
    let started = Instant::now();
    let nudge = cluster.start_nudge(config);

    // Every workload gets the checksums of its own keys.
    let expected = |w: usize| -> BTreeMap<String, String> {
        let mut checksums: BTreeMap<String, String> = (0..KEYS_PER_WORKLOAD)
            .map(|k| {
                (
                    format!("nudge.dev/checksum-k{k}"),
                    sha256_of(format!("v-{w}-{k}").as_bytes()),
                )
            })
            .collect();
        if SHARERS.contains(&w) {
            checksums.insert("nudge.dev/checksum-extra".to_owned(), sha256_of(b"v-7-3"));
        }
        checksums
    };
    wait_for(
        "every workload stamped with its keys",
        Duration::from_secs(60),
        || async {
            let stamps = template_checksums(&cluster).await;
            (stamps.len() == WORKLOADS && (0..WORKLOADS).all(|w| stamps[&name(w)] == expected(w)))
                .then_some(())
        },
    )
    .await;
    let initial = started.elapsed();
    let queries = {
        let mut keys: Vec<nudge::__private::model::Name> =
            entries.iter().map(|(k, _)| k.as_str().into()).collect();
        keys.sort();
        Plan::new(&keys, MAX).0.len()
    };
    assert!(queries <= MAX);

    // One key referenced by three workloads: exactly those three are stamped.
    let mark = double.requests().len();
    writer.put(SHARED, b"changed").await?;
    wait_for("the sharers to be stamped", WAIT, || async {
        let stamps = template_checksums(&cluster).await;
        let changed = sha256_of(b"changed");
        (stamps[&name(7)]["nudge.dev/checksum-k3"] == changed
            && SHARERS
                .iter()
                .all(|w| stamps[&name(*w)]["nudge.dev/checksum-extra"] == changed))
        .then_some(())
    })
    .await;
    sentinel.quiesce(&nudge).await;
    let patched = nudge_patches_since(&cluster, mark);
    let want: BTreeMap<String, usize> = [7, SHARERS[0], SHARERS[1]]
        .iter()
        .map(|w| {
            (
                workload_path(cluster.namespace(), "Deployment", &name(*w)),
                1,
            )
        })
        .collect();
    assert_eq!(patched, want, "exactly the three workloads using {SHARED}");

    // One key referenced by one workload.
    let mark = double.requests().len();
    writer.put(&key(250, 9), b"changed too").await?;
    wait_for_stamp(
        &cluster,
        "Deployment",
        &name(250),
        "nudge.dev/checksum-k9",
        Some(&sha256_of(b"v-250-9")),
    )
    .await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(
        nudge_patches_since(&cluster, mark),
        BTreeMap::from([(
            workload_path(cluster.namespace(), "Deployment", &name(250)),
            1
        )]),
    );
    let stamps = template_checksums(&cluster).await;
    assert_eq!(
        stamps[&name(250)]["nudge.dev/checksum-k9"],
        sha256_of(b"changed too")
    );
    assert_eq!(
        stamps[&name(250)]["nudge.dev/checksum-k8"],
        sha256_of(b"v-250-8")
    );

    let (client, held) = (sampler.client_peak(), sampler.agent_peak());
    eprintln!(
        "5000 keys on 500 workloads: seeded in {seeded:?}, all stamped {initial:?} after start; \
         {queries} planned queries; peak connections: {client} opened by nudge, {held} held by the agent; \
         test took {:?}",
        test_began.elapsed()
    );
    // Blocking queries and one-off reads in flight, and the one-off reads' idle
    // pool; a blocking query's connection, closed after its answer, may still be
    // sampled beside its successor's.
    assert!(
        client <= (MAX + 2 * ONE_OFF_READS) as u64 + SAMPLING_SLACK,
        "nudge had {client} connections to Consul open at once (limit {MAX} + {ONE_OFF_READS} one-off reads + {ONE_OFF_READS} idle)"
    );
    assert!(
        client >= queries as u64,
        "the sampler saw only {client} connections for {queries} queries"
    );
    // Abandoned blocking queries linger on the agent until their wait ends; nudge
    // bounds them by another `MAX`. Consul's own limit per client IP is 200.
    assert!(
        held <= (2 * MAX + ONE_OFF_READS) as u64 + SAMPLING_SLACK,
        "the agent held {held} connections from nudge"
    );
    nudge.stop().await;
    Ok(())
}

/// Consul is killed for 20 s. Meanwhile the key changes (the server is brought up
/// on its data directory behind another port, written to, and killed again). Then
/// it comes back on its usual address with its data: no stamp during the outage,
/// one after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consul_outage_stamps_nothing_then_the_change_once() -> Result<()> {
    let data_dir =
        std::env::temp_dir().join(format!("nudge-consul-stamps-outage-{}", std::process::id()));
    let mut agent = ConsulAgent::start_persistent(&data_dir)?;
    agent.put("db/url", b"old").await?;
    let cluster = TestCluster::start("consul-outage").await;
    let sentinel = cluster.sentinel().await;
    deployment(
        &cluster,
        "db-client",
        &[("nudge.dev/consul-db", "db/url")],
        &[],
    )
    .await;
    let mut config = consul_config(&cluster, &agent.addr());
    let admin = free_port();
    config.admin.bind = admin;
    let nudge = cluster.start_nudge(config);
    let first = wait_for_stamp(
        &cluster,
        "Deployment",
        "db-client",
        "nudge.dev/checksum-db",
        None,
    )
    .await;
    assert_eq!(first, sha256_of(b"old"));
    let patches = cluster.patch_counter("Deployment", "db-client").await;

    let outage = Instant::now();
    agent.stop();
    let side = agent.start_on_side_port()?;
    put_at(&reqwest::Client::new(), &side, "db/url", b"new").await?;
    agent.stop();
    // nudge notices: its queries fail (and are retried) while Consul is away.
    wait_for("failed Consul queries", WAIT, || async {
        let (_, metrics) = http_get(admin, "/metrics").await?;
        (sample_sum(&metrics, "nudge_consul_query_errors_total") >= 2.0).then_some(())
    })
    .await;
    // The rest of the outage: its length, past max_delay (10 s), is the
    // scenario. Then nudge has decided about what it saw (Kubernetes is up), and
    // published every Event it decided on.
    tokio::time::sleep(Duration::from_secs(20).saturating_sub(outage.elapsed())).await;
    sentinel.flush_events(&nudge).await;
    assert_eq!(
        patches.count(&cluster).await,
        0,
        "no stamp while Consul is down"
    );
    assert_eq!(
        cluster
            .template_annotations("Deployment", "db-client")
            .await["nudge.dev/checksum-db"],
        first
    );
    assert_eq!(
        cluster.events_for("db-client", "MissingConfig").await,
        [],
        "unreachable is not missing"
    );

    agent.restart()?;
    let after = wait_for_stamp(
        &cluster,
        "Deployment",
        "db-client",
        "nudge.dev/checksum-db",
        Some(&first),
    )
    .await;
    assert_eq!(after, sha256_of(b"new"));
    sentinel.quiesce(&nudge).await;
    assert_eq!(
        patches.count(&cluster).await,
        1,
        "one stamp after the outage"
    );
    nudge.stop().await;
    drop(agent);
    let _ = std::fs::remove_dir_all(&data_dir);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_key_raises_missing_config_keeps_the_stamp_and_recreating_it_stamps_once()
-> Result<()> {
    let agent = ConsulAgent::start()?;
    agent.put("app/flags", b"on").await?;
    let cluster = TestCluster::start("consul-missing").await;
    let sentinel = cluster.sentinel().await;
    deployment(
        &cluster,
        "flagged",
        &[("nudge.dev/consul-flags", "app/flags")],
        &[],
    )
    .await;
    let nudge = cluster.start_nudge(consul_config(&cluster, &agent.addr()));
    let checksum = "nudge.dev/checksum-flags";
    let first = wait_for_stamp(&cluster, "Deployment", "flagged", checksum, None).await;
    assert_eq!(first, sha256_of(b"on"));
    let patches = cluster.patch_counter("Deployment", "flagged").await;

    agent.delete("app/flags").await?;
    let events = wait_for("a MissingConfig event", WAIT, || async {
        let events = cluster.events_for("flagged", "MissingConfig").await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    assert_eq!(events[0].type_.as_deref(), Some("Warning"));
    let note = events[0].note.as_deref().unwrap_or_default();
    assert!(note.contains("app/flags"), "the note names the key: {note}");
    sentinel.flush_events(&nudge).await;
    assert_eq!(patches.count(&cluster).await, 0, "the stamp is kept");
    assert_eq!(
        cluster.template_annotations("Deployment", "flagged").await[checksum],
        first
    );
    assert_eq!(
        occurrences(&cluster, "flagged", "MissingConfig").await,
        1,
        "reported once"
    );

    agent.put("app/flags", b"off").await?;
    let second = wait_for_stamp(&cluster, "Deployment", "flagged", checksum, Some(&first)).await;
    assert_eq!(second, sha256_of(b"off"));
    sentinel.quiesce(&nudge).await;
    assert_eq!(patches.count(&cluster).await, 1, "re-created: one stamp");
    nudge.stop().await;
    Ok(())
}

/// A key that comes back with its old value stamps nothing; deleted again, it is
/// reported again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_deleted_again_after_coming_back_unchanged_is_reported_again() -> Result<()> {
    let agent = ConsulAgent::start()?;
    agent.put("app/mode", b"blue").await?;
    let cluster = TestCluster::start("consul-missing-again").await;
    let sentinel = cluster.sentinel().await;
    deployment(
        &cluster,
        "moody",
        &[("nudge.dev/consul-mode", "app/mode")],
        &[],
    )
    .await;
    let nudge = cluster.start_nudge(consul_config(&cluster, &agent.addr()));
    let checksum = "nudge.dev/checksum-mode";
    let first = wait_for_stamp(&cluster, "Deployment", "moody", checksum, None).await;
    let patches = cluster.patch_counter("Deployment", "moody").await;

    agent.delete("app/mode").await?;
    wait_for("the first MissingConfig", WAIT, || async {
        (occurrences(&cluster, "moody", "MissingConfig").await == 1).then_some(())
    })
    .await;
    agent.put("app/mode", b"blue").await?;
    agent.delete("app/mode").await?;
    // Reported missing again: nudge saw the key come back (with the same content)
    // in between.
    wait_for("the second MissingConfig", WAIT, || async {
        (occurrences(&cluster, "moody", "MissingConfig").await == 2).then_some(())
    })
    .await;
    assert_eq!(
        cluster.events_for("moody", "MissingConfig").await.len(),
        1,
        "the repeat is counted into the first Event's series"
    );
    sentinel.quiesce(&nudge).await;
    assert_eq!(
        patches.count(&cluster).await,
        0,
        "same content again, then missing: no stamp"
    );
    assert_eq!(
        cluster.template_annotations("Deployment", "moody").await[checksum],
        first
    );
    nudge.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consul_mutator_workloads_get_md5_checksums_on_both_and_in_sync_ones_are_left_alone()
-> Result<()> {
    let agent = ConsulAgent::start()?;
    agent.put("app/db", b"postgres://db:5432").await?;
    let current = md5_of(b"postgres://db:5432");
    let cluster = TestCluster::start("consul-mutator").await;
    let sentinel = cluster.sentinel().await;
    deployment(
        &cluster,
        "migrating",
        &[("k8s-consul-mutator.io/key-db", "app/db")],
        &[],
    )
    .await;
    deployment(
        &cluster,
        "in-sync",
        &[
            ("k8s-consul-mutator.io/key-db", "app/db"),
            (MUTATOR_CHECKSUM_DB, &current),
        ],
        &[(MUTATOR_CHECKSUM_DB, &current)],
    )
    .await;
    let untouched = cluster.patch_counter("Deployment", "in-sync").await;
    let nudge = cluster.start_nudge(consul_config(&cluster, &agent.addr()));

    let stamped = wait_for_stamp(
        &cluster,
        "Deployment",
        "migrating",
        MUTATOR_CHECKSUM_DB,
        None,
    )
    .await;
    assert_eq!(stamped, current);
    assert_mutator_stamp(&cluster, "migrating", &current).await;
    // The key was read (migrating is stamped) and both workloads using it
    // decided about, on the same observation.
    sentinel.quiesce(&nudge).await;
    assert_eq!(
        untouched.count(&cluster).await,
        0,
        "the right checksum on both: no PATCH"
    );

    let patches: Vec<_> = [
        cluster.patch_counter("Deployment", "migrating").await,
        cluster.patch_counter("Deployment", "in-sync").await,
    ]
    .into();
    agent.put("app/db", b"postgres://db2:5432").await?;
    let changed = md5_of(b"postgres://db2:5432");
    for name in ["migrating", "in-sync"] {
        wait_for_stamp(
            &cluster,
            "Deployment",
            name,
            MUTATOR_CHECKSUM_DB,
            Some(&current),
        )
        .await;
        assert_mutator_stamp(&cluster, name, &changed).await;
    }
    sentinel.quiesce(&nudge).await;
    for patches in &patches {
        assert_eq!(patches.count(&cluster).await, 1);
    }
    nudge.stop().await;
    Ok(())
}

/// The k8s-consul-mutator stamp: `checksum` on the workload and its pod template,
/// `last-updated` (RFC 3339) on the workload only, nothing of nudge's own format.
async fn assert_mutator_stamp(cluster: &TestCluster, name: &str, checksum: &str) {
    let workload = cluster.workload("Deployment", name).await;
    let own = &workload["metadata"]["annotations"];
    let template = &workload["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(own[MUTATOR_CHECKSUM_DB], checksum, "{name}: {own}");
    assert_eq!(
        template[MUTATOR_CHECKSUM_DB], checksum,
        "{name}: {template}"
    );
    let last_updated = own[MUTATOR_LAST_UPDATED].as_str().unwrap_or_default();
    assert!(
        humantime::parse_rfc3339_weak(last_updated).is_ok(),
        "{name}: last-updated {last_updated:?}"
    );
    let template_keys: Vec<&String> = template
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
        .collect();
    assert!(
        template_keys
            .iter()
            .all(|k| *k == MUTATOR_CHECKSUM_DB || !k.starts_with("k8s-consul-mutator.io/")),
        "{name}: only the checksum on the pod template: {template_keys:?}"
    );
    assert!(
        !template_keys.iter().any(|k| k.starts_with("nudge.dev/")),
        "{name}: no native checksums: {template_keys:?}"
    );
}

// === helpers ===

/// A Deployment reading Consul key `sentinel/key`, stamped at once. The Consul
/// source hands its core the answers of all its blocking queries in the order
/// they came: the stamp of a value written after another query answered proves
/// that answer handled.
struct ConsulSentinel {
    address: String,
    round: usize,
}

impl ConsulSentinel {
    const KEY: &str = "sentinel/key";
    const NAME: &str = "consul-sentinel";
    const STAMP: &str = "nudge.dev/checksum-sentinel";

    async fn create(cluster: &TestCluster, agent: &ConsulAgent) -> Result<ConsulSentinel> {
        agent.put(Self::KEY, b"0").await?;
        let labels = json!({ "app": Self::NAME, SENTINEL_LABEL: "true" });
        let body = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": Self::NAME, "labels": labels,
                "annotations": {
                    "nudge.dev/consul-sentinel": Self::KEY,
                    "nudge.dev/debounce": "0s",
                    "nudge.dev/min-interval": "0s",
                },
            },
            "spec": {
                "selector": { "matchLabels": { "app": Self::NAME } },
                "template": { "metadata": { "labels": labels }, "spec": plain_pod() },
            },
        });
        cluster
            .api::<k8s_openapi::api::apps::v1::Deployment>()
            .create(&Default::default(), &serde_json::from_value(body)?)
            .await?;
        Ok(ConsulSentinel {
            address: agent.addr(),
            round: 0,
        })
    }

    /// Writes the next value and waits for its stamp.
    async fn flush(&mut self, cluster: &TestCluster) {
        self.round += 1;
        let value = self.round.to_string();
        consul_kv_put(&self.address, Self::KEY, &value).await;
        let want = sha256_of(value.as_bytes());
        wait_for("the Consul sentinel's stamp", WAIT, || async {
            let annotations = cluster.template_annotations("Deployment", Self::NAME).await;
            (annotations.get(Self::STAMP) == Some(&want)).then_some(())
        })
        .await;
    }
}

/// The `ModifyIndex` of `key`, read from the agent at `address`.
async fn modify_index(address: &str, key: &str) -> Result<u64> {
    let body = reqwest::get(format!("{address}/v1/kv/{key}"))
        .await?
        .error_for_status()?
        .bytes()
        .await?;
    let entries: Value = serde_json::from_slice(&body)?;
    match entries[0]["ModifyIndex"].as_u64() {
        Some(index) => Ok(index),
        None => bail!("no ModifyIndex for {key}: {entries}"),
    }
}

/// How often an Event with `reason` was reported about `name`, counting the
/// repeats aggregated into an Event series.
async fn occurrences(cluster: &TestCluster, name: &str, reason: &str) -> i32 {
    cluster
        .events_for(name, reason)
        .await
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum()
}

/// The `nudge.dev/checksum-*` pod-template annotations of every Deployment in the
/// test namespace, by name.
async fn template_checksums(cluster: &TestCluster) -> BTreeMap<String, BTreeMap<String, String>> {
    let list = cluster
        .api::<k8s_openapi::api::apps::v1::Deployment>()
        .list(&Default::default())
        .await
        .expect("list deployments");
    list.items
        .into_iter()
        .filter(|d| !d.labels().contains_key(SENTINEL_LABEL))
        .map(|d| {
            let name = name_of(&d);
            let checksums = d
                .spec
                .and_then(|s| s.template.metadata)
                .and_then(|m| m.annotations)
                .unwrap_or_default()
                .into_iter()
                .filter(|(k, _)| k.starts_with("nudge.dev/checksum-"))
                .collect();
            (name, checksums)
        })
        .collect()
}

/// nudge's PATCH requests per path among the double's requests from `mark` on.
fn nudge_patches_since(cluster: &TestCluster, mark: usize) -> BTreeMap<String, usize> {
    let mut patched = BTreeMap::new();
    for request in cluster
        .double()
        .expect("on the double")
        .requests()
        .iter()
        .skip(mark)
    {
        // Stamps only: a merge patch records a rollout's outcome.
        if request.method == "PATCH"
            && request.query_param("fieldManager").as_deref() == Some("nudge")
            && request.headers.get("content-type").map(String::as_str)
                != Some("application/merge-patch+json")
            && !request.path.contains("/sentinel")
        {
            *patched.entry(request.path.clone()).or_default() += 1;
        }
    }
    patched
}

/// Writes to Consul from 127.0.0.2, one connection per request.
struct Writer {
    http: reqwest::Client,
    address: String,
}

impl Writer {
    fn new(address: &str) -> Result<Self> {
        let http = reqwest::Client::builder()
            .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)))
            .pool_max_idle_per_host(0)
            .build()?;
        Ok(Self {
            http,
            address: address.to_owned(),
        })
    }

    async fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        put_at(&self.http, &self.address, key, value).await
    }

    /// Writes many keys with the transaction API, 64 per request.
    async fn put_many(&self, entries: &[(String, Vec<u8>)]) -> Result<()> {
        let b64 = base64::engine::general_purpose::STANDARD;
        for chunk in entries.chunks(64) {
            let ops: Vec<Value> = chunk
                .iter()
                .map(|(key, value)| {
                    json!({"KV": {"Verb": "set", "Key": key, "Value": b64.encode(value)}})
                })
                .collect();
            let response = self
                .http
                .put(format!("{}/v1/txn", self.address))
                .body(serde_json::to_vec(&ops)?)
                .send()
                .await?;
            if !response.status().is_success() {
                bail!("txn: {}", response.status());
            }
        }
        Ok(())
    }
}

/// `(client, agent)` socket counts between 127.0.0.1 and `port` on 127.0.0.1,
/// from `/proc/net/tcp`: nudge connects from 127.0.0.1, the test writes from
/// 127.0.0.2. The agent's side counts half-closed sockets too, as it does against
/// `limits.http_max_conns_per_client`.
fn loopback_connections(port: u16) -> (u64, u64) {
    const ESTABLISHED: &str = "01";
    const CLOSE_WAIT: &str = "08";
    // 127.0.0.1 as /proc/net/tcp prints it (host byte order, little-endian).
    const LOCALHOST: &str = "0100007F";
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return (0, 0);
    };
    let (mut client, mut agent) = (0, 0);
    for line in table.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(remote), Some(state)) =
            (fields.get(1), fields.get(2), fields.get(3))
        else {
            continue;
        };
        let split = |addr: &str| {
            let (ip, port) = addr.split_once(':')?;
            Some((ip.to_owned(), u16::from_str_radix(port, 16).ok()?))
        };
        let (Some((local_ip, local_port)), Some((remote_ip, remote_port))) =
            (split(local), split(remote))
        else {
            continue;
        };
        if local_ip != LOCALHOST || remote_ip != LOCALHOST {
            continue;
        }
        if *state == ESTABLISHED && remote_port == port {
            client += 1;
        }
        if (*state == ESTABLISHED || *state == CLOSE_WAIT) && local_port == port {
            agent += 1;
        }
    }
    (client, agent)
}

/// A TCP proxy in front of an agent that reads the HTTP/1.1 requests going through
/// it: Consul's view of the blocking queries (`GET /v1/kv/…?index=…`) per path.
/// Clients do not pipeline, so a request is answered when the first bytes come
/// back on its connection.
struct ConsulTap {
    port: u16,
    counts: Arc<Mutex<TapCounts>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Debug, Default)]
struct TapCounts {
    started: HashMap<String, u64>,
    in_flight: HashMap<String, u64>,
    peak_in_flight: HashMap<String, u64>,
    max_index: HashMap<String, u64>,
}

impl TapCounts {
    fn begin(&mut self, path: &str, index: u64) {
        let max = self.max_index.entry(path.to_owned()).or_default();
        *max = (*max).max(index);
        *self.started.entry(path.to_owned()).or_default() += 1;
        let in_flight = self.in_flight.entry(path.to_owned()).or_default();
        *in_flight += 1;
        let now = *in_flight;
        let peak = self.peak_in_flight.entry(path.to_owned()).or_default();
        *peak = (*peak).max(now);
    }

    fn end(&mut self, path: &str) {
        if let Some(n) = self.in_flight.get_mut(path) {
            *n = n.saturating_sub(1);
        }
    }
}

impl ConsulTap {
    async fn start(agent_port: u16) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let counts = Arc::new(Mutex::new(TapCounts::default()));
        let task = tokio::spawn(Self::serve(listener, agent_port, counts.clone()));
        Ok(Self { port, counts, task })
    }

    fn address(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn started(&self, path: &str) -> u64 {
        self.counts
            .lock()
            .unwrap()
            .started
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    fn in_flight(&self, path: &str) -> u64 {
        self.counts
            .lock()
            .unwrap()
            .in_flight
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    /// The highest `index` a blocking query on `path` was sent with.
    fn max_index(&self, path: &str) -> u64 {
        let counts = self.counts.lock().unwrap();
        counts.max_index.get(path).copied().unwrap_or(0)
    }

    fn peak_in_flight(&self, path: &str) -> u64 {
        let counts = self.counts.lock().unwrap();
        counts.peak_in_flight.get(path).copied().unwrap_or(0)
    }

    /// Every path a blocking query was sent for.
    fn blocking_paths(&self) -> BTreeSet<String> {
        self.counts
            .lock()
            .unwrap()
            .started
            .keys()
            .cloned()
            .collect()
    }

    async fn serve(listener: TcpListener, agent_port: u16, counts: Arc<Mutex<TapCounts>>) {
        while let Ok((client, _)) = listener.accept().await {
            let counts = counts.clone();
            tokio::spawn(async move {
                if let Ok(agent) = TcpStream::connect(("127.0.0.1", agent_port)).await {
                    Self::relay(client, agent, counts).await;
                }
            });
        }
    }

    async fn relay(client: TcpStream, agent: TcpStream, counts: Arc<Mutex<TapCounts>>) {
        let (mut from_client, mut to_client) = client.into_split();
        let (mut from_agent, mut to_agent) = agent.into_split();
        // The blocking query this connection waits on, if any.
        let awaiting: Arc<Mutex<Option<String>>> = Arc::default();
        let answered = |awaiting: &Mutex<Option<String>>| {
            if let Some(path) = awaiting.lock().unwrap().take() {
                counts.lock().unwrap().end(&path);
            }
        };
        let upstream = async {
            let mut buf = vec![0; 16 * 1024];
            let mut line = Vec::new();
            loop {
                let n = match from_client.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                for &byte in &buf[..n] {
                    if byte != b'\n' {
                        if line.len() < 8192 {
                            line.push(byte);
                        }
                        continue;
                    }
                    if let Some((path, index)) = blocking_query(&line) {
                        counts.lock().unwrap().begin(&path, index);
                        *awaiting.lock().unwrap() = Some(path);
                    }
                    line.clear();
                }
                if to_agent.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
            // The client gave up: its query no longer counts.
            answered(&awaiting);
            let _ = to_agent.shutdown().await;
        };
        let downstream = async {
            let mut buf = vec![0; 16 * 1024];
            loop {
                let n = match from_agent.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                answered(&awaiting);
                if to_client.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
            let _ = to_client.shutdown().await;
        };
        tokio::join!(upstream, downstream);
    }
}

impl Drop for ConsulTap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The path and index of `GET <path>?…index=…` (a blocking query), for a request
/// line.
fn blocking_query(line: &[u8]) -> Option<(String, u64)> {
    let line = std::str::from_utf8(line).ok()?.trim_end();
    let target = line.strip_prefix("GET ")?.split(' ').next()?;
    let (path, query) = target.split_once('?')?;
    let index = query
        .split('&')
        .find_map(|param| param.strip_prefix("index="))?;
    Some((path.to_owned(), index.parse().unwrap_or(0)))
}
