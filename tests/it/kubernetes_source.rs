//! Kubernetes objects of a configured kind as a config source
//! (`[sources.kubernetes.<name>]`): a custom resource's watched fields roll its
//! workloads once, its other fields roll nothing, and a kind whose CRD appears
//! after nudge started is picked up without a restart.

use crate::support::*;
use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use nudge::config::{Config, KubernetesSourceConfig};
use serde_json::{Value, json};

/// A CRD for `<plural>.<group>` `kind` (`v1`, namespaced, status subresource).
fn crd_for(group: &str, kind: &str, plural: &str) -> Value {
    let mut crd = rollout_crd();
    crd["metadata"]["name"] = json!(format!("{plural}.{group}"));
    crd["spec"]["group"] = json!(group);
    crd["spec"]["names"] = json!({"kind": kind, "listKind": format!("{kind}List"),
                                   "plural": plural, "singular": kind.to_lowercase()});
    crd["spec"]["versions"][0]["name"] = json!("v1");
    crd
}

/// The test namespace's API for `group/v1` `kind` (it must be served).
async fn objects(cluster: &TestCluster, group: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, "v1", kind);
    let (resource, _) = kube::discovery::pinned_kind(&cluster.client(), &gvk)
        .await
        .unwrap();
    Api::namespaced_with(cluster.client(), cluster.namespace(), &resource)
}

async fn create(api: &Api<DynamicObject>, body: Value) {
    let object: DynamicObject = serde_json::from_value(body).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
}

