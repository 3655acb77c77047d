//! A self-contained world for `capi-lb simulate` and the tests: the in-memory Kubernetes API, the
//! in-memory cloud, a manual clock and a controller context wired to them.
//!
//! [`World::run_until_stable`] stands in for the watches of a real deployment: it reconciles every
//! LoadBalancer, again whenever a pass wrote anything (what a watch event would trigger), and when
//! nothing is left to do now, moves the clock to the earliest requested requeue. It stops when a pass
//! writes nothing and no LoadBalancer asked to be reconciled again before the resync period.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use capi_lb_api::LoadBalancer;
use capi_lb_api::externaldns::DNSEndpoint;
use capi_lb_providers::catalog;
use capi_lb_providers::clock::{ManualClock, SharedClock, until};
use capi_lb_providers::entry::Dependencies;
use capi_lb_providers::inmemory::{self, InMemoryCloud, InMemoryProvider};
use capi_lb_providers::observe::{ApiCall, ApiObserver};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::context::Outcome;
use crate::context::{Config, Context};
use crate::error::{Error, Result, kube_err};
use crate::events::EventSink;
use crate::kinds::KindResolver;
use crate::loadbalancer::reconcile;
use crate::service::{Reported, reconcile_service};
use crate::sim::inmemory_api::{InMemoryApi, InMemoryApiBuilder, InMemoryApiError};
use crate::sim::stand_in::{STOOD_IN_FOR, StandIn};

/// The instant every world starts at, so simulate output is reproducible.
pub const EPOCH: &str = "2026-01-01T00:00:00Z";

/// Errors of a world.
#[derive(Debug, thiserror::Error)]
pub enum WorldError {
    /// Building the API failed.
    #[error(transparent)]
    Api(#[from] InMemoryApiError),
    /// A reconcile failed in a way the controller would retry; the simulation stops instead.
    #[error(transparent)]
    Reconcile(#[from] Box<Error>),
    /// Reconciliation kept making changes.
    #[error("the controllers did not settle after {0} passes; last writes: {1}")]
    DidNotSettle(usize, String),
}

/// What [`World::run_until_stable`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunReport {
    /// Reconcile passes made.
    pub passes: usize,
    /// Reconciles run.
    pub reconciles: usize,
    /// Virtual time that passed.
    pub elapsed: Duration,
}

/// The in-memory API, cloud, clock and controller context.
#[derive(Clone)]
pub struct World {
    /// The in-memory Kubernetes API.
    pub api: InMemoryApi,
    /// The clock (starts at [`EPOCH`]).
    pub clock: Arc<ManualClock>,
    /// The in-memory cloud behind the in-memory provider.
    pub cloud: InMemoryCloud,
    /// The controller context.
    pub ctx: Arc<Context>,
    /// When each LoadBalancer (`namespace/name`) asked to be reconciled again.
    due: Arc<std::sync::Mutex<BTreeMap<String, Timestamp>>>,
    /// Problems the `-ext` publisher already reported.
    reported: Arc<Reported>,
    /// Every OpenStack request the Octavia provider made (it survives restarts of the world).
    pub openstack: Arc<OpenStackCalls>,
    /// Whether the in-memory provider stands in for the other providers ([`World::standing_in`]).
    stand_in: bool,
    /// Whether ExternalDNS is played ([`World::playing_external_dns`]).
    external_dns: bool,
    /// How many `DNSEndpoint` generations the played ExternalDNS took.
    dns_taken: Arc<std::sync::atomic::AtomicUsize>,
}

/// Records the Octavia provider's OpenStack requests (operation and HTTP status).
#[derive(Debug, Default)]
pub struct OpenStackCalls {
    calls: std::sync::Mutex<Vec<(String, Option<u16>)>>,
}

impl OpenStackCalls {
    /// The requests so far: operation and status (`None`: no answer).
    pub fn calls(&self) -> Vec<(String, Option<u16>)> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Forget the requests so far.
    pub fn clear(&self) {
        if let Ok(mut c) = self.calls.lock() {
            c.clear();
        }
    }
}

impl ApiObserver for OpenStackCalls {
    fn observe(&self, call: &ApiCall<'_>) {
        if let Ok(mut c) = self.calls.lock() {
            c.push((call.operation.to_string(), call.status));
        }
    }
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("api", &self.api)
            .finish_non_exhaustive()
    }
}

