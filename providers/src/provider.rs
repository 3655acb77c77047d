//! The provider trait every infrastructure provider implements, and the data that crosses it.
//!
//! Cloud load balancers are slow and asynchronous: an Octavia load balancer can be PENDING for minutes
//! and writes are refused with "busy, retry" meanwhile; a kube-dc EIp is allocated by another
//! controller. So no call blocks waiting: each one does the next step it can, and answers with
//! [`Progress`] — done, or "pending, ask again in N seconds". The reconciler requeues instead of
//! waiting.
//!
//! State that must survive a controller restart lives in two places a provider controls: ownership
//! tags on the cloud resources (derived from [`LoadBalancerIdentity`], so a restarted controller finds
//! and adopts its resources instead of creating duplicates), and the `status` fragment a provider
//! returns, which the reconciler writes to the infrastructure object's status.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
pub use capi_lb_api::conditions::{Reason, Severity};
use capi_lb_api::constants::ANNOTATION_OWNERSHIP;
use capi_lb_api::loadbalancer::{LoadBalancerAddress, Protocol};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::DynamicObject;
use serde_json::{Map, Value};

use crate::error::ProviderError;

/// Tag keys every provider puts on the cloud resources it creates.
pub mod tags {
    /// Namespace of the owning LoadBalancer.
    pub const NAMESPACE: &str = "capi-lb.loadbalancer.cluster.x-k8s.io/namespace";
    /// Name of the owning LoadBalancer.
    pub const NAME: &str = "capi-lb.loadbalancer.cluster.x-k8s.io/name";
    /// UID of the owning LoadBalancer: the ownership proof.
    pub const UID: &str = "capi-lb.loadbalancer.cluster.x-k8s.io/uid";
    /// Cluster name, when the LoadBalancer has one.
    pub const CLUSTER: &str = "capi-lb.loadbalancer.cluster.x-k8s.io/cluster";
    /// UID of the infrastructure object the resource was made for: during a migration between
    /// two infrastructure objects of the same provider, the LoadBalancer owns two sets.
    pub const INFRASTRUCTURE_UID: &str = "capi-lb.loadbalancer.cluster.x-k8s.io/infrastructure-uid";
}

/// The UID under which the cloud resources of `meta`'s object are tagged: the one recorded in its
/// ownership annotation (`<name>/<uid>`, written when capi-lb first claims the object, and kept by
/// `clusterctl move` and backup restores, which give the object a new UID), else its own UID. An
/// annotation naming another object (a copy made under another name) is ignored.
pub fn ownership_uid(meta: &ObjectMeta) -> Option<&str> {
    recorded_ownership(meta).or(meta.uid.as_deref())
}

/// The UID recorded in `meta`'s ownership annotation, when it names this object.
fn recorded_ownership(meta: &ObjectMeta) -> Option<&str> {
    let value = meta.annotations.as_ref()?.get(ANNOTATION_OWNERSHIP)?;
    let (name, uid) = value.rsplit_once('/')?;
    (Some(name) == meta.name.as_deref() && is_uid(uid)).then_some(uid)
}

/// The ownership annotation's value for `meta`'s object: its name and [`ownership_uid`].
pub fn ownership_value(meta: &ObjectMeta) -> Option<String> {
    Some(format!(
        "{}/{}",
        meta.name.as_deref()?,
        ownership_uid(meta)?
    ))
}

/// True for a UID as the apiserver makes them (RFC 4122 text form).
fn is_uid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// Which LoadBalancer a cloud resource belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LoadBalancerIdentity {
    /// Namespace of the LoadBalancer.
    pub namespace: String,
    /// Name of the LoadBalancer.
    pub name: String,
    /// UID of the LoadBalancer.
    pub uid: String,
    /// `spec.clusterName`, if any.
    pub cluster_name: Option<String>,
}

impl LoadBalancerIdentity {
    /// Ownership tags for cloud resources.
    pub fn tags(&self) -> BTreeMap<String, String> {
        let mut tags = BTreeMap::from([
            (tags::NAMESPACE.to_string(), self.namespace.clone()),
            (tags::NAME.to_string(), self.name.clone()),
            (tags::UID.to_string(), self.uid.clone()),
        ]);
        if let Some(cluster) = &self.cluster_name {
            tags.insert(tags::CLUSTER.to_string(), cluster.clone());
        }
        tags
    }

    /// True when `tags` mark a resource as owned by this LoadBalancer. The UID decides: a resource
    /// with the same namespace and name but another UID belongs to an earlier, deleted LoadBalancer
    /// (or to someone else) and is never adopted.
    pub fn owns(&self, tags: &BTreeMap<String, String>) -> bool {
        tags.get(tags::UID) == Some(&self.uid)
    }

