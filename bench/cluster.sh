#!/usr/bin/env bash
# An emulated cluster on one machine (issue 37): N client "hosts", each a
# network namespace with its own veth link capped by tc tbf, the servers
# (PostgreSQL and versitygw, scripts/shared-env.sh) in a namespace of their
# own behind a capped link, and the same workloads run on every client at
# once through three ways of serving them:
#
#   direct        a Cairn FUSE mount in every client namespace
#   gateway       one `cairn gateway nfs` in a namespace of its own, behind
#                 a link as fast as a client's, used by every client over NFS
#   gateway-each  a gateway in every client namespace, used over loopback
#
# Every client runs `cairn bench --json` (the Go NFS client for the NFS
# modes) with --start-at, so all begin together; bench/clustertable.py
# turns the clients' reports into aggregate throughput and efficiency.
# See bench/README.md ("Many clients on one network") and
# docs/design/0009-cluster-harness.md. Run as root.
#
#   bench/cluster.sh                                  # N = 1 2 4 8, append, all modes, 1 run
#   CLIENTS="1 2 4 8 16" RUNS=3 bench/cluster.sh      # the run in docs/performance.md
#   MODES=direct PHASES="append seq meta meta-shared" CLIENTS="1 4" bench/cluster.sh
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CAIRN=${CAIRN:-./bin/cairn}
CLIENTS=${CLIENTS:-1 2 4 8}          # numbers of clients, one point each
MODES=${MODES:-direct gateway gateway-each}
PHASES=${PHASES:-append}             # append, seq, meta, meta-shared
RUNS=${RUNS:-1}
CLIENT_RATE=${CLIENT_RATE:-20mbit}   # each client's link, each direction
SERVER_RATE=${SERVER_RATE:-1gbit}    # the servers' link (PostgreSQL and S3 share it)
GATEWAY_RATE=${GATEWAY_RATE:-$CLIENT_RATE} # the one gateway's link
APPEND_SIZE=${APPEND_SIZE:-16M}      # bytes each client appends
APPEND_RECORD=${APPEND_RECORD:-1M}
SEQ_SIZE=${SEQ_SIZE:-16M}            # each client's sequential file
SEQ_BS=${SEQ_BS:-128K}
META_FILES=${META_FILES:-400}        # files each client creates and stats
META_PROCS=${META_PROCS:-2}
CACHE_MEM=${CACHE_MEM:-64M}          # of each mount and gateway
BUFFER_SIZE=${BUFFER_SIZE:-64M}
NFS_WINDOW=${NFS_WINDOW:-15}
NFS_TIMEOUT=${NFS_TIMEOUT:-10m}      # per NFS call: 16 clients queue for minutes behind one gateway's link
CLUSTER_NET=${CLUSTER_NET:-10.231.0} # a free /24: .1 host bridge, .2 servers, .3 gateway, .11+ clients
CAIRN_MOUNT_OPTS=${CAIRN_MOUNT_OPTS:-}
CAIRN_GATEWAY_OPTS=${CAIRN_GATEWAY_OPTS:-}
BENCH_OUT=${BENCH_OUT:-./bench-results}
BENCH_TMP=${BENCH_TMP:-/tmp}
BENCH_KEEP=${BENCH_KEEP:-0}
IDLE_SECONDS=${IDLE_SECONDS:-20}     # length of the idle phase
NFS_PORT=20490
POINT_DB=""
POINT_DIR=""

BENCH_NAME=cluster
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"

need_root "network namespaces, tc, FUSE mounts"
need_cmd ip
need_cmd tc
need_cmd nsenter
need_cmd python3
[[ -x $CAIRN ]] || die "cairn binary not found at $CAIRN (set CAIRN=...)"
CAIRN=$(cd "$(dirname "$CAIRN")" && pwd)/$(basename "$CAIRN")
SHARED_ENV=$HERE/../scripts/shared-env.sh
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive number"
maxn=0
for n in $CLIENTS; do
	[[ $n =~ ^[1-9][0-9]*$ && $n -le 200 ]] || die "CLIENTS: $n is not a number of clients (1-200)"
	((n > maxn)) && maxn=$n
