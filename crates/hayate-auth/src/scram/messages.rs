//! The SCRAM message grammar: parsing the client-first message and checking the client-final
//! message (channel binding, nonce and proof).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use subtle::ConstantTimeEq as _;

use super::{Mechanism, ScramCredentials, ScramError};

pub(super) struct FirstRound<'a> {
    pub(super) gs2_header: &'a str,
    pub(super) client_first_bare: &'a str,
    pub(super) server_first: &'a str,
    pub(super) nonce: &'a str,
    pub(super) credentials: &'a ScramCredentials,
}

pub(super) struct ClientFirst<'a> {
    pub(super) gs2_header: &'a str,
    pub(super) bare: &'a str,
    pub(super) username: String,
    pub(super) client_nonce: &'a str,
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

pub(super) fn parse_client_first(msg: &str) -> Result<ClientFirst<'_>, ScramError> {
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

pub(super) fn client_final(
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
