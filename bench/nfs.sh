#!/usr/bin/env bash
# Cairn over FUSE vs Cairn over NFS vs NFS-Ganesha: `cairn bench` on each,
# one table. See bench/README.md ("NFS gateway"). Run as root (FUSE mount,
# drop_caches, Ganesha, rpcbind).
#
#   bench/nfs.sh                                   # all three targets
#   SEQ_SIZE=256M META_FILES=2000 bench/nfs.sh     # the run in docs/performance.md
#   TARGETS="fuse cairn-nfs" bench/nfs.sh          # without Ganesha
#   TARGETS="fuse cairn-nfs cairn-nfs-1 cairn-nfs-call ganesha"
#        # also Cairn NFS with one call in flight, and with one call per
#        # application read/write (no gathering into NFS_TRANSFER-sized calls)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CAIRN=${CAIRN:-./bin/cairn}
TARGETS=${TARGETS:-fuse cairn-nfs ganesha}
BENCH_OUT=${BENCH_OUT:-./bench-results}
BENCH_TMP=${BENCH_TMP:-/tmp}
SEQ_SIZE=${SEQ_SIZE:-256M}
SEQ_BS=${SEQ_BS:-8K,32K,128K}
META_FILES=${META_FILES:-2000}
META_PROCS=${META_PROCS:-4}
NFS_WINDOW=${NFS_WINDOW:-15}       # READ/WRITE calls in flight over NFS (a Linux client with 15 x rsize read-ahead)
NFS_TRANSFER=${NFS_TRANSFER:-server} # their size: the server's preferred (as Linux), call, or a size
CAIRN_MOUNT_OPTS=${CAIRN_MOUNT_OPTS:-}

BENCH_NAME=nfs-bench
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"

need_root "FUSE mount, drop_caches, Ganesha"
[[ -x $CAIRN ]] || die "cairn binary not found at $CAIRN (set CAIRN=...)"
need_cmd python3
for t in $TARGETS; do
	case $t in
	fuse | cairn-nfs | cairn-nfs-1 | cairn-nfs-call) ;;
	ganesha)
		command -v ganesha.nfsd >/dev/null || die "ganesha.nfsd not installed (scripts/install-test-deps.sh: nfs-ganesha, nfs-ganesha-vfs)"
		need_cmd rpcbind "a dependency of nfs-ganesha"
		;;
	*) die "unknown target $t (use fuse, cairn-nfs, cairn-nfs-1, cairn-nfs-call, ganesha)" ;;
	esac
done

mkdir -p "$BENCH_OUT"
BENCH_OUT=$(cd "$BENCH_OUT" && pwd)
stamp=$(date +%Y%m%d-%H%M%S)
ROOT=$(mktemp -d "$BENCH_TMP/cairn-nfsbench.XXXXXX")
CAIRN_PID="" CAIRN_MNT="" GANESHA_PID="" RPCBIND_PID=""
RPCBIND_FILES=() # files a private rpcbind leaves in /run, removed if it made them

# stop PID NAME: SIGTERM a process this script started, wait up to 20 s,
# then SIGKILL it.
stop() {
	local pid=$1 name=$2 _
	kill -0 "$pid" 2>/dev/null || return 0
	log "stopping $name (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || return 0
	for _ in $(seq 1 40); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.5
	done
	log "WARNING: $name (pid $pid) ignored SIGTERM; killing it"
	kill -KILL "$pid" 2>/dev/null || true
}

