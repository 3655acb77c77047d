//! Operating a running capi-lb: Prometheus metrics (`/metrics`), liveness (`/livez`) and readiness
//! (`/readyz`) on one small HTTP server, and a provider wrapper that measures every provider call.
//!
//! Metrics (all prefixed `capi_lb_`):
//! - `reconciles_total{controller,result}` and `reconcile_duration_seconds{controller}`: every
//!   reconcile of the `loadbalancer` and `external-endpoint` controllers, `result` = `success` or
//!   `error`;
//! - `reconciles_in_flight{controller}`: reconciles running now, working or waiting on a provider
//!   (a reconcile waiting on a provider gives its work slot back, so this can exceed the
//!   concurrency);
//! - `provider_calls_total{provider,operation,result}` and
//!   `provider_call_duration_seconds{provider,operation}`: every `ensure`, `converge_members` and
//!   `delete`, `result` = `done`, `pending`, `transient_error`, `timed_out` or `permanent_error`;
//! - `openstack_requests_total{service,operation,status}` and
//!   `openstack_request_duration_seconds{service,operation}`: every request of the Octavia provider
//!   to Keystone (`identity`) and Octavia (`load-balancer`), `status` = the HTTP status or `none`
//!   when no answer came; errors are the requests with a 4xx/5xx/`none` status;
//! - `managed_objects{kind}`: LoadBalancers (`loadbalancers`, `ready_loadbalancers`) in the cache;
//! - `leader`: 1 while this replica holds the leader lease (or runs without leader election);
//! - `kube_requests_total{verb,resource,code}`: every Kubernetes API request of the controller
//!   (`verb` = get, list, watch, create, update, patch, delete; `resource` = the plural with its
//!   subresource; `code` = the HTTP status class, `none` when no answer came), see
//!   [`Metrics::kube_layer`];
//! - `process_resident_memory_bytes`, `process_peak_resident_memory_bytes` and
//!   `process_cpu_seconds`: the process' memory and CPU time, read from `/proc` at each scrape;
//! - the fleet's: LoadBalancers by condition, targets by state, deletion hooks, drift repairs,
//!   time to Ready (see [`fleet`]).

pub mod fleet;
pub mod kube_requests;
pub mod listener;
mod probes;
pub mod process;
pub mod secure;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use capi_lb_providers::observe::{ApiCall, ApiObserver};
use capi_lb_providers::{
    DeleteOutcome, DeleteRequest, EnsureOutcome, EnsureRequest, MembersOutcome, MembersRequest,
    Progress, Provider, ProviderError,
};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

