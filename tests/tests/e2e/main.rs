//! The end-to-end tests: capi-lb against the real systems it meets, started by the project's harnesses
//! (`tests/k8s/harness.sh`: kube-apiserver, etcd, kube-controller-manager, Cluster API, CoreDNS,
//! ExternalDNS with BIND9, MetalLB; `tests/octavia/harness.sh`: Octavia's API with Keystone).
//!
//! One test binary with a module per subject, not one binary per file: each binary links all of
//! capi-lb, kube and their dependencies (about 130 MB in a debug build), and forty of them filled the
//! disk of a CI machine. Pick a subject with its module path, e.g.
//! `cargo test -p capi-lb-tests --test e2e dns::`.
// Tests: helpers panic on broken fixtures, which is the failure we want.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod addresses;
mod api_server_health;
mod ca_cache;
mod capi;
mod clusterctl;
mod clusterctl_move;
mod consent;
mod dns;
mod dnslb;
mod drift;
mod events;
mod externaldns;
mod fuzz;
mod helm;
mod image;
mod inmemory_api;
mod install;
mod ip_mode;
mod isolation;
mod kubedc_network;
mod loadbalancer;
mod metrics;
mod monitoring;
mod names;
mod octavia;
mod octavia_faults;
mod reachability;
mod rollout;
mod servicelb;
mod sharding;
mod silent_apiserver;
mod target_health;
mod templates;
mod tenancy;
mod tenant_roles;
mod triggers;
mod uninstall;
mod unreadable;
mod v1beta1;
mod workload_endpoints;
mod zoned;
