//! A buffered request as the handlers see it.

use bytes::Bytes;
use http::{HeaderMap, Method};

use crate::status::{ApiError, ApiResult};

/// Query parameters in order of appearance.
#[derive(Debug, Clone, Default)]
pub(crate) struct Query(Vec<(String, String)>);

impl Query {
    /// Parses a raw query string (tolerates empty pairs such as `?&watch=1`).
    pub fn parse(raw: Option<&str>) -> Self {
        Query(
            raw.map(|q| {
                form_urlencoded::parse(q.as_bytes())
                    .filter(|(k, _)| !k.is_empty())
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect()
            })
            .unwrap_or_default(),
        )
    }

    /// The first value of a parameter.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// A boolean parameter (`true`/`1`; anything else is false, missing is `None`).
    pub fn flag(&self, name: &str) -> ApiResult<Option<bool>> {
        match self.get(name) {
            None => Ok(None),
            Some("true" | "1" | "True" | "TRUE") => Ok(Some(true)),
            Some("false" | "0" | "False" | "FALSE" | "") => Ok(Some(false)),
            Some(other) => Err(ApiError::bad_request(format!(
                "strconv.ParseBool: parsing \"{other}\": invalid syntax"
            ))),
        }
    }

    /// An integer parameter.
    pub fn int(&self, name: &str) -> ApiResult<Option<i64>> {
        match self.get(name) {
            None | Some("") => Ok(None),
            Some(v) => v.parse::<i64>().map(Some).map_err(|_| {
                ApiError::bad_request(format!("strconv.ParseInt: parsing \"{v}\": invalid syntax"))
            }),
        }
    }
}

/// A request with its body read.
#[derive(Debug)]
pub(crate) struct Ctx {
    /// Method.
    pub method: Method,
    /// Query parameters.
    pub query: Query,
    /// Headers.
    pub headers: HeaderMap,
    /// Body.
    pub body: Bytes,
}

impl Ctx {
    /// A header as a string.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The field manager of a write (`fieldManager`, user agent, or `unknown`).
    pub fn manager(&self) -> String {
        crate::managed::manager_name(self.query.get("fieldManager"), self.header("user-agent"))
    }

    /// Whether `dryRun=All` was requested.
    pub fn dry_run(&self) -> ApiResult<bool> {
        match self.query.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "dryRun: Unsupported value: \"{other}\": supported values: \"All\""
            ))),
        }
    }
}
