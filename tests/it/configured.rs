//! Custom sources and targets read their sections from nudge's own
//! configuration, with nudge's errors: through the public API only.

use std::sync::Arc;

use nudge::Controller;
use nudge::config::Config;
use nudge::figment::Figment;
use nudge::figment::providers::{Format, Serialized, Toml};
use nudge::source::{Observation, ObserveContext, PollSource, SourceError, SourceName, Tracked};
use nudge::target::{KubeTarget, Target, TargetSettings, TemplatePath, WorkloadKind};

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct GadgetConfig {
    plural: String,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct MotdConfig {
    interval: Option<String>,
}

struct Motd(SourceName);

#[nudge::async_trait]
impl PollSource for Motd {
    fn name(&self) -> &SourceName {
        &self.0
    }

    fn interval(&self) -> std::time::Duration {
        std::time::Duration::from_secs(30)
    }

    async fn observe(&self, _: &Tracked, cx: &ObserveContext) -> Result<Observation, SourceError> {
        Ok(Observation::Present(cx.fingerprint(b"hello")))
    }
}

fn figment(toml: &str) -> Figment {
    Figment::from(Serialized::defaults(Config::default())).merge(Toml::string(toml))
}

fn controller(toml: &str, seen: &Arc<std::sync::Mutex<Vec<String>>>) -> Controller {
    let controller =
        Controller::from_figment(figment(toml), nudge::testing::offline_client()).expect("loads");
    let client = controller.client().clone();
    let settings = TargetSettings::from_config(controller.config());
    let gadgets = seen.clone();
    let motd = seen.clone();
    controller
        .with_configured_target("gadget", move |config: GadgetConfig| {
            gadgets
                .lock()
                .unwrap()
                .push(format!("gadget:{}", config.plural));
            let kind = WorkloadKind::new(
                "example.com",
                "v1",
                "Gadget",
                TemplatePath::parse("spec.template").unwrap(),
            );
            let target: Arc<dyn Target> =
                Arc::new(KubeTarget::new(client, kind, &config.plural, settings));
            Ok::<_, String>(target)
        })
        .with_configured_source("motd", move |config: MotdConfig| {
            motd.lock()
                .unwrap()
                .push(format!("motd:{:?}", config.interval));
            Ok::<_, String>(nudge::source::poll(Motd(SourceName::new("motd").unwrap())))
        })
}

#[tokio::test]
async fn a_custom_target_reads_its_section_beside_the_configured_kinds() {
    let seen = Arc::default();
    let controller = controller(
        r#"
[[targets.kinds]]
group = "apps.kruise.io"
version = "v1alpha1"
kind = "CloneSet"
template = "spec.template"

[targets.gadget]
plural = "gadgets"

[sources.motd]
interval = "1m"
"#,
        &seen,
    );
    controller.check().expect("valid");
    assert_eq!(
        *seen.lock().unwrap(),
        ["gadget:gadgets", "motd:Some(\"1m\")"]
    );
    assert_eq!(controller.config().targets.kinds.len(), 1);
    assert_eq!(controller.config().targets.kinds[0].kind, "CloneSet");
}

#[tokio::test]
async fn the_array_form_of_targets_still_loads() {
    let seen = Arc::default();
    let controller = controller(
        r#"
[[targets]]
group = "apps.kruise.io"
version = "v1alpha1"
kind = "CloneSet"
template = "spec.template"
"#,
        &seen,
    );
    controller.check().expect("valid");
    assert_eq!(controller.config().targets.kinds.len(), 1);
}

#[tokio::test]
async fn unknown_fields_and_sections_are_errors_naming_their_key() {
    let seen = Arc::default();
    let error = controller("[targets.gadget]\nplurral = \"x\"\n", &seen)
        .check()
        .unwrap_err()
        .to_string();
    assert!(error.contains("targets.gadget.plurral"), "{error}");

    let error = controller("[targets.widget]\nplural = \"x\"\n", &seen)
        .check()
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("targets.widget") && error.contains("configured: kinds, gadget"),
        "{error}"
    );

    let error = controller("[sources.motdd]\ninterval = \"1m\"\n", &seen)
        .check()
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("sources.motdd")
            && error.contains("configured: configmap, secret, consul, kubernetes, motd"),
        "{error}"
    );
}

/// A misspelt section leaves the one meant empty: the typo is what is
/// reported, with the name meant, not the empty section's missing field.
#[tokio::test]
async fn a_misspelt_section_is_named_with_the_section_meant() {
    #[derive(Default, serde::Deserialize)]
    #[serde(default)]
    struct EnvFileConfig {
        root: String,
    }
    let controller = Controller::from_figment(
        figment("[sources.envfil]\nroot = \"/srv\"\n"),
        nudge::testing::offline_client(),
    )
    .expect("loads")
    .with_configured_source("envfile", |config: EnvFileConfig| {
        if config.root.is_empty() {
            return Err("root is required");
        }
        Ok(nudge::source::poll(Motd(
            SourceName::new("envfile").unwrap(),
        )))
    });
    let error = controller.check().unwrap_err().to_string();
    assert!(
        error.contains("sources.envfil:") && error.contains("did you mean sources.envfile?"),
        "{error}"
    );
    assert!(!error.contains("root is required"), "{error}");
}

#[tokio::test]
async fn the_effective_configuration_prints_custom_sections_with_secrets_redacted() {
    let seen = Arc::default();
    let controller = controller(
        "[sources.motd]\ninterval = \"1m\"\n\n[targets.gadget]\nplural = \"gadgets\"\n",
        &seen,
    );
    let mut config = controller.effective_config();
    assert!(config.sources.custom.contains_key("motd"));
    assert!(config.targets.custom.contains_key("gadget"));
    config.sources.custom.clear();
    assert_eq!(config.targets.kinds.len(), 0);
}

/// `[sources.kubernetes.<name>]` is nudge's own section: checked by `check`
/// even in a configuration given as a value (which nothing validated), and
/// never a custom source's.
#[tokio::test]
async fn kubernetes_sources_are_checked_and_their_section_is_not_for_custom_sources() {
    let mut config = Config::default();
    let mut flags = nudge::config::KubernetesSourceConfig::new("example.com", "v1", "Flags");
    flags.fields = vec!["spec".to_owned()];
    config.sources.kubernetes.insert("flags".to_owned(), flags);
    let error = Controller::from_config(config, nudge::testing::offline_client())
        .check()
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("sources.kubernetes") && error.contains("flags.fields: entry 0"),
        "{error}"
    );

    let seen = Arc::default();
    let error = controller(
        "[sources.kubernetes.flags]\nversion = \"v1\"\nkind = \"Flags\"\n",
        &seen,
    )
    .with_configured_source("kubernetes", |_: MotdConfig| {
        Ok::<_, String>(nudge::source::poll(Motd(SourceName::new("k").unwrap())))
    })
    .check()
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("sources.kubernetes") && error.contains("two components"),
        "{error}"
    );
}
