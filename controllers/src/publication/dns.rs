//! DNS names outside the cluster through ExternalDNS (the load-balancer proposal's Story 3): for a
//! LoadBalancer with `spec.dns`, one ExternalDNS `DNSEndpoint` named like the LoadBalancer, owned by
//! it, with A/AAAA records for its IP addresses (a CNAME when it only has a hostname) under each of
//! `spec.dns.hostnames` and `spec.endpoint.host` (when that is a DNS name). capi-lb writes no DNS
//! record itself (the proposal's FR1): ExternalDNS, started with `--source=crd`, does, and reports
//! the generation it processed in `status.observedGeneration`, which the `DNSPublished` condition
//! reads.
//!
//! [`plan`] is pure; [`publish`] reads and writes the `DNSEndpoint` and says how it stands. A
//! `DNSEndpoint` of that name that this LoadBalancer does not own is never touched, and a hostname
//! another LoadBalancer's `DNSEndpoint` published first is left to it (two owners of one name would
//! make ExternalDNS flap between them).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use capi_lb_api::LoadBalancer;
use capi_lb_api::constants::FIELD_MANAGER;
use capi_lb_api::externaldns::{DNSEndpoint, DNSEndpointSpec, Endpoint, ProviderSpecificProperty};
use capi_lb_api::loadbalancer::{AddressType, LoadBalancerAddress};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, Patch, PatchParams};
use kube::core::ApiResource;
use kube::{Resource, ResourceExt};

use super::holders::{self, claimed_elsewhere, owned_by};
use super::{controller_ref, delete_exact, managed_labels};
use crate::cache::Caches;
use crate::error::{Result, kube_err};

/// A DNS name capi-lb publishes: a DNS subdomain of lowercase labels, optionally under `*.`.
pub fn is_hostname(name: &str) -> bool {
    let name = name.strip_prefix("*.").unwrap_or(name);
    capi_lb_api::naming::is_dns_subdomain(name) && name.split('.').all(|l| l.len() <= 63)
}

/// The names to publish: `spec.dns.hostnames`, then `spec.endpoint.host` when it is a DNS name, each
/// once, lowercased.
pub fn hostnames(lb: &LoadBalancer) -> Vec<String> {
    let Some(dns) = &lb.spec.dns else {
        return Vec::new();
    };
    let endpoint = lb
        .spec
        .endpoint
        .as_ref()
        .map(|e| e.host.as_str())
        .filter(|h| h.parse::<IpAddr>().is_err());
    unique(dns.hostnames.iter().map(String::as_str).chain(endpoint))
}

/// `names` without a final dot, lowercased, each once, in order.
pub fn unique<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    names
        .into_iter()
        .map(|h| h.trim().trim_end_matches('.').to_lowercase())
        .filter(|h| !h.is_empty() && seen.insert(h.clone()))
        .collect()
}

/// What every record of one `DNSEndpoint` carries besides its name and targets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecordOptions {
    /// TTL in seconds; `None`: the DNS provider's default.
    pub ttl: Option<i64>,
    /// Routing-policy identifier.
    pub set_identifier: Option<String>,
    /// DNS-provider-specific properties.
    pub provider_specific: Vec<ProviderSpecificProperty>,
}

impl RecordOptions {
    /// The options of a LoadBalancer's `spec.dns`.
    pub fn of(lb: &LoadBalancer) -> Self {
        let Some(dns) = &lb.spec.dns else {
            return Self::default();
        };
        Self {
            ttl: dns.ttl_seconds,
            set_identifier: dns.set_identifier.clone(),
            provider_specific: dns
                .provider_specific
                .iter()
                .map(|p| ProviderSpecificProperty {
                    name: p.name.clone(),
                    value: p.value.clone(),
                })
                .collect(),
        }
    }
}

