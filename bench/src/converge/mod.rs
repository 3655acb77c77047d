//! `capi-lb-bench converge`: how fast the controller brings N LoadBalancers with M Machines each to
//! Ready with every target active on a real cluster, what it costs (reconciles and API requests per
//! LoadBalancer, from the controller's own metrics), whether it writes anything once converged, and
//! its memory.
//!
//! The benchmark runs `capi-lb run --providers inmemory` as a child process (the `capi-lb` binary
//! beside `capi-lb-bench` by default) against the cluster, in a fresh namespace: each LoadBalancer comes with its Cluster API
//! Cluster, an InMemoryLoadBalancer and M control-plane Machines with an address, all created with
//! parallel requests while the controller runs. Convergence is followed through a watch of the
//! LoadBalancers. Then an idle window: the controller must make no write. Then (optionally) a warm
//! restart: a new controller process fills its caches, reconciles every LoadBalancer once and must
//! write nothing. Finally everything is deleted, through the controller (finalizers).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use capi_lb_api::LoadBalancer;
use capi_lb_api::constants::ANNOTATION_LOAD_BALANCER_REF;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

mod report;

pub use crate::launch::BenchError;
use crate::launch::{Controller, Launch, api_err, client_of, fresh_namespace, install, state_file};
use crate::scrape::Scrape;
pub use report::{Counts, Report, Restart, render};

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The cluster and the controller.
    pub launch: Launch,
    /// LoadBalancers.
    pub loadbalancers: usize,
    /// Machines per LoadBalancer.
    pub machines: usize,
    /// Requests in flight while creating and deleting.
    pub parallel: usize,
    /// The idle window after convergence.
    pub idle: Duration,
    /// Give up waiting for convergence after this long.
    pub timeout: Duration,
    /// Measure a warm restart after the idle window.
    pub restart: bool,
}

/// The objects of LoadBalancer `i`: its Cluster, InMemoryLoadBalancer, Machines (with their
/// addresses, set through the status subresource as Cluster API would) and the LoadBalancer.
struct Fixture {
    i: usize,
    machines: usize,
}

impl Fixture {
    fn cluster(&self) -> String {
        format!("c-{:05}", self.i)
    }

    fn name(&self) -> String {
        format!("lb-{:05}", self.i)
    }

    fn machine(&self, j: usize) -> (String, Value, Value) {
        let name = format!("{}-m{j}", self.cluster());
        let doc = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "labels": {
                "cluster.x-k8s.io/cluster-name": self.cluster(),
                "cluster.x-k8s.io/control-plane": ""}},
            "spec": {"clusterName": self.cluster(), "bootstrap": {"dataSecretName": "none"},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                           "kind": "DockerMachine", "name": name}}});
        // 10.<i / 256>.<i % 256>.<j + 1>: unique for up to 65,536 LoadBalancers.
        let ip = format!("10.{}.{}.{}", (self.i / 256) % 256, self.i % 256, j + 1);
        let status = json!({"status": {"addresses": [{"type": "InternalIP", "address": ip}]}});
        (name, doc, status)
    }

    fn documents(&self) -> Vec<Value> {
        vec![
            // Cluster API's webhook refuses a Cluster with none of infrastructureRef,
            // controlPlaneRef and topology; nothing serves DockerCluster here.
            // The Cluster names its LoadBalancer, as the clusterctl flavors do: capi-lb writes a
            // Cluster's endpoint only then.
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                   "metadata": {"name": self.cluster(),
                                "annotations": {ANNOTATION_LOAD_BALANCER_REF: self.name()}},
                   "spec": {"paused": false,
                            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                                  "kind": "DockerCluster",
                                                  "name": self.cluster()}}}),
            json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                   "kind": "InMemoryLoadBalancer", "metadata": {"name": self.name()},
                   "spec": {"addressPools": ["100.64.0.0/16"]}}),
        ]
    }

    fn load_balancer(&self) -> Value {
        json!({"apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer",
               "metadata": {"name": self.name()},
               "spec": {"clusterName": self.cluster(), "controlPlane": {},
                        "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                              "kind": "InMemoryLoadBalancer",
                                              "name": self.name()}}})
    }
}

/// APIs of the kinds the benchmark creates, in one namespace.
struct Apis {
    clusters: Api<DynamicObject>,
    infra: Api<DynamicObject>,
    machines: Api<DynamicObject>,
    lbs: Api<LoadBalancer>,
}

