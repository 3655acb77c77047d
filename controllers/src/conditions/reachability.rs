//! The `Reachable` condition (`spec.reachability`): what the last probe of the endpoint found.

use capi_lb_api::conditions::DesiredCondition;
use capi_lb_api::constants::{condition as c, reason as r};

use crate::reachability::Finding;

/// Why a LoadBalancer asking for probes has no finding to report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotProbed {
    /// It is not Ready: its endpoint is not probed.
    NotReady,
    /// The first probe is still to come.
    Pending,
    /// This process probes nothing (`simulate`).
    NoProber,
    /// `spec.reachability` was removed: no more probes (what was last found is not kept).
    NotAsked,
}

/// The `Reachable` condition from the last finding, or why there is none.
pub fn reachable_condition(finding: Result<&Finding, NotProbed>) -> DesiredCondition {
    match finding {
        Ok(found) if found.reachable => {
            DesiredCondition::true_(c::REACHABLE, found.reason, found.message.clone())
        }
        Ok(found) => DesiredCondition::false_(c::REACHABLE, found.reason, found.message.clone()),
        Err(why) => DesiredCondition::false_(
            c::REACHABLE,
            r::NOT_PROBED,
            match why {
                NotProbed::NotReady => "not probed: the LoadBalancer is not Ready",
                NotProbed::Pending => "the first probe of the endpoint is still to come",
                NotProbed::NoProber => "this capi-lb probes nothing (simulate)",
                NotProbed::NotAsked => "not probed: spec.reachability is unset",
            },
        ),
    }
}
