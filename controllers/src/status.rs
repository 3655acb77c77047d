//! Pure computation of a LoadBalancer's conditions from what a reconcile observed. No I/O: the
//! reconciler gathers the facts, this module turns them into conditions with reasons and messages.

use capi_lb_api::conditions::DesiredCondition;
use capi_lb_api::constants::{condition as c, reason as r};
use capi_lb_providers::{MemberState, MemberStatus};

use crate::publication::Published;
use crate::targets::Target;

/// State of the provider's load balancer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InfraState {
    /// Provisioned.
    Provisioned,
    /// Still being provisioned; the message says what is awaited.
    Provisioning(String),
    /// Something is wrong.
    Problem {
        /// Condition reason (one of [`capi_lb_api::constants::reason`]).
        reason: &'static str,
        /// What is wrong and what to do.
        message: String,
    },
}

/// State of the members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MembersState {
    /// Members were not converged (the load balancer is not provisioned yet).
    NotConverged(String),
    /// The provider's member set after converging.
    Converged(Vec<MemberStatus>),
    /// Converging failed.
    Problem {
        /// Condition reason.
        reason: &'static str,
        /// Message.
        message: String,
    },
}

/// What a reconcile learned about the targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetsState {
    /// The target kind could not be listed.
    Unavailable(String),
    /// The selected targets and the members.
    Listed {
        /// Selected targets, sorted by name.
        targets: Vec<Target>,
        /// Members.
        members: MembersState,
    },
}

/// Names of the targets that are active members.
pub fn active_targets(members: &MembersState) -> Vec<String> {
    match members {
        MembersState::Converged(members) => {
            let mut names: Vec<String> = members
                .iter()
                .filter(|m| m.state == MemberState::Active)
                .map(|m| m.name.clone())
                .collect();
            names.sort();
            names
        }
        _ => Vec::new(),
    }
}

/// The `InfrastructureReady` condition.
pub fn infrastructure_condition(infra: &InfraState) -> DesiredCondition {
    match infra {
        InfraState::Provisioned => DesiredCondition::true_(
            c::INFRASTRUCTURE_READY,
            r::PROVISIONED,
            "the load balancer is provisioned",
        ),
        InfraState::Provisioning(message) => {
            DesiredCondition::false_(c::INFRASTRUCTURE_READY, r::PROVISIONING, message.clone())
        }
        InfraState::Problem { reason, message } => {
            DesiredCondition::false_(c::INFRASTRUCTURE_READY, reason, message.clone())
        }
    }
}

