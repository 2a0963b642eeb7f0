//! The admission handler: an `AdmissionReview` in, an `AdmissionReview` out.
//!
//! It computes the desired stamp with the controller's own code
//! ([`annotations::dependencies`] → [`stamp::desired`]) over the engine's shared
//! [`FingerprintStore`], reads what the store lacks straight from the sources
//! ([`Source::observe`]) within a deadline, and turns the result into a JSON patch
//! with the pure [`admission_patch`]. Observations read here are *not* written into
//! the store: the engine owns tracking, and an observation of something nobody
//! tracks yet would never be refreshed.
//!
//! It never denies. Every answer is `allowed: true`; malformed reviews, other kinds,
//! timeouts and internal errors answer without a patch (see [`ReviewResult`]). The
//! one exception is a body with no `request.uid` to answer to (not JSON, not a
//! review): that gets HTTP 400, which the kube-apiserver treats as a failed webhook
//! call, so `failurePolicy: Ignore` admits the request unchanged (and `Fail` would
//! reject it — another reason the manifests use `Ignore`). A real apiserver never
//! sends such a body.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use base64::Engine as _;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use serde_json::{Value, json};
use tracing::Instrument;

use super::metrics::{ReviewResult, WebhookCounters};
use super::patch::{PatchInput, PatchOp, admission_patch};
use crate::annotations::{self, AnnotationScheme};
use crate::engine::Engine;
use crate::fingerprint::Observation;
use crate::model::{SourceCatalog, SourceName, Tracked, Workload, WorkloadKind};
use crate::sources::Source;
use crate::stamp::{self, FingerprintLookup, FingerprintStore};
use crate::targets::to_workload;

/// The AdmissionReview API version nudge answers by default.
const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";
/// Time kept back from the apiserver's `?timeout=` for answering.
const ANSWER_MARGIN: Duration = Duration::from_millis(500);
/// Extra time after the observe deadline before the whole review is abandoned.
const HARD_DEADLINE_SLACK: Duration = Duration::from_secs(1);

/// How the admission handler behaves.
#[derive(Debug, Clone)]
pub struct AdmissionSettings {
    /// nudge's annotation names.
    pub scheme: AnnotationScheme,
    /// `engine.stamp_on_delete`: stamp an absent required input as absent.
    pub stamp_on_delete: bool,
    /// Namespaces nudge manages. Workloads elsewhere are skipped, since the
    /// controller would never maintain a stamp written there.
    pub scope: crate::scope::NamespaceScope,
    /// Total time for reading inputs the fingerprint store does not have yet.
    pub observe_timeout: Duration,
}

/// The answer to one review: HTTP status, JSON body, and how it is counted.
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewAnswer {
    /// HTTP status: 200, or 400 when there is no uid to answer to.
    pub status: u16,
    /// The response body (an `AdmissionReview`, or a `Status` with a 400).
    pub body: Value,
    /// How the review ended.
    pub result: ReviewResult,
}

