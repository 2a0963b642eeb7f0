//! The admission webhook: workloads are stored already stamped, re-applies keep
//! their stamp, bad input is allowed unchanged, certificates rotate without a
//! restart, and the self-managed certificate is shared by replicas.
//!
//! The webhook is registered by `clientConfig.url` (`https://127.0.0.1:<port>/mutate`,
//! with a certificate for IP 127.0.0.1), which the double and a kube-apiserver on
//! the same machine both call; the registration selects the test namespace only,
//! leaves out [`SENTINEL_LABEL`]led workloads (so that only the controller stamps
//! sentinels) and is deleted when the test ends. So these tests run on the double
//! and on an external cluster, except the deadline test, which needs the double's
//! injected latency.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::support::*;
use base64::Engine as _;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use nudge::__private::webhook::CertificateBundle;
use nudge::__private::webhook::generate_certificate as generate;
use nudge::config::Config;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};

const WAVE_HASH: &str = "wave.pusher.com/config-hash";
const CONFIG_HASH: &str = "nudge.dev/config-hash";

// === helpers ===

/// A temporary directory holding `tls.crt` and `tls.key`.
struct CertDir {
    dir: PathBuf,
}

impl CertDir {
    fn new(test: &str) -> Self {
        let mut bytes = [0u8; 4];
        getrandom::fill(&mut bytes).unwrap();
        let dir = std::env::temp_dir().join(format!("nudge-webhook-{test}-{}", hex::encode(bytes)));
        std::fs::create_dir_all(&dir).unwrap();
        Self { dir }
    }

    fn cert(&self) -> PathBuf {
        self.dir.join("tls.crt")
    }

    fn key(&self) -> PathBuf {
        self.dir.join("tls.key")
    }

    /// Writes the pair as a rotation does: to temporary names, then renamed.
    fn write(&self, bundle: &CertificateBundle) {
        for (path, pem) in [
            (self.key(), &bundle.key_pem),
            (self.cert(), &bundle.cert_pem),
        ] {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, pem).unwrap();
            std::fs::rename(&tmp, &path).unwrap();
        }
    }
}

impl Drop for CertDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn local_bundle(ca: Option<&CertificateBundle>) -> CertificateBundle {
    generate(
        &["127.0.0.1".to_owned()],
        Duration::from_secs(3600),
        ca,
        SystemTime::now(),
    )
    .expect("generate a test certificate")
}

fn webhook_config(cluster: &TestCluster, certs: &CertDir) -> Config {
    let mut config = cluster.nudge_config();
    config.webhook.enabled = true;
    config.webhook.bind = SocketAddr::from(([127, 0, 0, 1], 0));
    config.webhook.cert_file = certs.cert();
    config.webhook.key_file = certs.key();
    config
}

/// A MutatingWebhookConfiguration this test registered; deleted when dropped
/// (the test namespace goes away by itself, this cluster-scoped object would not).
struct Registration {
    client: kube::Client,
    name: String,
}

impl Drop for Registration {
    fn drop(&mut self) {
        delete_cluster_object::<MutatingWebhookConfiguration>(&self.client, &self.name);
    }
}

/// Registers nudge's webhook (as `deploy/base/mutatingwebhookconfiguration.yaml` does) at `url`, for the test
/// namespace only and not for sentinel workloads, with `failurePolicy: Ignore`.
async fn register_webhook(
    cluster: &TestCluster,
    name: &str,
    url: &str,
    ca_pem: Option<&str>,
) -> Registration {
    let mut client_config = json!({ "url": url });
    if let Some(ca) = ca_pem {
        client_config["caBundle"] = json!(base64::engine::general_purpose::STANDARD.encode(ca));
    }
    let body = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "stamp.nudge.dev",
            "admissionReviewVersions": ["v1"],
            "clientConfig": client_config,
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "timeoutSeconds": 5,
            "reinvocationPolicy": "IfNeeded",
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": cluster.namespace()}},
            "objectSelector": {"matchExpressions": [{"key": SENTINEL_LABEL, "operator": "DoesNotExist"}]},
            "rules": [{
                "apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": ["deployments", "statefulsets", "daemonsets"], "scope": "Namespaced",
            }, {
                "apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": ["cronjobs", "jobs"], "scope": "Namespaced",
            }],
        }],
    });
    let api: Api<MutatingWebhookConfiguration> = Api::all(cluster.client());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(body).unwrap(),
    )
    .await
    .expect("register the webhook");
    Registration {
        client: cluster.client(),
        name: name.to_owned(),
    }
}

