//! Reconcile tests: the real reconciler and the in-memory provider against the in-memory Kubernetes
//! API (kube-fake-client with two-phase deletion), asserting on the resulting objects.

use std::time::Duration;

use capi_lb::sim::world::World;
use capi_lb_api::LoadBalancer;
use capi_lb_api::capi::Machine;
use capi_lb_api::constants::{INFRASTRUCTURE_FINALIZER, LOADBALANCER_FINALIZER};
use capi_lb_tests::*;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn basic() -> Vec<Value> {
    vec![
        lb("cp").build(),
        infra("cp").build(),
        machine("cp-m1", "cp", "10.0.0.11").build(),
        machine("cp-m2", "cp", "10.0.0.12").build(),
    ]
}

#[tokio::test]
async fn create_provisions_publishes_and_reports_ready() {
    let world = world(basic()).await;
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
    assert_eq!(status.ready_targets.as_deref(), Some("2/2"));
    assert_eq!(status.addresses[0].address, "203.0.113.1");
    assert_eq!(status.observed_generation, lb.metadata.generation);
    let endpoint = status.endpoint.unwrap();
    assert_eq!(endpoint.host, "cp-ext.default.svc.cluster.local");
    assert_eq!(endpoint.port, 6443);
    assert_eq!(
        status.target_selector.as_deref(),
        Some("cluster.x-k8s.io/cluster-name=demo,loadbalancer.cluster.x-k8s.io/name=cp")
    );
    assert_eq!(
        status.target_kind.as_deref(),
        Some("Machine.cluster.x-k8s.io")
    );
    assert!(
        lb.finalizers()
            .contains(&LOADBALANCER_FINALIZER.to_string())
    );

    let svc = service(&world, "cp-ext").await.unwrap();
    let owner = &svc.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("LoadBalancer", lb.uid().unwrap().as_str(), Some(true))
    );
    let spec = svc.spec.unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
    assert!(spec.selector.is_none());
    let slice = slice(&world, "cp-ext-ipv4").await.unwrap();
    assert_eq!(slice.address_type, "IPv4");
    assert_eq!(slice.endpoints[0].addresses, vec!["203.0.113.1"]);
    assert_eq!(
        slice.endpoints[0].conditions.as_ref().unwrap().ready,
        Some(true)
    );
    assert_eq!(
        slice.labels()["endpointslice.kubernetes.io/managed-by"],
        "capi-lb.loadbalancer.cluster.x-k8s.io"
    );
    assert_eq!(slice.owner_references()[0].kind, "Service");
    assert!(report.passes < 10, "{report:?}");

    let infra = get_infra(&world, "cp").await.unwrap();
    assert!(
        infra
            .finalizers()
            .contains(&INFRASTRUCTURE_FINALIZER.to_string())
    );
    assert_eq!(infra.owner_references()[0].uid, lb.uid().unwrap());
    let infra_status = infra.status.unwrap();
    assert_eq!(infra_status.member_count, 2);
    assert!(infra_status.ready);
    assert_eq!(world.cloud.load_balancers().len(), 1);
    assert!(event_reasons(&world).contains(&"LoadBalancerCreated".to_string()));
}

#[tokio::test]
async fn a_reconcile_of_an_unchanged_object_makes_no_writes() {
    let world = world(basic()).await;
    settle(&world).await;
    let before = world.api.stats.writes();
    let lb = std::sync::Arc::new(get_lb(&world, "cp").await);
    let reads_before = world.api.stats.reads();
    let outcome = capi_lb::reconcile(lb, world.ctx.clone()).await.unwrap();
    // Cluster (pause), infrastructure object, targets, our Services, the Service's EndpointSlices.
    assert_eq!(
        world.api.stats.reads() - reads_before,
        5,
        "reads of a steady-state reconcile"
    );
    assert_eq!(
        world.api.stats.writes(),
        before,
        "writes: {:?}",
        &world.api.stats.log()[before as usize..]
    );
    assert_eq!(outcome.requeue_after, None);
    // And again after a restarted controller (no caches, no back-off memory).
    let restarted = world.restart();
    restarted.reconcile(NS, "cp").await.unwrap();
    assert_eq!(world.api.stats.writes(), before);
}

#[tokio::test]
async fn provisioning_delay_requeues_instead_of_blocking_and_gates_dns() {
    let world = world(vec![
        lb("cp").build(),
        infra("cp")
            .spec("provisioningDelaySeconds", json!(30))
            .build(),
        machine("cp-m1", "cp", "10.0.0.11").build(),
    ])
    .await;
    // First pass: finalizer, claim, LB requested; the reconcile returns at once with a requeue.
    let outcome = world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(outcome.requeue_after, Some(Duration::from_secs(30)));
    let lb = get_lb(&world, "cp").await;
    assert_eq!(
        cond(&lb, "InfrastructureReady"),
        ("False".into(), "Provisioning".into())
    );
    assert_eq!(
        cond(&lb, "EndpointPublished"),
        ("False".into(), "WaitingForAddress".into())
    );
    // The -ext objects already exist (the name is reserved), but the endpoint is not ready, so DNS
    // does not answer with an address that does not work yet.
    let slice = slice(&world, "cp-ext-ipv4").await.unwrap();
    assert_eq!(
        slice.endpoints[0].conditions.as_ref().unwrap().ready,
        Some(false)
    );
    assert_eq!(
        cond(&lb, "TargetsReady"),
        ("False".into(), "TargetsProgressing".into())
    );

    let report = world.run_until_stable(50).await.unwrap();
    assert!(report.elapsed >= Duration::from_secs(60), "{report:?}");
    let lb = get_lb(&world, "cp").await;
    assert!(lb.status.unwrap().ready);
    let slice = capi_lb_tests::slice(&world, "cp-ext-ipv4").await.unwrap();
    assert_eq!(
        slice.endpoints[0].conditions.as_ref().unwrap().ready,
        Some(true)
    );
}

