//! What capi-lb writes on a target: the proposal's state values, the per-LoadBalancer key under
//! which one LoadBalancer's state, timestamp and Cluster API deletion hooks are stored, and the
//! annotation keys built from it.
//!
//! Several LoadBalancers may select one target (an apiserver load balancer and an internal one over
//! the same control-plane Machines). Each keeps its own annotations under its own key, so they never
//! write the same annotation; only the proposal's unkeyed `name`/`status` pair is shared, and it is
//! held by one LoadBalancer at a time (see `docs/targets.md`).

use sha2::{Digest, Sha256};

use crate::constants::{
    DNS_LABEL_MAX, PRE_DRAIN_HOOK_PREFIX, PRE_TERMINATE_HOOK_PREFIX, TARGET_KEY_PREFIX,
    TARGET_SINCE_PREFIX, TARGET_STATE_PREFIX,
};

/// The state of one target in one LoadBalancer (the proposal's values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TargetState {
    /// Selected and on its way in: waiting for an address or readiness gates, or asked of the
    /// provider and not serving yet.
    Adding,
    /// A member serving new connections.
    Active,
    /// Disabled by the user: draining (no new connections) until `spec.drainSeconds` passed.
    Disabling,
    /// Disabled by the user and out of the load balancer until the annotation goes away.
    Disabled,
    /// Being deleted or no longer selected: draining, then removed.
    Removing,
    /// Out of the load balancer; a deleting target may now go.
    Removed,
    /// Failed its health probes (`spec.targetHealth`): draining until `spec.drainSeconds` passed.
    Failing,
    /// Failed its health probes and out of the load balancer until it passes them again.
    Unhealthy,
}

impl TargetState {
    /// Every state, in lifecycle order.
    pub const ALL: [TargetState; 8] = [
        TargetState::Adding,
        TargetState::Active,
        TargetState::Disabling,
        TargetState::Disabled,
        TargetState::Removing,
        TargetState::Removed,
        TargetState::Failing,
        TargetState::Unhealthy,
    ];

    /// The annotation value.
    pub fn as_str(self) -> &'static str {
        match self {
            TargetState::Adding => "adding",
            TargetState::Active => "active",
            TargetState::Disabling => "disabling",
            TargetState::Disabled => "disabled",
            TargetState::Removing => "removing",
            TargetState::Removed => "removed",
            TargetState::Failing => "failing",
            TargetState::Unhealthy => "unhealthy",
        }
    }

    /// Parse an annotation value; anything else is `None` (treated as "no state recorded").
    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == value)
    }

    /// True while a member is (or may be) in the provider: every state but `disabled`, `removed`
    /// and `unhealthy`.
    pub fn may_be_member(self) -> bool {
        !matches!(
            self,
            TargetState::Disabled | TargetState::Removed | TargetState::Unhealthy
        )
    }

    /// True for the draining states.
    pub fn is_draining(self) -> bool {
        matches!(
            self,
            TargetState::Disabling | TargetState::Removing | TargetState::Failing
        )
    }
}

impl std::fmt::Display for TargetState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Length of the hash part of a target key (hex digits).
const HASH_LEN: usize = 8;

/// The key of LoadBalancer `namespace/name` on its targets: `capi-lb-<name>-<hash>`, where `<name>`
/// is the LoadBalancer name cut to fit and `<hash>` the first 8 hex digits of SHA-256 of
/// `namespace/name`. It is the name part of an annotation key (at most 63 characters, alphanumeric
/// at both ends), unique per LoadBalancer, and computable by any LoadBalancer from another's name.
pub fn target_key(namespace: &str, name: &str) -> String {
    let digest = Sha256::digest(format!("{namespace}/{name}").as_bytes());
    let hash: String = digest
        .iter()
        .take(HASH_LEN / 2)
        .map(|b| format!("{b:02x}"))
        .collect();
    let room = DNS_LABEL_MAX - TARGET_KEY_PREFIX.len() - 1 - HASH_LEN;
    let readable: String = name.chars().take(room).collect();
    let readable = readable.trim_end_matches(['-', '.']);
    if readable.is_empty() {
        format!("{TARGET_KEY_PREFIX}{hash}")
    } else {
        format!("{TARGET_KEY_PREFIX}{readable}-{hash}")
    }
}

