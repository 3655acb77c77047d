//! The rollout's control plane: real kube-apiservers sharing one etcd of their own, each on its
//! own address of the harness's data-plane range on `lo`, with a PKI of
//! their own (the Cluster's CA: a serving certificate for the endpoint's names, an admin client
//! certificate, the service-account key), stopped the way a node's shutdown stops them: SIGTERM,
//! `--shutdown-delay-duration` (still serving, `/readyz` failing), then the listener closed and
//! HTTP/2 connections sent GOAWAY.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

use crate::launch::BenchError;

/// The port every API server listens on (each on its own address).
pub const PORT: u16 = 6443;
/// A name every serving certificate of the fleet holds.
pub const SERVING_NAME: &str = "kubernetes";

fn pki_err(what: &str) -> impl FnOnce(rcgen::Error) -> BenchError + '_ {
    move |e| BenchError::Setup(format!("the rollout's PKI, {what}: {e}"))
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> BenchError + '_ {
    move |e| BenchError::Setup(format!("{}: {e}", path.display()))
}

/// The Cluster's PKI, written into a folder the API servers read.
pub struct Pki {
    dir: PathBuf,
    /// The CA certificate (PEM): what clients trust.
    pub ca_pem: String,
    /// The admin client certificate and key (PEM, `system:masters`).
    pub client_pem: String,
}

impl Pki {
    /// A new CA, a serving certificate for `hostnames` and `addresses`, an admin client
    /// certificate and a service-account key pair, in `dir`.
    pub fn create(
        dir: &Path,
        hostnames: &[String],
        addresses: &[IpAddr],
    ) -> Result<Self, BenchError> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let mut ca_params = CertificateParams::default();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "capi-lb-bench-rollout-ca");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(
            ca_params,
            KeyPair::generate().map_err(pki_err("CA key"))?,
        )
        .map_err(pki_err("CA"))?;

        // `kubernetes`, as every API server's certificate has: the name the fleet's own readiness
        // checks use, whatever else the certificate names.
        let mut names = vec![SERVING_NAME.to_string()];
        names.extend(hostnames.iter().cloned());
        let mut serving = CertificateParams::new(names).map_err(pki_err("serving"))?;
        serving
            .subject_alt_names
            .extend(addresses.iter().map(|a| SanType::IpAddress(*a)));
        serving
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_key = KeyPair::generate().map_err(pki_err("serving key"))?;
        let serving_cert = serving
            .signed_by(&serving_key, &ca)
            .map_err(pki_err("serving"))?;

        let mut client = CertificateParams::default();
        client
            .distinguished_name
            .push(DnType::CommonName, "capi-lb-bench-rollout");
        client
            .distinguished_name
            .push(DnType::OrganizationName, "system:masters");
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_key = KeyPair::generate().map_err(pki_err("client key"))?;
        let client_cert = client
            .signed_by(&client_key, &ca)
            .map_err(pki_err("client"))?;

        let sa = KeyPair::generate().map_err(pki_err("service-account key"))?;
        let files = [
            ("ca.crt", ca.pem()),
            ("apiserver.crt", serving_cert.pem()),
            ("apiserver.key", serving_key.serialize_pem()),
            ("sa.key", sa.serialize_pem()),
            ("sa.pub", sa.public_key_pem()),
        ];
        for (name, text) in files {
            let path = dir.join(name);
            std::fs::write(&path, text).map_err(io_err(&path))?;
        }
        Ok(Pki {
            dir: dir.to_path_buf(),
            ca_pem: ca.pem(),
            client_pem: format!("{}{}", client_cert.pem(), client_key.serialize_pem()),
        })
    }

    fn file(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

/// How the API servers run.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The kube-apiserver binary.
    pub binary: PathBuf,
    /// The etcd binary (one etcd per run, which its API servers share).
    pub etcd_binary: PathBuf,
    /// `--shutdown-delay-duration`: how long one keeps serving after SIGTERM.
    pub shutdown_delay: Duration,
    /// Where their logs go.
    pub log_dir: PathBuf,
}

/// An etcd on `address` (client port 2379, peer port 2380), its data and log in the log folder.
pub struct Etcd {
    /// Its client URL.
    pub url: String,
    data: PathBuf,
    child: tokio::process::Child,
}

