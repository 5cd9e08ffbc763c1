//! Starting and stopping the server: actors first, then the HTTP front.

use std::io::Write;
use std::path::Path;

use actix::Arbiter;
use actix_web::{web, App, HttpServer};

use crate::api::auth::hash_token;
use crate::api::{routes, AppState};
use crate::broker::model::{iso_now, new_id, Scope, TokenRecord};
use crate::broker::registry::PutToken;
use crate::broker::{Registry, RegistryHandle};
use crate::config::ServeConfig;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot open the data directory {0}: {1}")]
    DataDir(String, std::io::Error),
    #[error("cannot open the catalog: {0}")]
    Catalog(#[from] crate::store::StoreError),
    #[error("cannot create the root token: {0}")]
    RootToken(String),
    #[error("cannot listen on {0}: {1}")]
    Bind(String, std::io::Error),
    #[error("refusing to listen on {0}: it is not a loopback address and Hopper speaks plain HTTP; put it behind TLS or a private network and pass --allow-remote (HOPPER_ALLOW_REMOTE=1)")]
    RemoteNotAllowed(String),
    #[error(transparent)]
    Config(#[from] crate::config::file::ConfigError),
    #[error("applying the config file failed: {0}")]
    Provision(crate::broker::BrokerError),
    #[error("server failed: {0}")]
    Io(#[from] std::io::Error),
}

fn threads(configured: usize) -> usize {
    if configured > 0 {
        configured
    } else {
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2)
    }
}

/// Generates the root token on first start: only its hash is stored, the
/// value goes to `<data-dir>/root-token` (mode 0600).
async fn ensure_root_token(registry: &RegistryHandle, config: &ServeConfig) -> Result<(), ServerError> {
    if registry.has_root_token() || config.root_token.is_some() {
        return Ok(());
    }
    let mut raw = [0u8; 32];
    getrandom::getrandom(&mut raw).map_err(|e| ServerError::RootToken(e.to_string()))?;
    let token = format!("hopper_{}", hex::encode(raw));
    let path = config.data_dir.join("root-token");
    write_secret_file(&path, &token)
        .map_err(|e| ServerError::RootToken(format!("{}: {e}", path.display())))?;
    let record = TokenRecord {
        id: new_id(),
        name: "root".into(),
        hash: hash_token(&token),
        scopes: vec![Scope::QueuesRead, Scope::QueuesWrite],
        accounts: None,
        created_on: iso_now(),
        root: true,
        last_used_on: None,
        from_config: false,
    };
    registry
        .addr
        .send(PutToken(record))
        .await
        .map_err(|e| ServerError::RootToken(e.to_string()))?
        .map_err(|e| ServerError::RootToken(e.to_string()))?;
    tracing::info!(path = %path.display(), "generated the root token; read it from this file");
    Ok(())
}

fn write_secret_file(path: &Path, content: &str) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(content.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()
}

async fn wait_for_stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Runs until SIGTERM/SIGINT, then drains requests and commits.
pub async fn run(config: ServeConfig) -> Result<(), ServerError> {
    if !config.listen.ip().is_loopback() && !config.allow_remote {
        return Err(ServerError::RemoteNotAllowed(config.listen.to_string()));
    }
    // Read the config file first: a bad file must stop the start before
    // anything is opened.
    let declared = match &config.config_file {
        Some(path) => Some(crate::config::file::load(path, |k| std::env::var(k).ok())?),
        None => None,
    };
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|e| ServerError::DataDir(config.data_dir.display().to_string(), e))?;
    let queue_arbiters: Vec<_> = (0..threads(config.queue_threads))
        .map(|_| Arbiter::new().handle())
        .collect();
    let limits = crate::broker::queue::QueueLimits {
        push_ceiling: config.push_max_concurrency,
        max_pending_bytes: config.queue_max_pending_bytes,
        resident_messages: config.queue_resident_messages,
    };
    let registry = Registry::start(config.data_dir.clone(), queue_arbiters.clone(), limits)?;
    // Let the registry start (and arm its timers) inside the runtime, even
    // if what follows fails at once.
    let _ = registry.addr.send(crate::broker::registry::Started).await;
    let result = serve(&config, declared.as_ref(), &registry).await;
    if result.is_ok() {
        registry.drain_all().await;
        for arbiter in queue_arbiters {
            arbiter.stop();
        }
        tracing::info!("shutdown complete");
    }
    // On a failed start nothing was served and every write is committed:
    // the process exits with the error and takes the queue threads along.
    result
}

/// Everything after the actors are up: root token, config file, HTTP.
async fn serve(
    config: &ServeConfig,
    declared: Option<&crate::config::file::LoadedConfig>,
    registry: &RegistryHandle,
) -> Result<(), ServerError> {
    ensure_root_token(registry, config).await?;
    if let (Some(declared), Some(path)) = (declared, &config.config_file) {
        let applied = crate::provision::apply(registry, declared)
            .await
            .map_err(ServerError::Provision)?;
        tracing::info!(
            path = %path.display(),
            created = applied.created,
            updated = applied.updated,
            unchanged = applied.unchanged,
            "config file applied"
        );
    }
    let metrics = match crate::api::metrics::install() {
        Ok(handle) => Some(handle),
        Err(e) => {
            tracing::warn!(error = %e, "metrics recorder not installed; /metrics will be empty");
            None
        }
    };
    let state = web::Data::new(AppState {
        registry: registry.clone(),
        env_root_hash: config.root_token.as_deref().map(hash_token),
        metrics,
        metrics_public: config.metrics_public,
        body_budget: crate::api::limits::BodyBudget::new(config.max_inflight_body_bytes),
    });
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .wrap(actix_web::middleware::from_fn(crate::api::limits::body_budget))
            .wrap(actix_web::middleware::from_fn(crate::api::logging::request_span))
            .configure(routes)
    })
    .workers(threads(config.http_workers))
    .shutdown_timeout(config.shutdown_timeout_secs)
    // Limits against slow or greedy clients (documented in RELIABILITY.md):
    // headers must arrive within the header timeout (slowloris), each worker
    // holds a bounded number of connections, idle keep-alives are closed.
    .client_request_timeout(std::time::Duration::from_millis(config.header_timeout_ms))
    .client_disconnect_timeout(std::time::Duration::from_secs(2))
    .keep_alive(std::time::Duration::from_secs(75))
    // Replies go out in more than one write (headers, then a large body);
    // with Nagle on, a later write can wait for the client's delayed ACK.
    .tcp_nodelay(true)
    .max_connections(config.max_connections_per_worker)
    // Hopper handles SIGTERM/SIGINT itself: long polls are answered first,
    // so a drain does not wait out their timeouts.
    .disable_signals()
    .bind(config.listen)
    .map_err(|e| ServerError::Bind(config.listen.to_string(), e))?
    .run();
    tracing::info!(listen = %config.listen, data_dir = %config.data_dir.display(), "hopper is serving; API base URL http://{}/client/v4", config.listen);
    let handle = server.handle();
    let on_signal = registry.clone();
    actix_web::rt::spawn(async move {
        wait_for_stop_signal().await;
        tracing::info!("stop signal received: answering long polls, draining requests");
        on_signal.release_long_polls().await;
        handle.stop(true).await;
    });
    server.await?;
    tracing::info!("HTTP front stopped; finishing commits");
    Ok(())
}