/// Waits until the API server calls nudge's webhook: a kube-apiserver picks up a
/// new or changed configuration a moment after it is stored. Probes with dry-run
/// creates (nothing is stored) of a Deployment mounting ConfigMap `webhook-probe`
/// until one comes back stamped.
async fn wait_until_the_webhook_is_called(cluster: &TestCluster) {
    cluster
        .put_configmap("webhook-probe", &[("probe", "1")])
        .await;
    let probe: Deployment = serde_json::from_value(deployment_json(
        cluster.namespace(),
        "webhook-probe",
        pod_mounting_configmap("webhook-probe"),
    ))
    .unwrap();
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let api: Api<Deployment> = cluster.api();
    wait_for("the API server to call the webhook", WAIT, || async {
        let created = api.create(&dry_run, &probe).await.ok()?;
        let annotations = created.spec?.template.metadata?.annotations?;
        annotations.contains_key(CONFIG_HASH).then_some(())
    })
    .await;
}

/// Opens a TLS connection trusting only `ca_pem`.
async fn connect(
    addr: SocketAddr,
    ca_pem: &str,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    try_connect(addr, ca_pem).await.expect("TLS handshake")
}

/// A TLS connection trusting `ca_pem`; `None` while the handshake fails (a
/// replica that has not loaded its certificate yet closes the connection).
async fn try_connect(
    addr: SocketAddr,
    ca_pem: &str,
) -> Option<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.ok()?).ok()?;
    }
    let config =
        rustls::ClientConfig::builder_with_provider(nudge::__private::webhook::crypto_provider())
            .with_safe_default_protocol_versions()
            .ok()?
            .with_root_certificates(roots)
            .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    connector
        .connect(ServerName::IpAddress(addr.ip().into()), tcp)
        .await
        .ok()
}

/// The end-entity certificate a new connection is served.
async fn presented_certificate(addr: SocketAddr, ca_pem: &str) -> Vec<u8> {
    let tls = connect(addr, ca_pem).await;
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

/// Like [`presented_certificate`], `None` while the handshake fails.
async fn certificate_if_served(addr: SocketAddr, ca_pem: &str) -> Option<Vec<u8>> {
    let tls = try_connect(addr, ca_pem).await?;
    Some(tls.get_ref().1.peer_certificates()?.first()?.to_vec())
}

fn der_of(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

/// POSTs raw bytes to the webhook; returns the status and the body as JSON (or
/// `Value::Null` when it is not JSON).
async fn post_review(addr: SocketAddr, ca_pem: &str, body: Vec<u8>) -> (u16, Value) {
    let tls = connect(addr, ca_pem).await;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let request = hyper::Request::post("/mutate?timeout=5s")
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = sender
        .send_request(request)
        .await
        .expect("the webhook answers");
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// An AdmissionReview as the apiserver sends it.
fn review(uid: &str, kind: (&str, &str, &str), namespace: &str, object: Value) -> Vec<u8> {
    let (group, version, kind) = kind;
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": "x"},
            "name": object["metadata"]["name"],
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "admin"},
            "object": object,
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }))
    .unwrap()
}

fn deployment_json(namespace: &str, name: &str, pod_spec: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "annotations": {"nudge.dev/auto": "true"}},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec},
        },
    })
}

/// Asserts an allowed answer without a patch for request `uid`.
fn assert_allowed_without_patch(status: u16, body: &Value, uid: &str) {
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["kind"], "AdmissionReview");
    assert_eq!(body["response"]["uid"], uid);
    assert_eq!(body["response"]["allowed"], true);
    assert!(body["response"].get("patch").is_none(), "{body}");
}

/// A cluster with nudge's webhook serving file certificates, registered and
/// called by the API server.
struct Hooked {
    // Dropped first, while the cluster is still there.
    _registration: Registration,
    cluster: TestCluster,
    nudge: InProcessNudge,
    addr: SocketAddr,
    bundle: CertificateBundle,
    certs: CertDir,
}

