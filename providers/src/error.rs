//! Typed provider errors: transient ones are retried with back-off, permanent ones need a
//! configuration change and are reported as a condition until then.

use std::time::Duration;

use capi_lb_api::validation::{Validated, parse};
use kube::core::DynamicObject;

/// A provider failure.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The cloud or API failed in a way a retry can fix (timeout, 5xx, "busy, retry", quota that
    /// frees up). Retried with back-off, or after `retry_after` when the provider knows better.
    #[error("{message}")]
    Transient {
        /// What failed, for conditions and Events.
        message: String,
        /// Provider's hint for the next attempt.
        retry_after: Option<Duration>,
    },
    /// The provider did not answer within the deadline every provider call has (a cloud or a
    /// remote cluster that accepts a connection and never answers): retried with back-off, and
    /// reported with its own reason, so one tenant's hanging endpoint neither holds a reconcile
    /// slot for long nor looks like another failure.
    #[error("{message}")]
    TimedOut {
        /// What got no answer, and within what time.
        message: String,
    },
    /// The configuration is wrong and retrying will not help (invalid infrastructure spec, unknown
    /// flavor, no credentials). Reported until the LoadBalancer or infrastructure object changes.
    #[error("{message}")]
    Permanent {
        /// CamelCase reason for conditions and Events, e.g. `InvalidConfiguration`.
        reason: String,
        /// What to change.
        message: String,
    },
}

impl ProviderError {
    /// A transient error without a retry hint.
    pub fn transient(message: impl Into<String>) -> Self {
        ProviderError::Transient {
            message: message.into(),
            retry_after: None,
        }
    }

    /// A permanent error.
    pub fn permanent(reason: impl Into<String>, message: impl Into<String>) -> Self {
        ProviderError::Permanent {
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// Reason of a permanent error caused by an invalid infrastructure object.
pub const INVALID_CONFIGURATION: &str = "InvalidConfiguration";

/// The infrastructure object `infra` as its kind `K`, with the CRD's defaults applied and checked
/// against its schema and CEL rules as the apiserver would. An invalid one is a permanent
/// [`INVALID_CONFIGURATION`] error naming the object and the field.
pub fn read_infrastructure<K: Validated>(infra: &DynamicObject) -> Result<K, ProviderError> {
    let invalid = |e: &dyn std::fmt::Display| {
        ProviderError::permanent(
            INVALID_CONFIGURATION,
            format!(
                "{} {} is invalid: {e}",
                K::crd().spec.names.kind,
                infra.metadata.name.as_deref().unwrap_or_default()
            ),
        )
    };
    let value = serde_json::to_value(infra).map_err(|e| invalid(&e))?;
    parse::<K>(&value).map_err(|e| invalid(&e))
}
