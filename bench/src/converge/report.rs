//! What `capi-lb-bench converge` reports: the counts of the controller's requests, the figures of
//! a run, and their text.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::scrape::Scrape;
use capi_lb::telemetry::kube_requests::is_write;

/// Counts taken from the controller's metrics over a phase.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts {
    /// Reconciles of the LoadBalancer controller.
    pub reconciles: f64,
    /// Reconciles of the `-ext` publisher for Services.
    pub service_reconciles: f64,
    /// Kubernetes API requests by `verb resource`.
    pub requests: BTreeMap<String, f64>,
}

impl Counts {
    /// Requests of any kind (watch requests included: each one opens or re-opens a watch).
    pub fn total_requests(&self) -> f64 {
        self.requests.values().fold(0.0, |a, b| a + b)
    }

    /// Writes (create, update, patch, delete), Events included.
    pub fn writes(&self) -> f64 {
        self.requests
            .iter()
            .filter(|(k, _)| k.split_once(' ').is_some_and(|(verb, _)| is_write(verb)))
            .map(|(_, v)| v)
            .fold(0.0, |a, b| a + b)
    }

    pub(crate) fn of(scrape: &Scrape) -> Self {
        let mut requests = BTreeMap::new();
        for s in scrape.samples("capi_lb_kube_requests_total") {
            let key = format!(
                "{} {}",
                s.labels.get("verb").map_or("", String::as_str),
                s.labels.get("resource").map_or("", String::as_str)
            );
            *requests.entry(key).or_insert(0.0) += s.value;
        }
        Self {
            reconciles: scrape.sum(
                "capi_lb_reconciles_total",
                &[("controller", "loadbalancer")],
            ),
            service_reconciles: scrape.sum(
                "capi_lb_reconciles_total",
                &[("controller", "external-endpoint")],
            ),
            requests,
        }
    }

    /// What happened between `before` and `self`.
    pub(crate) fn since(&self, before: &Counts) -> Counts {
        let mut requests = self.requests.clone();
        for (k, v) in requests.iter_mut() {
            *v -= before.requests.get(k).copied().unwrap_or(0.0);
        }
        requests.retain(|_, v| *v != 0.0);
        Counts {
            reconciles: self.reconciles - before.reconciles,
            service_reconciles: self.service_reconciles - before.service_reconciles,
            requests,
        }
    }
}

/// The warm restart.
#[derive(Clone, Debug, PartialEq)]
pub struct Restart {
    /// From the new process' start to every LoadBalancer reconciled once with nothing in flight.
    pub resynced: Duration,
    /// What the new process did until the end of an idle window after that.
    pub counts: Counts,
    /// Its peak resident memory.
    pub peak_rss_bytes: u64,
}

/// What one run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// LoadBalancers.
    pub loadbalancers: usize,
    /// Machines per LoadBalancer.
    pub machines: usize,
    /// From the first write to the last object created.
    pub created: Duration,
    /// From the first write to every LoadBalancer Ready.
    pub ready: Duration,
    /// From the first write to every target of every LoadBalancer active.
    pub active: Duration,
    /// What the controller did from its start to convergence.
    pub converge: Counts,
    /// What it did in the idle window after convergence.
    pub idle: Counts,
    /// LoadBalancer changes seen by the benchmark's watch during the idle window.
    pub idle_events: usize,
    /// Peak resident memory of the controller by the end of the idle window.
    pub peak_rss_bytes: u64,
    /// CPU time of the controller by the end of the idle window.
    pub cpu_seconds: f64,
    /// The warm restart, when measured.
    pub restart: Option<Restart>,
    /// Deleting everything through the controller: how long the LoadBalancers took to go, or why
    /// the cleanup failed (the figures above still stand).
    pub cleanup: Option<Result<Duration, String>>,
}

/// The report as the lines `docs/benchmarks.md` shows.
pub fn render(r: &Report) -> String {
    let n = r.loadbalancers.max(1) as f64;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let mut out = String::new();
    let line = |out: &mut String, s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(
        &mut out,
        format!(
            "{} LoadBalancers x {} Machines: created in {:.1} s, all Ready at {:.1} s, all targets active at {:.1} s",
            r.loadbalancers,
            r.machines,
            r.created.as_secs_f64(),
            r.ready.as_secs_f64(),
            r.active.as_secs_f64()
        ),
    );
    line(
        &mut out,
        format!(
            "converge: {:.2} reconciles/LoadBalancer, {:.1} API requests/LoadBalancer ({:.1} writes), {:.0} -ext Service reconciles",
            r.converge.reconciles / n,
            r.converge.total_requests() / n,
            r.converge.writes() / n,
            r.converge.service_reconciles
        ),
    );
    for (k, v) in &r.converge.requests {
        line(&mut out, format!("  {k:<40} {:>9.0}  {:>6.2}/LB", v, v / n));
    }
    line(
        &mut out,
        format!(
            "idle: {:.0} writes, {:.0} reconciles, {} LoadBalancer changes seen",
            r.idle.writes(),
            r.idle.reconciles + r.idle.service_reconciles,
            r.idle_events
        ),
    );
    for (k, v) in r
        .idle
        .requests
        .iter()
        .filter(|(k, _)| k.split_once(' ').is_some_and(|(verb, _)| is_write(verb)))
    {
        line(&mut out, format!("  {k:<40} {v:>9.0}"));
    }
    line(
        &mut out,
        format!(
            "controller: peak RSS {:.1} MiB, CPU {:.1} s",
            mib(r.peak_rss_bytes),
            r.cpu_seconds
        ),
    );
    if let Some(w) = &r.restart {
        line(
            &mut out,
            format!(
                "warm restart: all reconciled {:.1} s after start, {:.0} writes, {:.0} reconciles, {:.0} requests, peak RSS {:.1} MiB",
                w.resynced.as_secs_f64(),
                w.counts.writes(),
                w.counts.reconciles,
                w.counts.total_requests(),
                mib(w.peak_rss_bytes)
            ),
        );
        for (k, v) in w
            .counts
            .requests
            .iter()
            .filter(|(k, _)| k.split_once(' ').is_some_and(|(verb, _)| is_write(verb)))
        {
            line(&mut out, format!("  {k:<40} {v:>9.0}"));
        }
    }
    match &r.cleanup {
        Some(Ok(c)) => line(
            &mut out,
            format!("cleanup: LoadBalancers gone in {:.1} s", c.as_secs_f64()),
        ),
        Some(Err(e)) => line(&mut out, format!("cleanup: failed: {e}")),
        None => {}
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_cleanup_is_reported_beside_the_figures() {
        let mut report = Report {
            loadbalancers: 3000,
            machines: 3,
            created: Duration::from_secs(56),
            ready: Duration::from_secs(202),
            active: Duration::from_secs(202),
            converge: Counts::default(),
            idle: Counts::default(),
            idle_events: 0,
            peak_rss_bytes: 200 << 20,
            cpu_seconds: 60.0,
            restart: None,
            cleanup: Some(Err("delete the LoadBalancers: timed out".into())),
        };
        let text = render(&report);
        assert!(text.contains("all Ready at 202.0 s"), "{text}");
        assert!(
            text.contains("cleanup: failed: delete the LoadBalancers: timed out"),
            "{text}"
        );
        report.cleanup = Some(Ok(Duration::from_secs(113)));
        assert!(render(&report).contains("cleanup: LoadBalancers gone in 113.0 s"));
    }
}
