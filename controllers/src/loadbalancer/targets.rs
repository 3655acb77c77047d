//! Targets of a LoadBalancer: the objects of `spec.targetKind` its selector matches, each with its
//! address and the readiness gates it has not passed ([`super::picking`]). Listing is one API call.
//!
//! A [`Pass`] moves the targets through the state machine of [`super::lifecycle`] around the
//! provider call: [`Pass::prepare`] puts back the deletion hooks of targets that may be members
//! already and lack them (or releases them all), the reconciler converges the members, and
//! [`Pass::complete`] writes each target's new state, with the hooks of a target that joins in the
//! same write, and releases the hooks of members that are gone. A new target is not written until
//! it can join. Each target is written at most once per half, and only when something changed; the
//! writes of a half go out together (at most [`WRITES_IN_FLIGHT`] at a time).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;

use capi_lb_api::constants::event;
use capi_lb_api::loadbalancer::TargetKind;
use capi_lb_api::target::{TargetKeys, TargetState};
use capi_lb_api::{LoadBalancer, LoadBalancerSpec};
use capi_lb_providers::{DesiredMember, MemberIntent};
use jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::core::{ApiResource, DynamicObject, Expression, Selector, SelectorExt};
use kube::{Resource, ResourceExt};
use serde_json::Value;

use super::lifecycle::{
    Members, Observed, Settings, annotate, hooks_before, intent, set_hooks, settle,
};
use crate::cache::{Lookup, Selected};
use crate::conditions::TargetView;
use crate::context::Context;
use crate::error::{Result, is_not_found, kube_err};
use crate::kinds::Unlisted;
use crate::metadata::patch_annotations;

use super::picking::{pending_gates, pick_address, updating_in_place};

/// How many target writes one pass has in flight at a time: a LoadBalancer's few control-plane
/// Machines are written at once, a hundred workers eight at a time.
const WRITES_IN_FLIGHT: usize = 8;

/// An object of the target kind this LoadBalancer deals with, and what was observed on it.
#[derive(Clone, Debug)]
pub struct TargetObject {
    /// The object as listed (kept current after each write).
    pub object: DynamicObject,
    /// What the state machine needs.
    pub observed: Observed,
}

/// The objects this LoadBalancer deals with, sorted by name: those `selector` matches, and those
/// still carrying any of its annotations (deselected targets being removed, hooks to release).
pub fn observe(
    objects: Vec<DynamicObject>,
    selector: &Selector,
    keys: &TargetKeys,
    spec: &LoadBalancerSpec,
) -> Vec<TargetObject> {
    let mut targets: Vec<TargetObject> = objects
        .into_iter()
        .filter_map(|object| {
            let selected = selector.matches(object.labels())
                && in_failure_domains(&object, &spec.target_failure_domains);
            let ours = keys
                .all()
                .iter()
                .any(|k| object.annotations().contains_key(*k));
            if !selected && !ours {
                return None;
            }
            let value = serde_json::to_value(&object).unwrap_or(Value::Null);
            let mut observed = Observed::from_annotations(
                object.name_any(),
                selected,
                object.metadata.deletion_timestamp.is_some(),
                object.annotations(),
                keys,
                pick_address(&value, &spec.target_address_types),
                pending_gates(&value, &spec.readiness_gates),
            );
            // A Machine updated in place leaves as a disabled one does (drained, its member
            // removed, `disabling` then `disabled`) and comes back when the update is done.
            observed.disabled |= updating_in_place(&value);
            Some(TargetObject { object, observed })
        })
        .collect();
    targets.sort_by(|a, b| a.observed.name.cmp(&b.observed.name));
    targets
}

/// True when `object`'s `spec.failureDomain` is one of `domains`, or `domains` is empty.
fn in_failure_domains(object: &DynamicObject, domains: &[String]) -> bool {
    domains.is_empty()
        || object
            .data
            .pointer("/spec/failureDomain")
            .and_then(Value::as_str)
            .is_some_and(|fd| domains.iter().any(|d| d == fd))
}

