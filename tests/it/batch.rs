//! CronJobs and Jobs (Reloader's behaviour): a CronJob whose config changes
//! starts one Job at once; a Job whose config changes is recreated. Neither
//! happens when nudge first sees the workload or after a restart.

use crate::support::*;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::ResourceExt;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};

const CONFIG_HASH: &str = "nudge.dev/config-hash";

fn pod(configmap: &str) -> Value {
    let mut pod = pod_mounting_configmap(configmap);
    pod["restartPolicy"] = json!("Never");
    pod
}

async fn create_cron_job(cluster: &TestCluster, name: &str, annotations: Value) {
    let cron_job: CronJob = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": { "name": name, "annotations": annotations },
        "spec": {
            "schedule": "0 0 1 1 *",
            "suspend": true,
            "jobTemplate": {
                "metadata": { "labels": { "team": "a" } },
                "spec": { "template": { "spec": pod("cfg") } },
            },
        },
    }))
    .unwrap();
    cluster
        .api::<CronJob>()
        .create(&PostParams::default(), &cron_job)
        .await
        .unwrap();
}

async fn cron_job(cluster: &TestCluster, name: &str) -> Value {
    serde_json::to_value(cluster.api::<CronJob>().get(name).await.unwrap()).unwrap()
}

/// Jobs owned by the CronJob `name`.
async fn jobs_of(cluster: &TestCluster, name: &str) -> Vec<Job> {
    let jobs = cluster
        .api::<Job>()
        .list(&ListParams::default())
        .await
        .unwrap();
    jobs.items
        .into_iter()
        .filter(|job| {
            job.owner_references()
                .iter()
                .any(|o| o.kind == "CronJob" && o.name == name)
        })
        .collect()
}

async fn adopted_value(cluster: &TestCluster, cron_job_name: &str) -> String {
    wait_for("the CronJob's adoption", WAIT, || async {
        cron_job(cluster, cron_job_name).await["metadata"]["annotations"][CONFIG_HASH]
            .as_str()
            .map(str::to_owned)
    })
    .await
}

async fn template_stamp(cluster: &TestCluster, name: &str) -> Option<String> {
    let value = cron_job(cluster, name).await;
    value["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH]
        .as_str()
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_job_runs_once_when_its_config_changes_and_never_at_adoption_or_restart() {
    let cluster = TestCluster::start("cronjob-run").await;
    let sentinel = cluster.sentinel().await;
    cluster.put_configmap("cfg", &[("k", "1")]).await;
    create_cron_job(&cluster, "nightly", json!({ "nudge.dev/auto": "true" })).await;
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;

    let adopted = adopted_value(&cluster, "nightly").await;
    assert_eq!(
        template_stamp(&cluster, "nightly").await,
        None,
        "adopted, not stamped"
    );
    assert!(
        jobs_of(&cluster, "nightly").await.is_empty(),
        "nothing runs at adoption"
    );

    cluster.put_configmap("cfg", &[("k", "2")]).await;
    let stamped = wait_for("the job template to be stamped", WAIT, || {
        template_stamp(&cluster, "nightly")
    })
    .await;
    assert_ne!(stamped, adopted);
    let jobs = wait_for("the Job", WAIT, || async {
        Some(jobs_of(&cluster, "nightly").await).filter(|jobs| !jobs.is_empty())
    })
    .await;
    assert_eq!(jobs.len(), 1);
    let job = &jobs[0];
    assert_eq!(
        job.annotations()
            .get("cronjob.kubernetes.io/instantiate")
            .map(String::as_str),
        Some("manual")
    );
    assert!(job.name_any().starts_with("nightly-"), "{}", job.name_any());
    assert_eq!(job.labels().get("team").map(String::as_str), Some("a"));
    let owner = &job.owner_references()[0];
    assert_eq!(
        (owner.controller, owner.kind.as_str()),
        (Some(true), "CronJob")
    );
    let template =
        serde_json::to_value(job).unwrap()["spec"]["template"]["metadata"]["annotations"]
            [CONFIG_HASH]
            .clone();
    assert_eq!(template, stamped, "the Job runs the new config");
    nudge.stop().await;

    // A restart re-reads everything and runs nothing: once nudge is ready (it
    // has handed its core what it listed) and has finished what that caused,
    // the CronJob still has one Job.
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    sentinel.quiesce_kinds(&nudge, &["CronJob"]).await;
    assert_eq!(jobs_of(&cluster, "nightly").await.len(), 1);
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_on_change_false_stamps_the_cron_job_without_starting_a_job() {
    let cluster = TestCluster::start("cronjob-no-run").await;
    let sentinel = cluster.sentinel().await;
    cluster.put_configmap("cfg", &[("k", "1")]).await;
    create_cron_job(
        &cluster,
        "report",
        json!({ "nudge.dev/auto": "true", "nudge.dev/run-on-change": "false" }),
    )
    .await;
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    adopted_value(&cluster, "report").await;
    cluster.put_configmap("cfg", &[("k", "2")]).await;
    wait_for("the job template to be stamped", WAIT, || {
        template_stamp(&cluster, "report")
    })
    .await;
    sentinel.quiesce_kinds(&nudge, &["CronJob"]).await;
    assert!(jobs_of(&cluster, "report").await.is_empty());
    nudge.stop().await;
}

async fn create_job(cluster: &TestCluster, name: &str) {
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": name, "labels": { "app": name },
                      "annotations": { "nudge.dev/configmap-cfg": "cfg" } },
        "spec": { "backoffLimit": 1, "template": { "spec": pod("cfg") } },
    }))
    .unwrap();
    cluster
        .api::<Job>()
        .create(&PostParams::default(), &job)
        .await
        .unwrap();
}

