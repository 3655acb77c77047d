//! DNS publication through ExternalDNS, object logic: the real reconciler against the in-memory API
//! with ExternalDNS's `DNSEndpoint` kind served (ExternalDNS itself is played by the test, which
//! writes `status.observedGeneration` as ExternalDNS does).

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
    // From then on a reconcile does not look at DNSEndpoints at all.
    let before = world.api.stats.requests().len();
    world.reconcile(NS, "cp").await.unwrap();
    let dns_requests: Vec<_> = world.api.stats.requests()[before..]
        .iter()
        .filter(|r| r.path.contains("dnsendpoints"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(dns_requests.is_empty(), "{dns_requests:?}");
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

// --- Services of type LoadBalancer ---------------------------------------------------------------

const HOSTNAMES: &str = "loadbalancer.cluster.x-k8s.io/hostnames";
const MARKER: &str = "loadbalancer.cluster.x-k8s.io/dns-endpoint";

fn lb_service(
    name: &str,
    annotations: serde_json::Value,
    ingress: serde_json::Value,
) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "metallb.io/x",
                 "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]},
        "status": {"loadBalancer": {"ingress": ingress}},
    })
}

async fn service(world: &World, name: &str) -> k8s_openapi::api::core::v1::Service {
    Api::<k8s_openapi::api::core::v1::Service>::namespaced(world.client(), NS)
        .get(name)
        .await
        .unwrap()
}

fn reasons(world: &World) -> Vec<(String, bool)> {
    world
        .ctx
        .events
        .timeline()
        .into_iter()
        .map(|e| (e.reason, e.warning))
        .collect()
}

/// A Service of another implementation's class with the hostnames annotation: a DNSEndpoint named
/// like its `-ext` endpoint, owned by it, following its ingress, the name written onto the Service;
/// ExternalDNS taking it is told once; the annotation removed, it goes.
#[tokio::test]
async fn a_services_hostnames_follow_its_ingress_and_go_with_the_annotation() {
    let world = dns_world(vec![lb_service(
        "web",
        json!({HOSTNAMES: "www.example.com, Web.Example.com.", "loadbalancer.cluster.x-k8s.io/dns-ttl": "120"}),
        json!([{"ip": "198.51.100.7"}, {"ip": "2001:db8::7"}]),
    )])
    .await;
    world.settle_services(10).await.unwrap();
    let published = endpoint(&world, "web-ext").await.expect("a DNSEndpoint");
    assert_eq!(
        records(&published),
        [
            (
                "www.example.com".into(),
                "A".into(),
                vec!["198.51.100.7".into()]
            ),
            (
                "www.example.com".into(),
                "AAAA".into(),
                vec!["2001:db8::7".into()]
            ),
            (
                "web.example.com".into(),
                "A".into(),
                vec!["198.51.100.7".into()]
            ),
            (
                "web.example.com".into(),
                "AAAA".into(),
                vec!["2001:db8::7".into()]
            ),
        ]
    );
    assert_eq!(published.spec.endpoints[0].record_ttl, Some(120));
    let svc = service(&world, "web").await;
    assert_eq!(published.owner_references()[0].uid, svc.uid().unwrap());
    assert_eq!(svc.annotations()[MARKER], "web-ext");
    assert!(reasons(&world).contains(&("DNSEndpointChanged".into(), false)));

    // Converged: nothing is written again.
    let writes = world.api.stats.writes_excluding_events();
    world.settle_services(10).await.unwrap();
    assert_eq!(world.api.stats.writes_excluding_events(), writes);

    // ExternalDNS takes it: told once.
    observe(&world, "web-ext").await;
    world.reconcile_service(NS, "web").await.unwrap();
    world.reconcile_service(NS, "web").await.unwrap();
    let observed = reasons(&world)
        .iter()
        .filter(|r| r.0 == "RecordsObserved")
        .count();
    assert_eq!(observed, 1);
    // A restarted controller finds it observed: no Event, no write.
    let restarted = world.restart();
    let writes = world.api.stats.writes();
    restarted.settle_services(10).await.unwrap();
    assert_eq!(
        restarted.api.stats.writes(),
        writes,
        "{:?}",
        reasons(&restarted)
    );

    // The ingress changes: the records follow in place.
    Api::<k8s_openapi::api::core::v1::Service>::namespaced(world.client(), NS)
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"loadBalancer": {"ingress": [{"hostname": "web.lb.example.net"}]}}})),
        )
        .await
        .unwrap();
    world.settle_services(10).await.unwrap();
    let moved = endpoint(&world, "web-ext").await.unwrap();
    assert_eq!(moved.uid(), published.uid());
    assert_eq!(
        records(&moved)[0],
        (
            "www.example.com".into(),
            "CNAME".into(),
            vec!["web.lb.example.net".into()]
        )
    );

    // The annotation goes: so do the DNSEndpoint and the marker.
    merge_patch::<k8s_openapi::api::core::v1::Service>(
        &world,
        "web",
        json!({"metadata": {"annotations": {HOSTNAMES: null}}}),
    )
    .await;
    world.settle_services(10).await.unwrap();
    assert!(endpoint(&world, "web-ext").await.is_none());
    assert!(
        !service(&world, "web")
            .await
            .annotations()
            .contains_key(MARKER)
    );
}

