//! End-to-end flows with the compiled `nudge run` binary as a separate process.

use std::time::Duration;

use crate::support::*;
use base64::Engine as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::Api;
use serde_json::json;

const CONFIG_HASH: &str = "nudge.dev/config-hash";

fn log_path(cluster: &TestCluster, name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("{}-{name}.log", cluster.namespace()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_stamps_once_per_data_change_and_never_for_metadata() {
    let cluster = TestCluster::start("bin-auto").await;
    let sentinel = cluster.sentinel().await;
    cluster
        .auto_deployment("web", "app-config", &[("a", "1")])
        .await;
    let nudge = cluster.spawn_nudge_binary(&cluster.nudge_config(), &log_path(&cluster, "nudge"));
    let first = wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, None).await;

    let patches = cluster.patch_counter("Deployment", "web").await;
    cluster.put_configmap("app-config", &[("a", "2")]).await;
    wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, Some(&first)).await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(patches.count(&cluster).await, 1);

    let patches = cluster.patch_counter("Deployment", "web").await;
    let observed = nudge.metrics_at().observations("configmap").await;
    cluster
        .merge_patch::<ConfigMap>("app-config", json!({"metadata": {"labels": {"x": "y"}}}))
        .await;
    // Fetched again (a new resourceVersion), the same content.
    nudge
        .metrics_at()
        .wait_observations("configmap", observed)
        .await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(patches.count(&cluster).await, 0);
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_while_stopped_stamps_once_and_a_restart_patches_nothing() {
    const WORKLOADS: usize = 100;
    let cluster = TestCluster::start("bin-restart").await;
    let sentinel = cluster.sentinel().await;
    for i in 0..10 {
        cluster
            .put_configmap(&format!("cfg-{i}"), &[("v", "1")])
            .await;
    }
    for i in 0..WORKLOADS {
        cluster
            .create_workload(
                "Deployment",
                &format!("w-{i}"),
                &[("nudge.dev/auto", "true")],
                &[],
                pod_mounting_configmap(&format!("cfg-{}", i % 10)),
            )
            .await;
    }
    let config = cluster.nudge_config();
    let nudge = cluster.spawn_nudge_binary(&config, &log_path(&cluster, "first"));
    let mut stamps = Vec::new();
    for i in 0..WORKLOADS {
        stamps.push(
            wait_for_stamp(&cluster, "Deployment", &format!("w-{i}"), CONFIG_HASH, None).await,
        );
    }
    nudge.stop().await;

    // Changed while nudge is down: applied once when it comes back.
    let patches = cluster.patch_counter("Deployment", "w-0").await;
    cluster.put_configmap("cfg-0", &[("v", "2")]).await;
    let nudge = cluster.spawn_nudge_binary(&config, &log_path(&cluster, "second"));
    let restamped =
        wait_for_stamp(&cluster, "Deployment", "w-0", CONFIG_HASH, Some(&stamps[0])).await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(patches.count(&cluster).await, 1);
    nudge.stop().await;

    // A restart of an in-sync controller patches nothing at all.
    let mut counters = Vec::new();
    for i in 0..WORKLOADS {
        counters.push(cluster.patch_counter("Deployment", &format!("w-{i}")).await);
    }
    let nudge = cluster.spawn_nudge_binary(&config, &log_path(&cluster, "third"));
    // Listed everything (ready), then decided about every workload and
    // finished what that caused.
    sentinel.quiesce(&nudge).await;
    nudge.stop().await;
    let mut total = 0;
    for counter in &counters {
        total += counter.count(&cluster).await;
    }
    assert_eq!(total, 0, "in-sync workloads are never patched on restart");
    assert_eq!(
        cluster.template_annotations("Deployment", "w-0").await[CONFIG_HASH],
        restamped
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_values_never_reach_the_logs_even_at_trace_level() {
    let cluster = TestCluster::start("bin-secret-logs").await;
    let secret_value = "pa55-w0rd-never-logged-7f3c";
    cluster
        .put_secret("creds", &[("password", secret_value)])
        .await;
    cluster
        .create_workload(
            "Deployment",
            "app",
            &[
                ("nudge.dev/secret-creds", "creds"),
                ("nudge.dev/auto", "true"),
            ],
            &[],
            json!({
                "containers": [{
                    "name": "app", "image": "busybox",
                    "envFrom": [{ "secretRef": { "name": "creds" } }],
                }],
            }),
        )
        .await;
    let mut config = cluster.nudge_config();
    config.log.filter = "trace".to_owned();
    let log = log_path(&cluster, "trace");
    let nudge = cluster.spawn_nudge_binary(&config, &log);
    let first = wait_for_stamp(
        &cluster,
        "Deployment",
        "app",
        "nudge.dev/checksum-creds",
        None,
    )
    .await;
    let new_value = "rotated-secret-also-hidden-91b2";
    cluster
        .put_secret("creds", &[("password", new_value)])
        .await;
    wait_for_stamp(
        &cluster,
        "Deployment",
        "app",
        "nudge.dev/checksum-creds",
        Some(&first),
    )
    .await;
    nudge.stop().await;

    let logs = std::fs::read_to_string(&log).unwrap();
    assert!(
        logs.len() > 1000,
        "trace logging was on ({} bytes)",
        logs.len()
    );
    let b64 = base64::engine::general_purpose::STANDARD;
    for value in [secret_value, new_value] {
        for form in [value.to_owned(), b64.encode(value)] {
            assert!(
                !logs.contains(&form),
                "the log contains a secret value ({form})"
            );
        }
    }
}

/// How often a replica's log says it stamped workload `name` (written before
/// the write counts as finished, so before its replica is idle).
fn stamped_in(log: &std::path::Path, cluster: &TestCluster, name: &str) -> usize {
    let workload = format!("/{}/{name}", cluster.namespace());
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.contains("stamped") && line.contains(&workload))
        .count()
}

async fn lease_holder(cluster: &TestCluster) -> Option<String> {
    let lease = cluster
        .api::<k8s_openapi::api::coordination::v1::Lease>()
        .get_opt("nudge")
        .await
        .ok()??;
    lease.spec?.holder_identity
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_stamps_and_after_sigkill_the_other_takes_over_once() {
    let cluster = TestCluster::start("bin-failover").await;
    let sentinel = cluster.sentinel().await;
    cluster.auto_deployment("ha", "cfg", &[("v", "1")]).await;
    let mut config = cluster.nudge_config();
    config.leader_election.lease_duration = Duration::from_secs(4);
    config.leader_election.renew_deadline = Duration::from_secs(3);
    config.leader_election.retry_period = Duration::from_millis(500);
    let logs = [
        log_path(&cluster, "replica-a"),
        log_path(&cluster, "replica-b"),
    ];
    let mut replicas = [
        Some(cluster.spawn_nudge_replica(&config, &logs[0], "replica-a")),
        Some(cluster.spawn_nudge_replica(&config, &logs[1], "replica-b")),
    ];
    let first = wait_for_stamp(&cluster, "Deployment", "ha", CONFIG_HASH, None).await;
    let holder = wait_for("a lease holder", WAIT, || lease_holder(&cluster)).await;
    let (leader, survivor) = if holder == "replica-a" {
        (0, 1)
    } else {
        (1, 0)
    };
    // The leader has finished everything; the follower has listed and holds
    // nothing back. (That a follower never writes is proven by signal in
    // tests/it/leader_election.rs; here the logs are checked against the Lease.)
    for (i, replica) in replicas.iter().enumerate() {
        let replica = replica.as_ref().expect("running");
        if i == leader {
            sentinel.quiesce(replica).await;
        } else {
            replica.metrics_at().wait_ready().await;
            wait_idle(replica).await;
        }
    }
    let stamps: Vec<usize> = logs.iter().map(|l| stamped_in(l, &cluster, "ha")).collect();
    assert_eq!(
        stamps.iter().sum::<usize>(),
        1,
        "exactly one replica stamps: {stamps:?}"
    );
    assert_eq!(
        stamps[leader], 1,
        "the lease holder is the one that stamped"
    );

    // SIGKILL: no release of the lease, the survivor must wait for it to expire.
    let patches = cluster.patch_counter("Deployment", "ha").await;
    drop(replicas[leader].take());
    cluster.put_configmap("cfg", &[("v", "2")]).await;
    let survivor_name = ["replica-a", "replica-b"][survivor];
    wait_for(
        "the survivor to take the lease",
        config.leader_election.lease_duration * 3,
        || async { (lease_holder(&cluster).await.as_deref() == Some(survivor_name)).then_some(()) },
    )
    .await;
    wait_for_stamp(&cluster, "Deployment", "ha", CONFIG_HASH, Some(&first)).await;
    sentinel
        .quiesce(replicas[survivor].as_ref().expect("running"))
        .await;
    assert_eq!(
        patches.count(&cluster).await,
        1,
        "the change made during the handover is stamped once"
    );
    assert_eq!(stamped_in(&logs[survivor], &cluster, "ha"), 1);
    if let Some(replica) = replicas[survivor].take() {
        replica.stop().await;
    }
}

/// A newcomer's first run: no `kubernetes.namespace` (nor
/// `NUDGE_KUBERNETES__NAMESPACE`), so nudge runs in the kubeconfig context's
/// namespace, as kubectl would: its key Secret and Lease go there, and it stamps.
/// The context names the test namespace, so that nothing lands in a shared one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_configured_namespace_the_binary_runs_in_the_kubeconfig_contexts() {
    let cluster = TestCluster::start("bin-context-namespace").await;
    cluster
        .auto_deployment("web", "app-config", &[("a", "1")])
        .await;
    let kubeconfig = log_path(&cluster, "kubeconfig");
    cluster.write_kubeconfig_with_namespace(&kubeconfig, cluster.namespace());
    let mut config = cluster.nudge_config();
    config.kubernetes.namespace = String::new();
    let nudge =
        cluster.spawn_nudge_with_kubeconfig(&kubeconfig, &config, &log_path(&cluster, "nudge"));
    wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, None).await;
    nudge.stop().await;
    let _ = std::fs::remove_file(&kubeconfig);

    let key = cluster
        .api::<Secret>()
        .get_opt(&config.fingerprint.key_secret)
        .await
        .unwrap();
    assert!(
        key.is_some(),
        "the key Secret is in the context's namespace"
    );
    let lease = cluster
        .api::<Lease>()
        .get_opt(&config.leader_election.lease_name)
        .await
        .unwrap();
    assert!(lease.is_some(), "so is the Lease");
}

/// `kubernetes.namespace` names a namespace the cluster does not have (a
/// newcomer's `nudge-system` before installing the manifests): the binary stops
/// at once, and the last line of its stderr says what to do, in one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_own_namespace_stops_the_binary_with_one_line_saying_what_to_do() {
    let cluster = TestCluster::start("bin-missing-namespace").await;
    let namespaces: Api<Namespace> = Api::all(cluster.client());
    // On a cluster where nudge is installed, another name that does not exist.
    let absent = match namespaces.get_opt("nudge-system").await.unwrap() {
        None => "nudge-system".to_owned(),
        Some(_) => format!("{}-absent", cluster.namespace()),
    };
    let mut config = cluster.nudge_config();
    config.kubernetes.namespace = absent.clone();
    let log = log_path(&cluster, "nudge");
    let started = std::time::Instant::now();
    let status = cluster
        .spawn_nudge_binary(&config, &log)
        .exit_within(Duration::from_secs(5))
        .await;
    assert!(!status.success(), "nudge exited with {status}");
    let stderr = std::fs::read_to_string(&log).unwrap();
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("nudge: "), "last line: {last}\n{stderr}");
    for words in ["does not exist", "kubernetes.namespace", absent.as_str()] {
        assert!(last.contains(words), "{words:?} missing from: {last}");
    }
    for dump in ["Status {", "ErrorResponse", "Some("] {
        assert!(!last.contains(dump), "a Debug dump in: {last}");
    }
    eprintln!("exited with {status} after {:?}: {last}", started.elapsed());
}

/// The log `nudge run` writes to a file (stderr is not a terminal) is plain text
/// for machines: no ANSI escape sequence, with the default (plain) format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_written_to_a_file_has_no_terminal_escape_sequences() {
    let cluster = TestCluster::start("bin-plain-log").await;
    cluster
        .auto_deployment("web", "app-config", &[("a", "1")])
        .await;
    let config = cluster.nudge_config();
    assert_eq!(
        config.log.format,
        nudge::config::LogFormat::Plain,
        "the default"
    );
    let log = log_path(&cluster, "nudge");
    let nudge = cluster.spawn_nudge_binary(&config, &log);
    let first = wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, None).await;
    cluster.put_configmap("app-config", &[("a", "2")]).await;
    wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, Some(&first)).await;
    nudge.stop().await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("stamped"), "the log has content: {text}");
    if let Some(at) = text.find("\x1b[") {
        let line = text[..at].lines().count() + 1;
        panic!(
            "an ANSI escape sequence on line {line}: {:?}",
            text.lines().nth(line - 1).unwrap_or_default()
        );
    }
}
