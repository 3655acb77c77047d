//! What the benchmarks against a real cluster share: the cluster's and the controller's
//! credentials ([`Launch`]), installing capi-lb's CRDs and RBAC, server-side applies, and the
//! controller as a child process (`capi-lb run --providers inmemory` in one namespace) whose
//! metrics the benchmark scrapes.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::discovery::Scope;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::scrape::{self, Scrape};

/// The field manager of the benchmarks' own writes.
pub(crate) const MANAGER: &str = "capi-lb-bench";

/// The cluster, and how to run the controller against it.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The cluster (admin credentials: the benchmark installs CRDs and RBAC and creates objects).
    pub kubeconfig: PathBuf,
    /// The controller's credentials (default: `kubeconfig`). With them, capi-lb's generated RBAC
    /// is applied first, so the controller has exactly what it would have when installed.
    pub controller_kubeconfig: Option<PathBuf>,
    /// The controller binary (`capi-lb`).
    pub controller: PathBuf,
    /// Extra arguments of `capi-lb run` (e.g. `--concurrency 8`).
    pub controller_args: Vec<String>,
    /// Where the controller's log goes.
    pub controller_log: PathBuf,
    /// CRD files to apply first (e.g. Cluster API's Machine and Cluster CRDs), conversion webhooks
    /// removed.
    pub crds: Vec<PathBuf>,
    /// Keep the namespace and its objects (and stop the controller) instead of cleaning up.
    pub keep: bool,
}

/// Errors of a run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Setting up failed.
    #[error("{0}")]
    Setup(String),
    /// An API request failed.
    #[error("{0}: {1}")]
    Api(String, #[source] Box<kube::Error>),
    /// The controller process failed.
    #[error("controller: {0}")]
    Controller(String),
    /// Convergence did not happen in time.
    #[error(
        "not converged after {0:?}: {1} of {2} LoadBalancers Ready, {3} with every target active"
    )]
    Timeout(Duration, usize, usize, usize),
}

pub(crate) fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> BenchError {
    let what = what.into();
    move |e| BenchError::Api(what, Box::new(e))
}

pub(crate) async fn client_of(path: &PathBuf) -> Result<(Client, kube::Config), BenchError> {
    capi_lb::install_crypto_provider();
    let file = Kubeconfig::read_from(path)
        .map_err(|e| BenchError::Setup(format!("{}: {e}", path.display())))?;
    let config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .map_err(|e| BenchError::Setup(format!("{}: {e}", path.display())))?;
    let client = Client::try_from(config.clone())
        .map_err(|e| BenchError::Setup(format!("{}: {e}", path.display())))?;
    Ok((client, config))
}

/// Server-side apply one document of any kind (found by discovery).
pub(crate) async fn apply(client: &Client, doc: &Value) -> Result<(), BenchError> {
    let api_version = doc["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = doc["kind"].as_str().unwrap_or_default();
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    let what = format!("apply {kind} {name}");
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(api_err(&what))?;
    let api: Api<DynamicObject> = match doc["metadata"]["namespace"].as_str() {
        Some(ns) if caps.scope == Scope::Namespaced => {
            Api::namespaced_with(client.clone(), ns, &resource)
        }
        _ => Api::all_with(client.clone(), &resource),
    };
    api.patch(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(doc),
    )
    .await
    .map_err(api_err(what))?;
    Ok(())
}

pub(crate) async fn apply_crd(
    client: &Client,
    crd: &CustomResourceDefinition,
) -> Result<(), BenchError> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.name_any();
    crds.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(crd),
    )
    .await
    .map_err(api_err(format!("apply CRD {name}")))?;
    let established = |c: &CustomResourceDefinition| {
        c.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            })
    };
    for _ in 0..100 {
        if crds
            .get_opt(&name)
            .await
            .map_err(api_err(format!("get CRD {name}")))?
            .is_some_and(|c| established(&c))
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(BenchError::Setup(format!(
        "CRD {name} not established after 10 s"
    )))
}

/// capi-lb's CRDs, the given CRD files, and (for a separate controller identity) the RBAC of the
/// in-memory provider.
pub(crate) async fn install(client: &Client, options: &Launch) -> Result<(), BenchError> {
    install_for(client, options, &["inmemory"]).await
}

