//! A simulator of kube-dc's controller, for tests: kube-dc's controller is not public, so this
//! follows its documented behaviour (FACTS section 2, kube-dc's public CRDs and PRDs):
//!
//! - it acts only in the namespaces of a kube-dc Project (label [`PROJECT_LABEL`]); elsewhere a
//!   LoadBalancer Service never gets an address and an EIp is never allocated (nor finalized);
//! - an `EIp` gets the finalizer [`EIP_FINALIZER`] when first seen, then `status.ipAddress` from its
//!   network's pool and `status.ready: true`, after an optional delay; a `public` EIp beyond the
//!   project's quota stays not ready with a `Ready=False` condition; a recreated EIp gets a new
//!   address; `status.ovnEIpRef` has the documented forms (`<ns>-ext-<network>` for `default-gw`,
//!   `eip-slb-<id>` otherwise), which nothing may key on;
//! - a Service of `type: LoadBalancer` bound to an EIp (`service.nlb.kube-dc.com/bind-on-eip`, or
//!   `bind-on-default-gw-eip` for the project's `default-gw`) gets the EIp's address in
//!   `status.loadBalancer.ingress` once the EIp is ready, and its OVN load balancer rows
//!   (`<eip>:<port>` -> backends) are programmed from the Service's v1 **Endpoints** (not slices),
//!   matched to the Service's ports by port name; the binding is recorded in the EIp's
//!   `status.owners` (`{type: ServiceLb, ownerRef: <service>}`, `ownershipType: Shared`), and
//!   removed when the Service goes (`Released`);
//! - deleting an EIp is asynchronous: while a Service still owns it the finalizer stays; otherwise
//!   one pass releases its OVN objects (its address) and a later pass removes the finalizer;
//! - optionally ([`KubeDcSim::publish_ext`]) kube-dc's own `-ext` publisher: for every LoadBalancer
//!   Service a headless `<svc>-ext` Service and v1 Endpoints with its ingress IPs, overwriting
//!   whatever `<svc>-ext` exists, with no opt-out.
//!
//! It writes only what kube-dc's real EIp CRD accepts (`status.ovnEIpRef`, `ownershipType` and
//! `ready` whenever a status is written), so the same simulator runs against a real apiserver in the
//! e2e tests. kube-dc's webhook refusing a change of a Service's network annotation once it has an
//! address is [`crate::kubedc_webhook`]. Not modelled: OVN rows lost after a kube-ovn restart while
//! the status looks fine (see docs/providers/kubedc.md, "Differences from the simulator").
//!
//! Each [`KubeDcSim::step`] does one round of that, like one pass of kube-dc's controller.
// Test support: panicking on a broken fixture is the right failure mode here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use capi_lb::sim::world::World;
use capi_lb_providers::clock::Clock;
use k8s_openapi::api::core::v1::{Endpoints, Namespace, Service};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::NS;

/// kube-dc's `EIp` as kube-dc's own controller (this stand-in) reads and writes it, every field
/// kept. capi-lb's type ([`capi_lb_api::kubedc::EIp`]) drops whatever capi-lb does not read while it
/// parses a (possibly tenant-controlled) answer; the stand-in writes kube-dc's status fields
/// (`ovnEIpRef`, `ownershipType`, `owners`) and the tests read them through this type.
pub mod full {
    use std::collections::BTreeMap;

    use kube::CustomResource;
    use serde::{Deserialize, Serialize};
    use serde_json::Value;

    /// kube-dc's EIp spec, whole.
    #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
    #[kube(
        group = "kube-dc.com",
        version = "v1",
        kind = "EIp",
        plural = "eips",
        namespaced,
        status = "EIpStatus",
        schema = "disabled"
    )]
    #[serde(rename_all = "camelCase")]
    pub struct EIpSpec {
        /// `public` or `cloud`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub external_network_type: Option<String>,
        /// Every other spec field.
        #[serde(flatten)]
        pub rest: BTreeMap<String, Value>,
    }

    /// kube-dc's EIp status, whole.
    #[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
    #[serde(rename_all = "camelCase")]
    pub struct EIpStatus {
        /// The allocated external IP.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub ip_address: Option<String>,
        /// True once the EIp is usable.
        #[serde(default)]
        pub ready: bool,
        /// kube-dc's conditions.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub conditions: Vec<Value>,
        /// Every other status field (`ovnEIpRef`, `ownershipType`, `owners`).
        #[serde(flatten)]
        pub rest: BTreeMap<String, Value>,
    }
}

