//! Support for the operations tests: external tools (Prometheus, promtool, Chromium) found or
//! skipped, a blocking HTTP client for the admin API, and a `hayate serve` child process.

use serde_json::Value;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The path of an installed tool, from `PATH` or the usual system directories. When it is
/// missing the test is skipped with a note, unless `HAYATE_REQUIRE_TOOLS` is set (as
/// `scripts/test` does after installing them): then a missing tool fails the test.
pub fn tool_or_skip(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/usr/local/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("HAYATE_REQUIRE_TOOLS").is_none(),
            "{name} is not installed and HAYATE_REQUIRE_TOOLS is set (scripts/test installs it)"
        );
        println!("note: {name} is not installed; skipping this test");
    }
    found
}

/// A blocking HTTP client for one Hayate HTTP edge. Every call returns the status and the
/// body; 4xx and 5xx are answers, not errors.
pub struct HttpApi {
    agent: ureq::Agent,
    base: String,
    /// The `Authorization` header sent, if any.
    authorization: Option<String>,
}

impl HttpApi {
    /// A client of `addr` sending `token` as the bearer token (if any).
    pub fn new(addr: SocketAddr, token: Option<&str>) -> HttpApi {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        HttpApi {
            agent,
            base: format!("http://{addr}"),
            authorization: token.map(|token| format!("Bearer {token}")),
        }
    }

    /// The base URL (`http://ADDR`).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The same server with another token (or none).
    pub fn with_token(&self, token: Option<&str>) -> HttpApi {
        HttpApi {
            agent: self.agent.clone(),
            base: self.base.clone(),
            authorization: token.map(|token| format!("Bearer {token}")),
        }
    }

    /// The same server with HTTP Basic credentials instead.
    pub fn with_basic(&self, user: &str, password: &str) -> HttpApi {
        HttpApi {
            agent: self.agent.clone(),
            base: self.base.clone(),
            authorization: Some(format!(
                "Basic {}",
                base64(format!("{user}:{password}").as_bytes())
            )),
        }
    }

    fn auth<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.authorization {
            Some(value) => request.header("Authorization", value),
            None => request,
        }
    }

    fn finish(response: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> (u16, String) {
        let mut response = response.expect("HTTP request");
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .read_to_string()
            .expect("HTTP body is text");
        (status, body)
    }

    /// `GET path` (path and query, starting with `/`).
    pub fn get(&self, path: &str) -> (u16, String) {
        Self::finish(
            self.auth(self.agent.get(format!("{}{path}", self.base)))
                .call(),
        )
    }

    /// `GET path`, or `None` when the request fails below HTTP (connection refused...).
    pub fn try_get(&self, path: &str) -> Option<(u16, String)> {
        let mut response = self
            .auth(self.agent.get(format!("{}{path}", self.base)))
            .call()
            .ok()?;
        let body = response.body_mut().read_to_string().ok()?;
        Some((response.status().as_u16(), body))
    }

    /// `GET path`, the body parsed as JSON.
    pub fn get_json(&self, path: &str) -> (u16, Value) {
        json(self.get(path))
    }

    /// `DELETE path`, the body parsed as JSON.
    pub fn delete(&self, path: &str) -> (u16, Value) {
        json(Self::finish(
            self.auth(self.agent.delete(format!("{}{path}", self.base)))
                .call(),
        ))
    }

    /// `POST path` with a JSON body, the answer parsed as JSON.
    pub fn post_json(&self, path: &str, body: &Value) -> (u16, Value) {
        json(Self::finish(
            self.auth(self.agent.post(format!("{}{path}", self.base)))
                .send_json(body),
        ))
    }

    /// `POST path` with a raw body of `content_type`.
    pub fn post_raw(&self, path: &str, content_type: &str, body: &str) -> (u16, String) {
        Self::finish(
            self.auth(self.agent.post(format!("{}{path}", self.base)))
                .header("Content-Type", content_type)
                .send(body),
        )
    }
}

/// Standard base64 with padding (RFC 4648), for a Basic `Authorization` header.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn json((status, body): (u16, String)) -> (u16, Value) {
    let value = serde_json::from_str(&body)
        .unwrap_or_else(|e| panic!("HTTP {status} body is not JSON ({e}): {body}"));
    (status, value)
}

