//! Shared harness for integration tests.
//!
//! A [`TestCluster`] is the in-process API server double, or the cluster named by
//! `NUDGE_TEST_KUBECONFIG` when set. Each test gets its own namespace, deleted
//! afterwards, so tests run in parallel and against real clusters.
//!
//! Tests that need the in-process double itself (fault injection, or its request
//! log where a real cluster has no equivalent) are named `double_only_*` and start
//! with [`TestCluster::start_double_only`]: `scripts/test` leaves them out of the
//! external pass by that name, and on an external cluster they fail loudly rather
//! than pass without running.
//!
//! Negative checks ("nothing was patched") come only after a positive signal that
//! nudge has processed the events in question and finished what they caused,
//! never after a sleep: [`Sentinel::quiesce`] (module `signal` says what it
//! proves and where it stops). For that, every nudge a test starts serves its
//! admin server: on the port the test chose, or on a [`free_port`] when the
//! configuration says port 0; [`Running::metrics_at`] reads it.
#![allow(dead_code)]

pub mod consul;
mod signal;

pub use consul::capture_logs;
pub use signal::*;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use apiserver_double::ApiServerDouble;
use k8s_openapi::api::apps::v1::{
    ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use nudge::config::Config;

/// Environment variable naming an external cluster's kubeconfig.
pub const EXTERNAL_KUBECONFIG: &str = "NUDGE_TEST_KUBECONFIG";

/// The marker in the name of every test that needs the in-process double;
/// `scripts/test` skips tests by it in the external pass.
pub const DOUBLE_ONLY: &str = "double_only";

/// How long waits for nudge to act may take before a test fails.
pub const WAIT: Duration = Duration::from_secs(30);

/// Where the test runs.
pub enum Backend {
    /// The in-process double (fault injection available).
    Double(ApiServerDouble),
    /// An external cluster (a real one, or the double as a separate process).
    External(PathBuf),
}

/// A cluster and one namespace of it, owned by one test.
pub struct TestCluster {
    backend: Backend,
    client: Client,
    namespace: String,
    /// Namespaces made by [`extra_namespace`](Self::extra_namespace), deleted with
    /// the test's own.
    extra_namespaces: std::sync::Mutex<Vec<String>>,
}

impl TestCluster {
    /// Starts the double (or connects to `NUDGE_TEST_KUBECONFIG`) and creates a
    /// fresh namespace named after `test`.
    pub async fn start(test: &str) -> TestCluster {
        let backend = match std::env::var_os(EXTERNAL_KUBECONFIG) {
            Some(path) => Backend::External(PathBuf::from(path)),
            None => Backend::Double(ApiServerDouble::start().await.expect("start the double")),
        };
        Self::with_backend(backend, test).await
    }

    /// Like [`start`](Self::start), always on the in-process double, for tests
    /// that inject faults or read the double's request log. Such a test's name
    /// must contain `double_only` (so that `scripts/test` leaves it out of the
    /// external pass); it panics when it does not, and on an external cluster,
    /// instead of reporting a test that never ran as passed.
    pub async fn start_double_only(test: &str) -> TestCluster {
        // libtest runs each test on a thread named after it.
        let thread = std::thread::current();
        if let Some(name) = thread.name().filter(|n| *n != "main")
            && !name.contains(DOUBLE_ONLY)
        {
            panic!(
                "{name} uses TestCluster::start_double_only: rename it to {DOUBLE_ONLY}_<name> \
                 so that the external pass of scripts/test leaves it out"
            );
        }
        if let Some(kubeconfig) = std::env::var_os(EXTERNAL_KUBECONFIG) {
            panic!(
                "{test} needs the in-process API server double (fault injection or its \
                 request log), but {EXTERNAL_KUBECONFIG}={} names an external cluster; \
                 leave the test out with `--skip {DOUBLE_ONLY}`",
                PathBuf::from(kubeconfig).display()
            );
        }
        let double = ApiServerDouble::start().await.expect("start the double");
        Self::with_backend(Backend::Double(double), test).await
    }

    async fn with_backend(backend: Backend, test: &str) -> TestCluster {
        // On an external cluster the drop deletes the namespace with the test's
        // client, whose connections the test's runtime drives: a single-threaded
        // runtime blocked in that drop would hang the external pass. Refused on
        // the double too, so CI finds such a test before an external run does.
        if tokio::runtime::Handle::current().runtime_flavor()
            == tokio::runtime::RuntimeFlavor::CurrentThread
        {
            panic!(
                "{test}: a TestCluster needs a multi-threaded runtime; write \
                 #[tokio::test(flavor = \"multi_thread\")]"
            );
        }
        capture_logs();
        let kubeconfig = match &backend {
            Backend::Double(double) => double.kubeconfig_path().to_owned(),
            Backend::External(path) => path.clone(),
        };
        let client = client_for(&kubeconfig).await;
        let namespace = unique_namespace(test);
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": { "name": namespace, "labels": { "nudge.dev/test": "true" } }
        }))
        .unwrap();
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .expect("create test namespace");
        TestCluster {
            backend,
            client,
            namespace,
            extra_namespaces: std::sync::Mutex::default(),
        }
    }

    /// Creates namespace `<test namespace>-<suffix>` (with `labels`), deleted
    /// when the test ends like the test's own.
    pub async fn extra_namespace(&self, suffix: &str, labels: &[(&str, &str)]) -> String {
        let name = format!("{}-{suffix}", self.namespace);
        let mut all = to_map(labels);
        all.insert("nudge.dev/test".into(), "true".into());
        let ns: Namespace =
            serde_json::from_value(json!({ "metadata": { "name": name, "labels": all } })).unwrap();
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
        self.extra_namespaces.lock().unwrap().push(name.clone());
        name
    }

    /// A client for the cluster.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The test's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The kubeconfig file for the cluster.
    pub fn kubeconfig(&self) -> PathBuf {
        match &self.backend {
            Backend::Double(double) => double.kubeconfig_path().to_owned(),
            Backend::External(path) => path.clone(),
        }
    }

    /// The in-process double, when this test runs on it.
    pub fn double(&self) -> Option<&ApiServerDouble> {
        match &self.backend {
            Backend::Double(double) => Some(double),
            Backend::External(_) => None,
        }
    }

    /// An Api for namespaced kind `K` in the test namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// nudge's configuration for this test: scoped to the test namespace, short
    /// debounce, no pacing delays.
    pub fn nudge_config(&self) -> Config {
        let mut config = Config::default();
        config.kubernetes.namespaces = vec![self.namespace.clone()];
        config.kubernetes.namespace = self.namespace.clone();
        config.engine.debounce = Duration::from_millis(300);
        config.engine.max_delay = Duration::from_secs(10);
        config.engine.min_interval = Duration::ZERO;
        config.engine.stamps_per_second = 1000.0;
        config.engine.burst = 1000;
        // Tests run in parallel: port 0 makes `start_nudge` pick a free port.
        config.admin.bind = ([127, 0, 0, 1], 0).into();
        config
    }

    /// Creates (or replaces the data of) a ConfigMap.
    pub async fn put_configmap(&self, name: &str, data: &[(&str, &str)]) {
        let body = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": name },
            "data": to_map(data),
        });
        self.apply_as_user::<ConfigMap>(name, body).await;
    }

    /// Creates (or replaces the data of) a Secret, from plain-text values.
    pub async fn put_secret(&self, name: &str, data: &[(&str, &str)]) {
        let body = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": { "name": name },
            "stringData": to_map(data),
        });
        self.apply_as_user::<Secret>(name, body).await;
    }

    /// Server-side applies `body` as field manager `test-user` (a person or GitOps
    /// tool), forcing ownership.
    pub async fn apply_as_user<K>(&self, name: &str, body: Value) -> K
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + Serialize
            + std::fmt::Debug,
    {
        self.api::<K>()
            .patch(
                name,
                &PatchParams::apply("test-user").force(),
                &Patch::Apply(&body),
            )
            .await
            .unwrap_or_else(|e| panic!("apply {name}: {e}"))
    }

    /// Merge-patches an object as a user would with `kubectl patch`.
    pub async fn merge_patch<K>(&self, name: &str, patch: Value) -> K
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        self.api::<K>()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("patch {name}: {e}"))
    }

    /// Deletes an object, ignoring 404.
    pub async fn delete<K>(&self, name: &str)
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        match self.api::<K>().delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => panic!("delete {name}: {e}"),
        }
    }

    /// Creates ConfigMap `configmap` with `data` and a Deployment `name` with
    /// `nudge.dev/auto: "true"` that mounts it: the most common set-up.
    pub async fn auto_deployment(&self, name: &str, configmap: &str, data: &[(&str, &str)]) {
        self.put_configmap(configmap, data).await;
        self.create_workload(
            "Deployment",
            name,
            &[("nudge.dev/auto", "true")],
            &[],
            pod_mounting_configmap(configmap),
        )
        .await;
    }

    /// Creates a workload of `kind` (`Deployment`, `StatefulSet`, `DaemonSet`)
    /// with the given workload and pod-template annotations and pod spec.
    pub async fn create_workload(
        &self,
        kind: &str,
        name: &str,
        annotations: &[(&str, &str)],
        template_annotations: &[(&str, &str)],
        pod_spec: Value,
    ) {
        let mut template_metadata = json!({ "labels": { "app": name } });
        if !template_annotations.is_empty() {
            template_metadata["annotations"] = json!(to_map(template_annotations));
        }
        let mut spec = json!({
            "selector": { "matchLabels": { "app": name } },
            "template": { "metadata": template_metadata, "spec": pod_spec },
        });
        if kind == "StatefulSet" {
            spec["serviceName"] = json!(name);
        }
        let mut body = json!({
            "apiVersion": "apps/v1", "kind": kind,
            "metadata": { "name": name, "namespace": self.namespace },
            "spec": spec,
        });
        if !annotations.is_empty() {
            body["metadata"]["annotations"] = json!(to_map(annotations));
        }
        let pp = PostParams::default();
        let result = match kind {
            "Deployment" => self
                .api::<Deployment>()
                .create(&pp, &serde_json::from_value(body).unwrap())
                .await
                .map(drop),
            "StatefulSet" => self
                .api::<StatefulSet>()
                .create(&pp, &serde_json::from_value(body).unwrap())
                .await
                .map(drop),
            "DaemonSet" => self
                .api::<DaemonSet>()
                .create(&pp, &serde_json::from_value(body).unwrap())
                .await
                .map(drop),
            other => panic!("unknown kind {other}"),
        };
        result.unwrap_or_else(|e| panic!("create {kind} {name}: {e}"));
    }

    /// The workload as JSON.
    pub async fn workload(&self, kind: &str, name: &str) -> Value {
        let value = match kind {
            "Deployment" => serde_json::to_value(self.api::<Deployment>().get(name).await.unwrap()),
            "StatefulSet" => {
                serde_json::to_value(self.api::<StatefulSet>().get(name).await.unwrap())
            }
            "DaemonSet" => serde_json::to_value(self.api::<DaemonSet>().get(name).await.unwrap()),
            other => panic!("unknown kind {other}"),
        };
        value.unwrap()
    }

    /// Pod-template annotations of a workload.
    pub async fn template_annotations(&self, kind: &str, name: &str) -> BTreeMap<String, String> {
        let workload = self.workload(kind, name).await;
        serde_json::from_value(workload["spec"]["template"]["metadata"]["annotations"].clone())
            .unwrap_or_default()
    }

    /// What decides, now, whether the workload's pods roll: see [`RolloutMarker`].
    /// Where the server serves the workload's revisions, waits first until its
    /// controller has observed its latest generation (and so made the revision
    /// for it).
    pub async fn rollout_marker(&self, kind: &str, name: &str) -> RolloutMarker {
        let revisions = match kind {
            "Deployment" => "replicasets",
            _ => "controllerrevisions",
        };
        if !self.serves("apps/v1", revisions).await {
            let workload = self.workload(kind, name).await;
            return RolloutMarker {
                template: workload["spec"]["template"].clone(),
                revisions: None,
            };
        }
        let what = format!("the {kind} controller to observe {name}'s generation");
        let workload = wait_for(&what, WAIT, || async {
            let workload = self.workload(kind, name).await;
            let generation = workload["metadata"]["generation"].as_i64();
            (workload["status"]["observedGeneration"].as_i64() >= generation).then_some(workload)
        })
        .await;
        let uid = workload["metadata"]["uid"].as_str().unwrap_or_default();
        let owned_by_it = |owners: Option<Vec<OwnerReference>>| {
            owners
                .unwrap_or_default()
                .iter()
                .any(|o| o.uid == uid && o.controller == Some(true))
        };
        let lp = ListParams::default();
        let count = if kind == "Deployment" {
            let list = self.api::<ReplicaSet>().list(&lp).await.unwrap();
            list.items
                .into_iter()
                .filter(|r| owned_by_it(r.metadata.owner_references.clone()))
                .count()
        } else {
            let list = self.api::<ControllerRevision>().list(&lp).await.unwrap();
            list.items
                .into_iter()
                .filter(|r| owned_by_it(r.metadata.owner_references.clone()))
                .count()
        };
        RolloutMarker {
            template: workload["spec"]["template"].clone(),
            revisions: Some(count),
        }
    }

    /// Whether discovery lists `resource` in `api_version` (`group/version`).
    async fn serves(&self, api_version: &str, resource: &str) -> bool {
        self.client
            .list_api_group_resources(api_version)
            .await
            .is_ok_and(|list| list.resources.iter().any(|r| r.name == resource))
    }

    /// The revisions in the `nudge.dev/history` of `kind` `name`, once it
    /// has `count`.
    pub async fn history(&self, kind: &str, name: &str, count: usize) -> Vec<Value> {
        wait_for(
            &format!("{count} revisions in {name}'s history"),
            WAIT,
            || async {
                let history = recorded_history(&self.workload(kind, name).await)?;
                (history.len() >= count).then_some(history)
            },
        )
        .await
    }

    /// Counts nudge's stamp writes to a workload from now on. On the double it
    /// counts PATCH requests by field manager `nudge` other than merge patches
    /// (those record a rollout's outcome in `nudge.dev/history`); on an external
    /// cluster it counts `metadata.generation` bumps, which every nudge stamp
    /// causes, and so does a write to a Deployment's own annotations (an
    /// adoption), though not one to a StatefulSet's or DaemonSet's, less the
    /// revisions recorded in `nudge.dev/history` meanwhile (each such record
    /// bumps a Deployment's generation too). Whether pods rolled is
    /// [`rollout_marker`]'s business.
    ///
    /// [`rollout_marker`]: Self::rollout_marker
    pub async fn patch_counter(&self, kind: &str, name: &str) -> PatchCounter {
        let workload = self.workload(kind, name).await;
        PatchCounter {
            kind: kind.to_owned(),
            name: name.to_owned(),
            requests_before: self.nudge_patches(kind, name).unwrap_or(0),
            generation_before: generation_of(&workload),
            recorded_before: recorded_revisions(&workload),
        }
    }

    /// PATCH requests by nudge to the workload so far (double only).
    fn nudge_patches(&self, kind: &str, name: &str) -> Option<usize> {
        let double = self.double()?;
        let path = workload_path(&self.namespace, kind, name);
        Some(
            double
                .requests()
                .iter()
                .filter(|r| {
                    r.method == "PATCH"
                        && r.path == path
                        && r.query_param("fieldManager").as_deref() == Some("nudge")
                        && r.headers.get("content-type").map(String::as_str)
                            != Some("application/merge-patch+json")
                })
                .count(),
        )
    }

    /// Events (`events.k8s.io/v1`) about the object `name` with `reason`.
    pub async fn events_for(&self, name: &str, reason: &str) -> Vec<Event> {
        self.api::<Event>()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            })
            .collect()
    }

    /// The Events `reason` about `name`, once there is one: nudge publishes an
    /// Event after the write or notification it reports, so a test waits for
    /// it rather than reading once.
    pub async fn wait_events(&self, name: &str, reason: &str) -> Vec<Event> {
        wait_for(&format!("a {reason} Event on {name}"), WAIT, || async {
            Some(self.events_for(name, reason).await).filter(|events| !events.is_empty())
        })
        .await
    }

    /// Runs nudge in this process with `config` until the handle is stopped; its
    /// admin server on a free port unless `config` names one.
    pub fn start_nudge(&self, mut config: Config) -> InProcessNudge {
        let admin = admin_address(&mut config);
        let shutdown = CancellationToken::new();
        let client = self.client.clone();
        let token = shutdown.clone();
        let task = tokio::spawn(async move {
            nudge::__private::runtime::run_with_client(config, client, token)
                .await
                .expect("nudge runs");
        });
        InProcessNudge {
            shutdown,
            task,
            admin,
        }
    }

    /// Runs nudge in this process with `config` (see
    /// [`start_nudge`](Self::start_nudge)) and waits until `/ready` answers 200.
    pub async fn start_ready_nudge(&self, config: Config) -> InProcessNudge {
        let nudge = self.start_nudge(config);
        wait_for("/ready", WAIT, || async {
            // An ended nudge (its admin port taken, say) never answers: say so
            // rather than wait on a port that is not its own.
            assert!(
                !nudge.task.is_finished(),
                "nudge ended before /ready answered 200 (its panic is above)"
            );
            ready_body(nudge.admin).await
        })
        .await;
        nudge
    }

    /// Runs nudge in this process with `config` (whose `webhook.enabled` should be
    /// true) and returns it with the address its admission webhook listens on.
    pub async fn start_nudge_with_webhook(
        &self,
        mut config: Config,
    ) -> (InProcessNudge, std::net::SocketAddr) {
        let admin = admin_address(&mut config);
        let shutdown = CancellationToken::new();
        let client = self.client.clone();
        let token = shutdown.clone();
        let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            nudge::__private::runtime::run_with_client_reporting(
                config,
                client,
                token,
                Some(addr_tx),
            )
            .await
            .expect("nudge runs");
        });
        let addr = tokio::time::timeout(WAIT, addr_rx)
            .await
            .expect("the webhook listens in time")
            .expect("nudge reports the webhook address");
        let nudge = InProcessNudge {
            shutdown,
            task,
            admin,
        };
        (nudge, addr)
    }

    /// Runs the compiled `nudge run` binary against this cluster, configured
    /// through `NUDGE_*` environment variables from `config`'s engine and
    /// Kubernetes sections (an empty `kubernetes.namespace` leaves
    /// `NUDGE_KUBERNETES__NAMESPACE` unset); its stderr (the log) goes to `log`.
    pub fn spawn_nudge_binary(&self, config: &Config, log: &Path) -> BinaryNudge {
        self.spawn_nudge_replica(config, log, "nudge-0")
    }

    /// Like [`spawn_nudge_binary`](Self::spawn_nudge_binary), as the replica
    /// `pod_name` (its leader-election identity).
    pub fn spawn_nudge_replica(&self, config: &Config, log: &Path, pod_name: &str) -> BinaryNudge {
        spawn_nudge(&self.kubeconfig(), config, log, pod_name)
    }

    /// Like [`spawn_nudge_binary`](Self::spawn_nudge_binary), with `KUBECONFIG`
    /// set to `kubeconfig`.
    pub fn spawn_nudge_with_kubeconfig(
        &self,
        kubeconfig: &Path,
        config: &Config,
        log: &Path,
    ) -> BinaryNudge {
        spawn_nudge(kubeconfig, config, log, "nudge-0")
    }

    /// Writes to `path` a copy of the cluster's kubeconfig whose current context
    /// has namespace `namespace` (as `kubectl config set-context --current
    /// --namespace` would).
    pub fn write_kubeconfig_with_namespace(&self, path: &Path, namespace: &str) {
        let text = std::fs::read_to_string(self.kubeconfig()).expect("read kubeconfig");
        let mut kubeconfig: serde_yaml::Value = serde_yaml::from_str(&text).expect("YAML");
        let current = kubeconfig["current-context"]
            .as_str()
            .expect("a current context")
            .to_owned();
        let context = kubeconfig["contexts"]
            .as_sequence_mut()
            .expect("contexts")
            .iter_mut()
            .find(|c| c["name"].as_str() == Some(current.as_str()))
            .expect("the current context is listed");
        context["context"]["namespace"] = serde_yaml::Value::from(namespace);
        // Relative file references are relative to the kubeconfig's directory:
        // the copy elsewhere names them absolutely.
        let original = self.kubeconfig();
        let dir = original.parent().unwrap_or(Path::new("."));
        for (list, entry, keys) in [
            ("clusters", "cluster", &["certificate-authority"][..]),
            (
                "users",
                "user",
                &["client-certificate", "client-key", "tokenFile"][..],
            ),
        ] {
            let Some(items) = kubeconfig[list].as_sequence_mut() else {
                continue;
            };
            for item in items {
                for key in keys {
                    let Some(file) = item[entry][*key].as_str().map(PathBuf::from) else {
                        continue;
                    };
                    if file.is_relative() {
                        let absolute = dir.join(file).to_string_lossy().into_owned();
                        item[entry][*key] = serde_yaml::Value::from(absolute);
                    }
                }
            }
        }
        std::fs::write(path, serde_yaml::to_string(&kubeconfig).unwrap()).expect("write");
    }

    /// Creates a [`Sentinel`] in the test namespace.
    pub async fn sentinel(&self) -> Sentinel {
        Sentinel::create(self.client.clone(), &self.namespace).await
    }
}

