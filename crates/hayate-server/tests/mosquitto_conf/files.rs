//! Whole files: general errors, includes, format detection, conversion, real-world files.

use crate::common::*;
use hayate_server::config::mosquitto::{self, MosquittoError, Translation};
use hayate_server::config::ConfigFormat;
use hayate_server::Config;
use std::path::Path;

// ---- general errors ----

#[test]
fn unknown_keys_and_malformed_lines_are_errors() {
    let message = err("port 1883\nmax_conections 10\n", 2, "max_conections");
    assert!(message.contains("unknown key"), "{message}");
    err("listener 1883 127.0.0.1\nport x\n", 2, "port");
    err("sys_interval\n", 1, "sys_interval");
    err("max_qos 1 2\n", 1, "max_qos");
}

#[test]
fn errors_in_included_files_name_that_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("10-limits.conf"), "max_qos 1\n").unwrap();
    std::fs::write(dir.path().join("20-bad.conf"), "# comment\nmax_qos 7\n").unwrap();
    let text = format!("include_dir {}\n", dir.path().display());
    let error = mosquitto::from_text(&text, "main.conf").unwrap_err();
    let MosquittoError::Line {
        file, line, key, ..
    } = error
    else {
        panic!("{error}");
    };
    assert!(file.ends_with("20-bad.conf"), "{file}");
    assert_eq!((line, key.as_str()), (2, "max_qos"));
}

// ---- format detection and conversion ----

#[test]
fn load_file_recognises_the_format_by_extension_or_syntax() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "a.conf",
            "listener 1883 127.0.0.1\n",
            ConfigFormat::Mosquitto,
        ),
        (
            "b.cfg",
            "# broker\nlistener 1883 127.0.0.1\n",
            ConfigFormat::Mosquitto,
        ),
        (
            "c.cfg",
            "[server]\nlisten = [\"127.0.0.1:1883\"]\n",
            ConfigFormat::Toml,
        ),
        (
            "d",
            "# auth\n[auth]\nallow_anonymous = true\n",
            ConfigFormat::Toml,
        ),
        ("e.toml", "", ConfigFormat::Toml),
        (
            "f.conf",
            "# nothing but comments\n",
            ConfigFormat::Mosquitto,
        ),
    ];
    for (name, text, format) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let loaded = Config::load_file(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(loaded.format, format, "{name}");
    }
    assert!(!mosquitto::looks_like_mosquitto("key = value"));
    assert!(!mosquitto::looks_like_mosquitto("key=value"));
    assert!(mosquitto::looks_like_mosquitto("# c\n  key value = x"));
    let path = dir.path().join("g.conf");
    std::fs::write(&path, "pid_file /run/x.pid\n").unwrap();
    let loaded = Config::load_file(&path).unwrap();
    assert!(loaded.warnings.unwrap().contains("pid_file (line 1:"));
}

/// `hayate config convert` writes TOML that loads back into the same configuration.
#[test]
fn converted_toml_reads_back_into_the_same_configuration() {
    for name in [
        "listeners-tls.conf",
        "bridge.conf",
        "limits-persistence-logging.conf",
        "per-listener.conf",
        "debian-example-mosquitto.conf",
        "debian-etc-mosquitto.conf.local",
    ] {
        let t = match name {
            // Debian's /etc file names /etc/mosquitto/conf.d, which a test machine may lack.
            "debian-etc-mosquitto.conf.local" => debian_etc_with_include_dir().0,
            _ => load(name),
        };
        let toml = mosquitto::to_toml(&t.config, "test");
        let back = Config::from_toml(&toml, name).unwrap_or_else(|e| panic!("{name}: {e}\n{toml}"));
        assert_eq!(mosquitto::to_toml(&back, "test"), toml, "{name}");
        assert_eq!(back.bridges, t.config.bridges, "{name}");
        assert_eq!(back.listeners.len(), t.config.listeners.len(), "{name}");
        for (a, b) in back.listeners.iter().zip(&t.config.listeners) {
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "{name}");
        }
        assert_eq!(
            format!("{:?}", back.broker),
            format!("{:?}", t.config.broker),
            "{name}"
        );
        assert_eq!(
            format!("{:?}", back.server),
            format!("{:?}", t.config.server),
            "{name}"
        );
        assert_eq!(
            format!("{:?}", back.storage),
            format!("{:?}", t.config.storage),
            "{name}"
        );
        assert_eq!(
            back.auth.allow_anonymous, t.config.auth.allow_anonymous,
            "{name}"
        );
        assert_eq!(
            back.auth.password_file, t.config.auth.password_file,
            "{name}"
        );
        assert_eq!(back.auth.acl_file, t.config.auth.acl_file, "{name}");
    }
}

