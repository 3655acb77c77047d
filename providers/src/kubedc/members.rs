//! The members as the endpoints of each LoadBalancer Service of the provider (two while the
//! network changes; shared with the Service provider: [`crate::lbservice::members`]):
//! EndpointSlices, plus v1 Endpoints because kube-dc's controller reads Endpoints. kube-dc has no weights, so a draining member stays ready in the endpoints until
//! the reconciler leaves it out after the drain time.

use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::Api;

use super::KubeDcProvider;
use super::infra::{Infra, Slot, ours};
use super::step::{POLL, SLOW_POLL, Step, api_error};
use crate::endpoints;
use crate::error::ProviderError;
use crate::lbservice::Ingress;
use crate::lbservice::delete::selector;
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
        // Every Service of the provider that is not being deleted serves the members: during a
        // change of network the old one keeps serving and the new one is filled before it does.
        let services: Vec<Service> =
            Api::<Service>::namespaced(infra.client.clone(), &infra.namespace)
                .list(&selector(request.identity, infra.uid.as_deref()))
                .await
                .map_err(|e| api_error("list Services", e))?
                .items
                .into_iter()
                .filter(|s| s.metadata.deletion_timestamp.is_none())
                .filter(|s| ours(&s.metadata, request.identity, &infra))
                .collect();
        // The members reported are those of the Service that serves (kube-dc put its address on
        // it); without one, of the Service still waiting for kube-dc.
        let reported = services
            .iter()
            .find(|s| !Ingress::of(s).ips.is_empty())
            .or(services.first())
            .map_or_else(|| infra.service_name(Slot::First), ResourceExt::name_any);
        let mut names: Vec<String> = services.iter().map(ResourceExt::name_any).collect();
        if !names.contains(&reported) {
            names.push(reported.clone());
        }
        let mut answer = None;
        let mut changes = Vec::new();
        for service_name in names {
            let reporting = service_name == reported;
            let outcome = MemberPublication {
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
            .await?;
            changes.extend(outcome.changes.iter().cloned());
            if reporting {
                answer = Some(outcome);
            }
        }
        let mut answer = answer.ok_or_else(|| {
            ProviderError::transient(format!("Service {reported} does not exist yet"))
        })?;
        answer.changes = changes;
        Ok(answer)
    }
}
