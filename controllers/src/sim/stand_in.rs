//! The in-memory provider standing in for another provider in `capi-lb simulate`: a LoadBalancer
//! whose `infrastructureRef` names a `KubeDCLoadBalancer`, `OctaviaLoadBalancer` or
//! `ServiceLoadBalancer` keeps it, and the object stays as written (checked against its CRD schema
//! when it was loaded); only the calls go to the in-memory cloud, as if the object were an
//! `InMemoryLoadBalancer` with the defaults (addresses from the documentation range 203.0.113.0/24,
//! no provisioning delay). No cloud and no remote cluster is contacted.

use async_trait::async_trait;
use capi_lb_api::InMemoryLoadBalancer;
use capi_lb_providers::entry::Entry;
use capi_lb_providers::error::ProviderError;
use capi_lb_providers::inmemory::InMemoryProvider;
use capi_lb_providers::provider::{
    DeleteOutcome, DeleteRequest, EnsureOutcome, EnsureRequest, MembersOutcome, MembersRequest,
    Provider,
};
use capi_lb_providers::{kubedc, octavia, servicelb};
use kube::Resource;
use kube::core::{DynamicObject, TypeMeta};
use serde_json::json;

/// The providers the in-memory provider stands in for, with what of theirs is not simulated.
pub const STOOD_IN_FOR: &[(&Entry, &str)] = &[
    (
        &kubedc::ENTRY,
        "kube-dc-specific settings such as the EIp and its network are not simulated",
    ),
    (
        &octavia::ENTRY,
        "Octavia-specific settings such as the floating IP are not simulated",
    ),
    (
        &servicelb::ENTRY,
        "the Service of the named load-balancer class is not simulated",
    ),
];

/// What is not simulated of the provider whose infrastructure kind is `kind`, when the in-memory
/// provider stands in for it.
pub fn stood_in_for(kind: &str) -> Option<&'static str> {
    STOOD_IN_FOR
        .iter()
        .find(|(entry, _)| (entry.infrastructure)().kind == kind)
        .map(|(_, note)| *note)
}

/// The in-memory provider answering for another provider.
#[derive(Clone, Debug)]
pub struct StandIn {
    inner: InMemoryProvider,
}

impl StandIn {
    /// A stand-in over the in-memory provider `inner`.
    pub fn new(inner: InMemoryProvider) -> Self {
        Self { inner }
    }
}

/// The infrastructure object as the in-memory provider reads it: same name and UID (so the cloud's
/// ownership tags follow the real object), an `InMemoryLoadBalancer` with the default spec.
fn as_in_memory(infra: &DynamicObject) -> DynamicObject {
    DynamicObject {
        types: Some(TypeMeta {
            api_version: InMemoryLoadBalancer::api_version(&()).into_owned(),
            kind: InMemoryLoadBalancer::kind(&()).into_owned(),
        }),
        metadata: infra.metadata.clone(),
        data: json!({"spec": {}}),
    }
}

#[async_trait]
impl Provider for StandIn {
    async fn ensure(&self, request: EnsureRequest<'_>) -> Result<EnsureOutcome, ProviderError> {
        let infra = as_in_memory(request.infra);
        self.inner
            .ensure(EnsureRequest {
                infra: &infra,
                ..request
            })
            .await
    }

    async fn converge_members(
        &self,
        request: MembersRequest<'_>,
    ) -> Result<MembersOutcome, ProviderError> {
        let infra = as_in_memory(request.infra);
        self.inner
            .converge_members(MembersRequest {
                infra: &infra,
                ..request
            })
            .await
    }

    async fn delete(&self, request: DeleteRequest<'_>) -> Result<DeleteOutcome, ProviderError> {
        let infra = request.infra.map(as_in_memory);
        self.inner
            .delete(DeleteRequest {
                infra: infra.as_ref(),
                ..request
            })
            .await
    }
}
