//! `capi-lb run`: the controller against a real cluster (KUBECONFIG or in-cluster configuration).
//!
//! Watches: LoadBalancers (the main stream), the Services capi-lb owns, the EndpointSlices capi-lb
//! manages, every enabled provider's infrastructure kind (mapped to the LoadBalancers that reference
//! the object), objects providers create through the API (Services and kube-dc EIps labelled with a
//! LoadBalancer UID, mapped by their tag annotations), Services of capi-lb's load-balancer class
//! (mapped to the LoadBalancer that realises them and to those still bound to them) and their
//! EndpointSlices, Cluster API Machines (mapped to the LoadBalancers whose selector matches them or
//! whose annotations they carry) and Clusters (mapped by `spec.clusterName`). A second controller
//! publishes `-ext` endpoints for Services of type LoadBalancer (`crate::publication::services`). Cluster API
//! kinds are watched only when installed; other target kinds are picked up by the periodic resync.
//! A reconcile of an unchanged object writes nothing, so the resync only costs reads.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use capi_lb_api::LoadBalancer;
use capi_lb_api::capi::{Cluster, Machine};
use capi_lb_api::constants::{
    DEFAULT_CLUSTER_DOMAIN, ENDPOINT_TYPE_EXTERNAL, ENDPOINTSLICE_MANAGED_BY_VALUE, FIELD_MANAGER,
    LABEL_ENDPOINT_TYPE, LABEL_ENDPOINTSLICE_MANAGED_BY, LABEL_EXTERNAL_MANAGED_BY,
    LABEL_MANAGED_BY, LABEL_SERVICE_NAME, LABEL_SOURCE_SERVICE, MANAGED_BY_VALUE,
    WATCH_FILTER_LABEL,
};
use capi_lb_providers::ProviderRegistry;
use capi_lb_providers::catalog::{self, Dependencies, UnknownProvider};
use capi_lb_providers::clock::{SharedClock, SystemClock};
use capi_lb_providers::observe::ApiObserver;
use capi_lb_providers::provider::tags;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::core::{ApiResource, DynamicObject};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{CustomResourceExt, Resource, ResourceExt};
use kube_lease_manager::LeaseManagerBuilder;

use crate::context::ExternalEndpoints;
use crate::context::{Config, Context, Outcome};
use crate::error::Error;
use crate::events::EventSink;
use crate::kinds::KindResolver;
use crate::loadbalancer::reconcile_watched;
use crate::loadbalancer::triggers::{self, Triggers, Watched};
use crate::publication::services::{Reported, reconcile_service};
use crate::telemetry::{self, Health, MeteredProvider, Metrics};

/// Options of `capi-lb run`: each field is its flag (clap reads this struct).
#[derive(Clone, Debug, clap::Args)]
pub struct RunOptions {
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "CAPI_LB_NAMESPACE")]
    pub namespace: Option<String>,
    /// Cluster DNS domain used in published endpoint names.
    #[arg(long, default_value = DEFAULT_CLUSTER_DOMAIN, env = "CAPI_LB_CLUSTER_DOMAIN")]
    pub cluster_domain: String,
    /// Providers to enable (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "inmemory",
        env = "CAPI_LB_PROVIDERS",
        value_parser = clap::builder::PossibleValuesParser::new(catalog::names())
    )]
    pub providers: Vec<String>,
    /// LoadBalancers reconciled at the same time.
    #[arg(long, default_value_t = DEFAULT_CONCURRENCY, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,
    /// Seconds between reconciles of an unchanged LoadBalancer (repairs drift in the cloud; at
    /// least 10).
    #[arg(long = "resync-seconds", default_value = "600", value_parser = resync_seconds)]
    pub resync: Duration,
    /// The `-ext` publisher for Services of type LoadBalancer.
    #[command(flatten)]
    pub external: ExternalEndpoints,
    /// Serve /metrics, /livez and /readyz on this address ("off" to disable).
    #[arg(
        long = "metrics-bind-address",
        default_value = "0.0.0.0:8080",
        env = "CAPI_LB_METRICS_BIND_ADDRESS",
        value_parser = metrics_address
    )]
    pub metrics_address: MetricsAddress,
    /// Run only while holding a Lease.
    #[command(flatten)]
    pub leader_election: LeaderElection,
    /// Reconcile only LoadBalancers labelled cluster.x-k8s.io/watch-filter=<value> (clusterctl).
    #[arg(long, env = "CAPI_LB_WATCH_FILTER")]
    pub watch_filter: Option<String>,
}