fn spawn_nudge(kubeconfig: &Path, config: &Config, log: &Path, pod_name: &str) -> BinaryNudge {
    let mut config = config.clone();
    let admin = admin_address(&mut config);
    let log_file = std::fs::File::create(log).expect("create log file");
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_nudge"))
        .arg("run")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("KUBECONFIG", kubeconfig)
        .env("POD_NAME", pod_name)
        .envs(config_env(&config))
        .stdout(Stdio::null())
        .stderr(log_file)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn nudge");
    BinaryNudge { child, admin }
}

/// Where nudge started with `config` serves its admin server: `config`'s
/// address, made a free port first when it says port 0 (any), so that the test
/// knows it.
fn admin_address(config: &mut Config) -> SocketAddr {
    if config.admin.bind.port() == 0 {
        config.admin.bind = free_port();
    }
    config.admin.bind
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        // The in-process double goes away with the test. On an external cluster,
        // delete the namespace with a private runtime (best effort): the test's
        // runtime may be the one blocked in this drop.
        if self.double().is_some() {
            return;
        }
        let mut namespaces = std::mem::take(&mut *self.extra_namespaces.lock().unwrap());
        namespaces.push(self.namespace.clone());
        for namespace in namespaces {
            delete_cluster_object::<Namespace>(&self.client, &namespace);
        }
    }
}

