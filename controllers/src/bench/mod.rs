//! `capi-lb bench`: the measurements behind `docs/benchmarks.md`.
//!
//! - [`external`]: an ingress IP change reaching a Service's `-ext` EndpointSlice, in the in-memory
//!   API;
//! - [`converge`]: N LoadBalancers with M Machines each converging on a real cluster, with the
//!   controller's reconciles, API requests, idle writes and memory;
//! - [`propagation`]: the same IP change on a real cluster, through a watch, with the controller
//!   as a child process;
//! - [`cluster`]: what the real-cluster benchmarks share (credentials, install, the controller).

pub mod cluster;
pub mod converge;
pub mod external;
pub mod propagation;
pub mod scrape;
