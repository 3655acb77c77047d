//! The product's central promise, checked with the DNS server Kubernetes clusters use: a real
//! apiserver, CoreDNS serving `cluster.local` from it (`tests/k8s/harness.sh`), and the controller
//! running in this process as capi-lb's ServiceAccount. `<name>-ext.<namespace>.svc.cluster.local`
//! answers exactly the load balancer's working addresses (A for IPv4, AAAA for IPv6, a CNAME for a
//! hostname-only load balancer), nothing while it is not provisioned, follows address changes and
//! stops answering once the load balancer is deleted; the same for a plain Service of
//! `type: LoadBalancer` through the `-ext` publisher.
//!
//! CoreDNS follows the apiserver through watches and the harness's Corefile has no `cache` plugin,
//! so answers are polled with `eventually` (sub-second lag expected).
//!
//! Run: `cargo test -p capi-lb-tests --test e2e dns::` (starts the harness on first use; add
//! `-- --nocapture` to see every answer CoreDNS gave).

use std::net::IpAddr;
use std::time::{Duration, Instant};

use capi_lb_api::loadbalancer::{AddressType, LoadBalancerAddress};
use capi_lb_api::{InMemoryLoadBalancer, LoadBalancer};
use capi_lb_tests::k8s::{
    DnsAnswer, TestNs, dns_query, eventually, in_memory, load_balancer, wait_for, wait_gone,
};
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// The answer of a name that does not exist.
const NXDOMAIN: &str = "Non-Existent Domain";
/// The answer of a name that exists.
const NOERROR: &str = "No Error";

// --- helpers (local to this file) ---------------------------------------------------------------

/// `<service>.<namespace>.svc.cluster.local`
fn fqdn(service: &str, ns: &str) -> String {
    format!("{service}.{ns}.svc.cluster.local")
}

fn ip(text: &str) -> DnsAnswer {
    DnsAnswer::Ip(text.parse::<IpAddr>().unwrap())
}

fn cname(host: &str) -> DnsAnswer {
    DnsAnswer::Cname(host.to_string())
}

/// Ask CoreDNS and print what it answered (visible with `--nocapture`, for the record).
async fn ask(phase: &str, name: &str, record_type: &str) -> (String, Vec<DnsAnswer>) {
    let answer = dns_query(name, record_type).await;
    eprintln!(
        "[dns] {phase}: {name} {record_type} -> {} {:?}",
        answer.0, answer.1
    );
    answer
}

/// Wait until CoreDNS answers `name` `record_type` with exactly `rcode` and `records`; print every
/// different answer it gave on the way (visible with `--nocapture`).
async fn expect_dns(
    phase: &str,
    name: &str,
    record_type: &str,
    rcode: &str,
    records: &[DnsAnswer],
) {
    let mut want = records.to_vec();
    want.sort();
    let last: std::sync::Mutex<Option<(String, Vec<DnsAnswer>)>> = Default::default();
    let start = Instant::now();
    eventually(
        &format!("{phase}: CoreDNS answering {name} {record_type} with {rcode} {want:?}"),
        || {
            let (last, want) = (&last, &want);
            async move {
                let got = dns_query(name, record_type).await;
                let mut last = last.lock().unwrap();
                if last.as_ref() != Some(&got) {
                    eprintln!(
                        "[dns] {phase}: {name} {record_type} -> {} {:?} (after {:?})",
                        got.0,
                        got.1,
                        start.elapsed()
                    );
                    *last = Some(got.clone());
                }
                (got.0 == rcode && &got.1 == want).then_some(())
            }
        },
    )
    .await;
}

/// The IPv4 and IPv6 addresses and the hostnames of a LoadBalancer's `status.addresses`.
fn split(addresses: &[LoadBalancerAddress]) -> (Vec<DnsAnswer>, Vec<DnsAnswer>, Vec<DnsAnswer>) {
    let (mut v4, mut v6, mut hosts) = (Vec::new(), Vec::new(), Vec::new());
    for a in addresses {
        match a.type_ {
            AddressType::Hostname => hosts.push(cname(&a.address)),
            AddressType::Ip => match a.address.parse::<IpAddr>().unwrap() {
                addr @ IpAddr::V4(_) => v4.push(DnsAnswer::Ip(addr)),
                addr @ IpAddr::V6(_) => v6.push(DnsAnswer::Ip(addr)),
            },
        }
    }
    (v4, v6, hosts)
}

/// Create an InMemoryLoadBalancer with `spec` and a LoadBalancer `name` realised by it.
async fn create_lb(t: &TestNs, name: &str, spec: serde_json::Value) {
    t.create(in_memory(name, spec)).await;
    t.create(load_balancer(name, name, json!({}))).await;
}

