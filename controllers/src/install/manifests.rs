//! `capi-lb manifests`: the install YAML, generated from the code so that it cannot drift from what
//! the binary needs. Written under `config/` by component (CI fails when the committed copy drifts):
//!
//! - `crd/`: the CRDs (also `capi-lb crds`);
//! - `rbac/`: ServiceAccount, the least-privilege ClusterRole from [`crate::install::rbac`] and its binding,
//!   the leader-election Role and binding in capi-lb's namespace, and the ClusterRole aggregated to
//!   Cluster API's manager (label `cluster.x-k8s.io/aggregate-to-manager`) for the LoadBalancer kind,
//!   which is not in `infrastructure.cluster.x-k8s.io`;
//! - `manager/`: the Namespace and the Deployment (container `manager`, non-root, read-only root
//!   filesystem, no privilege escalation, requests, probes on `/livez` and `/readyz`, leader
//!   election on);
//! - `default/`: a kustomization of all of the above (`kubectl apply -k config/default`);
//! - `clusterctl/`: a clusterctl provider repository in clusterctl's local layout,
//!   `infrastructure-capi-lb/v<version>/` holding `infrastructure-components.yaml` (everything, each
//!   object labelled `cluster.x-k8s.io/provider: infrastructure-capi-lb`, with clusterctl variables),
//!   `metadata.yaml` and the `cluster-template-<flavor>.yaml` files copied from `templates/`;
//! - `monitoring/`: the Grafana dashboard (`dashboard.json`, and as a ConfigMap for Grafana's
//!   sidecar), the alerts (`alerts.rules.yaml` for Prometheus and promtool, `prometheus-rule.yaml`
//!   for prometheus-operator) and a kustomization of the two objects (see
//!   [`crate::install::monitoring`]).

use std::path::{Path, PathBuf};

use capi_lb_api::constants::GROUP;
use k8s_openapi::api::rbac::v1::PolicyRule;
use serde_json::{Value, json};

use crate::install::clusterctl;
use crate::install::monitoring;
use crate::install::rbac::{self, Enabled};
use crate::install::tenants;

pub use crate::install::clusterctl::{
    PROVIDER_LABEL, TENANT_ROLES_VARIABLE, clusterctl_cluster_wide_name, clusterctl_release_dir,
    providers_variable,
};
use crate::install::yaml;
pub use crate::install::{HEADER, NAMESPACE};
/// Name of the controller's ServiceAccount.
pub const SERVICE_ACCOUNT: &str = "capi-lb-manager";
/// Container image, tagged with this version.
pub fn image() -> String {
    format!("ghcr.io/capi-lb/capi-lb:v{}", env!("CARGO_PKG_VERSION"))
}

/// The labels of every object (the chart's selector labels too).
pub(crate) fn labels() -> Value {
    json!({"app.kubernetes.io/name": "capi-lb", "app.kubernetes.io/component": "controller-manager"})
}

fn rules_json(rules: Vec<PolicyRule>) -> Value {
    serde_json::to_value(rules).unwrap_or(Value::Null)
}

/// The ClusterRole of one part of capi-lb (see [`rbac::parts`]), labelled for aggregation.
pub fn part_role(part: &str, rules: Vec<PolicyRule>) -> Value {
    let mut labels = labels();
    labels[rbac::PART_LABEL] = json!(part);
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": format!("{MANAGER_ROLE}-{part}"), "labels": labels},
        "rules": rules_json(rules),
    })
}

/// The manager's ClusterRole: the aggregation of the parts named by `parts` (rules are filled in
/// by kube-controller-manager, so the role never grants a provider the install does not run).
pub(crate) const MANAGER_ROLE: &str = "capi-lb-manager-role";

