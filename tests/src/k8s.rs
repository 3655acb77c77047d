//! A real Kubernetes control plane for the end-to-end tests: the project's harness
//! (`tests/k8s/harness.sh`: etcd, kube-apiserver, kube-controller-manager and CoreDNS on 127.0.0.1),
//! started on first use, or another cluster named by `CAPI_LB_E2E_KUBECONFIG` (kind, k3d).
//!
//! Every test gets its own namespace ([`TestNs`]), so the suite runs in parallel and repeatedly on
//! one apiserver. The controller runs in the test process with the credentials of capi-lb's
//! ServiceAccount, bound only to the generated ClusterRole and leader-election Role; every request
//! the real authorizer refuses is recorded and fails the test ([`TestNs::finish`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use capi_lb::run::{RunOptions, run_with_client};
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::discovery::Scope;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

/// How long a test waits for something the controller or the cluster should do.
pub const TIMEOUT: Duration = Duration::from_secs(60);
/// Field manager of the tests' own writes.
pub const TEST_MANAGER: &str = "capi-lb-e2e";
/// Label on every test namespace (`kubectl delete ns -l capi-lb-e2e` clears leftovers).
pub const TEST_NAMESPACE_LABEL: &str = "capi-lb-e2e";

/// The cluster the end-to-end tests run against.
#[derive(Clone, Debug)]
pub struct Cluster {
    /// Admin kubeconfig: the tests' own set-up and assertions.
    pub kubeconfig: PathBuf,
    /// Kubeconfig of capi-lb's ServiceAccount; `None` on another cluster without
    /// `CAPI_LB_E2E_CONTROLLER_KUBECONFIG`, where a token is requested for the ServiceAccount.
    pub controller_kubeconfig: Option<PathBuf>,
    /// CoreDNS serving the cluster domain, reachable from the tests.
    pub dns: Option<SocketAddr>,
    /// kubectl for this cluster's version.
    pub kubectl: PathBuf,
    /// MetalLB's controller, serving one load-balancer class from one pool.
    pub metallb: Option<MetalLb>,
    /// ExternalDNS (`--source=crd`) writing a zone of an authoritative DNS server.
    pub external_dns: Option<ExternalDns>,
    /// The Cluster API core manager serving the cluster (its version), and clusterctl.
    pub capi: Option<Capi>,
    /// A data plane on this host (kube-proxy) and what the data-plane tests start API servers with.
    pub data_plane: Option<DataPlane>,
    /// Where the cluster came from, for messages.
    pub source: String,
}

/// The real Cluster API core manager of the cluster under test.
#[derive(Clone, Debug)]
pub struct Capi {
    /// Its release (`CAPI_LB_E2E_CAPI_VERSION`).
    pub version: String,
    /// clusterctl of the same release (`CAPI_LB_E2E_CLUSTERCTL`), if known.
    pub clusterctl: Option<PathBuf>,
}

impl Capi {
    fn from(version: Option<String>, clusterctl: Option<String>) -> Option<Self> {
        version.map(|version| Self {
            version,
            clusterctl: clusterctl.map(PathBuf::from),
        })
    }
}

/// The Cluster API manager of the cluster under test; panics when there is none (these tests never
/// skip).
pub fn capi() -> &'static Capi {
    cluster().capi.as_ref().unwrap_or_else(|| {
        panic!(
            "no Cluster API manager on {}: set CAPI_LB_E2E_CAPI_VERSION to the release of the Cluster API core manager (with its webhooks) running there",
            cluster().source
        )
    })
}

/// The cluster's data plane on this host: kube-proxy forwards its Services' cluster and ingress IPs,
/// and `range` is on `lo` for the API servers the data-plane tests start, with these binaries.
#[derive(Clone, Debug)]
pub struct DataPlane {
    /// Addresses on `lo` (`CAPI_LB_E2E_DATA_PLANE_RANGE`).
    pub range: ipnet::Ipv4Net,
    /// etcd (`CAPI_LB_E2E_ETCD_BINARY`).
    pub etcd: PathBuf,
    /// kube-apiserver (`CAPI_LB_E2E_KUBE_APISERVER`).
    pub kube_apiserver: PathBuf,
}

impl DataPlane {
    fn from(
        range: Option<String>,
        etcd: Option<String>,
        kube_apiserver: Option<String>,
    ) -> Result<Option<Self>, String> {
        match (range, etcd, kube_apiserver) {
            (Some(range), Some(etcd), Some(kube_apiserver)) => Ok(Some(Self {
                range: range
                    .parse()
                    .map_err(|e| format!("CAPI_LB_E2E_DATA_PLANE_RANGE={range}: {e}"))?,
                etcd: etcd.into(),
                kube_apiserver: kube_apiserver.into(),
            })),
            _ => Ok(None),
        }
    }
}

/// The data plane of the cluster under test; panics when there is none.
pub fn data_plane() -> &'static DataPlane {
    cluster().data_plane.as_ref().unwrap_or_else(|| {
        panic!(
            "no data plane on {}: set CAPI_LB_E2E_DATA_PLANE_RANGE, CAPI_LB_E2E_ETCD_BINARY and CAPI_LB_E2E_KUBE_APISERVER (kube-proxy must forward the cluster's Services on this host)",
            cluster().source
        )
    })
}

/// The MetalLB controller of the cluster under test.
#[derive(Clone, Debug)]
pub struct MetalLb {
    /// The `loadBalancerClass` it serves (`--lb-class`).
    pub class: String,
    /// The CIDR of its address pool.
    pub pool: ipnet::IpNet,
}

impl MetalLb {
    fn from(class: Option<String>, pool: Option<String>) -> Result<Option<Self>, String> {
        match (class, pool) {
            (Some(class), Some(pool)) => Ok(Some(Self {
                class,
                pool: pool
                    .parse()
                    .map_err(|e| format!("CAPI_LB_E2E_METALLB_POOL={pool}: {e}"))?,
            })),
            _ => Ok(None),
        }
    }
}

/// ExternalDNS of the cluster under test and the DNS server it writes to.
#[derive(Clone, Debug)]
pub struct ExternalDns {
    /// The zone it manages (its `--domain-filter`).
    pub zone: String,
    /// The authoritative server of the zone (BIND on the harness), reachable from the tests.
    pub server: SocketAddr,
    /// Its `--interval`: how long a change may take to reach the zone.
    pub interval: Duration,
}

impl ExternalDns {
    fn from(
        zone: Option<String>,
        server: Option<String>,
        interval: Option<String>,
    ) -> Result<Option<Self>, String> {
        let (Some(zone), Some(server)) = (zone, server) else {
            return Ok(None);
        };
        let interval = match interval {
            Some(i) => i
                .parse::<u64>()
                .map_err(|e| format!("CAPI_LB_E2E_EXTERNAL_DNS_INTERVAL={i}: {e} (seconds)"))?,
            None => 60,
        };
        Ok(Some(Self {
            zone,
            server: server
                .parse()
                .map_err(|e| format!("CAPI_LB_E2E_BIND={server}: {e} (want IP:port)"))?,
            interval: Duration::from_secs(interval),
        }))
    }
}

/// ExternalDNS of the cluster under test; panics when there is none (these tests never skip).
pub fn external_dns() -> &'static ExternalDns {
    cluster().external_dns.as_ref().unwrap_or_else(|| {
        panic!(
            "no ExternalDNS on {}: set CAPI_LB_E2E_DNS_ZONE and CAPI_LB_E2E_BIND to the zone an ExternalDNS (--source=crd) manages and its DNS server (IP:port), and CAPI_LB_E2E_EXTERNAL_DNS_INTERVAL to its --interval in seconds",
            cluster().source
        )
    })
}

/// The TSIG key file (BIND's `key` clause, as `tsig-keygen` writes it) that may update
/// [`external_dns`]'s zone: `CAPI_LB_E2E_BIND_TSIG_KEY`, else the harness's (`tsig.key` in its state
/// folder, beside the admin kubeconfig); panics when there is none (these tests never skip).
pub fn bind_tsig_key() -> PathBuf {
    if let Some(path) = std::env::var_os("CAPI_LB_E2E_BIND_TSIG_KEY") {
        return path.into();
    }
    let harness = cluster()
        .kubeconfig
        .parent()
        .map(|state| state.join("tsig.key"))
        .filter(|key| key.is_file());
    harness.unwrap_or_else(|| {
        panic!(
            "no TSIG key for the zone of {}: set CAPI_LB_E2E_BIND_TSIG_KEY to a key file that may update it",
            cluster().source
        )
    })
}

