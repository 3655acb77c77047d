//! capi-lb installed, upgraded, used and removed with the real clusterctl (Cluster API's own,
//! v1.14.2, built by the harness), from the provider repository `capi-lb manifests` writes under
//! `config/clusterctl/` as it is: no variable substituted by the test, no file moved.
//!
//! On the harness's fresh instance (`tests/k8s/harness.sh fresh`: Cluster API alone in clusterctl's
//! inventory, nothing of capi-lb), one test walks a platform engineer's path:
//! `clusterctl init --infrastructure capi-lb` with `CAPI_LB_PROVIDERS`, the Deployment's arguments and
//! the aggregated RBAC as asked; capi-lb run with exactly the credentials clusterctl installed
//! reconciling a LoadBalancer to Ready; `clusterctl upgrade plan` seeing the provider and a newer
//! release put into the repository; `clusterctl generate cluster --infrastructure capi-lb --flavor
//! <each>` with the variables each flavor documents, equal to what the template tests apply and
//! accepted by the main instance (which has the flavors' provider CRDs); `clusterctl delete
//! --infrastructure capi-lb` removing every object of capi-lb but the users' LoadBalancers and the
//! CRDs.

use std::collections::BTreeMap;
use std::time::Duration;

use capi_lb::install::manifests::{
    NAMESPACE, PROVIDER_LABEL, SERVICE_ACCOUNT, clusterctl_cluster_wide_name,
};
use capi_lb::install::rbac::{CONTROLLER_PART, PART_LABEL};
use capi_lb::run::RunOptions;
use capi_lb_api::LoadBalancer;
use capi_lb_tests::fresh::{Repository, fresh, fresh_admin_client, fresh_client_with_token};
use capi_lb_tests::k8s::{
    TestNs, eventually, in_memory, kubectl, load_balancer, spawn_controller, unique_name,
};
use capi_lb_tests::templates::{
    CLUSTER_NAME, KUBERNETES_VERSION, render, template_file, template_values,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// The providers the test asks clusterctl for: one shipped provider and the in-memory one, which it
/// then reconciles with (no cloud on the fresh instance).
const PROVIDERS: &str = "kubedc,inmemory";

/// capi-lb's objects on the fresh instance, by clusterctl's provider label.
async fn labelled<K>(client: &Client) -> Vec<String>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let selector = format!("cluster.x-k8s.io/provider={PROVIDER_LABEL}");
    Api::<K>::all(client.clone())
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
        .iter()
        .map(|o| o.name_any())
        .collect()
}

/// Remove what an earlier, interrupted run left on the fresh instance: capi-lb's components (CRDs
/// and namespace included) and the users' namespaces of this test.
async fn clean_slate(repository: &Repository, client: &Client) {
    release_and_delete_users(client).await;
    let providers = kube::api::ApiResource {
        group: "clusterctl.cluster.x-k8s.io".into(),
        version: "v1alpha3".into(),
        api_version: "clusterctl.cluster.x-k8s.io/v1alpha3".into(),
        kind: "Provider".into(),
        plural: "providers".into(),
    };
    let inventory: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, &providers);
    let installed = inventory.get_opt(PROVIDER_LABEL).await.unwrap().is_some();
    if installed {
        let (ok, out) = repository.clusterctl(
            &[
                "delete",
                "--infrastructure",
                "capi-lb",
                "--include-crd",
                "--include-namespace",
            ],
            &[],
        );
        assert!(ok, "cleaning up an earlier run: {out}");
    }
    // A plain `delete` (the end of this test) leaves the namespace.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(NAMESPACE).await.unwrap().is_some() {
        let _ = namespaces.delete(NAMESPACE, &DeleteParams::default()).await;
    }
    // The namespace's deletion (and with it the inventory entry) takes a moment; `init` would find
    // the provider still installed.
    eventually("capi-lb's namespace and inventory entry gone", || {
        let inventory = inventory.clone();
        let namespaces: Api<Namespace> = Api::all(client.clone());
        async move {
            let left = inventory.get_opt(PROVIDER_LABEL).await.ok()?.is_some()
                || namespaces.get_opt(NAMESPACE).await.ok()?.is_some();
            (!left).then_some(())
        }
    })
    .await;
    release_and_delete_users(client).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in labelled::<CustomResourceDefinition>(client).await {
        let _ = crds.delete(&name, &DeleteParams::default()).await;
    }
    // Cluster-wide objects an older version's delete left behind.
    let roles: Api<ClusterRole> = Api::all(client.clone());
    for name in labelled::<ClusterRole>(client).await {
        let _ = roles.delete(&name, &DeleteParams::default()).await;
    }
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    for name in labelled::<ClusterRoleBinding>(client).await {
        let _ = bindings.delete(&name, &DeleteParams::default()).await;
    }
    // The test's own additions (add_in_memory_provider).
    let _ = crds
        .delete(
            "inmemoryloadbalancers.infrastructure.cluster.x-k8s.io",
            &DeleteParams::default(),
        )
        .await;
    let _ = roles
        .delete(IN_MEMORY_PART_ROLE, &DeleteParams::default())
        .await;
}

