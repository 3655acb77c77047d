//! The generic `LoadBalancer` resource (`loadbalancer.cluster.x-k8s.io/v1alpha1`), following the
//! Cluster API load-balancer proposal: which targets to balance (a kind and a label selector), on which
//! ports, through which infrastructure provider (`infrastructureRef`), and where the stable endpoint is
//! published. The types carry the CRD schema: doc comments become `kubectl explain` text, schemars
//! attributes become OpenAPI constraints and `x_kube` rules become CEL validations.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::constants::{
    CAPI_GROUP, DEFAULT_DRAIN_SECONDS, DEFAULT_PORT, DEFAULT_PORT_NAME, DEFAULT_PUBLICATION_SUFFIX,
    MACHINE_KIND,
};
pub use crate::control_plane::{ControlPlane, EndpointHost, WorkloadEndpoints};

/// Desired state of a LoadBalancer: which targets, which ports, which infrastructure provider, and
/// how the stable endpoint is published.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "loadbalancer.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "LoadBalancer",
    plural = "loadbalancers",
    namespaced,
    doc = "A load balancer in front of a set of targets (by default Cluster API Machines), realised by the infrastructure provider named in spec.infrastructureRef, with a stable DNS endpoint published as the headless Service <name><spec.publication.suffix>.",
    status = "LoadBalancerStatus",
    shortname = "capilb",
    category = "cluster-api",
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    label("clusterctl.cluster.x-k8s.io", ""),
    printcolumn = r#"{"name":"Ready","type":"boolean","jsonPath":".status.ready","description":"Load balancer provisioned and endpoint published"}"#,
    printcolumn = r#"{"name":"Endpoint","type":"string","jsonPath":".status.endpoint.host","description":"Stable endpoint host"}"#,
    printcolumn = r#"{"name":"Address","type":"string","jsonPath":".status.addresses[0].address","description":"First address assigned by the provider"}"#,
    printcolumn = r#"{"name":"Targets","type":"string","jsonPath":".status.readyTargets","description":"Active targets / selected targets"}"#,
    printcolumn = r#"{"name":"Provider","type":"string","jsonPath":".spec.infrastructureRef.kind","description":"Infrastructure provider kind"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    // The name is a label value on everything capi-lb publishes and in the default selector (as
    // Cluster API limits Cluster names): a longer name could not publish DNS names or select
    // targets (found by the property test on the real apiserver, e2e/fuzz.rs).
    validation = Rule::new("size(self.metadata.name) <= 63").message(Message::Expression("'the LoadBalancer name ' + self.metadata.name + ' is longer than 63 characters: it is the value of the label loadbalancer.cluster.x-k8s.io/name on what capi-lb publishes and selects, so it must be a valid label value'".into())),
    validation = Rule::new("!self.spec.publication.enabled || (size(self.metadata.name + self.spec.publication.suffix) <= 63 && (self.metadata.name + self.spec.publication.suffix).matches('^[a-z]([-a-z0-9]*[a-z0-9])?$'))").message(Message::Expression("'the published Service name ' + self.metadata.name + self.spec.publication.suffix + ' must be a DNS label (lowercase letters, digits and -, starting with a letter) of at most 63 characters: shorten the LoadBalancer name or spec.publication.suffix, or disable publication'".into())).field_path(".spec.publication.suffix"),
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.controlPlane) || has(self.clusterName)").message("spec.controlPlane needs spec.clusterName").field_path(".controlPlane").reason(Reason::FieldValueRequired))]
#[x_kube(validation = Rule::new("!has(self.workloadEndpoints) || has(self.clusterName)").message("spec.workloadEndpoints needs spec.clusterName").field_path(".workloadEndpoints").reason(Reason::FieldValueRequired))]
pub struct LoadBalancerSpec {
    /// Name of the Cluster API Cluster this load balancer belongs to. When set, the Cluster's
    /// `spec.paused` pauses this load balancer too, and the default selector includes
    /// `cluster.x-k8s.io/cluster-name=<clusterName>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    )]
    pub cluster_name: Option<String>,

