//! Consul's KV answers decoded: the listing Consul documents (`[{"Key": …,
//! "Value": <base64>, "ModifyIndex": …}, …]`) with its `X-Consul-Index`, and
//! the errors of a client. Pure, and free of consulrs, so the fuzz targets
//! decode answers without the client.

use std::fmt;
use std::path::PathBuf;

use base64::Engine as _;
use base64::engine::{GeneralPurpose, GeneralPurposeConfig};
use serde::Deserialize;

/// Consul's base64, standard and padded; trailing bits are let through, as
/// consulrs (base64 0.13) did.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
);

/// One entry of Consul's KV listing, with the fields Consul always sends
/// required, as consulrs' `KVPair` reads it.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
#[expect(dead_code, reason = "read to require them, as consulrs does")]
struct KvPair {
    create_index: u64,
    flags: u64,
    key: String,
    lock_index: u64,
    modify_index: u64,
    value: Option<String>,
}

/// Why a Consul request or the client itself failed. Never carries values.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The configured address is not an `http(s)://host[:port]` URL.
    #[error("invalid Consul address {address:?}: {reason}")]
    InvalidAddress {
        /// The address as configured.
        address: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The ACL token contains characters an HTTP header cannot carry.
    #[error("the Consul ACL token is not a valid HTTP header value")]
    InvalidToken,
    /// A certificate, key or token file could not be read.
    #[error("cannot read {path}")]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A certificate or key file is not valid PEM of the expected kind.
    #[error("{path} is not a usable PEM certificate or key")]
    Certificate {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: reqwest::Error,
    },
    /// The HTTP client could not be built (TLS set-up).
    #[error("cannot build the Consul HTTP client")]
    Build(#[source] reqwest::Error),
    /// consulrs/rustify could not build the request (an unusable key or parameter).
    #[cfg(feature = "consul")]
    #[error("cannot build the request for {path:?}")]
    Request {
        /// The key or prefix.
        path: String,
        /// Why.
        #[source]
        source: rustify::errors::ClientError,
    },
    /// Consul could not be reached, or the connection broke.
    #[error("Consul request failed")]
    Transport(#[source] reqwest::Error),
    /// Consul did not answer within the deadline.
    #[error("Consul did not answer in time")]
    Timeout,
    /// Consul answered with an error status (403 ACL denied, 429, 5xx, …).
    #[error("Consul answered {status}: {message}")]
    Status {
        /// The HTTP status code.
        status: u16,
        /// The start of Consul's error text (never a value).
        message: String,
    },
    /// A KV answer without a valid `X-Consul-Index` header (a proxy in between?).
    #[error("Consul's answer has no valid X-Consul-Index header")]
    MissingIndex,
    /// The answer body is not the KV listing Consul documents.
    #[error("Consul's answer is not a KV listing (line {line}, column {column})")]
    Decode {
        /// Where parsing stopped.
        line: usize,
        /// Where parsing stopped.
        column: usize,
    },
    /// A value is not valid base64.
    #[error("Consul's answer carries a value that is not valid base64")]
    Base64,
}

impl ClientError {
    /// A low-cardinality label for metrics.
    pub fn category(&self) -> &'static str {
        match self {
            Self::InvalidAddress { .. }
            | Self::InvalidToken
            | Self::ReadFile { .. }
            | Self::Certificate { .. }
            | Self::Build(_) => "config",
            #[cfg(feature = "consul")]
            Self::Request { .. } => "request",
            Self::Transport(_) => "transport",
            Self::Timeout => "timeout",
            Self::Status { status: 429, .. } => "throttled",
            Self::Status { .. } => "status",
            Self::MissingIndex | Self::Decode { .. } | Self::Base64 => "protocol",
        }
    }
}

/// One key as read.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyRead {
    /// The value, or `None` when the key does not exist.
    pub value: Option<Vec<u8>>,
    /// The key's `ModifyIndex`, or `None` when it does not exist.
    pub modify_index: Option<u64>,
    /// The answer's `X-Consul-Index`.
    pub index: u64,
}

impl fmt::Debug for KeyRead {
    /// Values are never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRead")
            .field(
                "value",
                &self.value.as_ref().map(|v| format!("{} bytes", v.len())),
            )
            .field("modify_index", &self.modify_index)
            .field("index", &self.index)
            .finish()
    }
}

