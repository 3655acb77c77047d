//! The address policy: which addresses capi-lb may publish anywhere (a `-ext` EndpointSlice, the
//! ingress of a Service of its class, a `DNSEndpoint`, a Cluster's control-plane endpoint). An
//! address a provider reports comes from where a tenant may point it (an in-memory pool, a kube-dc
//! or OpenStack endpoint of their choosing), and a published address steers other tenants' traffic
//! (cluster DNS, kube-proxy for a Service's ingress: the CVE-2020-8554 class), so it is checked
//! against rules the platform admin owns, pure and in one place:
//!
//! - built in, always: loopback, link-local (the cloud metadata address 169.254.169.254 among
//!   them), unspecified, multicast and broadcast addresses, and any ClusterIP of the cluster;
//! - `--address-deny`: ranges no one may publish (the cluster's Service and Pod ranges, say);
//! - `--address-allow=<provider>=<CIDR>`: where a provider's addresses must be, once it has any;
//! - the namespace's annotation `loadbalancer.cluster.x-k8s.io/allowed-addresses` (CIDRs, set by
//!   the admin on the Namespace, which tenants cannot edit): where its addresses must be.
//!
//! Every check is made on the canonical form of an address ([`canonical_ip`]): an IPv4-mapped IPv6
//! address (`::ffff:127.0.0.1`) is the IPv4 address it maps, and is refused or allowed as that
//! address (it had passed every rule as an IPv6 address none of them named). The LoadBalancer
//! controller publishes canonical forms only: a provider's addresses are made canonical once, where
//! its answer is read.
//!
//! A hostname cannot be checked this way and is not refused here; the addresses capi-lb resolves a
//! hostname to itself (`spec.workloadEndpoints`, [`crate::workload::hostnames`]) are.

use std::collections::BTreeMap;
use std::net::IpAddr;

use capi_lb_api::loadbalancer::{AddressType, LoadBalancerAddress};
use ipnet::IpNet;

/// The admin's rules besides the built-in ones (flags of `capi-lb run`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddressPolicy {
    /// Ranges no address may be in.
    pub deny: Vec<IpNet>,
    /// Per provider name, the ranges its addresses must be in (a provider without an entry may
    /// publish any address no other rule refuses).
    pub allow: BTreeMap<String, Vec<IpNet>>,
    /// Loopback addresses are not refused (`--address-allow-loopback`): for a single-host lab or
    /// a test whose API servers listen on 127.0.0.x, never for a shared management cluster.
    pub loopback: bool,
}

/// An address refused, and the rule that refused it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The address.
    pub address: String,
    /// The rule, in words (for conditions and Events).
    pub rule: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.address, self.rule)
    }
}

/// What an address is checked against besides the admin's flags.
#[derive(Clone, Copy)]
pub struct Context<'a> {
    /// The provider that reported it (`None`: a Service's ingress, written by whatever implements
    /// the Service).
    pub provider: Option<&'a str>,
    /// The namespace's allow-list (its annotation), if it has one.
    pub namespace_allow: Option<&'a [IpNet]>,
    /// Whether an IP is a ClusterIP of the cluster.
    pub is_cluster_ip: &'a dyn Fn(IpAddr) -> bool,
}

/// The annotation on a Namespace that lists the ranges its LoadBalancers' addresses must be in
/// (comma-separated CIDRs).
pub const ANNOTATION_ALLOWED_ADDRESSES: &str = "loadbalancer.cluster.x-k8s.io/allowed-addresses";

/// The canonical form of `ip`: an IPv4-mapped IPv6 address is the IPv4 address it maps.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// `address` in its canonical form: an IP as [`canonical_ip`] writes it (`::FFFF:10.0.0.1` is
/// `10.0.0.1`, `2001:DB8::0:1` is `2001:db8::1`); a hostname, or an IP that does not parse, as it is.
pub fn canonical(address: &LoadBalancerAddress) -> LoadBalancerAddress {
    match address.address.parse::<IpAddr>() {
        Ok(ip) if address.type_ == AddressType::Ip => LoadBalancerAddress {
            address: canonical_ip(ip).to_string(),
            ..address.clone()
        },
        _ => address.clone(),
    }
}