    /// An externally managed endpoint (for example a DNS alias in front of the load balancer). When
    /// set, it is reported as `status.endpoint` and never overwritten by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<ApiEndpoint>,

    /// Ports the load balancer listens on. Each port forwards to `targetPort` on every target.
    /// Defaults to one TCP port 6443 named `kube-apiserver`.
    #[serde(default = "default_ports")]
    #[schemars(length(min = 1, max = 32))]
    // The uniqueness rules keep the default reason (FieldValueInvalid): with FieldValueDuplicate
    // the apiserver reports `spec.ports: Duplicate value: "array"` and drops the rule's message.
    #[x_kube(validation = Rule::new("self.all(p, self.exists_one(q, q.name == p.name))").message("port names must be unique"))]
    #[x_kube(validation = Rule::new("self.all(p, self.exists_one(q, q.port == p.port && q.protocol == p.protocol))").message("each port and protocol pair may appear only once"))]
    pub ports: Vec<LoadBalancerPort>,

    /// Kind of the objects the selector picks as targets. Defaults to the Cluster API `Machine`.
    #[serde(default)]
    pub target_kind: TargetKind,

    /// Label selector for the targets, in this LoadBalancer's namespace. When empty it defaults to
    /// `cluster.x-k8s.io/cluster-name=<clusterName>` (if `clusterName` is set) and
    /// `loadbalancer.cluster.x-k8s.io/name=<name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,

    /// Only the targets whose `spec.failureDomain` is one of these (Cluster API Machines; what a
    /// `ZonedLoadBalancer` gives each zone's LoadBalancer). Empty (the default): any failure domain.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub target_failure_domains: Vec<String>,

    /// Which target address to use, in order of preference: the first type a target reports in
    /// `status.addresses` wins. Defaults to `[InternalIP, ExternalIP]`.
    #[serde(default = "default_address_types")]
    #[schemars(length(min = 1, max = 5))]
    #[x_kube(validation = Rule::new("self.all(t, self.exists_one(u, u == t))").message("address types must be unique"))]
    pub target_address_types: Vec<MachineAddressType>,

    /// The infrastructure provider object that configures how this load balancer is realised, for
    /// example an `InMemoryLoadBalancer`. It must be in the same namespace and may be used by only one
    /// LoadBalancer.
    pub infrastructure_ref: InfrastructureRef,

    /// Publication of the stable endpoint as a headless Service `<name><suffix>` whose
    /// EndpointSlices list the provider's addresses (an ExternalName Service when the provider only
    /// has a hostname).
    #[serde(default)]
    pub publication: Publication,

    /// This load balancer fronts the control plane of the Cluster `clusterName`: its endpoint is
    /// written to `Cluster.spec.controlPlaneEndpoint` while that is empty, and the default selector
    /// is the Cluster's control-plane Machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ControlPlane>,

    /// Keep the workload cluster's `default/kubernetes` endpoints on this load balancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_endpoints: Option<WorkloadEndpoints>,

    /// Seconds a member that leaves the load balancer (its target is disabled, deselected or being
    /// deleted) keeps serving the connections it has before it is removed. During that time it takes
    /// no new connections (the provider's drain: weight 0, or removal from the endpoints where the
    /// provider has no weights). 0 removes members at once. Defaults to 30.
    #[serde(default = "default_drain_seconds")]
    #[schemars(range(min = 0, max = 3600))]
    pub drain_seconds: i32,

    /// Conditions a target must report as `True` in `status.conditions` before it is admitted as a
    /// member, for example `APIServerPodHealthy` for control-plane Machines. They gate admission only:
    /// a member already serving is not taken out when a gate turns false (that is the provider's
    /// health monitor's job). Empty (the default) admits a target as soon as it has an address.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    #[x_kube(validation = Rule::new("self.all(g, self.exists_one(h, h.conditionType == g.conditionType))").message("readiness gates must be unique"))]
    pub readiness_gates: Vec<ReadinessGate>,

