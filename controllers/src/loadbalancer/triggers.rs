//! Watch triggers: which LoadBalancers an event on a watched object concerns.
//!
//! `run` watches more kinds than LoadBalancers (infrastructure objects, Machines, Clusters, Services
//! of capi-lb's class and their EndpointSlices, objects providers create, capi-lb's own `-ext`
//! objects). Each event is mapped to the LoadBalancers it concerns by the functions here, which are
//! pure: they read a [`Triggers`] index that the LoadBalancer watch keeps up to date
//! ([`Triggers::event`]), so a Machine event looks up the LoadBalancers by its labels and
//! annotations instead of scanning every LoadBalancer.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use capi_lb_api::LoadBalancer;
use capi_lb_api::capi::{Cluster, Machine};
use capi_lb_api::constants::{
    LABEL_LB_NAME, LABEL_SERVICE_NAME, PRE_DRAIN_HOOK_PREFIX, PRE_TERMINATE_HOOK_PREFIX,
    TARGET_SINCE_PREFIX, TARGET_STATE_PREFIX,
};
use capi_lb_api::externaldns::DNSEndpoint;
use capi_lb_api::target::target_key;
use capi_lb_providers::provider::tags;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, DeserializeGuard, DynamicObject, Expression, Selector, SelectorExt};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::class;

/// What the LoadBalancer watch yields: a LoadBalancer, or the metadata of one that does not
/// deserialize (e.g. written through a newer CRD), so that one bad object cannot stop the watch.
pub type Watched = DeserializeGuard<LoadBalancer>;

type Ref = ObjectRef<Watched>;
/// (namespace, name) of a LoadBalancer.
type Key = (String, String);

fn to_ref((namespace, name): &Key) -> Ref {
    lb_ref(namespace, name)
}

fn lb_ref(namespace: &str, name: &str) -> Ref {
    ObjectRef::new(name).within(namespace)
}

/// What the triggers need to know of one LoadBalancer.
#[derive(Clone, Debug, PartialEq)]
struct Summary {
    /// `spec.infrastructureRef`: (group, kind, name).
    infrastructure: (String, String, String),
    /// `spec.clusterName`.
    cluster: Option<String>,
    /// The Service of capi-lb's class it is bound to (its `service` annotation).
    service: Option<String>,
    /// It targets Machines.
    machines: bool,
    /// The selector of its Machines; `None` when it targets another kind or the selector is invalid.
    selector: Option<Selector>,
    /// It publishes DNS names (`spec.dns` is set).
    dns: bool,
    /// The DNS names it publishes (see [`crate::publication::dns::hostnames`]).
    hostnames: Vec<String>,
}

impl Summary {
    fn of(lb: &LoadBalancer) -> Self {
        let r = &lb.spec.infrastructure_ref;
        let machines = lb.spec.target_kind.kind == Machine::kind(&());
        Self {
            infrastructure: (r.api_group.clone(), r.kind.clone(), r.name.clone()),
            cluster: lb.spec.cluster_name.clone(),
            service: lb.annotations().get(class::ANNOTATION_SERVICE).cloned(),
            machines,
            selector: machines.then(|| lb.effective_selector().ok()).flatten(),
            dns: lb.spec.dns.is_some(),
            hostnames: crate::publication::dns::hostnames(lb),
        }
    }

    /// The (label, value) pairs a Machine must carry to be selected, one of which is enough to
    /// find the LoadBalancer; empty when the selector has no equality (it is then checked for every
    /// Machine of the namespace).
    fn label_keys(&self) -> Vec<(String, String)> {
        let Some(selector) = &self.selector else {
            return Vec::new();
        };
        // The first expression that pins a label to values: every selected Machine has one of them.
        for expression in selector.clone() {
            match expression {
                Expression::Equal(key, value) => return vec![(key, value)],
                Expression::In(key, values) => {
                    return values.into_iter().map(|v| (key.clone(), v)).collect();
                }
                _ => {}
            }
        }
        Vec::new()
    }
}

