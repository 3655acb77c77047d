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
//! - a whole reconcile has a deadline, `--reconcile-timeout-seconds` ([`within_deadline`]).
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

/// `reconcile` within `--reconcile-timeout-seconds`. Every request has its own timeouts
/// ([`bounded`]), but a reconcile makes many and waits on providers: past the deadline it is
/// dropped where it waits (its work slot given back with it), reported in a Warning Event
/// `ReconcileTimedOut` (sent apart, so that an API server that does not answer cannot hold the
/// slot through it) and retried with the object's back-off.
pub(super) async fn within_deadline<T>(
    ctx: &std::sync::Arc<crate::context::Context>,
    reference: k8s_openapi::api::core::v1::ObjectReference,
    reconcile: impl std::future::Future<Output = Result<T, crate::error::Error>>,
) -> Result<T, crate::error::Error> {
    let after = ctx.config.reconcile_timeout;
    match tokio::time::timeout(after, reconcile).await {
        Ok(result) => result,
        Err(_) => {
            let object = format!(
                "{} {}/{}",
                reference.kind.as_deref().unwrap_or_default(),
                reference.namespace.as_deref().unwrap_or_default(),
                reference.name.as_deref().unwrap_or_default()
            );
            // Counted as a failed reconcile (`capi_lb_reconciles_total{result="error"}`) by its
            // timer, dropped with it.
            let events = ctx.clone();
            tokio::spawn(async move {
                events
                    .events
                    .publish(
                        &reference,
                        true,
                        capi_lb_api::constants::event::RECONCILE_TIMED_OUT,
                        "Reconcile",
                        format!(
                            "this object's reconcile did not finish within {}s \
                             (--reconcile-timeout-seconds) and was abandoned; it is retried with \
                             back-off. The API server or a provider answered too slowly or not at all",
                            after.as_secs()
                        ),
                    )
                    .await;
            });
            Err(crate::error::Error::TimedOut { object, after })
        }
    }
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
