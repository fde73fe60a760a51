#!/usr/bin/env bash
# Start or stop a private shared-mode environment for scripts and benchmarks:
# a PostgreSQL 15 cluster (unix socket only) and a versitygw S3 server on
# loopback, both under one directory. The Go tests start their own through
# internal/testenv; this is for shell users (e2e.sh, bench/run.sh).
#
#   scripts/shared-env.sh start DIR      start both; writes DIR/env
#   scripts/shared-env.sh db DIR NAME    create database NAME, print its URL
#   scripts/shared-env.sh stop DIR       stop both (by the pids they wrote)
#
# DIR/env defines PG_HOST (socket dir), PG_PORT, S3_ENDPOINT,
# AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; source it.
# Must run as root (the server runs as the postgres system user).
#
# SHARED_LISTEN=ADDR also serves both on that IPv4 address over TCP, for
# clients on other hosts or network namespaces (bench/cluster.sh):
# PostgreSQL trusts every client of the networks it is attached to
# (pg_hba "samenet"), S3_ENDPOINT names ADDR, DIR/env adds PG_ADDR, and
# db prints a TCP URL. PG_MAX_CONNECTIONS sets max_connections (300).
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
SHARED_LISTEN=${SHARED_LISTEN:-}
PG_MAX_CONNECTIONS=${PG_MAX_CONNECTIONS:-300}
log() { printf '[shared-env] %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}

versitygw_bin() {
	if [[ -n ${CAIRN_VERSITYGW:-} ]]; then
		echo "$CAIRN_VERSITYGW"
		return
	fi
	local gobin
	gobin=$(go env GOBIN)
	[[ -n $gobin ]] || gobin=$(go env GOPATH)/bin
	echo "$gobin/versitygw"
}

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

start() {
	local dir=$1
	[[ -x $PGBIN/initdb ]] || die "PostgreSQL 15 not found in $PGBIN (scripts/install-test-deps.sh installs it)"
	local gw
	gw=$(versitygw_bin)
	[[ -x $gw ]] || die "versitygw not found at $gw (scripts/install-test-deps.sh installs it)"
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	[[ ! -e $dir/env ]] || die "$dir/env exists: stop the environment first"

	# PostgreSQL: initdb refuses root, so the cluster belongs to postgres.
	mkdir -p "$dir/pg"
	chown postgres:postgres "$dir/pg"
	chmod 0755 "$dir"
	local pgport host=127.0.0.1
	pgport=$(free_port)
	runuser -u postgres -- "$PGBIN/initdb" -D "$dir/pg/data" -U postgres -A trust -E UTF8 --no-instructions >"$dir/pg/initdb.log" 2>&1 ||
		{
			cat "$dir/pg/initdb.log" >&2
			die "initdb failed"
		}
	if [[ -n $SHARED_LISTEN ]]; then
		host=$SHARED_LISTEN
		echo "host all all samenet trust" >>"$dir/pg/data/pg_hba.conf"
	fi
	runuser -u postgres -- "$PGBIN/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/server.log" -w -t 60 \
		-o "-c listen_addresses='$SHARED_LISTEN' -c unix_socket_directories='$dir/pg' -p $pgport -c max_connections=$PG_MAX_CONNECTIONS -c shared_buffers=256MB" start >/dev/null ||
		{
			cat "$dir/pg/server.log" >&2
			die "PostgreSQL did not start"
		}

	# versitygw on a free loopback port.
	mkdir -p "$dir/s3/root" "$dir/s3/sidecar"
	local s3port key secret
	s3port=$(free_port)
	key=cairn$RANDOM$RANDOM
	secret=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
	ROOT_ACCESS_KEY=$key ROOT_SECRET_KEY=$secret setsid "$gw" --access "$key" --secret "$secret" \
		--port "$host:$s3port" posix --sidecar "$dir/s3/sidecar" "$dir/s3/root" \
		>"$dir/s3/server.log" 2>&1 </dev/null &
	echo $! >"$dir/s3/pid"
	for _ in $(seq 100); do
		if (echo >"/dev/tcp/$host/$s3port") 2>/dev/null; then
			break
		fi
		sleep 0.1
	done
	(echo >"/dev/tcp/$host/$s3port") 2>/dev/null || {
		cat "$dir/s3/server.log" >&2
		die "versitygw did not start"
	}
	cat >"$dir/env" <<EOF
PG_HOST=$dir/pg
PG_PORT=$pgport
PG_ADDR=$SHARED_LISTEN
S3_ENDPOINT=http://$host:$s3port
AWS_ACCESS_KEY_ID=$key
AWS_SECRET_ACCESS_KEY=$secret
export PG_HOST PG_PORT PG_ADDR S3_ENDPOINT AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
EOF
	log "PostgreSQL on $dir/pg${SHARED_LISTEN:+ and $SHARED_LISTEN} (port $pgport), S3 at http://$host:$s3port"
}

db() {
	local dir=$1 name=$2
	# shellcheck disable=SC1091
	source "$dir/env"
	"$PGBIN/psql" -q -h "$PG_HOST" -p "$PG_PORT" -U postgres -d postgres -c "CREATE DATABASE \"$name\"" >&2
	if [[ -n ${PG_ADDR:-} ]]; then
		echo "postgres://postgres@$PG_ADDR:$PG_PORT/$name"
	else
		echo "postgres://postgres@/$name?host=$PG_HOST&port=$PG_PORT"
	fi
}

stop() {
	local dir=$1
	if [[ -f $dir/s3/pid ]]; then
		local pid
		pid=$(cat "$dir/s3/pid")
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
		rm -f "$dir/s3/pid"
	fi
	if [[ -f $dir/pg/data/postmaster.pid ]]; then
		runuser -u postgres -- "$PGBIN/pg_ctl" -D "$dir/pg/data" -m fast -w stop >/dev/null || true
	fi
	rm -f "$dir/env"
}

case ${1:-} in
start) start "${2:?DIR}" ;;
db) db "${2:?DIR}" "${3:?NAME}" ;;
stop) stop "${2:?DIR}" ;;
*) die "usage: $0 start|db|stop DIR [NAME]" ;;
esac
