//! The zoned provider's object logic against the in-memory API: a LoadBalancer over one
//! in-memory load balancer per zone. Each zone gets its own LoadBalancer with the targets of its
//! failure domain; the parent publishes the addresses of the zones that serve (status, `-ext`,
//! the `DNSEndpoint`), takes a zone that is down out and never the last one, swaps a zone's load
//! balancer make before break, and deletes the zones' LoadBalancers (and their cloud load
//! balancers) before it goes. The real chain (two Octavia availability zones, ExternalDNS, BIND)
//! is in `e2e/zoned.rs`.

use std::collections::BTreeMap;

use capi_lb::sim::world::World;
use capi_lb_api::capi::Machine;
use capi_lb_api::externaldns::DNSEndpoint;
use capi_lb_api::target::TargetKeys;
use capi_lb_api::{InMemoryLoadBalancer, LoadBalancer, ZonedLoadBalancer};
use capi_lb_tests::*;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::{Value, json};

const HOST: &str = "api.demo.example.com";

fn zoned_lb() -> Value {
    lb("cp")
        .spec(
            "infrastructureRef",
            json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "ZonedLoadBalancer", "name": "cp"}),
        )
        .spec("dns", json!({"hostnames": [HOST]}))
        .spec("drainSeconds", json!(0))
        .build()
}

fn zoned_infra(zones: &[(&str, &str)]) -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "ZonedLoadBalancer",
        "metadata": {"name": "cp", "namespace": NS},
        "spec": {"zones": zones.iter().map(|(zone, infra)| json!({
            "name": zone, "failureDomains": [zone],
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                  "kind": "InMemoryLoadBalancer", "name": infra}})).collect::<Vec<_>>()},
    })
}

fn zone_machine(name: &str, zone: &str, ip: &str) -> Value {
    let mut m = machine(name, "cp", ip).build();
    m["spec"]["failureDomain"] = json!(zone);
    m
}

fn pool(name: &str, cidr: &str) -> Value {
    infra(name).spec("addressPools", json!([cidr])).build()
}

async fn zoned_world() -> World {
    let world = World::with_builder(
        vec![
            zoned_lb(),
            zoned_infra(&[("az1", "cp-az1"), ("az2", "cp-az2")]),
            pool("cp-az1", "203.0.113.0/24"),
            pool("cp-az2", "198.51.100.0/24"),
            pool("cp-az2b", "192.0.2.0/24"),
            zone_machine("m1", "az1", "10.0.1.1"),
            zone_machine("m2", "az2", "10.0.2.1"),
            zone_machine("m3", "az1", "10.0.1.2"),
        ],
        |b| b.with_resource::<DNSEndpoint>(),
    )
    .await
    .unwrap();
    settle(&world).await;
    world
}

fn ips(lb: &LoadBalancer) -> Vec<String> {
    let mut out: Vec<String> = lb
        .status
        .iter()
        .flat_map(|s| &s.addresses)
        .map(|a| a.address.clone())
        .collect();
    out.sort();
    out
}

fn prefix(addresses: &[String]) -> Vec<String> {
    addresses
        .iter()
        .map(|a| {
            a.rsplit_once('.')
                .map(|(p, _)| p.to_string())
                .unwrap_or_default()
        })
        .collect()
}

async fn dns_records(world: &World) -> Vec<String> {
    let endpoint = Api::<DNSEndpoint>::namespaced(world.client(), NS)
        .get_opt("cp")
        .await
        .unwrap();
    let mut out: Vec<String> = endpoint
        .iter()
        .flat_map(|e| &e.spec.endpoints)
        .filter(|e| e.dns_name == HOST && e.record_type == "A")
        .flat_map(|e| e.targets.clone())
        .collect();
    out.sort();
    out
}

async fn states(world: &World, lb: &str) -> BTreeMap<String, String> {
    let keys = TargetKeys::new(NS, lb);
    Api::<Machine>::namespaced(world.client(), NS)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|m| {
            let state = m.annotations().get(&keys.state).cloned()?;
            Some((m.name_any(), state))
        })
        .collect()
}

