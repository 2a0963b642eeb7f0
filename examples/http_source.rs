//! A custom config source: the body of an HTTP endpoint, as a [`PollSource`].
//!
//! Workloads reference it like any other source:
//!
//! ```yaml
//! metadata:
//!   annotations:
//!     nudge.dev/http-motd: "https://config.example.com/motd.txt"
//! ```
//!
//! and are rolled when the body behind the URL changes. The engine polls each
//! referenced URL (the first time at once), reports only changes, retries failed
//! reads with backoff and counts the source toward `/ready`. Run it like
//! `nudge run` (kubeconfig or in-cluster, `--config`, `NUDGE_*`):
//!
//! ```sh
//! cargo run --example http_source -- [config.toml]
//! ```

use std::time::Duration;

use async_trait::async_trait;
use nudge::source::{
    Observation, ObserveContext, PollSource, SourceError, SourceName, Tracked, poll,
};

/// Fingerprints the body of each referenced URL, read every `interval`.
pub struct HttpSource {
    name: SourceName,
    client: reqwest::Client,
    interval: Duration,
}

impl HttpSource {
    /// A source named `name` (e.g. `http`).
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
}

#[async_trait]
impl PollSource for HttpSource {
    fn name(&self) -> &SourceName {
        &self.name
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    /// Only absolute http(s) URLs: a typo is reported on the workload once, as
    /// an `InvalidAnnotation` Event, instead of failing every poll.
    fn check_reference(&self, reference: &str) -> Result<(), String> {
        nudge::source::default_reference_check(reference)?;
        if reference.starts_with("https://") || reference.starts_with("http://") {
            Ok(())
        } else {
            Err("expected an http:// or https:// URL".to_owned())
        }
    }

    /// 2xx → the body's fingerprint; 404/410 → absent; anything else is an error,
    /// and errors are not content. (A body holding secrets would use
    /// `cx.secret_fingerprint`, keyed with the installation key like Secrets.)
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

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();
    let file = std::env::args().nth(1).map(std::path::PathBuf::from);
    let config = nudge::config::Config::load(file.as_deref(), &Default::default())?;
    let client = kube::Client::try_default().await?;
    let http = HttpSource::new(SourceName::new("http")?, Duration::from_secs(30));
    let shutdown = nudge::shutdown::on_signal();
    nudge::Controller::from_config(config, client)
        .operate_as_configured()
        .with_source(poll(http))
        .run(shutdown)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use nudge::source::{Algorithm, FingerprintKey, Reference, SourceContext};
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
        Tracked::new(
            Reference::key(SourceName::new("http").unwrap(), url),
            Algorithm::Native,
        )
    }

    fn cx() -> ObserveContext {
        ObserveContext::new(FingerprintKey::generate())
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
        let (ctx, mut engine) = SourceContext::harness(SourceName::new("http").unwrap(), cx(), 8);
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
