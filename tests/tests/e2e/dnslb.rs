//! The DNS provider on the real chain: capi-lb (as its ServiceAccount) writes the LoadBalancer's
//! `DNSEndpoint`, the harness's real ExternalDNS (`--source=crd --provider=rfc2136`, interval
//! `CAPI_LB_E2E_EXTERNAL_DNS_INTERVAL`) writes the zone of a real BIND9 with a TSIG key, and these
//! tests ask BIND with `dig`. The "API servers" are real TCP listeners on 127.0.0.1, .2 and .3 that
//! a test stops and starts, probed by capi-lb's target probes (`--address-allow-loopback`: the
//! test's addresses are loopback ones). Every measured delay is printed (`-- --nocapture`).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use capi_lb_api::LoadBalancer;
use capi_lb_api::capi::Machine;
use capi_lb_api::target::TargetKeys;
use capi_lb_tests::k8s::{
    TestNs, condition, dig, external_dns, install_capi_crds, listen, machine, release_machine,
    set_machine_ip, wait_for,
};
use kube::ResourceExt;
use kube::api::DeleteParams;
use serde_json::json;
use tokio::task::JoinHandle;

/// Seconds between two probes of a target.
const PERIOD: Duration = Duration::from_secs(2);
/// The records' TTL.
const TTL: u64 = 5;
/// The LoadBalancer's drainSeconds.
const DRAIN: u64 = 3;
/// What capi-lb, the apiserver and BIND may add to a delay on a loaded 2-core machine.
const MARGIN: Duration = Duration::from_secs(5);

/// A LoadBalancer `cp` on a DNSLoadBalancer, with a Machine per listener.
struct Setup {
    t: TestNs,
    host: String,
    addresses: Vec<SocketAddr>,
    listeners: Vec<Option<JoinHandle<()>>>,
    created: Instant,
}

fn options(t: &TestNs) -> capi_lb::run::RunOptions {
    let mut options = t.options(&["dns"]);
    options.address_allow_loopback = true;
    options
}

async fn setup(prefix: &str, machines: u8, start: bool) -> Setup {
    let mut t = TestNs::new(prefix).await;
    install_capi_crds(&t.client).await;
    if start {
        let options = options(&t);
        t.start(options);
    }
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let addresses: Vec<SocketAddr> = (1..=machines)
        .map(|i| SocketAddr::from(([127, 0, 0, i], port)))
        .collect();
    let listeners = addresses.iter().map(|a| Some(listen(*a))).collect();
    let host = format!("api.{}.{}", t.ns, external_dns().zone);
    let created = Instant::now();
    t.create(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "DNSLoadBalancer",
        "metadata": {"name": "cp"}, "spec": {"hostname": host, "ttlSeconds": TTL}}))
        .await;
    t.create(json!({
        "apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer",
        "metadata": {"name": "cp"},
        "spec": {
            // Its Machines' Cluster: deletion hooks need one (here it does not exist, so no one
            // else's LoadBalancer can select its Machines, and hooks are allowed).
            "clusterName": "demo",
            "ports": [{"name": "kube-apiserver", "port": 6443, "targetPort": port}],
            "drainSeconds": DRAIN,
            // The targets are plain TCP listeners, not API servers: a TCP probe (`Auto` would
            // ask their kube-apiserver port for GET /readyz).
            "targetHealth": {"periodSeconds": PERIOD.as_secs(), "timeoutSeconds": 1,
                             "failureThreshold": 2, "successThreshold": 1, "probe": "TCP"},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                  "kind": "DNSLoadBalancer", "name": "cp"}}}))
        .await;
    for (i, at) in addresses.iter().enumerate() {
        let name = format!("m{}", i + 1);
        t.create(machine(
            &name,
            json!({"loadbalancer.cluster.x-k8s.io/name": "cp"}),
        ))
        .await;
        set_machine_ip(&t, &name, &at.ip().to_string()).await;
    }
    Setup {
        t,
        host,
        addresses,
        listeners,
        created,
    }
}

async fn stop(listener: Option<JoinHandle<()>>) {
    if let Some(listener) = listener {
        listener.abort();
        let _ = listener.await;
    }
}

fn ips(addresses: &[&SocketAddr]) -> Vec<String> {
    let mut out: Vec<String> = addresses.iter().map(|a| a.ip().to_string()).collect();
    out.sort();
    out
}

