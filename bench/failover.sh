#!/usr/bin/env bash
# bench/failover.sh — a shared volume whose PostgreSQL fails over under
# load (issue 37, "servers fail too"). PostgreSQL runs as a primary with a
# synchronous standby, managed by Patroni over etcd (Debian packages
# patroni and etcd-server), on this host; the volume's metadata URL names
# both servers with target_session_attrs=read-write, so that clients follow
# the primary. A FUSE mount runs a writer (create, write, fsync, close of
# small files, each timed) and a reader (stat and read of files already
# written); in the middle the primary's Patroni and PostgreSQL are killed
# with SIGKILL, as a host that dies. Patroni promotes the standby once the
# leader key expires (ttl $TTL s). Measured: the pause the clients see (the
# longest operation, and the gap in completions), operations failed, and at
# the end every fsynced file read back on a fresh mount, and fsck.
#
# The data store is a bucket served by two S3 gateways (versitygw) over one
# directory, the volume's data URL naming both. KILLS says what dies in
# each run: "postgres" (the primary, as above) or "s3" (the gateway the
# clients use, with SIGKILL).
#
#   bench/failover.sh                          # ~2 minutes
#   RUNS=3 KILLS="postgres s3" bench/failover.sh
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
BENCH_NAME=failover
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"

need_root "PostgreSQL runs as the postgres user; FUSE allow_other"
need_cmd patroni "Debian package patroni"
need_cmd etcd "Debian package etcd-server"
need_cmd python3
VERSITYGW=${VERSITYGW:-$(command -v versitygw || echo "$(go env GOPATH)/bin/versitygw")}
[[ -x $VERSITYGW ]] || die "no versitygw (scripts/install-test-deps.sh installs it)"
KILLS=${KILLS:-postgres}
CAIRN=${CAIRN:-$REPO/bin/cairn}
[[ -x $CAIRN ]] || die "no cairn binary at $CAIRN (make build)"
PGBIN=${PGBIN:-$(find /usr/lib/postgresql -maxdepth 2 -name bin -type d | sort -V | tail -1)}
RUNS=${RUNS:-1}
TTL=${TTL:-10}
LOAD_SECS=${LOAD_SECS:-40}
KILL_AT=${KILL_AT:-10}
BENCH_OUT=${BENCH_OUT:-./bench-results}
mkdir -p "$BENCH_OUT"
BENCH_OUT=$(cd "$BENCH_OUT" && pwd)
stamp=$(date +%Y%m%d-%H%M%S)
table=$BENCH_OUT/failover-$stamp.md
ROOT=${BENCH_TMP:-/var/tmp}/cairn-failover.$$
ETCD_PORT=${ETCD_PORT:-23791}
pids=()
mnt=""
cleanup() {
	if [[ -n $mnt ]] && mountpoint -q "$mnt"; then "$CAIRN" umount "$mnt" >/dev/null 2>&1 || umount -l "$mnt" || true; fi
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do
		for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
	done
	# PostgreSQL servers whose Patroni was killed (the run kills them too,
	# but a failed run may not have).
	for d in "$ROOT"/pg*; do
		[[ -f $d/postmaster.pid ]] && kill -9 "$(head -1 "$d/postmaster.pid")" 2>/dev/null || true
	done
	rm -rf "$ROOT"
}
trap cleanup EXIT

# node N: Patroni's configuration of node N (PostgreSQL on 5433N, its REST
# API on 1800N).
node_conf() {
	local n=$1
	cat <<EOF
scope: cairn-failover
namespace: /cairn-bench/
name: node$n
restapi:
  listen: 127.0.0.1:1800$n
  connect_address: 127.0.0.1:1800$n
etcd3:
  host: 127.0.0.1:$ETCD_PORT
bootstrap:
  dcs:
    ttl: $TTL
    loop_wait: 1
    retry_timeout: $((TTL / 2))
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      parameters:
        max_connections: 200
        wal_keep_size: 128MB
        shared_buffers: 64MB
  initdb:
  - encoding: UTF8
  pg_hba:
  - local all all trust
  - host all all 127.0.0.1/32 trust
  - host replication repl 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:5433$n
  connect_address: 127.0.0.1:5433$n
  data_dir: $ROOT/pg$n
  bin_dir: $PGBIN
  pgpass: $ROOT/sock$n/pgpass
  authentication:
    replication: {username: repl, password: repl}
    superuser: {username: postgres, password: postgres}
  parameters:
    unix_socket_directories: $ROOT/sock$n
EOF
}

