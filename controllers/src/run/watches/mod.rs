//! The watches that trigger each controller, each controller's in its own file:
//! `loadbalancer.rs` builds the LoadBalancer controller (LoadBalancers, the objects capi-lb
//! publishes, infrastructure objects, Services of capi-lb's class, provider-made objects, Cluster
//! API's Machines and Clusters, DNSEndpoints) with the caches its reconciles read; `service.rs`
//! builds the Service controller (Services, the `-ext` objects and DNSEndpoints it makes). Adding a
//! watched kind to a controller is a method there, a mapping beside the controller's reconcile
//! (`loadbalancer/triggers.rs` or `service/`), its RBAC and a scenario in `e2e/triggers.rs`.

mod loadbalancer;
mod service;

use kube::Resource;
use kube::api::Api;
use kube::core::{ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};

use std::sync::Arc;

use futures::TryStreamExt;

use super::backoff;
use crate::cache::ObjectCache;
pub(super) use loadbalancer::{loadbalancer_controller, observe_cache};
pub(super) use service::service_controller;

/// A watch of `api` that backs off on its own after errors ([`backoff::for_watch`]): its changed
/// and deleted objects, for a trigger.
fn watch<K>(
    api: kube::Api<K>,
    config: watcher::Config,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher(api, super::client::watch_config(config))
        .backoff(backoff::for_watch())
        .touched_objects()
}

/// A watch like [`watch`] whose changes also reach `cache`, the shared cache of that kind which
/// another controller's watch fills: a reconcile this watch triggers then reads the object at least
/// as new as the change that triggered it (the two watches deliver the same change at different
/// moments). A change is remembered as read-your-writes are, until the cache's own watch catches
/// up; a deletion is a tombstone. A relist's objects are not (the cache's own relist has them).
fn watch_feeding<K>(
    api: kube::Api<K>,
    config: watcher::Config,
    cache: Option<Arc<ObjectCache>>,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + 'static,
{
    watcher(api, super::client::watch_config(config))
        .backoff(backoff::for_watch())
        .inspect_ok(move |event| {
            let Some(cache) = &cache else { return };
            match event {
                watcher::Event::Apply(object) => cache.wrote_as(object),
                watcher::Event::Delete(object) => {
                    if let Some(uid) = object.meta().uid.as_deref() {
                        cache.gone(uid);
                    }
                }
                _ => {}
            }
        })
        .touched_objects()
}

fn api<K>(client: &kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope>,
    <K as Resource>::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

fn dynamic_api(
    client: &kube::Client,
    namespace: Option<&str>,
    ar: &ApiResource,
) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

/// Whether the API serves `group`/`kind`. A missing group is `Ok(false)`; failing to reach the API
/// is an error.
pub(super) async fn installed(
    client: &kube::Client,
    group: &str,
    kind: &str,
) -> Result<bool, kube::Error> {
    match kube::discovery::group(client, group).await {
        Ok(g) => Ok(crate::kinds::served_kind(&g, kind).is_some()),
        Err(kube::Error::Discovery(_)) => Ok(false),
        Err(e) => Err(e),
    }
}
