//! Secrets: values as bytes; native fingerprints are keyed with the installation
//! key (`hmac-sha256-…`), never plain hashes of secret content.

use k8s_openapi::api::core::v1::Secret;

use super::objects::ContentObject;
use crate::fingerprint::{ObjectData, ObjectKind};

impl ContentObject for Secret {
    const KIND: ObjectKind = ObjectKind::Secret;

    fn data(&self) -> ObjectData {
        ObjectData::from_secret(self)
    }
}

/// Key of the installation key inside its Secret.
const KEY_FIELD: &str = "key";

/// Why the installation key could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The configured key file cannot be read.
    #[error("cannot read fingerprint key file {path}")]
    File {
        /// The configured path.
        path: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The key (from file or Secret) is unusable, e.g. too short.
    #[error("fingerprint key from {origin} is unusable")]
    Invalid {
        /// File path or `secret <ns>/<name>`.
        origin: String,
        /// Why.
        #[source]
        source: crate::fingerprint::FingerprintError,
    },
    /// Reading or creating the key Secret failed.
    #[error("cannot read or create the key Secret {namespace}/{name}")]
    Api {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl KeyError {
    /// What an operator should do about it, when it can be told.
    pub(crate) fn hint(&self) -> Option<String> {
        match self {
            Self::File { path, .. } => Some(format!(
                "check fingerprint.key_file ({}) or unset it to keep the key in a Secret",
                path.display()
            )),
            Self::Invalid { .. } => Some(
                "the key must be at least 32 bytes; replace it (every Secret workload rolls once)"
                    .into(),
            ),
            Self::Api {
                namespace,
                name,
                source: kube::Error::Api(status),
            } => match status.code {
                404 => Some(format!(
                    "namespace {namespace:?} does not exist: create it (kubectl create namespace {namespace}) or set kubernetes.namespace (NUDGE_KUBERNETES__NAMESPACE) to the namespace nudge runs in"
                )),
                401 | 403 => Some(format!(
                    "nudge needs get and create on Secrets in namespace {namespace:?} (Secret {name}; see deploy/base/rbac-own-namespace.yaml), or set fingerprint.key_file"
                )),
                _ => None,
            },
            Self::Api { .. } => None,
        }
    }
}

/// Loads the installation key: from `key_file` when configured, otherwise from the
/// Secret `namespace/name`, which is created with a fresh random key the first time.
/// Replicas starting together converge on whichever create wins.
pub async fn installation_key(
    client: &kube::Client,
    key_file: Option<&std::path::Path>,
    namespace: &str,
    name: &str,
) -> Result<crate::fingerprint::FingerprintKey, KeyError> {
    if let Some(key) = read_installation_key(client, key_file, namespace, name).await? {
        return Ok(key);
    }
    let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), namespace);
    let api_error = |source| KeyError::Api {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        source,
    };
    let secret = match api.create(&Default::default(), &new_key_secret(name)).await {
        Ok(secret) => secret,
        Err(kube::Error::Api(status)) if status.is_already_exists() => {
            api.get(name).await.map_err(api_error)?
        }
        Err(error) => return Err(api_error(error)),
    };
    key_from_secret(secret, namespace, name)
}

/// Reads the installation key like [`installation_key`], but never creates
/// anything: `Ok(None)` when no key file is configured and the key Secret does not
/// exist yet (`nudge explain` uses this; it must not write to the cluster).
pub async fn read_installation_key(
    client: &kube::Client,
    key_file: Option<&std::path::Path>,
    namespace: &str,
    name: &str,
) -> Result<Option<crate::fingerprint::FingerprintKey>, KeyError> {
    use crate::fingerprint::FingerprintKey;
    if let Some(path) = key_file {
        let bytes = std::fs::read(path).map_err(|source| KeyError::File {
            path: path.to_owned(),
            source,
        })?;
        return FingerprintKey::new(bytes)
            .map(Some)
            .map_err(|source| KeyError::Invalid {
                origin: path.display().to_string(),
                source,
            });
    }
    let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), namespace);
    let secret = api.get_opt(name).await.map_err(|source| KeyError::Api {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        source,
    })?;
    secret
        .map(|secret| key_from_secret(secret, namespace, name))
        .transpose()
}

/// The key stored in the key Secret.
fn key_from_secret(
    secret: Secret,
    namespace: &str,
    name: &str,
) -> Result<crate::fingerprint::FingerprintKey, KeyError> {
    let bytes = secret
        .data
        .and_then(|mut data| data.remove(KEY_FIELD))
        .map(|b| b.0)
        .unwrap_or_default();
    crate::fingerprint::FingerprintKey::new(bytes).map_err(|source| KeyError::Invalid {
        origin: format!("secret {namespace}/{name}"),
        source,
    })
}

fn new_key_secret(name: &str) -> Secret {
    let key = crate::fingerprint::FingerprintKey::generate();
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some([("app.kubernetes.io/name".to_owned(), "nudge".to_owned())].into()),
            ..Default::default()
        },
        data: Some(
            [(
                KEY_FIELD.to_owned(),
                k8s_openapi::ByteString(key.as_bytes().to_vec()),
            )]
            .into(),
        ),
        type_: Some("Opaque".to_owned()),
        ..Default::default()
    }
}
