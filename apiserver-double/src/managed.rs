//! `metadata.managedFields`: decoding, encoding, and the ownership rules of
//! updates (operation `Update`) and server-side apply (operation `Apply`),
//! following structured-merge-diff's `Updater`.

use serde_json::{Map, Value, json};

use crate::fieldset::{self, FieldSet};
use crate::resources::{Family, ResourceType};
use crate::schema::Cursor;
use crate::status::{ApiError, Cause};

/// `Apply` or `Update`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    /// Server-side apply.
    Apply,
    /// Any other write.
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Manager {
    /// Field manager name.
    pub name: String,
    /// Operation.
    pub operation: Operation,
    /// Subresource (`status`) or empty.
    pub subresource: String,
    /// API version the set is expressed in.
    pub api_version: String,
    /// Last time the entry took ownership of something.
    pub time: Option<String>,
    /// Owned fields.
    pub set: FieldSet,
}

impl Manager {
    fn same_identity(
        &self,
        name: &str,
        op: Operation,
        subresource: &str,
        api_version: &str,
    ) -> bool {
        self.name == name
            && self.operation == op
            && self.subresource == subresource
            && (op == Operation::Apply || self.api_version == api_version)
    }

    /// How conflict messages name the manager.
    fn display(&self) -> String {
        let name = Value::from(self.name.as_str()).to_string();
        match self.operation {
            Operation::Update => format!("{name} using {}", self.api_version),
            Operation::Apply if !self.subresource.is_empty() => {
                format!("{name} with subresource \"{}\"", self.subresource)
            }
            Operation::Apply => name,
        }
    }
}

/// Stored objects keep each `managedFields[].fieldsV1` as its JSON text:
/// as a `serde_json::Value` a FieldsV1 tree costs a map node (~630 bytes)
/// per non-empty map, measured at ~4 KB per ConfigMap and ~15 KB per
/// Deployment, about half of what a stored workload weighs. Objects are
/// expanded again wherever they leave the store ([`expanded`]).
pub(crate) fn compact(obj: &mut Value) {
    let Some(Value::Array(entries)) =
        crate::meta::get_path_mut(obj, &["metadata", "managedFields"])
    else {
        return;
    };
    for e in entries.iter_mut() {
        if let Some(f) = e.get_mut("fieldsV1").filter(|f| f.is_object()) {
            *f = Value::String(f.to_string());
        }
    }
}

fn has_compact_fields(metadata: &Value) -> bool {
    metadata
        .get("managedFields")
        .and_then(Value::as_array)
        .is_some_and(|a| {
            a.iter()
                .any(|e| e.get("fieldsV1").is_some_and(Value::is_string))
        })
}

/// `metadata` with its `fieldsV1` in JSON form (borrowed when already so).
pub(crate) fn expand_metadata(metadata: &Value) -> std::borrow::Cow<'_, Value> {
    if !has_compact_fields(metadata) {
        return std::borrow::Cow::Borrowed(metadata);
    }
    let mut m = metadata.clone();
    if let Some(Value::Array(entries)) = m.get_mut("managedFields") {
        for e in entries.iter_mut() {
            if let Some(f) = e.get_mut("fieldsV1")
                && let Some(text) = f.as_str()
                && let Ok(v) = serde_json::from_str::<Value>(text)
            {
                *f = v;
            }
        }
    }
    std::borrow::Cow::Owned(m)
}

/// An object with its `fieldsV1` in JSON form (borrowed when already so).
pub(crate) fn expanded(obj: &Value) -> std::borrow::Cow<'_, Value> {
    match obj.get("metadata") {
        Some(m) if has_compact_fields(m) => {
            let mut o = obj.clone();
            if let Some(map) = o.as_object_mut() {
                map.insert("metadata".into(), expand_metadata(m).into_owned());
            }
            std::borrow::Cow::Owned(o)
        }
        _ => std::borrow::Cow::Borrowed(obj),
    }
}