/// Deletes the cluster-scoped object `name` (best effort) with a private runtime:
/// the test's runtime may be the one blocked in the `Drop` that calls this.
pub fn delete_cluster_object<K>(client: &Client, name: &str)
where
    K: Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let (client, name) = (client.clone(), name.to_owned());
    let cleanup = std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async move {
            let api: Api<K> = Api::all(client);
            let _ = api.delete(&name, &DeleteParams::default()).await;
        });
    });
    let _ = cleanup.join();
}

/// What rolls a workload's pods, at one moment ([`TestCluster::rollout_marker`]):
/// its pod template and, where the server serves them, the revisions its
/// controller made (a Deployment's ReplicaSets, a StatefulSet's or DaemonSet's
/// ControllerRevisions). Not `metadata.generation`: a kube-apiserver bumps a
/// Deployment's generation for an annotation on its own metadata, which rolls
/// no pod.
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutMarker {
    /// `spec.template`.
    pub template: Value,
    /// Revisions controlled by the workload; `None` where the server does not
    /// serve them (a server without kube-controller-manager; the API server
    /// double imitates one, so it counts them too).
    pub revisions: Option<usize>,
}

/// Asserts that nothing between two markers of one workload rolled its pods.
#[track_caller]
pub fn assert_no_rollout(before: &RolloutMarker, after: &RolloutMarker) {
    assert_eq!(
        after.template, before.template,
        "the pod template changed: a rollout"
    );
    assert_eq!(
        after.revisions, before.revisions,
        "the workload's controller made a new revision: a rollout"
    );
}

