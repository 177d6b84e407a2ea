//! Helpers of the end-to-end tests: command parsing, a Mosquitto on a free port, and a small
//! JSON Schema checker.
#![allow(dead_code)]

use clap::Parser;
use hayate_bench::{BenchArgs, BenchCommand, BenchResult, Env, Outcome};
use hayate_testkit::free_port;
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

/// Parses a command line (without the program name) the way `hayate bench` does.
pub fn cmd(line: &str) -> BenchCommand {
    let words = std::iter::once("hayate-bench").chain(line.split_whitespace());
    match Cli::try_parse_from(words) {
        Ok(cli) => cli.args.command,
        Err(e) => panic!("bad test command {line:?}: {e}"),
    }
}

/// The test environment: quiet, workers from this crate's binary.
pub fn env() -> Env {
    Env {
        worker_command: vec![env!("CARGO_BIN_EXE_hayate-bench").into()],
        command_line: vec!["test".into()],
        target_name: None,
        print: false,
    }
}

/// Runs a scenario command line and returns its result.
pub async fn run(line: &str) -> BenchResult {
    match hayate_bench::run_command(&cmd(line), &env()).await {
        Ok(Outcome::Run(r)) => *r,
        Ok(Outcome::Compare(_) | Outcome::Plan(_)) => panic!("expected a run"),
        Err(e) => panic!("{line}: {e}"),
    }
}

/// Runs and expects an error; returns its message.
pub async fn run_err(line: &str) -> hayate_bench::BenchError {
    match hayate_bench::run_command(&cmd(line), &env()).await {
        Ok(_) => panic!("{line}: expected an error"),
        Err(e) => e,
    }
}

/// Asserts the delivery checks of a QoS ≥ 1 run.
pub fn assert_delivered(r: &BenchResult, what: &str) {
    let m = r.messages.as_ref().expect("messages");
    assert!(m.sent > 0, "{what}: nothing sent");
    assert_eq!(m.lost, 0, "{what}: lost {m:?}");
    assert_eq!(m.duplicates, 0, "{what}: duplicates {m:?}");
    assert!(m.received_counted >= m.expected, "{what}: {m:?}");
    assert_eq!(m.success_percent, 100.0, "{what}");
    assert!(
        r.latency.as_ref().is_some_and(|l| l.count > 0),
        "{what}: no latency"
    );
}

/// A Mosquitto broker on a free loopback port, killed on drop.
pub struct Mosquitto {
    child: Child,
    /// Its port.
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Mosquitto {
    /// The pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Path of the Mosquitto broker binary.
pub const MOSQUITTO: &str = "/usr/sbin/mosquitto";

/// Starts Mosquitto (Debian package `mosquitto`); fails the test when it is not installed.
pub fn start_mosquitto() -> Mosquitto {
    start_mosquitto_with(|port, _dir| format!("listener {port} 127.0.0.1\nallow_anonymous true\n"))
}

/// Starts Mosquitto with the listener configuration `listener(port, dir)` returns (files it
/// names can be written into `dir`, a temp directory readable by the broker).
pub fn start_mosquitto_with(listener: impl FnOnce(u16, &Path) -> String) -> Mosquitto {
    assert!(
        Path::new(MOSQUITTO).exists(),
        "{MOSQUITTO} not found: these tests need the Mosquitto broker; install it with `apt-get install mosquitto`"
    );
    let port = free_port();
    let dir = tempfile::tempdir().expect("temp dir");
    // Mosquitto started as root drops to its own user; let it read the files here.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755));
    }
    let conf = dir.path().join("mosquitto.conf");
    let text = format!(
        "log_dest none\npersistence false\n{}",
        listener(port, dir.path())
    );
    std::fs::write(&conf, text).expect("write config");
    let child = Command::new(MOSQUITTO)
        .arg("-c")
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start mosquitto");
    let mut m = Mosquitto {
        child,
        port,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = m.child.try_wait() {
            panic!("mosquitto exited ({status}) instead of listening on {port}");
        }
        assert!(
            Instant::now() < deadline,
            "mosquitto did not start listening on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    m.port = port;
    m
}

/// A throwaway CA, a server certificate for `localhost` and 127.0.0.1 signed by it, and a
/// client certificate, written as PEM files into `dir`.
pub struct TestPki {
    /// CA certificate.
    pub ca: std::path::PathBuf,
    /// Server certificate.
    pub server_cert: std::path::PathBuf,
    /// Server key.
    pub server_key: std::path::PathBuf,
    /// Client certificate.
    pub client_cert: std::path::PathBuf,
    /// Client key.
    pub client_key: std::path::PathBuf,
}

/// Generates a [`TestPki`] in `dir` (readable by everyone: the broker may run as another user).
pub fn make_pki(dir: &Path) -> TestPki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // A name of its own per CA (another test CA must be an unknown issuer, not a bad
    // signature by the same name).
    let ca_name = format!(
        "hayate-bench test CA {}",
        dir.file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned())
    );
    ca_params
        .distinguished_name
        .push(DnType::CommonName, ca_name);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf = |names: Vec<String>, cn: &str| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        let cert = params.signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = leaf(vec!["localhost".into(), "127.0.0.1".into()], "localhost");
    let (client_cert, client_key) = leaf(vec!["bench-client".into()], "bench-client");
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644));
        }
        path
    };
    TestPki {
        ca: write("ca.pem", &ca_cert.pem()),
        server_cert: write("server.pem", &server_cert),
        server_key: write("server.key", &server_key),
        client_cert: write("client.pem", &client_cert),
        client_key: write("client.key", &client_key),
    }
}

