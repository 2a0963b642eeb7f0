//! The admission handler on structured `AdmissionReview`s: workloads of every
//! built-in kind with annotations of every scheme and pod specs referencing
//! ConfigMaps and Secrets, as CREATE or UPDATE (with an old object), with some
//! garbage mixed in.
//!
//! Beyond "no internal error": a patch, when there is one, applies cleanly to the
//! object under review (the kube-apiserver fails the whole request otherwise).
#![no_main]

use std::sync::{Arc, LazyLock};

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use nudge::__private::webhook::Admission;
use nudge_fuzz::{admission, pick};
use serde_json::{Value, json};

/// One handler per prefix (building one per run would dominate the run time).
static HANDLERS: LazyLock<Vec<(Arc<Admission>, &'static str)>> = LazyLock::new(|| {
    nudge_fuzz::PREFIXES
        .iter()
        .flat_map(|p| {
            [
                (admission::handler(p, false), *p),
                (admission::handler(p, true), *p),
            ]
        })
        .collect()
});

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let (handler, prefix) = u.choose(&HANDLERS)?;
    let kinds = nudge_fuzz::kinds();
    let kind = u.choose(&kinds)?;
    let object = nudge_fuzz::workload_json(u, kind, prefix)?;
    let operation = pick(u, &["CREATE", "UPDATE", "UPDATE", "DELETE"])?;
    let old_object = if operation == "UPDATE" || u.ratio(1, 8)? {
        if u.arbitrary()? {
            nudge_fuzz::workload_json(u, kind, prefix)?
        } else {
            object.clone()
        }
    } else {
        Value::Null
    };
    let (group, version) = match kind.api_version().split_once('/') {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (String::new(), kind.api_version()),
    };
    let mut request = json!({
        "uid": "7f0b2a4e-0000-4000-8000-000000000001",
        "kind": {"group": group, "version": version, "kind": kind.as_str()},
        "resource": {"group": group, "version": version, "resource": "things"},
        "requestKind": {"group": group, "version": version, "kind": kind.as_str()},
        "name": object.pointer("/metadata/name").cloned().unwrap_or(json!("")),
        "namespace": object.pointer("/metadata/namespace").cloned().unwrap_or(Value::Null),
        "operation": operation,
        "userInfo": {"username": "fuzz"},
        "object": object,
        "oldObject": old_object,
        "dryRun": false,
    });
    if u.ratio(1, 16)? {
        request["subResource"] = json!(pick(u, &["", "status", "scale"])?);
    }
    if u.ratio(1, 16)? {
        request["kind"]["kind"] = json!(pick(u, &["Pod", "Deployment"])?);
        request["kind"]["group"] = json!(pick(u, &["", "apps", "batch"])?);
    }
    let api_version = pick(
        u,
        &[
            "admission.k8s.io/v1",
            "admission.k8s.io/v1",
            "admission.k8s.io/v1beta1",
        ],
    )?;
    let review = json!({"apiVersion": api_version, "kind": "AdmissionReview", "request": request});
    let body = serde_json::to_vec(&review).expect("JSON");
    let answer = admission::review(handler, &body);
    let Some(patch) = admission::check(&answer, Some("7f0b2a4e-0000-4000-8000-000000000001"))
    else {
        return Ok(());
    };
    let mut patched = review["request"]["object"].clone();
    if let Err(error) = json_patch::patch(&mut patched, &patch) {
        panic!(
            "the patch does not apply: {error}\npatch: {}\nobject: {}",
            serde_json::to_string(&patch).unwrap(),
            review["request"]["object"]
        );
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
