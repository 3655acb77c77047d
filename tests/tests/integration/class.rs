//! capi-lb's Service load-balancer class: a Service of `type: LoadBalancer` with class
//! `loadbalancer.cluster.x-k8s.io/capi-lb` is realised through a LoadBalancer (named by the Service's
//! `load-balancer-ref` annotation; a LoadBalancer named like a Service does not realise it) whose ports are the
//! Service's and whose members are the Service's ready endpoints; the address goes into the Service's
//! ingress. Services of other classes are never touched.

use capi_lb::sim::world::World;
use capi_lb_tests::*;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

const CLASS: &str = "loadbalancer.cluster.x-k8s.io/capi-lb";

fn class_service(name: &str, class: Option<&str>, lb_ref: Option<&str>) -> Value {
    let mut s = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"type": "LoadBalancer", "selector": {"app": name},
                 "ports": [{"name": "kube-apiserver", "port": 6443, "targetPort": "https", "protocol": "TCP"}]},
    });
    if let Some(class) = class {
        s["spec"]["loadBalancerClass"] = json!(class);
    }
    if let Some(r) = lb_ref {
        s["metadata"]["annotations"] =
            json!({"loadbalancer.cluster.x-k8s.io/load-balancer-ref": r});
    }
    s
}

fn endpoint_slice(service: &str, endpoints: Value) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{service}-abcde"), "namespace": NS,
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "kube-apiserver", "port": 443, "protocol": "TCP"}],
        "endpoints": endpoints,
    })
}

fn ready(pod: &str, ip: &str) -> Value {
    json!({"addresses": [ip], "conditions": {"ready": true}, "targetRef": {"kind": "Pod", "name": pod}})
}

/// Reconcile the Services (binding the class's Services to their LoadBalancers), then every
/// LoadBalancer until nothing changes (at most 50 passes), then the Services again.
async fn settle_services_and_load_balancers(world: &World) {
    world.settle_services(10).await.unwrap();
    world.run_until_stable(50).await.unwrap();
    world.settle_services(10).await.unwrap();
}

/// The ServiceNotRealised Events published.
fn not_realised(world: &World) -> Vec<capi_lb::events::TimelineEntry> {
    world
        .ctx
        .events
        .timeline()
        .into_iter()
        .filter(|e| e.reason == "ServiceNotRealised")
        .collect()
}

fn members(world: &World) -> Vec<(String, String)> {
    world
        .cloud
        .load_balancers()
        .into_iter()
        .flat_map(|l| {
            l.members
                .into_iter()
                .map(|(n, m)| (n, format!("{}:{:?}", m.address, m.state)))
        })
        .collect()
}

#[tokio::test]
async fn a_service_of_the_class_is_realised_through_its_load_balancer() {
    let world = world(vec![
        class_service("tcp", Some(CLASS), Some("tenant-cp")),
        endpoint_slice(
            "tcp",
            json!([
                ready("tcp-pod-a", "10.244.0.5"),
                ready("tcp-pod-b", "10.244.0.6")
            ]),
        ),
        lb("tenant-cp")
            .annotation("loadbalancer.cluster.x-k8s.io/service", "tcp")
            .build(),
        infra("tenant-cp").build(),
    ])
    .await;
    settle_services_and_load_balancers(&world).await;
    let lb = get_lb(&world, "tenant-cp").await;
    assert_eq!(
        lb.annotations()["loadbalancer.cluster.x-k8s.io/service"],
        "tcp"
    );
    let status = lb.status.clone().unwrap();
    assert!(status.ready, "{status:#?}");
    assert_eq!(status.active_targets, vec!["tcp-pod-a", "tcp-pod-b"]);
    assert_eq!(
        status.target_kind.as_deref(),
        Some("EndpointSlice.discovery.k8s.io")
    );
    // Members at the resolved target port (named "https" -> 443 from the EndpointSlice).
    let cloud = world.cloud.load_balancers();
    assert_eq!(cloud[0].listeners[0].port, 6443);
    assert_eq!(cloud[0].listeners[0].target_port, 443);
    assert_eq!(members(&world).len(), 2);
    // The Service shows the provider's IP, and its stable name is the LoadBalancer's -ext.
    let svc = service(&world, "tcp").await.unwrap();
    let ingress = svc
        .status
        .clone()
        .unwrap()
        .load_balancer
        .unwrap()
        .ingress
        .unwrap();
    assert_eq!(ingress[0].ip.as_deref(), Some("203.0.113.1"));
    assert_eq!(
        svc.annotations()["loadbalancer.cluster.x-k8s.io/external-endpoint-dns-name"],
        "tenant-cp-ext.default.svc.cluster.local"
    );
    assert!(service(&world, "tenant-cp-ext").await.is_some());
    assert!(
        service(&world, "tcp-ext").await.is_none(),
        "one -ext per load balancer"
    );
    assert!(event_reasons(&world).contains(&"ServiceBound".to_string()));

    // Steady: nothing more written.
    let writes = world.api.stats.writes_excluding_events();
    settle_services_and_load_balancers(&world).await;
    assert_eq!(world.api.stats.writes_excluding_events(), writes);
}