/// Send `commands` (`update add ...`, `update delete ...`) to [`external_dns`]'s DNS server with
/// `nsupdate`, signed with [`bind_tsig_key`]; panics with nsupdate's words when it fails.
pub fn nsupdate(commands: &str) {
    use std::io::Write;
    let dns = external_dns();
    let script = format!(
        "server {} {}\nzone {}\n{commands}\nsend\n",
        dns.server.ip(),
        dns.server.port(),
        dns.zone
    );
    let mut child = Command::new("nsupdate")
        .arg("-k")
        .arg(bind_tsig_key())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running nsupdate (Debian's bind9-dnsutils): {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "nsupdate failed ({}): {}{}\n{script}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// MetalLB of the cluster under test; panics when there is none (these tests never skip).
pub fn metallb() -> &'static MetalLb {
    cluster().metallb.as_ref().unwrap_or_else(|| {
        panic!(
            "no MetalLB on {}: set CAPI_LB_E2E_METALLB_CLASS and CAPI_LB_E2E_METALLB_POOL to the class and pool of a MetalLB controller serving it",
            cluster().source
        )
    })
}

pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn harness_script(action: &str) -> Result<String, String> {
    harness(&[action]).map_err(|e| {
        format!(
            "{e}: the end-to-end tests need a real apiserver; run `tests/k8s/harness.sh install && \
             tests/k8s/harness.sh start`, or point CAPI_LB_E2E_KUBECONFIG at a disposable cluster"
        )
    })
}

/// Run `tests/k8s/harness.sh ARGS...` (inheriting the environment: its CAPI_LB_K8S_* settings);
/// its stdout, or what failed.
pub(crate) fn harness(args: &[&str]) -> Result<String, String> {
    let what = format!("tests/k8s/harness.sh {}", args.join(" "));
    let out = Command::new(repo().join("tests/k8s/harness.sh"))
        .args(args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("running {what}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("{what} failed ({})", out.status))
    }
}

pub(crate) fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

fn resolve_cluster() -> Result<Cluster, String> {
    if let Some(kubeconfig) = std::env::var_os("CAPI_LB_E2E_KUBECONFIG") {
        return Ok(Cluster {
            kubeconfig: kubeconfig.into(),
            controller_kubeconfig: std::env::var_os("CAPI_LB_E2E_CONTROLLER_KUBECONFIG")
                .map(PathBuf::from),
            dns: std::env::var("CAPI_LB_E2E_DNS")
                .ok()
                .map(|d| {
                    d.parse()
                        .map_err(|e| format!("CAPI_LB_E2E_DNS={d}: {e} (want IP:port)"))
                })
                .transpose()?,
            kubectl: std::env::var_os("CAPI_LB_E2E_KUBECTL")
                .map(PathBuf::from)
                .unwrap_or_else(|| "kubectl".into()),
            metallb: MetalLb::from(
                std::env::var("CAPI_LB_E2E_METALLB_CLASS").ok(),
                std::env::var("CAPI_LB_E2E_METALLB_POOL").ok(),
            )?,
            external_dns: ExternalDns::from(
                std::env::var("CAPI_LB_E2E_DNS_ZONE").ok(),
                std::env::var("CAPI_LB_E2E_BIND").ok(),
                std::env::var("CAPI_LB_E2E_EXTERNAL_DNS_INTERVAL").ok(),
            )?,
            capi: Capi::from(
                std::env::var("CAPI_LB_E2E_CAPI_VERSION").ok(),
                std::env::var("CAPI_LB_E2E_CLUSTERCTL").ok(),
            ),
            data_plane: DataPlane::from(
                std::env::var("CAPI_LB_E2E_DATA_PLANE_RANGE").ok(),
                std::env::var("CAPI_LB_E2E_ETCD_BINARY").ok(),
                std::env::var("CAPI_LB_E2E_KUBE_APISERVER").ok(),
            )?,
            source: "CAPI_LB_E2E_KUBECONFIG".into(),
        });
    }
    // The harness: already running, or installed (cached) and started now.
    let env = match harness_script("env") {
        Ok(env) => env,
        Err(_) => {
            harness_script("install")?;
            harness_script("start")?
        }
    };
    let env = parse_env(&env);
    let get = |key: &str| {
        env.get(key)
            .cloned()
            .ok_or_else(|| format!("tests/k8s/harness.sh env printed no {key}"))
    };
    Ok(Cluster {
        kubeconfig: get("KUBECONFIG")?.into(),
        controller_kubeconfig: Some(get("CAPI_LB_E2E_CONTROLLER_KUBECONFIG")?.into()),
        dns: Some(
            get("CAPI_LB_E2E_DNS")?
                .parse()
                .map_err(|e| format!("CAPI_LB_E2E_DNS: {e}"))?,
        ),
        kubectl: get("CAPI_LB_E2E_KUBECTL")?.into(),
        metallb: MetalLb::from(
            Some(get("CAPI_LB_E2E_METALLB_CLASS")?),
            Some(get("CAPI_LB_E2E_METALLB_POOL")?),
        )?,
        external_dns: ExternalDns::from(
            Some(get("CAPI_LB_E2E_DNS_ZONE")?),
            Some(get("CAPI_LB_E2E_BIND")?),
            Some(get("CAPI_LB_E2E_EXTERNAL_DNS_INTERVAL")?),
        )?,
        capi: Capi::from(
            Some(get("CAPI_LB_E2E_CAPI_VERSION")?),
            Some(get("CAPI_LB_E2E_CLUSTERCTL")?),
        ),
        // Absent when the harness runs without kube-proxy (CAPI_LB_K8S_KUBE_PROXY=off).
        data_plane: DataPlane::from(
            env.get("CAPI_LB_E2E_DATA_PLANE_RANGE").cloned(),
            env.get("CAPI_LB_E2E_ETCD_BINARY").cloned(),
            env.get("CAPI_LB_E2E_KUBE_APISERVER").cloned(),
        )?,
        source: "tests/k8s/harness.sh".into(),
    })
}

/// The cluster, resolved once per test process. Panics when there is none: these tests never pass
/// (or skip) without a real apiserver.
pub fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
    match CLUSTER.get_or_init(resolve_cluster) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

pub(crate) async fn config_of(kubeconfig: &Path) -> kube::Config {
    let file = Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|e| panic!("{}: {e}", kubeconfig.display()));
    kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", kubeconfig.display()))
}

/// A client with the admin kubeconfig.
pub async fn admin_client() -> Client {
    capi_lb::install_crypto_provider();
    Client::try_from(config_of(&cluster().kubeconfig).await).unwrap()
}

/// The note of a Warning Event `reason` in `t`'s namespace, once there is one.
pub async fn warning_event(t: &TestNs, reason: &str) -> String {
    let events: Api<k8s_openapi::api::events::v1::Event> = t.api();
    eventually(&format!("a Warning Event {reason}"), || async {
        let list = events.list(&Default::default()).await.unwrap();
        list.items.into_iter().find_map(|e| {
            (e.reason.as_deref() == Some(reason) && e.type_.as_deref() == Some("Warning"))
                .then(|| e.note.unwrap_or_default())
        })
    })
    .await
}

/// A TCP listener on `at` (the same address again after a stop: `SO_REUSEADDR`) accepting and
/// dropping connections, as a stand-in for a server a test stops and starts; stopped by aborting
/// the task.
pub fn listen(at: SocketAddr) -> tokio::task::JoinHandle<()> {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_reuseaddr(true).unwrap();
    socket.bind(at).unwrap();
    let listener = socket.listen(16).unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
        }
    })
}

