//! batch/v1 Jobs and CronJobs: defaults, generated selectors, validation,
//! immutability, generation, status subresource, deletion defaults.

use crate::support::Http;
use apiserver_double::ApiServerDouble;
use serde_json::{Value, json};

const JOBS: &str = "/apis/batch/v1/namespaces/default/jobs";
const CRONJOBS: &str = "/apis/batch/v1/namespaces/default/cronjobs";
const MERGE: &str = "application/merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";

async fn start() -> (ApiServerDouble, Http) {
    let api = ApiServerDouble::start().await.expect("start");
    let http = Http::new(&api);
    (api, http)
}

fn job(name: &str) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "pi", "image": "perl:5.34"}]
        }}}
    })
}

fn cron_job(name: &str, schedule: &str) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {"schedule": schedule, "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "OnFailure",
            "containers": [{"name": "hello", "image": "busybox:1.28"}]
        }}}}}
    })
}

fn text(r: &crate::support::Resp) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

#[tokio::test]
async fn job_create_generates_selector_labels_and_defaults() {
    let (_api, http) = start().await;
    let r = http.post(JOBS, &job("pi")).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let j = r.json();
    let uid = j["metadata"]["uid"].as_str().unwrap();
    let labels = json!({
        "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": "pi",
        "controller-uid": uid, "job-name": "pi"
    });
    assert_eq!(j["metadata"]["labels"], labels);
    assert_eq!(j["metadata"]["generation"], 1);
    assert_eq!(j["status"], json!({}));
    let spec = &j["spec"];
    assert_eq!(
        spec["selector"],
        json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
    );
    assert_eq!(spec["template"]["metadata"]["labels"], labels);
    for (k, v) in [
        ("backoffLimit", json!(6)),
        ("completions", json!(1)),
        ("parallelism", json!(1)),
        ("completionMode", json!("NonIndexed")),
        ("suspend", json!(false)),
        ("manualSelector", json!(false)),
        ("podReplacementPolicy", json!("TerminatingOrFailed")),
    ] {
        assert_eq!(spec[k], v, "{k}");
    }
    assert_eq!(spec["template"]["spec"]["dnsPolicy"], "ClusterFirst");
    // The generated selector and labels are not anybody's managed fields.
    let fields = j["metadata"]["managedFields"][0]["fieldsV1"].to_string();
    assert!(!fields.contains("selector"), "{fields}");
    assert!(!fields.contains("controller-uid"), "{fields}");

    let list = http
        .get(&format!("{JOBS}?fieldSelector=status.successful%3D0"))
        .await;
    assert_eq!(list.json()["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn job_validation_follows_the_apiserver() {
    let (_api, http) = start().await;
    let mut no_restart = job("a");
    no_restart["spec"]["template"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("restartPolicy");
    let r = http.post(JOBS, &no_restart).await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["message"],
        "Job.batch \"a\" is invalid: spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\""
    );
    assert_eq!(r.json()["details"]["kind"], "Job");
    assert_eq!(r.json()["details"]["group"], "batch");

    let mut always = job("b");
    always["spec"]["template"]["spec"]["restartPolicy"] = json!("Sometimes");
    let r = http.post(JOBS, &always).await;
    assert_eq!(
        r.json()["details"]["causes"][0]["message"],
        "Unsupported value: \"Sometimes\": supported values: \"OnFailure\", \"Never\""
    );

    let mut own_selector = job("c");
    own_selector["spec"]["selector"] = json!({"matchLabels": {"app": "c"}});
    own_selector["spec"]["template"]["metadata"] = json!({"labels": {"app": "c"}});
    let r = http.post(JOBS, &own_selector).await;
    assert_eq!(r.status, 422, "{}", text(&r));
    let causes = r.json()["details"]["causes"].clone();
    assert!(
        causes
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["field"] == "spec.selector"
                && c["message"]
                    .as_str()
                    .unwrap()
                    .ends_with("`selector` not auto-generated")),
        "{causes}"
    );

    let mut manual = own_selector.clone();
    manual["spec"]["manualSelector"] = json!(true);
    let r = http.post(JOBS, &manual).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    assert_eq!(
        r.json()["spec"]["template"]["metadata"]["labels"],
        json!({"app": "c"})
    );

    let mut negative = job("d");
    negative["spec"]["backoffLimit"] = json!(-1);
    negative["spec"]["completionMode"] = json!("Sometimes");
    let r = http.post(JOBS, &negative).await;
    assert_eq!(
        r.json()["message"],
        "Job.batch \"d\" is invalid: [spec.backoffLimit: Invalid value: -1: must be greater than or equal to 0, spec.completionMode: Unsupported value: \"Sometimes\": supported values: \"NonIndexed\", \"Indexed\"]"
    );
}

#[tokio::test]
async fn job_template_is_immutable_and_generation_follows_spec() {
    let (_api, http) = start().await;
    http.post(JOBS, &job("pi")).await;
    let url = format!("{JOBS}/pi");
    let r = http
        .patch(
            &url,
            MERGE,
            r#"{"spec":{"template":{"spec":{"containers":[{"name":"pi","image":"perl:5.36"}]}}}}"#,
        )
        .await;
    assert_eq!(r.status, 422);
    let e = r.json();
    assert_eq!(e["reason"], "Invalid");
    assert_eq!(e["details"]["causes"][0]["field"], "spec.template");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .ends_with(": field is immutable"),
        "{e}"
    );
    let r = http
        .patch(
            &url,
            MERGE,
            r#"{"spec":{"template":{"metadata":{"labels":{"extra":"x"}}}}}"#,
        )
        .await;
    assert_eq!(
        r.status, 422,
        "labels of a running Job's template are immutable"
    );
    let r = http
        .patch(&url, MERGE, r#"{"spec":{"completions":3}}"#)
        .await;
    assert_eq!(
        r.json()["message"],
        "Job.batch \"pi\" is invalid: spec.completions: Invalid value: 3: field is immutable"
    );

    let r = http
        .patch(&url, MERGE, r#"{"spec":{"parallelism":2}}"#)
        .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(r.json()["metadata"]["generation"], 2);
    let r = http
        .patch(&url, MERGE, r#"{"metadata":{"annotations":{"a":"b"}}}"#)
        .await;
    assert_eq!(r.json()["metadata"]["generation"], 2);

    // Status goes through /status only, without a generation bump.
    let r = http
        .patch(
            &format!("{url}/status"),
            MERGE,
            r#"{"status":{"active":1}}"#,
        )
        .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(r.json()["status"]["active"], 1);
    assert_eq!(r.json()["metadata"]["generation"], 2);
    let r = http.patch(&url, MERGE, r#"{"status":{"active":5}}"#).await;
    assert_eq!(r.json()["status"]["active"], 1);
}

#[tokio::test]
async fn suspended_jobs_accept_scheduling_directives_only() {
    let (_api, http) = start().await;
    let mut j = job("s");
    j["spec"]["suspend"] = json!(true);
    http.post(JOBS, &j).await;
    let url = format!("{JOBS}/s");
    let r = http
        .patch(
            &url,
            MERGE,
            r#"{"spec":{"template":{"metadata":{"labels":{"extra":"x"}},"spec":{"nodeSelector":{"disk":"ssd"}}}}}"#,
        )
        .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(r.json()["metadata"]["generation"], 2);
    let r = http
        .patch(
            &url,
            MERGE,
            r#"{"spec":{"template":{"spec":{"activeDeadlineSeconds":5}}}}"#,
        )
        .await;
    assert_eq!(r.status, 422);
}

#[tokio::test]
async fn server_side_apply_of_a_job() {
    let (_api, http) = start().await;
    let url = format!("{JOBS}/applied?fieldManager=ci");
    let r = http.patch(&url, APPLY, &job("applied").to_string()).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let r = http.patch(&url, APPLY, &job("applied").to_string()).await;
    assert_eq!(r.status, 200, "re-apply of the same manifest: {}", text(&r));
    let mut changed = job("applied");
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("perl:5.36");
    let r = http.patch(&url, APPLY, &changed.to_string()).await;
    assert_eq!(r.status, 422, "{}", text(&r));
}

#[tokio::test]
async fn cron_job_defaults_schedule_and_mutable_template() {
    let (_api, http) = start().await;
    let r = http.post(CRONJOBS, &cron_job("hello", "*/5 * * * *")).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let c = r.json();
    assert_eq!(c["spec"]["concurrencyPolicy"], "Allow");
    assert_eq!(c["spec"]["suspend"], false);
    assert_eq!(c["spec"]["successfulJobsHistoryLimit"], 3);
    assert_eq!(c["spec"]["failedJobsHistoryLimit"], 1);
    assert_eq!(c["status"], json!({}));
    assert_eq!(c["metadata"]["generation"], 1);

    let r = http
        .patch(
            &format!("{CRONJOBS}/hello"),
            MERGE,
            r#"{"spec":{"jobTemplate":{"spec":{"template":{"spec":{"containers":[{"name":"hello","image":"busybox:1.36"}]}}}}}}"#,
        )
        .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(r.json()["metadata"]["generation"], 2);

    let r = http.post(CRONJOBS, &cron_job("bad", "61 * * * *")).await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["message"],
        "CronJob.batch \"bad\" is invalid: spec.schedule: Invalid value: \"61 * * * *\": end of range (61) above maximum (59): 61"
    );
    let r = http.post(CRONJOBS, &cron_job("nightly", "@daily")).await;
    assert_eq!(r.status, 201);
    let mut missing = cron_job("none", "");
    missing["spec"].as_object_mut().unwrap().remove("schedule");
    let r = http.post(CRONJOBS, &missing).await;
    assert_eq!(
        r.json()["message"],
        "CronJob.batch \"none\" is invalid: spec.schedule: Required value"
    );
    let long = "c".repeat(53);
    let r = http.post(CRONJOBS, &cron_job(&long, "@hourly")).await;
    assert_eq!(
        r.json()["details"]["causes"][0]["message"],
        format!("Invalid value: \"{long}\": must be no more than 52 characters")
    );
}

fn owned_job(name: &str, owner: &Value) -> Value {
    let mut j = job(name);
    j["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "batch/v1", "kind": "CronJob", "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true
    }]);
    j
}

#[tokio::test]
async fn deleting_a_cron_job_deletes_its_jobs() {
    let (_api, http) = start().await;
    let cron = http
        .post(CRONJOBS, &cron_job("hello", "* * * * *"))
        .await
        .json();
    http.post(JOBS, &owned_job("hello-1", &cron)).await;
    http.post(JOBS, &owned_job("hello-2", &cron)).await;
    http.post(JOBS, &job("unrelated")).await;
    let r = http.delete(&format!("{CRONJOBS}/hello")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["kind"], "Status");
    let names: Vec<String> = http.get(JOBS).await.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["unrelated"]);
}

