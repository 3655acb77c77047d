//! The DNS name policy: which names a namespace may publish through ExternalDNS (a LoadBalancer's
//! `spec.dns`, a Service's `hostnames` annotation). On a shared cluster names are not first come,
//! first served: the platform admin says which domains each namespace owns.
//!
//! - `--dns-domains=<pattern>,...`: the domains of every namespace, `{namespace}` standing for its
//!   name (e.g. `{namespace}.tenants.example.com`);
//! - the Namespace's annotation `loadbalancer.cluster.x-k8s.io/dns-domains: "a.example.com,..."`
//!   (set by the admin, which tenants cannot edit): that namespace's domains instead;
//! - a name is allowed when it is one of the namespace's domains or under one;
//! - a wildcard (`*.x`) only with `--dns-wildcards` or the Namespace's annotation
//!   `loadbalancer.cluster.x-k8s.io/dns-wildcards: "true"`.
//!
//! Where the admin set neither the flag nor the annotation, every name is allowed (a cluster with
//! one tenant); a shared cluster sets `--dns-domains`.

/// The Namespace annotation with the namespace's DNS domains (comma-separated).
pub const ANNOTATION_DNS_DOMAINS: &str = "loadbalancer.cluster.x-k8s.io/dns-domains";
/// The Namespace annotation that allows the namespace wildcard names (`"true"`).
pub const ANNOTATION_DNS_WILDCARDS: &str = "loadbalancer.cluster.x-k8s.io/dns-wildcards";

/// The admin's DNS rules (flags of `capi-lb run`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamePolicy {
    /// The domains of every namespace, `{namespace}` standing for its name.
    pub domains: Vec<String>,
    /// Wildcard names are allowed in every namespace.
    pub wildcards: bool,
}

/// What a Namespace's annotations say (`None`: the annotation is not there).
#[derive(Clone, Copy, Debug, Default)]
pub struct NamespaceNames<'a> {
    /// Its [`ANNOTATION_DNS_DOMAINS`].
    pub domains: Option<&'a str>,
    /// Its [`ANNOTATION_DNS_WILDCARDS`].
    pub wildcards: Option<&'a str>,
}

impl NamePolicy {
    /// The names among `names` that namespace `namespace` may not publish, each with the rule.
    pub fn refusals(
        &self,
        names: &[String],
        namespace: &str,
        annotations: NamespaceNames<'_>,
    ) -> Vec<(String, String)> {
        names
            .iter()
            .filter_map(|name| {
                self.check(name, namespace, annotations)
                    .err()
                    .map(|rule| (name.clone(), rule))
            })
            .collect()
    }

    /// Whether namespace `namespace` may publish `name`; `Err` with the rule that refuses it.
    pub fn check(
        &self,
        name: &str,
        namespace: &str,
        annotations: NamespaceNames<'_>,
    ) -> Result<(), String> {
        let domains: Vec<String> = match annotations.domains {
            Some(listed) => listed
                .split(',')
                .map(|d| d.trim().trim_end_matches('.').to_lowercase())
                .filter(|d| !d.is_empty())
                .collect(),
            None => self
                .domains
                .iter()
                .map(|d| d.replace("{namespace}", namespace).to_lowercase())
                .collect(),
        };
        let wildcards = match annotations.wildcards {
            Some(value) => value.trim() == "true",
            None => self.wildcards,
        };
        let restricted = annotations.domains.is_some() || !self.domains.is_empty();
        let name = name.trim_end_matches('.').to_lowercase();
        let (wildcard, base) = match name.strip_prefix("*.") {
            Some(base) => (true, base.to_string()),
            None => (false, name.clone()),
        };
        if wildcard && restricted && !wildcards {
            return Err(format!(
                "a wildcard, which the namespace may not publish (--dns-wildcards, or the Namespace's {ANNOTATION_DNS_WILDCARDS})"
            ));
        }
        if !restricted {
            return Ok(());
        }
        let owned = domains
            .iter()
            .any(|d| base == *d || base.ends_with(&format!(".{d}")));
        if owned {
            Ok(())
        } else if domains.is_empty() {
            Err(format!(
                "the namespace may publish no DNS name (its {ANNOTATION_DNS_DOMAINS} is empty)"
            ))
        } else {
            Err(format!(
                "outside the namespace's DNS domains ({})",
                domains.join(", ")
            ))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn policy(domains: &[&str], wildcards: bool) -> NamePolicy {
        NamePolicy {
            domains: domains.iter().map(|d| d.to_string()).collect(),
            wildcards,
        }
    }

    #[test]
    fn a_namespace_publishes_its_domains_and_names_under_them() {
        let p = policy(&["{namespace}.tenants.example.com"], false);
        let none = NamespaceNames::default();
        assert_eq!(p.check("a.tenants.example.com", "a", none), Ok(()));
        assert_eq!(p.check("API.a.tenants.example.com.", "a", none), Ok(()));
        let refused = p.check("api.b.tenants.example.com", "a", none).unwrap_err();
        assert!(refused.contains("a.tenants.example.com"), "{refused}");
        // Not a suffix match on a label boundary.
        assert!(p.check("xa.tenants.example.com", "a", none).is_err());
        // Wildcards only where allowed.
        let wild = p.check("*.a.tenants.example.com", "a", none).unwrap_err();
        assert!(wild.contains("wildcard"), "{wild}");
        let allowed = NamespaceNames {
            wildcards: Some("true"),
            ..none
        };
        assert_eq!(p.check("*.a.tenants.example.com", "a", allowed), Ok(()));
        assert_eq!(
            policy(&["{namespace}.t.example"], true).check("*.a.t.example", "a", none),
            Ok(())
        );
    }

    #[test]
    fn the_namespace_annotation_replaces_the_flag_and_nothing_set_allows_all() {
        let p = policy(&["{namespace}.tenants.example.com"], false);
        let own = NamespaceNames {
            domains: Some("example.org, api.example.net"),
            wildcards: None,
        };
        assert_eq!(p.check("x.example.org", "a", own), Ok(()));
        assert!(p.check("a.tenants.example.com", "a", own).is_err());
        let empty = NamespaceNames {
            domains: Some(""),
            wildcards: None,
        };
        assert!(
            p.check("x.example.org", "a", empty)
                .unwrap_err()
                .contains("no DNS name")
        );
        // Nothing configured: a cluster with one tenant.
        let open = NamePolicy::default();
        assert_eq!(
            open.check("*.anything.example", "a", NamespaceNames::default()),
            Ok(())
        );
        assert_eq!(
            open.refusals(&["x.example".into()], "a", NamespaceNames::default()),
            Vec::<(String, String)>::new()
        );
    }
}
