//! metav1-style conditions: the reasons capi-lb and its providers report, each with its severity,
//! and building a condition list from the desired state of each condition type, keeping
//! `lastTransitionTime` when a condition's status did not change, so that re-computing the same
//! conditions yields an identical list (and therefore no write).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// How serious a condition reason is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Severity {
    /// Progress, success or a normal wait (a load balancer provisioning, an address not assigned
    /// yet).
    Normal,
    /// Something someone has to act on (an invalid spec, credentials refused, a quota, a missing
    /// object): a condition that turns False with it comes with a Warning Event.
    Problem,
}

/// A condition reason with its severity. Every reason is declared once as a constant of this type
/// (capi-lb's in [`crate::constants::reason`], each provider's in its own `reason` module), so the
/// severity cannot be forgotten: there is no list of problems to keep in step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reason {
    /// The CamelCase reason, e.g. `EIpNotReady`.
    pub name: &'static str,
    /// Normal or problem.
    pub severity: Severity,
}

impl Reason {
    /// A reason for progress, success or a normal wait.
    pub const fn normal(name: &'static str) -> Self {
        Self {
            name,
            severity: Severity::Normal,
        }
    }

    /// A reason for a problem someone has to act on.
    pub const fn problem(name: &'static str) -> Self {
        Self {
            name,
            severity: Severity::Problem,
        }
    }

    /// True for [`Severity::Problem`].
    pub fn is_problem(self) -> bool {
        self.severity == Severity::Problem
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// The desired state of one condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredCondition {
    /// Condition type, e.g. `Ready`.
    pub type_: &'static str,
    /// True or False.
    pub status: bool,
    /// The reason, with its severity.
    pub reason: Reason,
    /// Human-readable message.
    pub message: String,
}

impl DesiredCondition {
    /// A True condition.
    pub fn true_(type_: &'static str, reason: Reason, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: true,
            reason,
            message: message.into(),
        }
    }

    /// A False condition.
    pub fn false_(type_: &'static str, reason: Reason, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: false,
            reason,
            message: message.into(),
        }
    }

    /// Whether the condition reports a problem someone has to act on: False with a reason of
    /// [`Severity::Problem`]. A Warning Event goes with it.
    pub fn is_warning(&self) -> bool {
        !self.status && self.reason.is_problem()
    }
}

/// `"True"` / `"False"`.
pub fn status_str(status: bool) -> &'static str {
    if status { "True" } else { "False" }
}

/// Merge `desired` into `existing`: conditions of the desired types are set (in the desired order),
/// keeping `lastTransitionTime` of an existing condition whose status is unchanged; conditions of
/// other types (set by someone else) are kept after them unchanged.
pub fn merge_conditions(
    existing: &[Condition],
    desired: &[DesiredCondition],
    observed_generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    let mut out: Vec<Condition> = desired
        .iter()
        .map(|d| {
            let status = status_str(d.status).to_string();
            let last_transition_time = existing
                .iter()
                .find(|c| c.type_ == d.type_ && c.status == status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            Condition {
                type_: d.type_.to_string(),
                status,
                reason: d.reason.name.to_string(),
                message: d.message.clone(),
                observed_generation,
                last_transition_time,
            }
        })
        .collect();
    out.extend(
        existing
            .iter()
            .filter(|c| !desired.iter().any(|d| d.type_ == c.type_))
            .cloned(),
    );
    out
}

/// Find a condition by type.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// True when the condition of this type exists and is `"True"`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    #[test]
    fn keeps_transition_time_when_status_unchanged() {
        let t0 = time("2026-01-01T00:00:00Z");
        let t1 = time("2026-01-01T00:01:00Z");
        let first = merge_conditions(
            &[],
            &[DesiredCondition::false_(
                "Ready",
                Reason::normal("NotReady"),
                "waiting",
            )],
            Some(1),
            &t0,
        );
        let second = merge_conditions(
            &first,
            &[DesiredCondition::false_(
                "Ready",
                Reason::normal("Provisioning"),
                "still waiting",
            )],
            Some(2),
            &t1,
        );
        assert_eq!(second[0].last_transition_time, t0);
        assert_eq!(second[0].reason, "Provisioning");
        assert_eq!(second[0].observed_generation, Some(2));
        let third = merge_conditions(
            &second,
            &[DesiredCondition::true_(
                "Ready",
                Reason::normal("Ready"),
                "",
            )],
            Some(2),
            &t1,
        );
        assert_eq!(third[0].last_transition_time, t1);
        assert_eq!(third[0].status, "True");
    }

    #[test]
    fn recomputing_the_same_conditions_is_identical() {
        let t0 = time("2026-01-01T00:00:00Z");
        let t1 = time("2026-01-01T00:05:00Z");
        let desired = [
            DesiredCondition::true_("Ready", Reason::normal("Ready"), "ok"),
            DesiredCondition::false_("Paused", Reason::normal("NotPaused"), ""),
        ];
        let first = merge_conditions(&[], &desired, Some(3), &t0);
        let again = merge_conditions(&first, &desired, Some(3), &t1);
        assert_eq!(first, again);
    }

    #[test]
    fn foreign_conditions_are_kept() {
        let t0 = time("2026-01-01T00:00:00Z");
        let foreign = Condition {
            type_: "SomethingElse".into(),
            status: "True".into(),
            reason: "X".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: t0.clone(),
        };
        let out = merge_conditions(
            std::slice::from_ref(&foreign),
            &[DesiredCondition::true_(
                "Ready",
                Reason::normal("Ready"),
                "",
            )],
            None,
            &t0,
        );
        assert_eq!(out.len(), 2);
        assert_eq!(out[1], foreign);
    }
}