fn is_ready(lb: Option<&LoadBalancer>) -> bool {
    lb.and_then(|l| l.status.as_ref()).is_some_and(|s| s.ready)
}

/// Wait until LoadBalancer `name` is Ready; returns its `status.addresses`.
async fn ready_addresses(t: &TestNs, name: &str) -> Vec<LoadBalancerAddress> {
    let lb = wait_for(
        &t.api::<LoadBalancer>(),
        name,
        "LoadBalancer Ready",
        is_ready,
    )
    .await
    .unwrap();
    lb.status.unwrap().addresses
}

/// Delete LoadBalancer `name` and wait until it is gone (its finalizer released).
async fn delete_lb(t: &TestNs, name: &str) {
    let lbs = t.api::<LoadBalancer>();
    lbs.delete(name, &DeleteParams::default()).await.unwrap();
    wait_gone(&lbs, name).await;
}

/// Write `status.loadBalancer.ingress` of Service `name` as a load-balancer implementation would.
async fn set_ingress(t: &TestNs, name: &str, ingress: serde_json::Value) {
    t.api::<Service>()
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"loadBalancer": {"ingress": ingress}}})),
        )
        .await
        .unwrap();
}

/// capi-lb's ServiceAccount, as the generated RBAC binds it.
const CONTROLLER_USER: &str = "system:serviceaccount:capi-lb-system:capi-lb-manager";

/// Whether the real authorizer lets capi-lb's ServiceAccount `verb` `resource` in `ns`.
async fn controller_may(t: &TestNs, verb: &str, group: &str, resource: &str) -> bool {
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {"user": CONTROLLER_USER,
                 "groups": ["system:serviceaccounts", "system:serviceaccounts:capi-lb-system",
                            "system:authenticated"],
                 "resourceAttributes": {"namespace": t.ns, "verb": verb, "group": group,
                                        "resource": resource}},
    }))
    .unwrap();
    Api::<SubjectAccessReview>::all(t.client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.allowed)
}

/// The resources the controller creates by server-side apply: an apply PATCH that creates an object
/// is authorized as `create` too.
const CREATED_BY_APPLY: [(&str, &str); 2] =
    [("", "services"), ("discovery.k8s.io", "endpointslices")];

/// A test namespace with the controller (in-memory provider) running.
async fn started(prefix: &str) -> TestNs {
    let mut t = TestNs::new(prefix).await;
    t.start(t.options(&["inmemory"]));
    t
}

// --- LoadBalancer ----------------------------------------------------------------------------------

/// A dual-stack LoadBalancer: CoreDNS answers exactly its addresses (A = the IPv4, AAAA = the IPv6),
/// follows an address change of both families, and answers NXDOMAIN once the LoadBalancer is deleted.
#[tokio::test]
async fn dual_stack_load_balancer_resolves_to_its_addresses_follows_changes_and_disappears() {
    let t = started("dns-dual").await;
    let name = fqdn("api-ext", &t.ns);

    // Nothing yet: the name does not exist.
    expect_dns("before creation", &name, "A", NXDOMAIN, &[]).await;

    create_lb(
        &t,
        "api",
        json!({"addressPools": ["203.0.113.0/24", "2001:db8:10::/64"]}),
    )
    .await;
    let addresses = ready_addresses(&t, "api").await;
    let (v4, v6, hosts) = split(&addresses);
    assert_eq!(
        (v4.clone(), v6.clone(), hosts),
        (vec![ip("203.0.113.1")], vec![ip("2001:db8:10::1")], vec![]),
        "one address from each pool: {addresses:?}"
    );
    expect_dns("ready", &name, "A", NOERROR, &v4).await;
    expect_dns("ready", &name, "AAAA", NOERROR, &v6).await;
    // Stable: repeated answers stay exactly the same (no stray record of the other family).
    for _ in 0..5 {
        assert_eq!(
            ask("ready, again", &name, "A").await,
            (NOERROR.into(), v4.clone())
        );
        assert_eq!(
            ask("ready, again", &name, "AAAA").await,
            (NOERROR.into(), v6.clone())
        );
    }

    // Address change: new pools for both families.
    t.api::<InMemoryLoadBalancer>()
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"spec": {"addressPools": ["198.51.100.0/24", "2001:db8:20::/64"]}}),
            ),
        )
        .await
        .unwrap();
    let lb = wait_for(
        &t.api::<LoadBalancer>(),
        "api",
        "the new addresses in status",
        |lb| {
            lb.and_then(|l| l.status.as_ref())
                .is_some_and(|s| s.ready && !s.addresses.is_empty() && s.addresses != addresses)
        },
    )
    .await
    .unwrap();
    let changed = lb.status.unwrap().addresses;
    let (new_v4, new_v6, _) = split(&changed);
    assert_eq!(
        (new_v4.clone(), new_v6.clone()),
        (vec![ip("198.51.100.1")], vec![ip("2001:db8:20::1")]),
        "{changed:?}"
    );
    expect_dns("after the address change", &name, "A", NOERROR, &new_v4).await;
    expect_dns("after the address change", &name, "AAAA", NOERROR, &new_v6).await;
    // The old addresses are gone for good, not flapping back.
    for _ in 0..5 {
        let (_, a) = ask("after the change, again", &name, "A").await;
        let (_, aaaa) = ask("after the change, again", &name, "AAAA").await;
        assert_eq!((a, aaaa), (new_v4.clone(), new_v6.clone()));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Deletion: the name stops existing.
    delete_lb(&t, "api").await;
    expect_dns("after deletion", &name, "A", NXDOMAIN, &[]).await;
    expect_dns("after deletion", &name, "AAAA", NXDOMAIN, &[]).await;
    t.finish().await;
}

