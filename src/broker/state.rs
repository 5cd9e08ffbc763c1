//! The queue's in-memory state machine: which messages are ready, delayed,
//! leased or on their way to a dead-letter queue. Pure: no I/O, no clock
//! (callers pass `now`), so property tests can drive it directly.
//!
//! Invariants (checked by `check_invariants` in tests):
//! - every message is in exactly one of `ready`, `pending`, `transit`;
//! - `ready` holds unleased messages with `visible_at <= now` as of the last
//!   `promote`; `pending` holds delayed or leased ones keyed by the time they
//!   become visible (for a lease, its deadline);
//! - `by_age` indexes every message by publish time (retention);
//! - `leased` counts records with `leased == true`; `bytes` sums sizes.
//! - Past `resident_limit` records, new messages stay on disk only
//!   (`unloaded`: every stored message with `seq >= unloaded.from` that
//!   `messages` does not hold). None of them has ever been delivered, so
//!   counts are all memory needs; `apply_load` brings them in, in arrival
//!   order, when the ready set runs low or retention comes due. This keeps
//!   memory flat however deep the backlog.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::store::{MessageRecord, RecordChunk, Recovered, UnloadedSummary};

/// Records read from disk per load. Large enough that a consumer pulling
/// batches of 100 rarely waits on one, small enough to read in a few ms.
const LOAD_CHUNK: usize = 8192;

/// Why a retry or extension had no effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseProblem {
    /// No such message: acked, expired, purged or dead-lettered.
    Gone,
    /// The lease expired or a newer delivery superseded it.
    Stale,
    /// The message used its last delivery and is on its way to the
    /// dead-letter queue: acking it here would not stop that.
    DeadLettering,
}

