//! The `TargetsReady` condition, from the targets a pass saw and the members the provider has.

use capi_lb_api::conditions::{DesiredCondition, Reason};
use capi_lb_api::constants::{condition as c, reason as r};
use capi_lb_api::target::TargetState;
use capi_lb_providers::{DesiredMember, MemberIntent, MemberState, MemberStatus};

use super::{MembersState, TargetView, TargetsState};
use crate::kinds::Unlisted;

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

/// The `TargetsReady` condition: true when every target that should serve (selected, not
/// deleting, not disabled) is `active`. Disabled and leaving targets are reported in the message.
/// `kind` is `Kind.group`, `selector` the selector string and `address_types` the preference list,
/// for messages.
pub fn targets_condition(
    targets: &TargetsState,
    kind: &str,
    selector: &str,
    address_types: &str,
) -> DesiredCondition {
    let (targets, members) = match targets {
        TargetsState::Unavailable(why) => {
            let reason = match why {
                Unlisted::NotAllowed(_) => r::TARGET_KIND_NOT_ALLOWED,
                Unlisted::Unavailable(_) => r::TARGET_KIND_UNAVAILABLE,
            };
            return DesiredCondition::false_(c::TARGETS_READY, reason, why.message().to_string());
        }
        TargetsState::Listed { targets, members } => (targets, members),
    };
    // Facts that do not make the condition false.
    let notes = notes(targets);
    let with_notes = |mut parts: Vec<String>| {
        parts.extend(notes.iter().cloned());
        parts.join("; ")
    };
    if !targets.iter().any(|t| t.selected) {
        return DesiredCondition::false_(
            c::TARGETS_READY,
            r::NO_TARGETS,
            with_notes(vec![format!("no {kind} matches the selector {selector}")]),
        );
    }
    if !targets.iter().any(|t| t.wants_in) {
        // What the provider says about it comes first (the DNS provider keeping the last records).
        if let MembersState::Problem { reason, message } = members {
            return DesiredCondition::false_(
                c::TARGETS_READY,
                *reason,
                with_notes(vec![message.clone()]),
            );
        }
        return DesiredCondition::false_(
            c::TARGETS_READY,
            r::NO_TARGETS,
            with_notes(vec![
                "no selected target is in service (all are disabled or being deleted)".into(),
            ]),
        );
    }
    let (mut problems, mut reason) = problems(targets, members, address_types);
    // Targets failing their health probes: taken out, or all kept when every one fails.
    let failing: Vec<(String, bool)> = targets
        .iter()
        .filter_map(|t| {
            t.failing_probes
                .as_ref()
                .map(|why| (format!("{} ({why})", t.name), t.wants_in))
        })
        .collect();
    if !failing.is_empty() {
        let pick = |kept: bool| -> Vec<&str> {
            failing
                .iter()
                .filter(|(_, wants_in)| *wants_in == kept)
                .map(|(f, _)| f.as_str())
                .collect()
        };
        let (kept, out) = (pick(true), pick(false));
        problems.push(if out.is_empty() {
            format!(
                "every target fails its health probes, so none is taken out: {}",
                list(&kept)
            )
        } else if kept.is_empty() {
            format!("taken out after failing their health probes: {}", list(&out))
        } else {
            // DNS records: every target fails, the last ones in stay.
            format!(
                "every target fails its health probes: taken out before: {}; kept, as the last ones in: {}",
                list(&out),
                list(&kept)
            )
        });
        // Failing beats "being added": a target kept out is not on its way in.
        reason = match reason {
            Some(r) if r == r::TARGETS_PROGRESSING => Some(r::TARGETS_UNHEALTHY),
            other => other.or(Some(r::TARGETS_UNHEALTHY)),
        };
    }
    let active = names(targets, |t| t.wants_in && t.state == TargetState::Active);
    match reason {
        None => DesiredCondition::true_(
            c::TARGETS_READY,
            r::TARGETS_ACTIVE,
            with_notes(vec![format!(
                "{} of {} targets active",
                active.len(),
                targets.iter().filter(|t| t.selected).count()
            )]),
        ),
        // A member problem the provider names comes first, with its severity.
        Some(reason) => DesiredCondition::false_(c::TARGETS_READY, reason, with_notes(problems)),
    }
}

/// The names of the targets for which `pred` holds.
fn names(targets: &[TargetView], pred: impl Fn(&TargetView) -> bool) -> Vec<&str> {
    targets
        .iter()
        .filter(|t| pred(t))
        .map(|t| t.name.as_str())
        .collect()
}

