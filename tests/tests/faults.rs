//! Faults on the real control plane (`tests/k8s/harness.sh`, and the Octavia harness): capi-lb's
//! controller runs as a separate process with its ServiceAccount's credentials and is killed with
//! SIGKILL at random moments, many times, while LoadBalancers are created, changed (ports and
//! members), swapped between providers and deleted. Afterwards every LoadBalancer converges, and
//! nothing leaks: exactly one cloud load balancer per LoadBalancer (none after deletion), no deletion
//! hook left on a Machine, no `-ext` object without a live owner.
//!
//! The controller process is this test binary itself, started again with
//! `CAPI_LB_FAULTS_CONTROLLER` set: it then runs `capi-lb run` with the arguments it was given. The
//! scenarios run one after another (they kill processes and time things); a name given on the
//! command line runs the scenarios whose names contain it. `CAPI_LB_FAULTS_SEED` replays the kill
//! times of a run (each scenario prints its seed). docs/reliability.md has the figures.
// Integration tests: helpers panic on broken fixtures, which is the failure we want.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use capi_lb_api::capi::Machine;
use capi_lb_api::constants::{
    ENDPOINTSLICE_MANAGED_BY_VALUE, LABEL_ENDPOINTSLICE_MANAGED_BY, LABEL_MANAGED_BY,
    MANAGED_BY_VALUE, PRE_DRAIN_HOOK_PREFIX, PRE_TERMINATE_HOOK_PREFIX,
};
use capi_lb_api::kubedc::EIp;
use capi_lb_api::{KubeDCLoadBalancer, LoadBalancer};
use capi_lb_tests::k8s::{
    TestNs, cluster, install_capi_crds, install_kube_dc_crds, load_balancer, machine, metallb,
    release_all_machines, set_machine_ip,
};
use capi_lb_tests::kubedc_sim::KubeDcSim;
use capi_lb_tests::octavia;
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

/// Set in the environment of the controller processes the scenarios start.
const CHILD: &str = "CAPI_LB_FAULTS_CONTROLLER";

/// `capi-lb run`'s options, parsed in the controller process.
#[derive(Parser, Debug)]
struct ChildArgs {
    #[command(flatten)]
    run: capi_lb::run::RunOptions,
}

type Scenario = fn() -> Pin<Box<dyn Future<Output = ()> + Send>>;

fn scenarios() -> Vec<(&'static str, Scenario)> {
    vec![
        (
            "sigkill_while_kube_dc_load_balancers_are_created_changed_swapped_and_deleted",
            || Box::pin(kube_dc_under_sigkill()),
        ),
        (
            "sigkill_while_octavia_load_balancers_are_created_changed_and_deleted",
            || Box::pin(octavia_under_sigkill()),
        ),
        (
            "the_apiserver_and_etcd_stopped_mid_reconcile_and_restarted",
            || Box::pin(apiserver_outage()),
        ),
        (
            "octavia_and_keystone_down_for_a_minute_then_a_revoked_credential",
            || Box::pin(octavia_outage_and_revoked_credential()),
        ),
        (
            "the_leader_killed_while_200_load_balancers_converge",
            || Box::pin(leader_failover_under_load()),
        ),
    ]
}

