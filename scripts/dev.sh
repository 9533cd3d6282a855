#!/usr/bin/env bash
# The whole multi-region stack on one machine, without Docker:
#   MariaDB (the global counters), one Redis per region, restate-server,
#   two regions of two API processes each, and the worker.
# Every process gets its own port; logs go to .dev/logs; Ctrl-C (or
# `make dev-down` from another terminal) stops everything.
#
#   scripts/dev.sh        start, wait until healthy, print the ports, wait
#                         (DEV_DETACH=1: return once healthy, leaving it up)
#   scripts/dev.sh down   stop a stack started by another terminal: the
#                         waiting dev.sh and every process it started
#
# Ports can be moved with DEV_PORT_BASE (default 7070: APIs on 7070-7073,
# MariaDB on base-3763 = 3307 … see below) if the defaults are taken, and the
# state (the databases, logs, pid files) with DEV_DIR (default .dev), as
# e2e's TestMakeDev and TestReadme do to run beside a developer's make dev;
# `dev.sh down` needs the same DEV_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

DEV=${DEV_DIR:-$PWD/.dev}
BASE=${DEV_PORT_BASE:-7070}
API_A1=$BASE API_A2=$((BASE + 1)) API_B1=$((BASE + 2)) API_B2=$((BASE + 3))
MYSQL_PORT=${DEV_MYSQL_PORT:-$((BASE - 3763))}       # 3307
REDIS_A=${DEV_REDIS_A_PORT:-$((BASE - 690))}         # 6380
REDIS_B=$((REDIS_A + 1))                             # 6381
INGRESS=${DEV_RESTATE_INGRESS_PORT:-$((BASE + 1010))} # 8080
ADMIN=$((INGRESS + 990))                              # 9070
NODE=$((INGRESS - 2958))                              # 5122
WORKER=$((INGRESS + 1000))                            # 9080
RESTATE_BIN=node_modules/@restatedev/restate-server-linux-x64/bin/restate-server
DSN="root@tcp(127.0.0.1:$MYSQL_PORT)/ratelimit"

log() { printf '[dev] %s\n' "$*"; }

