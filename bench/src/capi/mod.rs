//! `capi-lb-bench capi`: what capi-lb adds to a management cluster where Cluster API's own manager
//! runs. Each size runs twice in one run, in fresh namespaces: first Cluster API alone (the
//! baseline: N Clusters with M control-plane Machines each, on the benchmark's infrastructure
//! kinds, which a fake provider in the benchmark provisions; no capi-lb process), then the same
//! objects with capi-lb (`capi-lb run` as a child process) and one LoadBalancer (with its
//! InMemoryLoadBalancer) per Cluster.
//!
//! **Settled** is Cluster API's steady state without a workload cluster (no Node can appear, so no
//! Machine reaches `Running`): every Cluster with `status.initialization.infrastructureProvisioned`
//! and a `spec.controlPlaneEndpoint`, every Machine in phase `Provisioned` (or later) with its
//! `spec.providerID` and `status.addresses` (Cluster API copies both from the BenchMachine), and
//! with capi-lb every LoadBalancer Ready with all its targets active; and then no change to any of
//! them (Clusters, Machines, LoadBalancers, as the benchmark's watches see them) for the quiet
//! window. The time to settled is from the first write to the last change before that window. The
//! control plane's CPU (kube-apiserver, etcd, Cluster API's manager, kube-controller-manager, from
//! `/proc` through the harness's pid files beside the kubeconfig) is taken over the same span plus
//! the quiet window.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use capi_lb_api::constants::ANNOTATION_LOAD_BALANCER_REF;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

pub mod cpu;
mod progress;
pub mod provider;
mod report;

use crate::converge::Counts;
use crate::launch::{BenchError, Controller, Launch, api_err, client_of, fresh_namespace, install};
use progress::{PROGRESS_EVERY, Progress};
pub use report::{HEADER, Phase, Report, ratio, render, render_phase};

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The cluster and the controller.
    pub launch: Launch,
    /// Clusters.
    pub clusters: usize,
    /// Control-plane Machines per Cluster.
    pub machines: usize,
    /// Requests in flight while creating (and the provider's writes in flight).
    pub parallel: usize,
    /// No change for this long ends a phase.
    pub quiet: Duration,
    /// Give up on a phase after this long.
    pub timeout: Duration,
}

/// The objects `api` lists and watches, as they change. The watcher lists and watches again after
/// an error (with backoff); the error is printed (naming `what`) and the stream goes on. Ending at
/// the first error, as both of the benchmark's watchers once did, left every later change unseen:
/// a phase that never settled, or objects the fake provider never provisioned.
pub(crate) fn changes(
    api: Api<DynamicObject>,
    what: String,
) -> impl futures::Stream<Item = DynamicObject> + Send + 'static {
    watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .filter_map(move |event| {
            let object = match event {
                Ok(o) => Some(o),
                Err(e) => {
                    eprintln!("capi-lb-bench capi: watching {what} (again): {e}");
                    None
                }
            };
            futures::future::ready(object)
        })
}

/// A phase's name in what the benchmark prints.
pub(crate) fn phase_name(with_lb: bool) -> &'static str {
    if with_lb {
        "with capi-lb"
    } else {
        "Cluster API alone"
    }
}

/// The bootstrap data Secret every Machine names (`spec.bootstrap.dataSecretName`: no bootstrap
/// provider needed).
const BOOTSTRAP_SECRET: &str = "bench-bootstrap";

fn cluster_name(i: usize) -> String {
    format!("c-{i:05}")
}

fn lb_name(i: usize) -> String {
    format!("lb-{i:05}")
}

/// 10.<i / 256>.<i % 256>.<j + 1>: unique for up to 65,536 Clusters.
fn machine_address(i: usize, j: usize) -> String {
    format!("10.{}.{}.{}", (i / 256) % 256, i % 256, j + 1)
}

