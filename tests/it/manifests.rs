//! Every manifest under `deploy/` parses into its Kubernetes type, the installs are
//! hardened as intended, RBAC grants nothing beyond nudge's allow-list, and the
//! Helm chart and the kustomize overlays install the same thing for the same
//! settings.
//!
//! The real tools render the installs: `helm` (4) and `kubectl` (1.35, with
//! kustomize built in), the versions CI has, from `$NUDGE_HELM` and
//! `$NUDGE_KUBECTL` or else `.tools/bin`, where `scripts/install-tools` puts them
//! (`scripts/test` and `.ci/run` run it). Without them these tests fail, saying
//! so; they never fall back to a tool on the PATH or to checking less.
//!
//! - **Plain YAML** (every `*.yaml` under `deploy/` except the Helm chart,
//!   `kustomization.yaml` files and the patches they name): each document is
//!   deserialized into its k8s-openapi type, dispatched on `apiVersion`/`kind`
//!   (an unknown kind fails the test), and serialized back: the round trip must
//!   give the same document, which catches misspelled or misplaced fields.
//!   Everything `kubectl kustomize` and `helm template` render is parsed the
//!   same way.
//! - **Kustomize**: every kustomization builds with `kubectl kustomize`; the
//!   overlays, and the components added to one, are checked as installs.
//! - **Helm**: `helm lint --strict` and `helm template` with every documented
//!   values combination; the defaults and each setting are checked as installs.
//!   The values schema rejects a misspelt or mistyped value, a secret written
//!   into `config` is refused, the notes name commands the binary accepts.
//! - **Prometheus**: the ServiceMonitor, metrics Service and alerts fit
//!   together, are the same from the chart and the `prometheus` component, and
//!   every metric an alert names is one nudge registers.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
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
pub(crate) enum Object {
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
    /// A custom resource of a known CRD (cert-manager, the Prometheus
    /// Operator), checked for shape only.
    Custom {
        kind: String,
        name: String,
        labels: BTreeMap<String, String>,
        spec: Json,
    },
}

/// Custom resources the manifests may use: their CRDs are not in k8s-openapi.
const KNOWN_CUSTOM_KINDS: &[(&str, &str)] = &[
    ("cert-manager.io/v1", "Issuer"),
    ("cert-manager.io/v1", "Certificate"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
];

/// Deserializes `doc` into `T` and checks that serializing it back gives `doc`.
pub(crate) fn typed<T: DeserializeOwned + Serialize>(doc: &Json, origin: &str) -> Box<T> {
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
            let labels: Option<BTreeMap<String, String>> =
                serde_json::from_value(json["metadata"]["labels"].clone())
                    .unwrap_or_else(|e| panic!("{origin}: {kind} {name}: labels: {e}"));
            Object::Custom {
                kind: kind.to_owned(),
                name: name.to_owned(),
                labels: labels.unwrap_or_default(),
                spec: json["spec"].clone(),
            }
        }
        (api_version, kind) => panic!(
            "{origin}: unknown kind {api_version}/{kind}; add it to parse_object in \
             tests/it/manifests.rs"
        ),
    }
}

/// Every non-empty document of a multi-document YAML text.
pub(crate) fn documents(text: &str, origin: &str) -> Vec<Yaml> {
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
            // A partial object must at least say what it patches; a JSON
            // patch (RFC 6902, its target in the kustomization) is a list of
            // operations, each with its op and path.
            for doc in documents(&text, &origin) {
                let names_its_object = doc["apiVersion"].is_string()
                    && doc["kind"].is_string()
                    && doc["metadata"]["name"].is_string();
                let operations = doc.as_sequence().is_some_and(|ops| {
                    !ops.is_empty()
                        && ops
                            .iter()
                            .all(|op| op["op"].is_string() && op["path"].is_string())
                });
                assert!(
                    names_its_object || operations,
                    "{origin}: a patch names apiVersion, kind and metadata.name, or is a list of JSON patch operations"
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

/// Every `kustomization.yaml` under `deploy/` builds with `kubectl kustomize`
/// (which fails on a file that is missing or does not parse): a Kustomization
/// as it is, a Component added to the cluster-wide overlay. What they render
/// parses into its kinds and grants nothing beyond the allow-list.
#[test]
fn every_kustomization_builds_with_kubectl() {
    let components = deploy_dir().join("components");
    let mut built = 0;
    for (path, doc) in kustomizations() {
        let dir = path.parent().unwrap();
        let objects = if doc["kind"].as_str() == Some("Component") {
            assert_eq!(
                dir.parent(),
                Some(components.as_path()),
                "{}: components live in deploy/components/<name>",
                path.display()
            );
            let name = dir.file_name().unwrap().to_str().unwrap();
            render_with_component("cluster-wide", name)
        } else {
            kustomize(dir, &dir.display().to_string())
        };
        check_rules_allowed(&objects, "nudge-system");
        built += 1;
    }
    assert!(
        built >= 5,
        "only {built} kustomizations found under deploy/"
    );
}

// === the tools ===

const INSTALL: &str = "run scripts/install-tools (it installs the pinned helm and kubectl \
                       into .tools/bin)";

/// The helm or kubectl the tests run: `$var` when set, else the one
/// scripts/install-tools put into `.tools/bin`. Never one from the PATH: the
/// tests pin the versions CI has, and without them they fail rather than pass
/// having checked less.
fn tool(name: &str, var: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(var) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "{var}={} is not a file: point {var} at a {name} binary, or unset it and {INSTALL}",
            path.display()
        );
        return path;
    }
    let local = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".tools")
        .join("bin")
        .join(name);
    assert!(
        local.is_file(),
        "{name} not found at {}: {INSTALL}, or set {var} to a {name} binary",
        local.display()
    );
    local
}

