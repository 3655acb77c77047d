//! The address policy on a real apiserver, with the real RBAC: a tenant (user `tenant`, a Role of
//! the namespace, impersonated) points in-memory load balancers at addresses no tenant may publish,
//! and none of them is published anywhere.
//!
//! The controller runs as an admin would start it: `--address-allow=inmemory=203.0.113.0/24` and
//! `--address-deny=203.0.113.128/25`. The tenant's pools give the cloud metadata address
//! 169.254.169.254, a loopback address, the ClusterIP of `default/kubernetes`, an address outside
//! the allow-list and one in the denied range. Each LoadBalancer:
//!
//! - has Ready and EndpointPublished False `AddressRefused`, with a message naming the address and
//!   its rule, and a Warning Event `AddressRefused` saying the same;
//! - publishes nothing: no `-ext` EndpointSlice with an address, no record in its `DNSEndpoint`,
//!   and (the metadata one, a control-plane LoadBalancer of a Cluster that names it) no
//!   `Cluster.spec.controlPlaneEndpoint`;
//! - loses nothing else: its load balancer stays in the cloud.
//!
//! An allowed address is published as before. Then the admin narrows the namespace with its
//! `allowed-addresses` annotation: that LoadBalancer's address is withdrawn (the Namespace watch
//! triggers it), and published again when the annotation allows it.

use capi_lb_api::LoadBalancer;
use capi_lb_tests::k8s::{
    TestNs, capi_api, capi_cluster, condition, eventually, in_memory, install_capi_crds,
    load_balancer, merge, wait_for,
};
use capi_lb_tests::tenant::{create_as, grant_tenant, tenant_client};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

/// The watch filter of this test's controller, which watches every namespace (so that it sees the
/// ClusterIP of `default/kubernetes`) but reconciles only this test's LoadBalancers.
const FILTER: &str = "addresses-test";
/// The watch filter of the mapped-forms test's controller (the first test's watches every
/// namespace).
const MAPPED_FILTER: &str = "addresses-mapped-test";

/// The addresses of LoadBalancer `lb`'s `-ext` EndpointSlices.
async fn published(t: &TestNs, lb: &str) -> Vec<String> {
    let slices: Api<EndpointSlice> = t.api();
    slices
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={lb}-ext")))
        .await
        .unwrap()
        .items
        .into_iter()
        .flat_map(|s| s.endpoints)
        .flat_map(|e| e.addresses)
        .collect()
}

/// LoadBalancer `name`'s DNSEndpoint, if there is one, holds no record.
async fn assert_no_dns_records(t: &TestNs, name: &str) {
    let dns = capi_lb_tests::k8s::dynamic_api(
        &t.client,
        Some(&t.ns),
        &json!({"apiVersion": "externaldns.k8s.io/v1alpha1", "kind": "DNSEndpoint"}),
    )
    .await
    .unwrap();
    if let Some(endpoint) = dns.get_opt(name).await.unwrap() {
        let records = endpoint.data["spec"]["endpoints"].as_array().cloned();
        assert!(
            records.unwrap_or_default().is_empty(),
            "{name}: DNS records {endpoint:?}"
        );
    }
}

/// Status, reason and message of condition `type_` of LoadBalancer `name`.
async fn condition_of(t: &TestNs, name: &str, type_: &str) -> (String, String, String) {
    let lb = t.api::<LoadBalancer>().get(name).await.unwrap();
    lb.status
        .unwrap_or_default()
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason, c.message))
        .unwrap_or_default()
}

/// An in-memory LoadBalancer `name` on pool `pool`, with DNS names, created by the tenant.
async fn tenant_lb(t: &TestNs, tenant: &kube::Client, name: &str, pool: &str, spec: Value) {
    create_as(
        tenant,
        &t.ns,
        &in_memory(name, json!({"addressPools": [pool]})),
    )
    .await
    .unwrap();
    let mut doc = load_balancer(name, name, spec);
    doc["metadata"]["labels"] = json!({"cluster.x-k8s.io/watch-filter": FILTER});
    doc["spec"]["dns"] = json!({"hostnames": [format!("{name}.{}.capi-lb.test", t.ns)]});
    create_as(tenant, &t.ns, &doc).await.unwrap();
}

