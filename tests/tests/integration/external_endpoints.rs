//! The `-ext` publisher for Services of type LoadBalancer: the real reconciler against the in-memory
//! Kubernetes API, asserting on the resulting objects.

use std::collections::BTreeMap;

use capi_lb::context::Policy;
use capi_lb::sim::world::World;
use capi_lb_tests::*;
use k8s_openapi::api::core::v1::{Endpoints, Service};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const DNS: &str = "loadbalancer.cluster.x-k8s.io/external-endpoint-dns-name";

fn lb_service(name: &str, ingress: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}")},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": name},
            "ports": [
                {"name": "etcd", "port": 2379, "targetPort": 12379, "protocol": "TCP"},
                {"name": "metrics", "port": 2381, "protocol": "TCP"},
            ],
        },
        "status": {"loadBalancer": {"ingress": ingress}},
    })
}

/// Reconcile every Service until nothing changes (the `-ext` publisher only: no LoadBalancer).
async fn settle_services(world: &World) {
    world.settle_services(20).await.unwrap();
}

fn services(world: &World) -> Api<Service> {
    Api::namespaced(world.client(), NS)
}

async fn set_ingress(world: &World, name: &str, ingress: Value) {
    services(world)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"loadBalancer": {"ingress": ingress}}})),
        )
        .await
        .unwrap();
}

async fn annotations(world: &World, name: &str) -> BTreeMap<String, String> {
    services(world)
        .get(name)
        .await
        .unwrap()
        .annotations()
        .clone()
}

#[tokio::test]
async fn a_load_balancer_service_gets_a_headless_ext_service_with_its_ports_and_ips() {
    let world = world(vec![lb_service(
        "etcd-lb",
        json!([{"ip": "198.51.100.7"}, {"ip": "198.51.100.8"}]),
    )])
    .await;
    settle_services(&world).await;
    let ext = service(&world, "etcd-lb-ext").await.unwrap();
    let spec = ext.spec.clone().unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
    assert!(spec.selector.is_none(), "selectorless");
    let ports: Vec<(Option<String>, i32, String)> = spec
        .ports
        .unwrap()
        .into_iter()
        .map(|p| {
            let target = match p.target_port.unwrap() {
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => i.to_string(),
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s,
            };
            assert_eq!(target, p.port.to_string(), "port == targetPort");
            (p.name, p.port, p.protocol.unwrap())
        })
        .collect();
    assert_eq!(
        ports,
        vec![
            (Some("etcd".into()), 2379, "TCP".into()),
            (Some("metrics".into()), 2381, "TCP".into())
        ]
    );
    let labels = ext.labels();
    assert_eq!(
        labels["loadbalancer.cluster.x-k8s.io/managed-by"],
        "capi-lb"
    );
    assert_eq!(
        labels["loadbalancer.cluster.x-k8s.io/source-service"],
        "etcd-lb"
    );
    assert_eq!(
        labels["loadbalancer.cluster.x-k8s.io/endpoint-type"],
        "external"
    );
    let owner = &ext.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("Service", "etcd-lb", Some(true))
    );
    assert_eq!(
        slices(&world, "etcd-lb-ext").await,
        BTreeMap::from([(
            "etcd-lb-ext-ipv4".to_string(),
            vec!["198.51.100.7".to_string(), "198.51.100.8".to_string()]
        )])
    );
    let slice = slice(&world, "etcd-lb-ext-ipv4").await.unwrap();
    assert_eq!(slice.owner_references()[0].name, "etcd-lb-ext");
    assert_eq!(slice.ports.as_ref().unwrap().len(), 2);
    assert_eq!(
        annotations(&world, "etcd-lb").await[DNS],
        "etcd-lb-ext.default.svc.cluster.local"
    );
    assert!(event_reasons(&world).contains(&"ExternalEndpointPublished".to_string()));
}

