//! The Service provider (`ServiceLoadBalancer`) through the real reconcilers, against the in-memory
//! API and a simulated implementation of Services of `type: LoadBalancer`
//! (tests/src/servicelb_sim.rs, what MetalLB's controller does): the Service and its member
//! EndpointSlices, the address, drain, what is said while there is no address, name conflicts,
//! source ranges (also for the in-memory and kube-dc providers and a Service of capi-lb's class),
//! migrations (from another provider, to another class), adoption after a restart, port changes and
//! deletion.

use std::time::Duration;

use capi_lb::sim::world::World;
use capi_lb_api::capi::Machine;
use capi_lb_api::constants::{ANNOTATION_TARGET_DISABLED, INFRASTRUCTURE_FINALIZER};
use capi_lb_api::kubedc::EIp;
use capi_lb_api::target::TargetKeys;
use capi_lb_api::{InMemoryLoadBalancer, LoadBalancer, ServiceLoadBalancer};
use capi_lb_providers::provider::tags;
use capi_lb_tests::kubedc_sim::KubeDcSim;
use capi_lb_tests::servicelb_sim::ServiceLbSim;
use capi_lb_tests::*;
use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

/// The load-balancer class the simulated implementation serves.
const CLASS: &str = "example.com/lb";
/// Its address pool.
const POOL: [&str; 2] = ["192.0.2.10", "192.0.2.11"];

/// The ServiceLoadBalancer spec of a MetalLB-like set-up.
fn metallb_spec() -> Value {
    json!({
        "loadBalancerClass": CLASS,
        "annotations": {"metallb.io/address-pool": "control-planes"},
        "labels": {"pool": "control-planes"},
        "allocateLoadBalancerNodePorts": false,
    })
}

/// LoadBalancer `cp` (drain 20 s) on ServiceLoadBalancer `cp` with `spec`, and Machines cp-m1 and
/// cp-m2.
fn objects(spec: Value) -> Vec<Value> {
    vec![
        service_lb("cp").spec("drainSeconds", json!(20)).build(),
        service_infra("cp", spec),
        machine("cp-m1", "cp", "10.0.0.11").build(),
        machine("cp-m2", "cp", "10.0.0.12").build(),
    ]
}

/// The implementation and capi-lb's reconciler of LoadBalancer `cp` taking turns, `rounds` times,
/// `step` apart (no implementation when `sim` is `None`), then the implementation once more.
async fn drive(world: &World, mut sim: Option<&mut ServiceLbSim>, rounds: usize, step: Duration) {
    for _ in 0..rounds {
        if let Some(sim) = sim.as_deref_mut() {
            sim.step(world).await;
        }
        world.reconcile(NS, "cp").await.unwrap();
        world.clock.advance(step);
    }
    if let Some(sim) = sim {
        sim.step(world).await;
    }
}

/// A world with `objects` driven with the simulated implementation until it has settled.
async fn converged(objects: Vec<Value>) -> (World, ServiceLbSim) {
    let world = world(objects).await;
    let mut sim = ServiceLbSim::new(Some(CLASS), &POOL);
    drive(&world, Some(&mut sim), 6, Duration::from_secs(1)).await;
    (world, sim)
}

async fn svc_lb_status(world: &World, name: &str) -> capi_lb_api::ServiceLoadBalancerStatus {
    Api::<ServiceLoadBalancer>::namespaced(world.client(), NS)
        .get(name)
        .await
        .unwrap()
        .status
        .unwrap_or_default()
}

/// The state annotation capi-lb writes on Machine `machine` for LoadBalancer `cp`.
async fn target_state(world: &World, machine: &str) -> Option<String> {
    Api::<Machine>::namespaced(world.client(), NS)
        .get(machine)
        .await
        .unwrap()
        .annotations()
        .get(&TargetKeys::new(NS, "cp").state)
        .cloned()
}

/// Each endpoint of the member slice `cp-lb-ipv4`: (address, targetRef name, ready, serving,
/// terminating).
type EndpointView = (String, String, Option<bool>, Option<bool>, Option<bool>);

async fn member_endpoints(world: &World) -> Vec<EndpointView> {
    let slice = slice(world, "cp-lb-ipv4").await.expect("member slice");
    let mut out: Vec<EndpointView> = slice
        .endpoints
        .iter()
        .map(|e| {
            let c = e.conditions.clone().unwrap_or_default();
            (
                e.addresses.join(","),
                e.target_ref
                    .as_ref()
                    .and_then(|t| t.name.clone())
                    .unwrap_or_default(),
                c.ready,
                c.serving,
                c.terminating,
            )
        })
        .collect();
    out.sort();
    out
}

fn source_ranges_of(service: &Service) -> Vec<String> {
    service
        .spec
        .as_ref()
        .and_then(|s| s.load_balancer_source_ranges.clone())
        .unwrap_or_default()
}

/// The fields capi-lb's server-side apply owns on `service` (its `managedFields` entry).
fn applied_fields(service: &Service) -> Value {
    service
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .find(|m| {
            m.manager.as_deref() == Some("capi-lb") && m.operation.as_deref() == Some("Apply")
        })
        .and_then(|m| m.fields_v1.clone())
        .expect("capi-lb's apply entry")
        .0
}

async fn service_ranges(world: &World) -> Vec<String> {
    source_ranges_of(&service(world, "cp-lb").await.unwrap())
}

fn ingress_ips(service: &Service) -> Vec<String> {
    service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.clone())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|i| i.ip)
        .collect()
}

