//! kube-dc's admission webhook, as far as capi-lb meets it: kube-dc refuses changing a Service's
//! `network.kube-dc.com/external-network-type` annotation once an address is allocated to it (FACTS
//! section 2). kube-dc's webhook is not public; the simulator has it two ways:
//!
//! - against a real apiserver, [`install`] makes the apiserver itself refuse such an update: a
//!   `ValidatingAdmissionPolicy` (CEL, no webhook server) bound to the namespaces of kube-dc
//!   Projects, for updates of a Service (not of its status, which is kube-dc's own write) whose
//!   stored object has an ingress address;
//! - on the in-memory API, which has no admission, the simulator ([`crate::kubedc_sim::KubeDcSim`])
//!   remembers the annotation of each Service it gave an address and records a later change as a
//!   refusal ([`crate::kubedc_sim::KubeDcSim::refused`]), which the tests require to stay empty.
// Test support: panicking on a broken fixture is the right failure mode here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kube::api::{Api, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

use crate::kubedc_sim::PROJECT_LABEL;

/// The Service annotation that picks the network of the EIp kube-dc creates for a Service.
pub const NETWORK_ANNOTATION: &str = "network.kube-dc.com/external-network-type";

/// The name of the policy and its binding (cluster-scoped, shared by every test of the cluster).
pub const POLICY: &str = "kube-dc-sim-external-network-type";

/// What the refusal says (kube-dc's own wording is not public).
pub const REFUSAL: &str =
    "network.kube-dc.com/external-network-type cannot be changed once an address is allocated";

/// The annotation's value on a Service (as JSON), or `None`.
pub fn network_of(service: &k8s_openapi::api::core::v1::Service) -> Option<String> {
    service
        .metadata
        .annotations
        .as_ref()?
        .get(NETWORK_ANNOTATION)
        .cloned()
}

async fn apply(client: &kube::Client, kind: &str, object: Value) {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "admissionregistration.k8s.io",
        "v1",
        kind,
    ));
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let object: DynamicObject = serde_json::from_value(object).unwrap();
    api.patch(
        &object.metadata.name.clone().unwrap(),
        &PatchParams::apply("kube-dc-sim").force(),
        &Patch::Apply(&object),
    )
    .await
    .unwrap();
}

/// Have the apiserver of `client` (the admin's) refuse what kube-dc's webhook refuses, in every
/// kube-dc Project's namespace. Idempotent; left in place (other tests of the cluster share it).
pub async fn install(client: &kube::Client) {
    let value = |o: &str| {
        format!(
            "(has({o}.metadata.annotations) && '{NETWORK_ANNOTATION}' in {o}.metadata.annotations ? {o}.metadata.annotations['{NETWORK_ANNOTATION}'] : '')"
        )
    };
    let allocated =
        "size(oldObject.?status.?loadBalancer.?ingress.orValue([]).filter(i, has(i.ip))) > 0";
    apply(
        client,
        "ValidatingAdmissionPolicy",
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": POLICY},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["UPDATE"], "resources": ["services"],
                }]},
                "validations": [{
                    "expression": format!("!({allocated}) || {} == {}", value("oldObject"), value("object")),
                    "message": REFUSAL,
                    "reason": "Forbidden",
                }],
            },
        }),
    )
    .await;
    apply(
        client,
        "ValidatingAdmissionPolicyBinding",
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": POLICY},
            "spec": {
                "policyName": POLICY,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchExpressions": [
                    {"key": PROJECT_LABEL, "operator": "Exists"},
                ]}},
            },
        }),
    )
    .await;
}
