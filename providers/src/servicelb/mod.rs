//! The Service provider (`servicelb`): load balancers realised by whatever implements Services of
//! `type: LoadBalancer` in the management cluster — MetalLB, kube-vip, a cloud controller manager.
//!
//! For a LoadBalancer whose `infrastructureRef` names a `ServiceLoadBalancer` `<infra>`:
//! - a selectorless Service of `type: LoadBalancer` `<infra>-lb` with the LoadBalancer's ports, the
//!   spec's `loadBalancerClass`, annotations, labels, requested address, source ranges, traffic
//!   policy and IP families, owned by the LoadBalancer (its controller owner reference) and labelled
//!   with its UID, which is what ownership is decided on: a Service of that name without it is never
//!   touched (`NameConflict`), and a restarted controller adopts one with it;
//! - the members as that Service's EndpointSlices (no v1 Endpoints: every implementation and
//!   kube-proxy read slices). A draining member is published serving and terminating but not ready,
//!   so kube-proxy and the implementation send it no new connections while its existing ones go on,
//!   and it leaves the slice when the reconciler leaves it out after the drain time;
//! - the address is what the implementation writes to `status.loadBalancer.ingress` (IPs, or
//!   hostnames for cloud load balancers that have no stable IP). Until then the provider waits
//!   (`AddressPending`), quotes the implementation when it reported why it cannot assign one
//!   (`AddressNotAssigned`, from the Service's Warning Events), and after
//!   `spec.addressTimeoutSeconds` says that nothing seems to implement the class
//!   (`NoImplementation`).
//!
//! Nothing blocks: every wait is `Pending`, and the watch on Services brings the reconcile back as
//! soon as the implementation writes the address. Files: `reason` (condition reasons), `service`
//! (the `ServiceLoadBalancer`, the Service built from it and applied), `waiting` (what to say while
//! there is no address); the shared parts are in [`crate::lbservice`].

pub mod reason;
mod service;
mod waiting;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use capi_lb_api::ServiceLoadBalancer;
use capi_lb_api::constants::INFRASTRUCTURE_GROUP;
use capi_lb_api::loadbalancer::LoadBalancerAddress;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::core::ApiResource;
use serde_json::{Map, json};

use crate::clock::SharedClock;
use crate::endpoints;
use crate::entry::Entry;
use crate::error::ProviderError;
use crate::lbservice::delete::{delete_services, selector};
use crate::lbservice::members::MemberPublication;
use crate::lbservice::{Ingress, Step};
use crate::provider::{
    DeleteOutcome, DeleteRequest, EnsureOutcome, EnsureRequest, MembersOutcome, MembersRequest,
    Progress, Provider,
};
use service::{Infra, desired_service, source_ranges};

/// The Service provider's catalog entry.
pub const ENTRY: Entry = Entry {
    name: "service",
    title: "Service provider (MetalLB, kube-vip, cloud controllers)",
    shipped: true,
    docs: "docs/providers/service.md",
    infrastructure: || ApiResource::erase::<ServiceLoadBalancer>(&()),
    crd: <ServiceLoadBalancer as kube::CustomResourceExt>::crd,
    build: |dependencies| {
        Arc::new(ServiceProvider::new(
            dependencies.client.clone(),
            dependencies.clock.clone(),
        ))
    },
    // MetalLB, kube-vip and kube-proxy do not probe the endpoints of a Service without a selector:
    // their readiness is what capi-lb writes, so capi-lb's own target probes apply.
    checks_members: false,
    proxies: false,
    owned_kinds: &[],
    calls: &[
        (
            INFRASTRUCTURE_GROUP,
            "serviceloadbalancers",
            &["get", "patch"],
        ),
        (
            INFRASTRUCTURE_GROUP,
            "serviceloadbalancers/status",
            &["patch"],
        ),
        // The Service, created by server-side apply, and deleted with the LoadBalancer.
        ("", "services", &["create", "delete"]),
        // The implementation's Warning Events on the Service, quoted while it has no address.
        ("", "events", &["list"]),
    ],
    reasons: reason::ALL,
    records: crate::entry::no_records,
};

/// How often to look again while the Service has no address (the watch on Services usually brings
/// the reconcile back sooner).
const POLL: Duration = Duration::from_secs(10);
/// How often to look again while a name is taken or nothing implements the class.
const SLOW_POLL: Duration = Duration::from_secs(60);

/// The Service provider.
#[derive(Clone)]
pub struct ServiceProvider {
    client: kube::Client,
    clock: SharedClock,
}

impl std::fmt::Debug for ServiceProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceProvider").finish_non_exhaustive()
    }
}

