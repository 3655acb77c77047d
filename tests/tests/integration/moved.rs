//! `clusterctl move`, as capi-lb's objects live through it: the Cluster is paused, each object is
//! created again in the target with a new UID and no status (owner references remapped to the new
//! owners' UIDs), and deleted from the source with `clusterctl.cluster.x-k8s.io/delete-for-move`
//! after its finalizers were removed. Here source and target are one in-memory API and the cloud is
//! shared, as two management clusters share one cloud: the copy must adopt the cloud load balancer
//! (same ID, same address), never make a second one, and rebuild its status, a migration under way
//! included. The same move against real apiservers and Cluster API's own clusterctl is in
//! `e2e/clusterctl_move.rs`.

use std::collections::BTreeMap;

use capi_lb::sim::world::World;
use capi_lb_api::LoadBalancer;
use capi_lb_api::capi::Cluster;
use capi_lb_api::constants::ANNOTATION_OWNERSHIP;
use capi_lb_tests::*;
use kube::ResourceExt;
use kube::api::ApiResource;
use serde_json::{Value, json};

fn inmemory_resource() -> ApiResource {
    ApiResource::erase::<capi_lb_api::InMemoryLoadBalancer>(&())
}

fn lb_resource() -> ApiResource {
    ApiResource::erase::<LoadBalancer>(&())
}

fn objects(new_infra_delay: u32) -> Vec<Value> {
    vec![
        cluster_naming("demo", false, "cp"),
        lb("cp").spec("drainSeconds", json!(30)).build(),
        infra("cp").build(),
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
            "kind": "InMemoryLoadBalancer",
            "metadata": {"name": "cp-new", "namespace": NS},
            "spec": {"addressPools": ["198.51.100.0/24"],
                     "provisioningDelaySeconds": new_infra_delay},
        }),
        machine("cp-m1", "cp", "10.0.0.11").build(),
        machine("cp-m2", "cp", "10.0.0.12").build(),
    ]
}

/// The cloud: load balancer ID -> its first address.
fn cloud(world: &World) -> BTreeMap<String, String> {
    world
        .cloud
        .load_balancers()
        .into_iter()
        .map(|l| (l.id, l.addresses[0].address.clone()))
        .collect()
}

async fn set_paused(world: &World, paused: bool) {
    merge_patch::<Cluster>(world, "demo", json!({"spec": {"paused": paused}})).await;
}

/// Pause, move, unpause, settle.
async fn move_and_settle(world: &World, objects: &[(ApiResource, &str)], keep_ownership: bool) {
    set_paused(world, true).await;
    settle(world).await;
    let calls = world.cloud.calls();
    clusterctl_move(world, objects, keep_ownership).await;
    settle(world).await;
    assert_eq!(
        world.cloud.calls(),
        calls,
        "the provider was called while the Cluster was paused"
    );
    set_paused(world, false).await;
    settle(world).await;
}

#[tokio::test]
async fn a_moved_load_balancer_adopts_its_cloud_load_balancer_and_rebuilds_its_status() {
    let world = world(objects(0)).await;
    settle(&world).await;
    let before = cloud(&world);
    assert_eq!(before.len(), 1);
    let lb = get_lb(&world, "cp").await;
    assert!(is_ready(&lb));
    let recorded = lb.annotations()[ANNOTATION_OWNERSHIP].clone();
    assert_eq!(recorded, format!("cp/{}", lb.uid().unwrap()));
    assert!(
        lb.owner_references()
            .iter()
            .any(|o| o.kind == "Cluster" && o.name == "demo" && o.controller.is_none())
    );

    move_and_settle(
        &world,
        &[(lb_resource(), "cp"), (inmemory_resource(), "cp")],
        true,
    )
    .await;

    // The same cloud load balancer, nothing new, nothing deleted.
    assert_eq!(cloud(&world), before);
    let lb = get_lb(&world, "cp").await;
    assert!(is_ready(&lb), "{:?}", lb.status);
    let status = lb.status.clone().unwrap();
    assert_eq!(status.addresses[0].address, "203.0.113.1");
    assert_eq!(status.active_targets, vec!["cp-m1", "cp-m2"]);
    assert_eq!(status.infrastructure_ref.unwrap().name, "cp");
    // The copy keeps the recorded ownership (its own UID is new).
    assert_eq!(lb.annotations()[ANNOTATION_OWNERSHIP], recorded);
    assert_ne!(recorded, format!("cp/{}", lb.uid().unwrap()));
    assert_eq!(
        slices(&world, "cp-ext").await["cp-ext-ipv4"],
        vec!["203.0.113.1"]
    );
    let infra = get_infra(&world, "cp").await.unwrap();
    assert_eq!(
        infra.status.unwrap().load_balancer_id.as_deref(),
        before.keys().next().map(String::as_str)
    );
}

#[tokio::test]
async fn without_the_recorded_ownership_the_copy_would_make_a_second_load_balancer() {
    // The control for the test above: the ownership annotation is what carries the cloud load
    // balancer across the move.
    let world = world(objects(0)).await;
    settle(&world).await;
    let before = cloud(&world);
    move_and_settle(
        &world,
        &[(lb_resource(), "cp"), (inmemory_resource(), "cp")],
        false,
    )
    .await;
    let after = cloud(&world);
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(before.keys().all(|id| after.contains_key(id)));
}

#[tokio::test]
async fn a_migration_under_way_continues_after_the_move() {
    // The new load balancer takes 20 s to provision: the move happens while it is brought up.
    let world = world(objects(20)).await;
    settle(&world).await;
    merge_patch::<LoadBalancer>(
        &world,
        "cp",
        json!({"spec": {"infrastructureRef": {"name": "cp-new"}}}),
    )
    .await;
    world.reconcile(NS, "cp").await.unwrap();
    let status = get_lb(&world, "cp").await.status.unwrap();
    assert_eq!(status.infrastructure_ref.unwrap().name, "cp");
    assert_eq!(status.migration.unwrap().to.name, "cp-new");
    let during = cloud(&world);
    assert_eq!(during.len(), 2, "{during:?}");

    move_and_settle(
        &world,
        &[
            (lb_resource(), "cp"),
            (inmemory_resource(), "cp"),
            (inmemory_resource(), "cp-new"),
        ],
        true,
    )
    .await;

    // Finished make-before-break from the rebuilt status: the new one serves, the old one is
    // gone from the cloud, nothing was made twice.
    let after = cloud(&world);
    assert_eq!(after.len(), 1, "{after:?}");
    let (id, address) = after.into_iter().next().unwrap();
    assert_eq!(during.get(&id), Some(&address), "the new one, not a third");
    assert!(address.starts_with("198.51.100."));
    let lb = get_lb(&world, "cp").await;
    assert!(is_ready(&lb));
    let status = lb.status.clone().unwrap();
    assert_eq!(status.infrastructure_ref.unwrap().name, "cp-new");
    assert_eq!(status.migration, None);
    assert_eq!(slices(&world, "cp-ext").await["cp-ext-ipv4"], vec![address]);
    // The old infrastructure object was released.
    let old = get_infra(&world, "cp").await.unwrap();
    assert!(old.finalizers().is_empty());
    assert!(old.owner_references().is_empty());
}
