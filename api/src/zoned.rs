//! `ZonedLoadBalancer` (`infrastructure.cluster.x-k8s.io/v1alpha1`): one LoadBalancer realised by
//! several load balancers, one per zone (CAPO's multi-AZ proposal: an Octavia load balancer per
//! availability zone, each with the members of its zone, and one DNS name over all of them). Each
//! zone names its own infrastructure object and the targets it takes; capi-lb makes a LoadBalancer
//! per zone (`<name>-<zone>`) and publishes the addresses of the zones that serve. See
//! `docs/providers/zoned.md`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::loadbalancer::{InfrastructureRef, LoadBalancerAddress};

/// A load balancer made of one load balancer per zone.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "ZonedLoadBalancer",
    plural = "zonedloadbalancers",
    namespaced,
    doc = "Configuration of a capi-lb load balancer made of one load balancer per zone (for example an OctaviaLoadBalancer per availability zone): each zone's load balancer takes the targets of its zone, and the LoadBalancer that references this object publishes the addresses of every zone that serves (-ext, spec.dns), taking a zone that is down out (never the last one). Reference it from a LoadBalancer spec.infrastructureRef.",
    status = "ZonedLoadBalancerStatus",
    shortname = "zonedlb",
    category = "cluster-api",
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    label("clusterctl.cluster.x-k8s.io", ""),
    printcolumn = r#"{"name":"Zones","type":"integer","jsonPath":".status.zoneCount"}"#,
    printcolumn = r#"{"name":"Serving","type":"integer","jsonPath":".status.servingZones"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ZonedLoadBalancerSpec {
    /// The zones, each realised by its own load balancer.
    #[schemars(length(min = 1, max = 16))]
    #[x_kube(validation = Rule::new("self.all(z, self.exists_one(y, y.name == z.name))").message("zone names must be unique"))]
    #[x_kube(validation = Rule::new("self.all(z, self.exists_one(y, y.infrastructureRef.apiGroup == z.infrastructureRef.apiGroup && y.infrastructureRef.kind == z.infrastructureRef.kind && y.infrastructureRef.name == z.infrastructureRef.name))").message("each zone needs its own infrastructure object"))]
    pub zones: Vec<Zone>,
}

/// One zone: its load balancer's infrastructure object, and which targets it takes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.infrastructureRef.kind != 'ZonedLoadBalancer' || self.infrastructureRef.apiGroup != 'infrastructure.cluster.x-k8s.io'").message("a zone's load balancer cannot itself be a ZonedLoadBalancer").field_path(".infrastructureRef"))]
pub struct Zone {
    /// The zone's name: the suffix of its LoadBalancer, `<name>-<zone>` (at most 63 characters
    /// in all).
    #[schemars(
        length(min = 1, max = 30),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,

    /// The infrastructure object of the zone's load balancer (an `OctaviaLoadBalancer` with its
    /// `availabilityZone`, for example), in the same namespace. Like any infrastructure object it
    /// serves one LoadBalancer only.
    pub infrastructure_ref: InfrastructureRef,

    /// The zone's targets by failure domain: Machines whose `spec.failureDomain` is one of these
    /// (what `KubeadmControlPlane` spreads its Machines over). Empty: any failure domain.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub failure_domains: Vec<String>,

    /// The zone's targets by label, added to the LoadBalancer's own selector (for example
    /// `topology.kubernetes.io/zone: az1`). Empty: the LoadBalancer's selector alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// How the zones stand, as capi-lb last saw them.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ZonedLoadBalancerStatus {
    /// One entry per zone, in `spec.zones` order.
    #[serde(default)]
    pub zones: Vec<ZoneStatus>,
    /// The addresses published: those of the zones that serve, or, when none does, the last ones
    /// that did (a name never loses its last addresses). Kept across restarts.
    #[serde(default)]
    pub addresses: Vec<LoadBalancerAddress>,
    /// Number of zones, for `kubectl get`.
    #[serde(default)]
    pub zone_count: i32,
    /// Number of zones whose addresses are published because they serve.
    #[serde(default)]
    pub serving_zones: i32,
}

/// How one zone stands.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ZoneStatus {
    /// The zone's name.
    pub name: String,
    /// The zone's LoadBalancer (`<name>-<zone>`).
    pub load_balancer: String,
    /// True when its LoadBalancer is Ready.
    #[serde(default)]
    pub ready: bool,
    /// True once its LoadBalancer has been Ready: a zone not Ready after that is down (a
    /// Warning), before that it is being provisioned.
    #[serde(default)]
    pub provisioned: bool,
    /// True when its LoadBalancer is Ready with at least one active target: its addresses are
    /// published.
    #[serde(default)]
    pub serving: bool,
    /// Its load balancer's addresses.
    #[serde(default)]
    pub addresses: Vec<LoadBalancerAddress>,
    /// Active targets / selected targets of the zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_targets: Option<String>,
    /// Why it does not serve, when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

crate::validation::validated!(ZonedLoadBalancer);
