//! A client of a cluster reached through a kubeconfig a user (or Cluster API) wrote into a Secret:
//! what such a kubeconfig may carry, and the bounds every such client has.
//!
//! A kubeconfig from a Secret may only carry what it needs inline: a server, a CA bundle, a client
//! certificate and key, a token, a username and password. One that would make capi-lb read its own
//! files (`certificate-authority`, `client-certificate`, `client-key`, `tokenFile`: its
//! ServiceAccount token, for example, sent to a server of the user's choice) or run a program
//! (`exec`, `auth-provider`) is refused.
//!
//! The server is not trusted to behave: a client gives up connecting after
//! [`Bounds::connect`] and waiting for an answer after [`Bounds::request`] (a server that accepts
//! and never answers costs seconds, not a reconcile slot), and reads at most [`Bounds::response`]
//! bytes of an answer (a huge one fails the request instead of being held in memory).
//!
//! The kube-dc provider's remote clusters (`kubedc/remote.rs`) and the workload clusters of
//! `spec.workloadEndpoints` use this module.

use std::time::Duration;

use http_body_util::Limited;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// The deadlines and the answer size of a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// How long connecting (TCP and TLS) may take.
    pub connect: Duration,
    /// How long a request may wait for its answer.
    pub request: Duration,
    /// The largest answer read, in bytes.
    pub response: usize,
}

/// A client of the cluster `text` (a kubeconfig's YAML, from `at`, e.g. `Secret ns/name key
/// value`) describes, with `bounds`; the error says what is wrong without quoting the Secret.
pub async fn client(text: &str, at: &str, bounds: Bounds) -> Result<kube::Client, String> {
    let kubeconfig = Kubeconfig::from_yaml(text)
        .map_err(|_| format!("{at}: not a kubeconfig (YAML with clusters, users, contexts)"))?;
    check(&kubeconfig).map_err(|why| format!("{at}: {why}"))?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| format!("{at}: unusable kubeconfig: {e}"))?;
    config.connect_timeout = Some(bounds.connect);
    config.read_timeout = Some(bounds.request);
    config.write_timeout = Some(bounds.request);
    let limit = bounds.response;
    let client = kube::client::ClientBuilder::try_from(config)
        .map_err(|e| format!("{at}: no client: {e}"))?
        .with_layer(&tower::util::MapResponseLayer::new(
            move |response: http::Response<_>| response.map(|body| Limited::new(body, limit)),
        ))
        .build();
    Ok(client)
}

/// Refuse what a kubeconfig from a Secret must not make capi-lb do: read its own files or run
/// programs.
pub fn check(kubeconfig: &Kubeconfig) -> Result<(), String> {
    for named in &kubeconfig.clusters {
        if named
            .cluster
            .as_ref()
            .is_some_and(|c| c.certificate_authority.is_some())
        {
            return Err(format!(
                "cluster {} names a certificate-authority file; put the CA inline (certificate-authority-data)",
                named.name
            ));
        }
    }
    for named in &kubeconfig.auth_infos {
        let Some(auth) = &named.auth_info else {
            continue;
        };
        let refused = [
            (auth.exec.is_some(), "exec (runs a program)"),
            (auth.auth_provider.is_some(), "auth-provider"),
            (auth.token_file.is_some(), "tokenFile (a file)"),
            (
                auth.client_certificate.is_some(),
                "client-certificate (a file)",
            ),
            (auth.client_key.is_some(), "client-key (a file)"),
        ];
        if let Some((_, what)) = refused.iter().find(|(set, _)| *set) {
            return Err(format!(
                "user {} uses {what}; only inline credentials are accepted (token, client-certificate-data and client-key-data, username and password)",
                named.name
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    fn kubeconfig(cluster: &str, user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n{cluster}users:\n- name: u\n  user:\n{user}contexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
        )
    }

    const BOUNDS: Bounds = Bounds {
        connect: Duration::from_secs(1),
        request: Duration::from_secs(1),
        response: 1024,
    };

    #[tokio::test]
    async fn inline_credentials_are_accepted_and_files_and_programs_refused() {
        // Making a client of an accepted one is shown end to end (e2e/workload_endpoints.rs): in
        // this crate's tests no TLS crypto provider is installed.
        let ok = kubeconfig("", "    token: abc\n");
        assert_eq!(check(&Kubeconfig::from_yaml(&ok).unwrap()), Ok(()));
        let file = kubeconfig("", "    tokenFile: /var/run/secrets/token\n");
        let Err(refused) = client(&file, "Secret a/b key value", BOUNDS).await else {
            panic!("a tokenFile was accepted");
        };
        assert!(
            refused.starts_with("Secret a/b key value: user u uses tokenFile"),
            "{refused}"
        );
        let exec = kubeconfig(
            "",
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      interactiveMode: Never\n",
        );
        assert!(
            check(&Kubeconfig::from_yaml(&exec).unwrap())
                .unwrap_err()
                .contains("exec")
        );
        let Err(garbage) = client("][", "Secret a/b key value", BOUNDS).await else {
            panic!("garbage was accepted");
        };
        assert!(garbage.contains("not a kubeconfig"), "{garbage}");
    }
}
