//! Command-line interface. `hopper` alone is `hopper serve`; every other
//! command is a client of a running server's HTTP API.

pub mod client;

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
    /// Client options (for every command but `serve`), accepted before or
    /// after the command.
    #[command(flatten)]
    pub client: client::ClientArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the server (the default).
    Serve(ServeArgs),
    /// Manage queues and their consumers (wrangler's `queues` commands).
    Queues {
        #[command(subcommand)]
        command: client::QueuesCommand,
    },
    /// Send one message to a queue.
    Send {
        queue: String,
        /// The body: JSON unless --content-type says otherwise.
        body: String,
        #[arg(long, default_value = "json", value_parser = ["json", "text", "bytes"])]
        content_type: String,
        #[arg(long)]
        delay_secs: Option<u64>,
    },
    /// Pull (lease) messages from a queue with an HTTP pull consumer.
    Pull {
        queue: String,
        #[arg(long)]
        batch_size: Option<u64>,
        #[arg(long)]
        visibility_timeout_ms: Option<u64>,
        /// Wait up to this long for messages (long polling).
        #[arg(long)]
        wait_ms: Option<u64>,
    },
    /// Acknowledge (or retry) pulled messages by lease id.
    Ack {
        queue: String,
        /// Lease ids to acknowledge.
        leases: Vec<String>,
        /// Lease ids to retry instead (repeat the flag).
        #[arg(long = "retry")]
        retries: Vec<String>,
        #[arg(long)]
        retry_delay_secs: Option<u64>,
    },
    /// Manage API tokens.
    Tokens {
        #[command(subcommand)]
        command: client::TokensCommand,
    },
    /// Manage functions (HTTP endpoints for push consumers).
    Functions {
        #[command(subcommand)]
        command: client::FunctionsCommand,
    },
}

/// Runs a client command; returns the process exit code.
pub fn run_client(command: Command, args: client::ClientArgs) -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("hopper: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let json = args.json;
    let result = runtime.block_on(async move {
        let c = client::Client::new(args)?;
        match command {
            Command::Serve(_) => Err(client::ClientError::Usage("serve is not a client command".into())),
            Command::Queues { command } => client::queues(&c, command).await,
            Command::Send {
                queue,
                body,
                content_type,
                delay_secs,
            } => client::send(&c, &queue, &body, &content_type, delay_secs).await,
            Command::Pull {
                queue,
                batch_size,
                visibility_timeout_ms,
                wait_ms,
            } => client::pull(&c, &queue, batch_size, visibility_timeout_ms, wait_ms).await,
            Command::Ack {
                queue,
                leases,
                retries,
                retry_delay_secs,
            } => client::ack(&c, &queue, leases, retries, retry_delay_secs).await,
            Command::Tokens { command } => client::tokens(&c, command).await,
            Command::Functions { command } => client::functions(&c, command).await,
        }
        .map(|output| (json, output))
    });
    match result {
        Ok((true, output)) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&output.json).unwrap_or_default()
            );
            std::process::ExitCode::SUCCESS
        }
        Ok((false, output)) => {
            println!("{}", output.text);
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hopper: {e}");
            std::process::ExitCode::FAILURE
        }
    }
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
    /// Message bytes a queue holds waiting for the disk before sends get
    /// 429 (code 10250) with Retry-After.
    #[arg(long, env = "HOPPER_QUEUE_MAX_PENDING_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub queue_max_pending_bytes: usize,
    /// Never-delivered messages a queue keeps indexed in memory (about 120
    /// bytes each); a deeper backlog waits on disk and is read in chunks.
    #[arg(long, env = "HOPPER_QUEUE_RESIDENT_MESSAGES", default_value_t = 100_000)]
    pub queue_resident_messages: usize,
    /// Milliseconds a client has to send its request headers (slowloris).
    #[arg(long, env = "HOPPER_HEADER_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_timeout_ms: u64,
    /// Connections each HTTP worker holds at most.
    #[arg(long, env = "HOPPER_MAX_CONNECTIONS", default_value_t = 10_000)]
    pub max_connections: usize,
    /// Request body bytes in flight, server-wide, before requests get 429.
    #[arg(long, env = "HOPPER_MAX_INFLIGHT_BODY_BYTES", default_value_t = 256 * 1024 * 1024)]
    pub max_inflight_body_bytes: usize,
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
            max_inflight_body_bytes: self.max_inflight_body_bytes,
            header_timeout_ms: self.header_timeout_ms.max(100),
            max_connections_per_worker: self.max_connections.max(16),
            queue_max_pending_bytes: self.queue_max_pending_bytes,
            queue_resident_messages: self.queue_resident_messages.max(1),
        }
    }
}
