//! Object validation (422 Invalid), following the apiserver's messages for
//! the checks that matter to controllers.

use serde_json::{Map, Value};

use crate::batch::{cronjob, job};
use crate::meta;
use crate::resources::{Family, ResourceType};
use crate::status::{ApiError, Cause};
use crate::{crd, custom};

const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const CONFIG_KEY_MSG: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub(crate) fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Dot-separated DNS-1123 labels, at most 253 characters.
pub(crate) fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

/// The name part of a qualified name (label key or value):
/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters.
pub(crate) fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c))
}

fn is_qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        Some((p, n)) => is_dns1123_subdomain(p) && is_qualified_name_part(n),
        None => is_qualified_name_part(s),
    }
}

fn is_config_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"-._".contains(&c))
}

/// Go-like rendering of an invalid value inside a message.
pub(crate) fn show(v: &Value) -> String {
    match v {
        Value::Object(m) if m.values().all(Value::is_string) => format!(
            "map[string]string{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{}:{}", Value::from(k.as_str()), v))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

/// Collects field errors.
#[derive(Default)]
pub(crate) struct Errors(Vec<Cause>);

impl Errors {
    /// Adds an error with a given reason and full message.
    pub fn push(&mut self, reason: &'static str, field: impl Into<String>, message: String) {
        self.0.push(Cause {
            reason,
            message,
            field: field.into(),
        });
    }

    /// `field: message` of every error (tests).
    #[cfg(test)]
    pub fn summaries(&self) -> Vec<String> {
        self.0.iter().map(Cause::summary).collect()
    }

    /// Whether no error was collected.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `Required value`.
    pub fn required(&mut self, field: impl Into<String>, detail: &str) {
        let msg = if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        };
        self.push("FieldValueRequired", field, msg);
    }

    /// `Invalid value: <v>: <detail>`.
    pub fn invalid(&mut self, field: impl Into<String>, value: &Value, detail: &str) {
        self.push(
            "FieldValueInvalid",
            field,
            format!("Invalid value: {}: {detail}", show(value)),
        );
    }

    /// `Forbidden: <detail>`.
    pub fn forbidden(&mut self, field: impl Into<String>, detail: &str) {
        self.push("FieldValueForbidden", field, format!("Forbidden: {detail}"));
    }

    /// `Duplicate value: <v>`.
    pub fn duplicate(&mut self, field: impl Into<String>, value: &Value) {
        self.push(
            "FieldValueDuplicate",
            field,
            format!("Duplicate value: {}", show(value)),
        );
    }

    /// `Not found: <v>`.
    pub fn not_found(&mut self, field: impl Into<String>, value: &Value) {
        self.push(
            "FieldValueNotFound",
            field,
            format!("Not found: {}", show(value)),
        );
    }

    /// `Unsupported value: <v>: supported values: ...`.
    pub fn unsupported(&mut self, field: impl Into<String>, value: &Value, supported: &[&str]) {
        let s = supported
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ");
        self.push(
            "FieldValueNotSupported",
            field,
            format!("Unsupported value: {}: supported values: {s}", show(value)),
        );
    }

    /// Turns the collected errors into a 422 for the object.
    pub fn into_result(self, rt: &ResourceType, name: &str) -> Result<(), ApiError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(&rt.kind, &rt.group, name, self.0))
        }
    }
}

/// Validates an object about to be created.
pub(crate) fn validate_create(rt: &ResourceType, obj: &Value) -> Result<(), ApiError> {
    let mut errs = Errors::default();
    validate_metadata(rt, obj, &mut errs);
    if rt.is_custom() {
        custom::validate(rt, obj, &mut errs)?;
    }
    validate_kind(rt, obj, &mut errs);
    errs.into_result(rt, meta::name(obj))
}

