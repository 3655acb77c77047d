//! Endpoint reachability (`spec.reachability`): capi-lb probes a Ready LoadBalancer's endpoint
//! (`status.endpoint`) from where it runs, as the endpoint's consumers reach it, and the
//! `Reachable` condition says what it found.
//!
//! Probes never run inside a reconcile. A reconcile tells the [`Prober`] what to probe
//! ([`Prober::want`], or [`Prober::forget`]) and reads its last [`Finding`]; the prober's own task
//! ([`Prober::run`]) probes each wanted endpoint every `periodSeconds` (spread by up to a tenth per
//! LoadBalancer, so that many do not probe in the same second), at most [`PARALLEL`] at a time,
//! each port within `timeoutSeconds`, and asks for a reconcile of the LoadBalancer when the finding
//! changes, so the condition (and its Event) follows within a probe. Each probe is a job of the
//! LoadBalancer's namespace on the shared scheduler ([`crate::jobs`]): it waits for one of the
//! namespace's places, and the whole probe (resolving, every address and port, at most
//! [`PARALLEL_PORTS`] at a time) ends by its deadline ([`job_deadline`]: twice `timeoutSeconds`),
//! so a tenant's slow targets hold only its own places, for a bounded time.
//!
//! A probe resolves the endpoint's host the way the process resolves names (in a Pod: the cluster's
//! DNS, so `<name>-ext.<namespace>.svc` answers the load balancer's addresses), and for every
//! address (at most [`MAX_ADDRESSES`]) and port: a TCP connection; for a port named
//! `kube-apiserver`, HTTPS `GET /readyz` too, whose certificate is checked against the Cluster's CA
//! (`tls.crt` of the Secret `<clusterName>-ca`, re-read every [`CA_FRESH`]) when that Secret
//! exists, and not checked otherwise (the message says so). Reachable when every one answers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use capi_lb_api::conditions::Reason;
use capi_lb_api::constants::reason as r;
use capi_lb_api::loadbalancer::{LoadBalancerPort, Protocol};
use futures::StreamExt;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

mod ca;
mod tls;
pub use ca::{CA_CACHE_MAX, CA_FRESH, CA_MAX};
use tls::tls_config;

/// Addresses and ports of one probe tried at the same time.
pub const PARALLEL_PORTS: usize = 8;
/// Addresses of one endpoint probed (a name with more answers: the first ones).
pub const MAX_ADDRESSES: usize = 8;
/// The port name whose probe is an HTTPS `GET /readyz`.
pub const API_SERVER_PORT_NAME: &str = "kube-apiserver";
/// At most this much of an answer to `GET /readyz` is read.
const MAX_ANSWER: usize = 4096;

/// One port of the endpoint to probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    /// The port number.
    pub port: u16,
    /// Probe it with HTTPS `GET /readyz` (a kube-apiserver), not only a TCP connection.
    pub readyz: bool,
}

/// What a reconcile asks to be probed for one LoadBalancer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    /// The LoadBalancer's namespace.
    pub namespace: String,
    /// The LoadBalancer's name.
    pub name: String,
    /// The endpoint's host: a DNS name or an address.
    pub host: String,
    /// The ports.
    pub ports: Vec<Port>,
    /// The Secret with the Cluster's CA (`<clusterName>-ca`), when the LoadBalancer has a Cluster.
    pub ca_secret: Option<String>,
    /// Time between probes.
    pub period: Duration,
    /// Time one port's probe may take.
    pub timeout: Duration,
    /// For a target's probes (`spec.targetHealth`): the failures in a row that make it unhealthy
    /// and the passes in a row that make it healthy again. `None` for an endpoint's probes.
    pub thresholds: Option<(u32, u32)>,
}

/// The Secret with the Cluster's CA (`<clusterName>-ca`, in the LoadBalancer's namespace) that the
/// probes of a LoadBalancer with `spec.clusterName` check `GET /readyz` certificates against: its
/// endpoint's and its targets' alike.
pub fn cluster_ca_secret(cluster_name: Option<&String>) -> Option<String> {
    cluster_name.map(|c| format!("{c}-ca"))
}

