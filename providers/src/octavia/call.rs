//! One call of the provider in progress ([`Call`]): the OctaviaLoadBalancer as read, the status it
//! will report (built up as the call goes), what it changed, and how soon to look again when it
//! waits on Octavia (the re-look schedule of `relook`, measured from this LoadBalancer's wait).

use std::time::Duration;

use capi_lb_api::OctaviaLoadBalancerStatus;
use capi_lb_api::loadbalancer::LoadBalancerAddress;
use jiff::Timestamp;
use serde_json::{Map, Value};

use super::naming::{lb_name, object_tags};
use super::reason;
use super::relook::{Waits, key};
use super::settings::Infra;
use crate::provider::{LoadBalancerIdentity, Progress};

/// What one call is doing: the status it will report, and what it changed.
pub(super) struct Call<'a> {
    pub(super) identity: &'a LoadBalancerIdentity,
    pub(super) infra: Infra,
    pub(super) status: OctaviaLoadBalancerStatus,
    pub(super) changes: Vec<String>,
    pub(super) created: bool,
    now: Timestamp,
    waits: &'a Waits,
}

impl<'a> Call<'a> {
    pub(super) fn new(
        infra: Infra,
        identity: &'a LoadBalancerIdentity,
        now: Timestamp,
        waits: &'a Waits,
    ) -> Self {
        let status = infra.status.clone();
        Self {
            identity,
            infra,
            status,
            changes: Vec::new(),
            created: false,
            now,
            waits,
        }
    }

    /// The record of this call's wait on Octavia.
    fn wait_key(&self) -> String {
        key(&self.identity.uid, self.infra.uid.as_deref())
    }

    /// Octavia accepted a write: a new wait begins. How soon to look.
    pub(super) fn began(&self) -> Duration {
        self.waits.began(&self.wait_key(), self.now)
    }

    /// Octavia is still busy (members provisioning, a pool not there yet, a conflict): how soon to
    /// look again.
    pub(super) fn relook(&self) -> Duration {
        self.waits.waiting(&self.wait_key(), self.now, None)
    }

    pub(super) fn tags(&self) -> Vec<String> {
        object_tags(
            self.identity,
            self.infra.uid.as_deref(),
            &self.infra.spec.tags,
        )
    }

    pub(super) fn lb_name(&self) -> String {
        lb_name(self.identity)
    }

    pub(super) fn forget_lb(&mut self) {
        self.status = OctaviaLoadBalancerStatus {
            api_version: self.status.api_version.clone(),
            ..Default::default()
        };
    }

    pub(super) fn addresses(&self) -> Vec<LoadBalancerAddress> {
        self.status
            .floating_ip
            .iter()
            .chain(self.status.vip_address.iter())
            .take(1)
            .map(|a| LoadBalancerAddress::ip(a.clone()))
            .collect()
    }

    /// The status as fields to merge: cleared fields are sent as null.
    pub(super) fn status_map(&self) -> Map<String, Value> {
        let mut map = match serde_json::to_value(&self.status) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        };
        for key in [
            "loadBalancerID",
            "vipAddress",
            "vipPortID",
            "floatingIP",
            "floatingIPID",
            "provisioningStatus",
            "operatingStatus",
            "apiVersion",
            "pendingSince",
        ] {
            map.entry(key.to_string()).or_insert(Value::Null);
        }
        map.entry("listeners".to_string())
            .or_insert_with(|| Value::Array(Vec::new()));
        map
    }

    /// Pending on the load balancer's PENDING_* state, saying since when; looked at again on the
    /// schedule of this LoadBalancer's wait (after a restart: from `pendingSince`).
    pub(super) fn pending(&mut self, state: &str) -> Progress {
        let since = self.pending_since();
        let after = self.waits.waiting(&self.wait_key(), self.now, Some(since));
        self.pending_for(state, since, after)
    }

    /// Pending on the PENDING_* state a write just put the load balancer in (its create): a new
    /// wait begins.
    pub(super) fn pending_after_write(&mut self, state: &str) -> Progress {
        let since = self.pending_since();
        let after = self.began();
        self.pending_for(state, since, after)
    }

    fn pending_since(&self) -> Timestamp {
        self.status
            .pending_since
            .as_deref()
            .and_then(|s| s.parse::<Timestamp>().ok())
            .unwrap_or(self.now)
    }

    fn pending_for(&mut self, state: &str, since: Timestamp, after: Duration) -> Progress {
        self.status.pending_since = Some(since.to_string());
        let waited = self.now.duration_since(since).as_secs().max(0);
        Progress::pending_because(
            reason::LOAD_BALANCER_PENDING,
            format!(
                "Octavia load balancer {} is {state} since {since} ({waited}s)",
                self.status.load_balancer_id.as_deref().unwrap_or("?")
            ),
            after,
        )
    }
}