stop_all() {
  [ -d "$DEV/pids" ] || return 0
  for f in "$DEV"/pids/*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null || true
  done
  for f in "$DEV"/pids/*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$f"
  done
  log "stopped"
}

if [ "${1:-}" = down ]; then
  # The terminal's dev.sh first: its trap stops the stack and it exits.
  if [ -f "$DEV/dev.pid" ] && kill -0 "$(cat "$DEV/dev.pid")" 2>/dev/null; then
    main=$(cat "$DEV/dev.pid")
    kill "$main" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$main" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$DEV/dev.pid"
  stop_all   # what a detached (DEV_DETACH=1) or killed dev.sh left
  exit 0
fi

# start NAME COMMAND...: run in the background, log to .dev/logs/NAME.log.
start() {
  local name=$1; shift
  "$@" >"$DEV/logs/$name.log" 2>&1 &
  echo $! >"$DEV/pids/$name.pid"
}

# wait_for WHAT COMMAND...: retry COMMAND for up to 60 s.
wait_for() {
  local what=$1; shift
  for _ in $(seq 600); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  log "$what did not become healthy; see $DEV/logs"
  stop_all
  exit 1
}

mkdir -p "$DEV/logs" "$DEV/pids" "$DEV/bin"
stop_all >/dev/null
mkdir -p "$DEV/pids" "$DEV/logs"
echo $$ >"$DEV/dev.pid"
trap 'echo; stop_all; rm -f "$DEV/dev.pid"; kill $(jobs -p) 2>/dev/null; exit 0' INT TERM

log "building the API and the worker"
make -s --no-print-directory build BUILD_DIR="$DEV/bin"
make -s deps-dev   # only what the stack runs; make test installs the rest

log "MariaDB on $MYSQL_PORT"
# Temporary tables in a directory of its own, not the shared /tmp: two
# MariaDBs bootstrapping at once there delete each other's temporary tables
# (seven installs of 24 failed with eight at once; none of 80 with this).
mkdir -p "$DEV/mysql-tmp"
# Installed beside and renamed when done: a data directory is there whole
# or not at all, whatever stops the install (a failure, Ctrl-C).
if [ ! -d "$DEV/mysql" ]; then
  rm -rf "$DEV/mysql.new"
  if ! mariadb-install-db --no-defaults --datadir="$DEV/mysql.new" --tmpdir="$DEV/mysql-tmp" --user="$(id -un)" \
    --auth-root-authentication-method=normal --skip-test-db >"$DEV/logs/mariadb-install.log" 2>&1; then
    log "mariadb-install-db failed (all of it in $DEV/logs/mariadb-install.log):"
    grep -i -m 10 error "$DEV/logs/mariadb-install.log" || tail -20 "$DEV/logs/mariadb-install.log"
    rm -rf "$DEV/mysql.new"
    exit 1
  fi
  mv "$DEV/mysql.new" "$DEV/mysql"
fi
MARIADBD=$(command -v mariadbd || echo /usr/sbin/mariadbd)
start mariadb "$MARIADBD" --no-defaults --datadir="$DEV/mysql" --socket="$DEV/mysql.sock" \
  --port="$MYSQL_PORT" --bind-address=127.0.0.1 --user="$(id -un)" --skip-grant-tables \
  --pid-file="$DEV/mysql.pid" --tmpdir="$DEV/mysql-tmp" \
  --character-set-server=utf8mb4 --collation-server=utf8mb4_bin
wait_for "MariaDB" mariadb --no-defaults --protocol=tcp -h127.0.0.1 -P"$MYSQL_PORT" -uroot \
  -e "CREATE DATABASE IF NOT EXISTS ratelimit"
UNKEY_MYSQL_DSN="$DSN" "$DEV/bin/api" migrate >/dev/null

for region in a b; do
  port=$REDIS_A; [ $region = b ] && port=$REDIS_B
  log "Redis of region $region on $port"
  mkdir -p "$DEV/redis-$region"
  # Bounded memory: every key has a TTL; volatile-ttl evicts the cells of
  # past windows first if the bound is ever reached.
  start "redis-$region" redis-server --port "$port" --bind 127.0.0.1 --dir "$DEV/redis-$region" \
    --save "" --appendonly yes --protected-mode no --maxmemory 256mb --maxmemory-policy volatile-ttl
  wait_for "Redis $region" redis-cli -p "$port" ping
done

log "restate-server: ingress $INGRESS, admin $ADMIN"
# restate-server signs its requests to the worker; the worker verifies them.
IDENTITY_KEY=$("$DEV/bin/worker" keygen "$DEV/restate-identity.pem")
start restate env RESTATE_BASE_DIR="$DEV/restate" RESTATE_NODE_NAME=dev RESTATE_LISTEN_MODE=tcp \
  RESTATE_WORKER__INVOKER__REQUEST_IDENTITY_PRIVATE_KEY_PEM_FILE="$DEV/restate-identity.pem" \
  RESTATE_BIND_ADDRESS="127.0.0.1:$NODE" RESTATE_ADVERTISED_ADDRESS="http://127.0.0.1:$NODE" \
  RESTATE_INGRESS__BIND_ADDRESS="127.0.0.1:$INGRESS" RESTATE_ADMIN__BIND_ADDRESS="127.0.0.1:$ADMIN" \
  "$RESTATE_BIN" --no-logo
wait_for "restate-server" curl -sf "http://127.0.0.1:$ADMIN/health"

api() { # api NAME REGION PORT REDIS_PORT
  start "api-$1" env UNKEY_REGION="$2" UNKEY_HTTP_ADDR="127.0.0.1:$3" UNKEY_REDIS_URL="redis://127.0.0.1:$4" \
    UNKEY_MYSQL_DSN="$DSN" UNKEY_LOG_FORMAT=text "$DEV/bin/api"
}
api a1 a "$API_A1" "$REDIS_A"
api a2 a "$API_A2" "$REDIS_A"
api b1 b "$API_B1" "$REDIS_B"
api b2 b "$API_B2" "$REDIS_B"
for port in $API_A1 $API_A2 $API_B1 $API_B2; do
  wait_for "the API on $port" curl -sf "http://127.0.0.1:$port/readyz"
done

log "worker on $WORKER"
start worker env UNKEY_MYSQL_DSN="$DSN" UNKEY_RESTATE_ADMIN_URL="http://127.0.0.1:$ADMIN" \
  UNKEY_RESTATE_INGRESS_URL="http://127.0.0.1:$INGRESS" UNKEY_WORKER_ADDR="127.0.0.1:$WORKER" \
  UNKEY_RESTATE_IDENTITY_KEYS="$IDENTITY_KEY" UNKEY_LOG_FORMAT=text "$DEV/bin/worker"
wait_for "the worker" sh -c "curl -sf -X POST http://127.0.0.1:$INGRESS/Cleanup/retention/Status | grep -q '\"scheduled\":true'"

cat <<TXT

ready — every process answers its health check. Logs: $DEV/logs/

  region a   API  http://127.0.0.1:$API_A1   http://127.0.0.1:$API_A2   Redis 127.0.0.1:$REDIS_A
  region b   API  http://127.0.0.1:$API_B1   http://127.0.0.1:$API_B2   Redis 127.0.0.1:$REDIS_B
  MariaDB    $DSN
  Restate    ingress http://127.0.0.1:$INGRESS   admin http://127.0.0.1:$ADMIN
  worker     http://127.0.0.1:$WORKER (h2c; call it through the ingress)

Ctrl-C stops everything (or: make dev-down).
TXT
[ "${DEV_DETACH:-}" = 1 ] && { trap - INT TERM; rm -f "$DEV/dev.pid"; exit 0; }
while true; do sleep 3600 & wait $!; done
