//! The EIp: finding the one named in `spec.eipName` or creating `<infra>-eip`, and what to report
//! while kube-dc has not allocated its address.

use std::collections::BTreeMap;
use std::time::Duration;

use capi_lb_api::kubedc::{EIp, EIpSpec};
use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::Value;

use super::KubeDcProvider;
use super::infra::{Infra, meta, ours};
use super::reason;
use super::step::{POLL, SLOW_POLL, Step, api_error, conflict, is_not_found, not_installed};
use crate::clock::human;
use crate::error::ProviderError;
use crate::provider::{LoadBalancerIdentity, Progress};

/// After this long a not-ready EIp is reported as stuck.
pub const STUCK_AFTER: Duration = Duration::from_secs(300);

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

    /// Find or create the EIp: the EIp and whether it was created just now, or
    /// [`Step::Wait`] when the caller must stop and report.
    pub(super) async fn ensure_eip(
        &self,
        infra: &Infra,
        identity: &LoadBalancerIdentity,
        changes: &mut Vec<String>,
    ) -> Result<Step<(EIp, bool)>, ProviderError> {
        let (name, owned) = infra.eip();
        let api = eips(infra);
        let found = match api.get_opt(&name).await {
            Ok(found) => found,
            Err(e) if is_not_found(&e) => return Ok(Step::Wait(not_installed())),
            Err(e) => return Err(api_error(&format!("get EIp {name}"), e)),
        };
        if found.is_none() && !self.kube_dc_installed(&api).await? {
            return Ok(Step::Wait(not_installed()));
        }
        match (found, owned) {
            (Some(eip), false) => Ok(Step::Ready((eip, false))),
            (None, false) => Ok(Step::Wait(Progress::pending_because(
                reason::EIP_NOT_FOUND,
                format!(
                    "EIp {}/{name} named in spec.eipName does not exist; create it or fix spec.eipName",
                    infra.namespace
                ),
                SLOW_POLL,
            ))),
            (Some(eip), true) if !ours(&eip.metadata, identity, infra) => {
                Ok(Step::Wait(conflict("EIp", &name, identity)))
            }
            (Some(eip), true) => Ok(Step::Ready((eip, false))),
            (None, true) => {
                let eip = EIp {
                    metadata: meta(&name, infra, identity),
                    spec: EIpSpec {
                        external_network_type: Some(
                            infra.spec.external_network_type.as_str().to_string(),
                        ),
                        rest: BTreeMap::new(),
                    },
                    status: None,
                };
                let created = match api.create(&PostParams::default(), &eip).await {
                    Ok(created) => created,
                    Err(e) if is_not_found(&e) => return Ok(Step::Wait(not_installed())),
                    Err(e) => return Err(api_error(&format!("create EIp {name}"), e)),
                };
                changes.push(format!(
                    "created EIp {name} ({})",
                    infra.spec.external_network_type.as_str()
                ));
                Ok(Step::Ready((created, true)))
            }
        }
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
            .filter(|c| c.get("status").and_then(Value::as_str) != Some("True"))
            .filter_map(|c| {
                let reason = c.get("reason").and_then(Value::as_str).unwrap_or_default();
                let message = c.get("message").and_then(Value::as_str).unwrap_or_default();
                (!(reason.is_empty() && message.is_empty())).then(|| format!("{reason}: {message}"))
            })
            .collect();
        let quota = said.iter().any(|s| s.to_lowercase().contains("quota"));
        let kube_dc = if said.is_empty() {
            String::new()
        } else {
            format!("; kube-dc says: {}", said.join("; "))
        };
        if quota || waited >= STUCK_AFTER {
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
