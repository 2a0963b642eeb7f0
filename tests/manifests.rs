//! Every manifest under `deploy/` parses into its Kubernetes type, the installs are
//! hardened as intended, and RBAC grants nothing beyond nudge's allow-list.
//!
//! How each kind of manifest is checked:
//!
//! - **Plain YAML** (every `*.yaml` under `deploy/` except the Helm chart,
//!   `kustomization.yaml` files and the patches they name): each document is
//!   deserialized into its k8s-openapi type, dispatched on `apiVersion`/`kind`
//!   (an unknown kind fails the test), and serialized back: the round trip must
//!   give the same document, which catches misspelled or misplaced fields.
//! - **Kustomize overlays**: rendered with `kubectl kustomize` when `kubectl` is
//!   on the PATH (it is on nudge's development machines and CI; kustomize is built
//!   into it). Without it, the test follows `resources:` itself and checks the
//!   files it reaches, without applying patches, and says so on stderr.
//! - **Helm chart**: Helm is not installable here (no Debian package), so the test
//!   renders `templates/*.yaml` with [`helm_lite`], a small interpreter of the Go
//!   template subset the chart limits itself to: `.Values`/`.Release`/`.Chart`
//!   paths, `$`, `if`/`else`/`end`, `range` over lists, `{{-`/`-}}` trimming, and
//!   the functions `quote`, `default`, `toYaml`, `toToml`, `indent`, `nindent`,
//!   `sha256sum`. A missing value is an error (stricter than Helm). Keep the chart
//!   within that subset, or extend the interpreter.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value as Json;
use serde_yaml::Value as Yaml;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// One parsed Kubernetes object (not every kind is inspected further).
#[derive(Debug, Clone)]
#[allow(dead_code)]
enum Object {
    Namespace(Box<Namespace>),
    ServiceAccount(Box<ServiceAccount>),
    ConfigMap(Box<ConfigMap>),
    Secret(Box<Secret>),
    Service(Box<Service>),
    Deployment(Box<Deployment>),
    PodDisruptionBudget(Box<PodDisruptionBudget>),
    Role(Box<Role>),
    RoleBinding(Box<RoleBinding>),
    ClusterRole(Box<ClusterRole>),
    ClusterRoleBinding(Box<ClusterRoleBinding>),
    MutatingWebhookConfiguration(Box<MutatingWebhookConfiguration>),
    /// A custom resource of a known CRD (cert-manager), checked for shape only.
    Custom {
        kind: String,
        name: String,
    },
}

/// Custom resources the manifests may use: their CRDs are not in k8s-openapi.
const KNOWN_CUSTOM_KINDS: &[(&str, &str)] = &[
    ("cert-manager.io/v1", "Issuer"),
    ("cert-manager.io/v1", "Certificate"),
];

/// Deserializes `doc` into `T` and checks that serializing it back gives `doc`.
fn typed<T: DeserializeOwned + Serialize>(doc: &Json, origin: &str) -> Box<T> {
    let object: T = serde_json::from_value(doc.clone())
        .unwrap_or_else(|e| panic!("{origin}: does not parse as its kind: {e}\n{doc:#}"));
    let back = serde_json::to_value(&object).unwrap();
    assert_eq!(
        &back, doc,
        "{origin}: fields were lost in a round trip (misspelled or misplaced?)"
    );
    Box::new(object)
}

/// Dispatches one document on apiVersion/kind; unknown kinds fail.
fn parse_object(doc: &Yaml, origin: &str) -> Object {
    let json = serde_json::to_value(doc).unwrap();
    let api_version = json["apiVersion"].as_str().unwrap_or_default().to_owned();
    let kind = json["kind"].as_str().unwrap_or_default().to_owned();
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => Object::Namespace(typed(&json, origin)),
        ("v1", "ServiceAccount") => Object::ServiceAccount(typed(&json, origin)),
        ("v1", "ConfigMap") => Object::ConfigMap(typed(&json, origin)),
        ("v1", "Secret") => Object::Secret(typed(&json, origin)),
        ("v1", "Service") => Object::Service(typed(&json, origin)),
        ("apps/v1", "Deployment") => Object::Deployment(typed(&json, origin)),
        ("policy/v1", "PodDisruptionBudget") => Object::PodDisruptionBudget(typed(&json, origin)),
        ("rbac.authorization.k8s.io/v1", "Role") => Object::Role(typed(&json, origin)),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
            Object::RoleBinding(typed(&json, origin))
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
            Object::ClusterRole(typed(&json, origin))
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            Object::ClusterRoleBinding(typed(&json, origin))
        }
        ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration") => {
            Object::MutatingWebhookConfiguration(typed(&json, origin))
        }
        (api_version, kind) if KNOWN_CUSTOM_KINDS.contains(&(api_version, kind)) => {
            let name = json["metadata"]["name"]
                .as_str()
                .unwrap_or_else(|| panic!("{origin}: {kind} without metadata.name"));
            assert!(
                json["spec"].is_object(),
                "{origin}: {kind} {name} without spec"
            );
            Object::Custom {
                kind: kind.to_owned(),
                name: name.to_owned(),
            }
        }
        (api_version, kind) => panic!(
            "{origin}: unknown kind {api_version}/{kind}; add it to parse_object in \
             tests/manifests.rs"
        ),
    }
}

