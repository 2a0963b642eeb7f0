use super::*;
use std::net::SocketAddr;
use std::time::Duration;

use figment::Jail;

fn example_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml")
}

/// In a Jail too: Config::load reads `NUDGE_*`, which the Jail tests beside
/// it set for the process while they run.
#[test]
fn example_file_equals_defaults() {
    Jail::expect_with(|_| {
        let config = Config::load(Some(&example_path())).expect("config.example.toml loads");
        assert_eq!(config, Config::default());
        Ok(())
    });
}

#[test]
fn example_file_lists_every_key() {
    let text = std::fs::read_to_string(example_path()).unwrap();
    let example: toml::Table = toml::from_str(&text).unwrap();
    let defaults = toml::Table::try_from(Config::default()).unwrap();
    assert_eq!(
        keys(&example),
        keys(&defaults),
        "config.example.toml and Config::default() differ in keys"
    );
}

fn keys(table: &toml::Table) -> Vec<String> {
    let mut out = Vec::new();
    for (key, value) in table {
        match value.as_table() {
            Some(inner) => out.extend(keys(inner).into_iter().map(|k| format!("{key}.{k}"))),
            None => out.push(key.clone()),
        }
    }
    out.sort();
    out
}

#[test]
fn env_overrides_file_and_flags_override_env() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "nudge.toml",
            "[engine]\ndebounce = \"10s\"\nburst = 7\n[log]\nformat = \"plain\"\n",
        )?;
        jail.set_env("NUDGE_ENGINE__BURST", "9");
        jail.set_env("NUDGE_LOG__FORMAT", "json");
        let overrides = Overrides {
            log_format: Some(LogFormat::Plain),
            log_filter: None,
        };
        let figment = Config::providers(Some(Path::new("nudge.toml"))).unwrap();
        let config = Config::from_figment(&figment.merge(overrides.figment())).unwrap();
        assert_eq!(config.engine.debounce, Duration::from_secs(10));
        assert_eq!(config.engine.burst, 9);
        assert_eq!(config.log.format, LogFormat::Plain);
        Ok(())
    });
}

#[test]
fn env_vars_without_section_separator_are_not_config() {
    Jail::expect_with(|jail| {
        jail.set_env("NUDGE_TEST_KUBECONFIG", "/tmp/kubeconfig");
        jail.set_env("NUDGE_CONFIG", "/etc/nudge.toml");
        assert_eq!(Config::load(None).unwrap(), Config::default());
        Ok(())
    });
}

#[test]
fn unknown_key_in_file_names_key_and_file() {
    Jail::expect_with(|jail| {
        jail.create_file("nudge.toml", "[engine]\ndebounse = \"10s\"\n")?;
        let err = Config::load(Some(Path::new("nudge.toml")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("debounse"), "{err}");
        assert!(err.contains("nudge.toml"), "{err}");
        Ok(())
    });
}

#[test]
fn engine_window_parses_and_a_bad_one_names_the_key() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "nudge.toml",
            "[engine]\nwindow = \"Mon-Fri 22:00-06:00 Europe/Berlin\"\n",
        )?;
        let config = Config::load(Some(Path::new("nudge.toml"))).expect("a valid window");
        let window = config.engine.window.expect("set");
        assert_eq!(window.zone(), "Europe/Berlin");
        jail.set_env("NUDGE_ENGINE__WINDOW", "Mon-Fri 22:00 Europe/Berlin");
        let err = Config::load(Some(Path::new("nudge.toml")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("engine.window"), "{err}");
        assert!(err.contains("NUDGE_ENGINE__WINDOW"), "{err}");
        assert!(err.contains("invalid span"), "{err}");
        Ok(())
    });
}

#[test]
fn wrong_type_in_env_names_key_and_variable() {
    Jail::expect_with(|jail| {
        jail.set_env("NUDGE_ENGINE__BURST", "lots");
        let err = Config::load(None).unwrap_err().to_string();
        assert!(err.contains("burst"), "{err}");
        assert!(err.contains("NUDGE_ENGINE__BURST"), "{err}");
        Ok(())
    });
}

#[test]
fn unknown_section_in_env_is_rejected() {
    Jail::expect_with(|jail| {
        jail.set_env("NUDGE_ENGIN__BURST", "3");
        let err = Config::load(None).unwrap_err().to_string();
        assert!(err.contains("engin"), "{err}");
        Ok(())
    });
}

