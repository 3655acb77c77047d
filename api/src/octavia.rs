//! `OctaviaLoadBalancer` (`infrastructure.cluster.x-k8s.io/v1alpha1`): configuration of capi-lb's
//! OpenStack Octavia provider — credentials, VIP placement, Octavia provider and flavor, listener,
//! pool and health-monitor options, floating IP — and a status recording what exists in Octavia so a
//! restarted controller continues where it was (and, with a lost status, finds its load balancer by
//! its ownership tags).

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Configuration of a load balancer in OpenStack Octavia.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "OctaviaLoadBalancer",
    plural = "octavialoadbalancers",
    namespaced,
    doc = "Configuration of a capi-lb load balancer in OpenStack Octavia: one listener, pool and health monitor per LoadBalancer port, members from the LoadBalancer's targets. Reference it from a LoadBalancer spec.infrastructureRef.",
    status = "OctaviaLoadBalancerStatus",
    shortname = "olb",
    category = "cluster-api",
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    label("clusterctl.cluster.x-k8s.io", ""),
    printcolumn = r#"{"name":"Ready","type":"boolean","jsonPath":".status.ready"}"#,
    printcolumn = r#"{"name":"ID","type":"string","jsonPath":".status.loadBalancerID"}"#,
    printcolumn = r#"{"name":"VIP","type":"string","jsonPath":".status.vipAddress"}"#,
    printcolumn = r#"{"name":"Floating IP","type":"string","jsonPath":".status.floatingIP"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.provisioningStatus"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.provider) || self.provider != 'ovn' || !has(self.listener) || size(self.listener.allowedCIDRs) == 0").message("allowedCIDRs are not supported by the ovn provider").field_path(".listener.allowedCIDRs"))]
pub struct OctaviaLoadBalancerSpec {
    /// Where the OpenStack credentials are: a Secret in this namespace holding a `clouds.yaml`.
    pub credentials: Credentials,

    /// Where the VIP goes.
    pub vip: Vip,

    /// Octavia provider driver (`amphora`, `ovn`); the cloud's default when unset. With `ovn` the
    /// pool algorithm is always `SOURCE_IP_PORT` (the only one OVN supports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<OctaviaProvider>,

    /// Octavia flavor ID.
    #[serde(default, rename = "flavorID", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub flavor_id: Option<String>,

    /// Availability zone (needs Octavia API 2.14+).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub availability_zone: Option<String>,

    /// Listener options, for every port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listener: Option<ListenerOptions>,

    /// Pool load-balancing algorithm. Defaults to `ROUND_ROBIN`.
    #[serde(default)]
    pub algorithm: Algorithm,

    /// Health monitor of every pool. Defaults to a TCP check every 10 s.
    #[serde(default)]
    pub health_monitor: HealthMonitor,

    /// A floating IP in front of the VIP.
    #[serde(
        default,
        rename = "floatingIP",
        skip_serializing_if = "Option::is_none"
    )]
    pub floating_ip: Option<FloatingIp>,

    /// When Octavia reports the load balancer in ERROR (terminal), delete and recreate it. Off by
    /// default: the ERROR is reported with Octavia's fault for someone to look at.
    #[serde(default)]
    pub recreate_on_error: bool,

    /// Extra tags on every Octavia object (capi-lb's ownership tags are always added).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 255)))]
    pub tags: Vec<String>,
}

/// A reference to a `clouds.yaml` in a Secret of the same namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Credentials {
    /// Name of the Secret (in this namespace; other namespaces are never read).
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub secret_name: String,
    /// Key of the `clouds.yaml` in the Secret. Defaults to `clouds.yaml`.
    #[serde(default = "default_clouds_key")]
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
    /// Cloud to use from the `clouds.yaml`. Defaults to `openstack`.
    #[serde(default = "default_cloud")]
    #[schemars(length(min = 1, max = 255))]
    pub cloud: String,
    /// Region, overriding the cloud's `region_name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub region: Option<String>,
    /// Key in the same Secret holding a CA bundle (PEM) for the OpenStack endpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub ca_bundle_key: Option<String>,
}

