//! The `nudge` command line: `run`, `explain`, `version`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use nudge::config::{Config, LogFormat, Overrides};

/// Rolls Kubernetes workloads when the ConfigMaps, Secrets or Consul keys they
/// depend on change.
#[derive(Debug, Parser)]
#[command(name = "nudge", version, about, long_about = None)]
pub struct Cli {
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
        /// rollout, or the kind of a `[[targets]]` entry).
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
    },
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
    pub async fn run(self) -> ExitCode {
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
        let config = match Config::load(config.as_deref(), &overrides) {
            Ok(config) => config,
            Err(error) => {
                eprintln!("nudge: {error}");
                return ExitCode::from(2);
            }
        };
        crate::telemetry::init_logging(&config.log);
        match command {
            Command::Run => run(config).await,
            Command::Explain {
                workload,
                namespace,
                output,
                timeout,
            } => explain(&config, &workload, namespace.as_deref(), output, timeout).await,
            Command::Version => unreachable!("handled above"),
        }
    }
}

/// `nudge version` output.
pub fn version() -> String {
    format!(
        "nudge {} (Kubernetes API {}+)",
        env!("CARGO_PKG_VERSION"),
        nudge::KUBERNETES_MIN_VERSION
    )
}

async fn run(config: Config) -> ExitCode {
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "starting");
    let shutdown = nudge::runtime::shutdown::on_signal();
    match nudge::runtime::run(config, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let text = nudge::error_chain(&error);
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

async fn explain(
    config: &Config,
    workload: &str,
    namespace: Option<&str>,
    output: ExplainFormat,
    timeout: std::time::Duration,
) -> ExitCode {
    let Some((kind_name, name)) = workload.split_once('/') else {
        eprintln!("nudge explain: expected <kind>/<name>, got {workload:?}");
        return ExitCode::from(2);
    };
    let Some(kind) = nudge::explain::resolve_kind(kind_name, config) else {
        eprintln!(
            "nudge explain: unknown kind {kind_name:?} (deployment, statefulset, daemonset, cronjob, job, rollout, or a [[targets]] kind)"
        );
        return ExitCode::from(2);
    };
    let client = match kube::Client::try_default().await {
        Ok(client) => client,
        Err(error) => {
            eprintln!(
                "nudge explain: cannot configure the Kubernetes client: {}",
                nudge::error_chain(&error)
            );
            return ExitCode::FAILURE;
        }
    };
    let namespace = namespace.unwrap_or(client.default_namespace()).to_owned();
    let report =
        match nudge::explain::explain(client, config, &kind, &namespace, name, timeout).await {
            Ok(report) => report,
            Err(error) => {
                eprintln!("nudge explain: {}", nudge::error_chain(&error));
                return ExitCode::FAILURE;
            }
        };
    match output {
        ExplainFormat::Table => print!("{}", report.to_table()),
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
