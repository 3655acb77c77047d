//! Changing a LoadBalancer's `infrastructureRef` migrates make-before-break: the new provider's load
//! balancer is brought up and populated while the old one serves, the published addresses switch
//! once it is ready, and the old one is deleted after the drain time. The `-ext` name and
//! `status.endpoint` never change; a new provider that fails leaves the old one serving.

use std::time::Duration;

use capi_lb::sim::world::World;
use capi_lb_api::LoadBalancer;
use capi_lb_providers::provider::tags;
use capi_lb_tests::*;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};

fn objects(new_infra: InfraFixture) -> Vec<Value> {
    vec![
        lb("cp").spec("drainSeconds", json!(30)).build(),
        infra("cp").build(),
        new_infra.build(),
        machine("cp-m1", "cp", "10.0.0.11").build(),
        machine("cp-m2", "cp", "10.0.0.12").build(),
    ]
}

fn new_infra() -> InfraFixture {
    infra("cp-new").spec("addressPools", json!(["198.51.100.0/24"]))
}

/// Point LoadBalancer `cp` at the InMemoryLoadBalancer `name`.
async fn point_at(world: &World, name: &str) {
    merge_patch::<LoadBalancer>(
        world,
        "cp",
        json!({"spec": {"infrastructureRef": {"name": name}}}),
    )
    .await;
}

/// Cloud load balancers by the infrastructure object they were made for: name -> (address, members).
fn cloud(world: &World) -> Vec<(String, String, usize)> {
    let mut out: Vec<(String, String, usize)> = world
        .cloud
        .load_balancers()
        .into_iter()
        .map(|l| {
            (
                l.tags
                    .get(tags::INFRASTRUCTURE_UID)
                    .cloned()
                    .unwrap_or_default(),
                l.addresses[0].address.clone(),
                l.members.len(),
            )
        })
        .collect();
    out.sort_by(|a, b| a.1.cmp(&b.1));
    out
}

#[tokio::test]
async fn the_new_load_balancer_serves_before_the_old_one_goes() {
    let world = world(objects(
        new_infra().spec("provisioningDelaySeconds", json!(20)),
    ))
    .await;
    world.run_until_stable(50).await.unwrap();
    let before = get_lb(&world, "cp").await.status.unwrap();
    let slice_before = slice(&world, "cp-ext-ipv4").await.unwrap();
    assert_eq!(slice_before.endpoints[0].addresses, vec!["203.0.113.1"]);

    point_at(&world, "cp-new").await;
    // Bringing up: the old one serves, the new one is created and provisioning.
    world.reconcile(NS, "cp").await.unwrap();
    let lb = get_lb(&world, "cp").await;
    let status = lb.status.clone().unwrap();
    assert_eq!(status.infrastructure_ref.as_ref().unwrap().name, "cp");
    assert_eq!(status.migration.as_ref().unwrap().to.name, "cp-new");
    assert_eq!(
        cond(&lb, "InfrastructureMigration"),
        ("True".into(), "MigrationProvisioning".into())
    );
    assert_eq!(cloud(&world).len(), 2, "both exist");
    assert_eq!(
        slice(&world, "cp-ext-ipv4").await.unwrap().endpoints[0].addresses,
        vec!["203.0.113.1"],
        "still published: the old one"
    );

    // 20 s later it is provisioned; members join (another 20 s), then the switch.
    for _ in 0..3 {
        world.clock.advance(Duration::from_secs(20));
        world.reconcile(NS, "cp").await.unwrap();
    }
    let lb = get_lb(&world, "cp").await;
    let status = lb.status.clone().unwrap();
    assert_eq!(status.infrastructure_ref.as_ref().unwrap().name, "cp-new");
    assert_eq!(status.addresses[0].address, "198.51.100.1");
    assert_eq!(
        status.endpoint, before.endpoint,
        "the stable endpoint does not change"
    );
    assert_eq!(
        cond(&lb, "InfrastructureMigration"),
        ("True".into(), "MigrationDraining".into())
    );
    let slice_after = slice(&world, "cp-ext-ipv4").await.unwrap();
    assert_eq!(slice_after.endpoints[0].addresses, vec!["198.51.100.1"]);
    assert_eq!(slice_after.uid(), slice_before.uid(), "updated in place");
    let clouds = cloud(&world);
    assert_eq!(clouds.len(), 2, "the old one drains for 30 s");
    assert!(
        clouds.iter().all(|(_, _, members)| *members == 2),
        "{clouds:?}"
    );

    // After the drain time the old one is deleted and its infrastructure object released.
    world.run_until_stable(50).await.unwrap();
    let clouds = cloud(&world);
    assert_eq!(clouds.len(), 1);
    assert_eq!(clouds[0].1, "198.51.100.1");
    let old = get_infra(&world, "cp").await.unwrap();
    assert!(old.finalizers().is_empty() && old.owner_references().is_empty());
    let lb = get_lb(&world, "cp").await;
    assert!(lb.status.clone().unwrap().migration.is_none());
    assert_eq!(
        cond(&lb, "InfrastructureMigration"),
        ("False".into(), "MigrationComplete".into())
    );
    assert!(lb.status.unwrap().ready);
}

