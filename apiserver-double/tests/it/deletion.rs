//! DELETE propagation policies and the synchronous garbage collection of
//! dependents (objects whose `ownerReferences` name the deleted object).

use crate::support::Http;
use apiserver_double::ApiServerDouble;
use serde_json::{Value, json};

const CM: &str = "/api/v1/namespaces/default/configmaps";

async fn start() -> (ApiServerDouble, Http) {
    let api = ApiServerDouble::start().await.expect("start");
    let http = Http::new(&api);
    (api, http)
}

/// Creates a ConfigMap and returns its uid.
async fn config_map(http: &Http, name: &str, owners: &[(&str, &str)]) -> String {
    let refs: Vec<Value> = owners
        .iter()
        .map(|(n, uid)| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": n, "uid": uid}))
        .collect();
    let mut body = json!({"metadata": {"name": name}});
    if !refs.is_empty() {
        body["metadata"]["ownerReferences"] = json!(refs);
    }
    let r = http.post(CM, &body).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    r.json()["metadata"]["uid"].as_str().unwrap().to_string()
}

async fn exists(http: &Http, name: &str) -> bool {
    http.get(&format!("{CM}/{name}")).await.status == 200
}

async fn delete_with(
    http: &Http,
    name: &str,
    body: Option<Value>,
    query: &str,
) -> crate::support::Resp {
    http.send(
        "DELETE",
        &format!("{CM}/{name}{query}"),
        &[("content-type", "application/json")],
        body.map(|b| b.to_string().into_bytes()),
    )
    .await
}

#[tokio::test]
async fn background_deletion_collects_dependents_recursively() {
    let (_api, http) = start().await;
    let owner = config_map(&http, "owner", &[]).await;
    let other = config_map(&http, "other", &[]).await;
    let child = config_map(&http, "child", &[("owner", &owner)]).await;
    config_map(&http, "grandchild", &[("child", &child)]).await;
    config_map(&http, "shared", &[("owner", &owner), ("other", &other)]).await;

    let r = delete_with(&http, "owner", None, "").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["kind"], "Status");
    assert_eq!(r.json()["status"], "Success");
    assert!(!exists(&http, "owner").await);
    assert!(!exists(&http, "child").await);
    assert!(!exists(&http, "grandchild").await);
    // Another owner still exists: only the dangling reference goes.
    let shared = http.get(&format!("{CM}/shared")).await.json();
    assert_eq!(
        shared["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": other}])
    );
}

#[tokio::test]
async fn foreground_from_the_query_answers_the_marked_object() {
    let (_api, http) = start().await;
    let owner = config_map(&http, "owner", &[]).await;
    config_map(&http, "child", &[("owner", &owner)]).await;
    let r = delete_with(&http, "owner", None, "?propagationPolicy=Foreground").await;
    assert_eq!(r.status, 200);
    let body = r.json();
    assert_eq!(body["kind"], "ConfigMap");
    assert_eq!(
        body["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    assert!(body["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(body["metadata"]["deletionGracePeriodSeconds"], 0);
    assert!(!exists(&http, "owner").await);
    assert!(!exists(&http, "child").await);
}

#[tokio::test]
async fn orphan_from_the_body_detaches_dependents() {
    let (_api, http) = start().await;
    let owner = config_map(&http, "owner", &[]).await;
    config_map(&http, "child", &[("owner", &owner)]).await;
    let r = delete_with(
        &http,
        "owner",
        Some(json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Orphan"})),
        // The body wins over the query.
        "?propagationPolicy=Background",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["metadata"]["finalizers"], json!(["orphan"]));
    assert!(!exists(&http, "owner").await);
    let child = http.get(&format!("{CM}/child")).await.json();
    assert!(
        child["metadata"].get("ownerReferences").is_none(),
        "{child}"
    );
}

#[tokio::test]
async fn other_finalizers_keep_the_object_after_the_collector_is_done() {
    let (_api, http) = start().await;
    let r = http
        .post(
            CM,
            &json!({"metadata": {"name": "f", "finalizers": ["example.com/x"]}}),
        )
        .await;
    let owner = r.json()["metadata"]["uid"].as_str().unwrap().to_string();
    config_map(&http, "child", &[("f", &owner)]).await;
    let r = delete_with(&http, "f", Some(json!({"propagationPolicy": "Orphan"})), "").await;
    assert_eq!(
        r.json()["metadata"]["finalizers"],
        json!(["example.com/x", "orphan"])
    );
    let now = http.get(&format!("{CM}/f")).await.json();
    assert_eq!(now["metadata"]["finalizers"], json!(["example.com/x"]));
    assert!(now["metadata"]["deletionTimestamp"].is_string());
    assert!(exists(&http, "child").await);
}

#[tokio::test]
async fn watchers_see_the_marked_object_then_the_deletion() {
    let (_api, http) = start().await;
    config_map(&http, "w", &[]).await;
    let rv = http.get(CM).await.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    delete_with(&http, "w", None, "?propagationPolicy=Foreground").await;
    config_map(&http, "last", &[]).await;
    let lines = http
        .replay_until_added(&format!("{CM}?watch=1&resourceVersion={rv}"), "last")
        .await;
    let kinds: Vec<String> = lines
        .iter()
        .map(|l| l["type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kinds, ["MODIFIED", "DELETED"]);
}

#[tokio::test]
async fn delete_options_are_validated() {
    let (_api, http) = start().await;
    config_map(&http, "v", &[]).await;
    let r = delete_with(&http, "v", None, "?propagationPolicy=Sideways").await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["message"],
        "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"Sideways\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
    );
    let r = delete_with(
        &http,
        "v",
        Some(json!({"orphanDependents": true, "propagationPolicy": "Orphan"})),
        "",
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["details"]["causes"][0]["message"],
        "Invalid value: \"Orphan\": orphanDependents and deletionPropagation cannot be both set"
    );
    // Options are checked before the object is looked up.
    let r = delete_with(&http, "missing", None, "?propagationPolicy=Sideways").await;
    assert_eq!(r.status, 422);
    // An explicit orphanDependents=false on an object that is not gone at once: 202.
    http.post(
        CM,
        &json!({"metadata": {"name": "held", "finalizers": ["example.com/x"]}}),
    )
    .await;
    let r = delete_with(&http, "held", None, "?orphanDependents=false").await;
    assert_eq!(r.status, 202);
    assert!(exists(&http, "v").await);
}
