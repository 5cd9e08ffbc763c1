#!/usr/bin/env bash
# The long crash loop: kill -9 the server at random moments while producers,
# pull consumers and a push consumer run, then account for every message.
# Usage: scripts/crash-loop.sh [cycles, default 100]   (HOPPER_CRASH_SEED=N replays a run)
set -euo pipefail
cd "$(dirname "$0")/.."
HOPPER_CRASH_CYCLES="${1:-100}" cargo test --release --test durability kill9_during_concurrent_send_and_ack_loses_nothing -- --nocapture 2>&1 \
  | grep -E "crash loop|test result|panicked|lost|redelivered|unexpected"
