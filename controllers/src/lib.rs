//! capi-lb controllers: the LoadBalancer reconciler, endpoint publication, the in-memory Kubernetes
//! API used by `capi-lb simulate` and the tests, and the pieces of the `capi-lb` binary.

pub mod bench;
pub mod cache;
pub mod class;
pub mod context;
pub mod dns;
pub mod error;
pub mod events;
pub mod install;
pub mod kinds;
pub mod loadbalancer;
pub mod metadata;
pub mod publication;
pub mod run;
pub mod sim;
pub mod telemetry;

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
