//! The remote side of a bridge: an MQTT client over TCP, written with `hayate-codec`.

use crate::config::{BridgeConfig, BridgeProtocol};
use crate::transport::{Connector, RemoteStream};
use crate::BridgeError;
use bytes::BytesMut;
use hayate_codec::{decode, encode, ConnAck, Connect, Packet, Properties, ProtocolVersion, Will};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long connecting (TCP and CONNACK) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest packet accepted from the remote broker when the bridge sets no maximum.
const DEFAULT_MAX_PACKET: u32 = 256 * 1024 * 1024;

/// The protocol version of `bridge_protocol_version`.
pub fn protocol_version(protocol: BridgeProtocol) -> ProtocolVersion {
    match protocol {
        BridgeProtocol::Mqttv31 => ProtocolVersion::V31,
        BridgeProtocol::Mqttv311 => ProtocolVersion::V311,
        BridgeProtocol::Mqttv50 => ProtocolVersion::V5,
    }
}

/// A connection to the remote broker.
#[derive(Debug)]
pub(crate) struct Remote {
    stream: RemoteStream,
    version: ProtocolVersion,
    read_buf: BytesMut,
    write_buf: BytesMut,
    max_packet_size: u32,
}

/// The CONNECT a bridge sends to the remote broker.
pub(crate) fn connect_packet(config: &BridgeConfig, client_id: &str) -> Connect {
    let version = protocol_version(config.protocol_version);
    let mut properties = Properties::default();
    if version.is_v5() {
        properties.session_expiry_interval = match config.session_expiry_interval {
            Some(expiry) => Some(expiry),
            None if config.cleansession => None,
            // A bridge without clean session keeps its remote session across link drops.
            None => Some(u32::MAX),
        };
        properties.receive_maximum = config.receive_maximum;
        properties.maximum_packet_size = config.max_packet_size;
    }
    Connect {
        protocol: version,
        clean_start: config.cleansession,
        keep_alive: config.keepalive_interval_secs,
        client_id: client_id.into(),
        will: None,
        username: config.remote_username.as_deref().map(Into::into),
        password: config
            .remote_password
            .as_deref()
            .map(|p| bytes::Bytes::copy_from_slice(p.as_bytes())),
        properties,
        // Mosquitto's bridge bit (v3 only; a v5 bridge relies on No Local).
        bridge: config.try_private && !version.is_v5(),
    }
}

impl Remote {
    /// Connects to `address` (`host:port`) through `connector` and completes CONNECT.
    pub(crate) async fn connect(
        connector: &Connector,
        address: &str,
        config: &BridgeConfig,
        client_id: &str,
        will: Option<Will>,
    ) -> Result<(Remote, ConnAck), BridgeError> {
        let mut connect = connect_packet(config, client_id);
        connect.will = will;
        tokio::time::timeout(
            CONNECT_TIMEOUT,
            Remote::connect_inner(connector, address, config, connect),
        )
        .await
        .map_err(|_| BridgeError::Timeout("CONNACK"))?
    }

    async fn connect_inner(
        connector: &Connector,
        address: &str,
        config: &BridgeConfig,
        connect: Connect,
    ) -> Result<(Remote, ConnAck), BridgeError> {
        let bind = config
            .bind_address
            .as_deref()
            .and_then(|ip| ip.parse::<std::net::IpAddr>().ok())
            .map(|ip| std::net::SocketAddr::new(ip, 0));
        let stream = connector.connect(address, bind).await?;
        let version = protocol_version(config.protocol_version);
        let mut remote = Remote {
            stream,
            version,
            read_buf: BytesMut::with_capacity(4096),
            write_buf: BytesMut::new(),
            max_packet_size: config.max_packet_size.unwrap_or(DEFAULT_MAX_PACKET),
        };
        remote.queue(&Packet::Connect(Box::new(connect)))?;
        remote.flush().await?;
        loop {
            if let Some(packet) = remote.next_buffered()? {
                return match packet {
                    Packet::ConnAck(connack) if connack.reason_code.is_error() => {
                        Err(BridgeError::Refused(connack.reason_code.0))
                    }
                    // v3 return codes 1..=5 are refusals too.
                    Packet::ConnAck(connack) if !version.is_v5() && connack.reason_code.0 != 0 => {
                        Err(BridgeError::Refused(connack.reason_code.0))
                    }
                    Packet::ConnAck(connack) => Ok((remote, connack)),
                    other => Err(BridgeError::Protocol(format!(
                        "expected CONNACK, got {:?}",
                        other.packet_type()
                    ))),
                };
            }
            remote.read().await?;
        }
    }

