//! Target health (`spec.targetHealth`) in a pass: which targets the prober probes, and which of them
//! are taken out for failing their probes (never every one that should serve).

use std::collections::BTreeMap;
use std::time::Duration;

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
        let asked = match &self.lb.spec.target_health {
            Some(asked) if !own_checks => asked,
            _ => {
                prober.forget_targets(&uid, &[]);
                return failing;
            }
        };
        let ports = reachability::tcp_ports(&self.lb.spec.ports, true);
        let seconds = |s: i32| Duration::from_secs(u64::try_from(s).unwrap_or(1));
        let threshold = |n: i32| u32::try_from(n).unwrap_or(1);
        let mut probed = Vec::new();
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
                    ca_secret: None,
                    period: seconds(asked.period_seconds),
                    timeout: seconds(asked.timeout_seconds),
                    thresholds: Some((
                        threshold(asked.failure_threshold),
                        threshold(asked.success_threshold),
                    )),
                },
            );
            probed.push(observed.name.clone());
            if let Some((false, finding)) = prober.target_health(&uid, &observed.name) {
                failing.insert(
                    observed.name.clone(),
                    finding.map(|f| f.message).unwrap_or_default(),
                );
            }
        }
        let keep: Vec<&str> = probed.iter().map(String::as_str).collect();
        prober.forget_targets(&uid, &keep);
        // Never every serving target at once: if all fail, all stay (and TargetsReady says so).
        if failing.len() < probed.len() {
            for target in targets.iter_mut() {
                if failing.contains_key(&target.observed.name) {
                    target.observed.unhealthy = true;
                }
            }
        }
        failing
    }
}
