//! Errors for people: one line with every cause, and values cut short, for
//! logs and Event notes.

/// The first `max_chars` characters of `value`, with `…` when it was longer.
pub fn excerpt(value: &str, max_chars: usize) -> String {
    match value.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}…", &value[..end]),
        None => value.to_owned(),
    }
}

/// An error and its causes on one line (`outer: cause: root cause`), for logs and
/// Event notes.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        cause = inner.source();
        // kube's `Error::Api` displays its Status twice, once as a `Debug` dump
        // (`ApiError: … (Status { … })`); its source, the Status, says it once.
        if cause.is_some() && matches!(inner.downcast_ref(), Some(kube::Error::Api(_))) {
            continue;
        }
        let next = inner.to_string();
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
    }
    text
}