/// Why an IP may never be published, whatever the admin says (checked on its canonical form).
pub fn builtin(ip: IpAddr) -> Option<&'static str> {
    let ip = canonical_ip(ip);
    if ip.is_loopback() {
        return Some("loopback");
    }
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_multicast() {
        return Some("multicast");
    }
    match ip {
        IpAddr::V4(v4) if v4.is_link_local() => {
            Some("link-local, where the cloud metadata address 169.254.169.254 is")
        }
        IpAddr::V4(v4) if v4.is_broadcast() => Some("broadcast"),
        IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80 => Some("link-local"),
        _ => None,
    }
}

/// The ranges of a Namespace's [`ANNOTATION_ALLOWED_ADDRESSES`]; `Err` with what does not parse
/// (then nothing is allowed: an admin's typo must not open the namespace up).
pub fn namespace_allow(value: &str) -> Result<Vec<IpNet>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<IpNet>()
                .map_err(|e| format!("{ANNOTATION_ALLOWED_ADDRESSES}: {s:?} is not a CIDR: {e}"))
        })
        .collect()
}

impl AddressPolicy {
    /// The addresses among `addresses` that may not be published, each with its rule.
    pub fn refusals(
        &self,
        addresses: &[LoadBalancerAddress],
        context: Context<'_>,
    ) -> Vec<Refusal> {
        addresses
            .iter()
            .filter(|a| a.type_ == AddressType::Ip)
            .filter_map(|a| {
                self.check(&a.address, context).err().map(|rule| Refusal {
                    address: a.address.clone(),
                    rule,
                })
            })
            .collect()
    }

    /// Whether the IP `address` may be published; `Err` with the rule that refuses it.
    pub fn check(&self, address: &str, context: Context<'_>) -> Result<(), String> {
        let ip: IpAddr = address
            .parse()
            .map(canonical_ip)
            .map_err(|_| "not an IP address".to_string())?;
        if let Some(why) = builtin(ip).filter(|_| !(self.loopback && ip.is_loopback())) {
            return Err(why.to_string());
        }
        if (context.is_cluster_ip)(ip) {
            return Err("a ClusterIP of this cluster".into());
        }
        if let Some(range) = self.deny.iter().find(|r| r.contains(&ip)) {
            return Err(format!("in {range}, which --address-deny refuses"));
        }
        if let Some(provider) = context.provider
            && let Some(allowed) = self.allow.get(provider)
            && !allowed.iter().any(|r| r.contains(&ip))
        {
            return Err(format!(
                "outside what --address-allow lets the {provider} provider publish ({})",
                list(allowed)
            ));
        }
        if let Some(allowed) = context.namespace_allow
            && !allowed.iter().any(|r| r.contains(&ip))
        {
            return Err(format!(
                "outside the namespace's {ANNOTATION_ALLOWED_ADDRESSES} ({})",
                if allowed.is_empty() {
                    "none".to_string()
                } else {
                    list(allowed)
                }
            ));
        }
        Ok(())
    }
}

