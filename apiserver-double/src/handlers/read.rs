//! GET of one object and LIST with resourceVersion semantics, pagination
//! and selectors.

use std::sync::Arc;

use http::Response;
use serde_json::Value;

use super::{json_response, prefix};
use crate::body::ResponseBody;
use crate::meta;
use crate::output::{self, ListMeta, Target};
use crate::request::Ctx;
use crate::resources::ResourceType;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::server::State;
use crate::status::{ApiError, ApiResult, Cause};
use crate::store::{PageRequest, ReadError};

/// GET one object.
pub(super) fn get(
    state: &Arc<State>,
    rt: &ResourceType,
    namespace: Option<&str>,
    name: &str,
    ctx: &Ctx,
) -> ApiResult<Response<ResponseBody>> {
    let shape = output::negotiate(ctx.header("accept"), Target::Object)?;
    let key = meta::store_key(namespace.filter(|_| rt.namespaced), name);
    let obj = state
        .store
        .get(rt.storage, &key)
        .ok_or_else(|| ApiError::not_found(rt, name))?;
    Ok(json_response(200, output::object_bytes(rt, &obj, shape)))
}

fn list_options_error(field: &str, reason: &'static str, message: String) -> ApiError {
    ApiError::invalid_options(
        "ListOptions",
        vec![Cause {
            reason,
            message,
            field: field.into(),
        }],
    )
}

/// Parses a resourceVersion parameter.
pub(super) fn parse_rv(rv: &str) -> ApiResult<u64> {
    rv.parse::<u64>().map_err(|_| {
        ApiError::bad_request(format!(
            "invalid resource version: strconv.ParseUint: parsing \"{rv}\": invalid syntax"
        ))
    })
}

/// LIST a collection.
pub(super) fn list(
    state: &Arc<State>,
    rt: &ResourceType,
    namespace: Option<&str>,
    ctx: &Ctx,
) -> ApiResult<Response<ResponseBody>> {
    let shape = output::negotiate(ctx.header("accept"), Target::List)?;
    let labels = LabelSelector::parse(ctx.query.get("labelSelector").unwrap_or(""))?;
    let fields = FieldSelector::parse(ctx.query.get("fieldSelector").unwrap_or(""), rt)?;
    let limit = ctx
        .query
        .int("limit")?
        .filter(|l| *l > 0)
        .map(|l| l as usize);
    let cont = ctx.query.get("continue").filter(|c| !c.is_empty());
    let rv = ctx.query.get("resourceVersion").unwrap_or("");
    let rvm = ctx
        .query
        .get("resourceVersionMatch")
        .filter(|m| !m.is_empty());

    if let Some(m) = rvm {
        if m != "NotOlderThan" && m != "Exact" {
            return Err(list_options_error(
                "resourceVersionMatch",
                "FieldValueNotSupported",
                format!(
                    "Unsupported value: \"{m}\": supported values: \"Exact\", \"NotOlderThan\""
                ),
            ));
        }
        if rv.is_empty() {
            return Err(list_options_error(
                "resourceVersionMatch",
                "FieldValueForbidden",
                "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
                    .into(),
            ));
        }
        if cont.is_some() {
            return Err(list_options_error(
                "resourceVersionMatch",
                "FieldValueForbidden",
                "Forbidden: resourceVersionMatch is forbidden when continue is provided".into(),
            ));
        }
        if m == "Exact" && rv == "0" {
            return Err(list_options_error(
                "resourceVersionMatch",
                "FieldValueForbidden",
                "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""
                    .into(),
            ));
        }
    }

    let pfx = prefix(rt, namespace);
    let mut start_after: Option<String> = None;
    let (at, expired_msg) = if let Some(token) = cont {
        if !rv.is_empty() && rv != "0" {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        let (crv, start) = output::decode_continue(token)?;
        start_after = Some(format!("{pfx}{start}"));
        (
            Some(crv),
            "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
        )
    } else if rv.is_empty() || rv == "0" {
        (None, "")
    } else {
        let n = parse_rv(rv)?;
        if rvm == Some("Exact") {
            (
                Some(n),
                "The resourceVersion for the provided list is too old.",
            )
        } else {
            let cur = state.store.current_rv();
            if n > cur {
                return Err(ApiError::too_large_resource_version(n, cur));
            }
            (None, "")
        }
    };

    let selecting = !labels.is_empty() || !fields.is_empty();
    let request = PageRequest {
        prefix: &pfx,
        at,
        start_after: start_after.as_deref(),
        limit,
        selecting,
    };
    let page = state
        .store
        .page(rt.storage, &request, |v| {
            labels.matches(v) && fields.matches(v)
        })
        .map_err(|e| match e {
            ReadError::Expired => ApiError::expired(expired_msg),
            ReadError::TooLarge(cur) => ApiError::too_large_resource_version(at.unwrap_or(0), cur),
        })?;
    let (snap_rv, remaining) = (page.rv, page.remaining);
    let page_items: Vec<&Value> = page.items.iter().map(|(_, v)| v.as_ref()).collect();
    let last_key: Option<&str> = page.items.last().map(|(k, _)| k.as_str());
    let continue_token = (remaining > 0)
        .then(|| {
            last_key.map(|k| output::encode_continue(snap_rv, &format!("/{}", &k[pfx.len()..])))
        })
        .flatten();
    let meta = ListMeta {
        resource_version: snap_rv,
        remaining: (continue_token.is_some() && !selecting).then_some(remaining),
        continue_token,
    };
    Ok(json_response(
        200,
        output::list_bytes(rt, &page_items, &meta, shape),
    ))
}

/// Items of a collection that match the request's selectors, now.
pub(super) fn select_now(
    state: &Arc<State>,
    rt: &ResourceType,
    namespace: Option<&str>,
    ctx: &Ctx,
) -> ApiResult<Vec<(String, Arc<Value>)>> {
    let labels = LabelSelector::parse(ctx.query.get("labelSelector").unwrap_or(""))?;
    let fields = FieldSelector::parse(ctx.query.get("fieldSelector").unwrap_or(""), rt)?;
    let (_, items) = state
        .store
        .snapshot(rt.storage, &prefix(rt, namespace), None)
        .map_err(|_| ApiError::internal("snapshot failed"))?;
    Ok(items
        .into_iter()
        .filter(|(_, o)| labels.matches(o) && fields.matches(o))
        .collect())
}
