//! The infrastructure object: claim it (owner reference + finalizer), turn provider answers into
//! states, write its status, and release it (provider deletion, then our metadata).

use capi_lb_api::LoadBalancer;
use capi_lb_api::conditions::Reason;
use capi_lb_api::constants::{
    ANNOTATION_DELETE_FOR_MOVE, ANNOTATION_OWNERSHIP, FIELD_MANAGER, INFRASTRUCTURE_FINALIZER,
    event, reason as r,
};
use capi_lb_api::loadbalancer::InfrastructureRef;
use capi_lb_providers::provider::ownership_value;
use capi_lb_providers::{
    DeleteRequest, DesiredMember, EnsureRequest, LoadBalancerIdentity, Progress, ProviderError,
};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject};
use serde_json::{Map, Value, json};

use crate::conditions::{
    InfraState, infrastructure_condition, publication_condition, ready_condition,
};
use crate::context::{Context, Outcome};
use crate::error::{Error, Result, kube_err};
use crate::metadata::{self, controller_of, is_controlled_by};
use crate::publication;

use super::{
    Access, Answer, Claim, Claimed, Provisioned, Reconciliation, Release, describe, listeners,
};

impl Reconciliation<'_> {
    /// Find the provider and the infrastructure object `infra_ref` names and claim the object
    /// (controller owner reference + finalizer); or say why the object cannot be used.
    pub(super) async fn claim(&self, infra_ref: &InfrastructureRef) -> Result<Claim> {
        let Some(provider) = self
            .ctx
            .providers
            .get(&infra_ref.api_group, &infra_ref.kind)
        else {
            return Ok(Claim::Refused(
                r::PROVIDER_NOT_ENABLED,
                format!(
                    "no enabled provider handles {}.{}; enabled: {}",
                    infra_ref.kind,
                    infra_ref.api_group,
                    self.ctx.providers.describe()
                ),
            ));
        };
        let resource = provider.infrastructure_resource();
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.ctx.client.clone(), &self.namespace, &resource);
        // From the kind's cache when it has it (one it does not have yet may just be new).
        let cached = self
            .ctx
            .caches
            .of(&resource)
            .and_then(|c| c.get(&self.namespace, &infra_ref.name))
            .flatten();
        let found = match cached {
            Some(infra) => Some(infra),
            None => api
                .get_opt(&infra_ref.name)
                .await
                .map_err(kube_err("get", format!("{infra_ref}")))?,
        };
        let Some(infra) = found else {
            return Ok(Claim::Missing(format!(
                "{} {}/{} does not exist",
                infra_ref.kind, self.namespace, infra_ref.name
            )));
        };
        if let Some(owner) = controller_of(&infra)
            && Some(&owner.uid) != self.lb.metadata.uid.as_ref()
        {
            return Ok(Claim::Refused(
                r::INFRASTRUCTURE_IN_USE,
                format!(
                    "{} {} is already used by {} {}; each LoadBalancer needs its own infrastructure object",
                    infra_ref.kind, infra_ref.name, owner.kind, owner.name
                ),
            ));
        }
        if infra.annotations().contains_key(ANNOTATION_DELETE_FOR_MOVE) {
            // clusterctl move is taking it (and its LoadBalancer) to another cluster, whose
            // controller adopts the cloud load balancer: nothing may be deleted or changed here.
            return Ok(Claim::Refused(
                r::MOVING,
                format!(
                    "{} {} is being moved to another cluster by clusterctl move; its load balancer is left to that cluster",
                    infra_ref.kind, infra_ref.name
                ),
            ));
        }
        if infra.metadata.deletion_timestamp.is_some() {
            return Ok(Claim::Deleting);
        }
        let Some(owner) = publication::controller_ref(self.lb) else {
            return Err(Error::MissingField(describe(self.lb), "uid"));
        };
        let ownership = ownership_value(&infra.metadata).map(|v| (ANNOTATION_OWNERSHIP, v));
        let claimed = metadata::claim(&api, &infra, owner, INFRASTRUCTURE_FINALIZER, ownership)
            .await
            .map_err(kube_err("claim", format!("{infra_ref}")))?;
        if claimed.resource_version() != infra.resource_version() {
            self.ctx.caches.wrote(&resource, &claimed);
        }
        Ok(Claim::Claimed(Box::new(Claimed {
            provider,
            api,
            resource,
            infra: claimed,
            listeners: listeners(self.lb),
        })))
    }

    /// Ask the provider of `claimed` to ensure its load balancer (one it creates now starts with
    /// `members` where the provider can do that in the same operation), and take its answer in:
    /// an Event for what it changed, the requeue it asks for, and the state of its load balancer.
    /// The one provider path of a pass's serving load balancer and of a migration's new one.
    pub(super) async fn provision(
        &mut self,
        claimed: &Claimed,
        members: &[DesiredMember],
    ) -> Provisioned {
        let ensured = claimed
            .provider
            .ensure(EnsureRequest {
                identity: &self.identity,
                loadbalancer: self.lb,
                infra: &claimed.infra,
                listeners: &claimed.listeners,
                source_ranges: &self.lb.spec.source_ranges,
                members,
            })
            .await;
        let out = match ensured {
            Ok(out) => out,
            Err(error) => {
                return Provisioned {
                    state: self.provider_problem(claimed.provider.name(), "ensure", error),
                    answer: None,
                };
            }
        };
        // The infrastructure object says its load balancer was ready, and the provider had to
        // create one: it was lost behind capi-lb's back (a Warning, with what the provider found).
        let was_ready = claimed.infra.data.pointer("/status/ready") == Some(&Value::Bool(true));
        match (out.created, was_ready) {
            (true, true) => {
                let mut found = vec![format!(
                    "the load balancer of {} {} was ready and is gone",
                    claimed.resource.kind,
                    claimed.infra.name_any()
                )];
                found.extend(out.changes);
                self.note(true, event::LOAD_BALANCER_LOST, found);
                self.ctx
                    .metrics
                    .fleet
                    .drift_repaired(claimed.provider.name());
            }
            (true, false) => self.note(false, event::LOAD_BALANCER_CREATED, out.changes),
            (false, _) => self.note(false, event::LOAD_BALANCER_UPDATED, out.changes),
        }
        if let Some(retry) = out.progress.retry_after() {
            self.outcome = self.outcome.min(Some(retry));
        }
        if out.progress.is_done() && !out.watched {
            let interval = self.ctx.config.drift_check_for(&self.key);
            self.outcome = self.outcome.look(interval);
        }
        let provisioned = match out.notice {
            Some(notice) => InfraState::Noticed {
                reason: notice.reason,
                message: notice.message,
            },
            None => InfraState::Provisioned,
        };
        let state = match out.progress {
            Progress::Done => provisioned,
            // Provisioned and serving while a change is applied: nothing a client sees changes.
            Progress::Pending { .. } if out.serving => provisioned,
            Progress::Pending {
                message,
                reason: Some(reason),
                ..
            } => InfraState::Waiting { reason, message },
            Progress::Pending { message, .. } => InfraState::Provisioning(message),
        };
        let mut unsupported = out.unsupported;
        if self.lb.spec.target_health.is_some() && claimed.provider.entry.checks_members {
            unsupported.push(format!(
                "spec.targetHealth is not used: the {} checks its members itself (the OctaviaLoadBalancer's healthMonitor)",
                claimed.provider.entry.title
            ));
        }
        Provisioned {
            state,
            answer: Some(Answer {
                created: out.created,
                addresses: out.addresses,
                unsupported,
                status: out.status,
            }),
        }
    }

    /// Stop after an infrastructure problem: report it, keep everything else. Targets still move
    /// as far as they can without the provider (hooks of targets that were never members are
    /// released; states of members are kept until the provider can be asked).
    pub(super) async fn infra_problem(self, reason: Reason, message: String) -> Result<Outcome> {
        let access = Access::NotConverged(format!(
            "members cannot be converged until the infrastructure is ready: {message}"
        ));
        self.infra_stop(reason, message, access).await
    }

    pub(super) async fn infra_stop(
        mut self,
        reason: Reason,
        message: String,
        access: Access<'_>,
    ) -> Result<Outcome> {
        let condition = infrastructure_condition(&InfraState::Problem { reason, message });
        self.conditions
            .push(ready_condition(&condition, None, false, None));
        self.conditions.push(condition);
        if let Some(selector) = self.selector.clone() {
            let targets = self.move_targets(access, &mut Map::new()).await?;
            self.record_targets(&selector, &targets);
            self.conditions
                .push(self.targets_condition(&selector, &targets));
        }
        self.finish().await
    }

    /// The infrastructure object is going (`reason` `InfrastructureDeleting`) or gone
    /// (`InfrastructureNotFound`) while the provider may still hold a load balancer for it: delete
    /// that load balancer, release the object, and withdraw the published addresses.
    pub(super) async fn infra_going(
        mut self,
        spec_ref: &InfrastructureRef,
        reason: Reason,
        what: &str,
    ) -> Result<Outcome> {
        let (message, gone) =
            match release(self.ctx, self.lb, &self.identity, spec_ref, false).await? {
                Release::Done(changes) => {
                    self.note(false, event::LOAD_BALANCER_DELETED, changes);
                    self.status.infrastructure_ref = None;
                    self.status.addresses.clear();
                    let report = publication::publish_lb(self.ctx, self.lb, &[], false).await?;
                    self.note(false, event::ENDPOINT_WITHDRAWN, report.changes);
                    self.conditions
                        .push(publication_condition(&report.state, false));
                    (
                        format!("{spec_ref} {what}; its load balancer was deleted"),
                        true,
                    )
                }
                Release::Pending(message, retry) => {
                    self.outcome = self.outcome.min(Some(retry));
                    (format!("{spec_ref} {what}: {message}"), false)
                }
                Release::Blocked(_, message) => (format!("{spec_ref} {what}: {message}"), false),
            };
        let access = if gone {
            Access::Gone
        } else {
            Access::NotConverged(format!("members cannot be converged: {message}"))
        };
        self.infra_stop(reason, message, access).await
    }

    /// Turn a provider error into an infrastructure state (and a requeue for transient ones).
    pub(super) fn provider_problem(
        &mut self,
        provider: &str,
        op: &str,
        error: ProviderError,
    ) -> InfraState {
        match error {
            ProviderError::Transient {
                message,
                retry_after,
            } => {
                self.backoff();
                if let Some(after) = retry_after {
                    self.outcome = self.outcome.min(Some(after));
                }
                InfraState::Problem {
                    reason: r::PROVIDER_ERROR,
                    message: format!("{provider} provider {op} failed, retrying: {message}"),
                }
            }
            ProviderError::TimedOut { message } => {
                self.backoff();
                InfraState::Problem {
                    reason: r::PROVIDER_TIMEOUT,
                    message: format!(
                        "{provider} provider {op} timed out, retrying: {message} (does the cloud or cluster it talks to answer?)"
                    ),
                }
            }
            ProviderError::Permanent { reason, message } => InfraState::Problem {
                reason: r::PROVIDER_FAILED,
                message: format!("{provider} provider {op} failed ({reason}): {message}"),
            },
        }
    }

    pub(super) async fn write_infra_status(
        &self,
        api: &Api<DynamicObject>,
        resource: &ApiResource,
        infra: &DynamicObject,
        status: Map<String, Value>,
    ) -> Result<()> {
        let current = infra.data.get("status");
        // A null asks for the field to be absent, and absent is what a stored null looks like.
        let unchanged = status.iter().all(|(k, v)| {
            let stored = current.and_then(|s| s.get(k));
            stored == Some(v) || (v.is_null() && stored.is_none_or(Value::is_null))
        });
        if unchanged {
            return Ok(());
        }
        let patch = json!({
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "status": status,
        });
        let updated = api
            .patch_status(
                &infra.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
            .map_err(kube_err(
                "apply status of",
                format!("{} {}", resource.kind, infra.name_any()),
            ))?;
        self.ctx.caches.wrote(resource, &updated);
        Ok(())
    }
}

