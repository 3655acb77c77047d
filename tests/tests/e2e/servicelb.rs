//! The Service provider against the real thing: a real apiserver and controller manager
//! (`tests/k8s/harness.sh`) with MetalLB's real controller serving the class the harness gives it
//! (`CAPI_LB_E2E_METALLB_CLASS`, addresses from `CAPI_LB_E2E_METALLB_POOL`), and CoreDNS answering
//! the `-ext` names. capi-lb runs in this process as its ServiceAccount (the real authorizer checks
//! the generated RBAC), with a resync of one hour so that only watches and requeues drive it.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use capi_lb_api::capi::Machine;
use capi_lb_api::target::TargetKeys;
use capi_lb_api::{InMemoryLoadBalancer, LoadBalancer, ServiceLoadBalancer};
use capi_lb_tests::k8s::{
    DnsAnswer, TestNs, condition, dns_query, eventually, in_memory, install_capi_crds,
    load_balancer, machine, metallb, release_machine, set_machine_ip, wait_for, wait_gone,
    wait_ready,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

fn service_load_balancer(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "ServiceLoadBalancer",
           "metadata": {"name": name}, "spec": spec})
}

/// A LoadBalancer on the ServiceLoadBalancer `infra`.
fn on_service(name: &str, infra: &str, spec: Value) -> Value {
    let mut lb = load_balancer(name, infra, spec);
    lb["spec"]["infrastructureRef"]["kind"] = json!("ServiceLoadBalancer");
    lb
}

async fn create_machine(t: &TestNs, name: &str, lb: &str, ip: &str) {
    t.create(machine(
        name,
        json!({"loadbalancer.cluster.x-k8s.io/name": lb}),
    ))
    .await;
    set_machine_ip(t, name, ip).await;
}

async fn wait_target_state(t: &TestNs, lb: &str, machine: &str, state: &str) {
    let key = TargetKeys::new(&t.ns, lb).state;
    wait_for(
        &t.api::<Machine>(),
        machine,
        &format!("{machine} {state} in {lb}"),
        |m| m.is_some_and(|m| m.annotations().get(&key).map(String::as_str) == Some(state)),
    )
    .await;
}

/// The endpoints of EndpointSlice `name`: (address, ready, serving, terminating), sorted.
fn endpoints(slice: &EndpointSlice) -> Vec<(String, bool, bool, bool)> {
    let mut out: Vec<_> = slice
        .endpoints
        .iter()
        .map(|e| {
            let c = e.conditions.clone().unwrap_or_default();
            (
                e.addresses[0].clone(),
                c.ready.unwrap_or(true),
                c.serving.unwrap_or(true),
                c.terminating.unwrap_or(false),
            )
        })
        .collect();
    out.sort();
    out
}

async fn wait_endpoints(t: &TestNs, slice: &str, want: &[(&str, bool, bool, bool)]) {
    let want: Vec<(String, bool, bool, bool)> = want
        .iter()
        .map(|(a, r, s, x)| (a.to_string(), *r, *s, *x))
        .collect();
    wait_for(
        &t.api::<EndpointSlice>(),
        slice,
        &format!("{slice} with {want:?}"),
        |s| s.is_some_and(|s| endpoints(s) == want),
    )
    .await;
}

/// The LoadBalancer's first address, which must be in MetalLB's pool.
fn metallb_address(lb: &LoadBalancer) -> String {
    let address = lb.status.as_ref().unwrap().addresses[0].address.clone();
    let ip: IpAddr = address.parse().unwrap();
    assert!(
        metallb().pool.contains(&ip),
        "{address} is not from MetalLB's pool {}",
        metallb().pool
    );
    address
}