/// Runs `name` (see [`tool`]) with `args`; its stdout, or a panic with its output.
fn run<S: AsRef<OsStr>>(name: &str, var: &str, args: impl IntoIterator<Item = S>) -> String {
    let (shown, output) = invoke(name, var, args);
    assert!(
        output.status.success(),
        "{shown}: {}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Runs `name` (see [`tool`]) with `args`: the command line as shown, and
/// what it did.
fn invoke<S: AsRef<OsStr>>(
    name: &str,
    var: &str,
    args: impl IntoIterator<Item = S>,
) -> (String, std::process::Output) {
    let program = tool(name, var);
    let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let shown = format!(
        "{name} {}",
        args.iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let output = Command::new(&program)
        .args(&args)
        .output()
        .unwrap_or_else(|e| panic!("{shown}: cannot run {}: {e}", program.display()));
    (shown, output)
}

fn kubectl<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> String {
    run("kubectl", "NUDGE_KUBECTL", args)
}

fn helm<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> String {
    run("helm", "NUDGE_HELM", args)
}

/// How a tool run ended: its exit status, and its stdout and stderr together.
struct Ran {
    status: std::process::ExitStatus,
    text: String,
}

/// Runs helm with `args`, whether it succeeds or not.
fn helm_output<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> Ran {
    let (_, output) = invoke("helm", "NUDGE_HELM", args);
    Ran {
        status: output.status,
        text: format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

/// A directory of this test's own under the system's temporary directory,
/// removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("nudge-manifests-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir.canonicalize().unwrap())
    }

    /// Writes `text` to the file `name` in it; its path.
    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// === kustomize ===

/// `kubectl kustomize dir`, parsed.
fn kustomize(dir: &Path, origin: &str) -> Vec<Object> {
    parse_text(&kubectl([OsStr::new("kustomize"), dir.as_os_str()]), origin)
}

fn render_overlay(overlay: &str) -> Vec<Object> {
    kustomize(
        &deploy_dir().join("overlays").join(overlay),
        &format!("overlay {overlay}"),
    )
}

/// `overlay` with `component` added, as a user's one-line change does.
fn render_with_component(overlay: &str, component: &str) -> Vec<Object> {
    render_with_components(overlay, &[component])
}

/// `overlay` with `components` added. The kustomization is written to a
/// scratch directory and reaches `deploy/` by a relative path (kustomize
/// takes no absolute one).
fn render_with_components(overlay: &str, components: &[&str]) -> Vec<Object> {
    let scratch = Scratch::new();
    let deploy = deploy_dir().canonicalize().unwrap();
    let mut relative = PathBuf::new();
    for _ in scratch.0.components().skip(1) {
        relative.push("..");
    }
    let deploy = relative.join(deploy.strip_prefix("/").unwrap());
    let components: Vec<String> = components
        .iter()
        .map(|c| deploy.join("components").join(c).display().to_string())
        .collect();
    scratch.file(
        "kustomization.yaml",
        &format!(
            "resources: [{}]\ncomponents: [{}]\n",
            deploy.join("overlays").join(overlay).display(),
            components.join(", ")
        ),
    );
    kustomize(
        &scratch.0,
        &format!("{overlay} with components {components:?}"),
    )
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
    let deployment = deployment(&objects);
    assert_eq!(
        env_value(&deployment, "NUDGE_KUBERNETES__NAMESPACES").as_deref(),
        Some("[my-app]")
    );
}

#[test]
fn components_turn_the_webhook_off_or_to_cert_manager_with_one_line() {
    let objects = render_with_component("cluster-wide", "without-webhook");
    check_install(&objects, "nudge-system", Scope::Cluster, Webhook::Off);
    let objects = render_with_component("cluster-wide", "cert-manager");
    check_install(&objects, "nudge-system", Scope::Cluster, Webhook::Files);
    let certificates = objects
        .iter()
        .filter(|o| matches!(o, Object::Custom { kind, .. } if kind == "Certificate"))
        .count();
    assert_eq!(certificates, 2, "the CA and the serving Certificate");
}

// === Helm ===

fn chart_dir() -> PathBuf {
    deploy_dir().join("helm").join("nudge")
}

/// The earliest Kubernetes nudge supports (Chart.yaml's `kubeVersion`): the
/// chart must render for it.
const KUBE_VERSION: &str = "1.33.0";

/// Values files for the settings the chart documents (values.yaml and the
/// README's Helm section), alone or as they are meant to be combined.
const DEFAULTS: &str = "";
const NAMESPACES: &str = "config: {kubernetes: {namespaces: [team-a, team-b]}}\n\
                          replicaCount: 3\n\
                          image: {repository: registry.example/nudge, tag: v9, pullPolicy: Always}";
const WEBHOOK_OFF: &str = "webhook: {enabled: false}";
const CERT_MANAGER: &str =
    "webhook: {selfManagedCertificate: false, caInjectFrom: nudge-system/nudge-webhook}";
const NO_RBAC: &str = "rbac: {create: false}\n\
                       serviceAccount: {create: false, name: platform-nudge}";
const NO_PDB: &str = "podDisruptionBudget: {enabled: false}";
const RENAMED: &str = "webhook: {tlsSecretName: my-webhook-tls, configurationName: my-nudge}\n\
                       resources: {requests: {cpu: 10m, memory: 32Mi}, limits: {memory: 128Mi}}";
/// Kubernetes objects as config sources: the entries, and read access to
/// their kinds (the chart cannot know plurals: they are given).
const SOURCE_KINDS: &str = "config: {sources: {kubernetes: {\
                              flags: {group: example.com, version: v1, kind: FeatureFlags, fields: [/spec]},\
                              settings: {version: v1, kind: ConfigMap}}}}\n\
                            rbac: {sourceKinds: [{apiGroup: example.com, resources: [featureflags, gizmos]}]}";

/// The Secrets Store CSI preset and OpenShift DeploymentConfig as a
/// `[[targets]]` kind, with its access given in `rbac.targetKinds`.
const PRESETS: &str = "config: {sources: {kubernetes: {csi: {preset: secrets-store-csi}}},\
                         targets: [{group: apps.openshift.io, version: v1, kind: DeploymentConfig}]}\n\
                       rbac: {targetKinds: [{apiGroup: apps.openshift.io, resources: [deploymentconfigs]}]}";

/// What a platform team sets first, in one values file: names and labels, the
/// image from a private registry, pod metadata and placement, security-context
/// additions, extra env and volumes, workload identity, the ServiceMonitor and
/// the PrometheusRule.
const PLATFORM: &str = r#"
fullnameOverride: platform-nudge
commonLabels: {team: platform}
image:
  registry: registry.example.com
  repository: tools/nudge
  tag: v9
  digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
  pullPolicy: Always
imagePullSecrets: [{name: regcred}]
serviceAccount: {annotations: {eks.amazonaws.com/role-arn: "arn:aws:iam::123456789012:role/nudge"}}
podAnnotations: {example.com/owner: platform}
podLabels: {azure.workload.identity/use: "true"}
priorityClassName: system-cluster-critical
nodeSelector: {node-role.kubernetes.io/system: ""}
tolerations: [{key: dedicated, operator: Equal, value: system, effect: NoSchedule}]
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]}]
topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway,
     labelSelector: {matchLabels: {app.kubernetes.io/name: nudge}}}
podSecurityContext: {fsGroup: 65532}
securityContext: {privileged: false}
extraEnv:
  - {name: NUDGE_LOG__FILTER, value: debug}
  - {name: HTTPS_PROXY, valueFrom: {secretKeyRef: {name: proxy, key: url}}}
envFrom: [{configMapRef: {name: nudge-extra-env}}]
extraVolumes: [{name: corporate-ca, configMap: {name: corporate-ca}}]
extraVolumeMounts: [{name: corporate-ca, mountPath: /etc/ssl/corporate, readOnly: true}]
serviceMonitor:
  enabled: true
  labels: {release: kube-prometheus-stack}
  interval: 15s
  relabelings: [{action: replace, targetLabel: cluster, replacement: prod}]
prometheusRule:
  enabled: true
  labels: {release: kube-prometheus-stack}
  alertLabels: {team: platform}
  alerts: {NudgeNotReady: {enabled: false}, NudgeDown: {severity: page}}
"#;

/// Every secret-bearing setting from an existing Secret: the Consul token and
/// TLS material of the default cluster and of an extra instance, and the
/// notification URL.
const SECRETS: &str = r#"
consul:
  token: {existingSecret: consul-token, key: acl}
  tls: {existingSecret: consul-tls, caKey: ca.pem, certKey: tls.crt, keyKey: tls.key}
  instances:
    eu:
      token: {existingSecret: consul-eu-token}
      tls: {existingSecret: consul-eu-tls}
notify: {url: {existingSecret: slack-hook, key: webhook}}
config:
  sources:
    consul:
      enabled: true
      address: https://consul.example.com:8501
      instances: {eu: {address: "https://consul.eu.example.com:8501"}}
  notify: {enabled: true, format: slack}
"#;

/// Snapshots for every workload, in two namespaces.
const SNAPSHOTS: &str = "snapshots: {enabled: true, allWorkloads: true}\n\
                         config: {kubernetes: {namespaces: [team-a, team-b]}}";

const VALUES: &[&str] = &[
    DEFAULTS,
    SNAPSHOTS,
    NAMESPACES,
    WEBHOOK_OFF,
    CERT_MANAGER,
    PLATFORM,
    SECRETS,
    NO_RBAC,
    NO_PDB,
    RENAMED,
    SOURCE_KINDS,
    PRESETS,
];

/// `helm template` of the chart as release `nudge` in `nudge-system` with
/// `values`, parsed.
pub(crate) fn render_chart(values: &str) -> Vec<Object> {
    render_release("nudge", values)
}

/// `helm template` of the chart as release `release` in `nudge-system` with
/// `values`, parsed.
fn render_release(release: &str, values: &str) -> Vec<Object> {
    let scratch = Scratch::new();
    let values_file = scratch.file("values.yaml", values);
    let text = helm([
        OsStr::new("template"),
        OsStr::new(release),
        chart_dir().as_os_str(),
        OsStr::new("--namespace"),
        OsStr::new("nudge-system"),
        OsStr::new("--kube-version"),
        OsStr::new(KUBE_VERSION),
        OsStr::new("--values"),
        values_file.as_os_str(),
    ]);
    parse_text(&text, &format!("helm template with {values:?}"))
}

