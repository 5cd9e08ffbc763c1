//! The Markdown report: setup, one table per workload, and a summary.
//! Every figure is the median across repeats.

use std::fmt::Write as _;

use crate::stats::{median, range};
use crate::workloads::{thousands, LatencyKind, Outcome, Workload};

/// One run of one workload on one system.
pub struct Record {
    pub repeat: usize,
    pub workload: Workload,
    pub system: &'static str,
    pub outcome: Result<Outcome, String>,
}

/// What the report says before the results.
pub struct Meta {
    pub date: String,
    pub command: String,
    pub machine: Vec<String>,
    pub versions: Vec<String>,
    pub settings: Vec<String>,
}

pub const HOPPER: &str = "Hopper";

const DURABILITY: &[&str] = &[
    "Every message is the same 1 KiB JSON document (`{\"t\":<send time µs>,\"p\":\"xxxx…\"}`): a `text` body for Hopper, the message body for RabbitMQ, the `jsonb` message for pgmq.",
    "Nothing is counted as sent before the server has fsynced it:",
    "  - Hopper: a send's 200 means the message is fsynced.",
    "  - RabbitMQ: durable classic queue, persistent messages (delivery_mode 2), publisher confirms awaited for every message, manual acks, prefetch 200 per consumer.",
    "  - pgmq: every send is a committed transaction with `synchronous_commit = on` and `fsync = on`; messages are read with a 60 s visibility timeout and deleted once handled.",
    "Client and servers share the machine's cores; all traffic is on loopback. Fresh queues for every run, deleted afterwards.",
];

const METHOD: &[&str] = &[
    "Rates count what completed inside the measured window. Server CPU is the user+system time of the server processes over the same window (Hopper's process; every `beam.smp`; every `postgres` process, including backends that exited) divided by the messages in the headline rate; the load generator's own CPU is not in it.",
    "W3: the backlog is filled once per system by its fastest path (pgmq: one `INSERT … SELECT … generate_series` per 100,000 rows, then `ANALYZE`; RabbitMQ: pipelined publishes with confirms; Hopper: concurrent batch sends), topped back up before each repeat (then 3 s for the server to settle before measuring), and stays in place while the other workloads run. W7a's backlog gets the same pause. Consumers stop early when the backlog is drained. RabbitMQ pushes deliveries ahead of the consumer (prefetch) and AMQP acks are not answered, so its per-batch latency is the client-side wait only.",
    "W4–W7b latencies are end to end: receipt time − the send time carried in the message. W4 and W6 producers send as fast as they can, so a queue whose consumers fall behind builds up and its latency grows with the run.",
    "W5 and W7b are open loop: 32 sender tasks on a fixed schedule, each message stamped with its *intended* send time, so a stalled sender can't hide latency. Their rate is what was sent in the window (at most the offered load).",
    "pgmq consumers that wait use `read_with_poll` with a 1 ms poll interval (5 ms in W6, where 100 consumers poll at once). Hopper consumers long-poll (`wait_ms` 1000); RabbitMQ consumers use `basic_consume`, taking the first delivery and whatever else has already arrived, up to 100, acked with one `multiple` ack.",
    "W7: Hopper delivers through its own worker consumer (batch_size 100, max_wait_time_ms 0: whatever is ready goes at once, as the bridges do). RabbitMQ and pgmq have no HTTP push, so 4 bridge tasks do what a user would write: consume up to 100, POST them to the function in Hopper's push shape, ack after its 200. The function is an HTTP server inside the load generator.",
];

