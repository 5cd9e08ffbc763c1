//! `GET /metrics`: Prometheus text, rendered by metrics-exporter-prometheus
//! from what the broker and the front record through the `metrics` facade.

use actix_web::{web, HttpRequest, HttpResponse};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use super::auth::authenticate_request;
use super::error::ApiError;
use super::AppState;
use crate::broker::model::Scope;

const SECONDS_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0,
];
const COUNT_BUCKETS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 5000.0,
];

/// Installs the global recorder; call once per process.
pub fn install() -> Result<PrometheusHandle, String> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full("hopper_commit_ops".into()), COUNT_BUCKETS))
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full("hopper_commit_messages".into()), COUNT_BUCKETS))
        .map_err(|e| e.to_string())?
        .install_recorder()
        .map_err(|e| e.to_string())
}

pub async fn render(state: web::Data<AppState>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    if !state.metrics_public {
        let caller = authenticate_request(&req)?;
        if !caller.scopes.contains(&Scope::QueuesRead) {
            return Err(ApiError::Forbidden(
                "/metrics needs a token with the queues_read scope".into(),
            ));
        }
    }
    let body = state.metrics.as_ref().map(|h| h.render()).unwrap_or_default();
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(body))
}
