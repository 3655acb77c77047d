//! The LoadBalancer reconciler.
//!
//! One pass: honour pause, validate the spec (the CRD's own schema and CEL rules, evaluated again
//! here), release a previously used infrastructure object if `infrastructureRef` changed, claim the
//! infrastructure object (controller owner reference + finalizer, so its configuration outlives the
//! cloud resources), resolve the targets and put their deletion hooks in place, ask the provider to
//! ensure the load balancer (one it creates starts with the members where the provider can do that
//! in the same operation), converge the members, settle the targets' states, publish the `-ext` Service, and write the infrastructure object's status and the
//! LoadBalancer's status — each only when it differs from what is stored. Nothing blocks: pending
//! provider work and transient failures come back as a requeue delay.
//!
//! Deletion (finalizer): the provider deletes what it created (found by ownership tags), the
//! infrastructure object is released, the published objects are removed, then the finalizer. Each
//! step is idempotent and derived from the world, so a restart half-way continues where it stopped.

mod cluster;
mod consent;
mod deletion;
mod health;
mod infrastructure;
pub mod lifecycle;
mod members;
mod migration;
mod pass;
pub mod picking;
pub mod publish;
pub mod targets;
pub mod triggers;

use std::sync::Arc;
use std::time::Duration;

use capi_lb_api::LoadBalancer;
use capi_lb_api::capi::Cluster;
use capi_lb_api::conditions::{DesiredCondition, Reason};
use capi_lb_api::constants::{
    ANNOTATION_DELETE_FOR_MOVE, ANNOTATION_OWNERSHIP, LOADBALANCER_FINALIZER, event,
};
use capi_lb_api::loadbalancer::{LoadBalancerAddress, LoadBalancerStatus};
use capi_lb_providers::entry::RecordSet;
use capi_lb_providers::provider::{ownership_uid, ownership_value};
use capi_lb_providers::{Enabled, Listener, LoadBalancerIdentity};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::Api;
use kube::core::{ApiResource, DynamicObject, Selector};
use kube::{Resource, ResourceExt};

use crate::class;
use crate::conditions::{InfraState, paused_condition};
use crate::context::{Context, Outcome};
use crate::error::{Error, Result, kube_err};
use crate::metadata::{self, Marks};

use cluster::{cluster_of, paused};
use deletion::cleanup;
use triggers::Watched;

/// Reconcile what the LoadBalancer watch yields. A LoadBalancer this version cannot read (e.g. a
/// field value from a newer CRD) gets a Warning Event and waits for a change: nothing is done for it
/// (not even deletion, whose cleanup needs its spec), and the watch goes on for the others.
pub async fn reconcile_watched(watched: Arc<Watched>, ctx: Arc<Context>) -> Result<Outcome> {
    match &watched.0 {
        Ok(lb) => reconcile(Arc::new(lb.clone()), ctx).await,
        Err(invalid) => {
            let deleting = if invalid.metadata.deletion_timestamp.is_some() {
                " Its deletion waits too: the cleanup of its load balancer needs its spec."
            } else {
                ""
            };
            ctx.events
                .publish(
                    &watched.object_ref(&()),
                    true,
                    event::UNREADABLE,
                    "Reconcile",
                    format!(
                        "this version of capi-lb cannot read the object ({}); nothing was changed \
                         and it is not retried until it changes (or capi-lb is upgraded).{deleting}",
                        invalid.error
                    ),
                )
                .await;
            Ok(Outcome::until_changed())
        }
    }
}

/// Reconcile one LoadBalancer, inside the boundary that turns a panic into a failed pass of this
/// LoadBalancer alone ([`crate::boundary`]): a Warning Event `InternalError`, the panics metric,
/// and the error (retried with back-off).
pub async fn reconcile(lb: Arc<LoadBalancer>, ctx: Arc<Context>) -> Result<Outcome> {
    let reference = lb.object_ref(&());
    match crate::boundary::contain(Box::pin(reconcile_unguarded(lb.clone(), ctx.clone()))).await {
        Ok(result) => result,
        Err(panic) => Err(ctx.panicked("loadbalancer", &reference, panic).await),
    }
}

