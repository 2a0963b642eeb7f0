//! Mutating admission: the step between defaulting and validation where the
//! apiserver calls mutating webhooks.
//!
//! For every `MutatingWebhookConfiguration` in the store (by name), every webhook
//! whose `rules`, `namespaceSelector` and `objectSelector` match the request gets an
//! `admission.k8s.io/v1` `AdmissionReview` POSTed to `clientConfig.url` (with
//! `?timeout=<timeoutSeconds>s`, like the kube-apiserver), over HTTPS verified
//! against `clientConfig.caBundle` only. Its JSON patch is applied to the object.
//!
//! What follows the kube-apiserver 1.34 (`admission_review.json`):
//! - The review's `object` is the defaulted object without `uid`,
//!   `creationTimestamp` and `generation` (set by the server around admission);
//!   `oldObject` is the stored object on UPDATE (`null` on CREATE); `options` is
//!   `CreateOptions` / `UpdateOptions`; `name`, `namespace`, `kind`, `resource`,
//!   `requestKind`, `requestResource`, `dryRun`, `userInfo` are filled in.
//! - A webhook that cannot be called (connection, TLS, timeout, non-200, a
//!   response that is not a review for this uid) is skipped under
//!   `failurePolicy: Ignore`, and fails the request with 500 InternalError
//!   (`failed calling webhook ...`) under `Fail` (the default).
//! - A denial answers the webhook's status (at least 400) with `admission webhook
//!   "<name>" denied the request: <message>`.
//! - A patch that cannot be decoded or applied fails the whole request with 500
//!   InternalError **whatever the failure policy** (e.g. an `add` into a missing
//!   map: `add operation does not apply: doc is missing path: "<path>": missing value`).
//! - `reinvocationPolicy: IfNeeded` webhooks are called once more when a webhook
//!   after them changed the object.
//! - Generation: the caller bumps `metadata.generation` *before* admission, from
//!   the request, so a webhook that restores what the request dropped still leaves a
//!   bumped generation (as the transcript shows).
//!
//! Differences: only `clientConfig.url` is supported (a `service` reference cannot
//! be resolved here and counts as a failed call); `matchPolicy`, `matchConditions`
//! and `sideEffects` are not evaluated; objects are not defaulted again after the
//! webhooks ran.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::{Request, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Map, Value, json};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::ids;
use crate::managed::Subresource;
use crate::meta;
use crate::resources::{Family, MUTATING_WEBHOOKS, NAMESPACES, ResourceType};
use crate::server::State;
use crate::status::{ApiError, ApiResult};

/// The admission operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AdmissionOperation {
    /// CREATE (POST, or apply/PUT creating the object).
    Create,
    /// UPDATE (PUT, PATCH, apply).
    Update,
}

impl AdmissionOperation {
    fn as_str(self) -> &'static str {
        match self {
            Self::Create => "CREATE",
            Self::Update => "UPDATE",
        }
    }

    fn options_kind(self) -> &'static str {
        match self {
            Self::Create => "CreateOptions",
            Self::Update => "UpdateOptions",
        }
    }
}

/// Default `timeoutSeconds` of a webhook.
const DEFAULT_TIMEOUT_SECONDS: u64 = 10;
/// Largest webhook response read.
const MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;
/// Metadata the server sets around admission and leaves out of the review.
const SERVER_SET: [&str; 3] = ["uid", "creationTimestamp", "generation"];

/// One webhook selected for a request.
struct Selected {
    name: String,
    config: Value,
    reinvoke: bool,
}

