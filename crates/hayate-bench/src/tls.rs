//! Transport of the bench's clients: plain TCP, TLS (rustls with the `ring` provider) or
//! TLS-PSK (OpenSSL, TLS 1.2 `PSK` cipher suites as Mosquitto's `psk_hint`/`psk_file`
//! listeners speak them — rustls has no PSK support).
//!
//! [`TlsSettings`] is what travels (as JSON) to worker processes; each process builds its
//! [`Connector`] once and wraps every TCP connection in a [`Stream`].

use crate::args::CommonArgs;
use crate::client::{classify_io, ConnectError};
use bytes::BytesMut;
use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode, SslVersion};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Longest PSK accepted (OpenSSL's `PSK_MAX_PSK_LEN`).
pub const MAX_PSK_BYTES: usize = 256;

/// System CA bundles tried when TLS is on without `--cafile` (Debian/Ubuntu, Fedora/RHEL,
/// openSUSE, Alpine).
const SYSTEM_CA_FILES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// How the clients secure their connections.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsSettings {
    /// Name checked against the broker's certificate and sent as SNI (a DNS name or an IP
    /// address; `--tls-server-name`, default `--host`).
    pub server_name: String,
    /// Certificates or PSK.
    pub mode: TlsMode,
}

/// Certificate-based TLS or TLS-PSK.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TlsMode {
    /// TLS 1.2/1.3 with certificates (rustls).
    Certificates {
        /// CA certificates (PEM) that the broker's certificate must chain to; `None`: the
        /// system bundle.
        cafile: Option<PathBuf>,
        /// Client certificate chain (PEM).
        cert: Option<PathBuf>,
        /// Client private key (PEM: PKCS#8, PKCS#1 or SEC1).
        key: Option<PathBuf>,
        /// Accept any server certificate.
        insecure: bool,
    },
    /// TLS 1.2 with a pre-shared key (OpenSSL `PSK` cipher suites).
    Psk {
        /// PSK identity sent to the broker.
        identity: String,
        /// The key (decoded from `--psk` hex).
        key: Vec<u8>,
        /// OpenSSL cipher list offered (`--psk-ciphers`, default `PSK:!eNULL`).
        ciphers: String,
    },
}

impl TlsSettings {
    /// The TLS settings the options ask for (`None`: plain TCP), with the option checks.
    pub fn from_args(c: &CommonArgs) -> Result<Option<TlsSettings>, String> {
        let cert_opts = c.cafile.is_some() || c.cert.is_some() || c.key.is_some() || c.insecure;
        let psk = c.psk.is_some() || c.psk_identity.is_some();
        if c.psk_ciphers.is_some() && !psk {
            return Err("--psk-ciphers needs --psk-identity and --psk".into());
        }
        if psk && cert_opts {
            return Err(
                "--psk/--psk-identity (TLS-PSK) cannot be combined with --cafile, --cert, --key or --insecure (PSK uses no certificates)".into(),
            );
        }
        if !(c.tls || cert_opts || psk) {
            if c.tls_server_name.is_some() {
                return Err("--tls-server-name needs --tls (or --psk)".into());
            }
            return Ok(None);
        }
        let server_name = c.tls_server_name.clone().unwrap_or_else(|| c.host.clone());
        if ServerName::try_from(server_name.clone()).is_err() {
            return Err(format!(
                "{server_name:?} is not a valid TLS server name (use --tls-server-name)"
            ));
        }
        let mode = if psk {
            let (Some(identity), Some(hex)) = (&c.psk_identity, &c.psk) else {
                return Err("TLS-PSK needs both --psk-identity and --psk".into());
            };
            if identity.is_empty() || identity.len() > 128 || identity.contains('\0') {
                return Err("--psk-identity must be 1 to 128 bytes without NUL".into());
            }
            let key = decode_hex(hex).ok_or_else(|| {
                format!("--psk must be an even number of hex digits, got {hex:?}")
            })?;
            if key.is_empty() || key.len() > MAX_PSK_BYTES {
                return Err(format!("--psk must be 1 to {MAX_PSK_BYTES} bytes"));
            }
            TlsMode::Psk {
                identity: identity.clone(),
                key,
                ciphers: c.psk_ciphers.clone().unwrap_or_else(|| "PSK:!eNULL".into()),
            }
        } else {
            if c.cert.is_some() != c.key.is_some() {
                return Err("--cert and --key go together (client certificate and its key)".into());
            }
            TlsMode::Certificates {
                cafile: c.cafile.clone(),
                cert: c.cert.clone(),
                key: c.key.clone(),
                insecure: c.insecure,
            }
        };
        Ok(Some(TlsSettings { server_name, mode }))
    }

