//! The DNS name policy on a real apiserver, with the real RBAC: names are not first come, first
//! served. The admin starts capi-lb with `--dns-domains={namespace}.capi-lb.test`; tenant A (user
//! `tenant`, a Role of its namespace, impersonated) asks for a name of its own, one in tenant B's
//! domain (before B does), a wildcard, and tries to override capi-lb's own label on the
//! `DNSEndpoint`:
//!
//! - only its own name gets a record; DNSPublished is False `HostnameNotAllowed` naming the two
//!   refused names and their rules, with a Warning Event;
//! - the `DNSEndpoint` keeps capi-lb's `app.kubernetes.io/managed-by` (the tenant's other labels
//!   are kept);
//! - tenant B then publishes its name: A did not squat it;
//! - the admin allows A wildcards (its Namespace's annotation): the wildcard is published;
//! - a Service's `hostnames` annotation is under the same policy: a name outside the namespace's
//!   domains gets a Warning Event on the Service and no record.

use capi_lb_api::LoadBalancer;
use capi_lb_tests::k8s::{
    TestNs, condition, dynamic_api, eventually, in_memory, load_balancer, merge, wait_for,
};
use capi_lb_tests::tenant::{create_as, grant_tenant, tenant_client};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

/// The domain of namespace `ns` under the admin's `--dns-domains`.
fn domain(ns: &str) -> String {
    format!("{ns}.capi-lb.test")
}

/// The `DNSEndpoint` `name` of `t`'s namespace, if any.
async fn dns_endpoint(t: &TestNs, name: &str) -> Option<DynamicObject> {
    let kind = json!({"apiVersion": "externaldns.k8s.io/v1alpha1", "kind": "DNSEndpoint"});
    dynamic_api(&t.client, Some(&t.ns), &kind)
        .await
        .unwrap()
        .get_opt(name)
        .await
        .unwrap()
}

/// The DNS names of `DNSEndpoint` `name`'s records.
async fn record_names(t: &TestNs, name: &str) -> Vec<String> {
    let Some(endpoint) = dns_endpoint(t, name).await else {
        return Vec::new();
    };
    let mut names: Vec<String> = endpoint.data["spec"]["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["dnsName"].as_str().map(str::to_string))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// A controller of `t`'s namespace under the admin's name policy.
fn start(t: &mut TestNs) {
    let mut options = t.options(&["inmemory"]);
    options.dns_domains = vec!["{namespace}.capi-lb.test".into()];
    t.start(options);
}

/// A Warning Event `reason` on object `name` whose note contains `text`.
async fn warned(t: &TestNs, reason: &str, name: &str, text: &str) {
    let events: Api<Event> = t.api();
    eventually(&format!("a Warning Event {reason} on {name}"), || async {
        let list = events.list(&ListParams::default()).await.unwrap();
        list.items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.type_.as_deref() == Some("Warning")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                    && e.note.as_deref().is_some_and(|n| n.contains(text))
            })
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn names_outside_a_namespaces_domains_are_refused_and_cannot_be_squatted() {
    let mut a = TestNs::new("names-a").await;
    let mut b = TestNs::new("names-b").await;
    let tenant = tenant_client().await;
    grant_tenant(&a, &tenant).await;
    start(&mut a);
    start(&mut b);

    let own = format!("web.{}", domain(&a.ns));
    let theirs = format!("api.{}", domain(&b.ns));
    let wildcard = format!("*.apps.{}", domain(&a.ns));
    create_as(&tenant, &a.ns, &in_memory("web", json!({})))
        .await
        .unwrap();
    let mut lb = load_balancer("web", "web", json!({}));
    lb["spec"]["dns"] = json!({
        "hostnames": [own, theirs, wildcard],
        "labels": {"app.kubernetes.io/managed-by": "someone-else", "team": "a"}});
    create_as(&tenant, &a.ns, &lb).await.unwrap();

    let lbs: Api<LoadBalancer> = a.api();
    let lb = wait_for(&lbs, "web", "DNSPublished HostnameNotAllowed", |l| {
        l.and_then(|l| condition(l, "DNSPublished"))
            .is_some_and(|(s, r)| s == "False" && r == "HostnameNotAllowed")
    })
    .await
    .unwrap();
    let message = lb
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "DNSPublished")
        .unwrap()
        .message;
    assert!(
        message.contains(&theirs) && message.contains("outside the namespace's DNS domains"),
        "{message}"
    );
    assert!(
        message.contains(&wildcard) && message.contains("wildcard"),
        "{message}"
    );
    assert!(!message.contains(&format!("{own} (")), "{message}");
    eventually("only the namespace's own name has a record", || async {
        (record_names(&a, "web").await == [own.clone()]).then_some(())
    })
    .await;
    let labels = dns_endpoint(&a, "web")
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap();
    assert_eq!(labels["app.kubernetes.io/managed-by"], "capi-lb");
    assert_eq!(labels["team"], "a");
    warned(&a, "HostnameNotAllowed", "web", &theirs).await;

    // B's own name is still B's: A asked first and got nothing.
    b.create(in_memory("api", json!({}))).await;
    let mut lb = load_balancer("api", "api", json!({}));
    lb["spec"]["dns"] = json!({"hostnames": [theirs]});
    b.create(lb).await;
    let b_lbs: Api<LoadBalancer> = b.api();
    wait_for(&b_lbs, "api", "B's DNSEndpoint taken by ExternalDNS", |l| {
        l.and_then(|l| condition(l, "DNSPublished"))
            .is_some_and(|(_, r)| r == "RecordsObserved" || r == "NotObserved")
    })
    .await
    .unwrap();
    assert_eq!(record_names(&b, "api").await, std::slice::from_ref(&theirs));

    // The admin lets A publish wildcards.
    let namespaces: Api<Namespace> = Api::all(a.client.clone());
    merge(
        &namespaces,
        &a.ns,
        json!({"metadata": {"annotations": {"loadbalancer.cluster.x-k8s.io/dns-wildcards": "true"}}}),
    )
    .await;
    eventually("the wildcard published", || async {
        let names = record_names(&a, "web").await;
        (names.contains(&wildcard) && !names.contains(&theirs)).then_some(())
    })
    .await;

    // A Service's hostnames annotation is under the same policy.
    let service: Value = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "etcd", "namespace": a.ns,
                     "annotations": {"loadbalancer.cluster.x-k8s.io/hostnames":
                                     format!("etcd.{},{}", domain(&a.ns), format!("etcd.{}", domain(&b.ns)))}},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "names.capi-lb.test/none",
                 "ports": [{"name": "etcd", "port": 2379, "protocol": "TCP"}]}});
    a.create(service).await;
    Api::<Service>::namespaced(a.client.clone(), &a.ns)
        .patch_status(
            "etcd",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.7"}]}}}),
            ),
        )
        .await
        .unwrap();
    warned(
        &a,
        "HostnameNotAllowed",
        "etcd",
        &format!("etcd.{}", domain(&b.ns)),
    )
    .await;
    eventually("the Service's own name only", || async {
        (record_names(&a, "etcd-ext").await == [format!("etcd.{}", domain(&a.ns))]).then_some(())
    })
    .await;

    a.finish().await;
    b.finish().await;
}
