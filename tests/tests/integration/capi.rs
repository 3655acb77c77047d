//! Cluster API integration: a control-plane LoadBalancer publishes its endpoint to
//! `Cluster.spec.controlPlaneEndpoint` while it is empty, never overwrites another one, and selects
//! the Cluster's control-plane Machines by default.

use capi_lb::sim::world::World;
use capi_lb_api::capi::Cluster;
use capi_lb_tests::*;
use kube::api::Api;
use serde_json::{Value, json};

async fn endpoint(world: &World) -> Option<(String, i32)> {
    Api::<Cluster>::namespaced(world.client(), NS)
        .get("demo")
        .await
        .unwrap()
        .spec
        .control_plane_endpoint
        .filter(|e| !e.is_empty())
        .map(|e| (e.host, e.port))
}

fn cp_machine(name: &str, ip: &str) -> Value {
    let mut m = machine(name, "unrelated", ip).build();
    m["metadata"]["labels"] =
        json!({"cluster.x-k8s.io/cluster-name": "demo", "cluster.x-k8s.io/control-plane": ""});
    m
}

#[tokio::test]
async fn the_stable_name_is_published_before_any_machine_exists() {
    let world = world(vec![
        cluster_naming("demo", false, "cp"),
        lb("cp").spec("controlPlane", json!({})).build(),
        infra("cp")
            .spec("provisioningDelaySeconds", json!(30))
            .build(),
    ])
    .await;
    // One pass: the load balancer is still provisioning and there is no Machine yet.
    world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(
        endpoint(&world).await,
        Some(("cp-ext.default.svc.cluster.local".into(), 6443))
    );
    let lb = get_lb(&world, "cp").await;
    assert_eq!(
        cond(&lb, "ClusterEndpoint"),
        ("True".into(), "ClusterEndpointSet".into())
    );
    // The default selector of a control-plane LoadBalancer: the Cluster's control-plane Machines.
    assert_eq!(
        lb.status.unwrap().target_selector.as_deref(),
        Some("cluster.x-k8s.io/cluster-name=demo,cluster.x-k8s.io/control-plane")
    );
}

#[tokio::test]
async fn the_default_selector_picks_the_control_plane_machines() {
    let mut worker = machine("worker-1", "unrelated", "10.0.1.1").build();
    worker["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": "demo"});
    let world = world(vec![
        cluster_naming("demo", false, "cp"),
        lb("cp").spec("controlPlane", json!({})).build(),
        infra("cp").build(),
        cp_machine("cp-1", "10.0.0.1"),
        cp_machine("cp-2", "10.0.0.2"),
        worker,
    ])
    .await;
    world.run_until_stable(50).await.unwrap();
    let status = get_lb(&world, "cp").await.status.unwrap();
    assert_eq!(status.active_targets, vec!["cp-1", "cp-2"]);
}

#[tokio::test]
async fn the_provider_address_is_published_once_there_is_one() {
    let world = world(vec![
        cluster_naming("demo", false, "cp"),
        lb("cp")
            .spec("controlPlane", json!({"endpointHost": "ProviderAddress"}))
            .build(),
        infra("cp")
            .spec("addressPools", json!([]))
            .spec("hostname", json!("lb.example.com"))
            .build(),
    ])
    .await;
    world.run_until_stable(50).await.unwrap();
    assert_eq!(
        endpoint(&world).await,
        Some(("lb.example.com".into(), 6443))
    );
}

#[tokio::test]
async fn a_user_set_endpoint_wins() {
    let world = world(vec![
        cluster_naming("demo", false, "cp"),
        lb("cp")
            .spec("controlPlane", json!({"endpointHost": "ProviderAddress"}))
            .spec(
                "endpoint",
                json!({"host": "api.demo.example.com", "port": 443}),
            )
            .build(),
        infra("cp").build(),
    ])
    .await;
    world.run_until_stable(50).await.unwrap();
    assert_eq!(
        endpoint(&world).await,
        Some(("api.demo.example.com".into(), 443))
    );
}

