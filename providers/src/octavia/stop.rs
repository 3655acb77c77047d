//! Why an operation of the provider stopped before the end ([`Stop`]: wait, Octavia busy, or fail).
//! With `reason`, the lowest module of the provider: every other one (the OpenStack side in `api`
//! included) uses it, and it uses only `reason`.

use std::time::Duration;

use super::reason;
use crate::error::ProviderError;
use crate::provider::Progress;

/// Why an operation stopped before the end: a state that needs time (a `Progress::Pending`), an
/// object Octavia is busy with, or an error.
#[derive(Debug)]
pub enum Stop {
    /// Look again later, reported with the progress' reason.
    Wait(Progress),
    /// Octavia refused a write with 409 (an object is PENDING): look again on the schedule of the
    /// LoadBalancer's wait (`relook`), reported with this message.
    Busy(String),
    /// Back off (transient) or report (permanent).
    Error(ProviderError),
}

impl From<ProviderError> for Stop {
    fn from(e: ProviderError) -> Self {
        Stop::Error(e)
    }
}

/// How often to look again after a problem only the user or the cloud's operator can fix.
const SLOW: Duration = Duration::from_secs(60);

/// Stop to wait on a problem only the user or the cloud's operator can fix, looked at again after
/// [`SLOW`].
pub(super) fn wait(reason: crate::provider::Reason, message: String) -> Stop {
    Stop::Wait(crate::provider::Progress::pending_because(
        reason, message, SLOW,
    ))
}

/// A call's result as the `Provider` trait reports it: a wait is progress, not an error; Octavia
/// busy is a wait of reason `LoadBalancerPending`, looked at again after `relook()`.
pub(super) fn done_or_wait(
    result: Result<Progress, Stop>,
    relook: impl FnOnce() -> Duration,
) -> Result<Progress, ProviderError> {
    match result {
        Ok(progress) | Err(Stop::Wait(progress)) => Ok(progress),
        Err(Stop::Busy(message)) => Ok(Progress::pending_because(
            reason::LOAD_BALANCER_PENDING,
            message,
            relook(),
        )),
        Err(Stop::Error(e)) => Err(e),
    }
}
