//! Deleting what a LoadBalancer has on kube-dc: its Services first (kube-dc releases an EIp only
//! once no Service is bound to it), the member EndpointSlices and Endpoints, then, once no Service
//! is left, the EIps the provider created (never one named in `spec.eipName`).

use kube::api::ListParams;

use super::KubeDcProvider;
use super::step::{POLL, api_error, is_not_found};
use crate::error::ProviderError;
use crate::lbservice::delete::{delete_services, delete_waited, selector};
use crate::provider::{DeleteOutcome, DeleteRequest, Progress};

impl KubeDcProvider {
    /// `delete`: `Done` once no Service or EIp of the LoadBalancer is left.
    pub(super) async fn delete_owned(
        &self,
        request: DeleteRequest<'_>,
    ) -> Result<DeleteOutcome, ProviderError> {
        let identity = request.identity;
        let namespace = &identity.namespace;
        let params = selector(
            identity,
            request.infra.and_then(|i| i.metadata.uid.as_deref()),
        );
        let mut changes = Vec::new();
        let mut waiting = Vec::new();

        // The Service first: kube-dc releases an EIp only once no Service is bound to it.
        delete_services(&self.client, namespace, &params, &mut changes, &mut waiting).await?;
        // Then the EIps the provider created (never one named in spec.eipName: it has no label).
        if waiting.is_empty() {
            self.delete_eips(namespace, &params, &mut changes, &mut waiting)
                .await?;
        }
        let progress = if waiting.is_empty() {
            Progress::Done
        } else {
            Progress::pending(format!("deleting {}", waiting.join(", ")), POLL)
        };
        Ok(DeleteOutcome { progress, changes })
    }

    /// Delete the EIps `params` selects (none when kube-dc is not installed); each is waited for.
    async fn delete_eips(
        &self,
        namespace: &str,
        params: &ListParams,
        changes: &mut Vec<String>,
        waiting: &mut Vec<String>,
    ) -> Result<(), ProviderError> {
        let eips = self.eips(namespace);
        let listed = match eips.list(params).await {
            Ok(list) => list.items,
            // kube-dc not installed: there is no EIp to delete.
            Err(e) if is_not_found(&e) => Vec::new(),
            Err(e) => return Err(api_error("list EIps", e)),
        };
        delete_waited(&eips, listed, "EIp", changes, waiting).await
    }
}
