//! `nudge check-config`, the compiled binary with no cluster: a label selector
//! that kube-apiserver would refuse, or an unknown kind to turn off, stops it
//! with one line naming the key; Reloader's `key:value` selectors and the
//! durations print as a person writes them and load back to the same values.

use std::process::Output;

/// Runs `nudge check-config` with `env` only.
fn check_config(env: &[(&str, &str)]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_nudge"))
        .arg("check-config")
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .expect("run nudge check-config")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_selector_kube_apiserver_would_refuse_is_a_configuration_error_naming_its_key() {
    let output = check_config(&[("NUDGE_KUBERNETES__NAMESPACE_SELECTOR", "team in (a,b")]);
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
    let error = stderr(&output);
    assert!(
        error.contains("kubernetes.namespace_selector")
            && error.contains("is not a label selector")
            && error.contains("NUDGE_KUBERNETES__NAMESPACE_SELECTOR"),
        "{error}"
    );
    assert_eq!(error.lines().count(), 1, "{error}");
}

#[test]
fn an_unknown_kind_to_turn_off_is_a_configuration_error_naming_its_key() {
    let output = check_config(&[("NUDGE_KUBERNETES__IGNORE_KINDS", "[cronjobs, Widgets]")]);
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
    assert!(
        stderr(&output).contains("kubernetes.ignore_kinds"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn the_effective_configuration_is_written_as_a_person_would_and_loads_back() {
    let output = check_config(&[
        ("NUDGE_KUBERNETES__SOURCE_LABEL_SELECTOR", "app:web"),
        ("NUDGE_WEBHOOK__CERTIFICATE_VALIDITY", "365d"),
        ("NUDGE_ENGINE__MAX_DELAY", "90m"),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    for line in [
        "source_label_selector = \"app=web\"",
        "certificate_validity = \"365d\"",
        "max_delay = \"1h 30m\"",
    ] {
        assert!(text.contains(line), "no {line:?} in\n{text}");
    }
    let printed: nudge::config::Config = nudge::figment::Figment::from(
        nudge::figment::providers::Serialized::defaults(nudge::config::Config::default()),
    )
    .merge(<nudge::figment::providers::Toml as nudge::figment::providers::Format>::string(&text))
    .extract()
    .expect("the printed configuration loads");
    assert_eq!(
        printed.webhook.certificate_validity,
        std::time::Duration::from_secs(365 * 86_400)
    );
    assert_eq!(printed.kubernetes.source_label_selector, "app=web");
}
