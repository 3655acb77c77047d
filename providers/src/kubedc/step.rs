//! What every step of the provider shares: [`Step`], how often to look again, API errors, and the
//! progress reported when kube-dc is not installed or a name is taken.

use std::time::Duration;

use super::reason;
pub(super) use crate::lbservice::{api_error, is_not_found};
use crate::provider::{LoadBalancerIdentity, Progress};

/// How often to look again while waiting for kube-dc.
pub(super) const POLL: Duration = Duration::from_secs(5);
/// How often to look again while kube-dc is not installed or a name is taken.
pub(super) const SLOW_POLL: Duration = Duration::from_secs(60);

/// How far one step of [`Provider::ensure`](crate::provider::Provider::ensure) got: what it made or
/// found, or the progress to report when the reconcile has to stop there (kube-dc is not installed, a
/// name is taken, the EIp named in `spec.eipName` does not exist). API failures are not a step's
/// outcome but a [`ProviderError`].
#[derive(Debug)]
pub(super) enum Step<T> {
    /// The step is done; carry on with this.
    Ready(T),
    /// Stop here and report this progress (pending, with its condition reason).
    Wait(Progress),
}

/// Pending on `NameConflict`: `kind` `name` exists and is not capi-lb's.
pub(super) fn conflict(kind: &str, name: &str, identity: &LoadBalancerIdentity) -> Progress {
    Progress::pending_because(
        reason::NAME_CONFLICT,
        format!(
            "{kind} {}/{name} already exists and is not managed by capi-lb for LoadBalancer {}; it was left untouched. Delete or rename it, or use another KubeDCLoadBalancer name",
            identity.namespace,
            identity.display()
        ),
        SLOW_POLL,
    )
}

/// Pending on `KubeDCNotInstalled`.
pub(super) fn not_installed() -> Progress {
    Progress::pending_because(
        reason::KUBEDC_NOT_INSTALLED,
        "kube-dc's CRDs (eips.kube-dc.com) are not installed in this cluster; the kube-dc provider waits for them",
        SLOW_POLL,
    )
}
