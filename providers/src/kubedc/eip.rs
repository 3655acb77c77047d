//! The EIp: finding the one named in `spec.eipName` or creating `<infra>-eip`, and what to report
//! while kube-dc has not allocated its address (or never will: a namespace that is not a kube-dc
//! Project's, an EIp of the wrong network).

use std::time::Duration;

use capi_lb_api::kubedc::{EIp, EIpSpec};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};

use super::KubeDcProvider;
use super::infra::{Infra, Slot, meta, ours};
use super::reason;
use super::step::{POLL, SLOW_POLL, Step, api_error, conflict, is_not_found, not_installed};
use crate::clock::human;
use crate::error::ProviderError;
use crate::provider::{LoadBalancerIdentity, Progress};

/// The EIp a Service is to be bound to ([`KubeDcProvider::ensure_eip`]).
pub(super) struct Target {
    /// The EIp.
    pub(super) eip: EIp,
    /// Its slot (the first for a bring-your-own EIp).
    pub(super) slot: Slot,
    /// Created by this call.
    pub(super) created: bool,
    /// The provider's EIp, deleted by someone while its Service is bound: kube-dc holds it.
    pub(super) held: bool,
}

/// After this long a not-ready EIp is reported as stuck.
pub const STUCK_AFTER: Duration = Duration::from_secs(300);

/// The label kube-dc puts on the namespace of a Project; kube-dc acts in no other namespace.
pub const PROJECT_LABEL: &str = "kube-dc.com/project";

/// The EIps of `infra`'s kube-dc namespace.
pub(super) fn eips(infra: &Infra) -> Api<EIp> {
    Api::namespaced(infra.client.clone(), &infra.namespace)
}

impl KubeDcProvider {
    /// Whether kube-dc's EIp kind is served: a list of a missing resource is a 404.
    async fn kube_dc_installed(&self, eips: &Api<EIp>) -> Result<bool, ProviderError> {
        match eips.list(&ListParams::default().limit(1)).await {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(api_error("list EIps", e)),
        }
    }

    /// [`Step::Wait`] on `NotAKubeDCProject` when `infra`'s namespace is known not to be a kube-dc
    /// Project's (kube-dc never allocates an EIp or programs a Service there). A Namespace that
    /// cannot be read (no right to, in a remote cluster) or is not found claims nothing.
    pub(super) async fn project(&self, infra: &Infra) -> Result<Step<()>, ProviderError> {
        let namespaces: Api<Namespace> = Api::all(infra.client.clone());
        match namespaces.get_opt(&infra.namespace).await {
            Ok(Some(namespace)) if !namespace.labels().contains_key(PROJECT_LABEL) => {
                Ok(Step::Wait(Progress::pending_because(
                    reason::NOT_A_KUBEDC_PROJECT,
                    format!(
                        "namespace {} is not a kube-dc Project's (no label {PROJECT_LABEL}): kube-dc allocates no EIp and programs no Service there. Create the load balancer in a Project's namespace, or use spec.cluster to reach one",
                        infra.namespace
                    ),
                    SLOW_POLL,
                )))
            }
            Ok(_) => Ok(Step::Ready(())),
            Err(kube::Error::Api(status)) if status.code == 403 => Ok(Step::Ready(())),
            Err(e) => Err(api_error(&format!("get Namespace {}", infra.namespace), e)),
        }
    }

