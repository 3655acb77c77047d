//! `DNSLoadBalancer` (`infrastructure.cluster.x-k8s.io/v1alpha1`): a load balancer made of DNS
//! records only (Story 3b of the Cluster API load-balancer proposal: sites with neither a cloud load
//! balancer nor MetalLB or kube-vip). Its name resolves to the addresses of the healthy, active
//! targets: capi-lb publishes them through ExternalDNS's `DNSEndpoint` (so RFC 2136 with TSIG or
//! GSS-TSIG, PowerDNS, Route 53 ... all work) and inside the cluster on `<name>-ext`. See
//! `docs/providers/dns.md`.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Default [`DNSLoadBalancerSpec::ttl_seconds`].
pub const DEFAULT_TTL_SECONDS: i64 = 30;

fn default_ttl() -> i64 {
    DEFAULT_TTL_SECONDS
}

/// A load balancer that is a DNS name whose A and AAAA records are the targets' addresses.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "DNSLoadBalancer",
    plural = "dnsloadbalancers",
    namespaced,
    doc = "Configuration of a capi-lb load balancer made of DNS records: spec.hostname resolves to the addresses of the LoadBalancer's healthy, active targets, published through ExternalDNS (a DNSEndpoint) and on the LoadBalancer's -ext Service. A target leaving is taken out of DNS first and keeps its deletion hooks for ttlSeconds plus the LoadBalancer's drainSeconds. Reference it from a LoadBalancer spec.infrastructureRef.",
    status = "DNSLoadBalancerStatus",
    shortname = "dnslb",
    category = "cluster-api",
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    label("clusterctl.cluster.x-k8s.io", ""),
    printcolumn = r#"{"name":"Ready","type":"boolean","jsonPath":".status.ready"}"#,
    printcolumn = r#"{"name":"Hostname","type":"string","jsonPath":".spec.hostname"}"#,
    printcolumn = r#"{"name":"Records","type":"integer","jsonPath":".status.recordCount"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DNSLoadBalancerSpec {
    /// The DNS name clients resolve (for a Cluster, set the LoadBalancer's `spec.endpoint.host` to
    /// it). It must be a name the namespace may publish (`--dns-domains`, the Namespace's
    /// `loadbalancer.cluster.x-k8s.io/dns-domains`), and no other LoadBalancer's.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    #[x_kube(validation = Rule::new("self.split('.').all(l, size(l) <= 63)").message("every label of the hostname is at most 63 characters"))]
    pub hostname: String,

    /// Seconds resolvers may cache the records. A target leaving is taken out of the records
    /// first, and its deletion hooks are held this long plus the LoadBalancer's `drainSeconds`
    /// after ExternalDNS took the change, since a client may still connect to an address it
    /// resolved before. Defaults to 30.
    #[serde(default = "default_ttl")]
    #[schemars(range(min = 5, max = 3600))]
    pub ttl_seconds: i64,
}

/// One record of the name: a target and its address.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct DNSRecord {
    /// The target (its object name).
    pub target: String,
    /// Its address, an A or AAAA record of the name.
    pub address: String,
}

/// What the name resolves to, as capi-lb last decided.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DNSLoadBalancerStatus {
    /// True once ExternalDNS took the records (the LoadBalancer's `DNSEndpoint` is observed).
    #[serde(default)]
    pub ready: bool,
    /// The records capi-lb publishes for the name, in target order. Kept across restarts: a
    /// restarted controller starts from them and changes them only on what it observed since.
    #[serde(default)]
    pub records: Vec<DNSRecord>,
    /// Number of records, for `kubectl get`.
    #[serde(default)]
    pub record_count: i32,
    /// Targets taken out of the records and still draining: reported as members until ExternalDNS
    /// took the records without them, then for the TTL and `drainSeconds`.
    #[serde(default)]
    pub draining: Vec<DNSRecord>,
    /// The addresses of the name as ExternalDNS last took them (the `DNSEndpoint` generation it
    /// observed): a record counts as in DNS, and a target taken out as out of it, by this list.
    #[serde(default)]
    pub published_addresses: Vec<String>,
    /// The TTL the published records were written with (a lowered `ttlSeconds` is not honoured for
    /// drains until resolvers may have dropped the records of the old TTL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_ttl_seconds: Option<i64>,
    /// Why the name has not changed as asked: the last target kept against an empty record set,
    /// ExternalDNS not having taken the records yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
}

crate::validation::validated!(DNSLoadBalancer);
