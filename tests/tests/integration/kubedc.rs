//! The kube-dc provider through the real reconcilers, against the in-memory API with kube-dc's EIp
//! kind registered and a simulator of kube-dc's controller (tests/src/kubedc_sim.rs).

use std::time::Duration;

use capi_lb::sim::world::World;
use capi_lb_api::capi::Machine;
use capi_lb_api::{KubeDCLoadBalancer, LoadBalancer};
use capi_lb_providers::clock::Clock;
use capi_lb_tests::kubedc_sim::full::EIp;
use capi_lb_tests::kubedc_sim::{EIP_FINALIZER, KubeDcSim, project_namespace};
use capi_lb_tests::*;
use k8s_openapi::api::core::v1::{Endpoints, Service};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::{Value, json};

fn default_gw(ip: &str) -> Value {
    json!({
        "apiVersion": "kube-dc.com/v1",
        "kind": "EIp",
        "metadata": {"name": "default-gw", "namespace": NS},
        "spec": {"externalNetworkType": "public"},
        "status": {"ready": true, "ipAddress": ip},
    })
}

/// A world with kube-dc's EIp kind registered (kube-dc installed), holding `objects`, whose
/// namespaces (the tests' and the examples') are kube-dc Projects'.
pub(crate) async fn world_with_eips(mut objects: Vec<Value>) -> World {
    objects.push(project_namespace(NS));
    objects.push(project_namespace("shalb-demo"));
    world_outside_projects(objects).await
}

/// A world with kube-dc's EIp kind registered, holding `objects`, and no Project namespace.
async fn world_outside_projects(objects: Vec<Value>) -> World {
    World::with_builder(objects, |b| b.with_resource::<EIp>())
        .await
        .unwrap()
}

/// kube-dc's controller and capi-lb's reconciler taking turns, `rounds` times, `step` apart.
pub(crate) async fn drive(world: &World, sim: &mut KubeDcSim, rounds: usize, step: Duration) {
    for _ in 0..rounds {
        sim.step(world).await;
        world.reconcile(NS, "cp").await.unwrap();
        world.clock.advance(step);
    }
    sim.step(world).await;
}

pub(crate) fn basic() -> Vec<Value> {
    vec![
        kubedc_lb("cp").build(),
        kubedc_infra("cp", json!({"externalNetworkType": "public"})),
        machine("cp-m1", "cp", "10.0.0.11").build(),
        machine("cp-m2", "cp", "10.0.0.12").build(),
    ]
}