/// VIP placement: a network or a subnet, and optionally a fixed address.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.networkID) != has(self.subnetID)").message("set exactly one of networkID and subnetID"))]
pub struct Vip {
    /// Network for the VIP.
    #[serde(default, rename = "networkID", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub network_id: Option<String>,
    /// Subnet for the VIP.
    #[serde(default, rename = "subnetID", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub subnet_id: Option<String>,
    /// A fixed VIP address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 45))]
    #[x_kube(validation = Rule::new("isIP(self)").message("must be an IP address"))]
    pub address: Option<String>,
}

/// Octavia provider drivers.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OctaviaProvider {
    /// Amphora VMs (HAProxy).
    #[serde(rename = "amphora")]
    Amphora,
    /// OVN load balancers.
    #[serde(rename = "ovn")]
    Ovn,
}

/// Listener options.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ListenerOptions {
    /// Source CIDRs allowed to connect (Octavia API 2.12+, not with `ovn`). Empty allows all.
    #[serde(
        default,
        rename = "allowedCIDRs",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(length(max = 64), inner(length(max = 43)))]
    #[x_kube(validation = Rule::new("self.all(c, isCIDR(c))").message("every entry must be a CIDR"))]
    pub allowed_cidrs: Vec<String>,
    /// Client inactivity timeout, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86_400_000))]
    pub timeout_client_data_ms: Option<i32>,
    /// Backend member inactivity timeout, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86_400_000))]
    pub timeout_member_data_ms: Option<i32>,
    /// Backend member connection timeout, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86_400_000))]
    pub timeout_member_connect_ms: Option<i32>,
}

/// Pool algorithms.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Algorithm {
    /// Round robin.
    #[default]
    #[serde(rename = "ROUND_ROBIN")]
    RoundRobin,
    /// Least connections.
    #[serde(rename = "LEAST_CONNECTIONS")]
    LeastConnections,
    /// Source IP hash.
    #[serde(rename = "SOURCE_IP")]
    SourceIp,
    /// Source IP and port hash (the only one with `ovn`).
    #[serde(rename = "SOURCE_IP_PORT")]
    SourceIpPort,
}

/// Health monitor types.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MonitorType {
    /// TCP connect.
    #[default]
    #[serde(rename = "TCP")]
    Tcp,
    /// HTTP request.
    #[serde(rename = "HTTP")]
    Http,
    /// HTTPS request.
    #[serde(rename = "HTTPS")]
    Https,
    /// TLS handshake.
    #[serde(rename = "TLS-HELLO")]
    TlsHello,
}

/// A pool's health monitor.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.urlPath) || self.type == 'HTTP' || self.type == 'HTTPS'").message("urlPath needs type HTTP or HTTPS"))]
pub struct HealthMonitor {
    /// Check type. Defaults to `TCP`.
    #[serde(default, rename = "type")]
    pub type_: MonitorType,
    /// Seconds between checks. Defaults to 5.
    #[serde(default = "default_delay")]
    #[schemars(range(min = 1, max = 3600))]
    pub delay_seconds: i32,
    /// Seconds a check may take (at most `delaySeconds`). Defaults to 3.
    #[serde(default = "default_timeout")]
    #[schemars(range(min = 1, max = 3600))]
    pub timeout_seconds: i32,
    /// Successful checks in a row before a member that failed is ONLINE again. Defaults to 2.
    #[serde(default = "default_retries")]
    #[schemars(range(min = 1, max = 10))]
    pub max_retries: i32,
    /// Failed checks in a row before a member is taken out (ERROR), apart from `maxRetries`.
    /// Defaults to 2: with the other defaults a member that stopped answering gets no new
    /// connections 5 to 10 s after it stopped (8 to 13 s when it does not refuse connections and
    /// each check waits its timeout).
    #[serde(default = "default_retries_down")]
    #[schemars(range(min = 1, max = 10))]
    pub max_retries_down: i32,
    /// Path for HTTP and HTTPS checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^/"))]
    pub url_path: Option<String>,
    /// Expected HTTP codes (`200`, `200,202`, `200-204`) for HTTP and HTTPS checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 3, max = 64),
        regex(pattern = r"^[0-9]{3}([-,][0-9]{3})*$")
    )]
    pub expected_codes: Option<String>,
}