fn list(ranges: &[IpNet]) -> String {
    ranges
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn context<'a>(
        provider: Option<&'a str>,
        namespace_allow: Option<&'a [IpNet]>,
        is_cluster_ip: &'a dyn Fn(IpAddr) -> bool,
    ) -> Context<'a> {
        Context {
            provider,
            namespace_allow,
            is_cluster_ip,
        }
    }

    #[test]
    fn built_in_refusals_hold_whatever_the_admin_allows() {
        let policy = AddressPolicy {
            allow: [("inmemory".to_string(), nets(&["0.0.0.0/0", "::/0"]))].into(),
            ..Default::default()
        };
        let none = |_: IpAddr| false;
        let c = context(Some("inmemory"), None, &none);
        for (address, rule) in [
            ("169.254.169.254", "metadata"),
            ("127.0.0.1", "loopback"),
            ("::1", "loopback"),
            ("0.0.0.0", "unspecified"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("fe80::1", "link-local"),
            ("not-an-ip", "not an IP"),
        ] {
            let refused = policy.check(address, c).unwrap_err();
            assert!(refused.contains(rule), "{address}: {refused}");
        }
        assert_eq!(policy.check("203.0.113.7", c), Ok(()));
        // A lab's admin lets loopback through, and nothing else.
        let lab = AddressPolicy {
            loopback: true,
            ..policy
        };
        assert_eq!(lab.check("127.0.0.2", c), Ok(()));
        assert_eq!(lab.check("::1", c), Ok(()));
        assert!(lab.check("169.254.169.254", c).is_err());
    }

    #[test]
    fn an_ipv4_mapped_address_is_judged_as_the_address_it_maps() {
        let policy = AddressPolicy {
            deny: nets(&["10.96.0.0/12"]),
            allow: [("inmemory".to_string(), nets(&["203.0.113.0/24"]))].into(),
            ..Default::default()
        };
        let cluster_ip = |ip: IpAddr| ip == "10.100.0.1".parse::<IpAddr>().unwrap();
        let c = context(Some("inmemory"), None, &cluster_ip);
        for address in [
            "127.0.0.1",
            "169.254.169.254",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "10.96.0.1",
            "10.100.0.1",
            "198.51.100.1",
        ] {
            let mapped = format!("::ffff:{address}");
            let upper = format!("::FFFF:{address}");
            let plain = policy.check(address, c).unwrap_err();
            assert_eq!(policy.check(&mapped, c), Err(plain.clone()), "{mapped}");
            assert_eq!(policy.check(&upper, c), Err(plain), "{upper}");
        }
        assert_eq!(policy.check("::ffff:203.0.113.9", c), Ok(()));
        assert_eq!(
            canonical(&LoadBalancerAddress::ip("::ffff:203.0.113.9")).address,
            "203.0.113.9"
        );
        assert_eq!(
            canonical(&LoadBalancerAddress::ip("2001:DB8::0:1")).address,
            "2001:db8::1"
        );
        assert_eq!(
            canonical(&LoadBalancerAddress::hostname("lb.example.com")).address,
            "lb.example.com"
        );
    }

    #[test]
    fn cluster_ips_denied_ranges_and_allow_lists_refuse() {
        let policy = AddressPolicy {
            deny: nets(&["10.96.0.0/12"]),
            allow: [("octavia".to_string(), nets(&["198.51.100.0/24"]))].into(),
            loopback: false,
        };
        let cluster_ip = |ip: IpAddr| ip == "10.0.0.1".parse::<IpAddr>().unwrap();
        let octavia = context(Some("octavia"), None, &cluster_ip);
        assert!(
            policy
                .check("10.0.0.1", octavia)
                .unwrap_err()
                .contains("ClusterIP")
        );
        assert!(
            policy
                .check("10.96.4.2", octavia)
                .unwrap_err()
                .contains("--address-deny")
        );
        assert!(
            policy
                .check("203.0.113.7", octavia)
                .unwrap_err()
                .contains("198.51.100.0/24")
        );
        assert_eq!(policy.check("198.51.100.9", octavia), Ok(()));
        // Another provider has no allow-list.
        let kubedc = context(Some("kubedc"), None, &cluster_ip);
        assert_eq!(policy.check("203.0.113.7", kubedc), Ok(()));
        // The namespace's list applies on top of the provider's.
        let tight = nets(&["198.51.100.128/25"]);
        let namespaced = context(Some("octavia"), Some(&tight), &cluster_ip);
        assert!(
            policy
                .check("198.51.100.9", namespaced)
                .unwrap_err()
                .contains("allowed-addresses")
        );
        assert_eq!(policy.check("198.51.100.200", namespaced), Ok(()));
        // An annotation that allows nothing refuses everything.
        let empty: Vec<IpNet> = Vec::new();
        let closed = context(Some("kubedc"), Some(&empty), &cluster_ip);
        assert!(
            policy
                .check("203.0.113.7", closed)
                .unwrap_err()
                .contains("none")
        );
    }

    #[test]
    fn refusals_name_each_refused_ip_and_leave_hostnames() {
        let policy = AddressPolicy::default();
        let none = |_: IpAddr| false;
        let refused = policy.refusals(
            &[
                LoadBalancerAddress::ip("203.0.113.7"),
                LoadBalancerAddress::ip("169.254.169.254"),
                LoadBalancerAddress::hostname("lb.example.com"),
            ],
            context(Some("inmemory"), None, &none),
        );
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].address, "169.254.169.254");
        assert!(
            refused[0]
                .to_string()
                .starts_with("169.254.169.254 (link-local")
        );
    }

    #[test]
    fn a_namespace_annotation_that_does_not_parse_is_an_error() {
        assert_eq!(
            namespace_allow(" 198.51.100.0/24, 2001:db8::/64 ").unwrap(),
            nets(&["198.51.100.0/24", "2001:db8::/64"])
        );
        assert!(namespace_allow("198.51.100.0/24,nope").is_err());
        assert!(namespace_allow("").unwrap().is_empty());
    }
}