impl Apis {
    async fn new(client: &Client, ns: &str) -> Result<Self, BenchError> {
        let resolve = |group: &'static str, version: &'static str, kind: &'static str| {
            let client = client.clone();
            async move {
                let gvk = GroupVersionKind::gvk(group, version, kind);
                kube::discovery::pinned_kind(&client, &gvk)
                    .await
                    .map(|(r, _)| r)
                    .map_err(|e| {
                        BenchError::Setup(format!(
                            "{kind}.{group}/{version} is not served ({e}): install its CRD \
                             (Cluster API's with --crd)"
                        ))
                    })
            }
        };
        let (cluster, infra, machine) = (
            resolve("cluster.x-k8s.io", "v1beta2", "Cluster").await?,
            resolve(
                "infrastructure.cluster.x-k8s.io",
                "v1alpha1",
                "InMemoryLoadBalancer",
            )
            .await?,
            resolve("cluster.x-k8s.io", "v1beta2", "Machine").await?,
        );
        Ok(Self {
            clusters: Api::namespaced_with(client.clone(), ns, &cluster),
            infra: Api::namespaced_with(client.clone(), ns, &infra),
            machines: Api::namespaced_with(client.clone(), ns, &machine),
            lbs: Api::namespaced(client.clone(), ns),
        })
    }

    async fn create(&self, f: &Fixture) -> Result<(), BenchError> {
        let post = PostParams::default();
        let object = |doc: Value| {
            serde_json::from_value::<DynamicObject>(doc)
                .map_err(|e| BenchError::Setup(format!("a fixture: {e}")))
        };
        let [cluster, infra] = <[Value; 2]>::try_from(f.documents())
            .map_err(|_| BenchError::Setup("fixture documents".into()))?;
        self.clusters
            .create(&post, &object(cluster)?)
            .await
            .map_err(api_err(format!("create Cluster {}", f.cluster())))?;
        self.infra
            .create(&post, &object(infra)?)
            .await
            .map_err(api_err(format!("create InMemoryLoadBalancer {}", f.name())))?;
        for j in 0..f.machines {
            let (name, doc, status) = f.machine(j);
            self.machines
                .create(&post, &object(doc)?)
                .await
                .map_err(api_err(format!("create Machine {name}")))?;
            self.machines
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .map_err(api_err(format!("set the address of Machine {name}")))?;
        }
        let lb: LoadBalancer = serde_json::from_value(f.load_balancer())
            .map_err(|e| BenchError::Setup(format!("a fixture: {e}")))?;
        self.lbs
            .create(&post, &lb)
            .await
            .map_err(api_err(format!("create LoadBalancer {}", f.name())))?;
        Ok(())
    }
}

/// Convergence as the watch of the LoadBalancers shows it.
#[derive(Default)]
struct Progress {
    /// name -> (ready, every target active)
    state: HashMap<String, (bool, bool)>,
    events: usize,
}

impl Progress {
    fn see(&mut self, lb: &LoadBalancer, machines: usize) {
        let (ready, active) = lb.status.as_ref().map_or((false, false), |s| {
            (s.ready, s.active_targets.len() == machines && machines > 0)
        });
        self.state.insert(lb.name_any(), (ready, active));
        self.events += 1;
    }

    fn ready(&self) -> usize {
        self.state.values().filter(|(r, _)| *r).count()
    }

    fn active(&self) -> usize {
        self.state.values().filter(|(_, a)| *a).count()
    }
}

/// Run the benchmark once.
pub async fn run(options: &Options) -> Result<Report, BenchError> {
    let (client, _) = client_of(&options.launch.kubeconfig).await?;
    install(&client, &options.launch).await?;
    let ns = fresh_namespace(&client, "capi-lb-bench").await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let apis = Apis::new(&client, &ns).await?;
    let controller = Controller::start(&options.launch, &ns).await?;
    let result = measure(options, &apis, &ns, controller).await;
    let (mut report, controller) = match result {
        Ok(ok) => ok,
        Err((e, controller)) => {
            if !options.launch.keep {
                let _ = cleanup(options, &apis, &namespaces, &ns).await;
            }
            if let Some(c) = controller {
                let _ = c.stop().await;
            }
            return Err(e);
        }
    };
    if !options.launch.keep {
        report.cleanup = Some(
            cleanup(options, &apis, &namespaces, &ns)
                .await
                .map_err(|e| e.to_string()),
        );
    }
    controller.stop().await?;
    if !options.launch.keep {
        let _ = std::fs::remove_file(state_file(&ns));
    }
    Ok(report)
}

type Failed = (BenchError, Option<Controller>);

