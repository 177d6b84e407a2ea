use super::*;
use crate::scram::Mechanism;

// Made by mosquitto_passwd 2.0.11 (`-b`, password "secret").
const MOSQ_7: &str = "$7$101$TTivVHcgwzQ9mzn+$5ee1DW6jYwurKZHqNKAaJfcM+amfOKDj0Bg1kVcqeoTX/YSRR2jBoMk8tqZK5qf5I/ZnhgLZFNV1ZCHIIX5p3Q==";
// Made by mosquitto_passwd 2.0.11 (`-H sha512 -b`, password "z").
const MOSQ_6: &str = "$6$BTnlnHg0U+4IVdXw$YObtvc3h7StLDetJhu8gDUgR461rEhuX8Kru9iBU0L3c0xix1cW/D4vjRcASn+Bn70tjerl/tGkZRSt0N/X5XA==";

#[test]
fn verifies_mosquitto_hashes() {
    let h7 = PasswordHash::parse(MOSQ_7).unwrap();
    assert!(h7.verify(b"secret"));
    assert!(!h7.verify(b"Secret"));
    assert!(!h7.verify(b""));
    let h6 = PasswordHash::parse(MOSQ_6).unwrap();
    assert!(h6.verify(b"z"));
    assert!(!h6.verify(b"y"));
}

#[test]
fn encode_roundtrip() {
    for s in [MOSQ_6, MOSQ_7] {
        assert_eq!(PasswordHash::parse(s).unwrap().to_string(), s);
    }
    let h = PasswordHash::new_pbkdf2_sha512(b"pw");
    let enc = h.to_string();
    assert!(enc.starts_with("$7$101$"));
    // 12-byte salt → 16 base64 chars, 64-byte hash → 88 chars with padding.
    let parts: Vec<&str> = enc.split('$').collect();
    assert_eq!(parts[3].len(), 16);
    assert_eq!(parts[4].len(), 88);
    assert!(PasswordHash::parse(&enc).unwrap().verify(b"pw"));
}

#[test]
fn argon2id_mosquitto_2_1_format() {
    let h = PasswordHash::new_argon2id(b"pencil").unwrap();
    let enc = h.to_string();
    assert!(enc.starts_with("$argon2id$v=19$m=47104,t=1,p=1$"), "{enc}");
    let parts: Vec<&str> = enc.split('$').collect();
    // 64 bytes unpadded: 86 characters, no '=' padding.
    assert_eq!(parts[4].len(), 86);
    assert_eq!(parts[5].len(), 86);
    assert!(!parts[4].contains('=') && !parts[5].contains('='));
    let back = PasswordHash::parse(&enc).unwrap();
    assert_eq!(back, h);
    assert!(back.verify(b"pencil"));
    assert!(!back.verify(b"pencil "));
}

#[test]
fn argon2id_reference_vectors() {
    // Produced by the reference libargon2 CLI (Debian `argon2` 0~20171227):
    // `echo -n password | argon2 somesalt -id -t 2 -m 16 -p 4 -l 24 -e` (and `-v 10`).
    let v19 = "$argon2id$v=19$m=65536,t=2,p=4$c29tZXNhbHQ$F1jG2CV3/Nr+yRuIsPKw0J9r4s7cJHBU";
    let v16 = "$argon2id$v=16$m=65536,t=2,p=4$c29tZXNhbHQ$mYBq69tGGqqsDkXhTjBAyk2ybVZFlKNd";
    for enc in [v19, v16] {
        let h = PasswordHash::parse(enc).unwrap();
        assert!(h.verify(b"password"), "{enc}");
        assert!(!h.verify(b"passwore"), "{enc}");
        assert_eq!(h.to_string(), enc);
    }
    // Mosquitto 2.1's shape: 64-byte salt and hash, m=47104, t=1, p=1. Made with
    // `echo -n 'correct horse' | argon2 'Hayate-test-salt-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJK'
    //  -id -t 1 -k 47104 -p 1 -l 64 -e`.
    let mosq = "$argon2id$v=19$m=47104,t=1,p=1$SGF5YXRlLXRlc3Qtc2FsdC0wMTIzNDU2Nzg5YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXpBQkNERUZHSElKSw$MnjX0/yxm47KIMi+ug74OXt3i9CZq55eSihX4eO7L3nVi49xTkB32Lm5BYDizzYZQwHti4g3JdVws6+xmCJA2Q";
    let h = PasswordHash::parse(mosq).unwrap();
    assert!(h.verify(b"correct horse"));
    assert!(!h.verify(b"correct horse "));
    assert_eq!(h.to_string(), mosq);
}