/// `helm template` as [`render_chart`] does, which must fail: its output.
fn helm_rejects(values: &str) -> String {
    let scratch = Scratch::new();
    let values_file = scratch.file("values.yaml", values);
    let ran = helm_output([
        OsStr::new("template"),
        OsStr::new("nudge"),
        chart_dir().as_os_str(),
        OsStr::new("--namespace"),
        OsStr::new("nudge-system"),
        OsStr::new("--kube-version"),
        OsStr::new(KUBE_VERSION),
        OsStr::new("--values"),
        values_file.as_os_str(),
    ]);
    assert!(
        !ran.status.success(),
        "helm template accepted {values:?}:\n{}",
        ran.text
    );
    ran.text
}

/// `helm lint --strict` (a warning fails) and `helm template` with each
/// documented values combination; what renders parses into its kinds.
#[test]
fn helm_chart_lints_strictly_and_renders_with_every_documented_values_combination() {
    for values in VALUES {
        let scratch = Scratch::new();
        let values_file = scratch.file("values.yaml", values);
        let out = helm([
            OsStr::new("lint"),
            OsStr::new("--strict"),
            chart_dir().as_os_str(),
            OsStr::new("--namespace"),
            OsStr::new("nudge-system"),
            OsStr::new("--kube-version"),
            OsStr::new(KUBE_VERSION),
            OsStr::new("--values"),
            values_file.as_os_str(),
        ]);
        assert!(
            out.contains("0 chart(s) failed"),
            "helm lint with {values:?}:\n{out}"
        );
        let objects = render_chart(values);
        assert!(
            objects.len() >= 5,
            "helm template with {values:?}: only {} objects",
            objects.len()
        );
        check_deployment(&deployment(&objects), "nudge-system");
        check_config(&objects);
    }
}

#[test]
fn helm_chart_with_default_values_is_a_cluster_wide_install() {
    let objects = render_chart(DEFAULTS);
    check_install(
        &objects,
        "nudge-system",
        Scope::Cluster,
        Webhook::SelfManaged,
    );
    assert_eq!(deployment(&objects).spec.unwrap().replicas, Some(2));
}

/// Two releases in one namespace (say one per team, each watching its own
/// namespaces) share no object and no name nudge writes to: each elects its own
/// leader and keeps its own webhook certificate and configuration. The
/// fingerprint key is the one thing shared: the same content gets the same
/// fingerprint whichever release stamps it.
#[test]
fn two_releases_in_one_namespace_keep_apart() {
    let names = |release: &str| {
        let objects = render_release(release, DEFAULTS);
        let deployment = deployment(&objects);
        let config = check_config(&objects);
        let mut names: BTreeSet<String> = objects.iter().map(kind_and_name).collect();
        names.insert(format!("Lease/{}", config.leader_election.lease_name));
        for var in [
            "NUDGE_WEBHOOK__SECRET_NAME",
            "NUDGE_WEBHOOK__CONFIGURATION_NAME",
        ] {
            let value = env_value(&deployment, var).unwrap_or_else(|| panic!("{var} is set"));
            names.insert(format!("{var}={value}"));
        }
        (names, config.fingerprint.key_secret)
    };
    let (first, first_key) = names("team-a-nudge");
    let (second, second_key) = names("team-b-nudge");
    let shared: Vec<_> = first.intersection(&second).collect();
    assert!(shared.is_empty(), "both releases use {shared:?}");
    assert_eq!(first_key, second_key, "the fingerprint key is shared");
    // A release named nudge keeps the names it always had (an upgrade moves
    // nothing).
    let (default, _) = names("nudge");
    for name in [
        "Lease/nudge",
        "MutatingWebhookConfiguration/nudge",
        "NUDGE_WEBHOOK__SECRET_NAME=nudge-webhook-tls",
    ] {
        assert!(default.contains(name), "{name} in {default:?}");
    }
}

#[test]
fn helm_chart_with_namespaces_grants_roles_in_each() {
    let objects = render_chart(NAMESPACES);
    check_install(
        &objects,
        "nudge-system",
        Scope::Namespaces(&["team-a", "team-b"]),
        Webhook::SelfManaged,
    );
    let deployment = deployment(&objects);
    let spec = deployment.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(3));
    let container = &spec.template.spec.as_ref().unwrap().containers[0];
    assert_eq!(
        container.image.as_deref(),
        Some("registry.example/nudge:v9")
    );
    assert_eq!(container.image_pull_policy.as_deref(), Some("Always"));
}

#[test]
fn helm_chart_turns_the_webhook_off_or_to_cert_manager_with_one_value() {
    check_install(
        &render_chart(WEBHOOK_OFF),
        "nudge-system",
        Scope::Cluster,
        Webhook::Off,
    );
    check_install(
        &render_chart(CERT_MANAGER),
        "nudge-system",
        Scope::Cluster,
        Webhook::Files,
    );
}

/// Each secret-bearing setting is a Secret mounted read-only, and the
/// configuration holds the path of its file: nudge's own redaction finds no
/// secret in the ConfigMap or the container's literal env.
#[test]
fn helm_chart_mounts_every_secret_and_writes_only_its_path_into_the_config() {
    let objects = render_chart(SECRETS);
    let config = check_config(&objects);
    // A secret setting with a value prints as `<redacted>`.
    assert!(
        !format!("{config:?}").contains("<redacted>"),
        "a secret in the ConfigMap or the container's env"
    );
    let deployment = deployment(&objects);
    let consul = &config.sources.consul;
    let eu = &consul.instances["eu"];
    for (setting, path, secret) in [
        ("consul token", &consul.token_file, ("consul-token", "acl")),
        ("consul CA", &consul.tls.ca_file, ("consul-tls", "ca.pem")),
        (
            "consul cert",
            &consul.tls.cert_file,
            ("consul-tls", "tls.crt"),
        ),
        (
            "consul key",
            &consul.tls.key_file,
            ("consul-tls", "tls.key"),
        ),
        ("eu token", &eu.token_file, ("consul-eu-token", "token")),
        ("eu CA", &eu.tls.ca_file, ("consul-eu-tls", "ca.crt")),
        (
            "notify URL",
            &config.notify.url_file,
            ("slack-hook", "webhook"),
        ),
    ] {
        let (name, key) = secret;
        assert_eq!(
            secret_behind(&deployment, path),
            Some((name.to_owned(), key.to_owned())),
            "the {setting}'s file {path:?}"
        );
    }
    assert!(
        eu.tls.cert_file.is_empty(),
        "no client certificate asked for"
    );
    for object in &objects {
        if let Object::ConfigMap(map) = object {
            let text = serde_json::to_string(&map.data).unwrap();
            assert!(!text.contains("-----BEGIN"), "PEM in a ConfigMap: {text}");
        }
    }
    // Without them nothing is mounted and no file is named.
    let plain = render_chart(DEFAULTS);
    assert!(secret_mounts(&plain).is_empty());
    let config = check_config(&plain);
    assert!(config.sources.consul.token_file.is_empty() && config.notify.url_file.is_empty());
}

/// A secret written into `config` would be rendered into the ConfigMap: the
/// chart refuses it, naming the value and what to set instead, without
/// repeating the secret.
#[test]
fn helm_chart_refuses_a_secret_written_into_config() {
    const SECRET: &str = "c0ffee-5ecret-70ken";
    for (values, named, instead) in [
        (
            format!("config: {{sources: {{consul: {{token: {SECRET}}}}}}}"),
            "config.sources.consul.token",
            "consul.token.existingSecret",
        ),
        (
            format!(
                "config: {{sources: {{consul: {{instances: {{eu: {{address: \"https://consul.eu:8501\", \
                 token: {SECRET}}}}}}}}}}}"
            ),
            "config.sources.consul.instances.eu.token",
            "consul.instances.eu.token.existingSecret",
        ),
        (
            format!(
                "config: {{notify: {{enabled: true, url: \"https://hooks.example.com/{SECRET}\"}}}}"
            ),
            "config.notify.url",
            "notify.url.existingSecret",
        ),
    ] {
        let error = helm_rejects(&values);
        assert!(
            error.contains(named) && error.contains(instead),
            "{values}: {error}"
        );
        assert!(
            !error.contains(SECRET),
            "the error repeats the secret: {error}"
        );
    }
}