cleanup() {
	local rc=$?
	set +e
	if [[ -n $CAIRN_MNT ]] && mountpoint -q "$CAIRN_MNT"; then
		"$CAIRN" umount "$CAIRN_MNT" >/dev/null 2>&1
		for _ in $(seq 1 20); do
			mountpoint -q "$CAIRN_MNT" || break
			sleep 0.5
		done
		if mountpoint -q "$CAIRN_MNT"; then
			log "forcing lazy unmount of $CAIRN_MNT"
			fusermount3 -u -z "$CAIRN_MNT" 2>/dev/null || umount -l "$CAIRN_MNT" 2>/dev/null
		fi
	fi
	[[ -n $CAIRN_PID ]] && stop "$CAIRN_PID" "cairn mount"
	[[ -n $GANESHA_PID ]] && stop "$GANESHA_PID" ganesha.nfsd
	if [[ -n $RPCBIND_PID ]]; then
		stop "$RPCBIND_PID" rpcbind
		rm -f "${RPCBIND_FILES[@]}"
	fi
	if [[ ${BENCH_KEEP:-0} == 1 ]]; then log "keeping $ROOT"; else rm -rf "$ROOT"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# free_ports N: N TCP ports free on 127.0.0.1 now.
free_ports() {
	python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

wait_port() { # port: wait until something listens on 127.0.0.1:port
	local _
	for _ in $(seq 1 60); do
		ss -Hltn "sport = :$1" | grep -q . && return 0
		sleep 0.25
	done
	return 1
}

# bench NAME ARGS...: cairn bench --json into $ROOT/NAME.json, table to the log.
bench() {
	local name=$1
	shift
	log "== $name: cairn bench $*"
	"$CAIRN" bench --json --drop-caches --size "$SEQ_SIZE" --bs "$SEQ_BS" \
		--files "$META_FILES" --procs "$META_PROCS" "$@" >"$ROOT/$name.json" ||
		die "cairn bench on $name failed"
	cp "$ROOT/$name.json" "$BENCH_OUT/nfs-$stamp-$name.json"
	reports+=("$name=$ROOT/$name.json")
}

want() { [[ " $TARGETS " == *" $1 "* ]]; }

read -r CAIRN_NFS_PORT METRICS_PORT GANESHA_NFS_PORT GANESHA_MNT_PORT GANESHA_NLM_PORT GANESHA_RQ_PORT < <(free_ports 6)
reports=()
start=$SECONDS
log "targets: $TARGETS; scratch $ROOT; load: $(cut -d' ' -f1-3 /proc/loadavg)"

# --- Cairn: one embedded volume, mounted with FUSE and served over NFS by the same process
if want fuse || want cairn-nfs || want cairn-nfs-1 || want cairn-nfs-call; then
	d=$ROOT/cairn
	mkdir -p "$d/mnt"
	"$CAIRN" format --data "file://$d/data" "pebble://$d/meta" nfsbench >"$d/format.log" 2>&1 ||
		{ cat "$d/format.log" >&2; die "cairn format failed"; }
	# shellcheck disable=SC2086  # CAIRN_MOUNT_OPTS is a word list
	"$CAIRN" mount -o allow_other --log "$d/mount.log" --nfs-listen "127.0.0.1:$CAIRN_NFS_PORT" \
		--metrics "127.0.0.1:$METRICS_PORT" $CAIRN_MOUNT_OPTS "pebble://$d/meta" "$d/mnt" >"$d/mount.out" 2>&1 &
	CAIRN_PID=$! CAIRN_MNT=$d/mnt
	for _ in $(seq 1 60); do
		mountpoint -q "$d/mnt" && break
		kill -0 "$CAIRN_PID" 2>/dev/null || { cat "$d/mount.out" "$d/mount.log" >&2; die "cairn mount exited"; }
		sleep 0.25
	done
	mountpoint -q "$d/mnt" || die "cairn mount did not come up"
	wait_port "$CAIRN_NFS_PORT" || die "cairn NFS gateway not listening on $CAIRN_NFS_PORT"
	metrics=(--server-pid "$CAIRN_PID" --server-metrics "http://127.0.0.1:$METRICS_PORT/metrics")
	if want fuse; then bench fuse --path "$d/mnt" "${metrics[@]}"; fi
	if want cairn-nfs; then
		bench cairn-nfs --nfs "127.0.0.1:$CAIRN_NFS_PORT/" --nfs-window "$NFS_WINDOW" --nfs-transfer "$NFS_TRANSFER" "${metrics[@]}"
	fi
	if want cairn-nfs-1; then # one call at a time
		bench cairn-nfs-1 --nfs "127.0.0.1:$CAIRN_NFS_PORT/" --nfs-window 1 --nfs-transfer "$NFS_TRANSFER" "${metrics[@]}"
	fi
	if want cairn-nfs-call; then # one call per application read or write
		bench cairn-nfs-call --nfs "127.0.0.1:$CAIRN_NFS_PORT/" --nfs-window "$NFS_WINDOW" --nfs-transfer call "${metrics[@]}"
	fi
fi

# --- NFS-Ganesha (Debian), FSAL VFS on a scratch directory, private ports
if want ganesha; then
	g=$ROOT/ganesha
	mkdir -p "$g/export" "$g/recovery"
	cat >"$g/ganesha.conf" <<CONF
NFS_CORE_PARAM {
	NFS_Port = $GANESHA_NFS_PORT;
	MNT_Port = $GANESHA_MNT_PORT;
	NLM_Port = $GANESHA_NLM_PORT;
	Rquota_Port = $GANESHA_RQ_PORT;
	Bind_addr = 127.0.0.1;
	Protocols = 3;
	Enable_NLM = false;
	Enable_RQUOTA = false;
	Enable_UDP = false;
}
NFS_KRB5 { Active_krb5 = false; }
NFSV4 { Graceless = true; RecoveryRoot = "$g/recovery"; }
EXPORT {
	Export_Id = 1;
	Path = "$g/export";
	Pseudo = "$g/export";
	Access_Type = RW;
	Squash = No_Root_Squash;
	Protocols = 3;
	Transports = TCP;
	SecType = sys;
	FSAL { Name = VFS; }
}
LOG { Default_Log_Level = EVENT; }
CONF
	# Ganesha 4.3 exits when it cannot register with rpcbind ("Cannot
	# register NFS V3 on TCP"). Start a private rpcbind only if none runs
	# (nothing on port 111, no /run/rpcbind.sock); stop it at the end.
	if ! ss -Hltn 'sport = :111' | grep -q . && [[ ! -e /run/rpcbind.sock ]]; then
		for f in /run/rpcbind.sock /run/rpcbind.lock /run/rpcbind/portmap.xdr /run/rpcbind/rpcbind.xdr; do
			[[ -e $f ]] || RPCBIND_FILES+=("$f")
		done
		rpcbind -f >"$g/rpcbind.log" 2>&1 &
		RPCBIND_PID=$!
		wait_port 111 || die "rpcbind did not start"
		log "started a private rpcbind (pid $RPCBIND_PID)"
	else
		log "rpcbind already runs: Ganesha registers with it"
	fi
	ganesha.nfsd -F -f "$g/ganesha.conf" -L "$g/ganesha.log" -p "$g/ganesha.pid" -N NIV_EVENT >"$g/ganesha.out" 2>&1 &
	GANESHA_PID=$!
	if ! wait_port "$GANESHA_NFS_PORT" || ! wait_port "$GANESHA_MNT_PORT"; then
		tail -n 20 "$g/ganesha.log" >&2
		die "ganesha did not start (log above)"
	fi
	bench ganesha --nfs "127.0.0.1:$GANESHA_NFS_PORT$g/export" --nfs-mount-port "$GANESHA_MNT_PORT" \
		--nfs-window "$NFS_WINDOW" --nfs-transfer "$NFS_TRANSFER" --server-pid "$GANESHA_PID"
fi

table=$BENCH_OUT/nfs-$stamp.md
{
	echo "# NFS benchmark $stamp"
	echo
	echo "host: $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r), scratch on $(findmnt -n -o FSTYPE -T "$BENCH_TMP"), load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "cairn: $("$CAIRN" version 2>/dev/null | head -1), embedded (pebble, file data), one mount process serving FUSE and --nfs-listen; opts: ${CAIRN_MOUNT_OPTS:-default}"
	if want ganesha; then echo "ganesha: $(dpkg-query -W -f='${Version}' nfs-ganesha 2>/dev/null), FSAL VFS on $(findmnt -n -o FSTYPE -T "$ROOT")"; fi
	echo "seq: $SEQ_SIZE file, bs $SEQ_BS, write ends with fsync/COMMIT, page cache dropped before reads; NFS: Go client, $NFS_WINDOW READ/WRITE calls in flight on one connection, transfer size $NFS_TRANSFER;" \
		"meta: $META_FILES files, $META_PROCS workers"
	echo
	python3 "$HERE/nfstable.py" "${reports[@]}"
	echo
	echo "elapsed: $((SECONDS - start)) s"
} >"$table"
cat "$table"
log "table: $table"
