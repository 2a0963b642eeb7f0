//! Assembling and running the controller: the [`Controller`] builder composes the
//! engine, the built-in and custom sources and targets, the admin server, leader
//! election and the admission webhook. Nothing below imports this module.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::annotations::AnnotationScheme;
use crate::config::{Config, ConfigError, TargetConfig};
use crate::copies::Copier;
use crate::engine::Engine;
use crate::events::notify::{Notifier, NotifyError, NotifySettings, NotifyWorker};
use crate::events::{EventSink, FanOut, KubeEvents};
use crate::fingerprint::FingerprintKey;
use crate::health::Readiness;
use crate::model::{SourceName, TemplatePath, WorkloadKind};
use crate::scope::NamespaceScope;
use crate::sources::secret::{KeyError, installation_key};
use crate::sources::{ObjectSourceSettings, Source};
use crate::targets::{CronJobTarget, JobTarget, KubeTarget, Target, TargetSettings, builtin_kinds};
use crate::webhook::{self, Admission, AdmissionParts, AdmissionSettings, WebhookError};

pub mod admin;
mod client;
pub use self::client::kube_client;
pub mod lease;
pub mod metrics;
mod namespaces;
mod rollback;
pub mod shutdown;

use self::admin::{AdminError, AdminServer};
use self::lease::{LeaderElector, LeaseSettings};
use self::metrics::Metrics;
use self::namespaces::selected_namespaces;
pub(crate) use self::rollback::{RollbackError, RollbackTo};

/// Argo Rollouts: stamped like Deployments when their CRD is installed.
const ARGO_ROLLOUT: (&str, &str, &str) = ("argoproj.io", "v1alpha1", "Rollout");

