#!/usr/bin/env bash
# Runs the whole test suite: Rust unit, property and system tests (real
# binary over HTTP, kill -9 durability), then the official Cloudflare
# Python SDK and wrangler against a real server. Installs what it needs (a
# Python venv in .venv, wrangler from npm in ~/.cache/hopper-wrangler).
# Usage: scripts/test.sh
set -euo pipefail
set -o pipefail
cd "$(dirname "$0")/.."

echo "==> cargo test (unit, property, system and durability tests)"
cargo test --all-targets 2>&1 | tee /tmp/hopper-cargo-test.log
rust_passed=$(grep -Eo 'test result: ok\. [0-9]+ passed' /tmp/hopper-cargo-test.log | awk '{s+=$4} END {print s+0}')

echo "==> Python venv for the Cloudflare SDK compatibility test"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install --quiet --disable-pip-version-check -r tests/sdk/requirements.txt

echo "==> starting hopper for the SDK test"
cargo build --quiet --bin hopper
data_dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
token="sdk-test-$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
HOPPER_ROOT_TOKEN="$token" RUST_LOG=warn ./target/debug/hopper serve --listen "127.0.0.1:$port" --data-dir "$data_dir" &
server_pid=$!
cleanup() { kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; rm -rf "$data_dir"; }
trap cleanup EXIT
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done

echo "==> Cloudflare Python SDK compatibility test"
HOPPER_URL="http://127.0.0.1:$port" HOPPER_TOKEN="$token" .venv/bin/python -m pytest -q tests/sdk 2>&1 | tee /tmp/hopper-sdk-test.log
sdk_passed=$(grep -Eo '[0-9]+ passed' /tmp/hopper-sdk-test.log | tail -1 | awk '{print $1+0}')
if [ "${sdk_passed:-0}" -eq 0 ]; then
  echo "the SDK compatibility test ran no test" >&2
  exit 1
fi

echo "==> wrangler (installed from npm) against the same server"
HOPPER_URL="http://127.0.0.1:$port" HOPPER_TOKEN="$token" tests/wrangler/run.sh 2>&1 | tee /tmp/hopper-wrangler-test.log
wrangler_passed=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' /tmp/hopper-wrangler-test.log | tail -1 | awk '{print $1+0}')

echo "==> API fuzzing (schemathesis against the server's OpenAPI document)"
scripts/fuzz-api.sh 20

echo "total: $((rust_passed + sdk_passed + wrangler_passed)) passed, 0 failed"
