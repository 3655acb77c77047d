//! Every cluster template flavor (`templates/cluster-template-<flavor>.yaml`) applied to a real
//! apiserver as `clusterctl generate cluster ... | kubectl apply --server-side` would, and run to
//! what a real run creates for capi-lb's part (the project's harness, `tests/k8s/harness.sh`, or
//! `CAPI_LB_E2E_KUBECONFIG`; see `capi_lb_tests::k8s`; these tests fail, never skip, without one).
//!
//! The harness serves the CRDs of every provider the templates name (the kubeadm control plane and
//! bootstrap, CAPD, cluster-api-provider-openstack, cluster-api-provider-kubevirt, Kamaji's
//! KamajiControlPlane and TenantControlPlane, kube-dc's EIp, with the contract labels their releases
//! carry) and runs Cluster API's core manager with its webhooks, so every object of a template is
//! judged by its real schema (server-side apply with strict field validation: an unknown field is
//! refused, not dropped) and by Cluster API's webhooks, and Cluster API's Cluster controller must
//! follow the template's `infrastructureRef` and `controlPlaneRef` (it owns both objects). A refusal is
//! a template bug.
//!
//! No controller runs for CAPD, CAPO, CAPK, the kubeadm control plane or Kamaji: no Machine is ever
//! created, and where capi-lb's part needs what one of them would do, the test does it as they do
//! (Kamaji's TenantControlPlane and its Service; the Kamaji provider's patch of the infrastructure
//! cluster). capi-lb runs in this process as its ServiceAccount with the provider each flavor needs
//! standing in as follows:
//!
//! - `kubeadm-inmemory`: the in-memory provider, as the template says. The LoadBalancer is Ready, its
//!   stable name is the Cluster's `controlPlaneEndpoint`, and Cluster API keeps it.
//! - `kubevirt-kubedc`: the kube-dc provider with kube-dc's controller simulated
//!   (`capi_lb_tests::kubedc_sim`): the EIp's address is the Cluster's `controlPlaneEndpoint`.
//! - `kamaji-kubedc`: the same, realising the Service Kamaji makes for the TenantControlPlane
//!   (class and reference from the KamajiControlPlane): its ingress is the EIp's address, its ready
//!   endpoints are the members; with the KubevirtCluster externally managed, Cluster API takes the
//!   endpoint the Kamaji provider patches into it.
//! - `kamaji-octavia`: the in-memory provider stands in for Octavia (the Octavia harness belongs to
//!   `tests/tests/e2e/octavia.rs`, which deploys this flavor's capi-lb objects on the real Octavia API):
//!   the template's OctaviaLoadBalancer is applied and accepted, then the LoadBalancer is pointed at an
//!   InMemoryLoadBalancer before capi-lb first sees it. The OpenStackCluster accepts the fields the
//!   Kamaji provider patches into it.
//!
//! Every flavor: the `-ext` Service (owned by the LoadBalancer) and its EndpointSlice (owned by the
//! Service) carry the provider's address, the LoadBalancer is owned by the Cluster, and the
//! provider's object by the LoadBalancer.

use capi_lb_api::LoadBalancer;
use capi_lb_api::capi::Cluster;
use capi_lb_api::constants::ANNOTATION_EXTERNAL_ENDPOINT_DNS_NAME;
use capi_lb_tests::k8s::{TestNs, condition, dynamic_api, eventually, wait_for, wait_ready};
use capi_lb_tests::kubedc_sim::KubeDcSim;
use capi_lb_tests::templates::{
    CLUSTER_NAME, KUBEDC_EIP, KUBEDC_EIP_ADDRESS, Rendered, render, template_file,
};
use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

/// Field manager of the template objects (what `kubectl apply --server-side` would use).
const MANAGER: &str = "capi-lb-e2e-templates";
/// The addresses of the control-plane pods that stand in for Kamaji's (no pod runs here).
const KAMAJI_POD_IPS: [&str; 2] = ["10.244.1.7", "10.244.2.9"];

