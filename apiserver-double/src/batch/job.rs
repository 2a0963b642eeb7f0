//! `batch/v1` Jobs: `SetDefaults_Job`, the selector and labels the server
//! generates (`generateSelector`), and `ValidateJob` / `ValidateJobUpdate`.

use serde_json::{Map, Value, json};

use crate::meta;
use crate::strategy::set_default;
use crate::validation::{Errors, label_selector_matches};

/// The label the generated selector selects on.
pub(crate) const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
/// The label naming the Job on its pods.
pub(crate) const JOB_NAME: &str = "batch.kubernetes.io/job-name";
/// The unprefixed labels the server still adds for backwards compatibility.
const LEGACY_CONTROLLER_UID: &str = "controller-uid";
const LEGACY_JOB_NAME: &str = "job-name";

/// `SetDefaults_Job` (and the `manualSelector: false` default) on the spec
/// at `spec` of a Job.
pub(crate) fn default_job(obj: &mut Value) {
    if let Some(spec) = meta::ensure_map(obj, &["spec"]) {
        default_job_spec(spec);
    }
    copy_template_labels(obj);
}

fn default_job_spec(spec: &mut Map<String, Value>) {
    let unset = |s: &Map<String, Value>, k: &str| s.get(k).is_none_or(Value::is_null);
    if unset(spec, "completions") && unset(spec, "parallelism") {
        spec.insert("completions".into(), json!(1));
        spec.insert("parallelism".into(), json!(1));
    }
    set_default(spec, "parallelism", json!(1));
    let backoff = if unset(spec, "backoffLimitPerIndex") {
        json!(6)
    } else {
        json!(i32::MAX)
    };
    set_default(spec, "backoffLimit", backoff);
    set_default(spec, "completionMode", json!("NonIndexed"));
    set_default(spec, "suspend", json!(false));
    set_default(spec, "manualSelector", json!(false));
    let with_failure_policy = !unset(spec, "podFailurePolicy");
    if let Some(Value::Array(rules)) = spec
        .get_mut("podFailurePolicy")
        .and_then(|p| p.get_mut("rules"))
    {
        for rule in rules.iter_mut() {
            if let Some(Value::Array(conds)) = rule.get_mut("onPodConditions") {
                for c in conds.iter_mut().filter_map(Value::as_object_mut) {
                    set_default(c, "status", json!("True"));
                }
            }
        }
    }
    let replacement = if with_failure_policy {
        "Failed"
    } else {
        "TerminatingOrFailed"
    };
    set_default(spec, "podReplacementPolicy", json!(replacement));
}

/// Jobs without labels take their pod template's labels (a default that the
/// apiserver also applies each time it reads a Job back from storage).
fn copy_template_labels(obj: &mut Value) {
    let Some(labels) = meta::get_path(obj, &["spec", "template", "metadata", "labels"])
        .and_then(Value::as_object)
        .filter(|l| !l.is_empty())
        .cloned()
    else {
        return;
    };
    let own_empty = meta::string_map(obj, "labels").is_none_or(Map::is_empty);
    if own_empty {
        meta::set_meta(obj, "labels", Value::Object(labels));
    }
}

/// `generateSelector`, run once the Job has its UID (the apiserver does it
/// in `Validate`, after admission and managed fields): pod template labels
/// naming the Job and a selector on its UID, unless `manualSelector`.
pub(crate) fn generate_selector(obj: &mut Value) {
    if meta::get_path(obj, &["spec", "manualSelector"]) == Some(&json!(true)) {
        return;
    }
    let uid = meta::uid(obj).to_string();
    let name = meta::name(obj).to_string();
    if let Some(labels) = meta::ensure_map(obj, &["spec", "template", "metadata", "labels"]) {
        for key in [LEGACY_JOB_NAME, JOB_NAME] {
            labels
                .entry(key)
                .or_insert_with(|| Value::from(name.clone()));
        }
        for key in [LEGACY_CONTROLLER_UID, CONTROLLER_UID] {
            labels
                .entry(key)
                .or_insert_with(|| Value::from(uid.clone()));
        }
    }
    if let Some(match_labels) = meta::ensure_map(obj, &["spec", "selector", "matchLabels"]) {
        match_labels
            .entry(CONTROLLER_UID)
            .or_insert_with(|| Value::from(uid));
    }
    copy_template_labels(obj);
}

