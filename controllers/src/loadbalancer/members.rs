//! Targets and members: the serving set, member convergence through the provider, and the targets
//! moved through their lifecycle around it.

use std::time::Duration;

use capi_lb_api::constants::{CAPI_GROUP, MACHINE_KIND, event};
use capi_lb_api::loadbalancer::{LoadBalancerAddress, TargetKind};
use capi_lb_api::target::{TargetKeys, TargetState};
use capi_lb_providers::{DesiredMember, MemberIntent, MemberStatus, MembersRequest, Progress};
use kube::core::Selector;

use serde_json::{Map, Value};

use super::lifecycle::{Members, Settings};
use super::targets::{self, Listing};
use crate::class;
use crate::conditions::{InfraState, MembersState, TargetsState};
use crate::error::{Result, kube_err};
use crate::kinds::Unlisted;

use super::{Access, Reconciliation};

/// What [`Reconciliation::converge`] found: the members state, the members (`None`: unknown) and
/// the addresses where they are the members' (`None` for every provider but DNS records).
pub(super) type Converged = (
    MembersState,
    Option<Vec<MemberStatus>>,
    Option<Vec<LoadBalancerAddress>>,
);

/// The targets between the two halves of a pass (see [`Reconciliation::prepare_targets`]).
pub(super) enum Staged {
    /// A LoadBalancer realising a Service: the Service's endpoints as members.
    Endpoints(Vec<DesiredMember>),
    /// The targets listed, their hooks in place, and the members to ask for.
    Targets {
        selector: Selector,
        prepared: Box<targets::Prepared>,
        desired: Vec<DesiredMember>,
    },
    /// Why the targets cannot be had.
    Unavailable(Unlisted),
}

impl Staged {
    /// The members to ask of the provider (none when the targets cannot be had).
    pub(super) fn desired(&self) -> &[DesiredMember] {
        match self {
            Staged::Endpoints(desired) | Staged::Targets { desired, .. } => desired,
            Staged::Unavailable(_) => &[],
        }
    }
}

