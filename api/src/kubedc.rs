//! kube-dc: `KubeDCLoadBalancer` (`infrastructure.cluster.x-k8s.io/v1alpha1`), the configuration of
//! capi-lb's kube-dc provider, and a read view of kube-dc's `EIp` (`kube-dc.com/v1`), the OVN external
//! IP the provider binds a LoadBalancer Service to.
//!
//! The provider realises a load balancer the way kube-dc itself does: an EIp (unless an existing one
//! is named), a selectorless Service of `type: LoadBalancer` bound to it, and the members as that
//! Service's endpoints; kube-dc's controller programs OVN from them. See `docs/providers/kubedc.md`.

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// kube-dc's external network types.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ExternalNetworkType {
    /// The provider's cloud network (addresses routable within the cloud).
    #[default]
    #[serde(rename = "cloud")]
    Cloud,
    /// Public Internet addresses (subject to the project's public IP quota).
    #[serde(rename = "public")]
    Public,
}

impl ExternalNetworkType {
    /// `cloud` or `public`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExternalNetworkType::Cloud => "cloud",
            ExternalNetworkType::Public => "public",
        }
    }
}

/// Configuration of a load balancer on a kube-dc external IP.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "KubeDCLoadBalancer",
    plural = "kubedcloadbalancers",
    namespaced,
    doc = "Configuration of a capi-lb load balancer realised on kube-dc: an EIp (OVN external IP, created or an existing one) and a LoadBalancer Service bound to it whose endpoints are the members. Reference it from a LoadBalancer spec.infrastructureRef.",
    status = "KubeDCLoadBalancerStatus",
    shortname = "kdclb",
    category = "cluster-api",
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    label("clusterctl.cluster.x-k8s.io", ""),
    printcolumn = r#"{"name":"Ready","type":"boolean","jsonPath":".status.ready"}"#,
    printcolumn = r#"{"name":"Network","type":"string","jsonPath":".spec.externalNetworkType"}"#,
    printcolumn = r#"{"name":"EIp","type":"string","jsonPath":".status.eipName"}"#,
    printcolumn = r#"{"name":"Address","type":"string","jsonPath":".status.address"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.eipName) == has(oldSelf.eipName) && (!has(self.eipName) || self.eipName == oldSelf.eipName)").message("eipName is immutable: create another KubeDCLoadBalancer and point the LoadBalancer's infrastructureRef at it").reason(Reason::FieldValueForbidden))]
#[x_kube(validation = Rule::new("has(self.cluster) == has(oldSelf.cluster)").message("cluster cannot be added or removed: what was made stays where it is; create another KubeDCLoadBalancer and point the LoadBalancer's infrastructureRef at it").reason(Reason::FieldValueForbidden))]
pub struct KubeDCLoadBalancerSpec {
    /// Network of the EIp the provider creates: `cloud` (default) or `public` (counts against the
    /// project's public IP quota). kube-dc cannot change an allocated EIp's network, so a change is
    /// made before break: a new EIp and Service on the new network, the old address reported and
    /// serving until the new one has its address, then the old EIp and Service deleted. Ignored when
    /// `eipName` names an existing EIp.
    #[serde(default)]
    pub external_network_type: ExternalNetworkType,

    /// An existing EIp in this namespace to bind to instead of creating one: the project's
    /// `default-gw`, or a pre-allocated EIp whose address is already in certificates. It is never
    /// modified or deleted. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub eip_name: Option<String>,

    /// The kube-dc cluster, when it is not the cluster capi-lb runs in: a bootstrap cluster (kind)
    /// before `clusterctl move`, or a management cluster outside kube-dc. The EIp, Service and
    /// endpoints are made there, in `cluster.namespace`, and carry ownership labels instead of an
    /// owner reference, so that the controller of the cluster the objects are moved to adopts them.
    /// Unset: this cluster, the LoadBalancer's namespace. Cannot be added or removed later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<KubeDcCluster>,
}