async fn reconcile_unguarded(lb: Arc<LoadBalancer>, ctx: Arc<Context>) -> Result<Outcome> {
    ctx.caches.synced().await;
    let namespace = lb
        .namespace()
        .ok_or_else(|| Error::MissingField(describe(&lb), "namespace"))?;
    let api: Api<LoadBalancer> = Api::namespaced(ctx.client.clone(), &namespace);
    // Pause comes first, before deletion too: `clusterctl move` pauses, then deletes the objects it
    // moved from the source cluster, and the cloud load balancer must survive that.
    let cluster = cluster_of(&ctx, &lb, &namespace).await?;
    if let Some(why) = paused(&lb, cluster.as_ref()) {
        return Reconciliation::new(&lb, &ctx, api)?.pause(why).await;
    }
    if lb.meta().deletion_timestamp.is_some() {
        if lb.annotations().contains_key(ANNOTATION_DELETE_FOR_MOVE) {
            return moved_away(&lb, &ctx, &api).await;
        }
        return cleanup(&lb, &ctx, &api).await;
    }
    // The finalizer goes on before anything is created anywhere; with it the ownership of the
    // cloud resources (kept across clusterctl move) and, for a LoadBalancer of a Cluster, an owner
    // reference to it: clusterctl move carries what hangs off a Cluster, and the LoadBalancer
    // goes with its Cluster.
    let lb = metadata::mark(
        &api,
        &lb,
        Marks {
            finalizer: Some(LOADBALANCER_FINALIZER),
            annotation: ownership_value(lb.meta()).map(|v| (ANNOTATION_OWNERSHIP, v)),
            owners: cluster
                .as_ref()
                .filter(|c| c.metadata.deletion_timestamp.is_none())
                .and_then(|c| cluster_owner(&ctx.capi.cluster, c))
                .into_iter()
                .collect(),
        },
    )
    .await
    .map_err(kube_err("add finalizer to", describe(&lb)))?;
    // Realising a Service of capi-lb's load-balancer class: the Service's ports.
    let binding = class::binding(&ctx.client, &lb).await?;
    let lb = match &binding {
        Some(b) => class::effective(&lb, b),
        None => lb,
    };
    let mut reconciliation = Reconciliation::new(&lb, &ctx, api)?;
    reconciliation.binding = binding;
    reconciliation.cluster_deleting = cluster
        .as_ref()
        .is_some_and(|c| c.metadata.deletion_timestamp.is_some());
    reconciliation.cluster = cluster;
    reconciliation.apply().await
}

fn describe(lb: &LoadBalancer) -> String {
    format!(
        "LoadBalancer {}/{}",
        lb.namespace().unwrap_or_default(),
        lb.name_any()
    )
}

/// A non-controller owner reference to `cluster` (the LoadBalancer hangs off its Cluster, as
/// Cluster API's own objects do, without claiming to control it), at the version the cluster serves
/// Clusters (`resource`), which the garbage collector resolves it by.
fn cluster_owner(resource: &ApiResource, cluster: &Cluster) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: resource.api_version.clone(),
        kind: resource.kind.clone(),
        name: cluster.metadata.name.clone()?,
        uid: cluster.metadata.uid.clone()?,
        controller: None,
        block_owner_deletion: None,
    })
}

/// A LoadBalancer `clusterctl move` deletes from this cluster after creating it in the target:
/// the target's controller adopts its cloud load balancer, so nothing is deleted in the cloud and
/// its targets keep their hooks (they moved too); only the finalizer goes (clusterctl removes it
/// itself as well). What capi-lb published here is owned by the LoadBalancer and goes with it.
async fn moved_away(lb: &LoadBalancer, ctx: &Context, api: &Api<LoadBalancer>) -> Result<Outcome> {
    if lb.finalizers().iter().any(|f| f == LOADBALANCER_FINALIZER) {
        metadata::remove_finalizer(api, lb, LOADBALANCER_FINALIZER)
            .await
            .map_err(kube_err("remove finalizer from", describe(lb)))?;
        tracing::info!(
            loadbalancer = %describe(lb),
            "deleted by clusterctl move: the cloud load balancer is left to the target cluster"
        );
    }
    ctx.reset_backoff(&key(lb));
    Ok(Outcome::done())
}

/// The key of a LoadBalancer in capi-lb's own memory (back-off, probes, workload clusters, the
/// fleet's metrics): the UID the API server gave it. Never the ownership UID of
/// [`LoadBalancerIdentity`], which an annotation carries across `clusterctl move` and a tenant can
/// therefore write: keyed by it, one tenant's LoadBalancer could take over another's probes,
/// findings and back-off by naming its UID.
pub(crate) fn key(lb: &LoadBalancer) -> String {
    lb.metadata
        .uid
        .clone()
        .unwrap_or_else(|| format!("{}/{}", lb.namespace().unwrap_or_default(), lb.name_any()))
}