    /// Source CIDRs allowed to connect to the load balancer (for example the networks of the
    /// management cluster and of the workload clusters' nodes). Empty (the default) allows every
    /// source. Providers that cannot restrict sources say so in the `SpecHonoured` condition; a
    /// Service of capi-lb's class sets it from its `loadBalancerSourceRanges`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 43)))]
    #[x_kube(validation = Rule::new("self.all(c, isCIDR(c))").message("every source range must be a CIDR such as 192.0.2.0/24 or 2001:db8::/32"))]
    pub source_ranges: Vec<String>,

    /// DNS names for the load balancer in a zone outside the cluster, published through ExternalDNS:
    /// capi-lb writes an ExternalDNS `DNSEndpoint` (owned by this LoadBalancer) with A/AAAA records
    /// for the load balancer's addresses (a CNAME when it only has a hostname), and ExternalDNS
    /// (started with `--source=crd`) writes them to the DNS provider. Unset: no DNS publication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<DnsPublication>,

    /// Probe the endpoint (`status.endpoint`: `spec.endpoint` when set, else the stable name) from
    /// where capi-lb runs, as its consumers reach it, and report the `Reachable` condition: a TCP
    /// connection to each port, and for a port named `kube-apiserver` an HTTPS `GET /readyz` whose
    /// certificate is checked against the Cluster's CA (the Secret `<clusterName>-ca`) when it
    /// exists. Only a Ready LoadBalancer is probed. Unset: no probes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reachability: Option<Reachability>,

    /// Probe each target where the provider does not (the in-memory, kube-dc and Service providers;
    /// Octavia's health monitor checks members itself): a TCP
    /// connection to its address on every TCP port's `targetPort`. A target that fails
    /// `failureThreshold` probes in a row is taken out (drained like a disabled one; state
    /// `failing`, then `unhealthy`) and comes back after `successThreshold` passes in a row. Never
    /// every target at once: when all would be out, all are kept and `TargetsReady` says so.
    /// Unset: no probes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_health: Option<TargetHealth>,
}

/// Probes of the targets (`spec.targetHealth`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.timeoutSeconds < self.periodSeconds").message("timeoutSeconds must be less than periodSeconds"))]
pub struct TargetHealth {
    /// Seconds between two probes of a target. Defaults to 5.
    #[serde(default = "default_target_probe_period")]
    #[schemars(range(min = 2, max = 3600))]
    pub period_seconds: i32,
    /// Seconds one probe may take. Defaults to 2.
    #[serde(default = "default_target_probe_timeout")]
    #[schemars(range(min = 1, max = 60))]
    pub timeout_seconds: i32,
    /// Failed probes in a row before a target is taken out. Defaults to 2.
    #[serde(default = "default_threshold")]
    #[schemars(range(min = 1, max = 10))]
    pub failure_threshold: i32,
    /// Passed probes in a row before a target taken out comes back. Defaults to 2.
    #[serde(default = "default_threshold")]
    #[schemars(range(min = 1, max = 10))]
    pub success_threshold: i32,
    /// What a probe checks. `Auto` (the default): on a TCP port named `kube-apiserver`, HTTPS
    /// `GET /readyz` (an API server that accepts connections but cannot serve, e.g. without its
    /// etcd, fails it; its certificate must chain to the Cluster's CA, the Secret
    /// `<clusterName>-ca`, when that exists; a 401 or 403 passes), on the other ports a TCP
    /// connection. `TCP`: a TCP connection on every port.
    #[serde(default, skip_serializing_if = "TargetProbe::is_auto")]
    pub probe: TargetProbe,
}

impl Default for TargetHealth {
    fn default() -> Self {
        Self {
            period_seconds: default_target_probe_period(),
            timeout_seconds: default_target_probe_timeout(),
            failure_threshold: default_threshold(),
            success_threshold: default_threshold(),
            probe: TargetProbe::Auto,
        }
    }
}

/// What a target's probe checks (`spec.targetHealth.probe`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TargetProbe {
    /// HTTPS `GET /readyz` on a port named `kube-apiserver`, a TCP connection on the others.
    #[default]
    Auto,
    /// A TCP connection on every port.
    #[serde(rename = "TCP")]
    Tcp,
}

impl TargetProbe {
    /// The default (left out when written).
    pub fn is_auto(&self) -> bool {
        *self == TargetProbe::Auto
    }
}

