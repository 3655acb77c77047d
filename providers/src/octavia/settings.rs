//! What the provider derives from the `OctaviaLoadBalancer`: the spec as read ([`Infra`]: the
//! credentials, the algorithm, what the cloud's API version allows) and the settings of each port's
//! listener, pool and health monitor ([`Settings`]), hashed into the status to tell when they
//! changed.

use std::time::Duration;

use capi_lb_api::loadbalancer::Protocol;
use capi_lb_api::octavia::{
    Algorithm, AppliedSettings, HealthMonitor, MonitorType, OctaviaProvider as Driver,
};
use capi_lb_api::{OctaviaLoadBalancer, OctaviaLoadBalancerSpec, OctaviaLoadBalancerStatus};
use kube::core::DynamicObject;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::api::{ApiVersion, CredentialsRef};
use super::reason;
use super::stop::Stop;
use crate::error::{ProviderError, read_infrastructure};
use crate::provider::{Listener, LoadBalancerIdentity, Progress};
use crate::sources;

fn hash(value: &Value) -> String {
    Sha256::digest(value.to_string().as_bytes())
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The spec as the provider uses it.
pub(super) struct Infra {
    pub(super) uid: Option<String>,
    pub(super) namespace: String,
    pub(super) spec: OctaviaLoadBalancerSpec,
    pub(super) status: OctaviaLoadBalancerStatus,
}

impl Infra {
    pub(super) fn read(
        infra: &DynamicObject,
        identity: &LoadBalancerIdentity,
    ) -> Result<Self, ProviderError> {
        let parsed: OctaviaLoadBalancer = read_infrastructure(infra)?;
        Ok(Self {
            // The UID its cloud resources are tagged with, which survives clusterctl move.
            uid: crate::provider::ownership_uid(&infra.metadata).map(str::to_string),
            namespace: identity.namespace.clone(),
            spec: parsed.spec,
            // The status is ours: read as written (the spec parse above validates the spec only).
            status: infra
                .data
                .get("status")
                .cloned()
                .and_then(|s| serde_json::from_value(s).ok())
                .unwrap_or_default(),
        })
    }

    pub(super) fn credentials(&self) -> CredentialsRef {
        let c = &self.spec.credentials;
        CredentialsRef {
            namespace: self.namespace.clone(),
            secret: c.secret_name.clone(),
            key: c.key.clone(),
            cloud: c.cloud.clone(),
            region: c.region.clone(),
            ca_bundle_key: c.ca_bundle_key.clone(),
        }
    }

    pub(super) fn algorithm(&self) -> &'static str {
        let algorithm = if self.spec.provider == Some(Driver::Ovn) {
            Algorithm::SourceIpPort
        } else {
            self.spec.algorithm
        };
        match algorithm {
            Algorithm::RoundRobin => "ROUND_ROBIN",
            Algorithm::LeastConnections => "LEAST_CONNECTIONS",
            Algorithm::SourceIp => "SOURCE_IP",
            Algorithm::SourceIpPort => "SOURCE_IP_PORT",
        }
    }

    /// Restrict the listeners to the LoadBalancer's source ranges (`requested`, within the spec's
    /// own `listener.allowedCIDRs`), and what cannot be honoured: the `ovn` provider has no allowed
    /// CIDRs.
    pub(super) fn restrict_sources(
        &mut self,
        name: &str,
        requested: &[String],
    ) -> Result<Vec<String>, ProviderError> {
        if requested.is_empty() {
            return Ok(Vec::new());
        }
        if self.spec.provider == Some(Driver::Ovn) {
            return Ok(vec![format!(
                "source ranges ({}) are not enforced: Octavia's ovn provider has no allowed CIDRs, so every source can connect",
                requested.join(", ")
            )]);
        }
        let listener = self.spec.listener.get_or_insert_with(Default::default);
        listener.allowed_cidrs = sources::within(
            &listener.allowed_cidrs,
            requested,
            &format!("OctaviaLoadBalancer {name}'s listener.allowedCIDRs"),
        )?;
        Ok(Vec::new())
    }

    /// Refuse what the cloud's API version cannot do, naming the field and the versions.
    pub(super) fn check_version(&self, version: ApiVersion) -> Result<(), Stop> {
        let mut missing = Vec::new();
        let cidrs = self
            .spec
            .listener
            .as_ref()
            .is_some_and(|l| !l.allowed_cidrs.is_empty());
        if cidrs && version < ApiVersion::ALLOWED_CIDRS {
            missing.push(format!(
                "listener.allowedCIDRs needs {}",
                ApiVersion::ALLOWED_CIDRS
            ));
        }
        if self.spec.availability_zone.is_some() && version < ApiVersion::AVAILABILITY_ZONES {
            missing.push(format!(
                "availabilityZone needs {}",
                ApiVersion::AVAILABILITY_ZONES
            ));
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(Stop::Wait(Progress::pending_because(
                reason::API_VERSION_UNSUPPORTED,
                format!(
                    "this cloud's Octavia API is {version}: {}",
                    missing.join("; ")
                ),
                Duration::from_secs(300),
            )))
        }
    }
}

fn monitor_type(monitor: &HealthMonitor, protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Udp => "UDP-CONNECT",
        Protocol::Tcp => match monitor.type_ {
            MonitorType::Tcp => "TCP",
            MonitorType::Http => "HTTP",
            MonitorType::Https => "HTTPS",
            MonitorType::TlsHello => "TLS-HELLO",
        },
    }
}

