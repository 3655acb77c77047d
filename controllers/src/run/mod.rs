//! `capi-lb run`: both controllers against a real cluster (KUBECONFIG or in-cluster
//! configuration), in one process: the LoadBalancer controller ([`crate::loadbalancer`]) and the
//! Service controller ([`crate::service`], unless `--external-endpoints=false`), sharing one
//! context (client, providers, event sink, back-off), one leader lease and one metrics server, and
//! stopping together. `watches/` builds each controller with the watches that trigger it.
//! A reconcile of an unchanged object writes nothing, so the resync only costs reads.

mod backoff;
pub mod client;
mod fairness;
mod leadership;
mod options;
mod saver;
mod watches;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use capi_lb_api::LoadBalancer;
use capi_lb_api::loadbalancer::LoadBalancerAddress;
use capi_lb_providers::ProviderRegistry;
use capi_lb_providers::catalog::{self, UnknownProvider};
use capi_lb_providers::clock::{SharedClock, SystemClock};
use capi_lb_providers::entry::{Dependencies, Entry};
use capi_lb_providers::inmemory::{self, InMemoryCloud, InMemoryProvider};
use capi_lb_providers::observe::ApiObserver;
use capi_lb_providers::provider::Provider;
use capi_lb_providers::registry::WAITING;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::runtime::controller::{Action, Config as ControllerConfig};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{CustomResourceExt, ResourceExt};

use crate::context::{Config, Context, Outcome};
use crate::error::Error;
use crate::events::EventSink;
use crate::kinds::{CapiKinds, KindResolver, TargetKinds};
use crate::loadbalancer::reconcile_watched;
use crate::loadbalancer::triggers::Watched;
use crate::reachability::{Finding, ProbeObserver, Prober};
use crate::service::{Reported, reconcile_service};
use crate::telemetry::{self, Health, MeteredProvider, Metrics};