#[tokio::test]
async fn each_zone_has_its_load_balancer_with_its_targets_and_the_name_has_every_zone() {
    let world = zoned_world().await;
    let parent = get_lb(&world, "cp").await;
    assert!(is_ready(&parent), "{:?}", parent.status);
    assert_eq!(prefix(&ips(&parent)), ["198.51.100", "203.0.113"]);
    assert_eq!(dns_records(&world).await, ips(&parent));
    let ext: Vec<String> = slices(&world, "cp-ext")
        .await
        .into_values()
        .flatten()
        .collect();
    let mut ext = ext;
    ext.sort();
    assert_eq!(ext, ips(&parent));

    // A LoadBalancer per zone, owned by the parent, with the targets of its failure domain, and
    // nothing published of its own.
    for (zone, targets) in [("cp-az1", vec!["m1", "m3"]), ("cp-az2", vec!["m2"])] {
        let child = get_lb(&world, zone).await;
        assert_eq!(child.owner_references()[0].uid, parent.uid().unwrap());
        assert!(!child.spec.publication.enabled);
        assert_eq!(child.spec.dns, None);
        let status = child.status.unwrap();
        assert_eq!(status.targets, targets, "{zone}");
        assert_eq!(status.active_targets, targets, "{zone}");
        assert!(service(&world, &format!("{zone}-ext")).await.is_none());
    }
    // Every target is active on its zone's load balancer and on the parent.
    assert!(states(&world, "cp").await.values().all(|s| s == "active"));
    assert_eq!(
        states(&world, "cp-az2").await,
        BTreeMap::from([("m2".to_string(), "active".to_string())])
    );
    let infra = Api::<ZonedLoadBalancer>::namespaced(world.client(), NS)
        .get("cp")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!((infra.zone_count, infra.serving_zones), (2, 2));
    assert!(infra.zones.iter().all(|z| z.serving && z.ready));
    // Two cloud load balancers, one per zone, each with its own members.
    let mut members: Vec<usize> = world
        .cloud
        .load_balancers()
        .iter()
        .map(|l| l.members.len())
        .collect();
    members.sort();
    assert_eq!(members, [1, 2]);

    // Converged: another round writes nothing.
    let writes = world.api.stats.writes_excluding_events();
    for name in ["cp", "cp-az1", "cp-az2"] {
        world.reconcile(NS, name).await.unwrap();
    }
    assert_eq!(world.api.stats.writes_excluding_events(), writes);
}

#[tokio::test]
async fn a_zone_that_is_down_leaves_the_name_never_the_last_one_and_comes_back() {
    let world = zoned_world().await;
    let both = ips(&get_lb(&world, "cp").await);
    let fail = |times: u32| json!({"spec": {"failures": [{"operation": "Ensure", "type": "Permanent", "times": times}]}});
    // az2's load balancer fails: its address leaves the name, az1's stays.
    merge_patch::<InMemoryLoadBalancer>(&world, "cp-az2", fail(1000)).await;
    settle(&world).await;
    assert!(!is_ready(&get_lb(&world, "cp-az2").await));
    let parent = get_lb(&world, "cp").await;
    assert_eq!(prefix(&ips(&parent)), ["203.0.113"]);
    assert_eq!(dns_records(&world).await, ips(&parent));
    let infra_ready = condition(&parent, "InfrastructureReady");
    assert_eq!(infra_ready.reason, "ZoneDown", "{infra_ready:?}");
    assert!(infra_ready.message.contains("zone az2"), "{infra_ready:?}");
    assert!(warned(&world, "ZoneDown"));

    // az1 fails too: no zone serves, and the name keeps the last addresses.
    let last = ips(&parent);
    merge_patch::<InMemoryLoadBalancer>(&world, "cp-az1", fail(1000)).await;
    settle(&world).await;
    let parent = get_lb(&world, "cp").await;
    assert_eq!(ips(&parent), last);
    assert_eq!(dns_records(&world).await, last);
    assert_eq!(
        condition(&parent, "InfrastructureReady").reason,
        "NoZoneServing"
    );

    // Both back: both in the name again.
    for name in ["cp-az1", "cp-az2"] {
        merge_patch::<InMemoryLoadBalancer>(&world, name, json!({"spec": {"failures": null}}))
            .await;
    }
    settle(&world).await;
    let parent = get_lb(&world, "cp").await;
    assert_eq!(ips(&parent), both);
    assert_eq!(dns_records(&world).await, both);
    assert_eq!(
        condition(&parent, "InfrastructureReady").reason,
        "Provisioned"
    );
}

