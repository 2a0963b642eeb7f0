//! The `nudge` command line, for the `nudge` binary and for an embedder's own
//! binary: [`run`] gives it `run`, `explain`, `check-config` and `version`, with
//! the embedder's sources and targets in every command; [`Binary`] does the
//! same under the embedder's own name, version and description.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # fn my_source() -> Arc<dyn nudge::source::Source> { unimplemented!() }
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     nudge::cli::Binary::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"))
//!         .about("Rolls workloads when their files change.")
//!         .run(|controller| controller.with_source(my_source()))
//!         .await
//! }
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use figment::Figment;

use crate::config::{Config, LogFormat, Overrides};
use crate::runtime::{Controller, RollbackError, RollbackTo};

/// Runs the command line of `std::env::args()` as the `nudge` binary: the
/// controller (`run`), `explain`, `check-config` or `version`. `customize`
/// adds the embedder's sources and targets to the controller every command
/// builds. [`Binary`] runs it under another name.
pub async fn run(customize: impl FnOnce(Controller) -> Controller) -> ExitCode {
    Binary::nudge().run(customize).await
}

/// The command line of a binary built on nudge: [`run`]'s commands under the
/// binary's own name and version, which `--help`, `--version`, `version`,
/// `check-config` and every error message show.
pub struct Binary {
    name: &'static str,
    version: &'static str,
    about: Option<&'static str>,
    providers: Box<dyn FnOnce(Figment) -> Figment + Send>,
}

impl std::fmt::Debug for Binary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Binary")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("about", &self.about)
            .finish_non_exhaustive()
    }
}

impl Binary {
    /// A binary called `name` (as `--help` and error messages say it), at
    /// `version`: usually `env!("CARGO_PKG_NAME")` and
    /// `env!("CARGO_PKG_VERSION")`. `version` prints nudge's version beside it.
    pub fn new(name: &'static str, version: &'static str) -> Self {
        Self {
            name,
            version,
            about: None,
            providers: Box::new(|figment| figment),
        }
    }

    /// The `nudge` binary itself.
    fn nudge() -> Self {
        Self::new("nudge", env!("CARGO_PKG_VERSION")).about(env!("CARGO_PKG_DESCRIPTION"))
    }

    /// What `--help` says the binary does (one line).
    pub fn about(mut self, about: &'static str) -> Self {
        self.about = Some(about);
        self
    }

    /// Configuration providers of the binary's own: `providers` gets nudge's
    /// stack (defaults, TOML file, `NUDGE_*` variables, flags) and returns it
    /// with its own merged in.
    pub fn providers(
        mut self,
        providers: impl FnOnce(Figment) -> Figment + Send + 'static,
    ) -> Self {
        self.providers = Box::new(providers);
        self
    }

    /// Runs the command line of `std::env::args()`, as [`run`] does.
    pub async fn run(self, customize: impl FnOnce(Controller) -> Controller) -> ExitCode {
        let mut command = Cli::command()
            .name(self.name)
            .bin_name(self.name)
            .version(self.version);
        if let Some(about) = self.about {
            command = command.about(about);
        }
        let cli = match Cli::from_arg_matches(&command.get_matches()) {
            Ok(cli) => cli,
            Err(error) => error.exit(),
        };
        let name = Name {
            name: self.name,
            version: self.version,
        };
        cli.run(name, self.providers, customize).await
    }
}

/// How the binary calls itself in what it prints.
#[derive(Debug, Clone, Copy)]
struct Name {
    name: &'static str,
    version: &'static str,
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
    log_format: Option<LogFormatArg>,
    /// tracing filter directives, e.g. `info,nudge=debug` (overrides log.filter).
    #[arg(long, global = true, value_name = "FILTER")]
    log_filter: Option<String>,
    #[command(subcommand)]
    command: Command,
}

/// `--log-format`: [`LogFormat`]'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormatArg {
    /// Human-readable lines.
    Plain,
    /// One JSON object per line.
    Json,
}