done
for m in $MODES; do
	case $m in direct | gateway | gateway-each) ;; *) die "unknown mode $m (direct, gateway, gateway-each)" ;; esac
done
for p in $PHASES; do
	case $p in append | seq | seqw | seqr | meta | meta-shared | idle) ;; *) die "unknown phase $p (append, seq, seqw, seqr, meta, meta-shared, idle)" ;; esac
done

# burst RATE: a tbf bucket of 10 ms at RATE, at least 32 KiB.
burst() {
	python3 - "$1" <<'PY'
import re, sys
m = re.fullmatch(r"([0-9.]+)([kmg]?)(bit|bps)", sys.argv[1].lower())
if not m:
    sys.exit("bad rate " + sys.argv[1])
v = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
v = v / 8 if m.group(3) == "bit" else v
print(max(32768, int(v / 100)))
PY
}
for r in "$CLIENT_RATE" "$SERVER_RATE" "$GATEWAY_RATE"; do burst "$r" >/dev/null || die "bad rate $r (e.g. 20mbit, 1gbit)"; done

mkdir -p "$BENCH_OUT"
stamp=$(date +%Y%m%d-%H%M%S)
OUT=$(cd "$BENCH_OUT" && pwd)/cluster-$stamp
mkdir -p "$OUT"
ROOT=$(mktemp -d "$BENCH_TMP/cairn-cluster.XXXXXX")
chmod 0755 "$ROOT" # the postgres user must reach its data directory
P=cl$(($$ % 10000)) # prefix of every namespace and link this run makes
NETNS=()            # namespaces made
BRIDGE=""           # the bridge, once made
LINKS=()            # host-side veths made
MOUNTS=()           # "mountpoint pid" of running mounts
PIDS=()             # gateways and benches running
SHARED_DIR=""