fn identity(lb: &LoadBalancer) -> Result<LoadBalancerIdentity> {
    Ok(LoadBalancerIdentity {
        namespace: lb.namespace().unwrap_or_default(),
        name: lb.name_any(),
        // The UID its cloud resources are tagged with, which survives clusterctl move.
        uid: ownership_uid(lb.meta())
            .map(str::to_string)
            .ok_or_else(|| Error::MissingField(describe(lb), "uid"))?,
        cluster_name: lb.spec.cluster_name.clone(),
    })
}

fn listeners(lb: &LoadBalancer) -> Vec<Listener> {
    lb.spec
        .ports
        .iter()
        .map(|p| Listener {
            name: p.name.clone(),
            port: p.port,
            target_port: p.effective_target_port(),
            protocol: p.protocol,
        })
        .collect()
}

/// Group changes from one phase into one Event.
struct Note {
    warning: bool,
    reason: &'static str,
    message: String,
}

/// The reasons a pass's one normal Event takes its reason from: the first of these among its notes
/// (else the first note's).
const HEADLINES: &[&str] = &[
    capi_lb_api::constants::reason::READY.name,
    capi_lb_api::constants::reason::CLUSTER_ENDPOINT_SET.name,
    event::LOAD_BALANCER_CREATED,
    event::LOAD_BALANCER_UPDATED,
    event::ADDRESSES_CHANGED,
    event::ENDPOINT_PUBLISHED,
    event::DNS_ENDPOINT_CHANGED,
    event::MEMBERS_CHANGED,
    event::TARGET_STATE_CHANGED,
];

/// The Events of one pass: each warning on its own (each is something to act on), and everything
/// else the pass did in one Event, headed by its most telling reason, the others' reasons and
/// messages after it (`Ready: ... | LoadBalancerCreated: ... | MembersChanged: ...`). A new
/// LoadBalancer's first pass writes one Event instead of six.
fn merged(notes: Vec<Note>) -> Vec<Note> {
    let (mut out, normal): (Vec<Note>, Vec<Note>) = notes.into_iter().partition(|n| n.warning);
    let headline = HEADLINES
        .iter()
        .find_map(|h| normal.iter().position(|n| n.reason == *h))
        .unwrap_or(0);
    let Some(head) = normal.get(headline) else {
        return out;
    };
    let mut message = head.message.clone();
    for (i, note) in normal.iter().enumerate() {
        if i != headline {
            message.push_str(&format!(" | {}: {}", note.reason, note.message));
        }
    }
    out.push(Note {
        warning: false,
        reason: head.reason,
        message,
    });
    out
}

/// What looking up and claiming an infrastructure object found.
enum Claim {
    /// Claimed.
    Claimed(Box<Claimed>),
    /// It does not exist (the message says which).
    Missing(String),
    /// It is being deleted.
    Deleting,
    /// It cannot be used: no provider for its kind, or another LoadBalancer controls it.
    Refused(Reason, String),
}

/// A claimed infrastructure object: its provider, API, kind, the object as claimed and the
/// listeners asked for.
struct Claimed {
    provider: Enabled,
    api: Api<DynamicObject>,
    resource: ApiResource,
    infra: DynamicObject,
    listeners: Vec<Listener>,
}

/// What the provider made of its load balancer in this pass ([`Reconciliation::provision`]).
struct Provisioned {
    /// Provisioned (also while it keeps serving through a change), provisioning, or a problem.
    state: InfraState,
    /// The provider's answer; `None` when it failed.
    answer: Option<Answer>,
}

/// The provider's answer to `ensure`, besides the state.
struct Answer {
    /// This pass created the load balancer.
    created: bool,
    /// Its addresses so far.
    addresses: Vec<LoadBalancerAddress>,
    /// What the spec asks that the provider does not do (`SpecHonoured`).
    unsupported: Vec<String>,
    /// Fields for the infrastructure object's status.
    status: serde_json::Map<String, serde_json::Value>,
}

/// How bringing up a migration's new load balancer went.
enum BringUp {
    /// Provisioned, with an address, every member active: switch to it.
    Ready,
    /// Not yet; the message says what is awaited.
    Waiting(String),
    /// It cannot be brought up (reason, message); the old one keeps serving.
    Failed(Reason, String),
}

/// How releasing an infrastructure object went.
enum Release {
    /// Nothing of ours is left on it.
    Done(Vec<String>),
    /// The provider is still deleting.
    Pending(String, Duration),
    /// It cannot be released until the user acts (the message says how).
    Blocked(Reason, String),
}

