//! The admission handler: an `AdmissionReview` in, an `AdmissionReview` out, through
//! kube's admission types.
//!
//! It computes the desired stamp with the controller's own code
//! ([`annotations::dependencies`] → [`stamp::desired`]) over the engine's shared
//! [`FingerprintStore`], reads what the store lacks through an [`InputReader`]
//! within a deadline, decides with [`stamp::decide_admission`] and renders the
//! decision with [`stamp::admission_patch`]. Observations read here are *not*
//! written into the store: the engine owns tracking, and an observation of
//! something nobody tracks yet would never be refreshed.
//!
//! It never denies. Every answer is `allowed: true`; malformed reviews, other kinds,
//! timeouts and internal errors answer without a patch (see [`ReviewResult`]). The
//! one exception is a body with no `request.uid` to answer to (not JSON, not a
//! review): that gets HTTP 400, which the kube-apiserver treats as a failed webhook
//! call, so `failurePolicy: Ignore` admits the request unchanged. A real apiserver
//! never sends such a body.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use kube::api::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde_json::{Value, json};
use tracing::Instrument;

use super::metrics::{ReviewResult, WebhookCounters};
use crate::annotations::{self, AnnotationScheme};
use crate::fingerprint::Observation;
use crate::model::{SourceCatalog, Tracked, Workload, WorkloadKind};
use crate::stamp::{self, FingerprintLookup, FingerprintStore, InputReader};

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

/// What the handler decides with: the configured sources as annotations see them,
/// the kinds nudge stamps, the engine's fingerprints and a reader for the rest.
pub struct AdmissionParts {
    /// The configured sources (annotations naming others are invalid).
    pub catalog: SourceCatalog,
    /// The kinds with a registered target; reviews of other kinds are skipped.
    pub kinds: Vec<WorkloadKind>,
    /// The engine's fingerprints.
    pub fingerprints: Arc<RwLock<FingerprintStore>>,
    /// Reads inputs the store lacks.
    pub reader: Arc<dyn InputReader>,
    /// The kinds whose target takes snapshots (design §5e).
    pub snapshot_kinds: BTreeSet<WorkloadKind>,
}

/// The admission handler. Cheap to share (`Arc`); one per process.
pub struct Admission {
    settings: AdmissionSettings,
    parts: AdmissionParts,
    counters: Arc<WebhookCounters>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("settings", &self.settings)
            .field("kinds", &self.parts.kinds)
            .finish_non_exhaustive()
    }
}

/// The outcome of deciding on a request.
struct Decision {
    patch: json_patch::Patch,
    result: ReviewResult,
}

impl Decision {
    fn without_patch(result: ReviewResult) -> Self {
        Self {
            patch: json_patch::Patch(Vec::new()),
            result,
        }
    }
}

// === impl Admission ===

