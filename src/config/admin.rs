//! `[admin]`.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// `[admin]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct AdminConfig {
    /// Address of the admin HTTP server (`/live`, `/ready`, `/metrics`).
    pub bind: SocketAddr,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([0, 0, 0, 0], 9090)),
        }
    }
}