/// A fresh namespace with `flavor`'s template applied into it (every document, strictly); panics
/// listing every refusal.
async fn apply_template(flavor: &str) -> (TestNs, Rendered) {
    let t = TestNs::new(&format!("e2e-tpl-{flavor}")).await;
    let rendered = apply_into(&t, flavor).await;
    (t, rendered)
}

/// `flavor`'s template applied into `t`'s namespace (every document, strictly); panics listing every
/// refusal.
async fn apply_into(t: &TestNs, flavor: &str) -> Rendered {
    let rendered = render(&template_file(flavor), &t.ns);
    let mut refused = Vec::new();
    for doc in &rendered.docs {
        let what = format!("{} {}", doc["kind"], doc["metadata"]["name"]);
        if let Err(e) = apply_strictly(t, doc).await {
            refused.push(format!("{what}: {e}"));
        }
    }
    assert!(
        refused.is_empty(),
        "{flavor}: the apiserver refused template objects (a kind not served means the harness's \
         provider CRDs are missing: tests/k8s/harness.sh start installs them):\n{}",
        refused.join("\n")
    );
    rendered
}

/// Server-side apply `doc` into `t`'s namespace with strict field validation.
async fn apply_strictly(t: &TestNs, doc: &Value) -> Result<DynamicObject, kube::Error> {
    let api = dynamic_api(&t.client, Some(&t.ns), doc).await?;
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    api.patch(
        name,
        &PatchParams::apply(MANAGER).force().validation_strict(),
        &Patch::Apply(doc),
    )
    .await
}

/// The API of the template document `doc`'s kind in `t`'s namespace.
async fn api_of(t: &TestNs, doc: &Value) -> Api<DynamicObject> {
    dynamic_api(&t.client, Some(&t.ns), doc).await.unwrap()
}

fn owned_by<'a>(refs: &'a [OwnerReference], kind: &str, name: &str) -> Option<&'a OwnerReference> {
    refs.iter().find(|r| r.kind == kind && r.name == name)
}

/// Cluster API's Cluster controller follows the template's references: it owns the infrastructure
/// cluster and the control-plane object (it needs their CRDs' contract labels to do so).
async fn cluster_api_owns_the_referenced_objects(t: &TestNs, tpl: &Rendered) {
    let cluster = tpl.one("Cluster");
    for reference in ["infrastructureRef", "controlPlaneRef"] {
        let r = &cluster["spec"][reference];
        let doc = tpl
            .docs
            .iter()
            .find(|d| d["kind"] == r["kind"] && d["metadata"]["name"] == r["name"])
            .unwrap_or_else(|| panic!("the template has no object for {reference} {r}"));
        let api = api_of(t, doc).await;
        let name = r["name"].as_str().unwrap();
        eventually(
            &format!("Cluster API owns {} {name} ({reference})", r["kind"]),
            || async {
                let object = api.get(name).await.unwrap();
                owned_by(object.owner_references(), "Cluster", CLUSTER_NAME).map(|_| ())
            },
        )
        .await;
    }
}

