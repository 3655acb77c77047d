//! The options of `capi-lb run`: one struct clap reads, each field its flag.

use std::net::SocketAddr;
use std::time::Duration;

use capi_lb_api::constants::DEFAULT_CLUSTER_DOMAIN;
use capi_lb_providers::catalog;

use ipnet::IpNet;

use super::RunError;
use crate::context::ExternalEndpoints;
use crate::kinds::TargetKinds;
use crate::policy::{AddressPolicy, NamePolicy};
use capi_lb_api::loadbalancer::TargetKind;

/// Options of `capi-lb run`: each field is its flag (clap reads this struct).
#[derive(Clone, Debug, clap::Args)]
pub struct RunOptions {
    /// Watch only this namespace: its LoadBalancers, Services and targets (default: all
    /// namespaces).
    #[arg(long, value_name = "NAMESPACE", env = "CAPI_LB_NAMESPACE")]
    pub namespace: Option<String>,
    /// The cluster's DNS domain, the end of the published endpoints' names
    /// (`<service>.<namespace>.svc.<domain>`).
    #[arg(long, value_name = "DOMAIN", default_value = DEFAULT_CLUSTER_DOMAIN, env = "CAPI_LB_CLUSTER_DOMAIN")]
    pub cluster_domain: String,
    /// Infrastructure providers to enable, by name (comma-separated); a LoadBalancer whose
    /// infrastructure kind is another provider's reports ProviderNotEnabled. The in-memory provider
    /// (`inmemory`: tests, demos), whose addresses any tenant chooses, runs only when named here.
    #[arg(
        long,
        value_name = "PROVIDERS",
        value_delimiter = ',',
        default_value = catalog::DEFAULT_PROVIDERS,
        env = "CAPI_LB_PROVIDERS",
        value_parser = clap::builder::PossibleValuesParser::new(catalog::names())
    )]
    pub providers: Vec<String>,
    /// Reconciles working at the same time, per controller (at least 1; a reconcile waiting on a
    /// provider gives its slot back; one namespace has at most half of them in flight).
    #[arg(long, value_name = "COUNT", default_value_t = DEFAULT_CONCURRENCY, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,
    /// Seconds between reconciles of an unchanged LoadBalancer or Service (at least 10).
    #[arg(long = "resync-seconds", value_name = "SECONDS", default_value = "600", value_parser = resync_seconds)]
    pub resync: Duration,
    /// Seconds between looks at a Ready load balancer that capi-lb does not watch (Octavia, a
    /// remote kube-dc cluster, the in-memory cloud), to find it deleted or broken behind capi-lb's
    /// back and repair it; spread by up to a tenth per LoadBalancer (at least 10; at most the
    /// resync). One Octavia request per look.
    #[arg(long = "drift-check-seconds", value_name = "SECONDS", default_value = "60", value_parser = resync_seconds)]
    pub drift_check: Duration,
    /// Seconds a provider call may take before it is abandoned and retried with back-off
    /// (condition reason ProviderTimeout), so that a cloud or cluster that never answers does not
    /// hold a reconcile slot (1 to 600).
    #[arg(long = "provider-timeout-seconds", value_name = "SECONDS", default_value = "30", value_parser = provider_timeout_seconds)]
    pub provider_timeout: Duration,
    /// Seconds one reconcile may take, its waits on providers included, before it is abandoned,
    /// its work slot given back and the object retried with back-off (Warning Event
    /// ReconcileTimedOut): so that an API server that stops answering mid-reconcile holds no slot
    /// (10 to 3600; more than --provider-timeout-seconds).
    #[arg(long = "reconcile-timeout-seconds", value_name = "SECONDS", default_value = "120", value_parser = reconcile_timeout_seconds)]
    pub reconcile_timeout: Duration,
    /// Ranges whose addresses are never published (comma-separated CIDRs; e.g. the cluster's
    /// Service and Pod ranges), besides the built-in refusals (loopback, link-local, unspecified,
    /// multicast, broadcast, any ClusterIP).
    #[arg(
        long,
        value_name = "CIDRS",
        value_delimiter = ',',
        env = "CAPI_LB_ADDRESS_DENY"
    )]
    pub address_deny: Vec<IpNet>,
    /// Where a provider's addresses must be, as `provider=CIDR` (comma-separated; repeat a
    /// provider for several ranges). A provider without an entry may publish any address not
    /// refused.
    #[arg(long, value_name = "PROVIDER=CIDR", value_delimiter = ',', env = "CAPI_LB_ADDRESS_ALLOW", value_parser = provider_range)]
    pub address_allow: Vec<(String, IpNet)>,
    /// Let the address policy pass loopback addresses (127.0.0.0/8, ::1), for a single-host lab
    /// or a test whose API servers listen on 127.0.0.x: they are published in DNS and as a
    /// Cluster's endpoint (never in `-ext`: kube-apiserver refuses loopback in EndpointSlices).
    /// Never on a management cluster tenants share: a loopback address sends their clients to
    /// their own host.
    #[arg(
        long,
        value_name = "BOOL",
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set,
        env = "CAPI_LB_ADDRESS_ALLOW_LOOPBACK"
    )]
    pub address_allow_loopback: bool,
    /// The DNS domains every namespace may publish names in (comma-separated), `{namespace}`
    /// standing for its name (e.g. `{namespace}.tenants.example.com`); a Namespace's
    /// `loadbalancer.cluster.x-k8s.io/dns-domains` annotation replaces them. Unset, and without the
    /// annotation, any name may be published.
    #[arg(
        long,
        value_name = "DOMAINS",
        value_delimiter = ',',
        env = "CAPI_LB_DNS_DOMAINS"
    )]
    pub dns_domains: Vec<String>,
    /// Let every namespace publish wildcard names (`*.x`) in its domains (a Namespace's
    /// `loadbalancer.cluster.x-k8s.io/dns-wildcards` annotation decides for it).
    #[arg(
        long,
        value_name = "BOOL",
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set,
        env = "CAPI_LB_DNS_WILDCARDS"
    )]
    pub dns_wildcards: bool,
    /// Only Secrets with this label (`key=value`, e.g.
    /// `loadbalancer.cluster.x-k8s.io/credentials=true`) may be used as credentials (an Octavia
    /// clouds.yaml, a remote kube-dc cluster's kubeconfig); another is not read and the
    /// LoadBalancer reports CredentialsNotAllowed. Unset, any Secret of the provider object's
    /// namespace may be.
    #[arg(long, value_name = "KEY=VALUE", env = "CAPI_LB_CREDENTIALS_SECRET_LABEL", value_parser = label_pair)]
    pub credentials_secret_label: Option<(String, String)>,
    /// The DNS server that resolves a hostname-only load balancer's name for
    /// spec.workloadEndpoints (A and AAAA, asked again when the records' TTL runs out, kept to 5
    /// to 300 s), as `IP` or `IP:PORT` (port 53 when none is given). Unset, the servers of
    /// /etc/resolv.conf (in a Pod: the cluster's DNS).
    #[arg(long, value_name = "IP[:PORT]", env = "CAPI_LB_DNS_RESOLVER", value_parser = dns_server)]
    pub dns_resolver: Option<SocketAddr>,
    /// The `-ext` publisher for Services of type LoadBalancer.
    #[command(flatten)]
    pub external: ExternalEndpoints,
    /// Serve /metrics (and /livez, /readyz) on this address and port (`host:port`; "off" to
    /// disable). Localhost by default: /metrics answers anyone who reaches it, so expose it (e.g.
    /// 0.0.0.0:8080) only where the network keeps others out (a NetworkPolicy that admits the
    /// scraper alone), or with --metrics-secure.
    #[arg(
        long = "metrics-bind-address",
        value_name = "ADDRESS",
        default_value = "127.0.0.1:8080",
        env = "CAPI_LB_METRICS_BIND_ADDRESS",
        value_parser = metrics_address
    )]
    pub metrics_address: MetricsAddress,
    /// Serve /metrics over HTTPS and only to a bearer token that the Kubernetes API authenticates
    /// (TokenReview) and authorizes to get the non-resource URL /metrics (SubjectAccessReview):
    /// what the shipped Deployment does on 0.0.0.0:8443.
    #[arg(
        long,
        value_name = "BOOL",
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set,
        env = "CAPI_LB_METRICS_SECURE"
    )]
    pub metrics_secure: bool,
    /// The certificate of secure metrics: `tls.crt` and `tls.key` in this folder (a mounted
    /// `kubernetes.io/tls` Secret). Unset, a self-signed one is made at start.
    #[arg(long, value_name = "DIR", env = "CAPI_LB_METRICS_CERT_DIR")]
    pub metrics_cert_dir: Option<std::path::PathBuf>,
    /// Serve only /livez and /readyz on this address and port (`host:port`), for the kubelet's
    /// probes ("off", the default, to serve them on the metrics address alone; the shipped
    /// Deployment uses 0.0.0.0:8081).
    #[arg(
        long = "health-probe-bind-address",
        value_name = "ADDRESS",
        default_value = "off",
        env = "CAPI_LB_HEALTH_PROBE_BIND_ADDRESS",
        value_parser = metrics_address
    )]
    pub health_address: MetricsAddress,
    /// Run only while holding a Lease.
    #[command(flatten)]
    pub leader_election: LeaderElection,
    /// Reconcile only LoadBalancers labelled `cluster.x-k8s.io/watch-filter=<value>`, as
    /// Cluster API's controllers do with clusterctl's watch filter (default: all).
    #[arg(long, value_name = "VALUE", env = "CAPI_LB_WATCH_FILTER")]
    pub watch_filter: Option<String>,
    /// Keep the in-memory provider's cloud in this file (loaded at start, saved within a second of
    /// each change and at shutdown), so that it outlives the process like a real cloud: for demos
    /// and the warm-restart benchmark. Without it the cloud lives and dies with the process.
    #[arg(long, value_name = "FILE", env = "CAPI_LB_INMEMORY_STATE")]
    pub inmemory_state: Option<std::path::PathBuf>,
    /// Kinds LoadBalancers may name in spec.targetKind, as `Kind.group` (comma-separated). capi-lb
    /// lists and annotates targets with its own credentials, so only the kinds named here (and
    /// granted to capi-lb by RBAC) can be targets; kinds capi-lb manages for its own purposes and
    /// core kinds never can.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "KINDS",
        default_value = "Machine.cluster.x-k8s.io",
        env = "CAPI_LB_TARGET_KINDS",
        value_parser = TargetKinds::parse_one
    )]
    pub target_kinds: Vec<TargetKind>,
}

