//! The native scheme: explicit references, settings, `auto`.

use super::*;
use crate::model::MAX_ANNOTATION_NAME_LEN;

// --- native explicit references ---

#[test]
fn explicit_consul_reference_yields_single_native_checksum() {
    let deps = parse(&mk_annotated(&[("nudge.dev/consul-config", "app/config")]));
    assert!(deps.errors.is_empty(), "{:?}", deps.errors);
    let reference = Reference::key(SourceName::consul(), "app/config");
    assert_eq!(
        deps.stamps,
        vec![StampSpec {
            output: Output::PodTemplateAnnotation("nudge.dev/checksum-config".into()),
            combine: Combine::Single,
            inputs: vec![Input {
                tracked: Tracked::new(reference.clone(), Algorithm::Native),
                optional: false,
            }],
            origins: vec![(
                reference,
                Origin::Annotation("nudge.dev/consul-config".into())
            )],
        }]
    );
}

#[test]
fn explicit_namespaced_reference_gets_workload_namespace() {
    let deps = parse(&mk_annotated(&[("nudge.dev/secret-db", "db-credentials")]));
    let spec = stamp(&deps, "nudge.dev/checksum-db");
    assert_eq!(
        spec.inputs[0].tracked.reference,
        Reference::object(SourceName::secret(), NS, "db-credentials")
    );
}

#[test]
fn slot_may_contain_dashes_after_the_source() {
    let deps = parse(&mk_annotated(&[(
        "nudge.dev/configmap-feature-flags",
        "flags",
    )]));
    assert!(deps.errors.is_empty());
    stamp(&deps, "nudge.dev/checksum-feature-flags");
}

#[test]
fn template_annotation_is_used_when_metadata_lacks_it() {
    let workload = mk_workload(
        &[],
        &[("nudge.dev/consul-config", "app/config")],
        PodSpec::default(),
    );
    let deps = parse(&workload);
    let spec = stamp(&deps, "nudge.dev/checksum-config");
    assert_eq!(spec.inputs[0].tracked.reference.name, "app/config");
}

#[test]
fn workload_metadata_wins_over_template_on_same_key() {
    let workload = mk_workload(
        &[("nudge.dev/consul-config", "from/metadata")],
        &[
            ("nudge.dev/consul-config", "from/template"),
            ("nudge.dev/debounce", "1s"),
        ],
        PodSpec::default(),
    );
    let deps = parse(&workload);
    let spec = stamp(&deps, "nudge.dev/checksum-config");
    assert_eq!(spec.inputs.len(), 1);
    assert_eq!(spec.inputs[0].tracked.reference.name, "from/metadata");
    assert_eq!(deps.debounce, Some(Duration::from_secs(1)));
}

#[test]
fn bad_slot_is_reported_and_valid_sibling_still_works() {
    let deps = parse(&mk_annotated(&[
        ("nudge.dev/consul-bad_", "a/b"),
        ("nudge.dev/consul-good", "a/c"),
    ]));
    assert_eq!(
        categories(&deps),
        vec![("nudge.dev/consul-bad_", "bad_slot")]
    );
    assert_eq!(deps.stamps.len(), 1);
    stamp(&deps, "nudge.dev/checksum-good");
}

#[test]
fn slot_longer_than_checksum_name_allows_is_reported() {
    let fits = format!("nudge.dev/consul-{}", "s".repeat(MAX_SLOT_LEN));
    let too_long = format!("nudge.dev/c-{}", "s".repeat(MAX_SLOT_LEN + 1));
    let mut catalog = mk_catalog();
    catalog.insert(
        SourceName::new("c").expect("valid"),
        Scope::External,
        Arc::new(key_path),
    );
    let workload = mk_annotated(&[(fits.as_str(), "a"), (too_long.as_str(), "b")]);
    let deps = dependencies(&workload, &AnnotationScheme::default(), &catalog);
    assert_eq!(categories(&deps), vec![(too_long.as_str(), "bad_slot")]);
    let written = format!("nudge.dev/checksum-{}", "s".repeat(MAX_SLOT_LEN));
    assert_eq!(written.len() - "nudge.dev/".len(), MAX_ANNOTATION_NAME_LEN);
    stamp(&deps, &written);
}

