use actix_web::{web, HttpResponse};
use serde_json::Value;

use super::body::{json_object, queue_id};
use super::envelope::{ok, ok_list, ResultInfo};
use super::error::ApiError;
use super::AppState;
use crate::broker::registry::{CreateConsumer, DeleteConsumer, UpdateConsumer};
use crate::broker::BrokerError;

pub async fn list(
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (account, id) = path.into_inner();
    let (record, _) = state.registry.queue(&account, queue_id(&id)?)?;
    let consumers: Vec<Value> = record
        .consumer
        .iter()
        .map(|c| c.to_api(&record.queue_id, &record.queue_name))
        .collect();
    let n = consumers.len() as u64;
    Ok(ok_list(
        consumers,
        ResultInfo {
            page: 1,
            per_page: 100,
            count: n,
            total_count: n,
            total_pages: 1,
        },
    ))
}

pub async fn create(
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (account, id) = path.into_inner();
    queue_id(&id)?;
    let body = Value::Object(json_object(payload).await?);
    let consumer = state
        .registry
        .addr
        .send(CreateConsumer {
            account: account.clone(),
            queue_id: id.clone(),
            body,
        })
        .await??;
    let (record, _) = state.registry.queue(&account, &id)?;
    Ok(ok(consumer.to_api(&record.queue_id, &record.queue_name)))
}

pub async fn get(
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (account, id, consumer_id) = path.into_inner();
    let (record, _) = state.registry.queue(&account, queue_id(&id)?)?;
    match &record.consumer {
        Some(c) if c.consumer_id == consumer_id => Ok(ok(c.to_api(&record.queue_id, &record.queue_name))),
        _ => Err(BrokerError::ConsumerNotFound(consumer_id).into()),
    }
}

pub async fn put(
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (account, id, consumer_id) = path.into_inner();
    queue_id(&id)?;
    let body = Value::Object(json_object(payload).await?);
    let consumer = state
        .registry
        .addr
        .send(UpdateConsumer {
            account: account.clone(),
            queue_id: id.clone(),
            consumer_id,
            body,
        })
        .await??;
    let (record, _) = state.registry.queue(&account, &id)?;
    Ok(ok(consumer.to_api(&record.queue_id, &record.queue_name)))
}

pub async fn delete(
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (account, id, consumer_id) = path.into_inner();
    queue_id(&id)?;
    state
        .registry
        .addr
        .send(DeleteConsumer {
            account,
            queue_id: id,
            consumer_id,
        })
        .await??;
    Ok(ok(Value::Null))
}
