//! `clusterctl move` from the cluster under test ([`crate::k8s::cluster`], the source) to a second
//! management cluster (the target): the harness's second instance (`tests/k8s/harness.sh target
//! start`: etcd, kube-apiserver, kube-controller-manager and the Cluster API manager with its
//! webhooks, nothing else), started on first use, or another cluster named by
//! `CAPI_LB_E2E_TARGET_KUBECONFIG` (with `CAPI_LB_E2E_TARGET_CONTROLLER_KUBECONFIG` for capi-lb's
//! ServiceAccount there).
//!
//! Both clusters are management clusters as `clusterctl init` leaves them: the clusterctl inventory
//! holds the same providers (cluster-api, infrastructure-capi-lb), which `clusterctl move` checks
//! first, and the CRDs of the kinds to move carry the label `clusterctl.cluster.x-k8s.io`. A test
//! puts the kinds it uses into the target with [`prepare_target`] and cleans its namespace there
//! with [`TargetNs::finish`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use kube::Client;
use serde_json::json;

use crate::k8s::{
    apply_crd, apply_generated_rbac, capi, cluster, config_of, delete_namespace, harness,
    install_capi_crds, install_crds, let_capi_objects_go, parse_env, test_kind_crd,
};

/// The target cluster of `clusterctl move`.
#[derive(Clone, Debug)]
pub struct Target {
    /// Admin kubeconfig (`--to-kubeconfig`).
    pub kubeconfig: PathBuf,
    /// Kubeconfig of capi-lb's ServiceAccount there (bound to the ClusterRole of config/rbac), if
    /// known.
    pub controller_kubeconfig: Option<PathBuf>,
    /// Where the cluster came from, for messages.
    pub source: String,
}

fn resolve_target() -> Result<Target, String> {
    if let Some(kubeconfig) = std::env::var_os("CAPI_LB_E2E_TARGET_KUBECONFIG") {
        return Ok(Target {
            kubeconfig: kubeconfig.into(),
            controller_kubeconfig: std::env::var_os("CAPI_LB_E2E_TARGET_CONTROLLER_KUBECONFIG")
                .map(PathBuf::from),
            source: "CAPI_LB_E2E_TARGET_KUBECONFIG".into(),
        });
    }
    // The harness's target instance: already running, or installed (cached) and started now.
    let env = match harness(&["target", "env"]) {
        Ok(env) => env,
        Err(_) => {
            harness(&["install"])?;
            harness(&["target", "start"]).map_err(|e| {
                format!(
                    "{e}: the clusterctl move tests need a second apiserver with Cluster API; run \
                     `tests/k8s/harness.sh install && tests/k8s/harness.sh target start`, or point \
                     CAPI_LB_E2E_TARGET_KUBECONFIG at a disposable management cluster"
                )
            })?
        }
    };
    let env = parse_env(&env);
    let get = |key: &str| {
        env.get(key)
            .cloned()
            .ok_or_else(|| format!("tests/k8s/harness.sh target env printed no {key}"))
    };
    Ok(Target {
        kubeconfig: get("CAPI_LB_E2E_TARGET_KUBECONFIG")?.into(),
        controller_kubeconfig: Some(get("CAPI_LB_E2E_TARGET_CONTROLLER_KUBECONFIG")?.into()),
        source: "tests/k8s/harness.sh target".into(),
    })
}

/// The target cluster, resolved once per test process. Panics when there is none: these tests
/// never pass (or skip) without it.
pub fn target() -> &'static Target {
    static TARGET: OnceLock<Result<Target, String>> = OnceLock::new();
    match TARGET.get_or_init(resolve_target) {
        Ok(t) => t,
        Err(e) => panic!("{e}"),
    }
}

/// Hold the target's `default/kubernetes` endpoints, which the workload-endpoints tests write
/// (the target is their workload cluster), until the returned file is dropped: an exclusive lock
/// on a file beside the system's temporary files, so that such tests run one at a time, in this
/// process and in any other running them against the same target.
pub async fn lock_target_default_kubernetes() -> std::fs::File {
    let path = std::env::temp_dir().join("capi-lb-e2e-target-default-kubernetes.lock");
    tokio::task::spawn_blocking(move || {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        file.lock()
            .unwrap_or_else(|e| panic!("locking {}: {e}", path.display()));
        file
    })
    .await
    .unwrap()
}

/// A client with the target's admin kubeconfig.
pub async fn target_admin_client() -> Client {
    capi_lb::install_crypto_provider();
    let kubeconfig = &target().kubeconfig;
    Client::try_from(config_of(kubeconfig).await)
        .unwrap_or_else(|e| panic!("{}: {e}", kubeconfig.display()))
}

/// A client with capi-lb's ServiceAccount in the target (the real authorizer checks it there too).
pub async fn target_controller_client() -> Client {
    capi_lb::install_crypto_provider();
    let kubeconfig = target_controller_kubeconfig();
    Client::try_from(config_of(kubeconfig).await)
        .unwrap_or_else(|e| panic!("{}: {e}", kubeconfig.display()))
}

