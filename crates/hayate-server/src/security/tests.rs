use super::*;

#[test]
fn jwt_shape() {
    let token = b"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln";
    assert!(as_jwt(token).is_some());
    assert!(as_jwt(b"password").is_none());
    assert!(as_jwt(b"a.b.c").is_none());
    assert!(as_jwt(b"eyJ.x.y.z").is_none());
    assert!(as_jwt(b"eyJ a.b.c").is_none());
}

#[test]
fn auth_table_defaults_and_unknown_keys() {
    let config: AuthConfig = toml::from_str("").unwrap();
    assert!(config.allow_anonymous);
    assert!(config.password_cache);
    assert!(config.throttle.enabled);
    assert_eq!(config.throttle.base_delay_ms, 100);
    assert_eq!(config.v3_publish_denied, V3PublishDenied::Drop);
    let config: AuthConfig =
        toml::from_str("v3_publish_denied = \"disconnect\"\n[jwt]\nsecret = \"s\"\n").unwrap();
    assert_eq!(config.v3_publish_denied, V3PublishDenied::Disconnect);
    assert_eq!(config.jwt.as_ref().unwrap().username_claim, "sub");
    assert!(!format!("{config:?}").contains("\"s\""), "secret in Debug");
    assert!(toml::from_str::<AuthConfig>("pasword_file = \"x\"\n").is_err());
    assert!(toml::from_str::<AuthConfig>("[jwt]\nsecert = \"x\"\n").is_err());
}

#[test]
fn unreadable_file_fails_prepare_and_refuses_lazily() {
    let config = AuthConfig {
        password_file: Some("/nonexistent/hayate/passwd".into()),
        ..AuthConfig::default()
    };
    assert!(config.prepare().is_err());
    let mut client = ClientInfo::new("c".into(), Default::default());
    client.username = Some("u".into());
    assert_eq!(
        config.authenticate(&client, Some(b"p")).unwrap_err(),
        ReasonCode::SERVER_UNAVAILABLE
    );
    assert!(!config.authorize_publish(&client, "t"));
}

#[test]
fn example_configs_document_the_auth_defaults() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let config = crate::Config::load(&root.join("hayate.toml")).expect("hayate.toml loads");
    let (auth, defaults) = (&config.auth, AuthConfig::default());
    assert_eq!(auth.allow_anonymous, defaults.allow_anonymous);
    assert_eq!(auth.password_file, defaults.password_file);
    assert_eq!(auth.acl_file, defaults.acl_file);
    assert_eq!(auth.scram_file, defaults.scram_file);
    assert_eq!(
        auth.scram_sha512_from_password_file,
        defaults.scram_sha512_from_password_file
    );
    assert_eq!(auth.password_cache, defaults.password_cache);
    assert_eq!(auth.v3_publish_denied, defaults.v3_publish_denied);
    assert_eq!(auth.deny_subscribe, defaults.deny_subscribe);
    assert_eq!(
        auth.deny_subscribe_reason_code,
        defaults.deny_subscribe_reason_code
    );
    assert_eq!(auth.deny_publish, defaults.deny_publish);
    let (t, d) = (&auth.throttle, &defaults.throttle);
    assert_eq!(
        (
            t.enabled,
            t.base_delay_ms,
            t.max_delay_ms,
            t.decay_secs,
            t.capacity
        ),
        (
            d.enabled,
            d.base_delay_ms,
            d.max_delay_ms,
            d.decay_secs,
            d.capacity
        )
    );
    assert!(auth.jwt.is_none());
    // The commented-out [auth.jwt] example parses, with the documented defaults.
    let text = std::fs::read_to_string(root.join("hayate.toml")).unwrap();
    let jwt: String = text[text.find("# [auth.jwt]").unwrap()..]
        .lines()
        .map(|line| line.strip_prefix("# ").unwrap_or(""))
        .filter(|line| line.starts_with('[') || line.contains(" = "))
        .filter(|line| !line.starts_with("secret_file") && !line.starts_with("public_key"))
        .collect::<Vec<_>>()
        .join("\n");
    let parsed: toml::Value = toml::from_str(&jwt).expect("jwt example parses");
    let jwt: JwtSettings = parsed["auth"]["jwt"].clone().try_into().expect("jwt keys");
    let d = JwtSettings::default();
    assert_eq!(
        (
            &jwt.username_claim,
            &jwt.publish_claim,
            &jwt.subscribe_claim
        ),
        (&d.username_claim, &d.publish_claim, &d.subscribe_claim)
    );
    assert_eq!(
        (jwt.leeway_secs, jwt.require_exp),
        (d.leeway_secs, d.require_exp)
    );
    // The Paho interoperability settings keep working.
    let paho = crate::Config::load(&root.join("config/paho-interop.toml")).unwrap();
    assert_eq!(paho.auth.deny_subscribe_reason_code, 128);
    assert!(paho
        .auth
        .deny_subscribe
        .contains(&"test/nosubscribe".to_string()));
}

