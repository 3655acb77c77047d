//! capi-lb installed and used as a user would, on a real apiserver (the project's harness,
//! `tests/k8s/harness.sh`, or `CAPI_LB_E2E_KUBECONFIG`; see `capi_lb_tests::k8s`):
//!
//! - `capi-lb crds | kubectl apply --server-side -f -` and `kubectl apply --server-side -k
//!   config/default`, for real, and every generated manifest (`capi-lb manifests`, including the
//!   clusterctl provider components) server-side applied; the installed objects are checked.
//! - Every manifest under `examples/` and every `templates/cluster-template-*.yaml` flavor (with
//!   clusterctl-like variables) applied into a test namespace and accepted; documents of kinds this
//!   cluster does not serve must be exactly [`UNSERVED_KINDS`].
//! - Every CEL rule of the generated CRDs refused by the apiserver with the rule's message on the
//!   rule's field, and by the client-side validation (`capi_lb_api::validation`) the same way; a rule
//!   without a case here fails the test. A few OpenAPI constraints are compared the same way.
//!
//! Cluster-wide objects (CRDs, ClusterRoles, the capi-lb-system namespace and its objects) are
//! shared with the other end-to-end tests running in parallel: they are applied idempotently and
//! never deleted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use capi_lb_api::validation::{FieldErrors, parse, resolve_field_path};
use capi_lb_api::{
    DNSLoadBalancer, InMemoryLoadBalancer, KubeDCLoadBalancer, LoadBalancer, OctaviaLoadBalancer,
    ServiceLoadBalancer, ZonedLoadBalancer,
};
use capi_lb_tests::k8s::{
    TestNs, admin_client, apply_value, clusterctl_generate_yaml, dynamic_api, install_capi_crds,
    install_crds, install_kube_dc_crds, install_third_party_crds, kubectl, wait_for,
};
use capi_lb_tests::substitute;
use capi_lb_tests::templates::{render, template_files};
use clap::Parser;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::core::DynamicObject;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// Field manager of this file's own server-side applies (the install steps use kubectl's).
const MANAGER: &str = "capi-lb-e2e-install";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn yaml_docs(text: &str, what: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// Server-side apply `doc` (force, as [`MANAGER`]) into `namespace` when its kind is namespaced.
async fn apply(
    client: &Client,
    namespace: Option<&str>,
    doc: &Value,
    dry_run: bool,
) -> Result<DynamicObject, kube::Error> {
    apply_value(client, MANAGER, namespace, doc, dry_run).await
}

/// Read `doc`'s object back (from `namespace` when namespaced); panics when it does not exist.
async fn get_back(client: &Client, namespace: Option<&str>, doc: &Value) -> DynamicObject {
    let api = dynamic_api(client, namespace, doc).await.unwrap();
    let name = doc["metadata"]["name"].as_str().unwrap();
    api.get_opt(name)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{} {name} does not exist after applying it", doc["kind"]))
}

/// Whether the apiserver serves `kind` in `api_version` (discovery).
async fn served(client: &Client, api_version: &str, kind: &str) -> bool {
    let resources = if api_version == "v1" {
        client.list_core_api_resources("v1").await
    } else {
        client.list_api_group_resources(api_version).await
    };
    match resources {
        Ok(list) => list.resources.iter().any(|r| r.kind == kind),
        Err(kube::Error::Api(status)) if status.code == 404 => false,
        Err(e) => panic!("discovery of {api_version}: {e}"),
    }
}

async fn wait_established(client: &Client, name: &str) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    wait_for(&crds, name, &format!("CRD {name} established"), |c| {
        c.and_then(|c| c.status.as_ref()?.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            })
    })
    .await;
}

// --- 1. install as a user would ------------------------------------------------------------------

/// The `--providers` of the one Deployment among `objects`, and the parts its manager role
/// aggregates (the role whose aggregation selector names the controller part).
fn providers_of(objects: &[Value], what: &str) -> (String, Vec<String>) {
    let deployments: Vec<&Value> = objects
        .iter()
        .filter(|d| d["kind"] == "Deployment")
        .collect();
    assert_eq!(deployments.len(), 1, "{what}: one Deployment");
    let args = deployments[0]["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: the Deployment has no args"));
    let providers = args
        .iter()
        .filter_map(|a| a.as_str()?.strip_prefix("--providers="))
        .collect::<Vec<_>>();
    assert_eq!(providers.len(), 1, "{what}: one --providers in {args:?}");
    let parts = objects
        .iter()
        .filter(|d| d["kind"] == "ClusterRole")
        .filter_map(|d| {
            let values =
                &d["aggregationRule"]["clusterRoleSelectors"][0]["matchExpressions"][0]["values"];
            let values: Vec<String> = serde_json::from_value(values.clone()).ok()?;
            values.contains(&"controller".to_string()).then_some(values)
        })
        .collect::<Vec<_>>();
    assert_eq!(parts.len(), 1, "{what}: one manager role");
    (providers[0].to_string(), parts[0].clone())
}

/// The three installs, rendered as their tools render them with nothing chosen (`kubectl
/// kustomize config/default`, `helm template` of the chart with its default values, `clusterctl
/// generate yaml` of the components with no variable set), run the providers `capi-lb run` runs
/// by default, and their manager roles aggregate exactly those providers' parts.
#[tokio::test]
async fn the_three_installs_run_the_same_providers() {
    /// `capi-lb run` with no argument, parsed as the binary parses it.
    #[derive(Parser)]
    struct Run {
        #[command(flatten)]
        options: capi_lb::run::RunOptions,
    }
    let binary = Run::try_parse_from(["run"])
        .unwrap()
        .options
        .providers
        .join(",");
    let kustomize = yaml_docs(
        &kubectl(
            &["kustomize", repo().join("config/default").to_str().unwrap()],
            None,
        ),
        "kubectl kustomize config/default",
    );
    let helm_bin = std::process::Command::new(repo().join("tests/tools.sh"))
        .args(["path", "helm"])
        .output()
        .unwrap();
    assert!(
        helm_bin.status.success(),
        "helm is missing: run `tests/tools.sh install helm`"
    );
    let home = std::env::temp_dir().join(format!("capi-lb-e2e-helm-{}", std::process::id()));
    let helm = std::process::Command::new(String::from_utf8_lossy(&helm_bin.stdout).trim())
        .args([
            "template",
            "capi-lb",
            repo().join("charts/capi-lb").to_str().unwrap(),
        ])
        .args(["--namespace", "capi-lb-system", "--kube-version", "v1.33.0"])
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&home);
    assert!(
        helm.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&helm.stderr)
    );
    let helm = yaml_docs(&String::from_utf8_lossy(&helm.stdout), "helm template");
    let components = repo()
        .join("config")
        .join(capi_lb::install::manifests::clusterctl_release_dir())
        .join("infrastructure-components.yaml");
    let clusterctl = yaml_docs(
        &clusterctl_generate_yaml(&components, &[]).unwrap(),
        "clusterctl generate yaml",
    );
    let expected_parts: Vec<String> = std::iter::once("controller")
        .chain(binary.split(','))
        .map(String::from)
        .collect();
    for (what, objects) in [
        ("kubectl apply -k config/default", &kustomize),
        ("helm install", &helm),
        ("clusterctl init", &clusterctl),
    ] {
        let (providers, parts) = providers_of(objects, what);
        assert_eq!(
            providers, binary,
            "{what} runs other providers than `capi-lb run`"
        );
        assert_eq!(parts, expected_parts, "{what}: the manager role's parts");
    }
}

