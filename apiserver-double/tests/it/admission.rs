//! Mutating webhooks: the double calls them like the kube-apiserver does.
//! `admission_review.json` (recorded from kube-apiserver 1.34) is replayed
//! against the double with a fake webhook that answers the recorded patches.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{Http, wait_for};
use apiserver_double::ApiServerDouble;
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;

const TRANSCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/transcripts/admission_review.json"
);

fn transcript() -> Value {
    let text = std::fs::read_to_string(TRANSCRIPT).expect("read admission_review.json");
    serde_json::from_str(&text).expect("admission_review.json is JSON")
}

/// What the fake webhook answers to one review.
type Answer = Arc<dyn Fn(&Value) -> (u16, Value) + Send + Sync>;

/// An HTTPS webhook on 127.0.0.1 with its own CA, recording every review.
struct FakeWebhook {
    addr: SocketAddr,
    ca_pem: String,
    received: Arc<Mutex<Vec<(String, Value)>>>,
}

impl FakeWebhook {
    async fn start(answer: Answer, delay: Duration) -> Self {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let recorded = received.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                let answer = answer.clone();
                let recorded = recorded.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let answer = answer.clone();
                        let recorded = recorded.clone();
                        async move {
                            let path = req.uri().to_string();
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let review: Value = serde_json::from_slice(&body).unwrap();
                            recorded.lock().unwrap().push((path, review.clone()));
                            tokio::time::sleep(delay).await;
                            let (status, body) = answer(&review);
                            let mut resp = http::Response::new(Full::new(Bytes::from(
                                serde_json::to_vec(&body).unwrap(),
                            )));
                            *resp.status_mut() = http::StatusCode::from_u16(status).unwrap();
                            Ok::<_, std::convert::Infallible>(resp)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        Self {
            addr,
            ca_pem: ca_cert.pem(),
            received,
        }
    }

    /// Answers every review with `allowed: true` and `patch` (none when `None`).
    fn patching(patch: Option<Value>) -> Answer {
        Arc::new(move |review: &Value| {
            let mut response = json!({"uid": review["request"]["uid"], "allowed": true});
            if let Some(patch) = &patch {
                response["patchType"] = json!("JSONPatch");
                response["patch"] = json!(
                    base64::engine::general_purpose::STANDARD
                        .encode(serde_json::to_vec(patch).unwrap())
                );
            }
            (
                200,
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
            )
        })
    }

    fn received(&self) -> Vec<(String, Value)> {
        self.received.lock().unwrap().clone()
    }

    /// The transcript's registration, pointed at this webhook.
    fn registration(&self, failure_policy: &str, timeout_seconds: u64) -> Value {
        let mut body = transcript()["registration"]["request"]["body"].clone();
        let hook = &mut body["webhooks"][0];
        hook["clientConfig"]["url"] = json!(format!("https://{}/mutate", self.addr));
        hook["clientConfig"]["caBundle"] =
            json!(base64::engine::general_purpose::STANDARD.encode(&self.ca_pem));
        hook["failurePolicy"] = json!(failure_policy);
        hook["timeoutSeconds"] = json!(timeout_seconds);
        body
    }
}

async fn setup(
    webhook: &FakeWebhook,
    failure_policy: &str,
    timeout_seconds: u64,
) -> (ApiServerDouble, Http) {
    let api = ApiServerDouble::start().await.unwrap();
    let http = Http::new(&api);
    let ns = http
        .post(
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "transcripts"}}),
        )
        .await;
    assert_eq!(ns.status, 201);
    let reg = http
        .post(
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
            &webhook.registration(failure_policy, timeout_seconds),
        )
        .await;
    assert_eq!(reg.status, 201, "{}", String::from_utf8_lossy(&reg.body));
    (api, http)
}

const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/transcripts/deployments";

fn sorted_keys(v: &Value) -> Vec<String> {
    let mut keys: Vec<String> = v
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    keys.sort();
    keys
}

