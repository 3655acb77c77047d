//! A tenant as real tenants are: user `tenant`, bound by a Role of a test namespace to
//! LoadBalancers and the provider kinds (`create` only on Clusters), reached through a client that
//! impersonates them, so a test shows the tenant could do exactly what it does.

use capi_lb_api::LoadBalancer;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

use crate::k8s::{TestNs, cluster, dynamic_api, eventually};

/// The user the tenant's client impersonates.
pub const TENANT: &str = "tenant";
/// A client with the admin kubeconfig impersonating [`TENANT`] (the admin is system:masters, who
/// may impersonate).
pub async fn tenant_client() -> Client {
    let path = &cluster().kubeconfig;
    let file = Kubeconfig::read_from(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.auth_info.impersonate = Some(TENANT.into());
    Client::try_from(config).unwrap()
}

/// The tenant's Role and RoleBinding in `t`'s namespace: full use of LoadBalancers and the provider
/// kinds, and `create` (only) on Clusters; nothing else. Waits until the authorizer applies them.
pub async fn grant_tenant(t: &TestNs, tenant: &Client) {
    let verbs = json!([
        "create", "get", "list", "watch", "patch", "update", "delete"
    ]);
    t.create(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": TENANT},
        "rules": [
            {"apiGroups": ["loadbalancer.cluster.x-k8s.io"], "resources": ["loadbalancers"],
             "verbs": verbs},
            {"apiGroups": ["infrastructure.cluster.x-k8s.io"],
             "resources": ["inmemoryloadbalancers", "octavialoadbalancers", "kubedcloadbalancers"],
             "verbs": verbs},
            {"apiGroups": ["cluster.x-k8s.io"], "resources": ["clusters"], "verbs": ["create"]}]}),
    )
    .await;
    t.create(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": TENANT},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": TENANT},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT}]}),
    )
    .await;
    let lbs: Api<LoadBalancer> = Api::namespaced(tenant.clone(), &t.ns);
    eventually("the tenant's Role in force", || async {
        lbs.list(&ListParams::default()).await.ok().map(|_| ())
    })
    .await;
}

/// Create `doc` in `ns` as `client`: the apiserver's answer.
pub async fn create_as(
    client: &Client,
    ns: &str,
    doc: &Value,
) -> Result<DynamicObject, kube::Error> {
    dynamic_api(client, Some(ns), doc)
        .await?
        .create(
            &PostParams::default(),
            &serde_json::from_value(doc.clone()).unwrap(),
        )
        .await
}
