//! The MQTT 5 client side of a node link: one TCP connection (TLS on it with `[cluster]
//! tls_*`, see `crate::tls`) to another node's cluster listener, written in batches
//! (everything queued goes out in one write).

use crate::tls::LinkTls;
use crate::ClusterError;
use bytes::BytesMut;
use hayate_codec::{decode, encode, ConnAck, Connect, Packet, Properties, ProtocolVersion};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// How long the TCP connection and CONNACK may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest packet a node takes from another.
const MAX_PACKET: u32 = 256 * 1024 * 1024;

/// The byte stream of a connection.
#[derive(Debug)]
enum LinkStream {
    Tcp(TcpStream),
    /// Boxed: a TLS stream is large, and only moved once.
    Tls(Box<TlsStream<TcpStream>>),
}

impl LinkStream {
    /// Writes `bytes` and pushes them to the socket (TLS records included).
    async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            LinkStream::Tcp(tcp) => tcp.write_all(bytes).await,
            LinkStream::Tls(tls) => {
                tls.write_all(bytes).await?;
                tls.flush().await
            }
        }
    }

    async fn read_buf(&mut self, buf: &mut BytesMut) -> std::io::Result<usize> {
        match self {
            LinkStream::Tcp(tcp) => tcp.read_buf(buf).await,
            LinkStream::Tls(tls) => tls.read_buf(buf).await,
        }
    }

    /// Ends the stream (TLS: close_notify first).
    async fn shutdown(&mut self) -> std::io::Result<()> {
        match self {
            LinkStream::Tcp(tcp) => tcp.shutdown().await,
            LinkStream::Tls(tls) => tls.shutdown().await,
        }
    }
}

/// One connection to another node.
#[derive(Debug)]
pub(crate) struct NodeClient {
    stream: LinkStream,
    read_buf: BytesMut,
    write_buf: BytesMut,
    /// Writes done (for the messages-per-write figure).
    pub writes: u64,
}

/// What the other node said to CONNECT.
pub(crate) struct Connected {
    pub client: NodeClient,
    pub connack: ConnAck,
}

impl NodeClient {
    /// Connects as `client_id` with the cluster's `secret`, over TLS when `tls`; `clean_start`
    /// to begin a new session there.
    pub(crate) async fn connect(
        address: SocketAddr,
        tls: Option<&LinkTls>,
        client_id: &str,
        secret: Option<&str>,
        clean_start: bool,
        keep_alive: u16,
        session_expiry: u32,
    ) -> Result<Connected, ClusterError> {
        let connect = Connect {
            protocol: ProtocolVersion::V5,
            clean_start,
            keep_alive,
            client_id: client_id.into(),
            will: None,
            username: None,
            password: secret.map(|s| bytes::Bytes::copy_from_slice(s.as_bytes())),
            properties: Properties {
                // A link asks for `u32::MAX`: the other node keeps what it queued for this one
                // across a link drop, and ends the session itself once this node is declared
                // dead for good.
                session_expiry_interval: Some(session_expiry),
                maximum_packet_size: Some(MAX_PACKET),
                ..Properties::default()
            },
            bridge: false,
        };
        tokio::time::timeout(CONNECT_TIMEOUT, Self::connect_inner(address, tls, connect))
            .await
            .map_err(|_| ClusterError::Timeout("CONNACK"))?
    }

    async fn connect_inner(
        address: SocketAddr,
        tls: Option<&LinkTls>,
        connect: Connect,
    ) -> Result<Connected, ClusterError> {
        let tcp = TcpStream::connect(address).await?;
        tcp.set_nodelay(true)?;
        let stream = match tls {
            Some(tls) => LinkStream::Tls(Box::new(tls.connect(address.ip(), tcp).await?)),
            None => LinkStream::Tcp(tcp),
        };
        let mut client = NodeClient {
            stream,
            read_buf: BytesMut::with_capacity(16 * 1024),
            write_buf: BytesMut::new(),
            writes: 0,
        };
        client.queue(&Packet::Connect(Box::new(connect)))?;
        client.flush().await?;
        loop {
            match client.next_buffered()? {
                Some(Packet::ConnAck(connack)) if connack.reason_code.is_error() => {
                    return Err(ClusterError::Refused(connack.reason_code.0))
                }
                Some(Packet::ConnAck(connack)) => return Ok(Connected { client, connack }),
                Some(other) => {
                    return Err(ClusterError::Protocol(format!(
                        "expected CONNACK, got {:?}",
                        other.packet_type()
                    )))
                }
                None => client.read().await?,
            }
        }
    }

    /// Adds a packet to the next write.
    pub(crate) fn queue(&mut self, packet: &Packet) -> Result<(), ClusterError> {
        encode(packet, ProtocolVersion::V5, &mut self.write_buf)?;
        Ok(())
    }

    /// Writes everything queued.
    pub(crate) async fn flush(&mut self) -> Result<(), ClusterError> {
        if !self.write_buf.is_empty() {
            self.stream.write_all(&self.write_buf).await?;
            self.write_buf.clear();
            self.writes += 1;
        }
        Ok(())
    }

    /// Reads what the socket has (at least one byte).
    pub(crate) async fn read(&mut self) -> Result<(), ClusterError> {
        self.read_buf.reserve(64 * 1024);
        match self.stream.read_buf(&mut self.read_buf).await? {
            0 => Err(ClusterError::Closed),
            _ => Ok(()),
        }
    }

    /// The next complete packet already read.
    pub(crate) fn next_buffered(&mut self) -> Result<Option<Packet>, ClusterError> {
        Ok(decode(&mut self.read_buf, ProtocolVersion::V5, MAX_PACKET)?)
    }

    /// Says goodbye (the other node keeps the session).
    pub(crate) async fn disconnect(mut self) {
        let disconnect = Packet::Disconnect(hayate_codec::Disconnect {
            reason_code: hayate_codec::ReasonCode::SUCCESS,
            properties: Properties::default(),
        });
        if self.queue(&disconnect).is_ok() {
            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                self.flush().await?;
                self.stream.shutdown().await.map_err(ClusterError::from)
            })
            .await;
        }
    }
}
