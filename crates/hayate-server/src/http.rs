//! Starts the HTTP edge (`hayate-http`) when `[http] listen` is set, with probes over what
//! only the server knows: live connections, the store, the bridges.

use hayate_core::Broker;
use hayate_http::{seconds, BridgeFigures, ListenerConnections, Probe, Sources, StoreFigures};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::sync::watch;

/// Binds and serves the HTTP edge; `None` when it is off.
pub(crate) async fn start(
    config: &hayate_http::HttpConfig,
    broker: &Arc<Broker>,
    store: Option<&Arc<hayate_storage::FjallStore>>,
    bridges: &Arc<hayate_bridge::BridgeSet>,
    connections: Probe<Vec<ListenerConnections>>,
    leave_cluster: Option<Arc<dyn Fn() + Send + Sync>>,
    shutdown: watch::Receiver<bool>,
) -> io::Result<Option<SocketAddr>> {
    let Some(addr) = config.address().map_err(io::Error::other)? else {
        return Ok(None);
    };
    let access = config.access().map_err(io::Error::other)?;
    let mut sources = Sources::new(broker.clone());
    sources.connections = Some(connections);
    sources.leave_cluster = leave_cluster;
    sources.store = store.map(|store| {
        let store = store.clone();
        Arc::new(move || {
            let stats = store.stats();
            StoreFigures {
                healthy: stats.healthy,
                disk_bytes: store.disk_bytes(),
                queued_messages: stats.queued,
                fsyncs: stats.syncs,
                fsync_micros: stats.sync_micros,
                fsync_max_micros: stats.sync_max_micros,
                write_errors: stats.write_errors,
                fsync_latency: seconds(&stats.sync_latency),
                commit_latency: seconds(&stats.commit_latency),
            }
        }) as Probe<StoreFigures>
    });
    // The bridges running now: the set is read at every request, so bridges added, changed
    // or removed on SIGHUP are reflected.
    let bridges = bridges.clone();
    sources.bridges = Arc::new(move || {
        bridges
            .counters()
            .into_iter()
            .map(|(name, stats)| (name, figures(&stats)))
            .collect()
    });
    let server = hayate_http::serve(addr, access, sources, shutdown).await?;
    Ok(Some(server.local_addr))
}

/// One bridge's counters, for the HTTP edge.
fn figures(stats: &hayate_bridge::BridgeStats) -> BridgeFigures {
    let queue = stats.queue();
    BridgeFigures {
        connected: stats.connected.load(Relaxed),
        connects: stats.connects.load(Relaxed),
        messages_out: stats.messages_out.load(Relaxed),
        messages_in: stats.messages_in.load(Relaxed),
        dropped: stats.dropped.load(Relaxed),
        queue_dropped: stats.queue_dropped.load(Relaxed),
        queued_messages: queue.messages,
        queued_bytes: queue.bytes,
    }
}