#[tokio::test]
async fn patch_adding_into_a_missing_map_fails_the_create_with_500_even_under_ignore() {
    let t = transcript();
    let patch = t["webhook_received"][0]["patch_answered"].clone();
    let webhook = FakeWebhook::start(FakeWebhook::patching(Some(patch)), Duration::ZERO).await;
    let (_api, http) = setup(&webhook, "Ignore", 5).await;
    let resp = http
        .post(DEPLOYMENTS, &t["naive_create"]["request"]["body"])
        .await;
    assert_eq!(resp.status, 500);
    assert_eq!(resp.json(), t["naive_create"]["response"]["body"]);
    let get = http.get(&format!("{DEPLOYMENTS}/naive")).await;
    assert_eq!(get.status, 404, "nothing stored");
}

#[tokio::test]
async fn create_and_reapply_follow_the_transcript() {
    let t = transcript();
    let patch = t["webhook_received"][1]["patch_answered"].clone();
    let webhook = FakeWebhook::start(FakeWebhook::patching(Some(patch)), Duration::ZERO).await;
    let (_api, http) = setup(&webhook, "Ignore", 5).await;

    // (2) create: the whole map is added; stored with the annotation.
    let created = http
        .post(DEPLOYMENTS, &t["create"]["request"]["body"])
        .await;
    assert_eq!(
        created.status,
        201,
        "{}",
        String::from_utf8_lossy(&created.body)
    );
    let created = created.json();
    assert_eq!(
        created["spec"]["template"]["metadata"]["annotations"],
        t["create"]["response"]["body"]["spec"]["template"]["metadata"]["annotations"]
    );
    assert_eq!(created["metadata"]["generation"], 1);

    // The recorded re-apply came after kube-controller-manager's writes (its
    // oldObject carries their status and revision annotation): wait until it
    // is done (its pod reported: nothing more to write before the progress
    // deadline) and send the resourceVersion it left.
    let path = format!("{DEPLOYMENTS}/hooked");
    let observed = wait_for(
        "kube-controller-manager to be done with hooked",
        Duration::from_secs(10),
        || async {
            let live = http.get(&path).await.json();
            let done =
                live["status"]["observedGeneration"] == 1 && live["status"]["updatedReplicas"] == 1;
            done.then_some(live)
        },
    )
    .await;
    assert_eq!(
        observed["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );

    // (3) re-apply of the original manifest: restored, template unchanged. The
    // generation is bumped: the manifest drops the revision annotation from the
    // Deployment's own metadata (deploymentStrategy.PrepareForUpdate bumps it on
    // annotation changes, after admission).
    // The controller manager may still be writing status (the ReplicaSet's
    // pods counted): a 409 is sent again with the version it left, as a
    // client would.
    let mut body = t["update"]["request"]["body"].clone();
    body["metadata"]["resourceVersion"] = observed["metadata"]["resourceVersion"].clone();
    let mut updated = http.put(&path, &body).await;
    for _ in 0..5 {
        if updated.status != 409 {
            break;
        }
        let live = http.get(&path).await.json();
        body["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"].clone();
        updated = http.put(&path, &body).await;
    }
    assert_eq!(
        updated.status,
        200,
        "{}",
        String::from_utf8_lossy(&updated.body)
    );
    let updated = updated.json();
    assert_eq!(updated["spec"]["template"], created["spec"]["template"]);
    assert_eq!(updated["metadata"]["generation"], 2);
    assert!(updated["metadata"].get("annotations").is_none());
    // kube-controller-manager puts its annotation back; still one ReplicaSet.
    wait_for(
        "the revision annotation back",
        Duration::from_secs(10),
        || async {
            let live = http.get(&path).await.json();
            (live["status"]["observedGeneration"] == 2
                && live["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1")
                .then_some(())
        },
    )
    .await;
    let replica_sets = http
        .get("/apis/apps/v1/namespaces/transcripts/replicasets")
        .await
        .json();
    assert_eq!(replica_sets["items"].as_array().map(Vec::len), Some(1));

    // What the webhook received has the recorded shape.
    let received = webhook.received();
    assert_eq!(received.len(), 2);
    for ((path, review), recorded) in received
        .iter()
        .zip(&t["webhook_received"].as_array().unwrap()[1..])
    {
        assert_eq!(path, recorded["path"].as_str().unwrap());
        let (got, want) = (&review["request"], &recorded["review"]["request"]);
        assert_eq!(review["apiVersion"], recorded["review"]["apiVersion"]);
        assert_eq!(review["kind"], recorded["review"]["kind"]);
        assert_eq!(sorted_keys(got), sorted_keys(want));
        for key in [
            "kind",
            "resource",
            "requestKind",
            "requestResource",
            "operation",
            "options",
            "name",
            "namespace",
            "dryRun",
        ] {
            assert_eq!(got[key], want[key], "request.{key}");
        }
        assert_eq!(got["oldObject"].is_null(), want["oldObject"].is_null());
        for server_set in ["uid", "creationTimestamp", "generation"] {
            assert!(
                got["object"]["metadata"].get(server_set).is_none(),
                "object.metadata.{server_set} is set after admission"
            );
        }
        assert_eq!(
            got["object"]["spec"], want["object"]["spec"],
            "defaults applied before admission"
        );
        assert_eq!(got["object"]["status"], json!({}));
    }
    let old = &received[1].1["request"]["oldObject"];
    assert_eq!(
        old["spec"]["template"]["metadata"]["annotations"]["nudge.dev/config-hash"],
        "sha256-from-webhook"
    );
    assert_eq!(old["metadata"]["generation"], 1);
    let recorded_old = &t["webhook_received"][2]["review"]["request"]["oldObject"];
    assert_eq!(
        old["metadata"]["annotations"],
        recorded_old["metadata"]["annotations"]
    );
    for count in ["observedGeneration", "unavailableReplicas"] {
        assert_eq!(
            old["status"][count], recorded_old["status"][count],
            "{count}"
        );
    }
    let condition_types = |status: &Value| {
        let mut types: Vec<String> = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| c["type"].as_str().unwrap_or("").to_string())
            .collect();
        types.sort();
        types
    };
    assert_eq!(
        condition_types(&old["status"]),
        condition_types(&recorded_old["status"])
    );
}

/// The apiserver's update handler runs mutating admission among the
/// `UpdatedObject` transformers and the strategy's `PrepareForUpdate` after
/// them: the webhook reviews the object as sent (the recorded update's
/// `object.status` is `{}` while its `oldObject` has a status), and the
/// stored status is kept all the same.
#[tokio::test]
async fn an_update_is_reviewed_as_sent_and_keeps_the_stored_status() {
    let t = transcript();
    let webhook = FakeWebhook::start(FakeWebhook::patching(None), Duration::ZERO).await;
    let (_api, http) = setup(&webhook, "Ignore", 5).await;
    let path = format!("{DEPLOYMENTS}/hooked");
    let created = http
        .post(DEPLOYMENTS, &t["create"]["request"]["body"])
        .await;
    assert_eq!(
        created.status,
        201,
        "{}",
        String::from_utf8_lossy(&created.body)
    );
    let status = json!({"status": {"observedGeneration": 1, "unavailableReplicas": 1}});
    let r = http
        .patch(
            &format!("{path}/status"),
            "application/merge-patch+json",
            &status.to_string(),
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));

    let mut body = t["update"]["request"]["body"].clone();
    body["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    let updated = http.put(&path, &body).await;
    assert_eq!(
        updated.status,
        200,
        "{}",
        String::from_utf8_lossy(&updated.body)
    );
    assert_eq!(
        updated.json()["status"]["unavailableReplicas"],
        1,
        "the stored status is kept"
    );

    let (_, review) = webhook
        .received()
        .last()
        .cloned()
        .expect("the update reviewed");
    assert_eq!(review["request"]["operation"], "UPDATE");
    assert_eq!(
        review["request"]["object"]["status"],
        t["webhook_received"][2]["review"]["request"]["object"]["status"]
    );
    assert_eq!(review["request"]["object"]["status"], json!({}));
    assert_eq!(
        review["request"]["oldObject"]["status"]["unavailableReplicas"],
        1
    );
}

#[tokio::test]
async fn unreachable_webhook_is_ignored_or_fails_the_request_by_policy() {
    let webhook = FakeWebhook::start(FakeWebhook::patching(None), Duration::ZERO).await;
    let mut dead = webhook.registration("Ignore", 2);
    // Nothing listens on port 9 of 127.0.0.1.
    dead["webhooks"][0]["clientConfig"]["url"] = json!("https://127.0.0.1:9/mutate");
    let t = transcript();
    for (policy, expected) in [("Ignore", 201), ("Fail", 500)] {
        let api = ApiServerDouble::start().await.unwrap();
        let http = Http::new(&api);
        http.post(
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "transcripts"}}),
        )
        .await;
        dead["webhooks"][0]["failurePolicy"] = json!(policy);
        http.post(
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
            &dead,
        )
        .await;
        let resp = http
            .post(DEPLOYMENTS, &t["create"]["request"]["body"])
            .await;
        assert_eq!(
            resp.status,
            expected,
            "{policy}: {}",
            String::from_utf8_lossy(&resp.body)
        );
        if expected == 500 {
            let status = resp.json();
            assert_eq!(status["reason"], "InternalError");
            let message = status["message"].as_str().unwrap();
            assert!(message.starts_with("Internal error occurred: failed calling webhook \"stamp.nudge.dev\": failed to call webhook: Post \"https://127.0.0.1:9/mutate?timeout=2s\""), "{message}");
        }
    }
}

