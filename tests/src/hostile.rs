//! Providers that answer as a hostile or broken cloud would, wrapped around a real one: the
//! in-memory world (`World::wrapping_providers`) and the real controller on the real apiserver
//! (`TestNs::start_wrapped`, `capi_lb::run::run_wrapped`) put them in front of the in-memory
//! provider.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use capi_lb_api::loadbalancer::LoadBalancerAddress;
use capi_lb_providers::{
    DeleteOutcome, DeleteRequest, EnsureOutcome, EnsureRequest, MembersOutcome, MembersRequest,
    Provider, ProviderError,
};

/// The real provider, answering each LoadBalancer named in `mapped` with the IPv4-mapped IPv6
/// form of the address given for it: what a tenant's remote kube-dc server, a cloud or a Machine's
/// status may report (the in-memory provider's own pools refuse such CIDRs, as the apiserver's CEL
/// does).
pub struct MappedAddresses {
    /// The provider whose answers are changed.
    pub real: Arc<dyn Provider>,
    /// LoadBalancer name to the IPv4 address answered in its mapped form.
    pub mapped: BTreeMap<String, String>,
}

#[async_trait]
impl Provider for MappedAddresses {
    async fn ensure(&self, request: EnsureRequest<'_>) -> Result<EnsureOutcome, ProviderError> {
        let name = request.identity.name.clone();
        let mut outcome = self.real.ensure(request).await?;
        if let Some(address) = self.mapped.get(&name) {
            outcome.addresses = vec![LoadBalancerAddress::ip(format!("::ffff:{address}"))];
        }
        Ok(outcome)
    }

    async fn converge_members(
        &self,
        request: MembersRequest<'_>,
    ) -> Result<MembersOutcome, ProviderError> {
        self.real.converge_members(request).await
    }

    async fn delete(&self, request: DeleteRequest<'_>) -> Result<DeleteOutcome, ProviderError> {
        self.real.delete(request).await
    }
}