fn spec_i64(obj: &Value, field: &str) -> Option<(i64, Value)> {
    let v = meta::get_path(obj, &["spec", field])?;
    (!v.is_null()).then(|| (v.as_i64().unwrap_or(-1), v.clone()))
}

/// `ValidateJob`: the generated selector, the spec, the selector.
pub(crate) fn validate_job(obj: &Value, prefixed_labels: bool, errs: &mut Errors) {
    validate_generated_selector(obj, prefixed_labels, errs);
    validate_job_spec(obj, &["spec"], errs);
    let selector = meta::get_path(obj, &["spec", "selector"]).filter(|s| !s.is_null());
    let labels =
        meta::get_path(obj, &["spec", "template", "metadata", "labels"]).and_then(Value::as_object);
    match selector {
        None => errs.required("spec.selector", ""),
        Some(sel) => match label_selector_matches(sel, labels) {
            None => errs.invalid("spec.selector", sel, "invalid label selector"),
            Some(false) => errs.invalid(
                "spec.template.metadata.labels",
                &labels.map_or(Value::Null, |l| Value::Object(l.clone())),
                "`selector` does not match template `labels`",
            ),
            Some(true) => {}
        },
    }
    if meta::get_path(obj, &["spec", "completionMode"]) == Some(&json!("Indexed"))
        && let Some((n, _)) = spec_i64(obj, "completions")
        && n > 0
    {
        let hostname = format!("{}-{}", meta::name(obj), n - 1);
        if !crate::validation::is_dns1123_label(&hostname) {
            errs.invalid(
                "metadata.name",
                &Value::from(meta::name(obj)),
                &format!("will not able to create pod with invalid DNS label: {hostname}"),
            );
        }
    }
}

/// `validateGeneratedSelector`: unless `manualSelector`, the template must
/// carry the generated labels and the selector must select only them.
fn validate_generated_selector(obj: &Value, prefixed_labels: bool, errs: &mut Errors) {
    if meta::get_path(obj, &["spec", "manualSelector"]) == Some(&json!(true)) {
        return;
    }
    let Some(selector) = meta::get_path(obj, &["spec", "selector"]).filter(|s| !s.is_null()) else {
        return;
    };
    let uid = meta::uid(obj);
    let name = meta::name(obj);
    if uid.is_empty() {
        errs.required("metadata.uid", "");
    }
    let labels =
        meta::get_path(obj, &["spec", "template", "metadata", "labels"]).and_then(Value::as_object);
    let mut wanted = vec![(LEGACY_CONTROLLER_UID, uid), (LEGACY_JOB_NAME, name)];
    if prefixed_labels {
        wanted.extend([(CONTROLLER_UID, uid), (JOB_NAME, name)]);
    }
    for (key, expected) in wanted {
        let field = format!("spec.template.metadata.labels[{key}]");
        match labels.and_then(|l| l.get(key)).and_then(Value::as_str) {
            None => errs.required(field, &format!("must be '{expected}'")),
            Some(v) if v != expected => errs.invalid(
                field,
                &labels.map_or(Value::Null, |l| Value::Object(l.clone())),
                &format!("must be '{expected}'"),
            ),
            Some(_) => {}
        }
    }
    let mut expected = Map::new();
    expected.insert(LEGACY_CONTROLLER_UID.into(), Value::from(uid));
    if prefixed_labels {
        expected.insert(CONTROLLER_UID.into(), Value::from(uid));
    }
    if label_selector_matches(selector, Some(&expected)) == Some(false) {
        errs.invalid("spec.selector", selector, "`selector` not auto-generated");
    }
}

