//! Kinds beyond the built-in three: Argo Rollouts when their CRD is served
//! (Reloader's `restart` strategy through `spec.restartAt` among them),
//! `[[targets]]` entries (the OpenShift DeploymentConfig preset among them), and kinds that are not served (reported, not fatal,
//! picked up when their CRD appears). Outputs nudge gives up leave these
//! kinds, written by JSON patch, as apply removes them from the built-in ones.

use crate::support::*;
use figment::providers::Format as _;
use kube::api::{Api, DynamicObject, GroupVersionKind, PostParams};
use nudge::config::TargetConfig;
use serde_json::json;

const CONFIG_HASH: &str = "nudge.dev/config-hash";

fn rollout(name: &str, configmap: &str) -> serde_json::Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Rollout",
        "metadata": { "name": name, "annotations": { "nudge.dev/auto": "true" } },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "app": name } },
            "strategy": { "canary": { "steps": [{ "setWeight": 50 }] } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": pod_mounting_configmap(configmap),
            },
        },
    })
}

fn rollout_gvk() -> GroupVersionKind {
    GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Rollout")
}

/// The test namespace's API for `gvk`, found by discovery (it must be served).
async fn dynamic_api(cluster: &TestCluster, gvk: &GroupVersionKind) -> Api<DynamicObject> {
    let (resource, _) = kube::discovery::pinned_kind(&cluster.client(), gvk)
        .await
        .unwrap();
    Api::namespaced_with(cluster.client(), cluster.namespace(), &resource)
}

/// Creates Rollout `name` mounting `configmap` (the CRD must be served).
async fn create_rollout(cluster: &TestCluster, name: &str, configmap: &str) {
    let api = dynamic_api(cluster, &rollout_gvk()).await;
    let object: DynamicObject = serde_json::from_value(rollout(name, configmap)).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
}

