//! Writes: create, update (PUT), patch (merge, JSON, strategic, apply),
//! delete and deletecollection.
//!
//! Every write runs the same pipeline as the apiserver: decode, normalize,
//! default, mutating admission and the kind's preparation (status reset,
//! generation; on create before admission, on update after it, as the
//! apiserver's `BeforeUpdate` runs after the admission transformers),
//! managed fields, validation, then an optimistic-concurrency commit that is
//! retried when the object changed underneath (unless the client gave a
//! resourceVersion precondition).

use std::sync::Arc;

use http::Response;
use serde_json::Value;

use super::json_response;
use crate::admission::{self, AdmissionOperation};
use crate::body::ResponseBody;
use crate::fieldset::FieldSet;
use crate::ids;
use crate::managed::{self, Manager, Operation, Subresource};
use crate::meta;
use crate::output::{self, Shape, Target};
use crate::patch::{self, PatchType};
use crate::request::Ctx;
use crate::resources::{Family, ResourceType};
use crate::schema::Cursor;
use crate::server::State;
use crate::ssa;
use crate::status::{ApiError, ApiResult, Cause};
use crate::store::WriteError;
use crate::strategy;
use crate::validation;

/// How many times a write is retried when the object changes underneath.
pub(super) const MAX_RETRIES: usize = 16;

pub(super) fn key_of(rt: &ResourceType, namespace: Option<&str>, name: &str) -> String {
    meta::store_key(namespace.filter(|_| rt.namespaced), name)
}

/// Checks `apiVersion`/`kind` of a request object against the endpoint and
/// fills them in when missing.
fn check_type_meta(rt: &ResourceType, obj: &mut Value) -> ApiResult<()> {
    let expected_av = rt.api_version();
    let Some(o) = obj.as_object_mut() else {
        return Err(ApiError::bad_request(
            "Object 'Kind' is missing in request body: not a JSON object",
        ));
    };
    match o.get("apiVersion").and_then(Value::as_str) {
        Some(av) if !av.is_empty() && av != expected_av => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({expected_av})"
            )));
        }
        _ => {}
    }
    match o.get("kind").and_then(Value::as_str) {
        Some(k) if !k.is_empty() && k != rt.kind => {
            return Err(ApiError::bad_request(format!(
                "{k} in version \"{}\" cannot be handled as a {}: the kind in the data ({k}) does not match the expected kind ({})",
                rt.version, rt.kind, rt.kind
            )));
        }
        _ => {}
    }
    o.insert("apiVersion".into(), Value::from(expected_av));
    o.insert("kind".into(), Value::from(rt.kind.as_str()));
    Ok(())
}

/// Reconciles `metadata.namespace` of a request object with the URL.
fn check_namespace(rt: &ResourceType, namespace: Option<&str>, obj: &mut Value) -> ApiResult<()> {
    if !rt.namespaced {
        meta::metadata_mut(obj).remove("namespace");
        return Ok(());
    }
    let ns = namespace.unwrap_or("");
    match meta::namespace(obj) {
        "" => {
            meta::set_meta(obj, "namespace", ns);
            Ok(())
        }
        n if n == ns => Ok(()),
        _ => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
    }
}

fn check_name(obj: &Value, name: &str) -> ApiResult<()> {
    let n = meta::name(obj);
    if n != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        )));
    }
    Ok(())
}

/// Managers to start from: the request's `managedFields` when it carries
/// valid ones (`[{}]` resets), else the live object's.
fn base_managers(request: &Value, live: Option<&Value>) -> Vec<Manager> {
    let reset = meta::metadata(request)
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array)
        .is_some_and(|a| {
            !a.is_empty()
                && a.iter()
                    .all(|e| e.as_object().is_some_and(|m| m.is_empty()))
        });
    if reset {
        return Vec::new();
    }
    match managed::decode(request) {
        Ok(Some(m)) => m,
        _ => live
            .and_then(|l| managed::decode(l).ok().flatten())
            .unwrap_or_default(),
    }
}

