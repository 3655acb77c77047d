//! `capi-lb simulate`: load manifests into the in-memory Kubernetes API, run the real reconcilers
//! with the in-memory provider on a simulated clock until nothing changes, and report what the
//! controllers did (a timeline of their Events, as YAML comments), the resulting objects (each
//! LoadBalancer with its status, its published Service and EndpointSlices, its infrastructure object,
//! its Cluster; each Service of type LoadBalancer with its status) as YAML, and a closing summary. The
//! output is itself valid multi-document YAML.
//!
//! A clusterctl template is rendered first ([`render`]). Manifests are checked the way an apiserver
//! would check them ([`crate::sim::admit`]); the in-memory provider stands in for the other providers
//! ([`crate::sim::stand_in`]), and the header says so. Every error names the file, the document, the
//! object and the field.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use capi_lb_api::LoadBalancer;
use capi_lb_api::capi::{Cluster, Machine};
use capi_lb_api::constants::{
    ANNOTATION_DNS_ENDPOINT, ANNOTATION_EXTERNAL_ENDPOINT_DNS_NAME, LABEL_LB_NAME,
    LABEL_SERVICE_NAME, LABEL_SOURCE_SERVICE,
};
use capi_lb_api::externaldns::DNSEndpoint;
use capi_lb_api::target::TargetKeys;
use capi_lb_providers::catalog;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DynamicObject, ListParams};
use kube::{Resource, ResourceExt};
use serde_json::Value;

use crate::class;
use crate::sim::admit::{Admitted, admit, describe};
use crate::sim::render;
use crate::sim::stand_in::{self, stood_in_for};
use crate::sim::summary;
use crate::sim::world::{EPOCH, RunReport, World, WorldError};

/// The most reconcile passes a simulation may take before it is declared unsettled.
const MAX_PASSES: usize = 1000;

