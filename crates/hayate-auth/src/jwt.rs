//! JWT as the MQTT password: signature, time and claim checks, and the ACL carried in claims.
//!
//! The client puts a JWT (compact JWS) in the CONNECT password. [`JwtVerifier::verify`]
//! checks, in order:
//!
//! * the header's `alg` is one of the configured algorithms (pinned: the token cannot choose
//!   `none` or switch an RSA key to HMAC) and the signature is valid for the configured key;
//! * `iss` equals the configured issuer and `aud` contains the configured audience, when those
//!   are configured (they are then required). A token that carries `aud` when no audience is
//!   configured is refused, as RFC 7519 §4.1.3 requires;
//! * `exp` (required unless `require_exp` is off) and `nbf` against the time passed in, with
//!   `leeway` seconds of tolerance;
//! * the username claim (default `sub`) is present and, if the client sent a username, equal
//!   to it.
//!
//! The ACL claims (default `publish` and `subscribe`) are arrays of topic filters; a missing
//! claim means no access of that kind. [`JwtGrant`] answers publish/subscribe/receive checks
//! with the same wildcard-aware matching as the ACL file.
//!
//! Supported algorithms: HS256/384/512 with a shared secret, RS256 with an RSA public key and
//! ES256 with a P-256 public key, both as PEM. The RustCrypto backend of `jsonwebtoken` is
//! used (pure Rust, no cmake/nasm).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use crate::topic;

/// A signature algorithm that may be pinned in [`JwtConfig::algorithms`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JwtAlgorithm {
    /// HMAC-SHA256 with a shared secret.
    HS256,
    /// HMAC-SHA384 with a shared secret.
    HS384,
    /// HMAC-SHA512 with a shared secret.
    HS512,
    /// RSASSA-PKCS1-v1_5 with SHA-256 and an RSA public key.
    RS256,
    /// ECDSA P-256 with SHA-256.
    ES256,
}

impl JwtAlgorithm {
    fn to_jwt(self) -> Algorithm {
        match self {
            JwtAlgorithm::HS256 => Algorithm::HS256,
            JwtAlgorithm::HS384 => Algorithm::HS384,
            JwtAlgorithm::HS512 => Algorithm::HS512,
            JwtAlgorithm::RS256 => Algorithm::RS256,
            JwtAlgorithm::ES256 => Algorithm::ES256,
        }
    }

    /// The algorithm named as in a JWT header (`"HS256"`, …).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "HS256" => Some(JwtAlgorithm::HS256),
            "HS384" => Some(JwtAlgorithm::HS384),
            "HS512" => Some(JwtAlgorithm::HS512),
            "RS256" => Some(JwtAlgorithm::RS256),
            "ES256" => Some(JwtAlgorithm::ES256),
            _ => None,
        }
    }
}

/// The verification key.
#[derive(Clone)]
pub enum JwtKey {
    /// Shared secret for HS256/384/512 (raw bytes).
    Secret(Vec<u8>),
    /// RSA public key, PEM (`BEGIN PUBLIC KEY` or `BEGIN RSA PUBLIC KEY`), for RS256.
    RsaPublicPem(Vec<u8>),
    /// EC P-256 public key, PEM (`BEGIN PUBLIC KEY`), for ES256.
    EcPublicPem(Vec<u8>),
}

impl std::fmt::Debug for JwtKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            JwtKey::Secret(_) => "JwtKey::Secret(..)",
            JwtKey::RsaPublicPem(_) => "JwtKey::RsaPublicPem(..)",
            JwtKey::EcPublicPem(_) => "JwtKey::EcPublicPem(..)",
        })
    }
}