#[tokio::test]
async fn crds_and_config_default_install_with_kubectl_and_every_generated_manifest_applies() {
    let client = admin_client().await;

    // `capi-lb crds | kubectl apply --server-side -f -` (what the binary prints).
    let crds_yaml = capi_lb::install::crds::shipped_yaml().unwrap();
    let out = kubectl(&["apply", "--server-side", "-f", "-"], Some(&crds_yaml));
    for crd in capi_lb::install::crds::shipped() {
        let name = crd.name_any();
        assert!(
            out.contains(&format!(
                "customresourcedefinition.apiextensions.k8s.io/{name}"
            )),
            "kubectl did not apply {name}:\n{out}"
        );
        wait_established(&client, &name).await;
    }

    // `kubectl apply --server-side -k config/default`, in the repository root.
    let out = kubectl(&["apply", "--server-side", "-k", "config/default"], None);
    let rendered = kubectl(&["kustomize", "config/default"], None);
    let objects = yaml_docs(&rendered, "kubectl kustomize config/default");
    let mut kinds = BTreeSet::new();
    for doc in &objects {
        let kind = doc["kind"].as_str().unwrap();
        let name = doc["metadata"]["name"].as_str().unwrap();
        kinds.insert(kind.to_string());
        assert!(
            out.contains(&format!("/{name} serverside-applied")),
            "kubectl apply -k did not apply {kind} {name}:\n{out}"
        );
        let object = get_back(&client, None, doc).await;
        if kind == "CustomResourceDefinition" {
            wait_established(&client, name).await;
        } else if kind != "Namespace" {
            assert_eq!(
                object.namespace().as_deref(),
                doc["metadata"]["namespace"].as_str(),
                "{kind} {name}"
            );
        }
    }
    for kind in [
        "Namespace",
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
    ] {
        assert!(
            kinds.contains(kind),
            "config/default installs no {kind}: {kinds:?}"
        );
    }
    // Everything namespaced lands in capi-lb-system; the leader-election Role is there.
    for doc in &objects {
        if let Some(ns) = doc["metadata"]["namespace"].as_str() {
            assert_eq!(ns, "capi-lb-system", "{}", doc["metadata"]["name"]);
        }
    }
    let role = objects
        .iter()
        .find(|d| d["kind"] == "Role")
        .expect("a Role");
    let rules = role["rules"].as_array().unwrap();
    assert!(
        rules.iter().any(|r| r["apiGroups"]
            .as_array()
            .is_some_and(|g| g.contains(&json!("coordination.k8s.io")))
            && r["resources"]
                .as_array()
                .is_some_and(|g| g.contains(&json!("leases")))),
        "the Role is not the leader-election Role: {role}"
    );
    let deployment = objects.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let account = &deployment["spec"]["template"]["spec"]["serviceAccountName"];
    assert!(
        objects
            .iter()
            .any(|d| d["kind"] == "ServiceAccount" && &d["metadata"]["name"] == account),
        "the Deployment runs as {account}, which config/default does not create"
    );

    // Every generated manifest (`capi-lb manifests`), server-side applied for real, file by file,
    // with kubectl (one field manager for both installs: kubectl's and these agree, so re-applying
    // either never conflicts).
    // No variable set: the components' defaults, which are config/default's (so that re-applying
    // either install never conflicts).
    let values = BTreeMap::new();
    let mut applied_files = Vec::new();
    for (path, text) in capi_lb::install::manifests::files().unwrap() {
        let file = path.display().to_string();
        if file.ends_with("kustomization.yaml") || file.ends_with("metadata.yaml") {
            // Not Kubernetes objects: kustomize's and clusterctl's own files.
            continue;
        }
        if file.starts_with("monitoring/") {
            // The dashboard's JSON and the rules file are not Kubernetes objects, the
            // PrometheusRule's kind needs prometheus-operator's CRD, which the harness does not
            // have, and the dashboard's ConfigMap takes its namespace from the kustomization:
            // integration/monitoring.rs checks them (promtool on the rules, the PrometheusRule's
            // groups equal to the rules file's, the dashboard's structure and queries).
            continue;
        }
        if file.contains("/cluster-template-") {
            // The templates' copies in the clusterctl repository: e2e/templates.rs and
            // e2e/clusterctl.rs apply them with their variables.
            continue;
        }
        let (text, _) = substitute(&text, &values);
        let docs = yaml_docs(&text, &file);
        assert!(!docs.is_empty(), "{file} holds no document");
        let out = kubectl(&["apply", "--server-side", "-f", "-"], Some(&text));
        for doc in &docs {
            let name = doc["metadata"]["name"].as_str().unwrap();
            assert!(
                out.contains(&format!("/{name} serverside-applied")),
                "{file}: kubectl did not apply {} {name}:\n{out}",
                doc["kind"]
            );
            let object = get_back(&client, None, doc).await;
            if doc["kind"] == "CustomResourceDefinition" {
                wait_established(&client, name).await;
            }
            for (key, value) in doc["metadata"]["labels"].as_object().into_iter().flatten() {
                assert_eq!(
                    object.labels().get(key).map(String::as_str),
                    value.as_str(),
                    "{file}: label {key} of {} {name}",
                    doc["kind"]
                );
            }
        }
        applied_files.push(file);
    }
    for expected in [
        "rbac/rbac.yaml",
        "manager/manager.yaml",
        "clusterctl/infrastructure-capi-lb/v0.1.0/infrastructure-components.yaml",
    ] {
        assert!(
            applied_files.iter().any(|f| f.ends_with(expected)),
            "{expected} not among the generated files: {applied_files:?}"
        );
    }
    assert!(
        applied_files.iter().any(|f| f.starts_with("crd/bases/")),
        "{applied_files:?}"
    );
}

