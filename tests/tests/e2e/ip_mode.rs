//! The ingress capi-lb writes for a Service of its class says its `ipMode` (KEP-1860), on the real
//! apiserver with the harness's kube-proxy: `VIP` for a provider that forwards to a virtual IP (here
//! the in-memory provider), so kube-proxy sends in-cluster clients of that IP to the Service's
//! endpoints (its nftables map holds the IP). The apiserver fills in `VIP` where an ingress leaves
//! it out, so an ingress written without it differed from the stored one at every reconcile: once
//! converged, capi-lb writes the Service's status no more. (`Proxy`, for Octavia, is checked with
//! the real Octavia API in `e2e/octavia.rs`.)

use std::process::Command;
use std::time::Duration;

use capi_lb_tests::k8s::{TestNs, eventually, in_memory, load_balancer, merge, wait_for};
use k8s_openapi::api::core::v1::Service;
use serde_json::json;

/// Whether kube-proxy's nftables map of service IPs holds `ip`.
fn kube_proxy_serves(ip: &str) -> bool {
    let out = Command::new("nft")
        .args(["list", "map", "ip", "kube-proxy", "service-ips"])
        .output()
        .expect("nft (the harness's data plane)");
    String::from_utf8_lossy(&out.stdout).contains(&format!("{ip} . tcp . 6443"))
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
    t.create(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "tcp", "annotations": {"loadbalancer.cluster.x-k8s.io/load-balancer-ref": "tcp"}},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "loadbalancer.cluster.x-k8s.io/capi-lb",
                 "allocateLoadBalancerNodePorts": false,
                 "ports": [{"name": "kube-apiserver", "port": 6443}]}}))
        .await;
    t.create(
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "tcp-1", "labels": {"kubernetes.io/service-name": "tcp"}},
        "addressType": "IPv4", "ports": [{"name": "kube-apiserver", "port": 6443}],
        "endpoints": [{"addresses": ["10.199.0.250"], "conditions": {"ready": true}}]}),
    )
    .await;
    let service = wait_for(
        &t.api::<Service>(),
        "tcp",
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
        .unwrap()
        .load_balancer
        .unwrap()
        .ingress
        .unwrap();
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
