//! Assembling and running the controller: client, key, sources, targets, engine,
//! admin server, leader election, shutdown.

use std::net::SocketAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::annotations::AnnotationScheme;
use crate::config::{Config, ConsulConfig};
use crate::engine::{Engine, EngineError};
use crate::events::KubeEvents;
use crate::fingerprint::FingerprintKey;
use crate::model::SourceName;
use crate::scope::{NamespaceScope, watch_selected_namespaces};
use crate::sources::consul::SettingsError;
use crate::sources::secret::{KeyError, installation_key};
use crate::sources::{ObjectSource, ObjectSourceSettings, Source};
use crate::targets::{self, TargetSettings};
use crate::webhook::{self, Admission, AdmissionSettings, WebhookCounters, WebhookError};

pub mod admin;
pub mod lease;
pub mod metrics;
pub mod shutdown;

use self::admin::{AdminError, AdminServer, Readiness};
use self::lease::{LeaderElector, LeaseSettings};
use self::metrics::Metrics;

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
    /// The admission webhook could not start.
    #[error(transparent)]
    Webhook(#[from] WebhookError),
    /// The admin server could not listen or failed.
    #[error(transparent)]
    Admin(#[from] AdminError),
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

/// Like [`run_with_client`], recording into `metrics` (which the admin server
/// serves), so that an embedder or a test can read them.
pub async fn run_with_metrics(
    config: Config,
    client: kube::Client,
    shutdown: CancellationToken,
    metrics: Metrics,
) -> Result<(), RunError> {
    Controller::new(config, client)
        .with_metrics(metrics)
        .run(shutdown)
        .await
}

/// Like [`run_with_client`], and sends the admission webhook's bound address on
/// `webhook_addr` once it listens (useful with `webhook.bind` on port 0).
pub async fn run_with_client_reporting(
    config: Config,
    client: kube::Client,
    shutdown: CancellationToken,
    webhook_addr: Option<oneshot::Sender<SocketAddr>>,
) -> Result<(), RunError> {
    let mut controller = Controller::new(config, client);
    controller.webhook_addr = webhook_addr;
    controller.run(shutdown).await
}

/// The controller with the built-in sources and targets, plus any custom
/// [`Source`] a library user adds.
pub struct Controller {
    config: Config,
    client: kube::Client,
    custom_sources: Vec<Arc<dyn crate::sources::Source>>,
    metrics: Metrics,
    webhook_addr: Option<oneshot::Sender<SocketAddr>>,
}

impl Controller {
    /// A controller for `config` talking to the cluster through `client`.
    pub fn new(config: Config, client: kube::Client) -> Self {
        Self {
            config,
            client,
            custom_sources: Vec::new(),
            metrics: Metrics::new(),
            webhook_addr: None,
        }
    }

    /// Adds a custom source; workloads reference it as `<prefix>/<name>-<slot>`.
    pub fn with_source(mut self, source: Arc<dyn crate::sources::Source>) -> Self {
        self.custom_sources.push(source);
        self
    }

    /// Records into `metrics` instead of a private registry.
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Runs until `shutdown` is cancelled. The admin server answers (`/ready`:
    /// 503) until everything else has drained.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), RunError> {
        let Controller {
            config,
            client,
            custom_sources,
            metrics,
            webhook_addr,
        } = self;
        let readiness = Readiness::new(shutdown.clone());
        let admin =
            AdminServer::bind(config.admin.bind, readiness.clone(), metrics.clone()).await?;
        tracing::info!(addr = %admin.local_addr()?, "admin server listening");
        let admin_stop = CancellationToken::new();
        let admin_task = tokio::spawn(
            admin
                .serve(admin_stop.clone())
                .instrument(tracing::info_span!("admin")),
        );
        let parts = Parts {
            client,
            custom_sources,
            metrics,
            readiness,
            webhook_addr,
        };
        let result = run_controller(config, parts, shutdown).await;
        admin_stop.cancel();
        let served = admin_task.await;
        result?;
        if let Ok(Err(error)) = served {
            return Err(error.into());
        }
        tracing::info!("stopped");
        Ok(())
    }
}

/// What the controller is assembled from besides its configuration.
struct Parts {
    client: kube::Client,
    custom_sources: Vec<Arc<dyn crate::sources::Source>>,
    metrics: Metrics,
    readiness: Readiness,
    webhook_addr: Option<oneshot::Sender<SocketAddr>>,
}

async fn run_controller(
    config: Config,
    parts: Parts,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    let Parts {
        client,
        custom_sources,
        metrics,
        readiness,
        webhook_addr,
    } = parts;
    let Config {
        annotations,
        engine,
        kubernetes,
        fingerprint,
        sources,
        log: _,
        admin: _,
        leader_election,
        webhook: webhook_config,
    } = config;
    let stamp_on_delete = engine.stamp_on_delete;
    let key = installation_key(
        &client,
        fingerprint.key_file.as_deref(),
        &kubernetes.namespace,
        &fingerprint.key_secret,
    )
    .await?;
    let scheme = AnnotationScheme::new(annotations.prefix);
    let scheme_prefix = scheme.prefix.clone();
    let scope = NamespaceScope {
        namespaces: kubernetes.namespaces.clone(),
        ignore: kubernetes.ignore_namespaces.clone(),
    };
    let source_settings = ObjectSourceSettings {
        scheme: scheme.clone(),
        scope: scope.clone(),
        label_selector: kubernetes.source_label_selector.clone(),
        metrics: metrics.clone(),
        readiness: readiness.clone(),
    };
    let target_settings = TargetSettings {
        field_manager: kubernetes.field_manager.clone(),
        prefix: scheme.prefix.clone(),
        scope: scope.clone(),
        metrics: metrics.clone(),
        readiness: readiness.clone(),
    };
    let instance = std::env::var("POD_NAME").ok();
    let events = Arc::new(KubeEvents::new(client.clone(), instance));
    let mut engine = Engine::new(engine, scheme, events).with_metrics(metrics.clone());
    for source in builtin_sources(&client, key, source_settings, &sources.consul)? {
        engine = engine.with_source(source)?;
    }
    for source in custom_sources {
        engine = engine.with_source(source)?;
    }
    let targets = targets::builtin(client.clone(), target_settings);
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
    if !kubernetes.namespace_selector.is_empty() {
        let (selected, _task) = watch_selected_namespaces(
            client.clone(),
            &kubernetes.namespace_selector,
            shutdown.clone(),
        );
        engine = engine.with_selected_namespaces(selected);
    }
    readiness.seal();
    let election = if leader_election.enabled {
        let settings = LeaseSettings::from_config(&leader_election);
        let span =
            tracing::info_span!("lease", lease = %settings.name, identity = %settings.identity);
        let elector = LeaderElector::new(
            client.clone(),
            &kubernetes.namespace,
            settings,
            metrics.clone(),
        );
        engine = engine.with_leadership(elector.subscribe());
        Some(tokio::spawn(elector.run(shutdown.clone()).instrument(span)))
    } else {
        metrics.set_leader(true);
        None
    };
    // Every replica serves the webhook, leader or not.
    let webhook = if webhook_config.enabled {
        let settings = AdmissionSettings {
            scheme: AnnotationScheme::new(scheme_prefix.clone()),
            stamp_on_delete,
            scope: scope.clone(),
            observe_timeout: webhook_config.observe_timeout,
        };
        let admission = Arc::new(Admission::new(
            &engine,
            settings,
            Arc::new(WebhookCounters::with_metrics(metrics.clone())),
        ));
        let running = webhook::start(
            &webhook_config,
            admission,
            client,
            &kubernetes.namespace,
            &scheme_prefix,
            shutdown.clone(),
        )
        .await?;
        if let Some(tx) = webhook_addr {
            let _ = tx.send(running.addr);
        }
        Some(running)
    } else {
        None
    };
    let result = engine.run(shutdown).await;
    if let Some(election) = election {
        // Returns once it has released the lease (when it led).
        let _ = election.await;
    }
    if let Some(webhook) = webhook {
        webhook.join().await;
    }
    Ok(result?)
}

/// The built-in sources `config` asks for: ConfigMaps, Secrets (fingerprinted with
/// `key`) and every enabled Consul instance. `nudge run` and `nudge explain` both
/// build their sources here, so they observe references the same way.
pub fn builtin_sources(
    client: &kube::Client,
    key: FingerprintKey,
    settings: ObjectSourceSettings,
    consul: &ConsulConfig,
) -> Result<Vec<Arc<dyn Source>>, SettingsError> {
    let metrics = settings.metrics.clone();
    let mut sources: Vec<Arc<dyn Source>> = vec![
        Arc::new(ObjectSource::<ConfigMap>::new(
            SourceName::configmap(),
            client.clone(),
            key.clone(),
            settings.clone(),
        )),
        Arc::new(ObjectSource::<Secret>::new(
            SourceName::secret(),
            client.clone(),
            key,
            settings,
        )),
    ];
    for source in crate::sources::consul::settings::sources_from_config(consul)? {
        sources.push(Arc::new(source.with_metrics(metrics.clone())));
    }
    Ok(sources)
}

fn scope_description(namespaces: &[String]) -> String {
    if namespaces.is_empty() {
        "all".to_owned()
    } else {
        namespaces.join(",")
    }
}
