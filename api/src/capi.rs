//! Read-only views of the Cluster API kinds capi-lb reads: `Machine` (the default target kind) and
//! `Cluster` (for `spec.paused` and the cluster name). Only the fields capi-lb uses are typed; every
//! other field is kept in `rest`, so a view never loses data. capi-lb never writes these objects
//! whole; it only patches the metadata it owns.

use std::collections::BTreeMap;

use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::Value;

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

/// `Cluster.spec.controlPlaneEndpoint`; both fields may be absent (CAPI omits empty values).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterEndpoint {
    /// Host (DNS name or IP); empty when unset.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host: String,
    /// Port; 0 when unset.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub port: i32,
}

fn is_zero(port: &i32) -> bool {
    *port == 0
}

impl ClusterEndpoint {
    /// True when no endpoint is set (CAPI fills it only then).
    pub fn is_empty(&self) -> bool {
        self.host.is_empty() && self.port == 0
    }
}

impl Cluster {
    /// `spec.controlPlaneRef` as (apiGroup, kind, name), in v1beta2 form (`apiGroup`) or v1beta1
    /// form (`apiVersion`).
    pub fn control_plane_ref(&self) -> Option<(String, String, String)> {
        let r = self.spec.rest.get("controlPlaneRef")?;
        let kind = r.get("kind")?.as_str()?.to_string();
        let name = r.get("name")?.as_str()?.to_string();
        let group = match r.get("apiGroup").and_then(Value::as_str) {
            Some(g) => g.to_string(),
            None => r
                .get("apiVersion")?
                .as_str()?
                .split_once('/')
                .map(|(g, _)| g.to_string())
                .unwrap_or_default(),
        };
        Some((group, kind, name))
    }
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
    /// The control-plane endpoint (empty until someone fills it: CAPI from the infrastructure
    /// cluster or control plane, or capi-lb).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ClusterEndpoint>,
    /// Every other spec field, unchanged.
    #[serde(flatten)]
    pub rest: BTreeMap<String, Value>,
}
