//! The route table: one list drives both the actix routing and the OpenAPI
//! document (`GET /client/v4/openapi.json`), so the two cannot drift.
//!
//! Routes nest under scopes because actix-router matches each dynamic
//! segment with a regex: a request meets at most three, the rest are string
//! compares.

use std::collections::BTreeMap;

use actix_web::middleware::from_fn;
use actix_web::{web, HttpResponse, Route as ActixRoute};
use serde_json::{json, Map, Value};

use super::{auth, consumers, functions, messages, metrics, queues, system, tokens};

/// Where a route hangs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mount {
    /// At the server root (health, metrics): no `/client/v4`.
    Root,
    /// `/client/v4`, no token.
    Api,
    /// `/client/v4/user`, any valid token.
    User,
    /// `/client/v4` routes that need any valid token.
    ApiAuthed,
    /// `/client/v4/accounts/{account_id}`, token with the route's scope.
    Account,
    /// `/client/v4/accounts/{account_id}/queues/{queue_id}`.
    Queue,
}

impl Mount {
    fn prefix(self) -> &'static str {
        match self {
            Mount::Root => "",
            Mount::Api => "/client/v4",
            Mount::User => "/client/v4/user",
            Mount::ApiAuthed => "/client/v4",
            Mount::Account => "/client/v4/accounts/{account_id}",
            Mount::Queue => "/client/v4/accounts/{account_id}/queues/{queue_id}",
        }
    }
}

pub struct RouteSpec {
    pub mount: Mount,
    pub method: &'static str,
    pub path: &'static str,
    pub summary: &'static str,
    /// JSON schema of the request body, if it takes one.
    pub body: Option<fn() -> Value>,
    route: fn() -> ActixRoute,
}

fn int(min: u64, max: u64) -> Value {
    json!({"type": "integer", "minimum": min, "maximum": max})
}

fn object(props: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": props, "required": required})
}

fn queue_body() -> Value {
    object(
        json!({
            "queue_name": {"type": "string", "pattern": "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"},
            "settings": object(json!({
                "delivery_delay": int(0, 86_400),
                "delivery_paused": {"type": "boolean"},
                "message_retention_period": int(60, 1_209_600),
            }), &[]),
        }),
        &[],
    )
}

fn consumer_body() -> Value {
    object(
        json!({
            "type": {"type": "string", "enum": ["http_pull", "worker"]},
            "script_name": {"type": "string"},
            "dead_letter_queue": {"type": "string"},
            "settings": object(json!({
                "batch_size": int(1, 100),
                "max_retries": int(0, 100),
                "max_wait_time_ms": int(0, 60_000),
                "max_concurrency": int(1, 250),
                "retry_delay": int(0, 86_400),
                "visibility_timeout_ms": int(1, 43_200_000),
            }), &[]),
        }),
        &["type"],
    )
}

fn message_schema() -> Value {
    object(
        json!({
            "body": {},
            "content_type": {"type": "string", "enum": ["json", "text", "bytes"]},
            "delay_seconds": int(0, 86_400),
        }),
        &["body"],
    )
}

fn batch_body() -> Value {
    object(
        json!({
            "messages": {"type": "array", "items": message_schema(), "minItems": 1, "maxItems": 100},
            "delay_seconds": int(0, 86_400),
        }),
        &["messages"],
    )
}

fn pull_body() -> Value {
    object(
        json!({
            "batch_size": int(1, 100),
            "visibility_timeout_ms": int(1, 43_200_000),
            "wait_ms": int(0, 20_000),
        }),
        &[],
    )
}

fn lease_list(extra: Value) -> Value {
    let mut props = json!({"lease_id": {"type": "string"}});
    if let (Some(p), Some(e)) = (props.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    json!({"type": "array", "items": object(props, &["lease_id"])})
}

fn ack_body() -> Value {
    object(
        json!({
            "acks": lease_list(json!({})),
            "retries": lease_list(json!({"delay_seconds": int(0, 86_400)})),
            "extensions": lease_list(json!({"visibility_timeout_ms": int(1, 43_200_000)})),
        }),
        &[],
    )
}

fn peek_body() -> Value {
    object(json!({"batch_size": int(1, 100)}), &[])
}

fn purge_refs_body() -> Value {
    object(
        json!({"refs": {"type": "array", "items": object(json!({"ref": {"type": "string"}}), &["ref"])}}),
        &["refs"],
    )
}

fn purge_queue_body() -> Value {
    object(
        json!({"delete_messages_permanently": {"type": "boolean", "enum": [true]}}),
        &["delete_messages_permanently"],
    )
}

fn function_body() -> Value {
    object(
        json!({
            "url": {"type": "string", "pattern": "^https?://"},
            "timeout_ms": int(1, 900_000),
            "secret": {"type": "string"},
        }),
        &["url"],
    )
}

fn token_body() -> Value {
    object(
        json!({
            "name": {"type": "string", "minLength": 1},
            "scopes": {"type": "array", "items": {"type": "string", "enum": ["queues_read", "queues_write"]}, "minItems": 1},
            "accounts": {"type": "array", "items": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}},
        }),
        &["name", "scopes"],
    )
}

