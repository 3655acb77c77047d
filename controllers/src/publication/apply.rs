//! One application of a [`Plan`] by [`super::publish`]: the Service, its EndpointSlices and the
//! legacy Endpoints, each written only when it differs from the plan, an adoptable foreign object
//! taken over, and a foreign one in the way left untouched (a conflict).

use std::ops::ControlFlow;

use capi_lb_api::constants::{
    ANNOTATION_LEGACY_ENDPOINTS, FIELD_MANAGER, KUBE_DC_LABEL_MANAGED_BY,
};
use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::plan::{
    addresses_of, adoptable, is_our_endpoints, is_our_service, is_our_slice, ports_key,
    service_kind,
};
use super::{
    Plan, Published, Publisher, Report, controller_ref, delete_exact, endpoints_match, gone,
    has_legacy_marker, prune_endpoints, prune_slices, replace_ports, service_cache,
    service_matches, slice_cache, slice_matches, slices_of, wrote,
};
use crate::cache::Caches;
use crate::context::Context;
use crate::error::{Result, kube_err};
use crate::metadata::patch_params;

/// One application of a [`Plan`] by [`publish`]: where it writes and what it has done so far.
pub(super) struct Publication<'a> {
    client: &'a kube::Client,
    caches: &'a Caches,
    publisher: &'a Publisher,
    /// The planned Service's name.
    name: &'a str,
    services: Api<Service>,
    slices: Api<EndpointSlice>,
    /// Server-side apply as capi-lb, taking fields over from other managers.
    apply: PatchParams,
    changes: Vec<String>,
    adopted: Vec<String>,
    /// The Service in the way is kube-dc's `-ext` publisher's (it overwrites any `<svc>-ext`).
    kube_dc_in_the_way: bool,
}

/// The result of a step of a [`Publication`]: go on, or stop because the object described is in
/// the way (someone else's, not adoptable).
type Step<T = ()> = ControlFlow<String, T>;

impl<'a> Publication<'a> {
    /// A publication of Service `name` for `publisher`, after the `changes` made so far.
    pub(super) fn new(
        ctx: &'a Context,
        publisher: &'a Publisher,
        name: &'a str,
        changes: Vec<String>,
    ) -> Self {
        let client = &ctx.client;
        Self {
            client,
            caches: &ctx.caches,
            publisher,
            name,
            services: Api::namespaced(client.clone(), &publisher.namespace),
            slices: Api::namespaced(client.clone(), &publisher.namespace),
            apply: PatchParams::apply(FIELD_MANAGER).force(),
            changes,
            adopted: Vec::new(),
            kube_dc_in_the_way: false,
        }
    }

    /// Apply `plan`: the Service (`ours`: the one [`withdraw_except`] kept), its slices, its legacy
    /// Endpoints, in that order, stopping at the first object in the way.
    pub(super) async fn run(mut self, plan: Plan, ours: Option<Service>) -> Result<Report> {
        let observed = self.observe_service(ours).await?;
        let had_legacy = observed.as_ref().is_some_and(has_legacy_marker);
        let (observed, adopting) = match self.adopt_service(observed).await? {
            ControlFlow::Continue(found) => found,
            ControlFlow::Break(what) => {
                // Someone else's Service has the name (kube-dc's publisher overwrites any
                // `<svc>-ext`, ours included): our slices and Endpoints would feed its DNS, and
                // would go stale, so they go, once; its objects are left alone.
                self.withdraw_feeds().await?;
                return Ok(self.conflict(&what));
            }
        };
        let service = self
            .converge_service(observed, &plan.service, adopting)
            .await?;
        if let ControlFlow::Break(what) = self.converge_slices(&service, plan.slices).await? {
            return Ok(self.conflict(&what));
        }
        self.converge_legacy(&service, plan.endpoints, had_legacy || adopting)
            .await?;
        Ok(self.report(plan.has_address, plan.skipped))
    }

    /// How the planned Service is named in messages.
    fn describe_service(&self) -> String {
        format!("Service {}/{}", self.publisher.namespace, self.name)
    }