/// The test's user namespaces (label `capi-lb-e2e/clusterctl`): their LoadBalancers' finalizers
/// removed (capi-lb is gone; the in-memory load balancer has nothing to clean up), then deleted.
async fn release_and_delete_users(client: &Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let users = namespaces
        .list(&ListParams::default().labels("capi-lb-e2e/clusterctl"))
        .await
        .unwrap();
    for ns in users.items {
        let ns = ns.name_any();
        let lbs: Api<LoadBalancer> = Api::namespaced(client.clone(), &ns);
        if let Ok(list) = lbs.list(&ListParams::default()).await {
            for lb in list.items {
                let _ = lbs
                    .patch(
                        &lb.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                    )
                    .await;
            }
        }
        let infra: Api<capi_lb_api::InMemoryLoadBalancer> = Api::namespaced(client.clone(), &ns);
        if let Ok(list) = infra.list(&ListParams::default()).await {
            for o in list.items {
                let _ = infra
                    .patch(
                        &o.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                    )
                    .await;
            }
        }
        let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    }
    eventually("the test's user namespaces gone", || {
        let namespaces = namespaces.clone();
        async move {
            let left = namespaces
                .list(&ListParams::default().labels("capi-lb-e2e/clusterctl"))
                .await
                .ok()?;
            left.items.is_empty().then_some(())
        }
    })
    .await;
}

/// The "Let go of what it holds" step of docs/operations.md's uninstall guide: `capi-lb uninstall`
/// as the guide gives it (parsed by the binary's own command line) against the fresh instance; its
/// changes. Panics when it fails.
async fn run_uninstall(client: &Client) -> Vec<String> {
    let doc = std::fs::read_to_string(capi_lb_tests::repo("docs/operations.md")).unwrap();
    assert!(
        doc.contains("3. **Let go of what it holds**") && doc.contains("\n   capi-lb uninstall\n"),
        "docs/operations.md: the uninstall step"
    );
    let cli =
        <capi_lb::cli::Cli as clap::Parser>::try_parse_from(["capi-lb", "uninstall"]).unwrap();
    let Some(capi_lb::cli::Command::Uninstall {
        dry_run,
        force,
        lease_namespace,
        lease_name,
        namespace,
    }) = cli.command
    else {
        panic!("not uninstall");
    };
    let options = capi_lb::install::uninstall::Options {
        dry_run,
        force,
        lease: (lease_namespace, lease_name),
        namespace,
    };
    capi_lb::install::uninstall::uninstall(client.clone(), &options)
        .await
        .unwrap_or_else(|e| panic!("capi-lb uninstall: {e}"))
        .changes
}

/// The template of `flavor` as written.
fn rendered_source(flavor: &str) -> String {
    std::fs::read_to_string(template_file(flavor)).unwrap()
}

/// The ClusterRole of the in-memory provider's RBAC part (test-only).
const IN_MEMORY_PART_ROLE: &str = "capi-lb-manager-role-inmemory";

