//! The DNS provider's object logic against the in-memory API (ExternalDNS's `DNSEndpoint` kind
//! served, ExternalDNS played by setting `status.observedGeneration`): the records are the targets'
//! addresses, a target is active once ExternalDNS took its record, a deleted Machine leaves the
//! records first and keeps its deletion hooks for the TTL plus `drainSeconds` counted from when
//! ExternalDNS took the records without it, the records never go empty, and a name has one owner.
//! The real chain (ExternalDNS, BIND, real listeners probed) is in `e2e/dnslb.rs`.

use std::collections::BTreeMap;
use std::time::Duration;

use capi_lb::sim::world::World;
use capi_lb_api::DNSLoadBalancer;
use capi_lb_api::LoadBalancer;
use capi_lb_api::capi::Machine;
use capi_lb_api::externaldns::DNSEndpoint;
use capi_lb_api::target::TargetKeys;
use capi_lb_providers::clock::Clock;
use capi_lb_tests::*;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const HOST: &str = "api.demo.example.com";
const TTL: u64 = 30;
const DRAIN: u64 = 10;

fn held_machine(name: &str, lb: &str, ip: &str) -> Value {
    let mut m = machine(name, lb, ip).build();
    // Cluster API's own finalizer: a deleted Machine stays until its hooks are released.
    m["metadata"]["finalizers"] = json!(["machine.cluster.x-k8s.io"]);
    m
}

async fn dns_world(objects: Vec<Value>) -> World {
    World::with_builder(objects, |b| b.with_resource::<DNSEndpoint>())
        .await
        .unwrap()
}

/// The A records of `name` in the LoadBalancer's DNSEndpoint.
async fn a_records(world: &World, lb: &str, name: &str) -> Vec<String> {
    let Some(endpoint) = Api::<DNSEndpoint>::namespaced(world.client(), NS)
        .get_opt(lb)
        .await
        .unwrap()
    else {
        return Vec::new();
    };
    let mut out: Vec<String> = endpoint
        .spec
        .endpoints
        .iter()
        .filter(|e| e.dns_name == name && e.record_type == "A")
        .flat_map(|e| e.targets.clone())
        .collect();
    out.sort();
    out
}

/// Each Machine's state and whether LoadBalancer `lb`'s hooks are on it.
async fn machines(world: &World, lb: &str) -> BTreeMap<String, (String, bool)> {
    let keys = TargetKeys::new(NS, lb);
    Api::<Machine>::namespaced(world.client(), NS)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|m| {
            let a = m.annotations();
            let state = a.get(&keys.state).cloned().unwrap_or_default();
            (m.name_any(), (state, a.contains_key(&keys.pre_drain)))
        })
        .collect()
}

