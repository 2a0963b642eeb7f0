use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    nudge::cli::Cli::parse().run().await
}
