//! Fingerprints: short strings that change exactly when referenced content changes
//! (design §3), and the compatibility algorithms of Wave, k8s-consul-mutator and
//! Reloader (design §4).
//!
//! Fingerprints depend on content only, never on resourceVersion, uid, labels or
//! timestamps. Secret content is never hashed in the clear by the native algorithm:
//! it is keyed with the installation's [`FingerprintKey`].

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use md5::Md5;
use sha1::Sha1;
use sha2::digest::Update;
use sha2::{Digest, Sha256, Sha512_256};

pub use crate::model::Algorithm;
use crate::model::{KeySelection, SourceName};

mod fields;

pub use fields::{FieldSelection, PointerError, check_pointer, native_fields};

/// The fingerprint of one tracked reference.
#[derive(Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fingerprint {
    /// A digest as written into annotations (`sha256-…`, `hmac-sha256-…`,
    /// `md5-…`, or Reloader's bare hex).
    Digest(DigestValue),
    /// Wave cannot combine per-object digests, so a Wave reference keeps its part of
    /// the hash document. It may carry (base64) secret content: it is never printed.
    Wave(WaveFragment),
}

impl Fingerprint {
    /// Wraps a digest string.
    pub fn digest(value: impl AsRef<str>) -> Self {
        Self::Digest(DigestValue::new(value.as_ref()))
    }

    /// The digest string, or `None` for a Wave fragment.
    pub fn as_digest(&self) -> Option<Cow<'_, str>> {
        match self {
            Self::Digest(d) => Some(d.text()),
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
            Self::Digest(d) => fmt::Display::fmt(d, f),
            Self::Wave(w) => fmt::Debug::fmt(w, f),
        }
    }
}

/// A digest's text, kept compactly: nudge's own `sha256-` and `hmac-sha256-`
/// digests (one per tracked item: tens of thousands at scale) as their 32 bytes
/// in a 48-byte allocation instead of 71–76 characters in a 96-byte one; any
/// other digest as text. Equal exactly when the texts are; cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct DigestValue(Repr);

/// Every variant is one pointer, so a [`Fingerprint`] stays 24 bytes.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    Sha256(Arc<[u8; 32]>),
    HmacSha256(Arc<[u8; 32]>),
    Text(Arc<Box<str>>),
}

impl DigestValue {
    /// The digest written as `text`: compact when it is a `sha256-` or
    /// `hmac-sha256-` digest in lowercase hex (only those read back the same).
    fn new(text: &str) -> Self {
        let repr = if let Some(bytes) = sha256_bytes(text) {
            Repr::Sha256(Arc::new(bytes))
        } else if let Some(bytes) = prefixed_hex_32(HMAC_SHA256_PREFIX, text) {
            Repr::HmacSha256(Arc::new(bytes))
        } else {
            Repr::Text(Arc::new(text.into()))
        };
        Self(repr)
    }

    /// The text, as written into annotations.
    pub fn text(&self) -> Cow<'_, str> {
        match &self.0 {
            Repr::Text(text) => Cow::Borrowed(text),
            _ => Cow::Owned(self.to_string()),
        }
    }
}

/// The 32 bytes of a `sha256-` digest written in lowercase hex (the only form
/// that renders back to the same text), or `None` for any other text.
pub(crate) fn sha256_bytes(text: &str) -> Option<[u8; 32]> {
    prefixed_hex_32(SHA256_PREFIX, text)
}

/// The text of the `sha256-` digest `bytes`, as [`sha256_bytes`] reads it.
pub(crate) fn sha256_text(bytes: &[u8; 32]) -> String {
    PrefixedHex(SHA256_PREFIX, bytes).to_string()
}

/// The 32 bytes `text` spells after `prefix`, when that is exactly 64 lowercase
/// hex digits.
fn prefixed_hex_32(prefix: &str, text: &str) -> Option<[u8; 32]> {
    let hex = text.strip_prefix(prefix)?;
    if !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut bytes = [0; 32];
    hex::decode_to_slice(hex, &mut bytes).ok()?;
    Some(bytes)
}

/// A 32-byte digest written as `<prefix><lowercase hex>`, without allocating.
struct PrefixedHex<'a>(&'static str, &'a [u8; 32]);

impl fmt::Display for PrefixedHex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut hex = [0; 64];
        hex::encode_to_slice(self.1, &mut hex).map_err(|_| fmt::Error)?;
        f.write_str(self.0)?;
        // Hex digits are ASCII.
        f.write_str(std::str::from_utf8(&hex).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Display for DigestValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Sha256(bytes) => PrefixedHex(SHA256_PREFIX, bytes).fmt(f),
            Repr::HmacSha256(bytes) => PrefixedHex(HMAC_SHA256_PREFIX, bytes).fmt(f),
            Repr::Text(text) => f.write_str(text),
        }
    }
}

impl fmt::Debug for DigestValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
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
#[non_exhaustive]
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
#[non_exhaustive]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ObjectKind {
    /// A ConfigMap.
    ConfigMap,
    /// A Secret.
    Secret,
}

impl ObjectKind {
    /// The Kubernetes `kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ConfigMap => "ConfigMap",
            Self::Secret => "Secret",
        }
    }

    /// The built-in source holding this kind (`configmap`, `secret`).
    pub fn source(self) -> SourceName {
        match self {
            Self::ConfigMap => SourceName::configmap(),
            Self::Secret => SourceName::secret(),
        }
    }

    /// The kind a built-in source holds; `None` for every other source.
    pub fn of_source(source: &SourceName) -> Option<Self> {
        [Self::ConfigMap, Self::Secret]
            .into_iter()
            .find(|kind| kind.source() == *source)
    }
}

/// Prefix of nudge's plain fingerprints.
const SHA256_PREFIX: &str = "sha256-";
/// Prefix of nudge's keyed fingerprints.
const HMAC_SHA256_PREFIX: &str = "hmac-sha256-";
/// Prefix of k8s-consul-mutator's checksums.
const MD5_PREFIX: &str = "md5-";

/// Canonical-encoding tag of a ConfigMap `data` value.
const TAG_TEXT: u8 = 0;
/// Canonical-encoding tag of a `binaryData` or Secret value.
const TAG_BINARY: u8 = 1;
/// Combined-hash tag of an absent reference.
const TAG_ABSENT: u8 = 0;
/// Combined-hash tag of a present reference, followed by its digest.
const TAG_PRESENT: u8 = 1;

