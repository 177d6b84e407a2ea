//! systemd's readiness protocol (`Type=notify`, sd_notify(3)): a datagram such as `READY=1`
//! to the socket named by `NOTIFY_SOCKET`, when systemd started the process with one.

use std::io;
use std::os::unix::net::UnixDatagram;

/// Sends `state` (e.g. `"READY=1"`) to `$NOTIFY_SOCKET`; nothing when it is unset. A failure
/// is logged, not fatal: the broker runs the same either way.
pub fn notify(state: &str) {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Err(error) = send(&socket.to_string_lossy(), state) {
        tracing::warn!(%error, state, "sd_notify_failed");
    }
}

/// Sends `state` to the socket `path` (a file path, or `@name` in the abstract namespace).
pub fn send(path: &str, state: &str) -> io::Result<()> {
    let socket = UnixDatagram::unbound()?;
    match path.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            socket.send_to_addr(state.as_bytes(), &addr)?;
        }
        None => {
            socket.send_to(state.as_bytes(), path)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixDatagram;

    #[test]
    fn sends_to_a_path_and_an_abstract_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let receiver = UnixDatagram::bind(&path).unwrap();
        super::send(path.to_str().unwrap(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = receiver.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");

        use std::os::linux::net::SocketAddrExt;
        let name = format!("hayate-notify-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let receiver = UnixDatagram::bind_addr(&addr).unwrap();
        super::send(&format!("@{name}"), "STOPPING=1").unwrap();
        let n = receiver.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
    }
}