    /// The Service: ours was in the list; otherwise look for one someone else made.
    async fn observe_service(&self, ours: Option<Service>) -> Result<Option<Service>> {
        match ours {
            Some(service) => Ok(Some(service)),
            None => self
                .services
                .get_opt(self.name)
                .await
                .map_err(kube_err("get", self.describe_service())),
        }
    }

    /// Take `observed` over when it is someone else's and the publisher may adopt it (the flag:
    /// adopted); stop when it may not.
    async fn adopt_service(
        &mut self,
        observed: Option<Service>,
    ) -> Result<Step<(Option<Service>, bool)>> {
        match observed {
            Some(existing) if !is_our_service(&existing, self.publisher) => {
                self.kube_dc_in_the_way = existing.labels().contains_key(KUBE_DC_LABEL_MANAGED_BY);
                if !adoptable(&existing.metadata, self.publisher) {
                    return Ok(ControlFlow::Break(self.describe_service()));
                }
                let stripped =
                    strip_adopt_labels(&self.services, &existing, self.publisher).await?;
                wrote(service_cache(self.caches), &stripped);
                self.adopted.push(format!("Service {}", self.name));
                Ok(ControlFlow::Continue((Some(stripped), true)))
            }
            observed => Ok(ControlFlow::Continue((observed, false))),
        }
    }

    /// Bring the Service in line with `desired` (rewritten when `adopting`, even if it matches);
    /// returns it as it now is.
    async fn converge_service(
        &mut self,
        observed: Option<Service>,
        desired: &Service,
        adopting: bool,
    ) -> Result<Service> {
        match observed {
            Some(existing) if !adopting && service_matches(&existing, desired) => Ok(existing),
            Some(existing) => self.update_service(&existing, desired, adopting).await,
            None => {
                let applied = self.apply_service(desired).await?;
                self.changes.push(format!("created Service {}", self.name));
                Ok(applied)
            }
        }
    }

    /// Change the `existing` Service into `desired`: recreate it when its kind changes, replace its
    /// ports when they differ, and apply the rest unless the ports were all that differed.
    async fn update_service(
        &mut self,
        existing: &Service,
        desired: &Service,
        adopting: bool,
    ) -> Result<Service> {
        let mut replaced = None;
        if service_kind(existing) != service_kind(desired) {
            // ClusterIP <-> ExternalName cannot be changed in place cleanly: recreate.
            delete_exact(&self.services, existing, &self.describe_service()).await?;
            gone(service_cache(self.caches), existing);
        } else if ports_key(existing) != ports_key(desired) {
            // Ports edited by someone else belong to their field manager: an apply would
            // keep them beside ours (or be refused as a duplicate name). Ours is the whole
            // list, so it is replaced outright, guarded by the version read.
            let service =
                replace_ports(&self.services, existing, desired, &self.describe_service()).await?;
            wrote(service_cache(self.caches), &service);
            replaced = Some(service);
        }
        self.changes.push(format!("updated Service {}", self.name));
        match replaced {
            // The ports were all that differed: one write.
            Some(service) if !adopting && service_matches(&service, desired) => Ok(service),
            _ => self.apply_service(desired).await,
        }
    }

    /// Server-side apply the planned Service.
    async fn apply_service(&self, desired: &Service) -> Result<Service> {
        let applied = self
            .services
            .patch(self.name, &self.apply, &Patch::Apply(desired))
            .await
            .map_err(kube_err("apply", self.describe_service()))?;
        wrote(service_cache(self.caches), &applied);
        Ok(applied)
    }

    /// The EndpointSlices, owned by `service`: apply each planned one that differs, then remove
    /// ours that are no longer planned. Stops at a slice that is someone else's.
    async fn converge_slices(
        &mut self,
        service: &Service,
        planned: Vec<EndpointSlice>,
    ) -> Result<Step> {
        let owner = controller_ref(service);
        let listed = slices_of(
            self.caches,
            &self.slices,
            &self.publisher.namespace,
            self.name,
        )
        .await?;
        let mut keep = Vec::new();
        for mut desired in planned {
            desired.metadata.owner_references = owner.clone().map(|r| vec![r]);
            let name = desired.name_any();
            if let ControlFlow::Break(what) = self.converge_slice(&listed, desired).await? {
                return Ok(ControlFlow::Break(what));
            }
            keep.push(name);
        }
        prune_slices(
            self.caches,
            &self.slices,
            &listed,
            self.publisher,
            &keep,
            &mut self.changes,
        )
        .await?;
        Ok(ControlFlow::Continue(()))
    }

