//! A change of `spec.infrastructureRef`, make-before-break: bring the new load balancer up while
//! the old one serves, switch, drain, delete the old one; or cancel.

use std::time::Duration;

use capi_lb_api::constants::{event, reason as r};
use capi_lb_api::loadbalancer::{InfrastructureMigration, InfrastructureRef};
use capi_lb_providers::{DesiredMember, MemberIntent, MemberState};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::Selector;

use crate::cache::Lookup;
use crate::conditions::{InfraState, MembersState, Migration, migration_condition};
use crate::error::{Result, kube_err};
use crate::metadata::is_controlled_by;
use kube::api::{Api, ListParams};
use kube::core::DynamicObject;
use kube::{Resource, ResourceExt};

use super::infrastructure::release;
use super::targets::Listing;
use super::{Access, BringUp, Claim, Reconciliation, Release};

impl Reconciliation<'_> {
    /// An infrastructure object this LoadBalancer controls (owner reference) other than
    /// `spec_ref`, of any enabled provider's kind: the oldest, when there are several.
    async fn controlled_elsewhere(
        &self,
        spec_ref: &InfrastructureRef,
    ) -> Result<Option<InfrastructureRef>> {
        let Some(uid) = self.lb.meta().uid.as_deref() else {
            return Ok(None);
        };
        let mut found: Vec<(Option<Time>, InfrastructureRef)> = Vec::new();
        for resource in self.ctx.providers.resources() {
            let controlled = |o: &DynamicObject| {
                is_controlled_by(o, uid) && o.metadata.deletion_timestamp.is_none()
            };
            let objects = match self
                .ctx
                .caches
                .of(&resource)
                .and_then(|c| c.list(&self.namespace, &Lookup::owned_by(uid), controlled))
            {
                Some(objects) => objects,
                None => {
                    let api: Api<DynamicObject> =
                        Api::namespaced_with(self.ctx.client.clone(), &self.namespace, &resource);
                    api.list(&ListParams::default())
                        .await
                        .map_err(kube_err("list", format!("{} objects", resource.kind)))?
                        .items
                        .into_iter()
                        .filter(|o| controlled(o))
                        .collect()
                }
            };
            for object in objects {
                let reference = InfrastructureRef {
                    api_group: resource.group.clone(),
                    kind: resource.kind.clone(),
                    name: object.name_any(),
                };
                if &reference != spec_ref {
                    found.push((object.metadata.creation_timestamp.clone(), reference));
                }
            }
        }
        found.sort_by(|a, b| a.0.as_ref().map(|t| t.0).cmp(&b.0.as_ref().map(|t| t.0)));
        Ok(found.into_iter().next().map(|(_, r)| r))
    }

    /// Which infrastructure object serves in this pass, moving a change of `spec.infrastructureRef`
    /// forward make-before-break: bring the new one up and populate it while the old one serves,
    /// switch once it is ready, delete the old one after `spec.drainSeconds`. A new one that cannot
    /// be brought up leaves the old one serving; going back before the switch cancels.
    pub(super) async fn migrate(
        &mut self,
        spec_ref: &InfrastructureRef,
        selector: &Selector,
    ) -> Result<InfrastructureRef> {
        let serving = match self.status.infrastructure_ref.clone() {
            Some(serving) => serving,
            // No record of what serves: a new LoadBalancer, or one whose status was lost
            // (clusterctl move and backup restores do not carry status). An infrastructure object
            // other than the spec's that it controls is what served before: a migration was under
            // way, and continues make-before-break from there.
            None => match self.controlled_elsewhere(spec_ref).await? {
                Some(serving) => {
                    self.status.infrastructure_ref = Some(serving.clone());
                    serving
                }
                None => return Ok(spec_ref.clone()),
            },
        };
        let migration = self.status.migration.clone();
        if &serving == spec_ref {
            return match migration {
                // Switched already: the old one drains, then goes.
                Some(m) if &m.to == spec_ref => {
                    self.finish_switch(m).await?;
                    Ok(serving)
                }
                // Back to the serving one before the switch: release the half-built new one.
                Some(m) => {
                    self.cancel(&m.to).await?;
                    Ok(serving)
                }
                None => Ok(serving),
            };
        }
        // Migrating to spec_ref. A different earlier target (changed mid-way) is released first.
        if let Some(m) = &migration
            && &m.to != spec_ref
            && m.to != serving
            && !self.cancel(&m.to).await?
        {
            return Ok(serving);
        }
        let mut m = match migration {
            Some(m) if &m.to == spec_ref => m,
            _ => InfrastructureMigration {
                from: serving.clone(),
                to: spec_ref.clone(),
                switched_at: None,
            },
        };
        match self.bring_up(spec_ref, selector).await? {
            BringUp::Ready => {
                m.switched_at = Some(Time(self.ctx.clock.now()));
                self.note(
                    false,
                    r::MIGRATION_DRAINING.name,
                    vec![format!(
                        "switched from {} to {spec_ref}; {} is deleted after {}s of drain",
                        m.from, m.from, self.lb.spec.drain_seconds
                    )],
                );
                self.finish_switch(m).await?;
                Ok(spec_ref.clone())
            }
            BringUp::Waiting(message) => {
                self.conditions
                    .push(migration_condition(&Migration::BringingUp {
                        from: &serving,
                        to: spec_ref,
                        message,
                    }));
                self.status.migration = Some(m);
                Ok(serving)
            }
            BringUp::Failed(reason, message) => {
                self.conditions
                    .push(migration_condition(&Migration::CannotBringUp {
                        from: &serving,
                        to: spec_ref,
                        reason,
                        message,
                    }));
                self.status.migration = Some(m);
                Ok(serving)
            }
        }
    }

    /// After the switch: wait for the drain time, then delete the old load balancer.
    pub(super) async fn finish_switch(&mut self, m: InfrastructureMigration) -> Result<()> {
        let now = self.ctx.clock.now();
        let switched = m.switched_at.as_ref().map_or(now, |t| t.0);
        let drain = jiff::SignedDuration::from_secs(i64::from(self.lb.spec.drain_seconds.max(0)));
        let deadline = switched.checked_add(drain).unwrap_or(now);
        let (from, to) = (m.from.clone(), m.to.clone());
        if now < deadline {
            let wait = Duration::try_from(deadline.duration_since(now)).unwrap_or_default();
            self.outcome = self.outcome.min(Some(wait));
            self.conditions
                .push(migration_condition(&Migration::Draining {
                    from: &from,
                    to: &to,
                    until: deadline,
                }));
            self.status.migration = Some(m);
            return Ok(());
        }
        self.status.migration = Some(m);
        match release(self.ctx, self.lb, &self.identity, &from, false).await? {
            Release::Done(changes) => {
                self.note(false, event::INFRASTRUCTURE_RELEASED, changes);
                self.status.migration = None;
                self.conditions
                    .push(migration_condition(&Migration::Complete {
                        from: &from,
                        to: &to,
                    }));
            }
            Release::Pending(message, retry) => {
                self.outcome = self.outcome.min(Some(retry));
                self.conditions
                    .push(migration_condition(&Migration::Deleting {
                        from: &from,
                        to: &to,
                        message,
                    }));
            }
            Release::Blocked(reason, message) => {
                self.conditions
                    .push(migration_condition(&Migration::CannotDelete {
                        from: &from,
                        to: &to,
                        reason,
                        message,
                    }));
            }
        }
        Ok(())
    }

    /// Release a half-built migration target. True when it is gone.
    pub(super) async fn cancel(&mut self, target: &InfrastructureRef) -> Result<bool> {
        match release(self.ctx, self.lb, &self.identity, target, false).await? {
            Release::Done(changes) => {
                self.note(false, event::INFRASTRUCTURE_RELEASED, changes);
                self.status.migration = None;
                self.conditions
                    .push(migration_condition(&Migration::Cancelled { to: target }));
                Ok(true)
            }
            Release::Pending(message, retry) => {
                self.outcome = self.outcome.min(Some(retry));
                self.conditions
                    .push(migration_condition(&Migration::Cancelling {
                        to: target,
                        message,
                    }));
                Ok(false)
            }
            Release::Blocked(reason, message) => {
                self.conditions
                    .push(migration_condition(&Migration::CannotCancel {
                        to: target,
                        reason,
                        message,
                    }));
                Ok(false)
            }
        }
    }

    /// Bring the new infrastructure's load balancer up and populate it with the serving members,
    /// without touching the targets (their states and hooks follow the serving load balancer).
    pub(super) async fn bring_up(
        &mut self,
        target: &InfrastructureRef,
        selector: &Selector,
    ) -> Result<BringUp> {
        let claimed = match self.claim(target).await? {
            Claim::Claimed(c) => *c,
            Claim::Missing(message) => {
                return Ok(BringUp::Failed(r::INFRASTRUCTURE_NOT_FOUND, message));
            }
            Claim::Deleting => {
                return Ok(BringUp::Failed(
                    r::INFRASTRUCTURE_DELETING,
                    format!("{target} is being deleted"),
                ));
            }
            Claim::Refused(reason, message) => return Ok(BringUp::Failed(reason, message)),
        };
        // The serving members first: a load balancer created now can start with them.
        let desired = self.serving_members(selector).await?;
        let members: &[DesiredMember] = match &desired {
            Listing::Listed(members) => members,
            Listing::Unavailable(_) => &[],
        };
        let provisioned = self.provision(&claimed, members).await;
        let Some(answer) = provisioned.answer else {
            return Ok(match provisioned.state {
                InfraState::Problem { reason, message } => BringUp::Failed(reason, message),
                _ => BringUp::Waiting(String::new()),
            });
        };
        let mut infra_status = answer.status;
        // A load balancer made of DNS records has the members' addresses once they converged; it
        // is published (and its records taken by ExternalDNS) only once it serves.
        let records = (claimed.provider.entry.records)(&claimed.infra).is_some();
        let result = match (provisioned.state, desired) {
            (InfraState::Provisioning(message) | InfraState::Waiting { message, .. }, _) => {
                BringUp::Waiting(message)
            }
            (InfraState::Problem { reason, message }, _) => BringUp::Failed(reason, message),
            (InfraState::Provisioned | InfraState::Noticed { .. }, _)
                if answer.addresses.is_empty() && !records =>
            {
                BringUp::Waiting("it has no address yet".into())
            }
            (InfraState::Provisioned | InfraState::Noticed { .. }, Listing::Unavailable(why)) => {
                BringUp::Waiting(why.message().to_string())
            }
            (InfraState::Provisioned | InfraState::Noticed { .. }, Listing::Listed(desired)) => {
                let access = Access::Converge {
                    provider: &claimed.provider,
                    infra: &claimed.infra,
                    listeners: &claimed.listeners,
                };
                match self.converge(access, &desired, &mut infra_status).await {
                    // The provider failed; a member it refuses is told in the count below.
                    (MembersState::Problem { reason, message }, None, _) => {
                        BringUp::Failed(reason, message)
                    }
                    (_, None, _) => BringUp::Waiting(String::new()),
                    // DNS records: ready once a target is one.
                    (_, Some(_), Some(addresses)) if records => {
                        if addresses.is_empty() {
                            BringUp::Waiting("no target is a record of the name yet".into())
                        } else {
                            BringUp::Ready
                        }
                    }
                    (_, Some(members), _) => {
                        // Ready when every member to serve is active (kept ones are not waited
                        // for).
                        let serving: Vec<&DesiredMember> = desired
                            .iter()
                            .filter(|d| matches!(d.intent, MemberIntent::Serve(_)))
                            .collect();
                        let active = serving
                            .iter()
                            .filter(|d| {
                                members
                                    .iter()
                                    .any(|m| m.name == d.name && m.state == MemberState::Active)
                            })
                            .count();
                        if active == serving.len() {
                            BringUp::Ready
                        } else {
                            BringUp::Waiting(format!(
                                "{active} of {} members active",
                                serving.len()
                            ))
                        }
                    }
                }
            }
        };
        self.write_infra_status(
            &claimed.api,
            &claimed.resource,
            &claimed.infra,
            infra_status,
        )
        .await?;
        Ok(result)
    }
}