/// Wait until Cluster API has made Cluster `name` of `ns` ready for `clusterctl move`: its
/// infrastructure provisioned and its control plane initialized (the Machines' nodeRefs are the
/// caller's).
pub async fn wait_ready_to_move(client: &Client, ns: &str, name: &str) {
    let clusters = crate::k8s::dynamic_api(client, Some(ns), &crate::k8s::capi_cluster(name))
        .await
        .unwrap();
    crate::k8s::eventually(
        &format!("Cluster {name} provisioned and its control plane initialized"),
        || async {
            let c = clusters.get(name).await.ok()?;
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
}

/// The kubeconfig of capi-lb's ServiceAccount in the target; panics when unknown.
pub fn target_controller_kubeconfig() -> &'static Path {
    target().controller_kubeconfig.as_deref().unwrap_or_else(|| {
        panic!(
            "no controller kubeconfig for the target ({}): set CAPI_LB_E2E_TARGET_CONTROLLER_KUBECONFIG",
            target().source
        )
    })
}

/// Kind of the tests' own CRD that `clusterctl move` moves whatever owns its objects (the CRD
/// carries `clusterctl.cluster.x-k8s.io/move` besides `clusterctl.cluster.x-k8s.io`), in
/// [`crate::k8s::TEST_INFRA_GROUP`].
pub const TEST_MOVE_KIND: &str = "TestMoveConfig";

/// Install [`TEST_MOVE_KIND`]'s CRD in the cluster of `client` (source and target need it).
pub async fn install_test_move_kind(client: &Client) {
    apply_crd(
        client,
        &test_kind_crd(
            TEST_MOVE_KIND,
            json!({"clusterctl.cluster.x-k8s.io": "", "clusterctl.cluster.x-k8s.io/move": ""}),
        ),
    )
    .await;
}

/// Install in the target what the moved objects need besides Cluster API (the source has it from
/// [`crate::k8s::TestNs::new`] and [`install_capi_crds`]): capi-lb's CRDs and generated RBAC,
/// Cluster API's Machine and Cluster CRDs with the test infrastructure kinds, and
/// [`TEST_MOVE_KIND`].
pub async fn prepare_target(client: &Client) {
    install_crds(client).await;
    apply_generated_rbac(client).await;
    install_capi_crds(client).await;
    install_test_move_kind(client).await;
}

fn clusterctl() -> &'static Path {
    capi().clusterctl.as_deref().unwrap_or_else(|| {
        panic!(
            "no clusterctl for {}: set CAPI_LB_E2E_CLUSTERCTL to clusterctl of Cluster API {}",
            cluster().source,
            capi().version
        )
    })
}

/// `clusterctl move -n <namespace>` from the source (its admin kubeconfig) to the target: its
/// output (stdout, then stderr) on success, else the same with its exit status.
pub fn clusterctl_move(namespace: &str) -> Result<String, String> {
    run_clusterctl_move(namespace, false)
}

/// `clusterctl move --dry-run -n <namespace>`: what would move, without touching either cluster
/// (clusterctl skips the inventory and provisioning checks then).
pub fn clusterctl_move_dry_run(namespace: &str) -> Result<String, String> {
    run_clusterctl_move(namespace, true)
}

fn run_clusterctl_move(namespace: &str, dry_run: bool) -> Result<String, String> {
    let mut command = Command::new(clusterctl());
    command
        .arg("move")
        .arg("--kubeconfig")
        .arg(&cluster().kubeconfig)
        .arg("--to-kubeconfig")
        .arg(&target().kubeconfig)
        .args(["-n", namespace, "-v", "1"])
        // No look-up of the newest release on GitHub.
        .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true");
    if dry_run {
        command.arg("--dry-run");
    }
    let out = command
        .output()
        .map_err(|e| format!("{}: {e}", clusterctl().display()))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!(
            "clusterctl move -n {namespace} ({}):\n{text}",
            out.status
        ))
    }
}

/// A namespace of the target that a move creates: [`TargetNs::finish`] deletes the Clusters and
/// Machines there (removing Cluster API's finalizers, as [`crate::k8s::TestNs::finish`] does) and
/// the namespace; on a panic the namespace is deleted in the background (`Drop`).
pub struct TargetNs {
    /// Admin client of the target.
    pub client: Client,
    /// The namespace (the source's name).
    pub ns: String,
    finished: bool,
}

impl std::fmt::Debug for TargetNs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TargetNs").field("ns", &self.ns).finish()
    }
}

impl TargetNs {
    /// The target's namespace `ns` (created by `clusterctl move`, not here).
    pub async fn new(ns: &str) -> Self {
        Self {
            client: target_admin_client().await,
            ns: ns.to_string(),
            finished: false,
        }
    }

    /// Let the Cluster API objects go and delete the namespace.
    pub async fn finish(mut self) {
        let_capi_objects_go(&self.client, &self.ns).await;
        delete_namespace(&self.client, &self.ns).await;
        self.finished = true;
    }
}

impl Drop for TargetNs {
    fn drop(&mut self) {
        if !self.finished {
            // A failed test: delete the namespace without waiting (Cluster API's finalizers may keep
            // it terminating; `harness.sh target clean` starts afresh).
            let _ = Command::new(&cluster().kubectl)
                .arg("--kubeconfig")
                .arg(&target().kubeconfig)
                .args(["delete", "namespace", &self.ns, "--wait=false"])
                .output();
        }
    }
}
