//! capi-lb's controllers and the pieces of the `capi-lb` binary: the LoadBalancer controller
//! ([`loadbalancer`]) and the Service controller ([`service`]) over the libraries they share
//! (endpoint and DNS [`publication`], capi-lb's load-balancer [`class`], [`conditions`], caches,
//! events, telemetry), the wiring of both into `capi-lb run` ([`run`]), the install manifests
//! ([`install`]) and the in-memory Kubernetes API of `capi-lb simulate` and the tests ([`sim`]).
//! `docs/architecture.md` draws them, floor by floor.

pub mod boundary;
pub mod cache;
pub mod class;
pub mod cli;
pub mod conditions;
pub mod context;
pub mod error;
pub mod events;
pub mod install;
pub mod jobs;
pub mod kinds;
pub mod loadbalancer;
pub mod metadata;
pub mod policy;
pub mod publication;
pub mod reachability;
pub mod run;
pub mod service;
pub mod sim;
pub mod telemetry;
pub mod workload;

pub use context::Outcome;
pub use context::{Config, Context};
pub use error::{Error, Result};
pub use loadbalancer::reconcile;

/// Select rustls' `ring` crypto provider for the process. Two providers end up compiled in (kube uses
/// `ring`; a dependency of the in-memory API enables `aws-lc-rs`), and with two rustls refuses to
/// guess and panics on the first TLS connection. Call this before creating a kube client; calling it
/// again is harmless.
pub fn install_crypto_provider() {
    // Err means a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