/// Point LoadBalancer `name`'s infrastructureRef at `kind` `infra`.
async fn point_at(world: &World, name: &str, kind: &str, infra: &str) {
    merge_patch::<LoadBalancer>(
        world,
        name,
        json!({"spec": {"infrastructureRef": {
            "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": kind, "name": infra,
        }}}),
    )
    .await;
}

#[tokio::test]
async fn a_load_balancer_on_a_service_implementation_goes_ready_with_the_implementations_address() {
    let (world, _sim) = converged(objects(metallb_spec())).await;
    let lb = get_lb(&world, "cp").await;
    let lb_uid = lb.metadata.uid.clone().unwrap();

    // The Service: selectorless, of the class, with the spec's annotations and labels under
    // capi-lb's, owned by the LoadBalancer, with the LoadBalancer's port.
    let svc = service(&world, "cp-lb").await.expect("Service cp-lb");
    let spec = svc.spec.clone().unwrap();
    assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
    assert!(
        spec.selector.as_ref().is_none_or(|s| s.is_empty()),
        "{:?}",
        spec.selector
    );
    assert_eq!(spec.load_balancer_class.as_deref(), Some(CLASS));
    assert_eq!(spec.allocate_load_balancer_node_ports, Some(false));
    assert_eq!(spec.load_balancer_source_ranges, None);
    let ports = spec.ports.unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].port, 6443);
    assert_eq!(
        ports[0].target_port,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(6443))
    );
    assert_eq!(
        svc.annotations()["metallb.io/address-pool"],
        "control-planes"
    );
    assert_eq!(
        svc.annotations()["loadbalancer.cluster.x-k8s.io/external-endpoint"],
        "false"
    );
    assert_eq!(svc.labels()["pool"], "control-planes");
    assert_eq!(svc.labels()["app.kubernetes.io/managed-by"], "capi-lb");
    assert_eq!(svc.labels()[tags::UID], lb_uid);
    let owners = svc.owner_references();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(
        (
            owners[0].kind.as_str(),
            owners[0].name.as_str(),
            owners[0].uid.as_str(),
            owners[0].controller
        ),
        ("LoadBalancer", "cp", lb_uid.as_str(), Some(true))
    );
    assert_eq!(ingress_ips(&svc), vec!["192.0.2.10"]);

    // The LoadBalancer: ready with the implementation's address, published under -ext.
    let status = lb.status.clone().unwrap();
    assert!(status.ready, "{status:#?}");
    assert_eq!(status.addresses.len(), 1, "{:?}", status.addresses);
    assert_eq!(status.addresses[0].address, "192.0.2.10");
    assert_eq!(status.active_targets, vec!["cp-m1", "cp-m2"]);
    assert_eq!(
        cond(&lb, "InfrastructureReady"),
        ("True".to_string(), "Provisioned".to_string()),
        "{:?}",
        condition(&lb, "InfrastructureReady")
    );
    assert_eq!(
        cond(&lb, "SpecHonoured"),
        ("True".into(), "Honoured".into())
    );
    assert_eq!(
        slices(&world, "cp-ext").await["cp-ext-ipv4"],
        vec!["192.0.2.10"]
    );

    // The members: the Service's EndpointSlice, owned by it, naming each Machine.
    assert_eq!(
        member_endpoints(&world).await,
        vec![
            (
                "10.0.0.11".to_string(),
                "cp-m1".to_string(),
                Some(true),
                Some(true),
                Some(false)
            ),
            (
                "10.0.0.12".to_string(),
                "cp-m2".to_string(),
                Some(true),
                Some(true),
                Some(false)
            ),
        ]
    );
    let member_slice: EndpointSlice = slice(&world, "cp-lb-ipv4").await.unwrap();
    assert_eq!(member_slice.labels()["kubernetes.io/service-name"], "cp-lb");
    assert_eq!(member_slice.owner_references()[0].uid, svc.uid().unwrap());
    assert_eq!(
        member_slice
            .ports
            .iter()
            .flatten()
            .map(|p| p.port)
            .collect::<Vec<_>>(),
        vec![Some(6443)]
    );
    assert_eq!(
        slices(&world, "cp-lb").await.keys().collect::<Vec<_>>(),
        vec!["cp-lb-ipv4"],
        "one slice per family with members"
    );
    assert!(
        Api::<Endpoints>::namespaced(world.client(), NS)
            .get_opt("cp-lb")
            .await
            .unwrap()
            .is_none(),
        "no v1 Endpoints for the Service provider"
    );

    // The ServiceLoadBalancer's status.
    let infra = svc_lb_status(&world, "cp").await;
    assert_eq!(infra.service_name.as_deref(), Some("cp-lb"));
    assert_eq!(infra.addresses, vec!["192.0.2.10"]);
    assert!(infra.ready, "{infra:?}");
    assert_eq!(infra.member_count, 2);
    assert_eq!(infra.waiting_for, None);

    // The targets' states.
    assert_eq!(
        target_state(&world, "cp-m1").await.as_deref(),
        Some("active")
    );
    assert_eq!(
        target_state(&world, "cp-m2").await.as_deref(),
        Some("active")
    );
    assert!(event_reasons(&world).contains(&"LoadBalancerCreated".to_string()));
}