/// Why the controller could not start or stopped with an error. Each variant
/// names the part that failed; its [`source`](std::error::Error::source)
/// chain says why, and [`hint`](Self::hint) what to do, when nudge can tell.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// No kubeconfig or in-cluster configuration could be loaded.
    #[error("cannot configure the Kubernetes client")]
    Client(#[source] kube::Error),
    /// The installation key could not be loaded or created.
    #[error(transparent)]
    Key(Box<dyn std::error::Error + Send + Sync>),
    /// A Consul source could not be set up (address, token file, TLS files).
    #[error(transparent)]
    Consul(Box<dyn std::error::Error + Send + Sync>),
    /// The engine could not be assembled (two sources or targets under one name).
    #[error(transparent)]
    Engine(Box<dyn std::error::Error + Send + Sync>),
    /// The admission webhook could not start.
    #[error(transparent)]
    Webhook(Box<dyn std::error::Error + Send + Sync>),
    /// The admin server could not listen or failed.
    #[error(transparent)]
    Admin(Box<dyn std::error::Error + Send + Sync>),
    /// Notifications could not be set up (`notify.url_file` unreadable, a bad URL).
    #[error(transparent)]
    Notify(Box<dyn std::error::Error + Send + Sync>),
    /// The configuration is invalid (a custom source's section, a section no
    /// source is registered for).
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl RunError {
    /// What an operator should do about it, when nudge can tell.
    pub fn hint(&self) -> Option<String> {
        match self {
            Self::Client(_) => Some(
                "point KUBECONFIG at a cluster (or run in a pod with a service account)".into(),
            ),
            Self::Key(error) => error.downcast_ref::<KeyError>().and_then(KeyError::hint),
            Self::Admin(error) => matches!(error.downcast_ref(), Some(AdminError::Bind { .. }))
                .then(|| "choose another admin.bind (NUDGE_ADMIN__BIND)".into()),
            Self::Webhook(error) => matches!(error.downcast_ref(), Some(WebhookError::Bind { .. }))
                .then(|| "choose another webhook.bind (NUDGE_WEBHOOK__BIND)".into()),
            Self::Notify(error) => error
                .downcast_ref::<NotifyError>()
                .and_then(NotifyError::hint),
            _ => None,
        }
    }
}

/// `error` boxed into the `RunError` `variant` it belongs in.
fn failed<E>(
    variant: fn(Box<dyn std::error::Error + Send + Sync>) -> RunError,
) -> impl Fn(E) -> RunError
where
    E: std::error::Error + Send + Sync + 'static,
{
    move |error| variant(Box::new(error))
}

/// Runs the controller as the `nudge` binary does (admin server and leader
/// election as configured) until `shutdown` is cancelled, with the in-cluster
/// configuration or the current kubeconfig context ([`kube_client`]).
pub async fn run(config: Config, shutdown: CancellationToken) -> Result<(), RunError> {
    let client = kube_client().await.map_err(RunError::Client)?;
    run_with_client(config, client, shutdown).await
}

/// [`run`] with `client`.
pub async fn run_with_client(
    config: Config,
    client: kube::Client,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    Controller::from_config(config, client)
        .operate_as_configured()
        .run(shutdown)
        .await
}

/// Like [`run_with_client`], recording into `metrics` (which the admin server
/// serves), so that an embedder or a test can read them.
pub async fn run_with_metrics(
    config: Config,
    client: kube::Client,
    shutdown: CancellationToken,
    metrics: Metrics,
) -> Result<(), RunError> {
    Controller::from_config(config, client)
        .operate_as_configured()
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
    let mut controller = Controller::from_config(config, client).operate_as_configured();
    controller.webhook_addr = webhook_addr;
    controller.run(shutdown).await
}

/// A client that answers every request with an error: `check-config` builds
/// the controller, with its custom sources, without a cluster, and so can an
/// embedder's test of its configuration (`Controller::from_figment`, then
/// [`Controller::check`]). Call it inside a tokio runtime.
pub fn offline_client() -> kube::Client {
    let refuse = tower::service_fn(|_: http::Request<kube::client::Body>| async {
        Err::<http::Response<kube::client::Body>, _>(std::io::Error::other(
            "check-config reads no cluster",
        ))
    });
    kube::Client::new(refuse, "default")
}

/// The controller: the built-in sources and targets plus any a library user adds.
///
/// A library opens nothing its caller did not ask for: a `Controller` serves no
/// admin endpoint and takes no Lease until
/// [`operate_as_configured`](Self::operate_as_configured) (what the `nudge`
/// binary and [`cli::run`](crate::cli::run) do) asks for what `admin.bind`
/// and `leader_election.enabled` say. The admission webhook runs only when
/// `webhook.enabled` says so.
///
/// ```no_run
/// # async fn demo(client: nudge::kube::Client, my_source: std::sync::Arc<dyn nudge::source::Source>)
/// # -> Result<(), nudge::RunError> {
/// use nudge::{Config, Controller};
/// let mut config = Config::default();
/// config.admin.bind = ([127, 0, 0, 1], 9090).into();
/// config.leader_election.enabled = false;
/// let shutdown = nudge::shutdown::on_signal();
/// Controller::from_config(config, client)
///     .operate_as_configured()
///     .with_source(my_source)
///     .run(shutdown)
///     .await
/// # }
/// ```
pub struct Controller {
    config: Config,
    /// The providers `config` came from: custom sources read their sections here.
    figment: figment::Figment,
    /// The keys of custom sources' `[sources.<key>]` sections.
    configured: BTreeSet<String>,
    /// The keys of custom targets' `[targets.<key>]` sections.
    configured_targets: BTreeSet<String>,
    /// Configuration problems found while custom sources were registered,
    /// reported when the controller runs or explains.
    problems: Vec<ConfigError>,
    client: kube::Client,
    sources: Vec<Arc<dyn Source>>,
    targets: Vec<Arc<dyn Target>>,
    metrics: Metrics,
    /// Where the admin server listens; `None`: no admin server.
    admin: Option<SocketAddr>,
    /// Whether to take the Lease (`config.leader_election` says how).
    elect: bool,
    webhook_addr: Option<oneshot::Sender<SocketAddr>>,
}

impl Controller {
    /// A controller with every setting from `config`, but still no admin server
    /// and no Lease: see [`operate_as_configured`](Self::operate_as_configured).
    pub fn from_config(config: Config, client: kube::Client) -> Self {
        let figment = figment::Figment::from(figment::providers::Serialized::defaults(&config));
        Self::assemble(config, figment, client)
    }

    /// A controller with the configuration `figment` holds (for example
    /// [`Config::providers`] with providers of your own merged in), which
    /// custom sources also read their sections from
    /// ([`with_configured_source`](Self::with_configured_source)). Opens
    /// nothing, as [`from_config`](Self::from_config).
    pub fn from_figment(
        figment: figment::Figment,
        client: kube::Client,
    ) -> Result<Self, ConfigError> {
        let config = Config::from_figment(&figment)?;
        Ok(Self::assemble(config, figment, client))
    }

    /// A controller with `config`, read from `figment` (which custom sources
    /// and targets read their sections from).
    pub(crate) fn assemble(
        config: Config,
        figment: figment::Figment,
        client: kube::Client,
    ) -> Self {
        Self {
            config: config.normalized(),
            figment,
            configured: BTreeSet::new(),
            configured_targets: BTreeSet::new(),
            problems: Vec::new(),
            client,
            sources: Vec::new(),
            targets: Vec::new(),
            metrics: Metrics::new(),
            admin: None,
            elect: false,
            webhook_addr: None,
        }
    }

    /// Serves the admin endpoint at `admin.bind` and takes the Lease when
    /// `leader_election.enabled`, as the `nudge` binary does.
    pub fn operate_as_configured(mut self) -> Self {
        self.admin = Some(self.config.admin.bind);
        self.elect = self.config.leader_election.enabled;
        self
    }

    /// The configuration the controller runs with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Adds a custom source; workloads reference it as `<prefix>/<name>-<slot>`.
    /// It gets the installation key and counts toward `/ready` like the
    /// built-in sources.
    pub fn with_source(mut self, source: Arc<dyn Source>) -> Self {
        self.sources.push(source);
        self
    }

    /// Adds a custom source configured like a built-in one: its typed
    /// configuration `C` is read from `[sources.<key>]` of the TOML file and
    /// `NUDGE_SOURCES__<KEY>__<FIELD>` variables (its `Default` when neither
    /// sets anything; a field `C` does not know is an error naming it), and
    /// `make` builds the source from it. A problem (a bad field, an error from
    /// `make`) stops [`run`](Self::run) and `nudge check-config` with a message
    /// naming the key and where its value came from.
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # fn files(root: std::path::PathBuf) -> Arc<dyn nudge::source::Source> { unimplemented!() }
    /// #[derive(serde::Deserialize, Default)]
    /// #[serde(default)]
    /// struct FileConfig { root: std::path::PathBuf }
    ///
    /// # fn demo(controller: nudge::Controller) -> nudge::Controller {
    /// controller.with_configured_source("file", |config: FileConfig| {
    ///     Ok::<_, std::io::Error>(files(config.root))
    /// })
    /// # }
    /// ```
    pub fn with_configured_source<C, E>(
        mut self,
        key: &str,
        make: impl FnOnce(C) -> Result<Arc<dyn Source>, E>,
    ) -> Self
    where
        C: serde::de::DeserializeOwned + Default,
        E: std::fmt::Display,
    {
        let fresh = !crate::config::BUILTIN_SOURCE_SECTIONS.contains(&key)
            && self.configured.insert(key.to_owned());
        match self.configured_section("sources", key, fresh, make) {
            Ok(source) => self.sources.push(source),
            Err(problem) => self.problems.push(problem),
        }
        self
    }

    /// Adds a custom target configured like a custom source
    /// ([`with_configured_source`](Self::with_configured_source)), from
    /// `[targets.<key>]` and `NUDGE_TARGETS__<KEY>__<FIELD>`. With custom target
    /// sections, `targets` is a table: the `[[targets]]` kinds move to
    /// `[[targets.kinds]]`.
    pub fn with_configured_target<C, E>(
        mut self,
        key: &str,
        make: impl FnOnce(C) -> Result<Arc<dyn Target>, E>,
    ) -> Self
    where
        C: serde::de::DeserializeOwned + Default,
        E: std::fmt::Display,
    {
        let fresh = key != "kinds" && self.configured_targets.insert(key.to_owned());
        match self.configured_section("targets", key, fresh, make) {
            Ok(target) => self.targets.push(target),
            Err(problem) => self.problems.push(problem),
        }
        self
    }

    /// Reads `[<table>.<key>]` as `C` and builds with `make`; `fresh`: the key
    /// was not taken.
    fn configured_section<C, E, T>(
        &self,
        table: &str,
        key: &str,
        fresh: bool,
        make: impl FnOnce(C) -> Result<T, E>,
    ) -> Result<T, ConfigError>
    where
        C: serde::de::DeserializeOwned + Default,
        E: std::fmt::Display,
    {
        let path = format!("{table}.{key}");
        if !fresh {
            return Err(ConfigError::Load {
                key: path,
                problem: "two components are configured under this key".to_owned(),
                origin: "code".to_owned(),
            });
        }
        let config = crate::config::section::<C>(&self.figment, &path)?;
        make(config).map_err(|error| ConfigError::Load {
            origin: crate::config::origin_of(&self.figment, &path),
            key: path.clone(),
            problem: error.to_string(),
        })
    }

    /// Every configuration problem: those met registering custom sources and
    /// targets, a label selector that does not parse, an unknown
    /// `kubernetes.ignore_kinds` entry, an invalid `[sources.kubernetes.<name>]`
    /// (these also in a configuration given as a value, which nothing
    /// validated), then
    /// `[sources.<key>]` and `[targets.<key>]` sections nothing is registered
    /// for.
    pub fn check(&self) -> Result<(), ConfigError> {
        // A section nothing is registered for comes first: a misspelt section
        // leaves the one meant empty, whose own problem would hide the typo.
        self.unregistered_section()?;
        if let Some(problem) = self.problems.first() {
            return Err(problem.clone());
        }
        let kubernetes = &self.config.kubernetes;
        if let Some((key, problem)) = kubernetes
            .selectors_problem()
            .or_else(|| kubernetes.kinds_problem())
            .or_else(|| crate::config::kubernetes_sources_problem(&self.config.sources.kubernetes))
        {
            return Err(ConfigError::Invalid {
                key,
                problem,
                origin: crate::config::origin_of(&self.figment, key),
            });
        }
        Ok(())
    }

    /// The first `[sources.<key>]` or `[targets.<key>]` section nothing is
    /// registered for, naming the known section closest to it.
    fn unregistered_section(&self) -> Result<(), ConfigError> {
        let sections: [(_, _, _, &[&str]); 2] = [
            (
                "sources",
                &self.config.sources.custom,
                &self.configured,
                &crate::config::BUILTIN_SOURCE_SECTIONS,
            ),
            (
                "targets",
                &self.config.targets.custom,
                &self.configured_targets,
                &["kinds"],
            ),
        ];
        for (table, written, registered, builtin) in sections {
            let Some(key) = written.keys().find(|key| !registered.contains(*key)) else {
                continue;
            };
            let known: Vec<&str> = builtin
                .iter()
                .copied()
                .chain(registered.iter().map(String::as_str))
                .collect();
            let mut problem = format!(
                "nothing is configured under this key (configured: {})",
                known.join(", ")
            );
            if let Some(meant) = closest(key, &known) {
                problem.push_str(&format!("; did you mean {table}.{meant}?"));
            }
            let path = format!("{table}.{key}");
            return Err(ConfigError::Load {
                origin: crate::config::origin_of(&self.figment, &path),
                key: path,
                problem,
            });
        }
        Ok(())
    }

    /// The effective configuration for people: nudge's own, with secrets
    /// redacted, and each custom source's section as given, with the values of
    /// fields whose names say they hold secrets (`token`, `password`,
    /// `secret`, `key`) redacted.
    pub fn effective_config(&self) -> Config {
        let mut config = self.config.redacted();
        for value in config
            .sources
            .custom
            .values_mut()
            .chain(config.targets.custom.values_mut())
        {
            redact_secret_fields(value);
        }
        config
    }

    /// The client the controller talks to the cluster with.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// Adds a target for a workload kind nudge was not built for (or replaces how
    /// a built-in kind is written: a target registered here wins over the
    /// built-in one for its kind).
    pub fn with_target(mut self, target: Arc<dyn Target>) -> Self {
        self.targets.push(target);
        self
    }

    /// Records into `metrics` instead of a private registry.
    pub(crate) fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// What `nudge explain <kind>/<name>` reports: what the workload tracks, with
    /// this controller's sources (custom ones included) and targets. `kind` is
    /// a kind name as `nudge explain` takes it (`deployment`, `sts`, a
    /// `[[targets]]` kind, a custom target's kind); `namespace` defaults to the
    /// client's.
    pub async fn explain(
        &self,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        timeout: std::time::Duration,
    ) -> Result<crate::explain::Report, crate::explain::ExplainError> {
        self.check()?;
        let custom = self
            .targets
            .iter()
            .find(|t| t.kind().as_str().eq_ignore_ascii_case(kind))
            .cloned();
        let resolved = match &custom {
            Some(target) => TargetConfig {
                group: target.kind().group().to_owned(),
                version: target.kind().version().to_owned(),
                kind: target.kind().as_str().to_owned(),
                template: target.kind().template_path().to_string(),
            },
            None => crate::explain::resolve_kind(kind, &self.config)
                .ok_or_else(|| crate::explain::ExplainError::UnknownKind(kind.to_owned()))?,
        };
        let namespace = namespace.unwrap_or(self.client.default_namespace());
        crate::explain::explain_with(
            self.client.clone(),
            &self.config,
            &resolved,
            namespace,
            name,
            timeout,
            &self.sources,
            &self.targets,
        )
        .await
    }

    /// Runs until `shutdown` is cancelled. The admin server answers (`/ready`:
    /// 503) until everything else has drained.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), RunError> {
        let readiness = Readiness::new(shutdown.clone());
        let Some(bind) = self.admin else {
            self.assemble_and_run(readiness, shutdown).await?;
            tracing::info!("stopped");
            return Ok(());
        };
        let admin = AdminServer::bind(bind, readiness.clone(), self.metrics.clone())
            .await
            .map_err(failed(RunError::Admin))?;
        let addr = admin.local_addr().map_err(failed(RunError::Admin))?;
        tracing::info!(%addr, "admin server listening");
        let admin_stop = CancellationToken::new();
        let admin_task = tokio::spawn(
            admin
                .serve(admin_stop.clone())
                .instrument(tracing::info_span!("admin")),
        );
        let result = self.assemble_and_run(readiness, shutdown).await;
        admin_stop.cancel();
        let served = admin_task.await;
        result?;
        if let Ok(Err(error)) = served {
            return Err(failed(RunError::Admin)(error));
        }
        tracing::info!("stopped");
        Ok(())
    }

    async fn assemble_and_run(
        self,
        readiness: Readiness,
        shutdown: CancellationToken,
    ) -> Result<(), RunError> {
        self.check()?;
        let Controller {
            config,
            figment: _,
            configured: _,
            configured_targets: _,
            problems: _,
            client,
            sources: custom_sources,
            targets: custom_targets,
            metrics,
            admin: _,
            elect,
            webhook_addr,
        } = self;
        let Config {
            annotations,
            engine: engine_config,
            kubernetes,
            fingerprint,
            sources,
            log: _,
            admin: _,
            leader_election,
            webhook: webhook_config,
            notify,
            targets: target_configs,
        } = config;
        // Configuration problems first, before anything talks to the cluster.
        let notifier = notifier(&notify, &metrics)?;
        let namespace = own_namespace(&kubernetes, &client);
        let key = configured_key(&client, &fingerprint, &namespace).await?;
        let shared = SharedSettings::new(&annotations, &kubernetes, engine_config.snapshots);
        let admission = shared.admission(&engine_config, &webhook_config);
        let kube_events = KubeEvents::new(client.clone(), std::env::var("POD_NAME").ok());
        let kube_events = kube_events.with_source_kinds(&sources.kubernetes);
        let (events, notify_worker) = event_sinks(kube_events, notifier);
        let snapshots = engine_config.snapshots != crate::config::SnapshotMode::Off;
        let copier = snapshots.then(|| shared.copier(&client, &key, &kubernetes, &metrics));
        let gauge = snapshots.then(|| shared.copy_gauge(&client, &metrics, &shutdown));
        let engine = Engine::new(engine_config, shared.scheme.clone(), key)
            .with_events(events)
            .with_metrics(metrics.engine())
            .with_health(readiness.clone(), metrics.watches());
        let engine = copier.into_iter().fold(engine, Engine::with_copier);
        let source_settings = shared.sources(&kubernetes);
        let builtin =
            crate::sources::builtin(&client, source_settings, &sources, &metrics.consul())
                .map_err(RunError::Consul)?;
        let engine = with_sources(engine, builtin.into_iter().chain(custom_sources))?;
        let target_settings = shared.targets(&kubernetes);
        let (configured, custom) = (&target_configs.kinds, custom_targets);
        let targets = targets(&client, target_settings, configured, custom, &kubernetes).await;
        let engine = with_targets(engine, targets, &kubernetes, &client)?;
        let election = (&client, namespace.as_str(), &leader_election);
        let (engine, election) = elect_if(elect, engine, election, &metrics, &shutdown);
        // Every replica serves the webhook, leader or not.
        let webhook = if webhook_config.enabled {
            let (parts, cluster) = (webhook_parts(&engine), (client, namespace.as_str()));
            let config = &webhook_config;
            let started = start_webhook(parts, admission, config, cluster, &metrics, &shutdown);
            Some(started.await?)
        } else {
            None
        };
        if let (Some(tx), Some(running)) = (webhook_addr, &webhook) {
            let _ = tx.send(running.addr);
        }
        let beside = (notify_worker, gauge, election, webhook);
        run_to_end(engine, beside, shutdown).await
    }
}

