//! The wanted realisation of the load balancer: the EIp (the one named in `spec.eipName`, or the
//! provider's on the wanted network), the Service bound to it, and how far kube-dc is with them.

use std::net::IpAddr;

use kube::ResourceExt;

use super::KubeDcProvider;
use super::infra::Infra;
use super::reason;
use super::step::{POLL, Step};
use crate::error::ProviderError;
use crate::lbservice::Ingress;
use crate::provider::{Listener, LoadBalancerIdentity, Notice, Progress};

/// What [`KubeDcProvider::ensure_wanted`] found or made.
pub(super) struct Wanted {
    /// The EIp's and the Service's names, once both exist.
    pub(super) names: Option<(String, String)>,
    /// The EIp's address, once kube-dc allocated it.
    pub(super) address: Option<String>,
    /// Done once the Service shows that address (kube-dc programmed it).
    pub(super) progress: Progress,
    /// This call created the EIp.
    pub(super) created: bool,
    /// The EIp was deleted while its Service is bound: kube-dc holds it and it still serves.
    pub(super) held: Option<Notice>,
}

impl KubeDcProvider {
    /// Find or create the wanted EIp and its Service, and say how far kube-dc is with them.
    pub(super) async fn ensure_wanted(
        &self,
        infra: &Infra,
        identity: &LoadBalancerIdentity,
        listeners: &[Listener],
        changes: &mut Vec<String>,
    ) -> Result<Wanted, ProviderError> {
        let waiting = |progress, created| Wanted {
            names: None,
            address: None,
            progress,
            created,
            held: None,
        };
        let target = match self.ensure_eip(infra, identity, changes).await? {
            Step::Ready(target) => target,
            Step::Wait(progress) => return Ok(waiting(progress, false)),
        };
        let eip_name = target.eip.name_any();
        let service = match self
            .ensure_service(
                infra,
                identity,
                (target.slot, &eip_name),
                listeners,
                changes,
            )
            .await?
        {
            Step::Ready(service) => service,
            Step::Wait(progress) => return Ok(waiting(progress, target.created)),
        };
        let address = target
            .eip
            .status
            .as_ref()
            .filter(|s| s.ready)
            .and_then(|s| s.ip_address.clone())
            .filter(|ip| ip.parse::<IpAddr>().is_ok());
        let progress = match &address {
            None => match self.project(infra).await? {
                Step::Wait(progress) => progress,
                Step::Ready(()) => self.eip_waiting(&target.eip, self.clock.now()),
            },
            Some(ip) if !Ingress::of(&service).ips.contains(ip) => Progress::pending_because(
                reason::SERVICE_WITHOUT_INGRESS,
                format!(
                    "EIp {eip_name} has {ip}; waiting for kube-dc to put it on Service {} (status.loadBalancer.ingress)",
                    service.name_any()
                ),
                POLL,
            ),
            Some(_) => Progress::Done,
        };
        let held = target.held.then(|| Notice {
            reason: reason::EIP_DELETING,
            message: format!(
                "EIp {}/{eip_name} was deleted, but kube-dc keeps it while Service {} is bound to it: it still serves at {}, and goes when the LoadBalancer is deleted. capi-lb does not replace it meanwhile; to move to a new address without a break, change the KubeDCLoadBalancer's externalNetworkType or point the LoadBalancer's infrastructureRef at another KubeDCLoadBalancer",
                infra.namespace,
                service.name_any(),
                address.as_deref().unwrap_or("no address")
            ),
        });
        Ok(Wanted {
            names: Some((eip_name, service.name_any())),
            address,
            progress,
            created: target.created,
            held,
        })
    }
}
