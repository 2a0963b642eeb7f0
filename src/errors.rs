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

/// What the API server answered about a kind it does not serve, for people:
/// `404` when the path of its group or version is not found (kube-apiserver
/// answers that in plain text, which kube reports as a `Status` it "failed to
/// parse"; a served group version without the resource answers a `Status`),
/// or what discovery found missing (a misspelled kind in a served group
/// version). `None` for every other failure: unreachable, forbidden, a 5xx,
/// which say nothing about the kind.
pub(crate) fn not_served_answer(error: &kube::Error) -> Option<String> {
    match error {
        kube::Error::Api(status) if status.code == 404 => Some("404".to_owned()),
        kube::Error::Discovery(missing) => Some(missing.to_string()),
        _ => None,
    }
}

/// A failed watch for logs: one line, and a 404 (the kind's CRD is not
/// installed, or was removed) said as what it means rather than as the
/// `Status` kube could not parse.
pub(crate) fn watch_failure(error: &kube::runtime::watcher::Error) -> String {
    use kube::runtime::watcher::Error as Watch;
    let request = match error {
        Watch::InitialListFailed(error)
        | Watch::WatchStartFailed(error)
        | Watch::WatchFailed(error) => Some(error),
        Watch::WatchError(_) | Watch::NoResourceVersion => None,
    };
    match request.and_then(not_served_answer) {
        Some(answer) => {
            format!("the API server does not serve this kind ({answer}): is its CRD installed?")
        }
        None => error_chain(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kube's error for kube-apiserver's plain-text answer to a path of a group
    /// it does not serve.
    fn page_not_found() -> kube::Error {
        let status =
            kube::core::Status::failure("404 page not found", "Failed to parse error data")
                .with_code(404);
        kube::Error::Api(status.boxed())
    }

    #[test]
    fn a_plain_text_404_is_a_kind_not_served_and_reads_as_404() {
        assert_eq!(not_served_answer(&page_not_found()).as_deref(), Some("404"));
    }

    #[test]
    fn a_kind_discovery_did_not_find_says_what_is_missing() {
        let error =
            kube::Error::Discovery(kube::error::DiscoveryError::MissingKind("Gizmo".to_owned()));
        assert_eq!(
            not_served_answer(&error).as_deref(),
            Some("Missing Kind: Gizmo")
        );
    }

    #[test]
    fn a_watch_answered_404_says_the_kind_is_not_served() {
        let error = kube::runtime::watcher::Error::InitialListFailed(page_not_found());
        assert_eq!(
            watch_failure(&error),
            "the API server does not serve this kind (404): is its CRD installed?"
        );
    }

    #[test]
    fn other_failures_say_nothing_about_the_kind() {
        let status = kube::core::Status::failure("forbidden", "Forbidden").with_code(403);
        assert_eq!(not_served_answer(&kube::Error::Api(status.boxed())), None);
    }
}