fn main() -> ExitCode {
    if std::env::var_os(CHILD).is_some() {
        return controller_process();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        for (name, _) in scenarios() {
            println!("{name}: test");
        }
        return ExitCode::SUCCESS;
    }
    let filter = args.iter().find(|a| !a.starts_with('-')).cloned();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut failed = Vec::new();
    let mut ran = 0;
    for (name, scenario) in scenarios() {
        if filter.as_ref().is_some_and(|f| !name.contains(f.as_str())) {
            continue;
        }
        ran += 1;
        println!("test {name} ...");
        let started = Instant::now();
        let outcome = runtime.block_on(async { tokio::spawn(scenario()).await });
        match outcome {
            Ok(()) => println!("test {name} ... ok ({:.1?})", started.elapsed()),
            Err(e) => {
                println!("test {name} ... FAILED ({:.1?}): {e}", started.elapsed());
                failed.push(name);
            }
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed",
        if failed.is_empty() { "ok" } else { "FAILED" },
        ran - failed.len(),
        failed.len()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The controller process: `capi-lb run` with this process's arguments, logging to stderr.
fn controller_process() -> ExitCode {
    let args = ChildArgs::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    capi_lb::install_crypto_provider();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    match runtime.block_on(capi_lb::run::run(args.run)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("capi-lb: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A soak run (`CAPI_LB_FAULTS_SOAK=1`): the kills go on for five minutes, the failover has 200
/// LoadBalancers.
fn soak() -> bool {
    std::env::var("CAPI_LB_FAULTS_SOAK").is_ok_and(|v| v == "1")
}

// --- the controller as a process, and its killer ------------------------------------------------

/// A small deterministic generator (xorshift64*), so that a run's kill times can be replayed.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn seeded(scenario: &str) -> Self {
        let seed = std::env::var("CAPI_LB_FAULTS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        println!("{scenario}: CAPI_LB_FAULTS_SEED={seed}");
        Self(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A duration between `min` and `max`.
    fn between(&mut self, min: Duration, max: Duration) -> Duration {
        let span = (max - min).as_millis() as u64;
        min + Duration::from_millis(self.next() % span.max(1))
    }
}

/// `capi-lb run` as a child process (this binary, see [`controller_process`]) with capi-lb's
/// ServiceAccount credentials, its output appended to `log`.
struct Controller {
    args: Vec<String>,
    log: PathBuf,
    kubeconfig: PathBuf,
    child: Option<tokio::process::Child>,
}

impl Controller {
    /// On the cluster under test.
    fn new(args: Vec<String>, log: PathBuf) -> Self {
        let kubeconfig = cluster()
            .controller_kubeconfig
            .clone()
            .expect("the harness gives capi-lb's ServiceAccount kubeconfig");
        Self::on(kubeconfig, args, log)
    }

    /// On the cluster `kubeconfig` (capi-lb's ServiceAccount there) leads to.
    fn on(kubeconfig: PathBuf, args: Vec<String>, log: PathBuf) -> Self {
        let _ = std::fs::remove_file(&log);
        Self {
            args,
            log,
            kubeconfig,
            child: None,
        }
    }

    fn start(&mut self) {
        let kubeconfig = self.kubeconfig.clone();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = tokio::process::Command::new(std::env::current_exe().unwrap())
            .env(CHILD, "1")
            .env("KUBECONFIG", kubeconfig)
            .env_remove("CAPI_LB_FAULTS_SEED")
            .args(&self.args)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// SIGKILL, and reap. Fails the test if the process had exited on its own (a crash).
    async fn kill(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the controller exited on its own ({status}); log {}:\n{}",
                self.log.display(),
                self.tail()
            );
        }
        child.kill().await.unwrap();
    }

    fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

/// Kills the controller at random moments (every `min`..`max`) and starts it again at once, until
/// stopped; returns the controller (running) and how many times it was killed.
struct Killer {
    stop: Arc<AtomicBool>,
    kills: Arc<AtomicU32>,
    task: tokio::task::JoinHandle<Controller>,
}

impl Killer {
    fn spawn(mut controller: Controller, mut rng: Rng, min: Duration, max: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let kills = Arc::new(AtomicU32::new(0));
        let (stopping, counting) = (stop.clone(), kills.clone());
        let task = tokio::spawn(async move {
            controller.start();
            while !stopping.load(Ordering::SeqCst) {
                tokio::time::sleep(rng.between(min, max)).await;
                controller.kill().await;
                counting.fetch_add(1, Ordering::SeqCst);
                // Sometimes dead for a while (a node failure), mostly restarted at once.
                let down = if rng.next().is_multiple_of(4) {
                    rng.between(Duration::from_millis(500), Duration::from_secs(3))
                } else {
                    Duration::ZERO
                };
                tokio::time::sleep(down).await;
                controller.start();
            }
            controller
        });
        Self { stop, kills, task }
    }

    /// Stop killing; the controller started last keeps running.
    async fn stop(self) -> (Controller, u32) {
        self.stop.store(true, Ordering::SeqCst);
        let controller = self.task.await.unwrap();
        (controller, self.kills.load(Ordering::SeqCst))
    }
}

fn controller_args(t: &TestNs, providers: &str) -> Vec<String> {
    [
        "--namespace",
        &t.ns,
        "--providers",
        providers,
        // Only watches, requeues and restarts drive it.
        "--resync-seconds",
        "3600",
        "--metrics-bind-address",
        "off",
        "--concurrency",
        "2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn log_path(scenario: &str) -> PathBuf {
    std::env::temp_dir().join(format!("capi-lb-faults-{scenario}.log"))
}

// --- helpers -----------------------------------------------------------------------------------

async fn create_machine(t: &TestNs, name: &str, lb: &str, ip: &str) {
    t.create(machine(
        name,
        json!({"loadbalancer.cluster.x-k8s.io/name": lb}),
    ))
    .await;
    set_machine_ip(t, name, ip).await;
}

fn hooks(machine: &Machine) -> Vec<String> {
    machine
        .annotations()
        .keys()
        .filter(|k| {
            k.starts_with(PRE_DRAIN_HOOK_PREFIX) || k.starts_with(PRE_TERMINATE_HOOK_PREFIX)
        })
        .cloned()
        .collect()
}

/// Delete Machine `name` and let it go once capi-lb released its deletion hooks, as Cluster API
/// would (in the background).
fn delete_machine(t: &TestNs, name: &str) -> tokio::task::JoinHandle<()> {
    let machines: Api<Machine> = t.api();
    let (client, ns, name) = (t.client.clone(), t.ns.clone(), name.to_string());
    tokio::spawn(async move {
        machines
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
        let started = Instant::now();
        loop {
            match machines.get_opt(&name).await.unwrap() {
                None => return,
                Some(m) if hooks(&m).is_empty() => break,
                Some(_) => {}
            }
            assert!(
                started.elapsed() < Duration::from_secs(300),
                "the deletion hooks of Machine {name} were never released"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let patch = json!({"metadata": {"finalizers": null}});
        match Api::<Machine>::namespaced(client, &ns)
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => panic!("releasing Machine {name}: {e}"),
        }
    })
}

/// Poll `check` every 500 ms until it gives `Ok`, at most `limit`; panics with its last complaint.
async fn converge<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let started = Instant::now();
    loop {
        match check().await {
            Ok(v) => return v,
            Err(why) if started.elapsed() > limit => {
                panic!("{what}: not after {limit:?}: {why}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// Every LoadBalancer of `expected` (name -> active targets) Ready with exactly those targets active,
/// and no other LoadBalancer left.
async fn load_balancers_converged(
    t: &TestNs,
    expected: &BTreeMap<String, Vec<String>>,
) -> Result<BTreeMap<String, LoadBalancer>, String> {
    let listed = t.api::<LoadBalancer>().list(&ListParams::default()).await;
    let listed = listed.map_err(|e| e.to_string())?.items;
    let names: BTreeSet<String> = listed.iter().map(|l| l.name_any()).collect();
    let want: BTreeSet<String> = expected.keys().cloned().collect();
    if names != want {
        return Err(format!("LoadBalancers {names:?}, want {want:?}"));
    }
    let mut out = BTreeMap::new();
    for lb in listed {
        let name = lb.name_any();
        let status = lb.status.clone().unwrap_or_default();
        let mut active = status.active_targets.clone();
        active.sort();
        if !status.ready || active != expected[&name] || !status.targets.iter().eq(active.iter()) {
            return Err(format!(
                "{name}: ready {}, targets {:?}, active {active:?}, want active {:?}",
                status.ready, status.targets, expected[&name]
            ));
        }
        out.insert(name, lb);
    }
    Ok(out)
}

/// Every `-ext` Service capi-lb publishes in the namespace has a controller owner reference to a
/// LoadBalancer that exists (by UID), and every EndpointSlice it manages one to a Service of its
/// that exists; returns how many `-ext` Services and EndpointSlices there are.
async fn published_objects_owned(t: &TestNs) -> Result<usize, String> {
    let live = |refs: &[OwnerReference], kind: &str, uids: &BTreeSet<String>| {
        refs.iter()
            .any(|r| r.kind == kind && r.controller == Some(true) && uids.contains(&r.uid))
    };
    let lbs: BTreeSet<String> = t
        .api::<LoadBalancer>()
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
        .iter()
        .filter_map(|l| l.uid())
        .collect();
    let managed = ListParams::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}"));
    let mut services = BTreeSet::new();
    let mut published = 0;
    for s in t
        .api::<Service>()
        .list(&managed)
        .await
        .map_err(|e| e.to_string())?
    {
        // The Services providers make (kube-dc's, the Service provider's) are counted by the
        // scenarios; their EndpointSlices are capi-lb's too.
        services.insert(s.uid().unwrap_or_default());
        if !s.name_any().ends_with("-ext") {
            continue;
        }
        published += 1;
        if !live(s.owner_references(), "LoadBalancer", &lbs) {
            return Err(format!(
                "Service {} has no live LoadBalancer owner: {:?}",
                s.name_any(),
                s.owner_references()
            ));
        }
    }
    let slices = ListParams::default().labels(&format!(
        "{LABEL_ENDPOINTSLICE_MANAGED_BY}={ENDPOINTSLICE_MANAGED_BY_VALUE}"
    ));
    let slices = t
        .api::<EndpointSlice>()
        .list(&slices)
        .await
        .map_err(|e| e.to_string())?
        .items;
    for s in &slices {
        if !live(s.owner_references(), "Service", &services) {
            return Err(format!(
                "EndpointSlice {} has no live Service owner: {:?}",
                s.name_any(),
                s.owner_references()
            ));
        }
    }
    Ok(published + slices.len())
}

/// The deletion hooks left on Machines, by Machine.
async fn hooks_left(t: &TestNs) -> BTreeMap<String, Vec<String>> {
    t.api::<Machine>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|m| (m.name_any(), hooks(m)))
        .filter(|(_, h)| !h.is_empty())
        .collect()
}

async fn delete_load_balancer(t: &TestNs, name: &str) {
    t.api::<LoadBalancer>()
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

// --- kube-dc (simulated) and MetalLB ------------------------------------------------------------

fn kube_dc_infra(name: &str) -> Value {
    json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "KubeDCLoadBalancer",
           "metadata": {"name": name}, "spec": {"externalNetworkType": "cloud"}})
}

fn kube_dc_lb(name: &str) -> Value {
    let mut lb = load_balancer(
        name,
        name,
        json!({"clusterName": "demo", "drainSeconds": 1}),
    );
    lb["spec"]["infrastructureRef"]["kind"] = json!("KubeDCLoadBalancer");
    lb
}

/// The kube-dc objects of the namespace: EIp names and the names of the Services bound to them.
async fn kube_dc_objects(t: &TestNs) -> (BTreeSet<String>, BTreeSet<String>) {
    let eips = t.api::<EIp>().list(&ListParams::default()).await.unwrap();
    let services = t
        .api::<Service>()
        .list(&ListParams::default())
        .await
        .unwrap();
    (
        eips.items.iter().map(|e| e.name_any()).collect(),
        services
            .items
            .iter()
            .filter(|s| {
                s.annotations()
                    .contains_key(capi_lb_providers::kubedc::BIND_ON_EIP)
            })
            .map(|s| s.name_any())
            .collect(),
    )
}

/// The Services of MetalLB's class in the namespace (the Service provider's).
async fn metallb_services(t: &TestNs) -> BTreeSet<String> {
    let class = metallb().class.clone();
    t.api::<Service>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|s| {
            s.spec
                .as_ref()
                .and_then(|s| s.load_balancer_class.as_deref())
                == Some(class.as_str())
        })
        .map(|s| s.name_any())
        .collect()
}

/// Eight LoadBalancers on kube-dc (its controller simulated against the real apiserver, writing
/// only what kube-dc's CRDs accept), two Machines each, while the controller process is SIGKILLed
/// every 0.3–3 s (sometimes staying dead for up to 3 s): all are created at once; three get a second
/// port; two have a Machine replaced (one added, one deleted: its hooks must be released after the
/// drain); one moves to the public network (a new EIp and Service made before the old ones go); two
/// are swapped to the Service provider on the harness's real MetalLB; two are deleted.
/// Then the kills stop and everything must converge with nothing leaked; then everything is deleted
/// and nothing may be left.
async fn kube_dc_under_sigkill() {
    let scenario = "kube-dc";
    let mut rng = Rng::seeded(scenario);
    let t = TestNs::new("faults-kdc").await;
    install_capi_crds(&t.client).await;
    install_kube_dc_crds(&t.client).await;
    capi_lb_tests::kubedc_sim::make_project(&t.client, &t.ns).await;
    let sim = KubeDcSim::new().spawn(t.client.clone(), t.ns.clone());
    let names: Vec<String> = (0..8).map(|i| format!("lb{i}")).collect();
    let controller = Controller::new(controller_args(&t, "kubedc,service"), log_path(scenario));
    let killer = Killer::spawn(
        controller,
        rng.clone(),
        Duration::from_millis(300),
        Duration::from_secs(3),
    );
    let started = Instant::now();

    // Created while the controller comes and goes.
    for (i, name) in names.iter().enumerate() {
        t.create(kube_dc_infra(name)).await;
        t.create(kube_dc_lb(name)).await;
        for m in 1..=2 {
            create_machine(&t, &format!("{name}-m{m}"), name, &format!("10.1.{i}.{m}")).await;
        }
    }
    tokio::time::sleep(rng.between(Duration::from_secs(2), Duration::from_secs(6))).await;
    // A second port.
    for name in &names[1..4] {
        capi_lb_tests::k8s::merge(
            &t.api::<LoadBalancer>(),
            name,
            json!({"spec": {"ports": [{"name": "api", "port": 6443},
                                      {"name": "konnectivity", "port": 8132}]}}),
        )
        .await;
    }
    tokio::time::sleep(rng.between(Duration::from_secs(1), Duration::from_secs(4))).await;
    // A Machine replaced.
    let mut deletions = Vec::new();
    for (i, name) in names.iter().enumerate().take(6).skip(4) {
        create_machine(&t, &format!("{name}-m3"), name, &format!("10.1.{i}.3")).await;
        deletions.push(delete_machine(&t, &format!("{name}-m1")));
    }
    tokio::time::sleep(rng.between(Duration::from_secs(1), Duration::from_secs(4))).await;
    // Moved to another network once its cloud EIp has an address (the controller may still be
    // catching up under the kills; before that, the first EIp would simply be made on the public
    // network): made before break, under the kills.
    converge(
        "lb5's cloud EIp allocated",
        Duration::from_secs(60),
        || async {
            let eip = t
                .api::<EIp>()
                .get_opt("lb5-eip")
                .await
                .map_err(|e| e.to_string())?;
            match eip.and_then(|e| e.status).filter(|s| s.ready) {
                Some(_) => Ok(()),
                None => Err("lb5-eip has no address yet".to_string()),
            }
        },
    )
    .await;
    capi_lb_tests::k8s::merge(
        &t.api::<KubeDCLoadBalancer>(),
        &names[5],
        json!({"spec": {"externalNetworkType": "public"}}),
    )
    .await;
    tokio::time::sleep(rng.between(Duration::from_secs(1), Duration::from_secs(4))).await;
    // Swapped to the Service provider (MetalLB).
    let class = metallb().class.clone();
    for name in &names[6..8] {
        t.create(json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                        "kind": "ServiceLoadBalancer", "metadata": {"name": format!("{name}-metal")},
                        "spec": {"loadBalancerClass": class, "allocateLoadBalancerNodePorts": false}}))
            .await;
        capi_lb_tests::k8s::merge(
            &t.api::<LoadBalancer>(),
            name,
            json!({"spec": {"infrastructureRef": {"kind": "ServiceLoadBalancer",
                                                  "name": format!("{name}-metal")}}}),
        )
        .await;
    }
    tokio::time::sleep(rng.between(Duration::from_secs(1), Duration::from_secs(4))).await;
    // Deleted.
    for name in [&names[0], &names[7]] {
        delete_load_balancer(&t, name).await;
    }
    // More kills while all of it settles (for longer in a soak run).
    tokio::time::sleep(Duration::from_secs(if soak() { 300 } else { 20 })).await;
    let (mut controller, kills) = killer.stop().await;
    let killed_for = started.elapsed();

    // Converged, nothing leaked.
    let expected: BTreeMap<String, Vec<String>> = names[1..7]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let ms: &[u32] = if (3..5).contains(&i) {
                &[2, 3]
            } else {
                &[1, 2]
            };
            (
                name.clone(),
                ms.iter().map(|m| format!("{name}-m{m}")).collect(),
            )
        })
        .collect();
    let recovery = Instant::now();
    converge("every LoadBalancer converged", Duration::from_secs(120), || async {
        let lbs = load_balancers_converged(&t, &expected).await?;
        let (eips, services) = kube_dc_objects(&t).await;
        let on_kube_dc: BTreeSet<String> = names[1..6].iter().cloned().collect();
        // lb5 moved to the public network: its new EIp and Service took the second names, and
        // the old ones are gone.
        let moved = |n: &String| if *n == names[5] { "-public" } else { "" };
        let want_eips: BTreeSet<String> =
            on_kube_dc.iter().map(|n| format!("{n}-eip{}", moved(n))).collect();
        let want_services: BTreeSet<String> =
            on_kube_dc.iter().map(|n| format!("{n}-lb{}", moved(n))).collect();
        if eips != want_eips || services != want_services {
            return Err(format!(
                "kube-dc has EIps {eips:?} and Services {services:?}, want one each for {on_kube_dc:?}"
            ));
        }
        let metal = metallb_services(&t).await;
        if metal.len() != 1 {
            return Err(format!("MetalLB Services {metal:?}, want one (lb6's)"));
        }
        for name in &names[1..4] {
            let mut ports: Vec<i32> = t
                .api::<Service>()
                .get(&format!("{name}-lb"))
                .await
                .map_err(|e| e.to_string())?
                .spec
                .and_then(|s| s.ports)
                .unwrap_or_default()
                .iter()
                .map(|p| p.port)
                .collect();
            ports.sort();
            if ports != [6443, 8132] {
                return Err(format!("{name}-lb has ports {ports:?}"));
            }
        }
        let published = published_objects_owned(&t).await?;
        if lbs.len() != 6 || published < 12 {
            return Err(format!("{published} published objects for {} LoadBalancers", lbs.len()));
        }
        Ok(())
    })
    .await;
    let recovered_in = recovery.elapsed();
    for d in deletions {
        d.await.unwrap();
    }
    let left = hooks_left(&t).await;
    let deleted_lbs_hooks: Vec<_> = left
        .iter()
        .filter(|(m, _)| m.starts_with("lb0-") || m.starts_with("lb7-"))
        .collect();
    assert!(
        deleted_lbs_hooks.is_empty(),
        "hooks of deleted LoadBalancers left: {deleted_lbs_hooks:?}"
    );

    // Everything deleted: nothing left anywhere.
    for name in &names[1..7] {
        delete_load_balancer(&t, name).await;
    }
    converge("everything deleted", Duration::from_secs(60), || async {
        let lbs = t
            .api::<LoadBalancer>()
            .list(&ListParams::default())
            .await
            .unwrap();
        let (eips, services) = kube_dc_objects(&t).await;
        let metal = metallb_services(&t).await;
        let published = published_objects_owned(&t).await?;
        let hooks = hooks_left(&t).await;
        if lbs.items.is_empty()
            && eips.is_empty()
            && services.is_empty()
            && metal.is_empty()
            && published == 0
            && hooks.is_empty()
        {
            Ok(())
        } else {
            Err(format!(
                "left: {} LoadBalancers, EIps {eips:?}, kube-dc Services {services:?}, \
                 MetalLB Services {metal:?}, {published} published objects, hooks {hooks:?}",
                lbs.items.len()
            ))
        }
    })
    .await;
    controller.kill().await;
    sim.stop().await;
    release_all_machines(&t).await;
    println!(
        "{scenario}: {kills} SIGKILLs in {killed_for:.1?} over 8 LoadBalancers; converged {recovered_in:.1?} \
         after the last; leaked: 0 EIps, 0 Services, 0 hooks"
    );
    t.finish().await;
}

// --- Octavia ------------------------------------------------------------------------------------

/// The Octavia load balancers tagged with the UID of LoadBalancer `uid` (not DELETED).
fn octavia_lbs(h: &octavia::Harness, uid: &str) -> Vec<Value> {
    h.lbs_tagged(&format!("{}={uid}", capi_lb_providers::provider::tags::UID))
}

/// Three LoadBalancers on the real Octavia API (Keystone, the amphora-less harness) with two Machines
/// each, while the controller process is SIGKILLed every 1–5 s: created at once; one gets a second
/// port, one has a Machine replaced, one is deleted; then the kills stop and each LoadBalancer must
/// have exactly one Octavia load balancer (tag-based adoption, never a duplicate), the deleted one
/// none; then everything is deleted and Octavia has none left.
async fn octavia_under_sigkill() {
    let scenario = "octavia";
    let mut rng = Rng::seeded(scenario);
    let h = octavia::harness();
    let t = TestNs::new("faults-octavia").await;
    install_capi_crds(&t.client).await;
    let in_ns = |mut doc: Value, ns: &str| {
        doc["metadata"]["namespace"] = json!(ns);
        doc
    };
    t.create(in_ns(
        octavia::Harness::secret("openstack", &h.clouds_yaml),
        &t.ns,
    ))
    .await;
    let names: Vec<String> = (0..3).map(|i| format!("o{i}")).collect();
    let controller = Controller::new(controller_args(&t, "octavia"), log_path(scenario));
    let killer = Killer::spawn(
        controller,
        rng.clone(),
        Duration::from_secs(1),
        Duration::from_secs(5),
    );
    let started = Instant::now();
    let mut uids = BTreeMap::new();
    for (i, name) in names.iter().enumerate() {
        t.create(in_ns(octavia::olb(name, &h, json!({})), &t.ns))
            .await;
        let lb = t
            .create(in_ns(
                octavia::octavia_lb(name)
                    .spec("drainSeconds", json!(1))
                    .build(),
                &t.ns,
            ))
            .await;
        uids.insert(name.clone(), lb.uid().unwrap());
        for m in 1..=2 {
            create_machine(&t, &format!("{name}-m{m}"), name, &format!("10.2.{i}.{m}")).await;
        }
    }
    tokio::time::sleep(rng.between(Duration::from_secs(3), Duration::from_secs(8))).await;
    capi_lb_tests::k8s::merge(
        &t.api::<LoadBalancer>(),
        "o0",
        json!({"spec": {"ports": [{"name": "api", "port": 6443}, {"name": "konnectivity", "port": 8132}]}}),
    )
    .await;
    tokio::time::sleep(rng.between(Duration::from_secs(2), Duration::from_secs(6))).await;
    create_machine(&t, "o1-m3", "o1", "10.2.1.3").await;
    let deletion = delete_machine(&t, "o1-m1");
    tokio::time::sleep(rng.between(Duration::from_secs(2), Duration::from_secs(6))).await;
    delete_load_balancer(&t, "o2").await;
    tokio::time::sleep(Duration::from_secs(if soak() { 300 } else { 25 })).await;
    let (mut controller, kills) = killer.stop().await;
    let killed_for = started.elapsed();

    let expected: BTreeMap<String, Vec<String>> = [
        (
            "o0".to_string(),
            vec!["o0-m1".to_string(), "o0-m2".to_string()],
        ),
        (
            "o1".to_string(),
            vec!["o1-m2".to_string(), "o1-m3".to_string()],
        ),
    ]
    .into();
    let recovery = Instant::now();
    converge(
        "every LoadBalancer converged",
        Duration::from_secs(180),
        || async {
            load_balancers_converged(&t, &expected).await?;
            for (name, uid) in &uids {
                let found = octavia_lbs(&h, uid).len();
                let want = usize::from(name != "o2");
                if found != want {
                    return Err(format!(
                        "{name} has {found} Octavia load balancers, want {want}"
                    ));
                }
            }
            published_objects_owned(&t).await?;
            Ok(())
        },
    )
    .await;
    let recovered_in = recovery.elapsed();
    // o0's listeners: both ports.
    let o0 = &octavia_lbs(&h, &uids["o0"])[0];
    let (_, listeners) = h.octavia(
        "GET",
        &format!(
            "lbaas/listeners?loadbalancer_id={}",
            o0["id"].as_str().unwrap()
        ),
        None,
    );
    let mut ports: Vec<i64> = listeners["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["protocol_port"].as_i64().unwrap())
        .collect();
    ports.sort();
    assert_eq!(ports, [6443, 8132], "{listeners}");
    deletion.await.unwrap();

    for name in ["o0", "o1"] {
        delete_load_balancer(&t, name).await;
    }
    converge("everything deleted", Duration::from_secs(120), || async {
        let lbs = t
            .api::<LoadBalancer>()
            .list(&ListParams::default())
            .await
            .unwrap();
        let cloud: usize = uids.values().map(|uid| octavia_lbs(&h, uid).len()).sum();
        let hooks = hooks_left(&t).await;
        if lbs.items.is_empty() && cloud == 0 && hooks.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "left: {} LoadBalancers, {cloud} Octavia load balancers, hooks {hooks:?}",
                lbs.items.len()
            ))
        }
    })
    .await;
    controller.kill().await;
    release_all_machines(&t).await;
    println!(
        "{scenario}: {kills} SIGKILLs in {killed_for:.1?} over 3 LoadBalancers; converged {recovered_in:.1?} \
         after the last; leaked: 0 Octavia load balancers, 0 hooks"
    );
    t.finish().await;
}

// --- metrics of a controller process --------------------------------------------------------------

/// A free loopback address for a controller's metrics server.
fn free_address() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// The writes (creates, updates, patches, deletes; Events included) the controller at `address`
/// has made, from its `capi_lb_kube_requests_total`.
async fn writes(address: std::net::SocketAddr) -> f64 {
    let scrape = capi_lb_bench::scrape::metrics(address).await.unwrap();
    scrape
        .samples("capi_lb_kube_requests_total")
        .filter(|s| {
            s.labels
                .get("verb")
                .is_some_and(|v| capi_lb::telemetry::kube_requests::is_write(v))
        })
        .map(|s| s.value)
        .sum()
}

/// The controller's lists (initial lists and re-lists of its watches, and its own lists).
async fn lists(address: std::net::SocketAddr) -> f64 {
    let scrape = capi_lb_bench::scrape::metrics(address).await.unwrap();
    scrape.sum("capi_lb_kube_requests_total", &[("verb", "list")])
}

/// `/readyz` and `/livez` of the controller at `address`: (status, body).
async fn probe(address: std::net::SocketAddr, path: &str) -> (u16, String) {
    capi_lb_bench::scrape::get(address, path).await.unwrap()
}

// --- control-plane outage ---------------------------------------------------------------------------

/// A v1beta1 Machine of Cluster `demo` selected by LoadBalancer `lb`, with an address.
async fn legacy_machine(t: &TestNs, name: &str, lb: &str, ip: &str) {
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    t.create(json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
                    "metadata": {"name": name, "finalizers": ["machine.cluster.x-k8s.io"],
                                 "labels": {"cluster.x-k8s.io/cluster-name": "demo",
                                            "loadbalancer.cluster.x-k8s.io/name": lb}},
                    "spec": {"clusterName": "demo", "bootstrap": {"dataSecretName": "none"},
                             "infrastructureRef": {"apiVersion": "infrastructure.test.capi-lb.io/v1alpha1",
                                                   "kind": "TestMachine", "name": name}}}))
        .await;
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "Machine");
    let machines: Api<DynamicObject> = Api::namespaced_with(
        t.client.clone(),
        &t.ns,
        &ApiResource::from_gvk_with_plural(&gvk, "machines"),
    );
    machines
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"status": {"addresses": [{"type": "InternalIP", "address": ip}]}}),
            ),
        )
        .await
        .unwrap();
}

