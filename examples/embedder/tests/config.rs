//! (c) The custom sources are configured like nudge's own: from `[sources.file]`
//! of the TOML file or `NUDGE_SOURCES__FILE__*`, checked by `check-config`,
//! an unknown field named with its full key. The binary is run as a user runs
//! it, so the environment of each run is its own.

use std::process::{Command, Output};

use nudge::Controller;
use nudge::kube::Client;

const BINARY: &str = env!("CARGO_BIN_EXE_nudge-embedder");

/// `nudge-embedder <args>` with no `NUDGE_*` variable but `env`.
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(BINARY);
    command.args(args);
    for (name, _) in std::env::vars().filter(|(name, _)| name.starts_with("NUDGE_")) {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    command.output().expect("the binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn config_file(dir: &tempfile::TempDir, text: &str) -> String {
    let path = dir.path().join("nudge.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn the_toml_file_configures_the_file_root_and_the_http_interval() {
    let dir = tempfile::tempdir().unwrap();
    let file = config_file(
        &dir,
        "[sources.file]\nroot = \"/srv/config\"\n\n[sources.http]\ninterval = \"45s\"\n",
    );
    let output = run(&["--config", &file, "check-config"], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let printed: toml::Value = toml::from_str(&stdout(&output)).unwrap();
    assert_eq!(
        printed["sources"]["file"]["root"].as_str(),
        Some("/srv/config")
    );
    assert_eq!(printed["sources"]["http"]["interval"].as_str(), Some("45s"));
}

#[test]
fn the_environment_configures_the_file_root_over_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = config_file(&dir, "[sources.file]\nroot = \"/srv/config\"\n");
    let output = run(
        &["--config", &file, "check-config"],
        &[("NUDGE_SOURCES__FILE__ROOT", "/from/env")],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let printed: toml::Value = toml::from_str(&stdout(&output)).unwrap();
    assert_eq!(
        printed["sources"]["file"]["root"].as_str(),
        Some("/from/env")
    );
    // Without a file at all.
    let output = run(
        &["check-config"],
        &[("NUDGE_SOURCES__FILE__ROOT", "/from/env")],
    );
    assert!(output.status.success(), "{}", stderr(&output));
}

#[test]
fn an_unknown_field_fails_naming_its_key_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = config_file(&dir, "[sources.file]\nrooot = \"/srv/config\"\n");
    let output = run(&["--config", &file, "check-config"], &[]);
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
    let message = stderr(&output);
    assert!(message.contains("sources.file.rooot"), "{message}");
    assert!(message.contains(&file), "{message}");
}

#[test]
fn a_missing_root_fails_saying_how_to_set_it() {
    let output = run(&["check-config"], &[]);
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
    let message = stderr(&output);
    assert!(message.contains("sources.file"), "{message}");
    assert!(message.contains("NUDGE_SOURCES__FILE__ROOT"), "{message}");
}

fn bad_interval() -> Output {
    run(
        &["check-config"],
        &[
            ("NUDGE_SOURCES__FILE__ROOT", "/srv/config"),
            ("NUDGE_SOURCES__HTTP__INTERVAL", "soon"),
        ],
    )
}

#[test]
fn a_bad_interval_stops_check_config() {
    let output = bad_interval();
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
    let message = stderr(&output);
    assert!(message.contains("interval"), "{message}");
    assert!(message.contains("expected a duration"), "{message}");
}

/// What the message should say. Today it says `interval.sources.http` and
/// `NUDGE_INTERVAL__SOURCES__HTTP`: nudge's `config::section` keeps figment's
/// `extract_inner` error path, which appends the section's path instead of
/// prefixing it (see the embedder's report).
#[test]
fn a_bad_interval_fails_naming_its_key_and_environment_variable() {
    let message = stderr(&bad_interval());
    assert!(message.contains("sources.http.interval"), "{message}");
    assert!(
        message.contains("NUDGE_SOURCES__HTTP__INTERVAL"),
        "{message}"
    );
}

#[test]
fn version_is_nudges() {
    let output = run(&["version"], &[]);
    assert!(output.status.success());
    assert!(stdout(&output).starts_with("nudge "), "{}", stdout(&output));
}

/// The same through the library: `Config::providers` + `Controller::from_figment`
/// + `Controller::check`, as an embedder with its own `main` would.
#[tokio::test]
async fn the_library_path_reads_the_same_sections() {
    let dir = tempfile::tempdir().unwrap();
    let good = config_file(&dir, "[sources.file]\nroot = \"/srv/config\"\n");
    let controller = embedder_controller(&good);
    controller.check().unwrap();
    let effective = toml::Value::try_from(controller.effective_config()).unwrap();
    assert_eq!(
        effective["sources"]["file"]["root"].as_str(),
        Some("/srv/config")
    );

    let bad = config_file(&dir, "[sources.file]\nrooot = \"/srv/config\"\n");
    let error = embedder_controller(&bad).check().unwrap_err();
    assert!(error.to_string().contains("sources.file.rooot"), "{error}");
}

fn embedder_controller(file: &str) -> Controller {
    let figment = nudge::Config::providers(Some(std::path::Path::new(file))).unwrap();
    let controller = Controller::from_figment(figment, offline_client()).unwrap();
    nudge_embedder::customize(controller)
}

/// A client that is never used: `check` reads no cluster.
fn offline_client() -> Client {
    nudge::testing::offline_client()
}
