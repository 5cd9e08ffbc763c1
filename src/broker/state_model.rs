//! Model-based property test: random operation sequences, restarts
//! included, against the real `QueueState` + `QueueStore` (mirroring the
//! store ops the queue actor issues) and a deliberately naive model. After
//! every step they must agree on every message's attempts, visibility and
//! lease; a message leaves only through ack, drop after its last delivery,
//! retention or purge; attempts never decrease; no message is leased twice
//! at once.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;

use super::state::{QueueState, RetryOutcome};
use crate::store::{ContentType, MessageRecord, QueueStore, StoreOp};

const MAX_DELIVERIES: u32 = 3;

#[derive(Debug, Clone)]
enum Op {
    Send(u64),
    Lease(usize, u64),
    Ack(usize),
    Retry(usize, u64),
    Extend(usize, u64),
    Tick(u64),
    Expire(u64),
    Purge,
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..40).prop_map(Op::Send),
        3 => (1usize..4, 1u64..60).prop_map(|(n, v)| Op::Lease(n, v)),
        2 => (0usize..12).prop_map(Op::Ack),
        2 => (0usize..12, 0u64..30).prop_map(|(i, d)| Op::Retry(i, d)),
        1 => (0usize..12, 1u64..60).prop_map(|(i, v)| Op::Extend(i, v)),
        3 => (0u64..40).prop_map(Op::Tick),
        1 => (30u64..300).prop_map(Op::Expire),
        1 => Just(Op::Purge),
        2 => Just(Op::Restart),
    ]
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ModelMsg {
    ts: u64,
    visible_at: u64,
    attempts: u32,
    leased: bool,
}

/// The naive reference: a map scanned in full at every step.
#[derive(Default)]
struct Model {
    msgs: BTreeMap<u64, ModelMsg>,
    next_seq: u64,
}

impl Model {
    fn live_lease(&self, seq: u64, attempt: u32, now: u64) -> bool {
        self.msgs
            .get(&seq)
            .is_some_and(|m| m.leased && m.attempts == attempt && m.visible_at > now)
    }

    /// Expired leases end; messages out of deliveries are dropped.
    fn settle(&mut self, now: u64) {
        for m in self.msgs.values_mut() {
            if m.leased && m.visible_at <= now {
                m.leased = false;
            }
        }
        self.msgs
            .retain(|_, m| !(!m.leased && m.visible_at <= now && m.attempts >= MAX_DELIVERIES));
    }

    fn lease(&mut self, now: u64, n: usize, vis: u64) -> Vec<u64> {
        self.settle(now);
        let mut ready: Vec<(u64, u64)> = self
            .msgs
            .iter()
            .filter(|(_, m)| !m.leased && m.visible_at <= now)
            .map(|(s, m)| (m.visible_at, *s))
            .collect();
        ready.sort();
        let picked: Vec<u64> = ready.into_iter().take(n).map(|(_, s)| s).collect();
        for s in &picked {
            let m = self.msgs.get_mut(s).unwrap();
            m.attempts += 1;
            m.leased = true;
            m.visible_at = now + vis;
        }
        picked
    }
}

struct Real {
    state: QueueState,
    store: Option<QueueStore>,
    path: std::path::PathBuf,
}

impl Real {
    fn commit(&mut self, ops: Vec<StoreOp>) {
        if ops.is_empty() {
            return;
        }
        let next = self.state.next_seq();
        self.store.as_ref().unwrap().commit(ops, next).unwrap();
    }

    /// Reads the on-disk backlog in, chunk by chunk, as the actor does.
    fn load_all(&mut self, now: u64) {
        while let Some(from) = self.state.unloaded_from() {
            let chunk = self
                .store
                .as_ref()
                .unwrap()
                .read_records(from, self.state.load_chunk_len())
                .unwrap();
            let progressed = !chunk.records.is_empty();
            assert!(self.state.apply_load(from, chunk, now));
            if !progressed {
                break;
            }
        }
    }

    fn drop_all(&mut self, seqs: Vec<u64>, ops: &mut Vec<StoreOp>) {
        for seq in seqs {
            if self.state.finish_transit(seq).is_some() {
                ops.push(StoreOp::Delete { seq });
            }
        }
    }
}