/// Every non-empty document of a multi-document YAML text.
fn documents(text: &str, origin: &str) -> Vec<Yaml> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| Yaml::deserialize(doc).unwrap_or_else(|e| panic!("{origin}: invalid YAML: {e}")))
        .filter(|doc| !doc.is_null())
        .collect()
}

use serde::Deserialize as _;

fn parse_text(text: &str, origin: &str) -> Vec<Object> {
    documents(text, origin)
        .iter()
        .map(|doc| parse_object(doc, origin))
        .collect()
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            yaml_files(&path, out);
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) {
            out.push(path);
        }
    }
}

/// The `kustomization.yaml` files under `deploy/`, parsed.
fn kustomizations() -> Vec<(PathBuf, Yaml)> {
    let mut files = Vec::new();
    yaml_files(&deploy_dir(), &mut files);
    files
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "kustomization.yaml"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let doc = serde_yaml::from_str(&text).unwrap();
            (p, doc)
        })
        .collect()
}

/// Files a kustomization uses as patches, and files named `*-patch.yaml`
/// (partial objects, not parsed as kinds).
fn patch_files() -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut files = Vec::new();
    yaml_files(&deploy_dir(), &mut files);
    for file in files {
        if file
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with("-patch.yaml"))
        {
            out.insert(file.canonicalize().unwrap());
        }
    }
    for (path, doc) in kustomizations() {
        let dir = path.parent().unwrap();
        for patch in doc["patches"].as_sequence().into_iter().flatten() {
            if let Some(file) = patch["path"].as_str() {
                out.insert(dir.join(file).canonicalize().unwrap());
            }
        }
    }
    out
}

#[test]
fn every_plain_manifest_parses_into_its_kind() {
    let helm = deploy_dir().join("helm");
    let patches = patch_files();
    let mut files = Vec::new();
    yaml_files(&deploy_dir(), &mut files);
    let mut parsed = 0;
    for path in files {
        let origin = path.display().to_string();
        if path.starts_with(&helm) || path.file_name().is_some_and(|n| n == "kustomization.yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        if patches.contains(&path.canonicalize().unwrap()) {
            // A partial object: it must at least say what it patches.
            for doc in documents(&text, &origin) {
                assert!(
                    doc["apiVersion"].is_string()
                        && doc["kind"].is_string()
                        && doc["metadata"]["name"].is_string(),
                    "{origin}: a patch names apiVersion, kind and metadata.name"
                );
            }
            continue;
        }
        let objects = parse_text(&text, &origin);
        check_rules_allowed(&objects, "nudge-system");
        parsed += objects.len();
    }
    assert!(parsed >= 10, "only {parsed} objects found under deploy/");
}

#[test]
fn kustomizations_reference_existing_files() {
    for (path, doc) in kustomizations() {
        let dir = path.parent().unwrap();
        let named = doc["resources"]
            .as_sequence()
            .into_iter()
            .flatten()
            .chain(
                doc["patches"]
                    .as_sequence()
                    .into_iter()
                    .flatten()
                    .map(|p| &p["path"]),
            )
            .filter_map(Yaml::as_str);
        for file in named {
            assert!(
                dir.join(file).exists(),
                "{}: {file} does not exist",
                path.display()
            );
        }
    }
}

// === kustomize ===

