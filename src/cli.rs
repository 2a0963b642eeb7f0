//! The `nudge` command line, for the `nudge` binary and for an embedder's own
//! binary: [`run`] gives it `run`, `explain`, `check-config` and `version`, with
//! the embedder's sources and targets in every command.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # fn my_source() -> Arc<dyn nudge::source::Source> { unimplemented!() }
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     nudge::cli::run(|controller| controller.with_source(my_source())).await
//! }
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use figment::Figment;

use crate::config::{Config, LogFormat, Overrides};
use crate::runtime::{Controller, RollbackError, RollbackTo};

/// Runs the command line of `std::env::args()`: the controller (`run`),
/// `explain`, `check-config` or `version`. `customize` adds the embedder's
/// sources and targets to the controller every command builds.
pub async fn run(customize: impl FnOnce(Controller) -> Controller) -> ExitCode {
    run_with(|figment| figment, customize).await
}

/// [`run`], with configuration providers of the embedder's own: `providers`
/// gets nudge's stack (defaults, TOML file, `NUDGE_*` variables, flags) and
/// returns it with its own merged in.
pub async fn run_with(
    providers: impl FnOnce(Figment) -> Figment,
    customize: impl FnOnce(Controller) -> Controller,
) -> ExitCode {
    Cli::parse().run(providers, customize).await
}

/// Rolls Kubernetes workloads when the ConfigMaps, Secrets or Consul keys they
/// depend on change.
#[derive(Debug, Parser)]
#[command(name = "nudge", version, about, long_about = None)]
struct Cli {
    /// TOML config file (see config.example.toml).
    #[arg(long, global = true, env = "NUDGE_CONFIG", value_name = "PATH")]
    config: Option<PathBuf>,
    /// Log format (overrides log.format).
    #[arg(long, global = true, value_enum)]
    log_format: Option<LogFormat>,
    /// tracing filter directives, e.g. `info,nudge=debug` (overrides log.filter).
    #[arg(long, global = true, value_name = "FILTER")]
    log_filter: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the controller.
    Run,
    /// Show what a workload tracks and why it is or is not in sync.
    Explain {
        /// The workload, as `<kind>/<name>` (kind: deployment, statefulset, daemonset,
        /// cronjob, job, rollout, the kind of a `[[targets]]` entry, or of a target
        /// registered in code).
        workload: String,
        /// Its namespace (default: the kubeconfig context's namespace, as kubectl).
        #[arg(short, long)]
        namespace: Option<String>,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = ExplainFormat::Table)]
        output: ExplainFormat,
        /// Deadline for reading each input (humantime, e.g. `10s`).
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        timeout: std::time::Duration,
        /// Also show the workload's config history: each revision, what changed
        /// and who changed it, the values before and after, and how its rollout
        /// ended (table output; JSON always has it).
        #[arg(long)]
        history: bool,
    },
    /// Roll a workload back to a previous revision's snapshot (`engine.snapshots`):
    /// sets its `rollback-to` annotation; the controller points its pod template
    /// at that revision's copies and holds the sources' changes until released.
    Rollback {
        /// The workload, as `<kind>/<name>` (as `nudge explain` takes it).
        workload: String,
        /// Its namespace (default: the kubeconfig context's namespace, as kubectl).
        #[arg(short, long)]
        namespace: Option<String>,
        /// The revision of its history to restore (`nudge explain --history`
        /// lists the restorable ones; default: the newest completed revision
        /// before the one it runs).
        #[arg(long, value_name = "N", conflicts_with = "release")]
        to_revision: Option<u32>,
        /// Remove `rollback-to` instead: the workload follows its sources again
        /// (nudge stamps their newest content).
        #[arg(long)]
        release: bool,
    },
    /// Validate the configuration (file, `NUDGE_*` variables, flags) and print
    /// the effective configuration, secrets redacted. Reads no cluster.
    CheckConfig,
    /// Print the version.
    Version,
}

/// `nudge explain -o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ExplainFormat {
    /// A human table.
    Table,
    /// JSON for scripts.
    Json,
}

impl Cli {
    /// Runs the chosen subcommand; the exit code says whether it succeeded.
    async fn run(
        self,
        providers: impl FnOnce(Figment) -> Figment,
        customize: impl FnOnce(Controller) -> Controller,
    ) -> ExitCode {
        let Cli {
            config,
            log_format,
            log_filter,
            command,
        } = self;
        if let Command::Version = command {
            println!("{}", version());
            return ExitCode::SUCCESS;
        }
        let overrides = Overrides {
            log_format,
            log_filter,
        };
        let figment = match Config::providers(config.as_deref(), &overrides) {
            Ok(figment) => providers(figment),
            Err(error) => return config_failed(&error),
        };
        let config = match Config::from_figment(&figment) {
            Ok(config) => config,
            Err(error) => return config_failed(&error),
        };
        if let Command::CheckConfig = command {
            let controller = Controller::assemble(config, figment, offline_client());
            return check_config(&customize(controller));
        }
        crate::telemetry::init_logging(&config.log);
        let client = match kube::Client::try_default().await {
            Ok(client) => client,
            Err(error) => {
                eprintln!(
                    "nudge: cannot configure the Kubernetes client: {}. To fix: point KUBECONFIG at a cluster (or run in a pod with a service account).",
                    crate::errors::error_chain(&error)
                );
                return ExitCode::FAILURE;
            }
        };
        let controller =
            customize(Controller::assemble(config, figment, client).operate_as_configured());
        match command {
            Command::Run => run_controller(controller).await,
            Command::Explain {
                workload,
                namespace,
                output,
                timeout,
                history,
            } => {
                let show = Show { output, history };
                explain(&controller, &workload, namespace.as_deref(), show, timeout).await
            }
            Command::Rollback {
                workload,
                namespace,
                to_revision,
                release,
            } => {
                let to = if release {
                    RollbackTo::Release
                } else {
                    RollbackTo::Revision(to_revision)
                };
                rollback(&controller, &workload, namespace.as_deref(), to).await
            }
            Command::Version | Command::CheckConfig => unreachable!("handled above"),
        }
    }
}