/// Validates an update from `old` to `new`.
pub(crate) fn validate_update(rt: &ResourceType, old: &Value, new: &Value) -> Result<(), ApiError> {
    let mut errs = Errors::default();
    validate_metadata(rt, new, &mut errs);
    match rt.family {
        Family::Job => {
            job::validate_job(new, job::has_prefixed_labels(old), &mut errs);
            job::validate_job_update(old, new, &mut errs);
        }
        Family::CronJob => cronjob::validate_cron_job(new, Some(old), &mut errs),
        Family::CustomResourceDefinition => {
            crd::validation::validate(new, &mut errs);
            crd::validation::validate_update(old, new, &mut errs);
        }
        Family::Custom => custom::validate(rt, new, &mut errs)?,
        _ => validate_kind(rt, new, &mut errs),
    }
    if rt.family == Family::ControllerRevision && old.get("data") != new.get("data") {
        errs.invalid(
            "data",
            new.get("data").unwrap_or(&Value::Null),
            "field is immutable",
        );
    }
    if rt.is_workload() {
        let o = meta::get_path(old, &["spec", "selector"]);
        let n = meta::get_path(new, &["spec", "selector"]);
        if o != n {
            errs.invalid(
                "spec.selector",
                n.unwrap_or(&Value::Null),
                "field is immutable",
            );
        }
    }
    if matches!(rt.family, Family::ConfigMap | Family::Secret)
        && old.get("immutable") == Some(&Value::Bool(true))
    {
        if new.get("immutable") != Some(&Value::Bool(true)) {
            errs.forbidden("immutable", "field is immutable when `immutable` is set");
        }
        for f in ["data", "binaryData"] {
            if old.get(f) != new.get(f) {
                errs.forbidden(f, "field is immutable when `immutable` is set");
            }
        }
    }
    if rt.family == Family::Secret && old.get("type") != new.get("type") {
        errs.invalid(
            "type",
            new.get("type").unwrap_or(&Value::Null),
            "field is immutable",
        );
    }
    errs.into_result(rt, meta::name(new))
}

fn validate_metadata(rt: &ResourceType, obj: &Value, errs: &mut Errors) {
    let name = meta::name(obj);
    if name.is_empty() {
        errs.required("metadata.name", "name or generateName is required");
    } else {
        let ok = if rt.family == Family::Namespace {
            is_dns1123_label(name)
        } else {
            is_dns1123_subdomain(name)
        };
        if !ok {
            let msg = if rt.family == Family::Namespace {
                DNS1123_LABEL_MSG
            } else {
                DNS1123_SUBDOMAIN_MSG
            };
            errs.invalid("metadata.name", &Value::from(name), msg);
        }
    }
    if let Some(labels) = meta::string_map(obj, "labels") {
        for (k, v) in labels {
            if !is_qualified_name(k) {
                errs.invalid("metadata.labels", &Value::from(k.as_str()), "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')");
            }
            match v.as_str() {
                Some(s) if s.is_empty() || is_qualified_name_part(s) => {}
                _ => errs.invalid(
                    "metadata.labels",
                    v,
                    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
                ),
            }
        }
    }
    validate_owner_references(obj, errs);
    if let Some(annotations) = meta::string_map(obj, "annotations") {
        let mut total = 0;
        for (k, v) in annotations {
            total += k.len() + v.as_str().map_or(0, str::len);
            if !is_qualified_name(&k.to_ascii_lowercase()) {
                errs.invalid("metadata.annotations", &Value::from(k.as_str()), "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')");
            }
            if !v.is_string() {
                errs.invalid(format!("metadata.annotations.{k}"), v, "must be a string");
            }
        }
        if total > 256 * 1024 {
            errs.push(
                "FieldValueTooLong",
                "metadata.annotations",
                format!("Too long: may not be more than {} bytes", 256 * 1024),
            );
        }
    }
}

/// `ValidateOwnerReferences` (apimachinery's `api/validation/objectmeta.go`):
/// each reference names a version, a kind, a name and a uid, no Event owns
/// anything, and at most one reference is the controller. Every reference
/// is reported under the same path, as the apiserver does.
fn validate_owner_references(obj: &Value, errs: &mut Errors) {
    const PATH: &str = "metadata.ownerReferences";
    let Some(owners) = meta::get_path(obj, &["metadata", "ownerReferences"]) else {
        return;
    };
    let Some(owners) = owners.as_array() else {
        errs.invalid(PATH, owners, "must be a list of owner references");
        return;
    };
    let mut controller: Option<String> = None;
    for owner in owners {
        let s = |field: &str| owner.get(field).and_then(Value::as_str).unwrap_or("");
        let api_version = s("apiVersion");
        let version = api_version.rsplit('/').next().unwrap_or("");
        let checks = [
            (
                "apiVersion",
                api_version,
                version.is_empty(),
                "version must not be empty",
            ),
            (
                "kind",
                s("kind"),
                s("kind").is_empty(),
                "kind must not be empty",
            ),
            (
                "name",
                s("name"),
                s("name").is_empty(),
                "name must not be empty",
            ),
            (
                "uid",
                s("uid"),
                s("uid").is_empty(),
                "uid must not be empty",
            ),
        ];
        for (field, value, bad, message) in checks {
            if bad {
                errs.invalid(format!("{PATH}.{field}"), &Value::from(value), message);
            }
        }
        if api_version == "v1" && s("kind") == "Event" {
            errs.invalid(
                PATH,
                owner,
                "/v1, Kind=Event is disallowed from being an owner",
            );
        }
        if owner.get("controller").and_then(Value::as_bool) == Some(true) {
            let this = format!("{}/{}", s("kind"), s("name"));
            match &controller {
                Some(first) => errs.invalid(
                    PATH,
                    &Value::Array(owners.clone()),
                    &format!("Only one reference can have Controller set to true. Found \"true\" in references for {first} and {this}"),
                ),
                None => controller = Some(this),
            }
        }
    }
}