/// Runs mutating admission on an object about to be written: calls every matching
/// webhook and applies its patch to `obj`.
pub(crate) async fn mutate(
    state: &State,
    rt: &ResourceType,
    op: AdmissionOperation,
    sub: Subresource,
    obj: &mut Value,
    old: Option<&Value>,
    dry_run: bool,
) -> ApiResult<()> {
    if rt.family == Family::MutatingWebhookConfiguration {
        return Ok(());
    }
    let webhooks = matching_webhooks(state, rt, op, sub, obj, old);
    if webhooks.is_empty() {
        return Ok(());
    }
    // Index of the last webhook that changed the object.
    let mut last_change: Option<usize> = None;
    for (i, webhook) in webhooks.iter().enumerate() {
        if call_and_patch(webhook, rt, op, sub, obj, old, dry_run).await? {
            last_change = Some(i);
        }
    }
    if let Some(changed_at) = last_change {
        for webhook in webhooks[..changed_at].iter().filter(|w| w.reinvoke) {
            call_and_patch(webhook, rt, op, sub, obj, old, dry_run).await?;
        }
    }
    Ok(())
}

fn matching_webhooks(
    state: &State,
    rt: &ResourceType,
    op: AdmissionOperation,
    sub: Subresource,
    obj: &Value,
    old: Option<&Value>,
) -> Vec<Selected> {
    let Ok((_, configs)) = state.store.snapshot(MUTATING_WEBHOOKS, "", None) else {
        return Vec::new();
    };
    let namespace_labels = namespace_labels(state, rt, obj);
    let mut selected = Vec::new();
    for (_, config) in configs {
        for webhook in config
            .get("webhooks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let rules = webhook.get("rules").and_then(Value::as_array);
            if !rules
                .into_iter()
                .flatten()
                .any(|rule| rule_matches(rule, rt, op, sub))
            {
                continue;
            }
            if rt.namespaced
                && !selector_matches(webhook.get("namespaceSelector"), &namespace_labels)
            {
                continue;
            }
            let labels = |o: &Value| labels_of(o);
            let object_selector = webhook.get("objectSelector");
            if !(selector_matches(object_selector, &labels(obj))
                || old.is_some_and(|o| selector_matches(object_selector, &labels(o))))
            {
                continue;
            }
            selected.push(Selected {
                name: webhook
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                reinvoke: webhook.get("reinvocationPolicy").and_then(Value::as_str)
                    == Some("IfNeeded"),
                config: webhook.clone(),
            });
        }
    }
    selected
}

fn namespace_labels(state: &State, rt: &ResourceType, obj: &Value) -> Map<String, Value> {
    if !rt.namespaced {
        return labels_of(obj);
    }
    state
        .store
        .get(NAMESPACES, &meta::store_key(None, meta::namespace(obj)))
        .map(|n| labels_of(&n))
        .unwrap_or_default()
}

fn labels_of(obj: &Value) -> Map<String, Value> {
    meta::metadata(obj)
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

fn list_matches(list: Option<&Value>, wanted: &str) -> bool {
    list.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .any(|v| v == "*" || v == wanted)
}

fn rule_matches(rule: &Value, rt: &ResourceType, op: AdmissionOperation, sub: Subresource) -> bool {
    let resource = match sub {
        Subresource::Main => rt.plural.to_string(),
        other => format!("{}/{}", rt.plural, other.name()),
    };
    let resource_ok = rule
        .get("resources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .any(|r| {
            r == resource
                || (r == "*" && sub == Subresource::Main)
                || r == "*/*"
                || (sub != Subresource::Main && r.strip_prefix("*/") == Some(sub.name()))
                || (r.strip_suffix("/*") == Some(rt.plural.as_str()) && sub != Subresource::Main)
        });
    let scope_ok = match rule.get("scope").and_then(Value::as_str).unwrap_or("*") {
        "Namespaced" => rt.namespaced,
        "Cluster" => !rt.namespaced,
        _ => true,
    };
    list_matches(rule.get("operations"), op.as_str())
        && list_matches(rule.get("apiGroups"), &rt.group)
        && list_matches(rule.get("apiVersions"), &rt.version)
        && resource_ok
        && scope_ok
}

