//! The publication stage of a pass: after the targets settled, one immutable [`Publication`] says
//! what serves and what may be published ([`Publication::decide`], pure), and every destination is
//! a function of it, called in the order of [`DESTINATIONS`]: the `-ext` Service and
//! EndpointSlices, the status and its conditions, the Cluster's control-plane endpoint, the DNS
//! names, the reachability probe, the workload cluster's `default/kubernetes`, the realised
//! Service's ingress.
//!
//! The address policy runs once, in [`Publication::decide`], on canonical addresses (an
//! IPv4-mapped IPv6 address is the IPv4 address it maps), whichever destination is switched on or
//! off: a destination sees only [`Publication::publishable`] (and the stable endpoint derived from
//! it), never the provider's raw answer. A new kind of published endpoint is a new
//! [`Destination`], its function here, and its place in [`DESTINATIONS`].

use std::time::Duration;

use capi_lb_api::LoadBalancer;
use capi_lb_api::conditions::DesiredCondition;
use capi_lb_api::constants::{condition as c, event, reason as r};
use capi_lb_api::loadbalancer::{ApiEndpoint, LoadBalancerAddress};
use kube::ResourceExt;

use crate::class;
use crate::conditions::{
    InfraState, NotLooked, NotProbed, address_refused_condition, dns_condition,
    infrastructure_condition, publication_condition, reachable_condition, ready_condition,
    workload_condition,
};
use crate::error::Result;
use crate::policy::Refusal;
use crate::publication;
use crate::reachability;

use super::Reconciliation;
use super::consent::{Consent, Touch};

/// What a pass may publish, decided once after the targets settled.
#[derive(Clone, Debug, PartialEq)]
pub struct Publication {
    /// The serving infrastructure is provisioned (members converge, the endpoint serves).
    pub infra_ready: bool,
    /// The serving infrastructure has a problem: nothing new is published.
    pub infra_problem: bool,
    /// The provider's addresses, canonical.
    pub addresses: Vec<LoadBalancerAddress>,
    /// The addresses the address policy refuses, each with its rule.
    pub refused: Vec<Refusal>,
    /// What may be published anywhere: every address when none is refused; with a refusal,
    /// nothing, except for a load balancer made of DNS records, whose addresses are each a target
    /// of their own (one Machine's bad address does not take the name from the others).
    pub publishable: Vec<LoadBalancerAddress>,
    /// The stable endpoint (`status.endpoint`): `spec.endpoint`, else the `-ext` name, else the
    /// first publishable address.
    pub endpoint: Option<ApiEndpoint>,
}

impl Publication {
    /// What `lb` may publish of `addresses` (canonical), of which the address policy refuses
    /// `refused`; `per_address`: the load balancer is made of DNS records.
    pub fn decide(
        lb: &LoadBalancer,
        cluster_domain: &str,
        infra: &InfraState,
        addresses: Vec<LoadBalancerAddress>,
        refused: Vec<Refusal>,
        per_address: bool,
    ) -> Self {
        let publishable: Vec<LoadBalancerAddress> = if refused.is_empty() {
            addresses.clone()
        } else if per_address {
            addresses
                .iter()
                .filter(|a| !refused.iter().any(|r| r.address == a.address))
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        Self {
            infra_ready: infra.is_provisioned(),
            infra_problem: matches!(infra, InfraState::Problem { .. }),
            endpoint: lb.stable_endpoint(cluster_domain, &publishable),
            addresses,
            refused,
            publishable,
        }
    }

    /// The endpoint as `host:port`.
    fn endpoint_text(&self) -> Option<String> {
        self.endpoint
            .as_ref()
            .map(|e| format!("{}:{}", e.host, e.port))
    }
}

/// Where a pass publishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destination {
    /// The `-ext` Service and its EndpointSlices.
    External,
    /// The status: `status.endpoint`, `Ready`, `InfrastructureReady`, the targets' condition and
    /// `EndpointPublished`.
    Status,
    /// The Cluster's `spec.controlPlaneEndpoint` (its consent required).
    ClusterEndpoint,
    /// The DNS names of `spec.dns` (and a DNS provider's records) through ExternalDNS.
    Dns,
    /// The probes of `spec.reachability`.
    Reachability,
    /// The workload cluster's `default/kubernetes` (its Cluster's consent required).
    WorkloadEndpoints,
    /// The ingress of the Service of capi-lb's class this LoadBalancer realises.
    ServiceIngress,
}

/// The destinations, in the order a pass publishes to them: the status comes after `-ext` (whose
/// outcome `Ready` tells), and what waits for `Ready` (reachability, workload endpoints) after it.
pub const DESTINATIONS: [Destination; 7] = [
    Destination::External,
    Destination::Status,
    Destination::ClusterEndpoint,
    Destination::Dns,
    Destination::Reachability,
    Destination::WorkloadEndpoints,
    Destination::ServiceIngress,
];

