//! Across schemes: prefixes, ordering, robustness, `ignore` on sources, names.

use super::*;

/// Found by the `annotations` fuzz target: a CronJob's explicit checksum,
/// adopted after the specs were sorted, came before the k8s-consul-mutator
/// checksum it sorts after.
#[test]
fn adopted_outputs_are_sorted_with_the_others() {
    let mut cron = mk_annotated(&[
        ("nudge.dev/consul-a_b", "app/config"),
        ("k8s-consul-mutator.io/key-a", "app/other"),
    ]);
    let template = TemplatePath::parse("spec.jobTemplate.spec.template").unwrap();
    let kind = WorkloadKind::new("batch", "v1", "CronJob", template).adopting_first_stamp();
    cron.id = WorkloadId::new(kind, NS, "nightly");
    let deps = parse(&cron);
    assert!(deps.errors.is_empty(), "{:?}", deps.errors);
    let outputs: Vec<_> = deps.stamps.iter().map(|s| s.output.clone()).collect();
    assert_eq!(
        outputs,
        vec![
            Output::PodTemplateAndWorkloadAnnotation("k8s-consul-mutator.io/checksum-a".to_owned()),
            Output::Adopted("nudge.dev/checksum-a_b".to_owned()),
        ]
    );
}

/// With k8s-consul-mutator's prefix as the native one, an explicit native
/// reference and a mutator key write the same pod-template annotation through
/// outputs of two shapes: a clash, reported on both, neither used.
#[test]
fn outputs_of_two_shapes_on_one_annotation_are_a_clash() {
    let scheme = AnnotationScheme::new("k8s-consul-mutator.io");
    let workload = mk_annotated(&[
        ("k8s-consul-mutator.io/consul-a", "app/config"),
        ("k8s-consul-mutator.io/key-a", "app/other"),
    ]);
    let deps = dependencies(&workload, &scheme, &mk_catalog());
    assert!(deps.stamps.is_empty(), "{:?}", deps.stamps);
    let clashes: Vec<_> = categories(&deps)
        .into_iter()
        .filter(|(_, category)| *category == "duplicate_slot")
        .collect();
    assert_eq!(
        clashes,
        vec![
            ("k8s-consul-mutator.io/consul-a", "duplicate_slot"),
            ("k8s-consul-mutator.io/key-a", "duplicate_slot"),
        ]
    );
}

#[test]
fn custom_prefix_replaces_nudge_dev() {
    let scheme = AnnotationScheme::new("example.com");
    let workload = mk_annotated(&[("example.com/consul-config", "a"), ("nudge.dev/bogus", "x")]);
    let deps = dependencies(&workload, &scheme, &mk_catalog());
    assert!(deps.errors.is_empty());
    stamp(&deps, "example.com/checksum-config");
    assert_eq!(scheme.config_hash(), "example.com/config-hash");
    assert_eq!(scheme.last_updated(), "example.com/last-updated");
}

#[test]
fn stamps_are_sorted_by_output() {
    let deps = parse(&mk_annotated(&[
        ("nudge.dev/consul-z", "z"),
        ("nudge.dev/consul-a", "a"),
        ("k8s-consul-mutator.io/key-m", "m"),
        ("nudge.dev/auto", "true"),
    ]));
    let outputs: Vec<_> = deps.stamps.iter().map(|s| s.output.clone()).collect();
    let mut sorted = outputs.clone();
    sorted.sort();
    assert_eq!(outputs, sorted);
    assert_eq!(outputs.len(), 4);
}