/// Decodes `metadata.managedFields` of an object. `Ok(None)` when absent.
pub(crate) fn decode(obj: &Value) -> Result<Option<Vec<Manager>>, String> {
    let Some(entries) = crate::meta::metadata(obj).and_then(|m| m.get("managedFields")) else {
        return Ok(None);
    };
    if entries.is_null() {
        return Ok(None);
    }
    let entries = entries
        .as_array()
        .ok_or_else(|| "managedFields must be a list".to_string())?;
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let operation = match s("operation").as_str() {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            other => return Err(format!("unknown operation {other:?}")),
        };
        let fields_type = s("fieldsType");
        if fields_type != "FieldsV1" {
            return Err(format!("unknown fieldsType {fields_type:?}"));
        }
        let set = match e.get("fieldsV1") {
            Some(Value::String(text)) => {
                let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
                FieldSet::from_fields_v1(&v)?
            }
            Some(v) => FieldSet::from_fields_v1(v)?,
            None => FieldSet::default(),
        };
        out.push(Manager {
            name: s("manager"),
            operation,
            subresource: s("subresource"),
            api_version: s("apiVersion"),
            time: e.get("time").and_then(Value::as_str).map(str::to_string),
            set,
        });
    }
    Ok(Some(out))
}

/// Writes the entries into `metadata.managedFields` in the apiserver's order
/// (Apply before Update, then by time, manager, apiVersion, subresource).
pub(crate) fn encode(obj: &mut Value, managers: &[Manager]) {
    let mut sorted: Vec<&Manager> = managers.iter().filter(|m| !m.set.is_empty()).collect();
    sorted.sort_by(|a, b| {
        a.operation
            .as_str()
            .cmp(b.operation.as_str())
            .then_with(|| a.time.cmp(&b.time))
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.api_version.cmp(&b.api_version))
            .then_with(|| a.subresource.cmp(&b.subresource))
    });
    let meta = crate::meta::metadata_mut(obj);
    if sorted.is_empty() {
        meta.remove("managedFields");
        return;
    }
    let entries = sorted
        .into_iter()
        .map(|m| {
            let mut e = Map::new();
            e.insert("apiVersion".into(), Value::from(m.api_version.clone()));
            e.insert("fieldsType".into(), Value::from("FieldsV1"));
            e.insert("fieldsV1".into(), m.set.to_fields_v1());
            e.insert("manager".into(), Value::from(m.name.clone()));
            e.insert("operation".into(), Value::from(m.operation.as_str()));
            if !m.subresource.is_empty() {
                e.insert("subresource".into(), Value::from(m.subresource.clone()));
            }
            if let Some(t) = &m.time {
                e.insert("time".into(), Value::from(t.clone()));
            }
            Value::Object(e)
        })
        .collect();
    meta.insert("managedFields".into(), Value::Array(entries));
}

/// Which subresource a write goes through, deciding the ignored fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Subresource {
    /// The main resource.
    Main,
    /// `/status`.
    Status,
}

impl Subresource {
    /// Name used in `managedFields[].subresource`.
    pub fn name(self) -> &'static str {
        match self {
            Subresource::Main => "",
            Subresource::Status => "status",
        }
    }
}

/// Whether the status endpoint's reset fields include `metadata.labels`
/// (built-in kinds) or only `spec` (custom resources).
fn resets_labels_on_status(rt: &ResourceType) -> bool {
    rt.family != Family::Custom
}

/// A copy of the object without the fields that are never tracked
/// (type meta, server-set metadata, and the fields the endpoint resets).
pub(crate) fn strip_ignored(obj: &Value, rt: &ResourceType, sub: Subresource) -> Value {
    let mut out = obj.clone();
    if let Some(m) = out.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
        match sub {
            Subresource::Main if rt.has_status_subresource() => {
                m.remove("status");
            }
            Subresource::Status => {
                m.remove("spec");
            }
            Subresource::Main => {}
        }
        if let Some(Value::Object(meta)) = m.get_mut("metadata") {
            for k in [
                "name",
                "namespace",
                "uid",
                "resourceVersion",
                "generation",
                "creationTimestamp",
                "managedFields",
                "selfLink",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
            ] {
                meta.remove(k);
            }
            if sub == Subresource::Status && resets_labels_on_status(rt) {
                meta.remove("labels");
            }
        }
    }
    out
}

/// The set of an applied configuration, without the fields that are never
/// tracked (`RecursiveDifference` with the ignored fields).
pub(crate) fn applied_set(
    config: &Value,
    rt: &ResourceType,
    sub: Subresource,
) -> Result<FieldSet, String> {
    let mut set = fieldset::from_applied(config, Cursor::root(rt))?;
    let p = |parts: &[&str]| parts.iter().map(|f| format!("f:{f}")).collect::<Vec<_>>();
    for top in ["apiVersion", "kind"] {
        set.remove_tree(&p(&[top]));
    }
    for m in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "selfLink",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    ] {
        set.remove_tree(&p(&["metadata", m]));
    }
    match sub {
        Subresource::Main if rt.has_status_subresource() => set.remove_tree(&p(&["status"])),
        Subresource::Status => {
            set.remove_tree(&p(&["spec"]));
            if resets_labels_on_status(rt) {
                set.remove_tree(&p(&["metadata", "labels"]));
            }
        }
        Subresource::Main => {}
    }
    Ok(set)
}