    /// Apply the planned slice `desired` unless the one there (in `listed`, or else looked up)
    /// matches it; stop when that one is someone else's.
    async fn converge_slice(
        &mut self,
        listed: &[EndpointSlice],
        desired: EndpointSlice,
    ) -> Result<Step> {
        let name = desired.name_any();
        let describe = format!("EndpointSlice {}/{name}", self.publisher.namespace);
        // A slice with our name but not our labels is not in the list: look it up.
        let observed = match listed.iter().find(|s| s.name_any() == name) {
            Some(found) => Some(found.clone()),
            None => self
                .slices
                .get_opt(&name)
                .await
                .map_err(kube_err("get", describe.clone()))?,
        };
        match observed {
            Some(existing) if !is_our_slice(&existing, self.publisher) => {
                return Ok(ControlFlow::Break(describe));
            }
            Some(existing) if slice_matches(&existing, &desired) => {}
            existing => {
                let applied = self
                    .slices
                    .patch(&name, &self.apply, &Patch::Apply(&desired))
                    .await
                    .map_err(kube_err("apply", describe))?;
                wrote(slice_cache(self.caches), &applied);
                self.changes.push(match existing {
                    Some(old) => format!(
                        "updated EndpointSlice {name}: {} -> {}",
                        addresses_of(&old),
                        addresses_of(&desired)
                    ),
                    None => format!(
                        "created EndpointSlice {name} with {}",
                        addresses_of(&desired)
                    ),
                });
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Legacy Endpoints (after the slices, so DNS never goes empty during an adoption). Looked at
    /// only when wanted or when some may exist (`may_exist`: we wrote them before, the Service
    /// carries a marker set before they are written and removed after they are gone, or we are
    /// adopting).
    async fn converge_legacy(
        &mut self,
        service: &Service,
        desired: Option<Endpoints>,
        may_exist: bool,
    ) -> Result<()> {
        let wanted = self.publisher.legacy_endpoints;
        let marked = has_legacy_marker(service);
        let namespace = &self.publisher.namespace;
        if wanted && !marked {
            let marked = mark_legacy(&self.services, namespace, self.name, true).await?;
            wrote(service_cache(self.caches), &marked);
        }
        if wanted || may_exist {
            endpoints(
                self.client,
                self.publisher,
                service,
                self.name,
                desired,
                &mut self.changes,
                &mut self.adopted,
            )
            .await?;
        }
        if !wanted && marked {
            let unmarked = mark_legacy(&self.services, namespace, self.name, false).await?;
            wrote(service_cache(self.caches), &unmarked);
        }
        Ok(())
    }

    /// Remove our slices and legacy Endpoints named for the planned Service, which is not ours.
    async fn withdraw_feeds(&mut self) -> Result<()> {
        let listed = slices_of(
            self.caches,
            &self.slices,
            &self.publisher.namespace,
            self.name,
        )
        .await?;
        prune_slices(
            self.caches,
            &self.slices,
            &listed,
            self.publisher,
            &[],
            &mut self.changes,
        )
        .await?;
        if self.publisher.legacy_endpoints {
            prune_endpoints(self.client, self.publisher, self.name, &mut self.changes).await?;
        }
        Ok(())
    }

    /// The report when `what` is in the way: nothing of it was touched.
    fn conflict(self, what: &str) -> Report {
        let message = if self.kube_dc_in_the_way {
            format!(
                "{what} belongs to kube-dc's own -ext publisher ({KUBE_DC_LABEL_MANAGED_BY}), which publishes every Service of type LoadBalancer and overwrites any existing <svc>-ext: it is left to kube-dc, and capi-lb publishes nothing for {}. On a kube-dc cluster run capi-lb with --external-endpoints-policy=annotated (or --external-endpoints=false), or turn kube-dc's publisher off and take its objects over with --adopt-kube-dc",
                self.publisher.describe
            )
        } else {
            format!(
                "{what} already exists and is not managed by capi-lb for {}; it was left untouched. {}",
                self.publisher.describe, self.publisher.conflict_hint
            )
        };
        Report {
            state: Published::Conflict { message },
            changes: self.changes,
            adopted: self.adopted,
        }
    }

    /// The report when everything planned was applied.
    fn report(self, has_address: bool, skipped: Vec<String>) -> Report {
        let service = self.name.to_string();
        let state = if has_address {
            Published::Published { service, skipped }
        } else {
            Published::WaitingForAddress { service, skipped }
        };
        Report {
            state,
            changes: self.changes,
            adopted: self.adopted,
        }
    }
}

/// Take a foreign object over: drop the labels that marked it as the other publisher's (so that
/// publisher, if still running, sees it as not its own), keeping everything else.
async fn strip_adopt_labels<K>(api: &Api<K>, obj: &K, publisher: &Publisher) -> Result<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let labels: serde_json::Map<String, serde_json::Value> = publisher
        .adopt
        .iter()
        .flatten()
        .map(|(k, _)| (k.clone(), serde_json::Value::Null))
        .collect();
    api.patch(
        &obj.name_any(),
        &patch_params(),
        &Patch::Merge(json!({"metadata": {"labels": labels}})),
    )
    .await
    .map_err(kube_err("adopt", obj.name_any()))
}

/// Set or remove the marker annotation that says legacy Endpoints exist for Service `name` (a merge
/// patch: it must go when they go, which an apply of a plan without it would not guarantee).
async fn mark_legacy(
    services: &Api<Service>,
    namespace: &str,
    name: &str,
    on: bool,
) -> Result<Service> {
    let value = on.then_some("true");
    services
        .patch(
            name,
            &patch_params(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {ANNOTATION_LEGACY_ENDPOINTS: value}}}),
            ),
        )
        .await
        .map_err(kube_err("annotate", format!("Service {namespace}/{name}")))
}