/// Wait until `dig` answers `want` for `host`; fails after `limit` from `since`. Returns how long
/// it took from `since`.
async fn answers(
    what: &str,
    host: &str,
    want: &[String],
    since: Instant,
    limit: Duration,
) -> Duration {
    let mut last = Vec::new();
    while since.elapsed() < limit {
        last = dig(host);
        if last == want {
            let took = since.elapsed();
            println!("{what}: {host} -> {want:?} after {took:?}");
            return took;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: {host} answered {last:?}, not {want:?}, within {limit:?}");
}

/// The state LoadBalancer `cp` wrote on Machine `name`, and whether its deletion hooks are on it.
async fn machine_state(t: &TestNs, name: &str) -> Option<(String, bool)> {
    let keys = TargetKeys::new(&t.ns, "cp");
    let m = t.api::<Machine>().get_opt(name).await.unwrap()?;
    let a = m.annotations();
    Some((
        a.get(&keys.state).cloned().unwrap_or_default(),
        a.contains_key(&keys.pre_drain) && a.contains_key(&keys.pre_terminate),
    ))
}

/// LoadBalancer `cp` once `n` targets are active and ExternalDNS took its records.
async fn active(t: &TestNs, n: usize) -> LoadBalancer {
    wait_for(
        &t.api::<LoadBalancer>(),
        "cp",
        &format!("{n} active, in DNS"),
        |l| {
            l.is_some_and(|l| {
                l.status
                    .as_ref()
                    .is_some_and(|st| st.active_targets.len() == n)
                    && condition(l, "DNSPublished").is_some_and(|(s, _)| s == "True")
            })
        },
    )
    .await
    .unwrap()
}

/// How long a stopped target may take to leave the name: its failure threshold's probes (2, one
/// timeout each, spread), a reconcile, one ExternalDNS interval, and the margin.
fn out_limit() -> Duration {
    PERIOD * 3 + Duration::from_secs(1) + external_dns().interval + MARGIN
}

#[tokio::test]
async fn the_name_answers_the_healthy_targets_drops_a_stopped_one_and_never_goes_empty() {
    let mut s = setup("dnslb-health", 3, true).await;
    let all = ips(&s.addresses.iter().collect::<Vec<_>>());
    answers("created", &s.host, &all, s.created, Duration::from_secs(60)).await;
    let lb = active(&s.t, 3).await;
    // `-ext` leaves the loopback addresses out (kube-apiserver refuses them in EndpointSlices),
    // so the LoadBalancer is not Ready here: DNS is what this test is about.
    println!("Ready: {:?}", condition(&lb, "Ready"));

    // m2's API server stops: out of the name after its probes and one ExternalDNS interval.
    stop(s.listeners[1].take()).await;
    let stopped = Instant::now();
    let took = answers(
        "m2 stopped",
        &s.host,
        &ips(&[&s.addresses[0], &s.addresses[2]]),
        stopped,
        out_limit(),
    )
    .await;
    assert!(took <= out_limit(), "{took:?}");
    // Started again: back after one passed probe and one ExternalDNS interval.
    s.listeners[1] = Some(listen(s.addresses[1]));
    let started = Instant::now();
    answers("m2 started", &s.host, &all, started, out_limit()).await;

    // Every API server stops, one after the other: the name never answers nothing, and keeps the
    // last one that was healthy.
    let mut seen = Vec::new();
    for i in 0..3 {
        stop(s.listeners[i].take()).await;
        let until = Instant::now() + PERIOD * 2;
        while Instant::now() < until {
            let answer = dig(&s.host);
            assert!(
                !answer.is_empty(),
                "the name answered nothing after {i} stopped"
            );
            seen.push(answer);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let settle = Instant::now() + out_limit();
    while Instant::now() < settle {
        let answer = dig(&s.host);
        assert!(
            !answer.is_empty(),
            "the name answered nothing with every target stopped"
        );
        seen.push(answer);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let last = seen.last().cloned().unwrap();
    println!("every target stopped: the name answers {last:?}");
    assert_eq!(last.len(), 1, "the last healthy target stays: {last:?}");
    let lb = wait_for(
        &s.t.api::<LoadBalancer>(),
        "cp",
        "every target failing",
        |l| {
            l.and_then(|l| condition(l, "TargetsReady"))
                .is_some_and(|(st, r)| st == "False" && r == "TargetsUnhealthy")
        },
    )
    .await
    .unwrap();
    let message = lb
        .status
        .as_ref()
        .and_then(|st| st.conditions.iter().find(|c| c.type_ == "TargetsReady"))
        .map(|c| c.message.clone())
        .unwrap_or_default();
    println!("TargetsReady: {message}");
    let last_ip = last[0].clone();
    let last_machine = s
        .addresses
        .iter()
        .position(|a| a.ip().to_string() == last_ip)
        .map(|i| format!("m{}", i + 1))
        .unwrap();
    assert!(
        message.contains(&format!("kept, as the last ones in: {last_machine} (")),
        "{message}"
    );
    // All back.
    for i in 0..3 {
        s.listeners[i] = Some(listen(s.addresses[i]));
    }
    answers("all started", &s.host, &all, Instant::now(), out_limit()).await;
    for l in s.listeners {
        stop(l).await;
    }
    s.t.finish().await;
}

#[tokio::test]
async fn a_deleted_machine_leaves_the_name_before_its_hooks_go_after_ttl_plus_drain() {
    let mut s = setup("dnslb-drain", 2, true).await;
    let all = ips(&s.addresses.iter().collect::<Vec<_>>());
    answers("created", &s.host, &all, s.created, Duration::from_secs(60)).await;
    active(&s.t, 2).await;
    s.t.api::<Machine>()
        .delete("m2", &DeleteParams::default())
        .await
        .unwrap();
    let deleted = Instant::now();
    let mut gone = None;
    let mut removing = None;
    let released = loop {
        assert!(
            deleted.elapsed() < Duration::from_secs(TTL + DRAIN) + out_limit() + MARGIN,
            "m2's hooks were never released: {:?}",
            machine_state(&s.t, "m2").await
        );
        let answer = dig(&s.host);
        assert!(!answer.is_empty());
        if gone.is_none() && answer == ips(&[&s.addresses[0]]) {
            gone = Some(deleted.elapsed());
        }
        let (state, hooks) = machine_state(&s.t, "m2").await.unwrap();
        if removing.is_none() && state == "removing" {
            removing = Some(deleted.elapsed());
        }
        if !hooks {
            break deleted.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let gone = gone.expect("m2 left the name before its hooks went");
    let removing = removing.expect("m2 was removing");
    println!(
        "m2 deleted: out of the name after {gone:?}, removing after {removing:?}, hooks released after {released:?} (TTL {TTL} s + drainSeconds {DRAIN} s)"
    );
    assert!(gone <= released);
    // m2 stays active while the name hands it out: its drain starts when ExternalDNS took the
    // records without it (`status.observedGeneration`, written when ExternalDNS reads them, in the
    // sync that writes the zone a moment later), so at most a moment before `dig` lost it.
    assert!(
        removing + Duration::from_secs(1) >= gone,
        "m2 was removing at {removing:?}, long before it left the name at {gone:?}"
    );
    let held = released - gone;
    // Counted from when ExternalDNS took the records (which it writes to BIND in the same sync, a
    // moment after): at least TTL + drainSeconds, less the moment between.
    assert!(
        held + Duration::from_secs(1) >= Duration::from_secs(TTL + DRAIN),
        "hooks released {held:?} after the record left the name"
    );
    assert!(
        held <= Duration::from_secs(TTL + DRAIN) + MARGIN,
        "hooks held {held:?} after the record left the name"
    );
    release_machine(&s.t, "m2").await;
    for l in s.listeners.drain(..) {
        stop(l).await;
    }
    s.t.finish().await;
}

#[tokio::test]
async fn a_restarted_controller_never_publishes_an_older_record_set() {
    let mut s = setup("dnslb-restart", 3, false).await;
    let first = s.t.spawn(options(&s.t));
    let all = ips(&s.addresses.iter().collect::<Vec<_>>());
    answers("created", &s.host, &all, s.created, Duration::from_secs(60)).await;
    stop(s.listeners[1].take()).await;
    let without_m2 = ips(&[&s.addresses[0], &s.addresses[2]]);
    answers(
        "m2 stopped",
        &s.host,
        &without_m2,
        Instant::now(),
        out_limit(),
    )
    .await;
    first.stop().await;
    // A new controller, whose probes know nothing yet: the name keeps the records it had.
    let restarted = Instant::now();
    s.t.start(options(&s.t));
    let mut samples = BTreeSet::new();
    while restarted.elapsed() < PERIOD * 4 + external_dns().interval + MARGIN {
        let answer = dig(&s.host);
        assert!(
            !answer.is_empty(),
            "the name answered nothing after the restart"
        );
        assert!(
            !answer.contains(&s.addresses[1].ip().to_string()),
            "the restarted controller put the stopped m2 back: {answer:?} after {:?}",
            restarted.elapsed()
        );
        samples.insert(answer);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("after the restart the name answered {samples:?}");
    assert_eq!(samples, BTreeSet::from([without_m2]));
    // The new controller works: m2 comes back once it answers.
    s.listeners[1] = Some(listen(s.addresses[1]));
    answers("m2 started", &s.host, &all, Instant::now(), out_limit()).await;
    for l in s.listeners.drain(..) {
        stop(l).await;
    }
    s.t.finish().await;
}
