//! Request dispatch to the verb handlers.

mod delete;
mod discovery;
mod read;
mod system;
mod watch;
mod write;

use std::sync::Arc;

use http::{Method, Response, StatusCode, header};

use crate::body::ResponseBody;
use crate::managed::Subresource;
use crate::request::Ctx;
use crate::resources::{Family, ResourceType};
use crate::routes::Route;
use crate::server::State;
use crate::status::{ApiError, ApiResult};

pub(crate) use system::{SystemWrite, delete_now, system_replace, system_update};
pub(crate) use write::{Ownership, create_object};

/// A JSON response.
pub(crate) fn json_response(status: u16, body: Vec<u8>) -> Response<ResponseBody> {
    let mut r = Response::new(ResponseBody::full(body));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

/// The `Status` response of a failure.
pub(crate) fn error_response(e: &ApiError) -> Response<ResponseBody> {
    let mut r = json_response(
        e.code,
        serde_json::to_vec(&e.to_status()).unwrap_or_default(),
    );
    if let Some(secs) = e.retry_after
        && let Ok(v) = header::HeaderValue::from_str(&secs.to_string())
    {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

/// The store key prefix of a collection (`ns/` or everything).
pub(crate) fn prefix(rt: &ResourceType, namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) if rt.namespaced => format!("{ns}/"),
        _ => String::new(),
    }
}

/// The resource type of a route, if still served and usable: a custom
/// resource read through a version other than the storage version needs
/// conversion, which the double can only do for the `None` strategy.
fn served(state: &State, resource: usize) -> ApiResult<Arc<ResourceType>> {
    let rt = state
        .registry
        .get(resource)
        .ok_or_else(ApiError::no_route)?;
    if let Some(c) = &rt.custom
        && c.webhook_conversion
        && c.storage_api_version != rt.api_version()
    {
        return Err(ApiError::internal(format!(
            "conversion webhook for {}, Kind={} failed: the apiserver double cannot call conversion webhooks",
            c.storage_api_version, rt.kind
        )));
    }
    Ok(rt)
}

/// Handles an API request.
pub(crate) async fn dispatch(
    state: &Arc<State>,
    route: Route,
    ctx: Ctx,
) -> ApiResult<Response<ResponseBody>> {
    let m = &ctx.method;
    match route {
        Route::CoreVersions
        | Route::Groups
        | Route::Group(_)
        | Route::ResourceList { .. }
        | Route::Version => {
            if m != Method::GET {
                return Err(ApiError::method_not_allowed());
            }
            discovery::serve(state, &route, &ctx)
        }
        Route::Health => Ok(Response::new(ResponseBody::full("ok"))),
        Route::Collection {
            resource,
            namespace,
        } => {
            let rt = served(state, resource)?;
            let ns = namespace.as_deref();
            match *m {
                Method::GET => {
                    if ctx.query.flag("watch")?.unwrap_or(false) {
                        watch::serve(state, &rt, ns, &ctx)
                    } else {
                        read::list(state, &rt, ns, &ctx)
                    }
                }
                Method::POST if namespace.is_some() || !rt.namespaced => {
                    write::create(state, &rt, ns, &ctx).await
                }
                Method::DELETE if rt.family != Family::Namespace => {
                    delete::delete_collection(state, &rt, ns, &ctx)
                }
                _ => Err(ApiError::method_not_allowed()),
            }
        }
        Route::Object {
            resource,
            namespace,
            name,
            subresource,
        } => {
            let rt = served(state, resource)?;
            let sub = match subresource.as_deref() {
                None => Subresource::Main,
                Some("status") if rt.has_status_subresource() => Subresource::Status,
                Some(_) => return Err(ApiError::no_route()),
            };
            let ns = namespace.as_deref();
            match (m.clone(), sub) {
                (Method::GET, _) => read::get(state, &rt, ns, &name, &ctx),
                (Method::PUT, _) => write::update(state, &rt, ns, &name, sub, &ctx).await,
                (Method::PATCH, _) => write::patch(state, &rt, ns, &name, sub, &ctx).await,
                (Method::DELETE, Subresource::Main) => delete::delete(state, &rt, ns, &name, &ctx),
                _ => Err(ApiError::method_not_allowed()),
            }
        }
        Route::Unknown => Err(ApiError::no_route()),
        Route::NotServed => Ok(page_not_found()),
    }
}

/// kube-apiserver's answer to a path no API serves: Go's `http.NotFound`, a
/// plain-text body (not a `Status`, which clients fail to parse).
pub(crate) fn page_not_found() -> Response<ResponseBody> {
    let mut r = Response::new(ResponseBody::full("404 page not found\n"));
    *r.status_mut() = StatusCode::NOT_FOUND;
    let headers = r.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    r
}