impl From<LogFormatArg> for LogFormat {
    fn from(format: LogFormatArg) -> Self {
        match format {
            LogFormatArg::Plain => LogFormat::Plain,
            LogFormatArg::Json => LogFormat::Json,
        }
    }
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
        binary: Name,
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
            println!("{}", version(binary));
            return ExitCode::SUCCESS;
        }
        let overrides = Overrides {
            log_format: log_format.map(LogFormat::from),
            log_filter,
        };
        let figment = match Config::providers(config.as_deref()) {
            Ok(figment) => providers(figment.merge(overrides.figment())),
            Err(error) => return config_failed(binary, &error),
        };
        let config = match Config::from_figment(&figment) {
            Ok(config) => config,
            Err(error) => return config_failed(binary, &error),
        };
        if let Command::CheckConfig = command {
            let controller =
                Controller::assemble(config, figment, crate::runtime::offline_client());
            return check_config(binary, &customize(controller));
        }
        crate::telemetry::init_logging(&config.log);
        let client = match crate::runtime::kube_client().await {
            Ok(client) => client,
            Err(error) => {
                eprintln!(
                    "{}: cannot configure the Kubernetes client: {}. To fix: point KUBECONFIG at a cluster (or run in a pod with a service account).",
                    binary.name,
                    crate::errors::error_chain(&error)
                );
                return ExitCode::FAILURE;
            }
        };
        let controller =
            customize(Controller::assemble(config, figment, client).operate_as_configured());
        match command {
            Command::Run => run_controller(binary, controller).await,
            Command::Explain {
                workload,
                namespace,
                output,
                timeout,
                history,
            } => {
                let show = Show { output, history };
                let workload = (workload.as_str(), namespace.as_deref());
                explain(binary, &controller, workload, show, timeout).await
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
fn config_failed(binary: Name, error: &crate::config::ConfigError) -> ExitCode {
    eprintln!("{}: {error}", binary.name);
    ExitCode::from(2)
}

/// `check-config`: every configuration problem, or the effective
/// configuration as TOML, secrets redacted.
fn check_config(binary: Name, controller: &Controller) -> ExitCode {
    if let Err(error) = controller.check() {
        return config_failed(binary, &error);
    }
    match toml::to_string(&controller.effective_config()) {
        Ok(text) => {
            println!(
                "# {} {}: the configuration is valid",
                binary.name, binary.version
            );
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            let name = binary.name;
            eprintln!("{name} check-config: cannot print the configuration: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The `version` line: the binary's, and nudge's when the binary is another.
fn version(binary: Name) -> String {
    let nudge = env!("CARGO_PKG_VERSION");
    let api = crate::KUBERNETES_MIN_VERSION;
    if binary.name == "nudge" {
        return format!("nudge {nudge} (Kubernetes API {api}+)");
    }
    format!(
        "{} {} (nudge {nudge}, Kubernetes API {api}+)",
        binary.name, binary.version
    )
}

async fn run_controller(binary: Name, controller: Controller) -> ExitCode {
    tracing::info!(binary = binary.name, version = binary.version, "starting");
    let shutdown = crate::runtime::shutdown::on_signal();
    match controller.run(shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let text = crate::errors::error_chain(&error);
            let hint = error.hint();
            tracing::error!(error = %text, hint = hint.as_deref().unwrap_or(""), "{} stopped", binary.name);
            eprintln!("{}: {}", binary.name, one_line(&text, hint.as_deref()));
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

/// How `explain` shows its report.
struct Show {
    output: ExplainFormat,
    history: bool,
}

async fn explain(
    binary: Name,
    controller: &Controller,
    (workload, namespace): (&str, Option<&str>),
    show: Show,
    timeout: std::time::Duration,
) -> ExitCode {
    let failed = |problem: &dyn std::fmt::Display| eprintln!("{} explain: {problem}", binary.name);
    let Some((kind, name)) = workload.split_once('/') else {
        failed(&format_args!("expected <kind>/<name>, got {workload:?}"));
        return ExitCode::from(2);
    };
    let report = match controller.explain(kind, namespace, name, timeout).await {
        Ok(report) => report,
        Err(error @ crate::explain::ExplainError::UnknownKind(_)) => {
            failed(&error);
            return ExitCode::from(2);
        }
        Err(error) => {
            failed(&crate::errors::error_chain(&error));
            return ExitCode::FAILURE;
        }
    };
    match show.output {
        ExplainFormat::Table => {
            print!("{report}");
            if show.history {
                print!("{}", report.history_table());
            }
        }
        ExplainFormat::Json => match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(error) => {
                failed(&format_args!("cannot encode the report: {error}"));
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