/// As [`install`], with the RBAC of `providers`.
pub(crate) async fn install_for(
    client: &Client,
    options: &Launch,
    providers: &[&str],
) -> Result<(), BenchError> {
    for crd in capi_lb_api::crds() {
        apply_crd(client, &crd).await?;
    }
    for path in &options.crds {
        let text = std::fs::read_to_string(path)
            .map_err(|e| BenchError::Setup(format!("{}: {e}", path.display())))?;
        let mut crd: CustomResourceDefinition = serde_saphyr::from_str(&text)
            .map_err(|e| BenchError::Setup(format!("{}: {e}", path.display())))?;
        crd.spec.conversion = None;
        crd.metadata.annotations = None;
        apply_crd(client, &crd).await?;
    }
    if options.controller_kubeconfig.is_some() {
        // The RBAC of what the benchmark's controller runs (its providers, the `-ext`
        // publisher), as an install that enables it would have: the shipped rbac.yaml has no
        // in-memory part, and a controller on a clean apiserver got 403 with it.
        use capi_lb::install::rbac::{CONTROLLER_PART, Enabled};
        let enabled = Enabled {
            providers: providers.iter().map(|p| p.to_string()).collect(),
            ..Enabled::all()
        };
        let mut parts = vec![CONTROLLER_PART.to_string()];
        parts.extend(providers.iter().map(|p| p.to_string()));
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": "capi-lb-system"}});
        apply(client, &namespace).await?;
        for doc in capi_lb::install::manifests::rbac_objects(&enabled, parts) {
            apply(client, &doc).await?;
        }
    }
    Ok(())
}

/// The controller as a child process with its metrics on loopback.
pub(crate) struct Controller {
    /// When the process was started.
    pub(crate) started: Instant,
    child: tokio::process::Child,
    metrics: SocketAddr,
}

impl Controller {
    pub(crate) async fn start(options: &Launch, ns: &str) -> Result<Self, BenchError> {
        Self::start_with(options, ns, &["inmemory"]).await
    }

    /// As [`Controller::start`], running `providers`.
    pub(crate) async fn start_with(
        options: &Launch,
        ns: &str,
        providers: &[&str],
    ) -> Result<Self, BenchError> {
        // A free port for the metrics (the controller binds it right after).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| BenchError::Controller(format!("no free port: {e}")))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&options.controller_log)
            .map_err(|e| {
                BenchError::Controller(format!("{}: {e}", options.controller_log.display()))
            })?;
        let log_err = log
            .try_clone()
            .map_err(|e| BenchError::Controller(e.to_string()))?;
        let kubeconfig = options
            .controller_kubeconfig
            .as_ref()
            .unwrap_or(&options.kubeconfig);
        let mut command = tokio::process::Command::new(&options.controller);
        command
            .arg("run")
            .args(["--providers", &providers.join(","), "--namespace", ns]);
        if providers.contains(&"inmemory") {
            // The cloud outlives the process, as a real one would: the warm restart finds it.
            command.arg("--inmemory-state").arg(state_file(ns));
        }
        let child = command
            .args(["--metrics-bind-address", &port.to_string()])
            .args(&options.controller_args)
            .env("KUBECONFIG", kubeconfig)
            .env_remove("CAPI_LB_NAMESPACE")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                BenchError::Controller(format!("starting {}: {e}", options.controller.display()))
            })?;
        let mut controller = Self {
            child,
            metrics: port,
            started: Instant::now(),
        };
        controller.wait_ready().await?;
        Ok(controller)
    }

    /// Until `/readyz` answers 200 (its LoadBalancer cache is synced).
    async fn wait_ready(&mut self) -> Result<(), BenchError> {
        for _ in 0..600 {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(BenchError::Controller(format!(
                    "exited ({status}) before it was ready (see its log)"
                )));
            }
            if let Ok((200, _)) = scrape::get(self.metrics, "/readyz").await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(BenchError::Controller(
            "not ready after 30 s (see its log)".into(),
        ))
    }

    pub(crate) async fn scrape(&self) -> Result<Scrape, BenchError> {
        scrape::metrics(self.metrics)
            .await
            .map_err(|e| BenchError::Controller(format!("scraping its metrics: {e}")))
    }

    /// SIGTERM (reconciles in flight finish), then wait for the exit.
    pub(crate) async fn stop(mut self) -> Result<(), BenchError> {
        if let Some(pid) = self.child.id() {
            let _ = tokio::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
        }
        match tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(BenchError::Controller(e.to_string())),
            Err(_) => {
                let _ = self.child.kill().await;
                Err(BenchError::Controller(
                    "did not stop within 30 s of SIGTERM".into(),
                ))
            }
        }
    }
}

/// Where the controller keeps the in-memory cloud of the benchmark in namespace `ns`.
pub(crate) fn state_file(ns: &str) -> PathBuf {
    std::env::temp_dir().join(format!("{ns}-cloud.json"))
}

/// Create a fresh namespace named `<prefix>-<hex of the time>`.
pub(crate) async fn fresh_namespace(client: &Client, prefix: &str) -> Result<String, BenchError> {
    let ns = format!(
        "{prefix}-{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() % 0xfffff)
            .unwrap_or_default()
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .map_err(api_err(format!("create namespace {ns}")))?;
    Ok(ns)
}
