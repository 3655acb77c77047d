//! DNS names outside the cluster, the real chain: capi-lb writes ExternalDNS's `DNSEndpoint`, the
//! real ExternalDNS (`--source=crd --provider=rfc2136`, `tests/k8s/harness.sh`) writes the records
//! into a dynamic zone of a real BIND9 with a TSIG key, and these tests ask BIND over UDP. capi-lb
//! runs in this process as its ServiceAccount (the real authorizer checks the generated RBAC) with a
//! resync of one hour, so only watches drive it (ExternalDNS's status write included).
//!
//! Time limits: a change must reach the zone within one ExternalDNS interval
//! (`CAPI_LB_E2E_EXTERNAL_DNS_INTERVAL`) plus a margin for capi-lb, the apiserver and BIND on a
//! loaded 2-core machine; every measured delay is printed (`-- --nocapture`).

use std::time::{Duration, Instant};

use capi_lb_api::externaldns::DNSEndpoint;
use capi_lb_api::{InMemoryLoadBalancer, LoadBalancer};
use capi_lb_tests::k8s::{
    DnsAnswer, TestNs, condition, dns_query_at, external_dns, in_memory, load_balancer, merge,
    metallb, wait_for, wait_gone, wait_ready,
};
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::DeleteParams;
use serde_json::{Value, json};

/// The margin over one ExternalDNS interval for capi-lb, the apiserver and BIND.
const MARGIN: Duration = Duration::from_secs(5);

/// `<label>.<ns>.<zone>`: a name in ExternalDNS's zone no other test uses.
fn hostname(t: &TestNs, label: &str) -> String {
    format!("{label}.{}.{}", t.ns, external_dns().zone)
}

/// BIND's answer for `name` `record_type`: the answers, empty for NXDOMAIN or no data.
async fn ask(name: &str, record_type: &str) -> Vec<DnsAnswer> {
    let (rcode, answers) = dns_query_at(external_dns().server, name, record_type).await;
    assert!(
        rcode == "No Error" || rcode == "Non-Existent Domain",
        "BIND answered {rcode} for {name} {record_type}"
    );
    answers
}

fn ips(addresses: &[&str]) -> Vec<DnsAnswer> {
    let mut out: Vec<DnsAnswer> = addresses
        .iter()
        .map(|a| DnsAnswer::Ip(a.parse().unwrap()))
        .collect();
    out.sort();
    out
}

