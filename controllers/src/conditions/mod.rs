//! Every condition capi-lb reports, decided here from facts: pure, no I/O. The reconcilers gather
//! the facts (what a pass saw, what a provider answered, what a publication did); the functions
//! here turn them into conditions with a reason and a message. Each reason carries its severity
//! ([`capi_lb_api::conditions::Reason`]), so whether a condition comes with a Warning Event is
//! decided with the reason, not by a list kept elsewhere.
//!
//! This module: `Ready`, `InfrastructureReady`, `SpecHonoured`, `EndpointPublished`, `Paused`;
//! `targets.rs`: `TargetsReady`; `migration.rs`: `InfrastructureMigration`; `cluster.rs`:
//! `ClusterEndpoint`; `dns.rs`: `DNSPublished` (whose facts the Service controller reads too);
//! `reachability.rs`: `Reachable`.

mod cluster;
mod dns;
mod migration;
mod reachability;
mod targets;
mod workload;

use capi_lb_api::conditions::{DesiredCondition, Reason};
use capi_lb_api::constants::{condition as c, reason as r};
use capi_lb_api::target::TargetState;

use crate::kinds::Unlisted;
use crate::policy::Refusal;
use crate::publication::Published;

pub use cluster::{ClusterEndpoint, cluster_endpoint_condition};
pub use dns::dns_condition;
pub use migration::{Migration, migration_condition};
pub use reachability::{NotProbed, reachable_condition};
pub use targets::{targets_condition, views};
pub use workload::{NotLooked, workload_condition};

/// State of the provider's load balancer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InfraState {
    /// Provisioned.
    Provisioned,
    /// Provisioned and serving, with something the provider says about it (a change under way, an
    /// object of it being deleted): `InfrastructureReady` is True with the provider's reason.
    Noticed {
        /// Condition reason from the provider, with its severity.
        reason: Reason,
        /// What is going on.
        message: String,
    },
    /// Still being provisioned; the message says what is awaited.
    Provisioning(String),
    /// Still being provisioned, for a provider-specific reason users need to tell apart.
    Waiting {
        /// Condition reason from the provider, with its severity.
        reason: Reason,
        /// What is awaited.
        message: String,
    },
    /// Something is wrong.
    Problem {
        /// Condition reason (one of [`capi_lb_api::constants::reason`]).
        reason: Reason,
        /// What is wrong and what to do.
        message: String,
    },
}

impl InfraState {
    /// Provisioned (with or without a notice): the load balancer serves, members are converged.
    pub fn is_provisioned(&self) -> bool {
        matches!(self, InfraState::Provisioned | InfraState::Noticed { .. })
    }
}

/// State of the members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MembersState {
    /// Members were not converged (the load balancer is not provisioned yet).
    NotConverged(String),
    /// The provider converged the members.
    Converged,
    /// Converging failed.
    Problem {
        /// Condition reason.
        reason: Reason,
        /// Message.
        message: String,
    },
}

/// One target after a reconcile, as the `TargetsReady` condition and the status see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetView {
    /// Object name.
    pub name: String,
    /// Matched by the selector.
    pub selected: bool,
    /// Selected, not deleting, not disabled.
    pub wants_in: bool,
    /// Its state (as written on it).
    pub state: TargetState,
    /// It has a usable address.
    pub has_address: bool,
    /// Readiness gates it has not passed.
    pub gates_pending: Vec<String>,
    /// It fails its health probes (`spec.targetHealth`): what the last probe found. Taken out
    /// (state `failing`, `unhealthy`), or kept when every serving target fails.
    pub failing_probes: Option<String>,
}

/// What a reconcile learned about the targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetsState {
    /// The target kind may not be named, or could not be listed.
    Unavailable(Unlisted),
    /// The targets (selected, and deselected ones still being removed) and the members.
    Listed {
        /// Targets, sorted by name.
        targets: Vec<TargetView>,
        /// Members.
        members: MembersState,
    },
}

/// The `InfrastructureReady` condition.
pub fn infrastructure_condition(infra: &InfraState) -> DesiredCondition {
    match infra {
        InfraState::Provisioned => DesiredCondition::true_(
            c::INFRASTRUCTURE_READY,
            r::PROVISIONED,
            "the load balancer is provisioned",
        ),
        InfraState::Noticed { reason, message } => {
            DesiredCondition::true_(c::INFRASTRUCTURE_READY, *reason, message.clone())
        }
        InfraState::Provisioning(message) => {
            DesiredCondition::false_(c::INFRASTRUCTURE_READY, r::PROVISIONING, message.clone())
        }
        InfraState::Waiting { reason, message } | InfraState::Problem { reason, message } => {
            DesiredCondition::false_(c::INFRASTRUCTURE_READY, *reason, message.clone())
        }
    }
}

