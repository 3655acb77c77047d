//! The tests of capi-lb's crates together without a real system: reconcilers and providers on the
//! in-memory API of kube-fake-client, the generated manifests and RBAC, templates, `simulate`, and the
//! architecture's rules. One binary with a module per subject (see tests/tests/e2e/main.rs for why).
// Tests: helpers panic on broken fixtures, which is the failure we want.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod architecture;
mod boundary;
mod capi;
mod class;
mod dns;
mod dnslb;
mod docs;
mod external_endpoints;
mod helm_values;
mod isolation;
mod kubedc;
mod kubedc_network;
mod lifecycle;
mod lifecycle_props;
mod migration;
mod monitoring;
mod moved;
mod parsers;
mod rbac;
mod reconcile;
mod run;
mod servicelb;
mod simulate;
mod templates;
mod workflows;
mod workload_endpoints;
mod zoned;
