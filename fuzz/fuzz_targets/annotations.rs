//! Annotation parsing, all four schemes (nudge's own, Reloader, Wave,
//! k8s-consul-mutator), on workloads of every built-in kind.
//!
//! Beyond "no panic": parsing is deterministic, one spec per output, specs
//! sorted by output, and no two specs write the same annotation (two outputs of
//! different shapes naming one key must be reported as a clash instead).
#![no_main]

use std::collections::BTreeMap;

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use nudge::__private::annotations;
use nudge::__private::model::Output;

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let scheme = nudge_fuzz::scheme(u)?;
    let workload = nudge_fuzz::workload(u, &scheme.prefix)?;
    let catalog = nudge_fuzz::catalog(u.ratio(3, 4)?);
    let deps = annotations::dependencies(&workload, &scheme, &catalog);
    assert_eq!(
        deps,
        annotations::dependencies(&workload, &scheme, &catalog),
        "not deterministic"
    );
    assert!(
        deps.stamps.windows(2).all(|w| w[0].output < w[1].output),
        "specs not sorted by output, or an output twice: {:?}",
        deps.stamps.iter().map(|s| &s.output).collect::<Vec<_>>()
    );
    // Where each output writes: (on the pod template, on the workload's metadata).
    let mut template: BTreeMap<&str, &Output> = BTreeMap::new();
    let mut metadata: BTreeMap<&str, &Output> = BTreeMap::new();
    for spec in &deps.stamps {
        let (on_template, on_metadata) = match &spec.output {
            Output::PodTemplateAnnotation(_) => (true, false),
            Output::PodTemplateAndWorkloadAnnotation(_) | Output::Adopted(_) => (true, true),
            Output::WorkloadAnnotation(_) | Output::ReloaderSource(_) => (false, true),
            _ => (false, false),
        };
        let key = spec.output.key();
        if on_template && let Some(other) = template.insert(key, &spec.output) {
            panic!(
                "{other:?} and {:?} both write {key} on the pod template",
                spec.output
            );
        }
        if on_metadata && let Some(other) = metadata.insert(key, &spec.output) {
            panic!(
                "{other:?} and {:?} both write {key} on the workload",
                spec.output
            );
        }
    }
    for error in &deps.errors {
        assert!(!error.key().is_empty(), "an error without a key: {error}");
        let _ = (error.to_string(), error.category());
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
