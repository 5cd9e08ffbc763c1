use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Map, Value};

use super::body::{
    content_length, json_object, parse_object, queue_id, read_body, string_field, uint_in, MAX_BODY_BYTES,
};
use super::envelope::ok;
use super::error::ApiError;
use super::AppState;
use crate::broker::message::{
    fast_parse_batch, fast_parse_message, parse_batch, parse_delay, parse_message, MAX_MESSAGE_BYTES,
};
use crate::broker::model::MAX_VISIBILITY_TIMEOUT_MS;
use crate::broker::queue::{Ack, Peek, Pull, PurgeRefs, SendMessages};
use crate::broker::BrokerError;
use crate::broker::QueueHandle;

type Path2 = web::Path<(String, String)>;

fn handle(state: &AppState, path: Path2) -> Result<QueueHandle, ApiError> {
    let (account, id) = path.into_inner();
    Ok(state.registry.queue(&account, queue_id(&id)?)?.1)
}

pub async fn send(
    state: web::Data<AppState>,
    path: Path2,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let queue = handle(&state, path)?;
    let too_large = |size| {
        ApiError::Broker(BrokerError::MessageTooLarge {
            size,
            limit: MAX_MESSAGE_BYTES,
        })
    };
    let bytes = read_body(payload, content_length(&req), too_large).await?;
    let message = match fast_parse_message(&bytes) {
        Some(message) => message,
        None => parse_message(&Value::Object(parse_object(&bytes)?), None)?,
    };
    let metrics = queue
        .ask(SendMessages {
            messages: vec![message],
        })
        .await?;
    Ok(ok(json!({ "metadata": { "metrics": metrics } })))
}

pub async fn send_batch(
    state: web::Data<AppState>,
    path: Path2,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let queue = handle(&state, path)?;
    let bytes = read_body(payload, content_length(&req), |_| {
        ApiError::BodyTooLarge(MAX_BODY_BYTES)
    })
    .await?;
    let messages = match fast_parse_batch(&bytes) {
        Some(messages) => messages,
        None => parse_batch(&Value::Object(parse_object(&bytes)?))?,
    };
    let metrics = queue.ask(SendMessages { messages }).await?;
    Ok(ok(json!({ "metadata": { "metrics": metrics } })))
}

pub async fn pull(
    state: web::Data<AppState>,
    path: Path2,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let queue = handle(&state, path)?;
    let body = json_object(payload).await?;
    let visibility = match uint_in(&body, "visibility_timeout_ms", 1..=MAX_VISIBILITY_TIMEOUT_MS)? {
        Some(v) => Some(v),
        None => uint_in(&body, "visibility_timeout", 1..=MAX_VISIBILITY_TIMEOUT_MS)?,
    };
    let request = Pull {
        batch_size: uint_in(&body, "batch_size", 1..=100)?,
        visibility_timeout_ms: visibility,
        wait_ms: uint_in(&body, "wait_ms", 0..=20_000)?.unwrap_or(0),
    };
    Ok(ok(queue.ask(request).await?))
}

/// One entry of `acks`/`retries`/`extensions`: the object and its lease id.
type LeaseEntry<'a> = (&'a Map<String, Value>, String);

/// The entries of an optional array of objects, each with a `lease_id`.
fn lease_entries<'a>(body: &'a Map<String, Value>, key: &str) -> Result<Vec<LeaseEntry<'a>>, ApiError> {
    let Some(list) = body.get(key).filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let list = list.as_array().ok_or_else(|| {
        ApiError::InvalidBody(format!("{key} must be an array of {{\"lease_id\": ...}} objects"))
    })?;
    list.iter()
        .enumerate()
        .map(|(i, entry)| {
            let obj = entry.as_object().ok_or_else(|| {
                ApiError::InvalidBody(format!("{key}[{i}] must be an object with a lease_id"))
            })?;
            let lease = match obj.get("lease_id") {
                Some(Value::String(s)) => s.clone(),
                // A lease id of the wrong type is a bad id, not a bad request.
                Some(other) => other.to_string(),
                None => return Err(ApiError::InvalidBody(format!("{key}[{i}] has no lease_id"))),
            };
            Ok((obj, lease))
        })
        .collect()
}

pub async fn ack(
    state: web::Data<AppState>,
    path: Path2,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let queue = handle(&state, path)?;
    let body = json_object(payload).await?;
    let acks = lease_entries(&body, "acks")?
        .into_iter()
        .map(|(_, l)| l)
        .collect();
    let retries = lease_entries(&body, "retries")?
        .into_iter()
        .map(|(obj, lease)| Ok((lease, parse_delay(obj.get("delay_seconds"))?)))
        .collect::<Result<Vec<_>, ApiError>>()?;
    let extensions = lease_entries(&body, "extensions")?
        .into_iter()
        .map(|(obj, lease)| {
            let vt =
                match uint_in(obj, "visibility_timeout_ms", 1..=MAX_VISIBILITY_TIMEOUT_MS)? {
                    Some(v) => v,
                    None => uint_in(obj, "visibility_timeout", 1..=MAX_VISIBILITY_TIMEOUT_MS)?.ok_or_else(
                        || ApiError::InvalidBody("each extension needs visibility_timeout_ms".into()),
                    )?,
                };
            Ok((lease, vt))
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    Ok(ok(queue
        .ask(Ack {
            acks,
            retries,
            extensions,
        })
        .await?))
}

pub async fn peek(
    state: web::Data<AppState>,
    path: Path2,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let queue = handle(&state, path)?;
    let body = json_object(payload).await?;
    let limit = uint_in(&body, "batch_size", 1..=100)?.unwrap_or(10) as usize;
    let messages = queue.ask(Peek { limit }).await?;
    Ok(ok(json!({ "messages": messages })))
}

pub async fn purge(
    state: web::Data<AppState>,
    path: Path2,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let queue = handle(&state, path)?;
    let body = json_object(payload).await?;
    let list = body.get("refs").and_then(Value::as_array).ok_or_else(|| {
        ApiError::InvalidBody("refs is required: an array of {\"ref\": ...} from peek".into())
    })?;
    let mut refs = Vec::with_capacity(list.len());
    for (i, entry) in list.iter().enumerate() {
        let obj = entry
            .as_object()
            .ok_or_else(|| ApiError::InvalidBody(format!("refs[{i}] must be an object with a ref")))?;
        let r = string_field(obj, "ref")?
            .ok_or_else(|| ApiError::InvalidBody(format!("refs[{i}] has no ref")))?;
        refs.push(r.to_owned());
    }
    Ok(ok(queue.ask(PurgeRefs { refs }).await?))
}
