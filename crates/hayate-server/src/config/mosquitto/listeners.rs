//! Listener sections: the keys that configure one listener, and their translation into a
//! `[[listener]]` ([`ListenerConfig`]).

use super::reader::Line;
use super::{path_value, MosquittoError, Warning};
use crate::config::{ListenerConfig, TransportKind};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

/// `protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Protocol {
    #[default]
    Mqtt,
    Websockets,
}

/// `socket_domain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Domain {
    Ipv4,
    Ipv6,
}

/// The security keys (per listener with `per_listener_settings true`, else global).
pub(super) const SECURITY_KEYS: &[&str] =
    &["allow_anonymous", "password_file", "acl_file", "psk_file"];

/// The security settings Mosquitto keeps per listener when `per_listener_settings` is true
/// (and globally otherwise).
#[derive(Debug, Clone, Default)]
pub(super) struct Security {
    /// `allow_anonymous`.
    pub allow_anonymous: Option<bool>,
    /// `password_file`, with the line that set it.
    pub password_file: Option<(PathBuf, Line)>,
    /// `acl_file`, with the line that set it.
    pub acl_file: Option<(PathBuf, Line)>,
    /// `psk_file`.
    pub psk_file: Option<PathBuf>,
    /// The line that set `psk_file`.
    pub psk_file_line: Option<Line>,
    /// The first security line (for errors about where it applies).
    pub first: Option<Line>,
}

impl Security {
    /// Applies a security key; `Ok(false)` when `line` is not one.
    pub fn apply(&mut self, line: &Line) -> Result<bool, MosquittoError> {
        match line.key.as_str() {
            "allow_anonymous" => self.allow_anonymous = Some(line.boolean()?),
            "password_file" => {
                once(line, self.password_file.is_some())?;
                self.password_file = Some((path_value(line.string()?), line.clone()))
            }
            "acl_file" => {
                once(line, self.acl_file.is_some())?;
                self.acl_file = Some((path_value(line.string()?), line.clone()))
            }
            "psk_file" => {
                once(line, self.psk_file.is_some())?;
                self.psk_file = Some(path_value(line.string()?));
                self.psk_file_line = Some(line.clone());
            }
            _ => return Ok(false),
        }
        if self.first.is_none() {
            self.first = Some(line.clone());
        }
        Ok(true)
    }
}

/// One listener being read: the `listener` line (none for the default listener of `port` /
/// `bind_address`) and its keys.
#[derive(Debug, Clone, Default)]
pub(super) struct ListenerDraft {
    /// The `listener` line, or the `port`/`bind_address` line of the default listener.
    pub line: Option<Line>,
    port: Option<u16>,
    bind: Option<String>,
    /// The first listener key given to it (a default listener without `port` exists only
    /// because of such a key).
    pub first_option: Option<Line>,
    protocol: Protocol,
    socket_domain: Option<Domain>,
    max_connections: Option<usize>,
    cafile: Option<PathBuf>,
    certfile: Option<PathBuf>,
    keyfile: Option<PathBuf>,
    require_certificate: bool,
    use_identity_as_username: bool,
    psk_hint: Option<String>,
    ciphers: Option<Line>,
    tls_version: Option<Line>,
    max_qos: Option<(u8, Line)>,
    max_topic_alias: Option<(u16, Line)>,
    /// Its security settings (used with `per_listener_settings true`).
    pub security: Security,
}

/// The listener keys that are accepted without effect, and why.
const WARNED: &[(&str, &str)] = &[
    (
        "dhparamfile",
        "rustls offers no finite-field DH cipher suites",
    ),
    (
        "websockets_headers_size",
        "Hayate reads WebSocket handshakes of up to 8 KiB",
    ),
];

/// The listener keys whose every value would change behaviour Hayate does not have.
const REFUSED: &[(&str, &str)] = &[
    (
        "capath",
        "not supported: put the CA certificates in one PEM file and use cafile",
    ),
    ("crlfile", "certificate revocation lists are not supported"),
    ("mount_point", "mount points are not supported"),
    ("http_dir", "Hayate serves no HTTP files"),
    (
        "bind_interface",
        "binding to an interface is not supported: use the interface's address",
    ),
    (
        "use_subject_as_username",
        "not supported: use use_identity_as_username (CN)",
    ),
    (
        "ciphers_tls1.3",
        "TLS 1.3 cipher suites are not configurable (rustls defaults)",
    ),
    ("tls_engine", "OpenSSL engines are not supported"),
    ("tls_keyform", "OpenSSL engines are not supported"),
    ("tls_engine_kpass_sha1", "OpenSSL engines are not supported"),
];

