//! Security keys: anonymous access, password, ACL and PSK files, per-listener settings.

use crate::common::*;
use hayate_server::config::mosquitto;
use std::path::Path;

#[test]
fn global_security_settings() {
    let t = ok("allow_anonymous true\npassword_file /p\nacl_file /a\npsk_file /k\nlistener 1883 127.0.0.1\n");
    // psk_file without a psk_hint listener has no effect, in Mosquitto too: said.
    assert_eq!(t.warnings[0].key, "psk_file");
    assert!(t.config.auth.allow_anonymous);
    assert_eq!(
        t.config.auth.password_file.as_deref(),
        Some(Path::new("/p"))
    );
    assert_eq!(t.config.auth.acl_file.as_deref(), Some(Path::new("/a")));
    // Without per_listener_settings their place does not matter.
    let t = ok("listener 1883 127.0.0.1\nallow_anonymous true\nconnection b\naddress h\ntopic t\npassword_file /p\n");
    assert!(t.config.auth.allow_anonymous);
    assert_eq!(
        t.config.auth.password_file.as_deref(),
        Some(Path::new("/p"))
    );
    err("allow_anonymous yes\n", 1, "allow_anonymous");
    err("password_file\n", 1, "password_file");
    // A file given twice in one section is refused, as Mosquitto does.
    err(
        "password_file /p\nlistener 1883 127.0.0.1\npassword_file /q\n",
        3,
        "password_file",
    );
    err(
        "listener 8883 0.0.0.0\ncertfile /a\ncertfile /b\n",
        3,
        "certfile",
    );
    ok("listener 8883 0.0.0.0\ncertfile /a\nkeyfile /k\nlistener 8884 0.0.0.0\ncertfile /a\nkeyfile /k\n");
}

#[test]
fn per_listener_settings_with_shared_files_and_own_anonymous_access() {
    let t = load("per-listener.conf");
    let l = &t.config.listeners;
    assert_eq!(l[0].allow_anonymous, Some(true));
    assert_eq!(l[1].allow_anonymous, Some(false));
    assert!(!t.config.auth.allow_anonymous);
    assert_eq!(
        t.config.auth.password_file.as_deref(),
        Some(Path::new("/etc/mosquitto/passwd"))
    );
    assert_eq!(
        t.config.auth.acl_file.as_deref(),
        Some(Path::new("/etc/mosquitto/acl"))
    );
    // A listener without allow_anonymous gets Mosquitto 2's default, false.
    let t = ok("per_listener_settings true\nlistener 1883 127.0.0.1\n");
    assert_eq!(t.config.listeners[0].allow_anonymous, Some(false));
}

#[test]
fn per_listener_settings_with_differing_files_is_an_error_naming_the_line() {
    let error = mosquitto::load(&fixture("per-listener-differs.conf")).unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("per-listener-differs.conf:9: password_file:"),
        "{message}"
    );
    assert!(message.contains("differs between listeners"), "{message}");
    // One listener with an ACL, the other without: named at the second listener's line.
    let text = "per_listener_settings true\nlistener 1883 127.0.0.1\nacl_file /a\nlistener 1884 127.0.0.1\n";
    err(text, 4, "listener");
    // Security settings for a default listener that does not exist (as in Mosquitto 2,
    // acl_file and allow_anonymous do not create it; Mosquitto would drop them unsaid).
    let text = "per_listener_settings true\nacl_file /a\nlistener 1884 127.0.0.1\n";
    err(text, 2, "acl_file");
    // password_file does create it, on port 1883.
    let t = ok("per_listener_settings true\npassword_file /p\nallow_anonymous true\n");
    assert_eq!(t.config.listeners[0].bind, addr("0.0.0.0:1883"));
    assert_eq!(t.config.listeners[0].allow_anonymous, Some(true));
    assert_eq!(
        t.config.auth.password_file.as_deref(),
        Some(Path::new("/p"))
    );
}

#[test]
fn security_keys_hayate_cannot_honour() {
    err("auth_plugin /usr/lib/auth.so\n", 1, "auth_plugin");
    err(
        "plugin /usr/lib/mosquitto_dynamic_security.so\n",
        1,
        "plugin",
    );
    err(
        "plugin_opt_config_file /x.json\n",
        1,
        "plugin_opt_config_file",
    );
    err("auth_opt_backends mysql\n", 1, "auth_opt_backends");
    err("clientid_prefixes sensor-\n", 1, "clientid_prefixes");
    err(
        "use_username_as_clientid true\n",
        1,
        "use_username_as_clientid",
    );
    err(
        "allow_zero_length_clientid false\n",
        1,
        "allow_zero_length_clientid",
    );
    ok("allow_zero_length_clientid true\n");
}