fn cell_text(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn rate(v: Option<f64>) -> String {
    v.map(|r| thousands(r.round() as u64))
        .unwrap_or_else(|| "—".into())
}

fn ms(v: Option<f64>) -> String {
    match v {
        None => "—".into(),
        Some(x) if x < 10.0 => format!("{x:.2}"),
        Some(x) if x < 100.0 => format!("{x:.1}"),
        Some(x) => format!("{x:.0}"),
    }
}

fn cpu(v: Option<f64>) -> String {
    match v {
        None => "—".into(),
        Some(x) if x < 10.0 => format!("{x:.1}"),
        Some(x) => format!("{x:.0}"),
    }
}

fn ratio(hopper: Option<f64>, other: Option<f64>) -> String {
    match (hopper, other) {
        (Some(h), Some(o)) if o > 0.0 => format!("{:.2}×", h / o),
        _ => "—".into(),
    }
}

/// Medians of one system's runs of one workload.
struct Summary {
    runs: usize,
    ok: usize,
    rate: Option<f64>,
    rate_range: Option<(f64, f64)>,
    produced: Option<f64>,
    p50: Option<f64>,
    p99: Option<f64>,
    p999: Option<f64>,
    cpu: Option<f64>,
    errors: Vec<String>,
    notes: Vec<String>,
}

fn summarize(records: &[Record], w: Workload, system: &str) -> Summary {
    let runs: Vec<&Record> = records
        .iter()
        .filter(|r| r.workload == w && r.system == system)
        .collect();
    let ok: Vec<&Outcome> = runs.iter().filter_map(|r| r.outcome.as_ref().ok()).collect();
    let pick = |f: &dyn Fn(&Outcome) -> Option<f64>| -> Option<f64> {
        median(&ok.iter().filter_map(|o| f(o)).collect::<Vec<_>>())
    };
    let rates: Vec<f64> = ok.iter().map(|o| o.rate).collect();
    let mut errors = Vec::new();
    let mut notes = Vec::new();
    for r in &runs {
        match &r.outcome {
            Err(e) => errors.push(format!("run {}: {e}", r.repeat)),
            Ok(o) => {
                if let Some(n) = &o.note {
                    notes.push(format!("run {}: {n}", r.repeat));
                }
            }
        }
    }
    Summary {
        runs: runs.len(),
        ok: ok.len(),
        rate: median(&rates),
        rate_range: range(&rates),
        produced: pick(&|o| o.produced_rate),
        p50: pick(&|o| o.latency.map(|l| l.p50)),
        p99: pick(&|o| o.latency.map(|l| l.p99)),
        p999: pick(&|o| o.latency.map(|l| l.p999)),
        cpu: pick(&|o| o.cpu_us_per_msg),
        errors,
        notes,
    }
}

fn latency_caption(w: Workload) -> &'static str {
    if w == Workload::PushLatency {
        return "Latency: end to end, send time to receipt by the function.";
    }
    match w.latency_kind() {
        LatencyKind::PerBatchSend => "Latency: per batch, send until durable (200 / all confirms / commit).",
        LatencyKind::PerMessageSend => "Latency: per message, send until durable.",
        LatencyKind::PerBatchPullAck => "Latency: per batch, receive + ack.",
        LatencyKind::EndToEnd => "Latency: end to end, send time to receipt by the consumer.",
        LatencyKind::None => "Rate: backlog size ÷ time until the function had received all of it.",
    }
}

fn rate_caption(w: Workload) -> &'static str {
    match w {
        Workload::ProduceBatch | Workload::ProduceSingle => "msg/s produced",
        Workload::ConsumeBacklog | Workload::ProduceConsume | Workload::ManyQueues => "msg/s consumed",
        Workload::FixedRate | Workload::PushLatency => "msg/s sent",
        Workload::PushDrain => "msg/s delivered",
    }
}