/// The LoadBalancers by what their triggers look up.
#[derive(Debug, Default)]
struct Index {
    summaries: HashMap<Key, Summary>,
    /// (namespace, label, value) -> Machine-targeting LoadBalancers selecting on it.
    by_label: HashMap<(String, String, String), BTreeSet<Key>>,
    /// namespace -> Machine-targeting LoadBalancers without an equality in their selector.
    unindexed: HashMap<String, BTreeSet<Key>>,
    /// target key (the suffix of capi-lb's annotations on targets) -> LoadBalancer.
    by_target_key: HashMap<String, Key>,
    /// DNS name -> LoadBalancers publishing it (in any namespace: a name is global).
    by_hostname: HashMap<String, BTreeSet<Key>>,
}

impl Index {
    fn insert(&mut self, lb: &LoadBalancer) {
        let (Some(namespace), name) = (lb.namespace(), lb.name_any()) else {
            return;
        };
        let r: Key = (namespace.clone(), name.clone());
        let summary = Summary::of(lb);
        if self.summaries.get(&r) == Some(&summary) {
            return;
        }
        self.remove(&r);
        if summary.selector.is_some() {
            let keys = summary.label_keys();
            if keys.is_empty() {
                self.unindexed
                    .entry(namespace.clone())
                    .or_default()
                    .insert(r.clone());
            }
            for (key, value) in keys {
                self.by_label
                    .entry((namespace.clone(), key, value))
                    .or_default()
                    .insert(r.clone());
            }
        }
        self.by_target_key
            .insert(target_key(&namespace, &name), r.clone());
        for hostname in &summary.hostnames {
            self.by_hostname
                .entry(hostname.clone())
                .or_default()
                .insert(r.clone());
        }
        self.summaries.insert(r, summary);
    }

    fn remove(&mut self, r: &Key) {
        let Some(summary) = self.summaries.remove(r) else {
            return;
        };
        for hostname in &summary.hostnames {
            if let Some(refs) = self.by_hostname.get_mut(hostname) {
                refs.remove(r);
                if refs.is_empty() {
                    self.by_hostname.remove(hostname);
                }
            }
        }
        let namespace = r.0.clone();
        self.by_label.retain(|_, refs| {
            refs.remove(r);
            !refs.is_empty()
        });
        if let Some(refs) = self.unindexed.get_mut(&namespace) {
            refs.remove(r);
        }
        self.by_target_key.remove(&target_key(&namespace, &r.1));
    }

    fn in_namespace<'a>(
        &'a self,
        namespace: &'a str,
    ) -> impl Iterator<Item = (&'a Key, &'a Summary)> + 'a {
        self.summaries.iter().filter(move |(r, _)| r.0 == namespace)
    }
}

/// The index of LoadBalancers the watch triggers read, kept current by the LoadBalancer watch.
#[derive(Debug, Default)]
pub struct Triggers {
    index: RwLock<Index>,
    /// The index of a relist in progress (between `Init` and `InitDone`), built as the objects
    /// arrive: a relist does not keep a copy of every LoadBalancer until it is done.
    relist: RwLock<Option<Index>>,
    /// The DNS names each DNSEndpoint (namespace, name) had when last seen: a name it no longer
    /// has was released, and who waits for it must hear of it.
    dns_names: RwLock<HashMap<Key, BTreeSet<String>>>,
}