/// The objects of `resource` in `namespace` a LoadBalancer must look at ([`concerns`]): from the
/// kind's cache when `run` keeps one (see [`crate::cache`]), else by listing every object of the
/// namespace (the selector alone would miss the objects that no longer match but still carry our
/// annotations).
pub async fn list(
    ctx: &Context,
    resource: &ApiResource,
    namespace: &str,
    selector: &Selector,
    keys: &TargetKeys,
) -> Result<Vec<DynamicObject>, kube::Error> {
    list_where(ctx, resource, namespace, &lookup(selector, keys), |o| {
        concerns(o, selector, keys)
    })
    .await
}

/// The objects of `resource` in `namespace` that `keep` accepts, from the kind's cache (looking
/// only at what `lookup` can match, which must cover every object `keep` accepts) or the API.
async fn list_where(
    ctx: &Context,
    resource: &ApiResource,
    namespace: &str,
    lookup: &Lookup,
    keep: impl Fn(&DynamicObject) -> bool,
) -> Result<Vec<DynamicObject>, kube::Error> {
    if let Some(cached) = ctx
        .caches
        .of(resource)
        .and_then(|c| c.list(namespace, lookup, &keep))
    {
        return Ok(cached);
    }
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), namespace, resource);
    let mut objects = api.list(&ListParams::default()).await?.items;
    objects.retain(|o| keep(o));
    Ok(objects)
}

/// True for an object a LoadBalancer must look at: selected, or carrying one of its annotations.
pub fn concerns(object: &DynamicObject, selector: &Selector, keys: &TargetKeys) -> bool {
    selector.matches(object.labels())
        || keys
            .all()
            .iter()
            .any(|k| object.annotations().contains_key(*k))
}

/// What a cache's index can narrow [`concerns`] to: the selector's equality and set requirements
/// (an object it selects meets each of them), and the LoadBalancer's annotation keys.
pub fn lookup(selector: &Selector, keys: &TargetKeys) -> Lookup {
    let requirements: Vec<(String, Vec<String>)> = selector
        .clone()
        .into_iter()
        .filter_map(|e| match e {
            Expression::Equal(k, v) => Some((k, vec![v])),
            Expression::In(k, values) => Some((k, values.into_iter().collect())),
            _ => None,
        })
        .collect();
    Lookup {
        selected: if requirements.is_empty() {
            Selected::Everything
        } else {
            Selected::Labels(requirements)
        },
        ..annotated(keys)
    }
}

/// The objects carrying any of a LoadBalancer's annotations.
fn annotated(keys: &TargetKeys) -> Lookup {
    Lookup {
        selected: Selected::Nothing,
        annotations: keys.all().iter().map(ToString::to_string).collect(),
        owners: Vec::new(),
    }
}

/// Tell the kind's cache (if any) what was just written.
fn wrote(ctx: &Context, resource: &ApiResource, object: &DynamicObject) {
    if let Some(cache) = ctx.caches.of(resource) {
        cache.wrote(object);
    }
}

/// A target joining the load balancer for the first time: on its way in, or active straight from
/// there.
fn joining(before: Option<TargetState>, now: TargetState) -> bool {
    matches!(
        (before, now),
        (
            None | Some(TargetState::Adding),
            TargetState::Adding | TargetState::Active
        )
    )
}

/// Everything one reconcile pass needs to move the targets of one LoadBalancer.
pub struct Pass<'a> {
    /// The controller context.
    pub ctx: &'a Context,
    /// The LoadBalancer.
    pub lb: &'a LoadBalancer,
    /// Its annotation keys.
    pub keys: TargetKeys,
    /// Its effective selector.
    pub selector: &'a Selector,
    /// State machine settings.
    pub settings: Settings,
    /// The load balancer is made of DNS records: targets are probed even without
    /// `spec.targetHealth`, and only what was probed changes the records.
    pub records: bool,
}