#[tokio::test]
async fn an_address_change_updates_the_slices_in_place_and_keeps_the_endpoint() {
    let world = world(basic()).await;
    settle(&world).await;
    let before = slice(&world, "cp-ext-ipv4").await.unwrap();
    let endpoint_before = get_lb(&world, "cp").await.status.unwrap().endpoint;

    merge_patch::<capi_lb_api::InMemoryLoadBalancer>(
        &world,
        "cp",
        json!({"spec": {"addressPools": ["198.51.100.0/24"]}}),
    )
    .await;
    settle(&world).await;

    let after = slice(&world, "cp-ext-ipv4").await.unwrap();
    assert_eq!(after.endpoints[0].addresses, vec!["198.51.100.1"]);
    assert_eq!(after.uid(), before.uid(), "updated in place, not recreated");
    let lb = get_lb(&world, "cp").await;
    let status = lb.status.unwrap();
    assert_eq!(status.addresses[0].address, "198.51.100.1");
    assert_eq!(
        status.endpoint, endpoint_before,
        "the stable endpoint does not move"
    );
    assert!(event_reasons(&world).contains(&"AddressesChanged".to_string()));
}

#[tokio::test]
async fn dual_stack_gets_one_slice_per_family_and_a_family_can_go_away() {
    let world = world(vec![
        lb("cp").build(),
        infra("cp")
            .spec("addressPools", json!(["203.0.113.0/24", "2001:db8::/64"]))
            .build(),
    ])
    .await;
    settle(&world).await;
    let found = slices(&world, "cp-ext").await;
    assert_eq!(found["cp-ext-ipv4"], vec!["203.0.113.1"]);
    assert_eq!(found["cp-ext-ipv6"], vec!["2001:db8::1"]);
    assert_eq!(
        slice(&world, "cp-ext-ipv6").await.unwrap().address_type,
        "IPv6"
    );

    merge_patch::<capi_lb_api::InMemoryLoadBalancer>(
        &world,
        "cp",
        json!({"spec": {"addressPools": ["203.0.113.0/24"]}}),
    )
    .await;
    settle(&world).await;
    let found = slices(&world, "cp-ext").await;
    assert_eq!(found.keys().collect::<Vec<_>>(), vec!["cp-ext-ipv4"]);
}

#[tokio::test]
async fn a_hostname_only_provider_is_published_as_external_name() {
    let world = world(vec![
        lb("cp").build(),
        infra("cp")
            .spec("addressPools", json!([]))
            .spec("hostname", json!("cp.lb.example.com"))
            .build(),
    ])
    .await;
    settle(&world).await;
    let spec = service(&world, "cp-ext").await.unwrap().spec.unwrap();
    assert_eq!(spec.type_.as_deref(), Some("ExternalName"));
    assert_eq!(spec.external_name.as_deref(), Some("cp.lb.example.com"));
    assert!(slices(&world, "cp-ext").await.is_empty());
    let lb = get_lb(&world, "cp").await;
    assert!(lb.status.unwrap().ready);

    // The provider gains an IP: the Service becomes headless with a slice.
    merge_patch::<capi_lb_api::InMemoryLoadBalancer>(
        &world,
        "cp",
        json!({"spec": {"addressPools": ["203.0.113.0/24"]}}),
    )
    .await;
    settle(&world).await;
    let spec = service(&world, "cp-ext").await.unwrap().spec.unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
    assert_eq!(
        slices(&world, "cp-ext").await["cp-ext-ipv4"],
        vec!["203.0.113.1"]
    );
}

