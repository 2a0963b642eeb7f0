//! nudge's benchmark: the API server double and a real `consul agent -dev`, each
//! a process of its own, are loaded with a cluster; the `nudge` binary runs as its
//! own process against them, and the benchmark drives changes and measures all
//! three from the outside, so that a figure says whose time it is:
//!
//! - nudge's start-to-ready time, RSS, and CPU time per phase (start-up, initial
//!   stamps, idle, each source kind's changes, restarts) from `/proc/<pid>`,
//!   beside the CPU time of the double and of the agent in the same phases;
//! - change→PATCH latency and nudge's API requests from the double's request log,
//!   read across the process boundary (`GET /_double/request-log`: arrival in
//!   wall-clock microseconds, comparable with this process's clock, and the
//!   double's service time per request);
//! - the Consul agent's response times from a timestamping proxy between nudge and
//!   the agent (`consul_proxy`), whose own overhead is measured and reported, so
//!   that a Consul change's latency splits into the agent's part and nudge's;
//! - connections to Consul from `/proc/net/tcp` matched against nudge's sockets.
//!
//! ```sh
//! cargo run --release --example loadtest -- --scale small   # 1 workload, 1 ConfigMap, 1 Consul key
//! cargo run --release --example loadtest -- --scale large   # 1×: 2k workloads, 20k objects
//! cargo run --release --example loadtest -- --scale xl      # 10×: 20k workloads, 200k objects
//! cargo run --release --example loadtest -- --scale ci      # counts only; CI runs it as a test
//! ```
//!
//! Options: `--scale ci|small|large|xl` (default large); `--nudge PATH` and
//! `--double PATH` (default: build this profile's `nudge` and `apiserver-double`;
//! `--nudge` lets an old and a new binary face the same benchmark); `--out PATH`
//! (default `<target>/loadtest-<scale>.json`); `--log PATH` (nudge's log; default
//! beside the JSON, as is the double's); `--nudge-env NAME=VALUE`;
//! `--ready-within SECONDS`; `--plot-only` (redraw the plot and exit). After each
//! run, the plot `loadtest-scales.svg` beside the JSON is redrawn from the
//! `loadtest-<scale>.json` files there: steady and peak RSS and change→PATCH p99
//! against scale. Prints tables and writes the same figures as JSON. Exits 1 when
//! a count check fails (LISTs per change, PATCHes per change, PATCHes after
//! restart); timing targets are reported, never enforced.
//!
//! All traffic stays on 127.0.0.1. Every wait has a deadline.

#[path = "../../tests/it/support/consul.rs"]
mod consul_support;

mod analysis;
mod binaries;
mod consul_proxy;
mod double;
mod measure;
mod model;
mod nudge;
mod phases;
mod plot;
mod procfs;
mod report;
mod requests;
mod scale;
mod stats;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};

pub use report::Report;
pub use scale::Scale;

/// The default of [`Options::ready_within`].
pub const READY_WITHIN: Duration = Duration::from_secs(300);

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    pub scale: Scale,
    /// The `nudge` binary; `None`: build this profile's and use it.
    pub nudge: Option<PathBuf>,
    /// The `apiserver-double` binary; `None`: build this profile's and use it.
    pub double: Option<PathBuf>,
    /// Where the JSON goes; `None`: `<target>/loadtest-<scale>.json`.
    pub out: Option<PathBuf>,
    /// nudge's log file; `None`: beside the JSON.
    pub log: Option<PathBuf>,
    /// Progress lines on stderr.
    pub verbose: bool,
    /// Extra environment for nudge (experiments, e.g. allocator settings).
    pub nudge_env: Vec<(String, String)>,
    /// How long nudge may take to become ready: a deadline for a nudge that
    /// hangs, not a target (300 s; a fresh nudge at 10× with 400,000 Secrets
    /// took 90 s on the loaded 2-core development machine, and one under a heap
    /// profiler takes longer).
    pub ready_within: Duration,
}

/// Runs the benchmark: measures, then reports (the JSON and the plot written).
pub async fn run(options: Options) -> Result<Report> {
    let measured = measure::run(&options).await?;
    report::report(&measured)
}

fn parse_args() -> Result<Options> {
    let mut options = Options {
        scale: Scale::large(),
        nudge: None,
        double: None,
        out: None,
        log: None,
        verbose: true,
        nudge_env: Vec::new(),
        ready_within: READY_WITHIN,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--scale" => {
                let name = value()?;
                options.scale = Scale::named(&name)
                    .with_context(|| format!("unknown scale {name:?} (ci, small, large or xl)"))?;
            }
            "--nudge" => options.nudge = Some(value()?.into()),
            "--double" => options.double = Some(value()?.into()),
            "--out" => options.out = Some(value()?.into()),
            "--log" => options.log = Some(value()?.into()),
            "--quiet" => options.verbose = false,
            "--ready-within" => {
                let seconds = value()?;
                let seconds: u64 = seconds
                    .parse()
                    .with_context(|| format!("--ready-within {seconds:?}: expected seconds"))?;
                options.ready_within = Duration::from_secs(seconds);
            }
            "--plot-only" => {
                // Redraws the plot from the JSON files of earlier runs.
                let dir = binaries::target_dir()?;
                let svg = dir.join("loadtest-scales.svg");
                plot::write_plot(&dir, &svg)?;
                println!("plot: {}", svg.display());
                std::process::exit(0);
            }
            "--nudge-env" => {
                let pair = value()?;
                let (k, v) = pair
                    .split_once('=')
                    .with_context(|| format!("--nudge-env {pair:?}: expected NAME=VALUE"))?;
                options.nudge_env.push((k.to_owned(), v.to_owned()));
            }
            "-h" | "--help" => {
                println!(
                    "usage: loadtest [--scale ci|small|large|xl] [--nudge PATH] [--double PATH] [--out PATH] [--log PATH] [--nudge-env NAME=VALUE]... [--ready-within SECONDS] [--quiet] [--plot-only]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    Ok(options)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let report = match parse_args() {
        Ok(options) => run(options).await,
        Err(error) => Err(error),
    };
    match report {
        Ok(report) => {
            print!("{}", report.table);
            if report.count_failures.is_empty() {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            }
        }
        Err(error) => {
            eprintln!("loadtest: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
