#!/usr/bin/env bash
# Makes sure PostgreSQL (user postgres, trust auth, database "test") and Redis answer on 127.0.0.1,
# starting them, and installing them with apt-get only when their binaries are missing.
# Idempotent; prints nothing on success; on failure prints one line and exits 1.
# GW_CI_PG_PORT / GW_CI_REDIS_PORT (default 5432 / 6379) and GW_CI_PG_DATA (default
# /tmp/gw-ci-pg) choose where; nothing ever listens beyond 127.0.0.1.
set -u

PG_PORT="${GW_CI_PG_PORT:-5432}"
REDIS_PORT="${GW_CI_REDIS_PORT:-6379}"
PG_DATA="${GW_CI_PG_DATA:-/tmp/gw-ci-pg}"
LOG="${TMPDIR:-/tmp}/ci-services.log"
PG_URL="postgresql://postgres@127.0.0.1:${PG_PORT}"
# A port held by something that is not PostgreSQL must not hang a probe.
export PGCONNECT_TIMEOUT=5

fail() { echo "ci-services: $*" >&2; exit 1; }
note() { echo "$(date -u +%T) $*" >>"$LOG"; }

# wait_for CMD SECONDS: polls every 0.2 s.
wait_for() {
  local i
  for ((i = 0; i < $2 * 5; i++)); do "$1" && return 0; sleep 0.2; done
  return 1
}

apt_install() {
  [ "$(id -u)" = 0 ] || fail "$* missing and not root: install $* first"
  note "apt-get install $*"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; } >>"$LOG" 2>&1 \
    || fail "apt-get install $* failed (see $LOG)"
}

pg_ok() { timeout 10 psql "${PG_URL}/test" -XAtqc 'select 1' >/dev/null 2>&1; }
pg_listening() { timeout 10 pg_isready -q -t 5 -h 127.0.0.1 -p "$PG_PORT" >/dev/null 2>&1; }
pg_create_test_db() { timeout 10 psql "${PG_URL}/postgres" -Xqc 'create database test' >>"$LOG" 2>&1; }
pg_bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

# Runs a command as the PostgreSQL owner: initdb and postgres refuse to run as root.
as_pg_owner() {
  if [ "$(id -u)" != 0 ]; then "$@"; return; fi
  id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres >>"$LOG" 2>&1 || return 1
  runuser -u postgres -- "$@"
}

# The distribution's clusters on our port that are down: start them. Prints those it started.
start_distro_clusters() {
  command -v pg_lsclusters >/dev/null 2>&1 || return 0
  local ver name port status
  while read -r ver name port status _; do
    [ "$port" = "$PG_PORT" ] && [ "$status" = down ] || continue
    note "pg_ctlcluster $ver $name start"
    pg_ctlcluster "$ver" "$name" start >>"$LOG" 2>&1 && echo "$ver $name"
  done < <(pg_lsclusters -h 2>/dev/null)
}

# Our own throwaway cluster: trust auth, loopback only, socket in its data folder.
start_own_cluster() {
  local bin
  bin="$(pg_bindir)"
  [ -n "$bin" ] || fail "no PostgreSQL server binaries under /usr/lib/postgresql"
  mkdir -p "$PG_DATA" && chmod 700 "$PG_DATA"
  [ "$(id -u)" = 0 ] && { as_pg_owner true || fail "cannot create the postgres user"; chown postgres "$PG_DATA"; }
  if [ ! -f "$PG_DATA/PG_VERSION" ]; then
    note "initdb $PG_DATA"
    as_pg_owner "$bin/initdb" -D "$PG_DATA" -U postgres --auth=trust --no-locale -E UTF8 >>"$LOG" 2>&1 \
      || fail "initdb into $PG_DATA failed (see $LOG)"
  fi
  note "pg_ctl start $PG_DATA on port $PG_PORT"
  as_pg_owner "$bin/pg_ctl" -D "$PG_DATA" -l "$PG_DATA/server.log" -w -t 30 \
    -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PG_DATA" start >>"$LOG" 2>&1 \
    || fail "PostgreSQL did not start from $PG_DATA (see $PG_DATA/server.log)"
}

ensure_pg() {
  { command -v psql && command -v pg_isready; } >/dev/null 2>&1 || apt_install postgresql-client
  pg_ok && return 0
  if pg_listening; then
    # Someone else's server: add the database if that is all it lacks, never change its config.
    pg_create_test_db
    pg_ok && return 0
    fail "the PostgreSQL server on 127.0.0.1:$PG_PORT refuses user postgres on database test without a password (trust auth expected)"
  fi
  [ -n "$(pg_bindir)" ] || apt_install postgresql
  local started
  started="$(start_distro_clusters)"
  if [ -n "$started" ] && wait_for pg_listening 15; then
    pg_ok || pg_create_test_db
    pg_ok && return 0
    # The distribution's cluster wants passwords over TCP: put it back as it was, use our own.
    note "distribution cluster refuses trust access; stopping it"
    while read -r ver name; do pg_ctlcluster "$ver" "$name" stop >>"$LOG" 2>&1; done <<<"$started"
  fi
  start_own_cluster
  wait_for pg_listening 15 || fail "PostgreSQL is not accepting connections on 127.0.0.1:$PG_PORT"
  pg_ok || pg_create_test_db
  pg_ok || fail "PostgreSQL on 127.0.0.1:$PG_PORT is up but database test is unreachable (see $LOG)"
}

redis_ok() { [ "$(timeout 5 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ]; }

ensure_redis() {
  { command -v redis-server && command -v redis-cli; } >/dev/null 2>&1 || apt_install redis-server
  redis_ok && return 0
  note "redis-server on 127.0.0.1:$REDIS_PORT"
  # No persistence: a test server keeps nothing across restarts.
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --daemonize yes --save '' --appendonly no \
    --dir "${TMPDIR:-/tmp}" --logfile "${TMPDIR:-/tmp}/redis-$REDIS_PORT.log" >>"$LOG" 2>&1
  wait_for redis_ok 10 || fail "Redis is not answering PING on 127.0.0.1:$REDIS_PORT (see $LOG)"
}

ensure_pg
ensure_redis