/// State of one reconcile pass.
struct Reconciliation<'a> {
    lb: &'a LoadBalancer,
    ctx: &'a Context,
    api: Api<LoadBalancer>,
    identity: LoadBalancerIdentity,
    /// Its key in capi-lb's memory ([`key`]).
    key: String,
    namespace: String,
    /// The status being built, starting from the stored one.
    status: LoadBalancerStatus,
    /// Conditions computed in this pass (others are kept as they are).
    conditions: Vec<DesiredCondition>,
    notes: Vec<Note>,
    outcome: Outcome,
    /// A transient failure happened in this pass (back-off is kept, not reset).
    transient_failure: bool,
    /// The effective selector, once the spec is known to be valid.
    selector: Option<Selector>,
    /// The LoadBalancer's Cluster is being deleted: deletion hooks are released.
    cluster_deleting: bool,
    /// The Cluster named by `spec.clusterName`, when it exists.
    cluster: Option<Cluster>,
    /// What the Cluster lets this LoadBalancer touch of it (read once a pass).
    consent: consent::Consent,
    /// The Service of capi-lb's class this LoadBalancer realises, if any.
    binding: Option<class::Binding>,
    /// The name of the provider serving this pass (empty before it is known).
    provider: String,
    /// The serving load balancer is made of DNS records (the DNS provider): their name and TTL.
    records: Option<RecordSet>,
}

/// How the members can be reached in this pass.
enum Access<'a> {
    /// Converge them through the provider.
    Converge {
        provider: &'a Enabled,
        infra: &'a DynamicObject,
        listeners: &'a [Listener],
    },
    /// They cannot be converged now (the message says why); their state is unknown.
    NotConverged(String),
    /// The provider's load balancer was deleted: there are no members.
    Gone,
}

impl<'a> Reconciliation<'a> {
    fn new(lb: &'a LoadBalancer, ctx: &'a Context, api: Api<LoadBalancer>) -> Result<Self> {
        Ok(Self {
            identity: identity(lb)?,
            key: key(lb),
            namespace: lb.namespace().unwrap_or_default(),
            status: lb.status.clone().unwrap_or_default(),
            lb,
            ctx,
            api,
            conditions: Vec::new(),
            notes: Vec::new(),
            outcome: Outcome::done(),
            transient_failure: false,
            selector: None,
            cluster_deleting: false,
            cluster: None,
            consent: consent::Consent::NoCluster,
            binding: None,
            provider: String::new(),
            records: None,
        })
    }

    fn note(&mut self, warning: bool, reason: &'static str, changes: Vec<String>) {
        if !changes.is_empty() {
            self.notes.push(Note {
                warning,
                reason,
                message: changes.join("; "),
            });
        }
    }

    /// Retry a transient failure with back-off.
    fn backoff(&mut self) {
        self.transient_failure = true;
        let delay = self.ctx.backoff(&self.key);
        self.outcome = self.outcome.min(Some(delay));
    }

    /// Paused: touch nothing but the Paused condition.
    async fn pause(mut self, why: String) -> Result<Outcome> {
        self.conditions.push(paused_condition(Some(why)));
        self.finish().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(warning: bool, reason: &'static str, message: &str) -> Note {
        Note {
            warning,
            reason,
            message: message.into(),
        }
    }

    #[test]
    fn a_pass_writes_its_warnings_and_one_event_for_the_rest() {
        let notes = vec![
            note(false, event::LOAD_BALANCER_CREATED, "created lb"),
            note(true, "AddressRefused", "203.0.113.9 refused"),
            note(false, event::MEMBERS_CHANGED, "added m1"),
            note(false, "Ready", "Ready: 192.0.2.1:6443"),
        ];
        let events = merged(notes);
        assert_eq!(events.len(), 2);
        assert!(events[0].warning && events[0].reason == "AddressRefused");
        assert_eq!(events[1].reason, "Ready");
        assert_eq!(
            events[1].message,
            "Ready: 192.0.2.1:6443 | LoadBalancerCreated: created lb | MembersChanged: added m1"
        );
    }

    #[test]
    fn one_note_is_its_own_event_and_none_is_none() {
        let events = merged(vec![note(false, "Custom", "x")]);
        assert_eq!(
            (events[0].reason, events[0].message.as_str()),
            ("Custom", "x")
        );
        assert!(merged(Vec::new()).is_empty());
    }
}
