//! Store format upgrades: a data dir written by format 1 is upgraded at
//! start with everything in it intact; a store from a newer format is
//! refused with a clear error while the other queues still serve.

mod common;

use std::path::Path;

use common::Server;
use serde_json::json;

const FIXTURE_QUEUE: &str = "744d2bb2eb0f40368e8154aad8a265d2";

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn fixture() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/data-v1"),
        tmp.path(),
    );
    tmp
}

async fn call(
    s: &Server,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let url = format!("{}/client/v4/accounts/fixture{path}", s.root());
    s.call_as(&s.token.clone(), method, &url, body).await
}

#[tokio::test]
async fn a_format_1_store_is_upgraded_with_everything_in_it() {
    let tmp = fixture();
    let s = Server::start_in(tmp.path(), Vec::new()).await;
    let q = format!("/queues/{FIXTURE_QUEUE}");
    let (status, inspect) = call(&s, "GET", &format!("{q}/inspect"), None).await;
    assert_eq!(status, 200, "{inspect}");
    let r = &inspect["result"];
    assert_eq!(r["store"]["format_version"], 2);
    assert_eq!(r["messages"]["total"], 4, "{r}");
    assert_eq!(r["messages"]["delayed"], 1, "the day-long delay survived: {r}");
    let (_, consumers) = call(&s, "GET", &format!("{q}/consumers"), None).await;
    assert_eq!(consumers["result"][0]["settings"]["max_retries"], 7);
    let (_, pulled) = call(
        &s,
        "POST",
        &format!("{q}/messages/pull"),
        Some(json!({"batch_size": 10})),
    )
    .await;
    let msgs = pulled["result"]["messages"].as_array().unwrap().clone();
    assert_eq!(msgs.len(), 3, "{pulled}");
    let first = msgs
        .iter()
        .find(|m| m["body"] == "first")
        .expect("the text message");
    assert_eq!(first["attempts"], 2, "attempts from format 1 carried over");
    let bytes = msgs
        .iter()
        .find(|m| m["metadata"]["CF-Content-Type"] == "bytes")
        .unwrap();
    assert_eq!(bytes["body"], "AAEC");
    // and it keeps working as a format 2 store across restarts
    drop(s);
    let s = Server::start_in(tmp.path(), Vec::new()).await;
    let (_, m) = call(&s, "GET", &format!("{q}/metrics"), None).await;
    assert_eq!(m["result"]["backlog_count"], 4);
}

#[tokio::test]
async fn a_store_from_a_newer_format_is_refused_and_the_rest_still_serve() {
    let tmp = fixture();
    // mark the queue store as written by a future version
    {
        let path = tmp.path().join("queues").join(format!("{FIXTURE_QUEUE}.redb"));
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let def: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");
            txn.open_table(def)
                .unwrap()
                .insert("format_version", 99u64)
                .unwrap();
        }
        txn.commit().unwrap();
    }
    let s = Server::start_in(tmp.path(), Vec::new()).await;
    let (status, v) = call(&s, "GET", &format!("/queues/{FIXTURE_QUEUE}/metrics"), None).await;
    assert_eq!(status, 500, "{v}");
    let message = v["errors"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("format version 99") && message.contains("upgrade Hopper"),
        "{message}"
    );
    let ready: serde_json::Value = s
        .client
        .get(format!("{}/readyz", s.root()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["failed"], json!(["fixture/legacy"]), "{ready}");
    // other queues are unaffected
    let (status, v) = call(&s, "POST", "/queues", Some(json!({"queue_name": "fresh"}))).await;
    assert_eq!(status, 200, "{v}");
    let id = v["result"]["queue_id"].as_str().unwrap().to_owned();
    let (status, _) = call(
        &s,
        "POST",
        &format!("/queues/{id}/messages"),
        Some(json!({"body": 1})),
    )
    .await;
    assert_eq!(status, 200);
}