/// The path of a file under a Secret volume the container mounts: that
/// Secret's name and key, the mount read-only.
fn secret_behind(deployment: &Deployment, path: &str) -> Option<(String, String)> {
    secret_mounts_of(deployment)
        .into_iter()
        .find_map(|(dir, secret, items)| {
            let file = path.strip_prefix(&dir)?.strip_prefix('/')?;
            let key = match items {
                Some(items) => items.get(file)?.clone(),
                None => file.to_owned(),
            };
            Some((secret, key))
        })
}

/// Every Secret volume the container mounts, by mount path: the Secret's
/// name and its items (path to key; `None`: every key), each mount read-only.
fn secret_mounts_of(deployment: &Deployment) -> Vec<SecretMount> {
    let pod = deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    let mut out = Vec::new();
    for mount in pod.containers[0].volume_mounts.iter().flatten() {
        let Some(volume) = pod.volumes.iter().flatten().find(|v| v.name == mount.name) else {
            panic!("{}: no such volume", mount.name);
        };
        let Some(secret) = &volume.secret else {
            continue;
        };
        if secret.optional == Some(true) {
            continue; // the webhook's certificate, made by nudge or cert-manager
        }
        assert_eq!(
            mount.read_only,
            Some(true),
            "{} is mounted read-only",
            mount.name
        );
        let items = secret.items.as_ref().map(|items| {
            items
                .iter()
                .map(|i| (i.path.clone(), i.key.clone()))
                .collect()
        });
        out.push((
            mount.mount_path.clone(),
            secret.secret_name.clone().unwrap_or_default(),
            items,
        ));
    }
    out
}

/// A mounted Secret: where, which, and its items (path to key).
type SecretMount = (String, String, Option<BTreeMap<String, String>>);

/// The Secrets an install mounts, comparable between installs.
fn secret_mounts(objects: &[Object]) -> BTreeSet<SecretMount> {
    secret_mounts_of(&deployment(objects)).into_iter().collect()
}

#[test]
fn helm_chart_without_rbac_leaves_the_service_account_and_roles_to_the_user() {
    let objects = render_chart(NO_RBAC);
    let rbac: Vec<&Object> = objects
        .iter()
        .filter(|o| {
            matches!(
                o,
                Object::ServiceAccount(_)
                    | Object::Role(_)
                    | Object::RoleBinding(_)
                    | Object::ClusterRole(_)
                    | Object::ClusterRoleBinding(_)
            )
        })
        .collect();
    assert!(
        rbac.is_empty(),
        "rbac.create and serviceAccount.create false: {rbac:#?}"
    );
    let deployment = deployment(&objects);
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("platform-nudge"));
}

/// Every value of [`PLATFORM`] lands where Kubernetes reads it, the hardened
/// security contexts stay hardened with additions, and the renamed objects
/// still find each other (Service, webhook, ServiceAccount and bindings,
/// ServiceMonitor, alerts).
#[test]
fn helm_chart_takes_the_values_platform_teams_set() {
    let objects = render_chart(PLATFORM);
    check_install(
        &objects,
        "nudge-system",
        Scope::Cluster,
        Webhook::SelfManaged,
    );
    for object in &objects {
        let labels = labels_of(object);
        assert_eq!(
            labels.get("team").map(String::as_str),
            Some("platform"),
            "commonLabels on {object:?}"
        );
    }
    let deployment = deployment(&objects);
    assert_eq!(deployment.metadata.name.as_deref(), Some("platform-nudge"));
    let template = deployment.spec.as_ref().unwrap().template.clone();
    let metadata = template.metadata.unwrap();
    let pod_labels = metadata.labels.unwrap();
    assert_eq!(pod_labels["team"], "platform");
    assert_eq!(pod_labels["azure.workload.identity/use"], "true");
    let pod_annotations = metadata.annotations.unwrap();
    assert_eq!(pod_annotations["example.com/owner"], "platform");
    assert!(pod_annotations.contains_key("checksum/config"));
    let pod = template.spec.unwrap();
    let container = &pod.containers[0];
    assert_eq!(
        container.image.as_deref(),
        Some(
            "registry.example.com/tools/nudge:v9@sha256:\
             0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
        )
    );
    assert_eq!(container.image_pull_policy.as_deref(), Some("Always"));
    let pull_secrets: Vec<&str> = pod
        .image_pull_secrets
        .iter()
        .flatten()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(pull_secrets, ["regcred"]);
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-cluster-critical")
    );
    assert_eq!(
        pod.node_selector.as_ref().unwrap()["node-role.kubernetes.io/system"],
        ""
    );
    assert_eq!(
        pod.tolerations.as_ref().unwrap()[0].key.as_deref(),
        Some("dedicated")
    );
    let affinity = pod.affinity.as_ref().unwrap();
    assert!(
        affinity.node_affinity.is_some() && affinity.pod_anti_affinity.is_none(),
        "affinity replaces the default anti-affinity: {affinity:?}"
    );
    let spread = pod.topology_spread_constraints.as_ref().unwrap();
    assert_eq!(spread[0].topology_key, "topology.kubernetes.io/zone");
    let pod_security = pod.security_context.as_ref().unwrap();
    assert_eq!(pod_security.fs_group, Some(65532), "added to the defaults");
    assert_eq!(
        container.security_context.as_ref().unwrap().privileged,
        Some(false)
    );
    let env: BTreeSet<&str> = container
        .env
        .iter()
        .flatten()
        .map(|e| e.name.as_str())
        .collect();
    assert!(env.is_superset(&["NUDGE_LOG__FILTER", "HTTPS_PROXY", "NUDGE_CONFIG"].into()));
    let env_from = container.env_from.as_ref().unwrap();
    assert_eq!(
        env_from[0].config_map_ref.as_ref().map(|r| r.name.as_str()),
        Some("nudge-extra-env")
    );
    assert!(
        pod.volumes
            .iter()
            .flatten()
            .any(|v| v.name == "corporate-ca")
    );
    assert!(
        container
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == "corporate-ca" && m.mount_path == "/etc/ssl/corporate")
    );

    let account = pod.service_account_name.clone().unwrap();
    assert_eq!(account, "platform-nudge");
    let service_account = objects
        .iter()
        .find_map(|o| match o {
            Object::ServiceAccount(a) => Some(a),
            _ => None,
        })
        .expect("a ServiceAccount");
    assert_eq!(
        service_account.metadata.name.as_deref(),
        Some(account.as_str())
    );
    assert_eq!(
        service_account.metadata.annotations.as_ref().unwrap()["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::123456789012:role/nudge"
    );
    for entry in rbac(&objects).values() {
        if let Rbac::Binding { subjects, .. } = entry {
            assert!(
                subjects.iter().all(|(_, name, _)| *name == account),
                "bindings name the pod's ServiceAccount: {subjects:?}"
            );
        }
    }

    let monitoring = monitoring(&objects).expect("a ServiceMonitor and a PrometheusRule");
    assert_eq!(monitoring.job, "platform-nudge-metrics");
    let endpoint = &monitoring.endpoints[0];
    assert_eq!(endpoint["interval"], "15s");
    assert_eq!(endpoint["relabelings"][0]["targetLabel"], "cluster");
    for kind in ["ServiceMonitor", "PrometheusRule"] {
        let labels = objects
            .iter()
            .find_map(|o| match o {
                Object::Custom {
                    kind: k, labels, ..
                } if k == kind => Some(labels),
                _ => None,
            })
            .unwrap();
        assert_eq!(labels["release"], "kube-prometheus-stack", "{kind}");
    }
    let alerts = alerts(&monitoring.groups);
    assert!(!alerts.contains_key("NudgeNotReady"), "turned off");
    assert_eq!(alerts["NudgeDown"]["labels"]["severity"], "page");
    assert_eq!(alerts["NudgeNoLeader"]["labels"]["severity"], "critical");
    assert!(
        alerts.values().all(|a| a["labels"]["team"] == "platform"),
        "alertLabels on every alert"
    );
}

