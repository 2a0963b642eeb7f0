//! DELETE of one object and of collections: DeleteOptions (from the body,
//! or from the query when the body is empty, as the apiserver reads them),
//! preconditions, finalizers, and propagation policies, with the garbage
//! collector's part done synchronously (see [`crate::gc`]).
//!
//! What the apiserver does and the double follows:
//! - `Background` (the default, except for `batch/v1` Jobs): the object goes
//!   at once (a success `Status`), then its dependents.
//! - `Foreground` / `Orphan` (the Job default): the object is first updated
//!   with a `deletionTimestamp` and the `foregroundDeletion` / `orphan`
//!   finalizer, and that object is the answer. The double then deletes /
//!   detaches the dependents, removes the finalizer and the object at once.
//! - Other finalizers keep the object (with its `deletionTimestamp`) until
//!   they are removed.

use std::sync::Arc;

use http::Response;
use serde_json::{Value, json};

use super::system::mark_deleted;
use super::write::{MAX_RETRIES, key_of, uid_precondition_failed};
use super::{json_response, read};
use crate::body::ResponseBody;
use crate::crd;
use crate::gc;
use crate::ids;
use crate::meta;
use crate::output::{self, Shape, Target};
use crate::patch;
use crate::request::Ctx;
use crate::resources::{Family, NAMESPACES, ResourceType};
use crate::server::State;
use crate::status::{ApiError, ApiResult, Cause, success_deleted};
use crate::store::WriteError;

/// The finalizer of an orphaning deletion.
const ORPHAN: &str = "orphan";
/// The finalizer of a foreground deletion.
const FOREGROUND: &str = "foregroundDeletion";

/// How dependents are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    Orphan,
    Background,
    Foreground,
}

impl Policy {
    fn finalizer(self) -> Option<&'static str> {
        match self {
            Policy::Orphan => Some(ORPHAN),
            Policy::Foreground => Some(FOREGROUND),
            Policy::Background => None,
        }
    }
}

/// The parts of `DeleteOptions` the double acts on.
#[derive(Debug, Default)]
pub(super) struct DeleteOptions {
    uid: Option<String>,
    resource_version: Option<String>,
    propagation: Option<String>,
    orphan_dependents: Option<bool>,
}

fn options_error(reason: &'static str, message: String) -> ApiError {
    ApiError::invalid_options(
        "DeleteOptions",
        vec![Cause {
            reason,
            message,
            field: "propagationPolicy".into(),
        }],
    )
}

impl DeleteOptions {
    /// Reads the options from the body, or from the query when the body is empty.
    fn parse(ctx: &Ctx) -> ApiResult<Self> {
        let opts = if ctx.body.iter().all(u8::is_ascii_whitespace) {
            Self {
                propagation: ctx.query.get("propagationPolicy").map(str::to_string),
                orphan_dependents: ctx.query.flag("orphanDependents")?,
                ..Self::default()
            }
        } else {
            Self::from_body(&patch::parse_json(&ctx.body)?)?
        };
        opts.validate()?;
        Ok(opts)
    }