impl Admission {
    /// A handler deciding with `parts`, counting into `counters`.
    pub fn new(
        settings: AdmissionSettings,
        parts: AdmissionParts,
        counters: Arc<WebhookCounters>,
    ) -> Self {
        Self {
            settings,
            parts,
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
        let request = match parse_review(body) {
            Ok(request) => request,
            Err(answer) => return answer,
        };
        let span = tracing::info_span!(
            "admission",
            uid = %request.uid,
            operation = ?request.operation,
            kind = %request.kind.kind,
            namespace = request.namespace.as_deref().unwrap_or(""),
            name = %request.name,
        );
        let budget = match apiserver_timeout {
            Some(t) => self
                .settings
                .observe_timeout
                .min(t.saturating_sub(ANSWER_MARGIN)),
            None => self.settings.observe_timeout,
        };
        let response = AdmissionResponse::from(&request);
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
                ops = decision.patch.0.len(),
                "answered"
            )
        });
        respond(response, decision)
    }

    async fn decide(&self, request: AdmissionRequest<DynamicObject>, budget: Duration) -> Decision {
        let Some(kind) = self.kind_of(&request) else {
            return Decision::without_patch(ReviewResult::Skipped);
        };
        // A stored Job's pod template cannot change: a patch to it would make the
        // API server refuse the user's update.
        let operation_matters = match request.operation {
            Operation::Create => true,
            Operation::Update => !kind.has_immutable_template(),
            _ => false,
        };
        if !operation_matters
            || request
                .sub_resource
                .as_deref()
                .is_some_and(|s| !s.is_empty())
        {
            return Decision::without_patch(ReviewResult::Skipped);
        }
        let namespace = request
            .namespace
            .clone()
            .or_else(|| {
                request
                    .object
                    .as_ref()
                    .and_then(|o| o.metadata.namespace.clone())
            })
            .unwrap_or_default();
        if !self.settings.scope.contains(&namespace) {
            return Decision::without_patch(ReviewResult::Skipped);
        }
        let Some(object) = request.object.as_ref().map(to_value) else {
            tracing::warn!("admission request has no object");
            return Decision::without_patch(ReviewResult::Malformed);
        };
        let name = Some(request.name.clone())
            .filter(|n| !n.is_empty())
            .or_else(|| {
                request
                    .object
                    .as_ref()
                    .and_then(|o| o.metadata.generate_name.clone())
            })
            .unwrap_or_default();
        let incoming = match workload_of(&kind, &object, &namespace, &name) {
            Ok(workload) => workload,
            Err(error) => {
                tracing::warn!(%error, "cannot read the object under review");
                return Decision::without_patch(ReviewResult::Malformed);
            }
        };
        let stored_object = request.old_object.as_ref().map(to_value);
        let stored = stored_object
            .as_ref()
            .and_then(|old| workload_of(&kind, old, &namespace, &name).ok());
        let mut deps =
            annotations::dependencies(&incoming, &self.settings.scheme, &self.parts.catalog);
        if !self.parts.snapshot_kinds.contains(&kind) {
            deps.stamps
                .retain(|spec| !matches!(spec.output, crate::model::Output::Snapshots(_)));
        }
        if deps.stamps.is_empty() {
            return Decision::without_patch(ReviewResult::Skipped);
        }
        let needed: BTreeSet<Tracked> = deps.tracked().cloned().collect();
        let (observations, timed_out) = self.observations(needed, budget).await;
        let desired = stamp::desired(&deps.stamps, &observations, self.settings.stamp_on_delete);
        for blocked in &desired.blocked {
            tracing::debug!(output = %blocked.output, reason = %blocked.reason, "output left as it is");
        }
        let mut decision =
            stamp::decide_admission(&incoming, stored.as_ref(), &deps.stamps, &desired);
        admit_snapshot(&mut decision, (&incoming, stored.as_ref()), &deps);
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let patch = stamp::admission_patch(
            &object,
            stored_object.as_ref(),
            &kind,
            &decision,
            &self.settings.scheme,
            &now,
        );
        let result = if timed_out {
            ReviewResult::Timeout
        } else if patch.0.is_empty() {
            ReviewResult::Unchanged
        } else {
            ReviewResult::Patched
        };
        Decision { patch, result }
    }

    /// The registered kind the request is about (same group and kind; the
    /// version the object is served at is the request's).
    fn kind_of(&self, request: &AdmissionRequest<DynamicObject>) -> Option<WorkloadKind> {
        let gvk = &request.kind;
        self.parts
            .kinds
            .iter()
            .find(|kind| kind.group() == gvk.group && kind.as_str() == gvk.kind)
            .map(|kind| kind.at_version(gvk.version.clone()))
    }

    /// The observations of `needed`: from the store, then from the reader for what
    /// it lacks, until `budget` runs out. Returns whether the budget ran out.
    async fn observations(
        &self,
        needed: BTreeSet<Tracked>,
        budget: Duration,
    ) -> (Observations, bool) {
        let mut known = HashMap::new();
        let mut missing = Vec::new();
        {
            let store = self
                .parts
                .fingerprints
                .read()
                .unwrap_or_else(|e| e.into_inner());
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
            .map(|tracked| {
                let reader = self.parts.reader.clone();
                async move {
                    let result = reader.read(&tracked).await;
                    (tracked, result)
                }
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
                        tracing::debug!(%tracked, %error, category = error.category, "cannot read input; its outputs stay as they are");
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

/// The snapshot the admitted template uses (design §5e): what the request
/// points at itself, and, for a workload that takes snapshots, the copies the
/// stored template used of objects the request points back at the live
/// objects (a re-applied manifest keeps its copies and rolls nothing). Never
/// the newest content: moving to new copies is the controller's, which makes
/// them first and follows the delivery rules.
fn admit_snapshot(
    decision: &mut stamp::AdmissionDecision,
    (incoming, stored): (&Workload, Option<&Workload>),
    deps: &annotations::Dependencies,
) {
    let Some(output) = deps
        .stamps
        .iter()
        .map(|spec| &spec.output)
        .find(|output| matches!(output, crate::model::Output::Snapshots(_)))
    else {
        return;
    };
    let key = output.key();
    let read = |w: &Workload| crate::snapshot::TemplateSnapshot::read(&w.id, &w.template, key);
    let stored = stored.map(read);
    let admitted =
        crate::snapshot::admitted(&read(incoming), stored.as_ref(), deps.snapshot.wanted);
    decision
        .values
        .insert(output.clone(), admitted.to_annotation());
}

/// Observations gathered for one review.
struct Observations(HashMap<Tracked, Observation>);

impl FingerprintLookup for Observations {
    fn observation(&self, tracked: &Tracked) -> Option<&Observation> {
        self.0.get(tracked)
    }
}

/// The request of a review body, or the answer to give when there is none to
/// decide on: 400 without a uid, `allowed` without a patch when the review is
/// malformed but names its uid.
fn parse_review(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, ReviewAnswer> {
    let review: Value = serde_json::from_slice(body).map_err(|error| {
        tracing::warn!(%error, "admission body is not JSON");
        bad_request("the body is not JSON")
    })?;
    let Some(uid) = review
        .pointer("/request/uid")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
    else {
        tracing::warn!("admission body has no request.uid");
        return Err(bad_request(
            "the body is not an AdmissionReview with request.uid",
        ));
    };
    let api_version = match review.get("apiVersion").and_then(Value::as_str) {
        Some(v @ "admission.k8s.io/v1beta1") => v.to_owned(),
        _ => "admission.k8s.io/v1".to_owned(),
    };
    let typed: Result<AdmissionReview<DynamicObject>, _> = serde_json::from_value(review);
    match typed.map(TryInto::<AdmissionRequest<DynamicObject>>::try_into) {
        Ok(Ok(request)) => Ok(request),
        Ok(Err(error)) => {
            tracing::warn!(%error, "admission review without a usable request; allowing without patch");
            Err(allowed_malformed(&api_version, &uid))
        }
        Err(error) => {
            tracing::warn!(%error, "malformed admission review; allowing without patch");
            Err(allowed_malformed(&api_version, &uid))
        }
    }
}

/// The object of a review as JSON.
fn to_value(object: &DynamicObject) -> Value {
    serde_json::to_value(object).unwrap_or_default()
}

/// The object as a [`Workload`], with namespace and name filled in from the
/// request when the object lacks them (a CREATE with `generateName`).
fn workload_of(
    kind: &WorkloadKind,
    object: &Value,
    namespace: &str,
    name: &str,
) -> Result<Workload, crate::model::WorkloadError> {
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
    Workload::from_object(kind, object)
}

/// The review answer for `decision`: allowed, with the patch when there is one.
fn respond(response: AdmissionResponse, decision: Decision) -> ReviewAnswer {
    let Decision { patch, result } = decision;
    let (response, result) = if patch.0.is_empty() {
        (response, result)
    } else {
        match response.clone().with_patch(patch) {
            Ok(patched) => (patched, result),
            Err(error) => {
                tracing::error!(%error, "cannot serialize the patch; allowing without patch");
                (response, ReviewResult::Error)
            }
        }
    };
    match serde_json::to_value(response.into_review()) {
        Ok(mut body) => {
            base64_patch(&mut body);
            ReviewAnswer {
                status: 200,
                body,
                result,
            }
        }
        Err(error) => {
            tracing::error!(%error, "cannot serialize the review answer");
            bad_request("internal error")
        }
    }
}

/// kube serializes `response.patch` (Go `[]byte`) as an array of numbers, which
/// Go's decoder accepts; webhooks conventionally send the base64 string Go's own
/// encoder writes, and so does nudge.
fn base64_patch(review: &mut Value) {
    use base64::Engine as _;
    let Some(patch) = review.pointer_mut("/response/patch") else {
        return;
    };
    let bytes: Option<Vec<u8>> = patch.as_array().and_then(|items| {
        items
            .iter()
            .map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
            .collect()
    });
    if let Some(bytes) = bytes {
        *patch = Value::String(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
}

/// `allowed: true` without a patch, for a review that names its uid but cannot be
/// decided on.
fn allowed_malformed(api_version: &str, uid: &str) -> ReviewAnswer {
    ReviewAnswer {
        status: 200,
        body: json!({
            "apiVersion": api_version,
            "kind": "AdmissionReview",
            "response": { "uid": uid, "allowed": true },
        }),
        result: ReviewResult::Malformed,
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

#[cfg(test)]
mod tests {

    use async_trait::async_trait;

    use super::*;
    use crate::stamp::ReadError;

    /// A reader that cannot read anything.
    struct Unreachable;

    #[async_trait]
    impl InputReader for Unreachable {
        async fn read(&self, _tracked: &Tracked) -> Result<Observation, ReadError> {
            Err(ReadError {
                category: "backend",
                message: "unreachable".into(),
            })
        }
    }

    /// A reader to which every input exists, with one fingerprint.
    struct Present;

    #[async_trait]
    impl InputReader for Present {
        async fn read(&self, _tracked: &Tracked) -> Result<Observation, ReadError> {
            Ok(Observation::Present(
                crate::fingerprint::Fingerprint::digest("sha256-aa"),
            ))
        }
    }

    fn mk_admission() -> Arc<Admission> {
        mk_admission_with(Arc::new(Unreachable), SourceCatalog::new())
    }

    fn mk_admission_with(reader: Arc<dyn InputReader>, catalog: SourceCatalog) -> Arc<Admission> {
        Arc::new(Admission::new(
            AdmissionSettings {
                scheme: AnnotationScheme::default(),
                stamp_on_delete: false,
                scope: crate::scope::NamespaceScope::default(),
                observe_timeout: Duration::from_secs(1),
            },
            AdmissionParts {
                catalog,
                kinds: vec![WorkloadKind::deployment()],
                fingerprints: Arc::default(),
                reader,
                snapshot_kinds: [WorkloadKind::deployment()].into(),
            },
            Arc::default(),
        ))
    }

    /// The review the real apiserver sent (transcript), with `nudge.dev/auto`
    /// and its container reading ConfigMap `app-config`.
    fn transcript_review() -> Value {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/apiserver-double/tests/transcripts/admission_review.json"
        );
        let transcript: Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut review = transcript["webhook_received"][1]["review"].clone();
        let object = &mut review["request"]["object"];
        object["metadata"]["annotations"] = json!({"nudge.dev/auto": "true"});
        object["spec"]["template"]["spec"]["containers"][0]["envFrom"] =
            json!([{"configMapRef": {"name": "app-config"}}]);
        review
    }

    #[tokio::test]
    async fn the_transcript_review_is_answered_with_a_patch_adding_the_stamp() {
        let review = transcript_review();
        let object_name = |r: &str| crate::annotations::check_object_name(r).map_err(str::to_owned);
        let catalog = SourceCatalog::new().with(
            crate::model::SourceName::configmap(),
            crate::model::Scope::Namespaced,
            object_name,
        );
        let answer = mk_admission_with(Arc::new(Present), catalog)
            .review(&serde_json::to_vec(&review).unwrap(), None)
            .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(answer.result, ReviewResult::Patched, "{}", answer.body);
        let response = &answer.body["response"];
        assert_eq!(response["uid"], review["request"]["uid"]);
        assert_eq!(response["allowed"], true);
        assert_eq!(response["patchType"], "JSONPatch");
        use base64::Engine as _;
        let patch = base64::engine::general_purpose::STANDARD
            .decode(response["patch"].as_str().expect("a base64 string"))
            .unwrap();
        let patch: Value = serde_json::from_slice(&patch).unwrap();
        assert_eq!(patch[0]["path"], "/spec/template/metadata/annotations");
        assert_eq!(answer.body["apiVersion"], "admission.k8s.io/v1");
    }

    #[tokio::test]
    async fn garbage_without_a_uid_is_a_400_and_malformed_with_one_is_allowed() {
        let admission = mk_admission();
        assert_eq!(admission.review(b"not json", None).await.status, 400);
        assert_eq!(admission.review(b"{}", None).await.status, 400);
        let malformed = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "object": "not an object"}});
        let answer = admission
            .review(&serde_json::to_vec(&malformed).unwrap(), None)
            .await;
        assert_eq!(
            (answer.status, answer.result),
            (200, ReviewResult::Malformed)
        );
        assert_eq!(
            answer.body["response"],
            json!({"uid": "u1", "allowed": true})
        );
    }
}