/// The installation key `[fingerprint]` names: read from `key_file`, else
/// from (or generated into) the Secret `key_secret` in `namespace`.
async fn configured_key(
    client: &kube::Client,
    fingerprint: &crate::config::FingerprintConfig,
    namespace: &str,
) -> Result<FingerprintKey, RunError> {
    let key_file = fingerprint.key_file.as_deref();
    installation_key(client, key_file, namespace, &fingerprint.key_secret)
        .await
        .map_err(failed(RunError::Key))
}

/// What the engine, the built-in sources and targets and the webhook share:
/// nudge's annotation names and the namespaces it watches.
struct SharedSettings {
    scheme: AnnotationScheme,
    scope: NamespaceScope,
}

impl SharedSettings {
    fn new(
        annotations: &crate::config::AnnotationsConfig,
        kubernetes: &crate::config::KubernetesConfig,
        snapshots: crate::config::SnapshotMode,
    ) -> Self {
        let scope = NamespaceScope {
            namespaces: kubernetes.namespaces.clone(),
            ignore: kubernetes.ignore_namespaces.clone(),
        };
        Self {
            scheme: annotations.scheme().with_snapshots(snapshots),
            scope,
        }
    }

    fn sources(&self, kubernetes: &crate::config::KubernetesConfig) -> ObjectSourceSettings {
        ObjectSourceSettings {
            scheme: self.scheme.clone(),
            scope: self.scope.clone(),
            label_selector: kubernetes.source_label_selector.clone(),
        }
    }

