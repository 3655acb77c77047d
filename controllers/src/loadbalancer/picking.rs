//! What a target offers: its address, picked from `status.addresses` in the order of
//! `spec.targetAddressTypes` (the Cluster API Machine convention, which other kinds follow too), and
//! the readiness gates it has not passed. Pure functions of the object.

use std::net::IpAddr;

use capi_lb_api::constants::{ANNOTATION_UPDATE_IN_PROGRESS, CONDITION_UPDATING};
use capi_lb_api::loadbalancer::{MachineAddressType, ReadinessGate};
use serde_json::Value;

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

/// Where an object of the target kind lists its conditions: `status.conditions`, and
/// `status.v1beta2.conditions` where Cluster API v1beta1 objects keep the new ones.
pub const CONDITION_LISTS: [&str; 2] = ["/status/conditions", "/status/v1beta2/conditions"];

/// The readiness gates `object` does not report as `True`, looking at `status.conditions` (and
/// `status.v1beta2.conditions`, where Cluster API v1beta1 objects keep the new conditions).
pub fn pending_gates(object: &Value, gates: &[ReadinessGate]) -> Vec<String> {
    let is_true = |gate: &str| {
        CONDITION_LISTS
            .iter()
            .filter_map(|p| object.pointer(p)?.as_array())
            .flatten()
            .any(|c| {
                c.get("type").and_then(Value::as_str) == Some(gate)
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
    };
    gates
        .iter()
        .map(|g| g.condition_type.as_str())
        .filter(|g| !is_true(g))
        .map(str::to_string)
        .collect()
}

/// True while `object` (a Cluster API Machine) is being updated in place: Cluster API's
/// update-in-progress annotation is on it, or its `Updating` condition is `True`.
pub fn updating_in_place(object: &Value) -> bool {
    let annotated = object
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key(ANNOTATION_UPDATE_IN_PROGRESS));
    annotated
        || CONDITION_LISTS
            .iter()
            .filter_map(|p| object.pointer(p)?.as_array())
            .flatten()
            .any(|c| {
                c.get("type").and_then(Value::as_str) == Some(CONDITION_UPDATING)
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
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
    fn readiness_gates_read_both_condition_lists() {
        let gates = [
            ReadinessGate {
                condition_type: "APIServerPodHealthy".into(),
            },
            ReadinessGate {
                condition_type: "EtcdMemberHealthy".into(),
            },
        ];
        let m = json!({"status": {
            "conditions": [{"type": "APIServerPodHealthy", "status": "True"}],
            "v1beta2": {"conditions": [{"type": "EtcdMemberHealthy", "status": "False"}]},
        }});
        assert_eq!(pending_gates(&m, &gates), vec!["EtcdMemberHealthy"]);
        let m = json!({"status": {"v1beta2": {"conditions": [
            {"type": "EtcdMemberHealthy", "status": "True"},
            {"type": "APIServerPodHealthy", "status": "True"},
        ]}}});
        assert!(pending_gates(&m, &gates).is_empty());
        assert_eq!(pending_gates(&json!({}), &gates).len(), 2);
        assert!(pending_gates(&json!({}), &[]).is_empty());
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

    #[test]
    fn an_in_place_update_is_seen_by_its_annotation_or_its_condition() {
        assert!(!updating_in_place(
            &json!({"metadata": {"annotations": {}}})
        ));
        assert!(updating_in_place(&json!({"metadata": {"annotations": {
            ANNOTATION_UPDATE_IN_PROGRESS: ""}}})));
        assert!(updating_in_place(&json!({"status": {"conditions": [
            {"type": "Updating", "status": "True"}]}})));
        assert!(updating_in_place(
            &json!({"status": {"v1beta2": {"conditions": [
            {"type": "Updating", "status": "True"}]}}})
        ));
        assert!(!updating_in_place(&json!({"status": {"conditions": [
            {"type": "Updating", "status": "False"}]}})));
    }
}