/// `docs/helm-values.md` names every value of `values.yaml` (the alerts by
/// name), and the values it shows a team setting first render into an install.
#[test]
fn helm_values_reference_names_every_value_and_its_first_values_render() {
    let reference = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("docs")
            .join("helm-values.md"),
    )
    .unwrap();
    let values: Yaml =
        serde_yaml::from_str(&std::fs::read_to_string(chart_dir().join("values.yaml")).unwrap())
            .unwrap();
    let mut paths = Vec::new();
    value_paths(&values, "", &mut paths);
    assert!(paths.len() > 40, "{paths:?}");
    for path in paths {
        let documented = match path.strip_prefix("prometheusRule.alerts.") {
            Some(alert) => {
                let (name, setting) = alert.split_once('.').unwrap();
                reference.contains(&format!("| `{name}` |"))
                    && reference.contains(&format!("`prometheusRule.alerts.<alert>.{setting}`"))
            }
            None => reference.contains(&format!("| `{path}` |")),
        };
        assert!(documented, "docs/helm-values.md does not list `{path}`");
    }
    let first = reference
        .split("```yaml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a yaml block of the values a team sets first");
    let objects = render_chart(first);
    check_install(
        &objects,
        "nudge-system",
        Scope::Cluster,
        Webhook::SelfManaged,
    );
    assert!(monitoring(&objects).is_some());
}

/// The dotted paths of the values under `node`: a mapping's keys, down to
/// values that are not mappings, empty mappings, and the values that hold
/// Kubernetes' or nudge's own structures (documented as one).
fn value_paths(node: &Yaml, prefix: &str, out: &mut Vec<String>) {
    const WHOLE: &[&str] = &[
        "config",
        "resources",
        "podSecurityContext",
        "securityContext",
    ];
    match node.as_mapping() {
        Some(map) if !map.is_empty() && !WHOLE.contains(&prefix) => {
            for (key, value) in map {
                let key = key.as_str().unwrap();
                let path = if prefix.is_empty() {
                    key.to_owned()
                } else {
                    format!("{prefix}.{key}")
                };
                value_paths(value, &path, out);
            }
        }
        _ => out.push(prefix.to_owned()),
    }
}

/// The metadata of any object but a custom resource, with its kind.
fn metadata_of(object: &Object) -> Option<(&'static str, &ObjectMeta)> {
    Some(match object {
        Object::Namespace(o) => ("Namespace", &o.metadata),
        Object::ServiceAccount(o) => ("ServiceAccount", &o.metadata),
        Object::ConfigMap(o) => ("ConfigMap", &o.metadata),
        Object::Secret(o) => ("Secret", &o.metadata),
        Object::Service(o) => ("Service", &o.metadata),
        Object::Deployment(o) => ("Deployment", &o.metadata),
        Object::PodDisruptionBudget(o) => ("PodDisruptionBudget", &o.metadata),
        Object::Role(o) => ("Role", &o.metadata),
        Object::RoleBinding(o) => ("RoleBinding", &o.metadata),
        Object::ClusterRole(o) => ("ClusterRole", &o.metadata),
        Object::ClusterRoleBinding(o) => ("ClusterRoleBinding", &o.metadata),
        Object::MutatingWebhookConfiguration(o) => ("MutatingWebhookConfiguration", &o.metadata),
        Object::Custom { .. } => return None,
    })
}

/// The labels of any object.
fn labels_of(object: &Object) -> BTreeMap<String, String> {
    if let Object::Custom { labels, .. } = object {
        return labels.clone();
    }
    metadata_of(object)
        .and_then(|(_, metadata)| metadata.labels.clone())
        .unwrap_or_default()
}

/// `Kind/name` of any object.
fn kind_and_name(object: &Object) -> String {
    if let Object::Custom { kind, name, .. } = object {
        return format!("{kind}/{name}");
    }
    let (kind, metadata) = metadata_of(object).expect("a typed object has metadata");
    format!("{kind}/{}", metadata.name.as_deref().unwrap_or(""))
}

/// A misspelt value (the schema has no such key) or a mistyped one fails
/// `helm template` and `helm lint --strict`, naming it.
#[test]
fn helm_chart_rejects_a_misspelt_or_mistyped_value() {
    for (values, named) in [
        ("imagePullSecret: [{name: regcred}]", "imagePullSecret"),
        ("serviceMonitor: {enabeld: true}", "enabeld"),
        ("replicaCount: two", "replicaCount"),
        ("image: {pullPolicy: Sometimes}", "pullPolicy"),
        (
            "prometheusRule: {alerts: {NudgeDown: {for: 5 minutes}}}",
            "for",
        ),
        // The notification URL's Secret before it became notify.url.
        ("notify: {urlSecretName: slack-hook}", "urlSecretName"),
    ] {
        let error = helm_rejects(values);
        assert!(error.contains(named), "{values}: {error}");
    }
    let scratch = Scratch::new();
    let values_file = scratch.file("values.yaml", "tolerations: {key: dedicated}");
    let lint = helm_output([
        OsStr::new("lint"),
        OsStr::new("--strict"),
        chart_dir().as_os_str(),
        OsStr::new("--values"),
        values_file.as_os_str(),
    ]);
    assert!(
        !lint.status.success() && lint.text.contains("tolerations"),
        "helm lint: {}",
        lint.text
    );
}

/// The notes `helm install` prints say how to check nudge is ready and how
/// to run `nudge explain` in its pod, in a command line the binary accepts.
#[test]
fn helm_notes_tell_how_to_check_readiness_and_run_explain_in_the_pod() {
    let out = helm([
        OsStr::new("install"),
        OsStr::new("nudge"),
        chart_dir().as_os_str(),
        OsStr::new("--namespace"),
        OsStr::new("nudge-system"),
        OsStr::new("--dry-run=client"),
    ]);
    let notes = &out[out.find("NOTES:").expect("notes")..];
    assert!(
        notes.contains("kubectl -n nudge-system rollout status deployment/nudge"),
        "{notes}"
    );
    assert!(notes.contains("curl -s localhost:9090/ready"), "{notes}");
    let exec = "kubectl exec -n nudge-system deploy/nudge -- nudge ";
    let line = notes
        .lines()
        .find_map(|l| l.trim().strip_prefix(exec))
        .unwrap_or_else(|| panic!("no `{exec}…` in {notes}"));
    let args: Vec<String> = line
        .replace("<name>", "web")
        .replace("<its namespace>", "shop")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(args[0], "explain", "{line}");
    // With no cluster to reach, the binary gets past its arguments and
    // stops at the client.
    let output = Command::new(env!("CARGO_BIN_EXE_nudge"))
        .args(&args)
        .env_clear()
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot configure the Kubernetes client"),
        "nudge {args:?}: {stderr}"
    );
}

#[test]
fn helm_chart_leaves_the_pod_disruption_budget_out_with_one_value() {
    let budgets = |objects: &[Object]| -> Vec<PodDisruptionBudget> {
        objects
            .iter()
            .filter_map(|o| match o {
                Object::PodDisruptionBudget(b) => Some((**b).clone()),
                _ => None,
            })
            .collect()
    };
    let default = budgets(&render_chart(DEFAULTS));
    assert_eq!(default.len(), 1);
    let spec = default[0].spec.as_ref().unwrap();
    assert_eq!(
        spec.min_available,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );
    assert!(budgets(&render_chart(NO_PDB)).is_empty());
}

/// `rbac.sourceKinds` grants read access (get, list, watch) to the kinds of
/// `config.sources.kubernetes` where nudge watches workloads, and nothing more;
/// the configuration carries the entries.
#[test]
fn helm_chart_grants_read_only_access_to_the_kinds_of_kubernetes_sources() {
    let source_reads: BTreeSet<Grant> = ["featureflags", "gizmos"]
        .into_iter()
        .flat_map(|resource| {
            ["get", "list", "watch"].map(|verb| Grant {
                group: "example.com".into(),
                resource: resource.into(),
                verb: verb.into(),
                names: None,
            })
        })
        .collect();
    let with_namespaces = "config: {kubernetes: {namespaces: [team-a]}, sources: {kubernetes: {\
                             flags: {group: example.com, version: v1, kind: FeatureFlags}}}}\n\
                           rbac: {sourceKinds: [{apiGroup: example.com, resources: [featureflags, gizmos]}]}";
    for (values, workload_role) in [
        (SOURCE_KINDS, ("ClusterRole", None)),
        (with_namespaces, ("Role", Some("team-a".to_owned()))),
    ] {
        let objects = render_chart(values);
        let config = check_config(&objects);
        assert_eq!(config.sources.kubernetes["flags"].kind, "FeatureFlags");
        let key = (
            workload_role.0,
            workload_role.1,
            "nudge-workloads".to_owned(),
        );
        let rbac = rbac(&objects);
        let Some(Rbac::Rules(grants)) = rbac.get(&key) else {
            panic!("{key:?} in {values}: {rbac:?}");
        };
        assert!(
            grants.is_superset(&source_reads),
            "{key:?} lacks reads of the source kinds: {grants:?}"
        );
        for grant in grants.iter().filter(|g| !source_reads.contains(*g)) {
            assert!(
                is_allowed(grant, key.1.as_deref(), "nudge-system"),
                "{key:?} grants more than nudge needs: {grant:?}"
            );
        }
        let elsewhere = rbac
            .iter()
            .filter(|(k, _)| **k != key)
            .filter_map(|(_, entry)| match entry {
                Rbac::Rules(grants) => Some(grants),
                Rbac::Binding { .. } => None,
            })
            .flatten()
            .find(|grant| grant.group == "example.com");
        assert_eq!(elsewhere, None, "only the workload role reads source kinds");
    }
}