/// While the load balancer is provisioning, its addresses are known (status.addresses, the -ext
/// EndpointSlices) but do not work yet: CoreDNS must not answer them. Once provisioned, it does.
#[tokio::test]
async fn no_address_is_answered_before_the_load_balancer_is_provisioned() {
    const DELAY: u64 = 12;
    let t = started("dns-prov").await;
    let name = fqdn("slow-ext", &t.ns);
    // Provisioning completes DELAY seconds after the provider was first asked, which is after
    // `created`: every answer given before `created + DELAY` is an answer for a load balancer that
    // is not provisioned, whatever the timing of the controller and CoreDNS.
    let created = Instant::now();
    create_lb(
        &t,
        "slow",
        json!({"addressPools": ["203.0.113.0/24", "2001:db8:30::/64"],
               "provisioningDelaySeconds": DELAY}),
    )
    .await;

    // The addresses are published, not ready.
    let slices = t.api::<EndpointSlice>();
    for family in ["ipv4", "ipv6"] {
        let slice = wait_for(
            &slices,
            &format!("slow-ext-{family}"),
            "the -ext slice published with a not-ready endpoint",
            |s| {
                s.and_then(|s| s.endpoints.first())
                    .is_some_and(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(false))
            },
        )
        .await
        .unwrap();
        eprintln!("[dns] provisioning: slice {family}: {:?}", slice.endpoints);
    }
    // The status is written after the slices, in the same pass.
    let lb = wait_for(
        &t.api::<LoadBalancer>(),
        "slow",
        "the provider's addresses in status while provisioning",
        |lb| {
            lb.and_then(|l| l.status.as_ref())
                .is_some_and(|s| !s.addresses.is_empty())
        },
    )
    .await
    .unwrap();
    let status = lb.status.unwrap();
    assert!(
        created.elapsed() < Duration::from_secs(DELAY),
        "too slow to observe provisioning"
    );
    assert!(!status.ready, "Ready before provisioning: {status:?}");
    let (v4, v6, _) = split(&status.addresses);
    assert!(!v4.is_empty() && !v6.is_empty(), "{:?}", status.addresses);

    // DNS while provisioning: no A, no AAAA, whatever the answer code is.
    let mut asked = 0;
    let mut seen = std::collections::BTreeSet::new();
    while created.elapsed() < Duration::from_secs(DELAY - 4) {
        for record_type in ["A", "AAAA"] {
            let (rcode, records) = dns_query(&name, record_type).await;
            assert!(
                created.elapsed() < Duration::from_secs(DELAY),
                "the answer may have come after provisioning"
            );
            assert!(
                records.is_empty(),
                "CoreDNS answered {name} {record_type} with {rcode} {records:?} before the load \
                 balancer was provisioned (after {:?})",
                created.elapsed()
            );
            if seen.insert((record_type, rcode.clone())) {
                eprintln!(
                    "[dns] provisioning: {name} {record_type} -> {rcode} [] (after {:?})",
                    created.elapsed()
                );
            }
            asked += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(asked >= 10, "only {asked} queries while provisioning");
    let lb = t.api::<LoadBalancer>().get("slow").await.unwrap();
    assert!(
        !lb.status.unwrap().ready,
        "Ready before the provisioning delay"
    );

    // Provisioned: both families answer.
    let addresses = ready_addresses(&t, "slow").await;
    assert!(
        created.elapsed() >= Duration::from_secs(DELAY),
        "Ready after {:?}, before the provisioning delay of {DELAY} s",
        created.elapsed()
    );
    let (v4, v6, _) = split(&addresses);
    expect_dns("provisioned", &name, "A", NOERROR, &v4).await;
    expect_dns("provisioned", &name, "AAAA", NOERROR, &v6).await;
    t.finish().await;
}

/// A hostname-only load balancer: CoreDNS answers a CNAME to the hostname (for CNAME and for A
/// queries), and NXDOMAIN after deletion.
#[tokio::test]
async fn hostname_only_load_balancer_resolves_to_a_cname() {
    let t = started("dns-host").await;
    let name = fqdn("web-ext", &t.ns);
    create_lb(
        &t,
        "web",
        json!({"addressPools": [], "hostname": "lb-1.example.net"}),
    )
    .await;
    let addresses = ready_addresses(&t, "web").await;
    let (v4, v6, hosts) = split(&addresses);
    assert!(v4.is_empty() && v6.is_empty(), "{addresses:?}");
    assert_eq!(hosts, vec![cname("lb-1.example.net")]);
    expect_dns("hostname-only", &name, "CNAME", NOERROR, &hosts).await;
    // An A query gets the CNAME too (the target is outside the cluster; no address is made up).
    let (rcode, records) = ask("hostname-only", &name, "A").await;
    assert_eq!(records, hosts, "{rcode}");

    // A hostname change is followed.
    t.api::<InMemoryLoadBalancer>()
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"hostname": "lb-2.example.net"}})),
        )
        .await
        .unwrap();
    expect_dns(
        "hostname changed",
        &name,
        "CNAME",
        NOERROR,
        &[cname("lb-2.example.net")],
    )
    .await;

    delete_lb(&t, "web").await;
    expect_dns("after deletion", &name, "CNAME", NXDOMAIN, &[]).await;
    expect_dns("after deletion", &name, "A", NXDOMAIN, &[]).await;
    t.finish().await;
}

