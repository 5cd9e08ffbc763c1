//! hopper-compare: benchmarks Hopper side by side with RabbitMQ and pgmq
//! (PostgreSQL) on the same machine, with the same 1 KiB messages and the
//! same durability, and writes a Markdown report.
//!
//! `scripts/bench.sh` builds everything, starts the peers and runs this.

mod cpu;
mod machine;
mod payload;
mod report;
mod sink;
mod stats;
mod systems;
mod workloads;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;

use report::{Meta, Record, HOPPER};
use sink::Sink;
use systems::hopper::Hopper;
use systems::pgmq::Pgmq;
use systems::rabbit::Rabbit;
use workloads::{Backlog, Ctx, Outcome, Workload};

#[derive(Parser, Debug)]
#[command(
    name = "hopper-compare",
    about = "Benchmark Hopper side by side with RabbitMQ and pgmq on this machine",
    args_override_self = true
)]
struct Opts {
    /// Workloads to run: 1-7 (7 is both 7a and 7b), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,5,6,7")]
    workloads: Vec<String>,
    /// Systems to compare: hopper, rabbitmq, pgmq.
    #[arg(long, value_delimiter = ',', default_value = "hopper,rabbitmq,pgmq")]
    systems: Vec<String>,
    /// Runs of every workload on every system; the report shows medians.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Seconds each measured run lasts.
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Messages in workload 3's backlog.
    #[arg(long, default_value_t = 1_000_000)]
    backlog: u64,
    /// Messages in workload 7a's backlog.
    #[arg(long, default_value_t = 100_000)]
    push_backlog: u64,
    /// Offered load (msg/s) of workload 5.
    #[arg(long, default_value_t = 5_000)]
    rate: u64,
    /// Offered load (msg/s) of workload 7b.
    #[arg(long, default_value_t = 2_000)]
    push_rate: u64,
    /// pgmq: `read_with_poll` interval (ms) of consumers waiting on an
    /// empty queue.
    #[arg(long, default_value_t = 1)]
    pg_poll_ms: u32,
    /// The same for workload 6's 100 consumers: polling that often at once
    /// would take the CPU from the messages.
    #[arg(long, default_value_t = 5)]
    pg_poll_ms_many: u32,
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5679/%2f")]
    rabbit_url: String,
    /// libpq-style connection string of the PostgreSQL with pgmq.
    #[arg(
        long,
        default_value = "host=127.0.0.1 port=55432 user=postgres dbname=postgres"
    )]
    pg: String,
    /// The Hopper server binary (default: `hopper` beside this program).
    #[arg(long)]
    hopper_bin: Option<PathBuf>,
    /// Where Hopper's temporary data dir is made (default: the target dir,
    /// the same filesystem the peers keep their data on).
    #[arg(long)]
    hopper_data: Option<PathBuf>,
    /// The peers' state dir, for the pgmq version (default: target/peers).
    #[arg(long)]
    peers_dir: Option<PathBuf>,
    /// Write the Markdown report here (rewritten after every run);
    /// default: print it at the end.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// A connected system.
enum System {
    Hopper(Hopper),
    Rabbit(Rabbit),
    Pgmq(Pgmq),
}

/// Runs `$body` with `$b` bound to the system's broker, whatever its type.
macro_rules! with_broker {
    ($system:expr, $b:ident => $body:expr) => {
        match $system {
            System::Hopper($b) => $body,
            System::Rabbit($b) => $body,
            System::Pgmq($b) => $body,
        }
    };
}

/// A system in the comparison, and its state across repeats.
struct Slot {
    name: &'static str,
    system: Result<System, String>,
    backlog: Option<Backlog>,
}

/// Where this program lives: `<repo>/target/release/hopper-compare`.
struct Layout {
    bin_dir: PathBuf,
    target_dir: PathBuf,
    repo: PathBuf,
}

impl Layout {
    fn find() -> Result<Layout> {
        let exe = std::env::current_exe().context("locating this program")?;
        let bin_dir = exe.parent().context("program has no directory")?.to_path_buf();
        let target_dir = bin_dir.parent().unwrap_or(&bin_dir).to_path_buf();
        let repo = target_dir.parent().unwrap_or(&target_dir).to_path_buf();
        Ok(Layout {
            bin_dir,
            target_dir,
            repo,
        })
    }
}