#[tokio::test]
async fn a_converged_load_balancer_is_not_written_again() {
    let (world, mut sim) = converged(objects(metallb_spec())).await;
    assert!(is_ready(&get_lb(&world, "cp").await));
    // Something else adds its own annotation to the Service, as MetalLB does: not a difference.
    merge_patch::<Service>(
        &world,
        "cp-lb",
        json!({"metadata": {"annotations": {"metallb.io/ip-allocated-from-pool": "control-planes"}}}),
    )
    .await;
    let writes = world.api.stats.writes();
    for _ in 0..3 {
        sim.step(&world).await;
        world.reconcile(NS, "cp").await.unwrap();
        world.clock.advance(Duration::from_secs(30));
    }
    assert_eq!(
        world.api.stats.writes(),
        writes,
        "writes of an unchanged reconcile: {:?}",
        &world.api.stats.log()[writes as usize..]
    );
    let svc = service(&world, "cp-lb").await.unwrap();
    assert_eq!(
        svc.annotations()["metallb.io/ip-allocated-from-pool"],
        "control-planes",
        "the implementation's annotation is left alone"
    );
}

#[tokio::test]
async fn a_disabled_member_drains_serving_but_not_ready_then_leaves_the_slice() {
    let (world, mut sim) = converged(objects(metallb_spec())).await;
    merge_patch::<Machine>(
        &world,
        "cp-m1",
        json!({"metadata": {"annotations": {ANNOTATION_TARGET_DISABLED: ""}}}),
    )
    .await;
    sim.step(&world).await;
    world.reconcile(NS, "cp").await.unwrap();
    let draining = (
        "10.0.0.11".to_string(),
        "cp-m1".to_string(),
        Some(false),
        Some(true),
        Some(true),
    );
    let serving = (
        "10.0.0.12".to_string(),
        "cp-m2".to_string(),
        Some(true),
        Some(true),
        Some(false),
    );
    assert_eq!(
        member_endpoints(&world).await,
        vec![draining.clone(), serving.clone()]
    );
    assert_eq!(
        target_state(&world, "cp-m1").await.as_deref(),
        Some("disabling")
    );

    // Still draining just before the drain time.
    world.clock.advance(Duration::from_secs(19));
    world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(
        member_endpoints(&world).await,
        vec![draining, serving.clone()]
    );

    world.clock.advance(Duration::from_secs(2));
    world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(member_endpoints(&world).await, vec![serving]);
    assert_eq!(
        target_state(&world, "cp-m1").await.as_deref(),
        Some("disabled")
    );
    let lb = get_lb(&world, "cp").await;
    assert!(is_ready(&lb));
    assert_eq!(lb.status.unwrap().active_targets, vec!["cp-m2"]);
    assert_eq!(svc_lb_status(&world, "cp").await.member_count, 1);
    assert_eq!(
        slices(&world, "cp-ext").await["cp-ext-ipv4"],
        vec!["192.0.2.10"]
    );
}

#[tokio::test]
async fn a_deleted_machine_drains_then_leaves_the_slice() {
    let mut objs = objects(metallb_spec());
    // Cluster API's finalizer keeps a Machine while it is deleted.
    for m in &mut objs[2..] {
        m["metadata"]["finalizers"] = json!(["machine.cluster.x-k8s.io"]);
    }
    let (world, mut sim) = converged(objs).await;
    delete::<Machine>(&world, "cp-m2").await;
    sim.step(&world).await;
    world.reconcile(NS, "cp").await.unwrap();
    let serving = (
        "10.0.0.11".to_string(),
        "cp-m1".to_string(),
        Some(true),
        Some(true),
        Some(false),
    );
    assert_eq!(
        member_endpoints(&world).await,
        vec![
            serving.clone(),
            (
                "10.0.0.12".to_string(),
                "cp-m2".to_string(),
                Some(false),
                Some(true),
                Some(true)
            ),
        ]
    );
    world.clock.advance(Duration::from_secs(21));
    world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(member_endpoints(&world).await, vec![serving]);
    assert!(is_ready(&get_lb(&world, "cp").await));
}

#[tokio::test]
async fn without_an_implementation_the_wait_names_the_class_then_turns_into_no_implementation() {
    let mut spec = metallb_spec();
    spec["addressTimeoutSeconds"] = json!(30);
    let world = world(objects(spec)).await;
    drive(&world, None, 2, Duration::from_secs(5)).await;
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "InfrastructureReady");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "AddressPending")
    );
    assert!(c.message.contains(CLASS), "{}", c.message);
    assert!(!is_ready(&lb));
    assert!(lb.status.clone().unwrap().addresses.is_empty());
    assert!(
        service(&world, "cp-lb").await.is_some(),
        "the Service is made"
    );
    let infra = svc_lb_status(&world, "cp").await;
    assert!(!infra.ready);
    assert!(
        infra
            .waiting_for
            .as_deref()
            .is_some_and(|w| w.contains(CLASS)),
        "{infra:?}"
    );
    assert_eq!(
        target_state(&world, "cp-m1").await.as_deref(),
        Some("adding")
    );
    assert!(!event_reasons(&world).contains(&"NoImplementation".to_string()));

    // Past addressTimeoutSeconds since the Service was created.
    world.clock.advance(Duration::from_secs(25));
    world.reconcile(NS, "cp").await.unwrap();
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "InfrastructureReady");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "NoImplementation")
    );
    assert!(
        c.message.contains(CLASS) && c.message.contains("default/cp-lb"),
        "{}",
        c.message
    );
    assert!(
        world
            .ctx
            .events
            .timeline()
            .iter()
            .any(|e| e.warning && e.reason == "NoImplementation"),
        "{:?}",
        event_reasons(&world)
    );

    // An implementation turns up: the address is taken at once.
    let mut sim = ServiceLbSim::new(Some(CLASS), &POOL);
    drive(&world, Some(&mut sim), 3, Duration::from_secs(1)).await;
    let lb = get_lb(&world, "cp").await;
    assert!(is_ready(&lb), "{:?}", lb.status);
    assert_eq!(lb.status.unwrap().addresses[0].address, "192.0.2.10");
}

