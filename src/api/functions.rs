use actix_web::{web, HttpResponse};
use serde_json::Value;

use super::body::{json_object, string_field, uint_in};
use super::envelope::{ok, ok_list, ResultInfo};
use super::error::ApiError;
use super::AppState;
use crate::broker::registry::{DeleteFunction, PutFunction};
use crate::broker::BrokerError;

fn valid_function_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
}

pub async fn list(state: web::Data<AppState>, account: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let all: Vec<Value> = state
        .registry
        .functions(&account)
        .iter()
        .map(|f| f.to_api())
        .collect();
    let n = all.len() as u64;
    Ok(ok_list(
        all,
        ResultInfo {
            page: 1,
            per_page: n.max(1),
            count: n,
            total_count: n,
            total_pages: 1,
        },
    ))
}

pub async fn get(
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (account, name) = path.into_inner();
    state
        .registry
        .function(&account, &name)
        .map(|f| ok(f.to_api()))
        .ok_or_else(|| BrokerError::FunctionNotFound(name).into())
}

pub async fn put(
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (account, name) = path.into_inner();
    if !valid_function_name(&name) {
        return Err(ApiError::InvalidBody(format!(
            "function name {name:?} is not valid: use 1-63 letters, digits, '-' or '_'"
        )));
    }
    let body = json_object(payload).await?;
    let url = string_field(&body, "url")?.ok_or_else(|| {
        ApiError::InvalidBody("url is required: the HTTP endpoint that receives batches".into())
    })?;
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(ApiError::InvalidBody(format!(
            "url must be an http:// or https:// URL, got {url:?}"
        )));
    }
    let timeout_ms = uint_in(&body, "timeout_ms", 1..=900_000)?.unwrap_or(30_000);
    let secret = string_field(&body, "secret")?
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    let record = state
        .registry
        .addr
        .send(PutFunction {
            account,
            name,
            url: url.to_owned(),
            timeout_ms,
            secret,
        })
        .await??;
    Ok(ok(record.to_api()))
}

pub async fn delete(
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (account, name) = path.into_inner();
    state
        .registry
        .addr
        .send(DeleteFunction { account, name })
        .await??;
    Ok(ok(Value::Null))
}