cleanup() {
	local rc=$?
	set +e
	trap '' INT TERM
	for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
	stop_mounts
	stop_pids
	if [[ -n $SHARED_DIR ]]; then
		log "stopping PostgreSQL and versitygw"
		"$SHARED_ENV" stop "$SHARED_DIR" || log "WARNING: shared-env.sh stop failed"
	fi
	for ns in "${NETNS[@]}"; do ip netns del "$ns" 2>/dev/null; done
	for l in "${LINKS[@]}"; do ip link del "$l" 2>/dev/null; done
	[[ -z $BRIDGE ]] || ip link del "$BRIDGE" 2>/dev/null
	if [[ $BENCH_KEEP == 1 ]]; then log "keeping $ROOT"; else rm -rf "$ROOT"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- network: a bridge on the host, a namespace per host of the cluster

# addhost NS ADDR RATE: namespace NS with ADDR on a veth to the bridge,
# both ends capped at RATE (tbf shapes what leaves an interface).
addhost() {
	local ns=$1 addr=$2 rate=$3 h=${P}h${#LINKS[@]} b
	b=$(burst "$rate")
	ip netns add "$ns"
	NETNS+=("$ns")
	ip link add "$h" type veth peer name "${h}n"
	LINKS+=("$h")
	ip link set "${h}n" netns "$ns"
	ip link set "$h" master "${P}br" up
	ip -n "$ns" link set lo up
	ip -n "$ns" addr add "$addr/24" dev "${h}n"
	ip -n "$ns" link set "${h}n" up
	tc qdisc add dev "$h" root tbf rate "$rate" burst "$b" latency 100ms
	tc -n "$ns" qdisc add dev "${h}n" root tbf rate "$rate" burst "$b" latency 100ms
}

in_ns() { # NS CMD...: run CMD in NS's network (the host's mounts stay visible)
	local ns=$1
	shift
	nsenter --net="/run/netns/$ns" -- "$@"
}

# netns NS: nsenter's option for NS; for processes started in the
# background, whose pid ($!) must be the command's own (nsenter execs it)
netns() { echo "--net=/run/netns/$1"; }

ip link add "${P}br" type bridge
BRIDGE=${P}br
ip link set "${P}br" up
ip addr add "$CLUSTER_NET.1/24" dev "${P}br"
addhost "$P-srv" "$CLUSTER_NET.2" "$SERVER_RATE"
addhost "$P-gw" "$CLUSTER_NET.3" "$GATEWAY_RATE"
for ((i = 1; i <= maxn; i++)); do addhost "$P-c$i" "$CLUSTER_NET.$((10 + i))" "$CLIENT_RATE"; done
log "network: bridge ${P}br $CLUSTER_NET.0/24; servers $CLUSTER_NET.2 ($SERVER_RATE), gateway $CLUSTER_NET.3 ($GATEWAY_RATE), $maxn clients from $CLUSTER_NET.11 ($CLIENT_RATE each)"

SHARED_DIR=$ROOT/shared
in_ns "$P-srv" env SHARED_LISTEN="$CLUSTER_NET.2" "$SHARED_ENV" start "$SHARED_DIR" || { SHARED_DIR=""; die "shared-env.sh start failed"; }
# shellcheck disable=SC1091  # written by shared-env.sh start
source "$SHARED_DIR/env"

# --- servers of one point

wait_mounted() { # MNT PID
	local _
	for _ in $(seq 1 120); do
		mountpoint -q "$1" && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.25
	done
	return 1
}

wait_listen() { # NS ADDR PORT PID
	local _
	for _ in $(seq 1 120); do
		in_ns "$1" bash -c "echo >/dev/tcp/$2/$3" 2>/dev/null && return 0
		kill -0 "$4" 2>/dev/null || return 1
		sleep 0.25
	done
	return 1
}

stop_mounts() {
	local m mnt pid _
	for m in "${MOUNTS[@]}"; do
		mnt=${m% *} pid=${m#* }
		mountpoint -q "$mnt" && "$CAIRN" umount "$mnt" >/dev/null 2>&1
		for _ in $(seq 1 60); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.5
		done
		if kill -0 "$pid" 2>/dev/null; then
			log "WARNING: mount $mnt (pid $pid) still runs; killing it"
			kill -KILL "$pid" 2>/dev/null
		fi
		wait "$pid" 2>/dev/null || true
		if mountpoint -q "$mnt"; then fusermount3 -u -z "$mnt" 2>/dev/null || umount -l "$mnt"; fi
	done
	MOUNTS=()
}

stop_pids() {
	local pid _
	for pid in "${PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || continue
		for _ in $(seq 1 60); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.5
		done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	PIDS=()
}

# start_point MODE N META DIR: the servers of MODE for N clients; sets
# TARGET[i] (cairn bench's target arguments of client i) and SRV_PIDS.
declare -a TARGET
SRV_PIDS=()
start_point() {
	local mode=$1 n=$2 meta=$3 d=$4 i pid
	SRV_PIDS=()
	# shellcheck disable=SC2206  # word lists
	local mopts=(--cache-mem "$CACHE_MEM" --buffer-size "$BUFFER_SIZE" $CAIRN_MOUNT_OPTS)
	# shellcheck disable=SC2206
	local gopts=(--cache-mem "$CACHE_MEM" --buffer-size "$BUFFER_SIZE" $CAIRN_GATEWAY_OPTS)
	case $mode in
	direct)
		for ((i = 1; i <= n; i++)); do
			mkdir -p "$d/mnt$i"
			nsenter "$(netns "$P-c$i")" -- "$CAIRN" mount --log "$d/mount$i.log" "${mopts[@]}" "$meta" "$d/mnt$i" >"$d/mount$i.out" 2>&1 &
			pid=$!
			MOUNTS+=("$d/mnt$i $pid")
			SRV_PIDS+=("$pid")
			TARGET[i]="--path $d/mnt$i"
		done
		for ((i = 1; i <= n; i++)); do
			wait_mounted "$d/mnt$i" "${SRV_PIDS[i - 1]}" || { cat "$d/mount$i.out" "$d/mount$i.log" >&2; die "mount $i did not come up"; }
		done
		;;
	gateway)
		nsenter "$(netns "$P-gw")" -- "$CAIRN" gateway nfs --listen "$CLUSTER_NET.3:$NFS_PORT" --log "$d/gateway.log" "${gopts[@]}" "$meta" >"$d/gateway.out" 2>&1 &
		pid=$!
		PIDS+=("$pid")
		SRV_PIDS+=("$pid")
		wait_listen "$P-gw" "$CLUSTER_NET.3" "$NFS_PORT" "$pid" || { cat "$d/gateway.out" "$d/gateway.log" >&2; die "gateway did not come up"; }
		for ((i = 1; i <= n; i++)); do TARGET[i]="--nfs $CLUSTER_NET.3:$NFS_PORT/ --nfs-window $NFS_WINDOW --nfs-timeout $NFS_TIMEOUT"; done
		;;
	gateway-each)
		for ((i = 1; i <= n; i++)); do
			nsenter "$(netns "$P-c$i")" -- "$CAIRN" gateway nfs --listen "127.0.0.1:$NFS_PORT" --log "$d/gateway$i.log" "${gopts[@]}" "$meta" >"$d/gateway$i.out" 2>&1 &
			pid=$!
			PIDS+=("$pid")
			SRV_PIDS+=("$pid")
			TARGET[i]="--nfs 127.0.0.1:$NFS_PORT/ --nfs-window $NFS_WINDOW --nfs-timeout $NFS_TIMEOUT"
		done
		for ((i = 1; i <= n; i++)); do
			wait_listen "$P-c$i" 127.0.0.1 "$NFS_PORT" "${SRV_PIDS[i - 1]}" || { cat "$d/gateway$i.out" "$d/gateway$i.log" >&2; die "gateway $i did not come up"; }
		done
		;;
	esac
}

