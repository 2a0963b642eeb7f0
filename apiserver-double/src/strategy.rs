//! What the apiserver does to an object between decoding and storage:
//! decode-time checks, normalization to the Go round-trip form, defaults,
//! and the per-kind create/update preparation (status reset, generation).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};

use crate::batch::{cronjob, job};
use crate::managed::Subresource;
use crate::meta;
use crate::resources::{Family, ResourceType};
use crate::schema::{self, MapType};
use crate::status::{ApiError, ApiResult};
use crate::{crd, custom};

fn cannot_handle(rt: &ResourceType, why: &str) -> ApiError {
    ApiError::bad_request(format!(
        "{} in version \"{}\" cannot be handled as a {}: {why}",
        rt.kind, rt.version, rt.kind
    ))
}

fn base64_error(s: &str) -> Option<String> {
    let clean: String = s.chars().filter(|c| *c != '\r' && *c != '\n').collect();
    match STANDARD.decode(clean.as_bytes()) {
        Ok(_) => None,
        Err(base64::DecodeError::InvalidByte(i, _))
        | Err(base64::DecodeError::InvalidLastSymbol(i, _)) => {
            Some(format!("illegal base64 data at input byte {i}"))
        }
        Err(_) => Some(format!(
            "illegal base64 data at input byte {}",
            clean.len() - clean.len() % 4
        )),
    }
}