async fn merge(api: &Api<DynamicObject>, name: &str, patch: Value) {
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// `config` with the source `name` over `group/v1` `kind`, fingerprinting
/// `fields`.
fn with_source(mut config: Config, name: &str, group: &str, kind: &str, fields: &[&str]) -> Config {
    let mut source = KubernetesSourceConfig::new(group, "v1", kind);
    source.fields = fields.iter().map(|f| (*f).to_owned()).collect();
    config.sources.kubernetes.insert(name.to_owned(), source);
    config
}

const STAMP: &str = "nudge.dev/checksum-main";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_resource_rolls_its_workload_once_per_change_of_a_watched_field_only() {
    let cluster = TestCluster::start("cr-source").await;
    let (group, kind) = ("flags.objsrc.nudge.test", "FeatureFlags");
    let _crd = cluster
        .ensure_crd(crd_for(group, kind, "featureflags"))
        .await;
    let api = objects(&cluster, group, kind).await;
    let api_version = format!("{group}/v1");
    create(
        &api,
        json!({
            "apiVersion": api_version, "kind": kind,
            "metadata": { "name": "checkout" },
            "spec": { "flags": { "new-cart": true }, "comment": "launch week" },
        }),
    )
    .await;
    let mut config = with_source(
        cluster.nudge_config(),
        "flags",
        group,
        kind,
        &["/spec/flags"],
    );
    // The sentinel's field is watched too.
    config
        .sources
        .kubernetes
        .get_mut("flags")
        .unwrap()
        .fields
        .push("/spec/round".into());
    let nudge = cluster.start_ready_nudge(config).await;
    cluster
        .create_workload(
            "Deployment",
            "shop",
            &[("nudge.dev/flags-main", "checkout")],
            &[],
            plain_pod(),
        )
        .await;
    let first = wait_for_stamp(&cluster, "Deployment", "shop", STAMP, None).await;
    assert!(first.starts_with("sha256-"), "{first}");
    let sentinel = SourceSentinel::create(
        api.clone(),
        cluster.api(),
        (&api_version, kind),
        "flags",
        "round",
    )
    .await;
    let metrics = nudge.metrics_at();

    // A watched field changes: one stamp.
    let writes = cluster.patch_counter("Deployment", "shop").await;
    let seen = metrics.observations("flags").await;
    merge(
        &api,
        "checkout",
        json!({ "spec": { "flags": { "new-cart": false } } }),
    )
    .await;
    let second = wait_for_stamp(&cluster, "Deployment", "shop", STAMP, Some(&first)).await;
    sentinel.quiesce(&nudge, seen, 1).await;
    assert_eq!(writes.count(&cluster).await, 1, "one rollout per change");
    assert_eq!(
        cluster.template_annotations("Deployment", "shop").await[STAMP],
        second
    );

    // Fields outside the selection change, in the spec, then the status:
    // nothing, each proven after its own fetch.
    let writes = cluster.patch_counter("Deployment", "shop").await;
    let before = cluster.rollout_marker("Deployment", "shop").await;
    let seen = metrics.observations("flags").await;
    merge(
        &api,
        "checkout",
        json!({ "spec": { "comment": "after launch" } }),
    )
    .await;
    sentinel.quiesce(&nudge, seen, 1).await;
    let seen = metrics.observations("flags").await;
    api.patch_status(
        "checkout",
        &PatchParams::default(),
        &Patch::Merge(&json!({ "status": { "synced": true } })),
    )
    .await
    .unwrap();
    sentinel.quiesce(&nudge, seen, 1).await;
    assert_eq!(
        writes.count(&cluster).await,
        0,
        "an ignored field rolls nothing"
    );
    assert_no_rollout(&before, &cluster.rollout_marker("Deployment", "shop").await);

    // Observed like every source, and named in the stamp's Event.
    let text = metrics.text().await.unwrap();
    assert!(
        text.lines().any(
            |l| l.starts_with(r#"nudge_source_observations_total{source="flags"}"#)
                && !l.ends_with(" 0")
        ),
        "{text}"
    );
    let events = wait_for("a ConfigChanged Event naming the object", WAIT, || async {
        let events = cluster.events_for("shop", "ConfigChanged").await;
        events.into_iter().find(|e| {
            e.related.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some("checkout")
            })
        })
    })
    .await;
    assert_eq!(
        events.related.unwrap().api_version.as_deref(),
        Some(api_version.as_str())
    );
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_whose_crd_appears_after_start_is_noted_then_watched_without_a_restart() {
    let cluster = TestCluster::start("late-cr-source").await;
    let (group, kind) = ("late.objsrc.nudge.test", "Gizmo");
    let mut config = with_source(cluster.nudge_config(), "gizmo", group, kind, &["/spec"]);
    let admin = free_port();
    config.admin.bind = admin;
    let nudge = cluster.start_nudge(config);
    // Ready at once: the absent kind is noted, never waited for.
    let body = wait_ready(admin).await;
    assert!(
        body.contains("not watching source gizmo")
            && body.contains("late.objsrc.nudge.test/v1 Gizmo")
            && body.contains("(404): is its CRD installed?")
            && !body.contains("Failed to parse"),
        "{body}"
    );
    cluster
        .create_workload(
            "Deployment",
            "web",
            &[("nudge.dev/gizmo-main", "g")],
            &[],
            plain_pod(),
        )
        .await;

    let _crd = cluster.ensure_crd(crd_for(group, kind, "gizmos")).await;
    let api = objects(&cluster, group, kind).await;
    create(
        &api,
        json!({
            "apiVersion": format!("{group}/v1"), "kind": kind,
            "metadata": { "name": "g" }, "spec": { "size": 1 },
        }),
    )
    .await;
    let first = wait_for("the Deployment to be stamped", PICKED_UP, || async {
        let annotations = cluster.template_annotations("Deployment", "web").await;
        annotations.get(STAMP).cloned()
    })
    .await;
    let (status, body) = http_get(admin, "/ready").await.unwrap();
    assert_eq!(status, 200);
    assert!(
        !body.contains("Gizmo"),
        "the note is gone once served: {body}"
    );

    // Watched from then on.
    merge(&api, "g", json!({ "spec": { "size": 2 } })).await;
    wait_for_stamp(&cluster, "Deployment", "web", STAMP, Some(&first)).await;
    nudge.stop().await;
}

/// How long a kind's CRD may take to be noticed: discovery is checked again
/// 5 s after start, then at most every 30 s.
const PICKED_UP: std::time::Duration = std::time::Duration::from_secs(60);

/// `nudge explain` with the source configured by environment variables: the
/// reference, its fingerprint, and its last write (so a fresh change waits
/// for debounce, as a ConfigMap's does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_reads_a_custom_resource_reference_and_dates_its_change() {
    let cluster = TestCluster::start("explain-cr-source").await;
    let (group, kind) = ("explain.objsrc.nudge.test", "Widget");
    let _crd = cluster.ensure_crd(crd_for(group, kind, "widgets")).await;
    let api = objects(&cluster, group, kind).await;
    create(
        &api,
        json!({
            "apiVersion": format!("{group}/v1"), "kind": kind,
            "metadata": { "name": "w" }, "spec": { "size": 1 },
        }),
    )
    .await;
    cluster
        .create_workload(
            "Deployment",
            "api",
            &[("nudge.dev/widget-main", "w")],
            &[],
            plain_pod(),
        )
        .await;
    let nudge = cluster.start_nudge(with_source(
        cluster.nudge_config(),
        "widget",
        group,
        kind,
        &["/spec"],
    ));
    let stamped = wait_for_stamp(&cluster, "Deployment", "api", STAMP, None).await;
    // Stopped, so that nothing stamps the change explain is asked about.
    nudge.stop().await;
    merge(&api, "w", json!({ "spec": { "size": 2 } })).await;

    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_nudge"))
        .args([
            "explain",
            "deployment/api",
            "-n",
            cluster.namespace(),
            "-o",
            "json",
        ])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("KUBECONFIG", cluster.kubeconfig())
        .env("NUDGE_KUBERNETES__NAMESPACE", cluster.namespace())
        .env("NUDGE_ENGINE__DEBOUNCE", "60s")
        .env("NUDGE_SOURCES__KUBERNETES__WIDGET__GROUP", group)
        .env("NUDGE_SOURCES__KUBERNETES__WIDGET__VERSION", "v1")
        .env("NUDGE_SOURCES__KUBERNETES__WIDGET__KIND", kind)
        .env("NUDGE_SOURCES__KUBERNETES__WIDGET__FIELDS", "[/spec]")
        .output()
        .await
        .expect("run nudge explain");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        report["verdict"]["state"], "waiting_for_debounce",
        "{report:#}"
    );
    let output = &report["outputs"][0];
    assert_eq!(output["stamped"], stamped.as_str(), "{report:#}");
    assert_ne!(output["desired"], output["stamped"], "{report:#}");
    let reference = &output["references"][0];
    assert_eq!(reference["reference"], "widget/w", "{report:#}");
    assert!(reference["last_write"].is_string(), "{report:#}");
    assert!(
        reference["fingerprint"]
            .as_str()
            .is_some_and(|f| f.starts_with("sha256-")),
        "{report:#}"
    );
}
