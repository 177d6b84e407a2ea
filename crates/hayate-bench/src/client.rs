//! The client side of MQTT: connecting (with source-address binding and error classification),
//! buffered reads and writes, and topic templates. Scenario logic lives in `engine`.

use crate::tls::{Connector, Stream, TlsSettings};
use bytes::BytesMut;
use hayate_codec::{
    decode, encode, ByteStr, Connect, DecodeError, Packet, PacketId, Properties, ProtocolVersion,
    QoS, Subscribe, SubscriptionOptions,
};
use serde::{Deserialize, Serialize};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

/// Largest packet the bench accepts from a broker.
pub const MAX_PACKET: u32 = 256 * 1024 * 1024;

/// How every client of a run connects.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientConfig {
    /// Broker address (`--host`/`--port`).
    pub addr: SocketAddr,
    /// Per-role broker addresses (`--targets`...): connection i of a role goes to entry
    /// i mod N of its list; empty lists mean `addr`.
    #[serde(default)]
    pub spread: crate::targets::Spread,
    /// `true` for MQTT 5, else 3.1.1.
    pub v5: bool,
    /// Keep alive, seconds (0 = off).
    pub keep_alive: u16,
    /// User name.
    pub username: Option<String>,
    /// Password.
    pub password: Option<String>,
    /// Clean session / clean start.
    pub clean: bool,
    /// Connect timeout (TCP + CONNACK), ms.
    pub connect_timeout_ms: u64,
    /// Local addresses to bind, round-robin by connection index.
    pub source_ips: Vec<IpAddr>,
    /// Client id prefix.
    pub client_id_prefix: String,
    /// TLS or TLS-PSK; `None` for plain TCP.
    pub tls: Option<TlsSettings>,
    /// The connector built from `tls`, once per process (not serialized: a worker process
    /// builds its own).
    #[serde(skip)]
    pub connector: Arc<OnceLock<Result<Arc<Connector>, String>>>,
}

impl ClientConfig {
    /// The codec protocol version.
    pub fn version(&self) -> ProtocolVersion {
        if self.v5 {
            ProtocolVersion::V5
        } else {
            ProtocolVersion::V311
        }
    }

    /// Client id of connection `index` with role letter `role`.
    pub fn client_id(&self, role: char, index: u64) -> String {
        format!("{}-{}{}", self.client_id_prefix, role, index)
    }

    fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms.max(1))
    }

    /// The TLS connector (built on first use); `Ok(None)` for plain TCP, `Err` when the
    /// certificate, key or CA files cannot be used.
    pub fn tls_connector(&self) -> Result<Option<Arc<Connector>>, String> {
        let Some(settings) = &self.tls else {
            return Ok(None);
        };
        self.connector
            .get_or_init(|| settings.build().map(Arc::new))
            .clone()
            .map(Some)
    }

    /// `"tcp"`, `"tls"` or `"tls-psk"`.
    pub fn transport(&self) -> &'static str {
        self.tls.as_ref().map_or("tcp", TlsSettings::transport)
    }
}

/// Why one connection attempt failed. [`ConnectError::reason`] is the key results count by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectError {
    /// TCP connection refused (nothing listening, or the backlog overflowed).
    Refused,
    /// No CONNACK within the connect timeout.
    Timeout,
    /// Connection reset by the peer.
    Reset,
    /// The broker closed the connection before CONNACK.
    Closed,
    /// No local port/address left (`EADDRNOTAVAIL`): use `--source-ips`.
    AddrUnavailable,
    /// Out of file descriptors (`EMFILE`/`ENFILE`): use `--processes`.
    TooManyOpenFiles,
    /// CONNACK with a non-zero return / reason code.
    ConnAck(u8),
    /// The broker sent something other than CONNACK, or malformed bytes.
    Protocol(String),
    /// Another I/O error.
    Io(String),
    /// The TLS handshake failed: `kind` is the short reason (`alert-decrypt-error`,
    /// `unknown-issuer`, `closed`...), `detail` what the TLS library said.
    Tls {
        /// Short reason, used in the `tls-KIND` key.
        kind: String,
        /// The TLS library's message.
        detail: String,
    },
}

