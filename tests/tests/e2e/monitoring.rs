//! The metrics capi-lb's dashboard and alerts read are the ones a running controller exports: capi-lb
//! runs in this process (restricted to the test's namespace, plain-HTTP metrics on a free loopback
//! port), reconciles a LoadBalancer (in-memory provider) with a Machine target to Ready on the real
//! apiserver, and every metric name in any dashboard panel, dashboard variable or alert expression
//! (parsed out of the PromQL, `capi_lb_tests::promql`) must be in its `/metrics` (but for the
//! OpenStack request metrics, which only the Octavia provider's requests create: those are looked
//! for in the exporter's output after one such request). The controller's client counts its
//! requests as `capi-lb run`'s does (`TestNs::start_instrumented`). On the way the
//! fleet's gauges are checked against what happens: the LoadBalancer counted by condition, the
//! Machine counted `active`, one Ready transition timed, and the deleted Machine counted as held by
//! the deletion hooks while its member drains, then no more once they are released.

use capi_lb_api::LoadBalancer;
use capi_lb_api::capi::Machine;
use capi_lb_api::target::TargetKeys;
use capi_lb_bench::scrape::{Scrape, get, parse};
use capi_lb_tests::k8s::{
    TestNs, eventually, in_memory, install_capi_crds, load_balancer, machine, release_machine,
    set_machine_ip, wait_for, wait_ready,
};
use capi_lb_tests::promql::shipped_metric_names;
use kube::ResourceExt;
use kube::api::DeleteParams;
use serde_json::json;
use std::net::SocketAddr;

/// Metrics whose series exist only once the Octavia provider made a request to OpenStack, which
/// this scenario (in-memory provider) does not: the exporter shows nothing of them before (not even
/// `# TYPE`). They are checked against the exporter's own output after one OpenStack request
/// ([`after_an_openstack_request`]).
const OPENSTACK_ONLY: &str = "capi_lb_openstack_";

/// What capi-lb's exporter shows after one OpenStack request was observed (as the Octavia provider
/// reports it).
fn after_an_openstack_request() -> Scrape {
    use capi_lb_providers::observe::{ApiCall, ApiObserver};
    let metrics = capi_lb::telemetry::Metrics::new();
    metrics.observe(&ApiCall {
        service: "load-balancer",
        operation: "loadbalancer.status",
        status: Some(200),
        duration: std::time::Duration::from_millis(20),
    });
    parse(&metrics.encode())
}

/// `/metrics` of the controller at `address`: the text and its samples.
async fn scrape(address: SocketAddr) -> (String, Scrape) {
    let (code, body) = get(address, "/metrics").await.expect("/metrics answers");
    assert_eq!(code, 200, "{body}");
    let samples = parse(&body);
    (body, samples)
}

#[tokio::test]
async fn every_metric_of_the_dashboard_and_the_alerts_is_exported() {
    let mut t = TestNs::new("monitoring").await;
    install_capi_crds(&t.client).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut options = t.options(&["inmemory"]);
    options.metrics_address = Some(address);
    options.metrics_secure = false;
    t.start_instrumented(options);

    t.create(in_memory("cp", json!({"addressPools": ["203.0.113.0/24"]})))
        .await;
    t.create(load_balancer(
        "cp",
        "cp",
        json!({"clusterName": "demo", "drainSeconds": 30}),
    ))
    .await;
    t.create(machine(
        "m1",
        json!({"loadbalancer.cluster.x-k8s.io/name": "cp"}),
    ))
    .await;
    set_machine_ip(&t, "m1", "10.0.0.11").await;
    wait_ready(&t, "cp").await;
    let keys = TargetKeys::new(&t.ns, "cp");
    let machines = t.api::<Machine>();
    wait_for(&machines, "m1", "m1 active", |m| {
        m.is_some_and(|m| m.annotations().get(&keys.state).map(String::as_str) == Some("active"))
    })
    .await;

    // The census follows within its interval (10 s): the LoadBalancer Ready, the Machine active,
    // one Ready transition timed.
    let (text, samples) = eventually(
        "the census with the LoadBalancer and its Machine",
        || async {
            let (text, samples) = scrape(address).await;
            let ready = samples.sum(
                "capi_lb_loadbalancers",
                &[("condition", "Ready"), ("status", "True")],
            );
            let active = samples.sum("capi_lb_targets", &[("state", "active")]);
            (ready == 1.0 && active == 1.0).then_some((text, samples))
        },
    )
    .await;
    assert_eq!(samples.sum("capi_lb_time_to_ready_seconds_count", &[]), 1.0);
    assert_eq!(samples.sum("capi_lb_longest_not_ready_seconds", &[]), 0.0);
    assert_eq!(
        samples.sum("capi_lb_drift_repairs_total", &[("provider", "inmemory")]),
        0.0,
        "drift repairs are exported from 0"
    );
    assert_eq!(samples.sum("capi_lb_leader", &[]), 1.0);

    // Every name the dashboard and the alerts read is there.
    let openstack = after_an_openstack_request();
    let names = shipped_metric_names();
    assert!(names.len() >= 15, "{names:?}");
    let mut missing = Vec::new();
    for name in &names {
        let found = if name.starts_with(OPENSTACK_ONLY) {
            // No OpenStack here: nothing of them in the scrape, and the exporter names them so.
            samples.samples(name).next().is_none() && openstack.samples(name).next().is_some()
        } else {
            samples.samples(name).next().is_some()
        };
        if !found {
            missing.push(name.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "used by the dashboard or the alerts and not in /metrics: {missing:?}\n{text}"
    );
    // A converged controller: its requests counted (the reads of the start, the writes of the
    // LoadBalancer's status and the Machine's annotations).
    assert!(samples.sum("capi_lb_kube_requests_total", &[("verb", "patch")]) > 0.0);
    eprintln!(
        "{} metric names of the dashboard and the alerts found in /metrics: {names:?}",
        names.len()
    );

    // A Machine being deleted is held by the deletion hooks while its member drains (30 s).
    machines
        .delete("m1", &DeleteParams::default())
        .await
        .unwrap();
    let held = eventually("the deleted Machine counted as held", || async {
        let (_, samples) = scrape(address).await;
        (samples.sum("capi_lb_deletion_hook_held_machines", &[]) == 1.0).then_some(samples)
    })
    .await;
    assert!(held.sum("capi_lb_deletion_hook_longest_held_seconds", &[]) >= 0.0);
    assert_eq!(held.sum("capi_lb_targets", &[("state", "removing")]), 1.0);
    // Within its drain: not overdue.
    assert_eq!(held.sum("capi_lb_deletion_hook_overdue_seconds", &[]), 0.0);
    // Released after the drain: no longer held.
    wait_for(&machines, "m1", "hooks released", |m| {
        m.is_some_and(|m| !m.annotations().contains_key(&keys.pre_drain))
    })
    .await;
    eventually("no Machine counted as held", || async {
        let (_, samples) = scrape(address).await;
        (samples.sum("capi_lb_deletion_hook_held_machines", &[]) == 0.0).then_some(())
    })
    .await;
    release_machine(&t, "m1").await;
    t.api::<LoadBalancer>()
        .delete("cp", &DeleteParams::default())
        .await
        .unwrap();
    t.finish().await;
}