/// The targets after the first half of a pass: hooks in place, intents decided.
pub struct Prepared {
    resource: ApiResource,
    targets: Vec<TargetObject>,
    intents: Vec<Option<MemberIntent>>,
    now: Timestamp,
    /// Targets whose hooks were added.
    hooks_added: Vec<String>,
    /// Targets whose hooks were released.
    hooks_released: Vec<String>,
    /// Targets failing their health probes (`spec.targetHealth`), with what the last probe found.
    failing: BTreeMap<String, String>,
}

impl Prepared {
    /// The member set to ask of the provider.
    pub fn desired_members(&self) -> Vec<DesiredMember> {
        self.targets
            .iter()
            .zip(&self.intents)
            .filter_map(|(t, intent)| {
                intent.clone().map(|intent| DesiredMember {
                    name: t.observed.name.clone(),
                    intent,
                })
            })
            .collect()
    }
}

/// The targets after a pass.
pub struct Completed {
    /// What the status and the `TargetsReady` condition need.
    pub views: Vec<TargetView>,
    /// Reconcile again after this long (the earliest drain deadline).
    pub requeue_after: Option<Duration>,
    /// State changes (`m1: adding -> active`), for an Event on the LoadBalancer.
    pub transitions: Vec<String>,
    /// Targets whose deletion hooks were added in this pass.
    pub hooks_added: Vec<String>,
    /// Targets whose deletion hooks were released in this pass.
    pub hooks_released: Vec<String>,
}

/// Targets (or what was made of them), or why they cannot be had: the target kind is not served,
/// or listing it failed.
#[derive(Debug)]
pub enum Listing<T> {
    /// What the targets gave.
    Listed(T),
    /// Why there are none to work with.
    Unavailable(Unlisted),
}