/// The RBAC objects of an install that runs `enabled`; `parts` are the values of the aggregation
/// selector (the controller part and the providers).
pub fn rbac_objects(enabled: &Enabled, parts: Vec<String>) -> Vec<Value> {
    let mut out = vec![
        json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE, "labels": labels()},
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": MANAGER_ROLE, "labels": labels()},
            "aggregationRule": {"clusterRoleSelectors": [{"matchExpressions": [
                {"key": rbac::PART_LABEL, "operator": "In", "values": parts},
            ]}]},
        }),
    ];
    out.extend(
        rbac::parts(enabled)
            .into_iter()
            .map(|(part, rules)| part_role(&part, rules)),
    );
    out.extend([
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "capi-lb-manager-rolebinding", "labels": labels()},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": MANAGER_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "capi-lb-leader-election-role", "namespace": NAMESPACE, "labels": labels()},
            "rules": rules_json(rbac::leader_election_rules()),
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "capi-lb-leader-election-rolebinding", "namespace": NAMESPACE, "labels": labels()},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "capi-lb-leader-election-role"},
            "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}],
        }),
        // Bound by the admin to the scraper (Prometheus's ServiceAccount): the non-resource URL
        // secure metrics authorize.
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": METRICS_READER_ROLE, "labels": labels()},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        }),
        // Cluster API's manager reads objects across providers (our LoadBalancer kind is outside
        // infrastructure.cluster.x-k8s.io, which Cluster API already covers); it never writes
        // LoadBalancers, so it may only read them.
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "capi-lb-capi-aggregated-role", "labels": {
                "cluster.x-k8s.io/aggregate-to-manager": "true",
                "app.kubernetes.io/name": "capi-lb",
            }},
            "rules": [{"apiGroups": [GROUP], "resources": ["loadbalancers", "loadbalancers/status"],
                       "verbs": ["get", "list", "watch"]}],
        }),
    ]);
    out
}

/// The selector values of an install that runs `enabled`.
fn parts_of(enabled: &Enabled) -> Vec<String> {
    std::iter::once(rbac::CONTROLLER_PART.to_string())
        .chain(enabled.providers.iter().cloned())
        .collect()
}

/// The port of the kubelet's probes (`--health-probe-bind-address`).
pub(crate) const HEALTH_PORT: u16 = 8081;
/// The port of secure metrics (HTTPS, `--metrics-secure=true`).
pub(crate) const METRICS_PORT: u16 = 8443;
/// The ClusterRole a scraper's ServiceAccount is bound to, to read secure metrics.
pub const METRICS_READER_ROLE: &str = "capi-lb-metrics-reader";

/// The manager objects: the Namespace and the Deployment.
pub fn manager_objects(enabled: &Enabled, providers_arg: &str) -> Vec<Value> {
    let mut args = vec![
        json!("run"),
        json!("--leader-elect=true"),
        // /metrics over HTTPS, only to a token allowed to get it (the metrics-reader role); the
        // kubelet's probes get a listener of their own.
        json!(format!("--metrics-bind-address=0.0.0.0:{METRICS_PORT}")),
        json!("--metrics-secure=true"),
        json!(format!("--health-probe-bind-address=0.0.0.0:{HEALTH_PORT}")),
        json!(format!("--providers={providers_arg}")),
    ];
    if !enabled.external_endpoints {
        args.push(json!("--external-endpoints=false"));
    }
    let field = |path: &str| json!({"valueFrom": {"fieldRef": {"fieldPath": path}}});
    let probe = |path: &str, delay: u32| json!({"httpGet": {"path": path, "port": "health"}, "initialDelaySeconds": delay, "periodSeconds": 10});
    vec![
        json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": NAMESPACE, "labels": labels()},
        }),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "capi-lb-controller-manager", "namespace": NAMESPACE, "labels": labels()},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels()},
                "template": {
                    "metadata": {"labels": labels()},
                    "spec": {
                        "serviceAccountName": SERVICE_ACCOUNT,
                        "terminationGracePeriodSeconds": 30,
                        "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                        "containers": [{
                            "name": "manager",
                            "image": image(),
                            "args": args,
                            "env": [
                                {"name": "POD_NAME", "valueFrom": field("metadata.name")["valueFrom"].clone()},
                                {"name": "POD_NAMESPACE", "valueFrom": field("metadata.namespace")["valueFrom"].clone()},
                                // The root filesystem is read-only; the Octavia provider writes CA
                                // bundles from Secrets to the temporary folder for the OpenStack client.
                                {"name": "TMPDIR", "value": "/tmp"},
                                {"name": "HOME", "value": "/tmp"},
                            ],
                            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                            "ports": [
                                {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
                                {"name": "health", "containerPort": HEALTH_PORT, "protocol": "TCP"},
                            ],
                            "livenessProbe": probe("/livez", 10),
                            "readinessProbe": probe("/readyz", 5),
                            "resources": {
                                "requests": {"cpu": "50m", "memory": "64Mi"},
                                "limits": {"memory": "256Mi"},
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": false,
                                "readOnlyRootFilesystem": true,
                                "runAsNonRoot": true,
                                "runAsUser": 65532,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }],
                        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}}],
                    },
                },
            },
        }),
    ]
}

