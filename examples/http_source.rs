//! A custom config source: the body of an HTTP endpoint.
//!
//! Workloads reference it like any other source:
//!
//! ```yaml
//! metadata:
//!   annotations:
//!     nudge.dev/http-motd: "https://config.example.com/motd.txt"
//! ```
//!
//! and are rolled when the body behind the URL changes. Run it like `nudge run`
//! (kubeconfig or in-cluster, `--config`, `NUDGE_*`):
//!
//! ```sh
//! cargo run --example http_source -- [config.toml]
//! ```

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use nudge::fingerprint::{self, Algorithm, Observation};
use nudge::model::{Scope, SourceName, Tracked};
use nudge::sources::{Interest, Source, SourceContext, SourceError, SourceUpdate};

/// Fingerprints the body of each referenced URL, polling every `interval`.
pub struct HttpSource {
    name: SourceName,
    client: reqwest::Client,
    interval: Duration,
}

impl HttpSource {
    /// A source named `name` (e.g. `http`).
    pub fn new(name: SourceName, interval: Duration) -> Self {
        Self {
            name,
            client: reqwest::Client::new(),
            interval,
        }
    }

    /// 2xx → the body's fingerprint; 404/410 → absent; anything else is an error,
    /// and errors are not content.
    async fn fetch(&self, url: &str) -> Result<Observation, SourceError> {
        let response = self
            .client
            .get(url)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| SourceError::backend(&self.name, format!("GET {url}"), e))?;
        match response.status() {
            status if status.is_success() => {
                let body = response
                    .bytes()
                    .await
                    .map_err(|e| SourceError::backend(&self.name, format!("GET {url}"), e))?;
                Ok(Observation::Present(fingerprint::native_value(&body)))
            }
            reqwest::StatusCode::NOT_FOUND | reqwest::StatusCode::GONE => Ok(Observation::Absent),
            status => Err(SourceError::Backend {
                source_name: self.name.clone(),
                message: format!("GET {url} answered {status}"),
                cause: None,
            }),
        }
    }
}

#[async_trait]
impl Source for HttpSource {
    fn name(&self) -> &SourceName {
        &self.name
    }

    fn scope(&self) -> Scope {
        Scope::External
    }

    async fn observe(&self, tracked: &Tracked) -> Result<Observation, SourceError> {
        self.fetch(&tracked.reference.name).await
    }

    async fn run(self: Arc<Self>, ctx: SourceContext) -> Result<(), SourceError> {
        let SourceContext {
            mut interest,
            updates,
            shutdown,
        } = ctx;
        let mut tracked: BTreeSet<Tracked> = BTreeSet::new();
        let mut last: HashMap<Tracked, Observation> = HashMap::new();
        let mut tick = tokio::time::interval(self.interval);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                Some(request) = interest.recv() => match request {
                    Interest::Track(t) if t.algorithm == Algorithm::Native => { tracked.insert(t); }
                    Interest::Track(t) => tracing::warn!(%t, "only the native format is supported"),
                    Interest::Untrack(t) => { tracked.remove(&t); last.remove(&t); }
                },
                _ = tick.tick() => {
                    for t in &tracked {
                        match self.fetch(&t.reference.name).await {
                            // Report content changes only; the engine ignores repeats anyway.
                            Ok(observation) if last.get(t) != Some(&observation) => {
                                last.insert(t.clone(), observation.clone());
                                let update = SourceUpdate { tracked: t.clone(), observation };
                                if updates.send(update).await.is_err() {
                                    return Ok(());
                                }
                            }
                            Ok(_) => {}
                            Err(error) => tracing::warn!(%error, "poll failed; keeping the last fingerprint"),
                        }
                    }
                }
            }
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let file = std::env::args().nth(1).map(std::path::PathBuf::from);
    let config = nudge::config::Config::load(file.as_deref(), &Default::default())?;
    nudge::telemetry::init_logging(&config.log);
    let client = kube::Client::try_default().await?;
    let http = HttpSource::new(SourceName::new("http")?, Duration::from_secs(30));
    let shutdown = nudge::runtime::shutdown::on_signal();
    nudge::runtime::Controller::new(config, client)
        .with_source(Arc::new(http))
        .run(shutdown)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nudge::model::Reference;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Serves each body once, in order, as `200 OK` (or 404 for `None`).
    async fn serve(bodies: Vec<Option<&'static str>>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/motd", listener.local_addr().unwrap());
        tokio::spawn(async move {
            for body in bodies {
                let (mut socket, _) = listener.accept().await.unwrap();
                let mut request = [0u8; 1024];
                let _ = socket.read(&mut request).await;
                let response = match body {
                    Some(body) => format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    ),
                    None => {
                        "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                            .to_owned()
                    }
                };
                socket.write_all(response.as_bytes()).await.unwrap();
            }
        });
        url
    }

    #[tokio::test]
    async fn body_changes_change_the_fingerprint_and_404_is_absent() {
        let url = serve(vec![Some("hello"), Some("hello"), Some("bye"), None]).await;
        let source = HttpSource::new(SourceName::new("http").unwrap(), Duration::from_secs(1));
        let tracked = Tracked::new(
            Reference::key(source.name().clone(), url),
            Algorithm::Native,
        );
        let first = source.observe(&tracked).await.unwrap();
        assert_eq!(source.observe(&tracked).await.unwrap(), first);
        assert_ne!(source.observe(&tracked).await.unwrap(), first);
        assert_eq!(source.observe(&tracked).await.unwrap(), Observation::Absent);
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_is_an_error_not_absent() {
        let source = HttpSource::new(SourceName::new("http").unwrap(), Duration::from_secs(1));
        let reference = Reference::key(source.name().clone(), "http://127.0.0.1:1/x");
        let result = source
            .observe(&Tracked::new(reference, Algorithm::Native))
            .await;
        assert!(matches!(result, Err(SourceError::Backend { .. })));
    }
}
