//! Who holds a DNS name: capi-lb's `DNSEndpoint`s (from the watch's cache, which exists where the
//! kind is served and saves a list of every namespace's on each pass; else listed), and the rule
//! that decides between two owners of one name.

use capi_lb_api::constants::{LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use capi_lb_api::externaldns::DNSEndpoint;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::core::DynamicObject;

use crate::cache::ObjectCache;
use crate::error::{Result, kube_err};

/// capi-lb's `DNSEndpoint`s in every namespace, and the one `namespace/name` (whoever made it);
/// `None` when the kind is not served.
pub(super) async fn read(
    client: &kube::Client,
    cache: Option<&ObjectCache>,
    namespace: &str,
    name: &str,
) -> Result<Option<(Vec<DNSEndpoint>, Option<DNSEndpoint>)>> {
    let ours = |o: &DynamicObject| {
        o.labels().get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY_VALUE)
    };
    let listed = match cache.and_then(|c| c.list_everywhere_as::<DNSEndpoint>(ours)) {
        Some(listed) => listed,
        // A list of a kind that is not served answers 404 (a get of one object cannot tell that
        // from a missing object).
        None => match Api::<DNSEndpoint>::all(client.clone())
            .list(&ListParams::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}")))
            .await
        {
            Ok(list) => list.items,
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
            Err(e) => return Err(kube_err("list", "DNSEndpoints".to_string())(e)),
        },
    };
    // Ours is in that list when it carries our label; one without it (a foreign object of that
    // name) is read from the cache or the API.
    let found = listed
        .iter()
        .find(|o| o.namespace().as_deref() == Some(namespace) && o.name_any() == name)
        .cloned();
    let existing = match (found, cache.and_then(|c| c.get(namespace, name))) {
        (Some(found), _) => Some(found),
        (None, Some(Some(cached))) => crate::cache::typed(cached),
        (None, _) => Api::<DNSEndpoint>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(kube_err("get", format!("DNSEndpoint {namespace}/{name}")))?,
    };
    Ok(Some((listed, existing)))
}

/// Whether `object` is owned (as controller) by the object with UID `uid`.
pub(super) fn owned_by(object: &DNSEndpoint, uid: &str) -> bool {
    object
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// The hostnames among `names` that another owner's `DNSEndpoint` holds, with that
/// `DNSEndpoint`'s namespace/name. The one that publishes a name keeps it: a name only elsewhere is
/// theirs, a name only in `ours` is ours. A name in both (two owners wrote at once) goes to the
/// earlier `DNSEndpoint` (creation time, then namespace and name), which both sides agree on.
pub(super) fn claimed_elsewhere(
    names: &[String],
    listed: &[DNSEndpoint],
    uid: &str,
    ours: Option<&DNSEndpoint>,
) -> Vec<(String, String)> {
    let rank = |o: &DNSEndpoint| {
        (
            o.metadata.creation_timestamp.as_ref().map(|t| t.0),
            o.namespace(),
            o.name_any(),
        )
    };
    let holds = |o: &DNSEndpoint, name: &str| {
        o.spec
            .endpoints
            .iter()
            .any(|e| e.dns_name.trim_end_matches('.').eq_ignore_ascii_case(name))
    };
    let mut out: Vec<(String, String)> = Vec::new();
    for other in listed.iter().filter(|o| !owned_by(o, uid)) {
        for name in names {
            let theirs = holds(other, name)
                && ours.is_none_or(|ours| !holds(ours, name) || rank(other) < rank(ours));
            if theirs && !out.iter().any(|(n, _)| n == name) {
                let owner = other
                    .namespace()
                    .map(|ns| format!("{ns}/{}", other.name_any()))
                    .unwrap_or_else(|| other.name_any());
                out.push((name.clone(), owner));
            }
        }
    }
    out
}