/// The clusterctl components as the real clusterctl makes them (`clusterctl generate yaml`, its
/// own variable substitution): the Deployment runs the providers `CAPI_LB_PROVIDERS` names (by
/// default the shipped ones, never the in-memory provider), the manager role aggregates exactly
/// those providers' parts, the apiserver accepts every document, and kube-controller-manager's
/// aggregation gives a kube-dc-only install kube-dc's permissions and none of Octavia's.
#[tokio::test]
async fn clusterctl_components_follow_the_providers_variable() {
    use capi_lb::install::rbac::PART_LABEL;
    let client = admin_client().await;
    let file = repo()
        .join("config")
        .join(capi_lb::install::manifests::clusterctl_release_dir())
        .join("infrastructure-components.yaml");
    for (variables, providers) in [
        (vec![], capi_lb_providers::catalog::DEFAULT_PROVIDERS),
        (vec![("CAPI_LB_PROVIDERS", "kubedc")], "kubedc"),
    ] {
        let text = clusterctl_generate_yaml(&file, &variables)
            .unwrap_or_else(|e| panic!("clusterctl generate yaml {variables:?}: {e}"));
        assert!(
            !text.contains("inmemory"),
            "{variables:?}: the in-memory provider is shipped"
        );
        let docs = yaml_docs(&text, "clusterctl generate yaml");
        let deployment = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
        let args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
        assert!(
            args.as_array()
                .unwrap()
                .contains(&json!(format!("--providers={providers}"))),
            "{variables:?}: {args}"
        );
        let manager = docs
            .iter()
            .find(|d| {
                d["metadata"]["name"]
                    == capi_lb::install::manifests::clusterctl_cluster_wide_name(
                        "capi-lb-manager-role",
                    )
            })
            .unwrap();
        let selected =
            &manager["aggregationRule"]["clusterRoleSelectors"][0]["matchExpressions"][0];
        assert_eq!(selected["key"], PART_LABEL);
        let expected: Vec<&str> = std::iter::once("controller")
            .chain(providers.split(','))
            .collect();
        assert_eq!(selected["values"], json!(expected), "{variables:?}");
        // The apiserver takes clusterctl's output as it is. (Forced: the kube-dc-only selector
        // differs from the installed one; a dry run changes nothing.)
        kubectl(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--dry-run=server",
                "-f",
                "-",
            ],
            Some(&text),
        );
        if variables.is_empty() {
            // The shipped install, applied for real: config/default's objects, the cluster-wide
            // ones under clusterctl's names (`capi-lb-system-...`) beside config/default's.
            kubectl(&["apply", "--server-side", "-f", "-"], Some(&text));
        } else {
            // The kube-dc-only manager role, under a name of this test's own (the shipped one
            // stays as the other tests need it), aggregated by kube-controller-manager.
            let mut role = manager.clone();
            role["metadata"]["name"] = json!("capi-lb-e2e-aggregation-kubedc");
            apply(&client, None, &role, false).await.unwrap();
            let roles: Api<ClusterRole> = Api::all(client.clone());
            wait_for(
                &roles,
                "capi-lb-e2e-aggregation-kubedc",
                "kube-dc's rules aggregated",
                |r| {
                    r.and_then(|r| r.rules.as_ref()).is_some_and(|rules| {
                        rules.iter().any(|rule| {
                            rule.api_groups.iter().flatten().any(|g| g == "kube-dc.com")
                        })
                    })
                },
            )
            .await;
            let rules = roles
                .get("capi-lb-e2e-aggregation-kubedc")
                .await
                .unwrap()
                .rules
                .unwrap();
            let granted = serde_json::to_string(&rules).unwrap();
            assert!(granted.contains("kubedcloadbalancers"), "{granted}");
            assert!(
                !granted.contains("octavialoadbalancers"),
                "Octavia's part aggregated: {granted}"
            );
            assert!(
                !granted.contains("serviceloadbalancers"),
                "the Service provider's part aggregated: {granted}"
            );
            assert!(
                granted.contains("loadbalancers/status"),
                "the controller part is missing: {granted}"
            );
            roles
                .delete("capi-lb-e2e-aggregation-kubedc", &Default::default())
                .await
                .unwrap();
        }
    }
}

// --- 2. examples and templates -------------------------------------------------------------------

/// Kinds used by `examples/` and `templates/` whose CRDs this cluster may lack. None: the harness
/// installs the CRDs of every provider the templates use (`tests/k8s/harness.sh`,
/// template_provider_crds), so every document must be served and accepted. A kind added here is
/// checked to parse but not applied.
const UNSERVED_KINDS: &[(&str, &str)] = &[];

/// Every file under `examples/` (recursively) and every cluster template flavor.
fn manifest_files() -> (Vec<PathBuf>, Vec<PathBuf>) {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let mut examples = Vec::new();
    walk(&repo().join("examples"), &mut examples);
    examples.sort();
    let templates = template_files();
    (examples, templates)
}

/// Apply every document `docs_for(namespace)` gives whose kind is served into a fresh test
/// namespace and read it back; returns the kinds that are not served and the apiserver's refusals.
async fn apply_into_fresh_namespace(
    file: &str,
    docs_for: impl FnOnce(&str) -> Vec<Value>,
) -> (BTreeSet<(String, String)>, Vec<String>) {
    let t = TestNs::new("install-manifests").await;
    let docs = docs_for(&t.ns);
    assert!(!docs.is_empty(), "{file}: no documents");
    let mut unserved = BTreeSet::new();
    let mut refused = Vec::new();
    let mut applied = 0;
    for doc in &docs {
        let api_version = doc["apiVersion"].as_str().unwrap_or_default();
        let kind = doc["kind"].as_str().unwrap_or_default();
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        assert!(
            !api_version.is_empty() && !kind.is_empty() && !name.is_empty(),
            "{file}: a document without apiVersion, kind or metadata.name: {doc}"
        );
        if !served(&t.client, api_version, kind).await {
            unserved.insert((api_version.to_string(), kind.to_string()));
            continue;
        }
        let mut doc = doc.clone();
        let api = dynamic_api(&t.client, Some(&t.ns), &doc).await.unwrap();
        let namespaced = api.resource_url().contains("/namespaces/");
        if namespaced {
            doc["metadata"]["namespace"] = json!(t.ns);
        }
        if let Err(e) = apply(&t.client, Some(&t.ns), &doc, false).await {
            refused.push(format!(
                "{file}: {kind} {name} refused by the apiserver: {e}"
            ));
            continue;
        }
        let back = get_back(&t.client, Some(&t.ns), &doc).await;
        if namespaced {
            assert_eq!(back.namespace().as_deref(), Some(t.ns.as_str()));
        }
        applied += 1;
    }
    assert!(applied > 0, "{file}: nothing was applied");
    t.finish().await;
    (unserved, refused)
}

