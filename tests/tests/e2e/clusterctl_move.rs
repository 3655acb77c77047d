//! End-to-end tests of `clusterctl move` (the real clusterctl of the harness's Cluster API release)
//! from the cluster under test (the source) to a second management cluster (the target,
//! `tests/k8s/harness.sh target`), both with the real Cluster API manager and its webhooks.
//!
//! The workload cluster of a moved Cluster stays the source's apiserver (its `<cluster>-kubeconfig`
//! Secret moves with it), so the Machine's nodeRef, which `clusterctl move` requires, comes from a
//! Node there, as in `e2e/capi.rs`.

use std::time::Instant;

use capi_lb_api::capi::Machine;
use capi_lb_api::target::TargetKeys;
use capi_lb_api::{LoadBalancer, OctaviaLoadBalancer};
use capi_lb_tests::capi_move::{
    TEST_MOVE_KIND, TargetNs, clusterctl_move, clusterctl_move_dry_run, install_test_move_kind,
    prepare_target, target_controller_client, wait_ready_to_move,
};
use capi_lb_tests::k8s::{
    TestNs, capi, capi_cluster, connect_workload_cluster, cp_cluster, dynamic_api, eventually,
    install_capi_crds, machine_with_node, merge, node_name, spawn_controller, test_infra, wait_for,
};
use capi_lb_tests::octavia;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// The objects a move takes along, as (document naming the kind, name).
fn moved_objects() -> Vec<(Value, &'static str)> {
    vec![
        (capi_cluster("demo"), "demo"),
        (
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine"}),
            "cp-1",
        ),
        (test_infra("TestCluster", "demo", json!({})), "demo"),
        (test_infra("TestMachine", "cp-1", json!({})), "cp-1"),
        (
            test_infra(TEST_MOVE_KIND, "settings", json!({})),
            "settings",
        ),
        (
            json!({"apiVersion": "v1", "kind": "Secret"}),
            "demo-kubeconfig",
        ),
    ]
}

async fn get(client: &Client, ns: &str, kind: &Value, name: &str) -> Option<DynamicObject> {
    dynamic_api(client, Some(ns), kind)
        .await
        .unwrap()
        .get_opt(name)
        .await
        .unwrap()
}

/// A Cluster on a provisioned TestCluster with one control-plane Machine whose Node exists (so
/// Cluster API sets its nodeRef and the Cluster's ControlPlaneInitialized), its kubeconfig Secret
/// and an object of a kind whose CRD asks to be moved: everything `clusterctl move` needs. It
/// moves them all to the target, deletes them in the source and unpauses the Cluster there.
#[tokio::test]
async fn clusterctl_move_takes_a_cluster_to_the_target_cluster() {
    assert!(!capi().version.is_empty());
    let t = TestNs::new("e2e-move").await;
    install_capi_crds(&t.client).await;
    install_test_move_kind(&t.client).await;
    let target = TargetNs::new(&t.ns).await;
    prepare_target(&target.client).await;

    t.create(capi_cluster("demo")).await;
    t.create(test_infra("TestCluster", "demo", json!({}))).await;
    connect_workload_cluster(&t).await;
    machine_with_node(&t, "cp-1", "10.0.0.11").await;
    t.create(test_infra(
        TEST_MOVE_KIND,
        "settings",
        json!({"answer": 42}),
    ))
    .await;
    // clusterctl's preconditions on the Cluster, as Cluster API's controller sets them.
    wait_ready_to_move(&t.client, &t.ns, "demo").await;

    let dry_run = clusterctl_move_dry_run(&t.ns).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("clusterctl move --dry-run:\n{dry_run}");
    for (kind, name) in moved_objects() {
        assert!(
            get(&target.client, &t.ns, &kind, name).await.is_none(),
            "{} {name} in the target after a dry run",
            kind["kind"]
        );
    }

    let began = Instant::now();
    let out = clusterctl_move(&t.ns).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("clusterctl move took {:?}:\n{out}", began.elapsed());

    for (kind, name) in moved_objects() {
        let what = format!("{} {name}", kind["kind"]);
        assert!(
            get(&target.client, &t.ns, &kind, name).await.is_some(),
            "{what} not in the target after the move"
        );
        // clusterctl deleted it in the source (removing its finalizers).
        eventually(&format!("{what} gone from the source"), || async {
            get(&t.client, &t.ns, &kind, name)
                .await
                .is_none()
                .then_some(())
        })
        .await;
    }
    let moved = get(&target.client, &t.ns, &capi_cluster("demo"), "demo")
        .await
        .unwrap();
    assert_ne!(
        moved.data["spec"]["paused"],
        json!(true),
        "the Cluster is still paused in the target: {moved:?}"
    );
    assert!(
        !moved.annotations().contains_key("cluster.x-k8s.io/paused"),
        "the Cluster is still paused in the target: {moved:?}"
    );
    let secret: Api<Secret> = Api::namespaced(target.client.clone(), &t.ns);
    assert!(
        secret
            .get("demo-kubeconfig")
            .await
            .unwrap()
            .data
            .is_some_and(|d| d.contains_key("value")),
        "the kubeconfig Secret moved without its data"
    );
    let config = get(
        &target.client,
        &t.ns,
        &test_infra(TEST_MOVE_KIND, "x", json!({})),
        "settings",
    )
    .await
    .unwrap();
    assert_eq!(config.data["spec"]["answer"], json!(42));

    target.finish().await;
    // The Node in the source (the workload cluster) is not Cluster API's to delete here.
    let nodes: Api<Node> = Api::all(t.client.clone());
    let _ = nodes
        .delete(&node_name(&t, "cp-1"), &DeleteParams::default())
        .await;
    t.finish().await;
}