use full::EIp;

/// The finalizer kube-dc's controller puts on every EIp it sees.
pub const EIP_FINALIZER: &str = "eip.kube-dc.com/finalizer";
/// The label of a kube-dc Project's namespace.
pub const PROJECT_LABEL: &str = "kube-dc.com/project";
/// kube-dc's `-ext` publisher's labels.
pub const EXT_MANAGED_BY: &str = "kube-dc.com/managed-by";

/// The OVN external IP kube-dc's controller creates for an EIp (what `status.ovnEIpRef` names):
/// `<ns>-ext-<network>` for the project's `default-gw`, `eip-slb-<id>` for the others.
fn ovn_eip_ref(namespace: &str, eip: &EIp, network: &str) -> String {
    if eip.name_any() == "default-gw" {
        format!("{namespace}-ext-{network}")
    } else {
        let uid = eip.uid().unwrap_or_default();
        format!("eip-slb-{}", &uid[..uid.len().min(8)])
    }
}

/// A Namespace object of a kube-dc Project (what kube-dc's Project controller makes), for the
/// in-memory API.
pub fn project_namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": name, "labels": {PROJECT_LABEL: name}}})
}

/// Make `namespace` a kube-dc Project's namespace on a real cluster (label it as kube-dc's Project
/// controller does).
pub async fn make_project(client: &kube::Client, namespace: &str) {
    Api::<Namespace>::all(client.clone())
        .patch(
            namespace,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {PROJECT_LABEL: namespace}}})),
        )
        .await
        .unwrap();
}

/// The EIp a Service is bound to, by kube-dc's annotations.
fn bound_eip(service: &Service) -> Option<String> {
    let a = service.annotations();
    match (
        a.get("service.nlb.kube-dc.com/bind-on-eip"),
        a.get("service.nlb.kube-dc.com/bind-on-default-gw-eip"),
    ) {
        (Some(eip), _) => Some(eip.clone()),
        (None, Some(v)) if v == "true" => Some("default-gw".to_string()),
        _ => None,
    }
}