/// A JSON `LabelSelector` (`matchLabels`, `matchExpressions`); absent or empty
/// matches everything.
fn selector_matches(selector: Option<&Value>, labels: &Map<String, Value>) -> bool {
    let Some(selector) = selector.filter(|s| !s.is_null()) else {
        return true;
    };
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let match_labels = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k) == v.as_str());
    let match_expressions = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e.get("key").and_then(Value::as_str).unwrap_or("");
            let values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            match e.get("operator").and_then(Value::as_str).unwrap_or("") {
                "In" => label(key).is_some_and(|v| values.contains(&v)),
                "NotIn" => label(key).is_none_or(|v| !values.contains(&v)),
                "Exists" => label(key).is_some(),
                "DoesNotExist" => label(key).is_none(),
                _ => false,
            }
        });
    match_labels && match_expressions
}

/// The review the apiserver sends for this request.
fn review(
    rt: &ResourceType,
    op: AdmissionOperation,
    sub: Subresource,
    obj: &Value,
    old: Option<&Value>,
    dry_run: bool,
) -> (String, Value) {
    let uid = ids::new_uid();
    let kind = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
    let resource = json!({"group": rt.group, "version": rt.version, "resource": rt.plural});
    let mut request = json!({
        "uid": uid,
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": meta::name(obj),
        "operation": op.as_str(),
        "userInfo": {
            "username": "admin",
            "uid": "admin",
            "groups": ["system:masters", "system:authenticated"],
        },
        "object": sent_object(obj),
        "oldObject": old.map_or(Value::Null, |o| crate::managed::expanded(o).into_owned()),
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": op.options_kind()},
    });
    if rt.namespaced {
        request["namespace"] = json!(meta::namespace(obj));
    }
    if sub != Subresource::Main {
        request["subResource"] = json!(sub.name());
        request["requestSubResource"] = json!(sub.name());
    }
    (
        uid,
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}),
    )
}

/// The object as the webhook sees it: without what the server sets around admission.
fn sent_object(obj: &Value) -> Value {
    let mut sent = crate::managed::expanded(obj).into_owned();
    if let Some(m) = sent.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in SERVER_SET {
            m.remove(k);
        }
    }
    sent
}

/// Calls one webhook and applies its patch; returns whether the object changed.
async fn call_and_patch(
    webhook: &Selected,
    rt: &ResourceType,
    op: AdmissionOperation,
    sub: Subresource,
    obj: &mut Value,
    old: Option<&Value>,
    dry_run: bool,
) -> ApiResult<bool> {
    let (uid, body) = review(rt, op, sub, obj, old, dry_run);
    let timeout = webhook
        .config
        .get("timeoutSeconds")
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_TIMEOUT_SECONDS);
    let client_config = webhook
        .config
        .get("clientConfig")
        .cloned()
        .unwrap_or_default();
    let response = match call(&client_config, &body, &uid, timeout).await {
        Ok(response) => response,
        Err(error) => {
            let ignore =
                webhook.config.get("failurePolicy").and_then(Value::as_str) == Some("Ignore");
            tracing::warn!(webhook = %webhook.name, %error, ignore, "calling webhook failed");
            if ignore {
                return Ok(false);
            }
            return Err(ApiError::internal(format!(
                "failed calling webhook \"{}\": {error}",
                webhook.name
            )));
        }
    };
    if response.get("allowed").and_then(Value::as_bool) != Some(true) {
        return Err(denied(&webhook.name, response.get("status")));
    }
    let Some(patch) = response.get("patch").and_then(Value::as_str) else {
        return Ok(false);
    };
    if response.get("patchType").and_then(Value::as_str) != Some("JSONPatch") {
        return Err(ApiError::internal(format!(
            "unsupported patch type {:?}",
            response.get("patchType")
        )));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .map_err(|e| ApiError::internal(format!("illegal base64 data: {e}")))?;
    let ops: json_patch::Patch =
        serde_json::from_slice(&bytes).map_err(|e| ApiError::internal(e.to_string()))?;
    let mut patched = sent_object(obj);
    json_patch::patch(&mut patched, &ops)
        .map_err(|e| ApiError::internal(go_patch_error(&ops, &e)))?;
    // The server-set fields come back from the original.
    for k in SERVER_SET {
        if let Some(v) = meta::metadata(obj).and_then(|m| m.get(k)).cloned() {
            meta::set_meta(&mut patched, k, v);
        }
    }
    let changed = patched != *crate::managed::expanded(obj);
    *obj = patched;
    Ok(changed)
}