    fn targets(&self, kubernetes: &crate::config::KubernetesConfig) -> TargetSettings {
        TargetSettings {
            field_manager: kubernetes.field_manager.clone(),
            scheme: self.scheme.clone(),
            scope: self.scope.clone(),
        }
    }

    /// The copier of snapshot copies (design §5e).
    fn copier(
        &self,
        client: &kube::Client,
        key: &FingerprintKey,
        kubernetes: &crate::config::KubernetesConfig,
        metrics: &Metrics,
    ) -> Copier {
        let names = self.scheme.snapshot_names();
        let manager = kubernetes.field_manager.clone();
        Copier::new(
            client.clone(),
            key.clone(),
            names,
            manager,
            metrics.snapshots(),
        )
    }

    /// The watch keeping the gauges of copies kept, stopped at `shutdown`;
    /// not started until spawned.
    fn copy_gauge(
        &self,
        client: &kube::Client,
        metrics: &Metrics,
        shutdown: &CancellationToken,
    ) -> BoxFuture<'static, ()> {
        let (scope, names) = (self.scope.clone(), self.scheme.snapshot_names());
        let run = crate::copies::run_gauge(
            client.clone(),
            scope,
            names,
            metrics.snapshots(),
            shutdown.clone(),
        );
        run.instrument(tracing::info_span!("snapshot copies"))
            .boxed()
    }

    fn admission(
        &self,
        engine: &crate::config::EngineConfig,
        webhook: &crate::config::WebhookConfig,
    ) -> AdmissionSettings {
        AdmissionSettings {
            scheme: self.scheme.clone(),
            stamp_on_delete: engine.stamp_on_delete,
            scope: self.scope.clone(),
            observe_timeout: webhook.observe_timeout,
        }
    }
}

