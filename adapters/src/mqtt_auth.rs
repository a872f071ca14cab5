//! Credentials and TLS of an MQTT link.
//!
//! TLS is rustls with the `ring` crypto provider (no OpenSSL, no cmake or nasm on the build
//! machine), trusting only the CA certificates of a PEM file the operator names (a site's own CA,
//! as a Mosquitto listener with `cafile`/`certfile`/`keyfile` uses). The broker's certificate is
//! checked against the host name the link connects to.

use rumqttc::{MqttOptions, TlsConfiguration, Transport};
use std::sync::Arc;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

/// Credentials and transport security of one MQTT link.
#[derive(Clone, Default)]
pub struct MqttAuth {
    /// Username and password (MQTT CONNECT); `None`: anonymous.
    pub credentials: Option<(String, String)>,
    /// TLS client configuration; `None`: plain TCP.
    pub tls: Option<Arc<ClientConfig>>,
}

impl std::fmt::Debug for MqttAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a password.
        f.debug_struct("MqttAuth")
            .field("username", &self.credentials.as_ref().map(|c| c.0.as_str()))
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl MqttAuth {
    /// Set the credentials and the transport on `opts`.
    pub fn apply(&self, opts: &mut MqttOptions) {
        if let Some((u, p)) = &self.credentials {
            opts.set_credentials(u.clone(), p.clone());
        }
        if let Some(tls) = &self.tls {
            opts.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(tls.clone())));
        }
    }

    /// True when the link authenticates to the broker.
    pub fn authenticated(&self) -> bool {
        self.credentials.is_some()
    }
}

/// A rustls client configuration (ring provider, TLS 1.2 and 1.3) trusting the CA certificates of
/// a PEM document.
pub fn tls_client_config(ca_pem: &[u8]) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    let mut n = 0;
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        let cert = cert.map_err(|e| format!("not a PEM certificate file: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("certificate {} is not a usable CA certificate: {e}", n + 1))?;
        n += 1;
    }
    if n == 0 {
        return Err("no certificate (-----BEGIN CERTIFICATE-----) in the CA file".into());
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let cfg = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_without_certificates_is_refused_with_a_reason() {
        let e = tls_client_config(b"hello").unwrap_err();
        assert!(e.contains("no certificate"), "{e}");
        let bad = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let e = tls_client_config(bad).unwrap_err();
        assert!(e.contains("certificate 1"), "{e}");
    }

    #[test]
    fn debug_never_shows_the_password() {
        let a = MqttAuth {
            credentials: Some(("operator".into(), "s3cret-pw".into())),
            tls: None,
        };
        let s = format!("{a:?}");
        assert!(s.contains("operator") && !s.contains("s3cret-pw"), "{s}");
    }
}