/// Errors of a simulation.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// A file could not be read.
    #[error("{file}: {source}")]
    Read {
        /// The file.
        file: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A file is not valid YAML.
    #[error("{file}: not valid YAML: {message}")]
    Yaml {
        /// The file.
        file: String,
        /// The parser's message (with its line and column).
        message: String,
    },
    /// One or more objects are invalid.
    #[error("invalid manifests:\n{}", .0.join("\n"))]
    Invalid(Vec<String>),
    /// A template's variables have no value (neither in the environment nor a default).
    #[error("{}\nhint: set {} in the environment, as for clusterctl generate cluster (e.g. CLUSTER_NAME=demo NAMESPACE=default KUBERNETES_VERSION=v1.32.0 capi-lb simulate -f FILE), or render the template first with clusterctl generate cluster ... > rendered.yaml and simulate that",
        .0.iter().map(|(file, names)| format!("{file}: template variables without a value: {}", names.join(", "))).collect::<Vec<_>>().join("\n"),
        unset_names(.0))]
    UnsetVariables(Vec<(String, Vec<String>)>),
    /// Nothing to simulate: no LoadBalancer and no Service of type LoadBalancer.
    #[error("the manifests contain no LoadBalancer and no Service of type LoadBalancer")]
    NothingToDo,
    /// The simulation failed.
    #[error(transparent)]
    World(#[from] Box<WorldError>),
    /// Reading results back failed.
    #[error("reading results: {0}")]
    Results(#[from] Box<kube::Error>),
}

/// Every name in `unset`, once, joined for the hint.
fn unset_names(unset: &[(String, Vec<String>)]) -> String {
    let names: BTreeSet<&str> = unset
        .iter()
        .flat_map(|(_, names)| names.iter().map(String::as_str))
        .collect();
    let names: Vec<&str> = names.into_iter().collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

/// Options of a simulation.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Fail (see [`Simulation::not_ready`]) when a LoadBalancer is not Ready at the end.
    pub expect_ready: bool,
    /// Values of template variables (`${VAR}`): the process environment for `capi-lb simulate`.
    pub variables: BTreeMap<String, String>,
}

/// The result of a simulation.
#[derive(Debug)]
pub struct Simulation {
    /// The full report: timeline comments and resulting objects as YAML.
    pub output: String,
    /// `namespace/name` of every LoadBalancer that is not Ready at the end.
    pub not_ready: Vec<String>,
    /// Whether a file says its outcome is not Ready on purpose ([`NOT_READY_ON_PURPOSE`]).
    pub not_ready_on_purpose: bool,
    /// How the run went.
    pub run: RunReport,
}

/// The comment a file carries at its top when its outcome is not Ready on purpose (an example of
/// a problem capi-lb reports).
pub const NOT_READY_ON_PURPOSE: &str = "# Not Ready on purpose:";

/// A manifest source: a name for messages and its text.
#[derive(Clone, Debug)]
pub struct Source {
    /// File name (or another label) used in messages.
    pub name: String,
    /// YAML text, one or more documents.
    pub text: String,
}

/// Read manifest files.
pub fn read(files: &[PathBuf]) -> Result<Vec<Source>, SimulateError> {
    files
        .iter()
        .map(|file| {
            let name = display(file);
            std::fs::read_to_string(file)
                .map(|text| Source {
                    name: name.clone(),
                    text,
                })
                .map_err(|source| SimulateError::Read { file: name, source })
        })
        .collect()
}

/// Manifests checked and ready to simulate.
#[derive(Clone, Debug, Default)]
pub struct Loaded {
    /// The objects the simulation holds, as the apiserver would store them.
    pub objects: Vec<Value>,
    /// `Kind namespace/name` of each object accepted as context and not simulated.
    pub context: Vec<String>,
    /// Whether a file says its outcome is not Ready on purpose ([`NOT_READY_ON_PURPOSE`]).
    pub not_ready_on_purpose: bool,
}

/// Render the template variables of every source that has any ([`render`]); one error lists every
/// variable without a value, file by file.
pub fn render_sources(
    sources: &[Source],
    variables: &BTreeMap<String, String>,
) -> Result<Vec<Source>, SimulateError> {
    let mut rendered = Vec::new();
    let mut unset = Vec::new();
    for source in sources {
        if !render::has_variables(&source.text) {
            rendered.push(source.clone());
            continue;
        }
        match render::render(&source.text, variables) {
            Ok(text) => rendered.push(Source {
                name: source.name.clone(),
                text,
            }),
            Err(names) => unset.push((source.name.clone(), names)),
        }
    }
    if unset.is_empty() {
        Ok(rendered)
    } else {
        Err(SimulateError::UnsetVariables(unset))
    }
}

/// Whether the leading comment of `text` says its outcome is not Ready on purpose.
fn says_not_ready_on_purpose(text: &str) -> bool {
    text.lines()
        .take_while(|l| l.starts_with('#') || l.trim().is_empty())
        .any(|l| l.starts_with(NOT_READY_ON_PURPOSE))
}

/// Parse and check every manifest.
pub fn load(sources: &[Source]) -> Result<Loaded, SimulateError> {
    let mut loaded = Loaded::default();
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for source in sources {
        let name = source.name.clone();
        loaded.not_ready_on_purpose |= says_not_ready_on_purpose(&source.text);
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&source.text).map_err(|e| SimulateError::Yaml {
                file: name.clone(),
                message: e.to_string(),
            })?;
        for (index, doc) in docs.into_iter().enumerate() {
            if doc.is_null() {
                continue;
            }
            let what = format!("{name}: document {} ({})", index + 1, describe(&doc));
            if !doc.is_object() {
                problems.push(format!("{what}: not an object"));
                continue;
            }
            let key = format!(
                "{} {}",
                doc.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
                describe(&doc)
            );
            if !seen.insert(key) {
                problems.push(format!("{what}: defined more than once"));
                continue;
            }
            match admit(doc.clone()) {
                Ok(Admitted::Simulated(object)) => loaded.objects.push(object),
                Ok(Admitted::Context) => loaded.context.push(describe(&doc)),
                Err(errors) => problems.extend(errors.into_iter().map(|e| format!("{what}: {e}"))),
            }
        }
    }
    if !problems.is_empty() {
        return Err(SimulateError::Invalid(problems));
    }
    let something = loaded.objects.iter().any(|o| {
        let kind = o.get("kind").and_then(Value::as_str);
        kind == Some("LoadBalancer")
            || (kind == Some("Service")
                && o.pointer("/spec/type").and_then(Value::as_str) == Some("LoadBalancer"))
    });
    if !something {
        return Err(SimulateError::NothingToDo);
    }
    Ok(loaded)
}