/// What the destinations pass on to the ones after them.
struct Stage {
    /// How `-ext` stands (`None`: not published in this pass, the infrastructure has a problem).
    external: Option<publication::Published>,
    /// The targets' condition, for the status.
    targets: Option<DesiredCondition>,
    /// `Ready` is True.
    ready: bool,
}

impl Reconciliation<'_> {
    /// Publish `publication` to every destination, in order.
    pub(super) async fn publish(
        &mut self,
        publication: &Publication,
        infra: &InfraState,
        targets: DesiredCondition,
    ) -> Result<()> {
        let mut stage = Stage {
            external: None,
            targets: Some(targets),
            ready: false,
        };
        for destination in DESTINATIONS {
            match destination {
                Destination::External => self.publish_external(publication, &mut stage).await?,
                Destination::Status => self.publish_status(publication, infra, &mut stage),
                Destination::ClusterEndpoint => self.publish_cluster_endpoint(publication).await?,
                Destination::Dns => self.publish_dns(publication).await?,
                Destination::Reachability => self.publish_reachability(publication, &stage),
                Destination::WorkloadEndpoints => {
                    self.publish_workload_endpoints(publication, &stage)
                }
                Destination::ServiceIngress => self.publish_service_ingress(publication).await?,
            }
        }
        Ok(())
    }

    /// The `-ext` Service and EndpointSlices, unless the infrastructure has a problem.
    async fn publish_external(
        &mut self,
        publication: &Publication,
        stage: &mut Stage,
    ) -> Result<()> {
        if publication.infra_problem {
            return Ok(());
        }
        let report = publication::publish_lb(
            self.ctx,
            self.lb,
            &publication.publishable,
            publication.infra_ready,
        )
        .await?;
        // A conflict is reported through the EndpointPublished condition's Warning event.
        self.note(false, event::ENDPOINT_PUBLISHED, report.changes);
        stage.external = Some(report.state);
        Ok(())
    }

    /// `status.endpoint` and the conditions that say how the load balancer serves.
    fn publish_status(&mut self, publication: &Publication, infra: &InfraState, stage: &mut Stage) {
        let infra_condition = infrastructure_condition(infra);
        self.status.endpoint = publication.endpoint.clone();
        let published = match (stage.external.as_ref(), publication.refused.is_empty()) {
            (Some(_), false) => Some(address_refused_condition(&publication.refused)),
            (external, _) => external.map(|p| publication_condition(p, publication.infra_ready)),
        };
        let ready = ready_condition(
            &infra_condition,
            published.as_ref(),
            !publication.addresses.is_empty(),
            publication.endpoint_text().as_deref(),
        );
        stage.ready = ready.status;
        self.conditions.push(ready);
        self.conditions.push(infra_condition);
        if let Some(targets) = stage.targets.take() {
            self.conditions.push(targets);
        }
        if let Some(published) = published {
            self.conditions.push(published);
        }
    }

    /// The Cluster's control-plane endpoint: never from a refused address (it goes into
    /// certificates), never without the Cluster's consent ([`super::cluster`]).
    async fn publish_cluster_endpoint(&mut self, publication: &Publication) -> Result<()> {
        if !publication.refused.is_empty() {
            return Ok(());
        }
        if let Some(condition) = self.cluster_endpoint(publication).await? {
            self.conditions.push(condition);
        }
        Ok(())
    }

    /// The DNS names of `spec.dns` through ExternalDNS (see [`crate::publication::dns`]); nothing
    /// at all for a LoadBalancer that never had them.
    async fn publish_dns(&mut self, publication: &Publication) -> Result<()> {
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
            &publication.publishable,
            had,
        )
        .await?;
        self.note(false, event::DNS_ENDPOINT_CHANGED, published.changes);
        if let Some(state) = &published.state {
            self.conditions.push(dns_condition(state));
        }
        Ok(())
    }

    /// `spec.reachability`: the endpoint of a Ready LoadBalancer is probed (by the prober's own
    /// task, never here), and `Reachable` says what the last probe found.
    fn publish_reachability(&mut self, publication: &Publication, stage: &Stage) {
        let uid = self.key.clone();
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
        let condition = match (&self.ctx.prober, stage.ready, &publication.endpoint) {
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
                        ca_secret: reachability::cluster_ca_secret(
                            self.lb.spec.cluster_name.as_ref(),
                        ),
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

    /// `spec.workloadEndpoints`: the publishable addresses of a Ready LoadBalancer whose Cluster
    /// names it are written to its workload cluster's `default/kubernetes` endpoints (by the task
    /// of [`crate::workload`], never here), and `WorkloadEndpoints` says what it last found. A
    /// LoadBalancer that is not Ready leaves what was written last (Pods keep an API server) and
    /// changes nothing.
    fn publish_workload_endpoints(&mut self, publication: &Publication, stage: &Stage) {
        let uid = self.key.clone();
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
        if !self.consent.allows(Touch::WorkloadEndpoints) {
            if let Some(workloads) = &self.ctx.workloads {
                workloads.forget(&uid);
            }
            let why = match &self.consent {
                Consent::Unreadable(message) => message.clone(),
                Consent::ClusterMissing => format!("Cluster {cluster} does not exist"),
                _ => format!("Cluster {cluster} does not name this LoadBalancer"),
            };
            self.conditions
                .push(workload_condition(Err(NotLooked::NotNamed(why))));
            return;
        }
        let Some(workloads) = self.ctx.workloads.clone() else {
            self.conditions
                .push(workload_condition(Err(NotLooked::NoTask)));
            return;
        };
        let port = self
            .lb
            .spec
            .ports
            .iter()
            .filter(|p| p.protocol == capi_lb_api::loadbalancer::Protocol::Tcp)
            .find(|p| p.name == reachability::API_SERVER_PORT_NAME)
            .or_else(|| self.lb.spec.ports.first())
            .and_then(|p| u16::try_from(p.port).ok());
        if let (true, false, Some(port)) = (stage.ready, publication.publishable.is_empty(), port) {
            workloads.want(
                &uid,
                crate::workload::Wanted {
                    namespace: self.namespace.clone(),
                    name: self.lb.name_any(),
                    secret: format!("{cluster}-kubeconfig"),
                    provider: self.provider.clone(),
                    addresses: publication.publishable.clone(),
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

    /// The realised Service gets the provider's publishable addresses as its ingress.
    async fn publish_service_ingress(&mut self, publication: &Publication) -> Result<()> {
        let Some(binding) = &self.binding else {
            return Ok(());
        };
        if !publication.infra_ready {
            return Ok(());
        }
        let host = publication.endpoint.as_ref().map(|e| e.host.clone());
        let infra = &self.lb.spec.infrastructure_ref;
        let proxied = self
            .ctx
            .providers
            .get(&infra.api_group, &infra.kind)
            .is_some_and(|p| p.entry.proxies);
        let changes = class::write_back(
            &self.ctx.client,
            binding,
            &publication.publishable,
            proxied,
            host.as_deref(),
        )
        .await?;
        self.note(false, event::ENDPOINT_PUBLISHED, changes);
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lb(spec: serde_json::Value) -> LoadBalancer {
        let mut spec = spec;
        spec["infrastructureRef"] = json!({"apiGroup": "infrastructure.cluster.x-k8s.io",
                                           "kind": "InMemoryLoadBalancer", "name": "cp"});
        serde_json::from_value(json!({
            "apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer",
            "metadata": {"name": "cp", "namespace": "a"}, "spec": spec}))
        .unwrap()
    }

    fn refusal(address: &str) -> Refusal {
        Refusal {
            address: address.into(),
            rule: "loopback".into(),
        }
    }

    #[test]
    fn a_refusal_publishes_nothing_and_no_endpoint_is_derived_from_it() {
        let addresses = vec![
            LoadBalancerAddress::ip("127.0.0.1"),
            LoadBalancerAddress::ip("203.0.113.7"),
        ];
        // Publication off: the endpoint would be the first address.
        let off = lb(json!({"publication": {"enabled": false}}));
        let p = Publication::decide(
            &off,
            "cluster.local",
            &InfraState::Provisioned,
            addresses.clone(),
            vec![refusal("127.0.0.1")],
            false,
        );
        assert!(p.publishable.is_empty());
        assert_eq!(p.endpoint, None);
        // A DNS provider's addresses are each a target: the others stay.
        let p = Publication::decide(
            &off,
            "cluster.local",
            &InfraState::Provisioned,
            addresses.clone(),
            vec![refusal("127.0.0.1")],
            true,
        );
        assert_eq!(p.publishable, vec![LoadBalancerAddress::ip("203.0.113.7")]);
        assert_eq!(p.endpoint.unwrap().host, "203.0.113.7");
        // Nothing refused: the `-ext` name.
        let on = lb(json!({}));
        let p = Publication::decide(
            &on,
            "cluster.local",
            &InfraState::Provisioned,
            addresses,
            Vec::new(),
            false,
        );
        assert_eq!(p.publishable.len(), 2);
        assert_eq!(p.endpoint.unwrap().host, "cp-ext.a.svc.cluster.local");
    }

    #[test]
    fn every_destination_is_published_to_once_status_before_what_waits_for_ready() {
        let at = |d| DESTINATIONS.iter().position(|x| *x == d).unwrap();
        assert!(at(Destination::External) < at(Destination::Status));
        assert!(at(Destination::Status) < at(Destination::Reachability));
        assert!(at(Destination::Status) < at(Destination::WorkloadEndpoints));
        let mut seen = DESTINATIONS.to_vec();
        seen.dedup();
        assert_eq!(seen.len(), DESTINATIONS.len());
    }
}
