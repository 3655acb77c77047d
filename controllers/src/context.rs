//! What every reconcile shares: the API client, the enabled providers, the target kind resolver,
//! configuration, the clock, the event sink, and per-object back-off for transient failures.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use capi_lb_api::constants::DEFAULT_PUBLICATION_SUFFIX;
use capi_lb_providers::ProviderRegistry;
use capi_lb_providers::clock::SharedClock;

use crate::cache::Caches;
use crate::events::EventSink;
use crate::kinds::{CapiKinds, KindResolver};
use crate::policy::{AddressPolicy, NamePolicy, PolicyFacts};
use crate::telemetry::Metrics;

/// Controller configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Cluster DNS domain used in published endpoint names.
    pub cluster_domain: String,
    /// How often an unchanged LoadBalancer (and Service) is reconciled anyway.
    pub resync: Duration,
    /// How often a Ready load balancer that capi-lb does not watch (in a cloud, in a remote
    /// cluster) is looked at again, to find it deleted or broken behind capi-lb's back
    /// (`--drift-check-seconds`); each LoadBalancer's interval is spread by up to a tenth around it
    /// ([`Config::drift_check_for`]).
    pub drift_check: Duration,
    /// The `-ext` publisher for Services of type LoadBalancer.
    pub external: ExternalEndpoints,
    /// The admin's rules for the addresses capi-lb publishes.
    pub addresses: AddressPolicy,
    /// The admin's rules for the DNS names namespaces publish.
    pub names: NamePolicy,
    /// Which Secrets providers may use as credentials (given to the providers when they are built).
    pub credentials: capi_lb_providers::entry::CredentialsPolicy,
    /// How long one reconcile may take, waits on providers included
    /// (`--reconcile-timeout-seconds`): past it the reconcile is abandoned and retried.
    pub reconcile_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            cluster_domain: capi_lb_api::constants::DEFAULT_CLUSTER_DOMAIN.to_string(),
            resync: Duration::from_secs(600),
            drift_check: DEFAULT_DRIFT_CHECK,
            external: ExternalEndpoints::default(),
            addresses: AddressPolicy::default(),
            names: NamePolicy::default(),
            credentials: Default::default(),
            reconcile_timeout: DEFAULT_RECONCILE_TIMEOUT,
        }
    }
}

/// The default of `--reconcile-timeout-seconds`: four default provider calls' deadlines.
pub const DEFAULT_RECONCILE_TIMEOUT: Duration = Duration::from_secs(120);

/// The default of `--drift-check-seconds`.
pub const DEFAULT_DRIFT_CHECK: Duration = Duration::from_secs(60);

impl Config {
    /// The drift check interval of the LoadBalancer with UID `uid`: [`Config::drift_check`] spread
    /// by up to a tenth either way, the same for one LoadBalancer every time, so that load balancers
    /// created together are not all looked at in the same second.
    pub fn drift_check_for(&self, uid: &str) -> Duration {
        crate::reachability::spread(uid, self.drift_check)
    }
}