impl Triggers {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// An index of `lbs`.
    pub fn of<'a>(lbs: impl IntoIterator<Item = &'a LoadBalancer>) -> Self {
        let triggers = Self::new();
        for lb in lbs {
            triggers.apply(lb);
        }
        triggers
    }

    fn read(&self) -> RwLockReadGuard<'_, Index> {
        self.index.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Index> {
        self.index.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// A LoadBalancer was created or changed.
    pub fn apply(&self, lb: &LoadBalancer) {
        self.write().insert(lb);
    }

    /// A LoadBalancer is gone.
    pub fn delete(&self, lb: &LoadBalancer) {
        if let Some(namespace) = lb.namespace() {
            self.write().remove(&(namespace, lb.name_any()));
        }
    }

    /// Follow one event of the LoadBalancer watch (a relist replaces the index once it is complete).
    pub fn event(&self, event: &watcher::Event<Watched>) {
        let mut relist = self.relist.write().unwrap_or_else(PoisonError::into_inner);
        match event {
            watcher::Event::Apply(DeserializeGuard(Ok(lb))) => self.apply(lb),
            // Nothing maps to an object that cannot be read; its own change triggers it.
            watcher::Event::Apply(invalid) | watcher::Event::Delete(invalid) => {
                if let Some(namespace) = invalid.namespace() {
                    self.write().remove(&(namespace, invalid.name_any()));
                }
            }
            watcher::Event::Init => *relist = Some(Index::default()),
            watcher::Event::InitApply(DeserializeGuard(Ok(lb))) => {
                relist.get_or_insert_with(Index::default).insert(lb);
            }
            watcher::Event::InitApply(DeserializeGuard(Err(_))) => {}
            watcher::Event::InitDone => *self.write() = relist.take().unwrap_or_default(),
        }
    }

    /// LoadBalancers whose `infrastructureRef` names `obj`, an object of kind `ar`.
    pub fn referencing(&self, ar: &ApiResource, obj: &DynamicObject) -> Vec<Ref> {
        let Some(namespace) = obj.namespace() else {
            return Vec::new();
        };
        let wanted = (ar.group.clone(), ar.kind.clone(), obj.name_any());
        self.read()
            .in_namespace(&namespace)
            .filter(|(_, s)| s.infrastructure == wanted)
            .map(|(r, _)| to_ref(r))
            .collect()
    }

    /// LoadBalancers that deal with `obj` (a Machine): those whose target selector matches it, and
    /// those whose annotations are still on it (it was deselected and is being removed, or it holds
    /// their deletion hooks).
    pub fn selecting(&self, obj: &DynamicObject) -> Vec<Ref> {
        let Some(namespace) = obj.namespace() else {
            return Vec::new();
        };
        let labels = obj.labels();
        let index = self.read();
        let mut found: BTreeSet<Key> = BTreeSet::new();
        let candidates = labels
            .iter()
            .filter_map(|(k, v)| {
                index
                    .by_label
                    .get(&(namespace.clone(), k.clone(), v.clone()))
            })
            .chain(index.unindexed.get(&namespace))
            .flatten();
        for r in candidates {
            let matches = index
                .summaries
                .get(r)
                .and_then(|s| s.selector.as_ref())
                .is_some_and(|selector| selector.matches(labels));
            if matches {
                found.insert(r.clone());
            }
        }
        for key in obj.annotations().keys() {
            let suffix = [
                TARGET_STATE_PREFIX,
                TARGET_SINCE_PREFIX,
                PRE_DRAIN_HOOK_PREFIX,
                PRE_TERMINATE_HOOK_PREFIX,
            ]
            .iter()
            .find_map(|prefix| key.strip_prefix(prefix));
            if let Some(r) = suffix.and_then(|s| index.by_target_key.get(s))
                && r.0 == namespace
                && index.summaries.get(r).is_some_and(|s| s.machines)
            {
                found.insert(r.clone());
            }
        }
        found.iter().map(to_ref).collect()
    }

    /// LoadBalancers that deal with `svc`: the one that realises it when it is of capi-lb's class,
    /// and those bound to it (its name in their `service` annotation) whatever it has become, since
    /// a Service that names another LoadBalancer, leaves the class or is deleted must be let go of.
    pub fn bound_to_service(&self, svc: &Service) -> Vec<Ref> {
        let Some(namespace) = svc.namespace() else {
            return Vec::new();
        };
        let name = svc.name_any();
        let realising = class::realised_by(svc).filter(|_| class::is_ours(svc));
        let mut keys: Vec<Key> = self
            .read()
            .in_namespace(&namespace)
            .filter(|(r, s)| {
                s.service.as_deref() == Some(name.as_str())
                    && realising.as_deref() != Some(r.1.as_str())
            })
            .map(|(r, _)| r.clone())
            .collect();
        keys.sort();
        let mut refs: Vec<Ref> = keys.iter().map(to_ref).collect();
        if let Some(lb) = realising {
            refs.push(lb_ref(&namespace, &lb));
        }
        refs
    }

    /// The LoadBalancers that name the Service an EndpointSlice (labelled with its Service)
    /// belongs to: their authors may name one Service in several (a LoadBalancer waiting to take it
    /// over), and only the one the Service names is bound, which each reconcile tells.
    pub fn bound_to_slice(&self, slice: &EndpointSlice) -> Vec<Ref> {
        let service = slice.labels().get(LABEL_SERVICE_NAME);
        let index = self.read();
        let mut keys: Vec<Key> = (index.in_namespace(&slice.namespace().unwrap_or_default()))
            .filter(|(_, s)| service.is_some() && s.service.as_ref() == service)
            .map(|(r, _)| r.clone())
            .collect();
        keys.sort();
        keys.iter().map(to_ref).collect()
    }

    /// LoadBalancers whose `spec.clusterName` is `cluster`.
    pub fn of_cluster(&self, cluster: &Cluster) -> Vec<Ref> {
        let Some(namespace) = cluster.namespace() else {
            return Vec::new();
        };
        let name = cluster.name_any();
        let mut keys: Vec<Key> = self
            .read()
            .in_namespace(&namespace)
            .filter(|(_, s)| s.cluster.as_deref() == Some(name.as_str()))
            .map(|(r, _)| r.clone())
            .collect();
        keys.sort();
        keys.iter().map(to_ref).collect()
    }

    /// LoadBalancers that deal with `endpoint` (an ExternalDNS `DNSEndpoint`): its owner (ExternalDNS
    /// processed it, or it was changed or deleted by someone else), a LoadBalancer with `spec.dns`
    /// of the same name (a foreign DNSEndpoint in its way is gone or changed), and those publishing
    /// one of its DNS names (a name another LoadBalancer held may have been released).
    pub fn of_dns_endpoint(&self, endpoint: &DNSEndpoint) -> Vec<Ref> {
        let Some(namespace) = endpoint.namespace() else {
            return Vec::new();
        };
        let object = (namespace.clone(), endpoint.name_any());
        let names: BTreeSet<String> = endpoint
            .spec
            .endpoints
            .iter()
            .map(|r| r.dns_name.trim_end_matches('.').to_lowercase())
            .collect();
        // With the names it had before: one it dropped was released.
        let released = {
            let mut seen = self
                .dns_names
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            let before = if endpoint.meta().deletion_timestamp.is_some() {
                seen.remove(&object)
            } else {
                seen.insert(object.clone(), names.clone())
            };
            before.unwrap_or_default()
        };
        let index = self.read();
        let mut keys: BTreeSet<Key> = endpoint
            .owner_references()
            .iter()
            .filter(|o| o.kind == LoadBalancer::kind(&()) && o.controller == Some(true))
            .map(|o| (namespace.clone(), o.name.clone()))
            .collect();
        if index.summaries.get(&object).is_some_and(|s| s.dns) {
            keys.insert(object);
        }
        for name in names.iter().chain(&released) {
            if let Some(refs) = index.by_hostname.get(name) {
                keys.extend(refs.iter().cloned());
            }
        }
        keys.iter().map(to_ref).collect()
    }
}