fn kubectl_available() -> bool {
    Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// An overlay's objects: `kubectl kustomize`, or the fallback described above.
fn render_overlay(overlay: &str) -> Vec<Object> {
    let dir = deploy_dir().join("overlays").join(overlay);
    if kubectl_available() {
        let output = Command::new("kubectl")
            .arg("kustomize")
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "kubectl kustomize {overlay}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let text = String::from_utf8(output.stdout).unwrap();
        return parse_text(&text, &format!("overlay {overlay}"));
    }
    eprintln!("kubectl not found: resolving {overlay} without applying its patches");
    let mut objects = Vec::new();
    collect_resources(&dir, &mut objects);
    objects
}

fn collect_resources(dir: &Path, out: &mut Vec<Object>) {
    let text = std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap();
    let doc: Yaml = serde_yaml::from_str(&text).unwrap();
    for resource in doc["resources"].as_sequence().into_iter().flatten() {
        let path = dir.join(resource.as_str().unwrap());
        if path.is_dir() {
            collect_resources(&path, out);
        } else {
            let text = std::fs::read_to_string(&path).unwrap();
            out.extend(parse_text(&text, &path.display().to_string()));
        }
    }
}

#[test]
fn cluster_wide_overlay_is_hardened_and_least_privilege() {
    let objects = render_overlay("cluster-wide");
    check_install(
        &objects,
        "nudge-system",
        Scope::Cluster,
        Webhook::SelfManaged,
    );
}

#[test]
fn single_namespace_overlay_uses_roles_and_watches_one_namespace() {
    let objects = render_overlay("single-namespace");
    check_install(
        &objects,
        "nudge-system",
        Scope::Namespaces(&["my-app"]),
        Webhook::SelfManaged,
    );
    if kubectl_available() {
        let deployment = deployment(&objects);
        assert_eq!(
            env_value(&deployment, "NUDGE_KUBERNETES__NAMESPACES").as_deref(),
            Some("[my-app]")
        );
    }
}

/// The cluster-wide overlay with `component` added, as a user's one-line change
/// does (`kubectl kustomize` only: components are patches).
fn render_with_component(component: &str) -> Option<Vec<Object>> {
    if !kubectl_available() {
        eprintln!("kubectl not found: not rendering component {component}");
        return None;
    }
    let dir = deploy_dir()
        .join("overlays")
        .join(format!("test-{component}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!("resources: [../cluster-wide]\ncomponents: [../../components/{component}]\n"),
    )
    .unwrap();
    let output = Command::new("kubectl").arg("kustomize").arg(&dir).output();
    let _ = std::fs::remove_dir_all(&dir);
    let output = output.unwrap();
    assert!(
        output.status.success(),
        "kubectl kustomize with {component}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    Some(parse_text(&text, &format!("component {component}")))
}

#[test]
fn components_turn_the_webhook_off_or_to_cert_manager_with_one_line() {
    if let Some(objects) = render_with_component("without-webhook") {
        check_install(&objects, "nudge-system", Scope::Cluster, Webhook::Off);
    }
    if let Some(objects) = render_with_component("cert-manager") {
        check_install(&objects, "nudge-system", Scope::Cluster, Webhook::Files);
        let certificates = objects
            .iter()
            .filter(|o| matches!(o, Object::Custom { kind, .. } if kind == "Certificate"))
            .count();
        assert_eq!(certificates, 2, "the CA and the serving Certificate");
    }
}

// === Helm ===

fn chart_dir() -> PathBuf {
    deploy_dir().join("helm").join("nudge")
}

fn render_chart(overrides: Option<Yaml>) -> Vec<Object> {
    let chart: Yaml =
        serde_yaml::from_str(&std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap())
            .unwrap();
    let mut values: Yaml =
        serde_yaml::from_str(&std::fs::read_to_string(chart_dir().join("values.yaml")).unwrap())
            .unwrap();
    if let Some(overrides) = overrides {
        helm_lite::merge(&mut values, overrides);
    }
    let root: Yaml = serde_yaml::from_str(&format!(
        "Release: {{Name: nudge, Namespace: nudge-system}}\n\
         Chart: {{Name: {}, Version: {:?}, AppVersion: {:?}}}",
        chart["name"].as_str().unwrap(),
        chart["version"].as_str().unwrap(),
        chart["appVersion"].as_str().unwrap(),
    ))
    .unwrap();
    let mut root = root;
    root.as_mapping_mut()
        .unwrap()
        .insert(Yaml::from("Values"), values);
    let mut templates = Vec::new();
    yaml_files(&chart_dir().join("templates"), &mut templates);
    let mut objects = Vec::new();
    for path in templates {
        let text = std::fs::read_to_string(&path).unwrap();
        let rendered =
            helm_lite::render(&text, &root).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        objects.extend(parse_text(&rendered, &path.display().to_string()));
    }
    objects
}

#[test]
fn helm_chart_with_default_values_is_a_cluster_wide_install() {
    let objects = render_chart(None);
    check_install(
        &objects,
        "nudge-system",
        Scope::Cluster,
        Webhook::SelfManaged,
    );
    assert_eq!(deployment(&objects).spec.unwrap().replicas, Some(2));
}

#[test]
fn helm_chart_with_namespaces_grants_roles_in_each() {
    let overrides = serde_yaml::from_str(
        "config: {kubernetes: {namespaces: [team-a, team-b]}}\nreplicaCount: 3\n\
         image: {repository: registry.example/nudge, tag: v9}",
    )
    .unwrap();
    let objects = render_chart(Some(overrides));
    check_install(
        &objects,
        "nudge-system",
        Scope::Namespaces(&["team-a", "team-b"]),
        Webhook::SelfManaged,
    );
    let deployment = deployment(&objects);
    let spec = deployment.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(3));
    let image = spec.template.spec.as_ref().unwrap().containers[0]
        .image
        .clone();
    assert_eq!(image.as_deref(), Some("registry.example/nudge:v9"));
}

#[test]
fn helm_chart_turns_the_webhook_off_or_to_cert_manager_with_one_value() {
    let off = serde_yaml::from_str("webhook: {enabled: false}").unwrap();
    check_install(
        &render_chart(Some(off)),
        "nudge-system",
        Scope::Cluster,
        Webhook::Off,
    );
    let files = serde_yaml::from_str(
        "webhook: {selfManagedCertificate: false, caInjectFrom: nudge-system/nudge-webhook}",
    )
    .unwrap();
    check_install(
        &render_chart(Some(files)),
        "nudge-system",
        Scope::Cluster,
        Webhook::Files,
    );
}

#[test]
fn helm_chart_mounts_the_notification_url_from_a_secret() {
    let values = serde_yaml::from_str(
        "notify: {urlSecretName: slack-hook, urlSecretKey: webhook}\n\
         config: {notify: {enabled: true, format: slack}}",
    )
    .unwrap();
    let objects = render_chart(Some(values));
    let deployment = deployment(&objects);
    let path = env_value(&deployment, "NUDGE_NOTIFY__URL_FILE").expect("url_file set");
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "notify-url")
        .expect("the Secret's volume");
    let secret = volume.secret.as_ref().unwrap();
    assert_eq!(secret.secret_name.as_deref(), Some("slack-hook"));
    let item = &secret.items.as_ref().unwrap()[0];
    assert_eq!((item.key.as_str(), item.path.as_str()), ("webhook", "url"));
    let mount = pod.containers[0]
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "notify-url")
        .expect("mounted");
    assert_eq!(format!("{}/{}", mount.mount_path, item.path), path);
    // Without the Secret nothing is mounted.
    let plain = deployment_of_default_chart();
    assert!(env_value(&plain, "NUDGE_NOTIFY__URL_FILE").is_none());
}