/// The admission handler. Cheap to share (`Arc`); one per process.
pub struct Admission {
    settings: AdmissionSettings,
    catalog: SourceCatalog,
    sources: BTreeMap<SourceName, Arc<dyn Source>>,
    fingerprints: Arc<RwLock<FingerprintStore>>,
    counters: Arc<WebhookCounters>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("settings", &self.settings)
            .field("sources", &self.sources.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// What the review is about, once parsed.
struct Request {
    operation: String,
    kind: Option<WorkloadKind>,
    namespace: String,
    name: String,
    object: Option<Value>,
    old_object: Option<Value>,
    subresource: String,
}

/// The outcome of deciding on a request.
struct Decision {
    ops: Vec<PatchOp>,
    result: ReviewResult,
}

impl Decision {
    fn without_patch(result: ReviewResult) -> Self {
        Self {
            ops: Vec::new(),
            result,
        }
    }
}

// === impl Admission ===

impl Admission {
    /// A handler sharing `engine`'s sources and fingerprint store.
    pub fn new(
        engine: &Engine,
        settings: AdmissionSettings,
        counters: Arc<WebhookCounters>,
    ) -> Self {
        Self::from_parts(
            settings,
            engine.catalog(),
            engine.sources(),
            engine.fingerprints(),
            counters,
        )
    }

    /// A handler over explicit parts (for embedding without an [`Engine`], and tests).
    pub fn from_parts(
        settings: AdmissionSettings,
        catalog: SourceCatalog,
        sources: BTreeMap<SourceName, Arc<dyn Source>>,
        fingerprints: Arc<RwLock<FingerprintStore>>,
        counters: Arc<WebhookCounters>,
    ) -> Self {
        Self {
            settings,
            catalog,
            sources,
            fingerprints,
            counters,
        }
    }

    /// The counters this handler updates.
    pub fn counters(&self) -> &Arc<WebhookCounters> {
        &self.counters
    }

    /// Answers one review body. `apiserver_timeout` is the `?timeout=` the apiserver
    /// sent, if any; the answer comes before it. Never panics, never denies.
    pub async fn review(
        self: &Arc<Self>,
        body: &[u8],
        apiserver_timeout: Option<Duration>,
    ) -> ReviewAnswer {
        let answer = self.answer(body, apiserver_timeout).await;
        self.counters.record(answer.result);
        answer
    }

    async fn answer(
        self: &Arc<Self>,
        body: &[u8],
        apiserver_timeout: Option<Duration>,
    ) -> ReviewAnswer {
        let review: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(error) => {
                tracing::warn!(%error, "admission body is not JSON");
                return bad_request("the body is not JSON");
            }
        };
        let Some(uid) = review
            .pointer("/request/uid")
            .and_then(Value::as_str)
            .filter(|u| !u.is_empty())
            .map(str::to_owned)
        else {
            tracing::warn!("admission body has no request.uid");
            return bad_request("the body is not an AdmissionReview with request.uid");
        };
        let api_version = match review.get("apiVersion").and_then(Value::as_str) {
            Some(v @ "admission.k8s.io/v1beta1") => v.to_owned(),
            _ => REVIEW_API_VERSION.to_owned(),
        };
        let request = parse_request(review);
        let span = tracing::info_span!(
            "admission",
            uid = %uid,
            operation = %request.operation,
            kind = request.kind.map_or("other", WorkloadKind::as_str),
            namespace = %request.namespace,
            name = %request.name,
        );
        let budget = match apiserver_timeout {
            Some(t) => self
                .settings
                .observe_timeout
                .min(t.saturating_sub(ANSWER_MARGIN)),
            None => self.settings.observe_timeout,
        };
        let this = self.clone();
        // A task of its own: a panic (a bug) becomes an `error` answer, not a dropped
        // connection; the hard deadline bounds everything, whatever hangs.
        let task = tokio::spawn(
            async move { this.decide(request, budget).await }.instrument(span.clone()),
        );
        let decision = match tokio::time::timeout(budget + HARD_DEADLINE_SLACK, task).await {
            Ok(Ok(decision)) => decision,
            Ok(Err(error)) => {
                span.in_scope(
                    || tracing::error!(%error, "admission task failed; allowing without patch"),
                );
                Decision::without_patch(ReviewResult::Error)
            }
            Err(_) => {
                span.in_scope(|| {
                    tracing::warn!("admission review timed out; allowing without patch")
                });
                Decision::without_patch(ReviewResult::Timeout)
            }
        };
        span.in_scope(|| {
            tracing::debug!(
                result = decision.result.as_str(),
                ops = decision.ops.len(),
                "answered"
            )
        });
        allowed(&api_version, &uid, &decision.ops, decision.result)
    }

    async fn decide(&self, request: Request, budget: Duration) -> Decision {
        let Some(kind) = request.kind else {
            return Decision::without_patch(ReviewResult::Skipped);
        };
        if !matches!(request.operation.as_str(), "CREATE" | "UPDATE")
            || !request.subresource.is_empty()
        {
            return Decision::without_patch(ReviewResult::Skipped);
        }
        if !self.settings.scope.contains(&request.namespace) {
            return Decision::without_patch(ReviewResult::Skipped);
        }
        let Some(object) = request.object.as_ref().filter(|o| o.is_object()) else {
            tracing::warn!("admission request has no object");
            return Decision::without_patch(ReviewResult::Malformed);
        };
        let workload = match parse_workload(kind, object, &request.namespace, &request.name) {
            Ok(w) => w,
            Err(error) => {
                tracing::warn!(%error, "cannot parse the object under review");
                return Decision::without_patch(ReviewResult::Malformed);
            }
        };
        let deps = annotations::dependencies(&workload, &self.settings.scheme, &self.catalog);
        if deps.stamps.is_empty() {
            return Decision::without_patch(ReviewResult::Skipped);
        }
        let needed: BTreeSet<Tracked> = deps.tracked().cloned().collect();
        let (observations, timed_out) = self.observations(needed, budget).await;
        let desired = stamp::desired(&deps.stamps, &observations, self.settings.stamp_on_delete);
        for blocked in &desired.blocked {
            tracing::debug!(output = %blocked.output, reason = %blocked.reason, "output left as it is");
        }
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let ops = admission_patch(&PatchInput {
            object,
            old_object: request.old_object.as_ref().filter(|o| o.is_object()),
            specs: &deps.stamps,
            desired: &desired,
            scheme: &self.settings.scheme,
            now: &now,
        });
        let result = if timed_out {
            ReviewResult::Timeout
        } else if ops.is_empty() {
            ReviewResult::Unchanged
        } else {
            ReviewResult::Patched
        };
        Decision { ops, result }
    }

    /// The observations of `needed`: from the store, then from the sources for what
    /// it lacks, until `budget` runs out. Returns whether the budget ran out.
    async fn observations(
        &self,
        needed: BTreeSet<Tracked>,
        budget: Duration,
    ) -> (Observations, bool) {
        let mut known = HashMap::new();
        let mut missing = Vec::new();
        {
            let store = self.fingerprints.read().unwrap_or_else(|e| e.into_inner());
            for tracked in needed {
                match store.observation(&tracked) {
                    Some(observation) => {
                        known.insert(tracked, observation.clone());
                    }
                    None => missing.push(tracked),
                }
            }
        }
        let mut reads: FuturesUnordered<_> = missing
            .into_iter()
            .filter_map(|tracked| {
                let source = self.sources.get(&tracked.reference.source)?.clone();
                Some(async move {
                    let result = source.observe(&tracked).await;
                    (tracked, result)
                })
            })
            .collect();
        let deadline = tokio::time::sleep(budget);
        tokio::pin!(deadline);
        let mut timed_out = false;
        while !reads.is_empty() {
            tokio::select! {
                Some((tracked, result)) = reads.next() => match result {
                    Ok(observation) => {
                        known.insert(tracked, observation);
                    }
                    Err(error) => {
                        tracing::debug!(%tracked, %error, category = error.category(), "cannot read input; its outputs stay as they are");
                    }
                },
                _ = &mut deadline => {
                    tracing::warn!(unread = reads.len(), ?budget, "inputs not read in time; their outputs stay as they are");
                    timed_out = true;
                    break;
                }
            }
        }
        (Observations(known), timed_out)
    }
}

/// Observations gathered for one review.
struct Observations(HashMap<Tracked, Observation>);

impl FingerprintLookup for Observations {
    fn observation(&self, tracked: &Tracked) -> Option<&Observation> {
        self.0.get(tracked)
    }
}

fn parse_request(mut review: Value) -> Request {
    let mut request = review
        .get_mut("request")
        .map(Value::take)
        .unwrap_or_default();
    let str_at = |v: &Value, p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let kind = (str_at(&request, "/kind/group") == "apps"
        && str_at(&request, "/kind/version") == "v1")
        .then(|| WorkloadKind::parse(&str_at(&request, "/kind/kind")))
        .flatten()
        .filter(|k| k.as_str() == str_at(&request, "/kind/kind"));
    let object = request
        .get_mut("object")
        .map(Value::take)
        .filter(|o| !o.is_null());
    let namespace = Some(str_at(&request, "/namespace"))
        .filter(|n| !n.is_empty())
        .or_else(|| object.as_ref().map(|o| str_at(o, "/metadata/namespace")))
        .unwrap_or_default();
    let name = Some(str_at(&request, "/name"))
        .filter(|n| !n.is_empty())
        .or_else(|| object.as_ref().map(|o| str_at(o, "/metadata/name")))
        .filter(|n| !n.is_empty())
        .or_else(|| object.as_ref().map(|o| str_at(o, "/metadata/generateName")))
        .unwrap_or_default();
    Request {
        operation: str_at(&request, "/operation"),
        kind,
        subresource: str_at(&request, "/subResource"),
        old_object: request
            .get_mut("oldObject")
            .map(Value::take)
            .filter(|o| !o.is_null()),
        namespace,
        name,
        object,
    }
}

/// The object as nudge's [`Workload`], with namespace and name filled in from the
/// request when the object lacks them (a CREATE with `generateName`).
fn parse_workload(
    kind: WorkloadKind,
    object: &Value,
    namespace: &str,
    name: &str,
) -> Result<Workload, serde_json::Error> {
    let mut object = object.clone();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for (key, value) in [("namespace", namespace), ("name", name)] {
            if meta
                .get(key)
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                meta.insert(key.to_owned(), Value::from(value));
            }
        }
    }
    let workload = match kind {
        WorkloadKind::Deployment => to_workload(&serde_json::from_value::<Deployment>(object)?),
        WorkloadKind::StatefulSet => to_workload(&serde_json::from_value::<StatefulSet>(object)?),
        WorkloadKind::DaemonSet => to_workload(&serde_json::from_value::<DaemonSet>(object)?),
    };
    workload.ok_or_else(|| serde::de::Error::custom("the object has no namespace or name"))
}

/// An `allowed: true` review answer, with the patch when there is one.
fn allowed(api_version: &str, uid: &str, ops: &[PatchOp], result: ReviewResult) -> ReviewAnswer {
    let mut response = json!({ "uid": uid, "allowed": true });
    if !ops.is_empty() {
        match serde_json::to_vec(ops) {
            Ok(bytes) => {
                response["patchType"] = json!("JSONPatch");
                response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(bytes));
            }
            Err(error) => {
                tracing::error!(%error, "cannot serialize the patch; allowing without patch");
                return allowed(api_version, uid, &[], ReviewResult::Error);
            }
        }
    }
    ReviewAnswer {
        status: 200,
        body: json!({
            "apiVersion": api_version,
            "kind": "AdmissionReview",
            "response": response,
        }),
        result,
    }
}

/// A 400 for a body that names no request to answer.
fn bad_request(message: &str) -> ReviewAnswer {
    ReviewAnswer {
        status: 400,
        body: json!({
            "apiVersion": "v1",
            "kind": "Status",
            "status": "Failure",
            "reason": "BadRequest",
            "code": 400,
            "message": message,
        }),
        result: ReviewResult::Malformed,
    }
}
