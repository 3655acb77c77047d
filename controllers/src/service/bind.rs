//! A Service of capi-lb's load-balancer class, bound to the LoadBalancer that realises it (see
//! [`crate::class`]): the Service names the LoadBalancer, and the LoadBalancer names the Service
//! (its author's consent); capi-lb writes neither.

use capi_lb_api::constants::event;
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use kube::{Resource, ResourceExt};

use super::{Reported, warn_once};
use crate::class::{self, ANNOTATION_SERVICE, ANNOTATION_SERVICE_LOAD_BALANCER_REF, realised_by};
use crate::context::{Context, Outcome};
use crate::error::{Result, kube_err};

/// A Service of capi-lb's load-balancer class: bind it to the LoadBalancer that realises it (which
/// then takes its ports and endpoints and writes its ingress), or say why it cannot be.
pub(super) async fn bind(ctx: &Context, service: &Service, reported: &Reported) -> Result<Outcome> {
    let namespace = service.namespace().unwrap_or_default();
    let name = service.name_any();
    let uid = service.uid().unwrap_or_default();
    let Some(lb_name) = realised_by(service) else {
        let message = format!(
            "Service {name} has load-balancer class {} but names no LoadBalancer: name the one that realises it (and gives the provider) with the {ANNOTATION_SERVICE_LOAD_BALANCER_REF} annotation",
            class::LOAD_BALANCER_CLASS
        );
        return not_realised(ctx, service, reported, message).await;
    };
    let lbs: Api<capi_lb_api::LoadBalancer> = Api::namespaced(ctx.client.clone(), &namespace);
    let lb = lbs.get_opt(&lb_name).await.map_err(kube_err(
        "get",
        format!("LoadBalancer {namespace}/{lb_name}"),
    ))?;
    // A LoadBalancer annotated for another Service is taken only while that Service still exists
    // and still names it.
    let taken_by = match lb
        .as_ref()
        .and_then(|lb| lb.annotations().get(ANNOTATION_SERVICE))
        .filter(|other| **other != name)
    {
        Some(other) => {
            let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
            services
                .get_opt(other)
                .await
                .map_err(kube_err("get", format!("Service {namespace}/{other}")))?
                .filter(|o| class::is_ours(o) && realised_by(o).as_ref() == Some(&lb_name))
                .map(|_| other.clone())
        }
        None => None,
    };
    let problem = match &lb {
        None => Some(format!(
            "Service {name} has load-balancer class {} and names LoadBalancer {lb_name} ({ANNOTATION_SERVICE_LOAD_BALANCER_REF}), which does not exist: create it (it gives the provider)",
            class::LOAD_BALANCER_CLASS
        )),
        Some(lb) => taken_by
            .map(|other| {
                format!(
                    "LoadBalancer {lb_name} already realises Service {other}; each Service needs its own"
                )
            })
            .or_else(|| class::will_not_realise(lb, &name)),
    };
    if let Some(message) = problem {
        return not_realised(ctx, service, reported, message).await;
    }
    // Bound: the LoadBalancer names this Service itself (its author's consent, which
    // `will_not_realise` requires). Said once a binding, as a normal Event on the Service.
    let bound = format!("realised by LoadBalancer {lb_name}");
    if reported.first_time(&uid, &bound) {
        ctx.events
            .publish(
                &service.object_ref(&()),
                false,
                event::SERVICE_BOUND,
                "Bind",
                bound,
            )
            .await;
    }
    Ok(Outcome::done())
}

/// Say once why `service` is not realised (a Warning Event), and wait for a change.
async fn not_realised(
    ctx: &Context,
    service: &Service,
    reported: &Reported,
    message: String,
) -> Result<Outcome> {
    warn_once(
        ctx,
        service,
        reported,
        event::SERVICE_NOT_REALISED,
        "Bind",
        message,
    )
    .await;
    Ok(Outcome::done())
}