/// Where the metrics and health server listens, if anywhere. (An alias, so that clap parses
/// "off" into `None` instead of treating the flag as optional.)
pub type MetricsAddress = Option<SocketAddr>;

const DEFAULT_CONCURRENCY: u16 = 4;

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

/// `--metrics-bind-address`: an address and port, or "off" (also "" and "0").
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
    /// Reconcile only while holding a Lease, so that several replicas can run.
    #[arg(
        id = "leader_elect",
        long = "leader-elect",
        default_value_t = false,
        action = clap::ArgAction::Set
    )]
    pub enabled: bool,
    /// Namespace of the leader Lease (default: the pod's namespace from POD_NAMESPACE).
    #[arg(
        id = "leader_election_namespace",
        long = "leader-election-namespace",
        env = "POD_NAMESPACE"
    )]
    pub namespace: Option<String>,
    /// Name of the leader Lease.
    #[arg(
        id = "leader_election_id",
        long = "leader-election-id",
        default_value = "capi-lb-leader"
    )]
    pub lease_name: String,
    /// This replica's identity: POD_NAME, else HOSTNAME, else `capi-lb-<pid>`.
    #[arg(skip = default_identity())]
    pub identity: String,
    /// Seconds a Lease stays valid after its last renewal: the longest failover time. A standby
    /// takes over at most this long after the leader stopped renewing.
    #[arg(id = "lease_duration_seconds", long = "lease-duration-seconds", default_value_t = 15, value_parser = clap::value_parser!(u64).range(5..=300))]
    pub duration_seconds: u64,
    /// The leader renews this many seconds before the Lease expires.
    #[arg(id = "lease_grace_seconds", long = "lease-grace-seconds", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=60))]
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
            external: ExternalEndpoints::default(),
            metrics_address: None,
            leader_election: LeaderElection::default(),
            watch_filter: None,
        }
    }

    /// Refuse settings that contradict each other (each flag alone was checked when parsed).
    pub fn check(&self) -> Result<(), RunError> {
        self.leader_election
            .lease()
            .map(|_| ())
            .map_err(RunError::Options)
    }
}