/// The schema document.
pub fn schema() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/bench-schema.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("docs/bench-schema.json"))
        .expect("schema is JSON")
}

/// Checks `value` against `schema` (the subset the bench schema uses: $ref, oneOf, anyOf,
/// type, const, properties, required, additionalProperties, items, minimum). Returns the
/// problems found, each with its JSON path.
pub fn validate(root: &Value, schema: &Value, value: &Value, path: &str, errors: &mut Vec<String>) {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let target = r
            .strip_prefix("#/")
            .map(|p| p.split('/').fold(root, |v, k| &v[k]))
            .unwrap_or(&Value::Null);
        assert!(!target.is_null(), "unresolved $ref {r}");
        validate(root, target, value, path, errors);
    }
    for (key, exactly_one) in [("oneOf", true), ("anyOf", false)] {
        if let Some(options) = schema.get(key).and_then(Value::as_array) {
            let ok = options
                .iter()
                .filter(|o| {
                    let mut e = Vec::new();
                    validate(root, o, value, path, &mut e);
                    e.is_empty()
                })
                .count();
            if (exactly_one && ok != 1) || ok == 0 {
                errors.push(format!("{path}: matches {ok} of the {key} options"));
            }
        }
    }
    if let Some(t) = schema.get("type") {
        let types: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let is = |t: &str| match t {
            "null" => value.is_null(),
            "boolean" => value.is_boolean(),
            "string" => value.is_string(),
            "integer" => value.is_u64() || value.is_i64(),
            "number" => value.is_number(),
            "array" => value.is_array(),
            "object" => value.is_object(),
            _ => false,
        };
        if !types.iter().any(|t| is(t)) {
            errors.push(format!("{path}: expected {types:?}, got {value}"));
            return;
        }
    }
    if let Some(c) = schema.get("const") {
        if c != value {
            errors.push(format!("{path}: expected {c}, got {value}"));
        }
    }
    if let (Some(min), Some(v)) = (
        schema.get("minimum").and_then(Value::as_f64),
        value.as_f64(),
    ) {
        if v < min {
            errors.push(format!("{path}: {v} below minimum {min}"));
        }
    }
    if let Some(obj) = value.as_object() {
        if let Some(required) = schema.get("required").and_then(Value::as_array) {
            for r in required.iter().filter_map(Value::as_str) {
                if !obj.contains_key(r) {
                    errors.push(format!("{path}: missing required field {r:?}"));
                }
            }
        }
        let props = schema.get("properties").and_then(Value::as_object);
        for (k, v) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(s) => validate(root, s, v, &format!("{path}.{k}"), errors),
                None => match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) => {
                        errors.push(format!("{path}: field {k:?} not in the schema"))
                    }
                    Some(s @ Value::Object(_)) => {
                        validate(root, s, v, &format!("{path}.{k}"), errors)
                    }
                    _ => {}
                },
            }
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), value.as_array()) {
        for (i, v) in arr.iter().enumerate() {
            validate(root, items, v, &format!("{path}[{i}]"), errors);
        }
    }
}

/// Asserts `value` is valid against docs/bench-schema.json.
pub fn assert_valid(value: &Value) {
    let schema = schema();
    let mut errors = Vec::new();
    validate(&schema, &schema, value, "$", &mut errors);
    assert!(
        errors.is_empty(),
        "schema violations:\n{}",
        errors.join("\n")
    );
}