pub(crate) async fn eips(world: &World) -> Vec<EIp> {
    Api::<EIp>::namespaced(world.client(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

pub(crate) async fn kdc_status(world: &World) -> capi_lb_api::KubeDCLoadBalancerStatus {
    Api::<KubeDCLoadBalancer>::namespaced(world.client(), NS)
        .get("cp")
        .await
        .unwrap()
        .status
        .unwrap_or_default()
}

#[tokio::test]
async fn a_load_balancer_on_kube_dc_goes_ready_and_publishes_the_eip_address() {
    let world = world_with_eips(basic()).await;
    let mut sim = KubeDcSim::new();
    drive(&world, &mut sim, 6, Duration::from_secs(5)).await;

    let eip = Api::<EIp>::namespaced(world.client(), NS)
        .get("cp-eip")
        .await
        .unwrap();
    assert_eq!(eip.spec.external_network_type.as_deref(), Some("public"));
    assert_eq!(eip.owner_references()[0].kind, "KubeDCLoadBalancer");
    let ip = eip.status.unwrap().ip_address.unwrap();

    let svc = service(&world, "cp-lb").await.unwrap();
    assert_eq!(
        svc.annotations()["service.nlb.kube-dc.com/bind-on-eip"],
        "cp-eip"
    );
    assert_eq!(
        svc.annotations()["loadbalancer.cluster.x-k8s.io/external-endpoint"],
        "false"
    );
    let spec = svc.spec.clone().unwrap();
    assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
    assert!(spec.selector.is_none());
    assert_eq!(spec.ports.unwrap()[0].port, 6443);
    assert_eq!(svc.owner_references()[0].kind, "KubeDCLoadBalancer");

    let lb = get_lb(&world, "cp").await;
    let status = lb.status.clone().unwrap();
    assert!(status.ready, "{status:#?}");
    assert_eq!(status.addresses[0].address, ip);
    assert_eq!(status.active_targets, vec!["cp-m1", "cp-m2"]);
    assert_eq!(
        slices(&world, "cp-ext").await["cp-ext-ipv4"],
        vec![ip.clone()]
    );
    // kube-dc's OVN rows come from the v1 Endpoints capi-lb writes.
    assert_eq!(
        sim.rows[&format!("{ip}:6443")],
        vec!["10.0.0.11:6443", "10.0.0.12:6443"]
    );
    let endpoints = Api::<Endpoints>::namespaced(world.client(), NS)
        .get("cp-lb")
        .await
        .unwrap();
    assert_eq!(
        endpoints.labels()["endpointslice.kubernetes.io/skip-mirror"],
        "true"
    );
    let infra = kdc_status(&world).await;
    assert_eq!(infra.eip_name.as_deref(), Some("cp-eip"));
    assert!(infra.eip_created);
    assert_eq!(infra.service_name.as_deref(), Some("cp-lb"));
    assert_eq!(infra.address.as_deref(), Some(ip.as_str()));
    assert!(infra.ready);
    assert_eq!(infra.member_count, 2);

    // Steady: nothing more is written.
    let writes = world.api.stats.writes_excluding_events();
    sim.step(&world).await;
    world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(
        world.api.stats.writes_excluding_events(),
        writes,
        "{:?}",
        &world.api.stats.log()[writes as usize..]
    );
}

#[tokio::test]
async fn members_are_added_drained_and_removed_in_the_backend_rows() {
    let world = world_with_eips(basic()).await;
    let mut sim = KubeDcSim::new();
    drive(&world, &mut sim, 6, Duration::from_secs(5)).await;
    let ip = get_lb(&world, "cp").await.status.unwrap().addresses[0]
        .address
        .clone();
    let row = |sim: &KubeDcSim| sim.rows[&format!("{ip}:6443")].clone();

    let machines: Api<Machine> = Api::namespaced(world.client(), NS);
    let m3: Machine = serde_json::from_value(machine("cp-m3", "cp", "10.0.0.13").build()).unwrap();
    machines.create(&Default::default(), &m3).await.unwrap();
    drive(&world, &mut sim, 2, Duration::from_secs(1)).await;
    assert_eq!(
        row(&sim),
        vec!["10.0.0.11:6443", "10.0.0.12:6443", "10.0.0.13:6443"]
    );

    // Disable cp-m1: kube-dc has no weights, so it keeps serving for the drain time, then leaves.
    machines
        .patch(
            "cp-m1",
            &Default::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": {"loadbalancer.cluster.x-k8s.io/disabled": ""}}})),
        )
        .await
        .unwrap();
    drive(&world, &mut sim, 1, Duration::from_secs(10)).await;
    assert!(
        row(&sim).contains(&"10.0.0.11:6443".to_string()),
        "still draining"
    );
    drive(&world, &mut sim, 3, Duration::from_secs(10)).await;
    assert_eq!(row(&sim), vec!["10.0.0.12:6443", "10.0.0.13:6443"]);
    let status = get_lb(&world, "cp").await.status.unwrap();
    assert_eq!(status.active_targets, vec!["cp-m2", "cp-m3"]);
}

#[tokio::test]
async fn a_recreated_eip_changes_the_address_and_the_stable_endpoint_follows() {
    let world = world_with_eips(basic()).await;
    let mut sim = KubeDcSim::new();
    drive(&world, &mut sim, 6, Duration::from_secs(5)).await;
    let before = get_lb(&world, "cp").await.status.unwrap();
    let slice_before = slice(&world, "cp-ext-ipv4").await.unwrap();
    // The EIp vanishes (deleted, and its kube-dc finalizer removed by hand): capi-lb creates it
    // again, kube-dc gives it a new IP.
    let eip_api = Api::<EIp>::namespaced(world.client(), NS);
    eip_api
        .delete("cp-eip", &DeleteParams::default())
        .await
        .unwrap();
    eip_api
        .patch(
            "cp-eip",
            &Default::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    drive(&world, &mut sim, 6, Duration::from_secs(5)).await;
    let after = get_lb(&world, "cp").await.status.unwrap();
    assert_ne!(after.addresses, before.addresses);
    assert_eq!(
        after.endpoint, before.endpoint,
        "the stable endpoint does not change"
    );
    // While the EIp had no address nothing was published (the old IP is gone); now the new one is.
    let slice_after = slice(&world, "cp-ext-ipv4").await.unwrap();
    assert_eq!(
        slice_before.endpoints[0].addresses,
        vec![before.addresses[0].address.clone()]
    );
    assert_eq!(
        slice_after.endpoints[0].addresses,
        vec![after.addresses[0].address.clone()]
    );
    assert!(after.ready);
    // What was found is told: a Warning that the ready load balancer was gone.
    assert!(warned(&world, "LoadBalancerLost"));
    // And counted, for the dashboard's drift repairs.
    let metrics = world.ctx.metrics.encode();
    assert!(
        metrics.contains("capi_lb_drift_repairs_total{provider=\"kubedc\"} 1\n"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_bring_your_own_eip_is_bound_and_kept_on_delete() {
    let mut objects = vec![
        kubedc_lb("cp").build(),
        kubedc_infra("cp", json!({"eipName": "default-gw"})),
        default_gw("91.224.11.200"),
        machine("cp-m1", "cp", "10.0.0.11").build(),
    ];
    objects.push(kubedc_infra("other", json!({})));
    let world = world_with_eips(objects).await;
    let mut sim = KubeDcSim::new();
    drive(&world, &mut sim, 6, Duration::from_secs(5)).await;
    let svc = service(&world, "cp-lb").await.unwrap();
    assert_eq!(
        svc.annotations()["service.nlb.kube-dc.com/bind-on-default-gw-eip"],
        "true"
    );
    let lb = get_lb(&world, "cp").await;
    assert_eq!(lb.status.unwrap().addresses[0].address, "91.224.11.200");
    assert!(!kdc_status(&world).await.eip_created);
    assert_eq!(eips(&world).await.len(), 1, "no EIp was created");

    Api::<LoadBalancer>::namespaced(world.client(), NS)
        .delete("cp", &DeleteParams::default())
        .await
        .unwrap();
    for _ in 0..10 {
        sim.step(&world).await;
        let _ = world.reconcile(NS, "cp").await;
        world.clock.advance(Duration::from_secs(5));
    }
    assert!(
        Api::<LoadBalancer>::namespaced(world.client(), NS)
            .get_opt("cp")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        service(&world, "cp-lb").await.is_none(),
        "what it created is gone"
    );
    let left = eips(&world).await;
    assert_eq!(left.len(), 1);
    assert_eq!(
        left[0].name_any(),
        "default-gw",
        "the named EIp is never deleted"
    );
    assert_eq!(
        left[0].status.as_ref().unwrap().ip_address.as_deref(),
        Some("91.224.11.200")
    );
}

#[tokio::test]
async fn deleting_the_load_balancer_deletes_the_created_eip_and_service() {
    let world = world_with_eips(basic()).await;
    let mut sim = KubeDcSim::new();
    drive(&world, &mut sim, 6, Duration::from_secs(5)).await;
    Api::<LoadBalancer>::namespaced(world.client(), NS)
        .delete("cp", &DeleteParams::default())
        .await
        .unwrap();
    for _ in 0..10 {
        sim.step(&world).await;
        let _ = world.reconcile(NS, "cp").await;
        world.clock.advance(Duration::from_secs(5));
    }
    assert!(eips(&world).await.is_empty());
    assert!(service(&world, "cp-lb").await.is_none());
    assert!(
        Api::<Endpoints>::namespaced(world.client(), NS)
            .get_opt("cp-lb")
            .await
            .unwrap()
            .is_none()
    );
    assert!(slices(&world, "cp-lb").await.is_empty());
}

#[tokio::test]
async fn a_foreign_service_with_our_name_is_a_conflict_and_left_untouched() {
    let mut objects = basic();
    objects.push(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "cp-lb", "namespace": NS},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
    }));
    let world = world_with_eips(objects).await;
    let mut sim = KubeDcSim::new();
    let before = service(&world, "cp-lb").await.unwrap();
    drive(&world, &mut sim, 4, Duration::from_secs(5)).await;
    let after = service(&world, "cp-lb").await.unwrap();
    assert_eq!(after.resource_version(), before.resource_version());
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "InfrastructureReady");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "NameConflict")
    );
    assert!(c.message.contains("Service default/cp-lb"), "{}", c.message);
    assert!(event_reasons(&world).contains(&"NameConflict".to_string()));
}

/// kube-dc's condition reasons and messages are not a documented API (an exhausted quota has no
/// public reason): they are quoted, never matched. An EIp kube-dc refuses for its quota is
/// `EIpNotReady` (with kube-dc's words) until it has been pending for 5 minutes, then `EIpStuck`.
#[tokio::test]
async fn an_exhausted_public_quota_is_quoted_not_matched_and_stuck_after_five_minutes() {
    let world = world_with_eips(basic()).await;
    let mut sim = KubeDcSim::new();
    sim.public_quota = Some(0);
    drive(&world, &mut sim, 3, Duration::from_secs(20)).await;
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "InfrastructureReady");
    assert_eq!(c.reason, "EIpNotReady", "{}", c.message);
    assert!(
        c.message
            .contains("kube-dc says: AllocationFailed: public IP quota exceeded"),
        "{}",
        c.message
    );
    assert!(!lb.status.unwrap().ready);
    drive(&world, &mut sim, 10, Duration::from_secs(30)).await;
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "InfrastructureReady");
    assert_eq!(c.reason, "EIpStuck", "{}", c.message);
    assert!(c.message.contains("pending for"), "{}", c.message);
    assert!(
        kdc_status(&world)
            .await
            .waiting_for
            .unwrap()
            .contains("quota")
    );
}