#[test]
fn rejects_malformed_hashes() {
    for s in [
        "",
        "plain",
        "$5$abc$def",
        "$6$",
        "$6$c2FsdA==",
        "$6$c2FsdA==$c2hvcnQ=",
        "$7$0$TTivVHcgwzQ9mzn+$5ee1DW6jYwurKZHqNKAaJfcM+amfOKDj0Bg1kVcqeoTX/YSRR2jBoMk8tqZK5qf5I/ZnhgLZFNV1ZCHIIX5p3Q==",
        "$7$-1$TTivVHcgwzQ9mzn+$x",
        "$7$99999999999$TTivVHcgwzQ9mzn+$x",
        "$7$101$!!!!$x",
        "$argon2i$v=19$m=16,t=2,p=1$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8",
        "$argon2id$v=18$m=16,t=2,p=1$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8",
        "$argon2id$v=19$t=2,m=16,p=1$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8",
        "$argon2id$v=19$m=16,t=0,p=1$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8",
        "$argon2id$v=19$m=4294967295,t=1,p=1$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8",
        "$argon2id$v=19$m=16,t=2,p=1$c29tZXNhbHQ=$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8",
        "$argon2id$v=19$m=16,t=2,p=1$c2FsdA$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8",
    ] {
        assert!(PasswordHash::parse(s).is_err(), "{s}");
    }
}

#[test]
fn file_parsing() {
    let text = format!("# comment\n\n  alice : {MOSQ_7}  \r\nbob:{MOSQ_6}\n");
    let f = PasswordFile::parse(&text).unwrap();
    assert_eq!(f.len(), 2);
    assert!(f.verify("alice", b"secret"));
    assert!(f.verify("bob", b"z"));
    assert!(!f.verify("carol", b"z"));
    assert!(f.scram_sha512_credentials("alice").is_some());
    assert!(f.scram_sha512_credentials("bob").is_none());
}

#[test]
fn file_errors_have_line_numbers() {
    let cases = [
        (format!("alice:{MOSQ_7}\nnocolon\n"), 2),
        (format!("\n\n:{MOSQ_7}\n"), 3),
        ("alice:\n".to_string(), 1),
        ("alice:plaintext\n".to_string(), 1),
        (format!("a:{MOSQ_7}\nb:{MOSQ_6}\na:{MOSQ_6}\n"), 3),
    ];
    for (text, line) in cases {
        match PasswordFile::parse(&text) {
            Err(AuthError::Parse { line: l, .. }) => assert_eq!(l, line, "{text}"),
            other => panic!("{text}: {other:?}"),
        }
    }
    let msg = PasswordFile::parse("x:$6$\n").unwrap_err().to_string();
    assert!(msg.starts_with("password file line 1: user x:"), "{msg}");
}

#[test]
fn editing_preserves_other_lines() {
    let text = format!("# users\nalice:{MOSQ_7}\n\nbob:{MOSQ_6}");
    let new = PasswordHash::new_pbkdf2_sha512(b"new");
    let (out, existed) = set_user(&text, "bob", &new).unwrap();
    assert!(existed);
    assert!(out.starts_with(&format!("# users\nalice:{MOSQ_7}\n\nbob:$7$")));
    assert!(out.ends_with('\n'));
    let f = PasswordFile::parse(&out).unwrap();
    assert!(f.verify("bob", b"new"));
    assert!(f.verify("alice", b"secret"));

    let (out2, existed) = set_user(&out, "carol", &new).unwrap();
    assert!(!existed);
    assert!(out2.starts_with(&out));
    assert!(PasswordFile::parse(&out2).unwrap().verify("carol", b"new"));

    let out3 = delete_user(&out2, "alice").unwrap();
    assert_eq!(out3, out2.replace(&format!("alice:{MOSQ_7}\n"), ""));
    assert!(matches!(
        delete_user(&out3, "alice"),
        Err(AuthError::UserNotFound(_))
    ));
}