async fn dns_infra_of(world: &World, name: &str) -> DNSLoadBalancer {
    Api::<DNSLoadBalancer>::namespaced(world.client(), NS)
        .get(name)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_records_are_the_targets_active_once_external_dns_took_them() {
    let world = dns_world(vec![
        dns_lb("cp").build(),
        dns_infra("cp", HOST, 30),
        held_machine("cp-1", "cp", "10.0.0.11"),
        held_machine("cp-2", "cp", "10.0.0.12"),
    ])
    .await;
    world.run_until_stable(20).await.unwrap();
    assert_eq!(
        a_records(&world, "cp", HOST).await,
        ["10.0.0.11", "10.0.0.12"]
    );
    // ExternalDNS has not taken them: the targets are not active yet, and the status says why.
    let states = machines(&world, "cp").await;
    assert!(
        states.values().all(|(s, hooks)| s == "adding" && *hooks),
        "{states:?}"
    );
    let infra = dns_infra_of(&world, "cp").await;
    let status = infra.status.unwrap();
    assert!(!status.ready);
    assert!(status.waiting_for.unwrap().contains("ExternalDNS"));
    let endpoint = Api::<DNSEndpoint>::namespaced(world.client(), NS)
        .get("cp")
        .await
        .unwrap();
    assert_eq!(endpoint.spec.endpoints[0].record_ttl, Some(30));
    // -ext carries the same addresses.
    assert_eq!(
        slices(&world, "cp-ext").await.get("cp-ext-ipv4").cloned(),
        Some(vec!["10.0.0.11".to_string(), "10.0.0.12".to_string()])
    );

    world.take_dns_endpoints().await.unwrap();
    world.reconcile(NS, "cp").await.unwrap();
    let states = machines(&world, "cp").await;
    assert!(states.values().all(|(s, _)| s == "active"), "{states:?}");
    let lb = get_lb(&world, "cp").await;
    assert!(is_ready(&lb));
    assert_eq!(cond(&lb, "DNSPublished").0, "True");
    assert!(dns_infra_of(&world, "cp").await.status.unwrap().ready);
    // Converged: another pass writes nothing.
    let writes = world.api.stats.writes_excluding_events();
    world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(world.api.stats.writes_excluding_events(), writes);
}

#[tokio::test]
async fn a_deleted_machine_leaves_dns_first_then_keeps_its_hooks_for_ttl_plus_drain() {
    let world = dns_world(vec![
        dns_lb("cp").spec("drainSeconds", json!(DRAIN)).build(),
        dns_infra("cp", HOST, TTL as i64),
        held_machine("cp-1", "cp", "10.0.0.11"),
        held_machine("cp-2", "cp", "10.0.0.12"),
    ])
    .await
    .playing_external_dns();
    world.run_until_stable(20).await.unwrap();
    delete::<Machine>(&world, "cp-2").await;
    world.reconcile(NS, "cp").await.unwrap();
    // Out of the records at once; still active (resolvers get it) while ExternalDNS has not
    // taken that.
    assert_eq!(a_records(&world, "cp", HOST).await, ["10.0.0.11"]);
    assert_eq!(
        machines(&world, "cp").await["cp-2"],
        ("active".to_string(), true)
    );
    // ExternalDNS takes it a minute later: the drain starts only then.
    world.clock.advance(Duration::from_secs(60));
    world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(
        machines(&world, "cp").await["cp-2"],
        ("active".to_string(), true)
    );
    world.take_dns_endpoints().await.unwrap();
    world.reconcile(NS, "cp").await.unwrap();
    let taken_at = world.clock.now();
    assert_eq!(
        machines(&world, "cp").await["cp-2"],
        ("removing".to_string(), true)
    );
    world.clock.advance(Duration::from_secs(TTL + DRAIN - 1));
    world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(
        machines(&world, "cp").await["cp-2"],
        ("removing".to_string(), true),
        "released before TTL + drainSeconds after ExternalDNS took the records"
    );
    world.clock.advance(Duration::from_secs(1));
    for _ in 0..3 {
        world.reconcile(NS, "cp").await.unwrap();
    }
    let released = world.clock.now();
    assert_eq!(
        machines(&world, "cp").await.get("cp-2").map(|m| m.1),
        Some(false),
        "hooks released after TTL + drainSeconds"
    );
    assert_eq!(
        released.duration_since(taken_at).as_secs(),
        (TTL + DRAIN) as i64
    );
    assert_eq!(a_records(&world, "cp", HOST).await, ["10.0.0.11"]);
}

#[tokio::test]
async fn the_records_never_go_empty_the_last_target_is_named_and_its_machine_may_go() {
    let world = dns_world(vec![
        dns_lb("cp").spec("drainSeconds", json!(0)).build(),
        dns_infra("cp", HOST, 5),
        held_machine("cp-1", "cp", "10.0.0.11"),
    ])
    .await
    .playing_external_dns();
    world.run_until_stable(20).await.unwrap();
    delete::<Machine>(&world, "cp-1").await;
    world.run_until_stable(20).await.unwrap();
    assert_eq!(a_records(&world, "cp", HOST).await, ["10.0.0.11"]);
    // Its record stays, but its Machine is not held for it: drained (TTL 5 s), then let go.
    assert_eq!(
        machines(&world, "cp").await["cp-1"],
        ("removed".to_string(), false)
    );
    let lb = get_lb(&world, "cp").await;
    let targets = condition(&lb, "TargetsReady");
    assert_eq!(targets.reason, "LastRecordsKept", "{targets:?}");
    assert!(targets.message.contains("cp-1"), "{targets:?}");
    // A replacement joins: it becomes the record, then the old one goes.
    let new: Machine = serde_json::from_value(held_machine("cp-2", "cp", "10.0.0.12")).unwrap();
    Api::<Machine>::namespaced(world.client(), NS)
        .create(&PostParams::default(), &new)
        .await
        .unwrap();
    world.run_until_stable(40).await.unwrap();
    assert_eq!(a_records(&world, "cp", HOST).await, ["10.0.0.12"]);
    assert_eq!(
        machines(&world, "cp").await.get("cp-1").map(|m| m.1),
        Some(false)
    );
}

#[tokio::test]
async fn a_name_has_one_owner() {
    let world = dns_world(vec![
        dns_lb("first").build(),
        dns_infra("first", HOST, 30),
        held_machine("first-1", "first", "10.0.0.11"),
        dns_lb("second").build(),
        dns_infra("second", HOST, 30),
        held_machine("second-1", "second", "10.0.0.21"),
    ])
    .await
    .playing_external_dns();
    world.run_until_stable(40).await.unwrap();
    let first = get_lb(&world, "first").await;
    let second = get_lb(&world, "second").await;
    let (winner, loser) = if cond(&first, "DNSPublished").0 == "True" {
        (first, second)
    } else {
        (second, first)
    };
    assert_eq!(cond(&winner, "DNSPublished").0, "True");
    assert_eq!(
        cond(&loser, "DNSPublished"),
        ("False".to_string(), "HostnameConflict".to_string())
    );
    assert_eq!(
        a_records(&world, &winner.name_any(), HOST).await.len(),
        1,
        "one owner's records"
    );
    // The loser's target is never active: its record is not in DNS.
    let loser_states = machines(&world, &loser.name_any()).await;
    assert!(
        loser_states.values().all(|(s, _)| s != "active"),
        "{loser_states:?}"
    );
}

#[tokio::test]
async fn a_refused_target_address_is_left_out_of_the_records_alone() {
    let world = dns_world(vec![
        dns_lb("cp").build(),
        dns_infra("cp", HOST, 30),
        held_machine("cp-1", "cp", "10.0.0.11"),
        // A tenant's Machine pointing at the cloud's metadata address.
        held_machine("cp-2", "cp", "169.254.169.254"),
    ])
    .await
    .playing_external_dns();
    world.run_until_stable(20).await.unwrap();
    let lb: LoadBalancer = get_lb(&world, "cp").await;
    let published = condition(&lb, "EndpointPublished");
    assert_eq!(published.reason, "AddressRefused");
    assert!(
        published.message.contains("169.254.169.254"),
        "{published:?}"
    );
    assert_eq!(a_records(&world, "cp", HOST).await, ["10.0.0.11"]);
    assert_eq!(
        slices(&world, "cp-ext").await.get("cp-ext-ipv4").cloned(),
        Some(vec!["10.0.0.11".to_string()])
    );
}

#[tokio::test]
async fn a_refused_loopback_address_is_published_nowhere() {
    let world = dns_world(vec![
        dns_lb("cp").build(),
        dns_infra("cp", HOST, 30),
        held_machine("cp-1", "cp", "127.0.0.2"),
    ])
    .await
    .playing_external_dns();
    world.run_until_stable(20).await.unwrap();
    let lb: LoadBalancer = get_lb(&world, "cp").await;
    assert_eq!(cond(&lb, "EndpointPublished").1, "AddressRefused");
    assert!(a_records(&world, "cp", HOST).await.is_empty());
}

/// A swap between an in-memory load balancer and a DNSLoadBalancer, both ways, made before break:
/// the DNS one's records are decided while the old one serves, and published (and taken by
/// ExternalDNS) once it does; the way back releases the name.
#[tokio::test]
async fn a_swap_to_dns_records_and_back_is_made_before_break() {
    let world = dns_world(vec![
        lb("cp").spec("drainSeconds", json!(5)).build(),
        infra("cp").build(),
        dns_infra("cp-dns", HOST, 30),
        held_machine("cp-1", "cp", "10.0.0.11"),
        held_machine("cp-2", "cp", "10.0.0.12"),
    ])
    .await
    .playing_external_dns();
    world.run_until_stable(20).await.unwrap();
    let before = get_lb(&world, "cp").await.status.unwrap();
    assert_eq!(before.addresses[0].address, "203.0.113.1");

    let to = |kind: &str, name: &str| {
        json!({"spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                              "kind": kind, "name": name}}})
    };
    merge_patch::<LoadBalancer>(&world, "cp", to("DNSLoadBalancer", "cp-dns")).await;
    world.reconcile(NS, "cp").await.unwrap();
    // Brought up once its records are decided, switched to, and the in-memory one is drained
    // before it goes (still in the cloud).
    let lb = get_lb(&world, "cp").await;
    let status = lb.status.clone().unwrap();
    assert_eq!(status.infrastructure_ref.as_ref().unwrap().name, "cp-dns");
    assert_eq!(
        cond(&lb, "InfrastructureMigration"),
        ("True".into(), "MigrationDraining".into())
    );
    assert_eq!(world.cloud.load_balancers().len(), 1, "the old one drains");
    let records = dns_infra_of(&world, "cp-dns").await.status.unwrap().records;
    assert_eq!(records.len(), 2, "{records:?}");
    world.run_until_stable(40).await.unwrap();
    let status = get_lb(&world, "cp").await.status.unwrap();
    assert_eq!(status.infrastructure_ref.unwrap().name, "cp-dns");
    let mut addresses: Vec<String> = status.addresses.iter().map(|a| a.address.clone()).collect();
    addresses.sort();
    assert_eq!(addresses, ["10.0.0.11", "10.0.0.12"]);
    assert_eq!(
        a_records(&world, "cp", HOST).await,
        ["10.0.0.11", "10.0.0.12"]
    );
    assert!(
        world.cloud.load_balancers().is_empty(),
        "the old one released"
    );
    let states = machines(&world, "cp").await;
    assert!(
        states.values().all(|(s, h)| s == "active" && *h),
        "{states:?}"
    );

    // And back: the name is released once the in-memory load balancer serves.
    merge_patch::<LoadBalancer>(&world, "cp", to("InMemoryLoadBalancer", "cp")).await;
    world.run_until_stable(40).await.unwrap();
    let status = get_lb(&world, "cp").await.status.unwrap();
    assert_eq!(status.infrastructure_ref.unwrap().name, "cp");
    assert_eq!(status.addresses.len(), 1);
    assert!(a_records(&world, "cp", HOST).await.is_empty());
    let states = machines(&world, "cp").await;
    assert!(
        states.values().all(|(s, h)| s == "active" && *h),
        "{states:?}"
    );
}
