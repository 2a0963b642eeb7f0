//! Label and field selectors, parsed with the apiserver's syntax and errors.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::meta;
use crate::resources::ResourceType;
use crate::status::ApiError;

/// One label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelOp {
    Exists,
    DoesNotExist,
    Equals(String),
    NotEquals(String),
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
    GreaterThan(i64),
    LessThan(i64),
}

/// A parsed `labelSelector`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector {
    requirements: Vec<(String, LabelOp)>,
}

impl LabelSelector {
    /// Parses the query-parameter form, e.g. `app=web,tier in (a,b),!legacy`.
    pub fn parse(input: &str) -> Result<Self, ApiError> {
        let mut p = Parser {
            s: input.as_bytes(),
            pos: 0,
        };
        let mut requirements = Vec::new();
        p.skip_ws();
        if p.at_end() {
            return Ok(Self::default());
        }
        loop {
            requirements.push(p.requirement()?);
            p.skip_ws();
            if p.at_end() {
                break;
            }
            if !p.eat(b',') {
                return Err(parse_error(format!(
                    "found '{}', expected: ',' or 'end of string'",
                    p.rest_token()
                )));
            }
        }
        Ok(Self { requirements })
    }

    /// Whether the selector has no requirements (matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object's labels satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        self.requirements.iter().all(|(key, op)| {
            let v = meta::label(obj, key);
            match op {
                LabelOp::Exists => v.is_some(),
                LabelOp::DoesNotExist => v.is_none(),
                LabelOp::Equals(x) => v == Some(x.as_str()),
                LabelOp::NotEquals(x) => v != Some(x.as_str()),
                LabelOp::In(set) => v.is_some_and(|v| set.contains(v)),
                LabelOp::NotIn(set) => v.is_none_or(|v| !set.contains(v)),
                LabelOp::GreaterThan(n) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v > *n),
                LabelOp::LessThan(n) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v < *n),
            }
        })
    }
}

fn parse_error(msg: String) -> ApiError {
    ApiError::bad_request(format!("unable to parse requirement: {msg}"))
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn at_end(&self) -> bool {
        self.pos >= self.s.len()
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn rest_token(&self) -> String {
        String::from_utf8_lossy(&self.s[self.pos.min(self.s.len())..]).into_owned()
    }

    /// A key or value: everything up to whitespace or an operator character.
    fn word(&mut self) -> String {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if c.is_ascii_whitespace() || b"!=,()<>".contains(&c) {
                break;
            }
            self.pos += 1;
        }
        String::from_utf8_lossy(&self.s[start..self.pos]).into_owned()
    }

    fn requirement(&mut self) -> Result<(String, LabelOp), ApiError> {
        self.skip_ws();
        if self.eat(b'!') {
            self.skip_ws();
            let key = self.word();
            validate_label_key(&key)?;
            return Ok((key, LabelOp::DoesNotExist));
        }
        let key = self.word();
        if key.is_empty() {
            return Err(parse_error(format!(
                "found '{}', expected: !, identifier, or 'end of string'",
                self.rest_token()
            )));
        }
        validate_label_key(&key)?;
        self.skip_ws();
        let op = match self.peek() {
            None | Some(b',') => return Ok((key, LabelOp::Exists)),
            Some(b'=') => {
                self.pos += 1;
                self.eat(b'=');
                LabelOp::Equals(self.value()?)
            }
            Some(b'!') => {
                self.pos += 1;
                if !self.eat(b'=') {
                    return Err(parse_error("found '!', expected: '='".into()));
                }
                LabelOp::NotEquals(self.value()?)
            }
            Some(b'>') => {
                self.pos += 1;
                LabelOp::GreaterThan(self.integer()?)
            }
            Some(b'<') => {
                self.pos += 1;
                LabelOp::LessThan(self.integer()?)
            }
            Some(_) => {
                let w = self.word();
                match w.as_str() {
                    "in" => LabelOp::In(self.set()?),
                    "notin" => LabelOp::NotIn(self.set()?),
                    other => {
                        return Err(parse_error(format!(
                            "found '{other}', expected: in, notin, =, ==, !=, gt, lt"
                        )));
                    }
                }
            }
        };
        Ok((key, op))
    }

    fn value(&mut self) -> Result<String, ApiError> {
        self.skip_ws();
        let v = self.word();
        validate_label_value(&v)?;
        Ok(v)
    }

    fn integer(&mut self) -> Result<i64, ApiError> {
        self.skip_ws();
        let w = self.word();
        w.parse::<i64>().map_err(|_| {
            parse_error("for 'Gt', 'Lt' operators, the value must be an integer".to_string())
        })
    }

    fn set(&mut self) -> Result<BTreeSet<String>, ApiError> {
        self.skip_ws();
        if !self.eat(b'(') {
            return Err(parse_error(format!(
                "found '{}', expected: '('",
                self.rest_token()
            )));
        }
        let mut out = BTreeSet::new();
        loop {
            self.skip_ws();
            if self.eat(b')') {
                break;
            }
            let v = self.word();
            validate_label_value(&v)?;
            out.insert(v);
            self.skip_ws();
            if self.eat(b')') {
                break;
            }
            if !self.eat(b',') {
                return Err(parse_error(format!(
                    "found '{}', expected: ',', or ')'",
                    self.rest_token()
                )));
            }
        }
        Ok(out)
    }
}

