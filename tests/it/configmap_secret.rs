//! ConfigMap and Secret changes roll exactly the workloads that depend on them.

use crate::support::*;
use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;

const CONFIG_HASH: &str = "nudge.dev/config-hash";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_deployment_is_stamped_once_per_data_change_and_not_for_metadata() {
    let cluster = TestCluster::start("auto-deployment").await;
    let sentinel = cluster.sentinel().await;
    cluster
        .auto_deployment("web", "app-config", &[("a", "1")])
        .await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    let first = wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, None).await;

    let patches = cluster.patch_counter("Deployment", "web").await;
    cluster.put_configmap("app-config", &[("a", "2")]).await;
    let second = wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, Some(&first)).await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(
        patches.count(&cluster).await,
        1,
        "one data change, one PATCH"
    );

    let patches = cluster.patch_counter("Deployment", "web").await;
    let observed = nudge.metrics_at().observations("configmap").await;
    cluster
        .merge_patch::<ConfigMap>(
            "app-config",
            json!({"metadata": {"labels": {"team": "x"}, "annotations": {"note": "y"}}}),
        )
        .await;
    // nudge fetched the ConfigMap again (a new resourceVersion) and found the
    // same content.
    nudge
        .metrics_at()
        .wait_observations("configmap", observed)
        .await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(
        patches.count(&cluster).await,
        0,
        "metadata-only change, no PATCH"
    );
    assert_eq!(
        cluster.template_annotations("Deployment", "web").await[CONFIG_HASH],
        second
    );
    nudge.stop().await;
}