#[test]
fn unknown_source_is_reported_and_valid_sibling_still_works() {
    let deps = parse(&mk_annotated(&[
        ("nudge.dev/vault-db", "x"),
        ("nudge.dev/consul.eu-db", "x"),
        ("nudge.dev/Consul-db", "x"),
        ("nudge.dev/consul-ok", "a/b"),
    ]));
    assert_eq!(
        categories(&deps),
        vec![
            ("nudge.dev/Consul-db", "unknown_source"),
            ("nudge.dev/consul.eu-db", "unknown_source"),
            ("nudge.dev/vault-db", "unknown_source"),
        ]
    );
    stamp(&deps, "nudge.dev/checksum-ok");
}

#[test]
fn second_consul_cluster_is_a_source_when_configured() {
    let mut catalog = mk_catalog();
    catalog.insert(
        SourceName::new("consul.eu").expect("valid"),
        Scope::External,
        Arc::new(key_path),
    );
    let workload = mk_annotated(&[("nudge.dev/consul.eu-db", "db/url")]);
    let deps = dependencies(&workload, &AnnotationScheme::default(), &catalog);
    let spec = stamp(&deps, "nudge.dev/checksum-db");
    assert_eq!(
        spec.inputs[0].tracked.reference.source.as_str(),
        "consul.eu"
    );
}

#[test]
fn invalid_references_are_reported_per_scope() {
    let deps = parse(&mk_annotated(&[
        ("nudge.dev/configmap-upper", "Flags"),
        ("nudge.dev/configmap-slash", "a/b"),
        ("nudge.dev/configmap-empty", ""),
        ("nudge.dev/consul-lead", "/app/config"),
        ("nudge.dev/consul-space", "app config"),
        ("nudge.dev/consul-ctrl", "app\u{7}"),
        ("nudge.dev/consul-none", ""),
        ("nudge.dev/consul-unicode", "app/größe"),
        ("nudge.dev/secret-dotted", "db.creds-1"),
    ]));
    let bad: Vec<_> = categories(&deps);
    assert_eq!(bad.len(), 7, "{bad:?}");
    assert!(bad.iter().all(|(_, c)| *c == "bad_reference"));
    stamp(&deps, "nudge.dev/checksum-unicode");
    stamp(&deps, "nudge.dev/checksum-dotted");
}

/// An HTTP-like custom source: its references are absolute URLs or absolute
/// paths, which Consul's rules would refuse (a leading '/').
fn url_or_path(reference: &str) -> Result<(), String> {
    if reference.starts_with("https://") || reference.starts_with('/') {
        Ok(())
    } else {
        Err("expected an https:// URL or an absolute path".to_owned())
    }
}

#[test]
fn custom_external_source_references_follow_the_sources_own_rule() {
    let catalog = mk_catalog().with(
        SourceName::new("http").expect("valid"),
        Scope::External,
        url_or_path,
    );
    let workload = mk_annotated(&[
        ("nudge.dev/http-motd", "https://config.example.com/motd.txt"),
        ("nudge.dev/http-root", "/etc/motd"),
        ("nudge.dev/http-bare", "config.example.com/motd.txt"),
        ("nudge.dev/consul-lead", "/etc/motd"),
    ]);
    let deps = dependencies(&workload, &AnnotationScheme::default(), &catalog);
    assert_eq!(
        categories(&deps),
        vec![
            ("nudge.dev/consul-lead", "bad_reference"),
            ("nudge.dev/http-bare", "bad_reference"),
        ]
    );
    // The reason is the source's own message.
    let bare = deps
        .errors
        .iter()
        .find(|e| e.key() == "nudge.dev/http-bare")
        .expect("reported");
    assert_eq!(
        bare.to_string(),
        "annotation nudge.dev/http-bare: invalid reference \"config.example.com/motd.txt\": expected an https:// URL or an absolute path"
    );
    // A leading '/' is fine for a source whose rule allows it: Consul's rules are
    // Consul's.
    let root = stamp(&deps, "nudge.dev/checksum-root");
    assert_eq!(
        root.inputs[0].tracked.reference,
        Reference::key(SourceName::new("http").expect("valid"), "/etc/motd")
    );
    stamp(&deps, "nudge.dev/checksum-motd");
}