impl ConnectError {
    /// Short reason key (`refused`, `timeout`, `connack-0x87`...).
    pub fn reason(&self) -> String {
        match self {
            ConnectError::Refused => "refused".into(),
            ConnectError::Timeout => "timeout".into(),
            ConnectError::Reset => "reset".into(),
            ConnectError::Closed => "closed".into(),
            ConnectError::AddrUnavailable => "addr-unavailable".into(),
            ConnectError::TooManyOpenFiles => "too-many-open-files".into(),
            ConnectError::ConnAck(code) => format!("connack-0x{code:02X}"),
            ConnectError::Protocol(_) => "protocol".into(),
            ConnectError::Io(kind) => format!("io-{kind}"),
            ConnectError::Tls { kind, .. } => format!("tls-{kind}"),
        }
    }

    /// A sentence for error messages.
    pub fn describe(&self) -> String {
        match self {
            ConnectError::Refused => "connection refused".into(),
            ConnectError::Timeout => "timed out waiting for TCP connect and CONNACK".into(),
            ConnectError::Reset => "connection reset".into(),
            ConnectError::Closed => "connection closed before CONNACK".into(),
            ConnectError::AddrUnavailable => {
                "no local address/port available (EADDRNOTAVAIL; use --source-ips)".into()
            }
            ConnectError::TooManyOpenFiles => {
                "too many open files (use --processes to spread connections)".into()
            }
            ConnectError::ConnAck(code) => format!(
                "CONNACK refused with code 0x{code:02X} ({})",
                connack_text(*code)
            ),
            ConnectError::Protocol(what) => format!("protocol error: {what}"),
            ConnectError::Io(kind) => format!("I/O error: {kind}"),
            ConnectError::Tls { kind, detail } => {
                format!("TLS handshake failed (tls-{kind}): {detail}")
            }
        }
    }
}

/// Meaning of a CONNACK code (v3 return codes 1–5, v5 reason codes).
pub fn connack_text(code: u8) -> &'static str {
    match code {
        0x01 => "unacceptable protocol version",
        0x02 => "identifier rejected",
        0x03 => "server unavailable",
        0x04 => "bad user name or password",
        0x05 => "not authorized",
        0x80 => "unspecified error",
        0x84 => "unsupported protocol version",
        0x85 => "client identifier not valid",
        0x86 => "bad user name or password",
        0x87 => "not authorized",
        0x88 => "server unavailable",
        0x89 => "server busy",
        0x8A => "banned",
        0x97 => "quota exceeded",
        0x9F => "connection rate exceeded",
        _ => "refused",
    }
}

/// Maps an I/O error to a [`ConnectError`].
pub fn classify_io(e: &io::Error) -> ConnectError {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => return ConnectError::Refused,
        io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted => {
            return ConnectError::Reset
        }
        io::ErrorKind::AddrNotAvailable | io::ErrorKind::AddrInUse => {
            return ConnectError::AddrUnavailable
        }
        io::ErrorKind::TimedOut => return ConnectError::Timeout,
        io::ErrorKind::UnexpectedEof | io::ErrorKind::BrokenPipe => return ConnectError::Closed,
        _ => {}
    }
    match e.raw_os_error() {
        Some(23) | Some(24) => ConnectError::TooManyOpenFiles,
        Some(99) => ConnectError::AddrUnavailable,
        _ => ConnectError::Io(format!("{:?}", e.kind()).to_lowercase()),
    }
}

