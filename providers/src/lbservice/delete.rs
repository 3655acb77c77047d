//! Deleting what was made for a LoadBalancer, found by its labels only: the Services (waited for
//! until they are gone, since their implementation releases the address first) and their
//! EndpointSlices and Endpoints.

use std::fmt::Debug;

use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::{api_error, is_not_found};
use crate::error::ProviderError;
use crate::provider::{LoadBalancerIdentity, tags};

/// Everything made for `identity`, and for the infrastructure object `infra_uid` when it is known
/// (during a migration between two infrastructure objects of one provider the LoadBalancer owns
/// both sets).
pub fn selector(identity: &LoadBalancerIdentity, infra_uid: Option<&str>) -> ListParams {
    let mut selector = format!("{}={}", tags::UID, identity.uid);
    if let Some(uid) = infra_uid {
        selector.push_str(&format!(",{}={uid}", tags::INFRASTRUCTURE_UID));
    }
    ListParams::default().labels(&selector)
}

/// Delete the Services `params` selects in `namespace` that are `identity`'s (their namespace and
/// name annotations too: a Service someone else labelled with the UID is left alone; each one
/// still there is added to `waiting`), and their EndpointSlices and Endpoints.
pub async fn delete_services(
    client: &kube::Client,
    namespace: &str,
    params: &ListParams,
    identity: &LoadBalancerIdentity,
    changes: &mut Vec<String>,
    waiting: &mut Vec<String>,
) -> Result<(), ProviderError> {
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let listed: Vec<Service> = services
        .list(params)
        .await
        .map_err(|e| api_error("list Services", e))?
        .items
        .into_iter()
        .filter(|s| super::named_for(&s.metadata, identity))
        .collect();
    delete_waited(&services, listed, "Service", changes, waiting).await?;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    delete_labelled(&slices, params, "EndpointSlices").await?;
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), namespace);
    delete_labelled(&endpoints, params, "Endpoints").await
}

/// Delete each of `listed` (objects of `kind` in `api`) that is not being deleted yet; every one
/// of them is still there, so it is added to `waiting`.
pub async fn delete_waited<K>(
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

/// Delete every object of `api` that `params` selects, without waiting (`kind`, plural, for
/// errors).
async fn delete_labelled<K>(
    api: &Api<K>,
    params: &ListParams,
    kind: &str,
) -> Result<(), ProviderError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    for object in api
        .list(params)
        .await
        .map_err(|e| api_error(&format!("list {kind}"), e))?
        .items
    {
        match api
            .delete(&object.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(api_error(&format!("delete {kind}"), e)),
        }
    }
    Ok(())
}
