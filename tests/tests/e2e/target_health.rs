//! Target health (`spec.targetHealth`) on a real apiserver, with real listeners as the targets'
//! API servers: three Machines at 127.0.0.1, .2 and .3, each with a listener on the LoadBalancer's
//! target port, behind an in-memory load balancer (a provider without health checks of its own).
//!
//! - One listener stopped: its target is taken out (state `failing`, drained, then `unhealthy`; its
//!   member gone) after its failure threshold, `TargetsReady` False `TargetsUnhealthy` naming it;
//!   started again: it comes back (`active`) after its success threshold. The times are printed.
//! - Every listener stopped: no target is taken out (all stay members, the ones taken out before
//!   come back) and `TargetsReady` says that every one fails.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use capi_lb_api::LoadBalancer;
use capi_lb_api::capi::Machine;
use capi_lb_api::target::TargetKeys;
use capi_lb_tests::k8s::{
    TestNs, condition, eventually, in_memory, install_capi_crds, listen, load_balancer, machine,
    set_machine_ip, wait_for,
};
use kube::ResourceExt;
use serde_json::json;

const PERIOD: Duration = Duration::from_secs(2);

async fn stop(listener: tokio::task::JoinHandle<()>) {
    listener.abort();
    let _ = listener.await;
}

/// The LoadBalancer once `done` holds for it.
async fn until(t: &TestNs, what: &str, done: impl Fn(&LoadBalancer) -> bool) -> LoadBalancer {
    wait_for(
        &t.api::<LoadBalancer>(),
        "web",
        what,
        |l: Option<&LoadBalancer>| l.is_some_and(&done),
    )
    .await
    .unwrap()
}

fn active(lb: &LoadBalancer) -> Vec<String> {
    lb.status
        .as_ref()
        .map(|s| s.active_targets.clone())
        .unwrap_or_default()
}

/// The state LoadBalancer `web` wrote on each Machine.
async fn states(t: &TestNs) -> BTreeMap<String, String> {
    let keys = TargetKeys::new(&t.ns, "web");
    t.api::<Machine>()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|m| {
            let state = m
                .annotations()
                .get(&keys.state)
                .cloned()
                .unwrap_or_default();
            (m.name_any(), state)
        })
        .collect()
}

#[tokio::test]
async fn a_target_failing_its_probes_is_taken_out_and_back_and_never_all_of_them() {
    let mut t = TestNs::new("target-health").await;
    install_capi_crds(&t.client).await;
    t.start(t.options(&["inmemory"]));
    // A free port on 127.0.0.1, used on .2 and .3 too.
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let addresses: Vec<SocketAddr> = (1..=3)
        .map(|i| SocketAddr::from(([127, 0, 0, i], port)))
        .collect();
    let mut listeners: Vec<_> = addresses.iter().map(|a| Some(listen(*a))).collect();
    t.create(in_memory(
        "web",
        json!({"addressPools": ["203.0.113.0/28"]}),
    ))
    .await;
    t.create(load_balancer(
        "web",
        "web",
        json!({
            "ports": [{"name": "web", "port": 443, "targetPort": port}],
            "drainSeconds": 1,
            "targetHealth": {"periodSeconds": PERIOD.as_secs(), "timeoutSeconds": 1,
                             "failureThreshold": 2, "successThreshold": 2},
        }),
    ))
    .await;
    for (i, at) in addresses.iter().enumerate() {
        let name = format!("m{}", i + 1);
        t.create(machine(
            &name,
            json!({"loadbalancer.cluster.x-k8s.io/name": "web"}),
        ))
        .await;
        set_machine_ip(&t, &name, &at.ip().to_string()).await;
    }
    until(&t, "Ready with three active targets", |l| {
        l.status.as_ref().is_some_and(|s| s.ready) && active(l) == ["m1", "m2", "m3"]
    })
    .await;

    // m2's API server stops: taken out after two failed probes, drained, then out.
    stop(listeners[1].take().unwrap()).await;
    let stopped = Instant::now();
    let lb = until(&t, "m2 taken out", |l| {
        active(l) == ["m1", "m3"]
            && condition(l, "TargetsReady")
                .is_some_and(|(s, r)| s == "False" && r == "TargetsUnhealthy")
    })
    .await;
    let out = stopped.elapsed();
    let (_, _) = condition(&lb, "TargetsReady").unwrap();
    let message = lb
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == "TargetsReady")
        .unwrap()
        .message
        .clone();
    assert!(
        message.contains("taken out after failing their health probes: m2"),
        "{message}"
    );
    // Drained like a disabled target, then out, in states of its own.
    let wanted = eventually("m2 unhealthy", || async {
        let states = states(&t).await;
        (states["m2"] == "unhealthy").then_some(states)
    })
    .await;
    println!("m2 stopped: out of the load balancer after {out:?} ({wanted:?}): {message}");
    // At most the threshold's probes, their spread and a reconcile.
    assert!(out < PERIOD * 4 + Duration::from_secs(3), "{out:?}");

    // Started again: back after two passed probes.
    listeners[1] = Some(listen(addresses[1]));
    let started = Instant::now();
    until(&t, "m2 active again", |l| {
        active(l) == ["m1", "m2", "m3"]
            && condition(l, "TargetsReady").is_some_and(|(s, _)| s == "True")
    })
    .await;
    let back = started.elapsed();
    println!("m2 started: active again after {back:?}");
    assert!(back < PERIOD * 4 + Duration::from_secs(3), "{back:?}");

    // Every API server stops: none is taken out.
    for listener in listeners.iter_mut() {
        stop(listener.take().unwrap()).await;
    }
    let lb = until(&t, "every target failing and kept", |l| {
        l.status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "TargetsReady"))
            .is_some_and(|c| {
                c.reason == "TargetsUnhealthy" && c.message.contains("none is taken out")
            })
            && active(l) == ["m1", "m2", "m3"]
    })
    .await;
    println!("all stopped: {:?}", states(&t).await);
    let _ = lb;
    t.finish().await;
}
