//! The imitated kube-controller-manager: what a real one does for apps/v1
//! workloads in a cluster without nodes (see `src/controllers/` for the
//! Kubernetes sources each behaviour follows).

use std::time::{Duration, Instant};

use crate::support::{Http, wait_for};
use apiserver_double::ApiServerDouble;
use futures::TryStreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::api::{Api, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

const NS: &str = "default";
const WAIT: Duration = Duration::from_secs(10);

fn path(plural: &str) -> String {
    format!("/apis/apps/v1/namespaces/{NS}/{plural}")
}

fn template(app: &str, image: &str) -> Value {
    json!({"metadata": {"labels": {"app": app}},
           "spec": {"containers": [{"name": "c", "image": image}]}})
}

fn deployment(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                    "template": template(name, "registry.invalid/app:1")}})
}

fn workload(kind: &str, name: &str, replicas: Option<i64>) -> Value {
    let mut w = json!({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}},
                 "template": template(name, "registry.invalid/app:1")}});
    if let Some(r) = replicas {
        w["spec"]["replicas"] = json!(r);
    }
    w
}

async fn create(http: &Http, plural: &str, obj: &Value) -> Value {
    let r = http.post(&path(plural), obj).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

async fn get(http: &Http, plural: &str, name: &str) -> Value {
    let r = http.get(&format!("{}/{name}", path(plural))).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

async fn merge_patch(http: &Http, plural: &str, name: &str, patch: Value) -> Value {
    let r = http
        .patch(
            &format!("{}/{name}", path(plural)),
            "application/merge-patch+json",
            &patch.to_string(),
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

async fn list(http: &Http, plural: &str) -> Vec<Value> {
    http.get(&path(plural)).await.json()["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The objects of `plural` controlled by `owner`.
async fn owned(http: &Http, plural: &str, owner: &Value) -> Vec<Value> {
    let uid = &owner["metadata"]["uid"];
    list(http, plural)
        .await
        .into_iter()
        .filter(|o| {
            o["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|refs| {
                    refs.iter()
                        .any(|r| &r["uid"] == uid && r["controller"] == true)
                })
        })
        .collect()
}

/// `(type, status, reason)` of each condition, in order.
fn conditions(obj: &Value) -> Vec<(String, String, String)> {
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
            (s("type"), s("status"), s("reason"))
        })
        .collect()
}

fn condition<'a>(obj: &'a Value, kind: &str) -> &'a Value {
    obj["status"]["conditions"]
        .as_array()
        .and_then(|l| l.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

fn triple(t: &str, s: &str, r: &str) -> (String, String, String) {
    (t.into(), s.into(), r.into())
}

async fn kube_client(api: &ApiServerDouble) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(api.kubeconfig_path()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

async fn double() -> (ApiServerDouble, Http) {
    let api = ApiServerDouble::start().await.expect("start");
    let http = Http::new(&api);
    (api, http)
}

#[tokio::test]
async fn a_deployment_without_replicas_completes_with_the_real_reasons_and_messages() {
    let (_api, http) = double().await;
    let created = create(&http, "deployments", &deployment("web", 0)).await;
    assert_eq!(
        created["status"],
        json!({}),
        "the write's answer carries no controller status"
    );
    let d = wait_for("the rollout to complete", WAIT, || async {
        let d = get(&http, "deployments", "web").await;
        (condition(&d, "Progressing")["reason"] == "NewReplicaSetAvailable").then_some(d)
    })
    .await;
    assert_eq!(
        conditions(&d),
        [
            triple("Available", "True", "MinimumReplicasAvailable"),
            triple("Progressing", "True", "NewReplicaSetAvailable")
        ]
    );
    let rs = owned(&http, "replicasets", &d).await;
    assert_eq!(rs.len(), 1);
    let rs_name = rs[0]["metadata"]["name"].as_str().unwrap();
    assert_eq!(
        condition(&d, "Available")["message"],
        "Deployment has minimum availability."
    );
    assert_eq!(
        condition(&d, "Progressing")["message"],
        format!("ReplicaSet \"{rs_name}\" has successfully progressed.")
    );
    assert_eq!(d["status"]["observedGeneration"], 1);
    for absent in [
        "replicas",
        "updatedReplicas",
        "readyReplicas",
        "availableReplicas",
        "unavailableReplicas",
    ] {
        assert!(
            d["status"].get(absent).is_none(),
            "{absent} is 0, so left out"
        );
    }
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );
}

#[tokio::test]
async fn the_new_replica_set_is_named_labelled_and_owned_as_kube_controller_manager_does() {
    let (_api, http) = double().await;
    let d = create(&http, "deployments", &deployment("web", 1)).await;
    let rs = wait_for("a ReplicaSet", WAIT, || async {
        owned(&http, "replicasets", &d).await.into_iter().next()
    })
    .await;
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        hash.chars()
            .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)),
        "{hash}"
    );
    assert_eq!(rs["metadata"]["name"], format!("web-{hash}"));
    assert_eq!(
        rs["metadata"]["labels"],
        json!({"app": "web", "pod-template-hash": hash})
    );
    assert_eq!(
        rs["spec"]["selector"],
        json!({"matchLabels": {"app": "web", "pod-template-hash": hash}})
    );
    assert_eq!(
        rs["spec"]["template"]["metadata"]["labels"]["pod-template-hash"],
        hash.as_str()
    );
    assert_eq!(
        rs["metadata"]["annotations"],
        json!({"deployment.kubernetes.io/desired-replicas": "1",
               "deployment.kubernetes.io/max-replicas": "2",
               "deployment.kubernetes.io/revision": "1"})
    );
    let owner = &rs["metadata"]["ownerReferences"][0];
    assert_eq!(
        (
            owner["kind"].clone(),
            owner["name"].clone(),
            owner["controller"].clone(),
            owner["blockOwnerDeletion"].clone()
        ),
        (json!("Deployment"), json!("web"), json!(true), json!(true))
    );
    // The ReplicaSet reports the pod it made (Pending, never ready).
    let rs = wait_for("the pod reported", WAIT, || async {
        let rs = get(
            &http,
            "replicasets",
            rs["metadata"]["name"].as_str().unwrap(),
        )
        .await;
        (rs["status"]["replicas"] == 1).then_some(rs)
    })
    .await;
    assert_eq!(
        rs["status"],
        json!({"replicas": 1, "fullyLabeledReplicas": 1, "observedGeneration": 1})
    );
}