fn client(username: Option<&str>) -> ClientInfo {
    let mut client = ClientInfo::new("c".into(), Default::default());
    client.username = username.map(Into::into);
    client.peer = Some(([127, 0, 0, 1], 4000).into());
    client
}

#[test]
fn password_cache_skips_hashing_until_reload() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("passwd");
    let entry = |password: &[u8]| {
        let hash = PasswordHash::new_argon2id(password).unwrap();
        format!("alice:{hash}\n")
    };
    std::fs::write(&path, entry(b"one")).unwrap();
    let config = AuthConfig {
        password_file: Some(path.clone()),
        throttle: ThrottleSettings {
            enabled: false,
            ..ThrottleSettings::default()
        },
        ..AuthConfig::default()
    };
    let hook = config.prepare().unwrap();
    let alice = client(Some("alice"));
    for _ in 0..5 {
        assert!(hook.authenticate(&alice, Some(b"one")).is_ok());
    }
    assert_eq!(
        hook.password_hashes_computed(),
        1,
        "one hash, then the cache"
    );
    // A wrong password is never answered from the cache.
    assert_eq!(
        hook.authenticate(&alice, Some(b"two")).unwrap_err(),
        ReasonCode::BAD_USER_NAME_OR_PASSWORD
    );
    assert_eq!(hook.password_hashes_computed(), 2);
    // After a reload the old password is checked against the new file, not the cache.
    std::fs::write(&path, entry(b"two")).unwrap();
    hook.reload().unwrap();
    assert!(hook.authenticate(&alice, Some(b"one")).is_err());
    assert!(hook.authenticate(&alice, Some(b"two")).is_ok());
    assert!(hook.authenticate(&alice, Some(b"two")).is_ok());
    assert_eq!(hook.password_hashes_computed(), 4);
    // The cache can be turned off.
    let uncached = AuthConfig {
        password_cache: false,
        ..config.clone()
    };
    let uncached = SecurityHook::new(&uncached).unwrap();
    assert!(uncached.authenticate(&alice, Some(b"two")).is_ok());
    assert!(uncached.authenticate(&alice, Some(b"two")).is_ok());
    assert_eq!(uncached.password_hashes_computed(), 2);
}

#[test]
fn identity_as_username_and_listener_anonymous_override() {
    let hook = SecurityHook::new(&AuthConfig {
        allow_anonymous: false,
        ..AuthConfig::default()
    })
    .unwrap();
    let mut anonymous = client(None);
    assert_eq!(
        hook.authenticate(&anonymous, None).unwrap_err(),
        ReasonCode::NOT_AUTHORIZED
    );
    anonymous.listener = Arc::new(hayate_core::ListenerInfo {
        name: "open".into(),
        allow_anonymous: Some(true),
        identity_as_username: false,
        ..Default::default()
    });
    assert!(hook.authenticate(&anonymous, None).is_ok());
    let mut by_identity = client(Some("claimed"));
    by_identity.listener = Arc::new(hayate_core::ListenerInfo {
        name: "certs".into(),
        allow_anonymous: Some(false),
        identity_as_username: true,
        ..Default::default()
    });
    // No proved identity: refused, whatever the CONNECT says.
    assert_eq!(
        hook.authenticate(&by_identity, Some(b"x")).unwrap_err(),
        ReasonCode::NOT_AUTHORIZED
    );
    by_identity.set_transport_identity(Some("device-7".into()));
    let admitted = hook.authenticate(&by_identity, None).unwrap();
    assert_eq!(admitted.username.as_deref(), Some("device-7"));
    // No enhanced authentication where the transport identity is the user name.
    assert_eq!(
        hook.start_enhanced_auth(&by_identity, "SCRAM-SHA-256")
            .unwrap_err(),
        ReasonCode::BAD_AUTHENTICATION_METHOD
    );
}

#[test]
fn jwt_settings_are_checked() {
    let jwt = |text: &str| {
        let config: AuthConfig = toml::from_str(text).unwrap();
        SecurityHook::new(&config).map(|_| ())
    };
    assert!(jwt("[jwt]\nsecret = \"k\"\n").is_ok());
    assert!(jwt("[jwt]\n").is_err());
    assert!(jwt("[jwt]\nsecret = \"k\"\nalgorithms = [\"XX1\"]\n").is_err());
    assert!(jwt("[jwt]\nsecret = \"k\"\nalgorithms = [\"RS256\"]\n").is_err());
    assert!(jwt("[jwt]\npublic_key_file = \"/nonexistent\"\nalgorithms = [\"RS256\"]\n").is_err());
}
