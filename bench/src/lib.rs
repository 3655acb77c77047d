//! capi-lb's benchmarks, the measurements behind `docs/benchmarks.md`, run by the `capi-lb-bench`
//! binary (kept out of the shipped `capi-lb` binary):
//!
//! - [`external`]: an ingress IP change reaching a Service's `-ext` EndpointSlice, in the in-memory
//!   API;
//! - [`converge`]: N LoadBalancers with M Machines each converging on a real cluster, with the
//!   controller's reconciles, API requests, idle writes and memory;
//! - [`propagation`]: the same IP change on a real cluster, through a watch, with the controller
//!   as a child process;
//! - [`capi`]: what capi-lb adds to the time Cluster API's own manager needs to settle N Clusters,
//!   with a fake infrastructure provider, each size once without capi-lb and once with it;
//! - [`writecost`]: what one write costs kube-apiserver and etcd, merge patch against
//!   server-side apply, on metadata and on status;
//! - [`launch`]: what the real-cluster benchmarks share (credentials, install, the controller as
//!   a child process);
//! - [`scrape`]: reading a running controller's `/metrics`.

pub mod capi;
pub mod cli;
pub mod converge;
pub mod external;
pub mod launch;
pub mod propagation;
pub mod rollout;
pub mod scrape;
pub mod writecost;