#[test]
fn hostile_input_produces_errors_not_panics() {
    let huge = "x".repeat(1 << 20);
    let unicode_key = "nudge.dev/ünïcödé-slöt";
    let deps = parse(&mk_annotated(&[
        ("nudge.dev/-", ""),
        ("nudge.dev/consul-", "a"),
        ("nudge.dev/-slot", "a"),
        ("nudge.dev/debounce", huge.as_str()),
        ("nudge.dev/exclude", huge.as_str()),
        ("nudge.dev/configmap-big", huge.as_str()),
        (unicode_key, "ü"),
        ("nudge.dev/consul-ok", "a/b"),
    ]));
    assert_eq!(deps.errors.len(), 7, "{:?}", categories(&deps));
    assert!(deps.errors.iter().all(|e| e.to_string().len() < 500));
    stamp(&deps, "nudge.dev/checksum-ok");
}

#[test]
fn errors_render_the_annotation_key() {
    let deps = parse(&mk_annotated(&[("nudge.dev/consul-bad_", "x")]));
    assert!(deps.errors[0].to_string().contains("nudge.dev/consul-bad_"));
}

#[test]
fn template_without_spec_or_metadata_is_fine() {
    let workload = Workload {
        id: WorkloadId::new(WorkloadKind::stateful_set(), NS, "db"),
        rollout: crate::model::Rollout::Unknown,
        ordered_pods: false,
        resource_version: None,
        uid: None,
        controller: None,
        annotations: mk_map(&[
            ("nudge.dev/auto", "true"),
            ("wave.pusher.com/update-on-config-change", "true"),
        ]),
        template: PodTemplateSpec::default(),
    };
    let deps = parse(&workload);
    assert_eq!(deps.stamps.len(), 2);
    assert!(deps.stamps.iter().all(|s| s.inputs.is_empty()));
}

// --- ignore on sources ---

#[test]
fn sources_are_ignored_by_native_or_reloader_annotation() {
    let scheme = AnnotationScheme::default();
    assert!(is_ignored(
        &mk_map(&[("nudge.dev/ignore", "true")]),
        &scheme
    ));
    assert!(is_ignored(
        &mk_map(&[("reloader.stakater.com/ignore", "true")]),
        &scheme
    ));
    assert!(!is_ignored(
        &mk_map(&[("nudge.dev/ignore", "false")]),
        &scheme
    ));
    assert!(!is_ignored(
        &mk_map(&[("nudge.dev/ignore", "yes")]),
        &scheme
    ));
    assert!(!is_ignored(&BTreeMap::new(), &scheme));
    let custom = AnnotationScheme::new("example.com");
    assert!(is_ignored(
        &mk_map(&[("example.com/ignore", "true")]),
        &custom
    ));
    assert!(!is_ignored(
        &mk_map(&[("nudge.dev/ignore", "true")]),
        &custom
    ));
}

#[test]
fn written_names_come_from_one_place() {
    let slot = Slot::new("db", MAX_SLOT_LEN).expect("valid slot");
    assert_eq!(
        AnnotationScheme::default().checksum(&slot),
        "nudge.dev/checksum-db"
    );
    assert_eq!(mutator_checksum(&slot), "k8s-consul-mutator.io/checksum-db");
}

#[test]
fn every_schemes_opt_out_is_named_and_none_without_one() {
    let scheme = AnnotationScheme::default();
    let cases = [
        ("nudge.dev/auto", "false", "nudge.dev/auto: \"false\""),
        (
            "reloader.stakater.com/auto",
            "false",
            "reloader.stakater.com/auto: \"false\"",
        ),
        (
            "wave.pusher.com/update-on-config-change",
            "false",
            "wave.pusher.com/update-on-config-change: \"false\"",
        ),
        (
            "k8s-consul-mutator.io/skip",
            "yes",
            "k8s-consul-mutator.io/skip: \"yes\"",
        ),
    ];
    for (key, value, said) in cases {
        let workload = mk_annotated(&[(key, value)]);
        assert_eq!(opted_out_by(&workload, &scheme).as_deref(), Some(said));
    }
    let workload = mk_annotated(&[("nudge.dev/auto", "true")]);
    assert_eq!(opted_out_by(&workload, &scheme), None);
}
