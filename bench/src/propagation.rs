//! `capi-lb-bench ext-propagation`: on a real cluster, how long an ingress IP change of a Service of
//! `type: LoadBalancer` takes to reach its `-ext` EndpointSlice, seen the way a consumer sees it:
//! through a watch.
//!
//! N Services (of a `loadBalancerClass` nobody implements, so only the benchmark writes their status)
//! get an ingress IP each; then `capi-lb run` starts as a child process in that namespace and
//! publishes them all ("initial publish": from its start to every `-ext` slice seen holding its
//! IP). Then, one at a time, a Service's status gets a new IP; the span is from just before that
//! write is sent to the moment the benchmark's own watch of the EndpointSlices delivers the `-ext`
//! slice holding the new IP. That includes the apiserver's write and watch fan-out both ways, the
//! controller's queue, its reconcile and its own write. The controller's metrics give the requests
//! per change.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::Notify;

use crate::converge::Counts;
use crate::external::{ip, percentile};
use crate::launch::{BenchError, Controller, Launch, api_err, client_of, fresh_namespace, install};
use crate::scrape::Scrape;

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The cluster and the controller.
    pub launch: Launch,
    /// Services of `type: LoadBalancer`.
    pub services: usize,
    /// IP changes measured, one at a time.
    pub changes: usize,
    /// Give up on one change (or the initial publish) after this long.
    pub timeout: Duration,
}

/// What one run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// Services.
    pub services: usize,
    /// Changes measured.
    pub changes: usize,
    /// From the controller's start to every `-ext` slice seen with its IP.
    pub initial: Duration,
    /// Change latencies, sorted: from just before the status write to the watch event.
    pub latencies: Vec<Duration>,
    /// The same, from the status write's answer.
    pub after_write: Vec<Duration>,
    /// The benchmark's own status writes, sorted: from just before each was sent to its answer
    /// (what one write costs on this apiserver in this run: the unit of [`Report::ratio`]).
    pub writes: Vec<Duration>,
    /// What the controller did during the changes.
    pub counts: Counts,
    /// Peak resident memory of the controller.
    pub peak_rss_bytes: u64,
}

/// The class of the benchmark's Services: no implementation serves it.
const CLASS: &str = "bench.capi-lb.io/none";

fn service_name(i: usize) -> String {
    format!("svc-{i:05}")
}

/// What the benchmark's watch has seen: the addresses of each `-ext` slice (by its Service) and
/// when they arrived.
#[derive(Default)]
struct Seen {
    slices: Mutex<HashMap<String, (Vec<String>, Instant)>>,
    changed: Notify,
}

impl Seen {
    fn holds(&self, service: &str, ip: &str) -> Option<Instant> {
        let slices = self.slices.lock().ok()?;
        let (addresses, at) = slices.get(service)?;
        addresses.iter().any(|a| a == ip).then_some(*at)
    }

    fn record(&self, slice: &EndpointSlice) {
        let Some(service) = slice.labels().get("kubernetes.io/service-name").cloned() else {
            return;
        };
        let addresses = slice
            .endpoints
            .iter()
            .flat_map(|e| e.addresses.iter().cloned())
            .collect();
        if let Ok(mut slices) = self.slices.lock() {
            slices.insert(service, (addresses, Instant::now()));
        }
        self.changed.notify_waiters();
    }

    /// Until `service`'s slice holds `ip`: when the watch delivered it.
    async fn wait(&self, service: &str, ip: &str, timeout: Duration) -> Option<Instant> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            if let Some(at) = self.holds(service, ip) {
                return Some(at);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }
}

/// Run the benchmark once.
pub async fn run(options: &Options) -> Result<Report, BenchError> {
    let (client, _) = client_of(&options.launch.kubeconfig).await?;
    install(&client, &options.launch).await?;
    let ns = fresh_namespace(&client, "capi-lb-ext-bench").await?;
    let result = measure(options, &client, &ns).await;
    if !options.launch.keep {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .delete(&ns, &DeleteParams::background())
            .await
            .map_err(api_err(format!("delete namespace {ns}")))?;
    }
    result
}

async fn measure(options: &Options, client: &Client, ns: &str) -> Result<Report, BenchError> {
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    for i in 0..options.services {
        let name = service_name(i);
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": CLASS,
                     "selector": {"app": "bench"},
                     "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]}}))
        .map_err(|e| BenchError::Setup(e.to_string()))?;
        services
            .create(&PostParams::default(), &svc)
            .await
            .map_err(api_err(format!("create Service {name}")))?;
        set_ip(&services, &name, &ip(i, 0)).await?;
    }

    let seen = Arc::new(Seen::default());
    let watch = {
        let seen = seen.clone();
        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
        tokio::spawn(async move {
            let mut stream = watcher(slices, watcher::Config::default()).boxed();
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => seen.record(&s),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "the benchmark's EndpointSlice watch"),
                }
            }
        })
    };

    let controller = Controller::start(&options.launch, ns).await?;
    let result = changes(options, &services, &seen, &controller).await;
    watch.abort();
    controller.stop().await?;
    result
}