    /// The TLS version and cipher suite, `None` on TCP.
    pub(crate) fn tls(&self) -> Option<String> {
        self.stream.tls_description()
    }

    /// The protocol version in use.
    pub(crate) fn version(&self) -> ProtocolVersion {
        self.version
    }

    /// Queues `packet` to be written by the next [`Remote::flush`].
    pub(crate) fn queue(&mut self, packet: &Packet) -> Result<(), BridgeError> {
        encode(packet, self.version, &mut self.write_buf)?;
        Ok(())
    }

    /// Writes what is queued.
    pub(crate) async fn flush(&mut self) -> Result<(), BridgeError> {
        if !self.write_buf.is_empty() {
            self.stream.write_all(&self.write_buf).await?;
            // TLS: push out the records still held by the TLS layer.
            self.stream.flush().await?;
            self.write_buf.clear();
        }
        Ok(())
    }

    /// Reads once from the socket (cancel safe); end of stream is an error.
    pub(crate) async fn read(&mut self) -> Result<(), BridgeError> {
        self.read_buf.reserve(16 * 1024);
        match self.stream.read_buf(&mut self.read_buf).await? {
            0 => Err(BridgeError::Closed),
            _ => Ok(()),
        }
    }

    /// The next complete packet already read, if any.
    pub(crate) fn next_buffered(&mut self) -> Result<Option<Packet>, BridgeError> {
        Ok(decode(
            &mut self.read_buf,
            self.version,
            self.max_packet_size,
        )?)
    }

    /// Sends DISCONNECT and closes.
    pub(crate) async fn disconnect(mut self) {
        let disconnect = Packet::Disconnect(hayate_codec::Disconnect {
            reason_code: hayate_codec::ReasonCode::SUCCESS,
            properties: Properties::default(),
        });
        if self.queue(&disconnect).is_ok() {
            let _ = tokio::time::timeout(Duration::from_secs(2), self.flush()).await;
        }
        let _ = self.stream.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(config: &BridgeConfig) -> BytesMut {
        let mut out = BytesMut::new();
        encode(
            &Packet::Connect(Box::new(connect_packet(config, "id"))),
            ProtocolVersion::V311,
            &mut out,
        )
        .expect("encodes");
        out
    }

    #[test]
    fn the_bridge_bit_is_set_on_the_protocol_level_with_try_private() {
        let mut config = BridgeConfig::new("b");
        config.protocol_version = BridgeProtocol::Mqttv311;
        let bridged = encoded(&config);
        config.try_private = false;
        let plain = encoded(&config);
        // 0x10, remaining length, 0x00 0x04 "MQTT", level.
        assert_eq!(&plain[2..8], b"\x00\x04MQTT");
        assert_eq!(plain[8], 4);
        assert_eq!(bridged[8], 0x84);
        assert_eq!(plain[9..], bridged[9..]);

        config.try_private = true;
        config.protocol_version = BridgeProtocol::Mqttv31;
        let v31 = encoded(&config);
        assert_eq!(&v31[2..10], b"\x00\x06MQIsdp");
        assert_eq!(v31[10], 0x83);

        config.protocol_version = BridgeProtocol::Mqttv50;
        assert_eq!(encoded(&config)[8], 5, "no bridge bit on v5");
    }

    #[test]
    fn v5_connect_carries_the_session_settings() {
        let mut config = BridgeConfig::new("b");
        config.protocol_version = BridgeProtocol::Mqttv50;
        config.receive_maximum = Some(7);
        let connect = connect_packet(&config, "id");
        assert!(!connect.clean_start);
        assert_eq!(connect.properties.session_expiry_interval, Some(u32::MAX));
        assert_eq!(connect.properties.receive_maximum, Some(7));
        config.cleansession = true;
        let connect = connect_packet(&config, "id");
        assert!(connect.clean_start);
        assert_eq!(connect.properties.session_expiry_interval, None);
        config.session_expiry_interval = Some(30);
        assert_eq!(
            connect_packet(&config, "id")
                .properties
                .session_expiry_interval,
            Some(30)
        );
    }
}