/// A Service that stops being of type LoadBalancer (annotation kept) loses its DNSEndpoint; bad
/// annotations are reported once and change nothing; a Service without the annotation costs no
/// DNSEndpoint call.
#[tokio::test]
async fn bad_annotations_are_reported_and_a_service_leaving_the_type_loses_its_names() {
    let world = dns_world(vec![
        lb_service(
            "ttl",
            json!({HOSTNAMES: "ttl.example.com", "loadbalancer.cluster.x-k8s.io/dns-ttl": "soon"}),
            json!([{"ip": "198.51.100.8"}]),
        ),
        lb_service(
            "bad",
            json!({HOSTNAMES: "UNDER_score.example.com"}),
            json!([{"ip": "198.51.100.9"}]),
        ),
        lb_service(
            "kept",
            json!({HOSTNAMES: "kept.example.com"}),
            json!([{"ip": "198.51.100.10"}]),
        ),
        lb_service("plain", json!({}), json!([{"ip": "198.51.100.11"}])),
    ])
    .await;
    world.settle_services(10).await.unwrap();
    world.settle_services(10).await.unwrap();
    assert!(endpoint(&world, "ttl-ext").await.is_none());
    assert!(endpoint(&world, "bad-ext").await.is_none());
    assert!(endpoint(&world, "plain-ext").await.is_none());
    let warnings: Vec<_> = world
        .ctx
        .events
        .timeline()
        .into_iter()
        .filter(|e| e.reason == "InvalidHostname")
        .collect();
    assert_eq!(warnings.len(), 2, "each reported once: {warnings:?}");
    assert!(warnings.iter().all(|w| w.warning));
    assert!(warnings.iter().any(|w| w.message.contains("dns-ttl")));
    assert!(
        warnings
            .iter()
            .any(|w| w.message.contains("under_score.example.com"))
    );

    assert!(endpoint(&world, "kept-ext").await.is_some());
    merge_patch::<k8s_openapi::api::core::v1::Service>(
        &world,
        "kept",
        json!({"spec": {"type": "ClusterIP", "loadBalancerClass": null}}),
    )
    .await;
    world.settle_services(10).await.unwrap();
    assert!(endpoint(&world, "kept-ext").await.is_none());
    assert!(
        !service(&world, "kept")
            .await
            .annotations()
            .contains_key(MARKER)
    );
}

/// A Service of capi-lb's class: its DNSEndpoint has the address of the LoadBalancer realising it;
/// a name the LoadBalancer itself publishes first stays the LoadBalancer's (reported on the Service
/// once).
#[tokio::test]
async fn a_service_of_capi_lbs_class_publishes_the_realising_load_balancers_address() {
    let world = dns_world(vec![
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "tcp", "namespace": NS,
                         "annotations": {"loadbalancer.cluster.x-k8s.io/load-balancer-ref": "tenant",
                                         HOSTNAMES: "tcp.example.com,api.example.com"}},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": "loadbalancer.cluster.x-k8s.io/capi-lb",
                     "ports": [{"name": "https", "port": 6443, "targetPort": 6443, "protocol": "TCP"}]},
        }),
        lb("tenant")
            .spec("dns", json!({"hostnames": ["api.example.com"]}))
            .annotation("loadbalancer.cluster.x-k8s.io/service", "tcp")
            .build(),
        infra("tenant").build(),
    ])
    .await;
    world.run_until_stable(30).await.unwrap();
    world.settle_services(10).await.unwrap();
    world.run_until_stable(30).await.unwrap();
    world.settle_services(10).await.unwrap();
    let address = get_lb(&world, "tenant").await.status.unwrap().addresses[0]
        .address
        .clone();
    let published = endpoint(&world, "tcp-ext")
        .await
        .expect("the Service's DNSEndpoint");
    assert_eq!(
        records(&published),
        [("tcp.example.com".into(), "A".into(), vec![address.clone()])],
        "api.example.com is the LoadBalancer's"
    );
    assert_eq!(
        records(&endpoint(&world, "tenant").await.unwrap()),
        [("api.example.com".into(), "A".into(), vec![address])]
    );
    let conflicts = reasons(&world)
        .into_iter()
        .filter(|r| r.0 == "HostnameConflict")
        .count();
    assert_eq!(conflicts, 1, "{:?}", reasons(&world));
}