async fn openapi_json() -> HttpResponse {
    HttpResponse::Ok().json(openapi())
}

macro_rules! r {
    ($mount:ident, $method:literal, $path:literal, $summary:literal, $body:expr, $route:expr) => {
        RouteSpec {
            mount: Mount::$mount,
            method: $method,
            path: $path,
            summary: $summary,
            body: $body,
            route: || $route,
        }
    };
}

/// Every route of the API.
pub fn table() -> Vec<RouteSpec> {
    vec![
        r!(
            Root,
            "GET",
            "/healthz",
            "Liveness",
            None,
            web::get().to(system::healthz)
        ),
        r!(
            Root,
            "GET",
            "/readyz",
            "Readiness: every queue recovered",
            None,
            web::get().to(system::readyz)
        ),
        r!(
            Root,
            "GET",
            "/metrics",
            "Prometheus metrics",
            None,
            web::get().to(metrics::render)
        ),
        r!(
            Api,
            "GET",
            "/healthz",
            "Liveness",
            None,
            web::get().to(system::healthz)
        ),
        r!(
            Api,
            "GET",
            "/openapi.json",
            "This document",
            None,
            web::get().to(openapi_json)
        ),
        r!(
            User,
            "GET",
            "/tokens/verify",
            "Verify the calling token",
            None,
            web::get().to(tokens::verify)
        ),
        r!(
            User,
            "GET",
            "/tokens",
            "List tokens (never their values)",
            None,
            web::get().to(tokens::list)
        ),
        r!(
            User,
            "POST",
            "/tokens",
            "Create a token; its value is returned once",
            Some(token_body),
            web::post().to(tokens::create)
        ),
        r!(
            User,
            "DELETE",
            "/tokens/{token_id}",
            "Revoke a token",
            None,
            web::delete().to(tokens::delete)
        ),
        r!(
            Account,
            "GET",
            "/queues",
            "List queues (page, per_page, name)",
            None,
            web::get().to(queues::list)
        ),
        r!(
            Account,
            "POST",
            "/queues",
            "Create a queue",
            Some(queue_body),
            web::post().to(queues::create)
        ),
        r!(
            Account,
            "GET",
            "/functions",
            "List functions",
            None,
            web::get().to(functions::list)
        ),
        r!(
            Account,
            "GET",
            "/functions/{name}",
            "Get a function",
            None,
            web::get().to(functions::get)
        ),
        r!(
            Account,
            "PUT",
            "/functions/{name}",
            "Register or replace a function",
            Some(function_body),
            web::put().to(functions::put)
        ),
        r!(
            Account,
            "DELETE",
            "/functions/{name}",
            "Delete a function",
            None,
            web::delete().to(functions::delete)
        ),
        r!(Queue, "GET", "", "Get a queue", None, web::get().to(queues::get)),
        r!(
            Queue,
            "PUT",
            "",
            "Replace a queue's name and settings",
            Some(queue_body),
            web::put().to(queues::put)
        ),
        r!(
            Queue,
            "PATCH",
            "",
            "Change some of a queue's settings",
            Some(queue_body),
            web::patch().to(queues::patch)
        ),
        r!(
            Queue,
            "DELETE",
            "",
            "Delete a queue and its messages",
            None,
            web::delete().to(queues::delete)
        ),
        r!(
            Queue,
            "GET",
            "/metrics",
            "Backlog figures",
            None,
            web::get().to(queues::metrics)
        ),
        r!(
            Queue,
            "GET",
            "/inspect",
            "The queue actor's live state",
            None,
            web::get().to(queues::inspect)
        ),
        r!(
            Queue,
            "POST",
            "/purge",
            "Delete every message",
            Some(purge_queue_body),
            web::post().to(queues::purge)
        ),
        r!(
            Queue,
            "GET",
            "/purge",
            "Purge status",
            None,
            web::get().to(queues::purge_status)
        ),
        r!(
            Queue,
            "GET",
            "/consumers",
            "List the queue's consumer",
            None,
            web::get().to(consumers::list)
        ),
        r!(
            Queue,
            "POST",
            "/consumers",
            "Add the queue's consumer",
            Some(consumer_body),
            web::post().to(consumers::create)
        ),
        r!(
            Queue,
            "GET",
            "/consumers/{consumer_id}",
            "Get the consumer",
            None,
            web::get().to(consumers::get)
        ),
        r!(
            Queue,
            "PUT",
            "/consumers/{consumer_id}",
            "Replace the consumer's settings",
            Some(consumer_body),
            web::put().to(consumers::put)
        ),
        r!(
            Queue,
            "DELETE",
            "/consumers/{consumer_id}",
            "Remove the consumer",
            None,
            web::delete().to(consumers::delete)
        ),
        r!(
            Queue,
            "POST",
            "/messages",
            "Send a message",
            Some(message_schema),
            web::post().to(messages::send)
        ),
        r!(
            Queue,
            "POST",
            "/messages/batch",
            "Send up to 100 messages",
            Some(batch_body),
            web::post().to(messages::send_batch)
        ),
        r!(
            Queue,
            "POST",
            "/messages/pull",
            "Lease messages (wait_ms: long polling)",
            Some(pull_body),
            web::post().to(messages::pull)
        ),
        r!(
            Queue,
            "POST",
            "/messages/ack",
            "Ack, retry or extend leases",
            Some(ack_body),
            web::post().to(messages::ack)
        ),
        r!(
            Queue,
            "POST",
            "/messages/peek",
            "Look at ready messages without leasing",
            Some(peek_body),
            web::post().to(messages::peek)
        ),
        r!(
            Queue,
            "POST",
            "/messages/purge",
            "Delete messages by peek ref",
            Some(purge_refs_body),
            web::post().to(messages::purge)
        ),
    ]
}

