//! [`AnnotationError`]: one annotation nudge cannot use, naming its key.

use crate::model::NameError;

/// A workload annotation nudge cannot use. Each variant names the annotation key;
/// the workload's other annotations keep working.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AnnotationError {
    /// The name part of the key (after `/`) is longer than the 63 characters
    /// Kubernetes allows.
    #[error("annotation {key}: name is longer than {max} characters")]
    NameTooLong {
        /// The annotation key.
        key: String,
        /// The longest allowed name part.
        max: usize,
    },
    /// A name under nudge's prefix that is neither a setting, a name nudge writes,
    /// nor of the form `<source>-<slot>`.
    #[error(
        "annotation {key}: not a nudge annotation (expected <source>-<slot>, auto, exclude, debounce or min-interval)"
    )]
    UnknownAnnotation {
        /// The annotation key.
        key: String,
    },
    /// The annotation names a source that is not configured in this installation
    /// (for k8s-consul-mutator annotations: no `consul` source).
    #[error("annotation {key}: unknown source {source_name:?}")]
    UnknownSource {
        /// The annotation key.
        key: String,
        /// The source name as written.
        source_name: String,
    },
    /// The slot (or k8s-consul-mutator name) does not match the slot grammar or is
    /// too long for the `checksum-<slot>` annotation nudge would write.
    #[error("annotation {key}: invalid slot: {error}")]
    InvalidSlot {
        /// The annotation key.
        key: String,
        /// Why the slot was rejected.
        #[source]
        error: NameError,
    },
    /// The value is not a valid reference for the source: not a DNS-1123 object
    /// name for a namespaced source (ConfigMaps, Secrets), or refused by the
    /// source's own check (`Source::check_reference`: Consul's key-path rules, a
    /// custom source's), whose message is the reason.
    #[error("annotation {key}: invalid reference {value:?}: {reason}")]
    InvalidReference {
        /// The annotation key.
        key: String,
        /// The start of the rejected value.
        value: String,
        /// What is wrong with it, in the words of the rule that refused it.
        reason: String,
    },
    /// A yes/no annotation holds something other than `"true"` or `"false"`.
    #[error("annotation {key}: expected \"true\" or \"false\", got {value:?}")]
    InvalidBool {
        /// The annotation key.
        key: String,
        /// The start of the rejected value.
        value: String,
    },
    /// A duration annotation (`debounce`, `min-interval`) does not parse as a
    /// humantime duration such as `30s` or `2m 30s`.
    #[error("annotation {key}: invalid duration {value:?}: {error}")]
    InvalidDuration {
        /// The annotation key.
        key: String,
        /// The start of the rejected value.
        value: String,
        /// The parse error.
        #[source]
        error: humantime::DurationError,
    },
    /// One item of a comma list (`exclude`, Wave's extras, Reloader's `reload`) is
    /// malformed; the list's other items still apply.
    #[error("annotation {key}: invalid item {item:?}: {reason}")]
    InvalidListItem {
        /// The annotation key.
        key: String,
        /// The start of the rejected item.
        item: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Several references would write the same output (two sources using one slot,
    /// two Reloader objects mapping to one env var); none of them is used.
    #[error(
        "annotation {key}: {output} is also claimed by another reference; none of them is used"
    )]
    DuplicateOutput {
        /// The annotation key.
        key: String,
        /// The contested annotation or env var name.
        output: String,
    },
    /// The value is not one the annotation allows.
    #[error("annotation {key}: invalid value {value:?}: expected {expected}")]
    InvalidValue {
        /// The annotation key.
        key: String,
        /// The start of the rejected value.
        value: String,
        /// What is allowed.
        expected: &'static str,
    },
    /// `<prefix>/window` is not a maintenance window.
    #[error("annotation {key}: invalid window {value:?}: {error}")]
    InvalidWindow {
        /// The annotation key.
        key: String,
        /// The start of the rejected value.
        value: String,
        /// What is wrong with it.
        #[source]
        error: crate::window::WindowError,
    },
    /// Another tool's setting nudge does not emulate; the message says what nudge
    /// does instead.
    #[error("annotation {key}: {value:?} is not supported: {instead}")]
    Unsupported {
        /// The annotation key.
        key: String,
        /// The value.
        value: String,
        /// What nudge does instead.
        instead: &'static str,
    },
}

impl AnnotationError {
    /// A low-cardinality label for metrics and Events.
    pub fn category(&self) -> &'static str {
        match self {
            Self::NameTooLong { .. } => "name_too_long",
            Self::UnknownAnnotation { .. } => "unknown_annotation",
            Self::UnknownSource { .. } => "unknown_source",
            Self::InvalidSlot { .. } => "bad_slot",
            Self::InvalidReference { .. } => "bad_reference",
            Self::InvalidBool { .. } => "bad_bool",
            Self::InvalidDuration { .. } => "bad_duration",
            Self::InvalidListItem { .. } => "bad_list_item",
            Self::DuplicateOutput { .. } => "duplicate_slot",
            Self::InvalidValue { .. } => "bad_value",
            Self::InvalidWindow { .. } => "bad_window",
            Self::Unsupported { .. } => "unsupported",
        }
    }

    /// The annotation key the error is about.
    pub fn key(&self) -> &str {
        match self {
            Self::NameTooLong { key, .. }
            | Self::UnknownAnnotation { key }
            | Self::UnknownSource { key, .. }
            | Self::InvalidSlot { key, .. }
            | Self::InvalidReference { key, .. }
            | Self::InvalidBool { key, .. }
            | Self::InvalidDuration { key, .. }
            | Self::InvalidListItem { key, .. }
            | Self::DuplicateOutput { key, .. }
            | Self::InvalidValue { key, .. }
            | Self::InvalidWindow { key, .. }
            | Self::Unsupported { key, .. } => key,
        }
    }
}
