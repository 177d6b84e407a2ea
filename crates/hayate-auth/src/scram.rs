//! Server side of SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as a sans-IO state
//! machine for MQTT v5 enhanced authentication.
//!
//! In MQTT v5 the client puts the mechanism name (`SCRAM-SHA-256`) in the CONNECT packet's
//! Authentication Method and the *client-first* message in its Authentication Data. The server
//! feeds that to [`ScramServer::step`] and sends the returned *server-first* message in an AUTH
//! packet (reason 0x18, Continue authentication). The client answers with an AUTH packet whose
//! data is the *client-final* message; `step` then returns [`ScramStep::Success`] whose
//! *server-final* message goes into the CONNACK's Authentication Data. Any error means
//! CONNACK 0x87 (Not authorized) or 0x8C (Bad authentication method).
//!
//! Channel binding is not supported: the GS2 header must be `n,,` or `y,,` (an authorization
//! identity `a=` is accepted only when equal to the username); `p=` is refused. Usernames are
//! compared as UTF-8 after `=2C`/`=3D` unescaping, without SASLprep normalisation (so
//! passwords should be ASCII or NFC-normalised by the client).
//!
//! The server stores only [`ScramCredentials`] (salt, iteration count, StoredKey, ServerKey):
//! a stolen credential file does not give the password nor let an attacker log in as the user.
//! Unknown users go through the whole exchange with a fake salt that is stable for the process
//! and fail at the proof, so the exchange does not reveal which usernames exist.

mod messages;
#[cfg(test)]
pub(crate) mod tests;

use std::fmt;
use std::sync::OnceLock;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, KeyInit as _, Mac as _};
use rand::RngCore as _;
use sha2::{Digest as _, Sha256, Sha512};

use messages::{client_final, parse_client_first, FirstRound};

/// Iteration count used by [`ScramCredentials::generate`] (RFC 7677's minimum recommendation).
pub const DEFAULT_ITERATIONS: u32 = 4096;
/// Largest iteration count a credential may carry (bounded so a bad file cannot stall logins).
pub const MAX_ITERATIONS: u32 = 10_000_000;
/// Random bytes in the server's nonce part.
const SERVER_NONCE_BYTES: usize = 18;
/// Salt length for newly generated credentials.
const SALT_LEN: usize = 16;

/// A SCRAM mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    /// `SCRAM-SHA-256` (RFC 7677).
    ScramSha256,
    /// `SCRAM-SHA-512`.
    ScramSha512,
}