fn start() -> Timestamp {
    EPOCH.parse().unwrap_or(Timestamp::UNIX_EPOCH)
}

impl World {
    /// A world holding `objects` (full objects with `apiVersion` and `kind`).
    pub async fn new(objects: Vec<Value>) -> Result<Self, WorldError> {
        Self::with_builder(objects, |b| b).await
    }

    /// A world holding `objects`, with extra set-up of the API builder (e.g. more kinds).
    pub async fn with_builder(
        objects: Vec<Value>,
        extra: impl FnOnce(InMemoryApiBuilder) -> InMemoryApiBuilder,
    ) -> Result<Self, WorldError> {
        let clock = Arc::new(ManualClock::new(start()));
        let shared: SharedClock = clock.clone();
        let api = extra(InMemoryApiBuilder::new(shared.clone()).with_objects(objects))
            .build()
            .await?;
        let cloud = InMemoryCloud::new(shared);
        let openstack = Arc::new(OpenStackCalls::default());
        let ctx = Arc::new(Self::context(&api, &cloud, &clock, &openstack, true, false));
        Ok(Self {
            api,
            clock,
            cloud,
            ctx,
            due: Arc::default(),
            reported: Arc::default(),
            openstack,
            stand_in: false,
            external_dns: false,
            dns_taken: Arc::default(),
        })
    }

    /// The same world with a controller whose in-memory provider stands in for every other provider
    /// (kube-dc, Octavia, Service): their infrastructure objects are realised in the in-memory cloud
    /// (see [`crate::sim::stand_in`]). What `capi-lb simulate` runs.
    pub fn standing_in(&self) -> Self {
        Self {
            ctx: Arc::new(Self::context(
                &self.api,
                &self.cloud,
                &self.clock,
                &self.openstack,
                true,
                true,
            )),
            due: Arc::default(),
            reported: Arc::default(),
            stand_in: true,
            ..self.clone()
        }
    }

    /// This world with ExternalDNS played: after every round of reconciles, each `DNSEndpoint`
    /// is taken as it is (its `status.observedGeneration` set to its generation), as ExternalDNS
    /// does on its next sync. Its API must serve the `DNSEndpoint` kind.
    pub fn playing_external_dns(self) -> Self {
        Self {
            external_dns: true,
            ..self
        }
    }