#[tokio::test]
async fn deleting_a_job_orphans_by_default() {
    let (_api, http) = start().await;
    let j = http.post(JOBS, &job("pi")).await.json();
    let dependent = json!({"metadata": {"name": "result", "ownerReferences": [{
        "apiVersion": "batch/v1", "kind": "Job", "name": "pi", "uid": j["metadata"]["uid"]}]}});
    http.post("/api/v1/namespaces/default/configmaps", &dependent)
        .await;
    let r = http.delete(&format!("{JOBS}/pi")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["kind"], "Job");
    assert_eq!(r.json()["metadata"]["finalizers"], json!(["orphan"]));
    assert_eq!(http.get(&format!("{JOBS}/pi")).await.status, 404);
    let cm = http
        .get("/api/v1/namespaces/default/configmaps/result")
        .await;
    assert_eq!(cm.status, 200);
    assert!(cm.json()["metadata"].get("ownerReferences").is_none());

    // With Background the dependents go too.
    let j = http.post(JOBS, &job("pi2")).await.json();
    let mut dependent2 = dependent.clone();
    dependent2["metadata"]["name"] = json!("result2");
    dependent2["metadata"]["ownerReferences"][0]["uid"] = j["metadata"]["uid"].clone();
    http.post("/api/v1/namespaces/default/configmaps", &dependent2)
        .await;
    let r = http
        .delete(&format!("{JOBS}/pi2?propagationPolicy=Background"))
        .await;
    assert_eq!(r.json()["kind"], "Status");
    assert_eq!(
        http.get("/api/v1/namespaces/default/configmaps/result2")
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn discovery_lists_batch() {
    let (_api, http) = start().await;
    let groups = http.get("/apis").await.json();
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "batch")
    );
    let names: Vec<String> = http.get("/apis/batch/v1").await.json()["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        ["cronjobs", "cronjobs/status", "jobs", "jobs/status"]
    );
}
