//! What an operator watches of the whole fleet, beside the work capi-lb does: the LoadBalancers by
//! condition and how long the longest not-Ready one has been so, the targets by state, the Machines
//! capi-lb's deletion hooks hold, drift repairs, and the time a LoadBalancer takes to become Ready.
//!
//! The gauges are a [`Census`] of the caches (the LoadBalancers' and the Machines'), taken every few
//! seconds by `run` outside any reconcile: no API request, and a fixed set of series (condition
//! types and statuses, target states), whatever the number of objects. The counter and the
//! histogram are fed where the events happen (`loadbalancer/`).
//!
//! Metrics (prefixed `capi_lb_`):
//! - `loadbalancers{condition,status}`: LoadBalancers whose condition `condition` has `status`
//!   (`True`, `False`, `Unknown`); every known condition type and status is exported, 0 when none;
//! - `longest_not_ready_seconds`: how long the LoadBalancer that has been not Ready the longest has
//!   been so (since its Ready condition's last transition, or its creation when it has none; paused
//!   ones left out); 0 when every one is Ready;
//! - `targets{state}`: (target, LoadBalancer) pairs by the state written on the target (Machines:
//!   the target kind capi-lb caches);
//! - `deletion_hook_held_machines`: Machines being deleted that a capi-lb deletion hook holds;
//! - `deletion_hook_longest_held_seconds`: since the deletion of the Machine held the longest;
//! - `deletion_hook_overdue_seconds`: the most a hold has outlasted its LoadBalancer's
//!   `spec.drainSeconds` (0 when none has);
//! - `drift_repairs_total{provider}`: load balancers found gone and created again (the Warning
//!   Event `LoadBalancerLost`), from 0 for every enabled provider;
//! - `time_to_ready_seconds`: a histogram of the seconds from a LoadBalancer's creation (or the
//!   change that made it not Ready) to its Ready condition becoming True, once per transition.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, PoisonError};

use capi_lb_api::LoadBalancer;
use capi_lb_api::constants::{
    PRE_DRAIN_HOOK_PREFIX, PRE_TERMINATE_HOOK_PREFIX, TARGET_KEY_PREFIX, TARGET_STATE_PREFIX,
    condition as c,
};
use capi_lb_api::target::{TargetState, target_key};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::Labels;

/// Every condition type capi-lb sets on a LoadBalancer (`loadbalancers{condition}`).
pub const CONDITIONS: [&str; 10] = [
    c::READY,
    c::INFRASTRUCTURE_READY,
    c::TARGETS_READY,
    c::ENDPOINT_PUBLISHED,
    c::PAUSED,
    c::CLUSTER_ENDPOINT,
    c::INFRASTRUCTURE_MIGRATION,
    c::SPEC_HONOURED,
    c::DNS_PUBLISHED,
    c::REACHABLE,
];

/// A condition's statuses (`loadbalancers{status}`).
pub const STATUSES: [&str; 3] = ["True", "False", "Unknown"];

/// How many LoadBalancers' Ready transitions [`Fleet::became_ready`] remembers (to count each
/// once); beyond it the memory is cleared, at the price of a transition counted twice at most.
const REMEMBERED: usize = 100_000;

/// The fleet's metrics (see the module docs).
pub struct Fleet {
    loadbalancers: Family<Labels, Gauge>,
    longest_not_ready: Gauge<f64, AtomicU64>,
    targets: Family<Labels, Gauge>,
    held: Gauge,
    longest_held: Gauge<f64, AtomicU64>,
    overdue: Gauge<f64, AtomicU64>,
    drift_repairs: Family<Labels, Counter>,
    time_to_ready: Histogram,
    /// By LoadBalancer UID, the start of the not-Ready spell last counted in `time_to_ready`.
    counted: Mutex<HashMap<String, Timestamp>>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet").finish_non_exhaustive()
    }
}