/// The objects of Cluster `i`, in creation order, each with the kind it is.
fn documents(i: usize, machines: usize, with_lb: bool) -> Vec<Value> {
    let cluster = cluster_name(i);
    let mut annotations = json!({});
    if with_lb {
        annotations[ANNOTATION_LOAD_BALANCER_REF] = json!(lb_name(i));
    }
    let mut out = vec![
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
               "metadata": {"name": cluster, "annotations": annotations},
               "spec": {"paused": false,
                        "infrastructureRef": {"apiGroup": provider::GROUP,
                                              "kind": provider::CLUSTER_KIND,
                                              "name": cluster}}}),
        // Without capi-lb the provider gives the Cluster its endpoint (its own load balancer's);
        // with capi-lb, the LoadBalancer's endpoint is published to the Cluster.
        provider::object(
            provider::CLUSTER_KIND,
            &cluster,
            if with_lb {
                json!({})
            } else {
                json!({provider::ADDRESS_ANNOTATION:
                       format!("100.64.{}.{}", (i / 256) % 256, i % 256)})
            },
        ),
    ];
    for j in 0..machines {
        let name = format!("{cluster}-m{j}");
        out.push(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "labels": {
                "cluster.x-k8s.io/cluster-name": cluster,
                "cluster.x-k8s.io/control-plane": ""}},
            "spec": {"clusterName": cluster,
                     "bootstrap": {"dataSecretName": BOOTSTRAP_SECRET},
                     "infrastructureRef": {"apiGroup": provider::GROUP,
                                           "kind": provider::MACHINE_KIND, "name": name}}}),
        );
        out.push(provider::object(
            provider::MACHINE_KIND,
            &name,
            json!({provider::ADDRESS_ANNOTATION: machine_address(i, j)}),
        ));
    }
    if with_lb {
        out.push(
            json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                        "kind": "InMemoryLoadBalancer", "metadata": {"name": lb_name(i)},
                        "spec": {"addressPools": ["100.64.0.0/16"]}}),
        );
        out.push(
            json!({"apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1",
            "kind": "LoadBalancer", "metadata": {"name": lb_name(i)},
            "spec": {"clusterName": cluster, "controlPlane": {},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                           "kind": "InMemoryLoadBalancer",
                                           "name": lb_name(i)}}}),
        );
    }
    out
}

/// The APIs of the kinds of a phase, in its namespace, by kind.
struct Apis(HashMap<&'static str, Api<DynamicObject>>);

impl Apis {
    fn new(client: &Client, ns: &str) -> Self {
        let gvk = |g: &str, v: &str, k: &str, plural: &str| {
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, k), plural)
        };
        let kinds = [
            (
                "Cluster",
                gvk("cluster.x-k8s.io", "v1beta2", "Cluster", "clusters"),
            ),
            (
                "Machine",
                gvk("cluster.x-k8s.io", "v1beta2", "Machine", "machines"),
            ),
            (
                provider::CLUSTER_KIND,
                provider::resource(provider::CLUSTER_KIND),
            ),
            (
                provider::MACHINE_KIND,
                provider::resource(provider::MACHINE_KIND),
            ),
            (
                "InMemoryLoadBalancer",
                gvk(
                    "infrastructure.cluster.x-k8s.io",
                    "v1alpha1",
                    "InMemoryLoadBalancer",
                    "inmemoryloadbalancers",
                ),
            ),
            (
                "LoadBalancer",
                gvk(
                    "loadbalancer.cluster.x-k8s.io",
                    "v1alpha1",
                    "LoadBalancer",
                    "loadbalancers",
                ),
            ),
        ];
        Self(
            kinds
                .into_iter()
                .map(|(k, r)| (k, Api::namespaced_with(client.clone(), ns, &r)))
                .collect(),
        )
    }

    fn get(&self, kind: &str) -> Result<&Api<DynamicObject>, BenchError> {
        self.0
            .get(kind)
            .ok_or_else(|| BenchError::Setup(format!("no API for {kind}")))
    }

    async fn create(&self, doc: Value) -> Result<(), BenchError> {
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        let object: DynamicObject = serde_json::from_value(doc)
            .map_err(|e| BenchError::Setup(format!("a fixture: {e}")))?;
        let name = object.name_any();
        self.get(&kind)?
            .create(&PostParams::default(), &object)
            .await
            .map_err(api_err(format!("create {kind} {name}")))?;
        Ok(())
    }
}