type Labels = Vec<(&'static str, String)>;

fn duration_histogram() -> Histogram {
    // 1 ms .. ~33 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// capi-lb's metrics.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<Labels, Counter>,
    reconcile_duration: Family<Labels, Histogram>,
    in_flight: Family<Labels, Gauge>,
    provider_calls: Family<Labels, Counter>,
    provider_duration: Family<Labels, Histogram>,
    managed: Family<Labels, Gauge>,
    reachable: Family<Labels, Gauge>,
    probes: Family<Labels, Counter>,
    leader: Gauge,
    openstack_requests: Family<Labels, Counter>,
    openstack_duration: Family<Labels, Histogram>,
    kube_requests: Family<Labels, Counter>,
    kube_reach: Arc<kube_requests::Reach>,
    rss: Gauge,
    peak_rss: Gauge,
    memory_limit: Gauge,
    cpu: Gauge<f64, AtomicU64>,
    panics: Family<Labels, Counter>,
    /// The fleet's metrics.
    pub fleet: fleet::Fleet,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every capi-lb metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("capi_lb");
        let reconciles = Family::<Labels, Counter>::default();
        let reconcile_duration =
            Family::<Labels, Histogram>::new_with_constructor(duration_histogram as fn() -> _);
        let in_flight = Family::<Labels, Gauge>::default();
        let provider_calls = Family::<Labels, Counter>::default();
        let provider_duration =
            Family::<Labels, Histogram>::new_with_constructor(duration_histogram as fn() -> _);
        let managed = Family::<Labels, Gauge>::default();
        let reachable = Family::<Labels, Gauge>::default();
        let probes = Family::<Labels, Counter>::default();
        registry.register(
            "endpoint_reachable",
            "1 when the last probe of a LoadBalancer's endpoint (spec.reachability) found every address and port answering, else 0, by namespace and name",
            reachable.clone(),
        );
        registry.register(
            "endpoint_probes",
            "Probes of LoadBalancer endpoints (spec.reachability) by result (the Reachable condition's reason)",
            probes.clone(),
        );
        let leader = Gauge::default();
        let fleet = fleet::Fleet::register(&mut registry);
        let openstack_requests = Family::<Labels, Counter>::default();
        let openstack_duration =
            Family::<Labels, Histogram>::new_with_constructor(duration_histogram as fn() -> _);
        let kube_requests = Family::<Labels, Counter>::default();
        registry.register(
            "kube_requests",
            "Kubernetes API requests by verb, resource and HTTP status class (none: no answer)",
            kube_requests.clone(),
        );
        let (rss, peak_rss, cpu) = (Gauge::default(), Gauge::default(), Gauge::default());
        let memory_limit = Gauge::default();
        registry.register(
            "process_memory_limit_bytes",
            "Memory limit of the process' cgroup (the container's limit); 0 without one",
            memory_limit.clone(),
        );
        registry.register(
            "process_resident_memory_bytes",
            "Resident memory of the process",
            rss.clone(),
        );
        registry.register(
            "process_peak_resident_memory_bytes",
            "Peak resident memory of the process since it started",
            peak_rss.clone(),
        );
        registry.register(
            "process_cpu_seconds",
            "User and system CPU time of the process",
            cpu.clone(),
        );
        registry.register(
            "openstack_requests",
            "OpenStack API requests of the Octavia provider by service, operation and HTTP status (none: no answer)",
            openstack_requests.clone(),
        );
        registry.register(
            "openstack_request_duration_seconds",
            "Duration of OpenStack API requests by service and operation",
            openstack_duration.clone(),
        );
        registry.register(
            "reconciles",
            "Reconciles by controller and result (success, error)",
            reconciles.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of reconciles by controller",
            reconcile_duration.clone(),
        );
        registry.register(
            "reconciles_in_flight",
            "Reconciles running now, by controller",
            in_flight.clone(),
        );
        registry.register(
            "provider_calls",
            "Provider calls by provider, operation and result (done, pending, transient_error, timed_out, permanent_error)",
            provider_calls.clone(),
        );
        registry.register(
            "provider_call_duration_seconds",
            "Duration of provider calls by provider and operation",
            provider_duration.clone(),
        );
        registry.register(
            "managed_objects",
            "Objects capi-lb manages, by kind (loadbalancers, ready_loadbalancers)",
            managed.clone(),
        );
        let panics = Family::<Labels, Counter>::default();
        registry.register(
            "panics",
            "Panics caught at a boundary (a bug: the object's pass or the job failed alone and is retried), by task (loadbalancer, external-endpoint, probe, workload)",
            panics.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica is the leader (or runs without leader election)",
            leader.clone(),
        );
        Self {
            registry,
            reconciles,
            reconcile_duration,
            in_flight,
            provider_calls,
            provider_duration,
            managed,
            reachable,
            probes,
            leader,
            openstack_requests,
            openstack_duration,
            kube_requests,
            kube_reach: Arc::default(),
            rss,
            peak_rss,
            memory_limit,
            cpu,
            panics,
            fleet,
        }
    }

    /// A panic was caught at the boundary of `task`'s work.
    pub fn panicked(&self, task: &'static str) {
        self.panics
            .get_or_create(&vec![("task", task.to_string())])
            .inc();
    }

    /// A layer for the Kubernetes client that counts its requests into `kube_requests_total`.
    pub fn kube_layer(&self) -> kube_requests::CountRequests {
        kube_requests::CountRequests {
            requests: self.kube_requests.clone(),
            reach: self.kube_reach.clone(),
        }
    }

    /// How long the Kubernetes API has not answered the controller's requests, if it has not.
    pub fn kube_unanswered_for(&self) -> Option<Duration> {
        self.kube_reach.unanswered_for(Instant::now())
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        if let Some(p) = process::own() {
            self.rss.set(i64::try_from(p.rss_bytes).unwrap_or(i64::MAX));
            self.peak_rss
                .set(i64::try_from(p.peak_rss_bytes).unwrap_or(i64::MAX));
            self.cpu.set(p.cpu_seconds);
        }
        self.memory_limit
            .set(process::memory_limit().map_or(0, |l| i64::try_from(l).unwrap_or(i64::MAX)));
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }

    /// A reconcile of `controller` starts; the returned guard records its duration and result.
    pub fn reconcile(&self, controller: &'static str) -> ReconcileTimer<'_> {
        self.in_flight
            .get_or_create(&vec![("controller", controller.to_string())])
            .inc();
        ReconcileTimer {
            metrics: self,
            controller,
            started: Instant::now(),
            success: false,
        }
    }

    /// Set the number of managed objects of `kind`.
    pub fn set_managed(&self, kind: &'static str, count: usize) {
        self.managed
            .get_or_create(&vec![("kind", kind.to_string())])
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Record whether this replica leads.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    fn provider_call(
        &self,
        provider: &str,
        operation: &'static str,
        result: &'static str,
        started: Instant,
    ) {
        self.provider_calls
            .get_or_create(&vec![
                ("provider", provider.to_string()),
                ("operation", operation.to_string()),
                ("result", result.to_string()),
            ])
            .inc();
        self.provider_duration
            .get_or_create(&vec![
                ("provider", provider.to_string()),
                ("operation", operation.to_string()),
            ])
            .observe(started.elapsed().as_secs_f64());
    }
}

impl ApiObserver for Metrics {
    fn observe(&self, call: &ApiCall<'_>) {
        let status = call
            .status
            .map_or_else(|| "none".to_string(), |s| s.to_string());
        self.openstack_requests
            .get_or_create(&vec![
                ("service", call.service.to_string()),
                ("operation", call.operation.to_string()),
                ("status", status),
            ])
            .inc();
        self.openstack_duration
            .get_or_create(&vec![
                ("service", call.service.to_string()),
                ("operation", call.operation.to_string()),
            ])
            .observe(call.duration.as_secs_f64());
    }
}

/// Records one reconcile when dropped: an error unless [`ReconcileTimer::succeeded`] was called.
pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    controller: &'static str,
    started: Instant,
    success: bool,
}

impl std::fmt::Debug for ReconcileTimer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReconcileTimer")
            .field("controller", &self.controller)
            .finish_non_exhaustive()
    }
}

