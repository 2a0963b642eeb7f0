//! CustomResourceDefinition defaults (`SetDefaults_CustomResourceDefinition`),
//! create/update preparation and validation (`ValidateCustomResourceDefinition`
//! and `...Update`), for what the double can check.

use serde_json::{Value, json};

use super::schema_checks;
use crate::meta;
use crate::strategy::set_default;
use crate::validation::{Errors, is_dns1123_subdomain};

const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const APPROVAL: &str = "api-approved.kubernetes.io";

/// `[a-z]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
fn is_dns1035_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b[b.len() - 1] != b'-'
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

fn dns1035_errors(s: &str) -> String {
    if s.len() > 63 {
        "must be no more than 63 characters".into()
    } else {
        DNS1035_MSG.into()
    }
}

fn spec_str<'a>(obj: &'a Value, path: &[&str]) -> &'a str {
    let mut p = vec!["spec"];
    p.extend_from_slice(path);
    meta::get_path(obj, &p)
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The CRD's versions.
pub(crate) fn versions(obj: &Value) -> Vec<Value> {
    meta::get_path(obj, &["spec", "versions"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The storage version's name.
pub(crate) fn storage_version(obj: &Value) -> Option<String> {
    versions(obj)
        .iter()
        .find(|v| v.get("storage") == Some(&json!(true)))
        .and_then(|v| v.get("name").and_then(Value::as_str))
        .map(str::to_string)
}

/// `SetDefaults_CustomResourceDefinitionSpec`.
pub(crate) fn defaults(obj: &mut Value) {
    let kind = spec_str(obj, &["names", "kind"]).to_string();
    if !kind.is_empty()
        && let Some(names) = meta::ensure_map(obj, &["spec", "names"])
    {
        set_default(names, "singular", json!(kind.to_ascii_lowercase()));
        set_default(names, "listKind", json!(format!("{kind}List")));
    }
    if let Some(spec) = meta::ensure_map(obj, &["spec"]) {
        set_default(spec, "conversion", json!({"strategy": "None"}));
    }
    if let Some(Value::Object(svc)) = meta::get_path_mut(
        obj,
        &["spec", "conversion", "webhook", "clientConfig", "service"],
    ) {
        set_default(svc, "port", json!(443));
    }
}

/// `PrepareForCreate`: the status holds only the stored version.
pub(crate) fn prepare_create(obj: &mut Value) {
    let stored: Vec<String> = storage_version(obj).into_iter().collect();
    if let Some(o) = obj.as_object_mut() {
        o.insert(
            "status".into(),
            json!({"acceptedNames": {"kind": "", "plural": ""}, "storedVersions": stored}),
        );
    }
}

/// `PrepareForUpdate`'s part beyond status and generation: a new storage
/// version joins `status.storedVersions`.
pub(crate) fn prepare_update(obj: &mut Value) {
    let Some(storage) = storage_version(obj) else {
        return;
    };
    if let Some(status) = meta::ensure_map(obj, &["status"]) {
        let stored = status.entry("storedVersions").or_insert_with(|| json!([]));
        if let Some(list) = stored.as_array_mut()
            && !list.iter().any(|v| v == &json!(storage))
        {
            list.push(json!(storage));
        }
    }
}

/// `ValidateCustomResourceDefinition` (without what ObjectMeta checks do).
pub(crate) fn validate(obj: &Value, errs: &mut Errors) {
    let group = spec_str(obj, &["group"]);
    let plural = spec_str(obj, &["names", "plural"]);
    let name = meta::name(obj);
    if !name.is_empty() && name != format!("{plural}.{group}") {
        errs.invalid(
            "metadata.name",
            &Value::from(name),
            "must be spec.names.plural+\".\"+spec.group",
        );
    }
    if group.is_empty() {
        errs.required("spec.group", "");
    } else if !is_dns1123_subdomain(group) {
        errs.invalid("spec.group", &Value::from(group), "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')");
    } else if !group.contains('.') {
        errs.invalid(
            "spec.group",
            &Value::from(group),
            "should be a domain with at least one dot",
        );
    }
    match spec_str(obj, &["scope"]) {
        "" => errs.required("spec.scope", ""),
        "Cluster" | "Namespaced" => {}
        other => errs.unsupported(
            "spec.scope",
            &Value::from(other),
            &["Cluster", "Namespaced"],
        ),
    }
    validate_versions(obj, errs);
    validate_names(obj, errs);
    validate_conversion(obj, errs);
    validate_stored_versions(obj, errs);
    if meta::get_path(obj, &["spec", "preserveUnknownFields"]) == Some(&json!(true)) {
        errs.invalid(
            "spec.preserveUnknownFields",
            &json!(true),
            "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead",
        );
    }
    validate_api_approval(obj, group, errs);
}

fn validate_versions(obj: &Value, errs: &mut Errors) {
    let versions = versions(obj);
    let all = meta::get_path(obj, &["spec", "versions"])
        .cloned()
        .unwrap_or(Value::Null);
    let mut names = Vec::new();
    let mut storage = 0;
    for (i, v) in versions.iter().enumerate() {
        let path = format!("spec.versions[{i}]");
        let name = v.get("name").and_then(Value::as_str).unwrap_or("");
        if !is_dns1035_label(name) {
            errs.invalid(
                format!("{path}.name"),
                &Value::from(name),
                &dns1035_errors(name),
            );
        }
        if v.get("storage") == Some(&json!(true)) {
            storage += 1;
        }
        if names.contains(&name) {
            errs.invalid("spec.versions", &all, "must contain unique version names");
        }
        names.push(name);
        match meta::get_path(v, &["schema", "openAPIV3Schema"]).filter(|s| !s.is_null()) {
            None => errs.required(
                format!("{path}.schema.openAPIV3Schema"),
                "schemas are required",
            ),
            Some(schema) => {
                for cause in schema_checks::check(schema, &format!("{path}.schema.openAPIV3Schema"))
                {
                    errs.push(cause.reason, cause.field, cause.message);
                }
            }
        }
        validate_scale(v, &path, errs);
    }
    if storage != 1 {
        errs.invalid(
            "spec.versions",
            &all,
            "must have exactly one version marked as storage version",
        );
    }
}

fn validate_scale(version: &Value, path: &str, errs: &mut Errors) {
    let Some(scale) = meta::get_path(version, &["subresources", "scale"]).filter(|s| !s.is_null())
    else {
        return;
    };
    for (field, prefix) in [
        ("specReplicasPath", ".spec."),
        ("statusReplicasPath", ".status."),
    ] {
        let p = format!("{path}.subresources.scale.{field}");
        match scale.get(field).and_then(Value::as_str).unwrap_or("") {
            "" => errs.required(p, ""),
            s if !s.starts_with('.') => {
                errs.invalid(
                    p,
                    &Value::from(s),
                    "must be a simple json path starting with .",
                );
            }
            s if !s.starts_with(prefix) => errs.invalid(
                p,
                &Value::from(s),
                &format!(
                    "should be a json path under {}",
                    prefix.trim_end_matches('.')
                ),
            ),
            _ => {}
        }
    }
}

fn validate_names(obj: &Value, errs: &mut Errors) {
    for (field, required) in [
        ("plural", true),
        ("singular", true),
        ("kind", true),
        ("listKind", true),
    ] {
        if required && spec_str(obj, &["names", field]).is_empty() {
            errs.required(format!("spec.names.{field}"), "");
        }
    }
    for field in ["plural", "singular"] {
        let v = spec_str(obj, &["names", field]);
        if !v.is_empty() && !is_dns1035_label(v) {
            errs.invalid(
                format!("spec.names.{field}"),
                &Value::from(v),
                &dns1035_errors(v),
            );
        }
    }
    for field in ["kind", "listKind"] {
        let v = spec_str(obj, &["names", field]);
        if !v.is_empty() && !is_dns1035_label(&v.to_ascii_lowercase()) {
            errs.invalid(
                format!("spec.names.{field}"),
                &Value::from(v),
                &format!(
                    "may have mixed case, but should otherwise match: {}",
                    dns1035_errors(v)
                ),
            );
        }
    }
    for list in ["shortNames", "categories"] {
        let items = meta::get_path(obj, &["spec", "names", list])
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for (i, s) in items.iter().enumerate() {
            let s = s.as_str().unwrap_or("");
            if !is_dns1035_label(s) {
                errs.invalid(
                    format!("spec.names.{list}[{i}]"),
                    &Value::from(s),
                    &dns1035_errors(s),
                );
            }
        }
    }
    let kind = spec_str(obj, &["names", "kind"]);
    if !kind.is_empty() && kind == spec_str(obj, &["names", "listKind"]) {
        errs.invalid(
            "spec.names.listKind",
            &Value::from(kind),
            "kind and listKind may not be the same",
        );
    }
}

fn validate_conversion(obj: &Value, errs: &mut Errors) {
    let Some(conv) = meta::get_path(obj, &["spec", "conversion"]).filter(|c| !c.is_null()) else {
        return;
    };
    match conv.get("strategy").and_then(Value::as_str).unwrap_or("") {
        "" => errs.required("spec.conversion.strategy", ""),
        "None" => {
            if conv.get("webhook").is_some_and(|w| !w.is_null()) {
                errs.forbidden(
                    "spec.conversion.webhookClientConfig",
                    "should not be set when strategy is not set to Webhook",
                );
            }
        }
        "Webhook" => {
            if meta::get_path(conv, &["webhook", "clientConfig"]).is_none_or(Value::is_null) {
                errs.required(
                    "spec.conversion.webhookClientConfig",
                    "required when strategy is set to Webhook",
                );
            }
        }
        other => errs.unsupported(
            "spec.conversion.strategy",
            &Value::from(other),
            &["None", "Webhook"],
        ),
    }
}

/// `ValidateCustomResourceDefinitionStoredVersions`.
fn validate_stored_versions(obj: &Value, errs: &mut Errors) {
    let stored: Vec<String> = meta::get_path(obj, &["status", "storedVersions"])
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let shown = json!(stored);
    if stored.is_empty() {
        errs.invalid(
            "status.storedVersions",
            &shown,
            "must have at least one stored version",
        );
        return;
    }
    let versions = versions(obj);
    let names: Vec<&str> = versions
        .iter()
        .filter_map(|v| v.get("name").and_then(Value::as_str))
        .collect();
    if let Some(storage) = storage_version(obj)
        && !stored.contains(&storage)
    {
        errs.invalid(
            "status.storedVersions",
            &shown,
            &format!("must have the storage version {storage}"),
        );
    }
    for (i, v) in stored.iter().enumerate() {
        if !names.contains(&v.as_str()) {
            errs.invalid(
                format!("status.storedVersions[{i}]"),
                &Value::from(v.as_str()),
                &format!("missing from spec.versions; {v} was previously a storage version, and must remain in spec.versions until a storage migration ensures no data remains persisted in {v} and removes {v} from status.storedVersions"),
            );
        }
    }
}

/// Groups under `k8s.io` and `kubernetes.io` need the approval annotation.
fn validate_api_approval(obj: &Value, group: &str, errs: &mut Errors) {
    let protected = ["k8s.io", "kubernetes.io"]
        .iter()
        .any(|d| group == *d || group.ends_with(&format!(".{d}")));
    if !protected {
        return;
    }
    let annotation = meta::string_map(obj, "annotations")
        .and_then(|a| a.get(APPROVAL))
        .and_then(Value::as_str);
    match annotation {
        None => errs.required(
            format!("metadata.annotations[{APPROVAL}]"),
            "protected groups must have approval annotation \"api-approved.kubernetes.io\", see https://github.com/kubernetes/enhancements/pull/1111",
        ),
        Some(v) if v.starts_with("unapproved") || v.starts_with("https://") || v.starts_with("http://") => {}
        Some(v) => errs.invalid(
            format!("metadata.annotations[{APPROVAL}]"),
            &Value::from(v),
            "protected groups must have approval annotation \"api-approved.kubernetes.io\" with either a URL or a reason starting with \"unapproved\", see https://github.com/kubernetes/enhancements/pull/1111",
        ),
    }
}

/// `validateCustomResourceDefinitionSpecUpdate`'s immutable fields (the
/// double's CRDs are always Established, so scope and kind are immutable too).
pub(crate) fn validate_update(old: &Value, new: &Value, errs: &mut Errors) {
    for path in [
        &["scope"][..],
        &["names", "kind"],
        &["group"],
        &["names", "plural"],
    ] {
        let o = spec_str(old, path);
        let n = spec_str(new, path);
        if o != n {
            errs.invalid(
                format!("spec.{}", path.join(".")),
                &Value::from(n),
                "field is immutable",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({"metadata": {"name": "widgets.example.com"}, "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }})
    }

    fn messages(obj: &Value) -> Vec<String> {
        let mut e = Errors::default();
        validate(obj, &mut e);
        e.summaries()
    }

    #[test]
    fn defaults_and_prepare() {
        let mut c = crd();
        defaults(&mut c);
        prepare_create(&mut c);
        assert_eq!(c["spec"]["names"]["singular"], "widget");
        assert_eq!(c["spec"]["names"]["listKind"], "WidgetList");
        assert_eq!(c["spec"]["conversion"], json!({"strategy": "None"}));
        assert_eq!(c["status"]["storedVersions"], json!(["v1"]));
        assert!(messages(&c).is_empty(), "{:?}", messages(&c));
    }

    #[test]
    fn names_group_and_versions() {
        let mut c = crd();
        c["metadata"]["name"] = json!("gadgets.example.com");
        c["spec"]["group"] = json!("example");
        c["spec"]["versions"][0]["storage"] = json!(false);
        c["spec"]["versions"][0]
            .as_object_mut()
            .unwrap()
            .remove("schema");
        defaults(&mut c);
        prepare_create(&mut c);
        assert_eq!(
            messages(&c),
            [
                "metadata.name: Invalid value: \"gadgets.example.com\": must be spec.names.plural+\".\"+spec.group",
                "spec.group: Invalid value: \"example\": should be a domain with at least one dot",
                "spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required",
                "spec.versions: Invalid value: [{\"name\":\"v1\",\"served\":true,\"storage\":false}]: must have exactly one version marked as storage version",
                "status.storedVersions: Invalid value: []: must have at least one stored version",
            ]
        );
    }

    #[test]
    fn protected_groups_need_approval() {
        let mut c = crd();
        c["metadata"]["name"] = json!("widgets.x.k8s.io");
        c["spec"]["group"] = json!("x.k8s.io");
        defaults(&mut c);
        prepare_create(&mut c);
        assert_eq!(
            messages(&c),
            [
                "metadata.annotations[api-approved.kubernetes.io]: Required value: protected groups must have approval annotation \"api-approved.kubernetes.io\", see https://github.com/kubernetes/enhancements/pull/1111"
            ]
        );
    }
}