async fn measure(
    options: &Options,
    apis: &Apis,
    ns: &str,
    controller: Controller,
) -> Result<(Report, Controller), Failed> {
    let (n, m) = (options.loadbalancers, options.machines);
    let before = match controller.scrape().await {
        Ok(s) => Counts::of(&s),
        Err(e) => return Err((e, Some(controller))),
    };

    // The watch runs from before the first write.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<LoadBalancer>();
    let watch_api = apis.lbs.clone();
    let watch = tokio::spawn(async move {
        let stream = watcher(watch_api, watcher::Config::default())
            .default_backoff()
            .applied_objects();
        futures::pin_mut!(stream);
        while let Ok(Some(lb)) = stream.try_next().await {
            if tx.send(lb).is_err() {
                break;
            }
        }
    });

    let start = Instant::now();
    let creation = futures::stream::iter((0..n).map(|i| {
        let fixture = Fixture { i, machines: m };
        async move { apis.create(&fixture).await }
    }))
    .buffer_unordered(options.parallel.max(1))
    .try_collect::<Vec<()>>();
    let mut progress = Progress::default();
    let mut created = None;
    let mut ready = None;
    let mut active = None;
    futures::pin_mut!(creation);
    let deadline = tokio::time::sleep(options.timeout);
    tokio::pin!(deadline);
    while ready.is_none() || active.is_none() || created.is_none() {
        tokio::select! {
            result = &mut creation, if created.is_none() => {
                if let Err(e) = result {
                    watch.abort();
                    return Err((e, Some(controller)));
                }
                created = Some(start.elapsed());
            }
            Some(lb) = rx.recv() => {
                progress.see(&lb, m);
                if ready.is_none() && progress.ready() == n {
                    ready = Some(start.elapsed());
                }
                if active.is_none() && progress.active() == n {
                    active = Some(start.elapsed());
                }
            }
            _ = &mut deadline => {
                watch.abort();
                return Err((
                    BenchError::Timeout(options.timeout, progress.ready(), n, progress.active()),
                    Some(controller),
                ));
            }
        }
    }
    // Reconciles triggered by the last writes may still be running: wait until the controller
    // has nothing in flight before taking the convergence counts.
    let converged = match settle(&controller).await {
        Ok(s) => s,
        Err(e) => {
            watch.abort();
            return Err((e, Some(controller)));
        }
    };
    let converge = Counts::of(&converged).since(&before);

    // Idle: nothing may be written.
    let events_before = {
        while let Ok(lb) = rx.try_recv() {
            progress.see(&lb, m);
        }
        progress.events
    };
    tokio::time::sleep(options.idle).await;
    while let Ok(lb) = rx.try_recv() {
        progress.see(&lb, m);
    }
    watch.abort();
    let idle_events = progress.events - events_before;
    let after_idle = match controller.scrape().await {
        Ok(s) => s,
        Err(e) => return Err((e, Some(controller))),
    };
    let idle = Counts::of(&after_idle).since(&Counts::of(&converged));
    let peak_rss_bytes = after_idle.sum("capi_lb_process_peak_resident_memory_bytes", &[]) as u64;
    let cpu_seconds = after_idle.sum("capi_lb_process_cpu_seconds", &[]);

    let (restart, controller) = if options.restart {
        if let Err(e) = controller.stop().await {
            return Err((e, None));
        }
        let restarted = match Controller::start(&options.launch, ns).await {
            Ok(c) => c,
            Err(e) => return Err((e, None)),
        };
        match warm(options, &restarted).await {
            Ok(r) => (Some(r), restarted),
            Err(e) => return Err((e, Some(restarted))),
        }
    } else {
        (None, controller)
    };
    Ok((
        Report {
            loadbalancers: n,
            machines: m,
            created: created.unwrap_or_default(),
            ready: ready.unwrap_or_default(),
            active: active.unwrap_or_default(),
            converge,
            idle,
            idle_events,
            peak_rss_bytes,
            cpu_seconds,
            restart,
            cleanup: None,
        },
        controller,
    ))
}