#[tokio::test]
async fn an_implementation_that_cannot_assign_is_quoted() {
    let world = world(objects(metallb_spec())).await;
    let mut sim = ServiceLbSim::new(Some(CLASS), &[]);
    drive(&world, Some(&mut sim), 3, Duration::from_secs(1)).await;
    world.reconcile(NS, "cp").await.unwrap();
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "InfrastructureReady");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "AddressNotAssigned")
    );
    assert!(
        c.message.contains("AllocationFailed") && c.message.contains("no available IPs"),
        "{}",
        c.message
    );
    assert!(c.message.contains("metallb-controller"), "{}", c.message);
    assert!(!is_ready(&lb));

    // The pool grows: the Service gets an address and the LoadBalancer is ready.
    sim.pool.push("192.0.2.20".into());
    drive(&world, Some(&mut sim), 3, Duration::from_secs(1)).await;
    let lb = get_lb(&world, "cp").await;
    assert!(is_ready(&lb), "{:?}", lb.status);
    assert_eq!(lb.status.unwrap().addresses[0].address, "192.0.2.20");
}

#[tokio::test]
async fn the_requested_address_is_asked_for_and_another_one_is_a_problem() {
    // Honoured: the implementation gives the requested address, not the first free one.
    let mut spec = metallb_spec();
    spec["loadBalancerIP"] = json!("192.0.2.11");
    let (world, _sim) = converged(objects(spec.clone())).await;
    let svc = service(&world, "cp-lb").await.unwrap();
    assert_eq!(
        svc.spec.unwrap().load_balancer_ip.as_deref(),
        Some("192.0.2.11")
    );
    let lb = get_lb(&world, "cp").await;
    assert!(is_ready(&lb), "{:?}", lb.status);
    assert_eq!(lb.status.unwrap().addresses[0].address, "192.0.2.11");

    // Not honoured: an implementation that ignores spec.loadBalancerIP gives another address.
    let world = capi_lb_tests::world(objects(spec)).await;
    world.reconcile(NS, "cp").await.unwrap();
    Api::<Service>::namespaced(world.client(), NS)
        .patch_status(
            "cp-lb",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.99"}]}}})),
        )
        .await
        .unwrap();
    world.reconcile(NS, "cp").await.unwrap();
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "InfrastructureReady");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "RequestedAddressNotAssigned")
    );
    assert!(
        c.message.contains("192.0.2.99") && c.message.contains("192.0.2.11"),
        "{}",
        c.message
    );
    assert!(!is_ready(&lb));
    assert!(!svc_lb_status(&world, "cp").await.ready);
}

#[tokio::test]
async fn a_foreign_service_with_the_name_is_a_conflict_and_left_untouched() {
    let mut objs = objects(metallb_spec());
    objs.push(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "cp-lb", "namespace": NS, "labels": {"app": "theirs"}},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": CLASS, "selector": {"app": "theirs"},
                 "ports": [{"name": "http", "port": 80}]},
    }));
    let world = world(objs).await;
    let before = service(&world, "cp-lb").await.unwrap();
    let mut sim = ServiceLbSim::new(Some(CLASS), &POOL);
    drive(&world, Some(&mut sim), 4, Duration::from_secs(1)).await;
    let after = service(&world, "cp-lb").await.unwrap();
    // The implementation may have given it an address, but its spec is as it was.
    assert_eq!(after.spec, before.spec);
    assert_eq!(after.labels(), before.labels());
    assert!(after.owner_references().is_empty());
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "InfrastructureReady");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "NameConflict")
    );
    assert!(c.message.contains("Service default/cp-lb"), "{}", c.message);
    assert!(!is_ready(&lb));
    assert!(
        lb.status.clone().unwrap().addresses.is_empty(),
        "the foreign Service's address is not taken: {:?}",
        lb.status
    );
    assert!(event_reasons(&world).contains(&"NameConflict".to_string()));
    assert!(
        slice(&world, "cp-lb-ipv4").await.is_none(),
        "no members are published for a Service that is not ours"
    );

    // Its owner deletes it: capi-lb makes its own.
    delete::<Service>(&world, "cp-lb").await;
    drive(&world, Some(&mut sim), 4, Duration::from_secs(1)).await;
    let lb = get_lb(&world, "cp").await;
    assert!(is_ready(&lb), "{:?}", lb.status);
    let svc = service(&world, "cp-lb").await.unwrap();
    assert_eq!(svc.labels()[tags::UID], lb.metadata.uid.unwrap());
}