/// The owners recorded in an EIp's status, as the names of the owning Services.
fn recorded_owners(eip: &EIp) -> Vec<String> {
    let mut owners: Vec<String> = eip
        .status
        .as_ref()
        .and_then(|s| s.rest.get("owners"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|o| o.get("ownerRef").and_then(Value::as_str))
        .map(str::to_string)
        .collect();
    owners.sort();
    owners
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
    /// Run kube-dc's own `-ext` publisher too.
    pub publish_ext: bool,
    /// Writes kube-dc's `-ext` publisher made (Services and Endpoints, created or overwritten).
    pub ext_writes: usize,
    /// Addresses handed out so far, by EIp UID (a recreated EIp gets a new one).
    allocated: BTreeMap<String, String>,
    /// EIps being deleted whose OVN objects were released (their finalizer goes next pass), by UID.
    releasing: BTreeSet<String>,
    /// Names of the EIps whose finalizer was removed (deletion completed), in order.
    pub released: Vec<String>,
    next: u32,
    /// OVN load balancer rows: `<eip-ip>:<port>` -> sorted backends `<ip>:<port>`.
    pub rows: BTreeMap<String, Vec<String>>,
    /// The network annotation of each Service given an address, by UID (kube-dc's webhook).
    networks: BTreeMap<String, Option<String>>,
    /// Changes kube-dc's webhook would have refused (on the in-memory API, which has no
    /// admission; a real apiserver refuses them: [`crate::kubedc_webhook`]).
    pub refused: Vec<String>,
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
    /// Nothing happens unless `namespace` is a kube-dc Project's.
    pub async fn step_with(
        &mut self,
        client: &kube::Client,
        namespace: &str,
        now: jiff::Timestamp,
    ) {
        self.rows.clear();
        let project = Api::<Namespace>::all(client.clone())
            .get_opt(namespace)
            .await
            .unwrap()
            .is_some_and(|n| n.labels().contains_key(PROJECT_LABEL));
        if !project {
            return;
        }
        let eips: Api<EIp> = Api::namespaced(client.clone(), namespace);
        self.allocate_eips(&eips, namespace, now).await;
        if self.program_services {
            self.program(client, namespace).await;
        }
        self.finalize(&eips).await;
        if self.publish_ext {
            self.publish_ext_endpoints(client, namespace).await;
        }
    }

    /// Finalizers on new EIps, addresses for those not ready yet.
    async fn allocate_eips(&mut self, eips: &Api<EIp>, namespace: &str, now: jiff::Timestamp) {
        let all = eips.list(&ListParams::default()).await.unwrap().items;
        let mut public_ready = all
            .iter()
            .filter(|e| e.spec.external_network_type.as_deref() == Some("public"))
            .filter(|e| e.status.as_ref().is_some_and(|s| s.ready))
            .count();
        for eip in &all {
            if eip.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if !eip.finalizers().iter().any(|f| f == EIP_FINALIZER) {
                let mut finalizers = eip.finalizers().to_vec();
                finalizers.push(EIP_FINALIZER.to_string());
                eips.patch(
                    &eip.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"metadata": {"finalizers": finalizers}})),
                )
                .await
                .map_or_else(deleted_since_listed, drop);
            }
            if eip.status.as_ref().is_some_and(|s| s.ready) {
                continue;
            }
            let network = eip
                .spec
                .external_network_type
                .clone()
                .unwrap_or_else(|| "cloud".into());
            let uid = eip.uid().unwrap();
            let ownership = if recorded_owners(eip).is_empty() {
                "Released"
            } else {
                "Shared"
            };
            if network == "public" && self.public_quota.is_some_and(|q| public_ready >= q) {
                // kube-dc's CRD requires status.ovnEIpRef whenever a status is written; nothing
                // is allocated in OVN yet. kube-dc documents no reason for this: capi-lb must
                // quote it, not key on it.
                let status = json!({"status": {"ready": false, "ovnEIpRef": "",
                    "ownershipType": ownership, "conditions": [{
                    "type": "Ready", "status": "False", "reason": "AllocationFailed",
                    "lastTransitionTime": now.to_string(),
                    "message": format!("{network} IP quota exceeded ({public_ready} of {} in use)", self.public_quota.unwrap_or(0)),
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
                "ovnEIpRef": ovn_eip_ref(namespace, eip, &network), "ownershipType": ownership,
                "conditions": [
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
    }

    /// Bound Services: their ingress, the OVN rows, and the owners of their EIps.
    async fn program(&mut self, client: &kube::Client, namespace: &str) {
        let eips: Api<EIp> = Api::namespaced(client.clone(), namespace);
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
        let mut owners: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for service in services.list(&ListParams::default()).await.unwrap().items {
            if service.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some(bound) = bound_eip(&service) else {
                continue;
            };
            let Some(eip) = eips_now.get(&bound) else {
                continue;
            };
            let Some(ip) = eip
                .status
                .as_ref()
                .filter(|s| s.ready)
                .and_then(|s| s.ip_address.clone())
            else {
                continue;
            };
            // A deleting EIp takes no new owner.
            if eip.metadata.deletion_timestamp.is_none()
                || recorded_owners(eip).contains(&service.name_any())
            {
                owners.entry(bound).or_default().push(service.name_any());
            }
            // kube-dc's webhook: the network annotation is fixed once an address is allocated.
            let network = crate::kubedc_webhook::network_of(&service);
            let uid = service.uid().unwrap_or_default();
            match self.networks.get(&uid) {
                Some(allocated) if *allocated != network => self.refused.push(format!(
                    "Service {}: {} ({allocated:?} -> {network:?})",
                    service.name_any(),
                    crate::kubedc_webhook::REFUSAL
                )),
                Some(_) => {}
                None => {
                    self.networks.insert(uid, network);
                }
            }
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
        // The ownership bookkeeping, written only when it changes.
        for (name, eip) in &eips_now {
            let Some(status) = &eip.status else { continue };
            let mut wanted = owners.remove(name).unwrap_or_default();
            wanted.sort();
            if wanted == recorded_owners(eip) {
                continue;
            }
            let ownership = if wanted.is_empty() {
                "Released"
            } else {
                "Shared"
            };
            let list: Vec<Value> = wanted
                .iter()
                .map(|s| json!({"type": "ServiceLb", "ownerRef": s}))
                .collect();
            let ovn = status
                .rest
                .get("ovnEIpRef")
                .cloned()
                .unwrap_or_else(|| json!(""));
            eips.patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": {"ready": status.ready, "ovnEIpRef": ovn,
                    "ownershipType": ownership, "owners": list}})),
            )
            .await
            .map_or_else(deleted_since_listed, drop);
        }
    }

    /// Deleting EIps: held while a Service owns them; otherwise their OVN objects are released,
    /// and at the next pass their finalizer is removed.
    async fn finalize(&mut self, eips: &Api<EIp>) {
        for eip in eips.list(&ListParams::default()).await.unwrap().items {
            if eip.metadata.deletion_timestamp.is_none()
                || !eip.finalizers().iter().any(|f| f == EIP_FINALIZER)
                || !recorded_owners(&eip).is_empty()
            {
                continue;
            }
            let uid = eip.uid().unwrap();
            if self.releasing.insert(uid.clone()) {
                self.allocated.remove(&uid);
                continue;
            }
            let finalizers: Vec<String> = eip
                .finalizers()
                .iter()
                .filter(|f| *f != EIP_FINALIZER)
                .cloned()
                .collect();
            eips.patch(
                &eip.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"finalizers": finalizers}})),
            )
            .await
            .map_or_else(deleted_since_listed, drop);
            self.releasing.remove(&uid);
            self.released.push(eip.name_any());
        }
    }

    /// kube-dc's own `-ext` publisher: for every LoadBalancer Service, a headless `<svc>-ext`
    /// Service (ports copied, kube-dc's labels) and v1 Endpoints with its ingress IPs; whatever
    /// `<svc>-ext` exists is overwritten (labels, owner references, spec) when it differs.
    async fn publish_ext_endpoints(&mut self, client: &kube::Client, namespace: &str) {
        let services: Api<Service> = Api::namespaced(client.clone(), namespace);
        let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), namespace);
        let all = services.list(&ListParams::default()).await.unwrap().items;
        for source in &all {
            let spec = source.spec.clone().unwrap_or_default();
            if spec.type_.as_deref() != Some("LoadBalancer")
                || source.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            let name = format!("{}-ext", source.name_any());
            let labels = json!({EXT_MANAGED_BY: "service-lb-controller",
                "kube-dc.com/source-service": source.name_any(),
                "kube-dc.com/endpoint-type": "external"});
            let ports: Vec<Value> = spec
                .ports
                .iter()
                .flatten()
                .map(|p| {
                    json!({"name": p.name.clone().unwrap_or_default(), "port": p.port,
                                "protocol": p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                                "targetPort": p.port})
                })
                .collect();
            let owner = json!([{"apiVersion": "v1", "kind": "Service", "name": source.name_any(),
                                "uid": source.uid().unwrap_or_default()}]);
            let existing = services.get_opt(&name).await.unwrap();
            let current = existing.as_ref().map(|s| serde_json::to_value(s).unwrap());
            let differs = current.as_ref().is_none_or(|c| {
                c.pointer("/metadata/labels") != Some(&labels)
                    || c.pointer("/metadata/ownerReferences") != Some(&owner)
                    || c.pointer("/spec/clusterIP") != Some(&json!("None"))
                    || c.pointer("/spec/ports").map(ext_ports) != Some(ext_ports(&json!(ports)))
            });
            if differs {
                let mut object = json!({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": name, "namespace": namespace, "labels": labels,
                                 "ownerReferences": owner},
                    "spec": {"clusterIP": "None", "ports": ports}});
                match current {
                    Some(c) => {
                        // Overwrite: kube-dc's labels and owner only (others' are dropped).
                        object["metadata"]["resourceVersion"] =
                            c["metadata"]["resourceVersion"].clone();
                        object["metadata"]["annotations"] = c["metadata"]["annotations"].clone();
                        let object: Service = serde_json::from_value(object).unwrap();
                        services
                            .replace(&name, &PostParams::default(), &object)
                            .await
                            .map_or_else(ignore_conflict, drop);
                    }
                    None => {
                        let object: Service = serde_json::from_value(object).unwrap();
                        services
                            .create(&PostParams::default(), &object)
                            .await
                            .map_or_else(ignore_conflict, drop);
                    }
                }
                self.ext_writes += 1;
            }
            let ips: Vec<Value> = source
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|l| l.ingress.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|i| i.ip.clone())
                .map(|ip| json!({"ip": ip}))
                .collect();
            let subsets = if ips.is_empty() {
                json!(null)
            } else {
                json!([{"addresses": ips, "ports": ports.iter().map(|p| json!({"name": p["name"], "port": p["port"], "protocol": p["protocol"]})).collect::<Vec<_>>()}])
            };
            let wanted = json!({"apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "subsets": subsets});
            let found = endpoints.get_opt(&name).await.unwrap();
            let current = found.as_ref().map(|e| serde_json::to_value(e).unwrap());
            let same = current.as_ref().is_some_and(|c| {
                c.pointer("/metadata/labels") == Some(&labels)
                    && c.get("subsets").cloned().unwrap_or(json!(null)) == subsets
            });
            if !same {
                let mut object = wanted;
                match current {
                    Some(c) => {
                        object["metadata"]["resourceVersion"] =
                            c["metadata"]["resourceVersion"].clone();
                        let object: Endpoints = serde_json::from_value(object).unwrap();
                        endpoints
                            .replace(&name, &PostParams::default(), &object)
                            .await
                            .map_or_else(ignore_conflict, drop);
                    }
                    None => {
                        let object: Endpoints = serde_json::from_value(object).unwrap();
                        endpoints
                            .create(&PostParams::default(), &object)
                            .await
                            .map_or_else(ignore_conflict, drop);
                    }
                }
                self.ext_writes += 1;
            }
        }
    }
}