/// What every flavor publishes for `lb` (Ready, at `address`): the LoadBalancer owned by the Cluster
/// (not as controller), the provider's object controlled by the LoadBalancer, the `-ext` Service
/// controlled by the LoadBalancer and its IPv4 EndpointSlice, controlled by that Service, with
/// `address`.
async fn check_capi_lb_objects(t: &TestNs, tpl: &Rendered, lb: &LoadBalancer, address: &str) {
    let name = lb.name_any();
    let to_cluster = owned_by(lb.owner_references(), "Cluster", CLUSTER_NAME)
        .unwrap_or_else(|| panic!("LoadBalancer {name} is not owned by its Cluster: {lb:?}"));
    assert_ne!(to_cluster.controller, Some(true), "{to_cluster:?}");
    assert_eq!(condition(lb, "EndpointPublished").unwrap().0, "True");

    let infra_ref = &tpl.one("LoadBalancer")["spec"]["infrastructureRef"];
    let infra_doc = tpl
        .docs
        .iter()
        .find(|d| d["kind"] == infra_ref["kind"] && d["metadata"]["name"] == infra_ref["name"])
        .unwrap();
    let status = lb.status.as_ref().unwrap();
    let used = status.infrastructure_ref.as_ref().unwrap();
    let infra = api_of(
        t,
        &json!({"apiVersion": format!("{}/v1alpha1", used.api_group),
                                  "kind": used.kind, "metadata": {"name": used.name}}),
    )
    .await
    .get(&used.name)
    .await
    .unwrap();
    if used.kind == infra_doc["kind"] {
        assert_eq!(json!(used.name), infra_doc["metadata"]["name"]);
    }
    let controller = owned_by(infra.owner_references(), "LoadBalancer", &name)
        .unwrap_or_else(|| panic!("{} {} is not owned by {name}", used.kind, used.name));
    assert_eq!(controller.controller, Some(true));

    let ext = format!("{name}-ext");
    let service = t.api::<Service>().get(&ext).await.unwrap();
    let spec = service.spec.as_ref().unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some("None"), "{service:?}");
    assert!(spec.selector.is_none(), "{service:?}");
    let controller = owned_by(service.owner_references(), "LoadBalancer", &name).unwrap();
    assert_eq!(controller.controller, Some(true));
    let slice = wait_for(
        &t.api::<EndpointSlice>(),
        &format!("{ext}-ipv4"),
        &format!("{ext}-ipv4 with {address}"),
        |s| {
            s.is_some_and(|s| {
                s.endpoints
                    .iter()
                    .flat_map(|e| e.addresses.iter().map(String::as_str))
                    .eq([address])
            })
        },
    )
    .await
    .unwrap();
    assert_eq!(
        slice.labels().get("kubernetes.io/service-name"),
        Some(&ext),
        "{slice:?}"
    );
    let controller = owned_by(slice.owner_references(), "Service", &ext).unwrap();
    assert_eq!(controller.controller, Some(true));
}

/// The Cluster once its `spec.controlPlaneEndpoint` is set: `host:port`.
async fn cluster_endpoint(t: &TestNs) -> String {
    let cluster = wait_for(
        &t.api::<Cluster>(),
        CLUSTER_NAME,
        "Cluster.spec.controlPlaneEndpoint set",
        |c| {
            c.and_then(|c| c.spec.control_plane_endpoint.as_ref())
                .is_some_and(|e| !e.host.is_empty())
        },
    )
    .await
    .unwrap();
    let endpoint = cluster.spec.control_plane_endpoint.unwrap();
    format!("{}:{}", endpoint.host, endpoint.port)
}

/// The first address of LoadBalancer `lb`.
fn address(lb: &LoadBalancer) -> String {
    lb.status.as_ref().unwrap().addresses[0].address.clone()
}

/// A kubeadm flavor: the control-plane LoadBalancer the Cluster names is Ready, and its endpoint
/// (`expected(lb)`) is the Cluster's, kept once Cluster API has reconciled the Cluster.
async fn kubeadm_flavor(
    t: &mut TestNs,
    tpl: &Rendered,
    providers: &[&str],
    expected: impl Fn(&LoadBalancer) -> String,
) {
    let cluster = tpl.one("Cluster");
    let lb_name = tpl.one("LoadBalancer")["metadata"]["name"]
        .as_str()
        .unwrap();
    assert_eq!(
        cluster["metadata"]["annotations"]["loadbalancer.cluster.x-k8s.io/loadBalancerRef"],
        json!(lb_name)
    );
    t.start(t.options(providers));
    let lb = wait_ready(t, lb_name).await;
    let want = expected(&lb);
    assert_eq!(cluster_endpoint(t).await, want);
    check_capi_lb_objects(t, tpl, &lb, &address(&lb)).await;
    cluster_api_owns_the_referenced_objects(t, tpl).await;
    // Cluster API reconciled the Cluster (it owns the referenced objects) and kept the endpoint.
    assert_eq!(cluster_endpoint(t).await, want);
    let lb = t.api::<LoadBalancer>().get(lb_name).await.unwrap();
    assert_eq!(
        condition(&lb, "ClusterEndpoint").map(|c| c.0).as_deref(),
        Some("True")
    );
}