/// One entry of a recursive read.
#[derive(Clone, PartialEq, Eq)]
pub struct KvEntry {
    /// The full key.
    pub key: String,
    /// The value (empty when Consul stores none).
    pub value: Vec<u8>,
    /// The key's `ModifyIndex`.
    pub modify_index: u64,
}

impl fmt::Debug for KvEntry {
    /// Values are never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KvEntry")
            .field("key", &self.key)
            .field("value", &format_args!("{} bytes", self.value.len()))
            .field("modify_index", &self.modify_index)
            .finish()
    }
}

/// Every key under a prefix as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixRead {
    /// The entries (empty when nothing is under the prefix).
    pub entries: Vec<KvEntry>,
    /// The answer's `X-Consul-Index`.
    pub index: u64,
}

/// The names of the keys under a prefix as read, without values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeysRead {
    /// The names, sorted (empty when nothing is under the prefix).
    pub keys: Vec<String>,
    /// The answer's `X-Consul-Index`: the highest `ModifyIndex` under the
    /// prefix, or of a deletion there.
    pub index: u64,
}

/// Decodes Consul's answer to a read of the single key `key`: `status` is the HTTP
/// status, `index` the `X-Consul-Index` header's text (when it is there and is
/// text), `body` the response body. A 404 is the key being absent; any status
/// but 200 and 404 is [`ClientError::Status`]. Pure (no I/O), so the decoding can
/// be tested and fuzzed without a Consul.
pub fn parse_key_response(
    key: &str,
    status: u16,
    index: Option<&str>,
    body: &[u8],
) -> Result<KeyRead, ClientError> {
    let (found, index) = decode_answer(status, index, body)?;
    let entry = found.and_then(|entries| entries.into_iter().find(|e| e.key == key));
    Ok(match entry {
        Some(e) => KeyRead {
            value: Some(e.value),
            modify_index: Some(e.modify_index),
            index,
        },
        None => KeyRead {
            value: None,
            modify_index: None,
            index,
        },
    })
}

/// Decodes Consul's answer to a recursive read of a prefix, as
/// [`parse_key_response`] does; a 404 is nothing under the prefix.
pub fn parse_prefix_response(
    status: u16,
    index: Option<&str>,
    body: &[u8],
) -> Result<PrefixRead, ClientError> {
    let (found, index) = decode_answer(status, index, body)?;
    Ok(PrefixRead {
        entries: found.unwrap_or_default(),
        index,
    })
}

/// Decodes Consul's answer to a `?keys` read of a prefix, as
/// [`parse_prefix_response`] does; a 404 is nothing under the prefix.
pub fn parse_keys_response(
    status: u16,
    index: Option<&str>,
    body: &[u8],
) -> Result<KeysRead, ClientError> {
    let index = || {
        index
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or(ClientError::MissingIndex)
    };
    match status {
        200 => {
            let index = index()?;
            let keys = serde_json::from_slice(body).map_err(|e| ClientError::Decode {
                line: e.line(),
                column: e.column(),
            })?;
            Ok(KeysRead { keys, index })
        }
        404 => Ok(KeysRead {
            keys: Vec::new(),
            index: index()?,
        }),
        status => Err(ClientError::Status {
            status,
            message: error_text(body),
        }),
    }
}

/// The entries of an answer (`None` on 404) and its `X-Consul-Index`.
fn decode_answer(
    status: u16,
    index: Option<&str>,
    body: &[u8],
) -> Result<(Option<Vec<KvEntry>>, u64), ClientError> {
    let index = index.and_then(|v| v.trim().parse::<u64>().ok());
    match status {
        200 => {
            let index = index.ok_or(ClientError::MissingIndex)?;
            let pairs: Vec<KvPair> =
                serde_json::from_slice(body).map_err(|e| ClientError::Decode {
                    line: e.line(),
                    column: e.column(),
                })?;
            let entries = pairs
                .into_iter()
                .map(|pair| {
                    let value = match pair.value {
                        Some(encoded) => BASE64.decode(encoded).map_err(|_| ClientError::Base64)?,
                        None => Vec::new(),
                    };
                    Ok(KvEntry {
                        key: pair.key,
                        value,
                        modify_index: pair.modify_index,
                    })
                })
                .collect::<Result<Vec<_>, ClientError>>()?;
            Ok((Some(entries), index))
        }
        404 => Ok((None, index.ok_or(ClientError::MissingIndex)?)),
        status => Err(ClientError::Status {
            status,
            message: error_text(body),
        }),
    }
}

