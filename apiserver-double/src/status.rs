//! Kubernetes `Status` failures, shaped exactly like the real apiserver's.

use serde_json::{Map, Value, json};

use crate::resources::ResourceType;

/// One entry of `details.causes` in a `Status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cause {
    /// `reason`, e.g. `FieldValueRequired`.
    pub reason: &'static str,
    /// `message`, without the field path.
    pub message: String,
    /// `field`, e.g. `spec.selector`.
    pub field: String,
}

impl Cause {
    /// `field: message`, the form used inside `Status.message`.
    pub fn summary(&self) -> String {
        if self.field.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.field, self.message)
        }
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        if !self.field.is_empty() {
            m.insert("field".into(), Value::from(self.field.clone()));
        }
        m.insert("message".into(), Value::from(self.message.clone()));
        m.insert("reason".into(), Value::from(self.reason));
        Value::Object(m)
    }
}

/// An API failure answered as a `Status` object.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub(crate) struct ApiError {
    /// HTTP status code, repeated as `Status.code`.
    pub code: u16,
    /// `Status.reason`, e.g. `NotFound`.
    pub reason: &'static str,
    /// `Status.message`.
    pub message: String,
    /// `Status.details`; `None` leaves the key out (as for BadRequest).
    pub details: Option<Value>,
    /// `Retry-After` header (seconds) for throttling answers.
    pub retry_after: Option<u32>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// `details` naming a resource: `{name, group?, kind: <plural>}`.
    fn resource_details(rt: &ResourceType, name: &str) -> Value {
        let mut m = Map::new();
        m.insert("name".into(), Value::from(name));
        if !rt.group.is_empty() {
            m.insert("group".into(), Value::from(rt.group.as_str()));
        }
        m.insert("kind".into(), Value::from(rt.plural.as_str()));
        Value::Object(m)
    }

    /// 400 BadRequest without details.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 401 Unauthorized.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 404 NotFound for an object.
    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{}\" not found", rt.group_resource(), name),
        )
        .with_details(Self::resource_details(rt, name))
    }

    /// 404 NotFound for a missing namespace.
    pub fn namespace_not_found(namespace: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("namespaces \"{namespace}\" not found"),
        )
        .with_details(json!({"name": namespace, "kind": "namespaces"}))
    }

    /// 404 for a path the server does not serve.
    pub fn no_route() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    /// 405 for a verb the path does not support.
    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
        .with_details(json!({}))
    }

    /// 406 for an Accept header the server cannot satisfy.
    pub fn not_acceptable() -> Self {
        Self::new(
            406,
            "NotAcceptable",
            "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf",
        )
        .with_details(json!({}))
    }

    /// 403 Forbidden for an object an admission plugin refused
    /// (`admission.NewForbidden`): `<resource> "<name>" is forbidden: <why>`.
    pub fn forbidden(rt: &ResourceType, name: &str, why: &str) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!("{} \"{}\" is forbidden: {why}", rt.group_resource(), name),
        )
        .with_details(Self::resource_details(rt, name))
    }

    /// 409 AlreadyExists.
    pub fn already_exists(rt: &ResourceType, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", rt.group_resource(), name),
        )
        .with_details(Self::resource_details(rt, name))
    }

    /// 409 Conflict for a stale resourceVersion.
    pub fn conflict_modified(rt: &ResourceType, name: &str) -> Self {
        Self::conflict(
            rt,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 409 Conflict with a custom explanation.
    pub fn conflict(rt: &ResourceType, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": {}",
                rt.group_resource(),
                name,
                why
            ),
        )
        .with_details(Self::resource_details(rt, name))
    }

    /// 409 Conflict from server-side apply.
    pub fn apply_conflict(message: String, causes: &[Cause]) -> Self {
        Self::new(409, "Conflict", message).with_details(json!({
            "causes": causes.iter().map(Cause::to_json).collect::<Vec<_>>()
        }))
    }

    /// 410 Expired.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
        )
        .with_details(json!({}))
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type() -> Self {
        Self::new(415, "UnsupportedMediaType", "415: Unsupported Media Type")
            .with_details(json!({}))
    }

    /// 422 Invalid for an object, with one cause per field error.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> Self {
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let summary = if causes.len() == 1 {
            causes[0].summary()
        } else {
            format!(
                "[{}]",
                causes
                    .iter()
                    .map(Cause::summary)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let mut details = Map::new();
        details.insert(
            "causes".into(),
            Value::Array(causes.iter().map(Cause::to_json).collect()),
        );
        if !group.is_empty() {
            details.insert("group".into(), Value::from(group));
        }
        details.insert("kind".into(), Value::from(kind));
        if !name.is_empty() {
            details.insert("name".into(), Value::from(name));
        }
        Self::new(
            422,
            "Invalid",
            format!("{qualified} \"{name}\" is invalid: {summary}"),
        )
        .with_details(Value::Object(details))
    }

    /// 422 Invalid for a request option object (`ListOptions`, `PatchOptions`).
    pub fn invalid_options(kind: &str, causes: Vec<Cause>) -> Self {
        Self::invalid(kind, "meta.k8s.io", "", causes)
    }

    /// 422 with the generic message the apiserver uses for failed JSON patches.
    pub fn unprocessable_generic() -> Self {
        Self::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        )
        .with_details(json!({}))
    }

    /// 429 TooManyRequests with a Retry-After.
    pub fn too_many_requests(retry_after: u32) -> Self {
        let mut e = Self::new(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
        )
        .with_details(json!({ "retryAfterSeconds": retry_after }));
        e.retry_after = Some(retry_after);
        e
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        let message = message.into();
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        )
        .with_details(json!({ "causes": [{ "message": message }] }))
    }

    /// 504 Timeout for a resourceVersion from the future.
    pub fn too_large_resource_version(requested: u64, current: u64) -> Self {
        let mut e = Self::new(
            504,
            "Timeout",
            format!("Too large resource version: {requested}, current: {current}"),
        )
        .with_details(json!({
            "causes": [{
                "reason": "ResourceVersionTooLarge",
                "message": "Too large resource version"
            }],
            "retryAfterSeconds": 1
        }));
        e.retry_after = Some(1);
        e
    }

    /// An injected failure with an arbitrary status code.
    pub fn injected(code: u16, retry_after: u32) -> Self {
        match code {
            429 => Self::too_many_requests(retry_after),
            500 => Self::internal("injected fault"),
            503 => {
                let mut e = Self::new(503, "ServiceUnavailable", "the server is currently unable to handle the request")
                    .with_details(json!({ "retryAfterSeconds": retry_after }));
                e.retry_after = Some(retry_after);
                e
            }
            504 => Self::new(504, "Timeout", "the server was unable to return a response in the time allotted, but may still be processing the request")
                .with_details(json!({})),
            other => Self::new(other, "Unknown", format!("injected fault ({other})")).with_details(json!({})),
        }
    }

    /// The `Status` object for this failure.
    pub fn to_status(&self) -> Value {
        let mut m = Map::new();
        m.insert("apiVersion".into(), Value::from("v1"));
        m.insert("code".into(), Value::from(self.code));
        if let Some(d) = &self.details {
            m.insert("details".into(), d.clone());
        }
        m.insert("kind".into(), Value::from("Status"));
        m.insert("message".into(), Value::from(self.message.clone()));
        m.insert("metadata".into(), json!({}));
        m.insert("reason".into(), Value::from(self.reason));
        m.insert("status".into(), Value::from("Failure"));
        Value::Object(m)
    }
}

/// Shorthand for handler results.
pub(crate) type ApiResult<T> = Result<T, ApiError>;

/// A `Status` of success, as answered by DELETE of an object removed at once.
pub(crate) fn success_deleted(rt: &ResourceType, name: &str, uid: &str) -> Value {
    let mut details = Map::new();
    if !rt.group.is_empty() {
        details.insert("group".into(), Value::from(rt.group.as_str()));
    }
    details.insert("kind".into(), Value::from(rt.plural.as_str()));
    details.insert("name".into(), Value::from(name));
    details.insert("uid".into(), Value::from(uid));
    json!({
        "apiVersion": "v1",
        "details": Value::Object(details),
        "kind": "Status",
        "metadata": {},
        "status": "Success"
    })
}
