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

use std::fmt;
use std::sync::OnceLock;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, KeyInit as _, Mac as _};
use rand::RngCore as _;
use sha2::{Digest as _, Sha256, Sha512};
use subtle::ConstantTimeEq as _;

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

struct FirstRound<'a> {
    gs2_header: &'a str,
    client_first_bare: &'a str,
    server_first: &'a str,
    nonce: &'a str,
    credentials: &'a ScramCredentials,
}

struct ClientFirst<'a> {
    gs2_header: &'a str,
    bare: &'a str,
    username: String,
    client_nonce: &'a str,
}

/// Decode a SASL name (`=2C` → `,`, `=3D` → `=`); any other `=` is an error.
fn decode_saslname(s: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find('=') {
        out.push_str(&rest[..pos]);
        let esc = rest.get(pos..pos + 3);
        match esc {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(ScramError::Malformed("bad escape in username")),
        }
        rest = &rest[pos + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A nonce is printable ASCII except `,`.
fn valid_nonce(n: &str) -> bool {
    !n.is_empty() && n.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

fn parse_client_first(msg: &str) -> Result<ClientFirst<'_>, ScramError> {
    // gs2-header = gs2-cbind-flag "," [ authzid ] ","
    let (flag, rest) = msg
        .split_once(',')
        .ok_or(ScramError::Malformed("missing GS2 header"))?;
    match flag {
        "n" | "y" => {}
        f if f.starts_with("p=") => return Err(ScramError::ChannelBindingNotSupported),
        _ => return Err(ScramError::Malformed("bad channel binding flag")),
    }
    let (authzid_raw, bare) = rest
        .split_once(',')
        .ok_or(ScramError::Malformed("missing GS2 header"))?;
    let gs2_header = &msg[..flag.len() + 1 + authzid_raw.len() + 1];
    let authzid = if authzid_raw.is_empty() {
        None
    } else {
        let a = authzid_raw
            .strip_prefix("a=")
            .ok_or(ScramError::Malformed("bad authorization identity"))?;
        Some(decode_saslname(a)?)
    };
    let mut attrs = bare.split(',');
    let first = attrs.next().unwrap_or("");
    if first.starts_with("m=") {
        return Err(ScramError::UnsupportedExtension);
    }
    let username = first
        .strip_prefix("n=")
        .ok_or(ScramError::Malformed("expected n=username"))?;
    let username = decode_saslname(username)?;
    if username.is_empty() {
        return Err(ScramError::Malformed("empty username"));
    }
    let client_nonce = attrs
        .next()
        .and_then(|a| a.strip_prefix("r="))
        .ok_or(ScramError::Malformed("expected r=nonce"))?;
    if !valid_nonce(client_nonce) {
        return Err(ScramError::Malformed("bad client nonce"));
    }
    for ext in attrs {
        check_extension(ext)?;
    }
    if let Some(a) = authzid {
        if a != username {
            return Err(ScramError::AuthzidNotSupported);
        }
    }
    Ok(ClientFirst {
        gs2_header,
        bare,
        username,
        client_nonce,
    })
}

/// An optional extension attribute: one ASCII letter, `=`, a value.
fn check_extension(attr: &str) -> Result<(), ScramError> {
    let b = attr.as_bytes();
    if b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b'=' {
        Ok(())
    } else {
        Err(ScramError::Malformed("bad attribute"))
    }
}

fn client_final(
    mechanism: Mechanism,
    msg: &[u8],
    round: &FirstRound<'_>,
) -> Result<Vec<u8>, ScramError> {
    let msg = std::str::from_utf8(msg).map_err(|_| ScramError::Malformed("not UTF-8"))?;
    // client-final-message = client-final-message-without-proof "," proof
    let (without_proof, proof) = msg
        .rsplit_once(',')
        .ok_or(ScramError::Malformed("missing proof"))?;
    let proof = proof
        .strip_prefix("p=")
        .ok_or(ScramError::Malformed("proof must be the last attribute"))?;
    let mut attrs = without_proof.split(',');
    let cbind = attrs
        .next()
        .and_then(|a| a.strip_prefix("c="))
        .ok_or(ScramError::Malformed("expected c=channel-binding"))?;
    let nonce = attrs
        .next()
        .and_then(|a| a.strip_prefix("r="))
        .ok_or(ScramError::Malformed("expected r=nonce"))?;
    for ext in attrs {
        check_extension(ext)?;
    }
    let cbind = STANDARD
        .decode(cbind)
        .map_err(|_| ScramError::Malformed("channel binding is not base64"))?;
    if cbind != round.gs2_header.as_bytes() {
        return Err(ScramError::ChannelBindingMismatch);
    }
    if nonce != round.nonce {
        return Err(ScramError::NonceMismatch);
    }
    let proof = STANDARD
        .decode(proof)
        .map_err(|_| ScramError::Malformed("proof is not base64"))?;
    let creds = round.credentials;
    if proof.len() != mechanism.output_len() {
        return Err(ScramError::InvalidProof);
    }
    let auth_message = format!(
        "{},{},{}",
        round.client_first_bare, round.server_first, without_proof
    );
    let client_signature = mechanism.hmac(&creds.stored_key, auth_message.as_bytes());
    let client_key: Vec<u8> = proof
        .iter()
        .zip(&client_signature)
        .map(|(p, s)| p ^ s)
        .collect();
    let computed_stored_key = mechanism.hash(&client_key);
    if !bool::from(computed_stored_key.ct_eq(&creds.stored_key)) {
        return Err(ScramError::InvalidProof);
    }
    let server_signature = mechanism.hmac(&creds.server_key, auth_message.as_bytes());
    Ok(format!("v={}", STANDARD.encode(server_signature)).into_bytes())
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal SCRAM client for tests: returns (client-final, expected server-final).
    pub(crate) fn client_final_for(
        mechanism: Mechanism,
        password: &[u8],
        client_first_bare: &str,
        server_first: &str,
        gs2_header: &str,
    ) -> (String, String) {
        let mut nonce = "";
        let mut salt = Vec::new();
        let mut iterations = 0;
        for attr in server_first.split(',') {
            if let Some(v) = attr.strip_prefix("r=") {
                nonce = v;
            } else if let Some(v) = attr.strip_prefix("s=") {
                salt = STANDARD.decode(v).unwrap();
            } else if let Some(v) = attr.strip_prefix("i=") {
                iterations = v.parse().unwrap();
            }
        }
        let salted = mechanism.salted_password(password, &salt, iterations);
        let client_key = mechanism.hmac(&salted, b"Client Key");
        let stored_key = mechanism.hash(&client_key);
        let without_proof = format!("c={},r={nonce}", STANDARD.encode(gs2_header));
        let auth = format!("{client_first_bare},{server_first},{without_proof}");
        let sig = mechanism.hmac(&stored_key, auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
        let server_key = mechanism.hmac(&salted, b"Server Key");
        let server_sig = mechanism.hmac(&server_key, auth.as_bytes());
        (
            format!("{without_proof},p={}", STANDARD.encode(proof)),
            format!("v={}", STANDARD.encode(server_sig)),
        )
    }

    fn rfc7677_credentials() -> ScramCredentials {
        ScramCredentials::from_password(
            Mechanism::ScramSha256,
            b"pencil",
            STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap(),
            4096,
        )
    }

    const RFC_CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    const RFC_SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const RFC_SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const RFC_CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const RFC_SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn rfc_server() -> ScramServer<impl FnOnce(&str) -> Option<ScramCredentials>> {
        ScramServer::new(Mechanism::ScramSha256, |u: &str| {
            (u == "user").then(rfc7677_credentials)
        })
        .with_server_nonce(RFC_SERVER_NONCE)
    }

    #[test]
    fn rfc7677_exchange() {
        let mut s = rfc_server();
        assert_eq!(
            s.step(RFC_CLIENT_FIRST.as_bytes()).unwrap(),
            ScramStep::Continue(RFC_SERVER_FIRST.as_bytes().to_vec())
        );
        assert_eq!(
            s.step(RFC_CLIENT_FINAL.as_bytes()).unwrap(),
            ScramStep::Success {
                server_final: RFC_SERVER_FINAL.as_bytes().to_vec(),
                username: "user".into()
            }
        );
        assert_eq!(s.step(b"again"), Err(ScramError::Finished));
    }

    #[test]
    fn test_client_reproduces_rfc7677() {
        let (cf, sf) = client_final_for(
            Mechanism::ScramSha256,
            b"pencil",
            "n=user,r=rOprNGfwEbeRWgbNEkqO",
            RFC_SERVER_FIRST,
            "n,,",
        );
        assert_eq!(cf, RFC_CLIENT_FINAL);
        assert_eq!(sf, RFC_SERVER_FINAL);
    }

    #[test]
    fn bad_proof_refused() {
        let mut s = rfc_server();
        s.step(RFC_CLIENT_FIRST.as_bytes()).unwrap();
        let bad = RFC_CLIENT_FINAL.replace("p=dHzb", "p=dHzc");
        assert_eq!(s.step(bad.as_bytes()), Err(ScramError::InvalidProof));
        assert_eq!(
            s.step(RFC_CLIENT_FINAL.as_bytes()),
            Err(ScramError::Finished)
        );
    }

    #[test]
    fn wrong_password_refused() {
        let mut s = rfc_server();
        let ScramStep::Continue(sf) = s.step(RFC_CLIENT_FIRST.as_bytes()).unwrap() else {
            panic!()
        };
        let sf = String::from_utf8(sf).unwrap();
        let (cf, _) = client_final_for(
            Mechanism::ScramSha256,
            b"pencil2",
            "n=user,r=rOprNGfwEbeRWgbNEkqO",
            &sf,
            "n,,",
        );
        assert_eq!(s.step(cf.as_bytes()), Err(ScramError::InvalidProof));
    }

    #[test]
    fn nonce_mismatch_refused() {
        let mut s = rfc_server();
        s.step(RFC_CLIENT_FIRST.as_bytes()).unwrap();
        let bad = RFC_CLIENT_FINAL.replace("$k0,p=", "$k1,p=");
        assert_eq!(s.step(bad.as_bytes()), Err(ScramError::NonceMismatch));
    }

    #[test]
    fn channel_binding_mismatch_refused() {
        let mut s = rfc_server();
        s.step(RFC_CLIENT_FIRST.as_bytes()).unwrap();
        // "eSws" is base64("y,,") but the client sent "n,,".
        let bad = RFC_CLIENT_FINAL.replace("c=biws", "c=eSws");
        assert_eq!(
            s.step(bad.as_bytes()),
            Err(ScramError::ChannelBindingMismatch)
        );
    }

    #[test]
    fn unknown_user_fails_at_proof_with_stable_salt() {
        let first = |u: &str| {
            let mut s = ScramServer::new(Mechanism::ScramSha256, |_: &str| None);
            let ScramStep::Continue(sf) = s.step(format!("n,,n={u},r=abc").as_bytes()).unwrap()
            else {
                panic!()
            };
            (s, String::from_utf8(sf).unwrap())
        };
        let (mut s, sf) = first("ghost");
        let salt1 = sf.split(',').nth(1).unwrap().to_owned();
        let (_, sf2) = first("ghost");
        assert_eq!(sf2.split(',').nth(1).unwrap(), salt1);
        let (_, sf3) = first("ghost2");
        assert_ne!(sf3.split(',').nth(1).unwrap(), salt1);
        let (cf, _) = client_final_for(Mechanism::ScramSha256, b"x", "n=ghost,r=abc", &sf, "n,,");
        assert_eq!(s.step(cf.as_bytes()), Err(ScramError::InvalidProof));
    }

    #[test]
    fn sha512_roundtrip_with_y_flag_and_escaped_username() {
        let creds = ScramCredentials::generate(Mechanism::ScramSha512, b"p\xc3\xa4ss");
        let mut s = ScramServer::new(Mechanism::ScramSha512, |u: &str| {
            (u == "a,b=c").then(|| creds.clone())
        });
        let bare = "n=a=2Cb=3Dc,r=clientnonce,x=ext";
        let ScramStep::Continue(sf) = s.step(format!("y,,{bare}").as_bytes()).unwrap() else {
            panic!()
        };
        let sf = String::from_utf8(sf).unwrap();
        assert!(sf.starts_with("r=clientnonce"));
        assert!(sf.ends_with(",i=4096"));
        let (cf, expected) =
            client_final_for(Mechanism::ScramSha512, "päss".as_bytes(), bare, &sf, "y,,");
        assert_eq!(
            s.step(cf.as_bytes()).unwrap(),
            ScramStep::Success {
                server_final: expected.into_bytes(),
                username: "a,b=c".into()
            }
        );
    }

    #[test]
    fn authzid_equal_to_username_accepted() {
        let creds = ScramCredentials::generate(Mechanism::ScramSha256, b"pw");
        let mut s = ScramServer::new(Mechanism::ScramSha256, |_: &str| Some(creds.clone()));
        let ScramStep::Continue(sf) = s.step(b"n,a=bob,n=bob,r=xyz").unwrap() else {
            panic!()
        };
        let sf = String::from_utf8(sf).unwrap();
        let (cf, _) = client_final_for(
            Mechanism::ScramSha256,
            b"pw",
            "n=bob,r=xyz",
            &sf,
            "n,a=bob,",
        );
        assert!(matches!(
            s.step(cf.as_bytes()),
            Ok(ScramStep::Success { .. })
        ));
    }

    #[test]
    fn mechanism_mismatch_is_treated_as_unknown_user() {
        let creds = ScramCredentials::generate(Mechanism::ScramSha256, b"pw");
        let mut s = ScramServer::new(Mechanism::ScramSha512, |_: &str| Some(creds.clone()));
        let ScramStep::Continue(sf) = s.step(b"n,,n=bob,r=xyz").unwrap() else {
            panic!()
        };
        let sf = String::from_utf8(sf).unwrap();
        let (cf, _) = client_final_for(Mechanism::ScramSha512, b"pw", "n=bob,r=xyz", &sf, "n,,");
        assert_eq!(s.step(cf.as_bytes()), Err(ScramError::InvalidProof));
    }

    #[test]
    fn malformed_client_first_refused() {
        let cases: &[(&[u8], ScramError)] = &[
            (b"", ScramError::Malformed("missing GS2 header")),
            (b"n,,", ScramError::Malformed("expected n=username")),
            (
                b"p=tls-unique,,n=u,r=x",
                ScramError::ChannelBindingNotSupported,
            ),
            (
                b"x,,n=u,r=x",
                ScramError::Malformed("bad channel binding flag"),
            ),
            (b"n,,m=ext,n=u,r=x", ScramError::UnsupportedExtension),
            (b"n,,n=u", ScramError::Malformed("expected r=nonce")),
            (b"n,,n=,r=x", ScramError::Malformed("empty username")),
            (
                b"n,,n=a=2Xb,r=x",
                ScramError::Malformed("bad escape in username"),
            ),
            (b"n,,r=x,n=u", ScramError::Malformed("expected n=username")),
            (b"n,,n=u,r=", ScramError::Malformed("bad client nonce")),
            (b"n,,n=u,r=x,bad", ScramError::Malformed("bad attribute")),
            (b"n,a=other,n=u,r=x", ScramError::AuthzidNotSupported),
            (
                b"n,zz,n=u,r=x",
                ScramError::Malformed("bad authorization identity"),
            ),
            (b"n,,n=u,r=\xff", ScramError::Malformed("not UTF-8")),
        ];
        for (msg, err) in cases {
            let mut s = ScramServer::new(Mechanism::ScramSha256, |_: &str| None);
            assert_eq!(
                s.step(msg).as_ref(),
                Err(err),
                "{}",
                String::from_utf8_lossy(msg)
            );
        }
    }

    #[test]
    fn malformed_client_final_refused() {
        for (msg, err) in [
            ("", ScramError::Malformed("missing proof")),
            (
                "c=biws,r=x",
                ScramError::Malformed("proof must be the last attribute"),
            ),
            (
                "r=x,c=biws,p=AAAA",
                ScramError::Malformed("expected c=channel-binding"),
            ),
            ("c=biws,p=AAAA", ScramError::Malformed("expected r=nonce")),
            (
                "c=!!,r=x,p=AAAA",
                ScramError::Malformed("channel binding is not base64"),
            ),
            (
                "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=!!",
                ScramError::Malformed("proof is not base64"),
            ),
            (
                "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA",
                ScramError::InvalidProof,
            ),
        ] {
            let mut s = rfc_server();
            s.step(RFC_CLIENT_FIRST.as_bytes()).unwrap();
            assert_eq!(s.step(msg.as_bytes()), Err(err), "{msg}");
        }
    }

    #[test]
    fn mechanism_names() {
        for m in [Mechanism::ScramSha256, Mechanism::ScramSha512] {
            assert_eq!(Mechanism::from_name(m.name()), Some(m));
        }
        assert_eq!(Mechanism::from_name("scram-sha-256"), None);
        assert_eq!(Mechanism::from_name("SCRAM-SHA-1"), None);
    }
}
