//! Leader election: only the replica holding the Lease reconciles; the others wait, ready.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use capi_lb_api::constants::FIELD_MANAGER;
use futures::FutureExt;
use futures::future::BoxFuture;
use kube_lease_manager::LeaseManagerBuilder;

use super::{LeaderElection, RunError};
use crate::telemetry::Health;

/// This replica's right to reconcile: the held Lease (if leader election is on), a signal when
/// it is lost, and how to give it back.
pub(super) struct Leadership {
    /// Resolves when the Lease is lost (never without leader election).
    lost_signal: BoxFuture<'static, ()>,
    /// Set once the Lease was lost.
    lost: Arc<AtomicBool>,
    /// Gives the Lease back (the manager releases it when its channel closes), so that a standby
    /// takes over at once instead of after the lease duration.
    release: BoxFuture<'static, ()>,
}

impl Leadership {
    /// Wait until this replica leads (at once without leader election); `None` when `shutdown`
    /// comes first.
    pub(super) async fn acquire(
        client: &kube::Client,
        election: &LeaderElection,
        health: &Health,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<Option<Self>, RunError> {
        let lost = Arc::new(AtomicBool::new(false));
        let Some((namespace, lease_name)) = election.lease().map_err(RunError::Options)? else {
            return Ok(Some(Self {
                lost_signal: Box::pin(futures::future::pending()),
                lost,
                release: Box::pin(futures::future::ready(())),
            }));
        };
        health.set_ready(true);
        let manager = LeaseManagerBuilder::new(client.clone(), lease_name)
            .with_namespace(namespace)
            .with_identity(&election.identity)
            .with_duration(election.duration_seconds)
            .with_grace(election.grace_seconds)
            .with_field_manager(format!("{FIELD_MANAGER}-leader-election"))
            .build()
            .await
            .map_err(|e| RunError::LeaderElection(e.to_string()))?;
        let (mut leader, task) = manager.watch().await;
        tracing::info!(
            lease = %format!("{namespace}/{lease_name}"),
            identity = %election.identity,
            "waiting to become the leader"
        );
        let mut shutdown = std::pin::pin!(shutdown);
        while !*leader.borrow_and_update() {
            tokio::select! {
                changed = leader.changed() => {
                    if changed.is_err() {
                        return Err(RunError::LeaderElection("the lease manager stopped".into()));
                    }
                }
                () = &mut shutdown => return Ok(None),
            }
        }
        tracing::info!(identity = %election.identity, "became the leader");
        let mut watch = leader.clone();
        let flag = lost.clone();
        Ok(Some(Self {
            lost_signal: Box::pin(async move {
                while watch.changed().await.is_ok() {
                    if !*watch.borrow() {
                        break;
                    }
                }
                flag.store(true, Ordering::SeqCst);
            }),
            lost,
            release: Box::pin(async move {
                drop(leader);
                let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
            }),
        }))
    }

    /// Resolves on `shutdown` or when the Lease is lost, whichever comes first.
    pub(super) fn stop_on(
        &mut self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> futures::future::Shared<BoxFuture<'static, ()>> {
        let lost = std::mem::replace(&mut self.lost_signal, Box::pin(futures::future::pending()));
        let stop: BoxFuture<'static, ()> = Box::pin(async move {
            tokio::select! {
                () = shutdown => {},
                () = lost => {
                    tracing::error!("lost the leader lease: stopping reconciles");
                },
            }
        });
        stop.shared()
    }

    /// Give the Lease back; whether it had been lost.
    pub(super) async fn release(self) -> bool {
        self.release.await;
        self.lost.load(Ordering::SeqCst)
    }
}