/// nudge's writes to one workload since a point in time.
pub struct PatchCounter {
    kind: String,
    name: String,
    requests_before: usize,
    generation_before: i64,
    recorded_before: i64,
}

impl PatchCounter {
    /// How many stamps nudge wrote since the counter was made.
    pub async fn count(&self, cluster: &TestCluster) -> usize {
        if let Some(now) = cluster.nudge_patches(&self.kind, &self.name) {
            return now - self.requests_before;
        }
        let workload = cluster.workload(&self.kind, &self.name).await;
        let bumps = generation_of(&workload) - self.generation_before;
        // Only a Deployment's generation moves with its own annotations (the
        // history record); a StatefulSet's or DaemonSet's moves with its spec.
        let recorded = if self.kind == "Deployment" {
            recorded_revisions(&workload) - self.recorded_before
        } else {
            0
        };
        usize::try_from(bumps - recorded).unwrap_or(0)
    }
}

fn generation_of(workload: &Value) -> i64 {
    workload["metadata"]["generation"].as_i64().unwrap_or(0)
}

/// How many revisions the workload's `nudge.dev/history` holds (each record
/// adds one, up to the history limit, far beyond what a test rolls).
fn recorded_revisions(workload: &Value) -> i64 {
    recorded_history(workload).map_or(0, |history| history.len() as i64)
}

