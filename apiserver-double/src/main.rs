//! `apiserver-double`: runs the Kubernetes API server double as a process.
//! Prints the kubeconfig path as the first line on stdout, then serves until
//! SIGTERM or SIGINT. A process outside drives it through the admin endpoints
//! under `/_double/` on the same loopback port (README): faults, the request
//! log (also as a stream, `request-log`) and bulk seeding (`objects`).
#![forbid(unsafe_code)]

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use apiserver_double::{ApiServerDouble, Config};
use clap::Parser;

/// jemalloc, not glibc's malloc: at the benchmark's 10× scale the double holds
/// gigabytes of objects, and glibc's malloc spent about a quarter of the
/// double's CPU (consolidating and unlinking free chunks) while nudge's
/// initial stamps ran beside it on the same cores.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Kubernetes API server double for tests.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Where to write the kubeconfig (default: a temporary file removed on exit).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Bearer token to require (default: random).
    #[arg(long)]
    token: Option<String>,
    /// Accept requests without the bearer token.
    #[arg(long)]
    no_auth: bool,
    /// Number of past events kept for watches and exact lists.
    #[arg(long, default_value_t = 10_000)]
    history_limit: usize,
    /// Seconds between watch bookmarks.
    #[arg(long, default_value_t = 5.0)]
    bookmark_interval: f64,
    /// Milliseconds the imitated kube-controller-manager takes per reaction.
    #[arg(long, default_value_t = 5)]
    controller_latency_ms: u64,
    /// How many requests the log keeps (oldest dropped first).
    #[arg(long, default_value_t = 100_000)]
    max_recorded_requests: usize,
    /// Keep no request bodies in the log (a long benchmark's log stays small).
    #[arg(long)]
    no_record_bodies: bool,
}

impl Args {
    async fn run(self) -> Result<(), Box<dyn std::error::Error>> {
        let Args {
            port,
            kubeconfig,
            token,
            no_auth,
            history_limit,
            bookmark_interval,
            controller_latency_ms,
            max_recorded_requests,
            no_record_bodies,
        } = self;
        let config = Config {
            bind: ([127, 0, 0, 1], port).into(),
            kubeconfig_path: kubeconfig,
            token,
            require_auth: !no_auth,
            history_limit,
            bookmark_interval: Duration::from_secs_f64(bookmark_interval.max(0.05)),
            controller_latency: Duration::from_millis(controller_latency_ms),
            max_recorded_requests,
            record_bodies: !no_record_bodies,
            ..Config::default()
        };
        // Listening for the signals before announcing the kubeconfig: a caller
        // that reads it and sends SIGTERM at once must find them handled.
        let signals = Signals::listen()?;
        let api = ApiServerDouble::start_with(config).await?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", api.kubeconfig_path().display())?;
        out.flush()?;
        drop(out);
        eprintln!("apiserver-double listening on {}", api.url());
        signals.wait().await;
        api.shutdown().await;
        Ok(())
    }
}

/// SIGTERM and SIGINT, handled from when they are listened for.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn listen() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Resolves at the first of them.
    async fn wait(mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match Args::parse().run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("apiserver-double: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
