//! The LoadBalancer controller with the watches that trigger it, grouped by what they watch, over
//! the [`Triggers`] index the LoadBalancer watch keeps, and the caches its reconciles read.

use crate::run::client::watch_config;
use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use capi_lb_api::LoadBalancer;
use capi_lb_api::capi::Cluster;
use capi_lb_api::constants::{
    ENDPOINTSLICE_MANAGED_BY_VALUE, LABEL_ENDPOINTSLICE_MANAGED_BY, LABEL_MANAGED_BY,
    LABEL_SERVICE_NAME, MANAGED_BY_VALUE, WATCH_FILTER_LABEL,
};
use capi_lb_api::externaldns::DNSEndpoint;
use capi_lb_providers::ProviderRegistry;
use capi_lb_providers::catalog;
use capi_lb_providers::clock::SharedClock;
use capi_lb_providers::provider::tags;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Resource;
use kube::ResourceExt;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::core::{ApiResource, DynamicObject};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, reflector, watcher};

use super::{api, dynamic_api, installed, watch};
use crate::cache::{self, Caches, ObjectCache};
use crate::kinds::CapiKinds;
use crate::loadbalancer::triggers::{self, Triggers, Watched};
use crate::policy::PolicyFacts;
use crate::run::{RunError, RunOptions, backoff};
use crate::telemetry::fleet::Census;
use crate::telemetry::{Health, Metrics};

/// The LoadBalancer controller with every watch that triggers it (see the module docs), and the
/// LoadBalancer cache. The LoadBalancer watch also keeps the index the other watches' triggers
/// read.
pub(in crate::run) async fn loadbalancer_controller(
    client: &kube::Client,
    options: &RunOptions,
    registry: &ProviderRegistry,
    capi: &CapiKinds,
    health: Arc<Health>,
) -> Result<
    (
        Controller<Watched>,
        Store<Watched>,
        Caches,
        Arc<PolicyFacts>,
    ),
    RunError,
> {
    let ns = options.namespace.as_deref();
    let lb_watch = match &options.watch_filter {
        Some(value) => watcher::Config::default().labels(&format!("{WATCH_FILTER_LABEL}={value}")),
        None => watcher::Config::default(),
    }
    .page_size(LIST_PAGE);
    let triggers = Arc::new(Triggers::new());
    let (store, writer) = reflector::store();
    let lb_events = {
        let triggers = triggers.clone();
        reflector::reflector(
            writer,
            // No reconcile reads managedFields: not kept in the cache.
            watcher(api::<Watched>(client, ns), watch_config(lb_watch))
                .backoff(backoff::for_watch())
                .modify(|lb: &mut Watched| lb.meta_mut().managed_fields = None),
        )
        .inspect_ok(move |event| {
            // Ready once the first list is in the cache. (Not `Store::wait_until_ready`: its
            // one-shot keeps a single waker, and the controller's runner waits on it too, so
            // a second waiter may never wake.)
            if matches!(event, watcher::Event::InitDone) {
                health.set_ready(true);
            }
            triggers.event(event)
        })
        .applied_objects()
    };
    let mut watches = Watches {
        client,
        ns,
        triggers,
        caches: Caches::default(),
        facts: Arc::default(),
    };
    // Each watch backs off on its own (see `backoff`).
    let controller =
        Controller::for_stream(lb_events, store.clone()).trigger_backoff(backoff::NoBackoff);
    let controller = watches.published(controller);
    let controller = watches.infrastructure(controller, registry);
    let controller = watches.class_services(controller);
    let controller = watches.namespaces(controller, store.clone());
    let controller = watches.provider_objects(controller, registry).await?;
    let controller = watches.cluster_api(controller, capi, options.resync);
    let controller = watches.dns_endpoints(controller, options.resync).await?;
    Ok((controller, store, watches.caches, watches.facts))
}

