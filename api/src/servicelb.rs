//! `ServiceLoadBalancer` (`infrastructure.cluster.x-k8s.io/v1alpha1`): a load balancer realised by
//! whatever implements Services of `type: LoadBalancer` in the management cluster (MetalLB,
//! kube-vip, a cloud controller manager). capi-lb creates a selectorless Service of that type with
//! the LoadBalancer's ports, publishes the members as its EndpointSlices, and takes the address from
//! the Service's `status.loadBalancer.ingress`. See `docs/providers/service.md`.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A Service's `externalTrafficPolicy`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TrafficPolicy {
    /// Any node forwards to any member (the Kubernetes default).
    Cluster,
    /// Only nodes with a local member take traffic. Members of a capi-lb load balancer are not
    /// Pods on the management cluster's nodes, so most implementations then announce from no node.
    Local,
}

impl TrafficPolicy {
    /// The Service's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TrafficPolicy::Cluster => "Cluster",
            TrafficPolicy::Local => "Local",
        }
    }
}

/// A Service's `ipFamilyPolicy`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpFamilyPolicy {
    /// One family.
    SingleStack,
    /// Both families when the cluster has them.
    PreferDualStack,
    /// Both families, or the Service is refused.
    RequireDualStack,
}

impl IpFamilyPolicy {
    /// The Service's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            IpFamilyPolicy::SingleStack => "SingleStack",
            IpFamilyPolicy::PreferDualStack => "PreferDualStack",
            IpFamilyPolicy::RequireDualStack => "RequireDualStack",
        }
    }
}

/// An IP family.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpFamily {
    /// IPv4.
    IPv4,
    /// IPv6.
    IPv6,
}

impl IpFamily {
    /// The Service's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            IpFamily::IPv4 => "IPv4",
            IpFamily::IPv6 => "IPv6",
        }
    }
}

/// Default [`ServiceLoadBalancerSpec::address_timeout_seconds`].
pub const DEFAULT_ADDRESS_TIMEOUT_SECONDS: i32 = 120;

fn default_address_timeout() -> i32 {
    DEFAULT_ADDRESS_TIMEOUT_SECONDS
}

/// The Service capi-lb creates for a load balancer realised by a Service implementation.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "ServiceLoadBalancer",
    plural = "serviceloadbalancers",
    namespaced,
    doc = "Configuration of a capi-lb load balancer realised by an implementation of Services of type LoadBalancer in this cluster (MetalLB, kube-vip, a cloud controller manager): capi-lb creates a selectorless Service of that type whose EndpointSlices are the members and takes the address from its status. Reference it from a LoadBalancer spec.infrastructureRef.",
    status = "ServiceLoadBalancerStatus",
    shortname = "svclb",
    category = "cluster-api",
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    label("clusterctl.cluster.x-k8s.io", ""),
    printcolumn = r#"{"name":"Ready","type":"boolean","jsonPath":".status.ready"}"#,
    printcolumn = r#"{"name":"Class","type":"string","jsonPath":".spec.loadBalancerClass"}"#,
    printcolumn = r#"{"name":"Service","type":"string","jsonPath":".status.serviceName"}"#,
    printcolumn = r#"{"name":"Address","type":"string","jsonPath":".status.addresses[0]"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.loadBalancerClass) == has(oldSelf.loadBalancerClass) && (!has(self.loadBalancerClass) || self.loadBalancerClass == oldSelf.loadBalancerClass)").message("loadBalancerClass is immutable, as on a Service: create another ServiceLoadBalancer and point the LoadBalancer's infrastructureRef at it (the switch is make-before-break)").reason(Reason::FieldValueForbidden))]