fn deployment_of_default_chart() -> Deployment {
    deployment(&render_chart(None))
}

// === what every install must satisfy ===

#[derive(Debug, Clone, Copy)]
enum Scope<'a> {
    /// A ClusterRole for workloads and sources.
    Cluster,
    /// A Role in each of these namespaces.
    Namespaces(&'a [&'a str]),
}

fn deployment(objects: &[Object]) -> Deployment {
    let deployments: Vec<&Deployment> = objects
        .iter()
        .filter_map(|o| match o {
            Object::Deployment(d) => Some(&**d),
            _ => None,
        })
        .collect();
    assert_eq!(deployments.len(), 1, "exactly one Deployment");
    deployments[0].clone()
}

fn env_value(deployment: &Deployment, name: &str) -> Option<String> {
    let container = &deployment.spec.as_ref()?.template.spec.as_ref()?.containers[0];
    container
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)?
        .value
        .clone()
}

/// How an install runs the admission webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Webhook {
    Off,
    SelfManaged,
    /// The certificate from mounted files (cert-manager).
    Files,
}

fn check_install(objects: &[Object], namespace: &str, scope: Scope, webhook: Webhook) {
    let deployment = deployment(objects);
    check_deployment(&deployment, namespace);
    let config = check_config(objects);
    check_rbac(objects, namespace, scope);
    let service = objects
        .iter()
        .find_map(|o| match o {
            Object::Service(s) => Some(s),
            _ => None,
        })
        .expect("a webhook Service");
    let port = &service.spec.as_ref().unwrap().ports.as_ref().unwrap()[0];
    assert_eq!(port.port, 443);
    check_webhook(objects, &deployment, &config, service, webhook);
}

/// The webhook settings nudge runs with (the config file, then the Deployment's
/// literal `NUDGE_WEBHOOK__*` env) agree with the MutatingWebhookConfiguration
/// and Service of the install.
fn check_webhook(
    objects: &[Object],
    deployment: &Deployment,
    config: &nudge::config::Config,
    service: &Service,
    expected: Webhook,
) {
    let setting = |name: &str, from_file: String| {
        env_value(deployment, &format!("NUDGE_WEBHOOK__{name}")).unwrap_or(from_file)
    };
    let enabled = setting("ENABLED", config.webhook.enabled.to_string()) == "true";
    let self_managed = setting(
        "SELF_MANAGED_CERTIFICATE",
        config.webhook.self_managed_certificate.to_string(),
    ) == "true";
    let running = match (enabled, self_managed) {
        (false, _) => Webhook::Off,
        (true, true) => Webhook::SelfManaged,
        (true, false) => Webhook::Files,
    };
    assert_eq!(running, expected, "how nudge runs the webhook");
    let configurations: Vec<&MutatingWebhookConfiguration> = objects
        .iter()
        .filter_map(|o| match o {
            Object::MutatingWebhookConfiguration(c) => Some(&**c),
            _ => None,
        })
        .collect();
    if expected == Webhook::Off {
        assert!(configurations.is_empty(), "no webhook registered when off");
        return;
    }
    assert_eq!(configurations.len(), 1, "one MutatingWebhookConfiguration");
    let configuration = configurations[0];
    assert_eq!(
        configuration.metadata.name.as_deref(),
        Some(
            setting(
                "CONFIGURATION_NAME",
                config.webhook.configuration_name.clone()
            )
            .as_str()
        ),
        "nudge writes the caBundle of its own configuration"
    );
    let injected = configuration
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("cert-manager.io/inject-ca-from"));
    assert_eq!(
        injected,
        expected == Webhook::Files,
        "who fills the caBundle"
    );
    let service_name = service.metadata.name.clone().unwrap();
    assert_eq!(
        setting("SERVICE_NAME", config.webhook.service_name.clone()),
        service_name,
        "the certificate is valid for the Service's name"
    );
    let namespace = deployment.metadata.namespace.clone().unwrap();
    for webhook in configuration.webhooks.iter().flatten() {
        let target = webhook.client_config.service.as_ref().expect("by Service");
        assert_eq!(
            (&target.name, &target.namespace),
            (&service_name, &namespace)
        );
        assert_eq!(target.port, Some(443));
        assert_eq!(target.path.as_deref(), Some("/mutate"));
        assert_eq!(
            webhook.failure_policy.as_deref(),
            Some("Ignore"),
            "never blocks"
        );
        assert_eq!(webhook.side_effects, "None");
        let timeout = webhook.timeout_seconds.expect("timeoutSeconds");
        assert!(
            u64::try_from(timeout).unwrap() > config.webhook.observe_timeout.as_secs(),
            "the API server waits longer than nudge reads"
        );
        let excluded = webhook
            .namespace_selector
            .as_ref()
            .and_then(|s| s.match_expressions.as_ref())
            .into_iter()
            .flatten()
            .any(|e| e.operator == "NotIn" && e.values.iter().flatten().any(|v| *v == namespace));
        assert!(excluded, "nudge's own namespace is left out");
        let resources: BTreeSet<String> = webhook
            .rules
            .iter()
            .flatten()
            .flat_map(|r| r.resources.clone().unwrap_or_default())
            .collect();
        for kind in [
            "deployments",
            "statefulsets",
            "daemonsets",
            "cronjobs",
            "jobs",
            "rollouts",
        ] {
            assert!(
                resources.contains(kind),
                "the webhook stamps {kind} at creation"
            );
        }
    }
}