#[tokio::test]
async fn source_ranges_narrow_within_the_service_load_balancers_and_never_widen_them() {
    let world = world(vec![
        service_lb("cp")
            .spec("sourceRanges", json!(["10.1.0.0/16"]))
            .build(),
        service_infra("cp", metallb_spec()),
        machine("cp-m1", "cp", "10.0.0.11").build(),
    ])
    .await;
    let mut sim = ServiceLbSim::new(Some(CLASS), &POOL);
    drive(&world, Some(&mut sim), 4, Duration::from_secs(1)).await;
    assert_eq!(service_ranges(&world).await, vec!["10.1.0.0/16"]);
    let lb = get_lb(&world, "cp").await;
    assert!(is_ready(&lb), "{:?}", lb.status);
    assert_eq!(
        cond(&lb, "SpecHonoured"),
        ("True".into(), "Honoured".into())
    );

    // The platform limits sources to 10.0.0.0/8: the LoadBalancer's range lies within.
    merge_patch::<ServiceLoadBalancer>(
        &world,
        "cp",
        json!({"spec": {"loadBalancerSourceRanges": ["10.0.0.0/8"]}}),
    )
    .await;
    drive(&world, Some(&mut sim), 2, Duration::from_secs(1)).await;
    assert_eq!(service_ranges(&world).await, vec!["10.1.0.0/16"]);
    let lb = get_lb(&world, "cp").await;
    assert!(is_ready(&lb), "{:?}", lb.status);
    assert_eq!(
        cond(&lb, "InfrastructureReady"),
        ("True".into(), "Provisioned".into())
    );

    // The platform limits sources to 192.0.2.0/24: the LoadBalancer's range is outside, refused,
    // and the Service is not changed.
    merge_patch::<ServiceLoadBalancer>(
        &world,
        "cp",
        json!({"spec": {"loadBalancerSourceRanges": ["192.0.2.0/24"]}}),
    )
    .await;
    let before = service(&world, "cp-lb").await.unwrap();
    drive(&world, Some(&mut sim), 2, Duration::from_secs(1)).await;
    let lb = get_lb(&world, "cp").await;
    let c = condition(&lb, "InfrastructureReady");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "ProviderFailed")
    );
    assert!(
        c.message.contains("not within") && c.message.contains("10.1.0.0/16"),
        "{}",
        c.message
    );
    let after = service(&world, "cp-lb").await.unwrap();
    assert_eq!(source_ranges_of(&after), vec!["10.1.0.0/16"]);
    assert_eq!(after.resource_version(), before.resource_version());

    // The LoadBalancer drops its ranges: the platform's apply.
    merge_patch::<LoadBalancer>(&world, "cp", json!({"spec": {"sourceRanges": null}})).await;
    drive(&world, Some(&mut sim), 3, Duration::from_secs(1)).await;
    assert_eq!(service_ranges(&world).await, vec!["192.0.2.0/24"]);
    let lb = get_lb(&world, "cp").await;
    assert!(is_ready(&lb), "{:?}", lb.status);
    assert_eq!(
        cond(&lb, "SpecHonoured"),
        ("True".into(), "Honoured".into())
    );

    assert!(
        applied_fields(&service(&world, "cp-lb").await.unwrap())
            .pointer("/f:spec/f:loadBalancerSourceRanges")
            .is_some()
    );

    // And the platform drops its own: capi-lb applies the Service without source ranges, so it
    // no longer owns the field (a real apiserver then removes it; the in-memory API's server-side
    // apply is a merge that never removes fields, so the stored list is not checked here).
    merge_patch::<ServiceLoadBalancer>(
        &world,
        "cp",
        json!({"spec": {"loadBalancerSourceRanges": null}}),
    )
    .await;
    drive(&world, Some(&mut sim), 2, Duration::from_secs(1)).await;
    let applied = applied_fields(&service(&world, "cp-lb").await.unwrap());
    assert!(applied.pointer("/f:spec/f:type").is_some(), "{applied}");
    assert!(
        applied
            .pointer("/f:spec/f:loadBalancerSourceRanges")
            .is_none(),
        "capi-lb still applies source ranges: {applied}"
    );
    assert!(is_ready(&get_lb(&world, "cp").await));
}

#[tokio::test]
async fn the_in_memory_cloud_load_balancer_follows_the_source_ranges() {
    let world = world(vec![
        lb("cp")
            .spec("sourceRanges", json!(["10.1.0.0/16", "2001:db8::/32"]))
            .build(),
        infra("cp").build(),
        machine("cp-m1", "cp", "10.0.0.11").build(),
    ])
    .await;
    settle(&world).await;
    let cloud = world.cloud.load_balancers();
    assert_eq!(cloud.len(), 1);
    assert_eq!(cloud[0].source_ranges, vec!["10.1.0.0/16", "2001:db8::/32"]);
    let lb = get_lb(&world, "cp").await;
    assert!(is_ready(&lb));
    assert_eq!(
        cond(&lb, "SpecHonoured"),
        ("True".into(), "Honoured".into())
    );

    merge_patch::<LoadBalancer>(
        &world,
        "cp",
        json!({"spec": {"sourceRanges": ["192.0.2.0/24"]}}),
    )
    .await;
    settle(&world).await;
    assert_eq!(
        world.cloud.load_balancers()[0].source_ranges,
        vec!["192.0.2.0/24"]
    );
    merge_patch::<LoadBalancer>(&world, "cp", json!({"spec": {"sourceRanges": null}})).await;
    settle(&world).await;
    assert!(world.cloud.load_balancers()[0].source_ranges.is_empty());
    assert_eq!(world.cloud.load_balancers().len(), 1, "updated in place");
}

