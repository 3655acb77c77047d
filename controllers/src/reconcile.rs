//! The LoadBalancer reconciler.
//!
//! One pass: honour pause, validate the spec (the CRD's own schema and CEL rules, evaluated again
//! here), release a previously used infrastructure object if `infrastructureRef` changed, claim the
//! infrastructure object (controller owner reference + finalizer, so its configuration outlives the
//! cloud resources), ask the provider to ensure the load balancer, resolve the targets, converge the
//! members, publish the `-ext` Service, and write the infrastructure object's status and the
//! LoadBalancer's status — each only when it differs from what is stored. Nothing blocks: pending
//! provider work and transient failures come back as a requeue delay.
//!
//! Deletion (finalizer): the provider deletes what it created (found by ownership tags), the
//! infrastructure object is released, the published objects are removed, then the finalizer. Each
//! step is idempotent and derived from the world, so a restart half-way continues where it stopped.

use std::sync::Arc;
use std::time::Duration;

use capi_lb_api::LoadBalancer;
use capi_lb_api::capi::Cluster;
use capi_lb_api::conditions::{DesiredCondition, merge_conditions};
use capi_lb_api::constants::{
    ANNOTATION_LOAD_BALANCER_REF, ANNOTATION_PAUSED, CAPI_GROUP, DEFAULT_PORT, FIELD_MANAGER,
    INFRASTRUCTURE_FINALIZER, LOADBALANCER_FINALIZER, MACHINE_KIND, condition as c, event,
    reason as r,
};
use capi_lb_api::loadbalancer::{
    ControlPlane, EndpointHost, InfrastructureMigration, InfrastructureRef, LoadBalancerAddress,
    LoadBalancerStatus, TargetKind,
};
use capi_lb_api::target::{TargetKeys, TargetState};
use capi_lb_api::validation::check;
use capi_lb_providers::{
    DeleteRequest, DesiredMember, EnsureRequest, Listener, LoadBalancerIdentity, MemberIntent,
    MemberState, MemberStatus, MembersRequest, Progress, Provider, ProviderError,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, Selector};
use kube::{Resource, ResourceExt};
use serde_json::{Map, Value, json};

use crate::class;
use crate::context::Context;
use crate::error::{Error, Result, kube_err};
use crate::lifecycle::{Members, Settings};
use crate::metadata::{self, controller_of, is_controlled_by};
use crate::publication;
use crate::status::{
    InfraState, MembersState, TargetsState, infrastructure_condition, is_warning,
    publication_condition, ready_condition, targets_condition,
};
use crate::targets;

/// What a reconcile asks of the scheduler.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Reconcile again after this long; `None` means "only when something changes" (plus the
    /// periodic resync in `run`).
    pub requeue_after: Option<Duration>,
}

impl Outcome {
    /// Nothing to wait for.
    pub fn done() -> Self {
        Self::default()
    }

    /// Reconcile again after `after`.
    pub fn requeue(after: Duration) -> Self {
        Self {
            requeue_after: Some(after),
        }
    }

    /// The earlier of two requeue requests.
    fn min(self, other: Option<Duration>) -> Self {
        Self {
            requeue_after: match (self.requeue_after, other) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        }
    }
}

/// Reconcile one LoadBalancer.
pub async fn reconcile(lb: Arc<LoadBalancer>, ctx: Arc<Context>) -> Result<Outcome> {
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
        return cleanup(&lb, &ctx, &api).await;
    }
    // The finalizer goes on before anything is created anywhere.
    let lb = metadata::add_finalizer(&api, &lb, LOADBALANCER_FINALIZER)
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

/// The Cluster named by `spec.clusterName`, if it exists (a missing Cluster, or Cluster API not
/// installed, is not an error).
async fn cluster_of(ctx: &Context, lb: &LoadBalancer, namespace: &str) -> Result<Option<Cluster>> {
    let Some(cluster) = &lb.spec.cluster_name else {
        return Ok(None);
    };
    let clusters: Api<Cluster> = Api::namespaced(ctx.client.clone(), namespace);
    clusters
        .get_opt(cluster)
        .await
        .map_err(kube_err("get", format!("Cluster {namespace}/{cluster}")))
}

/// Why reconciliation of `lb` is paused, if it is: the CAPI pause annotation on the LoadBalancer, or
/// `spec.paused` on its Cluster.
fn paused(lb: &LoadBalancer, cluster: Option<&Cluster>) -> Option<String> {
    if lb.annotations().contains_key(ANNOTATION_PAUSED) {
        return Some(format!(
            "the LoadBalancer has the {ANNOTATION_PAUSED} annotation"
        ));
    }
    cluster
        .filter(|c| c.spec.paused == Some(true))
        .map(|c| format!("Cluster {} has spec.paused set", c.name_any()))
}

fn describe(lb: &LoadBalancer) -> String {
    format!(
        "LoadBalancer {}/{}",
        lb.namespace().unwrap_or_default(),
        lb.name_any()
    )
}

