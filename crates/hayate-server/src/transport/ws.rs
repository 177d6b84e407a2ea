//! MQTT over WebSocket (RFC 6455; MQTT 5.0 section 6): the HTTP/1.1 upgrade handshake with
//! the `mqtt` subprotocol, then binary frames carrying the MQTT byte stream. Framing,
//! masking, fragmentation, ping/pong and close are `tokio-websockets`'; this module does the
//! handshake (to negotiate the subprotocol and check the path) and adapts the message stream
//! to a byte stream. Text frames are a protocol error [MQTT-6.0.0-1].

use bytes::{Buf, Bytes, BytesMut};
use futures_core::Stream;
use futures_sink::Sink;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio_websockets::{Limits, Message, WebSocketStream};

use super::Prefixed;

/// Largest HTTP upgrade request read (headers included).
const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// Subprotocols accepted, in order of preference: MQTT 5.0 / 3.1.1 say `mqtt`; some 3.1
/// clients send `mqttv3.1`.
const SUBPROTOCOLS: [&str; 2] = ["mqtt", "mqttv3.1"];
/// The GUID of RFC 6455 section 1.3.
const WEBSOCKET_GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Why an upgrade was refused (answered with HTTP 400/404 and closed).
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// Reading or writing the socket failed.
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    /// Not a valid WebSocket upgrade request.
    #[error("bad upgrade request: {0}")]
    BadRequest(&'static str),
    /// The request is for another path.
    #[error("path not served: {0}")]
    WrongPath(String),
}

/// Answers the HTTP upgrade on `stream` for `path` and returns the WebSocket connection as a
/// byte stream.
pub async fn accept<S>(
    mut stream: S,
    path: &str,
    max_frame_payload: usize,
) -> Result<WsBytes<Prefixed<S>>, HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = BytesMut::with_capacity(1024);
    let (header_len, response) = loop {
        if stream.read_buf(&mut buf).await? == 0 {
            return Err(HandshakeError::BadRequest(
                "closed before the request ended",
            ));
        }
        match respond(&buf, path) {
            Ok(Some(done)) => break done,
            Ok(None) if buf.len() < MAX_REQUEST_BYTES => continue,
            Ok(None) => return Err(HandshakeError::BadRequest("request too large")),
            Err(error) => {
                let status: &[u8] = match error {
                    HandshakeError::WrongPath(_) => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    _ => b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                };
                let _ = stream.write_all(status).await;
                return Err(error);
            }
        }
    };
    stream.write_all(response.as_bytes()).await?;
    buf.advance(header_len);
    let limits = Limits::default().max_payload_len(Some(max_frame_payload));
    let ws = tokio_websockets::ServerBuilder::new()
        .limits(limits)
        .serve(Prefixed::new(buf, stream));
    Ok(WsBytes {
        ws,
        pending: Bytes::new(),
        closed: false,
    })
}

/// Parses the request in `buf`: `Ok(None)` while incomplete, else the header length and the
/// 101 response.
fn respond(buf: &[u8], path: &str) -> Result<Option<(usize, String)>, HandshakeError> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut request = httparse::Request::new(&mut headers);
    let header_len = match request.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(HandshakeError::BadRequest("malformed HTTP request")),
    };
    if request.method != Some("GET") {
        return Err(HandshakeError::BadRequest("method is not GET"));
    }
    let target = request.path.unwrap_or("");
    let request_path = target.split('?').next().unwrap_or("");
    if request_path != path {
        return Err(HandshakeError::WrongPath(request_path.to_string()));
    }
    let header = |name: &str| {
        request
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .filter_map(|h| std::str::from_utf8(h.value).ok())
            .collect::<Vec<_>>()
    };
    let has_token = |name: &str, token: &str| {
        header(name)
            .iter()
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    if !has_token("upgrade", "websocket") || !has_token("connection", "upgrade") {
        return Err(HandshakeError::BadRequest("not a WebSocket upgrade"));
    }
    if !header("sec-websocket-version")
        .iter()
        .any(|v| v.trim() == "13")
    {
        return Err(HandshakeError::BadRequest(
            "Sec-WebSocket-Version is not 13",
        ));
    }
    let key = header("sec-websocket-key")
        .first()
        .map(|k| k.trim().to_string())
        .ok_or(HandshakeError::BadRequest("no Sec-WebSocket-Key"))?;
    let offered: Vec<String> = header("sec-websocket-protocol")
        .iter()
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_ascii_lowercase())
        .collect();
    let protocol = SUBPROTOCOLS
        .iter()
        .find(|p| offered.iter().any(|o| o == *p))
        .copied();
    if protocol.is_none() && !offered.is_empty() {
        return Err(HandshakeError::BadRequest("no mqtt subprotocol offered"));
    }
    let mut hasher = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
    hasher.update(key.as_bytes());
    hasher.update(WEBSOCKET_GUID);
    let accept = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        hasher.finish().as_ref(),
    );
    let mut response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n"
    );
    if let Some(protocol) = protocol {
        response.push_str(&format!("Sec-WebSocket-Protocol: {protocol}\r\n"));
    }
    response.push_str("\r\n");
    Ok(Some((header_len, response)))
}

