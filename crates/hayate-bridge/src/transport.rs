//! How a bridge reaches its remote broker: plain TCP, TLS with certificates (rustls, `ring`
//! provider: `bridge_cafile`/`bridge_capath`, `bridge_certfile`/`bridge_keyfile`,
//! `bridge_insecure`, `bridge_tls_version`, `bridge_alpn`) or TLS-PSK (OpenSSL, TLS 1.2 `PSK`
//! cipher suites as Mosquitto's `psk_hint`/`psk_file` listeners speak them: `bridge_identity`,
//! `bridge_psk`; rustls has no PSK support).
//!
//! The files are read on every connection attempt, so a certificate renewed on disk is used
//! from the next reconnection on.

use crate::config::BridgeConfig;
use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode, SslVersion};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpSocket, TcpStream};

/// Longest PSK OpenSSL takes (`PSK_MAX_PSK_LEN`).
const MAX_PSK_BYTES: usize = 256;
/// OpenSSL cipher list offered on a PSK link: ECDHE-PSK suites (forward secrecy, cheap) and
/// plain PSK ones, no null encryption. Not DHE-PSK: Mosquitto picks it by its own preference
/// when offered, and its finite-field DH costs the central broker several milliseconds of
/// CPU per handshake (70 s to accept 2,800 links in the bridge swarm, against 2 s with
/// ECDHE-PSK); not RSA-PSK, which needs a server certificate.
const PSK_CIPHERS: &str = "kECDHEPSK:kPSK:!eNULL";

/// A bridge's way to its remote broker, built from its configuration.
pub(crate) enum Connector {
    /// Plain TCP.
    Tcp,
    /// TLS with certificates.
    Tls(tokio_rustls::TlsConnector),
    /// TLS-PSK.
    Psk(SslConnector),
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Connector::Tcp => "Connector::Tcp",
            Connector::Tls(_) => "Connector::Tls",
            Connector::Psk(_) => "Connector::Psk",
        })
    }
}

impl Connector {
    /// Reads the files `config` names and builds the connector; the error names the key.
    pub(crate) fn new(config: &BridgeConfig) -> Result<Connector, String> {
        if let (Some(identity), Some(psk)) = (&config.identity, &config.psk) {
            return psk_connector(config, identity, psk).map(Connector::Psk);
        }
        if config.cafile.is_none() && config.capath.is_none() {
            return Ok(Connector::Tcp);
        }
        tls_connector(config).map(Connector::Tls)
    }

    /// Connects to `address` (`host:port`), from `bind` when set, and runs the handshake.
    pub(crate) async fn connect(
        &self,
        address: &str,
        bind: Option<SocketAddr>,
    ) -> io::Result<RemoteStream> {
        let tcp = tcp_connect(address, bind).await?;
        tcp.set_nodelay(true)?;
        let host = host_of(address);
        match self {
            Connector::Tcp => Ok(RemoteStream::Tcp(tcp)),
            Connector::Tls(connector) => {
                let name = ServerName::try_from(host.to_string()).map_err(|e| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("TLS server name {host:?}: {e}"),
                    )
                })?;
                let stream = connector.connect(name, tcp).await?;
                Ok(RemoteStream::Tls(Box::new(stream)))
            }
            Connector::Psk(connector) => {
                let ssl = connector
                    .configure()
                    .and_then(|c| {
                        c.verify_hostname(false)
                            .use_server_name_indication(host.parse::<std::net::IpAddr>().is_err())
                            .into_ssl(host)
                    })
                    .map_err(io::Error::other)?;
                let mut stream =
                    tokio_openssl::SslStream::new(ssl, tcp).map_err(io::Error::other)?;
                Pin::new(&mut stream).connect().await.map_err(|e| {
                    io::Error::other(match e.ssl_error() {
                        Some(stack) => format!("TLS-PSK handshake: {stack}"),
                        None => format!("TLS-PSK handshake: {e}"),
                    })
                })?;
                Ok(RemoteStream::Psk(Box::new(stream)))
            }
        }
    }
}