fn map_write_error(
    e: WriteError,
    rt: &ResourceType,
    name: &str,
    namespace: Option<&str>,
) -> ApiError {
    match e {
        WriteError::NotFound => ApiError::not_found(rt, name),
        WriteError::AlreadyExists => ApiError::already_exists(rt, name),
        WriteError::Conflict => ApiError::conflict_modified(rt, name),
        WriteError::NamespaceNotFound => ApiError::namespace_not_found(namespace.unwrap_or("")),
    }
}

/// How the managed fields of a new object are computed.
pub(crate) enum Ownership {
    /// A non-apply write by this manager.
    Update(String),
    /// An apply by this manager of a configuration covering this set.
    Apply(String, FieldSet),
}

/// Creates an object through the full create pipeline, without calling
/// webhooks (seeding, namespaces, events). `obj` must already carry matching type
/// meta, name and namespace. Returns the stored object (or, for a dry run, what
/// would have been stored).
pub(crate) fn create_object(
    state: &State,
    rt: &ResourceType,
    obj: Value,
    ownership: Ownership,
    dry_run: bool,
) -> ApiResult<Arc<Value>> {
    let obj = prepare_new(state, rt, obj)?;
    finish_create(state, rt, obj, ownership, dry_run)
}

/// Like [`create_object`], with mutating admission (webhooks) between defaulting
/// and validation, as for a POST.
pub(crate) async fn create_object_admitted(
    state: &State,
    rt: &ResourceType,
    obj: Value,
    ownership: Ownership,
    dry_run: bool,
) -> ApiResult<Arc<Value>> {
    let mut obj = prepare_new(state, rt, obj)?;
    admission::mutate(
        state,
        rt,
        AdmissionOperation::Create,
        Subresource::Main,
        &mut obj,
        None,
        dry_run,
    )
    .await?;
    finish_create(state, rt, obj, ownership, dry_run)
}

