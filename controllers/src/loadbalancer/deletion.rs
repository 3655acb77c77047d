//! Deletion of a LoadBalancer (its finalizer): provider deletion, release of the infrastructure
//! object and the targets, withdrawal of the published objects.

use std::time::Duration;

use capi_lb_api::LoadBalancer;
use capi_lb_api::conditions::{Reason, merge_conditions};
use capi_lb_api::constants::{LOADBALANCER_FINALIZER, event, reason as r};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::{Resource, ResourceExt};

use super::targets;
use crate::class;
use crate::conditions::deleting_conditions;
use crate::context::{Context, Outcome};
use crate::error::{Result, kube_err};
use crate::metadata::{self};
use crate::publication;

use super::infrastructure::release;
use super::pass::write_status;
use super::{Release, describe, identity, key};

/// Deletion: provider cleanup for every infrastructure object this LoadBalancer may have used,
/// withdraw the published objects, then remove the finalizer.
pub(super) async fn cleanup(
    lb: &LoadBalancer,
    ctx: &Context,
    api: &Api<LoadBalancer>,
) -> Result<Outcome> {
    if !lb.finalizers().iter().any(|f| f == LOADBALANCER_FINALIZER) {
        return Ok(Outcome::done());
    }
    let identity = identity(lb)?;
    let key = key(lb);
    ctx.metrics.fleet.forget(&key);
    if let Some(prober) = &ctx.prober {
        prober.forget(&key);
        prober.forget_targets(&key, &[]);
    }
    // The workload cluster's endpoints stay as last written; its client goes.
    if let Some(workloads) = &ctx.workloads {
        workloads.forget(&key);
    }
    let reference = lb.object_ref(&());
    // Hooks and target annotations go first, so that Machine deletion never waits on a
    // LoadBalancer that is going away.
    let released = targets::release_all(ctx, lb, &lb.spec.target_kind).await?;
    if !released.is_empty() {
        ctx.events
            .publish(
                &reference,
                false,
                event::DELETION_HOOKS_RELEASED,
                "Delete",
                released.join("; "),
            )
            .await;
    }
    let mut refs = vec![lb.spec.infrastructure_ref.clone()];
    let status = lb.status.clone().unwrap_or_default();
    let migration = status
        .migration
        .iter()
        .flat_map(|m| [m.from.clone(), m.to.clone()]);
    for recorded in status.infrastructure_ref.into_iter().chain(migration) {
        if !refs.contains(&recorded) {
            refs.push(recorded);
        }
    }
    let mut waiting: Option<(String, Duration)> = None;
    for infra_ref in &refs {
        match release(ctx, lb, &identity, infra_ref, true).await? {
            Release::Done(changes) => {
                if !changes.is_empty() {
                    ctx.events
                        .publish(
                            &reference,
                            false,
                            event::LOAD_BALANCER_DELETED,
                            "Delete",
                            changes.join("; "),
                        )
                        .await;
                }
            }
            Release::Pending(message, retry) => {
                if waiting.as_ref().is_none_or(|(_, d)| retry < *d) {
                    waiting = Some((message, retry));
                }
            }
            Release::Blocked(reason, message) => {
                set_deleting_condition(ctx, api, lb, reason, &message).await?;
                ctx.events
                    .publish(&reference, true, reason.name, "Delete", message)
                    .await;
                return Ok(Outcome::done());
            }
        }
    }
    if let Some((message, retry)) = waiting {
        set_deleting_condition(ctx, api, lb, r::DELETING, &message).await?;
        return Ok(Outcome::requeue(retry));
    }
    // A Service this LoadBalancer realised no longer has a load balancer behind it.
    if let Some(binding) = class::binding(&ctx.client, lb).await? {
        class::write_back(&ctx.client, &binding, &[], false, None).await?;
    }
    let changes = publication::withdraw_lb(ctx, lb).await?;
    if !changes.is_empty() {
        ctx.events
            .publish(
                &reference,
                false,
                event::ENDPOINT_WITHDRAWN,
                "Delete",
                changes.join("; "),
            )
            .await;
    }
    metadata::remove_finalizer(api, lb, LOADBALANCER_FINALIZER)
        .await
        .map_err(kube_err("remove finalizer from", describe(lb)))?;
    ctx.reset_backoff(&key);
    Ok(Outcome::done())
}

pub(super) async fn set_deleting_condition(
    ctx: &Context,
    api: &Api<LoadBalancer>,
    lb: &LoadBalancer,
    reason: Reason,
    message: &str,
) -> Result<()> {
    let mut status = lb.status.clone().unwrap_or_default();
    let desired = deleting_conditions(reason, message);
    status.conditions = merge_conditions(
        &status.conditions,
        &desired,
        lb.meta().generation,
        &Time(ctx.clock.now()),
    );
    status.ready = false;
    if Some(&status) != lb.status.as_ref() {
        write_status(api, lb, &status).await?;
    }
    Ok(())
}