#[tokio::test]
async fn kubeadm_inmemory_publishes_the_stable_name_as_the_cluster_endpoint() {
    let (mut t, tpl) = apply_template("kubeadm-inmemory").await;
    let ns = t.ns.clone();
    kubeadm_flavor(&mut t, &tpl, &["inmemory"], |lb| {
        format!("{}-ext.{ns}.svc.cluster.local:6443", lb.name_any())
    })
    .await;
    t.finish().await;
}

/// The user allocates the EIp the flavor requires and passes its address; cluster-api-provider-kubevirt
/// (played by the test: it does not run here) keeps the KubevirtCluster's given endpoint and marks it
/// ready before capi-lb even starts, so Cluster API copies the EIp's address into the Cluster first;
/// capi-lb, binding to the same EIp, agrees (`ClusterEndpointSet`), and never deletes the EIp.
#[tokio::test]
async fn kubevirt_kubedc_publishes_the_eip_address_as_the_cluster_endpoint() {
    let mut t = TestNs::new("e2e-tpl-kubevirt-kubedc").await;
    capi_lb_tests::kubedc_sim::make_project(&t.client, &t.ns).await;
    let sim = KubeDcSim::new().spawn(t.client.clone(), t.ns.clone());
    let eips = t.api::<capi_lb_api::kubedc::EIp>();
    t.create(json!({"apiVersion": "kube-dc.com/v1", "kind": "EIp",
                    "metadata": {"name": KUBEDC_EIP},
                    "spec": {"externalNetworkType": "cloud"}}))
        .await;
    wait_for(
        &eips,
        KUBEDC_EIP,
        "kube-dc gives the EIp its address",
        |e| e.and_then(|e| e.status.as_ref()?.ip_address.as_deref()) == Some(KUBEDC_EIP_ADDRESS),
    )
    .await;
    let tpl = apply_into(&t, "kubevirt-kubedc").await;
    let infra = tpl.one("KubevirtCluster");
    assert_eq!(
        infra["spec"]["controlPlaneEndpoint"],
        json!({"host": KUBEDC_EIP_ADDRESS, "port": 6443})
    );
    api_of(&t, infra)
        .await
        .patch_status(
            CLUSTER_NAME,
            &PatchParams::default().validation_strict(),
            &Patch::Merge(json!({"status": {"ready": true}})),
        )
        .await
        .unwrap();
    let want = format!("{KUBEDC_EIP_ADDRESS}:6443");
    assert_eq!(cluster_endpoint(&t).await, want, "copied by Cluster API");

    kubeadm_flavor(&mut t, &tpl, &["kubedc"], |lb| {
        format!("{}:6443", address(lb))
    })
    .await;
    let lb_name = tpl.one("LoadBalancer")["metadata"]["name"]
        .as_str()
        .unwrap();
    let lb = t.api::<LoadBalancer>().get(lb_name).await.unwrap();
    assert_eq!(address(&lb), KUBEDC_EIP_ADDRESS);
    assert_eq!(
        condition(&lb, "ClusterEndpoint"),
        Some(("True".into(), "ClusterEndpointSet".into()))
    );
    // Deleted while kube-dc's controller still runs: the given EIp stays.
    t.api::<LoadBalancer>()
        .delete(lb_name, &Default::default())
        .await
        .unwrap();
    capi_lb_tests::k8s::wait_gone(&t.api::<LoadBalancer>(), lb_name).await;
    assert!(eips.get_opt(KUBEDC_EIP).await.unwrap().is_some());
    sim.stop().await;
    t.finish().await;
}

