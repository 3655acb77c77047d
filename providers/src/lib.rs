//! Infrastructure providers of capi-lb: the [`Provider`] trait every provider implements, typed
//! errors, the registry that maps an `infrastructureRef` to a provider, the clock providers use, and
//! the in-memory provider (no cloud needed: tests, demos and `capi-lb simulate`).

pub mod clock;
pub mod error;
pub mod inmemory;
pub mod kubedc;
pub mod octavia;
pub mod provider;
pub mod registry;

pub use error::ProviderError;
pub use provider::{
    DeleteOutcome, DeleteRequest, DesiredMember, EnsureOutcome, EnsureRequest, Listener,
    LoadBalancerIdentity, MemberIntent, MemberState, MemberStatus, MembersOutcome, MembersRequest,
    Progress, Provider,
};
pub use registry::ProviderRegistry;

/// True when a provider's condition reason (from [`Progress::Pending`]) reports a problem someone
/// has to act on (a Warning Event), rather than a normal wait such as a load balancer provisioning.
pub fn is_problem_reason(reason: &str) -> bool {
    kubedc::reason::PROBLEMS.contains(&reason) || octavia::reason::PROBLEMS.contains(&reason)
}