/// kube-dc deletes an EIp asynchronously (finalizer `eip.kube-dc.com/finalizer`, removed once its
/// OVN objects are released): the LoadBalancer and the KubeDCLoadBalancer keep their finalizers
/// until the EIp is gone, each reconcile asks to be requeued instead of waiting, and nothing leaks.
#[tokio::test]
async fn deletion_waits_for_kube_dc_to_release_the_eip_without_blocking() {
    let world = world_with_eips(basic()).await;
    let mut sim = KubeDcSim::new();
    drive(&world, &mut sim, 6, Duration::from_secs(5)).await;
    let eip = Api::<EIp>::namespaced(world.client(), NS)
        .get("cp-eip")
        .await
        .unwrap();
    assert!(
        eip.finalizers().iter().any(|f| f == EIP_FINALIZER),
        "kube-dc finalizes its EIps: {:?}",
        eip.finalizers()
    );
    Api::<LoadBalancer>::namespaced(world.client(), NS)
        .delete("cp", &DeleteParams::default())
        .await
        .unwrap();
    let lbs = Api::<LoadBalancer>::namespaced(world.client(), NS);
    let infras = Api::<KubeDCLoadBalancer>::namespaced(world.client(), NS);
    let mut held = 0;
    for _ in 0..10 {
        let outcome = world.reconcile(NS, "cp").await;
        sim.step(&world).await;
        let eips_left = eips(&world).await;
        if eips_left.is_empty() {
            break;
        }
        let outcome = outcome.unwrap();
        assert!(outcome.requeue_after.is_some(), "{outcome:?}");
        assert!(lbs.get_opt("cp").await.unwrap().is_some());
        assert!(infras.get_opt("cp").await.unwrap().is_some());
        if eips_left[0].metadata.deletion_timestamp.is_some() {
            held += 1;
        }
        world.clock.advance(Duration::from_secs(5));
    }
    assert!(held >= 1, "the EIp was never seen being deleted");
    assert_eq!(sim.released, vec!["cp-eip"]);
    for _ in 0..3 {
        let _ = world.reconcile(NS, "cp").await;
    }
    assert!(lbs.get_opt("cp").await.unwrap().is_none());
    assert!(infras.get_opt("cp").await.unwrap().is_none());
    assert!(eips(&world).await.is_empty());
    assert!(service(&world, "cp-lb").await.is_none());
}