/// Run `kubectl` with the admin kubeconfig; returns stdout, panics with stderr on failure.
pub fn kubectl(args: &[&str], stdin: Option<&str>) -> String {
    let out = kubectl_output(args, stdin);
    assert!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `clusterctl generate yaml --from FILE` with `variables` in its environment (and no other
/// clusterctl configuration): the text clusterctl makes of provider components or a template, its
/// variables substituted by clusterctl itself. Errors are clusterctl's message.
pub fn clusterctl_generate_yaml(file: &Path, variables: &[(&str, &str)]) -> Result<String, String> {
    let clusterctl = capi()
        .clusterctl
        .as_deref()
        .expect("no clusterctl: set CAPI_LB_E2E_CLUSTERCTL (tests/k8s/harness.sh start does)");
    // An empty home of its own (no clusterctl.yaml of the machine's user takes part), removed
    // after.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let home = std::env::temp_dir().join(format!(
        "capi-lb-clusterctl-home-{}-{call}",
        std::process::id()
    ));
    std::fs::create_dir_all(&home).map_err(|e| e.to_string())?;
    let out = Command::new(clusterctl)
        .args(["generate", "yaml", "--from"])
        .arg(file)
        .env_clear()
        .env("HOME", &home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(variables.iter().copied())
        .output();
    let _ = std::fs::remove_dir_all(&home);
    let out = out.map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Run `kubectl` with the admin kubeconfig and return its whole output.
fn kubectl_output(args: &[&str], stdin: Option<&str>) -> std::process::Output {
    let c = cluster();
    kubectl_output_at(&c.kubectl, &c.kubeconfig, args, stdin)
}

/// `helm ARGS --kubeconfig KUBECONFIG` with a helm home of its own under `home` (the real helm of
/// `tests/tools.sh`, never the user's configuration): its stdout; panics when it fails.
pub async fn helm_on(kubeconfig: &Path, home: &Path, args: &[&str]) -> String {
    let helm =
        helm_command(kubeconfig, home).expect("helm is missing: run `tests/tools.sh install helm`");
    let out = tokio::process::Command::from(helm)
        .args(args)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "helm {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The tools' `helm` for the instance of `kubeconfig`, with helm home `home` (its cache, config and
/// data), never the environment's KUBECONFIG; `None` when helm is not installed.
fn helm_command(kubeconfig: &Path, home: &Path) -> Option<Command> {
    let path = Command::new(repo().join("tests/tools.sh"))
        .args(["path", "helm"])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let mut helm = Command::new(String::from_utf8_lossy(&path.stdout).trim());
    helm.arg("--kubeconfig")
        .arg(kubeconfig)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env_remove("KUBECONFIG");
    Some(helm)
}

/// A Helm release a test installed: uninstalled when dropped unless the test did it (a test that
/// fails midway leaves no release, and no cluster-scoped objects of the chart, behind).
pub struct HelmRelease {
    /// The release's name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    kubeconfig: PathBuf,
    home: PathBuf,
    done: bool,
}

impl HelmRelease {
    /// The release `name` in `namespace` of the instance of `kubeconfig`, with helm home `home`.
    pub fn new(name: &str, namespace: &str, kubeconfig: &Path, home: &Path) -> Self {
        Self {
            name: name.into(),
            namespace: namespace.into(),
            kubeconfig: kubeconfig.into(),
            home: home.into(),
            done: false,
        }
    }

    /// `helm uninstall` it now, as the test's step.
    pub async fn uninstall(mut self) {
        helm_on(
            &self.kubeconfig,
            &self.home,
            &["uninstall", &self.name, "--namespace", &self.namespace],
        )
        .await;
        self.done = true;
    }
}

impl Drop for HelmRelease {
    fn drop(&mut self) {
        if !self.done
            && let Some(mut helm) = helm_command(&self.kubeconfig, &self.home)
        {
            let _ = helm
                .args(["uninstall", &self.name, "--namespace", &self.namespace])
                .output();
        }
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

/// Run the harness's `kubectl` with another instance's `kubeconfig`: its whole output.
pub fn kubectl_output_with(
    kubeconfig: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> std::process::Output {
    kubectl_output_at(&cluster().kubectl, kubeconfig, args, stdin)
}

/// Run `kubectl` (the binary) with `kubeconfig` and return its whole output.
fn kubectl_output_at(
    kubectl: &Path,
    kubeconfig: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .current_dir(repo())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", kubectl.display()));
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

// --- waiting -------------------------------------------------------------------------------

/// Poll `check` every 100 ms until it returns `Some`, for at most [`TIMEOUT`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < TIMEOUT,
            "timed out after {TIMEOUT:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Wait, through a watch, until the object `name` satisfies `condition` (it gets `None` while the
/// object does not exist); returns the object (`None` if the condition held for its absence).
pub async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    condition: impl Fn(Option<&K>) -> bool,
) -> Option<K>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
{
    match tokio::time::timeout(
        TIMEOUT,
        kube::runtime::wait::await_condition(api.clone(), name, condition),
    )
    .await
    {
        Ok(Ok(object)) => object,
        Ok(Err(e)) => panic!("watching {name} for {what}: {e}"),
        Err(_) => panic!(
            "timed out after {TIMEOUT:?} waiting for {what}; {name} is now: {:?}",
            api.get_opt(name).await
        ),
    }
}

/// Wait until the object `name` is gone.
pub async fn wait_gone<K>(api: &Api<K>, name: &str)
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
{
    wait_for(api, name, &format!("{name} deleted"), |o| o.is_none()).await;
}

// --- installing --------------------------------------------------------------------------------

/// Server-side apply `crd` and wait until it is established.
pub async fn apply_crd(client: &Client, crd: &CustomResourceDefinition) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.name_any();
    crds.patch(
        &name,
        &PatchParams::apply(TEST_MANAGER).force(),
        &Patch::Apply(crd),
    )
    .await
    .unwrap_or_else(|e| panic!("CRD {name} refused: {e}"));
    wait_for(&crds, &name, &format!("CRD {name} established"), |c| {
        c.and_then(|c| c.status.as_ref()?.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            })
    })
    .await;
}

/// capi-lb's CRDs, generated by the code under test.
pub async fn install_crds(client: &Client) {
    for crd in capi_lb_api::crds() {
        apply_crd(client, &crd).await;
    }
}

/// kube-dc's EIp CRD (the real one, from `$KUBEDC_CRDS_DIR`), for the kube-dc provider and its
/// simulated controller.
pub async fn install_kube_dc_crds(client: &Client) {
    install_third_party_crds(
        client,
        "KUBEDC_CRDS_DIR",
        "kube-dc",
        &["kube-dc.com_eips.yaml"],
    )
    .await;
}

/// Third-party CRDs (unmodified upstream files) from `$env_var`, default `../shared/crds/<folder>`
/// next to the repository. Conversion webhooks are switched off (no webhook runs here).
pub async fn install_third_party_crds(
    client: &Client,
    env_var: &str,
    folder: &str,
    files: &[&str],
) {
    let dir = third_party_crds_dir(env_var, folder);
    for file in files {
        let path = dir.join(file);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (set {env_var})", path.display()));
        let mut crd: CustomResourceDefinition = serde_saphyr::from_str(&text).unwrap();
        crd.spec.conversion = None;
        crd.metadata.annotations = None;
        apply_crd(client, &crd).await;
    }
}

/// Where third-party CRDs are read from.
fn third_party_crds_dir(env_var: &str, folder: &str) -> PathBuf {
    std::env::var_os(env_var)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("../shared/crds").join(folder))
}

/// The Cluster API Machine and Cluster CRDs (`CAPI_CRDS_DIR`), and the test infrastructure kinds
/// the fixtures' Clusters and Machines refer to ([`install_test_infrastructure`]).
pub async fn install_capi_crds(client: &Client) {
    install_third_party_crds(
        client,
        "CAPI_CRDS_DIR",
        "cluster-api",
        &[
            "cluster.x-k8s.io_machines.yaml",
            "cluster.x-k8s.io_clusters.yaml",
        ],
    )
    .await;
    install_test_infrastructure(client).await;
}

/// API group of the tests' own Cluster API provider kinds (`TestCluster`, `TestMachine`,
/// `TestControlPlane`): no controller serves them; a test sets their status as a provider would.
pub const TEST_INFRA_GROUP: &str = "infrastructure.test.capi-lb.io";
/// Their version; their CRDs carry the contract label `cluster.x-k8s.io/v1beta2: v1alpha1`.
pub const TEST_INFRA_VERSION: &str = "v1alpha1";

/// The CRD of test infrastructure kind `kind`: namespaced, any spec and status (status subresource),
/// with Cluster API's contract label, so that Cluster API's controllers resolve a reference to it,
/// and clusterctl's label (as `clusterctl init` puts it on a provider's CRDs), so that `clusterctl
/// move` moves its objects with the Cluster or Machine that owns them.
pub fn test_infrastructure_crd(kind: &str) -> CustomResourceDefinition {
    test_kind_crd(
        kind,
        json!({"cluster.x-k8s.io/v1beta2": TEST_INFRA_VERSION, "clusterctl.cluster.x-k8s.io": ""}),
    )
}

/// A namespaced CRD of kind `kind` in [`TEST_INFRA_GROUP`] with `labels`, any spec and status.
pub fn test_kind_crd(kind: &str, labels: Value) -> CustomResourceDefinition {
    let plural = format!("{}s", kind.to_lowercase());
    let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{TEST_INFRA_GROUP}"), "labels": labels},
        "spec": {"group": TEST_INFRA_GROUP, "scope": "Namespaced",
                 "names": {"kind": kind, "listKind": format!("{kind}List"), "plural": plural,
                           "singular": kind.to_lowercase()},
                 "versions": [{"name": TEST_INFRA_VERSION, "served": true, "storage": true,
                               "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object",
                                   "properties": {"spec": open, "status": open}}}}]}}))
    .unwrap()
}

