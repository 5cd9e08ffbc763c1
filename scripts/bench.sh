#!/usr/bin/env bash
# Benchmarks Hopper side by side with RabbitMQ and pgmq (PostgreSQL) on this
# machine and writes the Markdown results to bench/results/<UTC date>-compare.md.
#
# Usage: scripts/bench.sh [--no-peers] [hopper-compare options]
#   e.g. scripts/bench.sh --duration 3 --repeat 1
#        scripts/bench.sh --no-peers              (Hopper alone)
#        scripts/bench.sh --systems hopper,pgmq --workloads 1,3
# Options other than --no-peers go to hopper-compare (see its --help);
# defaults here: all workloads, all systems, --repeat 3.
#
# Builds target/release/hopper and target/release/hopper-compare, starts the
# peers with bench/peers/peers.sh (installing them from Debian if needed),
# runs the comparison, and always stops the peers (deleting their data).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

args=()
systems="hopper,rabbitmq,pgmq"
out=""
peers=1
while [ $# -gt 0 ]; do
    case "$1" in
        --no-peers) peers=0; systems="hopper"; args+=(--systems hopper) ;;
        --systems) systems="${2:?--systems needs a value}"; args+=("$1" "$2"); shift ;;
        --systems=*) systems="${1#--systems=}"; args+=("$1") ;;
        --out) out="${2:?--out needs a value}"; shift ;;
        --out=*) out="${1#--out=}" ;;
        *) args+=("$1") ;;
    esac
    shift
done
# Peers are only needed when a peer is compared.
case ",$systems," in
    *,rabbitmq,* | *,rabbit,* | *,pgmq,* | *,postgres,* | *,postgresql,*) ;;
    *) peers=0 ;;
esac
out="${out:-bench/results/$(date -u +%Y-%m-%d)-compare.md}"

echo "building hopper and hopper-compare" >&2
cargo build --release --bin hopper
# --target-dir: cargo reads bench/compare/.cargo/config.toml only when run
# from inside bench/compare, so say it here too.
cargo build --release --manifest-path bench/compare/Cargo.toml --target-dir target

if [ "$peers" = 1 ]; then
    trap 'bench/peers/peers.sh stop || true' EXIT
    bench/peers/peers.sh start
fi

# Defaults first: options given on the command line override them.
target/release/hopper-compare --repeat 3 "${args[@]}" --out "$out"
echo "results: $out" >&2