fn validate_kind(rt: &ResourceType, obj: &Value, errs: &mut Errors) {
    match rt.family {
        Family::ConfigMap => validate_config_map(obj, errs),
        Family::Secret => validate_secret(obj, errs),
        Family::Deployment | Family::StatefulSet | Family::DaemonSet | Family::ReplicaSet => {
            validate_workload(rt, obj, errs)
        }
        Family::ControllerRevision => validate_controller_revision(obj, errs),
        Family::Job => job::validate_job(obj, true, errs),
        Family::CronJob => cronjob::validate_cron_job(obj, None, errs),
        Family::CustomResourceDefinition => crd::validation::validate(obj, errs),
        Family::CoreEvent => validate_core_event(obj, errs),
        Family::EventsV1 => validate_events_v1(obj, errs),
        Family::Lease => {
            if let Some(d) = meta::get_path(obj, &["spec", "leaseDurationSeconds"])
                && d.as_i64().is_none_or(|d| d <= 0)
            {
                errs.invalid("spec.leaseDurationSeconds", d, "must be greater than 0");
            }
        }
        _ => {}
    }
}

/// `ValidateControllerRevision` (`pkg/apis/apps/validation/validation.go`):
/// `data` is mandatory, `revision` non-negative.
fn validate_controller_revision(obj: &Value, errs: &mut Errors) {
    if obj.get("data").is_none_or(Value::is_null) {
        errs.required("data", "data is mandatory");
    }
    if let Some(r) = obj.get("revision")
        && r.as_i64().is_none_or(|n| n < 0)
    {
        errs.invalid("revision", r, "must be greater than or equal to 0");
    }
}

fn validate_config_map(obj: &Value, errs: &mut Errors) {
    let data = obj.get("data").and_then(Value::as_object);
    let binary = obj.get("binaryData").and_then(Value::as_object);
    let mut total = 0usize;
    for (field, m) in [("data", data), ("binaryData", binary)] {
        for (k, v) in m.into_iter().flatten() {
            if !is_config_key(k) {
                errs.invalid(
                    format!("{field}[{k}]"),
                    &Value::from(k.as_str()),
                    CONFIG_KEY_MSG,
                );
            }
            if field == "data" && !v.is_string() {
                errs.invalid(format!("data[{k}]"), v, "must be a string");
            }
            total += v.as_str().map_or(0, str::len);
        }
    }
    if let (Some(d), Some(b)) = (data, binary) {
        for k in d.keys().filter(|k| b.contains_key(*k)) {
            errs.invalid(
                format!("data[{k}]"),
                &Value::from(k.as_str()),
                "duplicate of key present in binaryData",
            );
        }
    }
    if total > 1024 * 1024 {
        errs.push(
            "FieldValueTooLong",
            "",
            "Too long: may not be more than 1048576 bytes".to_string(),
        );
    }
}

fn validate_secret(obj: &Value, errs: &mut Errors) {
    let mut total = 0usize;
    for (k, v) in obj
        .get("data")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if !is_config_key(k) {
            errs.invalid(
                format!("data[{k}]"),
                &Value::from(k.as_str()),
                CONFIG_KEY_MSG,
            );
        }
        total += v.as_str().map_or(0, |s| s.len() * 3 / 4);
    }
    if total > 1024 * 1024 {
        errs.push(
            "FieldValueTooLong",
            "data",
            "Too long: may not be more than 1048576 bytes".to_string(),
        );
    }
    let data_has = |k: &str| {
        obj.get("data")
            .and_then(Value::as_object)
            .is_some_and(|d| d.contains_key(k))
    };
    match obj.get("type").and_then(Value::as_str).unwrap_or("Opaque") {
        "kubernetes.io/tls" => {
            for k in ["tls.crt", "tls.key"] {
                if !data_has(k) {
                    errs.required(format!("data[{k}]"), "");
                }
            }
        }
        "kubernetes.io/dockerconfigjson" if !data_has(".dockerconfigjson") => {
            errs.required("data[.dockerconfigjson]", "");
        }
        "kubernetes.io/basic-auth" if !data_has("username") && !data_has("password") => {
            errs.required("data[username]", "");
        }
        _ => {}
    }
}