#[tokio::test]
async fn pending_pods_exceed_the_progress_deadline() {
    let (_api, http) = double().await;
    let mut manifest = deployment("slow", 1);
    manifest["spec"]["progressDeadlineSeconds"] = json!(2);
    let started = Instant::now();
    create(&http, "deployments", &manifest).await;
    let progressing = wait_for("the rollout to progress", WAIT, || async {
        let d = get(&http, "deployments", "slow").await;
        (d["status"]["updatedReplicas"] == 1).then_some(d)
    })
    .await;
    assert_eq!(
        condition(&progressing, "Progressing")["reason"],
        "ReplicaSetUpdated"
    );
    let timed_out = wait_for("the deadline to pass", WAIT, || async {
        let d = get(&http, "deployments", "slow").await;
        (condition(&d, "Progressing")["reason"] == "ProgressDeadlineExceeded").then_some(d)
    })
    .await;
    let elapsed = started.elapsed();
    // The deadline counts from the last progress, stored to the second: it
    // passes between 1 s and 3 s after it, and kube-controller-manager looks
    // at most a second later.
    assert!(
        elapsed >= Duration::from_secs(1),
        "timed out after only {elapsed:?}"
    );
    assert!(
        elapsed <= Duration::from_secs(6),
        "timed out only after {elapsed:?}"
    );
    assert_eq!(
        conditions(&timed_out),
        [
            triple("Available", "False", "MinimumReplicasUnavailable"),
            triple("Progressing", "False", "ProgressDeadlineExceeded")
        ]
    );
    let rs = owned(&http, "replicasets", &timed_out).await;
    let rs_name = rs[0]["metadata"]["name"].as_str().unwrap();
    assert_eq!(
        condition(&timed_out, "Progressing")["message"],
        format!("ReplicaSet \"{rs_name}\" has timed out progressing.")
    );
    assert_eq!(
        condition(&timed_out, "Available")["message"],
        "Deployment does not have minimum availability."
    );
    let status = &timed_out["status"];
    assert_eq!(
        (
            status["replicas"].clone(),
            status["updatedReplicas"].clone(),
            status["unavailableReplicas"].clone()
        ),
        (json!(1), json!(1), json!(1))
    );
    assert!(status.get("readyReplicas").is_none() && status.get("availableReplicas").is_none());
}

