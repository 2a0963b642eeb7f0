use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::{Value, json};

use super::*;
use crate::model::WorkloadKind;

const ANNOTATION: &str = "nudge.dev/snapshots";

/// kube-apiserver's rule for object names: a DNS-1123 subdomain.
fn check_object_name(name: &str) -> Result<(), String> {
    let label_ok = |label: &str| {
        let b = label.as_bytes();
        let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        matches!((b.first(), b.last()), (Some(f), Some(l)) if alnum(f) && alnum(l))
            && b.iter().all(|c| alnum(c) || *c == b'-')
    };
    if name.len() <= MAX_NAME_LEN && name.split('.').all(label_ok) {
        Ok(())
    } else {
        Err(format!("{name:?} is not a DNS-1123 subdomain"))
    }
}

fn mk_owner() -> WorkloadId {
    WorkloadId::new(WorkloadKind::deployment(), "ns", "web")
}

fn only(keys: &[&str]) -> KeySelection {
    KeySelection::Only(keys.iter().map(|k| (*k).to_owned()).collect())
}

fn cm(name: &str) -> SnapshotKey {
    SnapshotKey::new(ObjectKind::ConfigMap, name, KeySelection::All)
}

fn secret(name: &str, keys: &[&str]) -> SnapshotKey {
    SnapshotKey::new(ObjectKind::Secret, name, only(keys))
}

fn mk_names() -> SnapshotNames {
    SnapshotNames {
        template: ANNOTATION.into(),
        copy_label: "nudge.dev/snapshot-copy".into(),
        copy_of: "nudge.dev/snapshot-of".into(),
        fingerprint: "nudge.dev/fingerprint".into(),
        bytes: "nudge.dev/snapshot-bytes".into(),
    }
}

fn snapshot(entries: &[(SnapshotKey, &str)]) -> Snapshot {
    let mut snapshot = Snapshot::new();
    for (key, fingerprint) in entries {
        snapshot.insert(key.clone(), *fingerprint);
    }
    snapshot
}

