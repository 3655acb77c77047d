//! Test support for capi-lb's integration tests: fixture builders for the objects a test world
//! holds, and small accessors for the objects the controller produces.
// Test support: panicking on a broken fixture is the right failure mode here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::PathBuf;

use capi_lb::sim::world::World;
use capi_lb_api::InMemoryLoadBalancer;
use capi_lb_api::LoadBalancer;
use capi_lb_api::constants::{ANNOTATION_DELETE_FOR_MOVE, ANNOTATION_OWNERSHIP};
use capi_lb_providers::provider::tags;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::core::NamespaceResourceScope;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

pub mod capi_move;
pub mod fresh;
pub mod hostile;
pub mod imports;
pub mod k8s;
pub mod kubedc_sim;
pub mod kubedc_webhook;
pub mod legacy;
pub mod octavia;
pub mod promql;
pub mod servicelb_sim;
pub mod templates;
pub mod tenant;

/// Namespace every fixture lives in.
pub const NS: &str = "default";

/// The file or directory at `path`, relative to the root of the repository.
pub fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path)
}

/// A world (the in-memory Kubernetes API and cloud, the real reconcilers) holding `objects`.
pub async fn world(objects: Vec<Value>) -> World {
    World::new(objects).await.unwrap()
}

/// Reconcile every LoadBalancer until nothing changes (at most 200 passes; see
/// [`World::run_until_stable`]). Services are not reconciled.
pub async fn settle(world: &World) {
    world.run_until_stable(200).await.unwrap();
}

/// Merge `patch` into the object `name` of kind `K`.
pub async fn merge_patch<K>(world: &World, name: &str, patch: Value)
where
    K: kube::Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug,
{
    Api::<K>::namespaced(world.client(), NS)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// Delete the object `name` of kind `K` (it goes once its finalizers are gone).
pub async fn delete<K>(world: &World, name: &str)
where
    K: kube::Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug,
{
    Api::<K>::namespaced(world.client(), NS)
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

/// Move `objects` (kind and name, owners first) within `world` the way `clusterctl move` does
/// between two clusters: in the source each is annotated `clusterctl.cluster.x-k8s.io/delete-for-move`,
/// loses its finalizers and is deleted (owned objects first); in the target it is created again,
/// owners first, with a new UID, its labels, annotations and spec, no status, and owner references
/// remapped to the new owners' UIDs. With `keep_ownership` false to drop capi-lb's ownership annotation from the copies (the
/// control: what happens without it). Returns old UID -> new UID.
pub async fn clusterctl_move(
    world: &World,
    objects: &[(ApiResource, &str)],
    keep_ownership: bool,
) -> BTreeMap<String, String> {
    let api = |r: &ApiResource| Api::<DynamicObject>::namespaced_with(world.client(), NS, r);
    let mut copies = Vec::new();
    for (resource, name) in objects {
        copies.push((resource.clone(), api(resource).get(name).await.unwrap()));
    }
    // Source: annotate, drop finalizers, delete (owned objects first, as clusterctl does).
    for (resource, object) in copies.iter().rev() {
        let name = object.name_any();
        let api = api(resource);
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {ANNOTATION_DELETE_FOR_MOVE: ""}}})),
        )
        .await
        .unwrap();
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
        api.delete(&name, &DeleteParams::default()).await.unwrap();
    }
    // Target: created again, owners first, with new UIDs and without status.
    let mut uids = BTreeMap::new();
    for (resource, object) in copies {
        let mut copy = DynamicObject::new(&object.name_any(), &resource).within(NS);
        copy.metadata.labels = object.metadata.labels.clone();
        let mut annotations = object.metadata.annotations.clone().unwrap_or_default();
        if !keep_ownership {
            annotations.remove(ANNOTATION_OWNERSHIP);
        }
        copy.metadata.annotations = Some(annotations);
        copy.metadata.owner_references = object.metadata.owner_references.clone().map(|refs| {
            refs.into_iter()
                .map(|mut r| {
                    if let Some(new) = uids.get(&r.uid) {
                        r.uid = String::clone(new);
                    }
                    r
                })
                .collect()
        });
        copy.data = json!({"spec": object.data["spec"].clone()});
        let created = api(&resource)
            .create(&PostParams::default(), &copy)
            .await
            .unwrap();
        assert_ne!(created.uid(), object.uid());
        uids.insert(object.uid().unwrap(), created.uid().unwrap());
    }
    uids
}

/// A LoadBalancer fixture.
#[derive(Clone, Debug)]
pub struct LbFixture(Value);

