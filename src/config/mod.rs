//! Server configuration from flags and environment, and the config file.

pub mod file;

use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub config_file: Option<PathBuf>,
    /// `HOPPER_ROOT_TOKEN`: accepted as root for this run.
    pub root_token: Option<String>,
    /// HTTP worker threads; 0 means one per core.
    pub http_workers: usize,
    /// Threads hosting queue actors; 0 means one per core.
    pub queue_threads: usize,
    /// Ceiling for push consumers' automatic concurrency (batches in flight).
    pub push_max_concurrency: usize,
    /// Uncommitted message bytes per queue before sends get 429.
    pub queue_max_pending_bytes: usize,
    /// Never-delivered messages per queue indexed in memory; the rest of a
    /// backlog stays on disk until consumers get near it.
    pub queue_resident_messages: usize,
    /// Time a client has to send its request headers.
    pub header_timeout_ms: u64,
    /// Open connections one HTTP worker accepts before it stops accepting.
    pub max_connections_per_worker: usize,
    /// Request body bytes in flight, server-wide, before requests get 429.
    pub max_inflight_body_bytes: usize,
    /// Serve /metrics without a token.
    pub metrics_public: bool,
    /// Allow a non-loopback listen address.
    pub allow_remote: bool,
    /// Seconds to let in-flight requests finish on SIGTERM/SIGINT.
    pub shutdown_timeout_secs: u64,
}