/// What the last probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// Every address and port answered.
    pub reachable: bool,
    /// The condition reason.
    pub reason: Reason,
    /// What was probed and what answered (stable while nothing changes: no timings).
    pub message: String,
}

/// A Cluster's CA as read (`None`: no Secret or no `tls.crt`), and when.
type ReadCa = (Instant, Option<Vec<u8>>);

struct Entry {
    wanted: Wanted,
    due: Instant,
    running: bool,
    finding: Option<Finding>,
    /// A target's health (healthy until it fails its threshold), and the probes in a row that
    /// failed and passed.
    healthy: bool,
    fails: u32,
    passes: u32,
}

/// The key of target `target`'s probes for the LoadBalancer with UID `uid`.
fn member_key(uid: &str, target: &str) -> String {
    format!("{uid}/{target}")
}

/// Told of every probe and of every LoadBalancer no longer probed (the metrics).
pub trait ProbeObserver: Send + Sync {
    /// LoadBalancer `namespace/name`'s endpoint was probed.
    fn probed(&self, namespace: &str, name: &str, finding: &Finding);
    /// LoadBalancer `namespace/name` is no longer probed.
    fn forgotten(&self, namespace: &str, name: &str);
}

/// How long one probe of `wanted` may take in all: resolving its host, then every address and
/// port, each within `timeout`.
pub fn job_deadline(wanted: &Wanted) -> Duration {
    wanted.timeout.saturating_mul(2)
}

/// The probes of every LoadBalancer that asks for them.
pub struct Prober {
    client: kube::Client,
    jobs: Arc<crate::jobs::Jobs>,
    entries: Mutex<HashMap<String, Entry>>,
    cas: Mutex<HashMap<(String, String), ReadCa>>,
    changed: mpsc::UnboundedSender<(String, String)>,
    wake: tokio::sync::Notify,
    observer: Option<Arc<dyn ProbeObserver>>,
    refuse: Option<Refuse>,
}

/// Why an address must never be probed (`None`: it may be).
pub type Refuse = Arc<dyn Fn(std::net::IpAddr) -> Option<&'static str> + Send + Sync>;

impl std::fmt::Debug for Prober {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prober").finish_non_exhaustive()
    }
}