#[tokio::test]
async fn targets_are_added_and_removed_as_they_come_and_go() {
    let world = world(basic()).await;
    settle(&world).await;

    let machines: Api<Machine> = Api::namespaced(world.client(), NS);
    let m3: Machine = serde_json::from_value(machine("cp-m3", "cp", "10.0.0.13").build()).unwrap();
    machines.create(&PostParams::default(), &m3).await.unwrap();
    settle(&world).await;
    let members = |world: &World| {
        world.cloud.load_balancers()[0]
            .members
            .iter()
            .map(|(name, m)| (name.clone(), m.address.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        members(&world),
        vec![
            ("cp-m1".into(), "10.0.0.11".into()),
            ("cp-m2".into(), "10.0.0.12".into()),
            ("cp-m3".into(), "10.0.0.13".into())
        ]
    );
    assert_eq!(
        get_lb(&world, "cp")
            .await
            .status
            .unwrap()
            .ready_targets
            .as_deref(),
        Some("3/3")
    );

    // One machine is deleted, another stops matching the selector: both leave the load balancer.
    delete::<Machine>(&world, "cp-m1").await;
    merge_patch::<Machine>(
        &world,
        "cp-m2",
        json!({"metadata": {"labels": {"loadbalancer.cluster.x-k8s.io/name": "other"}}}),
    )
    .await;
    settle(&world).await;
    assert_eq!(members(&world), vec![("cp-m3".into(), "10.0.0.13".into())]);
    let status = get_lb(&world, "cp").await.status.unwrap();
    assert_eq!(status.targets, vec!["cp-m3"]);
    assert_eq!(status.active_targets, vec!["cp-m3"]);
    assert!(event_reasons(&world).contains(&"MembersChanged".to_string()));
}

#[tokio::test]
async fn a_target_being_deleted_leaves_the_load_balancer() {
    let mut m2 = machine("cp-m2", "cp", "10.0.0.12").build();
    m2["metadata"]["finalizers"] = json!(["machine.cluster.x-k8s.io"]);
    let world = world(vec![
        lb("cp").build(),
        infra("cp").build(),
        machine("cp-m1", "cp", "10.0.0.11").build(),
        m2,
    ])
    .await;
    settle(&world).await;
    // CAPI's finalizer keeps the Machine while it is deleted.
    delete::<Machine>(&world, "cp-m2").await;
    settle(&world).await;
    let members: Vec<String> = world.cloud.load_balancers()[0]
        .members
        .keys()
        .cloned()
        .collect();
    assert_eq!(members, vec!["cp-m1"]);
    let status = get_lb(&world, "cp").await.status.unwrap();
    assert_eq!(status.targets, vec!["cp-m1", "cp-m2"], "still selected");
    assert_eq!(status.active_targets, vec!["cp-m1"]);
}

#[tokio::test]
async fn targets_without_a_usable_address_are_reported_not_dropped_silently() {
    let world = world(vec![
        lb("cp").build(),
        infra("cp").build(),
        machine("cp-m1", "cp", "10.0.0.11").build(),
        machine("cp-m2", "cp", "unused")
            .addresses(json!([{"type": "Hostname", "address": "cp-m2"}]))
            .build(),
    ])
    .await;
    settle(&world).await;
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "TargetsReady");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "TargetsWithoutAddress")
    );
    assert!(c.message.contains("cp-m2"), "{}", c.message);
    assert!(lb.status.unwrap().ready, "targets do not gate Ready");
    let warnings: Vec<_> = world
        .ctx
        .events
        .timeline()
        .into_iter()
        .filter(|e| e.warning)
        .map(|e| e.reason)
        .collect();
    assert_eq!(warnings, vec!["TargetsWithoutAddress"]);

    // Preferring the hostname makes it usable.
    merge_patch::<LoadBalancer>(
        &world,
        "cp",
        json!({"spec": {"targetAddressTypes": ["InternalIP", "Hostname"]}}),
    )
    .await;
    settle(&world).await;
    let lb = get_lb(&world, "cp").await;
    assert_eq!(
        cond(&lb, "TargetsReady"),
        ("True".into(), "TargetsActive".into())
    );
}

#[tokio::test]
async fn delete_runs_provider_cleanup_removes_published_objects_then_the_finalizer() {
    let world = world(basic()).await;
    settle(&world).await;
    assert_eq!(world.cloud.load_balancers().len(), 1);

    delete::<LoadBalancer>(&world, "cp").await;
    // Two-phase deletion: the finalizer holds the object until cleanup is done.
    let deleting = get_lb(&world, "cp").await;
    assert!(deleting.metadata.deletion_timestamp.is_some());
    settle(&world).await;

    assert!(
        Api::<LoadBalancer>::namespaced(world.client(), NS)
            .get_opt("cp")
            .await
            .unwrap()
            .is_none()
    );
    assert!(world.cloud.load_balancers().is_empty(), "nothing leaks");
    assert!(service(&world, "cp-ext").await.is_none());
    assert!(slices(&world, "cp-ext").await.is_empty());
    // Our finalizer is gone from the infrastructure object (the garbage collector, which follows
    // our owner reference, deletes it with the LoadBalancer).
    if let Some(infra) = get_infra(&world, "cp").await {
        assert!(
            !infra
                .finalizers()
                .contains(&INFRASTRUCTURE_FINALIZER.to_string())
        );
    }
    assert!(event_reasons(&world).contains(&"LoadBalancerDeleted".to_string()));
}

#[tokio::test]
async fn cleanup_survives_a_controller_restart_half_way() {
    let world = world(vec![
        lb("cp").build(),
        infra("cp")
            .spec("provisioningDelaySeconds", json!(20))
            .build(),
        machine("cp-m1", "cp", "10.0.0.11").build(),
    ])
    .await;
    settle(&world).await;
    delete::<LoadBalancer>(&world, "cp").await;
    // The first cleanup pass starts the provider's deletion and returns without waiting.
    let outcome = world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(outcome.requeue_after, Some(Duration::from_secs(20)));
    assert_eq!(world.cloud.load_balancers().len(), 1);
    assert!(world.cloud.load_balancers()[0].deleting_since.is_some());
    let lb = get_lb(&world, "cp").await;
    assert_eq!(cond(&lb, "Ready"), ("False".into(), "Deleting".into()));

    // The controller restarts (fresh context, same API and cloud) and finishes the job.
    let restarted = world.restart();
    restarted.run_until_stable(50).await.unwrap();
    assert!(
        Api::<LoadBalancer>::namespaced(world.client(), NS)
            .get_opt("cp")
            .await
            .unwrap()
            .is_none()
    );
    assert!(world.cloud.load_balancers().is_empty());
    assert!(service(&world, "cp-ext").await.is_none());
}

