//! DELETE of one object and of collections.

use std::sync::Arc;

use http::Response;
use serde_json::{Value, json};

use super::write::{MAX_RETRIES, key_of, uid_precondition_failed};
use super::{json_response, read};
use crate::body::ResponseBody;
use crate::ids;
use crate::meta;
use crate::output::{self, Shape, Target};
use crate::patch;
use crate::request::Ctx;
use crate::resources::{Family, ResourceType};
use crate::server::State;
use crate::status::{ApiError, ApiResult, Cause, success_deleted};
use crate::store::WriteError;

/// Checks DeleteOptions preconditions against the live object.
fn check_delete_preconditions(
    rt: &ResourceType,
    name: &str,
    opts: &Value,
    live: &Value,
) -> ApiResult<()> {
    let pre = opts.get("preconditions");
    if let Some(uid) = pre.and_then(|p| p.get("uid")).and_then(Value::as_str)
        && uid != meta::uid(live)
    {
        return Err(uid_precondition_failed(rt, name, uid, live));
    }
    if let Some(rv) = pre
        .and_then(|p| p.get("resourceVersion"))
        .and_then(Value::as_str)
        && rv != meta::resource_version(live)
    {
        return Err(ApiError::conflict(
            rt,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                meta::resource_version(live)
            ),
        ));
    }
    if let Some(p) = opts.get("propagationPolicy").and_then(Value::as_str)
        && !matches!(p, "Orphan" | "Background" | "Foreground")
    {
        return Err(ApiError::invalid_options(
            "DeleteOptions",
            vec![Cause {
                reason: "FieldValueNotSupported",
                message: format!(
                    "Unsupported value: \"{p}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
                field: "propagationPolicy".into(),
            }],
        ));
    }
    Ok(())
}

fn delete_options(ctx: &Ctx) -> ApiResult<Value> {
    if ctx.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    let v = patch::parse_json(&ctx.body)?;
    if !v.is_object() {
        return Err(ApiError::bad_request("DeleteOptions must be a JSON object"));
    }
    Ok(v)
}

enum Deleted {
    /// Gone now; the answer is a success Status.
    Gone(Arc<Value>),
    /// Still there (finalizers or a terminating namespace); the answer is the object.
    Pending(Arc<Value>),
}

fn delete_one(
    state: &State,
    rt: &ResourceType,
    key: &str,
    name: &str,
    opts: &Value,
    dry_run: bool,
) -> ApiResult<Deleted> {
    for _ in 0..MAX_RETRIES {
        let live = state
            .store
            .get(rt.storage, key)
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        check_delete_preconditions(rt, name, opts, &live)?;
        if dry_run {
            return Ok(Deleted::Gone(live));
        }
        if rt.family == Family::Namespace {
            let mut last = (*live).clone();
            meta::set_meta(&mut last, "deletionTimestamp", ids::now_rfc3339());
            if let Some(o) = last.as_object_mut() {
                o.insert("status".into(), json!({"phase": "Terminating"}));
            }
            let namespaced: Vec<usize> = state
                .registry
                .all()
                .into_iter()
                .filter(|(_, t)| t.namespaced)
                .map(|(_, t)| t.storage)
                .collect();
            state.store.delete_namespace_contents(name, &namespaced);
            match state.store.delete(rt.storage, key, None) {
                Ok(_) => return Ok(Deleted::Pending(Arc::new(last))),
                Err(WriteError::NotFound) => return Err(ApiError::not_found(rt, name)),
                Err(_) => continue,
            }
        }
        let has_finalizers = meta::metadata(&live)
            .and_then(|m| m.get("finalizers"))
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if meta::metadata(&live).is_some_and(|m| m.contains_key("deletionTimestamp")) {
                return Ok(Deleted::Pending(live));
            }
            let mut next = (*live).clone();
            meta::set_meta(&mut next, "deletionTimestamp", ids::now_rfc3339());
            meta::set_meta(&mut next, "deletionGracePeriodSeconds", 0);
            match state
                .store
                .update(rt.storage, key, meta::resource_version(&live), next)
            {
                Ok(stored) => return Ok(Deleted::Pending(stored)),
                Err(_) => continue,
            }
        }
        match state
            .store
            .delete(rt.storage, key, Some(meta::resource_version(&live)))
        {
            Ok(last) => return Ok(Deleted::Gone(last)),
            Err(WriteError::NotFound) => return Err(ApiError::not_found(rt, name)),
            Err(_) => continue,
        }
    }
    Err(ApiError::conflict_modified(rt, name))
}

/// DELETE of one object.
pub(super) fn delete(
    state: &Arc<State>,
    rt: &ResourceType,
    namespace: Option<&str>,
    name: &str,
    ctx: &Ctx,
) -> ApiResult<Response<ResponseBody>> {
    let shape = output::negotiate(ctx.header("accept"), Target::Object)?;
    let dry_run = ctx.dry_run()?;
    let opts = delete_options(ctx)?;
    let key = key_of(rt, namespace, name);
    match delete_one(state, rt, &key, name, &opts, dry_run)? {
        Deleted::Gone(last) => {
            let status = success_deleted(rt, name, meta::uid(&last));
            Ok(json_response(
                200,
                serde_json::to_vec(&status).unwrap_or_default(),
            ))
        }
        Deleted::Pending(obj) => Ok(json_response(200, output::object_bytes(rt, &obj, shape))),
    }
}

/// DELETE of a collection (with selectors): answers the list of deleted objects.
pub(super) fn delete_collection(
    state: &Arc<State>,
    rt: &ResourceType,
    namespace: Option<&str>,
    ctx: &Ctx,
) -> ApiResult<Response<ResponseBody>> {
    let dry_run = ctx.dry_run()?;
    let opts = delete_options(ctx)?;
    let items = read::select_now(state, rt, namespace, ctx)?;
    let mut deleted: Vec<Arc<Value>> = Vec::new();
    for (key, obj) in items {
        let name = meta::name(&obj).to_string();
        match delete_one(state, rt, &key, &name, &opts, dry_run) {
            Ok(Deleted::Gone(o) | Deleted::Pending(o)) => deleted.push(o),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let refs: Vec<&Value> = deleted.iter().map(|v| v.as_ref()).collect();
    let meta = output::ListMeta {
        resource_version: state.store.current_rv(),
        continue_token: None,
        remaining: None,
    };
    Ok(json_response(
        200,
        output::list_bytes(rt, &refs, &meta, Shape::Full),
    ))
}
