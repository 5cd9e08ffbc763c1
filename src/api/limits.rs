//! A server-wide budget for request bodies in flight: a request reserves its
//! Content-Length (or the body cap when it has none) before its body is
//! read, and gives it back when its response is ready. Past the budget, a
//! request is refused with 429 at once, so memory stays bounded however many
//! clients push at the same time.

use std::sync::atomic::{AtomicUsize, Ordering};

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{web, ResponseError};

use super::body::MAX_BODY_BYTES;
use super::error::ApiError;
use super::AppState;
use crate::broker::BrokerError;

pub struct BodyBudget {
    in_flight: AtomicUsize,
    max: usize,
}

impl BodyBudget {
    pub fn new(max: usize) -> Self {
        BodyBudget {
            in_flight: AtomicUsize::new(0),
            max: max.max(MAX_BODY_BYTES),
        }
    }

    fn reserve(&self, bytes: usize) -> bool {
        let mut current = self.in_flight.load(Ordering::Relaxed);
        loop {
            if current + bytes > self.max {
                return false;
            }
            match self.in_flight.compare_exchange_weak(
                current,
                current + bytes,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => current = actual,
            }
        }
    }

    fn release(&self, bytes: usize) {
        self.in_flight.fetch_sub(bytes, Ordering::AcqRel);
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }
}

/// Gives the reservation back however the request ends.
struct Reservation<'a> {
    budget: &'a BodyBudget,
    bytes: usize,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

pub async fn body_budget(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let bodiless = matches!(
        *req.method(),
        actix_web::http::Method::GET | actix_web::http::Method::HEAD
    );
    let state = req.app_data::<web::Data<AppState>>().cloned();
    let (Some(state), false) = (state, bodiless) else {
        return next.call(req).await.map(ServiceResponse::map_into_left_body);
    };
    let declared = req
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(MAX_BODY_BYTES)
        .min(MAX_BODY_BYTES);
    if !state.body_budget.reserve(declared) {
        let refusal = ApiError::Broker(BrokerError::Overloaded("the server".into())).error_response();
        return Ok(req.into_response(refusal).map_into_right_body());
    }
    let _reservation = Reservation {
        budget: &state.body_budget,
        bytes: declared,
    };
    next.call(req).await.map(ServiceResponse::map_into_left_body)
}