/// What Kamaji's control-plane provider and Kamaji create from the template's KamajiControlPlane (no
/// Kamaji runs here), as their sources have it: the provider's TenantControlPlane of the same name,
/// controlled by the KamajiControlPlane, with `spec.network` mapped onto it
/// (clastix/cluster-api-control-plane-provider-kamaji, controllers/kamajicontrolplane_controller_tcp.go),
/// and Kamaji's Service for it (clastix/kamaji, internal/resources/k8s_service_resource.go): the
/// TenantControlPlane's name, Kamaji's labels and the selector of its pods, the service annotations,
/// port `kube-apiserver` 6443 -> 6443, type LoadBalancer with the class, controlled by the
/// TenantControlPlane. No pod runs here, so an EndpointSlice listing two ready pod addresses
/// ([`KAMAJI_POD_IPS`]) stands in for the one the EndpointSlice controller would write. Returns the
/// Service's name.
async fn kamaji_creates_the_tenant_control_plane(t: &TestNs, tpl: &Rendered) -> String {
    let kcp_doc = tpl.one("KamajiControlPlane");
    let name = kcp_doc["metadata"]["name"].as_str().unwrap().to_string();
    let kcp = api_of(t, kcp_doc).await.get(&name).await.unwrap();
    let spec = &kcp_doc["spec"];
    let network = &spec["network"];
    let pods = &tpl.one("Cluster")["spec"]["clusterNetwork"]["pods"]["cidrBlocks"];
    let owner = |api_version: &str, kind: &str, uid: String| {
        json!([{"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
                "controller": true, "blockOwnerDeletion": true}])
    };
    let tcp = json!({"apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "TenantControlPlane",
        "metadata": {"name": name,
                     "ownerReferences": owner("controlplane.cluster.x-k8s.io/v1alpha2",
                                              "KamajiControlPlane", kcp.uid().unwrap())},
        "spec": {
            "dataStore": spec["dataStoreName"],
            "controlPlane": {
                "deployment": {"replicas": spec["replicas"]},
                "service": {"serviceType": network["serviceType"],
                            "additionalMetadata": {"annotations": network["serviceAnnotations"]}}},
            "kubernetes": {"version": spec["version"], "kubelet": {}},
            "networkProfile": {"port": 6443, "certSANs": network["certSANs"], "podCidrs": pods,
                               "loadBalancerClass": network["loadBalancerConfig"]["loadBalancerClass"]}}});
    let tcp = apply_strictly(t, &tcp)
        .await
        .unwrap_or_else(|e| panic!("TenantControlPlane {name} refused: {e}"));
    let mut annotations = network["serviceAnnotations"].clone();
    assert!(annotations.is_object(), "{network}");
    let service = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name,
                     "labels": {"kamaji.clastix.io/project": "kamaji", "kamaji.clastix.io/name": name,
                                "kamaji.clastix.io/component": "service"},
                     "annotations": annotations.take(),
                     "ownerReferences": owner("kamaji.clastix.io/v1alpha1", "TenantControlPlane",
                                              tcp.uid().unwrap())},
        "spec": {"type": "LoadBalancer",
                 "loadBalancerClass": network["loadBalancerConfig"]["loadBalancerClass"],
                 "selector": {"kamaji.clastix.io/name": name},
                 "ports": [{"name": "kube-apiserver", "protocol": "TCP", "port": 6443,
                            "targetPort": 6443}]}});
    t.create(service).await;
    let endpoints: Vec<Value> = KAMAJI_POD_IPS
        .iter()
        .map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}}))
        .collect();
    t.create(json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{name}-pods"), "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4", "ports": [{"name": "kube-apiserver", "port": 6443, "protocol": "TCP"}],
        "endpoints": endpoints}))
        .await;
    name
}