impl ListenerDraft {
    /// A listener from a `listener PORT [BIND]` line.
    pub fn from_line(line: &Line) -> Result<ListenerDraft, MosquittoError> {
        let words = line.words();
        let (port, bind) = match words.as_slice() {
            [port] => (*port, None),
            [port, bind] => (*port, Some(bind.to_string())),
            [] => return Err(line.error("a port is required")),
            _ => return Err(line.error("expected PORT [BIND_ADDRESS]")),
        };
        let port = parse_port(line, port)?;
        if port == 0 {
            return Err(line.error("Unix domain socket listeners (port 0) are not supported"));
        }
        Ok(ListenerDraft {
            line: Some(line.clone()),
            port: Some(port),
            bind,
            ..ListenerDraft::default()
        })
    }

    /// `port` for the default listener.
    pub fn set_port(&mut self, line: &Line) -> Result<(), MosquittoError> {
        let port = parse_port(line, line.word()?)?;
        if port == 0 {
            return Err(line.error("port must be between 1 and 65535"));
        }
        self.port = Some(port);
        self.line.get_or_insert_with(|| line.clone());
        Ok(())
    }

    /// `bind_address` for the default listener.
    pub fn set_bind(&mut self, line: &Line) -> Result<(), MosquittoError> {
        self.bind = Some(line.word()?.to_string());
        self.line.get_or_insert_with(|| line.clone());
        Ok(())
    }

    /// Whether the default listener was asked for (`port`, `bind_address` or a listener key).
    /// As in Mosquitto 2, a `password_file` or `psk_file` given to it (with
    /// `per_listener_settings true`) also asks for it; `allow_anonymous` and `acl_file` alone
    /// do not.
    pub fn is_configured(&self) -> bool {
        self.line.is_some()
            || self.first_option.is_some()
            || self.security.password_file.is_some()
            || self.security.psk_file.is_some()
    }

    /// The line errors about the whole listener name: its `listener` (or `port`/
    /// `bind_address`) line, else the first key that configured it.
    pub fn anchor(&self) -> &Line {
        self.line
            .as_ref()
            .or(self.first_option.as_ref())
            .or(self.security.first.as_ref())
            .expect("a configured listener has a line")
    }

    /// Applies a listener key; `Ok(false)` when `line` is not one.
    pub fn apply(
        &mut self,
        line: &Line,
        warnings: &mut Vec<Warning>,
    ) -> Result<bool, MosquittoError> {
        let key = line.key.as_str();
        if let Some((_, reason)) = REFUSED.iter().find(|(k, _)| *k == key) {
            return Err(line.error(*reason));
        }
        if let Some((_, reason)) = WARNED.iter().find(|(k, _)| *k == key) {
            line.string()?;
            warnings.push(warning(line, reason));
        } else if !self.apply_known(line)? {
            return Ok(false);
        }
        if self.first_option.is_none() {
            self.first_option = Some(line.clone());
        }
        Ok(true)
    }

