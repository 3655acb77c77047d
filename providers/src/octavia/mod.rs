//! The OpenStack Octavia provider: load balancers in Octavia (LBaaS v2), reached through Keystone
//! with credentials from a `clouds.yaml` in a Secret next to the `OctaviaLoadBalancer`.
//!
//! For a LoadBalancer whose `infrastructureRef` names an `OctaviaLoadBalancer`:
//! - one Octavia load balancer `capi-lb-<namespace>-<name>`, created in one call together with one
//!   listener, pool and health monitor per LoadBalancer port (`<lb>-<protocol>-<port>`); ports added
//!   later get their listener the same way, ports removed lose theirs;
//! - members from the LoadBalancer's targets, written per pool with Octavia's batch member update;
//!   a draining member gets weight 0 (existing connections continue, no new ones) until the
//!   reconciler leaves it out after the drain time;
//! - every object carries capi-lb's ownership tags (LoadBalancer namespace, name and UID, and the
//!   OctaviaLoadBalancer's UID). A restarted controller with a lost status finds its load balancer by
//!   these tags and adopts it; a load balancer without them (same name or not) is never touched.
//!
//! Nothing blocks: Octavia serialises writes on a load balancer (PENDING_* objects are immutable and
//! refuse writes with 409), so each call does at most one write and answers `Pending` to be asked
//! again in a moment. A steady-state reconcile costs one Octavia request (the status tree), shared by
//! `ensure` and `converge_members`.

pub mod api;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use capi_lb_api::loadbalancer::{LoadBalancerAddress, Protocol};
use capi_lb_api::octavia::{
    Algorithm, AppliedSettings, HealthMonitor, ListenerStatus, MonitorType,
    OctaviaProvider as Driver,
};
use capi_lb_api::validation::parse;
use capi_lb_api::{OctaviaLoadBalancer, OctaviaLoadBalancerSpec, OctaviaLoadBalancerStatus};
use jiff::Timestamp;
use kube::ResourceExt;
use kube::core::{ApiResource, DynamicObject};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::clock::SharedClock;
use crate::error::{INVALID_CONFIGURATION, ProviderError};
use crate::provider::{
    DeleteOutcome, DeleteRequest, DesiredMember, EnsureOutcome, EnsureRequest, Listener,
    LoadBalancerIdentity, MemberIntent, MemberState, MemberStatus, MembersOutcome, MembersRequest,
    Progress, Provider, tags,
};

use api::{ApiObserver, ApiVersion, CredentialsRef, Request, Session, Sessions};

/// Name of the Octavia provider for `--providers`.
pub const NAME: &str = "octavia";

/// Condition reasons of the Octavia provider.
pub mod reason {
    /// The credentials Secret does not exist.
    pub const CREDENTIALS_NOT_FOUND: &str = "CredentialsNotFound";
    /// The credentials Secret lacks the key, or its clouds.yaml is unusable or lacks the cloud.
    pub const CREDENTIALS_INVALID: &str = "CredentialsInvalid";
    /// Keystone refused the credentials.
    pub const AUTHENTICATION_FAILED: &str = "AuthenticationFailed";
    /// The Keystone catalog has no `load-balancer` endpoint (for the region).
    pub const ENDPOINT_NOT_IN_CATALOG: &str = "EndpointNotInCatalog";
    /// Octavia refused a create for quota.
    pub const QUOTA_EXCEEDED: &str = "QuotaExceeded";
    /// Octavia does not know the requested provider driver or flavor.
    pub const PROVIDER_OR_FLAVOR_NOT_FOUND: &str = "ProviderOrFlavorNotFound";
    /// Octavia refused a request as invalid.
    pub const REQUEST_REJECTED: &str = "RequestRejected";
    /// The load balancer (or a child) is PENDING_*; Octavia refuses writes until it is not.
    pub const LOAD_BALANCER_PENDING: &str = "LoadBalancerPending";
    /// The load balancer is in ERROR (terminal) and `recreateOnError` is off.
    pub const LOAD_BALANCER_ERROR: &str = "LoadBalancerError";
    /// The cloud's Octavia API is too old for a feature the spec uses.
    pub const API_VERSION_UNSUPPORTED: &str = "APIVersionUnsupported";
    /// A member address is not an IP address (Octavia members need one).
    pub const MEMBER_ADDRESS_NOT_IP: &str = "MemberAddressNotIP";
    /// The floating IP named in `spec.floatingIP.address` does not exist (in this project).
    pub const FLOATING_IP_NOT_FOUND: &str = "FloatingIPNotFound";
    /// The given floating IP is on another port, or the VIP port has a floating IP capi-lb did not
    /// allocate; capi-lb never takes one over.
    pub const FLOATING_IP_IN_USE: &str = "FloatingIPInUse";
    /// The external network of `spec.floatingIP.networkID` does not exist.
    pub const FLOATING_NETWORK_NOT_FOUND: &str = "FloatingNetworkNotFound";
    /// The OctaviaLoadBalancer (and so the credentials) is gone while the LoadBalancer is deleted.
    pub const CREDENTIALS_UNAVAILABLE: &str = "CredentialsUnavailable";

    /// The reasons that report something wrong (Warning Events), as opposed to a normal wait.
    pub const PROBLEMS: &[&str] = &[
        CREDENTIALS_NOT_FOUND,
        CREDENTIALS_INVALID,
        AUTHENTICATION_FAILED,
        ENDPOINT_NOT_IN_CATALOG,
        QUOTA_EXCEEDED,
        PROVIDER_OR_FLAVOR_NOT_FOUND,
        REQUEST_REJECTED,
        LOAD_BALANCER_ERROR,
        API_VERSION_UNSUPPORTED,
        MEMBER_ADDRESS_NOT_IP,
        FLOATING_IP_NOT_FOUND,
        FLOATING_IP_IN_USE,
        FLOATING_NETWORK_NOT_FOUND,
        CREDENTIALS_UNAVAILABLE,
    ];
}

/// How soon to look again while Octavia is busy with a load balancer.
pub const POLL: Duration = Duration::from_secs(2);
/// How long the status tree read by `ensure` serves `converge_members` of the same reconcile.
const TREE_FRESH: Duration = Duration::from_secs(5);
/// How long what the provider knows of member weights is trusted without reading them back.
const MEMBERS_FRESH: Duration = Duration::from_secs(600);
/// How long a floating IP seen in place is trusted without asking Neutron.
const FIP_FRESH: Duration = Duration::from_secs(600);
/// Octavia's longest name.
const NAME_MAX: usize = 255;
/// A tag value that marks everything capi-lb creates.
const CAPI_LB_TAG: &str = "capi-lb";

/// Why an operation stopped before the end: a state that needs time (a `Progress::Pending`), or an
/// error.
#[derive(Debug)]
pub enum Stop {
    /// Look again later, reported with the progress' reason.
    Wait(Progress),
    /// Back off (transient) or report (permanent).
    Error(ProviderError),
}

impl From<ProviderError> for Stop {
    fn from(e: ProviderError) -> Self {
        Stop::Error(e)
    }
}

/// The Octavia provider.
pub struct OctaviaProvider {
    client: kube::Client,
    clock: SharedClock,
    observer: Option<Arc<dyn ApiObserver>>,
    sessions: Sessions,
    /// Serialises the provider's calls per LoadBalancer: Octavia accepts one write at a time.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The last status tree per Octavia load balancer, with when it was read.
    trees: Mutex<HashMap<String, (Instant, Tree)>>,
    /// Members per pool as last written or read, with when.
    members: Mutex<HashMap<String, (Instant, Vec<PoolMember>)>>,
    /// When the floating IP of a load balancer was last checked against Neutron.
    fip_checked: Mutex<HashMap<String, Instant>>,
    /// Load balancers whose ownership tags this process has seen.
    verified: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for OctaviaProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OctaviaProvider").finish_non_exhaustive()
    }
}

// ----- what Octavia returns -----

/// `GET /v2/lbaas/loadbalancers/{id}/status`.
#[derive(Clone, Debug, Deserialize)]
struct TreeDocument {
    statuses: TreeStatuses,
}

#[derive(Clone, Debug, Deserialize)]
struct TreeStatuses {
    loadbalancer: Tree,
}

/// The status tree of a load balancer.
#[derive(Clone, Debug, Deserialize)]
pub struct Tree {
    id: String,
    #[serde(default)]
    provisioning_status: String,
    #[serde(default)]
    operating_status: String,
    #[serde(default)]
    listeners: Vec<TreeListener>,
}

#[derive(Clone, Debug, Deserialize)]
struct TreeListener {
    id: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    pools: Vec<TreePool>,
}

#[derive(Clone, Debug, Deserialize)]
struct TreePool {
    id: String,
    #[serde(default)]
    health_monitor: Option<TreeMonitor>,
    #[serde(default)]
    members: Vec<TreeMember>,
}

#[derive(Clone, Debug, Deserialize)]
struct TreeMonitor {
    id: String,
}

#[derive(Clone, Debug, Deserialize)]
struct TreeMember {
    #[serde(default)]
    provisioning_status: String,
    address: String,
    protocol_port: i32,
}

