//! The generated RBAC allows exactly what the controllers do. Every scenario below runs the real
//! controllers against the in-memory API, which records each request they make (test set-up is not
//! recorded); the requests are turned into (group, resource, verb), owner references with
//! `blockOwnerDeletion` into `update` on the owner's `finalizers`, and the watches `run` sets up into
//! `list` + `watch`. The ClusterRole `capi-lb manifests` generates must equal that set: nothing the
//! controllers need is missing, nothing is granted that they do not use.

use std::collections::BTreeSet;
use std::time::Duration;

use capi_lb::install::rbac::{self, Enabled, Permission, finalizers_of, verb_of};
use capi_lb::sim::world::World;
use capi_lb_api::capi::{Cluster, Machine};
use capi_lb_api::constants::{CONTROL_PLANE_GROUP, CONTROL_PLANE_KINDS};
use capi_lb_api::externaldns::DNSEndpoint;
use capi_lb_api::kubedc::EIp;
use capi_lb_api::{KubeDCLoadBalancer, LoadBalancer};
use capi_lb_tests::kubedc_sim::KubeDcSim;
use capi_lb_tests::servicelb_sim::ServiceLbSim;
use capi_lb_tests::*;
use k8s_openapi::api::core::v1::Service;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

fn observed(world: &World) -> BTreeSet<Permission> {
    let mut out = BTreeSet::new();
    for r in world.api.stats.requests() {
        if let Some(p) = verb_of(&r.method, &r.path, &r.query) {
            if r.creates_by_apply {
                // A real apiserver also checks `create` for an apply that creates the object.
                out.insert((p.0.clone(), p.1.clone(), "create".to_string()));
            }
            out.insert(p);
        }
        for kind in &r.blocking_owner_kinds {
            out.insert(finalizers_of(kind).unwrap_or_else(|| panic!("owner kind {kind}")));
        }
    }
    out
}

/// The LoadBalancer controller with the in-memory provider: create (a control-plane LoadBalancer
/// that sets its Cluster's endpoint), targets with hooks, a target deleted, a paused Cluster, then
/// Cluster and LoadBalancer deletion.
async fn loadbalancer_scenario() -> BTreeSet<Permission> {
    let mut m2 = machine("cp-m2", "cp", "10.0.0.12").build();
    m2["metadata"]["finalizers"] = json!(["machine.cluster.x-k8s.io"]);
    let mut cluster = cluster_naming("demo", false, "cp");
    cluster["metadata"]["finalizers"] = json!(["cluster.cluster.x-k8s.io"]);
    let world = World::new(vec![
        cluster,
        // A control-plane LoadBalancer: it fills the Cluster's spec.controlPlaneEndpoint.
        lb("cp")
            .spec("drainSeconds", json!(5))
            .spec("controlPlane", json!({}))
            .build(),
        infra("cp")
            .spec("provisioningDelaySeconds", json!(2))
            .build(),
        machine("cp-m1", "cp", "10.0.0.11").build(),
        m2,
    ])
    .await
    .unwrap();
    world.run_until_stable(100).await.unwrap();
    // A repeated Event (same object, reason and note) counts in the first one's series: a PATCH.
    // The controllers repeat one when the same problem recurs; here the sink is called directly.
    let reference = Api::<LoadBalancer>::namespaced(world.client(), NS)
        .get("cp")
        .await
        .unwrap()
        .object_ref(&());
    world.api.stats.set_recording(true);
    for _ in 0..2 {
        world
            .ctx
            .events
            .publish(
                &reference,
                true,
                "ProviderError",
                "Reconcile",
                "quota".into(),
            )
            .await;
    }
    world.api.stats.set_recording(false);
    delete::<Machine>(&world, "cp-m2").await;
    world.run_until_stable(100).await.unwrap();
    delete::<Cluster>(&world, "demo").await;
    world.run_until_stable(100).await.unwrap();
    delete::<LoadBalancer>(&world, "cp").await;
    world.run_until_stable(100).await.unwrap();
    observed(&world)
}