type HmacSha256 = Hmac<Sha256>;

// === impl FingerprintKey ===

/// Installation key for Secret fingerprints (at least 32 bytes). `Debug` prints `FingerprintKey(redacted)`.
#[derive(Clone)]
pub struct FingerprintKey {
    /// The key material, as configured or generated.
    bytes: Vec<u8>,
    /// HMAC-SHA256 state already keyed with `bytes`; cloned for every fingerprint.
    mac: HmacSha256,
}

impl FingerprintKey {
    /// Shortest accepted key, in bytes (the output size of SHA-256).
    pub(crate) const MIN_LEN: usize = 32;

    /// Wraps configured key material; fails when it is shorter than [`Self::MIN_LEN`].
    pub(crate) fn new(bytes: Vec<u8>) -> Result<Self, FingerprintError> {
        if bytes.len() < Self::MIN_LEN {
            return Err(FingerprintError::KeyTooShort {
                len: bytes.len(),
                min: Self::MIN_LEN,
            });
        }
        let mac = HmacSha256::new_from_slice(&bytes).map_err(|_| FingerprintError::KeyRejected)?;
        Ok(Self { bytes, mac })
    }

    /// A fresh key of `MIN_LEN` bytes from the operating system's random
    /// number generator.
    ///
    /// # Panics
    ///
    /// When the operating system cannot provide random bytes; use
    /// `try_generate` to handle that case.
    pub fn generate() -> Self {
        Self::try_generate().expect("the operating system's random number generator failed")
    }

    /// Like [`Self::generate`], but reports a failing random number generator.
    pub(crate) fn try_generate() -> Result<Self, FingerprintError> {
        let mut bytes = vec![0_u8; Self::MIN_LEN];
        getrandom::fill(&mut bytes).map_err(|e| FingerprintError::Random(e.into()))?;
        Self::new(bytes)
    }

    /// The key material, for storing a generated key. Never log it.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// A keyed HMAC-SHA256 state, ready for input.
    fn mac(&self) -> HmacSha256 {
        self.mac.clone()
    }
}

impl fmt::Debug for FingerprintKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FingerprintKey(redacted)")
    }
}

/// Why a [`FingerprintKey`] could not be made. Messages never contain key material.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FingerprintError {
    /// The configured key has fewer than 32 bytes.
    #[error("fingerprint key has {len} bytes, at least {min} are required")]
    KeyTooShort {
        /// Length of the rejected key.
        len: usize,
        /// Shortest accepted length.
        min: usize,
    },
    /// The HMAC implementation refused the key. HMAC-SHA256 accepts keys of any
    /// length, so this is not expected; it exists so that no constructor panics.
    #[error("the HMAC implementation rejected the fingerprint key")]
    KeyRejected,
    /// The operating system's random number generator failed while generating a key.
    #[error("could not generate a fingerprint key")]
    Random(#[source] std::io::Error),
}

// === impl ObjectData ===

impl ObjectData {
    /// The content of a ConfigMap: `data` values as [`DataValue::Text`],
    /// `binaryData` values as [`DataValue::Binary`]. The apiserver rejects a key that
    /// is in both; should one appear anyway, the `binaryData` value is kept.
    pub fn from_config_map(cm: &ConfigMap) -> Self {
        let text = cm
            .data
            .iter()
            .flatten()
            .map(|(key, value)| (key.clone(), DataValue::Text(value.clone())));
        let binary = cm
            .binary_data
            .iter()
            .flatten()
            .map(|(key, value)| (key.clone(), DataValue::Binary(value.0.clone())));
        Self(text.chain(binary).collect())
    }

    /// The content of a Secret: `data` values as [`DataValue::Binary`]. `stringData`
    /// is ignored: it is write-only, and the apiserver folds it into `data`.
    pub fn from_secret(secret: &Secret) -> Self {
        let binary = secret
            .data
            .iter()
            .flatten()
            .map(|(key, value)| (key.clone(), DataValue::Binary(value.0.clone())));
        Self(binary.collect())
    }

    /// Only the entries whose keys `keys` covers (selected keys that the object
    /// lacks are simply not there).
    pub fn narrowed(&self, keys: &KeySelection) -> ObjectData {
        let entries = self.0.iter().filter(|(key, _)| keys.contains(key));
        Self(entries.map(|(k, v)| (k.clone(), v.clone())).collect())
    }
}

impl DataValue {
    /// The one-byte type tag of the native canonical encoding.
    fn type_tag(&self) -> u8 {
        match self {
            Self::Text(_) => TAG_TEXT,
            Self::Binary(_) => TAG_BINARY,
        }
    }
}

// === native algorithm ===

/// nudge's native object fingerprint (design §3): ConfigMap → `sha256-<hex>`,
/// Secret → `hmac-sha256-<hex>` keyed by `key` (which a ConfigMap ignores).
///
/// Both hash the canonical encoding: for each entry in ascending byte order of its
/// key, the key length-prefixed, a one-byte type tag (0 for `data` text, 1 for
/// `binaryData` / Secret bytes), then the value length-prefixed; lengths are
/// 8-byte big-endian. So `{"a":"bc"}` and `{"ab":"c"}` differ, and moving a key
/// between `data` and `binaryData` with the same bytes is a change.
pub fn native_object(kind: ObjectKind, data: &ObjectData, key: &FingerprintKey) -> Fingerprint {
    match kind {
        ObjectKind::ConfigMap => {
            let mut hasher = Sha256::default();
            encode_object(&mut hasher, data);
            prefixed_hex(SHA256_PREFIX, &hasher.finalize())
        }
        ObjectKind::Secret => {
            let mut mac = key.mac();
            encode_object(&mut mac, data);
            prefixed_hex(HMAC_SHA256_PREFIX, &mac.finalize().into_bytes())
        }
    }
}

/// `sha256-<hex>` of raw value bytes (Consul values, custom sources).
pub fn native_value(value: &[u8]) -> Fingerprint {
    prefixed_hex(SHA256_PREFIX, &Sha256::digest(value))
}