use fairness::Fairness;
use leadership::Leadership;
pub use options::{LeaderElection, MetricsAddress, RunOptions};
use watches::{installed, loadbalancer_controller, observe_cache, service_controller};

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
    /// The certificate of secure metrics could not be read or made.
    #[error("secure metrics: {0}")]
    MetricsTls(String),
    /// Options that contradict each other.
    #[error("{0}")]
    Options(String),
    /// An unknown provider was asked for.
    #[error(transparent)]
    UnknownProvider(#[from] UnknownProvider),
    /// The in-memory cloud's file could not be read.
    #[error("cannot load the in-memory cloud: {0}")]
    InMemoryState(#[source] std::io::Error),
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

/// Run the controller against the configured cluster until SIGTERM or SIGINT.
pub async fn run(options: RunOptions) -> Result<(), RunError> {
    crate::install_crypto_provider();
    let metrics = Arc::new(Metrics::new());
    let config = client::bounded(
        kube::Config::infer()
            .await
            .map_err(|e| RunError::Connect(kube::Error::InferConfig(e)))?,
    );
    // Every request is counted (`capi_lb_kube_requests_total`).
    let client = kube::client::ClientBuilder::try_from(config)
        .map_err(RunError::Connect)?
        .with_layer(&metrics.kube_layer())
        .build();
    run_instrumented(client, metrics, options, shutdown_signal()).await
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
    run_instrumented(client, Arc::new(Metrics::new()), options, shutdown).await
}

/// [`run_with_client`] reporting into `metrics` (whose [`Metrics::kube_layer`] may count the
/// client's requests).
pub async fn run_instrumented(
    client: kube::Client,
    metrics: Arc<Metrics>,
    options: RunOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), RunError> {
    run_wrapped(client, metrics, options, None, shutdown).await
}

/// Wraps each enabled provider (its catalog entry, the provider) in another: what
/// [`run_wrapped`] takes to put a provider that answers as a hostile cloud would in front of a
/// real one (the end-to-end tests of the address policy).
pub type ProviderWrap =
    Arc<dyn Fn(&'static Entry, Arc<dyn Provider>) -> Arc<dyn Provider> + Send + Sync>;

/// [`run_instrumented`] with each provider wrapped by `wrap` (inside the metering): the rest of
/// the controller (every gate, the publication stage, the writes) is the one `capi-lb run` runs.
pub async fn run_wrapped(
    client: kube::Client,
    metrics: Arc<Metrics>,
    options: RunOptions,
    wrap: Option<ProviderWrap>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), RunError> {
    options.check()?;
    require_crds(&client).await?;
    let clock: SharedClock = Arc::new(SystemClock);
    let health = Arc::new(Health::default());
    let cloud = match &options.inmemory_state {
        Some(path) => {
            Some(InMemoryCloud::load(clock.clone(), path).map_err(RunError::InMemoryState)?)
        }
        None => None,
    };
    let dependencies = Dependencies {
        observer: Some(metrics.clone()),
        credentials: options.credentials_policy(),
        ..Dependencies::new(client.clone(), clock.clone())
    };
    let mut registry = catalog::registry(&options.providers, &dependencies)?
        .with_deadline(options.provider_timeout);
    if let Some(cloud) = &cloud {
        // The in-memory provider over the cloud kept in --inmemory-state.
        registry.replace(
            &inmemory::ENTRY,
            Arc::new(InMemoryProvider::new(cloud.clone())),
        );
    }
    if let Some(wrap) = &wrap {
        registry = registry.wrapped(|entry, p| wrap(entry, p));
    }
    let registry =
        registry.wrapped(|entry, p| Arc::new(MeteredProvider::new(entry.name, p, metrics.clone())));
    let saver = match (&options.inmemory_state, cloud) {
        (Some(path), Some(cloud)) => Some(saver::CloudSaver::start(cloud, path.clone())),
        _ => None,
    };
    let shutdown = shutdown.shared();
    if let Some(address) = options.metrics_address {
        let tls = if options.metrics_secure {
            let config = telemetry::secure::server_config(options.metrics_cert_dir.as_deref())
                .map_err(RunError::MetricsTls)?;
            Some((config, telemetry::secure::Authorizer::new(client.clone())))
        } else {
            None
        };
        serve_telemetry(
            address,
            telemetry::Routes::All,
            tls,
            &metrics,
            &health,
            shutdown.clone(),
        )
        .await?;
    }
    if let Some(address) = options.health_address
        && options.metrics_address != Some(address)
    {
        let routes = telemetry::Routes::Health;
        serve_telemetry(address, routes, None, &metrics, &health, shutdown.clone()).await?;
    }
    // Standby replicas are ready (so rolling updates proceed) and wait here.
    let Some(mut leadership) =
        Leadership::acquire(&client, &options.leader_election, &health, shutdown.clone()).await?
    else {
        return Ok(());
    };
    metrics.set_leader(true);
    let stop = leadership.stop_on(shutdown);
    let ns = options.namespace.as_deref();
    tracing::info!(
        namespace = ns.unwrap_or("<all>"),
        providers = ?registry.names(),
        cluster_domain = %options.cluster_domain,
        "starting capi-lb controller"
    );

    let capi = CapiKinds::discover(&client)
        .await
        .map_err(RunError::Connect)?;
    if capi.machine_served || capi.cluster_served {
        tracing::info!(
            version = capi.version(),
            "Cluster API is served; reading Machines and Clusters at {}",
            capi.version()
        );
    }
    // Ready (`/readyz`) once the LoadBalancer cache is synced (standby replicas already are).
    let (controller, store, caches, facts) =
        loadbalancer_controller(&client, &options, &registry, &capi, health.clone()).await?;
    let observer = Arc::new(ProbeMetrics(metrics.clone()));
    // Probe destinations are the tenant's to write: never the cloud's metadata address or any other
    // the built-in address policy refuses, but for loopback (only capi-lb's own Pod is there).
    let refuse: crate::reachability::Refuse = Arc::new(|ip: std::net::IpAddr| {
        crate::policy::addresses::builtin(ip).filter(|_| !ip.is_loopback())
    });
    // The one scheduler of the background jobs (probes, workload clusters): shares per
    // namespace, a deadline per job, a panic boundary.
    let panics = metrics.clone();
    let jobs = crate::jobs::Jobs::new(
        crate::jobs::SLOTS,
        Some(Arc::new(move |task| panics.panicked(task))),
    );
    let (prober, mut probed) =
        Prober::new(client.clone(), jobs.clone(), Some(observer), Some(refuse));
    let probes = tokio::spawn(prober.clone().run(stop.clone()));
    let (workloads, mut looked) = crate::workload::Workloads::new(
        client.clone(),
        jobs,
        options.credentials_policy(),
        Some(workload_hostnames(&options, facts.clone())),
    );
    let workload_task = tokio::spawn(workloads.clone().run(stop.clone()));
    let ctx = Arc::new(
        Context::new(
            client.clone(),
            registry.clone(),
            KindResolver::with_discovery(client.clone())
                .with_target_kinds(TargetKinds::new(options.target_kinds.clone())),
            Config {
                cluster_domain: options.cluster_domain.clone(),
                resync: options.resync,
                drift_check: options.drift_check,
                external: options.external.clone(),
                addresses: options.address_policy(),
                names: options.name_policy(),
                credentials: options.credentials_policy(),
                reconcile_timeout: options.reconcile_timeout,
            },
            clock.clone(),
            EventSink::new(client.clone(), std::env::var("POD_NAME").ok(), clock),
        )
        .with_metrics(metrics.clone())
        .with_caches(caches)
        .with_facts(facts)
        .with_capi(capi)
        .with_prober(prober)
        .with_workloads(workloads),
    );
    let machines = ctx
        .capi
        .machine_served
        .then(|| ctx.caches.shared(&ctx.capi.machine))
        .flatten();
    let observers = observe_cache(store, machines, metrics.clone(), ctx.clock.clone());
    let fair = Fairness::new(options.concurrency);
    let latest = controller.store();
    let loadbalancers = controller
        // Unbounded here: `Fairness` gives out the `--concurrency` work slots, which a reconcile
        // waiting on a provider does not hold.
        .with_config(ControllerConfig::default().concurrency(0))
        // A probe of spec.reachability found something new: the Reachable condition follows.
        .reconcile_on(futures::stream::poll_fn(move |cx| {
            probed.poll_recv(cx).map(|found| {
                found.map(|(namespace, name)| ObjectRef::new(&name).within(&namespace))
            })
        }))
        // A look at a workload cluster found something new: WorkloadEndpoints follows.
        .reconcile_on(futures::stream::poll_fn(move |cx| {
            looked.poll_recv(cx).map(|found| {
                found.map(|(namespace, name)| ObjectRef::new(&name).within(&namespace))
            })
        }))
        .graceful_shutdown_on(stop.clone())
        .run(
            move |lb, ctx| reconcile_action(lb, ctx, fair.clone(), latest.clone()),
            error_policy,
            ctx.clone(),
        )
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => tracing::debug!(object = %object, "reconciled"),
                Err(e) if worth_a_warning(&e) => tracing::warn!(error = %e, "reconcile failed"),
                Err(e) => tracing::debug!(error = %e, "not reconciled"),
            }
        });
    let services = async {
        if options.external.enabled {
            services(&client, &options, ctx.clone(), stop).await;
        }
    };
    futures::join!(loadbalancers, services);
    observers.abort();
    probes.abort();
    workload_task.abort();
    if let Some(saver) = saver {
        saver.stop().await;
    }
    if leadership.release().await {
        health.set_broken();
        metrics.set_leader(false);
        return Err(RunError::LostLeadership);
    }
    tracing::info!("capi-lb controller stopped");
    Ok(())
}

