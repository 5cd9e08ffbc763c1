//! The command-line client: every command is an HTTP call to a running
//! server, with wrangler's command and flag names where wrangler has the
//! same command.

use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};

#[derive(Args, Debug, Clone)]
pub struct ClientArgs {
    /// Server address (without /client/v4).
    #[arg(
        long,
        env = "HOPPER_URL",
        default_value = "http://127.0.0.1:8787",
        global = true
    )]
    pub url: String,
    /// API token (default: ./hopper-data/root-token when readable).
    #[arg(long, env = "HOPPER_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// Account id.
    #[arg(long, env = "HOPPER_ACCOUNT", default_value = "default", global = true)]
    pub account: String,
    /// Print the API's JSON result instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum QueuesCommand {
    /// Create a queue.
    Create {
        name: String,
        #[arg(long)]
        delivery_delay_secs: Option<u64>,
        #[arg(long)]
        message_retention_period_secs: Option<u64>,
    },
    /// List queues.
    List {
        #[arg(long, default_value_t = 1)]
        page: u64,
    },
    /// Show a queue, its consumer and its backlog.
    Info { name: String },
    /// Change a queue's settings.
    Update {
        name: String,
        #[arg(long)]
        delivery_delay_secs: Option<u64>,
        #[arg(long)]
        message_retention_period_secs: Option<u64>,
    },
    /// Delete a queue and every message in it.
    Delete { name: String },
    /// Stop delivering messages (sends are still accepted).
    PauseDelivery { name: String },
    /// Start delivering messages again.
    ResumeDelivery { name: String },
    /// Delete every message in a queue.
    Purge {
        name: String,
        /// Do not ask for confirmation.
        #[arg(long)]
        force: bool,
    },
    /// Manage a queue's consumer.
    Consumer {
        #[command(subcommand)]
        command: ConsumerCommand,
    },
}

#[derive(Subcommand, Debug)]
pub enum ConsumerCommand {
    /// HTTP pull consumers.
    Http {
        #[command(subcommand)]
        command: HttpConsumerCommand,
    },
    /// Add a push consumer that delivers to a function.
    Add {
        queue: String,
        script_name: String,
        #[arg(long)]
        batch_size: Option<u64>,
        /// Seconds to wait for a full batch.
        #[arg(long)]
        batch_timeout: Option<u64>,
        #[arg(long)]
        message_retries: Option<u64>,
        #[arg(long)]
        max_concurrency: Option<u64>,
        #[arg(long)]
        retry_delay_secs: Option<u64>,
        #[arg(long)]
        dead_letter_queue: Option<String>,
    },
    /// Remove a queue's push consumer.
    Remove { queue: String, script_name: String },
}

#[derive(Subcommand, Debug)]
pub enum HttpConsumerCommand {
    /// Add an HTTP pull consumer.
    Add {
        queue: String,
        #[arg(long)]
        batch_size: Option<u64>,
        #[arg(long)]
        message_retries: Option<u64>,
        #[arg(long)]
        visibility_timeout_secs: Option<u64>,
        #[arg(long)]
        retry_delay_secs: Option<u64>,
        #[arg(long)]
        dead_letter_queue: Option<String>,
    },
    /// Remove a queue's HTTP pull consumer.
    Remove { queue: String },
}

#[derive(Subcommand, Debug)]
pub enum TokensCommand {
    /// Create a token; its value is shown once.
    Create {
        name: String,
        /// queues_read and/or queues_write (repeat the flag).
        #[arg(long = "scope", required = true)]
        scopes: Vec<String>,
        /// Limit the token to accounts (repeat the flag); none: every account.
        #[arg(long = "for-account")]
        accounts: Vec<String>,
    },
    /// List tokens (never their values).
    List,
    /// Revoke a token.
    Revoke { id: String },
}