fn kustomization(resources: &[&str], namespace: Option<&str>) -> String {
    let mut out =
        format!("{HEADER}apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n");
    if let Some(ns) = namespace {
        out.push_str(&format!("namespace: {ns}\n"));
    }
    out.push_str("resources:\n");
    for r in resources {
        out.push_str(&format!("- {r}\n"));
    }
    out
}

/// Every generated file: path relative to `config/`, and its content.
pub fn files() -> Result<Vec<(PathBuf, String)>, serde_saphyr::ser::Error> {
    let enabled = Enabled::shipped();
    let mut out = Vec::new();
    for crd in crate::install::crds::shipped() {
        out.push((
            PathBuf::from("crd/bases").join(crate::install::crds::file_name(&crd)),
            crate::install::crds::to_yaml(&crd)?,
        ));
    }
    out.push((
        PathBuf::from("crd/kustomization.yaml"),
        crate::install::crds::kustomization(),
    ));
    let rbac = rbac_objects(&enabled, parts_of(&enabled));
    out.push((PathBuf::from("rbac/rbac.yaml"), yaml(&rbac)?));
    out.push((
        PathBuf::from("rbac/tenant_roles.yaml"),
        yaml(&tenants::objects(&labels(), "true"))?,
    ));
    out.push((
        PathBuf::from("rbac/kustomization.yaml"),
        kustomization(&["rbac.yaml", "tenant_roles.yaml"], None),
    ));
    let manager = manager_objects(&enabled, &enabled.providers.join(","));
    out.push((PathBuf::from("manager/manager.yaml"), yaml(&manager)?));
    out.push((
        PathBuf::from("manager/kustomization.yaml"),
        kustomization(&["manager.yaml"], None),
    ));
    out.push((
        PathBuf::from("default/kustomization.yaml"),
        kustomization(&["../crd", "../rbac", "../manager"], Some(NAMESPACE)),
    ));

    // monitoring: the dashboard and the alerts, as files and as objects.
    out.push((
        PathBuf::from("monitoring/dashboard.json"),
        monitoring::dashboard_json(),
    ));
    out.push((
        PathBuf::from("monitoring/dashboard-configmap.yaml"),
        yaml(&[monitoring::dashboard_config_map()])?,
    ));
    out.push((
        PathBuf::from("monitoring/alerts.rules.yaml"),
        format!("{HEADER}{}", monitoring::rules_yaml()),
    ));
    out.push((
        PathBuf::from("monitoring/prometheus-rule.yaml"),
        format!("{HEADER}---\n{}", monitoring::prometheus_rule()),
    ));
    out.push((
        PathBuf::from("monitoring/kustomization.yaml"),
        kustomization(
            &["dashboard-configmap.yaml", "prometheus-rule.yaml"],
            Some(NAMESPACE),
        ),
    ));

    // clusterctl: one file of config/'s objects, the providers and the tenants' roles left to
    // clusterctl's variables.
    let mut components: Vec<Value> = crate::install::crds::shipped()
        .into_iter()
        .map(|c| serde_json::to_value(c).unwrap_or(Value::Null))
        .collect();
    let manager = manager_objects(&enabled, &providers_variable());
    components.extend(manager.iter().take(1).cloned());
    components.extend(rbac_objects(
        &enabled,
        vec![
            rbac::CONTROLLER_PART.to_string(),
            clusterctl::PROVIDERS_PLACEHOLDER.to_string(),
        ],
    ));
    components.extend(manager.into_iter().skip(1));
    components.extend(tenants::objects(&labels(), TENANT_ROLES_VARIABLE));
    out.extend(clusterctl::files(components)?);
    Ok(out)
}

