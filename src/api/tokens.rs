use actix_web::{HttpMessage, HttpRequest, HttpResponse};
use serde_json::json;

use super::auth::Caller;
use super::envelope::ok;
use super::error::ApiError;

/// `GET /user/tokens/verify`, as Cloudflare answers it.
pub async fn verify(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let caller = req
        .extensions()
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| ApiError::Unauthorized("no token".into()))?;
    Ok(ok(json!({"id": caller.token_id, "status": "active"})))
}
