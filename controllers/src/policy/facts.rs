//! What the address and name policies ([`super`]) read of the cluster, kept by `run`'s watches: every
//! ClusterIP (from the LoadBalancer controller's watch of all Services) and the Namespaces' allow-lists
//! (their `allowed-addresses` annotation, from a watch of Namespaces' metadata). Without them (the
//! in-memory world of `simulate` and the tests) neither rule applies.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{OnceLock, PoisonError, RwLock};

use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use capi_lb_api::loadbalancer::LoadBalancerAddress;

use super::addresses::{
    ANNOTATION_ALLOWED_ADDRESSES, AddressPolicy, Context, Refusal, namespace_allow,
};
use super::names::{ANNOTATION_DNS_DOMAINS, ANNOTATION_DNS_WILDCARDS, NamePolicy, NamespaceNames};

/// The facts the address policy reads.
#[derive(Default)]
pub struct PolicyFacts {
    cluster_ips: ClusterIps,
    namespaces: OnceLock<Store<PartialObjectMeta<Namespace>>>,
}

impl std::fmt::Debug for PolicyFacts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyFacts").finish_non_exhaustive()
    }
}

impl PolicyFacts {
    /// Whether `ip` is a ClusterIP of a Service of the cluster (as far as the watch has seen).
    pub fn is_cluster_ip(&self, ip: IpAddr) -> bool {
        self.cluster_ips.contains(ip)
    }

    /// Keep the ClusterIPs from a watch of every Service.
    pub fn service_event(&self, event: &watcher::Event<Service>) {
        self.cluster_ips.event(event);
    }

    /// Read Namespaces' annotations from `store` (a watch of their metadata).
    pub fn watch_namespaces(&self, store: Store<PartialObjectMeta<Namespace>>) {
        let _ = self.namespaces.set(store);
    }

    /// The annotation `key` of Namespace `namespace`, when Namespaces are watched and it has it.
    pub fn namespace_annotation(&self, namespace: &str, key: &str) -> Option<String> {
        let store = self.namespaces.get()?;
        store
            .get(&ObjectRef::new(namespace))?
            .annotations()
            .get(key)
            .cloned()
    }

    /// The DNS names among `names` that the name policy `policy` does not let `namespace`
    /// publish, each with its rule (its annotations read from the watched Namespaces).
    pub fn refused_names(
        &self,
        policy: &NamePolicy,
        names: &[String],
        namespace: &str,
    ) -> Vec<(String, String)> {
        let domains = self.namespace_annotation(namespace, ANNOTATION_DNS_DOMAINS);
        let wildcards = self.namespace_annotation(namespace, ANNOTATION_DNS_WILDCARDS);
        policy.refusals(
            names,
            namespace,
            NamespaceNames {
                domains: domains.as_deref(),
                wildcards: wildcards.as_deref(),
            },
        )
    }

    /// The allow-list of `namespace`: `None` when it has none (or Namespaces are not watched),
    /// `Some(Err)` when its annotation does not parse (nothing is allowed then).
    pub fn namespace_allow(&self, namespace: &str) -> Option<Result<Vec<IpNet>, String>> {
        let store = self.namespaces.get()?;
        let found = store.get(&ObjectRef::new(namespace))?;
        let value = found.annotations().get(ANNOTATION_ALLOWED_ADDRESSES)?;
        Some(namespace_allow(value))
    }

    /// The addresses among `addresses` that the address policy `policy` does not let `provider`
    /// publish in `namespace`, each with its rule (its allow-list read from the watched
    /// Namespaces; one that does not parse allows nothing, and the rule says why).
    pub fn refused_addresses(
        &self,
        policy: &AddressPolicy,
        addresses: &[LoadBalancerAddress],
        namespace: &str,
        provider: &str,
    ) -> Vec<Refusal> {
        let allow = self.namespace_allow(namespace);
        let (namespace_allow, broken) = match &allow {
            Some(Ok(ranges)) => (Some(ranges.as_slice()), None),
            Some(Err(e)) => (Some(&[][..]), Some(e)),
            None => (None, None),
        };
        let is_cluster_ip = |ip| self.is_cluster_ip(ip);
        let mut refused = policy.refusals(
            addresses,
            Context {
                provider: Some(provider),
                namespace_allow,
                is_cluster_ip: &is_cluster_ip,
            },
        );
        if let Some(e) = broken {
            for refusal in &mut refused {
                refusal.rule = format!("{}: {e}", refusal.rule);
            }
        }
        refused
    }
}

