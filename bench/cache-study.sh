#!/usr/bin/env bash
# The cache-level study (issue 4): 8K random I/O, 67% read / 33% write,
# on a working set that fits the memory tier, one that fits only the disk
# tier, and one that fits neither; 1-2-4-8-16 outstanding I/Os (fio
# numjobs, O_DIRECT); IOPS, mean and p99 latency, and each tier's hit
# ratio from the mount's --metrics endpoint, before/after each point. The
# data store is a local directory slowed to remote-store latency with
# cairn mount --object-latency. See bench/README.md and
# docs/performance.md ("Cache tiers (issue 4)"). Run as root.
#
#   bench/cache-study.sh                          # the run in docs/performance.md (~10 min)
#   SETS="memory:64M" DEPTHS="1 4" RUNTIME=5 WARMUP=5 bench/cache-study.sh   # a smoke test
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CAIRN=${CAIRN:-./bin/cairn}
BENCH_OUT=${BENCH_OUT:-./bench-results}
BENCH_TMP=${BENCH_TMP:-/tmp}             # scratch: volume, data store, disk cache
LATENCY=${LATENCY:-10ms}                 # --object-latency: every data store request
CACHE_MEM=${CACHE_MEM:-256M}             # --cache-mem (memory tier)
CACHE_DISK=${CACHE_DISK:-2G}             # --cache-size (disk tier)
SETS=${SETS:-memory:128M disk:1G neither:4G} # name:working-set size, one volume each
DEPTHS=${DEPTHS:-1 2 4 8 16}             # outstanding I/Os (fio jobs) for the 67/33 mix
READ_DEPTHS=${READ_DEPTHS-1 4 16}        # the same for the read-only control ("" to skip)
RUNTIME=${RUNTIME:-15}                   # seconds per point
WARMUP=${WARMUP:-30}                     # seconds of 16-job random reads per set before its points
CAIRN_MOUNT_OPTS=${CAIRN_MOUNT_OPTS:-}

BENCH_NAME=cache-study
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"

need_root "FUSE mounts"
need_cmd fio
need_cmd python3
need_cmd curl "reads the mount's /stats"
[[ -x $CAIRN ]] || die "cairn binary not found at $CAIRN (make build, or set CAIRN=...)"
CAIRN=$(cd "$(dirname "$CAIRN")" && pwd)/$(basename "$CAIRN")

mkdir -p "$BENCH_OUT"
BENCH_OUT=$(cd "$BENCH_OUT" && pwd)
stamp=$(date +%Y%m%d-%H%M%S)
OUT=$BENCH_OUT/cache-study-$stamp
mkdir -p "$OUT"
ROOT=$(mktemp -d "$BENCH_TMP/cairn-cache-study.XXXXXX")
MNT=""      # the mount point while mounted
MOUNT_PID="" # the mount process we started

unmount() {
	[[ -n $MNT ]] || return 0
	if mountpoint -q "$MNT"; then
		"$CAIRN" umount --wait 3m "$MNT" >/dev/null 2>&1 || {
			log "cairn umount $MNT failed; lazy unmount"
			fusermount3 -u -z "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
		}
	fi
	if [[ -n $MOUNT_PID ]]; then
		local _
		for _ in $(seq 1 100); do
			kill -0 "$MOUNT_PID" 2>/dev/null || break
			sleep 0.2
		done
		if kill -0 "$MOUNT_PID" 2>/dev/null; then
			log "mount process $MOUNT_PID still running; stopping it"
			kill "$MOUNT_PID" 2>/dev/null || true
		fi
	fi
	MNT="" MOUNT_PID=""
}

cleanup() {
	local rc=$?
	set +e
	unmount
	if [[ ${BENCH_KEEP:-0} == 1 ]]; then log "keeping $ROOT"; else rm -rf "$ROOT"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# cpu_ticks PID: user+system clock ticks of a process so far.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }

# point SET MIX JOBS WS: one fio run with /stats before and after.
point() {
	local set=$1 mix=$2 jobs=$3 ws=$4 tag="$1-$2-$3"
	curl -fsS "http://$METRICS/stats" >"$OUT/stats-$tag-before.json"
	local t0 c0
	t0=$(date +%s.%N)
	c0=$(cpu_ticks "$MOUNT_PID")
	local rw=(--rw=randrw --rwmixread=67)
	[[ $mix == read ]] && rw=(--rw=randread)
	fio --name="$tag" --filename="$MNT/ws.dat" --size="$ws" "${rw[@]}" --bs=8k \
		--direct=1 --ioengine=psync --numjobs="$jobs" --group_reporting \
		--time_based --runtime="$RUNTIME" --norandommap --randrepeat=0 \
		--lat_percentiles=1 --output-format=json --output="$OUT/fio-$tag.json" >"$OUT/fio-$tag.err" 2>&1 ||
		{ tail -5 "$OUT/fio-$tag.err" >&2; die "fio $tag failed"; }
	local t1 c1
	c1=$(cpu_ticks "$MOUNT_PID")
	t1=$(date +%s.%N)
	curl -fsS "http://$METRICS/stats" >"$OUT/stats-$tag-after.json"
	printf '{"set":"%s","ws":"%s","mix":"%s","jobs":%d,"seconds":%s,"cairn_cpu_ticks":%d,"fio":"fio-%s.json","before":"stats-%s-before.json","after":"stats-%s-after.json"}\n' \
		"$set" "$ws" "$mix" "$jobs" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}')" "$((c1 - c0))" "$tag" "$tag" "$tag" >>"$OUT/points.jsonl"
	python3 "$HERE/cachestudy.py" line "$OUT" "$(tail -1 "$OUT/points.jsonl")" >&2
}

