//! Infrastructure providers of capi-lb: the [`Provider`] trait every provider implements, typed
//! errors, a provider's catalog [`entry`] (what the rest of capi-lb knows about it), the
//! [`catalog`] that lists every provider's entry, the registry that maps an `infrastructureRef` to
//! an enabled provider, the clock providers use, and the providers: in-memory (no cloud needed:
//! tests, demos and `capi-lb simulate`), kube-dc, Octavia, Services of type LoadBalancer
//! (MetalLB, kube-vip, cloud controllers) and DNS records (a name whose records are the targets).

pub mod bounded;
pub mod catalog;
pub mod clock;
pub mod dnslb;
pub mod endpoints;
pub mod entry;
pub mod error;
pub mod inmemory;
pub mod kubeconfig;
pub mod kubedc;
pub mod lbservice;
pub mod observe;
pub mod octavia;
pub mod provider;
pub mod registry;
pub mod servicelb;
pub mod sources;
pub mod untrusted;
pub mod zoned;

pub use error::ProviderError;
pub use provider::{
    DeleteOutcome, DeleteRequest, DesiredMember, EnsureOutcome, EnsureRequest, Listener,
    LoadBalancerIdentity, MemberIntent, MemberState, MemberStatus, MembersOutcome, MembersRequest,
    Progress, Provider, Reason, Severity,
};
pub use registry::{Enabled, ProviderRegistry};