/// JWT verification settings.
#[derive(Debug, Clone)]
pub struct JwtConfig {
    /// The key tokens must be signed with.
    pub key: JwtKey,
    /// Accepted algorithms; all must suit the key (HS* for a secret, RS256 for RSA, ES256 for EC).
    pub algorithms: Vec<JwtAlgorithm>,
    /// Tolerance for `exp` and `nbf`, in seconds. Default 5.
    pub leeway_secs: u64,
    /// Required `iss`, if set.
    pub issuer: Option<String>,
    /// Required member of `aud`, if set.
    pub audience: Option<String>,
    /// Claim that holds the username. Default `sub`.
    pub username_claim: String,
    /// Claim with the topic filters the client may publish to. Default `publish`.
    pub publish_claim: String,
    /// Claim with the topic filters the client may subscribe to. Default `subscribe`.
    pub subscribe_claim: String,
    /// Whether tokens without `exp` are refused. Default true.
    pub require_exp: bool,
}

impl JwtConfig {
    /// Settings with the defaults documented on each field.
    pub fn new(key: JwtKey, algorithms: Vec<JwtAlgorithm>) -> Self {
        JwtConfig {
            key,
            algorithms,
            leeway_secs: 5,
            issuer: None,
            audience: None,
            username_claim: "sub".into(),
            publish_claim: "publish".into(),
            subscribe_claim: "subscribe".into(),
            require_exp: true,
        }
    }
}

/// Why a token was refused (or a configuration rejected).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JwtError {
    /// The configuration is unusable (no algorithm, algorithm/key mismatch, bad PEM).
    #[error("invalid JWT configuration: {0}")]
    Config(String),
    /// Not a well-formed JWT, or claims of the wrong type.
    #[error("malformed token: {0}")]
    Malformed(String),
    /// The header's algorithm is not one of the pinned algorithms.
    #[error("token algorithm not allowed")]
    AlgorithmNotAllowed,
    /// The signature does not verify.
    #[error("invalid token signature")]
    InvalidSignature,
    /// `exp` is in the past (beyond the leeway).
    #[error("token expired")]
    Expired,
    /// `nbf` is in the future (beyond the leeway).
    #[error("token not yet valid")]
    NotYetValid,
    /// `iss` is missing or not the configured issuer.
    #[error("invalid token issuer")]
    InvalidIssuer,
    /// `aud` is missing, does not contain the configured audience, or is unexpected.
    #[error("invalid token audience")]
    InvalidAudience,
    /// A required claim is missing.
    #[error("token has no {0} claim")]
    MissingClaim(String),
    /// The username claim differs from the MQTT username.
    #[error("token is for another user")]
    UsernameMismatch,
    /// An ACL claim is not an array of valid topic filters.
    #[error("invalid ACL claim {0}")]
    InvalidAclClaim(String),
}

/// What a verified token allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtGrant {
    /// The username from the token's username claim.
    pub username: String,
    /// When the token expires (`exp`); the server may disconnect the client then.
    pub expires_at: Option<SystemTime>,
    /// Topic filters the client may publish to.
    pub publish: Vec<String>,
    /// Topic filters the client may subscribe to (and receive from).
    pub subscribe: Vec<String>,
}

impl JwtGrant {
    /// Whether publishing on the topic name `topic` is allowed.
    pub fn can_publish(&self, topic: &str) -> bool {
        self.publish.iter().any(|f| topic::matches(f, topic))
    }

    /// Whether subscribing with `filter` is allowed: some granted filter must cover it
    /// (`a/#` allows `a/+/b`, `a/+` does not allow `a/#`). `$share/group/` is ignored.
    pub fn can_subscribe(&self, filter: &str) -> bool {
        let inner = filter
            .strip_prefix("$share/")
            .and_then(|r| r.split_once('/'))
            .map_or(filter, |(_, f)| f);
        self.subscribe.iter().any(|f| topic::covers(f, inner))
    }

    /// Whether a message on the topic name `topic` may be delivered to the client.
    pub fn can_receive(&self, topic: &str) -> bool {
        self.subscribe.iter().any(|f| topic::matches(f, topic))
    }

    /// Whether the token has expired at `now`.
    pub fn is_expired(&self, now: SystemTime) -> bool {
        self.expires_at.is_some_and(|exp| now > exp)
    }
}