/// The create pipeline up to mutating admission: name generation, decoding,
/// defaults, create preparation.
fn prepare_new(state: &State, rt: &ResourceType, mut obj: Value) -> ApiResult<Value> {
    let namespace = rt.namespaced.then(|| meta::namespace(&obj).to_string());
    if let Some(ns) = &namespace
        && !state.store.namespace_exists(ns)
    {
        return Err(ApiError::namespace_not_found(ns));
    }
    if meta::name(&obj).is_empty() {
        let generate = meta::meta_str(&obj, "generateName").to_string();
        if !generate.is_empty() {
            meta::set_meta(
                &mut obj,
                "name",
                format!("{generate}{}", ids::name_suffix()),
            );
        }
    }
    if !meta::resource_version(&obj).is_empty() {
        return Err(ApiError::internal(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    strategy::decode(rt, &mut obj)?;
    strategy::normalize_for(rt, &mut obj);
    strategy::apply_defaults(rt, &mut obj);
    strategy::prepare_create(rt, &mut obj);
    Ok(obj)
}

/// The create pipeline after mutating admission: server-set metadata, managed
/// fields, validation, storage.
fn finish_create(
    state: &State,
    rt: &ResourceType,
    mut obj: Value,
    ownership: Ownership,
    dry_run: bool,
) -> ApiResult<Arc<Value>> {
    let namespace = rt.namespaced.then(|| meta::namespace(&obj).to_string());
    let now = ids::now_rfc3339();
    {
        let m = meta::metadata_mut(&mut obj);
        m.insert("uid".into(), Value::from(ids::new_uid()));
        m.insert("creationTimestamp".into(), Value::from(now.clone()));
        for k in [
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            m.remove(k);
        }
    }
    let skeleton = managed::strip_ignored(&rt.skeleton(), rt, Subresource::Main);
    let stripped = managed::strip_ignored(&obj, rt, Subresource::Main);
    let mut managers = match &ownership {
        Ownership::Update(_) => base_managers(&obj, None),
        Ownership::Apply(..) => Vec::new(),
    };
    match ownership {
        Ownership::Update(m) => {
            managed::update(
                &mut managers,
                &skeleton,
                &stripped,
                Cursor::root(rt),
                &m,
                Subresource::Main,
                &rt.api_version(),
                &now,
            );
        }
        Ownership::Apply(m, set) => {
            managed::apply(
                &mut managers,
                &skeleton,
                &stripped,
                Cursor::root(rt),
                set,
                &m,
                Subresource::Main,
                &rt.api_version(),
                true,
                &now,
            )?;
        }
    }
    managed::encode(&mut obj, &managers);
    strategy::after_uid(rt, &mut obj);
    validation::validate_create(rt, &obj)?;
    crate::quota::admit_create(state, rt, &obj)?;
    if dry_run {
        return Ok(Arc::new(obj));
    }
    let name = meta::name(&obj).to_string();
    let key = key_of(rt, namespace.as_deref(), &name);
    strategy::to_storage_version(rt, &mut obj);
    let stored = state
        .store
        .create(rt.storage, &key, obj, namespace.as_deref())
        .map_err(|e| map_write_error(e, rt, &name, namespace.as_deref()))?;
    after_commit(state, rt, &stored);
    Ok(stored)
}

/// What the control plane does at once after a write: a stored CRD is
/// served and established; a quota's status is counted, and counted again
/// after a create in its namespace.
fn after_commit(state: &State, rt: &ResourceType, stored: &Value) {
    if rt.family == Family::CustomResourceDefinition {
        crate::crd::sync(state, stored);
    }
    if rt.namespaced {
        // Writes the quotas' status only when it changes: a status write
        // comes back here and ends.
        crate::quota::refresh(state, meta::namespace(stored));
    }
}

/// `fieldValidation=Strict` on a custom resource: undeclared fields are a
/// 400 instead of being pruned silently.
fn check_field_validation(rt: &ResourceType, ctx: &Ctx, obj: &Value) -> ApiResult<()> {
    if !rt.is_custom() || ctx.query.get("fieldValidation") != Some("Strict") {
        return Ok(());
    }
    let unknown = crate::custom::unknown_fields(rt, obj);
    if unknown.is_empty() {
        return Ok(());
    }
    let listed = unknown
        .iter()
        .map(|f| format!("unknown field {}", Value::from(f.as_str())))
        .collect::<Vec<_>>()
        .join(", ");
    Err(ApiError::bad_request(format!(
        "strict decoding error: {listed}"
    )))
}

/// POST to a collection.
pub(super) async fn create(
    state: &Arc<State>,
    rt: &ResourceType,
    namespace: Option<&str>,
    ctx: &Ctx,
) -> ApiResult<Response<ResponseBody>> {
    let shape = output::negotiate(ctx.header("accept"), Target::Object)?;
    let dry_run = ctx.dry_run()?;
    let mut obj = patch::parse_json(&ctx.body)?;
    check_type_meta(rt, &mut obj)?;
    check_namespace(rt, namespace, &mut obj)?;
    check_field_validation(rt, ctx, &obj)?;
    let manager = ctx.manager();
    managed::validate_field_manager("CreateOptions", &manager)?;
    let stored =
        create_object_admitted(state, rt, obj, Ownership::Update(manager), dry_run).await?;
    Ok(json_response(201, output::object_bytes(rt, &stored, shape)))
}

/// Turns a full desired object into the next stored state of `live`
/// (non-apply writes).
async fn finish_update(
    state: &State,
    rt: &ResourceType,
    live: &Value,
    mut new: Value,
    manager: &str,
    sub: Subresource,
    dry_run: bool,
) -> ApiResult<Value> {
    strategy::normalize_for(rt, &mut new);
    strategy::apply_defaults(rt, &mut new);
    // As the apiserver's update handler: mutating admission sees the object
    // as sent; the strategy's PrepareForUpdate (status kept, generation)
    // runs after it.
    admission::mutate(
        state,
        rt,
        AdmissionOperation::Update,
        sub,
        &mut new,
        Some(live),
        dry_run,
    )
    .await?;
    strategy::prepare_update(rt, live, &mut new, sub);
    meta::set_meta(&mut new, "resourceVersion", meta::resource_version(live));
    let mut managers = base_managers(&new, Some(live));
    let now = ids::now_rfc3339();
    managed::update(
        &mut managers,
        &managed::strip_ignored(live, rt, sub),
        &managed::strip_ignored(&new, rt, sub),
        Cursor::root(rt),
        manager,
        sub,
        &rt.api_version(),
        &now,
    );
    managed::encode(&mut new, &managers);
    validation::validate_update(rt, live, &new)?;
    Ok(new)
}

/// Stores `new` over `live` unless nothing changed. An object whose
/// deletion waits for finalizers is removed once they are gone.
pub(super) fn commit(
    state: &State,
    rt: &ResourceType,
    key: &str,
    live: &Arc<Value>,
    mut new: Value,
    dry_run: bool,
) -> Result<Arc<Value>, WriteError> {
    strategy::to_storage_version(rt, &mut new);
    managed::compact(&mut new);
    if new == **live || dry_run {
        return Ok(if dry_run { Arc::new(new) } else { live.clone() });
    }
    let deleting = meta::metadata(&new).is_some_and(|m| m.contains_key("deletionTimestamp"));
    let finalizers_left = meta::metadata(&new)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty());
    if deleting && !finalizers_left {
        state
            .store
            .delete(rt.storage, key, Some(meta::resource_version(live)))?;
        return Ok(Arc::new(new));
    }
    let stored = state
        .store
        .update(rt.storage, key, meta::resource_version(live), new)?;
    after_commit(state, rt, &stored);
    Ok(stored)
}

/// PUT of an object or its status.
pub(super) async fn update(
    state: &Arc<State>,
    rt: &ResourceType,
    namespace: Option<&str>,
    name: &str,
    sub: Subresource,
    ctx: &Ctx,
) -> ApiResult<Response<ResponseBody>> {
    let shape = output::negotiate(ctx.header("accept"), Target::Object)?;
    let dry_run = ctx.dry_run()?;
    let manager = ctx.manager();
    managed::validate_field_manager("UpdateOptions", &manager)?;
    let mut obj = patch::parse_json(&ctx.body)?;
    check_type_meta(rt, &mut obj)?;
    check_name(&obj, name)?;
    check_namespace(rt, namespace, &mut obj)?;
    check_field_validation(rt, ctx, &obj)?;
    strategy::decode(rt, &mut obj)?;
    let key = key_of(rt, namespace, name);
    let precondition_rv = meta::resource_version(&obj).to_string();
    for _ in 0..MAX_RETRIES {
        let Some(live) = state.store.get(rt.storage, &key) else {
            if rt.allow_create_on_update() && sub == Subresource::Main && precondition_rv.is_empty()
            {
                let stored = create_object(
                    state,
                    rt,
                    obj.clone(),
                    Ownership::Update(manager.clone()),
                    dry_run,
                )?;
                return Ok(json_response(201, output::object_bytes(rt, &stored, shape)));
            }
            return Err(ApiError::not_found(rt, name));
        };
        check_write_preconditions(rt, name, &precondition_rv, meta::uid(&obj), &live)?;
        let new = finish_update(state, rt, &live, obj.clone(), &manager, sub, dry_run).await?;
        match commit(state, rt, &key, &live, new, dry_run) {
            Ok(stored) => return Ok(json_response(200, output::object_bytes(rt, &stored, shape))),
            Err(WriteError::Conflict | WriteError::NotFound) if precondition_rv.is_empty() => {
                continue;
            }
            Err(e) => return Err(map_write_error(e, rt, name, namespace)),
        }
    }
    Err(ApiError::conflict_modified(rt, name))
}

/// PATCH of an object or its status.
pub(super) async fn patch(
    state: &Arc<State>,
    rt: &ResourceType,
    namespace: Option<&str>,
    name: &str,
    sub: Subresource,
    ctx: &Ctx,
) -> ApiResult<Response<ResponseBody>> {
    let kind = PatchType::from_content_type(ctx.header("content-type"))
        .filter(|k| !(rt.is_custom() && *k == PatchType::Strategic))
        .ok_or_else(ApiError::unsupported_media_type)?;
    let shape = output::negotiate(ctx.header("accept"), Target::Object)?;
    let dry_run = ctx.dry_run()?;
    let force = ctx.query.flag("force")?;
    if kind == PatchType::Apply {
        return apply(
            state,
            rt,
            namespace,
            name,
            sub,
            ctx,
            force.unwrap_or(false),
            shape,
            dry_run,
        )
        .await;
    }
    if force.is_some() {
        return Err(ApiError::invalid_options(
            "PatchOptions",
            vec![Cause {
                reason: "FieldValueForbidden",
                message: "Forbidden: may not be specified for non-apply patch".into(),
                field: "force".into(),
            }],
        ));
    }
    let manager = ctx.manager();
    managed::validate_field_manager("PatchOptions", &manager)?;
    let key = key_of(rt, namespace, name);
    let precondition = patch_sets_rv(kind, &ctx.body);
    for _ in 0..MAX_RETRIES {
        let live = state
            .store
            .get(rt.storage, &key)
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        let mut patched = patch::apply_patch(&managed::expanded(&live), kind, &ctx.body)?;
        check_type_meta(rt, &mut patched)?;
        check_name(&patched, name)?;
        check_namespace(rt, namespace, &mut patched)?;
        check_field_validation(rt, ctx, &patched)?;
        let rv = meta::resource_version(&patched);
        check_write_preconditions(rt, name, rv, meta::uid(&patched), &live)?;
        strategy::decode(rt, &mut patched)?;
        let new = finish_update(state, rt, &live, patched, &manager, sub, dry_run).await?;
        match commit(state, rt, &key, &live, new, dry_run) {
            Ok(stored) => return Ok(json_response(200, output::object_bytes(rt, &stored, shape))),
            Err(WriteError::Conflict | WriteError::NotFound) if !precondition => continue,
            Err(e) => return Err(map_write_error(e, rt, name, namespace)),
        }
    }
    Err(ApiError::conflict_modified(rt, name))
}

/// Whether a patch body itself names a resourceVersion (a precondition).
fn patch_sets_rv(kind: PatchType, body: &[u8]) -> bool {
    match kind {
        PatchType::Json => serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .is_some_and(|ops| {
                ops.iter().any(|op| {
                    op.get("path").and_then(Value::as_str) == Some("/metadata/resourceVersion")
                })
            }),
        _ => serde_json::from_slice::<Value>(body).ok().is_some_and(|v| {
            meta::get_path(&v, &["metadata", "resourceVersion"]).is_some_and(|r| !r.is_null())
        }),
    }
}

fn parse_apply_body(body: &[u8]) -> ApiResult<Value> {
    let text = std::str::from_utf8(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
    if text.trim().is_empty() {
        return Err(ApiError::bad_request("invalid object type: /, Kind="));
    }
    let v: Value = serde_saphyr::from_str(text)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "error decoding YAML: the apply patch must be a map",
        ));
    }
    Ok(v)
}

