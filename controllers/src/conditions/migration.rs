//! The `InfrastructureMigration` condition: how a change of `spec.infrastructureRef` stands
//! (make before break: bring the new load balancer up, switch, drain, delete the old one; or
//! cancel).

use capi_lb_api::conditions::{DesiredCondition, Reason};
use capi_lb_api::constants::{condition as c, reason as r};
use capi_lb_api::loadbalancer::InfrastructureRef;
use jiff::Timestamp;

/// Where a migration from `from` to `to` stands.
#[derive(Clone, Debug, PartialEq)]
pub enum Migration<'a> {
    /// `to` is being brought up while `from` serves; `message` says what is awaited.
    BringingUp {
        from: &'a InfrastructureRef,
        to: &'a InfrastructureRef,
        message: String,
    },
    /// `to` cannot be brought up (`reason`, `message`); `from` keeps serving.
    CannotBringUp {
        from: &'a InfrastructureRef,
        to: &'a InfrastructureRef,
        reason: Reason,
        message: String,
    },
    /// Switched to `to`; `from` drains until `until`, then it is deleted.
    Draining {
        from: &'a InfrastructureRef,
        to: &'a InfrastructureRef,
        until: Timestamp,
    },
    /// Switched to `to`; `from` is being deleted (`message`).
    Deleting {
        from: &'a InfrastructureRef,
        to: &'a InfrastructureRef,
        message: String,
    },
    /// Switched to `to`, but `from` cannot be deleted (`reason`, `message`).
    CannotDelete {
        from: &'a InfrastructureRef,
        to: &'a InfrastructureRef,
        reason: Reason,
        message: String,
    },
    /// Done: `from` is deleted.
    Complete {
        from: &'a InfrastructureRef,
        to: &'a InfrastructureRef,
    },
    /// The half-built `to` is being released (`message`): the spec went back before the switch.
    Cancelling {
        to: &'a InfrastructureRef,
        message: String,
    },
    /// The half-built `to` was released.
    Cancelled { to: &'a InfrastructureRef },
    /// The half-built `to` cannot be released (`reason`, `message`).
    CannotCancel {
        to: &'a InfrastructureRef,
        reason: Reason,
        message: String,
    },
}

/// The `InfrastructureMigration` condition: True while a migration is under way.
pub fn migration_condition(migration: &Migration<'_>) -> DesiredCondition {
    let under_way = |reason, message: String| {
        DesiredCondition::true_(c::INFRASTRUCTURE_MIGRATION, reason, message)
    };
    match migration {
        Migration::BringingUp { from, to, message } => under_way(
            r::MIGRATION_PROVISIONING,
            format!("bringing up {to} while {from} serves: {message}"),
        ),
        Migration::CannotBringUp {
            from,
            to,
            reason,
            message,
        } => under_way(
            r::MIGRATION_BLOCKED,
            format!("{to} cannot be brought up ({reason}): {message}; {from} keeps serving"),
        ),
        Migration::Draining { from, to, until } => under_way(
            r::MIGRATION_DRAINING,
            format!(
                "switched to {to}; {from} keeps serving existing connections until {until}, then it is deleted"
            ),
        ),
        Migration::Deleting { from, to, message } => under_way(
            r::MIGRATION_DRAINING,
            format!("switched to {to}; deleting {from}: {message}"),
        ),
        Migration::CannotDelete {
            from,
            to,
            reason,
            message,
        } => under_way(
            r::MIGRATION_BLOCKED,
            format!("switched to {to}, but {from} cannot be deleted ({reason}): {message}"),
        ),
        Migration::Complete { from, to } => DesiredCondition::false_(
            c::INFRASTRUCTURE_MIGRATION,
            r::MIGRATION_COMPLETE,
            format!("migrated from {from} to {to}"),
        ),
        Migration::Cancelling { to, message } => under_way(
            r::MIGRATION_CANCELLED,
            format!("cancelling the migration to {to}: {message}"),
        ),
        Migration::Cancelled { to } => DesiredCondition::false_(
            c::INFRASTRUCTURE_MIGRATION,
            r::MIGRATION_CANCELLED,
            format!("the migration to {to} was cancelled; its load balancer was deleted"),
        ),
        Migration::CannotCancel {
            to,
            reason,
            message,
        } => under_way(
            r::MIGRATION_BLOCKED,
            format!("cannot release {to} ({reason}): {message}"),
        ),
    }
}