/// Ownership after a non-apply write by `manager`: the writer takes every
/// field it added or changed, others lose those, removed fields are owned by
/// nobody. (structured-merge-diff `Updater.Update` + `managedFieldsUpdater`.)
#[allow(clippy::too_many_arguments)]
pub(crate) fn update(
    managers: &mut Vec<Manager>,
    old: &Value,
    new: &Value,
    cur: Cursor<'_>,
    manager: &str,
    sub: Subresource,
    api_version: &str,
    now: &str,
) {
    let cmp = fieldset::compare(old, new, cur);
    let taken = cmp.modified.union(&cmp.added);
    for m in managers.iter_mut() {
        m.set = m.set.difference(&taken).difference(&cmp.removed);
    }
    if !taken.is_empty() {
        match managers
            .iter_mut()
            .find(|m| m.same_identity(manager, Operation::Update, sub.name(), api_version))
        {
            Some(m) => {
                m.set = m.set.union(&taken);
                m.time = Some(now.to_string());
            }
            None => managers.push(Manager {
                name: manager.to_string(),
                operation: Operation::Update,
                subresource: sub.name().to_string(),
                api_version: api_version.to_string(),
                time: Some(now.to_string()),
                set: taken,
            }),
        }
    }
    managers.retain(|m| !m.set.is_empty());
}

/// Ownership after an apply by `manager` whose configuration covers
/// `applied`. `live` and `merged` are the stripped objects before and after.
/// Fails with a 409 listing every conflict unless `force`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn apply(
    managers: &mut Vec<Manager>,
    live: &Value,
    merged: &Value,
    cur: Cursor<'_>,
    applied: FieldSet,
    manager: &str,
    sub: Subresource,
    api_version: &str,
    force: bool,
    now: &str,
) -> Result<(), ApiError> {
    let cmp = fieldset::compare(live, merged, cur);
    let changed = cmp.modified.union(&cmp.added);
    let is_self = |m: &Manager| m.same_identity(manager, Operation::Apply, sub.name(), api_version);
    let mut conflicts: Vec<(String, String)> = Vec::new();
    for m in managers.iter().filter(|m| !is_self(m)) {
        let c = m.set.intersection(&changed);
        for p in c.members() {
            conflicts.push((m.display(), fieldset::path_string(&p)));
        }
    }
    if !conflicts.is_empty() && !force {
        conflicts.sort();
        return Err(conflict_error(&conflicts));
    }
    for m in managers.iter_mut().filter(|m| !is_self(m)) {
        m.set = m.set.difference(&changed).difference(&cmp.removed);
    }
    let object_changed = !changed.is_empty() || !cmp.removed.is_empty();
    match managers.iter_mut().find(|m| is_self(m)) {
        Some(m) => {
            if object_changed || m.set != applied {
                m.time = Some(now.to_string());
            }
            m.set = applied;
            m.api_version = api_version.to_string();
        }
        None => managers.push(Manager {
            name: manager.to_string(),
            operation: Operation::Apply,
            subresource: sub.name().to_string(),
            api_version: api_version.to_string(),
            time: Some(now.to_string()),
            set: applied,
        }),
    }
    managers.retain(|m| !m.set.is_empty());
    Ok(())
}

