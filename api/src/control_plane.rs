//! The control-plane parts of a LoadBalancer's spec: how it publishes its endpoint to its Cluster
//! (`spec.controlPlane`), and the workload cluster's `default/kubernetes` endpoints it keeps
//! (`spec.workloadEndpoints`). Re-exported by [`crate::loadbalancer`].

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a control-plane load balancer publishes its endpoint to its Cluster.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlane {
    /// Write the endpoint to `Cluster.spec.controlPlaneEndpoint` while it is empty (it is never
    /// overwritten). Defaults to true.
    #[serde(default = "default_true")]
    pub publish_endpoint: bool,
    /// Which host to publish when `spec.endpoint` is not set: `StableName` (default: the `-ext`
    /// DNS name, for management-side consumers; it resolves only inside this cluster) or
    /// `ProviderAddress` (the load balancer's first address, for machines that cannot resolve this
    /// cluster's DNS). A user-set `spec.endpoint` always wins.
    #[serde(default)]
    pub endpoint_host: EndpointHost,
}

impl Default for ControlPlane {
    fn default() -> Self {
        Self {
            publish_endpoint: true,
            endpoint_host: EndpointHost::StableName,
        }
    }
}

/// The workload cluster's `default/kubernetes` endpoints kept on the load balancer, through the
/// Secret `<clusterName>-kubeconfig`; its API servers run with `--endpoint-reconciler-type=none`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadEndpoints {
    /// Keep them. Defaults to false. Switching it off leaves the endpoints as they are.
    #[serde(default)]
    pub enabled: bool,
}

/// Which host a control-plane load balancer publishes.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EndpointHost {
    /// `<name><suffix>.<namespace>.svc.<cluster-domain>`.
    #[default]
    StableName,
    /// The provider's first address.
    ProviderAddress,
}

fn default_true() -> bool {
    true
}