fn default_target_probe_period() -> i32 {
    5
}

fn default_target_probe_timeout() -> i32 {
    2
}

fn default_threshold() -> i32 {
    2
}

/// Probes of the endpoint (`spec.reachability`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.timeoutSeconds < self.periodSeconds").message("timeoutSeconds must be less than periodSeconds"))]
pub struct Reachability {
    /// Seconds between two probes (spread by up to a tenth per LoadBalancer). Defaults to 30.
    #[serde(default = "default_probe_period")]
    #[schemars(range(min = 5, max = 3600))]
    pub period_seconds: i32,
    /// Seconds one probe of one port may take before it counts as failed. Defaults to 5.
    #[serde(default = "default_probe_timeout")]
    #[schemars(range(min = 1, max = 60))]
    pub timeout_seconds: i32,
}

impl Default for Reachability {
    fn default() -> Self {
        Self {
            period_seconds: default_probe_period(),
            timeout_seconds: default_probe_timeout(),
        }
    }
}

fn default_probe_period() -> i32 {
    30
}

fn default_probe_timeout() -> i32 {
    5
}

/// DNS names published through ExternalDNS.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DnsPublication {
    /// Fully qualified names to publish (for example `api.tenant-a.example.com`). `spec.endpoint.host`
    /// is published too when it is a DNS name.
    #[serde(default)]
    #[schemars(
        length(max = 8),
        inner(
            length(min = 1, max = 253),
            regex(
                pattern = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
            )
        )
    )]
    #[x_kube(validation = Rule::new("self.all(h, self.exists_one(g, g == h))").message("hostnames must be unique"))]
    pub hostnames: Vec<String>,
    /// TTL of the records, in seconds. Unset: the DNS provider's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 604_800))]
    pub ttl_seconds: Option<i64>,
    /// Routing-policy identifier of the records (weighted, latency or geo records: Route 53 and
    /// others). Unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub set_identifier: Option<String>,
    /// DNS-provider-specific properties of the records (ExternalDNS's `providerSpecific`, for
    /// example `aws/evaluate-target-health`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub provider_specific: Vec<DnsProperty>,
    /// Labels on the `DNSEndpoint`, for ExternalDNS instances that select by `--label-filter`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(
        extend("maxProperties" = 16),
        inner(
            length(max = 63),
            regex(pattern = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
        )
    )]
    pub labels: BTreeMap<String, String>,
}

/// A DNS-provider-specific property of the published records.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct DnsProperty {
    /// Name, e.g. `aws/evaluate-target-health`.
    #[schemars(length(min = 1, max = 128))]
    pub name: String,
    /// Value.
    #[schemars(length(max = 1024))]
    pub value: String,
}

/// A condition a target must report as `True` before it is admitted.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct ReadinessGate {
    /// Condition type, as in the target's `status.conditions[].type`.
    #[schemars(
        length(min = 1, max = 316),
        regex(
            pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
        )
    )]
    pub condition_type: String,
}

/// A host and port, as in Cluster API's `APIEndpoint`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ApiEndpoint {
    /// DNS name or IP address.
    #[schemars(length(min = 1, max = 253))]
    pub host: String,
    /// TCP port.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
}

/// One port of the load balancer.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerPort {
    /// Port name (an IANA service name: lowercase letters, digits and `-`, at most 15 characters,
    /// with at least one letter). Used as the port name of the published Service and EndpointSlices.
    #[schemars(
        length(min = 1, max = 15),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    #[x_kube(validation = Rule::new("self.matches('[a-z]') && !self.contains('--')").message("must contain a letter and no '--'"))]
    pub name: String,
    /// Port the load balancer listens on.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// Port on the targets. Defaults to `port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub target_port: Option<i32>,
    /// Transport protocol. Defaults to TCP.
    #[serde(default)]
    pub protocol: Protocol,
}

impl LoadBalancerPort {
    /// The port on the targets: `targetPort`, or `port` when unset.
    pub fn effective_target_port(&self) -> i32 {
        self.target_port.unwrap_or(self.port)
    }
}