fn owners(eip: &EIp) -> (Value, Value) {
    let status = eip.status.clone().unwrap();
    (
        status
            .rest
            .get("ownershipType")
            .cloned()
            .unwrap_or_default(),
        status.rest.get("owners").cloned().unwrap_or_default(),
    )
}

/// kube-dc records the Service bound to an EIp in its `status.owners` (`Shared`) and holds an
/// owned EIp on deletion: a deleted, still bound EIp keeps serving (capi-lb makes no second one),
/// and deleting the LoadBalancer deletes the Service first, so the EIp is released and goes.
#[tokio::test]
async fn a_bound_eip_is_owned_by_the_service_and_held_until_the_service_goes() {
    let world = world_with_eips(basic()).await;
    let mut sim = KubeDcSim::new();
    drive(&world, &mut sim, 6, Duration::from_secs(5)).await;
    let eip_api = Api::<EIp>::namespaced(world.client(), NS);
    let eip = eip_api.get("cp-eip").await.unwrap();
    assert_eq!(
        owners(&eip),
        (
            json!("Shared"),
            json!([{"type": "ServiceLb", "ownerRef": "cp-lb"}])
        )
    );
    let address = eip.status.as_ref().unwrap().ip_address.clone().unwrap();

    // Someone deletes the EIp while the Service is bound: kube-dc holds it, it keeps serving.
    eip_api
        .delete("cp-eip", &DeleteParams::default())
        .await
        .unwrap();
    drive(&world, &mut sim, 4, Duration::from_secs(5)).await;
    let held = eips(&world).await;
    assert_eq!(held.len(), 1, "no second EIp");
    assert!(held[0].metadata.deletion_timestamp.is_some());
    let lb = get_lb(&world, "cp").await;
    let status = lb.status.clone().unwrap();
    assert!(status.ready);
    assert_eq!(status.addresses[0].address, address);
    assert!(sim.released.is_empty());
    // It is said: still serving (True), with a reason of its own and a Warning Event, once.
    let c = condition(&lb, "InfrastructureReady");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "EIpDeleting"),
        "{}",
        c.message
    );
    assert!(
        c.message.contains("EIp default/cp-eip was deleted")
            && c.message.contains("Service cp-lb")
            && c.message.contains(&address),
        "{}",
        c.message
    );
    assert!(warned(&world, "EIpDeleting"));
    let told = |world: &World| {
        event_reasons(world)
            .iter()
            .filter(|r| *r == "EIpDeleting")
            .count()
    };
    assert_eq!(told(&world), 1);
    let writes = world.api.stats.writes_excluding_events();
    drive(&world, &mut sim, 3, Duration::from_secs(60)).await;
    assert_eq!(told(&world), 1, "told once");
    assert_eq!(
        world.api.stats.writes_excluding_events(),
        writes,
        "no writes while held"
    );

    // Deleting the LoadBalancer deletes the Service, so kube-dc releases the EIp.
    Api::<LoadBalancer>::namespaced(world.client(), NS)
        .delete("cp", &DeleteParams::default())
        .await
        .unwrap();
    let mut released_seen = false;
    for _ in 0..10 {
        let _ = world.reconcile(NS, "cp").await;
        sim.step(&world).await;
        if let Some(eip) = eip_api.get_opt("cp-eip").await.unwrap() {
            let (ownership, owners) = owners(&eip);
            if ownership == json!("Released") {
                assert_eq!(owners, json!([]));
                assert!(
                    service(&world, "cp-lb").await.is_none(),
                    "released only once the Service is gone"
                );
                released_seen = true;
            }
        }
        world.clock.advance(Duration::from_secs(5));
    }
    assert!(released_seen);
    assert_eq!(sim.released, vec!["cp-eip"]);
    assert!(eips(&world).await.is_empty());
    assert!(
        Api::<LoadBalancer>::namespaced(world.client(), NS)
            .get_opt("cp")
            .await
            .unwrap()
            .is_none()
    );
}

