//! The DNS names of a Service of type LoadBalancer (any class) through ExternalDNS, with the
//! [`crate::publication::dns`] library.

use capi_lb_api::constants::{ANNOTATION_DNS_ENDPOINT, event, reason};
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use kube::{Resource, ResourceExt};

use super::decide::{dns_endpoint_name, dns_wanted, ingress_addresses, labels};
use super::{Reported, annotate};
use crate::conditions::dns_condition;
use crate::context::Context;
use crate::error::Result;
use crate::publication::{self, dns};

/// What [`Reported`] holds for a Service whose `DNSEndpoint` ExternalDNS has not taken yet.
const WAITING_FOR_EXTERNAL_DNS: &str = "waiting for ExternalDNS";

/// DNS names of a Service of type LoadBalancer (any class) through ExternalDNS: its
/// `DNSEndpoint` follows the Service's ingress; problems and ExternalDNS taking the records are
/// told with Events on the Service; the `DNSEndpoint`'s name is written onto it
/// ([`ANNOTATION_DNS_ENDPOINT`]), which is also how a Service that no longer asks is known to
/// have one to remove without an API call for every other Service.
pub(super) async fn publish(ctx: &Context, service: &Service, reported: &Reported) -> Result<()> {
    let marker = service.annotations().get(ANNOTATION_DNS_ENDPOINT).cloned();
    let uid = service.uid().unwrap_or_default();
    let key = format!("{uid}/dns");
    let wanted = match dns_wanted(service) {
        Ok(wanted) => wanted,
        Err(message) => {
            if reported.first_time(&key, &message) {
                ctx.events
                    .publish(
                        &service.object_ref(&()),
                        true,
                        reason::INVALID_HOSTNAME.name,
                        "PublishDNS",
                        message,
                    )
                    .await;
            }
            return Ok(());
        }
    };
    if wanted.is_none() && marker.is_none() {
        return Ok(());
    }
    let Some(reference) = publication::controller_ref(service) else {
        return Ok(());
    };
    let namespace = service.namespace().unwrap_or_default();
    // The same name policy as a LoadBalancer's `spec.dns`.
    let wanted = wanted.map(|mut wanted| {
        wanted.refused = ctx
            .facts
            .refused_names(&ctx.config.names, &wanted.names, &namespace);
        wanted
            .names
            .retain(|n| !wanted.refused.iter().any(|(refused, _)| refused == n));
        wanted
    });
    let source = service.name_any();
    let owner = |name: String| dns::Owner {
        namespace: namespace.clone(),
        name,
        describe: format!("Service {source}"),
        reference: reference.clone(),
        labels: labels(&source),
    };
    let current = owner(dns_endpoint_name(service, &ctx.config.external));
    let mut changes = Vec::new();
    if let Some(old) = marker.as_ref().filter(|m| **m != current.name) {
        // Another suffix: the old one goes.
        changes.extend(
            dns::publish(
                &ctx.client,
                &ctx.caches,
                &owner(old.clone()),
                None,
                &[],
                false,
            )
            .await?
            .changes,
        );
    }
    let published = dns::publish(
        &ctx.client,
        &ctx.caches,
        &current,
        wanted.as_ref(),
        &ingress_addresses(service),
        false,
    )
    .await?;
    changes.extend(published.changes);
    let reference = service.object_ref(&());
    if !changes.is_empty() {
        ctx.events
            .publish(
                &reference,
                false,
                event::DNS_ENDPOINT_CHANGED,
                "PublishDNS",
                changes.join("; "),
            )
            .await;
    }
    // Told as a LoadBalancer's DNSPublished condition would tell it.
    match published.state.as_ref().map(dns_condition) {
        // Taken by ExternalDNS: told once it was seen waiting for it (so a restart, which finds
        // everything observed, writes no Event).
        Some(c) if c.status => {
            let was_waiting = reported.get(&key).as_deref() == Some(WAITING_FOR_EXTERNAL_DNS);
            if reported.first_time(&key, &c.message) && was_waiting {
                ctx.events
                    .publish(&reference, false, c.reason.name, "PublishDNS", c.message)
                    .await;
            }
        }
        Some(c) if c.is_warning() => {
            if reported.first_time(&key, &c.message) {
                ctx.events
                    .publish(&reference, true, c.reason.name, "PublishDNS", c.message)
                    .await;
            }
        }
        Some(_) => {
            reported.first_time(&key, WAITING_FOR_EXTERNAL_DNS);
        }
        None => reported.clear(&key),
    }
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    annotate(
        &services,
        service,
        ANNOTATION_DNS_ENDPOINT,
        published.exists.then_some(current.name),
    )
    .await
}