/// Run a simulation of `sources`.
pub async fn simulate(sources: &[Source], options: &Options) -> Result<Simulation, SimulateError> {
    let sources = render_sources(sources, &options.variables)?;
    let loaded = load(&sources)?;
    let mut stand_ins = stand_ins(&loaded.objects);
    // A cluster with ExternalDNS's CRD installed and ExternalDNS played: every DNSEndpoint is
    // taken as written (no DNS server is contacted).
    let world = World::with_builder(loaded.objects.clone(), |b| b.with_resource::<DNSEndpoint>())
        .await
        .map_err(Box::new)?
        .standing_in()
        .playing_external_dns();
    let run = settle(&world).await?;
    let mut output = String::new();
    if world.dns_endpoints_taken() > 0 {
        stand_ins.push("ExternalDNS: played (each DNSEndpoint is taken as written, its status.observedGeneration set; no DNS server is contacted)".into());
    }
    write_header(&mut output, &sources, &stand_ins, &loaded.context);
    write_timeline(&mut output, &world, &run);
    let client = world.client();
    let mut lbs = Api::<LoadBalancer>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(Box::new)?
        .items;
    lbs.sort_by_key(|lb| (lb.namespace(), lb.name_any()));
    let not_ready = write_load_balancers(&mut output, &client, &lbs).await?;
    let given: Vec<(String, Option<Value>)> = loaded
        .objects
        .iter()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("Cluster"))
        .map(|o| {
            let meta = |k: &str| o.pointer(&format!("/metadata/{k}")).and_then(Value::as_str);
            let key = format!(
                "{}/{}",
                meta("namespace").unwrap_or("default"),
                meta("name").unwrap_or("")
            );
            (key, o.pointer("/spec/controlPlaneEndpoint").cloned())
        })
        .collect();
    let mut summary = summary::lines(&client, &lbs, &world.ctx.events.timeline(), &given).await?;
    write_load_balancer_services(&mut output, &world, &mut summary).await?;
    let _ = writeln!(output, "#\n# Summary:");
    for line in &summary {
        let _ = writeln!(output, "#   {line}");
    }
    if loaded.not_ready_on_purpose {
        let _ = writeln!(
            output,
            "#   (not Ready on purpose: the file says so at its top)"
        );
    }
    if options.expect_ready && !not_ready.is_empty() {
        let _ = writeln!(
            output,
            "# Not Ready (--expect-ready): {}",
            not_ready.join(", ")
        );
    }
    Ok(Simulation {
        output,
        not_ready,
        not_ready_on_purpose: loaded.not_ready_on_purpose,
        run,
    })
}

/// Stand-in for the watches of both controllers: the LoadBalancers settle, then the Services (the
/// `-ext` publisher, and the binding of a Service of capi-lb's class to its LoadBalancer), again
/// until the Services change nothing (a Service bound to a LoadBalancer has it reconciled again:
/// it takes the Service's ports and endpoints and writes its ingress).
async fn settle(world: &World) -> Result<RunReport, SimulateError> {
    let mut total = RunReport::default();
    for _ in 0..MAX_PASSES {
        let run = world.run_until_stable(MAX_PASSES).await.map_err(Box::new)?;
        total.passes += run.passes;
        total.reconciles += run.reconciles;
        total.elapsed += run.elapsed;
        let before = world.api.stats.writes_excluding_events();
        world.settle_services(MAX_PASSES).await.map_err(Box::new)?;
        if world.api.stats.writes_excluding_events() == before {
            return Ok(total);
        }
    }
    Err(SimulateError::World(Box::new(WorldError::DidNotSettle(
        total.passes,
        "the LoadBalancers and the Services kept changing each other".into(),
    ))))
}

