//! Brokers run as child processes (`hayate serve`, Mosquitto): killed when the test ends,
//! however it ends; and waiting for a listener to accept.

use std::net::SocketAddr;
use std::process::Child;
use std::time::{Duration, Instant};

/// A child process killed (and reaped) when dropped.
#[derive(Debug)]
pub struct KillOnDrop(pub Child);

impl KillOnDrop {
    /// The process id.
    pub fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until something accepts TCP connections on `addr` (panics after 20 s).
pub async fn wait_until_listening(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {addr}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
