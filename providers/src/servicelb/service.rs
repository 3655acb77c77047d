//! What the `ServiceLoadBalancer` asks for ([`Infra`]), the selectorless Service of
//! `type: LoadBalancer` built from it, and creating or updating that Service when it differs.

use capi_lb_api::ServiceLoadBalancer;
use capi_lb_api::constants::{ANNOTATION_EXTERNAL_ENDPOINT, FIELD_MANAGER, GROUP, VERSION};
use capi_lb_api::servicelb::ServiceLoadBalancerSpec;
use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::core::DynamicObject;

use super::reason;
use super::{SLOW_POLL, ServiceProvider};
use crate::error::{ProviderError, read_infrastructure};
use crate::lbservice::{
    Step, annotations, api_error, derived_name, labels, owned, service_matches, service_ports,
};
use crate::provider::{Listener, LoadBalancerIdentity, Progress};
use crate::sources;

/// What the provider needs from the `ServiceLoadBalancer`.
#[derive(Clone, Debug)]
pub(super) struct Infra {
    pub(super) name: String,
    pub(super) uid: Option<String>,
    pub(super) namespace: String,
    pub(super) spec: ServiceLoadBalancerSpec,
}

impl Infra {
    /// Parse the `ServiceLoadBalancer`; an invalid one is a permanent `InvalidConfiguration`.
    pub(super) fn read(
        infra: &DynamicObject,
        identity: &LoadBalancerIdentity,
    ) -> Result<Self, ProviderError> {
        let parsed: ServiceLoadBalancer = read_infrastructure(infra)?;
        Ok(Self {
            name: infra.name_any(),
            uid: infra.metadata.uid.clone(),
            namespace: identity.namespace.clone(),
            spec: parsed.spec,
        })
    }

    /// The Service's name: `<infra>-lb`.
    pub(super) fn service_name(&self) -> String {
        derived_name(&self.name, "-lb")
    }

    /// Who is expected to give the Service an address, for messages.
    pub(super) fn implementation(&self) -> String {
        match &self.spec.load_balancer_class {
            Some(class) => format!("the implementation of load-balancer class {class}"),
            None => "the cluster's default load-balancer implementation (the one that serves Services without a loadBalancerClass)".into(),
        }
    }
}

/// The source ranges the Service gets: the LoadBalancer's within the `ServiceLoadBalancer`'s own
/// (see [`crate::sources`]).
pub(super) fn source_ranges(
    infra: &Infra,
    requested: &[String],
) -> Result<Vec<String>, ProviderError> {
    sources::within(
        &infra.spec.load_balancer_source_ranges,
        requested,
        &format!(
            "ServiceLoadBalancer {}'s loadBalancerSourceRanges",
            infra.name
        ),
    )
}

