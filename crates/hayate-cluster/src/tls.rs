//! TLS on node links, the client side (`[cluster] tls_cert`, `tls_key`, `tls_ca`): a link
//! presents this node's certificate and accepts the other node's only when it chains to
//! `tls_ca` and names the other node's IP address (or `tls_server_name`). The cluster
//! listener's side is the server's `mqtts` code path, with client certificates required.
//!
//! rustls with the `ring` provider, as the server's and the bridges' TLS. The files are read
//! at start and again on SIGHUP ([`LinkTls::reload`], through [`LinkTlsReload`]): links
//! opened from then on use the new ones; a file that does not load keeps the previous
//! settings, and the error names it.

use crate::config::{ClusterConfig, LinkTlsFiles};
use crate::ClusterError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::RootCertStore;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// How this node opens TLS on its links.
pub(crate) struct LinkTls {
    /// Replaced whole by a reload.
    connector: RwLock<TlsConnector>,
    /// The name every other node's certificate must carry; `None`: its IP address.
    server_name: Option<ServerName<'static>>,
    /// `tls_cert`, `tls_key`, `tls_ca`: read again by a reload.
    files: [PathBuf; 3],
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
            connector: RwLock::new(connector(files)?),
            server_name,
            files: [files.cert, files.key, files.ca].map(Path::to_path_buf),
        }))
    }

    /// Reads the certificate, key and CA files again; links opened from now on use them.
    /// On an error (naming the file) the previous ones stay.
    pub(crate) fn reload(&self) -> Result<(), ClusterError> {
        let [cert, key, ca] = &self.files;
        let connector = connector(LinkTlsFiles { cert, key, ca })?;
        *self.connector.write().unwrap_or_else(|e| e.into_inner()) = connector;
        Ok(())
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
        let connector = self
            .connector
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        connector
            .connect(name, tcp)
            .await
            .map_err(|e| ClusterError::Tls(format!("handshake: {e}")))
    }
}

/// Reloads the links' TLS files on SIGHUP (from [`crate::ClusterHandle::tls_reload`]).
#[derive(Debug, Clone)]
pub struct LinkTlsReload(pub(crate) Arc<LinkTls>);

