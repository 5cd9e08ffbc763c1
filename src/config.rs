//! Server configuration from flags and environment.

use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// `HOPPER_ROOT_TOKEN`: accepted as root for this run.
    pub root_token: Option<String>,
    /// HTTP worker threads; 0 means one per core.
    pub http_workers: usize,
    /// Threads hosting queue actors; 0 means one per core.
    pub queue_threads: usize,
    /// Ceiling for push consumers' automatic concurrency (batches in flight).
    pub push_max_concurrency: usize,
    /// Seconds to let in-flight requests finish on SIGTERM/SIGINT.
    pub shutdown_timeout_secs: u64,
}
