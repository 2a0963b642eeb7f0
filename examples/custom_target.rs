//! A target registered by code: nudge stamps `Widget`s (`example.com/v1`), a kind
//! it was not built for, whose pod template lives at `spec.podTemplate`.
//!
//! [`KubeTarget`] watches and server-side-applies any namespaced kind with a pod
//! template, so a new kind is a few lines. (Without code, a `[[targets]]` entry in
//! the configuration does the same; a kind that needs more than an apply, such as
//! a Job that must be recreated, implements [`nudge::target::Target`] itself.)
//!
//! ```sh
//! cargo run --example custom_target -- [config.toml]
//! ```

use std::sync::Arc;

use nudge::target::{KubeTarget, TargetSettings, TemplatePath, WorkloadKind};
use nudge::{Config, Controller};

/// `example.com/v1` Widget, its pod template at `spec.podTemplate`.
pub fn widget_kind() -> WorkloadKind {
    let template = TemplatePath::parse("spec.podTemplate").expect("a valid path");
    WorkloadKind::new("example.com", "v1", "Widget", template)
}

/// The controller `config` describes, stamping Widgets too.
pub fn controller(config: Config, client: kube::Client) -> Controller {
    let settings = TargetSettings::from_config(&config);
    let widgets = KubeTarget::new(client.clone(), widget_kind(), "widgets", settings);
    Controller::from_config(config, client)
        .operate_as_configured()
        .with_target(Arc::new(widgets))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();
    let file = std::env::args().nth(1).map(std::path::PathBuf::from);
    let config = Config::load(file.as_deref())?;
    let client = kube::Client::try_default().await?;
    let shutdown = nudge::shutdown::on_signal();
    controller(config, client).run(shutdown).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use apiserver_double::ApiServerDouble;
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
    use kube::config::{KubeConfigOptions, Kubeconfig};
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    use super::*;

    fn widget_crd() -> serde_json::Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com", "scope": "Namespaced",
                "names": {"kind": "Widget", "plural": "widgets", "listKind": "WidgetList", "singular": "widget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}],
            },
        })
    }

    /// The controller built by `controller` stamps a Widget at `spec.podTemplate`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn widgets_are_stamped_at_their_pod_template() {
        let double = ApiServerDouble::start().await.unwrap();
        double
            .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}))
            .unwrap();
        double.create(widget_crd()).unwrap();
        double
            .create(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cfg", "namespace": "apps"}, "data": {"k": "1"}}))
            .unwrap();
        double
            .create(json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "apps",
                         "annotations": {"nudge.dev/configmap-cfg": "cfg"}},
            "spec": {"podTemplate": {"spec": {"containers": [{"name": "app", "image": "x"}]}}}}))
            .unwrap();

        let kubeconfig = Kubeconfig::read_from(double.kubeconfig_path()).unwrap();
        let options = KubeConfigOptions::default();
        let client_config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .unwrap();
        let client = kube::Client::try_from(client_config).unwrap();
        let mut config = Config::default();
        config.kubernetes.namespaces = vec!["apps".into()];
        config.kubernetes.namespace = "apps".into();
        config.engine.debounce = Duration::from_millis(100);
        config.admin.bind = ([127, 0, 0, 1], 0).into();
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(controller(config, client.clone()).run(shutdown.clone()));

        let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
        let widgets: Api<DynamicObject> = Api::namespaced_with(
            client,
            "apps",
            &ApiResource::from_gvk_with_plural(&gvk, "widgets"),
        );
        let mut stamp = None;
        for _ in 0..100 {
            let widget = widgets.get("w").await.unwrap();
            let annotations = &widget.data["spec"]["podTemplate"]["metadata"]["annotations"];
            if let Some(value) = annotations["nudge.dev/checksum-cfg"].as_str() {
                stamp = Some(value.to_owned());
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let stamp = stamp.expect("the Widget is stamped within 10 s");
        assert!(stamp.starts_with("sha256-"), "{stamp}");
        shutdown.cancel();
        running.await.unwrap().unwrap();
    }
}
