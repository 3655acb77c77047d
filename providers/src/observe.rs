//! Observing the requests providers make to their cloud's API (for metrics, benchmarks and tests).

use std::time::Duration;

/// Receives one record per cloud API request.
pub trait ApiObserver: Send + Sync {
    /// Called after every request, including failed ones.
    fn observe(&self, call: &ApiCall<'_>);
}

/// One cloud API request, as seen by an [`ApiObserver`].
#[derive(Clone, Copy, Debug)]
pub struct ApiCall<'a> {
    /// The cloud service, e.g. `identity` or `load-balancer` (OpenStack).
    pub service: &'a str,
    /// What was done, e.g. `loadbalancer.create`, `member.batch-update`.
    pub operation: &'a str,
    /// HTTP status, or `None` when no answer came (connection refused, timeout).
    pub status: Option<u16>,
    /// How long it took.
    pub duration: Duration,
}
