mod common;

use common::Server;
use serde_json::json;

#[tokio::test]
async fn send_pull_ack_roundtrip() {
    let s = Server::start().await;
    let q = s.create_queue("smoke", json!({})).await;
    s.add_pull_consumer(&q, json!({}), None).await;
    let (status, _) = s.send(&q, json!({"body": {"n": 1}})).await;
    assert_eq!(status, 200);
    let pulled = s.pull(&q, json!({})).await;
    let msgs = pulled["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 1);
    assert_eq!(common::decode_json_body(&msgs[0]["body"]), json!({"n": 1}));
    let acked = s
        .ack(&q, json!({"acks": [{"lease_id": msgs[0]["lease_id"]}]}))
        .await;
    assert_eq!(acked["ackCount"], 1);
    assert_eq!(s.inspect(&q).await["messages"]["total"], 0);
}
