//! The clusterctl provider repository under `config/clusterctl/`: the components (`config/`'s
//! objects in one file, with clusterctl's provider label, clusterctl's names for cluster-wide
//! objects and variables for what users pick: `CAPI_LB_PROVIDERS`, `CAPI_LB_TENANT_ROLES`), the
//! provider metadata and the cluster templates.

use std::path::PathBuf;

use capi_lb_providers::catalog;
use serde_json::{Value, json};

use crate::install::rbac;
use crate::install::{HEADER, NAMESPACE, yaml};

/// The clusterctl provider label value.
pub const PROVIDER_LABEL: &str = "infrastructure-capi-lb";

/// Stands for the enabled providers in the clusterctl components, where [`clusterctl_parts`]
/// replaces it with the clusterctl variable.
pub(crate) const PROVIDERS_PLACEHOLDER: &str = "__CAPI_LB_PROVIDERS__";
/// The clusterctl variable naming the providers (the Deployment's `--providers` and the parts
/// its role aggregates), defaulting to the shipped providers ([`catalog::DEFAULT_PROVIDERS`], the
/// binary's default and what `config/` and the chart run: one list for every install).
pub fn providers_variable() -> String {
    format!("${{CAPI_LB_PROVIDERS:={}}}", catalog::DEFAULT_PROVIDERS)
}

/// The clusterctl variable deciding whether Kubernetes' user-facing roles aggregate the tenants'
/// roles (the value of their aggregation labels).
pub const TENANT_ROLES_VARIABLE: &str = "${CAPI_LB_TENANT_ROLES:=true}";

/// The clusterctl components' YAML with the aggregation selector's placeholder replaced by the
/// providers variable, as a flow sequence (`values: [controller, ${CAPI_LB_PROVIDERS:=...}]`), so
/// that the role aggregates exactly the parts clusterctl's variable names.
fn clusterctl_parts(text: &str) -> Result<String, serde_saphyr::ser::Error> {
    use serde::ser::Error as _;
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::with_capacity(lines.len());
    let mut replaced = 0;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let next = |k: usize| lines.get(i + k).map(|l| l.trim());
        if line.trim_end().ends_with("values:")
            && next(1) == Some(&format!("- {}", rbac::CONTROLLER_PART))
            && next(2) == Some(&format!("- {PROVIDERS_PLACEHOLDER}"))
        {
            out.push(format!(
                "{} [{}, {}]",
                line.trim_end(),
                rbac::CONTROLLER_PART,
                providers_variable()
            ));
            replaced += 1;
            i += 3;
            continue;
        }
        out.push(line.to_string());
        i += 1;
    }
    if replaced != 1 {
        return Err(serde_saphyr::ser::Error::custom(format!(
            "the manager role's selector was replaced {replaced} times, not once"
        )));
    }
    Ok(out.join("\n") + "\n")
}

/// The clusterctl provider label on every object.
fn with_provider_label(mut object: Value) -> Value {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert("cluster.x-k8s.io/provider".into(), json!(PROVIDER_LABEL));
        }
    }
    object
}

/// The name clusterctl gives a cluster-wide object of the components `capi-lb-<rest>`:
/// `capi-lb-system-<rest>`. `clusterctl delete` removes a ClusterRole or ClusterRoleBinding only
/// when its name starts with the provider's namespace and a dash (its `providerComponents.Delete`;
/// found by `tests/tests/e2e/clusterctl.rs`, whose delete left them all behind), so the clusterctl
/// components name them that way; the kustomize install keeps the short names.
pub fn clusterctl_cluster_wide_name(name: &str) -> String {
    let rest = name.strip_prefix("capi-lb-").unwrap_or(name);
    format!("{NAMESPACE}-{rest}")
}

