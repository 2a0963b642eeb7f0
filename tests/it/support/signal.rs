//! Positive signals for negative checks: proof that nudge has processed the
//! events in question and finished what they caused, so that "nothing happened"
//! is checked after the fact and never after a guess at how long is long enough.
//!
//! Two facts make the proof, and [`Sentinel::quiesce`] waits for both (after
//! `/ready`, so that what nudge listed at start is ahead of the sentinel's
//! events in its core's queue):
//!
//! 1. **Processed.** A [`Sentinel`] object changed after the events in question
//!    is stamped: a watch delivers events in order, so every earlier event of the
//!    same kind in the same watch stream (for a namespace-scoped nudge, the same
//!    namespace) has been handed to nudge's core first.
//! 2. **Decided and carried out.** nudge's gauge `nudge_stamps_outstanding`
//!    (workloads queued for a debounce, pacing, a retry or an input not yet
//!    known, plus writes in flight, set as one value after every input the core
//!    handles) reads 0: nothing those events caused is still waiting or being
//!    written ([`wait_idle`]).
//!
//! Limits, stated rather than hidden:
//!
//! - A ConfigMap or Secret change is fetched by a GET of its own, and fetches run
//!   concurrently: a fetch started before the sentinel's could in principle
//!   answer after it. Where a test's negative rests on such a fetch, it waits
//!   first for the source's observation count to grow
//!   ([`MetricsAt::wait_observations`]).
//! - Events of another watch stream (another namespace in
//!   `kubernetes.namespaces`, another workload kind, a Consul key) are not
//!   ordered with the sentinel's Deployments, ConfigMap and Secret: for other
//!   kinds [`Sentinel::quiesce_kinds`] flushes a sentinel of that kind too, and
//!   the other tests say what proves their events processed.
//! - A write legitimately held for long (`min_interval` pacing, a pause-period)
//!   keeps the gauge above 0: those tests measure durations instead.
//! - Kubernetes Events and notifications are published after the write, those
//!   of one namespace by one task in order: [`Sentinel::flush_events`] (the
//!   sentinel shares the test's namespace) proves the earlier ones out.
//! - Objects of a `[sources.kubernetes.<name>]` kind come through a watch of
//!   their own: [`SourceSentinel`] is that watch's sentinel, and its
//!   [`quiesce`](SourceSentinel::quiesce) waits for the fetches too.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use nudge::__private::runtime::metrics::Metrics;
use serde_json::{Value, json};

use super::{WAIT, http_get, wait_for};

/// The gauge that reads 0 when nudge has nothing left to do for what it has seen.
pub const OUTSTANDING: &str = "nudge_stamps_outstanding";

/// Label of sentinel workloads: the tests' webhook registrations leave them out
/// (objectSelector), so only the controller stamps them.
pub const SENTINEL_LABEL: &str = "nudge.dev/test-sentinel";

/// What makes a sentinel stamped at once: auto, no debounce, and no pacing by
/// `min_interval` (its rollouts never complete where no controller runs).
static SENTINEL_ANNOTATIONS: std::sync::LazyLock<Value> = std::sync::LazyLock::new(
    || json!({ "nudge.dev/auto": "true", "nudge.dev/debounce": "0s", "nudge.dev/min-interval": "0s" }),
);

/// Where a running nudge's Prometheus metrics are read: its admin server (in
/// this process or the binary), or the registry a test handed nudge itself.
#[derive(Clone)]
pub enum MetricsAt {
    /// `GET /metrics` on this address.
    Admin(SocketAddr),
    /// The registry of a nudge started with `run_with_metrics`.
    Registry(Metrics),
}

/// A running nudge the harness can observe.
pub trait Running {
    /// Where its metrics are read.
    fn metrics_at(&self) -> MetricsAt;
}

impl Running for MetricsAt {
    fn metrics_at(&self) -> MetricsAt {
        self.clone()
    }
}