/// `hmac-sha256-<hex>` of raw value bytes keyed by `key`, for custom sources whose
/// values are secret.
pub fn native_value_keyed(value: &[u8], key: &FingerprintKey) -> Fingerprint {
    let mut mac = key.mac();
    Update::update(&mut mac, value);
    prefixed_hex(HMAC_SHA256_PREFIX, &mac.finalize().into_bytes())
}

/// nudge's combined `config-hash` over several references: `sha256-<hex>` of the
/// entries sorted by id, each id length-prefixed and followed by a one-byte tag
/// (0: absent, `None`; 1: present, then the digest length-prefixed). An absent
/// reference is therefore distinct from every digest, including the text `absent`.
pub fn combine_native<'a>(
    entries: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> Fingerprint {
    let mut sorted: Vec<(&str, Option<&str>)> = entries.into_iter().collect();
    sorted.sort_unstable();
    let mut hasher = Sha256::default();
    for (id, digest) in sorted {
        encode_combined_entry(&mut hasher, id, digest);
    }
    prefixed_hex(SHA256_PREFIX, &hasher.finalize())
}

/// Feeds one entry of [`combine_native`]'s encoding to `sink`.
fn encode_combined_entry(sink: &mut impl Update, id: &str, digest: Option<&str>) {
    push_length_prefixed(sink, id.as_bytes());
    match digest {
        None => sink.update(&[TAG_ABSENT]),
        Some(digest) => {
            sink.update(&[TAG_PRESENT]);
            push_length_prefixed(sink, digest.as_bytes());
        }
    }
}

/// Feeds the canonical encoding of `data` to `sink`.
fn encode_object(sink: &mut impl Update, data: &ObjectData) {
    for (key, value) in &data.0 {
        push_length_prefixed(sink, key.as_bytes());
        sink.update(&[value.type_tag()]);
        push_length_prefixed(sink, value.bytes());
    }
}

/// Feeds `bytes` preceded by its length as 8 big-endian bytes.
fn push_length_prefixed(sink: &mut impl Update, bytes: &[u8]) {
    sink.update(&(bytes.len() as u64).to_be_bytes());
    sink.update(bytes);
}

/// A digest fingerprint `<prefix><lowercase hex>`.
fn prefixed_hex(prefix: &str, digest: &[u8]) -> Fingerprint {
    Fingerprint::digest(format!("{prefix}{}", hex::encode(digest)))
}

// === k8s-consul-mutator ===

/// k8s-consul-mutator's checksum: `md5-<hex>` of the raw value bytes.
pub fn md5_value(value: &[u8]) -> Fingerprint {
    prefixed_hex(MD5_PREFIX, &Md5::digest(value))
}

// === Reloader ===

/// Reloader's object hash (design §4): bare lowercase hex SHA-1 of the object's
/// `key=value` strings, sorted bytewise as whole strings (as Go's `sort.Strings`
/// does) and joined by `;`. ConfigMap `binaryData` values are base64-encoded;
/// every other value is used as its raw bytes. An empty object hashes the empty
/// string.
pub fn reloader_object(kind: ObjectKind, data: &ObjectData) -> Fingerprint {
    Fingerprint::digest(hex::encode(Sha1::digest(reloader_input(kind, data))))
}

/// Reloader's object hash as its SHA-512/256 builds write it: bare lowercase
/// hex SHA-512/256 (Go's `sha512.Sum512_256`) of the same string
/// [`reloader_object`] hashes with SHA-1. No Reloader release writes it (its
/// `feature/use-SHA512` branch and the `merge-1073` image of January 2026 do);
/// nudge reads it so that workloads such a build stamped migrate without a
/// restart.
pub fn reloader_object_sha512_256(kind: ObjectKind, data: &ObjectData) -> Fingerprint {
    Fingerprint::digest(hex::encode(Sha512_256::digest(reloader_input(kind, data))))
}

/// The Secrets Store CSI preset's native fingerprint of a
/// `SecretProviderClassPodStatus` (as JSON): the fields fingerprint of
/// `/status/objects` with its entries sorted by `id`, then `version` (the
/// driver writes them sorted by `id`; sorting here keeps a pod that listed
/// them otherwise from counting as a change), keyed when `key` is given.
pub fn native_csi_pod_status(
    value: &serde_json::Value,
    key: Option<&FingerprintKey>,
) -> Fingerprint {
    const OBJECTS: &str = "/status/objects";
    let mut value = value.clone();
    if let Some(objects) = value.pointer_mut(OBJECTS).and_then(|o| o.as_array_mut()) {
        let text = |o: &serde_json::Value, field: &str| {
            o.get(field).and_then(|v| v.as_str()).map(str::to_owned)
        };
        objects.sort_by_key(|o| (text(o, "id"), text(o, "version")));
    }
    let selection = FieldSelection::new([OBJECTS]).expect("a valid pointer");
    native_fields(&value, &selection, key)
}

/// Reloader 2's hash of what the Secrets Store CSI driver mounted for one
/// pod (`GetSHAfromSecretProviderClassPodStatus`): bare lowercase hex SHA-1
/// of the strings `<id>=<version>` of each mounted object plus
/// `SecretProviderClassName=<class>`, sorted, joined by `;`.
pub fn reloader_csi(class: &str, objects: &[(String, String)]) -> Fingerprint {
    Fingerprint::digest(hex::encode(Sha1::digest(reloader_csi_input(
        class, objects,
    ))))
}

/// [`reloader_csi`] with SHA-512/256, as Reloader's SHA-512/256 builds hash
/// every object (see [`reloader_object_sha512_256`]).
pub fn reloader_csi_sha512_256(class: &str, objects: &[(String, String)]) -> Fingerprint {
    Fingerprint::digest(hex::encode(Sha512_256::digest(reloader_csi_input(
        class, objects,
    ))))
}

/// The string Reloader 2 hashes for a `SecretProviderClassPodStatus`.
fn reloader_csi_input(class: &str, objects: &[(String, String)]) -> Vec<u8> {
    let mut entries: Vec<String> = objects
        .iter()
        .map(|(id, version)| format!("{id}={version}"))
        .collect();
    entries.push(format!("SecretProviderClassName={class}"));
    // Go's sort.Strings: byte order.
    entries.sort_unstable();
    entries.join(";").into_bytes()
}

