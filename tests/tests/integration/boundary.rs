//! A panic is a bug, never an outage: a provider call that panics fails the pass of its own
//! LoadBalancer (a Warning Event `InternalError`, the panics metric, an error its controller backs
//! off on), and every other LoadBalancer goes on being reconciled by the same controller.

use std::sync::Arc;

use async_trait::async_trait;
use capi_lb::error::Error;
use capi_lb_api::constants::event;
use capi_lb_providers::{
    DeleteOutcome, DeleteRequest, EnsureOutcome, EnsureRequest, MembersOutcome, MembersRequest,
    Provider, ProviderError,
};
use capi_lb_tests::*;

/// The real provider, but `ensure` panics for the LoadBalancer named `doomed`, as a library's
/// arithmetic on a value a tenant's server chose once did.
struct PanicsFor {
    real: Arc<dyn Provider>,
    doomed: &'static str,
}

#[async_trait]
impl Provider for PanicsFor {
    async fn ensure(&self, request: EnsureRequest<'_>) -> Result<EnsureOutcome, ProviderError> {
        if request.identity.name == self.doomed {
            let instant = std::time::Instant::now();
            let _ = instant + std::time::Duration::from_secs(u64::MAX);
        }
        self.real.ensure(request).await
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

#[tokio::test]
async fn a_panicking_provider_call_fails_its_own_load_balancer_alone() {
    let world = world(vec![
        lb("doomed").build(),
        infra("doomed").build(),
        lb("fine").build(),
        infra("fine").build(),
    ])
    .await
    .wrapping_providers(|_, real| {
        Arc::new(PanicsFor {
            real,
            doomed: "doomed",
        })
    });
    for round in 0..3 {
        let failed = world.reconcile(NS, "doomed").await;
        assert!(
            matches!(failed, Err(Error::Panicked { ref panic, .. })
                if panic.0.contains("overflow")),
            "round {round}: {failed:?}"
        );
        world.reconcile(NS, "fine").await.unwrap();
    }
    for _ in 0..5 {
        world.reconcile(NS, "fine").await.unwrap();
    }
    assert!(is_ready(&get_lb(&world, "fine").await));
    let doomed = get_lb(&world, "doomed").await;
    assert!(doomed.status.is_none_or(|s| !s.ready));
    assert!(warned(&world, event::INTERNAL_ERROR));
    let metrics = world.ctx.metrics.encode();
    assert!(
        metrics.contains("capi_lb_panics_total{task=\"loadbalancer\"} 3"),
        "{metrics}"
    );
}
