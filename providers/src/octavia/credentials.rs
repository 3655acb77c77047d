//! The credentials of an `OctaviaLoadBalancer`: where they are ([`CredentialsRef`]), the cloud's
//! configuration read from the `clouds.yaml` in its Secret, and the CA bundle beside it (used from
//! memory by the session's HTTP client; never written to disk).

use k8s_openapi::api::core::v1::Secret;
use openstack_sdk::config::{CloudConfig, ConfigFile};

use super::reason;
use super::stop::{Stop, wait};

/// Where the credentials are, as the OctaviaLoadBalancer says.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CredentialsRef {
    /// Namespace of the OctaviaLoadBalancer (and of the Secret: no other is read).
    pub namespace: String,
    /// Secret name.
    pub secret: String,
    /// Key of the `clouds.yaml`.
    pub key: String,
    /// Cloud name in it.
    pub cloud: String,
    /// Region override.
    pub region: Option<String>,
    /// Key of a CA bundle in the same Secret.
    pub ca_bundle_key: Option<String>,
}

fn secret_value(secret: &Secret, key: &str) -> Option<Vec<u8>> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|s| s.clone().into_bytes())
        })
}

/// The cloud's configuration from the Secret, and the CA bundle it names (`caBundleKey`). Errors
/// never quote the Secret's content.
pub(super) fn cloud_config(
    secret: &Secret,
    credentials: &CredentialsRef,
) -> Result<(CloudConfig, Option<Vec<u8>>), Stop> {
    let at = format!(
        "Secret {}/{} key {}",
        credentials.namespace, credentials.secret, credentials.key
    );
    let Some(bytes) = secret_value(secret, &credentials.key) else {
        return Err(wait(
            reason::CREDENTIALS_INVALID,
            format!("{at} does not exist"),
        ));
    };
    let text = String::from_utf8(bytes)
        .map_err(|_| wait(reason::CREDENTIALS_INVALID, format!("{at} is not UTF-8")))?;
    let file: ConfigFile = serde_saphyr::from_str(&text).map_err(|_| {
        wait(
            reason::CREDENTIALS_INVALID,
            format!(
                "{at} is not a valid clouds.yaml (a `clouds:` map of cloud name to auth settings)"
            ),
        )
    })?;
    let mut config = file
        .get_cloud_config(&credentials.cloud)
        .ok()
        .flatten()
        .ok_or_else(|| {
            // How many, not their names: the Secret may be one its author cannot read.
            let available = file.get_available_clouds().len();
            wait(
                reason::CREDENTIALS_INVALID,
                format!(
                    "{at} has no cloud named {:?} (it has {available} other clouds)",
                    credentials.cloud
                ),
            )
        })?;
    if let Some(region) = &credentials.region {
        config.region_name = Some(region.clone());
    }
    config.auth_cache = Some(false);
    // A CA bundle only ever comes from the Secret: a `cacert` path in the clouds.yaml would name
    // a file on the controller's own filesystem.
    config.cacert = None;
    let Some(ca_key) = &credentials.ca_bundle_key else {
        return Ok((config, None));
    };
    let Some(pem) = secret_value(secret, ca_key) else {
        return Err(wait(
            reason::CREDENTIALS_INVALID,
            format!(
                "Secret {}/{} has no key {ca_key} (caBundleKey)",
                credentials.namespace, credentials.secret
            ),
        ));
    };
    if pem.len() > MAX_CA_BUNDLE {
        return Err(wait(
            reason::CREDENTIALS_INVALID,
            format!(
                "Secret {}/{} key {ca_key} (caBundleKey) has {} bytes; a CA bundle has at most {MAX_CA_BUNDLE}",
                credentials.namespace,
                credentials.secret,
                pem.len()
            ),
        ));
    }
    Ok((config, Some(pem)))
}

/// The largest CA bundle accepted: a bundle of every public root CA is about 220 KB.
const MAX_CA_BUNDLE: usize = 1 << 20;