/// Reloader 2's env var for a SecretProviderClass:
/// `STAKATER_<NAME>_SECRETPROVIDERCLASS`, the name converted as for
/// ConfigMaps and Secrets.
pub fn reloader_csi_env_var(class: &str) -> String {
    format!("STAKATER_{}_SECRETPROVIDERCLASS", reloader_env_name(class))
}

/// Whether `value` has the shape of a SHA-512/256 Reloader hash (64 lowercase
/// hex digits) rather than a SHA-1 one (40).
pub fn is_reloader_sha512_256(value: &str) -> bool {
    value.len() == 64
        && value
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The string Reloader hashes: the object's `key=value` strings, sorted, joined by `;`.
fn reloader_input(kind: ObjectKind, data: &ObjectData) -> Vec<u8> {
    let mut entries: Vec<Vec<u8>> = data
        .0
        .iter()
        .map(|(key, value)| reloader_entry(kind, key, value))
        .collect();
    entries.sort_unstable();
    entries.join(&b';')
}

/// One `key=value` string of Reloader's hash input.
fn reloader_entry(kind: ObjectKind, key: &str, value: &DataValue) -> Vec<u8> {
    let encoded;
    let value_bytes = match (kind, value) {
        (ObjectKind::ConfigMap, DataValue::Binary(bytes)) => {
            encoded = BASE64.encode(bytes);
            encoded.as_bytes()
        }
        _ => value.bytes(),
    };
    [key.as_bytes(), b"=", value_bytes].concat()
}

/// The env var Reloader keeps for an object: `STAKATER_<NAME>_CONFIGMAP` or
/// `STAKATER_<NAME>_SECRET`. `<NAME>` is the object name upper-cased (Go's simple
/// case mapping), each run of characters other than `A-Z0-9` turned into one `_`,
/// except a leading run, which is dropped (a trailing run stays as `_`).
pub fn reloader_env_var(kind: ObjectKind, name: &str) -> String {
    let suffix = match kind {
        ObjectKind::ConfigMap => "CONFIGMAP",
        ObjectKind::Secret => "SECRET",
    };
    format!("STAKATER_{}_{suffix}", reloader_env_name(name))
}

/// Reloader's `ConvertToEnvVarName`.
fn reloader_env_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut after_valid = false;
    for c in name.chars().map(go_simple_uppercase) {
        if c.is_ascii_uppercase() || c.is_ascii_digit() {
            out.push(c);
            after_valid = true;
        } else {
            if after_valid {
                out.push('_');
            }
            after_valid = false;
        }
    }
    out
}

/// Go's `unicode.ToUpper`: the one-character upper case, or the character itself
/// when the full mapping has several characters (`ß`).
fn go_simple_uppercase(c: char) -> char {
    let mut upper = c.to_uppercase();
    match (upper.next(), upper.next()) {
        (Some(single), None) => single,
        _ => c,
    }
}

// === Wave ===

/// One object's part of Wave's hash document: `{"<key>":"<base64>",…}`, compact,
/// keys in ascending byte order, strings escaped as Go's `encoding/json` does.
pub fn wave_fragment(data: &ObjectData) -> WaveFragment {
    let mut json = String::from("{");
    for (index, (key, value)) in data.0.iter().enumerate() {
        if index > 0 {
            json.push(',');
        }
        push_go_json_string(&mut json, key);
        json.push(':');
        push_go_json_string(&mut json, &BASE64.encode(value.bytes()));
    }
    json.push('}');
    WaveFragment(json.into())
}

/// Wave's `config-hash`: bare lowercase hex SHA-256 of the document
/// `{"configMaps":{<name>:<fragment>,…},"secrets":{…}}`, objects sorted by name
/// here (input order does not matter). Names must be unique per kind: callers
/// merge references to one object (keys union) before building its fragment; a
/// repeated name keeps the last fragment, as a Go map assignment would.
pub fn wave_hash<'a>(
    config_maps: impl IntoIterator<Item = (&'a str, &'a WaveFragment)>,
    secrets: impl IntoIterator<Item = (&'a str, &'a WaveFragment)>,
) -> String {
    hex::encode(Sha256::digest(wave_document(config_maps, secrets)))
}

/// The exact text Wave hashes. It may carry secret content: never log it.
fn wave_document<'a>(
    config_maps: impl IntoIterator<Item = (&'a str, &'a WaveFragment)>,
    secrets: impl IntoIterator<Item = (&'a str, &'a WaveFragment)>,
) -> String {
    let mut document = String::from("{\"configMaps\":");
    push_wave_objects(&mut document, config_maps);
    document.push_str(",\"secrets\":");
    push_wave_objects(&mut document, secrets);
    document.push('}');
    document
}

/// Appends `{<name>:<fragment>,…}` sorted by name.
fn push_wave_objects<'a>(
    document: &mut String,
    objects: impl IntoIterator<Item = (&'a str, &'a WaveFragment)>,
) {
    let sorted: BTreeMap<&str, &WaveFragment> = objects.into_iter().collect();
    document.push('{');
    for (index, (name, fragment)) in sorted.into_iter().enumerate() {
        if index > 0 {
            document.push(',');
        }
        push_go_json_string(document, name);
        document.push(':');
        document.push_str(fragment.json());
    }
    document.push('}');
}

/// Appends `s` as a JSON string the way Go's `encoding/json` (Go 1.22 and later)
/// writes it: `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, other control characters
/// and `<`, `>`, `&`, U+2028, U+2029 as `\u00xx`-style escapes, everything else
/// as is.
fn push_go_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => push_unicode_escape(out, c),
            c if c < ' ' => push_unicode_escape(out, c),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Appends `\uXXXX` (lowercase hex) for a character of the Basic Multilingual Plane.