/// Disabled and draining targets: worth saying, but they do not make TargetsReady false.
fn notes(targets: &[TargetView]) -> Vec<String> {
    let disabled = names(targets, |t| t.selected && t.state == TargetState::Disabled);
    let draining: Vec<String> = targets
        .iter()
        .filter(|t| t.state.is_draining())
        .map(|t| format!("{} ({})", t.name, t.state))
        .collect();
    let mut notes = Vec::new();
    if !disabled.is_empty() {
        notes.push(format!("disabled: {}", list(&disabled)));
    }
    if !draining.is_empty() {
        let refs: Vec<&str> = draining.iter().map(String::as_str).collect();
        notes.push(format!("draining: {}", list(&refs)));
    }
    notes
}

/// What keeps targets that want in from being active, and the reason of the first problem (the
/// provider's member problem first); no reason when every one is active.
fn problems(
    targets: &[TargetView],
    members: &MembersState,
    address_types: &str,
) -> (Vec<String>, Option<Reason>) {
    let waiting = |t: &TargetView| t.wants_in && t.state != TargetState::Active;
    let without = names(targets, |t| waiting(t) && !t.has_address);
    let not_admitted = names(targets, |t| {
        waiting(t) && t.has_address && !t.gates_pending.is_empty()
    });
    let joining = names(targets, |t| {
        waiting(t) && t.has_address && t.gates_pending.is_empty()
    });
    let mut problems = Vec::new();
    let mut reason = None;
    if let MembersState::Problem {
        reason: why,
        message,
    } = members
    {
        problems.push(message.clone());
        reason = Some(*why);
    }
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
        reason = reason.or(Some(r::TARGETS_WITHOUT_ADDRESS));
    }
    if !not_admitted.is_empty() {
        let gates: Vec<String> = targets
            .iter()
            .filter(|t| not_admitted.contains(&t.name.as_str()))
            .map(|t| format!("{} ({})", t.name, t.gates_pending.join(", ")))
            .collect();
        let refs: Vec<&str> = gates.iter().map(String::as_str).collect();
        problems.push(format!(
            "waiting for readiness gates before admitting {}",
            list(&refs)
        ));
        reason = reason.or(Some(r::TARGETS_NOT_ADMITTED));
    }
    if !joining.is_empty() {
        match members {
            MembersState::NotConverged(why) => problems.push(why.clone()),
            _ => problems.push(format!("waiting for {} to become active", list(&joining))),
        }
        reason = reason.or(Some(r::TARGETS_PROGRESSING));
    } else if let MembersState::NotConverged(why) = members {
        problems.push(format!("{why}; target states are the last known ones"));
        reason = reason.or(Some(r::MEMBERS_UNKNOWN));
    }
    (problems, reason)
}