/// kube-dc acts only in a Project's namespace: elsewhere nothing would ever get an address, so
/// capi-lb makes nothing there and says why (`NotAKubeDCProject`, with a Warning Event) instead of
/// waiting forever.
#[tokio::test]
async fn outside_a_kube_dc_project_nothing_is_made_and_the_namespace_is_named() {
    let mut objects = basic();
    objects.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}));
    let world = world_outside_projects(objects).await;
    let mut sim = KubeDcSim::new();
    drive(&world, &mut sim, 4, Duration::from_secs(5)).await;
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "InfrastructureReady");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "NotAKubeDCProject"),
        "{}",
        c.message
    );
    assert!(
        c.message
            .contains(&format!("namespace {NS} is not a kube-dc Project's")),
        "{}",
        c.message
    );
    assert!(c.message.contains("kube-dc.com/project"), "{}", c.message);
    assert!(warned(&world, "NotAKubeDCProject"));
    assert!(eips(&world).await.is_empty(), "no EIp made");
}

/// Without a Namespace to look at (none stored here), nothing is claimed: the plain waiting reason.
/// (A Namespace that may not be read, 403, is the same: see the provider's unit tests.)
#[tokio::test]
async fn an_unreadable_project_claims_nothing() {
    let world = world_outside_projects(basic()).await;
    let mut sim = KubeDcSim::new();
    drive(&world, &mut sim, 3, Duration::from_secs(5)).await;
    let c = condition(&get_lb(&world, "cp").await, "InfrastructureReady");
    assert_eq!(c.reason, "EIpNotReady", "{}", c.message);
    assert_eq!(eips(&world).await.len(), 1);
}

