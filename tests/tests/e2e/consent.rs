//! Isolation by construction on a real apiserver, tried as a tenant would:
//!
//! - **The default selector's Machines are the LoadBalancer's own.** A control-plane LoadBalancer
//!   with `spec.clusterName` and no selector (the shape of the examples and flavors), its two
//!   Machines active with capi-lb's hooks; then a Service of capi-lb's class annotated with the
//!   LoadBalancer's name. The Service is not realised (a Warning Event `ServiceNotRealised`, no
//!   ingress), and both Machines keep their state and hooks. (Before: both lost them within a
//!   second, undrained, and the Service got the load balancer's address.)
//! - **Deletion hooks need the Cluster's consent.** A LoadBalancer of a Cluster that does not
//!   name it balances its Machines but holds none of their deletions; once the Cluster names it,
//!   hooks go on; when it stops, they are released.
//! - **An IPv4-mapped IPv6 address is the address it maps.** The DNS provider publishes its
//!   Machines' addresses (which whoever writes a Machine's status chooses): Machines reporting
//!   `::ffff:169.254.169.254` and `::ffff:127.0.0.1` publish nothing on any destination (no
//!   `-ext` address, no record in BIND, not the Cluster's endpoint, not `status`) with publication
//!   on and off, while a Machine with an ordinary address is published. (Every other destination,
//!   a Service's ingress included, with a provider answering mapped forms:
//!   `tests/tests/integration/isolation.rs`.)

use std::time::Duration;

use capi_lb_api::LoadBalancer;
use capi_lb_api::capi::Machine;
use capi_lb_api::target::TargetKeys;
use capi_lb_tests::k8s::{
    TestNs, capi_api, capi_cluster, capi_cluster_naming, condition, dig, external_dns, in_memory,
    install_capi_crds, load_balancer, machine, merge, set_machine_ip, wait_for, warning_event,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::ListParams;
use serde_json::json;

/// Whether Machine `name` carries LoadBalancer `lb`'s state `state` and (`hooks`) its hooks.
async fn held(t: &TestNs, name: &str, lb: &str) -> (String, bool) {
    let keys = TargetKeys::new(&t.ns, lb);
    let m = t.api::<Machine>().get(name).await.unwrap();
    let a = m.annotations();
    (
        a.get(&keys.state).cloned().unwrap_or_default(),
        a.contains_key(&keys.pre_drain) && a.contains_key(&keys.pre_terminate),
    )
}

async fn wait_held(t: &TestNs, name: &str, lb: &str, want: (&str, bool)) {
    let machines = t.api::<Machine>();
    let keys = TargetKeys::new(&t.ns, lb);
    wait_for(&machines, name, &format!("{name}: {want:?}"), |m| {
        m.is_some_and(|m| {
            let a = m.annotations();
            a.get(&keys.state).map(String::as_str) == Some(want.0)
                && (a.contains_key(&keys.pre_drain) && a.contains_key(&keys.pre_terminate))
                    == want.1
        })
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_service_does_not_take_over_a_default_selector_load_balancer() {
    let mut t = TestNs::new("consent-takeover").await;
    install_capi_crds(&t.client).await;
    t.create(capi_cluster_naming("demo", "cp")).await;
    t.create(in_memory(
        "cp",
        json!({"addressPools": ["203.0.113.96/29"]}),
    ))
    .await;
    t.create(load_balancer("cp", "cp", json!({"clusterName": "demo"})))
        .await;
    for (name, ip) in [("cp-1", "10.0.0.11"), ("cp-2", "10.0.0.12")] {
        t.create(machine(
            name,
            json!({"loadbalancer.cluster.x-k8s.io/name": "cp"}),
        ))
        .await;
        set_machine_ip(&t, name, ip).await;
    }
    t.start(t.options(&["inmemory"]));
    for name in ["cp-1", "cp-2"] {
        wait_held(&t, name, "cp", ("active", true)).await;
    }
    // Someone who may create Services in the namespace names the LoadBalancer.
    t.create(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "intruder",
                     "annotations": {"loadbalancer.cluster.x-k8s.io/load-balancer-ref": "cp"}},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "loadbalancer.cluster.x-k8s.io/capi-lb",
                 "ports": [{"name": "https", "port": 6443, "targetPort": 6443}]}}))
        .await;
    let note = warning_event(&t, "ServiceNotRealised").await;
    assert!(note.contains("only when its author names"), "{note}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    for name in ["cp-1", "cp-2"] {
        assert_eq!(
            held(&t, name, "cp").await,
            ("active".to_string(), true),
            "{name}"
        );
    }
    let lb = t.api::<LoadBalancer>().get("cp").await.unwrap();
    assert!(
        !lb.annotations()
            .contains_key("loadbalancer.cluster.x-k8s.io/service")
    );
    assert_eq!(lb.status.unwrap().active_targets, ["cp-1", "cp-2"]);
    let svc = t.api::<Service>().get("intruder").await.unwrap();
    let ingress = svc
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|l| l.ingress)
        .unwrap_or_default();
    assert!(ingress.is_empty(), "{ingress:?}");
    t.finish().await;
}