#[test]
fn custom_source_with_the_default_rule_takes_any_printable_reference() {
    let catalog = mk_catalog().with(
        SourceName::new("vault").expect("valid"),
        Scope::External,
        crate::model::default_reference_check,
    );
    let workload = mk_annotated(&[
        ("nudge.dev/vault-lead", "/secret/data/app"),
        ("nudge.dev/vault-space", "kv/my app"),
        ("nudge.dev/vault-empty", ""),
        ("nudge.dev/vault-newline", "kv/app\nmore"),
    ]);
    let deps = dependencies(&workload, &AnnotationScheme::default(), &catalog);
    assert_eq!(
        categories(&deps),
        vec![
            ("nudge.dev/vault-empty", "bad_reference"),
            ("nudge.dev/vault-newline", "bad_reference"),
        ]
    );
    stamp(&deps, "nudge.dev/checksum-lead");
    stamp(&deps, "nudge.dev/checksum-space");
}

#[test]
fn namespaced_custom_source_needs_an_object_name_and_its_own_rule() {
    // Its own rule accepts anything; the scope still asks for an object name.
    let catalog = mk_catalog()
        .with(
            SourceName::new("lax").expect("valid"),
            Scope::Namespaced,
            |_: &str| Ok(()),
        )
        .with(
            SourceName::new("strict").expect("valid"),
            Scope::Namespaced,
            |r: &str| {
                r.starts_with("app-")
                    .then_some(())
                    .ok_or_else(|| "must start with app-".to_owned())
            },
        );
    let workload = mk_annotated(&[
        ("nudge.dev/lax-slash", "a/b"),
        ("nudge.dev/lax-ok", "flags"),
        ("nudge.dev/strict-other", "flags"),
        ("nudge.dev/strict-good", "app-flags"),
    ]);
    let deps = dependencies(&workload, &AnnotationScheme::default(), &catalog);
    assert_eq!(
        categories(&deps),
        vec![
            ("nudge.dev/lax-slash", "bad_reference"),
            ("nudge.dev/strict-other", "bad_reference"),
        ]
    );
    let ok = stamp(&deps, "nudge.dev/checksum-ok");
    assert_eq!(
        ok.inputs[0].tracked.reference.namespace.as_deref(),
        Some(NS)
    );
    stamp(&deps, "nudge.dev/checksum-good");
}

#[test]
fn same_slot_on_two_sources_errors_on_both_and_uses_neither() {
    let deps = parse(&mk_annotated(&[
        ("nudge.dev/consul-db", "db/url"),
        ("nudge.dev/secret-db", "db"),
        ("nudge.dev/configmap-other", "other"),
    ]));
    assert_eq!(
        categories(&deps),
        vec![
            ("nudge.dev/consul-db", "duplicate_slot"),
            ("nudge.dev/secret-db", "duplicate_slot"),
        ]
    );
    assert_eq!(deps.stamps.len(), 1);
    stamp(&deps, "nudge.dev/checksum-other");
}

// --- native settings ---

#[test]
fn durations_parse_and_bad_duration_is_reported_with_sibling_intact() {
    let deps = parse(&mk_annotated(&[
        ("nudge.dev/debounce", "2m 30s"),
        ("nudge.dev/min-interval", "soon"),
        ("nudge.dev/consul-config", "app/config"),
    ]));
    assert_eq!(deps.debounce, Some(Duration::from_secs(150)));
    assert_eq!(deps.min_interval, None);
    assert_eq!(
        categories(&deps),
        vec![("nudge.dev/min-interval", "bad_duration")]
    );
    stamp(&deps, "nudge.dev/checksum-config");

    let deps = parse(&mk_annotated(&[("nudge.dev/min-interval", "45s")]));
    assert_eq!(deps.min_interval, Some(Duration::from_secs(45)));
}

