//! Deleting what a LoadBalancer has on kube-dc: its Services first (kube-dc releases an EIp only
//! once no Service is bound to it), the member EndpointSlices and Endpoints, then, once no Service
//! is left, the EIps the provider created (never one named in `spec.eipName`).

use std::fmt::Debug;

use k8s_openapi::api::core::v1::Endpoints;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::KubeDcProvider;
use super::step::{POLL, api_error, is_not_found};
use crate::error::ProviderError;
use crate::provider::{DeleteOutcome, DeleteRequest, Progress, tags};

impl KubeDcProvider {
    /// `delete`: `Done` once no Service or EIp of the LoadBalancer is left.
    pub(super) async fn delete_owned(
        &self,
        request: DeleteRequest<'_>,
    ) -> Result<DeleteOutcome, ProviderError> {
        let identity = request.identity;
        let namespace = &identity.namespace;
        // Everything made for this LoadBalancer, and for this infrastructure object when it is known
        // (during a migration between two KubeDCLoadBalancers the LoadBalancer owns both sets).
        let mut selector = format!("{}={}", tags::UID, identity.uid);
        if let Some(uid) = request.infra.and_then(|i| i.metadata.uid.as_ref()) {
            selector.push_str(&format!(",{}={uid}", tags::INFRASTRUCTURE_UID));
        }
        let params = ListParams::default().labels(&selector);
        let mut changes = Vec::new();
        let mut waiting = Vec::new();

        // The Service first: kube-dc releases an EIp only once no Service is bound to it.
        self.delete_services(namespace, &params, &mut changes, &mut waiting)
            .await?;
        let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), namespace);
        delete_labelled(
            &slices,
            &params,
            "list EndpointSlices",
            "delete EndpointSlice",
        )
        .await?;
        let endpoints: Api<Endpoints> = Api::namespaced(self.client.clone(), namespace);
        delete_labelled(&endpoints, &params, "list Endpoints", "delete Endpoints").await?;
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

    /// Delete the Services `params` selects; each one still there is waited for.
    async fn delete_services(
        &self,
        namespace: &str,
        params: &ListParams,
        changes: &mut Vec<String>,
        waiting: &mut Vec<String>,
    ) -> Result<(), ProviderError> {
        let services = self.services(namespace);
        let listed = services
            .list(params)
            .await
            .map_err(|e| api_error("list Services", e))?
            .items;
        delete_waited(&services, listed, "Service", changes, waiting).await
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

/// Delete each of `listed` (objects of `kind` in `api`) that is not being deleted yet; every one
/// of them is still there, so it is added to `waiting`.
async fn delete_waited<K>(
    api: &Api<K>,
    listed: Vec<K>,
    kind: &str,
    changes: &mut Vec<String>,
    waiting: &mut Vec<String>,
) -> Result<(), ProviderError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    for object in listed {
        let name = object.name_any();
        waiting.push(format!("{kind} {name}"));
        if object.meta().deletion_timestamp.is_none() {
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => changes.push(format!("deleted {kind} {name}")),
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(api_error(&format!("delete {kind} {name}"), e)),
            }
        }
    }
    Ok(())
}

/// Delete every object of `api` that `params` selects, without waiting (errors say `list` or
/// `delete`).
async fn delete_labelled<K>(
    api: &Api<K>,
    params: &ListParams,
    list: &str,
    delete: &str,
) -> Result<(), ProviderError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    for object in api
        .list(params)
        .await
        .map_err(|e| api_error(list, e))?
        .items
    {
        match api
            .delete(&object.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(api_error(delete, e)),
        }
    }
    Ok(())
}