/// Objects per page of the lists of the cached watches and the LoadBalancers' own (kube-runtime's
/// default is 500). A page is parsed whole, with the `managedFields` the caches then drop, so the
/// page size sets much of the controller's peak memory at a start: at a warm restart with 1,000
/// LoadBalancers and 3,000 Machines, 100 instead of 500 took the peak RSS from 83 to 70 MiB for
/// about 50 more list requests, and 50 instead of 100 saved 1.2-2.0 MiB more of the heap for about
/// 60 more. (The other watches' lists made no difference there.)
const LIST_PAGE: u32 = 50;

/// Whether a cache keeps an index (for the kinds reconciles list by label, annotation or owner:
/// targets, infrastructure objects, the published Services and EndpointSlices; not Clusters, read
/// by name).
enum Indexed {
    Yes,
    No,
}

/// Adds the watches that trigger the LoadBalancer controller, by what they watch.
struct Watches<'a> {
    client: &'a kube::Client,
    ns: Option<&'a str>,
    triggers: Arc<Triggers>,
    /// The caches reconciles read (filled by some of the watches).
    caches: Caches,
    /// What the address policy reads (ClusterIPs, Namespaces' allow-lists).
    facts: Arc<PolicyFacts>,
}

impl Watches<'_> {
    /// [`Self::cached_with`] for every object of `ar`, indexed, without `managedFields`.
    fn cached(
        &mut self,
        ar: &ApiResource,
    ) -> impl futures::Stream<Item = Result<DynamicObject, watcher::Error>> + Send + 'static {
        self.cached_with(
            ar,
            watcher::Config::default(),
            None,
            cache::without_managed_fields,
            Indexed::Yes,
        )
    }

    /// A watch of the objects of `ar` that `config` selects, which also fills a cache reconciles
    /// read (see [`crate::cache`]), keeping of each object what `prune` leaves; its changed and
    /// deleted objects, for a trigger. With `relevant`, an object's change reaches the trigger only
    /// when its projection changed (the cache gets every change).
    fn cached_with(
        &mut self,
        ar: &ApiResource,
        config: watcher::Config,
        relevant: Option<Projection>,
        prune: cache::Prune,
        indexed: Indexed,
    ) -> impl futures::Stream<Item = Result<DynamicObject, watcher::Error>> + Send + 'static {
        let api = dynamic_api(self.client, self.ns, ar);
        self.cached_from(api, ar, config, relevant, prune, indexed)
    }

    /// [`Self::cached_with`] of what `api` lists and watches.
    fn cached_from(
        &mut self,
        api: Api<DynamicObject>,
        ar: &ApiResource,
        config: watcher::Config,
        relevant: Option<Projection>,
        prune: cache::Prune,
        indexed: Indexed,
    ) -> impl futures::Stream<Item = Result<DynamicObject, watcher::Error>> + Send + 'static {
        let cache = ObjectCache::new(ar.clone(), prune);
        let cache = Arc::new(match indexed {
            Indexed::Yes => cache.indexed(),
            Indexed::No => cache,
        });
        self.caches.add(cache.clone());
        let failing = cache.clone();
        watcher(api, watch_config(config.page_size(LIST_PAGE)))
            .backoff(backoff::for_watch())
            .modify(prune)
            .inspect_ok(move |event| cache.apply(event))
            .inspect_err(move |_| failing.failing())
            .try_filter(changed(relevant))
            .touched_objects()
    }

    /// The Services capi-lb publishes (of LoadBalancers and of Services) and their
    /// EndpointSlices, mapped to the LoadBalancer that owns them; both are cached, and the
    /// publication reads them from there instead of listing them on every pass.
    fn published(&mut self, controller: Controller<Watched>) -> Controller<Watched> {
        let service = ApiResource::erase::<Service>(&());
        let slice = ApiResource::erase::<EndpointSlice>(&());
        let services = self.cached_with(
            &service,
            watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}")),
            None,
            cache::without_managed_fields,
            Indexed::Yes,
        );
        let slices = self.cached_with(
            &slice,
            watcher::Config::default().labels(&format!(
                "{LABEL_ENDPOINTSLICE_MANAGED_BY}={ENDPOINTSLICE_MANAGED_BY_VALUE}"
            )),
            None,
            cache::without_managed_fields,
            Indexed::Yes,
        );
        controller
            .watches_stream_with(
                services,
                |svc: DynamicObject| triggers::owner(&svc.metadata),
                service,
            )
            .watches_stream_with(
                slices,
                |slice: DynamicObject| triggers::published_slice(&slice.metadata),
                slice,
            )
    }

    /// Every enabled provider's infrastructure kind, mapped to the LoadBalancers that reference
    /// the object.
    fn infrastructure(
        &mut self,
        mut controller: Controller<Watched>,
        registry: &ProviderRegistry,
    ) -> Controller<Watched> {
        for ar in registry.resources() {
            let triggers = self.triggers.clone();
            let mapped = ar.clone();
            let stream = self.cached(&ar);
            controller = controller.watches_stream_with(
                stream,
                move |obj: DynamicObject| triggers.referencing(&mapped, &obj),
                ar.clone(),
            );
        }
        controller
    }

    /// Services of capi-lb's load-balancer class, and their EndpointSlices: they drive the
    /// LoadBalancer that realises them, and the LoadBalancers still bound to them (annotated with
    /// the Service's name), so that when a Service names another LoadBalancer or leaves the class,
    /// those let its endpoints go.
    /// The same watch of every Service keeps the ClusterIPs the address policy refuses.
    fn class_services(&self, controller: Controller<Watched>) -> Controller<Watched> {
        let (services, slices) = (self.triggers.clone(), self.triggers.clone());
        let facts = self.facts.clone();
        controller
            .watches_stream(
                watcher(
                    api::<Service>(self.client, self.ns),
                    watch_config(watcher::Config::default()),
                )
                .backoff(backoff::for_watch())
                .inspect_ok(move |event| facts.service_event(event))
                .touched_objects(),
                move |svc: Service| services.bound_to_service(&svc),
            )
            .watches_stream(
                watch(
                    api::<EndpointSlice>(self.client, self.ns),
                    watcher::Config::default().labels(LABEL_SERVICE_NAME),
                ),
                move |slice: EndpointSlice| slices.bound_to_slice(&slice),
            )
    }

    /// The Namespaces' metadata, for their `allowed-addresses` annotation (the address policy); a
    /// change re-triggers every LoadBalancer of the namespace. Only the watched namespace with
    /// `--namespace`.
    fn namespaces(
        &self,
        controller: Controller<Watched>,
        loadbalancers: Store<Watched>,
    ) -> Controller<Watched> {
        let config = match self.ns {
            Some(ns) => watcher::Config::default().fields(&format!("metadata.name={ns}")),
            None => watcher::Config::default(),
        };
        let (store, writer) = reflector::store();
        self.facts.watch_namespaces(store);
        let stream = reflector::reflector(
            writer,
            watcher(
                kube::Api::<PartialObjectMeta<Namespace>>::all(self.client.clone()),
                watch_config(config),
            )
            .backoff(backoff::for_watch())
            .modify(|ns| ns.metadata.managed_fields = None),
        )
        .touched_objects();
        controller.watches_stream(stream, move |ns: PartialObjectMeta<Namespace>| {
            let name = ns.name_any();
            loadbalancers
                .state()
                .iter()
                .filter(|lb| lb.namespace().as_deref() == Some(name.as_str()))
                .map(|lb| ObjectRef::from_obj(lb.as_ref()))
                .collect::<Vec<_>>()
        })
    }

    /// Objects providers create through the Kubernetes API (kube-dc: the LoadBalancer Service and
    /// each catalog entry's owned kinds such as the EIp), by the owning LoadBalancer's UID label
    /// and name annotation. An owned kind that is not installed is not watched (with a warning).
    async fn provider_objects(
        &self,
        mut controller: Controller<Watched>,
        registry: &ProviderRegistry,
    ) -> Result<Controller<Watched>, RunError> {
        controller = controller.watches_stream(
            watch(
                api::<Service>(self.client, self.ns),
                watcher::Config::default().labels(tags::UID),
            ),
            move |svc: Service| triggers::by_tags(&svc.metadata),
        );
        for entry in catalog::CATALOG
            .iter()
            .filter(|e| registry.names().contains(&e.name))
        {
            for owned in entry.owned_kinds {
                let ar = owned.api_resource();
                if installed(self.client, &ar.group, &ar.kind)
                    .await
                    .map_err(RunError::Connect)?
                {
                    controller = controller.watches_stream_with(
                        watch(
                            dynamic_api(self.client, self.ns, &ar),
                            watcher::Config::default().labels(tags::UID),
                        ),
                        move |obj: DynamicObject| triggers::by_tags(&obj.metadata),
                        ar.clone(),
                    );
                } else {
                    tracing::warn!("{}", owned.missing);
                }
            }
        }
        Ok(controller)
    }

    /// Cluster API Machines (mapped to the LoadBalancers whose selector matches them or whose
    /// annotations they carry; the watch also fills the Machine cache targets are read from) and
    /// Clusters (by `spec.clusterName`), when installed.
    fn cluster_api(
        &mut self,
        mut controller: Controller<Watched>,
        capi: &CapiKinds,
        resync: Duration,
    ) -> Controller<Watched> {
        if capi.machine_served {
            let triggers = self.triggers.clone();
            let stream = self.cached_with(
                &capi.machine,
                watcher::Config::default(),
                Some(machine_projection),
                cache::target_view,
                Indexed::Yes,
            );
            controller = controller.watches_stream_with(
                stream,
                move |obj: DynamicObject| triggers.selecting(&obj),
                capi.machine.clone(),
            );
        } else {
            tracing::warn!(
                "Cluster API Machines are not installed: not watching them (resync every {resync:?})"
            );
        }
        if capi.cluster_served {
            let triggers = self.triggers.clone();
            let stream = self.cached_with(
                &capi.cluster,
                watcher::Config::default(),
                Some(cluster_projection),
                cache::cluster_view,
                Indexed::No,
            );
            controller = controller.watches_stream_with(
                stream,
                move |obj: DynamicObject| {
                    obj.try_parse::<Cluster>()
                        .map(|c| triggers.of_cluster(&c))
                        .unwrap_or_default()
                },
                capi.cluster.clone(),
            );
        }
        controller
    }

    /// ExternalDNS's DNSEndpoints, when their CRD is served: ExternalDNS reporting what it
    /// processed, a name released by another LoadBalancer, a foreign DNSEndpoint in the way going
    /// away (see [`Triggers::of_dns_endpoint`]).
    async fn dns_endpoints(
        &mut self,
        mut controller: Controller<Watched>,
        resync: Duration,
    ) -> Result<Controller<Watched>, RunError> {
        if installed(
            self.client,
            capi_lb_api::externaldns::GROUP,
            &DNSEndpoint::kind(&()),
        )
        .await
        .map_err(RunError::Connect)?
        {
            // Cached: the publication reads every LoadBalancer's DNSEndpoints from here (for a
            // name's owner) instead of listing them on every pass. Of every namespace, whatever
            // `--namespace` this shard serves: a name has one holder in the whole cluster, and a
            // shard that saw only its own namespace gave a name another shard held.
            let triggers = self.triggers.clone();
            let resource = ApiResource::erase::<DNSEndpoint>(&());
            let everywhere = Api::all_with(self.client.clone(), &resource);
            let stream = self.cached_from(
                everywhere,
                &resource,
                watcher::Config::default(),
                None,
                cache::without_managed_fields,
                Indexed::No,
            );
            controller = controller.watches_stream_with(
                stream,
                move |obj: DynamicObject| {
                    obj.try_parse::<DNSEndpoint>()
                        .map(|endpoint| triggers.of_dns_endpoint(&endpoint))
                        .unwrap_or_default()
                },
                resource,
            );
        } else {
            tracing::info!(
                "ExternalDNS's DNSEndpoints are not installed: not watching them (LoadBalancers with spec.dns report DNSEndpointCRDMissing; restart capi-lb once the CRD is installed, or wait for the resync every {resync:?})"
            );
        }
        Ok(controller)
    }
}