/// Transport protocol of a port.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// TCP.
    #[default]
    #[serde(rename = "TCP")]
    Tcp,
    /// UDP.
    #[serde(rename = "UDP")]
    Udp,
}

impl Protocol {
    /// The Kubernetes spelling (`TCP`, `UDP`).
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
        }
    }
}

/// The kind of object that targets are.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct TargetKind {
    /// API group of the target kind. Defaults to `cluster.x-k8s.io`.
    #[serde(default = "default_target_group")]
    #[schemars(length(max = 253))]
    pub api_group: String,
    /// Kind of the targets. Defaults to `Machine`.
    #[serde(default = "default_target_kind")]
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[A-Z][A-Za-z0-9]*$"))]
    pub kind: String,
}

impl Default for TargetKind {
    fn default() -> Self {
        Self {
            api_group: default_target_group(),
            kind: default_target_kind(),
        }
    }
}

impl std::fmt::Display for TargetKind {
    /// `Kind.group`, the way kubectl names a resource kind (`Machine.cluster.x-k8s.io`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.api_group.is_empty() {
            write!(f, "{}", self.kind)
        } else {
            write!(f, "{}.{}", self.kind, self.api_group)
        }
    }
}

/// Machine address types, as reported in a Cluster API Machine's `status.addresses`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MachineAddressType {
    /// Node hostname.
    Hostname,
    /// Externally routable IP.
    #[serde(rename = "ExternalIP")]
    ExternalIp,
    /// Cluster-internal IP.
    #[serde(rename = "InternalIP")]
    InternalIp,
    /// Externally resolvable DNS name.
    #[serde(rename = "ExternalDNS")]
    ExternalDns,
    /// Internally resolvable DNS name.
    #[serde(rename = "InternalDNS")]
    InternalDns,
}

impl MachineAddressType {
    /// The spelling used in `status.addresses[].type`.
    pub fn as_str(self) -> &'static str {
        match self {
            MachineAddressType::Hostname => "Hostname",
            MachineAddressType::ExternalIp => "ExternalIP",
            MachineAddressType::InternalIp => "InternalIP",
            MachineAddressType::ExternalDns => "ExternalDNS",
            MachineAddressType::InternalDns => "InternalDNS",
        }
    }
}

/// Reference to the infrastructure provider object, in the LoadBalancer's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct InfrastructureRef {
    /// API group of the provider object, e.g. `infrastructure.cluster.x-k8s.io`.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub api_group: String,
    /// Kind of the provider object, e.g. `InMemoryLoadBalancer`.
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[A-Z][A-Za-z0-9]*$"))]
    pub kind: String,
    /// Name of the provider object.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
}

impl std::fmt::Display for InfrastructureRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}/{}", self.kind, self.api_group, self.name)
    }
}

/// Publication of the stable endpoint.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Publication {
    /// Publish the `<name><suffix>` Service. Defaults to true.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Suffix appended to the LoadBalancer name to form the Service name. Defaults to `-ext`.
    #[serde(default = "default_suffix")]
    #[schemars(length(min = 1, max = 62), regex(pattern = r"^[-a-z0-9]+$"))]
    pub suffix: String,
}

impl Default for Publication {
    fn default() -> Self {
        Self {
            enabled: true,
            suffix: default_suffix(),
        }
    }
}