#[tokio::test]
async fn every_example_and_every_template_flavor_is_accepted_by_the_apiserver() {
    let client = admin_client().await;
    install_crds(&client).await;
    install_capi_crds(&client).await;
    install_third_party_crds(
        &client,
        "KAMAJI_CRDS_DIR",
        "kamaji",
        &["controlplane.cluster.x-k8s.io_kamajicontrolplanes.yaml"],
    )
    .await;
    install_kube_dc_crds(&client).await;

    let (examples, templates) = manifest_files();
    assert!(
        examples
            .iter()
            .any(|p| p.to_string_lossy().contains("/kubedc/"))
            && examples
                .iter()
                .any(|p| p.to_string_lossy().contains("/octavia/")),
        "{examples:?}"
    );
    assert!(templates.len() >= 4, "{templates:?}");
    let mut unserved: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut tasks = Vec::new();
    for path in examples {
        let file = path.strip_prefix(repo()).unwrap().display().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let docs = yaml_docs(&text, &file);
        tasks.push(tokio::spawn(async move {
            let kinds = apply_into_fresh_namespace(&file, |_| docs).await;
            (file, kinds)
        }));
    }
    for path in templates {
        let file = path.strip_prefix(repo()).unwrap().display().to_string();
        tasks.push(tokio::spawn(async move {
            // The namespace is a template variable: substituted once the namespace exists.
            let kinds = apply_into_fresh_namespace(&file, |ns| {
                let docs = render(&path, ns).docs;
                for doc in &docs {
                    assert_eq!(doc["metadata"]["namespace"], json!(ns), "{file}: {doc}");
                }
                docs
            })
            .await;
            (file, kinds)
        }));
    }
    let mut refused = Vec::new();
    for task in tasks {
        let (file, (kinds, refusals)) = task.await.unwrap();
        refused.extend(refusals);
        for kind in kinds {
            unserved.entry(kind).or_default().push(file.clone());
        }
    }
    let expected: BTreeSet<(String, String)> = UNSERVED_KINDS
        .iter()
        .map(|(v, k)| (v.to_string(), k.to_string()))
        .collect();
    assert!(refused.is_empty(), "{}", refused.join("\n"));
    let found: BTreeSet<(String, String)> = unserved.keys().cloned().collect();
    assert_eq!(
        found, expected,
        "documents of kinds this cluster does not serve (kind -> files): {unserved:#?}"
    );
}

// --- 3. every CEL rule refused alike by the apiserver and client-side ---------------------------

/// One `x-kubernetes-validations` rule of a generated CRD.
#[derive(Clone, Debug)]
struct CelRule {
    kind: String,
    /// Path of the schema node carrying the rule (`spec.ports[*].name`, `` for the root).
    node: String,
    rule: String,
    message: Option<String>,
    message_expression: Option<String>,
    /// Where the apiserver reports a failure: the node, plus the rule's `fieldPath`.
    reported_at: String,
}