/// The revisions in a workload's `nudge.dev/history`, when it has one.
pub fn recorded_history(workload: &Value) -> Option<Vec<Value>> {
    workload["metadata"]["annotations"]["nudge.dev/history"]
        .as_str()
        .and_then(|h| serde_json::from_str(h).ok())
}

/// nudge running inside the test process.
pub struct InProcessNudge {
    shutdown: CancellationToken,
    task: JoinHandle<()>,
    admin: SocketAddr,
}

impl Running for InProcessNudge {
    fn metrics_at(&self) -> MetricsAt {
        MetricsAt::Admin(self.admin)
    }
}

impl InProcessNudge {
    /// Its admin server's address.
    pub fn admin(&self) -> SocketAddr {
        self.admin
    }

    /// Stops it and waits until it has.
    pub async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("nudge stops within 10 s")
            .expect("nudge task does not panic");
    }
}

/// The `nudge` binary running as a child process (killed on drop).
pub struct BinaryNudge {
    child: tokio::process::Child,
    admin: SocketAddr,
}

impl Running for BinaryNudge {
    fn metrics_at(&self) -> MetricsAt {
        MetricsAt::Admin(self.admin)
    }
}

impl BinaryNudge {
    /// Its admin server's address.
    pub fn admin(&self) -> SocketAddr {
        self.admin
    }