fn conflict_error(conflicts: &[(String, String)]) -> ApiError {
    let causes: Vec<Cause> = conflicts
        .iter()
        .map(|(m, p)| Cause {
            reason: "FieldManagerConflict",
            message: format!("conflict with {m}"),
            field: p.clone(),
        })
        .collect();
    let message = if let [(m, p)] = conflicts {
        format!("Apply failed with 1 conflict: conflict with {m}: {p}")
    } else {
        let mut lines = Vec::new();
        let mut last: Option<&str> = None;
        for (m, p) in conflicts {
            if last != Some(m.as_str()) {
                lines.push(format!("conflicts with {m}:"));
                last = Some(m.as_str());
            }
            lines.push(format!("- {p}"));
        }
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    ApiError::apply_conflict(message, &causes)
}

/// The manager name of a write: `fieldManager`, else the user agent up to
/// its first `/`, else `unknown`.
pub(crate) fn manager_name(field_manager: Option<&str>, user_agent: Option<&str>) -> String {
    if let Some(m) = field_manager.filter(|m| !m.is_empty()) {
        return m.to_string();
    }
    let prefix = user_agent
        .and_then(|ua| ua.split('/').next())
        .unwrap_or("")
        .trim();
    if prefix.is_empty() {
        "unknown".to_string()
    } else {
        prefix.to_string()
    }
}

/// Validates the `fieldManager` option (at most 128 printable characters).
pub(crate) fn validate_field_manager(kind: &str, m: &str) -> Result<(), ApiError> {
    if m.chars().count() > 128 {
        return Err(ApiError::invalid_options(
            kind,
            vec![Cause {
                reason: "FieldValueTooLong",
                message: "Too long: may not be more than 128 bytes".into(),
                field: "fieldManager".into(),
            }],
        ));
    }
    if m.chars().any(|c| c.is_control()) {
        return Err(ApiError::invalid_options(
            kind,
            vec![Cause {
                reason: "FieldValueInvalid",
                message: format!(
                    "Invalid value: {}: must only contain printable characters",
                    json!(m)
                ),
                field: "fieldManager".into(),
            }],
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(v: Value) -> FieldSet {
        FieldSet::from_fields_v1(&v).unwrap()
    }

    #[test]
    fn update_merges_into_previous_entry_and_drops_removed() {
        let mut managers = vec![Manager {
            name: "unknown".into(),
            operation: Operation::Update,
            subresource: String::new(),
            api_version: "v1".into(),
            time: Some("t0".into()),
            set: set(json!({"f:metadata": {"f:annotations": {".": {}, "f:x": {}}}})),
        }];
        let old = json!({"metadata": {"annotations": {"x": "1"}}});
        let new = json!({"metadata": {"annotations": {"y": "2"}}});
        update(
            &mut managers,
            &old,
            &new,
            Cursor::Named(""),
            "unknown",
            Subresource::Main,
            "v1",
            "t1",
        );
        assert_eq!(managers.len(), 1);
        assert_eq!(
            managers[0].set.to_fields_v1(),
            json!({"f:metadata": {"f:annotations": {".": {}, "f:y": {}}}})
        );
        assert_eq!(managers[0].time.as_deref(), Some("t1"));
    }

    #[test]
    fn apply_conflict_message_names_field_and_manager() {
        let mut managers = vec![Manager {
            name: "nudge".into(),
            operation: Operation::Apply,
            subresource: String::new(),
            api_version: "apps/v1".into(),
            time: None,
            set: set(json!({"f:spec": {"f:x": {}}})),
        }];
        let live = json!({"spec": {"x": "a"}});
        let merged = json!({"spec": {"x": "b"}});
        let applied = set(json!({"f:spec": {"f:x": {}}}));
        let err = apply(
            &mut managers,
            &live,
            &merged,
            Cursor::Named(""),
            applied.clone(),
            "gitops",
            Subresource::Main,
            "apps/v1",
            false,
            "t",
        )
        .unwrap_err();
        assert_eq!(
            err.message,
            "Apply failed with 1 conflict: conflict with \"nudge\": .spec.x"
        );
        apply(
            &mut managers,
            &live,
            &merged,
            Cursor::Named(""),
            applied,
            "gitops",
            Subresource::Main,
            "apps/v1",
            true,
            "t",
        )
        .unwrap();
        assert_eq!(managers.len(), 1);
        assert_eq!(managers[0].name, "gitops");
    }

    #[test]
    fn compact_fields_round_trip() {
        let mut obj = json!({"metadata": {"name": "a", "managedFields": [{"manager": "m",
            "operation": "Update", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {".": {}, "f:k": {}}}}]}});
        let original = obj.clone();
        compact(&mut obj);
        assert!(obj["metadata"]["managedFields"][0]["fieldsV1"].is_string());
        assert_eq!(*expanded(&obj), original);
        assert_eq!(decode(&obj).unwrap(), decode(&original).unwrap());
        assert!(matches!(expanded(&original), std::borrow::Cow::Borrowed(_)));
    }

    #[test]
    fn manager_names() {
        assert_eq!(manager_name(Some("nudge"), Some("kubectl/1.0")), "nudge");
        assert_eq!(manager_name(None, Some("kubectl/v1.34 (linux)")), "kubectl");
        assert_eq!(manager_name(Some(""), None), "unknown");
    }
}
