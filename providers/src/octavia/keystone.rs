//! Keystone v3 as the Octavia provider uses it: the token request of the `clouds.yaml`'s
//! `auth_type` (password, application credential, or an existing token), the catalog in the answer,
//! and the versioned base URL of a service found in it.
//!
//! Everything is read through the session's [`Transport`](super::http::Transport), so the answers of
//! a Keystone (or of an Octavia or Neutron its catalog names) that a tenant chose are bounded in time
//! and size like every other answer.

use openstack_sdk::config::CloudConfig;
use reqwest::Url;
use secrecy::ExposeSecret;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::lenient::{Keep, List, Text};
use super::versions::Listed;

/// The `auth_type`s capi-lb authenticates with, as a `clouds.yaml` may spell them.
const PASSWORD: &[&str] = &["password", "v3password"];
const APPLICATION_CREDENTIAL: &[&str] = &[
    "v3applicationcredential",
    "applicationcredential",
    "application_credential",
];
const TOKEN: &[&str] = &["token", "v3token", "tokenv3"];

/// What to send to Keystone: where, and the request body (which holds the secret).
pub struct TokenRequest {
    /// `<auth_url>/auth/tokens` (with `/v3` added when `auth_url` has no version).
    pub url: Url,
    /// The `{"auth": ...}` body.
    pub body: Value,
}

/// The token request of `config`; the error says what is missing or unsupported, never a secret.
pub fn token_request(config: &CloudConfig) -> Result<TokenRequest, String> {
    let Some(auth) = &config.auth else {
        return Err("the cloud has no `auth` section".to_string());
    };
    let auth_url = auth
        .auth_url
        .as_deref()
        .ok_or("the cloud's auth has no auth_url")?;
    let url = tokens_url(auth_url)?;
    let auth_type = config.auth_type.as_deref().unwrap_or("password");
    let secret = |value: &Option<secrecy::SecretString>| {
        value.as_ref().map(|s| s.expose_secret().to_string())
    };
    let (identity, scoped) = if PASSWORD.contains(&auth_type) {
        let password = secret(&auth.password).ok_or("auth_type password needs a password")?;
        let mut user = named(
            "user",
            &auth.user_id,
            &auth.username,
            &auth.user_domain_id,
            &auth.user_domain_name,
        )?;
        user.insert("password".into(), password.into());
        (
            json!({"methods": ["password"], "password": {"user": user}}),
            true,
        )
    } else if APPLICATION_CREDENTIAL.contains(&auth_type) {
        let secret = secret(&auth.application_credential_secret)
            .ok_or("auth_type v3applicationcredential needs application_credential_secret")?;
        let mut credential = Map::new();
        if let Some(id) = &auth.application_credential_id {
            credential.insert("id".into(), id.clone().into());
        } else if let Some(name) = &auth.application_credential_name {
            credential.insert("name".into(), name.clone().into());
            let user = named(
                "user",
                &auth.user_id,
                &auth.username,
                &auth.user_domain_id,
                &auth.user_domain_name,
            )?;
            credential.insert("user".into(), Value::Object(user));
        } else {
            return Err(
                "auth_type v3applicationcredential needs application_credential_id (or _name and the user)"
                    .to_string(),
            );
        }
        credential.insert("secret".into(), secret.into());
        // An application credential carries its own scope.
        (
            json!({"methods": ["application_credential"], "application_credential": credential}),
            false,
        )
    } else if TOKEN.contains(&auth_type) {
        let token = secret(&auth.token).ok_or("auth_type v3token needs a token")?;
        (json!({"methods": ["token"], "token": {"id": token}}), true)
    } else {
        return Err(format!(
            "auth_type {auth_type:?} is not one capi-lb supports (password, v3applicationcredential, v3token)"
        ));
    };
    let mut body = json!({"identity": identity});
    if scoped && let Some(scope) = scope(config)? {
        body["scope"] = scope;
    }
    Ok(TokenRequest {
        url,
        body: json!({ "auth": body }),
    })
}