#[test]
fn over_long_name_is_reported_and_sibling_still_works() {
    let long = format!("nudge.dev/consul-{}", "x".repeat(60));
    let deps = parse(&mk_annotated(&[
        (long.as_str(), "a"),
        ("nudge.dev/consul-ok", "b"),
    ]));
    assert_eq!(categories(&deps), vec![(long.as_str(), "name_too_long")]);
    stamp(&deps, "nudge.dev/checksum-ok");
}

#[test]
fn names_without_a_dash_are_unknown_annotations() {
    let deps = parse(&mk_annotated(&[
        ("nudge.dev/autos", "true"),
        ("nudge.dev/checksum", "x"),
        ("nudge.dev/", "x"),
        ("nudge.dev/consul-ok", "b"),
    ]));
    assert_eq!(
        categories(&deps),
        vec![
            ("nudge.dev/", "unknown_annotation"),
            ("nudge.dev/autos", "unknown_annotation"),
            ("nudge.dev/checksum", "unknown_annotation"),
        ]
    );
    stamp(&deps, "nudge.dev/checksum-ok");
}

#[test]
fn names_nudge_writes_never_produce_errors_or_references() {
    let written = [
        ("nudge.dev/checksum-x", "sha256-00"),
        ("nudge.dev/checksum-db_v2.x", "hmac-sha256-00"),
        ("nudge.dev/config-hash", "sha256-11"),
        ("nudge.dev/last-updated", "2024-01-01T00:00:00Z"),
        ("nudge.dev/ignore", "true"),
        ("k8s-consul-mutator.io/checksum-x", "md5-22"),
        ("k8s-consul-mutator.io/last-updated", "2024-01-01T00:00:00Z"),
        ("wave.pusher.com/config-hash", "33"),
    ];
    let deps = parse(&mk_workload(&written, &written, PodSpec::default()));
    assert_eq!(deps, Dependencies::default());
}

#[test]
fn stamped_workload_rereads_to_the_same_specs() {
    let requested = [
        ("nudge.dev/consul-config", "app/config"),
        ("nudge.dev/auto", "true"),
    ];
    let before = parse(&mk_annotated(&requested));
    let stamped = mk_workload(
        &[
            requested[0],
            requested[1],
            ("nudge.dev/last-updated", "2024-01-01T00:00:00Z"),
        ],
        &[
            ("nudge.dev/checksum-config", "sha256-ab"),
            ("nudge.dev/config-hash", "sha256-cd"),
        ],
        PodSpec::default(),
    );
    assert_eq!(parse(&stamped), before);
    assert!(before.errors.is_empty());
}

#[test]
fn ignore_on_a_workload_is_skipped_silently() {
    let deps = parse(&mk_annotated(&[("nudge.dev/ignore", "whatever")]));
    assert_eq!(deps, Dependencies::default());
}

// --- native auto ---

#[test]
fn auto_tracks_every_discovered_object_in_config_hash() {
    let workload = mk_workload(&[("nudge.dev/auto", "true")], &[], mk_auto_pod());
    let deps = parse(&workload);
    assert!(deps.errors.is_empty());
    let spec = stamp(&deps, "nudge.dev/config-hash");
    assert_eq!(spec.combine, Combine::NativeHash);
    assert_eq!(
        inputs(spec),
        vec![
            "configmap/shop/app[a.yaml] (native)",
            "configmap/shop/flags[mode] (native)",
            "secret/shop/bootstrap (native)",
            "secret/shop/db (native)",
            "secret/shop/tls (native) optional",
        ]
    );
    let bootstrap_origin = spec
        .origins
        .iter()
        .find(|(r, _)| r.name == "bootstrap")
        .map(|(_, o)| o.clone());
    assert_eq!(
        bootstrap_origin,
        Some(Origin::Discovered(
            r#"envFrom in initContainer "init""#.into()
        ))
    );
}