#[tokio::test]
async fn a_target_in_no_zone_is_reported_and_never_serves() {
    let world = zoned_world().await;
    Api::<Machine>::namespaced(world.client(), NS)
        .create(
            &Default::default(),
            &serde_json::from_value(zone_machine("m4", "az9", "10.0.9.1")).unwrap(),
        )
        .await
        .unwrap();
    settle(&world).await;
    let parent = get_lb(&world, "cp").await;
    assert_eq!(states(&world, "cp").await["m4"], "adding");
    let reported = parent
        .status
        .iter()
        .flat_map(|s| &s.conditions)
        .find(|c| c.reason == "TargetsInNoZone")
        .unwrap_or_else(|| panic!("{:?}", parent.status));
    assert!(reported.message.contains("m4"), "{reported:?}");
    // It is in neither zone's load balancer.
    for zone in ["cp-az1", "cp-az2"] {
        assert!(!states(&world, zone).await.contains_key("m4"));
    }
}

#[tokio::test]
async fn a_zones_swap_is_made_before_break_and_deletion_takes_every_zone() {
    let world = zoned_world().await;
    // az2 moves to another load balancer: its LoadBalancer migrates, the parent follows.
    merge_patch::<ZonedLoadBalancer>(
        &world,
        "cp",
        zoned_infra(&[("az1", "cp-az1"), ("az2", "cp-az2b")]),
    )
    .await;
    settle(&world).await;
    let child = get_lb(&world, "cp-az2").await;
    assert_eq!(child.spec.infrastructure_ref.name, "cp-az2b");
    assert!(is_ready(&child));
    let parent = get_lb(&world, "cp").await;
    assert_eq!(prefix(&ips(&parent)), ["192.0.2", "203.0.113"]);
    assert_eq!(dns_records(&world).await, ips(&parent));
    assert_eq!(
        world.cloud.load_balancers().len(),
        2,
        "the old one is deleted"
    );

    // A zone removed: its LoadBalancer and cloud load balancer go.
    merge_patch::<ZonedLoadBalancer>(&world, "cp", zoned_infra(&[("az1", "cp-az1")])).await;
    settle(&world).await;
    assert!(
        Api::<LoadBalancer>::namespaced(world.client(), NS)
            .get_opt("cp-az2")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(world.cloud.load_balancers().len(), 1);
    assert_eq!(prefix(&ips(&get_lb(&world, "cp").await)), ["203.0.113"]);

    // The parent deleted: every zone's LoadBalancer and load balancer go first.
    delete::<LoadBalancer>(&world, "cp").await;
    settle(&world).await;
    let left: Vec<String> = Api::<LoadBalancer>::namespaced(world.client(), NS)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(world.cloud.load_balancers().is_empty());
}

#[tokio::test]
async fn a_zone_name_taken_by_another_load_balancer_is_left_alone_and_reported() {
    let world = World::with_builder(
        vec![
            zoned_lb(),
            zoned_infra(&[("az1", "cp-az1"), ("az2", "cp-az2")]),
            pool("cp-az1", "203.0.113.0/24"),
            pool("cp-az2", "198.51.100.0/24"),
            pool("other", "192.0.2.0/24"),
            lb("cp-az2")
                .spec(
                    "infrastructureRef",
                    json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "InMemoryLoadBalancer", "name": "other"}),
                )
                .build(),
            zone_machine("m1", "az1", "10.0.1.1"),
        ],
        |b| b.with_resource::<DNSEndpoint>(),
    )
    .await
    .unwrap();
    settle(&world).await;
    let foreign = get_lb(&world, "cp-az2").await;
    assert_eq!(foreign.spec.infrastructure_ref.name, "other", "not touched");
    assert!(foreign.owner_references().is_empty());
    let parent = get_lb(&world, "cp").await;
    assert_eq!(prefix(&ips(&parent)), ["203.0.113"]);
    let infra_ready = condition(&parent, "InfrastructureReady");
    assert_eq!(infra_ready.reason, "ZoneRefused");
    assert!(
        infra_ready.message.contains("exists and is not cp's zone"),
        "{infra_ready:?}"
    );
    // Deleting the parent leaves the other LoadBalancer alone.
    delete::<LoadBalancer>(&world, "cp").await;
    settle(&world).await;
    assert!(
        Api::<LoadBalancer>::namespaced(world.client(), NS)
            .get_opt("cp-az2")
            .await
            .unwrap()
            .is_some()
    );
}