#[test]
fn unparsable_duration_names_key() {
    Jail::expect_with(|jail| {
        jail.create_file("nudge.toml", "[engine]\ndebounce = \"soon\"\n")?;
        let err = Config::load(Some(Path::new("nudge.toml")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("debounce"), "{err}");
        Ok(())
    });
}

#[test]
fn out_of_range_value_names_key_and_origin() {
    Jail::expect_with(|jail| {
        jail.set_env("NUDGE_ENGINE__BURST", "0");
        let err = Config::load(None).unwrap_err().to_string();
        assert!(err.contains("engine.burst"), "{err}");
        assert!(err.contains("NUDGE_ENGINE__BURST"), "{err}");
        Ok(())
    });
}

#[test]
fn max_delay_shorter_than_debounce_is_rejected() {
    Jail::expect_with(|jail| {
        jail.create_file("nudge.toml", "[engine]\ndebounce = \"2m\"\n")?;
        let err = Config::load(Some(Path::new("nudge.toml")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("engine.max_delay"), "{err}");
        Ok(())
    });
}

#[test]
fn bad_prefix_is_rejected() {
    Jail::expect_with(|jail| {
        jail.set_env("NUDGE_ANNOTATIONS__PREFIX", "Not_A_Domain");
        let err = Config::load(None).unwrap_err().to_string();
        assert!(err.contains("annotations.prefix"), "{err}");
        Ok(())
    });
}

#[test]
fn namespace_list_from_env_is_validated() {
    Jail::expect_with(|jail| {
        jail.set_env("NUDGE_KUBERNETES__NAMESPACES", "[team-a, Team_B]");
        let err = Config::load(None).unwrap_err().to_string();
        assert!(err.contains("kubernetes.namespaces"), "{err}");
        assert!(err.contains("Team_B"), "{err}");
        Ok(())
    });
}

#[test]
fn a_selector_that_does_not_parse_names_its_key_and_where_it_came_from() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "nudge.toml",
            "[kubernetes]\nnamespace_selector = \"team in (a,b\"\n",
        )?;
        let err = Config::load(Some(Path::new("nudge.toml")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("kubernetes.namespace_selector"), "{err}");
        assert!(err.contains("expected ',' or ')'"), "{err}");
        assert!(err.contains("nudge.toml"), "{err}");
        jail.set_env("NUDGE_KUBERNETES__SOURCE_LABEL_SELECTOR", "app=web)");
        let err = Config::load(None).unwrap_err().to_string();
        assert!(err.contains("kubernetes.source_label_selector"), "{err}");
        assert!(
            err.contains("NUDGE_KUBERNETES__SOURCE_LABEL_SELECTOR"),
            "{err}"
        );
        Ok(())
    });
}

#[test]
fn reloaders_key_value_selectors_are_read_in_kubernetes_form() {
    Jail::expect_with(|jail| {
        jail.set_env("NUDGE_KUBERNETES__SOURCE_LABEL_SELECTOR", "app:web,tier:*");
        let config = Config::load(None).unwrap();
        assert_eq!(config.kubernetes.source_label_selector, "app=web,tier");
        Ok(())
    });
}

#[test]
fn ignore_kinds_takes_built_in_kinds_and_plurals_and_names_a_wrong_one() {
    Jail::expect_with(|jail| {
        jail.set_env("NUDGE_KUBERNETES__IGNORE_KINDS", "[jobs, CronJob, rollout]");
        let config = Config::load(None).unwrap();
        for kind in ["Job", "CronJob", "Rollout"] {
            assert!(config.kubernetes.ignores_kind(kind), "{kind}");
        }
        assert!(!config.kubernetes.ignores_kind("Deployment"));
        jail.set_env("NUDGE_KUBERNETES__IGNORE_KINDS", "[jobs, Widget]");
        let err = Config::load(None).unwrap_err().to_string();
        assert!(err.contains("kubernetes.ignore_kinds"), "{err}");
        assert!(err.contains("\"Widget\" is not a built-in kind"), "{err}");
        Ok(())
    });
}

#[test]
fn configmaps_and_secrets_are_on_unless_turned_off() {
    Jail::expect_with(|jail| {
        let config = Config::load(None).unwrap();
        assert!(config.sources.configmap.enabled && config.sources.secret.enabled);
        jail.set_env("NUDGE_SOURCES__CONFIGMAP__ENABLED", "false");
        let config = Config::load(None).unwrap();
        assert!(!config.sources.configmap.enabled && config.sources.secret.enabled);
        assert!(config.sources.custom.is_empty());
        Ok(())
    });
}

