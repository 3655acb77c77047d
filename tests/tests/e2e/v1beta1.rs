//! capi-lb on an older management cluster whose Cluster API serves only the deprecated v1beta1 API
//! (the harness's legacy instance: Cluster API v1.8.4's CRDs, v1beta1 served and stored, no
//! v1beta2; another cluster in `CAPI_LB_E2E_LEGACY_KUBECONFIG`). The controller runs in-process as
//! capi-lb's ServiceAccount, and every Cluster API object is written and read at
//! `cluster.x-k8s.io/v1beta1`, in v1beta1's shapes: `controlPlaneRef` with `apiVersion`, a `nodeRef`
//! that is a full ObjectReference, conditions with `severity`.
//!
//! No Cluster API controller runs there: the tests write the Machines' status as Cluster API would
//! (addresses, nodeRef, conditions), and a Machine's own finalizer stands for Cluster API's, which
//! holds a deleted Machine while deletion hooks are on it.

use std::time::Instant;

use capi_lb_api::target::TargetKeys;
use capi_lb_api::{InMemoryLoadBalancer, LoadBalancer};
use capi_lb_tests::k8s::{
    TestNs, condition, eventually, in_memory, load_balancer, merge, wait_for, wait_gone,
    wait_ready, wait_targets,
};
use capi_lb_tests::legacy::legacy_ns;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

const V1BETA1: &str = "cluster.x-k8s.io/v1beta1";
const KCP_API_VERSION: &str = "controlplane.cluster.x-k8s.io/v1beta1";

/// A namespace of the legacy cluster, after checking that it is one: Cluster API's group serves
/// v1beta1 and not v1beta2 (else these tests would prove nothing).
async fn legacy(prefix: &str) -> TestNs {
    let t = legacy_ns(prefix).await;
    let group = kube::discovery::group(&t.client, "cluster.x-k8s.io")
        .await
        .unwrap_or_else(|e| panic!("the legacy cluster serves no cluster.x-k8s.io: {e}"));
    assert_eq!(
        group.versions().collect::<Vec<_>>(),
        ["v1beta1"],
        "the legacy cluster must serve Cluster API v1beta1 only"
    );
    t
}

/// The v1beta1 API of Cluster API kind `kind` in `t`'s namespace.
fn v1beta1(t: &TestNs, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, &format!("{}s", kind.to_lowercase()));
    Api::namespaced_with(t.client.clone(), &t.ns, &resource)
}

/// A v1beta1 Cluster `name` (no webhook runs: only the schema checks it).
fn cluster(name: &str, paused: bool) -> Value {
    json!({"apiVersion": V1BETA1, "kind": "Cluster", "metadata": {"name": name},
           "spec": {"paused": paused}})
}

/// `cluster` naming LoadBalancer `cp` as its control-plane load balancer (its consent to get its
/// endpoint written).
fn naming_cp(mut cluster: Value) -> Value {
    cluster["metadata"]["annotations"] =
        json!({capi_lb_api::constants::ANNOTATION_LOAD_BALANCER_REF: "cp"});
    cluster
}

/// A v1beta1 control-plane Machine of Cluster `demo`, with the finalizer Cluster API would put on
/// it (so that a deleted Machine waits for capi-lb's hooks, as Cluster API would make it wait).
fn machine(name: &str) -> Value {
    json!({"apiVersion": V1BETA1, "kind": "Machine",
           "metadata": {"name": name, "finalizers": ["machine.cluster.x-k8s.io"],
                        "labels": {"cluster.x-k8s.io/cluster-name": "demo",
                                   "cluster.x-k8s.io/control-plane": ""}},
           "spec": {"clusterName": "demo", "bootstrap": {"dataSecretName": "none"},
                    "infrastructureRef": {"apiVersion": "infrastructure.test.capi-lb.io/v1alpha1",
                                          "kind": "TestMachine", "name": name}}})
}

