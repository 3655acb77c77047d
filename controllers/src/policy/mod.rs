//! The platform admin's policy for what capi-lb publishes on behalf of tenants, pure and in one
//! place: which addresses may be published anywhere ([`addresses`]), which DNS names a namespace
//! may publish ([`names`]), and what both read of the cluster, kept by `run`'s watches
//! ([`facts`]: every ClusterIP, the Namespaces' annotations).

pub mod addresses;
pub mod facts;
pub mod names;

pub use addresses::{AddressPolicy, Refusal, builtin};
pub use facts::PolicyFacts;
pub use names::NamePolicy;