/// A load balancer from a list or get.
#[derive(Clone, Debug, Deserialize)]
struct LbRecord {
    id: String,
    #[serde(default)]
    provisioning_status: String,
    #[serde(default)]
    vip_address: Option<String>,
    #[serde(default)]
    vip_port_id: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    created_at: Option<String>,
}

/// A Neutron floating IP.
#[derive(Clone, Debug, Deserialize)]
struct FloatingIp {
    id: String,
    floating_ip_address: String,
    #[serde(default)]
    port_id: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
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

// ----- names, tags, desired settings -----

fn cut(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

/// Name of the Octavia load balancer of a LoadBalancer.
pub fn lb_name(identity: &LoadBalancerIdentity) -> String {
    cut(
        &format!("capi-lb-{}-{}", identity.namespace, identity.name),
        200,
    )
}

/// Name of a port's listener, pool and health monitor.
fn child_name(lb: &str, listener: &Listener) -> String {
    cut(
        &format!(
            "{lb}-{}-{}",
            listener.protocol.as_str().to_lowercase(),
            listener.port
        ),
        NAME_MAX,
    )
}

/// The ownership tag (the one adoption looks for).
fn uid_tag(identity: &LoadBalancerIdentity) -> String {
    format!("{}={}", tags::UID, identity.uid)
}

/// Neutron's tags of an allocated floating IP: without `/` (Neutron addresses single tags in URL
/// paths), the UID one decides ownership.
fn fip_tags(identity: &LoadBalancerIdentity) -> Vec<String> {
    let mut tags = vec![
        CAPI_LB_TAG.to_string(),
        fip_uid_tag(identity),
        cut(
            &format!(
                "capi-lb-loadbalancer={}.{}",
                identity.namespace, identity.name
            ),
            NAME_MAX,
        ),
    ];
    if let Some(cluster) = &identity.cluster_name {
        tags.push(cut(&format!("capi-lb-cluster={cluster}"), NAME_MAX));
    }
    tags
}

fn fip_uid_tag(identity: &LoadBalancerIdentity) -> String {
    format!("capi-lb-uid={}", identity.uid)
}

fn infra_tag(uid: &str) -> String {
    format!("{}={uid}", tags::INFRASTRUCTURE_UID)
}

/// Every tag on every object: capi-lb's marker, the identity, and the spec's extra tags.
fn object_tags(
    identity: &LoadBalancerIdentity,
    infra_uid: Option<&str>,
    extra: &[String],
) -> Vec<String> {
    let mut out = vec![CAPI_LB_TAG.to_string()];
    out.extend(
        identity
            .tags()
            .iter()
            .map(|(k, v)| cut(&format!("{k}={v}"), NAME_MAX)),
    );
    if let Some(uid) = infra_uid {
        out.push(infra_tag(uid));
    }
    for tag in extra {
        if !tag.contains(',') && !out.contains(tag) {
            out.push(tag.clone());
        }
    }
    out
}

/// The description: carries the UID too, which is how ownership is told on clouds without tags.
fn description(identity: &LoadBalancerIdentity) -> String {
    cut(
        &format!(
            "capi-lb LoadBalancer {} uid={}",
            identity.display(),
            identity.uid
        ),
        NAME_MAX,
    )
}

/// True when the load balancer belongs to this LoadBalancer (and this infrastructure object, when
/// it is tagged with one).
fn owned(record: &LbRecord, identity: &LoadBalancerIdentity, infra_uid: Option<&str>) -> bool {
    let by_tag = record.tags.contains(&uid_tag(identity));
    let by_description = record.tags.is_empty()
        && record
            .description
            .as_deref()
            .is_some_and(|d| d.ends_with(&format!("uid={}", identity.uid)));
    let infra_ok = match infra_uid {
        Some(uid) => {
            let tagged: Vec<&String> = record
                .tags
                .iter()
                .filter(|t| t.starts_with(&format!("{}=", tags::INFRASTRUCTURE_UID)))
                .collect();
            tagged.is_empty() || tagged.iter().any(|t| **t == infra_tag(uid))
        }
        None => true,
    };
    (by_tag || by_description) && infra_ok
}

fn hash(value: &Value) -> String {
    Sha256::digest(value.to_string().as_bytes())
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The spec as the provider uses it.
struct Infra {
    uid: Option<String>,
    namespace: String,
    spec: OctaviaLoadBalancerSpec,
    status: OctaviaLoadBalancerStatus,
}

impl Infra {
    fn read(infra: &DynamicObject, identity: &LoadBalancerIdentity) -> Result<Self, ProviderError> {
        let value = serde_json::to_value(infra)
            .map_err(|e| ProviderError::permanent(INVALID_CONFIGURATION, e.to_string()))?;
        let parsed: OctaviaLoadBalancer = parse(&value).map_err(|e| {
            ProviderError::permanent(
                INVALID_CONFIGURATION,
                format!("OctaviaLoadBalancer {}: {e}", infra.name_any()),
            )
        })?;
        Ok(Self {
            uid: infra.metadata.uid.clone(),
            namespace: identity.namespace.clone(),
            spec: parsed.spec,
            // The status is ours: read as written (the spec parse above validates the spec only).
            status: infra
                .data
                .get("status")
                .cloned()
                .and_then(|s| serde_json::from_value(s).ok())
                .unwrap_or_default(),
        })
    }

    fn credentials(&self) -> CredentialsRef {
        let c = &self.spec.credentials;
        CredentialsRef {
            namespace: self.namespace.clone(),
            secret: c.secret_name.clone(),
            key: c.key.clone(),
            cloud: c.cloud.clone(),
            region: c.region.clone(),
            ca_bundle_key: c.ca_bundle_key.clone(),
        }
    }

    fn algorithm(&self) -> &'static str {
        let algorithm = if self.spec.provider == Some(Driver::Ovn) {
            Algorithm::SourceIpPort
        } else {
            self.spec.algorithm
        };
        match algorithm {
            Algorithm::RoundRobin => "ROUND_ROBIN",
            Algorithm::LeastConnections => "LEAST_CONNECTIONS",
            Algorithm::SourceIp => "SOURCE_IP",
            Algorithm::SourceIpPort => "SOURCE_IP_PORT",
        }
    }

    /// Refuse what the cloud's API version cannot do, naming the field and the versions.
    fn check_version(&self, version: ApiVersion) -> Result<(), Stop> {
        let mut missing = Vec::new();
        let cidrs = self
            .spec
            .listener
            .as_ref()
            .is_some_and(|l| !l.allowed_cidrs.is_empty());
        if cidrs && version < ApiVersion::ALLOWED_CIDRS {
            missing.push(format!(
                "listener.allowedCIDRs needs {}",
                ApiVersion::ALLOWED_CIDRS
            ));
        }
        if self.spec.availability_zone.is_some() && version < ApiVersion::AVAILABILITY_ZONES {
            missing.push(format!(
                "availabilityZone needs {}",
                ApiVersion::AVAILABILITY_ZONES
            ));
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(Stop::Wait(Progress::pending_because(
                reason::API_VERSION_UNSUPPORTED,
                format!(
                    "this cloud's Octavia API is {version}: {}",
                    missing.join("; ")
                ),
                Duration::from_secs(300),
            )))
        }
    }
}

fn monitor_type(monitor: &HealthMonitor, protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Udp => "UDP-CONNECT",
        Protocol::Tcp => match monitor.type_ {
            MonitorType::Tcp => "TCP",
            MonitorType::Http => "HTTP",
            MonitorType::Https => "HTTPS",
            MonitorType::TlsHello => "TLS-HELLO",
        },
    }
}

/// The settings of one port's listener, pool and health monitor (what is hashed and written).
struct Settings {
    listener: Map<String, Value>,
    pool: Map<String, Value>,
    monitor: Map<String, Value>,
}

impl Settings {
    fn new(infra: &Infra, listener: &Listener, version: ApiVersion) -> Self {
        let options = infra.spec.listener.clone().unwrap_or_default();
        let mut l = Map::new();
        if listener.protocol == Protocol::Tcp {
            l.insert(
                "timeout_client_data".into(),
                json!(options.timeout_client_data_ms.unwrap_or(50_000)),
            );
            l.insert(
                "timeout_member_data".into(),
                json!(options.timeout_member_data_ms.unwrap_or(50_000)),
            );
            l.insert(
                "timeout_member_connect".into(),
                json!(options.timeout_member_connect_ms.unwrap_or(5_000)),
            );
        }
        if version >= ApiVersion::ALLOWED_CIDRS {
            l.insert("allowed_cidrs".into(), json!(options.allowed_cidrs));
        }
        let mut p = Map::new();
        p.insert("lb_algorithm".into(), json!(infra.algorithm()));
        let hm = &infra.spec.health_monitor;
        let kind = monitor_type(hm, listener.protocol);
        let mut m = Map::new();
        m.insert("type".into(), json!(kind));
        m.insert("delay".into(), json!(hm.delay_seconds));
        m.insert(
            "timeout".into(),
            json!(hm.timeout_seconds.min(hm.delay_seconds)),
        );
        m.insert("max_retries".into(), json!(hm.max_retries));
        if kind == "HTTP" || kind == "HTTPS" {
            m.insert(
                "url_path".into(),
                json!(hm.url_path.clone().unwrap_or_else(|| "/".into())),
            );
            m.insert(
                "expected_codes".into(),
                json!(hm.expected_codes.clone().unwrap_or_else(|| "200".into())),
            );
        }
        Self {
            listener: l,
            pool: p,
            monitor: m,
        }
    }

