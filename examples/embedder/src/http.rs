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
        let url = tracked.reference().name();
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use nudge::source::Algorithm;
    use nudge::testing::harness;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Serves the current body (`None`: 404) to every request.
    async fn serve(body: Arc<Mutex<Option<&'static str>>>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/motd", listener.local_addr().unwrap());
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let mut request = [0u8; 1024];
                let _ = socket.read(&mut request).await;
                let current = *body.lock().unwrap();
                let response = match current {
                    Some(body) => format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    ),
                    None => {
                        "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                            .to_owned()
                    }
                };
                let _ = socket.write_all(response.as_bytes()).await;
            }
        });
        url
    }

    fn mk_source(interval: Duration) -> HttpSource {
        HttpSource::new(SourceName::new("http").unwrap(), interval)
    }

    fn mk_tracked(url: &str) -> Tracked {
        nudge::testing::tracked(
            SourceName::new("http").unwrap(),
            None,
            url,
            Algorithm::Native,
        )
    }

    fn cx() -> ObserveContext {
        nudge::testing::observe_context()
    }

    #[tokio::test]
    async fn body_changes_change_the_fingerprint_and_404_is_absent() {
        let body = Arc::new(Mutex::new(Some("hello")));
        let url = serve(body.clone()).await;
        let (source, tracked, cx) = (mk_source(Duration::from_secs(1)), mk_tracked(&url), cx());
        let first = source.observe(&tracked, &cx).await.unwrap();
        assert_eq!(source.observe(&tracked, &cx).await.unwrap(), first);
        *body.lock().unwrap() = Some("bye");
        assert_ne!(source.observe(&tracked, &cx).await.unwrap(), first);
        *body.lock().unwrap() = None;
        assert_eq!(
            source.observe(&tracked, &cx).await.unwrap(),
            Observation::Absent
        );
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_is_an_error_not_absent() {
        let result = mk_source(Duration::from_secs(1))
            .observe(&mk_tracked("http://127.0.0.1:1/x"), &cx())
            .await;
        assert!(matches!(result, Err(SourceError::Backend { .. })));
    }

    /// The source as the engine runs it: the first observation comes at once,
    /// a change is reported at the next poll, an unchanged body never.
    #[tokio::test]
    async fn run_reports_the_first_body_at_once_then_each_change() {
        let body = Arc::new(Mutex::new(Some("v1")));
        let url = serve(body.clone()).await;
        let interval = Duration::from_millis(200);
        let (ctx, mut engine) = harness(SourceName::new("http").unwrap(), cx(), 8);
        let task = tokio::spawn(poll(mk_source(interval)).run(ctx));
        let started = tokio::time::Instant::now();
        engine.track(mk_tracked(&url));
        let first = engine.next_update().await.unwrap();
        assert!(started.elapsed() < interval, "first read waits for no tick");
        // Several polls of the same body: nothing new.
        let quiet = tokio::time::timeout(interval * 3, engine.next_update()).await;
        assert!(quiet.is_err(), "unchanged body reported again: {quiet:?}");
        *body.lock().unwrap() = Some("v2");
        let second = tokio::time::timeout(interval * 5, engine.next_update())
            .await
            .expect("the change is reported at the next poll")
            .unwrap();
        assert_ne!(second.observation, first.observation);
        assert!(engine.is_ready());
        engine.shutdown();
        task.await.unwrap().unwrap();
    }
}