#[test]
fn durations_print_as_written_and_read_back_to_the_same_configuration() {
    let mut config = Config::default();
    config.webhook.certificate_validity = Duration::from_secs(365 * 86_400);
    config.engine.max_delay = Duration::from_secs(90 * 60);
    let text = toml::to_string(&config).unwrap();
    assert!(text.contains("certificate_validity = \"365d\""), "{text}");
    assert!(text.contains("max_delay = \"1h 30m\""), "{text}");
    let read: Config = Figment::from(Toml::string(&text)).extract().unwrap();
    assert_eq!(read, config);
}

#[test]
fn consul_instances_read_from_toml() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "nudge.toml",
            r#"
[sources.consul]
enabled = true
address = "https://consul.service:8501"
max_concurrent_queries = 32

[sources.consul.tls]
ca_file = "/etc/consul/ca.pem"

[sources.consul.instances.eu]
address = "https://consul.eu.example.com:8501"
wait = "2m"
"#,
        )?;
        let config = Config::load(Some(Path::new("nudge.toml"))).unwrap();
        let consul = &config.sources.consul;
        assert_eq!(consul.enabled, Some(true));
        assert_eq!(consul.max_concurrent_queries, 32);
        assert_eq!(consul.tls.ca_file, "/etc/consul/ca.pem");
        let eu = &consul.instances["eu"];
        assert_eq!(eu.address, "https://consul.eu.example.com:8501");
        assert_eq!(eu.wait, Duration::from_secs(120));
        assert_eq!(eu.enabled, None);
        assert_eq!(eu.max_concurrent_queries, 64);
        Ok(())
    });
}

#[test]
fn consul_env_vars_reach_the_default_and_extra_instances() {
    Jail::expect_with(|jail| {
        jail.set_env("NUDGE_SOURCES__CONSUL__ENABLED", "true");
        jail.set_env("NUDGE_SOURCES__CONSUL__ADDRESS", "http://consul:8500");
        jail.set_env("NUDGE_SOURCES__CONSUL__TLS__VERIFY", "false");
        jail.set_env(
            "NUDGE_SOURCES__CONSUL__INSTANCES__EU__ADDRESS",
            "http://eu:8500",
        );
        let config = Config::load(None).unwrap();
        let consul = &config.sources.consul;
        assert_eq!(consul.enabled, Some(true));
        assert_eq!(consul.address, "http://consul:8500");
        assert!(!consul.tls.verify);
        assert_eq!(consul.instances["eu"].address, "http://eu:8500");
        Ok(())
    });
}

#[test]
fn consul_token_is_never_printed() {
    let config = ConsulConfig {
        token: Secret::new("s3cr3t"),
        ..ConsulConfig::default()
    };
    assert!(!format!("{config:?}").contains("s3cr3t"));
}

#[test]
fn consul_instance_without_address_is_rejected() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "nudge.toml",
            "[sources.consul.instances.eu]\nwait = \"1m\"\n",
        )?;
        let err = Config::load(Some(Path::new("nudge.toml")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("sources.consul.instances"), "{err}");
        assert!(err.contains("eu.address"), "{err}");
        Ok(())
    });
}

#[test]
fn consul_instance_name_must_make_a_source_name() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "nudge.toml",
            "[sources.consul.instances.eu-west]\naddress = \"http://x:8500\"\n",
        )?;
        let err = Config::load(Some(Path::new("nudge.toml")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("eu-west"), "{err}");
        Ok(())
    });
}

#[test]
fn consul_wait_beyond_consuls_limit_names_key_and_variable() {
    Jail::expect_with(|jail| {
        jail.set_env("NUDGE_SOURCES__CONSUL__WAIT", "11m");
        let err = Config::load(None).unwrap_err().to_string();
        assert!(err.contains("sources.consul.wait"), "{err}");
        assert!(err.contains("NUDGE_SOURCES__CONSUL__WAIT"), "{err}");
        Ok(())
    });
}

#[test]
fn kubernetes_sources_read_from_toml_with_defaults_for_what_is_left_out() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "nudge.toml",
            r#"
[sources.kubernetes.flags]
group = "example.com"
version = "v1"
kind = "FeatureFlags"
fields = ["/spec", "/status/objects"]
secret = true