/// How to reach a kube-dc cluster other than the one capi-lb runs in.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct KubeDcCluster {
    /// A Secret in this namespace holding a kubeconfig for the kube-dc cluster (other namespaces are
    /// never read). Label it `clusterctl.cluster.x-k8s.io/move` so that it moves with the cluster.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub kubeconfig_secret_name: String,
    /// Key of the kubeconfig in the Secret. Defaults to `value`, the key of Cluster API's
    /// `<cluster>-kubeconfig` Secrets.
    #[serde(default = "default_kubeconfig_key")]
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
    /// The kube-dc project namespace there, where the EIp, Service and endpoints go. Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message("cluster.namespace is immutable: what was made stays where it is; create another KubeDCLoadBalancer and point the LoadBalancer's infrastructureRef at it").reason(Reason::FieldValueForbidden))]
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub namespace: String,
}

fn default_kubeconfig_key() -> String {
    "value".into()
}

/// What the kube-dc provider created and observed. Rebuilt from the world after `clusterctl move`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct KubeDCLoadBalancerStatus {
    /// The EIp the Service is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eip_name: Option<String>,
    /// True when the provider created that EIp (and deletes it with the load balancer); false for
    /// an existing EIp named in the spec, which is never deleted.
    #[serde(default)]
    pub eip_created: bool,
    /// The LoadBalancer Service the provider maintains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// The EIp's address, once allocated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// True when the EIp is ready and kube-dc reports its address on the Service.
    #[serde(default)]
    pub ready: bool,
    /// Members in the Service's endpoints.
    #[serde(default)]
    pub member_count: i32,
    /// What the provider is waiting for, while not ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
}

/// The fields of kube-dc's `EIp` spec that capi-lb reads and writes. An EIp may come from a
/// tenant's kube-dc cluster (`spec.cluster`): every other field of its answer is dropped while it
/// is parsed, never kept (capi-lb creates EIps and deletes them, and never writes one back whole).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kube-dc.com",
    version = "v1",
    kind = "EIp",
    plural = "eips",
    namespaced,
    status = "EIpStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct EIpSpec {
    /// `public` or `cloud`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_network_type: Option<String>,
}

/// The fields of kube-dc's `EIp` status that capi-lb reads.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EIpStatus {
    /// The allocated external IP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_address: Option<String>,
    /// True once the EIp is usable.
    #[serde(default)]
    pub ready: bool,
    /// kube-dc's conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<EIpCondition>,
}

/// A condition of kube-dc's `EIp`: what capi-lb quotes of it when an EIp stays not ready.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct EIpCondition {
    /// The condition's type.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// `True`, `False` or `Unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// kube-dc's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// kube-dc's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

crate::validation::validated!(KubeDCLoadBalancer);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_eip_keeps_only_what_capi_lb_reads() {
        // A (possibly tenant-controlled) kube-dc answer with fields capi-lb does not read: they are
        // dropped while parsing, so they cost nothing after it.
        let answer = json!({
            "apiVersion": "kube-dc.com/v1", "kind": "EIp",
            "metadata": {"name": "e", "namespace": "n"},
            "spec": {"externalNetworkType": "public", "padding": vec![0; 1000]},
            "status": {"ipAddress": "203.0.113.5", "ready": false, "owners": [{"ownerRef": "x"}],
                       "conditions": [{"type": "Ready", "status": "False", "reason": "Quota",
                                       "message": "no", "extra": {"deep": [1, 2, 3]}}]}
        });
        let eip: EIp = serde_json::from_value(answer).unwrap();
        let back = serde_json::to_value(&eip).unwrap();
        assert_eq!(back["spec"], json!({"externalNetworkType": "public"}));
        assert_eq!(
            back["status"],
            json!({"ipAddress": "203.0.113.5", "ready": false,
                   "conditions": [{"type": "Ready", "status": "False", "reason": "Quota", "message": "no"}]})
        );
    }
}