/// Errors starting the controller.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No usable Kubernetes configuration.
    #[error("cannot connect to Kubernetes: {0}")]
    Connect(#[source] kube::Error),
    /// Our CRDs are missing.
    #[error(
        "the LoadBalancer CRD is not installed ({0}); install the CRDs first: capi-lb crds | kubectl apply -f -"
    )]
    CrdsMissing(String),
    /// Leader election could not start.
    #[error("leader election failed: {0}")]
    LeaderElection(String),
    /// This replica lost the leader lease and could not renew it: it stops so that only one
    /// replica ever reconciles.
    #[error("lost the leader lease; exiting so that another replica takes over")]
    LostLeadership,
    /// The metrics and health server could not start.
    #[error("cannot serve metrics and health on {0}: {1}")]
    Server(SocketAddr, #[source] std::io::Error),
    /// Options that contradict each other.
    #[error("{0}")]
    Options(String),
    /// An unknown provider was asked for.
    #[error(transparent)]
    UnknownProvider(#[from] UnknownProvider),
}

/// Build the registry of the requested providers from the catalog (those that work through the
/// Kubernetes API use `client`; cloud API requests are reported to `observer`).
pub fn providers(
    names: &[String],
    client: &kube::Client,
    clock: SharedClock,
    observer: Option<Arc<dyn ApiObserver>>,
) -> Result<ProviderRegistry, RunError> {
    let dependencies = Dependencies {
        observer,
        ..Dependencies::new(client.clone(), clock)
    };
    Ok(catalog::registry(names, &dependencies)?)
}

fn api<K>(client: &kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope>,
    <K as Resource>::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

fn dynamic_api(
    client: &kube::Client,
    namespace: Option<&str>,
    ar: &ApiResource,
) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

/// Whether the API serves `group`/`kind`. A missing group is `Ok(false)`; failing to reach the API
/// is an error.
async fn installed(client: &kube::Client, group: &str, kind: &str) -> Result<bool, kube::Error> {
    match kube::discovery::group(client, group).await {
        Ok(g) => Ok(g.recommended_kind(kind).is_some()),
        Err(kube::Error::Discovery(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Run the controller against the configured cluster until SIGTERM or SIGINT.
pub async fn run(options: RunOptions) -> Result<(), RunError> {
    crate::install_crypto_provider();
    let client = kube::Client::try_default()
        .await
        .map_err(RunError::Connect)?;
    run_with_client(client, options, shutdown_signal()).await
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = interrupt => {},
                    _ = term.recv() => {},
                }
            }
            Err(_) => {
                let _ = interrupt.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
    tracing::info!("shutdown requested: finishing reconciles in flight");
}

/// Run the controller with `client` until `shutdown` resolves; reconciles in flight finish first.
pub async fn run_with_client(
    client: kube::Client,
    options: RunOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), RunError> {
    options.check()?;
    require_crds(&client).await?;
    let clock: SharedClock = Arc::new(SystemClock);
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::default());
    let registry = providers(
        &options.providers,
        &client,
        clock.clone(),
        Some(metrics.clone()),
    )?
    .wrapped(|p| Arc::new(MeteredProvider::new(p, metrics.clone())));
    let shutdown = shutdown.shared();
    if let Some(address) = options.metrics_address {
        serve_telemetry(address, &metrics, &health, shutdown.clone()).await?;
    }
    // Standby replicas are ready (so rolling updates proceed) and wait here.
    let Some(mut leadership) =
        Leadership::acquire(&client, &options.leader_election, &health, shutdown.clone()).await?
    else {
        return Ok(());
    };
    metrics.set_leader(true);
    let stop = leadership.stop_on(shutdown);
    let ctx = Arc::new(
        Context::new(
            client.clone(),
            registry.clone(),
            KindResolver::with_discovery(client.clone()),
            Config {
                cluster_domain: options.cluster_domain.clone(),
                resync: options.resync,
                external: options.external.clone(),
            },
            clock.clone(),
            EventSink::new(client.clone(), std::env::var("POD_NAME").ok(), clock),
        )
        .with_metrics(metrics.clone()),
    );
    let ns = options.namespace.as_deref();
    tracing::info!(
        namespace = ns.unwrap_or("<all>"),
        providers = ?registry.names(),
        cluster_domain = %options.cluster_domain,
        "starting capi-lb controller"
    );

    let (controller, store) = loadbalancer_controller(&client, &options, &registry).await?;
    let observers = observe_cache(store, health.clone(), metrics.clone());
    let loadbalancers = controller
        .with_config(ControllerConfig::default().concurrency(options.concurrency))
        .graceful_shutdown_on(stop.clone())
        .run(reconcile_action, error_policy, ctx.clone())
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => tracing::debug!(object = %object, "reconciled"),
                Err(e) => tracing::warn!(error = %e, "reconcile failed"),
            }
        });
    let services = async {
        if options.external.enabled {
            external_endpoints(&client, ns, &options, ctx.clone(), stop).await;
        }
    };
    futures::join!(loadbalancers, services);
    observers.abort();
    if leadership.release().await {
        health.set_broken();
        metrics.set_leader(false);
        return Err(RunError::LostLeadership);
    }
    tracing::info!("capi-lb controller stopped");
    Ok(())
}

/// Refuse to start without the LoadBalancer CRD.
async fn require_crds(client: &kube::Client) -> Result<(), RunError> {
    let crd = LoadBalancer::crd();
    if installed(client, &crd.spec.group, &crd.spec.names.kind)
        .await
        .map_err(RunError::Connect)?
    {
        Ok(())
    } else {
        Err(RunError::CrdsMissing(crd.metadata.name.unwrap_or_default()))
    }
}

/// Serve `/metrics`, `/livez` and `/readyz` on `address` until `stop`.
async fn serve_telemetry(
    address: SocketAddr,
    metrics: &Arc<Metrics>,
    health: &Arc<Health>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| RunError::Server(address, e))?;
    let (metrics, health) = (metrics.clone(), health.clone());
    tokio::spawn(async move {
        if let Err(e) = telemetry::serve_on(listener, metrics, health, stop).await {
            tracing::error!(error = %e, "metrics and health server failed");
        }
    });
    Ok(())
}