impl Running for Metrics {
    fn metrics_at(&self) -> MetricsAt {
        MetricsAt::Registry(self.clone())
    }
}

impl MetricsAt {
    /// The OpenMetrics text; `None` while the admin server does not answer.
    pub async fn text(&self) -> Option<String> {
        match self {
            Self::Admin(addr) => http_get(*addr, "/metrics")
                .await
                .filter(|(status, _)| *status == 200)
                .map(|(_, body)| body),
            Self::Registry(metrics) => metrics.encode().ok(),
        }
    }

    /// The sum of the samples of `series` (any labels); `None` while the
    /// metrics cannot be read or the series is not exported yet.
    pub async fn sum(&self, series: &str) -> Option<f64> {
        let text = self.text().await?;
        sample(&text, series).map(|_| sample_sum(&text, series))
    }

    /// Waits until `nudge_source_observations_total{source}` exceeds `above`:
    /// that many observations of `source` have reached nudge's core (which
    /// handles them in order with every later input).
    pub async fn wait_observations(&self, source: &str, above: f64) {
        let series = format!(r#"nudge_source_observations_total{{source="{source}"}}"#);
        wait_for(&format!("an observation of {source}"), WAIT, || async {
            let text = self.text().await?;
            (sample(&text, &series)? > above).then_some(())
        })
        .await;
    }

    /// Waits until the admin server answers `/ready`: every watch has listed
    /// once and handed what it listed to nudge's core. A registry has no
    /// `/ready`: a test reading one needs its own proof (a stamp) that nudge
    /// has listed.
    pub async fn wait_ready(&self) {
        if let Self::Admin(addr) = self {
            super::wait_ready(*addr).await;
        }
    }

    /// `nudge_source_observations_total{source}` now (0 before the first).
    pub async fn observations(&self, source: &str) -> f64 {
        let series = format!(r#"nudge_source_observations_total{{source="{source}"}}"#);
        let text = wait_for("nudge's metrics", WAIT, || self.text()).await;
        sample(&text, &series).unwrap_or(0.0)
    }
}

/// The value of the sample named exactly `sample` (series and labels as
/// printed), if exported.
pub fn sample(text: &str, sample: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(sample)?.strip_prefix(' ')?;
        value.split(' ').next()?.parse().ok()
    })
}