/// A pod template naming `app-config` and `db` in every place discovery
/// reads, and `other` (never snapshotted) in a volume.
fn mk_template(app: &str, db: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": "web"}},
        "spec": {
            "volumes": [
                {"name": "cfg", "configMap": {"name": app}},
                {"name": "creds", "secret": {"secretName": db, "items": [{"key": "password", "path": "p"}]}},
                {"name": "both", "projected": {"sources": [
                    {"configMap": {"name": app}},
                    {"secret": {"name": db, "items": [{"key": "password", "path": "q"}]}},
                    {"serviceAccountToken": {"path": "token"}}
                ]}},
                {"name": "unrelated", "configMap": {"name": "other"}},
                {"name": "scratch", "emptyDir": {}}
            ],
            "initContainers": [{"name": "init", "image": "busybox",
                "envFrom": [{"configMapRef": {"name": app}}],
                "env": [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": db, "key": "password"}}}]}],
            "containers": [{"name": "app", "image": "nginx", "futureField": {"kept": true},
                "envFrom": [{"configMapRef": {"name": app}}, {"secretRef": {"name": db, "optional": true}}],
                "env": [
                    {"name": "PLAIN", "value": "x"},
                    {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": app, "key": "level"}}},
                    {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                ]}]
        }
    })
}

/// `template` with `replacements` applied and `snapshot` as its annotation.
fn applied(template: &Value, replacements: &[Replacement], snapshot: &Snapshot) -> Value {
    let mut template = template.clone();
    for replacement in replacements {
        let mut at = &mut template;
        for token in &replacement.pointer {
            at = match at {
                Value::Array(items) => &mut items[token.parse::<usize>().unwrap()],
                other => &mut other[token.as_str()],
            };
        }
        *at = Value::from(replacement.name.clone());
    }
    template["metadata"]["annotations"] = json!({ANNOTATION: snapshot.to_annotation()});
    template
}

fn typed(template: &Value) -> PodTemplateSpec {
    serde_json::from_value(template.clone()).unwrap()
}

fn read(template: &Value) -> TemplateSnapshot {
    TemplateSnapshot::read(&mk_owner(), &typed(template), ANNOTATION)
}

/// The snapshot the workload of [`mk_template`] wants: `app-config` whole
/// (an `envFrom` takes every key), `db` narrowed to `password` (its
/// `envFrom` is optional, its other uses name the key)… except that the
/// `envFrom` of `db` takes every key too.
fn wanted(app: &str, db: &str) -> Snapshot {
    snapshot(&[
        (cm("app-config"), app),
        (
            SnapshotKey::new(ObjectKind::Secret, "db", KeySelection::All),
            db,
        ),
    ])
}

#[test]
fn a_key_reads_back_from_what_it_writes() {
    for key in [cm("app-config"), secret("db", &["password", "user"])] {
        assert_eq!(key.to_string().parse::<SnapshotKey>().unwrap(), key);
    }
    assert_eq!(
        secret("db", &["user", "password"]).to_string(),
        "secret/db[password,user]"
    );
    for bad in [
        "",
        "configmap",
        "pod/x",
        "configmap/",
        "secret/db[",
        "secret/db[a,,b]",
        "secret/db[]",
    ] {
        assert!(bad.parse::<SnapshotKey>().is_err(), "{bad:?}");
    }
}

#[test]
fn equal_snapshots_are_equal_text_and_read_back() {
    let a = snapshot(&[(cm("b"), "sha256-2"), (cm("a"), "sha256-1")]);
    let b = snapshot(&[(cm("a"), "sha256-1"), (cm("b"), "sha256-2")]);
    assert_eq!(a.to_annotation(), b.to_annotation());
    assert_eq!(
        a.to_annotation(),
        r#"{"configmap/a":"sha256-1","configmap/b":"sha256-2"}"#
    );
    assert_eq!(Snapshot::parse(&a.to_annotation()).unwrap(), a);
    assert_eq!(Snapshot::new().to_annotation(), "{}");
    assert!(Snapshot::parse("[1]").is_err());
    assert!(Snapshot::parse(r#"{"configmap/a": 1}"#).is_err());
    assert!(Snapshot::parse(r#"{"deployment/a": "x"}"#).is_err());
}

#[test]
fn a_copy_name_is_the_source_name_and_a_hash_of_owner_key_and_content() {
    let owner = mk_owner();
    let name = copy_name(&owner, &cm("app-config"), "sha256-aa");
    assert_eq!(name.len(), "app-config-".len() + SUFFIX_LEN);
    assert!(name.starts_with("app-config-"));
    assert_eq!(name, copy_name(&owner, &cm("app-config"), "sha256-aa"));
    let other_owner = WorkloadId::new(WorkloadKind::deployment(), "ns", "api");
    let other_kind = WorkloadId::new(WorkloadKind::daemon_set(), "ns", "web");
    let others = [
        copy_name(&owner, &cm("app-config"), "sha256-bb"),
        copy_name(&other_owner, &cm("app-config"), "sha256-aa"),
        copy_name(&other_kind, &cm("app-config"), "sha256-aa"),
        copy_name(
            &owner,
            &SnapshotKey::new(ObjectKind::ConfigMap, "app-config", only(&["a"])),
            "sha256-aa",
        ),
        copy_name(
            &owner,
            &SnapshotKey::new(ObjectKind::Secret, "app-config", KeySelection::All),
            "sha256-aa",
        ),
    ];
    let distinct: BTreeSet<&String> = others.iter().chain([&name]).collect();
    assert_eq!(distinct.len(), others.len() + 1, "{others:?}");
    // Namespaces do not matter: a copy lives beside its workload.
    let elsewhere = WorkloadId::new(WorkloadKind::deployment(), "other", "web");
    assert_eq!(copy_name(&elsewhere, &cm("app-config"), "sha256-aa"), name);
}

#[test]
fn a_long_source_name_is_cut_to_a_valid_object_name() {
    let owner = mk_owner();
    for source in [
        "a".repeat(253),
        format!("{}.{}", "a".repeat(241), "b".repeat(11)),
        format!("{}-{}", "a".repeat(241), "b".repeat(11)),
        format!("{}.-x", "a".repeat(240)),
    ] {
        assert!(check_object_name(&source).is_ok() || source.contains(".-"));
        let name = copy_name(&owner, &cm(&source), "sha256-aa");
        assert!(name.len() <= MAX_NAME_LEN, "{}", name.len());
        assert_eq!(check_object_name(&name), Ok(()), "{name}");
    }
    // Two long names alike in their first 242 characters still differ.
    let a = copy_name(&owner, &cm(&format!("{}a", "x".repeat(250))), "sha256-aa");
    let b = copy_name(&owner, &cm(&format!("{}b", "x".repeat(250))), "sha256-aa");
    assert_ne!(a, b);
}

fn mk_data(entries: &[(&str, DataValue)]) -> ObjectData {
    ObjectData(
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect(),
    )
}

fn mk_owner_ref() -> Owner {
    Owner {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        name: "web".into(),
        uid: "uid-1".into(),
    }
}

#[test]
fn a_config_map_copy_is_immutable_owned_and_labelled_as_nudges() {
    let owner = mk_owner();
    let data = mk_data(&[
        ("level", DataValue::Text("debug".into())),
        ("blob", DataValue::Binary(vec![0, 1, 2])),
    ]);
    let plan = CopyPlan::new(&owner, cm("app-config"), "sha256-aa");
    let copy = copy_object(&plan, "ns", &mk_owner_ref(), &data, None, &mk_names());
    assert_eq!(copy["kind"], "ConfigMap");
    assert_eq!(copy["immutable"], true);
    assert_eq!(copy["metadata"]["name"], plan.name.as_str());
    assert_eq!(copy["metadata"]["namespace"], "ns");
    assert_eq!(copy["data"], json!({"level": "debug"}));
    assert_eq!(copy["binaryData"], json!({"blob": "AAEC"}));
    assert_eq!(
        copy["metadata"]["labels"],
        json!({"app.kubernetes.io/managed-by": "nudge", "nudge.dev/snapshot-copy": "true"})
    );
    assert_eq!(
        copy["metadata"]["annotations"],
        json!({"nudge.dev/snapshot-of": "configmap/app-config",
               "nudge.dev/fingerprint": "sha256-aa",
               "nudge.dev/snapshot-bytes": "8"})
    );
    assert_eq!(
        copy["metadata"]["ownerReferences"],
        json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "uid-1"}])
    );
    assert!(mk_owner_ref().owns(&copy));
    let stranger = Owner {
        uid: "uid-2".into(),
        ..mk_owner_ref()
    };
    assert!(!stranger.owns(&copy));
    // Decodes as the typed object the API serves.
    let typed: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(copy).unwrap();
    assert_eq!(ObjectData::from_config_map(&typed), data);
}

#[test]
fn a_secret_copy_keeps_its_type_only_when_it_holds_every_key() {
    let owner = mk_owner();
    let data = mk_data(&[("tls.crt", DataValue::Binary(b"c".to_vec()))]);
    let whole = CopyPlan::new(
        &owner,
        SnapshotKey::new(ObjectKind::Secret, "tls", KeySelection::All),
        "hmac-sha256-aa",
    );
    let narrowed = CopyPlan::new(&owner, secret("tls", &["tls.crt"]), "hmac-sha256-aa");
    let names = mk_names();
    let kind_of = |plan: &CopyPlan, kind: Option<&str>| {
        copy_object(plan, "ns", &mk_owner_ref(), &data, kind, &names)["type"].clone()
    };
    assert_eq!(
        kind_of(&whole, Some("kubernetes.io/tls")),
        "kubernetes.io/tls"
    );
    assert_eq!(kind_of(&narrowed, Some("kubernetes.io/tls")), "Opaque");
    assert_eq!(kind_of(&whole, None), "Opaque");
    assert_eq!(
        kind_of(&whole, Some("kubernetes.io/service-account-token")),
        "Opaque"
    );
    let copy = copy_object(&whole, "ns", &mk_owner_ref(), &data, None, &names);
    assert_eq!(copy["data"], json!({"tls.crt": "Yw=="}));
    assert!(copy.get("binaryData").is_none());
    let typed: k8s_openapi::api::core::v1::Secret = serde_json::from_value(copy).unwrap();
    assert_eq!(ObjectData::from_secret(&typed), data);
}

#[test]
fn pointing_a_template_at_copies_rewrites_every_reference_and_reads_back() {
    let owner = mk_owner();
    let live = mk_template("app-config", "db");
    let to = wanted("sha256-aa", "hmac-sha256-bb");
    let replacements = rewrite(&live, &owner, &Snapshot::new(), &to);
    let app_copy = copy_name(&owner, &cm("app-config"), "sha256-aa");
    let db_key = SnapshotKey::new(ObjectKind::Secret, "db", KeySelection::All);
    let db_copy = copy_name(&owner, &db_key, "hmac-sha256-bb");
    // 4 ConfigMap references (volume, projected, 2 envFrom… and a key
    // reference: 5) and 4 Secret references.
    assert_eq!(replacements.len(), 9, "{replacements:#?}");
    let copied = applied(&live, &replacements, &to);
    assert_eq!(
        copied["spec"]["volumes"][0]["configMap"]["name"],
        app_copy.as_str()
    );
    assert_eq!(
        copied["spec"]["volumes"][1]["secret"]["secretName"],
        db_copy.as_str()
    );
    assert_eq!(
        copied["spec"]["volumes"][2]["projected"]["sources"][1]["secret"]["name"],
        db_copy.as_str()
    );
    assert_eq!(copied["spec"]["volumes"][3]["configMap"]["name"], "other");
    assert_eq!(
        copied["spec"]["initContainers"][0]["env"][0]["valueFrom"]["secretKeyRef"]["name"],
        db_copy.as_str()
    );
    assert_eq!(
        copied["spec"]["containers"][0]["env"][1]["valueFrom"]["configMapKeyRef"]["name"],
        app_copy.as_str()
    );
    assert_eq!(
        copied["spec"]["containers"][0]["futureField"],
        json!({"kept": true})
    );
    let view = read(&copied);
    assert_eq!(view.current(), &to);
    assert!(view.fits(&to));
    // Discovery sees the objects copied, not the copies.
    let sources: Vec<(ObjectKind, &str)> = view
        .sources()
        .iter()
        .map(|d| (d.kind, d.name.as_str()))
        .collect();
    assert_eq!(
        sources,
        [
            (ObjectKind::ConfigMap, "app-config"),
            (ObjectKind::ConfigMap, "other"),
            (ObjectKind::Secret, "db")
        ]
    );
    assert_eq!(
        view.source_of(ObjectKind::ConfigMap, &app_copy),
        Some(&cm("app-config"))
    );
    // Already there: nothing to replace.
    assert!(rewrite(&copied, &owner, view.claimed(), &to).is_empty());
}

#[test]
fn a_template_moves_from_one_revisions_copies_to_anothers_and_back_to_the_live_objects() {
    let owner = mk_owner();
    let live = mk_template("app-config", "db");
    let first = wanted("sha256-aa", "hmac-sha256-bb");
    let second = wanted("sha256-cc", "hmac-sha256-bb");
    let at_first = applied(
        &live,
        &rewrite(&live, &owner, &Snapshot::new(), &first),
        &first,
    );
    let moves = rewrite(&at_first, &owner, &first, &second);
    // Only the ConfigMap's five references change.
    assert_eq!(moves.len(), 5, "{moves:#?}");
    let at_second = applied(&at_first, &moves, &second);
    assert_eq!(read(&at_second).current(), &second);
    let back = rewrite(&at_second, &owner, &second, &Snapshot::new());
    assert_eq!(back.len(), 9);
    let at_live = applied(&at_second, &back, &Snapshot::new());
    assert_eq!(at_live["spec"], live["spec"]);
    assert!(read(&at_live).current().is_empty());
}

#[test]
fn a_template_uses_only_the_copies_it_references_with_their_keys() {
    let owner = mk_owner();
    let live = mk_template("app-config", "db");
    let to = wanted("sha256-aa", "hmac-sha256-bb");
    let copied = applied(&live, &rewrite(&live, &owner, &Snapshot::new(), &to), &to);

    // A re-apply of the original manifest points one reference back at the
    // live ConfigMap: that copy no longer counts, the Secret's still does.
    let mut edited = copied.clone();
    edited["spec"]["volumes"][0]["configMap"]["name"] = json!("app-config");
    let view = read(&edited);
    assert_eq!(view.claimed(), &to);
    assert_eq!(
        view.current(),
        &snapshot(&[(
            SnapshotKey::new(ObjectKind::Secret, "db", KeySelection::All),
            "hmac-sha256-bb"
        )])
    );
    assert!(view.fits(&to), "app-config is still used whole");

    // A key reference to the Secret no longer narrows it: its copy is whole
    // already; narrow the Secret instead and its whole copy stops fitting.
    let narrowed = snapshot(&[(secret("db", &["password"]), "hmac-sha256-bb")]);
    assert!(!view.fits(&narrowed));

    // An annotation a person broke counts as no snapshot at all.
    let mut broken = copied.clone();
    broken["metadata"]["annotations"][ANNOTATION] = json!("not json");
    let view = read(&broken);
    assert!(view.current().is_empty());
    assert!(view.error().is_some());

    // A claimed copy the template does not reference is not used.
    let mut extra = to.clone();
    extra.insert(cm("gone"), "sha256-ff");
    let claims_more = applied(&copied, &[], &extra);
    assert_eq!(read(&claims_more).current(), &to);
}

#[test]
fn every_reference_discovery_reads_is_rewritten() {
    // Whatever discovery finds in a template, the rewrite moves: after it,
    // discovery finds copies only (mapped back: the same objects).
    let owner = mk_owner();
    let live = mk_template("app-config", "db");
    let found = crate::discovery::native(typed(&live).spec.as_ref().unwrap());
    let mut to = Snapshot::new();
    for d in &found {
        to.insert(
            SnapshotKey::new(d.kind, d.name.as_str(), d.keys.clone()),
            "sha256-11",
        );
    }
    let copied = applied(&live, &rewrite(&live, &owner, &Snapshot::new(), &to), &to);
    let raw = crate::discovery::native(typed(&copied).spec.as_ref().unwrap());
    for d in &raw {
        let key = SnapshotKey::new(d.kind, "", d.keys.clone());
        let copied_one = to.entries().any(|(k, f)| {
            k.kind == d.kind && copy_name(&owner, k, f) == d.name && k.keys == key.keys
        });
        assert!(copied_one, "{} {} left live", d.kind.as_str(), d.name);
    }
    assert_eq!(read(&copied).current(), &to);
}

#[test]
fn a_reapplied_manifest_is_pointed_back_at_the_copies_the_stored_template_used() {
    let owner = mk_owner();
    let live = mk_template("app-config", "db");
    let to = wanted("sha256-aa", "hmac-sha256-bb");
    let stored = applied(&live, &rewrite(&live, &owner, &Snapshot::new(), &to), &to);
    let stored = read(&stored);
    // The original manifest again: live references, no annotation.
    let reapplied = read(&live);
    assert_eq!(admitted(&reapplied, Some(&stored), true), to);
    let replacements = rewrite(&live, &owner, reapplied.claimed(), &to);
    assert_eq!(read(&applied(&live, &replacements, &to)).current(), &to);
    // One reference now takes a single key of the Secret: its whole copy
    // still fits the merged use; a new object stays live.
    let mut edited = live.clone();
    edited["spec"]["volumes"][3]["configMap"]["name"] = json!("brand-new");
    let edited = read(&edited);
    assert_eq!(admitted(&edited, Some(&stored), true), to);
    // A template that uses fewer keys of an object than its copy holds is
    // left live for that object (the controller copies the new keys).
    let mut narrowed = live.clone();
    let level = json!([{"key": "level", "path": "level"}]);
    narrowed["spec"]["volumes"][0]["configMap"]["items"] = level.clone();
    narrowed["spec"]["volumes"][2]["projected"]["sources"][0]["configMap"]["items"] = level;
    narrowed["spec"]["containers"][0]["envFrom"] = json!([]);
    narrowed["spec"]["initContainers"][0]["envFrom"] = json!([]);
    let narrowed = read(&narrowed);
    let kept = admitted(&narrowed, Some(&stored), true);
    assert!(kept.get(&cm("app-config")).is_none(), "{kept:?}");
    // A workload that no longer takes snapshots keeps what it is sent; a
    // CREATE has nothing stored.
    assert!(admitted(&reapplied, Some(&stored), false).is_empty());
    assert!(admitted(&reapplied, None, true).is_empty());
    // An undo (copies of another revision) is left as it comes.
    let other = wanted("sha256-00", "hmac-sha256-bb");
    let undone = applied(
        &live,
        &rewrite(&live, &owner, &Snapshot::new(), &other),
        &other,
    );
    assert_eq!(admitted(&read(&undone), Some(&stored), true), other);
}
