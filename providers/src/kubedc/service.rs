//! The selectorless LoadBalancer Service `<infra>-lb` bound to the EIp, with the LoadBalancer's
//! ports; kube-dc fills its `status.loadBalancer.ingress` once OVN is programmed.

use std::collections::BTreeMap;

use capi_lb_api::constants::{ANNOTATION_EXTERNAL_ENDPOINT, FIELD_MANAGER};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

use super::KubeDcProvider;
use super::infra::{Infra, annotations, labels, meta, ours};
use super::step::{Step, api_error, conflict};
use crate::error::ProviderError;
use crate::provider::{Listener, LoadBalancerIdentity};

/// kube-dc annotation binding a LoadBalancer Service to a named EIp.
pub const BIND_ON_EIP: &str = "service.nlb.kube-dc.com/bind-on-eip";
/// kube-dc annotation binding a LoadBalancer Service to the project's `default-gw` EIp.
pub const BIND_ON_DEFAULT_GW: &str = "service.nlb.kube-dc.com/bind-on-default-gw-eip";
/// The EIp every kube-dc project namespace has.
pub const DEFAULT_GW: &str = "default-gw";

impl KubeDcProvider {
    /// The Services of `namespace`.
    pub(super) fn services(&self, namespace: &str) -> Api<Service> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Create or update the LoadBalancer Service bound to `eip`; [`Step::Wait`] on a conflict.
    pub(super) async fn ensure_service(
        &self,
        infra: &Infra,
        identity: &LoadBalancerIdentity,
        eip: &str,
        listeners: &[Listener],
        changes: &mut Vec<String>,
    ) -> Result<Step<Service>, ProviderError> {
        let name = infra.service_name();
        let api = self.services(&infra.namespace);
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
            let same = existing.spec.as_ref().and_then(|s| s.type_.as_deref())
                == Some("LoadBalancer")
                && existing.spec.as_ref().is_some_and(|s| s.selector.is_none())
                && ports_of(existing) == ports_of(&desired)
                && contains_all(&existing.metadata.annotations, &wanted_annotations)
                && contains_all(&existing.metadata.labels, &labels(identity, infra))
                && desired.metadata.owner_references.iter().flatten().all(|d| {
                    existing
                        .owner_references()
                        .iter()
                        .any(|o| o.uid == d.uid && o.controller == d.controller)
                });
            if same {
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

/// The Service's ports: one per listener, to its target port.
fn service_ports(listeners: &[Listener]) -> Vec<ServicePort> {
    listeners
        .iter()
        .map(|l| ServicePort {
            name: Some(l.name.clone()),
            port: l.port,
            target_port: Some(IntOrString::Int(l.target_port)),
            protocol: Some(l.protocol.as_str().to_string()),
            ..Default::default()
        })
        .collect()
}

/// A Service port as compared: name, port, target port, protocol.
type PortKey = (Option<String>, i32, Option<IntOrString>, Option<String>);

/// A Service's ports as compared, sorted by name and port (the protocol defaults to TCP).
fn ports_of(service: &Service) -> Vec<PortKey> {
    let mut ports: Vec<_> = service
        .spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .map(|p| {
            (
                p.name.clone(),
                p.port,
                p.target_port.clone(),
                Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
            )
        })
        .collect();
    ports.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    ports
}

/// The IPs kube-dc put in the Service's `status.loadBalancer.ingress`.
pub(super) fn ingress_ips(service: &Service) -> Vec<String> {
    service
        .status
        .iter()
        .flat_map(|s| s.load_balancer.iter())
        .flat_map(|lb| lb.ingress.iter().flatten())
        .filter_map(|i| i.ip.clone())
        .collect()
}

/// Whether `observed` has every entry of `wanted`.
fn contains_all(
    observed: &Option<BTreeMap<String, String>>,
    wanted: &BTreeMap<String, String>,
) -> bool {
    let observed = observed.clone().unwrap_or_default();
    wanted.iter().all(|(k, v)| observed.get(k) == Some(v))
}