/// The settings of one port's listener, pool and health monitor (what is hashed and written).
pub(super) struct Settings {
    pub(super) listener: Map<String, Value>,
    pub(super) pool: Map<String, Value>,
    pub(super) monitor: Map<String, Value>,
}

impl Settings {
    pub(super) fn new(infra: &Infra, listener: &Listener, version: ApiVersion) -> Self {
        let options = infra.spec.listener.clone().unwrap_or_default();
        let mut l = Map::new();
        if listener.protocol == Protocol::Tcp {
            l.insert(
                "timeout_client_data".into(),
                json!(options.timeout_client_data_ms.unwrap_or(50_000)),
            );
            l.insert(
                "timeout_member_data".into(),
                json!(options.timeout_member_data_ms.unwrap_or(50_000)),
            );
            l.insert(
                "timeout_member_connect".into(),
                json!(options.timeout_member_connect_ms.unwrap_or(5_000)),
            );
        }
        if version >= ApiVersion::ALLOWED_CIDRS {
            l.insert("allowed_cidrs".into(), json!(options.allowed_cidrs));
        }
        let mut p = Map::new();
        p.insert("lb_algorithm".into(), json!(infra.algorithm()));
        let hm = &infra.spec.health_monitor;
        let kind = monitor_type(hm, listener.protocol);
        let mut m = Map::new();
        m.insert("type".into(), json!(kind));
        m.insert("delay".into(), json!(hm.delay_seconds));
        m.insert(
            "timeout".into(),
            json!(hm.timeout_seconds.min(hm.delay_seconds)),
        );
        m.insert("max_retries".into(), json!(hm.max_retries));
        m.insert("max_retries_down".into(), json!(hm.max_retries_down));
        if kind == "HTTP" || kind == "HTTPS" {
            m.insert(
                "url_path".into(),
                json!(hm.url_path.clone().unwrap_or_else(|| "/".into())),
            );
            m.insert(
                "expected_codes".into(),
                json!(hm.expected_codes.clone().unwrap_or_else(|| "200".into())),
            );
        }
        Self {
            listener: l,
            pool: p,
            monitor: m,
        }
    }

    pub(super) fn applied(&self) -> AppliedSettings {
        AppliedSettings {
            listener: Some(hash(&Value::Object(self.listener.clone()))),
            pool: Some(hash(&Value::Object(self.pool.clone()))),
            monitor: Some(hash(&Value::Object(self.monitor.clone()))),
        }
    }
}

/// `base` with the fields of `extra` (an object) added.
pub(super) fn with(mut base: Map<String, Value>, extra: Value) -> Value {
    if let Value::Object(extra) = extra {
        base.extend(extra);
    }
    Value::Object(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_are_gated_by_the_api_version() {
        let spec: OctaviaLoadBalancerSpec = serde_json::from_value(json!({
            "credentials": {"secretName": "s"},
            "vip": {"subnetID": "x"},
            "availabilityZone": "az1",
            "listener": {"allowedCIDRs": ["10.0.0.0/8"]},
        }))
        .unwrap();
        let infra = Infra {
            uid: None,
            namespace: "ns".into(),
            spec,
            status: OctaviaLoadBalancerStatus::default(),
        };
        assert!(infra.check_version(ApiVersion(2, 14)).is_ok());
        let Err(Stop::Wait(Progress::Pending {
            message, reason, ..
        })) = infra.check_version(ApiVersion(2, 11))
        else {
            panic!("2.11 must be refused")
        };
        assert_eq!(reason, Some(reason::API_VERSION_UNSUPPORTED));
        assert!(
            message.contains("allowedCIDRs needs 2.12")
                && message.contains("availabilityZone needs 2.14"),
            "{message}"
        );
        let Err(Stop::Wait(Progress::Pending { message, .. })) =
            infra.check_version(ApiVersion(2, 13))
        else {
            panic!("2.13 must be refused")
        };
        assert!(!message.contains("allowedCIDRs") && message.contains("availabilityZone"));
        // Without tags (< 2.5) nothing is tagged and the description carries the UID instead;
        // allowed_cidrs are only sent where the API knows them.
        let listener = Listener {
            name: "api".into(),
            port: 6443,
            target_port: 6443,
            protocol: Protocol::Tcp,
        };
        assert!(
            !Settings::new(&infra, &listener, ApiVersion(2, 11))
                .listener
                .contains_key("allowed_cidrs")
        );
        assert!(
            Settings::new(&infra, &listener, ApiVersion(2, 12))
                .listener
                .contains_key("allowed_cidrs")
        );
    }

    #[test]
    fn ovn_forces_source_ip_port() {
        let spec: OctaviaLoadBalancerSpec = serde_json::from_value(json!({
            "credentials": {"secretName": "s"},
            "vip": {"subnetID": "x"},
            "provider": "ovn",
            "algorithm": "ROUND_ROBIN",
        }))
        .unwrap();
        let infra = Infra {
            uid: None,
            namespace: "ns".into(),
            spec,
            status: OctaviaLoadBalancerStatus::default(),
        };
        assert_eq!(infra.algorithm(), "SOURCE_IP_PORT");
    }
}
