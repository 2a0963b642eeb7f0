//! A target registered by code: nudge stamps `Widget`s (`example.com/v1`), a kind
//! it was not built for, whose pod template lives at `spec.podTemplate`.
//!
//! [`KubeTarget`] watches and server-side-applies any namespaced kind with a pod
//! template, so a new kind is a few lines. (Without code, a `[[targets]]` entry in
//! the configuration does the same; a kind that needs more than an apply, such as
//! a Job that must be recreated, implements [`nudge::Target`] itself.)
//!
//! ```sh
//! cargo run --example custom_target -- [config.toml]
//! ```

use std::sync::Arc;

use nudge::model::{TemplatePath, WorkloadKind};
use nudge::targets::TargetSettings;
use nudge::{Config, Controller, KubeTarget};

/// `example.com/v1` Widget, its pod template at `spec.podTemplate`.
pub fn widget_kind() -> WorkloadKind {
    let template = TemplatePath::parse("spec.podTemplate").expect("a valid path");
    WorkloadKind::new("example.com", "v1", "Widget", template)
}

/// The controller `config` describes, stamping Widgets too.
pub fn controller(config: Config, client: kube::Client) -> Controller {
    let settings = TargetSettings::from_config(&config);
    let widgets = KubeTarget::new(client.clone(), widget_kind(), "widgets", settings);
    Controller::from_config(config, client).with_target(Arc::new(widgets))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_writer(std::io::stderr).init();
    let file = std::env::args().nth(1).map(std::path::PathBuf::from);
    let config = Config::load(file.as_deref(), &Default::default())?;
    let client = kube::Client::try_default().await?;
    let shutdown = nudge::runtime::shutdown::on_signal();
    controller(config, client).run(shutdown).await?;
    Ok(())
}