/// How often the gauges computed from the caches are updated.
const CENSUS_EVERY: Duration = Duration::from_secs(10);

/// The gauges computed from the caches follow them: the managed objects, and the fleet's census
/// (LoadBalancers by condition, targets by state, deletion hooks; see
/// [`crate::telemetry::fleet`]) from the LoadBalancers and the `machines` cache, if any. No API
/// request; the Machines' metadata is parsed one at a time.
pub(in crate::run) fn observe_cache(
    store: Store<Watched>,
    machines: Option<Arc<ObjectCache>>,
    metrics: Arc<Metrics>,
    clock: SharedClock,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(CENSUS_EVERY);
        loop {
            tick.tick().await;
            let state = store.state();
            let loadbalancers: Vec<&LoadBalancer> =
                state.iter().filter_map(|lb| lb.0.as_ref().ok()).collect();
            metrics.set_managed("loadbalancers", state.len());
            metrics.set_managed(
                "ready_loadbalancers",
                loadbalancers
                    .iter()
                    .filter(|lb| lb.status.as_ref().is_some_and(|s| s.ready))
                    .count(),
            );
            let mut census = Census::new(clock.now());
            for lb in loadbalancers {
                census.loadbalancer(lb);
            }
            if let Some(machines) = &machines {
                machines.for_each_metadata(|meta| census.target(meta));
            }
            metrics.fleet.publish(&census);
        }
    })
}