impl Prober {
    /// A prober reading CA Secrets with `client`, never connecting to an address `refuse` names a
    /// reason for (a host or a target address is the tenant's to write: the cloud's metadata
    /// address, say, is not probed); the receiver gets `(namespace, name)` of each LoadBalancer
    /// whose finding changed.
    pub fn new(
        client: kube::Client,
        jobs: Arc<crate::jobs::Jobs>,
        observer: Option<Arc<dyn ProbeObserver>>,
        refuse: Option<Refuse>,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<(String, String)>) {
        let (changed, receiver) = mpsc::unbounded_channel();
        let prober = Arc::new(Self {
            client,
            jobs,
            entries: Mutex::new(HashMap::new()),
            cas: Mutex::new(HashMap::new()),
            changed,
            wake: tokio::sync::Notify::new(),
            observer,
            refuse,
        });
        (prober, receiver)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Probe `wanted` for the LoadBalancer with UID `uid` from now on (a changed `wanted` is probed
    /// soon, spread by the UID; an unchanged one keeps its schedule).
    pub fn want(&self, uid: &str, wanted: Wanted) {
        let mut entries = self.lock();
        match entries.get_mut(uid) {
            Some(entry) if entry.wanted == wanted => return,
            Some(entry) => {
                entry.wanted = wanted;
                entry.due = Instant::now() + spread(uid, Duration::from_secs(1));
            }
            None => {
                entries.insert(
                    uid.to_string(),
                    Entry {
                        due: Instant::now() + spread(uid, Duration::from_secs(1)),
                        wanted,
                        running: false,
                        finding: None,
                        healthy: true,
                        fails: 0,
                        passes: 0,
                    },
                );
            }
        }
        drop(entries);
        self.wake.notify_one();
    }

    /// Stop probing the endpoint of the LoadBalancer with UID `uid`.
    pub fn forget(&self, uid: &str) {
        if let Some(entry) = self.lock().remove(uid)
            && let Some(observer) = &self.observer
        {
            observer.forgotten(&entry.wanted.namespace, &entry.wanted.name);
        }
    }

    /// Probe target `target` of the LoadBalancer with UID `uid` as `wanted` says (its address and
    /// ports, and `thresholds`).
    pub fn want_target(&self, uid: &str, target: &str, wanted: Wanted) {
        self.want(&member_key(uid, target), wanted);
    }

    /// Whether target `target` of the LoadBalancer with UID `uid` is healthy (`None`: not probed
    /// yet), and what its last probe found.
    pub fn target_health(&self, uid: &str, target: &str) -> Option<(bool, Option<Finding>)> {
        self.lock()
            .get(&member_key(uid, target))
            .filter(|e| e.finding.is_some())
            .map(|e| (e.healthy, e.finding.clone()))
    }

    /// Stop probing the targets of the LoadBalancer with UID `uid` but those in `keep`.
    pub fn forget_targets(&self, uid: &str, keep: &[&str]) {
        let prefix = format!("{uid}/");
        self.lock().retain(|key, _| {
            key.strip_prefix(&prefix)
                .is_none_or(|target| keep.contains(&target))
        });
    }

    /// The last finding for the LoadBalancer with UID `uid` (`None` before its first probe).
    pub fn finding(&self, uid: &str) -> Option<Finding> {
        self.lock().get(uid).and_then(|e| e.finding.clone())
    }

    /// Probe what is due, until `shutdown`: each probe a job of its LoadBalancer's namespace.
    pub async fn run(self: Arc<Self>, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            let now = Instant::now();
            let (due, next) = {
                let mut entries = self.lock();
                let mut due = Vec::new();
                let mut next = now + Duration::from_secs(60);
                for (uid, entry) in entries.iter_mut() {
                    if entry.running {
                        continue;
                    }
                    if entry.due <= now {
                        entry.running = true;
                        due.push((uid.clone(), entry.wanted.clone()));
                    } else {
                        next = next.min(entry.due);
                    }
                }
                (due, next)
            };
            for (uid, wanted) in due {
                let (prober, recorder) = (self.clone(), self.clone());
                let probed = wanted.clone();
                let deadline = job_deadline(&wanted);
                let namespace = wanted.namespace.clone();
                self.jobs.spawn(
                    "probe",
                    &namespace,
                    deadline,
                    async move { prober.probe(&probed).await },
                    move |result| {
                        let finding = result.unwrap_or_else(|stopped| {
                            unreachable(format!(
                                "{}: the probe was stopped: {stopped}",
                                wanted.host
                            ))
                        });
                        recorder.record(&uid, &wanted, finding);
                    },
                );
            }
            tokio::select! {
                () = &mut shutdown => return,
                () = tokio::time::sleep_until(next.into()) => {}
                () = self.wake.notified() => {}
            }
        }
    }

    /// Keep `finding` for `uid` (unless it was forgotten or changed meanwhile), schedule its next
    /// probe, and ask for a reconcile when the finding changed.
    fn record(&self, uid: &str, probed: &Wanted, finding: Finding) {
        let mut entries = self.lock();
        let Some(entry) = entries.get_mut(uid) else {
            return;
        };
        entry.running = false;
        if entry.wanted != *probed {
            // Changed while it was probed: probe what is wanted now.
            entry.due = Instant::now();
            drop(entries);
            self.wake.notify_one();
            return;
        }
        entry.due = Instant::now() + spread(uid, probed.period);
        let changed = match probed.thresholds {
            // An endpoint: any change of what was found is reported.
            None => {
                if let Some(observer) = &self.observer {
                    observer.probed(&probed.namespace, &probed.name, &finding);
                }
                entry.finding.as_ref() != Some(&finding)
            }
            // A target: a change of its health, after its thresholds; and its first finding and
            // a change between answering and not (a load balancer made of DNS records changes
            // its records only on what was probed).
            Some((failures, successes)) => {
                let news = entry
                    .finding
                    .as_ref()
                    .is_none_or(|f| f.reachable != finding.reachable);
                if finding.reachable {
                    (entry.passes, entry.fails) = (entry.passes.saturating_add(1), 0);
                } else {
                    (entry.fails, entry.passes) = (entry.fails.saturating_add(1), 0);
                }
                let was = entry.healthy;
                if was && entry.fails >= failures {
                    entry.healthy = false;
                } else if !was && entry.passes >= successes {
                    entry.healthy = true;
                }
                was != entry.healthy || news
            }
        };
        entry.finding = Some(finding);
        if changed {
            let _ = self
                .changed
                .send((probed.namespace.clone(), probed.name.clone()));
        }
        drop(entries);
        self.wake.notify_one();
    }

    /// Probe every address and port of `wanted`.
    async fn probe(&self, wanted: &Wanted) -> Finding {
        let Some(first) = wanted.ports.first() else {
            return Finding {
                reachable: false,
                reason: r::ENDPOINT_UNREACHABLE,
                message: "the LoadBalancer has no port to probe".into(),
            };
        };
        let resolved = tokio::time::timeout(
            wanted.timeout,
            tokio::net::lookup_host((wanted.host.as_str(), first.port)),
        )
        .await;
        let addresses: Vec<std::net::IpAddr> = match resolved {
            Ok(Ok(found)) => {
                let mut ips: Vec<_> = found.map(|a| a.ip()).collect();
                ips.dedup();
                ips.truncate(MAX_ADDRESSES);
                ips
            }
            Ok(Err(e)) => {
                return unreachable(format!("{} does not resolve: {e}", wanted.host));
            }
            Err(_) => {
                return unreachable(format!(
                    "{} did not resolve within {} s",
                    wanted.host,
                    wanted.timeout.as_secs()
                ));
            }
        };
        if addresses.is_empty() {
            return unreachable(format!("{} resolves to no address", wanted.host));
        }
        if let Some(refused) = self
            .refuse
            .as_ref()
            .and_then(|refuse| refused(refuse, &wanted.host, &addresses))
        {
            return refused;
        }
        let needs_ca = wanted.ports.iter().any(|p| p.readyz);
        let ca = match (&wanted.ca_secret, needs_ca) {
            (Some(secret), true) => self.ca(&wanted.namespace, secret).await,
            _ => None,
        };
        let pairs: Vec<SocketAddr> = wanted
            .ports
            .iter()
            .flat_map(|port| addresses.iter().map(|ip| SocketAddr::new(*ip, port.port)))
            .collect();
        let readyz = |at: &SocketAddr| wanted.ports.iter().any(|p| p.port == at.port() && p.readyz);
        // A target is reached by its address, which its serving certificate need not name (a
        // Machine's ExternalIP, say): its certificate must chain to the Cluster's CA, any name.
        let check_name = wanted.thresholds.is_none();
        let outcomes: Vec<(SocketAddr, PortResult)> = futures::stream::iter(pairs)
            .map(|at| {
                let ca = ca.as_deref();
                let readyz = readyz(&at);
                async move {
                    let outcome = tokio::time::timeout(
                        wanted.timeout,
                        probe_port(at, &wanted.host, readyz, ca, check_name),
                    )
                    .await
                    .unwrap_or_else(|_| {
                        Err((
                            r::ENDPOINT_UNREACHABLE,
                            format!(
                                "no answer within {} s{}",
                                wanted.timeout.as_secs(),
                                if readyz {
                                    " (TCP, TLS, GET /readyz)"
                                } else {
                                    ""
                                }
                            ),
                        ))
                    });
                    (at, outcome)
                }
            })
            .buffered(PARALLEL_PORTS)
            .collect()
            .await;
        let mut answered = Vec::new();
        let mut failed: Vec<(Reason, String)> = Vec::new();
        for (at, outcome) in outcomes {
            match outcome {
                Ok(what) => answered.push(format!("{at} {what}")),
                Err((reason, why)) => failed.push((reason, format!("{at}: {why}"))),
            }
        }
        let checked = match (needs_ca, &wanted.ca_secret, &ca) {
            (false, _, _) => String::new(),
            (true, Some(secret), Some(_)) => format!(
                "; certificates checked against Secret {}/{secret}{}",
                wanted.namespace,
                if check_name { "" } else { " (any name)" }
            ),
            (true, Some(secret), None) => format!(
                "; certificates not checked: no CA in Secret {}/{secret} (tls.crt)",
                wanted.namespace
            ),
            (true, None, _) => "; certificates not checked: no spec.clusterName".into(),
        };
        if failed.is_empty() {
            return Finding {
                reachable: true,
                reason: r::ENDPOINT_REACHABLE,
                message: format!("{}: {}{checked}", wanted.host, answered.join(", ")),
            };
        }
        // The gravest reason: an untrusted certificate, then an API server not ready, then no
        // answer.
        let reason = [
            r::CERTIFICATE_NOT_TRUSTED,
            r::ENDPOINT_NOT_READY,
            r::ENDPOINT_UNREACHABLE,
        ]
        .into_iter()
        .find(|r| failed.iter().any(|(f, _)| f == r))
        .unwrap_or(r::ENDPOINT_UNREACHABLE);
        Finding {
            reachable: false,
            reason,
            message: format!(
                "{}: {}{checked}",
                wanted.host,
                failed
                    .into_iter()
                    .map(|(_, m)| m)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// The finding of a probe not made because `refuse` names a reason for one of `addresses`.
fn refused(refuse: &Refuse, host: &str, addresses: &[std::net::IpAddr]) -> Option<Finding> {
    let refused: Vec<String> = addresses
        .iter()
        .filter_map(|ip| refuse(*ip).map(|why| format!("{ip} ({why})")))
        .collect();
    (!refused.is_empty()).then(|| {
        unreachable(format!(
            "{host} resolves to an address capi-lb never connects to: {}; not probed",
            refused.join(", ")
        ))
    })
}

fn unreachable(message: String) -> Finding {
    Finding {
        reachable: false,
        reason: r::ENDPOINT_UNREACHABLE,
        message,
    }
}

/// `period` spread by up to a tenth either way, the same for one key (a UID) every time: what
/// starts together (probes, drift checks) does not run in the same second.
pub fn spread(key: &str, period: Duration) -> Duration {
    // FNV-1a: stable across runs and versions (std's hasher is not).
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    // A fraction in [0.9, 1.1).
    period.mul_f64(0.9 + (hash % 2_000) as f64 / 10_000.0)
}

/// The TCP ports of `spec.ports` to probe: the load balancer's own ports (its endpoint), or the
/// ports on the targets (`targetPort`); a `kube-apiserver` port gets `GET /readyz` on both.
pub fn tcp_ports(ports: &[LoadBalancerPort], on_targets: bool) -> Vec<Port> {
    ports
        .iter()
        .filter(|p| p.protocol == Protocol::Tcp)
        .filter_map(|p| {
            let number = if on_targets {
                p.target_port.unwrap_or(p.port)
            } else {
                p.port
            };
            Some(Port {
                port: u16::try_from(number).ok()?,
                readyz: p.name == API_SERVER_PORT_NAME,
            })
        })
        .collect()
}

type PortResult = Result<String, (Reason, String)>;

/// One address and port: a TCP connection, and for an API server `GET /readyz` over TLS (with
/// `check_name`, its certificate must name `host`).
async fn probe_port(
    at: SocketAddr,
    host: &str,
    readyz: bool,
    ca: Option<&[u8]>,
    check_name: bool,
) -> PortResult {
    let stream = TcpStream::connect(at)
        .await
        .map_err(|e| (r::ENDPOINT_UNREACHABLE, format!("{e}")))?;
    if !readyz {
        return Ok("accepts connections".into());
    }
    let config = tls_config(ca, check_name).map_err(|e| (r::CERTIFICATE_NOT_TRUSTED, e))?;
    let name = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ServerName::IpAddress(ip.into()),
        Err(_) => ServerName::try_from(host.to_string())
            .map_err(|e| (r::ENDPOINT_UNREACHABLE, format!("{host}: {e}")))?,
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let mut tls = connector.connect(name, stream).await.map_err(|e| {
        match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            Some(rustls::Error::InvalidCertificate(why)) => (
                r::CERTIFICATE_NOT_TRUSTED,
                format!("certificate not trusted: {why:?}"),
            ),
            _ => (r::ENDPOINT_UNREACHABLE, format!("TLS: {e}")),
        }
    })?;
    let request = format!(
        "GET /readyz HTTP/1.1\r\nHost: {host}\r\nUser-Agent: capi-lb\r\nConnection: close\r\n\r\n"
    );
    tls.write_all(request.as_bytes())
        .await
        .map_err(|e| (r::ENDPOINT_UNREACHABLE, format!("sending GET /readyz: {e}")))?;
    let mut answer = Vec::new();
    let mut buffer = [0u8; 1024];
    while answer.len() < MAX_ANSWER && !answer.windows(2).any(|w| w == b"\r\n") {
        match tls.read(&mut buffer).await {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buffer[..n]),
            Err(e) => {
                return Err((
                    r::ENDPOINT_UNREACHABLE,
                    format!("reading the answer to GET /readyz: {e}"),
                ));
            }
        }
    }
    let status = String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1).map(str::to_string))
        .unwrap_or_default();
    match status.as_str() {
        "200" => Ok("answered GET /readyz 200".into()),
        // Anonymous requests refused: TLS and the API server work; readiness is not told.
        "401" | "403" => Ok(format!(
            "answered GET /readyz {status} (anonymous requests refused: readiness not known)"
        )),
        "" => Err((
            r::ENDPOINT_UNREACHABLE,
            "no HTTP answer to GET /readyz".into(),
        )),
        other => Err((
            r::ENDPOINT_NOT_READY,
            format!("answered GET /readyz {other}"),
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    #[tokio::test]
    async fn a_listening_port_answers_and_a_closed_one_is_unreachable() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap();
        assert_eq!(
            probe_port(open, "127.0.0.1", false, None, true).await,
            Ok("accepts connections".to_string())
        );
        drop(listener);
        let (reason, _) = probe_port(open, "127.0.0.1", false, None, true)
            .await
            .unwrap_err();
        assert_eq!(reason, r::ENDPOINT_UNREACHABLE);
    }

    #[test]
    fn a_ca_that_is_no_certificate_is_refused() {
        assert!(tls_config(Some(b"not pem"), true).is_err());
        assert!(tls_config(None, true).is_ok());
    }

    #[test]
    fn an_address_the_policy_refuses_is_never_connected_to() {
        let refuse: Refuse = Arc::new(|ip: std::net::IpAddr| {
            ip.to_string()
                .starts_with("169.254.")
                .then_some("link-local")
        });
        let metadata = ["169.254.169.254".parse().unwrap()];
        let found = refused(&refuse, "api.example.org", &metadata).unwrap();
        assert!(!found.reachable);
        assert_eq!(found.reason, r::ENDPOINT_UNREACHABLE);
        assert!(
            found.message.contains("169.254.169.254 (link-local)"),
            "{}",
            found.message
        );
        assert!(refused(&refuse, "h", &["10.0.0.1".parse().unwrap()]).is_none());
    }

    #[test]
    fn probes_are_spread_by_up_to_a_tenth() {
        let period = Duration::from_secs(30);
        for i in 0..100 {
            let s = spread(&format!("uid-{i}"), period);
            assert!(s >= Duration::from_secs(27) && s < Duration::from_secs(33));
        }
    }
}