/// Sum of the samples of one series (any labels) in OpenMetrics text.
pub fn sample_sum(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{series}{{")) || l.starts_with(&format!("{series} ")))
        .filter_map(|l| l.split(' ').nth(1)?.parse::<f64>().ok())
        .sum()
}

/// Waits until `nudge_stamps_outstanding` reads 0: every change nudge has handed
/// its core so far is written, or decided against. Alone it proves nothing about
/// events nudge has not received yet; see [`Sentinel::quiesce`].
pub async fn wait_idle(nudge: &impl Running) {
    let metrics = nudge.metrics_at();
    wait_for("nudge to have nothing outstanding", WAIT, || async {
        (metrics.sum(OUTSTANDING).await? == 0.0).then_some(())
    })
    .await;
}

/// Waits until `nudge_stamps_outstanding` reads at least 1: nudge holds a change
/// (in its debounce window, say). Only meaningful after [`wait_idle`], else it
/// may see work that was already there.
pub async fn wait_holding(nudge: &impl Running) {
    let metrics = nudge.metrics_at();
    wait_for("nudge to hold a change", WAIT, || async {
        (metrics.sum(OUTSTANDING).await? >= 1.0).then_some(())
    })
    .await;
}

/// A positive signal for negative checks, in one namespace: ConfigMap and Secret
/// `sentinel`, each read by its own Deployment (`sentinel-configmap`,
/// `sentinel-secret`), and Deployments `sentinel-<n>` made one per workload
/// flush. All have `nudge.dev/auto` and a zero debounce, so a flush takes one
/// round trip. Once nudge has stamped what a flush changed, it has processed
/// every event of that kind made before the flush (see the module docs).
pub struct Sentinel {
    configmaps: Api<ConfigMap>,
    secrets: Api<Secret>,
    deployments: Api<Deployment>,
    events: Api<Event>,
    namespace: String,
    round: AtomicUsize,
    workloads: AtomicUsize,
}

impl Sentinel {
    const NAME: &str = "sentinel";
    /// The ConfigMap the workload-flush Deployments read; it never changes.
    const ANCHOR: &str = "sentinel-anchor";
    const FOR_CONFIGMAPS: &str = "sentinel-configmap";
    const FOR_SECRETS: &str = "sentinel-secret";

    /// Creates the sentinel objects in `namespace`.
    pub async fn create(client: Client, namespace: &str) -> Sentinel {
        let sentinel = Sentinel {
            configmaps: Api::namespaced(client.clone(), namespace),
            secrets: Api::namespaced(client.clone(), namespace),
            deployments: Api::namespaced(client.clone(), namespace),
            events: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            round: AtomicUsize::default(),
            workloads: AtomicUsize::default(),
        };
        sentinel.write_configmap(Self::NAME, 0).await;
        sentinel.write_configmap(Self::ANCHOR, 0).await;
        sentinel.write_secret(0).await;
        let reads_configmap = json!({
            "volumeMounts": [{ "name": "config", "mountPath": "/etc/config" }],
        });
        let volume = json!([{ "name": "config", "configMap": { "name": Self::NAME } }]);
        sentinel
            .create_workload(Self::FOR_CONFIGMAPS, reads_configmap, Some(volume))
            .await;
        let reads_secret = json!({ "envFrom": [{ "secretRef": { "name": Self::NAME } }] });
        sentinel
            .create_workload(Self::FOR_SECRETS, reads_secret, None)
            .await;
        sentinel
    }

    async fn write_configmap(&self, name: &str, round: usize) {
        let configmap = json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": name },
            "data": { "round": round.to_string() },
        });
        self.configmaps
            .patch(name, &Self::apply(), &Patch::Apply(&configmap))
            .await
            .unwrap_or_else(|e| panic!("apply the sentinel ConfigMap {name}: {e}"));
    }

    async fn write_secret(&self, round: usize) {
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": { "name": Self::NAME },
            "stringData": { "round": round.to_string() },
        });
        self.secrets
            .patch(Self::NAME, &Self::apply(), &Patch::Apply(&secret))
            .await
            .expect("apply the sentinel Secret");
    }

    fn apply() -> PatchParams {
        PatchParams::apply("test-user").force()
    }

    /// Creates sentinel Deployment `name` whose container has `container`'s
    /// fields and whose pod has `volumes`.
    async fn create_workload(&self, name: &str, container: Value, volumes: Option<Value>) {
        let labels = json!({ "app": name, SENTINEL_LABEL: "true" });
        let mut container_spec = json!({ "name": "app", "image": "busybox" });
        if let (Some(spec), Some(fields)) = (container_spec.as_object_mut(), container.as_object())
        {
            spec.extend(fields.clone());
        }
        let mut pod = json!({ "containers": [container_spec] });
        if let Some(volumes) = volumes {
            pod["volumes"] = volumes;
        }
        let body = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": name, "labels": labels,
                          "annotations": SENTINEL_ANNOTATIONS.clone() },
            "spec": {
                "selector": { "matchLabels": { "app": name } },
                "template": { "metadata": { "labels": labels }, "spec": pod },
            },
        });
        self.deployments
            .create(
                &PostParams::default(),
                &serde_json::from_value(body).unwrap(),
            )
            .await
            .unwrap_or_else(|e| panic!("create {name}: {e}"));
    }

    /// Creates the next workload-flush Deployment; returns its name.
    async fn add_workload(&self) -> String {
        let n = self.workloads.fetch_add(1, Ordering::SeqCst);
        let name = format!("{}-{n}", Self::NAME);
        let mounts = json!({ "volumeMounts": [{ "name": "config", "mountPath": "/etc/config" }] });
        let volume = json!([{ "name": "config", "configMap": { "name": Self::ANCHOR } }]);
        self.create_workload(&name, mounts, Some(volume)).await;
        name
    }

    async fn stamp_of(&self, name: &str) -> Option<String> {
        let deployment = self.deployments.get_opt(name).await.ok()??;
        deployment
            .spec?
            .template
            .metadata?
            .annotations?
            .get("nudge.dev/config-hash")
            .cloned()
    }

    async fn wait_for_stamp(&self, name: &str, previous: Option<&str>) -> String {
        wait_for(
            &format!("nudge to stamp sentinel Deployment {name}"),
            WAIT,
            || async {
                self.stamp_of(name)
                    .await
                    .filter(|s| Some(s.as_str()) != previous)
            },
        )
        .await
    }

    /// Waits until nudge has stamped the sentinel's Deployments: it runs, and has
    /// listed and processed what existed when it started.
    pub async fn wait_stamped(&self) {
        self.wait_for_stamp(Self::FOR_CONFIGMAPS, None).await;
        self.wait_for_stamp(Self::FOR_SECRETS, None).await;
    }

    /// Changes the sentinel ConfigMap and waits for nudge to stamp that change:
    /// ConfigMap events before it have been processed.
    pub async fn flush_configmaps(&self) {
        // Each flush waits for its own stamp, so the stamp now is the last one's.
        let before = self.wait_for_stamp(Self::FOR_CONFIGMAPS, None).await;
        self.write_configmap(Self::NAME, self.next_round()).await;
        self.wait_for_stamp(Self::FOR_CONFIGMAPS, Some(&before))
            .await;
    }

    /// Changes the sentinel Secret and waits for nudge to stamp that change:
    /// Secret events before it have been processed.
    pub async fn flush_secrets(&self) {
        let before = self.wait_for_stamp(Self::FOR_SECRETS, None).await;
        self.write_secret(self.next_round()).await;
        self.wait_for_stamp(Self::FOR_SECRETS, Some(&before)).await;
    }

    fn next_round(&self) -> usize {
        self.round.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Creates another sentinel Deployment and waits for nudge to stamp it:
    /// workload events before it have been processed.
    pub async fn flush_workloads(&self) {
        let name = self.add_workload().await;
        self.wait_for_stamp(&name, None).await;
    }

    /// Creates a sentinel workload of `kind` (`StatefulSet`, `DaemonSet`,
    /// `CronJob` or `Job`: each kind has a watch of its own) and waits for nudge
    /// to stamp it, or, for a CronJob or Job, to adopt it (the stamp on its own
    /// metadata): events of that kind made before have been processed.
    pub async fn flush_kind(&self, kind: &str) {
        let n = self.workloads.fetch_add(1, Ordering::SeqCst);
        let name = format!("{}-{}-{n}", Self::NAME, kind.to_lowercase());
        let labels = json!({ "app": name, SENTINEL_LABEL: "true" });
        let mut pod = json!({
            "containers": [{
                "name": "app", "image": "busybox",
                "volumeMounts": [{ "name": "config", "mountPath": "/etc/config" }],
            }],
            "volumes": [{ "name": "config", "configMap": { "name": Self::ANCHOR } }],
        });
        let template = |pod: &Value| json!({ "metadata": { "labels": labels }, "spec": pod });
        let (api_version, spec, stamp_at) = match kind {
            "StatefulSet" | "DaemonSet" => {
                let mut spec = json!({
                    "selector": { "matchLabels": { "app": name } },
                    "template": template(&pod),
                });
                if kind == "StatefulSet" {
                    spec["serviceName"] = json!(name);
                }
                ("apps/v1", spec, "/spec/template/metadata/annotations")
            }
            "CronJob" => {
                pod["restartPolicy"] = json!("Never");
                let spec = json!({
                    "schedule": "0 0 1 1 *", "suspend": true,
                    "jobTemplate": { "spec": { "template": template(&pod) } },
                });
                ("batch/v1", spec, "/metadata/annotations")
            }
            "Job" => {
                pod["restartPolicy"] = json!("Never");
                let spec = json!({ "backoffLimit": 0, "template": template(&pod) });
                ("batch/v1", spec, "/metadata/annotations")
            }
            other => panic!("no sentinel of kind {other}"),
        };
        let object = json!({
            "apiVersion": api_version, "kind": kind,
            "metadata": { "name": name, "labels": labels,
                          "annotations": SENTINEL_ANNOTATIONS.clone() },
            "spec": spec,
        });
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        let (group, version) = api_version.split_once('/').unwrap();
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.deployments.clone().into_client(),
            &self.namespace,
            &ApiResource::from_gvk(&gvk),
        );
        api.create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("create {kind} {name}: {e}"));
        wait_for(
            &format!("nudge to stamp sentinel {kind} {name}"),
            WAIT,
            || async {
                let object = serde_json::to_value(api.get(&name).await.ok()?).ok()?;
                object
                    .pointer(stamp_at)?
                    .get("nudge.dev/config-hash")
                    .map(drop)
            },
        )
        .await;
    }

    /// Waits until `nudge` has processed every ConfigMap, Secret and Deployment
    /// event of this namespace made before the call and has finished what they
    /// caused: the three flushes at once, then [`wait_idle`].
    pub async fn quiesce(&self, nudge: &impl Running) {
        self.quiesce_kinds(nudge, &[]).await;
    }

    /// Like [`quiesce`](Self::quiesce), with the events of the workload kinds
    /// `kinds` (see [`flush_kind`](Self::flush_kind)) too.
    pub async fn quiesce_kinds(&self, nudge: &impl Running, kinds: &[&str]) {
        // Ready first: what nudge listed at start is then ahead of the flushes'
        // events in its core's queue, whatever order the list had.
        nudge.metrics_at().wait_ready().await;
        let other_kinds = futures::future::join_all(kinds.iter().map(|k| self.flush_kind(k)));
        tokio::join!(
            self.flush_configmaps(),
            self.flush_secrets(),
            self.flush_workloads(),
            other_kinds,
        );
        wait_idle(nudge).await;
    }

    /// Like [`quiesce`](Self::quiesce), and then every Kubernetes Event and
    /// notification nudge decided on before the call has been published: one
    /// task publishes a namespace's in order, and a new sentinel Deployment's
    /// `ConfigChanged` Event, decided after them in the same namespace, has
    /// arrived.
    pub async fn flush_events(&self, nudge: &impl Running) {
        self.quiesce(nudge).await;
        let name = self.add_workload().await;
        self.wait_for_stamp(&name, None).await;
        wait_for(
            &format!("the ConfigChanged Event of sentinel Deployment {name}"),
            WAIT,
            || async {
                let events = self.events.list(&ListParams::default()).await.ok()?;
                events
                    .items
                    .iter()
                    .any(|e| {
                        e.reason.as_deref() == Some("ConfigChanged")
                            && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                                == Some(name.as_str())
                    })
                    .then_some(())
            },
        )
        .await;
    }
}