[sources.kubernetes.settings]
version = "v1"
kind = "ConfigMap"
"#,
        )?;
        let config = Config::load(Some(Path::new("nudge.toml"))).unwrap();
        let sources = &config.sources.kubernetes;
        let flags = &sources["flags"];
        assert_eq!(flags.api_version(), "example.com/v1");
        assert_eq!(flags.kind, "FeatureFlags");
        assert_eq!(flags.fields, ["/spec", "/status/objects"]);
        assert!(flags.secret);
        assert_eq!(
            sources["settings"],
            KubernetesSourceConfig::new("", "v1", "ConfigMap")
        );
        assert_eq!(sources["settings"].api_version(), "v1");
        assert!(
            config.sources.custom.is_empty(),
            "{:?}",
            config.sources.custom
        );
        Ok(())
    });
}

#[test]
fn a_kubernetes_source_can_be_configured_from_env() {
    Jail::expect_with(|jail| {
        jail.set_env("NUDGE_SOURCES__KUBERNETES__FLAGS__GROUP", "example.com");
        jail.set_env("NUDGE_SOURCES__KUBERNETES__FLAGS__VERSION", "v1");
        jail.set_env("NUDGE_SOURCES__KUBERNETES__FLAGS__KIND", "FeatureFlags");
        jail.set_env("NUDGE_SOURCES__KUBERNETES__FLAGS__FIELDS", "[/spec]");
        let config = Config::load(None).unwrap();
        let flags = &config.sources.kubernetes["flags"];
        assert_eq!(flags.kind, "FeatureFlags");
        assert_eq!(flags.fields, ["/spec"]);
        Ok(())
    });
}

/// Each bad entry names `sources.kubernetes`, the entry's field and where
/// it was written.
#[test]
fn a_bad_kubernetes_source_names_its_key_and_file() {
    let entry = |name: &str, body: &str| {
        format!("[sources.kubernetes.{name}]\nversion = \"v1\"\nkind = \"Gizmo\"\n{body}")
    };
    let cases = [
        (
            entry("flags", "fields = [\"spec\"]"),
            "flags.fields: entry 0",
        ),
        (
            entry("flags", "fields = [\"/a~2\"]"),
            "flags.fields: entry 0",
        ),
        (entry("flags", "group = \"Example_Com\""), "flags.group"),
        (
            "[sources.kubernetes.flags]\nversion = \"v1\"\nkind = \"a gizmo\"\n".to_owned(),
            "flags.kind",
        ),
        (
            "[sources.kubernetes.flags]\nversion = \"V 1\"\nkind = \"Gizmo\"\n".to_owned(),
            "flags.version",
        ),
        (
            entry("feature-flags", ""),
            "\"feature-flags\" cannot name a source",
        ),
        (entry("secret", ""), "built-in source"),
        (entry("\"consul.eu\"", ""), "built-in source"),
    ];
    for (toml, expected) in cases {
        Jail::expect_with(|jail| {
            jail.create_file("nudge.toml", &toml)?;
            let err = Config::load(Some(Path::new("nudge.toml")))
                .unwrap_err()
                .to_string();
            assert!(err.contains("sources.kubernetes"), "{err}");
            assert!(err.contains(expected), "{expected}: {err}");
            assert!(err.contains("nudge.toml"), "{err}");
            Ok(())
        });
    }
}

#[test]
fn the_secrets_store_csi_preset_fills_in_its_entry_and_keeps_secret() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "nudge.toml",
            "[sources.kubernetes.csi]\npreset = \"secrets-store-csi\"\n",
        )?;
        let config = Config::load(Some(Path::new("nudge.toml"))).unwrap();
        let csi = &config.sources.kubernetes["csi"];
        assert_eq!(
            *csi,
            KubernetesSourceConfig::preset(KubernetesSourcePreset::SecretsStoreCsi)
        );
        let resolved = csi.resolved();
        assert_eq!(resolved.api_version(), "secrets-store.csi.x-k8s.io/v1");
        assert_eq!(resolved.kind, "SecretProviderClassPodStatus");
        assert_eq!(resolved.fields, ["/status/objects"]);
        assert_eq!(resolved.reference_field, "/status/secretProviderClassName");
        assert_eq!(
            resolved.discover,
            Some(DiscoverConfig::csi(
                "secrets-store.csi.k8s.io",
                "secretProviderClass"
            ))
        );
        assert!(!resolved.secret);
        assert_eq!(csi.problem(), None);
        // Events name the class a reference names, not its status objects.
        assert_eq!(
            csi.referenced_kind(),
            Some((
                "secrets-store.csi.x-k8s.io/v1".to_owned(),
                "SecretProviderClass".to_owned()
            ))
        );
        let mut by_field = KubernetesSourceConfig::new("example.com", "v1", "Gizmo");
        assert_eq!(
            by_field.referenced_kind(),
            Some(("example.com/v1".to_owned(), "Gizmo".to_owned()))
        );
        by_field.reference_field = "/spec/owner".to_owned();
        assert_eq!(by_field.referenced_kind(), None);
        Ok(())
    });
}