/// This replica's right to reconcile: the held Lease (if leader election is on), a signal when
/// it is lost, and how to give it back.
struct Leadership {
    /// Resolves when the Lease is lost (never without leader election).
    lost_signal: BoxFuture<'static, ()>,
    /// Set once the Lease was lost.
    lost: Arc<AtomicBool>,
    /// Gives the Lease back (the manager releases it when its channel closes), so that a standby
    /// takes over at once instead of after the lease duration.
    release: BoxFuture<'static, ()>,
}

impl Leadership {
    /// Wait until this replica leads (at once without leader election); `None` when `shutdown`
    /// comes first.
    async fn acquire(
        client: &kube::Client,
        election: &LeaderElection,
        health: &Health,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<Option<Self>, RunError> {
        let lost = Arc::new(AtomicBool::new(false));
        let Some((namespace, lease_name)) = election.lease().map_err(RunError::Options)? else {
            return Ok(Some(Self {
                lost_signal: Box::pin(futures::future::pending()),
                lost,
                release: Box::pin(futures::future::ready(())),
            }));
        };
        health.set_ready(true);
        let manager = LeaseManagerBuilder::new(client.clone(), lease_name)
            .with_namespace(namespace)
            .with_identity(&election.identity)
            .with_duration(election.duration_seconds)
            .with_grace(election.grace_seconds)
            .with_field_manager(format!("{FIELD_MANAGER}-leader-election"))
            .build()
            .await
            .map_err(|e| RunError::LeaderElection(e.to_string()))?;
        let (mut leader, task) = manager.watch().await;
        tracing::info!(
            lease = %format!("{namespace}/{lease_name}"),
            identity = %election.identity,
            "waiting to become the leader"
        );
        let mut shutdown = std::pin::pin!(shutdown);
        while !*leader.borrow_and_update() {
            tokio::select! {
                changed = leader.changed() => {
                    if changed.is_err() {
                        return Err(RunError::LeaderElection("the lease manager stopped".into()));
                    }
                }
                () = &mut shutdown => return Ok(None),
            }
        }
        tracing::info!(identity = %election.identity, "became the leader");
        let mut watch = leader.clone();
        let flag = lost.clone();
        Ok(Some(Self {
            lost_signal: Box::pin(async move {
                while watch.changed().await.is_ok() {
                    if !*watch.borrow() {
                        break;
                    }
                }
                flag.store(true, Ordering::SeqCst);
            }),
            lost,
            release: Box::pin(async move {
                drop(leader);
                let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
            }),
        }))
    }

    /// Resolves on `shutdown` or when the Lease is lost, whichever comes first.
    fn stop_on(
        &mut self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> futures::future::Shared<BoxFuture<'static, ()>> {
        let lost = std::mem::replace(&mut self.lost_signal, Box::pin(futures::future::pending()));
        let stop: BoxFuture<'static, ()> = Box::pin(async move {
            tokio::select! {
                () = shutdown => {},
                () = lost => {
                    tracing::error!("lost the leader lease: stopping reconciles");
                },
            }
        });
        stop.shared()
    }

    /// Give the Lease back; whether it had been lost.
    async fn release(self) -> bool {
        self.release.await;
        self.lost.load(Ordering::SeqCst)
    }
}

