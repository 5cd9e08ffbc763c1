//! Bearer-token authentication and scope checks, applied as middleware to
//! every account route, so no handler can forget them.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::middleware::Next;
use actix_web::{web, HttpMessage};
use sha2::{Digest, Sha256};

use super::error::ApiError;
use super::AppState;
use crate::broker::model::{valid_account_id, Scope, TokenRecord};

/// Hex SHA-256 of a token value. Tokens are 256-bit random values, so a
/// plain hash is as strong as a slow one here.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// The authenticated caller, stored in the request's extensions.
#[derive(Clone, Debug)]
pub struct Caller {
    pub token_id: String,
    pub scopes: Vec<Scope>,
    pub accounts: Option<Vec<String>>,
}

impl Caller {
    /// Both scopes on every account: may manage tokens.
    pub fn full_access(&self) -> bool {
        self.accounts.is_none()
            && self.scopes.contains(&Scope::QueuesRead)
            && self.scopes.contains(&Scope::QueuesWrite)
    }

    fn from_record(t: &TokenRecord) -> Self {
        Caller {
            token_id: t.id.clone(),
            scopes: t.scopes.clone(),
            accounts: t.accounts.clone(),
        }
    }
}

fn authenticate(req: &ServiceRequest) -> Result<Caller, ApiError> {
    authenticate_request(req.request())
}

/// Checks the bearer token of a request (also used outside the middleware).
pub fn authenticate_request(req: &actix_web::HttpRequest) -> Result<Caller, ApiError> {
    let state = req
        .app_data::<web::Data<AppState>>()
        .ok_or_else(|| ApiError::Unauthorized("server misconfigured: no auth state".into()))?;
    let header = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| {
            ApiError::Unauthorized(
                "missing Authorization header: send 'Authorization: Bearer <token>'".into(),
            )
        })?;
    let token = header
        .strip_prefix("Bearer ")
        .or_else(|| header.strip_prefix("bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ApiError::Unauthorized("Authorization header must be 'Bearer <token>'".into()))?;
    let hash = hash_token(token);
    if let Some(root_hash) = &state.env_root_hash {
        if subtle::ConstantTimeEq::ct_eq(root_hash.as_bytes(), hash.as_bytes()).into() {
            return Ok(Caller {
                token_id: "env-root".into(),
                scopes: vec![Scope::QueuesRead, Scope::QueuesWrite],
                accounts: None,
            });
        }
    }
    let token = state
        .registry
        .token_by_hash(&hash)
        .ok_or_else(|| ApiError::Unauthorized("invalid or revoked API token".into()))?;
    state.registry.touch_token(&token.id);
    Ok(Caller::from_record(&token))
}

/// The scopes a request needs: reads need read, writes need write, and
/// pull/ack need both (consuming mutates the queue).
fn needed_scopes(method: &Method, path: &str) -> &'static [Scope] {
    if path.ends_with("/messages/pull") || path.ends_with("/messages/ack") {
        &[Scope::QueuesRead, Scope::QueuesWrite]
    } else if method == Method::GET || method == Method::HEAD {
        &[Scope::QueuesRead]
    } else {
        &[Scope::QueuesWrite]
    }
}

/// Middleware for `/accounts/{account_id}/...`.
pub async fn require_account_access(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let caller = authenticate(&req)?;
    let account = req.match_info().get("account_id").unwrap_or_default().to_owned();
    if !valid_account_id(&account) {
        return Err(ApiError::MalformedAccountId(account).into());
    }
    if let Some(allowed) = &caller.accounts {
        if !allowed.contains(&account) {
            return Err(ApiError::Forbidden(format!("this token may not use account {account:?}")).into());
        }
    }
    for scope in needed_scopes(req.method(), req.path()) {
        if !caller.scopes.contains(scope) {
            let name = match scope {
                Scope::QueuesRead => "queues_read",
                Scope::QueuesWrite => "queues_write",
            };
            return Err(ApiError::Forbidden(format!("this token lacks the {name} scope needed here")).into());
        }
    }
    req.extensions_mut().insert(caller);
    next.call(req).await
}

/// Middleware for `/user/...`: any valid token.
pub async fn require_token(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let caller = authenticate(&req)?;
    req.extensions_mut().insert(caller);
    next.call(req).await
}
