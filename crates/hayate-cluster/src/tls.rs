//! TLS on node links, the client side (`[cluster] tls_cert`, `tls_key`, `tls_ca`): a link
//! presents this node's certificate and accepts the other node's only when it chains to
//! `tls_ca` and names the other node's IP address (or `tls_server_name`). The cluster
//! listener's side is the server's `mqtts` code path, with client certificates required.
//!
//! rustls with the `ring` provider, as the server's and the bridges' TLS. The files are read
//! once, at start.

use crate::config::{ClusterConfig, LinkTlsFiles};
use crate::ClusterError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::RootCertStore;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// How this node opens TLS on its links.
#[derive(Clone)]
pub(crate) struct LinkTls {
    connector: TlsConnector,
    /// The name every other node's certificate must carry; `None`: its IP address.
    server_name: Option<ServerName<'static>>,
}

impl std::fmt::Debug for LinkTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkTls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl LinkTls {
    /// Reads the files `config` names; `None` without TLS. An error names the file.
    pub(crate) fn load(config: &ClusterConfig) -> Result<Option<LinkTls>, ClusterError> {
        let Some(files) = config.link_tls() else {
            return Ok(None);
        };
        let server_name = match &config.tls_server_name {
            Some(name) => Some(ServerName::try_from(name.clone()).map_err(|e| {
                ClusterError::Tls(format!("cluster.tls_server_name {name:?}: {e}"))
            })?),
            None => None,
        };
        Ok(Some(LinkTls {
            connector: connector(files)?,
            server_name,
        }))
    }

    /// Opens TLS on `tcp` to the node at `ip`.
    pub(crate) async fn connect(
        &self,
        ip: IpAddr,
        tcp: TcpStream,
    ) -> Result<TlsStream<TcpStream>, ClusterError> {
        let name = self
            .server_name
            .clone()
            .unwrap_or_else(|| ServerName::IpAddress(ip.into()));
        self.connector
            .connect(name, tcp)
            .await
            .map_err(|e| ClusterError::Tls(format!("handshake: {e}")))
    }
}

fn connector(files: LinkTlsFiles<'_>) -> Result<TlsConnector, ClusterError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for cert in read_certs("tls_ca", files.ca)? {
        roots
            .add(cert)
            .map_err(|e| file_error("tls_ca", files.ca, format!("bad CA certificate: {e}")))?;
    }
    let chain = read_certs("tls_cert", files.cert)?;
    let key = PrivateKeyDer::from_pem_file(files.key)
        .map_err(|e| file_error("tls_key", files.key, format!("no usable private key: {e}")))?;
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ClusterError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| {
            ClusterError::Tls(format!(
                "cluster.tls_cert {} / tls_key {}: {e}",
                files.cert.display(),
                files.key.display()
            ))
        })?;
    Ok(TlsConnector::from(Arc::new(config)))
}

fn read_certs(key: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, ClusterError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| file_error(key, path, e.to_string()))?;
    if certs.is_empty() {
        return Err(file_error(key, path, "no certificate in the file".into()));
    }
    Ok(certs)
}

fn file_error(key: &str, path: &Path, message: String) -> ClusterError {
    ClusterError::Tls(format!("cluster.{key} {}: {message}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    #[test]
    fn unreadable_files_are_named() {
        let dir = std::env::temp_dir().join(format!("hayate-cluster-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(dir.join("garbage.pem"), "not PEM").expect("write");
        let addr: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        let mut config = ClusterConfig::new("n1", addr, vec![]);
        assert!(LinkTls::load(&config).expect("no TLS").is_none());
        config.tls_cert = Some(dir.join("absent.pem"));
        config.tls_key = Some(dir.join("absent.key"));
        config.tls_ca = Some(dir.join("garbage.pem"));
        let error = LinkTls::load(&config).unwrap_err().to_string();
        assert!(
            error.contains("tls_ca") && error.contains("garbage.pem"),
            "{error}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