/// Write every file under `dir` (e.g. `config`).
pub fn write(dir: &Path) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let mut written = Vec::new();
    for (path, content) in files()? {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, content)?;
        written.push(path.display().to_string());
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::install::clusterctl::CLUSTER_TEMPLATES;

    /// What clusterctl does to the components with no variable set: every `${NAME:=default}`
    /// becomes its default (other `${...}` are kept), read from the text (not the constant the generator used, so that a
    /// default differing from the binary's shows).
    fn clusterctl_defaults(text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let end = start + rest[start..].find('}').unwrap();
            match rest[start + 2..end].split_once(":=") {
                Some((_, default)) => out.push_str(default),
                // Not a clusterctl variable (a dashboard's own placeholder): kept.
                None => out.push_str(&rest[start..=end]),
            }
            rest = &rest[end + 1..];
        }
        out.push_str(rest);
        out
    }

    /// Every `templates/cluster-template-*.yaml` is in the clusterctl repository, as it is: a flavor
    /// added to `templates/` but not to [`CLUSTER_TEMPLATES`] would be missing for clusterctl.
    #[test]
    fn the_clusterctl_repository_has_every_template() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../templates");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("cluster-template-") && n.ends_with(".yaml"))
            .collect();
        on_disk.sort();
        let shipped: Vec<String> = CLUSTER_TEMPLATES
            .iter()
            .map(|(n, _)| n.to_string())
            .collect();
        assert_eq!(on_disk, shipped);
        for (name, text) in CLUSTER_TEMPLATES {
            assert_eq!(std::fs::read_to_string(dir.join(name)).unwrap(), *text);
        }
        let release = clusterctl_release_dir();
        assert_eq!(
            release,
            Path::new("clusterctl/infrastructure-capi-lb/v0.1.0")
        );
        let files = files().unwrap();
        for name in ["infrastructure-components.yaml", "metadata.yaml"]
            .into_iter()
            .chain(CLUSTER_TEMPLATES.iter().map(|(n, _)| *n))
        {
            assert!(
                files.iter().any(|(p, _)| *p == release.join(name)),
                "{name}"
            );
        }
    }

    #[test]
    fn the_deployment_is_hardened_and_probed() {
        let objects = manager_objects(&Enabled::shipped(), "kubedc");
        let deployment = &objects[1];
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["name"], "manager");
        let sc = &container["securityContext"];
        assert_eq!(sc["runAsNonRoot"], true);
        assert_eq!(sc["readOnlyRootFilesystem"], true);
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/livez");
        assert_eq!(container["livenessProbe"]["httpGet"]["port"], "health");
        let args = container["args"].as_array().unwrap();
        assert!(args.contains(&json!("--health-probe-bind-address=0.0.0.0:8081")));
        // /metrics on the pod network only with authentication and authorization.
        assert!(args.contains(&json!("--metrics-bind-address=0.0.0.0:8443")));
        assert!(args.contains(&json!("--metrics-secure=true")));
        assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
        assert!(container["resources"]["requests"]["memory"].is_string());
        assert!(
            container["args"]
                .as_array()
                .unwrap()
                .contains(&json!("--leader-elect=true"))
        );
    }

    #[test]
    fn clusterctl_components_carry_the_provider_label_and_one_namespace() {
        let files = files().unwrap();
        let (_, text) = files
            .iter()
            .find(|(p, _)| p.ends_with("infrastructure-components.yaml"))
            .unwrap();
        // What clusterctl does first: variables replaced by their defaults.
        let substituted = clusterctl_defaults(text);
        assert!(!substituted.contains("${"), "only one variable");
        let docs: Vec<Value> = serde_saphyr::from_multiple(&substituted).unwrap();
        assert!(
            docs.iter()
                .all(|d| d["metadata"]["labels"]["cluster.x-k8s.io/provider"] == PROVIDER_LABEL)
        );
        assert_eq!(docs.iter().filter(|d| d["kind"] == "Namespace").count(), 1);
        for d in &docs {
            for (key, value) in d["metadata"]["labels"].as_object().into_iter().flatten() {
                assert!(
                    value.is_string(),
                    "label {key} of {}: {value}",
                    d["metadata"]["name"]
                );
            }
        }
        assert_eq!(
            docs.iter()
                .filter(|d| d["metadata"]["labels"][tenants::AGGREGATE_TO_EDIT] == "true")
                .count(),
            1,
            "the tenants' edit role, aggregated by default"
        );
        assert!(text.contains(&format!("--providers={}", providers_variable())));
        assert!(text.contains(&format!("values: [controller, {}]", providers_variable())));
        // No wildcard anywhere in the RBAC.
        for d in docs
            .iter()
            .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
        {
            for rule in d["rules"].as_array().into_iter().flatten() {
                for field in ["verbs", "resources", "apiGroups", "nonResourceURLs"] {
                    assert!(
                        !rule[field]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|v| v == "*"),
                        "{d}"
                    );
                }
                assert!(
                    rule["verbs"].as_array().is_some_and(|v| !v.is_empty()),
                    "{d}"
                );
            }
        }
    }

    /// The shipped install never enables the in-memory provider: neither the Deployment's
    /// `--providers` nor the RBAC (no part role, not among the aggregated parts), in the kustomize
    /// files and the clusterctl components alike.
    #[test]
    fn no_shipped_manifest_enables_the_in_memory_provider() {
        let files = files().unwrap();
        let mut seen = 0;
        for (path, text) in &files {
            let file = path.display().to_string();
            if file.starts_with("crd/")
                || file.ends_with("kustomization.yaml")
                || file.ends_with("metadata.yaml")
            {
                continue;
            }
            seen += 1;
            let text = clusterctl_defaults(text);
            let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
            for doc in &docs {
                let name = doc["metadata"]["name"].as_str().unwrap_or_default();
                assert!(!name.contains("inmemory"), "{file}: {name}");
                for rule in doc["rules"].as_array().into_iter().flatten() {
                    assert!(
                        !rule["resources"].to_string().contains("inmemory"),
                        "{file}: {name} grants {rule}"
                    );
                }
                for selector in doc["aggregationRule"]["clusterRoleSelectors"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    let values = &selector["matchExpressions"][0]["values"];
                    assert_eq!(
                        values,
                        &json!(["controller", "kubedc", "octavia", "service", "dns", "zoned"]),
                        "{file}"
                    );
                }
                for container in doc["spec"]["template"]["spec"]["containers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    assert!(
                        container["args"]
                            .as_array()
                            .unwrap()
                            .contains(&json!("--providers=kubedc,octavia,service,dns,zoned")),
                        "{file}"
                    );
                }
            }
        }
        assert!(seen >= 3, "rbac, manager and clusterctl files: {seen}");
    }

    /// Every part the aggregated role selects has a role, and the parts together grant exactly
    /// what the enabled components need.
    #[test]
    fn the_parts_add_up_to_the_role() {
        let enabled = Enabled::shipped();
        let objects = rbac_objects(&enabled, parts_of(&enabled));
        let selected = parts_of(&enabled);
        let mut granted = std::collections::BTreeSet::new();
        for role in objects
            .iter()
            .filter(|o| o["metadata"]["labels"][rbac::PART_LABEL].is_string())
        {
            let part = role["metadata"]["labels"][rbac::PART_LABEL]
                .as_str()
                .unwrap();
            assert!(selected.iter().any(|s| s == part), "{part} is not selected");
            for rule in role["rules"].as_array().unwrap() {
                for verb in rule["verbs"].as_array().unwrap() {
                    granted.insert((
                        rule["apiGroups"][0].as_str().unwrap().to_string(),
                        rule["resources"][0].as_str().unwrap().to_string(),
                        verb.as_str().unwrap().to_string(),
                    ));
                }
            }
        }
        assert_eq!(granted, rbac::permissions(&enabled));
        let parts = objects
            .iter()
            .filter(|o| o["metadata"]["labels"][rbac::PART_LABEL].is_string())
            .count();
        assert_eq!(parts, selected.len());
    }
}
