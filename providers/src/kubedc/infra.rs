//! What the provider reads from the `KubeDCLoadBalancer` ([`Infra`]), the names it derives from it,
//! and what marks an object as the provider's: labels, annotations, owner reference.

use std::collections::BTreeMap;

use capi_lb_api::KubeDCLoadBalancer;
use capi_lb_api::kubedc::ExternalNetworkType;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::core::DynamicObject;
use kube::{Resource, ResourceExt};

use super::remote::Remotes;
use super::step::Step;
use crate::error::{ProviderError, read_infrastructure};
use crate::lbservice;
use crate::provider::{LoadBalancerIdentity, ownership_uid};

pub use crate::lbservice::derived_name;

/// What the provider needs from the infrastructure object, and the kube-dc cluster it is in.
pub(super) struct Infra {
    pub(super) name: String,
    /// The UID that ownership is decided on ([`crate::provider::ownership_uid`]: recorded, so that
    /// it survives `clusterctl move`).
    pub(super) uid: Option<String>,
    /// The namespace of the kube-dc objects: the LoadBalancer's, or `spec.cluster.namespace`.
    pub(super) namespace: String,
    pub(super) spec: capi_lb_api::KubeDCLoadBalancerSpec,
    /// The owner reference to the `KubeDCLoadBalancer` (none in another cluster: labels decide).
    pub(super) owner: Option<OwnerReference>,
    /// The client of the kube-dc cluster.
    pub(super) client: kube::Client,
}

impl Infra {
    /// Parse the `KubeDCLoadBalancer` (an invalid one is a permanent `InvalidConfiguration`) and
    /// reach its kube-dc cluster: `local`, or the cluster of `spec.cluster` through `remotes`
    /// ([`Step::Wait`] while its kubeconfig Secret is missing).
    pub(super) async fn read(
        infra: &DynamicObject,
        identity: &LoadBalancerIdentity,
        local: &kube::Client,
        remotes: &Remotes,
    ) -> Result<Step<Self>, ProviderError> {
        let parsed: KubeDCLoadBalancer = read_infrastructure(infra)?;
        let (client, namespace, owner) = match &parsed.spec.cluster {
            None => (
                local.clone(),
                identity.namespace.clone(),
                parsed.controller_owner_ref(&()).map(|mut o| {
                    o.block_owner_deletion = Some(true);
                    o
                }),
            ),
            Some(cluster) => match remotes.client(local, &identity.namespace, cluster).await? {
                Step::Ready(client) => (client, cluster.namespace.clone(), None),
                Step::Wait(progress) => return Ok(Step::Wait(progress)),
            },
        };
        Ok(Step::Ready(Self {
            name: infra.name_any(),
            uid: ownership_uid(&infra.metadata).map(str::to_string),
            namespace,
            owner,
            spec: parsed.spec,
            client,
        }))
    }

    /// The name of the LoadBalancer Service of `slot`: `<infra>-lb`, or `<infra>-lb-<network>`.
    pub(super) fn service_name(&self, slot: Slot) -> String {
        match slot {
            Slot::First => derived_name(&self.name, "-lb"),
            Slot::Network(network) => {
                derived_name(&self.name, &format!("-lb-{}", network.as_str()))
            }
        }
    }

    /// The name of the EIp the provider creates in `slot`: `<infra>-eip`, or
    /// `<infra>-eip-<network>`.
    pub(super) fn eip_name(&self, slot: Slot) -> String {
        match slot {
            Slot::First => derived_name(&self.name, "-eip"),
            Slot::Network(network) => {
                derived_name(&self.name, &format!("-eip-{}", network.as_str()))
            }
        }
    }

    /// The slot whose Service is named `service`, if any.
    pub(super) fn slot_of_service(&self, service: &str) -> Option<Slot> {
        [
            Slot::First,
            Slot::Network(ExternalNetworkType::Cloud),
            Slot::Network(ExternalNetworkType::Public),
        ]
        .into_iter()
        .find(|slot| self.service_name(*slot) == service)
    }

    /// The slots an EIp on the wanted network may take, in the order they are tried.
    pub(super) fn slots(&self) -> [Slot; 2] {
        [Slot::First, Slot::Network(self.spec.external_network_type)]
    }
}