#[tokio::test]
async fn kube_dc_says_it_does_not_honour_source_ranges_and_still_serves() {
    let world = World::with_builder(
        vec![
            kubedc_lb("cp")
                .spec("sourceRanges", json!(["10.1.0.0/16"]))
                .build(),
            kubedc_infra("cp", json!({"externalNetworkType": "public"})),
            machine("cp-m1", "cp", "10.0.0.11").build(),
            capi_lb_tests::kubedc_sim::project_namespace(NS),
        ],
        |b| b.with_resource::<EIp>(),
    )
    .await
    .unwrap();
    let mut sim = KubeDcSim::new();
    for _ in 0..6 {
        sim.step(&world).await;
        world.reconcile(NS, "cp").await.unwrap();
        world.clock.advance(Duration::from_secs(5));
    }
    let lb = get_lb(&world, "cp").await;
    assert!(is_ready(&lb), "{:?}", lb.status);
    let c = condition(&lb, "SpecHonoured");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "NotHonoured")
    );
    assert!(
        c.message.contains("kube-dc") && c.message.contains("10.1.0.0/16"),
        "{}",
        c.message
    );

    // Without source ranges there is nothing it does not do.
    merge_patch::<LoadBalancer>(&world, "cp", json!({"spec": {"sourceRanges": null}})).await;
    sim.step(&world).await;
    world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(
        cond(&get_lb(&world, "cp").await, "SpecHonoured"),
        ("True".into(), "Honoured".into())
    );
}

#[tokio::test]
async fn a_service_of_capi_lbs_class_passes_its_source_ranges_to_the_provider() {
    let world = world(vec![
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "tcp", "namespace": NS,
                         "annotations": {"loadbalancer.cluster.x-k8s.io/load-balancer-ref": "tcp"}},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": "loadbalancer.cluster.x-k8s.io/capi-lb",
                     "loadBalancerSourceRanges": ["203.0.113.0/24"],
                     "ports": [{"name": "https", "port": 6443}]},
        }),
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "tcp-1", "namespace": NS, "labels": {"kubernetes.io/service-name": "tcp"}},
            "addressType": "IPv4", "ports": [{"name": "https", "port": 6443}],
            "endpoints": [{"addresses": ["10.244.0.5"], "conditions": {"ready": true}}],
        }),
        lb("tcp")
            .annotation("loadbalancer.cluster.x-k8s.io/service", "tcp")
            .build(),
        infra("tcp").build(),
    ])
    .await;
    world.settle_services(10).await.unwrap();
    settle(&world).await;
    world.settle_services(10).await.unwrap();
    let cloud = world.cloud.load_balancers();
    assert_eq!(cloud.len(), 1);
    assert_eq!(cloud[0].source_ranges, vec!["203.0.113.0/24"]);
    assert!(is_ready(&get_lb(&world, "tcp").await));
    assert!(
        get_lb(&world, "tcp").await.spec.source_ranges.is_empty(),
        "the LoadBalancer's own spec is not rewritten"
    );

    // The Service's ranges change: the provider follows.
    merge_patch::<Service>(
        &world,
        "tcp",
        json!({"spec": {"loadBalancerSourceRanges": ["198.51.100.0/24"]}}),
    )
    .await;
    world.settle_services(10).await.unwrap();
    settle(&world).await;
    assert_eq!(
        world.cloud.load_balancers()[0].source_ranges,
        vec!["198.51.100.0/24"]
    );
}

#[tokio::test]
async fn a_load_balancer_moves_from_the_in_memory_provider_to_a_service_make_before_break() {
    let world = world(vec![
        lb("cp").spec("drainSeconds", json!(30)).build(),
        infra("cp").build(),
        service_infra("cp-svc", metallb_spec()),
        machine("cp-m1", "cp", "10.0.0.11").build(),
        machine("cp-m2", "cp", "10.0.0.12").build(),
    ])
    .await;
    settle(&world).await;
    let before = get_lb(&world, "cp").await.status.unwrap();
    assert!(before.ready);
    assert_eq!(before.addresses[0].address, "203.0.113.1");
    let ext_before = slice(&world, "cp-ext-ipv4").await.unwrap();
    assert_eq!(ext_before.endpoints[0].addresses, vec!["203.0.113.1"]);

    point_at(&world, "cp", "ServiceLoadBalancer", "cp-svc").await;
    // Bringing up without an address yet: the old one serves, the Service is made.
    world.reconcile(NS, "cp").await.unwrap();
    let lb = get_lb(&world, "cp").await;
    let status = lb.status.clone().unwrap();
    assert_eq!(status.infrastructure_ref.as_ref().unwrap().name, "cp");
    assert_eq!(status.migration.as_ref().unwrap().to.name, "cp-svc");
    assert!(service(&world, "cp-svc-lb").await.is_some());
    assert_eq!(world.cloud.load_balancers().len(), 1);
    assert_eq!(
        slice(&world, "cp-ext-ipv4").await.unwrap().endpoints[0].addresses,
        vec!["203.0.113.1"],
        "still published: the old one"
    );
    assert!(is_ready(&lb), "the old one keeps serving");

    let mut sim = ServiceLbSim::new(Some(CLASS), &POOL);
    let mut switched = false;
    for _ in 0..30 {
        sim.step(&world).await;
        world.reconcile(NS, "cp").await.unwrap();
        let status = get_lb(&world, "cp").await.status.unwrap();
        if !switched && status.addresses[0].address == "192.0.2.10" {
            switched = true;
            // Switched: the old one still exists while it drains.
            assert_eq!(
                world.cloud.load_balancers().len(),
                1,
                "make-before-break: the old load balancer outlives the switch"
            );
            let members = member_endpoints_named(&world, "cp-svc-lb-ipv4").await;
            assert_eq!(members, vec!["10.0.0.11", "10.0.0.12"]);
        }
        world.clock.advance(Duration::from_secs(5));
    }
    assert!(switched, "the addresses switched to the Service's");
    let lb = get_lb(&world, "cp").await;
    let status = lb.status.clone().unwrap();
    assert!(status.ready, "{status:#?}");
    assert_eq!(status.infrastructure_ref.as_ref().unwrap().name, "cp-svc");
    assert_eq!(
        status.infrastructure_ref.as_ref().unwrap().kind,
        "ServiceLoadBalancer"
    );
    assert!(status.migration.is_none());
    assert_eq!(status.addresses.len(), 1);
    assert_eq!(status.addresses[0].address, "192.0.2.10");
    assert_eq!(
        status.endpoint, before.endpoint,
        "the stable endpoint stays"
    );
    assert_eq!(
        cond(&lb, "InfrastructureMigration"),
        ("False".into(), "MigrationComplete".into())
    );
    let ext_after = slice(&world, "cp-ext-ipv4").await.unwrap();
    assert_eq!(ext_after.endpoints[0].addresses, vec!["192.0.2.10"]);
    assert_eq!(
        ext_after.uid(),
        ext_before.uid(),
        "the -ext is updated in place"
    );
    assert!(
        world.cloud.load_balancers().is_empty(),
        "{:?}",
        world.cloud.load_balancers()
    );
    let old = Api::<InMemoryLoadBalancer>::namespaced(world.client(), NS)
        .get("cp")
        .await
        .unwrap();
    assert!(
        !old.finalizers()
            .contains(&INFRASTRUCTURE_FINALIZER.to_string()),
        "the old infrastructure object is released"
    );
    assert_eq!(svc_lb_status(&world, "cp-svc").await.member_count, 2);
}

