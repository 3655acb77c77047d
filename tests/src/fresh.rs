//! The harness's fresh instance (`tests/k8s/harness.sh fresh`): a management cluster as `clusterctl
//! init` of Cluster API alone leaves it, where the real clusterctl installs capi-lb
//! (`tests/tests/e2e/clusterctl.rs`), and a clusterctl provider repository made from `config/`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use kube::Client;

use crate::k8s::{capi, config_of, config_with_token, harness, parse_env, repo};

/// The fresh instance.
#[derive(Clone, Debug)]
pub struct Fresh {
    /// Admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// Its Cluster API version (the core provider in its clusterctl inventory).
    pub capi_version: String,
}

fn resolve() -> Result<Fresh, String> {
    // Already running, or installed (cached) and started now.
    let env = match harness(&["fresh", "env"]) {
        Ok(env) => env,
        Err(_) => {
            // What every instance shares, then this instance's own Kubernetes (the oldest
            // supported): `fresh install` waits for a build under way (CI runs one beside the
            // tests, .ci/run) and returns at once when it is installed.
            harness(&["install"])?;
            harness(&["fresh", "install"])?;
            harness(&["fresh", "start"]).map_err(|e| {
                format!(
                    "{e}: the clusterctl tests need an apiserver where Cluster API alone is \
                     installed; run `tests/k8s/harness.sh install && tests/k8s/harness.sh fresh \
                     install && tests/k8s/harness.sh fresh start`"
                )
            })?
        }
    };
    let env = parse_env(&env);
    let get = |key: &str| {
        env.get(key)
            .cloned()
            .ok_or_else(|| format!("tests/k8s/harness.sh fresh env printed no {key}"))
    };
    Ok(Fresh {
        kubeconfig: get("CAPI_LB_E2E_FRESH_KUBECONFIG")?.into(),
        capi_version: get("CAPI_LB_E2E_FRESH_CAPI_VERSION")?,
    })
}

/// The fresh instance, resolved once per test process; panics when there is none (these tests never
/// pass or skip without it).
pub fn fresh() -> &'static Fresh {
    static FRESH: OnceLock<Result<Fresh, String>> = OnceLock::new();
    match FRESH.get_or_init(resolve) {
        Ok(f) => f,
        Err(e) => panic!("{e}"),
    }
}

/// A client with the fresh instance's admin kubeconfig.
pub async fn fresh_admin_client() -> Client {
    capi_lb::install_crypto_provider();
    Client::try_from(config_of(&fresh().kubeconfig).await).unwrap()
}

/// A client of the fresh instance that authenticates with `token` (a ServiceAccount's).
pub async fn fresh_client_with_token(token: String) -> Client {
    capi_lb::install_crypto_provider();
    Client::try_from(config_with_token(&fresh().kubeconfig, token).await).unwrap()
}

/// A clusterctl provider repository in a temporary folder: capi-lb's generated release folder
/// (`config/clusterctl/infrastructure-capi-lb/v<version>/`) as it is, the core provider's metadata
/// (so that `clusterctl upgrade plan` finds a repository for every provider in the inventory, none
/// on GitHub), and a `clusterctl.yaml` naming both with `file://` URLs. Removed on drop.
#[derive(Debug)]
pub struct Repository {
    /// The folder.
    pub dir: PathBuf,
    /// Its `clusterctl.yaml`.
    pub config: PathBuf,
    /// clusterctl's home (empty: no user configuration takes part).
    pub home: PathBuf,
}

impl Repository {
    /// A repository with capi-lb's release as generated.
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "capi-lb-clusterctl-repo-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let release = capi_lb::install::manifests::clusterctl_release_dir();
        let ours = release
            .parent()
            .and_then(Path::file_name)
            .expect("<provider label>/<version>")
            .to_owned();
        copy_dir(
            &repo().join("config").join(release.parent().unwrap()),
            &dir.join(&ours),
        );
        let core = dir.join("cluster-api").join(&fresh().capi_version);
        std::fs::create_dir_all(&core).unwrap();
        let (major, minor) = version_series(&fresh().capi_version);
        std::fs::write(
            core.join("metadata.yaml"),
            format!(
                "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- major: {major}\n  minor: {minor}\n  contract: v1beta2\n"
            ),
        )
        .unwrap();
        // Never installed by these tests (the inventory has it already); present so that the
        // repository is complete.
        std::fs::write(core.join("core-components.yaml"), "---\n").unwrap();
        let config = dir.join("clusterctl.yaml");
        std::fs::write(
            &config,
            format!(
                "providers:\n  - name: cluster-api\n    type: CoreProvider\n    url: file://{}\n  - name: capi-lb\n    type: InfrastructureProvider\n    url: file://{}\n",
                core.join("core-components.yaml").display(),
                dir.join(&ours)
                    .join(format!("v{}", env!("CARGO_PKG_VERSION")))
                    .join("infrastructure-components.yaml")
                    .display()
            ),
        )
        .unwrap();
        let home = dir.join("home");
        std::fs::create_dir_all(&home).unwrap();
        Repository { dir, config, home }
    }

    /// Add release `version` of capi-lb to the repository: a copy of the generated one.
    pub fn add_release(&self, version: &str) {
        let release = capi_lb::install::manifests::clusterctl_release_dir();
        let ours = self
            .dir
            .join(release.parent().unwrap().file_name().unwrap());
        copy_dir(
            &ours.join(format!("v{}", env!("CARGO_PKG_VERSION"))),
            &ours.join(version),
        );
    }

    /// Run clusterctl with this repository's configuration on the fresh instance, with `variables`
    /// in its environment (and nothing else of the test's); stdout and stderr, and whether it
    /// succeeded.
    pub fn clusterctl(&self, args: &[&str], variables: &[(&str, &str)]) -> (bool, String) {
        let clusterctl = capi()
            .clusterctl
            .as_deref()
            .expect("no clusterctl: set CAPI_LB_E2E_CLUSTERCTL (tests/k8s/harness.sh start does)");
        let out = Command::new(clusterctl)
            .args(args)
            .arg("--config")
            .arg(&self.config)
            .arg("--kubeconfig")
            .arg(&fresh().kubeconfig)
            .env_clear()
            .env("HOME", &self.home)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            // No look for a newer clusterctl on GitHub.
            .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
            .envs(variables.iter().copied())
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", clusterctl.display()));
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }
}

impl Drop for Repository {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn version_series(version: &str) -> (String, String) {
    let mut parts = version.trim_start_matches('v').split('.');
    (
        parts.next().unwrap_or_default().to_string(),
        parts.next().unwrap_or_default().to_string(),
    )
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}
