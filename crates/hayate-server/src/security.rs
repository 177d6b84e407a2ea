//! Authentication and authorisation: the `[auth]` table ([`AuthConfig`]) and the hook that
//! enforces it ([`SecurityHook`]), built on `hayate-auth`: Mosquitto password and ACL files,
//! the SCRAM credential file (MQTT v5 enhanced authentication, SCRAM-SHA-256/512), JWT as the
//! password (with the ACL carried in its claims), and a failed-login throttle per source
//! address.
//!
//! The hook runs on the connection tasks, synchronously. What it reads from files sits in one
//! immutable [`Rules`] snapshot behind a lock held only to clone an `Arc`; [`SecurityHook::
//! reload`] builds a new snapshot and swaps it in whole, so a check sees either the old files
//! or the new ones, never a mix, and a file that fails to load leaves the old rules in force.
//! Successful password checks are cached per snapshot (user → keyed SHA-256 of the password),
//! so a reconnect storm costs one hash per user, and a reload drops the cache with the old
//! snapshot. Hashes that are slow on purpose (argon2id) are verified inside
//! `tokio::task::block_in_place`, so the other connections of that worker thread move on.

mod scram;
mod settings;

pub use settings::{JwtSettings, ThrottleSettings, V3PublishDenied};

use hayate_auth::{
    Access, AclFile, JwtAlgorithm, JwtConfig, JwtError, JwtGrant, JwtKey, JwtVerifier,
    LoginThrottle, Mechanism, PasswordFile, PasswordHash, ScramFile, ScramServer, ThrottleConfig,
};
use hayate_codec::ReasonCode;
use hayate_core::{AuthHook, Authenticated, ClientInfo, EnhancedAuth, StaticPolicy};
use parking_lot::{Mutex, RwLock};
use scram::{CredentialLookup, ScramExchange};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

/// The `[auth]` table. Every key is documented, with its default, in `hayate.toml`.
///
/// It is also the hook the server installs (the listener wraps a clone of it in an `Arc`):
/// the first time it is asked anything it builds its [`SecurityHook`] from its settings,
/// unless [`AuthConfig::prepare`] already did (which is how `hayate serve` refuses to start
/// with a password, ACL, SCRAM or key file it cannot read). Settings changed after that have
/// no effect on the hook already built.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Admit clients that send no user name (a `[[listener]]` may override it).
    pub allow_anonymous: bool,
    /// Mosquitto password file (`mosquitto_passwd` / `hayate passwd`): `$6$`, `$7$` and
    /// argon2id entries. Without one, user names are not checked (unless `jwt` is set).
    pub password_file: Option<PathBuf>,
    /// Mosquitto ACL file. Without one, every client may publish, subscribe and receive
    /// everything (apart from the deny lists below).
    pub acl_file: Option<PathBuf>,
    /// Hayate SCRAM credential file, for MQTT v5 enhanced authentication with
    /// `SCRAM-SHA-256` and `SCRAM-SHA-512`.
    pub scram_file: Option<PathBuf>,
    /// Also offer `SCRAM-SHA-512` to users of the password file with a `$7$` entry (its hash
    /// is SCRAM-SHA-512's SaltedPassword).
    pub scram_sha512_from_password_file: bool,
    /// Remember successful password checks (user + keyed hash of the password) until the
    /// next reload, so reconnecting clients cost no password hashing.
    pub password_cache: bool,
    /// v3 clients publishing where they may not: `"drop"` or `"disconnect"`.
    pub v3_publish_denied: V3PublishDenied,
    /// Subscriptions refused when the requested filter matches one of these patterns.
    pub deny_subscribe: Vec<String>,
    /// v5 SUBACK reason code for `deny_subscribe` refusals (135 = 0x87, or 128 = 0x80).
    pub deny_subscribe_reason_code: u8,
    /// Publishes refused to topics matching these patterns.
    pub deny_publish: Vec<String>,
    /// Failed-login slowdown per source address.
    pub throttle: ThrottleSettings,
    /// JWT as the password (`[auth.jwt]`); off when absent.
    pub jwt: Option<JwtSettings>,
    /// The hook built from these settings (`None` inside: building it failed).
    #[serde(skip)]
    hook: OnceLock<Option<Arc<SecurityHook>>>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        let policy = StaticPolicy::default();
        AuthConfig {
            allow_anonymous: policy.allow_anonymous,
            password_file: None,
            acl_file: None,
            scram_file: None,
            scram_sha512_from_password_file: true,
            password_cache: true,
            v3_publish_denied: V3PublishDenied::Drop,
            deny_subscribe: policy.deny_subscribe,
            deny_subscribe_reason_code: policy.deny_subscribe_reason_code,
            deny_publish: policy.deny_publish,
            throttle: ThrottleSettings::default(),
            jwt: None,
            hook: OnceLock::new(),
        }
    }
}