fn validate_core_event(obj: &Value, errs: &mut Errors) {
    let ns = meta::namespace(obj);
    if let Some(io_ns) =
        meta::get_path(obj, &["involvedObject", "namespace"]).and_then(Value::as_str)
        && !io_ns.is_empty()
        && io_ns != ns
    {
        errs.invalid(
            "involvedObject.namespace",
            &Value::from(io_ns),
            "does not match event.namespace",
        );
    }
}

fn validate_events_v1(obj: &Value, errs: &mut Errors) {
    let s = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or("");
    if obj.get("eventTime").is_none_or(Value::is_null) {
        errs.required("eventTime", "");
    }
    if s("reportingController").is_empty() {
        errs.required("reportingController", "");
    }
    if s("reportingInstance").is_empty() {
        errs.required("reportingInstance", "");
    }
    if s("action").is_empty() {
        errs.required("action", "");
    }
    if s("reason").is_empty() {
        errs.required("reason", "");
    }
    let t = s("type");
    if t != "Normal" && t != "Warning" {
        errs.unsupported("type", &Value::from(t), &["Normal", "Warning"]);
    }
    if s("note").len() > 1024 {
        errs.push(
            "FieldValueTooLong",
            "note",
            "Too long: may not be more than 1024 bytes".into(),
        );
    }
}

/// Evaluates a `metav1.LabelSelector` against labels. `None` when the
/// selector is malformed.
pub(crate) fn label_selector_matches(
    selector: &Value,
    labels: Option<&Map<String, Value>>,
) -> Option<bool> {
    let sel = selector.as_object()?;
    let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    if let Some(ml) = sel.get("matchLabels") {
        for (k, v) in ml.as_object()? {
            if get(k) != Some(v.as_str()?) {
                return Some(false);
            }
        }
    }
    if let Some(me) = sel.get("matchExpressions") {
        for e in me.as_array()? {
            let key = e.get("key")?.as_str()?;
            let values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let ok = match e.get("operator")?.as_str()? {
                "In" => get(key).is_some_and(|v| values.contains(&v)),
                "NotIn" => get(key).is_none_or(|v| !values.contains(&v)),
                "Exists" => get(key).is_some(),
                "DoesNotExist" => get(key).is_none(),
                _ => return None,
            };
            if !ok {
                return Some(false);
            }
        }
    }
    Some(true)
}