/// The namespace nudge runs in: `kubernetes.namespace`, else the client's
/// (the pod's in a cluster, else the kubeconfig context's).
fn own_namespace(kubernetes: &crate::config::KubernetesConfig, client: &kube::Client) -> String {
    if kubernetes.namespace.is_empty() {
        client.default_namespace().to_owned()
    } else {
        kubernetes.namespace.clone()
    }
}

/// `engine` with every source registered.
fn with_sources(
    mut engine: Engine,
    sources: impl IntoIterator<Item = Arc<dyn Source>>,
) -> Result<Engine, RunError> {
    for source in sources {
        engine = engine
            .with_source(source)
            .map_err(failed(RunError::Engine))?;
    }
    Ok(engine)
}

/// `engine` with every target registered and, when `kubernetes.namespace_selector`
/// is set, the feed of the namespaces it selects; says in the log what is watched.
fn with_targets(
    mut engine: Engine,
    targets: Vec<Arc<dyn Target>>,
    kubernetes: &crate::config::KubernetesConfig,
    client: &kube::Client,
) -> Result<Engine, RunError> {
    tracing::info!(
        namespaces = %scope_description(&kubernetes.namespaces),
        kinds = ?targets.iter().map(|t| t.kind().to_string()).collect::<Vec<_>>(),
        sources = ?engine.catalog().names().map(SourceName::as_str).collect::<Vec<_>>(),
        "watching"
    );
    for target in targets {
        engine = engine
            .with_target(target)
            .map_err(failed(RunError::Engine))?;
    }
    if !kubernetes.namespace_selector.is_empty() {
        let feed = selected_namespaces(client.clone(), &kubernetes.namespace_selector);
        engine = engine.with_namespace_feed(feed.boxed());
    }
    Ok(engine)
}