/// [`hook`] on a [`TestCluster::start`]ed cluster.
async fn hooked(test: &str, tweak: impl FnOnce(&mut Config)) -> Hooked {
    hook(TestCluster::start(test).await, test, tweak).await
}

async fn hook(cluster: TestCluster, test: &str, tweak: impl FnOnce(&mut Config)) -> Hooked {
    let certs = CertDir::new(test);
    let bundle = local_bundle(None);
    certs.write(&bundle);
    let mut config = webhook_config(&cluster, &certs);
    tweak(&mut config);
    let (nudge, addr) = cluster.start_nudge_with_webhook(config).await;
    let name = format!("nudge-{}", cluster.namespace());
    let registration = register_webhook(
        &cluster,
        &name,
        &format!("https://{addr}/mutate"),
        Some(&bundle.ca_cert_pem),
    )
    .await;
    wait_until_the_webhook_is_called(&cluster).await;
    Hooked {
        _registration: registration,
        cluster,
        nudge,
        addr,
        bundle,
        certs,
    }
}

/// Replaces a Deployment with `manifest` as `kubectl replace` (or a GitOps tool)
/// would, retrying on a conflict (kube-controller-manager writes to Deployments).
async fn replace_deployment(api: &Api<Deployment>, manifest: &Value) -> Deployment {
    for _ in 0..10 {
        let current = api
            .get(manifest["metadata"]["name"].as_str().unwrap())
            .await
            .unwrap();
        let mut body = manifest.clone();
        body["metadata"]["resourceVersion"] = json!(current.metadata.resource_version);
        let name = body["metadata"]["name"].as_str().unwrap().to_owned();
        match api
            .replace(
                &name,
                &PostParams::default(),
                &serde_json::from_value(body).unwrap(),
            )
            .await
        {
            Ok(replaced) => return replaced,
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(error) => panic!("replace {name}: {error}"),
        }
    }
    panic!("replace: a conflict every time");
}

// === tests ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_deployment_is_stored_stamped_and_nudge_never_patches_it() {
    let h = hooked("webhook-create", |_| {}).await;
    let sentinel = h.cluster.sentinel().await;
    h.cluster.put_configmap("app-config", &[("a", "1")]).await;
    h.cluster
        .create_workload(
            "Deployment",
            "web",
            &[("nudge.dev/auto", "true")],
            &[],
            pod_mounting_configmap("app-config"),
        )
        .await;
    let stored = h.cluster.template_annotations("Deployment", "web").await;
    let stamp = stored
        .get(CONFIG_HASH)
        .expect("stored with nudge's stamp")
        .clone();
    assert!(stamp.starts_with("sha256-"), "{stamp}");

    let created = h.cluster.rollout_marker("Deployment", "web").await;
    let patches = h.cluster.patch_counter("Deployment", "web").await;
    // The controller has seen the Deployment and decided about it.
    sentinel.quiesce(&h.nudge).await;
    assert_eq!(
        patches.count(&h.cluster).await,
        0,
        "the controller agrees with the webhook: no PATCH"
    );
    let workload = h.cluster.workload("Deployment", "web").await;
    assert_eq!(
        workload["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH],
        stamp.as_str()
    );
    // Stamped at creation, never rolled again.
    assert_no_rollout(
        &created,
        &h.cluster.rollout_marker("Deployment", "web").await,
    );
    h.nudge.stop().await;
}