/// [`clusterctl_cluster_wide_name`] on a ClusterRole's or ClusterRoleBinding's name, and on every
/// reference to a ClusterRole (`roleRef`).
fn with_clusterctl_name(mut object: Value) -> Value {
    let kind = object["kind"].as_str().unwrap_or_default().to_string();
    if matches!(kind.as_str(), "ClusterRole" | "ClusterRoleBinding")
        && let Some(name) = object["metadata"]["name"].as_str()
    {
        object["metadata"]["name"] = json!(clusterctl_cluster_wide_name(name));
    }
    if object["roleRef"]["kind"] == "ClusterRole"
        && let Some(name) = object["roleRef"]["name"].as_str()
    {
        object["roleRef"]["name"] = json!(clusterctl_cluster_wide_name(name));
    }
    object
}

/// The cluster templates (`templates/`), one per flavor, copied into the clusterctl repository so
/// that `clusterctl generate cluster --infrastructure capi-lb --flavor <flavor>` finds them beside
/// the components of the same release.
pub(crate) const CLUSTER_TEMPLATES: &[(&str, &str)] = &[
    (
        "cluster-template-kamaji-kubedc.yaml",
        include_str!("../../../templates/cluster-template-kamaji-kubedc.yaml"),
    ),
    (
        "cluster-template-kamaji-octavia.yaml",
        include_str!("../../../templates/cluster-template-kamaji-octavia.yaml"),
    ),
    (
        "cluster-template-kubeadm-inmemory.yaml",
        include_str!("../../../templates/cluster-template-kubeadm-inmemory.yaml"),
    ),
    (
        "cluster-template-kubevirt-kubedc.yaml",
        include_str!("../../../templates/cluster-template-kubevirt-kubedc.yaml"),
    ),
];

/// The release's folder of the clusterctl provider repository under `config/`, in clusterctl's
/// local-repository layout `<provider label>/<version>/` (`clusterctl/infrastructure-capi-lb/v0.1.0/`):
/// a `file://` URL to its `infrastructure-components.yaml` in `clusterctl.yaml` is a repository.
pub fn clusterctl_release_dir() -> PathBuf {
    PathBuf::from("clusterctl")
        .join(PROVIDER_LABEL)
        .join(format!("v{}", env!("CARGO_PKG_VERSION")))
}

/// clusterctl's provider metadata: the release series of this version and its Cluster API contract.
fn clusterctl_metadata() -> String {
    let major = env!("CARGO_PKG_VERSION_MAJOR");
    let minor = env!("CARGO_PKG_VERSION_MINOR");
    format!(
        "{HEADER}apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- major: {major}\n  minor: {minor}\n  contract: v1beta2\n"
    )
}

/// The clusterctl files made of `components` (`config/`'s objects, the providers
/// [`PROVIDERS_PLACEHOLDER`] in the manager role's selector and [`providers_variable`] in the
/// Deployment, the tenants' roles labelled with [`TENANT_ROLES_VARIABLE`]): path relative to
/// `config/`, and content.
pub fn files(components: Vec<Value>) -> Result<Vec<(PathBuf, String)>, serde_saphyr::ser::Error> {
    let mut out = Vec::new();
    let components: Vec<Value> = components
        .into_iter()
        .map(with_provider_label)
        .map(with_clusterctl_name)
        .collect();
    let release = clusterctl_release_dir();
    out.push((
        release.join("infrastructure-components.yaml"),
        // A label's value is a string: quoted, or clusterctl's `true` would be YAML's boolean.
        clusterctl_parts(&yaml(&components)?)?.replace(
            &format!(": {TENANT_ROLES_VARIABLE}"),
            &format!(": \"{TENANT_ROLES_VARIABLE}\""),
        ),
    ));
    out.push((release.join("metadata.yaml"), clusterctl_metadata()));
    for (name, text) in CLUSTER_TEMPLATES {
        out.push((
            release.join(name),
            format!(
                "# Copied from templates/{name} by `capi-lb manifests`: edit that file.\n{text}"
            ),
        ));
    }
    Ok(out)
}