/// The records of `names` for `addresses`: per name an A record with the IPv4 addresses and an
/// AAAA record with the IPv6 ones, or, without any IP, a CNAME to the first hostname. Empty without
/// addresses.
pub fn records(
    options: &RecordOptions,
    names: &[String],
    addresses: &[LoadBalancerAddress],
) -> Vec<Endpoint> {
    let ips: Vec<IpAddr> = addresses
        .iter()
        .filter(|a| a.type_ == AddressType::Ip)
        .filter_map(|a| a.address.parse().ok())
        .collect();
    let family = |v4: bool| -> Vec<String> {
        ips.iter()
            .filter(|i| i.is_ipv4() == v4)
            .map(|i| i.to_string())
            .collect()
    };
    let (v4, v6) = (family(true), family(false));
    let hostname = addresses
        .iter()
        .find(|a| a.type_ == AddressType::Hostname)
        .map(|a| a.address.trim_end_matches('.').to_string());
    let record = |name: &String, record_type: &str, targets: Vec<String>| Endpoint {
        dns_name: name.clone(),
        record_type: record_type.into(),
        targets,
        record_ttl: options.ttl,
        set_identifier: options.set_identifier.clone(),
        provider_specific: options.provider_specific.clone(),
        labels: Default::default(),
    };
    let mut out = Vec::new();
    for name in names {
        if !v4.is_empty() {
            out.push(record(name, "A", v4.clone()));
        }
        if !v6.is_empty() {
            out.push(record(name, "AAAA", v6.clone()));
        }
        if ips.is_empty()
            && let Some(h) = &hostname
        {
            out.push(record(name, "CNAME", vec![h.clone()]));
        }
    }
    out
}

/// Whose `DNSEndpoint` it is and where it goes.
#[derive(Clone, Debug, PartialEq)]
pub struct Owner {
    /// Namespace of the owner and the `DNSEndpoint`.
    pub namespace: String,
    /// Name of the `DNSEndpoint`.
    pub name: String,
    /// The owner (a LoadBalancer or a Service), `Kind name` for messages.
    pub describe: String,
    /// Controller owner reference to the owner.
    pub reference: OwnerReference,
    /// Labels on the `DNSEndpoint` (capi-lb's, and the user's for ExternalDNS's `--label-filter`).
    pub labels: BTreeMap<String, String>,
}

impl Owner {
    /// The `DNSEndpoint` of LoadBalancer `lb`, named like it; `None` without a UID (not stored).
    pub fn of(lb: &LoadBalancer) -> Option<Self> {
        // The user's labels (for ExternalDNS's `--label-filter`), never over capi-lb's own.
        let mut labels = lb
            .spec
            .dns
            .as_ref()
            .map(|dns| dns.labels.clone())
            .unwrap_or_default();
        labels.extend(managed_labels(&lb.name_any()));
        Some(Self {
            namespace: lb.namespace().unwrap_or_default(),
            name: lb.name_any(),
            describe: format!("LoadBalancer {}", lb.name_any()),
            reference: controller_ref(lb)?,
            labels,
        })
    }
}

/// What to publish: the names, their record options. `None` where publication is off.
#[derive(Clone, Debug, PartialEq)]
pub struct Wanted {
    /// The names (see [`unique`]) the name policy allows.
    pub names: Vec<String>,
    /// The record options.
    pub options: RecordOptions,
    /// The names asked for that the name policy refuses, each with its rule: not published, and
    /// reported.
    pub refused: Vec<(String, String)>,
}

/// The `DNSEndpoint` of `owner` with `records`.
pub fn plan(owner: &Owner, records: Vec<Endpoint>) -> DNSEndpoint {
    DNSEndpoint {
        metadata: ObjectMeta {
            name: Some(owner.name.clone()),
            namespace: Some(owner.namespace.clone()),
            labels: Some(owner.labels.clone()),
            owner_references: Some(vec![owner.reference.clone()]),
            ..Default::default()
        },
        spec: DNSEndpointSpec { endpoints: records },
        status: None,
    }
}

/// How the names of a [`publish`] stand: the facts the `DNSPublished` condition is decided from
/// (`crate::conditions::dns_condition`).
#[derive(Clone, Debug, PartialEq)]
pub enum DnsState {
    /// ExternalDNS's `DNSEndpoint` CRD is not installed.
    CrdMissing,
    /// The `DNSEndpoint` `endpoint` (`namespace/name`) exists and is not `owner`'s.
    NameConflict { endpoint: String, owner: String },
    /// No names are asked for (any more): nothing is published.
    Disabled,
    /// A name asked for is not a DNS name.
    InvalidHostname(String),
    /// Names the name policy does not let the namespace publish: (name, rule). The others are
    /// published.
    NotAllowed(Vec<(String, String)>),
    /// Names another owner's `DNSEndpoint` publishes: (name, `namespace/name` of theirs).
    HostnameConflict(Vec<(String, String)>),
    /// The load balancer has no address: the `DNSEndpoint` has no records.
    NoAddress,
    /// ExternalDNS processed the `DNSEndpoint` `endpoint`, whose records are `records`.
    Observed { endpoint: String, records: String },
    /// ExternalDNS has not processed `generation` of the `DNSEndpoint` `endpoint` yet.
    NotObserved { endpoint: String, generation: i64 },
}