#[tokio::test]
async fn another_endpoint_is_never_overwritten_and_both_are_reported() {
    let mut c = cluster_naming("demo", false, "cp");
    c["spec"]["controlPlaneEndpoint"] = json!({"host": "192.0.2.10", "port": 6443});
    let world = world(vec![
        c,
        lb("cp").spec("controlPlane", json!({})).build(),
        infra("cp").build(),
    ])
    .await;
    world.run_until_stable(50).await.unwrap();
    assert_eq!(endpoint(&world).await, Some(("192.0.2.10".into(), 6443)));
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "ClusterEndpoint");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "ClusterEndpointMismatch")
    );
    assert!(c.message.contains("192.0.2.10:6443"), "{}", c.message);
    assert!(
        c.message.contains("cp-ext.default.svc.cluster.local:6443"),
        "{}",
        c.message
    );
    assert!(event_reasons(&world).contains(&"ClusterEndpointMismatch".to_string()));
}

/// `spec.controlPlane` says how the endpoint is written, not whether: a Cluster that does not name
/// the LoadBalancer keeps its endpoint empty (it would go into its certificates), and the
/// LoadBalancer says why, with a Warning Event.
#[tokio::test]
async fn spec_control_plane_without_the_clusters_consent_writes_nothing() {
    let mut c = cluster("demo", false);
    c["metadata"]["annotations"] =
        json!({"loadbalancer.cluster.x-k8s.io/loadBalancerRef": "someone-else"});
    let world = world(vec![
        c,
        lb("cp").spec("controlPlane", json!({})).build(),
        infra("cp").build(),
    ])
    .await;
    world.run_until_stable(50).await.unwrap();
    assert_eq!(endpoint(&world).await, None);
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "ClusterEndpoint");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "NotNamedByCluster")
    );
    assert!(c.message.contains("loadBalancerRef"), "{}", c.message);
    assert!(event_reasons(&world).contains(&"NotNamedByCluster".to_string()));
    // The load balancer itself is not held up.
    assert!(lb.status.unwrap().ready);
}

#[tokio::test]
async fn a_load_balancer_ref_on_the_cluster_binds_it_without_spec_control_plane() {
    let mut c = cluster("demo", false);
    c["metadata"]["annotations"] = json!({"loadbalancer.cluster.x-k8s.io/loadBalancerRef": "cp"});
    let world = world(vec![
        c,
        lb("cp").build(),
        lb("other").build(),
        infra("cp").build(),
        infra("other").build(),
    ])
    .await;
    world.run_until_stable(50).await.unwrap();
    assert_eq!(
        endpoint(&world).await,
        Some(("cp-ext.default.svc.cluster.local".into(), 6443))
    );
    let other = get_lb(&world, "other").await;
    assert!(
        other
            .status
            .unwrap()
            .conditions
            .iter()
            .all(|c| c.type_ != "ClusterEndpoint"),
        "only the referenced LoadBalancer publishes"
    );
}

#[tokio::test]
async fn a_paused_cluster_is_not_touched_and_a_missing_one_is_reported() {
    let world = world(vec![
        cluster_naming("demo", true, "cp"),
        lb("cp").spec("controlPlane", json!({})).build(),
        infra("cp").build(),
    ])
    .await;
    world.run_until_stable(50).await.unwrap();
    assert_eq!(endpoint(&world).await, None);

    let world = World::new(vec![
        lb("cp").spec("controlPlane", json!({})).build(),
        infra("cp").build(),
    ])
    .await
    .unwrap();
    world.run_until_stable(50).await.unwrap();
    let lb = get_lb(&world, "cp").await;
    assert_eq!(
        cond(&lb, "ClusterEndpoint"),
        ("False".into(), "ClusterNotFound".into())
    );
}

#[tokio::test]
async fn control_plane_needs_a_cluster_name() {
    let mut object = lb("cp").spec("controlPlane", json!({})).build();
    object["spec"]
        .as_object_mut()
        .unwrap()
        .remove("clusterName");
    let errors = capi_lb_api::validation::parse::<capi_lb_api::LoadBalancer>(&object).unwrap_err();
    assert!(
        errors
            .to_string()
            .contains("spec.controlPlane needs spec.clusterName"),
        "{errors}"
    );
}
