//! A target for a kind nudge was not built for: `example.com/v1` Widget, its pod
//! template at `spec.podTemplate`, written with [`KubeTarget`].

use std::sync::Arc;

use nudge::Controller;
use nudge::target::{KubeTarget, Target, TargetSettings, TemplatePath, WorkloadKind};

/// `example.com/v1` Widget, its pod template at `spec.podTemplate`.
pub fn widget_kind() -> WorkloadKind {
    let template = TemplatePath::parse("spec.podTemplate").expect("a valid template path");
    WorkloadKind::new("example.com", "v1", "Widget", template)
}

/// Widgets, watched and stamped with `controller`'s client and settings
/// (field manager, annotation prefix, namespaces).
pub fn widget_target(controller: &Controller) -> Arc<dyn Target> {
    let settings = TargetSettings::from_config(controller.config());
    Arc::new(KubeTarget::new(
        controller.client().clone(),
        widget_kind(),
        "widgets",
        settings,
    ))
}
