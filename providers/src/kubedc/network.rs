//! A change of `spec.externalNetworkType`, made before break. kube-dc cannot change an allocated
//! EIp's network (its CRD refuses a change of the EIp's field, its webhook one of a Service's
//! network annotation), so the provider makes a second realisation, an EIp on the new network and
//! a Service bound to it in the next slot ([`super::infra::Slot`]), while the old one keeps serving;
//! once the new one has its address the LoadBalancer's addresses switch to it, and the old Service,
//! then the old EIp (once kube-dc released it and removed its finalizer), are deleted.
//!
//! Nothing of it is remembered: each pass finds the realisations by their ownership labels, so a
//! restarted controller adopts both and finishes the change, and a change back makes the old
//! realisation the wanted one again and deletes the half-made one.

use std::net::IpAddr;

use capi_lb_api::constants::LABEL_SERVICE_NAME;
use capi_lb_api::kubedc::EIp;
use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams};
use kube::{Resource, ResourceExt};

use super::KubeDcProvider;
use super::infra::{Infra, ours};
use super::realise::Wanted;
use super::reason;
use super::service::BIND_ON_EIP;
use super::step::{POLL, api_error, is_not_found};
use crate::error::ProviderError;
use crate::lbservice::Ingress;
use crate::lbservice::delete::selector;
use crate::provider::{LoadBalancerIdentity, Notice, Progress};

/// An old realisation that serves: its EIp, its Service and the address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Serving {
    pub(super) eip: String,
    pub(super) service: String,
    pub(super) address: String,
}

/// What the provider answers while realisations change ([`report`]).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Report {
    /// Done once the wanted realisation serves and nothing else is left.
    pub(super) progress: Progress,
    /// The old realisation whose address is reported, while the wanted one does not serve yet.
    pub(super) serving_at: Option<Serving>,
    /// What `InfrastructureReady` says meanwhile.
    pub(super) notice: Option<Notice>,
}

/// How far a change to the `network` is, from the `wanted` realisation and the `others`: the old
/// address is reported (and `ExternalNetworkChanging`, or a problem of the new realisation) until
/// the new one serves; then the new address, still `ExternalNetworkChanging` while old objects are
/// being deleted. Without others, the wanted realisation's own progress (and its held EIp's
/// notice). Pure.
pub(super) fn report(network: &str, wanted: &Wanted, others: &Others) -> Report {
    let ready = wanted.progress.is_done();
    match (ready, others.serving.first()) {
        (true, _) if !others.leaving.is_empty() => {
            let message = format!(
                "moved to the {network} network at {}; deleting the old {}",
                wanted.address.clone().unwrap_or_default(),
                others.leaving.join(", ")
            );
            Report {
                progress: Progress::pending(message.clone(), POLL),
                serving_at: None,
                notice: Some(Notice {
                    reason: reason::EXTERNAL_NETWORK_CHANGING,
                    message,
                }),
            }
        }
        (true, _) => Report {
            progress: Progress::Done,
            serving_at: None,
            notice: wanted.held.clone(),
        },
        (false, Some(old)) => {
            let (waiting, reason) = match &wanted.progress {
                Progress::Pending {
                    message, reason, ..
                } => (message.clone(), *reason),
                Progress::Done => (String::new(), None),
            };
            let message = format!(
                "moving to the {network} network; EIp {} keeps serving at {} until the new address is ready: {waiting}",
                old.eip, old.address
            );
            // A problem of the new realisation is told as one, while the old one serves.
            let reason = reason
                .filter(|r| r.is_problem())
                .unwrap_or(reason::EXTERNAL_NETWORK_CHANGING);
            Report {
                progress: Progress::pending(
                    message.clone(),
                    wanted.progress.retry_after().unwrap_or(POLL),
                ),
                serving_at: Some(old.clone()),
                notice: Some(Notice { reason, message }),
            }
        }
        (false, None) => Report {
            progress: wanted.progress.clone(),
            serving_at: None,
            notice: None,
        },
    }
}

/// The realisations other than the wanted one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Others {
    /// Those that serve (kept while the wanted one does not).
    pub(super) serving: Vec<Serving>,
    /// Objects of the others still there, being deleted or waiting for their Service to go:
    /// `<kind> <name>`.
    pub(super) leaving: Vec<String>,
}