/// The LoadBalancer controller with every watch that triggers it (see the module docs), and the
/// LoadBalancer cache. The LoadBalancer watch also keeps the index the other watches' triggers
/// read.
async fn loadbalancer_controller(
    client: &kube::Client,
    options: &RunOptions,
    registry: &ProviderRegistry,
) -> Result<(Controller<Watched>, Store<Watched>), RunError> {
    let ns = options.namespace.as_deref();
    let lb_watch = match &options.watch_filter {
        Some(value) => watcher::Config::default().labels(&format!("{WATCH_FILTER_LABEL}={value}")),
        None => watcher::Config::default(),
    };
    let triggers = Arc::new(Triggers::new());
    let (store, writer) = reflector::store();
    let lb_events = {
        let triggers = triggers.clone();
        reflector::reflector(writer, watcher(api::<Watched>(client, ns), lb_watch))
            .inspect_ok(move |event| triggers.event(event))
            .applied_objects()
    };
    let watches = Watches {
        client,
        ns,
        triggers,
    };
    let controller = Controller::for_stream(lb_events, store.clone());
    let controller = watches.published(controller);
    let controller = watches.infrastructure(controller, registry);
    let controller = watches.class_services(controller);
    let controller = watches.provider_objects(controller, registry).await?;
    let controller = watches.cluster_api(controller, options.resync).await?;
    Ok((controller, store))
}

/// Adds the watches that trigger the LoadBalancer controller, by what they watch.
struct Watches<'a> {
    client: &'a kube::Client,
    ns: Option<&'a str>,
    triggers: Arc<Triggers>,
}

