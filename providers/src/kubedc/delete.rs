//! Deleting what a LoadBalancer has on kube-dc: its Services first (kube-dc releases an EIp only
//! once no Service is bound to it), the member EndpointSlices and Endpoints, then, once no Service
//! is left, the EIps the provider created (never one named in `spec.eipName`).

use capi_lb_api::kubedc::EIp;
use kube::api::Api;

use super::KubeDcProvider;
use super::infra::Infra;
use super::step::{POLL, Step, api_error, is_not_found};
use crate::error::ProviderError;
use crate::lbservice::delete::{delete_services, delete_waited, selector};
use crate::provider::{DeleteOutcome, DeleteRequest, Progress};

impl KubeDcProvider {
    /// `delete`: `Done` once no Service or EIp of the LoadBalancer is left, in the kube-dc cluster
    /// of the infrastructure object (this one when it is gone: what is in another cluster can only
    /// be found through its kubeconfig Secret, so a missing Secret is waited for).
    pub(super) async fn delete_owned(
        &self,
        request: DeleteRequest<'_>,
    ) -> Result<DeleteOutcome, ProviderError> {
        let identity = request.identity;
        let (client, namespace, infra_uid) = match request.infra {
            Some(infra) => match Infra::read(infra, identity, &self.client, &self.remotes).await? {
                Step::Ready(infra) => (infra.client, infra.namespace, infra.uid),
                Step::Wait(progress) => {
                    return Ok(DeleteOutcome {
                        progress,
                        changes: Vec::new(),
                    });
                }
            },
            None => (self.client.clone(), identity.namespace.clone(), None),
        };
        let params = selector(identity, infra_uid.as_deref());
        let mut changes = Vec::new();
        let mut waiting = Vec::new();

        // The Service first: kube-dc releases an EIp only once no Service is bound to it.
        delete_services(
            &client,
            &namespace,
            &params,
            identity,
            &mut changes,
            &mut waiting,
        )
        .await?;
        // Then the EIps the provider created (never one named in spec.eipName: it has no label).
        if waiting.is_empty() {
            let eips: Api<EIp> = Api::namespaced(client, &namespace);
            let listed = match eips.list(&params).await {
                Ok(list) => list
                    .items
                    .into_iter()
                    .filter(|e| crate::lbservice::named_for(&e.metadata, identity))
                    .collect(),
                // kube-dc not installed: there is no EIp to delete.
                Err(e) if is_not_found(&e) => Vec::new(),
                Err(e) => return Err(api_error("list EIps", e)),
            };
            delete_waited(&eips, listed, "EIp", &mut changes, &mut waiting).await?;
        }
        let progress = if waiting.is_empty() {
            Progress::Done
        } else {
            Progress::pending(format!("deleting {}", waiting.join(", ")), POLL)
        };
        Ok(DeleteOutcome { progress, changes })
    }
}
