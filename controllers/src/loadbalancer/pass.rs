//! The pass over a LoadBalancer that exists and is not paused: validate the spec, bring the serving
//! infrastructure up, move the targets, publish, and finish with the status and Events.

use std::time::Duration;

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

use crate::class;
use crate::conditions::{
    InfraState, NotLooked, NotProbed, TargetsState, address_refused_condition, dns_condition,
    infrastructure_condition, invalid_spec_condition, paused_condition, publication_condition,
    reachable_condition, ready_condition, spec_honoured_condition, targets_condition,
    workload_condition,
};
use crate::context::Outcome;
use crate::error::{Result, kube_err};
use crate::policy::Refusal;
use crate::publication;
use crate::reachability;

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
        self.refused = self.refusals(claimed.provider.name());

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
        self.publish(&infra_state, targets_condition).await?;
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
        // The first addresses of a load balancer created now are in its creation's Event.
        let first = answer.created && self.status.addresses.is_empty();
        if answer.addresses != self.status.addresses && !first {
            let describe = |a: &[LoadBalancerAddress]| {
                a.iter()
                    .map(|a| a.address.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let message = format!(
                "addresses changed from [{}] to [{}]",
                describe(&self.status.addresses),
                describe(&answer.addresses)
            );
            self.note(false, event::ADDRESSES_CHANGED, vec![message]);
        }
        self.status.addresses = answer.addresses;
        (provisioned.state, answer.status)
    }

    /// Publish the stable endpoint (the `-ext` Service, the Cluster's control-plane endpoint, the
    /// realised Service's ingress) and set the conditions: Ready, InfrastructureReady, `targets`,
    /// EndpointPublished and the cluster endpoint's.
    async fn publish(&mut self, infra_state: &InfraState, targets: DesiredCondition) -> Result<()> {
        let infra_ready = infra_state.is_provisioned();
        let infra_condition = infrastructure_condition(infra_state);
        // An address the policy refuses is published nowhere: not in `-ext`, not in DNS, not as a
        // Service's ingress, not as a Cluster's endpoint. The load balancer and its members stay.
        let refused = self.refused.clone();
        // A load balancer made of DNS records: each address is a target of its own, left out
        // alone (one Machine's bad address does not take the name from the others).
        let publishable = match (refused.is_empty(), self.records.is_some()) {
            (true, _) => self.status.addresses.clone(),
            (false, true) => self
                .status
                .addresses
                .iter()
                .filter(|a| !refused.iter().any(|r| r.address == a.address))
                .cloned()
                .collect(),
            (false, false) => Vec::new(),
        };
        let published = if matches!(infra_state, InfraState::Problem { .. }) {
            None
        } else {
            let report =
                publication::publish_lb(self.ctx, self.lb, &publishable, infra_ready).await?;
            // A conflict is reported through the EndpointPublished condition's Warning event.
            self.note(false, event::ENDPOINT_PUBLISHED, report.changes);
            Some(report.state)
        };
        self.status.endpoint = self
            .lb
            .stable_endpoint(&self.ctx.config.cluster_domain, &self.status.addresses);
        let publication_condition = match (published.as_ref(), refused.is_empty()) {
            (Some(_), false) => Some(address_refused_condition(&refused)),
            (published, _) => published.map(|p| publication_condition(p, infra_ready)),
        };
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
        self.conditions.push(targets);
        if let Some(pc) = publication_condition {
            self.conditions.push(pc);
        }
        // A Cluster's endpoint goes into certificates: never written from a refused address.
        if refused.is_empty()
            && let Some(cc) = self.cluster_endpoint().await?
        {
            self.conditions.push(cc);
        }
        self.publish_dns(&publishable).await?;
        self.probe_reachability();
        self.workload_endpoints(&publishable);
        // The realised Service gets the provider's address as its ingress.
        if let Some(binding) = &self.binding
            && infra_ready
        {
            let host = self.status.endpoint.as_ref().map(|e| e.host.clone());
            let changes =
                class::write_back(&self.ctx.client, binding, &publishable, host.as_deref()).await?;
            self.note(false, event::ENDPOINT_PUBLISHED, changes);
        }
        Ok(())
    }

    /// The addresses of this pass the address policy refuses (see [`crate::addresses`]), for
    /// provider `provider`.
    fn refusals(&self, provider: &str) -> Vec<Refusal> {
        self.ctx.facts.refused_addresses(
            &self.ctx.config.addresses,
            &self.status.addresses,
            &self.namespace,
            provider,
        )
    }

    /// `spec.reachability`: the endpoint of a Ready LoadBalancer is probed (by the prober's own
    /// task, never here), and `Reachable` says what the last probe found.
    fn probe_reachability(&mut self) {
        let uid = self.identity.uid.clone();
        let Some(asked) = &self.lb.spec.reachability else {
            if let Some(prober) = &self.ctx.prober {
                prober.forget(&uid);
            }
            // Probes were asked for before: what they found is not true any more.
            let reported = self
                .lb
                .status
                .as_ref()
                .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == c::REACHABLE));
            if reported {
                self.conditions
                    .push(reachable_condition(Err(NotProbed::NotAsked)));
            }
            return;
        };
        let ready = self
            .conditions
            .iter()
            .any(|c| c.type_ == c::READY && c.status);
        let condition = match (&self.ctx.prober, ready, &self.status.endpoint) {
            (None, _, _) => reachable_condition(Err(NotProbed::NoProber)),
            (Some(prober), true, Some(endpoint)) => {
                let ports = reachability::tcp_ports(&self.lb.spec.ports, false);
                prober.want(
                    &uid,
                    reachability::Wanted {
                        namespace: self.namespace.clone(),
                        name: self.lb.name_any(),
                        host: endpoint.host.clone(),
                        ports,
                        ca_secret: self
                            .lb
                            .spec
                            .cluster_name
                            .as_ref()
                            .map(|c| format!("{c}-ca")),
                        period: Duration::from_secs(
                            u64::try_from(asked.period_seconds).unwrap_or(30),
                        ),
                        timeout: Duration::from_secs(
                            u64::try_from(asked.timeout_seconds).unwrap_or(5),
                        ),
                        thresholds: None,
                    },
                );
                match prober.finding(&uid) {
                    Some(found) => reachable_condition(Ok(&found)),
                    None => reachable_condition(Err(NotProbed::Pending)),
                }
            }
            (Some(prober), _, _) => {
                prober.forget(&uid);
                reachable_condition(Err(NotProbed::NotReady))
            }
        };
        self.conditions.push(condition);
    }

    /// `spec.workloadEndpoints`: the addresses of a Ready LoadBalancer are written to
    /// its workload cluster's `default/kubernetes` endpoints (by the task of [`crate::workload`],
    /// never here), and `WorkloadEndpoints` says what it last found. A LoadBalancer that is not
    /// Ready leaves what was written last (Pods keep an API server) and changes nothing.
    fn workload_endpoints(&mut self, publishable: &[LoadBalancerAddress]) {
        let uid = self.identity.uid.clone();
        let cluster = self.lb.spec.cluster_name.clone();
        let (true, Some(cluster)) = (self.lb.wants_workload_endpoints(), cluster) else {
            if let Some(workloads) = &self.ctx.workloads {
                workloads.forget(&uid);
            }
            let reported = self.lb.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == c::WORKLOAD_ENDPOINTS)
            });
            if reported {
                self.conditions
                    .push(workload_condition(Err(NotLooked::Off)));
            }
            return;
        };
        let Some(workloads) = self.ctx.workloads.clone() else {
            self.conditions
                .push(workload_condition(Err(NotLooked::NoTask)));
            return;
        };
        let ready = self
            .conditions
            .iter()
            .any(|c| c.type_ == c::READY && c.status);
        let port = self
            .lb
            .spec
            .ports
            .iter()
            .filter(|p| p.protocol == capi_lb_api::loadbalancer::Protocol::Tcp)
            .find(|p| p.name == reachability::API_SERVER_PORT_NAME)
            .or_else(|| self.lb.spec.ports.first())
            .and_then(|p| u16::try_from(p.port).ok());
        if let (true, false, Some(port)) = (ready, publishable.is_empty(), port) {
            workloads.want(
                &uid,
                crate::workload::Wanted {
                    namespace: self.namespace.clone(),
                    name: self.lb.name_any(),
                    secret: format!("{cluster}-kubeconfig"),
                    provider: self.provider.clone(),
                    addresses: publishable.to_vec(),
                    port,
                },
            );
        } else if !workloads.wants(&uid) {
            self.conditions
                .push(workload_condition(Err(NotLooked::NotReady)));
            return;
        }
        let condition = match workloads.finding(&uid) {
            Some(found) => workload_condition(Ok(&found)),
            None => workload_condition(Err(NotLooked::Pending)),
        };
        self.conditions.push(condition);
    }

    /// The DNS names of `spec.dns` through ExternalDNS (see [`crate::dns`]); nothing at all for a
    /// LoadBalancer that never had them.
    async fn publish_dns(&mut self, addresses: &[LoadBalancerAddress]) -> Result<()> {
        let reported = self
            .lb
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == c::DNS_PUBLISHED));
        let had = reported.is_some();
        // A load balancer made of DNS records has its name published with the others.
        let records = self.records.clone();
        let asks = self.lb.spec.dns.is_some() || records.is_some();
        // Never had DNS names, or their DNSEndpoint was deleted when they were removed: no call.
        if !asks && reported.is_none_or(|c| c.reason == r::DNS_DISABLED.name) {
            return Ok(());
        }
        let Some(owner) = crate::publication::dns::Owner::of(self.lb) else {
            return Ok(());
        };
        let wanted = asks.then(|| {
            let spec_names = crate::publication::dns::hostnames(self.lb);
            let asked = crate::publication::dns::unique(
                records
                    .iter()
                    .map(|r| r.hostname.as_str())
                    .chain(spec_names.iter().map(String::as_str)),
            );
            let mut options = crate::publication::dns::RecordOptions::of(self.lb);
            if let Some(records) = &records {
                options.ttl = i64::try_from(records.ttl.as_secs()).ok();
            }
            let refused =
                self.ctx
                    .facts
                    .refused_names(&self.ctx.config.names, &asked, &self.namespace);
            crate::publication::dns::Wanted {
                names: asked
                    .into_iter()
                    .filter(|n| !refused.iter().any(|(r, _)| r == n))
                    .collect(),
                options,
                refused,
            }
        });
        let published = crate::publication::dns::publish(
            &self.ctx.client,
            &self.ctx.caches,
            &owner,
            wanted.as_ref(),
            addresses,
            had,
        )
        .await?;
        self.note(false, event::DNS_ENDPOINT_CHANGED, published.changes);
        if let Some(state) = &published.state {
            self.conditions.push(dns_condition(state));
        }
        Ok(())
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
            self.ctx.reset_backoff(&self.identity.uid);
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
            self.ctx
                .metrics
                .fleet
                .became_ready(&self.identity.uid, since, now.0);
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
