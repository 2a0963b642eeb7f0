//! nudge's own wire formats against golden vectors computed outside the code
//! under test (`scripts/golden_vectors.py`, Python's hashlib/hmac). A change here
//! would re-stamp, and so roll, every workload using the format.

use std::collections::{BTreeMap, BTreeSet};

use nudge::__private::fingerprint::{
    self, DataValue, Fingerprint, FingerprintKey, ObjectData, ObjectKind, Observation,
};
use nudge::__private::model::{
    Combine, Input, KeySelection, Output, Reference, SourceName, StampSpec,
};
use nudge::__private::stamp::{FingerprintStore, desired};
use serde_json::Value;

fn vectors() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/golden-vectors.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("read golden vectors"))
        .expect("golden vectors are JSON")
}

fn key(vectors: &Value) -> FingerprintKey {
    nudge::__private::crate_fns::fingerprint_key(
        vectors["key_utf8"].as_str().unwrap().as_bytes().to_vec(),
    )
    .unwrap()
}

fn object_data(entries: &Value) -> ObjectData {
    let entries = entries.as_array().unwrap().iter().map(|entry| {
        let bytes: Vec<u8> = entry["value"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| u8::try_from(b.as_u64().unwrap()).unwrap())
            .collect();
        let value = match entry["tag"].as_u64().unwrap() {
            0 => DataValue::Text(String::from_utf8(bytes).unwrap()),
            _ => DataValue::Binary(bytes),
        };
        (entry["key"].as_str().unwrap().to_owned(), value)
    });
    ObjectData(entries.collect::<BTreeMap<_, _>>())
}

fn digest(fingerprint: &Fingerprint) -> String {
    fingerprint.as_digest().expect("a digest").into_owned()
}

#[test]
fn object_fingerprints_match_the_golden_vectors() {
    let vectors = vectors();
    let key = key(&vectors);
    for object in vectors["objects"].as_array().unwrap() {
        let kind = match object["kind"].as_str().unwrap() {
            "ConfigMap" => ObjectKind::ConfigMap,
            _ => ObjectKind::Secret,
        };
        let data = object_data(&object["entries"]);
        let fingerprint = fingerprint::native_object(kind, &data, &key);
        assert_eq!(digest(&fingerprint), object["fingerprint"], "{object}");
    }
}

#[test]
fn value_fingerprints_match_the_golden_vectors() {
    let vectors = vectors();
    let key = key(&vectors);
    for value in vectors["values"].as_array().unwrap() {
        let bytes = value["value_utf8"].as_str().unwrap().as_bytes();
        assert_eq!(
            digest(&fingerprint::native_value(bytes)),
            value["fingerprint"]
        );
        assert_eq!(
            digest(&fingerprint::native_value_keyed(bytes, &key)),
            value["keyed"]
        );
    }
}

fn reference(vector: &Value) -> Reference {
    let source = SourceName::new(vector["source"].as_str().unwrap()).unwrap();
    let name = vector["name"].as_str().unwrap();
    let reference = match vector["namespace"].as_str() {
        Some(namespace) => nudge::__private::crate_fns::object(source, namespace, name),
        None => nudge::__private::crate_fns::key(source, name),
    };
    match vector["keys"].as_array() {
        Some(keys) => nudge::__private::crate_fns::with_keys(
            reference,
            KeySelection::Only(
                keys.iter()
                    .map(|k| k.as_str().unwrap().to_owned())
                    .collect::<BTreeSet<_>>(),
            ),
        ),
        None => reference,
    }
}

#[test]
fn canonical_reference_ids_match_the_golden_vectors() {
    for vector in vectors()["references"].as_array().unwrap() {
        assert_eq!(
            nudge::__private::crate_fns::canonical_id(&reference(vector)),
            vector["canonical_id"],
            "{vector}"
        );
    }
}