/// One line per object of a provider the in-memory provider stands in for: what it means.
fn stand_ins(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .filter_map(|o| {
            let kind = o.get("kind").and_then(Value::as_str)?;
            let note = stood_in_for(kind)?;
            let pinned = stand_in::pinned(kind, o.get("spec").unwrap_or(&Value::Null));
            let addresses = if pinned.is_empty() {
                "addresses come from the documentation range 203.0.113.0/24".to_string()
            } else {
                let pinned: Vec<String> = pinned.iter().map(ToString::to_string).collect();
                format!("its address is the one it pins, {}", pinned.join(", "))
            };
            Some(format!(
                "{}: simulated by the in-memory provider (no cloud is contacted; {note}; {addresses})",
                describe(o)
            ))
        })
        .collect()
}

/// Write the header: the command, the stand-ins and what is not simulated.
fn write_header(output: &mut String, sources: &[Source], stand_ins: &[String], context: &[String]) {
    let names: Vec<&str> = sources.iter().map(|s| s.name.as_str()).collect();
    let _ = writeln!(output, "# capi-lb simulate -f {}", names.join(" -f "));
    for line in stand_ins {
        let _ = writeln!(output, "# {line}");
    }
    if !context.is_empty() {
        let _ = writeln!(
            output,
            "# Not simulated (accepted as context; no controller of theirs runs): {}",
            context.join(", ")
        );
    }
}

/// Write the timeline of the controllers' Events and how the run settled.
fn write_timeline(output: &mut String, world: &World, run: &RunReport) {
    let _ = writeln!(output, "#");
    let _ = writeln!(output, "# Timeline (simulated time since start):");
    let start: Timestamp = EPOCH.parse().unwrap_or(Timestamp::UNIX_EPOCH);
    for entry in world.ctx.events.timeline() {
        let offset = entry.time.duration_since(start).as_secs_f64();
        let _ = writeln!(
            output,
            "#   +{offset:>6.1}s  {:<28} {:<7} {:<22} {}",
            entry.object,
            if entry.warning { "Warning" } else { "Normal" },
            entry.reason,
            entry.message
        );
    }
    let _ = writeln!(
        output,
        "#\n# Settled after {} reconciles in {} passes, {:.1}s of simulated time.",
        run.reconciles,
        run.passes,
        run.elapsed.as_secs_f64()
    );
}

/// Write every LoadBalancer with what belongs to it; returns `namespace/name` of those not Ready.
async fn write_load_balancers(
    output: &mut String,
    client: &kube::Client,
    lbs: &[LoadBalancer],
) -> Result<Vec<String>, SimulateError> {
    let mut not_ready = Vec::new();
    for lb in lbs {
        let key = format!("{}/{}", lb.namespace().unwrap_or_default(), lb.name_any());
        if !write_load_balancer(output, client, lb).await? {
            not_ready.push(key);
        }
    }
    Ok(not_ready)
}