impl KubeDcProvider {
    /// The provider's EIps and Services of `infra` other than `target` (the wanted realisation's
    /// EIp and Service, once both exist). Those that serve are kept while `keep_serving` (the
    /// wanted one does not serve yet); the others are deleted when `target` is known, Services
    /// first (kube-dc releases an EIp only once no Service is bound to it), EIps once no Service
    /// of theirs is left. Without a `target`, nothing is deleted.
    pub(super) async fn others(
        &self,
        infra: &Infra,
        identity: &LoadBalancerIdentity,
        target: Option<(&str, &str)>,
        keep_serving: bool,
        changes: &mut Vec<String>,
    ) -> Result<Others, ProviderError> {
        let params = selector(identity, infra.uid.as_deref());
        let services_api: Api<Service> = Api::namespaced(infra.client.clone(), &infra.namespace);
        let services: Vec<Service> = services_api
            .list(&params)
            .await
            .map_err(|e| api_error("list Services", e))?
            .items
            .into_iter()
            .filter(|s| ours(&s.metadata, identity, infra))
            .filter(|s| target.is_none_or(|(_, service)| s.name_any() != service))
            .collect();
        let eips_api: Api<EIp> = Api::namespaced(infra.client.clone(), &infra.namespace);
        let eips: Vec<EIp> = match eips_api.list(&params).await {
            Ok(list) => list.items,
            // kube-dc not installed: there is no EIp.
            Err(e) if is_not_found(&e) => Vec::new(),
            Err(e) => return Err(api_error("list EIps", e)),
        }
        .into_iter()
        .filter(|e| ours(&e.metadata, identity, infra))
        .filter(|e| target.is_none_or(|(eip, _)| e.name_any() != eip))
        .collect();

        let serving: Vec<Serving> = if keep_serving {
            eips.iter()
                .filter_map(|eip| serving(eip, &services))
                .collect()
        } else {
            Vec::new()
        };
        let mut others = Others {
            serving,
            leaving: Vec::new(),
        };
        if target.is_none() {
            return Ok(others);
        }
        let kept = |name: &str| {
            others
                .serving
                .iter()
                .any(|s| s.eip == name || s.service == name)
        };
        let mut leaving = Vec::new();
        for service in services.iter().filter(|s| !kept(&s.name_any())) {
            let name = service.name_any();
            leaving.push(format!("Service {name}"));
            if service.meta().deletion_timestamp.is_none() {
                match services_api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => changes.push(format!("deleted Service {name}")),
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(api_error(&format!("delete Service {name}"), e)),
                }
                self.delete_endpoints(infra, &params, &name).await?;
            }
        }
        for eip in eips.iter().filter(|e| !kept(&e.name_any())) {
            let name = eip.name_any();
            let bound: Vec<String> = services
                .iter()
                .filter(|s| bound_to(s) == Some(name.as_str()))
                .map(ResourceExt::name_any)
                .collect();
            if !bound.is_empty() {
                leaving.push(format!(
                    "EIp {name} (once Service {} is gone)",
                    bound.join(", ")
                ));
                continue;
            }
            leaving.push(format!("EIp {name}"));
            if eip.meta().deletion_timestamp.is_none() {
                match eips_api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => changes.push(format!("deleted EIp {name}")),
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(api_error(&format!("delete EIp {name}"), e)),
                }
            }
        }
        others.leaving = leaving;
        Ok(others)
    }

    /// Delete the EndpointSlices and Endpoints of the provider's Service `service` (an owner
    /// reference would have the garbage collector do it, where one runs and the objects are in
    /// this cluster).
    async fn delete_endpoints(
        &self,
        infra: &Infra,
        params: &ListParams,
        service: &str,
    ) -> Result<(), ProviderError> {
        let mut of_service = params.clone();
        of_service.label_selector = Some(format!(
            "{},{LABEL_SERVICE_NAME}={service}",
            params.label_selector.clone().unwrap_or_default()
        ));
        let slices: Api<EndpointSlice> = Api::namespaced(infra.client.clone(), &infra.namespace);
        for slice in slices
            .list(&of_service)
            .await
            .map_err(|e| api_error("list EndpointSlices", e))?
            .items
        {
            let name = slice.name_any();
            match slices.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(api_error(&format!("delete EndpointSlice {name}"), e)),
            }
        }
        let endpoints: Api<Endpoints> = Api::namespaced(infra.client.clone(), &infra.namespace);
        let listed = endpoints
            .list(params)
            .await
            .map_err(|e| api_error("list Endpoints", e))?
            .items;
        for found in listed.iter().filter(|e| e.name_any() == service) {
            match endpoints
                .delete(&found.name_any(), &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(api_error(&format!("delete Endpoints {service}"), e)),
            }
        }
        Ok(())
    }
}

/// The EIp a Service of the provider is bound to (`bind-on-eip`).
fn bound_to(service: &Service) -> Option<&str> {
    service
        .metadata
        .annotations
        .as_ref()?
        .get(BIND_ON_EIP)
        .map(String::as_str)
}