/// A LoadBalancer named `name` using the InMemoryLoadBalancer of the same name, for cluster `demo`.
pub fn lb(name: &str) -> LbFixture {
    LbFixture(json!({
        "apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1",
        "kind": "LoadBalancer",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "clusterName": "demo",
            "infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "InMemoryLoadBalancer",
                "name": name,
            },
        },
    }))
}

impl LbFixture {
    /// Set a spec field.
    pub fn spec(mut self, key: &str, value: Value) -> Self {
        self.0["spec"][key] = value;
        self
    }

    /// Set an annotation.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.0["metadata"]["annotations"][key] = json!(value);
        self
    }

    /// The object.
    pub fn build(self) -> Value {
        self.0
    }
}

/// An InMemoryLoadBalancer fixture.
#[derive(Clone, Debug)]
pub struct InfraFixture(Value);

/// An InMemoryLoadBalancer named `name` with default settings.
pub fn infra(name: &str) -> InfraFixture {
    InfraFixture(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "InMemoryLoadBalancer",
        "metadata": {"name": name, "namespace": NS},
        "spec": {},
    }))
}

impl InfraFixture {
    /// Set a spec field.
    pub fn spec(mut self, key: &str, value: Value) -> Self {
        self.0["spec"][key] = value;
        self
    }

    /// Inject a failure.
    pub fn failure(mut self, operation: &str, type_: &str, times: u32) -> Self {
        let failure = json!({"operation": operation, "type": type_, "times": times});
        match self.0["spec"]["failures"].as_array_mut() {
            Some(list) => list.push(failure),
            None => self.0["spec"]["failures"] = json!([failure]),
        }
        self
    }

    /// The object.
    pub fn build(self) -> Value {
        self.0
    }
}

/// A LoadBalancer named `name` using the KubeDCLoadBalancer of the same name, for cluster `demo`.
pub fn kubedc_lb(name: &str) -> LbFixture {
    lb(name).spec(
        "infrastructureRef",
        json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KubeDCLoadBalancer", "name": name}),
    )
}

/// A KubeDCLoadBalancer named `name` with `spec`.
pub fn kubedc_infra(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "KubeDCLoadBalancer",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    })
}

/// A LoadBalancer named `name` using the ServiceLoadBalancer of the same name, for cluster `demo`.
pub fn service_lb(name: &str) -> LbFixture {
    lb(name).spec(
        "infrastructureRef",
        json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "ServiceLoadBalancer", "name": name}),
    )
}

/// A ServiceLoadBalancer named `name` with `spec`.
pub fn service_infra(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "ServiceLoadBalancer",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    })
}

/// A LoadBalancer named `name` realised by the DNSLoadBalancer of the same name.
pub fn dns_lb(name: &str) -> LbFixture {
    lb(name).spec(
        "infrastructureRef",
        json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DNSLoadBalancer", "name": name}),
    )
}

/// A DNSLoadBalancer named `name` whose records are published under `hostname`.
pub fn dns_infra(name: &str, hostname: &str, ttl_seconds: i64) -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "DNSLoadBalancer",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"hostname": hostname, "ttlSeconds": ttl_seconds},
    })
}

/// A CAPI Machine fixture.
#[derive(Clone, Debug)]
pub struct MachineFixture(Value);

/// A Machine of cluster `demo`, selected by the LoadBalancer `lb` (default selector), with an
/// InternalIP.
pub fn machine(name: &str, lb: &str, internal_ip: &str) -> MachineFixture {
    MachineFixture(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {
                "cluster.x-k8s.io/cluster-name": "demo",
                "cluster.x-k8s.io/control-plane": "",
                "loadbalancer.cluster.x-k8s.io/name": lb,
            },
        },
        "spec": {"clusterName": "demo"},
        "status": {"addresses": [{"type": "InternalIP", "address": internal_ip}]},
    }))
}

impl MachineFixture {
    /// Replace the addresses.
    pub fn addresses(mut self, addresses: Value) -> Self {
        self.0["status"]["addresses"] = addresses;
        self
    }

    /// The object.
    pub fn build(self) -> Value {
        self.0
    }
}

/// A CAPI Cluster named `name`.
pub fn cluster(name: &str, paused: bool) -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"paused": paused},
    })
}