async fn member_endpoints_named(world: &World, name: &str) -> Vec<String> {
    let mut out: Vec<String> = slice(world, name)
        .await
        .map(|s| s.endpoints.into_iter().flat_map(|e| e.addresses).collect())
        .unwrap_or_default();
    out.sort();
    out
}

#[tokio::test]
async fn deleting_the_load_balancer_deletes_the_service_and_its_slices_then_the_finalizer() {
    let (world, mut sim) = converged(objects(metallb_spec())).await;
    // A cloud controller keeps the Service until it has released the address.
    merge_patch::<Service>(
        &world,
        "cp-lb",
        json!({"metadata": {"finalizers": ["service.kubernetes.io/load-balancer-cleanup"]}}),
    )
    .await;
    assert!(!slices(&world, "cp-lb").await.is_empty());
    delete::<LoadBalancer>(&world, "cp").await;
    for _ in 0..3 {
        sim.step(&world).await;
        let _ = world.reconcile(NS, "cp").await;
        world.clock.advance(Duration::from_secs(5));
    }
    let lbs: Api<LoadBalancer> = Api::namespaced(world.client(), NS);
    let waiting = lbs
        .get_opt("cp")
        .await
        .unwrap()
        .expect("kept while its Service is deleted");
    assert!(waiting.metadata.deletion_timestamp.is_some());
    let svc = service(&world, "cp-lb")
        .await
        .expect("held by its finalizer");
    assert!(
        svc.metadata.deletion_timestamp.is_some(),
        "the Service is being deleted"
    );
    assert!(slices(&world, "cp-lb").await.is_empty());

    // The implementation lets go of it: the LoadBalancer goes.
    merge_patch::<Service>(&world, "cp-lb", json!({"metadata": {"finalizers": null}})).await;
    for _ in 0..3 {
        sim.step(&world).await;
        let _ = world.reconcile(NS, "cp").await;
        world.clock.advance(Duration::from_secs(5));
    }
    assert!(service(&world, "cp-lb").await.is_none());
    assert!(slices(&world, "cp-lb").await.is_empty());
    assert!(
        Api::<EndpointSlice>::namespaced(world.client(), NS)
            .get_opt("cp-lb-ipv4")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        lbs.get_opt("cp").await.unwrap().is_none(),
        "finalizer released"
    );
    assert!(service(&world, "cp-ext").await.is_none());
}

#[tokio::test]
async fn moving_to_another_class_brings_up_the_new_service_before_deleting_the_old_one() {
    let world = world(vec![
        service_lb("cp").spec("drainSeconds", json!(30)).build(),
        service_infra("cp", metallb_spec()),
        service_infra("cp-b", json!({"loadBalancerClass": "example.com/other"})),
        machine("cp-m1", "cp", "10.0.0.11").build(),
        machine("cp-m2", "cp", "10.0.0.12").build(),
    ])
    .await;
    let mut sim_a = ServiceLbSim::new(Some(CLASS), &POOL);
    let mut sim_b = ServiceLbSim::new(Some("example.com/other"), &["198.51.100.20"]);
    drive(&world, Some(&mut sim_a), 6, Duration::from_secs(1)).await;
    assert!(is_ready(&get_lb(&world, "cp").await));
    let old_uid = service(&world, "cp-lb").await.unwrap().uid();

    point_at(&world, "cp", "ServiceLoadBalancer", "cp-b").await;
    let mut switched_with_old_alive = false;
    for _ in 0..30 {
        sim_a.step(&world).await;
        sim_b.step(&world).await;
        world.reconcile(NS, "cp").await.unwrap();
        let status = get_lb(&world, "cp").await.status.unwrap();
        if status.addresses.first().map(|a| a.address.as_str()) == Some("198.51.100.20")
            && service(&world, "cp-lb").await.is_some()
        {
            switched_with_old_alive = true;
            assert_eq!(
                service(&world, "cp-lb").await.unwrap().uid(),
                old_uid,
                "the old Service is the same one, draining"
            );
            assert_eq!(
                member_endpoints_named(&world, "cp-b-lb-ipv4").await,
                vec!["10.0.0.11", "10.0.0.12"]
            );
        }
        world.clock.advance(Duration::from_secs(5));
    }
    assert!(
        switched_with_old_alive,
        "the address switched while the old Service still existed"
    );
    let lb = get_lb(&world, "cp").await;
    let status = lb.status.clone().unwrap();
    assert!(status.ready, "{status:#?}");
    assert_eq!(status.infrastructure_ref.as_ref().unwrap().name, "cp-b");
    assert!(status.migration.is_none());
    assert_eq!(status.addresses[0].address, "198.51.100.20");
    assert_eq!(
        slices(&world, "cp-ext").await["cp-ext-ipv4"],
        vec!["198.51.100.20"]
    );
    assert!(
        service(&world, "cp-lb").await.is_none(),
        "the old Service is deleted"
    );
    assert!(slices(&world, "cp-lb").await.is_empty());
    let new = service(&world, "cp-b-lb").await.unwrap();
    assert_eq!(
        new.spec.unwrap().load_balancer_class.as_deref(),
        Some("example.com/other")
    );
    assert_eq!(
        member_endpoints_named(&world, "cp-b-lb-ipv4").await,
        vec!["10.0.0.11", "10.0.0.12"]
    );
}