/// A configuration problem: one line, exit code 2.
fn config_failed(error: &crate::config::ConfigError) -> ExitCode {
    eprintln!("nudge: {error}");
    ExitCode::from(2)
}

/// A client that answers every request with an error: `check-config` builds
/// the controller, with its custom sources, without a cluster, and so can an
/// embedder's test of its configuration (`Controller::from_figment`, then
/// [`Controller::check`]). Call it inside a tokio runtime.
pub fn offline_client() -> kube::Client {
    let refuse = tower::service_fn(|_: http::Request<kube::client::Body>| async {
        Err::<http::Response<kube::client::Body>, _>(std::io::Error::other(
            "check-config reads no cluster",
        ))
    });
    kube::Client::new(refuse, "default")
}

/// `nudge check-config`: every configuration problem, or the effective
/// configuration as TOML, secrets redacted.
fn check_config(controller: &Controller) -> ExitCode {
    if let Err(error) = controller.check() {
        return config_failed(&error);
    }
    match toml::to_string(&controller.effective_config()) {
        Ok(text) => {
            println!(
                "# nudge {}: the configuration is valid",
                env!("CARGO_PKG_VERSION")
            );
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("nudge check-config: cannot print the configuration: {error}");
            ExitCode::FAILURE
        }
    }
}

/// `nudge version` output.
fn version() -> String {
    format!(
        "nudge {} (Kubernetes API {}+)",
        env!("CARGO_PKG_VERSION"),
        crate::KUBERNETES_MIN_VERSION
    )
}

async fn run_controller(controller: Controller) -> ExitCode {
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "starting");
    let shutdown = crate::runtime::shutdown::on_signal();
    match controller.run(shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let text = crate::errors::error_chain(&error);
            let hint = error.hint();
            tracing::error!(error = %text, hint = hint.as_deref().unwrap_or(""), "nudge stopped");
            eprintln!("nudge: {}", one_line(&text, hint.as_deref()));
            ExitCode::FAILURE
        }
    }
}

/// A fatal error for people: what happened and, when known, what to do.
fn one_line(error: &str, hint: Option<&str>) -> String {
    match hint {
        Some(hint) => format!("{error}. To fix: {hint}."),
        None => error.to_owned(),
    }
}

/// How `nudge explain` shows its report.
struct Show {
    output: ExplainFormat,
    history: bool,
}

async fn explain(
    controller: &Controller,
    workload: &str,
    namespace: Option<&str>,
    show: Show,
    timeout: std::time::Duration,
) -> ExitCode {
    let Some((kind, name)) = workload.split_once('/') else {
        eprintln!("nudge explain: expected <kind>/<name>, got {workload:?}");
        return ExitCode::from(2);
    };
    let report = match controller.explain(kind, namespace, name, timeout).await {
        Ok(report) => report,
        Err(error @ crate::explain::ExplainError::UnknownKind(_)) => {
            eprintln!("nudge explain: {error}");
            return ExitCode::from(2);
        }
        Err(error) => {
            eprintln!("nudge explain: {}", crate::errors::error_chain(&error));
            return ExitCode::FAILURE;
        }
    };
    match show.output {
        ExplainFormat::Table => {
            print!("{}", report.to_table());
            if show.history {
                print!("{}", report.history_table());
            }
        }
        ExplainFormat::Json => match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(error) => {
                eprintln!("nudge explain: cannot encode the report: {error}");
                return ExitCode::FAILURE;
            }
        },
    }
    ExitCode::SUCCESS
}

/// `nudge rollback`: sets or removes the workload's `rollback-to`, then says
/// what the controller will do.
async fn rollback(
    controller: &Controller,
    workload: &str,
    namespace: Option<&str>,
    to: RollbackTo,
) -> ExitCode {
    let Some((kind, name)) = workload.split_once('/') else {
        eprintln!("nudge rollback: expected <kind>/<name>, got {workload:?}");
        return ExitCode::from(2);
    };
    match controller.rollback(kind, namespace, name, to).await {
        Ok(Some(revision)) => {
            println!(
                "{workload}: rollback-to set to revision {revision}; nudge points its pod template at that revision's snapshot and holds the sources' changes until `nudge rollback {workload} --release`"
            );
            ExitCode::SUCCESS
        }
        Ok(None) => {
            println!(
                "{workload}: rollback-to removed; nudge follows its sources again and stamps their newest content"
            );
            ExitCode::SUCCESS
        }
        Err(error @ RollbackError::Workload(crate::explain::ExplainError::UnknownKind(_))) => {
            eprintln!("nudge rollback: {error}");
            ExitCode::from(2)
        }
        Err(error) => {
            eprintln!("nudge rollback: {}", crate::errors::error_chain(&error));
            ExitCode::FAILURE
        }
    }
}