/// `<auth_url>/auth/tokens`, with `/v3` added to an `auth_url` that names no version.
fn tokens_url(auth_url: &str) -> Result<Url, String> {
    let mut base = Url::parse(auth_url).map_err(|e| format!("auth_url is not a URL: {e}"))?;
    if !matches!(base.scheme(), "http" | "https") {
        return Err("auth_url is not an http(s) URL".to_string());
    }
    let path = base.path().trim_end_matches('/').to_string();
    let versioned = path.rsplit('/').next().is_some_and(|last| last == "v3");
    base.set_path(&if versioned {
        format!("{path}/auth/tokens")
    } else {
        format!("{path}/v3/auth/tokens")
    });
    base.set_query(None);
    Ok(base)
}

/// `{"id": id}` or `{"name": name, "domain": {...}}` of a user or project.
fn named(
    what: &str,
    id: &Option<String>,
    name: &Option<String>,
    domain_id: &Option<String>,
    domain_name: &Option<String>,
) -> Result<Map<String, Value>, String> {
    let mut object = Map::new();
    if let Some(id) = id {
        object.insert("id".into(), id.clone().into());
        return Ok(object);
    }
    let Some(name) = name else {
        return Err(format!(
            "the cloud's auth names no {what} (an id or a name)"
        ));
    };
    object.insert("name".into(), name.clone().into());
    let domain = match (domain_id, domain_name) {
        (Some(id), _) => json!({ "id": id }),
        (None, Some(name)) => json!({ "name": name }),
        (None, None) => {
            return Err(format!(
                "the {what} is named without a domain ({what}_domain_name or {what}_domain_id)"
            ));
        }
    };
    object.insert("domain".into(), domain);
    Ok(object)
}

/// The project (or domain) scope of `config`, if it names one.
fn scope(config: &CloudConfig) -> Result<Option<Value>, String> {
    let Some(auth) = &config.auth else {
        return Ok(None);
    };
    if auth.project_id.is_some() || auth.project_name.is_some() {
        // A project named without a domain is in the user's domain, as the OpenStack clients do.
        let domain_id = auth
            .project_domain_id
            .clone()
            .or_else(|| auth.user_domain_id.clone());
        let domain_name = auth
            .project_domain_name
            .clone()
            .or_else(|| auth.user_domain_name.clone());
        let project = named(
            "project",
            &auth.project_id,
            &auth.project_name,
            &domain_id,
            &domain_name,
        )?;
        return Ok(Some(json!({ "project": project })));
    }
    match (&auth.domain_id, &auth.domain_name) {
        (Some(id), _) => Ok(Some(json!({"domain": {"id": id}}))),
        (None, Some(name)) => Ok(Some(json!({"domain": {"name": name}}))),
        (None, None) => Ok(None),
    }
}

/// The URL of `service_type` in a token's catalog, for the `interface` (public unless the cloud
/// says otherwise) and, when given, the region.
pub fn endpoint(
    token: &Value,
    service_type: &str,
    interface: Option<&str>,
    region: Option<&str>,
) -> Option<Url> {
    let interface = interface
        .map(|i| i.trim_end_matches("URL"))
        .unwrap_or("public");
    token
        .pointer("/token/catalog")?
        .as_array()?
        .iter()
        .filter(|service| service.get("type").and_then(Value::as_str) == Some(service_type))
        .filter_map(|service| service.get("endpoints")?.as_array())
        .flatten()
        .filter(|ep| ep.get("interface").and_then(Value::as_str) == Some(interface))
        .filter(|ep| {
            region.is_none_or(|region| {
                ["region_id", "region"]
                    .iter()
                    .any(|k| ep.get(k).and_then(Value::as_str) == Some(region))
            })
        })
        .find_map(|ep| Url::parse(ep.get("url")?.as_str()?).ok())
}

/// The service types of the catalog the provider reads.
const KEPT_SERVICES: &[&str] = &["load-balancer", "network"];
/// The most services of one type, and endpoints of one service, kept of a catalog.
const KEPT_ENTRIES: usize = 16;

