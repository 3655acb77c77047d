//! What to say while the Service has no address: still waiting, what its implementation reported
//! (its latest Warning Event on the Service), or, after `spec.addressTimeoutSeconds`, that nothing
//! seems to implement the class.

use std::time::Duration;

use capi_lb_api::constants::CONTROLLER_NAME;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, Service};
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use super::service::Infra;
use super::{POLL, SLOW_POLL, ServiceProvider, reason};
use crate::clock::{human, until};
use crate::provider::Progress;

/// A Warning another controller reported on the Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Warning {
    /// Who reported it (`reportingComponent`, or the source component).
    pub(super) source: String,
    /// Its reason.
    pub(super) reason: String,
    /// Its message.
    pub(super) message: String,
    /// When it was last seen.
    pub(super) at: Option<Timestamp>,
}

impl ServiceProvider {
    /// The progress to report while `service` has no address.
    pub(super) async fn address_wait(&self, infra: &Infra, service: &Service) -> Progress {
        let warning = self.implementation_warning(service).await;
        waiting(infra, service, warning.as_ref(), self.clock.now())
    }

    /// The latest Warning Event on `service` that capi-lb did not write. Events are only quoted:
    /// when they cannot be listed, the wait is reported without them.
    async fn implementation_warning(&self, service: &Service) -> Option<Warning> {
        let uid = service.uid()?;
        let events: Api<Event> = Api::namespaced(
            self.client.clone(),
            &service.namespace().unwrap_or_default(),
        );
        let listed = match events
            .list(&ListParams::default().fields(&format!("involvedObject.uid={uid}")))
            .await
        {
            Ok(list) => list.items,
            Err(e) => {
                tracing::debug!(service = %service.name_any(), error = %e, "cannot list the Service's Events");
                return None;
            }
        };
        latest_warning(&uid, listed)
    }
}

/// The latest Warning in `events` about the object `uid` that capi-lb did not write.
pub(super) fn latest_warning(uid: &str, events: Vec<Event>) -> Option<Warning> {
    events
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter(|e| e.involved_object.uid.as_deref() == Some(uid))
        .map(|e| Warning {
            source: e
                .reporting_component
                .clone()
                .filter(|c| !c.is_empty())
                .or_else(|| e.source.as_ref().and_then(|s| s.component.clone()))
                .unwrap_or_else(|| "an unnamed controller".into()),
            reason: e.reason.clone().unwrap_or_default(),
            message: e.message.clone().unwrap_or_default(),
            at: e
                .last_timestamp
                .as_ref()
                .map(|t| t.0)
                .or_else(|| e.event_time.as_ref().map(|t| t.0))
                .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0)),
        })
        .filter(|w| w.source != CONTROLLER_NAME)
        .max_by_key(|w| w.at)
}