/// What runs beside the engine: the notify worker, the gauge of snapshot
/// copies, the election and the webhook.
type Beside = (
    Option<NotifyWorker>,
    Option<BoxFuture<'static, ()>>,
    Option<tokio::task::JoinHandle<()>>,
    Option<webhook::RunningWebhook>,
);

/// Runs `engine` until `shutdown`, then joins what runs beside it: the notify
/// worker, the gauge of snapshot copies, the election (which releases the
/// lease when it led) and the webhook.
async fn run_to_end(
    engine: Engine,
    (notify_worker, gauge, election, webhook): Beside,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    // Spawned last, so that no start-up error leaves it behind; joined below
    // (it stops once the engine is gone, or shortly after shutdown).
    let notify_task = notify_worker.map(|worker| {
        tokio::spawn(
            worker
                .run(shutdown.clone())
                .instrument(tracing::info_span!("notify")),
        )
    });
    let gauge_task = gauge.map(tokio::spawn);
    let result = engine.run(shutdown).await;
    if let Some(notify) = notify_task {
        let _ = notify.await;
    }
    if let Some(gauge) = gauge_task {
        let _ = gauge.await;
    }
    if let Some(election) = election {
        // Returns once it has released the lease (when it led).
        let _ = election.await;
    }
    if let Some(webhook) = webhook {
        webhook.join().await;
    }
    result.map_err(failed(RunError::Engine))
}