/// `status.ovnEIpRef` has kube-dc's documented forms, and nothing capi-lb writes depends on it.
#[tokio::test]
async fn the_ovn_eip_ref_has_kube_dcs_forms() {
    let world = world_with_eips(basic()).await;
    let mut sim = KubeDcSim::new();
    drive(&world, &mut sim, 6, Duration::from_secs(5)).await;
    let eip = Api::<EIp>::namespaced(world.client(), NS)
        .get("cp-eip")
        .await
        .unwrap();
    let reference = eip.status.unwrap().rest["ovnEIpRef"].clone();
    assert!(
        reference.as_str().unwrap().starts_with("eip-slb-"),
        "{reference}"
    );
    assert!(get_lb(&world, "cp").await.status.unwrap().ready);
}

#[tokio::test]
async fn a_slow_eip_is_not_ready_then_stuck_and_a_lagging_kube_dc_leaves_the_service_without_ingress()
 {
    let world = world_with_eips(basic()).await;
    let mut sim = KubeDcSim::new();
    sim.eip_delay = Duration::from_secs(600);
    drive(&world, &mut sim, 2, Duration::from_secs(30)).await;
    let reason = |lb: &LoadBalancer| condition(lb, "InfrastructureReady").reason;
    assert_eq!(reason(&get_lb(&world, "cp").await), "EIpNotReady");
    drive(&world, &mut sim, 10, Duration::from_secs(30)).await;
    let lb = get_lb(&world, "cp").await;
    assert_eq!(reason(&lb), "EIpStuck");
    assert!(
        condition(&lb, "InfrastructureReady")
            .message
            .contains("pending for 5m"),
        "{}",
        condition(&lb, "InfrastructureReady").message
    );

    // The EIp becomes ready, but kube-dc does not program the Service yet.
    sim.program_services = false;
    drive(&world, &mut sim, 10, Duration::from_secs(30)).await;
    let lb = get_lb(&world, "cp").await;
    assert_eq!(reason(&lb), "ServiceWithoutIngress");
    sim.program_services = true;
    drive(&world, &mut sim, 2, Duration::from_secs(5)).await;
    assert!(get_lb(&world, "cp").await.status.unwrap().ready);
}

