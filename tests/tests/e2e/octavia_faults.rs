//! Fault injection against the real Octavia API (tests/octavia/harness.sh): the API server stops in
//! the middle of provisioning and comes back; the project's load-balancer quota runs out. These
//! change the API every Octavia test uses, so each holds it alone (`exclusive_api`): the others
//! (which hold it shared) wait, and these take turns.

use capi_lb::sim::world::World;
use capi_lb_api::{LoadBalancer, OctaviaLoadBalancer};
use capi_lb_tests::octavia::{delete_until_gone, exclusive_api, octavia_objects, reconcile_until};
use capi_lb_tests::*;
use kube::api::{Api, DeleteParams};
use serde_json::json;

#[tokio::test]
async fn the_api_stopping_mid_provisioning_converges_with_no_duplicate() {
    // These tests change the whole API (stop it, run the quota out): one at a time, no other
    // test using it meanwhile.
    let (h, _api) = exclusive_api().await;
    let mut objects = octavia_objects(&h, "cp", json!({}));
    objects.push(machine("cp-m1", "cp", "10.0.0.11").build());
    let world = World::new(objects).await.unwrap();
    // The create goes through; then the API goes away before the load balancer is ACTIVE.
    world.reconcile(NS, "cp").await.unwrap();
    let infra = Api::<OctaviaLoadBalancer>::namespaced(world.client(), NS);
    let id = infra
        .get("cp")
        .await
        .unwrap()
        .status
        .unwrap()
        .load_balancer_id
        .unwrap();
    h.stop_api();
    for _ in 0..3 {
        // Reconciles keep working: the failure is a condition and a back-off, not a crash.
        world.reconcile(NS, "cp").await.unwrap();
    }
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "InfrastructureReady");
    assert_eq!(c.reason, "ProviderError", "{c:?}");
    assert!(c.message.contains("no answer"), "{c:?}");
    // A restart while the API is down loses nothing either.
    let world = world.restart();
    world.reconcile(NS, "cp").await.unwrap();
    h.start_api();

    let lb = reconcile_until(&world, NS, "cp", "Ready after the API is back", is_ready).await;
    let tag = uid_tag(&lb);
    let found = h.lbs_tagged(&tag);
    assert_eq!(found.len(), 1, "exactly one load balancer: {found:?}");
    assert_eq!(found[0]["id"], id.as_str());

    // And with the API down at deletion, the finalizer waits for it.
    h.stop_api();
    Api::<LoadBalancer>::namespaced(world.client(), NS)
        .delete("cp", &DeleteParams::default())
        .await
        .unwrap();
    world.reconcile(NS, "cp").await.unwrap();
    assert!(
        Api::<LoadBalancer>::namespaced(world.client(), NS)
            .get_opt("cp")
            .await
            .unwrap()
            .is_some(),
        "the finalizer must stay while Octavia cannot confirm the deletion"
    );
    h.start_api();
    // The deletion started above; finish it (delete_until_gone's delete is a no-op by now).
    delete_until_gone(&world, NS, "cp").await;
    assert!(h.lbs_tagged(&tag).is_empty());
}

/// Octavia's quota, set to zero load balancers for the project (a test of its own binary: the quota is
/// project-wide), refuses the create: reported as QuotaExceeded and retried, it goes ahead once the
/// quota allows.
#[tokio::test]
async fn an_exhausted_quota_is_reported_and_retried() {
    // These tests change the whole API (stop it, run the quota out): one at a time, no other
    // test using it meanwhile.
    let (h, _api) = exclusive_api().await;
    let project = h.var("OS_PROJECT_ID");
    let set_quota = |n: i64| {
        let (code, body) = h.octavia(
            "PUT",
            &format!("lbaas/quotas/{project}"),
            Some(json!({"quota": {"loadbalancer": n}})),
        );
        assert!(code == 200 || code == 202, "{code} {body}");
    };
    set_quota(0);
    let mut objects = octavia_objects(&h, "cp", json!({}));
    objects.push(machine("cp-m1", "cp", "10.0.0.11").build());
    let world = World::new(objects).await.unwrap();
    let outcome = world.reconcile(NS, "cp").await;
    set_quota(-1);
    let outcome = outcome.unwrap();
    let c = condition(&get_lb(&world, "cp").await, "InfrastructureReady");
    assert_eq!(c.reason, "QuotaExceeded", "{c:?}");
    assert!(c.message.contains("Quota has been met"), "{c:?}");
    assert_eq!(
        outcome.requeue_after,
        Some(std::time::Duration::from_secs(60)),
        "retried on its own, without a spec change"
    );
    let lb = reconcile_until(&world, NS, "cp", "Ready once the quota allows", is_ready).await;
    let tag = uid_tag(&lb);
    delete_until_gone(&world, NS, "cp").await;
    assert!(h.lbs_tagged(&tag).is_empty());
}