/// Verifies tokens against one [`JwtConfig`].
pub struct JwtVerifier {
    config: JwtConfig,
    key: DecodingKey,
    validation: Validation,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtVerifier")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn ensure_crypto_provider() {
    // With only the `rust_crypto` feature the provider is picked automatically; installing it
    // explicitly keeps working if feature unification also enables `aws_lc_rs` elsewhere.
    let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
}

impl JwtVerifier {
    /// Check the configuration and prepare the key.
    pub fn new(config: JwtConfig) -> Result<Self, JwtError> {
        ensure_crypto_provider();
        if config.algorithms.is_empty() {
            return Err(JwtError::Config("no algorithm configured".into()));
        }
        let key = match &config.key {
            JwtKey::Secret(secret) => {
                if secret.is_empty() {
                    return Err(JwtError::Config("empty HMAC secret".into()));
                }
                DecodingKey::from_secret(secret)
            }
            JwtKey::RsaPublicPem(pem) => DecodingKey::from_rsa_pem(pem)
                .map_err(|e| JwtError::Config(format!("RSA public key: {e}")))?,
            JwtKey::EcPublicPem(pem) => DecodingKey::from_ec_pem(pem)
                .map_err(|e| JwtError::Config(format!("EC public key: {e}")))?,
        };
        for alg in &config.algorithms {
            let ok = matches!(
                (&config.key, alg),
                (
                    JwtKey::Secret(_),
                    JwtAlgorithm::HS256 | JwtAlgorithm::HS384 | JwtAlgorithm::HS512
                ) | (JwtKey::RsaPublicPem(_), JwtAlgorithm::RS256)
                    | (JwtKey::EcPublicPem(_), JwtAlgorithm::ES256)
            );
            if !ok {
                return Err(JwtError::Config(format!(
                    "algorithm {alg:?} does not suit the configured key"
                )));
            }
        }
        let mut validation = Validation::new(config.algorithms[0].to_jwt());
        validation.algorithms = config.algorithms.iter().map(|a| a.to_jwt()).collect();
        // exp/nbf are checked here against the caller's clock, not the library's.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.required_spec_claims.clear();
        validation.leeway = 0;
        validation.validate_aud = true;
        if let Some(iss) = &config.issuer {
            validation.set_issuer(&[iss]);
            validation.required_spec_claims.insert("iss".into());
        }
        if let Some(aud) = &config.audience {
            validation.set_audience(&[aud]);
            validation.required_spec_claims.insert("aud".into());
        }
        Ok(JwtVerifier {
            config,
            key,
            validation,
        })
    }

    /// Verify `token` (the MQTT password) for a client that sent `username` (if any), at
    /// time `now`.
    pub fn verify(
        &self,
        token: &str,
        username: Option<&str>,
        now: SystemTime,
    ) -> Result<JwtGrant, JwtError> {
        let data = jsonwebtoken::decode::<serde_json::Map<String, Value>>(
            token.trim(),
            &self.key,
            &self.validation,
        )
        .map_err(map_error)?;
        let claims = data.claims;
        let now_secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let leeway = self.config.leeway_secs;

        let exp = numeric_date(&claims, "exp")?;
        match exp {
            Some(exp) if now_secs > exp.saturating_add(leeway) => return Err(JwtError::Expired),
            None if self.config.require_exp => return Err(JwtError::MissingClaim("exp".into())),
            _ => {}
        }
        if let Some(nbf) = numeric_date(&claims, "nbf")? {
            if now_secs.saturating_add(leeway) < nbf {
                return Err(JwtError::NotYetValid);
            }
        }

        let claim = &self.config.username_claim;
        let token_user = match claims.get(claim) {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(_) => {
                return Err(JwtError::Malformed(format!(
                    "claim {claim} is not a non-empty string"
                )))
            }
            None => return Err(JwtError::MissingClaim(claim.clone())),
        };
        if let Some(u) = username {
            if u != token_user {
                return Err(JwtError::UsernameMismatch);
            }
        }

        Ok(JwtGrant {
            username: token_user,
            expires_at: exp.and_then(|e| UNIX_EPOCH.checked_add(Duration::from_secs(e))),
            publish: filter_list(&claims, &self.config.publish_claim)?,
            subscribe: filter_list(&claims, &self.config.subscribe_claim)?,
        })
    }
}

