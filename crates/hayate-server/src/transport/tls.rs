//! Certificate TLS (rustls, `ring` provider): server certificate chain and key, optional or
//! required client certificates checked against a CA bundle, and the client certificate's
//! identity (subject CN, else the first DNS/e-mail SAN) for `use_identity_as_username`.
//!
//! The files are read at start and again on [`TlsAcceptorHandle::reload`] (SIGHUP): a reload
//! that fails keeps the configuration in force and reports why; connections in progress keep
//! the configuration they started with.

use parking_lot::RwLock;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use thiserror::Error;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// Why a TLS configuration could not be built.
#[derive(Debug, Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// rustls refused the combination (key does not match the certificate, ...).
    #[error("TLS configuration: {0}")]
    Rustls(String),
}

/// The files a certificate listener uses.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// Server certificate chain (PEM), leaf first.
    pub cert_file: PathBuf,
    /// Server private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// CA certificates (PEM) client certificates must chain to; none: no client certificates.
    pub ca_file: Option<PathBuf>,
    /// Refuse clients without a valid certificate (needs `ca_file`).
    pub require_certificate: bool,
}

/// The current acceptor of a listener, replaceable while running.
#[derive(Debug)]
pub struct TlsAcceptorHandle {
    files: TlsFiles,
    current: RwLock<Arc<ServerConfig>>,
}

impl TlsAcceptorHandle {
    /// Reads the files and builds the acceptor.
    pub fn load(files: TlsFiles) -> Result<TlsAcceptorHandle, TlsError> {
        let acceptor = build(&files)?;
        Ok(TlsAcceptorHandle {
            files,
            current: RwLock::new(acceptor),
        })
    }

    /// Re-reads the files; on error the previous configuration stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let acceptor = build(&self.files)?;
        *self.current.write() = acceptor;
        Ok(())
    }

    /// The acceptor for a new connection.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.config())
    }

    /// The configuration for a new connection.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.current.read().clone()
    }
}

fn build(files: &TlsFiles) -> Result<Arc<ServerConfig>, TlsError> {
    let certs = read_certs(&files.cert_file)?;
    let key = PrivateKeyDer::from_pem_file(&files.key_file).map_err(|e| TlsError::File {
        path: files.key_file.clone(),
        message: format!("no usable private key: {e}"),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let builder = match &files.ca_file {
        Some(ca_file) => {
            let mut roots = RootCertStore::empty();
            for cert in read_certs(ca_file)? {
                roots.add(cert).map_err(|e| TlsError::File {
                    path: ca_file.clone(),
                    message: format!("bad CA certificate: {e}"),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if files.require_certificate {
                verifier.build()
            } else {
                verifier.allow_unauthenticated().build()
            }
            .map_err(|e| TlsError::Rustls(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    Ok(Arc::new(config))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::File {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::File {
            path: path.to_path_buf(),
            message: "no certificate in the file".to_string(),
        });
    }
    Ok(certs)
}

/// The identity of a verified client certificate: its subject's common name, else its first
/// DNS name or e-mail address. `None` without a client certificate.
pub fn client_identity(stream: &TlsStream<TcpStream>) -> Option<String> {
    let (_, connection) = stream.get_ref();
    let leaf = connection.peer_certificates()?.first()?;
    certificate_identity(leaf.as_ref())
}

/// The identity in a DER certificate (see [`client_identity`]).
pub fn certificate_identity(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    if let Some(cn) = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
    {
        return Some(cn.to_string());
    }
    let san = cert.subject_alternative_name().ok()??;
    san.value.general_names.iter().find_map(|name| match name {
        x509_parser::extensions::GeneralName::DNSName(dns) => Some(dns.to_string()),
        x509_parser::extensions::GeneralName::RFC822Name(mail) => Some(mail.to_string()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair};

    fn certificate(names: Vec<String>, common_name: Option<&str>) -> Vec<u8> {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(names).expect("params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = common_name {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        params
            .self_signed(&key)
            .expect("certificate")
            .der()
            .to_vec()
    }

    #[test]
    fn identity_is_the_common_name_else_the_first_dns_san() {
        let with_cn = certificate(vec!["device-7.example".into()], Some("alice"));
        assert_eq!(certificate_identity(&with_cn).as_deref(), Some("alice"));
        let san_only = certificate(vec!["device-7.example".into()], None);
        assert_eq!(
            certificate_identity(&san_only).as_deref(),
            Some("device-7.example")
        );
        assert_eq!(certificate_identity(b"not a certificate"), None);
    }

    #[test]
    fn missing_or_mismatched_files_are_named_in_the_error() {
        let dir = std::env::temp_dir().join(format!("hayate-tls-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let key = KeyPair::generate().expect("key");
        let cert = CertificateParams::new(vec!["localhost".into()])
            .expect("params")
            .self_signed(&key)
            .expect("certificate");
        let other_key = KeyPair::generate().expect("key");
        std::fs::write(dir.join("cert.pem"), cert.pem()).expect("write");
        std::fs::write(dir.join("key.pem"), key.serialize_pem()).expect("write");
        std::fs::write(dir.join("other.pem"), other_key.serialize_pem()).expect("write");
        let files = |cert: &str, key: &str| TlsFiles {
            cert_file: dir.join(cert),
            key_file: dir.join(key),
            ca_file: None,
            require_certificate: false,
        };
        let handle = TlsAcceptorHandle::load(files("cert.pem", "key.pem")).expect("valid pair");
        let missing = TlsAcceptorHandle::load(files("absent.pem", "key.pem")).unwrap_err();
        assert!(missing.to_string().contains("absent.pem"), "{missing}");
        let mismatch = TlsAcceptorHandle::load(files("cert.pem", "other.pem")).unwrap_err();
        assert!(matches!(mismatch, TlsError::Rustls(_)), "{mismatch}");
        // A reload that fails keeps the acceptor working.
        std::fs::write(dir.join("cert.pem"), "garbage").expect("write");
        assert!(handle.reload().is_err());
        let _still_usable = handle.acceptor();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