#[tokio::test]
async fn a_template_change_makes_one_new_replica_set_and_scales_the_old_one_to_zero() {
    let (_api, http) = double().await;
    let mut manifest = deployment("web", 2);
    // Pods never become available here, so only a Deployment that may lose
    // all of them lets the old ReplicaSet go (as on a real cluster).
    manifest["spec"]["strategy"] = json!({"type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "100%"}});
    let d = create(&http, "deployments", &manifest).await;
    wait_for("the first ReplicaSet", WAIT, || async {
        let d = get(&http, "deployments", "web").await;
        (d["status"]["observedGeneration"] == 1 && d["status"]["updatedReplicas"] == 2)
            .then_some(())
    })
    .await;
    let first = owned(&http, "replicasets", &d).await;
    assert_eq!(first.len(), 1);
    merge_patch(&http, "deployments", "web",
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "registry.invalid/app:2"}]}}}})).await;
    let rss = wait_for(
        "the old ReplicaSet at 0 and the new one at 2",
        WAIT,
        || async {
            let rss = owned(&http, "replicasets", &d).await;
            let sizes: Vec<(Value, Value)> = rss
                .iter()
                .map(|rs| {
                    (
                        rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"].clone(),
                        rs["spec"]["replicas"].clone(),
                    )
                })
                .collect();
            let mut sorted = sizes.clone();
            sorted.sort_by_key(|(rev, _)| rev.as_str().unwrap_or("").to_string());
            (sorted == [(json!("1"), json!(0)), (json!("2"), json!(2))]).then_some(rss)
        },
    )
    .await;
    assert_eq!(rss.len(), 2, "exactly one new ReplicaSet");
    assert!(
        rss.iter()
            .any(|rs| rs["metadata"]["name"] == first[0]["metadata"]["name"])
    );
    let d = wait_for("the revision on the Deployment", WAIT, || async {
        let d = get(&http, "deployments", "web").await;
        (d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
            && d["status"]["observedGeneration"] == 2)
            .then_some(d)
    })
    .await;
    assert_eq!(d["metadata"]["generation"], 2);
}

#[tokio::test]
async fn with_the_default_strategy_the_old_pod_stays_until_a_new_one_is_available() {
    let (_api, http) = double().await;
    let d = create(&http, "deployments", &deployment("web", 1)).await;
    wait_for("the first rollout to progress", WAIT, || async {
        let d = get(&http, "deployments", "web").await;
        (d["status"]["updatedReplicas"] == 1).then_some(())
    })
    .await;
    merge_patch(&http, "deployments", "web",
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "registry.invalid/app:2"}]}}}})).await;
    // maxSurge 25% of 1 rounds up to 1, maxUnavailable 25% down to 0.
    let d2 = wait_for("the surge", WAIT, || async {
        let d = get(&http, "deployments", "web").await;
        (d["status"]["observedGeneration"] == 2
            && d["status"]["updatedReplicas"] == 1
            && d["status"]["replicas"] == 2)
            .then_some(d)
    })
    .await;
    let rss = owned(&http, "replicasets", &d).await;
    let mut sizes: Vec<i64> = rss
        .iter()
        .map(|rs| rs["spec"]["replicas"].as_i64().unwrap())
        .collect();
    sizes.sort();
    assert_eq!(sizes, [1, 1]);
    assert_eq!(d2["status"]["unavailableReplicas"], 2);
}