/// The test provider kinds (`TestCluster`, `TestMachine` and the control-plane kind
/// `TestControlPlane`, in [`TEST_INFRA_GROUP`]) and the
/// ClusterRole that lets Cluster API's manager use them (aggregated into its role by the label
/// `cluster.x-k8s.io/aggregate-to-manager`, as a provider outside `*.cluster.x-k8s.io` ships it).
pub async fn install_test_infrastructure(client: &Client) {
    for kind in ["TestCluster", "TestMachine", "TestControlPlane"] {
        apply_crd(client, &test_infrastructure_crd(kind)).await;
    }
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "capi-lb-e2e:test-infrastructure",
                     "labels": {"cluster.x-k8s.io/aggregate-to-manager": "true"}},
        "rules": [{"apiGroups": [TEST_INFRA_GROUP], "resources": ["*"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]});
    apply_value(client, TEST_MANAGER, None, &role, false)
        .await
        .unwrap_or_else(|e| panic!("the test infrastructure ClusterRole refused: {e}"));
}

/// The generated RBAC (ServiceAccount, ClusterRoles, Role, bindings), applied for real so that the
/// ServiceAccount the controller runs as has exactly what the code under test generates: the
/// shipped `rbac/rbac.yaml` (whose manager role aggregates the shipped parts), plus the in-memory
/// provider's part, which no shipped manifest has, bound by a binding of the tests' own (so that
/// an install of `config/default` by another test leaves it alone).
pub(crate) async fn apply_generated_rbac(client: &Client) {
    use capi_lb::install::{manifests, rbac};
    let files = manifests::files().unwrap();
    let (_, text) = files
        .iter()
        .find(|(p, _)| p.ends_with("rbac/rbac.yaml"))
        .expect("capi-lb manifests generate rbac/rbac.yaml");
    ensure_namespace(client, "capi-lb-system").await;
    let mut docs = serde_saphyr::from_multiple::<Value>(text).unwrap();
    for (part, rules) in rbac::parts(&rbac::Enabled::all()) {
        if capi_lb_providers::catalog::find(&part).is_some_and(|e| !e.shipped) {
            let mut role = manifests::part_role(&part, rules);
            let name = format!("capi-lb-e2e-{part}");
            role["metadata"]["name"] = json!(name);
            docs.push(role);
            docs.push(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": manifests::SERVICE_ACCOUNT,
                              "namespace": manifests::NAMESPACE}],
            }));
        }
    }
    for doc in &docs {
        apply_value(client, TEST_MANAGER, None, doc, false)
            .await
            .unwrap_or_else(|e| panic!("generated RBAC refused: {e}"));
    }
    // The apiserver's authorizer learns of a changed role a moment later (and an aggregated role
    // gets its rules from kube-controller-manager): wait until every rule of every part role is
    // in force for capi-lb's ServiceAccount, so that a controller started now is not refused what
    // the role grants.
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    for role in docs.iter().filter(|d| {
        d["kind"] == "ClusterRole" && d["metadata"]["labels"][rbac::PART_LABEL].is_string()
    }) {
        for rule in role["rules"].as_array().into_iter().flatten() {
            let (Some(groups), Some(resources), Some(verbs)) = (
                rule["apiGroups"].as_array(),
                rule["resources"].as_array(),
                rule["verbs"].as_array(),
            ) else {
                continue;
            };
            let (group, verb) = (&groups[0], &verbs[0]);
            let full = resources[0].as_str().unwrap_or_default();
            let (resource, subresource) = full.split_once('/').unwrap_or((full, ""));
            let review: SubjectAccessReview = serde_json::from_value(json!({
                "spec": {"user": "system:serviceaccount:capi-lb-system:capi-lb-manager",
                         "resourceAttributes": {"group": group, "resource": resource,
                                                "subresource": subresource, "verb": verb}}}))
            .unwrap();
            eventually(&format!("{verb} {resource} granted"), || async {
                let answer = reviews
                    .create(&PostParams::default(), &review)
                    .await
                    .unwrap();
                answer.status.is_some_and(|s| s.allowed).then_some(())
            })
            .await;
        }
    }
}

async fn ensure_namespace(client: &Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .patch(name, &PatchParams::apply(TEST_MANAGER), &Patch::Apply(&ns))
        .await
        .unwrap();
}

/// Server-side apply (forced, as field manager `manager`) one document of any kind (found through
/// discovery) into `namespace` (or the document's own), optionally as a dry run. Errors are the
/// apiserver's answer.
pub async fn apply_value(
    client: &Client,
    manager: &str,
    namespace: Option<&str>,
    doc: &Value,
    dry_run: bool,
) -> Result<DynamicObject, kube::Error> {
    let api = dynamic_api(client, namespace, doc).await?;
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    let mut params = PatchParams::apply(manager).force();
    if dry_run {
        params = params.dry_run();
    }
    api.patch(name, &params, &Patch::Apply(doc)).await
}

/// Create one document of any kind in `namespace`. Errors are the apiserver's answer.
async fn create_value(
    client: &Client,
    namespace: &str,
    doc: &Value,
) -> Result<DynamicObject, kube::Error> {
    let api = dynamic_api(client, Some(namespace), doc).await?;
    api.create(
        &PostParams::default(),
        &serde_json::from_value(doc.clone()).unwrap(),
    )
    .await
}

/// The API of `doc`'s kind, namespaced to `namespace` (else the document's namespace) when the kind
/// is namespaced.
pub async fn dynamic_api(
    client: &Client,
    namespace: Option<&str>,
    doc: &Value,
) -> Result<Api<DynamicObject>, kube::Error> {
    let api_version = doc["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, doc["kind"].as_str().unwrap_or_default());
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk).await?;
    let namespace = namespace.or(doc["metadata"]["namespace"].as_str());
    Ok(match namespace {
        Some(ns) if caps.scope == Scope::Namespaced => {
            Api::namespaced_with(client.clone(), ns, &resource)
        }
        _ => Api::all_with(client.clone(), &resource),
    })
}

// --- the controller's credentials --------------------------------------------------------------

/// Requests the apiserver refused (401/403): `METHOD path -> status`.
#[derive(Clone, Debug, Default)]
pub struct Refusals(Arc<Mutex<Vec<String>>>);

impl Refusals {
    /// What was refused so far.
    pub fn list(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl<S> tower::Layer<S> for Refusals {
    type Service = RecordRefusals<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RecordRefusals {
            inner,
            refusals: self.clone(),
        }
    }
}

/// A client service that records refused requests.
#[derive(Clone, Debug)]
pub struct RecordRefusals<S> {
    inner: S,
    refusals: Refusals,
}

impl<S, B> tower::Service<http::Request<kube::client::Body>> for RecordRefusals<S>
where
    S: tower::Service<http::Request<kube::client::Body>, Response = http::Response<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        let what = format!("{} {}", request.method(), request.uri());
        let refusals = self.refusals.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            let status = response.status();
            if status == http::StatusCode::FORBIDDEN || status == http::StatusCode::UNAUTHORIZED {
                refusals
                    .0
                    .lock()
                    .unwrap()
                    .push(format!("{what} -> {status}"));
            }
            Ok(response)
        })
    }
}