/// A hostname-only load balancer's CNAME is not answered before it is provisioned: readiness is
/// carried by EndpointSlices, which an ExternalName Service does not have, so the `-ext` Service is
/// headless without endpoints until the load balancer is ready (DNS answers NXDOMAIN), and only then
/// an ExternalName. (Before this was fixed, CoreDNS answered the CNAME about 0.6 s after creation.)
#[tokio::test]
async fn no_cname_is_answered_before_a_hostname_only_load_balancer_is_provisioned() {
    const DELAY: u64 = 10;
    let t = started("dns-hprov").await;
    let name = fqdn("slowweb-ext", &t.ns);
    let created = Instant::now();
    create_lb(
        &t,
        "slowweb",
        json!({"addressPools": [], "hostname": "lb-slow.example.net",
               "provisioningDelaySeconds": DELAY}),
    )
    .await;
    // The provider reported the hostname; the load balancer is not provisioned.
    wait_for(
        &t.api::<LoadBalancer>(),
        "slowweb",
        "the hostname in status",
        |lb| {
            lb.and_then(|l| l.status.as_ref())
                .is_some_and(|s| !s.addresses.is_empty())
        },
    )
    .await;
    while created.elapsed() < Duration::from_secs(DELAY - 3) {
        for record_type in ["CNAME", "A"] {
            let (rcode, records) = dns_query(&name, record_type).await;
            assert!(created.elapsed() < Duration::from_secs(DELAY));
            assert!(
                records.is_empty(),
                "CoreDNS answered {name} {record_type} with {rcode} {records:?} after {:?}, \
                 before the load balancer was provisioned (delay {DELAY} s)",
                created.elapsed()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let hosts = split(&ready_addresses(&t, "slowweb").await).2;
    expect_dns("provisioned", &name, "CNAME", NOERROR, &hosts).await;
    t.finish().await;
}

// --- Services of type LoadBalancer (the -ext publisher) ---------------------------------------------

/// A plain Service of `type: LoadBalancer` whose ingress an implementation writes: CoreDNS answers
/// `<svc>-ext` with the ingress IPs (A and AAAA), follows an IP change and a switch to a hostname
/// ingress (CNAME), and stops answering when the ingress is withdrawn and when the Service is deleted.
#[tokio::test]
async fn service_of_type_load_balancer_resolves_through_its_ext_name() {
    let t = started("dns-svc").await;
    let name = fqdn("etcd-ext", &t.ns);
    t.create(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "etcd"},
        "spec": {"type": "LoadBalancer", "selector": {"app": "etcd"},
                 "ports": [{"name": "client", "port": 2379, "targetPort": 12379}]},
    }))
    .await;
    // No ingress yet: nothing is published.
    let (rcode, records) = ask("no ingress yet", &name, "A").await;
    assert_eq!((rcode.as_str(), records), (NXDOMAIN, vec![]));

    set_ingress(&t, "etcd", json!([{"ip": "198.51.100.7"}])).await;
    expect_dns(
        "ingress 198.51.100.7",
        &name,
        "A",
        NOERROR,
        &[ip("198.51.100.7")],
    )
    .await;
    let (rcode, records) = ask("ingress 198.51.100.7", &name, "AAAA").await;
    assert!(
        records.is_empty(),
        "AAAA of an IPv4-only ingress: {rcode} {records:?}"
    );

    // The implementation moves the load balancer, and adds an IPv6 address.
    set_ingress(
        &t,
        "etcd",
        json!([{"ip": "198.51.100.8"}, {"ip": "2001:db8:40::8"}]),
    )
    .await;
    expect_dns(
        "ingress changed",
        &name,
        "A",
        NOERROR,
        &[ip("198.51.100.8")],
    )
    .await;
    expect_dns(
        "ingress changed",
        &name,
        "AAAA",
        NOERROR,
        &[ip("2001:db8:40::8")],
    )
    .await;

    // A hostname ingress: a CNAME, and no address records left over from the slices.
    set_ingress(&t, "etcd", json!([{"hostname": "etcd.lb.example.net"}])).await;
    expect_dns(
        "hostname ingress",
        &name,
        "CNAME",
        NOERROR,
        &[cname("etcd.lb.example.net")],
    )
    .await;
    let (rcode, records) = ask("hostname ingress", &name, "A").await;
    assert_eq!(records, vec![cname("etcd.lb.example.net")], "{rcode}");
    // The ExternalName Service answers as soon as it is recreated; its EndpointSlices go right
    // after (capi-lb removes them in the same pass, the garbage collector too: their owner is gone).
    eventually("no EndpointSlice for the hostname ingress", || async {
        let slices = t
            .api::<EndpointSlice>()
            .list(&ListParams::default().labels("kubernetes.io/service-name=etcd-ext"))
            .await
            .unwrap();
        slices.items.is_empty().then_some(())
    })
    .await;

    // Back to an IP, then the ingress is withdrawn: the name goes away.
    set_ingress(&t, "etcd", json!([{"ip": "198.51.100.9"}])).await;
    expect_dns("back to an IP", &name, "A", NOERROR, &[ip("198.51.100.9")]).await;
    expect_dns("back to an IP", &name, "CNAME", NOERROR, &[]).await;
    set_ingress(&t, "etcd", json!([])).await;
    expect_dns("ingress withdrawn", &name, "A", NXDOMAIN, &[]).await;

    // Published again, then the source Service is deleted.
    set_ingress(&t, "etcd", json!([{"ip": "198.51.100.10"}])).await;
    expect_dns(
        "published again",
        &name,
        "A",
        NOERROR,
        &[ip("198.51.100.10")],
    )
    .await;
    let services: Api<Service> = t.api();
    services
        .delete("etcd", &DeleteParams::default())
        .await
        .unwrap();
    expect_dns("source deleted", &name, "A", NXDOMAIN, &[]).await;
    wait_gone(&services, "etcd-ext").await;
    t.finish().await;
}

/// capi-lb creates the `-ext` Service and its slices by server-side apply, and the apiserver
/// authorizes an apply that creates an object as `create`: the generated RBAC must grant it (it did
/// not, and on a real cluster no `-ext` name was ever published). Checked with the real authorizer
/// (SubjectAccessReview) and by publishing with nothing but the generated RBAC.
#[tokio::test]
async fn the_generated_rbac_lets_the_controller_create_the_ext_objects() {
    let mut t = TestNs::new("dns-rbac").await;
    for (group, resource) in CREATED_BY_APPLY {
        assert!(
            controller_may(&t, "create", group, resource).await,
            "capi-lb's ServiceAccount may not create {resource} ({group:?}): server-side apply of a \
             new object needs it"
        );
    }
    t.start(t.options(&["inmemory"]));
    create_lb(&t, "api", json!({"addressPools": ["203.0.113.0/24"]})).await;
    let (v4, _, _) = split(&ready_addresses(&t, "api").await);
    expect_dns(
        "generated RBAC only",
        &fqdn("api-ext", &t.ns),
        "A",
        NOERROR,
        &v4,
    )
    .await;
    t.finish().await;
}