/// One MQTT connection: the socket and its reusable buffers.
#[derive(Debug)]
pub struct Conn {
    /// The socket (TCP_NODELAY on), or TLS over it.
    pub stream: Stream,
    /// Bytes read and not yet decoded.
    pub rbuf: BytesMut,
    /// Bytes encoded and not yet written.
    pub wbuf: BytesMut,
    /// Negotiated protocol version.
    pub version: ProtocolVersion,
    /// The broker's v5 Receive Maximum (65,535 when absent).
    pub receive_maximum: u16,
}

impl Conn {
    /// Writes everything in `wbuf` and clears it.
    pub async fn flush(&mut self) -> io::Result<()> {
        if !self.wbuf.is_empty() {
            self.stream.write_all(&self.wbuf).await?;
            self.wbuf.clear();
            if !matches!(self.stream, Stream::Tcp(_)) {
                // TLS may keep records it could not write yet.
                self.stream.flush().await?;
            }
        }
        Ok(())
    }

    /// Encodes a (non-PUBLISH-hot-path) packet into `wbuf`.
    pub fn push(&mut self, packet: &Packet) {
        // Packets the bench builds are always encodable.
        let _ = encode(packet, self.version, &mut self.wbuf);
    }

    /// Decodes the next complete packet from `rbuf`.
    pub fn next_packet(&mut self) -> Result<Option<Packet>, DecodeError> {
        decode(&mut self.rbuf, self.version, MAX_PACKET)
    }