    /// Ownership tags for resources made for the infrastructure object `infra`.
    pub fn tags_for(&self, infra: &kube::core::DynamicObject) -> BTreeMap<String, String> {
        let mut tags = self.tags();
        if let Some(uid) = ownership_uid(&infra.metadata) {
            tags.insert(tags::INFRASTRUCTURE_UID.to_string(), uid.to_string());
        }
        tags
    }

    /// True when `tags` mark a resource as owned by this LoadBalancer and, when `infra` is given,
    /// made for that infrastructure object (resources without the infrastructure tag, made before
    /// it existed, match any).
    pub fn owns_for(
        &self,
        tags: &BTreeMap<String, String>,
        infra: Option<&kube::core::DynamicObject>,
    ) -> bool {
        let infra_uid = infra.and_then(|i| ownership_uid(&i.metadata));
        self.owns(tags)
            && match (tags.get(tags::INFRASTRUCTURE_UID), infra_uid) {
                (Some(tagged), Some(uid)) => tagged == uid,
                _ => true,
            }
    }

    /// `namespace/name`, for messages.
    pub fn display(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// One listener of the load balancer (one entry of `LoadBalancer.spec.ports`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Listener {
    /// Port name.
    pub name: String,
    /// Port the load balancer listens on.
    pub port: i32,
    /// Port on the members.
    pub target_port: i32,
    /// Protocol.
    pub protocol: Protocol,
}

/// A member the reconciler wants in the load balancer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DesiredMember {
    /// Name of the target (unique within the LoadBalancer).
    pub name: String,
    /// What to do with it.
    pub intent: MemberIntent,
}

/// What the reconciler wants for one member. Members not listed at all are removed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MemberIntent {
    /// Serve new connections at this address (an IP, or a DNS name where the target only has
    /// one): create the member, move it to this address, or take it out of draining.
    Serve(String),
    /// Leave an existing member exactly as it is and never create one. Used for a target that has
    /// no usable address right now, or is not admitted yet (readiness gates), so that a passing
    /// glitch in its status does not drop a serving member.
    Keep,
    /// Stop new connections (weight 0, or out of the endpoints where the provider has no weights)
    /// while existing ones continue; the member is removed later by leaving it out. A draining
    /// member that does not exist is not created.
    Drain,
}

impl DesiredMember {
    /// A member serving at `address`.
    pub fn serve(name: impl Into<String>, address: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            intent: MemberIntent::Serve(address.into()),
        }
    }

    /// An existing member left as it is.
    pub fn keep(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            intent: MemberIntent::Keep,
        }
    }

    /// An existing member draining.
    pub fn drain(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            intent: MemberIntent::Drain,
        }
    }
}

/// State of a member as the provider sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum MemberState {
    /// Requested, not yet serving.
    Adding,
    /// Serving new connections.
    Active,
    /// Taking no new connections (weight 0), still serving existing ones.
    Draining,
}

impl MemberState {
    /// `Adding`, `Active` or `Draining`.
    pub fn as_str(self) -> &'static str {
        match self {
            MemberState::Adding => "Adding",
            MemberState::Active => "Active",
            MemberState::Draining => "Draining",
        }
    }
}

/// A member that exists in the provider.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MemberStatus {
    /// Name of the target.
    pub name: String,
    /// Address traffic goes to.
    pub address: String,
    /// Current state.
    pub state: MemberState,
}

/// How far an operation got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Done: the load balancer is provisioned / the members converged / it is deleted.
    Done,
    /// Still in progress (the cloud is provisioning, an object is PENDING, a write was refused as
    /// busy). Ask again after `retry_after`.
    Pending {
        /// What is being waited for, for conditions.
        message: String,
        /// When to ask again.
        retry_after: Duration,
        /// A provider-specific condition reason (e.g. `EIpNotReady`) for states users need to tell
        /// apart; `None` reports the generic `Provisioning`.
        reason: Option<Reason>,
    },
}

impl Progress {
    /// True when done.
    pub fn is_done(&self) -> bool {
        matches!(self, Progress::Done)
    }

    /// Pending with the generic reason; `retry_after` is at least 100ms (a zero delay would spin).
    pub fn pending(message: impl Into<String>, retry_after: Duration) -> Self {
        Progress::Pending {
            message: message.into(),
            retry_after: retry_after.max(Duration::from_millis(100)),
            reason: None,
        }
    }

    /// Pending for a provider-specific `reason`.
    pub fn pending_because(
        reason: Reason,
        message: impl Into<String>,
        retry_after: Duration,
    ) -> Self {
        match Self::pending(message, retry_after) {
            Progress::Pending {
                message,
                retry_after,
                ..
            } => Progress::Pending {
                message,
                retry_after,
                reason: Some(reason),
            },
            done => done,
        }
    }