    fn applied(&self) -> AppliedSettings {
        AppliedSettings {
            listener: Some(hash(&Value::Object(self.listener.clone()))),
            pool: Some(hash(&Value::Object(self.pool.clone()))),
            monitor: Some(hash(&Value::Object(self.monitor.clone()))),
        }
    }
}

fn with(mut base: Map<String, Value>, extra: Value) -> Value {
    if let Value::Object(extra) = extra {
        base.extend(extra);
    }
    Value::Object(base)
}

/// What one call is doing: the status it will report, and what it changed.
struct Run<'a> {
    identity: &'a LoadBalancerIdentity,
    infra: Infra,
    status: OctaviaLoadBalancerStatus,
    changes: Vec<String>,
    created: bool,
    now: Timestamp,
}

impl<'a> Run<'a> {
    fn new(infra: Infra, identity: &'a LoadBalancerIdentity, now: Timestamp) -> Self {
        let status = infra.status.clone();
        Self {
            identity,
            infra,
            status,
            changes: Vec::new(),
            created: false,
            now,
        }
    }

    fn tags(&self) -> Vec<String> {
        object_tags(
            self.identity,
            self.infra.uid.as_deref(),
            &self.infra.spec.tags,
        )
    }

    fn lb_name(&self) -> String {
        lb_name(self.identity)
    }

    fn forget_lb(&mut self) {
        self.status = OctaviaLoadBalancerStatus {
            api_version: self.status.api_version.clone(),
            ..Default::default()
        };
    }

    fn addresses(&self) -> Vec<LoadBalancerAddress> {
        self.status
            .floating_ip
            .iter()
            .chain(self.status.vip_address.iter())
            .take(1)
            .map(|a| LoadBalancerAddress::ip(a.clone()))
            .collect()
    }

    /// The status as fields to merge: cleared fields are sent as null.
    fn status_map(&self) -> Map<String, Value> {
        let mut map = match serde_json::to_value(&self.status) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        };
        for key in [
            "loadBalancerID",
            "vipAddress",
            "vipPortID",
            "floatingIP",
            "floatingIPID",
            "provisioningStatus",
            "operatingStatus",
            "apiVersion",
            "pendingSince",
        ] {
            map.entry(key.to_string()).or_insert(Value::Null);
        }
        map.entry("listeners".to_string())
            .or_insert_with(|| Value::Array(Vec::new()));
        map
    }

    /// Pending on the load balancer's PENDING_* state, saying since when.
    fn pending(&mut self, state: &str) -> Progress {
        let since = self
            .status
            .pending_since
            .as_deref()
            .and_then(|s| s.parse::<Timestamp>().ok())
            .unwrap_or(self.now);
        self.status.pending_since = Some(since.to_string());
        let waited = self.now.duration_since(since).as_secs().max(0);
        Progress::pending_because(
            reason::LOAD_BALANCER_PENDING,
            format!(
                "Octavia load balancer {} is {state} since {since} ({waited}s)",
                self.status.load_balancer_id.as_deref().unwrap_or("?")
            ),
            POLL,
        )
    }
}

fn done_or_wait(result: Result<Progress, Stop>) -> Result<Progress, ProviderError> {
    match result {
        Ok(progress) | Err(Stop::Wait(progress)) => Ok(progress),
        Err(Stop::Error(e)) => Err(e),
    }
}

fn decode<T: for<'de> Deserialize<'de>>(value: Value, what: &str) -> Result<T, Stop> {
    serde_json::from_value(value).map_err(|e| {
        Stop::Error(ProviderError::transient(format!(
            "unexpected Octavia answer to {what}: {e}"
        )))
    })
}

impl OctaviaProvider {
    /// A provider reading credentials through `client`.
    pub fn new(client: kube::Client, clock: SharedClock) -> Self {
        Self {
            client,
            clock,
            observer: None,
            sessions: Sessions::default(),
            locks: Mutex::new(HashMap::new()),
            trees: Mutex::new(HashMap::new()),
            members: Mutex::new(HashMap::new()),
            fip_checked: Mutex::new(HashMap::new()),
            verified: Mutex::new(HashSet::new()),
        }
    }

