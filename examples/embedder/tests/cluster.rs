//! The embedder's controller against the API server double: what the binary
//! runs (`nudge_embedder::customize`), configured from a TOML file through
//! nudge's own provider stack.

use std::path::PathBuf;
use std::time::Duration;

use apiserver_double::{ApiServerDouble, RecordedRequest};
use nudge::figment::providers::Serialized;
use nudge::kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use nudge::kube::config::{KubeConfigOptions, Kubeconfig};
use nudge::shutdown::CancellationToken;
use nudge::{Config, Controller};
use serde_json::{Value, json};

/// Every wait in these tests ends by then.
const WAIT: Duration = Duration::from_secs(20);

struct Cluster {
    double: ApiServerDouble,
    client: nudge::kube::Client,
    /// The `file` source's root.
    root: tempfile::TempDir,
    /// Holds the TOML configuration.
    config_dir: tempfile::TempDir,
}

impl Cluster {
    async fn start() -> Self {
        let double = ApiServerDouble::start().await.unwrap();
        double
            .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}))
            .unwrap();
        let kubeconfig = Kubeconfig::read_from(double.kubeconfig_path()).unwrap();
        let options = KubeConfigOptions::default();
        let client_config = nudge::kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .unwrap();
        let client = nudge::kube::Client::try_from(client_config).unwrap();
        Self {
            double,
            client,
            root: tempfile::tempdir().unwrap(),
            config_dir: tempfile::tempdir().unwrap(),
        }
    }

    /// The configuration file the controller reads: short debounce and
    /// min-interval, the `apps` namespace, the file source's root.
    fn config_file(&self) -> PathBuf {
        let path = self.config_dir.path().join("nudge.toml");
        let text = format!(
            r#"
[kubernetes]
namespaces = ["apps"]
namespace = "apps"

[engine]
debounce = "100ms"
min_interval = "100ms"

[sources.file]
root = "{}"

[sources.http]
interval = "1s"
"#,
            self.root.path().display()
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// The controller the binary would build from the configuration file.
    fn controller(&self) -> Controller {
        let figment = Config::providers(Some(&self.config_file())).unwrap();
        let controller = Controller::from_figment(figment, self.client.clone()).unwrap();
        nudge_embedder::customize(controller)
    }

    /// [`controller`](Self::controller), serving the admin endpoint at `admin`
    /// (and taking no Lease).
    fn controller_serving(&self, admin: std::net::SocketAddr) -> Controller {
        let figment = Config::providers(Some(&self.config_file()))
            .unwrap()
            .merge(Serialized::default("admin.bind", admin))
            .merge(Serialized::default("leader_election.enabled", false));
        let controller = Controller::from_figment(figment, self.client.clone()).unwrap();
        nudge_embedder::customize(controller.operate_as_configured())
    }

    fn write(&self, file: &str, content: &str) {
        // Written next to it, then renamed over it, as config management does:
        // one complete content per change.
        let temp = self.root.path().join(format!(".{file}.tmp"));
        std::fs::write(&temp, content).unwrap();
        std::fs::rename(&temp, self.root.path().join(file)).unwrap();
    }

    fn deployment(&self, name: &str, file: &str) {
        self.double
            .create(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": "apps",
                             "annotations": {"nudge.dev/file-cfg": file}},
                "spec": {
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {"containers": [{"name": "app", "image": "x"}]},
                    },
                },
            }))
            .unwrap();
    }

    /// Waits until `annotation` at `template` of `object` holds `value`.
    async fn until_stamped(
        &self,
        api: &Api<DynamicObject>,
        object: &str,
        template: &[&str],
        value: &str,
    ) {
        let annotation = "nudge.dev/checksum-cfg";
        let reached = tokio::time::timeout(WAIT, async {
            loop {
                let current = api.get(object).await.unwrap().data;
                let mut at = &current;
                for key in template {
                    at = &at[key];
                }
                if at["metadata"]["annotations"][annotation].as_str() == Some(value) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        assert!(
            reached.is_ok(),
            "{object}: {annotation} never became {value}"
        );
    }
}

fn deployments(client: &nudge::kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("apps", "v1", "Deployment");
    Api::namespaced_with(
        client.clone(),
        "apps",
        &ApiResource::from_gvk_with_plural(&gvk, "deployments"),
    )
}

/// The fingerprint nudge writes for a file holding `content`.
fn fingerprint(content: &str) -> String {
    nudge::testing::observe_context()
        .fingerprint(content.as_bytes())
        .to_string()
}

/// nudge's writes (server-side applies with its field manager) to `path`.
fn nudge_patches<'a>(
    requests: &'a [RecordedRequest],
    path: &'a str,
) -> impl Iterator<Item = &'a RecordedRequest> + 'a {
    requests.iter().filter(move |r| {
        r.method == "PATCH"
            && r.path == path
            && r.query
                .as_deref()
                .is_some_and(|q| q.split('&').any(|kv| kv == "fieldManager=nudge"))
    })
}

/// A controller running until [`stop`](Self::stop).
struct Running {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), nudge::RunError>>,
}