async fn rollout_stamp(cluster: &TestCluster, name: &str) -> Option<String> {
    let gvk = GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Rollout");
    let (resource, _) = kube::discovery::pinned_kind(&cluster.client(), &gvk)
        .await
        .ok()?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(cluster.client(), cluster.namespace(), &resource);
    let object = api.get(name).await.ok()?;
    object.data["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH]
        .as_str()
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn argo_rollouts_are_stamped_like_deployments_when_their_crd_is_served() {
    let cluster = TestCluster::start("argo-rollouts").await;
    let _crd = cluster.ensure_crd(rollout_crd()).await;
    cluster.put_configmap("cfg", &[("k", "1")]).await;
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;

    create_rollout(&cluster, "canary", "cfg").await;
    let first = wait_for("the Rollout to be stamped", WAIT, || {
        rollout_stamp(&cluster, "canary")
    })
    .await;
    assert!(first.starts_with("sha256-"), "{first}");

    cluster.put_configmap("cfg", &[("k", "2")]).await;
    let second = wait_for("the Rollout to be stamped again", WAIT, || async {
        rollout_stamp(&cluster, "canary")
            .await
            .filter(|stamp| *stamp != first)
    })
    .await;
    assert!(second.starts_with("sha256-"), "{second}");
    nudge.stop().await;
}

/// The Rollout's only container, as stored.
async fn rollout_container(cluster: &TestCluster, name: &str) -> Option<serde_json::Value> {
    let gvk = GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Rollout");
    let (resource, _) = kube::discovery::pinned_kind(&cluster.client(), &gvk)
        .await
        .ok()?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(cluster.client(), cluster.namespace(), &resource);
    let object = api.get(name).await.ok()?;
    Some(object.data["spec"]["template"]["spec"]["containers"][0].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloaders_env_var_on_a_rollout_is_updated_in_place_and_the_pod_spec_kept() {
    let cluster = TestCluster::start("argo-reloader").await;
    let _crd = cluster.ensure_crd(rollout_crd()).await;
    cluster.put_configmap("app-cfg", &[("k", "1")]).await;
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    let mut body = rollout("reloaded", "app-cfg");
    body["metadata"]["annotations"] = json!({ "reloader.stakater.com/auto": "true" });
    body["spec"]["template"]["spec"]["containers"][0]["env"] = json!([
        { "name": "LOG_LEVEL", "value": "debug" },
        { "name": "STAKATER_APP_CFG_CONFIGMAP", "value": "before-nudge" },
    ]);
    let api = dynamic_api(&cluster, &rollout_gvk()).await;
    let object: DynamicObject = serde_json::from_value(body).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();

    let reloader_value = |container: &serde_json::Value| {
        container["env"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == "STAKATER_APP_CFG_CONFIGMAP")
            .and_then(|e| e["value"].as_str())
            .map(str::to_owned)
    };
    let container = wait_for("Reloader's env var to be written", WAIT, || async {
        let container = rollout_container(&cluster, "reloaded").await?;
        let value = reloader_value(&container)?;
        (value != "before-nudge").then_some(container)
    })
    .await;
    // The Rollout's CRD leaves the pod template schemaless, so its lists are
    // atomic to server-side apply: an apply of nudge's env var alone would
    // have replaced the whole container.
    assert_eq!(container["image"], "busybox", "{container}");
    assert_eq!(
        container["volumeMounts"][0]["name"], "config",
        "{container}"
    );
    assert_eq!(
        container["env"][0],
        json!({ "name": "LOG_LEVEL", "value": "debug" })
    );
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_kind_that_is_not_served_is_noted_in_ready_and_the_rest_works() {
    let cluster = TestCluster::start("unserved-kind").await;
    let mut config = cluster.nudge_config();
    config.targets.kinds = vec![TargetConfig::new("gizmos.nudge.invalid", "v1", "Gizmo")];
    let admin = free_port();
    config.admin.bind = admin;
    let nudge = cluster.start_nudge(config);
    let body = wait_ready(admin).await;
    assert!(
        body.contains("not stamping") && body.contains("gizmos.nudge.invalid/v1 Gizmo"),
        "{body}"
    );
    cluster.auto_deployment("web", "cfg", &[("k", "1")]).await;
    wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, None).await;
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_targets_entry_stamps_its_kind_at_its_template_path() {
    let cluster = TestCluster::start("targets-entry").await;
    let mut crd = rollout_crd();
    crd["metadata"]["name"] = json!("gadgets.nudge.test");
    crd["spec"]["group"] = json!("nudge.test");
    crd["spec"]["names"] = json!({"kind": "Gadget", "listKind": "GadgetList",
                                   "plural": "gadgets", "singular": "gadget"});
    crd["spec"]["versions"][0]["name"] = json!("v1");
    let _crd = cluster.ensure_crd(crd).await;
    cluster.put_configmap("cfg", &[("k", "1")]).await;
    let mut config = cluster.nudge_config();
    config.targets.kinds = vec![{
        let mut kind = TargetConfig::new("nudge.test", "v1", "Gadget");
        kind.template = "spec.worker.template".into();
        kind
    }];
    let nudge = cluster.start_nudge(config);

    let gvk = GroupVersionKind::gvk("nudge.test", "v1", "Gadget");
    let (resource, _) = kube::discovery::pinned_kind(&cluster.client(), &gvk)
        .await
        .unwrap();
    let api: Api<DynamicObject> =
        Api::namespaced_with(cluster.client(), cluster.namespace(), &resource);
    let gadget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "nudge.test/v1", "kind": "Gadget",
        "metadata": { "name": "g", "annotations": { "nudge.dev/configmap-cfg": "cfg" } },
        "spec": { "worker": { "template": { "spec": pod_mounting_configmap("cfg") } } },
    }))
    .unwrap();
    api.create(&PostParams::default(), &gadget).await.unwrap();
    let stamp = wait_for("the Gadget to be stamped", WAIT, || async {
        let object = api.get("g").await.ok()?;
        object.data["spec"]["worker"]["template"]["metadata"]["annotations"]
            ["nudge.dev/checksum-cfg"]
            .as_str()
            .map(str::to_owned)
    })
    .await;
    assert!(stamp.starts_with("sha256-"), "{stamp}");
    nudge.stop().await;
}

/// Whether the cluster serves Argo Rollouts now.
async fn argo_served(cluster: &TestCluster) -> bool {
    let gvk = GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Rollout");
    kube::discovery::pinned_kind(&cluster.client(), &gvk)
        .await
        .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_argo_rollouts_one_line_names_the_kind_and_ready_notes_nothing() {
    let cluster = TestCluster::start("no-argo").await;
    let served_before = argo_served(&cluster).await;
    let mut config = cluster.nudge_config();
    let admin = free_port();
    config.admin.bind = admin;
    let log = std::env::temp_dir().join(format!("{}-nudge.log", cluster.namespace()));
    let nudge = cluster.spawn_nudge_binary(&config, &log);
    let body = wait_ready(admin).await;
    if served_before || argo_served(&cluster).await {
        // A cluster with Argo (or a shared one where another test installed
        // its CRD meanwhile): nothing to see here.
        eprintln!("Argo Rollouts are served by this cluster; not checked");
        nudge.stop().await;
        return;
    }
    assert!(!body.contains("Rollout"), "no /ready note: {body}");
    nudge.stop().await;
    let logs = std::fs::read_to_string(&log).unwrap();
    // The start-up summary lists every registered kind (Rollouts are, waiting
    // for their CRD); apart from it, one line.
    let lines: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("Rollout") && !l.contains("watching"))
        .collect();
    assert_eq!(lines.len(), 1, "one line about Argo Rollouts: {lines:#?}");
    assert!(
        lines[0].contains("argoproj.io/v1alpha1 Rollout is not served by this cluster")
            && !lines[0].contains("Failed to parse"),
        "{}",
        lines[0]
    );
}

/// A CRD for `<plural>.<group>` `kind` (`v1`), made from the Rollout one.
fn crd_for(group: &str, kind: &str, plural: &str) -> serde_json::Value {
    let mut crd = rollout_crd();
    crd["metadata"]["name"] = json!(format!("{plural}.{group}"));
    crd["spec"]["group"] = json!(group);
    crd["spec"]["names"] = json!({"kind": kind, "listKind": format!("{kind}List"),
                                   "plural": plural, "singular": kind.to_lowercase()});
    crd["spec"]["versions"][0]["name"] = json!("v1");
    crd
}

/// Creates a `group/v1` `kind` object named `name` with its pod template at
/// `spec.template`, referencing ConfigMap `cfg`; returns its API.
async fn create_custom(
    cluster: &TestCluster,
    group: &str,
    kind: &str,
    name: &str,
) -> Api<DynamicObject> {
    let api = dynamic_api(cluster, &GroupVersionKind::gvk(group, "v1", kind)).await;
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": kind,
        "metadata": { "name": name, "annotations": { "nudge.dev/configmap-cfg": "cfg" } },
        "spec": { "template": { "spec": pod_mounting_configmap("cfg") } },
    }))
    .unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
    api
}

