//! Property tests: no parser, check or state machine panics on any input, and file edits
//! round-trip.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant, SystemTime};

use proptest::prelude::*;

use hayate_auth::password_file::{delete_user, set_user, PasswordHash};
use hayate_auth::scram_file::decode_verifier;
use hayate_auth::{
    Access, AclFile, JwtAlgorithm, JwtConfig, JwtKey, JwtVerifier, LoginThrottle, Mechanism,
    PasswordFile, PskFile, ScramCredentials, ScramFile, ScramServer, ThrottleConfig,
};

/// Text built from fragments that the parsers care about, to reach deep paths more often than
/// uniformly random strings do.
fn fragment_text() -> impl Strategy<Value = String> {
    let frag = prop_oneof![
        Just("topic".to_string()),
        Just("pattern".to_string()),
        Just("user".to_string()),
        Just("read".to_string()),
        Just("write".to_string()),
        Just("readwrite".to_string()),
        Just("deny".to_string()),
        Just(" ".to_string()),
        Just("\t".to_string()),
        Just("\n".to_string()),
        Just("\r\n".to_string()),
        Just("#".to_string()),
        Just("+".to_string()),
        Just("/".to_string()),
        Just("%u".to_string()),
        Just("%c".to_string()),
        Just(":".to_string()),
        Just("$".to_string()),
        Just("$6$".to_string()),
        Just("$7$101$".to_string()),
        Just("$argon2id$v=19$m=8,t=1,p=1$".to_string()),
        Just("SCRAM-SHA-256$4096:".to_string()),
        Just("c2FsdHNhbHQ=".to_string()),
        Just("AAAA".to_string()),
        Just("00ff".to_string()),
        Just("=".to_string()),
        "[a-zA-Z0-9]{0,6}",
        any::<char>().prop_map(String::from),
    ];
    prop::collection::vec(frag, 0..40).prop_map(|v| v.concat())
}

fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![any::<String>(), fragment_text()]
}

const ACL: &str = "topic read public/#\nuser u\ntopic readwrite u/#\ntopic deny u/x/#\n\
                   pattern readwrite users/%u/#\npattern deny d/%c\npattern read c/%c/+\n";

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn file_parsers_never_panic(text in any_text()) {
        let _ = PasswordFile::parse(&text);
        let _ = AclFile::parse(&text);
        let _ = PskFile::parse(&text);
        let _ = ScramFile::parse(&text);
        let _ = PasswordHash::parse(&text);
        let _ = decode_verifier(&text);
    }

    #[test]
    fn parsed_acl_checks_never_panic(
        text in fragment_text(),
        user in proptest::option::of(any_text()),
        cid in any_text(),
        topic in any_text(),
    ) {
        if let Ok(acl) = AclFile::parse(&text) {
            for access in [Access::Read, Access::Write, Access::Subscribe] {
                let _ = acl.check(user.as_deref(), &cid, &topic, access);
            }
        }
        let acl = AclFile::parse(ACL).unwrap();
        for access in [Access::Read, Access::Write, Access::Subscribe] {
            let _ = acl.check(user.as_deref(), &cid, &topic, access);
        }
    }

    #[test]
    fn subscribe_to_a_topic_name_is_read_access(
        user in proptest::option::of("[a-z]{1,3}"),
        cid in "[a-z]{1,3}",
        topic in "(u|users|c|d|public|[a-z]{1,2})(/[a-z]{1,2}){0,3}",
    ) {
        // A filter without wildcards covers exactly one topic, so accepting it must be the
        // same decision as reading that topic.
        let acl = AclFile::parse(ACL).unwrap();
        prop_assert_eq!(
            acl.check(user.as_deref(), &cid, &topic, Access::Subscribe),
            acl.check(user.as_deref(), &cid, &topic, Access::Read)
        );
    }

    #[test]
    fn scram_never_panics(first in prop::collection::vec(any::<u8>(), 0..200),
                          second in prop::collection::vec(any::<u8>(), 0..200),
                          text_first in fragment_text()) {
        let creds = ScramCredentials::from_password(Mechanism::ScramSha256, b"pw", b"salt".to_vec(), 1);
        for input in [first.clone(), text_first.into_bytes(), b"n,,n=u,r=abc".to_vec()] {
            let mut s = ScramServer::new(Mechanism::ScramSha256, |_: &str| Some(creds.clone()));
            let _ = s.step(&input);
            let _ = s.step(&second);
            let _ = s.step(&first);
        }
    }

    #[test]
    fn jwt_never_panics(token in any_text(), user in proptest::option::of(any_text()), secs in any::<u64>()) {
        let v = JwtVerifier::new(JwtConfig::new(JwtKey::Secret(b"secret".to_vec()), vec![JwtAlgorithm::HS256])).unwrap();
        let now = SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs / 4)).unwrap_or(SystemTime::UNIX_EPOCH);
        let _ = v.verify(&token, user.as_deref(), now);
        let _ = JwtAlgorithm::from_name(&token);
    }

    #[test]
    fn throttle_never_panics_and_stays_bounded(
        ops in prop::collection::vec((any::<u8>(), any::<bool>(), 0u64..100_000, any::<bool>()), 0..200),
    ) {
        let mut t = LoginThrottle::new(ThrottleConfig { capacity: 16, ..ThrottleConfig::default() });
        let start = Instant::now();
        for (addr, v6, ms, fail) in ops {
            let ip = if v6 {
                IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, addr as u16, 0, 0, 0, 0, 1))
            } else {
                IpAddr::V4(Ipv4Addr::new(192, 0, 2, addr))
            };
            let now = start + Duration::from_millis(ms);
            if fail {
                let d = t.record_failure(ip, now);
                prop_assert!(d <= Duration::from_secs(10));
                prop_assert!(d >= Duration::from_millis(100));
            } else {
                t.record_success(ip);
            }
            let _ = t.delay(ip, now);
            prop_assert!(t.len() <= 16);
        }
    }

    #[test]
    fn set_and_delete_user_roundtrip(
        prefix in "(# [a-z ]{0,10}\n|[a-z]{1,5}:\\$6\\$c2FsdA==\\$AAAA\n|\n){0,4}",
        user in "[a-zA-Z0-9_.@-][a-zA-Z0-9_.@ -]{0,10}[a-zA-Z0-9_.@-]",
    ) {
        let hash = PasswordHash::pbkdf2_sha512_with(b"pw", 1, b"salt".to_vec());
        let (text, _) = set_user(&prefix, &user, &hash).unwrap();
        // Other lines are kept in order; the user's line is there once.
        let kept: Vec<&str> = prefix.lines().filter(|l| !l.starts_with(&format!("{user}:"))).collect();
        let after: Vec<&str> = text.lines().filter(|l| !l.starts_with(&format!("{user}:"))).collect();
        prop_assert_eq!(kept, after);
        prop_assert_eq!(text.lines().filter(|l| l.starts_with(&format!("{user}:"))).count(), 1);
        let entry = text.lines().find(|l| l.starts_with(&format!("{user}:"))).unwrap();
        let parsed = PasswordHash::parse(&entry[user.len() + 1..]).unwrap();
        prop_assert!(parsed.verify(b"pw"));
        let removed = delete_user(&text, &user).unwrap();
        let line_prefix = format!("{user}:");
        prop_assert!(!removed.lines().any(|l| l.starts_with(&line_prefix)));
    }
}