/// How long [`settle`] waits for the controller to stand still.
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// Scrape until no reconcile is in flight and the reconcile count stood still for half a second,
/// at most [`SETTLE_LIMIT`]. Many LoadBalancers may never leave the controller still (each looks
/// at its cloud about once a minute, 16 reconciles a second at 1,000, from the cache, no request;
/// the wait without a limit hung `capi-lb-bench capi` at 1,000): then the counts are read at the
/// limit, and stderr says so.
pub(crate) async fn settle(controller: &Controller) -> Result<Scrape, BenchError> {
    let deadline = Instant::now() + SETTLE_LIMIT;
    let mut last = None;
    loop {
        let s = controller.scrape().await?;
        let in_flight = s.sum("capi_lb_reconciles_in_flight", &[]);
        let done = s.sum("capi_lb_reconciles_total", &[]);
        if in_flight == 0.0 && last == Some(done) {
            return Ok(s);
        }
        if Instant::now() >= deadline {
            eprintln!(
                "capi-lb did not stand still for half a second within {SETTLE_LIMIT:?} \
                 ({done} reconciles, {in_flight} in flight): its counts are read now"
            );
            return Ok(s);
        }
        last = Some(done);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A restarted controller: until every LoadBalancer was reconciled once and nothing is in flight,
/// then an idle window.
async fn warm(options: &Options, controller: &Controller) -> Result<Restart, BenchError> {
    let n = options.loadbalancers as f64;
    let deadline = Instant::now() + options.timeout;
    let resynced = loop {
        let s = controller.scrape().await?;
        if Counts::of(&s).reconciles >= n && s.sum("capi_lb_reconciles_in_flight", &[]) == 0.0 {
            break controller.started.elapsed();
        }
        if Instant::now() > deadline {
            return Err(BenchError::Controller(format!(
                "the restarted controller reconciled {} of {n} LoadBalancers in {:?}",
                Counts::of(&s).reconciles,
                options.timeout
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    tokio::time::sleep(options.idle).await;
    let s = settle(controller).await?;
    Ok(Restart {
        resynced,
        counts: Counts::of(&s),
        peak_rss_bytes: s.sum("capi_lb_process_peak_resident_memory_bytes", &[]) as u64,
    })
}

/// Delete the LoadBalancers (the controller runs their finalizers), wait until they are gone, then
/// delete the namespace and wait for it.
async fn cleanup(
    options: &Options,
    apis: &Apis,
    namespaces: &Api<Namespace>,
    ns: &str,
) -> Result<Duration, BenchError> {
    let start = Instant::now();
    let deadline = start + options.timeout;
    // With thousands of LoadBalancers the apiserver may time the request out while it works
    // through them (its 60 s handler timeout): asked again until the deadline.
    while let Err(e) = apis
        .lbs
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
    {
        if Instant::now() > deadline {
            return Err(api_err("delete the LoadBalancers")(e));
        }
        tracing::warn!("deleting the LoadBalancers, asked again: {e}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    loop {
        let left = apis
            .lbs
            .list_metadata(&ListParams::default().limit(1))
            .await
            .map_err(api_err("list the LoadBalancers"))?;
        if left.items.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            return Err(BenchError::Setup(format!(
                "LoadBalancers left in {ns} after {:?}",
                options.timeout
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let gone = start.elapsed();
    release_capi_objects(apis).await?;
    namespaces
        .delete(ns, &DeleteParams::background())
        .await
        .map_err(api_err(format!("delete namespace {ns}")))?;
    while namespaces
        .get_opt(ns)
        .await
        .map_err(api_err(format!("get namespace {ns}")))?
        .is_some()
    {
        if Instant::now() > deadline {
            return Err(BenchError::Setup(format!(
                "namespace {ns} not gone after {:?}",
                options.timeout
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(gone)
}

/// Delete the Machines and Clusters and remove their finalizers. A Cluster API manager in the
/// cluster (the harness runs one) adds its finalizer to them but can never finish deleting them:
/// no provider serves the DockerCluster and DockerMachine they refer to, and the namespace would
/// stay terminating. Once deleting, no new finalizer can be added, so one pass suffices.
async fn release_capi_objects(apis: &Apis) -> Result<(), BenchError> {
    let release = json!({"metadata": {"finalizers": null}});
    for (api, what) in [(&apis.machines, "Machines"), (&apis.clusters, "Clusters")] {
        // One request for all of them, which a busy apiserver may time out (600 Machines, each
        // through Cluster API's webhooks, took over its 60 s once); then each one it did not get to.
        if let Err(e) = api
            .delete_collection(&DeleteParams::background(), &ListParams::default())
            .await
        {
            eprintln!("deleting the {what} in one request failed ({e}); deleting them one by one");
        }
        let left = api
            .list_metadata(&ListParams::default())
            .await
            .map_err(api_err(format!("list the {what}")))?;
        for object in left
            .items
            .iter()
            .filter(|o| o.metadata.deletion_timestamp.is_none())
        {
            let name = object.name_any();
            match api.delete(&name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(api_err(format!("delete {name}"))(e)),
            }
        }
        for object in left.items.iter().filter(|o| !o.finalizers().is_empty()) {
            let name = object.name_any();
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&release))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(api_err(format!("release {name}"))(e)),
            }
        }
    }
    Ok(())
}
