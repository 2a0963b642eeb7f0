//! Behaviour beyond the transcripts: ownership and pruning in server-side
//! apply, selectors on watches, history windows, validation, deletion,
//! fault injection, recording and the admin endpoints.

use std::time::{Duration, Instant};

use crate::support::Http;
use apiserver_double::{ApiServerDouble, Config, RequestFilter};
use serde_json::{Value, json};

const CM: &str = "/api/v1/namespaces/default/configmaps";
const DEPLOY: &str = "/apis/apps/v1/namespaces/default/deployments";
const APPLY: &str = "application/apply-patch+yaml";
const MERGE: &str = "application/merge-patch+json";

async fn start() -> (ApiServerDouble, Http) {
    let api = ApiServerDouble::start().await.expect("start");
    let http = Http::new(&api);
    (api, http)
}

fn deployment(name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "app:1"}]}}
        }
    })
}

fn annotations(obj: &Value) -> Value {
    obj["spec"]["template"]["metadata"]["annotations"].clone()
}

#[tokio::test]
async fn requests_need_the_bearer_token() {
    let (api, http) = start().await;
    let anonymous = Http {
        token: "wrong".into(),
        ..http.clone()
    };
    let r = anonymous.get(CM).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["reason"], "Unauthorized");
    assert_eq!(anonymous.get("/version").await.status, 200);
    assert_eq!(anonymous.get("/healthz").await.status, 200);
    assert_eq!(http.get(CM).await.status, 200);
    drop(api);
}

#[tokio::test]
async fn server_side_apply_prunes_fields_the_manager_stops_applying() {
    let (_api, http) = start().await;
    http.post(DEPLOY, &deployment("web")).await;
    let stamp = |ann: Value| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
               "spec": {"template": {"metadata": {"annotations": ann}}}})
        .to_string()
    };
    let url = format!("{DEPLOY}/web?fieldManager=nudge");
    let r = http
        .patch(&url, APPLY, &stamp(json!({"a": "1", "b": "2"})))
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(annotations(&r.json()), json!({"a": "1", "b": "2"}));

    // Another manager also sets b (same value: shared ownership, no conflict).
    let r = http
        .patch(
            &format!("{DEPLOY}/web?fieldManager=other"),
            APPLY,
            &stamp(json!({"b": "2"})),
        )
        .await;
    assert_eq!(r.status, 200);

    // nudge stops applying a and b: a goes, b stays (still owned by other).
    let r = http.patch(&url, APPLY, &stamp(json!({"c": "3"}))).await;
    assert_eq!(r.status, 200);
    let obj = r.json();
    assert_eq!(annotations(&obj), json!({"b": "2", "c": "3"}));
    let nudge = obj["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["manager"] == "nudge")
        .cloned()
        .unwrap();
    assert_eq!(nudge["operation"], "Apply");
    assert_eq!(
        nudge["fieldsV1"],
        json!({"f:spec": {"f:template": {"f:metadata": {"f:annotations": {"f:c": {}}}}}})
    );
    // Removing the last applied annotation removes the (now empty) map.
    http.patch(
        &format!("{DEPLOY}/web?fieldManager=other"),
        APPLY,
        &stamp(json!({})),
    )
    .await;
    let r = http.patch(&url, APPLY, &stamp(json!({}))).await;
    assert_eq!(annotations(&r.json()), Value::Null);
}