/// Where the metrics and health server listens, if anywhere. (An alias, so that clap parses
/// "off" into `None` instead of treating the flag as optional.)
pub type MetricsAddress = Option<SocketAddr>;

/// Cluster API's own controllers default to 10 reconciles at a time. With 4 (and so 2 for one
/// namespace), 100 Clusters in one namespace waited for capi-lb: their LoadBalancers were all Ready
/// 6 s after Cluster API's last Machine, against 4 s with 10 (docs/benchmarks.md).
const DEFAULT_CONCURRENCY: u16 = 10;

/// `--resync-seconds`: whole seconds, at least 10.
fn resync_seconds(value: &str) -> Result<Duration, String> {
    let seconds: u64 = value
        .parse()
        .map_err(|e| format!("{value:?} is not a number of seconds: {e}"))?;
    if seconds < 10 {
        return Err(format!("{seconds} is too short: at least 10 seconds"));
    }
    Ok(Duration::from_secs(seconds))
}

/// `--provider-timeout-seconds`: whole seconds, from 1 to 600.
fn provider_timeout_seconds(value: &str) -> Result<Duration, String> {
    seconds_within(value, 1..=600)
}

/// `--reconcile-timeout-seconds`: whole seconds, from 10 to 3600.
fn reconcile_timeout_seconds(value: &str) -> Result<Duration, String> {
    seconds_within(value, 10..=3600)
}

