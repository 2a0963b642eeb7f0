//! Creating objects directly, without a client's request: for
//! [`ApiServerDouble::create`](crate::ApiServerDouble::create) in process, and for a
//! process outside through `POST /_double/objects`, whose body holds one object
//! per line (JSON), so that seeding hundreds of thousands of objects costs no
//! request each.

use http::Response;
use serde_json::{Value, json};

use crate::body::ResponseBody;
use crate::handlers::{self, json_response};
use crate::server::State;
use crate::{Error, meta};

/// Creates `object` through the same defaulting and validation as a POST (not
/// recorded); `apiVersion` and `kind` pick the resource, a namespaced object
/// without a namespace goes to `default`.
pub(crate) fn create(state: &State, object: Value) -> Result<Value, Error> {
    let av = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
    let rt = state.registry.by_kind(av, kind).ok_or_else(|| Error::Api {
        code: 404,
        reason: "NotFound".into(),
        message: format!("no resource for {av}, Kind={kind}"),
    })?;
    let mut object = object;
    if rt.namespaced && meta::namespace(&object).is_empty() {
        meta::set_meta(&mut object, "namespace", "default");
    }
    handlers::create_object(
        state,
        &rt,
        object,
        handlers::Ownership::Update("unknown".into()),
        false,
    )
    .map(|v| crate::managed::expanded(&v).into_owned())
    .map_err(|e| Error::Api {
        code: e.code,
        reason: e.reason.to_string(),
        message: e.message,
    })
}

/// `POST /_double/objects`: creates the object on each line of `body` in
/// order, answering `{"created": n}`; at the first line that is not JSON
/// (400) or not created (the API's status), stops and answers
/// `{"created": n, "error": "line L: …"}` with what was created before it.
pub(crate) fn create_lines(state: &State, body: &[u8]) -> Response<ResponseBody> {
    let mut created = 0_u64;
    for (i, line) in body.split(|b| *b == b'\n').enumerate() {
        if line.trim_ascii().is_empty() {
            continue;
        }
        let failure = match serde_json::from_slice::<Value>(line) {
            Ok(object) => match create(state, object) {
                Ok(_) => {
                    created += 1;
                    continue;
                }
                Err(Error::Api { code, message, .. }) => (code, message),
                Err(other) => (500, other.to_string()),
            },
            Err(e) => (400, format!("not JSON: {e}")),
        };
        let (code, message) = failure;
        let body = json!({"created": created, "error": format!("line {}: {message}", i + 1)});
        return json_response(code, serde_json::to_vec(&body).unwrap_or_default());
    }
    json_response(
        200,
        serde_json::to_vec(&json!({"created": created})).unwrap_or_default(),
    )
}