/// Whether a Cluster, Machine or LoadBalancer is in its settled state.
fn settled_state(kind: &str, o: &DynamicObject, machines: usize) -> bool {
    let (spec, status) = (&o.data["spec"], &o.data["status"]);
    match kind {
        "Cluster" => {
            status["initialization"]["infrastructureProvisioned"] == json!(true)
                && spec["controlPlaneEndpoint"]["host"]
                    .as_str()
                    .is_some_and(|h| !h.is_empty())
        }
        "Machine" => {
            matches!(status["phase"].as_str(), Some("Provisioned" | "Running"))
                && spec["providerID"].as_str().is_some_and(|p| !p.is_empty())
                && status["addresses"]
                    .as_array()
                    .is_some_and(|a| !a.is_empty())
        }
        _ => {
            status["ready"] == json!(true)
                && status["activeTargets"]
                    .as_array()
                    .is_some_and(|a| a.len() == machines)
        }
    }
}

/// Run both phases of one size.
pub async fn run(options: &Options) -> Result<Report, BenchError> {
    let (client, _) = client_of(&options.launch.kubeconfig).await?;
    install(&client, &options.launch).await?;
    provider::install(&client).await?;
    let state = options
        .launch
        .kubeconfig
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    let baseline = phase(options, &client, &state, false).await?;
    let with_capi_lb = phase(options, &client, &state, true).await?;
    Ok(Report {
        clusters: options.clusters,
        machines: options.machines,
        quiet: options.quiet,
        baseline,
        with_capi_lb,
    })
}

/// One phase in a fresh namespace, cleaned up after (also when it failed).
async fn phase(
    options: &Options,
    client: &Client,
    state: &std::path::Path,
    with_lb: bool,
) -> Result<Phase, BenchError> {
    let ns = fresh_namespace(
        client,
        if with_lb {
            "capi-lb-bench-capi-lb"
        } else {
            "capi-lb-bench-capi"
        },
    )
    .await?;
    let apis = Apis::new(client, &ns);
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": BOOTSTRAP_SECRET, "namespace": ns},
        "stringData": {"value": "#!/bin/sh\n# capi-lb-bench: no bootstrap runs\n"}});
    crate::launch::apply(client, &secret).await?;
    let controller = if with_lb {
        match Controller::start(&options.launch, &ns).await {
            Ok(c) => Some(c),
            Err(e) => {
                let _ = cleanup(options, client, &apis, &ns).await;
                return Err(e);
            }
        }
    } else {
        None
    };
    let fake = provider::spawn(client.clone(), ns.clone(), options.parallel);
    let result = measure(options, &apis, state, with_lb, controller.as_ref()).await;
    if let Ok(phase) = &result {
        // Printed now: a later phase or clean-up that fails must not take this one's figures with it.
        eprint!(
            "capi-lb-bench capi: {}",
            render_phase(
                options.clusters,
                options.machines,
                options.quiet,
                phase_name(with_lb),
                phase
            )
        );
    }
    let cleaned = if options.launch.keep {
        Ok(())
    } else {
        cleanup(options, client, &apis, &ns).await
    };
    fake.abort();
    if let Some(c) = controller {
        c.stop().await?;
    }
    if !options.launch.keep {
        let _ = std::fs::remove_file(crate::launch::state_file(&ns));
    }
    let phase = result?;
    cleaned?;
    Ok(phase)
}