impl Watches<'_> {
    /// The Services capi-lb owns and the EndpointSlices it manages.
    fn published(&self, controller: Controller<Watched>) -> Controller<Watched> {
        controller
            .owns(
                api::<Service>(self.client, self.ns),
                watcher::Config::default()
                    .labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}")),
            )
            .watches(
                api::<EndpointSlice>(self.client, self.ns),
                watcher::Config::default().labels(&format!(
                    "{LABEL_ENDPOINTSLICE_MANAGED_BY}={ENDPOINTSLICE_MANAGED_BY_VALUE}"
                )),
                |slice: EndpointSlice| triggers::managed_slice(&slice),
            )
    }

    /// Every enabled provider's infrastructure kind, mapped to the LoadBalancers that reference
    /// the object.
    fn infrastructure(
        &self,
        mut controller: Controller<Watched>,
        registry: &ProviderRegistry,
    ) -> Controller<Watched> {
        for ar in registry.resources() {
            let triggers = self.triggers.clone();
            let mapped = ar.clone();
            controller = controller.watches_with(
                dynamic_api(self.client, self.ns, &ar),
                ar.clone(),
                watcher::Config::default(),
                move |obj: DynamicObject| triggers.referencing(&mapped, &obj),
            );
        }
        controller
    }

    /// Services of capi-lb's load-balancer class, and their EndpointSlices: they drive the
    /// LoadBalancer that realises them, and the LoadBalancers still bound to them (annotated with
    /// the Service's name), so that when a Service names another LoadBalancer or leaves the class,
    /// those let its endpoints go.
    fn class_services(&self, controller: Controller<Watched>) -> Controller<Watched> {
        let (services, slices) = (self.triggers.clone(), self.triggers.clone());
        controller
            .watches(
                api::<Service>(self.client, self.ns),
                watcher::Config::default(),
                move |svc: Service| services.bound_to_service(&svc),
            )
            .watches(
                api::<EndpointSlice>(self.client, self.ns),
                watcher::Config::default().labels(LABEL_SERVICE_NAME),
                move |slice: EndpointSlice| slices.bound_to_slice(&slice),
            )
    }

    /// Objects providers create through the Kubernetes API (kube-dc: the LoadBalancer Service and
    /// each catalog entry's owned kinds such as the EIp), by the owning LoadBalancer's UID label
    /// and name annotation. An owned kind that is not installed is not watched (with a warning).
    async fn provider_objects(
        &self,
        mut controller: Controller<Watched>,
        registry: &ProviderRegistry,
    ) -> Result<Controller<Watched>, RunError> {
        controller = controller.watches(
            api::<Service>(self.client, self.ns),
            watcher::Config::default().labels(tags::UID),
            move |svc: Service| triggers::by_tags(&svc.metadata),
        );
        for entry in catalog::CATALOG
            .iter()
            .filter(|e| registry.names().contains(&e.name))
        {
            for owned in entry.owned_kinds {
                let ar = owned.api_resource();
                if installed(self.client, &ar.group, &ar.kind)
                    .await
                    .map_err(RunError::Connect)?
                {
                    controller = controller.watches_with(
                        dynamic_api(self.client, self.ns, &ar),
                        ar.clone(),
                        watcher::Config::default().labels(tags::UID),
                        move |obj: DynamicObject| triggers::by_tags(&obj.metadata),
                    );
                } else {
                    tracing::warn!("{}", owned.missing);
                }
            }
        }
        Ok(controller)
    }

    /// Cluster API Machines (mapped to the LoadBalancers whose selector matches them or whose
    /// annotations they carry) and Clusters (by `spec.clusterName`), when installed.
    async fn cluster_api(
        &self,
        mut controller: Controller<Watched>,
        resync: Duration,
    ) -> Result<Controller<Watched>, RunError> {
        let machine = ApiResource::erase::<Machine>(&());
        if installed(self.client, &machine.group, &machine.kind)
            .await
            .map_err(RunError::Connect)?
        {
            let triggers = self.triggers.clone();
            controller = controller.watches_with(
                dynamic_api(self.client, self.ns, &machine),
                machine.clone(),
                watcher::Config::default(),
                move |obj: DynamicObject| triggers.selecting(&obj),
            );
        } else {
            tracing::warn!(
                "Cluster API Machines are not installed: not watching them (resync every {resync:?})"
            );
        }
        if installed(self.client, &Cluster::group(&()), &Cluster::kind(&()))
            .await
            .map_err(RunError::Connect)?
        {
            let triggers = self.triggers.clone();
            controller = controller.watches(
                api::<Cluster>(self.client, self.ns),
                watcher::Config::default(),
                move |cluster: Cluster| triggers.of_cluster(&cluster),
            );
        }
        Ok(controller)
    }
}

/// Ready once the LoadBalancer cache is synced (standby replicas already are); the managed
/// object gauges follow the cache.
fn observe_cache(
    store: Store<Watched>,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if store.wait_until_ready().await.is_ok() {
            health.set_ready(true);
        }
        let mut tick = tokio::time::interval(Duration::from_secs(10));
        loop {
            tick.tick().await;
            let state = store.state();
            metrics.set_managed("loadbalancers", state.len());
            metrics.set_managed(
                "ready_loadbalancers",
                state
                    .iter()
                    .filter(|lb| {
                        lb.0.as_ref()
                            .is_ok_and(|lb| lb.status.as_ref().is_some_and(|s| s.ready))
                    })
                    .count(),
            );
        }
    })
}

/// What the `-ext` publisher's reconciles share.
struct ServiceContext {
    ctx: Arc<Context>,
    reported: Reported,
}