    /// Find or create the EIp the Service is to be bound to: the one named in `spec.eipName`, or
    /// the provider's on the wanted network ([`Infra::slots`]: the first free or current slot), or
    /// [`Step::Wait`] when the caller must stop and report.
    pub(super) async fn ensure_eip(
        &self,
        infra: &Infra,
        identity: &LoadBalancerIdentity,
        changes: &mut Vec<String>,
    ) -> Result<Step<Target>, ProviderError> {
        let api = eips(infra);
        if let Some(name) = &infra.spec.eip_name {
            let Some(found) = self.get_eip(infra, name).await? else {
                return self.before_creating(infra).await.map(|step| match step {
                    Step::Wait(progress) => Step::Wait(progress),
                    Step::Ready(()) => Step::Wait(Progress::pending_because(
                        reason::EIP_NOT_FOUND,
                        format!(
                            "EIp {}/{name} named in spec.eipName does not exist; create it or fix spec.eipName",
                            infra.namespace
                        ),
                        SLOW_POLL,
                    )),
                });
            };
            return Ok(Step::Ready(Target {
                eip: found,
                slot: Slot::First,
                created: false,
                held: false,
            }));
        }
        let wanted = infra.spec.external_network_type.as_str();
        let mut found = Vec::new();
        for slot in infra.slots() {
            let name = infra.eip_name(slot);
            let eip = self.get_eip(infra, &name).await?;
            found.push((slot, name, eip));
        }
        // The EIp on the wanted network, in whichever slot it is.
        for (slot, _, eip) in &found {
            if let Some(eip) = eip
                && ours(&eip.metadata, identity, infra)
                && let Some(held) = self.current(infra, identity, eip, *slot).await?
            {
                return Ok(Step::Ready(Target {
                    eip: eip.clone(),
                    slot: *slot,
                    created: false,
                    held,
                }));
            }
        }
        // None: made in the first free slot.
        let mut taken = Vec::new();
        for (slot, name, eip) in found {
            let Some(eip) = eip else {
                if let Step::Wait(progress) = self.before_creating(infra).await? {
                    return Ok(Step::Wait(progress));
                }
                let eip = EIp {
                    metadata: meta(&name, infra, identity),
                    spec: EIpSpec {
                        external_network_type: Some(wanted.to_string()),
                    },
                    status: None,
                };
                let created = match api.create(&PostParams::default(), &eip).await {
                    Ok(created) => created,
                    Err(e) if is_not_found(&e) => return Ok(Step::Wait(not_installed())),
                    Err(e) => return Err(api_error(&format!("create EIp {name}"), e)),
                };
                changes.push(format!("created EIp {name} ({wanted})"));
                return Ok(Step::Ready(Target {
                    eip: created,
                    slot,
                    created: true,
                    held: false,
                }));
            };
            if !ours(&eip.metadata, identity, infra) {
                return Ok(Step::Wait(conflict("EIp", &name, identity)));
            }
            taken.push(match eip.spec.external_network_type.as_deref() {
                Some(network) if network != wanted => format!("{name} ({network} network)"),
                _ => format!("{name} (being deleted)"),
            });
        }
        Ok(Step::Wait(Progress::pending_because(
            reason::EXTERNAL_NETWORK_CHANGING,
            format!(
                "moving to the {wanted} network: the names of a new EIp are taken by EIps {}; waiting for kube-dc to finish deleting them",
                taken.join(", ")
            ),
            POLL,
        )))
    }

    /// Whether the provider's `eip` in `slot` is the wanted one: on the wanted network (kube-dc
    /// cannot change an allocated EIp's network: one on another network is an old realisation),
    /// and not deleted, or deleted but held by kube-dc because its Service is bound to it (then it
    /// still serves). `Some(held)` when it is.
    async fn current(
        &self,
        infra: &Infra,
        identity: &LoadBalancerIdentity,
        eip: &EIp,
        slot: Slot,
    ) -> Result<Option<bool>, ProviderError> {
        let wanted = infra.spec.external_network_type.as_str();
        if eip
            .spec
            .external_network_type
            .as_deref()
            .is_some_and(|n| n != wanted)
        {
            return Ok(None);
        }
        if eip.metadata.deletion_timestamp.is_none() {
            return Ok(Some(false));
        }
        let services: Api<Service> = Api::namespaced(infra.client.clone(), &infra.namespace);
        let service_name = infra.service_name(slot);
        let bound = services
            .get_opt(&service_name)
            .await
            .map_err(|e| api_error(&format!("get Service {service_name}"), e))?
            .is_some_and(|s| {
                s.metadata.deletion_timestamp.is_none() && ours(&s.metadata, identity, infra)
            });
        Ok(bound.then_some(true))
    }

    /// EIp `name` of `infra`'s namespace, if it exists.
    async fn get_eip(&self, infra: &Infra, name: &str) -> Result<Option<EIp>, ProviderError> {
        match eips(infra).get_opt(name).await {
            Ok(found) => Ok(found),
            // Before kube-dc is installed, a get of its kind is a 404 too: checked again when the
            // EIp is missing.
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(api_error(&format!("get EIp {name}"), e)),
        }
    }

    /// Before an EIp is created (or reported missing): [`Step::Wait`] while kube-dc is not
    /// installed or the namespace is not a kube-dc Project's.
    async fn before_creating(&self, infra: &Infra) -> Result<Step<()>, ProviderError> {
        if !self.kube_dc_installed(&eips(infra)).await? {
            return Ok(Step::Wait(not_installed()));
        }
        self.project(infra).await
    }

