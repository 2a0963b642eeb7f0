//! Pod-spec discovery, nudge's and Wave's rules.
//!
//! Beyond "no panic": results are sorted by (kind, name), one per object, never
//! with an empty name, and the objects Wave's rules find are the ones nudge's
//! find, minus those only initContainers' env refers to.
#![no_main]

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use nudge::__private::discovery::{self, Discovered};

fn check(found: &[Discovered]) {
    for pair in found.windows(2) {
        assert!(
            (pair[0].kind, &pair[0].name) < (pair[1].kind, &pair[1].name),
            "not sorted or not merged: {found:?}"
        );
    }
    for object in found {
        assert!(!object.name.is_empty(), "an empty name: {found:?}");
        assert!(!object.origins.is_empty(), "found nowhere: {object:?}");
    }
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let spec = nudge_fuzz::pod_spec(u)?;
    let native = discovery::native(&spec);
    let wave = discovery::wave(&spec);
    check(&native);
    check(&wave);
    // Wave reads a subset of the places nudge reads (no initContainers' env).
    for object in &wave {
        assert!(
            native
                .iter()
                .any(|n| n.kind == object.kind && n.name == object.name),
            "Wave finds {object:?}, nudge does not: {native:?}"
        );
    }
    assert_eq!(native, discovery::native(&spec), "not deterministic");
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
