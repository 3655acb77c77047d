//! Which cluster kube-dc is in: the one capi-lb runs in, or the one whose kubeconfig
//! `spec.cluster.kubeconfigSecretName` names (a bootstrap cluster before `clusterctl move`, a
//! management cluster outside kube-dc).
//!
//! A kubeconfig comes from a user's Secret, so it may only carry what it needs inline: a server, a
//! CA bundle, a client certificate and key, a token, a username and password. A kubeconfig that
//! would make capi-lb read its own files (`certificate-authority`, `client-certificate`,
//! `client-key`, `tokenFile`: its ServiceAccount token, for example, sent to a server of the user's
//! choice) or run a program (`exec`, `auth-provider`) is refused ([`crate::kubeconfig`], as for
//! the workload clusters). Clients are kept per Secret and made again when its resourceVersion
//! changes.
//!
//! Such a cluster is the tenant's to point at, so its server is not trusted to behave: its client
//! comes from the one door to tenant servers ([`crate::untrusted::kube`]) with the limits
//! [`crate::untrusted::KUBE_DC`]: sent once (no retries, no `Retry-After`), connected within 5 s,
//! the whole answer within 10 s, at most 4 MiB and 131,072 JSON values of it.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use capi_lb_api::kubedc::KubeDcCluster;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use super::reason;
use super::step::{POLL, Step, api_error};
use crate::error::{INVALID_CONFIGURATION, ProviderError};
use crate::provider::Progress;

/// Clients of kube-dc clusters reached through kubeconfig Secrets, by (namespace, Secret name,
/// key), with the resourceVersion of the Secret each was made from.
#[derive(Default)]
pub(super) struct Remotes {
    clients: Mutex<Clients>,
    /// Which Secrets may be read as credentials.
    pub(super) policy: crate::entry::CredentialsPolicy,
}

/// (namespace, Secret, key) to the client made from that Secret.
type Clients = HashMap<(String, String, String), Entry>;

/// A client, the resourceVersion of the Secret it was made from, and when that was last checked.
struct Entry {
    version: String,
    checked: Instant,
    client: kube::Client,
}

/// How long a Secret read is trusted before it is read again (as the Octavia provider's).
const SECRET_FRESH: Duration = Duration::from_secs(5);
/// The most clients kept, and how long one not used is kept: the Secrets' names are the tenants'
/// to choose ([`crate::bounded::make_room`]).
pub const MAX_CLIENTS: usize = 256;
/// A client not used for this long is dropped (made again from its Secret when needed).
pub const CLIENT_IDLE: Duration = Duration::from_secs(3600);

impl Remotes {
    /// No client yet; only the Secrets `policy` admits will be read.
    pub(super) fn admitting(policy: crate::entry::CredentialsPolicy) -> Self {
        Self {
            policy,
            ..Self::default()
        }
    }

    /// The client for `cluster`, whose Secret is in `namespace` (read with `local`); waits while
    /// the Secret or its key does not exist; an unusable kubeconfig is a permanent error.
    pub(super) async fn client(
        &self,
        local: &kube::Client,
        namespace: &str,
        cluster: &KubeDcCluster,
    ) -> Result<Step<kube::Client>, ProviderError> {
        let name = &cluster.kubeconfig_secret_name;
        let key = (namespace.to_string(), name.clone(), cluster.key.clone());
        // One pass calls the provider more than once (ensure, members): the Secret read a moment
        // ago is not read again.
        if let Some(entry) = self.lock().get(&key)
            && entry.checked.elapsed() < SECRET_FRESH
        {
            return Ok(Step::Ready(entry.client.clone()));
        }
        let at = format!("Secret {namespace}/{name} key {}", cluster.key);
        let secrets: Api<Secret> = Api::namespaced(local.clone(), namespace);
        let secret = secrets
            .get_opt(name)
            .await
            .map_err(|e| api_error(&format!("get Secret {name}"), e))?;
        let Some(secret) = secret else {
            return Ok(Step::Wait(missing(format!(
                "Secret {namespace}/{name} with the kube-dc cluster's kubeconfig (spec.cluster.kubeconfigSecretName) does not exist"
            ))));
        };
        if let Some(message) = self.policy.refuses(&secret) {
            return Ok(Step::Wait(Progress::pending_because(
                reason::CREDENTIALS_NOT_ALLOWED,
                message,
                POLL,
            )));
        }
        let version = secret.metadata.resource_version.clone().unwrap_or_default();
        if let Some(entry) = self.lock().get_mut(&key)
            && entry.version == version
        {
            entry.checked = Instant::now();
            return Ok(Step::Ready(entry.client.clone()));
        }
        let Some(bytes) = secret
            .data
            .as_ref()
            .and_then(|d| d.get(&cluster.key))
            .map(|b| b.0.clone())
        else {
            return Ok(Step::Wait(missing(format!("{at} does not exist"))));
        };
        let text = String::from_utf8(bytes).map_err(|_| invalid(&at, "not UTF-8 text"))?;
        // Errors never quote the Secret's content.
        let client = crate::untrusted::kube::client(&text, &at, crate::untrusted::KUBE_DC)
            .await
            .map_err(|message| ProviderError::permanent(INVALID_CONFIGURATION, message))?;
        let mut clients = self.lock();
        crate::bounded::make_room(
            &mut clients,
            MAX_CLIENTS,
            CLIENT_IDLE,
            Instant::now(),
            |e| e.checked,
        );
        clients.insert(
            key,
            Entry {
                version,
                checked: Instant::now(),
                client: client.clone(),
            },
        );
        Ok(Step::Ready(client))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Clients> {
        self.clients.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Pending on `KubeconfigNotFound`.
fn missing(message: String) -> Progress {
    Progress::pending_because(reason::KUBECONFIG_NOT_FOUND, message, POLL)
}

fn invalid(at: &str, why: &str) -> ProviderError {
    ProviderError::permanent(INVALID_CONFIGURATION, format!("{at}: {why}"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use kube::config::Kubeconfig;

    use crate::kubeconfig::check;

    fn kubeconfig(cluster: &str, user: &str) -> Kubeconfig {
        Kubeconfig::from_yaml(&format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n{cluster}users:\n- name: u\n  user:\n{user}contexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
        ))
        .unwrap()
    }

    #[test]
    fn inline_credentials_are_accepted() {
        let ok = kubeconfig("    certificate-authority-data: Zm9v\n", "    token: abc\n");
        assert_eq!(check(&ok), Ok(()));
        let certs = kubeconfig(
            "",
            "    client-certificate-data: Zm9v\n    client-key-data: YmFy\n",
        );
        assert_eq!(check(&certs), Ok(()));
    }

    #[test]
    fn files_and_programs_are_refused() {
        for (cluster, user, what) in [
            (
                "    certificate-authority: /etc/ca.crt\n",
                "    token: abc\n",
                "certificate-authority file",
            ),
            (
                "",
                "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n",
                "tokenFile",
            ),
            (
                "",
                "    client-certificate: /a\n    client-key-data: YmFy\n",
                "client-certificate (a file)",
            ),
            (
                "",
                "    client-certificate-data: Zm9v\n    client-key: /b\n",
                "client-key (a file)",
            ),
            (
                "",
                "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      interactiveMode: Never\n",
                "exec",
            ),
            ("", "    auth-provider:\n      name: gcp\n", "auth-provider"),
        ] {
            let refused = check(&kubeconfig(cluster, user)).unwrap_err();
            assert!(refused.contains(what), "{refused}");
        }
    }
}