/// The CSI preset in the configuration grants reading its kind, and
/// `rbac.targetKinds` watching and stamping DeploymentConfigs, in the
/// workload role only; without them neither is granted.
#[test]
fn helm_chart_grants_the_presets_kinds_only_when_configured() {
    let wanted = |group: &str, resource: &str, verbs: &[&str]| -> BTreeSet<Grant> {
        verbs
            .iter()
            .map(|verb| Grant {
                group: group.into(),
                resource: resource.into(),
                verb: (*verb).into(),
                names: None,
            })
            .collect()
    };
    let mut expected = wanted(
        "secrets-store.csi.x-k8s.io",
        "secretproviderclasspodstatuses",
        &["get", "list", "watch"],
    );
    expected.extend(wanted(
        "apps.openshift.io",
        "deploymentconfigs",
        &["get", "list", "watch", "patch"],
    ));
    let objects = render_chart(PRESETS);
    let config = check_config(&objects);
    assert!(config.sources.kubernetes["csi"].preset.is_some());
    let key = ("ClusterRole", None, "nudge-workloads".to_owned());
    let rbac = rbac(&objects);
    let Some(Rbac::Rules(grants)) = rbac.get(&key) else {
        panic!("{key:?}: {rbac:?}");
    };
    assert!(grants.is_superset(&expected), "{grants:?}");
    let defaults = rbac_of_defaults();
    assert!(
        defaults.iter().all(|g| !expected.contains(g)),
        "granted without being configured: {defaults:?}"
    );
}

/// Snapshots turn `engine.snapshots` on and grant making and deleting copies
/// (ConfigMaps and Secrets: create, patch, delete) in every role nudge
/// stamps workloads with; nothing else does, in the chart or the overlays.
#[test]
fn snapshots_and_the_rbac_they_need_come_only_with_the_value_or_the_component() {
    let copies: BTreeSet<Grant> = ["configmaps", "secrets"]
        .into_iter()
        .flat_map(|resource| {
            ["create", "patch", "delete"].map(|verb| Grant {
                group: String::new(),
                resource: resource.into(),
                verb: verb.into(),
                names: None,
            })
        })
        .collect();
    let workload_roles = |objects: &[Object]| -> Vec<(RbacKey, BTreeSet<Grant>)> {
        rbac(objects)
            .into_iter()
            .filter(|(key, _)| key.2.ends_with("-workloads"))
            .filter_map(|(key, rbac)| match rbac {
                Rbac::Rules(grants) => Some((key, grants)),
                Rbac::Binding { .. } => None,
            })
            .collect()
    };
    let on = [
        (render_chart(SNAPSHOTS), "all", 2),
        (render_chart("snapshots: {enabled: true}"), "opt-in", 1),
        (
            render_with_component("cluster-wide", "snapshots"),
            "opt-in",
            1,
        ),
        (
            render_with_component("single-namespace", "snapshots"),
            "opt-in",
            1,
        ),
    ];
    for (objects, mode, roles) in on {
        let config = check_config(&objects);
        assert_eq!(serde_json::to_value(config.engine.snapshots).unwrap(), mode);
        let granted = workload_roles(&objects);
        assert_eq!(granted.len(), roles, "{granted:?}");
        for (key, grants) in granted {
            assert!(grants.is_superset(&copies), "{key:?}: {grants:?}");
        }
    }
    let off = [
        render_chart(DEFAULTS),
        render_chart(NAMESPACES),
        render_overlay("cluster-wide"),
        render_overlay("single-namespace"),
    ];
    for objects in off {
        let config = check_config(&objects);
        assert_eq!(config.engine.snapshots, nudge::config::SnapshotMode::Off);
        for (key, grants) in rbac(&objects).into_iter().filter_map(|(k, r)| match r {
            Rbac::Rules(grants) => Some((k, grants)),
            Rbac::Binding { .. } => None,
        }) {
            let own = key.1.as_deref() == Some("nudge-system");
            let extra: Vec<&Grant> = grants
                .intersection(&copies)
                // nudge's own namespace: the key and webhook Secrets.
                .filter(|g| !(own && g.resource == "secrets" && g.verb == "create"))
                .collect();
            assert!(
                extra.is_empty(),
                "{key:?} grants {extra:?} without snapshots"
            );
        }
    }
    let error = helm_rejects("config: {engine: {snapshots: all}}");
    assert!(
        error.contains("config.engine.snapshots") && error.contains("snapshots.enabled"),
        "{error}"
    );
}

/// The grants of the workload ClusterRole with default values.
fn rbac_of_defaults() -> BTreeSet<Grant> {
    let key = ("ClusterRole", None, "nudge-workloads".to_owned());
    match rbac(&render_chart(DEFAULTS)).remove(&key) {
        Some(Rbac::Rules(grants)) => grants,
        other => panic!("{key:?}: {other:?}"),
    }
}

// === the chart and the overlays agree ===

/// The same settings given to the chart and to kustomize give nudge the same
/// permissions (every Role, ClusterRole and binding, by name), the same
/// container command and arguments, the same effective configuration (the
/// config file with the Deployment's `NUDGE_*` env on top) and the same
/// admission webhooks.
#[test]
fn chart_and_overlays_grant_the_same_rbac_and_run_nudge_alike() {
    let pairs = [
        (DEFAULTS, "cluster-wide", render_overlay("cluster-wide")),
        (
            "config: {kubernetes: {namespaces: [my-app]}}",
            "single-namespace",
            render_overlay("single-namespace"),
        ),
        (
            WEBHOOK_OFF,
            "cluster-wide with without-webhook",
            render_with_component("cluster-wide", "without-webhook"),
        ),
        (
            CERT_MANAGER,
            "cluster-wide with cert-manager",
            render_with_component("cluster-wide", "cert-manager"),
        ),
        (
            "consul: {token: {existingSecret: nudge-consul-token}, tls: {existingSecret: nudge-consul-tls}}\n\
             notify: {url: {existingSecret: nudge-notify}}\n\
             config: {notify: {enabled: true}}",
            "cluster-wide with consul-token, consul-tls and notify-url",
            render_with_components(
                "cluster-wide",
                &["consul-token", "consul-tls", "notify-url"],
            ),
        ),
        (
            "serviceMonitor: {enabled: true}\nprometheusRule: {enabled: true}",
            "cluster-wide with prometheus",
            render_with_component("cluster-wide", "prometheus"),
        ),
        (
            "snapshots: {enabled: true}",
            "cluster-wide with snapshots",
            render_with_component("cluster-wide", "snapshots"),
        ),
        (
            "config: {kubernetes: {namespaces: [my-app]}}\nsnapshots: {enabled: true}",
            "single-namespace with snapshots",
            render_with_component("single-namespace", "snapshots"),
        ),
    ];
    for (values, overlay, kustomized) in pairs {
        let chart = render_chart(values);
        let what = format!("the chart with {values:?} and {overlay}");
        let differences = rbac_differences(&rbac(&chart), &rbac(&kustomized));
        assert!(
            differences.is_empty(),
            "RBAC of {what} differs (chart / kustomize):\n{}",
            differences.join("\n")
        );
        let command = |objects: &[Object]| {
            let container = deployment(objects)
                .spec
                .unwrap()
                .template
                .spec
                .unwrap()
                .containers[0]
                .clone();
            (container.command, container.args)
        };
        assert_eq!(
            command(&chart),
            command(&kustomized),
            "container command and arguments of {what}"
        );
        assert_eq!(
            check_config(&chart),
            check_config(&kustomized),
            "nudge's configuration in {what}"
        );
        assert_eq!(
            webhooks(&chart),
            webhooks(&kustomized),
            "the admission webhooks of {what}"
        );
        assert_eq!(
            secret_mounts(&chart),
            secret_mounts(&kustomized),
            "the Secrets mounted for secret settings in {what}"
        );
        assert_same_monitoring(&chart, &kustomized, &what);
    }
}

