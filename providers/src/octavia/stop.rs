//! Why an operation of the provider stopped before the end ([`Stop`]: wait, or fail), and how soon to
//! look again while Octavia is busy ([`POLL`]). The lowest module of the provider: every other one
//! (the OpenStack side in `api` included) uses it, and it uses none of them.

use std::time::Duration;

use crate::error::ProviderError;
use crate::provider::Progress;

/// How soon to look again while Octavia is busy with a load balancer.
pub const POLL: Duration = Duration::from_secs(2);

/// Why an operation stopped before the end: a state that needs time (a `Progress::Pending`), or an
/// error.
#[derive(Debug)]
pub enum Stop {
    /// Look again later, reported with the progress' reason.
    Wait(Progress),
    /// Back off (transient) or report (permanent).
    Error(ProviderError),
}

impl From<ProviderError> for Stop {
    fn from(e: ProviderError) -> Self {
        Stop::Error(e)
    }
}

/// A call's result as the `Provider` trait reports it: a wait is progress, not an error.
pub(super) fn done_or_wait(result: Result<Progress, Stop>) -> Result<Progress, ProviderError> {
    match result {
        Ok(progress) | Err(Stop::Wait(progress)) => Ok(progress),
        Err(Stop::Error(e)) => Err(e),
    }
}