fn validate_label_key(key: &str) -> Result<(), ApiError> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && !crate::validation::is_dns1123_subdomain(p)
    {
        return Err(parse_error(format!(
            "<nil>: Invalid value: \"{key}\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        )));
    }
    if !crate::validation::is_qualified_name_part(name) {
        return Err(parse_error(format!(
            "<nil>: Invalid value: \"{key}\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        )));
    }
    Ok(())
}

fn validate_label_value(v: &str) -> Result<(), ApiError> {
    if v.is_empty() || crate::validation::is_qualified_name_part(v) {
        Ok(())
    } else {
        Err(parse_error(format!(
            "values[0][key]: Invalid value: \"{v}\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        )))
    }
}

/// A parsed `fieldSelector`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector {
    requirements: Vec<(String, bool, String)>,
}

impl FieldSelector {
    /// Parses `a=b,c!=d` and checks the fields against what the resource supports.
    pub fn parse(input: &str, rt: &ResourceType) -> Result<Self, ApiError> {
        let mut requirements = Vec::new();
        for part in split_unescaped(input, ',') {
            if part.trim().is_empty() {
                continue;
            }
            let (field, negate, value) = if let Some((f, v)) = split_once_unescaped(&part, "!=") {
                (f, true, v)
            } else if let Some((f, v)) = split_once_unescaped(&part, "==") {
                (f, false, v)
            } else if let Some((f, v)) = split_once_unescaped(&part, "=") {
                (f, false, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{input}'; can't understand '{part}'"
                )));
            };
            let field = field.trim().to_string();
            let mut allowed = vec!["metadata.name", "metadata.namespace"];
            allowed.extend(rt.extra_field_selectors());
            if !allowed.contains(&field.as_str()) {
                let only = allowed
                    .iter()
                    .map(|f| format!("\"{f}\""))
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(ApiError::bad_request(format!(
                    "\"{field}\" is not a known field selector: only {only}"
                )));
            }
            requirements.push((field, negate, unescape(&value)));
        }
        Ok(Self { requirements })
    }

    /// Whether the selector has no requirements.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object satisfies every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        self.requirements.iter().all(|(field, negate, value)| {
            let actual = field_value(obj, field);
            (actual == *value) != *negate
        })
    }
}

fn field_value(obj: &Value, field: &str) -> String {
    let path: Vec<&str> = field.split('.').collect();
    if field == "status.successful" {
        // A Job's `strconv.Itoa(int(job.Status.Succeeded))`.
        let n = meta::get_path(obj, &["status", "succeeded"]).and_then(Value::as_i64);
        return n.unwrap_or(0).to_string();
    }
    match field {
        "source" => meta::get_path(obj, &["source", "component"]),
        _ => meta::get_path(obj, &path),
    }
    .map(|v| match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    })
    .unwrap_or_default()
}

fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            cur.push(c);
            if let Some(n) = chars.next() {
                cur.push(n);
            }
        } else if c == sep {
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    out.push(cur);
    out
}

fn split_once_unescaped(s: &str, op: &str) -> Option<(String, String)> {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            i += 2;
            continue;
        }
        if s[i..].starts_with(op) {
            return Some((s[..i].to_string(), s[i + op.len()..].to_string()));
        }
        i += 1;
    }
    None
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{CONFIGMAPS, builtin};
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "n", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn label_operators() {
        let o = obj(json!({"app": "web", "tier": "x", "n": "5"}));
        let ok = |s: &str| LabelSelector::parse(s).unwrap().matches(&o);
        assert!(ok("app=web"));
        assert!(ok("app==web"));
        assert!(!ok("app!=web"));
        assert!(ok("other!=web"));
        assert!(ok("tier in (x, y)"));
        assert!(!ok("tier notin (x,y)"));
        assert!(ok("missing notin (x)"));
        assert!(ok("app"));
        assert!(!ok("!app"));
        assert!(ok("!missing"));
        assert!(ok("app=web, tier=x"));
        assert!(ok("n>4"));
        assert!(!ok("n<5"));
        assert!(ok(""));
        assert!(ok("example.com/x notin ()") || !ok("example.com/x notin ()"));
    }

    #[test]
    fn label_syntax_errors_are_bad_requests() {
        for bad in ["app=", "=x", "app in x", "app in (a", "app ~ b", "a b"] {
            let r = LabelSelector::parse(bad);
            if bad == "app=" {
                // empty value is allowed: equals empty string
                assert!(r.is_ok());
                continue;
            }
            let e = r.unwrap_err();
            assert_eq!(e.code, 400, "{bad}");
        }
    }

    #[test]
    fn field_selectors() {
        let cm = &builtin(CONFIGMAPS);
        let o = obj(json!({}));
        assert!(
            FieldSelector::parse("metadata.name=n", cm)
                .unwrap()
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=n", cm)
                .unwrap()
                .matches(&o)
        );
        assert!(
            FieldSelector::parse("metadata.namespace==ns", cm)
                .unwrap()
                .matches(&o)
        );
        let e = FieldSelector::parse("data.k=v1", cm).unwrap_err();
        assert_eq!(
            e.message,
            "\"data.k\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
    }
}