/// Converge the legacy Endpoints named `name`: apply `desired` (owned by `service`), or remove ours
/// (and an adoptable foreign one: it is replaced by the slices) when there is none.
async fn endpoints(
    client: &kube::Client,
    publisher: &Publisher,
    service: &Service,
    name: &str,
    desired: Option<Endpoints>,
    changes: &mut Vec<String>,
    adopted: &mut Vec<String>,
) -> Result<()> {
    let api: Api<Endpoints> = Api::namespaced(client.clone(), &publisher.namespace);
    let observed = api.get_opt(name).await.map_err(kube_err(
        "get",
        format!("Endpoints {}/{name}", publisher.namespace),
    ))?;
    let ours = observed
        .as_ref()
        .is_some_and(|e| is_our_endpoints(e, publisher));
    let foreign_adoptable = observed
        .as_ref()
        .is_some_and(|e| !ours && adoptable(&e.metadata, publisher));
    match (desired, observed) {
        (Some(mut desired), observed) => {
            desired.metadata.owner_references = controller_ref(service).map(|r| vec![r]);
            if let Some(existing) = &observed {
                if foreign_adoptable {
                    strip_adopt_labels(&api, existing, publisher).await?;
                    adopted.push(format!("Endpoints {name}"));
                } else if !ours {
                    // Someone else's Endpoints: left alone (the slices carry the addresses).
                    return Ok(());
                } else if endpoints_match(existing, &desired) {
                    return Ok(());
                }
            }
            api.patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&desired),
            )
            .await
            .map_err(kube_err(
                "apply",
                format!("Endpoints {}/{name}", publisher.namespace),
            ))?;
            changes.push(format!(
                "{} Endpoints {name}",
                if observed.is_some() {
                    "updated"
                } else {
                    "created"
                }
            ));
        }
        (None, Some(existing)) if ours || foreign_adoptable => {
            delete_exact(&api, &existing, &format!("Endpoints {name}")).await?;
            if foreign_adoptable {
                adopted.push(format!("Endpoints {name} (replaced by EndpointSlices)"));
            }
            changes.push(format!("removed Endpoints {name}"));
        }
        (None, _) => {}
    }
    Ok(())
}
