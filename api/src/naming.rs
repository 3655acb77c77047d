//! Derived names and values of a LoadBalancer: its effective target selector (with the proposal's
//! default), the published Service name, the stable endpoint and the owner identity. Pure functions of
//! the object, so the reconciler, `simulate` and the tests compute them the same way.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::ResourceExt;
use kube::core::Selector;

use crate::constants::{DNS_LABEL_MAX, LABEL_CLUSTER_NAME, LABEL_CONTROL_PLANE, LABEL_LB_NAME};
use crate::loadbalancer::{ApiEndpoint, LoadBalancer, LoadBalancerAddress};
use crate::validation::FieldError;

impl LoadBalancer {
    /// The selector the LoadBalancer uses: `spec.selector`, or when it is empty the proposal's default
    /// (`cluster.x-k8s.io/cluster-name=<clusterName>` if set, and `loadbalancer.cluster.x-k8s.io/name=<name>`).
    /// A LoadBalancer of a Cluster (`spec.clusterName`) only ever selects that Cluster's objects: its
    /// `spec.selector` gets `cluster.x-k8s.io/cluster-name=<clusterName>` added, and one that asks for
    /// another Cluster's is refused. Label keys, values and operators are checked; the error names
    /// the field.
    pub fn effective_selector(&self) -> Result<Selector, FieldError> {
        let user = self
            .spec
            .selector
            .as_ref()
            .filter(|s| {
                s.match_labels.as_ref().is_some_and(|m| !m.is_empty())
                    || s.match_expressions.as_ref().is_some_and(|e| !e.is_empty())
            })
            .cloned();
        let selector = match user {
            Some(mut s) => {
                check_selector(&s)?;
                if let Some(cluster) = &self.spec.cluster_name {
                    let labels = s.match_labels.get_or_insert_with(BTreeMap::new);
                    match labels.get(LABEL_CLUSTER_NAME) {
                        Some(other) if other != cluster => {
                            return Err(FieldError::new(
                                format!("spec.selector.matchLabels[{LABEL_CLUSTER_NAME}]"),
                                format!(
                                    "selects Machines of Cluster {other}, but spec.clusterName is {cluster}: a LoadBalancer of a Cluster only selects that Cluster's"
                                ),
                            ));
                        }
                        _ => {
                            labels.insert(LABEL_CLUSTER_NAME.to_string(), cluster.clone());
                        }
                    }
                }
                s
            }
            None => {
                let mut labels = BTreeMap::new();
                if let Some(cluster) = &self.spec.cluster_name {
                    labels.insert(LABEL_CLUSTER_NAME.to_string(), cluster.clone());
                }
                // A control-plane load balancer selects the Cluster's control-plane Machines.
                let control_plane =
                    self.spec.control_plane.is_some() && self.spec.cluster_name.is_some();
                let match_expressions = control_plane.then(|| {
                    vec![LabelSelectorRequirement {
                        key: LABEL_CONTROL_PLANE.to_string(),
                        operator: "Exists".to_string(),
                        values: None,
                    }]
                });
                if !control_plane {
                    labels.insert(LABEL_LB_NAME.to_string(), self.name_any());
                }
                let selector = LabelSelector {
                    match_labels: Some(labels),
                    match_expressions,
                };
                check_selector(&selector).map_err(|e| {
                    FieldError::new(
                        "spec.selector",
                        format!(
                            "the default selector cannot be used ({}); set spec.selector",
                            e.message
                        ),
                    )
                })?;
                selector
            }
        };
        Selector::try_from(selector)
            .map_err(|e| FieldError::new("spec.selector", format!("invalid selector: {e}")))
    }

    /// Name of the published Service (`<name><suffix>`) when publication is enabled.
    pub fn published_service_name(&self) -> Option<String> {
        self.spec
            .publication
            .enabled
            .then(|| format!("{}{}", self.name_any(), self.spec.publication.suffix))
    }

    /// The stable endpoint: `spec.endpoint` when set; otherwise the published Service's DNS name and
    /// the first port; otherwise (publication disabled) the provider's first address.
    pub fn stable_endpoint(
        &self,
        cluster_domain: &str,
        addresses: &[LoadBalancerAddress],
    ) -> Option<ApiEndpoint> {
        if let Some(endpoint) = &self.spec.endpoint {
            return Some(endpoint.clone());
        }
        let port = self.spec.ports.first()?.port;
        let host = match self.published_service_name() {
            Some(service) => format!(
                "{service}.{}.svc.{cluster_domain}",
                self.namespace().unwrap_or_default()
            ),
            None => addresses.first()?.address.clone(),
        };
        Some(ApiEndpoint { host, port })
    }
}

fn check_selector(selector: &LabelSelector) -> Result<(), FieldError> {
    for (key, value) in selector.match_labels.iter().flatten() {
        let field = format!("spec.selector.matchLabels[{key}]");
        check_label_key(key).map_err(|m| FieldError::new(&field, m))?;
        check_label_value(value).map_err(|m| FieldError::new(&field, m))?;
    }
    for (
        i,
        LabelSelectorRequirement {
            key,
            operator,
            values,
        },
    ) in selector.match_expressions.iter().flatten().enumerate()
    {
        let field = format!("spec.selector.matchExpressions[{i}]");
        check_label_key(key).map_err(|m| FieldError::new(format!("{field}.key"), m))?;
        let values = values.as_deref().unwrap_or_default();
        match operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(FieldError::new(
                    format!("{field}.values"),
                    format!("operator {operator} needs at least one value"),
                ));
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(FieldError::new(
                    format!("{field}.values"),
                    format!("operator {operator} takes no values"),
                ));
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => {
                return Err(FieldError::new(
                    format!("{field}.operator"),
                    format!("unknown operator {other:?}: use In, NotIn, Exists or DoesNotExist"),
                ));
            }
        }
        for v in values {
            check_label_value(v).map_err(|m| FieldError::new(format!("{field}.values"), m))?;
        }
    }
    Ok(())
}