impl Mechanism {
    /// The SASL mechanism name, as carried in the MQTT Authentication Method property.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism for an MQTT Authentication Method (exact, case-sensitive match).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "SCRAM-SHA-256" => Some(Mechanism::ScramSha256),
            "SCRAM-SHA-512" => Some(Mechanism::ScramSha512),
            _ => None,
        }
    }

    /// Output length of the hash function in bytes (32 or 64).
    pub fn output_len(self) -> usize {
        match self {
            Mechanism::ScramSha256 => 32,
            Mechanism::ScramSha512 => 64,
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::ScramSha256 => {
                let mut m = <Hmac<Sha256>>::new_from_slice(key).expect("HMAC takes any key length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            Mechanism::ScramSha512 => {
                let mut m = <Hmac<Sha512>>::new_from_slice(key).expect("HMAC takes any key length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::ScramSha256 => Sha256::digest(data).to_vec(),
            Mechanism::ScramSha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// SaltedPassword = Hi(password, salt, i) = PBKDF2-HMAC-H(password, salt, i, output_len).
    fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0u8; self.output_len()];
        match self {
            Mechanism::ScramSha256 => {
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out)
            }
            Mechanism::ScramSha512 => {
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out)
            }
        }
        out
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the server stores for one user and mechanism: never the password itself.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredentials {
    /// The mechanism these keys belong to.
    pub mechanism: Mechanism,
    /// The salt sent to the client.
    pub salt: Vec<u8>,
    /// The iteration count sent to the client.
    pub iterations: u32,
    /// StoredKey = H(HMAC(SaltedPassword, "Client Key")).
    pub stored_key: Vec<u8>,
    /// ServerKey = HMAC(SaltedPassword, "Server Key").
    pub server_key: Vec<u8>,
}

impl fmt::Debug for ScramCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramCredentials")
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

fn random_bytes(len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    rand::rng().fill_bytes(&mut buf);
    buf
}

impl ScramCredentials {
    /// Derive credentials from a password with a fresh random 16-byte salt and
    /// [`DEFAULT_ITERATIONS`].
    pub fn generate(mechanism: Mechanism, password: &[u8]) -> Self {
        Self::from_password(
            mechanism,
            password,
            random_bytes(SALT_LEN),
            DEFAULT_ITERATIONS,
        )
    }

    /// Derive credentials from a password, salt and iteration count.
    pub fn from_password(
        mechanism: Mechanism,
        password: &[u8],
        salt: Vec<u8>,
        iterations: u32,
    ) -> Self {
        let iterations = iterations.clamp(1, MAX_ITERATIONS);
        let salted = mechanism.salted_password(password, &salt, iterations);
        Self::from_salted_password(mechanism, &salted, salt, iterations)
    }

    /// Derive credentials from SaltedPassword (e.g. the hash of a Mosquitto `$7$` entry for
    /// SCRAM-SHA-512).
    pub fn from_salted_password(
        mechanism: Mechanism,
        salted_password: &[u8],
        salt: Vec<u8>,
        iterations: u32,
    ) -> Self {
        let client_key = mechanism.hmac(salted_password, b"Client Key");
        ScramCredentials {
            mechanism,
            salt,
            iterations,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted_password, b"Server Key"),
        }
    }

    /// Whether the key lengths fit the mechanism and the iteration count is in range.
    pub fn is_well_formed(&self) -> bool {
        let n = self.mechanism.output_len();
        self.stored_key.len() == n
            && self.server_key.len() == n
            && !self.salt.is_empty()
            && (1..=MAX_ITERATIONS).contains(&self.iterations)
    }
}

/// Why an exchange failed. Every variant means "authentication failed" to the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScramError {
    /// A message does not follow the SCRAM grammar.
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    /// The client asked for channel binding (`p=`), which is not supported.
    #[error("channel binding is not supported")]
    ChannelBindingNotSupported,
    /// The client sent a mandatory extension (`m=`).
    #[error("unsupported mandatory SCRAM extension")]
    UnsupportedExtension,
    /// An authorization identity different from the username was requested.
    #[error("authorization identity must equal the username")]
    AuthzidNotSupported,
    /// The client-final message does not carry the nonce of this exchange.
    #[error("nonce mismatch")]
    NonceMismatch,
    /// The channel-binding attribute does not repeat the GS2 header.
    #[error("channel binding data mismatch")]
    ChannelBindingMismatch,
    /// Wrong password or unknown user.
    #[error("invalid proof")]
    InvalidProof,
    /// `step` was called after the exchange finished or failed.
    #[error("SCRAM exchange already finished")]
    Finished,
}

/// The outcome of one successful [`ScramServer::step`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScramStep {
    /// Send this *server-first* message (AUTH, reason 0x18) and wait for the client-final one.
    Continue(Vec<u8>),
    /// The client proved it knows the password: send *server-final* in the CONNACK.
    Success {
        /// The *server-final* message (`v=…`).
        server_final: Vec<u8>,
        /// The authenticated username.
        username: String,
    },
}

enum State<L> {
    Initial(L),
    SentServerFirst {
        username: String,
        gs2_header: String,
        client_first_bare: String,
        server_first: String,
        nonce: String,
        credentials: ScramCredentials,
    },
    Done,
}