async fn measure(
    options: &Options,
    apis: &Apis,
    state: &std::path::Path,
    with_lb: bool,
    controller: Option<&Controller>,
) -> Result<Phase, BenchError> {
    let (n, m) = (options.clusters, options.machines);
    let ticks = cpu::clock_ticks();
    let before_counts = match controller {
        Some(c) => Some(Counts::of(&c.scrape().await?)),
        None => None,
    };
    // The watches run from before the first write.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(&'static str, String, bool)>();
    let mut watches = Vec::new();
    let kinds: &[&'static str] = if with_lb {
        &["Cluster", "Machine", "LoadBalancer"]
    } else {
        &["Cluster", "Machine"]
    };
    for kind in kinds {
        let api = apis.get(kind)?.clone();
        let tx = tx.clone();
        watches.push(tokio::spawn(async move {
            let stream = changes(api, format!("{kind}s"));
            futures::pin_mut!(stream);
            while let Some(o) = stream.next().await {
                let ok = settled_state(kind, &o, m);
                if tx.send((kind, o.name_any(), ok)).is_err() {
                    break;
                }
            }
        }));
    }
    drop(tx);
    let stop_watches = |watches: &[tokio::task::JoinHandle<()>]| {
        for w in watches {
            w.abort();
        }
    };
    let what = phase_name(with_lb);

    let cpu_before = cpu::sample(state, ticks);
    let start = Instant::now();
    let creation = futures::stream::iter((0..n).map(|i| async move {
        for doc in documents(i, m, with_lb) {
            apis.create(doc).await?;
        }
        Ok::<(), BenchError>(())
    }))
    .buffer_unordered(options.parallel.max(1))
    .try_collect::<Vec<()>>();
    futures::pin_mut!(creation);
    let mut expected = vec![("Cluster", n), ("Machine", n * m)];
    if with_lb {
        expected.push(("LoadBalancer", n));
    }
    let mut progress = Progress::new(start, &expected);
    let deadline = start + options.timeout;
    let mut report_at = start + PROGRESS_EVERY;
    loop {
        let wake = progress.wake(options.quiet, deadline).min(report_at);
        tokio::select! {
            result = &mut creation, if progress.created.is_none() => {
                if let Err(e) = result {
                    stop_watches(&watches);
                    return Err(e);
                }
                progress.created = Some(start.elapsed());
            }
            Some((kind, name, ok)) = rx.recv() => {
                progress.observe(kind, name, ok, Instant::now());
            }
            _ = tokio::time::sleep_until(wake.into()) => {
                let now = Instant::now();
                if progress.quiet_since(options.quiet, now) {
                    break;
                }
                if now >= deadline {
                    stop_watches(&watches);
                    return Err(BenchError::Setup(format!(
                        "{what}: not settled after {:?}: {}",
                        options.timeout,
                        progress.summary(now)
                    )));
                }
                if now >= report_at {
                    eprintln!("capi-lb-bench capi: {n} Clusters, {what}: {}", progress.summary(now));
                    report_at = now + PROGRESS_EVERY;
                }
            }
        }
    }
    stop_watches(&watches);
    let cpu_after = cpu::sample(state, ticks);
    let (counts, controller_cpu, reconcile_seconds) = match controller {
        Some(c) => {
            // Read at the end of the quiet window, not once capi-lb stands still: with 1,000
            // LoadBalancers, their periodic looks (about one a minute each, from the cache, no
            // request) come 16 times a second and it never stood still for half a second (the
            // 1,000 runs of 2026-11-27 waited there for ever). Nothing it watches changed for the
            // whole window, so the writes are all counted.
            let s = c.scrape().await?;
            let counts = before_counts.map(|b| Counts::of(&s).since(&b));
            let lb = [("controller", "loadbalancer")];
            let reconcile_seconds = (
                s.sum("capi_lb_reconcile_duration_seconds_sum", &lb),
                s.sum("capi_lb_reconcile_duration_seconds_count", &lb),
            );
            (
                counts,
                Some(s.sum("capi_lb_process_cpu_seconds", &[])),
                Some(reconcile_seconds),
            )
        }
        None => (None, None, None),
    };
    Ok(Phase {
        created: progress.created.unwrap_or_default(),
        reached: progress.reached.unwrap_or_default(),
        reached_by_kind: progress
            .reached_by_kind
            .iter()
            .map(|(k, d)| ((*k).to_string(), *d))
            .collect(),
        settled: progress.last_change.duration_since(start),
        cpu: cpu::since(&cpu_after, &cpu_before),
        controller: counts,
        controller_cpu,
        reconcile_seconds,
    })
}