    /// Waits for it to exit by itself, at most `timeout`.
    pub async fn exit_within(mut self, timeout: Duration) -> std::process::ExitStatus {
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("nudge still runs after {timeout:?}"))
            .expect("wait for nudge")
    }

    /// Sends SIGTERM and waits for a clean exit.
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        let status = tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .expect("nudge exits within 10 s of SIGTERM")
            .expect("wait for nudge");
        assert!(status.success(), "nudge exited with {status}");
    }
}

/// A minimal HTTP/1.1 GET (the admin server): status and body; `None` when
/// nothing listens yet.
/// It gives up after [`HTTP_TIMEOUT`]: a peer that accepts and never answers (a
/// port taken by something else) must not hold a test forever.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        Some(response)
    };
    let response = tokio::time::timeout(HTTP_TIMEOUT, exchange).await.ok()??;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

/// A port on 127.0.0.1 that was free a moment ago, for a server the test starts.
/// Drawn below 32768, where Linux (and macOS) hand out no ephemeral ports: an
/// outgoing connection of a test running beside this one cannot take it before
/// the server binds it, as it could a port the kernel picked.
pub fn free_port() -> SocketAddr {
    loop {
        let mut bytes = [0u8; 2];
        getrandom::fill(&mut bytes).expect("random");
        let port = 20_000 + u16::from_le_bytes(bytes) % 12_000;
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            return listener.local_addr().expect("a bound address");
        }
    }
}