#[derive(Subcommand, Debug)]
pub enum FunctionsCommand {
    /// Register or replace a function (an HTTP endpoint for push consumers).
    Put {
        name: String,
        /// The function's HTTP endpoint (batches are POSTed here).
        endpoint: String,
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// Environment variable holding the signing secret.
        #[arg(long)]
        secret_env: Option<String>,
    },
    /// List functions.
    List,
    /// Delete a function.
    Delete { name: String },
}

/// Why a command failed; printed as one line and exit status 1.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "cannot reach the server at {url}: {reason} (is `hopper serve` running? set --url or HOPPER_URL)"
    )]
    Unreachable { url: String, reason: String },
    #[error("the server refused the token ({status}): {message} (set --token or HOPPER_TOKEN)")]
    Auth { status: u16, message: String },
    #[error("{message} [code {code}, HTTP {status}]")]
    Api { status: u16, code: i64, message: String },
    #[error("queue {0:?} not found in account {1:?}")]
    NoSuchQueue(String, String),
    #[error("{0}")]
    Usage(String),
}

pub struct Client {
    http: reqwest::Client,
    args: ClientArgs,
    token: String,
}

impl Client {
    pub fn new(mut args: ClientArgs) -> Result<Client, ClientError> {
        // Accept host:port, and the API base URL the SDKs and wrangler use.
        let mut url = args.url.trim().trim_end_matches('/').to_owned();
        if !url.contains("://") {
            url = format!("http://{url}");
        }
        if let Some(stripped) = url.strip_suffix("/client/v4") {
            url = stripped.to_owned();
        }
        args.url = url;
        if args.account.trim().is_empty() {
            return Err(ClientError::Usage(
                "the account id is empty: pass --account or set HOPPER_ACCOUNT".into(),
            ));
        }
        let token = match &args.token {
            Some(t) => t.clone(),
            None => std::fs::read_to_string("hopper-data/root-token")
                .map(|t| t.trim().to_owned())
                .map_err(|_| ClientError::Usage("no token: pass --token or set HOPPER_TOKEN".into()))?,
        };
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| ClientError::Usage(e.to_string()))?;
        Ok(Client { http, args, token })
    }

    fn account_url(&self, path: &str) -> String {
        format!(
            "{}/client/v4/accounts/{}{path}",
            self.args.url.trim_end_matches('/'),
            self.args.account
        )
    }

    fn user_url(&self, path: &str) -> String {
        format!("{}/client/v4/user{path}", self.args.url.trim_end_matches('/'))
    }

    async fn call(
        &self,
        method: reqwest::Method,
        url: String,
        body: Option<Value>,
    ) -> Result<Value, ClientError> {
        let mut req = self.http.request(method, &url).bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.map_err(|e| ClientError::Unreachable {
            url: self.args.url.clone(),
            reason: e.to_string(),
        })?;
        let status = resp.status().as_u16();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        if status == 401 || status == 403 {
            return Err(ClientError::Auth {
                status,
                message: v["errors"][0]["message"]
                    .as_str()
                    .unwrap_or("unauthorized")
                    .to_owned(),
            });
        }
        if v["success"] != Value::Bool(true) {
            return Err(ClientError::Api {
                status,
                code: v["errors"][0]["code"].as_i64().unwrap_or(0),
                message: v["errors"][0]["message"]
                    .as_str()
                    .unwrap_or("request failed")
                    .to_owned(),
            });
        }
        Ok(v["result"].clone())
    }

    async fn queue_by_name(&self, name: &str) -> Result<Value, ClientError> {
        let list = self
            .call(
                reqwest::Method::GET,
                self.account_url(&format!("/queues?name={name}")),
                None,
            )
            .await?;
        list.as_array()
            .and_then(|l| l.first())
            .cloned()
            .ok_or_else(|| ClientError::NoSuchQueue(name.to_owned(), self.args.account.clone()))
    }

    fn queue_id(q: &Value) -> String {
        q["queue_id"].as_str().unwrap_or_default().to_owned()
    }
}

fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.len());
        }
    }
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    let mut out = vec![line(headers.iter().map(|h| h.to_string()).collect())];
    out.extend(rows.into_iter().map(line));
    out.join("\n")
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn settings(pairs: &[(&str, Option<u64>)]) -> Value {
    let mut m = Map::new();
    for (k, v) in pairs {
        if let Some(v) = v {
            m.insert((*k).to_owned(), json!(v));
        }
    }
    Value::Object(m)
}

/// What a command prints: a human text, and the JSON for `--json`.
pub struct Output {
    pub text: String,
    pub json: Value,
}

fn out(text: impl Into<String>, json: Value) -> Output {
    Output {
        text: text.into(),
        json,
    }
}

pub async fn queues(c: &Client, cmd: QueuesCommand) -> Result<Output, ClientError> {
    use reqwest::Method as M;
    match cmd {
        QueuesCommand::Create {
            name,
            delivery_delay_secs,
            message_retention_period_secs,
        } => {
            let body = json!({"queue_name": name, "settings": settings(&[
                ("delivery_delay", delivery_delay_secs),
                ("message_retention_period", message_retention_period_secs),
            ])});
            let q = c.call(M::POST, c.account_url("/queues"), Some(body)).await?;
            Ok(out(
                format!("Created queue {} ({})", s(&q["queue_name"]), s(&q["queue_id"])),
                q,
            ))
        }
        QueuesCommand::List { page } => {
            let list = c
                .call(M::GET, c.account_url(&format!("/queues?page={page}")), None)
                .await?;
            let rows = list
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|q| {
                    vec![
                        s(&q["queue_name"]),
                        s(&q["queue_id"]),
                        s(&q["created_on"]),
                        s(&q["consumers_total_count"]),
                        s(&q["settings"]["delivery_paused"]),
                    ]
                })
                .collect();
            Ok(out(
                table(&["name", "id", "created", "consumers", "paused"], rows),
                list,
            ))
        }
        QueuesCommand::Info { name } => {
            let q = c.queue_by_name(&name).await?;
            let id = Client::queue_id(&q);
            let metrics = c
                .call(M::GET, c.account_url(&format!("/queues/{id}/metrics")), None)
                .await?;
            let consumer = match q["consumers"].get(0) {
                Some(cons) if cons["type"] == "worker" => {
                    format!("worker (function {})", s(&cons["script_name"]))
                }
                Some(_) => "http_pull".to_owned(),
                None => "none".to_owned(),
            };
            let text = format!(
                "Queue:        {}\nId:           {}\nCreated:      {}\nModified:     {}\nSettings:     delivery_delay={}s retention={}s paused={}\nConsumer:     {}\nBacklog:      {} messages, {} bytes",
                s(&q["queue_name"]), id, s(&q["created_on"]), s(&q["modified_on"]),
                s(&q["settings"]["delivery_delay"]), s(&q["settings"]["message_retention_period"]),
                s(&q["settings"]["delivery_paused"]), consumer,
                s(&metrics["backlog_count"]), s(&metrics["backlog_bytes"]),
            );
            Ok(out(text, json!({"queue": q, "metrics": metrics})))
        }
        QueuesCommand::Update {
            name,
            delivery_delay_secs,
            message_retention_period_secs,
        } => {
            let q = c.queue_by_name(&name).await?;
            let body = json!({"settings": settings(&[
                ("delivery_delay", delivery_delay_secs),
                ("message_retention_period", message_retention_period_secs),
            ])});
            let q = c
                .call(
                    M::PATCH,
                    c.account_url(&format!("/queues/{}", Client::queue_id(&q))),
                    Some(body),
                )
                .await?;
            Ok(out(format!("Updated queue {}", s(&q["queue_name"])), q))
        }
        QueuesCommand::Delete { name } => {
            let q = c.queue_by_name(&name).await?;
            c.call(
                M::DELETE,
                c.account_url(&format!("/queues/{}", Client::queue_id(&q))),
                None,
            )
            .await?;
            Ok(out(format!("Deleted queue {name}"), json!({"deleted": name})))
        }
        QueuesCommand::PauseDelivery { name } => pause(c, &name, true).await,
        QueuesCommand::ResumeDelivery { name } => pause(c, &name, false).await,
        QueuesCommand::Purge { name, force } => {
            if !force {
                return Err(ClientError::Usage(format!(
                    "purging deletes every message in {name} for good; run again with --force to confirm"
                )));
            }
            let q = c.queue_by_name(&name).await?;
            let q = c
                .call(
                    M::POST,
                    c.account_url(&format!("/queues/{}/purge", Client::queue_id(&q))),
                    Some(json!({"delete_messages_permanently": true})),
                )
                .await?;
            Ok(out(format!("Purged queue {name}"), q))
        }
        QueuesCommand::Consumer { command } => consumer(c, command).await,
    }
}