/// One SCRAM exchange, server side. Create one per connection attempt.
///
/// `L` looks up the stored credentials of a username; it is called once, during the first
/// step. Returning `None` (or credentials for another mechanism) makes the exchange fail at
/// the proof, indistinguishably from a wrong password.
pub struct ScramServer<L> {
    mechanism: Mechanism,
    state: State<L>,
    server_nonce: Option<String>,
}

impl<L> fmt::Debug for ScramServer<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Initial(_) => "initial",
            State::SentServerFirst { .. } => "sent server-first",
            State::Done => "done",
        };
        f.debug_struct("ScramServer")
            .field("mechanism", &self.mechanism)
            .field("state", &state)
            .finish()
    }
}

impl<L> ScramServer<L>
where
    L: FnOnce(&str) -> Option<ScramCredentials>,
{
    /// Start an exchange for `mechanism`, looking credentials up with `credential_lookup`.
    pub fn new(mechanism: Mechanism, credential_lookup: L) -> Self {
        ScramServer {
            mechanism,
            state: State::Initial(credential_lookup),
            server_nonce: None,
        }
    }

    #[cfg(test)]
    fn with_server_nonce(mut self, nonce: &str) -> Self {
        self.server_nonce = Some(nonce.to_owned());
        self
    }

    /// The mechanism of this exchange.
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// Feed the next client message (the MQTT Authentication Data). After an error the
    /// exchange is over and every later call returns [`ScramError::Finished`].
    pub fn step(&mut self, client_message: &[u8]) -> Result<ScramStep, ScramError> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Initial(lookup) => self.client_first(client_message, lookup),
            State::SentServerFirst {
                username,
                gs2_header,
                client_first_bare,
                server_first,
                nonce,
                credentials,
            } => client_final(
                self.mechanism,
                client_message,
                &FirstRound {
                    gs2_header: &gs2_header,
                    client_first_bare: &client_first_bare,
                    server_first: &server_first,
                    nonce: &nonce,
                    credentials: &credentials,
                },
            )
            .map(|server_final| ScramStep::Success {
                server_final,
                username,
            }),
            State::Done => Err(ScramError::Finished),
        }
    }

    fn client_first(&mut self, msg: &[u8], lookup: L) -> Result<ScramStep, ScramError> {
        let msg = std::str::from_utf8(msg).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let parsed = parse_client_first(msg)?;
        let credentials = match lookup(&parsed.username) {
            Some(c) if c.mechanism == self.mechanism && c.is_well_formed() => c,
            _ => mock_credentials(self.mechanism, &parsed.username),
        };
        let server_nonce = self
            .server_nonce
            .take()
            .unwrap_or_else(|| STANDARD.encode(random_bytes(SERVER_NONCE_BYTES)));
        let nonce = format!("{}{}", parsed.client_nonce, server_nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            STANDARD.encode(&credentials.salt),
            credentials.iterations
        );
        let reply = server_first.clone().into_bytes();
        self.state = State::SentServerFirst {
            username: parsed.username,
            gs2_header: parsed.gs2_header.to_owned(),
            client_first_bare: parsed.bare.to_owned(),
            server_first,
            nonce,
            credentials,
        };
        Ok(ScramStep::Continue(reply))
    }
}

/// Credentials for a user that does not exist: the salt is stable for the life of the process
/// (so repeated probes see the same salt) and the keys are random (so no proof can match).
fn mock_credentials(mechanism: Mechanism, username: &str) -> ScramCredentials {
    static MOCK_KEY: OnceLock<Vec<u8>> = OnceLock::new();
    let key = MOCK_KEY.get_or_init(|| random_bytes(32));
    let mut input = mechanism.name().as_bytes().to_vec();
    input.push(0);
    input.extend_from_slice(username.as_bytes());
    let mut salt = mechanism.hmac(key, &input);
    salt.truncate(SALT_LEN);
    let n = mechanism.output_len();
    ScramCredentials {
        mechanism,
        salt,
        iterations: DEFAULT_ITERATIONS,
        stored_key: random_bytes(n),
        server_key: random_bytes(n),
    }
}
