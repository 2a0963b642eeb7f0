//! `nudge explain` against a cluster: the compiled binary explains an in-sync
//! workload, one waiting on debounce, and one whose Secret is missing.

use std::process::Output;

use crate::support::*;
use k8s_openapi::api::core::v1::Secret;
use serde_json::{Value, json};

const CONFIG_HASH: &str = "nudge.dev/config-hash";

/// A pod spec reading ConfigMap `configmap` through envFrom and key `password` of
/// Secret `secret` (required) through env.
fn pod_using(configmap: &str, secret: &str) -> Value {
    json!({
        "containers": [{
            "name": "app", "image": "busybox",
            "envFrom": [{ "configMapRef": { "name": configmap } }],
            "env": [{ "name": "PASSWORD", "valueFrom": { "secretKeyRef": { "name": secret, "key": "password" } } }],
        }],
    })
}

/// Runs `nudge explain deployment/<name> -o <format>` against the cluster, with
/// nudge's namespace (where the key Secret lives) set to the test namespace and
/// `env` added. Nothing from the caller's environment leaks in.
async fn explain(cluster: &TestCluster, name: &str, format: &str, env: &[(&str, &str)]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_nudge"))
        .args(["explain", &format!("deployment/{name}")])
        .args(["-n", cluster.namespace(), "-o", format])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("KUBECONFIG", cluster.kubeconfig())
        .env("NUDGE_KUBERNETES__NAMESPACE", cluster.namespace())
        .env("NUDGE_ENGINE__MIN_INTERVAL", "0s")
        .envs(env.iter().copied())
        .output()
        .await
        .expect("run nudge explain")
}