impl ReconcileTimer<'_> {
    /// The reconcile succeeded.
    pub fn succeeded(mut self) {
        self.success = true;
    }
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        let controller = vec![("controller", self.controller.to_string())];
        self.metrics.in_flight.get_or_create(&controller).dec();
        self.metrics
            .reconcile_duration
            .get_or_create(&controller)
            .observe(self.started.elapsed().as_secs_f64());
        let result = if self.success { "success" } else { "error" };
        self.metrics
            .reconciles
            .get_or_create(&vec![
                ("controller", self.controller.to_string()),
                ("result", result.to_string()),
            ])
            .inc();
    }
}

/// A provider whose every call is counted and timed.
pub struct MeteredProvider {
    /// The provider's name (its catalog entry's), the metrics' `provider` label.
    name: &'static str,
    inner: Arc<dyn Provider>,
    metrics: Arc<Metrics>,
}

impl MeteredProvider {
    /// Measure the calls of `inner`, the provider named `name`, into `metrics`.
    pub fn new(name: &'static str, inner: Arc<dyn Provider>, metrics: Arc<Metrics>) -> Self {
        metrics.fleet.provider_enabled(name);
        Self {
            name,
            inner,
            metrics,
        }
    }
}

fn result_of<T>(
    result: &Result<T, ProviderError>,
    progress: impl Fn(&T) -> &Progress,
) -> &'static str {
    match result {
        Ok(out) if progress(out).is_done() => "done",
        Ok(_) => "pending",
        Err(ProviderError::Transient { .. }) => "transient_error",
        Err(ProviderError::TimedOut { .. }) => "timed_out",
        Err(ProviderError::Permanent { .. }) => "permanent_error",
    }
}

/// One provider call being measured: recorded with its result when it ends, or as `timed_out`
/// when it is dropped before (the only thing that abandons a provider call is its deadline,
/// `capi_lb_providers::Enabled`, or the process stopping).
struct Call<'a> {
    provider: &'a MeteredProvider,
    operation: &'static str,
    started: Instant,
    result: Option<&'static str>,
}

impl<'a> Call<'a> {
    fn start(provider: &'a MeteredProvider, operation: &'static str) -> Self {
        Self {
            provider,
            operation,
            started: Instant::now(),
            result: None,
        }
    }

    /// The call ended with `result`: recorded, and handed back.
    fn end<T>(
        mut self,
        result: Result<T, ProviderError>,
        progress: impl Fn(&T) -> &Progress,
    ) -> Result<T, ProviderError> {
        self.result = Some(result_of(&result, progress));
        result
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        self.provider.metrics.provider_call(
            self.provider.name,
            self.operation,
            self.result.unwrap_or("timed_out"),
            self.started,
        );
    }
}

