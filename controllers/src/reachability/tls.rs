//! The TLS client of a probe of a kube-apiserver port: the Cluster's CA as its only roots (the
//! name checked for an endpoint; any name for a target, which is reached by its address), or,
//! without a CA, any certificate (the handshake's signatures still checked).

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// A TLS client configuration trusting `ca` (PEM), or, without one, any certificate. With a CA
/// and not `check_name`, a certificate that chains to the CA passes whatever names it holds.
pub(super) fn tls_config(
    ca: Option<&[u8]>,
    check_name: bool,
) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let Some(pem) = ca else {
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unchecked(provider)))
            .with_no_client_auth());
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| format!("the Cluster's CA is not PEM: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("the Cluster's CA is not usable: {e}"))?;
    }
    if roots.is_empty() {
        return Err("the Cluster's CA (tls.crt) holds no certificate".into());
    }
    if check_name {
        return Ok(builder.with_root_certificates(roots).with_no_client_auth());
    }
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(any_name(roots, provider)?))
        .with_no_client_auth())
}

/// The verifier of a target's certificate: the chain to `roots`, any name.
fn any_name(
    roots: rustls::RootCertStore,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<AnyName, String> {
    rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map(AnyName)
        .map_err(|e| format!("the Cluster's CA is not usable: {e}"))
}

/// The chain checked against the CA, the name not: webpki checks the chain first, so a
/// certificate refused only for its names chains to the CA.
#[derive(Debug)]
struct AnyName(Arc<rustls::client::WebPkiServerVerifier>);

impl rustls::client::danger::ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        use rustls::CertificateError::{NotValidForName, NotValidForNameContext};
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                NotValidForName | NotValidForNameContext { .. },
            )) => Ok(rustls::client::danger::ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Accepts any certificate (there is no CA to check it against), still checking the handshake's
/// signatures.
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    use rustls::client::danger::ServerCertVerifier;

    /// A CA and a certificate it signed for `names`.
    fn signed(names: &[&str]) -> (String, CertificateDer<'static>) {
        let mut ca = CertificateParams::default();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        let leaf = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap()
            .signed_by(&KeyPair::generate().unwrap(), &ca)
            .unwrap();
        (ca.pem(), leaf.der().clone())
    }

    fn verify(v: &dyn ServerCertVerifier, cert: &CertificateDer<'_>, name: &str) -> bool {
        let name = ServerName::try_from(name.to_string()).unwrap();
        v.verify_server_cert(cert, &[], &name, &[], rustls::pki_types::UnixTime::now())
            .is_ok()
    }

    #[test]
    fn a_target_needs_the_cas_chain_and_not_the_name_an_endpoint_needs_both() {
        let (ca, cert) = signed(&["kubernetes", "cp.example"]);
        let (_, foreign) = signed(&["10.0.0.1"]);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = || {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                roots.add(c.unwrap()).unwrap();
            }
            roots
        };
        let target = any_name(roots(), provider.clone()).unwrap();
        assert!(
            verify(&target, &cert, "10.0.0.1"),
            "another name, the Cluster's CA"
        );
        assert!(!verify(&target, &foreign, "10.0.0.1"), "another CA");
        let endpoint = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots()),
            provider,
        )
        .build()
        .unwrap();
        assert!(verify(endpoint.as_ref(), &cert, "cp.example"));
        assert!(
            !verify(endpoint.as_ref(), &cert, "10.0.0.1"),
            "the name is checked"
        );
        // Both kinds of configuration build from the same CA.
        assert!(tls_config(Some(ca.as_bytes()), false).is_ok());
        assert!(tls_config(Some(ca.as_bytes()), true).is_ok());
    }
}