/// Delete the LoadBalancers (capi-lb, still running, runs their finalizers), then the Clusters
/// (Cluster API deletes their Machines and infrastructure objects), then the namespace. What is
/// still there at the deadline loses its finalizers.
async fn cleanup(
    options: &Options,
    client: &Client,
    apis: &Apis,
    ns: &str,
) -> Result<(), BenchError> {
    let deadline = Instant::now() + options.timeout;
    for kind in ["LoadBalancer", "Cluster"] {
        eprintln!("capi-lb-bench capi: clean-up of {ns}: deleting the {kind}s");
        let api = apis.get(kind)?;
        while let Err(e) = api
            .delete_collection(&DeleteParams::background(), &ListParams::default())
            .await
        {
            if Instant::now() > deadline {
                return Err(api_err(format!("delete the {kind}s"))(e));
            }
            tracing::warn!("deleting the {kind}s, asked again: {e}");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let gone: &[&str] = if kind == "Cluster" {
            &["Cluster", "Machine"]
        } else {
            &["LoadBalancer"]
        };
        if !wait_empty(apis, gone, deadline).await {
            eprintln!(
                "capi-lb-bench capi: clean-up of {ns}: {gone:?} still there after {:?}; their finalizers are removed",
                options.timeout
            );
        }
    }
    // Whatever is left (a deadline passed): without finalizers, the namespace can go.
    let release = json!({"metadata": {"finalizers": null}});
    for kind in ["LoadBalancer", "Machine", "Cluster"] {
        let api = apis.get(kind)?;
        let left = api
            .list_metadata(&ListParams::default())
            .await
            .map_err(api_err(format!("list the {kind}s")))?;
        for o in left.items.iter().filter(|o| !o.finalizers().is_empty()) {
            let name = o.name_any();
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&release))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(api_err(format!("release {kind} {name}"))(e)),
            }
        }
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete(ns, &DeleteParams::background())
        .await
        .map_err(api_err(format!("delete namespace {ns}")))?;
    let namespace_deadline = Instant::now() + options.timeout;
    while namespaces
        .get_opt(ns)
        .await
        .map_err(api_err(format!("get namespace {ns}")))?
        .is_some()
    {
        if Instant::now() > namespace_deadline {
            return Err(BenchError::Setup(format!(
                "namespace {ns} not gone after {:?}",
                options.timeout
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

/// Until none of `kinds` is left in the namespace (true), or the deadline (false).
async fn wait_empty(apis: &Apis, kinds: &[&str], deadline: Instant) -> bool {
    while Instant::now() < deadline {
        let mut left = false;
        for kind in kinds {
            let Ok(api) = apis.get(kind) else { continue };
            if api
                .list_metadata(&ListParams::default().limit(1))
                .await
                .map_or(true, |l| !l.items.is_empty())
            {
                left = true;
            }
        }
        if !left {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    false
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_phases_create_the_same_clusters_and_machines() {
        let alone = documents(7, 3, false);
        let with = documents(7, 3, true);
        assert_eq!(alone.len(), 2 + 2 * 3);
        assert_eq!(with.len(), alone.len() + 2);
        for (a, w) in alone.iter().zip(&with) {
            assert_eq!(a["kind"], w["kind"]);
            assert_eq!(a["metadata"]["name"], w["metadata"]["name"]);
            assert_eq!(a["spec"], w["spec"]);
        }
        assert_eq!(
            with[0]["metadata"]["annotations"][ANNOTATION_LOAD_BALANCER_REF],
            "lb-00007"
        );
        assert_eq!(
            alone[3]["metadata"]["annotations"][provider::ADDRESS_ANNOTATION],
            "10.0.7.1"
        );
    }

    #[test]
    fn a_machine_is_settled_once_provisioned_with_its_provider_id_and_addresses() {
        let machine = |phase: &str, id: &str| -> DynamicObject {
            serde_json::from_value(json!({"apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "Machine", "metadata": {"name": "m"},
                "spec": {"providerID": id},
                "status": {"phase": phase, "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}))
            .unwrap()
        };
        assert!(settled_state(
            "Machine",
            &machine("Provisioned", "bench://x"),
            3
        ));
        assert!(!settled_state(
            "Machine",
            &machine("Provisioning", "bench://x"),
            3
        ));
        assert!(!settled_state("Machine", &machine("Provisioned", ""), 3));
    }
}