#[tokio::test]
async fn a_restarted_controller_adopts_instead_of_duplicating() {
    let world = world_with_eips(basic()).await;
    let mut sim = KubeDcSim::new();
    drive(&world, &mut sim, 6, Duration::from_secs(5)).await;
    let eip = Api::<EIp>::namespaced(world.client(), NS)
        .get("cp-eip")
        .await
        .unwrap();
    // A new process, and the KubeDCLoadBalancer's status lost (clusterctl move does not keep it).
    Api::<KubeDCLoadBalancer>::namespaced(world.client(), NS)
        .patch_status(
            "cp",
            &Default::default(),
            &kube::api::Patch::Merge(json!({"status": null})),
        )
        .await
        .unwrap();
    let restarted = world.restart();
    drive(&restarted, &mut sim, 3, Duration::from_secs(5)).await;
    let after = eips(&restarted).await;
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].uid(), eip.uid(), "the same EIp, adopted");
    let services: Vec<Service> = Api::<Service>::namespaced(restarted.client(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(
        services
            .iter()
            .filter(|s| s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer"))
            .count(),
        1
    );
    assert!(kdc_status(&restarted).await.ready);
    assert!(get_lb(&restarted, "cp").await.status.unwrap().ready);
}

#[tokio::test]
async fn without_kube_dc_installed_the_provider_waits_and_says_so() {
    // EIp not registered: the API serves no kube-dc.com resources.
    let world = World::new(basic()).await.unwrap();
    world.reconcile(NS, "cp").await.unwrap();
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "InfrastructureReady");
    assert_eq!(c.reason, "KubeDCNotInstalled", "{}", c.message);
    assert!(c.message.contains("eips.kube-dc.com"), "{}", c.message);
    assert!(
        service(&world, "cp-lb").await.is_none(),
        "nothing half-made"
    );
}

/// The manifests in examples/kubedc are valid and work: with control-plane Machines added and
/// kube-dc's controller simulated, every LoadBalancer in them becomes Ready.
#[tokio::test]
async fn the_kube_dc_examples_become_ready() {
    use capi_lb_api::validation::parse;
    let dir = repo("examples/kubedc");
    let mut objects: Vec<Value> = Vec::new();
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for doc in serde_saphyr::from_multiple::<Value>(&text).unwrap() {
            match doc["kind"].as_str().unwrap() {
                "LoadBalancer" => {
                    parse::<LoadBalancer>(&doc).unwrap_or_else(|e| panic!("{path:?}: {e}"));
                    names.push(doc["metadata"]["name"].as_str().unwrap().to_string());
                }
                "KubeDCLoadBalancer" => {
                    parse::<KubeDCLoadBalancer>(&doc).unwrap_or_else(|e| panic!("{path:?}: {e}"));
                }
                "EIp" => {}
                other => panic!("{path:?}: unexpected kind {other}"),
            }
            objects.push(doc);
        }
    }
    assert_eq!(names.len(), 2, "{names:?}");
    let ns = "shalb-demo";
    for (cluster, ip) in [("tenant-a", "10.10.0.11"), ("tenant-b", "10.20.0.11")] {
        let mut m = machine(&format!("{cluster}-cp-1"), "x", ip).build();
        m["metadata"]["namespace"] = json!(ns);
        m["metadata"]["labels"] =
            json!({"cluster.x-k8s.io/cluster-name": cluster, "cluster.x-k8s.io/control-plane": ""});
        m["status"]["conditions"] = json!([{"type": "APIServerPodHealthy", "status": "True"}]);
        objects.push(m);
    }
    let world = world_with_eips(objects).await;
    let mut sim = KubeDcSim::new();
    for _ in 0..8 {
        sim.step_with(&world.client(), ns, world.clock.now()).await;
        for name in &names {
            world.reconcile(ns, name).await.unwrap();
        }
        world.clock.advance(Duration::from_secs(5));
    }
    for name in &names {
        let lb = Api::<LoadBalancer>::namespaced(world.client(), ns)
            .get(name)
            .await
            .unwrap();
        let status = lb.status.unwrap();
        assert!(status.ready, "{name}: {status:#?}");
        assert_eq!(status.active_targets.len(), 1, "{name}: {status:#?}");
    }
}

/// The admin's opt-in label for credentials (`--credentials-secret-label`) holds for kube-dc in
/// another cluster too: a kubeconfig Secret without it is not read (nothing is made, in either
/// cluster) and the LoadBalancer says why, with a Warning Event.
#[tokio::test]
async fn a_kubeconfig_secret_without_the_required_label_is_not_used() {
    let label = ("loadbalancer.cluster.x-k8s.io/credentials", "true");
    let world = world_with_eips(vec![
        kubedc_lb("cp").build(),
        kubedc_infra(
            "cp",
            json!({"cluster": {"kubeconfigSecretName": "remote", "namespace": "project"}}),
        ),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "remote", "namespace": NS},
               "data": {"value": "bm90IHJlYWQ="}}),
        machine("cp-m1", "cp", "10.0.0.11").build(),
    ])
    .await
    .reconfigured(|c| c.credentials.required_label = Some((label.0.into(), label.1.into())));
    world.reconcile(NS, "cp").await.unwrap();
    let c = condition(&get_lb(&world, "cp").await, "InfrastructureReady");
    assert_eq!(c.reason, "CredentialsNotAllowed", "{c:?}");
    assert!(
        c.message.contains(&format!(
            "Secret {NS}/remote is not labelled {}={}",
            label.0, label.1
        )),
        "{c:?}"
    );
    assert!(warned(&world, "CredentialsNotAllowed"));
    assert!(eips(&world).await.is_empty(), "an EIp was made");
}
