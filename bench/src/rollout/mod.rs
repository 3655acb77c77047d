//! `capi-lb-bench rollout`: requests through a control-plane load balancer capi-lb manages while
//! every control-plane Machine is replaced, as KubeadmControlPlane replaces them (a new Machine up
//! and active in the load balancer, then the oldest deleted), and how many of them failed.
//!
//! Everything on the path is real: the Machines are Cluster API's (its manager runs the deletion,
//! honouring capi-lb's hooks), each Machine's infrastructure is a real kube-apiserver on its own
//! address of the harness's data-plane range (all sharing one etcd of the run, on the first address),
//! started before its BenchMachine is provisioned and stopped with SIGTERM only when Cluster API
//! deletes the BenchMachine (after the hooks: [`fleet`]); the load balancer is the Service provider
//! on MetalLB, whose address kube-proxy (nftables) forwards to the EndpointSlice capi-lb writes;
//! the clients resolve the published name `<lb>-ext.<namespace>.svc.cluster.local` through
//! CoreDNS and send `GET /api/v1/namespaces/default` with the Cluster's admin certificate
//! ([`load`]). The controller runs beside (the caller's: a child process for the benchmark, in
//! the test process for the end-to-end test).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use capi_lb_api::constants::ANNOTATION_PAUSED;
use capi_lb_api::loadbalancer::TargetHealth;
use capi_lb_api::target::TargetKeys;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

pub mod dns;
pub mod fleet;
mod host;
pub mod load;
mod objects;
mod report;

use crate::capi::provider;
use crate::launch::{
    BenchError, Controller, Launch, api_err, apply, client_of, fresh_namespace, install_for,
};
use fleet::{ApiServer, Etcd, Pki, Settings};
use k8s_openapi::api::core::v1::Namespace;
use load::{Endpoint, Load, Resolution};
pub use objects::Provider;
use objects::{DNS_TTL, cluster_documents, machine_documents};
pub use report::{Failover, Replacement, Report, render};

/// The Cluster, its LoadBalancer and their infrastructure objects are all named this.
pub const NAME: &str = "rollout";
/// The finalizer the benchmark keeps on each BenchMachine until its API server stopped.
pub const FINALIZER: &str = "bench.capi-lb.dev/api-server";
const BOOTSTRAP_SECRET: &str = "rollout-bootstrap";

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// How the API servers run.
    pub fleet: Settings,
    /// The addresses of the run (on `lo`): etcd's, then one per Machine ever created.
    pub addresses: Vec<IpAddr>,
    /// Control-plane Machines.
    pub machines: usize,
    /// Machines replaced, one at a time (the oldest first).
    pub replacements: usize,
    /// Clients of each kind.
    pub clients_per_kind: usize,
    /// Requests a second per client.
    pub rate: f64,
    /// The provider of the load balancer.
    pub provider: Provider,
    /// The cluster's DNS server (CoreDNS), which the clients resolve the published name with.
    pub dns: SocketAddr,
    /// The cluster's domain.
    pub cluster_domain: String,
    /// The LoadBalancer's `drainSeconds`.
    pub drain_seconds: i32,
    /// Load before the first replacement and after the last.
    pub settle: Duration,
    /// Give up on a step (a Machine active, a Machine gone) after this long.
    pub step_timeout: Duration,
    /// The comparison without capi-lb's part in deletions: before each old Machine is deleted,
    /// the LoadBalancer is paused and capi-lb's deletion hooks are taken off the Machine, as a
    /// load balancer that does not follow Machine deletions (its member stays until someone
    /// removes it).
    pub unmanaged: bool,
    /// The LoadBalancer's `spec.targetHealth` (none when `None`).
    pub target_health: Option<TargetHealth>,
    /// A failover instead of a rollout: after the settle, the first Machine's API server is killed
    /// without warning (SIGKILL), and the run waits until capi-lb takes it out (target health),
    /// then settles again. `replacements` are not made.
    pub failover: bool,
    /// A stopped (or killed) API server's host vanishes too: its address drops every packet from
    /// then on, as a deleted VM's does, instead of refusing connections ([`host`]).
    pub black_hole: bool,
}

/// The APIs the run writes to.
struct Apis {
    machines: Api<DynamicObject>,
    bench_machines: Api<DynamicObject>,
    bench_clusters: Api<DynamicObject>,
    load_balancers: Api<DynamicObject>,
    client: Client,
    ns: String,
}