    fn apply_known(&mut self, line: &Line) -> Result<bool, MosquittoError> {
        match line.key.as_str() {
            "protocol" => {
                self.protocol = match line.word()? {
                    "mqtt" => Protocol::Mqtt,
                    "websockets" => Protocol::Websockets,
                    other => {
                        return Err(
                            line.error(format!("expected mqtt or websockets, got {other:?}"))
                        )
                    }
                }
            }
            "socket_domain" => {
                self.socket_domain = Some(match line.word()? {
                    "ipv4" => Domain::Ipv4,
                    "ipv6" => Domain::Ipv6,
                    other => {
                        return Err(line.error(format!("expected ipv4 or ipv6, got {other:?}")))
                    }
                })
            }
            "max_connections" => {
                // Negative: no limit.
                let value = line.integer()?;
                self.max_connections = (value >= 0).then_some(value as usize);
            }
            "max_qos" | "maximum_qos" => {
                self.max_qos = Some((line.integer_in(0, 2)? as u8, line.clone()))
            }
            "max_topic_alias" => {
                let value = line.integer_in(0, u16::MAX.into())? as u16;
                self.max_topic_alias = Some((value, line.clone()));
            }
            "cafile" => {
                once(line, self.cafile.is_some())?;
                self.cafile = Some(path_value(line.string()?))
            }
            "certfile" => {
                once(line, self.certfile.is_some())?;
                self.certfile = Some(path_value(line.string()?))
            }
            "keyfile" => {
                once(line, self.keyfile.is_some())?;
                self.keyfile = Some(path_value(line.string()?))
            }
            "require_certificate" => self.require_certificate = line.boolean()?,
            "use_identity_as_username" => self.use_identity_as_username = line.boolean()?,
            "psk_hint" => {
                once(line, self.psk_hint.is_some())?;
                self.psk_hint = Some(line.string()?.to_string())
            }
            "ciphers" => {
                line.string()?;
                self.ciphers = Some(line.clone());
            }
            "tls_version" => {
                match line.word()? {
                    "tlsv1.3" | "tlsv1.2" | "tlsv1.1" | "tlsv1" => {}
                    other => {
                        return Err(line.error(format!(
                            "expected tlsv1.3, tlsv1.2, tlsv1.1 or tlsv1, got {other:?}"
                        )))
                    }
                }
                self.tls_version = Some(line.clone());
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The `[[listener]]`; `security` is what applies to it (its own with
    /// `per_listener_settings true`, else the global one) and `allow_anonymous` goes into the
    /// listener when `per_listener` is set.
    pub fn translate(
        &self,
        security: &Security,
        per_listener: bool,
        warnings: &mut Vec<Warning>,
    ) -> Result<ListenerConfig, MosquittoError> {
        let anchor = self.anchor();
        let bind = self.bind_address(anchor, warnings)?;
        let mut listener = ListenerConfig::tcp(bind);
        listener.transport = self.transport(anchor)?;
        listener.max_connections = self.max_connections;
        listener.cert_file = self.certfile.clone();
        listener.key_file = self.keyfile.clone();
        listener.ca_file = self.cafile.clone();
        listener.require_certificate = self.require_certificate;
        listener.use_identity_as_username = self.use_identity_as_username;
        if per_listener {
            listener.allow_anonymous = Some(security.allow_anonymous.unwrap_or(false));
        }
        if listener.transport == TransportKind::Psk {
            listener.psk_hint = self.psk_hint.clone();
            listener.psk_file = Some(security.psk_file.clone().ok_or_else(|| {
                anchor.error("psk_hint makes this a PSK listener, but no psk_file is set")
            })?);
        }
        self.apply_ciphers(&mut listener, warnings)?;
        self.check_tls_version(listener.transport, warnings)?;
        listener
            .validate()
            .map_err(|message| anchor.error(message))?;
        Ok(listener)
    }

    fn transport(&self, anchor: &Line) -> Result<TransportKind, MosquittoError> {
        let certificates = self.certfile.is_some() || self.keyfile.is_some();
        if self.psk_hint.is_some() {
            if certificates {
                return Err(anchor.error(
                    "a listener with both certificates and psk_hint is not supported: use two listeners",
                ));
            }
            if self.protocol == Protocol::Websockets {
                return Err(anchor.error("PSK over WebSockets is not supported"));
            }
            return Ok(TransportKind::Psk);
        }
        Ok(match (self.protocol, certificates) {
            (Protocol::Mqtt, false) => TransportKind::Mqtt,
            (Protocol::Mqtt, true) => TransportKind::Mqtts,
            (Protocol::Websockets, false) => TransportKind::Ws,
            (Protocol::Websockets, true) => TransportKind::Wss,
        })
    }

    fn bind_address(
        &self,
        anchor: &Line,
        warnings: &mut Vec<Warning>,
    ) -> Result<SocketAddr, MosquittoError> {
        let port = self.port.unwrap_or(1883);
        let Some(host) = &self.bind else {
            return Ok(match self.socket_domain {
                Some(Domain::Ipv6) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port),
                Some(Domain::Ipv4) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port),
                None => {
                    warnings.push(warning(
                        anchor,
                        &format!(
                            "port {port} without an address listens on 0.0.0.0 (IPv4) only; \
                             add a listener on :: with socket_domain ipv6 for IPv6"
                        ),
                    ));
                    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port)
                }
            });
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(SocketAddr::new(ip, port));
        }
        let wanted = |a: &SocketAddr| match self.socket_domain {
            Some(Domain::Ipv4) => a.is_ipv4(),
            Some(Domain::Ipv6) => a.is_ipv6(),
            None => true,
        };
        (host, port)
            .to_socket_addrs()
            .map_err(|e| anchor.error(format!("cannot resolve {host:?}: {e}")))?
            .find(wanted)
            .ok_or_else(|| anchor.error(format!("{host:?} has no address of the socket_domain")))
    }

    fn apply_ciphers(
        &self,
        listener: &mut ListenerConfig,
        warnings: &mut Vec<Warning>,
    ) -> Result<(), MosquittoError> {
        let Some(line) = &self.ciphers else {
            return Ok(());
        };
        match listener.transport {
            TransportKind::Psk => listener.psk_ciphers = line.value.clone(),
            TransportKind::Mqtts | TransportKind::Wss => {
                return Err(line.error(
                    "cipher lists are not configurable on certificate listeners (rustls's safe defaults)",
                ))
            }
            TransportKind::Mqtt | TransportKind::Ws => {
                warnings.push(warning(line, "the listener does not use TLS"))
            }
        }
        Ok(())
    }

    fn check_tls_version(
        &self,
        transport: TransportKind,
        warnings: &mut Vec<Warning>,
    ) -> Result<(), MosquittoError> {
        let Some(line) = &self.tls_version else {
            return Ok(());
        };
        let version = line.value.as_str();
        match transport {
            TransportKind::Mqtts | TransportKind::Wss if version == "tlsv1.2" => Ok(()),
            TransportKind::Mqtts | TransportKind::Wss => Err(line.error(
                "Hayate's certificate listeners accept TLS 1.2 and 1.3 (minimum 1.2); only tlsv1.2 can be honoured",
            )),
            TransportKind::Psk if version == "tlsv1.2" => Ok(()),
            TransportKind::Psk => Err(line.error("Hayate's PSK listeners speak TLS 1.2 only")),
            TransportKind::Mqtt | TransportKind::Ws => {
                warnings.push(warning(line, "the listener does not use TLS"));
                Ok(())
            }
        }
    }
}

/// Per-listener protocol limits of Mosquitto that are broker-wide in Hayate.
#[derive(Debug, Default)]
pub(super) struct ProtocolLimits {
    /// `max_qos`, when a listener sets it.
    pub max_qos: Option<u8>,
    /// `max_topic_alias`, when a listener sets it.
    pub max_topic_alias: Option<u16>,
}

/// Mosquitto sets `max_qos` and `max_topic_alias` per listener, Hayate for the broker: they
/// must be the same on every listener (a listener without the key has Mosquitto's default,
/// 2 and 10).
pub(super) fn shared_protocol_limits(
    drafts: &[ListenerDraft],
) -> Result<ProtocolLimits, MosquittoError> {
    fn shared<T: Copy + PartialEq + std::fmt::Display>(
        drafts: &[ListenerDraft],
        get: impl Fn(&ListenerDraft) -> &Option<(T, Line)>,
        default: T,
    ) -> Result<Option<T>, MosquittoError> {
        let Some((value, _)) = drafts.iter().find_map(|d| get(d).clone()) else {
            return Ok(None);
        };
        for draft in drafts {
            let (other, line) = match get(draft) {
                Some((other, line)) => (*other, line),
                None => (default, draft.anchor()),
            };
            if other != value {
                return Err(line.error(format!(
                    "differs between listeners ({value} and {other}; Mosquitto's default is {default}): Hayate has one value for all listeners"
                )));
            }
        }
        Ok(Some(value))
    }
    Ok(ProtocolLimits {
        max_qos: shared(drafts, |d| &d.max_qos, 2)?,
        max_topic_alias: shared(drafts, |d| &d.max_topic_alias, 10)?,
    })
}

/// A file or name given twice in one section: Mosquitto refuses it rather than keep either.
fn once(line: &Line, already: bool) -> Result<(), MosquittoError> {
    if already {
        return Err(line.error("given twice in this section (Mosquitto refuses a duplicate too)"));
    }
    Ok(())
}

fn parse_port(line: &Line, word: &str) -> Result<u16, MosquittoError> {
    word.parse::<u16>()
        .map_err(|_| line.error(format!("port must be between 0 and 65535, got {word:?}")))
}

/// A warning about `line`.
pub(super) fn warning(line: &Line, reason: &str) -> Warning {
    Warning {
        file: line.file.to_string(),
        line: line.number,
        key: line.key.clone(),
        reason: reason.to_string(),
    }
}
