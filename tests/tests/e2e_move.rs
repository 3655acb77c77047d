//! End-to-end tests of `clusterctl move` (the real clusterctl of the harness's Cluster API release)
//! from the cluster under test (the source) to a second management cluster (the target,
//! `tests/k8s/harness.sh target`), both with the real Cluster API manager and its webhooks.
//!
//! The workload cluster of a moved Cluster stays the source's apiserver (its `<cluster>-kubeconfig`
//! Secret moves with it), so the Machine's nodeRef, which `clusterctl move` requires, comes from a
//! Node there, as in `e2e_capi.rs`.
// Integration tests: helpers panic on broken fixtures, which is the failure we want.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Instant;

use capi_lb_tests::capi_move::{
    TEST_MOVE_KIND, TargetNs, clusterctl_move, clusterctl_move_dry_run, install_test_move_kind,
    prepare_target,
};
use capi_lb_tests::k8s::{
    TestNs, capi, capi_cluster, connect_workload_cluster, dynamic_api, eventually,
    install_capi_crds, machine_with_node, node_name, test_infra,
};
use k8s_openapi::api::core::v1::{Node, Secret};
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
    let clusters = dynamic_api(&t.client, Some(&t.ns), &capi_cluster("demo"))
        .await
        .unwrap();
    eventually(
        "Cluster demo provisioned and its control plane initialized",
        || async {
            let c = clusters.get("demo").await.ok()?;
            let status = c.data.get("status")?;
            let provisioned = status["initialization"]["infrastructureProvisioned"] == json!(true);
            let initialized = status["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "ControlPlaneInitialized" && c["status"] == "True");
            (provisioned && initialized).then_some(())
        },
    )
    .await;

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