/// How the DNS publication stands after [`publish`].
#[derive(Clone, Debug, PartialEq)]
pub struct Published {
    /// How the names stand; `None` when nothing is wanted and `report_off` was false.
    pub state: Option<DnsState>,
    /// What changed, for Events.
    pub changes: Vec<String>,
    /// A `DNSEndpoint` of `owner`'s exists now.
    pub exists: bool,
}

/// Write `owner`'s `DNSEndpoint` for `wanted` names and `addresses` (delete it when nothing is
/// wanted) and say how it stands. `report_off`: say so in the condition when nothing is wanted
/// (publication was on before).
pub async fn publish(
    client: &kube::Client,
    caches: &Caches,
    owner: &Owner,
    wanted: Option<&Wanted>,
    addresses: &[LoadBalancerAddress],
    report_off: bool,
) -> Result<Published> {
    let Owner {
        namespace, name, ..
    } = owner;
    let uid = owner.reference.uid.as_str();
    let api: Api<DNSEndpoint> = Api::namespaced(client.clone(), namespace);
    let mut out = Published {
        state: None,
        changes: Vec::new(),
        exists: false,
    };
    let resource = ApiResource::erase::<DNSEndpoint>(&());
    let cache = caches.of(&resource);
    let Some((listed, existing)) = holders::read(client, cache, namespace, name).await? else {
        if wanted.is_some() {
            out.state = Some(DnsState::CrdMissing);
        }
        return Ok(out);
    };
    if let Some(found) = &existing
        && !owned_by(found, uid)
    {
        if wanted.is_some() {
            out.state = Some(DnsState::NameConflict {
                endpoint: format!("{namespace}/{name}"),
                owner: owner.describe.clone(),
            });
        }
        return Ok(out);
    }
    let Some(wanted) = wanted else {
        if let Some(found) = existing {
            delete_exact(&api, &found, &format!("DNSEndpoint {namespace}/{name}")).await?;
            super::gone(cache, &found);
            out.changes.push(format!("deleted DNSEndpoint {name}"));
        }
        if report_off {
            out.state = Some(DnsState::Disabled);
        }
        return Ok(out);
    };
    if let Some(bad) = wanted.names.iter().find(|n| !is_hostname(n)) {
        out.exists = existing.is_some();
        out.state = Some(DnsState::InvalidHostname(bad.clone()));
        return Ok(out);
    }
    let conflicts = claimed_elsewhere(&wanted.names, &listed, uid, existing.as_ref());
    let free: Vec<String> = wanted
        .names
        .iter()
        .filter(|n| !conflicts.iter().any(|(c, _)| c == *n))
        .cloned()
        .collect();
    let desired = plan(owner, records(&wanted.options, &free, addresses));
    let stored = match &existing {
        Some(found) if matches(found, &desired) => found.clone(),
        _ => {
            let applied = api
                .patch(
                    name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&desired),
                )
                .await
                .map_err(kube_err("apply", format!("DNSEndpoint {namespace}/{name}")))?;
            if let Some(cache) = cache {
                cache.wrote_as(&applied);
            }
            out.changes.push(format!(
                "{} DNSEndpoint {name}: {}",
                if existing.is_some() {
                    "updated"
                } else {
                    "created"
                },
                describe(&desired.spec.endpoints)
            ));
            applied
        }
    };
    out.exists = true;
    // ExternalDNS's status write triggers the next pass through the DNSEndpoint watch.
    out.state = Some(if wanted.refused.is_empty() {
        state(&stored, conflicts, addresses.is_empty())
    } else {
        DnsState::NotAllowed(wanted.refused.clone())
    });
    Ok(out)
}

/// Whether the stored `DNSEndpoint` already is `desired`: its records, labels and owner.
fn matches(stored: &DNSEndpoint, desired: &DNSEndpoint) -> bool {
    let labels = stored.labels();
    stored.spec.endpoints == desired.spec.endpoints
        && desired
            .labels()
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
        && desired.owner_references().iter().all(|d| {
            stored
                .owner_references()
                .iter()
                .any(|o| o.uid == d.uid && o.controller == d.controller)
        })
}