/// A label name or value body: alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
fn is_label_token(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// True when `s` is an RFC 1123 DNS subdomain.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && !s.is_empty()
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b.first().is_some_and(|c| *c != b'-')
                && b.last().is_some_and(|c| *c != b'-')
        })
}

/// True when `s` is an RFC 1035 DNS label (what a Service name must be).
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= DNS_LABEL_MAX
        && b.first().is_some_and(u8::is_ascii_lowercase)
        && b.last()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// Check a label key (`[prefix/]name`).
pub fn check_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return Err(format!("label key {key:?}: prefix must be a DNS subdomain"));
    }
    if name.len() > DNS_LABEL_MAX || !is_label_token(name) {
        return Err(format!(
            "label key {key:?}: name must be 1-63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
        ));
    }
    Ok(())
}

/// Check a label value.
pub fn check_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || (value.len() <= DNS_LABEL_MAX && is_label_token(value)) {
        Ok(())
    } else {
        Err(format!(
            "label value {value:?} must be at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
        ))
    }
}

impl LoadBalancer {
    /// Whether this LoadBalancer keeps its workload cluster's `default/kubernetes` endpoints
    /// (`spec.workloadEndpoints.enabled`).
    pub fn wants_workload_endpoints(&self) -> bool {
        self.spec
            .workload_endpoints
            .as_ref()
            .is_some_and(|w| w.enabled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels() {
        assert!(is_dns_label("cp-ext"));
        assert!(!is_dns_label("1cp"));
        assert!(!is_dns_label("cp.ext"));
        assert!(!is_dns_label("cp-"));
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(is_dns_label(&"a".repeat(63)));
    }

    #[test]
    fn default_selector_and_its_limits() {
        use crate::loadbalancer::{InfrastructureRef, LoadBalancerSpec};
        let spec = || {
            LoadBalancerSpec::with_infrastructure(InfrastructureRef {
                api_group: "infrastructure.cluster.x-k8s.io".into(),
                kind: "InMemoryLoadBalancer".into(),
                name: "x".into(),
            })
        };
        let mut lb = LoadBalancer::new("cp", spec());
        lb.spec.cluster_name = Some("demo".into());
        assert_eq!(
            lb.effective_selector().unwrap().to_string(),
            "cluster.x-k8s.io/cluster-name=demo,loadbalancer.cluster.x-k8s.io/name=cp"
        );
        // A name longer than a label value cannot be the default selector's value.
        let long = LoadBalancer::new(&"a".repeat(70), spec());
        let err = long.effective_selector().unwrap_err();
        assert_eq!(err.field, "spec.selector");
        assert!(err.message.contains("set spec.selector"), "{}", err.message);
        // An explicit selector with a bad operator is refused with the field named.
        let mut bad = LoadBalancer::new("cp", spec());
        bad.spec.selector = Some(LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "role".into(),
                operator: "Equals".into(),
                values: Some(vec!["cp".into()]),
            }]),
        });
        let err = bad.effective_selector().unwrap_err();
        assert_eq!(err.field, "spec.selector.matchExpressions[0].operator");
    }

    #[test]
    fn a_cluster_load_balancer_selects_only_its_cluster() {
        use crate::loadbalancer::{InfrastructureRef, LoadBalancerSpec};
        let mut lb = LoadBalancer::new(
            "cp",
            LoadBalancerSpec::with_infrastructure(InfrastructureRef {
                api_group: "infrastructure.cluster.x-k8s.io".into(),
                kind: "InMemoryLoadBalancer".into(),
                name: "x".into(),
            }),
        );
        lb.spec.selector = Some(LabelSelector {
            match_labels: Some([("role".to_string(), "cp".to_string())].into()),
            match_expressions: None,
        });
        // Without a Cluster: the selector as written.
        assert_eq!(lb.effective_selector().unwrap().to_string(), "role=cp");
        // With one: only its objects.
        lb.spec.cluster_name = Some("demo".into());
        assert_eq!(
            lb.effective_selector().unwrap().to_string(),
            "cluster.x-k8s.io/cluster-name=demo,role=cp"
        );
        // Another Cluster's: refused, with the field named.
        lb.spec.selector = Some(LabelSelector {
            match_labels: Some([(LABEL_CLUSTER_NAME.to_string(), "other".to_string())].into()),
            match_expressions: None,
        });
        let err = lb.effective_selector().unwrap_err();
        assert_eq!(
            err.field,
            "spec.selector.matchLabels[cluster.x-k8s.io/cluster-name]"
        );
        assert!(err.message.contains("Cluster other"), "{}", err.message);
    }

    #[test]
    fn label_keys_and_values() {
        assert!(check_label_key("cluster.x-k8s.io/cluster-name").is_ok());
        assert!(check_label_key("app").is_ok());
        assert!(check_label_key("Bad_/x").is_err());
        assert!(check_label_key("-x").is_err());
        assert!(check_label_value("").is_ok());
        assert!(check_label_value("a.b-c_d").is_ok());
        assert!(check_label_value("a/b").is_err());
        assert!(check_label_value(&"a".repeat(64)).is_err());
    }
}