#[tokio::test]
async fn server_side_apply_accepts_yaml_and_conflicts_with_updaters() {
    let (_api, http) = start().await;
    let yaml = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: c\n        image: app:1\n        ports:\n        - containerPort: 80\n";
    let r = http
        .patch(&format!("{DEPLOY}/web?fieldManager=gitops"), APPLY, yaml)
        .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let obj = r.json();
    assert_eq!(obj["spec"]["replicas"], 2);
    let gitops = &obj["metadata"]["managedFields"][0];
    assert_eq!(
        gitops["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"c\"}"]
            ["f:ports"],
        json!({"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}})
    );

    // A merge patch by kubectl takes over replicas; gitops then conflicts with it.
    let r = http
        .send(
            "PATCH",
            &format!("{DEPLOY}/web"),
            &[
                ("content-type", MERGE),
                ("user-agent", "kubectl/v1.34.0 (linux/amd64)"),
            ],
            Some(br#"{"spec":{"replicas":5}}"#.to_vec()),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["metadata"]["generation"], 2);
    let r = http
        .patch(&format!("{DEPLOY}/web?fieldManager=gitops"), APPLY, yaml)
        .await;
    assert_eq!(r.status, 409);
    assert_eq!(
        r.json()["message"],
        "Apply failed with 1 conflict: conflict with \"kubectl\" using apps/v1: .spec.replicas"
    );
    let r = http
        .patch(
            &format!("{DEPLOY}/web?fieldManager=gitops&force=true"),
            APPLY,
            yaml,
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["spec"]["replicas"], 2);

    // Bad YAML and wrong kinds are 400.
    let r = http
        .patch(
            &format!("{DEPLOY}/web?fieldManager=gitops"),
            APPLY,
            "a: [unclosed",
        )
        .await;
    assert_eq!(r.status, 400);
    let r = http
        .patch(
            &format!("{DEPLOY}/web?fieldManager=gitops"),
            APPLY,
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"web"}}"#,
        )
        .await;
    assert_eq!(r.status, 400);
    // force on a non-apply patch is invalid.
    let r = http
        .patch(&format!("{DEPLOY}/web?force=true"), MERGE, "{}")
        .await;
    assert_eq!(r.status, 422);
}

#[tokio::test]
async fn generation_follows_spec_and_status_subresource() {
    let (_api, http) = start().await;
    let r = http.post(DEPLOY, &deployment("web")).await;
    assert_eq!(r.json()["metadata"]["generation"], 1);
    let r = http
        .patch(
            &format!("{DEPLOY}/web"),
            MERGE,
            r#"{"metadata":{"labels":{"x":"1"}}}"#,
        )
        .await;
    assert_eq!(r.json()["metadata"]["generation"], 1);
    // status through the main resource is ignored
    let r = http
        .patch(
            &format!("{DEPLOY}/web"),
            MERGE,
            r#"{"status":{"replicas":3}}"#,
        )
        .await;
    // (The double's kube-controller-manager may have written a status of its
    // own by now; the user's `replicas: 3` is not in it either way.)
    assert_ne!(r.json()["status"]["replicas"], 3, "{}", r.json()["status"]);
    // through /status it is kept, spec changes are ignored, generation stays
    let r = http
        .send(
            "PATCH",
            &format!("{DEPLOY}/web/status?fieldManager=kube-controller-manager"),
            &[("content-type", MERGE)],
            Some(
                br#"{"status":{"observedGeneration":1,"replicas":3},"spec":{"replicas":9}}"#
                    .to_vec(),
            ),
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let obj = r.json();
    assert_eq!(obj["status"]["replicas"], 3);
    assert_eq!(obj["spec"]["replicas"], 1);
    assert_eq!(obj["metadata"]["generation"], 1);
    let kcm = obj["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["manager"] == "kube-controller-manager")
        .cloned()
        .unwrap();
    assert_eq!(kcm["subresource"], "status");
    // a selector change is rejected
    let r = http
        .patch(&format!("{DEPLOY}/web"), MERGE, r#"{"spec":{"selector":{"matchLabels":{"app":"other"}},"template":{"metadata":{"labels":{"app":"other"}}}}}"#)
        .await;
    assert_eq!(r.status, 422);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("field is immutable")
    );
}

#[tokio::test]
async fn patches_of_every_kind() {
    let (_api, http) = start().await;
    let mut d = deployment("web");
    d["spec"]["template"]["spec"]["containers"][0]["env"] = json!([{"name": "A", "value": "1"}]);
    d["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "side", "image": "side:1"}));
    http.post(DEPLOY, &d).await;
    let url = format!("{DEPLOY}/web");
    let smp = r#"{"spec":{"template":{"spec":{"containers":[{"name":"side","image":"side:2"}]}}}}"#;
    let r = http
        .patch(&url, "application/strategic-merge-patch+json", smp)
        .await;
    let cs = r.json()["spec"]["template"]["spec"]["containers"].clone();
    assert_eq!(cs.as_array().unwrap().len(), 2);
    assert_eq!(cs[1]["image"], "side:2");
    assert_eq!(cs[0]["env"][0]["name"], "A");
    // JSON patch into a missing map fails like the apiserver, and changes nothing
    let r = http
        .patch(
            &url,
            "application/json-patch+json",
            r#"[{"op":"add","path":"/spec/template/metadata/annotations/x","value":"1"}]"#,
        )
        .await;
    assert_eq!(r.status, 422);
    let r = http
        .patch(&url, "application/json-patch+json", r#"{"not":"a list"}"#)
        .await;
    assert_eq!(r.status, 400);
    let r = http.patch(&url, MERGE, "{not json").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["reason"], "BadRequest");
    // a patch carrying a stale resourceVersion is a conflict
    let r = http
        .patch(&url, MERGE, r#"{"metadata":{"resourceVersion":"1"}}"#)
        .await;
    assert_eq!(r.status, 409);
    // a no-op patch keeps the resourceVersion (on a ConfigMap: the double's
    // Deployment controller may write the Deployment's status between a GET and
    // the patch, as kube-controller-manager would)
    http.post(
        CM,
        &json!({"metadata": {"name": "noop"}, "data": {"k": "v"}}),
    )
    .await;
    let cm = format!("{CM}/noop");
    let before = http.get(&cm).await.json();
    let r = http.patch(&cm, MERGE, r#"{"data":{"k":"v"}}"#).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    assert_eq!(
        http.patch(&format!("{DEPLOY}/nope"), MERGE, "{}")
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn validation_and_decoding_errors() {
    let (_api, http) = start().await;
    let r = http
        .post(CM, &json!({"metadata": {"name": "Bad_Name"}}))
        .await;
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["details"]["causes"][0]["field"], "metadata.name");
    let r = http
        .post(
            CM,
            &json!({"metadata": {"name": "x", "namespace": "other"}}),
        )
        .await;
    assert_eq!(r.status, 400);
    let r = http
        .post(
            CM,
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}),
        )
        .await;
    assert_eq!(r.status, 400);
    let r = http
        .post(
            "/api/v1/namespaces/missing/configmaps",
            &json!({"metadata": {"name": "x"}}),
        )
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["message"], "namespaces \"missing\" not found");
    let r = http
        .post(
            CM,
            &json!({"metadata": {"name": "x", "resourceVersion": "5"}}),
        )
        .await;
    assert_eq!(r.status, 500);
    let r = http
        .post(CM, &json!({"metadata": {"generateName": "gen-"}}))
        .await;
    assert_eq!(r.status, 201);
    assert!(
        r.json()["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("gen-")
    );
    let r = http
        .send(
            "POST",
            CM,
            &[("content-type", "application/json")],
            Some(b"garbage".to_vec()),
        )
        .await;
    assert_eq!(r.status, 400);
    let r = http
        .send(
            "GET",
            CM,
            &[("accept", "application/vnd.kubernetes.protobuf")],
            None,
        )
        .await;
    assert_eq!(r.status, 406);
    // Secrets: stringData folds into data; bad base64 is a decode error.
    let secrets = "/api/v1/namespaces/default/secrets";
    let r = http
        .post(
            secrets,
            &json!({"metadata": {"name": "s"}, "stringData": {"p": "hi"}}),
        )
        .await;
    let s = r.json();
    assert_eq!(s["data"]["p"], "aGk=");
    assert_eq!(s["type"], "Opaque");
    assert!(s.get("stringData").is_none());
    let r = http
        .post(
            secrets,
            &json!({"metadata": {"name": "t"}, "data": {"p": "***"}}),
        )
        .await;
    assert_eq!(r.status, 400);
    let r = http
        .post(DEPLOY, &json!({"metadata": {"name": "d"}, "spec": {}}))
        .await;
    assert_eq!(r.status, 422);
    // Methods and paths the apiserver does not serve.
    assert_eq!(
        http.get("/api/v1/namespaces/default/pods").await.status,
        404
    );
    assert_eq!(http.send("PUT", CM, &[], None).await.status, 405);
}

#[tokio::test]
async fn update_semantics() {
    let (_api, http) = start().await;
    let r = http
        .post(CM, &json!({"metadata": {"name": "a"}, "data": {"k": "1"}}))
        .await;
    let mut obj = r.json();
    obj["data"]["k"] = json!("2");
    let r = http.put(&format!("{CM}/a"), &obj).await;
    assert_eq!(r.status, 200);
    // the same body again has a stale resourceVersion
    let r = http.put(&format!("{CM}/a"), &obj).await;
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["reason"], "Conflict");
    // without resourceVersion it is unconditional
    obj["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    obj["data"]["k"] = json!("3");
    assert_eq!(http.put(&format!("{CM}/a"), &obj).await.status, 200);
    // name mismatch, missing object
    assert_eq!(http.put(&format!("{CM}/b"), &obj).await.status, 400);
    obj["metadata"]["name"] = json!("b");
    assert_eq!(http.put(&format!("{CM}/b"), &obj).await.status, 404);
    // immutable ConfigMaps
    http.post(
        CM,
        &json!({"metadata": {"name": "frozen"}, "data": {"k": "1"}, "immutable": true}),
    )
    .await;
    let r = http
        .patch(&format!("{CM}/frozen"), MERGE, r#"{"data":{"k":"2"}}"#)
        .await;
    assert_eq!(r.status, 422);
}

#[tokio::test]
async fn deletion_with_finalizers_namespaces_and_collections() {
    let (_api, http) = start().await;
    http.post(
        CM,
        &json!({"metadata": {"name": "f", "finalizers": ["example.com/x"]}}),
    )
    .await;
    let r = http.delete(&format!("{CM}/f")).await;
    assert_eq!(r.status, 200);
    let obj = r.json();
    assert_eq!(obj["kind"], "ConfigMap");
    assert!(obj["metadata"]["deletionTimestamp"].is_string());
    let r = http
        .patch(
            &format!("{CM}/f"),
            MERGE,
            r#"{"metadata":{"finalizers":null}}"#,
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(http.get(&format!("{CM}/f")).await.status, 404);

    // delete preconditions
    let r = http.post(CM, &json!({"metadata": {"name": "p"}})).await;
    let uid = r.json()["metadata"]["uid"].as_str().unwrap().to_string();
    let r = http
        .send(
            "DELETE",
            &format!("{CM}/p"),
            &[("content-type", "application/json")],
            Some(br#"{"preconditions":{"uid":"nope"}}"#.to_vec()),
        )
        .await;
    assert_eq!(r.status, 409);
    let r = http.delete(&format!("{CM}/p")).await;
    assert_eq!(r.json()["details"]["uid"], uid.as_str());

    // deletecollection with a selector
    for (n, l) in [("x1", "a"), ("x2", "a"), ("x3", "b")] {
        http.post(CM, &json!({"metadata": {"name": n, "labels": {"l": l}}}))
            .await;
    }
    let r = http.delete(&format!("{CM}?labelSelector=l%3Da")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["items"].as_array().unwrap().len(), 2);
    assert_eq!(http.get(&format!("{CM}/x3")).await.status, 200);

    // namespaces: contents go with them
    http.post("/api/v1/namespaces", &json!({"metadata": {"name": "gone"}}))
        .await;
    http.post(
        "/api/v1/namespaces/gone/configmaps",
        &json!({"metadata": {"name": "c"}}),
    )
    .await;
    let r = http.delete("/api/v1/namespaces/gone").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["status"]["phase"], "Terminating");
    assert_eq!(
        http.get("/api/v1/namespaces/gone/configmaps/c")
            .await
            .status,
        404
    );
    assert_eq!(http.get("/api/v1/namespaces/gone").await.status, 404);
}

#[tokio::test]
async fn watches_apply_selectors_to_transitions() {
    let (_api, http) = start().await;
    let start_rv = http.get(CM).await.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    http.post(
        CM,
        &json!({"metadata": {"name": "w", "labels": {"team": "a"}}}),
    )
    .await;
    http.patch(
        &format!("{CM}/w"),
        MERGE,
        r#"{"metadata":{"labels":{"team":"b"}}}"#,
    )
    .await;
    http.patch(
        &format!("{CM}/w"),
        MERGE,
        r#"{"metadata":{"labels":{"team":"a"}}}"#,
    )
    .await;
    http.delete(&format!("{CM}/w")).await;
    // The last event of the history each watch replays: it ends the read.
    http.post(
        CM,
        &json!({"metadata": {"name": "other", "labels": {"team": "a"}}}),
    )
    .await;
    let lines = http
        .replay_until_added(
            &format!("{CM}?watch=true&labelSelector=team%3Da&resourceVersion={start_rv}"),
            "other",
        )
        .await;
    let types: Vec<String> = lines
        .iter()
        .map(|l| l["type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(types, ["ADDED", "DELETED", "ADDED", "DELETED"]);
    // the DELETED for leaving the selector carries the old labels
    assert_eq!(lines[1]["object"]["metadata"]["labels"]["team"], "a");
    // field selectors too
    let lines = http
        .replay_until_added(
            &format!("{CM}?watch=1&fieldSelector=metadata.name%3Dother&resourceVersion={start_rv}"),
            "other",
        )
        .await;
    assert!(lines.is_empty(), "{lines:?}");
}

#[tokio::test]
async fn history_window_and_resource_versions() {
    let api = ApiServerDouble::start_with(Config {
        history_limit: 4,
        bookmark_interval: Duration::from_millis(200),
        ..Config::default()
    })
    .await
    .unwrap();
    let http = Http::new(&api);
    let r = http
        .post(CM, &json!({"metadata": {"name": "h"}, "data": {"n": "0"}}))
        .await;
    let first_rv = resource_version(&r.json());
    for i in 1..10 {
        http.patch(
            &format!("{CM}/h"),
            MERGE,
            &json!({"data": {"n": i.to_string()}}).to_string(),
        )
        .await;
    }
    let lines = http
        .watch_until(
            &format!("{CM}?watch=1&resourceVersion={first_rv}&timeoutSeconds=60"),
            &[("accept", "application/json")],
            Duration::from_secs(30),
            |lines| !lines.is_empty(),
        )
        .await;
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["type"], "ERROR");
    assert_eq!(lines[0]["object"]["code"], 410);
    let r = http
        .get(&format!(
            "{CM}?resourceVersion={first_rv}&resourceVersionMatch=Exact"
        ))
        .await;
    assert_eq!(r.status, 410);
    // within the window, an exact list shows the past
    let cur = api.resource_version();
    let r = http
        .get(&format!(
            "{CM}?resourceVersion={}&resourceVersionMatch=Exact",
            cur - 1
        ))
        .await;
    assert_eq!(r.json()["items"][0]["data"]["n"], "8");
    // the future is a 504
    let r = http
        .get(&format!(
            "{CM}?resourceVersion={}&resourceVersionMatch=NotOlderThan",
            cur + 10
        ))
        .await;
    assert_eq!(r.status, 504);
    let r = http.get(&format!("{CM}?resourceVersionMatch=Exact")).await;
    assert_eq!(r.status, 422);
    // periodic bookmarks carry the latest resourceVersion
    let lines = http
        .watch_until(
            &format!(
                "{CM}?watch=1&allowWatchBookmarks=true&resourceVersion={cur}&timeoutSeconds=60"
            ),
            &[("accept", "application/json")],
            Duration::from_secs(30),
            |lines| lines.len() >= 2,
        )
        .await;
    assert!(lines.iter().all(|l| l["type"] == "BOOKMARK"), "{lines:?}");
    assert_eq!(
        lines[0]["object"]["metadata"]["resourceVersion"],
        cur.to_string()
    );
}

#[tokio::test]
async fn faults_latency_and_recording() {
    let (api, http) = start().await;
    api.fail_next(
        2,
        500,
        RequestFilter::any()
            .method("GET")
            .path_prefix("/api/v1/namespaces/default/configmaps"),
    );
    for _ in 0..2 {
        let r = http.get(CM).await;
        assert_eq!(r.status, 500);
        assert_eq!(r.json()["reason"], "InternalError");
    }
    assert_eq!(http.get(CM).await.status, 200);
    api.fail_next_with_retry_after(1, 429, 3, RequestFilter::any());
    let r = http.get(CM).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.headers["retry-after"], "3");
    assert_eq!(r.json()["reason"], "TooManyRequests");

    api.set_latency(Duration::from_millis(150));
    let t = Instant::now();
    http.get(CM).await;
    assert!(t.elapsed() >= Duration::from_millis(150));
    api.set_latency(Duration::ZERO);

    api.clear_requests();
    http.patch(&format!("{CM}/none?fieldManager=me"), MERGE, r#"{"a":1}"#)
        .await;
    let reqs = api.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!((r.method.as_str(), r.status), ("PATCH", 404));
    assert_eq!(r.path, "/api/v1/namespaces/default/configmaps/none");
    assert_eq!(r.query_param("fieldManager").as_deref(), Some("me"));
    assert_eq!(r.content_type(), Some(MERGE));
    assert_eq!(r.body_json(), Some(json!({"a": 1})));
    assert!(!r.headers.contains_key("authorization"));
}

#[tokio::test]
async fn admin_endpoints() {
    let (_api, http) = start().await;
    let r = http
        .send(
            "POST",
            "/_double/fail-next",
            &[],
            Some(br#"{"count":1,"status":503,"filter":{"method":"GET"}}"#.to_vec()),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(http.get(CM).await.status, 503);
    assert_eq!(http.get(CM).await.status, 200);
    let r = http.send("GET", "/_double/requests", &[], None).await;
    let log = r.json();
    assert_eq!(log.as_array().unwrap().len(), 2);
    assert_eq!(log[0]["status"], 503);
    assert_eq!(
        http.send("DELETE", "/_double/requests", &[], None)
            .await
            .status,
        200
    );
    assert_eq!(
        http.send("GET", "/_double/requests", &[], None)
            .await
            .json(),
        json!([])
    );
    assert_eq!(
        http.send(
            "PUT",
            "/_double/latency",
            &[],
            Some(br#"{"millis":0}"#.to_vec())
        )
        .await
        .status,
        200
    );
    assert_eq!(
        http.send("POST", "/_double/drop-watches", &[], None)
            .await
            .status,
        200
    );
    let state = http.send("GET", "/_double/state", &[], None).await.json();
    assert_eq!(state["objects"]["namespaces"], 4);
    assert_eq!(
        http.send("GET", "/_double/nope", &[], None).await.status,
        404
    );
}

#[tokio::test]
async fn drop_watches_ends_streams() {
    let (api, http) = start().await;
    let h = http.clone();
    let watch =
        tokio::spawn(async move { h.get(&format!("{CM}?watch=1&timeoutSeconds=30")).await });
    tokio::time::timeout(Duration::from_secs(5), async {
        while api.open_watches() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();
    api.drop_watches();
    let r = tokio::time::timeout(Duration::from_secs(5), watch)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn ten_thousand_objects() {
    let (api, http) = start().await;
    let t = Instant::now();
    for i in 0..10_000usize {
        let size = 1024 + (i * 7919) % (19 * 1024);
        api.create(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm-{i:05}"), "namespace": "default", "labels": {"i": (i % 10).to_string()}},
            "data": {"payload": "x".repeat(size)}
        }))
        .unwrap();
    }
    let seeded = t.elapsed();
    // a metadata-only watcher while writes go on: it reads until the 50
    // events of the writes below have come (from `rv` on, so a watch that
    // connects late replays them), however loaded the machine
    let h = http.clone();
    let rv = api.resource_version();
    let watcher = tokio::spawn(async move {
        h.watch_until(
            &format!("{CM}?watch=1&resourceVersion={rv}&timeoutSeconds=120"),
            &[(
                "accept",
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
            )],
            Duration::from_secs(60),
            |events| events.len() >= 50,
        )
        .await
    });
    let t = Instant::now();
    let mut names = 0;
    let mut cont = String::new();
    loop {
        let url = if cont.is_empty() {
            format!("{CM}?limit=500")
        } else {
            format!("{CM}?limit=500&continue={cont}")
        };
        let page = http
            .send(
                "GET",
                &url,
                &[(
                    "accept",
                    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
                )],
                None,
            )
            .await
            .json();
        names += page["items"].as_array().unwrap().len();
        match page["metadata"]["continue"].as_str() {
            Some(c) => cont = c.to_string(),
            None => break,
        }
    }
    let listed = t.elapsed();
    assert_eq!(names, 10_000);
    let t = Instant::now();
    let r = http.get(&format!("{CM}/cm-04242")).await;
    assert_eq!(r.status, 200);
    let r = http
        .get(&format!("{CM}?labelSelector=i%3D3&limit=100"))
        .await;
    assert_eq!(r.json()["items"].as_array().unwrap().len(), 100);
    for i in 0..50 {
        let r = http
            .patch(
                &format!("{CM}/cm-{i:05}"),
                MERGE,
                r#"{"metadata":{"annotations":{"touched":"1"}}}"#,
            )
            .await;
        assert_eq!(r.status, 200);
    }
    let point_ops = t.elapsed();
    let events = watcher.await.unwrap();
    assert_eq!(events.len(), 50);
    assert!(
        events
            .iter()
            .all(|e| e["object"]["kind"] == "PartialObjectMetadata")
    );
    eprintln!(
        "seed 10k: {seeded:?}, list 10k metadata in pages: {listed:?}, 52 point ops: {point_ops:?}"
    );
    assert!(
        point_ops < Duration::from_secs(5),
        "point operations too slow: {point_ops:?}"
    );
}

/// The ResourceQuota admission plugin's object counts: a create beyond a
/// quota's `hard` count is 403 Forbidden, worded as kube-apiserver words it;
/// the quota's status counts what exists.
#[tokio::test]
async fn resource_quotas_refuse_creates_beyond_their_object_counts() {
    let (_api, http) = start().await;
    const QUOTAS: &str = "/api/v1/namespaces/default/resourcequotas";
    const SECRETS: &str = "/api/v1/namespaces/default/secrets";
    let secret = |name: &str| json!({"metadata": {"name": name}, "stringData": {"k": "v"}});
    assert_eq!(http.post(SECRETS, &secret("first")).await.status, 201);
    let quota = json!({"metadata": {"name": "few"},
                       "spec": {"hard": {"secrets": "2", "count/configmaps": "5"}}});
    assert_eq!(http.post(QUOTAS, &quota).await.status, 201);
    let status = http.get(&format!("{QUOTAS}/few")).await.json()["status"].clone();
    assert_eq!(
        status["hard"],
        json!({"secrets": "2", "count/configmaps": "5"})
    );
    assert_eq!(
        status["used"],
        json!({"secrets": "1", "count/configmaps": "0"})
    );

    assert_eq!(http.post(SECRETS, &secret("second")).await.status, 201);
    let refused = http.post(SECRETS, &secret("third")).await;
    assert_eq!(refused.status, 403);
    let body = refused.json();
    assert_eq!(body["reason"], "Forbidden");
    assert_eq!(body["details"], json!({"name": "third", "kind": "secrets"}));
    assert_eq!(
        body["message"],
        "secrets \"third\" is forbidden: exceeded quota: few, requested: secrets=1, used: secrets=2, limited: secrets=2"
    );
    let used = http.get(&format!("{QUOTAS}/few")).await.json()["status"]["used"].clone();
    assert_eq!(used["secrets"], "2");
    // Other namespaces and kinds are not counted against it.
    assert_eq!(
        http.post(CM, &json!({"metadata": {"name": "c"}}))
            .await
            .status,
        201
    );
}

/// kube-apiserver writes a watch event as Go's `WatchEvent` struct, `type`
/// before `object`; a client that reads an adjacently tagged event (kube's
/// `WatchEvent`) reads the object without buffering it only in that order.
#[tokio::test]
async fn watch_lines_name_their_type_before_their_object() {
    let api = ApiServerDouble::start_with(Config {
        bookmark_interval: Duration::from_millis(100),
        ..Config::default()
    })
    .await
    .unwrap();
    let http = Http::new(&api);
    let created = http
        .post(CM, &json!({"metadata": {"name": "t"}, "data": {"n": "0"}}))
        .await;
    let created_rv = resource_version(&created.json());
    let r = http
        .get(&format!(
            "{CM}?watch=1&allowWatchBookmarks=true&resourceVersion=0&timeoutSeconds=1"
        ))
        .await;
    let text = String::from_utf8_lossy(&r.body).into_owned();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let types: Vec<&str> = ["ADDED", "BOOKMARK"]
        .into_iter()
        .filter(|t| lines.iter().any(|l| l.contains(&format!("\"{t}\""))))
        .collect();
    assert_eq!(types, ["ADDED", "BOOKMARK"], "{text}");
    for line in &lines {
        assert!(line.starts_with("{\"type\":\""), "{line}");
    }
    // A watch from before the history kept: its one line is an ERROR.
    api.compact_history();
    let r = http
        .get(&format!(
            "{CM}?watch=1&resourceVersion={}&timeoutSeconds=1",
            created_rv - 1
        ))
        .await;
    let text = String::from_utf8_lossy(&r.body).into_owned();
    let line = text.lines().next().unwrap_or_default();
    assert!(
        line.starts_with("{\"type\":\"ERROR\",\"object\":"),
        "{text}"
    );
}

/// An object's `metadata.resourceVersion`, as the number the double counts in.
fn resource_version(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}