impl Fleet {
    /// The fleet's metrics, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let fleet = Self {
            loadbalancers: Family::default(),
            longest_not_ready: Gauge::default(),
            targets: Family::default(),
            held: Gauge::default(),
            longest_held: Gauge::default(),
            overdue: Gauge::default(),
            drift_repairs: Family::default(),
            // 0.5 s .. ~68 min.
            time_to_ready: Histogram::new(exponential_buckets(0.5, 2.0, 14)),
            counted: Mutex::default(),
        };
        registry.register(
            "loadbalancers",
            "LoadBalancers by condition type and status (True, False, Unknown)",
            fleet.loadbalancers.clone(),
        );
        registry.register(
            "longest_not_ready_seconds",
            "How long the LoadBalancer not Ready the longest has been so (paused ones left out); 0 when all are Ready",
            fleet.longest_not_ready.clone(),
        );
        registry.register(
            "targets",
            "Targets (Machines) by the state a LoadBalancer wrote on them, one per target and LoadBalancer",
            fleet.targets.clone(),
        );
        registry.register(
            "deletion_hook_held_machines",
            "Machines being deleted that a capi-lb deletion hook holds",
            fleet.held.clone(),
        );
        registry.register(
            "deletion_hook_longest_held_seconds",
            "Seconds since the deletion of the Machine a capi-lb deletion hook has held the longest; 0 when none is held",
            fleet.longest_held.clone(),
        );
        registry.register(
            "deletion_hook_overdue_seconds",
            "The most a capi-lb deletion hook has held a Machine beyond its LoadBalancer's spec.drainSeconds; 0 when none has",
            fleet.overdue.clone(),
        );
        registry.register(
            "drift_repairs",
            "Load balancers found gone behind capi-lb's back and created again (Event LoadBalancerLost), by provider",
            fleet.drift_repairs.clone(),
        );
        registry.register(
            "time_to_ready_seconds",
            "Seconds from a LoadBalancer's creation, or the change that made it not Ready, to its Ready condition becoming True",
            fleet.time_to_ready.clone(),
        );
        fleet
    }

    /// Provider `provider` is enabled: its drift repairs are exported from 0.
    pub fn provider_enabled(&self, provider: &str) {
        // Created at 0; the guard it returns is let go at once.
        let _ = self
            .drift_repairs
            .get_or_create(&vec![("provider", provider.to_string())]);
    }

    /// Provider `provider` created again a load balancer that was gone.
    pub fn drift_repaired(&self, provider: &str) {
        self.drift_repairs
            .get_or_create(&vec![("provider", provider.to_string())])
            .inc();
    }

    /// The LoadBalancer of UID `uid`, not Ready since `since`, is Ready at `now` (its status with
    /// Ready True written). Counted once per `since`: a reconcile that read an older status and
    /// wrote Ready True again does not count it twice.
    pub fn became_ready(&self, uid: &str, since: Timestamp, now: Timestamp) {
        {
            let mut counted = self.counted.lock().unwrap_or_else(PoisonError::into_inner);
            if counted.get(uid) == Some(&since) {
                return;
            }
            if counted.len() >= REMEMBERED {
                counted.clear();
            }
            counted.insert(uid.to_string(), since);
        }
        let seconds = now.duration_since(since).as_secs_f64().max(0.0);
        self.time_to_ready.observe(seconds);
    }

    /// The LoadBalancer of UID `uid` is gone: its Ready transitions are forgotten.
    pub fn forget(&self, uid: &str) {
        self.counted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
    }

    /// Set the gauges from `census`.
    pub fn publish(&self, census: &Census) {
        for condition in CONDITIONS {
            for status in STATUSES {
                let count = census
                    .conditions
                    .get(&(condition, status))
                    .copied()
                    .unwrap_or(0);
                self.loadbalancers
                    .get_or_create(&vec![
                        ("condition", condition.to_string()),
                        ("status", status.to_string()),
                    ])
                    .set(count);
            }
        }
        self.longest_not_ready.set(census.longest_not_ready);
        for state in TargetState::ALL {
            let count = census.targets.get(state.as_str()).copied().unwrap_or(0);
            self.targets
                .get_or_create(&vec![("state", state.as_str().to_string())])
                .set(count);
        }
        self.held.set(census.held);
        self.longest_held.set(census.longest_held);
        self.overdue.set(census.overdue);
    }
}

