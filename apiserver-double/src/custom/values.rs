//! Validation of a custom resource against its structural schema, with the
//! messages `ValidateCustomResource` makes of kube-openapi's errors
//! (`spec.replicas: Invalid value: "string": spec.replicas in body must be
//! of type integer: "string"`), plus the uniqueness of `set` and `map` list
//! items.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::pattern::PatternError;
use crate::structural::Structural;
use crate::validation::Errors;

/// Why a value could not be checked at all (the caller answers 500).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Unsupported(pub String);

/// The OpenAPI type name of a JSON value.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_ok(want: &str, v: &Value) -> bool {
    let got = type_name(v);
    got == want || (want == "number" && got == "integer")
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Go's `%v` of a number in kube-openapi messages.
fn num(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{}", f as i64)
    } else {
        format!("{f}")
    }
}

/// Validates `v` at `path` (empty for the object root).
pub(crate) fn validate(
    s: &Structural,
    v: &Value,
    path: &str,
    errs: &mut Errors,
) -> Result<(), Unsupported> {
    if v.is_null() {
        if !s.nullable && !s.type_.is_empty() {
            let shown = Value::from("null");
            errs.invalid(
                path,
                &shown,
                &format!("{path} in body must be of type {}: \"null\"", s.type_),
            );
        }
        return Ok(());
    }
    if s.int_or_string {
        if !matches!(type_name(v), "integer" | "string") {
            let got = type_name(v);
            errs.invalid(
                path,
                &Value::from(got),
                &format!("{path} in body must be of type integer,string: \"{got}\""),
            );
            return Ok(());
        }
    } else if !s.type_.is_empty() && !type_ok(&s.type_, v) {
        let got = type_name(v);
        errs.invalid(
            path,
            &Value::from(got),
            &format!("{path} in body must be of type {}: \"{got}\"", s.type_),
        );
        return Ok(());
    }
    keywords(s, v, path, errs)?;
    junctors(s, v, path, errs)?;
    match v {
        Value::Object(m) => object(s, m, path, errs),
        Value::Array(items) => array(s, items, path, errs),
        _ => Ok(()),
    }
}

fn keywords(s: &Structural, v: &Value, path: &str, errs: &mut Errors) -> Result<(), Unsupported> {
    let k = &s.validation;
    if let Some(values) = &k.enum_values
        && !values.contains(v)
    {
        // The apiserver JSON-encodes each value, then quotes it again.
        let supported = values
            .iter()
            .map(|e| Value::from(e.to_string()).to_string())
            .collect::<Vec<_>>()
            .join(", ");
        errs.push(
            "FieldValueNotSupported",
            path,
            format!(
                "Unsupported value: {}: supported values: {supported}",
                crate::validation::show(v)
            ),
        );
    }
    if let Some(f) = v.as_f64() {
        if let Some(min) = k.minimum {
            let (bad, word) = if k.exclusive_minimum {
                (f <= min, "greater than")
            } else {
                (f < min, "greater than or equal to")
            };
            if bad {
                errs.invalid(
                    path,
                    v,
                    &format!("{path} in body should be {word} {}", num(min)),
                );
            }
        }
        if let Some(max) = k.maximum {
            let (bad, word) = if k.exclusive_maximum {
                (f >= max, "less than")
            } else {
                (f > max, "less than or equal to")
            };
            if bad {
                errs.invalid(
                    path,
                    v,
                    &format!("{path} in body should be {word} {}", num(max)),
                );
            }
        }
        if let Some(m) = k.multiple_of
            && m != 0.0
            && (f / m).fract() != 0.0
        {
            errs.invalid(
                path,
                v,
                &format!("{path} in body should be a multiple of {}", num(m)),
            );
        }
    }
    if let Some(text) = v.as_str() {
        let len = text.chars().count() as u64;
        if let Some(min) = k.min_length
            && len < min
        {
            errs.invalid(
                path,
                v,
                &format!("{path} in body should be at least {min} chars long"),
            );
        }
        if let Some(max) = k.max_length
            && len > max
        {
            errs.push(
                "FieldValueTooLong",
                path,
                format!("Too long: may not be more than {max} bytes"),
            );
        }
        if let Some(p) = &k.pattern {
            match &p.regex {
                Ok(re) if !re.is_match(text) => errs.invalid(
                    path,
                    v,
                    &format!("{path} in body should match '{}'", p.source),
                ),
                Ok(_) => {}
                Err(PatternError::Unsupported(what) | PatternError::Invalid(what)) => {
                    return Err(Unsupported(format!(
                        "cannot check pattern {:?} of {path}: {what}",
                        p.source
                    )));
                }
            }
        }
    }
    Ok(())
}

