//! The client capi-lb talks to its own API server with, and its watches: none can wait forever.
//!
//! kube's client has no read timeout of its own since kube 4, and a connection whose other end
//! stopped answering (an API server frozen, a load balancer in front of it that dropped the flow,
//! a NAT entry gone) sends nothing, not even an error: a request on it, or a watch, waited forever,
//! and a reconcile waiting on it held its work slot forever. So:
//!
//! - every connection has a connect, read and write timeout ([`bounded`]); the read timeout is
//!   the longest silence allowed on a connection, between any two reads;
//! - every watch asks the API server to end it after [`WATCH_SECONDS`] ([`watch_config`]), and
//!   kube's watcher resumes it from its last resourceVersion (a request to the watch cache, no
//!   list): a quiet watch is never silent for longer than that, so a silence of
//!   [`READ_TIMEOUT`] means a dead connection, which is dropped and the watch started again;
//! - a whole reconcile has a deadline, `--reconcile-timeout-seconds` (`run::within_deadline`).
//!
//! Clients to tenants' servers are built elsewhere, with stricter limits
//! (`capi_lb_providers::untrusted`).

use std::time::Duration;

use kube::runtime::watcher;

/// How long a new connection may take to be established (TCP and TLS).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request may take to be written.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a watch lasts before the API server ends it (and kube's watcher resumes it).
pub const WATCH_SECONDS: u32 = 55;
/// The longest silence on a connection: past it the connection is dead. Longer than a watch (a
/// quiet watch ends, not times out) and than any single answer of a healthy API server (its own
/// request timeout is 60 s).
pub const READ_TIMEOUT: Duration = Duration::from_secs(WATCH_SECONDS as u64 + 15);

/// `config` with capi-lb's connect, read and write timeouts.
pub fn bounded(mut config: kube::Config) -> kube::Config {
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(READ_TIMEOUT);
    // Counted from a request's sending, not from when its pooled connection went quiet: else a
    // connection idle for nearly that long fails the next request at once.
    config.reset_reader_on_write = true;
    config.write_timeout = Some(WRITE_TIMEOUT);
    config
}

/// `config` for a watch that the API server ends after [`WATCH_SECONDS`].
pub fn watch_config(config: watcher::Config) -> watcher::Config {
    config.timeout(WATCH_SECONDS)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_watch_ends_before_its_silence_counts_as_a_dead_connection() {
        assert!(Duration::from_secs(WATCH_SECONDS.into()) < READ_TIMEOUT);
        let config = bounded(kube::Config::new("https://127.0.0.1:6443".parse().unwrap()));
        assert_eq!(config.read_timeout, Some(READ_TIMEOUT));
        assert_eq!(config.connect_timeout, Some(CONNECT_TIMEOUT));
        assert_eq!(config.write_timeout, Some(WRITE_TIMEOUT));
        assert_eq!(
            watch_config(watcher::Config::default()).timeout,
            Some(WATCH_SECONDS)
        );
    }
}