#[test]
fn toml_strings_are_escaped() {
    let t = ok("listener 1883 127.0.0.1\npassword_file /etc/a \"quoted\" \\path\n");
    let toml = mosquitto::to_toml(&t.config, "x");
    let back = Config::from_toml(&toml, "x").unwrap();
    assert_eq!(
        back.auth.password_file.as_deref(),
        Some(Path::new("/etc/a \"quoted\" \\path"))
    );
}

// ---- real-world files ----

/// Debian's example mosquitto.conf (/usr/share/doc/mosquitto/examples): every setting is
/// commented out, so it is Mosquitto 2's local-only mode.
#[test]
fn debian_example_file_is_local_only_mode() {
    let t = load("debian-example-mosquitto.conf");
    assert_eq!(t.config.server.listen, [addr("127.0.0.1:1883")]);
    assert!(t.config.auth.allow_anonymous);
    assert!(t.config.bridges.is_empty());
    assert!(t.warnings.is_empty());
}

/// Debian's /etc/mosquitto/mosquitto.conf with its `include_dir` pointed at a directory of
/// ours: (translation, the temporary directory holding the copy).
fn debian_etc_with_include_dir() -> (Translation, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let conf_d = dir.path().join("conf.d");
    std::fs::create_dir(&conf_d).unwrap();
    std::fs::write(
        conf_d.join("README"),
        "Any files placed here ending in .conf are read.\n",
    )
    .unwrap();
    std::fs::write(
        conf_d.join("local.conf"),
        "listener 1883 127.0.0.1\nallow_anonymous true\n",
    )
    .unwrap();
    let original = std::fs::read_to_string(fixture("debian-etc-mosquitto.conf")).unwrap();
    assert!(original.contains("include_dir /etc/mosquitto/conf.d"));
    let text = original.replace("/etc/mosquitto/conf.d", &conf_d.display().to_string());
    let path = dir.path().join("mosquitto.conf");
    std::fs::write(&path, text).unwrap();
    (
        mosquitto::load(&path).unwrap_or_else(|e| panic!("{e}")),
        dir,
    )
}

#[test]
fn debian_etc_file_with_its_conf_d() {
    let (t, _dir) = debian_etc_with_include_dir();
    assert_eq!(
        t.config.storage.dir.as_deref(),
        Some(Path::new("/var/lib/mosquitto/"))
    );
    assert_eq!(t.config.listeners.len(), 1);
    assert!(t.config.auth.allow_anonymous);
    let line = t.warning_line().unwrap();
    assert!(line.contains("pid_file (line 6:"), "{line}");
    assert!(line.contains("log_dest (line 11:"), "{line}");
}

#[test]
fn debian_etc_file_as_shipped() {
    // As shipped it reads /etc/mosquitto/conf.d: fine where the package is installed, an
    // error naming include_dir where the directory does not exist.
    match mosquitto::load(&fixture("debian-etc-mosquitto.conf")) {
        Ok(t) => assert_eq!(
            t.config.storage.dir.as_deref(),
            Some(Path::new("/var/lib/mosquitto/"))
        ),
        Err(error) => {
            assert!(!Path::new("/etc/mosquitto/conf.d").is_dir(), "{error}");
            assert!(error.to_string().contains(":13: include_dir:"), "{error}");
        }
    }
}