/// [`cluster`] `name` naming LoadBalancer `lb` in the `loadBalancerRef` annotation: the Cluster's
/// consent to get its endpoint written by that LoadBalancer.
pub fn cluster_naming(name: &str, paused: bool, lb: &str) -> Value {
    let mut cluster = cluster(name, paused);
    cluster["metadata"]["annotations"] =
        json!({capi_lb_api::constants::ANNOTATION_LOAD_BALANCER_REF: lb});
    cluster
}

/// The LoadBalancer `name`.
pub async fn get_lb(world: &World, name: &str) -> LoadBalancer {
    Api::<LoadBalancer>::namespaced(world.client(), NS)
        .get(name)
        .await
        .unwrap()
}

/// The InMemoryLoadBalancer `name`.
pub async fn get_infra(world: &World, name: &str) -> Option<InMemoryLoadBalancer> {
    Api::<InMemoryLoadBalancer>::namespaced(world.client(), NS)
        .get_opt(name)
        .await
        .unwrap()
}

/// A condition of a LoadBalancer (panics when absent).
pub fn condition(lb: &LoadBalancer, type_: &str) -> Condition {
    lb.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
        .cloned()
        .unwrap_or_else(|| panic!("no {type_} condition on {:?}", lb.status))
}

/// `(status, reason)` of a condition.
pub fn cond(lb: &LoadBalancer, type_: &str) -> (String, String) {
    let c = condition(lb, type_);
    (c.status, c.reason)
}

/// Whether the LoadBalancer's `Ready` condition is `True` (panics when it has none).
pub fn is_ready(lb: &LoadBalancer) -> bool {
    cond(lb, "Ready").0 == "True"
}

/// The `uid=<uid>` tag a provider puts on the cloud resources it makes for `lb`.
pub fn uid_tag(lb: &LoadBalancer) -> String {
    format!("{}={}", tags::UID, lb.metadata.uid.clone().unwrap())
}

/// Whether a Warning Event of `reason` was published.
pub fn warned(world: &World, reason: &str) -> bool {
    world
        .ctx
        .events
        .timeline()
        .iter()
        .any(|e| e.warning && e.reason == reason)
}

/// The Service `name`, if any.
pub async fn service(world: &World, name: &str) -> Option<Service> {
    Api::<Service>::namespaced(world.client(), NS)
        .get_opt(name)
        .await
        .unwrap()
}

/// The EndpointSlices of Service `service`, by name, with their endpoint addresses.
pub async fn slices(world: &World, service: &str) -> BTreeMap<String, Vec<String>> {
    Api::<EndpointSlice>::namespaced(world.client(), NS)
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| {
            let addresses = s
                .endpoints
                .iter()
                .flat_map(|e| e.addresses.clone())
                .collect();
            (s.metadata.name.unwrap(), addresses)
        })
        .collect()
}

/// The full EndpointSlice `name`.
pub async fn slice(world: &World, name: &str) -> Option<EndpointSlice> {
    Api::<EndpointSlice>::namespaced(world.client(), NS)
        .get_opt(name)
        .await
        .unwrap()
}

/// Reason of every Event recorded in the world's timeline, and of what a pass merged into one.
pub fn event_reasons(world: &World) -> Vec<String> {
    world
        .ctx
        .events
        .timeline()
        .into_iter()
        .flat_map(|e| {
            // A pass tells everything but its warnings in one Event: `Ready: ... | Reason: ...`.
            let merged: Vec<String> = e
                .message
                .split(" | ")
                .skip(1)
                .filter_map(|part| part.split_once(": ").map(|(r, _)| r.to_string()))
                .collect();
            std::iter::once(e.reason).chain(merged)
        })
        .collect()
}

/// Substitute `${VAR}` and `${VAR:=default}` like clusterctl (envsubst) does, with `values` for the
/// standard ones and the defaults for the rest. Returns the text and the variables seen.
pub fn substitute(
    text: &str,
    values: &BTreeMap<&str, &str>,
) -> (String, Vec<(String, Option<String>)>) {
    let mut out = String::new();
    let mut seen = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = rest[start..]
            .find('}')
            .map(|e| start + e)
            .expect("unclosed ${");
        let inner = &rest[start + 2..end];
        let (name, default) = match inner.split_once(":=") {
            Some((n, d)) => (n.to_string(), Some(d.to_string())),
            None => (inner.to_string(), None),
        };
        let value = values
            .get(name.as_str())
            .map(|v| v.to_string())
            .or_else(|| default.clone())
            .unwrap_or_else(|| panic!("${{{name}}} has no value and no default"));
        out.push_str(&value);
        seen.push((name, default));
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    (out, seen)
}
