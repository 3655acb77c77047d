//! Isolation by construction, in the in-memory world (each scenario again on a real apiserver in
//! tests/tests/e2e): the one consent gate (deletion hooks and workload endpoints need the Cluster's
//! `loadBalancerRef`, as its endpoint does), and the publication stage's one address check on
//! canonical addresses (an IPv4-mapped IPv6 form of a refused address is refused on every
//! destination, with publication on and off).

use std::collections::BTreeMap;
use std::sync::Arc;

use capi_lb_api::capi::Machine;
use capi_lb_api::target::TargetKeys;
use capi_lb_tests::*;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::{Value, json};

async fn hooks(world: &capi_lb::sim::world::World, machine: &str, lb: &str) -> bool {
    let keys = TargetKeys::new(NS, lb);
    let m = Api::<Machine>::namespaced(world.client(), NS)
        .get(machine)
        .await
        .unwrap();
    m.annotations().contains_key(&keys.pre_drain)
        && m.annotations().contains_key(&keys.pre_terminate)
}

#[tokio::test]
async fn deletion_hooks_need_the_clusters_consent_and_go_when_it_is_withdrawn() {
    // The Cluster exists and names another LoadBalancer: "cp" may balance its Machines, but holds
    // none of their deletions.
    let world = world(vec![
        cluster_naming("demo", false, "someone-else"),
        lb("cp").build(),
        infra("cp").build(),
        machine("cp-m1", "cp", "10.0.0.11").build(),
    ])
    .await;
    settle(&world).await;
    assert!(!hooks(&world, "cp-m1", "cp").await, "hooks without consent");
    assert!(is_ready(&get_lb(&world, "cp").await));
    // The Cluster names it: hooks go on.
    merge_patch::<capi_lb_api::capi::Cluster>(
        &world,
        "demo",
        json!({"metadata": {"annotations": {"loadbalancer.cluster.x-k8s.io/loadBalancerRef": "cp"}}}),
    )
    .await;
    settle(&world).await;
    assert!(hooks(&world, "cp-m1", "cp").await);
    // It stops naming it: they are released at the next pass.
    merge_patch::<capi_lb_api::capi::Cluster>(
        &world,
        "demo",
        json!({"metadata": {"annotations": {"loadbalancer.cluster.x-k8s.io/loadBalancerRef": "other"}}}),
    )
    .await;
    settle(&world).await;
    assert!(
        !hooks(&world, "cp-m1", "cp").await,
        "hooks kept after consent went"
    );
}

#[tokio::test]
async fn workload_endpoints_need_the_clusters_consent() {
    let world = world(vec![
        cluster("demo", false),
        lb("cp")
            .spec("workloadEndpoints", json!({"enabled": true}))
            .build(),
        infra("cp").build(),
    ])
    .await;
    settle(&world).await;
    let lb = get_lb(&world, "cp").await;
    let workload = condition(&lb, "WorkloadEndpoints");
    assert_eq!(
        (workload.status.as_str(), workload.reason.as_str()),
        ("False", "NotNamedByCluster"),
        "{}",
        workload.message
    );
    assert!(
        workload.message.contains("does not name"),
        "{}",
        workload.message
    );
}

/// LoadBalancer `name` (with a DNS name), optionally a control-plane one of Cluster `demo` (which
/// names it) and with publication switched off.
fn tenant(name: &str, publication: bool, control_plane: bool) -> Vec<Value> {
    let mut lb = lb(name).spec("dns", json!({"hostnames": [format!("{name}.example.com")]}));
    if !publication {
        lb = lb.spec("publication", json!({"enabled": false}));
    }
    if control_plane {
        lb = lb.spec("controlPlane", json!({"endpointHost": "ProviderAddress"}));
    }
    vec![lb.build(), infra(name).build()]
}