impl LinkTlsReload {
    /// Reads `[cluster] tls_cert`, `tls_key` and `tls_ca` again: links opened from now on
    /// present the new certificate and check the other nodes' against the new CA. On an
    /// error (naming the file) the previous ones stay in use.
    pub fn reload(&self) -> Result<(), ClusterError> {
        self.0.reload()
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
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    use rustls::server::WebPkiClientVerifier;
    use std::net::SocketAddr;
    use std::path::PathBuf;
    use tokio::net::TcpListener;

    /// A CA and the certificates it signs, as PEM files in a directory of their own.
    struct Pki {
        dir: PathBuf,
        ca: PathBuf,
        issuer: Issuer<'static, KeyPair>,
    }

    impl Pki {
        fn new(name: &str) -> Pki {
            let dir = std::env::temp_dir()
                .join(format!("hayate-cluster-tls-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("temp dir");
            let key = KeyPair::generate().expect("CA key");
            let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params
                .distinguished_name
                .push(DnType::CommonName, format!("test CA {name}"));
            let cert = params.self_signed(&key).expect("CA certificate");
            let ca = dir.join("ca.pem");
            std::fs::write(&ca, cert.pem()).expect("write");
            Pki {
                dir,
                ca,
                issuer: Issuer::new(params, key),
            }
        }

        /// A node certificate naming `names` (IP addresses or DNS names): (cert, key).
        fn node(&self, file: &str, names: &[&str]) -> (PathBuf, PathBuf) {
            let key = KeyPair::generate().expect("key");
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            let cert = CertificateParams::new(names)
                .expect("params")
                .signed_by(&key, &self.issuer)
                .expect("certificate");
            let (cert_path, key_path) = (
                self.dir.join(format!("{file}.pem")),
                self.dir.join(format!("{file}.key")),
            );
            std::fs::write(&cert_path, cert.pem()).expect("write");
            std::fs::write(&key_path, key.serialize_pem()).expect("write");
            (cert_path, key_path)
        }

        fn config(&self, node: &(PathBuf, PathBuf), server_name: Option<&str>) -> ClusterConfig {
            let addr: SocketAddr = "127.0.0.1:7000".parse().unwrap();
            let mut config = ClusterConfig::new("n1", addr, vec![]);
            config.tls_cert = Some(node.0.clone());
            config.tls_key = Some(node.1.clone());
            config.tls_ca = Some(self.ca.clone());
            config.tls_server_name = server_name.map(str::to_string);
            config
        }
    }

    impl Drop for Pki {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// A cluster listener's TLS (client certificates required, signed by `ca`) with the
    /// certificate `node`.
    fn server(ca: &Path, node: &(PathBuf, PathBuf)) -> tokio_rustls::TlsAcceptor {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        for cert in read_certs("tls_ca", ca).expect("CA") {
            roots.add(cert).expect("CA");
        }
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .expect("verifier");
        let key = PrivateKeyDer::from_pem_file(&node.1).expect("key");
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_client_cert_verifier(verifier)
            .with_single_cert(read_certs("tls_cert", &node.0).expect("cert"), key)
            .expect("server config");
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }

    /// Opens a link with `client` to a listener `acceptor` serves: (link side, listener side)
    /// succeeded, the listener side after reading once (TLS 1.3 checks the client
    /// certificate after the client's side is done).
    async fn handshake(client: &LinkTls, acceptor: tokio_rustls::TlsAcceptor) -> (bool, bool) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let serve = async {
            let (tcp, _) = listener.accept().await.expect("accept");
            let mut tls = acceptor.accept(tcp).await.ok()?;
            let mut byte = [0u8; 1];
            tls.read_exact(&mut byte).await.ok()
        };
        let connect = async {
            let tcp = TcpStream::connect(addr).await.expect("connect");
            let mut tls = client.connect(addr.ip(), tcp).await.ok()?;
            tls.write_all(b"x").await.ok()?;
            tls.flush().await.ok()
        };
        let (served, connected) = tokio::join!(serve, connect);
        (connected.is_some(), served.is_some())
    }

    #[tokio::test]
    async fn links_check_the_ca_the_ip_address_or_the_server_name() {
        let pki = Pki::new("good");
        let a = pki.node("a", &["127.0.0.1", "a.cluster.test"]);
        let b = pki.node("b", &["127.0.0.1", "nodes.cluster.test"]);
        let elsewhere = pki.node("elsewhere", &["10.1.2.3"]);
        let load = |node, name| LinkTls::load(&pki.config(node, name)).unwrap().unwrap();

        // The other node's IP address is in its certificate, both certificates chain to the CA.
        assert_eq!(
            handshake(&load(&a, None), server(&pki.ca, &b)).await,
            (true, true)
        );
        // Its certificate names another address.
        let (link, _) = handshake(&load(&a, None), server(&pki.ca, &elsewhere)).await;
        assert!(!link, "a certificate for 10.1.2.3 accepted at 127.0.0.1");
        // `tls_server_name`: that DNS name is checked, not the address.
        let named = load(&a, Some("nodes.cluster.test"));
        assert_eq!(handshake(&named, server(&pki.ca, &b)).await, (true, true));
        let (link, _) = handshake(&load(&a, Some("other.cluster.test")), server(&pki.ca, &b)).await;
        assert!(!link, "a certificate without the server name accepted");

        // A node whose certificate another CA signed: refused as a server by the link ...
        let rogue = Pki::new("rogue");
        let r = rogue.node("r", &["127.0.0.1"]);
        let (link, _) = handshake(&load(&a, None), server(&rogue.ca, &r)).await;
        assert!(!link, "a server certificate of another CA accepted");
        // ... and as a client by the listener (trusting the right CA does not help it).
        let rogue_client = LinkTls::load(&rogue.config(&r, None)).unwrap().unwrap();
        let mut trusting = rogue.config(&r, None);
        trusting.tls_ca = Some(pki.ca.clone());
        let rogue_client_trusting = LinkTls::load(&trusting).unwrap().unwrap();
        let (_, listener) = handshake(&rogue_client_trusting, server(&pki.ca, &b)).await;
        assert!(!listener, "a client certificate of another CA accepted");
        let (link, listener) = handshake(&rogue_client, server(&pki.ca, &b)).await;
        assert!(!link && !listener);
    }

    #[tokio::test]
    async fn a_reload_reads_the_files_again_and_keeps_the_old_ones_on_error() {
        let old = Pki::new("reload-old");
        let new = Pki::new("reload-new");
        let a = old.node("a", &["127.0.0.1"]);
        let (b_old, b_new) = (old.node("b", &["127.0.0.1"]), new.node("b", &["127.0.0.1"]));
        let link = LinkTls::load(&old.config(&a, None)).unwrap().unwrap();
        assert_eq!(
            handshake(&link, server(&old.ca, &b_old)).await,
            (true, true)
        );
        // The cluster moves to a new CA: this node's files are replaced in place.
        let a_new = new.node("a", &["127.0.0.1"]);
        std::fs::copy(&a_new.0, &a.0).expect("copy");
        std::fs::copy(&a_new.1, &a.1).expect("copy");
        std::fs::copy(&new.ca, &old.ca).expect("copy");
        // Until the reload, links use what was read at start: the new CA's node is refused.
        let (linked, _) = handshake(&link, server(&new.ca, &b_new)).await;
        assert!(
            !linked,
            "a certificate of the new CA accepted before the reload"
        );
        link.reload().expect("reload");
        assert_eq!(
            handshake(&link, server(&new.ca, &b_new)).await,
            (true, true)
        );
        // A file that does not load: the error names it, the links keep what they had.
        std::fs::write(&a.1, "not a key").expect("write");
        let error = link.reload().unwrap_err().to_string();
        assert!(
            error.contains("tls_key") && error.contains("a.key"),
            "{error}"
        );
        assert_eq!(
            handshake(&link, server(&new.ca, &b_new)).await,
            (true, true)
        );
    }

    #[test]
    fn unreadable_files_are_named() {
        let pki = Pki::new("files");
        std::fs::write(pki.dir.join("garbage.pem"), "not PEM").expect("write");
        let addr: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        let mut config = ClusterConfig::new("n1", addr, vec![]);
        assert!(LinkTls::load(&config).expect("no TLS").is_none());
        config.tls_cert = Some(pki.dir.join("absent.pem"));
        config.tls_key = Some(pki.dir.join("absent.key"));
        config.tls_ca = Some(pki.dir.join("garbage.pem"));
        let error = LinkTls::load(&config).unwrap_err().to_string();
        assert!(
            error.contains("tls_ca") && error.contains("garbage.pem"),
            "{error}"
        );
        config.tls_ca = Some(pki.ca.clone());
        let error = LinkTls::load(&config).unwrap_err().to_string();
        assert!(
            error.contains("tls_cert") && error.contains("absent.pem"),
            "{error}"
        );
        let (cert, _) = pki.node("n1", &["127.0.0.1"]);
        config.tls_cert = Some(cert);
        let error = LinkTls::load(&config).unwrap_err().to_string();
        assert!(
            error.contains("tls_key") && error.contains("absent.key"),
            "{error}"
        );
    }
}