#[tokio::test]
async fn an_annotation_change_is_observed_without_a_new_replica_set() {
    let (_api, http) = double().await;
    let d = create(&http, "deployments", &deployment("web", 0)).await;
    wait_for("the first rollout", WAIT, || async {
        let d = get(&http, "deployments", "web").await;
        (d["status"]["observedGeneration"] == 1).then_some(())
    })
    .await;
    let patched = merge_patch(
        &http,
        "deployments",
        "web",
        json!({"metadata": {"annotations": {"team": "a"}}}),
    )
    .await;
    assert_eq!(patched["metadata"]["generation"], 2);
    let observed = wait_for("the generation observed", WAIT, || async {
        let d = get(&http, "deployments", "web").await;
        (d["status"]["observedGeneration"] == 2).then_some(d)
    })
    .await;
    let rss = owned(&http, "replicasets", &d).await;
    assert_eq!(rss.len(), 1, "no rollout for an annotation");
    assert_eq!(
        rss[0]["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );
    assert_eq!(
        observed["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );
    // kube-controller-manager copies the Deployment's annotations to its ReplicaSet.
    wait_for("the annotation copied", WAIT, || async {
        let rs = get(
            &http,
            "replicasets",
            rss[0]["metadata"]["name"].as_str().unwrap(),
        )
        .await;
        (rs["metadata"]["annotations"]["team"] == "a").then_some(())
    })
    .await;
}

#[tokio::test]
async fn status_is_written_afterwards_through_status_as_kube_controller_manager() {
    let (api, http) = double().await;
    let deployments: Api<Deployment> = Api::namespaced(kube_client(&api).await, NS);
    let start_rv = api.resource_version().to_string();
    let stream = deployments
        .watch(&WatchParams::default().timeout(10), &start_rv)
        .await
        .unwrap();
    let mut stream = Box::pin(stream);
    let created = create(&http, "deployments", &deployment("web", 0)).await;

    // ADDED as answered, then MODIFIED events, each a new resourceVersion,
    // until the status is complete.
    let mut versions = vec![
        created["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string(),
    ];
    let mut saw_added = false;
    tokio::time::timeout(WAIT, async {
        while let Some(event) = stream.try_next().await.unwrap() {
            match event {
                WatchEvent::Added(d) => {
                    saw_added = true;
                    assert!(d.status.is_none_or(|s| s.conditions.is_none()));
                }
                WatchEvent::Modified(d) => {
                    let rv = d.metadata.resource_version.clone().unwrap();
                    assert!(!versions.contains(&rv), "a new resourceVersion per write");
                    versions.push(rv);
                    let complete = d.status.and_then(|s| s.conditions).is_some_and(|c| {
                        c.iter()
                            .any(|c| c.reason.as_deref() == Some("NewReplicaSetAvailable"))
                    });
                    if complete {
                        return;
                    }
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    })
    .await
    .expect("the status within the wait");
    assert!(saw_added);
    assert!(
        versions.len() >= 3,
        "NewReplicaSetCreated, then the full status: {versions:?}"
    );

    let d = get(&http, "deployments", "web").await;
    let entries = d["metadata"]["managedFields"].as_array().unwrap();
    let kcm = entries
        .iter()
        .find(|e| e["manager"] == "kube-controller-manager")
        .expect("a kube-controller-manager entry");
    assert_eq!(kcm["operation"], "Update");
    assert_eq!(kcm["subresource"], "status");
    assert_eq!(kcm["apiVersion"], "apps/v1");
    let fields = &kcm["fieldsV1"];
    assert!(
        fields["f:status"]["f:conditions"]["k:{\"type\":\"Progressing\"}"].is_object(),
        "{fields}"
    );
    assert!(
        fields["f:status"]["f:conditions"]["k:{\"type\":\"Available\"}"].is_object(),
        "{fields}"
    );
    assert!(
        fields["f:status"]["f:observedGeneration"].is_object(),
        "{fields}"
    );
    assert!(
        fields["f:metadata"]["f:annotations"]["f:deployment.kubernetes.io/revision"].is_object(),
        "{fields}"
    );
    assert!(fields.get("f:spec").is_none());
    // What the controllers write is not a client request.
    assert!(api.requests().iter().all(|r| !r.path.contains("/status")));

    let rs = owned(&http, "replicasets", &d).await;
    let rs_managers: Vec<(Value, Value)> = rs[0]["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["manager"].clone(),
                e.get("subresource").cloned().unwrap_or(Value::Null),
            )
        })
        .collect();
    assert!(
        rs_managers.contains(&(json!("kube-controller-manager"), Value::Null)),
        "{rs_managers:?}"
    );
    assert!(
        rs_managers.contains(&(json!("kube-controller-manager"), json!("status"))),
        "{rs_managers:?}"
    );
}

#[tokio::test]
async fn replica_sets_are_collected_with_their_deployment() {
    let (_api, http) = double().await;
    let d = create(&http, "deployments", &deployment("web", 1)).await;
    wait_for("a ReplicaSet", WAIT, || async {
        (!owned(&http, "replicasets", &d).await.is_empty()).then_some(())
    })
    .await;
    let r = http.delete(&format!("{}/web", path("deployments"))).await;
    assert_eq!(r.status, 200);
    wait_for("the ReplicaSets collected", WAIT, || async {
        list(&http, "replicasets").await.is_empty().then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_stateful_set_without_replicas_completes_every_update() {
    let (_api, http) = double().await;
    let set = create(
        &http,
        "statefulsets",
        &workload("StatefulSet", "db", Some(0)),
    )
    .await;
    let first = wait_for("the first revision", WAIT, || async {
        let s = get(&http, "statefulsets", "db").await;
        (s["status"]["observedGeneration"] == 1).then_some(s)
    })
    .await;
    assert_eq!(
        first["status"]["currentRevision"],
        first["status"]["updateRevision"]
    );
    assert_eq!(
        first["status"],
        json!({"observedGeneration": 1, "replicas": 0, "availableReplicas": 0, "collisionCount": 0,
               "currentRevision": first["status"]["currentRevision"], "updateRevision": first["status"]["updateRevision"]})
    );
    let revision = first["status"]["updateRevision"]
        .as_str()
        .unwrap()
        .to_string();
    let crs = owned(&http, "controllerrevisions", &set).await;
    assert_eq!(crs.len(), 1);
    assert_eq!(crs[0]["metadata"]["name"], revision.as_str());
    assert_eq!(crs[0]["revision"], 1);
    assert_eq!(crs[0]["data"]["spec"]["template"]["$patch"], "replace");
    let hash = crs[0]["metadata"]["labels"]["controller.kubernetes.io/hash"]
        .as_str()
        .unwrap();
    assert_eq!(revision, format!("db-{hash}"));

    merge_patch(&http, "statefulsets", "db",
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "registry.invalid/app:2"}]}}}})).await;
    let second = wait_for("the update observed", WAIT, || async {
        let s = get(&http, "statefulsets", "db").await;
        (s["status"]["observedGeneration"] == 2).then_some(s)
    })
    .await;
    assert_ne!(second["status"]["updateRevision"], revision.as_str());
    assert_eq!(
        second["status"]["currentRevision"], second["status"]["updateRevision"],
        "complete"
    );
    assert_eq!(owned(&http, "controllerrevisions", &set).await.len(), 2);
}

#[tokio::test]
async fn a_stateful_set_with_a_pending_pod_never_completes_an_update() {
    let (_api, http) = double().await;
    create(
        &http,
        "statefulsets",
        &workload("StatefulSet", "db", Some(1)),
    )
    .await;
    let first = wait_for("pod 0 reported", WAIT, || async {
        let s = get(&http, "statefulsets", "db").await;
        (s["status"]["replicas"] == 1).then_some(s)
    })
    .await;
    let status = &first["status"];
    assert_eq!(status["currentRevision"], status["updateRevision"]);
    assert_eq!(
        (
            status["currentReplicas"].clone(),
            status["updatedReplicas"].clone()
        ),
        (json!(1), json!(1))
    );
    assert!(
        status.get("readyReplicas").is_none(),
        "Pending, never ready"
    );
    assert_eq!(status["availableReplicas"], 0);

    merge_patch(&http, "statefulsets", "db",
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "registry.invalid/app:2"}]}}}})).await;
    let second = wait_for("the update observed", WAIT, || async {
        let s = get(&http, "statefulsets", "db").await;
        (s["status"]["observedGeneration"] == 2).then_some(s)
    })
    .await;
    let status = &second["status"];
    // OrderedReady waits for pod 0 to be Running and Ready before touching
    // anything: the pod keeps the current revision, the update never lands.
    assert_eq!(
        status["currentRevision"],
        first["status"]["currentRevision"]
    );
    assert_ne!(status["updateRevision"], first["status"]["updateRevision"]);
    assert_eq!(status["currentReplicas"], 1);
    assert!(status.get("updatedReplicas").is_none());
    assert_eq!(status["replicas"], 1);
}

