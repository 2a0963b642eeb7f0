//! CustomResourceDefinitions and the custom resources they serve: the CRD
//! lifecycle and discovery, the verbs, generation and status rules, schema
//! pruning/defaulting/validation, server-side apply by the schema markers,
//! and cleanup when the CRD goes.

use crate::support::crds::{anything_crd, rollout, rollout_crd};
use crate::support::{Http, Resp};
use apiserver_double::ApiServerDouble;
use serde_json::{Value, json};

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const ROLLOUTS: &str = "/apis/argoproj.io/v1alpha1/namespaces/default/rollouts";
const MERGE: &str = "application/merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";

async fn start() -> (ApiServerDouble, Http) {
    let api = ApiServerDouble::start().await.expect("start");
    let http = Http::new(&api);
    (api, http)
}

fn text(r: &Resp) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

async fn with_rollouts() -> (ApiServerDouble, Http) {
    let (api, http) = start().await;
    let r = http.post(CRDS, &rollout_crd()).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    (api, http)
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// Whether `r` is kube-apiserver's answer to a path no API serves: Go's
/// `http.NotFound`, in plain text (kube clients cannot parse it as a Status).
fn is_page_not_found(r: &Resp) -> bool {
    r.status == 404
        && text(r) == "404 page not found\n"
        && r.headers["content-type"] == "text/plain; charset=utf-8"
        && r.headers["x-content-type-options"] == "nosniff"
}

#[tokio::test]
async fn a_group_or_version_not_served_is_a_plain_text_404_until_its_crd_is_installed() {
    let (_api, http) = start().await;
    for path in [
        ROLLOUTS,
        "/apis/argoproj.io/v1alpha1",
        "/apis/argoproj.io",
        "/apis/apps/v1beta9/namespaces/default/deployments",
    ] {
        let r = http.get(path).await;
        assert!(is_page_not_found(&r), "{path}: {} {}", r.status, text(&r));
    }
    // A resource a served built-in group version lacks is a Status.
    let r = http.get("/apis/apps/v1/namespaces/default/gadgets").await;
    assert_eq!(
        (
            r.status,
            r.json()["kind"].clone(),
            r.json()["reason"].clone()
        ),
        (404, json!("Status"), json!("NotFound"))
    );

    let r = http.post(CRDS, &rollout_crd()).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    assert_eq!(http.get(ROLLOUTS).await.status, 200);
    // apiextensions-apiserver hands a path of its group naming no resource
    // on, to the same plain-text answer.
    let r = http
        .get("/apis/argoproj.io/v1alpha1/namespaces/default/gadgets")
        .await;
    assert!(is_page_not_found(&r), "{} {}", r.status, text(&r));
}

#[tokio::test]
async fn a_crd_is_established_and_discoverable_until_deleted() {
    let (_api, http) = start().await;
    assert_eq!(http.get(ROLLOUTS).await.status, 404);
    let r = http.post(CRDS, &rollout_crd()).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let created = r.json();
    assert_eq!(
        created["status"],
        json!({"acceptedNames": {"kind": "", "plural": ""}, "storedVersions": ["v1alpha1"]})
    );
    assert_eq!(created["spec"]["conversion"], json!({"strategy": "None"}));
    assert_eq!(created["metadata"]["generation"], 1);

    let crd = http
        .get(&format!("{CRDS}/rollouts.argoproj.io"))
        .await
        .json();
    let conditions: Vec<(String, String, String)> = crd["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["type"].as_str().unwrap().into(),
                c["status"].as_str().unwrap().into(),
                c["reason"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        conditions,
        [
            ("NamesAccepted".into(), "True".into(), "NoConflicts".into()),
            (
                "Established".into(),
                "True".into(),
                "InitialNamesAccepted".into()
            )
        ]
    );
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "Rollout");
    assert_eq!(crd["status"]["acceptedNames"]["shortNames"], json!(["ro"]));

    let groups = http.get("/apis").await.json();
    let group = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "argoproj.io")
        .cloned()
        .expect("argoproj.io listed");
    assert_eq!(
        group["preferredVersion"],
        json!({"groupVersion": "argoproj.io/v1alpha1", "version": "v1alpha1"})
    );
    let g = http.get("/apis/argoproj.io").await;
    assert_eq!(g.json()["kind"], "APIGroup");
    let resources = http.get("/apis/argoproj.io/v1alpha1").await.json();
    assert_eq!(resources["groupVersion"], "argoproj.io/v1alpha1");
    let main = &resources["resources"][0];
    assert_eq!(main["name"], "rollouts");
    assert_eq!(main["kind"], "Rollout");
    assert_eq!(main["namespaced"], true);
    assert_eq!(main["singularName"], "rollout");
    assert_eq!(main["shortNames"], json!(["ro"]));
    assert_eq!(main["categories"], json!(["all"]));
    assert_eq!(resources["resources"][1]["name"], "rollouts/status");
    assert_eq!(resources["resources"].as_array().unwrap().len(), 2);

    http.post(ROLLOUTS, &rollout("web", "app:1")).await;
    let r = http.delete(&format!("{CRDS}/rollouts.argoproj.io")).await;
    assert_eq!(r.status, 200);
    let deleted = r.json();
    assert_eq!(deleted["kind"], "CustomResourceDefinition");
    assert_eq!(
        deleted["metadata"]["finalizers"],
        json!(["customresourcecleanup.apiextensions.k8s.io"])
    );
    let terminating = deleted["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Terminating")
        .cloned()
        .unwrap();
    assert_eq!(terminating["reason"], "InstanceDeletionPending");

    assert_eq!(
        http.get(&format!("{CRDS}/rollouts.argoproj.io"))
            .await
            .status,
        404
    );
    assert_eq!(http.get(ROLLOUTS).await.status, 404);
    assert_eq!(http.get("/apis/argoproj.io").await.status, 404);
    assert_eq!(http.get("/apis/argoproj.io/v1alpha1").await.status, 404);
    let groups = http.get("/apis").await.json();
    assert!(
        !groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "argoproj.io")
    );

    // A new CRD of the same name starts empty.
    http.post(CRDS, &rollout_crd()).await;
    assert_eq!(
        names(&http.get(ROLLOUTS).await.json()),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn crd_validation_follows_the_apiserver() {
    let (_api, http) = start().await;
    let mut bad = rollout_crd();
    bad["metadata"]["name"] = json!("rollouts.example.com");
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["weights"] =
        json!({"type": "array"});
    let r = http.post(CRDS, &bad).await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["message"],
        "CustomResourceDefinition.apiextensions.k8s.io \"rollouts.example.com\" is invalid: [metadata.name: Invalid value: \"rollouts.example.com\": must be spec.names.plural+\".\"+spec.group, spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[weights].items: Required value: must be specified]"
    );

    let mut no_schema = rollout_crd();
    no_schema["spec"]["versions"][0]
        .as_object_mut()
        .unwrap()
        .remove("schema");
    let r = http.post(CRDS, &no_schema).await;
    assert_eq!(
        r.json()["message"],
        "CustomResourceDefinition.apiextensions.k8s.io \"rollouts.argoproj.io\" is invalid: spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required"
    );

    http.post(CRDS, &rollout_crd()).await;
    let r = http
        .patch(
            &format!("{CRDS}/rollouts.argoproj.io"),
            MERGE,
            r#"{"spec":{"scope":"Cluster"}}"#,
        )
        .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["details"]["causes"][0]["message"],
        "Invalid value: \"Cluster\": field is immutable"
    );
    let r = http.post(CRDS, &rollout_crd()).await;
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["reason"], "AlreadyExists");
}