/// Registers `mount`'s routes, one resource per path.
fn resources(mount: Mount, routes: &[RouteSpec]) -> Vec<actix_web::Resource> {
    let mut by_path: BTreeMap<&str, Vec<&RouteSpec>> = BTreeMap::new();
    for r in routes.iter().filter(|r| r.mount == mount) {
        by_path.entry(r.path).or_default().push(r);
    }
    by_path
        .into_iter()
        .map(|(path, specs)| {
            specs
                .into_iter()
                .fold(super::resource(path), |res, spec| res.route((spec.route)()))
        })
        .collect()
}

pub fn register(cfg: &mut web::ServiceConfig) {
    let routes = table();
    let mut queue = web::scope("/queues/{queue_id}");
    for r in resources(Mount::Queue, &routes) {
        queue = queue.service(r);
    }
    let mut account = web::scope("/accounts/{account_id}").wrap(from_fn(auth::require_account_access));
    for r in resources(Mount::Account, &routes) {
        account = account.service(r);
    }
    let account = account.service(queue);
    let mut user = web::scope("/user").wrap(from_fn(auth::require_token));
    for r in resources(Mount::User, &routes) {
        user = user.service(r);
    }
    let mut api = web::scope("/client/v4");
    for r in resources(Mount::Api, &routes) {
        api = api.service(r);
    }
    for r in resources(Mount::ApiAuthed, &routes) {
        api = api.service(r.wrap(from_fn(auth::require_token)));
    }
    let api = api.service(user).service(account);
    for r in resources(Mount::Root, &routes) {
        cfg.service(r);
    }
    cfg.service(api).default_service(web::to(super::no_route));
}

fn path_params(path: &str) -> Vec<Value> {
    path.split('/')
        .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .map(|name| {
            let schema = match name {
                "account_id" => json!({"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}),
                "queue_id" | "consumer_id" | "token_id" => {
                    json!({"type": "string", "pattern": "^[0-9a-f]{32}$"})
                }
                _ => json!({"type": "string"}),
            };
            json!({"name": name, "in": "path", "required": true, "schema": schema})
        })
        .collect()
}

/// The OpenAPI 3.0 document, generated from `table()`.
pub fn openapi() -> Value {
    let envelope = json!({
        "type": "object",
        "required": ["success", "errors", "messages", "result"],
        "properties": {
            "success": {"type": "boolean"},
            "errors": {"type": "array", "items": {"$ref": "#/components/schemas/Error"}},
            "messages": {"type": "array"},
            "result": {},
            "result_info": {"type": "object"},
        },
    });
    let mut paths: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    for r in table() {
        let full = format!("{}{}", r.mount.prefix(), r.path);
        let secured = matches!(
            r.mount,
            Mount::User | Mount::ApiAuthed | Mount::Account | Mount::Queue
        ) || r.path == "/metrics";
        let mut op = json!({
            "summary": r.summary,
            "operationId": format!("{}{}", r.method.to_lowercase(), full.replace(['/', '{', '}', '.'], "_")),
            "parameters": path_params(&full),
            "responses": {
                "200": {"description": "Success", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Envelope"}}}},
                "default": {"description": "An error in the envelope", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Envelope"}}}},
            },
        });
        if r.path == "/metrics" {
            op["responses"]["200"] = json!({"description": "Prometheus text", "content": {"text/plain": {"schema": {"type": "string"}}}});
        }
        if let Some(body) = r.body {
            op["requestBody"] =
                json!({"required": true, "content": {"application/json": {"schema": body()}}});
        }
        if !secured {
            op["security"] = json!([]);
        }
        paths.entry(full).or_default().insert(r.method.to_lowercase(), op);
    }
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "Hopper",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "A durable message-queue server speaking the Cloudflare Queues API.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Envelope": envelope,
                "Error": {"type": "object", "properties": {"code": {"type": "integer"}, "message": {"type": "string"}}},
            },
        },
        "paths": paths,
    })
}