    /// `"tls"` or `"tls-psk"`.
    pub fn transport(&self) -> &'static str {
        match self.mode {
            TlsMode::Certificates { .. } => "tls",
            TlsMode::Psk { .. } => "tls-psk",
        }
    }

    /// Builds the connector (reads the certificate and key files).
    pub fn build(&self) -> Result<Connector, String> {
        match &self.mode {
            TlsMode::Certificates {
                cafile,
                cert,
                key,
                insecure,
            } => {
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
                    .with_safe_default_protocol_versions()
                    .map_err(|e| format!("TLS setup: {e}"))?;
                let builder = if *insecure {
                    builder
                        .dangerous()
                        .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
                } else {
                    let mut roots = rustls::RootCertStore::empty();
                    let file = match cafile {
                        Some(f) => f.clone(),
                        None => SYSTEM_CA_FILES
                            .iter()
                            .map(PathBuf::from)
                            .find(|p| p.exists())
                            .ok_or(
                                "TLS without --cafile needs a system CA bundle, and none was found: give --cafile (or --insecure)",
                            )?,
                    };
                    let certs = read_certs(&file)?;
                    let (added, _) = roots.add_parsable_certificates(certs);
                    if added == 0 {
                        return Err(format!("{}: no usable CA certificate", file.display()));
                    }
                    builder.with_root_certificates(roots)
                };
                let config = match (cert, key) {
                    (Some(cert), Some(key)) => {
                        let chain = read_certs(cert)?;
                        let key = PrivateKeyDer::from_pem_file(key)
                            .map_err(|e| format!("{}: no private key read ({e})", key.display()))?;
                        builder
                            .with_client_auth_cert(chain, key)
                            .map_err(|e| format!("--cert/--key: {e}"))?
                    }
                    _ => builder.with_no_client_auth(),
                };
                let name = ServerName::try_from(self.server_name.clone())
                    .map_err(|e| format!("TLS server name {:?}: {e}", self.server_name))?;
                Ok(Connector::Rustls {
                    connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
                    name,
                })
            }
            TlsMode::Psk {
                identity,
                key,
                ciphers,
            } => {
                let err = |e: openssl::error::ErrorStack| format!("TLS-PSK setup (OpenSSL): {e}");
                let mut b = SslConnector::builder(SslMethod::tls_client()).map_err(err)?;
                // PSK authenticates both sides; there is no certificate to verify.
                b.set_verify(SslVerifyMode::NONE);
                // TLS 1.2 PSK suites (PSK-AES256-GCM-SHA384, ECDHE-PSK-..., DHE-PSK-...).
                b.set_cipher_list(ciphers)
                    .map_err(|e| format!("--psk-ciphers {ciphers:?}: {e}"))?;
                b.set_max_proto_version(Some(SslVersion::TLS1_2))
                    .map_err(err)?;
                let identity = identity.clone().into_bytes();
                let key = key.clone();
                b.set_psk_client_callback(move |_ssl, _hint, id_out, key_out| {
                    if identity.len() >= id_out.len() || key.len() > key_out.len() {
                        return Err(openssl::error::ErrorStack::get());
                    }
                    id_out[..identity.len()].copy_from_slice(&identity);
                    id_out[identity.len()] = 0;
                    key_out[..key.len()].copy_from_slice(&key);
                    Ok(key.len())
                });
                Ok(Connector::Psk {
                    connector: b.build(),
                    name: self.server_name.clone(),
                })
            }
        }
    }
}