    /// The retry delay of a pending operation.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Progress::Done => None,
            Progress::Pending { retry_after, .. } => Some(*retry_after),
        }
    }
}

/// Everything the reconciler needs to ask for a load balancer.
#[derive(Clone, Copy, Debug)]
pub struct EnsureRequest<'a> {
    /// Owner identity (ownership tags).
    pub identity: &'a LoadBalancerIdentity,
    /// The LoadBalancer as the reconciler read it: for a provider whose load balancer is made of
    /// other LoadBalancers (the zoned provider gives each zone the LoadBalancer's settings).
    pub loadbalancer: &'a capi_lb_api::LoadBalancer,
    /// The infrastructure object (`spec.infrastructureRef`), with its spec and status.
    pub infra: &'a DynamicObject,
    /// Listeners to configure.
    pub listeners: &'a [Listener],
    /// Source CIDRs allowed to connect (the LoadBalancer's `spec.sourceRanges`, or the
    /// `loadBalancerSourceRanges` of the Service it realises); empty allows every source. A provider
    /// that cannot restrict sources says so in [`EnsureOutcome::unsupported`].
    pub source_ranges: &'a [String],
    /// The members the reconciler wants, as it would ask of [`Provider::converge_members`] (hooks
    /// are already on their targets). A provider that can create a load balancer together with its
    /// members in one operation (Octavia) gives a load balancer it creates now the members to
    /// `Serve`; every other call ignores them: members are converged by `converge_members` once the
    /// load balancer is provisioned.
    pub members: &'a [DesiredMember],
}

/// Answer to [`Provider::ensure`].
#[derive(Clone, Debug, PartialEq)]
pub struct EnsureOutcome {
    /// Provisioned, or still pending.
    pub progress: Progress,
    /// Addresses assigned so far (may be known before the load balancer is ready).
    pub addresses: Vec<LoadBalancerAddress>,
    /// With a `Pending` progress: the load balancer was provisioned before and keeps serving at
    /// `addresses` while a change is applied to it (Octavia's `PENDING_UPDATE` after a member or
    /// listener write). The reconciler then keeps `InfrastructureReady`, `Ready` and the published
    /// endpoint as they are, converges members, and asks again after the progress's `retry_after`.
    /// False while it is first provisioned, recreated or deleted: then `Pending` means not serving.
    pub serving: bool,
    /// With a provisioned load balancer (`Done`, or `Pending` and `serving`): what its
    /// `InfrastructureReady` condition says instead of the plain `Provisioned`, a reason of the
    /// provider's and a message (a kube-dc EIp deleted while still serving, a change of network
    /// under way). Ignored while the load balancer is not provisioned.
    pub notice: Option<Notice>,
    /// True when this call created the load balancer (rather than finding it by its tags).
    pub created: bool,
    /// What this call changed in the cloud, for Events and the simulate timeline.
    pub changes: Vec<String>,
    /// Fields to write to the infrastructure object's status.
    pub status: Map<String, Value>,
    /// What was asked that this provider does not do (for example restricting source ranges), one
    /// sentence each naming the field; reported in the LoadBalancer's `SpecHonoured` condition.
    /// Empty when everything asked is in effect.
    pub unsupported: Vec<String>,
    /// Everything the load balancer is made of is an object capi-lb watches (an owned kind in the
    /// management cluster): a change or deletion behind capi-lb's back triggers a reconcile at
    /// once, so a Ready one needs no drift checks. False for a cloud's or a remote cluster's load
    /// balancer, which is looked at again every `--drift-check-seconds`.
    pub watched: bool,
}

/// What a provider says about a load balancer that serves ([`EnsureOutcome::notice`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// The condition reason, with its severity: a problem's comes with a Warning Event.
    pub reason: Reason,
    /// What is going on, and what to do if anything.
    pub message: String,
}

/// Everything the reconciler needs to converge members.
#[derive(Clone, Copy, Debug)]
pub struct MembersRequest<'a> {
    /// Owner identity.
    pub identity: &'a LoadBalancerIdentity,
    /// The infrastructure object.
    pub infra: &'a DynamicObject,
    /// Listeners (members receive traffic on each listener's target port).
    pub listeners: &'a [Listener],
    /// The complete desired member set: members not listed are removed.
    pub members: &'a [DesiredMember],
}

/// Answer to [`Provider::converge_members`].
#[derive(Clone, Debug, PartialEq)]
pub struct MembersOutcome {
    /// Converged, or still pending (members being added).
    pub progress: Progress,
    /// Members as the provider now has them.
    pub members: Vec<MemberStatus>,
    /// What this call changed.
    pub changes: Vec<String>,
    /// Fields to write to the infrastructure object's status.
    pub status: Map<String, Value>,
    /// For a load balancer whose addresses are its members' (the DNS provider, whose records are
    /// the targets' addresses): its addresses after this convergence, which the reconciler
    /// publishes in the same pass. `None` for every other provider (the addresses are `ensure`'s).
    pub addresses: Option<Vec<LoadBalancerAddress>>,
}