# leader: the node holding the leader key, from a Patroni REST API.
cluster() { python3 -c '
import json, sys, urllib.request
for port in (18001, 18002):
    try:
        c = json.load(urllib.request.urlopen("http://127.0.0.1:%d/cluster" % port, timeout=2))
    except Exception:
        continue
    print(" ".join("%s:%s:%s" % (m["name"], m["role"], m["state"]) for m in c["members"]))
    break'; }

start_node() {
	local n=$1
	node_conf "$n" >"$ROOT/node$n.yml"
	mkdir -p "$ROOT/sock$n" "$ROOT/pg$n"
	chmod 700 "$ROOT/pg$n"
	chown postgres:postgres "$ROOT/sock$n" "$ROOT/pg$n" "$ROOT/node$n.yml"
	# setpriv execs Patroni itself (runuser would fork it): $! is its pid.
	setsid setpriv --reuid postgres --regid postgres --init-groups patroni "$ROOT/node$n.yml" >>"$ROOT/patroni$n.log" 2>&1 &
	pids+=($!)
	eval "patroni$n=$!"
}

mkdir -p "$ROOT"
chmod 755 "$ROOT"
{
	echo "# Metadata server failover under load ($(date -u +%F), $(nproc) CPUs, $("$CAIRN" version 2>/dev/null | head -1))"
	echo
	echo "PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}') primary + synchronous standby under Patroni $(patroni --version | awk '{print $2}') (etcd $(etcd --version | awk '/etcd Version/ {print $3}'), ttl $TTL s); data in a bucket behind two versitygw gateways over one directory; what is named in the killed column gets SIGKILL $KILL_AT s into $LOAD_SECS s of load on a FUSE mount (default --store-timeout 30 s)."
	echo
	echo "| run | killed | promoted after s | writer ops ok / failed | reader ops ok / failed | pause p50 / max s | longest gap in completions s | fsynced files | read back | fsck |"
	echo "|---:|---|---:|---|---|---|---:|---:|---|---|"
} >"$table"

export AWS_ACCESS_KEY_ID=benchkey AWS_SECRET_ACCESS_KEY=benchsecret0123456789
for run in $(seq "$RUNS"); do
  for kill in $KILLS; do
	rm -rf "${ROOT:?}"/*
	log "run $run: etcd and two Patroni nodes"
	etcd --name bench --data-dir "$ROOT/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--advertise-client-urls "http://127.0.0.1:$ETCD_PORT" --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 10))" \
		--initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 10))" \
		--initial-cluster "bench=http://127.0.0.1:$((ETCD_PORT + 10))" >"$ROOT/etcd.log" 2>&1 &
	pids+=($!)
	sleep 2
	start_node 1
	for _ in $(seq 120); do [[ $(cluster) == *":leader:running"* ]] && break; sleep 1; done
	[[ $(cluster) == *":leader:running"* ]] || { tail -30 "$ROOT/patroni1.log" >&2; die "node1 did not become the leader"; }
	start_node 2
	for _ in $(seq 120); do [[ $(cluster) == *"sync_standby:"*"streaming"* || $(cluster) == *"sync_standby:running"* ]] && break; sleep 1; done
	log "cluster: $(cluster)"
	[[ $(cluster) == *sync_standby* ]] || { tail -30 "$ROOT/patroni2.log" >&2; die "node2 did not become a synchronous standby"; }
	PGPASSWORD=postgres "$PGBIN/psql" -h 127.0.0.1 -p 54331 -U postgres -qc "CREATE DATABASE cairn" postgres
	meta="postgres://postgres:postgres@127.0.0.1:54331,127.0.0.1:54332/cairn?target_session_attrs=read-write"
	mkdir -p "$ROOT/gwdata/cairn" "$ROOT/gwmeta"
	for g in 1 2; do
		"$VERSITYGW" --access "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY" --port "127.0.0.1:1707$g" --quiet \
			posix --sidecar "$ROOT/gwmeta" "$ROOT/gwdata" >"$ROOT/gw$g.log" 2>&1 &
		pids+=($!)
		eval "gw$g=$!"
	done
	sleep 1
	data="s3://cairn?endpoint=http://127.0.0.1:17071,http://127.0.0.1:17072"
	"$CAIRN" format --data "$data" "$meta" failover >/dev/null || { cat "$ROOT/gw1.log" "$ROOT/gw2.log" >&2; die "format failed"; }
	mnt=$ROOT/mnt
	mkdir -p "$mnt"
	"$CAIRN" mount -d -o allow_other --log "$ROOT/mount.log" "$meta" "$mnt" >/dev/null
	log "load for $LOAD_SECS s; the primary dies at $KILL_AT s"
	python3 - "$mnt" "$LOAD_SECS" >"$ROOT/load.json" <<'EOF' &
import hashlib, json, os, sys, threading, time
root, secs = sys.argv[1], float(sys.argv[2])
os.makedirs(os.path.join(root, "w"), exist_ok=True)
start = time.time()
ops = {"writer": [], "reader": []}  # (start, end, ok)
synced = {}
errors = []
lock = threading.Lock()
def writer():
    i = 0
    while time.time() - start < secs:
        p = os.path.join(root, "w", "f%06d" % i)
        data = os.urandom(4096 + (i * 7919) % 60000)
        t0 = time.time()
        ok = True
        try:
            with open(p, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            with lock:
                synced[p] = hashlib.sha256(data).hexdigest()
        except OSError as e:
            ok = False
            errors.append("write %s at %.1f s: %s" % (p, t0 - start, e))
        ops["writer"].append((t0 - start, time.time() - start, ok))
        i += 1
def reader():
    while time.time() - start < secs:
        with lock:
            names = list(synced)[-50:]
        t0 = time.time()
        ok = True
        try:
            for p in names[-5:]:
                os.stat(p)
                with open(p, "rb") as f:
                    f.read()
        except OSError as e:
            ok = False
            errors.append("read at %.1f s: %s" % (t0 - start, e))
        ops["reader"].append((t0 - start, time.time() - start, ok))
        time.sleep(0.01)
ts = [threading.Thread(target=writer), threading.Thread(target=reader)]
for t in ts: t.start()
for t in ts: t.join()
json.dump({"ops": ops, "synced": synced, "errors": errors}, sys.stdout)
EOF
	load=$!
	sleep "$KILL_AT"
	promoted="–"
	if [[ $kill == s3 ]]; then
		killed_what="S3 gateway 1"
		kill -9 "$gw1"
		log "killed S3 gateway 1 (pid $gw1)"
	else
		leader=$(cluster | tr ' ' '\n' | awk -F: '$2 == "leader" {print $1}')
		n=${leader#node}
		killed_what="PostgreSQL primary"
		killed_at=$(date +%s.%N)
		pp=$(eval echo "\$patroni$n")
		kill -9 "$pp"
		kill -9 "$(head -1 "$ROOT/pg$n/postmaster.pid")"
		log "killed $leader (Patroni pid $pp and its PostgreSQL)"
		promoted="never"
		for _ in $(seq 600); do
			c=$(cluster)
			if [[ $c == *":leader:running"* && $c != *"$leader:leader"* ]]; then
				promoted=$(awk -v a="$killed_at" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
				break
			fi
			sleep 0.1
		done
		log "promoted after $promoted s: $(cluster)"
	fi
	wait "$load"
	"$CAIRN" umount "$mnt" >/dev/null
	# A fresh mount reads back every fsynced file.
	"$CAIRN" mount -d -o allow_other --log "$ROOT/mount2.log" "$meta" "$mnt" >/dev/null
	read -r wok wfail rok rfail p50 pmax gap nsynced back <<<"$(python3 - "$ROOT/load.json" "$mnt" "$ROOT" <<'EOF'
import hashlib, json, os, sys
d = json.load(open(sys.argv[1]))
mnt, root = sys.argv[2], sys.argv[3]
def counts(k):
    ok = sum(1 for o in d["ops"][k] if o[2])
    return ok, len(d["ops"][k]) - ok
w = counts("writer"); r = counts("reader")
lat = sorted(o[1] - o[0] for o in d["ops"]["writer"])
ends = sorted(o[1] for o in d["ops"]["writer"] + d["ops"]["reader"])
gap = max((b - a for a, b in zip(ends, ends[1:])), default=0)
bad = 0
for p, h in d["synced"].items():
    q = os.path.join(mnt, os.path.relpath(p, root + "/mnt"))
    try:
        if hashlib.sha256(open(q, "rb").read()).hexdigest() != h:
            bad += 1
    except OSError:
        bad += 1
print(w[0], w[1], r[0], r[1], "%.2f" % lat[len(lat) // 2], "%.2f" % lat[-1], "%.2f" % gap, len(d["synced"]),
      "all" if bad == 0 else "%d missing or wrong" % bad)
EOF
)"
	python3 -c 'import json, sys; [print("failed:", e) for e in json.load(open(sys.argv[1]))["errors"][:10]]' "$ROOT/load.json" >&2
	"$CAIRN" umount "$mnt" >/dev/null
	fsck=$("$CAIRN" fsck "$meta" 2>&1 | tail -1)
	[[ $fsck == *" 0 metadata problems, 0 missing objects"* ]] && fsck="clean" || fsck="PROBLEMS: $fsck"
	echo "| $run | $killed_what | $promoted | $wok / $wfail | $rok / $rfail | $p50 / $pmax | $gap | $nsynced | $back | $fsck |" >>"$table"
	log "run $run: writer $wok/$wfail reader $rok/$rfail pause max $pmax s, gap $gap s; read back: $back; fsck $fsck"
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do
		for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
	done
	pids=()
	mnt=""
  done
done
cat "$table"