/// Shared state of the reconcilers.
pub struct Context {
    /// Kubernetes API client.
    pub client: kube::Client,
    /// Enabled providers.
    pub providers: ProviderRegistry,
    /// Target kind resolver.
    pub kinds: KindResolver,
    /// Configuration.
    pub config: Config,
    /// Clock (conditions' transition times, back-off).
    pub clock: SharedClock,
    /// Events.
    pub events: EventSink,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Caches of watched kinds (`run` only), read instead of listing.
    pub caches: Caches,
    /// The Cluster API kinds at the version the cluster serves.
    pub capi: CapiKinds,
    /// What the address policy reads of the cluster (`run` only).
    pub facts: Arc<PolicyFacts>,
    /// The endpoint probes of `spec.reachability` (`run` only: `simulate` and the in-memory API
    /// probe nothing).
    pub prober: Option<Arc<crate::reachability::Prober>>,
    /// The workload clusters of `spec.workloadEndpoints` (`run` only).
    pub workloads: Option<Arc<crate::workload::Workloads>>,
    failures: Mutex<HashMap<String, u32>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("providers", &self.providers)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The shortest retry delay after a transient failure (it doubles with each one, up to
/// [`BACKOFF_MAX`]).
const BACKOFF_MIN: Duration = Duration::from_secs(1);
/// A minute at most: a cloud back after an outage is used again within a minute (the fault tests:
/// with five minutes, an Octavia outage of one minute took 110 s to recover from), at the cost of one
/// attempt per LoadBalancer and minute while it lasts.
const BACKOFF_MAX: Duration = Duration::from_secs(60);

impl Context {
    /// A new context.
    pub fn new(
        client: kube::Client,
        providers: ProviderRegistry,
        kinds: KindResolver,
        config: Config,
        clock: SharedClock,
        events: EventSink,
    ) -> Self {
        Self {
            client,
            providers,
            kinds,
            config,
            clock,
            events,
            metrics: Arc::new(Metrics::new()),
            caches: Caches::default(),
            capi: CapiKinds::default(),
            facts: Arc::default(),
            prober: None,
            workloads: None,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Use `metrics` (shared with the HTTP server) instead of a private registry.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Probe the endpoints of `spec.reachability` with `prober`.
    pub fn with_prober(mut self, prober: Arc<crate::reachability::Prober>) -> Self {
        self.prober = Some(prober);
        self
    }

    /// Keep workload clusters' `default/kubernetes` endpoints with `workloads`.
    pub fn with_workloads(mut self, workloads: Arc<crate::workload::Workloads>) -> Self {
        self.workloads = Some(workloads);
        self
    }

    /// Read ClusterIPs and Namespaces' allow-lists from `facts` (kept by `run`'s watches).
    pub fn with_facts(mut self, facts: Arc<PolicyFacts>) -> Self {
        self.facts = facts;
        self
    }

    /// Read targets from `caches` (see [`crate::cache`]).
    pub fn with_caches(mut self, caches: Caches) -> Self {
        self.caches = caches;
        self
    }

    /// Read and write Cluster API objects at the versions of `capi` (Machines are resolved as
    /// targets through [`Self::kinds`] at the same version).
    pub fn with_capi(mut self, capi: CapiKinds) -> Self {
        if capi.machine_served {
            self.kinds.insert(capi.machine.clone());
        }
        self.capi = capi;
        self
    }

    /// Record a transient failure of `key` and return how long to wait before the next attempt:
    /// 1s, 2s, 4s, ... up to a minute.
    pub fn backoff(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let attempts = failures.entry(key.to_string()).or_insert(0);
        let delay = BACKOFF_MIN.saturating_mul(1u32 << (*attempts).min(16));
        *attempts = attempts.saturating_add(1);
        delay.min(BACKOFF_MAX)
    }

    /// A reconcile of the object `reference` panicked (caught by [`crate::boundary::contain`]):
    /// logged, counted in `capi_lb_panics_total{task}`, told on the object as a Warning Event
    /// `InternalError`, and returned as the error its controller backs off on.
    pub async fn panicked(
        &self,
        task: &'static str,
        reference: &k8s_openapi::api::core::v1::ObjectReference,
        panic: crate::boundary::Panicked,
    ) -> crate::error::Error {
        let object = format!(
            "{} {}/{}",
            reference.kind.as_deref().unwrap_or_default(),
            reference.namespace.as_deref().unwrap_or_default(),
            reference.name.as_deref().unwrap_or_default()
        );
        tracing::error!(%object, task, %panic, "a reconcile panicked; this object alone is retried with back-off");
        self.metrics.panicked(task);
        self.events
            .publish(
                reference,
                true,
                capi_lb_api::constants::event::INTERNAL_ERROR,
                "Reconcile",
                format!(
                    "capi-lb failed inside this object's reconcile ({panic}): a bug, please report it; \
                     this object is retried with back-off, every other object goes on"
                ),
            )
            .await;
        crate::error::Error::Panicked { object, panic }
    }

    /// Forget the failures of `key` after a success.
    pub fn reset_backoff(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }
}

/// What a reconcile asks of the scheduler.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Reconcile again after this long; `None` means "only when something changes" (plus the
    /// periodic resync in `run`).
    pub requeue_after: Option<Duration>,
    /// Only a change of the object itself can help (its spec is invalid): no periodic resync
    /// either, unless a requeue was asked for.
    pub until_changed: bool,
    /// Nothing is pending, but the load balancer is to be looked at again after this long, to find
    /// drift in a cloud capi-lb does not watch (`--drift-check-seconds`). Not work in progress:
    /// `simulate` counts a LoadBalancer that asks only for this as settled.
    pub look_after: Option<Duration>,
}

impl Outcome {
    /// Nothing to wait for.
    pub fn done() -> Self {
        Self::default()
    }

    /// Reconcile again after `after`.
    pub fn requeue(after: Duration) -> Self {
        Self {
            requeue_after: Some(after),
            ..Self::default()
        }
    }

    /// Nothing to do until the object changes.
    pub fn until_changed() -> Self {
        Self {
            until_changed: true,
            ..Self::default()
        }
    }

    /// The earlier of two requeue requests.
    pub fn min(self, other: Option<Duration>) -> Self {
        Self {
            requeue_after: earlier(self.requeue_after, other),
            ..self
        }
    }

    /// Look at the load balancer again after `after` at the latest (drift checks).
    pub fn look(self, after: Duration) -> Self {
        Self {
            look_after: earlier(self.look_after, Some(after)),
            ..self
        }
    }
}

fn earlier(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Which Services of `type: LoadBalancer` get an `-ext` endpoint when they say nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Policy {
    /// Every one, unless annotated `external-endpoint: "false"`.
    #[default]
    All,
    /// Only those annotated `external-endpoint: "true"`.
    Annotated,
}

/// Configuration of the Service controller, the `-ext` publisher of Services of type LoadBalancer
/// (flags of `capi-lb run`).
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct ExternalEndpoints {
    /// Publish a stable `<svc>-ext` endpoint for Services of type LoadBalancer (the Service
    /// controller's publisher; false turns it off).
    #[arg(
        id = "external_endpoints",
        long = "external-endpoints",
        value_name = "BOOL",
        default_value_t = true,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set,
        env = "CAPI_LB_EXTERNAL_ENDPOINTS"
    )]
    pub enabled: bool,
    /// Which LoadBalancer Services get one when they carry no
    /// `loadbalancer.cluster.x-k8s.io/external-endpoint` annotation.
    #[arg(
        id = "external_endpoints_policy",
        long = "external-endpoints-policy",
        value_name = "POLICY",
        value_enum,
        default_value_t = Policy::All
    )]
    pub policy: Policy,
    /// Suffix of a published Service's name (`<svc><suffix>`), unless the Service's
    /// `loadbalancer.cluster.x-k8s.io/external-endpoint-suffix` annotation gives another.
    #[arg(
        id = "external_endpoints_suffix",
        long = "external-endpoints-suffix",
        value_name = "SUFFIX",
        default_value = DEFAULT_PUBLICATION_SUFFIX
    )]
    pub suffix: String,
    /// Take over `-ext` Services and Endpoints made by kube-dc's publisher (labels
    /// `kube-dc.com/managed-by=service-lb-controller`), to migrate from it.
    #[arg(
        long,
        value_name = "BOOL",
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub adopt_kube_dc: bool,
    /// Also write legacy v1 Endpoints for the `-ext` Services (for consumers that do not read
    /// EndpointSlices).
    #[arg(
        long,
        value_name = "BOOL",
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub legacy_endpoints: bool,
}

impl Default for ExternalEndpoints {
    fn default() -> Self {
        Self {
            enabled: true,
            policy: Policy::All,
            suffix: DEFAULT_PUBLICATION_SUFFIX.to_string(),
            adopt_kube_dc: false,
            legacy_endpoints: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_checks_are_spread_by_up_to_a_tenth_and_stable_per_load_balancer() {
        let config = Config::default();
        let uids: Vec<String> = (0..1_000)
            .map(|i| format!("6f1c2a3b-0000-4000-8000-{i:012}"))
            .collect();
        let intervals: Vec<Duration> = uids.iter().map(|u| config.drift_check_for(u)).collect();
        let (low, high) = (Duration::from_secs(54), Duration::from_secs(66));
        assert!(intervals.iter().all(|i| *i >= low && *i < high));
        assert_eq!(config.drift_check_for(&uids[7]), intervals[7]);
        // Spread over the range, not bunched: every 2-second bucket holds some of the 1,000.
        for bucket in 0..6 {
            let from = low + Duration::from_secs(2 * bucket);
            let to = from + Duration::from_secs(2);
            let n = intervals.iter().filter(|i| **i >= from && **i < to).count();
            assert!(n > 100, "{n} in [{from:?}, {to:?})");
        }
    }
}