#[tokio::test]
async fn an_unchanged_service_costs_no_write_and_other_services_no_call() {
    let cluster_ip = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "plain", "namespace": NS},
        "spec": {"ports": [{"port": 80}]},
    });
    let world = world(vec![
        lb_service("etcd-lb", json!([{"ip": "198.51.100.7"}])),
        cluster_ip,
    ])
    .await;
    settle_services(&world).await;
    let writes = world.api.stats.writes();
    let reads = world.api.stats.reads();
    world.reconcile_service(NS, "etcd-lb").await.unwrap();
    assert_eq!(
        world.api.stats.writes(),
        writes,
        "{:?}",
        &world.api.stats.log()[writes as usize..]
    );
    // The get in reconcile_service itself, then the list of our Services and of the slices.
    assert_eq!(world.api.stats.reads() - reads, 3);
    let reads = world.api.stats.reads();
    world.reconcile_service(NS, "plain").await.unwrap();
    assert_eq!(
        world.api.stats.reads() - reads,
        1,
        "only the test's own get"
    );
    assert_eq!(world.api.stats.writes(), writes);
}

#[tokio::test]
async fn dual_stack_ip_changes_and_hostnames() {
    let world = world(vec![lb_service(
        "api",
        json!([{"ip": "198.51.100.7"}, {"ip": "2001:db8::7"}]),
    )])
    .await;
    settle_services(&world).await;
    let first = slice(&world, "api-ext-ipv4").await.unwrap();
    assert_eq!(
        slices(&world, "api-ext")
            .await
            .keys()
            .cloned()
            .collect::<Vec<_>>(),
        vec!["api-ext-ipv4", "api-ext-ipv6"]
    );
    assert_eq!(
        slice(&world, "api-ext-ipv6").await.unwrap().address_type,
        "IPv6"
    );

    // The IP changes: the slice is updated in place, the IPv6 family goes.
    set_ingress(&world, "api", json!([{"ip": "198.51.100.99"}])).await;
    settle_services(&world).await;
    let updated = slice(&world, "api-ext-ipv4").await.unwrap();
    assert_eq!(updated.uid(), first.uid(), "updated in place");
    assert_eq!(updated.endpoints[0].addresses, vec!["198.51.100.99"]);
    assert!(slice(&world, "api-ext-ipv6").await.is_none());

    // A hostname-only ingress becomes an ExternalName Service, without slices.
    set_ingress(
        &world,
        "api",
        json!([{"hostname": "lb-123.elb.example.com"}]),
    )
    .await;
    settle_services(&world).await;
    let ext = service(&world, "api-ext").await.unwrap().spec.unwrap();
    assert_eq!(ext.type_.as_deref(), Some("ExternalName"));
    assert_eq!(ext.external_name.as_deref(), Some("lb-123.elb.example.com"));
    assert!(slices(&world, "api-ext").await.is_empty());
}

#[tokio::test]
async fn losing_addresses_opting_out_and_changing_type_withdraw_the_endpoint() {
    let world = world(vec![
        lb_service("a", json!([{"ip": "198.51.100.1"}])),
        lb_service("b", json!([{"ip": "198.51.100.2"}])),
        lb_service("c", json!([{"ip": "198.51.100.3"}])),
    ])
    .await;
    settle_services(&world).await;
    for s in ["a-ext", "b-ext", "c-ext"] {
        assert!(service(&world, s).await.is_some(), "{s}");
    }
    set_ingress(&world, "a", json!([])).await;
    merge_patch::<Service>(
        &world,
        "b",
        json!({"metadata": {"annotations": {"loadbalancer.cluster.x-k8s.io/external-endpoint": "false"}}}),
    )
    .await;
    merge_patch::<Service>(&world, "c", json!({"spec": {"type": "ClusterIP"}})).await;
    settle_services(&world).await;
    for (source, ext) in [("a", "a-ext"), ("b", "b-ext"), ("c", "c-ext")] {
        assert!(service(&world, ext).await.is_none(), "{ext}");
        assert!(slices(&world, ext).await.is_empty(), "{ext}");
        assert!(
            !annotations(&world, source).await.contains_key(DNS),
            "{source}"
        );
    }
    assert!(event_reasons(&world).contains(&"ExternalEndpointWithdrawn".to_string()));
}