# cpu_ticks: busy (user, nice, system, irq, softirq) and all ticks of the machine
cpu_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }

# proc_ticks PID...: CPU ticks (user + system) the processes have used
proc_ticks() {
	local pid t=0 v
	for pid in "$@"; do
		v=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null) || v=0
		t=$((t + ${v:-0}))
	done
	echo "$t"
}

# server_pids: versitygw and every PostgreSQL process of this run
server_pids() {
	cat "$SHARED_DIR/s3/pid" 2>/dev/null
	local pm
	pm=$(head -1 "$SHARED_DIR/pg/data/postmaster.pid" 2>/dev/null) || return 0
	echo "$pm"
	pgrep -P "$pm" 2>/dev/null || true
}

# leases N: the directory lease counters of the first N direct mounts,
# summed: acquired, released, recalls sent (0 0 0 in the NFS modes)
leases() {
	local i a=0 r=0 c=0 v
	for ((i = 1; i <= $1; i++)); do
		[[ -d $POINT_DIR/mnt$i ]] || continue
		v=$("$CAIRN" stats --count 1 --interval 100ms --json "$POINT_DIR/mnt$i" 2>/dev/null | python3 -c '
import json, sys
t = json.loads(sys.stdin.readline())["totals"].get("meta_leases") or {}
print(t.get("acquired", 0), t.get("released", 0), t.get("recalls", 0))' 2>/dev/null) || v="0 0 0"
		set -- "$1" $v
		a=$((a + $2)) r=$((r + $3)) c=$((c + $4))
	done
	echo "$a $r $c"
}

# phase RUN MODE N PHASE: the phase's workload on every client at once.
phase() {
	local run=$1 mode=$2 n=$3 ph=$4 i args files=() pids=() failed=0
	case $ph in
	append) args=(--workloads append --size "$APPEND_SIZE" --append-record "$APPEND_RECORD") ;;
	seq) args=(--workloads seq-write,seq-read --size "$SEQ_SIZE" --bs "$SEQ_BS") ;;
	meta) args=(--workloads create,stat --files "$META_FILES" --procs "$META_PROCS") ;;
	meta-shared) args=(--workloads create,stat --files "$META_FILES" --procs "$META_PROCS" --shared-dir shared) ;;
	# seqw then seqr: the file is kept, so that every client's read begins
	# together (in seq, each client reads when its own write has ended)
	seqw) args=(--workloads seq-write --size "$SEQ_SIZE" --bs "$SEQ_BS") ;;
	seqr) args=(--workloads seq-read --size "$SEQ_SIZE" --bs "$SEQ_BS") ;;
	idle) ;; # no workload: what the mounts or gateways do alone (heartbeats, session checks)
	esac
	local srv0 own0 t0=$SECONDS
	srv0=$(proc_ticks $(server_pids))
	own0=$(proc_ticks "${SRV_PIDS[@]}")
	local tx0 la0 lr0 lc0
	tx0=$(db_commits)
	read -r la0 lr0 lc0 < <(leases "$n")
	# The start is set after the counters above are read (reading the
	# leases of 16 mounts takes seconds), two seconds ahead: every client
	# is running and has made its directory by then.
	local start
	start=$(python3 -c 'import time; print(f"{time.time() + 2:.3f}")')
	read -r busy0 total0 < <(cpu_ticks)
	if [[ $ph == idle ]]; then
		sleep "$IDLE_SECONDS"
		n=0
	fi
	for ((i = 1; i <= n; i++)); do
		local f=r$run-$mode-n$n-$ph-c$i.json
		files+=("$f")
		# shellcheck disable=SC2086  # TARGET is a word list
		local keep=()
		[[ $ph != seqw && $ph != seqr ]] || keep=(--seq-file "seq-c$i/seq.dat")
		nsenter "$(netns "$P-c$i")" -- "$CAIRN" bench ${TARGET[i]} "${args[@]}" "${keep[@]}" --start-at "$start" --json >"$OUT/$f" 2>"$OUT/${f%.json}.err" &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		if ! wait "${pids[i]}"; then
			failed=1
			log "WARNING: client $((i + 1)): cairn bench failed: $(tail -n 3 "$OUT/${files[i]%.json}.err")"
		fi
	done
	read -r busy1 total1 < <(cpu_ticks)
	local busy srv own hz
	hz=$(getconf CLK_TCK)
	# (a PostgreSQL backend that ended during the phase is not counted)
	srv=$(($(proc_ticks $(server_pids)) - srv0))
	own=$(($(proc_ticks "${SRV_PIDS[@]}") - own0))
	busy=$(python3 -c "print(round(100*($busy1-$busy0)/max(1,$total1-$total0),1))")
	local tx=$(($(db_commits) - tx0))
	n=$3
	local la1 lr1 lc1
	read -r la1 lr1 lc1 < <(leases "$n")
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$run" "$mode" "$n" "$ph" "$((la1 - la0))" "$((lr1 - lr0))" "$((lc1 - lc0))" "$((SECONDS - t0))" >>"$OUT/leases.tsv"
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$run" "$mode" "$n" "$ph" "$(python3 -c "print(round($own/$hz,2))")" \
		"$(python3 -c "print(round($srv/$hz,2))")" "$((SECONDS - t0))" "$tx" >>"$OUT/cpu.tsv"
	local IFS=,
	[[ $ph == idle ]] || printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$run" "$mode" "$n" "$ph" "$busy" "${files[*]}" >>"$OUT/points.tsv"
	log "   $ph: done in $((SECONDS - t0)) s, $tx PostgreSQL commits, machine CPU busy $busy%, CPU-seconds: mounts or gateways $(python3 -c "print(round($own/$hz,1))"), PostgreSQL and versitygw $(python3 -c "print(round($srv/$hz,1))")$([[ $failed == 0 ]] || echo ', SOME CLIENTS FAILED')"
}