/// A WebSocket connection as a byte stream: binary frames in, one binary frame per write out.
pub struct WsBytes<S> {
    ws: WebSocketStream<S>,
    /// The unread rest of the last frame.
    pending: Bytes,
    closed: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for WsBytes<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(buf.remaining());
                buf.put_slice(&self.pending[..n]);
                self.pending.advance(n);
                return Poll::Ready(Ok(()));
            }
            if self.closed {
                return Poll::Ready(Ok(()));
            }
            match Pin::new(&mut self.ws).poll_next(cx) {
                Poll::Ready(Some(Ok(message))) => {
                    if message.is_binary() {
                        self.pending = message.into_payload().into();
                    } else if message.is_close() {
                        self.closed = true;
                    } else if message.is_text() {
                        // [MQTT-6.0.0-1] MQTT travels in binary frames only.
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "text frame on an MQTT WebSocket",
                        )));
                    }
                    // Ping and pong: the library answers pings itself.
                }
                Poll::Ready(Some(Err(error))) => {
                    return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, error)))
                }
                Poll::Ready(None) => {
                    self.closed = true;
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for WsBytes<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.ws).poll_ready(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(error)) => return Poll::Ready(Err(io::Error::other(error))),
            Poll::Pending => return Poll::Pending,
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let mut frame = BytesMut::with_capacity(total);
        for buf in bufs {
            frame.extend_from_slice(buf);
        }
        match Pin::new(&mut self.ws).start_send(Message::binary(frame.freeze())) {
            Ok(()) => Poll::Ready(Ok(total)),
            Err(error) => Poll::Ready(Err(io::Error::other(error))),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.ws)
            .poll_flush(cx)
            .map_err(io::Error::other)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.ws)
            .poll_close(cx)
            .map_err(io::Error::other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 6455 section 1.3's example key and accept value.
    #[test]
    fn accept_value_matches_rfc_6455_example() {
        let request = b"GET /mqtt HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mqtt\r\n\r\nrest";
        let (len, response) = respond(request, "/mqtt").expect("valid").expect("complete");
        assert_eq!(len, request.len() - 4);
        assert!(response.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
        assert!(response.contains("Sec-WebSocket-Protocol: mqtt\r\n"));
    }

    #[test]
    fn refuses_wrong_path_other_protocols_and_non_upgrades() {
        let base = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: a2V5\r\nSec-WebSocket-Version: 13\r\n";
        let req = |line: &str, extra: &str| format!("{line}\r\nHost: x\r\n{extra}\r\n");
        assert!(matches!(
            respond(req("GET /other HTTP/1.1", base).as_bytes(), "/mqtt"),
            Err(HandshakeError::WrongPath(_))
        ));
        let chat = format!("{base}Sec-WebSocket-Protocol: chat\r\n");
        assert!(respond(req("GET /mqtt HTTP/1.1", &chat).as_bytes(), "/mqtt").is_err());
        assert!(respond(
            req("GET /mqtt HTTP/1.1", "Sec-WebSocket-Version: 13\r\n").as_bytes(),
            "/mqtt"
        )
        .is_err());
        assert!(respond(req("POST /mqtt HTTP/1.1", base).as_bytes(), "/mqtt").is_err());
        assert!(respond(b"GET /mqtt HTTP/1.1\r\nHost", "/mqtt")
            .expect("partial")
            .is_none());
        // No subprotocol header at all is tolerated (some clients omit it).
        let (_, response) = respond(req("GET /mqtt?x=1 HTTP/1.1", base).as_bytes(), "/mqtt")
            .expect("valid")
            .expect("complete");
        assert!(!response.contains("Sec-WebSocket-Protocol"));
    }
}