/// The control-plane kinds, for the in-memory API (which registers typed kinds only).
#[allow(missing_docs)]
mod control_planes {
    use kube::CustomResource;
    use serde::{Deserialize, Serialize};

    // rustfmt re-indents attributes inside macro_rules on every run: not formatted.
    #[rustfmt::skip]
    macro_rules! kind {
        ($spec:ident, $kind:literal, $plural:literal) => {
            #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default)]
            #[kube(group = "controlplane.cluster.x-k8s.io", version = "v1beta2", kind = $kind,
                   plural = $plural, namespaced, schema = "disabled")]
            pub struct $spec {}
        };
    }
    kind!(KubeadmSpec, "KubeadmControlPlane", "kubeadmcontrolplanes");
    kind!(KamajiSpec, "KamajiControlPlane", "kamajicontrolplanes");
    kind!(
        K0smotronSpec,
        "K0smotronControlPlane",
        "k0smotroncontrolplanes"
    );
    kind!(K0sSpec, "K0sControlPlane", "k0scontrolplanes");
    kind!(Rke2Spec, "RKE2ControlPlane", "rke2controlplanes");
    kind!(TalosSpec, "TalosControlPlane", "taloscontrolplanes");
    kind!(
        MicroK8sSpec,
        "MicroK8sControlPlane",
        "microk8scontrolplanes"
    );
    kind!(Ck8sSpec, "CK8sControlPlane", "ck8scontrolplanes");
}

/// LoadBalancers of Clusters whose `controlPlaneRef` names each of the control-plane kinds capi-lb
/// reads for the `loadBalancerRef` annotation (one of them names its LoadBalancer).
async fn control_plane_scenario() -> BTreeSet<Permission> {
    let mut objects = Vec::new();
    for (i, (kind, _)) in CONTROL_PLANE_KINDS.iter().enumerate() {
        let name = format!("c{i}");
        let mut c = cluster(&name, false);
        c["spec"]["controlPlaneRef"] =
            json!({"apiGroup": CONTROL_PLANE_GROUP, "kind": kind, "name": name});
        objects.push(c);
        objects.push(
            json!({"apiVersion": format!("{CONTROL_PLANE_GROUP}/v1beta2"), "kind": kind,
                            "metadata": {"name": name, "namespace": NS, "annotations":
                                {"loadbalancer.cluster.x-k8s.io/loadBalancerRef": name}}}),
        );
        objects.push(lb(&name).spec("clusterName", json!(name)).build());
        objects.push(infra(&name).build());
    }
    let world = World::with_builder(objects, |b| {
        b.with_resource::<control_planes::KubeadmControlPlane>()
            .with_resource::<control_planes::KamajiControlPlane>()
            .with_resource::<control_planes::K0smotronControlPlane>()
            .with_resource::<control_planes::K0sControlPlane>()
            .with_resource::<control_planes::RKE2ControlPlane>()
            .with_resource::<control_planes::TalosControlPlane>()
            .with_resource::<control_planes::MicroK8sControlPlane>()
            .with_resource::<control_planes::CK8sControlPlane>()
    })
    .await
    .unwrap();
    for (kind, plural) in CONTROL_PLANE_KINDS {
        world.ctx.kinds.insert(ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(CONTROL_PLANE_GROUP, "v1beta2", kind),
            plural,
        ));
    }
    world.run_until_stable(100).await.unwrap();
    // Each is the control-plane LoadBalancer of its Cluster.
    for i in 0..CONTROL_PLANE_KINDS.len() {
        let lb = capi_lb_tests::get_lb(&world, &format!("c{i}")).await;
        assert!(
            lb.status.as_ref().is_some_and(|s| s
                .conditions
                .iter()
                .any(|c| c.type_ == "ClusterEndpoint" && c.reason == "ClusterEndpointSet")),
            "{lb:?}"
        );
    }
    observed(&world)
}

