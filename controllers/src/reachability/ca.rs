//! The Cluster CAs a probe checks a kube-apiserver's certificate against (`tls.crt` of the Secret
//! `<clusterName>-ca`): read again every [`CA_FRESH`], at most [`CA_MAX`] each, and at most
//! [`CA_CACHE_MAX`] kept, whatever names the tenants' LoadBalancers ask for.

use std::collections::HashMap;
use std::sync::PoisonError;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use super::{Prober, ReadCa};

/// How long a Cluster's CA read from its Secret is used before it is read again.
pub const CA_FRESH: Duration = Duration::from_secs(300);
/// The most CAs kept (each at most [`CA_MAX`]): the Secrets' names are the tenants' to choose, so
/// the cache is bounded by count and age, not by the names asked for.
pub const CA_CACHE_MAX: usize = 256;
/// The largest CA bundle used (a Cluster's CA is one certificate, a few KiB): a larger one is not
/// kept, and the probe does not check certificates (and says so).
pub const CA_MAX: usize = 64 << 10;
impl Prober {
    /// The CA bundle (PEM) of Secret `namespace/name`, key `tls.crt`, from the last read when it is
    /// fresh. `None` when the Secret or the key is missing or cannot be read (the probe then does
    /// not check certificates, and says so).
    pub(super) async fn ca(&self, namespace: &str, name: &str) -> Option<Vec<u8>> {
        let key = (namespace.to_string(), name.to_string());
        if let Some((read, pem)) = self
            .cas
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            && read.elapsed() < CA_FRESH
        {
            return pem.clone();
        }
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let pem = match secrets.get_opt(name).await {
            Ok(found) => found
                .and_then(|s| s.data)
                .and_then(|d| d.get("tls.crt").map(|b| b.0.clone()))
                .filter(|pem| pem.len() <= CA_MAX),
            Err(e) => {
                tracing::debug!(namespace, secret = name, error = %e, "reading the Cluster's CA");
                None
            }
        };
        let mut cas = self.cas.lock().unwrap_or_else(PoisonError::into_inner);
        keep_ca(&mut cas, key, pem.clone(), Instant::now());
        pem
    }

    /// CAs kept now (for tests of the bound).
    pub fn cas_kept(&self) -> usize {
        self.cas
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// The bytes of the CAs kept now (for tests of the bound).
    pub fn ca_bytes_kept(&self) -> usize {
        self.cas
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .map(|(_, pem)| pem.as_ref().map_or(0, Vec::len))
            .sum()
    }
}

/// Keep `pem` for `key` read at `now` in `cas`: stale entries go first, then the oldest while
/// there are [`CA_CACHE_MAX`].
fn keep_ca(
    cas: &mut HashMap<(String, String), ReadCa>,
    key: (String, String),
    pem: Option<Vec<u8>>,
    now: Instant,
) {
    cas.retain(|_, (read, _)| now.saturating_duration_since(*read) < CA_FRESH);
    while cas.len() >= CA_CACHE_MAX {
        let Some(oldest) = cas
            .iter()
            .min_by_key(|(_, (read, _))| *read)
            .map(|(k, _)| k.clone())
        else {
            break;
        };
        cas.remove(&oldest);
    }
    cas.insert(key, (now, pem));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_cache_is_bounded_by_count_and_age_whatever_names_are_asked() {
        let mut cas = HashMap::new();
        let start = Instant::now();
        // A tenant cycles through CA Secret names, a megabyte each were they kept whole.
        for i in 0..1_000 {
            let key = ("tenant".to_string(), format!("cluster-{i}-ca"));
            keep_ca(
                &mut cas,
                key,
                Some(vec![0; 16]),
                start + Duration::from_millis(i),
            );
            assert!(cas.len() <= CA_CACHE_MAX);
        }
        assert_eq!(cas.len(), CA_CACHE_MAX);
        // The most recent are the ones kept.
        assert!(cas.contains_key(&("tenant".to_string(), "cluster-999-ca".to_string())));
        assert!(!cas.contains_key(&("tenant".to_string(), "cluster-0-ca".to_string())));
        // Past CA_FRESH, one more read leaves only itself.
        let later = start + CA_FRESH + Duration::from_secs(2);
        keep_ca(&mut cas, ("a".into(), "b".into()), None, later);
        assert_eq!(cas.len(), 1);
    }
}