pub fn render(
    meta: &Meta,
    titles: &[(Workload, String)],
    systems: &[&'static str],
    records: &[Record],
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Hopper vs RabbitMQ vs pgmq — {}\n", meta.date);
    let _ = writeln!(out, "Command: `{}`\n", meta.command);
    let _ = writeln!(out, "## Machine\n");
    for line in &meta.machine {
        let _ = writeln!(out, "- {line}");
    }
    let _ = writeln!(out, "\n## Versions\n");
    for line in &meta.versions {
        let _ = writeln!(out, "- {line}");
    }
    let _ = writeln!(out, "\n## Durability and payload\n");
    for line in DURABILITY {
        let _ = writeln!(out, "{}{line}", if line.starts_with("  ") { "" } else { "- " });
    }
    let _ = writeln!(out, "\n## Method\n");
    for line in meta
        .settings
        .iter()
        .map(String::as_str)
        .chain(METHOD.iter().copied())
    {
        let _ = writeln!(out, "- {line}");
    }
    render_summary(&mut out, titles, systems, records);
    for (w, title) in titles {
        render_workload(&mut out, *w, title, systems, records);
    }
    out
}

/// One row per workload: every system's rate and p99, Hopper's ratios.
fn render_summary(
    out: &mut String,
    titles: &[(Workload, String)],
    systems: &[&'static str],
    records: &[Record],
) {
    let has_hopper = systems.contains(&HOPPER);
    let peers: Vec<&str> = systems.iter().copied().filter(|s| *s != HOPPER).collect();
    let _ = writeln!(out, "\n## Summary\n");
    let _ = write!(out, "| Workload |");
    for s in systems {
        let _ = write!(out, " {s} msg/s |");
    }
    if has_hopper {
        for p in &peers {
            let _ = write!(out, " Hopper/{p} |");
        }
    }
    for s in systems {
        let _ = write!(out, " {s} p99 ms |");
    }
    let _ = writeln!(out);
    let columns = systems.len() * 2 + if has_hopper { peers.len() } else { 0 };
    let _ = writeln!(out, "|---|{}", "---:|".repeat(columns));
    for (w, _) in titles {
        let sums: Vec<Summary> = systems.iter().map(|s| summarize(records, *w, s)).collect();
        let _ = write!(out, "| W{} {} |", w.key(), w.short());
        for sum in &sums {
            let _ = write!(
                out,
                " {} |",
                if sum.ok == 0 && sum.runs > 0 {
                    "error".into()
                } else {
                    rate(sum.rate)
                }
            );
        }
        if has_hopper {
            let hopper = sums[systems.iter().position(|s| *s == HOPPER).unwrap_or(0)].rate;
            for p in &peers {
                let i = systems.iter().position(|s| s == p).unwrap_or(0);
                let _ = write!(out, " {} |", ratio(hopper, sums[i].rate));
            }
        }
        for sum in &sums {
            let _ = write!(out, " {} |", ms(sum.p99));
        }
        let _ = writeln!(out);
    }
}

/// A workload's table: one row per system, then footnotes (failed runs,
/// per-run notes).
fn render_workload(out: &mut String, w: Workload, title: &str, systems: &[&'static str], records: &[Record]) {
    let has_hopper = systems.contains(&HOPPER);
    let p999 = w == Workload::FixedRate;
    let latency = !matches!(w.latency_kind(), LatencyKind::None);
    let _ = writeln!(out, "\n## W{} — {title}\n", w.key());
    let _ = writeln!(out, "{}\n", latency_caption(w));
    let _ = write!(out, "| System | {} (median) | min–max |", rate_caption(w));
    if w.has_produced_rate() {
        let _ = write!(out, " msg/s produced |");
    }
    if latency {
        let _ = write!(out, " p50 ms | p99 ms |");
    }
    if p999 {
        let _ = write!(out, " p99.9 ms |");
    }
    let _ = writeln!(out, " server CPU µs/msg | Hopper ÷ system |");
    let columns = 5 + usize::from(w.has_produced_rate()) + 2 * usize::from(latency) + usize::from(p999);
    let _ = writeln!(out, "|---|{}", "---:|".repeat(columns - 1));
    let hopper = summarize(records, w, HOPPER);
    let mut footnotes = Vec::new();
    for s in systems {
        let sum = summarize(records, w, s);
        if sum.ok == 0 {
            let why = sum.errors.first().cloned().unwrap_or_else(|| "not run".into());
            let _ = writeln!(
                out,
                "| {s} | error: {} |{}",
                cell_text(&why),
                " |".repeat(columns - 2)
            );
            footnotes.extend(sum.errors.iter().skip(1).map(|e| format!("{s} {e}")));
            continue;
        }
        let span = sum
            .rate_range
            .filter(|_| sum.ok > 1)
            .map(|(lo, hi)| format!("{}–{}", rate(Some(lo)), rate(Some(hi))))
            .unwrap_or_else(|| "—".into());
        let _ = write!(out, "| {s} | {} | {span} |", rate(sum.rate));
        if w.has_produced_rate() {
            let _ = write!(out, " {} |", rate(sum.produced));
        }
        if latency {
            let _ = write!(out, " {} | {} |", ms(sum.p50), ms(sum.p99));
        }
        if p999 {
            let _ = write!(out, " {} |", ms(sum.p999));
        }
        let vs = if *s == HOPPER || !has_hopper {
            "—".into()
        } else {
            ratio(hopper.rate, sum.rate)
        };
        let _ = writeln!(out, " {} | {vs} |", cpu(sum.cpu));
        if sum.ok < sum.runs {
            footnotes.push(format!("{s}: {} of {} runs failed", sum.runs - sum.ok, sum.runs));
        }
        footnotes.extend(sum.errors.iter().map(|e| format!("{s} {e}")));
        footnotes.extend(sum.notes.iter().map(|n| format!("{s} {n}")));
    }
    if !footnotes.is_empty() {
        let _ = writeln!(out);
        for f in footnotes {
            let _ = writeln!(out, "- {}", cell_text(&f));
        }
    }
}