#[tokio::test]
async fn a_foreign_ext_service_is_a_name_conflict_and_is_never_touched() {
    let foreign = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "cp-ext", "namespace": NS, "labels": {"team": "me"}},
        "spec": {"clusterIP": "None", "ports": [{"name": "etcd", "port": 2379, "targetPort": 2379}]},
    });
    let mut objects = basic();
    objects.push(foreign);
    let world = world(objects).await;
    let before = service(&world, "cp-ext").await.unwrap();
    settle(&world).await;

    let after = service(&world, "cp-ext").await.unwrap();
    assert_eq!(after, before, "the foreign Service is untouched");
    assert!(slices(&world, "cp-ext").await.is_empty());
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "EndpointPublished");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "NameConflict")
    );
    assert!(c.message.contains("default/cp-ext"), "{}", c.message);
    assert!(!lb.status.unwrap().ready);
    let warning = world
        .ctx
        .events
        .timeline()
        .into_iter()
        .find(|e| e.warning)
        .unwrap();
    assert_eq!(warning.reason, "NameConflict");

    // Deleting the LoadBalancer leaves the foreign Service alone too.
    delete::<LoadBalancer>(&world, "cp").await;
    settle(&world).await;
    assert_eq!(service(&world, "cp-ext").await.unwrap(), before);
}

#[tokio::test]
async fn a_foreign_endpoint_slice_with_our_name_is_a_conflict() {
    let foreign = json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "cp-ext-ipv4", "namespace": NS, "labels": {"kubernetes.io/service-name": "cp-ext"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["192.0.2.99"]}],
    });
    let mut objects = basic();
    objects.push(foreign);
    let world = world(objects).await;
    settle(&world).await;
    let lb = get_lb(&world, "cp").await;
    assert_eq!(
        cond(&lb, "EndpointPublished"),
        ("False".into(), "NameConflict".into())
    );
    let slice: EndpointSlice = slice(&world, "cp-ext-ipv4").await.unwrap();
    assert_eq!(slice.endpoints[0].addresses, vec!["192.0.2.99"]);
}

#[tokio::test]
async fn paused_by_annotation_or_cluster_does_nothing_until_unpaused() {
    let world = world(vec![
        lb("cp").annotation("cluster.x-k8s.io/paused", "").build(),
        infra("cp").build(),
        lb("cp2").build(),
        infra("cp2").build(),
        cluster("demo", true),
    ])
    .await;
    settle(&world).await;
    assert!(world.cloud.load_balancers().is_empty());
    assert!(service(&world, "cp-ext").await.is_none());
    for name in ["cp", "cp2"] {
        let lb = get_lb(&world, name).await;
        assert_eq!(cond(&lb, "Paused"), ("True".into(), "Paused".into()));
    }
    let c = condition(&get_lb(&world, "cp2").await, "Paused");
    assert!(c.message.contains("Cluster demo"), "{}", c.message);

    // Unpausing the Cluster leaves cp paused by its annotation.
    merge_patch::<capi_lb_api::capi::Cluster>(&world, "demo", json!({"spec": {"paused": false}}))
        .await;
    settle(&world).await;
    assert_eq!(world.cloud.load_balancers().len(), 1);
    assert!(get_lb(&world, "cp2").await.status.unwrap().ready);
    assert_eq!(
        cond(&get_lb(&world, "cp").await, "Paused"),
        ("True".into(), "Paused".into())
    );

    merge_patch::<LoadBalancer>(
        &world,
        "cp",
        json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": null}}}),
    )
    .await;
    settle(&world).await;
    let lb = get_lb(&world, "cp").await;
    assert_eq!(cond(&lb, "Paused"), ("False".into(), "NotPaused".into()));
    assert!(lb.status.unwrap().ready);
    let reasons = event_reasons(&world);
    assert!(reasons.contains(&"Paused".to_string()) && reasons.contains(&"NotPaused".to_string()));
}

#[tokio::test]
async fn an_invalid_spec_gets_a_clear_condition_and_changes_nothing() {
    // Stored without admission (as with an older CRD or a direct etcd write): port out of range.
    let world = world(vec![
        lb("cp")
            .spec("ports", json!([{"name": "api", "port": 70000}]))
            .build(),
        infra("cp").build(),
    ])
    .await;
    let outcome = world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(outcome.requeue_after, None, "permanent: wait for a change");
    assert!(outcome.until_changed, "not even the periodic resync");
    settle(&world).await;
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "Ready");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "InvalidSpec")
    );
    assert!(c.message.contains("spec.ports[0].port"), "{}", c.message);
    assert!(world.cloud.load_balancers().is_empty());
    assert!(service(&world, "cp-ext").await.is_none());
    let infra = get_infra(&world, "cp").await.unwrap();
    assert!(
        infra.finalizers().is_empty(),
        "the infra object is not claimed"
    );
    let timeline = world.ctx.events.timeline();
    assert!(
        timeline
            .iter()
            .any(|e| e.warning && e.reason == "InvalidSpec")
    );

    // Fixing the spec recovers.
    merge_patch::<LoadBalancer>(
        &world,
        "cp",
        json!({"spec": {"ports": [{"name": "api", "port": 6443}]}}),
    )
    .await;
    settle(&world).await;
    assert!(get_lb(&world, "cp").await.status.unwrap().ready);
    assert!(!world.reconcile(NS, "cp").await.unwrap().until_changed);
}

