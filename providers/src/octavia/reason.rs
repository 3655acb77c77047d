//! Condition reasons of the Octavia provider: what its conditions say when it waits on a state that
//! needs time, or on a problem only the user or the cloud's operator can fix.

use crate::provider::Reason;

/// The credentials Secret does not exist.
pub const CREDENTIALS_NOT_FOUND: Reason = Reason::problem("CredentialsNotFound");
/// The credentials Secret lacks the label the admin requires of credentials.
pub const CREDENTIALS_NOT_ALLOWED: Reason = capi_lb_api::constants::reason::CREDENTIALS_NOT_ALLOWED;
/// The credentials Secret lacks the key, or its clouds.yaml is unusable or lacks the cloud.
pub const CREDENTIALS_INVALID: Reason = Reason::problem("CredentialsInvalid");
/// Keystone refused the credentials.
pub const AUTHENTICATION_FAILED: Reason = Reason::problem("AuthenticationFailed");
/// The Keystone catalog has no `load-balancer` endpoint (for the region).
pub const ENDPOINT_NOT_IN_CATALOG: Reason = Reason::problem("EndpointNotInCatalog");
/// Octavia refused a create for quota.
pub const QUOTA_EXCEEDED: Reason = Reason::problem("QuotaExceeded");
/// Octavia does not know the requested provider driver or flavor.
pub const PROVIDER_OR_FLAVOR_NOT_FOUND: Reason = Reason::problem("ProviderOrFlavorNotFound");
/// Octavia refused a request as invalid.
pub const REQUEST_REJECTED: Reason = Reason::problem("RequestRejected");
/// The load balancer (or a child) is PENDING_*; Octavia refuses writes until it is not.
pub const LOAD_BALANCER_PENDING: Reason = Reason::normal("LoadBalancerPending");
/// The load balancer is in ERROR (terminal) and `recreateOnError` is off.
pub const LOAD_BALANCER_ERROR: Reason = Reason::problem("LoadBalancerError");
/// The cloud's Octavia API is too old for a feature the spec uses.
pub const API_VERSION_UNSUPPORTED: Reason = Reason::problem("APIVersionUnsupported");
/// A member address is not an IP address (Octavia members need one).
pub const MEMBER_ADDRESS_NOT_IP: Reason = Reason::problem("MemberAddressNotIP");
/// The floating IP named in `spec.floatingIP.address` does not exist (in this project).
pub const FLOATING_IP_NOT_FOUND: Reason = Reason::problem("FloatingIPNotFound");
/// The given floating IP is on another port, or the VIP port has a floating IP capi-lb did not
/// allocate; capi-lb never takes one over.
pub const FLOATING_IP_IN_USE: Reason = Reason::problem("FloatingIPInUse");
/// The external network of `spec.floatingIP.networkID` does not exist.
pub const FLOATING_NETWORK_NOT_FOUND: Reason = Reason::problem("FloatingNetworkNotFound");
/// The OctaviaLoadBalancer (and so the credentials) is gone while the LoadBalancer is deleted.
pub const CREDENTIALS_UNAVAILABLE: Reason = Reason::problem("CredentialsUnavailable");

/// Keystone, Octavia or Neutron answered with more than capi-lb reads (`http::MAX_ANSWER`).
pub const ANSWER_TOO_LARGE: Reason = Reason::problem("AnswerTooLarge");

/// Every reason above.
pub const ALL: &[Reason] = &[
    CREDENTIALS_NOT_FOUND,
    CREDENTIALS_NOT_ALLOWED,
    CREDENTIALS_INVALID,
    AUTHENTICATION_FAILED,
    ENDPOINT_NOT_IN_CATALOG,
    QUOTA_EXCEEDED,
    PROVIDER_OR_FLAVOR_NOT_FOUND,
    REQUEST_REJECTED,
    LOAD_BALANCER_PENDING,
    LOAD_BALANCER_ERROR,
    API_VERSION_UNSUPPORTED,
    MEMBER_ADDRESS_NOT_IP,
    FLOATING_IP_NOT_FOUND,
    FLOATING_IP_IN_USE,
    FLOATING_NETWORK_NOT_FOUND,
    CREDENTIALS_UNAVAILABLE,
    ANSWER_TOO_LARGE,
];