/// What of an object a LoadBalancer's reconcile can act on, hashed.
type Projection = fn(&DynamicObject) -> u64;

/// A filter of watch events that passes an applied object only when `relevant` (if any) says it
/// changed since the last one passed, and every deletion and list marker.
fn changed(
    relevant: Option<Projection>,
) -> impl FnMut(&watcher::Event<DynamicObject>) -> std::future::Ready<bool> + Send + 'static {
    let mut last: HashMap<String, u64> = HashMap::new();
    move |event| {
        let pass = match (relevant, event) {
            (Some(project), watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                let key = o.metadata.uid.clone().unwrap_or_default();
                let hash = project(o);
                last.insert(key, hash) != Some(hash)
            }
            (_, watcher::Event::Delete(o)) => {
                last.remove(o.metadata.uid.as_deref().unwrap_or_default());
                true
            }
            _ => true,
        };
        std::future::ready(pass)
    }
}

/// Hash of the metadata a reconcile reads: labels (selectors), annotations (capi-lb's states,
/// hooks, `disabled`, pause, references), and whether the object is being deleted.
fn hash_metadata(o: &DynamicObject, h: &mut DefaultHasher) {
    o.metadata.labels.hash(h);
    o.metadata.annotations.hash(h);
    o.metadata.deletion_timestamp.is_some().hash(h);
}