#[tokio::test]
async fn slow_webhook_times_out_after_timeout_seconds() {
    let webhook = FakeWebhook::start(FakeWebhook::patching(None), Duration::from_secs(5)).await;
    let (_api, http) = setup(&webhook, "Ignore", 1).await;
    let started = Instant::now();
    let resp = http
        .post(DEPLOYMENTS, &transcript()["create"]["request"]["body"])
        .await;
    assert_eq!(resp.status, 201);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert!(
        resp.json()["spec"]["template"]["metadata"]
            .get("annotations")
            .is_none()
    );
}

#[tokio::test]
async fn certificate_not_signed_by_the_ca_bundle_is_a_failed_call() {
    let webhook = FakeWebhook::start(
        FakeWebhook::patching(Some(json!([
            {"op": "add", "path": "/metadata/labels", "value": {"x": "y"}}
        ]))),
        Duration::ZERO,
    )
    .await;
    let other = FakeWebhook::start(FakeWebhook::patching(None), Duration::ZERO).await;
    let api = ApiServerDouble::start().await.unwrap();
    let http = Http::new(&api);
    http.post(
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "transcripts"}}),
    )
    .await;
    let mut reg = webhook.registration("Fail", 2);
    reg["webhooks"][0]["clientConfig"]["caBundle"] =
        json!(base64::engine::general_purpose::STANDARD.encode(&other.ca_pem));
    http.post(
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        &reg,
    )
    .await;
    let resp = http
        .post(DEPLOYMENTS, &transcript()["create"]["request"]["body"])
        .await;
    assert_eq!(resp.status, 500);
    assert!(
        webhook.received().is_empty(),
        "no review goes to an unverified server"
    );
}