/// What Cluster API v1.8 writes into a running Machine's status: its addresses, a nodeRef in
/// v1beta1's ObjectReference form, and v1beta1 conditions (with `severity` when not True), here
/// `APIServerPodHealthy` as `api_server_healthy` says.
fn running_status(name: &str, ip: &str, api_server_healthy: bool) -> Value {
    let healthy = if api_server_healthy {
        json!({"type": "APIServerPodHealthy", "status": "True",
               "lastTransitionTime": "2024-10-01T00:00:00Z"})
    } else {
        json!({"type": "APIServerPodHealthy", "status": "False", "severity": "Error",
               "reason": "PodFailed", "message": "the kube-apiserver Pod is not running",
               "lastTransitionTime": "2024-10-01T00:00:00Z"})
    };
    json!({"status": {
    "phase": "Running", "bootstrapReady": true, "infrastructureReady": true,
    "addresses": [{"type": "Hostname", "address": name}, {"type": "InternalIP", "address": ip}],
    "nodeRef": {"apiVersion": "v1", "kind": "Node", "name": format!("node-{name}"),
                "uid": "6d0c2a0e-0000-4000-8000-000000000001"},
    "conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2024-10-01T00:00:00Z"},
        healthy,
    ]}})
}

async fn create_machine(t: &TestNs, name: &str, ip: &str, api_server_healthy: bool) {
    t.create(machine(name)).await;
    v1beta1(t, "Machine")
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&running_status(name, ip, api_server_healthy)),
        )
        .await
        .unwrap();
    // The status stuck: the v1beta1 schema kept the nodeRef and conditions as written.
    let m = v1beta1(t, "Machine").get(name).await.unwrap();
    assert_eq!(m.data["status"]["nodeRef"]["kind"], "Node", "{m:?}");
}

/// The load balancer's members as (name, state), sorted (the in-memory provider's view).
async fn members(t: &TestNs, lb: &str) -> Vec<(String, String)> {
    let infra = t.api::<InMemoryLoadBalancer>().get(lb).await.unwrap();
    let mut got: Vec<(String, String)> = infra
        .status
        .map(|s| s.members.into_iter().map(|m| (m.name, m.state)).collect())
        .unwrap_or_default();
    got.sort();
    got
}

/// Whether the v1beta1 object carries both of capi-lb's deletion hooks of `keys`.
fn has_hooks(o: &DynamicObject, keys: &TargetKeys) -> bool {
    o.annotations().contains_key(&keys.pre_drain)
        && o.annotations().contains_key(&keys.pre_terminate)
}

/// Whether it carries neither.
fn has_no_hook(o: &DynamicObject, keys: &TargetKeys) -> bool {
    !o.annotations().contains_key(&keys.pre_drain)
        && !o.annotations().contains_key(&keys.pre_terminate)
}

async fn wait_machine(t: &TestNs, name: &str, what: &str, check: impl Fn(&DynamicObject) -> bool) {
    let machines = v1beta1(t, "Machine");
    eventually(&format!("Machine {name}: {what}"), || async {
        machines
            .get_opt(name)
            .await
            .unwrap()
            .filter(|m| check(m))
            .map(|_| ())
    })
    .await;
}

/// The Cluster's `spec.controlPlaneEndpoint`, read at v1beta1.
async fn control_plane_endpoint(t: &TestNs, name: &str) -> Value {
    v1beta1(t, "Cluster").get(name).await.unwrap().data["spec"]["controlPlaneEndpoint"].clone()
}

