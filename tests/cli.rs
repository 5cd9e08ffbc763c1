//! The command-line client against a real server.

mod common;

use std::process::Command;

use common::Server;
use serde_json::Value;

fn hopper(s: &Server, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args(args)
        .env("HOPPER_URL", s.root())
        .env("HOPPER_TOKEN", &s.token)
        .env("HOPPER_ACCOUNT", "cli-acct")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_cli_drives_queues_messages_tokens_and_functions() {
    let s = Server::start().await;
    let run = |args: &'static [&'static str]| {
        let (ok, out, err) = hopper(&s, args);
        assert!(ok, "hopper {args:?} failed: {err}{out}");
        out
    };
    assert!(run(&["queues", "create", "work", "--delivery-delay-secs", "0"]).contains("Created queue work"));
    let list = run(&["queues", "list"]);
    assert!(
        list.lines().next().unwrap().starts_with("name"),
        "a table with a header: {list}"
    );
    assert!(list.contains("work"));
    run(&[
        "queues",
        "consumer",
        "http",
        "add",
        "work",
        "--batch-size",
        "10",
        "--message-retries",
        "3",
        "--visibility-timeout-secs",
        "30",
        "--retry-delay-secs",
        "5",
    ]);
    run(&["send", "work", r#"{"hello": "cli"}"#]);
    run(&["send", "work", "plain words", "--content-type", "text"]);
    let info = run(&["queues", "info", "work"]);
    assert!(
        info.contains("http_pull") && info.contains("Backlog:      2 messages"),
        "{info}"
    );
    let pulled: Value = serde_json::from_str(&run(&["pull", "work", "--json"])).unwrap();
    let msgs = pulled["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2);
    let leases: Vec<String> = msgs
        .iter()
        .map(|m| m["lease_id"].as_str().unwrap().to_owned())
        .collect();
    let (ok, out, err) = hopper(
        &s,
        &[
            "ack",
            "work",
            &leases[0],
            "--retry",
            &leases[1],
            "--retry-delay-secs",
            "0",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.contains("Acked 1, retried 1"), "{out}");
    let table = run(&["pull", "work"]);
    assert!(
        table.contains("plain words"),
        "text bodies print as text: {table}"
    );
    run(&["queues", "pause-delivery", "work"]);
    let (ok, _, err) = hopper(&s, &["pull", "work"]);
    assert!(
        !ok && err.contains("queue_delivery_paused") && err.contains("11005"),
        "{err}"
    );
    run(&["queues", "resume-delivery", "work"]);
    let (ok, _, err) = hopper(&s, &["queues", "purge", "work"]);
    assert!(!ok && err.contains("--force"), "{err}");
    run(&["queues", "purge", "work", "--force"]);
    run(&["queues", "consumer", "http", "remove", "work"]);

    run(&["functions", "put", "thumb", "http://127.0.0.1:9/x"]);
    assert!(run(&["functions", "list"]).contains("thumb"));
    run(&[
        "queues",
        "consumer",
        "add",
        "work",
        "thumb",
        "--batch-size",
        "5",
        "--batch-timeout",
        "2",
        "--max-concurrency",
        "2",
    ]);
    let q: Value = serde_json::from_str(&run(&["queues", "info", "work", "--json"])).unwrap();
    assert_eq!(q["queue"]["consumers"][0]["settings"]["max_wait_time_ms"], 2000);
    run(&["queues", "consumer", "remove", "work", "thumb"]);
    run(&["functions", "delete", "thumb"]);

    let created: Value = serde_json::from_str(&run(&[
        "tokens",
        "create",
        "reader",
        "--scope",
        "queues_read",
        "--json",
    ]))
    .unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    assert!(created["value"].as_str().unwrap().starts_with("hopper_"));
    let tokens = run(&["tokens", "list"]);
    assert!(tokens.contains("reader") && !tokens.contains(created["value"].as_str().unwrap()));
    let (ok, _, err) = hopper(&s, &["tokens", "revoke", &id]);
    assert!(ok, "{err}");
    run(&["queues", "delete", "work"]);
    assert!(!run(&["queues", "list"]).contains("work"));
}

#[tokio::test]
async fn the_cli_fails_clearly() {
    let s = Server::start().await;
    let (ok, _, err) = hopper(&s, &["queues", "info", "ghost"]);
    assert!(!ok && err.contains("queue \"ghost\" not found"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args(["queues", "list", "--token", "wrong"])
        .env("HOPPER_URL", s.root())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("refused the token") && err.contains("401"),
        "{err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args(["queues", "list", "--url", "http://127.0.0.1:9", "--token", "x"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("cannot reach the server"),
        "{err}"
    );
}