fn lb_service(name: &str, ingress: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "etcd", "port": 2379}]},
        "status": {"loadBalancer": {"ingress": ingress}},
    })
}

/// The `-ext` publisher: publish, change, withdraw, legacy Endpoints on and off, kube-dc adoption,
/// an orphan.
async fn external_scenario() -> BTreeSet<Permission> {
    let kube_dc_ext = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "adopt-ext", "namespace": NS, "labels": {
            "kube-dc.com/managed-by": "service-lb-controller", "kube-dc.com/source-service": "adopt"}},
        "spec": {"clusterIP": "None", "ports": [{"name": "etcd", "port": 2379}]},
    });
    let kube_dc_endpoints = json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "adopt-ext", "namespace": NS, "labels": {
            "kube-dc.com/managed-by": "service-lb-controller", "kube-dc.com/source-service": "adopt"}},
        "subsets": [{"addresses": [{"ip": "198.51.100.3"}], "ports": [{"name": "etcd", "port": 2379}]}],
    });
    let world = World::new(vec![
        lb_service("a", json!([{"ip": "198.51.100.1"}])),
        lb_service("b", json!([{"ip": "198.51.100.2"}])),
        lb_service("adopt", json!([{"ip": "198.51.100.3"}])),
        kube_dc_ext,
        kube_dc_endpoints,
    ])
    .await
    .unwrap()
    .reconfigured(|c| {
        c.external.legacy_endpoints = true;
        c.external.adopt_kube_dc = true;
    });
    world.settle_services(10).await.unwrap();
    let services: Api<Service> = Api::namespaced(world.client(), NS);
    services
        .patch_status(
            "a",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.9"}]}}}),
            ),
        )
        .await
        .unwrap();
    services
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"type": "ClusterIP"}})),
        )
        .await
        .unwrap();
    world.settle_services(10).await.unwrap();
    delete::<Service>(&world, "a").await;
    world.settle_services(10).await.unwrap();
    let off = world.reconfigured(|c| c.external.legacy_endpoints = false);
    off.settle_services(10).await.unwrap();
    let mut out = observed(&world);
    out.extend(observed(&off));
    out
}

/// What the DNS publication does with DNSEndpoints: get and list on every pass, create (by
/// server-side apply), patch (by server-side apply), delete.
const DNS_VERBS: [&str; 5] = ["get", "list", "create", "patch", "delete"];

/// Panics unless `used` holds every DNSEndpoint verb of [`DNS_VERBS`]: each scenario below runs a
/// single component, so this checks that component's own DNSEndpoint permissions.
fn assert_dns_verbs(component: &str, used: &BTreeSet<Permission>) {
    for verb in DNS_VERBS {
        let p = (
            "externaldns.k8s.io".to_string(),
            "dnsendpoints".to_string(),
            verb.to_string(),
        );
        assert!(
            used.contains(&p),
            "the {component} did not {verb} a DNSEndpoint"
        );
    }
}

async fn dns_endpoint(world: &World, name: &str) -> Option<DNSEndpoint> {
    Api::<DNSEndpoint>::namespaced(world.client(), NS)
        .get_opt(name)
        .await
        .unwrap()
}

/// The LoadBalancer controller publishing `spec.dns` (ExternalDNS's DNSEndpoint kind served):
/// created, changed (another hostname), then `spec.dns` removed so that it is deleted.
async fn loadbalancer_dns_scenario() -> BTreeSet<Permission> {
    let world = World::with_builder(
        vec![
            lb("dns")
                .spec("dns", json!({"hostnames": ["api.example.com"]}))
                .build(),
            infra("dns").build(),
        ],
        |b| b.with_resource::<DNSEndpoint>(),
    )
    .await
    .unwrap();
    world.run_until_stable(20).await.unwrap();
    assert!(
        dns_endpoint(&world, "dns").await.is_some(),
        "the DNSEndpoint was created"
    );
    merge_patch::<LoadBalancer>(
        &world,
        "dns",
        json!({"spec": {"dns": {"hostnames": ["api.example.com", "www.example.com"]}}}),
    )
    .await;
    world.run_until_stable(20).await.unwrap();
    let changed = dns_endpoint(&world, "dns").await.unwrap();
    assert!(
        changed
            .spec
            .endpoints
            .iter()
            .any(|e| e.dns_name == "www.example.com"),
        "the DNSEndpoint was changed"
    );
    merge_patch::<LoadBalancer>(&world, "dns", json!({"spec": {"dns": null}})).await;
    world.run_until_stable(20).await.unwrap();
    assert!(
        dns_endpoint(&world, "dns").await.is_none(),
        "the DNSEndpoint was deleted"
    );
    let used = observed(&world);
    assert_dns_verbs("LoadBalancer controller", &used);
    used
}