/// Waits until nudge's admin server at `addr` answers `/ready` with 200; returns
/// the body.
pub async fn wait_ready(addr: std::net::SocketAddr) -> String {
    wait_for("/ready", WAIT, || ready_body(addr)).await
}

/// `/ready`'s body, when it answers 200.
async fn ready_body(addr: std::net::SocketAddr) -> Option<String> {
    http_get(addr, "/ready")
        .await
        .filter(|(status, _)| *status == 200)
        .map(|(_, body)| body)
}

/// How long [`http_get`] waits for a whole answer.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// Polls `check` every 100 ms until it returns `Some`, or panics after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until pod-template annotation `key` of a workload is set and differs
/// from `previous`; returns its value.
pub async fn wait_for_stamp(
    cluster: &TestCluster,
    kind: &str,
    name: &str,
    key: &str,
    previous: Option<&str>,
) -> String {
    wait_for(
        &format!("{kind}/{name} {key} to change from {previous:?}"),
        WAIT,
        || async {
            let annotations = cluster.template_annotations(kind, name).await;
            annotations
                .get(key)
                .filter(|v| Some(v.as_str()) != previous)
                .cloned()
        },
    )
    .await
}

/// A pod spec with one container mounting ConfigMap `configmap` as a volume.
pub fn pod_mounting_configmap(configmap: &str) -> Value {
    json!({
        "containers": [{
            "name": "app", "image": "busybox",
            "volumeMounts": [{ "name": "config", "mountPath": "/etc/config" }],
        }],
        "volumes": [{ "name": "config", "configMap": { "name": configmap } }],
    })
}

/// A pod spec with one container and nothing referenced.
pub fn plain_pod() -> Value {
    json!({ "containers": [{ "name": "app", "image": "busybox" }] })
}

/// `/apis/apps/v1/namespaces/<ns>/<plural>/<name>`.
pub fn workload_path(namespace: &str, kind: &str, name: &str) -> String {
    let plural = match kind {
        "Deployment" => "deployments",
        "StatefulSet" => "statefulsets",
        "DaemonSet" => "daemonsets",
        other => panic!("unknown kind {other}"),
    };
    format!("/apis/apps/v1/namespaces/{namespace}/{plural}/{name}")
}

fn to_map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn unique_namespace(test: &str) -> String {
    let mut bytes = [0u8; 4];
    getrandom::fill(&mut bytes).expect("random");
    let suffix = hex::encode(bytes);
    let base: String = test
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    format!("t-{}-{suffix}", base.trim_matches('-'))
}

async fn client_for(kubeconfig: &Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig is usable");
    Client::try_from(config).expect("build client")
}

/// The `NUDGE_*` variables that reproduce `config`'s engine and Kubernetes
/// settings for the binary; none for an empty `kubernetes.namespace` (nudge then
/// takes the kubeconfig context's).
fn config_env(config: &Config) -> Vec<(String, String)> {
    let engine = &config.engine;
    let kube = &config.kubernetes;
    let duration = |d: Duration| format!("{}ms", d.as_millis());
    let namespace = (!kube.namespace.is_empty()).then(|| {
        (
            "NUDGE_KUBERNETES__NAMESPACE".to_owned(),
            kube.namespace.clone(),
        )
    });
    let mut env = vec![
        ("NUDGE_ENGINE__DEBOUNCE".into(), duration(engine.debounce)),
        ("NUDGE_ENGINE__MAX_DELAY".into(), duration(engine.max_delay)),
        (
            "NUDGE_ENGINE__MIN_INTERVAL".into(),
            duration(engine.min_interval),
        ),
        (
            "NUDGE_ENGINE__STAMPS_PER_SECOND".into(),
            engine.stamps_per_second.to_string(),
        ),
        ("NUDGE_ENGINE__BURST".into(), engine.burst.to_string()),
        (
            "NUDGE_KUBERNETES__NAMESPACES".into(),
            format!("[{}]", kube.namespaces.join(",")),
        ),
        ("NUDGE_ADMIN__BIND".into(), config.admin.bind.to_string()),
        (
            "NUDGE_LEADER_ELECTION__LEASE_DURATION".into(),
            duration(config.leader_election.lease_duration),
        ),
        (
            "NUDGE_LEADER_ELECTION__RENEW_DEADLINE".into(),
            duration(config.leader_election.renew_deadline),
        ),
        (
            "NUDGE_LEADER_ELECTION__RETRY_PERIOD".into(),
            duration(config.leader_election.retry_period),
        ),
        ("NUDGE_LOG__FILTER".into(), config.log.filter.clone()),
    ];
    env.extend(namespace);
    env
}