fn harness_action(args: &[&str]) {
    let out = std::process::Command::new(capi_lb_tests::repo("tests/k8s/harness.sh"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "harness.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The ports of the `-ext` Services of `names`, by LoadBalancer.
async fn ext_ports(t: &TestNs, names: &[String]) -> Result<BTreeMap<String, Vec<i32>>, String> {
    let mut out = BTreeMap::new();
    for name in names {
        let service = t
            .api::<Service>()
            .get_opt(&format!("{name}-ext"))
            .await
            .map_err(|e| e.to_string())?
            .ok_or(format!("{name}-ext is missing"))?;
        let mut ports: Vec<i32> = service
            .spec
            .and_then(|s| s.ports)
            .unwrap_or_default()
            .iter()
            .map(|p| p.port)
            .collect();
        ports.sort();
        out.insert(name.clone(), ports);
    }
    Ok(out)
}

/// The whole control plane of a management cluster goes away for 20 s in the middle of the
/// controller's work and comes back with the same data (etcd and kube-apiserver stopped and started
/// by the harness; the harness's legacy instance, so that no other test's cluster is touched).
/// Before the outage six LoadBalancers (in-memory provider, one v1beta1 Machine each) are converged;
/// right before it every LoadBalancer gets a second port. During it the controller process keeps
/// running, `/livez` stays 200 and `/readyz` turns 503 ("has not answered") within
/// 10 s + its probe interval; after it `/readyz` is 200 again, the watches re-list, every
/// LoadBalancer converges on the new ports, and then the controller writes nothing for 15 s (no write
/// loop after the outage).
async fn apiserver_outage() {
    let scenario = "outage";
    let legacy = capi_lb_tests::legacy::legacy();
    let t = capi_lb_tests::legacy::legacy_ns("faults-outage").await;
    let names: Vec<String> = (0..6).map(|i| format!("lb{i}")).collect();
    let address = free_address();
    let mut args = controller_args(&t, "inmemory");
    let off = args.iter().position(|a| a == "off").unwrap();
    args[off] = address.to_string();
    let mut controller = Controller::on(
        legacy.controller_kubeconfig.clone().unwrap(),
        args,
        log_path(scenario),
    );
    controller.start();
    for (i, name) in names.iter().enumerate() {
        t.create(capi_lb_tests::k8s::in_memory(name, json!({})))
            .await;
        t.create(load_balancer(name, name, json!({"clusterName": "demo"})))
            .await;
        legacy_machine(
            &t,
            &format!("{name}-m1"),
            name,
            &format!("10.3.0.{}", i + 1),
        )
        .await;
    }
    let expected: BTreeMap<String, Vec<String>> = names
        .iter()
        .map(|n| (n.clone(), vec![format!("{n}-m1")]))
        .collect();
    converge(
        "converged before the outage",
        Duration::from_secs(60),
        || async { load_balancers_converged(&t, &expected).await.map(|_| ()) },
    )
    .await;
    // The port change, and at once the outage.
    for name in &names {
        capi_lb_tests::k8s::merge(
            &t.api::<LoadBalancer>(),
            name,
            json!({"spec": {"ports": [{"name": "api", "port": 6443},
                                      {"name": "konnectivity", "port": 8132}]}}),
        )
        .await;
    }
    let lists_before = lists(address).await;
    harness_action(&["legacy", "apiserver-stop"]);
    let stopped = Instant::now();
    let mut unready_after = None;
    while stopped.elapsed() < Duration::from_secs(20) {
        assert_eq!(
            probe(address, "/livez").await.0,
            200,
            "/livez during the outage"
        );
        let (status, body) = probe(address, "/readyz").await;
        if status == 503 && unready_after.is_none() {
            assert!(body.contains("has not answered"), "{body}");
            unready_after = Some(stopped.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let unready_after = unready_after.expect("/readyz never failed during a 20 s outage");
    assert!(
        unready_after <= Duration::from_secs(16),
        "/readyz failed only after {unready_after:?}"
    );
    // etcd's history compacted meanwhile: every watch resuming from before the outage is answered
    // 410 Gone, and must list again.
    harness_action(&["legacy", "apiserver-start", "--compact"]);
    let restarted = Instant::now();
    let ready_again = converge("/readyz again", Duration::from_secs(60), || async {
        let (status, body) = probe(address, "/readyz").await;
        if status == 200 {
            Ok(restarted.elapsed())
        } else {
            Err(body)
        }
    })
    .await;
    converge(
        "converged after the outage",
        Duration::from_secs(120),
        || async {
            load_balancers_converged(&t, &expected).await?;
            let ports = ext_ports(&t, &names).await?;
            if ports.values().all(|p| p == &[6443, 8132]) {
                Ok(())
            } else {
                Err(format!("-ext ports {ports:?}"))
            }
        },
    )
    .await;
    let converged_after = restarted.elapsed();
    // The watches are back: a LoadBalancer created now is acted on (the resync is an hour away).
    let mut expected = expected;
    let late = "late".to_string();
    t.create(capi_lb_tests::k8s::in_memory(&late, json!({})))
        .await;
    t.create(load_balancer(&late, &late, json!({"clusterName": "demo"})))
        .await;
    legacy_machine(&t, "late-m1", &late, "10.3.0.100").await;
    expected.insert(late.clone(), vec!["late-m1".to_string()]);
    let created = Instant::now();
    converge(
        "a LoadBalancer created after the outage converged",
        Duration::from_secs(90),
        || async { load_balancers_converged(&t, &expected).await.map(|_| ()) },
    )
    .await;
    let late_converged = created.elapsed();
    let relists = lists(address).await - lists_before;
    // No write loop after the outage.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let settled = writes(address).await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let idle = writes(address).await - settled;
    assert_eq!(idle, 0.0, "writes while idle after the outage");
    println!(
        "{scenario}: 20 s outage of kube-apiserver and etcd; /readyz 503 after {unready_after:.1?}, 200 again \
         {ready_again:.1?} after the restart; 6 LoadBalancers converged {converged_after:.1?} after it; \
         one created then converged in {late_converged:.1?} ({relists} lists since the outage); 0 writes in 15 s idle"
    );
    for name in names.iter().chain([&late]) {
        delete_load_balancer(&t, name).await;
    }
    converge("deleted", Duration::from_secs(60), || async {
        let left = t
            .api::<LoadBalancer>()
            .list(&ListParams::default())
            .await
            .unwrap();
        if left.items.is_empty() {
            Ok(())
        } else {
            Err(format!("{} left", left.items.len()))
        }
    })
    .await;
    controller.kill().await;
    t.finish().await;
}

// --- leader failover under load ---------------------------------------------------------------------

/// Two replicas with leader election (the Lease in capi-lb's namespace, 15 s lease, 5 s grace: the
/// defaults) as separate processes; 60 LoadBalancers (200 with `CAPI_LB_FAULTS_SOAK=1`) on kube-dc (the simulated kube-dc controller)
/// are created, and while they converge the leader is SIGKILLed. The standby has written nothing
/// until then (its own request metrics), takes the lease within the lease duration (+ the 5 s
/// grace in which it looks again), and every LoadBalancer converges with exactly one EIp; deleting them leaves none.
async fn leader_failover_under_load() {
    use k8s_openapi::api::coordination::v1::Lease;

    let scenario = "failover";
    // 60 in `cargo test` (CI time), the 200 in a soak run.
    let n: usize = if soak() { 200 } else { 60 };
    let t = TestNs::new("faults-failover").await;
    install_kube_dc_crds(&t.client).await;
    capi_lb_tests::kubedc_sim::make_project(&t.client, &t.ns).await;
    let sim = KubeDcSim::new().spawn(t.client.clone(), t.ns.clone());
    let lease_name = capi_lb_tests::k8s::unique_name("capi-lb-faults-leader");
    let leases: Api<Lease> = Api::namespaced(t.client.clone(), "capi-lb-system");
    let replica = |identity: &str, address: std::net::SocketAddr| {
        let mut args = controller_args(&t, "kubedc");
        let off = args.iter().position(|a| a == "off").unwrap();
        args[off] = address.to_string();
        let concurrency = args.iter().position(|a| a == "--concurrency").unwrap();
        args[concurrency + 1] = "4".into();
        args.extend(
            [
                "--leader-elect=true",
                "--leader-election-namespace=capi-lb-system",
                &format!("--leader-election-id={lease_name}"),
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        Controller::new(args, log_path(&format!("{scenario}-{identity}")))
    };
    let holder = || async {
        leases
            .get_opt(&lease_name)
            .await
            .unwrap()
            .and_then(|l| l.spec?.holder_identity)
    };
    let (a_address, b_address) = (free_address(), free_address());
    let mut a = replica("a", a_address);
    a.start();
    let a_identity = converge("a leads", Duration::from_secs(60), || async {
        holder().await.ok_or("no holder".to_string())
    })
    .await;
    let mut b = replica("b", b_address);
    b.start();
    converge("b standing by", Duration::from_secs(30), || async {
        match capi_lb_bench::scrape::get(b_address, "/readyz").await {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    let started = Instant::now();
    let names: Vec<String> = (0..n).map(|i| format!("lb{i:03}")).collect();
    futures::stream::iter(names.iter().cloned())
        .for_each_concurrent(16, |name| {
            let t = &t;
            async move {
                t.create(kube_dc_infra(&name)).await;
                t.create(kube_dc_lb(&name)).await;
            }
        })
        .await;
    let ready = || async {
        t.api::<LoadBalancer>()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|l| l.status.as_ref().is_some_and(|s| s.ready))
            .count()
    };
    // Mid-convergence: a third of them Ready.
    converge("a third Ready", Duration::from_secs(180), || async {
        let now = ready().await;
        if now >= n / 3 {
            Ok(())
        } else {
            Err(format!("{now} Ready"))
        }
    })
    .await;
    let b_writes_before = writes(b_address).await;
    assert_eq!(
        b_writes_before, 0.0,
        "the standby wrote while the leader led"
    );
    let ready_at_kill = ready().await;
    a.kill().await;
    let killed = Instant::now();
    let takeover = converge("b takes over", Duration::from_secs(60), || async {
        match holder().await {
            Some(h) if h != a_identity => Ok(killed.elapsed()),
            other => Err(format!("holder {other:?}")),
        }
    })
    .await;
    assert!(
        // The lease expires at most 15 s after the kill (its last renewal was before it); the
        // standby looks again every few seconds (within the 5 s grace), the test every 0.5 s.
        takeover <= Duration::from_secs(15 + 5),
        "the standby took {takeover:?} to take over a 15 s lease"
    );
    let count = n;
    converge(
        "every LoadBalancer Ready",
        Duration::from_secs(600),
        || async {
            let n = ready().await;
            let eips = t
                .api::<EIp>()
                .list(&ListParams::default())
                .await
                .unwrap()
                .items;
            let names_of: BTreeSet<String> = eips.iter().map(|e| e.name_any()).collect();
            if n == count && eips.len() == count && names_of.len() == count {
                Ok(())
            } else {
                Err(format!("{n} of {count} Ready, {} EIps", eips.len()))
            }
        },
    )
    .await;
    let converged = started.elapsed();
    let b_writes = writes(b_address).await;
    println!(
        "{scenario}: {n} LoadBalancers; leader killed with {ready_at_kill} Ready; standby wrote 0 \
         before, took the lease {takeover:.1?} after the kill, all Ready {converged:.1?} after the \
         first creation ({b_writes} writes by the new leader, {:.1} per LoadBalancer)",
        b_writes / n as f64
    );
    futures::stream::iter(names.iter().cloned())
        .for_each_concurrent(16, |name| {
            let t = &t;
            async move { delete_load_balancer(t, &name).await }
        })
        .await;
    converge("everything deleted", Duration::from_secs(300), || async {
        let lbs = t
            .api::<LoadBalancer>()
            .list(&ListParams::default())
            .await
            .unwrap();
        let (eips, services) = kube_dc_objects(&t).await;
        if lbs.items.is_empty() && eips.is_empty() && services.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "left: {} LoadBalancers, {} EIps, {} kube-dc Services",
                lbs.items.len(),
                eips.len(),
                services.len()
            ))
        }
    })
    .await;
    b.kill().await;
    sim.stop().await;
    t.finish().await;
}

// --- Octavia and Keystone down; a revoked credential ------------------------------------------------

/// `doc` in namespace `ns`.
fn in_namespace(mut doc: Value, ns: &str) -> Value {
    doc["metadata"]["namespace"] = json!(ns);
    doc
}

/// The conditions of LoadBalancer `name` as `type=status/reason`, for messages.
async fn conditions(t: &TestNs, name: &str) -> Vec<(String, String, String, String)> {
    t.api::<LoadBalancer>()
        .get(name)
        .await
        .unwrap()
        .status
        .map(|s| {
            s.conditions
                .into_iter()
                .map(|c| (c.type_, c.status, c.reason, c.message))
                .collect()
        })
        .unwrap_or_default()
}

/// Two LoadBalancers on the real Octavia API, one with the harness's credentials, one with an
/// application credential of its own; the controller runs as a process. The Octavia API and
/// Keystone are stopped for a minute, and meanwhile a Machine is added: the controller keeps running
/// (`/livez`), the LoadBalancer says why the member cannot be added (`TargetsReady` False with a
/// reason, not a guess), and once both are back it converges with still exactly one Octavia load
/// balancer each. Then the application credential is revoked and a Machine added: the LoadBalancer
/// reports `AuthenticationFailed`; a new credential in the same Secret and it converges again.
async fn octavia_outage_and_revoked_credential() {
    let scenario = "octavia-outage";
    let h = octavia::harness();
    let t = TestNs::new("faults-octavia-down").await;
    install_capi_crds(&t.client).await;
    t.create(in_namespace(
        octavia::Harness::secret("openstack", &h.clouds_yaml),
        &t.ns,
    ))
    .await;
    let address = free_address();
    let mut args = controller_args(&t, "octavia");
    let off = args.iter().position(|a| a == "off").unwrap();
    args[off] = address.to_string();
    let mut controller = Controller::new(args, log_path(scenario));
    controller.start();

    let credential = capi_lb_tests::k8s::unique_name("capi-lb-faults");
    let (user, id, _, clouds) = h.new_application_credential(&credential);
    t.create(in_namespace(
        octavia::Harness::secret("appcred", &clouds),
        &t.ns,
    ))
    .await;
    let mut uids = BTreeMap::new();
    for (name, extra) in [
        ("d0", json!({})),
        (
            "r0",
            json!({"credentials": {"secretName": "appcred", "cloud": "own"}}),
        ),
    ] {
        t.create(in_namespace(octavia::olb(name, &h, extra), &t.ns))
            .await;
        let lb = t
            .create(in_namespace(
                octavia::octavia_lb(name)
                    .spec("drainSeconds", json!(1))
                    .build(),
                &t.ns,
            ))
            .await;
        uids.insert(name.to_string(), lb.uid().unwrap());
    }
    create_machine(&t, "d0-m1", "d0", "10.4.0.1").await;
    create_machine(&t, "d0-m2", "d0", "10.4.0.2").await;
    create_machine(&t, "r0-m1", "r0", "10.4.1.1").await;
    let mut expected: BTreeMap<String, Vec<String>> = [
        (
            "d0".to_string(),
            vec!["d0-m1".to_string(), "d0-m2".to_string()],
        ),
        ("r0".to_string(), vec!["r0-m1".to_string()]),
    ]
    .into();
    let one_each = |uids: &BTreeMap<String, String>| -> Result<(), String> {
        for (name, uid) in uids {
            let found = octavia_lbs(&h, uid).len();
            if found != 1 {
                return Err(format!("{name} has {found} Octavia load balancers"));
            }
        }
        Ok(())
    };
    converge(
        "converged before the outage",
        Duration::from_secs(120),
        || async {
            load_balancers_converged(&t, &expected).await?;
            one_each(&uids)
        },
    )
    .await;

    // The Octavia API and Keystone down for a minute, a member added meanwhile.
    h.stop_api();
    h.stop_keystone();
    let stopped = Instant::now();
    create_machine(&t, "d0-m3", "d0", "10.4.0.3").await;
    let mut reported = None;
    while stopped.elapsed() < Duration::from_secs(60) {
        assert_eq!(
            probe(address, "/livez").await.0,
            200,
            "/livez during the outage"
        );
        if reported.is_none()
            && let Some(c) = conditions(&t, "d0")
                .await
                .into_iter()
                .find(|c| c.0 == "TargetsReady" && c.1 == "False" && !c.2.is_empty())
        {
            reported = Some((stopped.elapsed(), c));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (reported_after, condition) =
        reported.expect("TargetsReady never said why the new Machine is not a member");
    h.start_api();
    let restarted = Instant::now();
    expected.insert(
        "d0".into(),
        vec!["d0-m1".into(), "d0-m2".into(), "d0-m3".into()],
    );
    converge(
        "converged after the outage",
        Duration::from_secs(120),
        || async {
            load_balancers_converged(&t, &expected).await?;
            one_each(&uids)
        },
    )
    .await;
    let recovered_in = restarted.elapsed();

    // A revoked credential.
    h.revoke_application_credential(&user, &id);
    create_machine(&t, "r0-m2", "r0", "10.4.1.2").await;
    let revoked = converge(
        "the revoked credential reported",
        Duration::from_secs(90),
        || async {
            let found = conditions(&t, "r0")
                .await
                .into_iter()
                .find(|c| c.1 == "False" && c.2 == "AuthenticationFailed");
            found.ok_or(format!("r0: {:?}", conditions(&t, "r0").await))
        },
    )
    .await;
    let (_, _, _, renewed) = h.new_application_credential(&format!("{credential}-2"));
    capi_lb_tests::k8s::merge(
        &t.api::<k8s_openapi::api::core::v1::Secret>(),
        "appcred",
        json!({"stringData": {"clouds.yaml": renewed}}),
    )
    .await;
    expected.insert("r0".into(), vec!["r0-m1".into(), "r0-m2".into()]);
    converge(
        "converged with the new credential",
        Duration::from_secs(90),
        || async {
            load_balancers_converged(&t, &expected).await?;
            one_each(&uids)
        },
    )
    .await;
    println!(
        "{scenario}: Octavia API and Keystone down 60 s: {} {}/{} after {reported_after:.1?} ({}); \
         converged {recovered_in:.1?} after they were back, one Octavia load balancer each; a revoked \
         credential reported as {} {}, converged again with a new one",
        condition.0, condition.1, condition.2, condition.3, revoked.0, revoked.2
    );
    for name in ["d0", "r0"] {
        delete_load_balancer(&t, name).await;
    }
    converge("everything deleted", Duration::from_secs(120), || async {
        let lbs = t
            .api::<LoadBalancer>()
            .list(&ListParams::default())
            .await
            .unwrap();
        let cloud: usize = uids.values().map(|uid| octavia_lbs(&h, uid).len()).sum();
        if lbs.items.is_empty() && cloud == 0 {
            Ok(())
        } else {
            Err(format!(
                "left: {} LoadBalancers, {cloud} Octavia load balancers",
                lbs.items.len()
            ))
        }
    })
    .await;
    controller.kill().await;
    release_all_machines(&t).await;
    t.finish().await;
}