fn list(names: &[&str]) -> String {
    const SHOWN: usize = 10;
    let mut out = names
        .iter()
        .take(SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        out.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    out
}

/// The `TargetsReady` condition. `kind` is `Kind.group`, `selector` the selector string and
/// `address_types` the preference list, for messages.
pub fn targets_condition(
    targets: &TargetsState,
    kind: &str,
    selector: &str,
    address_types: &str,
) -> DesiredCondition {
    let (targets, members) = match targets {
        TargetsState::Unavailable(message) => {
            return DesiredCondition::false_(
                c::TARGETS_READY,
                r::TARGET_KIND_UNAVAILABLE,
                message.clone(),
            );
        }
        TargetsState::Listed { targets, members } => (targets, members),
    };
    if targets.is_empty() {
        return DesiredCondition::false_(
            c::TARGETS_READY,
            r::NO_TARGETS,
            format!("no {kind} matches the selector {selector}"),
        );
    }
    let mut problems = Vec::new();
    let without: Vec<&str> = targets
        .iter()
        .filter(|t| !t.deleting && t.address.is_none())
        .map(|t| t.name.as_str())
        .collect();
    if !without.is_empty() {
        problems.push(format!(
            "{} without a usable address (wanted {address_types}): {}",
            if without.len() == 1 {
                "1 target"
            } else {
                "targets"
            },
            list(&without)
        ));
    }
    let reason_if_progressing = match members {
        MembersState::Problem { reason, message } => {
            problems.push(message.clone());
            return DesiredCondition::false_(c::TARGETS_READY, reason, problems.join("; "));
        }
        MembersState::NotConverged(why) => {
            problems.push(why.clone());
            r::TARGETS_PROGRESSING
        }
        MembersState::Converged(members) => {
            let waiting: Vec<&str> = targets
                .iter()
                .filter(|t| !t.deleting && t.address.is_some())
                .filter(|t| {
                    !members
                        .iter()
                        .any(|m| m.name == t.name && m.state == MemberState::Active)
                })
                .map(|t| t.name.as_str())
                .collect();
            if !waiting.is_empty() {
                problems.push(format!("waiting for {} to become active", list(&waiting)));
            }
            r::TARGETS_PROGRESSING
        }
    };
    if problems.is_empty() {
        let active = targets.iter().filter(|t| !t.deleting).count();
        DesiredCondition::true_(
            c::TARGETS_READY,
            r::TARGETS_ACTIVE,
            format!("{active} of {} targets active", targets.len()),
        )
    } else if !without.is_empty() {
        DesiredCondition::false_(
            c::TARGETS_READY,
            r::TARGETS_WITHOUT_ADDRESS,
            problems.join("; "),
        )
    } else {
        DesiredCondition::false_(c::TARGETS_READY, reason_if_progressing, problems.join("; "))
    }
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

/// Condition reasons that are reported as Warning Events.
pub fn is_warning(reason: &str) -> bool {
    matches!(
        reason,
        r::INVALID_SPEC
            | r::PROVIDER_NOT_ENABLED
            | r::INFRASTRUCTURE_NOT_FOUND
            | r::INVALID_INFRASTRUCTURE
            | r::INFRASTRUCTURE_IN_USE
            | r::PROVIDER_ERROR
            | r::PROVIDER_FAILED
            | r::TARGETS_WITHOUT_ADDRESS
            | r::TARGET_KIND_UNAVAILABLE
            | r::NAME_CONFLICT
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(name: &str, address: Option<&str>) -> Target {
        Target {
            name: name.into(),
            deleting: false,
            address: address.map(Into::into),
        }
    }

    fn member(name: &str, state: MemberState) -> MemberStatus {
        MemberStatus {
            name: name.into(),
            address: "10.0.0.1".into(),
            state,
        }
    }

    fn cond(targets: TargetsState) -> DesiredCondition {
        targets_condition(
            &targets,
            "Machine.cluster.x-k8s.io",
            "a=b",
            "InternalIP, ExternalIP",
        )
    }

    #[test]
    fn targets_ready_when_every_target_is_active() {
        let d = cond(TargetsState::Listed {
            targets: vec![
                target("m1", Some("10.0.0.1")),
                target("m2", Some("10.0.0.2")),
            ],
            members: MembersState::Converged(vec![
                member("m1", MemberState::Active),
                member("m2", MemberState::Active),
            ]),
        });
        assert!(d.status);
        assert_eq!(d.reason, r::TARGETS_ACTIVE);
    }

    #[test]
    fn targets_without_address_are_named() {
        let d = cond(TargetsState::Listed {
            targets: vec![target("m1", Some("10.0.0.1")), target("m2", None)],
            members: MembersState::Converged(vec![member("m1", MemberState::Active)]),
        });
        assert!(!d.status);
        assert_eq!(d.reason, r::TARGETS_WITHOUT_ADDRESS);
        assert!(d.message.contains("m2"), "{}", d.message);
        assert!(
            d.message.contains("InternalIP, ExternalIP"),
            "{}",
            d.message
        );
    }

    #[test]
    fn adding_members_are_progressing() {
        let d = cond(TargetsState::Listed {
            targets: vec![target("m1", Some("10.0.0.1"))],
            members: MembersState::Converged(vec![member("m1", MemberState::Adding)]),
        });
        assert_eq!((d.status, d.reason), (false, r::TARGETS_PROGRESSING));
        assert!(d.message.contains("m1"));
    }

    #[test]
    fn no_targets_and_unavailable_kinds() {
        let d = cond(TargetsState::Listed {
            targets: vec![],
            members: MembersState::Converged(vec![]),
        });
        assert_eq!((d.status, d.reason), (false, r::NO_TARGETS));
        assert!(d.message.contains("a=b"));
        let d = cond(TargetsState::Unavailable("kind not installed".into()));
        assert_eq!(d.reason, r::TARGET_KIND_UNAVAILABLE);
    }

    #[test]
    fn long_lists_are_shortened() {
        let names: Vec<String> = (0..15).map(|i| format!("m{i:02}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        assert!(list(&refs).ends_with("and 5 more"));
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