/// Keystone's token document as the provider reads it, parsed straight from the answer: its expiry
/// and, of the catalog's `load-balancer` and `network` services, the first [`KEPT_ENTRIES`] times
/// two, each with its first [`KEPT_ENTRIES`] endpoints (interface, region, URL). The parser visits
/// the services and endpoints one at a time and skips every other one and every other field, so a
/// catalog of any size (within the byte cap) costs what is kept; a field of another type reads as
/// absent.
#[derive(Debug, Default, Deserialize)]
pub struct TokenDocument {
    #[serde(default)]
    token: TokenBody,
}

#[derive(Debug, Default, Deserialize)]
struct TokenBody {
    #[serde(default)]
    expires_at: Text,
    #[serde(default)]
    catalog: List<CatalogService, { KEPT_ENTRIES * KEPT_SERVICES.len() }>,
}

#[derive(Debug, Default, Deserialize)]
struct CatalogService {
    #[serde(default, rename = "type")]
    type_: Text,
    #[serde(default)]
    endpoints: List<CatalogEndpoint, KEPT_ENTRIES>,
}

impl Keep for CatalogService {
    fn keep(&self) -> bool {
        self.type_
            .0
            .as_deref()
            .is_some_and(|t| KEPT_SERVICES.contains(&t))
    }
}

#[derive(Debug, Default, Deserialize)]
struct CatalogEndpoint {
    #[serde(default)]
    interface: Text,
    #[serde(default)]
    region: Text,
    #[serde(default)]
    region_id: Text,
    #[serde(default)]
    url: Text,
}

impl Keep for CatalogEndpoint {}

impl TokenDocument {
    /// When Keystone says the token expires (RFC 3339), if it said.
    pub fn expires_at(&self) -> Option<&str> {
        self.token.expires_at.0.as_deref()
    }

    /// What a session keeps of it, as [`endpoint`] reads it (a large public cloud's catalog is
    /// about 100 KB, this a few KiB; texts over 2 KiB are dropped).
    pub fn kept(&self) -> Value {
        let text = |t: &Text| {
            t.0.as_deref()
                .filter(|t| t.len() <= 2048)
                .map(|t| Value::String(t.to_string()))
        };
        let catalog: Vec<Value> = self
            .token
            .catalog
            .0
            .iter()
            .map(|service| {
                let endpoints: Vec<Value> = service
                    .endpoints
                    .0
                    .iter()
                    .map(|ep| {
                        let mut kept = Map::new();
                        for (key, value) in [
                            ("interface", &ep.interface),
                            ("region", &ep.region),
                            ("region_id", &ep.region_id),
                            ("url", &ep.url),
                        ] {
                            if let Some(v) = text(value) {
                                kept.insert(key.to_string(), v);
                            }
                        }
                        Value::Object(kept)
                    })
                    .collect();
                json!({"type": service.type_.0, "endpoints": endpoints})
            })
            .collect();
        json!({"token": {
            "expires_at": self.token.expires_at.0,
            "catalog": catalog,
        }})
    }
}

/// Whether `url`'s last path segment is a version of the `major` one (`v2`, `v2.0`, ...).
pub fn names_version(url: &Url, major: &str) -> bool {
    url.path()
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .is_some_and(|last| last == major || last.starts_with(&format!("{major}.")))
}

/// Where the version document of a service whose catalog URL is `catalog` is: the catalog URL, or,
/// when it already names version `major`, one segment up (the service's root).
pub fn document_url(catalog: &Url, major: &str) -> Url {
    if !names_version(catalog, major) {
        return catalog.clone();
    }
    let mut url = catalog.clone();
    let path = url.path().trim_end_matches('/');
    let parent = path
        .rsplit_once('/')
        .map_or("", |(parent, _)| parent)
        .to_string();
    url.set_path(&format!("{parent}/"));
    url
}