/// The fleet's gauges counted from the caches at one instant: first every LoadBalancer
/// ([`Census::loadbalancer`]), then every target ([`Census::target`]).
#[derive(Debug)]
pub struct Census {
    now: Timestamp,
    conditions: BTreeMap<(&'static str, &'static str), i64>,
    longest_not_ready: f64,
    targets: BTreeMap<&'static str, i64>,
    /// By target key, the LoadBalancer's drain (seconds).
    drains: HashMap<String, f64>,
    held: i64,
    longest_held: f64,
    overdue: f64,
}

impl Census {
    /// An empty census at `now`.
    pub fn new(now: Timestamp) -> Self {
        Self {
            now,
            conditions: BTreeMap::new(),
            longest_not_ready: 0.0,
            targets: BTreeMap::new(),
            drains: HashMap::new(),
            held: 0,
            longest_held: 0.0,
            overdue: 0.0,
        }
    }

    fn seconds_since(&self, then: Timestamp) -> f64 {
        self.now.duration_since(then).as_secs_f64().max(0.0)
    }

    /// Count `lb`.
    pub fn loadbalancer(&mut self, lb: &LoadBalancer) {
        let conditions = lb.status.as_ref().map(|s| &s.conditions[..]).unwrap_or(&[]);
        for found in conditions {
            let known = CONDITIONS.iter().find(|t| **t == found.type_);
            let status = STATUSES.iter().find(|s| **s == found.status);
            if let (Some(condition), Some(status)) = (known, status) {
                *self.conditions.entry((*condition, *status)).or_default() += 1;
            }
        }
        let paused = capi_lb_api::conditions::is_true(conditions, c::PAUSED);
        let ready = capi_lb_api::conditions::find(conditions, c::READY);
        if !paused && ready.is_none_or(|r| r.status != "True") {
            let since = match ready {
                Some(r) => Some(r.last_transition_time.0),
                None => lb.meta().creation_timestamp.as_ref().map(|t| t.0),
            };
            if let Some(since) = since {
                self.longest_not_ready = self.longest_not_ready.max(self.seconds_since(since));
            }
        }
        if let Some(namespace) = lb.meta().namespace.as_deref() {
            let drain = f64::from(lb.spec.drain_seconds.max(0));
            self.drains
                .insert(target_key(namespace, &lb.name_any()), drain);
        }
    }

