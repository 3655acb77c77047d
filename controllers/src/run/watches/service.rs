//! The Service controller with the watches that trigger it: every Service (the LoadBalancer ones
//! are published; capi-lb's `-ext` Services are checked for a vanished source), re-triggered by the
//! `-ext` Services, EndpointSlices and DNSEndpoints it manages, mapped to their source by the
//! `source-service` label.

use crate::run::client::watch_config;
use std::collections::BTreeMap;

use capi_lb_api::constants::{
    ENDPOINT_TYPE_EXTERNAL, LABEL_ENDPOINT_TYPE, LABEL_EXTERNAL_MANAGED_BY, LABEL_SOURCE_SERVICE,
    MANAGED_BY_VALUE,
};
use capi_lb_api::externaldns::DNSEndpoint;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::core::ApiResource;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, reflector, watcher};

use super::{api, installed, watch, watch_feeding};
use crate::cache::Caches;
use crate::run::backoff;

/// The Service controller with every watch that triggers it.
pub(in crate::run) async fn service_controller(
    client: &kube::Client,
    ns: Option<&str>,
    caches: &Caches,
) -> Controller<Service> {
    let ours = format!(
        "{LABEL_ENDPOINT_TYPE}={ENDPOINT_TYPE_EXTERNAL},{LABEL_EXTERNAL_MANAGED_BY}={MANAGED_BY_VALUE}"
    );
    // Every Service is cached (the LoadBalancer ones are published), as much as reconciles read.
    let (store, writer) = reflector::store();
    let services = reflector::reflector(
        writer,
        watcher(
            api::<Service>(client, ns),
            watch_config(watcher::Config::default()),
        )
        .backoff(backoff::for_watch())
        .modify(crate::service::cached_view),
    )
    .applied_objects();
    // Each watch backs off on its own (see `backoff`).
    let mut controller = Controller::for_stream(services, store)
        .trigger_backoff(backoff::NoBackoff)
        // The `-ext` objects are read from the caches the LoadBalancer controller's watch of
        // capi-lb's published objects fills: these watches tell them what they see first.
        .watches_stream(
            watch_feeding(
                api::<Service>(client, ns),
                watcher::Config::default().labels(&ours),
                caches.shared(&ApiResource::erase::<Service>(&())),
            ),
            move |svc: Service| to_source(svc.labels(), svc.namespace()),
        )
        .watches_stream(
            watch_feeding(
                api::<EndpointSlice>(client, ns),
                watcher::Config::default().labels(&ours),
                caches.shared(&ApiResource::erase::<EndpointSlice>(&())),
            ),
            move |slice: EndpointSlice| to_source(slice.labels(), slice.namespace()),
        );
    // The DNSEndpoints of Services' DNS names: ExternalDNS reporting what it processed.
    match installed(client, capi_lb_api::externaldns::GROUP, "DNSEndpoint").await {
        Ok(true) => {
            controller = controller.watches_stream(
                watch(
                    api::<DNSEndpoint>(client, ns),
                    watcher::Config::default().labels(&ours),
                ),
                move |endpoint: DNSEndpoint| to_source(endpoint.labels(), endpoint.namespace()),
            );
        }
        Ok(false) => {}
        Err(e) => {
            tracing::warn!(error = %e, "could not tell whether DNSEndpoints are served: not watching them")
        }
    }
    controller
}

/// The source Service of an object the Service controller made, by its `source-service` label.
fn to_source(
    labels: &BTreeMap<String, String>,
    namespace: Option<String>,
) -> Option<ObjectRef<Service>> {
    let source = labels.get(LABEL_SOURCE_SERVICE)?;
    Some(ObjectRef::<Service>::new(source).within(&namespace?))
}
