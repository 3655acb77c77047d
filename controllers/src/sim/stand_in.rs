//! The in-memory provider standing in for another provider in `capi-lb simulate`: a LoadBalancer
//! whose `infrastructureRef` names a `KubeDCLoadBalancer`, `OctaviaLoadBalancer` or
//! `ServiceLoadBalancer` keeps it, and the object stays as written (checked against its CRD schema
//! when it was loaded); only the calls go to the in-memory cloud, as if the object were an
//! `InMemoryLoadBalancer` with the defaults (addresses from the documentation range 203.0.113.0/24,
//! no provisioning delay), except that an address the object pins ([`pinned`]: Octavia's given
//! floating IP or VIP, a Service's `loadBalancerIP` or MetalLB's and kube-vip's address
//! annotations) is the address, as the real provider would make it. No cloud and no remote cluster
//! is contacted.

use std::net::IpAddr;

use async_trait::async_trait;
use capi_lb_api::InMemoryLoadBalancer;
use capi_lb_providers::entry::Entry;
use capi_lb_providers::error::ProviderError;
use capi_lb_providers::inmemory::InMemoryProvider;
use capi_lb_providers::provider::{
    DeleteOutcome, DeleteRequest, EnsureOutcome, EnsureRequest, MembersOutcome, MembersRequest,
    Provider,
};
use capi_lb_providers::{kubedc, octavia, servicelb};
use kube::Resource;
use kube::core::{DynamicObject, TypeMeta};
use serde_json::{Value, json};

/// The providers the in-memory provider stands in for, with what of theirs is not simulated.
pub const STOOD_IN_FOR: &[(&Entry, &str)] = &[
    (
        &kubedc::ENTRY,
        "kube-dc-specific settings such as the EIp and its network are not simulated; a given EIp's address is not known offline",
    ),
    (
        &octavia::ENTRY,
        "Octavia-specific settings are not simulated; a floating IP or VIP address the spec gives is the address, as Octavia would make it",
    ),
    (
        &servicelb::ENTRY,
        "the Service of the named load-balancer class is not simulated; its loadBalancerIP or MetalLB's or kube-vip's address annotation is the address, as the implementation would assign it",
    ),
];

/// What is not simulated of the provider whose infrastructure kind is `kind`, when the in-memory
/// provider stands in for it.
pub fn stood_in_for(kind: &str) -> Option<&'static str> {
    STOOD_IN_FOR
        .iter()
        .find(|(entry, _)| (entry.infrastructure)().kind == kind)
        .map(|(_, note)| *note)
}

/// The in-memory provider answering for another provider.
#[derive(Clone, Debug)]
pub struct StandIn {
    /// The infrastructure kind stood in for.
    kind: String,
    inner: InMemoryProvider,
}

impl StandIn {
    /// A stand-in for the provider of infrastructure kind `kind`, over the in-memory provider
    /// `inner`.
    pub fn new(kind: String, inner: InMemoryProvider) -> Self {
        Self { kind, inner }
    }
}

/// The address annotations of Service load-balancer implementations (comma-separated addresses).
pub const ADDRESS_ANNOTATIONS: &[&str] = &[
    "metallb.io/loadBalancerIPs",
    "metallb.universe.tf/loadBalancerIPs",
    "kube-vip.io/loadbalancerIPs",
];

/// The addresses the infrastructure object of `kind` pins, which the real provider uses as given
/// (at most one per family, the first): an OctaviaLoadBalancer's `spec.floatingIP.address`, or
/// without a floating IP its `spec.vip.address`; a ServiceLoadBalancer's `spec.loadBalancerIP` or
/// the first of [`ADDRESS_ANNOTATIONS`] it carries in `spec.annotations`. None for kube-dc (a given
/// EIp's address is in the EIp, which is not simulated).
pub fn pinned(kind: &str, spec: &Value) -> Vec<IpAddr> {
    let text = |pointer: &str| spec.pointer(pointer).and_then(Value::as_str);
    let given: Vec<&str> = if kind == (octavia::ENTRY.infrastructure)().kind {
        match spec.get("floatingIP") {
            Some(fip) => fip
                .get("address")
                .and_then(Value::as_str)
                .into_iter()
                .collect(),
            None => text("/vip/address").into_iter().collect(),
        }
    } else if kind == (servicelb::ENTRY.infrastructure)().kind {
        match text("/loadBalancerIP") {
            Some(ip) => vec![ip],
            None => ADDRESS_ANNOTATIONS
                .iter()
                .find_map(|a| spec.get("annotations")?.get(*a)?.as_str())
                .map(|list| list.split(',').map(str::trim).collect())
                .unwrap_or_default(),
        }
    } else {
        Vec::new()
    };
    let mut out: Vec<IpAddr> = Vec::new();
    for ip in given.iter().filter_map(|a| a.parse::<IpAddr>().ok()) {
        if !out.iter().any(|o| o.is_ipv4() == ip.is_ipv4()) {
            out.push(ip);
        }
    }
    out
}