/// Checks that the typed decoder of the real apiserver would accept the
/// object, and applies conversions that happen while decoding (Secret
/// `stringData` folds into `data`).
pub(crate) fn decode(rt: &ResourceType, obj: &mut Value) -> ApiResult<()> {
    if !obj.is_object() {
        return Err(cannot_handle(
            rt,
            "json: cannot unmarshal non-object into Go value",
        ));
    }
    if let Some(m) = obj.get("metadata")
        && !m.is_object()
        && !m.is_null()
    {
        return Err(cannot_handle(
            rt,
            &format!(
                "json: cannot unmarshal {} into Go struct field {}.metadata of type v1.ObjectMeta",
                json_type(m),
                rt.kind
            ),
        ));
    }
    for field in ["labels", "annotations"] {
        if let Some(m) = meta::metadata(obj).and_then(|m| m.get(field))
            && !m.is_null()
        {
            let ok = m
                .as_object()
                .is_some_and(|m| m.values().all(|v| v.is_string() || v.is_null()));
            if !ok {
                return Err(cannot_handle(
                    rt,
                    &format!(
                        "json: cannot unmarshal into Go struct field ObjectMeta.metadata.{field} of type map[string]string"
                    ),
                ));
            }
        }
    }
    match rt.family {
        Family::ConfigMap => {
            for (field, base64) in [("data", false), ("binaryData", true)] {
                let Some(v) = obj.get(field) else { continue };
                if v.is_null() {
                    continue;
                }
                let Some(m) = v.as_object() else {
                    return Err(cannot_handle(
                        rt,
                        &format!(
                            "json: cannot unmarshal {} into Go struct field ConfigMap.{field}",
                            json_type(v)
                        ),
                    ));
                };
                for val in m.values() {
                    match val {
                        Value::String(s) if base64 => {
                            if let Some(e) = base64_error(s) {
                                return Err(cannot_handle(rt, &e));
                            }
                        }
                        Value::String(_) | Value::Null => {}
                        other => {
                            return Err(cannot_handle(
                                rt,
                                &format!(
                                    "json: cannot unmarshal {} into Go struct field ConfigMap.{field} of type string",
                                    json_type(other)
                                ),
                            ));
                        }
                    }
                }
            }
        }
        Family::Secret => {
            if let Some(v) = obj.get("data").filter(|v| !v.is_null()) {
                let Some(m) = v.as_object() else {
                    return Err(cannot_handle(
                        rt,
                        "json: cannot unmarshal into Go struct field Secret.data of type map[string][]uint8",
                    ));
                };
                for val in m.values() {
                    match val {
                        Value::String(s) => {
                            if let Some(e) = base64_error(s) {
                                return Err(cannot_handle(rt, &e));
                            }
                        }
                        Value::Null => {}
                        _ => {
                            return Err(cannot_handle(
                                rt,
                                "json: cannot unmarshal into Go struct field Secret.data of type []uint8",
                            ));
                        }
                    }
                }
            }
            if let Some(sd) = obj.as_object_mut().and_then(|o| o.remove("stringData"))
                && let Value::Object(sd) = sd
            {
                let data = meta::ensure_map(obj, &["data"])
                    .ok_or_else(|| cannot_handle(rt, "data is not a map"))?;
                for (k, v) in sd {
                    let s = v.as_str().ok_or_else(|| {
                        cannot_handle(rt, "json: cannot unmarshal into Go struct field Secret.stringData of type string")
                    })?;
                    data.insert(k, Value::from(STANDARD.encode(s.as_bytes())));
                }
            }
        }
        Family::Deployment
        | Family::StatefulSet
        | Family::DaemonSet
        | Family::ReplicaSet
        | Family::Job
        | Family::CronJob => {
            if let Some(spec) = obj.get("spec")
                && !spec.is_object()
                && !spec.is_null()
            {
                return Err(cannot_handle(
                    rt,
                    "json: cannot unmarshal into Go struct field spec",
                ));
            }
            if let Some(r) = meta::get_path(obj, &["spec", "replicas"])
                && !r.is_null()
                && !r.is_i64()
            {
                return Err(cannot_handle(
                    rt,
                    &format!(
                        "json: cannot unmarshal {} into Go struct field {}Spec.spec.replicas of type int32",
                        json_type(r),
                        rt.kind
                    ),
                ));
            }
        }
        Family::ControllerRevision => {
            if let Some(r) = obj.get("revision")
                && !r.is_null()
                && !r.is_i64()
            {
                return Err(cannot_handle(
                    rt,
                    &format!(
                        "json: cannot unmarshal {} into Go struct field ControllerRevision.revision of type int64",
                        json_type(r)
                    ),
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Brings an object to the form a Go round trip gives it: nulls and empty
/// `omitempty` maps and lists dropped.
pub(crate) fn normalize(obj: &mut Value) {
    normalize_node(obj);
}

fn normalize_node(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, c| !c.is_null());
            for c in m.values_mut() {
                normalize_node(c);
            }
            m.retain(|k, c| match c {
                Value::Object(cm) => !(cm.is_empty() && schema::map_type(k) == MapType::Granular),
                Value::Array(a) => !a.is_empty() || k == "containers",
                _ => true,
            });
        }
        Value::Array(items) => {
            for i in items.iter_mut() {
                normalize_node(i);
            }
        }
        _ => {}
    }
}

/// Inserts the kind's always-serialized fields where missing.
fn fill_skeleton(obj: &mut Value, skeleton: &Value) {
    let (Value::Object(o), Value::Object(s)) = (obj, skeleton) else {
        return;
    };
    for (k, sv) in s {
        match o.get_mut(k) {
            None => {
                o.insert(k.clone(), sv.clone());
            }
            Some(ov) => fill_skeleton(ov, sv),
        }
    }
}

/// Sets `key` to `v` when it is missing or null.
pub(crate) fn set_default(m: &mut Map<String, Value>, key: &str, v: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.to_string(), v);
    }
}

/// Brings a decoded object to its stored form: the Go round trip for
/// built-in kinds, metadata coercion and pruning for custom resources.
pub(crate) fn normalize_for(rt: &ResourceType, obj: &mut Value) {
    if rt.is_custom() {
        custom::normalize(rt, obj);
    } else if rt.family == Family::ControllerRevision {
        // `data` is a RawExtension: stored as sent, not round-tripped.
        let data = obj.as_object_mut().and_then(|o| o.remove("data"));
        normalize(obj);
        if let (Some(data), Some(o)) = (data.filter(|d| !d.is_null()), obj.as_object_mut()) {
            o.insert("data".into(), data);
        }
    } else {
        normalize(obj);
    }
}

/// Applies the kind's defaults (`SetDefaults_*`).
pub(crate) fn apply_defaults(rt: &ResourceType, obj: &mut Value) {
    fill_skeleton(obj, &rt.skeleton());
    match rt.family {
        Family::Custom => custom::apply_defaults(rt, obj),
        Family::CustomResourceDefinition => crd::validation::defaults(obj),
        Family::Namespace => {
            let name = meta::name(obj).to_string();
            if !name.is_empty()
                && let Some(labels) = meta::ensure_map(obj, &["metadata", "labels"])
            {
                labels.insert("kubernetes.io/metadata.name".into(), Value::from(name));
            }
        }
        Family::Secret => {
            if let Some(o) = obj.as_object_mut() {
                set_default(o, "type", Value::from("Opaque"));
            }
        }
        Family::Deployment => {
            if let Some(spec) = meta::ensure_map(obj, &["spec"]) {
                set_default(spec, "replicas", json!(1));
                set_default(spec, "revisionHistoryLimit", json!(10));
                set_default(spec, "progressDeadlineSeconds", json!(600));
            }
            if let Some(strategy) = meta::ensure_map(obj, &["spec", "strategy"]) {
                set_default(strategy, "type", json!("RollingUpdate"));
                if strategy.get("type") == Some(&json!("RollingUpdate")) {
                    let ru = strategy.entry("rollingUpdate").or_insert_with(|| json!({}));
                    if let Some(ru) = ru.as_object_mut() {
                        set_default(ru, "maxUnavailable", json!("25%"));
                        set_default(ru, "maxSurge", json!("25%"));
                    }
                }
            }
            default_pod_template(obj);
        }
        Family::StatefulSet => {
            if let Some(spec) = meta::ensure_map(obj, &["spec"]) {
                set_default(spec, "replicas", json!(1));
                set_default(spec, "revisionHistoryLimit", json!(10));
                set_default(spec, "podManagementPolicy", json!("OrderedReady"));
                set_default(
                    spec,
                    "persistentVolumeClaimRetentionPolicy",
                    json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
                );
            }
            if let Some(us) = meta::ensure_map(obj, &["spec", "updateStrategy"]) {
                set_default(us, "type", json!("RollingUpdate"));
                if us.get("type") == Some(&json!("RollingUpdate")) {
                    let ru = us.entry("rollingUpdate").or_insert_with(|| json!({}));
                    if let Some(ru) = ru.as_object_mut() {
                        set_default(ru, "partition", json!(0));
                    }
                }
            }
            default_pod_template(obj);
        }
        Family::ReplicaSet => {
            if let Some(spec) = meta::ensure_map(obj, &["spec"]) {
                set_default(spec, "replicas", json!(1));
            }
            default_pod_template(obj);
        }
        Family::DaemonSet => {
            if let Some(spec) = meta::ensure_map(obj, &["spec"]) {
                set_default(spec, "revisionHistoryLimit", json!(10));
            }
            if let Some(us) = meta::ensure_map(obj, &["spec", "updateStrategy"]) {
                set_default(us, "type", json!("RollingUpdate"));
                if us.get("type") == Some(&json!("RollingUpdate")) {
                    let ru = us.entry("rollingUpdate").or_insert_with(|| json!({}));
                    if let Some(ru) = ru.as_object_mut() {
                        set_default(ru, "maxUnavailable", json!(1));
                        set_default(ru, "maxSurge", json!(0));
                    }
                }
            }
            default_pod_template(obj);
        }
        Family::Job => {
            job::default_job(obj);
            default_pod_template(obj);
        }
        Family::CronJob => cronjob::default_cron_job(obj),
        Family::MutatingWebhookConfiguration => {
            if let Some(Value::Array(hooks)) = obj.get_mut("webhooks") {
                for h in hooks.iter_mut().filter_map(Value::as_object_mut) {
                    set_default(h, "failurePolicy", json!("Fail"));
                    set_default(h, "matchPolicy", json!("Equivalent"));
                    set_default(h, "namespaceSelector", json!({}));
                    set_default(h, "objectSelector", json!({}));
                    set_default(h, "timeoutSeconds", json!(10));
                    set_default(h, "reinvocationPolicy", json!("Never"));
                    if let Some(Value::Array(rules)) = h.get_mut("rules") {
                        for r in rules.iter_mut().filter_map(Value::as_object_mut) {
                            set_default(r, "scope", json!("*"));
                        }
                    }
                    if let Some(Value::Object(svc)) =
                        h.get_mut("clientConfig").and_then(|c| c.get_mut("service"))
                    {
                        set_default(svc, "port", json!(443));
                    }
                }
            }
        }
        _ => {}
    }
}

fn default_pod_template(obj: &mut Value) {
    default_pod_template_at(obj, &["spec", "template"]);
}

/// `SetDefaults_PodSpec` and friends for the pod template at `path`.
pub(crate) fn default_pod_template_at(obj: &mut Value, path: &[&str]) {
    let mut spec_path = path.to_vec();
    spec_path.push("spec");
    let Some(spec) = meta::ensure_map(obj, &spec_path) else {
        return;
    };
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    for list in ["containers", "initContainers"] {
        if let Some(Value::Array(cs)) = spec.get_mut(list) {
            for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                default_container(c);
            }
        }
    }
    if let Some(Value::Array(vols)) = spec.get_mut("volumes") {
        for v in vols.iter_mut().filter_map(Value::as_object_mut) {
            for source in ["configMap", "secret", "projected", "downwardAPI"] {
                if let Some(Value::Object(s)) = v.get_mut(source) {
                    set_default(s, "defaultMode", json!(420));
                }
            }
            if let Some(Value::Object(hp)) = v.get_mut("hostPath") {
                set_default(hp, "type", json!(""));
            }
        }
    }
}

