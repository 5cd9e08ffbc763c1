use actix_web::{web, HttpResponse};
use serde_json::json;

use super::AppState;

pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// Ready once the registry is serving; queue actors recover before they
/// answer their first request, so a request never sees a half-loaded queue.
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let queues = state.registry.all_handles().len();
    HttpResponse::Ok().json(json!({"status": "ready", "queues": queues}))
}