#[test]
fn auto_false_tracks_nothing_and_garbage_is_reported() {
    let pod = mk_auto_pod();
    let deps = parse(&mk_workload(
        &[("nudge.dev/auto", "false")],
        &[],
        pod.clone(),
    ));
    assert_eq!(deps, Dependencies::default());
    let deps = parse(&mk_workload(&[("nudge.dev/auto", "yes")], &[], pod));
    assert!(deps.stamps.is_empty());
    assert_eq!(categories(&deps), vec![("nudge.dev/auto", "bad_bool")]);
}

#[test]
fn auto_with_nothing_to_discover_still_stamps_the_empty_hash() {
    let deps = parse(&mk_annotated(&[("nudge.dev/auto", "true")]));
    assert!(stamp(&deps, "nudge.dev/config-hash").inputs.is_empty());
}

#[test]
fn exclude_drops_objects_and_reports_malformed_items() {
    let workload = mk_workload(
        &[
            ("nudge.dev/auto", "true"),
            (
                "nudge.dev/exclude",
                "secret/db, configmap/flags,,bogus,deployment/x,secret/Bad",
            ),
        ],
        &[],
        mk_auto_pod(),
    );
    let deps = parse(&workload);
    assert_eq!(
        inputs(stamp(&deps, "nudge.dev/config-hash")),
        vec![
            "configmap/shop/app[a.yaml] (native)",
            "secret/shop/bootstrap (native)",
            "secret/shop/tls (native) optional",
        ]
    );
    assert_eq!(deps.excluded.len(), 2);
    assert_eq!(deps.errors.len(), 3);
    assert!(
        deps.errors
            .iter()
            .all(|e| e.key() == "nudge.dev/exclude" && e.category() == "bad_list_item")
    );
}

/// The catalog with ConfigMaps turned off (`[sources.configmap] enabled = false`).
fn mk_catalog_without_configmaps() -> SourceCatalog {
    SourceCatalog::new().with(SourceName::secret(), Scope::Namespaced, object_name)
}

#[test]
fn auto_leaves_out_the_objects_of_a_source_turned_off() {
    let workload = mk_workload(&[("nudge.dev/auto", "true")], &[], mk_auto_pod());
    let deps = dependencies(
        &workload,
        &AnnotationScheme::default(),
        &mk_catalog_without_configmaps(),
    );
    let spec = stamp(&deps, "nudge.dev/config-hash");
    assert_eq!(
        inputs(spec),
        vec![
            "secret/shop/bootstrap (native)",
            "secret/shop/db (native)",
            "secret/shop/tls (native) optional"
        ]
    );
    assert!(
        spec.origins
            .iter()
            .all(|(reference, _)| reference.source == SourceName::secret()),
        "{:?}",
        spec.origins
    );
}

#[test]
fn reloader_outputs_of_a_source_turned_off_go_and_a_reference_naming_it_is_unknown() {
    let pod = mk_pod(
        vec![mk_cm_volume("app-config", &[])],
        vec![mk_container(
            "app",
            &[],
            vec![mk_env_value("STAKATER_APP_CONFIG_CONFIGMAP", "abc")],
        )],
        vec![],
    );
    let workload = mk_workload(
        &[
            ("reloader.stakater.com/auto", "true"),
            ("nudge.dev/configmap-flags", "flags"),
        ],
        &[],
        pod,
    );
    let deps = dependencies(
        &workload,
        &AnnotationScheme::default(),
        &mk_catalog_without_configmaps(),
    );
    assert!(deps.stamps.is_empty(), "{:?}", deps.stamps);
    assert!(
        matches!(
            deps.errors.as_slice(),
            [AnnotationError::UnknownSource { key, .. }] if key == "nudge.dev/configmap-flags"
        ),
        "{:?}",
        deps.errors
    );
}
