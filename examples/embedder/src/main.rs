//! nudge's command line (`run`, `explain`, `check-config`, `version`) with the
//! `file` and `http` sources and the Widget target.

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    nudge::cli::run(nudge_embedder::customize).await
}
