//! The `-ext` endpoint of a Service of another class than capi-lb's: published, updated or
//! withdrawn through [`crate::publication`], told with Events on the Service, and its DNS name
//! written back onto it.

use std::sync::Arc;

use capi_lb_api::constants::{ANNOTATION_EXTERNAL_ENDPOINT_DNS_NAME, event};
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use kube::{Resource, ResourceExt};

use super::decide::{Decision, decide, publisher};
use super::{Reported, annotate, warn_once};
use crate::context::{Context, Outcome};
use crate::error::Result;
use crate::publication::{self, Desired, Published};

/// The `-ext` endpoint of a Service of another class than capi-lb's.
pub(super) async fn publish(
    ctx: &Arc<Context>,
    service: &Arc<Service>,
    reported: &Reported,
) -> Result<Outcome> {
    let config = &ctx.config.external;
    let namespace = service.namespace().unwrap_or_default();
    let name = service.name_any();
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    let desired = match decide(service, config) {
        Decision::Ignore => return Ok(Outcome::done()),
        Decision::Invalid(message) => {
            warn_once(
                ctx,
                service,
                reported,
                event::INVALID_EXTERNAL_ENDPOINT,
                "Publish",
                message,
            )
            .await;
            // Only a change of the Service can help.
            return Ok(Outcome::until_changed());
        }
        Decision::Withdraw(why) => Err(why),
        Decision::Publish(desired) => Ok(desired),
    };
    let Some(owner) = publication::controller_ref(service.as_ref()) else {
        return Ok(Outcome::done());
    };
    let publisher = publisher(&namespace, &name, owner, config);
    let report = publication::publish(ctx, &publisher, desired.as_ref().ok()).await?;
    let dns_name = announce(ctx, service, reported, &report, &desired).await;
    annotate(
        &services,
        service,
        ANNOTATION_EXTERNAL_ENDPOINT_DNS_NAME,
        dns_name,
    )
    .await?;
    Ok(Outcome::done())
}

/// Tell with Events on the source `service` what publishing (`desired`, or withdrawing for the
/// reason given) did: an adoption, then a conflict (once), the publication or the withdrawal.
/// Returns the DNS name the source should carry.
async fn announce(
    ctx: &Context,
    service: &Service,
    reported: &Reported,
    report: &publication::Report,
    desired: &std::result::Result<Desired, String>,
) -> Option<String> {
    let reference = service.object_ref(&());
    if !report.adopted.is_empty() {
        ctx.events
            .publish(
                &reference,
                false,
                event::EXTERNAL_ENDPOINT_ADOPTED,
                "Publish",
                format!(
                    "took over from kube-dc's publisher: {}",
                    report.adopted.join(", ")
                ),
            )
            .await;
    }
    let uid = service.uid().unwrap_or_default();
    let namespace = service.namespace().unwrap_or_default();
    let changes = (!report.changes.is_empty()).then(|| report.changes.join("; "));
    let (note, dns_name) = match (&report.state, desired) {
        (Published::Conflict { message }, _) => (
            reported
                .first_time(&uid, message)
                .then(|| (true, event::EXTERNAL_ENDPOINT_CONFLICT, message.clone())),
            None,
        ),
        (_, Ok(desired)) => {
            reported.clear(&uid);
            (
                changes.map(|c| (false, event::EXTERNAL_ENDPOINT_PUBLISHED, c)),
                Some(format!(
                    "{}.{namespace}.svc.{}",
                    desired.service_name, ctx.config.cluster_domain
                )),
            )
        }
        (_, Err(why)) => {
            reported.clear(&uid);
            (
                changes.map(|c| {
                    (
                        false,
                        event::EXTERNAL_ENDPOINT_WITHDRAWN,
                        format!("{why}: {c}"),
                    )
                }),
                None,
            )
        }
    };
    if let Some((warning, reason, message)) = note {
        ctx.events
            .publish(&reference, warning, reason, "Publish", message)
            .await;
    }
    dns_name
}