/// A test namespace in the source, the same namespace in the target (both cleaned up by the test).
async fn source_and_target(prefix: &str) -> (TestNs, TargetNs) {
    let t = TestNs::new(prefix).await;
    install_capi_crds(&t.client).await;
    let target = TargetNs::new(&t.ns).await;
    prepare_target(&target.client).await;
    (t, target)
}

/// `doc` in `t`'s namespace.
fn in_ns(t: &TestNs, mut doc: Value) -> Value {
    doc["metadata"]["namespace"] = json!(t.ns);
    doc
}

/// In the source: Cluster `demo` (its workload cluster connected), the Octavia credentials Secret
/// `openstack` labelled for move, OctaviaLoadBalancer `cp` with `olb_spec`, and a control-plane
/// LoadBalancer `cp` with `drain_seconds`; capi-lb started; returns the LoadBalancer once it is
/// Ready with the control-plane Machine `cp-1` (a Node in the workload cluster) active.
async fn octavia_control_plane(
    t: &mut TestNs,
    h: &octavia::Harness,
    olb_spec: Value,
    drain_seconds: u32,
) -> LoadBalancer {
    t.create(cp_cluster("demo")).await;
    t.create(test_infra("TestCluster", "demo", json!({}))).await;
    connect_workload_cluster(t).await;
    let mut secret = in_ns(t, octavia::Harness::secret("openstack", &h.clouds_yaml));
    secret["metadata"]["labels"] = json!({"clusterctl.cluster.x-k8s.io/move": ""});
    t.create(secret).await;
    t.create(in_ns(t, octavia::olb("cp", h, olb_spec))).await;
    t.create(in_ns(
        t,
        octavia::octavia_lb("cp")
            .spec("controlPlane", json!({}))
            .spec("drainSeconds", json!(drain_seconds))
            .build(),
    ))
    .await;
    t.start(t.options(&["octavia"]));
    machine_with_node(t, "cp-1", "10.0.0.11").await;
    wait_for(
        &t.api(),
        "cp",
        "Ready with cp-1 active",
        |l: Option<&LoadBalancer>| {
            l.and_then(|l| l.status.as_ref())
                .is_some_and(|s| s.ready && s.active_targets == ["cp-1"])
        },
    )
    .await
    .unwrap()
}

