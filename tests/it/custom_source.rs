//! A custom source's own reference rule (`Source::check_reference`), end to end:
//! a reference it refuses is one `InvalidAnnotation` Event with its reason and
//! one count in `nudge_annotation_errors_total`, like a built-in source's; a
//! reference Consul's rules would refuse (a leading '/') is fine when the
//! source's rule allows it.

use std::time::Duration;

use crate::support::*;
use async_trait::async_trait;
use k8s_openapi::api::apps::v1::Deployment;
use nudge::source::{Observation, ObserveContext, PollSource, SourceError, SourceName, Tracked};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// References are absolute paths; the content is the path itself.
struct Files {
    name: SourceName,
}

#[async_trait]
impl PollSource for Files {
    fn name(&self) -> &SourceName {
        &self.name
    }

    fn interval(&self) -> Duration {
        Duration::from_secs(60)
    }

    fn check_reference(&self, reference: &str) -> Result<(), String> {
        if reference.starts_with('/') {
            Ok(())
        } else {
            Err("files wants an absolute path".to_owned())
        }
    }

    async fn observe(
        &self,
        tracked: &Tracked,
        cx: &ObserveContext,
    ) -> Result<Observation, SourceError> {
        Ok(Observation::Present(
            cx.fingerprint(tracked.reference().name().as_bytes()),
        ))
    }
}

/// How often an Event with `reason` was reported about `name`, counting the
/// repeats aggregated into an Event series.
async fn occurrences(cluster: &TestCluster, name: &str, reason: &str) -> i32 {
    cluster
        .events_for(name, reason)
        .await
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_custom_reference_is_one_event_with_the_sources_reason_and_counted() {
    let cluster = TestCluster::start("custom-source-grammar").await;
    let sentinel = cluster.sentinel().await;
    cluster
        .create_workload(
            "Deployment",
            "web",
            &[
                ("nudge.dev/files-motd", "etc/motd"),
                ("nudge.dev/files-hosts", "/etc/hosts"),
            ],
            &[],
            plain_pod(),
        )
        .await;
    let mut config = cluster.nudge_config();
    let admin = free_port();
    config.admin.bind = admin;
    let shutdown = CancellationToken::new();
    let files = nudge::source::poll(Files {
        name: SourceName::new("files").unwrap(),
    });
    let task = tokio::spawn(
        nudge::Controller::from_config(config, cluster.client())
            .operate_as_configured()
            .with_source(files)
            .run(shutdown.clone()),
    );

    // The valid sibling, '/'-led, is tracked and stamped.
    wait_for_stamp(
        &cluster,
        "Deployment",
        "web",
        "nudge.dev/checksum-hosts",
        None,
    )
    .await;
    let events = cluster.wait_events("web", "InvalidAnnotation").await;
    assert_eq!(
        events[0].note.as_deref(),
        Some(
            r#"annotation nudge.dev/files-motd: invalid reference "etc/motd": files wants an absolute path"#
        )
    );

    // The workload changes without changing its annotations: no second Event,
    // no second count.
    cluster
        .merge_patch::<Deployment>(
            "web",
            json!({ "metadata": { "labels": { "touched": "yes" } } }),
        )
        .await;
    // The workload event processed, and every Event decided since published.
    sentinel.flush_events(&MetricsAt::Admin(admin)).await;
    assert_eq!(occurrences(&cluster, "web", "InvalidAnnotation").await, 1);
    let (_, body) = http_get(admin, "/metrics").await.expect("metrics");
    assert!(
        body.contains(
            r#"nudge_annotation_errors_total{kind="deployment",category="bad_reference"} 1"#
        ),
        "{body}"
    );

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("nudge stops")
        .unwrap()
        .unwrap();
}