#[tokio::test]
async fn custom_resources_behave_like_built_in_kinds() {
    let (_api, http) = with_rollouts().await;
    let r = http.post(ROLLOUTS, &rollout("web", "app:1")).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let web = r.json();
    assert_eq!(web["apiVersion"], "argoproj.io/v1alpha1");
    assert_eq!(web["kind"], "Rollout");
    assert_eq!(web["metadata"]["generation"], 1);
    assert_eq!(web["spec"]["revisionHistoryLimit"], 10, "schema default");
    assert!(web["metadata"]["uid"].is_string());
    let rv = web["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    let r = http.post(ROLLOUTS, &rollout("web", "app:1")).await;
    assert_eq!(r.status, 409);
    assert_eq!(
        r.json()["message"],
        "rollouts.argoproj.io \"web\" already exists"
    );
    assert_eq!(
        r.json()["details"],
        json!({"name": "web", "group": "argoproj.io", "kind": "rollouts"})
    );
    let r = http.get(&format!("{ROLLOUTS}/nope")).await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json()["message"],
        "rollouts.argoproj.io \"nope\" not found"
    );

    for n in ["api", "worker"] {
        http.post(ROLLOUTS, &rollout(n, "app:1")).await;
    }
    let list = http.get(ROLLOUTS).await.json();
    assert_eq!(list["kind"], "RolloutList");
    assert_eq!(list["apiVersion"], "argoproj.io/v1alpha1");
    assert_eq!(
        list["items"][0]["kind"], "Rollout",
        "unstructured lists keep type meta"
    );
    assert_eq!(names(&list), ["api", "web", "worker"]);
    let page = http.get(&format!("{ROLLOUTS}?limit=2")).await.json();
    assert_eq!(names(&page), ["api", "web"]);
    let token = page["metadata"]["continue"].as_str().unwrap();
    let rest = http
        .get(&format!("{ROLLOUTS}?limit=2&continue={token}"))
        .await
        .json();
    assert_eq!(names(&rest), ["worker"]);
    let sel = http
        .get(&format!("{ROLLOUTS}?labelSelector=app%3Dapi"))
        .await
        .json();
    assert_eq!(names(&sel), ["api"]);
    let sel = http
        .get(&format!("{ROLLOUTS}?fieldSelector=metadata.name%3Dworker"))
        .await
        .json();
    assert_eq!(names(&sel), ["worker"]);
    let all = http.get("/apis/argoproj.io/v1alpha1/rollouts").await.json();
    assert_eq!(names(&all).len(), 3);
    let r = http
        .get(&format!("{ROLLOUTS}?fieldSelector=spec.replicas%3D2"))
        .await;
    assert_eq!(r.status, 400);

    // A stale resourceVersion conflicts.
    let mut stale = web.clone();
    stale["spec"]["replicas"] = json!(5);
    http.patch(
        &format!("{ROLLOUTS}/web"),
        MERGE,
        r#"{"spec":{"paused":true}}"#,
    )
    .await;
    stale["metadata"]["resourceVersion"] = json!(rv);
    let r = http.put(&format!("{ROLLOUTS}/web"), &stale).await;
    assert_eq!(r.status, 409);
    assert_eq!(
        r.json()["message"],
        "Operation cannot be fulfilled on rollouts.argoproj.io \"web\": the object has been modified; please apply your changes to the latest version and try again"
    );

    // Watch from the first resourceVersion sees the later changes.
    http.post(ROLLOUTS, &rollout("last", "app:1")).await;
    let lines = http
        .replay_until_added(&format!("{ROLLOUTS}?watch=1&resourceVersion={rv}"), "last")
        .await;
    let events: Vec<(String, String)> = lines
        .iter()
        .map(|l| {
            (
                l["type"].as_str().unwrap().into(),
                l["object"]["metadata"]["name"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            ("ADDED".into(), "api".into()),
            ("ADDED".into(), "worker".into()),
            ("MODIFIED".into(), "web".into())
        ]
    );

    let r = http.delete(&format!("{ROLLOUTS}/api")).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["details"],
        json!({"group": "argoproj.io", "kind": "rollouts", "name": "api",
               "uid": r.json()["details"]["uid"]})
    );
    assert_eq!(http.get(&format!("{ROLLOUTS}/api")).await.status, 404);
}

#[tokio::test]
async fn generation_and_the_status_subresource() {
    let (_api, http) = with_rollouts().await;
    let mut with_status = rollout("web", "app:1");
    with_status["status"] = json!({"phase": "Healthy"});
    let r = http.post(ROLLOUTS, &with_status).await;
    assert!(r.json().get("status").is_none(), "create cannot set status");
    let url = format!("{ROLLOUTS}/web");

    let r = http
        .patch(&url, MERGE, r#"{"metadata":{"labels":{"tier":"x"}}}"#)
        .await;
    assert_eq!(r.json()["metadata"]["generation"], 1, "metadata only");
    let r = http.patch(&url, MERGE, r#"{"spec":{"replicas":3}}"#).await;
    assert_eq!(r.json()["metadata"]["generation"], 2);
    let r = http
        .patch(&url, MERGE, r#"{"status":{"phase":"Degraded"}}"#)
        .await;
    assert!(
        r.json().get("status").is_none(),
        "main resource ignores status"
    );
    assert_eq!(r.json()["metadata"]["generation"], 2);

    let r = http
        .patch(
            &format!("{url}/status"),
            MERGE,
            r#"{"status":{"phase":"Healthy"},"spec":{"replicas":9},"metadata":{"labels":{"tier":"y"}}}"#,
        )
        .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    let s = r.json();
    assert_eq!(s["status"]["phase"], "Healthy");
    assert_eq!(s["spec"]["replicas"], 3, "status writes keep the spec");
    assert_eq!(s["metadata"]["labels"]["tier"], "x", "and the metadata");
    assert_eq!(s["metadata"]["generation"], 2);
    let status_manager = s["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["subresource"] == "status")
        .cloned()
        .unwrap();
    assert_eq!(
        status_manager["fieldsV1"],
        json!({"f:status": {".": {}, "f:phase": {}}})
    );
    let r = http.get(&format!("{url}/status")).await;
    assert_eq!(r.json()["status"]["phase"], "Healthy");
    // Declared but not served by the double.
    assert_eq!(http.get(&format!("{url}/scale")).await.status, 404);
}

#[tokio::test]
async fn schema_pruning_defaults_and_validation() {
    let (_api, http) = with_rollouts().await;
    let mut bad = rollout("web", "app:1");
    bad["spec"]["replicas"] = json!("three");
    let r = http.post(ROLLOUTS, &bad).await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["message"],
        "Rollout.argoproj.io \"web\" is invalid: spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""
    );
    assert_eq!(r.json()["details"]["kind"], "Rollout");
    assert_eq!(r.json()["details"]["group"], "argoproj.io");

    let mut dup = rollout("web", "app:1");
    dup["spec"]["template"]["spec"]["containers"] =
        json!([{"name": "a", "image": "x"}, {"name": "a", "image": "y"}]);
    dup["spec"]["template"]["spec"]["restartPolicy"] = json!("Sometimes");
    let r = http.post(ROLLOUTS, &dup).await;
    assert_eq!(
        r.json()["message"],
        "Rollout.argoproj.io \"web\" is invalid: [spec.template.spec.containers[1]: Duplicate value: map[string]interface {}{\"name\":\"a\"}, spec.template.spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"\\\"Always\\\"\", \"\\\"OnFailure\\\"\", \"\\\"Never\\\"\"]"
    );

    let mut missing = rollout("web", "app:1");
    missing["spec"].as_object_mut().unwrap().remove("template");
    let r = http.post(ROLLOUTS, &missing).await;
    assert_eq!(
        r.json()["message"],
        "Rollout.argoproj.io \"web\" is invalid: spec.template: Required value"
    );

    let mut unknown = rollout("web", "app:1");
    unknown["spec"]["bogus"] = json!(true);
    unknown["spec"]["template"]["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80}]);
    let r = http
        .post(&format!("{ROLLOUTS}?fieldValidation=Strict"), &unknown)
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["message"],
        "strict decoding error: unknown field \"spec.bogus\""
    );
    let r = http.post(ROLLOUTS, &unknown).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let created = r.json();
    assert!(created["spec"].get("bogus").is_none(), "pruned");
    assert_eq!(
        created["spec"]["template"]["spec"]["containers"][0]["ports"],
        json!([{"containerPort": 80, "protocol": "TCP"}])
    );
    assert_eq!(
        created["spec"]["strategy"]["canary"]["steps"][1],
        json!({"pause": {}}),
        "preserved unknown fields are kept as sent"
    );

    let r = http
        .patch(
            &format!("{ROLLOUTS}/web"),
            "application/strategic-merge-patch+json",
            r#"{"spec":{"replicas":1}}"#,
        )
        .await;
    assert_eq!(r.status, 415);
    let r = http
        .patch(
            &format!("{ROLLOUTS}/web"),
            "application/json-patch+json",
            r#"[{"op":"replace","path":"/spec/replicas","value":4}]"#,
        )
        .await;
    assert_eq!(r.json()["spec"]["replicas"], 4);
}

fn manager<'a>(obj: &'a Value, name: &str) -> &'a Value {
    obj["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["manager"] == name)
        .unwrap_or_else(|| panic!("no manager {name}: {obj}"))
}

#[tokio::test]
async fn server_side_apply_merges_by_the_schema_markers() {
    let (_api, http) = with_rollouts().await;
    let url = |m: &str| format!("{ROLLOUTS}/web?fieldManager={m}");
    let r = http
        .patch(&url("gitops"), APPLY, &rollout("web", "app:1").to_string())
        .await;
    assert_eq!(r.status, 201, "{}", text(&r));

    // Another manager adds an env var to the same container: list-map merge.
    let stamp = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "web"},
        "spec": {"template": {"spec": {"containers": [{"name": "app",
            "env": [{"name": "CONFIG_HASH", "value": "abc"}]}]}}}});
    let r = http.patch(&url("nudge"), APPLY, &stamp.to_string()).await;
    assert_eq!(r.status, 200, "{}", text(&r));
    let obj = r.json();
    assert_eq!(
        obj["spec"]["template"]["spec"]["containers"][0]["env"],
        json!([{"name": "A", "value": "1"}, {"name": "CONFIG_HASH", "value": "abc"}])
    );
    assert_eq!(obj["metadata"]["generation"], 2);
    assert_eq!(
        manager(&obj, "nudge")["fieldsV1"],
        json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
            "k:{\"name\":\"app\"}": {".": {}, "f:env": {
                "k:{\"name\":\"CONFIG_HASH\"}": {".": {}, "f:name": {}, "f:value": {}}},
                "f:name": {}}}}}}})
    );

    // Changing a field another manager owns conflicts unless forced.
    let mut takeover = stamp.clone();
    takeover["spec"]["template"]["spec"]["containers"][0]["image"] = json!("app:2");
    let r = http
        .patch(&url("nudge"), APPLY, &takeover.to_string())
        .await;
    assert_eq!(r.status, 409);
    assert_eq!(
        r.json()["message"],
        "Apply failed with 1 conflict: conflict with \"gitops\": .spec.template.spec.containers[name=\"app\"].image"
    );

    // The atomic selector map is one field; under a preserve-unknown-fields
    // node every key is its own member and lists (steps) are atomic.
    let gitops = manager(&obj, "gitops")["fieldsV1"].to_string();
    assert!(gitops.contains("\"f:selector\":{}"), "{gitops}");
    assert!(
        gitops.contains("\"f:strategy\":{\"f:canary\":{\".\":{},\"f:steps\":{}}}"),
        "{gitops}"
    );

    // Dropping the env var from the stamp removes it (nobody else owns it).
    let mut unstamp = stamp.clone();
    unstamp["spec"]["template"]["spec"]["containers"][0]["env"] = json!([]);
    let r = http.patch(&url("nudge"), APPLY, &unstamp.to_string()).await;
    assert_eq!(
        r.json()["spec"]["template"]["spec"]["containers"][0]["env"],
        json!([{"name": "A", "value": "1"}])
    );
}

