//! `capi-lb simulate`: load manifests into the in-memory Kubernetes API, run the real reconcilers
//! with the in-memory provider on a simulated clock until nothing changes, and report what the
//! controller did (a timeline of its Events, as YAML comments) and the resulting objects (each
//! LoadBalancer with its status, its published Service and EndpointSlices, its infrastructure object)
//! as YAML. The output is itself valid multi-document YAML.
//!
//! Manifests are checked the way an apiserver would check them: capi-lb's own kinds against their
//! CRD schema and CEL rules (with defaults applied), the others for the fields the simulation needs.
//! Every error names the file, the document, the object and the field.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use capi_lb_api::capi::Machine;
use capi_lb_api::constants::{
    ANNOTATION_DNS_ENDPOINT, ANNOTATION_EXTERNAL_ENDPOINT_DNS_NAME, LABEL_LB_NAME,
    LABEL_SERVICE_NAME, LABEL_SOURCE_SERVICE,
};
use capi_lb_api::externaldns::DNSEndpoint;
use capi_lb_api::target::TargetKeys;
use capi_lb_api::validation::{FieldErrors, parse};
use capi_lb_api::{InMemoryLoadBalancer, LoadBalancer};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

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

/// Options of a simulation.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Fail (see [`Simulation::not_ready`]) when a LoadBalancer is not Ready at the end.
    pub expect_ready: bool,
}

/// The result of a simulation.
#[derive(Debug)]
pub struct Simulation {
    /// The full report: timeline comments and resulting objects as YAML.
    pub output: String,
    /// `namespace/name` of every LoadBalancer that is not Ready at the end.
    pub not_ready: Vec<String>,
    /// How the run went.
    pub run: RunReport,
}

/// Kinds a manifest may contain.
const SUPPORTED: &str = "LoadBalancer (loadbalancer.cluster.x-k8s.io/v1alpha1), InMemoryLoadBalancer (infrastructure.cluster.x-k8s.io/v1alpha1), Machine and Cluster (cluster.x-k8s.io/v1beta2), Service (v1), EndpointSlice (discovery.k8s.io/v1)";

fn describe(doc: &Value) -> String {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("object");
    let name = doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("<no name>");
    let ns = doc
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default");
    format!("{kind} {ns}/{name}")
}

fn field_errors(errors: FieldErrors) -> Vec<String> {
    errors.0.into_iter().map(|e| e.to_string()).collect()
}

/// Check one document and return it as the apiserver would store it.
fn admit(mut doc: Value) -> Result<Value, Vec<String>> {
    let api_version = doc
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let kind = doc
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .is_none()
    {
        return Err(vec!["metadata.name: required".into()]);
    }
    if doc.pointer("/metadata/namespace").is_none() {
        doc["metadata"]["namespace"] = json!("default");
    }
    let strip_status = |mut v: Value| {
        if let Some(map) = v.as_object_mut() {
            map.remove("status");
        }
        v
    };
    match (api_version.as_str(), kind.as_str()) {
        ("loadbalancer.cluster.x-k8s.io/v1alpha1", "LoadBalancer") => {
            let parsed: LoadBalancer = parse(&doc).map_err(field_errors)?;
            serde_json::to_value(parsed)
                .map(strip_status)
                .map_err(|e| vec![e.to_string()])
        }
        ("infrastructure.cluster.x-k8s.io/v1alpha1", "InMemoryLoadBalancer") => {
            let parsed: InMemoryLoadBalancer = parse(&doc).map_err(field_errors)?;
            serde_json::to_value(parsed)
                .map(strip_status)
                .map_err(|e| vec![e.to_string()])
        }
        ("cluster.x-k8s.io/v1beta2", "Machine") => {
            let mut problems = Vec::new();
            for (i, a) in doc
                .pointer("/status/addresses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                if a.get("type").and_then(Value::as_str).is_none()
                    || a.get("address").and_then(Value::as_str).is_none()
                {
                    problems.push(format!(
                        "status.addresses[{i}]: needs string fields type and address"
                    ));
                }
            }
            if problems.is_empty() {
                Ok(doc)
            } else {
                Err(problems)
            }
        }
        ("cluster.x-k8s.io/v1beta2", "Cluster")
        | ("v1", "Service")
        | ("discovery.k8s.io/v1", "EndpointSlice") => Ok(doc),
        ("cluster.x-k8s.io/v1beta1", "Machine" | "Cluster") => Err(vec![format!(
            "apiVersion: use cluster.x-k8s.io/v1beta2 (Cluster API contract v1beta2)"
        )]),
        _ => Err(vec![format!(
            "apiVersion/kind: {api_version:?}/{kind:?} is not supported; supported: {SUPPORTED}"
        )]),
    }
}

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