/// The Node of the moved Machine is the workload cluster's, not Cluster API's to delete: the test
/// deletes it.
async fn delete_node(t: &TestNs) {
    let nodes: Api<Node> = Api::all(t.client.clone());
    let _ = nodes
        .delete(&node_name(t, "cp-1"), &DeleteParams::default())
        .await;
}

/// capi-lb through the move: a control-plane LoadBalancer on the real Octavia API with a floating IP,
/// its credentials Secret labelled for move, capi-lb running in both clusters (as capi-lb's
/// ServiceAccount of each). clusterctl carries the LoadBalancer (owner reference to the Cluster) and
/// its OctaviaLoadBalancer (owner reference to the LoadBalancer); the source's controller deletes
/// nothing in the cloud while clusterctl deletes the objects there; the target's controller adopts
/// the Octavia load balancer and floating IP by their tags, rebuilds the status and the `-ext`
/// endpoint with the same address, and the Machine keeps its deletion hooks. (clusterctl does not
/// move status, so the Machine has no address in the target until an infrastructure provider
/// reports one again; its member is kept as it is meanwhile, and stays active.) Deleting the
/// LoadBalancer in the target then deletes the cloud load balancer.
#[tokio::test]
async fn clusterctl_move_carries_the_load_balancer_and_the_target_adopts_its_cloud_load_balancer() {
    let (h, _api) = octavia::shared_api().await;
    let (mut t, target) = source_and_target("e2e-move-lb").await;
    let lbs: Api<LoadBalancer> = t.api();
    let lb = octavia_control_plane(
        &mut t,
        &h,
        json!({"floatingIP": {"networkID": h.var("FIP_NETWORK_ID")}}),
        5,
    )
    .await;
    let tag = format!(
        "{}={}",
        capi_lb_providers::provider::tags::UID,
        lb.uid().unwrap()
    );
    let address = lb.status.as_ref().unwrap().addresses[0].address.clone();
    assert!(
        address.starts_with("203.0.113."),
        "{address}: the floating IP"
    );
    let before: OctaviaLoadBalancer = t.api().get("cp").await.unwrap();
    let before = before.status.unwrap();
    assert_eq!(h.lbs_tagged(&tag).len(), 1);
    let keys = TargetKeys::new(&t.ns, "cp");
    wait_ready_to_move(&t.client, &t.ns, "demo").await;

    // capi-lb runs in the target before the move, as after `clusterctl init` there.
    let target_controller =
        spawn_controller(target_controller_client().await, t.options(&["octavia"]));

    let began = Instant::now();
    let out = clusterctl_move(&t.ns).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("clusterctl move took {:?}:\n{out}", began.elapsed());
    eventually("the LoadBalancer gone from the source", || async {
        lbs.get_opt("cp").await.unwrap().is_none().then_some(())
    })
    .await;
    let target_lbs: Api<LoadBalancer> = Api::namespaced(target.client.clone(), &t.ns);
    let moved = target_lbs.get("cp").await.unwrap();
    assert!(moved.owner_references().iter().any(|o| o.kind == "Cluster"));
    assert_ne!(moved.uid(), lb.uid());
    let secrets: Api<Secret> = Api::namespaced(target.client.clone(), &t.ns);
    assert!(
        secrets.get_opt("openstack").await.unwrap().is_some(),
        "credentials moved"
    );

    let moved = wait_for(&target_lbs, "cp", "Ready in the target", |l| {
        l.and_then(|l| l.status.as_ref())
            .is_some_and(|s| s.ready && s.active_targets == ["cp-1"])
    })
    .await
    .unwrap();
    assert_eq!(moved.status.as_ref().unwrap().addresses[0].address, address);
    let after: Api<OctaviaLoadBalancer> = Api::namespaced(target.client.clone(), &t.ns);
    let after = after.get("cp").await.unwrap().status.unwrap();
    assert_eq!(after.load_balancer_id, before.load_balancer_id, "adopted");
    assert_eq!(after.floating_ip_id, before.floating_ip_id);
    assert_eq!(h.lbs_tagged(&tag).len(), 1, "no second load balancer");
    let slices: Api<EndpointSlice> = Api::namespaced(target.client.clone(), &t.ns);
    let slice = eventually("the -ext slice in the target", || async {
        slices.get_opt("cp-ext-ipv4").await.unwrap()
    })
    .await;
    assert_eq!(slice.endpoints[0].addresses, vec![address.clone()]);
    let machines: Api<Machine> = Api::namespaced(target.client.clone(), &t.ns);
    let machine = machines.get("cp-1").await.unwrap();
    assert!(machine.annotations().contains_key(&keys.pre_terminate));

    // Deleting it in the target deletes the cloud load balancer and releases the floating IP.
    target_lbs
        .delete("cp", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the LoadBalancer deleted in the target", || async {
        target_lbs
            .get_opt("cp")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(h.lbs_tagged(&tag).is_empty(), "{:?}", h.lbs_tagged(&tag));
    let (code, _) = h.neutron(
        "GET",
        &format!("floatingips/{}", before.floating_ip_id.unwrap()),
        None,
    );
    assert_eq!(code, 404, "the floating IP is released");

    target_controller.stop().await;
    target.finish().await;
    delete_node(&t).await;
    t.finish().await;
}

/// The same move in the middle of a provider swap: the LoadBalancer has switched from Octavia
/// load balancer `cp` to `cp-new` and drains the old one when clusterctl moves it. Status does not
/// move; the target's controller finds the old infrastructure object it still controls, adopts
/// both Octavia load balancers by their tags, and finishes the migration make-before-break: the
/// new one serves (same ID, same address), the old one is deleted after the drain, no third is made,
/// and the source deletes nothing in the cloud. The Machine has no address in the target (status
/// does not move) until a provider reports one again: its member in the new load balancer is kept
/// meanwhile (it used to be dropped while the migration brought the new one up).
#[tokio::test]
async fn clusterctl_move_in_the_middle_of_a_provider_swap_finishes_it_in_the_target() {
    let (h, _api) = octavia::shared_api().await;
    let (mut t, target) = source_and_target("e2e-move-swap").await;
    let drain = 10;
    let lb = octavia_control_plane(&mut t, &h, json!({}), drain).await;
    let tag = format!(
        "{}={}",
        capi_lb_providers::provider::tags::UID,
        lb.uid().unwrap()
    );
    let olbs: Api<OctaviaLoadBalancer> = t.api();
    let old_id = olbs
        .get("cp")
        .await
        .unwrap()
        .status
        .unwrap()
        .load_balancer_id
        .unwrap();

    // The swap: switched to cp-new, draining cp.
    t.create(in_ns(&t, octavia::olb("cp-new", &h, json!({}))))
        .await;
    let lbs: Api<LoadBalancer> = t.api();
    merge(
        &lbs,
        "cp",
        json!({"spec": {"infrastructureRef": {"name": "cp-new"}}}),
    )
    .await;
    let switched = wait_for(&lbs, "cp", "switched to cp-new, draining cp", |l| {
        l.and_then(|l| l.status.as_ref()?.migration.as_ref())
            .is_some_and(|m| m.switched_at.is_some())
    })
    .await
    .unwrap();
    let address = switched.status.as_ref().unwrap().addresses[0]
        .address
        .clone();
    let new_id = olbs
        .get("cp-new")
        .await
        .unwrap()
        .status
        .unwrap()
        .load_balancer_id
        .unwrap();
    assert_ne!(new_id, old_id);
    assert_eq!(h.lbs_tagged(&tag).len(), 2);
    wait_ready_to_move(&t.client, &t.ns, "demo").await;

    let target_controller =
        spawn_controller(target_controller_client().await, t.options(&["octavia"]));
    clusterctl_move(&t.ns).unwrap_or_else(|e| panic!("{e}"));
    eventually("the LoadBalancer gone from the source", || async {
        lbs.get_opt("cp").await.unwrap().is_none().then_some(())
    })
    .await;
    let ids = |lbs: Vec<Value>| {
        let mut ids: Vec<String> = lbs
            .iter()
            .map(|l| l["id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    };
    let mut both = vec![old_id.clone(), new_id.clone()];
    both.sort();
    assert_eq!(
        ids(h.lbs_tagged(&tag)),
        both,
        "the source deleted or the target made a load balancer"
    );

    // The target finishes the migration: it re-drains the old one for drainSeconds (the moment
    // of the switch did not move), then deletes it.
    let target_lbs: Api<LoadBalancer> = Api::namespaced(target.client.clone(), &t.ns);
    let done = eventually("the migration finished in the target", || async {
        target_lbs.get("cp").await.unwrap().status.filter(|s| {
            s.ready
                && s.migration.is_none()
                && s.infrastructure_ref.as_ref().map(|r| r.name.as_str()) == Some("cp-new")
        })
    })
    .await;
    assert_eq!(
        done.addresses[0].address, address,
        "the new load balancer's"
    );
    assert_eq!(done.active_targets, ["cp-1"]);
    assert_eq!(ids(h.lbs_tagged(&tag)), std::slice::from_ref(&new_id));
    let target_olbs: Api<OctaviaLoadBalancer> = Api::namespaced(target.client.clone(), &t.ns);
    let adopted = target_olbs.get("cp-new").await.unwrap().status.unwrap();
    assert_eq!(adopted.load_balancer_id.as_deref(), Some(new_id.as_str()));
    let released = target_olbs.get("cp").await.unwrap();
    assert!(released.finalizers().is_empty(), "{released:?}");
    assert!(released.owner_references().is_empty(), "{released:?}");
    let slices: Api<EndpointSlice> = Api::namespaced(target.client.clone(), &t.ns);
    let slice = eventually("the -ext slice in the target", || async {
        slices.get_opt("cp-ext-ipv4").await.unwrap()
    })
    .await;
    assert_eq!(slice.endpoints[0].addresses, vec![address]);

    target_lbs
        .delete("cp", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the LoadBalancer deleted in the target", || async {
        target_lbs
            .get_opt("cp")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(h.lbs_tagged(&tag).is_empty(), "{:?}", h.lbs_tagged(&tag));
    target_controller.stop().await;
    target.finish().await;
    delete_node(&t).await;
    t.finish().await;
}

/// kube-dc in another cluster than the management cluster: the bootstrap-and-pivot case, where the
/// bootstrap cluster (kind) reaches the kube-dc cluster through a kubeconfig, and the management
/// cluster the LoadBalancer moves to uses the same. The kube-dc cluster here is the source's
/// apiserver, with kube-dc's controller simulated in a project namespace there; the
/// KubeDCLoadBalancer names it through `spec.cluster` (a move-labelled Secret with a kubeconfig of
/// capi-lb's ServiceAccount there, CA inlined). The EIp and Service made there carry ownership
/// labels, no owner reference, so clusterctl's deletion of the source's objects leaves them; the
/// target's controller reads the moved Secret and adopts them by their labels: the same EIp (same
/// UID, same address), no second one; deleting the LoadBalancer in the target deletes them.
#[tokio::test]
async fn clusterctl_move_with_kube_dc_in_another_cluster_adopts_the_eip() {
    use capi_lb_api::kubedc::EIp;
    use capi_lb_tests::k8s::inline_controller_kubeconfig;
    use capi_lb_tests::kubedc_sim::KubeDcSim;
    use k8s_openapi::api::core::v1::Service;

    let (mut t, target) = source_and_target("e2e-move-kdc").await;
    // The kube-dc project namespace, with kube-dc's controller simulated there.
    let project = TestNs::new("e2e-kdc-project").await;
    capi_lb_tests::kubedc_sim::make_project(&project.client, &project.ns).await;
    let sim = KubeDcSim::new().spawn(project.client.clone(), project.ns.clone());
    let eips: Api<EIp> = project.api();
    let services: Api<Service> = project.api();

    t.create(cp_cluster("demo")).await;
    t.create(test_infra("TestCluster", "demo", json!({}))).await;
    connect_workload_cluster(&t).await;
    t.create(json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "kube-dc", "namespace": t.ns,
                                 "labels": {"clusterctl.cluster.x-k8s.io/move": ""}},
                    "stringData": {"value": inline_controller_kubeconfig()}}))
        .await;
    t.create(
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                    "kind": "KubeDCLoadBalancer", "metadata": {"name": "cp", "namespace": t.ns},
                    "spec": {"cluster": {"kubeconfigSecretName": "kube-dc",
                                         "namespace": project.ns}}}),
    )
    .await;
    let mut lb = capi_lb_tests::k8s::load_balancer(
        "cp",
        "cp",
        json!({"clusterName": "demo", "controlPlane": {}, "drainSeconds": 1}),
    );
    lb["metadata"]["namespace"] = json!(t.ns);
    lb["spec"]["infrastructureRef"]["kind"] = json!("KubeDCLoadBalancer");
    t.create(lb).await;
    t.start(t.options(&["kubedc"]));
    machine_with_node(&t, "cp-1", "10.0.0.11").await;
    let lbs: Api<LoadBalancer> = t.api();
    let lb = wait_for(&lbs, "cp", "Ready with cp-1 active", |l| {
        l.and_then(|l| l.status.as_ref())
            .is_some_and(|s| s.ready && s.active_targets == ["cp-1"])
    })
    .await
    .unwrap();
    let address = lb.status.as_ref().unwrap().addresses[0].address.clone();
    let eip = eips.get("cp-eip").await.unwrap();
    assert_eq!(
        eip.status.as_ref().unwrap().ip_address.as_deref(),
        Some(address.as_str())
    );
    assert!(eip.owner_references().is_empty(), "{:?}", eip.metadata);
    let service_uid = services.get("cp-lb").await.unwrap().uid();
    // Nothing of it is in the source's own namespace.
    assert!(t.api::<EIp>().get_opt("cp-eip").await.unwrap().is_none());
    wait_ready_to_move(&t.client, &t.ns, "demo").await;

    let target_controller =
        spawn_controller(target_controller_client().await, t.options(&["kubedc"]));
    let out = clusterctl_move(&t.ns).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{out}");
    eventually("the LoadBalancer gone from the source", || async {
        lbs.get_opt("cp").await.unwrap().is_none().then_some(())
    })
    .await;
    let target_lbs: Api<LoadBalancer> = Api::namespaced(target.client.clone(), &t.ns);
    let moved = wait_for(&target_lbs, "cp", "Ready in the target", |l| {
        l.and_then(|l| l.status.as_ref())
            .is_some_and(|s| s.ready && s.active_targets == ["cp-1"])
    })
    .await
    .unwrap();
    assert_eq!(moved.status.as_ref().unwrap().addresses[0].address, address);
    let listed = eips.list(&Default::default()).await.unwrap().items;
    assert_eq!(
        listed
            .iter()
            .map(|e| (e.name_any(), e.uid()))
            .collect::<Vec<_>>(),
        [("cp-eip".to_string(), eip.uid())],
        "the same EIp, no second one"
    );
    assert_eq!(services.get("cp-lb").await.unwrap().uid(), service_uid);
    let slices: Api<EndpointSlice> = Api::namespaced(target.client.clone(), &t.ns);
    let slice = eventually("the -ext slice in the target", || async {
        slices.get_opt("cp-ext-ipv4").await.unwrap()
    })
    .await;
    assert_eq!(slice.endpoints[0].addresses, vec![address.clone()]);

    // Deleting it in the target deletes the EIp and the Service in the kube-dc cluster.
    target_lbs
        .delete("cp", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the EIp and Service deleted in kube-dc", || async {
        let left = eips.list(&Default::default()).await.unwrap().items.len()
            + services
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .len();
        (left == 0).then_some(())
    })
    .await;
    eventually("the LoadBalancer deleted in the target", || async {
        target_lbs
            .get_opt("cp")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;

    sim.stop().await;
    target_controller.stop().await;
    target.finish().await;
    delete_node(&t).await;
    t.finish().await;
    project.finish().await;
}
