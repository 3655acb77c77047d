//! ExternalDNS's `DNSEndpoint` (`externaldns.k8s.io/v1alpha1`): the object capi-lb writes so that
//! ExternalDNS (started with `--source=crd`) publishes a load balancer's DNS names in a zone outside
//! the cluster (PowerDNS, RFC 2136, Route 53, ...). capi-lb does not define this CRD: ExternalDNS's
//! own is installed with ExternalDNS; these types cover what capi-lb writes and reads of it.

use std::collections::BTreeMap;

use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// API group of ExternalDNS's CRD source.
pub const GROUP: &str = "externaldns.k8s.io";

/// The desired records of a `DNSEndpoint`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "externaldns.k8s.io",
    version = "v1alpha1",
    kind = "DNSEndpoint",
    plural = "dnsendpoints",
    namespaced,
    status = "DNSEndpointStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct DNSEndpointSpec {
    /// The records.
    #[serde(default)]
    pub endpoints: Vec<Endpoint>,
}

/// One record set of a `DNSEndpoint`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    /// The name.
    pub dns_name: String,
    /// `A`, `AAAA` or `CNAME`.
    pub record_type: String,
    /// The addresses (or the canonical name).
    #[serde(default)]
    pub targets: Vec<String>,
    /// TTL in seconds; unset: the DNS provider's default.
    #[serde(default, rename = "recordTTL", skip_serializing_if = "Option::is_none")]
    pub record_ttl: Option<i64>,
    /// Routing-policy identifier (weighted, latency, geo records in Route 53 and others).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_identifier: Option<String>,
    /// DNS-provider-specific properties.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provider_specific: Vec<ProviderSpecificProperty>,
    /// Labels ExternalDNS keeps with the record.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// A DNS-provider-specific property (e.g. `aws/evaluate-target-health`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProviderSpecificProperty {
    /// The property's name.
    pub name: String,
    /// Its value.
    pub value: String,
}

/// What ExternalDNS reports on a `DNSEndpoint`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DNSEndpointStatus {
    /// The generation ExternalDNS last processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Every other status field, unchanged.
    #[serde(flatten)]
    pub rest: BTreeMap<String, Value>,
}
