//! What installing capi-lb takes: the CRDs (`capi-lb crds`), least-privilege RBAC as data, and the
//! manifests and the Helm chart (`capi-lb manifests`).

pub mod chart;
pub mod crds;
pub mod manifests;
pub mod rbac;