/// A LoadBalancer on MetalLB: MetalLB gives the Service an address from its pool, capi-lb publishes
/// it on `-ext` (CoreDNS answers it), the members follow the Machines with drain, and deleting the
/// LoadBalancer frees MetalLB's address.
#[tokio::test]
async fn a_load_balancer_on_metallb_publishes_its_address_drains_members_and_frees_it() {
    let mut t = TestNs::new("e2e-metallb").await;
    install_capi_crds(&t.client).await;
    t.start(t.options(&["service"]));
    let class = metallb().class.clone();
    t.create(service_load_balancer(
        "metal",
        json!({"loadBalancerClass": class, "allocateLoadBalancerNodePorts": false,
               "labels": {"team": "platform"}}),
    ))
    .await;
    t.create(on_service(
        "cp",
        "metal",
        json!({"drainSeconds": 3, "sourceRanges": ["10.0.0.0/8"]}),
    ))
    .await;
    create_machine(&t, "cp-m1", "cp", "10.0.0.11").await;
    create_machine(&t, "cp-m2", "cp", "10.0.0.12").await;

    let ready = wait_ready(&t, "cp").await;
    let address = metallb_address(&ready);
    assert_eq!(
        condition(&ready, "SpecHonoured"),
        Some(("True".into(), "Honoured".into()))
    );
    // The Service capi-lb made, as MetalLB served it.
    let service = t.api::<Service>().get("metal-lb").await.unwrap();
    let spec = service.spec.clone().unwrap();
    assert_eq!(spec.load_balancer_class.as_deref(), Some(class.as_str()));
    assert_eq!(spec.selector, None);
    assert_eq!(spec.allocate_load_balancer_node_ports, Some(false));
    assert_eq!(
        spec.load_balancer_source_ranges,
        Some(vec!["10.0.0.0/8".to_string()])
    );
    assert_eq!(
        service.labels().get("team").map(String::as_str),
        Some("platform")
    );
    assert_eq!(service.owner_references()[0].uid, ready.uid().unwrap());
    assert!(
        service
            .annotations()
            .contains_key("metallb.io/ip-allocated-from-pool"),
        "MetalLB's own annotation: {:?}",
        service.annotations()
    );
    let infra = t.api::<ServiceLoadBalancer>().get("metal").await.unwrap();
    let status = infra.status.unwrap();
    assert_eq!(status.addresses, std::slice::from_ref(&address));
    assert!(status.ready);

    // The stable name resolves to MetalLB's address through the real CoreDNS.
    let name = format!("cp-ext.{}.svc.cluster.local", t.ns);
    let expected = DnsAnswer::Ip(address.parse().unwrap());
    eventually(&format!("{name} resolves to {address}"), || async {
        (dns_query(&name, "A").await.1 == vec![expected.clone()]).then_some(())
    })
    .await;

    // The members, then a drain: serving and terminating, not ready; then gone.
    wait_endpoints(
        &t,
        "metal-lb-ipv4",
        &[
            ("10.0.0.11", true, true, false),
            ("10.0.0.12", true, true, false),
        ],
    )
    .await;
    wait_target_state(&t, "cp", "cp-m2", "active").await;
    t.api::<Machine>()
        .patch(
            "cp-m2",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {"loadbalancer.cluster.x-k8s.io/disabled": "maintenance"}}})),
        )
        .await
        .unwrap();
    wait_endpoints(
        &t,
        "metal-lb-ipv4",
        &[
            ("10.0.0.11", true, true, false),
            ("10.0.0.12", false, true, true),
        ],
    )
    .await;
    let drain_seen = Instant::now();
    wait_endpoints(&t, "metal-lb-ipv4", &[("10.0.0.11", true, true, false)]).await;
    assert!(
        drain_seen.elapsed() >= Duration::from_secs(2),
        "the member left after {:?}, before the drain time",
        drain_seen.elapsed()
    );
    wait_target_state(&t, "cp", "cp-m2", "disabled").await;

    // Deleting the LoadBalancer deletes the Service, and MetalLB frees the address: a new Service
    // asking for exactly that address gets it.
    t.api::<LoadBalancer>()
        .delete("cp", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&t.api::<Service>(), "metal-lb").await;
    wait_gone(&t.api::<LoadBalancer>(), "cp").await;
    t.create(json!({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "reuse", "annotations": {"metallb.io/loadBalancerIPs": address}},
                    "spec": {"type": "LoadBalancer", "loadBalancerClass": class,
                             "ports": [{"name": "https", "port": 443}]}}))
        .await;
    wait_for(
        &t.api::<Service>(),
        "reuse",
        "the freed address given again",
        |s| {
            s.and_then(|s| {
                s.status
                    .clone()?
                    .load_balancer?
                    .ingress?
                    .first()?
                    .ip
                    .clone()
            })
            .as_deref()
                == Some(address.as_str())
        },
    )
    .await;
    for m in ["cp-m1", "cp-m2"] {
        t.api::<Machine>()
            .delete(m, &DeleteParams::default())
            .await
            .unwrap();
        release_machine(&t, m).await;
    }
    t.finish().await;
}