/// `validateJobSpec` for the Job spec at `path` (a Job's `spec`, or a
/// CronJob's `spec.jobTemplate.spec`); error paths are prefixed accordingly.
pub(crate) fn validate_job_spec(obj: &Value, path: &[&str], errs: &mut Errors) {
    let p = path.join(".");
    let spec = meta::get_path(obj, path);
    let get = |f: &str| spec.and_then(|s| s.get(f)).filter(|v| !v.is_null());
    for f in [
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
        "backoffLimitPerIndex",
        "maxFailedIndexes",
    ] {
        if let Some(v) = get(f)
            && v.as_i64().is_none_or(|n| n < 0)
        {
            errs.invalid(format!("{p}.{f}"), v, "must be greater than or equal to 0");
        }
    }
    if let Some(mode) = get("completionMode") {
        match mode.as_str() {
            Some("NonIndexed") => {}
            Some("Indexed") => {
                if get("completions").is_none() {
                    errs.required(
                        format!("{p}.completions"),
                        "when completion mode is Indexed",
                    );
                }
            }
            _ => errs.unsupported(
                format!("{p}.completionMode"),
                mode,
                &["NonIndexed", "Indexed"],
            ),
        }
    }
    if let Some(policy) = get("podReplacementPolicy") {
        match policy.as_str() {
            Some("TerminatingOrFailed" | "Failed") => {}
            _ => errs.unsupported(
                format!("{p}.podReplacementPolicy"),
                policy,
                &["TerminatingOrFailed", "Failed"],
            ),
        }
    }
    let template = format!("{p}.template.spec");
    let mut pod_path = path.to_vec();
    pod_path.extend(["template", "spec"]);
    let pod_spec = meta::get_path(obj, &pod_path);
    crate::validation::validate_pod_spec(&template, pod_spec, errs);
    let restart = pod_spec
        .and_then(|s| s.get("restartPolicy"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let field = format!("{template}.restartPolicy");
    match restart {
        "" | "Always" => errs.required(field, "valid values: \"OnFailure\", \"Never\""),
        "OnFailure" if get("podFailurePolicy").is_some() => errs.invalid(
            field,
            &Value::from(restart),
            "only \"Never\" is supported when podFailurePolicy is specified",
        ),
        "OnFailure" | "Never" => {}
        other => errs.unsupported(field, &Value::from(other), &["OnFailure", "Never"]),
    }
}

/// `ValidateJobSpecUpdate`: what may not change after create.
pub(crate) fn validate_job_update(old: &Value, new: &Value, errs: &mut Errors) {
    let get = |o: &'_ Value, f: &str| meta::get_path(o, &["spec", f]).cloned();
    let immutable = |errs: &mut Errors, f: &str| {
        let (o, n) = (get(old, f), get(new, f));
        if o != n {
            errs.invalid(
                format!("spec.{f}"),
                n.as_ref().unwrap_or(&Value::Null),
                "field is immutable",
            );
        }
    };
    validate_completions_update(old, new, errs);
    immutable(errs, "selector");
    validate_template_update(old, new, errs);
    for f in [
        "completionMode",
        "podFailurePolicy",
        "backoffLimitPerIndex",
        "managedBy",
        "successPolicy",
        "podReplacementPolicy",
    ] {
        immutable(errs, f);
    }
}

/// `completions` may change only for Indexed Jobs, together with `parallelism`.
fn validate_completions_update(old: &Value, new: &Value, errs: &mut Errors) {
    let get = |o: &'_ Value, f: &str| meta::get_path(o, &["spec", f]).cloned();
    let (o, n) = (get(old, "completions"), get(new, "completions"));
    if o == n {
        return;
    }
    let indexed = get(new, "completionMode") == Some(json!("Indexed"));
    if !indexed {
        errs.invalid(
            "spec.completions",
            n.as_ref().unwrap_or(&Value::Null),
            "field is immutable",
        );
    } else if let Some(n) = n
        && Some(&n) != get(new, "parallelism").as_ref()
    {
        errs.invalid(
            "spec.completions",
            &n,
            "can only be modified in tandem with spec.parallelism",
        );
    }
}

/// The pod template is immutable, except the scheduling directives of a
/// suspended Job that never started (`JobMutableNodeSchedulingDirectives`):
/// template labels and annotations, `nodeSelector`, `tolerations`,
/// `schedulingGates` and `affinity.nodeAffinity`.
fn validate_template_update(old: &Value, new: &Value, errs: &mut Errors) {
    let new_t = meta::get_path(new, &["spec", "template"])
        .cloned()
        .unwrap_or(Value::Null);
    let mut old_t = meta::get_path(old, &["spec", "template"])
        .cloned()
        .unwrap_or(Value::Null);
    let suspended = meta::get_path(old, &["spec", "suspend"]) == Some(&json!(true));
    let started = meta::get_path(old, &["status", "startTime"]).is_some_and(|v| !v.is_null());
    if suspended && !started {
        allow_scheduling_changes(&mut old_t, &new_t);
    }
    if old_t != new_t {
        errs.invalid("spec.template", &new_t, "field is immutable");
    }
}

fn allow_scheduling_changes(old_t: &mut Value, new_t: &Value) {
    let copy = |old_t: &mut Value, path: &[&str]| {
        let (last, parents) = path.split_last().expect("non-empty path");
        let value = meta::get_path(new_t, path).cloned();
        if let Some(parent) = meta::ensure_map(old_t, parents) {
            match value {
                Some(v) => parent.insert((*last).to_string(), v),
                None => parent.remove(*last),
            };
        }
    };
    copy(old_t, &["metadata", "labels"]);
    copy(old_t, &["metadata", "annotations"]);
    for f in ["nodeSelector", "tolerations", "schedulingGates"] {
        copy(old_t, &["spec", f]);
    }
    let new_affinity = meta::get_path(new_t, &["spec", "affinity"]).filter(|a| !a.is_null());
    let old_affinity = meta::get_path(old_t, &["spec", "affinity"]).filter(|a| !a.is_null());
    match (old_affinity.is_some(), new_affinity.is_some()) {
        (true, false) => {
            // Clearing is allowed when nodeAffinity was all there was.
            if let Some(a) = meta::ensure_map(old_t, &["spec", "affinity"]) {
                a.remove("nodeAffinity");
                if a.is_empty()
                    && let Some(spec) = meta::ensure_map(old_t, &["spec"])
                {
                    spec.remove("affinity");
                }
            }
        }
        (_, true) => copy(old_t, &["spec", "affinity", "nodeAffinity"]),
        (false, false) => {}
    }
    // `ensure_map` may have created empty maps the template did not have.
    crate::strategy::normalize(old_t);
}

/// Whether a stored Job's template carries the prefixed controller-uid
/// label (then updates must keep the prefixed labels too).
pub(crate) fn has_prefixed_labels(old: &Value) -> bool {
    meta::get_path(
        old,
        &["spec", "template", "metadata", "labels", CONTROLLER_UID],
    )
    .is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_set_defaults_job() {
        let mut j = json!({"metadata": {"name": "pi"}, "spec": {"template": {"spec": {}}}});
        default_job(&mut j);
        assert_eq!(
            j["spec"],
            json!({"backoffLimit": 6, "completionMode": "NonIndexed", "completions": 1,
                   "manualSelector": false, "parallelism": 1,
                   "podReplacementPolicy": "TerminatingOrFailed", "suspend": false,
                   "template": {"spec": {}}})
        );
        let mut p = json!({"spec": {"parallelism": 3, "podFailurePolicy": {"rules": [
            {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]}}});
        default_job(&mut p);
        assert!(p["spec"].get("completions").is_none());
        assert_eq!(p["spec"]["podReplacementPolicy"], "Failed");
        assert_eq!(
            p["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["status"],
            "True"
        );
    }

    #[test]
    fn selector_generation_adds_four_labels() {
        let mut j = json!({"metadata": {"name": "pi", "uid": "u-1"},
                           "spec": {"manualSelector": false, "template": {"metadata": {"labels": {"app": "x"}}}}});
        generate_selector(&mut j);
        assert_eq!(
            j["spec"]["selector"],
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}})
        );
        assert_eq!(
            j["spec"]["template"]["metadata"]["labels"],
            json!({"app": "x", "batch.kubernetes.io/controller-uid": "u-1",
                   "batch.kubernetes.io/job-name": "pi", "controller-uid": "u-1", "job-name": "pi"})
        );
        let mut errs = Errors::default();
        validate_generated_selector(&j, true, &mut errs);
        assert!(errs.is_empty());
    }
}