/// Hex to bytes (`None` when not an even count of hex digits).
pub fn decode_hex(text: &str) -> Option<Vec<u8>> {
    let t = text.trim();
    let t = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    if t.len() % 2 != 0 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..t.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&t[i..i + 2], 16).ok())
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

/// `--insecure`: accepts any server certificate (signatures are still checked, so the
/// handshake is a real one).
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
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
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A built TLS client, shared by every connection of a process.
pub enum Connector {
    /// rustls.
    Rustls {
        /// The connector (its config holds the roots, client certificate and session cache).
        connector: tokio_rustls::TlsConnector,
        /// Server name for SNI and verification.
        name: ServerName<'static>,
    },
    /// OpenSSL with a PSK client callback.
    Psk {
        /// The connector.
        connector: SslConnector,
        /// Server name for SNI (not verified).
        name: String,
    },
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Connector::Rustls { name, .. } => write!(f, "Connector::Rustls({name:?})"),
            Connector::Psk { name, .. } => write!(f, "Connector::Psk({name:?})"),
        }
    }
}

impl Connector {
    /// Runs the TLS handshake over a connected socket.
    pub async fn connect(&self, tcp: TcpStream) -> Result<Stream, ConnectError> {
        match self {
            Connector::Rustls { connector, name } => connector
                .connect(name.clone(), tcp)
                .await
                .map(|s| Stream::Tls(Box::new(s)))
                .map_err(|e| rustls_error(&e)),
            Connector::Psk { connector, name } => {
                let setup = |e: openssl::error::ErrorStack| ConnectError::Tls {
                    kind: "setup".into(),
                    detail: e.to_string(),
                };
                let ssl = connector
                    .configure()
                    .map_err(setup)?
                    .verify_hostname(false)
                    .use_server_name_indication(name.parse::<std::net::IpAddr>().is_err())
                    .into_ssl(name)
                    .map_err(setup)?;
                let mut stream = tokio_openssl::SslStream::new(ssl, tcp).map_err(setup)?;
                match Pin::new(&mut stream).connect().await {
                    Ok(()) => Ok(Stream::Psk(Box::new(stream))),
                    Err(e) => Err(openssl_error(&e)),
                }
            }
        }
    }
}

/// Lower-case words joined by `-` (`"tlsv1 alert decrypt error"` → `alert-decrypt-error`,
/// `DecryptError` → `decrypt-error`).
fn slug(text: &str) -> String {
    let mut spaced = String::with_capacity(text.len() + 8);
    let mut prev_lower = false;
    for c in text.chars() {
        if c.is_ascii_uppercase() && prev_lower {
            spaced.push(' ');
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        spaced.push(c);
    }
    let words: Vec<String> = spaced
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| w.to_ascii_lowercase())
        .collect();
    let skip = usize::from(
        words
            .first()
            .is_some_and(|w| w.starts_with("tlsv") || w.starts_with("sslv")),
    );
    words[skip.min(words.len())..].join("-")
}

fn rustls_error(e: &io::Error) -> ConnectError {
    let Some(inner) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) else {
        return ConnectError::Tls {
            kind: classify_io(e).reason(),
            detail: e.to_string(),
        };
    };
    use rustls::CertificateError as C;
    let kind = match inner {
        rustls::Error::AlertReceived(alert) => format!("alert-{}", slug(&format!("{alert:?}"))),
        rustls::Error::InvalidCertificate(c) => match c {
            C::UnknownIssuer => "unknown-issuer".into(),
            C::NotValidForName | C::NotValidForNameContext { .. } => "bad-server-name".into(),
            C::Expired | C::ExpiredContext { .. } => "certificate-expired".into(),
            _ => "bad-certificate".into(),
        },
        rustls::Error::NoCertificatesPresented => "no-certificate".into(),
        rustls::Error::PeerIncompatible(_) => "incompatible".into(),
        _ => "handshake".into(),
    };
    ConnectError::Tls {
        kind,
        detail: inner.to_string(),
    }
}

