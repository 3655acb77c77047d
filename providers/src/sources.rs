//! Source ranges: the CIDRs a LoadBalancer lets connect (`spec.sourceRanges`), within what its
//! infrastructure object allows. The infrastructure object is usually the platform team's and the
//! LoadBalancer (or the Service of capi-lb's class behind it) the user's, so a user can narrow what
//! the platform allows but never widen it.

use ipnet::IpNet;

use crate::error::{INVALID_CONFIGURATION, ProviderError};

/// The ranges to enforce: `requested` when it has any, each of which must lie within one of
/// `allowed` when that has any (`allowed_by` names it for the error, e.g. "ServiceLoadBalancer
/// metal's loadBalancerSourceRanges"); otherwise `allowed`. Empty allows every source.
pub fn within(
    allowed: &[String],
    requested: &[String],
    allowed_by: &str,
) -> Result<Vec<String>, ProviderError> {
    if requested.is_empty() {
        return Ok(allowed.to_vec());
    }
    if allowed.is_empty() {
        return Ok(requested.to_vec());
    }
    let parse = |c: &String| c.trim().parse::<IpNet>().ok();
    let outer: Vec<IpNet> = allowed.iter().filter_map(parse).collect();
    let outside: Vec<&str> = requested
        .iter()
        .filter(|r| parse(r).is_none_or(|inner| !outer.iter().any(|o| o.contains(&inner))))
        .map(String::as_str)
        .collect();
    if outside.is_empty() {
        return Ok(requested.to_vec());
    }
    Err(ProviderError::permanent(
        INVALID_CONFIGURATION,
        format!(
            "the LoadBalancer's source ranges {} are not within {allowed_by} ({}); narrow them, or widen the latter",
            outside.join(", "),
            allowed.join(", ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn requested_ranges_apply_within_the_allowed_ones() {
        let none: Vec<String> = Vec::new();
        let allowed = ranges(&["10.0.0.0/8", "2001:db8::/32"]);
        assert_eq!(within(&none, &none, "x").unwrap(), none);
        assert_eq!(
            within(&none, &ranges(&["0.0.0.0/0"]), "x").unwrap(),
            ranges(&["0.0.0.0/0"])
        );
        assert_eq!(within(&allowed, &none, "x").unwrap(), allowed);
        let narrower = ranges(&["10.1.0.0/16", "2001:db8:1::/48", "10.0.0.0/8"]);
        assert_eq!(within(&allowed, &narrower, "x").unwrap(), narrower);
        let err = within(
            &allowed,
            &ranges(&["10.1.0.0/16", "192.0.2.0/24", "0.0.0.0/0", "garbage"]),
            "ServiceLoadBalancer metal's loadBalancerSourceRanges",
        )
        .unwrap_err();
        assert_eq!(
            err,
            ProviderError::permanent(
                INVALID_CONFIGURATION,
                "the LoadBalancer's source ranges 192.0.2.0/24, 0.0.0.0/0, garbage are not within ServiceLoadBalancer metal's loadBalancerSourceRanges (10.0.0.0/8, 2001:db8::/32); narrow them, or widen the latter"
            )
        );
    }
}