/// The DNS provider (ExternalDNS's DNSEndpoint kind served and played): records of two Machines,
/// one deleted (it leaves the records, drains, its hooks are released), then the LoadBalancer
/// deleted.
async fn dns_loadbalancer_scenario() -> BTreeSet<Permission> {
    let mut m2 = machine("dns-m2", "dns", "10.0.0.12").build();
    m2["metadata"]["finalizers"] = json!(["machine.cluster.x-k8s.io"]);
    let world = World::with_builder(
        vec![
            dns_lb("dns").spec("drainSeconds", json!(1)).build(),
            dns_infra("dns", "api.example.com", 5),
            machine("dns-m1", "dns", "10.0.0.11").build(),
            m2,
        ],
        |b| b.with_resource::<DNSEndpoint>(),
    )
    .await
    .unwrap()
    .playing_external_dns();
    world.run_until_stable(20).await.unwrap();
    delete::<Machine>(&world, "dns-m2").await;
    world.run_until_stable(40).await.unwrap();
    delete::<LoadBalancer>(&world, "dns").await;
    world.run_until_stable(40).await.unwrap();
    assert!(
        dns_endpoint(&world, "dns").await.is_none(),
        "the DNSEndpoint went with the LoadBalancer"
    );
    observed(&world)
}

/// The zoned provider over two in-memory zones: each zone's LoadBalancer made, a zone removed (its
/// LoadBalancer deleted), then the parent deleted.
async fn zoned_scenario() -> BTreeSet<Permission> {
    let zone = |name: &str, infra: &str| {
        json!({"name": name, "failureDomains": [name], "infrastructureRef": {
            "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "InMemoryLoadBalancer", "name": infra}})
    };
    let zoned = |zones: Vec<Value>| {
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "ZonedLoadBalancer",
               "metadata": {"name": "zoned", "namespace": NS}, "spec": {"zones": zones}})
    };
    let mut m1 = machine("zoned-m1", "zoned", "10.0.0.11").build();
    m1["spec"]["failureDomain"] = json!("az1");
    let world = World::new(vec![
        lb("zoned")
            .spec(
                "infrastructureRef",
                json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "ZonedLoadBalancer", "name": "zoned"}),
            )
            .build(),
        zoned(vec![zone("az1", "zoned-az1"), zone("az2", "zoned-az2")]),
        infra("zoned-az1").build(),
        infra("zoned-az2").build(),
        m1,
    ])
    .await
    .unwrap();
    world.run_until_stable(40).await.unwrap();
    assert!(is_ready(&get_lb(&world, "zoned").await));
    merge_patch::<capi_lb_api::ZonedLoadBalancer>(
        &world,
        "zoned",
        zoned(vec![zone("az1", "zoned-az1")]),
    )
    .await;
    world.run_until_stable(40).await.unwrap();
    delete::<LoadBalancer>(&world, "zoned").await;
    world.run_until_stable(40).await.unwrap();
    assert!(world.cloud.load_balancers().is_empty());
    observed(&world)
}