#[tokio::test]
async fn an_ext_name_longer_than_a_dns_label_is_refused_not_looped_on() {
    let name = "a".repeat(60);
    let world = world(vec![lb(&name).build(), infra(&name).build()]).await;
    settle(&world).await;
    let before = world.api.stats.writes();
    world.reconcile(NS, &name).await.unwrap();
    assert_eq!(world.api.stats.writes(), before, "no write loop");
    let lb = get_lb(&world, &name).await;
    let c = condition(&lb, "Ready");
    assert_eq!(c.reason, "InvalidSpec");
    assert!(c.message.contains("63 characters"), "{}", c.message);
    assert!(world.cloud.load_balancers().is_empty());
}

#[tokio::test]
async fn a_transient_provider_failure_is_retried_with_backoff_then_succeeds() {
    let world = world(vec![
        lb("cp").build(),
        infra("cp").failure("Ensure", "Transient", 2).build(),
    ])
    .await;
    let first = world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(first.requeue_after, Some(Duration::from_secs(1)));
    let lb = get_lb(&world, "cp").await;
    assert_eq!(
        cond(&lb, "InfrastructureReady"),
        ("False".into(), "ProviderError".into())
    );
    let second = world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(
        second.requeue_after,
        Some(Duration::from_secs(2)),
        "back-off grows"
    );
    settle(&world).await;
    let lb = get_lb(&world, "cp").await;
    assert!(lb.status.unwrap().ready);
    assert_eq!(world.cloud.load_balancers().len(), 1, "no duplicate");
    assert!(event_reasons(&world).contains(&"LoadBalancerCreated".to_string()));
}

#[tokio::test]
async fn a_permanent_provider_failure_is_reported_until_the_configuration_changes() {
    let world = world(vec![
        lb("cp").build(),
        infra("cp").failure("Ensure", "Permanent", 1).build(),
    ])
    .await;
    settle(&world).await;
    let outcome = world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(outcome.requeue_after, None);
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "InfrastructureReady");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "ProviderFailed")
    );
    assert!(c.message.contains("InjectedFailure"), "{}", c.message);
    assert!(
        world
            .ctx
            .events
            .timeline()
            .iter()
            .any(|e| e.warning && e.reason == "ProviderFailed")
    );

    merge_patch::<capi_lb_api::InMemoryLoadBalancer>(
        &world,
        "cp",
        json!({"spec": {"failures": []}}),
    )
    .await;
    settle(&world).await;
    assert!(get_lb(&world, "cp").await.status.unwrap().ready);
}

#[tokio::test]
async fn a_member_update_failure_does_not_lose_the_load_balancer() {
    let world = world(vec![
        lb("cp").build(),
        infra("cp").failure("Members", "Transient", 1).build(),
        machine("cp-m1", "cp", "10.0.0.11").build(),
    ])
    .await;
    world.reconcile(NS, "cp").await.unwrap();
    let lb = get_lb(&world, "cp").await;
    assert_eq!(
        cond(&lb, "TargetsReady"),
        ("False".into(), "ProviderError".into())
    );
    assert_eq!(
        cond(&lb, "InfrastructureReady"),
        ("True".into(), "Provisioned".into())
    );
    settle(&world).await;
    let lb = get_lb(&world, "cp").await;
    assert_eq!(
        cond(&lb, "TargetsReady"),
        ("True".into(), "TargetsActive".into())
    );
}

#[tokio::test]
async fn missing_infrastructure_is_reported_and_picked_up_when_created() {
    let world = world(vec![lb("cp").build()]).await;
    settle(&world).await;
    let lb = get_lb(&world, "cp").await;
    assert_eq!(
        cond(&lb, "InfrastructureReady"),
        ("False".into(), "InfrastructureNotFound".into())
    );
    let api: Api<capi_lb_api::InMemoryLoadBalancer> = Api::namespaced(world.client(), NS);
    let obj: capi_lb_api::InMemoryLoadBalancer =
        serde_json::from_value(infra("cp").build()).unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
    settle(&world).await;
    assert!(get_lb(&world, "cp").await.status.unwrap().ready);
}

#[tokio::test]
async fn an_infrastructure_object_used_by_another_load_balancer_is_left_alone() {
    let world = world(vec![
        lb("cp").build(),
        infra("cp").build(),
        lb("thief")
            .spec(
                "infrastructureRef",
                json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "InMemoryLoadBalancer", "name": "cp"}),
            )
            .build(),
    ])
    .await;
    // cp claims the infrastructure object first; the thief comes later.
    world.reconcile(NS, "cp").await.unwrap();
    settle(&world).await;
    let owner_uid = get_lb(&world, "cp").await.uid().unwrap();
    let thief = get_lb(&world, "thief").await;
    let c = condition(&thief, "InfrastructureReady");
    assert_eq!(c.reason, "InfrastructureInUse");
    assert!(c.message.contains("LoadBalancer cp"), "{}", c.message);
    let infra = get_infra(&world, "cp").await.unwrap();
    assert_eq!(infra.owner_references().len(), 1);
    assert_eq!(infra.owner_references()[0].uid, owner_uid);
    assert_eq!(world.cloud.load_balancers().len(), 1);

    // Deleting the thief must not release the owner's infrastructure.
    delete::<LoadBalancer>(&world, "thief").await;
    settle(&world).await;
    let infra = get_infra(&world, "cp").await.unwrap();
    assert!(
        infra
            .finalizers()
            .contains(&INFRASTRUCTURE_FINALIZER.to_string())
    );
    assert_eq!(world.cloud.load_balancers().len(), 1);
    assert!(get_lb(&world, "cp").await.status.unwrap().ready);
}

