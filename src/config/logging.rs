//! `[log]`.

use serde::{Deserialize, Serialize};

use super::Problem;

/// `[log]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct LogConfig {
    /// `plain` or `json`.
    pub format: LogFormat,
    /// A `tracing` env-filter directive.
    pub filter: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Plain,
            // consulrs logs every request at INFO.
            filter: "info,consulrs=warn".to_owned(),
        }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum LogFormat {
    /// Human-readable lines.
    Plain,
    /// One JSON object per line.
    Json,
}

impl LogConfig {
    pub(super) fn problem(&self) -> Problem {
        tracing_subscriber::EnvFilter::try_new(&self.filter)
            .err()
            .map(|e| ("log.filter", format!("is not a valid filter: {e}")))
    }
}