fn check_deployment(deployment: &Deployment, namespace: &str) {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    assert_eq!(deployment.metadata.namespace.as_deref(), Some(namespace));
    let spec = deployment.spec.as_ref().unwrap();
    let pod = spec.template.spec.as_ref().unwrap();
    let pod_security = pod.security_context.as_ref().expect("pod securityContext");
    assert_eq!(pod_security.run_as_non_root, Some(true));
    assert_eq!(pod_security.run_as_user, Some(65532));
    assert_eq!(
        pod_security.seccomp_profile.as_ref().unwrap().type_,
        "RuntimeDefault"
    );
    let container = &pod.containers[0];
    let security = container.security_context.as_ref().unwrap();
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(
        security.capabilities.as_ref().unwrap().drop.as_deref(),
        Some(&["ALL".to_owned()][..])
    );
    let resources = container.resources.as_ref().expect("resources");
    assert!(resources.requests.is_some() && resources.limits.is_some());

    let downward = |name: &str| {
        container
            .env
            .as_ref()
            .unwrap()
            .iter()
            .find(|e| e.name == name)
            .and_then(|e| e.value_from.as_ref()?.field_ref.as_ref())
            .map(|f| f.field_path.clone())
    };
    assert_eq!(downward("POD_NAME").as_deref(), Some("metadata.name"));
    assert_eq!(
        downward("POD_NAMESPACE").as_deref(),
        Some("metadata.namespace")
    );
    assert_eq!(
        downward("NUDGE_KUBERNETES__NAMESPACE").as_deref(),
        Some("metadata.namespace")
    );

    let ports: BTreeMap<String, i32> = container
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .map(|p| (p.name.clone().unwrap_or_default(), p.container_port))
        .collect();
    assert_eq!(ports.get("admin"), Some(&9090));
    assert_eq!(ports.get("webhook"), Some(&8443));
    let probe = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
        let http = probe.as_ref().unwrap().http_get.as_ref().unwrap();
        (http.path.clone().unwrap(), http.port.clone())
    };
    let admin = IntOrString::String("admin".into());
    assert_eq!(
        probe(&container.liveness_probe),
        ("/live".into(), admin.clone())
    );
    assert_eq!(probe(&container.readiness_probe), ("/ready".into(), admin));
}

/// The config file in the ConfigMap loads as nudge's configuration.
fn check_config(objects: &[Object]) -> nudge::config::Config {
    let text = objects
        .iter()
        .find_map(|o| match o {
            Object::ConfigMap(c) => c.data.as_ref()?.get("config.toml").cloned(),
            _ => None,
        })
        .expect("a ConfigMap with config.toml");
    let dir = std::env::temp_dir().join(format!("nudge-manifests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("config-{:x}.toml", text.len()));
    std::fs::write(&path, &text).unwrap();
    let config = nudge::config::Config::load(Some(&path), &Default::default())
        .unwrap_or_else(|e| panic!("config.toml does not load: {e}\n{text}"));
    assert_eq!(config.admin.bind.port(), 9090, "probes use port 9090");
    let _ = std::fs::remove_file(&path);
    config
}

/// One grant: verb on a resource, optionally limited to names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Grant {
    group: String,
    resource: String,
    verb: String,
    names: Option<BTreeSet<String>>,
}

/// What nudge may be granted, and where.
struct Allowed {
    group: &'static str,
    resources: &'static [&'static str],
    verbs: &'static [&'static str],
    /// `None`: any names (no resourceNames needed); else the rule must name a
    /// subset of these.
    names: Option<&'static [&'static str]>,
    /// Only in a Role in nudge's own namespace.
    own_namespace: bool,
    /// Only in a ClusterRole (cluster-scoped resources).
    cluster: bool,
}

const ALLOWED: &[Allowed] = &[
    Allowed {
        group: "",
        resources: &["configmaps", "secrets"],
        verbs: &["get", "list", "watch"],
        names: None,
        own_namespace: false,
        cluster: false,
    },
    Allowed {
        group: "",
        resources: &["namespaces"],
        verbs: &["get", "list", "watch"],
        names: None,
        own_namespace: false,
        cluster: true,
    },
    Allowed {
        group: "apps",
        resources: &["deployments", "statefulsets", "daemonsets"],
        verbs: &["get", "list", "watch", "patch"],
        names: None,
        own_namespace: false,
        cluster: false,
    },
    Allowed {
        group: "batch",
        resources: &["cronjobs"],
        verbs: &["get", "list", "watch", "patch"],
        names: None,
        own_namespace: false,
        cluster: false,
    },
    Allowed {
        group: "batch",
        resources: &["jobs"],
        verbs: &["get", "list", "watch", "patch", "create", "delete"],
        names: None,
        own_namespace: false,
        cluster: false,
    },
    Allowed {
        group: "argoproj.io",
        resources: &["rollouts"],
        verbs: &["get", "list", "watch", "patch"],
        names: None,
        own_namespace: false,
        cluster: false,
    },
    Allowed {
        group: "events.k8s.io",
        resources: &["events"],
        verbs: &["create", "patch"],
        names: None,
        own_namespace: false,
        cluster: false,
    },
    Allowed {
        group: "",
        resources: &["events"],
        verbs: &["create", "patch"],
        names: None,
        own_namespace: false,
        cluster: false,
    },
    Allowed {
        group: "coordination.k8s.io",
        resources: &["leases"],
        verbs: &["create"],
        names: None,
        own_namespace: true,
        cluster: false,
    },
    Allowed {
        group: "coordination.k8s.io",
        resources: &["leases"],
        verbs: &["get", "update"],
        names: Some(&["nudge"]),
        own_namespace: true,
        cluster: false,
    },
    Allowed {
        group: "",
        resources: &["secrets"],
        verbs: &["create"],
        names: None,
        own_namespace: true,
        cluster: false,
    },
    Allowed {
        group: "",
        resources: &["secrets"],
        verbs: &["get", "update", "patch"],
        names: Some(&["nudge-fingerprint-key", "nudge-webhook-tls"]),
        own_namespace: true,
        cluster: false,
    },
    Allowed {
        group: "admissionregistration.k8s.io",
        resources: &["mutatingwebhookconfigurations"],
        // The self-managed certificate's caBundle is written by a conditional
        // update (replace with resourceVersion), so it never clobbers a concurrent edit.
        verbs: &["get", "update", "patch"],
        names: Some(&["nudge"]),
        own_namespace: false,
        cluster: true,
    },
];