/// `name A 192.0.2.1, name AAAA ...` for Events.
fn describe(records: &[Endpoint]) -> String {
    if records.is_empty() {
        return "no records".into();
    }
    records
        .iter()
        .map(|e| format!("{} {} {}", e.dns_name, e.record_type, e.targets.join(",")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// How the names of the stored `DNSEndpoint` stand.
fn state(stored: &DNSEndpoint, conflicts: Vec<(String, String)>, no_address: bool) -> DnsState {
    if !conflicts.is_empty() {
        return DnsState::HostnameConflict(conflicts);
    }
    if no_address {
        return DnsState::NoAddress;
    }
    let generation = stored.meta().generation;
    let observed = stored.status.as_ref().and_then(|s| s.observed_generation);
    if generation.is_some() && observed >= generation {
        DnsState::Observed {
            endpoint: stored.name_any(),
            records: describe(&stored.spec.endpoints),
        }
    } else {
        DnsState::NotObserved {
            endpoint: stored.name_any(),
            generation: generation.unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use capi_lb_api::constants::{LABEL_LB_NAME, reason as r};
    use capi_lb_api::loadbalancer::{ApiEndpoint, DnsProperty, DnsPublication};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

    use super::*;

    fn lb(dns: Option<DnsPublication>, endpoint: Option<&str>) -> LoadBalancer {
        let mut lb: LoadBalancer = serde_json::from_value(serde_json::json!({
            "apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer",
            "metadata": {"name": "cp", "namespace": "ns", "uid": "lb-uid"},
            "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "InMemoryLoadBalancer", "name": "cp"}},
        }))
        .unwrap();
        lb.spec.dns = dns;
        lb.spec.endpoint = endpoint.map(|h| ApiEndpoint {
            host: h.into(),
            port: 6443,
        });
        lb
    }

    fn dns(hostnames: &[&str]) -> DnsPublication {
        DnsPublication {
            hostnames: hostnames.iter().map(|h| h.to_string()).collect(),
            ttl_seconds: Some(60),
            set_identifier: Some("eu".into()),
            provider_specific: vec![DnsProperty {
                name: "aws/evaluate-target-health".into(),
                value: "true".into(),
            }],
            labels: [("dns".to_string(), "public".to_string())].into(),
        }
    }

    #[test]
    fn names_are_the_hostnames_and_the_endpoint_host_once_and_never_an_ip() {
        let with = lb(
            Some(dns(&["API.example.com.", "api.example.com"])),
            Some("cp.example.com"),
        );
        assert_eq!(hostnames(&with), ["api.example.com", "cp.example.com"]);
        let ip = lb(Some(dns(&["api.example.com"])), Some("192.0.2.1"));
        assert_eq!(hostnames(&ip), ["api.example.com"]);
        // Story 3a: the endpoint host alone is enough.
        assert_eq!(
            hostnames(&lb(Some(dns(&[])), Some("cp.example.com"))),
            ["cp.example.com"]
        );
        assert!(hostnames(&lb(None, Some("cp.example.com"))).is_empty());
    }

    #[test]
    fn hostnames_are_dns_subdomains_optionally_under_a_wildcard() {
        for good in [
            "api.example.com",
            "*.apps.example.com",
            "localhost",
            "a-1.b",
        ] {
            assert!(is_hostname(good), "{good}");
        }
        let long_label = format!("{}.example.com", "a".repeat(64));
        for bad in [
            "",
            "API.example.com",
            "api..example.com",
            "-api.example.com",
            "a.*.example.com",
            "api.example.com.",
            "api_1.example.com",
            long_label.as_str(),
        ] {
            assert!(!is_hostname(bad), "{bad}");
        }
        assert_eq!(
            unique([" API.example.com. ", "api.example.com", "", "b.example.com"]),
            ["api.example.com", "b.example.com"]
        );
    }

    #[test]
    fn ips_give_a_and_aaaa_records_and_a_hostname_a_cname() {
        let lb = lb(Some(dns(&["api.example.com"])), None);
        let names = hostnames(&lb);
        let options = RecordOptions::of(&lb);
        let dual = records(
            &options,
            &names,
            &[
                LoadBalancerAddress::ip("2001:db8::1"),
                LoadBalancerAddress::ip("192.0.2.1"),
                LoadBalancerAddress::ip("192.0.2.2"),
                LoadBalancerAddress::hostname("lb.example.net"),
            ],
        );
        let shape: Vec<_> = dual
            .iter()
            .map(|e| {
                (
                    e.dns_name.as_str(),
                    e.record_type.as_str(),
                    e.targets.clone(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                (
                    "api.example.com",
                    "A",
                    vec!["192.0.2.1".to_string(), "192.0.2.2".to_string()]
                ),
                ("api.example.com", "AAAA", vec!["2001:db8::1".to_string()]),
            ]
        );
        assert_eq!(dual[0].record_ttl, Some(60));
        assert_eq!(dual[0].set_identifier.as_deref(), Some("eu"));
        assert_eq!(
            dual[0].provider_specific[0].name,
            "aws/evaluate-target-health"
        );
        let cname = records(
            &options,
            &names,
            &[LoadBalancerAddress::hostname("lb.example.net")],
        );
        assert_eq!(
            (cname[0].record_type.as_str(), cname[0].targets.clone()),
            ("CNAME", vec!["lb.example.net".to_string()])
        );
        assert!(records(&options, &names, &[]).is_empty());
    }

    #[test]
    fn the_dns_endpoint_is_named_labelled_and_owned_like_the_load_balancer() {
        let lb = lb(Some(dns(&["api.example.com"])), None);
        let planned = plan(&Owner::of(&lb).unwrap(), Vec::new());
        assert_eq!(planned.name_any(), "cp");
        assert_eq!(planned.namespace().as_deref(), Some("ns"));
        assert_eq!(
            planned.labels().get("dns").map(String::as_str),
            Some("public")
        );
        assert_eq!(
            planned.labels().get(LABEL_LB_NAME).map(String::as_str),
            Some("cp")
        );
        assert!(owned_by(&planned, "lb-uid"));
    }

    #[test]
    fn a_name_another_owner_publishes_is_left_to_it_and_a_tie_goes_to_the_older() {
        let lb = lb(Some(dns(&["api.example.com", "free.example.com"])), None);
        let names = hostnames(&lb);
        let other = |uid: &str, created: i64| {
            let mut o = plan(
                &Owner::of(&lb).unwrap(),
                vec![Endpoint {
                    dns_name: "API.example.com.".into(),
                    record_type: "A".into(),
                    targets: vec!["192.0.2.9".into()],
                    ..Default::default()
                }],
            );
            o.metadata.name = Some("other".into());
            o.metadata.owner_references = Some(vec![OwnerReference {
                uid: uid.into(),
                controller: Some(true),
                ..Default::default()
            }]);
            o.metadata.creation_timestamp = Some(Time(
                jiff::Timestamp::from_second(1_800_000_000 + created).unwrap(),
            ));
            o
        };
        let mut ours = plan(&Owner::of(&lb).unwrap(), Vec::new());
        ours.metadata.creation_timestamp =
            Some(Time(jiff::Timestamp::from_second(1_800_000_100).unwrap()));
        let theirs = [("api.example.com".to_string(), "ns/other".to_string())];
        // A name only they publish is theirs, however old ours is; without ours too.
        assert_eq!(
            claimed_elsewhere(&names, &[other("x", 200)], "lb-uid", Some(&ours)),
            theirs
        );
        assert_eq!(
            claimed_elsewhere(&names, &[other("x", 200)], "lb-uid", None),
            theirs
        );
        // A name both publish goes to the older DNSEndpoint.
        ours.spec.endpoints = other("lb-uid", 0).spec.endpoints;
        assert_eq!(
            claimed_elsewhere(&names, &[other("x", 0)], "lb-uid", Some(&ours)),
            theirs
        );
        assert!(claimed_elsewhere(&names, &[other("x", 200)], "lb-uid", Some(&ours)).is_empty());
        // Our own DNSEndpoint is no conflict.
        assert!(claimed_elsewhere(&names, &[other("lb-uid", 0)], "lb-uid", Some(&ours)).is_empty());
    }

    #[test]
    fn the_condition_follows_what_external_dns_observed() {
        let lb = lb(Some(dns(&["api.example.com"])), None);
        let mut stored = plan(
            &Owner::of(&lb).unwrap(),
            records(
                &RecordOptions::of(&lb),
                &hostnames(&lb),
                &[LoadBalancerAddress::ip("192.0.2.1")],
            ),
        );
        stored.metadata.generation = Some(2);
        let reason = |s: &DNSEndpoint, conflicts: &[(String, String)], none: bool| {
            let c = crate::conditions::dns_condition(&state(s, conflicts.to_vec(), none));
            (c.status, c.reason)
        };
        assert_eq!(reason(&stored, &[], false), (false, r::DNS_NOT_OBSERVED));
        stored.status = Some(capi_lb_api::externaldns::DNSEndpointStatus {
            observed_generation: Some(1),
            ..Default::default()
        });
        assert_eq!(reason(&stored, &[], false).1, r::DNS_NOT_OBSERVED);
        stored.status.as_mut().unwrap().observed_generation = Some(2);
        assert_eq!(reason(&stored, &[], false), (true, r::DNS_RECORDS_OBSERVED));
        assert_eq!(reason(&stored, &[], true).1, r::WAITING_FOR_ADDRESS);
        let conflict = [("api.example.com".to_string(), "ns/other".to_string())];
        assert_eq!(reason(&stored, &conflict, false).1, r::HOSTNAME_CONFLICT);
    }
}
