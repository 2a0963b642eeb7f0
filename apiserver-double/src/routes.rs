//! URL paths of the Kubernetes REST API.

use crate::registry::Registry;

/// What a request path addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// `/api`.
    CoreVersions,
    /// `/apis`.
    Groups,
    /// `/apis/<group>`.
    Group(String),
    /// `/api/v1`, `/apis/<group>/<version>`.
    ResourceList { group: String, version: String },
    /// `/version`.
    Version,
    /// `/healthz`, `/livez`, `/readyz`.
    Health,
    /// A collection: `.../<resource>` or `.../namespaces/<ns>/<resource>`.
    Collection {
        resource: usize,
        namespace: Option<String>,
    },
    /// One object, optionally a subresource of it.
    Object {
        resource: usize,
        namespace: Option<String>,
        name: String,
        subresource: Option<String>,
    },
    /// A path kube-apiserver routes to no API at all: a group or group
    /// version it does not serve (a CRD not installed), a path of a custom
    /// resource group version naming no resource of it (apiextensions-apiserver
    /// hands those on), or no API path. Answered as Go's `http.NotFound`
    /// answers, in plain text, not with a `Status`.
    NotServed,
    /// A path under a served built-in group version that names nothing in it
    /// (a `Status` NotFound).
    Unknown,
}

/// Parses a request path (without query) against the served resources.
pub(crate) fn parse(registry: &Registry, path: &str) -> Route {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["api"] => Route::CoreVersions,
        ["apis"] => Route::Groups,
        ["version"] => Route::Version,
        ["healthz"] | ["livez"] | ["readyz"] => Route::Health,
        ["api", "v1"] => Route::ResourceList {
            group: String::new(),
            version: "v1".into(),
        },
        ["api", "v1", rest @ ..] => resource_route(registry, "", "v1", rest),
        ["apis", g] if registry.groups().iter().any(|x| x == g) => Route::Group((*g).to_string()),
        ["apis", g, v] if serves(registry, g, v) => Route::ResourceList {
            group: (*g).to_string(),
            version: (*v).to_string(),
        },
        ["apis", g, v, rest @ ..] if serves(registry, g, v) => {
            match resource_route(registry, g, v, rest) {
                Route::Unknown if custom_only(registry, g, v) => Route::NotServed,
                route => route,
            }
        }
        [] => Route::Unknown,
        _ => Route::NotServed,
    }
}

/// Whether `group/version` is served.
fn serves(registry: &Registry, group: &str, version: &str) -> bool {
    registry.versions(group).iter().any(|v| v == version)
}

/// Whether every resource of `group/version` is a custom resource (served by
/// apiextensions-apiserver, which hands paths it does not know on).
fn custom_only(registry: &Registry, group: &str, version: &str) -> bool {
    registry
        .all()
        .iter()
        .filter(|(_, t)| t.group == group && t.version == version)
        .all(|(_, t)| t.is_custom())
}

fn resource_route(registry: &Registry, group: &str, version: &str, rest: &[&str]) -> Route {
    let find = |plural: &str| registry.lookup(group, version, plural);
    let namespaced = |i: usize| registry.get(i).is_some_and(|r| r.namespaced);
    match rest {
        ["namespaces", ns, plural, tail @ ..] if find(plural).is_some_and(namespaced) => {
            let resource = find(plural).unwrap_or_default();
            let namespace = Some((*ns).to_string());
            match tail {
                [] => Route::Collection {
                    resource,
                    namespace,
                },
                [name] => Route::Object {
                    resource,
                    namespace,
                    name: (*name).to_string(),
                    subresource: None,
                },
                [name, sub] => Route::Object {
                    resource,
                    namespace,
                    name: (*name).to_string(),
                    subresource: Some((*sub).to_string()),
                },
                _ => Route::Unknown,
            }
        }
        [plural, tail @ ..] => match find(plural) {
            Some(resource) => match tail {
                [] => Route::Collection {
                    resource,
                    namespace: None,
                },
                [name] if !namespaced(resource) => Route::Object {
                    resource,
                    namespace: None,
                    name: (*name).to_string(),
                    subresource: None,
                },
                [name, sub] if !namespaced(resource) => Route::Object {
                    resource,
                    namespace: None,
                    name: (*name).to_string(),
                    subresource: Some((*sub).to_string()),
                },
                _ => Route::Unknown,
            },
            None => Route::Unknown,
        },
        [] => Route::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_paths() {
        let r = Registry::new();
        let parse = |p: &str| parse(&r, p);
        assert_eq!(
            parse("/api/v1/namespaces/t/configmaps/a"),
            Route::Object {
                resource: 1,
                namespace: Some("t".into()),
                name: "a".into(),
                subresource: None
            }
        );
        assert_eq!(
            parse("/api/v1/configmaps"),
            Route::Collection {
                resource: 1,
                namespace: None
            }
        );
        assert_eq!(
            parse("/api/v1/namespaces/t"),
            Route::Object {
                resource: 0,
                namespace: None,
                name: "t".into(),
                subresource: None
            }
        );
        assert_eq!(
            parse("/api/v1/namespaces/t/status"),
            Route::Object {
                resource: 0,
                namespace: None,
                name: "t".into(),
                subresource: Some("status".into())
            }
        );
        assert_eq!(
            parse("/apis/apps/v1/namespaces/t/deployments/web/status"),
            Route::Object {
                resource: 5,
                namespace: Some("t".into()),
                name: "web".into(),
                subresource: Some("status".into())
            }
        );
        assert_eq!(
            parse("/apis/apps/v1/deployments"),
            Route::Collection {
                resource: 5,
                namespace: None
            }
        );
        assert_eq!(parse("/api/v1/configmaps/x"), Route::Unknown);
        assert_eq!(parse("/apis/apps/v1/things"), Route::Unknown);
        assert_eq!(parse("/apis/nope/v1/things"), Route::NotServed);
        assert_eq!(parse("/apis/nope/v1"), Route::NotServed);
        assert_eq!(parse("/apis/nope"), Route::NotServed);
        assert_eq!(parse("/apis/apps/v2/deployments"), Route::NotServed);
        assert_eq!(parse("/api/v2/configmaps"), Route::NotServed);
        assert_eq!(parse("/metrics-of-nothing"), Route::NotServed);
        assert_eq!(parse("/apis/apps"), Route::Group("apps".into()));
    }
}