async fn pause(c: &Client, name: &str, paused: bool) -> Result<Output, ClientError> {
    let q = c.queue_by_name(name).await?;
    let q = c
        .call(
            reqwest::Method::PATCH,
            c.account_url(&format!("/queues/{}", Client::queue_id(&q))),
            Some(json!({"settings": {"delivery_paused": paused}})),
        )
        .await?;
    let verb = if paused { "Paused" } else { "Resumed" };
    Ok(out(format!("{verb} delivery on queue {name}"), q))
}

/// Adds a consumer (`body` without its dead-letter queue) to a queue.
async fn add_consumer(
    c: &Client,
    queue: &str,
    mut body: Value,
    dead_letter_queue: Option<String>,
) -> Result<Value, ClientError> {
    let q = c.queue_by_name(queue).await?;
    if let Some(d) = dead_letter_queue {
        body["dead_letter_queue"] = json!(d);
    }
    let path = format!("/queues/{}/consumers", Client::queue_id(&q));
    c.call(reqwest::Method::POST, c.account_url(&path), Some(body))
        .await
}

/// Removes the queue's consumer that `matches`, or says `missing`.
async fn remove_consumer(
    c: &Client,
    queue: &str,
    matches: impl Fn(&Value) -> bool,
    missing: String,
) -> Result<Value, ClientError> {
    let q = c.queue_by_name(queue).await?;
    let consumer = q["consumers"]
        .as_array()
        .and_then(|l| l.iter().find(|x| matches(x)))
        .cloned()
        .ok_or(ClientError::Usage(missing))?;
    let path = format!(
        "/queues/{}/consumers/{}",
        Client::queue_id(&q),
        s(&consumer["consumer_id"])
    );
    c.call(reqwest::Method::DELETE, c.account_url(&path), None)
        .await?;
    Ok(consumer)
}

async fn consumer(c: &Client, cmd: ConsumerCommand) -> Result<Output, ClientError> {
    match cmd {
        ConsumerCommand::Http {
            command:
                HttpConsumerCommand::Add {
                    queue,
                    batch_size,
                    message_retries,
                    visibility_timeout_secs,
                    retry_delay_secs,
                    dead_letter_queue,
                },
        } => {
            let body = json!({"type": "http_pull", "settings": settings(&[
                ("batch_size", batch_size),
                ("max_retries", message_retries),
                ("visibility_timeout_ms", visibility_timeout_secs.map(|s| s * 1000)),
                ("retry_delay", retry_delay_secs),
            ])});
            let cons = add_consumer(c, &queue, body, dead_letter_queue).await?;
            Ok(out(format!("Added an HTTP pull consumer to queue {queue}"), cons))
        }
        ConsumerCommand::Http {
            command: HttpConsumerCommand::Remove { queue },
        } => {
            let missing = format!("queue {queue} has no HTTP pull consumer");
            let cons = remove_consumer(c, &queue, |x| x["type"] == "http_pull", missing).await?;
            Ok(out(
                format!("Removed the HTTP pull consumer from queue {queue}"),
                cons,
            ))
        }
        ConsumerCommand::Add {
            queue,
            script_name,
            batch_size,
            batch_timeout,
            message_retries,
            max_concurrency,
            retry_delay_secs,
            dead_letter_queue,
        } => {
            let body = json!({"type": "worker", "script_name": script_name, "settings": settings(&[
                ("batch_size", batch_size),
                ("max_wait_time_ms", batch_timeout.map(|s| s * 1000)),
                ("max_retries", message_retries),
                ("max_concurrency", max_concurrency),
                ("retry_delay", retry_delay_secs),
            ])});
            let cons = add_consumer(c, &queue, body, dead_letter_queue).await?;
            Ok(out(
                format!("Added consumer {script_name} to queue {queue}"),
                cons,
            ))
        }
        ConsumerCommand::Remove { queue, script_name } => {
            let missing = format!("queue {queue} has no consumer for {script_name}");
            let cons =
                remove_consumer(c, &queue, |x| x["script_name"] == script_name.as_str(), missing).await?;
            Ok(out(
                format!("Removed consumer {script_name} from queue {queue}"),
                cons,
            ))
        }
    }
}