/// The infrastructure object as the in-memory provider reads it: same name and UID (so the cloud's
/// ownership tags follow the real object), an `InMemoryLoadBalancer` with the default spec, or with
/// a pool of exactly the addresses the object [`pinned`].
fn as_in_memory(kind: &str, infra: &DynamicObject) -> DynamicObject {
    let pools: Vec<String> = pinned(kind, infra.data.get("spec").unwrap_or(&Value::Null))
        .into_iter()
        .map(|ip| match ip {
            IpAddr::V4(v4) => format!("{v4}/32"),
            IpAddr::V6(v6) => format!("{v6}/128"),
        })
        .collect();
    let spec = if pools.is_empty() {
        json!({})
    } else {
        json!({"addressPools": pools})
    };
    DynamicObject {
        types: Some(TypeMeta {
            api_version: InMemoryLoadBalancer::api_version(&()).into_owned(),
            kind: InMemoryLoadBalancer::kind(&()).into_owned(),
        }),
        metadata: infra.metadata.clone(),
        data: json!({"spec": spec}),
    }
}

#[async_trait]
impl Provider for StandIn {
    async fn ensure(&self, request: EnsureRequest<'_>) -> Result<EnsureOutcome, ProviderError> {
        let infra = as_in_memory(&self.kind, request.infra);
        self.inner
            .ensure(EnsureRequest {
                infra: &infra,
                ..request
            })
            .await
    }

    async fn converge_members(
        &self,
        request: MembersRequest<'_>,
    ) -> Result<MembersOutcome, ProviderError> {
        let infra = as_in_memory(&self.kind, request.infra);
        self.inner
            .converge_members(MembersRequest {
                infra: &infra,
                ..request
            })
            .await
    }

    async fn delete(&self, request: DeleteRequest<'_>) -> Result<DeleteOutcome, ProviderError> {
        let infra = request.infra.map(|i| as_in_memory(&self.kind, i));
        self.inner
            .delete(DeleteRequest {
                infra: infra.as_ref(),
                ..request
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|a| a.parse().unwrap()).collect()
    }

    #[test]
    fn pinned_addresses_are_what_the_real_provider_would_use() {
        let octavia = (octavia::ENTRY.infrastructure)().kind;
        let service = (servicelb::ENTRY.infrastructure)().kind;
        let kubedc = (kubedc::ENTRY.infrastructure)().kind;
        // Octavia: a given floating IP, else (no floating IP) the VIP address; an allocated
        // floating IP is not known.
        let given =
            json!({"vip": {"address": "10.0.0.5"}, "floatingIP": {"address": "198.51.100.7"}});
        assert_eq!(pinned(&octavia, &given), ips(&["198.51.100.7"]));
        let allocated = json!({"vip": {"address": "10.0.0.5"}, "floatingIP": {"networkID": "ext"}});
        assert_eq!(pinned(&octavia, &allocated), ips(&[]));
        assert_eq!(
            pinned(&octavia, &json!({"vip": {"address": "10.0.0.5"}})),
            ips(&["10.0.0.5"])
        );
        // Service: loadBalancerIP, else an implementation's annotation, one per family.
        assert_eq!(
            pinned(&service, &json!({"loadBalancerIP": "192.0.2.10"})),
            ips(&["192.0.2.10"])
        );
        let annotated = json!({"annotations": {
            "metallb.io/loadBalancerIPs": "192.0.2.11, 2001:db8::11,192.0.2.12"}});
        assert_eq!(
            pinned(&service, &annotated),
            ips(&["192.0.2.11", "2001:db8::11"])
        );
        assert_eq!(
            pinned(
                &service,
                &json!({"annotations": {"metallb.io/address-pool": "x"}})
            ),
            ips(&[])
        );
        assert_eq!(
            pinned(&service, &json!({"loadBalancerIP": "not-an-ip"})),
            ips(&[])
        );
        // kube-dc: a given EIp's address is in the EIp.
        assert_eq!(pinned(&kubedc, &json!({"eipName": "mine"})), ips(&[]));
    }
}