#[test]
fn set_user_collapses_duplicates() {
    let text = format!("a:{MOSQ_7}\nb:{MOSQ_6}\na:{MOSQ_6}\n");
    let (out, _) = set_user(&text, "a", &PasswordHash::new_pbkdf2_sha512(b"x")).unwrap();
    assert_eq!(out.lines().count(), 2);
    assert!(PasswordFile::parse(&out).unwrap().verify("a", b"x"));
}

#[test]
fn username_validation() {
    for bad in ["", "a:b", "a\nb", " a", "a ", "#a", "a\u{7f}"] {
        assert!(validate_username(bad).is_err(), "{bad:?}");
    }
    for ok in ["a", "a b", "é", "a#", "a/b+c"] {
        assert!(validate_username(ok).is_ok(), "{ok:?}");
    }
}

#[test]
fn plaintext_upgrade() {
    let text = "# plain\nu1:p1\n\nu2 : p 2 \n";
    let out = hash_plaintext(text, HashScheme::Pbkdf2Sha512).unwrap();
    assert!(out.starts_with("# plain\nu1:$7$101$"));
    let f = PasswordFile::parse(&out).unwrap();
    assert!(f.verify("u1", b"p1"));
    assert!(f.verify("u2", b"p 2"));
    // Running it again must not double-hash.
    assert!(hash_plaintext(&out, HashScheme::Pbkdf2Sha512).is_err());
    assert!(hash_plaintext("u1:\n", HashScheme::Pbkdf2Sha512).is_err());
}

#[test]
fn scram_sha512_login_against_mosquitto_passwd_entry() {
    use crate::scram::tests::client_final_for;
    use crate::scram::{ScramServer, ScramStep};
    // The committed file made by mosquitto_passwd 2.0.11; alice's password is "secret".
    let pf =
        PasswordFile::parse(include_str!("../../tests/fixtures/mosquitto-2.0.11.passwd")).unwrap();
    let creds = pf.scram_sha512_credentials("alice").unwrap();
    let PasswordHash::Pbkdf2Sha512 {
        salt, iterations, ..
    } = pf.get("alice").unwrap()
    else {
        panic!("alice has a $7$ entry")
    };
    // Same keys as deriving SCRAM-SHA-512 credentials from the password itself.
    assert_eq!(
        creds,
        ScramCredentials::from_password(
            Mechanism::ScramSha512,
            b"secret",
            salt.clone(),
            *iterations
        )
    );
    // $6$ entries cannot be used for SCRAM.
    assert!(pf.scram_sha512_credentials("legacy").is_none());

    for (password, ok) in [(&b"secret"[..], true), (&b"Secret"[..], false)] {
        let mut server = ScramServer::new(Mechanism::ScramSha512, |u: &str| {
            pf.scram_sha512_credentials(u)
        });
        let bare = "n=alice,r=fyko+d2lbbFgONRv9qkxdawL";
        let ScramStep::Continue(sf) = server.step(format!("n,,{bare}").as_bytes()).unwrap() else {
            panic!("expected server-first")
        };
        let sf = String::from_utf8(sf).unwrap();
        assert!(sf.ends_with(",i=101"), "{sf}");
        let (cf, expected_final) =
            client_final_for(Mechanism::ScramSha512, password, bare, &sf, "n,,");
        let result = server.step(cf.as_bytes());
        if ok {
            assert_eq!(
                result.unwrap(),
                ScramStep::Success {
                    server_final: expected_final.into_bytes(),
                    username: "alice".into()
                }
            );
        } else {
            assert_eq!(result, Err(crate::scram::ScramError::InvalidProof));
        }
    }
}