/// A `hayate serve` child process, killed when dropped.
pub struct HayateProcess {
    child: Child,
    /// Its MQTT listener.
    pub mqtt: SocketAddr,
    /// Its HTTP edge.
    pub http: SocketAddr,
}

impl HayateProcess {
    /// Starts `binary serve --listen 127.0.0.1:PORT --http 127.0.0.1:PORT` on free ports with
    /// `extra` arguments and `HAYATE_HTTP_TOKEN=token`, and waits until both ports accept.
    pub fn start(binary: &Path, token: &str, extra: &[&str]) -> HayateProcess {
        HayateProcess::start_with_env(binary, token, extra, &[])
    }

    /// [`HayateProcess::start`] with more environment variables.
    pub fn start_with_env(
        binary: &Path,
        token: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> HayateProcess {
        let mqtt = SocketAddr::from(([127, 0, 0, 1], crate::free_port()));
        let http = SocketAddr::from(([127, 0, 0, 1], crate::free_port()));
        let child = Command::new(binary)
            .args([
                "serve",
                "--listen",
                &mqtt.to_string(),
                "--http",
                &http.to_string(),
            ])
            .args(extra)
            .env("HAYATE_HTTP_TOKEN", token)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("hayate serve starts");
        let mut process = HayateProcess { child, mqtt, http };
        process.wait_for_port(mqtt);
        process.wait_for_port(http);
        process
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn wait_for_port(&mut self, addr: SocketAddr) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(addr).is_err() {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("hayate serve exited with {status}");
            }
            assert!(Instant::now() < deadline, "{addr} never accepted");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for HayateProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `hayate serve` started with `--config FILE --log-file LOG` (and [`HayateProcess`]'s
/// `--listen` and `--http`), whose file a test rewrites and reloads with SIGHUP.
pub struct ReloadableHayate {
    /// The process.
    pub process: HayateProcess,
    /// The configuration file.
    pub config: PathBuf,
    /// The log file.
    pub log: PathBuf,
    dir: tempfile::TempDir,
}

impl ReloadableHayate {
    /// Writes `text` to `file_name` (`hayate.toml` or `mosquitto.conf`) in a new temporary
    /// directory and starts `binary` on it.
    pub fn start(binary: &Path, token: &str, file_name: &str, text: &str) -> ReloadableHayate {
        let dir = tempfile::tempdir().expect("temporary directory");
        let config = dir.path().join(file_name);
        let log = dir.path().join("hayate.log");
        std::fs::write(&config, text).expect("configuration written");
        let process = HayateProcess::start(
            binary,
            token,
            &[
                "--config",
                config.to_str().expect("UTF-8 path"),
                "--log-file",
                log.to_str().expect("UTF-8 path"),
            ],
        );
        ReloadableHayate {
            process,
            config,
            log,
            dir,
        }
    }

    /// The temporary directory holding the file and the log (for other files the
    /// configuration names).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGHUP.
    pub fn signal_reload(&self) {
        let status = Command::new("kill")
            .args(["-HUP", &self.process.pid().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -HUP failed");
    }

    /// Writes the file anew, sends SIGHUP and waits (5 s at most) for the reload to be done:
    /// the `nth` `bridges_reloaded` line since start, the reload's last step. Returns the log.
    pub fn reload(&self, text: &str, nth: usize) -> String {
        std::fs::write(&self.config, text).expect("configuration written");
        self.signal_reload();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let log = self.log_text();
            if log.matches("bridges_reloaded").count() >= nth {
                return log;
            }
            assert!(Instant::now() < deadline, "reload {nth} never done: {log}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_as_rfc_4648() {
        assert_eq!(super::base64(b""), "");
        assert_eq!(super::base64(b"f"), "Zg==");
        assert_eq!(super::base64(b"fo"), "Zm8=");
        assert_eq!(super::base64(b"foo"), "Zm9v");
        assert_eq!(super::base64(b"admin:pa:ss"), "YWRtaW46cGE6c3M=");
    }
}