fn identity(lb: &LoadBalancer) -> Result<LoadBalancerIdentity> {
    Ok(LoadBalancerIdentity {
        namespace: lb.namespace().unwrap_or_default(),
        name: lb.name_any(),
        uid: lb
            .uid()
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

/// What looking up and claiming an infrastructure object found.
enum Claim {
    /// Claimed.
    Claimed(Box<Claimed>),
    /// It does not exist (the message says which).
    Missing(String),
    /// It is being deleted.
    Deleting,
    /// It cannot be used: no provider for its kind, or another LoadBalancer controls it.
    Refused(&'static str, String),
}

/// A claimed infrastructure object: its provider, API, kind and the object as claimed.
struct Claimed {
    provider: Arc<dyn Provider>,
    api: Api<DynamicObject>,
    resource: ApiResource,
    infra: DynamicObject,
}

/// How bringing up a migration's new load balancer went.
enum BringUp {
    /// Provisioned, with an address, every member active: switch to it.
    Ready,
    /// Not yet; the message says what is awaited.
    Waiting(String),
    /// It cannot be brought up (reason, message); the old one keeps serving.
    Failed(&'static str, String),
}

/// How releasing an infrastructure object went.
enum Release {
    /// Nothing of ours is left on it.
    Done(Vec<String>),
    /// The provider is still deleting.
    Pending(String, Duration),
    /// It cannot be released until the user acts (the message says how).
    Blocked(&'static str, String),
}

/// State of one reconcile pass.
struct Reconciliation<'a> {
    lb: &'a LoadBalancer,
    ctx: &'a Context,
    api: Api<LoadBalancer>,
    identity: LoadBalancerIdentity,
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
    /// The Service of capi-lb's class this LoadBalancer realises, if any.
    binding: Option<class::Binding>,
}

/// How the members can be reached in this pass.
enum Access<'a> {
    /// Converge them through the provider.
    Converge {
        provider: &'a dyn Provider,
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
            binding: None,
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
        let delay = self.ctx.backoff(&self.identity.uid);
        self.outcome = self.outcome.min(Some(delay));
    }

    /// Paused: touch nothing but the Paused condition.
    async fn pause(mut self, why: String) -> Result<Outcome> {
        self.conditions
            .push(DesiredCondition::true_(c::PAUSED, r::PAUSED, why));
        self.finish().await
    }

    async fn apply(mut self) -> Result<Outcome> {
        self.conditions.push(DesiredCondition::false_(
            c::PAUSED,
            r::NOT_PAUSED,
            "reconciliation is not paused",
        ));

        // The spec, checked against the CRD's own schema and CEL rules.
        let selector = match check(self.lb)
            .map_err(|e| e.to_string())
            .and_then(|()| self.lb.effective_selector().map_err(|e| e.to_string()))
        {
            Ok(selector) => selector,
            Err(message) => {
                self.conditions.push(DesiredCondition::false_(
                    c::READY,
                    r::INVALID_SPEC,
                    format!("invalid spec, nothing was changed: {message}"),
                ));
                return self.finish().await;
            }
        };
        let selector = match &self.binding {
            Some(b) => Selector::from_iter([(
                capi_lb_api::constants::LABEL_SERVICE_NAME.to_string(),
                b.service.name_any(),
            )]),
            None => selector,
        };
        self.selector = Some(selector.clone());

        // A changed infrastructureRef migrates make-before-break; `spec_ref` is what serves now.
        let wanted = self.lb.spec.infrastructure_ref.clone();
        let spec_ref = self.migrate(&wanted, &selector).await?;

        // The provider and its infrastructure object.
        let (provider, infra_api, infra_resource, infra) = match self.claim_infra(&spec_ref).await?
        {
            Claim::Claimed(c) => (c.provider, c.api, c.resource, c.infra),
            // Gone without our finalizer having run (someone removed it): the provider may still
            // hold a load balancer for it.
            Claim::Missing(_) if self.status.infrastructure_ref.as_ref() == Some(&spec_ref) => {
                return self
                    .infra_going(&spec_ref, r::INFRASTRUCTURE_NOT_FOUND, "no longer exists")
                    .await;
            }
            Claim::Missing(message) => {
                return self
                    .infra_problem(r::INFRASTRUCTURE_NOT_FOUND, message)
                    .await;
            }
            Claim::Deleting => {
                return self
                    .infra_going(&spec_ref, r::INFRASTRUCTURE_DELETING, "is being deleted")
                    .await;
            }
            Claim::Refused(reason, message) => return self.infra_problem(reason, message).await,
        };
        self.status.infrastructure_ref = Some(spec_ref.clone());

        // Ensure the load balancer.
        let listeners = listeners(self.lb);
        let ensured = provider
            .ensure(EnsureRequest {
                identity: &self.identity,
                infra: &infra,
                listeners: &listeners,
            })
            .await;
        let (infra_state, mut infra_status) = match ensured {
            Ok(out) => {
                let reason = if out.created {
                    event::LOAD_BALANCER_CREATED
                } else {
                    event::LOAD_BALANCER_UPDATED
                };
                self.note(false, reason, out.changes);
                if out.addresses != self.status.addresses {
                    let describe = |a: &[LoadBalancerAddress]| {
                        a.iter()
                            .map(|a| a.address.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    };
                    let message = format!(
                        "addresses changed from [{}] to [{}]",
                        describe(&self.status.addresses),
                        describe(&out.addresses)
                    );
                    self.note(false, event::ADDRESSES_CHANGED, vec![message]);
                    self.status.addresses = out.addresses;
                }
                let state = match out.progress {
                    Progress::Done => InfraState::Provisioned,
                    Progress::Pending {
                        message,
                        retry_after,
                        reason,
                    } => {
                        self.outcome = self.outcome.min(Some(retry_after));
                        match reason {
                            Some(reason) => InfraState::Waiting { reason, message },
                            None => InfraState::Provisioning(message),
                        }
                    }
                };
                (state, out.status)
            }
            Err(error) => {
                let state = self.provider_problem(provider.name(), "ensure", error);
                (state, Map::new())
            }
        };
        let infra_ready = infra_state == InfraState::Provisioned;

        // Targets and members.
        let access = if infra_ready {
            Access::Converge {
                provider: provider.as_ref(),
                infra: &infra,
                listeners: &listeners,
            }
        } else {
            Access::NotConverged("members are added once the load balancer is provisioned".into())
        };
        let targets = self.move_targets(access, &mut infra_status).await?;
        self.record_targets(&selector, &targets);

        // The provider's view, on the infrastructure object.
        if !infra_status.is_empty() {
            self.write_infra_status(&infra_api, &infra_resource, &infra, infra_status)
                .await?;
        }

        // Publication.
        let infra_condition = infrastructure_condition(&infra_state);
        let published = if matches!(infra_state, InfraState::Problem { .. }) {
            None
        } else {
            let report = publication::publish_lb(
                &self.ctx.client,
                self.lb,
                &self.status.addresses,
                infra_ready,
            )
            .await?;
            // A conflict is reported through the EndpointPublished condition's Warning event.
            self.note(false, event::ENDPOINT_PUBLISHED, report.changes);
            Some(report.state)
        };
        self.status.endpoint = self
            .lb
            .stable_endpoint(&self.ctx.config.cluster_domain, &self.status.addresses);
        let publication_condition = published
            .as_ref()
            .map(|p| publication_condition(p, infra_ready));
        let endpoint = self
            .status
            .endpoint
            .as_ref()
            .map(|e| format!("{}:{}", e.host, e.port));
        self.conditions.push(ready_condition(
            &infra_condition,
            publication_condition.as_ref(),
            !self.status.addresses.is_empty(),
            endpoint.as_deref(),
        ));
        self.conditions.push(infra_condition);
        self.conditions
            .push(self.targets_condition(&selector, &targets));
        if let Some(pc) = publication_condition {
            self.conditions.push(pc);
        }
        if let Some(cc) = self.cluster_endpoint().await? {
            self.conditions.push(cc);
        }
        // The realised Service gets the provider's address as its ingress.
        if let Some(binding) = &self.binding
            && infra_ready
        {
            let host = self.status.endpoint.as_ref().map(|e| e.host.clone());
            let changes = class::write_back(
                &self.ctx.client,
                binding,
                &self.status.addresses,
                host.as_deref(),
            )
            .await?;
            self.note(false, event::ENDPOINT_PUBLISHED, changes);
        }
        self.finish().await
    }

    /// The control-plane settings of this LoadBalancer: `spec.controlPlane`, or the defaults when
    /// the Cluster (or its control-plane object) names it in the `loadBalancerRef` annotation.
    async fn control_plane(&self, cluster: &Cluster) -> Option<ControlPlane> {
        if let Some(settings) = &self.lb.spec.control_plane {
            return Some(settings.clone());
        }
        let name = self.identity.name.as_str();
        let names_us = |annotations: &std::collections::BTreeMap<String, String>| {
            annotations
                .get(ANNOTATION_LOAD_BALANCER_REF)
                .map(String::as_str)
                == Some(name)
        };
        if names_us(cluster.annotations()) {
            return Some(ControlPlane::default());
        }
        let (group, kind, cp_name) = cluster.control_plane_ref()?;
        let resource = self.ctx.kinds.resolve(&group, &kind).await.ok()?;
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.ctx.client.clone(), &self.namespace, &resource);
        let control_plane = api.get_opt(&cp_name).await.ok()??;
        names_us(control_plane.annotations()).then(ControlPlane::default)
    }

    /// Publish the endpoint to `Cluster.spec.controlPlaneEndpoint` while it is empty (never
    /// overwriting another value) and say how it stands; `None` when this is not a control-plane
    /// load balancer.
    async fn cluster_endpoint(&mut self) -> Result<Option<DesiredCondition>> {
        let Some(cluster_name) = self.lb.spec.cluster_name.clone() else {
            return Ok(None);
        };
        let Some(cluster) = self.cluster.clone() else {
            return Ok(self.lb.spec.control_plane.as_ref().map(|_| {
                DesiredCondition::false_(
                    c::CLUSTER_ENDPOINT,
                    r::CLUSTER_NOT_FOUND,
                    format!("Cluster {}/{cluster_name} does not exist", self.namespace),
                )
            }));
        };
        let Some(settings) = self.control_plane(&cluster).await else {
            return Ok(None);
        };
        if !settings.publish_endpoint {
            return Ok(None);
        }
        let port = self
            .lb
            .spec
            .ports
            .first()
            .map(|p| p.port)
            .unwrap_or(DEFAULT_PORT);
        let desired = match (&self.lb.spec.endpoint, settings.endpoint_host) {
            (Some(endpoint), _) => Some((endpoint.host.clone(), endpoint.port)),
            (None, EndpointHost::StableName) => self
                .status
                .endpoint
                .as_ref()
                .map(|e| (e.host.clone(), e.port)),
            (None, EndpointHost::ProviderAddress) => self
                .status
                .addresses
                .first()
                .map(|a| (a.address.clone(), port)),
        };
        let Some((host, port)) = desired else {
            return Ok(Some(DesiredCondition::false_(
                c::CLUSTER_ENDPOINT,
                r::WAITING_FOR_ADDRESS,
                "the provider has no address to publish to the Cluster yet",
            )));
        };
        let current = cluster
            .spec
            .control_plane_endpoint
            .clone()
            .unwrap_or_default();
        if current.is_empty() {
            // First writer wins: the patch carries the resourceVersion read, so a concurrent write
            // (CAPI filling it from the infrastructure cluster) makes it fail instead of overwriting.
            let clusters: Api<Cluster> = Api::namespaced(self.ctx.client.clone(), &self.namespace);
            let patch = json!({
                "metadata": {"resourceVersion": cluster.resource_version()},
                "spec": {"controlPlaneEndpoint": {"host": host, "port": port}},
            });
            clusters
                .patch(
                    &cluster_name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .map_err(kube_err(
                    "set controlPlaneEndpoint of",
                    format!("Cluster {}/{cluster_name}", self.namespace),
                ))?;
        } else if current.host != host || current.port != port {
            return Ok(Some(DesiredCondition::false_(
                c::CLUSTER_ENDPOINT,
                r::CLUSTER_ENDPOINT_MISMATCH,
                format!(
                    "Cluster {cluster_name} already has spec.controlPlaneEndpoint {}:{}; this LoadBalancer's endpoint is {host}:{port}. It was left unchanged: the endpoint is in the cluster's certificates and must not change",
                    current.host, current.port
                ),
            )));
        }
        Ok(Some(DesiredCondition::true_(
            c::CLUSTER_ENDPOINT,
            r::CLUSTER_ENDPOINT_SET,
            format!("Cluster {cluster_name} uses {host}:{port}"),
        )))
    }

    fn targets_condition(&self, selector: &Selector, targets: &TargetsState) -> DesiredCondition {
        let types: Vec<&str> = self
            .lb
            .spec
            .target_address_types
            .iter()
            .map(|t| t.as_str())
            .collect();
        targets_condition(
            targets,
            &self.lb.spec.target_kind.to_string(),
            &selector.to_string(),
            &types.join(", "),
        )
    }

    /// Which infrastructure object serves in this pass, moving a change of `spec.infrastructureRef`
    /// forward make-before-break: bring the new one up and populate it while the old one serves,
    /// switch once it is ready, delete the old one after `spec.drainSeconds`. A new one that cannot
    /// be brought up leaves the old one serving; going back before the switch cancels.
    async fn migrate(
        &mut self,
        spec_ref: &InfrastructureRef,
        selector: &Selector,
    ) -> Result<InfrastructureRef> {
        let Some(serving) = self.status.infrastructure_ref.clone() else {
            return Ok(spec_ref.clone());
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
                    r::MIGRATION_DRAINING,
                    vec![format!(
                        "switched from {} to {spec_ref}; {} is deleted after {}s of drain",
                        m.from, m.from, self.lb.spec.drain_seconds
                    )],
                );
                self.finish_switch(m).await?;
                Ok(spec_ref.clone())
            }
            BringUp::Waiting(message) => {
                self.conditions.push(DesiredCondition::true_(
                    c::INFRASTRUCTURE_MIGRATION,
                    r::MIGRATION_PROVISIONING,
                    format!("bringing up {spec_ref} while {serving} serves: {message}"),
                ));
                self.status.migration = Some(m);
                Ok(serving)
            }
            BringUp::Failed(reason, message) => {
                self.conditions.push(DesiredCondition::true_(
                    c::INFRASTRUCTURE_MIGRATION,
                    r::MIGRATION_BLOCKED,
                    format!("{spec_ref} cannot be brought up ({reason}): {message}; {serving} keeps serving"),
                ));
                self.status.migration = Some(m);
                Ok(serving)
            }
        }
    }

    /// After the switch: wait for the drain time, then delete the old load balancer.
    async fn finish_switch(&mut self, m: InfrastructureMigration) -> Result<()> {
        let now = self.ctx.clock.now();
        let switched = m.switched_at.as_ref().map_or(now, |t| t.0);
        let drain = jiff::SignedDuration::from_secs(i64::from(self.lb.spec.drain_seconds.max(0)));
        let deadline = switched.checked_add(drain).unwrap_or(now);
        let (from, to) = (m.from.clone(), m.to.clone());
        if now < deadline {
            let wait = Duration::try_from(deadline.duration_since(now)).unwrap_or_default();
            self.outcome = self.outcome.min(Some(wait));
            self.conditions.push(DesiredCondition::true_(
                c::INFRASTRUCTURE_MIGRATION,
                r::MIGRATION_DRAINING,
                format!("switched to {to}; {from} keeps serving existing connections until {deadline}, then it is deleted"),
            ));
            self.status.migration = Some(m);
            return Ok(());
        }
        self.status.migration = Some(m);
        match release(self.ctx, self.lb, &self.identity, &from, false).await? {
            Release::Done(changes) => {
                self.note(false, event::INFRASTRUCTURE_RELEASED, changes);
                self.status.migration = None;
                self.conditions.push(DesiredCondition::false_(
                    c::INFRASTRUCTURE_MIGRATION,
                    r::MIGRATION_COMPLETE,
                    format!("migrated from {from} to {to}"),
                ));
            }
            Release::Pending(message, retry) => {
                self.outcome = self.outcome.min(Some(retry));
                self.conditions.push(DesiredCondition::true_(
                    c::INFRASTRUCTURE_MIGRATION,
                    r::MIGRATION_DRAINING,
                    format!("switched to {to}; deleting {from}: {message}"),
                ));
            }
            Release::Blocked(reason, message) => {
                self.conditions.push(DesiredCondition::true_(
                    c::INFRASTRUCTURE_MIGRATION,
                    r::MIGRATION_BLOCKED,
                    format!("switched to {to}, but {from} cannot be deleted ({reason}): {message}"),
                ));
            }
        }
        Ok(())
    }

    /// Release a half-built migration target. True when it is gone.
    async fn cancel(&mut self, target: &InfrastructureRef) -> Result<bool> {
        match release(self.ctx, self.lb, &self.identity, target, false).await? {
            Release::Done(changes) => {
                self.note(false, event::INFRASTRUCTURE_RELEASED, changes);
                self.status.migration = None;
                self.conditions.push(DesiredCondition::false_(
                    c::INFRASTRUCTURE_MIGRATION,
                    r::MIGRATION_CANCELLED,
                    format!(
                        "the migration to {target} was cancelled; its load balancer was deleted"
                    ),
                ));
                Ok(true)
            }
            Release::Pending(message, retry) => {
                self.outcome = self.outcome.min(Some(retry));
                self.conditions.push(DesiredCondition::true_(
                    c::INFRASTRUCTURE_MIGRATION,
                    r::MIGRATION_CANCELLED,
                    format!("cancelling the migration to {target}: {message}"),
                ));
                Ok(false)
            }
            Release::Blocked(reason, message) => {
                self.conditions.push(DesiredCondition::true_(
                    c::INFRASTRUCTURE_MIGRATION,
                    r::MIGRATION_BLOCKED,
                    format!("cannot release {target} ({reason}): {message}"),
                ));
                Ok(false)
            }
        }
    }

    /// Find the provider and the infrastructure object `infra_ref` names and claim the object
    /// (controller owner reference + finalizer), or say why not.
    async fn claim_infra(&self, infra_ref: &InfrastructureRef) -> Result<Claim> {
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
        let Some(infra) = api
            .get_opt(&infra_ref.name)
            .await
            .map_err(kube_err("get", format!("{infra_ref}")))?
        else {
            return Ok(Claim::Missing(format!(
                "{} {}/{} does not exist",
                infra_ref.kind, self.namespace, infra_ref.name
            )));
        };
        if let Some(owner) = controller_of(&infra)
            && owner.uid != self.identity.uid
        {
            return Ok(Claim::Refused(
                r::INFRASTRUCTURE_IN_USE,
                format!(
                    "{} {} is already used by {} {}; each LoadBalancer needs its own infrastructure object",
                    infra_ref.kind, infra_ref.name, owner.kind, owner.name
                ),
            ));
        }
        if infra.metadata.deletion_timestamp.is_some() {
            return Ok(Claim::Deleting);
        }
        let Some(owner) = publication::controller_ref(self.lb) else {
            return Err(Error::MissingField(describe(self.lb), "uid"));
        };
        let infra = metadata::claim(&api, &infra, owner, INFRASTRUCTURE_FINALIZER)
            .await
            .map_err(kube_err("claim", format!("{infra_ref}")))?;
        Ok(Claim::Claimed(Box::new(Claimed {
            provider,
            api,
            resource,
            infra,
        })))
    }

    /// Bring the new infrastructure's load balancer up and populate it with the serving members,
    /// without touching the targets (their states and hooks follow the serving load balancer).
    async fn bring_up(
        &mut self,
        target: &InfrastructureRef,
        selector: &Selector,
    ) -> Result<BringUp> {
        let (provider, api, resource, infra) = match self.claim_infra(target).await? {
            Claim::Claimed(c) => (c.provider, c.api, c.resource, c.infra),
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
        let listeners = listeners(self.lb);
        let ensured = provider
            .ensure(EnsureRequest {
                identity: &self.identity,
                infra: &infra,
                listeners: &listeners,
            })
            .await;
        let out = match ensured {
            Ok(out) => out,
            Err(error) => {
                return Ok(
                    match self.provider_problem(provider.name(), "ensure", error) {
                        InfraState::Problem { reason, message } => BringUp::Failed(reason, message),
                        _ => BringUp::Waiting(String::new()),
                    },
                );
            }
        };
        self.note(false, event::LOAD_BALANCER_CREATED, out.changes);
        let mut infra_status = out.status;
        if let Progress::Pending {
            message,
            retry_after,
            ..
        } = out.progress
        {
            self.outcome = self.outcome.min(Some(retry_after));
            self.write_infra_status(&api, &resource, &infra, infra_status)
                .await?;
            return Ok(BringUp::Waiting(message));
        }
        if out.addresses.is_empty() {
            self.write_infra_status(&api, &resource, &infra, infra_status)
                .await?;
            return Ok(BringUp::Waiting("it has no address yet".into()));
        }
        let desired = match self.serving_members(selector).await? {
            Ok(desired) => desired,
            Err(message) => return Ok(BringUp::Waiting(message)),
        };
        let converged = provider
            .converge_members(MembersRequest {
                identity: &self.identity,
                infra: &infra,
                listeners: &listeners,
                members: &desired,
            })
            .await;
        let result = match converged {
            Ok(out) => {
                self.note(false, event::MEMBERS_CHANGED, out.changes);
                infra_status.extend(out.status);
                let active = desired.iter().all(|d| {
                    out.members
                        .iter()
                        .any(|m| m.name == d.name && m.state == MemberState::Active)
                });
                if let Some(retry) = out.progress.retry_after() {
                    self.outcome = self.outcome.min(Some(retry));
                }
                if active {
                    BringUp::Ready
                } else {
                    BringUp::Waiting(format!(
                        "{} of {} members active",
                        out.members
                            .iter()
                            .filter(|m| m.state == MemberState::Active)
                            .count(),
                        desired.len()
                    ))
                }
            }
            Err(error) => match self.provider_problem(provider.name(), "member update", error) {
                InfraState::Problem { reason, message } => BringUp::Failed(reason, message),
                _ => BringUp::Waiting(String::new()),
            },
        };
        self.write_infra_status(&api, &resource, &infra, infra_status)
            .await?;
        Ok(result)
    }

    /// The members a load balancer taking over should start with: the endpoints of the bound
    /// Service that serve, or every target that wants in, with an address, past its gates.
    /// `Ok(Err(message))` when the target kind cannot be listed.
    async fn serving_members(
        &self,
        selector: &Selector,
    ) -> Result<std::result::Result<Vec<DesiredMember>, String>> {
        if let Some(binding) = &self.binding {
            let serving = class::members(binding)
                .into_iter()
                .filter(|m| matches!(m.intent, MemberIntent::Serve(_)))
                .collect();
            return Ok(Ok(serving));
        }
        let kind = &self.lb.spec.target_kind;
        let objects = match self.ctx.kinds.resolve(&kind.api_group, &kind.kind).await {
            Ok(resource) => targets::list(&self.ctx.client, &resource, &self.namespace)
                .await
                .map_err(kube_err("list", format!("{kind}")))?,
            Err(message) => return Ok(Err(message)),
        };
        let keys = TargetKeys::new(&self.namespace, &self.identity.name);
        Ok(Ok(targets::observe(
            objects,
            selector,
            &keys,
            &self.lb.spec,
        )
        .into_iter()
        .filter(|t| t.observed.wants_in() && t.observed.gates_pending.is_empty())
        .filter_map(|t| {
            let address = t.observed.address.clone()?;
            Some(DesiredMember::serve(t.observed.name.clone(), address))
        })
        .collect()))
    }

    /// Stop after an infrastructure problem: report it, keep everything else. Targets still move
    /// as far as they can without the provider (hooks of targets that were never members are
    /// released; states of members are kept until the provider can be asked).
    async fn infra_problem(self, reason: &'static str, message: String) -> Result<Outcome> {
        let access = Access::NotConverged(format!(
            "members cannot be converged until the infrastructure is ready: {message}"
        ));
        self.infra_stop(reason, message, access).await
    }

    async fn infra_stop(
        mut self,
        reason: &'static str,
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
    async fn infra_going(
        mut self,
        spec_ref: &InfrastructureRef,
        reason: &'static str,
        what: &str,
    ) -> Result<Outcome> {
        let (message, gone) = match release(self.ctx, self.lb, &self.identity, spec_ref, false)
            .await?
        {
            Release::Done(changes) => {
                self.note(false, event::LOAD_BALANCER_DELETED, changes);
                self.status.infrastructure_ref = None;
                self.status.addresses.clear();
                let report = publication::publish_lb(&self.ctx.client, self.lb, &[], false).await?;
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
    fn provider_problem(&mut self, provider: &str, op: &str, error: ProviderError) -> InfraState {
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
            ProviderError::Permanent { reason, message } => InfraState::Problem {
                reason: r::PROVIDER_FAILED,
                message: format!("{provider} provider {op} failed ({reason}): {message}"),
            },
        }
    }

    /// Move the targets through their lifecycle around one member convergence: hooks first, then
    /// the provider, then the states (see [`targets::Pass`]).
    /// Converge `desired` through `access`: the members state for the condition, and the members
    /// the provider has (`None`: unknown).
    async fn converge(
        &mut self,
        access: Access<'_>,
        desired: &[DesiredMember],
        infra_status: &mut Map<String, Value>,
    ) -> (MembersState, Option<Vec<MemberStatus>>) {
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
                            } if capi_lb_providers::is_problem_reason(reason) => {
                                MembersState::Problem { reason, message }
                            }
                            _ => MembersState::Converged,
                        };
                        (state, Some(out.members))
                    }
                    Err(error) => {
                        match self.provider_problem(provider.name(), "member update", error) {
                            InfraState::Problem { reason, message } => {
                                (MembersState::Problem { reason, message }, None)
                            }
                            _ => (MembersState::NotConverged(String::new()), None),
                        }
                    }
                }
            }
            Access::NotConverged(why) => (MembersState::NotConverged(why), None),
            Access::Gone => (
                MembersState::NotConverged("the load balancer was deleted".into()),
                Some(Vec::new()),
            ),
        }
    }

    async fn move_targets(
        &mut self,
        access: Access<'_>,
        infra_status: &mut Map<String, Value>,
    ) -> Result<TargetsState> {
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
        if let Some(binding) = self.binding.clone() {
            let desired = class::members(&binding);
            let (members_state, members) = self.converge(access, &desired, infra_status).await;
            return Ok(TargetsState::Listed {
                targets: class::views(&desired, members.as_deref()),
                members: members_state,
            });
        }

        let Some(selector) = self.selector.clone() else {
            return Ok(TargetsState::Unavailable("the spec is invalid".into()));
        };
        let pass = targets::Pass {
            ctx: self.ctx,
            lb: self.lb,
            keys: TargetKeys::new(&self.namespace, &self.identity.name),
            selector: &selector,
            settings: Settings {
                drain: Duration::from_secs(u64::try_from(self.lb.spec.drain_seconds).unwrap_or(0)),
                hooks: kind.api_group == CAPI_GROUP && kind.kind == MACHINE_KIND,
                release_hooks: self.cluster_deleting,
            },
        };
        let prepared = match pass.prepare().await? {
            Ok(prepared) => prepared,
            Err(message) => return Ok(TargetsState::Unavailable(message)),
        };
        let desired = prepared.desired_members();
        let (members_state, members) = self.converge(access, &desired, infra_status).await;
        let known = members.as_deref().map_or(Members::Unknown, Members::Known);
        let completed = pass.complete(prepared, known).await?;
        self.note(false, event::TARGET_STATE_CHANGED, completed.transitions);
        for (reason, what, names) in [
            (
                event::DELETION_HOOKS_ADDED,
                "added to",
                completed.hooks_added,
            ),
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

    fn record_targets(&mut self, selector: &Selector, targets: &TargetsState) {
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

    async fn write_infra_status(
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
        api.patch_status(
            &infra.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(kube_err(
            "apply status of",
            format!("{} {}", resource.kind, infra.name_any()),
        ))?;
        Ok(())
    }

    /// Compute the final status, write it if it changed, and emit Events for what changed.
    async fn finish(mut self) -> Result<Outcome> {
        let now = Time(self.ctx.clock.now());
        let previous = self.lb.status.clone().unwrap_or_default();
        let generation = self.lb.meta().generation;
        self.status.conditions =
            merge_conditions(&previous.conditions, &self.conditions, generation, &now);
        self.status.ready = capi_lb_api::conditions::is_true(&self.status.conditions, c::READY);
        self.status.observed_generation = generation;

        // Events: changes made, and conditions that changed status or reason.
        for d in &self.conditions {
            let before = capi_lb_api::conditions::find(&previous.conditions, d.type_);
            let changed = before.is_none_or(|b| {
                b.status != capi_lb_api::conditions::status_str(d.status) || b.reason != d.reason
            });
            // Pausing and unpausing are both worth an Event; "not paused" on first sight is not.
            let unpaused = d.type_ == c::PAUSED && !d.status && before.is_some();
            let quiet = d.type_ == c::PAUSED && !d.status && before.is_none();
            if changed
                && !quiet
                && (d.status || unpaused || d.type_ == c::READY || is_warning(d.reason))
            {
                self.notes.push(Note {
                    warning: !d.status && is_warning(d.reason),
                    reason: d.reason,
                    message: format!("{}: {}", d.type_, d.message),
                });
            }
        }
        if self.status != previous {
            write_status(&self.api, self.lb, &self.status).await?;
        }
        if !self.transient_failure {
            self.ctx.reset_backoff(&self.identity.uid);
        }
        let reference = self.lb.object_ref(&());
        for note in self.notes {
            self.ctx
                .events
                .publish(
                    &reference,
                    note.warning,
                    note.reason,
                    "Reconcile",
                    note.message,
                )
                .await;
        }
        Ok(self.outcome)
    }
}

async fn write_status(
    api: &Api<LoadBalancer>,
    lb: &LoadBalancer,
    status: &LoadBalancerStatus,
) -> Result<()> {
    let patch = json!({
        "apiVersion": LoadBalancer::api_version(&()),
        "kind": LoadBalancer::kind(&()),
        "status": status,
    });
    api.patch_status(
        &lb.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(kube_err("apply status of", describe(lb)))?;
    Ok(())
}

/// Release one infrastructure object of `lb`: provider delete (when anything may have been
/// provisioned with it), then drop our finalizer (and owner reference).
async fn release(
    ctx: &Context,
    lb: &LoadBalancer,
    identity: &LoadBalancerIdentity,
    infra_ref: &InfrastructureRef,
    keep_owner_reference: bool,
) -> Result<Release> {
    // Provisioned by us when it is (or was) serving, or a migration brought it up.
    let recorded = lb.status.as_ref().is_some_and(|s| {
        s.infrastructure_ref.as_ref() == Some(infra_ref)
            || s.migration
                .as_ref()
                .is_some_and(|m| &m.from == infra_ref || &m.to == infra_ref)
    });
    let Some(provider) = ctx.providers.get(&infra_ref.api_group, &infra_ref.kind) else {
        return Ok(if recorded {
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
    let api: Api<DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        &identity.namespace,
        &provider.infrastructure_resource(),
    );
    let infra = api
        .get_opt(&infra_ref.name)
        .await
        .map_err(kube_err("get", format!("{infra_ref}")))?;
    let ours = infra
        .as_ref()
        .is_some_and(|i| is_controlled_by(i, &identity.uid));
    if !ours && !recorded {
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
            let delay = retry_after.unwrap_or_else(|| ctx.backoff(&identity.uid));
            return Ok(Release::Pending(
                format!(
                    "{} provider delete failed, retrying: {message}",
                    provider.name()
                ),
                delay,
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
                metadata::release(
                    &api,
                    infra,
                    &identity.uid,
                    INFRASTRUCTURE_FINALIZER,
                    keep_owner_reference,
                )
                .await
                .map_err(kube_err("release", format!("{infra_ref}")))?;
                changes.push(format!("released {infra_ref}"));
            }
            ctx.reset_backoff(&identity.uid);
            Ok(Release::Done(changes))
        }
    }
}

/// Deletion: provider cleanup for every infrastructure object this LoadBalancer may have used,
/// withdraw the published objects, then remove the finalizer.
async fn cleanup(lb: &LoadBalancer, ctx: &Context, api: &Api<LoadBalancer>) -> Result<Outcome> {
    if !lb.finalizers().iter().any(|f| f == LOADBALANCER_FINALIZER) {
        return Ok(Outcome::done());
    }
    let identity = identity(lb)?;
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
                    .publish(&reference, true, reason, "Delete", message)
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
        class::write_back(&ctx.client, &binding, &[], None).await?;
    }
    let changes = publication::withdraw_lb(&ctx.client, lb).await?;
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
    ctx.reset_backoff(&identity.uid);
    Ok(Outcome::done())
}

async fn set_deleting_condition(
    ctx: &Context,
    api: &Api<LoadBalancer>,
    lb: &LoadBalancer,
    reason: &'static str,
    message: &str,
) -> Result<()> {
    let mut status = lb.status.clone().unwrap_or_default();
    let desired = [
        DesiredCondition::false_(c::READY, reason, format!("deleting: {message}")),
        DesiredCondition::false_(c::PAUSED, r::NOT_PAUSED, "reconciliation is not paused"),
    ];
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