    fn from_body(v: &Value) -> ApiResult<Self> {
        if !v.is_object() {
            return Err(ApiError::bad_request("DeleteOptions must be a JSON object"));
        }
        let s = |path: &[&str]| {
            meta::get_path(v, path)
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        Ok(Self {
            uid: s(&["preconditions", "uid"]),
            resource_version: s(&["preconditions", "resourceVersion"]),
            propagation: s(&["propagationPolicy"]),
            orphan_dependents: v.get("orphanDependents").and_then(Value::as_bool),
        })
    }

    /// `ValidateDeleteOptions`.
    fn validate(&self) -> ApiResult<()> {
        if let (Some(_), Some(p)) = (self.orphan_dependents, &self.propagation) {
            return Err(options_error(
                "FieldValueInvalid",
                format!(
                    "Invalid value: \"{p}\": orphanDependents and deletionPropagation cannot be both set"
                ),
            ));
        }
        if let Some(p) = &self.propagation
            && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
        {
            return Err(options_error(
                "FieldValueNotSupported",
                format!(
                    "Unsupported value: \"{p}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
            ));
        }
        Ok(())
    }

    /// The policy for one object (`shouldOrphanDependents` /
    /// `shouldDeleteDependents`): the options, else a GC finalizer the
    /// object already carries, else the resource's default.
    fn policy(&self, rt: &ResourceType, live: &Value) -> Policy {
        if let Some(orphan) = self.orphan_dependents {
            return if orphan {
                Policy::Orphan
            } else {
                Policy::Background
            };
        }
        let finalizers = finalizers(live);
        let named = self.propagation.as_deref().or_else(|| {
            if finalizers.iter().any(|f| f == ORPHAN) {
                Some("Orphan")
            } else if finalizers.iter().any(|f| f == FOREGROUND) {
                Some("Foreground")
            } else {
                None
            }
        });
        match named.unwrap_or(rt.default_propagation()) {
            "Orphan" => Policy::Orphan,
            "Foreground" => Policy::Foreground,
            _ => Policy::Background,
        }
    }

    /// Checks the preconditions against the live object.
    fn check(&self, rt: &ResourceType, name: &str, live: &Value) -> ApiResult<()> {
        if let Some(uid) = &self.uid
            && uid != meta::uid(live)
        {
            return Err(uid_precondition_failed(rt, name, uid, live));
        }
        if let Some(rv) = &self.resource_version
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
        Ok(())
    }
}

fn finalizers(obj: &Value) -> Vec<String> {
    meta::metadata(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

fn set_finalizers(obj: &mut Value, list: &[String]) {
    let m = meta::metadata_mut(obj);
    if list.is_empty() {
        m.remove("finalizers");
    } else {
        m.insert("finalizers".into(), json!(list));
    }
}

/// What a DELETE of one object answers.
enum Deleted {
    /// Gone now; the answer is a success Status.
    Gone(Arc<Value>),
    /// Marked for deletion (finalizers, a terminating namespace or CRD); the
    /// answer is the object.
    Pending(Arc<Value>),
}

fn delete_one(
    state: &State,
    rt: &ResourceType,
    key: &str,
    name: &str,
    opts: &DeleteOptions,
    dry_run: bool,
) -> ApiResult<Deleted> {
    for _ in 0..MAX_RETRIES {
        let live = state
            .store
            .get(rt.storage, key)
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        opts.check(rt, name, &live)?;
        if dry_run {
            return Ok(Deleted::Gone(live));
        }
        let outcome = match rt.family {
            Family::Namespace => delete_namespace(state, rt, key, &live),
            Family::CustomResourceDefinition => delete_crd(state, rt, key, &live),
            _ => delete_with_policy(state, rt, key, &live, opts.policy(rt, &live)),
        };
        match outcome {
            Err(WriteError::NotFound) => return Err(ApiError::not_found(rt, name)),
            Err(_) => continue,
            Ok(d) => return Ok(d),
        }
    }
    Err(ApiError::conflict_modified(rt, name))
}

/// The namespace controller's work, at once: contents first, then the namespace.
fn delete_namespace(
    state: &State,
    rt: &ResourceType,
    key: &str,
    live: &Arc<Value>,
) -> Result<Deleted, WriteError> {
    let mut last = (**live).clone();
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
    state
        .store
        .delete_namespace_contents(meta::name(live), &namespaced);
    debug_assert_eq!(rt.storage, NAMESPACES);
    state.store.delete(rt.storage, key, None)?;
    Ok(Deleted::Pending(Arc::new(last)))
}

/// A CRD: marked as terminating (the answer), then the finalizer
/// controller's work at once: its custom resources go, its resources stop
/// being served, the cleanup finalizer goes, and with it the CRD unless
/// other finalizers remain.
fn delete_crd(
    state: &State,
    rt: &ResourceType,
    key: &str,
    live: &Arc<Value>,
) -> Result<Deleted, WriteError> {
    if meta::metadata(live).is_some_and(|m| m.contains_key("deletionTimestamp")) {
        return Ok(Deleted::Pending(live.clone()));
    }
    let mut marked = (**live).clone();
    crd::mark_terminating(&mut marked, &ids::now_rfc3339());
    let marked = state
        .store
        .update(rt.storage, key, meta::resource_version(live), marked)?;
    crd::remove_resources(state, meta::name(live));
    let mut others = finalizers(&marked);
    others.retain(|f| f != crd::CLEANUP_FINALIZER);
    let marked_rv = meta::resource_version(&marked).to_string();
    if others.is_empty() {
        state.store.delete(rt.storage, key, Some(&marked_rv))?;
    } else {
        let mut after = (*marked).clone();
        set_finalizers(&mut after, &others);
        state.store.update(rt.storage, key, &marked_rv, after)?;
    }
    Ok(Deleted::Pending(marked))
}

/// Deletes one object under a propagation policy.
fn delete_with_policy(
    state: &State,
    rt: &ResourceType,
    key: &str,
    live: &Arc<Value>,
    policy: Policy,
) -> Result<Deleted, WriteError> {
    let uid = meta::uid(live).to_string();
    let rv = meta::resource_version(live).to_string();
    let mut others: Vec<String> = finalizers(live);
    others.retain(|f| f != ORPHAN && f != FOREGROUND);
    let Some(gc_finalizer) = policy.finalizer() else {
        if others.is_empty() {
            let last = state.store.delete(rt.storage, key, Some(&rv))?;
            gc::delete_dependents(state, &uid);
            return Ok(Deleted::Gone(last));
        }
        return mark_for_deletion(state, rt, key, live, &others).map(Deleted::Pending);
    };
    let mut with_gc = others.clone();
    with_gc.push(gc_finalizer.to_string());
    let marked = mark_for_deletion(state, rt, key, live, &with_gc)?;
    match policy {
        Policy::Orphan => gc::orphan_dependents(state, &uid),
        _ => gc::delete_dependents(state, &uid),
    }
    // The collector is done: its finalizer goes, and with it the object
    // unless other finalizers remain.
    let mut after = (*marked).clone();
    set_finalizers(&mut after, &others);
    let marked_rv = meta::resource_version(&marked).to_string();
    if others.is_empty() {
        state.store.delete(rt.storage, key, Some(&marked_rv))?;
    } else {
        state.store.update(rt.storage, key, &marked_rv, after)?;
    }
    Ok(Deleted::Pending(marked))
}

/// Stores the object with a `deletionTimestamp` and the given finalizers,
/// unless that is already its state.
fn mark_for_deletion(
    state: &State,
    rt: &ResourceType,
    key: &str,
    live: &Arc<Value>,
    finalizer_list: &[String],
) -> Result<Arc<Value>, WriteError> {
    let mut next = (**live).clone();
    let stamped = mark_deleted(&mut next, &ids::now_rfc3339());
    let changed = finalizers(live) != finalizer_list;
    if !stamped && !changed {
        return Ok(live.clone());
    }
    set_finalizers(&mut next, finalizer_list);
    state
        .store
        .update(rt.storage, key, meta::resource_version(live), next)
}

fn deleted_response(
    rt: &ResourceType,
    name: &str,
    deleted: Deleted,
    opts: &DeleteOptions,
    shape: Shape,
) -> Response<ResponseBody> {
    match deleted {
        Deleted::Gone(last) => {
            let status = success_deleted(rt, name, meta::uid(&last));
            json_response(200, serde_json::to_vec(&status).unwrap_or_default())
        }
        Deleted::Pending(obj) => {
            // The apiserver answers 202 only to an explicit orphanDependents=false.
            let code = if opts.orphan_dependents == Some(false) {
                202
            } else {
                200
            };
            json_response(code, output::object_bytes(rt, &obj, shape))
        }
    }
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
    let opts = DeleteOptions::parse(ctx)?;
    let key = key_of(rt, namespace, name);
    let deleted = delete_one(state, rt, &key, name, &opts, dry_run)?;
    Ok(deleted_response(rt, name, deleted, &opts, shape))
}

/// DELETE of a collection (with selectors): answers the list of deleted objects.
pub(super) fn delete_collection(
    state: &Arc<State>,
    rt: &ResourceType,
    namespace: Option<&str>,
    ctx: &Ctx,
) -> ApiResult<Response<ResponseBody>> {
    let dry_run = ctx.dry_run()?;
    let opts = DeleteOptions::parse(ctx)?;
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