/// Whole seconds within `range`.
fn seconds_within(value: &str, range: std::ops::RangeInclusive<u64>) -> Result<Duration, String> {
    let seconds: u64 = value
        .parse()
        .map_err(|e| format!("{value:?} is not a number of seconds: {e}"))?;
    if !range.contains(&seconds) {
        return Err(format!(
            "{seconds} is out of range: {} to {} seconds",
            range.start(),
            range.end()
        ));
    }
    Ok(Duration::from_secs(seconds))
}

/// `--address-allow`: `provider=CIDR`, the provider one of capi-lb's.
fn provider_range(value: &str) -> Result<(String, IpNet), String> {
    let (provider, range) = value
        .split_once('=')
        .ok_or_else(|| format!("{value:?} is not provider=CIDR"))?;
    if catalog::find(provider).is_none() {
        return Err(format!(
            "{provider:?} is not a provider (available: {})",
            catalog::names().join(", ")
        ));
    }
    let range = range
        .parse::<IpNet>()
        .map_err(|e| format!("{range:?} is not a CIDR: {e}"))?;
    Ok((provider.to_string(), range))
}

/// `--credentials-secret-label`: `key=value`, a valid label.
fn label_pair(value: &str) -> Result<(String, String), String> {
    let (key, label) = value
        .split_once('=')
        .ok_or_else(|| format!("{value:?} is not key=value"))?;
    let valid_key = !key.is_empty()
        && key.len() <= 253
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
    let valid_value = label.len() <= 63
        && label
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if !valid_key || !valid_value {
        return Err(format!("{value:?} is not a label key=value"));
    }
    Ok((key.to_string(), label.to_string()))
}

