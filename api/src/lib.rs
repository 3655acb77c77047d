//! API types of capi-lb: the `LoadBalancer` custom resource and the providers' infrastructure kinds, read-only
//! views of the Cluster API kinds capi-lb reads, shared constants, condition helpers, derived names
//! and client-side schema validation. This crate does no I/O.

pub mod capi;
pub mod conditions;
pub mod constants;
pub mod control_plane;
pub mod dnslb;
pub mod externaldns;
pub mod inmemory;
pub mod kinds;
pub mod kubedc;
pub mod loadbalancer;
pub mod naming;
pub mod octavia;
pub mod servicelb;
pub mod target;
pub mod validation;
pub mod zoned;

pub use dnslb::{DNSLoadBalancer, DNSLoadBalancerSpec, DNSLoadBalancerStatus};
pub use inmemory::{InMemoryLoadBalancer, InMemoryLoadBalancerSpec, InMemoryLoadBalancerStatus};
pub use kubedc::{
    KubeDCLoadBalancer, KubeDCLoadBalancerSpec, KubeDCLoadBalancerStatus, KubeDcCluster,
};
pub use loadbalancer::{LoadBalancer, LoadBalancerSpec, LoadBalancerStatus};
pub use octavia::{OctaviaLoadBalancer, OctaviaLoadBalancerSpec, OctaviaLoadBalancerStatus};
pub use servicelb::{ServiceLoadBalancer, ServiceLoadBalancerSpec, ServiceLoadBalancerStatus};
pub use zoned::{ZonedLoadBalancer, ZonedLoadBalancerSpec, ZonedLoadBalancerStatus};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// Every CRD capi-lb defines, in the order `capi-lb crds` prints them.
pub fn crds() -> Vec<CustomResourceDefinition> {
    kinds::all().iter().map(|k| (k.crd)()).collect()
}