fn default_container(c: &mut Map<String, Value>) {
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    set_default(c, "resources", json!({}));
    let image = c.get("image").and_then(Value::as_str).unwrap_or("");
    let last = image.rsplit('/').next().unwrap_or("");
    let policy = if image.contains('@') || (last.contains(':') && !last.ends_with(":latest")) {
        "IfNotPresent"
    } else {
        "Always"
    };
    set_default(c, "imagePullPolicy", json!(policy));
    if let Some(Value::Array(ports)) = c.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(p, "protocol", json!("TCP"));
        }
    }
    if let Some(Value::Array(env)) = c.get_mut("env") {
        for e in env.iter_mut() {
            if let Some(Value::Object(fr)) =
                e.get_mut("valueFrom").and_then(|v| v.get_mut("fieldRef"))
            {
                set_default(fr, "apiVersion", json!("v1"));
            }
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(Value::Object(p)) = c.get_mut(probe) {
            set_default(p, "timeoutSeconds", json!(1));
            set_default(p, "periodSeconds", json!(10));
            set_default(p, "successThreshold", json!(1));
            set_default(p, "failureThreshold", json!(3));
            if let Some(Value::Object(h)) = p.get_mut("httpGet") {
                set_default(h, "scheme", json!("HTTP"));
            }
        }
    }
}

