//! A simulator of kube-dc's controller, for tests: kube-dc's controller is not public, so this
//! follows its documented behaviour (FACTS section 2, kube-dc's public CRDs and PRD):
//!
//! - an `EIp` gets `status.ipAddress` from its network's pool and `status.ready: true`, after an
//!   optional delay; a `public` EIp beyond the project's quota stays not ready with a `Ready=False`
//!   condition saying the quota is exhausted; a recreated EIp gets a new address;
//! - a Service of `type: LoadBalancer` bound to an EIp (`service.nlb.kube-dc.com/bind-on-eip`, or
//!   `bind-on-default-gw-eip` for the project's `default-gw`) gets the EIp's address in
//!   `status.loadBalancer.ingress` once the EIp is ready, and its OVN load balancer rows
//!   (`<eip>:<port>` -> backends) are programmed from the Service's v1 **Endpoints** (not slices),
//!   matched to the Service's ports by port name.
//!
//! It writes only what kube-dc's real EIp CRD accepts (`status.ovnEIpRef` is required whenever a
//! status is written), so the same simulator runs against a real apiserver in the e2e tests.
//!
//! Each [`KubeDcSim::step`] does one round of that, like one pass of kube-dc's controller.
// Test support: panicking on a broken fixture is the right failure mode here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::Duration;

use capi_lb::sim::world::World;
use capi_lb_api::kubedc::EIp;
use capi_lb_providers::clock::Clock;
use k8s_openapi::api::core::v1::{Endpoints, Service};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::NS;

/// The OVN external IP kube-dc's controller creates for an EIp (what `status.ovnEIpRef` names).
fn ovn_eip_ref(namespace: &str, name: &str) -> String {
    format!("{namespace}-{name}")
}

/// The simulated kube-dc controller.
#[derive(Clone, Debug, Default)]
pub struct KubeDcSim {
    /// How long an EIp takes to become ready.
    pub eip_delay: Duration,
    /// How many `public` EIps the project may have (None: no limit).
    pub public_quota: Option<usize>,
    /// When false, Services are not programmed (no ingress written): kube-dc lagging behind.
    pub program_services: bool,
    /// Addresses handed out so far, by EIp UID (a recreated EIp gets a new one).
    allocated: BTreeMap<String, String>,
    next: u32,
    /// OVN load balancer rows: `<eip-ip>:<port>` -> sorted backends `<ip>:<port>`.
    pub rows: BTreeMap<String, Vec<String>>,
}

impl KubeDcSim {
    /// A simulator that programs Services and has no delay or quota.
    pub fn new() -> Self {
        Self {
            program_services: true,
            ..Self::default()
        }
    }

    fn allocate(&mut self, network: &str) -> String {
        self.next += 1;
        match network {
            "public" => format!("91.224.11.{}", self.next),
            _ => format!("100.65.0.{}", self.next),
        }
    }

    /// One pass of kube-dc's controller over the test namespace of `world`.
    pub async fn step(&mut self, world: &World) {
        self.step_with(&world.client(), NS, world.clock.now()).await;
    }