/// Every request sent, as `METHOD path?query`, in order: what the controller asked the apiserver
/// for, for tests that assert what it never reads or writes.
#[derive(Clone, Debug, Default)]
pub struct Requests(Arc<Mutex<Vec<String>>>);

impl Requests {
    /// What was sent so far.
    pub fn list(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl<S> tower::Layer<S> for Requests {
    type Service = RecordRequests<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RecordRequests {
            inner,
            requests: self.clone(),
        }
    }
}

/// A client service that records every request.
#[derive(Clone, Debug)]
pub struct RecordRequests<S> {
    inner: S,
    requests: Requests,
}

impl<S> tower::Service<http::Request<kube::client::Body>> for RecordRequests<S>
where
    S: tower::Service<http::Request<kube::client::Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        self.requests
            .0
            .lock()
            .unwrap()
            .push(format!("{} {}", request.method(), request.uri()));
        self.inner.call(request)
    }
}

/// How the tests reach one cluster: the cluster under test ([`cluster`]) or another instance of the
/// harness (`crate::legacy`).
#[derive(Clone, Copy, Debug)]
pub struct Access<'a> {
    /// Admin kubeconfig.
    pub kubeconfig: &'a Path,
    /// Kubeconfig of capi-lb's ServiceAccount there, if known (else a token is requested).
    pub controller_kubeconfig: Option<&'a Path>,
    /// kubectl for that cluster.
    pub kubectl: &'a Path,
}

impl Cluster {
    /// How to reach it.
    pub fn access(&self) -> Access<'_> {
        Access {
            kubeconfig: &self.kubeconfig,
            controller_kubeconfig: self.controller_kubeconfig.as_deref(),
            kubectl: &self.kubectl,
        }
    }
}

/// The configuration the controller runs with on the cluster of `access`: capi-lb's
/// ServiceAccount.
async fn controller_config(access: Access<'_>, admin: &Client) -> kube::Config {
    if let Some(path) = access.controller_kubeconfig {
        return config_of(path).await;
    }
    // Another cluster: a token for the ServiceAccount the generated RBAC binds.
    let token = service_account_token(admin, "capi-lb-system", "capi-lb-manager").await;
    config_with_token(access.kubeconfig, token).await
}

/// A token (TokenRequest API, valid for an hour) of ServiceAccount `namespace/account`, asked for
/// with `admin`.
pub async fn service_account_token(admin: &Client, namespace: &str, account: &str) -> String {
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(admin.clone(), namespace);
    let request: k8s_openapi::api::authentication::v1::TokenRequest =
        serde_json::from_value(json!({"spec": {"expirationSeconds": 3600}})).unwrap();
    accounts
        .create_token_request(account, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("a token of {namespace}/{account}: {e}"))
        .status
        .expect("a token")
        .token
}

/// The configuration of `kubeconfig`'s cluster that authenticates with `token` instead.
pub async fn config_with_token(kubeconfig: &Path, token: String) -> kube::Config {
    let mut config = config_of(kubeconfig).await;
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    config
}

// --- a test namespace --------------------------------------------------------------------------

/// One test's namespace on the cluster, with the CRDs and RBAC installed, and the controllers it
/// started. Call [`TestNs::finish`] at the end; on a panic the namespace is deleted in the
/// background (`Drop`).
pub struct TestNs {
    /// Admin client.
    pub client: Client,
    /// The namespace.
    pub ns: String,
    /// Requests refused to the controllers started here.
    pub refusals: Refusals,
    /// Every request of the controllers started here.
    pub requests: Requests,
    /// kubectl and the admin kubeconfig, to delete the namespace of a failed test.
    kubectl: (PathBuf, PathBuf),
    controller_config: kube::Config,
    controllers: Vec<ControllerHandle>,
    finished: bool,
    /// Dropped with the namespace: ends the test's [`watchdog`].
    _watchdog: std::sync::mpsc::Sender<()>,
}

/// A test that runs longer than this (`CAPI_LB_E2E_TEST_LIMIT_SECONDS` changes it) ends the test
/// binary, naming itself: the longest e2e tests take a few minutes, and a hang then fails at once
/// instead of running CI out of its time with nothing said (a CI run of 2026-11-27 was killed in
/// the last e2e test).
pub const TEST_LIMIT: Duration = Duration::from_secs(15 * 60);

/// A thread that ends the process when the returned sender is not dropped within [`TEST_LIMIT`].
fn watchdog(ns: &str) -> std::sync::mpsc::Sender<()> {
    use std::io::Write;
    let limit = std::env::var("CAPI_LB_E2E_TEST_LIMIT_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(TEST_LIMIT, Duration::from_secs);
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    // libtest runs each test on a thread named after it.
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let ns = ns.to_string();
    std::thread::spawn(move || {
        if rx.recv_timeout(limit) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            // Not `eprintln!`: libtest captures that for the test, and the capture is never shown.
            let _ = writeln!(
                std::io::stderr(),
                "\n{test} (namespace {ns}) ran for over {limit:?}: it hangs; ending the test binary"
            );
            std::process::exit(101);
        }
    });
    tx
}

impl std::fmt::Debug for TestNs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestNs").field("ns", &self.ns).finish()
    }
}

/// A controller running in the test process.
#[derive(Debug)]
pub struct ControllerHandle {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), capi_lb::run::RunError>>,
}

impl ControllerHandle {
    /// Stop gracefully and wait (at most 30 s).
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match tokio::time::timeout(Duration::from_secs(30), &mut self.task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => panic!("the controller failed: {e}"),
            Ok(Err(e)) if e.is_cancelled() => {}
            Ok(Err(e)) => panic!("the controller panicked: {e}"),
            Err(_) => {
                self.task.abort();
                panic!("the controller did not stop within 30 s");
            }
        }
    }

    /// Kill without a graceful stop (as a crash would).
    pub fn abort(self) {
        self.task.abort();
    }
}

impl TestNs {
    /// A fresh namespace `<prefix>-<random>` of the cluster under test with capi-lb's CRDs and
    /// generated RBAC installed.
    pub async fn new(prefix: &str) -> Self {
        Self::on(cluster().access(), prefix).await
    }