/// Create-time preparation (`PrepareForCreate`).
pub(crate) fn prepare_create(rt: &ResourceType, obj: &mut Value) {
    let resets_status = rt.is_workload() || matches!(rt.family, Family::Job | Family::CronJob);
    if resets_status && let Some(o) = obj.as_object_mut() {
        o.insert(
            "status".into(),
            rt.skeleton().get("status").cloned().unwrap_or(json!({})),
        );
    }
    match rt.family {
        Family::Custom => custom::prepare_create(rt, obj),
        Family::CustomResourceDefinition => crd::validation::prepare_create(obj),
        _ => {}
    }
    if rt.family == Family::Namespace {
        if let Some(spec) = meta::ensure_map(obj, &["spec"]) {
            set_default(spec, "finalizers", json!(["kubernetes"]));
        }
        if let Some(o) = obj.as_object_mut() {
            o.insert("status".into(), json!({"phase": "Active"}));
        }
    }
    if rt.has_generation() {
        meta::set_meta(obj, "generation", 1);
    }
}

/// Custom resources are stored in their CRD's storage version (the `None`
/// conversion only changes `apiVersion`).
pub(crate) fn to_storage_version(rt: &ResourceType, obj: &mut Value) {
    if let (Some(c), Some(o)) = (&rt.custom, obj.as_object_mut()) {
        o.insert(
            "apiVersion".into(),
            Value::from(c.storage_api_version.clone()),
        );
    }
}