/// Wait until BIND answers `want` for `name` `record_type`, within one ExternalDNS interval plus
/// the margin from `since`; returns the time it took.
async fn resolves(
    what: &str,
    name: &str,
    record_type: &str,
    want: &[DnsAnswer],
    since: Instant,
) -> Duration {
    let limit = external_dns().interval + MARGIN;
    let mut last = Vec::new();
    while since.elapsed() < limit * 3 {
        last = ask(name, record_type).await;
        if last == want {
            let took = since.elapsed();
            println!("{what}: {name} {record_type} -> {want:?} after {took:?}");
            assert!(
                took <= limit,
                "{what}: {name} answered {want:?} only after {took:?}, more than one ExternalDNS interval ({:?}) plus {MARGIN:?}",
                external_dns().interval
            );
            return took;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: {name} {record_type} answered {last:?}, not {want:?}");
}

/// The first IP of a LoadBalancer's status.
fn first_ip(lb: &LoadBalancer) -> String {
    lb.status.as_ref().unwrap().addresses[0].address.clone()
}

/// Wait until the LoadBalancer reports `DNSPublished` with `reason`.
async fn dns_published(t: &TestNs, name: &str, reason: &str) -> LoadBalancer {
    wait_for(
        &t.api::<LoadBalancer>(),
        name,
        &format!("DNSPublished {reason}"),
        |lb| {
            lb.and_then(|lb| condition(lb, "DNSPublished"))
                .is_some_and(|(_, r)| r == reason)
        },
    )
    .await
    .unwrap()
}

fn with_dns(name: &str, infra: &str, dns: Value, endpoint: Option<&str>) -> Value {
    let mut spec = json!({"dns": dns});
    if let Some(host) = endpoint {
        spec["endpoint"] = json!({"host": host, "port": 6443});
    }
    load_balancer(name, infra, spec)
}

/// Story 3 and 3a: a LoadBalancer with a DNS name and an endpoint host (and no Machine at all)
/// resolves at BIND to its address once ExternalDNS took the DNSEndpoint (`DNSPublished` True);
/// an address change and a provider swap (in-memory -> MetalLB) are in the zone within one
/// ExternalDNS interval; deleting the LoadBalancer removes the records.
#[tokio::test]
async fn a_load_balancers_names_resolve_follow_its_address_and_a_swap_and_go_with_it() {
    let mut t = TestNs::new("xdns-lb").await;
    t.start(t.options(&["inmemory", "service"]));
    let api_name = hostname(&t, "api");
    let endpoint_name = hostname(&t, "cp");
    t.create(in_memory(
        "mem",
        json!({"addressPools": ["203.0.113.0/28"]}),
    ))
    .await;
    let created = Instant::now();
    t.create(with_dns(
        "cp",
        "mem",
        json!({"hostnames": [api_name], "ttlSeconds": 30}),
        Some(&endpoint_name),
    ))
    .await;

    let ready = wait_ready(&t, "cp").await;
    let address = first_ip(&ready);
    resolves(
        "created",
        &api_name,
        "A",
        &ips(&[address.as_str()]),
        created,
    )
    .await;
    resolves(
        "created (endpoint host)",
        &endpoint_name,
        "A",
        &ips(&[address.as_str()]),
        created,
    )
    .await;
    let published = dns_published(&t, "cp", "RecordsObserved").await;
    assert_eq!(
        condition(&published, "DNSPublished").unwrap().0,
        "True",
        "ExternalDNS wrote status.observedGeneration"
    );
    let endpoint = t.api::<DNSEndpoint>().get("cp").await.unwrap();
    assert_eq!(endpoint.owner_references()[0].uid, ready.uid().unwrap());
    assert_eq!(endpoint.spec.endpoints[0].record_ttl, Some(30));

    // The address changes: the same DNSEndpoint, new records, in the zone within one interval.
    merge(
        &t.api::<InMemoryLoadBalancer>(),
        "mem",
        json!({"spec": {"addressPools": ["203.0.113.64/28"]}}),
    )
    .await;
    let changed = Instant::now();
    let moved = wait_for(&t.api::<LoadBalancer>(), "cp", "a new address", |lb| {
        lb.is_some_and(|lb| {
            lb.status.as_ref().is_some_and(|s| {
                s.addresses.first().is_some_and(|a| {
                    a.address.starts_with("203.0.113.6") || a.address.starts_with("203.0.113.7")
                })
            })
        })
    })
    .await
    .unwrap();
    let new_address = first_ip(&moved);
    resolves(
        "address changed",
        &api_name,
        "A",
        &ips(&[new_address.as_str()]),
        changed,
    )
    .await;
    assert_eq!(
        t.api::<DNSEndpoint>().get("cp").await.unwrap().uid(),
        endpoint.uid(),
        "updated in place"
    );

    // A provider swap to MetalLB: the name follows the switch.
    t.create(
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                    "kind": "ServiceLoadBalancer", "metadata": {"name": "metal"},
                    "spec": {"loadBalancerClass": metallb().class,
                             "allocateLoadBalancerNodePorts": false}}),
    )
    .await;
    let swapped = Instant::now();
    merge(
        &t.api::<LoadBalancer>(),
        "cp",
        json!({"spec": {"infrastructureRef": {"kind": "ServiceLoadBalancer", "name": "metal"}}}),
    )
    .await;
    let on_metallb = wait_for(
        &t.api::<LoadBalancer>(),
        "cp",
        "an address from MetalLB",
        |lb| {
            lb.is_some_and(|lb| {
                lb.status.as_ref().is_some_and(|s| {
                    s.addresses.len() == 1
                        && s.addresses[0]
                            .address
                            .parse::<std::net::IpAddr>()
                            .is_ok_and(|ip| metallb().pool.contains(&ip))
                })
            })
        },
    )
    .await
    .unwrap();
    let metallb_address = first_ip(&on_metallb);
    resolves(
        "provider swapped",
        &api_name,
        "A",
        &ips(&[metallb_address.as_str()]),
        swapped,
    )
    .await;

    // Deleted: the records go.
    let lbs = t.api::<LoadBalancer>();
    let deleted = Instant::now();
    lbs.delete("cp", &DeleteParams::default()).await.unwrap();
    wait_gone(&lbs, "cp").await;
    resolves("deleted", &api_name, "A", &[], deleted).await;
    resolves("deleted (endpoint host)", &endpoint_name, "A", &[], deleted).await;
    t.finish().await;
}