/// The first line of an error body, shortened: Consul's error text, never a value
/// (error answers carry no KV content).
fn error_text(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let line = text.lines().next().unwrap_or("").trim();
    line.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_answers_decode_without_a_consul() {
        let body = br#"[{"Key":"app/config","Value":"aGk=","ModifyIndex":7,"CreateIndex":1,"LockIndex":0,"Flags":0}]"#;
        let read = parse_key_response("app/config", 200, Some(" 12 "), body).unwrap();
        assert_eq!(
            read,
            KeyRead {
                value: Some(b"hi".to_vec()),
                modify_index: Some(7),
                index: 12,
            }
        );
        // Absent keys keep the index to block on.
        let absent = parse_key_response("app/config", 404, Some("13"), b"").unwrap();
        assert_eq!((absent.value, absent.index), (None, 13));
        // An answer about another key is not this key's value.
        let other = parse_key_response("app/other", 200, Some("12"), body).unwrap();
        assert_eq!(other.value, None);
        let missing = parse_key_response("app/config", 200, None, body).unwrap_err();
        assert!(matches!(missing, ClientError::MissingIndex), "{missing}");
        let bad_base64 = br#"[{"Key":"k","Value":"%%%","ModifyIndex":1,"CreateIndex":1,"LockIndex":0,"Flags":0}]"#;
        let error = parse_key_response("k", 200, Some("1"), bad_base64).unwrap_err();
        assert!(matches!(error, ClientError::Base64), "{error}");
        let denied = parse_key_response("k", 403, Some("1"), b"ACL not found\nmore").unwrap_err();
        assert_eq!(denied.to_string(), "Consul answered 403: ACL not found");
    }

    #[test]
    fn prefix_answers_decode_without_a_consul() {
        let body = br#"[
            {"Key":"a/1","Value":null,"ModifyIndex":3,"CreateIndex":3,"LockIndex":0,"Flags":0},
            {"Key":"a/2","Value":"eA==","ModifyIndex":4,"CreateIndex":4,"LockIndex":0,"Flags":0}
        ]"#;
        let read = parse_prefix_response(200, Some("9"), body).unwrap();
        assert_eq!(read.index, 9);
        let entries: Vec<_> = read
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_slice(), e.modify_index))
            .collect();
        assert_eq!(entries, [("a/1", &b""[..], 3), ("a/2", &b"x"[..], 4)]);
        assert!(
            parse_prefix_response(404, Some("9"), b"")
                .unwrap()
                .entries
                .is_empty()
        );
        let error = parse_prefix_response(200, Some("9"), b"{}").unwrap_err();
        assert!(matches!(error, ClientError::Decode { .. }), "{error}");
    }

    #[test]
    fn keys_answers_decode_without_a_consul() {
        let read = parse_keys_response(200, Some("9"), br#"["a/1","a/b/"]"#).unwrap();
        assert_eq!(read.keys, ["a/1", "a/b/"]);
        assert_eq!(read.index, 9);
        let empty = parse_keys_response(404, Some("12"), b"").unwrap();
        assert!(empty.keys.is_empty());
        assert_eq!(empty.index, 12);
        let error = parse_keys_response(200, None, b"[]").unwrap_err();
        assert!(matches!(error, ClientError::MissingIndex), "{error}");
        let error = parse_keys_response(200, Some("9"), b"[1]").unwrap_err();
        assert!(matches!(error, ClientError::Decode { .. }), "{error}");
        let error = parse_keys_response(500, Some("9"), b"rpc error").unwrap_err();
        assert!(
            matches!(error, ClientError::Status { status: 500, .. }),
            "{error}"
        );
    }

    #[test]
    fn error_text_keeps_the_first_line_only() {
        assert_eq!(error_text(b"Permission denied\nmore"), "Permission denied");
        assert_eq!(error_text(&[b'x'; 500]).len(), 200);
    }
}