/// `--dns-resolver`: an IP and port, or an IP (port 53).
fn dns_server(value: &str) -> Result<SocketAddr, String> {
    if let Ok(address) = value.parse::<SocketAddr>() {
        return Ok(address);
    }
    value
        .parse::<std::net::IpAddr>()
        .map(|ip| SocketAddr::new(ip, 53))
        .map_err(|_| {
            format!("{value:?} is not an IP address or IP:PORT (e.g. 10.96.0.10 or [fd00::a]:53)")
        })
}

/// `--metrics-bind-address`, `--health-probe-bind-address`: an address and port, or "off" (also
/// "" and "0").
fn metrics_address(value: &str) -> Result<MetricsAddress, String> {
    match value {
        "off" | "" | "0" => Ok(None),
        address => address
            .parse()
            .map(Some)
            .map_err(|e| format!("{address:?} is not an address and port (or \"off\"): {e}")),
    }
}

/// Leader election settings (flags of `capi-lb run`).
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct LeaderElection {
    /// Reconcile only while holding the leader Lease, so that several replicas can run (one
    /// leads, the others stand by); needs --leader-election-namespace (or POD_NAMESPACE).
    #[arg(
        id = "leader_elect",
        long = "leader-elect",
        value_name = "BOOL",
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub enabled: bool,
    /// Namespace of the leader Lease (default: the pod's namespace from POD_NAMESPACE).
    #[arg(
        id = "leader_election_namespace",
        long = "leader-election-namespace",
        value_name = "NAMESPACE",
        env = "POD_NAMESPACE"
    )]
    pub namespace: Option<String>,
    /// Name of the leader Lease (used with --leader-elect).
    #[arg(
        id = "leader_election_id",
        long = "leader-election-id",
        value_name = "NAME",
        default_value = "capi-lb-leader"
    )]
    pub lease_name: String,
    /// This replica's identity: POD_NAME, else HOSTNAME, else `capi-lb-<pid>`.
    #[arg(skip = default_identity())]
    pub identity: String,
    /// Seconds a Lease stays valid after its last renewal: the longest failover time. A standby
    /// takes over at most this long after the leader stopped renewing (5 to 300).
    #[arg(id = "lease_duration_seconds", long = "lease-duration-seconds", value_name = "SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(5..=300))]
    pub duration_seconds: u64,
    /// Seconds before the Lease expires at which the leader renews it (1 to 60; shorter than
    /// --lease-duration-seconds).
    #[arg(id = "lease_grace_seconds", long = "lease-grace-seconds", value_name = "SECONDS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=60))]
    pub grace_seconds: u64,
}