pub async fn send(
    c: &Client,
    queue: &str,
    body: &str,
    content_type: &str,
    delay_secs: Option<u64>,
) -> Result<Output, ClientError> {
    let q = c.queue_by_name(queue).await?;
    let body_value = match content_type {
        "json" => serde_json::from_str(body).map_err(|e| {
            ClientError::Usage(format!(
                "the body is not JSON ({e}); use --content-type text for plain text"
            ))
        })?,
        _ => Value::String(body.to_owned()),
    };
    let mut msg = json!({"body": body_value, "content_type": content_type});
    if let Some(d) = delay_secs {
        msg["delay_seconds"] = json!(d);
    }
    let r = c
        .call(
            reqwest::Method::POST,
            c.account_url(&format!("/queues/{}/messages", Client::queue_id(&q))),
            Some(msg),
        )
        .await?;
    Ok(out(
        format!(
            "Sent to {queue} (backlog {} messages)",
            s(&r["metadata"]["metrics"]["backlog_count"])
        ),
        r,
    ))
}

pub async fn pull(
    c: &Client,
    queue: &str,
    batch_size: Option<u64>,
    visibility_timeout_ms: Option<u64>,
    wait_ms: Option<u64>,
) -> Result<Output, ClientError> {
    let q = c.queue_by_name(queue).await?;
    let mut body = settings(&[
        ("batch_size", batch_size),
        ("visibility_timeout_ms", visibility_timeout_ms),
        ("wait_ms", wait_ms),
    ]);
    if body.as_object().is_some_and(Map::is_empty) {
        body = json!({});
    }
    let r = c
        .call(
            reqwest::Method::POST,
            c.account_url(&format!("/queues/{}/messages/pull", Client::queue_id(&q))),
            Some(body),
        )
        .await?;
    let rows = r["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|m| {
            let body = if m["metadata"]["CF-Content-Type"] == "json" {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD
                    .decode(m["body"].as_str().unwrap_or_default())
                    .ok()
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_else(|| s(&m["body"]))
            } else {
                s(&m["body"])
            };
            vec![s(&m["id"]), s(&m["attempts"]), body, s(&m["lease_id"])]
        })
        .collect();
    Ok(out(table(&["id", "attempts", "body", "lease_id"], rows), r))
}

pub async fn ack(
    c: &Client,
    queue: &str,
    leases: Vec<String>,
    retries: Vec<String>,
    retry_delay_secs: Option<u64>,
) -> Result<Output, ClientError> {
    if leases.is_empty() && retries.is_empty() {
        return Err(ClientError::Usage(
            "name at least one lease id to ack, or --retry LEASE_ID".into(),
        ));
    }
    let q = c.queue_by_name(queue).await?;
    let acks: Vec<Value> = leases.iter().map(|l| json!({"lease_id": l})).collect();
    let retries: Vec<Value> = retries
        .iter()
        .map(|l| match retry_delay_secs {
            Some(d) => json!({"lease_id": l, "delay_seconds": d}),
            None => json!({"lease_id": l}),
        })
        .collect();
    let r = c
        .call(
            reqwest::Method::POST,
            c.account_url(&format!("/queues/{}/messages/ack", Client::queue_id(&q))),
            Some(json!({"acks": acks, "retries": retries})),
        )
        .await?;
    let mut text = format!("Acked {}, retried {}", s(&r["ackCount"]), s(&r["retryCount"]));
    if let Some(w) = r["warnings"].as_object().filter(|w| !w.is_empty()) {
        for (lease, why) in w {
            text.push_str(&format!("\nwarning: {lease}: {}", s(why)));
        }
    }
    Ok(out(text, r))
}