#[tokio::test]
async fn an_unknown_provider_kind_is_reported() {
    let world = world(vec![
        lb("cp")
            .spec(
                "infrastructureRef",
                json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "AzureLoadBalancer", "name": "cp"}),
            )
            .build(),
    ])
    .await;
    settle(&world).await;
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "InfrastructureReady");
    assert_eq!(c.reason, "ProviderNotEnabled");
    assert!(
        c.message
            .contains("InMemoryLoadBalancer.infrastructure.cluster.x-k8s.io"),
        "{}",
        c.message
    );
    // Nothing was provisioned, so deletion is not blocked.
    delete::<LoadBalancer>(&world, "cp").await;
    settle(&world).await;
    assert!(
        Api::<LoadBalancer>::namespaced(world.client(), NS)
            .get_opt("cp")
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn an_unknown_target_kind_is_reported_and_members_are_left_alone() {
    let world = world(basic()).await;
    // Allowed by the administrator (--target-kinds) but not installed.
    world
        .ctx
        .kinds
        .allow_target_kind(capi_lb_api::loadbalancer::TargetKind {
            api_group: "example.com".into(),
            kind: "Appliance".into(),
        });
    settle(&world).await;
    merge_patch::<LoadBalancer>(
        &world,
        "cp",
        json!({"spec": {"targetKind": {"apiGroup": "example.com", "kind": "Appliance"}}}),
    )
    .await;
    settle(&world).await;
    let lb = get_lb(&world, "cp").await;
    assert_eq!(
        cond(&lb, "TargetsReady"),
        ("False".into(), "TargetKindUnavailable".into())
    );
    assert_eq!(
        world.cloud.load_balancers()[0].members.len(),
        2,
        "an unlistable kind never empties the load balancer"
    );
    // The Machines are no longer targets: nothing of ours stays on them.
    let machine = Api::<Machine>::namespaced(world.client(), NS)
        .get("cp-m1")
        .await
        .unwrap();
    assert!(
        !machine
            .annotations()
            .keys()
            .any(|k| k.contains("loadbalancer.cluster.x-k8s.io") || k.contains("capi-lb-")),
        "{:?}",
        machine.annotations()
    );
    // And the LoadBalancer can still be deleted.
    delete::<LoadBalancer>(&world, "cp").await;
    settle(&world).await;
    assert!(
        Api::<LoadBalancer>::namespaced(world.client(), NS)
            .get_opt("cp")
            .await
            .unwrap()
            .is_none()
    );
}

/// A target kind the administrator did not allow (`--target-kinds`), or one capi-lb manages for its
/// own purposes, is refused with a condition and an Event: its objects are neither listed nor
/// annotated, so a LoadBalancer's author cannot have capi-lb annotate Services (or anything else
/// they may not write) for them.
#[tokio::test]
async fn a_target_kind_not_allowed_is_refused_and_its_objects_are_not_touched() {
    let mut objects = basic();
    objects.push(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "victim", "namespace": NS,
                     "labels": {"cluster.x-k8s.io/cluster-name": "demo",
                                "loadbalancer.cluster.x-k8s.io/name": "cp"}},
        "spec": {"ports": [{"port": 443}]},
    }));
    let world = world(objects).await;
    settle(&world).await;
    let services = Api::<Service>::namespaced(world.client(), NS);
    let before = services.get("victim").await.unwrap();
    for (kind, why) in [
        (
            json!({"apiGroup": "", "kind": "Service"}),
            "core kinds are never targets",
        ),
        (
            json!({"apiGroup": "cluster.x-k8s.io", "kind": "Cluster"}),
            "not allowed: this capi-lb takes targets of Machine.cluster.x-k8s.io only",
        ),
    ] {
        merge_patch::<LoadBalancer>(&world, "cp", json!({"spec": {"targetKind": kind}})).await;
        settle(&world).await;
        let lb = get_lb(&world, "cp").await;
        let c = condition(&lb, "TargetsReady");
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "TargetKindNotAllowed")
        );
        assert!(c.message.contains(why), "{}", c.message);
        assert_eq!(
            world.cloud.load_balancers()[0].members.len(),
            2,
            "members are left alone"
        );
    }
    // Even when an administrator lists a kind capi-lb manages itself, it is refused (the in-memory
    // API has no discovery: the kind is made known as a real cluster's discovery would).
    world
        .ctx
        .kinds
        .insert(kube::core::ApiResource::erase::<capi_lb_api::capi::Cluster>(&()));
    world
        .ctx
        .kinds
        .allow_target_kind(capi_lb_api::loadbalancer::TargetKind {
            api_group: "cluster.x-k8s.io".into(),
            kind: "Cluster".into(),
        });
    merge_patch::<LoadBalancer>(
        &world,
        "cp",
        json!({"spec": {"targetKind": {"apiGroup": "cluster.x-k8s.io", "kind": "Cluster"}}}),
    )
    .await;
    settle(&world).await;
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "TargetsReady");
    assert_eq!(c.reason, "TargetKindNotAllowed");
    assert!(
        c.message
            .contains("capi-lb manages clusters for its own purposes"),
        "{}",
        c.message
    );
    let after = services.get("victim").await.unwrap();
    assert_eq!(
        before.annotations(),
        after.annotations(),
        "the Service was not annotated"
    );
    assert_eq!(
        before.resource_version(),
        after.resource_version(),
        "the Service was not written"
    );
    assert!(
        event_reasons(&world)
            .iter()
            .any(|r| r == "TargetKindNotAllowed"),
        "an Event tells the LoadBalancer's author: {:?}",
        event_reasons(&world)
    );
}