fn effective(r: &MessageRecord, now: u64) -> (u32, bool, u64) {
    let live = r.leased && r.visible_at_ms > now;
    (r.attempts, live, r.visible_at_ms)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn the_queue_matches_a_naive_model_across_restarts(
        ops in proptest::collection::vec(op(), 1..60),
        resident_limit in prop_oneof![Just(usize::MAX), 1usize..6],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.redb");
        let (store, recovered) = QueueStore::open(&path, "q", resident_limit).unwrap();
        let mut real = Real { state: QueueState::recover(recovered, 0, resident_limit), store: Some(store), path };
        let mut model = Model::default();
        let mut now = 1_000u64;
        let mut leases: Vec<(u64, u32)> = Vec::new();
        let mut seen_attempts: HashMap<u64, u32> = HashMap::new();
        for op in ops {
            let mut ops = Vec::new();
            match op {
                Op::Send(delay) => {
                    let record = MessageRecord {
                        id: u128::from(model.next_seq),
                        timestamp_ms: now,
                        visible_at_ms: now + delay,
                        attempts: 0,
                        size: 1,
                        content_type: ContentType::Json,
                        leased: false,
                    };
                    let seq = real.state.insert(record, now);
                    prop_assert_eq!(seq, model.next_seq);
                    ops.push(StoreOp::Insert { seq, record, body: b"1".to_vec() });
                    model.msgs.insert(seq, ModelMsg { ts: now, visible_at: now + delay, attempts: 0, leased: false });
                    model.next_seq += 1;
                }
                Op::Lease(n, vis) => {
                    // the actor ticks (promotes) before it leases
                    let exhausted = real.state.promote(now, MAX_DELIVERIES);
                    real.drop_all(exhausted, &mut ops);
                    let (got, exhausted) = real.state.lease(now, n, vis, MAX_DELIVERIES);
                    real.drop_all(exhausted, &mut ops);
                    let mut got_seqs: Vec<u64> = got.iter().map(|(s, _)| *s).collect();
                    for (seq, record) in &got {
                        prop_assert!(!leases.iter().any(|(s, a)| s == seq && *a == record.attempts), "leased twice");
                        leases.push((*seq, record.attempts));
                        ops.push(StoreOp::Update { seq: *seq, record: *record });
                    }
                    let mut want = model.lease(now, n, vis);
                    got_seqs.sort();
                    want.sort();
                    prop_assert_eq!(got_seqs, want, "leased different messages");
                }
                Op::Ack(i) => if let Some(&(seq, _)) = leases.get(i) {
                    if real.state.ack(seq).is_ok() {
                        ops.push(StoreOp::Delete { seq });
                    }
                    model.msgs.remove(&seq);
                },
                Op::Retry(i, delay) => if let Some(&(seq, attempt)) = leases.get(i) {
                    let model_live = model.live_lease(seq, attempt, now);
                    match real.state.retry(seq, attempt, now, delay, MAX_DELIVERIES) {
                        Ok(RetryOutcome::Scheduled(record)) => ops.push(StoreOp::Update { seq, record }),
                        Ok(RetryOutcome::Exhausted) => real.drop_all(vec![seq], &mut ops),
                        Err(_) => {}
                    }
                    if model_live {
                        let m = model.msgs.get_mut(&seq).unwrap();
                        m.leased = false;
                        if m.attempts >= MAX_DELIVERIES {
                            model.msgs.remove(&seq);
                        } else {
                            m.visible_at = now + delay;
                        }
                    }
                },
                Op::Extend(i, vis) => if let Some(&(seq, attempt)) = leases.get(i) {
                    if let Ok(record) = real.state.extend(seq, attempt, now, vis) {
                        ops.push(StoreOp::Update { seq, record });
                    }
                    if model.live_lease(seq, attempt, now) {
                        model.msgs.get_mut(&seq).unwrap().visible_at = now + vis;
                    }
                },
                Op::Tick(dt) => {
                    now += dt;
                    let exhausted = real.state.promote(now, MAX_DELIVERIES);
                    real.drop_all(exhausted, &mut ops);
                    model.settle(now);
                }
                Op::Expire(retention) => {
                    for seq in real.state.expire(now, retention) {
                        ops.push(StoreOp::Delete { seq });
                    }
                    let cutoff = now.saturating_sub(retention);
                    model.msgs.retain(|_, m| m.ts > cutoff);
                }
                Op::Purge => {
                    real.state.purge();
                    ops.push(StoreOp::DeleteAll);
                    model.msgs.clear();
                }
                Op::Restart => {
                    drop(real.store.take());
                    let (store, recovered) = QueueStore::open(&real.path, "q", resident_limit).unwrap();
                    real.state = QueueState::recover(recovered, now, resident_limit);
                    real.store = Some(store);
                }
            }
            real.commit(ops);
            real.state.check_invariants();
            // the actor reads the on-disk backlog in before it runs dry
            real.load_all(now);
            real.state.check_invariants();
            // after settling both sides, every message agrees
            let exhausted = real.state.promote(now, MAX_DELIVERIES);
            let mut ops = Vec::new();
            real.drop_all(exhausted, &mut ops);
            real.commit(ops);
            model.settle(now);
            let real_seqs: Vec<u64> = {
                let mut v: Vec<u64> = model.msgs.keys().copied().filter(|s| real.state.get(*s).is_some()).collect();
                v.sort();
                v
            };
            prop_assert_eq!(real.state.len(), model.msgs.len(), "message counts differ");
            prop_assert_eq!(real_seqs.len(), model.msgs.len(), "different messages");
            for (seq, m) in &model.msgs {
                let r = real.state.get(*seq).unwrap();
                prop_assert_eq!(effective(r, now), (m.attempts, m.leased && m.visible_at > now, m.visible_at), "message {} differs", seq);
                let prev = seen_attempts.insert(*seq, r.attempts).unwrap_or(0);
                prop_assert!(r.attempts >= prev, "attempts went down");
                prop_assert!(r.attempts <= MAX_DELIVERIES);
            }
        }
    }
}