#[tokio::test]
async fn a_failing_new_provider_leaves_the_old_one_serving_and_going_back_cancels() {
    let world = world(objects(new_infra().failure("Ensure", "Permanent", 1))).await;
    world.run_until_stable(50).await.unwrap();
    point_at(&world, "cp-new").await;
    world.run_until_stable(50).await.unwrap();
    let lb = get_lb(&world, "cp").await;
    let status = lb.status.clone().unwrap();
    assert_eq!(status.infrastructure_ref.unwrap().name, "cp");
    assert!(status.ready, "still serving");
    let c = condition(&lb, "InfrastructureMigration");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "MigrationBlocked")
    );
    assert!(c.message.contains("keeps serving"), "{}", c.message);
    assert_eq!(
        slices(&world, "cp-ext").await["cp-ext-ipv4"],
        vec!["203.0.113.1"]
    );
    assert_eq!(cloud(&world).len(), 1);

    // Back to the serving one: the migration is cancelled, the new object released.
    point_at(&world, "cp").await;
    world.run_until_stable(50).await.unwrap();
    let lb = get_lb(&world, "cp").await;
    assert!(lb.status.clone().unwrap().migration.is_none());
    assert_eq!(
        cond(&lb, "InfrastructureMigration"),
        ("False".into(), "MigrationCancelled".into())
    );
    let released = get_infra(&world, "cp-new").await.unwrap();
    assert!(released.finalizers().is_empty() && released.owner_references().is_empty());
    assert!(lb.status.unwrap().ready);
}

#[tokio::test]
async fn deleting_the_load_balancer_mid_migration_deletes_both() {
    let world = world(objects(
        new_infra().spec("provisioningDelaySeconds", json!(60)),
    ))
    .await;
    world.run_until_stable(50).await.unwrap();
    point_at(&world, "cp-new").await;
    world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(cloud(&world).len(), 2);
    Api::<LoadBalancer>::namespaced(world.client(), NS)
        .delete("cp", &DeleteParams::default())
        .await
        .unwrap();
    world.run_until_stable(100).await.unwrap();
    assert!(cloud(&world).is_empty(), "{:?}", cloud(&world));
    assert!(
        Api::<LoadBalancer>::namespaced(world.client(), NS)
            .get_opt("cp")
            .await
            .unwrap()
            .is_none()
    );
}

/// A migration to an infrastructure object that does not exist is blocked before it begins:
/// nothing of it was claimed or provisioned, so deleting the LoadBalancer deletes the serving load
/// balancer and does not ask the new provider to delete anything (the Octavia provider cannot
/// without the object's credentials). Found by the property test on the real apiserver
/// (`e2e/fuzz.rs`), where a migration to a provider that is not enabled kept the LoadBalancer
/// `Deleting` with `ProviderNotEnabled`.
#[tokio::test]
async fn deleting_after_a_blocked_migration_does_not_wait_for_its_target() {
    let world = world(objects(new_infra())).await;
    world.run_until_stable(50).await.unwrap();
    merge_patch::<LoadBalancer>(
        &world,
        "cp",
        json!({"spec": {"infrastructureRef": {"kind": "OctaviaLoadBalancer", "name": "cp-new"}}}),
    )
    .await;
    world.run_until_stable(50).await.unwrap();
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "InfrastructureMigration");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "MigrationBlocked"),
        "{}",
        c.message
    );
    assert_eq!(cloud(&world).len(), 1);
    Api::<LoadBalancer>::namespaced(world.client(), NS)
        .delete("cp", &DeleteParams::default())
        .await
        .unwrap();
    world.run_until_stable(100).await.unwrap();
    let left = Api::<LoadBalancer>::namespaced(world.client(), NS)
        .get_opt("cp")
        .await
        .unwrap();
    assert!(
        cloud(&world).is_empty(),
        "{:?} {:#?}",
        cloud(&world),
        left.and_then(|l| l.status).map(|s| s.conditions)
    );
    assert!(
        Api::<LoadBalancer>::namespaced(world.client(), NS)
            .get_opt("cp")
            .await
            .unwrap()
            .is_none(),
        "the LoadBalancer waits for a provider that never provisioned anything"
    );
}