/// The chart's and kustomize's [`Monitoring`] are the same, alert by alert.
fn assert_same_monitoring(chart: &[Object], kustomized: &[Object], what: &str) {
    let (chart, kustomized) = match (monitoring(chart), monitoring(kustomized)) {
        (None, None) => return,
        (Some(chart), Some(kustomized)) => (chart, kustomized),
        (chart, kustomized) => panic!("Prometheus objects of {what}: {chart:?} / {kustomized:?}"),
    };
    assert_eq!(chart.job, kustomized.job, "the scraped job of {what}");
    assert_eq!(
        chart.endpoints, kustomized.endpoints,
        "the ServiceMonitor endpoints of {what}"
    );
    let (chart, kustomized) = (alerts(&chart.groups), alerts(&kustomized.groups));
    for name in chart.keys().chain(kustomized.keys()) {
        assert_eq!(
            chart.get(name),
            kustomized.get(name),
            "alert {name} of {what} (chart / kustomize)"
        );
    }
}

// === Prometheus ===

/// What an install gives the Prometheus Operator, checked to fit together:
/// the ServiceMonitor selects one Service in nudge's namespace, which selects
/// nudge's pods and leads to the admin port's `/metrics`, and the alerts
/// select the job that Service's scrapes are named after.
#[derive(Debug, PartialEq)]
struct Monitoring {
    /// The job label of nudge's series: the scraped Service's name.
    job: String,
    /// The ServiceMonitor's endpoints.
    endpoints: Vec<Json>,
    /// The PrometheusRule's groups.
    groups: Json,
}

/// The install's [`Monitoring`], if it has a ServiceMonitor (and then a
/// PrometheusRule too).
fn monitoring(objects: &[Object]) -> Option<Monitoring> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let specs = |wanted: &str| -> Vec<&Json> {
        objects
            .iter()
            .filter_map(|o| match o {
                Object::Custom { kind, spec, .. } if kind == wanted => Some(spec),
                _ => None,
            })
            .collect()
    };
    let (monitors, rules) = (specs("ServiceMonitor"), specs("PrometheusRule"));
    if monitors.is_empty() && rules.is_empty() {
        return None;
    }
    assert_eq!(
        (monitors.len(), rules.len()),
        (1, 1),
        "one ServiceMonitor and one PrometheusRule"
    );
    let monitor = monitors[0];
    let deployment = deployment(objects);
    let namespace = deployment.metadata.namespace.clone().unwrap();
    assert_eq!(
        monitor["namespaceSelector"]["matchNames"],
        serde_json::json!([namespace])
    );
    let selector: BTreeMap<String, String> =
        serde_json::from_value(monitor["selector"]["matchLabels"].clone()).unwrap();
    let services: Vec<&Service> = objects
        .iter()
        .filter_map(|o| match o {
            Object::Service(s) => Some(&**s),
            _ => None,
        })
        .filter(|s| {
            let labels = s.metadata.labels.clone().unwrap_or_default();
            selector.iter().all(|(k, v)| labels.get(k) == Some(v))
        })
        .collect();
    assert_eq!(services.len(), 1, "the ServiceMonitor selects one Service");
    let service = services[0];
    let spec = service.spec.as_ref().unwrap();
    let pod_labels = deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap();
    assert!(
        spec.selector
            .iter()
            .flatten()
            .all(|(k, v)| pod_labels.get(k) == Some(v)),
        "the metrics Service selects nudge's pods"
    );
    let endpoints = monitor["endpoints"].as_array().cloned().unwrap_or_default();
    assert!(!endpoints.is_empty());
    for endpoint in &endpoints {
        assert_eq!(endpoint["path"], "/metrics");
        let port = spec
            .ports
            .iter()
            .flatten()
            .find(|p| Some(p.name.as_deref().unwrap_or_default()) == endpoint["port"].as_str())
            .unwrap_or_else(|| panic!("the Service has no port {}", endpoint["port"]));
        assert_eq!(
            port.target_port,
            Some(IntOrString::String("admin".into())),
            "/metrics is on the admin port"
        );
    }
    let job = service.metadata.name.clone().unwrap();
    let groups = rules[0]["groups"].clone();
    for (alert, rule) in alerts(&groups) {
        let expr = rule["expr"].as_str().unwrap();
        if expr.contains("nudge_") || expr.contains("up{") {
            assert!(
                expr.contains(&format!("job=\"{job}\"")),
                "{alert} selects the scraped job {job}: {expr}"
            );
        }
    }
    Some(Monitoring {
        job,
        endpoints,
        groups,
    })
}

/// The alerting rules of PrometheusRule groups, by alert name.
fn alerts(groups: &Json) -> BTreeMap<String, Json> {
    groups
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .map(|rule| (rule["alert"].as_str().unwrap().to_owned(), rule))
        .collect()
}

/// Metrics alerts may name that nudge does not register.
const EXTERNAL_METRICS: &[&str] = &[
    // Prometheus' own, per scraped target.
    "up",
    // kube-state-metrics (NudgeNotReady).
    "kube_deployment_status_replicas_available",
    "kube_deployment_spec_replicas",
];

/// Every metric an alert names is one nudge registers, as its registry
/// exposes it (the `# TYPE` lines), or one of [`EXTERNAL_METRICS`]. The alerts are the kustomize component's, which
/// the chart's equal (`chart_and_overlays_grant_the_same_rbac_and_run_nudge_alike`).
#[test]
fn every_metric_an_alert_names_is_one_nudge_registers() {
    let registered = registered_metric_names();
    let path = deploy_dir()
        .join("components")
        .join("prometheus")
        .join("prometheusrule.yaml");
    let objects = parse_text(
        &std::fs::read_to_string(&path).unwrap(),
        &path.display().to_string(),
    );
    let Some(Object::Custom { spec, .. }) = objects.first() else {
        panic!("{}: a PrometheusRule", path.display());
    };
    let alerts = alerts(&spec["groups"]);
    assert!(alerts.len() >= 8, "{alerts:?}");
    for (alert, rule) in &alerts {
        let expr = rule["expr"].as_str().unwrap();
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{alert}: no metric in {expr}");
        for name in names {
            assert!(
                registered.contains(&name) || EXTERNAL_METRICS.contains(&name.as_str()),
                "{alert} names {name}, which nudge does not register: {expr}"
            );
        }
    }
}

/// The names of the series nudge's registry exposes: each family of a `# TYPE`
/// line, with the suffixes of its type. prometheus-client leaves a family
/// with no sample out, `# TYPE` line and all, so each gets one first, as the
/// components that own them record it.
fn registered_metric_names() -> BTreeSet<String> {
    use nudge::__private::engine::StampResult;
    use nudge::__private::events::notify::NotifyResult;
    use nudge::__private::model::{SourceName, TemplatePath, WorkloadKind};
    use nudge::__private::webhook::ReviewResult;
    use std::time::Duration;
    let metrics = nudge::__private::runtime::metrics::Metrics::new();
    let (kind, configmap) = (
        WorkloadKind::new(
            "apps",
            "v1",
            "Deployment",
            TemplatePath::parse("spec.template").unwrap(),
        ),
        SourceName::new("configmap").unwrap(),
    );
    let engine = metrics.engine();
    engine.stamp(&kind, &configmap, StampResult::Failed);
    engine.rollout(&kind, &["configmap"], "failed");
    engine.rollout_ended(&kind, "failed", Duration::from_secs(60));
    engine.annotation_error(&kind, "syntax");
    let watches = metrics.watches();
    watches.restarted("configmap");
    let sources = watches.sources();
    sources.register_source("configmap");
    sources.failed("configmap", "backend");
    sources.observe_took("configmap", Duration::from_millis(3));
    metrics
        .consul()
        .query_failed(&SourceName::new("consul").unwrap());
    metrics.webhook().record(ReviewResult::Timeout);
    metrics
        .notify()
        .record(nudge::config::NotifyFormat::Slack, NotifyResult::Failed);
    let text = metrics.encode().unwrap();
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(described) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (family, kind) = described.split_once(' ').unwrap();
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        names.extend(suffixes.iter().map(|suffix| format!("{family}{suffix}")));
    }
    assert!(names.contains("nudge_stamps_total"), "{text}");
    names
}

