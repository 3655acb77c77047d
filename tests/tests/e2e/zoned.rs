//! One LoadBalancer over two Octavia load balancers in two availability zones, on the real chain:
//! the harness's Octavia API with Keystone (availability zones `az1` and `az2`, made by
//! `tests/octavia/harness.sh`), capi-lb as its ServiceAccount with the `zoned` and `octavia`
//! providers, and the harness's real ExternalDNS writing BIND's zone, asked with `dig`.
//!
//! Both VIPs answer for the name, each zone's Machines are the members of its own zone's load
//! balancer, and when one Octavia load balancer is deleted out of band (as a cloud clean-up script
//! would) the name keeps answering the other zone's VIP, never nothing, until capi-lb recreated
//! the lost one (at its next drift check) and both are back in the name. One in ERROR is taken out
//! of the name (`ZoneDown`) for as long as it is broken, and is back once repaired. Every delay is printed (`-- --nocapture`) and in docs/benchmarks.md.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use capi_lb_api::{LoadBalancer, OctaviaLoadBalancer, ZonedLoadBalancer};
use capi_lb_tests::k8s::{
    TestNs, dig, external_dns, install_capi_crds, machine, set_machine_ip, wait_for, warning_event,
};
use capi_lb_tests::octavia::{self, Harness};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

/// The drift check interval of this test's controller.
const DRIFT: Duration = Duration::from_secs(10);
/// The records' TTL.
const TTL: u64 = 5;

fn in_ns(t: &TestNs, mut doc: Value) -> Value {
    doc["metadata"]["namespace"] = json!(t.ns);
    doc
}

/// The VIP and Octavia ID of the OctaviaLoadBalancer `name`, once it has them.
async fn vip(t: &TestNs, name: &str, not: Option<&str>) -> (String, String) {
    let olb = wait_for(&t.api::<OctaviaLoadBalancer>(), name, "a VIP", |o| {
        o.and_then(|o| o.status.as_ref()).is_some_and(|s| {
            s.provisioning_status.as_deref() == Some("ACTIVE")
                && s.vip_address.is_some()
                && s.load_balancer_id.as_deref() != not
        })
    })
    .await
    .unwrap();
    let status = olb.status.unwrap();
    (
        status.vip_address.unwrap(),
        status.load_balancer_id.unwrap(),
    )
}