/// The infrastructure object `infra_ref` names, of kind `resource`, if it exists.
async fn infrastructure_object(
    ctx: &Context,
    identity: &LoadBalancerIdentity,
    resource: &ApiResource,
    infra_ref: &InfrastructureRef,
) -> kube::Result<Option<DynamicObject>> {
    Api::<DynamicObject>::namespaced_with(ctx.client.clone(), &identity.namespace, resource)
        .get_opt(&infra_ref.name)
        .await
}

/// Whether `infra` is controlled by `lb`. Owner references name the LoadBalancer's own UID (the
/// identity's is the one its cloud resources are tagged with, which differs after clusterctl
/// move).
fn controlled_by_lb(infra: Option<&DynamicObject>, lb: &LoadBalancer) -> bool {
    let lb_uid = lb.metadata.uid.as_deref().unwrap_or_default();
    infra.is_some_and(|i| is_controlled_by(i, lb_uid))
}

/// Whether the infrastructure object `infra_ref`, of a kind no enabled provider handles, is
/// controlled by `lb`: claimed once, so possibly provisioned. A kind no provider of capi-lb's
/// handles was never provisioned by capi-lb, and is not read. Where capi-lb may not read the
/// object (an installation without that provider's RBAC), the answer is yes: it cannot tell.
async fn claimed_by(
    ctx: &Context,
    lb: &LoadBalancer,
    identity: &LoadBalancerIdentity,
    infra_ref: &InfrastructureRef,
) -> Result<bool> {
    let Some(resource) = capi_lb_providers::catalog::for_kind(&infra_ref.kind)
        .map(|entry| (entry.infrastructure)())
        .filter(|r| r.group == infra_ref.api_group)
    else {
        return Ok(false);
    };
    match infrastructure_object(ctx, identity, &resource, infra_ref).await {
        Ok(infra) => Ok(controlled_by_lb(infra.as_ref(), lb)),
        Err(kube::Error::Api(e)) if e.code == 403 => Ok(true),
        Err(e) => Err(kube_err("get", format!("{infra_ref}"))(e)),
    }
}

