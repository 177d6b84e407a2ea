//! Server shutdown: every connected client is told (v5 DISCONNECT 0x8B "server shutting down")
//! and closed, and `shutdown` returns only once the connections are gone.

use hayate_codec::{Packet, ProtocolVersion};
use hayate_testkit::TestBroker;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_disconnects_every_client_with_server_shutting_down() {
    let broker = TestBroker::start().await;
    let mut v5_clients = Vec::new();
    for i in 0..3 {
        v5_clients.push(broker.client(ProtocolVersion::V5, &format!("v5-{i}")).await);
    }
    let mut v3 = broker.client(ProtocolVersion::V311, "v3").await;
    // A socket that never sends CONNECT is closed too.
    let mut silent = broker.raw(ProtocolVersion::V5).await;
    let TestBroker { handle, .. } = broker;
    tokio::time::timeout(Duration::from_secs(5), handle.shutdown())
        .await
        .expect("shutdown finishes once the connections are closed");
    for client in &mut v5_clients {
        let packets = client.expect_closed().await;
        match packets.as_slice() {
            [Packet::Disconnect(disconnect)] => assert_eq!(disconnect.reason_code.0, 0x8B),
            other => panic!("expected DISCONNECT 0x8B, got {other:?}"),
        }
    }
    assert!(
        v3.expect_closed().await.is_empty(),
        "v3 has no DISCONNECT from the server"
    );
    assert!(silent.expect_closed().await.is_empty());
}
