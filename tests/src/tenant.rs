//! A tenant as real tenants are: user `tenant`, bound by a Role of a test namespace to
//! LoadBalancers and the provider kinds (`create` only on Clusters), reached through a client that
//! impersonates them, so a test shows the tenant could do exactly what it does.

use std::path::Path;

use capi_lb_api::LoadBalancer;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

use crate::k8s::{TestNs, cluster, dynamic_api, eventually, kubectl_output_with};

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

/// A client of the instance `kubeconfig` names, impersonating `user`.
pub async fn client_as_user(kubeconfig: &Path, user: &str) -> Client {
    capi_lb::install_crypto_provider();
    let file = Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|e| panic!("{}: {e}", kubeconfig.display()));
    let mut config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.auth_info.impersonate = Some(user.into());
    Client::try_from(config).unwrap()
}

/// `kubectl auth can-i VERB RESOURCE -n NS --as USER` on the instance `kubeconfig` names (the
/// real authorizer, through a SelfSubjectAccessReview): true for "yes".
pub fn can_i(kubeconfig: &Path, user: &str, ns: &str, verb: &str, resource: &str) -> bool {
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(format!("--subresource={s}"))),
        None => (resource, None),
    };
    let mut args = vec!["auth", "can-i", verb, resource, "-n", ns, "--as", user];
    if let Some(s) = &subresource {
        args.push(s);
    }
    let out = kubectl_output_with(kubeconfig, &args, None);
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        answer == "yes" || answer == "no",
        "kubectl {}: {answer} {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    answer == "yes"
}

/// The kinds a tenant works with (`resource.group`): LoadBalancers and the shipped providers'.
pub const TENANT_KINDS: &[&str] = &[
    "loadbalancers.loadbalancer.cluster.x-k8s.io",
    "kubedcloadbalancers.infrastructure.cluster.x-k8s.io",
    "octavialoadbalancers.infrastructure.cluster.x-k8s.io",
    "serviceloadbalancers.infrastructure.cluster.x-k8s.io",
    "dnsloadbalancers.infrastructure.cluster.x-k8s.io",
    "zonedloadbalancers.infrastructure.cluster.x-k8s.io",
];
/// The in-memory kind, which no tenant role grants.
pub const IN_MEMORY_KIND: &str = "inmemoryloadbalancers.infrastructure.cluster.x-k8s.io";

/// Users bound in `ns` (of the instance `kubeconfig` names, `admin` its admin client) to
/// Kubernetes' own `edit` (the editor) and `view` (the viewer) ClusterRoles, as a namespace's
/// owner would bind them: returns (editor, viewer), unique to `ns`.
pub async fn bind_user_facing_roles(admin: &Client, ns: &str) -> (String, String) {
    let editor = format!("editor-{ns}");
    let viewer = format!("viewer-{ns}");
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> = Api::namespaced(admin.clone(), ns);
    for (user, role) in [(&editor, "edit"), (&viewer, "view")] {
        bindings
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": user},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                "name": role},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                  "name": user}]}))
                .unwrap(),
            )
            .await
            .unwrap();
    }
    (editor, viewer)
}

/// With capi-lb's tenant roles installed and aggregated (`aggregated`), a user bound to `edit` in
/// `ns` may create, change and delete LoadBalancers and every shipped provider's kind there but
/// never the in-memory kind nor a status, and creates a ServiceLoadBalancer and a LoadBalancer as
/// themselves; a user bound to `view` reads them and may write none. Without them (`!aggregated`),
/// neither may touch capi-lb's kinds. Asked of the real authorizer with `kubectl auth can-i` and by
/// requests made as those users.
pub async fn check_tenant_roles(kubeconfig: &Path, admin: &Client, ns: &str, aggregated: bool) {
    let (editor, viewer) = bind_user_facing_roles(admin, ns).await;
    // kube-controller-manager aggregates, then the authorizer's cache follows: wait for the last
    // kind of the list, then ask every question once.
    let last = TENANT_KINDS[TENANT_KINDS.len() - 1];
    eventually(
        &format!("{editor} may create {last} in {ns}: {aggregated}"),
        || async {
            (can_i(kubeconfig, &editor, ns, "create", last) == aggregated
                && can_i(kubeconfig, &viewer, ns, "list", last) == aggregated)
                .then_some(())
        },
    )
    .await;
    for kind in TENANT_KINDS {
        for verb in [
            "create", "update", "patch", "delete", "get", "list", "watch",
        ] {
            assert_eq!(
                can_i(kubeconfig, &editor, ns, verb, kind),
                aggregated,
                "edit: {verb} {kind}"
            );
        }
        for verb in ["get", "list", "watch"] {
            assert_eq!(
                can_i(kubeconfig, &viewer, ns, verb, kind),
                aggregated,
                "view: {verb} {kind}"
            );
        }
        for verb in ["create", "update", "patch", "delete"] {
            assert!(
                !can_i(kubeconfig, &viewer, ns, verb, kind),
                "view may {verb} {kind}"
            );
        }
        let status = format!("{kind}/status");
        assert!(
            !can_i(kubeconfig, &editor, ns, "patch", &status),
            "edit may patch {status}"
        );
        assert!(
            !can_i(kubeconfig, &editor, ns, "update", &status),
            "edit may update {status}"
        );
    }
    for verb in ["create", "get", "list"] {
        assert!(
            !can_i(kubeconfig, &editor, ns, verb, IN_MEMORY_KIND),
            "edit: {verb} in-memory"
        );
        assert!(
            !can_i(kubeconfig, &viewer, ns, verb, IN_MEMORY_KIND),
            "view: {verb} in-memory"
        );
    }

    // As the users themselves.
    let edit = client_as_user(kubeconfig, &editor).await;
    let view = client_as_user(kubeconfig, &viewer).await;
    let infra = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "ServiceLoadBalancer", "metadata": {"name": "tenant"}, "spec": {}});
    let lb = json!({"apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer",
        "metadata": {"name": "tenant"},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                       "kind": "ServiceLoadBalancer", "name": "tenant"}}});
    let in_memory = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "InMemoryLoadBalancer", "metadata": {"name": "tenant"}, "spec": {}});
    let forbidden = |r: Result<DynamicObject, kube::Error>, what: &str| match r {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("{what}: {other:?}, not 403"),
    };
    forbidden(
        create_as(&edit, ns, &in_memory).await,
        "edit creates an InMemoryLoadBalancer",
    );
    forbidden(
        create_as(&view, ns, &lb).await,
        "view creates a LoadBalancer",
    );
    if aggregated {
        create_as(&edit, ns, &infra)
            .await
            .expect("edit creates a ServiceLoadBalancer");
        create_as(&edit, ns, &lb)
            .await
            .expect("edit creates a LoadBalancer");
        let read: Api<LoadBalancer> = Api::namespaced(view.clone(), ns);
        let listed = read.list(&ListParams::default()).await.expect("view lists");
        assert!(
            listed
                .items
                .iter()
                .any(|l| l.metadata.name.as_deref() == Some("tenant"))
        );
        read.get("tenant")
            .await
            .expect("view reads the LoadBalancer");
    } else {
        forbidden(
            create_as(&edit, ns, &lb).await,
            "edit creates a LoadBalancer, roles off",
        );
        let read: Api<LoadBalancer> = Api::namespaced(view.clone(), ns);
        assert!(
            read.list(&ListParams::default()).await.is_err(),
            "view lists, roles off"
        );
    }
}
