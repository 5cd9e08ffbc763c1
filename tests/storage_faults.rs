//! Storage faults: a full disk makes sends fail with 507 and a clear
//! message, never a corrupt store, and the queue carries on once space
//! returns; a damaged store file is reported by name at start while the
//! other queues serve.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::Server;
use serde_json::{json, Value};

/// A small tmpfs, unmounted on drop. Needs root (as CI and the dev
/// machines run); the test fails loudly rather than skip without it.
struct SmallDisk {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk");
        std::fs::create_dir(&path).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mounting a small tmpfs needs root: this test simulates a full disk with it"
        );
        SmallDisk { path, _dir: dir }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

fn fill(path: &Path, bytes: usize) {
    let chunk = vec![0xA5u8; 64 * 1024];
    let mut f = std::fs::File::create(path).unwrap();
    let mut written = 0;
    use std::io::Write;
    while written < bytes {
        if f.write_all(&chunk).is_err() {
            break;
        }
        written += chunk.len();
    }
    let _ = f.sync_all();
}

async fn backlog(s: &Server, q: &str) -> u64 {
    let (_, m) = s.get(&format!("/queues/{q}/metrics")).await;
    m["result"]["backlog_count"].as_u64().unwrap_or(u64::MAX)
}

#[tokio::test]
async fn a_full_disk_fails_sends_with_507_and_recovers_when_space_returns() {
    let disk = SmallDisk::mount("24m");
    let data = disk.path.join("data");
    let mut s = Server::start_in(&data, Vec::new()).await;
    let q = s.create_queue("tight", json!({})).await;
    // leave only a few MiB free
    let filler = disk.path.join("filler");
    fill(&filler, 17 * 1024 * 1024);
    let batch = json!({"messages": (0..100).map(|i| json!({"body": format!("{i:0>1000}"), "content_type": "text"})).collect::<Vec<_>>()});
    let mut confirmed = 0u64;
    let mut failure: Option<(u16, Value)> = None;
    for _ in 0..400 {
        let (status, v) = s
            .post(&format!("/queues/{q}/messages/batch"), batch.clone())
            .await;
        if status == 200 {
            confirmed += 1;
        } else {
            failure = Some((status, v));
            break;
        }
    }
    let (status, v) = failure.expect("the disk never filled up");
    eprintln!("disk full after {confirmed} confirmed batches: {status} {v}");
    assert_eq!(status, 507, "{v}");
    assert_eq!(v["errors"][0]["code"], 10251, "{v}");
    assert!(
        v["errors"][0]["message"].as_str().unwrap().contains("tight"),
        "{v}"
    );
    assert!(confirmed > 0);
    // space returns: the queue carries on with everything confirmed
    std::fs::remove_file(&filler).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, v) = s
            .post(&format!("/queues/{q}/messages/batch"), batch.clone())
            .await;
        if status == 200 {
            confirmed += 1;
            break;
        }
        assert!(Instant::now() < deadline, "never recovered: {status} {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(backlog(&s, &q).await, confirmed * 100);
    s.kill9();
    s.spawn().await;
    assert_eq!(
        backlog(&s, &q).await,
        confirmed * 100,
        "the store is intact after the fault and a crash"
    );
}

#[tokio::test]
async fn a_damaged_store_is_named_at_start_and_the_other_queues_serve() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = Server::start_in(tmp.path(), Vec::new()).await;
    let broken = s.create_queue("broken", json!({})).await;
    let fine = s.create_queue("fine", json!({})).await;
    for q in [&broken, &fine] {
        let (status, _) = s
            .post(
                &format!("/queues/{q}/messages/batch"),
                json!({"messages": (0..50).map(|i| json!({"body": i})).collect::<Vec<_>>()}),
            )
            .await;
        assert_eq!(status, 200);
    }
    assert!(s.terminate().success());
    // scribble over the store's header and first pages
    let path = tmp.path().join("queues").join(format!("{broken}.redb"));
    let mut bytes = std::fs::read(&path).unwrap();
    for (i, b) in bytes.iter_mut().take(64 * 1024).enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(7);
    }
    std::fs::write(&path, bytes).unwrap();
    s.spawn().await;
    assert_eq!(backlog(&s, &fine).await, 50, "the healthy queue serves");
    let (status, v) = s.get(&format!("/queues/{broken}/metrics")).await;
    assert_eq!(status, 500, "{v}");
    let message = v["errors"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("broken") && message.contains(&broken),
        "the error names the queue and its file: {message}"
    );
    let ready: Value = s
        .client
        .get(format!("{}/readyz", s.root()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        ready["failed"],
        json!([format!("{}/broken", common::ACCOUNT)]),
        "{ready}"
    );
}
