//! The Octavia provider against the real Octavia API and Keystone (tests/octavia/harness.sh): time
//! from LoadBalancer create to Ready, Octavia requests of the bring-up, of a steady-state reconcile,
//! and of the deletion. Results go into docs/benchmarks.md.
//!
//!   cargo bench -p capi-lb-tests --bench octavia            # OCTAVIA_BENCH_RUNS=10 by default
//!
//! The reconciler is driven the way kube-runtime drives it with nothing else changing: reconcile,
//! wait the requeue delay it asked for (in real time), reconcile again. Each row is measured twice:
//! with a new provider per run (the first LoadBalancer of a controller, which opens the Keystone
//! session) and with one provider whose session is open (every later LoadBalancer).
// A benchmark binary: failing loudly on a broken set-up is what we want.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use capi_lb::sim::world::World;
use capi_lb_api::LoadBalancer;
use capi_lb_tests::octavia::{Harness, harness, octavia_objects};
use capi_lb_tests::*;
use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};

/// The objects of LoadBalancer `name` (its OctaviaLoadBalancer and three Machines), after the
/// credentials Secret when `secret`.
fn objects(h: &Harness, name: &str, floating_ip: bool, secret: bool) -> Vec<Value> {
    let extra = if floating_ip {
        json!({"floatingIP": {"networkID": h.var("FIP_NETWORK_ID")}})
    } else {
        json!({})
    };
    let mut objects = octavia_objects(h, name, extra);
    if !secret {
        objects.remove(0);
    }
    for (i, ip) in ["10.0.0.11", "10.0.0.12", "10.0.0.13"].iter().enumerate() {
        objects.push(machine(&format!("{name}-m{}", i + 1), name, ip).build());
    }
    objects
}

/// Reconcile LoadBalancer `name` as the controller would until `done`; (elapsed, reconciles).
async fn drive(
    world: &World,
    name: &str,
    done: impl Fn(Option<&LoadBalancer>) -> bool,
) -> (Duration, usize) {
    let api = Api::<LoadBalancer>::namespaced(world.client(), NS);
    let start = Instant::now();
    let mut reconciles = 0;
    loop {
        let outcome = world.reconcile(NS, name).await.unwrap();
        reconciles += 1;
        let lb = api.get_opt(name).await.unwrap();
        if done(lb.as_ref()) {
            return (start.elapsed(), reconciles);
        }
        assert!(start.elapsed() < Duration::from_secs(120), "stuck");
        let wait = outcome.requeue_after.unwrap_or(Duration::from_secs(1));
        tokio::time::sleep(wait).await;
        world.clock.advance(wait);
    }
}

/// The figures of one row.
#[derive(Default)]
struct Row {
    ready: Vec<Duration>,
    deleted: Vec<Duration>,
    reconciles: usize,
    requests: usize,
    steady: Vec<usize>,
    delete_requests: usize,
    ops: BTreeMap<String, usize>,
}

impl Row {
    /// One LoadBalancer's life in `world`: created to Ready with its three targets active, 10
    /// steady-state reconciles, deleted until gone.
    async fn run(&mut self, world: &World, name: &str) {
        world.openstack.clear();
        let (t, n) = drive(world, name, |lb| {
            lb.and_then(|l| l.status.as_ref())
                .is_some_and(|s| s.ready && s.active_targets.len() == 3)
        })
        .await;
        self.ready.push(t);
        self.reconciles += n;
        let c = count(world);
        self.requests += c.values().sum::<usize>();
        for (k, v) in c {
            *self.ops.entry(k).or_insert(0) += v;
        }
        for _ in 0..10 {
            world.openstack.clear();
            world.reconcile(NS, name).await.unwrap();
            self.steady.push(world.openstack.calls().len());
        }
        world.openstack.clear();
        Api::<LoadBalancer>::namespaced(world.client(), NS)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
        let (t, _) = drive(world, name, |lb| lb.is_none()).await;
        self.deleted.push(t);
        self.delete_requests += world.openstack.calls().len();
    }

    fn print(self, label: &str) {
        let runs = self.ready.len();
        let (min, med, max) = stats(self.ready);
        let (_, dmed, _) = stats(self.deleted);
        println!(
            "| {label} | {min:.2} s / {med:.2} s / {max:.2} s | {:.1} | {:.1} | {:.2} (max {}) | {dmed:.2} s | {:.1} |",
            self.reconciles as f64 / runs as f64,
            self.requests as f64 / runs as f64,
            self.steady.iter().sum::<usize>() as f64 / self.steady.len() as f64,
            self.steady.iter().max().unwrap(),
            self.delete_requests as f64 / runs as f64,
        );
        let per_run: Vec<String> = self
            .ops
            .iter()
            .map(|(k, v)| format!("{k} {:.1}", *v as f64 / runs as f64))
            .collect();
        eprintln!("  bring-up requests per run: {}", per_run.join(", "));
    }
}

fn count(world: &World) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (op, _) in world.openstack.calls() {
        *out.entry(op).or_default() += 1;
    }
    out
}

fn stats(mut v: Vec<Duration>) -> (f64, f64, f64) {
    v.sort();
    let s = |d: Duration| d.as_secs_f64();
    (s(v[0]), s(v[v.len() / 2]), s(v[v.len() - 1]))
}

#[tokio::main]
async fn main() {
    capi_lb::install_crypto_provider();
    let h = harness();
    let runs: usize = std::env::var("OCTAVIA_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    println!("Octavia provider against the real Octavia API ({runs} runs per row)\n");
    println!(
        "| floating IP, Keystone session | create → Ready min / median / max | reconciles | Octavia+Neutron requests to Ready | steady-state requests per reconcile | delete → gone median | requests to delete |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    for floating_ip in [false, true] {
        let fip = if floating_ip { "allocated" } else { "none" };
        // Each run with a provider of its own: the first LoadBalancer of a controller, which
        // also opens the Keystone session (token, API version).
        let mut fresh = Row::default();
        for _ in 0..runs {
            let world = World::new(objects(&h, "cp", floating_ip, true))
                .await
                .unwrap();
            fresh.run(&world, "cp").await;
        }
        fresh.print(&format!("{fip}, new session"));
        // One controller for every run, its session opened by a first LoadBalancer that is not
        // counted: what each later LoadBalancer of a running controller costs.
        let mut all = objects(&h, "warmup", floating_ip, true);
        for i in 0..runs {
            all.extend(objects(&h, &format!("cp{i}"), floating_ip, false));
        }
        let world = World::new(all).await.unwrap();
        Row::default().run(&world, "warmup").await;
        let mut open = Row::default();
        for i in 0..runs {
            open.run(&world, &format!("cp{i}")).await;
        }
        open.print(&format!("{fip}, session open"));
    }
}