#[tokio::test]
async fn a_restarted_controller_with_a_wiped_status_adopts_instead_of_duplicating() {
    let world = world(basic()).await;
    settle(&world).await;
    let before = world.cloud.load_balancers();
    // clusterctl move (or a restore) loses status.
    Api::<LoadBalancer>::namespaced(world.client(), NS)
        .patch_status(
            "cp",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": null})),
        )
        .await
        .unwrap();
    let restarted = world.restart();
    restarted.run_until_stable(50).await.unwrap();
    let after = world.cloud.load_balancers();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].id, before[0].id);
    let status = get_lb(&world, "cp").await.status.unwrap();
    assert!(status.ready);
    assert_eq!(status.addresses, before_addresses(&before));
}

fn before_addresses(
    lbs: &[capi_lb_providers::inmemory::CloudLoadBalancer],
) -> Vec<capi_lb_api::loadbalancer::LoadBalancerAddress> {
    lbs[0].addresses.clone()
}

#[tokio::test]
async fn changing_infrastructure_ref_migrates_and_releases_the_old_one() {
    let world = world(vec![
        lb("cp").build(),
        infra("cp").build(),
        infra("cp-new")
            .spec("addressPools", json!(["198.51.100.0/24"]))
            .build(),
        machine("cp-m1", "cp", "10.0.0.11").build(),
    ])
    .await;
    settle(&world).await;
    let old_id = world.cloud.load_balancers()[0].id.clone();
    merge_patch::<LoadBalancer>(
        &world,
        "cp",
        json!({"spec": {"infrastructureRef": {"name": "cp-new"}}}),
    )
    .await;
    settle(&world).await;
    let lbs = world.cloud.load_balancers();
    assert_eq!(lbs.len(), 1);
    assert_ne!(lbs[0].id, old_id);
    assert_eq!(lbs[0].addresses[0].address, "198.51.100.1");
    let old = get_infra(&world, "cp").await.unwrap();
    assert!(old.finalizers().is_empty() && old.owner_references().is_empty());
    let lb = get_lb(&world, "cp").await;
    let status = lb.status.clone().unwrap();
    assert!(status.ready);
    assert_eq!(status.infrastructure_ref.unwrap().name, "cp-new");
    assert!(status.migration.is_none());
    assert_eq!(
        cond(&lb, "InfrastructureMigration"),
        ("False".into(), "MigrationComplete".into())
    );
    assert_eq!(
        slices(&world, "cp-ext").await["cp-ext-ipv4"],
        vec!["198.51.100.1"]
    );
    assert!(event_reasons(&world).contains(&"InfrastructureReleased".to_string()));
}

#[tokio::test]
async fn disabling_publication_or_changing_the_suffix_moves_the_published_objects() {
    let world = world(basic()).await;
    settle(&world).await;
    merge_patch::<LoadBalancer>(
        &world,
        "cp",
        json!({"spec": {"publication": {"suffix": "-api"}}}),
    )
    .await;
    settle(&world).await;
    assert!(service(&world, "cp-ext").await.is_none());
    assert!(slices(&world, "cp-ext").await.is_empty());
    assert!(service(&world, "cp-api").await.is_some());
    assert_eq!(
        get_lb(&world, "cp")
            .await
            .status
            .unwrap()
            .endpoint
            .unwrap()
            .host,
        "cp-api.default.svc.cluster.local"
    );

    merge_patch::<LoadBalancer>(
        &world,
        "cp",
        json!({"spec": {"publication": {"enabled": false}}}),
    )
    .await;
    settle(&world).await;
    let services = Api::<Service>::namespaced(world.client(), NS)
        .list(&Default::default())
        .await
        .unwrap();
    assert!(services.items.is_empty());
    let lb = get_lb(&world, "cp").await;
    assert_eq!(
        cond(&lb, "EndpointPublished"),
        ("False".into(), "PublicationDisabled".into())
    );
    let status = lb.status.unwrap();
    assert!(status.ready, "disabled publication does not gate Ready");
    assert_eq!(status.endpoint.unwrap().host, "203.0.113.1");
}

#[tokio::test]
async fn an_external_endpoint_is_reported_and_never_overwritten() {
    let world = world(vec![
        lb("cp")
            .spec(
                "endpoint",
                json!({"host": "api.demo.example.com", "port": 443}),
            )
            .build(),
        infra("cp").build(),
    ])
    .await;
    settle(&world).await;
    let lb = get_lb(&world, "cp").await;
    assert_eq!(
        lb.spec.endpoint.as_ref().unwrap().host,
        "api.demo.example.com"
    );
    let endpoint = lb.status.unwrap().endpoint.unwrap();
    assert_eq!(
        (endpoint.host.as_str(), endpoint.port),
        ("api.demo.example.com", 443)
    );
    assert!(
        service(&world, "cp-ext").await.is_some(),
        "the -ext name is still published"
    );
}

