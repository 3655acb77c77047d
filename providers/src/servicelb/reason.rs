//! Condition reasons of the Service provider: what its conditions say while the Service's
//! implementation has not given it an address, or on a problem only the user or the cluster's
//! operator can fix.

use crate::provider::Reason;

/// The Service has no address yet; its implementation has not answered so far.
pub const ADDRESS_PENDING: Reason = Reason::normal("AddressPending");
/// Nothing has given the Service an address within `spec.addressTimeoutSeconds`: no controller
/// seems to implement its class.
pub const NO_IMPLEMENTATION: Reason = Reason::problem("NoImplementation");
/// The Service's implementation reported that it cannot give it an address (a Warning Event on the
/// Service, quoted in the message: pool exhausted, requested address not in a pool, ...).
pub const ADDRESS_NOT_ASSIGNED: Reason = Reason::problem("AddressNotAssigned");
/// The implementation gave the Service an address other than `spec.loadBalancerIP`.
pub const REQUESTED_ADDRESS_NOT_ASSIGNED: Reason = Reason::problem("RequestedAddressNotAssigned");
/// A Service with the provider's name exists and is not capi-lb's.
pub const NAME_CONFLICT: Reason = capi_lb_api::constants::reason::NAME_CONFLICT;

/// Every reason above.
pub const ALL: &[Reason] = &[
    ADDRESS_PENDING,
    NO_IMPLEMENTATION,
    ADDRESS_NOT_ASSIGNED,
    REQUESTED_ADDRESS_NOT_ASSIGNED,
    NAME_CONFLICT,
];