#[tokio::test]
async fn members_follow_the_endpoints_and_terminating_ones_drain() {
    let world = world(vec![
        class_service("tcp", Some(CLASS), Some("tcp")),
        endpoint_slice(
            "tcp",
            json!([ready("pod-a", "10.244.0.5"), ready("pod-b", "10.244.0.6")]),
        ),
        lb("tcp")
            .annotation("loadbalancer.cluster.x-k8s.io/service", "tcp")
            .build(),
        infra("tcp").build(),
    ])
    .await;
    settle_services_and_load_balancers(&world).await;
    assert_eq!(
        members(&world).len(),
        2,
        "the default LoadBalancer: the Service's name"
    );
    let slices: Api<EndpointSlice> = Api::namespaced(world.client(), NS);
    slices
        .patch(
            "tcp-abcde",
            &PatchParams::default(),
            &Patch::Merge(json!({"endpoints": [
                ready("pod-a", "10.244.0.5"),
                {"addresses": ["10.244.0.6"], "conditions": {"ready": false, "serving": true, "terminating": true},
                 "targetRef": {"kind": "Pod", "name": "pod-b"}},
                ready("pod-c", "10.244.0.7"),
            ]})),
        )
        .await
        .unwrap();
    world.reconcile(NS, "tcp").await.unwrap();
    let m = members(&world);
    assert!(
        m.contains(&("pod-b".into(), "10.244.0.6:Draining".into())),
        "{m:?}"
    );
    assert!(
        m.contains(&("pod-c".into(), "10.244.0.7:Active".into())),
        "{m:?}"
    );
    slices
        .patch(
            "tcp-abcde",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"endpoints": [ready("pod-a", "10.244.0.5"), ready("pod-c", "10.244.0.7")]}),
            ),
        )
        .await
        .unwrap();
    world.reconcile(NS, "tcp").await.unwrap();
    let names: Vec<String> = members(&world).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, vec!["pod-a", "pod-c"]);
}

/// Consent of the Service: a LoadBalancer named like a Service that names no LoadBalancer (whoever
/// may create LoadBalancers in the namespace can make one) does not realise it: no binding, no
/// ingress written, and the Service is told to name its LoadBalancer.
#[tokio::test]
async fn a_load_balancer_named_like_a_service_does_not_claim_it() {
    let world = world(vec![
        class_service("web", Some(CLASS), None),
        endpoint_slice("web", json!([ready("pod-a", "10.244.0.5")])),
        lb("web").build(),
        infra("web").build(),
    ])
    .await;
    settle_services_and_load_balancers(&world).await;
    settle_services_and_load_balancers(&world).await;
    let lb = get_lb(&world, "web").await;
    assert!(
        !lb.annotations()
            .contains_key("loadbalancer.cluster.x-k8s.io/service"),
        "bound by name alone"
    );
    let web = service(&world, "web").await.unwrap();
    assert!(ingress_ips(&web).is_empty(), "{:?}", web.status);
    assert!(
        members(&world).is_empty(),
        "the Service's pods became members"
    );
    let reported = not_realised(&world);
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert!(
        reported[0].message.contains("names no LoadBalancer"),
        "{reported:?}"
    );
}

