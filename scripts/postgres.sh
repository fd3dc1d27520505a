#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests and benches that share an Optuna study through a database.
#
#   scripts/postgres.sh start DIR   initdb DIR/data, start the server, create the database `kopt` and print
#                                   its URL (postgresql://kopt@127.0.0.1:PORT/kopt) on stdout
#   scripts/postgres.sh stop DIR    stop the server started in DIR (nothing to do if none runs)
#   scripts/postgres.sh bin         print the folder holding initdb and pg_ctl; exit 1 if there is none
#
# DIR is a folder of the caller's (a mktemp -d one); the caller removes it after `stop`. The server
# listens on 127.0.0.1 only, on a free port, with its unix socket in DIR and trust authentication (any
# local user connects as `kopt` without a password): for tests, never for data that matters. PostgreSQL
# refuses to run as root, so as root the server runs as the unprivileged user `postgres` (Debian's package
# creates it; `nobody` where it does not exist), which then owns DIR; DIR's parent folders must let that
# user through (mktemp -d's /tmp/tmp.XXXXXX does).
# Debian's binaries live in /usr/lib/postgresql/VERSION/bin (the newest is taken), not on PATH; elsewhere
# initdb and pg_ctl are looked for on PATH.
set -euo pipefail

usage() {
  echo "usage: $0 start DIR | stop DIR | bin" >&2
  exit 2
}

bindir() {
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$found" ] && [ -x "$found/initdb" ] && [ -x "$found/pg_ctl" ]; then
    echo "$found"
  elif command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(command -v initdb)"
  else
    echo "postgres.sh: no PostgreSQL server binaries (initdb, pg_ctl): on Debian, apt-get install postgresql" >&2
    return 1
  fi
}

# The server's user: this one, or an unprivileged one when this is root.
server_user() {
  if [ "$(id -u)" -ne 0 ]; then
    id -un
  elif id postgres >/dev/null 2>&1; then
    echo postgres
  else
    echo nobody
  fi
}

# Run a command as the server's user, from DIR (root's working folder may be closed to that user).
as_server() {
  local user
  user=$(server_user)
  if [ "$(id -u)" -ne 0 ]; then
    (cd "$dir" && "$@")
  else
    (cd "$dir" && runuser -u "$user" -- "$@")
  fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
  local bin port attempt
  bin=$(bindir)
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  case "$dir" in
  *\'* | *' '*)
    echo "postgres.sh: DIR must not hold quotes or spaces (it goes into postgresql.conf): $dir" >&2
    exit 2
    ;;
  esac
  if [ -e "$dir/data" ]; then
    echo "postgres.sh: $dir/data exists already: give a fresh folder (or stop and remove that one)" >&2
    exit 1
  fi
  if [ "$(id -u)" -eq 0 ]; then
    chown "$(server_user)" "$dir"
  fi
  as_server "$bin/initdb" -D "$dir/data" -U kopt --auth=trust --encoding=UTF8 --no-locale --no-sync \
    >"$dir/initdb.log" 2>&1 || {
    cat "$dir/initdb.log" >&2
    exit 1
  }
  for attempt in 1 2 3 4 5; do # a port found free may be taken before the server binds it: try another
    port=$(free_port)
    {
      echo "# scripts/postgres.sh"
      echo "listen_addresses = '127.0.0.1'"
      echo "port = $port"
      echo "unix_socket_directories = '$dir'"
      echo "fsync = off" # a test server: speed over durability
      echo "synchronous_commit = off"
      echo "max_connections = 200"
    } >>"$dir/data/postgresql.conf" # the last setting of a name wins
    if as_server "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null; then
      "$bin/createdb" -h 127.0.0.1 -p "$port" -U kopt kopt
      echo "postgresql://kopt@127.0.0.1:$port/kopt" | tee "$dir/url"
      return 0
    fi
    echo "postgres.sh: the server did not start on port $port (attempt $attempt):" >&2
    tail -n 5 "$dir/server.log" >&2 || true
  done
  exit 1
}

stop() {
  local bin
  bin=$(bindir)
  [ -d "$dir/data" ] || return 0
  dir=$(cd "$dir" && pwd)
  if as_server "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    as_server "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null
  fi
}

[ "$#" -ge 1 ] || usage
case "$1" in
start | stop)
  [ "$#" -eq 2 ] || usage
  dir=$2
  "$1"
  ;;
bin)
  [ "$#" -eq 1 ] || usage
  bindir
  ;;
*) usage ;;
esac