# db_commits: transactions committed in the point's database so far
db_commits() {
	local c
	c=$(/usr/lib/postgresql/15/bin/psql -h "$PG_HOST" -p "$PG_PORT" -U postgres -d postgres -Atc \
		"SELECT xact_commit FROM pg_stat_database WHERE datname = '$POINT_DB'" 2>/dev/null) || c=0
	echo "${c:-0}"
}

# memory and PostgreSQL connections of a point, after its phases
point_stats() { # RUN MODE N DB
	local pid hwm conns
	for pid in "${SRV_PIDS[@]}"; do
		hwm=$(awk '/VmHWM/{print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
		printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$pid" "$hwm" >>"$OUT/memory.tsv"
	done
	conns=$(/usr/lib/postgresql/15/bin/psql -h "$PG_HOST" -p "$PG_PORT" -U postgres -d postgres -Atc \
		"SELECT count(*) FROM pg_stat_activity WHERE datname = '$4'" 2>/dev/null || echo '?')
	printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$conns" >>"$OUT/connections.tsv"
}

{
	echo "host: $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r)"
	echo "cairn: $("$CAIRN" version 2>/dev/null | head -1)"
	echo "clients: $CLIENTS; modes: $MODES; phases: $PHASES; runs: $RUNS"
	echo "links: client $CLIENT_RATE, servers $SERVER_RATE, one gateway $GATEWAY_RATE (tc tbf, each direction)"
	echo "append $APPEND_SIZE per client in $APPEND_RECORD records; seq $SEQ_SIZE at $SEQ_BS; meta $META_FILES files x $META_PROCS workers per client"
	echo "mounts and gateways: --cache-mem $CACHE_MEM --buffer-size $BUFFER_SIZE $CAIRN_MOUNT_OPTS; NFS window $NFS_WINDOW"
} >"$OUT/config.txt"

start=$SECONDS
for ((run = 1; run <= RUNS; run++)); do
	for mode in $MODES; do
		for n in $CLIENTS; do
			name=cl${run}${mode//-/}n$n
			POINT_DB=$name
			POINT_DIR=$ROOT/$name
			log "== run $run: $mode, $n clients (volume $name)"
			d=$ROOT/$name
			mkdir -p "$d"
			meta=$("$SHARED_ENV" db "$SHARED_DIR" "$name" 2>"$d/db.err") || { cat "$d/db.err" >&2; die "cannot create database $name"; }
			"$CAIRN" format --data "s3://$name?endpoint=$S3_ENDPOINT" "$meta" "$name" >"$d/format.log" 2>&1 ||
				{ cat "$d/format.log" >&2; die "cairn format failed"; }
			start_point "$mode" "$n" "$meta" "$d"
			for ph in $PHASES; do phase "$run" "$mode" "$n" "$ph"; done
			point_stats "$run" "$mode" "$n" "$name"
			stop_mounts
			stop_pids
		done
	done
done

table=$OUT/table.md
{
	echo "# Cluster benchmark $stamp"
	echo
	sed 's/^/    /' "$OUT/config.txt"
	echo
	python3 "$HERE/clustertable.py" "$OUT"
	echo
	echo "Peak RSS of each mount or gateway (MiB), PostgreSQL connections of the volume's database at the end of each point:"
	echo
	python3 - "$OUT" <<'PY'
import collections, os, sys
d = sys.argv[1]
mem = collections.defaultdict(list)
for l in open(os.path.join(d, "memory.tsv")):
    run, mode, n, pid, kb = l.split()
    mem[(mode, int(n))].append(int(kb) / 1024)
conns = collections.defaultdict(list)
for l in open(os.path.join(d, "connections.tsv")):
    run, mode, n, c = l.split()
    conns[(mode, int(n))].append(c)
print("| mode | N | RSS per process, MiB (min-max) | connections |")
print("|---|---:|---|---|")
for k in sorted(mem):
    v = mem[k]
    print(f"| {k[0]} | {k[1]} | {min(v):.0f}-{max(v):.0f} | {' / '.join(conns[k])} |")
PY
	echo
	echo "elapsed: $((SECONDS - start)) s"
} >"$table"
cat "$table"
log "results: $OUT"
