//! Logging set-up.

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat};

/// Installs the global `tracing` subscriber. The filter was validated with the
/// config; a second call (tests) is ignored.
pub fn init_logging(config: &LogConfig) {
    let filter = EnvFilter::try_new(&config.filter).unwrap_or_else(|_| EnvFilter::new("info"));
    // Escape codes only for people: a file, a pipe or a log collector gets plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match config.format {
        LogFormat::Json => builder.json().try_init(),
        // Plain, and any format a newer library adds that this binary predates.
        _ => builder.try_init(),
    };
}
