//! The value grammar every scheme shares: yes/no values, durations (humantime's
//! and Go's), comma lists, object names, namespaces, and the error builders that
//! quote a value safely. A reference's own rules (a Consul key path, a URL) are
//! its source's: the catalog carries each source's check.

use std::time::Duration;

use super::AnnotationError;
use crate::fingerprint::ObjectKind;
use crate::model::MAX_ANNOTATION_NAME_LEN;

pub(super) fn check_name_len(key: &str, name: &str) -> Result<(), AnnotationError> {
    if name.len() > MAX_ANNOTATION_NAME_LEN {
        return Err(AnnotationError::NameTooLong {
            key: key.to_owned(),
            max: MAX_ANNOTATION_NAME_LEN,
        });
    }
    Ok(())
}

pub(super) fn parse_bool(key: &str, value: &str) -> Result<bool, AnnotationError> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(AnnotationError::InvalidBool {
            key: key.to_owned(),
            value: excerpt(value),
        }),
    }
}

pub(super) fn parse_duration(key: &str, value: &str) -> Result<Duration, AnnotationError> {
    humantime::parse_duration(value).map_err(|error| AnnotationError::InvalidDuration {
        key: key.to_owned(),
        value: excerpt(value),
        error,
    })
}

/// A Go duration (`300ms`, `1.5h`, `2h45m`), as Reloader's `time.ParseDuration`
/// reads it; humantime's forms are accepted too.
pub(super) fn parse_go_duration(key: &str, value: &str) -> Result<Duration, AnnotationError> {
    if let Some(duration) = go_duration(value) {
        return Ok(duration);
    }
    parse_duration(key, value)
}

/// Go's duration grammar: an optional `+`, then one or more decimal numbers (with
/// an optional fraction), each followed by a unit (`ns`, `us`, `µs`, `ms`, `s`,
/// `m`, `h`). `0` alone is zero.
fn go_duration(value: &str) -> Option<Duration> {
    let mut rest = value.strip_prefix('+').unwrap_or(value);
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = 0.0_f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * seconds;
    }
    Duration::try_from_secs_f64(total).ok()
}

/// Items of a comma list, trimmed; empty items (a trailing comma) are skipped.
pub(super) fn split_list(value: &str) -> impl Iterator<Item = &str> {
    value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
}

/// `configmap/<name>` or `secret/<name>`.
pub(super) fn parse_exclude_item(item: &str) -> Result<(ObjectKind, &str), &'static str> {
    const SHAPE: &str = "expected configmap/<name> or secret/<name>";
    let (kind, name) = item.split_once('/').ok_or(SHAPE)?;
    let kind = match kind {
        "configmap" => ObjectKind::ConfigMap,
        "secret" => ObjectKind::Secret,
        _ => return Err(SHAPE),
    };
    check_object_name(name)?;
    Ok((kind, name))
}

/// `name` or `namespace/name`.
pub(super) fn parse_namespaced_name(item: &str) -> Result<(Option<&str>, &str), &'static str> {
    match item.split_once('/') {
        None => check_object_name(item).map(|()| (None, item)),
        Some((namespace, name)) => {
            check_namespace(namespace)?;
            check_object_name(name)?;
            Ok((Some(namespace), name))
        }
    }
}

/// A DNS-1123 subdomain of at most 253 characters (ConfigMap and Secret names):
/// what a reference of a [`Scope::Namespaced`](crate::model::Scope) source must be.
pub fn check_object_name(value: &str) -> Result<(), &'static str> {
    if value.is_empty() {
        return Err("an object name must not be empty");
    }
    if value.len() > 253 {
        return Err("an object name must be at most 253 characters");
    }
    if !value.split('.').all(is_dns_label) {
        return Err("an object name must be a DNS-1123 subdomain (a-z, 0-9, '-', '.')");
    }
    Ok(())
}

/// A DNS-1123 label of at most 63 characters (namespace names).
fn check_namespace(value: &str) -> Result<(), &'static str> {
    if value.len() > 63 || !is_dns_label(value) {
        return Err("a namespace must be a DNS-1123 label (a-z, 0-9, '-', at most 63 characters)");
    }
    Ok(())
}

fn is_dns_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            alnum(first) && alnum(last) && bytes.iter().all(|b| alnum(b) || *b == b'-')
        }
        _ => false,
    }
}

pub(super) fn invalid_reference(
    key: &str,
    value: &str,
    reason: impl Into<String>,
) -> AnnotationError {
    AnnotationError::InvalidReference {
        key: key.to_owned(),
        value: excerpt(value),
        reason: reason.into(),
    }
}

pub(super) fn invalid_item(key: &str, item: &str, reason: &'static str) -> AnnotationError {
    AnnotationError::InvalidListItem {
        key: key.to_owned(),
        item: excerpt(item),
        reason,
    }
}

/// The start of a user-supplied value, so that a huge value cannot flood Events
/// and logs.
pub(super) fn excerpt(value: &str) -> String {
    crate::errors::excerpt(value, 100)
}