/// Release one infrastructure object of `lb`: provider delete (when anything may have been
/// provisioned with it), then drop our finalizer (and owner reference).
pub(super) async fn release(
    ctx: &Context,
    lb: &LoadBalancer,
    identity: &LoadBalancerIdentity,
    infra_ref: &InfrastructureRef,
    keep_owner_reference: bool,
) -> Result<Release> {
    // Provisioned by us when it is (or was) serving, or a migration brought it up (below).
    let served = lb.status.as_ref().is_some_and(|s| {
        s.infrastructure_ref.as_ref() == Some(infra_ref)
            || s.migration.as_ref().is_some_and(|m| &m.from == infra_ref)
    });
    let migrated_to = lb
        .status
        .as_ref()
        .and_then(|s| s.migration.as_ref())
        .is_some_and(|m| &m.to == infra_ref);
    let Some(provider) = ctx.providers.get(&infra_ref.api_group, &infra_ref.kind) else {
        // A migration's target is brought up only after it is claimed: one that is not ours (a
        // migration to a provider that is not enabled, or to an object that does not exist,
        // blocked before it began) has nothing to release, and must not hold the LoadBalancer's
        // deletion.
        let brought_up =
            served || (migrated_to && claimed_by(ctx, lb, identity, infra_ref).await?);
        return Ok(if brought_up {
            Release::Blocked(
                r::PROVIDER_NOT_ENABLED,
                format!(
                    "no enabled provider handles {}.{}, so its cloud resources cannot be deleted; enable it (enabled: {})",
                    infra_ref.kind,
                    infra_ref.api_group,
                    ctx.providers.describe()
                ),
            )
        } else {
            // Never provisioned by us: nothing to release.
            Release::Done(Vec::new())
        });
    };
    let resource = provider.infrastructure_resource();
    let infra = infrastructure_object(ctx, identity, &resource, infra_ref)
        .await
        .map_err(kube_err("get", format!("{infra_ref}")))?;
    let ours = controlled_by_lb(infra.as_ref(), lb);
    // What served may have cloud resources whose object is gone (the provider finds them by
    // their tags); a migration's target was provisioned only if it was claimed first.
    if !ours && !served {
        return Ok(Release::Done(Vec::new()));
    }
    let outcome = provider
        .delete(DeleteRequest {
            identity,
            infra: infra.as_ref().filter(|_| ours),
        })
        .await;
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(ProviderError::Transient {
            message,
            retry_after,
        }) => {
            let delay = retry_after.unwrap_or_else(|| ctx.backoff(&super::key(lb)));
            return Ok(Release::Pending(
                format!(
                    "{} provider delete failed, retrying: {message}",
                    provider.name()
                ),
                delay,
            ));
        }
        Err(ProviderError::TimedOut { message }) => {
            return Ok(Release::Pending(
                format!(
                    "{} provider delete timed out, retrying: {message}",
                    provider.name()
                ),
                ctx.backoff(&super::key(lb)),
            ));
        }
        Err(ProviderError::Permanent { reason, message }) => {
            return Ok(Release::Blocked(
                r::PROVIDER_FAILED,
                format!(
                    "{} provider delete failed ({reason}): {message}",
                    provider.name()
                ),
            ));
        }
    };
    match outcome.progress {
        Progress::Pending {
            message,
            retry_after,
            ..
        } => Ok(Release::Pending(message, retry_after)),
        Progress::Done => {
            let mut changes = outcome.changes;
            if let Some(infra) = infra.as_ref().filter(|_| ours) {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(ctx.client.clone(), &identity.namespace, &resource);
                metadata::release(
                    &api,
                    infra,
                    lb.metadata.uid.as_deref().unwrap_or_default(),
                    INFRASTRUCTURE_FINALIZER,
                    keep_owner_reference,
                )
                .await
                .map_err(kube_err("release", format!("{infra_ref}")))?;
                changes.push(format!("released {infra_ref}"));
            }
            ctx.reset_backoff(&super::key(lb));
            Ok(Release::Done(changes))
        }
    }
}
