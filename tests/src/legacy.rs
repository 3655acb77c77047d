//! An older management cluster whose Cluster API serves only the deprecated v1beta1 API: the
//! harness's third instance (`tests/k8s/harness.sh legacy start`: etcd, kube-apiserver,
//! kube-controller-manager and the Cluster API v1.8.4 CRDs, no Cluster API controller), started on
//! first use, or another cluster named by `CAPI_LB_E2E_LEGACY_KUBECONFIG` (with
//! `CAPI_LB_E2E_LEGACY_CONTROLLER_KUBECONFIG` for capi-lb's ServiceAccount there and
//! `CAPI_LB_E2E_LEGACY_KUBECTL`) whose Cluster API CRDs serve v1beta1 and not v1beta2.
//!
//! [`legacy_ns`] gives a test its namespace there, as [`crate::k8s::TestNs::new`] does on the cluster
//! under test (capi-lb's CRDs and generated RBAC installed, the controller run as its
//! ServiceAccount).

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::k8s::{Access, TestNs, harness, parse_env};

/// The legacy cluster.
#[derive(Clone, Debug)]
pub struct Legacy {
    /// Admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// Kubeconfig of capi-lb's ServiceAccount there (bound to the ClusterRole of config/rbac), if
    /// known.
    pub controller_kubeconfig: Option<PathBuf>,
    /// kubectl for it.
    pub kubectl: PathBuf,
    /// The Cluster API release whose CRDs it serves, if known.
    pub capi_version: Option<String>,
    /// Where the cluster came from, for messages.
    pub source: String,
}

impl Legacy {
    /// How to reach it.
    pub fn access(&self) -> Access<'_> {
        Access {
            kubeconfig: &self.kubeconfig,
            controller_kubeconfig: self.controller_kubeconfig.as_deref(),
            kubectl: &self.kubectl,
        }
    }
}

fn resolve_legacy() -> Result<Legacy, String> {
    if let Some(kubeconfig) = std::env::var_os("CAPI_LB_E2E_LEGACY_KUBECONFIG") {
        return Ok(Legacy {
            kubeconfig: kubeconfig.into(),
            controller_kubeconfig: std::env::var_os("CAPI_LB_E2E_LEGACY_CONTROLLER_KUBECONFIG")
                .map(PathBuf::from),
            kubectl: std::env::var_os("CAPI_LB_E2E_LEGACY_KUBECTL")
                .map(PathBuf::from)
                .unwrap_or_else(|| "kubectl".into()),
            capi_version: std::env::var("CAPI_LB_E2E_LEGACY_CAPI_VERSION").ok(),
            source: "CAPI_LB_E2E_LEGACY_KUBECONFIG".into(),
        });
    }
    // The harness's legacy instance: already running, or installed (cached) and started now.
    let env = match harness(&["legacy", "env"]) {
        Ok(env) => env,
        Err(_) => {
            harness(&["install"])?;
            harness(&["legacy", "start"]).map_err(|e| {
                format!(
                    "{e}: the v1beta1 tests need an apiserver whose Cluster API serves only v1beta1; \
                     run `tests/k8s/harness.sh install && tests/k8s/harness.sh legacy start`, or \
                     point CAPI_LB_E2E_LEGACY_KUBECONFIG at such a disposable cluster"
                )
            })?
        }
    };
    let env = parse_env(&env);
    let get = |key: &str| {
        env.get(key)
            .cloned()
            .ok_or_else(|| format!("tests/k8s/harness.sh legacy env printed no {key}"))
    };
    Ok(Legacy {
        kubeconfig: get("CAPI_LB_E2E_LEGACY_KUBECONFIG")?.into(),
        controller_kubeconfig: Some(get("CAPI_LB_E2E_LEGACY_CONTROLLER_KUBECONFIG")?.into()),
        kubectl: get("CAPI_LB_E2E_LEGACY_KUBECTL")?.into(),
        capi_version: Some(get("CAPI_LB_E2E_LEGACY_CAPI_VERSION")?),
        source: "tests/k8s/harness.sh legacy".into(),
    })
}

/// The legacy cluster, resolved once per test process. Panics when there is none: these tests never
/// pass (or skip) without it.
pub fn legacy() -> &'static Legacy {
    static LEGACY: OnceLock<Result<Legacy, String>> = OnceLock::new();
    match LEGACY.get_or_init(resolve_legacy) {
        Ok(l) => l,
        Err(e) => panic!("{e}"),
    }
}

/// A fresh namespace `<prefix>-<random>` of the legacy cluster with capi-lb's CRDs and generated
/// RBAC installed; [`TestNs::finish`] cleans it up.
pub async fn legacy_ns(prefix: &str) -> TestNs {
    TestNs::on(legacy().access(), prefix).await
}
