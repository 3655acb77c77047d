//! A hostname-only load balancer's addresses for `spec.workloadEndpoints`: the workload task
//! resolves each hostname (A and AAAA, through [`super::resolver`]) and again when its answer's
//! TTL runs out, clamped to [`TTL_FLOOR`]..=[`TTL_CAP`]. A lookup that fails or answers no
//! address keeps the last answer (it is reported, and asked again after [`RETRY`]); a hostname
//! that never answered contributes nothing, and an empty list is never published. What is kept
//! per hostname and how the lookups become the addresses and the words of the finding is here,
//! pure but for [`refresh`], which calls the resolver.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use capi_lb_api::loadbalancer::{AddressType, LoadBalancerAddress};

/// The shortest time an answer is used before it is asked again (a TTL of 0 or 1 s would have
/// the task ask all the time).
pub const TTL_FLOOR: Duration = Duration::from_secs(5);
/// The longest: a record with a TTL of a day is still looked up every five minutes, so a change
/// its owner made without lowering the TTL first is followed within that.
pub const TTL_CAP: Duration = Duration::from_secs(300);
/// How soon a lookup that failed (or answered no address) is made again.
pub const RETRY: Duration = Duration::from_secs(10);

/// A resolver's answer for a hostname: its A and AAAA addresses and the TTL of the records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The addresses, both families.
    pub ips: Vec<IpAddr>,
    /// The smallest TTL of the records (unclamped).
    pub ttl: Duration,
}

/// Resolves a hostname (A and AAAA); `Err` says why not (the caller names the hostname).
pub type Resolve = Arc<
    dyn Fn(String) -> futures::future::BoxFuture<'static, Result<Answer, String>> + Send + Sync,
>;

/// The address policy for resolved addresses: `(namespace, provider, ips)` to the refused ones,
/// each as `<address> (<rule>)` (the `run` command makes it from [`crate::policy`], a floor
/// above).
pub type Refuse = Arc<dyn Fn(&str, &str, &[IpAddr]) -> Vec<String> + Send + Sync>;

/// How the workload task turns hostnames into addresses.
#[derive(Clone)]
pub struct Hostnames {
    /// The resolver.
    pub resolve: Resolve,
    /// The address policy every published address passes.
    pub refuse: Refuse,
}

/// The TTL an answer is used for.
pub fn clamp(ttl: Duration) -> Duration {
    ttl.clamp(TTL_FLOOR, TTL_CAP)
}

/// What is known of one hostname.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Named {
    /// The last answer (sorted, unique); empty when it never answered.
    pub ips: Vec<IpAddr>,
    /// When to ask again.
    pub refresh: Instant,
    /// Why the last lookup gave no address (the last answer is kept), if it did not.
    pub failure: Option<String>,
}

/// The state of a hostname after a lookup that gave `result` at `now`, `previous` its state
/// before: a new answer replaces the old one; a failure or an answer without addresses keeps it.
pub fn update(previous: Option<&Named>, result: Result<Answer, String>, now: Instant) -> Named {
    let failure = match result {
        Ok(answer) if !answer.ips.is_empty() => {
            let ips: BTreeSet<IpAddr> = answer.ips.into_iter().collect();
            return Named {
                ips: ips.into_iter().collect(),
                refresh: now + clamp(answer.ttl),
                failure: None,
            };
        }
        Ok(_) => "answered no A or AAAA record".to_string(),
        Err(e) => e,
    };
    Named {
        ips: previous.map(|p| p.ips.clone()).unwrap_or_default(),
        refresh: now + RETRY,
        failure: Some(failure),
    }
}

/// The hostnames among `addresses`, in order, each once.
pub fn hostnames(addresses: &[LoadBalancerAddress]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    addresses
        .iter()
        .filter(|a| a.type_ == AddressType::Hostname)
        .filter(|a| seen.insert(a.address.clone()))
        .map(|a| a.address.clone())
        .collect()
}