#[tokio::test]
async fn deletion_hooks_follow_the_clusters_consent() {
    let mut t = TestNs::new("consent-hooks").await;
    install_capi_crds(&t.client).await;
    t.create(capi_cluster("demo")).await;
    t.create(in_memory(
        "cp",
        json!({"addressPools": ["203.0.113.104/29"]}),
    ))
    .await;
    t.create(load_balancer("cp", "cp", json!({"clusterName": "demo"})))
        .await;
    t.create(machine(
        "m1",
        json!({"loadbalancer.cluster.x-k8s.io/name": "cp"}),
    ))
    .await;
    set_machine_ip(&t, "m1", "10.0.0.21").await;
    t.start(t.options(&["inmemory"]));
    wait_held(&t, "m1", "cp", ("active", false)).await;
    let clusters = capi_api(&t.client, &t.ns, "Cluster").await.unwrap();
    let name = |lb: &str| json!({"metadata": {"annotations": {"loadbalancer.cluster.x-k8s.io/loadBalancerRef": lb}}});
    merge(&clusters, "demo", name("cp")).await;
    wait_held(&t, "m1", "cp", ("active", true)).await;
    merge(&clusters, "demo", name("another")).await;
    wait_held(&t, "m1", "cp", ("active", false)).await;
    t.finish().await;
}

/// The addresses of LoadBalancer `lb`'s `-ext` EndpointSlices.
async fn published(t: &TestNs, lb: &str) -> Vec<String> {
    t.api::<EndpointSlice>()
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={lb}-ext")))
        .await
        .unwrap()
        .items
        .into_iter()
        .flat_map(|s| s.endpoints)
        .flat_map(|e| e.addresses)
        .collect()
}

#[tokio::test]
async fn an_ipv4_mapped_form_of_a_refused_address_is_published_nowhere() {
    let mut t = TestNs::new("consent-mapped").await;
    install_capi_crds(&t.client).await;
    let zone = external_dns().zone.clone();
    // Three DNS LoadBalancers, each over one Machine: two with mapped forms of refused addresses
    // (one a control-plane LoadBalancer of a Cluster that names it, publication on; one with
    // publication off), one ordinary.
    let cases = [
        ("metadata", "::ffff:169.254.169.254", true, true),
        ("loopback", "::ffff:127.0.0.1", false, false),
        ("fine", "203.0.113.120", true, false),
    ];
    t.create(capi_cluster_naming("demo", "metadata")).await;
    for (name, address, publication, control_plane) in cases {
        let host = format!("{name}.{}.{zone}", t.ns);
        t.create(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "DNSLoadBalancer",
            "metadata": {"name": name}, "spec": {"hostname": host, "ttlSeconds": 5}}))
            .await;
        let mut spec = json!({
            "clusterName": "demo",
            "selector": {"matchLabels": {"e2e/lb": name}},
            "ports": [{"name": "https", "port": 6443}],
            "publication": {"enabled": publication},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                  "kind": "DNSLoadBalancer", "name": name}});
        if control_plane {
            spec["controlPlane"] = json!({"endpointHost": "ProviderAddress"});
        }
        t.create(
            json!({"apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1",
                        "kind": "LoadBalancer", "metadata": {"name": name}, "spec": spec}),
        )
        .await;
        t.create(machine(name, json!({"e2e/lb": name}))).await;
        set_machine_ip(&t, name, address).await;
    }
    t.start(t.options(&["dns"]));
    let lbs = t.api::<LoadBalancer>();
    wait_for(&lbs, "fine", "the ordinary address published", |l| {
        l.and_then(|l| condition(l, "DNSPublished"))
            .is_some_and(|(s, _)| s == "True")
    })
    .await
    .unwrap();
    let fine_host = format!("fine.{}.{zone}", t.ns);
    let mut answer = Vec::new();
    for _ in 0..50 {
        answer = dig(&fine_host);
        if !answer.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(answer, ["203.0.113.120"]);
    // A few probe periods after the ordinary one was published.
    tokio::time::sleep(Duration::from_secs(10)).await;
    for (name, address, _, _) in &cases[..2] {
        let lb = lbs.get(name).await.unwrap();
        let canonical = address.trim_start_matches("::ffff:");
        let status = lb.status.unwrap_or_default();
        // Never published in either form: the DNS provider probes a target before it joins, and
        // the probe never connects to an address the built-in policy refuses; the publication
        // stage would refuse it too (tests/tests/integration/isolation.rs).
        assert!(
            status
                .addresses
                .iter()
                .all(|a| a.address != *address && a.address != canonical),
            "{name}: {:?}",
            status.addresses
        );
        assert!(!status.ready, "{name} Ready");
        assert!(
            status
                .endpoint
                .as_ref()
                .is_none_or(|e| !e.host.contains(canonical)),
            "{name}: {:?}",
            status.endpoint
        );
        assert!(published(&t, name).await.is_empty(), "{name}");
        assert!(
            dig(&format!("{name}.{}.{zone}", t.ns)).is_empty(),
            "{name} in BIND"
        );
    }
    let clusters = capi_api(&t.client, &t.ns, "Cluster").await.unwrap();
    let demo = clusters.get("demo").await.unwrap();
    let endpoint = &demo.data["spec"]["controlPlaneEndpoint"];
    assert!(
        endpoint.get("host").is_none_or(|h| h.as_str() == Some("")),
        "the Cluster's endpoint: {endpoint}"
    );
    t.finish().await;
}
