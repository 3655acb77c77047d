//! The kube-dc provider: load balancers on OVN external IPs, realised the way kube-dc itself does it,
//! through kube-dc's own controller.
//!
//! For a LoadBalancer whose `infrastructureRef` names a `KubeDCLoadBalancer` `<infra>`:
//! - an `EIp` (`kube-dc.com/v1`) `<infra>-eip` with the spec's `externalNetworkType`, unless
//!   `spec.eipName` names an existing EIp (the project's `default-gw`, or a pre-allocated one), which
//!   is never modified or deleted; the address is `EIp.status.ipAddress` once `status.ready`. A
//!   changed `externalNetworkType` is made before break: a new EIp and Service
//!   (`<infra>-eip-<network>`, `<infra>-lb-<network>`) while the old ones serve, then the old ones
//!   deleted;
//! - a selectorless Service of `type: LoadBalancer` `<infra>-lb` bound to that EIp
//!   (`service.nlb.kube-dc.com/bind-on-eip`, or `bind-on-default-gw-eip` for `default-gw`) with the
//!   LoadBalancer's ports; kube-dc's controller programs OVN for it and fills its
//!   `status.loadBalancer.ingress`;
//! - the members as that Service's endpoints: EndpointSlices, plus v1 Endpoints because kube-dc's
//!   controller reads Endpoints. kube-dc has no weights, so a draining member stays in the endpoints
//!   until the reconciler removes it after the drain time.
//!
//! Everything it creates carries a controller owner reference to the `KubeDCLoadBalancer`, capi-lb's
//! labels and the owning LoadBalancer's UID label, which is what ownership is decided on: an object
//! with the same name that does not carry it is never touched (reported as `NameConflict`), and a
//! restarted controller adopts what carries it. Nothing blocks: a not-ready EIp or a Service without
//! ingress is `Pending` with its own condition reason, and so is a cluster without kube-dc's CRDs
//! (the provider then waits for them to appear instead of failing).
//!
//! The files, lowest first (each uses only those above it; this one holds the [`KubeDcProvider`],
//! its catalog entry and its `Provider` impl, which delegates to the others):
//! - `reason`: the condition reasons; `step`: `Step`, polls and API errors;
//! - `remote`: the cluster kube-dc is in (this one, or one reached through a kubeconfig Secret);
//! - `infra`: what the `KubeDCLoadBalancer` says, derived names, labels and ownership;
//! - `eip` (the EIp, and what to say while it is not ready) and `service` (the LoadBalancer Service);
//! - `realise` (the wanted EIp and Service, and how far kube-dc is with them) and `network` (the
//!   other realisations: the old one serving during a change of `externalNetworkType`, deleted
//!   once the new one serves);
//! - `members` (the Services' endpoints, for `converge_members`), then `delete`.

mod delete;
mod eip;
mod infra;
mod members;
mod network;
mod realise;
pub mod reason;
mod remote;
mod service;
mod step;

use std::sync::Arc;

use async_trait::async_trait;
use capi_lb_api::KubeDCLoadBalancer;
use capi_lb_api::constants::INFRASTRUCTURE_GROUP;
use capi_lb_api::loadbalancer::LoadBalancerAddress;
use kube::core::ApiResource;
use serde_json::{Map, json};

use crate::clock::SharedClock;
use crate::entry::{Entry, OwnedKind};
use crate::error::ProviderError;
use crate::provider::{
    DeleteOutcome, DeleteRequest, EnsureOutcome, EnsureRequest, MembersOutcome, MembersRequest,
    Progress, Provider,
};
pub use eip::STUCK_AFTER;
use infra::Infra;
pub use infra::derived_name;
use network::Report;
use remote::Remotes;
pub use service::{BIND_ON_DEFAULT_GW, BIND_ON_EIP, DEFAULT_GW};
use step::Step;

/// The kube-dc provider's catalog entry.
pub const ENTRY: Entry = Entry {
    name: "kubedc",
    title: "kube-dc provider",
    shipped: true,
    docs: "docs/providers/kubedc.md",
    infrastructure: || ApiResource::erase::<KubeDCLoadBalancer>(&()),
    crd: <KubeDCLoadBalancer as kube::CustomResourceExt>::crd,
    build: |dependencies| {
        Arc::new(
            KubeDcProvider::new(dependencies.client.clone(), dependencies.clock.clone())
                .with_credentials(dependencies.credentials.clone()),
        )
    },
    checks_members: false,
    proxies: false,
    owned_kinds: &[OwnedKind {
        group: "kube-dc.com",
        version: "v1",
        kind: "EIp",
        plural: "eips",
        missing: "kube-dc's CRDs are not installed: LoadBalancers on kube-dc report KubeDCNotInstalled until they are",
    }],
    calls: &[
        (
            INFRASTRUCTURE_GROUP,
            "kubedcloadbalancers",
            &["get", "patch"],
        ),
        (
            INFRASTRUCTURE_GROUP,
            "kubedcloadbalancers/status",
            &["patch"],
        ),
        (
            INFRASTRUCTURE_GROUP,
            "kubedcloadbalancers/finalizers",
            &["update"],
        ),
        ("kube-dc.com", "eips", &["get", "list", "create", "delete"]),
        // Whether the namespace is a kube-dc Project's (its label), while an EIp is not ready.
        ("", "namespaces", &["get"]),
        // The kubeconfig of a kube-dc cluster other than this one (spec.cluster).
        ("", "secrets", &["get"]),
        // The LoadBalancer Service and its Endpoints, created by server-side apply.
        ("", "services", &["create"]),
        (
            "",
            "endpoints",
            &["get", "create", "patch", "list", "delete"],
        ),
    ],
    reasons: reason::ALL,
    records: crate::entry::no_records,
};