/// A NumericDate claim as whole seconds (fractions are truncated; negative is malformed).
fn numeric_date(
    claims: &serde_json::Map<String, Value>,
    name: &str,
) -> Result<Option<u64>, JwtError> {
    match claims.get(name) {
        None => Ok(None),
        Some(Value::Number(n)) => {
            if let Some(u) = n.as_u64() {
                Ok(Some(u))
            } else {
                match n.as_f64() {
                    Some(f) if f.is_finite() && f >= 0.0 => Ok(Some(f as u64)),
                    _ => Err(JwtError::Malformed(format!(
                        "claim {name} is not a valid date"
                    ))),
                }
            }
        }
        Some(_) => Err(JwtError::Malformed(format!("claim {name} is not a number"))),
    }
}

fn filter_list(
    claims: &serde_json::Map<String, Value>,
    name: &str,
) -> Result<Vec<String>, JwtError> {
    match claims.get(name) {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(f) if topic::valid_filter(f) => Ok(f.clone()),
                _ => Err(JwtError::InvalidAclClaim(name.to_owned())),
            })
            .collect(),
        Some(_) => Err(JwtError::InvalidAclClaim(name.to_owned())),
    }
}

fn map_error(e: jsonwebtoken::errors::Error) -> JwtError {
    match e.kind() {
        ErrorKind::InvalidSignature => JwtError::InvalidSignature,
        ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm => JwtError::AlgorithmNotAllowed,
        ErrorKind::InvalidIssuer => JwtError::InvalidIssuer,
        ErrorKind::InvalidAudience => JwtError::InvalidAudience,
        ErrorKind::MissingRequiredClaim(c) if c == "iss" => JwtError::InvalidIssuer,
        ErrorKind::MissingRequiredClaim(c) if c == "aud" => JwtError::InvalidAudience,
        ErrorKind::MissingRequiredClaim(c) => JwtError::MissingClaim(c.clone()),
        ErrorKind::ExpiredSignature => JwtError::Expired,
        ErrorKind::ImmatureSignature => JwtError::NotYetValid,
        _ => JwtError::Malformed(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{encode, EncodingKey, Header};
    use serde_json::json;

    const SECRET: &[u8] = b"a shared secret of reasonable length!";
    const NOW: u64 = 1_700_000_000;

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(NOW)
    }

    fn hs(alg: Algorithm, claims: &Value, secret: &[u8]) -> String {
        encode(&Header::new(alg), claims, &EncodingKey::from_secret(secret)).unwrap()
    }

    fn verifier(config: JwtConfig) -> JwtVerifier {
        JwtVerifier::new(config).unwrap()
    }

    fn hs_config() -> JwtConfig {
        JwtConfig::new(
            JwtKey::Secret(SECRET.to_vec()),
            vec![JwtAlgorithm::HS256, JwtAlgorithm::HS512],
        )
    }

    #[test]
    fn valid_token_with_acl_claims() {
        let v = verifier(hs_config());
        let token = hs(
            Algorithm::HS256,
            &json!({"sub": "alice", "exp": NOW + 60, "publish": ["alice/#"], "subscribe": ["alice/+/in", "public/#"]}),
            SECRET,
        );
        let g = v.verify(&token, Some("alice"), now()).unwrap();
        assert_eq!(g.username, "alice");
        assert_eq!(
            g.expires_at,
            Some(UNIX_EPOCH + Duration::from_secs(NOW + 60))
        );
        assert!(g.can_publish("alice/x/y"));
        assert!(!g.can_publish("bob/x"));
        assert!(g.can_subscribe("alice/+/in"));
        assert!(g.can_subscribe("alice/dev/in"));
        assert!(g.can_subscribe("public/+"));
        assert!(g.can_subscribe("$share/g/public/#"));
        assert!(!g.can_subscribe("alice/#"));
        assert!(!g.can_subscribe("#"));
        assert!(g.can_receive("alice/d/in"));
        assert!(!g.can_receive("alice/d/out"));
        assert!(!g.is_expired(now()));
        assert!(g.is_expired(now() + Duration::from_secs(61)));
        // No username in CONNECT: the token's username is used; HS512 is also pinned.
        let token = hs(
            Algorithm::HS512,
            &json!({"sub": "alice", "exp": NOW + 60}),
            SECRET,
        );
        let g = v.verify(&token, None, now()).unwrap();
        assert_eq!(g.username, "alice");
        assert!(g.publish.is_empty() && g.subscribe.is_empty());
        assert!(!g.can_publish("a"));
    }

    #[test]
    fn expired_and_not_yet_valid() {
        let v = verifier(hs_config());
        let expired = hs(
            Algorithm::HS256,
            &json!({"sub": "a", "exp": NOW - 6}),
            SECRET,
        );
        assert_eq!(v.verify(&expired, None, now()), Err(JwtError::Expired));
        let in_leeway = hs(
            Algorithm::HS256,
            &json!({"sub": "a", "exp": NOW - 5}),
            SECRET,
        );
        assert!(v.verify(&in_leeway, None, now()).is_ok());
        let early = hs(
            Algorithm::HS256,
            &json!({"sub": "a", "exp": NOW + 100, "nbf": NOW + 6}),
            SECRET,
        );
        assert_eq!(v.verify(&early, None, now()), Err(JwtError::NotYetValid));
        let nbf_ok = hs(
            Algorithm::HS256,
            &json!({"sub": "a", "exp": NOW + 100, "nbf": NOW + 5}),
            SECRET,
        );
        assert!(v.verify(&nbf_ok, None, now()).is_ok());
        let no_exp = hs(Algorithm::HS256, &json!({"sub": "a"}), SECRET);
        assert_eq!(
            v.verify(&no_exp, None, now()),
            Err(JwtError::MissingClaim("exp".into()))
        );
        let mut cfg = hs_config();
        cfg.require_exp = false;
        assert!(verifier(cfg).verify(&no_exp, None, now()).is_ok());
        let float_exp = hs(
            Algorithm::HS256,
            &json!({"sub": "a", "exp": (NOW + 10) as f64 + 0.5}),
            SECRET,
        );
        assert!(v.verify(&float_exp, None, now()).is_ok());
        let bad_exp = hs(
            Algorithm::HS256,
            &json!({"sub": "a", "exp": "soon"}),
            SECRET,
        );
        assert!(matches!(
            v.verify(&bad_exp, None, now()),
            Err(JwtError::Malformed(_))
        ));
    }

    #[test]
    fn wrong_signature_and_tampering() {
        let v = verifier(hs_config());
        let other = hs(
            Algorithm::HS256,
            &json!({"sub": "a", "exp": NOW + 60}),
            b"another secret, also long",
        );
        assert_eq!(
            v.verify(&other, None, now()),
            Err(JwtError::InvalidSignature)
        );
        let good = hs(
            Algorithm::HS256,
            &json!({"sub": "a", "exp": NOW + 60}),
            SECRET,
        );
        let mut parts: Vec<&str> = good.split('.').collect();
        let forged_claims = base64::Engine::encode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            br#"{"sub":"admin","exp":1700000060}"#,
        );
        parts[1] = &forged_claims;
        assert_eq!(
            v.verify(&parts.join("."), None, now()),
            Err(JwtError::InvalidSignature)
        );
        for junk in ["", "abc", "a.b.c", "....", "eyJhbGciOiJIUzI1NiJ9.e30."] {
            assert!(v.verify(junk, None, now()).is_err(), "{junk}");
        }
    }

    #[test]
    fn wrong_algorithm() {
        // HS384 is a valid HMAC algorithm for the secret, but not pinned.
        let v = verifier(hs_config());
        let t = hs(
            Algorithm::HS384,
            &json!({"sub": "a", "exp": NOW + 60}),
            SECRET,
        );
        assert_eq!(
            v.verify(&t, None, now()),
            Err(JwtError::AlgorithmNotAllowed)
        );
        // alg "none" is never accepted.
        let none = format!(
            "{}.{}.",
            base64::Engine::encode(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                br#"{"alg":"none","typ":"JWT"}"#
            ),
            base64::Engine::encode(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                br#"{"sub":"a","exp":1700000060}"#
            ),
        );
        assert!(v.verify(&none, None, now()).is_err());
        // Configuration mistakes are refused up front.
        let bad = JwtConfig::new(JwtKey::Secret(SECRET.to_vec()), vec![JwtAlgorithm::RS256]);
        assert!(matches!(JwtVerifier::new(bad), Err(JwtError::Config(_))));
        let bad = JwtConfig::new(JwtKey::Secret(SECRET.to_vec()), vec![]);
        assert!(matches!(JwtVerifier::new(bad), Err(JwtError::Config(_))));
        let bad = JwtConfig::new(
            JwtKey::RsaPublicPem(b"not pem".to_vec()),
            vec![JwtAlgorithm::RS256],
        );
        assert!(matches!(JwtVerifier::new(bad), Err(JwtError::Config(_))));
    }

    #[test]
    fn username_claim_binding() {
        let v = verifier(hs_config());
        let t = hs(
            Algorithm::HS256,
            &json!({"sub": "alice", "exp": NOW + 60}),
            SECRET,
        );
        assert_eq!(
            v.verify(&t, Some("bob"), now()),
            Err(JwtError::UsernameMismatch)
        );
        let t = hs(Algorithm::HS256, &json!({"exp": NOW + 60}), SECRET);
        assert_eq!(
            v.verify(&t, None, now()),
            Err(JwtError::MissingClaim("sub".into()))
        );
        let mut cfg = hs_config();
        cfg.username_claim = "preferred_username".into();
        let t = hs(
            Algorithm::HS256,
            &json!({"sub": "x", "preferred_username": "carol", "exp": NOW + 60}),
            SECRET,
        );
        assert_eq!(
            verifier(cfg)
                .verify(&t, Some("carol"), now())
                .unwrap()
                .username,
            "carol"
        );
    }

    #[test]
    fn issuer_and_audience() {
        let mut cfg = hs_config();
        cfg.issuer = Some("https://idp".into());
        cfg.audience = Some("hayate".into());
        let v = verifier(cfg);
        let ok = hs(
            Algorithm::HS256,
            &json!({"sub": "a", "exp": NOW + 60, "iss": "https://idp", "aud": ["x", "hayate"]}),
            SECRET,
        );
        assert!(v.verify(&ok, None, now()).is_ok());
        let bad_iss = hs(
            Algorithm::HS256,
            &json!({"sub": "a", "exp": NOW + 60, "iss": "evil", "aud": "hayate"}),
            SECRET,
        );
        assert_eq!(
            v.verify(&bad_iss, None, now()),
            Err(JwtError::InvalidIssuer)
        );
        let no_iss = hs(
            Algorithm::HS256,
            &json!({"sub": "a", "exp": NOW + 60, "aud": "hayate"}),
            SECRET,
        );
        assert_eq!(v.verify(&no_iss, None, now()), Err(JwtError::InvalidIssuer));
        let bad_aud = hs(
            Algorithm::HS256,
            &json!({"sub": "a", "exp": NOW + 60, "iss": "https://idp", "aud": "other"}),
            SECRET,
        );
        assert_eq!(
            v.verify(&bad_aud, None, now()),
            Err(JwtError::InvalidAudience)
        );
        let no_aud = hs(
            Algorithm::HS256,
            &json!({"sub": "a", "exp": NOW + 60, "iss": "https://idp"}),
            SECRET,
        );
        assert_eq!(
            v.verify(&no_aud, None, now()),
            Err(JwtError::InvalidAudience)
        );
        // Without a configured audience, a token that names one is refused (RFC 7519 4.1.3).
        let v = verifier(hs_config());
        let with_aud = hs(
            Algorithm::HS256,
            &json!({"sub": "a", "exp": NOW + 60, "aud": "x"}),
            SECRET,
        );
        assert_eq!(
            v.verify(&with_aud, None, now()),
            Err(JwtError::InvalidAudience)
        );
    }

    #[test]
    fn acl_claims_must_be_filter_arrays() {
        let v = verifier(hs_config());
        for bad in [json!("a/#"), json!([1]), json!(["a/#/b"]), json!([""])] {
            let t = hs(
                Algorithm::HS256,
                &json!({"sub": "a", "exp": NOW + 60, "publish": bad}),
                SECRET,
            );
            assert_eq!(
                v.verify(&t, None, now()),
                Err(JwtError::InvalidAclClaim("publish".into()))
            );
        }
    }

    // Throw-away test keys made with `openssl genpkey` (never used outside these tests).
    const RSA_PRIVATE: &[u8] = include_bytes!("../tests/fixtures/jwt-rs256-private.pem");
    const RSA_PUBLIC: &[u8] = include_bytes!("../tests/fixtures/jwt-rs256-public.pem");
    const EC_PRIVATE: &[u8] = include_bytes!("../tests/fixtures/jwt-es256-private.pem");
    const EC_PUBLIC: &[u8] = include_bytes!("../tests/fixtures/jwt-es256-public.pem");

    #[test]
    fn rs256_and_es256_public_keys() {
        let claims = json!({"sub": "dev1", "exp": NOW + 60, "publish": ["dev/dev1/#"]});
        let rs = encode(
            &Header::new(Algorithm::RS256),
            &claims,
            &EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap(),
        )
        .unwrap();
        let es = encode(
            &Header::new(Algorithm::ES256),
            &claims,
            &EncodingKey::from_ec_pem(EC_PRIVATE).unwrap(),
        )
        .unwrap();
        let rv = verifier(JwtConfig::new(
            JwtKey::RsaPublicPem(RSA_PUBLIC.to_vec()),
            vec![JwtAlgorithm::RS256],
        ));
        let ev = verifier(JwtConfig::new(
            JwtKey::EcPublicPem(EC_PUBLIC.to_vec()),
            vec![JwtAlgorithm::ES256],
        ));
        assert!(rv
            .verify(&rs, Some("dev1"), now())
            .unwrap()
            .can_publish("dev/dev1/t"));
        assert!(ev
            .verify(&es, Some("dev1"), now())
            .unwrap()
            .can_publish("dev/dev1/t"));
        // Each verifier refuses the other's tokens (algorithm pinned to the key type).
        assert_eq!(
            rv.verify(&es, None, now()),
            Err(JwtError::AlgorithmNotAllowed)
        );
        assert_eq!(
            ev.verify(&rs, None, now()),
            Err(JwtError::AlgorithmNotAllowed)
        );
        // Classic confusion attack: HS256 signed with the RSA public key as the secret.
        let confused = hs(Algorithm::HS256, &claims, RSA_PUBLIC);
        assert_eq!(
            rv.verify(&confused, None, now()),
            Err(JwtError::AlgorithmNotAllowed)
        );
        // A token signed by another RSA key fails the signature check.
        let mut tampered: Vec<char> = rs.chars().collect();
        let last = tampered.len() - 2;
        tampered[last] = if tampered[last] == 'A' { 'B' } else { 'A' };
        let tampered: String = tampered.into_iter().collect();
        assert!(rv.verify(&tampered, None, now()).is_err());
        let expired = encode(
            &Header::new(Algorithm::ES256),
            &json!({"sub": "dev1", "exp": NOW - 100}),
            &EncodingKey::from_ec_pem(EC_PRIVATE).unwrap(),
        )
        .unwrap();
        assert_eq!(ev.verify(&expired, None, now()), Err(JwtError::Expired));
    }
}