/// Refuse to start without the LoadBalancer CRD.
/// How the workload task resolves a hostname-only load balancer (`--dns-resolver`, else
/// /etc/resolv.conf) and checks what it resolves to: the address policy of every published
/// address (`--address-deny`, `--address-allow`, the Namespaces' allow-lists, ClusterIPs). A
/// resolver that cannot be made is reported by every lookup (WorkloadHostnameUnresolved).
fn workload_hostnames(
    options: &RunOptions,
    facts: Arc<crate::policy::PolicyFacts>,
) -> crate::workload::hostnames::Hostnames {
    use crate::workload::resolver::{Dns, broken};
    let resolve = match Dns::new(options.dns_resolver) {
        Ok(dns) => {
            tracing::info!(resolver = ?dns, "hostname-only load balancers are resolved here");
            dns.into_resolve()
        }
        Err(e) => {
            tracing::warn!(error = %e, "no DNS resolver: hostname-only load balancers are not resolved");
            broken(e)
        }
    };
    let policy = options.address_policy();
    let refuse: crate::workload::hostnames::Refuse = Arc::new(
        move |namespace: &str, provider: &str, ips: &[std::net::IpAddr]| {
            let addresses: Vec<LoadBalancerAddress> = ips
                .iter()
                .map(|ip| LoadBalancerAddress::ip(ip.to_string()))
                .collect();
            facts
                .refused_addresses(&policy, &addresses, namespace, provider)
                .iter()
                .map(ToString::to_string)
                .collect()
        },
    );
    crate::workload::hostnames::Hostnames { resolve, refuse }
}

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