#[tokio::test]
async fn a_daemon_set_completes_every_rollout_at_once() {
    let (_api, http) = double().await;
    let ds = create(&http, "daemonsets", &workload("DaemonSet", "agent", None)).await;
    let first = wait_for("the generation observed", WAIT, || async {
        let d = get(&http, "daemonsets", "agent").await;
        (d["status"]["observedGeneration"] == 1).then_some(d)
    })
    .await;
    assert_eq!(
        first["status"],
        json!({"observedGeneration": 1, "desiredNumberScheduled": 0, "currentNumberScheduled": 0,
               "numberMisscheduled": 0, "numberReady": 0})
    );
    let crs = owned(&http, "controllerrevisions", &ds).await;
    assert_eq!(crs.len(), 1);
    let hash = crs[0]["metadata"]["labels"]["controller-revision-hash"]
        .as_str()
        .unwrap();
    assert_eq!(crs[0]["metadata"]["name"], format!("agent-{hash}"));

    merge_patch(&http, "daemonsets", "agent",
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "registry.invalid/app:2"}]}}}})).await;
    wait_for("the second generation observed", WAIT, || async {
        let d = get(&http, "daemonsets", "agent").await;
        (d["status"]["observedGeneration"] == 2).then_some(())
    })
    .await;
    let crs = owned(&http, "controllerrevisions", &ds).await;
    let mut numbers: Vec<i64> = crs
        .iter()
        .map(|c| c["revision"].as_i64().unwrap())
        .collect();
    numbers.sort();
    assert_eq!(numbers, [1, 2]);
}

