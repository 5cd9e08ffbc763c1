#!/usr/bin/env bash
# Coverage-guided fuzzing (cargo fuzz / libFuzzer) of the parsers that see
# untrusted input: request bodies, lease ids, config files, function replies.
# Usage: scripts/fuzz-targets.sh [seconds per target, default 60]
# cargo fuzz needs nightly flags; RUSTC_BOOTSTRAP lets the stable toolchain
# accept them for this build only.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
for target in request_body lease_id config_file function_reply; do
  echo "==> $target (${seconds}s)"
  RUSTC_BOOTSTRAP=1 cargo fuzz run --fuzz-dir tests/fuzz "$target" -- -max_total_time="$seconds" 2>&1 | tail -3
done
