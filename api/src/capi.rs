//! Read-only views of the Cluster API kinds capi-lb reads: `Machine` (the default target kind) and
//! `Cluster` (for `spec.paused` and the cluster name). Only the fields capi-lb uses are typed; every
//! other field is kept in `rest`, so a view never loses data. capi-lb never writes these objects
//! whole; it only patches the metadata it owns.

use std::collections::BTreeMap;

use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::loadbalancer::ApiEndpoint;

/// The fields of a Cluster API `Machine` spec that capi-lb reads.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "Machine",
    plural = "machines",
    namespaced,
    status = "MachineStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    /// Name of the Cluster this Machine belongs to.
    #[serde(default)]
    pub cluster_name: String,
    /// Every other spec field, unchanged.
    #[serde(flatten)]
    pub rest: BTreeMap<String, Value>,
}

/// The fields of a Cluster API `Machine` status that capi-lb reads.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    /// Addresses of the machine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<MachineAddress>,
    /// Phase (`Pending`, `Provisioning`, `Provisioned`, `Running`, `Deleting`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Every other status field, unchanged.
    #[serde(flatten)]
    pub rest: BTreeMap<String, Value>,
}

/// One entry of `Machine.status.addresses`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct MachineAddress {
    /// `Hostname`, `ExternalIP`, `InternalIP`, `ExternalDNS` or `InternalDNS`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The address.
    pub address: String,
}

/// The fields of a Cluster API `Cluster` spec that capi-lb reads.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "Cluster",
    plural = "clusters",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// When true, controllers do not reconcile the Cluster's objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// The control-plane endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// Every other spec field, unchanged.
    #[serde(flatten)]
    pub rest: BTreeMap<String, Value>,
}