/// A Machine as targets read it: its metadata (above), its addresses, its failure domain and the
/// type and status of its conditions (readiness gates). Cluster API's own updates of its phase, finalizers, owner
/// references and the times and messages of conditions do not trigger a reconcile.
fn machine_projection(o: &DynamicObject) -> u64 {
    let mut h = DefaultHasher::new();
    hash_metadata(o, &mut h);
    for path in ["/status/addresses", "/spec/failureDomain"] {
        o.data.pointer(path).map(ToString::to_string).hash(&mut h);
    }
    for path in crate::loadbalancer::picking::CONDITION_LISTS {
        for c in o
            .data
            .pointer(path)
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
        {
            (
                c.get("type").and_then(|v| v.as_str()),
                c.get("status").and_then(|v| v.as_str()),
            )
                .hash(&mut h);
        }
    }
    h.finish()
}

/// A Cluster as a LoadBalancer reads it: its metadata and its spec (pause, control-plane endpoint
/// and reference); Cluster API's status updates do not trigger a reconcile.
fn cluster_projection(o: &DynamicObject) -> u64 {
    let mut h = DefaultHasher::new();
    hash_metadata(o, &mut h);
    o.data.get("spec").map(ToString::to_string).hash(&mut h);
    h.finish()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kube::ResourceExt;
    use serde_json::json;

    fn machine(rv: &str, phase: &str, ip: &str, ready: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "m", "namespace": "a", "uid": "u1", "resourceVersion": rv,
                         "labels": {"role": "cp"}, "finalizers": [format!("f-{rv}")]},
            "status": {"phase": phase, "addresses": [{"type": "InternalIP", "address": ip}],
                       "conditions": [{"type": "Ready", "status": ready,
                                       "lastTransitionTime": format!("2026-01-01T00:00:{rv}Z"),
                                       "message": format!("at {rv}")}]}}))
        .unwrap()
    }

    fn passes(
        filter: &mut impl FnMut(&watcher::Event<DynamicObject>) -> std::future::Ready<bool>,
        e: watcher::Event<DynamicObject>,
    ) -> bool {
        futures::executor::block_on(filter(&e))
    }

    #[test]
    fn only_changes_a_reconcile_reads_pass_and_deletions_always_do() {
        let mut filter = changed(Some(machine_projection));
        assert!(passes(
            &mut filter,
            watcher::Event::InitApply(machine("10", "Pending", "10.0.0.1", "False"))
        ));
        // Cluster API's own bookkeeping: phase, finalizers, condition times and messages.
        assert!(!passes(
            &mut filter,
            watcher::Event::Apply(machine("11", "Running", "10.0.0.1", "False"))
        ));
        // What targets read: an address, a condition's status.
        assert!(passes(
            &mut filter,
            watcher::Event::Apply(machine("12", "Running", "10.0.0.2", "False"))
        ));
        assert!(passes(
            &mut filter,
            watcher::Event::Apply(machine("13", "Running", "10.0.0.2", "True"))
        ));
        let mut labelled = machine("14", "Running", "10.0.0.2", "True");
        labelled.labels_mut().insert("role".into(), "worker".into());
        assert!(passes(&mut filter, watcher::Event::Apply(labelled.clone())));
        let mut annotated = labelled.clone();
        annotated.annotations_mut().insert(
            "loadbalancer.cluster.x-k8s.io/disabled".into(),
            "true".into(),
        );
        assert!(passes(
            &mut filter,
            watcher::Event::Apply(annotated.clone())
        ));
        assert!(passes(&mut filter, watcher::Event::Delete(annotated)));
        assert!(passes(&mut filter, watcher::Event::InitDone));
        // Without a projection everything passes.
        let mut all = changed(None);
        assert!(passes(
            &mut all,
            watcher::Event::Apply(machine("10", "Pending", "10.0.0.1", "False"))
        ));
        assert!(passes(
            &mut all,
            watcher::Event::Apply(machine("10", "Pending", "10.0.0.1", "False"))
        ));
    }

    #[test]
    fn a_cluster_triggers_on_its_spec_and_metadata_not_its_status() {
        let cluster = |paused: bool, phase: &str| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": "c", "namespace": "a", "uid": "c1"},
                "spec": {"paused": paused}, "status": {"phase": phase}}))
            .unwrap()
        };
        assert_eq!(
            cluster_projection(&cluster(false, "Pending")),
            cluster_projection(&cluster(false, "Provisioned"))
        );
        assert_ne!(
            cluster_projection(&cluster(false, "Pending")),
            cluster_projection(&cluster(true, "Pending"))
        );
    }
}
