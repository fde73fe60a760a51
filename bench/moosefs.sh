#!/usr/bin/env bash
# Start or stop a private one-host MooseFS (Debian's moosefs-master,
# moosefs-chunkserver and moosefs-client) for bench/run.sh:
#
#   bench/moosefs.sh start DIR    master + one chunkserver under DIR; writes DIR/env
#   bench/moosefs.sh stop DIR     stop both (each by its own lock file)
#
# DIR/env defines MFS_HOST and MFS_PORT, for `mfsmount -H $MFS_HOST -P $MFS_PORT`.
# The chunkserver refuses a master on a loopback address, so both listen on
# the first global IPv4 address of this host (MFS_HOST to choose another);
# the ports are free ones picked at start. Chunks are kept in DIR/hdd.
set -euo pipefail

log() { printf '[moosefs] %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}

cmd=${1:-}
dir=${2:-}
[[ -n $cmd && -n $dir ]] || die "usage: $0 start|stop DIR"

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1]); s.close()'
}

case $cmd in
start)
	for b in mfsmaster mfschunkserver mfsmount; do
		command -v "$b" >/dev/null || die "$b not found: install moosefs-master, moosefs-chunkserver and moosefs-client (scripts/install-test-deps.sh)"
	done
	host=${MFS_HOST:-$(ip -4 -o addr show scope global 2>/dev/null | awk '{sub(/\/.*/, "", $4); print $4; exit}')}
	[[ -n $host ]] || die "no global IPv4 address on this host (MooseFS refuses loopback); set MFS_HOST"
	id mfs >/dev/null 2>&1 || die "user mfs missing (the moosefs packages create it)"
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	mkdir -p "$dir/master" "$dir/cs" "$dir/hdd"
	chmod 755 "$dir"
	cp /var/lib/mfs/metadata.mfs.empty "$dir/master/metadata.mfs"
	chown -R mfs:mfs "$dir/master" "$dir/cs" "$dir/hdd"
	ml=$(free_port) cs=$(free_port) cl=$(free_port) csport=$(free_port)
	echo "*	/	rw,alldirs,admin,maproot=0:0" >"$dir/exports.cfg"
	: >"$dir/topology.cfg"
	cat >"$dir/master.cfg" <<-EOF
		DATA_PATH = $dir/master
		EXPORTS_FILENAME = $dir/exports.cfg
		TOPOLOGY_FILENAME = $dir/topology.cfg
		MATOML_LISTEN_HOST = $host
		MATOML_LISTEN_PORT = $ml
		MATOCS_LISTEN_HOST = $host
		MATOCS_LISTEN_PORT = $cs
		MATOCL_LISTEN_HOST = $host
		MATOCL_LISTEN_PORT = $cl
		NICE_LEVEL = 0
	EOF
	echo "$dir/hdd" >"$dir/hdd.cfg"
	cat >"$dir/chunkserver.cfg" <<-EOF
		DATA_PATH = $dir/cs
		HDD_CONF_FILENAME = $dir/hdd.cfg
		MASTER_HOST = $host
		MASTER_PORT = $cs
		CSSERV_LISTEN_HOST = $host
		CSSERV_LISTEN_PORT = $csport
		NICE_LEVEL = 0
	EOF
	mfsmaster -c "$dir/master.cfg" start >"$dir/master.log" 2>&1 || {
		cat "$dir/master.log" >&2
		die "mfsmaster did not start"
	}
	mfschunkserver -c "$dir/chunkserver.cfg" start >"$dir/chunkserver.log" 2>&1 || {
		cat "$dir/chunkserver.log" >&2
		mfsmaster -c "$dir/master.cfg" stop >/dev/null 2>&1 || true
		die "mfschunkserver did not start"
	}
	# Writes fail (ENOSPC) until the chunkserver has registered.
	for _ in $(seq 1 60); do
		if ss -tn state established "( sport = :$cs )" 2>/dev/null | grep -q "$host"; then
			printf 'MFS_HOST=%s\nMFS_PORT=%s\nexport MFS_HOST MFS_PORT\n' "$host" "$cl" >"$dir/env"
			log "master on $host:$cl, chunkserver registered, chunks in $dir/hdd"
			exit 0
		fi
		sleep 0.5
	done
	"$0" stop "$dir" || true
	die "the chunkserver did not register with the master within 30 s"
	;;
stop)
	rc=0
	if [[ -f $dir/chunkserver.cfg ]]; then
		mfschunkserver -c "$dir/chunkserver.cfg" stop >/dev/null 2>&1 || { log "stopping mfschunkserver failed"; rc=1; }
	fi
	if [[ -f $dir/master.cfg ]]; then
		mfsmaster -c "$dir/master.cfg" stop >/dev/null 2>&1 || { log "stopping mfsmaster failed"; rc=1; }
	fi
	rm -f "$dir/env"
	exit $rc
	;;
*) die "unknown command $cmd (use start or stop)" ;;
esac