fn default_identity() -> String {
    std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| format!("capi-lb-{}", std::process::id()))
}

impl Default for LeaderElection {
    /// Disabled (`--leader-elect=false`).
    fn default() -> Self {
        Self {
            enabled: false,
            namespace: None,
            lease_name: "capi-lb-leader".into(),
            identity: default_identity(),
            duration_seconds: 15,
            grace_seconds: 5,
        }
    }
}

impl LeaderElection {
    /// The Lease to hold (namespace and name) when leader election is on and its settings agree.
    pub fn lease(&self) -> Result<Option<(&str, &str)>, String> {
        if !self.enabled {
            return Ok(None);
        }
        if self.grace_seconds >= self.duration_seconds {
            return Err(
                "--lease-grace-seconds must be shorter than --lease-duration-seconds".into(),
            );
        }
        match &self.namespace {
            Some(namespace) => Ok(Some((namespace, &self.lease_name))),
            None => {
                Err("--leader-elect needs --leader-election-namespace (or POD_NAMESPACE)".into())
            }
        }
    }
}

impl RunOptions {
    /// Options with the defaults of `capi-lb run` (no metrics server, no leader election).
    pub fn new(providers: Vec<String>) -> Self {
        Self {
            namespace: None,
            cluster_domain: DEFAULT_CLUSTER_DOMAIN.to_string(),
            providers,
            concurrency: DEFAULT_CONCURRENCY,
            resync: Duration::from_secs(600),
            drift_check: crate::context::DEFAULT_DRIFT_CHECK,
            provider_timeout: capi_lb_providers::registry::DEFAULT_DEADLINE,
            reconcile_timeout: crate::context::DEFAULT_RECONCILE_TIMEOUT,
            address_deny: Vec::new(),
            address_allow: Vec::new(),
            address_allow_loopback: false,
            dns_domains: Vec::new(),
            dns_wildcards: false,
            credentials_secret_label: None,
            dns_resolver: None,
            external: ExternalEndpoints::default(),
            metrics_address: None,
            metrics_secure: false,
            metrics_cert_dir: None,
            health_address: None,
            leader_election: LeaderElection::default(),
            watch_filter: None,
            inmemory_state: None,
            target_kinds: vec![TargetKind::default()],
        }
    }

    /// The address policy of `--address-deny` and `--address-allow`.
    pub fn address_policy(&self) -> AddressPolicy {
        let mut allow: std::collections::BTreeMap<String, Vec<IpNet>> = Default::default();
        for (provider, range) in &self.address_allow {
            allow.entry(provider.clone()).or_default().push(*range);
        }
        AddressPolicy {
            deny: self.address_deny.clone(),
            allow,
            loopback: self.address_allow_loopback,
        }
    }

    /// Which Secrets may be credentials (`--credentials-secret-label`).
    pub fn credentials_policy(&self) -> capi_lb_providers::entry::CredentialsPolicy {
        capi_lb_providers::entry::CredentialsPolicy {
            required_label: self.credentials_secret_label.clone(),
        }
    }

    /// The DNS name policy of `--dns-domains` and `--dns-wildcards`.
    pub fn name_policy(&self) -> NamePolicy {
        NamePolicy {
            domains: self.dns_domains.clone(),
            wildcards: self.dns_wildcards,
        }
    }

    /// Refuse settings that contradict each other (each flag alone was checked when parsed).
    pub fn check(&self) -> Result<(), RunError> {
        if self.reconcile_timeout <= self.provider_timeout {
            return Err(RunError::Options(format!(
                "--reconcile-timeout-seconds ({}) must be more than --provider-timeout-seconds ({}): \
                 a reconcile waits on its provider",
                self.reconcile_timeout.as_secs(),
                self.provider_timeout.as_secs()
            )));
        }
        self.leader_election
            .lease()
            .map(|_| ())
            .map_err(RunError::Options)
    }
}