/// The metric names of a PromQL expression: each name right before a `{`
/// selector, and each `nudge_` name wherever it is; quoted strings skipped.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in expr.chars().chain([' ']) {
        if quoted {
            quoted = c != '"';
            continue;
        }
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
            continue;
        }
        if c == '{' || word.starts_with("nudge_") {
            names.insert(word.clone());
        }
        word.clear();
        quoted = c == '"';
    }
    names.remove("");
    names
}

/// One RBAC object, as far as what it grants and to whom.
#[derive(Debug, PartialEq, Eq)]
enum Rbac {
    Rules(BTreeSet<Grant>),
    Binding {
        role: (String, String),
        subjects: BTreeSet<(String, String, Option<String>)>,
    },
}

/// Every Role, ClusterRole and binding by (kind, namespace, name).
fn rbac(objects: &[Object]) -> BTreeMap<RbacKey, Rbac> {
    let subjects = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        subjects
            .iter()
            .flatten()
            .map(|s| (s.kind.clone(), s.name.clone(), s.namespace.clone()))
            .collect()
    };
    let mut out = BTreeMap::new();
    for object in objects {
        let (kind, metadata, entry) = match object {
            Object::Role(r) => (
                "Role",
                &r.metadata,
                Rbac::Rules(
                    grants(r.rules.as_deref().unwrap_or_default())
                        .into_iter()
                        .collect(),
                ),
            ),
            Object::ClusterRole(r) => (
                "ClusterRole",
                &r.metadata,
                Rbac::Rules(
                    grants(r.rules.as_deref().unwrap_or_default())
                        .into_iter()
                        .collect(),
                ),
            ),
            Object::RoleBinding(b) => (
                "RoleBinding",
                &b.metadata,
                Rbac::Binding {
                    role: (b.role_ref.kind.clone(), b.role_ref.name.clone()),
                    subjects: subjects(&b.subjects),
                },
            ),
            Object::ClusterRoleBinding(b) => (
                "ClusterRoleBinding",
                &b.metadata,
                Rbac::Binding {
                    role: (b.role_ref.kind.clone(), b.role_ref.name.clone()),
                    subjects: subjects(&b.subjects),
                },
            ),
            _ => continue,
        };
        let key = (
            kind,
            metadata.namespace.clone(),
            metadata.name.clone().unwrap_or_default(),
        );
        assert!(out.insert(key.clone(), entry).is_none(), "{key:?} twice");
    }
    out
}

type RbacKey = (&'static str, Option<String>, String);

/// What differs between two installs' RBAC, one line each.
fn rbac_differences(
    chart: &BTreeMap<RbacKey, Rbac>,
    kustomized: &BTreeMap<RbacKey, Rbac>,
) -> Vec<String> {
    let keys: BTreeSet<&RbacKey> = chart.keys().chain(kustomized.keys()).collect();
    let mut out = Vec::new();
    for key in keys {
        match (chart.get(key), kustomized.get(key)) {
            (Some(a), Some(b)) if a == b => {}
            (Some(Rbac::Rules(a)), Some(Rbac::Rules(b))) => {
                for grant in a.difference(b) {
                    out.push(format!("{key:?}: only the chart grants {grant:?}"));
                }
                for grant in b.difference(a) {
                    out.push(format!("{key:?}: only kustomize grants {grant:?}"));
                }
            }
            (a, b) => out.push(format!("{key:?}: {a:?} / {b:?}")),
        }
    }
    out
}

/// The configuration nudge runs with, as one TOML text: the ConfigMap's
/// config.toml with the literal `NUDGE_<SECTION>__<KEY>` env of its container on
/// top, each value parsed as `Config::load` parses the environment's.
pub(crate) fn effective_config_text(objects: &[Object]) -> String {
    use figment::Figment;
    use figment::providers::{Format, Serialized, Toml};
    let mut figment = Figment::from(Toml::string(&config_text(objects)));
    let deployment = deployment(objects);
    let pod = deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    for env in pod.containers[0].env.iter().flatten() {
        let (Some(key), Some(value)) = (env.name.strip_prefix("NUDGE_"), &env.value) else {
            continue;
        };
        if !key.contains("__") {
            continue;
        }
        let key = key.to_lowercase().replace("__", ".");
        let value: figment::value::Value = value.parse().unwrap();
        figment = figment.merge(Serialized::default(&key, value));
    }
    let merged: toml::Value = figment
        .extract()
        .unwrap_or_else(|e| panic!("config.toml and the container's env: {e}"));
    toml::to_string(&merged).unwrap()
}

/// The webhooks of the install's MutatingWebhookConfiguration, if it has one.
fn webhooks(objects: &[Object]) -> Option<Json> {
    objects.iter().find_map(|o| match o {
        Object::MutatingWebhookConfiguration(c) => Some(serde_json::to_value(&c.webhooks).unwrap()),
        _ => None,
    })
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
            Object::Service(s) if s.metadata.name.as_deref().unwrap().ends_with("-webhook") => {
                Some(s)
            }
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

/// The config file in the install's ConfigMap.
fn config_text(objects: &[Object]) -> String {
    objects
        .iter()
        .find_map(|o| match o {
            Object::ConfigMap(c) => c.data.as_ref()?.get("config.toml").cloned(),
            _ => None,
        })
        .expect("a ConfigMap with config.toml")
}

/// The configuration nudge runs with (see [`effective_config_text`]) loads.
fn check_config(objects: &[Object]) -> nudge::config::Config {
    let text = effective_config_text(objects);
    let scratch = Scratch::new();
    let path = scratch.file("config.toml", &text);
    let config = nudge::config::Config::load(Some(&path))
        .unwrap_or_else(|e| panic!("nudge's configuration does not load: {e}\n{text}"));
    assert_eq!(config.admin.bind.port(), 9090, "probes use port 9090");
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
    // The Secrets Store CSI preset, granted only when the config names it.
    Allowed {
        group: "secrets-store.csi.x-k8s.io",
        resources: &["secretproviderclasspodstatuses"],
        verbs: &["get", "list", "watch"],
        names: None,
        own_namespace: false,
        cluster: false,
    },
    // OpenShift DeploymentConfig, the documented [[targets]] preset, granted
    // only through rbac.targetKinds.
    Allowed {
        group: "apps.openshift.io",
        resources: &["deploymentconfigs"],
        verbs: &["get", "list", "watch", "patch"],
        names: None,
        own_namespace: false,
        cluster: false,
    },
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
    // Snapshots (snapshots.enabled, the snapshots component): copies made,
    // adopted and pruned where workloads are stamped.
    Allowed {
        group: "",
        resources: &["configmaps", "secrets"],
        verbs: &["create", "patch", "delete"],
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
        // The release's own (PLATFORM's fullnameOverride names it).
        names: Some(&["nudge", "platform-nudge"]),
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
        names: Some(&[
            "nudge-fingerprint-key",
            "nudge-webhook-tls",
            "platform-nudge-webhook-tls",
        ]),
        own_namespace: true,
        cluster: false,
    },
    Allowed {
        group: "admissionregistration.k8s.io",
        resources: &["mutatingwebhookconfigurations"],
        // The self-managed certificate's caBundle is written by a conditional
        // update (replace with resourceVersion), so it never clobbers a concurrent edit.
        verbs: &["get", "update", "patch"],
        names: Some(&["nudge", "platform-nudge"]),
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
