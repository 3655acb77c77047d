//! The `WorkloadEndpoints` condition (`spec.workloadEndpoints`): whether the workload
//! cluster's `default/kubernetes` endpoints are the load balancer's.

use capi_lb_api::conditions::DesiredCondition;
use capi_lb_api::constants::{condition as c, reason as r};

use crate::workload::Finding;

/// Why a LoadBalancer has no finding about its workload cluster to report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotLooked {
    /// The Cluster does not name this LoadBalancer in `loadBalancerRef` (or that cannot be told:
    /// the message says why): nothing is written into its workload cluster.
    NotNamed(String),
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
        Err(NotLooked::NotNamed(why)) => DesiredCondition::false_(
            c::WORKLOAD_ENDPOINTS,
            r::CLUSTER_ENDPOINT_NOT_NAMED,
            format!(
                "not written: {why}; a workload cluster's default/kubernetes is written only for the LoadBalancer its Cluster names in loadbalancer.cluster.x-k8s.io/loadBalancerRef"
            ),
        ),
        Err(why) => DesiredCondition::false_(
            c::WORKLOAD_ENDPOINTS,
            r::WORKLOAD_ENDPOINTS_PENDING,
            match why {
                NotLooked::NotNamed(_) => "",
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