/// Where a realisation of the load balancer (an EIp the provider creates and the Service bound to
/// it) is named. The first one takes `<infra>-eip` and `<infra>-lb`; when `externalNetworkType`
/// changes while those names are taken by the old realisation, the new one takes
/// `<infra>-eip-<network>` and `<infra>-lb-<network>`. A slot's names end differently from any
/// other slot's, of this KubeDCLoadBalancer or another, so they never collide. A bring-your-own EIp
/// (`spec.eipName`) has only the first Service name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Slot {
    /// `<infra>-eip`, `<infra>-lb`.
    First,
    /// `<infra>-eip-<network>`, `<infra>-lb-<network>`.
    Network(ExternalNetworkType),
}

/// Labels on everything the provider creates.
pub(super) fn labels(identity: &LoadBalancerIdentity, infra: &Infra) -> BTreeMap<String, String> {
    lbservice::labels(identity, infra.uid.as_deref())
}

pub(super) use lbservice::annotations;

/// Metadata of an object `name` the provider creates: labels, annotations, owner reference.
pub(super) fn meta(name: &str, infra: &Infra, identity: &LoadBalancerIdentity) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(infra.namespace.clone()),
        labels: Some(labels(identity, infra)),
        annotations: Some(annotations(identity)),
        owner_references: infra.owner.clone().map(|o| vec![o]),
        ..Default::default()
    }
}

/// Whether an object is the provider's for this LoadBalancer (and this infrastructure object).
pub(super) fn ours(meta: &ObjectMeta, identity: &LoadBalancerIdentity, infra: &Infra) -> bool {
    lbservice::owned(meta, identity, infra.uid.as_deref())
}

#[cfg(test)]
mod tests {
    use capi_lb_api::KubeDCLoadBalancerSpec;

    use super::*;

    fn infra(name: &str, network: ExternalNetworkType) -> Infra {
        Infra {
            name: name.into(),
            uid: None,
            namespace: "ns".into(),
            spec: KubeDCLoadBalancerSpec {
                external_network_type: network,
                eip_name: None,
                cluster: None,
            },
            owner: None,
            client: kube::Client::new(
                tower::service_fn(|_: http::Request<kube::client::Body>| async {
                    Err::<http::Response<kube::client::Body>, std::io::Error>(
                        std::io::Error::other("no API in this test"),
                    )
                }),
                "default",
            ),
        }
    }

    #[tokio::test]
    async fn every_slot_has_names_of_its_own_even_when_cut() {
        let long = "a".repeat(80);
        for name in ["cp", "cp-lb", "cp-eip-cloud", long.as_str()] {
            let infra = infra(name, ExternalNetworkType::Public);
            assert_eq!(
                infra.slots(),
                [Slot::First, Slot::Network(ExternalNetworkType::Public)]
            );
            let slots = [
                Slot::First,
                Slot::Network(ExternalNetworkType::Cloud),
                Slot::Network(ExternalNetworkType::Public),
            ];
            let mut names: Vec<String> = slots
                .iter()
                .flat_map(|s| [infra.eip_name(*s), infra.service_name(*s)])
                .collect();
            assert!(names.iter().all(|n| n.len() <= 63), "{names:?}");
            names.sort();
            names.dedup();
            assert_eq!(names.len(), 6, "{name}: {names:?}");
        }
        let cp = infra("cp", ExternalNetworkType::Cloud);
        assert_eq!(
            cp.slot_of_service("cp-lb-public"),
            Some(Slot::Network(ExternalNetworkType::Public))
        );
        assert_eq!(cp.slot_of_service("cp-lb"), Some(Slot::First));
        assert_eq!(cp.slot_of_service("cp-eip"), None);
        assert_eq!(
            (
                cp.eip_name(Slot::First),
                cp.service_name(Slot::Network(ExternalNetworkType::Public))
            ),
            ("cp-eip".to_string(), "cp-lb-public".to_string())
        );
        // No slot of one KubeDCLoadBalancer has a name of another's: `cp`'s second names are not
        // the first names of a KubeDCLoadBalancer named `cp-lb` or `cp-eip`.
        let other = infra("cp-eip", ExternalNetworkType::Cloud);
        assert_ne!(
            other.eip_name(Slot::First),
            cp.eip_name(Slot::Network(ExternalNetworkType::Cloud))
        );
    }
}