/// A provider swap from the in-memory provider to MetalLB keeps the stable name and switches the
/// published address make-before-break.
#[tokio::test]
async fn a_swap_from_the_in_memory_provider_to_metallb_keeps_the_endpoint() {
    let mut t = TestNs::new("e2e-metallb-swap").await;
    t.start(t.options(&["inmemory", "service"]));
    t.create(in_memory(
        "old",
        json!({"addressPools": ["203.0.113.0/24"]}),
    ))
    .await;
    t.create(service_load_balancer(
        "metal",
        json!({"loadBalancerClass": metallb().class}),
    ))
    .await;
    t.create(load_balancer("cp", "old", json!({"drainSeconds": 1})))
        .await;
    let before = wait_ready(&t, "cp").await;
    assert_eq!(
        before.status.as_ref().unwrap().addresses[0].address,
        "203.0.113.1"
    );

    t.api::<LoadBalancer>()
        .patch(
            "cp",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"infrastructureRef": {"kind": "ServiceLoadBalancer", "name": "metal"}}})),
        )
        .await
        .unwrap();
    let after = wait_for(
        &t.api::<LoadBalancer>(),
        "cp",
        "migrated to MetalLB",
        |lb| {
            lb.and_then(|lb| lb.status.clone()).is_some_and(|s| {
                s.ready
                    && s.migration.is_none()
                    && s.infrastructure_ref
                        .is_some_and(|r| r.kind == "ServiceLoadBalancer")
            })
        },
    )
    .await
    .unwrap();
    let address = metallb_address(&after);
    assert_eq!(
        after.status.as_ref().unwrap().endpoint,
        before.status.as_ref().unwrap().endpoint,
        "the stable endpoint changed"
    );
    let name = format!("cp-ext.{}.svc.cluster.local", t.ns);
    let expected = DnsAnswer::Ip(address.parse().unwrap());
    eventually(&format!("{name} resolves to {address}"), || async {
        (dns_query(&name, "A").await.1 == vec![expected.clone()]).then_some(())
    })
    .await;
    wait_for(
        &t.api::<InMemoryLoadBalancer>(),
        "old",
        "the in-memory infrastructure released",
        |i| i.is_some_and(|i| i.finalizers().is_empty() && i.owner_references().is_empty()),
    )
    .await;
    t.finish().await;
}