/// Write LoadBalancer `lb`: its readiness, its target Machines, the object, its published Services
/// with their EndpointSlices, its infrastructure object, its Cluster. Returns whether it is Ready.
async fn write_load_balancer(
    output: &mut String,
    client: &kube::Client,
    lb: &LoadBalancer,
) -> Result<bool, SimulateError> {
    let namespace = lb.namespace().unwrap_or_default();
    let name = lb.name_any();
    let ready = lb.status.as_ref().is_some_and(|s| s.ready);
    let _ = writeln!(
        output,
        "# LoadBalancer {namespace}/{name}: {}",
        if ready { "Ready" } else { "NOT Ready" }
    );
    if lb.spec.target_kind.kind == Machine::kind(&()) {
        let targets = lb.status.as_ref().map_or(&[][..], |s| &s.targets);
        write_target_machines(output, client, &namespace, &name, targets).await?;
    }
    emit(output, serde_json::to_value(lb).unwrap_or_default());
    let mut services =
        services_labelled(client, &namespace, &format!("{LABEL_LB_NAME}={name}")).await?;
    services.sort_by_key(ResourceExt::name_any);
    for service in &services {
        emit_service(output, client, &namespace, service).await?;
    }
    // Its DNSEndpoint (spec.dns, or a load balancer made of DNS records), when it has one.
    emit_dns_endpoint(output, client, &namespace, &name).await?;
    let infra_ref = &lb.spec.infrastructure_ref;
    if let Some(entry) = catalog::for_kind(&infra_ref.kind)
        && let Some(infra) = Api::<DynamicObject>::namespaced_with(
            client.clone(),
            &namespace,
            &(entry.infrastructure)(),
        )
        .get_opt(&infra_ref.name)
        .await
        .map_err(Box::new)?
    {
        if stood_in_for(&infra_ref.kind).is_some() {
            let _ = writeln!(
                output,
                "# {} {namespace}/{}: its status as the in-memory provider standing in wrote it",
                infra_ref.kind, infra_ref.name
            );
        }
        emit(output, serde_json::to_value(infra).unwrap_or_default());
    }
    if let Some(cluster_name) = &lb.spec.cluster_name
        && let Some(cluster) = Api::<Cluster>::namespaced(client.clone(), &namespace)
            .get_opt(cluster_name)
            .await
            .map_err(Box::new)?
    {
        let endpoint = cluster
            .spec
            .control_plane_endpoint
            .as_ref()
            .filter(|e| !e.host.is_empty())
            .map_or("no spec.controlPlaneEndpoint".to_string(), |e| {
                format!("spec.controlPlaneEndpoint {}:{}", e.host, e.port)
            });
        let _ = writeln!(output, "# Cluster {namespace}/{cluster_name}: {endpoint}");
        emit(output, serde_json::to_value(cluster).unwrap_or_default());
    }
    Ok(ready)
}

const NOT_JOINED: &str = "not joined yet (no state written; TargetsReady says what it waits for)";

/// Write the state LoadBalancer `name` recorded on each Machine ([`NOT_JOINED`]: a target without).
async fn write_target_machines(
    output: &mut String,
    client: &kube::Client,
    namespace: &str,
    name: &str,
    targets: &[String],
) -> Result<(), SimulateError> {
    let keys = TargetKeys::new(namespace, name);
    let mut machines = Api::<Machine>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map_err(Box::new)?
        .items;
    machines.sort_by_key(ResourceExt::name_any);
    for machine in machines {
        let (a, name) = (machine.annotations(), machine.name_any());
        let hooks = a.contains_key(&keys.pre_drain) || a.contains_key(&keys.pre_terminate);
        let line = match a.get(&keys.state) {
            Some(state) if hooks => format!("{state}, deletion hooks held"),
            Some(state) => state.clone(),
            None if targets.contains(&name) => NOT_JOINED.to_string(),
            None => continue,
        };
        let _ = writeln!(output, "#   target Machine/{name}: {line}");
    }
    Ok(())
}