/// A control-plane LoadBalancer (`spec.controlPlane`) over v1beta1 Machines: Ready with both members
/// active once their readiness gate (a v1beta1 condition) is True, the stable endpoint published
/// into the v1beta1 Cluster, an owner reference to the Cluster at the version the cluster serves,
/// capi-lb's deletion hooks on both Machines; a deleted Machine is drained and removed and its
/// hooks released, and deleting the LoadBalancer releases the hooks of the Machine left.
#[tokio::test]
async fn a_control_plane_load_balancer_over_v1beta1_machines() {
    let started = Instant::now();
    let mut t = legacy("e2e-v1beta1-cp").await;
    t.start(t.options(&["inmemory"]));
    t.create(naming_cp(cluster("demo", false))).await;
    create_machine(&t, "cp-1", "10.0.0.11", true).await;
    create_machine(&t, "cp-2", "10.0.0.12", false).await;
    t.create(in_memory("cp", json!({}))).await;
    t.create(load_balancer(
        "cp",
        "cp",
        json!({"clusterName": "demo", "controlPlane": {}, "drainSeconds": 1,
               "readinessGates": [{"conditionType": "APIServerPodHealthy"}]}),
    ))
    .await;

    wait_ready(&t, "cp").await;
    let host = format!("cp-ext.{}.svc.cluster.local", t.ns);
    eventually("the endpoint in the v1beta1 Cluster", || async {
        (control_plane_endpoint(&t, "demo").await == json!({"host": host, "port": 6443}))
            .then_some(())
    })
    .await;
    // cp-2's v1beta1 APIServerPodHealthy is False: not admitted.
    let lb = wait_targets(&t, "cp", &["cp-1", "cp-2"], &["cp-1"]).await;
    assert_eq!(
        condition(&lb, "ClusterEndpoint"),
        Some(("True".into(), "ClusterEndpointSet".into()))
    );
    assert_eq!(
        condition(&lb, "Paused"),
        Some(("False".into(), "NotPaused".into()))
    );
    // The owner reference names the Cluster at the version the apiserver serves (the garbage
    // collector resolves it by that version).
    let cluster_uid = v1beta1(&t, "Cluster").get("demo").await.unwrap().uid();
    let owner = lb
        .owner_references()
        .iter()
        .find(|o| o.kind == "Cluster")
        .unwrap_or_else(|| panic!("no owner reference to the Cluster: {:?}", lb.metadata));
    assert_eq!(
        (
            owner.api_version.as_str(),
            owner.name.as_str(),
            owner.uid.clone()
        ),
        (V1BETA1, "demo", cluster_uid.unwrap())
    );

    // The API server Pod of cp-2 became healthy (Cluster API updates its v1beta1 condition).
    v1beta1(&t, "Machine")
        .patch_status(
            "cp-2",
            &PatchParams::default(),
            &Patch::Merge(&running_status("cp-2", "10.0.0.12", true)),
        )
        .await
        .unwrap();
    wait_targets(&t, "cp", &["cp-1", "cp-2"], &["cp-1", "cp-2"]).await;
    assert_eq!(
        members(&t, "cp").await,
        [
            ("cp-1".into(), "Active".into()),
            ("cp-2".into(), "Active".into())
        ]
    );
    let keys = TargetKeys::new(&t.ns, "cp");
    for name in ["cp-1", "cp-2"] {
        wait_machine(&t, name, "capi-lb's deletion hooks", |m| {
            has_hooks(m, &keys)
        })
        .await;
    }

    // A user deletes cp-1; Cluster API (its finalizer here) would wait for the hooks.
    v1beta1(&t, "Machine")
        .delete("cp-1", &DeleteParams::default())
        .await
        .unwrap();
    wait_machine(&t, "cp-1", "hooks released once its member is gone", |m| {
        m.metadata.deletion_timestamp.is_some() && has_no_hook(m, &keys)
    })
    .await;
    // The InMemoryLoadBalancer's status (the cloud's view) is written after the hooks go.
    eventually("cp-1's member gone", || async {
        (members(&t, "cp").await == [("cp-2".to_string(), "Active".to_string())]).then_some(())
    })
    .await;
    // Still a target (removed) while Cluster API holds it; gone once Cluster API lets it go.
    wait_targets(&t, "cp", &["cp-1", "cp-2"], &["cp-2"]).await;
    merge(
        &v1beta1(&t, "Machine"),
        "cp-1",
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
    eventually("Machine cp-1 gone", || async {
        v1beta1(&t, "Machine")
            .get_opt("cp-1")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    wait_targets(&t, "cp", &["cp-2"], &["cp-2"]).await;
    wait_machine(&t, "cp-2", "still hooked", |m| has_hooks(m, &keys)).await;

    // Deleting the LoadBalancer releases the hooks of the Machine left.
    t.api::<LoadBalancer>()
        .delete("cp", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&t.api::<LoadBalancer>(), "cp").await;
    wait_machine(&t, "cp-2", "hooks released", |m| has_no_hook(m, &keys)).await;
    t.finish().await;
    eprintln!("took {:?}", started.elapsed());
}

/// A Cluster whose v1beta1 `controlPlaneRef` (apiVersion, kind, name) names a v1beta1
/// KubeadmControlPlane carrying `loadbalancer.cluster.x-k8s.io/loadBalancerRef`: the LoadBalancer
/// it names (without `spec.controlPlane`) is the Cluster's control-plane load balancer and
/// publishes the endpoint; another LoadBalancer of the same Cluster does not.
#[tokio::test]
async fn the_load_balancer_ref_on_a_v1beta1_control_plane_is_honoured() {
    let started = Instant::now();
    let mut t = legacy("e2e-v1beta1-ref").await;
    t.start(t.options(&["inmemory"]));
    t.create(json!({
        "apiVersion": KCP_API_VERSION, "kind": "KubeadmControlPlane",
        "metadata": {"name": "demo-cp",
                     "annotations": {"loadbalancer.cluster.x-k8s.io/loadBalancerRef": "api"}},
        "spec": {"version": "v1.30.5", "replicas": 1, "kubeadmConfigSpec": {},
                 "machineTemplate": {"infrastructureRef": {
                     "apiVersion": "infrastructure.test.capi-lb.io/v1alpha1",
                     "kind": "TestMachineTemplate", "name": "demo-cp"}}}}))
        .await;
    let mut c = cluster("demo", false);
    c["spec"]["controlPlaneRef"] =
        json!({"apiVersion": KCP_API_VERSION, "kind": "KubeadmControlPlane", "name": "demo-cp"});
    t.create(c).await;
    for name in ["api", "other"] {
        t.create(in_memory(name, json!({}))).await;
        t.create(load_balancer(name, name, json!({"clusterName": "demo"})))
            .await;
    }
    wait_ready(&t, "other").await;
    let lb = wait_ready(&t, "api").await;
    eventually("the endpoint in the v1beta1 Cluster", || async {
        let want = json!({"host": format!("api-ext.{}.svc.cluster.local", t.ns), "port": 6443});
        (control_plane_endpoint(&t, "demo").await == want).then_some(())
    })
    .await;
    let lb = wait_for(
        &t.api::<LoadBalancer>(),
        "api",
        "ClusterEndpoint True",
        |l| l.is_some_and(|l| condition(l, "ClusterEndpoint").is_some_and(|c| c.0 == "True")),
    )
    .await
    .unwrap_or(lb);
    assert_eq!(
        condition(&lb, "ClusterEndpoint"),
        Some(("True".into(), "ClusterEndpointSet".into()))
    );
    // The other LoadBalancer of the Cluster is not named: no control-plane role, no condition.
    let other = t.api::<LoadBalancer>().get("other").await.unwrap();
    assert_eq!(condition(&other, "ClusterEndpoint"), None, "{other:?}");

    // A Cluster whose control plane is of a kind the cluster does not serve: whether it names a
    // LoadBalancer cannot be told, and the LoadBalancer says so (not a silent skip).
    let mut c = cluster("odd", false);
    c["spec"]["controlPlaneRef"] =
        json!({"apiVersion": KCP_API_VERSION, "kind": "NoSuchControlPlane", "name": "odd-cp"});
    t.create(c).await;
    t.create(in_memory("odd", json!({}))).await;
    t.create(load_balancer("odd", "odd", json!({"clusterName": "odd"})))
        .await;
    let odd = wait_for(
        &t.api::<LoadBalancer>(),
        "odd",
        "ClusterEndpoint ControlPlaneUnreadable",
        |l| l.is_some_and(|l| condition(l, "ClusterEndpoint").is_some()),
    )
    .await
    .unwrap();
    assert_eq!(
        condition(&odd, "ClusterEndpoint"),
        Some(("False".into(), "ControlPlaneUnreadable".into())),
        "{odd:?}"
    );
    assert_eq!(control_plane_endpoint(&t, "odd").await, Value::Null);
    t.finish().await;
    eprintln!("took {:?}", started.elapsed());
}

/// `spec.paused` on a v1beta1 Cluster pauses its LoadBalancer (nothing is created, `Paused` is True)
/// until it is cleared; then the LoadBalancer becomes Ready, and it goes with its Cluster: the
/// garbage collector deletes it when the v1beta1 Cluster is deleted.
#[tokio::test]
async fn a_paused_v1beta1_cluster_pauses_and_its_deletion_takes_the_load_balancer() {
    let started = Instant::now();
    let mut t = legacy("e2e-v1beta1-pause").await;
    t.start(t.options(&["inmemory"]));
    t.create(naming_cp(cluster("demo", true))).await;
    create_machine(&t, "cp-1", "10.0.0.21", true).await;
    t.create(in_memory("cp", json!({}))).await;
    t.create(load_balancer(
        "cp",
        "cp",
        json!({"clusterName": "demo", "controlPlane": {}}),
    ))
    .await;
    let lb = wait_for(&t.api::<LoadBalancer>(), "cp", "Paused True", |l| {
        l.is_some_and(|l| condition(l, "Paused").is_some_and(|c| c.0 == "True"))
    })
    .await
    .unwrap();
    assert!(!lb.status.as_ref().is_some_and(|s| s.ready), "{lb:?}");
    // Paused: no endpoint written, no load balancer made.
    assert_eq!(control_plane_endpoint(&t, "demo").await, Value::Null);
    assert_eq!(members(&t, "cp").await, []);
    assert!(
        t.api::<InMemoryLoadBalancer>()
            .get("cp")
            .await
            .unwrap()
            .status
            .is_none_or(|s| s.members.is_empty())
    );

    merge(
        &v1beta1(&t, "Cluster"),
        "demo",
        json!({"spec": {"paused": false}}),
    )
    .await;
    wait_ready(&t, "cp").await;
    wait_targets(&t, "cp", &["cp-1"], &["cp-1"]).await;
    let lb = t.api::<LoadBalancer>().get("cp").await.unwrap();
    assert_eq!(
        condition(&lb, "Paused"),
        Some(("False".into(), "NotPaused".into()))
    );

    // The Cluster goes (no Cluster API finalizer here): the garbage collector follows capi-lb's
    // owner reference and deletes the LoadBalancer, whose finalizer releases the Machine's hooks.
    let keys = TargetKeys::new(&t.ns, "cp");
    wait_machine(&t, "cp-1", "capi-lb's deletion hooks", |m| {
        has_hooks(m, &keys)
    })
    .await;
    v1beta1(&t, "Cluster")
        .delete("demo", &DeleteParams::background())
        .await
        .unwrap();
    wait_gone(&t.api::<LoadBalancer>(), "cp").await;
    wait_machine(&t, "cp-1", "hooks released", |m| has_no_hook(m, &keys)).await;
    t.finish().await;
    eprintln!("took {:?}", started.elapsed());
}

/// An owner reference to the Cluster at a version the cluster does not serve (left by an older
/// capi-lb, or by a Cluster API downgrade) is rewritten to the version it serves, so that the
/// garbage collector can resolve it; the LoadBalancer keeps exactly one reference to its Cluster.
#[tokio::test]
async fn an_owner_reference_to_the_cluster_follows_the_served_version() {
    let mut t = legacy("e2e-v1beta1-owner").await;
    t.create(cluster("demo", false)).await;
    let uid = v1beta1(&t, "Cluster")
        .get("demo")
        .await
        .unwrap()
        .uid()
        .unwrap();
    t.create(in_memory("cp", json!({}))).await;
    let mut lb = load_balancer("cp", "cp", json!({"clusterName": "demo"}));
    lb["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "demo", "uid": uid}]);
    t.create(lb).await;
    t.start(t.options(&["inmemory"]));
    let lb = wait_for(
        &t.api::<LoadBalancer>(),
        "cp",
        "the owner reference at v1beta1",
        |l| {
            l.is_some_and(|l| {
                l.owner_references()
                    .iter()
                    .any(|o| o.api_version == V1BETA1)
            })
        },
    )
    .await
    .unwrap();
    let owners: Vec<_> = lb
        .owner_references()
        .iter()
        .map(|o| (o.api_version.as_str(), o.kind.as_str(), o.uid.as_str()))
        .collect();
    assert_eq!(owners, [(V1BETA1, "Cluster", uid.as_str())]);
    wait_ready(&t, "cp").await;
    t.finish().await;
}
