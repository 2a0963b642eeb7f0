//! The `http` source: the body behind a URL, read every `interval`
//! (`[sources.http] interval = "30s"`, `NUDGE_SOURCES__HTTP__INTERVAL`).

use std::sync::Arc;
use std::time::Duration;

use nudge::source::{
    Observation, ObserveContext, PollSource, Source, SourceError, SourceName, Tracked, poll,
};
use serde::{Deserialize, Serialize};

/// `[sources.http]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct HttpConfig {
    /// How often each referenced URL is read (humantime: `30s`, `2m`).
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(30),
        }
    }
}

/// Fingerprints the body of each referenced URL: 2xx → its fingerprint,
/// 404/410 → absent, anything else an error (errors are not content).
#[derive(Debug)]
pub struct HttpSource {
    name: SourceName,
    client: reqwest::Client,
    interval: Duration,
}

impl HttpSource {
    /// A source named `name` reading every `interval`.
    pub fn new(name: SourceName, interval: Duration) -> Self {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        Self {
            name,
            client,
            interval,
        }
    }

    /// The `http` source `config` describes, for
    /// `Controller::with_configured_source("http", HttpSource::from_config)`.
    pub fn from_config(config: HttpConfig) -> Result<Arc<dyn Source>, String> {
        if config.interval.is_zero() {
            return Err("interval must be more than zero".to_owned());
        }
        let name = SourceName::new("http").map_err(|e| e.to_string())?;
        Ok(poll(Self::new(name, config.interval)))
    }
}

#[nudge::async_trait]
impl PollSource for HttpSource {
    fn name(&self) -> &SourceName {
        &self.name
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    async fn observe(
        &self,
        tracked: &Tracked,
        cx: &ObserveContext,
    ) -> Result<Observation, SourceError> {
        let url = tracked.reference.name.as_str();
        let failed = |e| SourceError::backend(&self.name, format!("GET {url}"), e);
        let response = self.client.get(url).send().await.map_err(failed)?;
        match response.status() {
            status if status.is_success() => {
                let body = response.bytes().await.map_err(failed)?;
                Ok(Observation::Present(cx.fingerprint(&body)))
            }
            reqwest::StatusCode::NOT_FOUND | reqwest::StatusCode::GONE => Ok(Observation::Absent),
            status => Err(SourceError::backend_message(
                &self.name,
                format!("GET {url} answered {status}"),
            )),
        }
    }
}