#[tokio::test]
async fn replica_sets_and_controller_revisions_are_served_like_on_a_real_cluster() {
    let (api, http) = double().await;
    let resources = http.get("/apis/apps/v1").await.json();
    let names: Vec<&str> = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    for name in ["controllerrevisions", "replicasets", "replicasets/status"] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    let replica_sets: Api<ReplicaSet> = Api::namespaced(kube_client(&api).await, NS);
    let stream = replica_sets
        .watch(
            &WatchParams::default().timeout(10),
            &api.resource_version().to_string(),
        )
        .await
        .unwrap();
    let mut stream = Box::pin(stream);
    create(&http, "deployments", &deployment("web", 0)).await;
    let added = tokio::time::timeout(WAIT, stream.try_next())
        .await
        .expect("an event within the wait")
        .unwrap();
    let Some(WatchEvent::Added(rs)) = added else {
        panic!("expected ADDED, got {added:?}");
    };
    let name = rs.metadata.name.clone().unwrap();
    assert_eq!(
        get(&http, "replicasets", &name).await["metadata"]["uid"],
        json!(rs.metadata.uid)
    );
    let selected = http
        .get(&format!("{}?labelSelector=app%3Dweb", path("replicasets")))
        .await
        .json();
    assert_eq!(selected["kind"], "ReplicaSetList");
    assert_eq!(selected["items"].as_array().map(Vec::len), Some(1));
    let revisions = http.get(&path("controllerrevisions")).await.json();
    assert_eq!(revisions["kind"], "ControllerRevisionList");
}