/// The kube-dc provider.
#[derive(Clone)]
pub struct KubeDcProvider {
    client: kube::Client,
    clock: SharedClock,
    remotes: Arc<Remotes>,
}

impl std::fmt::Debug for KubeDcProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeDcProvider").finish_non_exhaustive()
    }
}

impl KubeDcProvider {
    /// A provider that talks to kube-dc through `client`.
    pub fn new(client: kube::Client, clock: SharedClock) -> Self {
        Self {
            client,
            clock,
            remotes: Arc::new(Remotes::default()),
        }
    }

    /// Read only the kubeconfig Secrets `policy` admits.
    pub fn with_credentials(self, policy: crate::entry::CredentialsPolicy) -> Self {
        Self {
            remotes: Arc::new(Remotes::admitting(policy)),
            ..self
        }
    }
}

#[async_trait]
impl Provider for KubeDcProvider {
    async fn ensure(&self, request: EnsureRequest<'_>) -> Result<EnsureOutcome, ProviderError> {
        let identity = request.identity;
        let mut changes = Vec::new();
        let mut status = Map::new();
        // kube-dc's controller restricts no sources.
        let unsupported: Vec<String> = if request.source_ranges.is_empty() {
            Vec::new()
        } else {
            vec![format!(
                "source ranges ({}) are not enforced: kube-dc's load balancers accept every source",
                request.source_ranges.join(", ")
            )]
        };
        // Local EIps and Services are watched (by their ownership label); those of a kube-dc
        // cluster elsewhere (spec.cluster) are not.
        let local = request
            .infra
            .data
            .pointer("/spec/cluster")
            .is_none_or(serde_json::Value::is_null);
        let outcome = |progress: Progress, addresses, created, changes, status| EnsureOutcome {
            progress,
            addresses,
            serving: false,
            notice: None,
            created,
            changes,
            status,
            unsupported: unsupported.clone(),
            watched: local,
        };
        let infra = match Infra::read(request.infra, identity, &self.client, &self.remotes).await? {
            Step::Ready(infra) => infra,
            Step::Wait(progress) => {
                if let Progress::Pending { message, .. } = &progress {
                    status.insert("ready".into(), json!(false));
                    status.insert("waitingFor".into(), json!(message));
                }
                return Ok(outcome(progress, Vec::new(), false, changes, status));
            }
        };
        let wanted = self
            .ensure_wanted(&infra, identity, request.listeners, &mut changes)
            .await?;
        // The wanted realisation once it exists; the others are kept while they serve and it does
        // not yet, and deleted otherwise.
        let names = wanted
            .names
            .as_ref()
            .map(|(eip, service)| (eip.as_str(), service.as_str()));
        let ready = wanted.progress.is_done();
        let others = self
            .others(&infra, identity, names, !ready, &mut changes)
            .await?;
        // An old Service that still serves follows the LoadBalancer's ports too.
        for old in &others.serving {
            if let Some(slot) = infra.slot_of_service(&old.service) {
                self.ensure_service(
                    &infra,
                    identity,
                    (slot, &old.eip),
                    request.listeners,
                    &mut changes,
                )
                .await?;
            }
        }
        let Report {
            progress,
            serving_at,
            notice,
        } = network::report(infra.spec.external_network_type.as_str(), &wanted, &others);
        let (eip_name, service_name, address) = match &serving_at {
            Some(old) => (
                Some(old.eip.clone()),
                Some(old.service.clone()),
                Some(old.address.clone()),
            ),
            None => (
                wanted.names.as_ref().map(|(eip, _)| eip.clone()),
                wanted.names.as_ref().map(|(_, service)| service.clone()),
                wanted.address.clone(),
            ),
        };
        if let Some(eip_name) = &eip_name {
            status.insert("eipName".into(), json!(eip_name));
            status.insert("eipCreated".into(), json!(infra.spec.eip_name.is_none()));
        }
        if let Some(service_name) = &service_name {
            status.insert("serviceName".into(), json!(service_name));
        }
        if wanted.names.is_some() || serving_at.is_some() {
            status.insert("address".into(), json!(address));
        }
        let addresses: Vec<LoadBalancerAddress> = address
            .iter()
            .map(|a| LoadBalancerAddress::ip(a.clone()))
            .collect();
        let serves = serving_at.is_some() || ready;
        let waiting = match &progress {
            Progress::Pending { message, .. } => Some(message.clone()),
            Progress::Done => None,
        };
        status.insert("ready".into(), json!(serves));
        status.insert("waitingFor".into(), json!(waiting));
        // A new realisation made while the old one serves is no loss of the load balancer.
        let created = wanted.created && others.serving.is_empty();
        let mut answer = outcome(progress, addresses, created, changes, status);
        answer.serving = serves && !answer.progress.is_done();
        answer.notice = notice;
        Ok(answer)
    }

    async fn converge_members(
        &self,
        request: MembersRequest<'_>,
    ) -> Result<MembersOutcome, ProviderError> {
        self.converge(request).await
    }

    async fn delete(&self, request: DeleteRequest<'_>) -> Result<DeleteOutcome, ProviderError> {
        self.delete_owned(request).await
    }
}