fn grants(rules: &[PolicyRule]) -> Vec<Grant> {
    let mut out = Vec::new();
    for rule in rules {
        assert!(
            rule.non_resource_urls.is_none(),
            "non-resource URLs granted: {rule:?}"
        );
        let names = rule
            .resource_names
            .as_ref()
            .map(|n| n.iter().cloned().collect::<BTreeSet<_>>());
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    out.push(Grant {
                        group: group.clone(),
                        resource: resource.clone(),
                        verb: verb.clone(),
                        names: names.clone(),
                    });
                }
            }
        }
    }
    out
}

fn is_allowed(grant: &Grant, role_namespace: Option<&str>, own: &str) -> bool {
    ALLOWED.iter().any(|a| {
        a.group == grant.group
            && a.resources.contains(&grant.resource.as_str())
            && a.verbs.contains(&grant.verb.as_str())
            && match (a.names, &grant.names) {
                (None, _) => true,
                (Some(_), None) => false,
                (Some(allowed), Some(names)) => {
                    !names.is_empty() && names.iter().all(|n| allowed.contains(&n.as_str()))
                }
            }
            && (!a.own_namespace || role_namespace == Some(own))
            && (!a.cluster || role_namespace.is_none())
    })
}

/// Every Role and ClusterRole among `objects` stays within [`ALLOWED`].
fn check_rules_allowed(objects: &[Object], own: &str) {
    for object in objects {
        let (namespace, name, rules) = match object {
            Object::ClusterRole(r) => (None, r.metadata.name.clone(), r.rules.clone()),
            Object::Role(r) => (
                r.metadata.namespace.as_deref(),
                r.metadata.name.clone(),
                r.rules.clone(),
            ),
            _ => continue,
        };
        for grant in grants(&rules.unwrap_or_default()) {
            assert!(
                is_allowed(&grant, namespace, own),
                "{name:?} in {namespace:?} grants more than nudge needs: {grant:?}"
            );
        }
    }
}

fn check_rbac(objects: &[Object], own: &str, scope: Scope) {
    check_rules_allowed(objects, own);
    let mut bound = BTreeSet::new();
    for object in objects {
        let (namespace, role_ref, subjects) = match object {
            Object::RoleBinding(b) => (
                b.metadata.namespace.clone(),
                &b.role_ref,
                b.subjects.clone(),
            ),
            Object::ClusterRoleBinding(b) => (None, &b.role_ref, b.subjects.clone()),
            _ => continue,
        };
        let subjects = subjects.unwrap_or_default();
        assert!(
            subjects
                .iter()
                .all(|s| s.kind == "ServiceAccount" && s.namespace.as_deref() == Some(own)),
            "bindings name only nudge's ServiceAccount: {subjects:?}"
        );
        bound.insert((role_ref.kind.clone(), namespace, role_ref.name.clone()));
    }
    let mut workload_roles = BTreeSet::new();
    for object in objects {
        let key = match object {
            Object::ClusterRole(r) => ("ClusterRole".to_owned(), None, r.metadata.name.clone()),
            Object::Role(r) => (
                "Role".to_owned(),
                r.metadata.namespace.clone(),
                r.metadata.name.clone(),
            ),
            _ => continue,
        };
        assert!(
            bound.contains(&(
                key.0.clone(),
                key.1.clone(),
                key.2.clone().unwrap_or_default()
            )),
            "{key:?} is not bound to nudge"
        );
    }
    for object in objects {
        let (namespace, name, rules) = match object {
            Object::ClusterRole(r) => (None, r.metadata.name.clone(), r.rules.clone()),
            Object::Role(r) => (
                r.metadata.namespace.as_deref(),
                r.metadata.name.clone(),
                r.rules.clone(),
            ),
            _ => continue,
        };
        for grant in grants(&rules.unwrap_or_default()) {
            assert!(
                is_allowed(&grant, namespace, own),
                "{name:?} in {namespace:?} grants more than nudge needs: {grant:?}"
            );
            if grant.group == "apps" && grant.verb == "patch" {
                workload_roles.insert(namespace.map(str::to_owned));
            }
        }
    }
    let expected: BTreeSet<Option<String>> = match scope {
        Scope::Cluster => [None].into(),
        Scope::Namespaces(namespaces) => namespaces.iter().map(|n| Some((*n).into())).collect(),
    };
    assert_eq!(workload_roles, expected, "where nudge may stamp workloads");
}