/// Each LoadBalancer's deletion hooks on a Machine (pre-drain and pre-terminate), and its state.
async fn held(world: &World, lb: &str, machine: &str) -> (String, bool) {
    let keys = TargetKeys::new(NS, lb);
    let m = Api::<Machine>::namespaced(world.client(), NS)
        .get(machine)
        .await
        .unwrap();
    let a = m.annotations();
    (
        a.get(&keys.state).cloned().unwrap_or_default(),
        a.contains_key(&keys.pre_drain) && a.contains_key(&keys.pre_terminate),
    )
}

#[tokio::test]
async fn a_deleted_machine_drains_from_its_zone_and_is_let_go_by_both_after_drain_seconds() {
    use capi_lb_providers::clock::Clock;
    use std::time::Duration;

    let mut parent = zoned_lb();
    parent["spec"]["drainSeconds"] = json!(10);
    let machines: Vec<Value> = [
        ("m1", "az1", "10.0.1.1"),
        ("m2", "az2", "10.0.2.1"),
        ("m3", "az1", "10.0.1.2"),
    ]
    .iter()
    .map(|(name, zone, ip)| {
        let mut m = zone_machine(name, zone, ip);
        // Cluster API's own finalizer: a deleted Machine stays until the hooks are released.
        m["metadata"]["finalizers"] = json!(["machine.cluster.x-k8s.io"]);
        m
    })
    .collect();
    let mut objects = vec![
        parent,
        zoned_infra(&[("az1", "cp-az1"), ("az2", "cp-az2")]),
        pool("cp-az1", "203.0.113.0/24"),
        pool("cp-az2", "198.51.100.0/24"),
    ];
    objects.extend(machines);
    let world = World::with_builder(objects, |b| b.with_resource::<DNSEndpoint>())
        .await
        .unwrap();
    settle(&world).await;
    // The parent, whose Cluster does not exist, holds the hooks; a zone's LoadBalancer has no
    // Cluster of its own to consent and holds none (the parent's wait for its zone's drain).
    assert_eq!(held(&world, "cp", "m3").await, ("active".to_string(), true));
    assert_eq!(
        held(&world, "cp-az1", "m3").await,
        ("active".to_string(), false)
    );
    assert_eq!(
        held(&world, "cp-az2", "m3").await,
        (String::new(), false),
        "not in az2"
    );

    delete::<Machine>(&world, "m3").await;
    let round = || async {
        for lb in ["cp-az1", "cp-az2", "cp"] {
            world.reconcile(NS, lb).await.unwrap();
        }
    };
    round().await;
    round().await;
    let started = world.clock.now();
    // Draining from az1's load balancer (weight 0 in the cloud), held by the parent.
    assert_eq!(
        held(&world, "cp", "m3").await,
        ("removing".to_string(), true)
    );
    assert_eq!(
        held(&world, "cp-az1", "m3").await,
        ("removing".to_string(), false)
    );
    let m3 = world
        .cloud
        .load_balancers()
        .into_iter()
        .find_map(|l| l.members.get("m3").cloned())
        .unwrap();
    assert_eq!(m3.state, capi_lb_providers::provider::MemberState::Draining);

    world.clock.advance(Duration::from_secs(9));
    round().await;
    assert!(
        held(&world, "cp", "m3").await.1,
        "let go before drainSeconds"
    );
    world.clock.advance(Duration::from_secs(1));
    round().await;
    round().await;
    assert!(
        !held(&world, "cp", "m3").await.1,
        "still holds m3 after drainSeconds"
    );
    assert_eq!(world.clock.now().duration_since(started).as_secs(), 10);
    // The other targets serve on.
    assert_eq!(held(&world, "cp", "m1").await, ("active".to_string(), true));
    assert_eq!(
        held(&world, "cp-az2", "m2").await,
        ("active".to_string(), false)
    );
    assert_eq!(
        prefix(&ips(&get_lb(&world, "cp").await)),
        ["198.51.100", "203.0.113"]
    );
}