#[tokio::test]
async fn deleting_the_infrastructure_object_deletes_the_load_balancer_and_withdraws_addresses() {
    let world = world(basic()).await;
    settle(&world).await;
    delete::<capi_lb_api::InMemoryLoadBalancer>(&world, "cp").await;
    settle(&world).await;
    assert!(world.cloud.load_balancers().is_empty());
    assert!(
        get_infra(&world, "cp").await.is_none(),
        "released, then gone"
    );
    assert!(slices(&world, "cp-ext").await.is_empty());
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "InfrastructureReady");
    assert_eq!(c.reason, "InfrastructureNotFound");
    assert_eq!(
        cond(&lb, "EndpointPublished"),
        ("False".into(), "WaitingForAddress".into()),
        "nothing is published any more"
    );
    let status = lb.status.unwrap();
    assert!(!status.ready);
    assert!(status.addresses.is_empty());
}

#[tokio::test]
async fn a_paused_load_balancer_is_not_cleaned_up_until_unpaused() {
    // clusterctl move pauses the Cluster, then deletes the moved objects from the source cluster:
    // the cloud load balancer must survive that.
    let mut objects = basic();
    objects.push(cluster("demo", false));
    let world = world(objects).await;
    settle(&world).await;
    merge_patch::<capi_lb_api::capi::Cluster>(&world, "demo", json!({"spec": {"paused": true}}))
        .await;
    delete::<LoadBalancer>(&world, "cp").await;
    settle(&world).await;
    assert_eq!(
        world.cloud.load_balancers().len(),
        1,
        "nothing deleted while paused"
    );
    let lb = get_lb(&world, "cp").await;
    assert!(
        lb.finalizers()
            .contains(&LOADBALANCER_FINALIZER.to_string())
    );
    assert_eq!(cond(&lb, "Paused"), ("True".into(), "Paused".into()));
    assert!(service(&world, "cp-ext").await.is_some());

    merge_patch::<capi_lb_api::capi::Cluster>(&world, "demo", json!({"spec": {"paused": false}}))
        .await;
    settle(&world).await;
    assert!(world.cloud.load_balancers().is_empty());
    assert!(
        Api::<LoadBalancer>::namespaced(world.client(), NS)
            .get_opt("cp")
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn a_paused_load_balancer_gets_no_finalizer_and_no_writes_but_its_condition() {
    let world = world(vec![
        lb("cp").annotation("cluster.x-k8s.io/paused", "").build(),
        infra("cp").build(),
    ])
    .await;
    world.reconcile(NS, "cp").await.unwrap();
    let lb = get_lb(&world, "cp").await;
    assert!(lb.finalizers().is_empty());
    assert_eq!(
        world
            .api
            .stats
            .log()
            .iter()
            .filter(|w| !w.contains("/events"))
            .count(),
        1,
        "only the status write: {:?}",
        world.api.stats.log()
    );
    assert!(
        get_infra(&world, "cp")
            .await
            .unwrap()
            .finalizers()
            .is_empty()
    );
}

#[tokio::test]
async fn metadata_patches_from_a_stale_read_fail_instead_of_clobbering() {
    use capi_lb::metadata::{add_finalizer, remove_finalizer};
    let world = world(vec![infra("cp").build()]).await;
    let api: Api<capi_lb_api::InMemoryLoadBalancer> = Api::namespaced(world.client(), NS);
    let stale = api.get("cp").await.unwrap();
    // Someone else adds their finalizer after our read.
    merge_patch::<capi_lb_api::InMemoryLoadBalancer>(
        &world,
        "cp",
        json!({"metadata": {"finalizers": ["someone.else/keep"]}}),
    )
    .await;
    assert!(
        add_finalizer(&api, &stale, "ours/x").await.is_err(),
        "stale write refused"
    );
    let fresh = api.get("cp").await.unwrap();
    assert_eq!(fresh.finalizers(), ["someone.else/keep"]);
    // From a fresh read it works and keeps theirs; removing ours leaves theirs.
    let updated = add_finalizer(&api, &fresh, "ours/x").await.unwrap();
    assert_eq!(updated.finalizers(), ["someone.else/keep", "ours/x"]);
    remove_finalizer(&api, &updated, "ours/x").await.unwrap();
    assert_eq!(
        api.get("cp").await.unwrap().finalizers(),
        ["someone.else/keep"]
    );
}

#[tokio::test]
async fn an_infrastructure_object_removed_behind_our_back_does_not_leak_the_load_balancer() {
    let world = world(basic()).await;
    settle(&world).await;
    // Someone strips our finalizer and deletes the object: our cleanup never ran.
    merge_patch::<capi_lb_api::InMemoryLoadBalancer>(
        &world,
        "cp",
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
    delete::<capi_lb_api::InMemoryLoadBalancer>(&world, "cp").await;
    assert!(get_infra(&world, "cp").await.is_none());
    settle(&world).await;
    assert!(
        world.cloud.load_balancers().is_empty(),
        "the cloud load balancer is deleted"
    );
    assert!(
        slices(&world, "cp-ext").await.is_empty(),
        "its addresses are withdrawn"
    );
    let lb = get_lb(&world, "cp").await;
    assert_eq!(
        cond(&lb, "InfrastructureReady"),
        ("False".into(), "InfrastructureNotFound".into())
    );
    assert_eq!(
        cond(&lb, "EndpointPublished"),
        ("False".into(), "WaitingForAddress".into())
    );
    let status = lb.status.unwrap();
    assert!(status.infrastructure_ref.is_none() && status.addresses.is_empty());
}