/// TCP connection to `address`, from `bind` when set (`bridge_bind_address`).
async fn tcp_connect(address: &str, bind: Option<SocketAddr>) -> io::Result<TcpStream> {
    let Some(bind) = bind else {
        return TcpStream::connect(address).await;
    };
    let mut last = None;
    for target in tokio::net::lookup_host(address).await? {
        if target.is_ipv4() != bind.is_ipv4() {
            continue;
        }
        let socket = if target.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        socket.bind(bind)?;
        match socket.connect(target).await {
            Ok(stream) => return Ok(stream),
            Err(error) => last = Some(error),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            format!("{address} has no address of the family of bridge_bind_address {bind}"),
        )
    }))
}

/// The host part of `host:port` (`[v6]:port` too).
pub(crate) fn host_of(address: &str) -> &str {
    if let Some(rest) = address.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match address.rsplit_once(':') {
        Some((host, _)) if !host.contains(':') => host,
        _ => address,
    }
}

fn tls_connector(config: &BridgeConfig) -> Result<tokio_rustls::TlsConnector, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&'static rustls::SupportedProtocolVersion] = match config.tls_version.as_deref()
    {
        None => rustls::DEFAULT_VERSIONS,
        Some("tlsv1.3") => &[&rustls::version::TLS13],
        Some("tlsv1.2") => &[&rustls::version::TLS12],
        Some(other) => return Err(format!("bridge_tls_version {other} is not supported")),
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| format!("TLS setup: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    if let Some(file) = &config.cafile {
        let certs = read_certs(file).map_err(|e| format!("bridge_cafile {e}"))?;
        roots.add_parsable_certificates(certs);
    }
    if let Some(dir) = &config.capath {
        roots.add_parsable_certificates(read_cert_dir(dir)?);
    }
    if roots.is_empty() {
        return Err("bridge_cafile/bridge_capath: no usable CA certificate".into());
    }
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| format!("bridge_cafile: {e}"))?;
    let verifier: Arc<dyn ServerCertVerifier> = if config.insecure {
        Arc::new(AnyServerName(verifier))
    } else {
        verifier
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut client = match (&config.certfile, &config.keyfile) {
        (Some(cert), Some(key)) => {
            let chain = read_certs(cert).map_err(|e| format!("bridge_certfile {e}"))?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                format!(
                    "bridge_keyfile {}: no private key read ({e})",
                    key.display()
                )
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("bridge_certfile/bridge_keyfile: {e}"))?
        }
        _ => builder.with_no_client_auth(),
    };
    if let Some(alpn) = &config.alpn {
        client.alpn_protocols = vec![alpn.as_bytes().to_vec()];
    }
    Ok(tokio_rustls::TlsConnector::from(Arc::new(client)))
}

fn psk_connector(config: &BridgeConfig, identity: &str, hex: &str) -> Result<SslConnector, String> {
    let key = decode_hex(hex).ok_or("bridge_psk must be an even number of hex digits")?;
    if key.is_empty() || key.len() > MAX_PSK_BYTES {
        return Err(format!("bridge_psk must be 1 to {MAX_PSK_BYTES} bytes"));
    }
    if identity.is_empty() || identity.contains('\0') {
        return Err("bridge_identity must not be empty or contain NUL".into());
    }
    match config.tls_version.as_deref() {
        None | Some("tlsv1.2") => {}
        Some(other) => {
            return Err(format!(
                "bridge_tls_version {other}: TLS-PSK bridges speak TLS 1.2 only"
            ))
        }
    }
    let err = |e: openssl::error::ErrorStack| format!("TLS-PSK setup (OpenSSL): {e}");
    let mut builder = SslConnector::builder(SslMethod::tls_client()).map_err(err)?;
    // The key authenticates both sides: there is no certificate to verify.
    builder.set_verify(SslVerifyMode::NONE);
    builder.set_cipher_list(PSK_CIPHERS).map_err(err)?;
    builder
        .set_max_proto_version(Some(SslVersion::TLS1_2))
        .map_err(err)?;
    if let Some(alpn) = &config.alpn {
        let mut wire = vec![u8::try_from(alpn.len()).map_err(|_| "bridge_alpn is too long")?];
        wire.extend_from_slice(alpn.as_bytes());
        builder.set_alpn_protos(&wire).map_err(err)?;
    }
    let identity = identity.as_bytes().to_vec();
    builder.set_psk_client_callback(move |_ssl, _hint, id_out, key_out| {
        if identity.len() >= id_out.len() || key.len() > key_out.len() {
            return Err(openssl::error::ErrorStack::get());
        }
        id_out[..identity.len()].copy_from_slice(&identity);
        id_out[identity.len()] = 0;
        key_out[..key.len()].copy_from_slice(&key);
        Ok(key.len())
    });
    Ok(builder.build())
}