/// Annotation keys of one LoadBalancer on its targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetKeys {
    /// The key itself ([`target_key`]), also the deletion hook name.
    pub key: String,
    /// `state.loadbalancer.cluster.x-k8s.io/<key>`.
    pub state: String,
    /// `since.loadbalancer.cluster.x-k8s.io/<key>`.
    pub since: String,
    /// `pre-drain.delete.hook.machine.cluster.x-k8s.io/<key>`.
    pub pre_drain: String,
    /// `pre-terminate.delete.hook.machine.cluster.x-k8s.io/<key>`.
    pub pre_terminate: String,
}

impl TargetKeys {
    /// The keys of LoadBalancer `namespace/name`.
    pub fn new(namespace: &str, name: &str) -> Self {
        let key = target_key(namespace, name);
        Self {
            state: format!("{TARGET_STATE_PREFIX}{key}"),
            since: format!("{TARGET_SINCE_PREFIX}{key}"),
            pre_drain: format!("{PRE_DRAIN_HOOK_PREFIX}{key}"),
            pre_terminate: format!("{PRE_TERMINATE_HOOK_PREFIX}{key}"),
            key,
        }
    }

    /// The four keys, for "is any of ours on this object".
    pub fn all(&self) -> [&str; 4] {
        [
            &self.state,
            &self.since,
            &self.pre_drain,
            &self.pre_terminate,
        ]
    }
}

/// The value of a deletion hook annotation: its owner (Cluster API shows it in the Machine's
/// deletion condition).
pub fn hook_owner(lb_name: &str) -> String {
    format!("capi-lb/{lb_name}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn is_annotation_name(s: &str) -> bool {
        let bytes = s.as_bytes();
        !s.is_empty()
            && s.len() <= DNS_LABEL_MAX
            && bytes[0].is_ascii_alphanumeric()
            && bytes[bytes.len() - 1].is_ascii_alphanumeric()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    }

    #[test]
    fn states_round_trip() {
        for state in TargetState::ALL {
            assert_eq!(TargetState::parse(state.as_str()), Some(state));
        }
        assert_eq!(TargetState::parse("Active"), None);
        assert_eq!(TargetState::parse(""), None);
    }

    #[test]
    fn short_names_stay_readable() {
        let key = target_key("default", "cp");
        assert!(key.starts_with("capi-lb-cp-"), "{key}");
        assert_eq!(key.len(), "capi-lb-cp-".len() + HASH_LEN);
        assert!(is_annotation_name(&key));
    }

    #[test]
    fn long_names_are_cut_and_stay_distinct() {
        let a = "a".repeat(200) + "-one";
        let b = "a".repeat(200) + "-two";
        let (ka, kb) = (target_key("ns", &a), target_key("ns", &b));
        assert_eq!(ka.len(), DNS_LABEL_MAX);
        assert_ne!(ka, kb);
        // A cut that ends on a separator drops it.
        let dotted = format!("{}.{}", "b".repeat(45), "c".repeat(20));
        assert!(is_annotation_name(&target_key("ns", &dotted)));
        // Same name, other namespace: another key.
        assert_ne!(target_key("ns1", "lb"), target_key("ns2", "lb"));
    }

    proptest! {
        #[test]
        fn every_lb_name_gives_a_valid_annotation_name(
            name in "[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?",
            namespace in "[a-z0-9]{1,63}",
        ) {
            let keys = TargetKeys::new(&namespace, &name);
            prop_assert!(is_annotation_name(&keys.key), "{}", keys.key);
            for k in keys.all() {
                let (prefix, rest) = k.split_once('/').unwrap();
                prop_assert!(prefix.len() <= 253);
                prop_assert_eq!(rest, keys.key.as_str());
            }
        }
    }
}