/// The `SpecHonoured` condition: True when the provider does everything the spec asks, otherwise
/// False listing what it said it does not do.
pub fn spec_honoured_condition(unsupported: &[String]) -> DesiredCondition {
    if unsupported.is_empty() {
        DesiredCondition::true_(
            c::SPEC_HONOURED,
            r::HONOURED,
            "the provider does everything the spec asks",
        )
    } else {
        DesiredCondition::false_(
            c::SPEC_HONOURED,
            r::NOT_HONOURED,
            format!(
                "the provider does not do everything the spec asks: {}",
                unsupported.join("; ")
            ),
        )
    }
}

/// The `Paused` condition: True with why reconciliation is paused, else False.
pub fn paused_condition(why: Option<String>) -> DesiredCondition {
    match why {
        Some(why) => DesiredCondition::true_(c::PAUSED, r::PAUSED, why),
        None => DesiredCondition::false_(c::PAUSED, r::NOT_PAUSED, "reconciliation is not paused"),
    }
}

/// `EndpointPublished` when the address policy refuses some of the provider's addresses: nothing
/// is published, and the condition names each refused address with its rule.
pub fn address_refused_condition(refused: &[Refusal]) -> DesiredCondition {
    let named: Vec<String> = refused.iter().map(ToString::to_string).collect();
    DesiredCondition::false_(
        c::ENDPOINT_PUBLISHED,
        r::ADDRESS_REFUSED,
        format!(
            "the platform's address policy refuses {}; nothing is published (not in -ext, DNS, a Service's ingress or the Cluster's endpoint) until the provider's addresses are allowed",
            named.join(", ")
        ),
    )
}

/// `Ready` of a spec that fails the CRD's schema or CEL rules (`message` names the field).
pub fn invalid_spec_condition(message: &str) -> DesiredCondition {
    DesiredCondition::false_(
        c::READY,
        r::INVALID_SPEC,
        format!("invalid spec, nothing was changed: {message}"),
    )
}

/// The conditions of a LoadBalancer being deleted: not `Ready` (`reason`, with what the deletion
/// waits for), not paused.
pub fn deleting_conditions(reason: Reason, message: &str) -> [DesiredCondition; 2] {
    [
        DesiredCondition::false_(c::READY, reason, format!("deleting: {message}")),
        paused_condition(None),
    ]
}

/// The `EndpointPublished` condition. `infra_ready` tells whether the published addresses are
/// resolvable yet (endpoints are only `ready` once the load balancer is provisioned).
pub fn publication_condition(published: &Published, infra_ready: bool) -> DesiredCondition {
    let skipped = |skipped: &[String]| {
        if skipped.is_empty() {
            String::new()
        } else {
            format!("; not published: {}", skipped.join(", "))
        }
    };
    match published {
        Published::Disabled => DesiredCondition::false_(
            c::ENDPOINT_PUBLISHED,
            r::PUBLICATION_DISABLED,
            "spec.publication.enabled is false",
        ),
        Published::Conflict { message } => {
            DesiredCondition::false_(c::ENDPOINT_PUBLISHED, r::NAME_CONFLICT, message.clone())
        }
        Published::WaitingForAddress {
            service,
            skipped: s,
        } => DesiredCondition::false_(
            c::ENDPOINT_PUBLISHED,
            r::WAITING_FOR_ADDRESS,
            format!(
                "Service {service} exists; waiting for the provider to assign an address{}",
                skipped(s)
            ),
        ),
        Published::Published {
            service,
            skipped: s,
        } if infra_ready => DesiredCondition::true_(
            c::ENDPOINT_PUBLISHED,
            r::PUBLISHED,
            format!(
                "Service {service} publishes the load balancer's addresses{}",
                skipped(s)
            ),
        ),
        Published::Published {
            service,
            skipped: s,
        } => DesiredCondition::false_(
            c::ENDPOINT_PUBLISHED,
            r::WAITING_FOR_ADDRESS,
            format!(
                "Service {service} lists the addresses; they become resolvable once the load balancer is provisioned{}",
                skipped(s)
            ),
        ),
    }
}

