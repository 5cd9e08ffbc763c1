//! Command-line interface. `hopper` alone is `hopper serve`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::ServeConfig;

#[derive(Parser, Debug)]
#[command(
    name = "hopper",
    version,
    about = "A durable message-queue server that speaks the Cloudflare Queues API"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the server (the default).
    Serve(ServeArgs),
}

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address of the HTTP front.
    #[arg(long, env = "HOPPER_LISTEN", default_value = "127.0.0.1:8787")]
    pub listen: SocketAddr,
    /// Directory holding every store file.
    #[arg(long, env = "HOPPER_DATA_DIR", default_value = "./hopper-data")]
    pub data_dir: PathBuf,
    /// TOML file declaring queues, consumers, functions and tokens, applied
    /// at every start (the file is the desired state).
    #[arg(long, env = "HOPPER_CONFIG")]
    pub config: Option<PathBuf>,
    /// HTTP worker threads (0: one per core).
    #[arg(long, env = "HOPPER_HTTP_WORKERS", default_value_t = 0)]
    pub http_workers: usize,
    /// Threads hosting queue actors (0: one per core).
    #[arg(long, env = "HOPPER_QUEUE_THREADS", default_value_t = 0)]
    pub queue_threads: usize,
    /// Listen on a non-loopback address. Hopper speaks plain HTTP: put it
    /// behind TLS or a private network before allowing this.
    #[arg(long, env = "HOPPER_ALLOW_REMOTE")]
    pub allow_remote: bool,
    /// Serve /metrics without a token.
    #[arg(long, env = "HOPPER_METRICS_PUBLIC")]
    pub metrics_public: bool,
    /// Log format: text or json.
    #[arg(long, env = "HOPPER_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
    /// Ceiling for push consumers' automatic concurrency (batches in flight).
    #[arg(long, env = "HOPPER_PUSH_MAX_CONCURRENCY", default_value_t = 32)]
    pub push_max_concurrency: usize,
    /// Seconds to let in-flight requests finish on SIGTERM/SIGINT.
    #[arg(long, env = "HOPPER_SHUTDOWN_TIMEOUT", default_value_t = 25)]
    pub shutdown_timeout: u64,
}

impl ServeArgs {
    pub fn into_config(self) -> ServeConfig {
        ServeConfig {
            listen: self.listen,
            data_dir: self.data_dir,
            config_file: self.config,
            root_token: std::env::var("HOPPER_ROOT_TOKEN").ok().filter(|t| !t.is_empty()),
            http_workers: self.http_workers,
            queue_threads: self.queue_threads,
            shutdown_timeout_secs: self.shutdown_timeout,
            push_max_concurrency: self.push_max_concurrency.max(1),
            allow_remote: self.allow_remote,
            metrics_public: self.metrics_public,
        }
    }
}
