//! What the provider reads from the `KubeDCLoadBalancer` ([`Infra`]), the names it derives from it,
//! and what marks an object as the provider's: labels, annotations, owner reference.

use std::collections::BTreeMap;

use capi_lb_api::KubeDCLoadBalancer;
use capi_lb_api::constants::DNS_LABEL_MAX;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::core::DynamicObject;
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};

use crate::error::{ProviderError, read_infrastructure};
use crate::lbservice;
use crate::provider::LoadBalancerIdentity;

/// `base + suffix` when it is a DNS label of at most 63 characters starting with a letter;
/// otherwise `capi-lb-<base cut>-<8 hex of its SHA-256><suffix>`, which always is.
pub fn derived_name(base: &str, suffix: &str) -> String {
    let candidate = format!("{base}{suffix}");
    let is_label = candidate.len() <= DNS_LABEL_MAX
        && candidate.starts_with(|c: char| c.is_ascii_lowercase())
        && candidate
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !candidate.ends_with('-');
    if is_label {
        return candidate;
    }
    let hash: String = Sha256::digest(base.as_bytes())
        .iter()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect();
    let room = DNS_LABEL_MAX - "capi-lb-".len() - 1 - hash.len() - suffix.len();
    let cut: String = base
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(room)
        .collect();
    let cut = cut.trim_matches('-');
    if cut.is_empty() {
        format!("capi-lb-{hash}{suffix}")
    } else {
        format!("capi-lb-{cut}-{hash}{suffix}")
    }
}

/// What the provider needs from the infrastructure object.
pub(super) struct Infra {
    pub(super) name: String,
    pub(super) uid: Option<String>,
    pub(super) namespace: String,
    pub(super) spec: capi_lb_api::KubeDCLoadBalancerSpec,
    pub(super) owner: Option<OwnerReference>,
}

impl Infra {
    /// Parse the `KubeDCLoadBalancer`; an invalid one is a permanent `InvalidConfiguration`.
    pub(super) fn read(
        infra: &DynamicObject,
        identity: &LoadBalancerIdentity,
    ) -> Result<Self, ProviderError> {
        let parsed: KubeDCLoadBalancer = read_infrastructure(infra)?;
        Ok(Self {
            name: infra.name_any(),
            uid: infra.metadata.uid.clone(),
            namespace: identity.namespace.clone(),
            owner: parsed.controller_owner_ref(&()).map(|mut o| {
                o.block_owner_deletion = Some(true);
                o
            }),
            spec: parsed.spec,
        })
    }

    /// The LoadBalancer Service's name: `<infra>-lb`.
    pub(super) fn service_name(&self) -> String {
        derived_name(&self.name, "-lb")
    }

    /// The name of the EIp the provider creates: `<infra>-eip`.
    fn created_eip_name(&self) -> String {
        derived_name(&self.name, "-eip")
    }

    /// The EIp in use and whether the provider owns it.
    pub(super) fn eip(&self) -> (String, bool) {
        match &self.spec.eip_name {
            Some(name) => (name.clone(), false),
            None => (self.created_eip_name(), true),
        }
    }
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
    use super::*;

    #[test]
    fn derived_names_fit_and_stay_readable() {
        assert_eq!(derived_name("cp", "-lb"), "cp-lb");
        let long = "a".repeat(80);
        let name = derived_name(&long, "-eip");
        assert!(name.len() <= 63 && name.ends_with("-eip") && name.starts_with("capi-lb-a"));
        assert_ne!(
            derived_name(&format!("{long}x"), "-lb"),
            derived_name(&format!("{long}y"), "-lb")
        );
        // Names that are not DNS-1035 labels (a leading digit, dots) are derived too.
        let dotted = derived_name("1.cp", "-lb");
        assert!(dotted.starts_with("capi-lb-1-cp-"), "{dotted}");
        assert!(
            dotted
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
    }
}