impl Pass<'_> {
    fn api(&self, resource: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.ctx.client.clone(),
            &self.lb.namespace().unwrap_or_default(),
            resource,
        )
    }

    /// First half: list and observe the targets, decide what to ask of the provider, and put the
    /// deletion hooks back on every Machine that may be a member already going by its recorded
    /// state (or release them all when the Cluster is being deleted). A joining Machine gets its
    /// hooks with its first state in [`Self::complete`]. [`Listing::Unavailable`] when the target
    /// kind cannot be listed.
    pub async fn prepare(&self) -> Result<Listing<Prepared>> {
        let kind = &self.lb.spec.target_kind;
        let resource = match self.ctx.kinds.resolve_target(kind).await {
            Ok(resource) => resource,
            Err(why) => return Ok(Listing::Unavailable(why)),
        };
        let namespace = self.lb.namespace().unwrap_or_default();
        let objects = match list(self.ctx, &resource, &namespace, self.selector, &self.keys).await {
            Ok(objects) => objects,
            Err(e) => {
                return Ok(Listing::Unavailable(Unlisted::Unavailable(format!(
                    "cannot list {kind}: {e}"
                ))));
            }
        };
        let mut targets = observe(objects, self.selector, &self.keys, &self.lb.spec);
        let failing = self.probe_targets(&mut targets);
        let now = self.ctx.clock.now();
        let intents = targets
            .iter()
            .map(|t| intent(&t.observed, now, &self.settings))
            .collect();
        let api = self.api(&resource);
        let lb_name = self.lb.name_any();
        // What to write to each target (its index, whether it gets hooks, the annotations), then
        // all of it at once: the provider call waits for every hook.
        let mut writes = Vec::new();
        for (i, target) in targets.iter().enumerate() {
            let Some(hooks) = hooks_before(&target.observed, &self.settings) else {
                continue;
            };
            let mut annotations = target.object.annotations().clone();
            set_hooks(&mut annotations, &self.keys, &lb_name, hooks);
            if &annotations == target.object.annotations() {
                continue;
            }
            writes.push((i, hooks, annotations));
        }
        let written = self
            .write_all(
                &resource,
                &api,
                writes
                    .iter()
                    .map(|(i, _, annotations)| (&targets[*i].object, annotations))
                    .collect(),
            )
            .await;
        let (mut hooks_added, mut hooks_released) = (Vec::new(), Vec::new());
        let mut gone = Vec::new();
        for ((i, hooks, _), result) in writes.into_iter().zip(written) {
            let target = &mut targets[i];
            match result? {
                Some(updated) => {
                    target.object = updated;
                    target.observed.pre_drain = hooks;
                    target.observed.pre_terminate = hooks;
                    let name = target.observed.name.clone();
                    if hooks {
                        hooks_added.push(name);
                    } else {
                        hooks_released.push(name);
                    }
                }
                None => gone.push(i),
            }
        }
        // A target deleted meanwhile is no longer ours to ask for.
        let mut intents: Vec<Option<MemberIntent>> = intents;
        for i in gone.into_iter().rev() {
            targets.remove(i);
            intents.remove(i);
        }
        Ok(Listing::Listed(Prepared {
            resource,
            targets,
            intents,
            now,
            hooks_added,
            hooks_released,
            failing,
        }))
    }

    /// [`Self::write`] for each `(object, annotations)`, up to [`WRITES_IN_FLIGHT`] at a time, the
    /// results in the same order. All are tried, also after one failed: each target's write stands
    /// on its own, and one pass writes its targets in the time of the slowest instead of the sum.
    async fn write_all<'a>(
        &self,
        resource: &ApiResource,
        api: &Api<DynamicObject>,
        writes: Vec<(&'a DynamicObject, &'a BTreeMap<String, String>)>,
    ) -> Vec<Result<Option<DynamicObject>>> {
        let mut pending = Vec::with_capacity(writes.len());
        for (object, annotations) in writes {
            pending.push(self.write(resource, api, object, annotations));
        }
        futures::stream::iter(pending)
            .buffered(WRITES_IN_FLIGHT)
            .collect()
            .await
    }

    /// Write `annotations` to `object` unless unchanged. `None` when the object is gone.
    async fn write(
        &self,
        resource: &ApiResource,
        api: &Api<DynamicObject>,
        object: &DynamicObject,
        annotations: &BTreeMap<String, String>,
    ) -> Result<Option<DynamicObject>> {
        if object.annotations() == annotations {
            return Ok(Some(object.clone()));
        }
        match patch_annotations(api, object, annotations).await {
            Ok(updated) => {
                wrote(self.ctx, resource, &updated);
                Ok(Some(updated))
            }
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(kube_err(
                "annotate",
                format!("{} {}", self.lb.spec.target_kind.kind, object.name_any()),
            )(e)),
        }
    }

    /// Second half: settle every target's state from the provider's answer, write the states and
    /// release the hooks of members that are gone.
    pub async fn complete(&self, prepared: Prepared, members: Members<'_>) -> Result<Completed> {
        let api = self.api(&prepared.resource);
        let lb_name = self.lb.name_any();
        let namespace = self.lb.namespace().unwrap_or_default();
        let mut completed = Completed {
            views: Vec::new(),
            requeue_after: None,
            transitions: Vec::new(),
            hooks_added: prepared.hooks_added,
            hooks_released: prepared.hooks_released,
        };
        // Each target's settled state and what to write, then all the writes at once.
        let planned: Vec<_> = prepared
            .targets
            .into_iter()
            .zip(&prepared.intents)
            .map(|(target, intent)| {
                let settled = settle(
                    &target.observed,
                    intent.as_ref(),
                    members,
                    prepared.now,
                    &self.settings,
                );
                let hooks = (self.settings.hooks && settled.record).then_some(settled.hooks);
                let annotations = if settled.record {
                    annotate(
                        target.object.annotations(),
                        &namespace,
                        &lb_name,
                        &self.keys,
                        Some((settled.state, settled.since)),
                        hooks,
                    )
                } else {
                    target.object.annotations().clone()
                };
                (target, settled, hooks, annotations)
            })
            .collect();
        let written = self
            .write_all(
                &prepared.resource,
                &api,
                planned
                    .iter()
                    .map(|(target, _, _, annotations)| (&target.object, annotations))
                    .collect(),
            )
            .await;
        for ((target, settled, hooks, _), result) in planned.into_iter().zip(written) {
            let observed = &target.observed;
            let had_hooks = observed.pre_drain || observed.pre_terminate;
            if result?.is_none() {
                continue;
            }
            let before = observed.recorded;
            if settled.record && before != Some(settled.state) {
                let message = match before {
                    Some(before) => format!("{before} -> {}", settled.state),
                    None => settled.state.to_string(),
                };
                // On the target itself only what explains a wait or a change of service (its
                // way out, or back in); joining is told once, on the LoadBalancer.
                if !joining(before, settled.state) {
                    self.ctx
                        .events
                        .publish(
                            &target.object.object_ref(&prepared.resource),
                            false,
                            event::TARGET_STATE_CHANGED,
                            "Reconcile",
                            format!("LoadBalancer {lb_name}: {message}"),
                        )
                        .await;
                }
                completed
                    .transitions
                    .push(format!("{}: {message}", observed.name));
            }
            match hooks {
                Some(true) if !had_hooks => completed.hooks_added.push(observed.name.clone()),
                Some(false) if had_hooks => completed.hooks_released.push(observed.name.clone()),
                _ => {}
            }
            if let Some(after) = settled.requeue_after {
                completed.requeue_after =
                    Some(completed.requeue_after.map_or(after, |r| r.min(after)));
            }
            completed.views.push(TargetView {
                name: observed.name.clone(),
                selected: observed.selected,
                wants_in: observed.wants_in(),
                state: settled.state,
                has_address: observed.address.is_some(),
                gates_pending: observed.gates_pending.clone(),
                failing_probes: prepared.failing.get(&observed.name).cloned(),
            });
        }
        Ok(completed)
    }
}