#[tokio::test]
async fn denial_answers_the_webhook_message() {
    let deny: Answer = Arc::new(|review: &Value| {
        (
            200,
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
            "uid": review["request"]["uid"], "allowed": false, "status": {"message": "no thanks", "code": 403}}}),
        )
    });
    let webhook = FakeWebhook::start(deny, Duration::ZERO).await;
    let (_api, http) = setup(&webhook, "Ignore", 5).await;
    let resp = http
        .post(DEPLOYMENTS, &transcript()["create"]["request"]["body"])
        .await;
    assert_eq!(resp.status, 403);
    assert_eq!(
        resp.json()["message"],
        "admission webhook \"stamp.nudge.dev\" denied the request: no thanks"
    );
}

#[tokio::test]
async fn objects_outside_the_rules_or_selectors_are_not_sent() {
    let webhook = FakeWebhook::start(FakeWebhook::patching(None), Duration::ZERO).await;
    let (_api, http) = setup(&webhook, "Fail", 5).await;
    // ConfigMaps are not in the rules.
    let cm = http
        .post(
            "/api/v1/namespaces/transcripts/configmaps",
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
        )
        .await;
    assert_eq!(cm.status, 201);
    // The namespaceSelector only matches `transcripts`.
    let resp = http
        .post("/apis/apps/v1/namespaces/default/deployments", &{
            let mut body = transcript()["create"]["request"]["body"].clone();
            body["metadata"]["namespace"] = json!("default");
            body
        })
        .await;
    assert_eq!(resp.status, 201);
    assert!(webhook.received().is_empty());
}

