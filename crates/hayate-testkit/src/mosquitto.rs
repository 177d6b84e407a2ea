//! A Mosquitto broker started by a test on a free loopback port (`/usr/sbin/mosquitto`), killed
//! when dropped; it can be stopped and started again on the same port (with persistence, it
//! keeps its sessions across).

use crate::{free_port, RawClient};
use hayate_codec::ProtocolVersion;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Path of the Mosquitto broker binary.
pub const MOSQUITTO: &str = "/usr/sbin/mosquitto";

/// A Mosquitto broker, killed on drop; it can be stopped and started again on the same port.
pub struct Mosquitto {
    child: Option<Child>,
    /// The port of its plain, anonymous listener on 127.0.0.1.
    pub port: u16,
    conf: PathBuf,
    dir: tempfile::TempDir,
}

impl Mosquitto {
    /// Mosquitto with an anonymous listener; with `persistence`, it saves its sessions and
    /// queued messages when stopped and reloads them when started again.
    pub fn start(persistence: bool) -> Mosquitto {
        Mosquitto::start_with(persistence, "")
    }

    /// [`Mosquitto::start`] with more configuration lines (e.g. a bridge section) at the end.
    pub fn start_with(persistence: bool, extra: &str) -> Mosquitto {
        assert!(
            Path::new(MOSQUITTO).exists(),
            "{MOSQUITTO} not found: these tests need the Mosquitto broker (apt-get install mosquitto)"
        );
        let port = free_port();
        let dir = tempfile::tempdir().expect("temp dir");
        let mut text = format!(
            "log_dest none\nlistener {port} 127.0.0.1\nallow_anonymous true\nmax_queued_messages 10000\n"
        );
        {
            use std::os::unix::fs::PermissionsExt;
            // Mosquitto started as root drops to its own user: let it read and write here.
            let _ = std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777));
        }
        if persistence {
            text.push_str(&format!(
                "persistence true\npersistence_location {}/\n",
                dir.path().display()
            ));
        } else {
            text.push_str("persistence false\n");
        }
        text.push_str(extra);
        let conf = dir.path().join("mosquitto.conf");
        std::fs::write(&conf, text).expect("write config");
        let mut mosquitto = Mosquitto {
            child: None,
            port,
            conf,
            dir,
        };
        mosquitto.restart();
        mosquitto
    }

    /// Its temporary directory (configuration, persistence; readable by everyone).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Starts the broker again (after [`Mosquitto::stop`]) and waits for its listener.
    pub fn restart(&mut self) {
        let child = Command::new(MOSQUITTO)
            .arg("-c")
            .arg(&self.conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start mosquitto");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!("mosquitto exited ({status}) instead of listening");
            }
            assert!(
                Instant::now() < deadline,
                "mosquitto did not start listening"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the broker with SIGTERM (it saves its state when persistent) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let _ = child.wait();
        }
    }

    /// A client connected to this broker.
    pub async fn client(
        &self,
        version: ProtocolVersion,
        client_id: &str,
        clean: bool,
    ) -> RawClient {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        let mut client = RawClient::connect_tcp(addr, version).await;
        let mut connect = crate::connect_packet(version, client_id, clean);
        if !clean && version == ProtocolVersion::V5 {
            // A v5 session outlives the connection only with an expiry interval.
            connect.properties.session_expiry_interval = Some(3600);
        }
        let connack = client.connect(connect).await;
        assert_eq!(connack.reason_code.0, 0, "mosquitto refused {client_id}");
        client
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