/// The availability zone of Octavia load balancer `id`, and its members' addresses.
fn in_octavia(h: &Harness, id: &str) -> (String, BTreeSet<String>) {
    let (code, lb) = h.octavia("GET", &format!("lbaas/loadbalancers/{id}"), None);
    assert_eq!(code, 200, "{lb}");
    let zone = lb["loadbalancer"]["availability_zone"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (code, pools) = h.octavia("GET", &format!("lbaas/pools?loadbalancer_id={id}"), None);
    assert_eq!(code, 200, "{pools}");
    let mut members = BTreeSet::new();
    for pool in pools["pools"].as_array().into_iter().flatten() {
        let pid = pool["id"].as_str().unwrap_or_default();
        let (code, list) = h.octavia("GET", &format!("lbaas/pools/{pid}/members"), None);
        assert_eq!(code, 200, "{list}");
        for m in list["members"].as_array().into_iter().flatten() {
            members.insert(m["address"].as_str().unwrap_or_default().to_string());
        }
    }
    (zone, members)
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// Wait until `dig` answers `want` for `host`, at most `limit`; how long it took.
async fn answers(host: &str, want: &[String], limit: Duration) -> Duration {
    let since = Instant::now();
    let mut last = Vec::new();
    while since.elapsed() < limit {
        last = dig(host);
        if last == want {
            return since.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{host} answered {last:?}, not {want:?}, within {limit:?}");
}

#[tokio::test]
async fn one_name_over_two_availability_zones_keeps_answering_when_one_load_balancer_is_lost() {
    let (h, _api) = octavia::shared_api().await;
    let mut t = TestNs::new("zoned").await;
    install_capi_crds(&t.client).await;
    t.create(in_ns(&t, Harness::secret("openstack", &h.clouds_yaml)))
        .await;
    // Octavia's no-op network driver gives every VIP of a subnet the same address unless one is
    // asked for: each zone asks for its own.
    for (zone, address) in [("az1", "198.51.100.11"), ("az2", "198.51.100.12")] {
        let vip = json!({"subnetID": h.var("OCTAVIA_SUBNET_ID"), "address": address});
        let olb = octavia::olb(
            &format!("cp-{zone}"),
            &h,
            json!({"availabilityZone": zone, "vip": vip}),
        );
        t.create(in_ns(&t, olb)).await;
    }
    let zones: Vec<Value> = ["az1", "az2"]
        .iter()
        .map(|zone| {
            json!({"name": zone, "failureDomains": [zone],
                   "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                         "kind": "OctaviaLoadBalancer", "name": format!("cp-{zone}")}})
        })
        .collect();
    t.create(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "ZonedLoadBalancer",
        "metadata": {"name": "cp", "namespace": t.ns}, "spec": {"zones": zones}}))
        .await;
    let host = format!("api.{}.{}", t.ns, external_dns().zone);
    t.create(json!({
        "apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer",
        "metadata": {"name": "cp", "namespace": t.ns},
        "spec": {
            "drainSeconds": 0,
            "dns": {"hostnames": [host], "ttlSeconds": TTL},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                  "kind": "ZonedLoadBalancer", "name": "cp"}}}))
        .await;
    let targets = [
        ("m1", "az1", "10.0.1.1"),
        ("m2", "az2", "10.0.2.1"),
        ("m3", "az1", "10.0.1.2"),
    ];
    for (name, zone, _) in targets {
        let mut m = machine(name, json!({"loadbalancer.cluster.x-k8s.io/name": "cp"}));
        m["spec"]["failureDomain"] = json!(zone);
        t.create(m).await;
    }
    for (name, _, ip) in targets {
        set_machine_ip(&t, name, ip).await;
    }
    let mut options = t.options(&["octavia", "zoned"]);
    options.drift_check = DRIFT;
    let started = Instant::now();
    t.start(options);

    // Both zones' VIPs in the name; each zone's members in its own availability zone.
    let (vip1, id1) = vip(&t, "cp-az1", None).await;
    let (vip2, id2) = vip(&t, "cp-az2", None).await;
    let both = sorted(vec![vip1.clone(), vip2.clone()]);
    answers(&host, &both, Duration::from_secs(120)).await;
    println!(
        "created: {host} -> {both:?} {:?} after the controller started",
        started.elapsed()
    );
    let lbs = t.api::<LoadBalancer>();
    let parent = wait_for(&lbs, "cp", "Ready with both zones' targets active", |l| {
        l.and_then(|l| l.status.as_ref())
            .is_some_and(|s| s.ready && s.active_targets.len() == 3)
    })
    .await
    .unwrap();
    let mut addresses: Vec<String> = parent
        .status
        .unwrap()
        .addresses
        .into_iter()
        .map(|a| a.address)
        .collect();
    addresses.sort();
    assert_eq!(addresses, both);
    assert_eq!(
        in_octavia(&h, &id1),
        (
            "az1".to_string(),
            BTreeSet::from(["10.0.1.1".to_string(), "10.0.1.2".to_string()])
        )
    );
    assert_eq!(
        in_octavia(&h, &id2),
        ("az2".to_string(), BTreeSet::from(["10.0.2.1".to_string()]))
    );

    // Settled, nothing is written: the zones' LoadBalancers as the apiserver defaults them are
    // what the provider wants (else it would apply them on every pass, and each apply would wake
    // the zone, whose status write wakes the parent again).
    let versions = || async {
        let mut out = Vec::new();
        for name in ["cp", "cp-az1", "cp-az2"] {
            out.push(lbs.get(name).await.unwrap().resource_version());
        }
        out.push(
            t.api::<ZonedLoadBalancer>()
                .get("cp")
                .await
                .unwrap()
                .resource_version(),
        );
        out
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = versions().await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        versions().await,
        before,
        "a settled zoned LoadBalancer was written"
    );

    // az2's load balancer goes to ERROR behind capi-lb's back (a failed amphora): at its next
    // drift check, az2's LoadBalancer is not Ready, and the name answers az1's VIP alone, never
    // nothing, for as long as it is broken.
    h.set_provisioning_status(&id2, "ERROR");
    let broken = Instant::now();
    let mut samples: Vec<Vec<String>> = Vec::new();
    let alone = vec![vip1.clone()];
    while samples.last() != Some(&alone) {
        assert!(
            broken.elapsed() < DRIFT * 2 + Duration::from_secs(15),
            "az2 in ERROR never left the name: {samples:?}"
        );
        samples.push(dig(&host));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let out = broken.elapsed();
    let note = warning_event(&t, "ZoneDown").await;
    assert!(
        note.contains("zone az2") && note.contains("out of the name"),
        "{note}"
    );
    let lb = lbs.get("cp").await.unwrap();
    assert!(
        lb.status.as_ref().is_some_and(|s| s.ready),
        "Ready through az1"
    );
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        samples.push(dig(&host));
    }
    assert!(
        samples.iter().all(|a| a.contains(&vip1)),
        "an answer without az1's VIP: {samples:?}"
    );
    assert!(
        samples.ends_with(&[alone.clone(), alone.clone()]),
        "{samples:?}"
    );
    // Repaired (the operator's fix, then a touch of its object for capi-lb to look at once): both
    // in the name again.
    h.set_provisioning_status(&id2, "ACTIVE");
    t.api::<OctaviaLoadBalancer>()
        .patch(
            "cp-az2",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"repaired": "yes"}}})),
        )
        .await
        .unwrap();
    let back = answers(&host, &both, Duration::from_secs(60)).await;
    println!(
        "az2 in ERROR: out of the name after {out:?} ({} samples, all with az1's VIP); repaired: back after {:?}",
        samples.len(),
        back
    );

    // az2's load balancer is deleted behind capi-lb's back. The name answers az1's VIP all the
    // time, and both are back once capi-lb recreated az2's (at its next drift check).
    let (code, body) = h.octavia(
        "DELETE",
        &format!("lbaas/loadbalancers/{id2}?cascade=true"),
        None,
    );
    assert_eq!(code, 204, "{body}");
    let deleted = Instant::now();
    let mut samples: Vec<(Duration, Vec<String>)> = Vec::new();
    let mut taken_out = None;
    let (new_vip2, new_id2) = loop {
        let answer = dig(&host);
        samples.push((deleted.elapsed(), answer));
        let published: Vec<String> = lbs
            .get("cp")
            .await
            .unwrap()
            .status
            .map(|s| s.addresses.into_iter().map(|a| a.address).collect())
            .unwrap_or_default();
        if published == vec![vip1.clone()] && taken_out.is_none() {
            taken_out = Some(deleted.elapsed());
        }
        let olb = t.api::<OctaviaLoadBalancer>().get("cp-az2").await.unwrap();
        let s = olb.status.unwrap_or_default();
        if s.provisioning_status.as_deref() == Some("ACTIVE")
            && s.load_balancer_id.as_deref().is_some_and(|id| id != id2)
        {
            break (
                s.vip_address.unwrap_or_default(),
                s.load_balancer_id.unwrap_or_default(),
            );
        }
        assert!(
            deleted.elapsed() < Duration::from_secs(90),
            "not recreated: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let recreated = deleted.elapsed();
    // az2 was out of the LoadBalancer's addresses while it was recreated; the harness's no-op
    // Octavia does that in about a second, so `dig` sees it only when ExternalDNS synced within
    // that second (both printed below).
    let again = sorted(vec![vip1.clone(), new_vip2.clone()]);
    let back = answers(&host, &again, Duration::from_secs(60)).await + recreated;
    // Until it is back: az1's VIP in every answer, never an empty one.
    let bad: Vec<&(Duration, Vec<String>)> =
        samples.iter().filter(|(_, a)| !a.contains(&vip1)).collect();
    assert!(bad.is_empty(), "answers without az1's VIP: {bad:?}");
    let alone = samples
        .iter()
        .filter(|(_, a)| *a == vec![vip1.clone()])
        .count();
    println!(
        "az2 lost: out of the LoadBalancer's addresses after {taken_out:?} (polled every 250 ms), recreated after {recreated:?} (VIP {vip2} -> {new_vip2}), both back in the name after {back:?}; {} dig samples, all with az1's VIP, {alone} with only az1's",
        samples.len()
    );
    assert_eq!(
        in_octavia(&h, &new_id2),
        ("az2".to_string(), BTreeSet::from(["10.0.2.1".to_string()]))
    );

    // Deleted with the LoadBalancer: both Octavia load balancers go.
    t.finish().await;
    for id in [id1, new_id2] {
        let (code, body) = h.octavia("GET", &format!("lbaas/loadbalancers/{id}"), None);
        assert!(
            code == 404 || body["loadbalancer"]["provisioning_status"] == "DELETED",
            "{code} {body}"
        );
    }
}
