//! The members as the LoadBalancer Service's endpoints (shared with the Service provider:
//! [`crate::lbservice::members`]): EndpointSlices, plus v1 Endpoints because kube-dc's controller
//! reads Endpoints. kube-dc has no weights, so a draining member stays ready in the endpoints until
//! the reconciler leaves it out after the drain time.

use serde_json::{Map, json};

use super::KubeDcProvider;
use super::infra::Infra;
use super::step::{POLL, SLOW_POLL};
use crate::endpoints;
use crate::error::ProviderError;
use crate::lbservice::members::{MemberEndpoints, member_statuses};
use crate::lbservice::{Ingress, member_service};
use crate::provider::{MemberState, MemberStatus, MembersOutcome, MembersRequest, Progress};

impl KubeDcProvider {
    /// `converge_members`: the request's members as the endpoints of the LoadBalancer Service.
    pub(super) async fn converge(
        &self,
        request: MembersRequest<'_>,
    ) -> Result<MembersOutcome, ProviderError> {
        let identity = request.identity;
        let infra = Infra::read(request.infra, identity)?;
        let service = member_service(
            &self.client,
            &infra.namespace,
            &infra.service_name(),
            identity,
            infra.uid.as_deref(),
        )
        .await?;
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
