//! The tenants' roles (`controllers/src/install/tenants.rs`) as each install ships them, on real
//! apiservers with kube-controller-manager's aggregation and the real authorizer: a user bound to
//! Kubernetes' own `edit` in a namespace creates, changes and deletes LoadBalancers and the shipped
//! providers' kinds there (never the in-memory kind, never a status), a user bound to `view` reads
//! them; asked with `kubectl auth can-i` and by creating objects as those users
//! (`capi_lb_tests::tenant::check_tenant_roles`).
//!
//! - `kubectl apply -k config/default` (its `rbac/tenant_roles.yaml`), on the main instance;
//! - `helm install` on the second instance (the target of `clusterctl move`, where no other install
//!   of capi-lb's roles is): with `tenantRoles.enabled=false` nobody gets anything, after `helm
//!   upgrade` with the default the users do, and `helm uninstall` takes the roles away again;
//! - `clusterctl init` on the fresh instance: in e2e/clusterctl.rs.

use std::path::{Path, PathBuf};

use capi_lb_tests::capi_move::{target, target_admin_client};
use capi_lb_tests::k8s::{TestNs, cluster, kubectl, unique_name};
use capi_lb_tests::tenant::check_tenant_roles;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[tokio::test]
async fn config_defaults_tenant_roles_let_namespace_editors_and_viewers_in() {
    // Cluster-wide and shared with the install tests: applied idempotently, never deleted.
    kubectl(
        &[
            "apply",
            "--server-side",
            "-f",
            repo()
                .join("config/rbac/tenant_roles.yaml")
                .to_str()
                .unwrap(),
        ],
        None,
    );
    let t = TestNs::new("tenant-roles").await;
    check_tenant_roles(&cluster().kubeconfig, &t.client, &t.ns, true).await;
    t.finish().await;
}

/// `helm ARGS` against this test's instance, with a helm home of its own.
async fn helm(home: &Path, args: &[&str]) {
    capi_lb_tests::k8s::helm_on(&target().kubeconfig, home, args).await;
}

/// A namespace of the target, labelled for this test.
async fn target_namespace(client: &kube::Client, prefix: &str) -> String {
    let name = unique_name(prefix);
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name,
                "labels": {"capi-lb-e2e/tenant-roles": ""}}}))
            .unwrap(),
        )
        .await
        .unwrap();
    name
}

#[tokio::test]
async fn the_charts_tenant_roles_follow_tenant_roles_enabled() {
    let client = target_admin_client().await;
    // Tenant roles an interrupted run of this test left on the target (its release never
    // uninstalled) would aggregate into edit and view and make the "off" check below pass or fail
    // for the wrong reason: the target holds no other install of them, so they go.
    let all_roles: Api<ClusterRole> = Api::all(client.clone());
    for role in all_roles
        .list(&ListParams::default().labels("app.kubernetes.io/name=capi-lb"))
        .await
        .unwrap()
        .items
    {
        let name = role.metadata.name.unwrap_or_default();
        if name.ends_with("-tenant-edit") || name.ends_with("-tenant-view") {
            let _ = all_roles.delete(&name, &DeleteParams::default()).await;
        }
    }
    let home = std::env::temp_dir().join(unique_name("capi-lb-e2e-helm-tenants"));
    let release = unique_name("tr");
    let release_ns = target_namespace(&client, "tr-release").await;
    let chart = repo().join("charts/capi-lb");
    let chart = chart.to_str().unwrap();
    helm(
        &home,
        &[
            "install",
            &release,
            chart,
            "--namespace",
            &release_ns,
            "--set",
            "tenantRoles.enabled=false",
        ],
    )
    .await;
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let ours = || async {
        roles
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|r| r.metadata.name)
            .filter(|n| n.starts_with(&release) && n.contains("-tenant-"))
            .collect::<Vec<_>>()
    };
    assert!(
        ours().await.is_empty(),
        "tenantRoles.enabled=false installs none"
    );
    let off = target_namespace(&client, "tr-off").await;
    check_tenant_roles(&target().kubeconfig, &client, &off, false).await;

    // --reset-values: with no value given, helm upgrade would keep the release's
    // tenantRoles.enabled=false.
    helm(
        &home,
        &[
            "upgrade",
            &release,
            chart,
            "--namespace",
            &release_ns,
            "--reset-values",
        ],
    )
    .await;
    assert_eq!(ours().await.len(), 2, "the default installs the two roles");
    let on = target_namespace(&client, "tr-on").await;
    check_tenant_roles(&target().kubeconfig, &client, &on, true).await;

    helm(&home, &["uninstall", &release, "--namespace", &release_ns]).await;
    assert!(ours().await.is_empty(), "helm uninstall removes the roles");
    let after = target_namespace(&client, "tr-after").await;
    check_tenant_roles(&target().kubeconfig, &client, &after, false).await;

    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in [release_ns, off, on, after] {
        let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    }
    let _ = std::fs::remove_dir_all(&home);
}
