//! The ingress capi-lb writes for a Service of its class says its `ipMode` (KEP-1860), on the real
//! apiserver with the harness's kube-proxy: `VIP` for a provider that forwards to a virtual IP (here
//! the in-memory provider), so kube-proxy sends in-cluster clients of that IP to the Service's
//! endpoints (its nftables map holds the IP). The apiserver fills in `VIP` where an ingress leaves
//! it out, so an ingress written without it differed from the stored one at every reconcile: once
//! converged, capi-lb writes the Service's status no more. `Proxy` for a provider whose load
//! balancer proxies (Octavia, here the real Octavia API): kube-proxy then leaves the IP alone, so
//! in-cluster clients go through the load balancer (its health monitors and allowed CIDRs apply to
//! them too); its nftables table holds the Service's ClusterIP and not that address.

use std::process::Command;
use std::time::Duration;

use capi_lb_tests::k8s::{TestNs, eventually, in_memory, load_balancer, merge, wait_for};
use capi_lb_tests::octavia::{self, Harness};
use k8s_openapi::api::core::v1::{LoadBalancerIngress, Service};
use serde_json::{Value, json};

/// Whether kube-proxy's nftables map of service IPs holds `ip`.
fn kube_proxy_serves(ip: &str) -> bool {
    let out = Command::new("nft")
        .args(["list", "map", "ip", "kube-proxy", "service-ips"])
        .output()
        .expect("nft (the harness's data plane)");
    String::from_utf8_lossy(&out.stdout).contains(&format!("{ip} . tcp . 6443"))
}

/// kube-proxy's whole nftables table (IPv4).
fn kube_proxy_table() -> String {
    let out = Command::new("nft")
        .args(["list", "table", "ip", "kube-proxy"])
        .output()
        .expect("nft (the harness's data plane)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A Service `name` of capi-lb's class bound to LoadBalancer `name`, and its EndpointSlice with one
/// ready endpoint at `endpoint` (what Kamaji creates for a tenant control plane).
fn class_service(name: &str, endpoint: &str) -> [Value; 2] {
    [
        json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "annotations": {"loadbalancer.cluster.x-k8s.io/load-balancer-ref": name}},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "loadbalancer.cluster.x-k8s.io/capi-lb",
                 "allocateLoadBalancerNodePorts": false,
                 "ports": [{"name": "kube-apiserver", "port": 6443}]}}),
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{name}-1"), "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4", "ports": [{"name": "kube-apiserver", "port": 6443}],
        "endpoints": [{"addresses": [endpoint], "conditions": {"ready": true}}]}),
    ]
}

/// The ingress of Service `name` once capi-lb wrote one.
async fn ingress_of(t: &TestNs, name: &str) -> (Service, Vec<LoadBalancerIngress>) {
    let service = wait_for(
        &t.api::<Service>(),
        name,
        "the ingress capi-lb writes",
        |s| {
            s.and_then(|s| s.status.as_ref()?.load_balancer.as_ref()?.ingress.as_ref())
                .is_some_and(|i| !i.is_empty())
        },
    )
    .await
    .unwrap();
    let ingress = service
        .status
        .clone()
        .unwrap()
        .load_balancer
        .unwrap()
        .ingress
        .unwrap();
    (service, ingress)
}

#[tokio::test]
async fn a_class_service_gets_ip_mode_vip_which_kube_proxy_serves_and_no_idle_status_writes() {
    let mut t = TestNs::new("e2e-ip-mode").await;
    t.start(t.options(&["inmemory"]));
    // A range no other test writes into an ingress (kube-proxy serves every Service's).
    t.create(in_memory(
        "tcp",
        json!({"addressPools": ["203.0.113.224/28"]}),
    ))
    .await;
    let mut lb = load_balancer("tcp", "tcp", json!({}));
    lb["metadata"]["annotations"] = json!({"loadbalancer.cluster.x-k8s.io/service": "tcp"});
    t.create(lb).await;
    for doc in class_service("tcp", "10.199.0.250") {
        t.create(doc).await;
    }
    let (_, ingress) = ingress_of(&t, "tcp").await;
    assert_eq!(ingress.len(), 1, "{ingress:?}");
    let ip = ingress[0].ip.clone().unwrap();
    assert_eq!(ingress[0].ip_mode.as_deref(), Some("VIP"), "{ingress:?}");
    eventually(&format!("kube-proxy forwards {ip}:6443"), || async {
        kube_proxy_serves(&ip).then_some(())
    })
    .await;

    // Converged: a change of the LoadBalancer's own (a new annotation) is reconciled without a
    // write to the Service's status.
    let status_writes = || {
        t.requests
            .list()
            .iter()
            .filter(|r| !r.starts_with("GET") && r.contains("/services/tcp/status"))
            .count()
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = status_writes();
    for i in 0..3 {
        merge(
            &t.api::<capi_lb_api::LoadBalancer>(),
            "tcp",
            json!({"metadata": {"annotations": {"e2e.capi-lb.dev/nudge": i.to_string()}}}),
        )
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(
        status_writes(),
        before,
        "the Service's status written again while nothing changed: {:?}",
        t.requests
            .list()
            .iter()
            .filter(|r| r.contains("/services/tcp"))
            .collect::<Vec<_>>()
    );
    t.finish().await;
}

#[tokio::test]
async fn an_octavia_class_service_gets_ip_mode_proxy_which_kube_proxy_leaves_alone() {
    let (h, _api) = octavia::shared_api().await;
    let mut t = TestNs::new("e2e-ip-mode-proxy").await;
    let mut secret = Harness::secret("openstack", &h.clouds_yaml);
    secret["metadata"]["namespace"] = json!(t.ns);
    t.create(secret).await;
    let mut olb = octavia::olb(
        "proxied",
        &h,
        json!({"floatingIP": {"networkID": h.var("FIP_NETWORK_ID")}}),
    );
    olb["metadata"]["namespace"] = json!(t.ns);
    t.create(olb).await;
    let mut lb = octavia::octavia_lb("proxied").build();
    lb["metadata"]["namespace"] = json!(t.ns);
    lb["metadata"]["annotations"] = json!({"loadbalancer.cluster.x-k8s.io/service": "proxied"});
    t.create(lb).await;
    for doc in class_service("proxied", "10.199.0.251") {
        t.create(doc).await;
    }
    t.start(t.options(&["octavia"]));
    let (service, ingress) = ingress_of(&t, "proxied").await;
    assert_eq!(ingress.len(), 1, "{ingress:?}");
    let ip = ingress[0].ip.clone().unwrap();
    assert_eq!(ingress[0].ip_mode.as_deref(), Some("Proxy"), "{ingress:?}");
    // kube-proxy has seen the Service (its ClusterIP is in the table, with the endpoint) and
    // programmed nothing for the load balancer's address.
    let cluster_ip = service.spec.unwrap().cluster_ip.unwrap();
    eventually(
        &format!("kube-proxy forwards {cluster_ip}:6443"),
        || async { kube_proxy_serves(&cluster_ip).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let table = kube_proxy_table();
    assert!(table.contains("10.199.0.251"), "{table}");
    assert!(
        !table.contains(&format!("{ip} ")) && !table.contains(&format!("{ip},")),
        "kube-proxy programmed {ip} (ipMode Proxy): {table}"
    );
    t.finish().await;
}