/// The LoadBalancer a slice capi-lb publishes belongs to (its name label).
pub fn published_slice(meta: &ObjectMeta) -> Option<Ref> {
    let namespace = meta.namespace.as_ref()?;
    let lb = meta.labels.as_ref()?.get(LABEL_LB_NAME)?;
    Some(lb_ref(namespace, lb))
}

/// The LoadBalancer that controls an object (its controller owner reference), as `owns` would
/// map it.
pub fn owner(meta: &ObjectMeta) -> Option<Ref> {
    let namespace = meta.namespace.as_ref()?;
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| {
            r.controller == Some(true)
                && r.kind == "LoadBalancer"
                && r.api_version.starts_with(capi_lb_api::constants::GROUP)
        })
        .map(|r| lb_ref(namespace, &r.name))
}

/// The LoadBalancer an object a provider created through the Kubernetes API belongs to (the name
/// annotation that goes with the UID label, see [`tags`]).
pub fn by_tags(meta: &ObjectMeta) -> Option<Ref> {
    let namespace = meta.namespace.as_ref()?;
    let annotations: &BTreeMap<String, String> = meta.annotations.as_ref()?;
    Some(lb_ref(namespace, annotations.get(tags::NAME)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_lb_api::target::TargetKeys;
    use serde_json::json;

    fn lb(namespace: &str, name: &str, spec: serde_json::Value) -> LoadBalancer {
        let mut spec = spec;
        spec.as_object_mut().unwrap().entry("infrastructureRef").or_insert(json!({
            "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "InMemoryLoadBalancer", "name": name
        }));
        serde_json::from_value(json!({
            "apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec,
        }))
        .unwrap()
    }

    fn machine(namespace: &str, name: &str, labels: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
        }))
        .unwrap()
    }

    fn names(refs: Vec<Ref>) -> Vec<String> {
        refs.into_iter()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
            .collect()
    }

    fn selector(labels: serde_json::Value) -> serde_json::Value {
        json!({"selector": {"matchLabels": labels}})
    }

    #[test]
    fn machines_map_to_the_load_balancers_selecting_them() {
        let cp = lb("a", "cp", selector(json!({"role": "cp"})));
        let workers = lb(
            "a",
            "workers",
            json!({"selector": {"matchExpressions": [
            {"key": "role", "operator": "In", "values": ["worker", "infra"]}]}}),
        );
        let any = lb(
            "a",
            "any",
            json!({"selector": {"matchExpressions": [
            {"key": "role", "operator": "Exists"}]}}),
        );
        let elsewhere = lb("b", "cp", selector(json!({"role": "cp"})));
        let services = lb(
            "a",
            "svc",
            json!({
            "targetKind": {"apiGroup": "", "kind": "Service"}, "selector": {"matchLabels": {"role": "cp"}}}),
        );
        let t = Triggers::of([&cp, &workers, &any, &elsewhere, &services]);
        assert_eq!(
            names(t.selecting(&machine("a", "m", json!({"role": "cp"})))),
            ["a/any", "a/cp"]
        );
        assert_eq!(
            names(t.selecting(&machine("a", "m", json!({"role": "infra"})))),
            ["a/any", "a/workers"]
        );
        assert_eq!(
            names(t.selecting(&machine("a", "m", json!({})))),
            Vec::<String>::new()
        );
        assert_eq!(
            names(t.selecting(&machine("b", "m", json!({"role": "cp"})))),
            ["b/cp"]
        );
        // A selector change moves the LoadBalancer in the index; a deletion removes it.
        t.apply(&lb("a", "cp", selector(json!({"role": "gone"}))));
        t.delete(&any);
        assert_eq!(
            names(t.selecting(&machine("a", "m", json!({"role": "cp"})))),
            Vec::<String>::new()
        );
    }

    #[test]
    fn machines_carrying_a_load_balancers_annotations_map_to_it() {
        let cp = lb("a", "cp", selector(json!({"role": "cp"})));
        let t = Triggers::of([&cp]);
        for key in TargetKeys::new("a", "cp").all() {
            let mut m = machine("a", "m", json!({"role": "other"}));
            m.metadata.annotations = Some([(key.to_string(), "x".to_string())].into());
            assert_eq!(names(t.selecting(&m)), ["a/cp"], "{key}");
        }
        // Another namespace's LoadBalancer of the same name has other keys.
        let mut m = machine("a", "m", json!({}));
        m.metadata.annotations =
            Some([(TargetKeys::new("b", "cp").state.clone(), "x".to_string())].into());
        assert!(t.selecting(&m).is_empty());
    }

    #[test]
    fn infrastructure_objects_map_to_the_load_balancers_referencing_them() {
        let t = Triggers::of([&lb("a", "cp", json!({})), &lb("b", "cp", json!({}))]);
        let ar = ApiResource {
            group: "infrastructure.cluster.x-k8s.io".into(),
            version: "v1alpha1".into(),
            api_version: "infrastructure.cluster.x-k8s.io/v1alpha1".into(),
            kind: "InMemoryLoadBalancer".into(),
            plural: "inmemoryloadbalancers".into(),
        };
        let obj = |ns: &str, name: &str| DynamicObject::new(name, &ar).within(ns);
        assert_eq!(names(t.referencing(&ar, &obj("a", "cp"))), ["a/cp"]);
        assert!(t.referencing(&ar, &obj("a", "other")).is_empty());
        let other_kind = ApiResource {
            kind: "KubeDCLoadBalancer".into(),
            ..ar.clone()
        };
        assert!(t.referencing(&other_kind, &obj("a", "cp")).is_empty());
    }

    #[test]
    fn clusters_services_and_slices_map_to_their_load_balancers() {
        let mut bound = lb("a", "cp", json!({"clusterName": "c1"}));
        bound.metadata.annotations =
            Some([(class::ANNOTATION_SERVICE.to_string(), "web".to_string())].into());
        let t = Triggers::of([&bound, &lb("a", "other", json!({"clusterName": "c2"}))]);
        let cluster: Cluster = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": "a"}, "spec": {}}))
        .unwrap();
        assert_eq!(names(t.of_cluster(&cluster)), ["a/cp"]);
        // The bound Service, whatever it has become, and the LoadBalancer a class Service names.
        let service = |annotations: serde_json::Value, class: Option<&str>| -> Service {
            serde_json::from_value(json!({
                "metadata": {"name": "web", "namespace": "a", "annotations": annotations},
                "spec": {"type": "LoadBalancer", "loadBalancerClass": class}}))
            .unwrap()
        };
        assert_eq!(
            names(t.bound_to_service(&service(json!({}), None))),
            ["a/cp"]
        );
        let moved = service(
            json!({class::ANNOTATION_SERVICE_LOAD_BALANCER_REF: "other"}),
            Some(class::LOAD_BALANCER_CLASS),
        );
        assert_eq!(names(t.bound_to_service(&moved)), ["a/cp", "a/other"]);
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "web-x", "namespace": "a", "labels": {LABEL_SERVICE_NAME: "web"}},
            "addressType": "IPv4", "endpoints": []}))
        .unwrap();
        assert_eq!(names(t.bound_to_slice(&slice)), ["a/cp"]);
    }

    #[test]
    fn a_relist_replaces_the_index_once_complete() {
        let t = Triggers::of([&lb("a", "old", json!({"clusterName": "c"}))]);
        let cluster: Cluster = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c", "namespace": "a"}, "spec": {}}))
        .unwrap();
        t.event(&watcher::Event::Init);
        t.event(&watcher::Event::InitApply(DeserializeGuard(Ok(lb(
            "a",
            "new",
            json!({"clusterName": "c"}),
        )))));
        // Until the relist is done, the old index answers.
        assert_eq!(names(t.of_cluster(&cluster)), ["a/old"]);
        t.event(&watcher::Event::InitDone);
        assert_eq!(names(t.of_cluster(&cluster)), ["a/new"]);
    }

    #[test]
    fn an_object_that_does_not_deserialize_maps_nothing_and_stops_nothing() {
        let t = Triggers::of([&lb("a", "cp", json!({"clusterName": "c"}))]);
        let cluster: Cluster = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c", "namespace": "a"}, "spec": {}}))
        .unwrap();
        assert_eq!(names(t.of_cluster(&cluster)), ["a/cp"]);
        // The same LoadBalancer rewritten with a protocol this version does not know.
        let mut json = serde_json::to_value(lb("a", "cp", json!({"clusterName": "c"}))).unwrap();
        json["spec"]["ports"] = json!([{"name": "x", "port": 1, "protocol": "QUIC"}]);
        let invalid: Watched = serde_json::from_value(json).unwrap();
        assert!(invalid.0.is_err());
        t.event(&watcher::Event::Apply(invalid.clone()));
        assert!(t.of_cluster(&cluster).is_empty());
        // A relist that meets it skips it and keeps the others.
        t.event(&watcher::Event::Init);
        t.event(&watcher::Event::InitApply(invalid));
        t.event(&watcher::Event::InitApply(DeserializeGuard(Ok(lb(
            "a",
            "other",
            json!({"clusterName": "c"}),
        )))));
        t.event(&watcher::Event::InitDone);
        assert_eq!(names(t.of_cluster(&cluster)), ["a/other"]);
    }

    #[test]
    fn dns_endpoints_map_to_their_owner_the_same_name_and_who_publishes_their_names() {
        let dns = |names: serde_json::Value| json!({"dns": {"hostnames": names}});
        let first = lb("a", "first", dns(json!(["api.example.com"])));
        let second = lb(
            "b",
            "second",
            dns(json!(["API.example.com.", "x.example.com"])),
        );
        let hand = lb("a", "hand", dns(json!(["hand.example.com"])));
        let plain = lb("a", "plain", json!({}));
        let t = Triggers::of([&first, &second, &hand, &plain]);
        let endpoint = |name: &str, owner: Option<&str>, dns_name: &str| -> DNSEndpoint {
            let owners = owner.map(|o| {
                json!([{"apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1",
                        "kind": "LoadBalancer", "name": o, "uid": "u", "controller": true}])
            });
            serde_json::from_value(json!({
                "apiVersion": "externaldns.k8s.io/v1alpha1", "kind": "DNSEndpoint",
                "metadata": {"name": name, "namespace": "a", "ownerReferences": owners},
                "spec": {"endpoints": [{"dnsName": dns_name, "recordType": "A", "targets": ["192.0.2.1"]}]}}))
            .unwrap()
        };
        // The first LoadBalancer's: itself and the one waiting for the same name elsewhere.
        assert_eq!(
            names(t.of_dns_endpoint(&endpoint("first", Some("first"), "api.example.com."))),
            ["a/first", "b/second"]
        );
        // A foreign one in the way of a LoadBalancer of that name.
        assert_eq!(
            names(t.of_dns_endpoint(&endpoint("hand", None, "other.example.com"))),
            ["a/hand"]
        );
        // Same name as a LoadBalancer without spec.dns, unrelated names: nothing.
        assert!(
            t.of_dns_endpoint(&endpoint("plain", None, "y.example.com"))
                .is_empty()
        );
        // A LoadBalancer that stops publishing a name no longer maps from it.
        t.apply(&lb("b", "second", dns(json!(["x.example.com"]))));
        assert_eq!(
            names(t.of_dns_endpoint(&endpoint("z", None, "api.example.com"))),
            ["a/first"]
        );
        // A DNSEndpoint that drops a name: who wants it hears of it.
        assert_eq!(
            names(t.of_dns_endpoint(&endpoint("z", None, "other.example.com"))),
            ["a/first"]
        );
        assert!(
            t.of_dns_endpoint(&endpoint("z", None, "other.example.com"))
                .is_empty()
        );
    }
}