/// A discovery rule and a reference field are validated naming their key.
#[test]
fn a_bad_discovery_rule_or_preset_names_its_key() {
    let gizmo = "[sources.kubernetes.gizmo]\nversion = \"v1\"\nkind = \"Gizmo\"\n";
    let cases = [
        (
            format!("{gizmo}reference_field = \"status\"\n"),
            "gizmo.reference_field",
        ),
        (
            format!(
                "{gizmo}[sources.kubernetes.gizmo.discover]\ncsi_driver = \"Not A Driver\"\nvolume_attribute = \"x\"\n"
            ),
            "gizmo.discover.csi_driver",
        ),
        (
            format!(
                "{gizmo}[sources.kubernetes.gizmo.discover]\ncsi_driver = \"d.example.com\"\nvolume_attribute = \"\"\n"
            ),
            "gizmo.discover.volume_attribute",
        ),
        (
            "[sources.kubernetes.csi]\npreset = \"secrets-store-csi\"\nkind = \"Gizmo\"\n"
                .to_owned(),
            "csi.kind: set by preset \"secrets-store-csi\"",
        ),
        (
            "[sources.kubernetes.csi]\npreset = \"vault\"\n".to_owned(),
            "preset",
        ),
    ];
    for (toml, expected) in cases {
        Jail::expect_with(|jail| {
            jail.create_file("nudge.toml", &toml)?;
            let err = Config::load(Some(Path::new("nudge.toml")))
                .unwrap_err()
                .to_string();
            assert!(err.contains("sources.kubernetes"), "{err}");
            assert!(err.contains(expected), "{expected}: {err}");
            Ok(())
        });
    }
}

#[test]
fn a_kubernetes_source_without_a_kind_names_the_missing_field() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "nudge.toml",
            "[sources.kubernetes.flags]\nversion = \"v1\"\n",
        )?;
        let err = Config::load(Some(Path::new("nudge.toml")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("sources.kubernetes"), "{err}");
        assert!(err.contains("flags.kind: missing"), "{err}");
        Ok(())
    });
}

#[test]
fn renew_deadline_not_shorter_than_lease_duration_is_rejected() {
    Jail::expect_with(|jail| {
        jail.set_env("NUDGE_LEADER_ELECTION__RENEW_DEADLINE", "20s");
        let err = Config::load(None).unwrap_err().to_string();
        assert!(err.contains("leader_election.lease_duration"), "{err}");
        Ok(())
    });
}

#[test]
fn admin_bind_from_env_is_a_socket_address() {
    Jail::expect_with(|jail| {
        jail.set_env("NUDGE_ADMIN__BIND", "127.0.0.1:0");
        let config = Config::load(None).unwrap();
        assert_eq!(config.admin.bind, SocketAddr::from(([127, 0, 0, 1], 0)));
        jail.set_env("NUDGE_ADMIN__BIND", "localhost");
        let err = Config::load(None).unwrap_err().to_string();
        assert!(err.contains("admin.bind"), "{err}");
        Ok(())
    });
}

#[test]
fn webhook_is_off_by_default_and_configurable_from_env() {
    Jail::expect_with(|jail| {
        assert!(!Config::default().webhook.enabled);
        jail.set_env("NUDGE_WEBHOOK__ENABLED", "true");
        jail.set_env("NUDGE_WEBHOOK__BIND", "127.0.0.1:9443");
        jail.set_env("NUDGE_WEBHOOK__EXTRA_NAMES", "[127.0.0.1]");
        let config = Config::load(None).unwrap();
        assert!(config.webhook.enabled);
        assert_eq!(
            config.webhook.bind,
            SocketAddr::from(([127, 0, 0, 1], 9443))
        );
        assert_eq!(config.webhook.extra_names, vec!["127.0.0.1".to_owned()]);
        Ok(())
    });
}

#[test]
fn webhook_renewal_window_must_fit_in_the_validity() {
    Jail::expect_with(|jail| {
        jail.set_env("NUDGE_WEBHOOK__RENEW_BEFORE", "400days");
        let err = Config::load(None).unwrap_err().to_string();
        assert!(err.contains("webhook.renew_before"), "{err}");
        Ok(())
    });
}

