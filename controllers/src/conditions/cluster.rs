//! The `ClusterEndpoint` condition: whether the Cluster's `spec.controlPlaneEndpoint` is this
//! load balancer's endpoint.

use capi_lb_api::conditions::DesiredCondition;
use capi_lb_api::constants::{ANNOTATION_LOAD_BALANCER_REF, condition as c, reason as r};

/// How the Cluster's endpoint stands.
#[derive(Clone, Debug, PartialEq)]
pub enum ClusterEndpoint<'a> {
    /// `spec.clusterName` names a Cluster (`namespace/name`) that does not exist.
    ClusterNotFound(&'a str),
    /// Whether the Cluster's control plane names this LoadBalancer cannot be told: why.
    ControlPlaneUnreadable { cluster: &'a str, message: String },
    /// `spec.controlPlane` asks for the endpoint, but neither the Cluster nor its control plane
    /// names this LoadBalancer in `loadbalancer.cluster.x-k8s.io/load-balancer-ref`.
    NotNamed { cluster: &'a str },
    /// The provider has no address yet.
    WaitingForAddress,
    /// The Cluster has another endpoint (`current`), which is never overwritten; this load
    /// balancer's is `ours`.
    Mismatch {
        cluster: &'a str,
        current: String,
        ours: String,
    },
    /// The Cluster uses this load balancer's endpoint.
    Set { cluster: &'a str, endpoint: String },
}

/// The `ClusterEndpoint` condition.
pub fn cluster_endpoint_condition(endpoint: &ClusterEndpoint<'_>) -> DesiredCondition {
    let false_ =
        |reason, message: String| DesiredCondition::false_(c::CLUSTER_ENDPOINT, reason, message);
    match endpoint {
        ClusterEndpoint::ClusterNotFound(cluster) => false_(
            r::CLUSTER_NOT_FOUND,
            format!("Cluster {cluster} does not exist"),
        ),
        ClusterEndpoint::ControlPlaneUnreadable { cluster, message } => false_(
            r::CONTROL_PLANE_UNREADABLE,
            format!(
                "cannot tell whether Cluster {cluster}'s control plane names this LoadBalancer in {ANNOTATION_LOAD_BALANCER_REF}: {message}"
            ),
        ),
        ClusterEndpoint::NotNamed { cluster } => false_(
            r::CLUSTER_ENDPOINT_NOT_NAMED,
            format!(
                "Cluster {cluster} does not name this LoadBalancer: its endpoint is written only when the Cluster (or its control plane) carries the annotation {ANNOTATION_LOAD_BALANCER_REF}: <this LoadBalancer's name>; spec.controlPlane says how, not whether"
            ),
        ),
        ClusterEndpoint::WaitingForAddress => false_(
            r::WAITING_FOR_ADDRESS,
            "the provider has no address to publish to the Cluster yet".into(),
        ),
        ClusterEndpoint::Mismatch {
            cluster,
            current,
            ours,
        } => false_(
            r::CLUSTER_ENDPOINT_MISMATCH,
            format!(
                "Cluster {cluster} already has spec.controlPlaneEndpoint {current}; this LoadBalancer's endpoint is {ours}. It was left unchanged: the endpoint is in the cluster's certificates and must not change"
            ),
        ),
        ClusterEndpoint::Set { cluster, endpoint } => DesiredCondition::true_(
            c::CLUSTER_ENDPOINT,
            r::CLUSTER_ENDPOINT_SET,
            format!("Cluster {cluster} uses {endpoint}"),
        ),
    }
}
