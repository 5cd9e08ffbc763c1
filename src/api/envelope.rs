//! The Cloudflare v4 response envelope.

use actix_web::HttpResponse;
use serde::Serialize;
use serde_json::{json, Value};

#[derive(Debug, Serialize, Clone, Copy)]
pub struct ResultInfo {
    pub page: u64,
    pub per_page: u64,
    pub count: u64,
    pub total_count: u64,
    pub total_pages: u64,
}

pub fn ok(result: impl Serialize) -> HttpResponse {
    HttpResponse::Ok().json(json!({
        "success": true,
        "errors": [],
        "messages": [],
        "result": result,
    }))
}

pub fn ok_list(result: impl Serialize, info: ResultInfo) -> HttpResponse {
    HttpResponse::Ok().json(json!({
        "success": true,
        "errors": [],
        "messages": [],
        "result": result,
        "result_info": info,
    }))
}

pub fn failure(code: u32, message: &str) -> Value {
    json!({
        "success": false,
        "errors": [{ "code": code, "message": message }],
        "messages": [],
        "result": null,
    })
}
