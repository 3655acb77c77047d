//! The clients of the rollout: each sends `GET /api/v1/namespaces/default` (with the Cluster's admin
//! certificate) through the load balancer's published endpoint at a steady rate, and counts what it
//! sent and what failed (an error, a timeout or any status but 2xx), with the first failures' times
//! and messages.
//!
//! Two kinds, as the clients of a control plane behave: a new TCP and TLS connection per request
//! (HTTP/1.1, nothing kept, no retry: a script, a health checker, `curl`), and one long-lived
//! HTTP/2 connection per client (client-go's and controllers' behaviour: every request on one
//! connection until the server sends GOAWAY or it breaks, then a new one; an answer 429 or 5xx
//! with `Retry-After` is asked again after that many seconds, at most [`RETRIES`] times, as
//! client-go and kube-rs's client do: a kube-apiserver shutting down answers a request that raced
//! its GOAWAY `503` with `Retry-After: 1`). Retried requests are counted apart; a request fails
//! when its last answer is not 2xx.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::fleet::Pki;
use crate::launch::BenchError;

/// How a client connects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClientKind {
    /// A new connection (TCP, TLS, HTTP/1.1) per request.
    NewConnection,
    /// One long-lived HTTP/2 connection, replaced only when it ends.
    LongLived,
}

impl ClientKind {
    /// Both kinds.
    pub const ALL: [ClientKind; 2] = [ClientKind::NewConnection, ClientKind::LongLived];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            ClientKind::NewConnection => "new TLS connection per request",
            ClientKind::LongLived => "one long-lived HTTP/2 connection",
        }
    }
}

/// Where the clients send their requests: the endpoint's name (the TLS server name, which the
/// serving certificate holds), its port, and how the name is resolved.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// The published name.
    pub host: String,
    /// The port.
    pub port: u16,
    /// How the clients resolve it.
    pub resolution: Resolution,
}

/// How a client resolves the endpoint's name.
#[derive(Clone, Copy, Debug)]
pub enum Resolution {
    /// Resolved once, before the load (a load balancer's fixed address).
    Fixed(std::net::IpAddr),
    /// Asked of this DNS server at every new connection (no cache: a client that follows the
    /// records as soon as they change).
    Dns(SocketAddr),
}

/// A resolver asking one DNS server, for [`Resolution::Dns`].
struct AskServer(SocketAddr);

impl reqwest::dns::Resolve for AskServer {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let server = self.0;
        let name = name.as_str().to_string();
        Box::pin(async move {
            let ips = super::dns::lookup_a(server, &name)
                .await
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)?;
            let addrs: reqwest::dns::Addrs = Box::new(
                ips.into_iter()
                    .map(|ip| SocketAddr::new(std::net::IpAddr::V4(ip), 0))
                    .collect::<Vec<_>>()
                    .into_iter(),
            );
            Ok(addrs)
        })
    }
}

/// What one kind of client saw.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    /// Requests sent.
    pub sent: u64,
    /// Requests that failed.
    pub failed: u64,
    /// Requests answered with `Retry-After` and asked again (the long-lived kind only).
    pub retried: u64,
    /// The first failures: when (from the start of the load) and why.
    pub failures: Vec<(Duration, String)>,
    /// When the last failure was (from the start of the load).
    pub last_failure: Option<Duration>,
    /// Requests answered, but after more than [`SLOW`] (e.g. a connection attempt to a vanished
    /// host that timed out before the client tried the name's next address).
    pub slow: u64,
    /// The longest a request that did not fail took.
    pub slowest: Duration,
}

/// A request answered after longer than this is counted as slow.
pub const SLOW: Duration = Duration::from_secs(1);

/// How often the long-lived kind asks again after `Retry-After`.
pub const RETRIES: u32 = 3;

/// The seconds of an answer's `Retry-After` when the answer asks for a retry (429 or 5xx), at most
/// 10.
fn retry_after(r: &reqwest::Response) -> Option<Duration> {
    let status = r.status().as_u16();
    if status != 429 && status < 500 {
        return None;
    }
    let seconds: u64 = r
        .headers()
        .get("retry-after")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds.min(10)))
}

/// Failures kept per kind, with their messages.
const KEPT_FAILURES: usize = 10;

impl Tally {
    fn add(&mut self, other: Tally) {
        self.sent += other.sent;
        self.failed += other.failed;
        self.retried += other.retried;
        self.last_failure = self.last_failure.max(other.last_failure);
        self.slow += other.slow;
        self.slowest = self.slowest.max(other.slowest);
        for f in other.failures {
            if self.failures.len() < KEPT_FAILURES {
                self.failures.push(f);
            }
        }
        self.failures.sort_by_key(|f| f.0);
    }
}

/// The running clients.
pub struct Load {
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<(ClientKind, Tally)>>,
}