    /// Count the target whose metadata is `meta`: its states, and its deletion held by capi-lb's
    /// hooks.
    pub fn target(&mut self, meta: &ObjectMeta) {
        let Some(annotations) = meta.annotations.as_ref() else {
            return;
        };
        let mut hooks = Vec::new();
        for (key, value) in annotations {
            if key.starts_with(TARGET_STATE_PREFIX)
                && let Some(state) = TargetState::parse(value)
            {
                *self.targets.entry(state.as_str()).or_default() += 1;
            }
            let hook = key
                .strip_prefix(PRE_DRAIN_HOOK_PREFIX)
                .or_else(|| key.strip_prefix(PRE_TERMINATE_HOOK_PREFIX));
            if let Some(name) = hook.filter(|n| n.starts_with(TARGET_KEY_PREFIX)) {
                hooks.push(name);
            }
        }
        let Some(deleted) = meta.deletion_timestamp.as_ref() else {
            return;
        };
        if hooks.is_empty() {
            return;
        }
        let held_for = self.seconds_since(deleted.0);
        self.held += 1;
        self.longest_held = self.longest_held.max(held_for);
        for name in hooks {
            // A hook whose LoadBalancer is gone has no drain left.
            let drain = self.drains.get(name).copied().unwrap_or(0.0);
            self.overdue = self.overdue.max(held_for - drain);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;
    use serde_json::json;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn time(seconds: i64) -> String {
        at(seconds).to_string()
    }

    fn lb(name: &str, created: i64, conditions: serde_json::Value) -> LoadBalancer {
        serde_json::from_value(json!({
            "apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1",
            "kind": "LoadBalancer",
            "metadata": {"name": name, "namespace": "ns", "uid": name,
                         "creationTimestamp": time(created)},
            "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                           "kind": "InMemoryLoadBalancer", "name": name},
                     "drainSeconds": 60},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    fn condition(type_: &str, status: &str, since: i64) -> serde_json::Value {
        json!({"type": type_, "status": status, "reason": "R", "message": "",
               "lastTransitionTime": time(since)})
    }

    fn machine(annotations: serde_json::Value, deleted: Option<i64>) -> ObjectMeta {
        serde_json::from_value(json!({
            "name": "m", "namespace": "ns", "annotations": annotations,
            "deletionTimestamp": deleted.map(time),
        }))
        .unwrap()
    }

    fn scrape(fleet: impl FnOnce(&Fleet)) -> String {
        let mut registry = Registry::with_prefix("capi_lb");
        fleet(&Fleet::register(&mut registry));
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        out
    }

    fn has(text: &str, line: &str) {
        assert!(
            text.lines().any(|l| l == line),
            "{line} missing from\n{text}"
        );
    }

    #[test]
    fn loadbalancers_are_counted_by_condition_and_the_longest_not_ready_is_measured() {
        let mut census = Census::new(at(1000));
        census.loadbalancer(&lb(
            "ready",
            0,
            json!([
                condition("Ready", "True", 10),
                condition("Paused", "False", 10)
            ]),
        ));
        census.loadbalancer(&lb(
            "broken",
            0,
            json!([
                condition("Ready", "False", 400),
                condition("InfrastructureReady", "False", 400)
            ]),
        ));
        // Paused: not counted as not Ready for long.
        census.loadbalancer(&lb(
            "paused",
            0,
            json!([
                condition("Ready", "False", 1),
                condition("Paused", "True", 1)
            ]),
        ));
        // Never reconciled: not Ready since its creation.
        census.loadbalancer(&lb("new", 700, json!([])));
        // A condition type this version does not know is not exported.
        census.loadbalancer(&lb(
            "odd",
            999,
            json!([
                condition("Ready", "True", 999),
                condition("Future", "True", 1)
            ]),
        ));
        let text = scrape(|f| f.publish(&census));
        has(
            &text,
            "capi_lb_loadbalancers{condition=\"Ready\",status=\"True\"} 2",
        );
        has(
            &text,
            "capi_lb_loadbalancers{condition=\"Ready\",status=\"False\"} 2",
        );
        has(
            &text,
            "capi_lb_loadbalancers{condition=\"Ready\",status=\"Unknown\"} 0",
        );
        has(
            &text,
            "capi_lb_loadbalancers{condition=\"InfrastructureReady\",status=\"False\"} 1",
        );
        has(
            &text,
            "capi_lb_loadbalancers{condition=\"Paused\",status=\"True\"} 1",
        );
        has(
            &text,
            "capi_lb_loadbalancers{condition=\"Reachable\",status=\"True\"} 0",
        );
        assert!(!text.contains("Future"), "{text}");
        // `broken` since 400 (600 s), `new` since its creation (300 s); `paused` is left out.
        has(&text, "capi_lb_longest_not_ready_seconds 600.0");
        assert_eq!(
            text.matches("capi_lb_loadbalancers{").count(),
            CONDITIONS.len() * STATUSES.len(),
            "a fixed set of series"
        );
    }

    #[test]
    fn all_ready_is_zero_seconds() {
        let mut census = Census::new(at(1000));
        census.loadbalancer(&lb("a", 0, json!([condition("Ready", "True", 10)])));
        let text = scrape(|f| f.publish(&census));
        has(&text, "capi_lb_longest_not_ready_seconds 0.0");
    }

    #[test]
    fn targets_are_counted_by_state_and_held_deletions_measured_against_their_drain() {
        let mut census = Census::new(at(1000));
        // Drains 60 s (see `lb`).
        census.loadbalancer(&lb("cp", 0, json!([])));
        let cp = target_key("ns", "cp");
        let gone = target_key("ns", "gone");
        let hooks = |key: &str| {
            json!({
                format!("{PRE_DRAIN_HOOK_PREFIX}{key}"): "capi-lb/x",
                format!("{PRE_TERMINATE_HOOK_PREFIX}{key}"): "capi-lb/x",
            })
        };
        let mut with = |mut annotations: serde_json::Value, extra: serde_json::Value, deleted| {
            for (k, v) in extra.as_object().unwrap() {
                annotations[k] = v.clone();
            }
            census.target(&machine(annotations, deleted));
        };
        with(
            hooks(&cp),
            json!({format!("{TARGET_STATE_PREFIX}{cp}"): "active"}),
            None,
        );
        with(
            hooks(&cp),
            json!({format!("{TARGET_STATE_PREFIX}{cp}"): "active",
                                 format!("{TARGET_STATE_PREFIX}{gone}"): "removed"}),
            None,
        );
        // Deleted 100 s ago, held by `cp` (drain 60: 40 s overdue).
        with(
            hooks(&cp),
            json!({format!("{TARGET_STATE_PREFIX}{cp}"): "removing"}),
            Some(900),
        );
        // Deleted 30 s ago, held by a LoadBalancer that is gone (no drain: 30 s overdue).
        with(hooks(&gone), json!({}), Some(970));
        // Being deleted without capi-lb's hooks (another owner's hook): not held by capi-lb.
        with(
            json!({format!("{PRE_DRAIN_HOOK_PREFIX}other-owner"): "x"}),
            json!({}),
            Some(0),
        );
        // Garbage states are not counted.
        with(
            json!({}),
            json!({format!("{TARGET_STATE_PREFIX}{cp}"): "bogus"}),
            None,
        );
        let text = scrape(|f| f.publish(&census));
        has(&text, "capi_lb_targets{state=\"active\"} 2");
        has(&text, "capi_lb_targets{state=\"removing\"} 1");
        has(&text, "capi_lb_targets{state=\"removed\"} 1");
        has(&text, "capi_lb_targets{state=\"failing\"} 0");
        assert_eq!(
            text.matches("capi_lb_targets{").count(),
            TargetState::ALL.len()
        );
        has(&text, "capi_lb_deletion_hook_held_machines 2");
        has(&text, "capi_lb_deletion_hook_longest_held_seconds 100.0");
        has(&text, "capi_lb_deletion_hook_overdue_seconds 40.0");
    }

    #[test]
    fn nothing_held_is_zero() {
        let census = Census::new(at(0));
        let text = scrape(|f| f.publish(&census));
        has(&text, "capi_lb_deletion_hook_held_machines 0");
        has(&text, "capi_lb_deletion_hook_longest_held_seconds 0.0");
        has(&text, "capi_lb_deletion_hook_overdue_seconds 0.0");
    }

    #[test]
    fn drift_repairs_start_at_zero_per_provider() {
        let text = scrape(|f| {
            f.provider_enabled("octavia");
            f.provider_enabled("kubedc");
            f.drift_repaired("kubedc");
        });
        has(&text, "capi_lb_drift_repairs_total{provider=\"octavia\"} 0");
        has(&text, "capi_lb_drift_repairs_total{provider=\"kubedc\"} 1");
    }

    #[test]
    fn time_to_ready_is_observed_once_per_transition() {
        let text = scrape(|f| {
            f.became_ready("a", at(0), at(3));
            // The same transition again (a stale read written once more): not counted.
            f.became_ready("a", at(0), at(5));
            // Not Ready again from 100, Ready at 160.
            f.became_ready("a", at(100), at(160));
            f.became_ready("b", at(0), at(1));
            f.forget("b");
        });
        has(&text, "capi_lb_time_to_ready_seconds_count 3");
        has(&text, "capi_lb_time_to_ready_seconds_sum 64.0");
        has(&text, "capi_lb_time_to_ready_seconds_bucket{le=\"4.0\"} 2");
        has(&text, "capi_lb_time_to_ready_seconds_bucket{le=\"64.0\"} 3");
    }
}
