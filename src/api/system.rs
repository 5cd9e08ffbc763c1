use actix_web::{web, HttpResponse};
use serde_json::json;

use super::AppState;

pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// Ready once every queue actor has finished recovering its store. Queues
/// whose store failed to open are listed; they do not hold the rest back.
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let queues = state.registry.all_handles().len();
    let (loading, failed) = state.registry.recovery_report();
    let body = json!({
        "status": if loading.is_empty() { "ready" } else { "recovering" },
        "queues": queues,
        "recovering": loading,
        "failed": failed,
    });
    if loading.is_empty() {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}
