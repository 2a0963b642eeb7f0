//! k8s-consul-mutator.

use super::*;

#[test]
fn mutator_key_yields_md5_checksum_on_template_and_workload() {
    let deps = parse(&mk_annotated(&[
        ("k8s-consul-mutator.io/key-app", "app/config"),
        ("k8s-consul-mutator.io/checksum-app", "md5-00"),
    ]));
    assert!(deps.errors.is_empty());
    let spec = stamp(&deps, "k8s-consul-mutator.io/checksum-app");
    assert_eq!(
        spec.output,
        Output::PodTemplateAndWorkloadAnnotation("k8s-consul-mutator.io/checksum-app".into())
    );
    assert_eq!(spec.combine, Combine::Single);
    assert_eq!(inputs(spec), vec!["consul/app/config (md5)"]);
}

#[test]
fn mutator_skip_disables_every_key() {
    let deps = parse(&mk_annotated(&[
        ("k8s-consul-mutator.io/key-app", "app/config"),
        ("k8s-consul-mutator.io/skip", ""),
    ]));
    assert_eq!(deps, Dependencies::default());
}

#[test]
fn mutator_without_consul_source_is_reported() {
    let workload = mk_annotated(&[("k8s-consul-mutator.io/key-app", "app/config")]);
    let deps = dependencies(
        &workload,
        &AnnotationScheme::default(),
        &mk_catalog_without_consul(),
    );
    assert!(deps.stamps.is_empty());
    assert_eq!(
        categories(&deps),
        vec![("k8s-consul-mutator.io/key-app", "unknown_source")]
    );
}

#[test]
fn mutator_bad_name_or_key_is_reported_and_sibling_works() {
    let deps = parse(&mk_annotated(&[
        ("k8s-consul-mutator.io/key-", "a"),
        ("k8s-consul-mutator.io/key-bad", " "),
        ("k8s-consul-mutator.io/key-ok", "a/b"),
        ("k8s-consul-mutator.io/other", "ignored"),
    ]));
    assert_eq!(
        categories(&deps),
        vec![
            ("k8s-consul-mutator.io/key-", "bad_slot"),
            ("k8s-consul-mutator.io/key-bad", "bad_reference"),
        ]
    );
    stamp(&deps, "k8s-consul-mutator.io/checksum-ok");
}
