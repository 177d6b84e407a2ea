//! A real Prometheus server scraping test targets, `promtool check metrics`, and the check that
//! every query of a Grafana dashboard answers: shared by the operations tests of `hayate serve`
//! and of `hayate bench --metrics-listen`.

use crate::ops::HttpApi;
use serde_json::Value;
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `promtool check metrics` on `text` and fails the test unless it accepts it without a
/// remark.
pub fn promtool_check_metrics(promtool: &Path, text: &str) {
    let mut check = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    check
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("promtool reads");
    let output = check.wait_with_output().expect("promtool ends");
    assert!(
        output.status.success() && output.stdout.is_empty() && output.stderr.is_empty(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// One scrape job of the test server.
#[derive(Debug, Clone, Copy)]
pub struct ScrapeJob<'a> {
    /// The job name (the `job` label).
    pub name: &'a str,
    /// What it scrapes (`/metrics` there).
    pub target: SocketAddr,
    /// A bearer token to send, if any.
    pub token: Option<&'a str>,
}

/// A Prometheus server scraping its jobs every second, with its data in a temporary
/// directory; killed when dropped.
pub struct Prometheus {
    child: Child,
    _dir: tempfile::TempDir,
    /// Its HTTP API.
    pub api: HttpApi,
}

impl Prometheus {
    /// Starts `binary` (Debian's `prometheus`) on a free port, scraping `jobs` every second.
    pub fn start(binary: &Path, jobs: &[ScrapeJob]) -> Prometheus {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = String::from(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n",
        );
        for job in jobs {
            config.push_str(&format!("  - job_name: {}\n", job.name));
            if let Some(token) = job.token {
                let path = dir.path().join(format!("{}.token", job.name));
                std::fs::write(&path, token).expect("token file");
                config.push_str(&format!(
                    "    authorization:\n      credentials_file: {}\n",
                    path.display()
                ));
            }
            config.push_str(&format!(
                "    static_configs:\n      - targets: ['{}']\n",
                job.target
            ));
        }
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).expect("prometheus.yml");
        let web = SocketAddr::from(([127, 0, 0, 1], crate::free_port()));
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts");
        Prometheus {
            child,
            _dir: dir,
            api: HttpApi::new(web, None),
        }
    }

    /// The answer to an instant query, or `None` while Prometheus does not answer (it refuses
    /// connections until it listens).
    pub fn try_query(&self, q: &str) -> Option<Value> {
        let (status, body) = self
            .api
            .try_get(&format!("/api/v1/query?query={}", encode(q)))?;
        if status != 200 {
            return None;
        }
        serde_json::from_str(&body).ok()
    }

    /// The value of the first series an instant query returns, if any.
    pub fn query(&self, q: &str) -> Option<f64> {
        let body = self.try_query(q)?;
        body["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }

    /// Waits (up to a minute) until `job` is up and `ready` holds.
    pub fn wait_until(&self, job: &str, ready: impl Fn(&Prometheus) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let up = self.query(&format!("up{{job=\"{job}\"}}"));
            if up == Some(1.0) && ready(self) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "Prometheus did not scrape {job}: up={up:?}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Runs every query of the Grafana dashboard at `path` (`$__rate_interval` as 1m, every
    /// variable as `.*`): each must be valid PromQL, and each for which `optional` is false
    /// must return series within 20 s. Returns the number of queries.
    pub fn check_dashboard(&self, path: &Path, optional: impl Fn(&str) -> bool) -> usize {
        let text = std::fs::read_to_string(path).expect("dashboard file");
        let dashboard: Value = serde_json::from_str(&text).expect("dashboard JSON");
        let variables: Vec<String> = dashboard["templating"]["list"]
            .as_array()
            .map(|list| {
                list.iter()
                    .filter_map(|v| v["name"].as_str().map(|n| format!("${n}")))
                    .collect()
            })
            .unwrap_or_default();
        let mut checked = 0;
        for panel in dashboard["panels"].as_array().expect("panels") {
            let Some(targets) = panel["targets"].as_array() else {
                continue;
            };
            for target in targets {
                let expr = target["expr"].as_str().expect("a PromQL expr");
                let mut q = expr.replace("$__rate_interval", "1m");
                for variable in &variables {
                    q = q.replace(variable.as_str(), ".*");
                }
                let deadline = Instant::now() + Duration::from_secs(20);
                loop {
                    let (status, body) =
                        self.api.get(&format!("/api/v1/query?query={}", encode(&q)));
                    assert_eq!(status, 200, "{q}: {body}");
                    let body: Value = serde_json::from_str(&body).expect("JSON");
                    assert_eq!(body["status"], "success", "{q}: {body}");
                    let empty = body["data"]["result"].as_array().is_none_or(Vec::is_empty);
                    if optional(&q) || !empty {
                        break;
                    }
                    assert!(Instant::now() < deadline, "no series for {q}");
                    std::thread::sleep(Duration::from_millis(500));
                }
                checked += 1;
            }
        }
        checked
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encodes a query for a URL.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