impl Apis {
    fn new(client: &Client, ns: &str) -> Self {
        let gvk =
            |g: &str, v: &str, k: &str| ApiResource::from_gvk(&GroupVersionKind::gvk(g, v, k));
        Apis {
            machines: Api::namespaced_with(
                client.clone(),
                ns,
                &gvk("cluster.x-k8s.io", "v1beta2", "Machine"),
            ),
            bench_machines: Api::namespaced_with(
                client.clone(),
                ns,
                &provider::resource(provider::MACHINE_KIND),
            ),
            bench_clusters: Api::namespaced_with(
                client.clone(),
                ns,
                &provider::resource(provider::CLUSTER_KIND),
            ),
            load_balancers: Api::namespaced_with(
                client.clone(),
                ns,
                &gvk("loadbalancer.cluster.x-k8s.io", "v1alpha1", "LoadBalancer"),
            ),
            client: client.clone(),
            ns: ns.to_string(),
        }
    }

    async fn create(&self, mut doc: Value) -> Result<(), BenchError> {
        doc["metadata"]["namespace"] = json!(self.ns);
        apply(&self.client, &doc).await
    }
}

/// Poll `check` every 100 ms until it gives a value, or fail naming `what` after `within`.
async fn until<T, F, Fut>(what: &str, within: Duration, mut check: F) -> Result<T, BenchError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, BenchError>>,
{
    let began = Instant::now();
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if began.elapsed() > within {
            return Err(BenchError::Setup(format!("{what}: not after {within:?}")));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The rollout's state: the API servers by Machine name, the addresses not used yet.
struct Fleet {
    etcd: Etcd,
    pki: Pki,
    settings: Settings,
    servers: BTreeMap<String, ApiServer>,
    free: std::vec::IntoIter<IpAddr>,
    /// With `black_hole`: where vanished hosts' addresses go.
    gone: Option<host::BlackHole>,
}

impl Fleet {
    /// Machine `address`'s host is gone (with `black_hole`; nothing otherwise).
    fn vanish(&self, address: IpAddr) -> Result<(), BenchError> {
        self.gone.as_ref().map_or(Ok(()), |g| g.vanish(address))
    }
}

impl Fleet {
    /// Start Machine `name`: its API server, then (once that serves) its objects, provisioned as
    /// an infrastructure provider would once the server is up.
    async fn add(&mut self, apis: &Apis, name: &str, within: Duration) -> Result<(), BenchError> {
        let address = self.free.next().ok_or_else(|| {
            BenchError::Setup("no address left for another API server (--addresses)".into())
        })?;
        let mut server = ApiServer::start(&self.settings, &self.etcd, &self.pki, address)?;
        server.wait_ready(&self.pki, within).await?;
        self.servers.insert(name.to_string(), server);
        for doc in machine_documents(name, address) {
            apis.create(doc).await?;
        }
        let provision = [
            (
                false,
                json!({"spec": {"providerID": format!("bench://{}/{name}", apis.ns)}}),
            ),
            (
                true,
                json!({"status": {"initialization": {"provisioned": true},
                                     "addresses": [{"type": "InternalIP", "address": address.to_string()}]}}),
            ),
        ];
        for (status, patch) in provision {
            let params = PatchParams::default();
            if status {
                apis.bench_machines
                    .patch_status(name, &params, &Patch::Merge(&patch))
                    .await
            } else {
                apis.bench_machines
                    .patch(name, &params, &Patch::Merge(&patch))
                    .await
            }
            .map_err(api_err(format!("provisioning BenchMachine {name}")))?;
        }
        Ok(())
    }
}

/// Machine `name`'s state in the LoadBalancer, as capi-lb annotates it.
async fn target_state(
    apis: &Apis,
    keys: &TargetKeys,
    name: &str,
) -> Result<Option<String>, BenchError> {
    Ok(apis
        .machines
        .get_opt(name)
        .await
        .map_err(api_err(format!("reading Machine {name}")))?
        .and_then(|m| m.annotations().get(&keys.state).cloned()))
}

/// Pause the LoadBalancer (Cluster API's annotation), or resume it.
async fn pause(apis: &Apis, paused: bool) -> Result<(), BenchError> {
    let value = if paused { json!("true") } else { Value::Null };
    apis.load_balancers
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {ANNOTATION_PAUSED: value}}})),
        )
        .await
        .map_err(api_err("pausing the LoadBalancer"))?;
    Ok(())
}