impl Default for HealthMonitor {
    fn default() -> Self {
        Self {
            type_: MonitorType::Tcp,
            delay_seconds: default_delay(),
            timeout_seconds: default_timeout(),
            max_retries: default_retries(),
            max_retries_down: default_retries_down(),
            url_path: None,
            expected_codes: None,
        }
    }
}

/// A floating IP in front of the VIP: allocated from a network (and released on delete), or a
/// given address (kept on delete). With both, the given address is used, and must be on that
/// network (so a template can name the network and take an owned address when one is given).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.networkID) || has(self.address)").message("set networkID (allocate a floating IP from it), address (use this floating IP), or both (use this floating IP, which must be on that network)"))]
pub struct FloatingIp {
    /// External network to allocate a floating IP from; with `address`, the network that floating
    /// IP must be on.
    #[serde(default, rename = "networkID", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub network_id: Option<String>,
    /// An existing floating IP to use (instead of allocating one); it is kept when the load
    /// balancer is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 45))]
    #[x_kube(validation = Rule::new("isIP(self)").message("must be an IP address"))]
    pub address: Option<String>,
}

/// What exists in Octavia for this load balancer.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OctaviaLoadBalancerStatus {
    /// Octavia load balancer ID.
    #[serde(
        default,
        rename = "loadBalancerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub load_balancer_id: Option<String>,
    /// Per LoadBalancer port: the listener, pool and health monitor IDs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<ListenerStatus>,
    /// The VIP address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vip_address: Option<String>,
    /// Neutron port of the VIP (where the floating IP is associated).
    #[serde(default, rename = "vipPortID", skip_serializing_if = "Option::is_none")]
    pub vip_port_id: Option<String>,
    /// The floating IP in front of the VIP.
    #[serde(
        default,
        rename = "floatingIP",
        skip_serializing_if = "Option::is_none"
    )]
    pub floating_ip: Option<String>,
    /// Neutron ID of the floating IP.
    #[serde(
        default,
        rename = "floatingIPID",
        skip_serializing_if = "Option::is_none"
    )]
    pub floating_ip_id: Option<String>,
    /// True when capi-lb allocated the floating IP (and releases it on delete).
    #[serde(default)]
    pub floating_ip_allocated: bool,
    /// Octavia's provisioning status of the load balancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_status: Option<String>,
    /// Octavia's operating status of the load balancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operating_status: Option<String>,
    /// The Octavia API version detected (`2.27`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Provisioned and ACTIVE.
    #[serde(default)]
    pub ready: bool,
    /// Members across all pools.
    #[serde(default)]
    pub member_count: i32,
    /// Since when the load balancer has been in a `PENDING_*` state (RFC 3339), while it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_since: Option<String>,
}

/// One port's Octavia objects.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ListenerStatus {
    /// The LoadBalancer port.
    pub port: i32,
    /// Listener ID.
    #[serde(
        default,
        rename = "listenerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub listener_id: Option<String>,
    /// Pool ID.
    #[serde(default, rename = "poolID", skip_serializing_if = "Option::is_none")]
    pub pool_id: Option<String>,
    /// Health monitor ID.
    #[serde(default, rename = "monitorID", skip_serializing_if = "Option::is_none")]
    pub monitor_id: Option<String>,
    /// Hashes of the listener, pool and health-monitor settings last applied to these objects:
    /// a changed OctaviaLoadBalancer spec is applied without reading the objects back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<AppliedSettings>,
}

/// Hashes of the settings applied to one port's Octavia objects.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AppliedSettings {
    /// Listener settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listener: Option<String>,
    /// Pool settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// Health-monitor settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monitor: Option<String>,
}

fn default_clouds_key() -> String {
    "clouds.yaml".to_string()
}

fn default_cloud() -> String {
    "openstack".to_string()
}

fn default_delay() -> i32 {
    5
}

fn default_timeout() -> i32 {
    3
}

fn default_retries() -> i32 {
    2
}

fn default_retries_down() -> i32 {
    2
}

crate::validation::validated!(OctaviaLoadBalancer);
