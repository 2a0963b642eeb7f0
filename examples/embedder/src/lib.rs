//! nudge embedded as a library, through its public API only: two custom
//! sources and a custom target, registered on nudge's own command line.
//!
//! - [`file::FileSource`] (`file`): files under a configured root directory,
//!   watched with the `notify` crate; `nudge.dev/file-cfg: app.conf`.
//! - [`http::HttpSource`] (`http`): the body behind a URL, polled;
//!   `nudge.dev/http-motd: https://config.example.com/motd.txt`.
//! - [`widget::widget_target`]: `example.com/v1` Widgets, whose pod template
//!   is at `spec.podTemplate`.
//!
//! [`customize`] is everything the binary adds to nudge; the tests build their
//! controllers with it too, so they test what the binary runs.

pub mod file;
pub mod http;
pub mod widget;

use nudge::Controller;

/// Adds the `file` and `http` sources, each configured from its
/// `[sources.<key>]` section (or `NUDGE_SOURCES__<KEY>__*`), and the Widget
/// target to `controller`.
pub fn customize(controller: Controller) -> Controller {
    let widgets = widget::widget_target(&controller);
    controller
        .with_configured_source("file", file::FileSource::from_config)
        .with_configured_source("http", http::HttpSource::from_config)
        .with_target(widgets)
}