#[tokio::test]
async fn refused_addresses_are_published_nowhere_and_nothing_else_is_lost() {
    let mut t = TestNs::new("addresses").await;
    install_capi_crds(&t.client).await;
    let tenant = tenant_client().await;
    grant_tenant(&t, &tenant).await;
    let cluster_ip = Api::<Service>::namespaced(t.client.clone(), "default")
        .get("kubernetes")
        .await
        .unwrap()
        .spec
        .unwrap()
        .cluster_ip
        .unwrap();

    // A control-plane LoadBalancer of a Cluster that names it: its endpoint would go into the
    // Cluster's certificates.
    let mut cluster = capi_cluster("demo");
    cluster["metadata"]["annotations"] =
        json!({"loadbalancer.cluster.x-k8s.io/loadBalancerRef": "metadata"});
    t.create(cluster).await;
    let refused = [
        (
            "metadata",
            "169.254.169.254/32",
            "169.254.169.254",
            "metadata address",
        ),
        ("loopback", "127.0.0.1/32", "127.0.0.1", "loopback"),
        (
            "clusterip",
            &format!("{cluster_ip}/32"),
            cluster_ip.as_str(),
            "ClusterIP",
        ),
        (
            "outside",
            "198.51.100.7/32",
            "198.51.100.7",
            "--address-allow",
        ),
        (
            "denied",
            "203.0.113.200/32",
            "203.0.113.200",
            "--address-deny",
        ),
    ];
    for (name, pool, _, _) in &refused {
        let spec = if *name == "metadata" {
            json!({"clusterName": "demo", "controlPlane": {"endpointHost": "ProviderAddress"}})
        } else {
            json!({})
        };
        tenant_lb(&t, &tenant, name, pool, spec).await;
    }
    tenant_lb(&t, &tenant, "fine", "203.0.113.5/32", json!({})).await;

    let mut options = t.options(&["inmemory"]);
    options.namespace = None;
    options.watch_filter = Some(FILTER.into());
    options.external.enabled = false;
    options.address_allow = vec![("inmemory".into(), "203.0.113.0/24".parse().unwrap())];
    options.address_deny = vec!["203.0.113.128/25".parse().unwrap()];
    t.start(options);

    let lbs: Api<LoadBalancer> = t.api();
    wait_for(&lbs, "fine", "the allowed LoadBalancer Ready", |l| {
        l.and_then(|l| l.status.as_ref()).is_some_and(|s| s.ready)
    })
    .await
    .unwrap();
    assert_eq!(published(&t, "fine").await, ["203.0.113.5"]);

    let events: Api<Event> = t.api();
    for (name, _, address, rule) in &refused {
        wait_for(&lbs, name, "Ready False AddressRefused", |l| {
            l.and_then(|l| condition(l, "Ready"))
                .is_some_and(|(s, r)| s == "False" && r == "AddressRefused")
        })
        .await
        .unwrap();
        let (status, reason, message) = condition_of(&t, name, "EndpointPublished").await;
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "AddressRefused")
        );
        assert!(
            message.contains(address) && message.contains(rule),
            "{name}: {message}"
        );
        // The provider's load balancer is there (its address in the status), nothing published.
        let lb = lbs.get(name).await.unwrap();
        let status = lb.status.unwrap();
        assert!(
            status.addresses.iter().any(|a| a.address == *address),
            "{name}: {:?}",
            status.addresses
        );
        assert!(
            published(&t, name).await.is_empty(),
            "{name}: published {:?}",
            published(&t, name).await
        );
        assert_no_dns_records(&t, name).await;
        eventually(
            &format!("a Warning Event AddressRefused for {name}"),
            || async {
                let list = events.list(&ListParams::default()).await.unwrap();
                list.items
                    .iter()
                    .any(|e| {
                        e.reason.as_deref() == Some("AddressRefused")
                            && e.type_.as_deref() == Some("Warning")
                            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(*name)
                            && e.note.as_deref().is_some_and(|n| n.contains(address))
                    })
                    .then_some(())
            },
        )
        .await;
    }
    // The Cluster's endpoint was not written from the refused address.
    let clusters = capi_api(&t.client, &t.ns, "Cluster").await.unwrap();
    let demo = clusters.get("demo").await.unwrap();
    let endpoint = &demo.data["spec"]["controlPlaneEndpoint"];
    assert!(
        endpoint.get("host").is_none_or(|h| h.as_str() == Some("")),
        "the Cluster's endpoint: {endpoint}"
    );

    // The admin narrows the namespace: the allowed LoadBalancer's address is withdrawn at once,
    // then published again when the namespace allows it.
    let namespaces: Api<Namespace> = Api::all(t.client.clone());
    let annotate = |value: &str| json!({"metadata": {"annotations": {"loadbalancer.cluster.x-k8s.io/allowed-addresses": value}}});
    merge(&namespaces, &t.ns, annotate("203.0.113.64/26")).await;
    wait_for(&lbs, "fine", "fine refused by the namespace", |l| {
        l.and_then(|l| condition(l, "Ready"))
            .is_some_and(|(s, r)| s == "False" && r == "AddressRefused")
    })
    .await
    .unwrap();
    let (_, _, message) = condition_of(&t, "fine", "EndpointPublished").await;
    assert!(message.contains("allowed-addresses"), "{message}");
    assert!(published(&t, "fine").await.is_empty());
    merge(&namespaces, &t.ns, annotate("203.0.113.0/28")).await;
    wait_for(&lbs, "fine", "fine Ready again", |l| {
        l.and_then(|l| l.status.as_ref()).is_some_and(|s| s.ready)
    })
    .await
    .unwrap();
    assert_eq!(published(&t, "fine").await, ["203.0.113.5"]);

    t.finish().await;
}

