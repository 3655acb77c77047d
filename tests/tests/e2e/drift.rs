//! Drift: a load balancer lost or broken behind capi-lb's back, on a real apiserver (CoreDNS in
//! front of it) and the real Octavia API with Keystone (`tests/octavia/harness.sh`).
//!
//! A Ready LoadBalancer on Octavia, with a floating IP and a DNS name (`spec.dns`); capi-lb runs as
//! its ServiceAccount with `--drift-check-seconds=10`. Then, as a cloud clean-up script would:
//! - the Octavia load balancer is deleted (cascade) and its floating IP released: capi-lb notices
//!   at its next drift check (a Warning Event `LoadBalancerLost` naming what it found), creates a
//!   new load balancer with a new floating IP (Neutron hands out the oldest free address, so it is
//!   another one), and publishes the new address on `<name>-ext` (CoreDNS answers it) and in the
//!   DNSEndpoint; the times to notice and to repair are printed;
//! - the new load balancer is set to ERROR in Octavia's database: the next drift check reports
//!   `InfrastructureReady` False `LoadBalancerError`.
//!
//! Settled, the load balancer costs one Octavia request per drift check and no apiserver write.
//! Without the drift check (only the resync of 600 s) neither loss is seen within the test's limits.
//!
//! A load balancer made of objects capi-lb watches needs no drift check: the Service provider's
//! `<infra>-lb` Service, served by MetalLB's real controller, deleted by hand, is recreated at
//! once (the watch), with its members, and the `-ext` name follows MetalLB's new address.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use capi_lb_api::externaldns::DNSEndpoint;
use capi_lb_api::{LoadBalancer, OctaviaLoadBalancer};
use capi_lb_tests::k8s::{
    DnsAnswer, TestNs, condition, dns_query, eventually, external_dns, install_capi_crds,
    load_balancer, machine, metallb, set_machine_ip, wait_for, warning_event,
};
use capi_lb_tests::octavia::{self, Harness};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::api::DeleteParams;
use serde_json::{Value, json};

/// The drift check interval of this test's controller (the smallest `--drift-check-seconds`).
const DRIFT: Duration = Duration::from_secs(10);

/// `doc` in `t`'s namespace.
fn in_ns(t: &TestNs, mut doc: Value) -> Value {
    doc["metadata"]["namespace"] = json!(t.ns);
    doc
}

/// The LoadBalancer's first address once it is Ready with one other than `not`.
async fn ready_address(t: &TestNs, what: &str, not: Option<&str>) -> String {
    let lb = wait_for(&t.api::<LoadBalancer>(), "cp", what, |l| {
        l.and_then(|l| l.status.as_ref()).is_some_and(|s| {
            s.ready
                && s.addresses
                    .first()
                    .is_some_and(|a| Some(a.address.as_str()) != not)
        })
    })
    .await
    .unwrap();
    lb.status.unwrap().addresses[0].address.clone()
}

/// Wait until CoreDNS answers exactly `address` for `cp-ext`.
async fn ext_answers(t: &TestNs, address: &str) {
    let name = format!("cp-ext.{}.svc.cluster.local", t.ns);
    let want = vec![DnsAnswer::Ip(address.parse::<IpAddr>().unwrap())];
    eventually(&format!("{name} answers {address}"), || async {
        (dns_query(&name, "A").await.1 == want).then_some(())
    })
    .await;
}

/// The times (seconds of the day, as the Octavia API's access log has them) of the requests made
/// for Octavia load balancer `id`.
fn requests_for(h: &Harness, id: &str) -> Vec<u32> {
    let log = std::fs::read_to_string(h.state.join("octavia-api-access.log")).unwrap();
    log.lines()
        .filter(|l| l.contains(&format!("/v2/lbaas/loadbalancers/{id}")) && l.contains("] \""))
        .filter_map(|l| {
            // gunicorn's `127.0.0.1 - - [27/Nov/2026:20:57:09 +0000] "GET ...`
            let time = l.split('[').nth(1)?.split([':', ' ']).skip(1);
            let mut parts = time.map(|p| p.parse::<u32>().ok());
            Some(parts.next()?? * 3600 + parts.next()?? * 60 + parts.next()??)
        })
        .collect()
}

