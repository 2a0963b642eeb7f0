//! The strategy of custom resources (`customResourceStrategy` and its
//! status strategy): pruning and defaults from the structural schema,
//! status and generation rules, and schema validation.

pub(crate) mod prune;
pub(crate) mod values;

use serde_json::Value;

use crate::managed::Subresource;
use crate::meta;
use crate::resources::ResourceType;
use crate::status::ApiError;
use crate::structural::Structural;
use crate::validation::Errors;

fn schema(rt: &ResourceType) -> Option<&Structural> {
    rt.custom.as_ref().map(|c| c.schema.as_ref())
}

/// Metadata coercion and pruning of undeclared fields (the decoder's work).
pub(crate) fn normalize(rt: &ResourceType, obj: &mut Value) {
    if let Some(s) = schema(rt) {
        prune::prune(s, obj);
    }
}

/// The undeclared fields of an object, as strict field validation names them.
pub(crate) fn unknown_fields(rt: &ResourceType, obj: &Value) -> Vec<String> {
    let mut copy = obj.clone();
    schema(rt).map_or_else(Vec::new, |s| prune::prune(s, &mut copy))
}

/// Schema defaults.
pub(crate) fn apply_defaults(rt: &ResourceType, obj: &mut Value) {
    if let Some(s) = schema(rt) {
        prune::apply_defaults(s, obj);
    }
}

/// `PrepareForCreate`: with a status subresource, a create cannot set status.
pub(crate) fn prepare_create(rt: &ResourceType, obj: &mut Value) {
    if rt.has_status_subresource()
        && let Some(o) = obj.as_object_mut()
    {
        o.remove("status");
    }
}

/// `PrepareForUpdate` of the main resource and of `/status`, generation
/// included: any change outside `metadata` bumps it (status changes cannot
/// reach the main resource when the status subresource is declared).
pub(crate) fn prepare_update(rt: &ResourceType, old: &Value, new: &mut Value, sub: Subresource) {
    match sub {
        Subresource::Main => {
            if rt.has_status_subresource()
                && let Some(o) = new.as_object_mut()
            {
                match old.get("status") {
                    Some(s) => o.insert("status".into(), s.clone()),
                    None => o.remove("status"),
                };
            }
        }
        Subresource::Status => {
            // Everything but the status comes from the stored object
            // (generation included); the request's managedFields still
            // decide ownership.
            let status = new.get("status").cloned();
            let managed = meta::metadata(new)
                .and_then(|m| m.get("managedFields"))
                .cloned();
            *new = old.clone();
            let o = meta::metadata_mut(new);
            match managed {
                Some(m) => o.insert("managedFields".into(), m),
                None => o.remove("managedFields"),
            };
            if let Some(o) = new.as_object_mut() {
                match status {
                    Some(s) => o.insert("status".into(), s),
                    None => o.remove("status"),
                };
            }
            return;
        }
    }
    let generation = meta::metadata(old)
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let without_meta = |v: &Value| {
        let mut c = v.as_object().cloned().unwrap_or_default();
        c.remove("metadata");
        c
    };
    let bumped = if without_meta(old) != without_meta(new) {
        generation + 1
    } else {
        generation
    };
    meta::set_meta(new, "generation", bumped);
}

/// Validates a custom resource against its schema. CEL rules
/// (`x-kubernetes-validations`) cannot be evaluated here: objects of such
/// CRDs are refused with 500 rather than accepted unchecked.
pub(crate) fn validate(rt: &ResourceType, obj: &Value, errs: &mut Errors) -> Result<(), ApiError> {
    let Some(s) = schema(rt) else { return Ok(()) };
    if s.has_cel_rules() {
        return Err(ApiError::internal(format!(
            "the apiserver double cannot evaluate the x-kubernetes-validations (CEL) rules of {}",
            rt.custom.as_ref().map_or("", |c| c.crd.as_str())
        )));
    }
    values::validate(s, obj, "", errs).map_err(|e| ApiError::internal(e.0))?;
    if let Some(meta_schema) = s.properties.get("metadata") {
        for field in ["name", "generateName"] {
            if let (Some(fs), Some(v)) = (
                meta_schema.properties.get(field),
                meta::metadata(obj).and_then(|m| m.get(field)),
            ) {
                values::validate(fs, v, &format!("metadata.{field}"), errs)
                    .map_err(|e| ApiError::internal(e.0))?;
            }
        }
    }
    Ok(())
}