/// Why the security settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    /// A password, ACL or SCRAM file could not be read or parsed.
    #[error("auth: {0}")]
    File(#[from] hayate_auth::AuthError),
    /// The `[auth.jwt]` settings or key are unusable.
    #[error("auth.jwt: {0}")]
    Jwt(String),
}

impl AuthConfig {
    /// Builds the hook now (reading every configured file) and keeps it for the server to
    /// use; fails when a file cannot be read or parsed. Returns the hook (for `reload`).
    pub fn prepare(&self) -> Result<Arc<SecurityHook>, SecurityError> {
        if let Some(Some(hook)) = self.hook.get() {
            return Ok(hook.clone());
        }
        let hook = Arc::new(SecurityHook::new(self)?);
        let _ = self.hook.set(Some(hook.clone()));
        Ok(self.hook.get().cloned().flatten().unwrap_or(hook))
    }

    /// The hook, built on first use. A configuration that cannot be loaded refuses every
    /// client (logged once) rather than admitting them unchecked.
    fn hook(&self) -> Option<&SecurityHook> {
        self.hook
            .get_or_init(|| match SecurityHook::new(self) {
                Ok(hook) => Some(Arc::new(hook)),
                Err(error) => {
                    tracing::error!(%error, "auth_config_unusable_refusing_all_clients");
                    None
                }
            })
            .as_deref()
    }
}

impl AuthHook for AuthConfig {
    fn authenticate(
        &self,
        client: &ClientInfo,
        password: Option<&[u8]>,
    ) -> Result<Authenticated, ReasonCode> {
        match self.hook() {
            Some(hook) => hook.authenticate(client, password),
            None => Err(ReasonCode::SERVER_UNAVAILABLE),
        }
    }

    fn start_enhanced_auth(
        &self,
        client: &ClientInfo,
        method: &str,
    ) -> Result<Box<dyn EnhancedAuth>, ReasonCode> {
        match self.hook() {
            Some(hook) => hook.start_enhanced_auth(client, method),
            None => Err(ReasonCode::SERVER_UNAVAILABLE),
        }
    }

    fn authorize_publish(&self, client: &ClientInfo, topic: &str) -> bool {
        self.hook()
            .is_some_and(|hook| hook.authorize_publish(client, topic))
    }

    fn disconnect_v3_on_denied_publish(&self) -> bool {
        self.v3_publish_denied == V3PublishDenied::Disconnect
    }

    fn authorize_subscribe(&self, client: &ClientInfo, filter: &str) -> Result<(), ReasonCode> {
        match self.hook() {
            Some(hook) => hook.authorize_subscribe(client, filter),
            None => Err(ReasonCode::NOT_AUTHORIZED),
        }
    }

    fn has_read_rules(&self) -> bool {
        self.hook().is_none_or(|hook| hook.has_read_rules())
    }

    fn authorize_read(&self, client: &ClientInfo, topic: &str) -> bool {
        self.hook()
            .is_some_and(|hook| hook.authorize_read(client, topic))
    }

    fn reload(&self) {
        if let Some(hook) = self.hook() {
            AuthHook::reload(hook);
        }
    }
}

/// What the hook reads from files: one immutable snapshot, replaced whole on reload.
#[derive(Debug, Default)]
struct Rules {
    passwords: Option<PasswordFile>,
    acl: Option<AclFile>,
    scram: Option<ScramFile>,
    jwt: Option<JwtVerifier>,
    /// Successful password checks against this snapshot's password file: user → keyed hash
    /// of the password. Dropped with the snapshot.
    cache: Mutex<HashMap<Box<str>, [u8; 32]>>,
}

impl Rules {
    fn load(settings: &AuthConfig) -> Result<Rules, SecurityError> {
        Ok(Rules {
            passwords: settings
                .password_file
                .as_ref()
                .map(PasswordFile::load)
                .transpose()?,
            acl: settings.acl_file.as_ref().map(AclFile::load).transpose()?,
            scram: settings
                .scram_file
                .as_ref()
                .map(ScramFile::load)
                .transpose()?,
            jwt: settings.jwt.as_ref().map(jwt_verifier).transpose()?,
            cache: Mutex::default(),
        })
    }