    /// One pass over `namespace` through `client` (a real cluster in the e2e tests), at `now`.
    pub async fn step_with(
        &mut self,
        client: &kube::Client,
        namespace: &str,
        now: jiff::Timestamp,
    ) {
        let eips: Api<EIp> = Api::namespaced(client.clone(), namespace);
        let all = eips.list(&ListParams::default()).await.unwrap().items;
        let mut public_ready = all
            .iter()
            .filter(|e| e.spec.external_network_type.as_deref() == Some("public"))
            .filter(|e| e.status.as_ref().is_some_and(|s| s.ready))
            .count();
        for eip in &all {
            if eip.status.as_ref().is_some_and(|s| s.ready)
                || eip.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            let network = eip
                .spec
                .external_network_type
                .clone()
                .unwrap_or_else(|| "cloud".into());
            let uid = eip.uid().unwrap();
            if network == "public" && self.public_quota.is_some_and(|q| public_ready >= q) {
                // kube-dc's CRD requires status.ovnEIpRef whenever a status is written; nothing
                // is allocated in OVN yet.
                let status = json!({"status": {"ready": false, "ovnEIpRef": "", "conditions": [{
                    "type": "Ready", "status": "False", "reason": "QuotaExceeded",
                    "lastTransitionTime": now.to_string(),
                    "message": format!("public IP quota exceeded ({public_ready} of {} in use)", self.public_quota.unwrap_or(0)),
                }]}});
                eips.patch_status(
                    &eip.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&status),
                )
                .await
                .map_or_else(deleted_since_listed, drop);
                continue;
            }
            let created = eip
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0)
                .unwrap_or(now);
            if now.duration_since(created) < jiff::SignedDuration::try_from(self.eip_delay).unwrap()
            {
                continue;
            }
            let ip = match self.allocated.get(&uid) {
                Some(ip) => ip.clone(),
                None => {
                    let ip = self.allocate(&network);
                    self.allocated.insert(uid, ip.clone());
                    ip
                }
            };
            if network == "public" {
                public_ready += 1;
            }
            let status = json!({"status": {"ready": true, "ipAddress": ip,
                "ovnEIpRef": ovn_eip_ref(namespace, &eip.name_any()), "conditions": [
                {"type": "Ready", "status": "True", "reason": "Allocated",
                 "message": format!("allocated {ip}"), "lastTransitionTime": now.to_string()}]}});
            eips.patch_status(
                &eip.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&status),
            )
            .await
            .map_or_else(deleted_since_listed, drop);
        }
        if !self.program_services {
            return;
        }
        let eips_now: BTreeMap<String, EIp> = eips
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|e| (e.name_any(), e))
            .collect();
        let services: Api<Service> = Api::namespaced(client.clone(), namespace);
        let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), namespace);
        self.rows.clear();
        for service in services.list(&ListParams::default()).await.unwrap().items {
            let a = service.annotations();
            let bound = match (
                a.get("service.nlb.kube-dc.com/bind-on-eip"),
                a.get("service.nlb.kube-dc.com/bind-on-default-gw-eip"),
            ) {
                (Some(eip), _) => eip.clone(),
                (None, Some(v)) if v == "true" => "default-gw".to_string(),
                _ => continue,
            };
            let Some(ip) = eips_now
                .get(&bound)
                .and_then(|e| e.status.as_ref())
                .filter(|s| s.ready)
                .and_then(|s| s.ip_address.clone())
            else {
                continue;
            };
            let ingress: Value = json!([{"ip": ip}]);
            let current = serde_json::to_value(&service.status).unwrap();
            if current.pointer("/loadBalancer/ingress") != Some(&ingress) {
                services
                    .patch_status(
                        &service.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&json!({"status": {"loadBalancer": {"ingress": ingress}}})),
                    )
                    .await
                    .map_or_else(deleted_since_listed, drop);
            }
            // OVN rows from the v1 Endpoints, by port name.
            let backends = endpoints.get_opt(&service.name_any()).await.unwrap();
            for port in service.spec.iter().flat_map(|s| s.ports.iter().flatten()) {
                let mut row: Vec<String> = backends
                    .iter()
                    .flat_map(|e| e.subsets.iter().flatten())
                    .flat_map(|subset| {
                        let target = subset
                            .ports
                            .iter()
                            .flatten()
                            .find(|p| p.name == port.name)
                            .map(|p| p.port);
                        subset
                            .addresses
                            .iter()
                            .flatten()
                            .filter_map(move |a| target.map(|t| format!("{}:{t}", a.ip)))
                    })
                    .collect();
                row.sort();
                self.rows.insert(format!("{ip}:{}", port.port), row);
            }
        }
    }
}

/// A [`KubeDcSim`] running in the background against a real cluster ([`KubeDcSim::spawn`]).
#[derive(Debug)]
pub struct RunningSim {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl KubeDcSim {
    /// Run a pass over `namespace` through `client` (with the admin's rights, as kube-dc's controller
    /// has its own) every 300 ms, at the wall clock, until [`RunningSim::stop`].
    pub fn spawn(mut self, client: kube::Client, namespace: String) -> RunningSim {
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            loop {
                self.step_with(&client, &namespace, jiff::Timestamp::now())
                    .await;
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = tokio::time::sleep(Duration::from_millis(300)) => {}
                }
            }
        });
        RunningSim { stop, task }
    }
}

impl RunningSim {
    /// Stop after the pass under way (a pass that panicked fails here).
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap();
    }
}

/// A status write to an object deleted since the pass listed it (capi-lb deletes its Service and EIp
/// while the simulator runs) is a 404, as kube-dc's controller would get: the object is gone, nothing
/// to do. Any other error fails the test.
fn deleted_since_listed(e: kube::Error) {
    assert!(
        matches!(&e, kube::Error::Api(s) if s.code == 404),
        "kube-dc simulator: {e}"
    );
}
