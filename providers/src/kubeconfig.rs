//! A client of a cluster reached through a kubeconfig a user (or Cluster API) wrote into a Secret:
//! what such a kubeconfig may carry, and the bounds every such client has.
//!
//! A kubeconfig from a Secret may only carry what it needs inline: a server, a CA bundle, a client
//! certificate and key, a token, a username and password. One that would make capi-lb read its own
//! files (`certificate-authority`, `client-certificate`, `client-key`, `tokenFile`: its
//! ServiceAccount token, for example, sent to a server of the user's choice) or run a program
//! (`exec`, `auth-provider`) is refused.
//!
//! The client itself, and the bounds every client of such a cluster has, are
//! [`crate::untrusted::kube`]'s: the one door to tenant servers.
//!
//! The kube-dc provider's remote clusters (`kubedc/remote.rs`) and the workload clusters of
//! `spec.workloadEndpoints` use this module.

use kube::config::Kubeconfig;

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

    use crate::untrusted::WORKLOAD as BOUNDS;
    use crate::untrusted::kube::client;

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
