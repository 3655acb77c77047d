//! Condition reasons of the zoned provider.

use crate::provider::Reason;

/// No zone's load balancer is Ready yet.
pub const ZONES_PROVISIONING: Reason = Reason::normal("ZonesProvisioning");
/// A zone's load balancer is not Ready: its addresses are out of the name until it is back.
pub const ZONE_DOWN: Reason = Reason::problem("ZoneDown");
/// No zone serves: the name keeps the last addresses that did.
pub const NO_ZONE_SERVING: Reason = Reason::problem("NoZoneServing");
/// A zone's LoadBalancer cannot be made: its name is another object's, or the zone contradicts
/// the LoadBalancer's selector.
pub const ZONE_REFUSED: Reason = Reason::problem("ZoneRefused");
/// A zone's load balancer is Ready with no active target: its addresses wait for one.
pub const ZONE_WITHOUT_TARGETS: Reason = Reason::normal("ZoneWithoutTargets");
/// Targets the LoadBalancer selects that no zone takes: they never serve.
pub const TARGETS_IN_NO_ZONE: Reason = Reason::problem("TargetsInNoZone");

/// Every reason above.
pub const ALL: &[Reason] = &[
    ZONES_PROVISIONING,
    ZONE_DOWN,
    NO_ZONE_SERVING,
    ZONE_REFUSED,
    ZONE_WITHOUT_TARGETS,
    TARGETS_IN_NO_ZONE,
];
