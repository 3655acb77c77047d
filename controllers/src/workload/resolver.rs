//! The DNS stub resolver of hostname-only load balancers (`spec.workloadEndpoints`), on
//! hickory-resolver: the servers of `/etc/resolv.conf` (in a Pod, the cluster's DNS), or the one
//! server of `--dns-resolver`. Each lookup asks A and AAAA at once, without a cache of its own
//! (the workload task keeps the answers and asks again at their TTL, see [`super::hostnames`]),
//! and takes at most [`DEADLINE`]; the name is asked as given, absolute (no search domains).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolveHosts, ResolverConfig};
use hickory_resolver::net::NetError;
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::{RData, RecordType};

use super::hostnames::{Answer, Resolve};

/// How long one server may take to answer one query.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a lookup (both families, retries included) may take.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// A resolver of A and AAAA records.
pub struct Dns {
    resolver: TokioResolver,
    /// Where it asks, for messages.
    server: String,
}

impl std::fmt::Debug for Dns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dns")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl Dns {
    /// A resolver asking `server` (UDP, then TCP for a truncated answer), or the servers of
    /// `/etc/resolv.conf` (and the hosts file, as the system does) when there is none.
    pub fn new(server: Option<SocketAddr>) -> Result<Self, String> {
        let provider = TokioRuntimeProvider::default();
        let (mut builder, name) = match server {
            Some(address) => {
                let mut config = NameServerConfig::udp_and_tcp(address.ip());
                for connection in &mut config.connections {
                    connection.port = address.port();
                }
                let builder = TokioResolver::builder_with_config(
                    ResolverConfig::from_parts(None, Vec::new(), vec![config]),
                    provider,
                );
                (builder, format!("the DNS server {address}"))
            }
            None => {
                let builder = TokioResolver::builder(provider).map_err(|e| {
                    format!("the system's DNS configuration (/etc/resolv.conf) cannot be used: {e}")
                })?;
                (builder, "the servers of /etc/resolv.conf".to_string())
            }
        };
        let options = builder.options_mut();
        options.cache_size = 0;
        options.timeout = QUERY_TIMEOUT;
        options.attempts = 1;
        if server.is_some() {
            options.use_hosts_file = ResolveHosts::Never;
        }
        let resolver = builder
            .build()
            .map_err(|e| format!("a resolver for {name} cannot be made: {e}"))?;
        Ok(Self {
            resolver,
            server: name,
        })
    }

    /// The A and AAAA addresses of `host`, with the smallest TTL of their records. A family
    /// without records adds nothing; `Err` when neither has any, or when a query failed (a partial
    /// answer is not taken for the whole), saying what the server answered (the caller names the
    /// hostname).
    pub async fn lookup(&self, host: &str) -> Result<Answer, String> {
        let name = if host.ends_with('.') {
            host.to_string()
        } else {
            format!("{host}.")
        };
        let both = async {
            tokio::join!(
                self.resolver.lookup(name.as_str(), RecordType::A),
                self.resolver.lookup(name.as_str(), RecordType::AAAA)
            )
        };
        let (a, aaaa) = tokio::time::timeout(DEADLINE, both).await.map_err(|_| {
            format!(
                "no answer from {} within {} s",
                self.server,
                DEADLINE.as_secs()
            )
        })?;
        let mut ips = Vec::new();
        let mut ttl: Option<u32> = None;
        let mut nx_domain = false;
        for (family, result) in [("A", a), ("AAAA", aaaa)] {
            match result {
                Ok(lookup) => {
                    for record in lookup.answers() {
                        let ip = match &record.data {
                            RData::A(a) => IpAddr::V4(a.0),
                            RData::AAAA(aaaa) => IpAddr::V6(aaaa.0),
                            _ => continue,
                        };
                        ips.push(ip);
                        ttl = Some(ttl.map_or(record.ttl, |t| t.min(record.ttl)));
                    }
                }
                Err(e) if e.is_no_records_found() => nx_domain |= e.is_nx_domain(),
                Err(e) => return Err(failure(family, &self.server, &e)),
            }
        }
        if ips.is_empty() {
            return Err(format!(
                "{} answered {}",
                self.server,
                if nx_domain {
                    "that the name does not exist (NXDOMAIN)"
                } else {
                    "no A or AAAA record"
                }
            ));
        }
        Ok(Answer {
            ips,
            ttl: Duration::from_secs(u64::from(ttl.unwrap_or(0))),
        })
    }

    /// This resolver as the workload task calls it.
    pub fn into_resolve(self) -> Resolve {
        let dns = Arc::new(self);
        Arc::new(move |host: String| {
            let dns = dns.clone();
            Box::pin(async move { dns.lookup(&host).await })
        })
    }
}

/// A resolver that cannot be made: every lookup says why.
pub fn broken(why: String) -> Resolve {
    Arc::new(move |_host: String| {
        let why = why.clone();
        Box::pin(async move { Err(format!("not looked up: {why}")) })
    })
}

fn failure(family: &str, server: &str, e: &NetError) -> String {
    format!("the {family} query to {server} failed: {e}")
}