#[tokio::test]
async fn a_schema_that_keeps_everything() {
    let (_api, http) = start().await;
    let r = http.post(CRDS, &anything_crd("Cluster")).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let things = "/apis/example.com/v1/things";
    let thing = json!({"apiVersion": "example.com/v1", "kind": "Thing",
        "metadata": {"name": "t1"},
        "spec": {"nested": {"list": [1, 2, {"x": null}], "empty": {}}},
        "status": {"ready": false}});
    let r = http.post(things, &thing).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let t = r.json();
    assert_eq!(t["spec"], thing["spec"]);
    assert_eq!(
        t["status"],
        json!({"ready": false}),
        "no status subresource"
    );
    assert!(t["metadata"].get("namespace").is_none());
    assert_eq!(http.get(&format!("{things}/t1/status")).await.status, 404);
    let r = http
        .patch(
            &format!("{things}/t1"),
            MERGE,
            r#"{"status":{"ready":true}}"#,
        )
        .await;
    assert_eq!(
        r.json()["metadata"]["generation"],
        2,
        "status is just a field"
    );

    // Applies by two managers merge maps per key; lists stay atomic.
    let apply = |body: Value| body.to_string();
    // The list belongs to the creator: taking it over needs force.
    let r = http
        .patch(
            &format!("{things}/t1?fieldManager=a&force=true"),
            APPLY,
            &apply(json!({"apiVersion": "example.com/v1", "kind": "Thing",
                "metadata": {"name": "t1"}, "spec": {"nested": {"a": 1, "list": [3]}}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    let r = http
        .patch(
            &format!("{things}/t1?fieldManager=b"),
            APPLY,
            &apply(json!({"apiVersion": "example.com/v1", "kind": "Thing",
                "metadata": {"name": "t1"}, "spec": {"nested": {"b": 2}}})),
        )
        .await;
    let t = r.json();
    assert_eq!(t["spec"]["nested"]["a"], 1);
    assert_eq!(t["spec"]["nested"]["b"], 2);
    assert_eq!(t["spec"]["nested"]["list"], json!([3]));
    assert_eq!(
        manager(&t, "a")["fieldsV1"],
        json!({"f:spec": {".": {}, "f:nested": {".": {}, "f:a": {}, "f:list": {}}}})
    );

    // Seeding through the Rust API works for custom resources too.
    drop(http);
}

#[tokio::test]
async fn served_versions_share_one_storage() {
    let (_api, http) = start().await;
    let mut crd = rollout_crd();
    let v1alpha1 = crd["spec"]["versions"][0].clone();
    let mut v1beta1 = v1alpha1.clone();
    v1beta1["name"] = json!("v1beta1");
    v1beta1["storage"] = json!(false);
    crd["spec"]["versions"] = json!([v1alpha1, v1beta1]);
    let r = http.post(CRDS, &crd).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let group = http.get("/apis/argoproj.io").await.json();
    assert_eq!(group["preferredVersion"]["version"], "v1beta1");
    assert_eq!(
        group["versions"],
        json!([{"groupVersion": "argoproj.io/v1beta1", "version": "v1beta1"},
               {"groupVersion": "argoproj.io/v1alpha1", "version": "v1alpha1"}])
    );
    let beta = "/apis/argoproj.io/v1beta1/namespaces/default/rollouts";
    let mut web = rollout("web", "app:1");
    web["apiVersion"] = json!("argoproj.io/v1beta1");
    let r = http.post(beta, &web).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    assert_eq!(r.json()["apiVersion"], "argoproj.io/v1beta1");
    let alpha = http.get(&format!("{ROLLOUTS}/web")).await.json();
    assert_eq!(alpha["apiVersion"], "argoproj.io/v1alpha1");
    assert_eq!(
        alpha["metadata"]["managedFields"][0]["apiVersion"],
        "argoproj.io/v1beta1"
    );
    let list = http.get(beta).await.json();
    assert_eq!(list["items"][0]["apiVersion"], "argoproj.io/v1beta1");
}

#[tokio::test]
async fn deleting_the_crd_deletes_its_objects_and_ends_watches() {
    let (api, http) = with_rollouts().await;
    for n in ["a", "b"] {
        http.post(ROLLOUTS, &rollout(n, "app:1")).await;
    }
    let watch_http = http.clone();
    let watch = tokio::spawn(async move {
        watch_http
            .get(&format!("{ROLLOUTS}?watch=1&timeoutSeconds=30"))
            .await
    });
    tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while api.open_watches() == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the watch is open");
    let r = http.delete(&format!("{CRDS}/rollouts.argoproj.io")).await;
    assert_eq!(r.status, 200);
    let w = tokio::time::timeout(std::time::Duration::from_secs(5), watch)
        .await
        .expect("the watch ends with its resource")
        .unwrap();
    let kinds: Vec<String> = w
        .lines()
        .iter()
        .map(|l| {
            format!(
                "{} {}",
                l["type"].as_str().unwrap(),
                l["object"]["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(kinds, ["ADDED a", "ADDED b", "DELETED a", "DELETED b"]);
}

#[tokio::test]
async fn seeding_custom_resources_without_http() {
    let api = ApiServerDouble::start().await.expect("start");
    api.create(rollout_crd()).expect("crd");
    let web = api.create(rollout("web", "app:1")).expect("rollout");
    assert_eq!(web["metadata"]["namespace"], "default");
    assert_eq!(web["spec"]["revisionHistoryLimit"], 10);
    let err = api
        .create(
            json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
            "metadata": {"name": "bad"}, "spec": {}}),
        )
        .unwrap_err();
    assert!(err.to_string().starts_with("422 Invalid"), "{err}");
}
