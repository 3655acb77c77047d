//! The rollout's objects: the load balancer's provider, the Cluster with its load balancer, and
//! each Machine with its BenchMachine.

use std::net::{IpAddr, SocketAddr};

use capi_lb_api::constants::ANNOTATION_LOAD_BALANCER_REF;
use kube::api::{Api, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::{BOOTSTRAP_SECRET, FINALIZER, NAME, Options};
use crate::capi::provider;

/// The load balancer's provider and where its clients find it.
#[derive(Clone, Debug)]
pub enum Provider {
    /// The Service provider on this `loadBalancerClass` (MetalLB's), forwarded by kube-proxy; the
    /// clients resolve the `-ext` name through the cluster's DNS server once.
    Service {
        /// The class.
        class: String,
    },
    /// The DNS provider: a name in `zone` whose records are the active targets, published
    /// through ExternalDNS to the authoritative `server` (BIND on the harness), which the clients
    /// ask at every new connection.
    Dns {
        /// The zone.
        zone: String,
        /// Its authoritative server.
        server: SocketAddr,
    },
}

impl Provider {
    /// The name `capi-lb run --providers` knows it by.
    pub fn name(&self) -> &'static str {
        match self {
            Provider::Service { .. } => "service",
            Provider::Dns { .. } => "dns",
        }
    }

    /// Its infrastructure kind.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Provider::Service { .. } => "ServiceLoadBalancer",
            Provider::Dns { .. } => "DNSLoadBalancer",
        }
    }
}

/// TTL of the DNS provider's records.
pub(super) const DNS_TTL: i64 = 5;

/// The objects of the Cluster and its load balancer (before any Machine); `host` is the DNS
/// provider's name.
pub(super) fn cluster_documents(options: &Options, host: &str) -> Vec<Value> {
    let infra = match &options.provider {
        Provider::Service { class } => json!({"loadBalancerClass": class,
                                              "allocateLoadBalancerNodePorts": false}),
        Provider::Dns { .. } => json!({"hostname": host, "ttlSeconds": DNS_TTL}),
    };
    let kind = options.provider.kind();
    vec![
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": BOOTSTRAP_SECRET},
               "stringData": {"value": "#!/bin/sh\n# capi-lb-bench rollout: no bootstrap runs\n"}}),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
               "metadata": {"name": NAME, "annotations": {ANNOTATION_LOAD_BALANCER_REF: NAME}},
               "spec": {"infrastructureRef": {"apiGroup": provider::GROUP,
                                              "kind": provider::CLUSTER_KIND, "name": NAME}}}),
        provider::object(provider::CLUSTER_KIND, NAME, json!({})),
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
               "kind": kind, "metadata": {"name": NAME}, "spec": infra}),
        json!({"apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer",
               "metadata": {"name": NAME},
               "spec": {"clusterName": NAME, "controlPlane": {},
                        "drainSeconds": options.drain_seconds,
                        "targetHealth": options.target_health,
                        "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                              "kind": kind, "name": NAME}}}),
    ]
}

/// Machine `name` and its BenchMachine (with the benchmark's finalizer and `address`).
pub(super) fn machine_documents(name: &str, address: IpAddr) -> Vec<Value> {
    let mut bench = provider::object(
        provider::MACHINE_KIND,
        name,
        json!({provider::ADDRESS_ANNOTATION: address.to_string()}),
    );
    bench["metadata"]["finalizers"] = json!([FINALIZER]);
    vec![
        bench,
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
               "metadata": {"name": name, "labels": {
                   "cluster.x-k8s.io/cluster-name": NAME,
                   "cluster.x-k8s.io/control-plane": ""}},
               "spec": {"clusterName": NAME,
                        "bootstrap": {"dataSecretName": BOOTSTRAP_SECRET},
                        "infrastructureRef": {"apiGroup": provider::GROUP,
                                              "kind": provider::MACHINE_KIND, "name": name}}}),
    ]
}

/// Take every finalizer off the run's objects (Cluster API's, capi-lb's, the bench provider's),
/// whose controllers no longer run: the namespace would otherwise stay terminating, and the
/// namespace controller's retries cost the shared apiserver CPU (90 such namespaces held it at
/// half a core, 2026-11-29). Nothing outside the apiserver is left behind: the API servers are
/// stopped with the run, and the providers' objects are owned by the LoadBalancer's.
pub(super) async fn release_finalizers(client: &Client, ns: &str) {
    let gvk = |g: &str, v: &str, k: &str| ApiResource::from_gvk(&GroupVersionKind::gvk(g, v, k));
    let mut resources = vec![
        gvk("cluster.x-k8s.io", "v1beta2", "Machine"),
        gvk("cluster.x-k8s.io", "v1beta2", "Cluster"),
        provider::resource(provider::MACHINE_KIND),
        provider::resource(provider::CLUSTER_KIND),
        ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&()),
    ];
    resources.extend(capi_lb_api::kinds::all().iter().map(|k| (k.resource)()));
    let none = json!({"metadata": {"finalizers": null}});
    for resource in &resources {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, resource);
        let Ok(list) = api.list_metadata(&Default::default()).await else {
            continue;
        };
        for object in list.items.iter().filter(|o| !o.finalizers().is_empty()) {
            let _ = api
                .patch(
                    &object.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&none),
                )
                .await;
        }
    }
}