/// Server-side apply (an upsert).
#[allow(clippy::too_many_arguments)]
async fn apply(
    state: &Arc<State>,
    rt: &ResourceType,
    namespace: Option<&str>,
    name: &str,
    sub: Subresource,
    ctx: &Ctx,
    force: bool,
    shape: Shape,
    dry_run: bool,
) -> ApiResult<Response<ResponseBody>> {
    let manager = ctx.query.get("fieldManager").unwrap_or("").to_string();
    if manager.is_empty() {
        return Err(ApiError::invalid_options(
            "PatchOptions",
            vec![Cause {
                reason: "FieldValueRequired",
                message: "Required value: is required for apply patch".into(),
                field: "fieldManager".into(),
            }],
        ));
    }
    managed::validate_field_manager("PatchOptions", &manager)?;
    let mut config = parse_apply_body(&ctx.body)?;
    let av = config
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let kind = config
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if av.is_empty() || kind.is_empty() {
        let gv = if av.is_empty() {
            "/".to_string()
        } else {
            av.clone()
        };
        return Err(ApiError::bad_request(format!(
            "invalid object type: {gv}, Kind={kind}"
        )));
    }
    check_type_meta(rt, &mut config)?;
    match meta::name(&config) {
        "" => meta::set_meta(&mut config, "name", name),
        n if n != name => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        _ => {}
    }
    check_namespace(rt, namespace, &mut config)?;
    if meta::metadata(&config).is_some_and(|m| m.get("managedFields").is_some_and(|f| !f.is_null()))
    {
        return Err(ApiError::bad_request("metadata.managedFields must be nil"));
    }
    check_field_validation(rt, ctx, &config)?;
    if rt.is_custom() {
        // Undeclared fields are pruned before they can be owned.
        crate::custom::normalize(rt, &mut config);
    }
    let applied = managed::applied_set(&config, rt, sub).map_err(|e| {
        ApiError::internal(format!(
            "failed to create typed patch object ({}, Kind={}): {e}",
            rt.api_version(),
            rt.kind
        ))
    })?;
    let precondition_rv = meta::resource_version(&config).to_string();
    let key = key_of(rt, namespace, name);
    for _ in 0..MAX_RETRIES {
        let Some(live) = state.store.get(rt.storage, &key) else {
            if sub == Subresource::Status {
                return Err(ApiError::not_found(rt, name));
            }
            if !precondition_rv.is_empty() {
                return Err(ApiError::not_found(rt, name));
            }
            match create_object_admitted(
                state,
                rt,
                config.clone(),
                Ownership::Apply(manager.clone(), applied.clone()),
                dry_run,
            )
            .await
            {
                Ok(stored) => {
                    return Ok(json_response(201, output::object_bytes(rt, &stored, shape)));
                }
                Err(e) if e.reason == "AlreadyExists" => continue,
                Err(e) => return Err(e),
            }
        };
        if !precondition_rv.is_empty() && precondition_rv != meta::resource_version(&live) {
            return Err(ApiError::conflict_modified(rt, name));
        }
        let mut managers = managed::decode(&live).ok().flatten().unwrap_or_default();
        let last = managers
            .iter()
            .find(|m| {
                m.name == manager && m.operation == Operation::Apply && m.subresource == sub.name()
            })
            .map(|m| m.set.clone())
            .unwrap_or_default();
        let keep = managers
            .iter()
            .filter(|m| {
                !(m.name == manager
                    && m.operation == Operation::Apply
                    && m.subresource == sub.name())
            })
            .fold(applied.clone(), |acc, m| acc.union(&m.set));
        let mut merged = ssa::merge(&live, &config, Cursor::root(rt));
        ssa::prune(&mut merged, &last, &keep, Cursor::root(rt));
        strategy::decode(rt, &mut merged)?;
        strategy::normalize_for(rt, &mut merged);
        strategy::apply_defaults(rt, &mut merged);
        admission::mutate(
            state,
            rt,
            AdmissionOperation::Update,
            sub,
            &mut merged,
            Some(&live),
            dry_run,
        )
        .await?;
        strategy::prepare_update(rt, &live, &mut merged, sub);
        meta::set_meta(
            &mut merged,
            "resourceVersion",
            meta::resource_version(&live),
        );
        let now = ids::now_rfc3339();
        managed::apply(
            &mut managers,
            &managed::strip_ignored(&live, rt, sub),
            &managed::strip_ignored(&merged, rt, sub),
            Cursor::root(rt),
            applied.clone(),
            &manager,
            sub,
            &rt.api_version(),
            force,
            &now,
        )?;
        managed::encode(&mut merged, &managers);
        validation::validate_update(rt, &live, &merged)?;
        match commit(state, rt, &key, &live, merged, dry_run) {
            Ok(stored) => return Ok(json_response(200, output::object_bytes(rt, &stored, shape))),
            Err(WriteError::Conflict | WriteError::NotFound) if precondition_rv.is_empty() => {
                continue;
            }
            Err(e) => return Err(map_write_error(e, rt, name, namespace)),
        }
    }
    Err(ApiError::conflict_modified(rt, name))
}

/// The resourceVersion and UID an update or patch carries, checked against the
/// live object; empty values are no precondition.
fn check_write_preconditions(
    rt: &ResourceType,
    name: &str,
    rv: &str,
    uid: &str,
    live: &Value,
) -> ApiResult<()> {
    if !rv.is_empty() && rv != meta::resource_version(live) {
        return Err(ApiError::conflict_modified(rt, name));
    }
    if !uid.is_empty() && uid != meta::uid(live) {
        return Err(uid_precondition_failed(rt, name, uid, live));
    }
    Ok(())
}

/// The apiserver's 409 for a UID precondition that does not match.
pub(super) fn uid_precondition_failed(
    rt: &ResourceType,
    name: &str,
    uid: &str,
    live: &Value,
) -> ApiError {
    ApiError::conflict(
        rt,
        name,
        &format!(
            "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
            meta::uid(live)
        ),
    )
}
