//! Targets of a LoadBalancer: the objects of `spec.targetKind` its selector matches, and the address
//! of each, picked from `status.addresses` in the order of `spec.targetAddressTypes` (the Cluster API
//! Machine convention, which other kinds follow too). Picking is pure; listing is one API call.

use std::net::IpAddr;

use capi_lb_api::loadbalancer::MachineAddressType;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::core::{ApiResource, DynamicObject, Selector};
use serde_json::Value;

/// A selected target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Object name.
    pub name: String,
    /// True when the object is being deleted.
    pub deleting: bool,
    /// The address to use, when the object reports one of the wanted types.
    pub address: Option<String>,
}

/// True for address types that must hold an IP.
fn is_ip_type(t: MachineAddressType) -> bool {
    matches!(
        t,
        MachineAddressType::ExternalIp | MachineAddressType::InternalIp
    )
}

/// The preferred address of `object` (a Machine-like object with `status.addresses`).
pub fn pick_address(object: &Value, preference: &[MachineAddressType]) -> Option<String> {
    let addresses = object.pointer("/status/addresses")?.as_array()?;
    preference.iter().find_map(|wanted| {
        addresses.iter().find_map(|a| {
            let type_ = a.get("type")?.as_str()?;
            let address = a.get("address")?.as_str()?.trim();
            if type_ != wanted.as_str() || address.is_empty() {
                return None;
            }
            if is_ip_type(*wanted) && address.parse::<IpAddr>().is_err() {
                return None;
            }
            Some(address.to_string())
        })
    })
}

/// Turn listed objects into targets, sorted by name.
pub fn to_targets(objects: &[DynamicObject], preference: &[MachineAddressType]) -> Vec<Target> {
    let mut targets: Vec<Target> = objects
        .iter()
        .map(|o| Target {
            name: o.name_any(),
            deleting: o.metadata.deletion_timestamp.is_some(),
            address: serde_json::to_value(o)
                .ok()
                .and_then(|v| pick_address(&v, preference)),
        })
        .collect();
    targets.sort_by(|a, b| a.name.cmp(&b.name));
    targets
}

/// List the objects of `resource` in `namespace` matching `selector`.
pub async fn list(
    client: &kube::Client,
    resource: &ApiResource,
    namespace: &str,
    selector: &Selector,
) -> Result<Vec<DynamicObject>, kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
    let params = ListParams::default().labels_from(selector);
    Ok(api.list(&params).await?.items)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn machine(addresses: Value) -> Value {
        json!({"status": {"addresses": addresses}})
    }

    #[test]
    fn picks_by_preference_order() {
        let m = machine(json!([
            {"type": "ExternalIP", "address": "198.51.100.7"},
            {"type": "InternalIP", "address": "10.0.0.7"},
        ]));
        let internal_first = [
            MachineAddressType::InternalIp,
            MachineAddressType::ExternalIp,
        ];
        let external_first = [
            MachineAddressType::ExternalIp,
            MachineAddressType::InternalIp,
        ];
        assert_eq!(
            pick_address(&m, &internal_first).as_deref(),
            Some("10.0.0.7")
        );
        assert_eq!(
            pick_address(&m, &external_first).as_deref(),
            Some("198.51.100.7")
        );
    }

    #[test]
    fn skips_malformed_and_missing_addresses() {
        let m = machine(json!([
            {"type": "InternalIP", "address": "not-an-ip"},
            {"type": "InternalIP", "address": ""},
            {"type": "Hostname", "address": "node-1"},
        ]));
        assert_eq!(
            pick_address(
                &m,
                &[
                    MachineAddressType::InternalIp,
                    MachineAddressType::ExternalIp
                ]
            ),
            None
        );
        assert_eq!(
            pick_address(
                &m,
                &[MachineAddressType::InternalIp, MachineAddressType::Hostname]
            )
            .as_deref(),
            Some("node-1")
        );
        assert_eq!(
            pick_address(&json!({}), &[MachineAddressType::InternalIp]),
            None
        );
    }
}