fn junctors(s: &Structural, v: &Value, path: &str, errs: &mut Errors) -> Result<(), Unsupported> {
    let k = &s.validation;
    let passes = |sub: &Structural| -> Result<bool, Unsupported> {
        let mut e = Errors::default();
        validate(sub, v, path, &mut e)?;
        Ok(e.is_empty())
    };
    for sub in &k.all_of {
        validate(sub, v, path, errs)?;
    }
    let int_or_string_any_of = s.int_or_string && k.any_of.len() == 2;
    if !k.any_of.is_empty() && !int_or_string_any_of {
        let mut any = false;
        for sub in &k.any_of {
            any |= passes(sub)?;
        }
        if !any {
            errs.invalid(path, v, "must validate at least one schema (anyOf)");
        }
    }
    if !k.one_of.is_empty() {
        let mut n = 0;
        for sub in &k.one_of {
            n += usize::from(passes(sub)?);
        }
        if n != 1 {
            errs.invalid(path, v, "must validate one and only one schema (oneOf)");
        }
    }
    if let Some(not) = &k.not
        && passes(not)?
    {
        errs.invalid(path, v, "must not validate the schema (not)");
    }
    Ok(())
}

fn object(
    s: &Structural,
    m: &Map<String, Value>,
    path: &str,
    errs: &mut Errors,
) -> Result<(), Unsupported> {
    let k = &s.validation;
    for r in &k.required {
        if !m.contains_key(r) {
            errs.required(child(path, r), "");
        }
    }
    let n = m.len() as u64;
    if let Some(min) = k.min_properties
        && n < min
    {
        errs.invalid(
            path,
            &Value::from(n),
            &format!("{path} in body should have at least {min} properties"),
        );
    }
    if let Some(max) = k.max_properties
        && n > max
    {
        errs.push(
            "FieldValueTooMany",
            path,
            format!("Too many: {n}: must have at most {max} items"),
        );
    }
    for (key, value) in m {
        if s.resource && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        if let Some(cs) = s.child(key) {
            validate(cs, value, &child(path, key), errs)?;
        }
    }
    Ok(())
}

fn array(
    s: &Structural,
    items: &[Value],
    path: &str,
    errs: &mut Errors,
) -> Result<(), Unsupported> {
    let k = &s.validation;
    let n = items.len() as u64;
    if let Some(min) = k.min_items
        && n < min
    {
        errs.invalid(
            path,
            &Value::Array(items.to_vec()),
            &format!("{path} in body should have at least {min} items"),
        );
    }
    if let Some(max) = k.max_items
        && n > max
    {
        errs.push(
            "FieldValueTooMany",
            path,
            format!("Too many: {n}: must have at most {max} items"),
        );
    }
    if let Some(is) = s.items.as_deref() {
        for (i, item) in items.iter().enumerate() {
            validate(is, item, &format!("{path}[{i}]"), errs)?;
        }
    }
    unique_items(s, items, path, errs);
    Ok(())
}

/// `ValidateListSetsAndMaps`: no two items of a `set` may be equal, no two
/// items of a `map` list may have the same keys.
fn unique_items(s: &Structural, items: &[Value], path: &str, errs: &mut Errors) {
    let mut seen = BTreeSet::new();
    for (i, item) in items.iter().enumerate() {
        let (key, shown) = match s.list_type.as_deref() {
            Some("set") => (item.to_string(), go_value(item)),
            Some("map") => {
                let keys: Vec<(String, String)> = s
                    .list_map_keys
                    .iter()
                    .filter_map(|k| item.get(k).map(|v| (k.clone(), v.to_string())))
                    .collect();
                let body = keys
                    .iter()
                    .map(|(k, v)| format!("{}:{v}", Value::from(k.as_str())))
                    .collect::<Vec<_>>()
                    .join(", ");
                (body.clone(), format!("map[string]interface {{}}{{{body}}}"))
            }
            _ => return,
        };
        if !seen.insert(key) {
            errs.push(
                "FieldValueDuplicate",
                format!("{path}[{i}]"),
                format!("Duplicate value: {shown}"),
            );
        }
    }
}

/// Go's `%#v`-ish rendering of a scalar.
fn go_value(v: &Value) -> String {
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(schema: Value, obj: Value) -> Vec<String> {
        let s = Structural::root(&schema);
        let mut e = Errors::default();
        validate(&s, &obj, "", &mut e).unwrap();
        e.summaries()
    }

    #[test]
    fn types_required_and_enums() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
        "required": ["image"], "properties": {
            "replicas": {"type": "integer", "minimum": 0},
            "image": {"type": "string"},
            "mode": {"type": "string", "enum": ["Canary", "BlueGreen"]},
            "port": {"x-kubernetes-int-or-string": true},
            "ratio": {"type": "number"}
        }}}});
        assert_eq!(
            messages(
                schema.clone(),
                json!({"spec": {"replicas": "three", "mode": "Big", "port": 80, "ratio": 1}})
            ),
            [
                "spec.image: Required value",
                "spec.mode: Unsupported value: \"Big\": supported values: \"\\\"Canary\\\"\", \"\\\"BlueGreen\\\"\"",
                "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"",
            ]
        );
        assert_eq!(
            messages(schema, json!({"spec": {"image": "x", "replicas": -1}})),
            [
                "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"
            ]
        );
    }

    #[test]
    fn list_maps_reject_duplicate_keys() {
        let schema = json!({"type": "object", "properties": {"c": {"type": "array",
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
            "s": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}}});
        assert_eq!(
            messages(
                schema,
                json!({"c": [{"name": "a"}, {"name": "a"}], "s": ["x", "x"]})
            ),
            [
                "c[1]: Duplicate value: map[string]interface {}{\"name\":\"a\"}",
                "s[1]: Duplicate value: \"x\"",
            ]
        );
    }
}
