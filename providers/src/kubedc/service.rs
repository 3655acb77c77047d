//! The selectorless LoadBalancer Service `<infra>-lb` (`<infra>-lb-<network>` after a change of
//! network, [`super::infra::Slot`]) bound to the EIp, with the LoadBalancer's ports; kube-dc fills
//! its `status.loadBalancer.ingress` once OVN is programmed.

use capi_lb_api::constants::{ANNOTATION_EXTERNAL_ENDPOINT, FIELD_MANAGER};
use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use kube::api::{Api, Patch, PatchParams};

use super::KubeDcProvider;
use super::infra::{Infra, Slot, annotations, meta, ours};
use super::step::{Step, api_error, conflict};
use crate::error::ProviderError;
use crate::lbservice::{service_matches, service_ports};
use crate::provider::{Listener, LoadBalancerIdentity};

/// kube-dc annotation binding a LoadBalancer Service to a named EIp.
pub const BIND_ON_EIP: &str = "service.nlb.kube-dc.com/bind-on-eip";
/// kube-dc annotation binding a LoadBalancer Service to the project's `default-gw` EIp.
pub const BIND_ON_DEFAULT_GW: &str = "service.nlb.kube-dc.com/bind-on-default-gw-eip";
/// The EIp every kube-dc project namespace has.
pub const DEFAULT_GW: &str = "default-gw";

impl KubeDcProvider {
    /// Create or update the LoadBalancer Service of `slot` bound to `eip`; [`Step::Wait`] on a
    /// conflict.
    pub(super) async fn ensure_service(
        &self,
        infra: &Infra,
        identity: &LoadBalancerIdentity,
        (slot, eip): (Slot, &str),
        listeners: &[Listener],
        changes: &mut Vec<String>,
    ) -> Result<Step<Service>, ProviderError> {
        let name = infra.service_name(slot);
        let api: Api<Service> = Api::namespaced(infra.client.clone(), &infra.namespace);
        let mut metadata = meta(&name, infra, identity);
        let mut wanted_annotations = annotations(identity);
        if eip == DEFAULT_GW {
            wanted_annotations.insert(BIND_ON_DEFAULT_GW.into(), "true".into());
        } else {
            wanted_annotations.insert(BIND_ON_EIP.into(), eip.to_string());
        }
        // capi-lb publishes the LoadBalancer's own -ext endpoint; this Service needs no other.
        wanted_annotations.insert(ANNOTATION_EXTERNAL_ENDPOINT.into(), "false".into());
        metadata.annotations = Some(wanted_annotations.clone());
        let desired = Service {
            metadata,
            spec: Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                ports: Some(service_ports(listeners)),
                ..Default::default()
            }),
            status: None,
        };
        let found = api
            .get_opt(&name)
            .await
            .map_err(|e| api_error(&format!("get Service {name}"), e))?;
        if let Some(existing) = &found {
            if !ours(&existing.metadata, identity, infra) {
                return Ok(Step::Wait(conflict("Service", &name, identity)));
            }
            if service_matches(existing, &desired) {
                return Ok(Step::Ready(existing.clone()));
            }
        }
        let applied = api
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&desired),
            )
            .await
            .map_err(|e| api_error(&format!("apply Service {name}"), e))?;
        changes.push(format!(
            "{} Service {name} bound to EIp {eip}",
            if found.is_some() {
                "updated"
            } else {
                "created"
            }
        ));
        Ok(Step::Ready(applied))
    }
}
