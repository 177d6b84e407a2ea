//! TLS-PSK listeners (OpenSSL; rustls has no PSK support): TLS 1.2 `PSK` cipher suites keyed
//! from a Mosquitto-style `psk_file` (`identity:hexkey` lines), with an optional identity hint,
//! as Mosquitto's `psk_hint`/`psk_file` listeners speak them. The PSK identity of a connection
//! is its transport identity (a user name with `use_identity_as_username`).
//!
//! The key file is read at start and on [`PskAcceptorHandle::reload`]; a failed reload keeps the
//! keys in force.

use hayate_auth::PskFile;
use openssl::ssl::{Ssl, SslContext, SslContextBuilder, SslMethod, SslMode, SslVersion};
use parking_lot::RwLock;
use std::ffi::CString;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use thiserror::Error;
use tokio::net::TcpStream;
use tokio_openssl::SslStream;

/// Why a PSK listener could not be set up.
#[derive(Debug, Error)]
pub enum PskError {
    /// The key file is unreadable or malformed.
    #[error(transparent)]
    File(#[from] hayate_auth::AuthError),
    /// OpenSSL refused the settings (e.g. an unknown cipher list).
    #[error("OpenSSL: {0}")]
    OpenSsl(#[from] openssl::error::ErrorStack),
    /// The hint contains a NUL byte.
    #[error("psk_hint must not contain NUL bytes")]
    BadHint,
}

/// The settings of a PSK listener.
#[derive(Debug, Clone)]
pub struct PskSettings {
    /// `identity:hexkey` lines.
    pub psk_file: PathBuf,
    /// Identity hint sent to clients (Mosquitto's `psk_hint`).
    pub hint: Option<String>,
    /// OpenSSL cipher list.
    pub ciphers: String,
}

/// The current OpenSSL context of a PSK listener.
#[derive(Debug)]
pub struct PskAcceptorHandle {
    settings: PskSettings,
    keys: Arc<RwLock<Arc<PskFile>>>,
    context: SslContext,
}

impl PskAcceptorHandle {
    /// Reads the key file and builds the context.
    pub fn load(settings: PskSettings) -> Result<PskAcceptorHandle, PskError> {
        let keys = Arc::new(RwLock::new(Arc::new(PskFile::load(&settings.psk_file)?)));
        let context = build(&settings, keys.clone())?;
        Ok(PskAcceptorHandle {
            settings,
            keys,
            context,
        })
    }

    /// Re-reads the key file; on error the keys in force stay.
    pub fn reload(&self) -> Result<(), PskError> {
        let keys = PskFile::load(&self.settings.psk_file)?;
        *self.keys.write() = Arc::new(keys);
        Ok(())
    }

    /// Runs the server side of the handshake on `tcp`; returns the stream and the client's
    /// PSK identity.
    pub async fn accept(
        &self,
        tcp: TcpStream,
    ) -> Result<(SslStream<TcpStream>, Option<String>), std::io::Error> {
        let ssl = Ssl::new(&self.context).map_err(std::io::Error::other)?;
        let mut stream = SslStream::new(ssl, tcp).map_err(std::io::Error::other)?;
        Pin::new(&mut stream)
            .accept()
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let identity = stream
            .ssl()
            .psk_identity()
            .map(|id| String::from_utf8_lossy(id).into_owned());
        Ok((stream, identity))
    }
}

fn build(settings: &PskSettings, keys: Arc<RwLock<Arc<PskFile>>>) -> Result<SslContext, PskError> {
    let mut builder = SslContextBuilder::new(SslMethod::tls_server())?;
    // The PSK cipher suites are TLS 1.2 ones; TLS 1.3 PSK needs callbacks the Rust bindings
    // do not offer.
    builder.set_min_proto_version(Some(SslVersion::TLS1_2))?;
    builder.set_max_proto_version(Some(SslVersion::TLS1_2))?;
    builder.set_cipher_list(&settings.ciphers)?;
    // Without this every connection keeps OpenSSL's read and write record buffers (~17 KB each)
    // for its whole life; with it they are freed whenever empty, so an idle connection holds
    // none (Mosquitto sets the same mode). Costs an allocation per record read or written.
    builder.set_mode(SslMode::RELEASE_BUFFERS);
    builder.set_psk_server_callback(move |_ssl, identity, psk_out| {
        let identity = identity.and_then(|id| std::str::from_utf8(id).ok());
        let keys = keys.read().clone();
        match identity.and_then(|id| keys.get(id)) {
            Some(key) if key.len() <= psk_out.len() => {
                psk_out[..key.len()].copy_from_slice(key);
                Ok(key.len())
            }
            _ => {
                tracing::info!(identity = ?identity, "psk_unknown_identity");
                // 0: no key; OpenSSL fails the handshake with unknown_psk_identity.
                Ok(0)
            }
        }
    });
    if let Some(hint) = &settings.hint {
        let hint = CString::new(hint.as_str()).map_err(|_| PskError::BadHint)?;
        set_identity_hint(&mut builder, &hint)?;
    }
    Ok(builder.build())
}

#[allow(unsafe_code)]
mod ffi {
    // SAFETY: the declaration matches OpenSSL's `int SSL_CTX_use_psk_identity_hint(SSL_CTX *ctx,
    // const char *hint)` (ssl.h, OpenSSL 1.1 and 3.x); libssl is linked by openssl-sys.
    unsafe extern "C" {
        pub(super) fn SSL_CTX_use_psk_identity_hint(
            ctx: *mut openssl_sys::SSL_CTX,
            hint: *const std::ffi::c_char,
        ) -> std::ffi::c_int;
    }
}

/// `SSL_CTX_use_psk_identity_hint`, which neither `openssl` nor `openssl-sys` binds.
#[allow(unsafe_code)]
fn set_identity_hint(
    builder: &mut SslContextBuilder,
    hint: &CString,
) -> Result<(), openssl::error::ErrorStack> {
    // SAFETY: `builder.as_ptr()` is a valid SSL_CTX for the duration of the call, and `hint` is
    // a NUL-terminated string that OpenSSL copies (it does not keep the pointer).
    let ok = unsafe { ffi::SSL_CTX_use_psk_identity_hint(builder.as_ptr(), hint.as_ptr()) };
    if ok == 1 {
        Ok(())
    } else {
        Err(openssl::error::ErrorStack::get())
    }
}