/// The targets of a LoadBalancer realising a Service of capi-lb's class (its endpoints), as the
/// status and `TargetsReady` see them, from the desired members and what the provider has (`None`:
/// unknown).
pub fn views(desired: &[DesiredMember], members: Option<&[MemberStatus]>) -> Vec<TargetView> {
    desired
        .iter()
        .map(|d| {
            let serving = matches!(d.intent, MemberIntent::Serve(_));
            let state = match members.and_then(|m| m.iter().find(|m| m.name == d.name)) {
                Some(m) if m.state == MemberState::Active && serving => TargetState::Active,
                Some(_) if !serving => TargetState::Removing,
                None if !serving => TargetState::Removed,
                _ => TargetState::Adding,
            };
            TargetView {
                name: d.name.clone(),
                selected: true,
                wants_in: serving,
                state,
                has_address: true,
                gates_pending: Vec::new(),
                failing_probes: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(name: &str, address: Option<&str>, state: TargetState) -> TargetView {
        TargetView {
            name: name.into(),
            selected: true,
            wants_in: true,
            state,
            has_address: address.is_some(),
            gates_pending: Vec::new(),
            failing_probes: None,
        }
    }

    fn cond(targets: Vec<TargetView>) -> DesiredCondition {
        cond_with(targets, MembersState::Converged)
    }

    fn cond_with(targets: Vec<TargetView>, members: MembersState) -> DesiredCondition {
        targets_condition(
            &TargetsState::Listed { targets, members },
            "Machine.cluster.x-k8s.io",
            "a=b",
            "InternalIP, ExternalIP",
        )
    }

    #[test]
    fn targets_failing_their_probes_are_a_problem_whether_taken_out_or_all_kept() {
        let mut out = target("m2", Some("10.0.0.2"), TargetState::Unhealthy);
        out.wants_in = false;
        out.failing_probes = Some("10.0.0.2:6443: refused".into());
        let d = cond(vec![
            target("m1", Some("10.0.0.1"), TargetState::Active),
            out,
        ]);
        assert!(!d.status);
        assert_eq!(d.reason, r::TARGETS_UNHEALTHY);
        assert!(d.reason.is_problem());
        assert!(
            d.message.contains(
                "taken out after failing their health probes: m2 (10.0.0.2:6443: refused)"
            ),
            "{}",
            d.message
        );
        let mut kept = target("m1", Some("10.0.0.1"), TargetState::Active);
        kept.failing_probes = Some("refused".into());
        let d = cond(vec![kept]);
        assert_eq!(d.reason, r::TARGETS_UNHEALTHY);
        assert!(d.message.contains("none is taken out"), "{}", d.message);
    }

    #[test]
    fn targets_ready_when_every_target_is_active() {
        let d = cond(vec![
            target("m1", Some("10.0.0.1"), TargetState::Active),
            target("m2", Some("10.0.0.2"), TargetState::Active),
        ]);
        assert!(d.status);
        assert_eq!(d.reason, r::TARGETS_ACTIVE);
        assert_eq!(d.message, "2 of 2 targets active");
    }

    #[test]
    fn disabled_and_draining_targets_are_noted_not_failed() {
        let mut disabled = target("m2", Some("10.0.0.2"), TargetState::Disabled);
        disabled.wants_in = false;
        let mut leaving = target("m3", Some("10.0.0.3"), TargetState::Removing);
        leaving.selected = false;
        leaving.wants_in = false;
        let d = cond(vec![
            target("m1", Some("10.0.0.1"), TargetState::Active),
            disabled.clone(),
            leaving,
        ]);
        assert!(d.status, "{}", d.message);
        assert_eq!(
            d.message,
            "1 of 2 targets active; disabled: m2; draining: m3 (removing)"
        );
        let d = cond(vec![disabled]);
        assert_eq!((d.status, d.reason), (false, r::NO_TARGETS));
        assert!(d.message.contains("disabled: m2"), "{}", d.message);
    }

    #[test]
    fn targets_without_address_are_named() {
        let d = cond(vec![
            target("m1", Some("10.0.0.1"), TargetState::Active),
            target("m2", None, TargetState::Adding),
        ]);
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
    fn gated_and_adding_members_are_progressing() {
        let d = cond(vec![target("m1", Some("10.0.0.1"), TargetState::Adding)]);
        assert_eq!((d.status, d.reason), (false, r::TARGETS_PROGRESSING));
        assert!(d.message.contains("m1"));
        let mut gated = target("m2", Some("10.0.0.2"), TargetState::Adding);
        gated.gates_pending = vec!["APIServerPodHealthy".into()];
        let d = cond(vec![gated]);
        assert_eq!((d.status, d.reason), (false, r::TARGETS_NOT_ADMITTED));
        assert!(
            d.message.contains("m2 (APIServerPodHealthy)"),
            "{}",
            d.message
        );
        let d = cond_with(
            vec![target("m1", Some("10.0.0.1"), TargetState::Adding)],
            MembersState::NotConverged("members are added once provisioned".into()),
        );
        assert_eq!(d.reason, r::TARGETS_PROGRESSING);
        assert!(d.message.contains("once provisioned"));
        let d = cond_with(
            vec![target("m1", Some("10.0.0.1"), TargetState::Active)],
            MembersState::NotConverged("the infrastructure object is missing".into()),
        );
        assert_eq!((d.status, d.reason), (false, r::MEMBERS_UNKNOWN));
        assert!(d.message.contains("last known"), "{}", d.message);
        let d = cond_with(
            vec![target("m1", Some("10.0.0.1"), TargetState::Active)],
            MembersState::Problem {
                reason: r::PROVIDER_ERROR,
                message: "boom".into(),
            },
        );
        assert_eq!((d.status, d.reason), (false, r::PROVIDER_ERROR));
    }

    #[test]
    fn no_targets_and_unavailable_kinds() {
        let d = cond(vec![]);
        assert_eq!((d.status, d.reason), (false, r::NO_TARGETS));
        assert!(d.message.contains("a=b"));
        let d = targets_condition(
            &TargetsState::Unavailable(Unlisted::Unavailable("kind not installed".into())),
            "Machine.cluster.x-k8s.io",
            "a=b",
            "",
        );
        assert_eq!(d.reason, r::TARGET_KIND_UNAVAILABLE);
    }

    #[test]
    fn long_lists_are_shortened() {
        let names: Vec<String> = (0..15).map(|i| format!("m{i:02}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        assert!(list(&refs).ends_with("and 5 more"));
    }
}