/// The `-ext` publisher: every Service (the LoadBalancer ones are published; our `-ext` Services are
/// checked for a vanished source), re-triggered by changes to the `-ext` Services and EndpointSlices
/// it manages (mapped to their source by label). Watch-driven: no per-Service polling beyond the
/// resync.
async fn external_endpoints(
    client: &kube::Client,
    ns: Option<&str>,
    options: &RunOptions,
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    tracing::info!(
        policy = ?options.external.policy,
        suffix = %options.external.suffix,
        adopt_kube_dc = options.external.adopt_kube_dc,
        legacy_endpoints = options.external.legacy_endpoints,
        "publishing -ext endpoints for Services of type LoadBalancer"
    );
    let ours = format!(
        "{LABEL_ENDPOINT_TYPE}={ENDPOINT_TYPE_EXTERNAL},{LABEL_EXTERNAL_MANAGED_BY}={MANAGED_BY_VALUE}"
    );
    let to_source = |labels: &std::collections::BTreeMap<String, String>,
                     namespace: Option<String>| {
        let source = labels.get(LABEL_SOURCE_SERVICE)?;
        Some(ObjectRef::<Service>::new(source).within(&namespace?))
    };
    let context = Arc::new(ServiceContext {
        ctx,
        reported: Reported::default(),
    });
    Controller::new(api::<Service>(client, ns), watcher::Config::default())
        .watches(
            api::<Service>(client, ns),
            watcher::Config::default().labels(&ours),
            move |svc: Service| to_source(svc.labels(), svc.namespace()),
        )
        .watches(
            api::<EndpointSlice>(client, ns),
            watcher::Config::default().labels(&ours),
            move |slice: EndpointSlice| to_source(slice.labels(), slice.namespace()),
        )
        .with_config(ControllerConfig::default().concurrency(options.concurrency))
        .graceful_shutdown_on(shutdown)
        .run(
            |svc: Arc<Service>, c: Arc<ServiceContext>| async move {
                let timer = c.ctx.metrics.reconcile("external-endpoint");
                let outcome = reconcile_service(svc, c.ctx.clone(), &c.reported).await?;
                timer.succeeded();
                Ok::<_, Error>(action(outcome, c.ctx.config.resync))
            },
            |svc: Arc<Service>, error: &Error, c: Arc<ServiceContext>| {
                let key = svc.uid().unwrap_or_else(|| svc.name_any());
                let delay = c.ctx.backoff(&key);
                tracing::warn!(service = %svc.name_any(), namespace = ?svc.namespace(), error = %error, retry_in = ?delay, "external endpoint reconcile failed");
                Action::requeue(delay)
            },
            context,
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "external endpoint reconcile failed");
            }
        })
        .await;
}

async fn reconcile_action(lb: Arc<Watched>, ctx: Arc<Context>) -> Result<Action, Error> {
    let timer = ctx.metrics.reconcile("loadbalancer");
    let outcome = reconcile_watched(lb, ctx.clone()).await?;
    timer.succeeded();
    Ok(action(outcome, ctx.config.resync))
}

/// The scheduler's action for a reconcile's outcome: the requeue it asks for, else the periodic
/// resync, unless only a change of the object can help.
fn action(outcome: Outcome, resync: Duration) -> Action {
    match outcome {
        Outcome {
            requeue_after: Some(after),
            ..
        } => Action::requeue(after),
        Outcome {
            until_changed: true,
            ..
        } => Action::await_change(),
        Outcome { .. } => Action::requeue(resync),
    }
}

fn error_policy(lb: Arc<Watched>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = lb.uid().unwrap_or_else(|| lb.name_any());
    let delay = ctx.backoff(&key);
    tracing::warn!(
        loadbalancer = %lb.name_any(),
        namespace = ?lb.namespace(),
        error = %error,
        retry_in = ?delay,
        "reconcile failed"
    );
    Action::requeue(delay)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_become_requeues_resyncs_or_waiting_for_a_change() {
        let resync = Duration::from_secs(600);
        let soon = Duration::from_secs(5);
        assert_eq!(
            action(Outcome::requeue(soon), resync),
            Action::requeue(soon)
        );
        assert_eq!(action(Outcome::done(), resync), Action::requeue(resync));
        assert_eq!(
            action(Outcome::until_changed(), resync),
            Action::await_change()
        );
        // A requeue asked for by any step wins over waiting.
        assert_eq!(
            action(Outcome::until_changed().min(Some(soon)), resync),
            Action::requeue(soon)
        );
    }
}
