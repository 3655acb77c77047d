//! The metrics of the endpoint probes (`spec.reachability`): `endpoint_reachable` and
//! `endpoint_probes_total`.

use super::Metrics;

impl Metrics {
    /// Record a probe of LoadBalancer `namespace/name`'s endpoint.
    /// `result` is the `Reachable` condition's reason.
    pub fn probed(&self, namespace: &str, name: &str, reachable: bool, result: &str) {
        self.reachable
            .get_or_create(&vec![
                ("namespace", namespace.to_string()),
                ("name", name.to_string()),
            ])
            .set(i64::from(reachable));
        self.probes
            .get_or_create(&vec![("result", result.to_string())])
            .inc();
    }

    /// LoadBalancer `namespace/name` is no longer probed: its gauge goes.
    pub fn forget_reachable(&self, namespace: &str, name: &str) {
        self.reachable.remove(&vec![
            ("namespace", namespace.to_string()),
            ("name", name.to_string()),
        ]);
    }
}
