use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};

use super::body::{json_object, queue_id, string_field};
use super::envelope::{ok, ok_list, ResultInfo};
use super::error::ApiError;
use super::AppState;
use crate::broker::queue::{GetMetrics, GetPurgeStatus, Inspect, PurgeAll};
use crate::broker::registry::{CreateQueue, DeleteQueue, UpdateQueue};

type Path2 = web::Path<(String, String)>;

pub async fn list(
    state: web::Data<AppState>,
    account: web::Path<String>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(req.query_string())
        .map_err(|e| ApiError::InvalidBody(format!("malformed query string: {e}")))?;
    let mut page = 1u64;
    let mut per_page = 100u64;
    let mut names = Vec::new();
    for (k, v) in pairs {
        let number = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| ApiError::InvalidBody(format!("{k} must be a positive whole number, got {v:?}")))
        };
        match k.as_str() {
            "page" => page = number(&v)?.max(1),
            "per_page" => {
                per_page = number(&v)?;
                if !(1..=1000).contains(&per_page) {
                    return Err(ApiError::InvalidBody(format!(
                        "per_page must be between 1 and 1000, got {per_page}"
                    )));
                }
            }
            "name" => names.push(v),
            _ => {}
        }
    }
    let all = state.registry.list_queues(&account, &names);
    let total = all.len() as u64;
    let result: Vec<Value> = all
        .iter()
        .skip(((page - 1) * per_page) as usize)
        .take(per_page as usize)
        .map(|q| q.to_api())
        .collect();
    let info = ResultInfo {
        page,
        per_page,
        count: result.len() as u64,
        total_count: total,
        total_pages: total.div_ceil(per_page).max(1),
    };
    Ok(ok_list(result, info))
}

pub async fn create(
    state: web::Data<AppState>,
    account: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = json_object(payload).await?;
    let name = string_field(&body, "queue_name")?
        .ok_or_else(|| ApiError::InvalidBody("queue_name is required".into()))?
        .to_owned();
    let record = state
        .registry
        .addr
        .send(CreateQueue {
            account: account.into_inner(),
            name,
            settings: body.get("settings").cloned().unwrap_or(Value::Null),
        })
        .await??;
    Ok(ok(record.to_api()))
}

pub async fn get(state: web::Data<AppState>, path: Path2) -> Result<HttpResponse, ApiError> {
    let (account, id) = path.into_inner();
    let (record, _) = state.registry.queue(&account, queue_id(&id)?)?;
    Ok(ok(record.to_api()))
}

async fn update(
    state: web::Data<AppState>,
    path: Path2,
    payload: web::Payload,
    full: bool,
) -> Result<HttpResponse, ApiError> {
    let (account, id) = path.into_inner();
    queue_id(&id)?;
    let body = json_object(payload).await?;
    let name = string_field(&body, "queue_name")?.map(str::to_owned);
    let record = state
        .registry
        .addr
        .send(UpdateQueue {
            account,
            queue_id: id,
            name,
            settings: body.get("settings").cloned().unwrap_or(Value::Null),
            full,
        })
        .await??;
    Ok(ok(record.to_api()))
}

pub async fn put(
    state: web::Data<AppState>,
    path: Path2,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    update(state, path, payload, true).await
}

pub async fn patch(
    state: web::Data<AppState>,
    path: Path2,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    update(state, path, payload, false).await
}

pub async fn delete(state: web::Data<AppState>, path: Path2) -> Result<HttpResponse, ApiError> {
    let (account, id) = path.into_inner();
    queue_id(&id)?;
    state
        .registry
        .addr
        .send(DeleteQueue {
            account,
            queue_id: id,
        })
        .await??;
    Ok(ok(Value::Null))
}

pub async fn metrics(state: web::Data<AppState>, path: Path2) -> Result<HttpResponse, ApiError> {
    let (account, id) = path.into_inner();
    let (_, handle) = state.registry.queue(&account, queue_id(&id)?)?;
    Ok(ok(handle.ask(GetMetrics).await?))
}

pub async fn inspect(state: web::Data<AppState>, path: Path2) -> Result<HttpResponse, ApiError> {
    let (account, id) = path.into_inner();
    let (_, handle) = state.registry.queue(&account, queue_id(&id)?)?;
    Ok(ok(handle.ask(Inspect).await?))
}

pub async fn purge(
    state: web::Data<AppState>,
    path: Path2,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (account, id) = path.into_inner();
    let (_, handle) = state.registry.queue(&account, queue_id(&id)?)?;
    let body = json_object(payload).await?;
    if body.get("delete_messages_permanently") != Some(&Value::Bool(true)) {
        return Err(ApiError::InvalidBody(
            "purging deletes every message for good: send {\"delete_messages_permanently\": true} to confirm"
                .into(),
        ));
    }
    handle.ask(PurgeAll).await?;
    let (record, _) = state.registry.queue(&account, &id)?;
    Ok(ok(record.to_api()))
}

pub async fn purge_status(state: web::Data<AppState>, path: Path2) -> Result<HttpResponse, ApiError> {
    let (account, id) = path.into_inner();
    let (_, handle) = state.registry.queue(&account, queue_id(&id)?)?;
    let status = handle.ask(GetPurgeStatus).await?;
    Ok(ok(json!(status)))
}
