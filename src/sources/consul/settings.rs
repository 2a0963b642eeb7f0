//! From `[sources.consul]` (and its `instances`) to running sources, with the
//! `CONSUL_HTTP_*` environment fallbacks of Consul's own CLI for the default cluster.

use std::path::{Path, PathBuf};

use super::{ClientSettings, ConsulSource, TlsSettings, WatchSettings};
use crate::config::ConsulConfig;
use crate::model::{NameError, SourceName};

/// Why the Consul configuration cannot become sources.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SettingsError {
    /// An instance name does not make a valid source name (`consul.<name>`).
    #[error("sources.consul.instances.{instance} cannot name a source")]
    InstanceName {
        /// The instance name.
        instance: String,
        /// Why.
        #[source]
        source: NameError,
    },
    /// The token file could not be read.
    #[error("cannot read the Consul token file {path}")]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP client could not be built (address, token or TLS files).
    #[error("cannot set up the Consul source {name}")]
    Client {
        /// The source.
        name: SourceName,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// The enabled Consul sources of `config`, reading `CONSUL_HTTP_ADDR`,
/// `CONSUL_HTTP_TOKEN` and `CONSUL_HTTP_TOKEN_FILE` for the default cluster.
pub fn sources_from_config(config: &ConsulConfig) -> Result<Vec<ConsulSource>, SettingsError> {
    sources_from_config_with_env(config, |var| std::env::var(var).ok())
}

/// [`sources_from_config`] with an explicit environment.
pub fn sources_from_config_with_env(
    config: &ConsulConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Vec<ConsulSource>, SettingsError> {
    let mut sources = Vec::new();
    if config.enabled.unwrap_or(false) {
        sources.push(source(SourceName::consul(), config, Some(&env))?);
    }
    for (instance, instance_config) in &config.instances {
        if !instance_config.enabled.unwrap_or(true) {
            continue;
        }
        let name = SourceName::new(format!("consul.{instance}")).map_err(|source| {
            SettingsError::InstanceName {
                instance: instance.clone(),
                source,
            }
        })?;
        sources.push(source(
            name,
            instance_config,
            None::<&fn(&str) -> Option<String>>,
        )?);
    }
    Ok(sources)
}

/// One source; `env` is given for the default cluster only.
fn source<E: Fn(&str) -> Option<String>>(
    name: SourceName,
    config: &ConsulConfig,
    env: Option<&E>,
) -> Result<ConsulSource, SettingsError> {
    let (client, watch) = settings(config, env)?;
    ConsulSource::new(name.clone(), &client, watch).map_err(|source| SettingsError::Client {
        name,
        source: Box::new(source),
    })
}

/// The client and watch settings of one cluster.
pub fn settings<E: Fn(&str) -> Option<String>>(
    config: &ConsulConfig,
    env: Option<&E>,
) -> Result<(ClientSettings, WatchSettings), SettingsError> {
    let from_env = |var: &str| env.and_then(|env| env(var)).filter(|v| !v.is_empty());
    let address = non_empty(&config.address)
        .or_else(|| from_env("CONSUL_HTTP_ADDR"))
        .unwrap_or_else(|| "http://127.0.0.1:8500".to_owned());
    let token = if let Some(token) = non_empty(&config.token.0) {
        Some(token)
    } else if let Some(path) = non_empty(&config.token_file) {
        Some(read_token(Path::new(&path))?)
    } else if let Some(token) = from_env("CONSUL_HTTP_TOKEN") {
        Some(token)
    } else if let Some(path) = from_env("CONSUL_HTTP_TOKEN_FILE") {
        Some(read_token(Path::new(&path))?)
    } else {
        None
    };
    let tls = &config.tls;
    let client = ClientSettings {
        address: with_scheme(address),
        token,
        datacenter: non_empty(&config.datacenter),
        namespace: non_empty(&config.namespace),
        partition: non_empty(&config.partition),
        tls: TlsSettings {
            ca_file: non_empty(&tls.ca_file).map(PathBuf::from),
            client_cert: non_empty(&tls.cert_file)
                .zip(non_empty(&tls.key_file))
                .map(|(cert, key)| (PathBuf::from(cert), PathBuf::from(key))),
            server_name: non_empty(&tls.server_name),
            verify: tls.verify,
        },
        timeout: config.timeout,
        max_idle_connections: super::ONE_OFF_READS,
    };
    let watch = WatchSettings {
        wait: config.wait,
        max_concurrent_queries: config.max_concurrent_queries,
        min_query_interval: config.min_query_interval,
        query_burst: config.query_burst,
        max_retry_interval: config.max_retry_interval,
    };
    Ok((client, watch))
}

fn non_empty(value: &str) -> Option<String> {
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

/// Consul's CLI accepts `host:port`; it means `http://host:port`.
fn with_scheme(address: String) -> String {
    if address.contains("://") {
        address
    } else {
        format!("http://{address}")
    }
}

fn read_token(path: &Path) -> Result<String, SettingsError> {
    std::fs::read_to_string(path)
        .map(|token| token.trim().to_owned())
        .map_err(|source| SettingsError::TokenFile {
            path: path.to_owned(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::config::Secret;
    use crate::sources::Source;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |var| vars.get(var).cloned()
    }

    #[test]
    fn the_default_cluster_is_off_unless_enabled() {
        let sources = sources_from_config_with_env(&ConsulConfig::default(), env(&[])).unwrap();
        assert!(sources.is_empty());
    }

    #[test]
    fn the_default_cluster_falls_back_to_consul_env_vars() {
        let (client, _) = settings(
            &ConsulConfig::default(),
            Some(&env(&[
                ("CONSUL_HTTP_ADDR", "10.0.0.1:8500"),
                ("CONSUL_HTTP_TOKEN", "t0k"),
            ])),
        )
        .unwrap();
        assert_eq!(client.address, "http://10.0.0.1:8500");
        assert_eq!(client.token.as_deref(), Some("t0k"));
        let (client, _) = settings(&ConsulConfig::default(), Some(&env(&[]))).unwrap();
        assert_eq!(client.address, "http://127.0.0.1:8500");
        assert_eq!(client.token, None);
    }

    #[test]
    fn configured_values_win_over_env_vars() {
        let config = ConsulConfig {
            address: "https://consul:8501".to_owned(),
            token: Secret::new("from-config"),
            ..ConsulConfig::default()
        };
        let (client, _) = settings(
            &config,
            Some(&env(&[
                ("CONSUL_HTTP_ADDR", "other:1"),
                ("CONSUL_HTTP_TOKEN", "env"),
            ])),
        )
        .unwrap();
        assert_eq!(client.address, "https://consul:8501");
        assert_eq!(client.token.as_deref(), Some("from-config"));
    }

    #[test]
    fn token_files_are_read_and_trimmed() {
        let dir = std::env::temp_dir().join(format!("nudge-consul-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "file-token\n").unwrap();
        let config = ConsulConfig {
            token_file: path.display().to_string(),
            ..ConsulConfig::default()
        };
        let (client, _) = settings(&config, Some(&env(&[]))).unwrap();
        assert_eq!(client.token.as_deref(), Some("file-token"));
        std::fs::remove_dir_all(&dir).unwrap();
        let missing = ConsulConfig {
            token_file: "/nonexistent/token".to_owned(),
            ..ConsulConfig::default()
        };
        assert!(matches!(
            settings(&missing, Some(&env(&[]))),
            Err(SettingsError::TokenFile { .. })
        ));
    }

    #[test]
    fn instances_become_named_sources_without_env_fallbacks() {
        let mut config = ConsulConfig {
            enabled: Some(true),
            ..ConsulConfig::default()
        };
        config.instances.insert(
            "eu".to_owned(),
            ConsulConfig {
                address: "http://consul.eu:8500".to_owned(),
                ..ConsulConfig::default()
            },
        );
        config.instances.insert(
            "off".to_owned(),
            ConsulConfig {
                enabled: Some(false),
                address: "http://x:1".to_owned(),
                ..ConsulConfig::default()
            },
        );
        let sources = sources_from_config_with_env(
            &config,
            env(&[("CONSUL_HTTP_ADDR", "http://local:8500")]),
        )
        .unwrap();
        let names: Vec<(&str, &str)> = sources
            .iter()
            .map(|s| (s.name().as_str(), s.address()))
            .collect();
        assert_eq!(
            names,
            [
                ("consul", "http://local:8500"),
                ("consul.eu", "http://consul.eu:8500")
            ]
        );
    }
}