/// Observed state of a LoadBalancer. Everything here can be rebuilt from the spec and the outside
/// world (`clusterctl move` does not keep status).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerStatus {
    /// The target kind as `Kind.group`.
    #[serde(default)]
    pub target_kind: Option<String>,
    /// The effective target selector in string form (`key=value,...`).
    #[serde(default)]
    pub target_selector: Option<String>,
    /// Names of the targets the selector matches (including targets being deleted, until they are
    /// gone).
    #[serde(default)]
    pub targets: Vec<String>,
    /// Names of the targets whose state is `active`: members serving new connections.
    #[serde(default)]
    pub active_targets: Vec<String>,
    /// `active/selected` target counts, for `kubectl get`.
    #[serde(default)]
    pub ready_targets: Option<String>,
    /// Addresses the infrastructure provider assigned to the load balancer.
    #[serde(default)]
    pub addresses: Vec<LoadBalancerAddress>,
    /// The stable endpoint: `spec.endpoint` when set, otherwise
    /// `<name><suffix>.<namespace>.svc.<cluster-domain>` and the first port.
    #[serde(default)]
    pub endpoint: Option<ApiEndpoint>,
    /// True when the provider's load balancer is provisioned, has an address and the endpoint is
    /// published.
    #[serde(default)]
    pub ready: bool,
    /// The infrastructure object the current provider resources belong to. When
    /// `spec.infrastructureRef` changes, the resources of this one are released first.
    #[serde(default)]
    pub infrastructure_ref: Option<InfrastructureRef>,
    /// A change of `spec.infrastructureRef` in progress (make-before-break): the new provider's load
    /// balancer is brought up and populated while `infrastructureRef` keeps serving; once it is
    /// ready the published addresses switch to it, and the old one is deleted after
    /// `spec.drainSeconds`.
    #[serde(default)]
    pub migration: Option<InfrastructureMigration>,
    /// The `metadata.generation` this status describes.
    #[serde(default)]
    pub observed_generation: Option<i64>,
    /// Conditions: Ready, InfrastructureReady, TargetsReady, EndpointPublished, Paused.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A migration from one infrastructure object to another.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InfrastructureMigration {
    /// The infrastructure object being replaced.
    pub from: InfrastructureRef,
    /// The infrastructure object being brought up.
    pub to: InfrastructureRef,
    /// When the published addresses switched to `to` (unset until it is ready).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switched_at: Option<Time>,
}

/// An address assigned by the provider.
#[derive(
    KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash,
)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerAddress {
    /// `IP` or `Hostname`.
    #[serde(rename = "type")]
    pub type_: AddressType,
    /// The IP address or DNS name.
    pub address: String,
}

impl LoadBalancerAddress {
    /// An IP address.
    pub fn ip(address: impl Into<String>) -> Self {
        Self {
            type_: AddressType::Ip,
            address: address.into(),
        }
    }

    /// A DNS name.
    pub fn hostname(address: impl Into<String>) -> Self {
        Self {
            type_: AddressType::Hostname,
            address: address.into(),
        }
    }
}

/// Kind of a load balancer address.
#[derive(
    JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash,
)]
pub enum AddressType {
    /// An IPv4 or IPv6 address.
    #[serde(rename = "IP")]
    Ip,
    /// A DNS name.
    Hostname,
}

fn default_ports() -> Vec<LoadBalancerPort> {
    vec![LoadBalancerPort {
        name: DEFAULT_PORT_NAME.to_string(),
        port: DEFAULT_PORT,
        target_port: None,
        protocol: Protocol::Tcp,
    }]
}

fn default_address_types() -> Vec<MachineAddressType> {
    vec![
        MachineAddressType::InternalIp,
        MachineAddressType::ExternalIp,
    ]
}

fn default_target_group() -> String {
    CAPI_GROUP.to_string()
}

fn default_target_kind() -> String {
    MACHINE_KIND.to_string()
}

fn default_drain_seconds() -> i32 {
    DEFAULT_DRAIN_SECONDS
}

fn default_true() -> bool {
    true
}

fn default_suffix() -> String {
    DEFAULT_PUBLICATION_SUFFIX.to_string()
}

impl LoadBalancerSpec {
    /// A spec with every default applied and the given infrastructure reference, as the apiserver
    /// would store `spec: {infrastructureRef: ...}`.
    pub fn with_infrastructure(infrastructure_ref: InfrastructureRef) -> Self {
        Self {
            cluster_name: None,
            endpoint: None,
            ports: default_ports(),
            target_kind: TargetKind::default(),
            selector: None,
            target_failure_domains: Vec::new(),
            target_address_types: default_address_types(),
            infrastructure_ref,
            publication: Publication::default(),
            control_plane: None,
            workload_endpoints: None,
            drain_seconds: default_drain_seconds(),
            readiness_gates: Vec::new(),
            source_ranges: Vec::new(),
            dns: None,
            reachability: None,
            target_health: None,
        }
    }
}
