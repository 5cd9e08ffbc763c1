//! The HTTP front: routing, auth, the envelope and error mapping. It finds
//! a queue's actor through the registry and never touches storage itself.

pub mod auth;
pub mod body;
pub mod consumers;
pub mod envelope;
pub mod error;
pub mod functions;
pub mod logging;
pub mod messages;
pub mod metrics;
pub mod queues;
pub mod system;
pub mod tokens;

use actix_web::middleware::from_fn;
use actix_web::{web, HttpRequest, Resource};

use crate::broker::RegistryHandle;
use error::ApiError;

/// Shared by every worker: the registry handle and the env root token.
pub struct AppState {
    pub registry: RegistryHandle,
    pub env_root_hash: Option<String>,
    /// None when another recorder was already installed (tests in-process).
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    pub metrics_public: bool,
}

async fn no_route(req: HttpRequest) -> Result<actix_web::HttpResponse, ApiError> {
    Err(ApiError::NoRoute(format!("{} {}", req.method(), req.path())))
}

async fn wrong_method(req: HttpRequest) -> Result<actix_web::HttpResponse, ApiError> {
    Err(ApiError::MethodNotAllowed(req.method().to_string()))
}

/// A resource whose unmatched methods answer 405 in the envelope.
fn resource(path: &str) -> Resource {
    web::resource(path).default_service(web::to(wrong_method))
}

/// Every route of the API. Dynamic segments cost a regex match each, so
/// routes nest under scopes: a request meets at most three regexes, the
/// rest are plain string compares.
pub fn routes(cfg: &mut web::ServiceConfig) {
    let queue = web::scope("/queues/{queue_id}")
        .service(
            resource("")
                .route(web::get().to(queues::get))
                .route(web::put().to(queues::put))
                .route(web::patch().to(queues::patch))
                .route(web::delete().to(queues::delete)),
        )
        .service(resource("/messages").route(web::post().to(messages::send)))
        .service(resource("/messages/batch").route(web::post().to(messages::send_batch)))
        .service(resource("/messages/pull").route(web::post().to(messages::pull)))
        .service(resource("/messages/ack").route(web::post().to(messages::ack)))
        .service(resource("/messages/peek").route(web::post().to(messages::peek)))
        .service(resource("/messages/purge").route(web::post().to(messages::purge)))
        .service(resource("/metrics").route(web::get().to(queues::metrics)))
        .service(resource("/inspect").route(web::get().to(queues::inspect)))
        .service(
            resource("/purge")
                .route(web::post().to(queues::purge))
                .route(web::get().to(queues::purge_status)),
        )
        .service(
            resource("/consumers")
                .route(web::get().to(consumers::list))
                .route(web::post().to(consumers::create)),
        )
        .service(
            resource("/consumers/{consumer_id}")
                .route(web::get().to(consumers::get))
                .route(web::put().to(consumers::put))
                .route(web::delete().to(consumers::delete)),
        );
    let account = web::scope("/accounts/{account_id}")
        .wrap(from_fn(auth::require_account_access))
        .service(
            resource("/queues")
                .route(web::get().to(queues::list))
                .route(web::post().to(queues::create)),
        )
        .service(queue)
        .service(resource("/functions").route(web::get().to(functions::list)))
        .service(
            resource("/functions/{name}")
                .route(web::get().to(functions::get))
                .route(web::put().to(functions::put))
                .route(web::delete().to(functions::delete)),
        );
    cfg.service(resource("/healthz").route(web::get().to(system::healthz)))
        .service(resource("/readyz").route(web::get().to(system::readyz)))
        .service(resource("/metrics").route(web::get().to(metrics::render)))
        .service(
            web::scope("/client/v4")
                .service(resource("/healthz").route(web::get().to(system::healthz)))
                .service(
                    web::scope("/user")
                        .wrap(from_fn(auth::require_token))
                        .service(resource("/tokens/verify").route(web::get().to(tokens::verify)))
                        .service(
                            resource("/tokens")
                                .route(web::get().to(tokens::list))
                                .route(web::post().to(tokens::create)),
                        )
                        .service(resource("/tokens/{token_id}").route(web::delete().to(tokens::delete))),
                )
                .service(account),
        )
        .default_service(web::to(no_route));
}