/// A small interpreter of the Go-template subset nudge's Helm chart uses.
mod helm_lite {
    use serde_yaml::Value as Yaml;
    use sha2::{Digest, Sha256};

    /// Deep-merges `overrides` into `values` (maps merge, everything else
    /// replaces), like `helm --values`.
    pub fn merge(values: &mut Yaml, overrides: Yaml) {
        match (values, overrides) {
            (Yaml::Mapping(base), Yaml::Mapping(over)) => {
                for (key, value) in over {
                    match base.get_mut(&key) {
                        Some(existing) => merge(existing, value),
                        None => {
                            base.insert(key, value);
                        }
                    }
                }
            }
            (slot, value) => *slot = value,
        }
    }

    #[derive(Debug)]
    enum Node {
        Text(String),
        Output(String),
        If(String, Vec<Node>, Vec<Node>),
        Range(String, Vec<Node>),
    }

    enum Token {
        Text(String),
        Action(String),
    }

    fn tokenize(template: &str) -> Result<Vec<Token>, String> {
        let mut tokens = Vec::new();
        let mut rest = template;
        let mut trim_next = false;
        while let Some(start) = rest.find("{{") {
            let mut text = rest[..start].to_owned();
            if trim_next {
                text = text.trim_start().to_owned();
            }
            let after = &rest[start + 2..];
            let end = after.find("}}").ok_or("unclosed {{")?;
            let mut action = &after[..end];
            if let Some(a) = action.strip_prefix('-') {
                text = text.trim_end().to_owned();
                action = a;
            }
            trim_next = false;
            if let Some(a) = action.strip_suffix('-') {
                trim_next = true;
                action = a;
            }
            tokens.push(Token::Text(text));
            tokens.push(Token::Action(action.trim().to_owned()));
            rest = &after[end + 2..];
        }
        let text = if trim_next { rest.trim_start() } else { rest };
        tokens.push(Token::Text(text.to_owned()));
        Ok(tokens)
    }

    fn parse(
        tokens: &mut std::vec::IntoIter<Token>,
        until: &[&str],
    ) -> Result<(Vec<Node>, String), String> {
        let mut nodes = Vec::new();
        while let Some(token) = tokens.next() {
            match token {
                Token::Text(text) => nodes.push(Node::Text(text)),
                Token::Action(action) => {
                    if until.contains(&action.as_str()) {
                        return Ok((nodes, action));
                    }
                    if let Some(cond) = action.strip_prefix("if ") {
                        let (then, end) = parse(tokens, &["else", "end"])?;
                        let otherwise = if end == "else" {
                            parse(tokens, &["end"])?.0
                        } else {
                            Vec::new()
                        };
                        nodes.push(Node::If(cond.trim().to_owned(), then, otherwise));
                    } else if let Some(list) = action.strip_prefix("range ") {
                        let (body, _) = parse(tokens, &["end"])?;
                        nodes.push(Node::Range(list.trim().to_owned(), body));
                    } else if action == "else" || action == "end" {
                        return Err(format!("unexpected {{{{ {action} }}}}"));
                    } else {
                        nodes.push(Node::Output(action));
                    }
                }
            }
        }
        if until.is_empty() {
            Ok((nodes, String::new()))
        } else {
            Err(format!("missing {{{{ {} }}}}", until.join(" or ")))
        }
    }

    /// Renders `template` with `root` as `$` and `.`.
    pub fn render(template: &str, root: &Yaml) -> Result<String, String> {
        let mut tokens = tokenize(template)?.into_iter();
        let (nodes, _) = parse(&mut tokens, &[])?;
        let mut out = String::new();
        emit(&nodes, root, root, &mut out)?;
        Ok(out)
    }

