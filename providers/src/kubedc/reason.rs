//! Condition reasons of the kube-dc provider: what its conditions say while it waits for kube-dc,
//! or on a problem only the user or the cluster's operator can fix.

use crate::provider::Reason;

/// kube-dc has not allocated the EIp yet.
pub const EIP_NOT_READY: Reason = Reason::normal("EIpNotReady");
/// The EIp has been pending for long (public IP quota exhausted, or kube-dc stuck).
pub const EIP_STUCK: Reason = Reason::problem("EIpStuck");
/// The EIp named in `spec.eipName` does not exist.
pub const EIP_NOT_FOUND: Reason = Reason::problem("EIpNotFound");
/// kube-dc has not put the EIp's address on the Service yet.
pub const SERVICE_WITHOUT_INGRESS: Reason = Reason::normal("ServiceWithoutIngress");
/// `spec.externalNetworkType` changed: a new EIp and Service are being made on the new network
/// while the old ones serve, or the old ones are being deleted after the switch.
pub const EXTERNAL_NETWORK_CHANGING: Reason = Reason::normal("ExternalNetworkChanging");
/// The provider's EIp was deleted while its Service is bound: kube-dc holds it (finalizer and
/// owners) and it still serves, until the Service goes.
pub const EIP_DELETING: Reason = Reason::problem("EIpDeleting");
/// The namespace is not a kube-dc Project's: kube-dc never acts there.
pub const NOT_A_KUBEDC_PROJECT: Reason = Reason::problem("NotAKubeDCProject");
/// kube-dc's CRDs are not installed in this cluster.
pub const KUBEDC_NOT_INSTALLED: Reason = Reason::problem("KubeDCNotInstalled");
/// The Secret (or its key) with the kubeconfig of `spec.cluster` does not exist.
pub const KUBECONFIG_NOT_FOUND: Reason = Reason::problem("KubeconfigNotFound");
/// The kubeconfig Secret lacks the label the admin requires of credentials.
pub const CREDENTIALS_NOT_ALLOWED: Reason = capi_lb_api::constants::reason::CREDENTIALS_NOT_ALLOWED;
/// An object the provider would create exists and is not capi-lb's.
pub const NAME_CONFLICT: Reason = capi_lb_api::constants::reason::NAME_CONFLICT;

/// Every reason above.
pub const ALL: &[Reason] = &[
    EIP_NOT_READY,
    EIP_STUCK,
    EIP_NOT_FOUND,
    SERVICE_WITHOUT_INGRESS,
    EXTERNAL_NETWORK_CHANGING,
    EIP_DELETING,
    NOT_A_KUBEDC_PROJECT,
    KUBEDC_NOT_INSTALLED,
    KUBECONFIG_NOT_FOUND,
    CREDENTIALS_NOT_ALLOWED,
    NAME_CONFLICT,
];
