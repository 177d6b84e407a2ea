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
        let ScramStep::Continue(sf) = s.step(format!("n,,n={u},r=abc").as_bytes()).unwrap() else {
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
