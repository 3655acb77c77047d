//! The controller error type. Problems a user can fix (an invalid spec, a missing infrastructure
//! object, a name conflict) are not errors: they become conditions and Events. What remains are
//! failures of the Kubernetes API itself, which are retried with back-off.

/// A reconcile failure, retried with back-off.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("{action} {object}: {source}")]
    Kube {
        /// What was attempted, e.g. `apply status of`.
        action: &'static str,
        /// The object, `Kind namespace/name`.
        object: String,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// An object could not be (de)serialized.
    #[error("serialization of {object}: {source}")]
    Serialization {
        /// The object.
        object: String,
        /// The error.
        #[source]
        source: serde_json::Error,
    },
    /// An object lacks a field the API always sets (name, namespace, uid).
    #[error("{0} has no {1}")]
    MissingField(String, &'static str),
    /// The reconcile of an object took longer than `--reconcile-timeout-seconds` (its own API
    /// server not answering, say): abandoned, its work slot given back, retried with back-off and
    /// reported (`ReconcileTimedOut`).
    #[error("reconcile of {object} abandoned after {after:?}")]
    TimedOut {
        /// The object, `Kind namespace/name`.
        object: String,
        /// The deadline that passed.
        after: std::time::Duration,
    },
    /// The reconcile of an object panicked (a bug): caught at its boundary
    /// ([`crate::boundary`]), reported as `InternalError` and retried with back-off, for this
    /// object alone.
    #[error("reconcile of {object} {panic}")]
    Panicked {
        /// The object.
        object: String,
        /// What the panic said.
        panic: crate::boundary::Panicked,
    },
}

/// Result alias of the controllers.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Wrap a kube error with what was being done to which object.
pub fn kube_err(
    action: &'static str,
    object: impl Into<String>,
) -> impl FnOnce(kube::Error) -> Error {
    let object = object.into();
    move |source| Error::Kube {
        action,
        object,
        source: Box::new(source),
    }
}

/// True when the API answered 404 Not Found (the object, or its kind, does not exist).
pub fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}

/// True when the API answered 409 Conflict (the object changed since the version a write names).
pub fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 409)
}