/// A registration sending CREATEs of Jobs and Rollouts (any version) to `webhook`.
fn batch_and_rollout_registration(webhook: &FakeWebhook) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "label-everything"},
        "webhooks": [{
            "name": "label.example.com",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "clientConfig": {
                "url": format!("https://{}/mutate", webhook.addr),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(&webhook.ca_pem)
            },
            "rules": [
                {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE"],
                 "resources": ["jobs", "cronjobs"]},
                {"apiGroups": ["argoproj.io"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
                 "resources": ["rollouts"]}
            ]
        }]
    })
}

#[tokio::test]
async fn jobs_and_custom_resources_go_through_matching_webhooks() {
    let patch = json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}]);
    let webhook = FakeWebhook::start(FakeWebhook::patching(Some(patch)), Duration::ZERO).await;
    let api = ApiServerDouble::start().await.unwrap();
    let http = Http::new(&api);
    let r = http
        .post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &crate::support::crds::rollout_crd(),
        )
        .await;
    assert_eq!(r.status, 201);
    let r = http
        .post(
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
            &batch_and_rollout_registration(&webhook),
        )
        .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));

    let job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "pi", "labels": {"app": "pi"}},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "pi", "image": "perl:5.34"}]}}}});
    let r = http
        .post("/apis/batch/v1/namespaces/default/jobs", &job)
        .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["metadata"]["labels"]["mutated"], "yes");

    let rollouts = "/apis/argoproj.io/v1alpha1/namespaces/default/rollouts";
    let r = http
        .post(rollouts, &crate::support::crds::rollout("web", "app:1"))
        .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["metadata"]["labels"]["mutated"], "yes");
    let r = http
        .patch(
            &format!("{rollouts}/web?fieldManager=ci"),
            "application/apply-patch+yaml",
            &json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
                "metadata": {"name": "web", "labels": {"app": "web", "mutated": "no"}}})
            .to_string(),
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));

    let cm = http
        .post(
            "/api/v1/namespaces/default/configmaps",
            &json!({"metadata": {"name": "c", "labels": {"a": "b"}}}),
        )
        .await;
    assert!(cm.json()["metadata"]["labels"].get("mutated").is_none());

    let reviews: Vec<(String, String, String, String)> = webhook
        .received()
        .iter()
        .map(|(_, r)| {
            let req = &r["request"];
            (
                req["kind"]["group"].as_str().unwrap().into(),
                req["kind"]["kind"].as_str().unwrap().into(),
                req["resource"]["resource"].as_str().unwrap().into(),
                req["operation"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        reviews,
        [
            ("batch".into(), "Job".into(), "jobs".into(), "CREATE".into()),
            (
                "argoproj.io".into(),
                "Rollout".into(),
                "rollouts".into(),
                "CREATE".into()
            ),
            (
                "argoproj.io".into(),
                "Rollout".into(),
                "rollouts".into(),
                "UPDATE".into()
            ),
        ]
    );
    let rollout_review = &webhook.received()[1].1["request"];
    assert_eq!(rollout_review["kind"]["version"], "v1alpha1");
    assert_eq!(rollout_review["namespace"], "default");
    assert_eq!(rollout_review["object"]["spec"]["revisionHistoryLimit"], 10);
}