/// The sentinel of a `[sources.kubernetes.<source>]` kind's watch, which is
/// ordered with nothing the [`Sentinel`] changes: object `sentinel` of that
/// kind, read by Deployment `sentinel-<source>` through
/// `nudge.dev/<source>-sentinel: sentinel` (zero debounce). A flush writes
/// `spec.<field>`, which the source must fingerprint, and waits for the
/// stamp: every event of that kind made before has been processed.
pub struct SourceSentinel {
    objects: Api<DynamicObject>,
    deployments: Api<Deployment>,
    source: String,
    field: String,
    round: AtomicUsize,
}

impl SourceSentinel {
    const NAME: &str = "sentinel";
    const STAMP: &str = "nudge.dev/checksum-sentinel";

    /// Creates object `sentinel` (`api_version` `kind`, through `objects`,
    /// `spec.<field>` 0) and its Deployment in the namespace of `deployments`,
    /// and waits until nudge has stamped it.
    pub async fn create(
        objects: Api<DynamicObject>,
        deployments: Api<Deployment>,
        (api_version, kind): (&str, &str),
        source: &str,
        field: &str,
    ) -> SourceSentinel {
        let object = json!({
            "apiVersion": api_version, "kind": kind,
            "metadata": { "name": Self::NAME },
            "spec": { field: 0 },
        });
        objects
            .create(
                &PostParams::default(),
                &serde_json::from_value(object).unwrap(),
            )
            .await
            .expect("create the source sentinel object");
        let name = format!("{}-{source}", Self::NAME);
        let labels = json!({ "app": name, SENTINEL_LABEL: "true" });
        let mut annotations = SENTINEL_ANNOTATIONS.clone();
        annotations["nudge.dev/auto"] = json!("false");
        annotations[format!("nudge.dev/{source}-sentinel")] = json!(Self::NAME);
        let body = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": name, "labels": labels, "annotations": annotations },
            "spec": {
                "selector": { "matchLabels": { "app": name } },
                "template": {
                    "metadata": { "labels": labels },
                    "spec": { "containers": [{ "name": "app", "image": "busybox" }] },
                },
            },
        });
        deployments
            .create(
                &PostParams::default(),
                &serde_json::from_value(body).unwrap(),
            )
            .await
            .unwrap_or_else(|e| panic!("create {name}: {e}"));
        let sentinel = SourceSentinel {
            objects,
            deployments,
            source: source.to_owned(),
            field: field.to_owned(),
            round: AtomicUsize::default(),
        };
        sentinel.wait_for_stamp(None).await;
        sentinel
    }

    fn deployment(&self) -> String {
        format!("{}-{}", Self::NAME, self.source)
    }

    async fn wait_for_stamp(&self, previous: Option<&str>) -> String {
        let name = self.deployment();
        wait_for(
            &format!("nudge to stamp sentinel Deployment {name}"),
            WAIT,
            || async {
                let deployment = self.deployments.get_opt(&name).await.ok()??;
                let stamp = deployment
                    .spec?
                    .template
                    .metadata?
                    .annotations?
                    .remove(Self::STAMP)?;
                (Some(stamp.as_str()) != previous).then_some(stamp)
            },
        )
        .await
    }

    /// Changes the sentinel object and waits for nudge to stamp that change:
    /// events of the kind's watch made before it have been processed.
    pub async fn flush(&self) {
        let before = self.wait_for_stamp(None).await;
        let round = self.round.fetch_add(1, Ordering::SeqCst) + 1;
        let patch = json!({ "spec": { self.field.as_str(): round } });
        self.objects
            .patch(Self::NAME, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch the source sentinel object");
        self.wait_for_stamp(Some(&before)).await;
    }

    /// Waits until `nudge` has processed every event of the kind made before
    /// the call and finished what they caused: a [`flush`](Self::flush); then
    /// the observations of the source beyond `seen` (its count before the
    /// events in question) that the `fetches` those events caused and the
    /// flush's own make (the content of each object is fetched by a GET of
    /// its own, concurrently); then [`wait_idle`].
    pub async fn quiesce(&self, nudge: &impl Running, seen: f64, fetches: usize) {
        self.flush().await;
        let metrics = nudge.metrics_at();
        metrics
            .wait_observations(&self.source, seen + fetches as f64)
            .await;
        wait_idle(nudge).await;
    }
}