/// Every ClusterIP, by Service UID, kept from a watch's events (a relist builds a new set beside
/// the current one and replaces it when done).
#[derive(Default)]
struct ClusterIps {
    state: RwLock<IpState>,
}

#[derive(Default)]
struct IpState {
    by_uid: HashMap<String, Vec<IpAddr>>,
    all: HashSet<IpAddr>,
    relist: Option<HashMap<String, Vec<IpAddr>>>,
}

impl IpState {
    fn rebuild(&mut self) {
        self.all = self.by_uid.values().flatten().copied().collect();
    }
}

/// The ClusterIPs of `service` (none for a headless or ExternalName Service).
fn ips_of(service: &Service) -> Vec<IpAddr> {
    let Some(spec) = &service.spec else {
        return Vec::new();
    };
    spec.cluster_ips
        .iter()
        .flatten()
        .chain(spec.cluster_ip.iter())
        .filter_map(|ip| ip.parse().ok())
        .collect::<HashSet<IpAddr>>()
        .into_iter()
        .collect()
}

impl ClusterIps {
    fn contains(&self, ip: IpAddr) -> bool {
        self.state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .all
            .contains(&ip)
    }

    fn event(&self, event: &watcher::Event<Service>) {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        match event {
            watcher::Event::Init => state.relist = Some(HashMap::new()),
            watcher::Event::InitApply(service) => {
                let (uid, ips) = (service.uid().unwrap_or_default(), ips_of(service));
                if let Some(relist) = state.relist.as_mut() {
                    relist.insert(uid, ips);
                }
            }
            watcher::Event::InitDone => {
                if let Some(relist) = state.relist.take() {
                    state.by_uid = relist;
                    state.rebuild();
                }
            }
            watcher::Event::Apply(service) => {
                let ips = ips_of(service);
                state.by_uid.insert(service.uid().unwrap_or_default(), ips);
                state.rebuild();
            }
            watcher::Event::Delete(service) => {
                state.by_uid.remove(&service.uid().unwrap_or_default());
                state.rebuild();
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(uid: &str, ips: &[&str]) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": uid, "namespace": "a", "uid": uid},
            "spec": {"clusterIP": ips.first().copied().unwrap_or("None"), "clusterIPs": ips},
        }))
        .unwrap()
    }

    #[test]
    fn cluster_ips_follow_the_watch_and_its_relists() {
        let facts = PolicyFacts::default();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        facts.service_event(&watcher::Event::Init);
        facts.service_event(&watcher::Event::InitApply(service("a", &["10.0.0.1"])));
        // Not yet: the relist is not done.
        assert!(!facts.is_cluster_ip(ip("10.0.0.1")));
        facts.service_event(&watcher::Event::InitDone);
        assert!(facts.is_cluster_ip(ip("10.0.0.1")));
        facts.service_event(&watcher::Event::Apply(service(
            "b",
            &["10.0.0.2", "fd00::2"],
        )));
        assert!(facts.is_cluster_ip(ip("fd00::2")));
        facts.service_event(&watcher::Event::Delete(service("a", &["10.0.0.1"])));
        assert!(!facts.is_cluster_ip(ip("10.0.0.1")));
        // A headless Service has none.
        facts.service_event(&watcher::Event::Apply(service("c", &[])));
        assert!(!facts.is_cluster_ip(ip("10.0.0.3")));
        // A relist replaces what was known.
        facts.service_event(&watcher::Event::Init);
        facts.service_event(&watcher::Event::InitApply(service("d", &["10.0.0.4"])));
        facts.service_event(&watcher::Event::InitDone);
        assert!(facts.is_cluster_ip(ip("10.0.0.4")) && !facts.is_cluster_ip(ip("10.0.0.2")));
        // No Namespaces watched: no allow-list.
        assert!(facts.namespace_allow("a").is_none());
    }
}