#[tokio::test]
async fn a_custom_suffix_moves_the_endpoint_and_a_bad_one_changes_nothing() {
    let world = world(vec![lb_service("etcd", json!([{"ip": "198.51.100.7"}]))]).await;
    settle_services(&world).await;
    merge_patch::<Service>(
        &world,
        "etcd",
        json!({"metadata": {"annotations": {"loadbalancer.cluster.x-k8s.io/external-endpoint-suffix": "-public"}}}),
    )
    .await;
    settle_services(&world).await;
    assert!(service(&world, "etcd-ext").await.is_none());
    assert!(service(&world, "etcd-public").await.is_some());
    assert_eq!(
        annotations(&world, "etcd").await[DNS],
        "etcd-public.default.svc.cluster.local"
    );

    merge_patch::<Service>(
        &world,
        "etcd",
        json!({"metadata": {"annotations": {"loadbalancer.cluster.x-k8s.io/external-endpoint-suffix": "_Bad"}}}),
    )
    .await;
    let writes = world.api.stats.writes_excluding_events();
    settle_services(&world).await;
    settle_services(&world).await;
    assert_eq!(
        world.api.stats.writes_excluding_events(),
        writes,
        "nothing changed"
    );
    assert!(
        service(&world, "etcd-public").await.is_some(),
        "left as it was"
    );
    let invalid: Vec<_> = world
        .ctx
        .events
        .timeline()
        .into_iter()
        .filter(|e| e.reason == "InvalidExternalEndpoint")
        .collect();
    assert_eq!(invalid.len(), 1, "reported once: {invalid:?}");
    assert!(invalid[0].warning);
    let outcome = world.reconcile_service(NS, "etcd").await.unwrap();
    assert!(
        outcome.until_changed,
        "waits for a change, no resync: {outcome:?}"
    );
}

#[tokio::test]
async fn a_name_that_does_not_fit_is_reported_and_nothing_is_created() {
    let long = "a".repeat(60);
    let world = world(vec![lb_service(&long, json!([{"ip": "198.51.100.7"}]))]).await;
    settle_services(&world).await;
    assert!(
        services(&world)
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len()
            == 1
    );
    let timeline = world.ctx.events.timeline();
    let e = timeline
        .iter()
        .find(|e| e.reason == "InvalidExternalEndpoint")
        .unwrap();
    assert!(e.message.contains("63"), "{}", e.message);
}

#[tokio::test]
async fn a_hand_made_ext_service_is_left_alone_and_reported_once() {
    let manual = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "etcd-lb-ext", "namespace": NS},
        "spec": {"clusterIP": "None", "ports": [{"port": 2379}]},
    });
    let world = world(vec![
        lb_service("etcd-lb", json!([{"ip": "198.51.100.7"}])),
        manual,
    ])
    .await;
    settle_services(&world).await;
    let before = service(&world, "etcd-lb-ext").await.unwrap();
    settle_services(&world).await;
    let after = service(&world, "etcd-lb-ext").await.unwrap();
    assert_eq!(after.resource_version(), before.resource_version());
    assert!(slices(&world, "etcd-lb-ext").await.is_empty());
    let conflicts = world
        .ctx
        .events
        .timeline()
        .into_iter()
        .filter(|e| e.reason == "ExternalEndpointConflict")
        .count();
    assert_eq!(conflicts, 1);
    assert!(!annotations(&world, "etcd-lb").await.contains_key(DNS));

    // Deleting the source never deletes the hand-made Service either.
    services(&world)
        .delete("etcd-lb", &DeleteParams::default())
        .await
        .unwrap();
    settle_services(&world).await;
    assert!(service(&world, "etcd-lb-ext").await.is_some());
}

#[tokio::test]
async fn the_source_being_deleted_removes_the_ext_objects() {
    let world = world(vec![lb_service("etcd-lb", json!([{"ip": "198.51.100.7"}]))]).await;
    settle_services(&world).await;
    services(&world)
        .delete("etcd-lb", &DeleteParams::default())
        .await
        .unwrap();
    // The in-memory API has no garbage collector: the orphan check does its work.
    settle_services(&world).await;
    assert!(service(&world, "etcd-lb-ext").await.is_none());
    assert!(slices(&world, "etcd-lb-ext").await.is_empty());

    // A source recreated under the same name (another UID) gets fresh objects; stale ones of the old
    // incarnation would be removed first.
    let recreated: Service =
        serde_json::from_value(lb_service("etcd-lb", json!([{"ip": "198.51.100.8"}]))).unwrap();
    services(&world)
        .create(&PostParams::default(), &recreated)
        .await
        .unwrap();
    settle_services(&world).await;
    assert_eq!(
        slices(&world, "etcd-lb-ext").await["etcd-lb-ext-ipv4"],
        vec!["198.51.100.8"]
    );
}

