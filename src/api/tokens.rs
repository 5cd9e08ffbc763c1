//! The tokens API: `/user/tokens`. Values are shown once, at creation;
//! only their SHA-256 is stored.

use actix_web::{web, HttpMessage, HttpRequest, HttpResponse};
use serde_json::{json, Value};

use super::auth::{hash_token, Caller};
use super::body::{json_object, string_field};
use super::envelope::{ok, ok_list, ResultInfo};
use super::error::ApiError;
use super::AppState;
use crate::broker::model::{iso_now, new_id, valid_account_id, valid_object_id, Scope, TokenRecord};
use crate::broker::registry::{DeleteToken, PutToken};
use crate::broker::BrokerError;

fn caller(req: &HttpRequest) -> Result<Caller, ApiError> {
    req.extensions()
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| ApiError::Unauthorized("no token".into()))
}

fn require_full_access(req: &HttpRequest) -> Result<Caller, ApiError> {
    let c = caller(req)?;
    if !c.full_access() {
        return Err(ApiError::Forbidden(
            "managing tokens needs a token with queues_read and queues_write on every account".into(),
        ));
    }
    Ok(c)
}

/// A new token value: 256 random bits.
pub fn generate_token_value() -> Result<String, ApiError> {
    let mut raw = [0u8; 32];
    getrandom::getrandom(&mut raw)
        .map_err(|e| ApiError::InvalidBody(format!("no randomness available: {e}")))?;
    Ok(format!("hopper_{}", hex::encode(raw)))
}

/// `GET /user/tokens/verify`, as Cloudflare answers it.
pub async fn verify(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let caller = caller(&req)?;
    Ok(ok(json!({"id": caller.token_id, "status": "active"})))
}

pub async fn list(state: web::Data<AppState>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    require_full_access(&req)?;
    let tokens: Vec<Value> = state.registry.tokens().iter().map(TokenRecord::to_api).collect();
    let n = tokens.len() as u64;
    Ok(ok_list(
        tokens,
        ResultInfo {
            page: 1,
            per_page: n.max(1),
            count: n,
            total_count: n,
            total_pages: 1,
        },
    ))
}

pub async fn create(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    require_full_access(&req)?;
    let body = json_object(payload).await?;
    let name = string_field(&body, "name")?
        .filter(|n| !n.trim().is_empty())
        .ok_or_else(|| ApiError::InvalidBody("name is required".into()))?
        .to_owned();
    let scopes = parse_scopes(body.get("scopes"))?;
    let accounts = parse_accounts(body.get("accounts"))?;
    let value = generate_token_value()?;
    let record = TokenRecord {
        id: new_id(),
        name,
        hash: hash_token(&value),
        scopes,
        accounts,
        created_on: iso_now(),
        root: false,
        last_used_on: None,
        from_config: false,
    };
    state.registry.addr.send(PutToken(record.clone())).await??;
    let mut out = record.to_api();
    out["value"] = Value::String(value);
    Ok(ok(out))
}

pub async fn delete(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    require_full_access(&req)?;
    let id = id.into_inner();
    if !valid_object_id(&id) {
        return Err(BrokerError::TokenNotFound(id).into());
    }
    state.registry.addr.send(DeleteToken { id: id.clone() }).await??;
    Ok(ok(json!({"id": id})))
}

pub fn parse_scopes(v: Option<&Value>) -> Result<Vec<Scope>, ApiError> {
    let list = v.and_then(Value::as_array).ok_or_else(|| {
        ApiError::InvalidBody("scopes is required: a list of \"queues_read\" and/or \"queues_write\"".into())
    })?;
    let mut scopes = Vec::new();
    for s in list {
        let scope = s.as_str().and_then(Scope::parse).ok_or_else(|| {
            ApiError::InvalidBody(format!("unknown scope {s}: use queues_read or queues_write"))
        })?;
        if !scopes.contains(&scope) {
            scopes.push(scope);
        }
    }
    if scopes.is_empty() {
        return Err(ApiError::InvalidBody(
            "scopes must name at least one scope".into(),
        ));
    }
    Ok(scopes)
}

pub fn parse_accounts(v: Option<&Value>) -> Result<Option<Vec<String>>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(list)) => {
            let mut out = Vec::new();
            for a in list {
                match a.as_str() {
                    Some(id) if valid_account_id(id) => out.push(id.to_owned()),
                    _ => return Err(ApiError::InvalidBody(format!("{a} is not a valid account id"))),
                }
            }
            Ok(Some(out))
        }
        Some(other) => Err(ApiError::InvalidBody(format!(
            "accounts must be a list of account ids, got {other}"
        ))),
    }
}

fn account_list(req: &HttpRequest) -> Result<Vec<String>, ApiError> {
    // A token limited to accounts lists them; an unrestricted one lists none
    // (accounts exist implicitly), so wrangler asks for CLOUDFLARE_ACCOUNT_ID.
    Ok(caller(req)?.accounts.unwrap_or_default())
}

fn page_info(n: u64) -> ResultInfo {
    ResultInfo {
        page: 1,
        per_page: n.max(20),
        count: n,
        total_count: n,
        total_pages: 1,
    }
}

/// `GET /accounts`: the accounts this token is limited to.
pub async fn accounts(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let list: Vec<Value> = account_list(&req)?
        .into_iter()
        .map(|id| json!({"id": id, "name": id}))
        .collect();
    let n = list.len() as u64;
    Ok(ok_list(list, page_info(n)))
}

/// `GET /memberships`: the same accounts, as Cloudflare's memberships.
pub async fn memberships(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let list: Vec<Value> = account_list(&req)?
        .into_iter()
        .map(|id| json!({"id": id, "status": "accepted", "account": {"id": id, "name": id}}))
        .collect();
    let n = list.len() as u64;
    Ok(ok_list(list, page_info(n)))
}
