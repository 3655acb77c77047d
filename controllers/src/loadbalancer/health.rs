//! Target health (`spec.targetHealth`) in a pass: which targets the prober probes, and which of them
//! are taken out for failing their probes (never every one that should serve). A load balancer made
//! of DNS records is probed with the defaults when `spec.targetHealth` is unset, and a target whose
//! health is not known yet is kept as it is: its record stays if it has one, none is made.

use std::collections::BTreeMap;
use std::time::Duration;

use capi_lb_api::loadbalancer::{TargetHealth, TargetProbe};
use capi_lb_api::target::TargetState;
use kube::ResourceExt;

use super::targets::{Pass, TargetObject};
use crate::reachability;

impl Pass<'_> {
    /// `spec.targetHealth`: have every target that should serve probed (the prober's own task
    /// probes them; never here), and mark those that failed their threshold `unhealthy`, unless
    /// that would take every serving target out (then all are kept). Returns the failing targets
    /// with what their last probe found. Nothing where the provider checks its members itself.
    pub(super) fn probe_targets(&self, targets: &mut [TargetObject]) -> BTreeMap<String, String> {
        let mut failing = BTreeMap::new();
        let Some(prober) = &self.ctx.prober else {
            return failing;
        };
        let uid = self.lb.uid().unwrap_or_default();
        let infra = &self.lb.spec.infrastructure_ref;
        let own_checks = self
            .ctx
            .providers
            .get(&infra.api_group, &infra.kind)
            .is_some_and(|p| p.entry.checks_members);
        // A load balancer made of DNS records is probed by default: nothing else takes a dead
        // address out of the name.
        let default = TargetHealth::default();
        let asked = match (&self.lb.spec.target_health, self.records) {
            (Some(asked), _) if !own_checks => asked,
            (None, true) if !own_checks => &default,
            _ => {
                prober.forget_targets(&uid, &[]);
                return failing;
            }
        };
        let mut ports = reachability::tcp_ports(&self.lb.spec.ports, true);
        if asked.probe == TargetProbe::Tcp {
            for port in &mut ports {
                port.readyz = false;
            }
        }
        let seconds = |s: i32| Duration::from_secs(u64::try_from(s).unwrap_or(1));
        let threshold = |n: i32| u32::try_from(n).unwrap_or(1);
        let mut probed = Vec::new();
        let mut unproven = Vec::new();
        for target in targets.iter() {
            let observed = &target.observed;
            let Some(address) = observed.address.clone().filter(|_| observed.would_serve()) else {
                continue;
            };
            prober.want_target(
                &uid,
                &observed.name,
                reachability::Wanted {
                    namespace: self.lb.namespace().unwrap_or_default(),
                    name: self.lb.name_any(),
                    host: address,
                    ports: ports.clone(),
                    ca_secret: reachability::cluster_ca_secret(self.lb.spec.cluster_name.as_ref()),
                    period: seconds(asked.period_seconds),
                    timeout: seconds(asked.timeout_seconds),
                    thresholds: Some((
                        threshold(asked.failure_threshold),
                        threshold(asked.success_threshold),
                    )),
                },
            );
            probed.push(observed.name.clone());
            match prober.target_health(&uid, &observed.name) {
                Some((false, finding)) => {
                    failing.insert(
                        observed.name.clone(),
                        finding.map(|f| f.message).unwrap_or_default(),
                    );
                }
                // Records change only on what was probed: a target not probed yet (after a
                // restart too), or failing below its threshold, stays as it is.
                Some((true, Some(finding))) if finding.reachable => {}
                _ if self.records => unproven.push(observed.name.clone()),
                _ => {}
            }
        }
        let keep: Vec<&str> = probed.iter().map(String::as_str).collect();
        prober.forget_targets(&uid, &keep);
        // Never every serving target at once: if all fail, all stay (and TargetsReady says so).
        // Records of DNS are never rolled back to targets taken out before: those that are
        // records stay, the others stay out.
        let all_fail = failing.len() >= probed.len();
        for target in targets.iter_mut() {
            let observed = &mut target.observed;
            let fails = failing.contains_key(&observed.name);
            let member = matches!(
                observed.recorded,
                Some(TargetState::Active | TargetState::Adding)
            );
            // Every one fails: a load balancer keeps them all; DNS records keep the last ones
            // that were in (the others stay out).
            observed.unhealthy = fails && (!all_fail || (self.records && !member));
            observed.unproven =
                unproven.contains(&observed.name) || (self.records && all_fail && fails && member);
        }
        failing
    }
}