/// The `-ext` publisher publishing a Service's hostnames annotation (ExternalDNS's DNSEndpoint
/// kind served): created, changed (another ingress), then the annotation removed so that it is
/// deleted.
async fn external_dns_scenario() -> BTreeSet<Permission> {
    let world = World::with_builder(
        vec![json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": NS,
                         "annotations": {"loadbalancer.cluster.x-k8s.io/hostnames": "www.example.com"}},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": "metallb.io/x",
                     "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.7"}]}},
        })],
        |b| b.with_resource::<DNSEndpoint>(),
    )
    .await
    .unwrap();
    world.settle_services(10).await.unwrap();
    assert!(
        dns_endpoint(&world, "web-ext").await.is_some(),
        "the DNSEndpoint was created"
    );
    Api::<Service>::namespaced(world.client(), NS)
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.8"}]}}}),
            ),
        )
        .await
        .unwrap();
    world.settle_services(10).await.unwrap();
    let changed = dns_endpoint(&world, "web-ext").await.unwrap();
    assert_eq!(
        changed.spec.endpoints[0].targets,
        ["198.51.100.8"],
        "the DNSEndpoint was changed"
    );
    merge_patch::<Service>(
        &world,
        "web",
        json!({"metadata": {"annotations": {"loadbalancer.cluster.x-k8s.io/hostnames": null}}}),
    )
    .await;
    world.settle_services(10).await.unwrap();
    assert!(
        dns_endpoint(&world, "web-ext").await.is_none(),
        "the DNSEndpoint was deleted"
    );
    let used = observed(&world);
    assert_dns_verbs("external endpoint publisher", &used);
    used
}

/// The kube-dc provider: create with the simulated kube-dc controller, then delete.
async fn kubedc_scenario() -> BTreeSet<Permission> {
    let world = World::with_builder(
        vec![
            kubedc_lb("cp").build(),
            kubedc_infra("cp", json!({})),
            machine("cp-m1", "cp", "10.0.0.11").build(),
            capi_lb_tests::kubedc_sim::project_namespace(NS),
        ],
        |b| b.with_resource::<EIp>(),
    )
    .await
    .unwrap();
    let mut sim = KubeDcSim::new();
    for _ in 0..6 {
        sim.step(&world).await;
        world.reconcile(NS, "cp").await.unwrap();
        world.clock.advance(Duration::from_secs(5));
    }
    delete::<LoadBalancer>(&world, "cp").await;
    for _ in 0..6 {
        sim.step(&world).await;
        let _ = world.reconcile(NS, "cp").await;
        world.clock.advance(Duration::from_secs(5));
    }
    assert!(
        Api::<KubeDCLoadBalancer>::namespaced(world.client(), NS)
            .get_opt("cp")
            .await
            .unwrap()
            .is_none_or(|k| k.metadata.deletion_timestamp.is_some() || k.finalizers().is_empty()),
        "the scenario reached the end of deletion"
    );
    observed(&world)
}

/// The Service provider with a simulated implementation: create (it gives no address at first, so
/// the implementation's Warning Events are read), then delete.
async fn service_scenario() -> BTreeSet<Permission> {
    let world = World::new(vec![
        service_lb("cp").build(),
        service_infra("cp", json!({"loadBalancerClass": "example.com/lb"})),
        machine("cp-m1", "cp", "10.0.0.11").build(),
    ])
    .await
    .unwrap();
    let mut sim = ServiceLbSim::new(Some("example.com/lb"), &[]);
    for _ in 0..3 {
        sim.step(&world).await;
        world.reconcile(NS, "cp").await.unwrap();
    }
    sim.pool.push("192.0.2.10".into());
    for _ in 0..4 {
        sim.step(&world).await;
        world.reconcile(NS, "cp").await.unwrap();
    }
    assert!(
        is_ready(&get_lb(&world, "cp").await),
        "the scenario got the load balancer ready"
    );
    delete::<LoadBalancer>(&world, "cp").await;
    for _ in 0..4 {
        let _ = world.reconcile(NS, "cp").await;
    }
    observed(&world)
}

use kube::ResourceExt;

