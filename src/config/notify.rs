//! `[notify]`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Secret, duration};

/// `[notify]`: one message per stamp, POSTed to a webhook (Slack, Microsoft Teams,
/// Google Chat, or nudge's own JSON). Off by default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct NotifyConfig {
    /// Whether stamps are notified.
    pub enabled: bool,
    /// The webhook URL. It usually embeds a token: prefer `url_file`.
    pub url: Secret,
    /// File holding the webhook URL (read once at start-up, surrounding whitespace
    /// trimmed), e.g. a key of a Secret mounted as a volume.
    pub url_file: String,
    /// The payload: `slack`, `teams`, `gchat` or `json`.
    pub format: NotifyFormat,
    /// Deadline of one POST, connection included. Failed POSTs are not retried.
    #[serde(with = "duration")]
    pub timeout: Duration,
    /// Text put before every message as `<additional_info> : <message>` (e.g. the
    /// cluster's name), like Reloader's `ALERT_ADDITIONAL_INFO`. Empty: none.
    pub additional_info: String,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            url: Secret::default(),
            url_file: String::new(),
            format: NotifyFormat::Json,
            timeout: Duration::from_secs(10),
            additional_info: String::new(),
        }
    }
}

impl NotifyConfig {
    /// Checks the values; returns the offending key and the problem. Never repeats
    /// the URL (it embeds a token).
    pub(crate) fn problem(&self) -> Option<(&'static str, String)> {
        if !self.url.is_empty() && !self.url_file.is_empty() {
            return Some((
                "notify.url",
                "set either url or url_file, not both".to_owned(),
            ));
        }
        if self.enabled && self.url.is_empty() && self.url_file.is_empty() {
            return Some((
                "notify.enabled",
                "is true but neither notify.url nor notify.url_file is set".to_owned(),
            ));
        }
        if !self.url.is_empty()
            && let Err(problem) = parse_webhook_url(&self.url.0)
        {
            return Some(("notify.url", problem.to_owned()));
        }
        if self.timeout.is_zero() {
            return Some(("notify.timeout", "must be above 0".to_owned()));
        }
        None
    }
}

/// Parses a webhook URL: absolute `http` or `https` with a host. The error says
/// what is wrong without repeating the URL (it embeds a token).
pub(crate) fn parse_webhook_url(text: &str) -> Result<reqwest::Url, &'static str> {
    let url = reqwest::Url::parse(text).map_err(|_| "is not a URL")?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("must be an http:// or https:// URL");
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("has no host");
    }
    Ok(url)
}

/// The payload of notifications.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum NotifyFormat {
    /// A Slack incoming webhook: one attachment with the message.
    Slack,
    /// A Microsoft Teams incoming webhook: `{"text": …}`.
    Teams,
    /// A Google Chat webhook: `{"text": …}`.
    Gchat,
    /// nudge's own structured JSON (workload, references, message, time).
    Json,
}

impl NotifyFormat {
    /// The name in the configuration and in the `format` metric label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Slack => "slack",
            Self::Teams => "teams",
            Self::Gchat => "gchat",
            Self::Json => "json",
        }
    }
}