async fn template_stamp(api: &Api<DynamicObject>, name: &str) -> Option<String> {
    let object = api.get(name).await.ok()?;
    object.data["spec"]["template"]["metadata"]["annotations"]["nudge.dev/checksum-cfg"]
        .as_str()
        .map(str::to_owned)
}

/// How long a kind's CRD may take to be noticed: discovery is checked again
/// 5 s after start, then at most every 30 s; a watch lists again within 30 s.
const PICKED_UP: std::time::Duration = std::time::Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_targets_entry_whose_crd_appears_later_is_stamped_without_a_restart() {
    let cluster = TestCluster::start("late-crd").await;
    cluster.put_configmap("cfg", &[("k", "1")]).await;
    let (group, kind) = ("late.nudge.test", "Sprocket");
    let mut config = cluster.nudge_config();
    config.targets.kinds = vec![TargetConfig::new(group, "v1", kind)];
    let admin = free_port();
    config.admin.bind = admin;
    let nudge = cluster.start_nudge(config);
    // Ready at once: the absent kind is noted, never waited for.
    let body = wait_ready(admin).await;
    assert!(
        body.contains("not stamping")
            && body.contains("late.nudge.test/v1 Sprocket")
            && body.contains("(404): is its CRD installed?")
            && !body.contains("Failed to parse"),
        "{body}"
    );

    let _crd = cluster.ensure_crd(crd_for(group, kind, "sprockets")).await;
    let api = create_custom(&cluster, group, kind, "s").await;
    let stamp = wait_for("the Sprocket to be stamped", PICKED_UP, || {
        template_stamp(&api, "s")
    })
    .await;
    assert!(stamp.starts_with("sha256-"), "{stamp}");
    let (status, body) = http_get(admin, "/ready").await.unwrap();
    assert_eq!(status, 200);
    assert!(
        !body.contains("Sprocket"),
        "the note is gone once served: {body}"
    );
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_target_whose_crd_is_absent_does_not_block_ready_and_starts_when_it_appears() {
    let cluster = TestCluster::start("custom-late-crd").await;
    cluster.put_configmap("cfg", &[("k", "1")]).await;
    let (group, kind) = ("custom.nudge.test", "Cog");
    let mut config = cluster.nudge_config();
    let admin = free_port();
    config.admin.bind = admin;
    let template = nudge::target::TemplatePath::parse("spec.template").unwrap();
    let cogs = nudge::target::KubeTarget::new(
        cluster.client(),
        nudge::target::WorkloadKind::new(group, "v1", kind, template),
        "cogs",
        nudge::target::TargetSettings::from_config(&config),
    );
    let shutdown = tokio_util::sync::CancellationToken::new();
    let controller = nudge::Controller::from_config(config, cluster.client())
        .operate_as_configured()
        .with_target(std::sync::Arc::new(cogs));
    let task = tokio::spawn(controller.run(shutdown.clone()));
    let body = wait_ready(admin).await;
    assert!(
        body.contains("custom.nudge.test/v1 Cog")
            && body.contains("(404): is its CRD installed?")
            && !body.contains("Failed to parse"),
        "{body}"
    );

    let _crd = cluster.ensure_crd(crd_for(group, kind, "cogs")).await;
    let api = create_custom(&cluster, group, kind, "c").await;
    let stamp = wait_for("the Cog to be stamped", PICKED_UP, || {
        template_stamp(&api, "c")
    })
    .await;
    assert!(stamp.starts_with("sha256-"), "{stamp}");
    let (_, body) = http_get(admin, "/ready").await.unwrap();
    assert!(
        !body.contains("Cog"),
        "the note is gone once served: {body}"
    );
    shutdown.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn argo_rollouts_installed_after_start_are_stamped_without_a_restart() {
    let cluster = TestCluster::start("late-argo").await;
    cluster.put_configmap("cfg", &[("k", "1")]).await;
    let admin = free_port();
    let mut config = cluster.nudge_config();
    config.admin.bind = admin;
    let nudge = cluster.start_nudge(config);
    let body = wait_ready(admin).await;
    assert!(!body.contains("Rollout"), "no /ready note for Argo: {body}");
    let _crd = cluster.ensure_crd(rollout_crd()).await;
    create_rollout(&cluster, "late", "cfg").await;
    let stamp = wait_for("the Rollout to be stamped", PICKED_UP, || {
        rollout_stamp(&cluster, "late")
    })
    .await;
    assert!(stamp.starts_with("sha256-"), "{stamp}");
    nudge.stop().await;
}

/// The `[[targets]]` preset for `kind` as `config.example.toml` documents it
/// (commented out), read as nudge reads its configuration.
fn example_preset(kind: &str) -> Vec<TargetConfig> {
    let example = include_str!("../../config.example.toml");
    let lines: Vec<&str> = example.lines().collect();
    let kind_line = format!("# kind = \"{kind}\"");
    let at = lines
        .iter()
        .position(|l| *l == kind_line)
        .expect("the preset");
    let start = lines[..at]
        .iter()
        .rposition(|l| *l == "# [[targets]]")
        .expect("its [[targets]] line");
    let table: Vec<&str> = lines[start..]
        .iter()
        .take_while(|l| l.starts_with("# ") && (l.contains(" = ") || l.contains("[[")))
        .map(|l| &l[2..])
        .collect();
    let figment = figment::Figment::from(figment::providers::Toml::string(&table.join("\n")));
    nudge::config::Config::from_figment(&figment)
        .expect("the preset parses")
        .targets
        .kinds
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deployment_config_preset_stamps_deployment_configs() {
    let cluster = TestCluster::start("openshift-dc").await;
    let (group, kind) = ("apps.openshift.io", "DeploymentConfig");
    let _crd = cluster
        .ensure_crd(crd_for(group, kind, "deploymentconfigs"))
        .await;
    cluster.put_configmap("cfg", &[("k", "1")]).await;
    let mut config = cluster.nudge_config();
    config.targets.kinds = example_preset(kind);
    assert_eq!(config.targets.kinds.len(), 1);
    assert_eq!(config.targets.kinds[0].group, group);
    assert_eq!(config.targets.kinds[0].template, "spec.template");
    let nudge = cluster.start_nudge(config);
    let api = create_custom(&cluster, group, kind, "frontend").await;
    let first = wait_for("the DeploymentConfig stamped", WAIT, || {
        template_stamp(&api, "frontend")
    })
    .await;
    cluster.put_configmap("cfg", &[("k", "2")]).await;
    wait_for("the DeploymentConfig stamped again", WAIT, || async {
        template_stamp(&api, "frontend")
            .await
            .filter(|stamp| *stamp != first)
    })
    .await;
    nudge.stop().await;
}

/// Patches object `name` as the test's user would (merge patch, field
/// manager `test-user`).
async fn user_merge_patch(api: &Api<DynamicObject>, name: &str, patch: serde_json::Value) {
    let params = kube::api::PatchParams {
        field_manager: Some("test-user".into()),
        ..kube::api::PatchParams::default()
    };
    api.patch(name, &params, &kube::api::Patch::Merge(&patch))
        .await
        .unwrap();
}

/// The annotations of `object` at `pointer` (`/metadata`, `/spec/template/metadata`).
fn annotations_at(
    object: &DynamicObject,
    pointer: &str,
) -> std::collections::BTreeMap<String, String> {
    let value = serde_json::to_value(object).unwrap();
    value
        .pointer(&format!("{pointer}/annotations"))
        .cloned()
        .and_then(|a| serde_json::from_value(a).ok())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_annotation_output_nudge_gave_up_leaves_a_rollout_at_its_next_write() {
    let cluster = TestCluster::start("argo-given-up").await;
    let _crd = cluster.ensure_crd(rollout_crd()).await;
    cluster.put_configmap("a", &[("k", "1")]).await;
    cluster.put_configmap("b", &[("k", "1")]).await;
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    let mut body = rollout("web", "a");
    body["metadata"]["annotations"] =
        json!({ "nudge.dev/configmap-a": "a", "nudge.dev/configmap-b": "b" });
    // Under nudge's names, but written by the user: never nudge's to remove.
    body["spec"]["template"]["metadata"]["annotations"] =
        json!({ "nudge.dev/checksum-c": "by-hand", "team": "web" });
    let api = dynamic_api(&cluster, &rollout_gvk()).await;
    let object: DynamicObject = serde_json::from_value(body).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
    let template = |object: &DynamicObject| annotations_at(object, "/spec/template/metadata");
    let first = wait_for("both references stamped", WAIT, || async {
        let stamped = template(&api.get("web").await.ok()?);
        stamped
            .contains_key("nudge.dev/checksum-b")
            .then_some(stamped)
    })
    .await;

    // The user drops reference b. Like apply on a Deployment, nudge takes its
    // output away with its next write, here for a change of a.
    user_merge_patch(
        &api,
        "web",
        json!({ "metadata": { "annotations": { "nudge.dev/configmap-b": null } } }),
    )
    .await;
    wait_configmaps_tracked(&nudge, 1.0).await;
    cluster.put_configmap("a", &[("k", "2")]).await;
    let after = wait_for("a's new stamp", WAIT, || async {
        let stamped = template(&api.get("web").await.ok()?);
        (stamped.get("nudge.dev/checksum-a") != first.get("nudge.dev/checksum-a"))
            .then_some(stamped)
    })
    .await;
    assert!(!after.contains_key("nudge.dev/checksum-b"), "{after:?}");
    assert_eq!(after["nudge.dev/checksum-c"], "by-hand");
    assert_eq!(after["team"], "web");
    let own = annotations_at(&api.get("web").await.unwrap(), "/metadata");
    assert!(own.contains_key("nudge.dev/last-updated"), "{own:?}");
    assert_eq!(own["nudge.dev/configmap-a"], "a");
    nudge.stop().await;
}

/// A CRD like Argo Rollouts' own, whose schema keys the pod template's
/// containers and their env by name (the Rollout CRD of the double's tests
/// leaves the template schemaless).
fn keyed_crd(group: &str, kind: &str, plural: &str) -> serde_json::Value {
    let keyed = |items: serde_json::Value| {
        json!({ "type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"], "items": items })
    };
    let env = keyed(json!({ "type": "object", "required": ["name"],
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": { "name": { "type": "string" }, "value": { "type": "string" } } }));
    let containers = keyed(json!({ "type": "object", "required": ["name"],
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": { "name": { "type": "string" }, "env": env } }));
    let open = |properties: serde_json::Value| {
        json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true,
                "properties": properties })
    };
    let mut crd = crd_for(group, kind, plural);
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = open(
        json!({ "template": open(json!({ "spec": open(json!({ "containers": containers })) })) }),
    );
    crd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_env_var_output_nudge_gave_up_loses_the_value_nudge_wrote() {
    let cluster = TestCluster::start("keyed-given-up").await;
    let (group, kind) = ("keyed.nudge.test", "Widget");
    let _crd = cluster.ensure_crd(keyed_crd(group, kind, "widgets")).await;
    cluster.put_configmap("cfg", &[("k", "1")]).await;
    cluster.put_configmap("other", &[("k", "1")]).await;
    let mut config = cluster.nudge_config();
    config.targets.kinds = vec![TargetConfig::new(group, "v1", kind)];
    let nudge = cluster.start_nudge(config);
    let api = dynamic_api(&cluster, &GroupVersionKind::gvk(group, "v1", kind)).await;
    let mut pod = pod_mounting_configmap("cfg");
    pod["containers"][0]["env"] = json!([
        { "name": "LOG_LEVEL", "value": "debug" },
        { "name": "STAKATER_CFG_CONFIGMAP", "value": "before-nudge" },
        // Reloader's, for an object nothing references now: never nudge's.
        { "name": "STAKATER_GONE_CONFIGMAP", "value": "by-reloader" },
    ]);
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": kind,
        "metadata": { "name": "w", "annotations": {
            "reloader.stakater.com/auto": "true", "nudge.dev/configmap-other": "other" } },
        "spec": { "template": { "spec": pod } },
    }))
    .unwrap();
    api.create(&PostParams::default(), &widget).await.unwrap();
    let env = |object: &DynamicObject| {
        object.data["spec"]["template"]["spec"]["containers"][0]["env"].clone()
    };
    wait_for("Reloader's env var to be written", WAIT, || async {
        let env = env(&api.get("w").await.ok()?);
        (env[1]["value"] != "before-nudge").then_some(())
    })
    .await;
    let first = template_annotation(&api, "w", "nudge.dev/checksum-other").await;

    user_merge_patch(
        &api,
        "w",
        json!({ "metadata": { "annotations": { "reloader.stakater.com/auto": null } } }),
    )
    .await;
    wait_configmaps_tracked(&nudge, 1.0).await;
    cluster.put_configmap("other", &[("k", "2")]).await;
    wait_for("other's new stamp", WAIT, || async {
        let now = template_annotation(&api, "w", "nudge.dev/checksum-other").await;
        (now != first).then_some(())
    })
    .await;
    assert_eq!(
        env(&api.get("w").await.unwrap()),
        json!([
            { "name": "LOG_LEVEL", "value": "debug" },
            // The entry is the user's; the value was nudge's, as apply leaves it.
            { "name": "STAKATER_CFG_CONFIGMAP" },
            { "name": "STAKATER_GONE_CONFIGMAP", "value": "by-reloader" },
        ])
    );
    nudge.stop().await;
}

/// Pod-template annotation `key` of object `name`, when set.
async fn template_annotation(api: &Api<DynamicObject>, name: &str, key: &str) -> Option<String> {
    let object = api.get(name).await.ok()?;
    annotations_at(&object, "/spec/template/metadata").remove(key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloaders_restart_strategy_restarts_a_rollout_by_restart_at_once_per_change() {
    let cluster = TestCluster::start("argo-restart").await;
    let _crd = cluster.ensure_crd(rollout_crd()).await;
    cluster.put_configmap("app-cfg", &[("k", "1")]).await;
    let mut body = rollout("restarted", "app-cfg");
    body["metadata"]["annotations"] = json!({
        "reloader.stakater.com/auto": "true",
        "reloader.stakater.com/rollout-strategy": "restart",
    });
    // Left by Reloader under its other strategy: not written under this one.
    body["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{ "name": "STAKATER_APP_CFG_CONFIGMAP", "value": "from-reloader" }]);
    let api = dynamic_api(&cluster, &rollout_gvk()).await;
    let object: DynamicObject = serde_json::from_value(body).unwrap();
    let template = api
        .create(&PostParams::default(), &object)
        .await
        .unwrap()
        .data["spec"]["template"]
        .clone();
    let state = |object: &DynamicObject| annotations_at(object, "/metadata").remove(CONFIG_HASH);
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;

    // Migrating from Reloader restarts nothing: the fingerprint is adopted.
    let adopted = wait_for("the adoption", WAIT, || async {
        state(&api.get("restarted").await.ok()?)
    })
    .await;
    let seen = api.get("restarted").await.unwrap();
    assert!(
        seen.data["spec"].get("restartAt").is_none(),
        "{:?}",
        seen.data
    );
    assert_eq!(seen.data["spec"]["template"], template);

    // A change restarts the pods by spec.restartAt, the template untouched,
    // and starts a rollout nudge follows.
    cluster.put_configmap("app-cfg", &[("k", "2")]).await;
    let restarted = wait_for("the restart", WAIT, || async {
        let object = api.get("restarted").await.ok()?;
        (state(&object)? != adopted).then_some(object)
    })
    .await;
    let restart_at = restarted.data["spec"]["restartAt"]
        .as_str()
        .expect("spec.restartAt")
        .to_owned();
    assert!(
        restart_at.parse::<k8s_openapi::jiff::Timestamp>().is_ok() && !restart_at.contains('.'),
        "RFC 3339 in whole seconds, as Argo keeps it: {restart_at}"
    );
    assert_eq!(restarted.data["spec"]["template"], template);
    let marker = annotations_at(&restarted, "/metadata")
        .remove("nudge.dev/rollout")
        .expect("the rollout in flight");
    let marker: serde_json::Value = serde_json::from_str(&marker).unwrap();
    assert_eq!(marker["revision"], 1, "{marker}");
    assert_eq!(marker["stamp"][0]["key"], CONFIG_HASH, "{marker}");

    // Argo Rollouts restarted every pod: the rollout is complete.
    let generation = restarted.metadata.generation.unwrap();
    let status = json!({ "status": { "observedGeneration": generation.to_string(),
        "phase": "Healthy", "restartedAt": restart_at } });
    api.patch_status(
        "restarted",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&status),
    )
    .await
    .unwrap();
    let history = wait_for("the rollout recorded", WAIT, || async {
        let object = api.get("restarted").await.ok()?;
        let own = annotations_at(&object, "/metadata");
        let history: Vec<serde_json::Value> =
            serde_json::from_str(own.get("nudge.dev/history")?).ok()?;
        (!own.contains_key("nudge.dev/rollout")).then_some(history)
    })
    .await;
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0]["outcome"], "complete", "{history:?}");
    nudge.stop().await;

    // A controller restart restarts nothing.
    let before = api.get("restarted").await.unwrap();
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    // A Rollout made now is stamped after the list that had `restarted` in it
    // (one watch, in order); then nothing is left to do.
    let mut probe = rollout("probe", "app-cfg");
    probe["metadata"]["annotations"] = json!({ "nudge.dev/configmap-cfg": "app-cfg" });
    let probe: DynamicObject = serde_json::from_value(probe).unwrap();
    api.create(&PostParams::default(), &probe).await.unwrap();
    wait_for("the probe Rollout stamped", WAIT, || async {
        let object = api.get("probe").await.ok()?;
        annotations_at(&object, "/spec/template/metadata")
            .get("nudge.dev/checksum-cfg")
            .map(drop)
    })
    .await;
    wait_idle(&nudge).await;
    let after = api.get("restarted").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "not written at all"
    );
    nudge.stop().await;
}

/// Waits until nudge tracks `count` ConfigMap references: a workload event that
/// dropped one has been processed.
async fn wait_configmaps_tracked(nudge: &impl Running, count: f64) {
    let series = r#"nudge_source_tracked_references{source="configmap"}"#;
    wait_for(
        &format!("{count} ConfigMap references tracked"),
        WAIT,
        || async { (nudge.metrics_at().sum(series).await? == count).then_some(()) },
    )
    .await;
}

/// How nudge records an outcome (`Target::annotate`): a merge patch on the
/// workload's own annotations, guarded by the resourceVersion of the copy it
/// has, read back by status only. A stale copy is a conflict (recording reads
/// the workload again), and a workload gone since is no error.
#[tokio::test(flavor = "multi_thread")]
async fn an_outcome_annotation_is_guarded_by_the_copy_and_a_gone_workload_is_no_error() {
    use k8s_openapi::api::apps::v1::Deployment;
    use nudge::target::{KubeTarget, Target, TargetError, TemplatePath, Workload, WorkloadKind};
    use std::collections::BTreeMap;

    let cluster = TestCluster::start("annotate-guarded").await;
    cluster
        .create_workload("Deployment", "guarded", &[], &[], plain_pod())
        .await;
    let kind = WorkloadKind::new(
        "apps",
        "v1",
        "Deployment",
        TemplatePath::parse("spec.template").unwrap(),
    );
    let target = KubeTarget::new(
        cluster.client(),
        kind.clone(),
        "deployments",
        nudge::target::TargetSettings::from_config(&cluster.nudge_config()),
    );
    let read = || async {
        Workload::from_object(&kind, cluster.workload("Deployment", "guarded").await).unwrap()
    };
    let set = |value: &str| BTreeMap::from([("nudge.dev/history".to_owned(), Some(value.into()))]);

    // The Deployment controller writes its status meanwhile: a copy it
    // outdates is a conflict, read again as recording does.
    let mut copy = read().await;
    let mut attempts = 0;
    while let Err(error) = target.annotate(&copy, &set("first")).await {
        attempts += 1;
        assert!(
            matches!(error, TargetError::Conflict { .. }) && attempts < 20,
            "{error:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        copy = read().await;
    }
    let written = cluster.workload("Deployment", "guarded").await;
    assert_eq!(
        written["metadata"]["annotations"]["nudge.dev/history"],
        "first"
    );

    let stale = target.annotate(&copy, &set("second")).await;
    assert!(
        matches!(stale, Err(TargetError::Conflict { .. })),
        "{stale:?}"
    );
    let kept = cluster.workload("Deployment", "guarded").await;
    assert_eq!(
        kept["metadata"]["annotations"]["nudge.dev/history"],
        "first"
    );

    let current = read().await;
    cluster.delete::<Deployment>("guarded").await;
    let gone = target.annotate(&current, &set("third")).await;
    assert!(matches!(gone, Ok(false)), "{gone:?}");
}