pub struct ServiceLoadBalancerSpec {
    /// `spec.loadBalancerClass` of the Service: which implementation realises it (for example the
    /// class MetalLB was started with, `--lb-class`). Unset: the cluster's default implementation,
    /// the one that serves Services without a class. Immutable, as on a Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 316),
        regex(
            pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
        )
    )]
    pub load_balancer_class: Option<String>,

    /// Annotations on the Service, for its implementation: MetalLB's `metallb.io/address-pool` or
    /// `metallb.io/allow-shared-ip`, kube-vip's `kube-vip.io/loadbalancerIPs`, a cloud's load
    /// balancer options. capi-lb's own keys cannot be set here.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64), inner(length(max = 4096)))]
    #[x_kube(validation = Rule::new("self.all(k, size(k) <= 316 && !k.startsWith('loadbalancer.cluster.x-k8s.io/') && !k.startsWith('capi-lb.loadbalancer.cluster.x-k8s.io/'))").message("annotation keys are at most 316 characters and cannot be capi-lb's own (loadbalancer.cluster.x-k8s.io/...)"))]
    pub annotations: BTreeMap<String, String>,

    /// Labels on the Service (for implementations that select Services by label, such as MetalLB
    /// pools with `serviceSelectors`). capi-lb's own keys cannot be set here.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(
        extend("maxProperties" = 64),
        inner(
            length(max = 63),
            regex(pattern = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
        )
    )]
    #[x_kube(validation = Rule::new("self.all(k, size(k) <= 316 && !k.startsWith('capi-lb.loadbalancer.cluster.x-k8s.io/') && k != 'app.kubernetes.io/managed-by' && !k.startsWith('endpointslice.kubernetes.io/') && k != 'kubernetes.io/service-name')").message("label keys are at most 316 characters and cannot be capi-lb's own (app.kubernetes.io/managed-by, capi-lb.loadbalancer.cluster.x-k8s.io/...) or the EndpointSlice controller's"))]
    pub labels: BTreeMap<String, String>,

    /// The address to ask the implementation for (`spec.loadBalancerIP` of the Service; MetalLB,
    /// kube-vip and most cloud controllers honour it). For two addresses (dual stack) use the
    /// implementation's annotation instead. Unset: the implementation picks one.
    #[serde(
        default,
        rename = "loadBalancerIP",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 45))]
    #[x_kube(validation = Rule::new("isIP(self)").message("must be an IP address"))]
    pub load_balancer_ip: Option<String>,

    /// Source CIDRs allowed to connect (`spec.loadBalancerSourceRanges`), for implementations that
    /// enforce it (cloud controllers do; MetalLB leaves it to kube-proxy, which enforces it on the
    /// nodes). Empty: every source. Combined with the LoadBalancer's `spec.sourceRanges`: when both
    /// are set, the LoadBalancer's must lie within these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 43)))]
    #[x_kube(validation = Rule::new("self.all(c, isCIDR(c))").message("every entry must be a CIDR such as 192.0.2.0/24"))]
    pub load_balancer_source_ranges: Vec<String>,

    /// `externalTrafficPolicy` of the Service. Unset: the Kubernetes default, `Cluster`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_traffic_policy: Option<TrafficPolicy>,

    /// `ipFamilyPolicy` of the Service. Unset: the cluster's default (`SingleStack`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_family_policy: Option<IpFamilyPolicy>,

    /// `ipFamilies` of the Service, in order of preference. Unset: the cluster's default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2))]
    #[x_kube(validation = Rule::new("self.size() < 2 || self[0] != self[1]").message("each family at most once"))]
    pub ip_families: Vec<IpFamily>,

    /// `allocateLoadBalancerNodePorts` of the Service: false for implementations that send traffic
    /// to the endpoints directly (MetalLB, kube-vip) and need no node ports. Unset: the Kubernetes
    /// default (true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocate_load_balancer_node_ports: Option<bool>,

    /// Seconds without an address after which waiting turns into a problem (`NoImplementation`, a
    /// Warning Event): nothing seems to implement the class. Defaults to 120.
    #[serde(default = "default_address_timeout")]
    #[schemars(range(min = 1, max = 86_400))]
    pub address_timeout_seconds: i32,
}

/// What the Service provider created and observed. Rebuilt from the world after `clusterctl move`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceLoadBalancerStatus {
    /// The Service capi-lb maintains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// The IP addresses in the Service's `status.loadBalancer.ingress`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// The hostnames in the Service's `status.loadBalancer.ingress` (implementations that give a
    /// DNS name instead of an address).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hostnames: Vec<String>,
    /// True when the implementation has given the Service an address.
    #[serde(default)]
    pub ready: bool,
    /// Members in the Service's endpoints.
    #[serde(default)]
    pub member_count: i32,
    /// What the provider is waiting for, while not ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
}

crate::validation::validated!(ServiceLoadBalancer);