impl Running {
    fn start(controller: Controller) -> Self {
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(controller.run(shutdown.clone()));
        Self { shutdown, task }
    }

    /// Shuts it down and checks that it stops cleanly.
    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the controller stops on shutdown")
            .unwrap()
            .unwrap();
    }
}

/// (a) A change of a file rolls the Deployment referencing it with exactly
/// one PATCH. "Exactly one" is proven by later signals, not a sleep: a second
/// Deployment's file changes afterwards and its stamp arrives (the file source
/// has been polled since), a third Deployment created after that is stamped
/// (the Deployment watch has delivered web's own echo before it), and then
/// `nudge_stamps_outstanding` reads 0 (nothing is waiting or being written).
/// Only then are the first Deployment's writes carrying the new fingerprint
/// counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_change_rolls_its_deployment_with_exactly_one_patch() {
    let cluster = Cluster::start().await;
    cluster.write("app.conf", "v1");
    cluster.write("sentinel.conf", "s1");
    cluster.deployment("web", "app.conf");
    cluster.deployment("sentinel", "sentinel.conf");
    let admin = free_port();
    let running = Running::start(cluster.controller_serving(admin));
    let api = deployments(&cluster.client);
    let template = ["spec", "template"];
    cluster
        .until_stamped(&api, "web", &template, &fingerprint("v1"))
        .await;
    cluster
        .until_stamped(&api, "sentinel", &template, &fingerprint("s1"))
        .await;

    cluster.write("app.conf", "v2");
    let v2 = fingerprint("v2");
    cluster.until_stamped(&api, "web", &template, &v2).await;
    // The later signal: the sentinel's change, made after web's stamp, arrives.
    cluster.write("sentinel.conf", "s2");
    cluster
        .until_stamped(&api, "sentinel", &template, &fingerprint("s2"))
        .await;
    cluster.deployment("later", "sentinel.conf");
    cluster
        .until_stamped(&api, "later", &template, &fingerprint("s2"))
        .await;
    until_nothing_outstanding(admin).await;

    let requests = cluster.double.requests();
    let web = "/apis/apps/v1/namespaces/apps/deployments/web";
    let carrying_v2 = nudge_patches(&requests, web)
        .filter(|r| String::from_utf8_lossy(&r.body).contains(&v2))
        .count();
    assert_eq!(carrying_v2, 1, "PATCHes of web carrying {v2}");
    let sentinel = "/apis/apps/v1/namespaces/apps/deployments/sentinel";
    assert!(nudge_patches(&requests, sentinel).count() >= 2);
    running.stop().await;
}

/// (b) `Controller::explain` reads the custom source: the file reference and
/// its fingerprint, and the workload in sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_the_file_reference_and_its_fingerprint() {
    let cluster = Cluster::start().await;
    cluster.write("app.conf", "v1");
    cluster.deployment("web", "app.conf");
    let running = Running::start(cluster.controller());
    let api = deployments(&cluster.client);
    cluster
        .until_stamped(&api, "web", &["spec", "template"], &fingerprint("v1"))
        .await;

    let report = cluster
        .controller()
        .explain("deployment", Some("apps"), "web", Duration::from_secs(5))
        .await
        .unwrap();
    // The report as `nudge explain -o json` prints it.
    let json = serde_json::to_value(&report).unwrap();
    let output = json["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["output"] == "nudge.dev/checksum-cfg")
        .unwrap_or_else(|| panic!("no checksum-cfg output: {json:#}"));
    let [reference] = output["references"].as_array().unwrap().as_slice() else {
        panic!("one reference expected: {output:#}");
    };
    assert_eq!(reference["source"], "file");
    let name = reference["reference"].as_str().unwrap();
    assert!(name.contains("app.conf"), "{reference:#}");
    assert_eq!(reference["state"], "present");
    assert_eq!(reference["fingerprint"], fingerprint("v1").as_str());
    assert_eq!(json["verdict"]["state"], "in_sync", "{json:#}");
    let table = report.to_string();
    assert!(table.contains("app.conf"), "{table}");
    running.stop().await;
}

/// (d) A Widget (`example.com/v1`, pod template at `spec.podTemplate`)
/// referencing a file is stamped there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_widget_is_stamped_at_its_pod_template() {
    let cluster = Cluster::start().await;
    cluster.double.create(widget_crd()).unwrap();
    cluster.write("widget.conf", "w1");
    cluster
        .double
        .create(json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "apps",
                         "annotations": {"nudge.dev/file-cfg": "widget.conf"}},
            "spec": {"podTemplate": {"spec": {"containers": [{"name": "app", "image": "x"}]}}}}))
        .unwrap();
    let running = Running::start(cluster.controller());
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    let widgets: Api<DynamicObject> = Api::namespaced_with(
        cluster.client.clone(),
        "apps",
        &ApiResource::from_gvk_with_plural(&gvk, "widgets"),
    );
    let template = ["spec", "podTemplate"];
    cluster
        .until_stamped(&widgets, "w", &template, &fingerprint("w1"))
        .await;
    cluster.write("widget.conf", "w2");
    cluster
        .until_stamped(&widgets, "w", &template, &fingerprint("w2"))
        .await;
    running.stop().await;
}

fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "listKind": "WidgetList", "singular": "widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}],
        },
    })
}

/// A free port on 127.0.0.1 for the admin endpoint.
fn free_port() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// Waits until the controller's admin endpoint at `admin` reports
/// `nudge_stamps_outstanding 0`: every change it has handled is written, or
/// decided against.
async fn until_nothing_outstanding(admin: std::net::SocketAddr) {
    let idle = tokio::time::timeout(WAIT, async {
        while !http_get(admin, "/metrics")
            .await
            .lines()
            .any(|line| line == "nudge_stamps_outstanding 0")
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(idle.is_ok(), "stamps still outstanding after {WAIT:?}");
}

/// The body of `GET http://<addr><path>`, once it answers.
async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let answered = tokio::time::timeout(WAIT, async {
        loop {
            if let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await {
                let request =
                    format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
                stream.write_all(request.as_bytes()).await.unwrap();
                let mut body = String::new();
                stream.read_to_string(&mut body).await.unwrap();
                return body;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    answered.expect("the admin endpoint answers")
}

/// InvalidAnnotation Events about `name`.
async fn invalid_annotation_events(client: &nudge::kube::Client, name: &str) -> Vec<Value> {
    let gvk = GroupVersionKind::gvk("events.k8s.io", "v1", "Event");
    let events: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "apps", &ApiResource::from_gvk(&gvk));
    events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .filter(|e| e["reason"] == "InvalidAnnotation" && e["regarding"]["name"] == name)
        .collect()
}

/// (e) A reference the file source refuses (it leaves the root) is one
/// `InvalidAnnotation` Warning Event with the source's reason, counted once
/// in `nudge_annotation_errors_total`, however long nudge runs: proven after
/// a later stamp of another workload, not by waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_file_reference_is_one_warning_event_and_counted() {
    let cluster = Cluster::start().await;
    cluster.write("sentinel.conf", "s1");
    cluster.deployment("escaping", "../etc/passwd");
    cluster.deployment("sentinel", "sentinel.conf");
    let admin = free_port();
    let running = Running::start(cluster.controller_serving(admin));
    let api = deployments(&cluster.client);
    let template = ["spec", "template"];
    cluster
        .until_stamped(&api, "sentinel", &template, &fingerprint("s1"))
        .await;
    let first = tokio::time::timeout(WAIT, async {
        loop {
            let events = invalid_annotation_events(&cluster.client, "escaping").await;
            if !events.is_empty() {
                return events;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("an InvalidAnnotation Event");
    let note = first[0]["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("nudge.dev/file-cfg") && note.contains("root"),
        "{note}"
    );
    assert_eq!(first[0]["type"], "Warning");

    // A later signal: the sentinel's next change is stamped.
    cluster.write("sentinel.conf", "s2");
    cluster
        .until_stamped(&api, "sentinel", &template, &fingerprint("s2"))
        .await;
    let events = invalid_annotation_events(&cluster.client, "escaping").await;
    assert_eq!(events.len(), 1, "{events:#?}");
    assert!(events[0]["series"].is_null(), "reported once: {events:#?}");
    let metrics = http_get(admin, "/metrics").await;
    let counted = metrics
        .lines()
        .find(|l| l.starts_with("nudge_annotation_errors_total{") && l.contains("deployment"))
        .unwrap_or_else(|| panic!("no annotation error counted:\n{metrics}"));
    assert!(counted.ends_with(" 1"), "{counted}");
    running.stop().await;
}

/// (f) The Widget CRD installed after nudge started: the Widget target starts
/// working without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn widgets_are_stamped_once_their_crd_appears_after_start() {
    let cluster = Cluster::start().await;
    cluster.write("widget.conf", "w1");
    cluster.write("sentinel.conf", "s1");
    cluster.deployment("sentinel", "sentinel.conf");
    let running = Running::start(cluster.controller());
    let api = deployments(&cluster.client);
    cluster
        .until_stamped(&api, "sentinel", &["spec", "template"], &fingerprint("s1"))
        .await;

    cluster.double.create(widget_crd()).unwrap();
    cluster
        .double
        .create(json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "apps",
                         "annotations": {"nudge.dev/file-cfg": "widget.conf"}},
            "spec": {"podTemplate": {"spec": {"containers": [{"name": "app", "image": "x"}]}}}}))
        .unwrap();
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    let widgets: Api<DynamicObject> = Api::namespaced_with(
        cluster.client.clone(),
        "apps",
        &ApiResource::from_gvk_with_plural(&gvk, "widgets"),
    );
    cluster
        .until_stamped(&widgets, "w", &["spec", "podTemplate"], &fingerprint("w1"))
        .await;
    running.stop().await;
}
