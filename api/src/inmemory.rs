//! `InMemoryLoadBalancer` (`infrastructure.cluster.x-k8s.io/v1alpha1`): configuration of the
//! in-memory provider, which needs no cloud. It allocates addresses from a pool, keeps members with
//! states, drains and deletes like a real provider, and can inject failures and delays, so it serves
//! tests, demos and the offline `simulate` mode. Its status shows what the provider holds.

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::loadbalancer::LoadBalancerAddress;

/// The default address pool: TEST-NET-3 (RFC 5737), a documentation range that is never routed.
pub const DEFAULT_ADDRESS_POOL: &str = "203.0.113.0/24";

/// Configuration of an in-memory load balancer: address pools, simulated provisioning time and
/// injected failures.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "InMemoryLoadBalancer",
    plural = "inmemoryloadbalancers",
    namespaced,
    doc = "Configuration of the in-memory load balancer provider (no cloud needed: tests, demos, capi-lb simulate). Reference it from a LoadBalancer spec.infrastructureRef; its status shows what the provider holds.",
    status = "InMemoryLoadBalancerStatus",
    shortname = "imlb",
    category = "cluster-api",
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    label("clusterctl.cluster.x-k8s.io", ""),
    printcolumn = r#"{"name":"Ready","type":"boolean","jsonPath":".status.ready"}"#,
    printcolumn = r#"{"name":"Address","type":"string","jsonPath":".status.addresses[0].address"}"#,
    printcolumn = r#"{"name":"Members","type":"integer","jsonPath":".status.memberCount"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("size(self.addressPools) > 0 || has(self.hostname)").message("set at least one address pool or a hostname"))]
pub struct InMemoryLoadBalancerSpec {
    /// CIDRs to allocate the load balancer's addresses from: one address from each pool, so an IPv4
    /// and an IPv6 pool give a dual-stack load balancer. Defaults to `203.0.113.0/24`.
    #[serde(default = "default_pools")]
    #[schemars(length(max = 2), inner(length(max = 43)))]
    #[x_kube(validation = Rule::new("self.all(c, isCIDR(c))").message("every pool must be a CIDR such as 203.0.113.0/24 or 2001:db8::/64"))]
    pub address_pools: Vec<String>,

    /// A DNS name to report as an address too (like cloud load balancers that only have a
    /// hostname). With no address pools the load balancer is hostname-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub hostname: Option<String>,

    /// Simulated provisioning time in seconds: the load balancer, and each new member, become
    /// ready this long after they were requested. Defaults to 0.
    #[serde(default)]
    #[schemars(range(min = 0, max = 3600))]
    pub provisioning_delay_seconds: u32,

    /// Failures to inject, for tests and demos.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub failures: Vec<InjectedFailure>,
}

/// A failure the in-memory provider returns instead of doing the work.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct InjectedFailure {
    /// The provider operation that fails.
    pub operation: ProviderOperation,
    /// `Transient` (retried with back-off) or `Permanent` (reported until the spec changes).
    #[serde(rename = "type")]
    pub type_: FailureType,
    /// How many calls fail before the operation succeeds. Defaults to 1. Permanent failures ignore it
    /// and always fail.
    #[serde(default = "default_times")]
    #[schemars(range(min = 1, max = 1000))]
    pub times: u32,
    /// Error message to return.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub message: Option<String>,
}

/// A provider operation, for failure injection.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProviderOperation {
    /// Creating or updating the load balancer and its listeners.
    Ensure,
    /// Converging the member set.
    Members,
    /// Deleting the load balancer.
    Delete,
}

/// Kind of injected failure.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureType {
    /// Retried with back-off.
    Transient,
    /// Needs a configuration change.
    Permanent,
}

/// What the in-memory provider holds for this load balancer.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryLoadBalancerStatus {
    /// True when the load balancer is provisioned.
    #[serde(default)]
    pub ready: bool,
    /// Provider identifier of the load balancer.
    #[serde(default)]
    pub load_balancer_id: Option<String>,
    /// Allocated addresses.
    #[serde(default)]
    pub addresses: Vec<LoadBalancerAddress>,
    /// Listening ports.
    #[serde(default)]
    pub ports: Vec<i32>,
    /// Members and their states.
    #[serde(default)]
    pub members: Vec<InMemoryMember>,
    /// Number of members, for `kubectl get`.
    #[serde(default)]
    pub member_count: i32,
}

/// A member of an in-memory load balancer.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryMember {
    /// Name of the target.
    pub name: String,
    /// Address traffic is sent to.
    pub address: String,
    /// `Adding`, `Active` or `Draining`.
    pub state: String,
}

fn default_pools() -> Vec<String> {
    vec![DEFAULT_ADDRESS_POOL.to_string()]
}

fn default_times() -> u32 {
    1
}

impl Default for InMemoryLoadBalancerSpec {
    fn default() -> Self {
        Self {
            address_pools: default_pools(),
            hostname: None,
            provisioning_delay_seconds: 0,
            failures: Vec::new(),
        }
    }
}

crate::validation::validated!(InMemoryLoadBalancer);