/// Let go of every object of `kind` that carries `lb`'s annotations: remove its state annotations
/// and deletion hooks (and the proposal's pair where it holds it). Used when the LoadBalancer is
/// deleted, and when its target kind changed (for the previous kind). Returns what changed;
/// a target kind that cannot be listed has nothing of ours to release that we could reach.
pub async fn release_all(
    ctx: &Context,
    lb: &LoadBalancer,
    kind: &TargetKind,
) -> Result<Vec<String>> {
    // A kind LoadBalancers may not name was never written to.
    let Ok(resource) = ctx.kinds.resolve_target(kind).await else {
        return Ok(Vec::new());
    };
    let namespace = lb.namespace().unwrap_or_default();
    let lb_name = lb.name_any();
    let keys = TargetKeys::new(&namespace, &lb_name);
    let objects = match list_where(ctx, &resource, &namespace, &annotated(&keys), |o| {
        keys.all().iter().any(|k| o.annotations().contains_key(*k))
    })
    .await
    {
        Ok(objects) => objects,
        // The kind is not installed (any more): nothing of ours can be on its objects.
        Err(e) if is_not_found(&e) => return Ok(Vec::new()),
        Err(e) => return Err(kube_err("list", format!("{kind}"))(e)),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &resource);
    let mut changes = Vec::new();
    for object in objects {
        let annotations = annotate(
            object.annotations(),
            &namespace,
            &lb_name,
            &keys,
            None,
            None,
        );
        if &annotations == object.annotations() {
            continue;
        }
        match patch_annotations(&api, &object, &annotations).await {
            Ok(updated) => {
                wrote(ctx, &resource, &updated);
                changes.push(format!("released {}", object.name_any()));
            }
            Err(e) if is_not_found(&e) => {}
            Err(e) => {
                return Err(kube_err(
                    "annotate",
                    format!("{kind} {}", object.name_any()),
                )(e));
            }
        }
    }
    Ok(changes)
}