/// The in-memory provider's CRD and RBAC part, as the shipped install would carry them if it had
/// the provider.
async fn add_in_memory_provider(client: &Client) {
    let shipped: Vec<String> = capi_lb::install::crds::shipped()
        .iter()
        .map(|c| c.name_any())
        .collect();
    for crd in capi_lb::install::crds::all() {
        if !shipped.contains(&crd.name_any()) {
            capi_lb_tests::k8s::apply_crd(client, &crd).await;
        }
    }
    let (part, rules) = capi_lb::install::rbac::parts(&capi_lb::install::rbac::Enabled::all())
        .into_iter()
        .find(|(part, _)| part == "inmemory")
        .expect("the in-memory provider's RBAC part");
    let role = capi_lb::install::manifests::part_role(&part, rules);
    assert_eq!(role["metadata"]["name"], IN_MEMORY_PART_ROLE);
    let roles: Api<ClusterRole> = Api::all(client.clone());
    roles
        .patch(
            IN_MEMORY_PART_ROLE,
            &PatchParams::apply("capi-lb-e2e-clusterctl").force(),
            &Patch::Apply(&role),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn clusterctl_installs_upgrades_generates_and_deletes_capi_lb() {
    let repository = Repository::new("lifecycle");
    let client = fresh_admin_client().await;
    clean_slate(&repository, &client).await;

    // --- clusterctl init ----------------------------------------------------------------------
    let (ok, out) = repository.clusterctl(
        &["init", "--infrastructure", "capi-lb"],
        &[("CAPI_LB_PROVIDERS", PROVIDERS)],
    );
    assert!(ok, "clusterctl init --infrastructure capi-lb:\n{out}");
    assert!(
        out.contains(&format!(
            "Installing provider=\"{PROVIDER_LABEL}\" version=\"v{}\" targetNamespace=\"{NAMESPACE}\"",
            env!("CARGO_PKG_VERSION")
        )),
        "{out}"
    );
    println!("clusterctl init:\n{out}");

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let deployment = deployments.get("capi-lb-controller-manager").await.unwrap();
    let container = &deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    assert_eq!(container.name, "manager");
    assert_eq!(
        container.image.as_deref(),
        Some(capi_lb::install::manifests::image().as_str())
    );
    let args = container.args.clone().unwrap_or_default();
    assert!(
        args.contains(&format!("--providers={PROVIDERS}")),
        "the Deployment runs the providers asked for: {args:?}"
    );
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let manager_role_name = clusterctl_cluster_wide_name("capi-lb-manager-role");
    let manager_role = roles.get(&manager_role_name).await.unwrap();
    let selector = &manager_role
        .aggregation_rule
        .as_ref()
        .unwrap()
        .cluster_role_selectors
        .as_ref()
        .unwrap()[0];
    let expression = &selector.match_expressions.as_ref().unwrap()[0];
    assert_eq!(expression.key, PART_LABEL);
    let mut parts = expression.values.clone().unwrap_or_default();
    parts.sort();
    let mut expected: Vec<String> = PROVIDERS
        .split(',')
        .chain([CONTROLLER_PART])
        .map(String::from)
        .collect();
    expected.sort();
    assert_eq!(
        parts, expected,
        "the manager role aggregates exactly the parts asked for"
    );
    // Every object clusterctl made carries the provider label (so `delete` finds it).
    for kind_objects in [
        labelled::<ClusterRole>(&client).await,
        labelled::<CustomResourceDefinition>(&client).await,
        labelled::<Namespace>(&client).await,
    ] {
        assert!(!kind_objects.is_empty());
    }

    // --- capi-lb with exactly the RBAC clusterctl installed ------------------------------------
    // The in-memory provider (no cloud here) is in no shipped install: the test adds its CRD and
    // its RBAC part, which the manager role aggregates because CAPI_LB_PROVIDERS names it;
    // everything else is clusterctl's.
    add_in_memory_provider(&client).await;
    // kube-controller-manager fills the aggregated role in; a token of the installed
    // ServiceAccount runs the controller, restricted to a user namespace.
    let user_ns = unique_name("cc-user");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": user_ns,
                "labels": {"capi-lb-e2e/clusterctl": ""}}}))
            .unwrap(),
        )
        .await
        .unwrap();
    eventually(
        "the manager role aggregated by kube-controller-manager",
        || {
            let roles = roles.clone();
            let manager_role_name = manager_role_name.clone();
            async move {
                let role = roles.get(&manager_role_name).await.ok()?;
                (!role.rules.unwrap_or_default().is_empty()).then_some(())
            }
        },
    )
    .await;
    let controller = fresh_client_with_token(
        capi_lb_tests::k8s::service_account_token(&client, NAMESPACE, SERVICE_ACCOUNT).await,
    )
    .await;
    let mut options = RunOptions::new(vec!["inmemory".into()]);
    options.namespace = Some(user_ns.clone());
    options.resync = Duration::from_secs(3600);
    options.concurrency = 2;
    let handle = spawn_controller(controller, options);
    let create = |doc: Value| {
        let client = client.clone();
        let ns = user_ns.clone();
        async move {
            let api: Api<DynamicObject> = capi_lb_tests::k8s::dynamic_api(&client, Some(&ns), &doc)
                .await
                .unwrap();
            api.create(
                &PostParams::default(),
                &serde_json::from_value(doc).unwrap(),
            )
            .await
            .unwrap();
        }
    };
    create(in_memory("users", json!({}))).await;
    create(load_balancer("users", "users", json!({}))).await;
    let lbs: Api<LoadBalancer> = Api::namespaced(client.clone(), &user_ns);
    eventually(
        "the user's LoadBalancer Ready under clusterctl's RBAC",
        || {
            let lbs = lbs.clone();
            async move {
                let lb = lbs.get("users").await.ok()?;
                let ready = lb
                    .status
                    .as_ref()?
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                ready.then_some(())
            }
        },
    )
    .await;
    handle.stop().await;

    // --- the tenants' roles, aggregated into Kubernetes' edit and view ------------------------
    capi_lb_tests::tenant::check_tenant_roles(&fresh().kubeconfig, &client, &user_ns, true).await;

    // --- clusterctl upgrade plan ----------------------------------------------------------------
    let (ok, out) = repository.clusterctl(&["upgrade", "plan"], &[]);
    assert!(ok, "clusterctl upgrade plan:\n{out}");
    let line = out
        .lines()
        .find(|l| l.starts_with(PROVIDER_LABEL))
        .unwrap_or_else(|| panic!("upgrade plan does not list {PROVIDER_LABEL}:\n{out}"));
    assert!(
        line.contains(&format!("v{}", env!("CARGO_PKG_VERSION")))
            && line.contains("Already up to date"),
        "{line}"
    );
    // A newer patch release in the repository is what the plan proposes.
    let next = format!(
        "v{}.{}.{}",
        env!("CARGO_PKG_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MINOR"),
        env!("CARGO_PKG_VERSION_PATCH").parse::<u32>().unwrap() + 1
    );
    repository.add_release(&next);
    let (ok, out) = repository.clusterctl(&["upgrade", "plan"], &[]);
    assert!(ok, "clusterctl upgrade plan:\n{out}");
    let line = out
        .lines()
        .find(|l| l.starts_with(PROVIDER_LABEL))
        .unwrap_or_else(|| panic!("upgrade plan does not list {PROVIDER_LABEL}:\n{out}"));
    assert!(line.contains(&next), "the plan proposes {next}: {line}");
    println!("clusterctl upgrade plan:\n{out}");

    // --- clusterctl generate cluster, every flavor ---------------------------------------------
    let target = TestNs::new("e2e-clusterctl-gen").await;
    let flavors: Vec<String> = capi_lb_tests::templates::template_files()
        .iter()
        .map(|f| {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            name.trim_start_matches("cluster-template-")
                .trim_end_matches(".yaml")
                .to_string()
        })
        .collect();
    assert!(flavors.len() >= 4, "{flavors:?}");
    let values = template_values(&target.ns);
    let provider_variables: Vec<(&str, &str)> = values
        .iter()
        .filter(|(k, _)| !matches!(**k, "CLUSTER_NAME" | "NAMESPACE" | "KUBERNETES_VERSION"))
        .map(|(k, v)| (*k, *v))
        .collect();
    for flavor in &flavors {
        let (ok, listed) = repository.clusterctl(
            &[
                "generate",
                "cluster",
                CLUSTER_NAME,
                "--infrastructure",
                "capi-lb",
                "--flavor",
                flavor,
                "--list-variables",
            ],
            &[],
        );
        assert!(ok, "{flavor}: --list-variables:\n{listed}");
        let rendered = render(&template_file(flavor), &target.ns);
        for (variable, default) in &rendered.variables {
            if default.is_none() {
                assert!(
                    listed.contains(variable.as_str()),
                    "{flavor}: clusterctl does not list the required {variable}:\n{listed}"
                );
            }
        }
        let (ok, text) = repository.clusterctl(
            &[
                "generate",
                "cluster",
                CLUSTER_NAME,
                "--infrastructure",
                "capi-lb",
                "--flavor",
                flavor,
                "--target-namespace",
                &target.ns,
                "--kubernetes-version",
                KUBERNETES_VERSION,
            ],
            &provider_variables,
        );
        assert!(ok, "clusterctl generate cluster --flavor {flavor}:\n{text}");
        let generated: Vec<Value> = serde_saphyr::from_multiple::<Value>(&text)
            .unwrap_or_else(|e| panic!("{flavor}: {e}\n{text}"))
            .into_iter()
            .filter(|d| !d.is_null())
            .collect();
        let by_key = |docs: &[Value]| -> BTreeMap<String, Value> {
            docs.iter()
                .map(|d| {
                    (
                        format!("{}/{}", d["kind"], d["metadata"]["name"]),
                        d.clone(),
                    )
                })
                .collect()
        };
        // clusterctl sets CONTROL_PLANE_MACHINE_COUNT (1) and WORKER_MACHINE_COUNT (0) from its
        // flags' defaults, so the templates' own defaults for them never apply under `generate
        // cluster`; everything else is the template the template tests apply.
        let mut values = template_values(&target.ns);
        values.insert("CONTROL_PLANE_MACHINE_COUNT", "1");
        values.insert("WORKER_MACHINE_COUNT", "0");
        let (expected, _) = capi_lb_tests::substitute(&rendered_source(flavor), &values);
        let expected: Vec<Value> = serde_saphyr::from_multiple::<Value>(&expected)
            .unwrap()
            .into_iter()
            .filter(|d| !d.is_null())
            .collect();
        assert_eq!(
            by_key(&generated),
            by_key(&expected),
            "{flavor}: clusterctl's output differs from the template"
        );
        // Accepted by the apiserver that serves the flavor's providers (strict, not stored).
        let out = kubectl(
            &[
                "apply",
                "--server-side",
                "--dry-run=server",
                "--validate=strict",
                "--field-manager=capi-lb-e2e-clusterctl",
                "-f",
                "-",
            ],
            Some(&text),
        );
        let applied = out
            .lines()
            .filter(|l| l.contains("serverside-applied"))
            .count();
        assert_eq!(
            applied,
            generated.len(),
            "{flavor}: not every object accepted:\n{out}"
        );
    }
    target.finish().await;

    // --- clusterctl delete ----------------------------------------------------------------------
    let (ok, out) = repository.clusterctl(&["delete", "--infrastructure", "capi-lb"], &[]);
    assert!(ok, "clusterctl delete --infrastructure capi-lb:\n{out}");
    println!("clusterctl delete:\n{out}");
    eventually(
        "capi-lb's Deployment, ServiceAccount, ClusterRoles and bindings gone",
        || {
            let client = client.clone();
            async move {
                let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
                let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
                let gone = deployments
                    .get_opt("capi-lb-controller-manager")
                    .await
                    .ok()?
                    .is_none()
                    && accounts.get_opt(SERVICE_ACCOUNT).await.ok()?.is_none()
                    && labelled::<ClusterRole>(&client).await.is_empty()
                    && labelled::<ClusterRoleBinding>(&client).await.is_empty();
                gone.then_some(())
            }
        },
    )
    .await;
    // The users' objects and the CRDs stay (clusterctl keeps CRDs unless --include-crd).
    assert!(
        lbs.get_opt("users").await.unwrap().is_some(),
        "the user's LoadBalancer stays"
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    assert!(
        crds.get_opt("loadbalancers.loadbalancer.cluster.x-k8s.io")
            .await
            .unwrap()
            .is_some()
    );
    // The user's LoadBalancer and its infrastructure object are still held by capi-lb's finalizers:
    // the uninstall guide's step (docs/operations.md: `capi-lb uninstall`) lets them go, and
    // orphans what they own, so that deleting the CRDs for real keeps the `-ext` Service.
    let held = |lb: &LoadBalancer| {
        lb.finalizers()
            .iter()
            .any(|f| f.starts_with("loadbalancer.cluster.x-k8s.io/"))
    };
    assert!(
        held(&lbs.get("users").await.unwrap()),
        "capi-lb's finalizer is there to release"
    );
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), &user_ns);
    assert!(
        !services
            .get("users-ext")
            .await
            .unwrap()
            .owner_references()
            .is_empty(),
        "the -ext Service is the LoadBalancer's"
    );
    let out = run_uninstall(&client).await.join("\n");
    assert!(!held(&lbs.get("users").await.unwrap()), "released:\n{out}");
    let infra: Api<capi_lb_api::InMemoryLoadBalancer> = Api::namespaced(client.clone(), &user_ns);
    assert!(
        infra.get("users").await.unwrap().finalizers().is_empty(),
        "released:\n{out}"
    );
    assert!(
        out.contains(&format!("Service {user_ns}/users-ext: kept")),
        "{out}"
    );
    // The CRDs deleted for real (step 4): the LoadBalancers go with them, the -ext Service stays.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete(
        "loadbalancers.loadbalancer.cluster.x-k8s.io",
        &DeleteParams::default(),
    )
    .await
    .unwrap();
    eventually("the LoadBalancer CRD and its objects gone", || {
        let crds = crds.clone();
        async move {
            crds.get_opt("loadbalancers.loadbalancer.cluster.x-k8s.io")
                .await
                .ok()?
                .is_none()
                .then_some(())
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let ext = services
        .get("users-ext")
        .await
        .expect("the -ext Service outlives the CRDs");
    assert!(ext.owner_references().is_empty());
    // Nothing of capi-lb in the inventory.
    let (ok, out) = repository.clusterctl(&["upgrade", "plan"], &[]);
    assert!(ok, "{out}");
    assert!(!out.contains(PROVIDER_LABEL), "{out}");

    clean_slate(&repository, &client).await;
}