/// The name of an object, for assertions.
pub fn name_of<K: Resource>(object: &K) -> String {
    object.name_any()
}

/// A CustomResourceDefinition this test made sure exists; deleted when the last
/// test of this process that needs it is done, and only when one of them created
/// it (never one that was there before, e.g. a real Argo install).
pub struct CrdGuard {
    client: Client,
    name: String,
    /// Set on an external cluster, which the tests of a file share: the key of
    /// [`CRD_USERS`]. On the in-process double the CRD is this test's alone.
    shared: Option<String>,
    created: bool,
}

/// On an external cluster, the tests of this process that use each CRD, and
/// whether one of them created it: a test must not delete a CRD (and with it
/// every custom resource) while a test running beside it still uses it.
static CRD_USERS: std::sync::Mutex<BTreeMap<String, (usize, bool)>> =
    std::sync::Mutex::new(BTreeMap::new());

impl TestCluster {
    /// Creates the CRD `crd` unless it exists, and waits until the API server
    /// serves its kind (discovery finds it).
    pub async fn ensure_crd(&self, crd: Value) -> CrdGuard {
        let name = crd["metadata"]["name"].as_str().expect("a name").to_owned();
        let group = crd["spec"]["group"].as_str().expect("a group").to_owned();
        let version = crd["spec"]["versions"][0]["name"]
            .as_str()
            .expect("a version")
            .to_owned();
        let kind = crd["spec"]["names"]["kind"]
            .as_str()
            .expect("a kind")
            .to_owned();
        let shared = matches!(self.backend, Backend::External(_)).then(|| name.clone());
        let first_user = match &shared {
            Some(key) => {
                let mut users = CRD_USERS.lock().unwrap();
                let entry = users.entry(key.clone()).or_insert((0, false));
                entry.0 += 1;
                entry.0 == 1
            }
            None => true,
        };
        let mut created = false;
        if first_user {
            created = self.create_crd(&name, crd).await;
            if let Some(key) = &shared {
                CRD_USERS
                    .lock()
                    .unwrap()
                    .entry(key.clone())
                    .or_insert((1, false))
                    .1 = created;
            }
        }
        let gvk = kube::api::GroupVersionKind::gvk(&group, &version, &kind);
        wait_for(&format!("{kind} to be served"), WAIT, || async {
            kube::discovery::pinned_kind(&self.client, &gvk).await.ok()
        })
        .await;
        CrdGuard {
            client: self.client.clone(),
            name,
            shared,
            created,
        }
    }

    /// Creates the CRD; false when it was there already. One still being
    /// deleted (by an earlier test) is waited out first, else it would vanish
    /// under this test.
    async fn create_crd(&self, name: &str, crd: Value) -> bool {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let crd: CustomResourceDefinition = serde_json::from_value(crd).expect("a CRD");
        wait_for(
            &format!("CRD {name} to be deleted or live"),
            WAIT,
            || async {
                match api.get_opt(name).await {
                    Ok(Some(existing)) => {
                        existing.metadata.deletion_timestamp.is_none().then_some(())
                    }
                    Ok(None) => Some(()),
                    Err(_) => None,
                }
            },
        )
        .await;
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => true,
            Err(kube::Error::Api(status)) if status.code == 409 => false,
            Err(error) => panic!("create CRD {name}: {error}"),
        }
    }
}

impl Drop for CrdGuard {
    fn drop(&mut self) {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let delete = match &self.shared {
            Some(key) => {
                let mut users = CRD_USERS.lock().unwrap_or_else(|e| e.into_inner());
                let last = users.get_mut(key).is_some_and(|(count, _)| {
                    *count -= 1;
                    *count == 0
                });
                last && users.remove(key).is_some_and(|(_, created)| created)
            }
            None => self.created,
        };
        if delete {
            delete_cluster_object::<CustomResourceDefinition>(&self.client, &self.name);
        }
    }
}

/// A minimal Argo Rollouts CRD (`argoproj.io/v1alpha1` `Rollout`): the spec keeps
/// any field, the status subresource is on, as in Argo's own CRD.
pub fn rollout_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": "rollouts.argoproj.io" },
        "spec": {
            "group": "argoproj.io",
            "names": { "kind": "Rollout", "listKind": "RolloutList", "plural": "rollouts",
                       "singular": "rollout", "shortNames": ["ro"] },
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "subresources": { "status": {} },
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                        "status": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                    },
                }},
            }],
        },
    })
}