    fn has_read_rules(&self) -> bool {
        self.acl.is_some() || self.jwt.is_some()
    }
}

fn jwt_verifier(settings: &JwtSettings) -> Result<JwtVerifier, SecurityError> {
    let error = |message: String| SecurityError::Jwt(message);
    let read =
        |path: &PathBuf| std::fs::read(path).map_err(|e| error(format!("{}: {e}", path.display())));
    let mut algorithms = Vec::new();
    for name in &settings.algorithms {
        match JwtAlgorithm::from_name(name) {
            Some(algorithm) => algorithms.push(algorithm),
            None => return Err(error(format!("unknown algorithm {name:?}"))),
        }
    }
    let key = match (
        &settings.secret,
        &settings.secret_file,
        &settings.public_key_file,
    ) {
        (Some(secret), None, None) => JwtKey::Secret(secret.as_bytes().to_vec()),
        (None, Some(path), None) => {
            let mut secret = read(path)?;
            if secret.ends_with(b"\n") {
                secret.pop();
                if secret.ends_with(b"\r") {
                    secret.pop();
                }
            }
            JwtKey::Secret(secret)
        }
        (None, None, Some(path)) => {
            let pem = read(path)?;
            match algorithms.as_slice() {
                [JwtAlgorithm::RS256] => JwtKey::RsaPublicPem(pem),
                [JwtAlgorithm::ES256] => JwtKey::EcPublicPem(pem),
                _ => {
                    return Err(error(
                        "with public_key_file, algorithms must be [\"RS256\"] or [\"ES256\"]"
                            .into(),
                    ))
                }
            }
        }
        _ => {
            return Err(error(
                "set exactly one of secret, secret_file, public_key_file".into(),
            ))
        }
    };
    if algorithms.is_empty() {
        algorithms = vec![
            JwtAlgorithm::HS256,
            JwtAlgorithm::HS384,
            JwtAlgorithm::HS512,
        ];
    }
    let mut config = JwtConfig::new(key, algorithms);
    config.leeway_secs = settings.leeway_secs;
    config.issuer = settings.issuer.clone();
    config.audience = settings.audience.clone();
    config.username_claim = settings.username_claim.clone();
    config.publish_claim = settings.publish_claim.clone();
    config.subscribe_claim = settings.subscribe_claim.clone();
    config.require_exp = settings.require_exp;
    JwtVerifier::new(config).map_err(|e| error(e.to_string()))
}

/// The authentication and authorisation hook. See the module docs.
#[derive(Clone)]
pub struct SecurityHook {
    inner: Arc<Inner>,
}

struct Inner {
    /// The settings (without their hook, which would point back here).
    settings: AuthConfig,
    policy: StaticPolicy,
    rules: RwLock<Arc<Rules>>,
    /// `rules.has_read_rules()`, readable without the lock (asked once per routed message).
    read_rules: AtomicBool,
    /// Key of the password cache's hashes, random per process.
    cache_key: [u8; 32],
    throttle: Option<Mutex<LoginThrottle>>,
    /// Password hashes computed (cache misses), for tests and diagnostics.
    hashes_computed: AtomicU64,
}

impl fmt::Debug for SecurityHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let settings = &self.inner.settings;
        f.debug_struct("SecurityHook")
            .field("password_file", &settings.password_file)
            .field("acl_file", &settings.acl_file)
            .field("scram_file", &settings.scram_file)
            .field("jwt", &settings.jwt)
            .finish_non_exhaustive()
    }
}

impl SecurityHook {
    /// Reads every configured file and prepares the JWT key.
    pub fn new(config: &AuthConfig) -> Result<SecurityHook, SecurityError> {
        let mut settings = config.clone();
        settings.hook = OnceLock::new();
        let rules = Rules::load(&settings)?;
        let throttle = settings.throttle.enabled.then(|| {
            let t = &settings.throttle;
            Mutex::new(LoginThrottle::new(ThrottleConfig {
                capacity: t.capacity,
                base_delay: Duration::from_millis(t.base_delay_ms),
                max_delay: Duration::from_millis(t.max_delay_ms),
                decay_interval: Duration::from_secs(t.decay_secs),
            }))
        });
        let policy = StaticPolicy {
            allow_anonymous: settings.allow_anonymous,
            deny_subscribe: settings.deny_subscribe.clone(),
            deny_subscribe_reason_code: settings.deny_subscribe_reason_code,
            deny_publish: settings.deny_publish.clone(),
        };
        Ok(SecurityHook {
            inner: Arc::new(Inner {
                read_rules: AtomicBool::new(rules.has_read_rules()),
                rules: RwLock::new(Arc::new(rules)),
                settings,
                policy,
                cache_key: rand::random(),
                throttle,
                hashes_computed: AtomicU64::new(0),
            }),
        })
    }

