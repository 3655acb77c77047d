//! The clusterctl cluster templates (`templates/cluster-template-<flavor>.yaml`) as the tests use
//! them: the files, the variables a user passes to `clusterctl generate cluster`, and the documents
//! after substitution ([`crate::substitute`]).
// Test support: panicking on a broken fixture is the right failure mode here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use crate::{repo, substitute};

/// The name the tests give the cluster (`${CLUSTER_NAME}`).
pub const CLUSTER_NAME: &str = "demo";
/// The Kubernetes version the tests ask for (`${KUBERNETES_VERSION}`).
pub const KUBERNETES_VERSION: &str = "v1.32.5";
/// `${CAPI_LB_KUBEDC_EIP}`: the pre-allocated EIp `kubevirt-kubedc` requires, no default.
pub const KUBEDC_EIP: &str = "demo-api";
/// `${CAPI_LB_KUBEDC_EIP_ADDRESS}`: its address, the first one the kube-dc simulator hands out in
/// the `cloud` network.
pub const KUBEDC_EIP_ADDRESS: &str = "100.65.0.1";
/// `${CAPI_LB_OCTAVIA_SUBNET_ID}`: required by `kamaji-octavia`, no default.
pub const OCTAVIA_SUBNET_ID: &str = "8c1b7a84-6b36-4d1b-9f3f-0d5e8a4f2b11";
/// `${CAPI_LB_OCTAVIA_FIP_NETWORK}`: required by `kamaji-octavia`, no default.
pub const OCTAVIA_FIP_NETWORK: &str = "5e8a4f2b-0d5e-4d1b-9f3f-8c1b7a846b36";

/// Every `templates/cluster-template-*.yaml`, sorted.
pub fn template_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo("templates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("cluster-template-")
        })
        .collect();
    files.sort();
    files
}

/// The file of `flavor`.
pub fn template_file(flavor: &str) -> PathBuf {
    repo(&format!("templates/cluster-template-{flavor}.yaml"))
}

/// What a user passes to `clusterctl generate cluster` for a cluster in `namespace`: clusterctl's
/// standard variables and the provider variables without a default; the rest keep their defaults.
pub fn template_values(namespace: &str) -> BTreeMap<&str, &str> {
    BTreeMap::from([
        ("CLUSTER_NAME", CLUSTER_NAME),
        ("NAMESPACE", namespace),
        ("KUBERNETES_VERSION", KUBERNETES_VERSION),
        ("CAPI_LB_OCTAVIA_SUBNET_ID", OCTAVIA_SUBNET_ID),
        ("CAPI_LB_OCTAVIA_FIP_NETWORK", OCTAVIA_FIP_NETWORK),
        ("CAPI_LB_KUBEDC_EIP", KUBEDC_EIP),
        ("CAPI_LB_KUBEDC_EIP_ADDRESS", KUBEDC_EIP_ADDRESS),
    ])
}

/// A rendered template: the documents and the variables seen (name, default).
#[derive(Clone, Debug)]
pub struct Rendered {
    /// The text after substitution.
    pub text: String,
    /// Every YAML document, in order.
    pub docs: Vec<Value>,
    /// Each `${VAR}` / `${VAR:=default}` seen.
    pub variables: Vec<(String, Option<String>)>,
}

/// The template `path` for a cluster in `namespace` ([`template_values`]); panics naming the file
/// when it does not parse.
pub fn render(path: &std::path::Path, namespace: &str) -> Rendered {
    let file = path.display();
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{file}: {e}"));
    let (text, variables) = substitute(&text, &template_values(namespace));
    let docs: Vec<Value> = serde_saphyr::from_multiple::<Value>(&text)
        .unwrap_or_else(|e| panic!("{file}: {e}"))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect();
    Rendered {
        text,
        docs,
        variables,
    }
}

impl Rendered {
    /// The document of `kind` (panics when there is not exactly one).
    pub fn one(&self, kind: &str) -> &Value {
        let found: Vec<&Value> = self.docs.iter().filter(|d| d["kind"] == kind).collect();
        assert_eq!(found.len(), 1, "one {kind} expected in:\n{}", self.text);
        found[0]
    }
}
