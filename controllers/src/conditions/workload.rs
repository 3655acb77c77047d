//! The `WorkloadEndpoints` condition (`spec.workloadEndpoints`): whether the workload
//! cluster's `default/kubernetes` endpoints are the load balancer's.

use capi_lb_api::conditions::DesiredCondition;
use capi_lb_api::constants::{condition as c, reason as r};

use crate::workload::Finding;

/// Why a LoadBalancer has no finding about its workload cluster to report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotLooked {
    /// It has not been Ready since capi-lb started: nothing is written before it is.
    NotReady,
    /// The first look is still to come.
    Pending,
    /// This process writes to no workload cluster (`simulate`).
    NoTask,
    /// `spec.workloadEndpoints` was switched off: the endpoints are left as they are.
    Off,
}

/// The `WorkloadEndpoints` condition from the last finding, or why there is none.
pub fn workload_condition(finding: Result<&Finding, NotLooked>) -> DesiredCondition {
    match finding {
        Ok(found) if found.synced => {
            DesiredCondition::true_(c::WORKLOAD_ENDPOINTS, found.reason, found.message.clone())
        }
        Ok(found) => {
            DesiredCondition::false_(c::WORKLOAD_ENDPOINTS, found.reason, found.message.clone())
        }
        Err(why) => DesiredCondition::false_(
            c::WORKLOAD_ENDPOINTS,
            r::WORKLOAD_ENDPOINTS_PENDING,
            match why {
                NotLooked::NotReady => {
                    "not written: the LoadBalancer has not been Ready yet (its addresses are written once it is)"
                }
                NotLooked::Pending => "the first look at the workload cluster is still to come",
                NotLooked::NoTask => "this capi-lb writes to no workload cluster (simulate)",
                NotLooked::Off => {
                    "not kept: spec.workloadEndpoints is off; the workload cluster's endpoints are left as they are"
                }
            },
        ),
    }
}