run_set() {
	local set=$1 ws=$2 d=$ROOT/$1
	mkdir -p "$d/meta" "$d/data" "$d/cache" "$d/mnt"
	log "== $set: working set $ws; memory tier $CACHE_MEM, disk tier $CACHE_DISK, object latency $LATENCY"
	"$CAIRN" format --data "file://$d/data" "pebble://$d/meta" "study-$set" >"$d/format.log" 2>&1 ||
		{ cat "$d/format.log" >&2; die "cairn format failed"; }
	METRICS=127.0.0.1:$(free_port)
	local out
	# shellcheck disable=SC2086  # CAIRN_MOUNT_OPTS is a word list
	out=$("$CAIRN" mount -d --log "$d/mount.log" --cache-mem "$CACHE_MEM" \
		--cache-dir "$d/cache" --cache-size "$CACHE_DISK" --object-latency "$LATENCY" \
		--metrics "$METRICS" $CAIRN_MOUNT_OPTS "pebble://$d/meta" "$d/mnt" 2>&1) ||
		{ echo "$out" >&2; cat "$d/mount.log" >&2; die "cairn mount failed"; }
	MNT=$d/mnt
	MOUNT_PID=$(sed -n 's/.*(pid \([0-9]*\),.*/\1/p' <<<"$out")
	[[ -n $MOUNT_PID ]] || die "no pid in: $out"
	log "   mounted at $MNT (pid $MOUNT_PID, metrics $METRICS)"

	log "   laying out $ws (sequential 1M writes, fsync)"
	fio --name=layout --filename="$MNT/ws.dat" --rw=write --bs=1M --size="$ws" \
		--ioengine=psync --end_fsync=1 >"$OUT/layout-$set.log" 2>&1 || die "layout of $set failed"
	log "   warm-up: ${WARMUP}s of 8K random reads, 16 jobs"
	fio --name=warmup --filename="$MNT/ws.dat" --size="$ws" --rw=randread --bs=8k --direct=1 \
		--ioengine=psync --numjobs=16 --time_based --runtime="$WARMUP" --norandommap \
		--randrepeat=0 >"$OUT/warmup-$set.log" 2>&1 || die "warm-up of $set failed"
	curl -fsS "http://$METRICS/stats" >"$OUT/stats-$set-warm.json"

	local j
	for j in $DEPTHS; do point "$set" rw "$j" "$ws"; done
	for j in $READ_DEPTHS; do point "$set" read "$j" "$ws"; done
	unmount
	rm -rf "$d"
}

log "cairn $CAIRN ($("$CAIRN" version 2>/dev/null | head -1)); results in $OUT; scratch $ROOT"
printf '{"latency":"%s","cache_mem":"%s","cache_disk":"%s","runtime":%d,"warmup":%d,"cairn":"%s"}\n' \
	"$LATENCY" "$CACHE_MEM" "$CACHE_DISK" "$RUNTIME" "$WARMUP" "$("$CAIRN" version 2>/dev/null | head -1)" >"$OUT/config.json"
start=$SECONDS
for s in $SETS; do run_set "${s%%:*}" "${s#*:}"; done
{
	echo "# Cairn cache-level study $stamp"
	echo
	echo "host: $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r), scratch on $(findmnt -n -o FSTYPE -T "$BENCH_TMP"); cairn $("$CAIRN" version 2>/dev/null | head -1)"
	echo "mount: --cache-mem $CACHE_MEM --cache-size $CACHE_DISK --object-latency $LATENCY $CAIRN_MOUNT_OPTS; fio 8K, O_DIRECT, psync, numjobs = outstanding I/Os, ${RUNTIME}s per point after ${WARMUP}s of random reads per working set"
	echo
	python3 "$HERE/cachestudy.py" table "$OUT"
	echo
	echo "elapsed: $((SECONDS - start)) s"
} >"$OUT/table.md"
python3 "$HERE/cachestudy.py" svg "$OUT" >"$OUT/cache-study.svg"
cat "$OUT/table.md"
log "table: $OUT/table.md; chart: $OUT/cache-study.svg"