/// An error with its sources, one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The HTTP client of one client of `kind`.
fn client(kind: ClientKind, endpoint: &Endpoint, pki: &Pki) -> Result<reqwest::Client, BenchError> {
    let ca = reqwest::Certificate::from_pem(pki.ca_pem.as_bytes())
        .map_err(|e| BenchError::Setup(format!("the rollout CA: {e}")))?;
    let identity = reqwest::Identity::from_pem(pki.client_pem.as_bytes())
        .map_err(|e| BenchError::Setup(format!("the rollout client: {e}")))?;
    let builder = reqwest::Client::builder()
        .tls_certs_only([ca])
        .identity(identity)
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10));
    let builder = match endpoint.resolution {
        Resolution::Fixed(ip) => {
            builder.resolve(&endpoint.host, SocketAddr::new(ip, endpoint.port))
        }
        Resolution::Dns(server) => builder.dns_resolver(AskServer(server)),
    };
    let builder = match kind {
        ClientKind::NewConnection => builder.http1_only().pool_max_idle_per_host(0),
        ClientKind::LongLived => builder.http2_prior_knowledge(),
    };
    builder
        .build()
        .map_err(|e| BenchError::Setup(format!("a rollout client: {e}")))
}

impl Load {
    /// Start `per_kind` clients of each kind, each sending `rate` requests a second to `endpoint`.
    pub fn start(
        endpoint: &Endpoint,
        pki: &Pki,
        per_kind: usize,
        rate: f64,
    ) -> Result<Self, BenchError> {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let began = Instant::now();
        let url = format!(
            "https://{}:{}/api/v1/namespaces/default",
            endpoint.host, endpoint.port
        );
        let period = Duration::from_secs_f64(1.0 / rate.max(0.1));
        let mut tasks = Vec::new();
        for kind in ClientKind::ALL {
            for _ in 0..per_kind {
                let http = client(kind, endpoint, pki)?;
                let url = url.clone();
                let mut stopped = stopped.clone();
                tasks.push(tokio::spawn(async move {
                    let mut tally = Tally::default();
                    let mut tick = tokio::time::interval(period);
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    loop {
                        tokio::select! {
                            _ = stopped.changed() => break,
                            _ = tick.tick() => {}
                        }
                        tally.sent += 1;
                        let asked = Instant::now();
                        let mut answer = http.get(&url).send().await;
                        let mut attempts = 0;
                        while kind == ClientKind::LongLived && attempts < RETRIES {
                            let Some(wait) = answer.as_ref().ok().and_then(retry_after) else {
                                break;
                            };
                            attempts += 1;
                            tokio::time::sleep(wait).await;
                            answer = http.get(&url).send().await;
                        }
                        if attempts > 0 {
                            tally.retried += 1;
                        }
                        let failure = match answer {
                            Ok(r) if r.status().is_success() => {
                                // The body too: a response cut off is a failure.
                                match r.bytes().await {
                                    Ok(_) => None,
                                    Err(e) => Some(chain(&e)),
                                }
                            }
                            Ok(r) => Some(format!("HTTP {}", r.status())),
                            Err(e) => Some(chain(&e)),
                        };
                        let took = asked.elapsed();
                        if failure.is_none() {
                            tally.slowest = tally.slowest.max(took);
                            if took > SLOW {
                                tally.slow += 1;
                            }
                        }
                        if let Some(why) = failure {
                            tally.failed += 1;
                            tally.last_failure = Some(began.elapsed());
                            if tally.failures.len() < KEPT_FAILURES {
                                tally.failures.push((began.elapsed(), why));
                            }
                        }
                    }
                    (kind, tally)
                }));
            }
        }
        Ok(Load { stop, tasks })
    }

    /// Stop the clients (each ends its request in flight) and add up what each kind saw.
    pub async fn finish(self) -> BTreeMap<ClientKind, Tally> {
        let _ = self.stop.send(true);
        let mut out: BTreeMap<ClientKind, Tally> = BTreeMap::new();
        for task in self.tasks {
            if let Ok((kind, tally)) = task.await {
                out.entry(kind).or_default().add(tally);
            }
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn tallies_add_up_and_keep_the_first_failures_in_order() {
        let mut a = Tally {
            sent: 5,
            failed: 1,
            retried: 0,
            failures: vec![(Duration::from_secs(3), "late".into())],
            last_failure: Some(Duration::from_secs(9)),
            slow: 1,
            slowest: Duration::from_millis(1500),
        };
        a.add(Tally {
            sent: 7,
            failed: 2,
            retried: 1,
            failures: vec![
                (Duration::from_secs(1), "early".into()),
                (Duration::from_secs(2), "middle".into()),
            ],
            last_failure: Some(Duration::from_secs(4)),
            slow: 2,
            slowest: Duration::from_millis(900),
        });
        assert_eq!((a.sent, a.failed, a.retried), (12, 3, 1));
        assert_eq!(a.last_failure, Some(Duration::from_secs(9)));
        assert_eq!((a.slow, a.slowest), (3, Duration::from_millis(1500)));
        let whens: Vec<_> = a.failures.iter().map(|f| f.1.as_str()).collect();
        assert_eq!(whens, ["early", "middle", "late"]);
    }
}
