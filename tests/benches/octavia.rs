//! The Octavia provider against the real Octavia API and Keystone (tests/octavia/harness.sh): time
//! from LoadBalancer create to Ready, Octavia requests of the bring-up, of a steady-state reconcile,
//! and of the deletion. Results go into docs/benchmarks.md.
//!
//!   cargo bench -p capi-lb-tests --bench octavia            # OCTAVIA_BENCH_RUNS=10 by default
//!
//! The reconciler is driven the way kube-runtime drives it with nothing else changing: reconcile,
//! wait the requeue delay it asked for (in real time), reconcile again.
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

fn objects(h: &Harness, floating_ip: bool) -> Vec<Value> {
    let extra = if floating_ip {
        json!({"floatingIP": {"networkID": h.var("FIP_NETWORK_ID")}})
    } else {
        json!({})
    };
    let mut objects = octavia_objects(h, "cp", extra);
    for (name, ip) in [
        ("cp-m1", "10.0.0.11"),
        ("cp-m2", "10.0.0.12"),
        ("cp-m3", "10.0.0.13"),
    ] {
        objects.push(machine(name, "cp", ip).build());
    }
    objects
}

/// Reconcile as the controller would until `done`; (elapsed, reconciles).
async fn drive(world: &World, done: impl Fn(Option<&LoadBalancer>) -> bool) -> (Duration, usize) {
    let api = Api::<LoadBalancer>::namespaced(world.client(), NS);
    let start = Instant::now();
    let mut reconciles = 0;
    loop {
        let outcome = world.reconcile(NS, "cp").await.unwrap();
        reconciles += 1;
        let lb = api.get_opt("cp").await.unwrap();
        if done(lb.as_ref()) {
            return (start.elapsed(), reconciles);
        }
        assert!(start.elapsed() < Duration::from_secs(120), "stuck");
        let wait = outcome.requeue_after.unwrap_or(Duration::from_secs(1));
        tokio::time::sleep(wait).await;
        world.clock.advance(wait);
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
        "| floating IP | create → Ready min / median / max | reconciles | Octavia+Neutron requests to Ready | steady-state requests per reconcile | delete → gone median | requests to delete |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    for floating_ip in [false, true] {
        let mut ready = Vec::new();
        let mut deleted = Vec::new();
        let mut reconciles = 0;
        let mut requests = 0;
        let mut steady = Vec::new();
        let mut delete_requests = 0;
        let mut ops = BTreeMap::new();
        for _ in 0..runs {
            let world = World::new(objects(&h, floating_ip)).await.unwrap();
            world.openstack.clear();
            let (t, n) = drive(&world, |lb| {
                lb.and_then(|l| l.status.as_ref())
                    .is_some_and(|s| s.ready && s.active_targets.len() == 3)
            })
            .await;
            ready.push(t);
            reconciles += n;
            let c = count(&world);
            requests += c.values().sum::<usize>();
            for (k, v) in c {
                *ops.entry(k).or_insert(0) += v;
            }
            for _ in 0..10 {
                world.openstack.clear();
                world.reconcile(NS, "cp").await.unwrap();
                steady.push(world.openstack.calls().len());
            }
            world.openstack.clear();
            Api::<LoadBalancer>::namespaced(world.client(), NS)
                .delete("cp", &DeleteParams::default())
                .await
                .unwrap();
            let (t, _) = drive(&world, |lb| lb.is_none()).await;
            deleted.push(t);
            delete_requests += world.openstack.calls().len();
        }
        let (min, med, max) = stats(ready);
        let (_, dmed, _) = stats(deleted);
        println!(
            "| {} | {min:.2} s / {med:.2} s / {max:.2} s | {:.1} | {:.1} | {:.2} (max {}) | {dmed:.2} s | {:.1} |",
            if floating_ip { "allocated" } else { "none" },
            reconciles as f64 / runs as f64,
            requests as f64 / runs as f64,
            steady.iter().sum::<usize>() as f64 / steady.len() as f64,
            steady.iter().max().unwrap(),
            delete_requests as f64 / runs as f64,
        );
        let per_run: Vec<String> = ops
            .iter()
            .map(|(k, v)| format!("{k} {:.1}", *v as f64 / runs as f64))
            .collect();
        eprintln!("  bring-up requests per run: {}", per_run.join(", "));
    }
}