fn system_name(arg: &str) -> Result<&'static str> {
    Ok(match arg.trim().to_ascii_lowercase().as_str() {
        "hopper" => HOPPER,
        "rabbitmq" | "rabbit" => "RabbitMQ",
        "pgmq" | "postgres" | "postgresql" => "pgmq",
        other => bail!("unknown system {other:?} (hopper, rabbitmq, pgmq)"),
    })
}

async fn connect(name: &str, opts: &Opts, layout: &Layout) -> Result<System> {
    Ok(match name {
        HOPPER => {
            let bin = opts
                .hopper_bin
                .clone()
                .unwrap_or_else(|| layout.bin_dir.join("hopper"));
            let data = opts
                .hopper_data
                .clone()
                .unwrap_or_else(|| layout.target_dir.clone());
            System::Hopper(Hopper::start(&bin, Some(&data)).await?)
        }
        "RabbitMQ" => System::Rabbit(Rabbit::connect(&opts.rabbit_url).await?),
        _ => System::Pgmq(Pgmq::connect(&opts.pg).await?),
    })
}

fn one_line(o: &Outcome) -> String {
    let mut s = format!("{:.0} msg/s", o.rate);
    if let Some(p) = o.produced_rate {
        s += &format!(" (produced {p:.0})");
    }
    if let Some(l) = o.latency {
        s += &format!(", p50 {:.2} ms, p99 {:.2} ms", l.p50, l.p99);
    }
    if let Some(c) = o.cpu_us_per_msg {
        s += &format!(", server CPU {c:.1} µs/msg");
    }
    if let Some(n) = &o.note {
        s += &format!(" [{n}]");
    }
    s
}

/// The report's version lines.
async fn versions(slots: &[Slot], opts: &Opts, layout: &Layout) -> Vec<String> {
    let mut lines = Vec::new();
    for slot in slots {
        match slot.name {
            HOPPER => lines.push(format!(
                "Hopper: {}",
                machine::git_describe(&layout.repo).unwrap_or_else(|| "unknown (no git)".into())
            )),
            "RabbitMQ" => lines.push(format!(
                "RabbitMQ: rabbitmq-server {} (Debian), Erlang erlang-base {}",
                machine::debian_version("rabbitmq-server").unwrap_or_else(|| "?".into()),
                machine::debian_version("erlang-base").unwrap_or_else(|| "?".into())
            )),
            _ => {
                let server = match &slot.system {
                    Ok(System::Pgmq(p)) => p.server_version().await,
                    _ => None,
                };
                let packages = machine::debian_packages("postgresql-[0-9]*");
                let peers = opts
                    .peers_dir
                    .clone()
                    .unwrap_or_else(|| layout.target_dir.join("peers"));
                let pgmq = std::fs::read_to_string(peers.join("pgmq.sql.version"))
                    .map(|v| v.trim().to_owned())
                    .unwrap_or_else(|_| "?".into());
                lines.push(format!(
                    "PostgreSQL: {} ({}), pgmq SQL {pgmq}",
                    server.unwrap_or_else(|| "?".into()),
                    if packages.is_empty() {
                        "?".into()
                    } else {
                        packages.join(", ")
                    }
                ));
            }
        }
    }
    lines
}

