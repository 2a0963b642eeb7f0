//! Sources with a pod-spec rule (the Secrets Store CSI preset): `<prefix>/auto`
//! and Reloader 2's SecretProviderClass annotations.

use super::*;
use crate::model::PodSpecRule;

fn csi() -> SourceName {
    SourceName::new("csi").unwrap()
}

fn mk_csi_catalog() -> SourceCatalog {
    let mut catalog = mk_catalog().with(csi(), Scope::Namespaced, object_name);
    let rule = PodSpecRule::csi_volume("secrets-store.csi.k8s.io", "secretProviderClass");
    catalog.set_rule(&csi(), rule);
    catalog
}

fn mk_csi_volume(volume: &str, class: &str) -> Volume {
    let attributes = [("secretProviderClass".to_owned(), class.to_owned())];
    Volume {
        name: volume.to_owned(),
        csi: Some(k8s_openapi::api::core::v1::CSIVolumeSource {
            driver: "secrets-store.csi.k8s.io".to_owned(),
            volume_attributes: Some(attributes.into_iter().collect()),
            ..Default::default()
        }),
        ..Volume::default()
    }
}

fn mk_csi_pod(env: Vec<EnvVar>) -> PodSpec {
    mk_pod(
        vec![
            mk_csi_volume("secrets", "vault-db"),
            mk_csi_volume("more", "aws-api"),
            mk_cm_volume("app-config", &[]),
        ],
        vec![mk_container("app", &[], env)],
        vec![],
    )
}

fn parse_csi(workload: &Workload) -> Dependencies {
    dependencies(workload, &AnnotationScheme::default(), &mk_csi_catalog())
}

#[test]
fn auto_tracks_mounted_classes_in_an_adopted_output_of_their_own() {
    let workload = mk_workload(&[("nudge.dev/auto", "true")], &[], mk_csi_pod(vec![]));
    let deps = parse_csi(&workload);
    assert!(deps.errors.is_empty(), "{:?}", deps.errors);
    let spec = stamp(&deps, "nudge.dev/checksum-csi");
    assert_eq!(
        spec.output,
        Output::Adopted("nudge.dev/checksum-csi".into())
    );
    assert_eq!(spec.combine, Combine::NativeHash);
    assert_eq!(
        inputs(spec),
        ["csi/shop/aws-api (native)", "csi/shop/vault-db (native)"]
    );
    // ConfigMaps and Secrets keep their config-hash, without the classes.
    assert_eq!(
        inputs(stamp(&deps, "nudge.dev/config-hash")),
        ["configmap/shop/app-config (native)"]
    );
    // Without the rule nothing is discovered beyond ConfigMaps and Secrets.
    let plain = parse(&workload);
    assert_eq!(outputs(&plain), ["annotation nudge.dev/config-hash"]);
}

#[test]
fn reloader_two_env_var_is_kept_in_reloaders_hash_and_other_classes_are_adopted() {
    let env = vec![mk_env_value(
        "STAKATER_VAULT_DB_SECRETPROVIDERCLASS",
        "3c9a892aeaedc759abc3df9884a37b8be5680382",
    )];
    let workload = mk_workload(
        &[("secretproviderclass.reloader.stakater.com/auto", "true")],
        &[],
        mk_csi_pod(env),
    );
    let deps = parse_csi(&workload);
    assert!(deps.errors.is_empty(), "{:?}", deps.errors);
    let env = stamp(&deps, "STAKATER_VAULT_DB_SECRETPROVIDERCLASS");
    assert_eq!(
        env.output,
        Output::ContainerEnv("STAKATER_VAULT_DB_SECRETPROVIDERCLASS".into())
    );
    assert_eq!(inputs(env), ["csi/shop/vault-db (reloader)"]);
    let adopted = stamp(&deps, "nudge.dev/config-hash");
    assert_eq!(
        adopted.output,
        Output::Adopted("nudge.dev/config-hash".into())
    );
    assert_eq!(inputs(adopted), ["csi/shop/aws-api (native)"]);
}

#[test]
fn reloader_auto_covers_classes_and_the_exclude_list_drops_them() {
    let workload = mk_workload(
        &[
            ("reloader.stakater.com/auto", "true"),
            (
                "secretproviderclasses.exclude.reloader.stakater.com/reload",
                "aws-api",
            ),
        ],
        &[],
        mk_csi_pod(vec![]),
    );
    let deps = parse_csi(&workload);
    assert!(deps.errors.is_empty(), "{:?}", deps.errors);
    assert_eq!(
        inputs(stamp(&deps, "nudge.dev/config-hash")),
        [
            "configmap/shop/app-config (native)",
            "csi/shop/vault-db (native)"
        ]
    );
}

#[test]
fn reloader_reload_list_reads_names_and_go_patterns_against_mounted_classes() {
    let workload = mk_workload(
        &[(
            "secretproviderclass.reloader.stakater.com/reload",
            "vault-.*,other,bad(",
        )],
        &[],
        mk_csi_pod(vec![]),
    );
    let deps = parse_csi(&workload);
    assert_eq!(
        categories(&deps),
        [(
            "secretproviderclass.reloader.stakater.com/reload",
            "bad_list_item"
        )]
    );
    assert_eq!(
        inputs(stamp(&deps, "nudge.dev/config-hash")),
        ["csi/shop/other (native)", "csi/shop/vault-db (native)"]
    );
}

#[test]
fn class_annotations_without_the_preset_are_reported_and_track_nothing() {
    let workload = mk_workload(
        &[
            ("secretproviderclass.reloader.stakater.com/auto", "true"),
            (
                "secretproviderclass.reloader.stakater.com/reload",
                "vault-db",
            ),
            ("reloader.stakater.com/auto", "true"),
        ],
        &[],
        mk_csi_pod(vec![]),
    );
    let deps = parse(&workload);
    assert_eq!(
        categories(&deps),
        [
            (
                "secretproviderclass.reloader.stakater.com/auto",
                "unsupported"
            ),
            (
                "secretproviderclass.reloader.stakater.com/reload",
                "unsupported"
            ),
        ]
    );
    assert_eq!(
        inputs(stamp(&deps, "nudge.dev/config-hash")),
        ["configmap/shop/app-config (native)"]
    );
}

#[test]
fn an_explicit_reference_to_a_source_with_a_rule_is_adopted_too() {
    let workload = mk_annotated(&[("nudge.dev/csi-db", "vault-db")]);
    let deps = parse_csi(&workload);
    assert!(deps.errors.is_empty(), "{:?}", deps.errors);
    let spec = stamp(&deps, "nudge.dev/checksum-db");
    assert_eq!(spec.output, Output::Adopted("nudge.dev/checksum-db".into()));
    assert_eq!(inputs(spec), ["csi/shop/vault-db (native)"]);
}