#[test]
fn notify_is_off_by_default_and_configurable_from_env() {
    Jail::expect_with(|jail| {
        assert!(!Config::default().notify.enabled);
        assert_eq!(Config::default().notify.format, NotifyFormat::Json);
        jail.set_env("NUDGE_NOTIFY__ENABLED", "true");
        jail.set_env("NUDGE_NOTIFY__URL", "https://hooks.example.com/T0/B0/tok3n");
        jail.set_env("NUDGE_NOTIFY__FORMAT", "gchat");
        jail.set_env("NUDGE_NOTIFY__TIMEOUT", "3s");
        jail.set_env("NUDGE_NOTIFY__ADDITIONAL_INFO", "prod-eu");
        let config = Config::load(None).unwrap();
        let notify = &config.notify;
        assert!(notify.enabled);
        assert_eq!(notify.url.0, "https://hooks.example.com/T0/B0/tok3n");
        assert_eq!(notify.format, NotifyFormat::Gchat);
        assert_eq!(notify.timeout, Duration::from_secs(3));
        assert_eq!(notify.additional_info, "prod-eu");
        Ok(())
    });
}

#[test]
fn notify_formats_are_named_in_lower_case() {
    Jail::expect_with(|jail| {
        for format in [
            NotifyFormat::Slack,
            NotifyFormat::Teams,
            NotifyFormat::Gchat,
            NotifyFormat::Json,
        ] {
            jail.set_env("NUDGE_NOTIFY__FORMAT", format.as_str());
            let config = Config::load(None).unwrap();
            assert_eq!(config.notify.format, format);
        }
        jail.set_env("NUDGE_NOTIFY__FORMAT", "raw");
        let err = Config::load(None).unwrap_err().to_string();
        assert!(err.contains("notify.format"), "{err}");
        Ok(())
    });
}

#[test]
fn notify_enabled_without_a_url_is_rejected() {
    Jail::expect_with(|jail| {
        jail.create_file("nudge.toml", "[notify]\nenabled = true\n")?;
        let err = Config::load(Some(Path::new("nudge.toml")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("notify.enabled"), "{err}");
        assert!(err.contains("notify.url_file"), "{err}");
        assert!(
            err.contains("nudge.toml"),
            "names where enabled was set: {err}"
        );
        Ok(())
    });
}

#[test]
fn notify_url_and_url_file_together_are_rejected() {
    Jail::expect_with(|jail| {
        jail.set_env("NUDGE_NOTIFY__URL", "https://hooks.example.com/x");
        jail.set_env("NUDGE_NOTIFY__URL_FILE", "/etc/nudge/notify/url");
        let err = Config::load(None).unwrap_err().to_string();
        assert!(err.contains("notify.url"), "{err}");
        assert!(err.contains("not both"), "{err}");
        Ok(())
    });
}

#[test]
fn a_notify_url_that_is_not_http_is_rejected_without_repeating_it() {
    for (url, problem) in [
        ("hooks.example.com/s3cr3t", "is not a URL"),
        ("ftp://hooks.example.com/s3cr3t", "http"),
        ("file:///s3cr3t", "http"),
    ] {
        Jail::expect_with(|jail| {
            jail.set_env("NUDGE_NOTIFY__ENABLED", "true");
            jail.set_env("NUDGE_NOTIFY__URL", url);
            let err = Config::load(None).unwrap_err().to_string();
            assert!(err.contains("notify.url"), "{err}");
            assert!(err.contains(problem), "{url}: {err}");
            assert!(err.contains("NUDGE_NOTIFY__URL"), "{err}");
            assert!(!err.contains("s3cr3t"), "the URL is a secret: {err}");
            Ok(())
        });
    }
}

#[test]
fn a_zero_notify_timeout_is_rejected() {
    Jail::expect_with(|jail| {
        jail.set_env("NUDGE_NOTIFY__TIMEOUT", "0s");
        let err = Config::load(None).unwrap_err().to_string();
        assert!(err.contains("notify.timeout"), "{err}");
        Ok(())
    });
}

#[test]
fn the_webhook_url_is_never_printed() {
    let config = NotifyConfig {
        url: Secret::new("https://hooks.example.com/s3cr3t"),
        ..NotifyConfig::default()
    };
    assert!(!format!("{config:?}").contains("s3cr3t"));
}

#[test]
fn missing_explicit_file_is_an_error() {
    let err = Config::load(Some(Path::new("/nonexistent/nudge.toml"))).unwrap_err();
    assert!(matches!(err, ConfigError::MissingFile { .. }));
}