#[tokio::test]
async fn annotated_only_policy_publishes_only_opted_in_services() {
    let mut opted_in = lb_service("in", json!([{"ip": "198.51.100.1"}]));
    opted_in["metadata"]["annotations"] =
        json!({"loadbalancer.cluster.x-k8s.io/external-endpoint": "true"});
    let world = world(vec![
        opted_in,
        lb_service("quiet", json!([{"ip": "198.51.100.2"}])),
    ])
    .await
    .reconfigured(|c| c.external.policy = Policy::Annotated);
    settle_services(&world).await;
    assert!(service(&world, "in-ext").await.is_some());
    assert!(service(&world, "quiet-ext").await.is_none());
}

fn kube_dc_objects(source: &str, ip: &str) -> Vec<Value> {
    let labels = json!({
        "kube-dc.com/managed-by": "service-lb-controller",
        "kube-dc.com/source-service": source,
        "kube-dc.com/endpoint-type": "external",
    });
    let owner = json!([{"apiVersion": "v1", "kind": "Service", "name": source,
        "uid": format!("uid-{source}"), "controller": true, "blockOwnerDeletion": true}]);
    vec![
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": format!("{source}-ext"), "namespace": NS, "labels": labels,
                         "ownerReferences": owner},
            "spec": {"clusterIP": "None", "ports": [{"name": "etcd", "port": 2379, "protocol": "TCP"}]},
        }),
        json!({
            "apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": format!("{source}-ext"), "namespace": NS, "labels": labels},
            "subsets": [{"addresses": [{"ip": ip}], "ports": [{"name": "etcd", "port": 2379, "protocol": "TCP"}]}],
        }),
    ]
}

#[tokio::test]
async fn kube_dc_objects_are_a_conflict_unless_adoption_is_enabled() {
    let mut objects = vec![lb_service("etcd-lb", json!([{"ip": "198.51.100.7"}]))];
    objects.extend(kube_dc_objects("etcd-lb", "198.51.100.7"));
    let world = world(objects).await;
    settle_services(&world).await;
    // Even though kube-dc's Service is controlled by the same source Service, it is not ours.
    assert!(event_reasons(&world).contains(&"ExternalEndpointConflict".to_string()));
    let ext = service(&world, "etcd-lb-ext").await.unwrap();
    assert!(ext.labels().contains_key("kube-dc.com/managed-by"));

    let adopting = world.reconfigured(|c| c.external.adopt_kube_dc = true);
    settle_services(&adopting).await;
    let ext = service(&adopting, "etcd-lb-ext").await.unwrap();
    assert!(
        !ext.labels().contains_key("kube-dc.com/managed-by"),
        "{:?}",
        ext.labels()
    );
    assert_eq!(
        ext.labels()["loadbalancer.cluster.x-k8s.io/managed-by"],
        "capi-lb"
    );
    assert_eq!(
        slices(&adopting, "etcd-lb-ext").await["etcd-lb-ext-ipv4"],
        vec!["198.51.100.7"]
    );
    // kube-dc's Endpoints are replaced by the EndpointSlices (legacy Endpoints are off).
    let endpoints: Api<Endpoints> = Api::namespaced(adopting.client(), NS);
    assert!(endpoints.get_opt("etcd-lb-ext").await.unwrap().is_none());
    assert!(event_reasons(&adopting).contains(&"ExternalEndpointAdopted".to_string()));
    // And then it is steady.
    let writes = adopting.api.stats.writes_excluding_events();
    settle_services(&adopting).await;
    assert_eq!(adopting.api.stats.writes_excluding_events(), writes);
}

#[tokio::test]
async fn kube_dc_objects_of_another_source_are_never_adopted() {
    let mut objects = vec![lb_service("etcd-lb", json!([{"ip": "198.51.100.7"}]))];
    let mut foreign = kube_dc_objects("other", "198.51.100.9");
    foreign[0]["metadata"]["name"] = json!("etcd-lb-ext");
    objects.push(foreign.remove(0));
    let world = world(objects)
        .await
        .reconfigured(|c| c.external.adopt_kube_dc = true);
    settle_services(&world).await;
    let ext = service(&world, "etcd-lb-ext").await.unwrap();
    assert_eq!(ext.labels()["kube-dc.com/source-service"], "other");
    assert!(event_reasons(&world).contains(&"ExternalEndpointConflict".to_string()));
}

