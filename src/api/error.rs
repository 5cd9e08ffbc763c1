//! The one place where errors become HTTP statuses and Cloudflare codes.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};

use super::envelope::failure;
use crate::broker::BrokerError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Broker(#[from] BrokerError),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    MalformedJson(String),
    #[error("{0}")]
    InvalidBody(String),
    #[error("queue id {0:?} is malformed: expected 32 lowercase hex characters")]
    MalformedQueueId(String),
    #[error("account id {0:?} is malformed: use 1-64 letters, digits, '_' or '-'")]
    MalformedAccountId(String),
    #[error("no route for {0}")]
    NoRoute(String),
    #[error("method {0} is not allowed on this route")]
    MethodNotAllowed(String),
    #[error("request body is larger than {0} bytes")]
    BodyTooLarge(usize),
    #[error("the request body did not arrive within {0} s")]
    BodyTimeout(u64),
}

impl ApiError {
    /// (HTTP status, Cloudflare error code) for every error the API returns.
    pub fn status_and_code(&self) -> (StatusCode, u32) {
        use BrokerError as B;
        match self {
            ApiError::Broker(b) => match b {
                B::QueueNotFound(_) => (StatusCode::NOT_FOUND, 11000),
                B::FunctionMissing { .. } => (StatusCode::BAD_REQUEST, 11001),
                B::ConsumerNotFound(_) | B::FunctionNotFound(_) => (StatusCode::NOT_FOUND, 11002),
                B::TokenNotFound(_) => (StatusCode::NOT_FOUND, 1003),
                B::InvalidQueueName(_) => (StatusCode::BAD_REQUEST, 11003),
                B::ConsumerExists(_) => (StatusCode::CONFLICT, 11004),
                B::DeliveryPaused(_) => (StatusCode::CONFLICT, 11005),
                B::NoPullConsumer(_) => (StatusCode::METHOD_NOT_ALLOWED, 11006),
                B::QueueNameTaken(_) => (StatusCode::CONFLICT, 11009),
                B::InvalidDelay(_) => (StatusCode::BAD_REQUEST, 10202),
                B::InvalidMessage(_) => (StatusCode::BAD_REQUEST, 10203),
                B::MessageTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, 10204),
                B::BatchTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, 10205),
                B::TooManyMessages { .. } => (StatusCode::PAYLOAD_TOO_LARGE, 10206),
                B::InvalidRequest(_) => (StatusCode::BAD_REQUEST, 10207),
                B::Overloaded(_) => (StatusCode::TOO_MANY_REQUESTS, 10250),
                B::InvalidConsumerSettings(_) => (StatusCode::BAD_REQUEST, 100127),
                B::InvalidQueueSettings(_) => (StatusCode::BAD_REQUEST, 100128),
                B::StorageFailure { disk_full: true, .. } => (StatusCode::INSUFFICIENT_STORAGE, 10251),
                B::Store(e) if e.is_disk_full() => (StatusCode::INSUFFICIENT_STORAGE, 10251),
                B::ShuttingDown | B::ActorUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, 15000),
                B::StorageFailure { .. } | B::Store(_) => (StatusCode::INTERNAL_SERVER_ERROR, 15000),
            },
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, 10106),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, 10106),
            ApiError::MalformedJson(_) => (StatusCode::BAD_REQUEST, 10208),
            ApiError::InvalidBody(_) => (StatusCode::BAD_REQUEST, 10207),
            ApiError::MalformedQueueId(_) => (StatusCode::BAD_REQUEST, 10107),
            ApiError::MalformedAccountId(_) => (StatusCode::BAD_REQUEST, 10107),
            ApiError::NoRoute(_) => (StatusCode::NOT_FOUND, 7000),
            ApiError::MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, 7001),
            ApiError::BodyTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, 10205),
            ApiError::BodyTimeout(_) => (StatusCode::REQUEST_TIMEOUT, 10207),
        }
    }
}

/// The registry actor did not answer (it is gone: the server is stopping).
impl From<actix::MailboxError> for ApiError {
    fn from(_: actix::MailboxError) -> Self {
        ApiError::Broker(BrokerError::ActorUnavailable("registry".into()))
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ApiError::Broker(BrokerError::Store(e))
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status_and_code().0
    }

    fn error_response(&self) -> HttpResponse {
        let (status, code) = self.status_and_code();
        if status.is_server_error() {
            tracing::error!(code, error = %self, "request failed");
        }
        let mut response = HttpResponse::build(status);
        // Cloudflare's SDKs retry 409s and 5xx unless told not to; only
        // overload and unavailability are worth retrying here.
        let retryable = matches!(status.as_u16(), 429 | 503);
        response.insert_header(("x-should-retry", if retryable { "true" } else { "false" }));
        if status == StatusCode::TOO_MANY_REQUESTS {
            response.insert_header(("retry-after", "1"));
        }
        response.json(failure(code, &self.to_string()))
    }
}