impl LeaseProblem {
    pub fn describe(self) -> &'static str {
        match self {
            LeaseProblem::Gone => "message not found: already acknowledged, expired, purged or dead-lettered",
            LeaseProblem::Stale => "lease expired or superseded by a newer delivery; no effect",
            LeaseProblem::DeadLettering => {
                "message used its last delivery and is being moved to the dead-letter queue; ack it there"
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryOutcome {
    /// Scheduled for redelivery; persist the new record.
    Scheduled(MessageRecord),
    /// Out of deliveries: now in transit to the dead-letter queue (or drop).
    Exhausted,
}

#[derive(Debug)]
pub struct QueueState {
    messages: HashMap<u64, MessageRecord>,
    ready: BTreeSet<(u64, u64)>,
    pending: BTreeSet<(u64, u64)>,
    transit: HashSet<u64>,
    by_age: BTreeSet<(u64, u64)>,
    leased: usize,
    bytes: u64,
    next_seq: u64,
    /// The backlog beyond what is held in memory (see the module docs).
    unloaded: UnloadedSummary,
    /// Delivered messages recovered into memory with `seq >= unloaded.from`:
    /// a chunk read must not bring them in a second time.
    resident_above: BTreeSet<u64>,
    resident_limit: usize,
}

impl Default for QueueState {
    fn default() -> Self {
        QueueState::new(usize::MAX)
    }
}

impl QueueState {
    /// An empty queue that keeps at most `resident_limit` never-delivered
    /// records in memory.
    pub fn new(resident_limit: usize) -> Self {
        QueueState {
            messages: HashMap::new(),
            ready: BTreeSet::new(),
            pending: BTreeSet::new(),
            transit: HashSet::new(),
            by_age: BTreeSet::new(),
            leased: 0,
            bytes: 0,
            next_seq: 0,
            unloaded: UnloadedSummary::default(),
            resident_above: BTreeSet::new(),
            resident_limit: resident_limit.max(1),
        }
    }

    pub fn recover(recovered: Recovered, now: u64, resident_limit: usize) -> Self {
        let mut state = QueueState::new(resident_limit);
        state.next_seq = recovered.next_seq;
        state.messages.reserve(recovered.records.len());
        for (seq, record) in recovered.records {
            state.index(seq, record, now);
            state.next_seq = state.next_seq.max(seq + 1);
        }
        state.unloaded = recovered.unloaded;
        if state.unloaded.count > 0 {
            state.resident_above = recovered.resident_above.into_iter().collect();
            state.next_seq = state.next_seq.max(state.unloaded.from + 1);
        }
        state
    }

    /// Where the next chunk read should start, when one is due: the ready
    /// set is running low, or the oldest unloaded message has outlived the
    /// retention period and must come in to be expired.
    pub fn load_due(&self, now: u64, retention_ms: u64) -> Option<u64> {
        let from = self.unloaded_from()?;
        let low = self.ready.len() < (self.resident_limit / 2).max(1);
        let expiring = self
            .unloaded
            .oldest_timestamp_ms
            .is_some_and(|ts| ts.saturating_add(retention_ms) <= now);
        (low || expiring).then_some(from)
    }

    /// Where the on-disk backlog starts, if there is one.
    pub fn unloaded_from(&self) -> Option<u64> {
        (self.unloaded.count > 0).then_some(self.unloaded.from)
    }

    /// How many records one load asks for.
    pub fn load_chunk_len(&self) -> usize {
        self.resident_limit.clamp(1, LOAD_CHUNK)
    }

    /// Indexes a chunk read from `from`. Returns whether it applied: a chunk
    /// that a purge (or an earlier chunk) overtook is ignored.
    pub fn apply_load(&mut self, from: u64, chunk: RecordChunk, now: u64) -> bool {
        if self.unloaded.count == 0 || from != self.unloaded.from {
            return false;
        }
        let mut last = None;
        for (seq, record) in chunk.records {
            if self.unloaded.count == 0 {
                break;
            }
            last = Some(seq);
            if seq < from || self.resident_above.remove(&seq) || self.messages.contains_key(&seq) {
                continue;
            }
            self.unloaded.count -= 1;
            self.unloaded.bytes -= u64::from(record.size);
            self.index(seq, record, now);
        }
        match (chunk.next, last) {
            (Some((seq, timestamp_ms)), _) => {
                self.unloaded.from = seq;
                self.unloaded.oldest_timestamp_ms = Some(timestamp_ms);
            }
            // The rest is still being committed; its publish time is no
            // earlier than the one kept, so that bound stays safe.
            (None, Some(seq)) => self.unloaded.from = seq + 1,
            (None, None) => {}
        }
        if self.unloaded.count == 0 {
            self.unloaded = UnloadedSummary::default();
            self.resident_above.clear();
        } else {
            self.resident_above = self.resident_above.split_off(&self.unloaded.from);
        }
        true
    }

    /// Messages stored on disk only.
    pub fn unloaded_count(&self) -> u64 {
        self.unloaded.count
    }

    fn index(&mut self, seq: u64, record: MessageRecord, now: u64) {
        if record.leased {
            self.leased += 1;
        }
        self.bytes += u64::from(record.size);
        self.by_age.insert((record.timestamp_ms, seq));
        if !record.leased && record.visible_at_ms <= now {
            self.ready.insert((record.visible_at_ms, seq));
        } else {
            self.pending.insert((record.visible_at_ms, seq));
        }
        self.messages.insert(seq, record);
    }

    /// Takes a message out of every index; returns its record.
    fn unindex(&mut self, seq: u64) -> Option<MessageRecord> {
        let record = self.messages.remove(&seq)?;
        let key = (record.visible_at_ms, seq);
        if !self.transit.remove(&seq) && !self.ready.remove(&key) {
            self.pending.remove(&key);
        }
        self.by_age.remove(&(record.timestamp_ms, seq));
        if record.leased {
            self.leased -= 1;
        }
        self.bytes -= u64::from(record.size);
        Some(record)
    }

    /// Moves a message out of ready/pending into transit (dead-lettering).
    fn move_to_transit(&mut self, seq: u64) {
        if let Some(record) = self.messages.get_mut(&seq) {
            let key = (record.visible_at_ms, seq);
            if !self.ready.remove(&key) {
                self.pending.remove(&key);
            }
            if record.leased {
                record.leased = false;
                self.leased -= 1;
            }
            self.transit.insert(seq);
        }
    }

    /// Adds a new message; returns its sequence number. Past the resident
    /// limit, or behind messages still on disk, it joins the unloaded part.
    pub fn insert(&mut self, record: MessageRecord, now: u64) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        if self.unloaded.count > 0 || self.messages.len() >= self.resident_limit {
            let u = &mut self.unloaded;
            if u.count == 0 {
                u.from = seq;
            }
            u.count += 1;
            u.bytes += u64::from(record.size);
            u.oldest_timestamp_ms = Some(
                u.oldest_timestamp_ms
                    .map_or(record.timestamp_ms, |t| t.min(record.timestamp_ms)),
            );
        } else {
            self.index(seq, record, now);
        }
        seq
    }

    /// Makes due messages visible: delays that ended, leases that expired.
    /// Returns messages whose expired lease used their last delivery; they
    /// are now in transit and the caller dead-letters or drops them.
    pub fn promote(&mut self, now: u64, max_deliveries: u32) -> Vec<u64> {
        let mut exhausted = Vec::new();
        while let Some(&(visible_at, seq)) = self.pending.first() {
            if visible_at > now {
                break;
            }
            self.pending.pop_first();
            let Some(record) = self.messages.get_mut(&seq) else {
                continue;
            };
            if record.leased {
                record.leased = false;
                self.leased -= 1;
            }
            if record.attempts >= max_deliveries {
                self.transit.insert(seq);
                exhausted.push(seq);
            } else {
                self.ready.insert((visible_at, seq));
            }
        }
        exhausted
    }

    /// Leases up to `limit` ready messages until `now + visibility_ms`.
    /// Returns the leased (seq, record) pairs, with attempts already counted,
    /// and messages found to be out of deliveries (now in transit).
    pub fn lease(
        &mut self,
        now: u64,
        limit: usize,
        visibility_ms: u64,
        max_deliveries: u32,
    ) -> (Vec<(u64, MessageRecord)>, Vec<u64>) {
        let mut leased = Vec::new();
        let mut exhausted = Vec::new();
        while leased.len() < limit {
            let Some((_, seq)) = self.ready.pop_first() else {
                break;
            };
            let Some(record) = self.messages.get_mut(&seq) else {
                continue;
            };
            if record.attempts >= max_deliveries {
                self.transit.insert(seq);
                exhausted.push(seq);
                continue;
            }
            record.attempts += 1;
            record.leased = true;
            record.visible_at_ms = now + visibility_ms;
            self.leased += 1;
            self.pending.insert((record.visible_at_ms, seq));
            leased.push((seq, *record));
        }
        (leased, exhausted)
    }

    /// Acknowledges (deletes) a message whatever its lease: late acks count.
    /// A message already leaving for the dead-letter queue is refused, so an
    /// ack never covers a message that will be delivered elsewhere.
    pub fn ack(&mut self, seq: u64) -> Result<MessageRecord, LeaseProblem> {
        if self.transit.contains(&seq) {
            return Err(LeaseProblem::DeadLettering);
        }
        self.unindex(seq).ok_or(LeaseProblem::Gone)
    }

    fn live_lease(&self, seq: u64, attempt: u32, now: u64) -> Result<MessageRecord, LeaseProblem> {
        let record = *self.messages.get(&seq).ok_or(LeaseProblem::Gone)?;
        if self.transit.contains(&seq) {
            return Err(LeaseProblem::Stale);
        }
        if !record.leased || record.attempts != attempt || record.visible_at_ms <= now {
            return Err(LeaseProblem::Stale);
        }
        Ok(record)
    }

    /// Gives a leased message back for redelivery after `delay_ms`.
    pub fn retry(
        &mut self,
        seq: u64,
        attempt: u32,
        now: u64,
        delay_ms: u64,
        max_deliveries: u32,
    ) -> Result<RetryOutcome, LeaseProblem> {
        let old = self.live_lease(seq, attempt, now)?;
        self.pending.remove(&(old.visible_at_ms, seq));
        self.leased -= 1;
        let Some(record) = self.messages.get_mut(&seq) else {
            return Err(LeaseProblem::Gone);
        };
        record.leased = false;
        if record.attempts >= max_deliveries {
            self.transit.insert(seq);
            return Ok(RetryOutcome::Exhausted);
        }
        record.visible_at_ms = now + delay_ms;
        let record = *record;
        if delay_ms == 0 {
            self.ready.insert((record.visible_at_ms, seq));
        } else {
            self.pending.insert((record.visible_at_ms, seq));
        }
        Ok(RetryOutcome::Scheduled(record))
    }

    /// Moves a live lease's deadline to `now + visibility_ms`.
    pub fn extend(
        &mut self,
        seq: u64,
        attempt: u32,
        now: u64,
        visibility_ms: u64,
    ) -> Result<MessageRecord, LeaseProblem> {
        let old = self.live_lease(seq, attempt, now)?;
        self.pending.remove(&(old.visible_at_ms, seq));
        let record = self.messages.get_mut(&seq).ok_or(LeaseProblem::Gone)?;
        record.visible_at_ms = now + visibility_ms;
        self.pending.insert((record.visible_at_ms, seq));
        Ok(*record)
    }

    /// Removes messages published at or before `now - retention_ms`, except
    /// those already on their way to a dead-letter queue.
    pub fn expire(&mut self, now: u64, retention_ms: u64) -> Vec<u64> {
        let cutoff = now.saturating_sub(retention_ms);
        let mut expired = Vec::new();
        let due: Vec<u64> = self
            .by_age
            .iter()
            .take_while(|(ts, _)| *ts <= cutoff)
            .map(|(_, seq)| *seq)
            .collect();
        for seq in due {
            if !self.transit.contains(&seq) && self.unindex(seq).is_some() {
                expired.push(seq);
            }
        }
        expired
    }

    /// Deletes every message. Returns how many there were.
    pub fn purge(&mut self) -> usize {
        let n = self.len();
        let next_seq = self.next_seq;
        *self = QueueState::new(self.resident_limit);
        self.next_seq = next_seq;
        n
    }

    /// Ready messages in delivery order, without leasing them.
    pub fn peek(&self, limit: usize) -> Vec<(u64, MessageRecord)> {
        self.ready
            .iter()
            .take(limit)
            .filter_map(|(_, seq)| self.messages.get(seq).map(|r| (*seq, *r)))
            .collect()
    }

    /// Marks messages as leaving for the dead-letter queue (see `lease`).
    pub fn begin_transit(&mut self, seqs: &[u64]) {
        for &seq in seqs {
            self.move_to_transit(seq);
        }
    }

    /// The dead-letter queue has the message: forget it here.
    pub fn finish_transit(&mut self, seq: u64) -> Option<MessageRecord> {
        if self.transit.contains(&seq) {
            self.unindex(seq)
        } else {
            None
        }
    }

    /// Dead-lettering failed: make the message visible again at `visible_at`.
    pub fn abort_transit(&mut self, seq: u64, visible_at: u64) {
        if self.transit.remove(&seq) {
            if let Some(record) = self.messages.get_mut(&seq) {
                record.visible_at_ms = visible_at;
                self.pending.insert((visible_at, seq));
            }
        }
    }

    pub fn get(&self, seq: u64) -> Option<&MessageRecord> {
        self.messages.get(&seq)
    }

    /// Every stored message, in memory or not.
    pub fn len(&self) -> usize {
        self.messages.len() + self.unloaded.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Messages whose records are in memory.
    pub fn resident_count(&self) -> usize {
        self.messages.len()
    }

    pub fn ready_count(&self) -> usize {
        self.ready.len()
    }

    pub fn leased_count(&self) -> usize {
        self.leased
    }

    pub fn delayed_count(&self) -> usize {
        self.pending.len() - self.leased
    }

    pub fn transit_count(&self) -> usize {
        self.transit.len()
    }

    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// When the oldest ready message became visible.
    pub fn oldest_ready_visible_at(&self) -> Option<u64> {
        self.ready.first().map(|(at, _)| *at)
    }

    pub fn bytes(&self) -> u64 {
        self.bytes + self.unloaded.bytes
    }

    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    pub fn oldest_timestamp(&self) -> Option<u64> {
        let resident = self.by_age.first().map(|(ts, _)| *ts);
        match (resident, self.unloaded.oldest_timestamp_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When the next delayed message or lease deadline comes due.
    pub fn next_visible_at(&self) -> Option<u64> {
        self.pending.first().map(|(at, _)| *at)
    }

    #[cfg(test)]
    pub fn check_invariants(&self) {
        let mut seen = HashSet::new();
        for (at, seq) in &self.ready {
            let r = &self.messages[seq];
            assert!(
                !r.leased && r.visible_at_ms == *at,
                "ready entry {seq} is consistent"
            );
            assert!(seen.insert(*seq), "{seq} indexed twice");
        }
        for (at, seq) in &self.pending {
            assert_eq!(self.messages[seq].visible_at_ms, *at);
            assert!(seen.insert(*seq), "{seq} indexed twice");
        }
        for seq in &self.transit {
            assert!(self.messages.contains_key(seq));
            assert!(seen.insert(*seq), "{seq} indexed twice");
        }
        assert_eq!(seen.len(), self.messages.len(), "every message indexed once");
        if self.unloaded.count == 0 {
            assert!(self.resident_above.is_empty());
        } else {
            assert!(self.resident_above.iter().all(|s| *s >= self.unloaded.from));
            assert!(self.unloaded.from < self.next_seq);
        }
        assert_eq!(self.by_age.len(), self.messages.len());
        assert_eq!(self.leased, self.messages.values().filter(|r| r.leased).count());
        assert_eq!(
            self.bytes,
            self.messages.values().map(|r| u64::from(r.size)).sum::<u64>()
        );
        assert!(self.messages.keys().all(|s| *s < self.next_seq));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ContentType;
    use proptest::prelude::*;

    fn rec(id: u128, now: u64, delay: u64) -> MessageRecord {
        MessageRecord {
            id,
            timestamp_ms: now,
            visible_at_ms: now + delay,
            attempts: 0,
            size: 10,
            content_type: ContentType::Json,
            leased: false,
        }
    }

    #[test]
    fn lease_ack_retry_cycle() {
        let mut s = QueueState::default();
        let a = s.insert(rec(1, 0, 0), 0);
        let b = s.insert(rec(2, 0, 100), 0);
        assert_eq!((s.ready_count(), s.delayed_count()), (1, 1));
        let (got, ex) = s.lease(0, 10, 1000, 4);
        assert!(ex.is_empty());
        assert_eq!(got.iter().map(|(q, _)| *q).collect::<Vec<_>>(), vec![a]);
        assert_eq!(got[0].1.attempts, 1);
        assert!(s.promote(100, 4).is_empty());
        let (got, _) = s.lease(100, 10, 1000, 4);
        assert_eq!(got[0].0, b);
        // retry with a stale attempt is refused, the live one works
        assert_eq!(s.retry(a, 7, 100, 0, 4), Err(LeaseProblem::Stale));
        assert!(matches!(s.retry(a, 1, 100, 0, 4), Ok(RetryOutcome::Scheduled(_))));
        assert_eq!(s.ready_count(), 1);
        assert!(s.ack(b).is_ok());
        assert_eq!(s.ack(b), Err(LeaseProblem::Gone));
        s.check_invariants();
    }

    #[test]
    fn expired_lease_with_last_delivery_goes_to_transit() {
        let mut s = QueueState::default();
        let a = s.insert(rec(1, 0, 0), 0);
        let (got, _) = s.lease(0, 1, 10, 1);
        assert_eq!(got.len(), 1);
        assert_eq!(s.promote(10, 1), vec![a]);
        assert_eq!(s.transit_count(), 1);
        assert!(s.lease(10, 1, 10, 1).0.is_empty());
        assert!(s.finish_transit(a).is_some());
        assert!(s.is_empty());
        s.check_invariants();
    }

    #[test]
    fn ready_order_is_visibility_then_arrival() {
        let mut s = QueueState::default();
        let late = s.insert(rec(1, 0, 50), 0);
        let first = s.insert(rec(2, 10, 0), 10);
        let second = s.insert(rec(3, 20, 0), 20);
        s.promote(100, 5);
        let order: Vec<u64> = s.peek(10).into_iter().map(|(q, _)| q).collect();
        assert_eq!(order, vec![first, second, late]);
    }

    fn chunk(records: Vec<(u64, MessageRecord)>) -> RecordChunk {
        RecordChunk { records, next: None }
    }

    #[test]
    fn a_deep_backlog_spills_to_disk_and_loads_back_in_order() {
        let mut s = QueueState::new(2);
        let seqs: Vec<u64> = (0..5).map(|i| s.insert(rec(i, 0, 0), 0)).collect();
        assert_eq!((s.resident_count(), s.unloaded_count(), s.len()), (2, 3, 5));
        assert_eq!(s.bytes(), 50);
        // ready is not low yet (2 >= 2/2)
        assert_eq!(s.load_due(0, u64::MAX), None);
        let (got, _) = s.lease(0, 2, 100, 4);
        assert_eq!(got.iter().map(|(q, _)| *q).collect::<Vec<_>>(), seqs[..2]);
        assert_eq!(s.load_due(0, u64::MAX), Some(2));
        assert!(s.apply_load(
            2,
            RecordChunk {
                records: vec![(2, rec(2, 0, 0))],
                next: Some((3, 0))
            },
            0
        ));
        assert_eq!((s.unloaded_count(), s.unloaded_from()), (2, Some(3)));
        // a stale chunk (from an overtaken read) is ignored
        assert!(!s.apply_load(2, chunk(vec![(2, rec(2, 0, 0))]), 0));
        assert!(s.apply_load(3, chunk(vec![(3, rec(3, 0, 0)), (4, rec(4, 0, 0))]), 0));
        assert_eq!((s.resident_count(), s.unloaded_count()), (5, 0));
        let (got, _) = s.lease(0, 10, 100, 4);
        assert_eq!(got.iter().map(|(q, _)| *q).collect::<Vec<_>>(), seqs[2..]);
        s.check_invariants();
    }

    #[test]
    fn a_delivered_message_recovered_above_the_backlog_is_not_loaded_twice() {
        let fresh = rec(0, 0, 0);
        let mut delivered = rec(5, 0, 0);
        delivered.attempts = 1;
        delivered.leased = true;
        delivered.visible_at_ms = 1_000;
        let recovered = Recovered {
            records: vec![(0, fresh), (5, delivered)],
            next_seq: 7,
            unloaded: UnloadedSummary {
                from: 1,
                count: 5,
                bytes: 50,
                oldest_timestamp_ms: Some(0),
            },
            resident_above: vec![5],
        };
        let mut s = QueueState::recover(recovered, 0, 1);
        assert_eq!(s.len(), 7);
        // the consumer acks its lease before the chunk arrives
        assert!(s.ack(5).is_ok());
        let on_disk: Vec<(u64, MessageRecord)> = (1..7).map(|q| (q, rec(q as u128, 0, 0))).collect();
        assert!(s.apply_load(1, chunk(on_disk), 0));
        assert!(s.get(5).is_none(), "an acked message came back");
        assert_eq!((s.len(), s.unloaded_count()), (6, 0));
        s.check_invariants();
    }

    #[test]
    fn purge_forgets_the_on_disk_backlog() {
        let mut s = QueueState::new(1);
        for i in 0..3 {
            s.insert(rec(i, 0, 0), 0);
        }
        assert_eq!(s.purge(), 3);
        assert!(s.is_empty());
        assert!(!s.apply_load(1, chunk(vec![(1, rec(1, 0, 0))]), 0));
        assert!(s.is_empty());
    }

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
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u64..50).prop_map(Op::Send),
            3 => (1usize..5, 1u64..100).prop_map(|(n, v)| Op::Lease(n, v)),
            2 => (0usize..20).prop_map(Op::Ack),
            2 => (0usize..20, 0u64..50).prop_map(|(i, d)| Op::Retry(i, d)),
            1 => (0usize..20, 1u64..100).prop_map(|(i, v)| Op::Extend(i, v)),
            3 => (0u64..60).prop_map(Op::Tick),
            1 => (50u64..500).prop_map(Op::Expire),
            1 => Just(Op::Purge),
        ]
    }

    proptest! {
        /// Random operation sequences keep the indexes consistent, never lease
        /// a message twice at once, never lower attempts, never exceed the
        /// delivery limit, and lose messages only through the allowed doors.
        #[test]
        fn random_sequences_keep_invariants(ops in proptest::collection::vec(op(), 1..120)) {
            const MAX: u32 = 3;
            let mut s = QueueState::default();
            let mut now = 0u64;
            let mut leases: Vec<(u64, u32)> = Vec::new();
            let mut attempts_seen: HashMap<u64, u32> = HashMap::new();
            for op in ops {
                let before: HashSet<u64> = s.messages.keys().copied().collect();
                let mut allowed_gone: HashSet<u64> = HashSet::new();
                match op {
                    Op::Send(delay) => { s.insert(rec(now as u128, now, delay), now); }
                    Op::Lease(n, vis) => {
                        let (got, ex) = s.lease(now, n, vis, MAX);
                        for (seq, r) in got {
                            prop_assert!(r.attempts <= MAX);
                            prop_assert!(!leases.iter().any(|(q, a)| *q == seq && *a == r.attempts));
                            leases.push((seq, r.attempts));
                        }
                        for seq in ex { s.finish_transit(seq); allowed_gone.insert(seq); }
                    }
                    Op::Ack(i) => if let Some(&(seq, _)) = leases.get(i) { let _ = s.ack(seq); allowed_gone.insert(seq); },
                    Op::Retry(i, d) => if let Some(&(seq, a)) = leases.get(i) {
                        if let Ok(RetryOutcome::Exhausted) = s.retry(seq, a, now, d, MAX) {
                            s.finish_transit(seq); allowed_gone.insert(seq);
                        }
                    },
                    Op::Extend(i, v) => if let Some(&(seq, a)) = leases.get(i) { let _ = s.extend(seq, a, now, v); },
                    Op::Tick(dt) => {
                        now += dt;
                        for seq in s.promote(now, MAX) { s.finish_transit(seq); allowed_gone.insert(seq); }
                    }
                    Op::Expire(ret) => { allowed_gone.extend(s.expire(now, ret)); }
                    Op::Purge => { s.purge(); allowed_gone.extend(before.iter().copied()); }
                }
                s.check_invariants();
                for seq in &before {
                    prop_assert!(s.messages.contains_key(seq) || allowed_gone.contains(seq), "message {} vanished", seq);
                }
                for (seq, r) in &s.messages {
                    let prev = attempts_seen.insert(*seq, r.attempts).unwrap_or(0);
                    prop_assert!(r.attempts >= prev, "attempts decreased");
                    prop_assert!(r.attempts <= MAX);
                }
                // a message is leased at most once at a time: one record, one deadline
                prop_assert!(s.leased_count() <= s.len());
            }
        }
    }
}