async fn set_ip(services: &Api<Service>, name: &str, ip: &str) -> Result<(), BenchError> {
    services
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}})),
        )
        .await
        .map_err(api_err(format!("set the ingress IP of Service {name}")))?;
    Ok(())
}

async fn changes(
    options: &Options,
    services: &Api<Service>,
    seen: &Seen,
    controller: &Controller,
) -> Result<Report, BenchError> {
    let ext = |i: usize| format!("{}-ext", service_name(i));
    for i in 0..options.services {
        if seen
            .wait(&ext(i), &ip(i, 0), options.timeout)
            .await
            .is_none()
        {
            return Err(BenchError::Setup(format!(
                "{} not published within {:?}",
                ext(i),
                options.timeout
            )));
        }
    }
    let initial = controller.started.elapsed();
    let before = settle(controller).await?;

    let mut latencies = Vec::with_capacity(options.changes);
    let mut after_write = Vec::with_capacity(options.changes);
    let mut writes = Vec::with_capacity(options.changes);
    for change in 0..options.changes {
        let i = (change * 7919) % options.services.max(1);
        let new_ip = ip(i, change + 1);
        let sent = Instant::now();
        set_ip(services, &service_name(i), &new_ip).await?;
        let written = Instant::now();
        let Some(at) = seen.wait(&ext(i), &new_ip, options.timeout).await else {
            return Err(BenchError::Setup(format!(
                "the change of {} to {new_ip} did not reach {} within {:?}",
                service_name(i),
                ext(i),
                options.timeout
            )));
        };
        latencies.push(at.saturating_duration_since(sent));
        after_write.push(at.saturating_duration_since(written));
        writes.push(written.saturating_duration_since(sent));
    }
    let after = settle(controller).await?;
    latencies.sort();
    after_write.sort();
    writes.sort();
    Ok(Report {
        services: options.services,
        changes: options.changes,
        initial,
        latencies,
        after_write,
        writes,
        counts: Counts::of(&after).since(&Counts::of(&before)),
        peak_rss_bytes: after.sum("capi_lb_process_peak_resident_memory_bytes", &[]) as u64,
    })
}

/// Scrape until no reconcile is in flight and the count stood still for 200 ms.
async fn settle(controller: &Controller) -> Result<Scrape, BenchError> {
    let mut last = None;
    loop {
        let s = controller.scrape().await?;
        let done = s.sum("capi_lb_reconciles_total", &[]);
        if s.sum("capi_lb_reconciles_in_flight", &[]) == 0.0 && last == Some(done) {
            return Ok(s);
        }
        last = Some(done);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

impl Report {
    /// The median change over the median of the benchmark's own status writes: the propagation in
    /// units of one write on the same apiserver in the same run (the absolute figures are the
    /// machine's).
    pub fn ratio(&self) -> f64 {
        let write = percentile(&self.writes, 50.0).as_secs_f64();
        if write > 0.0 {
            percentile(&self.latencies, 50.0).as_secs_f64() / write
        } else {
            f64::INFINITY
        }
    }
}

/// The report as a row of the table in `docs/benchmarks.md`, and the requests per change.
pub fn render(r: &Report) -> String {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let n = r.changes.max(1) as f64;
    let max = r.latencies.last().copied().unwrap_or_default();
    let mut out = format!(
        "| {} | {} | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} | {:.2} | {:.2} | {:.1} s | {:.1} MiB |\n",
        r.services,
        r.changes,
        ms(percentile(&r.latencies, 50.0)),
        ms(percentile(&r.latencies, 99.0)),
        ms(max),
        ms(percentile(&r.after_write, 50.0)),
        ms(percentile(&r.after_write, 99.0)),
        ms(percentile(&r.writes, 50.0)),
        r.ratio(),
        r.counts.service_reconciles / n,
        r.counts.writes() / n,
        r.initial.as_secs_f64(),
        r.peak_rss_bytes as f64 / (1024.0 * 1024.0),
    );
    out.push_str("requests per change:");
    for (what, count) in &r.counts.requests {
        out.push_str(&format!(" {what} {:.2};", count / n));
    }
    out.push('\n');
    out
}

/// The header of [`render`]'s table.
pub const HEADER: &str = "| Services | changes | p50 | p99 | max | p50 after the write | p99 after the write | the benchmark's status write, p50 | p50 in status writes | reconciles/change | writes/change | initial publish | peak RSS |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wait_ends_when_the_watch_records_the_address() {
        let seen = Arc::new(Seen::default());
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "a-ext-ipv4", "labels": {"kubernetes.io/service-name": "a-ext"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"]}]}))
        .unwrap();
        let waiter = {
            let seen = seen.clone();
            tokio::spawn(
                async move { seen.wait("a-ext", "10.0.0.1", Duration::from_secs(5)).await },
            )
        };
        tokio::task::yield_now().await;
        seen.record(&slice);
        assert!(waiter.await.unwrap().is_some());
        assert!(
            seen.wait("a-ext", "10.0.0.2", Duration::from_millis(50))
                .await
                .is_none()
        );
    }
}