impl CelRule {
    /// The message or messageExpression: what a case names the rule by.
    fn text(&self) -> &str {
        self.message
            .as_deref()
            .or(self.message_expression.as_deref())
            .unwrap_or(&self.rule)
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else if key.is_empty() {
        path.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn collect_rules(kind: &str, schema: &Value, node: &str, out: &mut Vec<CelRule>) {
    for rule in schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let reported_at = match rule.get("fieldPath").and_then(Value::as_str) {
            Some(fp) if !fp.is_empty() => join(node, &resolve_field_path(schema, fp).unwrap()),
            _ => node.to_string(),
        };
        out.push(CelRule {
            kind: kind.to_string(),
            node: node.to_string(),
            rule: rule["rule"].as_str().unwrap().to_string(),
            message: rule
                .get("message")
                .and_then(Value::as_str)
                .map(String::from),
            message_expression: rule
                .get("messageExpression")
                .and_then(Value::as_str)
                .map(String::from),
            reported_at,
        });
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, child) in props {
            collect_rules(kind, child, &join(node, name), out);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child) = schema.get(key).filter(|c| c.is_object()) {
            collect_rules(kind, child, &format!("{node}[*]"), out);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        for child in schema
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            collect_rules(kind, child, node, out);
        }
    }
}

/// Every rule of every generated CRD (every served version).
fn generated_rules() -> Vec<CelRule> {
    let mut out = Vec::new();
    for crd in capi_lb_api::crds() {
        for version in &crd.spec.versions {
            let schema = serde_json::to_value(
                version
                    .schema
                    .as_ref()
                    .unwrap()
                    .open_api_v3_schema
                    .as_ref()
                    .unwrap(),
            )
            .unwrap();
            collect_rules(&crd.spec.names.kind, &schema, "", &mut out);
        }
    }
    out
}

/// `spec.ports[0].name` -> `spec.ports[*].name`.
fn wildcard_indices(field: &str) -> String {
    let mut out = String::new();
    let mut rest = field;
    while let Some(start) = rest.find('[') {
        let end = start + rest[start..].find(']').unwrap();
        out.push_str(&rest[..start]);
        if rest[start + 1..end].bytes().all(|b| b.is_ascii_digit()) {
            out.push_str("[*]");
        } else {
            out.push_str(&rest[start..=end]);
        }
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

fn client_validate(kind: &str, object: &Value) -> Result<(), FieldErrors> {
    match kind {
        "LoadBalancer" => parse::<LoadBalancer>(object).map(drop),
        "InMemoryLoadBalancer" => parse::<InMemoryLoadBalancer>(object).map(drop),
        "KubeDCLoadBalancer" => parse::<KubeDCLoadBalancer>(object).map(drop),
        "OctaviaLoadBalancer" => parse::<OctaviaLoadBalancer>(object).map(drop),
        "ServiceLoadBalancer" => parse::<ServiceLoadBalancer>(object).map(drop),
        "DNSLoadBalancer" => parse::<DNSLoadBalancer>(object).map(drop),
        "ZonedLoadBalancer" => parse::<ZonedLoadBalancer>(object).map(drop),
        other => panic!("no client-side validation for {other}"),
    }
}

/// A bad object for one CEL rule.
struct CelCase {
    /// The rule: its kind, its node and a fragment of its message (or messageExpression).
    kind: &'static str,
    node: &'static str,
    rule: &'static str,
    /// The object's name and spec.
    name: String,
    spec: Value,
    /// For a transition rule (`oldSelf`): the spec the object is created with first.
    old_spec: Option<Value>,
    /// Where the failure is reported (`spec.ports[0].name`).
    field: &'static str,
    /// The message of a rule with a messageExpression, as evaluated for this object.
    evaluated: Option<String>,
}

fn case(
    kind: &'static str,
    node: &'static str,
    rule: &'static str,
    field: &'static str,
) -> CelCase {
    CelCase {
        kind,
        node,
        rule,
        name: "cp".into(),
        spec: json!({}),
        old_spec: None,
        field,
        evaluated: None,
    }
}

impl CelCase {
    fn spec(mut self, spec: Value) -> Self {
        self.spec = spec;
        self
    }
    fn name(mut self, name: &str) -> Self {
        self.name = name.into();
        self
    }
    fn old(mut self, spec: Value) -> Self {
        self.old_spec = Some(spec);
        self
    }
    fn evaluated(mut self, message: String) -> Self {
        self.evaluated = Some(message);
        self
    }
    fn object(&self, spec: &Value) -> Value {
        object(self.kind, &self.name, spec)
    }
}

/// A capi-lb object of `kind` in namespace `default` (the tests put it in theirs).
fn object(kind: &str, name: &str, spec: &Value) -> Value {
    let group = if kind == "LoadBalancer" {
        "loadbalancer.cluster.x-k8s.io"
    } else {
        "infrastructure.cluster.x-k8s.io"
    };
    json!({
        "apiVersion": format!("{group}/v1alpha1"),
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    })
}

fn infra_ref() -> Value {
    json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "InMemoryLoadBalancer", "name": "cp"})
}

fn lb_spec(extra: Value) -> Value {
    let mut spec = json!({"infrastructureRef": infra_ref()});
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    spec
}

/// A zone of a ZonedLoadBalancer on the infrastructure object `kind`/`name`.
fn zone(name: &str, kind: &str, infra: &str) -> Value {
    json!({"name": name, "infrastructureRef": {
        "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": kind, "name": infra}})
}

fn octavia_spec(extra: Value) -> Value {
    let mut spec = json!({"credentials": {"secretName": "cloud"}, "vip": {"subnetID": "s"}});
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    spec
}

/// At least one bad object per rule (the cases of api/tests/schema.rs and more).
fn cel_cases() -> Vec<CelCase> {
    let published = |name: &str| {
        format!(
            "the published Service name {name}-ext must be a DNS label (lowercase letters, digits \
             and -, starting with a letter) of at most 63 characters: shorten the LoadBalancer name \
             or spec.publication.suffix, or disable publication"
        )
    };
    let long = "a".repeat(60);
    let dotted = format!("{}.{}", "a".repeat(40), "b".repeat(30));
    vec![
        // LoadBalancer
        case(
            "LoadBalancer",
            "",
            "must be a DNS label",
            "spec.publication.suffix",
        )
        .name("cp.example")
        .spec(lb_spec(json!({})))
        .evaluated(published("cp.example")),
        case(
            "LoadBalancer",
            "",
            "must be a DNS label",
            "spec.publication.suffix",
        )
        .name(&long)
        .spec(lb_spec(json!({})))
        .evaluated(published(&long)),
        case(
            "LoadBalancer",
            "",
            "must be a DNS label",
            "spec.publication.suffix",
        )
        .spec(lb_spec(json!({"publication": {"suffix": "-Ext"}})))
        .evaluated(published("cp").replace("cp-ext", "cp-Ext")),
        case("LoadBalancer", "", "is longer than 63 characters", "")
            .name(&dotted)
            .spec(lb_spec(json!({"publication": {"enabled": false}})))
            .evaluated(format!(
                "the LoadBalancer name {dotted} is longer than 63 characters: it is the value of \
                 the label loadbalancer.cluster.x-k8s.io/name on what capi-lb publishes and \
                 selects, so it must be a valid label value"
            )),
        case(
            "LoadBalancer",
            "spec",
            "spec.controlPlane needs spec.clusterName",
            "spec.controlPlane",
        )
        .spec(lb_spec(json!({"controlPlane": {}}))),
        case(
            "LoadBalancer",
            "spec",
            "spec.workloadEndpoints needs spec.clusterName",
            "spec.workloadEndpoints",
        )
        .spec(lb_spec(json!({"workloadEndpoints": {"enabled": true}}))),
        case(
            "LoadBalancer",
            "spec.reachability",
            "timeoutSeconds must be less than periodSeconds",
            "spec.reachability",
        )
        .spec(lb_spec(
            json!({"reachability": {"periodSeconds": 5, "timeoutSeconds": 5}}),
        )),
        case(
            "LoadBalancer",
            "spec.targetHealth",
            "timeoutSeconds must be less than periodSeconds",
            "spec.targetHealth",
        )
        .spec(lb_spec(
            json!({"targetHealth": {"periodSeconds": 2, "timeoutSeconds": 3}}),
        )),
        case(
            "LoadBalancer",
            "spec.ports",
            "port names must be unique",
            "spec.ports",
        )
        .spec(lb_spec(
            json!({"ports": [{"name": "api", "port": 6443}, {"name": "api", "port": 443}]}),
        )),
        case(
            "LoadBalancer",
            "spec.ports",
            "port and protocol pair",
            "spec.ports",
        )
        .spec(lb_spec(
            json!({"ports": [{"name": "a", "port": 53}, {"name": "b", "port": 53}]}),
        )),
        case(
            "LoadBalancer",
            "spec.ports",
            "port and protocol pair",
            "spec.ports",
        )
        .spec(lb_spec(
            json!({"ports": [{"name": "a", "port": 53, "protocol": "UDP"},
                             {"name": "b", "port": 53, "protocol": "UDP"}]}),
        )),
        case(
            "LoadBalancer",
            "spec.ports[*].name",
            "must contain a letter",
            "spec.ports[0].name",
        )
        .spec(lb_spec(json!({"ports": [{"name": "6443", "port": 6443}]}))),
        case(
            "LoadBalancer",
            "spec.ports[*].name",
            "must contain a letter",
            "spec.ports[1].name",
        )
        .spec(lb_spec(
            json!({"ports": [{"name": "api", "port": 6443}, {"name": "a--b", "port": 443}]}),
        )),
        case(
            "LoadBalancer",
            "spec.readinessGates",
            "readiness gates must be unique",
            "spec.readinessGates",
        )
        .spec(lb_spec(json!({"readinessGates": [
            {"conditionType": "APIServerPodHealthy"}, {"conditionType": "APIServerPodHealthy"}]}))),
        case(
            "LoadBalancer",
            "spec.targetAddressTypes",
            "address types must be unique",
            "spec.targetAddressTypes",
        )
        .spec(lb_spec(
            json!({"targetAddressTypes": ["InternalIP", "ExternalIP", "InternalIP"]}),
        )),
        case(
            "LoadBalancer",
            "spec.sourceRanges",
            "every source range must be a CIDR",
            "spec.sourceRanges",
        )
        .spec(lb_spec(json!({"sourceRanges": ["10.0.0.0/8", "10.0.0.1"]}))),
        case(
            "LoadBalancer",
            "spec.dns.hostnames",
            "hostnames must be unique",
            "spec.dns.hostnames",
        )
        .spec(lb_spec(
            json!({"dns": {"hostnames": ["api.example.com", "api.example.com"]}}),
        )),
        // ServiceLoadBalancer
        case(
            "ServiceLoadBalancer",
            "spec",
            "loadBalancerClass is immutable",
            "spec",
        )
        .old(json!({"loadBalancerClass": "example.com/a"}))
        .spec(json!({"loadBalancerClass": "example.com/b"})),
        case(
            "ServiceLoadBalancer",
            "spec",
            "loadBalancerClass is immutable",
            "spec",
        )
        .old(json!({}))
        .spec(json!({"loadBalancerClass": "example.com/a"})),
        case(
            "ServiceLoadBalancer",
            "spec.annotations",
            "cannot be capi-lb's own",
            "spec.annotations",
        )
        .spec(json!({"annotations": {"loadbalancer.cluster.x-k8s.io/external-endpoint": "true"}})),
        case(
            "ServiceLoadBalancer",
            "spec.labels",
            "cannot be capi-lb's own",
            "spec.labels",
        )
        .spec(json!({"labels": {"app.kubernetes.io/managed-by": "someone"}})),
        case(
            "ServiceLoadBalancer",
            "spec.ipFamilies",
            "each family at most once",
            "spec.ipFamilies",
        )
        .spec(json!({"ipFamilies": ["IPv6", "IPv6"]})),
        case(
            "ServiceLoadBalancer",
            "spec.loadBalancerIP",
            "must be an IP address",
            "spec.loadBalancerIP",
        )
        .spec(json!({"loadBalancerIP": "192.0.2.300"})),
        case(
            "ServiceLoadBalancer",
            "spec.loadBalancerSourceRanges",
            "every entry must be a CIDR",
            "spec.loadBalancerSourceRanges",
        )
        .spec(json!({"loadBalancerSourceRanges": ["192.0.2.0/24", "everyone"]})),
        // DNSLoadBalancer
        case(
            "DNSLoadBalancer",
            "spec.hostname",
            "every label of the hostname is at most 63 characters",
            "spec.hostname",
        )
        .spec(json!({"hostname": format!("{}.example.com", "a".repeat(64))})),
        // ZonedLoadBalancer
        case(
            "ZonedLoadBalancer",
            "spec.zones",
            "zone names must be unique",
            "spec.zones",
        )
        .spec(json!({"zones": [zone("az1", "OctaviaLoadBalancer", "a"), zone("az1", "OctaviaLoadBalancer", "b")]})),
        case(
            "ZonedLoadBalancer",
            "spec.zones",
            "each zone needs its own infrastructure object",
            "spec.zones",
        )
        .spec(json!({"zones": [zone("az1", "OctaviaLoadBalancer", "a"), zone("az2", "OctaviaLoadBalancer", "a")]})),
        case(
            "ZonedLoadBalancer",
            "spec.zones[*]",
            "cannot itself be a ZonedLoadBalancer",
            "spec.zones[1].infrastructureRef",
        )
        .spec(json!({"zones": [zone("az1", "OctaviaLoadBalancer", "a"), zone("az2", "ZonedLoadBalancer", "b")]})),
        // InMemoryLoadBalancer
        case(
            "InMemoryLoadBalancer",
            "spec",
            "at least one address pool",
            "spec",
        )
        .spec(json!({"addressPools": []})),
        case(
            "InMemoryLoadBalancer",
            "spec.addressPools",
            "every pool must be a CIDR",
            "spec.addressPools",
        )
        .spec(json!({"addressPools": ["203.0.113.0/24", "not-a-cidr"]})),
        case(
            "InMemoryLoadBalancer",
            "spec.addressPools",
            "every pool must be a CIDR",
            "spec.addressPools",
        )
        .spec(json!({"addressPools": ["203.0.113.7"]})),
        // KubeDCLoadBalancer: transition rules, refused on update.
        case("KubeDCLoadBalancer", "spec", "eipName is immutable", "spec")
            .old(json!({"eipName": "a"}))
            .spec(json!({"eipName": "b"})),
        case("KubeDCLoadBalancer", "spec", "eipName is immutable", "spec")
            .old(json!({"eipName": "a"}))
            .spec(json!({})),
        case("KubeDCLoadBalancer", "spec", "eipName is immutable", "spec")
            .old(json!({}))
            .spec(json!({"eipName": "a"})),
        case(
            "KubeDCLoadBalancer",
            "spec",
            "cluster cannot be added or removed",
            "spec",
        )
        .old(json!({}))
        .spec(json!({"cluster": {"kubeconfigSecretName": "kube-dc", "namespace": "a"}})),
        case(
            "KubeDCLoadBalancer",
            "spec",
            "cluster cannot be added or removed",
            "spec",
        )
        .old(json!({"cluster": {"kubeconfigSecretName": "kube-dc", "namespace": "a"}}))
        .spec(json!({})),
        case(
            "KubeDCLoadBalancer",
            "spec.cluster.namespace",
            "cluster.namespace is immutable",
            "spec.cluster.namespace",
        )
        .old(json!({"cluster": {"kubeconfigSecretName": "kube-dc", "namespace": "a"}}))
        .spec(json!({"cluster": {"kubeconfigSecretName": "kube-dc", "namespace": "b"}})),
        // OctaviaLoadBalancer
        case(
            "OctaviaLoadBalancer",
            "spec",
            "not supported by the ovn provider",
            "spec.listener.allowedCIDRs",
        )
        .spec(octavia_spec(
            json!({"provider": "ovn", "listener": {"allowedCIDRs": ["10.0.0.0/8"]}}),
        )),
        case(
            "OctaviaLoadBalancer",
            "spec.floatingIP",
            "set networkID (allocate a floating IP from it)",
            "spec.floatingIP",
        )
        .spec(octavia_spec(json!({"floatingIP": {}}))),
        // Null is no value: `has()` is false for it, as for an absent field.
        case(
            "OctaviaLoadBalancer",
            "spec.floatingIP",
            "set networkID (allocate a floating IP from it)",
            "spec.floatingIP",
        )
        .spec(octavia_spec(
            json!({"floatingIP": {"networkID": null, "address": null}}),
        )),
        case(
            "OctaviaLoadBalancer",
            "spec.floatingIP.address",
            "must be an IP address",
            "spec.floatingIP.address",
        )
        .spec(octavia_spec(
            json!({"floatingIP": {"address": "192.0.2.0/24"}}),
        )),
        case(
            "OctaviaLoadBalancer",
            "spec.healthMonitor",
            "urlPath needs type HTTP or HTTPS",
            "spec.healthMonitor",
        )
        .spec(octavia_spec(
            json!({"healthMonitor": {"type": "TCP", "urlPath": "/healthz"}}),
        )),
        case(
            "OctaviaLoadBalancer",
            "spec.listener.allowedCIDRs",
            "every entry must be a CIDR",
            "spec.listener.allowedCIDRs",
        )
        .spec(octavia_spec(
            json!({"listener": {"allowedCIDRs": ["not-a-cidr"]}}),
        )),
        case(
            "OctaviaLoadBalancer",
            "spec.vip",
            "networkID and subnetID",
            "spec.vip",
        )
        .spec(octavia_spec(json!({"vip": {}}))),
        case(
            "OctaviaLoadBalancer",
            "spec.vip",
            "networkID and subnetID",
            "spec.vip",
        )
        .spec(octavia_spec(
            json!({"vip": {"networkID": "n", "subnetID": "s"}}),
        )),
        case(
            "OctaviaLoadBalancer",
            "spec.vip.address",
            "must be an IP address",
            "spec.vip.address",
        )
        .spec(octavia_spec(
            json!({"vip": {"subnetID": "s", "address": "not-an-ip"}}),
        )),
    ]
}

/// The apiserver's field errors of a refusal (`status.details.causes`), without its note that some
/// rules were not checked.
fn apiserver_causes(error: &kube::Error, what: &str) -> (String, Vec<(String, String)>) {
    let kube::Error::Api(status) = error else {
        panic!("{what}: not an apiserver refusal: {error}");
    };
    assert_eq!(status.code, 422, "{what}: {status:?}");
    assert_eq!(status.reason, "Invalid", "{what}: {status:?}");
    let causes = status
        .details
        .as_ref()
        .map(|d| d.causes.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|c| !c.message.contains("some validation rules were not checked"))
        // The object itself: the apiserver spells it `<nil>` (a rule on the root without a
        // fieldPath), client-side validation the empty path.
        .map(|c| {
            let field = if c.field == "<nil>" {
                String::new()
            } else {
                c.field
            };
            (field, c.message)
        })
        .collect();
    (status.message.clone(), causes)
}

/// Dry-run create `object` in `ns`; the apiserver's answer.
async fn dry_run_create(client: &Client, ns: &str, object: &Value) -> Result<(), kube::Error> {
    let mut object = object.clone();
    object["metadata"]["namespace"] = json!(ns);
    let api = dynamic_api(client, Some(ns), &object).await.unwrap();
    let params = PostParams {
        dry_run: true,
        field_manager: Some(MANAGER.into()),
    };
    api.create(&params, &serde_json::from_value(object).unwrap())
        .await
        .map(drop)
}

/// Create `old` for real in `ns`, then dry-run replace it with `new`; the apiserver's answer.
async fn dry_run_update(
    client: &Client,
    ns: &str,
    old: &Value,
    new: &Value,
) -> Result<(), kube::Error> {
    let mut old = old.clone();
    old["metadata"]["namespace"] = json!(ns);
    let api = dynamic_api(client, Some(ns), &old).await.unwrap();
    let created = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(old.clone()).unwrap(),
        )
        .await
        .unwrap_or_else(|e| panic!("creating {old}: {e}"));
    let mut new = new.clone();
    new["metadata"]["namespace"] = json!(ns);
    new["metadata"]["resourceVersion"] = json!(created.resource_version());
    let params = PostParams {
        dry_run: true,
        field_manager: Some(MANAGER.into()),
    };
    let result = api
        .replace(
            &created.name_any(),
            &params,
            &serde_json::from_value(new).unwrap(),
        )
        .await
        .map(drop);
    api.delete(&created.name_any(), &Default::default())
        .await
        .unwrap();
    result
}