    /// Re-reads the password, ACL and SCRAM files (and the JWT key) and swaps them in
    /// together; on error the rules in force stay as they are. Drops the password cache.
    pub fn reload(&self) -> Result<(), SecurityError> {
        let rules = Rules::load(&self.inner.settings)?;
        let read_rules = rules.has_read_rules();
        *self.inner.rules.write() = Arc::new(rules);
        self.inner.read_rules.store(read_rules, Ordering::Relaxed);
        Ok(())
    }

    fn rules(&self) -> Arc<Rules> {
        self.inner.rules.read().clone()
    }

    /// Whether the ACL file allows `access` (everything when there is none). Without an ACL
    /// file no lock is taken: whether there is one is fixed at start (its path is).
    fn acl_allows(&self, client: &ClientInfo, topic: &str, access: Access) -> bool {
        if self.inner.settings.acl_file.is_none() {
            return true;
        }
        let rules = self.inner.rules.read();
        rules.acl.as_ref().is_none_or(|acl| {
            acl.check(client.username.as_deref(), &client.client_id, topic, access)
        })
    }

    /// Password hashes computed so far: logins the password cache did not answer.
    pub fn password_hashes_computed(&self) -> u64 {
        self.inner.hashes_computed.load(Ordering::Relaxed)
    }

    fn authenticate_password(
        &self,
        rules: &Rules,
        passwords: &PasswordFile,
        client: &ClientInfo,
        username: &str,
        password: Option<&[u8]>,
    ) -> Result<Authenticated, ReasonCode> {
        let inner = &self.inner;
        if inner.throttled(client) {
            return Err(ReasonCode::CONNECTION_RATE_EXCEEDED);
        }
        let Some(password) = password else {
            return Err(inner.failed(client, Some(username), "no_password"));
        };
        let digest = inner.settings.password_cache.then(|| {
            Sha256::new()
                .chain_update(inner.cache_key)
                .chain_update((username.len() as u64).to_le_bytes())
                .chain_update(username)
                .chain_update(password)
                .finalize()
                .into()
        });
        if let Some(digest) = &digest {
            let hit = rules
                .cache
                .lock()
                .get(username)
                .is_some_and(|cached| constant_time_eq(cached, digest));
            if hit {
                inner.succeeded(client);
                return Ok(Authenticated::default());
            }
        }
        inner.hashes_computed.fetch_add(1, Ordering::Relaxed);
        let verified = match passwords.get(username) {
            Some(hash @ PasswordHash::Argon2id { .. }) => blocking(|| hash.verify(password)),
            Some(hash) => hash.verify(password),
            None => {
                // Same time as a wrong password, so probing does not reveal who exists.
                let _ = passwords.verify(username, password);
                return Err(inner.failed(client, Some(username), "unknown_user"));
            }
        };
        if !verified {
            return Err(inner.failed(client, Some(username), "wrong_password"));
        }
        if let Some(digest) = digest {
            rules.cache.lock().insert(username.into(), digest);
        }
        inner.succeeded(client);
        Ok(Authenticated::default())
    }
}

impl Inner {
    /// True while the client's address is inside its penalty window (logged, not counted as
    /// a new failure).
    fn throttled(&self, client: &ClientInfo) -> bool {
        let (Some(throttle), Some(peer)) = (&self.throttle, client.peer) else {
            return false;
        };
        let penalty = throttle.lock().penalty(peer.ip(), Instant::now());
        if penalty.is_zero() {
            return false;
        }
        tracing::debug!(
            client_id = %client.client_id,
            username = ?client.username,
            peer = %peer,
            penalty_ms = penalty.as_millis() as u64,
            "login_throttled"
        );
        true
    }

    /// Records and logs a failed login (never the password or token), and says how to
    /// refuse it: 0x86 Bad user name or password (v3: 0x05 Not authorised).
    fn failed(&self, client: &ClientInfo, username: Option<&str>, reason: &str) -> ReasonCode {
        self.failed_with(
            client,
            username,
            reason,
            ReasonCode::BAD_USER_NAME_OR_PASSWORD,
        )
    }