    /// [`TestNs::new`] on the cluster of `access`.
    pub async fn on(access: Access<'_>, prefix: &str) -> Self {
        let ns = unique_name(prefix);
        let watchdog = watchdog(&ns);
        capi_lb::install_crypto_provider();
        // capi-lb's warnings (a refused Event, a failed write: with the apiserver's message) in the
        // output of a failed test.
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_max_level(tracing_subscriber::filter::LevelFilter::WARN)
            .try_init();
        let client = Client::try_from(config_of(access.kubeconfig).await).unwrap();
        install_crds(&client).await;
        apply_generated_rbac(&client).await;
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {
            "name": ns, "labels": {TEST_NAMESPACE_LABEL: "true"}}}))
        .unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap();
        let controller_config = controller_config(access, &client).await;
        Self {
            client,
            ns,
            refusals: Refusals::default(),
            requests: Requests::default(),
            kubectl: (access.kubectl.into(), access.kubeconfig.into()),
            controller_config,
            controllers: Vec::new(),
            finished: false,
            _watchdog: watchdog,
        }
    }

    /// Options for a controller watching this namespace: the given providers, a resync of one hour
    /// (so that a missing watch trigger cannot hide behind a resync) and no metrics server.
    pub fn options(&self, providers: &[&str]) -> RunOptions {
        let mut options = RunOptions::new(providers.iter().map(|p| p.to_string()).collect());
        options.namespace = Some(self.ns.clone());
        options.resync = Duration::from_secs(3600);
        options.concurrency = 2;
        options
    }

    /// A client with capi-lb's ServiceAccount credentials whose requests and refusals are recorded.
    pub fn controller_client(&self) -> Client {
        kube::client::ClientBuilder::try_from(self.controller_config.clone())
            .unwrap()
            .with_layer(&self.refusals)
            .with_layer(&self.requests)
            .build()
    }

    /// Start the controller with `options` as capi-lb's ServiceAccount; it is stopped by
    /// [`TestNs::finish`] unless stopped before.
    pub fn start(&mut self, options: RunOptions) {
        let handle = self.spawn(options);
        self.controllers.push(handle);
    }

    /// Start the controller as `capi-lb run` does: its client counts every request into its
    /// metrics (`capi_lb_kube_requests_total`), which [`Self::spawn`]'s does not. Stopped by
    /// [`TestNs::finish`].
    pub fn start_instrumented(&mut self, options: RunOptions) {
        let metrics = std::sync::Arc::new(capi_lb::telemetry::Metrics::new());
        let client = kube::client::ClientBuilder::try_from(self.controller_config.clone())
            .unwrap()
            .with_layer(&self.refusals)
            .with_layer(&self.requests)
            .with_layer(&metrics.kube_layer())
            .build();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            capi_lb::run::run_instrumented(client, metrics, options, async move {
                let _ = stopped.await;
            })
            .await
        });
        self.controllers.push(ControllerHandle {
            stop: Some(stop),
            task,
        });
    }

    /// The API server's URL capi-lb's client uses.
    pub fn server(&self) -> String {
        self.controller_config.cluster_url.to_string()
    }

    /// Start the controller with the client `capi-lb run` builds (its timeouts,
    /// `capi_lb::run::client::bounded`) as capi-lb's ServiceAccount, reaching the API server at
    /// `server` (a proxy in front of it, say); stopped by [`TestNs::finish`].
    pub fn start_via(&mut self, options: RunOptions, server: &str) {
        let mut config = self.controller_config.clone();
        config.cluster_url = server.parse().unwrap();
        let client = kube::client::ClientBuilder::try_from(capi_lb::run::client::bounded(config))
            .unwrap()
            .with_layer(&self.refusals)
            .build();
        let handle = spawn_controller(client, options);
        self.controllers.push(handle);
    }

    /// Start the controller as [`Self::start`] does, each of its providers wrapped by `wrap`
    /// (`capi_lb::run::run_wrapped`; e.g. [`crate::hostile`]'s); stopped by [`TestNs::finish`].
    pub fn start_wrapped(&mut self, options: RunOptions, wrap: capi_lb::run::ProviderWrap) {
        let client = self.controller_client();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let metrics = std::sync::Arc::new(capi_lb::telemetry::Metrics::new());
            capi_lb::run::run_wrapped(client, metrics, options, Some(wrap), async move {
                let _ = stopped.await;
            })
            .await
        });
        self.controllers.push(ControllerHandle {
            stop: Some(stop),
            task,
        });
    }

    /// Start the controller and hand its handle to the test (to stop or kill it).
    pub fn spawn(&self, options: RunOptions) -> ControllerHandle {
        spawn_controller(self.controller_client(), options)
    }

    /// Typed API of this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Create a document of any kind in this namespace; panics with the apiserver's refusal.
    pub async fn create(&self, doc: Value) -> DynamicObject {
        create_value(&self.client, &self.ns, &doc)
            .await
            .unwrap_or_else(|e| panic!("creating {} {}: {e}", doc["kind"], doc["metadata"]["name"]))
    }

    /// Delete the LoadBalancers left (while the controllers run, so they release their targets and
    /// infrastructure) and wait until they are gone, let every Machine go (Cluster API's
    /// finalizer), stop the controllers, check that no request was refused, and delete the
    /// namespace.
    pub async fn finish(mut self) {
        let lbs = self.api::<capi_lb_api::LoadBalancer>();
        let left = lbs.list(&Default::default()).await.unwrap().items;
        for lb in &left {
            let _ = lbs.delete(&lb.name_any(), &DeleteParams::default()).await;
        }
        if !self.controllers.is_empty() {
            for lb in &left {
                wait_gone(&lbs, &lb.name_any()).await;
            }
        }
        // Without Cluster API's CRDs there are no Machines to let go.
        if let Some(machines) = capi_api(&self.client, &self.ns, "Machine").await
            && let Ok(list) = machines.list(&Default::default()).await
        {
            for m in list.items.iter().filter(|m| !m.finalizers().is_empty()) {
                release_machine(&self, &m.name_any()).await;
            }
        }
        // The providers' objects (and what the LoadBalancers left) go while the controllers still
        // run their clean-up; whatever still carries one of capi-lb's finalizers after that loses
        // it (`capi-lb uninstall --namespace`), so that no namespace stays terminating: 90 such
        // namespaces, left by tests and benchmarks, kept the namespace controller deleting in a
        // loop and the shared apiserver at half a core (2026-11-29).
        if !self.controllers.is_empty() {
            delete_capi_lb_objects(&self.client, &self.ns, Duration::from_secs(30)).await;
        }
        for handle in std::mem::take(&mut self.controllers) {
            handle.stop().await;
        }
        uninstall_from(&self.client, &self.ns).await;
        self.let_capi_objects_go().await;
        let refused = self.refusals.list();
        self.finished = true;
        delete_namespace(&self.client, &self.ns).await;
        assert!(
            refused.is_empty(),
            "the apiserver refused requests of capi-lb's ServiceAccount (RBAC too narrow?):\n{}",
            refused.join("\n")
        );
    }
}

impl TestNs {
    /// Delete the Clusters and Machines left and remove their finalizers. A real Cluster API
    /// manager cannot finish deleting a Cluster or Machine whose infrastructure, bootstrap or
    /// control-plane kind has no CRD here (the templates' and examples' kinds): it would keep the
    /// namespace terminating for ever.
    async fn let_capi_objects_go(&self) {
        let_capi_objects_go(&self.client, &self.ns).await;
    }
}

