//! A stand-in for an implementation of Services of `type: LoadBalancer` (what MetalLB's controller
//! does, seen on the real one in the e2e tests): for the Services of its class (or without a class
//! when it has none) it writes an address from its pool into `status.loadBalancer.ingress`, the one
//! `spec.loadBalancerIP` asks for when that is in the pool, and frees the address of a deleted
//! Service. When it cannot serve a Service it records a Warning Event `AllocationFailed` on it, as
//! MetalLB does.
// Test support: panicking on a broken fixture is the right failure mode here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use capi_lb::sim::world::World;
use capi_lb_providers::clock::Clock;
use k8s_openapi::api::core::v1::{Event, Service};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::NS;

/// The simulated implementation.
#[derive(Clone, Debug)]
pub struct ServiceLbSim {
    /// The class it serves (`None`: Services without a class).
    pub class: Option<String>,
    /// The addresses it hands out, in order.
    pub pool: Vec<String>,
    /// Address -> the UID of the Service that has it.
    assigned: BTreeMap<String, String>,
}

impl ServiceLbSim {
    /// An implementation of `class` with addresses `pool`.
    pub fn new(class: Option<&str>, pool: &[&str]) -> Self {
        Self {
            class: class.map(str::to_string),
            pool: pool.iter().map(|s| s.to_string()).collect(),
            assigned: BTreeMap::new(),
        }
    }

    /// One pass over the Services of the test namespace.
    pub async fn step(&mut self, world: &World) {
        let services: Api<Service> = Api::namespaced(world.client(), NS);
        let listed = services.list(&ListParams::default()).await.unwrap().items;
        let live: Vec<String> = listed.iter().filter_map(|s| s.uid()).collect();
        self.assigned.retain(|_, uid| live.contains(uid));
        for service in listed {
            let spec = service.spec.clone().unwrap_or_default();
            if spec.type_.as_deref() != Some("LoadBalancer")
                || spec.load_balancer_class != self.class
                || service.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            let uid = service.uid().unwrap();
            let has = self
                .assigned
                .iter()
                .find(|(_, u)| **u == uid)
                .map(|(a, _)| a.clone());
            let wanted = spec.load_balancer_ip.clone();
            let address = match (has, wanted) {
                (Some(a), None) => Some(a),
                (Some(a), Some(w)) if a == w => Some(a),
                (_, Some(w)) => {
                    (self.pool.contains(&w) && !self.assigned.contains_key(&w)).then_some(w)
                }
                (None, None) => self
                    .pool
                    .iter()
                    .find(|a| !self.assigned.contains_key(*a))
                    .cloned(),
            };
            let Some(address) = address else {
                self.warn(world, &service).await;
                continue;
            };
            self.assigned.retain(|_, u| *u != uid);
            self.assigned.insert(address.clone(), uid);
            let ingress = json!([{"ip": address}]);
            let current = serde_json::to_value(&service.status).unwrap();
            if current.pointer("/loadBalancer/ingress") != Some(&ingress) {
                services
                    .patch_status(
                        &service.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&json!({"status": {"loadBalancer": {"ingress": ingress}}})),
                    )
                    .await
                    .unwrap();
            }
        }
    }

    /// Record MetalLB's Warning on a Service it cannot serve.
    async fn warn(&self, world: &World, service: &Service) {
        let events: Api<Event> = Api::namespaced(world.client(), NS);
        let event: Event = serde_json::from_value(json!({
            "metadata": {"name": format!("{}.alloc-{}", service.name_any(), self.assigned.len()), "namespace": NS},
            "involvedObject": {"kind": "Service", "namespace": NS, "name": service.name_any(), "uid": service.uid()},
            "type": "Warning",
            "reason": "AllocationFailed",
            "message": format!("Failed to allocate IP for \"{NS}/{}\": no available IPs", service.name_any()),
            "source": {"component": "metallb-controller"},
            "lastTimestamp": world.clock.now().to_string(),
        }))
        .unwrap();
        let _ = events.create(&PostParams::default(), &event).await;
    }
}