fn openssl_error(e: &openssl::ssl::Error) -> ConnectError {
    if let Some(io) = e.io_error() {
        return ConnectError::Tls {
            kind: classify_io(io).reason(),
            detail: io.to_string(),
        };
    }
    if let Some(stack) = e.ssl_error() {
        let reason = stack
            .errors()
            .iter()
            .rev()
            .find_map(|err| err.reason())
            .unwrap_or("handshake");
        let kind = slug(reason);
        return ConnectError::Tls {
            kind: if kind.is_empty() {
                "handshake".into()
            } else {
                kind
            },
            detail: stack.to_string(),
        };
    }
    if e.code() == openssl::ssl::ErrorCode::SYSCALL
        || e.code() == openssl::ssl::ErrorCode::ZERO_RETURN
    {
        return ConnectError::Tls {
            kind: "closed".into(),
            detail: "the broker closed the connection during the TLS handshake".into(),
        };
    }
    ConnectError::Tls {
        kind: "handshake".into(),
        detail: e.to_string(),
    }
}

/// A client connection: plain TCP, or TLS over it.
#[derive(Debug)]
pub enum Stream {
    /// Plain TCP.
    Tcp(TcpStream),
    /// TLS (rustls).
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    /// TLS-PSK (OpenSSL).
    Psk(Box<tokio_openssl::SslStream<TcpStream>>),
}

impl Stream {
    /// The TCP socket underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Tcp(s) => s,
            Stream::Tls(s) => s.get_ref().0,
            Stream::Psk(s) => s.get_ref(),
        }
    }

    /// Reads what is available without waiting (`WouldBlock` when nothing is).
    pub fn try_read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        if let Stream::Tcp(s) = self {
            return s.try_read_buf(buf);
        }
        // One poll of a read with a waker that does nothing: TLS records already received
        // are decrypted; nothing waits.
        let read = self.read_buf(buf);
        let mut read = std::pin::pin!(read);
        match read.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// Waits until a read may make progress: decrypted bytes are buffered, or the socket is
    /// readable.
    pub async fn readable(&mut self) -> io::Result<()> {
        let buffered = match self {
            Stream::Tcp(_) => false,
            Stream::Tls(s) => s
                .get_mut()
                .1
                .process_new_packets()
                .is_ok_and(|st| st.plaintext_bytes_to_read() > 0),
            Stream::Psk(s) => s.ssl().pending() > 0,
        };
        if buffered {
            return Ok(());
        }
        self.tcp().readable().await
    }

    /// `"TLSv1.3 TLS13_AES_256_GCM_SHA384"`, `"TLSv1.2 PSK-AES256-GCM-SHA384"`; `None` on TCP.
    pub fn tls_description(&self) -> Option<String> {
        match self {
            Stream::Tcp(_) => None,
            Stream::Tls(s) => {
                let c = s.get_ref().1;
                let version = match c.protocol_version() {
                    Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3".to_string(),
                    Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2".to_string(),
                    Some(v) => format!("{v:?}"),
                    None => "TLS".to_string(),
                };
                let suite = c
                    .negotiated_cipher_suite()
                    .map(|s| format!("{:?}", s.suite()))
                    .unwrap_or_default();
                Some(format!("{version} {suite}").trim().to_string())
            }
            Stream::Psk(s) => {
                let ssl = s.ssl();
                let cipher = ssl.current_cipher().map_or("", |c| c.name());
                Some(format!("{} {cipher}", ssl.version_str()).trim().to_string())
            }
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Stream::Psk(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Stream::Psk(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Stream::Psk(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Stream::Psk(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_and_slugs() {
        assert_eq!(decode_hex("00ff10"), Some(vec![0, 255, 16]));
        assert_eq!(decode_hex("0xABcd"), Some(vec![0xab, 0xcd]));
        assert_eq!(decode_hex("abc"), None);
        assert_eq!(decode_hex("zz"), None);
        assert_eq!(slug("tlsv1 alert decrypt error"), "alert-decrypt-error");
        assert_eq!(
            slug("sslv3 alert handshake failure"),
            "alert-handshake-failure"
        );
        assert_eq!(slug("no ciphers available"), "no-ciphers-available");
        assert_eq!(slug("DecryptError"), "decrypt-error");
        assert_eq!(slug("BadRecordMac"), "bad-record-mac");
    }
}