/// [`Options::unmanaged`]: the LoadBalancer paused, then capi-lb's hooks taken off Machine `name`.
async fn unmanage(apis: &Apis, keys: &TargetKeys, name: &str) -> Result<(), BenchError> {
    pause(apis, true).await?;
    // A paused LoadBalancer's reconcile that was in flight may still write once.
    tokio::time::sleep(Duration::from_secs(1)).await;
    apis.machines
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {
                keys.pre_drain.as_str(): null, keys.pre_terminate.as_str(): null}}})),
        )
        .await
        .map_err(api_err(format!(
            "taking capi-lb's hooks off Machine {name}"
        )))?;
    Ok(())
}

/// Stop Machine `name`'s API server once Cluster API deletes its BenchMachine, then let the
/// BenchMachine go: (time from `deleted` to the BenchMachine's deletion, SIGTERM to exit).
async fn stop_when_deleted(
    apis: &Apis,
    server: ApiServer,
    name: &str,
    deleted: Instant,
    within: Duration,
) -> Result<(Duration, Duration), BenchError> {
    let api = apis.bench_machines.clone();
    until(
        &format!("Cluster API deletes BenchMachine {name}"),
        within,
        || {
            let api = api.clone();
            async move {
                let o = api
                    .get_opt(name)
                    .await
                    .map_err(api_err(format!("reading BenchMachine {name}")))?;
                Ok(match o {
                    Some(o) if o.metadata.deletion_timestamp.is_none() => None,
                    _ => Some(()),
                })
            }
        },
    )
    .await?;
    let left = deleted.elapsed();
    let stopped = server.terminate(within).await?;
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
    )
    .await
    .map_err(api_err(format!("releasing BenchMachine {name}")))?;
    Ok((left, stopped))
}

/// Run the rollout in namespace `ns` (which the caller made, with capi-lb's CRDs, the benchmark's
/// infrastructure kinds ([`provider::install`]) and a controller running the Service provider).
pub async fn run(client: &Client, ns: &str, options: &Options) -> Result<Report, BenchError> {
    let apis = Apis::new(client, ns);
    let ext = match &options.provider {
        Provider::Service { .. } => format!("{NAME}-ext.{ns}.svc.{}", options.cluster_domain),
        Provider::Dns { zone, .. } => format!("{NAME}.{ns}.{zone}"),
    };
    let mut dir = options.fleet.log_dir.clone();
    dir.push(ns);
    let settings = Settings {
        log_dir: dir.clone(),
        ..options.fleet.clone()
    };
    let mut free = options.addresses.clone().into_iter();
    let etcd_address = free
        .next()
        .ok_or_else(|| BenchError::Setup("no address for etcd (--addresses)".into()))?;
    let pki = Pki::create(
        &dir.join("pki"),
        std::slice::from_ref(&ext),
        &options.addresses,
    )?;
    host::revive(&options.addresses);
    let etcd = Etcd::start(&settings, etcd_address, options.step_timeout).await?;
    let mut fleet = Fleet {
        etcd,
        pki,
        settings,
        servers: BTreeMap::new(),
        free,
        gone: None,
    };
    if options.black_hole {
        fleet.gone = Some(host::BlackHole::create(ns)?);
    }
    let result = rollout(&apis, options, &mut fleet, &ext).await;
    // Whatever happened: the servers stop (dropping one kills it), the BenchMachines lose the
    // benchmark's finalizer (so the namespace can go), etcd stops and its data goes.
    let servers = std::mem::take(&mut fleet.servers);
    for (_, server) in servers {
        server.kill().await;
    }
    if let Ok(list) = apis.bench_machines.list(&Default::default()).await {
        for o in list.items {
            if o.finalizers().iter().any(|f| f == FINALIZER) {
                let _ = apis
                    .bench_machines
                    .patch(
                        &o.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
                    )
                    .await;
            }
        }
    }
    fleet.etcd.stop().await;
    result
}