/// A pod spec whose only volume is a Secrets Store CSI volume: no ConfigMap
/// or Secret for `nudge.dev/auto` to hash (the CSI preset is not configured).
fn pod_with_only_a_csi_volume() -> Value {
    json!({
        "containers": [{ "name": "app", "image": "app:1",
                         "volumeMounts": [{ "name": "secrets", "mountPath": "/secrets" }] }],
        "volumes": [{ "name": "secrets", "csi": {
            "driver": "secrets-store.csi.k8s.io", "readOnly": true,
            "volumeAttributes": { "secretProviderClass": "vault-db" } } }],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auto_workload_referencing_no_config_is_never_stamped_with_the_hash_of_nothing() {
    let h = hooked("webhook-no-input", |_| {}).await;
    let sentinel = h.cluster.sentinel().await;
    h.cluster
        .create_workload(
            "Deployment",
            "csi-only",
            &[("nudge.dev/auto", "true")],
            &[],
            pod_with_only_a_csi_volume(),
        )
        .await;
    let stored = h
        .cluster
        .template_annotations("Deployment", "csi-only")
        .await;
    assert!(
        !stored.contains_key(CONFIG_HASH),
        "stored unstamped: {stored:?}"
    );

    let created = h.cluster.rollout_marker("Deployment", "csi-only").await;
    let patches = h.cluster.patch_counter("Deployment", "csi-only").await;
    sentinel.quiesce(&h.nudge).await;
    assert_eq!(
        patches.count(&h.cluster).await,
        0,
        "nothing to stamp: no PATCH"
    );
    let annotations = h
        .cluster
        .template_annotations("Deployment", "csi-only")
        .await;
    assert!(!annotations.contains_key(CONFIG_HASH), "{annotations:?}");
    assert_no_rollout(
        &created,
        &h.cluster.rollout_marker("Deployment", "csi-only").await,
    );
    h.nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hash_of_nothing_an_older_nudge_wrote_is_left_where_it_is() {
    let h = hooked("webhook-old-nothing", |_| {}).await;
    let sentinel = h.cluster.sentinel().await;
    let nothing = nudge::__private::fingerprint::combine_native(std::iter::empty()).to_string();
    h.cluster
        .create_workload(
            "Deployment",
            "stamped-before",
            &[("nudge.dev/auto", "true")],
            &[(CONFIG_HASH, nothing.as_str())],
            pod_with_only_a_csi_volume(),
        )
        .await;
    let created = h
        .cluster
        .rollout_marker("Deployment", "stamped-before")
        .await;
    let patches = h
        .cluster
        .patch_counter("Deployment", "stamped-before")
        .await;
    sentinel.quiesce(&h.nudge).await;
    assert_eq!(
        patches.count(&h.cluster).await,
        0,
        "left as it is: no PATCH"
    );
    let annotations = h
        .cluster
        .template_annotations("Deployment", "stamped-before")
        .await;
    assert_eq!(annotations.get(CONFIG_HASH), Some(&nothing));
    assert_no_rollout(
        &created,
        &h.cluster
            .rollout_marker("Deployment", "stamped-before")
            .await,
    );
    h.nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_workload_created_before_its_config_waits_gated_then_starts_stamped() {
    let h = hooked("webhook-gate", |_| {}).await;
    let gate = "nudge.dev/awaiting-config";
    h.cluster
        .create_workload(
            "Deployment",
            "early",
            &[("wave.pusher.com/update-on-config-change", "true")],
            &[],
            pod_mounting_configmap("late-config"),
        )
        .await;
    let stored = h.cluster.workload("Deployment", "early").await;
    assert_eq!(
        stored["spec"]["template"]["spec"]["schedulingGates"],
        json!([{ "name": gate }]),
        "held at creation: {stored}"
    );
    assert!(stored["spec"]["template"]["metadata"]["annotations"][WAVE_HASH].is_null());

    h.cluster.put_configmap("late-config", &[("a", "1")]).await;
    let released = wait_for("the gate to be lifted", WAIT, || async {
        let workload = h.cluster.workload("Deployment", "early").await;
        workload["spec"]["template"]["spec"]["schedulingGates"]
            .is_null()
            .then_some(workload)
    })
    .await;
    assert!(
        released["spec"]["template"]["metadata"]["annotations"][WAVE_HASH].is_string(),
        "the stamp comes with the release: {released}"
    );
    assert_eq!(released["metadata"]["generation"], 2, "one change");
    h.nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_stamped_at_creation_and_its_updates_are_never_refused() {
    // A long debounce: the controller does not recreate the Job during the test.
    let h = hooked("webhook-job", |c| {
        c.engine.debounce = Duration::from_secs(120);
        c.engine.max_delay = Duration::from_secs(120);
    })
    .await;
    h.cluster.put_configmap("job-config", &[("a", "1")]).await;
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": "once", "annotations": { "nudge.dev/auto": "true" } },
        "spec": { "template": { "spec": {
            "restartPolicy": "Never",
            "containers": [{ "name": "app", "image": "busybox" }],
            "volumes": [{ "name": "config", "configMap": { "name": "job-config" } }],
        } } },
    }))
    .unwrap();
    let jobs: Api<Job> = h.cluster.api();
    let created = jobs.create(&PostParams::default(), &job).await.unwrap();
    let stamp = created
        .spec
        .unwrap()
        .template
        .metadata
        .unwrap()
        .annotations
        .unwrap()[CONFIG_HASH]
        .clone();

    // The webhook knows the new content once a dry-run create is stamped with it.
    h.cluster.put_configmap("job-config", &[("a", "2")]).await;
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let mut probe = job.clone();
    probe.metadata.name = Some("probe".into());
    wait_for("the webhook to see the new content", WAIT, || async {
        let created = jobs.create(&dry_run, &probe).await.ok()?;
        let annotations = created.spec?.template.metadata?.annotations?;
        (annotations.get(CONFIG_HASH) != Some(&stamp)).then_some(())
    })
    .await;

    // A stored Job's template is immutable: the webhook leaves it alone, so the
    // user's update goes through (the controller recreates the Job instead).
    let labelled = h
        .cluster
        .merge_patch::<Job>("once", json!({ "metadata": { "labels": { "team": "a" } } }))
        .await;
    let annotations = labelled
        .spec
        .unwrap()
        .template
        .metadata
        .unwrap()
        .annotations
        .unwrap();
    assert_eq!(annotations[CONFIG_HASH], stamp);
    h.nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reapply_dropping_nudges_annotations_is_restored_without_patch_or_rollout() {
    let h = hooked("webhook-reapply", |_| {}).await;
    let sentinel = h.cluster.sentinel().await;
    h.cluster.put_configmap("app-config", &[("a", "1")]).await;
    let manifest = deployment_json(
        h.cluster.namespace(),
        "web",
        pod_mounting_configmap("app-config"),
    );
    let api: Api<Deployment> = h.cluster.api();
    api.create(
        &PostParams::default(),
        &serde_json::from_value(manifest.clone()).unwrap(),
    )
    .await
    .unwrap();
    let before = h.cluster.workload("Deployment", "web").await;
    assert!(before["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH].is_string());
    // The controller knows the Deployment (and agrees with its stamp).
    sentinel.flush_workloads().await;

    // A GitOps re-apply: the original manifest (no stamp), replacing the object.
    let after = serde_json::to_value(replace_deployment(&api, &manifest).await).unwrap();
    assert_eq!(
        after["spec"]["template"], before["spec"]["template"],
        "pod template unchanged: no rollout"
    );
    // Counted from here: a kube-apiserver bumps the generation of the re-apply
    // itself (before admission restores the template), not a PATCH by nudge.
    let patches = h.cluster.patch_counter("Deployment", "web").await;
    sentinel.quiesce(&h.nudge).await;
    assert_eq!(patches.count(&h.cluster).await, 0, "no PATCH follows");
    assert_eq!(
        h.cluster.workload("Deployment", "web").await["spec"]["template"],
        before["spec"]["template"]
    );
    h.nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_answers_400_and_the_server_keeps_serving() {
    let h = hooked("webhook-malformed-json", |_| {}).await;
    let ca = &h.bundle.ca_cert_pem;
    let (status, _) = post_review(h.addr, ca, b"{not json".to_vec()).await;
    assert_eq!(status, 400, "no uid to answer to");
    let (status, _) = post_review(h.addr, ca, br#"{"request": {}}"#.to_vec()).await;
    assert_eq!(status, 400);
    let (status, body) = post_review(
        h.addr,
        ca,
        br#"{"apiVersion": "admission.k8s.io/v1", "request": {"uid": "u-1"}}"#.to_vec(),
    )
    .await;
    assert_allowed_without_patch(status, &body, "u-1");
    h.nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_of_a_pod_is_allowed_without_patch() {
    let h = hooked("webhook-pod", |_| {}).await;
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": {"nudge.dev/auto": "true"}},
                     "spec": {"containers": [{"name": "c", "image": "x"}]}});
    let body = review("u-pod", ("", "v1", "Pod"), h.cluster.namespace(), pod);
    let (status, answer) = post_review(h.addr, &h.bundle.ca_cert_pem, body).await;
    assert_allowed_without_patch(status, &answer, "u-pod");
    h.nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_whose_object_cannot_be_parsed_is_allowed_without_patch() {
    let h = hooked("webhook-unparsable", |_| {}).await;
    let ns = h.cluster.namespace().to_owned();
    let objects = [
        deployment_json(&ns, "web", json!({"containers": "not a list"})),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": 42}),
        json!("a string"),
        Value::Null,
    ];
    for (i, object) in objects.into_iter().enumerate() {
        let uid = format!("u-{i}");
        let body = review(&uid, ("apps", "v1", "Deployment"), &ns, object);
        let (status, answer) = post_review(h.addr, &h.bundle.ca_cert_pem, body).await;
        assert_allowed_without_patch(status, &answer, &uid);
    }
    h.nudge.stop().await;
}

/// On the double only: reading the ConfigMap is made slow with injected latency.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_only_webhook_deadline_exceeded_is_allowed_without_patch() {
    let cluster = TestCluster::start_double_only("webhook-deadline").await;
    let h = hook(cluster, "webhook-deadline", |c| {
        c.webhook.observe_timeout = Duration::from_millis(300)
    })
    .await;
    // Reading the referenced ConfigMap takes longer than the deadline.
    h.cluster.put_configmap("slow-config", &[("a", "1")]).await;
    h.cluster
        .double()
        .unwrap()
        .set_latency(Duration::from_secs(3));
    let ns = h.cluster.namespace().to_owned();
    let body = review(
        "u-slow",
        ("apps", "v1", "Deployment"),
        &ns,
        deployment_json(&ns, "slow", pod_mounting_configmap("slow-config")),
    );
    let started = Instant::now();
    let (status, answer) = post_review(h.addr, &h.bundle.ca_cert_pem, body).await;
    let elapsed = started.elapsed();
    h.cluster.double().unwrap().set_latency(Duration::ZERO);
    assert_allowed_without_patch(status, &answer, "u-slow");
    assert!(
        elapsed < Duration::from_secs(2),
        "answered within the deadline, took {elapsed:?}"
    );
    h.nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_certificate_files_are_served_on_new_connections() {
    let h = hooked("webhook-rotation", |_| {}).await;
    let ca = h.bundle.ca_cert_pem.clone();
    assert_eq!(
        presented_certificate(h.addr, &ca).await,
        der_of(&h.bundle.cert_pem)
    );
    let rotated = local_bundle(Some(&h.bundle));
    assert_eq!(rotated.ca_cert_pem, ca, "same CA, new serving certificate");
    h.certs.write(&rotated);
    assert_eq!(
        presented_certificate(h.addr, &ca).await,
        der_of(&rotated.cert_pem)
    );
    // A half-written pair (key of another certificate) keeps the last good one.
    std::fs::write(h.certs.key(), &h.bundle.key_pem).unwrap();
    assert_eq!(
        presented_certificate(h.addr, &ca).await,
        der_of(&rotated.cert_pem)
    );
    h.nudge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_managed_certificate_is_created_once_for_two_replicas_and_patches_the_ca_bundle() {
    let cluster = TestCluster::start("webhook-self-managed").await;
    let name = format!("nudge-{}", cluster.namespace());
    // Registered before nudge runs, without a caBundle (and pointing nowhere yet:
    // the replicas' ports are not known).
    let _registration = register_webhook(&cluster, &name, "https://127.0.0.1:9/mutate", None).await;
    let mut config = cluster.nudge_config();
    config.webhook.enabled = true;
    config.webhook.bind = SocketAddr::from(([127, 0, 0, 1], 0));
    config.webhook.self_managed_certificate = true;
    config.webhook.configuration_name = name.clone();
    config.webhook.extra_names = vec!["127.0.0.1".to_owned()];
    let ((first, addr_a), (second, addr_b)) = tokio::join!(
        cluster.start_nudge_with_webhook(config.clone()),
        cluster.start_nudge_with_webhook(config.clone()),
    );

    let secrets: Api<Secret> = cluster.api();
    let secret = wait_for("the certificate Secret", WAIT, || async {
        secrets
            .get_opt(&config.webhook.secret_name)
            .await
            .ok()
            .flatten()
    })
    .await;
    let data = secret.data.clone().unwrap();
    let ca = String::from_utf8(data["ca.crt"].0.clone()).unwrap();
    let cert = String::from_utf8(data["tls.crt"].0.clone()).unwrap();
    let configurations: Api<MutatingWebhookConfiguration> = Api::all(cluster.client());
    let mut registered = wait_for("the caBundle patch", WAIT, || async {
        let c = configurations.get(&name).await.ok()?;
        let bundle = c
            .webhooks
            .as_ref()?
            .first()?
            .client_config
            .ca_bundle
            .clone()?;
        (bundle.0 == ca.as_bytes()).then_some(c)
    })
    .await;

    // Both replicas serve the one certificate.
    for addr in [addr_a, addr_b] {
        let served = wait_for("the replica to serve the certificate", WAIT, || async {
            let served =
                tokio::time::timeout(Duration::from_secs(2), certificate_if_served(addr, &ca))
                    .await
                    .ok()??;
            (served == der_of(&cert)).then_some(served)
        })
        .await;
        assert_eq!(served, der_of(&cert));
    }
    // One replica creates the Secret, the other reads it: the Secret first seen is
    // the one both serve, never replaced or rewritten since.
    let now = secrets.get(&config.webhook.secret_name).await.unwrap();
    assert_eq!(now.metadata.uid, secret.metadata.uid, "never replaced");
    assert_eq!(
        now.metadata.resource_version, secret.metadata.resource_version,
        "never rewritten"
    );
    if let Some(double) = cluster.double() {
        let created = double
            .requests()
            .iter()
            .filter(|r| {
                r.method == "POST"
                    && r.path.ends_with("/secrets")
                    && r.status == 201
                    && r.body_json().is_some_and(|b| {
                        b["metadata"]["name"] == config.webhook.secret_name.as_str()
                    })
            })
            .count();
        assert_eq!(
            created, 1,
            "one replica creates the Secret, the other reads it"
        );
    }

    // The apiserver reaches the webhook with that caBundle: workloads are stored stamped.
    let webhooks = registered.webhooks.as_mut().unwrap();
    webhooks[0].client_config.url = Some(format!("https://{addr_a}/mutate"));
    configurations
        .replace(&name, &PostParams::default(), &registered)
        .await
        .unwrap();
    wait_until_the_webhook_is_called(&cluster).await;
    cluster
        .auto_deployment("web", "app-config", &[("a", "1")])
        .await;
    let workload = cluster.workload("Deployment", "web").await;
    assert!(
        workload["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH].is_string(),
        "{workload}"
    );
    assert_eq!(
        workload["metadata"]["generation"], 1,
        "stamped when created"
    );
    first.stop().await;
    second.stop().await;
}

/// Snapshots (design §5e): a GitOps re-apply of the original manifest, which
/// points the template back at the live ConfigMap, keeps the copy the
/// template had: the webhook points it there again, and nothing rolls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reapplied_manifest_keeps_its_snapshot_copies_and_rolls_nothing() {
    let h = hooked("webhook-snapshot-reapply", |config| {
        config.engine.snapshots = nudge::config::SnapshotMode::OptIn;
    })
    .await;
    let sentinel = h.cluster.sentinel().await;
    h.cluster.put_configmap("app-config", &[("a", "1")]).await;
    let mut manifest = deployment_json(
        h.cluster.namespace(),
        "web",
        pod_mounting_configmap("app-config"),
    );
    manifest["metadata"]["annotations"]["nudge.dev/snapshot"] = json!("true");
    let api: Api<Deployment> = h.cluster.api();
    api.create(
        &PostParams::default(),
        &serde_json::from_value(manifest.clone()).unwrap(),
    )
    .await
    .unwrap();
    // Created on the live ConfigMap (no copy exists yet), then snapshotted.
    let before = wait_for("the template on a copy", WAIT, || async {
        let workload = h.cluster.workload("Deployment", "web").await;
        let name = workload["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"].clone();
        (name != "app-config").then_some(workload)
    })
    .await;
    sentinel.flush_workloads().await;

    let after = serde_json::to_value(replace_deployment(&api, &manifest).await).unwrap();
    assert_eq!(
        after["spec"]["template"], before["spec"]["template"],
        "the copy and its annotation kept: no rollout"
    );
    let patches = h.cluster.patch_counter("Deployment", "web").await;
    sentinel.quiesce(&h.nudge).await;
    assert_eq!(patches.count(&h.cluster).await, 0, "no PATCH follows");
    h.nudge.stop().await;
}
