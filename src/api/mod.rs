//! The HTTP front: routing, auth, the envelope and error mapping. It finds
//! a queue's actor through the registry and never touches storage itself.

pub mod auth;
pub mod body;
pub mod consumers;
pub mod envelope;
pub mod error;
pub mod functions;
pub mod limits;
pub mod logging;
pub mod messages;
pub mod metrics;
pub mod queues;
pub mod routes;
pub mod system;
pub mod tokens;

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
    /// Request bodies in flight, server-wide.
    pub body_budget: limits::BodyBudget,
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

/// Every route of the API (see `routes::table`).
pub fn routes(cfg: &mut web::ServiceConfig) {
    routes::register(cfg);
}
