//! capi-lb controllers: the LoadBalancer reconciler, endpoint publication, the in-memory Kubernetes
//! API used by `capi-lb simulate` and the tests, and the pieces of the `capi-lb` binary.

pub mod context;
pub mod crds;
pub mod error;
pub mod events;
pub mod inmemory_api;
pub mod kinds;
pub mod metadata;
pub mod publication;
pub mod reconcile;
pub mod run;
pub mod simulate;
pub mod status;
pub mod targets;
pub mod world;

pub use context::{Config, Context};
pub use error::{Error, Result};
pub use reconcile::{Outcome, reconcile};
