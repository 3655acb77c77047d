//! `capi-lb-bench external-endpoints`: how long an ingress IP change of one Service takes to reach its `-ext`
//! EndpointSlice, and how many writes it costs, with N LoadBalancer Services in the cluster. The
//! cluster is the in-memory API (kube-fake-client behind capi-lb's layer); the measured span is from
//! the moment the Service's new status is stored to the moment the reconcile that a watch event would
//! trigger has updated the slice (the reconcile of that Service, run directly). Watch delivery and
//! queueing in a real cluster come on top and are not measured here.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use capi_lb::sim::world::{World, WorldError};

/// Results of one run of the external endpoints benchmark.
#[derive(Clone, Debug, PartialEq)]
pub struct ExternalEndpointsReport {
    /// LoadBalancer Services in the cluster.
    pub services: usize,
    /// IP changes measured.
    pub changes: usize,
    /// Median latency from the stored change to the updated slice.
    pub median: Duration,
    /// 99th percentile of the same.
    pub p99: Duration,
    /// Slowest change.
    pub max: Duration,
    /// API writes per change (without Events).
    pub writes_per_change: f64,
    /// Event writes per change.
    pub events_per_change: f64,
    /// API reads per change.
    pub reads_per_change: f64,
    /// Time to publish all N Services from scratch.
    pub initial: Duration,
}

/// Errors of a benchmark run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The in-memory world failed.
    #[error(transparent)]
    World(#[from] WorldError),
    /// An API call failed.
    #[error("{0}")]
    Api(String),
    /// A change did not reach its slice.
    #[error("the change of Service {0} did not reach its EndpointSlice")]
    NotPublished(String),
}

fn service(i: usize, ip: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": format!("svc-{i:05}"), "namespace": format!("ns-{:03}", i % 100)},
        "spec": {"type": "LoadBalancer", "selector": {"app": "x"},
                 "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": ip}]}},
    })
}

pub(crate) fn ip(i: usize, generation: usize) -> String {
    // 10.<generation>.<i / 250>.<i % 250 + 1>: unique per Service and per change.
    format!(
        "10.{}.{}.{}",
        generation % 250,
        (i / 250) % 250,
        i % 250 + 1
    )
}

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    // Nearest rank.
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Run the benchmark: `services` LoadBalancer Services, then `changes` IP changes spread over them.
pub async fn external_endpoints(
    services: usize,
    changes: usize,
) -> Result<ExternalEndpointsReport, BenchError> {
    let objects: Vec<Value> = (0..services).map(|i| service(i, &ip(i, 0))).collect();
    let world = World::new(objects).await?;
    let started = Instant::now();
    world.settle_services(5).await?;
    let initial = started.elapsed();

    let mut latencies = Vec::with_capacity(changes);
    let writes_before = world.api.stats.writes_excluding_events();
    let all_before = world.api.stats.writes();
    let reads_before = world.api.stats.reads();
    for change in 0..changes {
        let i = (change * 7919) % services.max(1);
        let name = format!("svc-{i:05}");
        let namespace = format!("ns-{:03}", i % 100);
        let new_ip = ip(i, change + 1);
        let api: Api<Service> = Api::namespaced(world.client(), &namespace);
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": new_ip}]}}})),
        )
        .await
        .map_err(|e| BenchError::Api(e.to_string()))?;
        let stored = Instant::now();
        world
            .reconcile_service(&namespace, &name)
            .await
            .map_err(|e| BenchError::Api(e.to_string()))?;
        latencies.push(stored.elapsed());
        let slices: Api<EndpointSlice> = Api::namespaced(world.client(), &namespace);
        let slice = slices
            .get(&format!("{name}-ext-ipv4"))
            .await
            .map_err(|e| BenchError::Api(e.to_string()))?;
        if slice.endpoints.first().map(|e| e.addresses.clone()) != Some(vec![new_ip]) {
            return Err(BenchError::NotPublished(name));
        }
    }
    // Not counted: the status patches and slice reads are the benchmark's own, and the get of the
    // Service before each reconcile stands in for the object a watch event delivers.
    let n = changes.max(1) as f64;
    let writes = world.api.stats.writes_excluding_events() - writes_before;
    let all = world.api.stats.writes() - all_before;
    let reads = world.api.stats.reads() - reads_before;
    latencies.sort();
    Ok(ExternalEndpointsReport {
        services,
        changes,
        median: percentile(&latencies, 50.0),
        p99: percentile(&latencies, 99.0),
        max: latencies.last().copied().unwrap_or_default(),
        writes_per_change: (writes as f64 - changes as f64) / n,
        events_per_change: (all - writes) as f64 / n,
        reads_per_change: (reads as f64 - 2.0 * changes as f64) / n,
        initial,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&d, 50.0), Duration::from_millis(50));
        assert_eq!(percentile(&d, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&d[..1], 99.0), Duration::from_millis(1));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }

    #[test]
    fn ips_are_unique_per_service_and_change() {
        assert_ne!(ip(1, 0), ip(1, 1));
        assert_ne!(ip(1, 0), ip(2, 0));
        assert_ne!(ip(0, 0), ip(250, 0));
    }

    #[tokio::test]
    async fn a_small_run_publishes_every_change_with_one_write_and_an_event() {
        let report = external_endpoints(20, 10).await.unwrap();
        assert_eq!(report.changes, 10);
        // The slice update, the Event (counted separately) and nothing else: the Service and the DNS
        // annotation are unchanged by an IP change.
        assert_eq!(report.writes_per_change, 1.0, "{report:?}");
        assert!(report.events_per_change >= 1.0, "{report:?}");
    }
}