/// Serve `routes` on `address` until `stop`: over TLS with `/metrics` behind the authorizer when
/// `tls` is given.
async fn serve_telemetry(
    address: SocketAddr,
    routes: telemetry::Routes,
    tls: Option<(Arc<rustls::ServerConfig>, telemetry::secure::Authorizer)>,
    metrics: &Arc<Metrics>,
    health: &Arc<Health>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| RunError::Server(address, e))?;
    let (metrics, health) = (metrics.clone(), health.clone());
    let served = match tls {
        Some((config, authorizer)) => {
            let listener = telemetry::secure::TlsListener::new(listener, config)
                .map_err(|e| RunError::Server(address, e))?;
            let router = telemetry::routes(routes, Some(authorizer), metrics, health);
            tokio::spawn(telemetry::serve_on(listener, router, stop))
        }
        None => {
            let router = telemetry::routes(routes, None, metrics, health);
            tokio::spawn(telemetry::serve_on(listener, router, stop))
        }
    };
    tokio::spawn(async move {
        if let Ok(Err(e)) = served.await {
            tracing::error!(error = %e, "metrics and health server failed");
        }
    });
    Ok(())
}

/// What the Service controller's reconciles share.
struct ServiceContext {
    ctx: Arc<Context>,
    reported: Reported,
    fair: Arc<Fairness>,
}

/// The Service controller (`-ext` endpoints and DNS names of Services of type LoadBalancer, the
/// binding of Services of capi-lb's class), until `shutdown`. Watch-driven: no per-Service polling
/// beyond the resync.
async fn services(
    client: &kube::Client,
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
    let context = Arc::new(ServiceContext {
        ctx,
        reported: Reported::default(),
        fair: Fairness::new(options.concurrency),
    });
    let controller =
        service_controller(client, options.namespace.as_deref(), &context.ctx.caches).await;
    let latest = controller.store();
    controller
        // Unbounded here: `Fairness` gives out the `--concurrency` work slots.
        .with_config(ControllerConfig::default().concurrency(0))
        .graceful_shutdown_on(shutdown)
        .run(
            move |svc: Arc<Service>, c: Arc<ServiceContext>| {
                let latest = latest.clone();
                async move {
                    let slot = c
                        .fair
                        .enter(&svc.namespace().unwrap_or_default())
                        .await
                        .work()
                        .await;
                    let Some(svc) = now(&latest, &svc) else {
                        return Ok(Action::await_change());
                    };
                    let reference = kube::Resource::object_ref(svc.as_ref(), &());
                    let reconcile = async {
                        let timer = c.ctx.metrics.reconcile("external-endpoint");
                        let outcome = reconcile_service(svc, c.ctx.clone(), &c.reported).await?;
                        timer.succeeded();
                        Ok::<_, Error>(action(outcome, c.ctx.config.resync))
                    };
                    client::within_deadline(&c.ctx, reference, WAITING.scope(slot, reconcile)).await
                }
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

/// Reconcile a LoadBalancer once it holds one of its namespace's places and a work slot.
async fn reconcile_action(
    lb: Arc<Watched>,
    ctx: Arc<Context>,
    fair: Arc<Fairness>,
    latest: Store<Watched>,
) -> Result<Action, Error> {
    let slot = fair
        .enter(&lb.namespace().unwrap_or_default())
        .await
        .work()
        .await;
    let Some(lb) = now(&latest, &lb) else {
        return Ok(Action::await_change());
    };
    let reference = kube::Resource::object_ref(lb.as_ref(), &());
    let reconcile = async {
        let timer = ctx.metrics.reconcile("loadbalancer");
        let outcome = reconcile_watched(lb, ctx.clone()).await?;
        timer.succeeded();
        Ok(action(outcome, ctx.config.resync))
    };
    client::within_deadline(&ctx, reference, WAITING.scope(slot, reconcile)).await
}

/// The object as the cache holds it now: it may have changed while its reconcile waited for a work
/// slot. `None` when it is gone (deleted after its finalizers went: nothing to do).
fn now<K>(latest: &Store<K>, object: &Arc<K>) -> Option<Arc<K>>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    latest.get(&ObjectRef::from_obj(object.as_ref()))
}

/// The probes of `spec.reachability` in the metrics.
struct ProbeMetrics(Arc<Metrics>);

impl ProbeObserver for ProbeMetrics {
    fn probed(&self, namespace: &str, name: &str, finding: &Finding) {
        self.0
            .probed(namespace, name, finding.reachable, finding.reason.name);
    }

    fn forgotten(&self, namespace: &str, name: &str) {
        self.0.forget_reachable(namespace, name);
    }
}

/// The scheduler's action for a reconcile's outcome: the requeue it asks for, else its drift check
/// or the periodic resync, whichever comes first, unless only a change of the object can help.
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
        Outcome { look_after, .. } => {
            Action::requeue(look_after.map_or(resync, |look| look.min(resync)))
        }
    }
}

