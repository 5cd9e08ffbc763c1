#!/usr/bin/env bash
# Install, start and stop the peers Hopper is compared with, on loopback:
#   RabbitMQ (Debian's rabbitmq-server) on 127.0.0.1:$RABBIT_PORT
#   PostgreSQL (Debian's) with pgmq's SQL from PyPI's `pgmq` package on
#   127.0.0.1:$PG_PORT, synchronous_commit=on, fsync=on.
#
# Usage: bench/peers/peers.sh install|start|stop
# State lives under $PEERS_DIR (default: target/peers); `stop` removes it.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PEERS_DIR="${PEERS_DIR:-$ROOT/target/peers}"
RABBIT_PORT="${RABBIT_PORT:-5679}"
PG_PORT="${PG_PORT:-55432}"
PGMQ_VERSION="${PGMQ_VERSION:-1.1.4}"

sudo_maybe() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }

install() {
    local need=()
    command -v rabbitmq-server >/dev/null 2>&1 || [ -x /usr/sbin/rabbitmq-server ] || need+=(rabbitmq-server)
    [ -n "$(pg_bin)" ] || need+=(postgresql)
    if [ ${#need[@]} -gt 0 ]; then
        echo "installing ${need[*]} from Debian" >&2
        sudo_maybe env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >&2
    fi
    # Debian's packages start system services; the bench runs its own
    # instances in $PEERS_DIR, so stop those to free the CPU and ports.
    sudo_maybe service rabbitmq-server stop >/dev/null 2>&1 || true
    sudo_maybe service postgresql stop >/dev/null 2>&1 || true
    if [ ! -f "$PEERS_DIR/pgmq.sql" ]; then
        mkdir -p "$PEERS_DIR/pgmq-wheel"
        python3 -m pip download --no-deps --quiet "pgmq==$PGMQ_VERSION" -d "$PEERS_DIR/pgmq-wheel" >&2
        python3 - "$PEERS_DIR" <<'PY'
import sys, zipfile, glob, pathlib
out = pathlib.Path(sys.argv[1])
wheel = glob.glob(str(out / "pgmq-wheel" / "pgmq-*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    (out / "pgmq.sql").write_bytes(z.read("pgmq/sql/pgmq.sql"))
    (out / "pgmq.sql.version").write_bytes(z.read("pgmq/sql/VERSION"))
PY
    fi
}

start_postgres() {
    local bin data="$PEERS_DIR/postgres"
    bin="$(pg_bin)"
    mkdir -p "$data"
    # initdb refuses to run as root; the postgres system user owns the cluster.
    local as=()
    if [ "$(id -u)" = 0 ]; then
        chown -R postgres:postgres "$PEERS_DIR/postgres"
        as=(runuser -u postgres --)
    fi
    if [ ! -f "$data/PG_VERSION" ]; then
        "${as[@]}" "$bin/initdb" -D "$data" -U postgres --auth=trust >/dev/null
        cat >>"$data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$data'
max_connections = 300
shared_buffers = 1GB
fsync = on
synchronous_commit = on
full_page_writes = on
max_wal_size = 4GB
CONF
    fi
    "${as[@]}" "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w start >/dev/null
    "${as[@]}" "$bin/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -q -v ON_ERROR_STOP=1 \
        -f "$PEERS_DIR/pgmq.sql" >/dev/null
    echo "postgres+pgmq $(cat "$PEERS_DIR/pgmq.sql.version") on 127.0.0.1:$PG_PORT" >&2
}

start_rabbit() {
    local base="$PEERS_DIR/rabbitmq"
    mkdir -p "$base"
    export RABBITMQ_NODENAME="hopperbench@localhost"
    export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
    export RABBITMQ_NODE_PORT="$RABBIT_PORT"
    export RABBITMQ_DIST_PORT=$((RABBIT_PORT + 20000))
    export RABBITMQ_MNESIA_BASE="$base/mnesia"
    export RABBITMQ_LOG_BASE="$base/log"
    export RABBITMQ_PID_FILE="$base/rabbit.pid"
    export RABBITMQ_ENABLED_PLUGINS_FILE="$base/enabled_plugins"
    export RABBITMQ_CONFIG_FILE="$base/rabbitmq"
    export HOME="$base"
    # Keep Erlang distribution and epmd on loopback too.
    export ERL_EPMD_ADDRESS=127.0.0.1
    export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
    echo "[]." >"$base/enabled_plugins"
    # Default durability: persistent messages on a durable queue are confirmed
    # after they are fsynced.
    cat >"$base/rabbitmq.conf" <<CONF
loopback_users = none
vm_memory_high_watermark.relative = 0.4
CONF
    if [ "$(id -u)" = 0 ]; then chown -R rabbitmq:rabbitmq "$base"; fi
    local server=/usr/lib/rabbitmq/bin/rabbitmq-server ctl=/usr/lib/rabbitmq/bin/rabbitmqctl
    if [ "$(id -u)" = 0 ]; then
        runuser -u rabbitmq --preserve-environment -- "$server" >"$base/stdout.log" 2>&1 &
    else
        "$server" >"$base/stdout.log" 2>&1 &
    fi
    local as=()
    [ "$(id -u)" = 0 ] && as=(runuser -u rabbitmq --preserve-environment --)
    "${as[@]}" "$ctl" -n "$RABBITMQ_NODENAME" wait --timeout 90 "$RABBITMQ_PID_FILE" >/dev/null 2>&1 \
        || "${as[@]}" "$ctl" -n "$RABBITMQ_NODENAME" await_startup --timeout 90 >/dev/null
    echo "rabbitmq $(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null) on 127.0.0.1:$RABBIT_PORT" >&2
}

stop() {
    local bin
    bin="$(pg_bin)"
    if [ -f "$PEERS_DIR/postgres/postmaster.pid" ]; then
        local as=()
        [ "$(id -u)" = 0 ] && as=(runuser -u postgres --)
        "${as[@]}" "$bin/pg_ctl" -D "$PEERS_DIR/postgres" -m fast -w stop >/dev/null 2>&1 || true
    fi
    if [ -f "$PEERS_DIR/rabbitmq/rabbit.pid" ]; then
        local pid
        pid="$(cat "$PEERS_DIR/rabbitmq/rabbit.pid")"
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    # Stop the epmd RabbitMQ started, by asking it (not by process name):
    # it refuses while any Erlang node is still registered with it.
    local epmd
    epmd="$(command -v epmd || ls /usr/lib/erlang/erts-*/bin/epmd 2>/dev/null | tail -1 || true)"
    if [ -n "$epmd" ]; then "$epmd" -kill >/dev/null 2>&1 || true; fi
    rm -rf "$PEERS_DIR/postgres" "$PEERS_DIR/rabbitmq"
}

case "${1:-}" in
    install) install ;;
    start) install; stop; start_postgres; start_rabbit ;;
    stop) stop ;;
    *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