/// Waiting for an address: `AddressNotAssigned` quoting `warning` when there is one, otherwise
/// `AddressPending` until `spec.addressTimeoutSeconds` after the Service was created, then
/// `NoImplementation`.
pub(super) fn waiting(
    infra: &Infra,
    service: &Service,
    warning: Option<&Warning>,
    now: Timestamp,
) -> Progress {
    let name = service.name_any();
    let created = service
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(now);
    let waited = until(created, now);
    let timeout = Duration::from_secs(
        infra
            .spec
            .address_timeout_seconds
            .max(1)
            .unsigned_abs()
            .into(),
    );
    if let Some(w) = warning {
        return Progress::pending_because(
            reason::ADDRESS_NOT_ASSIGNED,
            format!(
                "Service {name} has had no address for {}: {} reported {}: {}",
                human(waited),
                w.source,
                w.reason,
                w.message
            ),
            POLL,
        );
    }
    if waited >= timeout {
        return Progress::pending_because(
            reason::NO_IMPLEMENTATION,
            format!(
                "nothing has given Service {}/{name} an address in {}: no controller seems to serve it as {}. Install one (MetalLB, kube-vip, a cloud controller manager) or set ServiceLoadBalancer {}'s loadBalancerClass to the class yours serves",
                infra.namespace,
                human(waited),
                infra.implementation(),
                infra.name
            ),
            SLOW_POLL,
        );
    }
    Progress::pending_because(
        reason::ADDRESS_PENDING,
        format!(
            "waiting for {} to give Service {name} an address ({} so far)",
            infra.implementation(),
            human(waited)
        ),
        POLL.min(timeout - waited),
    )
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{EventSource, ObjectReference};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use kube::core::DynamicObject;
    use serde_json::json;

    use super::*;
    use crate::lbservice::testing::identity;
    use crate::provider::Reason;

    fn infra(spec: serde_json::Value) -> Infra {
        let object = DynamicObject::new("metal", &(crate::servicelb::ENTRY.infrastructure)())
            .within("ns")
            .data(json!({ "spec": spec }));
        Infra::read(&object, &identity()).unwrap()
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn service() -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("metal-lb".into()),
                uid: Some("svc-uid".into()),
                creation_timestamp: Some(Time(at(0))),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn reason_of(progress: &Progress) -> (Option<Reason>, String, Duration) {
        match progress {
            Progress::Pending {
                reason,
                message,
                retry_after,
            } => (*reason, message.clone(), *retry_after),
            Progress::Done => panic!("done"),
        }
    }

    #[test]
    fn waiting_turns_into_no_implementation_after_the_timeout_naming_the_class() {
        let classed =
            infra(json!({"loadBalancerClass": "metallb.io/nobody", "addressTimeoutSeconds": 30}));
        let (reason, message, retry) = reason_of(&waiting(&classed, &service(), None, at(25)));
        assert_eq!(reason, Some(reason::ADDRESS_PENDING));
        assert!(
            message.contains("load-balancer class metallb.io/nobody"),
            "{message}"
        );
        // The next look is when the timeout runs out.
        assert_eq!(retry, Duration::from_secs(5));
        let (reason, message, _) = reason_of(&waiting(&classed, &service(), None, at(30)));
        assert_eq!(reason, Some(reason::NO_IMPLEMENTATION));
        assert!(
            message.contains("nothing has given Service ns/metal-lb an address in 30s")
                && message.contains("metallb.io/nobody"),
            "{message}"
        );
        let (_, message, _) = reason_of(&waiting(&infra(json!({})), &service(), None, at(130)));
        assert!(
            message.contains("Services without a loadBalancerClass"),
            "{message}"
        );
    }

    #[test]
    fn the_implementations_latest_warning_is_quoted_and_capi_lbs_own_are_not() {
        let event = |name: &str, type_: &str, component: &str, seconds: i64, uid: &str| Event {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                uid: Some(uid.into()),
                ..Default::default()
            },
            type_: Some(type_.into()),
            reason: Some(format!("{name}Reason")),
            message: Some(format!("{name} message")),
            source: Some(EventSource {
                component: Some(component.into()),
                host: None,
            }),
            last_timestamp: Some(Time(at(seconds))),
            ..Default::default()
        };
        let events = vec![
            event("Old", "Warning", "metallb-controller", 1, "svc-uid"),
            event("New", "Warning", "metallb-controller", 5, "svc-uid"),
            event("Normal", "Normal", "metallb-controller", 9, "svc-uid"),
            event("Ours", "Warning", CONTROLLER_NAME, 9, "svc-uid"),
            event("Other", "Warning", "metallb-controller", 9, "other-uid"),
        ];
        let warning = latest_warning("svc-uid", events).unwrap();
        assert_eq!(
            (
                warning.source.as_str(),
                warning.reason.as_str(),
                warning.message.as_str()
            ),
            ("metallb-controller", "NewReason", "New message")
        );
        let (reason, message, _) = reason_of(&waiting(
            &infra(json!({})),
            &service(),
            Some(&warning),
            at(7),
        ));
        assert_eq!(reason, Some(reason::ADDRESS_NOT_ASSIGNED));
        assert_eq!(
            message,
            "Service metal-lb has had no address for 7s: metallb-controller reported NewReason: New message"
        );
        assert_eq!(latest_warning("svc-uid", Vec::new()), None);
    }
}
