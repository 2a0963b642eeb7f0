//! Snapshots (design §5e): the copies nudge makes of the ConfigMaps and
//! Secrets a workload's pod template references, as kube-apiserver and
//! kube-controller-manager treat them (immutable, collected with their
//! workload), and what nudge does with them.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use nudge::__private::copies::{Copier, CopyError, CopyMetrics, Operation};
use nudge::__private::fingerprint::{FingerprintKey, ObjectData, ObjectKind, native_object};
use nudge::__private::model::{KeySelection, WorkloadId};
use nudge::__private::snapshot::{CopyPlan, Owner, SnapshotKey, SnapshotNames};

use crate::support::*;

fn mk_names() -> SnapshotNames {
    nudge::__private::annotations::AnnotationScheme::default().snapshot_names()
}

fn mk_key() -> FingerprintKey {
    nudge::__private::crate_fns::fingerprint_key(vec![7; 32]).unwrap()
}

fn mk_copier(cluster: &TestCluster) -> (Copier, Arc<CopyMetrics>) {
    let metrics = Arc::new(CopyMetrics::default());
    let copier = Copier::new(
        cluster.client(),
        mk_key(),
        mk_names(),
        "nudge",
        metrics.clone(),
    );
    (copier, metrics)
}

/// Deployment `name` (with nothing for nudge to do) and its owner reference.
async fn mk_owner(cluster: &TestCluster, name: &str) -> (WorkloadId, Owner) {
    cluster
        .create_workload("Deployment", name, &[], &[], plain_pod())
        .await;
    let deployment = cluster.api::<Deployment>().get(name).await.unwrap();
    let owner = Owner {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        name: name.into(),
        uid: deployment.uid().unwrap(),
    };
    let id = WorkloadId::new(
        nudge::__private::crate_fns::deployment(),
        cluster.namespace(),
        name,
    );
    (id, owner)
}

async fn config_map_data(cluster: &TestCluster, name: &str) -> ObjectData {
    ObjectData::from_config_map(&cluster.api::<ConfigMap>().get(name).await.unwrap())
}