/// Hex to bytes (`None` unless an even count of hex digits).
fn decode_hex(text: &str) -> Option<Vec<u8>> {
    let text = text.trim();
    if text.len() % 2 != 0 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no PEM certificate in it", path.display()));
    }
    Ok(certs)
}

/// Every PEM certificate in the files of `dir` (`bridge_capath`; files that hold none are
/// skipped, as OpenSSL's hashed directories hold links and other files).
fn read_cert_dir(dir: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("bridge_capath {}: {e}", dir.display()))?;
    let mut certs = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_file() {
            certs.extend(read_certs(&path).unwrap_or_default());
        }
    }
    Ok(certs)
}

/// `bridge_insecure`: the certificate chain is verified as usual, the host name is not
/// (Mosquitto's meaning: the remote broker's certificate need not name the host connected to).
#[derive(Debug)]
struct AnyServerName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyServerName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // webpki checks the chain before the name: a name error means the chain is good.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// A connection to the remote broker.
#[derive(Debug)]
pub(crate) enum RemoteStream {
    /// Plain TCP.
    Tcp(TcpStream),
    /// TLS (rustls).
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    /// TLS-PSK (OpenSSL).
    Psk(Box<tokio_openssl::SslStream<TcpStream>>),
}

impl RemoteStream {
    /// `"TLSv1.3 TLS13_AES_256_GCM_SHA384"`, `"TLSv1.2 ECDHE-PSK-CHACHA20-POLY1305"`; `None`
    /// on TCP.
    pub(crate) fn tls_description(&self) -> Option<String> {
        match self {
            RemoteStream::Tcp(_) => None,
            RemoteStream::Tls(stream) => {
                let connection = stream.get_ref().1;
                let version = match connection.protocol_version() {
                    Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3".to_string(),
                    Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2".to_string(),
                    Some(other) => format!("{other:?}"),
                    None => "TLS".to_string(),
                };
                let suite = connection
                    .negotiated_cipher_suite()
                    .map(|suite| format!("{:?}", suite.suite()))
                    .unwrap_or_default();
                Some(format!("{version} {suite}").trim().to_string())
            }
            RemoteStream::Psk(stream) => {
                let ssl = stream.ssl();
                let cipher = ssl.current_cipher().map_or("", |c| c.name());
                Some(format!("{} {cipher}", ssl.version_str()).trim().to_string())
            }
        }
    }
}

impl AsyncRead for RemoteStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            RemoteStream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            RemoteStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            RemoteStream::Psk(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for RemoteStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            RemoteStream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            RemoteStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            RemoteStream::Psk(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            RemoteStream::Tcp(s) => Pin::new(s).poll_flush(cx),
            RemoteStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            RemoteStream::Psk(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            RemoteStream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            RemoteStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            RemoteStream::Psk(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_of_an_address() {
        assert_eq!(host_of("broker.example:8883"), "broker.example");
        assert_eq!(host_of("127.0.0.1:1883"), "127.0.0.1");
        assert_eq!(host_of("[::1]:8883"), "::1");
        assert_eq!(host_of("broker"), "broker");
    }

    #[test]
    fn psk_settings_are_checked() {
        let mut config = BridgeConfig::new("b");
        config.identity = Some("edge".into());
        config.psk = Some("abc".into());
        assert!(Connector::new(&config).unwrap_err().contains("hex"));
        config.psk = Some("00ff".into());
        assert!(matches!(Connector::new(&config), Ok(Connector::Psk(_))));
        config.tls_version = Some("tlsv1.3".into());
        assert!(Connector::new(&config).unwrap_err().contains("TLS 1.2"));
    }

    #[test]
    fn tls_needs_a_readable_ca() {
        let mut config = BridgeConfig::new("b");
        assert!(matches!(Connector::new(&config), Ok(Connector::Tcp)));
        config.cafile = Some("/nonexistent/ca.pem".into());
        assert!(Connector::new(&config)
            .unwrap_err()
            .starts_with("bridge_cafile"));
    }
}