    /// Report every OpenStack request to `observer` (metrics, benchmarks).
    pub fn with_observer(mut self, observer: Arc<dyn ApiObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    fn observer(&self) -> Option<&dyn ApiObserver> {
        self.observer.as_deref()
    }

    async fn lock(&self, key: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = match self.locks.lock() {
            Ok(mut locks) => locks.entry(key.to_string()).or_default().clone(),
            Err(_) => Arc::new(tokio::sync::Mutex::new(())),
        };
        lock.lock_owned().await
    }

    async fn session(&self, infra: &Infra) -> Result<Arc<Session>, Stop> {
        self.sessions
            .get(&self.client, &infra.credentials(), self.observer())
            .await
    }

    fn forget_tree(&self, id: &str) {
        if let Ok(mut trees) = self.trees.lock() {
            trees.remove(id);
        }
    }

    /// The status tree of load balancer `id` (`None`: it does not exist), from the cache when
    /// `fresh` allows.
    async fn tree(&self, session: &Session, id: &str, fresh: bool) -> Result<Option<Tree>, Stop> {
        if fresh
            && let Ok(trees) = self.trees.lock()
            && let Some((at, tree)) = trees.get(id)
            && at.elapsed() < TREE_FRESH
        {
            return Ok(Some(tree.clone()));
        }
        let reply = session
            .send(
                self.observer(),
                "loadbalancer.status",
                Request::get(format!("lbaas/loadbalancers/{id}/status")),
            )
            .await?;
        if reply.status == 404 {
            self.forget_tree(id);
            return Ok(None);
        }
        if !reply.ok() {
            return Err(session.failure("loadbalancer.status", &reply));
        }
        let tree = decode::<TreeDocument>(reply.body, "loadbalancer.status")?
            .statuses
            .loadbalancer;
        if let Ok(mut trees) = self.trees.lock() {
            trees.insert(id.to_string(), (Instant::now(), tree.clone()));
        }
        Ok(Some(tree))
    }

    /// The load balancers this LoadBalancer owns, oldest first: by tag (API 2.5+), else by name
    /// and the UID in the description.
    async fn find_owned(
        &self,
        session: &Session,
        identity: &LoadBalancerIdentity,
        infra_uid: Option<&str>,
    ) -> Result<Vec<LbRecord>, Stop> {
        let request = if session.version >= ApiVersion::TAGS {
            Request::get("lbaas/loadbalancers").query("tags", uid_tag(identity))
        } else {
            Request::get("lbaas/loadbalancers").query("name", lb_name(identity))
        };
        let body = session
            .expect(self.observer(), "loadbalancer.list", request)
            .await?;
        let list: Vec<LbRecord> = decode(
            body.get("loadbalancers").cloned().unwrap_or(json!([])),
            "loadbalancer.list",
        )?;
        let mut owned: Vec<LbRecord> = list
            .into_iter()
            .filter(|r| owned(r, identity, infra_uid) && r.provisioning_status != "DELETED")
            .collect();
        owned.sort_by(|a, b| a.created_at.cmp(&b.created_at));
        Ok(owned)
    }

    /// Find the load balancer: the one in the status, else adopt one found by its tags.
    async fn locate(&self, session: &Session, run: &mut Run<'_>) -> Result<Option<Tree>, Stop> {
        if let Some(id) = run.status.load_balancer_id.clone() {
            // An ID from the status is trusted once this process has seen its tags (it created,
            // adopted or checked it); a status naming a load balancer that is not ours is ignored.
            let trusted = self.verified.lock().is_ok_and(|v| v.contains(&id))
                || self.verify(session, run, &id).await?;
            if trusted {
                if let Some(tree) = self.tree(session, &id, false).await? {
                    return Ok(Some(tree));
                }
                run.changes
                    .push(format!("Octavia load balancer {id} is gone; looking again"));
            }
            run.forget_lb();
        }
        let found = self
            .find_owned(session, run.identity, run.infra.uid.as_deref())
            .await?;
        let Some(record) = found
            .into_iter()
            .find(|r| r.provisioning_status != "PENDING_DELETE")
        else {
            return Ok(None);
        };
        run.status.load_balancer_id = Some(record.id.clone());
        run.status.vip_address = record.vip_address.clone();
        run.status.vip_port_id = record.vip_port_id.clone();
        run.changes.push(format!(
            "adopted Octavia load balancer {} (found by its ownership tags)",
            record.id
        ));
        self.mark_verified(&record.id);
        self.tree(session, &record.id, false).await
    }

    fn mark_verified(&self, id: &str) {
        if let Ok(mut verified) = self.verified.lock() {
            verified.insert(id.to_string());
        }
    }

    /// Whether load balancer `id` (from the status) carries this LoadBalancer's ownership tags.
    /// Gone counts as ours (nothing to protect); not ours is reported in the changes.
    async fn verify(&self, session: &Session, run: &mut Run<'_>, id: &str) -> Result<bool, Stop> {
        let reply = session
            .send(
                self.observer(),
                "loadbalancer.get",
                Request::get(format!("lbaas/loadbalancers/{id}")),
            )
            .await?;
        if reply.status == 404 {
            return Ok(true);
        }
        if !reply.ok() {
            return Err(session.failure("loadbalancer.get", &reply));
        }
        let record: LbRecord = decode(
            reply
                .body
                .get("loadbalancer")
                .cloned()
                .unwrap_or(Value::Null),
            "loadbalancer.get",
        )?;
        if owned(&record, run.identity, run.infra.uid.as_deref()) {
            self.mark_verified(id);
            return Ok(true);
        }
        run.changes.push(format!(
            "the status names Octavia load balancer {id}, which does not carry this LoadBalancer's ownership tags; it is left alone"
        ));
        Ok(false)
    }

    /// Body of a listener with its default pool and health monitor (single-call create).
    fn listener_body(&self, run: &Run<'_>, listener: &Listener, version: ApiVersion) -> Value {
        let name = child_name(&run.lb_name(), listener);
        let settings = Settings::new(&run.infra, listener, version);
        let tags = run.tags();
        let protocol = listener.protocol.as_str();
        let mut monitor = with(settings.monitor, json!({ "name": name }));
        let mut pool = with(settings.pool, json!({ "name": name, "protocol": protocol }));
        let mut body = with(
            settings.listener,
            json!({ "name": name, "protocol": protocol, "protocol_port": listener.port }),
        );
        if version >= ApiVersion::TAGS {
            for object in [&mut monitor, &mut pool, &mut body] {
                if let Value::Object(o) = object {
                    o.insert("tags".into(), json!(tags));
                }
            }
        }
        if let Value::Object(p) = &mut pool {
            p.insert("healthmonitor".into(), monitor);
        }
        if let Value::Object(b) = &mut body {
            b.insert("default_pool".into(), pool);
        }
        body
    }

    async fn create(
        &self,
        session: &Session,
        run: &mut Run<'_>,
        listeners: &[Listener],
    ) -> Result<Progress, Stop> {
        let spec = &run.infra.spec;
        let mut lb = json!({
            "name": run.lb_name(),
            "description": description(run.identity),
            "listeners": listeners.iter().map(|l| self.listener_body(run, l, session.version)).collect::<Vec<_>>(),
        });
        if let Value::Object(o) = &mut lb {
            if let Some(subnet) = &spec.vip.subnet_id {
                o.insert("vip_subnet_id".into(), json!(subnet));
            }
            if let Some(network) = &spec.vip.network_id {
                o.insert("vip_network_id".into(), json!(network));
            }
            if let Some(address) = &spec.vip.address {
                o.insert("vip_address".into(), json!(address));
            }
            if let Some(provider) = spec.provider {
                let name = match provider {
                    Driver::Amphora => "amphora",
                    Driver::Ovn => "ovn",
                };
                o.insert("provider".into(), json!(name));
            }
            if let Some(flavor) = &spec.flavor_id {
                o.insert("flavor_id".into(), json!(flavor));
            }
            if let Some(zone) = &spec.availability_zone {
                o.insert("availability_zone".into(), json!(zone));
            }
            if session.version >= ApiVersion::TAGS {
                o.insert("tags".into(), json!(run.tags()));
            }
        }
        let body = session
            .expect(
                self.observer(),
                "loadbalancer.create",
                Request::post("lbaas/loadbalancers", json!({ "loadbalancer": lb })),
            )
            .await?;
        let record: LbRecord = decode(
            body.get("loadbalancer").cloned().unwrap_or(Value::Null),
            "loadbalancer.create",
        )?;
        run.created = true;
        self.mark_verified(&record.id);
        run.status.load_balancer_id = Some(record.id.clone());
        run.status.vip_address = record.vip_address.clone();
        run.status.vip_port_id = record.vip_port_id.clone();
        run.status.provisioning_status = Some(record.provisioning_status.clone());
        run.status.ready = false;
        run.status.listeners = listeners
            .iter()
            .map(|l| ListenerStatus {
                port: l.port,
                applied: Some(Settings::new(&run.infra, l, session.version).applied()),
                ..Default::default()
            })
            .collect();
        run.changes.push(format!(
            "created Octavia load balancer {} with {} listener(s)",
            record.id,
            listeners.len()
        ));
        Ok(run.pending("PENDING_CREATE"))
    }

    async fn ensure_inner(
        &self,
        run: &mut Run<'_>,
        listeners: &[Listener],
    ) -> Result<Progress, Stop> {
        let session = self.session(&run.infra).await?;
        run.status.api_version = Some(session.version.to_string());
        run.infra.check_version(session.version)?;
        let Some(tree) = self.locate(&session, run).await? else {
            return self.create(&session, run, listeners).await;
        };
        run.status.provisioning_status = Some(tree.provisioning_status.clone());
        run.status.operating_status = Some(tree.operating_status.clone());
        match tree.provisioning_status.as_str() {
            "ACTIVE" => run.status.pending_since = None,
            "ERROR" => return self.on_error(&session, run, &tree).await,
            "DELETED" => {
                run.forget_lb();
                return Ok(Progress::pending("Octavia load balancer deleted", POLL));
            }
            state => {
                run.status.ready = false;
                return Ok(run.pending(state));
            }
        }
        let mut progress = self
            .converge_children(&session, run, &tree, listeners)
            .await?;
        if progress.is_done() {
            progress = self.converge_floating_ip(&session, run).await?;
        }
        run.status.ready = progress.is_done();
        Ok(progress)
    }

    async fn on_error(
        &self,
        session: &Session,
        run: &mut Run<'_>,
        tree: &Tree,
    ) -> Result<Progress, Stop> {
        run.status.ready = false;
        if !run.infra.spec.recreate_on_error {
            return Ok(Progress::pending_because(
                reason::LOAD_BALANCER_ERROR,
                format!(
                    "Octavia load balancer {} is in ERROR (terminal; operating status {}). Octavia's logs say why; set recreateOnError: true to have capi-lb delete and recreate it",
                    tree.id, tree.operating_status
                ),
                Duration::from_secs(60),
            ));
        }
        self.delete_lb(session, &tree.id).await?;
        run.changes.push(format!(
            "deleting Octavia load balancer {} in ERROR to recreate it (recreateOnError)",
            tree.id
        ));
        Ok(Progress::pending_because(
            reason::LOAD_BALANCER_ERROR,
            format!(
                "Octavia load balancer {} was in ERROR; deleting it to recreate it",
                tree.id
            ),
            POLL,
        ))
    }

    /// Floating IPs of this project matching `query` (Neutron list filters).
    async fn floating_ips(
        &self,
        session: &Session,
        query: &[(&'static str, String)],
    ) -> Result<Vec<FloatingIp>, Stop> {
        let mut request = Request::get("floatingips").network();
        for (k, v) in query {
            request = request.query(k, v.clone());
        }
        let body = session
            .expect(self.observer(), "floatingip.list", request)
            .await?;
        decode(
            body.get("floatingips").cloned().unwrap_or(json!([])),
            "floatingip.list",
        )
    }

    /// Point floating IP `id` at `port` (`None`: disassociate; one already gone counts as that).
    async fn set_port(&self, session: &Session, id: &str, port: Option<&str>) -> Result<(), Stop> {
        let reply = session
            .send(
                self.observer(),
                "floatingip.update",
                Request::put(
                    format!("floatingips/{id}"),
                    json!({ "floatingip": { "port_id": port } }),
                )
                .network(),
            )
            .await?;
        if reply.ok() || (port.is_none() && reply.status == 404) {
            Ok(())
        } else {
            Err(session.failure("floatingip.update", &reply))
        }
    }

    /// The floating IP in front of the VIP: the given one associated (never taken from another
    /// port), or one allocated, tagged and associated; a previous one released when the spec
    /// changed. Checked against Neutron when the status does not already show it in place, and
    /// every ten minutes.
    async fn converge_floating_ip(
        &self,
        session: &Session,
        run: &mut Run<'_>,
    ) -> Result<Progress, Stop> {
        let wanted = run.infra.spec.floating_ip.clone();
        if wanted.is_none() && run.status.floating_ip_id.is_none() {
            // No floating IP wanted or held: Neutron is not involved at all.
            return Ok(Progress::Done);
        }
        let in_place = match &wanted {
            None => run.status.floating_ip_id.is_none(),
            Some(w) => {
                run.status.floating_ip_id.is_some()
                    && w.address
                        .as_ref()
                        .is_none_or(|a| run.status.floating_ip.as_ref() == Some(a))
                    && (w.network_id.is_some() == run.status.floating_ip_allocated)
            }
        };
        let key = run.status.load_balancer_id.clone().unwrap_or_default();
        let recently = self
            .fip_checked
            .lock()
            .ok()
            .and_then(|c| c.get(&key).copied());
        if in_place && recently.is_some_and(|at| at.elapsed() < FIP_FRESH) {
            return Ok(Progress::Done);
        }
        session.network().await?;
        let Some(port) = run.status.vip_port_id.clone() else {
            // Adopted by an older capi-lb, or the port was not reported yet: read it.
            let body = session
                .expect(
                    self.observer(),
                    "loadbalancer.get",
                    Request::get(format!("lbaas/loadbalancers/{key}")),
                )
                .await?;
            let record: LbRecord = decode(
                body.get("loadbalancer").cloned().unwrap_or(Value::Null),
                "loadbalancer.get",
            )?;
            run.status.vip_port_id = record.vip_port_id;
            return Ok(Progress::pending("reading the VIP port", POLL));
        };
        // What is on our VIP port now (only ever ours, or something someone put there by hand).
        let on_port = self
            .floating_ips(session, &[("port_id", port.clone())])
            .await?;
        let ours = |f: &FloatingIp| {
            f.tags.contains(&fip_uid_tag(run.identity))
                || f.description
                    .as_deref()
                    .is_some_and(|d| d.ends_with(&format!("uid={}", run.identity.uid)))
        };
        // Release a previous floating IP the spec no longer asks for.
        let previous = self.release_candidates(session, run, &wanted).await?;
        if let Some(progress) = previous {
            return Ok(progress);
        }
        let Some(wanted) = wanted else {
            run.status.floating_ip = None;
            run.status.floating_ip_id = None;
            run.status.floating_ip_allocated = false;
            self.mark_fip_checked(&key);
            return Ok(Progress::Done);
        };
        let fip = if let Some(address) = &wanted.address {
            let found = self
                .floating_ips(session, &[("floating_ip_address", address.clone())])
                .await?;
            let Some(fip) = found.into_iter().next() else {
                return Err(Stop::Wait(Progress::pending_because(
                    reason::FLOATING_IP_NOT_FOUND,
                    format!("floating IP {address} does not exist in this project"),
                    Duration::from_secs(60),
                )));
            };
            match fip.port_id.as_deref() {
                Some(p) if p == port => {}
                Some(other) => {
                    return Err(Stop::Wait(Progress::pending_because(
                        reason::FLOATING_IP_IN_USE,
                        format!(
                            "floating IP {address} is associated with port {other}; capi-lb never takes a floating IP from another port. Disassociate it, or name another one"
                        ),
                        Duration::from_secs(60),
                    )));
                }
                None => {
                    self.set_port(session, &fip.id, Some(&port)).await?;
                    run.changes
                        .push(format!("associated floating IP {address} with the VIP"));
                }
            }
            run.status.floating_ip_allocated = false;
            fip
        } else {
            let network = wanted.network_id.clone().unwrap_or_default();
            let mine = on_port.iter().find(|f| ours(f)).cloned();
            if mine.is_none()
                && let Some(other) = on_port.first()
            {
                return Err(Stop::Wait(Progress::pending_because(
                    reason::FLOATING_IP_IN_USE,
                    format!(
                        "the VIP port already has floating IP {}, which capi-lb did not allocate; it is left alone. Remove it, or set floatingIP.address: {} to use it",
                        other.floating_ip_address, other.floating_ip_address
                    ),
                    Duration::from_secs(60),
                )));
            }
            let fip = match mine {
                Some(fip) => fip,
                None => {
                    // One allocated earlier but left unassociated (a crash between the calls).
                    let tagged = self
                        .floating_ips(session, &[("tags", fip_uid_tag(run.identity))])
                        .await?;
                    match tagged.into_iter().next() {
                        Some(fip) => {
                            self.set_port(session, &fip.id, Some(&port)).await?;
                            run.changes.push(format!(
                                "associated floating IP {} (found by its tags) with the VIP",
                                fip.floating_ip_address
                            ));
                            fip
                        }
                        None => self.allocate(session, run, &network, &port).await?,
                    }
                }
            };
            if !fip.tags.contains(&fip_uid_tag(run.identity)) {
                self.tag_fip(session, run, &fip).await?;
            }
            run.status.floating_ip_allocated = true;
            fip
        };
        run.status.floating_ip = Some(fip.floating_ip_address.clone());
        run.status.floating_ip_id = Some(fip.id.clone());
        self.mark_fip_checked(&key);
        Ok(Progress::Done)
    }

    fn mark_fip_checked(&self, key: &str) {
        if let Ok(mut c) = self.fip_checked.lock() {
            c.insert(key.to_string(), Instant::now());
        }
    }

    async fn allocate(
        &self,
        session: &Session,
        run: &mut Run<'_>,
        network: &str,
        port: &str,
    ) -> Result<FloatingIp, Stop> {
        let body = session
            .expect(
                self.observer(),
                "floatingip.create",
                Request::post(
                    "floatingips",
                    json!({ "floatingip": {
                        "floating_network_id": network,
                        "port_id": port,
                        "description": description(run.identity),
                    }}),
                )
                .network(),
            )
            .await?;
        let fip: FloatingIp = decode(
            body.get("floatingip").cloned().unwrap_or(Value::Null),
            "floatingip.create",
        )?;
        run.changes.push(format!(
            "allocated floating IP {} from network {network} for the VIP",
            fip.floating_ip_address
        ));
        Ok(fip)
    }

    async fn tag_fip(
        &self,
        session: &Session,
        run: &Run<'_>,
        fip: &FloatingIp,
    ) -> Result<(), Stop> {
        session
            .expect(
                self.observer(),
                "floatingip.tags",
                Request::put(
                    format!("floatingips/{}/tags", fip.id),
                    json!({ "tags": fip_tags(run.identity) }),
                )
                .network(),
            )
            .await
            .map(|_| ())
    }

    /// Release the floating IP recorded in the status when the spec no longer wants it: delete
    /// one capi-lb allocated, disassociate one it was given.
    async fn release_candidates(
        &self,
        session: &Session,
        run: &mut Run<'_>,
        wanted: &Option<capi_lb_api::octavia::FloatingIp>,
    ) -> Result<Option<Progress>, Stop> {
        let Some(id) = run.status.floating_ip_id.clone() else {
            return Ok(None);
        };
        let still_wanted = match wanted {
            None => false,
            Some(w) => match &w.address {
                Some(a) => {
                    !run.status.floating_ip_allocated && run.status.floating_ip.as_ref() == Some(a)
                }
                None => run.status.floating_ip_allocated,
            },
        };
        if still_wanted {
            return Ok(None);
        }
        let allocated = run.status.floating_ip_allocated;
        let address = run.status.floating_ip.clone().unwrap_or_default();
        self.release(session, &id, allocated).await?;
        run.changes.push(if allocated {
            format!("released floating IP {address} (no longer in the spec)")
        } else {
            format!("disassociated floating IP {address} (no longer in the spec; kept)")
        });
        run.status.floating_ip = None;
        run.status.floating_ip_id = None;
        run.status.floating_ip_allocated = false;
        Ok(Some(Progress::pending("floating IP released", POLL)))
    }

    /// Delete an allocated floating IP, or disassociate a given one (404: already gone).
    async fn release(&self, session: &Session, id: &str, allocated: bool) -> Result<(), Stop> {
        if !allocated {
            return self.set_port(session, id, None).await;
        }
        let reply = session
            .send(
                self.observer(),
                "floatingip.delete",
                Request::delete(format!("floatingips/{id}")).network(),
            )
            .await?;
        if reply.ok() || reply.status == 404 {
            Ok(())
        } else {
            Err(session.failure("floatingip.delete", &reply))
        }
    }

    async fn delete_lb(&self, session: &Session, id: &str) -> Result<(), Stop> {
        self.forget_tree(id);
        let reply = session
            .send(
                self.observer(),
                "loadbalancer.delete",
                Request::delete(format!("lbaas/loadbalancers/{id}")).query("cascade", "true"),
            )
            .await?;
        if reply.ok() || reply.status == 404 {
            Ok(())
        } else {
            Err(session.failure("loadbalancer.delete", &reply))
        }
    }

    /// Listeners, pools and monitors: create what is missing, apply changed settings, remove ports
    /// no longer wanted; one write per call.
    async fn converge_children(
        &self,
        session: &Session,
        run: &mut Run<'_>,
        tree: &Tree,
        listeners: &[Listener],
    ) -> Result<Progress, Stop> {
        let lb = run.lb_name();
        let lb_id = tree.id.clone();
        let previous: BTreeMap<i32, ListenerStatus> = run
            .status
            .listeners
            .iter()
            .map(|l| (l.port, l.clone()))
            .collect();
        let mut statuses = Vec::new();
        let mut write: Option<(String, Request, String)> = None;
        for listener in listeners {
            let name = child_name(&lb, listener);
            let settings = Settings::new(&run.infra, listener, session.version);
            let wanted = settings.applied();
            let mut entry = previous
                .get(&listener.port)
                .cloned()
                .unwrap_or(ListenerStatus {
                    port: listener.port,
                    ..Default::default()
                });
            let Some(found) = tree
                .listeners
                .iter()
                .find(|l| l.name.as_deref() == Some(name.as_str()))
            else {
                if write.is_none() {
                    // Octavia's listener create fails on a nested default pool (HTTP 500 seen
                    // with Octavia 19): the listener alone, then its pool, then its monitor.
                    let mut body = self.listener_body(run, listener, session.version);
                    if let Value::Object(o) = &mut body {
                        o.remove("default_pool");
                        o.insert("loadbalancer_id".into(), json!(lb_id));
                    }
                    entry = ListenerStatus {
                        port: listener.port,
                        applied: Some(AppliedSettings {
                            listener: wanted.listener.clone(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    };
                    write = Some((
                        "listener.create".into(),
                        Request::post("lbaas/listeners", json!({ "listener": body })),
                        format!("creating the listener of port {}", listener.port),
                    ));
                }
                statuses.push(entry);
                continue;
            };
            if entry.listener_id.as_deref() != Some(found.id.as_str())
                && entry.listener_id.is_some()
            {
                entry.applied = None;
            }
            entry.listener_id = Some(found.id.clone());
            let pool = found.pools.first();
            entry.pool_id = pool.map(|p| p.id.clone());
            entry.monitor_id = pool.and_then(|p| p.health_monitor.as_ref().map(|m| m.id.clone()));
            let applied = entry.applied.clone().unwrap_or_default();
            if write.is_none() {
                let tags = if session.version >= ApiVersion::TAGS {
                    json!({ "tags": run.tags() })
                } else {
                    json!({})
                };
                match pool {
                    None => {
                        let body = with(
                            settings.pool.clone(),
                            json!({ "name": name, "protocol": listener.protocol.as_str(), "listener_id": found.id }),
                        );
                        let body = with(
                            match body {
                                Value::Object(o) => o,
                                _ => Map::new(),
                            },
                            tags.clone(),
                        );
                        entry.applied = Some(AppliedSettings {
                            pool: wanted.pool.clone(),
                            monitor: None,
                            ..applied.clone()
                        });
                        write = Some((
                            "pool.create".into(),
                            Request::post("lbaas/pools", json!({ "pool": body })),
                            format!("creating the pool of port {}", listener.port),
                        ));
                    }
                    Some(pool) if pool.health_monitor.is_none() => {
                        let body = with(
                            settings.monitor.clone(),
                            json!({ "name": name, "pool_id": pool.id }),
                        );
                        let body = with(
                            match body {
                                Value::Object(o) => o,
                                _ => Map::new(),
                            },
                            tags.clone(),
                        );
                        entry.applied = Some(AppliedSettings {
                            monitor: wanted.monitor.clone(),
                            ..applied.clone()
                        });
                        write = Some((
                            "healthmonitor.create".into(),
                            Request::post("lbaas/healthmonitors", json!({ "healthmonitor": body })),
                            format!("creating the health monitor of port {}", listener.port),
                        ));
                    }
                    Some(pool) => {
                        if applied.listener != wanted.listener {
                            entry.applied = Some(AppliedSettings {
                                listener: wanted.listener.clone(),
                                ..applied.clone()
                            });
                            write = Some((
                                "listener.update".into(),
                                Request::put(
                                    format!("lbaas/listeners/{}", found.id),
                                    json!({ "listener": Value::Object(settings.listener.clone()) }),
                                ),
                                format!("updating the listener of port {}", listener.port),
                            ));
                        } else if applied.pool != wanted.pool {
                            entry.applied = Some(AppliedSettings {
                                pool: wanted.pool.clone(),
                                ..applied.clone()
                            });
                            write = Some((
                                "pool.update".into(),
                                Request::put(
                                    format!("lbaas/pools/{}", pool.id),
                                    json!({ "pool": Value::Object(settings.pool.clone()) }),
                                ),
                                format!("updating the pool of port {}", listener.port),
                            ));
                        } else if applied.monitor != wanted.monitor
                            && let Some(monitor) = &pool.health_monitor
                        {
                            // A monitor's type cannot change: replace it (the next call creates
                            // the new one).
                            entry.applied = Some(AppliedSettings {
                                monitor: None,
                                ..applied.clone()
                            });
                            entry.monitor_id = None;
                            write = Some((
                                "healthmonitor.delete".into(),
                                Request::delete(format!("lbaas/healthmonitors/{}", monitor.id)),
                                format!("replacing the health monitor of port {}", listener.port),
                            ));
                        }
                    }
                }
            }
            statuses.push(entry);
        }
        // Listeners of ports no longer wanted (named like ours; anything else on the load balancer
        // is left alone): the pool first (it takes its members and monitor), then the listener.
        let wanted: BTreeSet<String> = listeners.iter().map(|l| child_name(&lb, l)).collect();
        if write.is_none()
            && let Some(stale) = tree.listeners.iter().find(|l| {
                l.name
                    .as_deref()
                    .is_some_and(|n| n.starts_with(&format!("{lb}-")) && !wanted.contains(n))
            })
        {
            let name = stale.name.clone().unwrap_or_default();
            write = Some(match stale.pools.first() {
                Some(pool) => (
                    "pool.delete".into(),
                    Request::delete(format!("lbaas/pools/{}", pool.id)),
                    format!("removing the pool of {name} (port no longer wanted)"),
                ),
                None => (
                    "listener.delete".into(),
                    Request::delete(format!("lbaas/listeners/{}", stale.id)),
                    format!("removing listener {name} (port no longer wanted)"),
                ),
            });
        }
        run.status.listeners = statuses;
        let Some((operation, request, what)) = write else {
            return Ok(Progress::Done);
        };
        self.forget_tree(&lb_id);
        let reply = session.send(self.observer(), &operation, request).await?;
        let gone_already = operation.ends_with(".delete") && reply.status == 404;
        if !(reply.ok() || gone_already) {
            run.status.listeners = previous.into_values().collect();
            return Err(session.failure(&operation, &reply));
        }
        run.changes.push(what.clone());
        Ok(Progress::pending_because(
            reason::LOAD_BALANCER_PENDING,
            what,
            POLL,
        ))
    }

    /// What the provider knows of a pool's members, read back when it does not match the tree.
    async fn pool_members(
        &self,
        session: &Session,
        pool: &TreePool,
    ) -> Result<Vec<PoolMember>, Stop> {
        let in_tree: BTreeSet<(String, i32)> = pool
            .members
            .iter()
            .map(|m| (m.address.clone(), m.protocol_port))
            .collect();
        if in_tree.is_empty() {
            // The tree is authoritative about which members exist: none, nothing to read.
            return Ok(Vec::new());
        }
        if let Ok(known) = self.members.lock()
            && let Some((at, members)) = known.get(&pool.id)
            && at.elapsed() < MEMBERS_FRESH
            && members
                .iter()
                .map(|m| (m.address.clone(), m.protocol_port))
                .collect::<BTreeSet<_>>()
                == in_tree
        {
            return Ok(members.clone());
        }
        let body = session
            .expect(
                self.observer(),
                "member.list",
                Request::get(format!("lbaas/pools/{}/members", pool.id)),
            )
            .await?;
        let mut members: Vec<PoolMember> = decode(
            body.get("members").cloned().unwrap_or(json!([])),
            "member.list",
        )?;
        members.sort();
        if let Ok(mut known) = self.members.lock() {
            known.insert(pool.id.clone(), (Instant::now(), members.clone()));
        }
        Ok(members)
    }

    async fn converge_members_inner(
        &self,
        run: &mut Run<'_>,
        listeners: &[Listener],
        desired: &[DesiredMember],
        out: &mut Vec<MemberStatus>,
    ) -> Result<Progress, Stop> {
        let Some(id) = run.status.load_balancer_id.clone() else {
            return Ok(Progress::pending("no Octavia load balancer yet", POLL));
        };
        let session = self.session(&run.infra).await?;
        let Some(tree) = self.tree(&session, &id, true).await? else {
            return Ok(Progress::pending(
                format!("Octavia load balancer {id} is gone"),
                POLL,
            ));
        };
        if tree.provisioning_status != "ACTIVE" {
            run.status.provisioning_status = Some(tree.provisioning_status.clone());
            return Ok(run.pending(&tree.provisioning_status));
        }
        let lb = run.lb_name();
        let bad: Vec<&str> = desired
            .iter()
            .filter_map(|d| match &d.intent {
                MemberIntent::Serve(a) if a.parse::<IpAddr>().is_err() => Some(d.name.as_str()),
                _ => None,
            })
            .collect();
        let mut state: BTreeMap<String, (String, MemberState)> = BTreeMap::new();
        let mut count = 0;
        let mut pending_pool = None;
        for listener in listeners {
            let name = child_name(&lb, listener);
            let Some(pool) = tree
                .listeners
                .iter()
                .find(|l| l.name.as_deref() == Some(name.as_str()))
                .and_then(|l| l.pools.first())
            else {
                pending_pool = Some(listener.port);
                continue;
            };
            let known = self.pool_members(&session, pool).await?;
            let wanted = plan(desired, &known, listener.target_port);
            if wanted != known {
                let tags = if session.version >= ApiVersion::TAGS {
                    Some(run.tags())
                } else {
                    None
                };
                let members: Vec<Value> = wanted
                    .iter()
                    .map(|m| {
                        let mut v = json!({
                            "address": m.address,
                            "protocol_port": m.protocol_port,
                            "name": m.name,
                            "weight": m.weight,
                        });
                        if let (Some(tags), Value::Object(o)) = (&tags, &mut v) {
                            o.insert("tags".into(), json!(tags));
                        }
                        v
                    })
                    .collect();
                self.forget_tree(&id);
                session
                    .expect(
                        self.observer(),
                        "member.batch-update",
                        Request::put(
                            format!("lbaas/pools/{}/members", pool.id),
                            json!({ "members": members }),
                        ),
                    )
                    .await?;
                if let Ok(mut known) = self.members.lock() {
                    known.insert(pool.id.clone(), (Instant::now(), wanted.clone()));
                }
                run.changes.push(format!(
                    "members of port {}: {}",
                    listener.port,
                    describe_change(&known, &wanted)
                ));
                return Ok(Progress::pending_because(
                    reason::LOAD_BALANCER_PENDING,
                    format!("updating the members of port {}", listener.port),
                    POLL,
                ));
            }
            count += pool.members.len();
            for member in &known {
                let Some(name) = &member.name else { continue };
                let provisioned = pool.members.iter().any(|m| {
                    m.address == member.address
                        && m.protocol_port == member.protocol_port
                        && m.provisioning_status == "ACTIVE"
                });
                let s = if !provisioned {
                    MemberState::Adding
                } else if member.weight == 0 {
                    MemberState::Draining
                } else {
                    MemberState::Active
                };
                let entry = state
                    .entry(name.clone())
                    .or_insert((member.address.clone(), s));
                // The weakest state across pools wins: Adding < Draining < Active.
                if s == MemberState::Adding
                    || (s == MemberState::Draining && entry.1 == MemberState::Active)
                {
                    entry.1 = s;
                }
            }
        }
        run.status.member_count = i32::try_from(count).unwrap_or(i32::MAX);
        *out = state
            .into_iter()
            .map(|(name, (address, state))| MemberStatus {
                name,
                address,
                state,
            })
            .collect();
        if let Some(port) = pending_pool {
            return Ok(Progress::pending(
                format!("waiting for the pool of port {port}"),
                POLL,
            ));
        }
        if !bad.is_empty() {
            return Ok(Progress::pending_because(
                reason::MEMBER_ADDRESS_NOT_IP,
                format!(
                    "Octavia members need IP addresses; these targets have only a DNS name: {}",
                    bad.join(", ")
                ),
                Duration::from_secs(60),
            ));
        }
        if out.iter().any(|m| m.state == MemberState::Adding) {
            return Ok(Progress::pending("members being provisioned", POLL));
        }
        Ok(Progress::Done)
    }

    async fn delete_inner(
        &self,
        session: &Session,
        identity: &LoadBalancerIdentity,
        infra: &Infra,
        changes: &mut Vec<String>,
    ) -> Result<Progress, Stop> {
        let mut found = self
            .find_owned(session, identity, infra.uid.as_deref())
            .await?;
        if let Some(id) = &infra.status.load_balancer_id
            && !found.iter().any(|r| &r.id == id)
        {
            let reply = session
                .send(
                    self.observer(),
                    "loadbalancer.get",
                    Request::get(format!("lbaas/loadbalancers/{id}")),
                )
                .await?;
            if reply.ok()
                && let Some(record) = reply.body.get("loadbalancer").cloned()
            {
                let record: LbRecord = decode(record, "loadbalancer.get")?;
                if owned(&record, identity, infra.uid.as_deref()) {
                    found.push(record);
                }
            }
        }
        // The floating IP first: a given one is disassociated (kept), an allocated one released.
        // Done before the delete was sent; not again while Octavia is deleting.
        let deleting = !found.is_empty()
            && found
                .iter()
                .all(|r| r.provisioning_status == "PENDING_DELETE");
        if !deleting && (infra.spec.floating_ip.is_some() || infra.status.floating_ip_id.is_some())
        {
            session.network().await?;
            if let Some(id) = &infra.status.floating_ip_id
                && !infra.status.floating_ip_allocated
            {
                self.release(session, id, false).await?;
            }
            let mut allocated: Vec<(String, String)> = self
                .floating_ips(session, &[("tags", fip_uid_tag(identity))])
                .await?
                .into_iter()
                .map(|f| (f.id, f.floating_ip_address))
                .collect();
            if let Some(id) = &infra.status.floating_ip_id
                && infra.status.floating_ip_allocated
                && !allocated.iter().any(|(f, _)| f == id)
            {
                let address = infra.status.floating_ip.clone().unwrap_or_default();
                allocated.push((id.clone(), address));
            }
            for (id, address) in allocated {
                self.release(session, &id, true).await?;
                changes.push(format!("released floating IP {address}"));
            }
        }
        if found.is_empty() {
            return Ok(Progress::Done);
        }
        for record in &found {
            match record.provisioning_status.as_str() {
                "PENDING_DELETE" => {}
                s if s.starts_with("PENDING_") => {}
                _ => {
                    self.delete_lb(session, &record.id).await?;
                    changes.push(format!("deleting Octavia load balancer {}", record.id));
                }
            }
        }
        Ok(Progress::pending_because(
            reason::LOAD_BALANCER_PENDING,
            format!(
                "waiting for Octavia to delete {}",
                found
                    .iter()
                    .map(|r| format!("{} ({})", r.id, r.provisioning_status))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            POLL,
        ))
    }
}

/// The members a pool should have: `Serve` at the target port with weight 1, `Drain` and `Keep`
/// only where a member exists (weight 0 / unchanged), everything else removed.
pub fn plan(desired: &[DesiredMember], known: &[PoolMember], port: i32) -> Vec<PoolMember> {
    let existing = |name: &str| -> Vec<PoolMember> {
        known
            .iter()
            .filter(|m| m.name.as_deref() == Some(name))
            .cloned()
            .collect()
    };
    let mut out: Vec<PoolMember> = Vec::new();
    for member in desired {
        match &member.intent {
            MemberIntent::Serve(address) => {
                if address.parse::<IpAddr>().is_ok() {
                    out.push(PoolMember {
                        address: address.clone(),
                        protocol_port: port,
                        name: Some(member.name.clone()),
                        weight: 1,
                    });
                } else {
                    out.extend(existing(&member.name));
                }
            }
            MemberIntent::Keep => out.extend(existing(&member.name)),
            MemberIntent::Drain => out.extend(
                existing(&member.name)
                    .into_iter()
                    .map(|m| PoolMember { weight: 0, ..m }),
            ),
        }
    }
    out.sort();
    // Octavia matches members by address and port: one member per pair.
    out.dedup_by(|a, b| a.address == b.address && a.protocol_port == b.protocol_port);
    out
}

fn describe_change(before: &[PoolMember], after: &[PoolMember]) -> String {
    let label = |m: &PoolMember| {
        format!(
            "{} {}:{}{}",
            m.name.as_deref().unwrap_or("?"),
            m.address,
            m.protocol_port,
            if m.weight == 0 { " (draining)" } else { "" }
        )
    };
    let added: Vec<String> = after
        .iter()
        .filter(|m| !before.contains(m))
        .map(label)
        .collect();
    let removed: Vec<String> = before
        .iter()
        .filter(|m| {
            !after
                .iter()
                .any(|a| a.address == m.address && a.protocol_port == m.protocol_port)
        })
        .map(label)
        .collect();
    let mut parts = Vec::new();
    if !added.is_empty() {
        parts.push(format!("set {}", added.join(", ")));
    }
    if !removed.is_empty() {
        parts.push(format!("removed {}", removed.join(", ")));
    }
    parts.join("; ")
}

#[async_trait]
impl Provider for OctaviaProvider {
    fn name(&self) -> &'static str {
        NAME
    }

    fn infrastructure_resource(&self) -> ApiResource {
        ApiResource::erase::<OctaviaLoadBalancer>(&())
    }

    async fn ensure(&self, request: EnsureRequest<'_>) -> Result<EnsureOutcome, ProviderError> {
        let infra = Infra::read(request.infra, request.identity)?;
        if request.listeners.is_empty() {
            return Err(ProviderError::permanent(
                INVALID_CONFIGURATION,
                "the LoadBalancer has no ports: Octavia needs at least one listener",
            ));
        }
        let _guard = self.lock(&request.identity.uid).await;
        let mut run = Run::new(infra, request.identity, self.clock.now());
        let progress = done_or_wait(self.ensure_inner(&mut run, request.listeners).await)?;

        Ok(EnsureOutcome {
            progress,
            addresses: run.addresses(),
            created: run.created,
            changes: run.changes.clone(),
            status: run.status_map(),
        })
    }

    async fn converge_members(
        &self,
        request: MembersRequest<'_>,
    ) -> Result<MembersOutcome, ProviderError> {
        let infra = Infra::read(request.infra, request.identity)?;
        let _guard = self.lock(&request.identity.uid).await;
        let mut run = Run::new(infra, request.identity, self.clock.now());
        let mut members = Vec::new();
        let progress = done_or_wait(
            self.converge_members_inner(&mut run, request.listeners, request.members, &mut members)
                .await,
        )?;
        let mut status = Map::new();
        status.insert("memberCount".into(), json!(run.status.member_count));
        if run.status.pending_since != run.infra.status.pending_since {
            status.insert(
                "pendingSince".into(),
                json!(run.status.pending_since.clone()),
            );
        }
        Ok(MembersOutcome {
            progress,
            members,
            changes: run.changes,
            status,
        })
    }

    async fn delete(&self, request: DeleteRequest<'_>) -> Result<DeleteOutcome, ProviderError> {
        let Some(infra) = request.infra else {
            return Err(ProviderError::permanent(
                reason::CREDENTIALS_UNAVAILABLE,
                format!(
                    "the OctaviaLoadBalancer of LoadBalancer {} is gone, so its credentials are unknown and the Octavia load balancer (tag {}) cannot be deleted. Recreate the OctaviaLoadBalancer to let capi-lb clean up, or delete the load balancer in Octavia and remove the finalizer by hand",
                    request.identity.display(),
                    uid_tag(request.identity)
                ),
            ));
        };
        let infra = Infra::read(infra, request.identity)?;
        let _guard = self.lock(&request.identity.uid).await;
        let mut changes = Vec::new();
        let result = match self.session(&infra).await {
            Ok(session) => {
                self.delete_inner(&session, request.identity, &infra, &mut changes)
                    .await
            }
            Err(stop) => Err(stop),
        };
        let progress = done_or_wait(result)?;
        if progress.is_done() {
            // Nothing of this LoadBalancer is left in the cloud: forget what was cached for it.
            if let Some(id) = &infra.status.load_balancer_id {
                self.forget_tree(id);
                if let Ok(mut verified) = self.verified.lock() {
                    verified.remove(id);
                }
                if let Ok(mut checked) = self.fip_checked.lock() {
                    checked.remove(id);
                }
            }
            if let Ok(mut members) = self.members.lock() {
                for listener in &infra.status.listeners {
                    if let Some(pool) = &listener.pool_id {
                        members.remove(pool);
                    }
                }
            }
            // The lock goes too unless another call waits on it (the map and this call's guard
            // hold the only two references otherwise).
            if let Ok(mut locks) = self.locks.lock()
                && locks
                    .get(&request.identity.uid)
                    .is_some_and(|l| Arc::strong_count(l) <= 2)
            {
                locks.remove(&request.identity.uid);
            }
        }
        Ok(DeleteOutcome { progress, changes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, address: &str, weight: i32) -> PoolMember {
        PoolMember {
            address: address.into(),
            protocol_port: 6443,
            name: Some(name.into()),
            weight,
        }
    }

    #[test]
    fn plan_serves_drains_keeps_and_removes() {
        let known = vec![
            member("a", "10.0.0.1", 1),
            member("b", "10.0.0.2", 1),
            member("c", "10.0.0.3", 1),
            member("d", "10.0.0.4", 0),
        ];
        let desired = vec![
            DesiredMember::serve("a", "10.0.0.1"),
            DesiredMember::drain("b"),
            DesiredMember::keep("d"),
            DesiredMember::serve("e", "10.0.0.5"),
            DesiredMember::drain("never-existed"),
            DesiredMember::keep("also-never"),
        ];
        let wanted = plan(&desired, &known, 6443);
        assert_eq!(
            wanted,
            vec![
                member("a", "10.0.0.1", 1),
                member("b", "10.0.0.2", 0),
                member("d", "10.0.0.4", 0),
                member("e", "10.0.0.5", 1),
            ]
        );
    }

    #[test]
    fn plan_takes_a_draining_member_back_and_moves_addresses() {
        let known = vec![member("a", "10.0.0.1", 0)];
        let wanted = plan(&[DesiredMember::serve("a", "10.0.0.9")], &known, 6443);
        assert_eq!(wanted, vec![member("a", "10.0.0.9", 1)]);
        let wanted = plan(&[DesiredMember::serve("a", "10.0.0.1")], &known, 6443);
        assert_eq!(wanted, vec![member("a", "10.0.0.1", 1)]);
    }

    #[test]
    fn plan_keeps_a_member_whose_target_has_only_a_dns_name() {
        let known = vec![member("a", "10.0.0.1", 1)];
        let wanted = plan(&[DesiredMember::serve("a", "node-a.example")], &known, 6443);
        assert_eq!(wanted, known);
        assert!(plan(&[DesiredMember::serve("b", "node-b.example")], &[], 6443).is_empty());
    }

    fn identity() -> LoadBalancerIdentity {
        LoadBalancerIdentity {
            namespace: "ns".into(),
            name: "cp".into(),
            uid: "u-1".into(),
            cluster_name: Some("c1".into()),
        }
    }

    fn record(tags: &[&str], description: Option<&str>) -> LbRecord {
        LbRecord {
            id: "x".into(),
            provisioning_status: "ACTIVE".into(),
            vip_address: None,
            vip_port_id: None,
            tags: tags.iter().map(|t| t.to_string()).collect(),
            description: description.map(str::to_string),
            created_at: None,
        }
    }

    #[test]
    fn ownership_is_decided_by_the_uid_tag_never_by_name() {
        let id = identity();
        let tags = object_tags(&id, Some("infra-1"), &["team=a".into(), "bad,tag".into()]);
        assert!(tags.contains(&"capi-lb".to_string()));
        assert!(tags.contains(&uid_tag(&id)));
        assert!(tags.contains(&"team=a".to_string()));
        assert!(!tags.iter().any(|t| t.contains(',')));
        let refs: Vec<&str> = tags.iter().map(String::as_str).collect();
        assert!(owned(&record(&refs, None), &id, Some("infra-1")));
        // Made for another OctaviaLoadBalancer of the same LoadBalancer (a migration).
        assert!(!owned(&record(&refs, None), &id, Some("infra-2")));
        // Same name, no tags, no UID: foreign.
        assert!(!owned(&record(&[], Some("hand-made")), &id, None));
        // Another LoadBalancer's UID.
        let other = format!("{}=u-2", tags::UID);
        assert!(!owned(&record(&["capi-lb", &other], None), &id, None));
        // Clouds without tags: the UID in capi-lb's description.
        assert!(owned(&record(&[], Some(&description(&id))), &id, None));
    }

    #[test]
    fn version_document_gives_the_highest_v2() {
        let doc =
            json!({"versions": [{"id": "v2.0"}, {"id": "v2.30"}, {"id": "v2.4"}, {"id": "v1.9"}]});
        assert_eq!(ApiVersion::from_document(&doc), Some(ApiVersion(2, 30)));
        assert_eq!(ApiVersion::from_document(&json!({})), None);
        assert!(
            ApiVersion(2, 4) < ApiVersion::TAGS && ApiVersion(2, 30) > ApiVersion::ALLOWED_CIDRS
        );
    }

    #[test]
    fn features_are_gated_by_the_api_version() {
        let spec: OctaviaLoadBalancerSpec = serde_json::from_value(json!({
            "credentials": {"secretName": "s"},
            "vip": {"subnetID": "x"},
            "availabilityZone": "az1",
            "listener": {"allowedCIDRs": ["10.0.0.0/8"]},
        }))
        .unwrap();
        let infra = Infra {
            uid: None,
            namespace: "ns".into(),
            spec,
            status: OctaviaLoadBalancerStatus::default(),
        };
        assert!(infra.check_version(ApiVersion(2, 14)).is_ok());
        let Err(Stop::Wait(Progress::Pending {
            message, reason, ..
        })) = infra.check_version(ApiVersion(2, 11))
        else {
            panic!("2.11 must be refused")
        };
        assert_eq!(reason, Some(reason::API_VERSION_UNSUPPORTED));
        assert!(
            message.contains("allowedCIDRs needs 2.12")
                && message.contains("availabilityZone needs 2.14"),
            "{message}"
        );
        let Err(Stop::Wait(Progress::Pending { message, .. })) =
            infra.check_version(ApiVersion(2, 13))
        else {
            panic!("2.13 must be refused")
        };
        assert!(!message.contains("allowedCIDRs") && message.contains("availabilityZone"));
        // Without tags (< 2.5) nothing is tagged and the description carries the UID instead;
        // allowed_cidrs are only sent where the API knows them.
        let listener = Listener {
            name: "api".into(),
            port: 6443,
            target_port: 6443,
            protocol: Protocol::Tcp,
        };
        assert!(
            !Settings::new(&infra, &listener, ApiVersion(2, 11))
                .listener
                .contains_key("allowed_cidrs")
        );
        assert!(
            Settings::new(&infra, &listener, ApiVersion(2, 12))
                .listener
                .contains_key("allowed_cidrs")
        );
    }

    #[test]
    fn ovn_forces_source_ip_port() {
        let spec: OctaviaLoadBalancerSpec = serde_json::from_value(json!({
            "credentials": {"secretName": "s"},
            "vip": {"subnetID": "x"},
            "provider": "ovn",
            "algorithm": "ROUND_ROBIN",
        }))
        .unwrap();
        let infra = Infra {
            uid: None,
            namespace: "ns".into(),
            spec,
            status: OctaviaLoadBalancerStatus::default(),
        };
        assert_eq!(infra.algorithm(), "SOURCE_IP_PORT");
    }

    #[test]
    fn names_fit_octavia() {
        let mut id = identity();
        id.name = "x".repeat(253);
        id.namespace = "n".repeat(63);
        let lb = lb_name(&id);
        assert!(lb.len() <= 200);
        let child = child_name(
            &lb,
            &Listener {
                name: "api".into(),
                port: 6443,
                target_port: 6443,
                protocol: Protocol::Tcp,
            },
        );
        assert!(child.len() <= NAME_MAX && child.ends_with("-tcp-6443"));
    }
}
