//! One tracing span per request, with a request id, the account and the
//! queue, so every log line a request causes can be tied back to it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use tracing::Instrument;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// (account, queue id) from a `/client/v4/accounts/{a}/queues/{q}/...` path.
fn account_and_queue(path: &str) -> (&str, &str) {
    let mut parts = path.split('/').skip_while(|p| *p != "accounts").skip(1);
    let account = parts.next().unwrap_or("");
    let queue = match parts.next() {
        Some("queues") => parts.next().unwrap_or(""),
        _ => "",
    };
    (account, queue)
}

/// The route as a low-cardinality label: ids replaced by their names.
/// (`match_pattern()` would re-run actix's regex routing: 14% of CPU.)
fn route_label(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut previous = "";
    for segment in path.split('/').skip(1) {
        out.push('/');
        let placeholder = match previous {
            "accounts" => Some("{account_id}"),
            "queues" => Some("{queue_id}"),
            "consumers" => Some("{consumer_id}"),
            "functions" => Some("{name}"),
            "tokens" if segment != "verify" => Some("{token_id}"),
            _ => None,
        };
        out.push_str(placeholder.unwrap_or(segment));
        previous = segment;
    }
    out
}

pub async fn request_span(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let id = format!(
        "{:x}-{:x}",
        std::process::id(),
        NEXT_ID.fetch_add(1, Ordering::Relaxed)
    );
    let (account, queue) = account_and_queue(req.path());
    let route = route_label(req.path());
    let method = req.method().to_string();
    let span = tracing::info_span!(
        "request",
        request_id = %id,
        method = %req.method(),
        path = %req.path(),
        account = %account,
        queue = %queue,
    );
    let started = Instant::now();
    let result = next.call(req).instrument(span.clone()).await;
    let _entered = span.enter();
    let status = match &result {
        Ok(r) => r.status().as_u16(),
        Err(e) => e.as_response_error().status_code().as_u16(),
    };
    metrics::histogram!("hopper_http_request_duration_seconds",
        "method" => method, "route" => route, "status" => status.to_string())
    .record(started.elapsed().as_secs_f64());
    match result {
        Ok(mut response) => {
            let status = response.status().as_u16();
            tracing::debug!(
                status,
                elapsed_us = started.elapsed().as_micros() as u64,
                "request done"
            );
            if let Ok(value) = HeaderValue::from_str(&id) {
                response
                    .headers_mut()
                    .insert(HeaderName::from_static("x-request-id"), value);
            }
            Ok(response)
        }
        Err(e) => {
            tracing::debug!(error = %e, "request failed");
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn route_labels_hide_ids() {
        assert_eq!(
            super::route_label("/client/v4/accounts/acme/queues/0123/messages/pull"),
            "/client/v4/accounts/{account_id}/queues/{queue_id}/messages/pull"
        );
        assert_eq!(
            super::route_label("/client/v4/user/tokens/verify"),
            "/client/v4/user/tokens/verify"
        );
        assert_eq!(super::route_label("/metrics"), "/metrics");
    }

    #[test]
    fn finds_account_and_queue() {
        let p = "/client/v4/accounts/acme/queues/0123/messages";
        assert_eq!(super::account_and_queue(p), ("acme", "0123"));
        assert_eq!(super::account_and_queue("/healthz"), ("", ""));
        assert_eq!(
            super::account_and_queue("/client/v4/accounts/a/functions/x"),
            ("a", "")
        );
    }
}
