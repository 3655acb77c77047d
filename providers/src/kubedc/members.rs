//! The members as the LoadBalancer Service's endpoints (shared with the Service provider:
//! [`crate::lbservice::members`]): EndpointSlices, plus v1 Endpoints because kube-dc's controller
//! reads Endpoints. kube-dc has no weights, so a draining member stays ready in the endpoints until
//! the reconciler leaves it out after the drain time.

use super::KubeDcProvider;
use super::infra::Infra;
use super::step::{POLL, SLOW_POLL, Step};
use crate::endpoints;
use crate::error::ProviderError;
use crate::lbservice::members::MemberPublication;
use crate::provider::{MembersOutcome, MembersRequest, Progress};

impl KubeDcProvider {
    /// `converge_members`: the request's members as the endpoints of the LoadBalancer Service.
    pub(super) async fn converge(
        &self,
        request: MembersRequest<'_>,
    ) -> Result<MembersOutcome, ProviderError> {
        let infra = match Infra::read(request.infra, request.identity, &self.client, &self.remotes)
            .await?
        {
            Step::Ready(infra) => infra,
            // The load balancer was ensured a moment ago: its kubeconfig Secret went since.
            Step::Wait(progress) => {
                return Err(ProviderError::transient(match progress {
                    Progress::Pending { message, .. } => message,
                    Progress::Done => String::new(),
                }));
            }
        };
        let service_name = infra.service_name();
        MemberPublication {
            client: &infra.client,
            namespace: &infra.namespace,
            waiting: format!("waiting for kube-dc to program Service {service_name}"),
            service_name,
            infra_uid: infra.uid.as_deref(),
            draining: endpoints::State::Ready,
            legacy_endpoints: true,
            ip_only: "kube-dc load balances to IP addresses only",
            poll: POLL,
            slow_poll: SLOW_POLL,
        }
        .converge(request)
        .await
    }
}