/// The message of the LoadBalancer's InfrastructureReady condition.
fn infrastructure_message(lb: &LoadBalancer) -> String {
    lb.status
        .iter()
        .flat_map(|s| s.conditions.iter())
        .find(|c| c.type_ == "InfrastructureReady")
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// When nothing serves the class, the LoadBalancer says so: waiting, then `NoImplementation` after
/// `addressTimeoutSeconds`, naming the class; when MetalLB refuses (an address outside its pool), its
/// Warning is quoted.
#[tokio::test]
async fn no_implementation_and_a_refused_address_are_reported() {
    let mut t = TestNs::new("e2e-metallb-none").await;
    t.start(t.options(&["service"]));
    t.create(service_load_balancer(
        "nobody",
        json!({"loadBalancerClass": "example.com/nobody", "addressTimeoutSeconds": 3}),
    ))
    .await;
    t.create(on_service("idle", "nobody", json!({}))).await;
    t.create(service_load_balancer(
        "refused",
        json!({"loadBalancerClass": metallb().class, "loadBalancerIP": "192.0.2.77"}),
    ))
    .await;
    t.create(on_service("refused", "refused", json!({}))).await;

    let lbs = t.api::<LoadBalancer>();
    let reason = |lb: Option<&LoadBalancer>, want: &str| {
        lb.and_then(|lb| condition(lb, "InfrastructureReady"))
            .is_some_and(|(status, reason)| status == "False" && reason == want)
    };
    wait_for(&lbs, "idle", "AddressPending", |lb| {
        reason(lb, "AddressPending")
    })
    .await;
    let idle = wait_for(&lbs, "idle", "NoImplementation", |lb| {
        reason(lb, "NoImplementation")
    })
    .await
    .unwrap();
    let message = infrastructure_message(&idle);
    assert!(
        message.contains("nothing has given Service") && message.contains("example.com/nobody"),
        "{message}"
    );
    let refused = wait_for(&lbs, "refused", "AddressNotAssigned", |lb| {
        reason(lb, "AddressNotAssigned")
    })
    .await
    .unwrap();
    let message = infrastructure_message(&refused);
    assert!(
        message.contains("AllocationFailed") && message.contains("192.0.2.77"),
        "MetalLB's refusal is quoted: {message}"
    );
    t.finish().await;
}

/// A setting dropped from the ServiceLoadBalancer leaves the Service on the real apiserver (capi-lb
/// applies again without it: server-side apply removes what its manager no longer sets), a setting
/// added arrives, and afterwards nothing is written while idle.
#[tokio::test]
async fn a_dropped_setting_leaves_the_service_and_nothing_is_rewritten_while_idle() {
    let mut t = TestNs::new("e2e-metallb-drop").await;
    t.start(t.options(&["service"]));
    t.create(service_load_balancer(
        "metal",
        json!({"loadBalancerClass": metallb().class,
               "annotations": {"example.com/owner": "platform"},
               "labels": {"tier": "control-plane"},
               "loadBalancerSourceRanges": ["10.0.0.0/8"]}),
    ))
    .await;
    t.create(on_service("cp", "metal", json!({}))).await;
    wait_ready(&t, "cp").await;
    let services = t.api::<Service>();
    wait_for(&services, "metal-lb", "the settings on the Service", |s| {
        s.is_some_and(|s| {
            s.annotations().contains_key("example.com/owner")
                && s.labels().contains_key("tier")
                && s.spec
                    .as_ref()
                    .and_then(|s| s.load_balancer_source_ranges.clone())
                    == Some(vec!["10.0.0.0/8".to_string()])
        })
    })
    .await;

    // Only an annotation dropped: nothing else differs, so only capi-lb's record of what it applied
    // tells that the Service still has it.
    let slb = t.api::<ServiceLoadBalancer>();
    slb.patch(
        "metal",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"annotations": null}})),
    )
    .await
    .unwrap();
    wait_for(&services, "metal-lb", "the dropped annotation gone", |s| {
        s.is_some_and(|s| !s.annotations().contains_key("example.com/owner"))
    })
    .await;
    // A label replaced and the source ranges dropped.
    slb.patch(
        "metal",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"loadBalancerSourceRanges": null,
                                       "labels": {"tier": null, "zone": "a"}}})),
    )
    .await
    .unwrap();
    let updated = wait_for(&services, "metal-lb", "the dropped settings gone", |s| {
        s.is_some_and(|s| {
            !s.annotations().contains_key("example.com/owner")
                && !s.labels().contains_key("tier")
                && s.labels().get("zone").map(String::as_str) == Some("a")
                && s.spec
                    .as_ref()
                    .and_then(|s| s.load_balancer_source_ranges.clone())
                    .is_none()
        })
    })
    .await
    .unwrap();
    // capi-lb's own labels and annotations stay, and so does MetalLB's.
    assert!(
        updated
            .annotations()
            .contains_key("metallb.io/ip-allocated-from-pool")
    );
    assert!(
        updated
            .labels()
            .contains_key("capi-lb.loadbalancer.cluster.x-k8s.io/uid")
    );

    // Idle: nothing rewrites the Service (a comparison that kept seeing the dropped fields would).
    let version = updated.resource_version();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after = services.get("metal-lb").await.unwrap();
    assert_eq!(
        after.resource_version(),
        version,
        "the Service was written while idle: {:?}",
        after.metadata.managed_fields
    );
    t.finish().await;
}
