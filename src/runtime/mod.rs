//! Assembling and running the controller: client, key, sources, targets, engine,
//! shutdown.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use tokio_util::sync::CancellationToken;

use crate::annotations::AnnotationScheme;
use crate::config::Config;
use crate::engine::{Engine, EngineError};
use crate::events::KubeEvents;
use crate::model::SourceName;
use crate::sources::secret::{KeyError, installation_key};
use crate::sources::{ObjectSource, ObjectSourceSettings};
use crate::targets::{self, TargetSettings};

pub mod shutdown;

/// Why the controller could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No kubeconfig or in-cluster configuration could be loaded.
    #[error("cannot configure the Kubernetes client")]
    Client(#[source] kube::Error),
    /// The installation key could not be loaded or created.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// A Consul source could not be set up (address, token file, TLS files).
    #[error(transparent)]
    Consul(#[from] crate::sources::consul::SettingsError),
    /// The engine could not be assembled.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// Runs the controller until `shutdown` is cancelled, with the in-cluster
/// configuration or the current kubeconfig context.
pub async fn run(config: Config, shutdown: CancellationToken) -> Result<(), RunError> {
    let client = kube::Client::try_default()
        .await
        .map_err(RunError::Client)?;
    Controller::new(config, client).run(shutdown).await
}

/// Runs the controller with `client` until `shutdown` is cancelled.
pub async fn run_with_client(
    config: Config,
    client: kube::Client,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    Controller::new(config, client).run(shutdown).await
}

/// The controller with the built-in sources and targets, plus any custom
/// [`Source`](crate::sources::Source) a library user adds.
pub struct Controller {
    config: Config,
    client: kube::Client,
    custom_sources: Vec<Arc<dyn crate::sources::Source>>,
}

impl Controller {
    /// A controller for `config` talking to the cluster through `client`.
    pub fn new(config: Config, client: kube::Client) -> Self {
        Self {
            config,
            client,
            custom_sources: Vec::new(),
        }
    }

    /// Adds a custom source; workloads reference it as `<prefix>/<name>-<slot>`.
    pub fn with_source(mut self, source: Arc<dyn crate::sources::Source>) -> Self {
        self.custom_sources.push(source);
        self
    }

    /// Runs until `shutdown` is cancelled.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), RunError> {
        let Controller {
            config,
            client,
            custom_sources,
        } = self;
        run_assembled(config, client, custom_sources, shutdown).await
    }
}

async fn run_assembled(
    config: Config,
    client: kube::Client,
    custom_sources: Vec<Arc<dyn crate::sources::Source>>,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    let Config {
        annotations,
        engine,
        kubernetes,
        fingerprint,
        sources,
        log: _,
    } = config;
    let key = installation_key(
        &client,
        fingerprint.key_file.as_deref(),
        &kubernetes.namespace,
        &fingerprint.key_secret,
    )
    .await?;
    let scheme = AnnotationScheme::new(annotations.prefix);
    let source_settings = ObjectSourceSettings {
        scheme: scheme.clone(),
        namespaces: kubernetes.namespaces.clone(),
        label_selector: kubernetes.source_label_selector.clone(),
    };
    let target_settings = TargetSettings {
        field_manager: kubernetes.field_manager.clone(),
        prefix: scheme.prefix.clone(),
        namespaces: kubernetes.namespaces.clone(),
    };
    let instance = std::env::var("POD_NAME").ok();
    let events = Arc::new(KubeEvents::new(client.clone(), instance));
    let mut engine = Engine::new(engine, scheme, events)
        .with_source(Arc::new(ObjectSource::<ConfigMap>::new(
            SourceName::configmap(),
            client.clone(),
            key.clone(),
            source_settings.clone(),
        )))?
        .with_source(Arc::new(ObjectSource::<Secret>::new(
            SourceName::secret(),
            client.clone(),
            key,
            source_settings,
        )))?;
    for source in crate::sources::consul::settings::sources_from_config(&sources.consul)? {
        engine = engine.with_source(Arc::new(source))?;
    }
    for source in custom_sources {
        engine = engine.with_source(source)?;
    }
    let targets = targets::builtin(client, target_settings);
    let kinds: Vec<&str> = targets.iter().map(|t| t.kind().as_str()).collect();
    tracing::info!(
        namespaces = %scope_description(&kubernetes.namespaces),
        kinds = ?kinds,
        sources = ?engine.catalog().0.keys().map(SourceName::as_str).collect::<Vec<_>>(),
        "watching"
    );
    for target in targets {
        engine = engine.with_target(target)?;
    }
    engine.run(shutdown).await?;
    tracing::info!("stopped");
    Ok(())
}

fn scope_description(namespaces: &[String]) -> String {
    if namespaces.is_empty() {
        "all".to_owned()
    } else {
        namespaces.join(",")
    }
}