    fn failed_with(
        &self,
        client: &ClientInfo,
        username: Option<&str>,
        reason: &str,
        code: ReasonCode,
    ) -> ReasonCode {
        let penalty = match (&self.throttle, client.peer) {
            (Some(throttle), Some(peer)) => {
                throttle.lock().record_failure(peer.ip(), Instant::now())
            }
            _ => Duration::ZERO,
        };
        tracing::warn!(
            client_id = %client.client_id,
            username = ?username,
            peer = ?client.peer,
            listener = %client.listener.name,
            reason,
            penalty_ms = penalty.as_millis() as u64,
            "login_failed"
        );
        code
    }

    fn succeeded(&self, client: &ClientInfo) {
        if let (Some(throttle), Some(peer)) = (&self.throttle, client.peer) {
            throttle.lock().record_success(peer.ip());
        }
    }
}

impl AuthHook for SecurityHook {
    fn authenticate(
        &self,
        client: &ClientInfo,
        password: Option<&[u8]>,
    ) -> Result<Authenticated, ReasonCode> {
        let inner = &self.inner;
        if client.listener.identity_as_username {
            // Mosquitto's use_identity_as_username: the certificate or PSK identity is the
            // user name, and no password is asked for.
            return match client.transport_identity() {
                Some(identity) => Ok(Authenticated {
                    username: Some(identity.clone()),
                    grant: None,
                }),
                None => {
                    tracing::warn!(
                        client_id = %client.client_id,
                        peer = ?client.peer,
                        listener = %client.listener.name,
                        "login_refused_no_transport_identity"
                    );
                    Err(ReasonCode::NOT_AUTHORIZED)
                }
            };
        }
        let rules = self.rules();
        let username = client.username.as_deref();
        if let (Some(verifier), Some(token)) = (&rules.jwt, password.and_then(as_jwt)) {
            if inner.throttled(client) {
                return Err(ReasonCode::CONNECTION_RATE_EXCEEDED);
            }
            return match verifier.verify(token, username, SystemTime::now()) {
                Ok(grant) => {
                    inner.succeeded(client);
                    Ok(Authenticated {
                        username: Some(grant.username.as_str().into()),
                        grant: Some(Arc::new(grant)),
                    })
                }
                Err(error) => Err(inner.failed(client, username, jwt_reason(&error))),
            };
        }
        let Some(username) = username else {
            let allow = client
                .listener
                .allow_anonymous
                .unwrap_or(inner.settings.allow_anonymous);
            if allow {
                return Ok(Authenticated::default());
            }
            tracing::info!(
                client_id = %client.client_id,
                peer = ?client.peer,
                listener = %client.listener.name,
                "login_refused_anonymous"
            );
            return Err(ReasonCode::NOT_AUTHORIZED);
        };
        match &rules.passwords {
            Some(passwords) => {
                self.authenticate_password(&rules, passwords, client, username, password)
            }
            // With JWT configured a named client must bring a token.
            None if rules.jwt.is_some() => {
                if inner.throttled(client) {
                    return Err(ReasonCode::CONNECTION_RATE_EXCEEDED);
                }
                Err(inner.failed(client, Some(username), "no_token"))
            }
            // Neither password file nor JWT: user names are not checked (as Mosquitto).
            None => Ok(Authenticated::default()),
        }
    }

    fn start_enhanced_auth(
        &self,
        client: &ClientInfo,
        method: &str,
    ) -> Result<Box<dyn EnhancedAuth>, ReasonCode> {
        if client.listener.identity_as_username {
            // The transport proved who the client is; no other method is offered there.
            tracing::info!(client_id = %client.client_id, peer = ?client.peer, method, "enhanced_auth_on_identity_listener");
            return Err(ReasonCode::BAD_AUTHENTICATION_METHOD);
        }
        let Some(mechanism) = Mechanism::from_name(method) else {
            tracing::info!(client_id = %client.client_id, peer = ?client.peer, method, "unsupported_auth_method");
            return Err(ReasonCode::BAD_AUTHENTICATION_METHOD);
        };
        let rules = self.rules();
        let from_password_file = mechanism == Mechanism::ScramSha512
            && self.inner.settings.scram_sha512_from_password_file
            && rules.passwords.is_some();
        if rules.scram.is_none() && !from_password_file {
            tracing::info!(client_id = %client.client_id, peer = ?client.peer, method, "unsupported_auth_method");
            return Err(ReasonCode::BAD_AUTHENTICATION_METHOD);
        }
        if self.inner.throttled(client) {
            return Err(ReasonCode::CONNECTION_RATE_EXCEEDED);
        }
        let lookup: CredentialLookup = Box::new(move |user: &str| {
            let stored = rules
                .scram
                .as_ref()
                .and_then(|file| file.get(user, mechanism).cloned());
            stored.or_else(|| {
                from_password_file
                    .then(|| rules.passwords.as_ref()?.scram_sha512_credentials(user))
                    .flatten()
            })
        });
        Ok(Box::new(ScramExchange {
            server: ScramServer::new(mechanism, lookup),
            inner: self.inner.clone(),
            client: client.clone(),
        }))
    }

