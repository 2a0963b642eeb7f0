//! The `nudge` command line: `run`, `explain`, `version`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::config::{Config, LogFormat, Overrides};
use crate::model::{WorkloadId, WorkloadKind};

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
        /// The workload, as `<kind>/<name>` (kind: deployment, statefulset, daemonset).
        workload: String,
        /// Its namespace.
        #[arg(short, long, default_value = "default")]
        namespace: String,
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
            } => explain(&config, &workload, &namespace, output, timeout).await,
            Command::Version => unreachable!("handled above"),
        }
    }
}

/// `nudge version` output.
pub fn version() -> String {
    format!(
        "nudge {} (Kubernetes API {}+)",
        env!("CARGO_PKG_VERSION"),
        crate::KUBERNETES_MIN_VERSION
    )
}

async fn run(config: Config) -> ExitCode {
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "starting");
    let shutdown = crate::runtime::shutdown::on_signal();
    match crate::runtime::run(config, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(error = %error_chain(&error), "nudge stopped");
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}

async fn explain(
    config: &Config,
    workload: &str,
    namespace: &str,
    output: ExplainFormat,
    timeout: std::time::Duration,
) -> ExitCode {
    let Some((kind, name)) = workload.split_once('/') else {
        eprintln!("nudge explain: expected <kind>/<name>, got {workload:?}");
        return ExitCode::from(2);
    };
    let Some(kind) = WorkloadKind::parse(kind) else {
        eprintln!("nudge explain: unknown kind {kind:?} (deployment, statefulset, daemonset)");
        return ExitCode::from(2);
    };
    let id = WorkloadId::new(kind, namespace, name);
    let client = match kube::Client::try_default().await {
        Ok(client) => client,
        Err(error) => {
            eprintln!(
                "nudge explain: cannot configure the Kubernetes client: {}",
                error_chain(&error)
            );
            return ExitCode::FAILURE;
        }
    };
    let report = match crate::explain::explain(client, config, &id, timeout).await {
        Ok(report) => report,
        Err(error) => {
            eprintln!("nudge explain: {}", error_chain(&error));
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