/// Parse and check every manifest.
pub fn load(sources: &[Source]) -> Result<Vec<Value>, SimulateError> {
    let mut objects = Vec::new();
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for source in sources {
        let name = source.name.clone();
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
            match admit(doc) {
                Ok(object) => {
                    let key = format!(
                        "{} {}",
                        object.get("kind").and_then(Value::as_str).unwrap_or(""),
                        describe(&object)
                    );
                    if !seen.insert(key) {
                        problems.push(format!("{what}: defined more than once"));
                        continue;
                    }
                    objects.push(object);
                }
                Err(errors) => problems.extend(errors.into_iter().map(|e| format!("{what}: {e}"))),
            }
        }
    }
    if !problems.is_empty() {
        return Err(SimulateError::Invalid(problems));
    }
    let something = objects.iter().any(|o| {
        let kind = o.get("kind").and_then(Value::as_str);
        kind == Some("LoadBalancer")
            || (kind == Some("Service")
                && o.pointer("/spec/type").and_then(Value::as_str) == Some("LoadBalancer"))
    });
    if !something {
        return Err(SimulateError::NothingToDo);
    }
    Ok(objects)
}

/// Run a simulation of `sources`.
pub async fn simulate(sources: &[Source], options: &Options) -> Result<Simulation, SimulateError> {
    let objects = load(sources)?;
    // A cluster with ExternalDNS's CRD installed (ExternalDNS itself does not run: DNSEndpoints
    // stay not observed).
    let world = World::with_builder(objects, |b| b.with_resource::<DNSEndpoint>())
        .await
        .map_err(Box::new)?;
    let run = world.run_until_stable(MAX_PASSES).await.map_err(Box::new)?;
    // The -ext publisher for Services of type LoadBalancer (after the LoadBalancers settled).
    world.settle_services(MAX_PASSES).await.map_err(Box::new)?;
    let mut output = String::new();
    write_timeline(&mut output, sources, &world, &run);
    let client = world.client();
    let not_ready = write_load_balancers(&mut output, &client).await?;
    write_load_balancer_services(&mut output, &client).await?;
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
        run,
    })
}

/// Write the header: the command, the timeline of the controller's Events and how the run settled.
fn write_timeline(output: &mut String, sources: &[Source], world: &World, run: &RunReport) {
    let names: Vec<&str> = sources.iter().map(|s| s.name.as_str()).collect();
    let _ = writeln!(output, "# capi-lb simulate -f {}", names.join(" -f "));
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
) -> Result<Vec<String>, SimulateError> {
    let mut lbs = Api::<LoadBalancer>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(Box::new)?
        .items;
    lbs.sort_by_key(|lb| (lb.namespace(), lb.name_any()));
    let mut not_ready = Vec::new();
    for lb in &lbs {
        if !write_load_balancer(output, client, lb).await? {
            not_ready.push(format!(
                "{}/{}",
                lb.namespace().unwrap_or_default(),
                lb.name_any()
            ));
        }
    }
    Ok(not_ready)
}

/// Write LoadBalancer `lb`: its readiness, its target Machines, the object, its published Services
/// with their EndpointSlices, its infrastructure object. Returns whether it is Ready.
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
        write_target_machines(output, client, &namespace, &name).await?;
    }
    emit(output, serde_json::to_value(lb).unwrap_or_default());
    let mut services =
        services_labelled(client, &namespace, &format!("{LABEL_LB_NAME}={name}")).await?;
    services.sort_by_key(ResourceExt::name_any);
    for service in &services {
        emit_service(output, client, &namespace, service).await?;
    }
    if lb.spec.dns.is_some() {
        emit_dns_endpoint(output, client, &namespace, &name).await?;
    }
    let infra_ref = &lb.spec.infrastructure_ref;
    if infra_ref.kind == "InMemoryLoadBalancer"
        && let Some(infra) = Api::<InMemoryLoadBalancer>::namespaced(client.clone(), &namespace)
            .get_opt(&infra_ref.name)
            .await
            .map_err(Box::new)?
    {
        emit(output, serde_json::to_value(infra).unwrap_or_default());
    }
    Ok(ready)
}

/// Write the state of each Machine in `namespace` that LoadBalancer `name` targets.
async fn write_target_machines(
    output: &mut String,
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<(), SimulateError> {
    let keys = TargetKeys::new(namespace, name);
    let mut machines = Api::<Machine>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map_err(Box::new)?
        .items;
    machines.sort_by_key(ResourceExt::name_any);
    for machine in machines {
        let a = machine.annotations();
        let Some(state) = a.get(&keys.state) else {
            continue;
        };
        let hooks = a.contains_key(&keys.pre_drain) || a.contains_key(&keys.pre_terminate);
        let _ = writeln!(
            output,
            "#   target Machine/{}: {state}{}",
            machine.name_any(),
            if hooks { ", deletion hooks held" } else { "" }
        );
    }
    Ok(())
}

/// Write the Services of type LoadBalancer, each with its external endpoint and its `-ext`
/// Services.
async fn write_load_balancer_services(
    output: &mut String,
    client: &kube::Client,
) -> Result<(), SimulateError> {
    let mut sources: Vec<Service> = Api::<Service>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(Box::new)?
        .items
        .into_iter()
        .filter(|s| s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer"))
        .collect();
    sources.sort_by_key(|s| (s.namespace(), s.name_any()));
    for source in &sources {
        let namespace = source.namespace().unwrap_or_default();
        let name = source.name_any();
        let published = source
            .annotations()
            .get(ANNOTATION_EXTERNAL_ENDPOINT_DNS_NAME)
            .cloned();
        let _ = writeln!(
            output,
            "# Service {namespace}/{name} (type LoadBalancer): {}",
            published
                .as_deref()
                .map_or("no external endpoint".to_string(), |d| format!(
                    "external endpoint {d}"
                ))
        );
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
