//! The compatibility hashes: Reloader's object hash and env var name, Wave's
//! per-object fragment and document hash (plus nudge's own object and combined
//! hashes on the same inputs).
//!
//! Beyond "no panic": Reloader's hash matches a straightforward reading of its
//! definition, its SHA-512/256 variant has the shape nudge recognises it by,
//! its env var name has Reloader's shape, a Wave fragment is JSON
//! that decodes back to the object's keys and base64 values, and neither Wave's
//! nor nudge's combined hash depends on input order.
#![no_main]

use std::collections::BTreeMap;

use arbitrary::{Arbitrary, Result, Unstructured};
use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use nudge::__private::fingerprint::{self, DataValue, ObjectData, ObjectKind};
use sha1::{Digest, Sha1};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

#[derive(Arbitrary, Debug)]
struct Object {
    secret: bool,
    name: String,
    entries: Vec<(String, bool, Vec<u8>)>,
}

impl Object {
    fn kind(&self) -> ObjectKind {
        if self.secret {
            ObjectKind::Secret
        } else {
            ObjectKind::ConfigMap
        }
    }

    fn data(&self) -> ObjectData {
        ObjectData(
            self.entries
                .iter()
                .map(|(key, text, bytes)| {
                    let value = match (self.secret, text) {
                        (false, true) => {
                            DataValue::Text(String::from_utf8_lossy(bytes).into_owned())
                        }
                        _ => DataValue::Binary(bytes.clone()),
                    };
                    (key.clone(), value)
                })
                .collect(),
        )
    }
}

/// Reloader's hash as its definition reads: SHA-1 of the sorted `key=value`
/// strings joined by `;`, ConfigMap binaryData base64-encoded.
fn reloader_reference(kind: ObjectKind, data: &ObjectData) -> String {
    let mut entries: Vec<Vec<u8>> = data
        .0
        .iter()
        .map(|(key, value)| {
            let mut entry = key.as_bytes().to_vec();
            entry.push(b'=');
            match (kind, value) {
                (ObjectKind::ConfigMap, DataValue::Binary(bytes)) => {
                    entry.extend(B64.encode(bytes).as_bytes())
                }
                _ => entry.extend(value.bytes()),
            }
            entry
        })
        .collect();
    entries.sort();
    hex::encode(Sha1::digest(entries.join(&b';')))
}

fn check_env_var(kind: ObjectKind, name: &str) {
    let var = fingerprint::reloader_env_var(kind, name);
    let suffix = match kind {
        ObjectKind::ConfigMap => "_CONFIGMAP",
        _ => "_SECRET",
    };
    let middle = var
        .strip_prefix("STAKATER_")
        .and_then(|v| v.strip_suffix(suffix))
        .unwrap_or_else(|| panic!("{var:?} is not STAKATER_<NAME>{suffix}"));
    assert!(
        middle
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'),
        "{var:?}"
    );
    assert!(
        !middle.starts_with('_') && !middle.contains("__"),
        "{var:?}"
    );
}

fn check_wave_fragment(data: &ObjectData) -> fingerprint::WaveFragment {
    let fragment = fingerprint::wave_fragment(data);
    let parsed: BTreeMap<String, String> = serde_json::from_str(fragment.json())
        .unwrap_or_else(|e| panic!("not a JSON object of strings ({e}): {}", fragment.json()));
    assert_eq!(parsed.len(), data.0.len());
    for (key, value) in &data.0 {
        let encoded = parsed.get(key).unwrap_or_else(|| panic!("{key:?} missing"));
        assert_eq!(B64.decode(encoded).unwrap(), value.bytes());
    }
    fragment
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let objects: Vec<Object> = u.arbitrary()?;
    let key = nudge::__private::crate_fns::fingerprint_key(vec![7; 32]).expect("a 32-byte key");
    let mut config_maps = BTreeMap::new();
    let mut secrets = BTreeMap::new();
    let mut combined = Vec::new();
    for object in &objects {
        let kind = object.kind();
        let data = object.data();
        let hash = fingerprint::reloader_object(kind, &data);
        assert_eq!(
            hash.as_digest().as_deref(),
            Some(reloader_reference(kind, &data).as_str())
        );
        // The SHA-512/256 variant hashes the same string: 64 lowercase hex
        // digits, recognised as that variant; SHA-1's 40 are not.
        let sha512 = fingerprint::reloader_object_sha512_256(kind, &data).to_string();
        assert!(fingerprint::is_reloader_sha512_256(&sha512), "{sha512:?}");
        assert!(!fingerprint::is_reloader_sha512_256(&hash.to_string()));
        check_env_var(kind, &object.name);
        let fragment = check_wave_fragment(&data);
        match kind {
            ObjectKind::ConfigMap => config_maps.insert(object.name.clone(), fragment),
            _ => secrets.insert(object.name.clone(), fragment),
        };
        let native = fingerprint::native_object(kind, &data, &key);
        combined.push((
            object.name.clone(),
            native.as_digest().map(|d| d.into_owned()),
        ));
    }
    // Order independence (names are unique per kind here, as callers ensure).
    let forward = fingerprint::wave_hash(
        config_maps.iter().map(|(n, f)| (n.as_str(), f)),
        secrets.iter().map(|(n, f)| (n.as_str(), f)),
    );
    let backward = fingerprint::wave_hash(
        config_maps.iter().rev().map(|(n, f)| (n.as_str(), f)),
        secrets.iter().rev().map(|(n, f)| (n.as_str(), f)),
    );
    assert_eq!(forward, backward);
    assert_eq!(forward.len(), 64);
    let forward: Vec<(&str, Option<&str>)> = combined
        .iter()
        .map(|(id, digest)| (id.as_str(), digest.as_deref()))
        .collect();
    let a = fingerprint::combine_native(forward.iter().copied());
    let b = fingerprint::combine_native(forward.iter().rev().copied());
    assert_eq!(a, b);
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