#[tokio::test]
async fn a_restarted_controller_adopts_its_service_and_keeps_the_address() {
    let (world, mut sim) = converged(objects(metallb_spec())).await;
    let before = service(&world, "cp-lb").await.unwrap();
    // A new process, and the ServiceLoadBalancer's status lost.
    Api::<ServiceLoadBalancer>::namespaced(world.client(), NS)
        .patch_status(
            "cp",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": null})),
        )
        .await
        .unwrap();
    let restarted = world.restart();
    drive(&restarted, Some(&mut sim), 3, Duration::from_secs(1)).await;
    let after = service(&restarted, "cp-lb").await.unwrap();
    assert_eq!(after.uid(), before.uid(), "the same Service, adopted");
    assert_eq!(ingress_ips(&after), vec!["192.0.2.10"]);
    let lb = get_lb(&restarted, "cp").await;
    assert!(is_ready(&lb));
    assert_eq!(lb.status.unwrap().addresses[0].address, "192.0.2.10");
    let infra = svc_lb_status(&restarted, "cp").await;
    assert_eq!(infra.service_name.as_deref(), Some("cp-lb"));
    assert!(infra.ready);
    assert_eq!(infra.member_count, 2);
    let lbs = Api::<Service>::namespaced(restarted.client(), NS)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|s| s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer"))
        .count();
    assert_eq!(lbs, 1, "no second Service");
}

#[tokio::test]
async fn new_ports_reach_the_service_and_the_member_slice() {
    let (world, mut sim) = converged(objects(metallb_spec())).await;
    merge_patch::<LoadBalancer>(
        &world,
        "cp",
        json!({"spec": {"ports": [
            {"name": "kube-apiserver", "port": 6443, "protocol": "TCP"},
            {"name": "konnectivity", "port": 8132, "targetPort": 18132, "protocol": "TCP"},
        ]}}),
    )
    .await;
    drive(&world, Some(&mut sim), 2, Duration::from_secs(1)).await;
    let svc = service(&world, "cp-lb").await.unwrap();
    let mut ports: Vec<(i32, String)> = svc
        .spec
        .unwrap()
        .ports
        .unwrap()
        .into_iter()
        .map(|p| (p.port, format!("{:?}", p.target_port)))
        .collect();
    ports.sort();
    assert_eq!(
        ports,
        vec![
            (6443, "Some(Int(6443))".to_string()),
            (8132, "Some(Int(18132))".to_string())
        ]
    );
    let mut slice_ports: Vec<Option<i32>> = slice(&world, "cp-lb-ipv4")
        .await
        .unwrap()
        .ports
        .unwrap_or_default()
        .into_iter()
        .map(|p| p.port)
        .collect();
    slice_ports.sort();
    assert_eq!(slice_ports, vec![Some(6443), Some(18132)]);
    assert_eq!(
        ingress_ips(&service(&world, "cp-lb").await.unwrap()),
        vec!["192.0.2.10"]
    );
    assert!(is_ready(&get_lb(&world, "cp").await));
    // And then steady.
    let writes = world.api.stats.writes();
    sim.step(&world).await;
    world.reconcile(NS, "cp").await.unwrap();
    assert_eq!(
        world.api.stats.writes(),
        writes,
        "{:?}",
        &world.api.stats.log()[writes as usize..]
    );
}

/// MetalLB, kube-vip and kube-proxy never probe the endpoints of a Service without a selector, so
/// the Service provider does not claim to check its members: `spec.targetHealth` is used (capi-lb
/// probes the targets, e2e/target_health.rs) and not reported as a setting the provider ignores.
#[tokio::test]
async fn target_health_is_not_left_to_the_implementation() {
    let objects = vec![
        service_lb("cp")
            .spec("drainSeconds", json!(20))
            .spec(
                "targetHealth",
                json!({"periodSeconds": 5, "timeoutSeconds": 2, "failureThreshold": 2, "successThreshold": 2}),
            )
            .build(),
        service_infra("cp", metallb_spec()),
        machine("cp-m1", "cp", "10.0.0.11").build(),
    ];
    let (world, _sim) = converged(objects).await;
    let lb = get_lb(&world, "cp").await;
    assert!(lb.status.as_ref().is_some_and(|s| s.ready), "{lb:?}");
    assert_eq!(
        cond(&lb, "SpecHonoured"),
        ("True".into(), "Honoured".into()),
        "{:?}",
        condition(&lb, "SpecHonoured")
    );
}
