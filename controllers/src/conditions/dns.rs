//! The `DNSPublished` condition: how the names of `spec.dns` (or of a Service's annotation)
//! stand in ExternalDNS.

use capi_lb_api::conditions::DesiredCondition;
use capi_lb_api::constants::{condition as c, reason as r};

use crate::publication::dns::DnsState;

/// The `DNSPublished` condition of `state`.
pub fn dns_condition(state: &DnsState) -> DesiredCondition {
    let false_ =
        |reason, message: String| DesiredCondition::false_(c::DNS_PUBLISHED, reason, message);
    match state {
        DnsState::CrdMissing => false_(
            r::DNS_ENDPOINT_CRD_MISSING,
            "ExternalDNS's DNSEndpoint CRD (dnsendpoints.externaldns.k8s.io) is not installed: install it with ExternalDNS (--source=crd), then restart capi-lb so that it watches DNSEndpoints".into(),
        ),
        DnsState::NameConflict { endpoint, owner } => false_(
            r::NAME_CONFLICT,
            format!(
                "DNSEndpoint {endpoint} exists and is not {owner}'s; it was left untouched. Delete or rename it"
            ),
        ),
        DnsState::Disabled => false_(
            r::DNS_DISABLED,
            "no DNS names are asked for: nothing is published".into(),
        ),
        DnsState::InvalidHostname(bad) => false_(
            r::INVALID_HOSTNAME,
            format!(
                "{bad:?} is not a DNS name (lowercase labels of letters, digits and '-', at most 253 characters, optionally under \"*.\"); nothing was changed"
            ),
        ),
        DnsState::NotAllowed(refused) => false_(
            r::HOSTNAME_NOT_ALLOWED,
            format!(
                "not published, the platform's DNS name policy refuses: {}; the other names are published",
                refused
                    .iter()
                    .map(|(n, rule)| format!("{n} ({rule})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        DnsState::HostnameConflict(conflicts) => false_(
            r::HOSTNAME_CONFLICT,
            format!(
                "not published, already published by another LoadBalancer's DNSEndpoint: {}",
                conflicts
                    .iter()
                    .map(|(n, o)| format!("{n} ({o})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        DnsState::NoAddress => false_(
            r::WAITING_FOR_ADDRESS,
            "the load balancer has no address yet: the DNSEndpoint has no records".into(),
        ),
        DnsState::Observed { endpoint, records } => DesiredCondition::true_(
            c::DNS_PUBLISHED,
            r::DNS_RECORDS_OBSERVED,
            format!("ExternalDNS processed DNSEndpoint {endpoint}: {records}"),
        ),
        DnsState::NotObserved {
            endpoint,
            generation,
        } => false_(
            r::DNS_NOT_OBSERVED,
            format!(
                "ExternalDNS has not processed DNSEndpoint {endpoint} (generation {generation}) yet: is it running with --source=crd (and a --label-filter matching spec.dns.labels)?"
            ),
        ),
    }
}