async fn rollout(
    apis: &Apis,
    options: &Options,
    fleet: &mut Fleet,
    ext: &str,
) -> Result<Report, BenchError> {
    let ns = apis.ns.as_str();
    let ext = ext.to_string();
    let keys = TargetKeys::new(ns, NAME);

    for doc in cluster_documents(options, &ext) {
        apis.create(doc).await?;
    }
    apis.bench_clusters
        .patch_status(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"initialization": {"provisioned": true}}})),
        )
        .await
        .map_err(api_err("provisioning the BenchCluster"))?;
    let mut order: Vec<String> = Vec::new();
    for i in 0..options.machines {
        let name = format!("{NAME}-{i}");
        fleet.add(apis, &name, options.step_timeout).await?;
        order.push(name);
    }
    // Every Machine active, and the published name answering the load balancer's address.
    for name in &order {
        until(
            &format!("Machine {name} active"),
            options.step_timeout,
            || async {
                Ok(
                    (target_state(apis, &keys, name).await?.as_deref() == Some("active"))
                        .then_some(()),
                )
            },
        )
        .await?;
    }
    let endpoint = match &options.provider {
        Provider::Service { .. } => {
            let lb_address: IpAddr = until(
                "the LoadBalancer's address",
                options.step_timeout,
                || async {
                    let lb = apis
                        .load_balancers
                        .get_opt(NAME)
                        .await
                        .map_err(api_err("reading the LoadBalancer"))?;
                    Ok(lb
                        .and_then(|lb| {
                            lb.data["status"]["addresses"][0]["address"]
                                .as_str()
                                .map(str::to_string)
                        })
                        .and_then(|a| a.parse().ok()))
                },
            )
            .await?;
            let resolved = until(
                &format!("{ext} resolves to {lb_address}"),
                options.step_timeout,
                || async {
                    let ips = dns::lookup_a(options.dns, &ext).await?;
                    Ok(ips
                        .first()
                        .map(|ip| IpAddr::V4(*ip))
                        .filter(|ip| *ip == lb_address))
                },
            )
            .await?;
            Endpoint {
                host: ext.clone(),
                port: fleet::PORT,
                resolution: Resolution::Fixed(resolved),
            }
        }
        Provider::Dns { server, .. } => {
            // Every Machine a record, as the authoritative server answers.
            let want = order.len();
            until(
                &format!("{ext} answers {want} records at {server}"),
                options.step_timeout,
                || async {
                    let ips = dns::lookup_a(*server, &ext).await?;
                    Ok((ips.len() == want).then_some(()))
                },
            )
            .await?;
            Endpoint {
                host: ext.clone(),
                port: fleet::PORT,
                resolution: Resolution::Dns(*server),
            }
        }
    };

    let load_began = Instant::now();
    let load = Load::start(
        &endpoint,
        &fleet.pki,
        options.clients_per_kind,
        options.rate,
    )?;
    tokio::time::sleep(options.settle).await;
    let mut failover = None;
    if options.failover {
        let victim = order
            .first()
            .cloned()
            .ok_or_else(|| BenchError::Setup("a failover needs a Machine (--machines)".into()))?;
        let server = fleet
            .servers
            .remove(&victim)
            .ok_or_else(|| BenchError::Setup(format!("no API server for Machine {victim}")))?;
        let killed_at = load_began.elapsed();
        let killed = Instant::now();
        let address = server.address;
        server.kill().await;
        fleet.vanish(address)?;
        let state = until(
            &format!("Machine {victim} taken out after its API server was killed"),
            options.step_timeout,
            || async {
                Ok(target_state(apis, &keys, &victim)
                    .await?
                    .filter(|s| s != "active"))
            },
        )
        .await?;
        failover = Some(Failover {
            machine: victim,
            killed_at,
            taken_out: killed.elapsed(),
            state,
        });
    }
    let replacements_wanted = if options.failover {
        0
    } else {
        options.replacements
    };
    let mut replacements = Vec::new();
    for next in options.machines..options.machines + replacements_wanted {
        let old = order.remove(0);
        let new = format!("{NAME}-{next}");
        let began = Instant::now();
        fleet.add(apis, &new, options.step_timeout).await?;
        until(
            &format!("Machine {new} active"),
            options.step_timeout,
            || async {
                Ok(
                    (target_state(apis, &keys, &new).await?.as_deref() == Some("active"))
                        .then_some(()),
                )
            },
        )
        .await?;
        let new_active = began.elapsed();
        order.push(new.clone());

        let server = fleet
            .servers
            .remove(&old)
            .ok_or_else(|| BenchError::Setup(format!("no API server for Machine {old}")))?;
        if options.unmanaged {
            unmanage(apis, &keys, &old).await?;
        }
        let deleted = Instant::now();
        apis.machines
            .delete(&old, &DeleteParams::default())
            .await
            .map_err(api_err(format!("deleting Machine {old}")))?;
        let address = server.address;
        let (left, stopped) =
            stop_when_deleted(apis, server, &old, deleted, options.step_timeout).await?;
        fleet.vanish(address)?;
        until(
            &format!("Machine {old} gone"),
            options.step_timeout,
            || async {
                Ok(apis
                    .machines
                    .get_opt(&old)
                    .await
                    .map_err(api_err(format!("reading Machine {old}")))?
                    .is_none()
                    .then_some(()))
            },
        )
        .await?;
        if options.unmanaged {
            pause(apis, false).await?;
        }
        replacements.push(Replacement {
            old,
            new,
            new_active,
            left,
            stopped,
            gone: deleted.elapsed(),
        });
    }
    tokio::time::sleep(options.settle).await;
    let tallies = load.finish().await;
    let report = Report {
        provider: match &options.provider {
            Provider::Service { class } => {
                format!("Service provider, MetalLB class {class}, kube-proxy nftables")
            }
            Provider::Dns { server, .. } => format!(
                "DNS provider, ExternalDNS into BIND at {server}, TTL {DNS_TTL} s, clients resolving at every new connection"
            ),
        },
        endpoint: ext,
        rate: options.rate,
        clients_per_kind: options.clients_per_kind,
        tallies,
        replacements,
        load: load_began.elapsed(),
        unmanaged: options.unmanaged,
        black_hole: options.black_hole,
        failover,
    };
    // The Machines go; their servers are stopped by the caller.
    for name in order {
        let _ = apis.machines.delete(&name, &DeleteParams::default()).await;
    }
    Ok(report)
}