/// The `Ready` summary: provisioned, with an address, and published (unless publication is
/// disabled). Targets do not gate readiness: a control-plane endpoint must be usable before the
/// first control-plane machine exists.
/// `published` is `None` when publication was not attempted in this pass.
pub fn ready_condition(
    infra: &DesiredCondition,
    published: Option<&DesiredCondition>,
    has_address: bool,
    endpoint: Option<&str>,
) -> DesiredCondition {
    if !infra.status {
        return DesiredCondition::false_(c::READY, r::NOT_READY, infra.message.clone());
    }
    let Some(published) = published else {
        return DesiredCondition::false_(
            c::READY,
            r::NOT_READY,
            "the endpoint has not been published",
        );
    };
    if !has_address {
        return DesiredCondition::false_(
            c::READY,
            r::NOT_READY,
            "the provider has not assigned an address yet",
        );
    }
    if published.reason == r::ADDRESS_REFUSED {
        return DesiredCondition::false_(c::READY, r::ADDRESS_REFUSED, published.message.clone());
    }
    if !published.status && published.reason != r::PUBLICATION_DISABLED {
        return DesiredCondition::false_(c::READY, r::NOT_READY, published.message.clone());
    }
    DesiredCondition::true_(
        c::READY,
        r::READY,
        match endpoint {
            Some(endpoint) => format!("the load balancer is ready at {endpoint}"),
            None => "the load balancer is ready".to_string(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provider_reason_warns_by_its_severity() {
        let waiting = |reason| {
            infrastructure_condition(&InfraState::Waiting {
                reason,
                message: "m".into(),
            })
        };
        let wait = waiting(Reason::normal("EIpNotReady"));
        assert_eq!(
            (wait.reason.name, wait.is_warning()),
            ("EIpNotReady", false)
        );
        let problem = waiting(Reason::problem("EIpStuck"));
        assert_eq!(
            (problem.reason.name, problem.is_warning()),
            ("EIpStuck", true)
        );
        // capi-lb's own reasons carry theirs.
        assert!(
            infrastructure_condition(&InfraState::Problem {
                reason: r::PROVIDER_FAILED,
                message: "m".into()
            })
            .is_warning()
        );
        assert!(!infrastructure_condition(&InfraState::Provisioning("m".into())).is_warning());
    }

    #[test]
    fn a_serving_load_balancer_with_a_notice_is_ready_with_the_providers_reason() {
        let noticed = |reason| InfraState::Noticed {
            reason,
            message: "moving".into(),
        };
        let changing = noticed(Reason::normal("ExternalNetworkChanging"));
        assert!(changing.is_provisioned() && InfraState::Provisioned.is_provisioned());
        assert!(!InfraState::Provisioning("m".into()).is_provisioned());
        let c = infrastructure_condition(&changing);
        assert_eq!(
            (c.status, c.reason.name, c.message.as_str(), c.is_warning()),
            (true, "ExternalNetworkChanging", "moving", false)
        );
        // Still Ready: a notice does not take the load balancer out.
        let published = publication_condition(
            &Published::Published {
                service: "cp-ext".into(),
                skipped: vec![],
            },
            true,
        );
        assert!(ready_condition(&c, Some(&published), true, Some("cp-ext:6443")).status);
        let held = infrastructure_condition(&noticed(Reason::problem("EIpDeleting")));
        assert!(held.status && held.reason.is_problem());
    }

    #[test]
    fn ready_needs_infrastructure_address_and_publication() {
        let infra_ok = infrastructure_condition(&InfraState::Provisioned);
        let infra_wait = infrastructure_condition(&InfraState::Provisioning("provisioning".into()));
        let published = publication_condition(
            &Published::Published {
                service: "cp-ext".into(),
                skipped: vec![],
            },
            true,
        );
        let conflict = publication_condition(
            &Published::Conflict {
                message: "taken".into(),
            },
            true,
        );
        let disabled = publication_condition(&Published::Disabled, true);
        assert!(ready_condition(&infra_ok, Some(&published), true, Some("cp-ext:6443")).status);
        assert!(!ready_condition(&infra_wait, Some(&published), true, None).status);
        assert!(!ready_condition(&infra_ok, Some(&published), false, None).status);
        let blocked = ready_condition(&infra_ok, Some(&conflict), true, None);
        assert_eq!((blocked.status, blocked.message.as_str()), (false, "taken"));
        assert!(ready_condition(&infra_ok, Some(&disabled), true, None).status);
    }

    #[test]
    fn published_but_not_provisioned_is_not_yet_resolvable() {
        let d = publication_condition(
            &Published::Published {
                service: "cp-ext".into(),
                skipped: vec![],
            },
            false,
        );
        assert_eq!((d.status, d.reason), (false, r::WAITING_FOR_ADDRESS));
    }
}