#[async_trait]
impl Provider for MeteredProvider {
    async fn ensure(&self, request: EnsureRequest<'_>) -> Result<EnsureOutcome, ProviderError> {
        let call = Call::start(self, "ensure");
        call.end(self.inner.ensure(request).await, |o| &o.progress)
    }

    async fn converge_members(
        &self,
        request: MembersRequest<'_>,
    ) -> Result<MembersOutcome, ProviderError> {
        let call = Call::start(self, "converge_members");
        call.end(self.inner.converge_members(request).await, |o| &o.progress)
    }

    async fn delete(&self, request: DeleteRequest<'_>) -> Result<DeleteOutcome, ProviderError> {
        let call = Call::start(self, "delete");
        call.end(self.inner.delete(request).await, |o| &o.progress)
    }
}

/// Liveness and readiness flags.
#[derive(Debug, Default)]
pub struct Health {
    ready: AtomicBool,
    broken: AtomicBool,
}

impl Health {
    /// Mark the process ready (caches synced, or standing by for leadership).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    /// Mark the process as no longer working (it is about to exit).
    pub fn set_broken(&self) {
        self.broken.store(true, Ordering::SeqCst);
    }

    fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst) && !self.broken.load(Ordering::SeqCst)
    }

    fn is_live(&self) -> bool {
        !self.broken.load(Ordering::SeqCst)
    }
}

#[derive(Clone)]
struct ServerState {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

async fn metrics(State(state): State<ServerState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}

async fn livez(State(state): State<ServerState>) -> impl IntoResponse {
    if state.health.is_live() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down")
    }
}

/// How long the Kubernetes API may go unanswered before `/readyz` fails (watches re-connect with
/// back-off: a blip of a few seconds is not an outage).
pub const UNREACHABLE_AFTER: Duration = Duration::from_secs(10);

async fn readyz(State(state): State<ServerState>) -> impl IntoResponse {
    if !state.health.is_ready() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "caches not synced yet".to_string(),
        );
    }
    match state.metrics.kube_unanswered_for() {
        Some(d) if d >= UNREACHABLE_AFTER => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the Kubernetes API has not answered for {} s", d.as_secs()),
        ),
        _ => (StatusCode::OK, "ok".to_string()),
    }
}

/// Which routes a listener serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routes {
    /// `/metrics`, `/livez`, `/readyz` (`--metrics-bind-address`).
    All,
    /// `/livez`, `/readyz` (`--health-probe-bind-address`).
    Health,
}

/// The HTTP routes: `/metrics`, `/livez`, `/readyz`.
pub fn router(metrics: Arc<Metrics>, health: Arc<Health>) -> Router {
    routes(Routes::All, None, metrics, health)
}

/// `which` routes; `/metrics` behind `authorizer` when there is one.
pub fn routes(
    which: Routes,
    authorizer: Option<secure::Authorizer>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) -> Router {
    let router = Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz));
    let router = match (which, authorizer) {
        (Routes::All, None) => router.route("/metrics", get(self::metrics)),
        (Routes::All, Some(authorizer)) => router.route(
            "/metrics",
            get(self::metrics).route_layer(axum::middleware::from_fn_with_state(
                authorizer,
                secure::require_reader,
            )),
        ),
        (Routes::Health, _) => router,
    };
    router.with_state(ServerState { metrics, health })
}