    /// Reads what the socket has without waiting. `Ok(false)` when the peer closed.
    pub fn try_fill(&mut self) -> io::Result<bool> {
        self.rbuf.reserve(256);
        match self.stream.try_read_buf(&mut self.rbuf) {
            Ok(0) => Ok(false),
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// Waits for bytes and reads them. `Ok(false)` when the peer closed.
    pub async fn fill(&mut self, reserve: usize) -> io::Result<bool> {
        self.rbuf.reserve(reserve);
        Ok(self.stream.read_buf(&mut self.rbuf).await? > 0)
    }

    /// Waits for the next packet (within `timeout`).
    pub async fn recv(&mut self, timeout: Duration) -> Result<Packet, ConnectError> {
        let work = async {
            loop {
                match self.next_packet() {
                    Ok(Some(p)) => return Ok(p),
                    Ok(None) => {}
                    Err(e) => return Err(ConnectError::Protocol(e.to_string())),
                }
                match self.fill(4096).await {
                    Ok(true) => {}
                    Ok(false) => return Err(ConnectError::Closed),
                    Err(e) => return Err(classify_io(&e)),
                }
            }
        };
        tokio::time::timeout(timeout, work)
            .await
            .unwrap_or(Err(ConnectError::Timeout))
    }

    /// Sends DISCONNECT and shuts the socket down (errors ignored: we are leaving).
    pub async fn disconnect(&mut self) {
        self.push(&Packet::Disconnect(Default::default()));
        let _ = self.flush().await;
        let _ = self.stream.shutdown().await;
    }

    /// Subscribes to one filter and waits for the SUBACK; `Err` with the reason on refusal.
    pub async fn subscribe(
        &mut self,
        filter: &str,
        qos: u8,
        timeout: Duration,
    ) -> Result<u8, String> {
        let qos = QoS::from_u8(qos).unwrap_or(QoS::AtMostOnce);
        let packet_id = PacketId::new(1).unwrap_or(PacketId::MIN);
        self.push(&Packet::Subscribe(Subscribe {
            packet_id,
            filters: vec![(ByteStr::from(filter), SubscriptionOptions::with_qos(qos))],
            properties: Properties::default(),
        }));
        self.flush().await.map_err(|e| classify_io(&e).describe())?;
        loop {
            match self.recv(timeout).await.map_err(|e| e.describe())? {
                Packet::SubAck(ack) => {
                    let code = ack.reason_codes.first().map_or(0x80, |c| c.0);
                    return if code >= 0x80 {
                        Err(format!("SUBACK code 0x{code:02X}"))
                    } else {
                        Ok(code)
                    };
                }
                // Retained or $SYS messages may arrive before the SUBACK; ignore them.
                Packet::Publish(_) | Packet::PingResp => continue,
                other => return Err(format!("expected SUBACK, got {:?}", other.packet_type())),
            }
        }
    }
}

/// Opens connection `index` (client id `PREFIX-<role><index>`), sends CONNECT and waits for a
/// successful CONNACK.
pub async fn connect(cfg: &ClientConfig, role: char, index: u64) -> Result<Conn, ConnectError> {
    let client_id = cfg.client_id(role, index);
    let addr = cfg.spread.addr(role, index, cfg.addr);
    let work = async {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .map_err(|e| classify_io(&e))?;
        if !cfg.source_ips.is_empty() {
            let ip = cfg.source_ips[(index % cfg.source_ips.len() as u64) as usize];
            socket
                .bind(SocketAddr::new(ip, 0))
                .map_err(|e| classify_io(&e))?;
        }
        let stream = socket.connect(addr).await.map_err(|e| classify_io(&e))?;
        let _ = stream.set_nodelay(true);
        let stream = match cfg.tls_connector() {
            Ok(None) => Stream::Tcp(stream),
            Ok(Some(tls)) => tls.connect(stream).await?,
            Err(detail) => {
                return Err(ConnectError::Tls {
                    kind: "setup".into(),
                    detail,
                })
            }
        };
        let version = cfg.version();
        let mut conn = Conn {
            stream,
            rbuf: BytesMut::new(),
            wbuf: BytesMut::with_capacity(128),
            version,
            receive_maximum: u16::MAX,
        };
        let mut properties = Properties::default();
        if cfg.v5 && !cfg.clean {
            properties.session_expiry_interval = Some(3600);
        }
        conn.push(&Packet::Connect(Box::new(Connect {
            protocol: version,
            clean_start: cfg.clean,
            keep_alive: cfg.keep_alive,
            client_id: ByteStr::from(client_id.as_str()),
            will: None,
            username: cfg.username.as_deref().map(ByteStr::from),
            password: cfg
                .password
                .as_ref()
                .map(|p| bytes::Bytes::copy_from_slice(p.as_bytes())),
            properties,
            bridge: false,
        })));
        conn.flush().await.map_err(|e| classify_io(&e))?;
        match conn.recv(cfg.connect_timeout()).await? {
            Packet::ConnAck(ack) => {
                if ack.reason_code.0 != 0 {
                    return Err(ConnectError::ConnAck(ack.reason_code.0));
                }
                if let Some(max) = ack.properties.receive_maximum {
                    conn.receive_maximum = max.max(1);
                }
                conn.rbuf = BytesMut::new();
                Ok(conn)
            }
            other => Err(ConnectError::Protocol(format!(
                "expected CONNACK, got {:?}",
                other.packet_type()
            ))),
        }
    };
    tokio::time::timeout(cfg.connect_timeout(), work)
        .await
        .unwrap_or(Err(ConnectError::Timeout))
}

/// A topic template: literal text with `%i` replaced by an index zero-padded to 6 digits.
/// Writing one needs no allocation beyond the caller's reusable buffer.
#[derive(Debug, Clone)]
pub struct TopicTemplate {
    parts: Vec<Vec<u8>>,
}

impl TopicTemplate {
    /// Parses a template.
    pub fn new(template: &str) -> TopicTemplate {
        TopicTemplate {
            parts: template
                .split("%i")
                .map(|p| p.as_bytes().to_vec())
                .collect(),
        }
    }

    /// True when the template contains `%i`.
    pub fn has_index(&self) -> bool {
        self.parts.len() > 1
    }

    /// Writes the topic for `index` into `out` (cleared first).
    pub fn write(&self, index: u64, out: &mut Vec<u8>) {
        out.clear();
        let mut digits = [0u8; 20];
        let mut n = index;
        let mut len = 0;
        loop {
            digits[len] = b'0' + (n % 10) as u8;
            n /= 10;
            len += 1;
            if n == 0 {
                break;
            }
        }
        while len < 6 {
            digits[len] = b'0';
            len += 1;
        }
        for (i, part) in self.parts.iter().enumerate() {
            if i > 0 {
                out.extend(digits[..len].iter().rev());
            }
            out.extend_from_slice(part);
        }
    }

    /// The topic for `index` as a string.
    pub fn topic(&self, index: u64) -> String {
        let mut out = Vec::new();
        self.write(index, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// The wildcard filter covering every topic of `template`: the levels before the first one
/// containing `%i`, then `#` (`hb/%i` → `hb/#`).
pub fn wildcard_filter(template: &str) -> String {
    let mut levels: Vec<&str> = Vec::new();
    for level in template.split('/') {
        if level.contains("%i") {
            break;
        }
        levels.push(level);
    }
    if levels.len() == template.split('/').count() {
        // No %i: the template is a single topic.
        return template.to_string();
    }
    levels.push("#");
    levels.join("/")
}

/// Parses `--source-ips`: `A-B` (an inclusive IPv4 range) or a comma list of addresses.
pub fn parse_source_ips(text: &str) -> Result<Vec<IpAddr>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(Vec::new());
    }
    if let Some((a, b)) = text.split_once('-') {
        let a: std::net::Ipv4Addr = a
            .trim()
            .parse()
            .map_err(|_| format!("--source-ips: {a:?} is not an IPv4 address"))?;
        let b: std::net::Ipv4Addr = b
            .trim()
            .parse()
            .map_err(|_| format!("--source-ips: {b:?} is not an IPv4 address"))?;
        let (a, b) = (u32::from(a), u32::from(b));
        if b < a {
            return Err("--source-ips: the range ends before it starts".into());
        }
        if b - a >= 65_536 {
            return Err("--source-ips: more than 65,536 addresses".into());
        }
        return Ok((a..=b).map(|v| IpAddr::V4(v.into())).collect());
    }
    text.split(',')
        .map(|s| {
            s.trim()
                .parse::<IpAddr>()
                .map_err(|_| format!("--source-ips: {s:?} is not an address"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates() {
        let t = TopicTemplate::new("hb/%i");
        assert_eq!(t.topic(7), "hb/000007");
        assert_eq!(t.topic(1_234_567), "hb/1234567");
        assert_eq!(TopicTemplate::new("a/%i/b%i").topic(3), "a/000003/b000003");
        assert!(!TopicTemplate::new("fixed").has_index());
        assert_eq!(wildcard_filter("hb/%i"), "hb/#");
        assert_eq!(wildcard_filter("hb/x/dev%i/up"), "hb/x/#");
        assert_eq!(wildcard_filter("%i"), "#");
        assert_eq!(wildcard_filter("fixed/topic"), "fixed/topic");
    }

    #[test]
    fn source_ips() {
        let ips = parse_source_ips("127.0.0.2-127.0.0.41").unwrap();
        assert_eq!(ips.len(), 40);
        assert_eq!(ips[0].to_string(), "127.0.0.2");
        assert_eq!(ips[39].to_string(), "127.0.0.41");
        assert_eq!(parse_source_ips("127.0.0.1, ::1").unwrap().len(), 2);
        assert!(parse_source_ips("127.0.0.9-127.0.0.2").is_err());
        assert!(parse_source_ips("nope").is_err());
    }

    #[test]
    fn error_reasons() {
        assert_eq!(ConnectError::ConnAck(0x87).reason(), "connack-0x87");
        let e = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert_eq!(classify_io(&e), ConnectError::Refused);
        assert_eq!(
            classify_io(&io::Error::from_raw_os_error(24)),
            ConnectError::TooManyOpenFiles
        );
    }
}