/// What the server fills in once the object has its UID, after admission
/// and managed fields, before validation (the Job selector).
pub(crate) fn after_uid(rt: &ResourceType, obj: &mut Value) {
    if rt.family == Family::Job {
        job::generate_selector(obj);
    }
}

/// Update-time preparation (`PrepareForUpdate`): keeps what the endpoint
/// may not change and bumps `metadata.generation` as the kind's strategy
/// does (see [`bumps_generation`]).
pub(crate) fn prepare_update(rt: &ResourceType, old: &Value, new: &mut Value, sub: Subresource) {
    for k in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    ] {
        match meta::metadata(old).and_then(|m| m.get(k)) {
            Some(v) => meta::set_meta(new, k, v.clone()),
            None => {
                meta::metadata_mut(new).remove(k);
            }
        }
    }
    if rt.is_custom() {
        custom::prepare_update(rt, old, new, sub);
        return;
    }
    let keep = |new: &mut Value, field: &str| {
        if let Some(o) = new.as_object_mut() {
            match old.get(field) {
                Some(v) => o.insert(field.to_string(), v.clone()),
                None => o.remove(field),
            };
        }
    };
    match sub {
        Subresource::Main if rt.has_status_subresource() => keep(new, "status"),
        Subresource::Main => {}
        Subresource::Status => {
            keep(new, "spec");
            match meta::metadata(old).and_then(|m| m.get("labels")) {
                Some(l) => meta::set_meta(new, "labels", l.clone()),
                None => {
                    meta::metadata_mut(new).remove("labels");
                }
            }
        }
    }
    if rt.family == Family::CustomResourceDefinition {
        crd::validation::prepare_update(new);
    }
    if rt.family == Family::Namespace
        && let Some(f) = meta::get_path(old, &["spec", "finalizers"]).cloned()
        && let Some(spec) = meta::ensure_map(new, &["spec"])
    {
        spec.insert("finalizers".into(), f);
    }
    if rt.has_generation() {
        let generation = meta::metadata(old)
            .and_then(|m| m.get("generation"))
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let bumped = if sub == Subresource::Main && bumps_generation(rt.family, old, new) {
            generation + 1
        } else {
            generation
        };
        meta::set_meta(new, "generation", bumped);
    }
}

/// Whether an update through the main resource bumps `metadata.generation`,
/// as each kind's `PrepareForUpdate` in kubernetes/kubernetes decides (the
/// `/status` strategies never bump it; custom resources have their own rule
/// in [`custom::prepare_update`]):
///
/// - Deployment (`pkg/registry/apps/deployment/strategy.go`): a change of
///   `spec` or of `metadata.annotations` ("annotation updates bump the
///   generation because annotations are copied from deployments to their
///   replica sets"); labels do not;
/// - StatefulSet, DaemonSet, Job, CronJob (`pkg/registry/apps/statefulset/`,
///   `apps/daemonset/`, `batch/job/`, `batch/cronjob/` `strategy.go`) and
///   CustomResourceDefinition (`staging/src/k8s.io/apiextensions-apiserver/
///   pkg/registry/customresourcedefinition/strategy.go`): a change of `spec`
///   only, metadata (annotations included) never;
/// - MutatingWebhookConfiguration (`pkg/registry/admissionregistration/
///   mutatingwebhookconfiguration/strategy.go`): a change of `webhooks`.
fn bumps_generation(family: Family, old: &Value, new: &Value) -> bool {
    let differs = |field: &str| old.get(field) != new.get(field);
    match family {
        Family::Deployment => differs("spec") || annotations(old) != annotations(new),
        Family::MutatingWebhookConfiguration => differs("webhooks"),
        _ => differs("spec"),
    }
}

