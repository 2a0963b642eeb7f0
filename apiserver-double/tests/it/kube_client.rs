//! The real kube client against the double, through the kubeconfig it writes.

use std::time::Duration;

use apiserver_double::{ApiServerDouble, RequestFilter};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::WatchStreamExt;
#[allow(deprecated)]
use kube::runtime::metadata_watcher;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Client, Config};
use serde_json::json;

async fn client(api: &ApiServerDouble) -> anyhow::Result<Client> {
    let kubeconfig = Kubeconfig::read_from(api.kubeconfig_path())?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

fn namespace(name: &str) -> Namespace {
    serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace")
}

fn config_map(name: &str, data: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": data}}))
        .expect("configmap")
}

async fn next_matching<S, T, F>(stream: &mut S, what: &str, mut pred: F) -> anyhow::Result<T>
where
    S: futures::Stream<Item = Result<Event<T>, watcher::Error>> + Unpin,
    F: FnMut(&Event<T>) -> bool,
    T: Clone,
{
    tokio::time::timeout(Duration::from_secs(10), async {
        // Watch errors are items of the stream; the watcher retries after them.
        while let Some(ev) = stream.next().await {
            let Ok(ev) = ev else { continue };
            if pred(&ev) {
                return Ok::<_, anyhow::Error>(match ev {
                    Event::Apply(o) | Event::InitApply(o) | Event::Delete(o) => o,
                    Event::Init | Event::InitDone => unreachable!("predicate only accepts objects"),
                });
            }
        }
        anyhow::bail!("stream ended before {what}")
    })
    .await
    .map_err(|_| anyhow::anyhow!("timed out waiting for {what}"))?
}

#[tokio::test]
async fn namespace_configmap_and_metadata_watcher() -> anyhow::Result<()> {
    let api = ApiServerDouble::start().await?;
    let client = client(&api).await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = namespaces
        .create(&PostParams::default(), &namespace("kube-test"))
        .await?;
    assert_eq!(
        ns.metadata
            .labels
            .unwrap_or_default()
            .get("kubernetes.io/metadata.name")
            .map(String::as_str),
        Some("kube-test")
    );

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-test");
    #[allow(deprecated)]
    let mut stream = metadata_watcher(cms.clone(), watcher::Config::default()).boxed();
    cms.create(&PostParams::default(), &config_map("app", "1"))
        .await?;
    let seen = next_matching(&mut stream, "the ConfigMap", |e| {
        matches!(e, Event::Apply(o) | Event::InitApply(o) if o.metadata.name.as_deref() == Some("app"))
    })
    .await?;
    assert!(seen.metadata.resource_version.is_some());
    let accepts: Vec<String> = api
        .requests()
        .iter()
        .filter_map(|r| r.accept().map(str::to_string))
        .collect();
    assert!(
        accepts
            .iter()
            .any(|a| a.contains("as=PartialObjectMetadataList")),
        "{accepts:?}"
    );

    let got = cms.get("app").await?;
    assert_eq!(
        got.data.unwrap_or_default().get("k").map(String::as_str),
        Some("1")
    );
    let list = cms.list_metadata(&ListParams::default().limit(1)).await?;
    assert_eq!(list.items.len(), 1);

    cms.delete("app", &DeleteParams::default()).await?;
    next_matching(&mut stream, "the deletion", |e| {
        matches!(e, Event::Delete(_))
    })
    .await?;
    let err = cms.get("app").await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err:?}"
    );
    api.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn server_side_apply_with_force() -> anyhow::Result<()> {
    let api = ApiServerDouble::start().await?;
    let client = client(&api).await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let manifest = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "app:1"}]}}
        }
    });
    let created = deployments
        .patch(
            "web",
            &PatchParams::apply("gitops"),
            &Patch::Apply(&manifest),
        )
        .await?;
    assert_eq!(created.metadata.generation, Some(1));

    let stamp = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"template": {"metadata": {"annotations": {"nudge.dev/config-hash": "sha256-a"}}}}
    });
    let stamped = deployments
        .patch(
            "web",
            &PatchParams::apply("nudge").force(),
            &Patch::Apply(&stamp),
        )
        .await?;
    assert_eq!(stamped.metadata.generation, Some(2));
    let annotations = stamped
        .spec
        .unwrap()
        .template
        .metadata
        .unwrap()
        .annotations
        .unwrap();
    assert_eq!(annotations["nudge.dev/config-hash"], "sha256-a");

    // Another manager changing nudge's field conflicts unless forced.
    let other = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"template": {"metadata": {"annotations": {"nudge.dev/config-hash": "sha256-b"}}}}
    });
    let err = deployments
        .patch("web", &PatchParams::apply("other"), &Patch::Apply(&other))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409),
        "{err:?}"
    );

    // kube-controller-manager reacts to the stamp with writes of its own
    // (a ReplicaSet, the status): wait until they are done, i.e. every
    // ReplicaSet reports its pods and the Deployment reports them all.
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let settled =
        crate::support::wait_for("the rollout to settle", Duration::from_secs(10), || async {
            let d = deployments.get("web").await.ok()?;
            let status = d.status.clone()?;
            let rss = replica_sets.list(&ListParams::default()).await.ok()?.items;
            let pods: Vec<i32> = rss
                .iter()
                .filter_map(|rs| {
                    let status = rs.status.as_ref()?;
                    let observed = rs.metadata.generation == status.observed_generation;
                    let reported = Some(status.replicas) == rs.spec.as_ref()?.replicas;
                    (observed && reported).then_some(status.replicas)
                })
                .collect();
            let done = status.observed_generation == Some(2)
                && status.updated_replicas == Some(1)
                && pods.len() == rss.len()
                && status.replicas == Some(pods.iter().sum());
            done.then_some(d)
        })
        .await;

    // Re-applying the same stamp is a no-op: the spec, the generation and what
    // nudge owns stay. (Not the resourceVersion: since the double runs the
    // controller manager, a no-op re-apply now and then gets a new one, a
    // double bug not understood yet.)
    let nudge_entry = |d: &Deployment| {
        d.metadata
            .managed_fields
            .iter()
            .flatten()
            .find(|m| m.manager.as_deref() == Some("nudge"))
            .map(|m| (m.operation.clone(), m.fields_v1.clone()))
    };
    let again = deployments
        .patch(
            "web",
            &PatchParams::apply("nudge").force(),
            &Patch::Apply(&stamp),
        )
        .await?;
    assert_eq!(again.metadata.generation, settled.metadata.generation);
    assert_eq!(again.spec, settled.spec);
    assert_eq!(nudge_entry(&again), nudge_entry(&settled));
    api.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn watcher_survives_dropped_watches_and_errors() -> anyhow::Result<()> {
    let api = ApiServerDouble::start().await?;
    let client = client(&api).await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut stream = watcher(cms.clone(), watcher::Config::default())
        .default_backoff()
        .boxed();
    tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(ev) = stream.try_next().await? {
            if matches!(ev, Event::InitDone) {
                break;
            }
        }
        Ok::<_, anyhow::Error>(())
    })
    .await??;
    cms.create(&PostParams::default(), &config_map("one", "1"))
        .await?;
    next_matching(
        &mut stream,
        "one",
        |e| matches!(e, Event::Apply(o) if o.metadata.name.as_deref() == Some("one")),
    )
    .await?;

    for round in 0..3 {
        tokio::time::timeout(Duration::from_secs(5), async {
            while api.open_watches() == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await?;
        api.drop_watches();
        if round == 1 {
            // The re-watch fails once, too.
            api.fail_next(1, 500, RequestFilter::any().watch(true));
        }
        let name = format!("after-drop-{round}");
        cms.create(&PostParams::default(), &config_map(&name, "x"))
            .await?;
        next_matching(&mut stream, "an object created after the drop", |e| {
            matches!(e, Event::Apply(o) | Event::InitApply(o) if o.metadata.name.as_deref() == Some(name.as_str()))
        })
        .await?;
    }
    api.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn streaming_list_watcher() -> anyhow::Result<()> {
    let api = ApiServerDouble::start().await?;
    let client = client(&api).await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..5 {
        cms.create(&PostParams::default(), &config_map(&format!("c{i}"), "v"))
            .await?;
    }
    let mut stream = watcher(cms.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut seen = 0;
    tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(ev) = stream.try_next().await? {
            match ev {
                Event::InitApply(_) => seen += 1,
                Event::InitDone => break,
                _ => {}
            }
        }
        Ok::<_, anyhow::Error>(())
    })
    .await??;
    assert_eq!(seen, 5);
    api.shutdown().await;
    Ok(())
}

/// Lists the kinds kube's discovery found in a group.
fn kinds_in(discovery: &kube::discovery::Discovery, group: &str) -> Vec<String> {
    discovery
        .groups()
        .filter(|g| g.name() == group)
        .flat_map(|g| g.recommended_resources())
        .map(|(ar, _)| ar.kind)
        .collect()
}

#[tokio::test]
async fn discovery_finds_a_crd_and_dynamic_api_uses_it() -> anyhow::Result<()> {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    use kube::discovery::{self, Discovery, Scope};

    let api = ApiServerDouble::start().await?;
    let client = client(&api).await?;
    let before = Discovery::new(client.clone()).run().await?;
    assert!(kinds_in(&before, "argoproj.io").is_empty());
    assert!(kinds_in(&before, "batch").contains(&"CronJob".to_string()));

    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let crd = serde_json::from_value(crate::support::crds::rollout_crd())?;
    crds.create(&PostParams::default(), &crd).await?;

    let after = Discovery::new(client.clone()).run().await?;
    assert_eq!(kinds_in(&after, "argoproj.io"), ["Rollout"]);
    let gvk = GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Rollout");
    let (ar, caps) = discovery::pinned_kind(&client, &gvk).await?;
    assert_eq!(ar.plural, "rollouts");
    assert_eq!(caps.scope, Scope::Namespaced);
    assert!(caps.subresources.iter().any(|(s, _)| s.plural == "status"));

    let rollouts: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let mut stream = watcher(rollouts.clone(), watcher::Config::default()).boxed();
    let manifest = crate::support::crds::rollout("web", "app:1");
    let applied = rollouts
        .patch(
            "web",
            &PatchParams::apply("gitops"),
            &Patch::Apply(&manifest),
        )
        .await?;
    assert_eq!(applied.metadata.generation, Some(1));
    next_matching(&mut stream, "the applied Rollout", |e| {
        matches!(e, Event::Apply(o) | Event::InitApply(o) if o.metadata.name.as_deref() == Some("web"))
    })
    .await?;

    let stamp = serde_json::json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": "web"},
        "spec": {"template": {"metadata": {"annotations": {"nudge.dev/config-hash": "sha256-a"}}}}
    });
    let stamped = rollouts
        .patch(
            "web",
            &PatchParams::apply("nudge").force(),
            &Patch::Apply(&stamp),
        )
        .await?;
    assert_eq!(stamped.metadata.generation, Some(2));
    assert_eq!(
        stamped.data["spec"]["template"]["metadata"]["annotations"]["nudge.dev/config-hash"],
        "sha256-a"
    );
    next_matching(
        &mut stream,
        "the stamped Rollout",
        |e| matches!(e, Event::Apply(o) if o.metadata.generation == Some(2)),
    )
    .await?;

    let list = rollouts.list(&ListParams::default()).await?;
    assert_eq!(list.items.len(), 1);
    let metadata = rollouts.list_metadata(&ListParams::default()).await?;
    assert_eq!(metadata.items[0].metadata.name.as_deref(), Some("web"));
    let any = ApiResource::from_gvk_with_plural(&gvk, "rollouts");
    let everywhere: Api<DynamicObject> = Api::all_with(client.clone(), &any);
    assert_eq!(
        everywhere.list(&ListParams::default()).await?.items.len(),
        1
    );

    rollouts.delete("web", &DeleteParams::default()).await?;
    next_matching(&mut stream, "the deletion", |e| {
        matches!(e, Event::Delete(_))
    })
    .await?;
    api.shutdown().await;
    Ok(())
}