/// Everything the reconciler needs to delete a load balancer.
#[derive(Clone, Copy, Debug)]
pub struct DeleteRequest<'a> {
    /// Owner identity.
    pub identity: &'a LoadBalancerIdentity,
    /// The infrastructure object, when it still exists.
    pub infra: Option<&'a DynamicObject>,
}

/// Answer to [`Provider::delete`].
#[derive(Clone, Debug, PartialEq)]
pub struct DeleteOutcome {
    /// Gone (`Done`), or deletion still in progress.
    pub progress: Progress,
    /// What this call changed.
    pub changes: Vec<String>,
}

/// An infrastructure provider: realises LoadBalancers whose `spec.infrastructureRef` names its kind.
/// Its name and kind are stated once, in its [`crate::entry::Entry`].
///
/// Every method is idempotent and never blocks waiting for the cloud: call it again and it continues
/// where it left off. Errors are typed: [`ProviderError::Transient`] is retried with back-off,
/// [`ProviderError::Permanent`] is reported until the configuration changes.
#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// Create or update the load balancer and its listeners. Finds an existing load balancer by its
    /// ownership tags before creating one.
    async fn ensure(&self, request: EnsureRequest<'_>) -> Result<EnsureOutcome, ProviderError>;

    /// Make the member set match `request.members`: create or update members to `Serve`, leave
    /// `Keep` members as they are, drain `Drain` members, never create a member for `Keep` or
    /// `Drain`, and remove every member not listed (including members no target claims). Called
    /// only after `ensure` reported the load balancer as provisioned.
    async fn converge_members(
        &self,
        request: MembersRequest<'_>,
    ) -> Result<MembersOutcome, ProviderError>;

    /// Delete everything the provider created for this LoadBalancer (found by ownership tags), and
    /// nothing else. Done when the cloud reports it gone.
    async fn delete(&self, request: DeleteRequest<'_>) -> Result<DeleteOutcome, ProviderError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = "0b4f7a52-3c1e-4d2a-9f8e-1a2b3c4d5e6f";
    const NEW: &str = "9c8d7e6f-5a4b-4c3d-8e2f-0a1b2c3d4e5f";

    fn meta(name: &str, annotation: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            uid: Some(NEW.into()),
            annotations: annotation
                .map(|v| [(ANNOTATION_OWNERSHIP.to_string(), v.to_string())].into()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn the_recorded_ownership_survives_a_new_uid_but_not_a_new_name() {
        // Never recorded: its own UID, which the first claim records.
        assert_eq!(ownership_uid(&meta("cp", None)), Some(NEW));
        assert_eq!(
            ownership_value(&meta("cp", None)).as_deref(),
            Some(format!("cp/{NEW}").as_str())
        );
        // Moved (or restored): a new UID, the recorded one decides.
        let moved = meta("cp", Some(&format!("cp/{OLD}")));
        assert_eq!(ownership_uid(&moved), Some(OLD));
        assert_eq!(
            ownership_value(&moved).as_deref(),
            Some(format!("cp/{OLD}").as_str())
        );
        // Copied under another name: the copy's own UID, and its annotation is rewritten.
        let copy = meta("cp2", Some(&format!("cp/{OLD}")));
        assert_eq!(ownership_uid(&copy), Some(NEW));
        assert_eq!(
            ownership_value(&copy).as_deref(),
            Some(format!("cp2/{NEW}").as_str())
        );
        // Not a UID: ignored.
        for bad in [
            "cp/",
            "cp/x",
            "cp",
            &format!("cp/{}", OLD.replace('-', "x")),
            "",
        ] {
            assert_eq!(ownership_uid(&meta("cp", Some(bad))), Some(NEW), "{bad:?}");
        }
    }

    #[test]
    fn tags_for_an_infrastructure_object_use_its_recorded_ownership() {
        let identity = LoadBalancerIdentity {
            namespace: "ns".into(),
            name: "cp".into(),
            uid: OLD.into(),
            cluster_name: None,
        };
        let mut moved = DynamicObject::new(
            "octavia",
            &kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        );
        moved.metadata = meta("octavia", Some(&format!("octavia/{OLD}")));
        let tags = identity.tags_for(&moved);
        assert_eq!(
            tags.get(tags::INFRASTRUCTURE_UID).map(String::as_str),
            Some(OLD)
        );
        assert!(identity.owns_for(&tags, Some(&moved)));
        let fresh = DynamicObject {
            metadata: meta("octavia", None),
            ..moved.clone()
        };
        assert!(!identity.owns_for(&tags, Some(&fresh)));
    }
}
