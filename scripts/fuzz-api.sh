#!/usr/bin/env bash
# Fuzzes the HTTP surface with schemathesis, driven by the server's own
# OpenAPI document: no request may get a 5xx. Starts its own server on a temp
# dir, creates a queue, a consumer and a function so the generated requests
# reach real objects, then runs every operation.
# Usage: scripts/fuzz-api.sh [max examples per operation, default 200]
set -euo pipefail
cd "$(dirname "$0")/.."
examples="${1:-200}"

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install --quiet --disable-pip-version-check "schemathesis==4.32.5"
cargo build --quiet --bin hopper

data_dir=$(mktemp -d)
cfg_dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
token="fuzz-$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
HOPPER_ROOT_TOKEN="$token" RUST_LOG=error ./target/debug/hopper serve --listen "127.0.0.1:$port" --data-dir "$data_dir" &
server_pid=$!
cleanup() { kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; rm -rf "$data_dir" "$cfg_dir"; }
trap cleanup EXIT
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done

api="http://127.0.0.1:$port/client/v4/accounts/fuzz"
auth="Authorization: Bearer $token"
field() { python3 -c "import json,sys; print(json.load(sys.stdin)['result']['$1'])"; }
queue_id=$(curl -fsS "$api/queues" -H "$auth" -d '{"queue_name":"fuzzed"}' | field queue_id)
consumer_id=$(curl -fsS "$api/queues/$queue_id/consumers" -H "$auth" -d '{"type":"http_pull"}' | field consumer_id)
curl -fsS -X PUT "$api/functions/fn" -H "$auth" -d '{"url":"http://127.0.0.1:9/x"}' >/dev/null
cat > "$cfg_dir/schemathesis.toml" <<TOML
[parameters]
"path.account_id" = "fuzz"
"path.queue_id" = "$queue_id"
"path.consumer_id" = "$consumer_id"
"path.name" = "fn"
TOML

cd "$cfg_dir"
"$OLDPWD/.venv/bin/st" run "http://127.0.0.1:$port/client/v4/openapi.json" \
  --url "http://127.0.0.1:$port" -H "$auth" \
  --checks not_a_server_error --max-examples "$examples" --request-timeout 25 \
  --phases examples,fuzzing 2>&1 | tee "$cfg_dir/out.txt" | tail -12
kill -0 "$server_pid" || { echo "the server died during fuzzing" >&2; exit 1; }
grep -Eq '[0-9]+ generated, [0-9]+ passed$' "$cfg_dir/out.txt"
