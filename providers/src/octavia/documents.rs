//! What Octavia and Neutron return, as the provider reads it: the status tree of a load balancer,
//! load balancer records, floating IPs and pool members (serde documents of the wire format, the
//! fields capi-lb reads; an answer is parsed straight into them, `super::http::Body`).

use serde::Deserialize;

/// `GET /v2/lbaas/loadbalancers/{id}/status`.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct TreeDocument {
    pub(super) statuses: TreeStatuses,
}

#[derive(Clone, Debug, Deserialize)]
pub(super) struct TreeStatuses {
    pub(super) loadbalancer: Tree,
}

/// The status tree of a load balancer.
#[derive(Clone, Debug, Deserialize)]
pub struct Tree {
    pub(super) id: String,
    #[serde(default)]
    pub(super) provisioning_status: String,
    #[serde(default)]
    pub(super) operating_status: String,
    #[serde(default)]
    pub(super) listeners: Vec<TreeListener>,
}

#[derive(Clone, Debug, Deserialize)]
pub(super) struct TreeListener {
    pub(super) id: String,
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) pools: Vec<TreePool>,
}

#[derive(Clone, Debug, Deserialize)]
pub(super) struct TreePool {
    pub(super) id: String,
    #[serde(default)]
    pub(super) health_monitor: Option<TreeMonitor>,
    #[serde(default)]
    pub(super) members: Vec<TreeMember>,
}

#[derive(Clone, Debug, Deserialize)]
pub(super) struct TreeMonitor {
    pub(super) id: String,
    /// `TCP`, `HTTP`, ... (Octavia's status tree carries it).
    #[serde(default, rename = "type")]
    pub(super) type_: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub(super) struct TreeMember {
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) provisioning_status: String,
    pub(super) address: String,
    pub(super) protocol_port: i32,
}

/// A load balancer from a list or get.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct LbRecord {
    pub(super) id: String,
    #[serde(default)]
    pub(super) provisioning_status: String,
    #[serde(default)]
    pub(super) vip_address: Option<String>,
    #[serde(default)]
    pub(super) vip_port_id: Option<String>,
    #[serde(default)]
    pub(super) tags: Vec<String>,
    #[serde(default)]
    pub(super) description: Option<String>,
    #[serde(default)]
    pub(super) created_at: Option<String>,
    /// In the answer to a create: the pools, each with its members (a list or get has only IDs).
    #[serde(default)]
    pub(super) pools: Vec<CreatedPool>,
}

/// A pool created with its load balancer, and the members it was created with (the answer to a
/// create lists them).
#[derive(Clone, Debug, Deserialize)]
pub(super) struct CreatedPool {
    pub(super) id: String,
    #[serde(default)]
    pub(super) members: Vec<PoolMember>,
}

/// A Neutron floating IP.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct FloatingIp {
    pub(super) id: String,
    pub(super) floating_ip_address: String,
    #[serde(default)]
    pub(super) floating_network_id: Option<String>,
    #[serde(default)]
    pub(super) port_id: Option<String>,
    #[serde(default)]
    pub(super) description: Option<String>,
    #[serde(default)]
    pub(super) tags: Vec<String>,
}

/// A pool member as written (or read back): what the batch update matches and sets.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
pub struct PoolMember {
    /// Member address.
    pub address: String,
    /// Member port.
    pub protocol_port: i32,
    /// Target name.
    #[serde(default)]
    pub name: Option<String>,
    /// 0 while draining.
    #[serde(default = "one")]
    pub weight: i32,
}

fn one() -> i32 {
    1
}