/// Look up the hostnames of `wanted` that are due at `now` (new ones, and those whose answer
/// expired), with `resolve`; `names` keeps each hostname's state and loses those no longer wanted.
pub async fn refresh(
    resolve: &Resolve,
    wanted: &[String],
    names: &mut BTreeMap<String, Named>,
    now: Instant,
) {
    names.retain(|name, _| wanted.contains(name));
    let due: Vec<String> = wanted
        .iter()
        .filter(|name| names.get(*name).is_none_or(|n| n.refresh <= now))
        .cloned()
        .collect();
    let answers = futures::future::join_all(due.iter().map(|name| resolve(name.clone()))).await;
    let answered = Instant::now();
    for (name, result) in due.into_iter().zip(answers) {
        let named = update(names.get(&name), result, answered);
        if let Some(failure) = &named.failure {
            tracing::debug!(hostname = %name, error = %failure, kept = named.ips.len(), "a load balancer's hostname did not resolve");
        }
        names.insert(name, named);
    }
}

/// When the first of `names` is to be asked again.
pub fn next_refresh(names: &BTreeMap<String, Named>) -> Option<Instant> {
    names.values().map(|n| n.refresh).min()
}

/// The addresses of `addresses` with each hostname replaced by its last answer in `names`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    /// The load balancer's IP addresses and the hostnames' answers.
    pub ips: Vec<IpAddr>,
    /// The hostnames' answers alone (what the address policy has not seen yet).
    pub answered: Vec<IpAddr>,
    /// `<hostname> resolves to <ips>`, for each hostname whose last lookup answered.
    pub resolved: Vec<String>,
    /// What went wrong, for each hostname whose last lookup did not answer.
    pub failed: Vec<String>,
}

/// The addresses of `addresses` (IPs, and hostnames as `names` knows them).
pub fn resolved(addresses: &[LoadBalancerAddress], names: &BTreeMap<String, Named>) -> Resolved {
    let mut out = Resolved::default();
    for address in addresses {
        if address.type_ == AddressType::Ip
            && let Ok(ip) = address.address.parse()
        {
            out.ips.push(ip);
        }
    }
    for name in hostnames(addresses) {
        let Some(named) = names.get(&name) else {
            continue;
        };
        out.ips.extend(&named.ips);
        out.answered.extend(&named.ips);
        match (&named.failure, named.ips.is_empty()) {
            (None, _) => out
                .resolved
                .push(format!("{name} resolves to {}", join(&named.ips))),
            (Some(e), true) => out
                .failed
                .push(format!("{name} does not resolve ({e}) and never did")),
            (Some(e), false) => out.failed.push(format!(
                "{name} did not resolve ({e}): its last answer, {}, is kept",
                join(&named.ips)
            )),
        }
    }
    out
}