/// Delete every object of capi-lb's kinds in `ns` and wait (at most `patience`) until they are gone:
/// a running controller runs their clean-up (providers' resources, finalizers).
pub(crate) async fn delete_capi_lb_objects(client: &Client, ns: &str, patience: Duration) {
    let apis: Vec<Api<DynamicObject>> = capi_lb_api::kinds::all()
        .iter()
        .map(|k| Api::namespaced_with(client.clone(), ns, &(k.resource)()))
        .collect();
    for api in &apis {
        let _ = api
            .delete_collection(&DeleteParams::background(), &Default::default())
            .await;
    }
    let deadline = std::time::Instant::now() + patience;
    for api in &apis {
        while std::time::Instant::now() < deadline
            && api
                .list_metadata(&Default::default())
                .await
                .is_ok_and(|l| !l.items.is_empty())
        {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Let go of what capi-lb's controller left in `ns` once it no longer runs, as an operator would
/// (`capi-lb uninstall --namespace`): its finalizers, its Machines' hooks and annotations.
/// Nothing else would ever remove them, and a namespace holding them stays terminating.
pub(crate) async fn uninstall_from(client: &Client, ns: &str) {
    let options = capi_lb::install::uninstall::Options {
        dry_run: false,
        force: true,
        lease: (ns.to_string(), "capi-lb-leader".into()),
        namespace: Some(ns.to_string()),
    };
    // Its patches are made at the resourceVersion it read: an object the garbage collector marked
    // meanwhile (a LoadBalancer's infrastructure object, once the LoadBalancer went) is a conflict,
    // which the next run picks up, as for an operator.
    for attempt in 1..=3 {
        match capi_lb::install::uninstall::uninstall(client.clone(), &options).await {
            Ok(_) => return,
            Err(e) if attempt == 3 => {
                eprintln!("capi-lb uninstall --namespace {ns} at the end of the test: {e}");
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// Delete the Clusters and Machines left in `ns` and remove their finalizers (see
/// [`TestNs::finish`]).
pub(crate) async fn let_capi_objects_go(client: &Client, ns: &str) {
    let finalizers = json!({"metadata": {"finalizers": null}});
    // MachineDeployments and MachineSets too (the templates' worker pools): their finalizers
    // wait for infrastructure kinds no controller serves here.
    for kind in ["MachineDeployment", "MachineSet", "Machine", "Cluster"] {
        let Some(api) = capi_api(client, ns, kind).await else {
            continue;
        };
        let Ok(list) = api.list(&Default::default()).await else {
            continue;
        };
        for name in list.items.iter().map(|o| o.name_any()) {
            let delete = api.delete(&name, &DeleteParams::background()).await.err();
            let patch = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&finalizers))
                .await
                .err();
            for e in [delete, patch].into_iter().flatten() {
                assert!(
                    matches!(&e, kube::Error::Api(s) if s.code == 404),
                    "letting {kind} {name} go: {e}"
                );
            }
        }
    }
}

/// The API of Cluster API kind `kind` (`Machine`, `Cluster`) in `ns`, at the version the cluster
/// prefers (v1beta2, or v1beta1 where Cluster API serves only that); `None` when it is not served.
pub async fn capi_api(client: &Client, ns: &str, kind: &str) -> Option<Api<DynamicObject>> {
    let group = kube::discovery::group(client, capi_lb_api::constants::CAPI_GROUP)
        .await
        .ok()?;
    let (resource, _) = group.recommended_kind(kind)?;
    Some(Api::namespaced_with(client.clone(), ns, &resource))
}

impl Drop for TestNs {
    fn drop(&mut self) {
        if !self.finished {
            let refused = self.refusals.list();
            if !refused.is_empty() {
                eprintln!(
                    "the apiserver refused requests of capi-lb's ServiceAccount in {}:\n{}",
                    self.ns,
                    refused.join("\n")
                );
            }
            // A failed test: delete the namespace without waiting (objects with capi-lb's
            // finalizers may keep it terminating; `harness.sh clean` starts afresh).
            let (kubectl, kubeconfig) = &self.kubectl;
            let _ = kubectl_output_at(
                kubectl,
                kubeconfig,
                &["delete", "namespace", &self.ns, "--wait=false"],
                None,
            );
        }
    }
}

pub(crate) async fn delete_namespace(client: &Client, ns: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(ns, &DeleteParams::background())
        .await;
}

/// `<prefix>-<random suffix>`, a valid DNS label.
pub fn unique_name(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{prefix}-{:x}{:x}",
        (nanos % 0xffff_ffff) as u32 ^ std::process::id(),
        n
    )
}

// --- DNS ---------------------------------------------------------------------------------------

/// An answer of the cluster DNS server.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DnsAnswer {
    /// An A or AAAA record.
    Ip(std::net::IpAddr),
    /// A CNAME record (target without the final dot).
    Cname(String),
}

/// Ask the cluster's DNS server (CoreDNS) for `name`'s records of `record_type` ("A", "AAAA",
/// "CNAME"), over UDP. Returns the response code and the answers, sorted.
pub async fn dns_query(name: &str, record_type: &str) -> (String, Vec<DnsAnswer>) {
    let server = cluster().dns.unwrap_or_else(|| {
        panic!(
            "no DNS server for {}: set CAPI_LB_E2E_DNS to the cluster's DNS (IP:port reachable from here)",
            cluster().source
        )
    });
    dns_query_at(server, name, record_type).await
}

/// Ask the DNS server at `server` for `name`'s records of `record_type`, over UDP: the response
/// code and the answers, sorted.
pub async fn dns_query_at(
    server: SocketAddr,
    name: &str,
    record_type: &str,
) -> (String, Vec<DnsAnswer>) {
    use hickory_proto::op::{Message, Query};
    use hickory_proto::rr::{Name, RData, RecordType};
    use std::str::FromStr;

    let rtype = RecordType::from_str(record_type).unwrap();
    let mut query = Message::query();
    query.metadata.id = rand_id();
    query.metadata.recursion_desired = true;
    query.add_query(Query::query(Name::from_str(name).unwrap(), rtype));
    let bytes = query.to_vec().unwrap();
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut buffer = vec![0u8; 4096];
    for _attempt in 0..5 {
        socket.send_to(&bytes, server).await.unwrap();
        let Ok(Ok((len, _))) =
            tokio::time::timeout(Duration::from_secs(1), socket.recv_from(&mut buffer)).await
        else {
            continue;
        };
        let answer = Message::from_vec(&buffer[..len]).unwrap();
        if answer.metadata.id != query.metadata.id {
            continue;
        }
        let mut records: Vec<DnsAnswer> = answer
            .answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::A(a) => Some(DnsAnswer::Ip(a.0.into())),
                RData::AAAA(a) => Some(DnsAnswer::Ip(a.0.into())),
                RData::CNAME(c) => Some(DnsAnswer::Cname(
                    c.0.to_string().trim_end_matches('.').to_string(),
                )),
                _ => None,
            })
            .collect();
        records.sort();
        return (answer.metadata.response_code.to_string(), records);
    }
    panic!("no answer from the DNS server at {server} for {name} {record_type}");
}

fn rand_id() -> u16 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    (nanos ^ std::process::id()) as u16
}

// --- fixtures ----------------------------------------------------------------------------------

/// An InMemoryLoadBalancer named `name` with `spec`.
pub fn in_memory(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "InMemoryLoadBalancer",
           "metadata": {"name": name}, "spec": spec})
}

/// A LoadBalancer named `name` on the InMemoryLoadBalancer `infra`, with the rest of `spec`.
pub fn load_balancer(name: &str, infra: &str, spec: Value) -> Value {
    let mut spec = spec;
    spec["infrastructureRef"] = json!({"apiGroup": "infrastructure.cluster.x-k8s.io",
                                       "kind": "InMemoryLoadBalancer", "name": infra});
    json!({"apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer",
           "metadata": {"name": name}, "spec": spec})
}

/// A Cluster API v1beta2 Cluster on the test infrastructure kind `TestCluster` of the same name
/// (which need not exist). Cluster API's validating webhook refuses a Cluster with none of
/// `infrastructureRef`, `controlPlaneRef` and `topology`.
pub fn capi_cluster(name: &str) -> Value {
    json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
           "metadata": {"name": name},
           "spec": {"paused": false,
                    "infrastructureRef": {"apiGroup": TEST_INFRA_GROUP, "kind": "TestCluster",
                                          "name": name}}})
}

/// [`capi_cluster`] `name` naming LoadBalancer `cp` as its control-plane load balancer (the
/// `loadBalancerRef` annotation: the Cluster's consent to get its endpoint written).
pub fn cp_cluster(name: &str) -> Value {
    capi_cluster_naming(name, "cp")
}

/// [`capi_cluster`] `name` naming LoadBalancer `lb` as its control-plane load balancer.
pub fn capi_cluster_naming(name: &str, lb: &str) -> Value {
    let mut cluster = capi_cluster(name);
    cluster["metadata"]["annotations"] =
        json!({capi_lb_api::constants::ANNOTATION_LOAD_BALANCER_REF: lb});
    cluster
}

/// BIND's A records for `host`, asked with `dig` (sorted; empty for NXDOMAIN or no data).
pub fn dig(host: &str) -> Vec<String> {
    let server = external_dns().server;
    let out = Command::new("dig")
        .args([
            &format!("@{}", server.ip()),
            "-p",
            &server.port().to_string(),
            "+short",
            "+norecurse",
            "+time=1",
            "+tries=3",
            host,
            "A",
        ])
        .output()
        .unwrap_or_else(|e| panic!("running dig (Debian's bind9-dnsutils): {e}"));
    assert!(
        out.status.success(),
        "dig failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut answers: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    answers.sort();
    answers
}

/// A Machine of Cluster `demo` with `labels`, on the test infrastructure kind `TestMachine` of the
/// same name (which need not exist), with Cluster API's finalizer (which [`release_machine`] or
/// [`TestNs::finish`] removes where no Cluster API manager would, as it would once its hooks are
/// gone).
pub fn machine(name: &str, labels: Value) -> Value {
    let mut labels = labels;
    labels["cluster.x-k8s.io/cluster-name"] = json!("demo");
    json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
           "metadata": {"name": name, "finalizers": ["machine.cluster.x-k8s.io"], "labels": labels},
           "spec": {"clusterName": "demo", "bootstrap": {"dataSecretName": "none"},
               "infrastructureRef": {"apiGroup": TEST_INFRA_GROUP, "kind": "TestMachine",
                                     "name": name}}})
}

