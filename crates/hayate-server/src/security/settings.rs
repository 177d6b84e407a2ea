//! The `[auth]` table's nested settings (`[auth.throttle]`, `[auth.jwt]`) and the choice for
//! v3 clients publishing where they may not.

use hayate_auth::ThrottleConfig;
use serde::Deserialize;
use std::fmt;
use std::path::PathBuf;

/// What happens when a v3.1/3.1.1 client publishes where it may not (v3 has no way to say
/// no; v5 clients always get PUBACK/PUBREC 0x87).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum V3PublishDenied {
    /// Acknowledge as usual and drop the message (Mosquitto's behaviour).
    #[default]
    Drop,
    /// Close the connection.
    Disconnect,
}

/// `[auth.throttle]`: after a failed login from an address (IPv6: its /64), further attempts
/// from it are refused unchecked (v5 CONNACK 0x9F Connection rate exceeded, v3 0x03) for a
/// penalty window of `base_delay_ms`, doubling with each further failure up to
/// `max_delay_ms`; one failure is forgiven per `decay_secs`, and a success clears the slate.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThrottleSettings {
    /// Throttle at all.
    pub enabled: bool,
    /// Penalty after the first failure, in milliseconds.
    pub base_delay_ms: u64,
    /// Longest penalty, in milliseconds.
    pub max_delay_ms: u64,
    /// One failure is forgiven per this many seconds without a new one.
    pub decay_secs: u64,
    /// Most addresses remembered (the least recently seen is forgotten first).
    pub capacity: usize,
}

impl Default for ThrottleSettings {
    fn default() -> Self {
        let defaults = ThrottleConfig::default();
        ThrottleSettings {
            enabled: true,
            base_delay_ms: defaults.base_delay.as_millis() as u64,
            max_delay_ms: defaults.max_delay.as_millis() as u64,
            decay_secs: defaults.decay_interval.as_secs(),
            capacity: defaults.capacity,
        }
    }
}

/// `[auth.jwt]`: a password that looks like a JWT (three base64url parts, the first a JSON
/// header) is verified as one. Exactly one of `secret`, `secret_file`, `public_key_file`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JwtSettings {
    /// Accepted algorithms: `HS256`, `HS384`, `HS512` (secret), `RS256` or `ES256` (public
    /// key). Default: the three HMAC ones with a secret; required with a public key.
    pub algorithms: Vec<String>,
    /// HMAC secret, as UTF-8 text.
    pub secret: Option<String>,
    /// File holding the HMAC secret (one trailing newline is ignored).
    pub secret_file: Option<PathBuf>,
    /// PEM public key (RSA for RS256, P-256 for ES256).
    pub public_key_file: Option<PathBuf>,
    /// Claim holding the user name (must equal the MQTT user name when one is sent).
    pub username_claim: String,
    /// Claim listing the topic filters the client may publish to.
    pub publish_claim: String,
    /// Claim listing the topic filters the client may subscribe to and receive from.
    pub subscribe_claim: String,
    /// Required `iss`, if set.
    pub issuer: Option<String>,
    /// Required member of `aud`, if set.
    pub audience: Option<String>,
    /// Clock tolerance for `exp` and `nbf`, in seconds.
    pub leeway_secs: u64,
    /// Refuse tokens without `exp`.
    pub require_exp: bool,
}

impl Default for JwtSettings {
    fn default() -> Self {
        JwtSettings {
            algorithms: Vec::new(),
            secret: None,
            secret_file: None,
            public_key_file: None,
            username_claim: "sub".into(),
            publish_claim: "publish".into(),
            subscribe_claim: "subscribe".into(),
            issuer: None,
            audience: None,
            leeway_secs: 5,
            require_exp: true,
        }
    }
}

impl fmt::Debug for JwtSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JwtSettings")
            .field("algorithms", &self.algorithms)
            .field("secret", &self.secret.as_ref().map(|_| ".."))
            .field("secret_file", &self.secret_file)
            .field("public_key_file", &self.public_key_file)
            .field("username_claim", &self.username_claim)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}