/// `metadata.annotations`, where missing, `null` and `{}` are one value, as
/// for `apiequality.Semantic.DeepEqual` (nil and empty maps are equal).
fn annotations(obj: &Value) -> Option<&Map<String, Value>> {
    meta::string_map(obj, "annotations").filter(|m| !m.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{DEPLOYMENTS, SECRETS, builtin};

    #[test]
    fn deployment_defaults_match_the_transcript() {
        let rt = &builtin(DEPLOYMENTS);
        let mut d = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "t"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"annotations": {}, "labels": {"app": "web"}},
                    "spec": {"containers": [{"env": [{"name": "A", "value": "1"}], "image": "registry.invalid/app:1", "name": "c"}]}}}
        });
        normalize(&mut d);
        apply_defaults(rt, &mut d);
        prepare_create(rt, &mut d);
        assert_eq!(
            d["spec"],
            json!({
                "progressDeadlineSeconds": 600, "replicas": 1, "revisionHistoryLimit": 10,
                "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}, "type": "RollingUpdate"},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                    "containers": [{"env": [{"name": "A", "value": "1"}], "image": "registry.invalid/app:1",
                        "imagePullPolicy": "IfNotPresent", "name": "c", "resources": {},
                        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
                    "dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "schedulerName": "default-scheduler",
                    "securityContext": {}, "terminationGracePeriodSeconds": 30}}
            })
        );
        assert_eq!(d["status"], json!({}));
        assert_eq!(d["metadata"]["generation"], json!(1));
    }

    /// The built-in resource type of `kind`.
    fn builtin_kind(kind: &str) -> ResourceType {
        (0..crate::resources::BUILTINS.len())
            .map(builtin)
            .find(|rt| rt.kind == kind)
            .unwrap_or_else(|| panic!("{kind} is served"))
    }

    /// A stored object at generation 3 with an annotation, a label, a spec
    /// and a status.
    fn stored() -> Value {
        json!({
            "metadata": {"name": "w", "namespace": "t", "generation": 3,
                "annotations": {"a": "1"}, "labels": {"l": "1"}},
            "spec": {"replicas": 1},
            "webhooks": [{"name": "w.example.com"}],
            "status": {"observedGeneration": 3}
        })
    }

    /// `metadata.generation` after `change` is written to [`stored`] through `sub`.
    fn generation_after(kind: &str, sub: Subresource, change: impl Fn(&mut Value)) -> i64 {
        let old = stored();
        let mut new = old.clone();
        change(&mut new);
        prepare_update(&builtin_kind(kind), &old, &mut new, sub);
        new["metadata"]["generation"].as_i64().unwrap()
    }

    fn set_annotation(o: &mut Value) {
        o["metadata"]["annotations"]["nudge.dev/config-hash"] = json!("sha256-x");
    }
    fn set_label(o: &mut Value) {
        o["metadata"]["labels"]["team"] = json!("a");
    }
    fn set_spec(o: &mut Value) {
        o["spec"]["replicas"] = json!(2);
    }
    fn set_status(o: &mut Value) {
        o["status"]["observedGeneration"] = json!(4);
    }

    /// `pkg/registry/apps/deployment/strategy.go`, `PrepareForUpdate`: "annotation
    /// updates bump the generation because annotations are copied from deployments
    /// to their replica sets"; the spec bumps it too, labels do not (as
    /// `tests/transcripts/deployment_generation.json` shows for the spec and labels).
    #[test]
    fn deployment_generation_follows_the_spec_and_the_annotations_not_the_labels() {
        let main = Subresource::Main;
        assert_eq!(generation_after("Deployment", main, set_spec), 4);
        assert_eq!(generation_after("Deployment", main, set_annotation), 4);
        let removed = |o: &mut Value| {
            meta::metadata_mut(o).remove("annotations");
        };
        assert_eq!(generation_after("Deployment", main, removed), 4);
        assert_eq!(generation_after("Deployment", main, set_label), 3);
        assert_eq!(generation_after("Deployment", main, |_| {}), 3);
        // apiequality.Semantic.DeepEqual: a nil and an empty map are equal.
        let empty = |o: &mut Value| o["metadata"]["annotations"] = json!({});
        let old = json!({"metadata": {"name": "w", "generation": 1}, "spec": {}});
        let mut new = old.clone();
        empty(&mut new);
        prepare_update(&builtin_kind("Deployment"), &old, &mut new, main);
        assert_eq!(new["metadata"]["generation"], json!(1));
    }

    /// The `/status` strategies (`deploymentStatusStrategy` and the others) keep
    /// the stored spec and never bump the generation.
    #[test]
    fn status_writes_never_bump_the_generation() {
        for kind in ["Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"] {
            let all = |o: &mut Value| {
                set_status(o);
                set_spec(o);
                set_annotation(o);
            };
            assert_eq!(
                generation_after(kind, Subresource::Status, all),
                3,
                "{kind}"
            );
        }
    }

    /// `pkg/registry/apps/statefulset/strategy.go`, `apps/daemonset/strategy.go`,
    /// `batch/job/strategy.go` and `batch/cronjob/strategy.go`, `PrepareForUpdate`:
    /// "Any changes to the spec increment the generation number"; metadata,
    /// annotations included, does not (DaemonSet: "TODO: Any changes to a part of
    /// the object that represents desired state (labels, annotations etc) should
    /// also increment the generation").
    #[test]
    fn statefulset_daemonset_job_and_cronjob_generation_follows_the_spec_only() {
        for kind in ["StatefulSet", "DaemonSet", "Job", "CronJob"] {
            let main = Subresource::Main;
            assert_eq!(generation_after(kind, main, set_spec), 4, "{kind}");
            assert_eq!(generation_after(kind, main, set_annotation), 3, "{kind}");
            assert_eq!(generation_after(kind, main, set_label), 3, "{kind}");
            assert_eq!(generation_after(kind, main, set_status), 3, "{kind}");
        }
    }

    /// `staging/src/k8s.io/apiextensions-apiserver/pkg/registry/
    /// customresourcedefinition/strategy.go`: the spec only;
    /// `pkg/registry/admissionregistration/mutatingwebhookconfiguration/strategy.go`:
    /// `webhooks` only.
    #[test]
    fn crd_and_webhook_configuration_generation_follow_their_desired_state_only() {
        let main = Subresource::Main;
        let crd = "CustomResourceDefinition";
        assert_eq!(generation_after(crd, main, set_spec), 4);
        assert_eq!(generation_after(crd, main, set_annotation), 3);
        let mwc = "MutatingWebhookConfiguration";
        let webhooks = |o: &mut Value| o["webhooks"][0]["name"] = json!("v.example.com");
        assert_eq!(generation_after(mwc, main, webhooks), 4);
        assert_eq!(generation_after(mwc, main, set_annotation), 3);
        assert_eq!(generation_after(mwc, main, set_label), 3);
    }

    #[test]
    fn secret_string_data_and_bad_base64() {
        let rt = &builtin(SECRETS);
        let mut s = json!({"metadata": {"name": "s"}, "stringData": {"a": "hi"}});
        decode(rt, &mut s).unwrap();
        assert_eq!(s, json!({"metadata": {"name": "s"}, "data": {"a": "aGk="}}));
        let mut bad = json!({"metadata": {"name": "s"}, "data": {"a": "not base64!"}});
        let e = decode(rt, &mut bad).unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at input byte 3"
        );
    }

    #[test]
    fn image_pull_policy_rules() {
        for (image, policy) in [
            ("nginx", "Always"),
            ("nginx:latest", "Always"),
            ("nginx:1", "IfNotPresent"),
            ("reg:5000/x", "Always"),
            ("x@sha256:ab", "IfNotPresent"),
        ] {
            let mut c = Map::new();
            c.insert("image".into(), json!(image));
            default_container(&mut c);
            assert_eq!(c["imagePullPolicy"], json!(policy), "{image}");
        }
    }
}