    fn authorize_publish(&self, client: &ClientInfo, topic: &str) -> bool {
        if self.inner.policy.publish_denied(topic) {
            return false;
        }
        if let Some(grant) = jwt_grant(client) {
            return !grant.is_expired(SystemTime::now()) && grant.can_publish(topic);
        }
        self.acl_allows(client, topic, Access::Write)
    }

    fn disconnect_v3_on_denied_publish(&self) -> bool {
        self.inner.settings.v3_publish_denied == V3PublishDenied::Disconnect
    }

    fn authorize_subscribe(&self, client: &ClientInfo, filter: &str) -> Result<(), ReasonCode> {
        if let Some(code) = self.inner.policy.subscribe_denied(filter) {
            return Err(code);
        }
        let allowed = if let Some(grant) = jwt_grant(client) {
            !grant.is_expired(SystemTime::now()) && grant.can_subscribe(filter)
        } else {
            self.acl_allows(client, filter, Access::Subscribe)
        };
        if allowed {
            Ok(())
        } else {
            Err(ReasonCode::NOT_AUTHORIZED)
        }
    }

    fn has_read_rules(&self) -> bool {
        self.inner.read_rules.load(Ordering::Relaxed)
    }

    fn authorize_read(&self, client: &ClientInfo, topic: &str) -> bool {
        if let Some(grant) = jwt_grant(client) {
            return !grant.is_expired(SystemTime::now()) && grant.can_receive(topic);
        }
        self.acl_allows(client, topic, Access::Read)
    }

    fn reload(&self) {
        match SecurityHook::reload(self) {
            Ok(()) => tracing::info!("auth_reloaded"),
            Err(error) => tracing::error!(%error, "auth_reload_failed_keeping_old_rules"),
        }
    }
}

/// The JWT grant a client authenticated with, if any.
fn jwt_grant(client: &ClientInfo) -> Option<&JwtGrant> {
    client.grant()?.downcast_ref::<JwtGrant>()
}

/// The password as a JWT when it looks like one: three base64url parts separated by dots,
/// the first a JSON object (`eyJ` is base64url for `{"`).
fn as_jwt(password: &[u8]) -> Option<&str> {
    let token = std::str::from_utf8(password).ok()?.trim();
    let mut parts = token.split('.');
    let (header, payload, signature) = (parts.next()?, parts.next()?, parts.next()?);
    let base64url = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    let looks_like = parts.next().is_none()
        && header.starts_with("eyJ")
        && !payload.is_empty()
        && [header, payload, signature].into_iter().all(base64url);
    looks_like.then_some(token)
}

fn jwt_reason(error: &JwtError) -> &'static str {
    match error {
        JwtError::Expired => "jwt_expired",
        JwtError::NotYetValid => "jwt_not_yet_valid",
        JwtError::InvalidSignature => "jwt_bad_signature",
        JwtError::AlgorithmNotAllowed => "jwt_algorithm_not_allowed",
        JwtError::InvalidIssuer => "jwt_bad_issuer",
        JwtError::InvalidAudience => "jwt_bad_audience",
        JwtError::UsernameMismatch => "jwt_user_mismatch",
        JwtError::MissingClaim(_) => "jwt_missing_claim",
        _ => "jwt_invalid",
    }
}

/// Compares two digests in time independent of where they differ.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let difference = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(difference) == 0
}

/// Runs a slow computation without stalling the other tasks of this worker thread (on a
/// multi-threaded runtime); inline elsewhere.
fn blocking<R>(f: impl FnOnce() -> R) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

#[cfg(test)]
mod tests;