/// A pod spec whose container reads ConfigMap `configmap` through envFrom and one
/// key of Secret `secret` through env.
fn pod_using_configmap_and_secret(configmap: &str, secret: &str) -> serde_json::Value {
    json!({
        "containers": [{
            "name": "app", "image": "busybox",
            "envFrom": [{ "configMapRef": { "name": configmap } }],
            "env": [{ "name": "PASSWORD", "valueFrom": { "secretKeyRef": { "name": secret, "key": "password" } } }],
        }],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_and_secret_changed_within_the_debounce_window_roll_once() {
    let cluster = TestCluster::start("debounce-together").await;
    let sentinel = cluster.sentinel().await;
    cluster.put_configmap("app", &[("mode", "a")]).await;
    cluster.put_secret("db", &[("password", "hunter2")]).await;
    cluster
        .create_workload(
            "Deployment",
            "api",
            &[("nudge.dev/auto", "true")],
            &[],
            pod_using_configmap_and_secret("app", "db"),
        )
        .await;
    let mut config = cluster.nudge_config();
    // Far longer than the two changes below take on a loaded machine.
    config.engine.debounce = std::time::Duration::from_secs(2);
    let nudge = cluster.start_nudge(config);
    let first = wait_for_stamp(&cluster, "Deployment", "api", CONFIG_HASH, None).await;
    wait_idle(&nudge).await;

    let patches = cluster.patch_counter("Deployment", "api").await;
    cluster.put_configmap("app", &[("mode", "b")]).await;
    // The second change comes while nudge holds the first in its window.
    wait_holding(&nudge).await;
    cluster
        .put_secret("db", &[("password", "correct horse")])
        .await;
    wait_for_stamp(&cluster, "Deployment", "api", CONFIG_HASH, Some(&first)).await;
    // A second stamp for the Secret would be queued or written by now.
    sentinel.quiesce(&nudge).await;
    assert_eq!(
        patches.count(&cluster).await,
        1,
        "two changes within the window, one PATCH"
    );
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statefulset_and_daemonset_roll_like_deployments() {
    let cluster = TestCluster::start("sts-ds").await;
    let sentinel = cluster.sentinel().await;
    cluster.put_configmap("shared", &[("k", "1")]).await;
    for kind in ["StatefulSet", "DaemonSet"] {
        cluster
            .create_workload(
                kind,
                &kind.to_lowercase(),
                &[("nudge.dev/auto", "true")],
                &[],
                pod_mounting_configmap("shared"),
            )
            .await;
    }
    let nudge = cluster.start_nudge(cluster.nudge_config());
    let mut before = Vec::new();
    for kind in ["StatefulSet", "DaemonSet"] {
        let stamp = wait_for_stamp(&cluster, kind, &kind.to_lowercase(), CONFIG_HASH, None).await;
        before.push((
            kind,
            stamp,
            cluster.patch_counter(kind, &kind.to_lowercase()).await,
        ));
    }
    cluster.put_configmap("shared", &[("k", "2")]).await;
    for (kind, stamp, _) in &before {
        wait_for_stamp(
            &cluster,
            kind,
            &kind.to_lowercase(),
            CONFIG_HASH,
            Some(stamp),
        )
        .await;
    }
    sentinel.quiesce(&nudge).await;
    for (kind, _, patches) in &before {
        assert_eq!(patches.count(&cluster).await, 1, "{kind} patched once");
    }
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_slots_stamp_their_own_checksums() {
    let cluster = TestCluster::start("explicit-slots").await;
    let sentinel = cluster.sentinel().await;
    cluster.put_configmap("flags", &[("beta", "on")]).await;
    cluster
        .put_secret("db-credentials", &[("password", "s3cret")])
        .await;
    cluster
        .create_workload(
            "Deployment",
            "svc",
            &[("nudge.dev/configmap-flags", "flags")],
            // Helm charts often only expose pod annotations.
            &[("nudge.dev/secret-db", "db-credentials")],
            plain_pod(),
        )
        .await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    let flags = wait_for_stamp(
        &cluster,
        "Deployment",
        "svc",
        "nudge.dev/checksum-flags",
        None,
    )
    .await;
    let db = wait_for_stamp(&cluster, "Deployment", "svc", "nudge.dev/checksum-db", None).await;
    assert!(flags.starts_with("sha256-"), "{flags}");
    assert!(db.starts_with("hmac-sha256-"), "{db}");

    cluster
        .put_secret("db-credentials", &[("password", "rotated")])
        .await;
    wait_for_stamp(
        &cluster,
        "Deployment",
        "svc",
        "nudge.dev/checksum-db",
        Some(&db),
    )
    .await;
    sentinel.quiesce(&nudge).await;
    let annotations = cluster.template_annotations("Deployment", "svc").await;
    assert_eq!(
        annotations["nudge.dev/checksum-flags"], flags,
        "the other slot is untouched"
    );
    let workload = cluster.workload("Deployment", "svc").await;
    assert!(
        workload["metadata"]["annotations"]["nudge.dev/last-updated"].is_string(),
        "last-updated is on the workload metadata"
    );
    assert!(
        !annotations.contains_key("nudge.dev/last-updated"),
        "never on the pod template"
    );
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_fingerprint_is_keyed_not_a_plain_hash() {
    use sha2::{Digest, Sha256};
    let cluster = TestCluster::start("secret-hmac").await;
    cluster.put_secret("token", &[("t", "abc")]).await;
    cluster
        .create_workload(
            "Deployment",
            "w",
            &[("nudge.dev/secret-token", "token")],
            &[],
            plain_pod(),
        )
        .await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    let stamp = wait_for_stamp(
        &cluster,
        "Deployment",
        "w",
        "nudge.dev/checksum-token",
        None,
    )
    .await;
    let plain = [
        hex::encode(Sha256::digest(b"abc")),
        hex::encode(Sha256::digest(b"t=abc")),
        hex::encode(Sha256::digest(br#"{"t":"abc"}"#)),
    ];
    for candidate in &plain {
        assert!(
            !stamp.contains(candidate.as_str()),
            "{stamp} is a plain hash"
        );
    }
    assert!(stamp.starts_with("hmac-sha256-"));
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_annotation_warns_and_valid_siblings_still_stamp() {
    let cluster = TestCluster::start("invalid-annotation").await;
    cluster.put_configmap("good", &[("a", "1")]).await;
    cluster
        .create_workload(
            "Deployment",
            "mixed",
            &[
                ("nudge.dev/configmap-ok", "good"),
                ("nudge.dev/configmap-bad", "Not_A_Name"),
                ("nudge.dev/nosuchsource-x", "y"),
                ("nudge.dev/debounce", "soon"),
            ],
            &[],
            plain_pod(),
        )
        .await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    wait_for_stamp(
        &cluster,
        "Deployment",
        "mixed",
        "nudge.dev/checksum-ok",
        None,
    )
    .await;
    let events = wait_for("InvalidAnnotation event", WAIT, || async {
        let events = cluster.events_for("mixed", "InvalidAnnotation").await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    let event = &events[0];
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let note = event.note.clone().unwrap_or_default();
    for key in ["configmap-bad", "nosuchsource-x", "nudge.dev/debounce"] {
        assert!(note.contains(key), "note names {key}: {note}");
    }
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_required_reference_keeps_the_stamp_and_warns_then_stamps_once_when_back() {
    let cluster = TestCluster::start("missing-required").await;
    let sentinel = cluster.sentinel().await;
    cluster.put_configmap("cfg", &[("a", "1")]).await;
    cluster
        .create_workload(
            "Deployment",
            "m",
            &[("nudge.dev/configmap-cfg", "cfg")],
            &[],
            plain_pod(),
        )
        .await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    let key = "nudge.dev/checksum-cfg";
    let stamp = wait_for_stamp(&cluster, "Deployment", "m", key, None).await;

    let patches = cluster.patch_counter("Deployment", "m").await;
    cluster.delete::<ConfigMap>("cfg").await;
    wait_for("MissingConfig event", WAIT, || async {
        let events = cluster.events_for("m", "MissingConfig").await;
        (!events.is_empty()).then_some(())
    })
    .await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(
        patches.count(&cluster).await,
        0,
        "a missing reference keeps the stamp"
    );
    assert_eq!(
        cluster.template_annotations("Deployment", "m").await[key],
        stamp
    );

    cluster.put_configmap("cfg", &[("a", "2")]).await;
    wait_for_stamp(&cluster, "Deployment", "m", key, Some(&stamp)).await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(
        patches.count(&cluster).await,
        1,
        "back with new content: one stamp"
    );
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optional_reference_absent_counts_and_creating_it_stamps_once() {
    let cluster = TestCluster::start("optional-absent").await;
    let sentinel = cluster.sentinel().await;
    cluster.put_configmap("base", &[("a", "1")]).await;
    let pod = json!({
        "containers": [{
            "name": "app", "image": "busybox",
            "envFrom": [
                { "configMapRef": { "name": "base" } },
                { "configMapRef": { "name": "overrides", "optional": true } },
            ],
        }],
    });
    cluster
        .create_workload("Deployment", "o", &[("nudge.dev/auto", "true")], &[], pod)
        .await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    let first = wait_for_stamp(&cluster, "Deployment", "o", CONFIG_HASH, None).await;
    sentinel.flush_events(&nudge).await;
    assert!(
        cluster.events_for("o", "MissingConfig").await.is_empty(),
        "optional is fine"
    );

    let patches = cluster.patch_counter("Deployment", "o").await;
    cluster.put_configmap("overrides", &[("b", "2")]).await;
    wait_for_stamp(&cluster, "Deployment", "o", CONFIG_HASH, Some(&first)).await;
    sentinel.quiesce(&nudge).await;
    assert_eq!(patches.count(&cluster).await, 1);
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignored_configmap_changes_stamp_nothing() {
    let cluster = TestCluster::start("ignored").await;
    let sentinel = cluster.sentinel().await;
    cluster.put_configmap("noisy", &[("a", "1")]).await;
    cluster
        .create_workload(
            "Deployment",
            "quiet",
            &[("nudge.dev/configmap-noisy", "noisy")],
            &[],
            plain_pod(),
        )
        .await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    wait_for_stamp(
        &cluster,
        "Deployment",
        "quiet",
        "nudge.dev/checksum-noisy",
        None,
    )
    .await;
    cluster
        .merge_patch::<ConfigMap>(
            "noisy",
            json!({"metadata": {"annotations": {"nudge.dev/ignore": "true"}}}),
        )
        .await;
    // nudge has seen the annotation before the data changes.
    sentinel.flush_configmaps().await;
    let patches = cluster.patch_counter("Deployment", "quiet").await;
    cluster
        .merge_patch::<ConfigMap>("noisy", json!({"data": {"a": "2"}}))
        .await;
    // An ignored object is not fetched: its watch event is all there is.
    sentinel.quiesce(&nudge).await;
    assert_eq!(
        patches.count(&cluster).await,
        0,
        "ignored object changed, nothing stamped"
    );
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_changed_event_names_the_reference_not_its_content() {
    let cluster = TestCluster::start("event-content").await;
    cluster
        .put_configmap("settings", &[("color", "blue")])
        .await;
    cluster
        .create_workload(
            "Deployment",
            "ev",
            &[("nudge.dev/auto", "true")],
            &[],
            pod_mounting_configmap("settings"),
        )
        .await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    let first = wait_for_stamp(&cluster, "Deployment", "ev", CONFIG_HASH, None).await;
    cluster
        .put_configmap("settings", &[("color", "vermilion-secret-shade")])
        .await;
    wait_for_stamp(&cluster, "Deployment", "ev", CONFIG_HASH, Some(&first)).await;
    let events = wait_for("ConfigChanged naming settings", WAIT, || async {
        let events = cluster.events_for("ev", "ConfigChanged").await;
        events
            .into_iter()
            .find(|e| e.note.as_deref().unwrap_or_default().contains("settings"))
    })
    .await;
    let note = events.note.unwrap_or_default();
    assert_eq!(events.type_.as_deref(), Some("Normal"));
    assert!(
        !note.contains("vermilion"),
        "content leaked into the Event: {note}"
    );
    nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installation_key_is_generated_once_so_secret_stamps_survive_restarts() {
    let cluster = TestCluster::start("stable-key").await;
    let sentinel = cluster.sentinel().await;
    cluster.put_secret("db", &[("password", "x")]).await;
    cluster
        .create_workload(
            "Deployment",
            "k",
            &[("nudge.dev/secret-db", "db")],
            &[],
            plain_pod(),
        )
        .await;
    let nudge = cluster.start_nudge(cluster.nudge_config());
    let stamp = wait_for_stamp(&cluster, "Deployment", "k", "nudge.dev/checksum-db", None).await;
    nudge.stop().await;

    let patches = cluster.patch_counter("Deployment", "k").await;
    // Restarted, listed, and processing Secret events with the key it loaded.
    let nudge = cluster.start_ready_nudge(cluster.nudge_config()).await;
    sentinel.quiesce(&nudge).await;
    nudge.stop().await;
    assert_eq!(
        patches.count(&cluster).await,
        0,
        "same key, same fingerprint, no PATCH"
    );
    assert_eq!(
        cluster.template_annotations("Deployment", "k").await["nudge.dev/checksum-db"],
        stamp
    );
    let key_secret = cluster
        .api::<k8s_openapi::api::core::v1::Secret>()
        .get("nudge-fingerprint-key")
        .await
        .expect("the key Secret exists in nudge's namespace");
    assert!(key_secret.data.unwrap()["key"].0.len() >= 32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_configmaps_turned_off_only_secrets_are_tracked() {
    let cluster = TestCluster::start("configmaps-off").await;
    cluster.put_configmap("cfg", &[("k", "1")]).await;
    cluster.put_secret("db", &[("password", "1")]).await;
    let pod = serde_json::json!({
        "containers": [{ "name": "app", "image": "busybox",
                         "envFrom": [{ "configMapRef": { "name": "cfg" } },
                                     { "secretRef": { "name": "db" } }] }],
    });
    cluster
        .create_workload("Deployment", "web", &[("nudge.dev/auto", "true")], &[], pod)
        .await;
    let mut config = cluster.nudge_config();
    // Reloader's --resources-to-ignore=configMaps.
    config.sources.configmap.enabled = false;
    let nudge = cluster.start_ready_nudge(config).await;
    let first = wait_for_stamp(&cluster, "Deployment", "web", "nudge.dev/config-hash", None).await;
    let metrics = nudge.metrics_at().text().await.unwrap_or_default();
    assert!(
        !metrics.contains("source=\"configmap\""),
        "the ConfigMap source does not run:\n{metrics}"
    );
    // A ConfigMap change, then a Secret change: only the second rolls.
    let patches = cluster.patch_counter("Deployment", "web").await;
    cluster.put_configmap("cfg", &[("k", "2")]).await;
    cluster.put_secret("db", &[("password", "2")]).await;
    let second = wait_for_stamp(
        &cluster,
        "Deployment",
        "web",
        "nudge.dev/config-hash",
        Some(&first),
    )
    .await;
    wait_idle(&nudge).await;
    assert_eq!(patches.count(&cluster).await, 1, "the Secret's change only");
    assert_ne!(second, first);
    nudge.stop().await;
}
