//! DNS publication through ExternalDNS, object logic: the real reconciler against the in-memory API
//! with ExternalDNS's `DNSEndpoint` kind served (ExternalDNS itself is played by the test, which
//! writes `status.observedGeneration` as ExternalDNS does).
// Integration tests: helpers panic on broken fixtures, which is the failure we want.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capi_lb::sim::world::World;
use capi_lb_api::externaldns::DNSEndpoint;
use capi_lb_api::{InMemoryLoadBalancer, LoadBalancer};
use capi_lb_tests::*;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

async fn dns_world(objects: Vec<serde_json::Value>) -> World {
    World::with_builder(objects, |b| b.with_resource::<DNSEndpoint>())
        .await
        .unwrap()
}

async fn endpoint(world: &World, name: &str) -> Option<DNSEndpoint> {
    Api::<DNSEndpoint>::namespaced(world.client(), NS)
        .get_opt(name)
        .await
        .unwrap()
}

/// What ExternalDNS does once it processed a DNSEndpoint.
async fn observe(world: &World, name: &str) {
    let found = endpoint(world, name).await.unwrap();
    Api::<DNSEndpoint>::namespaced(world.client(), NS)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"status": {"observedGeneration": found.metadata.generation.unwrap_or(1)}}),
            ),
        )
        .await
        .unwrap();
}

fn records(e: &DNSEndpoint) -> Vec<(String, String, Vec<String>)> {
    e.spec
        .endpoints
        .iter()
        .map(|r| (r.dns_name.clone(), r.record_type.clone(), r.targets.clone()))
        .collect()
}

#[tokio::test]
async fn the_hostnames_follow_the_address_and_external_dns_observing_makes_it_published() {
    let world = dns_world(vec![
        lb("cp")
            .spec(
                "dns",
                json!({"hostnames": ["api.example.com"], "ttlSeconds": 60}),
            )
            .spec("endpoint", json!({"host": "cp.example.com", "port": 6443}))
            .build(),
        infra("cp").build(),
    ])
    .await;
    world.run_until_stable(20).await.unwrap();
    let lb_now = get_lb(&world, "cp").await;
    let address = lb_now.status.as_ref().unwrap().addresses[0].address.clone();
    let published = endpoint(&world, "cp").await.expect("a DNSEndpoint");
    assert_eq!(
        records(&published),
        [
            (
                "api.example.com".to_string(),
                "A".to_string(),
                vec![address.clone()]
            ),
            (
                "cp.example.com".to_string(),
                "A".to_string(),
                vec![address.clone()]
            ),
        ]
    );
    assert_eq!(published.spec.endpoints[0].record_ttl, Some(60));
    assert_eq!(published.owner_references()[0].uid, lb_now.uid().unwrap());
    assert_eq!(
        cond(&lb_now, "DNSPublished"),
        ("False".into(), "NotObserved".into())
    );

    observe(&world, "cp").await;
    world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(
        cond(&get_lb(&world, "cp").await, "DNSPublished"),
        ("True".into(), "RecordsObserved".into())
    );

    // The address changes: the records follow, in place.
    merge_patch::<InMemoryLoadBalancer>(
        &world,
        "cp",
        json!({"spec": {"addressPools": ["198.51.100.0/24"]}}),
    )
    .await;
    world.run_until_stable(20).await.unwrap();
    let moved = endpoint(&world, "cp").await.unwrap();
    assert_eq!(moved.uid(), published.uid());
    assert!(
        records(&moved)
            .iter()
            .all(|(_, _, t)| t[0].starts_with("198.51.100.")),
        "{:?}",
        records(&moved)
    );

    // spec.dns removed: the DNSEndpoint goes, the condition says so.
    merge_patch::<LoadBalancer>(&world, "cp", json!({"spec": {"dns": null}})).await;
    world.run_until_stable(20).await.unwrap();
    assert!(endpoint(&world, "cp").await.is_none());
    assert_eq!(
        cond(&get_lb(&world, "cp").await, "DNSPublished"),
        ("False".into(), "DNSDisabled".into())
    );
}

#[tokio::test]
async fn conflicts_are_reported_and_nothing_foreign_is_touched() {
    let world = dns_world(vec![
        lb("first").spec("dns", json!({"hostnames": ["api.example.com"]})).build(),
        infra("first").build(),
        lb("second")
            .spec("dns", json!({"hostnames": ["api.example.com", "second.example.com"]}))
            .build(),
        infra("second").build(),
        lb("hand").spec("dns", json!({"hostnames": ["hand2.example.com"]})).build(),
        infra("hand").build(),
        json!({"apiVersion": "externaldns.k8s.io/v1alpha1", "kind": "DNSEndpoint",
               "metadata": {"name": "hand", "namespace": NS},
               "spec": {"endpoints": [{"dnsName": "hand.example.com", "recordType": "A", "targets": ["192.0.2.1"]}]}}),
    ])
    .await;
    for _ in 0..5 {
        world.reconcile(NS, "first").await.unwrap();
    }
    assert!(endpoint(&world, "first").await.is_some());
    world.clock.advance(std::time::Duration::from_secs(1));
    world.run_until_stable(30).await.unwrap();
    let second = get_lb(&world, "second").await;
    assert_eq!(
        condition(&second, "DNSPublished").reason,
        "HostnameConflict"
    );
    assert!(
        condition(&second, "DNSPublished")
            .message
            .contains("api.example.com")
    );
    let names: Vec<String> = records(&endpoint(&world, "second").await.unwrap())
        .into_iter()
        .map(|(n, _, _)| n)
        .collect();
    assert_eq!(
        names,
        ["second.example.com"],
        "only the free name is published"
    );
    let first: Vec<String> = records(&endpoint(&world, "first").await.unwrap())
        .into_iter()
        .map(|(n, _, _)| n)
        .collect();
    assert_eq!(first, ["api.example.com"], "the first one keeps its name");
    assert_eq!(
        condition(&get_lb(&world, "hand").await, "DNSPublished").reason,
        "NameConflict"
    );
    let hand = endpoint(&world, "hand").await.unwrap();
    assert_eq!(
        records(&hand)[0].0,
        "hand.example.com",
        "the foreign DNSEndpoint is untouched"
    );
    assert!(hand.owner_references().is_empty());
}

#[tokio::test]
async fn without_external_dns_the_crd_is_named() {
    let world = World::new(vec![
        lb("cp")
            .spec("dns", json!({"hostnames": ["api.example.com"]}))
            .build(),
        infra("cp").build(),
    ])
    .await
    .unwrap();
    world.run_until_stable(20).await.unwrap();
    let lb = get_lb(&world, "cp").await;
    assert_eq!(
        condition(&lb, "DNSPublished").reason,
        "DNSEndpointCRDMissing"
    );
    assert!(is_ready(&lb), "the load balancer itself works");
}