    fn emit(nodes: &[Node], root: &Yaml, dot: &Yaml, out: &mut String) -> Result<(), String> {
        for node in nodes {
            match node {
                Node::Text(text) => out.push_str(text),
                Node::Output(pipeline) => {
                    out.push_str(&to_text(&eval_pipeline(pipeline, root, dot)?)?)
                }
                Node::If(cond, then, otherwise) => {
                    let branch = if truthy(&eval_pipeline(cond, root, dot)?) {
                        then
                    } else {
                        otherwise
                    };
                    emit(branch, root, dot, out)?;
                }
                Node::Range(list, body) => {
                    let list = eval_pipeline(list, root, dot)?;
                    for item in list.as_sequence().ok_or("range over a non-list")? {
                        emit(body, root, item, out)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn truthy(value: &Yaml) -> bool {
        match value {
            Yaml::Null => false,
            Yaml::Bool(b) => *b,
            Yaml::Number(n) => n.as_f64() != Some(0.0),
            Yaml::String(s) => !s.is_empty(),
            Yaml::Sequence(s) => !s.is_empty(),
            Yaml::Mapping(m) => !m.is_empty(),
            Yaml::Tagged(_) => true,
        }
    }

    fn to_text(value: &Yaml) -> Result<String, String> {
        Ok(match value {
            Yaml::String(s) => s.clone(),
            Yaml::Number(n) => n.to_string(),
            Yaml::Bool(b) => b.to_string(),
            other => return Err(format!("cannot print {other:?} without toYaml")),
        })
    }

    /// Splits on whitespace, keeping quoted strings whole.
    fn words(command: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut current = String::new();
        let mut quoted = false;
        for c in command.chars() {
            match c {
                '"' => {
                    quoted = !quoted;
                    current.push(c);
                }
                c if c.is_whitespace() && !quoted => {
                    if !current.is_empty() {
                        out.push(std::mem::take(&mut current));
                    }
                }
                c => current.push(c),
            }
        }
        if !current.is_empty() {
            out.push(current);
        }
        out
    }

    const FUNCTIONS: &[&str] = &[
        "quote",
        "default",
        "toYaml",
        "toToml",
        "indent",
        "nindent",
        "sha256sum",
    ];

    fn eval_pipeline(pipeline: &str, root: &Yaml, dot: &Yaml) -> Result<Yaml, String> {
        let mut value: Option<Yaml> = None;
        for command in pipeline.split('|') {
            let words = words(command);
            let (first, args) = words.split_first().ok_or("empty command")?;
            let mut args: Vec<Yaml> = args
                .iter()
                .map(|a| term(a, root, dot))
                .collect::<Result<_, _>>()?;
            if FUNCTIONS.contains(&first.as_str()) {
                if let Some(piped) = value.take() {
                    args.push(piped);
                }
                value = Some(call(first, args)?);
            } else if value.is_none() && args.is_empty() {
                value = Some(term(first, root, dot)?);
            } else {
                return Err(format!("unsupported command {command:?}"));
            }
        }
        value.ok_or_else(|| "empty pipeline".to_owned())
    }

    fn term(word: &str, root: &Yaml, dot: &Yaml) -> Result<Yaml, String> {
        if let Some(s) = word.strip_prefix('"').and_then(|w| w.strip_suffix('"')) {
            return Ok(Yaml::String(s.to_owned()));
        }
        if let Ok(n) = word.parse::<i64>() {
            return Ok(Yaml::from(n));
        }
        let (mut value, path) = if let Some(path) = word.strip_prefix("$") {
            (root, path)
        } else if word.starts_with('.') {
            (dot, word)
        } else {
            return Err(format!("unsupported term {word:?}"));
        };
        for key in path.split('.').filter(|k| !k.is_empty()) {
            value = value
                .get(key)
                .ok_or_else(|| format!("missing value {word} (at {key})"))?;
        }
        Ok(value.clone())
    }

    fn int(value: &Yaml) -> Result<usize, String> {
        value
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| format!("expected a number, got {value:?}"))
    }

    fn indent(width: usize, text: &str) -> String {
        let pad = " ".repeat(width);
        format!("{pad}{}", text.replace('\n', &format!("\n{pad}")))
    }

    fn call(function: &str, args: Vec<Yaml>) -> Result<Yaml, String> {
        let arity = |n: usize| {
            if args.len() == n {
                Ok(())
            } else {
                Err(format!(
                    "{function} takes {n} arguments, got {}",
                    args.len()
                ))
            }
        };
        Ok(Yaml::String(match function {
            "quote" => {
                arity(1)?;
                serde_json::to_string(&to_text(&args[0])?).map_err(|e| e.to_string())?
            }
            "default" => {
                arity(2)?;
                return Ok(if truthy(&args[1]) {
                    args[1].clone()
                } else {
                    args[0].clone()
                });
            }
            "toYaml" => {
                arity(1)?;
                let text = serde_yaml::to_string(&args[0]).map_err(|e| e.to_string())?;
                text.trim_end_matches('\n').to_owned()
            }
            "toToml" => {
                arity(1)?;
                let value: toml::Value =
                    serde_yaml::from_value(args[0].clone()).map_err(|e| e.to_string())?;
                toml::to_string(&value).map_err(|e| e.to_string())?
            }
            "indent" => {
                arity(2)?;
                indent(int(&args[0])?, &to_text(&args[1])?)
            }
            "nindent" => {
                arity(2)?;
                format!("\n{}", indent(int(&args[0])?, &to_text(&args[1])?))
            }
            "sha256sum" => {
                arity(1)?;
                hex::encode(Sha256::digest(to_text(&args[0])?.as_bytes()))
            }
            other => return Err(format!("unsupported function {other}")),
        }))
    }

    #[test]
    fn renders_the_supported_subset() {
        let root: Yaml = serde_yaml::from_str(
            "Values: {name: web, tag: '', list: [a, b], nested: {x: 1}}\nChart: {AppVersion: '1.0'}",
        )
        .unwrap();
        let template = "name: {{ .Values.name | quote }}\n\
            image: x:{{ .Values.tag | default .Chart.AppVersion }}\n\
            {{- if .Values.list }}\n\
            {{- range .Values.list }}\n- {{ . }}/{{ $.Values.name }}\n{{- end }}\n\
            {{- else }}\nnone\n{{- end }}\n\
            nested:\n  {{- toYaml .Values.nested | nindent 2 }}\n";
        assert_eq!(
            render(template, &root).unwrap(),
            "name: \"web\"\nimage: x:1.0\n- a/web\n- b/web\nnested:\n  x: 1\n"
        );
        assert!(render("{{ .Values.missing }}", &root).is_err());
    }
}