/// The notifier `[notify]` asks for, if any.
fn notifier(
    notify: &crate::config::NotifyConfig,
    metrics: &Metrics,
) -> Result<Option<(Notifier, NotifyWorker)>, RunError> {
    let Some(settings) = NotifySettings::from_config(notify).map_err(failed(RunError::Notify))?
    else {
        return Ok(None);
    };
    tracing::info!(
        host = settings.host(),
        format = settings.format.as_str(),
        "notifying stamps"
    );
    let notifier = Notifier::new(settings, metrics.notify()).map_err(failed(RunError::Notify))?;
    Ok(Some(notifier))
}

/// `engine` following the Lease's leadership when `elect`, with the election's
/// task; else `engine` as it is, leading from the start.
fn elect_if(
    elect: bool,
    engine: Engine,
    (client, namespace, config): (&kube::Client, &str, &crate::config::LeaderElectionConfig),
    metrics: &Metrics,
    shutdown: &CancellationToken,
) -> (Engine, Option<tokio::task::JoinHandle<()>>) {
    if !elect {
        metrics.set_leader(true);
        return (engine, None);
    }
    let (leadership, task) = start_election(client, namespace, config, metrics, shutdown);
    (engine.with_leadership(leadership), Some(task))
}

/// Starts competing for the Lease: the leadership feed for the engine, and
/// the task that returns once it has released the Lease (when it led).
fn start_election(
    client: &kube::Client,
    namespace: &str,
    config: &crate::config::LeaderElectionConfig,
    metrics: &Metrics,
    shutdown: &CancellationToken,
) -> (
    tokio::sync::watch::Receiver<bool>,
    tokio::task::JoinHandle<()>,
) {
    let settings = LeaseSettings::from_config(config);
    let span = tracing::info_span!("lease", lease = %settings.name, identity = %settings.identity);
    let elector = LeaderElector::new(client.clone(), namespace, settings, metrics.clone());
    let leadership = elector.subscribe();
    let task = tokio::spawn(elector.run(shutdown.clone()).instrument(span));
    (leadership, task)
}

/// What the webhook shares with `engine`: its catalog, kinds, fingerprints
/// and input reader.
fn webhook_parts(engine: &Engine) -> AdmissionParts {
    AdmissionParts {
        catalog: engine.catalog(),
        kinds: engine.kinds(),
        fingerprints: engine.fingerprints(),
        reader: engine.reader(),
        snapshot_kinds: engine.snapshot_kinds(),
    }
}

/// Starts the admission webhook over `parts` of the engine.
async fn start_webhook(
    parts: AdmissionParts,
    settings: AdmissionSettings,
    config: &crate::config::WebhookConfig,
    (client, namespace): (kube::Client, &str),
    metrics: &Metrics,
    shutdown: &CancellationToken,
) -> Result<webhook::RunningWebhook, RunError> {
    let prefix = settings.scheme.prefix.clone();
    let admission = Arc::new(Admission::new(settings, parts, metrics.webhook()));
    webhook::start(
        config,
        admission,
        client,
        namespace,
        &prefix,
        shutdown.clone(),
    )
    .await
    .map_err(failed(RunError::Webhook))
}

