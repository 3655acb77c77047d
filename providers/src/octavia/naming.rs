//! Names, tags and descriptions of what capi-lb creates in Octavia and Neutron, and how ownership
//! is told from them: the UID tag (or, on clouds without tags, the UID in the description), never
//! the name.

use super::documents::LbRecord;
use crate::provider::{Listener, LoadBalancerIdentity, tags};

/// Octavia's longest name.
pub(super) const NAME_MAX: usize = 255;
/// A tag value that marks everything capi-lb creates.
const CAPI_LB_TAG: &str = "capi-lb";

fn cut(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

/// Name of the Octavia load balancer of a LoadBalancer.
pub fn lb_name(identity: &LoadBalancerIdentity) -> String {
    cut(
        &format!("capi-lb-{}-{}", identity.namespace, identity.name),
        200,
    )
}

/// Name of a port's listener, pool and health monitor.
pub(super) fn child_name(lb: &str, listener: &Listener) -> String {
    cut(
        &format!(
            "{lb}-{}-{}",
            listener.protocol.as_str().to_lowercase(),
            listener.port
        ),
        NAME_MAX,
    )
}

/// The ownership tag (the one adoption looks for).
pub(super) fn uid_tag(identity: &LoadBalancerIdentity) -> String {
    format!("{}={}", tags::UID, identity.uid)
}

/// Neutron's tags of an allocated floating IP: without `/` (Neutron addresses single tags in URL
/// paths), the UID one decides ownership.
pub(super) fn fip_tags(identity: &LoadBalancerIdentity) -> Vec<String> {
    let mut tags = vec![
        CAPI_LB_TAG.to_string(),
        fip_uid_tag(identity),
        fip_name_tag(identity),
    ];
    if let Some(cluster) = &identity.cluster_name {
        tags.push(cut(&format!("capi-lb-cluster={cluster}"), NAME_MAX));
    }
    tags
}

/// The floating IP's tag naming the LoadBalancer.
fn fip_name_tag(identity: &LoadBalancerIdentity) -> String {
    cut(
        &format!(
            "capi-lb-loadbalancer={}.{}",
            identity.namespace, identity.name
        ),
        NAME_MAX,
    )
}

/// The ownership tag of a floating IP (Neutron's tags cannot hold the `/` of [`uid_tag`]).
pub(super) fn fip_uid_tag(identity: &LoadBalancerIdentity) -> String {
    format!("capi-lb-uid={}", identity.uid)
}

fn infra_tag(uid: &str) -> String {
    format!("{}={uid}", tags::INFRASTRUCTURE_UID)
}

/// Every tag on every object: capi-lb's marker, the identity, and the spec's extra tags.
pub(super) fn object_tags(
    identity: &LoadBalancerIdentity,
    infra_uid: Option<&str>,
    extra: &[String],
) -> Vec<String> {
    let mut out = vec![CAPI_LB_TAG.to_string()];
    out.extend(
        identity
            .tags()
            .iter()
            .map(|(k, v)| cut(&format!("{k}={v}"), NAME_MAX)),
    );
    if let Some(uid) = infra_uid {
        out.push(infra_tag(uid));
    }
    for tag in extra {
        if !tag.contains(',') && !out.contains(tag) {
            out.push(tag.clone());
        }
    }
    out
}

/// The tags that identify the owning LoadBalancer: its namespace, name and UID.
fn identity_tags(identity: &LoadBalancerIdentity) -> impl Iterator<Item = String> {
    [
        (tags::NAMESPACE, &identity.namespace),
        (tags::NAME, &identity.name),
        (tags::UID, &identity.uid),
    ]
    .into_iter()
    .map(|(k, v)| cut(&format!("{k}={v}"), NAME_MAX))
}

/// True when a floating IP was allocated for this LoadBalancer: its UID tag and its
/// `capi-lb-loadbalancer` tag, or, on clouds without tags, capi-lb's description.
pub(super) fn fip_owned(
    tags: &[String],
    desc: Option<&str>,
    identity: &LoadBalancerIdentity,
) -> bool {
    let by_tag = tags.contains(&fip_uid_tag(identity)) && tags.contains(&fip_name_tag(identity));
    by_tag || (tags.is_empty() && desc == Some(description(identity).as_str()))
}

/// The description: carries the UID too, which is how ownership is told on clouds without tags.
pub(super) fn description(identity: &LoadBalancerIdentity) -> String {
    cut(
        &format!(
            "capi-lb LoadBalancer {} uid={}",
            identity.display(),
            identity.uid
        ),
        NAME_MAX,
    )
}

/// True when the load balancer belongs to this LoadBalancer (and this infrastructure object, when
/// it is tagged with one).
pub(super) fn owned(
    record: &LbRecord,
    identity: &LoadBalancerIdentity,
    infra_uid: Option<&str>,
) -> bool {
    // The UID alone is not enough: it is recorded in an annotation a user can copy (the
    // ownership that survives clusterctl move), so the namespace and name must match too.
    let by_tag = identity_tags(identity).all(|t| record.tags.contains(&t));
    let by_description = record.tags.is_empty()
        && record
            .description
            .as_deref()
            .is_some_and(|d| d == description(identity));
    let infra_ok = match infra_uid {
        Some(uid) => {
            let tagged: Vec<&String> = record
                .tags
                .iter()
                .filter(|t| t.starts_with(&format!("{}=", tags::INFRASTRUCTURE_UID)))
                .collect();
            tagged.is_empty() || tagged.iter().any(|t| **t == infra_tag(uid))
        }
        None => true,
    };
    (by_tag || by_description) && infra_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_lb_api::loadbalancer::Protocol;

    fn identity() -> LoadBalancerIdentity {
        LoadBalancerIdentity {
            namespace: "ns".into(),
            name: "cp".into(),
            uid: "u-1".into(),
            cluster_name: Some("c1".into()),
        }
    }

    fn record(tags: &[&str], description: Option<&str>) -> LbRecord {
        LbRecord {
            id: "x".into(),
            provisioning_status: "ACTIVE".into(),
            vip_address: None,
            vip_port_id: None,
            tags: tags.iter().map(|t| t.to_string()).collect(),
            description: description.map(str::to_string),
            created_at: None,
            pools: Vec::new(),
        }
    }

    #[test]
    fn ownership_is_decided_by_the_uid_tag_never_by_name() {
        let id = identity();
        let tags = object_tags(&id, Some("infra-1"), &["team=a".into(), "bad,tag".into()]);
        assert!(tags.contains(&"capi-lb".to_string()));
        assert!(tags.contains(&uid_tag(&id)));
        assert!(tags.contains(&"team=a".to_string()));
        assert!(!tags.iter().any(|t| t.contains(',')));
        let refs: Vec<&str> = tags.iter().map(String::as_str).collect();
        assert!(owned(&record(&refs, None), &id, Some("infra-1")));
        // Made for another OctaviaLoadBalancer of the same LoadBalancer (a migration).
        assert!(!owned(&record(&refs, None), &id, Some("infra-2")));
        // Same name, no tags, no UID: foreign.
        assert!(!owned(&record(&[], Some("hand-made")), &id, None));
        // Another LoadBalancer's UID.
        let other = format!("{}=u-2", tags::UID);
        assert!(!owned(&record(&["capi-lb", &other], None), &id, None));
        // Clouds without tags: the UID in capi-lb's description.
        assert!(owned(&record(&[], Some(&description(&id))), &id, None));
        // The UID of this LoadBalancer with another namespace or name (a copied ownership
        // annotation): foreign.
        let mut copy = id.clone();
        copy.namespace = "other".into();
        assert!(!owned(&record(&refs, None), &copy, Some("infra-1")));
        assert!(!owned(&record(&[], Some(&description(&id))), &copy, None));
        let mut renamed = id.clone();
        renamed.name = "cp2".into();
        assert!(!owned(&record(&refs, None), &renamed, Some("infra-1")));
    }

    #[test]
    fn a_floating_ip_is_ours_by_uid_and_name_tags() {
        let id = identity();
        let tags = fip_tags(&id);
        assert!(fip_owned(&tags, None, &id));
        let mut copy = id.clone();
        copy.name = "other".into();
        assert!(!fip_owned(&tags, None, &copy));
        assert!(!fip_owned(&[fip_uid_tag(&id)], None, &id));
        assert!(fip_owned(&[], Some(&description(&id)), &id));
        assert!(!fip_owned(&[], Some(&description(&id)), &copy));
    }

    #[test]
    fn names_fit_octavia() {
        let mut id = identity();
        id.name = "x".repeat(253);
        id.namespace = "n".repeat(63);
        let lb = lb_name(&id);
        assert!(lb.len() <= 200);
        let child = child_name(
            &lb,
            &Listener {
                name: "api".into(),
                port: 6443,
                target_port: 6443,
                protocol: Protocol::Tcp,
            },
        );
        assert!(child.len() <= NAME_MAX && child.ends_with("-tcp-6443"));
    }
}