impl ServiceProvider {
    /// A provider that creates its Services through `client`.
    pub fn new(client: kube::Client, clock: SharedClock) -> Self {
        Self { client, clock }
    }
}

/// Done when the ingress has the requested address (or none was requested); a problem when the
/// implementation assigned another one.
fn requested_address(infra: &Infra, service: &Service, ingress: &Ingress) -> Progress {
    match &infra.spec.load_balancer_ip {
        Some(ip) if !ingress.ips.contains(ip) => Progress::pending_because(
            reason::REQUESTED_ADDRESS_NOT_ASSIGNED,
            format!(
                "Service {} was given {} instead of the requested loadBalancerIP {ip}: {} does not honour spec.loadBalancerIP; request the address with its own annotation (spec.annotations) or leave loadBalancerIP unset",
                service.name_any(),
                ingress
                    .ips
                    .iter()
                    .chain(&ingress.hostnames)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
                infra.implementation()
            ),
            SLOW_POLL,
        ),
        _ => Progress::Done,
    }
}

#[async_trait]
impl Provider for ServiceProvider {
    async fn ensure(&self, request: EnsureRequest<'_>) -> Result<EnsureOutcome, ProviderError> {
        let identity = request.identity;
        let infra = Infra::read(request.infra, identity)?;
        let ranges = source_ranges(&infra, request.source_ranges)?;
        let desired = desired_service(&infra, identity, request.listeners, ranges);
        let mut changes = Vec::new();
        let mut status = Map::new();
        let (service, created) = match self
            .ensure_service(&infra, identity, &desired, &mut changes)
            .await?
        {
            Step::Ready(found) => found,
            Step::Wait(progress) => {
                if let Progress::Pending { message, .. } = &progress {
                    status.insert("ready".into(), json!(false));
                    status.insert("waitingFor".into(), json!(message));
                }
                return Ok(EnsureOutcome {
                    notice: None,
                    progress,
                    addresses: Vec::new(),
                    serving: false,
                    created: false,
                    changes,
                    status,
                    unsupported: Vec::new(),
                    watched: true,
                });
            }
        };
        let ingress = Ingress::of(&service);
        status.insert("serviceName".into(), json!(service.name_any()));
        status.insert("addresses".into(), json!(ingress.ips));
        status.insert("hostnames".into(), json!(ingress.hostnames));
        let progress = if ingress.is_empty() {
            self.address_wait(&infra, &service).await
        } else {
            requested_address(&infra, &service, &ingress)
        };
        let waiting = match &progress {
            Progress::Pending { message, .. } => Some(message.clone()),
            Progress::Done => None,
        };
        status.insert("ready".into(), json!(progress.is_done()));
        status.insert("waitingFor".into(), json!(waiting));
        let addresses = ingress
            .ips
            .iter()
            .map(|ip| LoadBalancerAddress::ip(ip.clone()))
            .chain(ingress.hostnames.iter().map(LoadBalancerAddress::hostname))
            .collect();
        Ok(EnsureOutcome {
            notice: None,
            progress,
            addresses,
            serving: false,
            created,
            changes,
            status,
            unsupported: Vec::new(),
            // The `<infra>-lb` Service, watched by its ownership label.
            watched: true,
        })
    }

    async fn converge_members(
        &self,
        request: MembersRequest<'_>,
    ) -> Result<MembersOutcome, ProviderError> {
        let infra = Infra::read(request.infra, request.identity)?;
        let service_name = infra.service_name();
        MemberPublication {
            client: &self.client,
            namespace: &infra.namespace,
            waiting: format!(
                "waiting for {} to give Service {service_name} an address",
                infra.implementation()
            ),
            service_name,
            infra_uid: infra.uid.as_deref(),
            draining: endpoints::State::Draining,
            legacy_endpoints: false,
            ip_only: "a Service load balances to IP addresses only",
            poll: POLL,
            slow_poll: SLOW_POLL,
        }
        .converge(request)
        .await
    }

    async fn delete(&self, request: DeleteRequest<'_>) -> Result<DeleteOutcome, ProviderError> {
        let identity = request.identity;
        let params = selector(
            identity,
            request.infra.and_then(|i| i.metadata.uid.as_deref()),
        );
        let mut changes = Vec::new();
        let mut waiting = Vec::new();
        delete_services(
            &self.client,
            &identity.namespace,
            &params,
            identity,
            &mut changes,
            &mut waiting,
        )
        .await?;
        let progress = if waiting.is_empty() {
            Progress::Done
        } else {
            Progress::pending(format!("deleting {}", waiting.join(", ")), POLL)
        };
        Ok(DeleteOutcome { progress, changes })
    }
}
