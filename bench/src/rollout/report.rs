//! The rollout's report: what each kind of client saw, and each replacement's times.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use super::load::{ClientKind, Tally};

/// One Machine replaced.
#[derive(Clone, Debug)]
pub struct Replacement {
    /// The Machine deleted.
    pub old: String,
    /// The Machine that took its place.
    pub new: String,
    /// From starting the new API server to its Machine `active` in the load balancer.
    pub new_active: Duration,
    /// From deleting the old Machine to Cluster API deleting its BenchMachine (capi-lb's hooks
    /// released, the Machine out of the load balancer).
    pub left: Duration,
    /// From SIGTERM to the old API server's exit.
    pub stopped: Duration,
    /// From deleting the old Machine to it being gone.
    pub gone: Duration,
}

/// A failover ([`super::Options::failover`]).
#[derive(Clone, Debug)]
pub struct Failover {
    /// The Machine whose API server was killed.
    pub machine: String,
    /// When, from the start of the load.
    pub killed_at: Duration,
    /// From the kill to capi-lb taking the Machine out (its state no longer `active`).
    pub taken_out: Duration,
    /// The state it was then (`failing`).
    pub state: String,
}

/// What a run measured.
#[derive(Clone, Debug)]
pub struct Report {
    /// The provider.
    pub provider: String,
    /// The published name the clients used.
    pub endpoint: String,
    /// Requests a second per client, clients per kind.
    pub rate: f64,
    pub clients_per_kind: usize,
    /// What each kind of client saw.
    pub tallies: BTreeMap<ClientKind, Tally>,
    /// The replacements, in order.
    pub replacements: Vec<Replacement>,
    /// How long the load ran.
    pub load: Duration,
    /// Whether capi-lb was kept out of the deletions ([`Options::unmanaged`]).
    pub unmanaged: bool,
    /// Whether a stopped server's host vanished ([`Options::black_hole`]).
    pub black_hole: bool,
    /// The failover, when the run was one.
    pub failover: Option<Failover>,
}

impl Report {
    /// Requests failed, all kinds.
    pub fn failed(&self) -> u64 {
        self.tallies.values().map(|t| t.failed).sum()
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// The report as the lines docs/benchmarks.md shows.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} through {} ({}{}): {} Machines replaced one at a time, {} client(s) of each kind at {} requests/s each, load for {}",
        if r.failover.is_some() {
            "failover"
        } else {
            "rollout"
        },
        r.endpoint,
        r.provider,
        match (r.unmanaged, r.black_hole) {
            (false, false) => "",
            (true, false) =>
                "; capi-lb kept out of the deletions: LoadBalancer paused, hooks removed",
            (false, true) => "; a stopped server's host vanishes (its address drops packets)",
            (true, true) =>
                "; capi-lb kept out of the deletions: LoadBalancer paused, hooks removed; a stopped server's host vanishes (its address drops packets)",
        },
        r.replacements.len(),
        r.clients_per_kind,
        r.rate,
        secs(r.load)
    );
    let _ = writeln!(
        out,
        "| client | requests | failed | answered Retry-After, asked again | answered after over 1 s | slowest answered |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
    for (kind, t) in &r.tallies {
        let retried = if *kind == ClientKind::LongLived {
            t.retried.to_string()
        } else {
            "(never asks again)".into()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {retried} | {} | {} |",
            kind.name(),
            t.sent,
            t.failed,
            t.slow,
            secs(t.slowest)
        );
    }
    if !r.replacements.is_empty() {
        let _ = writeln!(
            out,
            "| Machine replaced | new one active | left the load balancer | API server stopped | Machine gone |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|");
        for x in &r.replacements {
            let _ = writeln!(
                out,
                "| {} by {} | {} | {} | {} | {} |",
                x.old,
                x.new,
                secs(x.new_active),
                secs(x.left),
                secs(x.stopped),
                secs(x.gone)
            );
        }
    }
    if let Some(f) = &r.failover {
        let _ = writeln!(
            out,
            "failover: the API server of {} killed (SIGKILL) at {}; capi-lb took the Machine out ({}) {} later",
            f.machine,
            secs(f.killed_at),
            f.state,
            secs(f.taken_out)
        );
        for (kind, t) in &r.tallies {
            match t.last_failure {
                Some(last) => {
                    let _ = writeln!(
                        out,
                        "failover, {}: {} requests failed, the last {} after the kill",
                        kind.name(),
                        t.failed,
                        secs(last.saturating_sub(f.killed_at))
                    );
                }
                None => {
                    let _ = writeln!(out, "failover, {}: no request failed", kind.name());
                }
            }
        }
    }
    for (kind, t) in &r.tallies {
        for (at, why) in &t.failures {
            let _ = writeln!(out, "failed ({}) at {}: {why}", kind.name(), secs(*at));
        }
    }
    out
}