/// The IPv4-mapped IPv6 form of an address is that address, on the real apiserver with the real
/// controller: a provider answering `::ffff:169.254.169.254`, `::ffff:127.0.0.1` and
/// `::ffff:203.0.113.200` (denied) for a tenant's LoadBalancers (as a tenant's remote kube-dc server
/// or a cloud could) has them refused by the one check of the publication stage, with publication
/// on and off: no `-ext` address, no DNS record, not the Cluster's endpoint, not a class Service's
/// ingress, not `status.endpoint`, and `status.addresses` in the canonical form. The mapped form of
/// an allowed address is published in its IPv4 form. (The same in the in-memory world, and the
/// DNS provider's path with Machines reporting mapped forms: `integration/isolation.rs`,
/// `e2e/consent.rs`.)
#[tokio::test]
async fn mapped_forms_of_refused_addresses_are_refused_on_every_destination() {
    let mut t = TestNs::new("addr-mapped").await;
    install_capi_crds(&t.client).await;
    let mut mapped = std::collections::BTreeMap::new();
    for on in [true, false] {
        let suffix = if on { "on" } else { "off" };
        let lb_of = |base: &str| format!("{base}-{suffix}");
        let cases = [
            ("metadata", "169.254.169.254"),
            ("loopback", "127.0.0.1"),
            ("denied", "203.0.113.200"),
            ("svc", "127.0.0.2"),
            ("fine", "203.0.113.5"),
        ];
        t.create(capi_lb_tests::k8s::capi_cluster_naming(
            &format!("demo-{suffix}"),
            &lb_of("metadata"),
        ))
        .await;
        for (base, address) in cases {
            let name = lb_of(base);
            mapped.insert(name.clone(), address.to_string());
            t.create(in_memory(
                &name,
                json!({"addressPools": ["203.0.113.0/28"]}),
            ))
            .await;
            let mut doc = load_balancer(&name, &name, json!({}));
            doc["metadata"]["labels"] = json!({"cluster.x-k8s.io/watch-filter": MAPPED_FILTER});
            doc["spec"]["dns"] = json!({"hostnames": [format!("{name}.{}.capi-lb.test", t.ns)]});
            doc["spec"]["publication"] = json!({"enabled": on});
            if base == "metadata" {
                doc["spec"]["clusterName"] = json!(format!("demo-{suffix}"));
                doc["spec"]["controlPlane"] = json!({"endpointHost": "ProviderAddress"});
            }
            if base == "svc" {
                doc["metadata"]["annotations"] =
                    json!({"loadbalancer.cluster.x-k8s.io/service": format!("svc-{suffix}")});
                t.create(json!({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": format!("svc-{suffix}"),
                                 "annotations": {"loadbalancer.cluster.x-k8s.io/load-balancer-ref": name}},
                    "spec": {"type": "LoadBalancer", "loadBalancerClass": "loadbalancer.cluster.x-k8s.io/capi-lb",
                             "ports": [{"name": "https", "port": 6443, "targetPort": 6443}]}}))
                    .await;
            }
            t.create(doc).await;
        }
    }
    let mut options = t.options(&["inmemory"]);
    options.watch_filter = Some(MAPPED_FILTER.into());
    options.external.enabled = false;
    options.address_allow = vec![("inmemory".into(), "203.0.113.0/24".parse().unwrap())];
    options.address_deny = vec!["203.0.113.128/25".parse().unwrap()];
    let answers = mapped.clone();
    t.start_wrapped(
        options,
        std::sync::Arc::new(move |_, real| {
            std::sync::Arc::new(capi_lb_tests::hostile::MappedAddresses {
                real,
                mapped: answers.clone(),
            })
        }),
    );

    let lbs: Api<LoadBalancer> = t.api();
    for on in [true, false] {
        let suffix = if on { "on" } else { "off" };
        let fine = format!("fine-{suffix}");
        wait_for(&lbs, &fine, "the allowed LoadBalancer Ready", |l| {
            l.and_then(|l| l.status.as_ref()).is_some_and(|s| s.ready)
        })
        .await
        .unwrap();
        let status = lbs.get(&fine).await.unwrap().status.unwrap();
        assert_eq!(status.addresses[0].address, "203.0.113.5", "canonical");
        if on {
            assert_eq!(published(&t, &fine).await, ["203.0.113.5"]);
        } else {
            let endpoint = status.endpoint.unwrap();
            assert_eq!(endpoint.host, "203.0.113.5", "{fine}: the canonical form");
        }
    }
    for (name, address) in mapped.iter().filter(|(n, _)| !n.starts_with("fine")) {
        wait_for(&lbs, name, "EndpointPublished False AddressRefused", |l| {
            l.and_then(|l| condition(l, "EndpointPublished"))
                .is_some_and(|(s, r)| s == "False" && r == "AddressRefused")
        })
        .await
        .unwrap();
        let lb = lbs.get(name).await.unwrap();
        let status = lb.status.unwrap();
        let (_, _, message) = condition_of(&t, name, "EndpointPublished").await;
        assert!(message.contains(address.as_str()), "{name}: {message}");
        assert_eq!(
            status
                .addresses
                .iter()
                .map(|a| a.address.as_str())
                .collect::<Vec<_>>(),
            [address.as_str()],
            "{name}: canonical in the status"
        );
        assert!(!status.ready, "{name}");
        // Never the refused address in either form.
        if let Some(endpoint) = &status.endpoint {
            assert!(
                !endpoint.host.contains(address.as_str()),
                "{name}: status.endpoint {endpoint:?}"
            );
        }
        assert!(published(&t, name).await.is_empty(), "{name}: -ext");
        assert_no_dns_records(&t, name).await;
    }
    let clusters = capi_api(&t.client, &t.ns, "Cluster").await.unwrap();
    let services: Api<Service> = t.api();
    for suffix in ["on", "off"] {
        let demo = clusters.get(&format!("demo-{suffix}")).await.unwrap();
        let endpoint = &demo.data["spec"]["controlPlaneEndpoint"];
        assert!(
            endpoint.get("host").is_none_or(|h| h.as_str() == Some("")),
            "demo-{suffix}'s endpoint: {endpoint}"
        );
        let svc = services.get(&format!("svc-{suffix}")).await.unwrap();
        let ingress = svc
            .status
            .and_then(|s| s.load_balancer)
            .and_then(|l| l.ingress)
            .unwrap_or_default();
        assert!(ingress.is_empty(), "svc-{suffix}'s ingress: {ingress:?}");
    }
    t.finish().await;
}