fn write_report(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

#[tokio::main]
async fn main() -> Result<()> {
    let opts = Opts::parse();
    let layout = Layout::find()?;
    let mut workloads = Vec::new();
    for w in &opts.workloads {
        for w in Workload::parse(w)? {
            if !workloads.contains(&w) {
                workloads.push(w);
            }
        }
    }
    let mut names = Vec::new();
    for s in &opts.systems {
        let name = system_name(s)?;
        if !names.contains(&name) {
            names.push(name);
        }
    }
    if opts.repeat == 0 || opts.duration == 0 {
        bail!("--repeat and --duration must be at least 1");
    }

    let ctx = Ctx {
        duration: Duration::from_secs(opts.duration),
        backlog: opts.backlog,
        push_backlog: opts.push_backlog,
        fixed_rate: opts.rate.max(1),
        push_rate: opts.push_rate.max(1),
        pg_poll_ms: opts.pg_poll_ms.max(1),
        pg_poll_ms_many: opts.pg_poll_ms_many.max(1),
        sink: Sink::start().await?,
        http: reqwest::Client::builder()
            .tcp_nodelay(true)
            .build()
            .context("building the bridges' HTTP client")?,
        tag: uuid::Uuid::new_v4().simple().to_string()[..6].to_owned(),
    };

    let mut slots = Vec::new();
    for name in names {
        eprintln!("starting {name}");
        let system = connect(name, &opts, &layout).await.map_err(|e| format!("{e:#}"));
        if let Err(e) = &system {
            eprintln!("  {name} unavailable: {e}");
        }
        slots.push(Slot {
            name,
            system,
            backlog: None,
        });
    }
    let systems: Vec<&'static str> = slots.iter().map(|s| s.name).collect();

    let mut data_dirs: Vec<(&str, PathBuf)> = Vec::new();
    for slot in &slots {
        if let Ok(System::Hopper(h)) = &slot.system {
            data_dirs.push(("Hopper", h.data_dir()));
        }
    }
    if slots.iter().any(|s| s.name != HOPPER) {
        let peers = opts
            .peers_dir
            .clone()
            .unwrap_or_else(|| layout.target_dir.join("peers"));
        data_dirs.push(("Peers'", peers));
    }
    let dirs: Vec<(&str, &Path)> = data_dirs.iter().map(|(w, p)| (*w, p.as_path())).collect();
    let meta = Meta {
        date: machine::utc_now(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine: machine::machine_lines(&dirs),
        versions: versions(&slots, &opts, &layout).await,
        settings: vec![format!(
            "{} repeat(s) of every workload on every system, {} s per measured run \
             (W7a: until the backlog is delivered). Runs are interleaved: for each repeat, \
             for each workload, every system in turn, so drift in this machine's fsync speed \
             spreads over all systems. Figures are medians across repeats.",
            opts.repeat, opts.duration
        )],
    };
    let titles: Vec<(Workload, String)> = workloads.iter().map(|w| (*w, w.title(&ctx))).collect();

    let started = Instant::now();
    let mut records = Vec::new();
    for repeat in 1..=opts.repeat {
        for &w in &workloads {
            for slot in slots.iter_mut() {
                let outcome = match &slot.system {
                    Err(e) => Err(format!("{} unavailable: {e}", slot.name)),
                    Ok(system) => {
                        eprintln!("[{repeat}/{}] W{} {}", opts.repeat, w.key(), slot.name);
                        // Generous: the first workload 3 run fills a large backlog.
                        let limit = Duration::from_secs(1800) + ctx.duration * 20;
                        let run = with_broker!(system, b => {
                            tokio::time::timeout(limit, workloads::run(b, w, &ctx, repeat, &mut slot.backlog)).await
                        });
                        let outcome = match run {
                            Ok(r) => r.map_err(|e| format!("{e:#}")),
                            Err(_) => Err(format!("did not finish within {} s", limit.as_secs())),
                        };
                        match &outcome {
                            Ok(o) => eprintln!("  {}", one_line(o)),
                            Err(e) => eprintln!("  failed: {e}"),
                        }
                        // Let the server settle (background flushes,
                        // deletes) before the next system's run.
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        outcome
                    }
                };
                records.push(Record {
                    repeat,
                    workload: w,
                    system: slot.name,
                    outcome,
                });
                if let Some(out) = &opts.out {
                    write_report(out, &report::render(&meta, &titles, &systems, &records))?;
                }
            }
        }
    }

    for slot in slots.iter_mut() {
        if let Ok(system) = &slot.system {
            let backlog = slot.backlog.take();
            with_broker!(system, b => workloads::drop_backlog(b, backlog).await);
        }
        if let Ok(System::Hopper(h)) = &slot.system {
            h.stop().await;
        }
    }
    let text = report::render(&meta, &titles, &systems, &records);
    match &opts.out {
        Some(out) => {
            write_report(out, &text)?;
            eprintln!(
                "done in {:.0} s; report written to {}",
                started.elapsed().as_secs_f64(),
                out.display()
            );
        }
        None => print!("{text}"),
    }
    Ok(())
}