/// The Octavia provider against the real Octavia API (tests/octavia/harness.sh): create, then delete.
async fn octavia_scenario() -> BTreeSet<Permission> {
    let h = capi_lb_tests::octavia::harness();
    let mut objects = capi_lb_tests::octavia::octavia_objects(&h, "cp", json!({}));
    objects.push(machine("cp-m1", "cp", "10.0.0.11").build());
    let world = World::new(objects).await.unwrap();
    capi_lb_tests::octavia::reconcile_until(&world, NS, "cp", "Ready", |lb| {
        lb.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    capi_lb_tests::octavia::delete_until_gone(&world, NS, "cp").await;
    observed(&world)
}

/// A Service of capi-lb's load-balancer class realised through a LoadBalancer.
async fn class_scenario() -> BTreeSet<Permission> {
    let world = World::new(vec![
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "tcp", "namespace": NS,
                            "annotations": {"loadbalancer.cluster.x-k8s.io/load-balancer-ref": "tcp"}},
               "spec": {"type": "LoadBalancer", "loadBalancerClass": "loadbalancer.cluster.x-k8s.io/capi-lb",
                        "ports": [{"name": "https", "port": 6443}]}}),
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "tcp-1", "namespace": NS, "labels": {"kubernetes.io/service-name": "tcp"}},
               "addressType": "IPv4", "ports": [{"name": "https", "port": 6443}],
               "endpoints": [{"addresses": ["10.244.0.5"], "conditions": {"ready": true}}]}),
        lb("tcp").annotation("loadbalancer.cluster.x-k8s.io/service", "tcp").build(),
        infra("tcp").build(),
    ])
    .await
    .unwrap();
    world.settle_services(10).await.unwrap();
    world.run_until_stable(50).await.unwrap();
    observed(&world)
}

/// Secure metrics: a scraper's token reviewed, then its access to /metrics (the in-memory API
/// answers neither as a real apiserver would; the requests are what counts here, and
/// `tests/tests/e2e/metrics.rs` has the real answers).
async fn secure_metrics_scenario() -> BTreeSet<Permission> {
    let world = World::new(vec![]).await.unwrap();
    world.api.stats.set_recording(true);
    let authorizer = capi_lb::telemetry::secure::Authorizer::new(world.client());
    let _ = authorizer.authenticate("a-token").await;
    let user = k8s_openapi::api::authentication::v1::UserInfo {
        username: Some("system:serviceaccount:monitoring:prometheus".into()),
        ..Default::default()
    };
    let _ = authorizer.authorize(&user).await;
    observed(&world)
}

#[tokio::test]
async fn the_generated_cluster_role_allows_exactly_what_the_controllers_do() {
    let mut used = loadbalancer_scenario().await;
    used.extend(class_scenario().await);
    used.extend(external_scenario().await);
    used.extend(loadbalancer_dns_scenario().await);
    used.extend(dns_loadbalancer_scenario().await);
    used.extend(zoned_scenario().await);
    used.extend(external_dns_scenario().await);
    used.extend(kubedc_scenario().await);
    used.extend(service_scenario().await);
    used.extend(octavia_scenario().await);
    used.extend(control_plane_scenario().await);
    used.extend(secure_metrics_scenario().await);
    let enabled = Enabled::all();
    let granted = rbac::permissions(&enabled);
    let watches: BTreeSet<Permission> = rbac::components(&enabled)
        .into_iter()
        .flat_map(|c| c.watches)
        .flat_map(|(g, r)| {
            ["list", "watch"]
                .into_iter()
                .map(move |v| (g.to_string(), r.to_string(), v.to_string()))
        })
        .collect();
    let missing: Vec<&Permission> = used.difference(&granted).collect();
    assert!(missing.is_empty(), "used but not granted: {missing:#?}");
    let unused: Vec<&Permission> = granted
        .iter()
        .filter(|p| !used.contains(*p) && !watches.contains(*p))
        .collect();
    assert!(unused.is_empty(), "granted but never used: {unused:#?}");
}