#[tokio::test]
async fn an_ipv4_mapped_form_of_a_refused_address_is_refused_on_every_destination() {
    for publication in [true, false] {
        let mut objects = vec![cluster_naming("demo", false, "metadata")];
        objects.extend(tenant("metadata", publication, true));
        objects.extend(tenant("loopback", publication, false));
        // A Service of capi-lb's class realised by a third: its ingress would steer in-cluster
        // traffic.
        objects.push(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "svc", "namespace": NS,
                         "annotations": {"loadbalancer.cluster.x-k8s.io/load-balancer-ref": "svc-lb"}},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": "loadbalancer.cluster.x-k8s.io/capi-lb",
                     "ports": [{"name": "https", "port": 6443, "targetPort": 6443}]}}));
        objects.push(
            lb("svc-lb")
                .annotation("loadbalancer.cluster.x-k8s.io/service", "svc")
                .spec("publication", json!({"enabled": publication}))
                .build(),
        );
        objects.push(infra("svc-lb").build());
        let mapped: BTreeMap<String, String> = [
            ("metadata", "169.254.169.254"),
            ("loopback", "127.0.0.1"),
            ("svc-lb", "127.0.0.2"),
        ]
        .map(|(n, a)| (n.to_string(), a.to_string()))
        .into();
        let world = capi_lb::sim::world::World::with_builder(objects, |b| {
            b.with_resource::<capi_lb_api::externaldns::DNSEndpoint>()
        })
        .await
        .unwrap()
        .playing_external_dns()
        .wrapping_providers(|_, real| {
            Arc::new(capi_lb_tests::hostile::MappedAddresses {
                real,
                mapped: mapped.clone(),
            })
        });
        world.settle_services(10).await.unwrap();
        world.run_until_stable(50).await.unwrap();
        world.settle_services(10).await.unwrap();
        for (name, address) in &mapped {
            let lb = get_lb(&world, name).await;
            let status = lb.status.clone().unwrap();
            // Canonical in the status, refused by the one check, named in the condition.
            assert_eq!(
                status
                    .addresses
                    .iter()
                    .map(|a| a.address.as_str())
                    .collect::<Vec<_>>(),
                [address.as_str()],
                "{name} (publication {publication})"
            );
            let published = condition(&lb, "EndpointPublished");
            assert_eq!(
                published.reason, "AddressRefused",
                "{name} (publication {publication}): {}",
                published.message
            );
            assert!(!status.ready, "{name}");
            // The stable name when published (it resolves to nothing), else none: never the
            // refused address, in either form.
            match &status.endpoint {
                Some(e) if publication => {
                    assert_eq!(e.host, format!("{name}-ext.default.svc.cluster.local"))
                }
                other => assert_eq!(*other, None, "{name} (publication {publication})"),
            }
            assert!(
                slices(&world, &format!("{name}-ext"))
                    .await
                    .values()
                    .all(Vec::is_empty),
                "{name}: an -ext slice has an address"
            );
        }
        // Not the Cluster's endpoint (it goes into certificates).
        let cluster = Api::<capi_lb_api::capi::Cluster>::namespaced(world.client(), NS)
            .get("demo")
            .await
            .unwrap();
        assert!(
            cluster
                .spec
                .control_plane_endpoint
                .as_ref()
                .is_none_or(|e| e.host.is_empty()),
            "publication {publication}: {:?}",
            cluster.spec.control_plane_endpoint
        );
        // Not the class Service's ingress.
        let svc: Service = Api::namespaced(world.client(), NS)
            .get("svc")
            .await
            .unwrap();
        let ingress = svc
            .status
            .and_then(|s| s.load_balancer)
            .and_then(|l| l.ingress)
            .unwrap_or_default();
        assert!(ingress.is_empty(), "publication {publication}: {ingress:?}");
        // Not DNS.
        let endpoints: Api<capi_lb_api::externaldns::DNSEndpoint> =
            Api::namespaced(world.client(), NS);
        for name in ["metadata", "loopback"] {
            if let Some(e) = endpoints.get_opt(name).await.unwrap() {
                let records = serde_json::to_value(&e.spec).unwrap();
                assert!(
                    records["endpoints"].as_array().is_none_or(|r| r.is_empty()),
                    "{name}: {records}"
                );
            }
        }
    }
}