/// Whether `addresses` are exactly Kamaji's pods ([`KAMAJI_POD_IPS`]), in any order.
fn are_kamaji_pods(addresses: impl Iterator<Item = String>) -> bool {
    let mut addresses: Vec<String> = addresses.collect();
    addresses.sort();
    addresses == KAMAJI_POD_IPS
}

/// A Kamaji flavor up to the Service realised: the LoadBalancer the Service names is Ready at
/// `address`, the Service's ingress is that address (an IP: Kamaji refuses hostnames), the stable
/// name is on it and in Kamaji's certificate SANs. Returns the Service and the address.
async fn kamaji_service_realised(t: &TestNs, tpl: &Rendered) -> (Service, String) {
    let service_name = kamaji_creates_the_tenant_control_plane(t, tpl).await;
    let lb_name = tpl.one("LoadBalancer")["metadata"]["name"]
        .as_str()
        .unwrap();
    let lb = wait_ready(t, lb_name).await;
    let address = address(&lb);
    let service = wait_for(
        &t.api::<Service>(),
        &service_name,
        &format!("Kamaji's Service {service_name} realised at {address}"),
        |s| {
            s.and_then(|s| s.status.as_ref()?.load_balancer.as_ref()?.ingress.as_ref())
                .is_some_and(|i| i.len() == 1 && i[0].ip.as_deref() == Some(address.as_str()))
        },
    )
    .await
    .unwrap();
    let stable = format!("{lb_name}-ext.{}.svc.cluster.local", t.ns);
    let service = wait_for(
        &t.api::<Service>(),
        &service_name,
        "the stable name on Kamaji's Service",
        |s| {
            s.and_then(|s| s.annotations().get(ANNOTATION_EXTERNAL_ENDPOINT_DNS_NAME))
                == Some(&stable)
        },
    )
    .await
    .unwrap_or(service);
    let sans = &tpl.one("KamajiControlPlane")["spec"]["network"]["certSANs"];
    assert!(
        sans.as_array().unwrap().contains(&json!(stable)),
        "{stable} not in {sans}"
    );
    check_capi_lb_objects(t, tpl, &lb, &address).await;
    // Not a control-plane LoadBalancer: Kamaji publishes the endpoint, capi-lb leaves the Cluster's.
    assert_eq!(condition(&lb, "ClusterEndpoint"), None, "{lb:?}");
    (service, address)
}

#[tokio::test]
async fn kamaji_kubedc_realises_kamajis_service_on_a_kube_dc_eip() {
    let (mut t, tpl) = apply_template("kamaji-kubedc").await;
    capi_lb_tests::kubedc_sim::make_project(&t.client, &t.ns).await;
    let sim = KubeDcSim::new().spawn(t.client.clone(), t.ns.clone());
    t.start(t.options(&["kubedc"]));
    let (_, address) = kamaji_service_realised(&t, &tpl).await;
    // The members: Kamaji's pods, in the endpoints of kube-dc's Service for the EIp.
    let lb_name = tpl.one("LoadBalancer")["metadata"]["name"]
        .as_str()
        .unwrap();
    wait_for(
        &t.api::<Endpoints>(),
        &format!("{lb_name}-lb"),
        "Kamaji's pods are the members",
        |e| {
            are_kamaji_pods(
                e.iter()
                    .flat_map(|e| e.subsets.iter().flatten())
                    .flat_map(|s| s.addresses.iter().flatten())
                    .map(|a| a.ip.clone()),
            )
        },
    )
    .await;
    cluster_api_owns_the_referenced_objects(&t, &tpl).await;

    // The KubevirtCluster is externally managed (cluster.x-k8s.io/managed-by: kamaji): CAPK leaves it
    // alone, and the Kamaji provider writes the endpoint Kamaji took from the ingress into it and
    // marks it ready (controllers/kamajicontrolplane_controller_cluster_patch.go, patchGenericCluster).
    // Cluster API's Cluster controller takes the endpoint from there.
    let infra = tpl.one("KubevirtCluster");
    assert_eq!(
        infra["metadata"]["annotations"]["cluster.x-k8s.io/managed-by"],
        "kamaji"
    );
    let kubevirt = api_of(&t, infra).await;
    let name = infra["metadata"]["name"].as_str().unwrap();
    kubevirt
        .patch(
            name,
            &PatchParams::default().validation_strict(),
            &Patch::Merge(
                json!({"spec": {"controlPlaneEndpoint": {"host": address, "port": 6443}}}),
            ),
        )
        .await
        .unwrap();
    kubevirt
        .patch_status(
            name,
            &PatchParams::default().validation_strict(),
            &Patch::Merge(json!({"status": {"ready": true}})),
        )
        .await
        .unwrap();
    assert_eq!(cluster_endpoint(&t).await, format!("{address}:6443"));

    t.api::<LoadBalancer>()
        .delete(lb_name, &Default::default())
        .await
        .unwrap();
    capi_lb_tests::k8s::wait_gone(&t.api::<LoadBalancer>(), lb_name).await;
    sim.stop().await;
    t.finish().await;
}

