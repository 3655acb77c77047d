//! What installing capi-lb takes: the CRDs (`capi-lb crds`), least-privilege RBAC as data, the tenants' roles, the
//! manifests, the Helm chart and the flag reference (`capi-lb manifests`), and the dashboard and
//! alerts to monitor it.

pub mod chart;
pub mod crds;
pub mod flags;
pub mod manifests;
pub mod monitoring;
pub mod rbac;
pub mod tenants;
