//! The pass over a LoadBalancer that exists and is not paused: validate the spec, bring the serving
//! infrastructure up, move the targets, publish, and finish with the status and Events.

use capi_lb_api::LoadBalancer;
use capi_lb_api::conditions::{DesiredCondition, merge_conditions};
use capi_lb_api::constants::{FIELD_MANAGER, condition as c, event, reason as r};
use capi_lb_api::loadbalancer::{LoadBalancerAddress, LoadBalancerStatus};
use capi_lb_api::validation::check;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::core::Selector;
use kube::{Resource, ResourceExt};

use serde_json::{Map, Value, json};

use crate::conditions::{
    InfraState, TargetsState, invalid_spec_condition, paused_condition, spec_honoured_condition,
    targets_condition,
};
use crate::context::Outcome;
use crate::error::{Result, kube_err};
use crate::policy::Refusal;

use super::publish::Publication;
use super::{Access, Claim, Note, Provisioned, Reconciliation, describe};

impl Reconciliation<'_> {
    pub(super) async fn apply(mut self) -> Result<Outcome> {
        self.conditions.push(paused_condition(None));
        let Some(selector) = self.valid_selector() else {
            // Only a change of the spec can help: no retries, no resync.
            self.outcome = Outcome::until_changed();
            return self.finish().await;
        };
        self.selector = Some(selector.clone());
        self.consent = self.consent().await;

        // A changed infrastructureRef migrates make-before-break; `spec_ref` is what serves now.
        let wanted = self.lb.spec.infrastructure_ref.clone();
        let spec_ref = self.migrate(&wanted, &selector).await?;

        // The provider and its infrastructure object.
        let claimed = match self.claim(&spec_ref).await? {
            Claim::Claimed(c) => *c,
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
        self.records = (claimed.provider.entry.records)(&claimed.infra);

        // The targets first (their deletion hooks in place, the members to ask for decided), so
        // that a load balancer created now can start with its members, then the load balancer
        // ensured, then the members converged and the targets' states settled.
        let staged = self.prepare_targets().await?;
        let provisioned = self.provision(&claimed, staged.desired()).await;
        let (infra_state, mut infra_status) = self.serving(provisioned);
        self.provider = claimed.provider.name().to_string();
        let infra_ready = infra_state.is_provisioned();
        let access = if infra_ready {
            Access::Converge {
                provider: &claimed.provider,
                infra: &claimed.infra,
                listeners: &claimed.listeners,
            }
        } else {
            Access::NotConverged("members are added once the load balancer is provisioned".into())
        };
        let targets = self
            .complete_targets(staged, access, &mut infra_status)
            .await?;
        self.record_targets(&selector, &targets);
        // After the members: a load balancer made of DNS records has their addresses.
        let refused = self.refusals(claimed.provider.name());

        // The provider's view, on the infrastructure object.
        if !infra_status.is_empty() {
            self.write_infra_status(
                &claimed.api,
                &claimed.resource,
                &claimed.infra,
                infra_status,
            )
            .await?;
        }
        let targets_condition = self.targets_condition(&selector, &targets);
        // What serves and what may be published, decided once; every destination follows it.
        let publication = Publication::decide(
            self.lb,
            &self.ctx.config.cluster_domain,
            &infra_state,
            self.status.addresses.clone(),
            refused,
            self.records.is_some(),
        );
        self.publish(&publication, &infra_state, targets_condition)
            .await?;
        self.finish().await
    }

    /// The selector of a spec that passes the CRD's own schema and CEL rules (checked again here),
    /// or `None` with the Ready condition saying why not. A LoadBalancer realising a Service
    /// selects that Service's endpoints.
    fn valid_selector(&mut self) -> Option<Selector> {
        let checked = check(self.lb)
            .map_err(|e| e.to_string())
            .and_then(|()| self.lb.effective_selector().map_err(|e| e.to_string()));
        match (checked, &self.binding) {
            (Err(message), _) => {
                self.conditions.push(invalid_spec_condition(&message));
                None
            }
            (Ok(_), Some(b)) => Some(Selector::from_iter([(
                capi_lb_api::constants::LABEL_SERVICE_NAME.to_string(),
                b.service.name_any(),
            )])),
            (Ok(selector), None) => Some(selector),
        }
    }

    /// What the serving load balancer's provider said, for this LoadBalancer's status: what the
    /// spec asks that it does not do, its addresses (with an Event when they change), and its
    /// state with the fields for the infrastructure object's status.
    fn serving(&mut self, provisioned: Provisioned) -> (InfraState, Map<String, Value>) {
        let Some(answer) = provisioned.answer else {
            return (provisioned.state, Map::new());
        };
        self.conditions
            .push(spec_honoured_condition(&answer.unsupported));
        // Canonical forms only, from here on: the address policy judges `::ffff:127.0.0.1` as the
        // loopback address it is, and nothing publishes the mapped form.
        let addresses: Vec<LoadBalancerAddress> = answer
            .addresses
            .iter()
            .map(crate::policy::addresses::canonical)
            .collect();
        // The first addresses of a load balancer created now are in its creation's Event.
        let first = answer.created && self.status.addresses.is_empty();
        if addresses != self.status.addresses && !first {
            let describe = |a: &[LoadBalancerAddress]| {
                a.iter()
                    .map(|a| a.address.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let message = format!(
                "addresses changed from [{}] to [{}]",
                describe(&self.status.addresses),
                describe(&addresses)
            );
            self.note(false, event::ADDRESSES_CHANGED, vec![message]);
        }
        self.status.addresses = addresses;
        (provisioned.state, answer.status)
    }

    /// The addresses of this pass the address policy refuses (see [`crate::policy::addresses`]),
    /// for provider `provider`.
    fn refusals(&self, provider: &str) -> Vec<Refusal> {
        self.ctx.facts.refused_addresses(
            &self.ctx.config.addresses,
            &self.status.addresses,
            &self.namespace,
            provider,
        )
    }

    pub(super) fn targets_condition(
        &self,
        selector: &Selector,
        targets: &TargetsState,
    ) -> DesiredCondition {
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

    /// Compute the final status, write it if it changed, and emit Events for what changed.
    pub(super) async fn finish(mut self) -> Result<Outcome> {
        let now = Time(self.ctx.clock.now());
        let previous = self.lb.status.clone().unwrap_or_default();
        let generation = self.lb.meta().generation;
        self.status.conditions =
            merge_conditions(&previous.conditions, &self.conditions, generation, &now);
        self.status.ready = capi_lb_api::conditions::is_true(&self.status.conditions, c::READY);
        self.status.observed_generation = generation;

        // Events: changes made, and conditions that changed status or reason. A condition's
        // first value is not a change, except Ready's (it announces the endpoint, or why there is
        // none), Paused's, ClusterEndpoint's (capi-lb wrote into the Cluster) and a problem's.
        for d in &self.conditions {
            let before = capi_lb_api::conditions::find(&previous.conditions, d.type_);
            let changed = before.is_none_or(|b| {
                b.status != capi_lb_api::conditions::status_str(d.status)
                    || b.reason != d.reason.name
            });
            // Pausing and unpausing are both worth an Event.
            let unpaused = d.type_ == c::PAUSED && !d.status && before.is_some();
            let announced = [c::READY, c::PAUSED, c::CLUSTER_ENDPOINT];
            let first = before.is_none() && !announced.contains(&d.type_) && !d.is_warning();
            let quiet = first || (d.type_ == c::PAUSED && !d.status && before.is_none());
            if changed && !quiet && (d.status || unpaused || d.type_ == c::READY || d.is_warning())
            {
                // A provider's problem while its load balancer still serves (a kube-dc EIp
                // deleted and held) is worth a Warning too.
                let noticed = d.type_ == c::INFRASTRUCTURE_READY && d.reason.is_problem();
                self.notes.push(Note {
                    warning: d.is_warning() || noticed,
                    reason: d.reason.name,
                    message: format!("{}: {}", d.type_, d.message),
                });
            }
        }
        if self.status != previous {
            write_status(&self.api, self.lb, &self.status).await?;
            self.count_ready(&previous, &now);
        }
        if !self.transient_failure {
            self.ctx.reset_backoff(&self.key);
        }
        let reference = self.lb.object_ref(&());
        for note in super::merged(self.notes) {
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

impl Reconciliation<'_> {
    /// `time_to_ready_seconds`, once the status with Ready True is written over one without:
    /// since Ready's last transition (to False or Unknown), or since the LoadBalancer's creation
    /// when it had no Ready condition yet.
    fn count_ready(&self, previous: &LoadBalancerStatus, now: &Time) {
        let was = capi_lb_api::conditions::find(&previous.conditions, c::READY);
        if !self.status.ready || was.is_some_and(|r| r.status == "True") {
            return;
        }
        let since = match was {
            Some(r) => Some(r.last_transition_time.0),
            None => self.lb.meta().creation_timestamp.as_ref().map(|t| t.0),
        };
        if let Some(since) = since {
            self.ctx.metrics.fleet.became_ready(&self.key, since, now.0);
        }
    }
}

pub(super) async fn write_status(
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