/// A provider that gives only a hostname: a CNAME in the zone, following a hostname change.
#[tokio::test]
async fn a_hostname_only_load_balancer_gets_a_cname() {
    let mut t = TestNs::new("xdns-cname").await;
    t.start(t.options(&["inmemory"]));
    let name = hostname(&t, "api");
    t.create(in_memory(
        "mem",
        json!({"addressPools": [], "hostname": "lb-1.example.net"}),
    ))
    .await;
    let created = Instant::now();
    t.create(with_dns("cp", "mem", json!({"hostnames": [name]}), None))
        .await;
    resolves(
        "hostname-only",
        &name,
        "CNAME",
        &[DnsAnswer::Cname("lb-1.example.net".into())],
        created,
    )
    .await;
    dns_published(&t, "cp", "RecordsObserved").await;
    let changed = Instant::now();
    merge(
        &t.api::<InMemoryLoadBalancer>(),
        "mem",
        json!({"spec": {"hostname": "lb-2.example.net"}}),
    )
    .await;
    resolves(
        "hostname changed",
        &name,
        "CNAME",
        &[DnsAnswer::Cname("lb-2.example.net".into())],
        changed,
    )
    .await;
    t.finish().await;
}

/// Two LoadBalancers asking for one name: the first keeps it (and BIND answers its address only),
/// the second reports `HostnameConflict` and publishes its other name; once the first no longer
/// asks for it the second takes the name over (triggered by the first's DNSEndpoint dropping it,
/// with a resync of one hour).
#[tokio::test]
async fn a_name_two_load_balancers_want_goes_to_the_first_then_to_the_second() {
    let mut t = TestNs::new("xdns-conflict").await;
    t.start(t.options(&["inmemory"]));
    let shared = hostname(&t, "shared");
    let own = hostname(&t, "own");
    t.create(in_memory(
        "one",
        json!({"addressPools": ["203.0.113.16/28"]}),
    ))
    .await;
    t.create(in_memory(
        "two",
        json!({"addressPools": ["203.0.113.32/28"]}),
    ))
    .await;
    t.create(with_dns("one", "one", json!({"hostnames": [shared]}), None))
        .await;
    let first = first_ip(&wait_ready(&t, "one").await);
    dns_published(&t, "one", "RecordsObserved").await;
    let started = Instant::now();
    t.create(with_dns(
        "two",
        "two",
        json!({"hostnames": [shared, own]}),
        None,
    ))
    .await;
    let conflicted = dns_published(&t, "two", "HostnameConflict").await;
    assert!(
        condition_message(&conflicted).contains(&shared),
        "{}",
        condition_message(&conflicted)
    );
    let second = first_ip(&conflicted);
    resolves(
        "second's own name",
        &own,
        "A",
        &ips(&[second.as_str()]),
        started,
    )
    .await;
    resolves(
        "first keeps",
        &shared,
        "A",
        &ips(&[first.as_str()]),
        started,
    )
    .await;

    // The first lets the name go (a spec change, not a deletion): the second takes it.
    let released = Instant::now();
    merge(
        &t.api::<LoadBalancer>(),
        "one",
        json!({"spec": {"dns": {"hostnames": [hostname(&t, "elsewhere")]}}}),
    )
    .await;
    resolves(
        "released to the second",
        &shared,
        "A",
        &ips(&[second.as_str()]),
        released,
    )
    .await;
    dns_published(&t, "two", "RecordsObserved").await;
    t.finish().await;
}