fn validate_workload(rt: &ResourceType, obj: &Value, errs: &mut Errors) {
    let spec = obj.get("spec");
    let selector = spec
        .and_then(|s| s.get("selector"))
        .filter(|s| !s.is_null());
    let template_labels =
        meta::get_path(obj, &["spec", "template", "metadata", "labels"]).and_then(Value::as_object);
    match selector {
        None => {
            errs.required("spec.selector", "");
            errs.invalid(
                "spec.template.metadata.labels",
                &template_labels.map_or(Value::Null, |l| Value::Object(l.clone())),
                "`selector` does not match template `labels`",
            );
        }
        Some(sel) => {
            let empty = sel.as_object().is_some_and(|m| {
                m.get("matchLabels")
                    .and_then(Value::as_object)
                    .is_none_or(Map::is_empty)
                    && m.get("matchExpressions")
                        .and_then(Value::as_array)
                        .is_none_or(Vec::is_empty)
            });
            if empty {
                errs.invalid(
                    "spec.selector",
                    sel,
                    &format!("empty selector is invalid for {}", rt.singular),
                );
            } else {
                match label_selector_matches(sel, template_labels) {
                    None => errs.invalid("spec.selector", sel, "invalid label selector"),
                    Some(false) => errs.invalid(
                        "spec.template.metadata.labels",
                        &template_labels.map_or(Value::Null, |l| Value::Object(l.clone())),
                        "`selector` does not match template `labels`",
                    ),
                    Some(true) => {}
                }
            }
        }
    }
    for f in ["replicas", "revisionHistoryLimit", "minReadySeconds"] {
        if let Some(v) = spec.and_then(|s| s.get(f))
            && v.as_i64().is_none_or(|n| n < 0)
        {
            errs.invalid(format!("spec.{f}"), v, "must be greater than or equal to 0");
        }
    }
    if rt.family == Family::Deployment {
        let strategy = meta::get_path(obj, &["spec", "strategy"]);
        let t = strategy
            .and_then(|s| s.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("");
        match t {
            "Recreate" if strategy.and_then(|s| s.get("rollingUpdate")).is_some() => errs
                .forbidden(
                    "spec.strategy.rollingUpdate",
                    "may not be specified when strategy `type` is 'Recreate'",
                ),
            "Recreate" | "RollingUpdate" => {}
            other => errs.unsupported(
                "spec.strategy.type",
                &Value::from(other),
                &["Recreate", "RollingUpdate"],
            ),
        }
    }
    let pod_spec = meta::get_path(obj, &["spec", "template", "spec"]);
    validate_pod_spec("spec.template.spec", pod_spec, errs);
    if let Some(rp) = pod_spec
        .and_then(|s| s.get("restartPolicy"))
        .and_then(Value::as_str)
        && rp != "Always"
    {
        errs.unsupported(
            "spec.template.spec.restartPolicy",
            &Value::from(rp),
            &["Always"],
        );
    }
}

/// The checks of a pod spec that controllers hit, with errors under `prefix`
/// (e.g. `spec.template.spec`).
pub(crate) fn validate_pod_spec(prefix: &str, spec: Option<&Value>, errs: &mut Errors) {
    let p = prefix;
    let containers = spec
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_array);
    let volumes: Vec<&str> = spec
        .and_then(|s| s.get("volumes"))
        .and_then(Value::as_array)
        .map(|v| {
            v.iter()
                .filter_map(|v| v.get("name").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    let mut seen_vol = Vec::new();
    for (i, name) in volumes.iter().enumerate() {
        if !is_dns1123_label(name) {
            errs.invalid(
                format!("{p}.volumes[{i}].name"),
                &Value::from(*name),
                DNS1123_LABEL_MSG,
            );
        }
        if seen_vol.contains(name) {
            errs.duplicate(format!("{p}.volumes[{i}].name"), &Value::from(*name));
        }
        seen_vol.push(name);
    }
    match containers {
        None => errs.required(format!("{p}.containers"), ""),
        Some(c) if c.is_empty() => errs.required(format!("{p}.containers"), ""),
        Some(_) => {}
    }
    let mut names: Vec<String> = Vec::new();
    for (list, items) in [
        (
            "initContainers",
            spec.and_then(|s| s.get("initContainers"))
                .and_then(Value::as_array),
        ),
        ("containers", containers),
    ] {
        for (i, c) in items.into_iter().flatten().enumerate() {
            let field = format!("{p}.{list}[{i}]");
            match c.get("name").and_then(Value::as_str) {
                None | Some("") => errs.required(format!("{field}.name"), ""),
                Some(n) => {
                    if !is_dns1123_label(n) {
                        errs.invalid(format!("{field}.name"), &Value::from(n), DNS1123_LABEL_MSG);
                    }
                    if names.iter().any(|x| x == n) {
                        errs.duplicate(format!("{field}.name"), &Value::from(n));
                    }
                    names.push(n.to_string());
                }
            }
            if c.get("image")
                .and_then(Value::as_str)
                .is_none_or(|s| s.trim().is_empty())
            {
                errs.required(format!("{field}.image"), "");
            }
            for (j, m) in c
                .get("volumeMounts")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let n = m.get("name").and_then(Value::as_str).unwrap_or("");
                if !volumes.contains(&n) {
                    errs.not_found(format!("{field}.volumeMounts[{j}].name"), &Value::from(n));
                }
                if m.get("mountPath")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    errs.required(format!("{field}.volumeMounts[{j}].mountPath"), "");
                }
            }
            for (j, p) in c
                .get("ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let port = p.get("containerPort");
                if port
                    .and_then(Value::as_i64)
                    .is_none_or(|n| !(1..=65535).contains(&n))
                {
                    errs.invalid(
                        format!("{field}.ports[{j}].containerPort"),
                        port.unwrap_or(&Value::Null),
                        "must be between 1 and 65535, inclusive",
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{DEPLOYMENTS, builtin};
    use serde_json::json;

    #[test]
    fn names() {
        assert!(is_dns1123_subdomain("a.b-c"));
        assert!(!is_dns1123_subdomain("A"));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(is_dns1123_label("ns-1"));
        assert!(!is_dns1123_label("ns.1"));
        assert!(is_qualified_name("example.com/My_key"));
        assert!(!is_qualified_name("-x"));
    }

    #[test]
    fn partial_deployment_is_invalid_like_the_transcript() {
        let rt = &builtin(DEPLOYMENTS);
        let mut obj = json!({"metadata": {"name": "absent"}, "spec": {"template": {"metadata": {"annotations": {"a": "b"}}}}});
        crate::strategy::normalize(&mut obj);
        crate::strategy::apply_defaults(rt, &mut obj);
        let e = validate_create(rt, &obj).unwrap_err();
        assert_eq!(
            e.message,
            "Deployment.apps \"absent\" is invalid: [spec.selector: Required value, spec.template.metadata.labels: Invalid value: null: `selector` does not match template `labels`, spec.template.spec.containers: Required value]"
        );
    }

    /// `ValidateControllerRevision` and `ValidateControllerRevisionUpdate`
    /// (`pkg/apis/apps/validation/validation.go`).
    #[test]
    fn controller_revisions_need_data_that_never_changes() {
        let rt = (0..crate::resources::BUILTINS.len())
            .map(builtin)
            .find(|rt| rt.kind == "ControllerRevision")
            .expect("served");
        let e =
            validate_create(&rt, &json!({"metadata": {"name": "r"}, "revision": -1})).unwrap_err();
        assert_eq!(
            e.message,
            "ControllerRevision.apps \"r\" is invalid: [data: Required value: data is mandatory, revision: Invalid value: -1: must be greater than or equal to 0]"
        );
        let old = json!({"metadata": {"name": "r"}, "data": {"a": 1}, "revision": 1});
        let mut renumbered = old.clone();
        renumbered["revision"] = json!(2);
        assert!(validate_update(&rt, &old, &renumbered).is_ok());
        let mut changed = old.clone();
        changed["data"] = json!({"a": 2});
        let e = validate_update(&rt, &old, &changed).unwrap_err();
        assert!(
            e.message
                .ends_with("data: Invalid value: {\"a\":2}: field is immutable"),
            "{}",
            e.message
        );
    }

    /// `ValidateOwnerReferences` (apimachinery's `api/validation/objectmeta.go`).
    #[test]
    fn owner_references_name_a_version_kind_name_and_uid_and_one_controller() {
        let rt = (0..crate::resources::BUILTINS.len())
            .map(builtin)
            .find(|rt| rt.kind == "ConfigMap")
            .expect("served");
        let with = |owners: Value| json!({"metadata": {"name": "c", "ownerReferences": owners}});
        let good =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u1"});
        assert!(validate_create(&rt, &with(json!([good]))).is_ok());
        let e = validate_create(
            &rt,
            &with(json!([{"apiVersion": "apps/", "kind": "", "name": "web"}])),
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "ConfigMap \"c\" is invalid: [metadata.ownerReferences.apiVersion: Invalid value: \"apps/\": version must not be empty, metadata.ownerReferences.kind: Invalid value: \"\": kind must not be empty, metadata.ownerReferences.uid: Invalid value: \"\": uid must not be empty]"
        );
        let controller = |name: &str| json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": name, "controller": true});
        let e = validate_create(&rt, &with(json!([controller("a"), controller("b")]))).unwrap_err();
        assert!(
            e.message.contains("Only one reference can have Controller set to true. Found \"true\" in references for Deployment/a and Deployment/b"),
            "{}",
            e.message
        );
        let event = json!({"apiVersion": "v1", "kind": "Event", "name": "e", "uid": "u"});
        assert!(validate_create(&rt, &with(json!([event]))).is_err());
    }

    #[test]
    fn selector_matching() {
        let labels = json!({"app": "web", "tier": "x"});
        let l = labels.as_object();
        assert_eq!(
            label_selector_matches(&json!({"matchLabels": {"app": "web"}}), l),
            Some(true)
        );
        assert_eq!(
            label_selector_matches(
                &json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]}]}),
                l
            ),
            Some(false)
        );
        assert_eq!(
            label_selector_matches(
                &json!({"matchExpressions": [{"key": "a", "operator": "Bad"}]}),
                l
            ),
            None
        );
    }
}