/// Write the Services of type LoadBalancer, each with its status, its external endpoint and its
/// `-ext` Services, and a line each to `summary`.
async fn write_load_balancer_services(
    output: &mut String,
    world: &World,
    summary: &mut Vec<String>,
) -> Result<(), SimulateError> {
    let client = &world.client();
    let mut sources: Vec<Service> = Api::<Service>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(Box::new)?
        .items
        .into_iter()
        .filter(|s| s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer"))
        .collect();
    sources.sort_by_key(|s| (s.namespace(), s.name_any()));
    let timeline = world.ctx.events.timeline();
    for source in &sources {
        let namespace = source.namespace().unwrap_or_default();
        let name = source.name_any();
        let published = source
            .annotations()
            .get(ANNOTATION_EXTERNAL_ENDPOINT_DNS_NAME)
            .cloned();
        let endpoint = published
            .as_deref()
            .map_or("no external endpoint".to_string(), |d| {
                format!("external endpoint {d}")
            });
        let _ = writeln!(
            output,
            "# Service {namespace}/{name} (type LoadBalancer): {endpoint}"
        );
        let ingress: Vec<String> = source
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|i| i.ip.clone().or_else(|| i.hostname.clone()))
            .collect();
        let state = if !ingress.is_empty() {
            format!("ingress {}, {endpoint}", ingress.join(", "))
        } else if class::is_ours(source) {
            let object = format!("Service/{name}");
            match timeline
                .iter()
                .rev()
                .find(|e| e.warning && e.object.ends_with(&object))
            {
                Some(e) => format!("no ingress: {}: {}", e.reason, e.message),
                None => "no ingress".into(),
            }
        } else {
            let class = source
                .spec
                .as_ref()
                .and_then(|s| s.load_balancer_class.as_deref())
                .unwrap_or("the cluster's default");
            format!("no ingress: its implementation ({class}) does not run in simulate; {endpoint}")
        };
        summary.push(format!("Service {namespace}/{name}: {state}"));
        emit(output, serde_json::to_value(source).unwrap_or_default());
        let ext = services_labelled(
            client,
            &namespace,
            &format!("{LABEL_SOURCE_SERVICE}={name}"),
        )
        .await?;
        for service in &ext {
            emit_service(output, client, &namespace, service).await?;
        }
        if let Some(endpoint) = source.annotations().get(ANNOTATION_DNS_ENDPOINT) {
            emit_dns_endpoint(output, client, &namespace, endpoint).await?;
        }
    }
    Ok(())
}

/// Write the ExternalDNS `DNSEndpoint` `name`, when there is one.
async fn emit_dns_endpoint(
    output: &mut String,
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<(), SimulateError> {
    if let Some(endpoint) = Api::<DNSEndpoint>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(Box::new)?
    {
        emit(output, serde_json::to_value(endpoint).unwrap_or_default());
    }
    Ok(())
}

/// The Services in `namespace` that match the label selector `selector`, by name.
async fn services_labelled(
    client: &kube::Client,
    namespace: &str,
    selector: &str,
) -> Result<Vec<Service>, SimulateError> {
    let mut services = Api::<Service>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(Box::new)?
        .items;
    // The in-memory store has no order; the output must be reproducible.
    services.sort_by_key(|s| s.metadata.name.clone());
    Ok(services)
}

/// Append published Service `service` (in `namespace`) and its EndpointSlices, sorted by name.
async fn emit_service(
    output: &mut String,
    client: &kube::Client,
    namespace: &str,
    service: &Service,
) -> Result<(), SimulateError> {
    let service_name = service.name_any();
    emit(output, serde_json::to_value(service).unwrap_or_default());
    let mut slices = Api::<EndpointSlice>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&format!("{LABEL_SERVICE_NAME}={service_name}")))
        .await
        .map_err(Box::new)?
        .items;
    slices.sort_by_key(ResourceExt::name_any);
    for slice in slices {
        emit(output, serde_json::to_value(&slice).unwrap_or_default());
    }
    Ok(())
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

/// Append `object` as a YAML document, without the fields that only add noise (managed fields,
/// resource versions, UIDs).
fn emit(output: &mut String, mut object: Value) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for noise in [
            "managedFields",
            "resourceVersion",
            "uid",
            "generation",
            "creationTimestamp",
        ] {
            meta.remove(noise);
        }
        // The UID in the ownership annotation changes from run to run too.
        if let Some(Value::String(ownership)) = meta
            .get_mut("annotations")
            .and_then(|a| a.get_mut(capi_lb_api::constants::ANNOTATION_OWNERSHIP))
            && let Some((name, _)) = ownership.rsplit_once('/')
        {
            *ownership = format!("{name}/<uid>");
        }
        if let Some(refs) = meta
            .get_mut("ownerReferences")
            .and_then(Value::as_array_mut)
        {
            for r in refs {
                if let Some(r) = r.as_object_mut() {
                    r.remove("uid");
                }
            }
        }
    }
    output.push_str("---\n");
    match serde_saphyr::to_string(&object) {
        Ok(yaml) => output.push_str(&yaml),
        Err(e) => {
            let _ = writeln!(output, "# cannot render: {e}");
        }
    }
}