fn condition_message(lb: &LoadBalancer) -> String {
    lb.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "DNSPublished"))
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// Services of type LoadBalancer name their DNS names with an annotation: one served by MetalLB
/// resolves to MetalLB's address, one of capi-lb's class to the address of the LoadBalancer that
/// realises it; the annotation removed, the record goes and the Service no longer carries the
/// DNSEndpoint's name.
#[tokio::test]
async fn services_of_type_load_balancer_publish_the_names_of_their_annotation() {
    let mut t = TestNs::new("xdns-svc").await;
    t.start(t.options(&["inmemory"]));
    let web = hostname(&t, "web");
    let tcp = hostname(&t, "tcp");
    let created = Instant::now();
    t.create(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "annotations": {HOSTNAMES: web}},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": metallb().class,
                 "allocateLoadBalancerNodePorts": false,
                 "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]},
    }))
    .await;
    t.create(in_memory(
        "tenant",
        json!({"addressPools": ["203.0.113.48/28"]}),
    ))
    .await;
    let mut lb = load_balancer("tenant", "tenant", json!({}));
    lb["metadata"]["annotations"] = json!({"loadbalancer.cluster.x-k8s.io/service": "tcp"});
    t.create(lb).await;
    t.create(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "tcp", "annotations": {
            HOSTNAMES: tcp, "loadbalancer.cluster.x-k8s.io/load-balancer-ref": "tenant"}},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "loadbalancer.cluster.x-k8s.io/capi-lb",
                 "ports": [{"name": "https", "port": 6443, "targetPort": 6443, "protocol": "TCP"}]},
    }))
    .await;
    let with_ingress = |svc: Option<&Service>| {
        svc.and_then(|s| s.status.as_ref())
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_ref())
            .and_then(|i| i.first())
            .and_then(|i| i.ip.clone())
            .is_some()
    };
    let services = t.api::<Service>();
    let web_ip = wait_for(&services, "web", "MetalLB's address", with_ingress)
        .await
        .unwrap()
        .status
        .unwrap()
        .load_balancer
        .unwrap()
        .ingress
        .unwrap()[0]
        .ip
        .clone()
        .unwrap();
    assert!(
        metallb()
            .pool
            .contains(&web_ip.parse::<std::net::IpAddr>().unwrap())
    );
    resolves(
        "MetalLB Service",
        &web,
        "A",
        &ips(&[web_ip.as_str()]),
        created,
    )
    .await;
    let tenant = first_ip(&wait_ready(&t, "tenant").await);
    resolves(
        "capi-lb's class",
        &tcp,
        "A",
        &ips(&[tenant.as_str()]),
        created,
    )
    .await;
    let marked = wait_for(&services, "web", "the DNSEndpoint's name", |s| {
        s.is_some_and(|s| s.annotations().get(MARKER).map(String::as_str) == Some("web-ext"))
    })
    .await
    .unwrap();
    let endpoint = t.api::<DNSEndpoint>().get("web-ext").await.unwrap();
    assert_eq!(endpoint.owner_references()[0].uid, marked.uid().unwrap());

    let removed = Instant::now();
    merge(
        &services,
        "web",
        json!({"metadata": {"annotations": {HOSTNAMES: null}}}),
    )
    .await;
    resolves("annotation removed", &web, "A", &[], removed).await;
    wait_for(&services, "web", "no DNSEndpoint name", |s| {
        s.is_some_and(|s| !s.annotations().contains_key(MARKER))
    })
    .await;
    wait_gone(&t.api::<DNSEndpoint>(), "web-ext").await;
    t.finish().await;
}

const HOSTNAMES: &str = "loadbalancer.cluster.x-k8s.io/hostnames";
const MARKER: &str = "loadbalancer.cluster.x-k8s.io/dns-endpoint";