#[tokio::test]
async fn kamaji_octavia_realises_kamajis_service_with_the_in_memory_provider_standing_in() {
    let (mut t, tpl) = apply_template("kamaji-octavia").await;
    // The in-memory provider stands in for Octavia: the LoadBalancer is pointed at an
    // InMemoryLoadBalancer before capi-lb first sees it (the OctaviaLoadBalancer stays, accepted
    // and unused).
    let lb_doc = tpl.one("LoadBalancer");
    let lb_name = lb_doc["metadata"]["name"].as_str().unwrap();
    assert_eq!(
        lb_doc["spec"]["infrastructureRef"]["kind"],
        "OctaviaLoadBalancer"
    );
    let stand_in = format!("{lb_name}-stand-in");
    t.create(capi_lb_tests::k8s::in_memory(
        &stand_in,
        json!({"addressPools": ["203.0.113.0/24"]}),
    ))
    .await;
    let mut lb_doc = lb_doc.clone();
    lb_doc["spec"]["infrastructureRef"] = json!({"apiGroup": "infrastructure.cluster.x-k8s.io",
        "kind": "InMemoryLoadBalancer", "name": stand_in});
    apply_strictly(&t, &lb_doc).await.unwrap();
    t.start(t.options(&["inmemory"]));
    let (_, address) = kamaji_service_realised(&t, &tpl).await;
    wait_for(
        &t.api::<capi_lb_api::InMemoryLoadBalancer>(),
        &stand_in,
        "Kamaji's pods are the members",
        |i| {
            are_kamaji_pods(
                i.and_then(|i| i.status.as_ref())
                    .iter()
                    .flat_map(|s| s.members.iter())
                    .map(|m| m.address.clone()),
            )
        },
    )
    .await;
    cluster_api_owns_the_referenced_objects(&t, &tpl).await;

    // Reconciled by CAPO as usual: not externally managed. The Kamaji provider writes the endpoint
    // Kamaji took from the ingress into spec.apiServerFixedIP and spec.apiServerPort
    // (controllers/kamajicontrolplane_controller_cluster_patch.go, patchOpenStackCluster): CAPO's
    // schema has both fields.
    let infra = tpl.one("OpenStackCluster");
    assert!(
        infra["metadata"]["annotations"]["cluster.x-k8s.io/managed-by"].is_null(),
        "{infra}"
    );
    assert_eq!(infra["spec"]["apiServerLoadBalancer"]["enabled"], false);
    assert_eq!(infra["spec"]["disableAPIServerFloatingIP"], true);
    let name = infra["metadata"]["name"].as_str().unwrap();
    let patched = api_of(&t, infra)
        .await
        .patch(
            name,
            &PatchParams::default().validation_strict(),
            &Patch::Merge(json!({"spec": {"apiServerFixedIP": address, "apiServerPort": 6443}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data["spec"]["apiServerFixedIP"], json!(address));
    t.finish().await;
}