/// Ports as compared by kube-dc's publisher: (name, port, protocol).
fn ext_ports(ports: &Value) -> Vec<(String, i64, String)> {
    let mut out: Vec<(String, i64, String)> = ports
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or_default().to_string(),
                p["port"].as_i64().unwrap_or_default(),
                p["protocol"].as_str().unwrap_or("TCP").to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

/// A write that lost a race (409) or to an object deleted since (404) is retried next pass.
fn ignore_conflict(e: kube::Error) {
    assert!(
        matches!(&e, kube::Error::Api(s) if s.code == 404 || s.code == 409),
        "kube-dc simulator: {e}"
    );
}

/// A [`KubeDcSim`] running in the background against a real cluster ([`KubeDcSim::spawn`]).
pub struct RunningSim {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
    client: kube::Client,
    namespace: String,
}

impl KubeDcSim {
    /// Run a pass over `namespace` through `client` (with the admin's rights, as kube-dc's controller
    /// has its own) every 300 ms, at the wall clock, until [`RunningSim::stop`].
    pub fn spawn(mut self, client: kube::Client, namespace: String) -> RunningSim {
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let (task_client, task_namespace) = (client.clone(), namespace.clone());
        let task = tokio::spawn(async move {
            loop {
                self.step_with(&task_client, &task_namespace, jiff::Timestamp::now())
                    .await;
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = tokio::time::sleep(Duration::from_millis(300)) => {}
                }
            }
        });
        RunningSim {
            stop,
            task,
            client,
            namespace,
        }
    }
}

impl std::fmt::Debug for RunningSim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningSim")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl RunningSim {
    /// Stop after the pass under way (a pass that panicked fails here), and release kube-dc's
    /// finalizer from the EIps left (a user's, kept by the test), so that the namespace can go.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap();
        let eips: Api<EIp> = Api::namespaced(self.client, &self.namespace);
        for eip in eips.list(&ListParams::default()).await.unwrap().items {
            if !eip.finalizers().iter().any(|f| f == EIP_FINALIZER) {
                continue;
            }
            let finalizers: Vec<String> = eip
                .finalizers()
                .iter()
                .filter(|f| *f != EIP_FINALIZER)
                .cloned()
                .collect();
            eips.patch(
                &eip.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"finalizers": finalizers}})),
            )
            .await
            .map_or_else(deleted_since_listed, drop);
        }
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
