//! Discovery documents (`/api`, `/apis`, `/apis/<group>[/<version>]`) and `/version`.

use std::sync::Arc;

use http::Response;
use serde_json::{Value, json};

use super::json_response;
use crate::body::ResponseBody;
use crate::output::{self, Target};
use crate::request::Ctx;
use crate::resources::{Family, ResourceType};
use crate::routes::Route;
use crate::server::State;
use crate::status::{ApiError, ApiResult};

fn group_entry(state: &State, group: &str) -> Value {
    let versions: Vec<Value> = state
        .registry
        .versions(group)
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "name": group,
        "preferredVersion": versions.first().cloned().unwrap_or_default(),
        "versions": versions
    })
}

fn resource_entries(rt: &ResourceType) -> Vec<Value> {
    let verbs: &[&str] = if rt.family == Family::Namespace {
        &[
            "create", "delete", "get", "list", "patch", "update", "watch",
        ]
    } else {
        &[
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    };
    let mut main = json!({
        "kind": rt.kind,
        "name": rt.plural,
        "namespaced": rt.namespaced,
        "singularName": rt.singular,
        "verbs": verbs,
    });
    if !rt.short_names.is_empty() {
        main["shortNames"] = json!(rt.short_names);
    }
    if !rt.categories.is_empty() {
        main["categories"] = json!(rt.categories);
    }
    let mut out = vec![main];
    if rt.has_status_subresource() {
        out.push(json!({
            "kind": rt.kind,
            "name": format!("{}/status", rt.plural),
            "namespaced": rt.namespaced,
            "singularName": "",
            "verbs": ["get", "patch", "update"],
        }));
    }
    out
}

/// Serves a discovery route.
pub(super) fn serve(
    state: &Arc<State>,
    route: &Route,
    ctx: &Ctx,
) -> ApiResult<Response<ResponseBody>> {
    output::negotiate(ctx.header("accept"), Target::Object)?;
    let body = match route {
        Route::CoreVersions => json!({
            "kind": "APIVersions",
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": state.addr.to_string()}],
            "versions": ["v1"]
        }),
        Route::Groups => json!({
            "apiVersion": "v1",
            "groups": state.registry.groups().iter().map(|g| group_entry(state, g)).collect::<Vec<_>>(),
            "kind": "APIGroupList"
        }),
        Route::Group(g) => {
            let mut e = group_entry(state, g);
            e["apiVersion"] = json!("v1");
            e["kind"] = json!("APIGroup");
            e
        }
        Route::ResourceList { group, version } => {
            let mut entries: Vec<Value> = state
                .registry
                .all()
                .iter()
                .filter(|(_, r)| r.group == *group && r.version == *version)
                .flat_map(|(_, r)| resource_entries(r))
                .collect();
            entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
            let gv = if group.is_empty() {
                version.clone()
            } else {
                format!("{group}/{version}")
            };
            let mut doc =
                json!({"groupVersion": gv, "kind": "APIResourceList", "resources": entries});
            if !group.is_empty() {
                doc["apiVersion"] = json!("v1");
            }
            doc
        }
        Route::Version => json!({
            "buildDate": "1970-01-01T00:00:00Z",
            "compiler": "gc",
            "emulationMajor": "1",
            "emulationMinor": "34",
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "gitVersion": "v1.34.0-apiserver-double",
            "goVersion": "go1.24.4",
            "major": "1",
            "minCompatibilityMajor": "1",
            "minCompatibilityMinor": "33",
            "minor": "34",
            "platform": format!("{}/{}", std::env::consts::OS, if std::env::consts::ARCH == "x86_64" { "amd64" } else { std::env::consts::ARCH })
        }),
        _ => return Err(ApiError::no_route()),
    };
    Ok(json_response(
        200,
        serde_json::to_vec(&body).unwrap_or_default(),
    ))
}