/// The base URL of version `major` (`v2`, `v2.0`) of a service whose catalog URL is `catalog`:
/// the catalog URL itself when it names that version; else the `self` link of the highest listed
/// version of that major in its version document (`listed`), or `catalog/<id>`, or
/// `catalog/<major>`.
pub fn service_base(listed: Option<&Listed>, catalog: &Url, major: &str) -> Url {
    if names_version(catalog, major) {
        return with_slash(catalog.clone());
    }
    let base = match listed {
        Some(listed) => listed
            .href
            .as_deref()
            .and_then(|href| Url::parse(href).ok())
            .unwrap_or_else(|| with_segment(catalog, &listed.id)),
        None => with_segment(catalog, major),
    };
    with_slash(base)
}

/// `url` with `segment` appended to its path.
fn with_segment(url: &Url, segment: &str) -> Url {
    let mut url = url.clone();
    let path = format!("{}/{segment}", url.path().trim_end_matches('/'));
    url.set_path(&path);
    url
}

/// `url` with a trailing slash, so that relative paths join under it.
fn with_slash(mut url: Url) -> Url {
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    url
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::octavia::versions::highest;

    fn config(yaml: &str) -> CloudConfig {
        let file: openstack_sdk::config::ConfigFile =
            serde_saphyr::from_str(yaml).expect("clouds.yaml");
        file.get_cloud_config("c").expect("cloud").expect("cloud c")
    }

    #[test]
    fn a_password_cloud_asks_for_a_project_scoped_token() {
        let request = token_request(&config(
            "clouds:\n  c:\n    auth:\n      auth_url: http://k:5000\n      username: u\n      password: p\n      user_domain_name: Default\n      project_name: demo\n",
        ))
        .expect("request");
        assert_eq!(request.url.as_str(), "http://k:5000/v3/auth/tokens");
        assert_eq!(
            request.body,
            json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
                "name": "u", "domain": {"name": "Default"}, "password": "p"}}},
                "scope": {"project": {"name": "demo", "domain": {"name": "Default"}}}}})
        );
    }

    #[test]
    fn an_application_credential_carries_its_own_scope() {
        let request = token_request(&config(
            "clouds:\n  c:\n    auth_type: v3applicationcredential\n    auth:\n      auth_url: https://k/identity/v3/\n      application_credential_id: a\n      application_credential_secret: s\n      project_name: ignored\n",
        ))
        .expect("request");
        assert_eq!(request.url.as_str(), "https://k/identity/v3/auth/tokens");
        assert_eq!(request.body["auth"].get("scope"), None);
        assert_eq!(
            request.body["auth"]["identity"]["application_credential"],
            json!({"id": "a", "secret": "s"})
        );
    }

    #[test]
    fn what_is_missing_or_unsupported_is_said_without_the_secret() {
        let no_domain = token_request(&config(
            "clouds:\n  c:\n    auth:\n      auth_url: http://k/v3\n      username: u\n      password: hunter2\n",
        ));
        let Err(why) = no_domain else {
            panic!("a user without a domain was accepted")
        };
        assert!(
            why.contains("user_domain_name") && !why.contains("hunter2"),
            "{why}"
        );
        let Err(why) = token_request(&config(
            "clouds:\n  c:\n    auth_type: v3oidcpassword\n    auth:\n      auth_url: http://k/v3\n",
        )) else {
            panic!("an unsupported auth_type was accepted")
        };
        assert!(why.contains("v3oidcpassword"), "{why}");
    }

    #[test]
    fn the_catalog_gives_the_endpoint_of_the_interface_and_region() {
        let token = json!({"token": {"catalog": [
            {"type": "load-balancer", "endpoints": [
                {"interface": "internal", "region_id": "r1", "url": "http://internal:9876"},
                {"interface": "public", "region_id": "r2", "url": "http://r2:9876"},
                {"interface": "public", "region_id": "r1", "url": "http://r1:9876"}]}]}});
        let url = |i, r| endpoint(&token, "load-balancer", i, r).map(|u| u.to_string());
        assert_eq!(url(None, Some("r1")), Some("http://r1:9876/".into()));
        assert_eq!(
            url(Some("internalURL"), None),
            Some("http://internal:9876/".into())
        );
        assert_eq!(url(None, Some("r3")), None);
        assert_eq!(endpoint(&token, "network", None, None), None);
    }

    #[test]
    fn a_token_document_is_read_into_what_the_session_keeps() {
        let answer = br#"{"token": {"expires_at": "2026-11-29T20:00:00Z", "user": {"id": "u"},
            "roles": [{"name": "member"}], "catalog": [
            {"type": "compute", "endpoints": [{"interface": "public", "url": "http://nova"}]},
            {"type": "load-balancer", "id": "x", "endpoints": [
                {"interface": "public", "region_id": "r1", "url": "http://r1:9876", "id": "e1"},
                {"interface": "public", "region": 7, "url": ["not", "text"]}]},
            {"type": "network", "endpoints": [{"interface": "public", "url": "http://n:9696"}]}]}}"#;
        let document: TokenDocument = serde_json::from_slice(answer).expect("token");
        assert_eq!(document.expires_at(), Some("2026-11-29T20:00:00Z"));
        let kept = document.kept();
        assert_eq!(
            kept,
            json!({"token": {"expires_at": "2026-11-29T20:00:00Z", "catalog": [
                {"type": "load-balancer", "endpoints": [
                    {"interface": "public", "region_id": "r1", "url": "http://r1:9876"},
                    {"interface": "public"}]},
                {"type": "network", "endpoints": [{"interface": "public", "url": "http://n:9696"}]}]}})
        );
        assert_eq!(
            endpoint(&kept, "load-balancer", None, Some("r1")).map(|u| u.to_string()),
            Some("http://r1:9876/".into())
        );
        // Another shape altogether reads as nothing.
        let odd: TokenDocument =
            serde_json::from_slice(br#"{"token": {"catalog": "none", "expires_at": 5}}"#)
                .unwrap_or_default();
        assert_eq!(odd.expires_at(), None);
        assert_eq!(endpoint(&odd.kept(), "network", None, None), None);
    }

    #[test]
    fn the_version_document_gives_the_base_of_the_highest_minor() {
        let root = Url::parse("http://o:9876").expect("url");
        let doc = br#"{"versions": [
            {"id": "v2.0", "links": [{"rel": "self", "href": "http://o:9876/v2"}]},
            {"id": "v2.30", "links": [{"rel": "self", "href": "http://o:9876/v2"}]},
            {"id": "v1", "links": []}]}"#;
        let base = |doc: &[u8], major| {
            service_base(highest(doc, major).as_ref(), &root, major).to_string()
        };
        assert_eq!(base(doc, "v2"), "http://o:9876/v2/");
        let neutron = br#"{"versions": [{"id": "v2.0", "status": "CURRENT"}]}"#;
        assert_eq!(base(neutron, "v2.0"), "http://o:9876/v2.0/");
        // A self link that is not a URL: the id under the root; no document: the major.
        let odd = br#"{"versions": [{"id": "v2.1", "links": [{"rel": "self", "href": "::"}]}]}"#;
        assert_eq!(base(odd, "v2"), "http://o:9876/v2.1/");
        assert_eq!(base(b"", "v2"), "http://o:9876/v2/");
        assert!(names_version(
            &Url::parse("http://o/v2.0/").expect("url"),
            "v2.0"
        ));
        assert!(!names_version(&root, "v2"));
    }

    #[test]
    fn a_catalog_url_naming_the_version_is_the_base_and_its_document_is_one_up() {
        let named = Url::parse("http://o/load-balancer/v2").expect("url");
        assert_eq!(
            document_url(&named, "v2").as_str(),
            "http://o/load-balancer/"
        );
        assert_eq!(
            service_base(None, &named, "v2").as_str(),
            "http://o/load-balancer/v2/"
        );
        let root = Url::parse("http://o:9696").expect("url");
        assert_eq!(document_url(&root, "v2.0"), root);
        assert_eq!(
            service_base(None, &root, "v2.0").as_str(),
            "http://o:9696/v2.0/"
        );
    }
}