#[tokio::test]
async fn other_classes_are_never_touched_and_a_missing_load_balancer_is_reported_once() {
    let world = world(vec![
        class_service("other", Some("example.com/other"), Some("cp")),
        class_service("missing", Some(CLASS), Some("nowhere")),
        lb("cp").build(),
        infra("cp").build(),
    ])
    .await;
    settle_services_and_load_balancers(&world).await;
    settle_services_and_load_balancers(&world).await;
    let cp = get_lb(&world, "cp").await;
    assert!(
        !cp.annotations()
            .contains_key("loadbalancer.cluster.x-k8s.io/service")
    );
    let other = service(&world, "other").await.unwrap();
    assert!(
        other
            .status
            .and_then(|s| s.load_balancer)
            .and_then(|l| l.ingress)
            .is_none_or(|i| i.is_empty()),
        "another class's Service gets no ingress from capi-lb"
    );
    let reported = not_realised(&world);
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert!(reported[0].message.contains("nowhere"));
}

#[tokio::test]
async fn a_hostname_only_provider_gives_a_hostname_ingress() {
    let world = world(vec![
        class_service("tcp", Some(CLASS), Some("tcp")),
        endpoint_slice("tcp", json!([ready("pod-a", "10.244.0.5")])),
        lb("tcp")
            .annotation("loadbalancer.cluster.x-k8s.io/service", "tcp")
            .build(),
        infra("tcp")
            .spec("addressPools", json!([]))
            .spec("hostname", json!("lb.example.com"))
            .build(),
    ])
    .await;
    settle_services_and_load_balancers(&world).await;
    let svc: Service = Api::namespaced(world.client(), NS)
        .get("tcp")
        .await
        .unwrap();
    let ingress = svc.status.unwrap().load_balancer.unwrap().ingress.unwrap();
    assert_eq!(ingress[0].hostname.as_deref(), Some("lb.example.com"));
    assert!(ingress[0].ip.is_none());
}

#[tokio::test]
async fn a_service_takes_a_load_balancer_of_machines_only_when_its_author_names_it_then_the_machines_go()
 {
    let world = world(vec![
        lb("cp").build(),
        infra("cp").build(),
        machine("cp-m1", "cp", "10.0.0.11").build(),
    ])
    .await;
    settle_services_and_load_balancers(&world).await;
    let machines: Api<capi_lb_api::capi::Machine> = Api::namespaced(world.client(), NS);
    let has_ours = |m: &capi_lb_api::capi::Machine| {
        m.annotations()
            .keys()
            .any(|k| k.contains("loadbalancer.cluster.x-k8s.io") || k.contains("capi-lb-"))
    };
    assert!(
        has_ours(&machines.get("cp-m1").await.unwrap()),
        "a member with hooks"
    );
    let svc: Service =
        serde_json::from_value(class_service("tcp", Some(CLASS), Some("cp"))).unwrap();
    Api::<Service>::namespaced(world.client(), NS)
        .create(&Default::default(), &svc)
        .await
        .unwrap();
    let slice: EndpointSlice =
        serde_json::from_value(endpoint_slice("tcp", json!([ready("pod-a", "10.244.0.5")])))
            .unwrap();
    Api::<EndpointSlice>::namespaced(world.client(), NS)
        .create(&Default::default(), &slice)
        .await
        .unwrap();
    settle_services_and_load_balancers(&world).await;
    // The Service alone does not take a LoadBalancer whose default selector picks Machines: they
    // keep their state and hooks, and the Service is told why.
    assert!(
        has_ours(&machines.get("cp-m1").await.unwrap()),
        "a Service took the LoadBalancer over without its author's consent"
    );
    assert!(event_reasons(&world).contains(&"ServiceNotRealised".to_string()));
    let names: Vec<String> = members(&world).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, vec!["cp-m1"]);
    // Its author names the Service: now it realises it, and lets go of its Machines.
    merge_patch::<capi_lb_api::LoadBalancer>(
        &world,
        "cp",
        json!({"metadata": {"annotations": {"loadbalancer.cluster.x-k8s.io/service": "tcp"}}}),
    )
    .await;
    settle_services_and_load_balancers(&world).await;
    let m1 = machines.get("cp-m1").await.unwrap();
    assert!(
        !has_ours(&m1),
        "annotations and hooks left on the Machine: {:?}",
        m1.annotations()
    );
    let names: Vec<String> = members(&world).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, vec!["pod-a"]);
}