impl Etcd {
    /// Start it and wait until it answers `/health`.
    pub async fn start(
        settings: &Settings,
        address: IpAddr,
        within: Duration,
    ) -> Result<Self, BenchError> {
        let log = settings.log_dir.join(format!("etcd-{address}.log"));
        std::fs::create_dir_all(&settings.log_dir).map_err(io_err(&settings.log_dir))?;
        let out = std::fs::File::create(&log).map_err(io_err(&log))?;
        let err = out.try_clone().map_err(io_err(&log))?;
        let url = format!("http://{address}:2379");
        let peer = format!("http://{address}:2380");
        let data = settings.log_dir.join(format!("etcd-data-{address}"));
        let _ = std::fs::remove_dir_all(&data);
        let mut child = tokio::process::Command::new(&settings.etcd_binary)
            .args([
                "--name".into(),
                "rollout".into(),
                "--data-dir".into(),
                data.display().to_string(),
                "--listen-client-urls".into(),
                url.clone(),
                "--advertise-client-urls".into(),
                url.clone(),
                "--listen-peer-urls".into(),
                peer.clone(),
                "--initial-advertise-peer-urls".into(),
                peer.clone(),
                "--initial-cluster".into(),
                format!("rollout={peer}"),
                "--unsafe-no-fsync".into(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| BenchError::Setup(format!("{}: {e}", settings.etcd_binary.display())))?;
        let began = Instant::now();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(1))
            .build()
            .map_err(|e| BenchError::Setup(format!("an etcd health client: {e}")))?;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(BenchError::Setup(format!(
                    "etcd on {address} exited ({status}); its log: {}",
                    log.display()
                )));
            }
            if let Ok(r) = http.get(format!("{url}/health")).send().await
                && r.status().is_success()
            {
                return Ok(Etcd { url, data, child });
            }
            if began.elapsed() > within {
                let _ = child.kill().await;
                return Err(BenchError::Setup(format!(
                    "etcd on {address} not healthy after {within:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Kill it and remove its data.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

/// One running kube-apiserver.
pub struct ApiServer {
    /// Its address.
    pub address: IpAddr,
    child: tokio::process::Child,
}

impl ApiServer {
    /// Start one on `address`; it is ready once [`ApiServer::wait_ready`] says so.
    pub fn start(
        settings: &Settings,
        etcd: &Etcd,
        pki: &Pki,
        address: IpAddr,
    ) -> Result<Self, BenchError> {
        let log = settings
            .log_dir
            .join(format!("kube-apiserver-{address}.log"));
        let out = std::fs::File::create(&log).map_err(io_err(&log))?;
        let err = out.try_clone().map_err(io_err(&log))?;
        let cert_dir = settings.log_dir.join(format!("certs-{address}"));
        let child = tokio::process::Command::new(&settings.binary)
            .args([
                format!("--bind-address={address}"),
                format!("--advertise-address={address}"),
                format!("--secure-port={PORT}"),
                "--endpoint-reconciler-type=none".into(),
                format!("--etcd-servers={}", etcd.url),
                format!("--tls-cert-file={}", pki.file("apiserver.crt")),
                format!("--tls-private-key-file={}", pki.file("apiserver.key")),
                format!("--client-ca-file={}", pki.file("ca.crt")),
                "--authorization-mode=RBAC".into(),
                "--service-cluster-ip-range=10.97.0.0/16".into(),
                format!("--service-account-key-file={}", pki.file("sa.pub")),
                format!("--service-account-signing-key-file={}", pki.file("sa.key")),
                "--service-account-issuer=https://kubernetes.default.svc".into(),
                format!("--cert-dir={}", cert_dir.display()),
                format!(
                    "--shutdown-delay-duration={}s",
                    settings.shutdown_delay.as_secs()
                ),
                "--profiling=false".into(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| BenchError::Setup(format!("{}: {e}", settings.binary.display())))?;
        Ok(ApiServer { address, child })
    }

    /// Its address and port.
    pub fn socket(&self) -> SocketAddr {
        SocketAddr::new(self.address, PORT)
    }

    /// Wait until its `/readyz` answers 200 (with the admin certificate), or fail after `within`.
    pub async fn wait_ready(
        &mut self,
        pki: &Pki,
        within: Duration,
    ) -> Result<Duration, BenchError> {
        let began = Instant::now();
        let client = reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(pki.ca_pem.as_bytes())
                .map_err(|e| BenchError::Setup(format!("the rollout CA: {e}")))?])
            .identity(
                reqwest::Identity::from_pem(pki.client_pem.as_bytes())
                    .map_err(|e| BenchError::Setup(format!("the rollout client: {e}")))?,
            )
            .timeout(Duration::from_secs(2))
            .resolve(SERVING_NAME, self.socket())
            .build()
            .map_err(|e| BenchError::Setup(format!("a readiness client: {e}")))?;
        let url = format!("https://{SERVING_NAME}:{PORT}/readyz");
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(BenchError::Setup(format!(
                    "kube-apiserver on {} exited ({status}) before it was ready; its log is in the rollout's folder",
                    self.address
                )));
            }
            if let Ok(r) = client.get(&url).send().await
                && r.status().is_success()
            {
                return Ok(began.elapsed());
            }
            if began.elapsed() > within {
                return Err(BenchError::Setup(format!(
                    "kube-apiserver on {} not ready after {within:?}",
                    self.address
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stop it as a node's shutdown does (SIGTERM) and wait until it exited (SIGKILL after
    /// `within`): how long it took.
    pub async fn terminate(mut self, within: Duration) -> Result<Duration, BenchError> {
        let began = Instant::now();
        if let Some(pid) = self.child.id() {
            let status = tokio::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await
                .map_err(|e| BenchError::Setup(format!("kill -TERM {pid}: {e}")))?;
            if !status.success() {
                return Err(BenchError::Setup(format!("kill -TERM {pid}: {status}")));
            }
        }
        match tokio::time::timeout(within, self.child.wait()).await {
            Ok(_) => Ok(began.elapsed()),
            Err(_) => {
                let _ = self.child.kill().await;
                Err(BenchError::Setup(format!(
                    "kube-apiserver on {} still ran {within:?} after SIGTERM (killed)",
                    self.address
                )))
            }
        }
    }

    /// Kill it without warning (SIGKILL) and wait until it is gone.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }
}