/// The combined hash as the stamp computes it: a `config-hash` output over the
/// references of the vector, each with its digest (or absent, optional).
#[test]
fn the_combined_config_hash_matches_the_golden_vectors() {
    let vectors = vectors();
    let references: BTreeMap<String, Reference> = vectors["references"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["canonical_id"].as_str().unwrap().to_owned(), reference(v)))
        .collect();
    for combined in vectors["combined"].as_array().unwrap() {
        let mut store = FingerprintStore::new();
        let mut inputs = Vec::new();
        for entry in combined["entries"].as_array().unwrap() {
            let reference = references[entry["id"].as_str().unwrap()].clone();
            let algorithm = nudge::__private::fingerprint::Algorithm::Native;
            let tracked = nudge::__private::crate_fns::tracked(reference, algorithm);
            let observation = match entry["digest"].as_str() {
                Some(digest) => Observation::Present(Fingerprint::digest(digest)),
                None => Observation::Absent,
            };
            store.set(tracked.clone(), observation);
            inputs.push(Input {
                tracked,
                optional: true,
            });
        }
        let inputs_count = inputs.len();
        let output = Output::PodTemplateAnnotation("nudge.dev/config-hash".into());
        let spec = StampSpec {
            output: output.clone(),
            combine: Combine::NativeHash,
            inputs,
            origins: Vec::new(),
        };
        let stamp = desired(&[spec], &store, false);
        if inputs_count == 0 {
            // The hash of nothing is not written (design §2), but stays the
            // format's: an older nudge wrote it, and it is left where it is.
            assert_eq!(stamp.values.get(&output), None);
            let nothing = nudge::__private::fingerprint::combine_native(std::iter::empty());
            assert_eq!(nothing.to_string(), combined["config_hash"], "{combined}");
            continue;
        }
        assert_eq!(stamp.values[&output], combined["config_hash"], "{combined}");
    }
}

/// The fingerprint of a configured Kubernetes-object source
/// (`[sources.kubernetes.<name>]`): selected fields, plain and keyed.
#[test]
fn fields_fingerprints_match_the_golden_vectors() {
    let vectors = vectors();
    let key = key(&vectors);
    for vector in vectors["fields"].as_array().unwrap() {
        let pointers = vector["pointers"].as_array().unwrap();
        let selection = fingerprint::FieldSelection::new(
            pointers.iter().map(|p| p.as_str().unwrap().to_owned()),
        )
        .unwrap();
        let object = &vector["object"];
        assert_eq!(
            digest(&fingerprint::native_fields(object, &selection, None)),
            vector["fingerprint"],
            "{pointers:?}"
        );
        assert_eq!(
            digest(&fingerprint::native_fields(object, &selection, Some(&key))),
            vector["keyed"],
            "{pointers:?}"
        );
    }
}

/// Reloader 2's hash of a `SecretProviderClassPodStatus` (SHA-1 and its
/// SHA-512/256 builds'), its env var name, and the CSI preset's native
/// fingerprint of the same object.
#[test]
fn reloader_secret_provider_class_hashes_match_the_golden_vectors() {
    let vectors = vectors();
    let csi = vectors["reloader_csi"].as_array().unwrap();
    assert!(!csi.is_empty());
    for vector in csi {
        let object = &vector["object"];
        let class = object["status"]["secretProviderClassName"]
            .as_str()
            .unwrap();
        let pairs: Vec<(String, String)> = object["status"]["objects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                let field = |name: &str| o[name].as_str().unwrap().to_owned();
                (field("id"), field("version"))
            })
            .collect();
        let sha1 = fingerprint::reloader_csi(class, &pairs);
        assert_eq!(digest(&sha1), vector["reloader_sha1"], "{class}");
        let sha512 = fingerprint::reloader_csi_sha512_256(class, &pairs);
        assert_eq!(digest(&sha512), vector["reloader_sha512_256"], "{class}");
        assert_eq!(
            fingerprint::reloader_csi_env_var(class),
            vector["env_var"],
            "{class}"
        );
        let native = fingerprint::native_csi_pod_status(object, None);
        assert_eq!(digest(&native), vector["native"], "{class}");
    }
}