/// The name in `known` that `key` is most likely a misspelling of, if any is
/// close (Jaro-Winkler similarity above 0.8, as `envfil` is to `envfile`).
fn closest<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|name| (strsim::jaro_winkler(key, name), *name))
        .filter(|(similarity, _)| *similarity > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, name)| name)
}

/// Replaces the values of fields whose names say they hold secrets.
fn redact_secret_fields(value: &mut figment::value::Value) {
    const SECRET: [&str; 4] = ["token", "password", "secret", "key"];
    if let figment::value::Value::Dict(_, dict) = value {
        for (name, field) in dict.iter_mut() {
            let lower = name.to_ascii_lowercase();
            if SECRET.iter().any(|word| lower.contains(word)) && !lower.ends_with("_file") {
                *field = figment::value::Value::from("<redacted>");
            } else {
                redact_secret_fields(field);
            }
        }
    }
}

/// Where the engine's notices go: Kubernetes Events, and the notifier too when
/// `[notify]` is on (its worker is returned to be run).
fn event_sinks(
    kube: KubeEvents,
    notifier: Option<(Notifier, NotifyWorker)>,
) -> (Arc<dyn EventSink>, Option<NotifyWorker>) {
    match notifier {
        None => (Arc::new(kube), None),
        Some((notifier, worker)) => {
            let sinks: [Arc<dyn EventSink>; 2] = [Arc::new(kube), Arc::new(notifier)];
            (Arc::new(FanOut::new(sinks)), Some(worker))
        }
    }
}

/// Every target: the built-in kinds (Deployment, StatefulSet, DaemonSet, CronJob,
/// Job), Argo Rollouts, the `[[targets]]` entries, and the custom ones (which
/// win for their kind). Argo Rollouts and `[[targets]]` kinds are resolved by
/// API discovery when their target runs ([`KubeTarget::when_served`]): a kind
/// not served yet is reported by its target (a log line; a `/ready` note,
/// except for Argo Rollouts when simply absent), does not hold up `/ready`,
/// and is stamped from the moment its CRD is served. The built-in kinds
/// `kubernetes.ignore_kinds` names are left out.
pub async fn targets(
    client: &kube::Client,
    settings: TargetSettings,
    configured: &[TargetConfig],
    custom: Vec<Arc<dyn Target>>,
    kubernetes: &crate::config::KubernetesConfig,
) -> Vec<Arc<dyn Target>> {
    let custom_kinds: BTreeSet<WorkloadKind> = custom.iter().map(|t| t.kind().clone()).collect();
    let wanted = |kind: &WorkloadKind| {
        !custom_kinds.contains(kind) && !kubernetes.ignores_kind(kind.as_str())
    };
    let mut targets: Vec<Arc<dyn Target>> = builtin_kinds()
        .into_iter()
        .filter(|(kind, _)| wanted(kind))
        .map(|(kind, plural)| {
            Arc::new(KubeTarget::new(
                client.clone(),
                kind,
                plural,
                settings.clone(),
            )) as Arc<dyn Target>
        })
        .collect();
    let batch: [Arc<dyn Target>; 2] = [
        Arc::new(CronJobTarget::new(client.clone(), settings.clone())),
        Arc::new(JobTarget::new(client.clone(), settings.clone())),
    ];
    targets.extend(batch.into_iter().filter(|target| wanted(target.kind())));
    let (group, version, kind) = ARGO_ROLLOUT;
    let argo = TargetConfig {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        template: "spec.template".into(),
    };
    let mut wanted: Vec<(TargetConfig, bool)> = Vec::new();
    if !kubernetes.ignores_kind(kind) {
        wanted.push((argo, true));
    }
    wanted.extend(configured.iter().map(|c| (c.clone(), false)));
    let mut seen: BTreeSet<WorkloadKind> = targets.iter().map(|t| t.kind().clone()).collect();
    seen.extend(custom_kinds);
    for (entry, optional) in wanted {
        let Ok(template) = TemplatePath::parse(&entry.template) else {
            continue;
        };
        let kind = WorkloadKind::new(&entry.group, &entry.version, &entry.kind, template);
        if !seen.insert(kind.clone()) {
            continue;
        }
        let target = KubeTarget::when_served(client.clone(), kind, settings.clone());
        targets.push(Arc::new(if optional { target.optional() } else { target }));
    }
    targets.extend(custom);
    targets
}

fn scope_description(namespaces: &[String]) -> String {
    if namespaces.is_empty() {
        "all".to_owned()
    } else {
        namespaces.join(",")
    }
}

#[cfg(test)]
mod delivery_tests;
