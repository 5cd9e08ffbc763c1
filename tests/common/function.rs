//! A local HTTP "function" for push-delivery tests: records every batch it
//! receives and answers as the test scripts it.
#![allow(dead_code)]

use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use serde_json::Value;

/// How the function answers a batch: status, extra headers, body, delay.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub delay: Duration,
}

impl Answer {
    pub fn ok() -> Self {
        Answer {
            status: 200,
            headers: Vec::new(),
            body: String::new(),
            delay: Duration::ZERO,
        }
    }
    pub fn status(status: u16, body: &str) -> Self {
        Answer {
            status,
            headers: Vec::new(),
            body: body.to_owned(),
            delay: Duration::ZERO,
        }
    }
    pub fn json(body: Value) -> Self {
        Answer::status(200, &body.to_string())
    }
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.to_owned(), v.to_owned()));
        self
    }
}

#[derive(Clone, Debug)]
pub struct Received {
    pub at: Instant,
    pub body: Value,
    pub raw: Vec<u8>,
    pub signature: Option<String>,
    pub queue_header: Option<String>,
    pub batch_header: Option<String>,
}

type Script = Arc<dyn Fn(&Value) -> Answer + Send + Sync>;

#[derive(Clone)]
pub struct Function {
    pub url: String,
    pub received: Arc<Mutex<Vec<Received>>>,
    script: Arc<Mutex<Script>>,
    in_flight: Arc<AtomicUsize>,
    pub max_in_flight: Arc<AtomicUsize>,
}

struct Shared {
    f: Function,
}

async fn handle(req: HttpRequest, body: web::Bytes, shared: web::Data<Shared>) -> HttpResponse {
    let f = &shared.f;
    let now = f.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    f.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    f.received.lock().unwrap().push(Received {
        at: Instant::now(),
        body: value.clone(),
        raw: body.to_vec(),
        signature: header("hopper-signature"),
        queue_header: header("hopper-queue"),
        batch_header: header("hopper-batch-id"),
    });
    let script = f.script.lock().unwrap().clone();
    let answer = script(&value);
    if !answer.delay.is_zero() {
        tokio::time::sleep(answer.delay).await;
    }
    f.in_flight.fetch_sub(1, Ordering::SeqCst);
    let mut resp = HttpResponse::build(actix_web::http::StatusCode::from_u16(answer.status).unwrap());
    for (k, v) in &answer.headers {
        resp.insert_header((k.as_str(), v.as_str()));
    }
    resp.body(answer.body)
}

impl Function {
    /// Starts the function server on its own thread; it answers 200 until
    /// told otherwise.
    pub fn start() -> Function {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let f = Function {
            url: format!("http://127.0.0.1:{port}/queue"),
            received: Arc::default(),
            script: Arc::new(Mutex::new(Arc::new(|_: &Value| Answer::ok()))),
            in_flight: Arc::default(),
            max_in_flight: Arc::default(),
        };
        let shared = web::Data::new(Shared { f: f.clone() });
        std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                HttpServer::new(move || {
                    App::new()
                        .app_data(shared.clone())
                        .default_service(web::to(handle))
                })
                .workers(1)
                .listen(listener)
                .unwrap()
                .run()
                .await
            })
        });
        f
    }

    pub fn answer_with(&self, script: impl Fn(&Value) -> Answer + Send + Sync + 'static) {
        *self.script.lock().unwrap() = Arc::new(script);
    }

    pub fn batches(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Every delivered message: (id, attempts, body).
    pub fn messages(&self) -> Vec<(String, u64, Value)> {
        self.batches()
            .iter()
            .flat_map(|b| b.body["messages"].as_array().cloned().unwrap_or_default())
            .map(|m| {
                (
                    m["id"].as_str().unwrap().to_owned(),
                    m["attempts"].as_u64().unwrap(),
                    m["body"].clone(),
                )
            })
            .collect()
    }

    /// Waits until `pred` holds over the received batches, or panics.
    pub async fn wait_for(&self, what: &str, timeout: Duration, pred: impl Fn(&[Received]) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            if pred(&self.batches()) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; got {:#?}",
                self.batches().iter().map(|b| &b.body).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
