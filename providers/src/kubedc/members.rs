//! The members as the LoadBalancer Service's endpoints (shared with the Service provider:
//! [`crate::lbservice::members`]): EndpointSlices, plus v1 Endpoints because kube-dc's controller
//! reads Endpoints. kube-dc has no weights, so a draining member stays ready in the endpoints until
//! the reconciler leaves it out after the drain time.

use k8s_openapi::api::core::v1::Service;
use serde_json::{Map, json};

use super::KubeDcProvider;
use super::infra::{Infra, ours};
use super::step::{POLL, SLOW_POLL, api_error};
use crate::endpoints;
use crate::error::ProviderError;
use crate::lbservice::Ingress;
use crate::lbservice::members::{MemberEndpoints, member_statuses};
use crate::provider::{
    LoadBalancerIdentity, MemberState, MemberStatus, MembersOutcome, MembersRequest, Progress,
};

impl KubeDcProvider {
    /// `converge_members`: the request's members as the endpoints of the LoadBalancer Service.
    pub(super) async fn converge(
        &self,
        request: MembersRequest<'_>,
    ) -> Result<MembersOutcome, ProviderError> {
        let identity = request.identity;
        let infra = Infra::read(request.infra, identity)?;
        let service = self.member_service(&infra, identity).await?;
        let converged = MemberEndpoints {
            client: &self.client,
            service: &service,
            identity,
            infra_uid: infra.uid.as_deref(),
            draining: endpoints::State::Ready,
            legacy_endpoints: true,
        }
        .converge(request.listeners, request.members)
        .await?;
        // kube-dc programs OVN from the endpoints once the Service has its address.
        let statuses = member_statuses(&converged.members, !Ingress::of(&service).ips.is_empty());
        let progress = members_progress(&converged.skipped, &statuses, &infra.service_name());
        let mut status = Map::new();
        status.insert("memberCount".into(), json!(statuses.len()));
        Ok(MembersOutcome {
            progress,
            members: statuses,
            changes: converged.changes,
            status,
        })
    }

    /// The LoadBalancer Service the members are endpoints of: an error until it exists and is ours.
    async fn member_service(
        &self,
        infra: &Infra,
        identity: &LoadBalancerIdentity,
    ) -> Result<Service, ProviderError> {
        let service_name = infra.service_name();
        let services = self.services(&infra.namespace);
        let Some(service) = services
            .get_opt(&service_name)
            .await
            .map_err(|e| api_error(&format!("get Service {service_name}"), e))?
            .filter(|s| ours(&s.metadata, identity, infra))
        else {
            return Err(ProviderError::transient(format!(
                "Service {service_name} does not exist yet"
            )));
        };
        Ok(service)
    }
}

/// Pending on members that are not IPs or until kube-dc programs the Service, else done.
fn members_progress(skipped: &[String], statuses: &[MemberStatus], service_name: &str) -> Progress {
    if !skipped.is_empty() {
        Progress::pending(
            format!(
                "kube-dc load balances to IP addresses only; not added: {}",
                skipped.join(", ")
            ),
            SLOW_POLL,
        )
    } else if statuses.iter().any(|m| m.state == MemberState::Adding) {
        Progress::pending(
            format!("waiting for kube-dc to program Service {service_name}"),
            POLL,
        )
    } else {
        Progress::Done
    }
}