#[tokio::test]
async fn every_cel_rule_is_refused_alike_by_the_apiserver_and_client_side() {
    let t = TestNs::new("install-cel").await;
    let rules = generated_rules();
    assert!(rules.len() >= 18, "only {} rules: {rules:#?}", rules.len());
    let mut covered = vec![0usize; rules.len()];
    let mut failures = Vec::new();
    for (i, case) in cel_cases().into_iter().enumerate() {
        let what = format!(
            "case {i} ({} {} {:?}: {})",
            case.kind, case.node, case.rule, case.spec
        );
        // The rule it is for.
        let matching: Vec<usize> = rules
            .iter()
            .enumerate()
            .filter(|(_, r)| {
                r.kind == case.kind && r.node == case.node && r.text().contains(case.rule)
            })
            .map(|(i, _)| i)
            .collect();
        assert_eq!(matching.len(), 1, "{what}: matches rules {matching:?}");
        let rule = &rules[matching[0]];
        covered[matching[0]] += 1;
        assert_eq!(
            rule.message_expression.is_some(),
            case.evaluated.is_some(),
            "{what}: give the evaluated message exactly for a rule with a messageExpression"
        );
        let message = case
            .evaluated
            .clone()
            .or(rule.message.clone())
            .unwrap_or_else(|| format!("failed rule: {}", rule.rule));
        assert_eq!(
            wildcard_indices(case.field),
            rule.reported_at,
            "{what}: the field of the case is not where the rule reports"
        );
        let object = case.object(&case.spec);

        // The apiserver.
        let answer = match &case.old_spec {
            None => dry_run_create(&t.client, &t.ns, &object).await,
            Some(old) => {
                let mut old = case.object(old);
                let mut new = object.clone();
                // A distinct name per case: the old object is created for real.
                let name = format!("transition-{i}");
                old["metadata"]["name"] = json!(name);
                new["metadata"]["name"] = json!(name);
                dry_run_update(&t.client, &t.ns, &old, &new).await
            }
        };
        let Err(error) = answer else {
            failures.push(format!("{what}: the apiserver accepted it"));
            continue;
        };
        let (status_message, causes) = apiserver_causes(&error, &what);
        if !causes
            .iter()
            .any(|(field, m)| field == case.field && m.contains(&message))
        {
            failures.push(format!(
                "{what}: the apiserver did not report {message:?} on {}: {status_message}",
                case.field
            ));
        }
        if !status_message.contains(&format!("{}: ", case.field))
            || !status_message.contains(&message)
        {
            failures.push(format!(
                "{what}: the apiserver's message does not name {} with {message:?}: {status_message}",
                case.field
            ));
        }

        // Client-side.
        match &case.old_spec {
            None => match client_validate(case.kind, &object) {
                Ok(()) => failures.push(format!("{what}: accepted client-side")),
                Err(errors) => {
                    if !errors
                        .0
                        .iter()
                        .any(|e| e.field == case.field && e.message == message)
                    {
                        failures.push(format!(
                            "{what}: client-side did not report {message:?} on {}: {errors}",
                            case.field
                        ));
                    }
                    let client_fields: BTreeSet<&str> =
                        errors.0.iter().map(|e| e.field.as_str()).collect();
                    let server_fields: BTreeSet<&str> =
                        causes.iter().map(|(f, _)| f.as_str()).collect();
                    if client_fields != server_fields {
                        failures.push(format!(
                            "{what}: client-side fields {client_fields:?}, the apiserver's \
                             {server_fields:?} ({errors} / {status_message})"
                        ));
                    }
                }
            },
            Some(old) => {
                // `parse` sees one object, never the stored one: transition rules cannot fail
                // there. The same rule, evaluated with the old object by the CEL engine the
                // client-side validation uses, reports the same field and message.
                if let Err(errors) = client_validate(case.kind, &object) {
                    failures.push(format!(
                        "{what}: the new object alone is refused client-side: {errors}"
                    ));
                }
                match transition_errors(case.kind, &case.object(old), &object) {
                    Ok(()) => {
                        failures.push(format!("{what}: the CEL engine accepts the transition"))
                    }
                    Err(errors) => {
                        if !errors.iter().any(|(f, m)| f == case.field && m == &message) {
                            failures.push(format!(
                                "{what}: the CEL engine did not report {message:?} on {}: {errors:?}",
                                case.field
                            ));
                        }
                    }
                }
            }
        }
    }
    let uncovered: Vec<&CelRule> = rules
        .iter()
        .zip(&covered)
        .filter(|(_, n)| **n == 0)
        .map(|(r, _)| r)
        .collect();
    assert!(
        uncovered.is_empty(),
        "CEL rules without a bad-object case here: {uncovered:#?}"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    t.finish().await;
}

/// The CEL rules of `kind`'s CRD evaluated on an update from `old` to `new` (the engine of the
/// client-side validation, kube-cel): `(field, message)` of every failure.
fn transition_errors(kind: &str, old: &Value, new: &Value) -> Result<(), Vec<(String, String)>> {
    use kube::core::cel::{Validator, compile_schema};
    let crd = capi_lb_api::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap();
    let schema = serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap();
    let compiled = compile_schema(&schema);
    let defaulted_old = kube::core::cel::apply_defaults(&schema, old);
    let defaulted_new = kube::core::cel::apply_defaults(&schema, new);
    Validator::new()
        .validate_compiled(&compiled, &defaulted_new, Some(&defaulted_old))
        .map_err(|errors| {
            errors
                .iter()
                .map(|e| (e.field_path.clone(), e.message.clone()))
                .collect()
        })
}

/// A few OpenAPI constraints: the apiserver and the client-side validation refuse the same field.
#[tokio::test]
async fn openapi_constraints_are_refused_alike_by_the_apiserver_and_client_side() {
    let t = TestNs::new("install-openapi").await;
    // (kind, spec, field, fragment of the apiserver's message, fragment of ours)
    let cases: Vec<(&str, Value, &str, &str, &str)> = vec![
        (
            "LoadBalancer",
            lb_spec(json!({"ports": [{"name": "api", "port": 70000}]})),
            "spec.ports[0].port",
            "less than or equal to 65535",
            "65535",
        ),
        (
            "LoadBalancer",
            lb_spec(json!({"ports": [{"name": "api", "port": 0}]})),
            "spec.ports[0].port",
            "greater than or equal to 1",
            "minimum of 1",
        ),
        (
            "LoadBalancer",
            lb_spec(json!({"ports": [{"name": "api", "port": 6443, "targetPort": 65536}]})),
            "spec.ports[0].targetPort",
            "less than or equal to 65535",
            "65535",
        ),
        (
            "LoadBalancer",
            lb_spec(json!({"ports": [{"name": "Api", "port": 6443}]})),
            "spec.ports[0].name",
            "should match",
            "does not match",
        ),
        (
            "LoadBalancer",
            lb_spec(json!({"ports": [{"name": "abcdefghijklmnop", "port": 6443}]})),
            "spec.ports[0].name",
            "may not be more than 15",
            "longer than 15",
        ),
        (
            "LoadBalancer",
            lb_spec(json!({"ports": []})),
            "spec.ports",
            "at least 1 items",
            "",
        ),
        (
            "LoadBalancer",
            lb_spec(json!({"ports": [{"name": "api", "port": 6443, "protocol": "SCTP"}]})),
            "spec.ports[0].protocol",
            "Unsupported value",
            "",
        ),
        (
            "LoadBalancer",
            lb_spec(json!({"drainSeconds": 3601})),
            "spec.drainSeconds",
            "less than or equal to 3600",
            "3600",
        ),
        (
            "LoadBalancer",
            lb_spec(json!({"readinessGates": [{"conditionType": "not a type"}]})),
            "spec.readinessGates[0].conditionType",
            "should match",
            "does not match",
        ),
        (
            "LoadBalancer",
            json!({"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                   "kind": "inMemory", "name": "cp"}}),
            "spec.infrastructureRef.kind",
            "should match",
            "does not match",
        ),
        (
            "LoadBalancer",
            json!({}),
            "spec.infrastructureRef",
            "Required value",
            "infrastructureRef",
        ),
        (
            "LoadBalancer",
            lb_spec(json!({"dns": {"hostnames": ["api.example.com", "API.example.com"]}})),
            "spec.dns.hostnames[1]",
            "should match",
            "does not match",
        ),
        (
            "LoadBalancer",
            lb_spec(json!({"dns": {"hostnames": (0..9)
                .map(|i| format!("h{i}.example.com"))
                .collect::<Vec<_>>()}})),
            "spec.dns.hostnames",
            "must have at most 8 items",
            "",
        ),
        (
            "KubeDCLoadBalancer",
            json!({"eipName": "Not_A_Name"}),
            "spec.eipName",
            "should match",
            "does not match",
        ),
        (
            "KubeDCLoadBalancer",
            json!({"externalNetworkType": "internet"}),
            "spec.externalNetworkType",
            "Unsupported value",
            "",
        ),
        (
            "OctaviaLoadBalancer",
            octavia_spec(json!({"healthMonitor": {"type": "PING"}})),
            "spec.healthMonitor.type",
            "Unsupported value",
            "",
        ),
    ];
    let mut failures = Vec::new();
    for (kind, spec, field, server_fragment, client_fragment) in cases {
        let object = object(kind, "cp", &spec);
        let what = format!("{kind} {spec}");
        let Err(error) = dry_run_create(&t.client, &t.ns, &object).await else {
            failures.push(format!("{what}: the apiserver accepted it"));
            continue;
        };
        let (status_message, causes) = apiserver_causes(&error, &what);
        if !causes
            .iter()
            .any(|(f, m)| f == field && m.contains(server_fragment))
        {
            failures.push(format!(
                "{what}: the apiserver did not report {server_fragment:?} on {field}: {status_message}"
            ));
        }
        match client_validate(kind, &object) {
            Ok(()) => failures.push(format!("{what}: accepted client-side")),
            Err(errors) => {
                if !errors
                    .0
                    .iter()
                    .any(|e| e.field == field && e.message.contains(client_fragment))
                {
                    failures.push(format!(
                        "{what}: client-side did not report {client_fragment:?} on {field}: {errors}"
                    ));
                }
                let client_fields: BTreeSet<&str> =
                    errors.0.iter().map(|e| e.field.as_str()).collect();
                let server_fields: BTreeSet<&str> =
                    causes.iter().map(|(f, _)| f.as_str()).collect();
                if client_fields != server_fields {
                    failures.push(format!(
                        "{what}: client-side fields {client_fields:?}, the apiserver's \
                         {server_fields:?} ({errors} / {status_message})"
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    t.finish().await;
}