#[tokio::test]
async fn a_load_balancer_lost_in_octavia_is_recreated_and_one_in_error_is_reported() {
    let (h, _api) = octavia::shared_api().await;
    let mut t = TestNs::new("drift").await;
    t.create(in_ns(&t, Harness::secret("openstack", &h.clouds_yaml)))
        .await;
    let floating = json!({"floatingIP": {"networkID": h.var("FIP_NETWORK_ID")}});
    t.create(in_ns(&t, octavia::olb("cp", &h, floating))).await;
    let hostname = format!("api.{}.{}", t.ns, external_dns().zone);
    t.create(in_ns(
        &t,
        octavia::octavia_lb("cp")
            .spec("dns", json!({"hostnames": [hostname]}))
            .build(),
    ))
    .await;
    let mut options = t.options(&["octavia"]);
    options.drift_check = DRIFT;
    t.start(options);
    let first = ready_address(&t, "Ready", None).await;
    ext_answers(&t, &first).await;
    let olbs: Api<OctaviaLoadBalancer> = t.api();
    let status = olbs.get("cp").await.unwrap().status.unwrap();
    let id = status.load_balancer_id.clone().unwrap();
    let fip = status.floating_ip_id.clone().unwrap();

    // Settled (the DNS name published too), a Ready load balancer is looked at once per drift
    // check: one Octavia request each, the interval apart.
    wait_for(&t.api::<LoadBalancer>(), "cp", "DNSPublished True", |l| {
        l.and_then(|l| condition(l, "DNSPublished"))
            .is_some_and(|(status, _)| status == "True")
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = requests_for(&h, &id).len();
    let api_before = t.requests.list().len();
    tokio::time::sleep(DRIFT * 5 / 2).await;
    let looks = requests_for(&h, &id).split_off(before);
    // The looks write nothing. They still read a few objects through the apiserver (the
    // credentials Secret, the Cluster when it does not exist): printed, and in docs/benchmarks.md.
    let api: Vec<String> = t
        .requests
        .list()
        .split_off(api_before)
        .into_iter()
        .filter(|r| !r.contains("watch=true"))
        .collect();
    println!(
        "Octavia requests for the settled load balancer in 25 s, at (s of the day): {looks:?}"
    );
    println!("apiserver requests of those looks: {api:#?}");
    assert!(
        api.iter().all(|r| r.starts_with("GET ")),
        "a look wrote: {api:#?}"
    );
    // Who holds a DNS name is read from the watch's cache, not listed on every look.
    assert!(
        !api.iter().any(|r| r.contains("/dnsendpoints")),
        "a look read DNSEndpoints through the apiserver: {api:#?}"
    );
    assert!((2..=3).contains(&looks.len()), "{looks:?}");
    assert!(
        looks.windows(2).all(|w| w[1] - w[0] >= 8),
        "looks closer than the drift interval: {looks:?}"
    );

    // A clean-up script deletes the load balancer with everything on it, and its floating IP.
    let (code, body) = h.octavia(
        "DELETE",
        &format!("lbaas/loadbalancers/{id}?cascade=true"),
        None,
    );
    assert_eq!(code, 204, "{body}");
    let (code, body) = h.neutron("DELETE", &format!("floatingips/{fip}"), None);
    assert_eq!(code, 204, "{body}");
    let deleted = Instant::now();

    let note = warning_event(&t, "LoadBalancerLost").await;
    let noticed = deleted.elapsed();
    assert!(
        note.contains("OctaviaLoadBalancer cp was ready and is gone") && note.contains(&id),
        "{note}"
    );
    let second = ready_address(&t, "Ready at a new address", Some(&first)).await;
    let repaired = deleted.elapsed();
    ext_answers(&t, &second).await;
    let published = deleted.elapsed();
    let endpoint = t.api::<DNSEndpoint>().get("cp").await.unwrap();
    assert_eq!(endpoint.spec.endpoints[0].targets, vec![second.clone()]);
    let again = olbs.get("cp").await.unwrap().status.unwrap();
    let new_id = again.load_balancer_id.clone().unwrap();
    assert_ne!(new_id, id);
    println!(
        "lost load balancer: noticed after {noticed:?}, Ready at {second} (was {first}) after {repaired:?}, on -ext after {published:?}"
    );
    // Found at the first drift check after the deletion: at most the interval plus its spread
    // (a tenth) and a reconcile.
    assert!(
        noticed < DRIFT + DRIFT / 10 + Duration::from_secs(5),
        "{noticed:?}"
    );

    // The new load balancer goes to ERROR behind capi-lb's back, once capi-lb has settled again
    // (no more looks after its create): reported at the next drift check.
    tokio::time::sleep(Duration::from_secs(5)).await;
    h.set_provisioning_status(&new_id, "ERROR");
    let broken = Instant::now();
    let lbs: Api<LoadBalancer> = t.api();
    wait_for(&lbs, "cp", "InfrastructureReady LoadBalancerError", |l| {
        l.and_then(|l| condition(l, "InfrastructureReady"))
            .is_some_and(|(status, reason)| status == "False" && reason == "LoadBalancerError")
    })
    .await
    .unwrap();
    let reported = broken.elapsed();
    println!("load balancer in ERROR: reported after {reported:?}");
    assert!(
        reported < DRIFT + DRIFT / 10 + Duration::from_secs(5),
        "{reported:?}"
    );

    // Deleted with its LoadBalancer, in ERROR or not.
    t.finish().await;
    let (code, body) = h.octavia("GET", &format!("lbaas/loadbalancers/{new_id}"), None);
    assert!(
        code == 404 || body["loadbalancer"]["provisioning_status"] == "DELETED",
        "{code} {body}"
    );
}

/// The addresses of the endpoints of EndpointSlice `name`.
async fn slice_addresses(t: &TestNs, name: &str) -> Vec<String> {
    match t.api::<EndpointSlice>().get_opt(name).await.unwrap() {
        Some(slice) => slice
            .endpoints
            .iter()
            .flat_map(|e| e.addresses.clone())
            .collect(),
        None => Vec::new(),
    }
}

#[tokio::test]
async fn a_deleted_service_of_the_service_provider_is_recreated_at_once_with_its_members() {
    let mut t = TestNs::new("drift-svc").await;
    install_capi_crds(&t.client).await;
    t.start(t.options(&["service"]));
    t.create(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "ServiceLoadBalancer",
        "metadata": {"name": "metal"},
        "spec": {"loadBalancerClass": metallb().class, "allocateLoadBalancerNodePorts": false},
    }))
    .await;
    let mut lb = load_balancer("cp", "metal", json!({}));
    lb["spec"]["infrastructureRef"]["kind"] = json!("ServiceLoadBalancer");
    t.create(lb).await;
    t.create(machine(
        "cp-m1",
        json!({"loadbalancer.cluster.x-k8s.io/name": "cp"}),
    ))
    .await;
    set_machine_ip(&t, "cp-m1", "10.0.0.11").await;
    wait_for(
        &t.api::<LoadBalancer>(),
        "cp",
        "Ready with cp-m1 active",
        |l| {
            l.and_then(|l| l.status.as_ref())
                .is_some_and(|s| s.ready && s.active_targets == ["cp-m1"])
        },
    )
    .await
    .unwrap();
    let services = t.api::<Service>();
    let old = services.get("metal-lb").await.unwrap();

    // Someone deletes the Service behind capi-lb's back.
    services
        .delete("metal-lb", &DeleteParams::default())
        .await
        .unwrap();
    let deleted = Instant::now();
    let note = warning_event(&t, "LoadBalancerLost").await;
    let noticed = deleted.elapsed();
    assert!(
        note.contains("ServiceLoadBalancer metal was ready and is gone"),
        "{note}"
    );
    let recreated = wait_for(&services, "metal-lb", "a new Service metal-lb", |s| {
        s.is_some_and(|s| s.metadata.uid != old.metadata.uid)
    })
    .await
    .unwrap();
    // Its members come back with it, and -ext follows whatever address MetalLB gives it now.
    eventually("the new Service's members", || async {
        (slice_addresses(&t, "metal-lb-ipv4").await == ["10.0.0.11"]).then_some(())
    })
    .await;
    let address = ready_address(&t, "Ready again", None).await;
    let ingress = services
        .get("metal-lb")
        .await
        .unwrap()
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|l| l.ingress)
        .and_then(|i| i.first().and_then(|i| i.ip.clone()));
    assert_eq!(ingress.as_deref(), Some(address.as_str()));
    ext_answers(&t, &address).await;
    println!(
        "deleted Service: noticed after {noticed:?}, recreated as {}, {address} on -ext after {:?}",
        recreated.metadata.uid.unwrap_or_default(),
        deleted.elapsed()
    );
    // Watched: no drift check needed, well under its interval.
    assert!(noticed < Duration::from_secs(10), "{noticed:?}");
    t.finish().await;
}