/// The plan copying ConfigMap `name` as it is now, narrowed to `keys`.
async fn plan_config_map(
    cluster: &TestCluster,
    id: &WorkloadId,
    name: &str,
    keys: KeySelection,
) -> CopyPlan {
    let data = config_map_data(cluster, name).await.narrowed(&keys);
    let fingerprint = native_object(ObjectKind::ConfigMap, &data, &mk_key());
    let key = SnapshotKey::new(ObjectKind::ConfigMap, name, keys);
    CopyPlan::new(id, key, fingerprint.as_digest().unwrap().into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_is_made_once_immutable_owned_by_its_workload_and_reused_after() {
    let cluster = TestCluster::start("snap-copy").await;
    cluster
        .put_configmap("app-config", &[("level", "debug"), ("size", "3")])
        .await;
    let (id, owner) = mk_owner(&cluster, "web").await;
    let (copier, metrics) = mk_copier(&cluster);
    let plan = plan_config_map(&cluster, &id, "app-config", KeySelection::All).await;

    let ensured = copier
        .ensure(cluster.namespace(), &owner, std::slice::from_ref(&plan))
        .await
        .unwrap();
    assert_eq!(
        ensured.created,
        [(ObjectKind::ConfigMap, plan.name.clone())]
    );
    let copy = cluster.api::<ConfigMap>().get(&plan.name).await.unwrap();
    assert_eq!(copy.immutable, Some(true));
    assert_eq!(
        ObjectData::from_config_map(&copy),
        config_map_data(&cluster, "app-config").await
    );
    let owners = copy.owner_references();
    assert_eq!(owners.len(), 1);
    assert_eq!(
        (owners[0].kind.as_str(), owners[0].uid.as_str()),
        ("Deployment", owner.uid.as_str())
    );
    assert_eq!(copy.labels()["app.kubernetes.io/managed-by"], "nudge");
    assert_eq!(copy.labels()["nudge.dev/snapshot-copy"], "true");
    assert_eq!(
        copy.annotations()["nudge.dev/snapshot-of"],
        "configmap/app-config"
    );
    assert_eq!(copy.annotations()["nudge.dev/snapshot-bytes"], "6");

    // A restart, a failover, a retry: the same plan finds its copy.
    let again = copier
        .ensure(cluster.namespace(), &owner, std::slice::from_ref(&plan))
        .await
        .unwrap();
    assert!(again.created.is_empty());
    assert_eq!(
        metrics.operations(ObjectKind::ConfigMap, Operation::Created),
        1
    );
    assert_eq!(
        metrics.operations(ObjectKind::ConfigMap, Operation::Reused),
        1
    );

    // The API server keeps the copy's content as it is.
    let change = json!({"data": {"level": "info"}});
    let refused = cluster
        .api::<ConfigMap>()
        .patch(&plan.name, &PatchParams::default(), &Patch::Merge(&change))
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 422),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_that_changed_since_the_stamp_was_decided_is_not_copied() {
    let cluster = TestCluster::start("snap-moved").await;
    cluster
        .put_configmap("app-config", &[("level", "debug")])
        .await;
    let (id, owner) = mk_owner(&cluster, "web").await;
    let (copier, _) = mk_copier(&cluster);
    let plan = plan_config_map(&cluster, &id, "app-config", KeySelection::All).await;
    cluster
        .put_configmap("app-config", &[("level", "info")])
        .await;

    let error = copier
        .ensure(cluster.namespace(), &owner, std::slice::from_ref(&plan))
        .await
        .unwrap_err();
    assert!(matches!(error, CopyError::Moved { .. }), "{error:?}");
    assert!(error.is_retryable() && !error.is_news());
    assert!(
        cluster
            .api::<ConfigMap>()
            .get_opt(&plan.name)
            .await
            .unwrap()
            .is_none()
    );

    cluster.delete::<ConfigMap>("app-config").await;
    let error = copier
        .ensure(cluster.namespace(), &owner, &[plan])
        .await
        .unwrap_err();
    assert!(matches!(error, CopyError::Moved { .. }), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_copy_holds_only_the_keys_the_template_uses() {
    let cluster = TestCluster::start("snap-secret").await;
    cluster
        .put_secret("db", &[("password", "hunter2"), ("user", "app")])
        .await;
    let (id, owner) = mk_owner(&cluster, "web").await;
    let (copier, _) = mk_copier(&cluster);
    let keys = KeySelection::Only(["password".to_owned()].into());
    let source = cluster.api::<Secret>().get("db").await.unwrap();
    let data = ObjectData::from_secret(&source).narrowed(&keys);
    let fingerprint = native_object(ObjectKind::Secret, &data, &mk_key());
    let fingerprint = fingerprint.as_digest().unwrap().into_owned();
    assert!(fingerprint.starts_with("hmac-sha256-"));
    let plan = CopyPlan::new(
        &id,
        SnapshotKey::new(ObjectKind::Secret, "db", keys),
        fingerprint,
    );

    copier
        .ensure(cluster.namespace(), &owner, std::slice::from_ref(&plan))
        .await
        .unwrap();
    let copy = cluster.api::<Secret>().get(&plan.name).await.unwrap();
    assert_eq!(ObjectData::from_secret(&copy), data);
    assert_eq!(copy.type_.as_deref(), Some("Opaque"));
    assert_eq!(copy.immutable, Some(true));
    assert!(!plan.name.contains("hunter2"));
    // The value is in the copy's data only.
    let metadata = serde_json::to_string(&copy.metadata).unwrap();
    assert!(
        !metadata.contains("hunter2") && !metadata.contains("aHVudGVyMg"),
        "{metadata}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_workload_deletes_its_copies() {
    let cluster = TestCluster::start("snap-gc").await;
    cluster
        .put_configmap("app-config", &[("level", "debug")])
        .await;
    let (id, owner) = mk_owner(&cluster, "web").await;
    let (copier, _) = mk_copier(&cluster);
    let plan = plan_config_map(&cluster, &id, "app-config", KeySelection::All).await;
    copier
        .ensure(cluster.namespace(), &owner, std::slice::from_ref(&plan))
        .await
        .unwrap();

    cluster.delete::<Deployment>("web").await;
    // kube-controller-manager's garbage collector deletes dependents in the
    // background; the double at once.
    wait_for(
        "the copy to be collected with its workload",
        WAIT,
        || async {
            let gone = cluster
                .api::<ConfigMap>()
                .get_opt(&plan.name)
                .await
                .unwrap()
                .is_none();
            gone.then_some(())
        },
    )
    .await;
    assert!(
        cluster
            .api::<ConfigMap>()
            .get_opt("app-config")
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_another_object_holds_is_not_taken_and_an_orphaned_copy_is_adopted() {
    let cluster = TestCluster::start("snap-taken").await;
    cluster
        .put_configmap("app-config", &[("level", "debug")])
        .await;
    let (id, owner) = mk_owner(&cluster, "web").await;
    let (_, other) = mk_owner(&cluster, "other").await;
    let (copier, metrics) = mk_copier(&cluster);
    let plan = plan_config_map(&cluster, &id, "app-config", KeySelection::All).await;
    let data = json!({"level": "debug"});
    let create = |owners: Value, immutable: bool| {
        let object: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": plan.name, "ownerReferences": owners},
            "data": data, "immutable": immutable,
        }))
        .unwrap();
        let api = cluster.api::<ConfigMap>();
        async move { api.create(&PostParams::default(), &object).await.unwrap() }
    };

    // Owned by another (live) object: never used, never changed.
    create(json!([other.reference()]), true).await;
    let error = copier
        .ensure(cluster.namespace(), &owner, std::slice::from_ref(&plan))
        .await
        .unwrap_err();
    assert!(matches!(error, CopyError::Taken { .. }), "{error:?}");
    assert!(error.is_retryable() && error.is_news());
    cluster.delete::<ConfigMap>(&plan.name).await;

    // Mutable: not a snapshot, whoever made it.
    create(json!([]), false).await;
    let error = copier
        .ensure(cluster.namespace(), &owner, std::slice::from_ref(&plan))
        .await
        .unwrap_err();
    assert!(matches!(error, CopyError::Taken { .. }), "{error:?}");
    cluster.delete::<ConfigMap>(&plan.name).await;

    // Orphaned (its workload deleted with --cascade=orphan): adopted.
    create(json!([]), true).await;
    copier
        .ensure(cluster.namespace(), &owner, std::slice::from_ref(&plan))
        .await
        .unwrap();
    let copy = cluster.api::<ConfigMap>().get(&plan.name).await.unwrap();
    assert_eq!(copy.owner_references()[0].uid, owner.uid);
    assert_eq!(
        metrics.operations(ObjectKind::ConfigMap, Operation::Adopted),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollbacks_copies_are_checked_and_pruned_copies_deleted() {
    let cluster = TestCluster::start("snap-check").await;
    cluster
        .put_configmap("app-config", &[("level", "debug")])
        .await;
    let (id, owner) = mk_owner(&cluster, "web").await;
    let (copier, metrics) = mk_copier(&cluster);
    let plan = plan_config_map(&cluster, &id, "app-config", KeySelection::All).await;
    copier
        .ensure(cluster.namespace(), &owner, std::slice::from_ref(&plan))
        .await
        .unwrap();
    copier
        .check(cluster.namespace(), &owner, std::slice::from_ref(&plan))
        .await
        .unwrap();

    let copy = [(ObjectKind::ConfigMap, plan.name.clone())];
    copier.delete(cluster.namespace(), &copy).await.unwrap();
    // Deleted already: still done.
    copier.delete(cluster.namespace(), &copy).await.unwrap();
    assert_eq!(
        metrics.operations(ObjectKind::ConfigMap, Operation::Deleted),
        2
    );
    let error = copier
        .check(cluster.namespace(), &owner, &[plan])
        .await
        .unwrap_err();
    assert!(matches!(error, CopyError::Missing { .. }), "{error:?}");
    assert!(!error.is_retryable());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gauge_counts_the_copies_that_exist_and_their_bytes() {
    let cluster = TestCluster::start("snap-gauge").await;
    cluster
        .put_configmap("app-config", &[("level", "debug")])
        .await;
    cluster.put_secret("db", &[("password", "hunter2")]).await;
    let (id, owner) = mk_owner(&cluster, "web").await;
    let (copier, metrics) = mk_copier(&cluster);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let scope = nudge::__private::scope::NamespaceScope {
        namespaces: vec![cluster.namespace().to_owned()],
        ignore: Vec::new(),
    };
    let gauge = tokio::spawn(nudge::__private::copies::run_gauge(
        cluster.client(),
        scope,
        mk_names(),
        metrics.clone(),
        shutdown.clone(),
    ));
    let plan = plan_config_map(&cluster, &id, "app-config", KeySelection::All).await;
    let source = cluster.api::<Secret>().get("db").await.unwrap();
    let secret_data = ObjectData::from_secret(&source);
    let fingerprint = native_object(ObjectKind::Secret, &secret_data, &mk_key());
    let secret_plan = CopyPlan::new(
        &id,
        SnapshotKey::new(ObjectKind::Secret, "db", KeySelection::All),
        fingerprint.as_digest().unwrap().into_owned(),
    );
    copier
        .ensure(cluster.namespace(), &owner, &[plan.clone(), secret_plan])
        .await
        .unwrap();
    wait_for("both copies counted", WAIT, || async {
        let kept = (
            metrics.kept(ObjectKind::ConfigMap),
            metrics.kept(ObjectKind::Secret),
        );
        (kept == ((1, 5), (1, 7))).then_some(())
    })
    .await;
    copier
        .delete(cluster.namespace(), &[(ObjectKind::ConfigMap, plan.name)])
        .await
        .unwrap();
    wait_for("the deleted copy uncounted", WAIT, || async {
        (metrics.kept(ObjectKind::ConfigMap) == (0, 0)).then_some(())
    })
    .await;
    assert_eq!(metrics.kept(ObjectKind::Secret), (1, 7));
    shutdown.cancel();
    gauge.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_refuses_to_make_a_copy_mutable_or_change_its_content() {
    // What kube-apiserver's ValidateConfigMapUpdate / ValidateSecretUpdate
    // enforce once `immutable: true` is set, and what nudge relies on.
    let cluster = TestCluster::start("snap-immutable").await;
    let copy: Secret = serde_json::from_value(json!({
        "metadata": {"name": "frozen", "labels": {"a": "b"}},
        "stringData": {"k": "v"}, "immutable": true,
    }))
    .unwrap();
    let api: Api<Secret> = cluster.api();
    api.create(&PostParams::default(), &copy).await.unwrap();
    for change in [
        json!({"immutable": false}),
        json!({"data": {"k": "dzI="}}),
        json!({"stringData": {"k": "w2"}}),
    ] {
        let result = api
            .patch("frozen", &PatchParams::default(), &Patch::Merge(&change))
            .await;
        assert!(
            matches!(&result, Err(kube::Error::Api(s)) if s.code == 422),
            "{change}: {result:?}"
        );
    }
    // Its metadata stays writable: labels, owners.
    let relabel = json!({"metadata": {"labels": {"a": "c"}}});
    let relabelled = api
        .patch("frozen", &PatchParams::default(), &Patch::Merge(&relabel))
        .await
        .unwrap();
    assert_eq!(relabelled.labels()["a"], "c");
}

/// A Secret quota with no room left: nudge is refused its copy, and says why.
/// On a real cluster the quota controller counts the namespace first.
pub async fn fill_secret_quota(cluster: &TestCluster) {
    let secrets = cluster
        .api::<Secret>()
        .list(&Default::default())
        .await
        .unwrap();
    let used = secrets.items.len().to_string();
    let quota: k8s_openapi::api::core::v1::ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "no-more-secrets"},
        "spec": {"hard": {"secrets": used}},
    }))
    .unwrap();
    let quotas = cluster.api::<k8s_openapi::api::core::v1::ResourceQuota>();
    quotas.create(&PostParams::default(), &quota).await.unwrap();
    wait_for("the quota's usage counted", WAIT, || async {
        let quota = quotas.get("no-more-secrets").await.ok()?;
        let counted = quota.status?.used?.get("secrets")?.0.clone();
        (counted == used).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_a_quota_has_no_room_for_is_refused_and_says_why() {
    let cluster = TestCluster::start("snap-quota").await;
    cluster.put_secret("db", &[("password", "hunter2")]).await;
    let (id, owner) = mk_owner(&cluster, "web").await;
    let (copier, metrics) = mk_copier(&cluster);
    fill_secret_quota(&cluster).await;
    let source = cluster.api::<Secret>().get("db").await.unwrap();
    let fingerprint = native_object(
        ObjectKind::Secret,
        &ObjectData::from_secret(&source),
        &mk_key(),
    );
    let plan = CopyPlan::new(
        &id,
        SnapshotKey::new(ObjectKind::Secret, "db", KeySelection::All),
        fingerprint.as_digest().unwrap().into_owned(),
    );
    let error = copier
        .ensure(cluster.namespace(), &owner, std::slice::from_ref(&plan))
        .await
        .unwrap_err();
    assert_eq!(error.category(), "quota", "{error}");
    assert!(
        error.is_retryable() && error.is_news(),
        "until the quota is raised"
    );
    let text = error.to_string();
    assert!(
        text.contains(&plan.name) && text.contains("exceeded quota"),
        "{text}"
    );
    assert!(!text.contains("hunter2"));
    assert_eq!(metrics.operations(ObjectKind::Secret, Operation::Failed), 1);
    assert!(
        cluster
            .api::<Secret>()
            .get_opt(&plan.name)
            .await
            .unwrap()
            .is_none()
    );
}

// === nudge taking snapshots ===

/// nudge's configuration for a test, with snapshots for workloads that ask.
fn snapshot_config(cluster: &TestCluster) -> nudge::config::Config {
    let mut config = cluster.nudge_config();
    config.engine.snapshots = nudge::config::SnapshotMode::OptIn;
    config
}

/// A Deployment `name` with `annotations`, scaled to zero (its rollouts
/// complete on a cluster without nodes), mounting ConfigMap `app-config` and
/// taking Secret `db` whole as environment variables.
async fn snapshot_deployment(cluster: &TestCluster, name: &str, annotations: &[(&str, &str)]) {
    let mut meta = serde_json::Map::new();
    for (key, value) in annotations {
        meta.insert((*key).to_owned(), json!(value));
    }
    let body = json!({
        "metadata": {"name": name, "annotations": meta},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [{"name": "app", "image": "busybox",
                        "envFrom": [{"secretRef": {"name": "db"}}],
                        "volumeMounts": [{"name": "config", "mountPath": "/etc/config"}]}],
                    "volumes": [{"name": "config", "configMap": {"name": "app-config"}}],
                },
            },
        },
    });
    let deployment: Deployment = serde_json::from_value(body).unwrap();
    cluster
        .api::<Deployment>()
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
}

/// The ConfigMap and the Secret the Deployment's template names.
async fn named(cluster: &TestCluster, name: &str) -> (String, String) {
    let workload = cluster.workload("Deployment", name).await;
    let spec = &workload["spec"]["template"]["spec"];
    let config_map = spec["volumes"][0]["configMap"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let secret = spec["containers"][0]["envFrom"][0]["secretRef"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    (config_map, secret)
}

/// Waits until the Deployment's template names copies other than `before`'s.
async fn wait_for_copies(
    cluster: &TestCluster,
    name: &str,
    before: &(String, String),
) -> (String, String) {
    wait_for(&format!("{name} to name new copies"), WAIT, || async {
        let now = named(cluster, name).await;
        let copies = now.0 != "app-config" && now.1 != "db";
        (copies && now != *before).then_some(now)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshotting_workload_mounts_copies_of_each_revisions_config() {
    let cluster = TestCluster::start("snap-e2e").await;
    cluster
        .put_configmap("app-config", &[("level", "debug")])
        .await;
    cluster.put_secret("db", &[("password", "hunter2")]).await;
    snapshot_deployment(
        &cluster,
        "web",
        &[("nudge.dev/auto", "true"), ("nudge.dev/snapshot", "true")],
    )
    .await;
    let nudge = cluster.start_ready_nudge(snapshot_config(&cluster)).await;

    let live = ("app-config".to_owned(), "db".to_owned());
    let first = wait_for_copies(&cluster, "web", &live).await;
    let copy = cluster.api::<ConfigMap>().get(&first.0).await.unwrap();
    assert_eq!(copy.data.unwrap()["level"], "debug");
    assert_eq!(copy.immutable, Some(true));
    let secret = cluster.api::<Secret>().get(&first.1).await.unwrap();
    assert_eq!(secret.data.unwrap()["password"].0, b"hunter2");
    let annotations = cluster.template_annotations("Deployment", "web").await;
    let snapshot = &annotations["nudge.dev/snapshots"];
    assert!(
        snapshot.contains("configmap/app-config") && snapshot.contains("secret/db"),
        "{snapshot}"
    );
    assert!(!snapshot.contains("hunter2"));

    // A change: a copy of the new content, the Secret's copy kept.
    cluster
        .put_configmap("app-config", &[("level", "info")])
        .await;
    let second = wait_for_copies(&cluster, "web", &first).await;
    assert_ne!(second.0, first.0);
    assert_eq!(second.1, first.1, "the Secret did not change");
    let copy = cluster.api::<ConfigMap>().get(&second.0).await.unwrap();
    assert_eq!(copy.data.unwrap()["level"], "info");
    // The first revision's copy stays for a rollback.
    assert!(
        cluster
            .api::<ConfigMap>()
            .get_opt(&first.0)
            .await
            .unwrap()
            .is_some()
    );
    nudge.stop().await;
}

/// The ConfigMaps the ReplicaSets of Deployment `name` mount (what their
/// pods start with), each once.
async fn replica_set_config_maps(cluster: &TestCluster, name: &str) -> Vec<String> {
    let sets = cluster
        .api::<k8s_openapi::api::apps::v1::ReplicaSet>()
        .list(&kube::api::ListParams::default().labels(&format!("app={name}")))
        .await
        .unwrap();
    let mut names: Vec<String> = sets
        .items
        .iter()
        .filter_map(|rs| {
            let spec = rs.spec.as_ref()?.template.as_ref()?.spec.as_ref()?;
            spec.volumes.as_ref()?[0]
                .config_map
                .as_ref()
                .map(|cm| cm.name.clone())
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_workload_keeps_starting_pods_on_its_revisions_copies() {
    let cluster = TestCluster::start("snap-held").await;
    cluster
        .put_configmap("app-config", &[("level", "debug")])
        .await;
    cluster.put_secret("db", &[("password", "hunter2")]).await;
    let annotations = [
        ("nudge.dev/auto", "true"),
        ("nudge.dev/snapshot", "true"),
        ("nudge.dev/mode", "manual"),
        ("nudge.dev/approve", "latest"),
    ];
    snapshot_deployment(&cluster, "web", &annotations).await;
    let nudge = cluster.start_ready_nudge(snapshot_config(&cluster)).await;
    let live = ("app-config".to_owned(), "db".to_owned());
    let first = wait_for_copies(&cluster, "web", &live).await;
    // No more approvals: the next change is held.
    let unapprove = json!({"metadata": {"annotations": {"nudge.dev/approve": null}}});
    cluster.merge_patch::<Deployment>("web", unapprove).await;
    cluster
        .put_configmap("app-config", &[("level", "broken")])
        .await;
    cluster.wait_events("web", "ConfigPending").await;

    // Its pods restart: the ReplicaSet is deleted and made again, and more
    // replicas start. They mount the held revision's copy, not the new content.
    wait_for("the ReplicaSet of the first copies", WAIT, || async {
        let mounted = replica_set_config_maps(&cluster, "web").await;
        mounted.contains(&first.0).then_some(())
    })
    .await;
    let sets = cluster.api::<k8s_openapi::api::apps::v1::ReplicaSet>();
    let listed = sets
        .list(&kube::api::ListParams::default().labels("app=web"))
        .await
        .unwrap();
    for rs in listed.items {
        cluster
            .delete::<k8s_openapi::api::apps::v1::ReplicaSet>(&rs.metadata.name.unwrap())
            .await;
    }
    cluster
        .merge_patch::<Deployment>("web", json!({"spec": {"replicas": 2}}))
        .await;
    let replaced = wait_for("a replacement ReplicaSet", WAIT, || async {
        let mounted = replica_set_config_maps(&cluster, "web").await;
        (!mounted.is_empty()).then_some(mounted)
    })
    .await;
    assert_eq!(
        replaced,
        std::slice::from_ref(&first.0),
        "the held revision's copy"
    );
    let copy = cluster.api::<ConfigMap>().get(&first.0).await.unwrap();
    assert_eq!(copy.data.unwrap()["level"], "debug");
    assert_eq!(named(&cluster, "web").await, first);

    // Approved: the new content reaches the pods through new copies.
    let approve = json!({"metadata": {"annotations": {"nudge.dev/approve": "latest"}}});
    cluster.merge_patch::<Deployment>("web", approve).await;
    let second = wait_for_copies(&cluster, "web", &first).await;
    let copy = cluster.api::<ConfigMap>().get(&second.0).await.unwrap();
    assert_eq!(copy.data.unwrap()["level"], "broken");
    nudge.stop().await;
}

/// Sets (`Some`) or removes the Deployment's `nudge.dev/rollback-to`.
async fn roll_back_to(cluster: &TestCluster, name: &str, revision: Option<&str>) {
    let patch = json!({"metadata": {"annotations": {"nudge.dev/rollback-to": revision}}});
    cluster.merge_patch::<Deployment>(name, patch).await;
}

/// Two revisions of `web` recorded, each with its copies: (first, second).
async fn two_revisions(cluster: &TestCluster) -> ((String, String), (String, String)) {
    let live = ("app-config".to_owned(), "db".to_owned());
    let first = wait_for_copies(cluster, "web", &live).await;
    cluster.history("Deployment", "web", 1).await;
    cluster
        .put_configmap("app-config", &[("level", "broken")])
        .await;
    let second = wait_for_copies(cluster, "web", &first).await;
    cluster.history("Deployment", "web", 2).await;
    (first, second)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_to_takes_the_config_back_and_holds_it_until_released() {
    let cluster = TestCluster::start("snap-rollback").await;
    cluster
        .put_configmap("app-config", &[("level", "debug")])
        .await;
    cluster.put_secret("db", &[("password", "hunter2")]).await;
    snapshot_deployment(
        &cluster,
        "web",
        &[("nudge.dev/auto", "true"), ("nudge.dev/snapshot", "true")],
    )
    .await;
    let nudge = cluster.start_ready_nudge(snapshot_config(&cluster)).await;
    let (first, second) = two_revisions(&cluster).await;

    // `nudge rollback`: a revision the history does not keep is refused and
    // the workload left alone; by default, the newest before the current one.
    let refused = nudge_rollback(&cluster, &["deployment/web", "--to-revision", "7"]).await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("revision 7"), "{stderr}");
    let workload = cluster.workload("Deployment", "web").await;
    assert!(workload["metadata"]["annotations"]["nudge.dev/rollback-to"].is_null());
    let set = nudge_rollback(&cluster, &["deployment/web"]).await;
    let stdout = String::from_utf8_lossy(&set.stdout);
    assert!(stdout.contains("rollback-to set to revision 1"), "{stdout}");
    let back = wait_for_copies(&cluster, "web", &second).await;
    assert_eq!(back, first, "revision 1's copies again");
    // A revision of its own, followed to its end like any other.
    let history = cluster.history("Deployment", "web", 3).await;
    let rollback = history
        .iter()
        .find(|r| r["revision"] == 3)
        .expect("revision 3");
    assert_eq!(rollback["restores"], 1);
    assert_eq!(rollback["outcome"], "complete");

    // Held there: a change of the sources waits, and says why.
    cluster
        .put_configmap("app-config", &[("level", "fixed")])
        .await;
    let pending = cluster.wait_events("web", "ConfigPending").await;
    let note = pending[0].note.clone().unwrap_or_default();
    assert!(
        note.contains("rollback-to") && note.contains("revision 1"),
        "{note}"
    );
    assert_eq!(named(&cluster, "web").await, first);

    // Released (as a GitOps repository would, by removing the annotation):
    // the newest content.
    roll_back_to(&cluster, "web", None).await;
    let newest = wait_for_copies(&cluster, "web", &first).await;
    let copy = cluster.api::<ConfigMap>().get(&newest.0).await.unwrap();
    assert_eq!(copy.data.unwrap()["level"], "fixed");
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_undo_takes_the_config_back_and_nudge_leaves_it_until_a_source_changes() {
    let cluster = TestCluster::start("snap-undo").await;
    cluster
        .put_configmap("app-config", &[("level", "debug")])
        .await;
    cluster.put_secret("db", &[("password", "hunter2")]).await;
    snapshot_deployment(
        &cluster,
        "web",
        &[("nudge.dev/auto", "true"), ("nudge.dev/snapshot", "true")],
    )
    .await;
    let nudge = cluster.start_ready_nudge(snapshot_config(&cluster)).await;
    let (first, _second) = two_revisions(&cluster).await;

    // What `kubectl rollout undo` does: the ReplicaSet of the earlier
    // template gives its template back to the Deployment.
    let sets = cluster.api::<k8s_openapi::api::apps::v1::ReplicaSet>();
    let listed = sets
        .list(&kube::api::ListParams::default().labels("app=web"))
        .await
        .unwrap();
    let earlier = listed
        .items
        .into_iter()
        .find(|rs| {
            let spec = rs
                .spec
                .as_ref()
                .and_then(|s| s.template.as_ref()?.spec.as_ref());
            spec.and_then(|s| s.volumes.as_ref()).is_some_and(|v| {
                v[0].config_map.as_ref().map(|c| c.name.as_str()) == Some(&first.0)
            })
        })
        .expect("the first revision's ReplicaSet");
    let mut template = serde_json::to_value(earlier.spec.unwrap().template.unwrap()).unwrap();
    template["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("pod-template-hash");
    let undo = json!({"spec": {"template": template}});
    cluster.merge_patch::<Deployment>("web", undo).await;
    let waiting = cluster.wait_events("web", "ConfigWaiting").await;
    let note = waiting[0].note.clone().unwrap_or_default();
    assert!(note.contains("rolled back to revision 1"), "{note}");
    assert_eq!(named(&cluster, "web").await, first, "not fought");

    // A source changes: the newest content goes out.
    cluster
        .put_configmap("app-config", &[("level", "fixed")])
        .await;
    let newest = wait_for_copies(&cluster, "web", &first).await;
    let copy = cluster.api::<ConfigMap>().get(&newest.0).await.unwrap();
    assert_eq!(copy.data.unwrap()["level"], "fixed");
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_a_quota_refuses_holds_the_stamp_and_a_warning_says_why() {
    let cluster = TestCluster::start("snap-quota-e2e").await;
    cluster
        .put_configmap("app-config", &[("level", "debug")])
        .await;
    cluster.put_secret("db", &[("password", "hunter2")]).await;
    // nudge's own Secrets first (its installation key lives here).
    let nudge = cluster.start_ready_nudge(snapshot_config(&cluster)).await;
    fill_secret_quota(&cluster).await;
    snapshot_deployment(
        &cluster,
        "web",
        &[("nudge.dev/auto", "true"), ("nudge.dev/snapshot", "true")],
    )
    .await;

    let failed = cluster.wait_events("web", "SnapshotFailed").await;
    let note = failed[0].note.clone().unwrap_or_default();
    assert!(
        note.contains("exceeded quota") && note.contains("snapshot of db"),
        "{note}"
    );
    assert!(!note.contains("hunter2"));
    assert_eq!(failed[0].type_.as_deref(), Some("Warning"));
    // Nothing points at a copy that does not exist: the template is as it was.
    assert_eq!(
        named(&cluster, "web").await,
        ("app-config".to_owned(), "db".to_owned())
    );

    // Room again: the stamp goes out.
    cluster
        .delete::<k8s_openapi::api::core::v1::ResourceQuota>("no-more-secrets")
        .await;
    let live = ("app-config".to_owned(), "db".to_owned());
    let copies = wait_for_copies(&cluster, "web", &live).await;
    assert!(
        cluster
            .api::<Secret>()
            .get_opt(&copies.1)
            .await
            .unwrap()
            .is_some()
    );
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turning_snapshots_on_rolls_once_onto_copies_and_off_back_onto_the_live_objects() {
    let cluster = TestCluster::start("snap-on-off").await;
    cluster
        .put_configmap("app-config", &[("level", "debug")])
        .await;
    cluster.put_secret("db", &[("password", "hunter2")]).await;
    snapshot_deployment(&cluster, "web", &[("nudge.dev/auto", "true")]).await;
    let nudge = cluster.start_ready_nudge(snapshot_config(&cluster)).await;
    let live = ("app-config".to_owned(), "db".to_owned());
    let hash = wait_for_stamp(&cluster, "Deployment", "web", "nudge.dev/config-hash", None).await;
    assert_eq!(named(&cluster, "web").await, live);

    let on = json!({"metadata": {"annotations": {"nudge.dev/snapshot": "true"}}});
    cluster.merge_patch::<Deployment>("web", on).await;
    let copies = wait_for_copies(&cluster, "web", &live).await;
    let annotations = cluster.template_annotations("Deployment", "web").await;
    assert_eq!(
        annotations["nudge.dev/config-hash"], hash,
        "the same config"
    );

    let off = json!({"metadata": {"annotations": {"nudge.dev/snapshot": "false"}}});
    cluster.merge_patch::<Deployment>("web", off).await;
    wait_for("the live objects again", WAIT, || async {
        (named(&cluster, "web").await == live).then_some(())
    })
    .await;
    let annotations = cluster.template_annotations("Deployment", "web").await;
    assert!(
        !annotations.contains_key("nudge.dev/snapshots"),
        "{annotations:?}"
    );
    assert_eq!(annotations["nudge.dev/config-hash"], hash);
    // The copies stay for the revisions that used them.
    assert!(
        cluster
            .api::<ConfigMap>()
            .get_opt(&copies.0)
            .await
            .unwrap()
            .is_some()
    );
    nudge.stop().await;
}

/// The copies of `web` that exist: ConfigMaps and Secrets labelled as nudge's.
async fn copies_of(cluster: &TestCluster) -> Vec<String> {
    let labelled = kube::api::ListParams::default().labels("nudge.dev/snapshot-copy=true");
    let maps = cluster.api::<ConfigMap>().list(&labelled).await.unwrap();
    let secrets = cluster.api::<Secret>().list(&labelled).await.unwrap();
    let mut names: Vec<String> = maps
        .items
        .iter()
        .map(ResourceExt::name_any)
        .chain(secrets.items.iter().map(ResourceExt::name_any))
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_neither_copies_again_nor_writes_and_deleting_the_workload_deletes_its_copies() {
    let cluster = TestCluster::start("snap-restart").await;
    cluster
        .put_configmap("app-config", &[("level", "debug")])
        .await;
    cluster.put_secret("db", &[("password", "hunter2")]).await;
    snapshot_deployment(
        &cluster,
        "web",
        &[("nudge.dev/auto", "true"), ("nudge.dev/snapshot", "true")],
    )
    .await;
    let config = snapshot_config(&cluster);
    let nudge = cluster.start_ready_nudge(config.clone()).await;
    let live = ("app-config".to_owned(), "db".to_owned());
    let copies = wait_for_copies(&cluster, "web", &live).await;
    cluster.history("Deployment", "web", 1).await;
    nudge.stop().await;
    let before = copies_of(&cluster).await;
    assert_eq!(before.len(), 2, "{before:?}");

    let sentinel = cluster.sentinel().await;
    let patches = cluster.patch_counter("Deployment", "web").await;
    let nudge = cluster.start_ready_nudge(config).await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(
        patches.count(&cluster).await,
        0,
        "nothing written after a restart"
    );
    assert_eq!(copies_of(&cluster).await, before, "no copy made again");
    assert_eq!(named(&cluster, "web").await, copies);

    cluster.delete::<Deployment>("web").await;
    wait_for("the copies collected with the workload", WAIT, || async {
        copies_of(&cluster).await.is_empty().then_some(())
    })
    .await;
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_each_revisions_snapshot_and_the_metrics_count_the_copies() {
    let cluster = TestCluster::start("snap-explain").await;
    cluster
        .put_configmap("app-config", &[("level", "debug")])
        .await;
    cluster.put_secret("db", &[("password", "hunter2")]).await;
    snapshot_deployment(
        &cluster,
        "web",
        &[("nudge.dev/auto", "true"), ("nudge.dev/snapshot", "true")],
    )
    .await;
    let config = snapshot_config(&cluster);
    let nudge = cluster.start_ready_nudge(config.clone()).await;
    let (first, second) = two_revisions(&cluster).await;

    let at = nudge.metrics_at();
    let text = wait_for("the copies counted", WAIT, || async {
        let text = at.text().await?;
        (sample_sum(&text, "nudge_snapshot_copies") == 3.0).then_some(text)
    })
    .await;
    // "debug" and "broken" in the ConfigMap's copies, "hunter2" in the Secret's.
    let bytes = |kind: &str| sample(&text, &format!("nudge_snapshot_bytes{{kind=\"{kind}\"}}"));
    assert_eq!(
        (bytes("ConfigMap"), bytes("Secret")),
        (Some(11.0), Some(7.0))
    );
    assert_eq!(
        sample(
            &text,
            "nudge_snapshot_operations_total{kind=\"ConfigMap\",operation=\"created\"}"
        ),
        Some(2.0)
    );

    let controller = nudge::Controller::from_config(config, cluster.client());
    let report = controller
        .explain(
            "deployment",
            Some(cluster.namespace()),
            "web",
            std::time::Duration::from_secs(10),
        )
        .await
        .unwrap();
    let text = report.to_string();
    assert!(
        text.contains(&second.0) && text.contains(&second.1),
        "{text}"
    );
    let history = report.history_table();
    assert!(history.contains(&first.0), "{history}");
    assert!(history.contains("restorable"), "{history}");
    assert!(!text.contains("hunter2") && !history.contains("hunter2"));
    nudge.stop().await;
}

/// Runs `nudge rollback <args>` against the cluster, nothing from the
/// caller's environment leaking in.
async fn nudge_rollback(cluster: &TestCluster, args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_nudge"))
        .arg("rollback")
        .args(args)
        .args(["-n", cluster.namespace()])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("KUBECONFIG", cluster.kubeconfig())
        .output()
        .await
        .expect("run nudge rollback")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nudge_rollback_says_why_it_cannot_and_releases_a_pin() {
    let cluster = TestCluster::start("snap-cli").await;
    cluster
        .put_configmap("app-config", &[("level", "debug")])
        .await;
    cluster.put_secret("db", &[("password", "hunter2")]).await;
    snapshot_deployment(&cluster, "web", &[("nudge.dev/rollback-to", "1")]).await;
    let stderr =
        |output: &std::process::Output| String::from_utf8_lossy(&output.stderr).into_owned();

    let unknown = nudge_rollback(&cluster, &["gadget/web"]).await;
    assert_eq!(unknown.status.code(), Some(2), "{}", stderr(&unknown));
    assert!(
        stderr(&unknown).contains("unknown kind"),
        "{}",
        stderr(&unknown)
    );

    // No history with a snapshot: nothing is written.
    let refused = nudge_rollback(&cluster, &["deployment/web", "--to-revision", "1"]).await;
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("no revision in its history"),
        "{}",
        stderr(&refused)
    );
    let workload = cluster.workload("Deployment", "web").await;
    assert_eq!(
        workload["metadata"]["annotations"]["nudge.dev/rollback-to"],
        "1"
    );

    let released = nudge_rollback(&cluster, &["deployment/web", "--release"]).await;
    assert!(released.status.success(), "{}", stderr(&released));
    assert!(String::from_utf8_lossy(&released.stdout).contains("rollback-to removed"));
    let workload = cluster.workload("Deployment", "web").await;
    assert!(workload["metadata"]["annotations"]["nudge.dev/rollback-to"].is_null());
}

/// nudge's requests since `mark` of the test namespace's workloads and
/// objects, but the sentinel's, watches, Events and the test's own (applies
/// as `test-user`, LISTs of Deployments: nudge makes none per change): each
/// as `METHOD resource[/name]`, with the patch's type, counted.
fn requests_since(cluster: &TestCluster, mark: usize) -> BTreeMap<String, usize> {
    let mut counted = BTreeMap::new();
    let requests = cluster.double().expect("on the double").requests();
    for request in requests.iter().skip(mark) {
        let path = request
            .path
            .rsplit("/namespaces/")
            .next()
            .unwrap_or_default();
        let resource = path.split_once('/').map_or("", |(_, rest)| rest);
        let test_user = request.query_param("fieldManager").as_deref() == Some("test-user");
        let ours = request.query_param("watch").is_some()
            || resource.contains("sentinel")
            || resource.starts_with("events")
            || test_user
            || resource == "deployments";
        if ours {
            continue;
        }
        let patch = match request.headers.get("content-type").map(String::as_str) {
            Some("application/json-patch+json") => " (json)",
            Some("application/merge-patch+json") => " (merge)",
            Some("application/apply-patch+yaml") => " (apply)",
            _ => "",
        };
        *counted
            .entry(format!("{} {resource}{patch}", request.method))
            .or_default() += 1;
    }
    counted
}

/// Waits until each Deployment of `names` records `count` revisions,
/// reading them with LISTs (which [`requests_since`] leaves out).
async fn wait_for_histories(cluster: &TestCluster, names: &[&str], count: usize) {
    let deployments = cluster.api::<Deployment>();
    wait_for("the outcomes recorded", WAIT, || async {
        let listed = deployments.list(&ListParams::default()).await.ok()?;
        let recorded = |name: &str| {
            let deployment = listed.items.iter().find(|d| d.name_any() == name)?;
            recorded_history(&serde_json::to_value(deployment).ok()?)
        };
        names
            .iter()
            .all(|name| recorded(name).is_some_and(|h| h.len() >= count))
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_only_a_snapshot_change_costs_a_read_of_its_source_a_copy_and_a_read_of_the_workload()
 {
    let cluster = TestCluster::start("snap-cost").await;
    let sentinel = cluster.sentinel().await;
    cluster
        .put_configmap("app-config", &[("level", "debug")])
        .await;
    cluster.put_secret("db", &[("password", "hunter2")]).await;
    snapshot_deployment(
        &cluster,
        "web",
        &[("nudge.dev/auto", "true"), ("nudge.dev/snapshot", "true")],
    )
    .await;
    snapshot_deployment(&cluster, "plain", &[("nudge.dev/auto", "true")]).await;
    let nudge = cluster.start_ready_nudge(snapshot_config(&cluster)).await;
    wait_for_histories(&cluster, &["web", "plain"], 1).await;
    sentinel.quiesce(&nudge).await;

    let mark = cluster.double().expect("on the double").requests().len();
    cluster
        .put_configmap("app-config", &[("level", "broken")])
        .await;
    wait_for_histories(&cluster, &["web", "plain"], 2).await;
    sentinel.quiesce(&nudge).await;
    let counted = requests_since(&cluster, mark);
    let want = BTreeMap::from(
        [
            // The source's read of the change, for both; and the copier's.
            ("GET configmaps/app-config", 2),
            // The copy of the ConfigMap; the Secret's is unchanged.
            ("POST configmaps", 1),
            // Without snapshots: one apply.
            ("PATCH deployments/plain (apply)", 1),
            // With them: the JSON patch, over the object as read.
            ("GET deployments/web", 1),
            ("PATCH deployments/web (json)", 1),
            // Each outcome's record, with or without snapshots: a merge
            // patch over the workload as the watch event that ended the
            // rollout carried it, not read again.
            ("PATCH deployments/plain (merge)", 1),
            ("PATCH deployments/web (merge)", 1),
        ]
        .map(|(request, n)| (request.to_owned(), n)),
    );
    assert_eq!(counted, want);
    nudge.stop().await;
}