#[tokio::test]
async fn a_service_moves_only_when_the_load_balancer_names_it_and_deleting_it_clears_the_ingress() {
    let world = world(vec![
        class_service("tcp", Some(CLASS), Some("cp")),
        endpoint_slice("tcp", json!([ready("pod-a", "10.244.0.5")])),
        lb("cp")
            .annotation("loadbalancer.cluster.x-k8s.io/service", "tcp")
            .build(),
        infra("cp").build(),
    ])
    .await;
    settle_services_and_load_balancers(&world).await;
    let services: Api<Service> = Api::namespaced(world.client(), NS);
    // The Service moves to another LoadBalancer; "cp" keeps the old binding annotation, which must
    // not make it look taken.
    services
        .patch(
            "tcp",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"loadbalancer.cluster.x-k8s.io/load-balancer-ref": "cp2"}}})),
        )
        .await
        .unwrap();
    let svc2: Service =
        serde_json::from_value(class_service("other", Some(CLASS), Some("cp"))).unwrap();
    services.create(&Default::default(), &svc2).await.unwrap();
    settle_services_and_load_balancers(&world).await;
    // Not realised while the LoadBalancer still names "tcp" (its author's choice, which capi-lb
    // never rewrites); realised once its author names "other".
    assert!(event_reasons(&world).contains(&"ServiceNotRealised".to_string()));
    merge_patch::<capi_lb_api::LoadBalancer>(
        &world,
        "cp",
        json!({"metadata": {"annotations": {"loadbalancer.cluster.x-k8s.io/service": "other"}}}),
    )
    .await;
    settle_services_and_load_balancers(&world).await;
    let other = services.get("other").await.unwrap();
    assert!(!ingress_ips(&other).is_empty(), "{:?}", other.status);
    // Deleting the LoadBalancer leaves its Service without a stale address.
    Api::<capi_lb_api::LoadBalancer>::namespaced(world.client(), NS)
        .delete("cp", &Default::default())
        .await
        .unwrap();
    world.run_until_stable(50).await.unwrap();
    let other = services.get("other").await.unwrap();
    let ingress = other
        .status
        .clone()
        .and_then(|s| s.load_balancer)
        .and_then(|l| l.ingress);
    assert!(ingress.as_ref().is_none_or(|i| i.is_empty()), "{ingress:?}");
    assert!(
        !other
            .annotations()
            .contains_key("loadbalancer.cluster.x-k8s.io/external-endpoint-dns-name")
    );
}

fn ingress_ips(svc: &Service) -> Vec<String> {
    svc.status
        .clone()
        .and_then(|s| s.load_balancer)
        .and_then(|l| l.ingress)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|i| i.ip)
        .collect()
}

