//! Typed provider errors: transient ones are retried with back-off, permanent ones need a
//! configuration change and are reported as a condition until then.

use std::time::Duration;

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