/// Whether a result of the LoadBalancer controller's stream is worth a warning. Not a reconcile
/// that failed (`error_policy` said so, with the LoadBalancer and its retry), nor a trigger for a
/// LoadBalancer this controller does not hold: one deleted meanwhile, or one outside its
/// `--namespace` or `--watch-filter` whose Service or infrastructure object another replica
/// changed (every replica watches those), which is normal and came with every such change.
fn worth_a_warning<Q>(error: &kube::runtime::controller::Error<Error, Q>) -> bool {
    use kube::runtime::controller::Error as E;
    !matches!(error, E::ObjectNotFound(_) | E::ReconcilerFailed(..))
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
    fn a_trigger_for_a_load_balancer_not_held_and_a_failed_reconcile_are_no_second_warning() {
        use kube::runtime::controller::Error as E;
        let lb = || Box::new(ObjectRef::<LoadBalancer>::new("lb").within("ns").erase());
        assert!(!worth_a_warning::<std::io::Error>(&E::ObjectNotFound(lb())));
        assert!(!worth_a_warning::<std::io::Error>(&E::ReconcilerFailed(
            Error::MissingField("lb".into(), "spec"),
            lb()
        )));
        assert!(worth_a_warning(&E::<Error, _>::QueueError(
            std::io::Error::other("watch")
        )));
    }

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
        // A drift check comes before the resync, never after it, and after any requeue asked for.
        let look = Duration::from_secs(60);
        assert_eq!(
            action(Outcome::done().look(look), resync),
            Action::requeue(look)
        );
        assert_eq!(
            action(Outcome::done().look(Duration::from_secs(900)), resync),
            Action::requeue(resync)
        );
        assert_eq!(
            action(Outcome::requeue(soon).look(look), resync),
            Action::requeue(soon)
        );
    }

    #[test]
    fn probes_set_the_reachable_gauge_and_count_their_results_and_forget_drops_the_gauge() {
        let metrics = Arc::new(Metrics::new());
        let observer = ProbeMetrics(metrics.clone());
        let finding = Finding {
            reachable: false,
            reason: capi_lb_api::constants::reason::ENDPOINT_UNREACHABLE,
            message: String::new(),
        };
        observer.probed("a", "web", &finding);
        observer.probed("a", "web", &finding);
        let text = metrics.encode();
        assert!(text.contains("endpoint_reachable{namespace=\"a\",name=\"web\"} 0"));
        assert!(text.contains("endpoint_probes_total{result=\"EndpointUnreachable\"} 2"));
        observer.forgotten("a", "web");
        assert!(!metrics.encode().contains("endpoint_reachable{"));
    }
}