/// The message of Go's `evanphx/json-patch` (what the apiserver uses) for a failed
/// operation.
fn go_patch_error(ops: &json_patch::Patch, error: &json_patch::PatchError) -> String {
    let op = ops.0.get(error.operation);
    let (name, path) = match op {
        Some(json_patch::PatchOperation::Add(o)) => ("add", o.path.to_string()),
        Some(json_patch::PatchOperation::Remove(o)) => ("remove", o.path.to_string()),
        Some(json_patch::PatchOperation::Replace(o)) => ("replace", o.path.to_string()),
        Some(json_patch::PatchOperation::Move(o)) => ("move", o.path.to_string()),
        Some(json_patch::PatchOperation::Copy(o)) => ("copy", o.path.to_string()),
        Some(json_patch::PatchOperation::Test(o)) => {
            return format!("testing value {} failed: test failed", o.path);
        }
        None => return error.to_string(),
    };
    format!("{name} operation does not apply: doc is missing path: \"{path}\": missing value")
}

/// The `Status` of a denial, as `webhookerrors.ToStatusErr` builds it.
fn denied(name: &str, status: Option<&Value>) -> ApiError {
    let status = status.cloned().unwrap_or_default();
    let code = status
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| *c >= 400)
        .unwrap_or(400);
    let by = format!("admission webhook \"{name}\" denied the request");
    let message = match (
        status
            .get("message")
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty()),
        status
            .get("reason")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty()),
    ) {
        (Some(m), _) => format!("{by}: {m}"),
        (None, Some(r)) => format!("{by}: {r}"),
        (None, None) => format!("{by} without explanation"),
    };
    ApiError {
        code,
        reason: "",
        message,
        details: None,
        retry_after: None,
    }
}

/// Why a webhook call failed (the failure policy decides what follows).
#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error("failed to call webhook: {0}")]
    Call(String),
    #[error("received invalid webhook response: {0}")]
    Response(String),
}