#[tokio::test]
async fn legacy_endpoints_follow_the_slices_and_go_when_turned_off() {
    let world = world(vec![lb_service(
        "etcd-lb",
        json!([{"ip": "198.51.100.7"}, {"ip": "2001:db8::7"}]),
    )])
    .await
    .reconfigured(|c| c.external.legacy_endpoints = true);
    settle_services(&world).await;
    let endpoints: Api<Endpoints> = Api::namespaced(world.client(), NS);
    let e = endpoints.get("etcd-lb-ext").await.unwrap();
    assert_eq!(
        e.labels()["endpointslice.kubernetes.io/skip-mirror"],
        "true"
    );
    assert_eq!(e.owner_references()[0].name, "etcd-lb-ext");
    let ips: Vec<String> = e.subsets.unwrap()[0]
        .addresses
        .clone()
        .unwrap()
        .into_iter()
        .map(|a| a.ip)
        .collect();
    assert_eq!(ips, vec!["198.51.100.7", "2001:db8::7"]);
    set_ingress(&world, "etcd-lb", json!([{"ip": "198.51.100.8"}])).await;
    settle_services(&world).await;
    let e = endpoints.get("etcd-lb-ext").await.unwrap();
    assert_eq!(
        e.subsets.unwrap()[0].addresses.clone().unwrap()[0].ip,
        "198.51.100.8"
    );
    let writes = world.api.stats.writes_excluding_events();
    settle_services(&world).await;
    assert_eq!(world.api.stats.writes_excluding_events(), writes, "steady");

    let off = world.reconfigured(|c| c.external.legacy_endpoints = false);
    settle_services(&off).await;
    assert!(endpoints.get_opt("etcd-lb-ext").await.unwrap().is_none());
    assert!(service(&off, "etcd-lb-ext").await.is_some());
}

/// kube-dc's own `-ext` publisher (simulated: it publishes every Service of type LoadBalancer and
/// overwrites whatever `<svc>-ext` exists) and capi-lb's never fight: whichever came first, the
/// name ends up kube-dc's, capi-lb withdraws its own slices from it once, says so once, naming the
/// setting for kube-dc clusters, and then neither writes again.
#[tokio::test]
async fn kube_dcs_publisher_and_capi_lbs_never_fight() {
    use capi_lb_tests::kubedc_sim::{KubeDcSim, project_namespace};
    for capi_lb_first in [true, false] {
        let world = World::with_builder(
            vec![
                project_namespace(NS),
                lb_service("etcd-lb", json!([{"ip": "198.51.100.7"}])),
            ],
            |b| b.with_resource::<capi_lb_api::kubedc::EIp>(),
        )
        .await
        .unwrap();
        let mut sim = KubeDcSim::new();
        sim.publish_ext = true;
        if capi_lb_first {
            settle_services(&world).await;
            assert_eq!(
                slices(&world, "etcd-lb-ext").await["etcd-lb-ext-ipv4"],
                vec!["198.51.100.7"],
                "capi-lb published first"
            );
        }
        let mut writes = Vec::new();
        for _ in 0..5 {
            sim.step(&world).await;
            settle_services(&world).await;
            writes.push((world.api.stats.writes_excluding_events(), sim.ext_writes));
        }
        // Steady after the first round: no write by either.
        assert!(
            writes.windows(2).skip(1).all(|w| w[0] == w[1]),
            "capi-lb first: {capi_lb_first}; (capi-lb's writes, kube-dc's writes) per round: {writes:?}"
        );
        let ext = service(&world, "etcd-lb-ext").await.unwrap();
        assert_eq!(
            ext.labels()
                .get("kube-dc.com/managed-by")
                .map(String::as_str),
            Some("service-lb-controller"),
            "{:?}",
            ext.labels()
        );
        // None of capi-lb's slices feed kube-dc's Service.
        assert!(
            slices(&world, "etcd-lb-ext").await.is_empty(),
            "capi-lb first: {capi_lb_first}"
        );
        let conflicts: Vec<String> = world
            .ctx
            .events
            .timeline()
            .into_iter()
            .filter(|e| e.reason == "ExternalEndpointConflict")
            .map(|e| e.message)
            .collect();
        assert_eq!(conflicts.len(), 1, "said once: {conflicts:?}");
        assert!(
            conflicts[0].contains("kube-dc's own -ext publisher")
                && conflicts[0].contains("--external-endpoints-policy=annotated"),
            "{conflicts:?}"
        );
    }
}
