//! Simulation: the in-memory Kubernetes API, the [`world::World`] that wires it to the in-memory
//! cloud, a manual clock and a controller context (used by the tests and `capi-lb simulate`), and the
//! `simulate` command itself.

mod admit;
pub mod inmemory_api;
pub mod render;
pub mod simulate;
pub mod stand_in;
pub mod summary;
pub mod world;