/// `eip` serves when it has its address and one of `services` (not being deleted) is bound to it
/// and shows that address in its ingress; a deleted EIp kube-dc holds for that Service serves too.
fn serving(eip: &EIp, services: &[Service]) -> Option<Serving> {
    let address = eip
        .status
        .as_ref()
        .filter(|s| s.ready)
        .and_then(|s| s.ip_address.clone())
        .filter(|ip| ip.parse::<IpAddr>().is_ok())?;
    let name = eip.name_any();
    let service = services.iter().find(|s| {
        s.meta().deletion_timestamp.is_none()
            && bound_to(s) == Some(name.as_str())
            && Ingress::of(s).ips.contains(&address)
    })?;
    Some(Serving {
        eip: name,
        service: service.name_any(),
        address,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use capi_lb_api::kubedc::EIpStatus;
    use serde_json::json;

    use super::*;

    fn eip(name: &str, address: Option<&str>, deleting: bool) -> EIp {
        let mut eip = EIp::new(name, Default::default());
        eip.status = Some(EIpStatus {
            ready: address.is_some(),
            ip_address: address.map(str::to_string),
            ..Default::default()
        });
        if deleting {
            eip.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
            );
        }
        eip
    }

    fn service(name: &str, bound: &str, ingress: Option<&str>) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": {BIND_ON_EIP: bound}},
            "status": {"loadBalancer": {"ingress": ingress.map(|ip| vec![json!({"ip": ip})])}},
        }))
        .unwrap()
    }

    fn wanted(progress: Progress, held: bool) -> Wanted {
        Wanted {
            names: Some(("cp-eip-cloud".into(), "cp-lb-cloud".into())),
            address: progress.is_done().then(|| "100.65.0.2".to_string()),
            progress,
            created: false,
            held: held.then(|| Notice {
                reason: reason::EIP_DELETING,
                message: "held".into(),
            }),
        }
    }

    fn old() -> Serving {
        Serving {
            eip: "cp-eip".into(),
            service: "cp-lb".into(),
            address: "91.224.11.1".into(),
        }
    }

    #[test]
    fn the_old_address_is_reported_until_the_new_one_serves_then_the_old_objects_go() {
        let allocating = Progress::pending_because(reason::EIP_NOT_READY, "allocating", POLL);
        let serving = Others {
            serving: vec![old()],
            leaving: Vec::new(),
        };
        let r = report("cloud", &wanted(allocating.clone(), false), &serving);
        assert_eq!(r.serving_at, Some(old()));
        assert!(!r.progress.is_done());
        let notice = r.notice.unwrap();
        assert_eq!(notice.reason, reason::EXTERNAL_NETWORK_CHANGING);
        assert_eq!(
            notice.message,
            "moving to the cloud network; EIp cp-eip keeps serving at 91.224.11.1 until the new address is ready: allocating"
        );
        // A problem of the new one is the reason, while the old one still serves.
        let stuck = Progress::pending_because(reason::EIP_STUCK, "stuck", POLL);
        let r = report("cloud", &wanted(stuck, false), &serving);
        assert_eq!(
            (r.serving_at, r.notice.map(|n| n.reason)),
            (Some(old()), Some(reason::EIP_STUCK))
        );
        // The new one serves: its address; the old objects are being deleted.
        let leaving = Others {
            serving: Vec::new(),
            leaving: vec!["Service cp-lb".into()],
        };
        let r = report("cloud", &wanted(Progress::Done, false), &leaving);
        assert_eq!(r.serving_at, None);
        assert!(!r.progress.is_done());
        assert_eq!(
            r.notice.map(|n| (n.reason, n.message)),
            Some((
                reason::EXTERNAL_NETWORK_CHANGING,
                "moved to the cloud network at 100.65.0.2; deleting the old Service cp-lb".into()
            ))
        );
        // All gone: done, and nothing to say (but a held EIp).
        let none = Others::default();
        let r = report("cloud", &wanted(Progress::Done, false), &none);
        assert_eq!(
            (r.progress, r.serving_at, r.notice),
            (Progress::Done, None, None)
        );
        let r = report("cloud", &wanted(Progress::Done, true), &none);
        assert_eq!(r.notice.map(|n| n.reason), Some(reason::EIP_DELETING));
        // Nothing old serves: the new one's own progress, not serving.
        let r = report("cloud", &wanted(allocating.clone(), false), &none);
        assert_eq!((r.progress, r.notice), (allocating, None));
    }

    #[test]
    fn an_old_realisation_serves_only_with_its_address_on_a_live_service_bound_to_it() {
        let serving_one = Serving {
            eip: "cp-eip".into(),
            service: "cp-lb".into(),
            address: "91.224.11.1".into(),
        };
        let old = eip("cp-eip", Some("91.224.11.1"), false);
        let bound = service("cp-lb", "cp-eip", Some("91.224.11.1"));
        assert_eq!(
            serving(&old, std::slice::from_ref(&bound)),
            Some(serving_one)
        );
        // kube-dc has not put the address on the Service, or it is on another EIp's Service.
        assert_eq!(serving(&old, &[service("cp-lb", "cp-eip", None)]), None);
        assert_eq!(
            serving(&old, &[service("x-lb", "x-eip", Some("91.224.11.1"))]),
            None
        );
        // An EIp without an address does not serve; a deleted one kube-dc holds for its Service
        // does.
        assert_eq!(
            serving(&eip("cp-eip", None, false), std::slice::from_ref(&bound)),
            None
        );
        assert!(
            serving(
                &eip("cp-eip", Some("91.224.11.1"), true),
                std::slice::from_ref(&bound)
            )
            .is_some()
        );
        // Nor one whose Service is being deleted.
        let mut going = bound.clone();
        going.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        assert_eq!(serving(&old, &[going]), None);
    }
}