impl Reconciliation<'_> {
    /// The members a load balancer taking over should start with: the endpoints of the bound
    /// Service that serve, or every target that wants in: serving when it has an address and is
    /// past its gates, else kept if the load balancer has it already.
    /// [`Listing::Unavailable`] when the target kind cannot be listed.
    pub(super) async fn serving_members(
        &self,
        selector: &Selector,
    ) -> Result<Listing<Vec<DesiredMember>>> {
        if let Some(binding) = &self.binding {
            let serving = class::members(binding)
                .into_iter()
                .filter(|m| matches!(m.intent, MemberIntent::Serve(_)))
                .collect();
            return Ok(Listing::Listed(serving));
        }
        let kind = &self.lb.spec.target_kind;
        let keys = TargetKeys::new(&self.namespace, &self.identity.name);
        let objects = match self.ctx.kinds.resolve_target(kind).await {
            Ok(resource) => targets::list(self.ctx, &resource, &self.namespace, selector, &keys)
                .await
                .map_err(kube_err("list", format!("{kind}")))?,
            Err(why) => return Ok(Listing::Unavailable(why)),
        };
        Ok(Listing::Listed(
            targets::observe(objects, selector, &keys, &self.lb.spec)
                .into_iter()
                .filter(|t| t.observed.wants_in())
                .map(|t| match &t.observed.address {
                    Some(address) if t.observed.gates_pending.is_empty() => {
                        DesiredMember::serve(t.observed.name.clone(), address.clone())
                    }
                    // No address right now (status not restored yet after clusterctl move), or
                    // not admitted: a member the load balancer already has (one adopted) stays,
                    // none is created.
                    _ => DesiredMember::keep(t.observed.name.clone()),
                })
                .collect(),
        ))
    }

    /// Converge `desired` through `access`: the members state for the condition, the members the
    /// provider has (`None`: unknown), and, for a load balancer whose addresses are its members'
    /// (DNS records), its addresses now.
    pub(super) async fn converge(
        &mut self,
        access: Access<'_>,
        desired: &[DesiredMember],
        infra_status: &mut Map<String, Value>,
    ) -> Converged {
        match access {
            Access::Converge {
                provider,
                infra,
                listeners,
            } => {
                let result = provider
                    .converge_members(MembersRequest {
                        identity: &self.identity,
                        infra,
                        listeners,
                        members: desired,
                    })
                    .await;
                match result {
                    Ok(out) => {
                        self.note(false, event::MEMBERS_CHANGED, out.changes);
                        if let Some(retry) = out.progress.retry_after() {
                            self.outcome = self.outcome.min(Some(retry));
                        }
                        infra_status.extend(out.status);
                        // A problem the provider names (e.g. a member it cannot create) goes
                        // into TargetsReady; the members it reported are still known.
                        let state = match out.progress {
                            Progress::Pending {
                                reason: Some(reason),
                                message,
                                ..
                            } if reason.is_problem() => MembersState::Problem { reason, message },
                            _ => MembersState::Converged,
                        };
                        (state, Some(out.members), out.addresses)
                    }
                    Err(error) => {
                        match self.provider_problem(provider.name(), "member update", error) {
                            InfraState::Problem { reason, message } => {
                                (MembersState::Problem { reason, message }, None, None)
                            }
                            _ => (MembersState::NotConverged(String::new()), None, None),
                        }
                    }
                }
            }
            Access::NotConverged(why) => (MembersState::NotConverged(why), None, None),
            Access::Gone => (
                MembersState::NotConverged("the load balancer was deleted".into()),
                Some(Vec::new()),
                None,
            ),
        }
    }

    /// The serving load balancer's addresses after its members converged, where they are its
    /// members' (DNS records).
    fn take_addresses(&mut self, addresses: Option<Vec<LoadBalancerAddress>>) {
        if let Some(addresses) = addresses {
            self.status.addresses = addresses;
        }
    }

    /// Move the targets through their lifecycle around one member convergence: hooks first, then
    /// the provider, then the states (see [`targets::Pass`]).
    pub(super) async fn move_targets(
        &mut self,
        access: Access<'_>,
        infra_status: &mut Map<String, Value>,
    ) -> Result<TargetsState> {
        let staged = self.prepare_targets().await?;
        self.complete_targets(staged, access, infra_status).await
    }

    /// The first half of moving the targets, before the provider is asked anything: the targets
    /// listed, their deletion hooks in place, the members to ask for decided.
    pub(super) async fn prepare_targets(&mut self) -> Result<Staged> {
        // A changed target kind (including a LoadBalancer that starts realising a Service: its
        // targets become the Service's endpoints): the objects of the previous kind are no longer
        // targets, and lose our annotations and hooks.
        let kind = &self.lb.spec.target_kind;
        if let Some(previous) = self.status.target_kind.as_deref()
            && previous != kind.to_string()
            && let Some((old_kind, old_group)) = previous.split_once('.')
        {
            let old = TargetKind {
                api_group: old_group.to_string(),
                kind: old_kind.to_string(),
            };
            let released = targets::release_all(self.ctx, self.lb, &old).await?;
            self.note(false, event::DELETION_HOOKS_RELEASED, released);
        }
        // A LoadBalancer realising a Service of capi-lb's class: the Service's endpoints.
        if let Some(binding) = &self.binding {
            return Ok(Staged::Endpoints(class::members(binding)));
        }
        let Some(selector) = self.selector.clone() else {
            return Ok(Staged::Unavailable(Unlisted::Unavailable(
                "the spec is invalid".into(),
            )));
        };
        match self.pass(&selector).prepare().await? {
            Listing::Listed(prepared) => {
                let desired = prepared.desired_members();
                Ok(Staged::Targets {
                    selector,
                    prepared: Box::new(prepared),
                    desired,
                })
            }
            Listing::Unavailable(why) => Ok(Staged::Unavailable(why)),
        }
    }

    /// The second half: converge the members through `access`, then settle the targets' states
    /// from the provider's answer.
    pub(super) async fn complete_targets(
        &mut self,
        staged: Staged,
        access: Access<'_>,
        infra_status: &mut Map<String, Value>,
    ) -> Result<TargetsState> {
        let (selector, prepared, desired) = match staged {
            Staged::Endpoints(desired) => {
                let (members_state, members, addresses) =
                    self.converge(access, &desired, infra_status).await;
                self.take_addresses(addresses);
                return Ok(TargetsState::Listed {
                    targets: crate::conditions::views(&desired, members.as_deref()),
                    members: members_state,
                });
            }
            Staged::Unavailable(why) => return Ok(TargetsState::Unavailable(why)),
            Staged::Targets {
                selector,
                prepared,
                desired,
            } => (selector, prepared, desired),
        };
        let (members_state, members, addresses) =
            self.converge(access, &desired, infra_status).await;
        self.take_addresses(addresses);
        let known = members.as_deref().map_or(Members::Unknown, Members::Known);
        let completed = self.pass(&selector).complete(*prepared, known).await?;
        // Hooks put on targets that changed state in the same pass are told in that Event.
        let mut transitions = completed.transitions;
        let hooks_added = if transitions.is_empty() || completed.hooks_added.is_empty() {
            completed.hooks_added
        } else {
            transitions.push(format!(
                "deletion hooks added to {}",
                completed.hooks_added.join(", ")
            ));
            Vec::new()
        };
        self.note(false, event::TARGET_STATE_CHANGED, transitions);
        for (reason, what, names) in [
            (event::DELETION_HOOKS_ADDED, "added to", hooks_added),
            (
                event::DELETION_HOOKS_RELEASED,
                "released from",
                completed.hooks_released,
            ),
        ] {
            if !names.is_empty() {
                let message = format!("deletion hooks {what} {}", names.join(", "));
                self.note(false, reason, vec![message]);
            }
        }
        self.outcome = self.outcome.min(completed.requeue_after);
        Ok(TargetsState::Listed {
            targets: completed.views,
            members: members_state,
        })
    }

    /// The targets' pass of this LoadBalancer under `selector`.
    fn pass<'s>(&'s self, selector: &'s Selector) -> targets::Pass<'s> {
        let kind = &self.lb.spec.target_kind;
        targets::Pass {
            ctx: self.ctx,
            lb: self.lb,
            keys: TargetKeys::new(&self.namespace, &self.identity.name),
            selector,
            settings: Settings {
                // A load balancer made of DNS records: resolvers may hand out a record taken out
                // for as long as they cache it, so every drain waits that long too.
                drain: Duration::from_secs(u64::try_from(self.lb.spec.drain_seconds).unwrap_or(0))
                    + self
                        .records
                        .as_ref()
                        .map_or(Duration::ZERO, |r| r.cached_for),
                hooks: kind.api_group == CAPI_GROUP && kind.kind == MACHINE_KIND,
                // Without the Cluster's consent a LoadBalancer holds no hook on its Machines
                // (one it held before is released).
                release_hooks: self.cluster_deleting
                    || !self.consent.allows(super::consent::Touch::MachineHooks),
            },
            records: self.records.is_some(),
        }
    }

    pub(super) fn record_targets(&mut self, selector: &Selector, targets: &TargetsState) {
        self.status.target_kind = Some(self.lb.spec.target_kind.to_string());
        self.status.target_selector = Some(selector.to_string());
        if let TargetsState::Listed { targets, .. } = targets {
            // Selected targets, and deselected ones until they are removed.
            let tracked = targets
                .iter()
                .filter(|t| t.selected || t.state != TargetState::Removed);
            self.status.targets = tracked.clone().map(|t| t.name.clone()).collect();
            self.status.active_targets = tracked
                .filter(|t| t.state == TargetState::Active)
                .map(|t| t.name.clone())
                .collect();
        }
        self.status.ready_targets = Some(format!(
            "{}/{}",
            self.status.active_targets.len(),
            self.status.targets.len()
        ));
    }
}