    /// ExternalDNS's sync, played once: every `DNSEndpoint` not observed yet is.
    pub async fn take_dns_endpoints(&self) -> Result<(), WorldError> {
        let all: Api<DNSEndpoint> = Api::all(self.client());
        let listed = all
            .list(&ListParams::default())
            .await
            .map_err(|e| Box::new(kube_err("list", "DNSEndpoints")(e)))?;
        for endpoint in listed.items {
            let generation = endpoint.metadata.generation;
            let observed = endpoint.status.as_ref().and_then(|s| s.observed_generation);
            if generation.is_none() || observed >= generation {
                continue;
            }
            let namespace = endpoint.namespace().unwrap_or_default();
            Api::<DNSEndpoint>::namespaced(self.client(), &namespace)
                .patch_status(
                    &endpoint.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"observedGeneration": generation}})),
                )
                .await
                .map_err(|e| Box::new(kube_err("write the status of", "a DNSEndpoint")(e)))?;
            self.dns_taken
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }

    /// How many `DNSEndpoint` generations the played ExternalDNS took so far.
    pub fn dns_endpoints_taken(&self) -> usize {
        self.dns_taken.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn context(
        api: &InMemoryApi,
        cloud: &InMemoryCloud,
        clock: &Arc<ManualClock>,
        openstack: &Arc<OpenStackCalls>,
        timeline: bool,
        stand_in: bool,
    ) -> Context {
        Self::context_with(
            api,
            cloud,
            clock,
            openstack,
            timeline,
            stand_in,
            Config::default(),
        )
    }

    fn context_with(
        api: &InMemoryApi,
        cloud: &InMemoryCloud,
        clock: &Arc<ManualClock>,
        openstack: &Arc<OpenStackCalls>,
        timeline: bool,
        stand_in: bool,
        config: Config,
    ) -> Context {
        let shared: SharedClock = clock.clone();
        let mut providers = catalog::all(&Dependencies {
            observer: Some(openstack.clone()),
            credentials: config.credentials.clone(),
            ..Dependencies::new(api.client.clone(), shared.clone())
        });
        // The in-memory provider over the world's cloud, which outlives a controller restart.
        providers.replace(
            &inmemory::ENTRY,
            Arc::new(InMemoryProvider::new(cloud.clone())),
        );
        if stand_in {
            for (entry, _) in STOOD_IN_FOR {
                providers.replace(
                    entry,
                    Arc::new(StandIn::new(
                        (entry.infrastructure)().kind,
                        InMemoryProvider::new(cloud.clone()),
                    )),
                );
            }
        }
        let mut events = EventSink::new(api.client.clone(), None, shared.clone());
        if timeline {
            events = events.with_timeline();
        }
        Context::new(
            api.client.clone(),
            providers,
            KindResolver::builtin(),
            config,
            shared,
            events,
        )
    }

    /// The same API, cloud and clock with a freshly started controller (new context: no back-off
    /// memory, no caches, a new timeline) — what a controller restart looks like.
    pub fn restart(&self) -> Self {
        Self {
            ctx: Arc::new(Self::context(
                &self.api,
                &self.cloud,
                &self.clock,
                &self.openstack,
                true,
                self.stand_in,
            )),
            due: Arc::default(),
            reported: Arc::default(),
            ..self.clone()
        }
    }

    /// The same world with a controller started with another configuration (a restart with other
    /// flags).
    pub fn reconfigured(&self, change: impl FnOnce(&mut Config)) -> Self {
        let mut config = self.ctx.config.clone();
        change(&mut config);
        Self {
            ctx: Arc::new(Self::context_with(
                &self.api,
                &self.cloud,
                &self.clock,
                &self.openstack,
                true,
                self.stand_in,
                config,
            )),
            due: Arc::default(),
            reported: Arc::default(),
            ..self.clone()
        }
    }

    /// The same world with each provider wrapped by `wrap` (a test's provider that fails in a way
    /// of its choosing around the real one).
    pub fn wrapping_providers(
        &self,
        wrap: impl Fn(
            &'static capi_lb_providers::entry::Entry,
            Arc<dyn capi_lb_providers::Provider>,
        ) -> Arc<dyn capi_lb_providers::Provider>,
    ) -> Self {
        let mut ctx = Self::context_with(
            &self.api,
            &self.cloud,
            &self.clock,
            &self.openstack,
            true,
            self.stand_in,
            self.ctx.config.clone(),
        );
        ctx.providers = ctx.providers.wrapped(wrap);
        Self {
            ctx: Arc::new(ctx),
            due: Arc::default(),
            reported: Arc::default(),
            ..self.clone()
        }
    }

    /// Reconcile one Service once with the `-ext` publisher.
    pub async fn reconcile_service(&self, namespace: &str, name: &str) -> Result<Outcome> {
        let api: Api<Service> = Api::namespaced(self.client(), namespace);
        let service = api
            .get(name)
            .await
            .map_err(kube_err("get", format!("Service {namespace}/{name}")))?;
        self.api.stats.set_recording(true);
        let outcome = reconcile_service(Arc::new(service), self.ctx.clone(), &self.reported).await;
        self.api.stats.set_recording(false);
        outcome
    }

    /// Stand-in for the `-ext` publisher's watches: reconcile every Service (in a stable order) until
    /// a pass writes nothing. Returns the number of passes.
    pub async fn settle_services(&self, max_passes: usize) -> Result<usize, WorldError> {
        let all: Api<Service> = Api::all(self.client());
        for pass in 1..=max_passes {
            let writes_before = self.api.stats.writes_excluding_events();
            let mut services = all
                .list(&ListParams::default())
                .await
                .map_err(|e| Box::new(kube_err("list", "Services")(e)))?
                .items;
            services.sort_by_key(|s| (s.namespace(), s.name_any()));
            for service in services {
                self.api.stats.set_recording(true);
                let outcome =
                    reconcile_service(Arc::new(service), self.ctx.clone(), &self.reported).await;
                self.api.stats.set_recording(false);
                outcome.map_err(Box::new)?;
            }
            if self.api.stats.writes_excluding_events() == writes_before {
                return Ok(pass);
            }
        }
        let log = self.api.stats.log();
        let tail: Vec<String> = log.iter().rev().take(5).cloned().collect();
        Err(WorldError::DidNotSettle(max_passes, tail.join(", ")))
    }

    /// The kube client.
    pub fn client(&self) -> kube::Client {
        self.api.client.clone()
    }

    /// Reconcile one LoadBalancer once.
    pub async fn reconcile(&self, namespace: &str, name: &str) -> Result<Outcome> {
        let api: Api<LoadBalancer> = Api::namespaced(self.client(), namespace);
        let lb = api
            .get(name)
            .await
            .map_err(kube_err("get", format!("LoadBalancer {namespace}/{name}")))?;
        self.api.stats.set_recording(true);
        let outcome = reconcile(Arc::new(lb), self.ctx.clone()).await;
        self.api.stats.set_recording(false);
        outcome
    }

    fn now(&self) -> Timestamp {
        use capi_lb_providers::clock::Clock;
        self.clock.now()
    }

    /// Reconcile until nothing changes (see the module documentation). `max_passes` bounds the work.
    pub async fn run_until_stable(&self, max_passes: usize) -> Result<RunReport, WorldError> {
        let started = self.now();
        let mut report = RunReport::default();
        let all: Api<LoadBalancer> = Api::all(self.client());
        let mut everything_due = true;
        loop {
            if report.passes >= max_passes {
                let log = self.api.stats.log();
                let tail: Vec<String> = log.iter().rev().take(5).cloned().collect();
                return Err(WorldError::DidNotSettle(report.passes, tail.join(", ")));
            }
            report.passes += 1;
            let mut lbs = all
                .list(&ListParams::default())
                .await
                .map_err(|e| Box::new(kube_err("list", "LoadBalancers")(e)))?
                .items;
            // The in-memory API lists in no particular order; reconcile in a stable one.
            lbs.sort_by_key(|lb| (lb.namespace(), lb.name_any()));
            let now = self.now();
            let keys: Vec<String> = lbs
                .iter()
                .map(|lb| format!("{}/{}", lb.namespace().unwrap_or_default(), lb.name_any()))
                .collect();
            {
                let mut due = self.lock_due();
                due.retain(|k, _| keys.contains(k));
            }
            let writes_before = self.api.stats.writes_excluding_events();
            for (lb, key) in lbs.into_iter().zip(keys) {
                let is_due =
                    everything_due || self.lock_due().get(&key).is_some_and(|at| *at <= now);
                if !is_due {
                    continue;
                }
                report.reconciles += 1;
                self.api.stats.set_recording(true);
                let outcome = reconcile(Arc::new(lb), self.ctx.clone()).await;
                self.api.stats.set_recording(false);
                let outcome = outcome.map_err(Box::new)?;
                let mut due = self.lock_due();
                match outcome.requeue_after {
                    Some(after) if after < self.ctx.config.resync => {
                        due.insert(key, capi_lb_providers::clock::after(now, after));
                    }
                    _ => {
                        due.remove(&key);
                    }
                }
            }
            if self.external_dns {
                self.take_dns_endpoints().await?;
            }
            if self.api.stats.writes_excluding_events() > writes_before {
                // Something changed: a watch would trigger every affected LoadBalancer.
                everything_due = true;
                continue;
            }
            everything_due = false;
            let next = self.lock_due().values().min().copied();
            match next {
                Some(at) => {
                    if at > now {
                        self.clock.advance(until(now, at));
                    }
                }
                None => break,
            }
        }
        report.elapsed = until(started, self.now());
        Ok(report)
    }

    fn lock_due(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Timestamp>> {
        self.due
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