/// A control-plane Machine of Cluster `demo` (selected by a control-plane LoadBalancer's default
/// selector) on the TestMachine of the same name.
pub fn control_plane_machine(name: &str) -> Value {
    machine(name, json!({"cluster.x-k8s.io/control-plane": ""}))
}

/// A test infrastructure object of `kind` (`TestCluster`, `TestMachine`) named `name` with `spec`.
pub fn test_infra(kind: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": format!("{TEST_INFRA_GROUP}/{TEST_INFRA_VERSION}"), "kind": kind,
           "metadata": {"name": name}, "spec": spec})
}

/// The API of test infrastructure kind `kind` in `t`'s namespace.
pub async fn test_infra_api(t: &TestNs, kind: &str) -> Api<DynamicObject> {
    dynamic_api(&t.client, Some(&t.ns), &test_infra(kind, "x", json!({})))
        .await
        .unwrap()
}

/// Cluster API reaches the "workload cluster" (the harness apiserver itself, through the
/// `<cluster>-kubeconfig` Secret a control-plane provider would write) once the TestCluster is
/// provisioned; Node `<namespace>-<machine>` carries the TestMachine's providerID, so the Machine
/// controller sets `status.nodeRef`, and with a nodeRef it honours pre-drain hooks.
pub async fn connect_workload_cluster(t: &TestNs) {
    test_infra_api(t, "TestCluster")
        .await
        .patch_status(
            "demo",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"initialization": {"provisioned": true}}})),
        )
        .await
        .unwrap();
    let kubeconfig = std::fs::read(&cluster().kubeconfig).unwrap();
    let secret = k8s_openapi::api::core::v1::Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("demo-kubeconfig".into()),
            labels: Some([("cluster.x-k8s.io/cluster-name".into(), "demo".into())].into()),
            ..Default::default()
        },
        type_: Some("cluster.x-k8s.io/secret".into()),
        data: Some([("value".into(), k8s_openapi::ByteString(kubeconfig))].into()),
        ..Default::default()
    };
    t.api::<k8s_openapi::api::core::v1::Secret>()
        .create(&Default::default(), &secret)
        .await
        .unwrap();
}

/// The Node [`machine_with_node`] makes for `machine`: `<namespace>-<machine>`.
pub fn node_name(t: &TestNs, machine: &str) -> String {
    format!("{}-{machine}", t.ns)
}

/// A provisioned Machine whose TestMachine's providerID is also on a Node of the workload
/// cluster; waits until Cluster API has set the Machine's nodeRef.
pub async fn machine_with_node(t: &TestNs, name: &str, ip: &str) {
    let node = node_name(t, name);
    let provider_id = format!("test://{node}");
    t.create(
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
                    "spec": {"providerID": provider_id}}),
    )
    .await;
    provisioned_test_machine(t, name, ip, &provider_id).await;
    wait_for(
        &t.api::<capi_lb_api::capi::Machine>(),
        name,
        &format!("Cluster API sets the nodeRef of Machine {name}"),
        |m| {
            m.and_then(|m| m.status.as_ref()).and_then(|s| {
                s.rest
                    .get("nodeRef")?
                    .get("name")?
                    .as_str()
                    .map(str::to_string)
            }) == Some(node.clone())
        },
    )
    .await;
}

/// A control-plane Machine `name` on a TestMachine provisioned as an infrastructure provider would
/// provision it: `providerID`, `status.initialization.provisioned` and the InternalIP `ip`, which
/// Cluster API's Machine controller copies into the Machine.
pub async fn provisioned_test_machine(t: &TestNs, name: &str, ip: &str, provider_id: &str) {
    t.create(test_infra(
        "TestMachine",
        name,
        json!({"providerID": provider_id}),
    ))
    .await;
    test_infra_api(t, "TestMachine")
        .await
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"initialization": {"provisioned": true},
                "addresses": [{"type": "InternalIP", "address": ip}]}})),
        )
        .await
        .unwrap();
    t.create(control_plane_machine(name)).await;
}

/// Let every Machine of `t`'s namespace go (see [`release_machine`]).
pub async fn release_all_machines(t: &TestNs) {
    let machines = t
        .api::<capi_lb_api::capi::Machine>()
        .list(&Default::default())
        .await
        .unwrap();
    for m in machines {
        release_machine(t, &m.name_any()).await;
    }
}

/// Give Machine `name` an InternalIP, as Cluster API's machine controller would.
pub async fn set_machine_ip(t: &TestNs, name: &str, ip: &str) {
    merge_status(
        &t.api::<capi_lb_api::capi::Machine>(),
        name,
        json!({"status": {"addresses": [{"type": "InternalIP", "address": ip}]}}),
    )
    .await;
}

/// Let a Machine go (remove Cluster API's finalizer), unless it is gone already (a real Cluster
/// API manager finishes the deletion of a Machine whose Cluster exists).
pub async fn release_machine(t: &TestNs, name: &str) {
    let patch = json!({"metadata": {"finalizers": null}});
    let machines = capi_api(&t.client, &t.ns, "Machine")
        .await
        .unwrap_or_else(|| panic!("releasing Machine {name}: Cluster API Machines are not served"));
    match machines
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => panic!("releasing Machine {name}: {e}"),
    }
}

/// A JSON merge patch of `name`, as a user would make it (`kubectl patch --type merge`).
pub async fn merge<K>(api: &Api<K>, name: &str, patch: Value)
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("patching {name} with {patch}: {e}"));
}

/// A JSON merge patch of `name`'s status.
pub async fn merge_status<K>(api: &Api<K>, name: &str, patch: Value)
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("patching the status of {name} with {patch}: {e}"));
}

/// Wait until LoadBalancer `name` of `t`'s namespace is Ready.
pub async fn wait_ready(t: &TestNs, name: &str) -> capi_lb_api::LoadBalancer {
    wait_for(
        &t.api::<capi_lb_api::LoadBalancer>(),
        name,
        "LoadBalancer Ready",
        |lb| {
            lb.and_then(|lb| lb.status.as_ref())
                .is_some_and(|s| s.ready)
        },
    )
    .await
    .unwrap()
}

/// Status and reason of the condition `type_` of `lb`.
pub fn condition(lb: &capi_lb_api::LoadBalancer, type_: &str) -> Option<(String, String)> {
    lb.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

/// Run capi-lb with `client` and `options` in the background; [`ControllerHandle`] stops it.
pub fn spawn_controller(client: Client, options: RunOptions) -> ControllerHandle {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        run_with_client(client, options, async move {
            let _ = stopped.await;
        })
        .await
    });
    ControllerHandle {
        stop: Some(stop),
        task,
    }
}

/// The kubeconfig of capi-lb's ServiceAccount on the cluster under test with every file it names
/// inlined (the CA bundle as `certificate-authority-data`), as a Secret must carry it: capi-lb
/// refuses kubeconfigs from Secrets that name files. JSON, which is YAML.
pub fn inline_controller_kubeconfig() -> String {
    let c = cluster();
    let path = c
        .controller_kubeconfig
        .as_ref()
        .expect("the harness's controller kubeconfig");
    let mut kubeconfig =
        Kubeconfig::read_from(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for named in &mut kubeconfig.clusters {
        let cluster = named.cluster.as_mut().expect("a cluster");
        if let Some(file) = cluster.certificate_authority.take() {
            let pem = std::fs::read(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
            let encoded = serde_json::to_value(k8s_openapi::ByteString(pem)).unwrap();
            cluster.certificate_authority_data = Some(encoded.as_str().unwrap().to_string());
        }
    }
    serde_json::to_string(&kubeconfig).unwrap()
}

/// Wait until LoadBalancer `lb`'s `status.targets` are `targets`, of which `active` are active.
pub async fn wait_targets(
    t: &TestNs,
    lb: &str,
    targets: &[&str],
    active: &[&str],
) -> capi_lb_api::LoadBalancer {
    let strings = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    let (targets, active) = (strings(targets), strings(active));
    wait_for(
        &t.api::<capi_lb_api::LoadBalancer>(),
        lb,
        &format!("{lb} with targets {targets:?}, active {active:?}"),
        |l| {
            l.and_then(|l| l.status.as_ref())
                .is_some_and(|s| s.active_targets == active && s.targets == targets)
        },
    )
    .await
    .unwrap()
}
