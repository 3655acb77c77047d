//! capi-lb's own kinds, listed once: what prints the CRDs, what `simulate` admits and validates,
//! what the in-memory API serves and what `uninstall` looks at all read this list, so a new kind
//! is added here and nowhere else.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::ApiResource;
use kube::{CustomResourceExt, Resource};
use serde::Serialize;
use serde_json::Value;

use crate::validation::{FieldError, FieldErrors, Validated, parse};
use crate::{
    DNSLoadBalancer, InMemoryLoadBalancer, KubeDCLoadBalancer, LoadBalancer, OctaviaLoadBalancer,
    ServiceLoadBalancer, ZonedLoadBalancer,
};

/// One of capi-lb's kinds.
#[derive(Clone, Copy)]
pub struct Kind {
    /// Its API resource (group, version, kind, plural).
    pub resource: fn() -> ApiResource,
    /// Its CustomResourceDefinition, as `capi-lb crds` prints it.
    pub crd: fn() -> CustomResourceDefinition,
    /// `object` checked against the kind's schema and CEL rules as the apiserver checks it, with
    /// defaults applied: the object as it would be stored.
    pub validate: fn(&Value) -> Result<Value, FieldErrors>,
    /// Shipped to users: every kind but the in-memory provider's, which tests, demos and
    /// `simulate` use (tenants' roles never grant it).
    pub shipped: bool,
}

impl Kind {
    /// The kind's name (`LoadBalancer`, `ZonedLoadBalancer`, ...).
    pub fn name(&self) -> String {
        (self.resource)().kind
    }
}

impl std::fmt::Debug for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = (self.resource)();
        write!(f, "{}/{}", r.api_version, r.kind)
    }
}

/// `object` validated as a `K`, back to JSON.
fn validate<K: Validated + Serialize>(object: &Value) -> Result<Value, FieldErrors> {
    let parsed: K = parse(object)?;
    serde_json::to_value(parsed).map_err(|e| FieldErrors(vec![FieldError::new("", e.to_string())]))
}

fn resource<K: Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

fn kind<K>(shipped: bool) -> Kind
where
    K: Resource<DynamicType = ()> + CustomResourceExt + Validated + Serialize,
{
    Kind {
        resource: resource::<K>,
        crd: K::crd,
        validate: validate::<K>,
        shipped,
    }
}

/// Every kind capi-lb defines, in the order `capi-lb crds` prints them: the LoadBalancer, then
/// the providers' infrastructure kinds.
pub fn all() -> [Kind; 7] {
    [
        kind::<LoadBalancer>(true),
        kind::<InMemoryLoadBalancer>(false),
        kind::<KubeDCLoadBalancer>(true),
        kind::<OctaviaLoadBalancer>(true),
        kind::<ServiceLoadBalancer>(true),
        kind::<DNSLoadBalancer>(true),
        kind::<ZonedLoadBalancer>(true),
    ]
}

/// The kind named `kind` of API version `api_version`, if it is one of capi-lb's.
pub fn find(api_version: &str, kind: &str) -> Option<Kind> {
    all().into_iter().find(|k| {
        let r = (k.resource)();
        r.api_version == api_version && r.kind == kind
    })
}

/// The names of the kinds of `group`, in order.
pub fn names_in(group: &str) -> Vec<String> {
    all()
        .iter()
        .map(|k| (k.resource)())
        .filter(|r| r.group == group)
        .map(|r| r.kind)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::constants::{GROUP, INFRASTRUCTURE_GROUP};
    use serde_json::json;

    #[test]
    fn each_kind_is_its_crd() {
        for kind in all() {
            let r = (kind.resource)();
            let crd = (kind.crd)();
            assert_eq!(crd.spec.names.kind, r.kind);
            assert_eq!(crd.spec.group, r.group);
            assert_eq!(crd.spec.names.plural, r.plural);
            assert!(crd.spec.versions.iter().any(|v| v.name == r.version));
            // The in-memory API registers them so.
            assert_eq!(crd.spec.scope, "Namespaced");
        }
        assert_eq!(names_in(GROUP), ["LoadBalancer"]);
        assert_eq!(names_in(INFRASTRUCTURE_GROUP).len(), 6);
        assert_eq!(
            all()
                .iter()
                .filter(|k| !k.shipped)
                .map(Kind::name)
                .collect::<Vec<_>>(),
            ["InMemoryLoadBalancer"]
        );
    }

    #[test]
    fn validation_applies_the_schema() {
        let lb = find("loadbalancer.cluster.x-k8s.io/v1alpha1", "LoadBalancer").unwrap();
        let bad = json!({
            "apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer",
            "metadata": {"name": "a", "namespace": "n"},
            "spec": {"ports": "not a list"}
        });
        assert!((lb.validate)(&bad).is_err());
        assert!(find("v1", "Service").is_none());
        assert!(
            find(
                "infrastructure.cluster.x-k8s.io/v1beta1",
                "ZonedLoadBalancer"
            )
            .is_none()
        );
    }
}