/// Serve `router` on `listener` until `shutdown` resolves.
pub async fn serve_on<L>(
    listener: L,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: axum::serve::Listener<Addr = std::net::SocketAddr>,
{
    if let Ok(address) = listener.local_addr() {
        tracing::info!(%address, "serving telemetry");
    }
    axum::serve(listener::Limited::new(listener), router)
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use http::Request;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    async fn get(router: Router, path: &str) -> (StatusCode, String) {
        let response = router
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn readiness_follows_the_flags_and_liveness_fails_only_when_broken() {
        let metrics = Arc::new(Metrics::new());
        let health = Arc::new(Health::default());
        let r = || router(metrics.clone(), health.clone());
        assert_eq!(get(r(), "/livez").await.0, StatusCode::OK);
        assert_eq!(get(r(), "/readyz").await.0, StatusCode::SERVICE_UNAVAILABLE);
        health.set_ready(true);
        assert_eq!(get(r(), "/readyz").await.0, StatusCode::OK);
        health.set_broken();
        assert_eq!(get(r(), "/livez").await.0, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(get(r(), "/readyz").await.0, StatusCode::SERVICE_UNAVAILABLE);
    }

    #[tokio::test]
    async fn the_health_listener_serves_no_metrics() {
        let metrics = Arc::new(Metrics::new());
        let health = Arc::new(Health::default());
        health.set_ready(true);
        let r = |which| routes(which, None, metrics.clone(), health.clone());
        assert_eq!(get(r(Routes::Health), "/readyz").await.0, StatusCode::OK);
        assert_eq!(get(r(Routes::Health), "/livez").await.0, StatusCode::OK);
        assert_eq!(
            get(r(Routes::Health), "/metrics").await.0,
            StatusCode::NOT_FOUND
        );
        assert_eq!(get(r(Routes::All), "/metrics").await.0, StatusCode::OK);
    }

    #[test]
    fn openstack_requests_are_counted_by_operation_and_status() {
        let metrics = Metrics::new();
        for status in [Some(202), Some(409), Some(409), None] {
            metrics.observe(&ApiCall {
                service: "load-balancer",
                operation: "member.batch-update",
                status,
                duration: std::time::Duration::from_millis(30),
            });
        }
        let text = metrics.encode();
        for line in [
            "capi_lb_openstack_requests_total{service=\"load-balancer\",operation=\"member.batch-update\",status=\"202\"} 1",
            "capi_lb_openstack_requests_total{service=\"load-balancer\",operation=\"member.batch-update\",status=\"409\"} 2",
            "capi_lb_openstack_requests_total{service=\"load-balancer\",operation=\"member.batch-update\",status=\"none\"} 1",
            "capi_lb_openstack_request_duration_seconds_count{service=\"load-balancer\",operation=\"member.batch-update\"} 4",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }

    #[tokio::test]
    async fn reconciles_and_provider_calls_are_counted() {
        let metrics = Arc::new(Metrics::new());
        metrics.reconcile("loadbalancer").succeeded();
        drop(metrics.reconcile("loadbalancer"));
        metrics.set_managed("loadbalancers", 3);
        metrics.set_leader(true);
        let cloud = capi_lb_providers::inmemory::InMemoryCloud::new(Arc::new(
            capi_lb_providers::clock::SystemClock,
        ));
        let entry = &capi_lb_providers::inmemory::ENTRY;
        let provider = MeteredProvider::new(
            entry.name,
            Arc::new(capi_lb_providers::inmemory::InMemoryProvider::new(cloud)),
            metrics.clone(),
        );
        let identity = capi_lb_providers::LoadBalancerIdentity {
            namespace: "default".into(),
            name: "cp".into(),
            uid: "u".into(),
            cluster_name: None,
        };
        // Not an InMemoryLoadBalancer: a permanent error, counted as such.
        let infra = kube::core::DynamicObject::new("cp", &(entry.infrastructure)());
        let _ = provider
            .ensure(EnsureRequest {
                identity: &identity,
                loadbalancer: &capi_lb_api::LoadBalancer::new(
                    "cp",
                    capi_lb_api::LoadBalancerSpec::with_infrastructure(
                        serde_json::from_value(serde_json::json!({
                            "apiGroup": "infrastructure.cluster.x-k8s.io",
                            "kind": "InMemoryLoadBalancer", "name": "cp"}))
                        .unwrap(),
                    ),
                ),
                infra: &infra,
                listeners: &[],
                source_ranges: &[],
                members: &[],
            })
            .await;
        let (status, text) = get(router(metrics, Arc::new(Health::default())), "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        for line in [
            "capi_lb_reconciles_total{controller=\"loadbalancer\",result=\"success\"} 1",
            "capi_lb_reconciles_total{controller=\"loadbalancer\",result=\"error\"} 1",
            "capi_lb_reconciles_in_flight{controller=\"loadbalancer\"} 0",
            "capi_lb_managed_objects{kind=\"loadbalancers\"} 3",
            "capi_lb_leader 1",
            "capi_lb_reconcile_duration_seconds_count{controller=\"loadbalancer\"} 2",
            "capi_lb_provider_call_duration_seconds_count{provider=\"inmemory\",operation=\"ensure\"} 1",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        assert!(
            text.contains("capi_lb_provider_calls_total{provider=\"inmemory\",operation=\"ensure\",result=\"permanent_error\"} 1")
                || text.contains("capi_lb_provider_calls_total{provider=\"inmemory\",operation=\"ensure\",result=\"transient_error\"} 1"),
            "{text}"
        );
    }
}