async fn job(cluster: &TestCluster, name: &str) -> Option<Value> {
    let job = cluster.api::<Job>().get_opt(name).await.unwrap()?;
    Some(serde_json::to_value(job).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_recreated_with_its_stamp_when_its_config_changes_and_never_at_adoption() {
    let cluster = TestCluster::start("job-recreate").await;
    let sentinel = cluster.sentinel().await;
    cluster.put_configmap("cfg", &[("k", "1")]).await;
    create_job(&cluster, "migrate").await;
    let original = job(&cluster, "migrate").await.unwrap();
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;

    wait_for("the Job's adoption", WAIT, || async {
        job(&cluster, "migrate").await?["metadata"]["annotations"]["nudge.dev/checksum-cfg"]
            .as_str()
            .map(str::to_owned)
    })
    .await;
    let adopted = job(&cluster, "migrate").await.unwrap();
    assert_eq!(
        adopted["metadata"]["uid"], original["metadata"]["uid"],
        "not recreated"
    );

    cluster.put_configmap("cfg", &[("k", "2")]).await;
    let recreated = wait_for("the Job to be recreated", WAIT, || async {
        let job = job(&cluster, "migrate").await?;
        (job["metadata"]["uid"] != original["metadata"]["uid"]).then_some(job)
    })
    .await;
    let template = &recreated["spec"]["template"];
    let stamp = template["metadata"]["annotations"]["nudge.dev/checksum-cfg"]
        .as_str()
        .expect("the recreated Job carries its stamp");
    assert!(stamp.starts_with("sha256-"), "{stamp}");
    assert_eq!(recreated["metadata"]["labels"]["app"], "migrate");
    assert_eq!(template["spec"]["containers"][0]["name"], "app");
    nudge.stop().await;

    // A restart recreates nothing.
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    sentinel.quiesce_kinds(&nudge, &["Job"]).await;
    let after = job(&cluster, "migrate").await.unwrap();
    assert_eq!(after["metadata"]["uid"], recreated["metadata"]["uid"]);
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_jobs_turned_off_are_never_stamped_and_deployments_still_are() {
    let cluster = TestCluster::start("cronjob-off").await;
    let sentinel = cluster.sentinel().await;
    cluster.put_configmap("cfg", &[("k", "1")]).await;
    create_cron_job(&cluster, "report", json!({ "nudge.dev/auto": "true" })).await;
    cluster
        .create_workload(
            "Deployment",
            "web",
            &[("nudge.dev/auto", "true")],
            &[],
            pod_mounting_configmap("cfg"),
        )
        .await;
    let mut config = cluster.nudge_config();
    // Reloader's --ignored-workload-types=cronjobs.
    config.kubernetes.ignore_kinds = vec!["cronjobs".into()];
    let nudge = cluster.start_ready_nudge(config).await;
    let first = wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, None).await;
    cluster.put_configmap("cfg", &[("k", "2")]).await;
    wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, Some(&first)).await;
    // Listed, adopted and stamped by now, had CronJobs been watched.
    sentinel.quiesce(&nudge).await;
    let report = cron_job(&cluster, "report").await;
    assert!(
        report["metadata"]["annotations"][CONFIG_HASH].is_null(),
        "{report}"
    );
    assert_eq!(template_stamp(&cluster, "report").await, None);
    assert!(jobs_of(&cluster, "report").await.is_empty());
    nudge.stop().await;
}
