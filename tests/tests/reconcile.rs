//! Reconcile tests: the real reconciler and the in-memory provider against the in-memory Kubernetes
//! API (kube-fake-client), asserting on the resulting objects.

use capi_lb_tests::*;

#[tokio::test]
async fn create_provisions_publishes_and_reports_ready() {
    let world = capi_lb::world::World::new(vec![
        lb("cp").build(),
        infra("cp").build(),
        machine("cp-m1", "cp", "10.0.0.11").build(),
        machine("cp-m2", "cp", "10.0.0.12").build(),
    ])
    .await
    .unwrap();
    let report = world.run_until_stable(50).await.unwrap();
    let lb = get_lb(&world, "cp").await;
    let status = lb.status.clone().unwrap();
    assert!(status.ready, "{status:#?}");
    assert_eq!(cond(&lb, "Ready"), ("True".into(), "Ready".into()));
    assert_eq!(
        cond(&lb, "InfrastructureReady"),
        ("True".into(), "Provisioned".into())
    );
    assert_eq!(
        cond(&lb, "TargetsReady"),
        ("True".into(), "TargetsActive".into())
    );
    assert_eq!(
        cond(&lb, "EndpointPublished"),
        ("True".into(), "Published".into())
    );
    assert_eq!(cond(&lb, "Paused"), ("False".into(), "NotPaused".into()));
    assert_eq!(status.targets, vec!["cp-m1", "cp-m2"]);
    assert_eq!(status.active_targets, vec!["cp-m1", "cp-m2"]);
    assert_eq!(status.addresses[0].address, "203.0.113.1");
    let endpoint = status.endpoint.unwrap();
    assert_eq!(endpoint.host, "cp-ext.default.svc.cluster.local");
    assert_eq!(endpoint.port, 6443);
    assert_eq!(
        status.target_selector.as_deref(),
        Some("cluster.x-k8s.io/cluster-name=demo,loadbalancer.cluster.x-k8s.io/name=cp")
    );
    let svc = service(&world, "cp-ext").await.unwrap();
    assert_eq!(svc.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    assert_eq!(
        slices(&world, "cp-ext").await.get("cp-ext-ipv4").cloned(),
        Some(vec!["203.0.113.1".to_string()])
    );
    assert!(report.passes < 10, "{report:?}");
    let infra = get_infra(&world, "cp").await.unwrap();
    assert_eq!(infra.status.unwrap().member_count, 2);
}