/// `a, b, c`.
pub fn join(ips: &[IpAddr]) -> String {
    ips.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn answer(list: &[&str], ttl: u64) -> Result<Answer, String> {
        Ok(Answer {
            ips: ips(list),
            ttl: Duration::from_secs(ttl),
        })
    }

    #[test]
    fn the_ttl_is_clamped_to_the_floor_and_the_cap() {
        assert_eq!(clamp(Duration::ZERO), TTL_FLOOR);
        assert_eq!(clamp(Duration::from_secs(30)), Duration::from_secs(30));
        assert_eq!(clamp(Duration::from_secs(86_400)), TTL_CAP);
    }

    #[test]
    fn an_answer_replaces_the_last_and_a_failure_or_no_address_keeps_it() {
        let now = Instant::now();
        let first = update(
            None,
            answer(&["2001:db8::5", "203.0.113.5", "203.0.113.5"], 30),
            now,
        );
        assert_eq!(first.ips, ips(&["203.0.113.5", "2001:db8::5"]));
        assert_eq!(first.refresh, now + Duration::from_secs(30));
        assert_eq!(first.failure, None);

        let failed = update(Some(&first), Err("timed out".into()), now);
        assert_eq!(failed.ips, first.ips);
        assert_eq!(failed.refresh, now + RETRY);
        assert_eq!(failed.failure.as_deref(), Some("timed out"));

        let empty = update(Some(&failed), answer(&[], 30), now);
        assert_eq!(empty.ips, first.ips);
        assert_eq!(
            empty.failure.as_deref(),
            Some("answered no A or AAAA record")
        );

        let moved = update(Some(&empty), answer(&["198.51.100.9"], 1), now);
        assert_eq!(moved.ips, ips(&["198.51.100.9"]));
        assert_eq!(moved.refresh, now + TTL_FLOOR);

        let never = update(None, Err("NXDOMAIN".into()), now);
        assert!(never.ips.is_empty());
    }

    fn lb_addresses(list: &[(&str, bool)]) -> Vec<LoadBalancerAddress> {
        list.iter()
            .map(|(a, hostname)| {
                if *hostname {
                    LoadBalancerAddress::hostname(a.to_string())
                } else {
                    LoadBalancerAddress::ip(a.to_string())
                }
            })
            .collect()
    }

    #[test]
    fn hostnames_become_their_last_answers_and_the_finding_says_which_failed() {
        let now = Instant::now();
        let addresses = lb_addresses(&[
            ("192.0.2.1", false),
            ("a.example", true),
            ("b.example", true),
            ("c.example", true),
            ("a.example", true),
        ]);
        assert_eq!(
            hostnames(&addresses),
            ["a.example", "b.example", "c.example"]
        );
        let mut names = BTreeMap::new();
        names.insert(
            "a.example".to_string(),
            update(None, answer(&["203.0.113.1"], 60), now),
        );
        let b = update(None, answer(&["2001:db8::b"], 60), now);
        names.insert(
            "b.example".to_string(),
            update(Some(&b), Err("SERVFAIL".into()), now),
        );
        names.insert(
            "c.example".to_string(),
            update(None, Err("NXDOMAIN".into()), now),
        );
        let r = resolved(&addresses, &names);
        assert_eq!(r.ips, ips(&["192.0.2.1", "203.0.113.1", "2001:db8::b"]));
        assert_eq!(r.answered, ips(&["203.0.113.1", "2001:db8::b"]));
        assert_eq!(r.resolved, ["a.example resolves to 203.0.113.1"]);
        assert_eq!(
            r.failed,
            [
                "b.example did not resolve (SERVFAIL): its last answer, 2001:db8::b, is kept",
                "c.example does not resolve (NXDOMAIN) and never did"
            ]
        );
        assert_eq!(next_refresh(&names), Some(now + RETRY));
    }

    #[tokio::test]
    async fn only_due_hostnames_are_looked_up_and_unwanted_ones_are_dropped() {
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = asked.clone();
        let resolve: Resolve = Arc::new(move |name: String| {
            log.lock().unwrap().push(name);
            Box::pin(async { answer(&["203.0.113.7"], 60) })
        });
        let mut names = BTreeMap::new();
        let now = Instant::now();
        names.insert(
            "gone.example".to_string(),
            update(None, answer(&["203.0.113.1"], 60), now),
        );
        names.insert(
            "fresh.example".to_string(),
            update(None, answer(&["203.0.113.2"], 60), now),
        );
        let mut expired = update(None, answer(&["203.0.113.3"], 60), now);
        expired.refresh = now;
        names.insert("expired.example".to_string(), expired);
        let wanted = [
            "fresh.example".to_string(),
            "expired.example".to_string(),
            "new.example".to_string(),
        ];
        refresh(&resolve, &wanted, &mut names, now).await;
        let mut asked = asked.lock().unwrap().clone();
        asked.sort();
        assert_eq!(asked, ["expired.example", "new.example"]);
        assert_eq!(
            names.keys().collect::<Vec<_>>(),
            ["expired.example", "fresh.example", "new.example"]
        );
        assert_eq!(names["expired.example"].ips, ips(&["203.0.113.7"]));
        assert_eq!(names["fresh.example"].ips, ips(&["203.0.113.2"]));
    }
}