/// POSTs `body` to the webhook and returns its `response`.
async fn call(
    client_config: &Value,
    body: &Value,
    uid: &str,
    timeout_secs: u64,
) -> Result<Value, CallError> {
    let url = client_config
        .get("url")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            CallError::Call("only clientConfig.url is supported by the double".into())
        })?;
    let with_timeout = format!(
        "{url}{}timeout={timeout_secs}s",
        if url.contains('?') { "&" } else { "?" }
    );
    let post = |e: String| CallError::Call(format!("Post \"{with_timeout}\": {e}"));
    let target = Target::parse(url).ok_or_else(|| post("unsupported URL".into()))?;
    let ca = client_config
        .get("caBundle")
        .and_then(Value::as_str)
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .unwrap_or_default();
    let exchange = async {
        let connector = connector(&ca)?;
        let tcp = TcpStream::connect((target.host.as_str(), target.port))
            .await
            .map_err(|e| e.to_string())?;
        let tls = connector
            .connect(target.server_name.clone(), tcp)
            .await
            .map_err(|e| format!("tls: {e}"))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let path = format!(
            "{}{}timeout={timeout_secs}s",
            target.path,
            if target.path.contains('?') { "&" } else { "?" }
        );
        let request = Request::post(path)
            .header(header::HOST, target.authority.as_str())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, */*")
            .body(Full::new(Bytes::from(
                serde_json::to_vec(body).unwrap_or_default(),
            )))
            .map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let bytes = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok::<_, String>((status, bytes))
    };
    let (status, bytes) =
        match tokio::time::timeout(Duration::from_secs(timeout_secs), exchange).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(post(e)),
            Err(_) => return Err(post("context deadline exceeded".into())),
        };
    if !status.is_success() {
        return Err(CallError::Call(format!(
            "expected status 200, got {}: {}",
            status.as_u16(),
            String::from_utf8_lossy(&bytes)
        )));
    }
    let review: Value =
        serde_json::from_slice(&bytes).map_err(|e| CallError::Response(e.to_string()))?;
    let response = review
        .get("response")
        .cloned()
        .ok_or_else(|| CallError::Response("response is nil".into()))?;
    let got = response.get("uid").and_then(Value::as_str).unwrap_or("");
    if got != uid {
        return Err(CallError::Response(format!(
            "expected response.uid=\"{uid}\", got \"{got}\""
        )));
    }
    Ok(response)
}

/// A TLS connector trusting only the certificates in `ca_pem`.
fn connector(ca_pem: &[u8]) -> Result<TlsConnector, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        let cert = cert.map_err(|e| format!("caBundle: {e}"))?;
        roots.add(cert).map_err(|e| format!("caBundle: {e}"))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

/// Where an `https://` URL points.
struct Target {
    host: String,
    port: u16,
    authority: String,
    path: String,
    server_name: ServerName<'static>,
}

impl Target {
    fn parse(url: &str) -> Option<Self> {
        let rest = url.strip_prefix("https://")?;
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let path = if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, p) = v6.split_once(']')?;
            (h.to_string(), p.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (authority.to_string(), None),
            }
        };
        let port = match port {
            Some(p) => p.parse().ok()?,
            None => 443,
        };
        let server_name = match host.parse::<IpAddr>() {
            Ok(ip) => ServerName::IpAddress(ip.into()),
            Err(_) => ServerName::try_from(host.clone()).ok()?,
        };
        Some(Self {
            host,
            port,
            authority: authority.to_string(),
            path,
            server_name,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_into_host_port_and_path() {
        let t = Target::parse("https://127.0.0.1:18443/mutate").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("127.0.0.1", 18443, "/mutate")
        );
        let t = Target::parse("https://[::1]/x?y=1").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("::1", 443, "/x?y=1")
        );
        assert!(Target::parse("http://127.0.0.1/").is_none());
    }

    #[test]
    fn selectors_follow_label_selector_rules() {
        let labels: Map<String, Value> =
            serde_json::from_value(json!({"a": "1", "b": "2"})).unwrap();
        assert!(selector_matches(None, &labels));
        assert!(selector_matches(Some(&json!({})), &labels));
        assert!(selector_matches(
            Some(&json!({"matchLabels": {"a": "1"}})),
            &labels
        ));
        assert!(!selector_matches(
            Some(&json!({"matchLabels": {"a": "2"}})),
            &labels
        ));
        assert!(selector_matches(
            Some(
                &json!({"matchExpressions": [{"key": "c", "operator": "DoesNotExist"}, {"key": "b", "operator": "NotIn", "values": ["3"]}]})
            ),
            &labels
        ));
        assert!(!selector_matches(
            Some(
                &json!({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]})
            ),
            &labels
        ));
    }

    #[test]
    fn rules_match_operations_groups_resources_and_subresources() {
        let deployments = &crate::resources::builtin(crate::resources::DEPLOYMENTS);
        let rule = json!({"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                          "resources": ["deployments"], "scope": "Namespaced"});
        assert!(rule_matches(
            &rule,
            deployments,
            AdmissionOperation::Create,
            Subresource::Main
        ));
        assert!(!rule_matches(
            &rule,
            deployments,
            AdmissionOperation::Create,
            Subresource::Status
        ));
        let any = json!({"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*/*"]});
        assert!(rule_matches(
            &any,
            deployments,
            AdmissionOperation::Update,
            Subresource::Status
        ));
    }

    #[test]
    fn failed_add_reads_like_the_apiserver() {
        let ops: json_patch::Patch = serde_json::from_value(json!([
            {"op": "add", "path": "/spec/template/metadata/annotations/nudge.dev~1config-hash", "value": "x"}
        ])).unwrap();
        let mut doc = json!({"spec": {"template": {"metadata": {}}}});
        let error = json_patch::patch(&mut doc, &ops).unwrap_err();
        assert_eq!(
            go_patch_error(&ops, &error),
            "add operation does not apply: doc is missing path: \"/spec/template/metadata/annotations/nudge.dev~1config-hash\": missing value"
        );
    }
}
