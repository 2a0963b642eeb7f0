//! Fingerprints: short strings that change exactly when referenced content changes
//! (design §3), and the compatibility algorithms of Wave, k8s-consul-mutator and
//! Reloader (design §4).
//!
//! Fingerprints depend on content only, never on resourceVersion, uid, labels or
//! timestamps. Secret content is never hashed in the clear by the native algorithm:
//! it is keyed with the installation's [`FingerprintKey`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;

/// How a source turns content into a [`Fingerprint`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Algorithm {
    /// nudge's own format: `sha256-<hex>` of the canonical encoding, or
    /// `hmac-sha256-<hex>` keyed by the installation key for sources holding secrets.
    Native,
    /// k8s-consul-mutator: `md5-<hex>` of the raw value bytes.
    Md5,
    /// Reloader: lowercase hex SHA-1 of the sorted `key=value` strings joined by `;`.
    Reloader,
    /// Wave: the object's part of Wave's hash document (see [`WaveFragment`]).
    Wave,
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Native => "native",
            Self::Md5 => "md5",
            Self::Reloader => "reloader",
            Self::Wave => "wave",
        })
    }
}

/// The fingerprint of one tracked reference.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Fingerprint {
    /// A digest string as written into annotations (`sha256-…`, `hmac-sha256-…`,
    /// `md5-…`, or Reloader's bare hex).
    Digest(Arc<str>),
    /// Wave cannot combine per-object digests, so a Wave reference keeps its part of
    /// the hash document. It may carry (base64) secret content: it is never printed.
    Wave(WaveFragment),
}

impl Fingerprint {
    /// Wraps a digest string.
    pub fn digest(value: impl Into<Arc<str>>) -> Self {
        Self::Digest(value.into())
    }

    /// The digest string, or `None` for a Wave fragment.
    pub fn as_digest(&self) -> Option<&str> {
        match self {
            Self::Digest(d) => Some(d),
            Self::Wave(_) => None,
        }
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Fingerprint {
    /// Digests print as themselves; Wave fragments print only their size.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Digest(d) => f.write_str(d),
            Self::Wave(w) => fmt::Debug::fmt(w, f),
        }
    }
}

/// One object's entry in Wave's hash document: the compact JSON object
/// `{"<key>":"<base64 of value bytes>",…}` with keys sorted.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct WaveFragment(Arc<str>);

impl WaveFragment {
    /// The JSON text. Callers must not log it.
    pub fn json(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for WaveFragment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "wave-fragment({} bytes)", self.0.len())
    }
}

/// What a source currently knows about a tracked reference. Errors are not
/// observations: a source that cannot reach its backend reports nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Observation {
    /// The referenced content exists and has this fingerprint.
    Present(Fingerprint),
    /// The referenced object or key does not exist.
    Absent,
}

/// The written form of an absent reference inside combined hashes, and with
/// `stamp_on_delete = true`.
pub const ABSENT: &str = "absent";

/// One value of a ConfigMap or Secret.
#[derive(Clone, PartialEq, Eq)]
pub enum DataValue {
    /// A ConfigMap `data` value (UTF-8 text).
    Text(String),
    /// A ConfigMap `binaryData` value, or any Secret value (raw bytes).
    Binary(Vec<u8>),
}

impl DataValue {
    /// The value's bytes (UTF-8 for text).
    pub fn bytes(&self) -> &[u8] {
        match self {
            Self::Text(s) => s.as_bytes(),
            Self::Binary(b) => b,
        }
    }
}

impl fmt::Debug for DataValue {
    /// Content may be secret: only its size is printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Text(s) => write!(f, "Text({} bytes)", s.len()),
            Self::Binary(b) => write!(f, "Binary({} bytes)", b.len()),
        }
    }
}

/// The keyed content of one ConfigMap or Secret, as the algorithms see it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectData(pub BTreeMap<String, DataValue>);

/// The kind of object whose content is hashed; some compatibility formats encode
/// the two differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    /// A ConfigMap.
    ConfigMap,
    /// A Secret.
    Secret,
}