/// The LoadBalancer as the Service's controller owner: the Service goes with it.
fn owner(identity: &LoadBalancerIdentity) -> OwnerReference {
    OwnerReference {
        api_version: format!("{GROUP}/{VERSION}"),
        kind: "LoadBalancer".into(),
        name: identity.name.clone(),
        uid: identity.uid.clone(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The Service for `infra`: selectorless, `type: LoadBalancer`, one port per listener, the spec's
/// implementation settings, the spec's labels and annotations under capi-lb's own, owned by the
/// LoadBalancer.
pub(super) fn desired_service(
    infra: &Infra,
    identity: &LoadBalancerIdentity,
    listeners: &[Listener],
    source_ranges: Vec<String>,
) -> Service {
    let spec = &infra.spec;
    let mut service_labels = spec.labels.clone();
    service_labels.extend(labels(identity, infra.uid.as_deref()));
    let mut service_annotations = spec.annotations.clone();
    service_annotations.extend(annotations(identity));
    // capi-lb publishes the LoadBalancer's own -ext endpoint; this Service needs no other.
    service_annotations.insert(ANNOTATION_EXTERNAL_ENDPOINT.into(), "false".into());
    let some = |v: Vec<String>| (!v.is_empty()).then_some(v);
    Service {
        metadata: ObjectMeta {
            name: Some(infra.service_name()),
            namespace: Some(infra.namespace.clone()),
            labels: Some(service_labels),
            annotations: Some(service_annotations),
            owner_references: Some(vec![owner(identity)]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ports: Some(service_ports(listeners)),
            load_balancer_class: spec.load_balancer_class.clone(),
            load_balancer_ip: spec.load_balancer_ip.clone(),
            load_balancer_source_ranges: some(source_ranges),
            external_traffic_policy: spec.external_traffic_policy.map(|p| p.as_str().to_string()),
            ip_family_policy: spec.ip_family_policy.map(|p| p.as_str().to_string()),
            ip_families: some(
                spec.ip_families
                    .iter()
                    .map(|f| f.as_str().to_string())
                    .collect(),
            ),
            allocate_load_balancer_node_ports: spec.allocate_load_balancer_node_ports,
            ..Default::default()
        }),
        status: None,
    }
}

impl ServiceProvider {
    /// The Services of `namespace`.
    pub(super) fn services(&self, namespace: &str) -> Api<Service> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Create or update the Service to be `desired`, and whether it was created; [`Step::Wait`]
    /// when a Service of that name exists and is not capi-lb's for this LoadBalancer (it is left
    /// untouched).
    pub(super) async fn ensure_service(
        &self,
        infra: &Infra,
        identity: &LoadBalancerIdentity,
        desired: &Service,
        changes: &mut Vec<String>,
    ) -> Result<Step<(Service, bool)>, ProviderError> {
        let name = desired.name_any();
        let api = self.services(&infra.namespace);
        let found = api
            .get_opt(&name)
            .await
            .map_err(|e| api_error(&format!("get Service {name}"), e))?;
        if let Some(existing) = &found {
            if !owned(&existing.metadata, identity, infra.uid.as_deref()) {
                return Ok(Step::Wait(conflict(&name, infra, identity)));
            }
            if service_matches(existing, desired) {
                return Ok(Step::Ready((existing.clone(), false)));
            }
        }
        let applied = api
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(desired),
            )
            .await
            .map_err(|e| api_error(&format!("apply Service {name}"), e))?;
        changes.push(format!(
            "{} Service {name} for {}",
            if found.is_some() {
                "updated"
            } else {
                "created"
            },
            infra.implementation()
        ));
        Ok(Step::Ready((applied, found.is_none())))
    }
}

/// Pending on `NameConflict`: Service `name` exists and is not capi-lb's.
fn conflict(name: &str, infra: &Infra, identity: &LoadBalancerIdentity) -> Progress {
    Progress::pending_because(
        reason::NAME_CONFLICT,
        format!(
            "Service {}/{name} already exists and is not managed by capi-lb for LoadBalancer {}; it was left untouched. Delete or rename it, or use another ServiceLoadBalancer name than {}",
            infra.namespace,
            identity.display(),
            infra.name
        ),
        SLOW_POLL,
    )
}

#[cfg(test)]
mod tests {
    use capi_lb_api::loadbalancer::Protocol;
    use capi_lb_api::servicelb::{IpFamily, TrafficPolicy};
    use serde_json::json;

    use std::collections::BTreeMap;

    use super::*;
    use crate::lbservice::testing::identity;
    use crate::provider::tags;

    /// Labels of `service` that the spec set, for tests.
    fn user_labels(service: &Service) -> BTreeMap<String, String> {
        service
            .labels()
            .iter()
            .filter(|(k, _)| !k.starts_with("capi-lb.") && !k.starts_with("app.kubernetes.io/"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn infra(spec: serde_json::Value) -> Infra {
        let mut object = DynamicObject::new("metal", &(crate::servicelb::ENTRY.infrastructure)())
            .within("ns")
            .data(json!({ "spec": spec }));
        object.metadata.uid = Some("infra-uid".into());
        Infra::read(&object, &identity()).unwrap()
    }

    #[test]
    fn the_service_carries_the_spec_under_capi_lbs_labels_and_is_owned_by_the_load_balancer() {
        let infra = infra(json!({
            "loadBalancerClass": "metallb.io/metallb",
            "annotations": {"metallb.io/address-pool": "public"},
            "labels": {"pool": "public"},
            "loadBalancerIP": "198.51.100.7",
            "externalTrafficPolicy": "Cluster",
            "ipFamilyPolicy": "SingleStack",
            "ipFamilies": ["IPv4"],
            "allocateLoadBalancerNodePorts": false,
        }));
        assert_eq!(
            infra.spec.external_traffic_policy,
            Some(TrafficPolicy::Cluster)
        );
        assert_eq!(infra.spec.ip_families, [IpFamily::IPv4]);
        assert_eq!(infra.spec.address_timeout_seconds, 120);
        let listeners = [Listener {
            name: "kube-apiserver".into(),
            port: 6443,
            target_port: 6443,
            protocol: Protocol::Tcp,
        }];
        let service = desired_service(&infra, &identity(), &listeners, vec!["192.0.2.0/24".into()]);
        assert_eq!(service.name_any(), "metal-lb");
        assert_eq!(
            user_labels(&service),
            BTreeMap::from([("pool".to_string(), "public".to_string())])
        );
        assert_eq!(service.labels().get(tags::UID), Some(&"lb-uid".to_string()));
        assert_eq!(
            service.labels().get(tags::INFRASTRUCTURE_UID),
            Some(&"infra-uid".to_string())
        );
        let annotations = service.annotations();
        assert_eq!(
            annotations.get("metallb.io/address-pool"),
            Some(&"public".to_string())
        );
        assert_eq!(
            annotations.get(ANNOTATION_EXTERNAL_ENDPOINT),
            Some(&"false".to_string())
        );
        assert_eq!(annotations.get(tags::NAME), Some(&"cp".to_string()));
        let owner = &service.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("LoadBalancer", "lb-uid", Some(true))
        );
        let spec = service.spec.unwrap();
        assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
        assert_eq!(spec.selector, None);
        assert_eq!(
            spec.load_balancer_class.as_deref(),
            Some("metallb.io/metallb")
        );
        assert_eq!(spec.load_balancer_ip.as_deref(), Some("198.51.100.7"));
        assert_eq!(
            spec.load_balancer_source_ranges,
            Some(vec!["192.0.2.0/24".into()])
        );
        assert_eq!(spec.external_traffic_policy.as_deref(), Some("Cluster"));
        assert_eq!(spec.ip_family_policy.as_deref(), Some("SingleStack"));
        assert_eq!(spec.ip_families, Some(vec!["IPv4".into()]));
        assert_eq!(spec.allocate_load_balancer_node_ports, Some(false));

        // An empty spec leaves every implementation setting to the API's defaults.
        let bare = desired_service(&infra_bare(), &identity(), &listeners, Vec::new());
        let spec = bare.spec.unwrap();
        assert_eq!(
            (
                spec.load_balancer_class,
                spec.load_balancer_source_ranges,
                spec.ip_families,
                spec.external_traffic_policy
            ),
            (None, None, None, None)
        );
    }

    fn infra_bare() -> Infra {
        infra(json!({}))
    }

    #[test]
    fn the_load_balancers_source_ranges_apply_within_the_infrastructures() {
        let closed = infra(json!({"loadBalancerSourceRanges": ["10.0.0.0/8"]}));
        assert_eq!(source_ranges(&closed, &[]).unwrap(), ["10.0.0.0/8"]);
        let err = source_ranges(&closed, &["192.0.2.0/24".to_string()]).unwrap_err();
        assert!(
            err.to_string()
                .contains("not within ServiceLoadBalancer metal's loadBalancerSourceRanges"),
            "{err}"
        );
    }

    #[test]
    fn an_invalid_spec_is_a_permanent_error_naming_the_field() {
        let mut object = DynamicObject::new("metal", &(crate::servicelb::ENTRY.infrastructure)())
            .within("ns")
            .data(json!({"spec": {"loadBalancerIP": "not-an-ip"}}));
        object.metadata.uid = Some("u".into());
        let err = Infra::read(&object, &identity()).unwrap_err();
        assert!(
            err.to_string()
                .contains("ServiceLoadBalancer metal is invalid")
                && err.to_string().contains("loadBalancerIP"),
            "{err}"
        );
    }
}