    /// How long `eip` has been waiting, and what kube-dc says about it.
    pub(super) fn eip_waiting(&self, eip: &EIp, now: Timestamp) -> Progress {
        let name = eip.name_any();
        let since = eip
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .unwrap_or(now);
        let waited = Duration::try_from(now.duration_since(since)).unwrap_or_default();
        let said: Vec<String> = eip
            .status
            .iter()
            .flat_map(|s| s.conditions.iter())
            .filter(|c| c.status.as_deref() != Some("True"))
            .filter_map(|c| {
                let reason = c.reason.as_deref().unwrap_or_default();
                let message = c.message.as_deref().unwrap_or_default();
                (!(reason.is_empty() && message.is_empty())).then(|| format!("{reason}: {message}"))
            })
            .collect();
        // kube-dc's reasons and messages are quoted, never matched: they are not a documented API
        // (an exhausted quota has no public reason), so only the time pending makes an EIp stuck.
        let kube_dc = if said.is_empty() {
            String::new()
        } else {
            format!("; kube-dc says: {}", said.join("; "))
        };
        if waited >= STUCK_AFTER {
            Progress::pending_because(
                reason::EIP_STUCK,
                format!(
                    "EIp {name} has been pending for {}{kube_dc}. Check the project's {} IP quota and kube-dc's controller",
                    human(waited),
                    eip.spec
                        .external_network_type
                        .as_deref()
                        .unwrap_or("external"),
                ),
                SLOW_POLL.min(STUCK_AFTER),
            )
        } else {
            Progress::pending_because(
                reason::EIP_NOT_READY,
                format!(
                    "waiting for kube-dc to allocate EIp {name} (pending for {}){kube_dc}",
                    human(waited)
                ),
                POLL,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use capi_lb_api::KubeDCLoadBalancerSpec;
    use serde_json::json;

    use super::*;
    use crate::clock::SystemClock;

    /// A client whose API has three Namespaces: `forbidden` (403), `plain` (no label), `project`
    /// (labelled); any other is a 404.
    fn client() -> kube::Client {
        let service = tower::service_fn(|request: http::Request<kube::client::Body>| async move {
            let (code, body) = match request.uri().path() {
                "/api/v1/namespaces/forbidden" => (
                    403,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "reason": "Forbidden", "code": 403,
                           "message": "namespaces \"forbidden\" is forbidden"}),
                ),
                "/api/v1/namespaces/plain" => (
                    200,
                    json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "plain"}}),
                ),
                "/api/v1/namespaces/project" => (
                    200,
                    json!({"kind": "Namespace", "apiVersion": "v1",
                           "metadata": {"name": "project", "labels": {PROJECT_LABEL: "p"}}}),
                ),
                _ => (
                    404,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "reason": "NotFound", "code": 404, "message": "not found"}),
                ),
            };
            Ok::<_, std::io::Error>(
                http::Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(body.to_string().into_bytes()))
                    .unwrap(),
            )
        });
        kube::Client::new(service, "default")
    }

    fn infra(namespace: &str) -> Infra {
        Infra {
            name: "cp".into(),
            uid: None,
            namespace: namespace.into(),
            spec: KubeDCLoadBalancerSpec {
                external_network_type: Default::default(),
                eip_name: None,
                cluster: None,
            },
            owner: None,
            client: client(),
        }
    }

    #[tokio::test]
    async fn only_a_namespace_known_to_be_outside_a_project_is_reported() {
        let provider = KubeDcProvider::new(client(), Arc::new(SystemClock));
        let reason_of = |step: Step<()>| match step {
            Step::Ready(()) => None,
            Step::Wait(Progress::Pending { reason, .. }) => Some(reason),
            Step::Wait(Progress::Done) => panic!("done is not a wait"),
        };
        let plain = provider.project(&infra("plain")).await.unwrap();
        assert_eq!(
            reason_of(plain).flatten().map(|r| r.name),
            Some(reason::NOT_A_KUBEDC_PROJECT.name)
        );
        for ok in ["project", "forbidden", "missing"] {
            let step = provider.project(&infra(ok)).await.unwrap();
            assert!(reason_of(step).is_none(), "{ok}");
        }
    }
}