fn push_unicode_escape(out: &mut String, c: char) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let code = u32::from(c);
    out.push_str("\\u");
    for shift in [12, 8, 4, 0] {
        out.push(char::from(HEX[((code >> shift) & 0xf) as usize]));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use anyhow::{Context as _, Result};
    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde::Deserialize;

    use super::*;

    const VECTORS_PATH: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/compat-vectors.json"
    );

    // --- compat vectors, read at test time ---

    #[derive(Deserialize)]
    struct Vectors {
        k8s_consul_mutator: Vec<Md5Vector>,
        reloader: Vec<ReloaderVector>,
        wave: Vec<WaveVector>,
    }

    #[derive(Deserialize)]
    struct Md5Vector {
        value_utf8: String,
        checksum: String,
    }

    #[derive(Deserialize)]
    struct ReloaderVector {
        description: String,
        kind: String,
        name: String,
        data_utf8: BTreeMap<String, String>,
        #[serde(rename = "binaryData_base64", default)]
        binary_data_base64: BTreeMap<String, String>,
        env_var: String,
        env_value: String,
    }

    #[derive(Deserialize)]
    struct WaveVector {
        description: String,
        #[serde(rename = "configMaps_utf8")]
        config_maps_utf8: BTreeMap<String, BTreeMap<String, String>>,
        secrets_utf8: BTreeMap<String, BTreeMap<String, String>>,
        document: String,
        wave_config_hash: String,
    }

    fn load_vectors() -> Result<Vectors> {
        let text = std::fs::read_to_string(VECTORS_PATH)
            .with_context(|| format!("reading {VECTORS_PATH}"))?;
        serde_json::from_str(&text).context("parsing compat vectors")
    }

    fn object_kind(kind: &str) -> Result<ObjectKind> {
        match kind {
            "ConfigMap" => Ok(ObjectKind::ConfigMap),
            "Secret" => Ok(ObjectKind::Secret),
            other => anyhow::bail!("unknown kind {other}"),
        }
    }

    /// The object a Reloader vector describes, built the way the sources build it.
    fn reloader_vector_data(vector: &ReloaderVector, kind: ObjectKind) -> Result<ObjectData> {
        let mut binary = BTreeMap::new();
        for (key, value) in &vector.binary_data_base64 {
            binary.insert(key.clone(), ByteString(BASE64.decode(value)?));
        }
        Ok(match kind {
            ObjectKind::ConfigMap => ObjectData::from_config_map(&ConfigMap {
                data: Some(vector.data_utf8.clone()),
                binary_data: Some(binary),
                ..ConfigMap::default()
            }),
            ObjectKind::Secret => {
                let utf8 = vector.data_utf8.iter();
                binary.extend(utf8.map(|(k, v)| (k.clone(), ByteString(v.clone().into_bytes()))));
                mk_secret_data(binary)
            }
        })
    }

    fn mk_secret_data(data: BTreeMap<String, ByteString>) -> ObjectData {
        ObjectData::from_secret(&Secret {
            data: Some(data),
            ..Secret::default()
        })
    }

    fn fragments(
        objects: &BTreeMap<String, BTreeMap<String, String>>,
        value: fn(&str) -> DataValue,
    ) -> Vec<(String, WaveFragment)> {
        objects
            .iter()
            .map(|(name, entries)| {
                let data = entries.iter().map(|(k, v)| (k.clone(), value(v)));
                (name.clone(), wave_fragment(&ObjectData(data.collect())))
            })
            .collect()
    }

    fn as_refs(fragments: &[(String, WaveFragment)]) -> Vec<(&str, &WaveFragment)> {
        fragments.iter().map(|(n, f)| (n.as_str(), f)).collect()
    }

    #[test]
    fn md5_value_reproduces_every_k8s_consul_mutator_vector() -> Result<()> {
        let vectors = load_vectors()?.k8s_consul_mutator;
        assert!(!vectors.is_empty());
        for vector in vectors {
            let got = md5_value(vector.value_utf8.as_bytes());
            assert_eq!(got.as_digest().as_deref(), Some(vector.checksum.as_str()));
        }
        Ok(())
    }

    #[test]
    fn reloader_reproduces_every_env_var_and_value_vector() -> Result<()> {
        let vectors = load_vectors()?.reloader;
        assert!(!vectors.is_empty());
        for vector in vectors {
            let kind = object_kind(&vector.kind)?;
            let data = reloader_vector_data(&vector, kind)?;
            let what = &vector.description;
            assert_eq!(
                reloader_env_var(kind, &vector.name),
                vector.env_var,
                "{what}"
            );
            let got = reloader_object(kind, &data);
            assert_eq!(
                got.as_digest().as_deref(),
                Some(vector.env_value.as_str()),
                "{what}"
            );
        }
        Ok(())
    }

    #[derive(Deserialize)]
    struct Sha512Vectors {
        reloader_sha512_256: Vec<ReloaderVector>,
    }

    #[test]
    fn reloader_sha512_256_reproduces_every_vector() -> Result<()> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/reloader-sha512-vectors.json"
        );
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
        let vectors: Sha512Vectors = serde_json::from_str(&text)?;
        assert!(!vectors.reloader_sha512_256.is_empty());
        for vector in vectors.reloader_sha512_256 {
            let kind = object_kind(&vector.kind)?;
            let data = reloader_vector_data(&vector, kind)?;
            let what = &vector.description;
            assert_eq!(
                reloader_env_var(kind, &vector.name),
                vector.env_var,
                "{what}"
            );
            let got = reloader_object_sha512_256(kind, &data);
            assert_eq!(
                got.as_digest().as_deref(),
                Some(vector.env_value.as_str()),
                "{what}"
            );
            assert!(is_reloader_sha512_256(&vector.env_value), "{what}");
            let sha1 = reloader_object(kind, &data);
            assert!(!is_reloader_sha512_256(&sha1.to_string()), "{what}");
        }
        Ok(())
    }

    #[test]
    fn sha512_256_shape_is_64_lowercase_hex_digits() {
        let digest = "fd9e71a362056bfa864d9859e12978f893d330ce8cbf09218b25d015770ad91f";
        assert!(is_reloader_sha512_256(digest));
        assert!(!is_reloader_sha512_256(&digest.to_uppercase()));
        assert!(!is_reloader_sha512_256(&digest[1..]));
        assert!(!is_reloader_sha512_256(
            "3c9a892aeaedc759abc3df9884a37b8be5680382"
        ));
        assert!(!is_reloader_sha512_256(&format!("{}g", &digest[1..])));
    }

    #[test]
    fn wave_reproduces_every_document_and_hash_vector() -> Result<()> {
        let vectors = load_vectors()?.wave;
        assert!(!vectors.is_empty());
        for vector in vectors {
            let text = |v: &str| DataValue::Text(v.to_owned());
            let binary = |v: &str| DataValue::Binary(v.as_bytes().to_vec());
            let config_maps = fragments(&vector.config_maps_utf8, text);
            let secrets = fragments(&vector.secrets_utf8, binary);
            let what = &vector.description;
            let document = wave_document(as_refs(&config_maps), as_refs(&secrets));
            assert_eq!(document, vector.document, "{what}");
            let hash = wave_hash(as_refs(&config_maps), as_refs(&secrets));
            assert_eq!(hash, vector.wave_config_hash, "{what}");
        }
        Ok(())
    }

    /// Digests read back as the text they were built from, equal exactly when
    /// the texts are; nudge's own are kept as bytes.
    #[test]
    fn digests_read_back_exactly_and_compare_by_text() {
        let hex = "0123456789abcdef".repeat(4);
        let texts = [
            format!("sha256-{hex}"),
            format!("hmac-sha256-{hex}"),
            format!("sha256-{}", hex.to_uppercase()),
            format!("sha256-{}", &hex[2..]),
            format!("hmac-sha256-{hex}00"),
            format!("md5-{}", &hex[..32]),
            hex.clone(),
            "sha256-".to_owned(),
            String::new(),
        ];
        for text in &texts {
            let fingerprint = Fingerprint::digest(text);
            assert_eq!(fingerprint.as_digest().as_deref(), Some(text.as_str()));
            assert_eq!(fingerprint.to_string(), *text);
            for other in &texts {
                assert_eq!(fingerprint == Fingerprint::digest(other), text == other);
            }
        }
        let compact = |text: &str| match Fingerprint::digest(text) {
            Fingerprint::Digest(DigestValue(repr)) => !matches!(repr, Repr::Text(_)),
            Fingerprint::Wave(_) => false,
        };
        assert!(compact(&texts[0]) && compact(&texts[1]));
        assert!(!compact(&texts[2]) && !compact(&texts[5]));
        assert!(size_of::<Fingerprint>() <= 24);
    }

    // --- builders ---

    fn mk_key(byte: u8) -> Result<FingerprintKey> {
        Ok(FingerprintKey::new(vec![byte; FingerprintKey::MIN_LEN])?)
    }

    fn mk_text(entries: &[(&str, &str)]) -> ObjectData {
        let data = entries
            .iter()
            .map(|(k, v)| (k.to_string(), DataValue::Text(v.to_string())));
        ObjectData(data.collect())
    }

    fn mk_binary(entries: &[(&str, &[u8])]) -> ObjectData {
        let data = entries
            .iter()
            .map(|(k, v)| (k.to_string(), DataValue::Binary(v.to_vec())));
        ObjectData(data.collect())
    }

    fn digest(fingerprint: &Fingerprint) -> Result<String> {
        Ok(fingerprint
            .as_digest()
            .context("expected a digest")?
            .into_owned())
    }

    /// Collects what the native encoder feeds a hasher.
    #[derive(Default)]
    struct Collect(Vec<u8>);

    impl Update for Collect {
        fn update(&mut self, data: &[u8]) {
            self.0.extend_from_slice(data);
        }
    }

    fn canonical_bytes(data: &ObjectData) -> Vec<u8> {
        let mut collect = Collect::default();
        encode_object(&mut collect, data);
        collect.0
    }

    // --- native fingerprints ---

    #[test]
    fn native_object_length_prefixes_keys_and_values() -> Result<()> {
        let key = mk_key(7)?;
        for kind in [ObjectKind::ConfigMap, ObjectKind::Secret] {
            let a_bc = native_object(kind, &mk_text(&[("a", "bc")]), &key);
            let ab_c = native_object(kind, &mk_text(&[("ab", "c")]), &key);
            assert_ne!(a_bc, ab_c, "{kind:?}");
        }
        // Without length prefixes both would feed "a" TAG_TEXT "b" "c" TAG_TEXT "d":
        // the type tag alone does not mark where one entry ends.
        let two_entries = mk_text(&[("a", "b"), ("c", "d")]);
        let one_entry = mk_text(&[("a", "bc\u{0}d")]);
        assert_ne!(
            native_object(ObjectKind::ConfigMap, &two_entries, &key),
            native_object(ObjectKind::ConfigMap, &one_entry, &key)
        );
        Ok(())
    }

    #[test]
    fn native_object_does_not_depend_on_key_order() -> Result<()> {
        let cm = |entries: Vec<(&str, &str)>| ConfigMap {
            data: Some(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.into(), v.into()))
                    .collect(),
            ),
            ..ConfigMap::default()
        };
        let forward = ObjectData::from_config_map(&cm(vec![("x", "1"), ("y", "2"), ("z", "3")]));
        let backward = ObjectData::from_config_map(&cm(vec![("z", "3"), ("y", "2"), ("x", "1")]));
        let key = mk_key(1)?;
        assert_eq!(
            native_object(ObjectKind::ConfigMap, &forward, &key),
            native_object(ObjectKind::ConfigMap, &backward, &key)
        );
        Ok(())
    }

    #[test]
    fn native_object_moving_a_key_between_data_and_binary_data_is_a_change() -> Result<()> {
        let key = mk_key(1)?;
        let text = mk_text(&[("k", "v")]);
        let binary = mk_binary(&[("k", b"v")]);
        assert_ne!(
            native_object(ObjectKind::ConfigMap, &text, &key),
            native_object(ObjectKind::ConfigMap, &binary, &key)
        );
        Ok(())
    }

    #[test]
    fn native_configmap_fingerprint_is_prefixed_sha256_of_canonical_bytes_and_ignores_key()
    -> Result<()> {
        let data = mk_text(&[("a", "1"), ("b", "2")]);
        let expected = format!(
            "sha256-{}",
            hex::encode(Sha256::digest(canonical_bytes(&data)))
        );
        let with_one = native_object(ObjectKind::ConfigMap, &data, &mk_key(1)?);
        let with_two = native_object(ObjectKind::ConfigMap, &data, &mk_key(2)?);
        assert_eq!(digest(&with_one)?, expected);
        assert_eq!(with_one, with_two);
        Ok(())
    }

    #[test]
    fn native_secret_fingerprint_is_hmac_of_canonical_bytes_not_plain_sha256() -> Result<()> {
        let data = mk_binary(&[("password", b"hunter2")]);
        let key = mk_key(9)?;
        let canonical = canonical_bytes(&data);
        let fingerprint = native_object(ObjectKind::Secret, &data, &key);
        let got = digest(&fingerprint)?;

        let mut mac = HmacSha256::new_from_slice(key.as_bytes())?;
        Mac::update(&mut mac, &canonical);
        let expected_hex = hex::encode(mac.finalize().into_bytes());
        assert_eq!(got, format!("hmac-sha256-{expected_hex}"));

        let plain_hex = hex::encode(Sha256::digest(&canonical));
        assert!(!got.contains(&plain_hex));
        Ok(())
    }

    #[test]
    fn native_secret_fingerprint_differs_per_installation_key() -> Result<()> {
        let data = mk_binary(&[("password", b"hunter2")]);
        assert_ne!(
            native_object(ObjectKind::Secret, &data, &mk_key(1)?),
            native_object(ObjectKind::Secret, &data, &mk_key(2)?)
        );
        Ok(())
    }

    #[test]
    fn recreated_object_with_same_data_keeps_its_fingerprint() -> Result<()> {
        let secret = |uid: &str, resource_version: &str| Secret {
            metadata: ObjectMeta {
                name: Some("db".into()),
                uid: Some(uid.into()),
                resource_version: Some(resource_version.into()),
                labels: Some(BTreeMap::from([("rev".into(), uid.into())])),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(
                "pw".into(),
                ByteString(b"s3cret".to_vec()),
            )])),
            ..Secret::default()
        };
        let key = mk_key(3)?;
        let before = ObjectData::from_secret(&secret("uid-1", "100"));
        let after = ObjectData::from_secret(&secret("uid-2", "205"));
        assert_eq!(
            native_object(ObjectKind::Secret, &before, &key),
            native_object(ObjectKind::Secret, &after, &key)
        );
        Ok(())
    }

    #[test]
    fn native_value_is_prefixed_sha256_of_raw_bytes() -> Result<()> {
        let got = native_value(b"app: config\n");
        let expected = format!("sha256-{}", hex::encode(Sha256::digest(b"app: config\n")));
        assert_eq!(digest(&got)?, expected);
        Ok(())
    }

    #[test]
    fn native_value_keyed_is_hmac_and_differs_per_key_and_from_plain() -> Result<()> {
        let one = native_value_keyed(b"token", &mk_key(1)?);
        let two = native_value_keyed(b"token", &mk_key(2)?);
        assert!(digest(&one)?.starts_with("hmac-sha256-"));
        assert_ne!(one, two);
        let plain = native_value(b"token");
        let plain = digest(&plain)?;
        let plain_hex = plain.trim_start_matches("sha256-");
        assert!(!digest(&one)?.contains(plain_hex));
        Ok(())
    }

    // --- ObjectData ---

    #[test]
    fn from_config_map_reads_data_as_text_and_binary_data_as_binary() {
        let cm = ConfigMap {
            data: Some(BTreeMap::from([("t".into(), "text".into())])),
            binary_data: Some(BTreeMap::from([("b".into(), ByteString(vec![0, 255]))])),
            ..ConfigMap::default()
        };
        let data = ObjectData::from_config_map(&cm);
        assert_eq!(data.0.get("t"), Some(&DataValue::Text("text".into())));
        assert_eq!(data.0.get("b"), Some(&DataValue::Binary(vec![0, 255])));
        assert_eq!(data.0.len(), 2);
    }

    #[test]
    fn from_secret_reads_data_as_binary_and_ignores_string_data() {
        let secret = Secret {
            data: Some(BTreeMap::from([("pw".into(), ByteString(b"x".to_vec()))])),
            string_data: Some(BTreeMap::from([("other".into(), "y".into())])),
            ..Secret::default()
        };
        let data = ObjectData::from_secret(&secret);
        assert_eq!(data, mk_binary(&[("pw", b"x")]));
    }

    #[test]
    fn narrowed_keeps_only_selected_keys() {
        let data = mk_text(&[("a", "1"), ("b", "2"), ("c", "3")]);
        let keys = KeySelection::Only(BTreeSet::from(["a".into(), "c".into(), "zz".into()]));
        assert_eq!(data.narrowed(&keys), mk_text(&[("a", "1"), ("c", "3")]));
        assert_eq!(
            data.narrowed(&KeySelection::one("b")),
            mk_text(&[("b", "2")])
        );
        assert_eq!(data.narrowed(&KeySelection::All), data);
    }

    // --- combine_native ---

    #[test]
    fn combine_native_does_not_depend_on_entry_order() -> Result<()> {
        let entries = [
            ("configmap/ns/a", Some("sha256-aa")),
            ("secret/ns/b", None),
            ("configmap/ns/c", Some("sha256-cc")),
        ];
        let forward = combine_native(entries);
        let backward = combine_native(entries.into_iter().rev());
        assert_eq!(forward, backward);
        assert!(digest(&forward)?.starts_with("sha256-"));
        Ok(())
    }

    #[test]
    fn combine_native_distinguishes_absent_from_any_digest() {
        let absent = combine_native([("configmap/ns/a", None)]);
        for present in [ABSENT, "", "sha256-00"] {
            assert_ne!(
                absent,
                combine_native([("configmap/ns/a", Some(present))]),
                "{present:?}"
            );
        }
    }

    #[test]
    fn combine_native_length_prefixes_ids_and_digests() {
        assert_ne!(
            combine_native([("a", Some("bc"))]),
            combine_native([("ab", Some("c"))])
        );
        // Without length prefixes both would feed "a" TAG_PRESENT "b" "c" TAG_PRESENT "d".
        assert_ne!(
            combine_native([("a", Some("b")), ("c", Some("d"))]),
            combine_native([("a", Some("bc\u{1}d"))])
        );
    }

    #[test]
    fn combine_native_changes_when_one_entry_changes() {
        let before = combine_native([("a", Some("sha256-1")), ("b", Some("sha256-2"))]);
        let after = combine_native([("a", Some("sha256-1")), ("b", Some("sha256-3"))]);
        assert_ne!(before, after);
    }

    // --- Reloader ---

    #[test]
    fn reloader_env_var_drops_leading_run_and_collapses_other_runs() {
        let cases = [
            ("app-config", "STAKATER_APP_CONFIG_CONFIGMAP"),
            ("--lead", "STAKATER_LEAD_CONFIGMAP"),
            ("trail-", "STAKATER_TRAIL__CONFIGMAP"),
            ("trail..", "STAKATER_TRAIL__CONFIGMAP"),
            ("a--b..c-.d", "STAKATER_A_B_C_D_CONFIGMAP"),
            ("my.app.v2", "STAKATER_MY_APP_V2_CONFIGMAP"),
            ("MiXeD9case", "STAKATER_MIXED9CASE_CONFIGMAP"),
            ("---", "STAKATER__CONFIGMAP"),
        ];
        for (name, expected) in cases {
            assert_eq!(
                reloader_env_var(ObjectKind::ConfigMap, name),
                expected,
                "{name}"
            );
        }
        assert_eq!(
            reloader_env_var(ObjectKind::Secret, "db.credentials"),
            "STAKATER_DB_CREDENTIALS_SECRET"
        );
    }

    #[test]
    fn reloader_env_var_upper_cases_like_go() {
        // Go's unicode.ToUpper maps dotless i to 'I' and long s to 'S'; 'ß' has no
        // single-character upper case and stays a separator.
        assert_eq!(
            reloader_env_var(ObjectKind::Secret, "ıd-ſ"),
            "STAKATER_ID_S_SECRET"
        );
        assert_eq!(
            reloader_env_var(ObjectKind::Secret, "aßb"),
            "STAKATER_A_B_SECRET"
        );
    }

    #[test]
    fn reloader_object_sorts_whole_key_value_strings_not_keys() -> Result<()> {
        // "a.b=2" sorts before "a=1" because '.' < '='; a key sort would do the opposite.
        let data = mk_text(&[("a", "1"), ("a.b", "2")]);
        let got = reloader_object(ObjectKind::ConfigMap, &data);
        assert_eq!(digest(&got)?, hex::encode(Sha1::digest(b"a.b=2;a=1")));
        Ok(())
    }

    #[test]
    fn reloader_object_base64_encodes_only_configmap_binary_values() -> Result<()> {
        let data = mk_binary(&[("k", &[0xff])]);
        let as_cm = reloader_object(ObjectKind::ConfigMap, &data);
        let as_secret = reloader_object(ObjectKind::Secret, &data);
        assert_eq!(digest(&as_cm)?, hex::encode(Sha1::digest(b"k=/w==")));
        assert_eq!(digest(&as_secret)?, hex::encode(Sha1::digest(b"k=\xff")));
        Ok(())
    }

    // --- Wave ---

    #[test]
    fn wave_hash_sorts_objects_by_name_itself() {
        let a = wave_fragment(&mk_text(&[("k", "1")]));
        let b = wave_fragment(&mk_text(&[("k", "2")]));
        let forward = wave_hash([("a", &a), ("b", &b)], [("s", &a)]);
        let backward = wave_hash([("b", &b), ("a", &a)], [("s", &a)]);
        assert_eq!(forward, backward);
        assert_ne!(forward, wave_hash([("a", &b), ("b", &a)], [("s", &a)]));
    }

    #[test]
    fn wave_fragment_is_compact_with_sorted_keys_and_base64_values() {
        let data = mk_binary(&[("z", b"\x00"), ("a", b"hi")]);
        assert_eq!(wave_fragment(&data).json(), r#"{"a":"aGk=","z":"AA=="}"#);
        assert_eq!(wave_fragment(&ObjectData::default()).json(), "{}");
    }

    #[test]
    fn wave_escapes_names_and_keys_like_go_encoding_json() {
        let data = mk_text(&[("<k&>", "")]);
        assert_eq!(wave_fragment(&data).json(), r#"{"\u003ck\u0026\u003e":""}"#);
        let mut out = String::new();
        push_go_json_string(
            &mut out,
            "q\"b\\\u{8}\u{c}\n\r\t\u{1}\u{7f}\u{2028}\u{2029}é",
        );
        assert_eq!(
            out,
            // DEL is not escaped by Go; everything else here is.
            concat!(r#""q\"b\\\b\f\n\r\t\u0001"#, "\u{7f}", r#"\u2028\u2029é""#)
        );
        let fragment = wave_fragment(&ObjectData::default());
        let document = wave_document([("a>b", &fragment)], []);
        assert_eq!(document, r#"{"configMaps":{"a\u003eb":{}},"secrets":{}}"#);
    }

    // --- keys and redaction ---

    #[test]
    fn fingerprint_key_shorter_than_32_bytes_is_rejected() {
        let err = FingerprintKey::new(vec![0x41; 31]).err();
        assert!(matches!(
            err,
            Some(FingerprintError::KeyTooShort { len: 31, min: 32 })
        ));
        assert!(FingerprintKey::new(vec![0x41; 32]).is_ok());
    }

    #[test]
    fn generated_keys_are_32_random_bytes() {
        let one = FingerprintKey::generate();
        let two = FingerprintKey::generate();
        assert_eq!(one.as_bytes().len(), 32);
        assert_ne!(one.as_bytes(), two.as_bytes());
    }

    #[test]
    fn debug_output_never_shows_content() -> Result<()> {
        let key = FingerprintKey::new(b"topsecret-key-material-0123456789".to_vec())?;
        assert_eq!(format!("{key:?}"), "FingerprintKey(redacted)");

        let value = DataValue::Text("hunter2".into());
        let binary = DataValue::Binary(b"hunter2".to_vec());
        let fragment = wave_fragment(&mk_text(&[("pw", "hunter2")]));
        let base64 = BASE64.encode("hunter2");
        let data = mk_text(&[("pw", "hunter2")]);
        let printed = [
            format!("{value:?}"),
            format!("{binary:?}"),
            format!("{fragment:?}"),
            format!("{:?}", Fingerprint::Wave(fragment.clone())),
            format!("{}", Fingerprint::Wave(fragment.clone())),
            format!("{data:?}"),
        ];
        for text in printed {
            assert!(
                !text.contains("hunter2") && !text.contains(&base64),
                "{text}"
            );
        }
        Ok(())
    }

    #[test]
    fn key_errors_never_show_key_material() {
        let err = FingerprintKey::new(b"short-secret".to_vec()).err();
        let text = err.map(|e| format!("{e} {e:?}")).unwrap_or_default();
        assert!(!text.is_empty() && !text.contains("short-secret"), "{text}");
    }
}
