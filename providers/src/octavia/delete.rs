//! Deleting what a LoadBalancer has in the cloud: its floating IP first, then every Octavia load
//! balancer it owns (with a cascade delete), waiting until Octavia has deleted them (looked at again
//! on the re-look schedule, measured from the delete); and forgetting what the provider cached for
//! it once nothing is left.

use std::sync::Arc;

use jiff::Timestamp;

use super::OctaviaProvider;
use super::api::{Request, Session};
use super::documents::LbRecord;
use super::naming::owned;
use super::reason;
use super::relook;
use super::settings::Infra;
use super::stop::Stop;
use crate::provider::{LoadBalancerIdentity, Progress};

impl OctaviaProvider {
    /// `delete`: `Done` once nothing of the LoadBalancer is left in the cloud.
    pub(super) async fn delete_inner(
        &self,
        session: &Session,
        identity: &LoadBalancerIdentity,
        infra: &Infra,
        now: Timestamp,
        changes: &mut Vec<String>,
    ) -> Result<Progress, Stop> {
        let found = self.find_for_delete(session, identity, infra).await?;
        // The floating IP first: a given one is disassociated (kept), an allocated one released.
        // Done before the delete was sent; not again while Octavia is deleting.
        let deleting = !found.is_empty()
            && found
                .iter()
                .all(|r| r.provisioning_status == "PENDING_DELETE");
        if !deleting && (infra.spec.floating_ip.is_some() || infra.status.floating_ip_id.is_some())
        {
            self.release_all(session, identity, infra, changes).await?;
        }
        if found.is_empty() {
            return Ok(Progress::Done);
        }
        let mut sent = false;
        for record in &found {
            match record.provisioning_status.as_str() {
                "PENDING_DELETE" => {}
                s if s.starts_with("PENDING_") => {}
                _ => {
                    self.delete_lb(session, &record.id).await?;
                    changes.push(format!("deleting Octavia load balancer {}", record.id));
                    sent = true;
                }
            }
        }
        // A delete sent begins a new wait; otherwise Octavia is still deleting (or busy first).
        let wait = relook::key(&identity.uid, infra.uid.as_deref());
        let after = if sent {
            self.waits.began(&wait, now)
        } else {
            self.waits.waiting(&wait, now, None)
        };
        Ok(Progress::pending_because(
            reason::LOAD_BALANCER_PENDING,
            format!(
                "waiting for Octavia to delete {}",
                found
                    .iter()
                    .map(|r| format!("{} ({})", r.id, r.provisioning_status))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            after,
        ))
    }

    /// The load balancers to delete: those found by their ownership tags, and the one in the
    /// status if it is ours and was not found that way.
    async fn find_for_delete(
        &self,
        session: &Session,
        identity: &LoadBalancerIdentity,
        infra: &Infra,
    ) -> Result<Vec<LbRecord>, Stop> {
        let mut found = self
            .find_owned(session, identity, infra.uid.as_deref())
            .await?;
        if let Some(id) = &infra.status.load_balancer_id
            && !found.iter().any(|r| &r.id == id)
        {
            let reply = session
                .send(
                    self.observer(),
                    "loadbalancer.get",
                    Request::get(format!("lbaas/loadbalancers/{id}")),
                )
                .await?;
            if reply.ok()
                && let Some(record) = reply
                    .body
                    .field::<LbRecord>("loadbalancer", "loadbalancer.get")?
                && owned(&record, identity, infra.uid.as_deref())
            {
                found.push(record);
            }
        }
        Ok(found)
    }

    /// Nothing of the LoadBalancer with UID `uid` is left in the cloud: forget what was cached for
    /// it (its wait included). Called while holding its lock.
    pub(super) fn forget_cached(&self, uid: &str, infra: &Infra) {
        self.waits.forget(&relook::key(uid, infra.uid.as_deref()));
        if let Some(id) = &infra.status.load_balancer_id {
            self.forget_tree(id);
            if let Ok(mut verified) = self.verified.lock() {
                verified.retain(|(_, verified_id), _| verified_id != id);
            }
            if let Ok(mut checked) = self.fip_checked.lock() {
                checked.remove(id);
            }
        }
        if let Ok(mut members) = self.members.lock() {
            for listener in &infra.status.listeners {
                if let Some(pool) = &listener.pool_id {
                    members.remove(pool);
                }
            }
        }
        // The lock goes too unless another call waits on it (the map and this call's guard
        // hold the only two references otherwise).
        if let Ok(mut locks) = self.locks.lock()
            && locks.get(uid).is_some_and(|l| Arc::strong_count(l) <= 2)
        {
            locks.remove(uid);
        }
    }
}
