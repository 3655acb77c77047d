//! What every step of the provider shares: [`Step`], how often to look again, API errors, and the
//! progress reported when kube-dc is not installed or a name is taken.

use std::time::Duration;

use super::reason;
pub(super) use crate::lbservice::{Step, api_error, is_not_found};
use crate::provider::{LoadBalancerIdentity, Progress};

/// How often to look again while waiting for kube-dc.
pub(super) const POLL: Duration = Duration::from_secs(5);
/// How often to look again while kube-dc is not installed or a name is taken.
pub(super) const SLOW_POLL: Duration = Duration::from_secs(60);

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