/// The benchmark: capi-lb's CRDs and the Service provider's RBAC, the benchmark's infrastructure
/// kinds, a fresh namespace, `capi-lb run --providers service` in it as a child process, the
/// rollout, then the controller stopped and the namespace deleted (unless `launch.keep`).
pub async fn bench(launch: &Launch, options: &Options) -> Result<Report, BenchError> {
    let (client, _) = client_of(&launch.kubeconfig).await?;
    let providers = [options.provider.name()];
    install_for(&client, launch, &providers).await?;
    provider::install(&client).await?;
    let ns = fresh_namespace(&client, "capi-lb-bench-rollout").await?;
    let result = match Controller::start_with(launch, &ns, &providers).await {
        Ok(controller) => {
            let result = run(&client, &ns, options).await;
            let _ = controller.stop().await;
            result
        }
        Err(e) => Err(e),
    };
    if !launch.keep {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
        // Objects being deleted get no new finalizer (Cluster API adds its own to live ones).
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline && namespaces.get_opt(&ns).await.is_ok_and(|n| n.is_some())
        {
            objects::release_finalizers(&client, &ns).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    result
}

/// `count` addresses of `range` from its `first`th host address on (the harness's node has the
/// first; the benchmark's default is the 16th; tests running at the same time take blocks of
/// their own).
pub fn addresses(range: ipnet::Ipv4Net, first: usize, count: usize) -> Vec<IpAddr> {
    range
        .hosts()
        .skip(first.saturating_sub(1))
        .take(count)
        .map(IpAddr::V4)
        .collect()
}

/// The folder the API servers' logs and PKI go to by default.
pub fn default_log_dir() -> PathBuf {
    std::env::temp_dir().join("capi-lb-bench-rollout")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_addresses_skip_the_node_and_stay_in_the_range() {
        let a = addresses("10.199.0.0/24".parse().unwrap(), 16, 3);
        assert_eq!(
            a,
            ["10.199.0.16", "10.199.0.17", "10.199.0.18"].map(|s| s.parse::<IpAddr>().unwrap())
        );
        assert_eq!(addresses("10.199.0.0/28".parse().unwrap(), 16, 8).len(), 0);
    }

    #[test]
    fn a_bench_machine_keeps_its_finalizer_and_address() {
        let docs = machine_documents("rollout-0", "10.199.0.16".parse().unwrap());
        assert_eq!(docs[0]["metadata"]["finalizers"], json!([FINALIZER]));
        assert_eq!(
            docs[0]["metadata"]["annotations"][provider::ADDRESS_ANNOTATION],
            "10.199.0.16"
        );
        assert_eq!(docs[1]["spec"]["infrastructureRef"]["name"], "rollout-0");
    }
}
