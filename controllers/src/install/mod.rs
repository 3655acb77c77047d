//! What installing capi-lb takes: the CRDs (`capi-lb crds`), least-privilege RBAC as data, and the
//! manifests (`capi-lb manifests`).

pub mod crds;
pub mod manifests;
pub mod rbac;