#[tokio::test]
async fn a_provider_swap_moves_the_service_ingress_once_the_new_load_balancer_is_ready() {
    let world = world(vec![
        class_service("tcp", Some(CLASS), Some("cp")),
        endpoint_slice("tcp", json!([ready("pod-a", "10.244.0.5")])),
        lb("cp")
            .spec("drainSeconds", json!(30))
            .annotation("loadbalancer.cluster.x-k8s.io/service", "tcp")
            .build(),
        infra("cp").build(),
        infra("cp-new")
            .spec("addressPools", json!(["198.51.100.0/24"]))
            .spec("provisioningDelaySeconds", json!(20))
            .build(),
    ])
    .await;
    settle_services_and_load_balancers(&world).await;
    let before = service(&world, "tcp").await.unwrap();
    assert_eq!(ingress_ips(&before), vec!["203.0.113.1"]);

    Api::<capi_lb_api::LoadBalancer>::namespaced(world.client(), NS)
        .patch(
            "cp",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"infrastructureRef": {"name": "cp-new"}}})),
        )
        .await
        .unwrap();
    // While the new load balancer provisions, the Service keeps the old, serving address.
    world.reconcile(NS, "cp").await.unwrap();
    world.settle_services(10).await.unwrap();
    assert_eq!(world.cloud.load_balancers().len(), 2);
    assert_eq!(
        ingress_ips(&service(&world, "tcp").await.unwrap()),
        vec!["203.0.113.1"]
    );

    // Once it serves, the ingress moves; the stable name stays; the old one is deleted after the
    // drain.
    settle_services_and_load_balancers(&world).await;
    let after = service(&world, "tcp").await.unwrap();
    assert_eq!(ingress_ips(&after), vec!["198.51.100.1"]);
    let dns = "loadbalancer.cluster.x-k8s.io/external-endpoint-dns-name";
    assert_eq!(after.annotations()[dns], before.annotations()[dns]);
    let cloud = world.cloud.load_balancers();
    assert_eq!(cloud.len(), 1);
    assert_eq!(cloud[0].addresses[0].address, "198.51.100.1");
    assert_eq!(members(&world).len(), 1);
}

/// A Service of capi-lb's class cannot take over a LoadBalancer that has Machines of its own (a
/// control-plane one): it is not bound, the Service says why with a Warning Event, and the
/// LoadBalancer keeps its targets and ports. The LoadBalancer's own source ranges bound a Service's.
#[tokio::test]
async fn a_service_never_takes_over_a_control_plane_load_balancer_and_never_widens_its_sources() {
    let mut cp_machine = machine("cp-1", "unrelated", "10.0.0.11").build();
    cp_machine["metadata"]["labels"] =
        json!({"cluster.x-k8s.io/cluster-name": "demo", "cluster.x-k8s.io/control-plane": ""});
    let mut bounded = class_service("web", Some(CLASS), Some("web-lb"));
    bounded["spec"]["loadBalancerSourceRanges"] = json!(["0.0.0.0/0", "10.1.0.0/16"]);
    let world = world(vec![
        cluster_naming("demo", false, "cp"),
        // Naming the control-plane LoadBalancer.
        class_service("cp", Some(CLASS), Some("cp")),
        endpoint_slice("cp", json!([ready("intruder", "10.244.9.9")])),
        lb("cp").spec("controlPlane", json!({})).build(),
        infra("cp").build(),
        cp_machine,
        bounded,
        endpoint_slice("web", json!([ready("web-a", "10.244.0.5")])),
        lb("web-lb")
            .spec("sourceRanges", json!(["10.0.0.0/8"]))
            .annotation("loadbalancer.cluster.x-k8s.io/service", "web")
            .build(),
        infra("web-lb").build(),
    ])
    .await;
    settle_services_and_load_balancers(&world).await;
    let cp = get_lb(&world, "cp").await;
    assert!(
        !cp.annotations()
            .contains_key("loadbalancer.cluster.x-k8s.io/service"),
        "the control-plane LoadBalancer was bound: {:?}",
        cp.annotations()
    );
    let status = cp.status.unwrap();
    assert_eq!(status.targets, vec!["cp-1"]);
    assert_eq!(
        status.target_kind.as_deref(),
        Some("Machine.cluster.x-k8s.io")
    );
    assert!(event_reasons(&world).contains(&"ServiceNotRealised".to_string()));
    // The Service that names a LoadBalancer without targets of its own is realised, within the
    // LoadBalancer's ranges: 0.0.0.0/0 is cut to 10.0.0.0/8, 10.1.0.0/16 stays.
    let web = get_lb(&world, "web-lb").await;
    assert_eq!(
        web.annotations()["loadbalancer.cluster.x-k8s.io/service"],
        "web"
    );
    let cloud = world.cloud.load_balancers();
    let ranges = cloud
        .iter()
        .find(|l| l.members.contains_key("web-a"))
        .map(|l| l.source_ranges.clone())
        .unwrap();
    assert_eq!(ranges, vec!["10.0.0.0/8", "10.1.0.0/16"]);
}