/// The JSON report of a successful `nudge explain -o json`.
async fn explain_json(cluster: &TestCluster, name: &str, env: &[(&str, &str)]) -> Value {
    let output = explain(cluster, name, "json", env).await;
    assert!(
        output.status.success(),
        "nudge explain failed with {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "nudge explain printed no JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// The table of a successful `nudge explain`.
async fn explain_table(cluster: &TestCluster, name: &str, env: &[(&str, &str)]) -> String {
    let output = explain(cluster, name, "table", env).await;
    assert!(
        output.status.success(),
        "nudge explain failed with {}",
        output.status
    );
    String::from_utf8(output.stdout).expect("UTF-8 table")
}

/// Waits until nudge has created its installation key Secret.
async fn wait_for_key(cluster: &TestCluster) {
    let name = cluster.nudge_config().fingerprint.key_secret;
    let secrets = cluster.api::<Secret>();
    wait_for("the installation key Secret", WAIT, || async {
        secrets.get_opt(&name).await.ok().flatten()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stamped_workload_is_explained_as_in_sync() {
    let cluster = TestCluster::start("explain-in-sync").await;
    cluster.put_configmap("app", &[("mode", "a")]).await;
    cluster.put_secret("db", &[("password", "hunter2")]).await;
    cluster
        .create_workload(
            "Deployment",
            "api",
            &[("nudge.dev/auto", "true")],
            &[],
            pod_using("app", "db"),
        )
        .await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    let stamped = wait_for_stamp(&cluster, "Deployment", "api", CONFIG_HASH, None).await;

    let report = explain_json(&cluster, "api", &[]).await;
    assert_eq!(report["verdict"]["state"], "in_sync", "{report:#}");
    assert_eq!(report["verdict"]["message"], "in sync");
    let output = &report["outputs"][0];
    assert_eq!(output["output"], CONFIG_HASH);
    assert_eq!(output["desired"], stamped.as_str());
    assert_eq!(output["stamped"], stamped.as_str());
    let references: Vec<&Value> = output["references"]
        .as_array()
        .expect("references")
        .iter()
        .collect();
    let db = references
        .iter()
        .find(|r| r["reference"] == "secret/db[password]")
        .unwrap_or_else(|| panic!("secret/db[password] in {report:#}"));
    assert!(
        db["fingerprint"]
            .as_str()
            .is_some_and(|f| f.starts_with("hmac-sha256-")),
        "{db:#}"
    );
    assert!(db["last_write"].is_string(), "{db:#}");
    assert!(
        db["from"][0]
            .as_str()
            .is_some_and(|f| f.starts_with("pod spec: env")),
        "{db:#}"
    );
    let text = report.to_string();
    assert!(!text.contains("hunter2"), "secret content in {text}");

    let table = explain_table(&cluster, "api", &[]).await;
    assert!(table.contains("secret/db[password]"), "{table}");
    assert!(table.lines().any(|l| l == "verdict: in sync"), "{table}");
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_change_is_explained_as_waiting_for_debounce() {
    let cluster = TestCluster::start("explain-debounce").await;
    cluster
        .auto_deployment("web", "app", &[("mode", "a")])
        .await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, None).await;
    // Stopped, so that nothing stamps the change explain is asked about.
    nudge.stop().await;
    cluster.put_configmap("app", &[("mode", "b")]).await;

    let debounce = [("NUDGE_ENGINE__DEBOUNCE", "60s")];
    let report = explain_json(&cluster, "web", &debounce).await;
    assert_eq!(
        report["verdict"]["state"], "waiting_for_debounce",
        "{report:#}"
    );
    let message = report["verdict"]["message"].as_str().expect("message");
    assert!(
        message.starts_with("waiting for debounce (changed ")
            && message.ends_with(", debounce 1m)"),
        "{message}"
    );
    let output = &report["outputs"][0];
    assert_ne!(output["desired"], output["stamped"], "{report:#}");

    let table = explain_table(&cluster, "web", &debounce).await;
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("verdict: waiting for debounce")),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_secret_is_explained_as_missing_config() {
    let cluster = TestCluster::start("explain-missing").await;
    cluster.put_configmap("app", &[("mode", "a")]).await;
    cluster
        .create_workload(
            "Deployment",
            "api",
            &[("nudge.dev/auto", "true")],
            &[],
            pod_using("app", "db"),
        )
        .await;
    // nudge creates the installation key; it cannot stamp without Secret db.
    let nudge = cluster.start_nudge(cluster.nudge_config());
    wait_for_key(&cluster).await;

    let report = explain_json(&cluster, "api", &[]).await;
    assert_eq!(report["verdict"]["state"], "missing_config", "{report:#}");
    assert_eq!(
        report["verdict"]["message"],
        "MissingConfig: secret db not found"
    );
    let table = explain_table(&cluster, "api", &[]).await;
    assert!(
        table
            .lines()
            .any(|l| l == "verdict: MissingConfig: secret db not found"),
        "{table}"
    );
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_workload_fails_with_a_clear_message() {
    let cluster = TestCluster::start("explain-not-found").await;
    let output = explain(&cluster, "nowhere", "table", &[]).await;
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "Deployment {}/nowhere not found",
            cluster.namespace()
        )),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_without_a_key_secret_creates_nothing() {
    let cluster = TestCluster::start("explain-read-only").await;
    cluster.put_secret("db", &[("password", "hunter2")]).await;
    cluster.put_configmap("app", &[("mode", "a")]).await;
    cluster
        .create_workload(
            "Deployment",
            "api",
            &[("nudge.dev/auto", "true")],
            &[],
            pod_using("app", "db"),
        )
        .await;
    // nudge never ran here: there is no installation key.
    let report = explain_json(&cluster, "api", &[]).await;
    assert_eq!(report["verdict"]["state"], "unknown", "{report:#}");
    let message = report["verdict"]["message"].as_str().expect("message");
    assert!(message.contains("installation key"), "{message}");
    // explain has exited: whatever it wrote, it has written.
    let key = cluster.nudge_config().fingerprint.key_secret;
    assert!(
        cluster
            .api::<Secret>()
            .get_opt(&key)
            .await
            .expect("GET")
            .is_none(),
        "explain must not create the key Secret"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_the_configuration_leaves_alone_is_explained_as_not_managed() {
    let cluster = TestCluster::start("explain-excluded").await;
    cluster.auto_deployment("web", "cfg", &[("k", "1")]).await;
    let ns = cluster.namespace().to_owned();
    let cases = [
        (
            "NUDGE_KUBERNETES__IGNORE_NAMESPACES",
            format!("[kube-system, {ns}]"),
            format!("not managed: namespace {ns} is ignored (kubernetes.ignore_namespaces)"),
        ),
        (
            "NUDGE_KUBERNETES__NAMESPACE_SELECTOR",
            "nudge.test/team in (a,b)".to_owned(),
            format!(
                "not managed: namespace {ns} does not match kubernetes.namespace_selector (nudge.test/team in (a,b))"
            ),
        ),
        (
            "NUDGE_KUBERNETES__IGNORE_KINDS",
            "[deployments]".to_owned(),
            "not managed: Deployment is turned off (kubernetes.ignore_kinds)".to_owned(),
        ),
    ];
    for (variable, value, message) in cases {
        let report = explain_json(&cluster, "web", &[(variable, value.as_str())]).await;
        assert_eq!(report["verdict"]["state"], "not_managed", "{variable}");
        assert_eq!(report["verdict"]["message"], message.as_str());
    }
    // The API server judges the selector: one the namespace matches leaves
    // the workload managed.
    let selected = [("NUDGE_KUBERNETES__NAMESPACE_SELECTOR", "!nudge.test/team")];
    let report = explain_json(&cluster, "web", &selected).await;
    assert_ne!(report["verdict"]["state"], "not_managed", "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_that_opts_out_is_explained_as_not_managed_by_that_annotation() {
    let cluster = TestCluster::start("explain-opted-out").await;
    cluster.put_configmap("cfg", &[("k", "1")]).await;
    cluster
        .create_workload(
            "Deployment",
            "web",
            &[("reloader.stakater.com/auto", "false")],
            &[],
            pod_using("cfg", "db"),
        )
        .await;
    let report = explain_json(
        &cluster,
        "web",
        &[("NUDGE_ANNOTATIONS__RELOADER_AUTO_ALL", "true")],
    )
    .await;
    assert_eq!(report["verdict"]["state"], "not_managed");
    assert_eq!(
        report["verdict"]["message"],
        "not managed: opted out by reloader.stakater.com/auto: \"false\""
    );
}