pub async fn tokens(c: &Client, cmd: TokensCommand) -> Result<Output, ClientError> {
    use reqwest::Method as M;
    match cmd {
        TokensCommand::Create {
            name,
            scopes,
            accounts,
        } => {
            let mut body = json!({"name": name, "scopes": scopes});
            if !accounts.is_empty() {
                body["accounts"] = json!(accounts);
            }
            let t = c.call(M::POST, c.user_url("/tokens"), Some(body)).await?;
            Ok(out(
                format!(
                    "Created token {} ({}). Its value, shown only now:\n{}",
                    s(&t["name"]),
                    s(&t["id"]),
                    s(&t["value"])
                ),
                t,
            ))
        }
        TokensCommand::List => {
            let list = c.call(M::GET, c.user_url("/tokens"), None).await?;
            let rows = list
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|t| {
                    let scopes = t["scopes"]
                        .as_array()
                        .map(|a| a.iter().map(s).collect::<Vec<_>>().join(","))
                        .unwrap_or_default();
                    let accounts = t["accounts"]
                        .as_array()
                        .map(|a| a.iter().map(s).collect::<Vec<_>>().join(","))
                        .unwrap_or_else(|| "all".into());
                    vec![
                        s(&t["id"]),
                        s(&t["name"]),
                        scopes,
                        accounts,
                        s(&t["created_on"]),
                        s(&t["last_used_on"]),
                    ]
                })
                .collect();
            Ok(out(
                table(
                    &["id", "name", "scopes", "accounts", "created", "last used"],
                    rows,
                ),
                list,
            ))
        }
        TokensCommand::Revoke { id } => {
            let r = c
                .call(M::DELETE, c.user_url(&format!("/tokens/{id}")), None)
                .await?;
            Ok(out(format!("Revoked token {id}"), r))
        }
    }
}

pub async fn functions(c: &Client, cmd: FunctionsCommand) -> Result<Output, ClientError> {
    use reqwest::Method as M;
    match cmd {
        FunctionsCommand::Put {
            name,
            endpoint,
            timeout_ms,
            secret_env,
        } => {
            let mut body = json!({"url": endpoint});
            if let Some(t) = timeout_ms {
                body["timeout_ms"] = json!(t);
            }
            if let Some(var) = secret_env {
                let secret = std::env::var(&var)
                    .map_err(|_| ClientError::Usage(format!("environment variable {var} is not set")))?;
                body["secret"] = json!(secret);
            }
            let f = c
                .call(M::PUT, c.account_url(&format!("/functions/{name}")), Some(body))
                .await?;
            Ok(out(format!("Registered function {name} -> {}", s(&f["url"])), f))
        }
        FunctionsCommand::List => {
            let list = c.call(M::GET, c.account_url("/functions"), None).await?;
            let rows = list
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|f| {
                    vec![
                        s(&f["name"]),
                        s(&f["url"]),
                        s(&f["timeout_ms"]),
                        s(&f["has_secret"]),
                    ]
                })
                .collect();
            Ok(out(table(&["name", "url", "timeout_ms", "signed"], rows), list))
        }
        FunctionsCommand::Delete { name } => {
            c.call(M::DELETE, c.account_url(&format!("/functions/{name}")), None)
                .await?;
            Ok(out(format!("Deleted function {name}"), json!({"deleted": name})))
        }
    }
}
