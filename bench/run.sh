#!/usr/bin/env bash
# Cairn vs local directory vs JuiceFS: fio and metadata benchmark, the
# rows of issue 4's table, with its targets. See bench/README.md. Run as
# root (drop_caches, FUSE mounts).
#
#   bench/run.sh                         # all targets, one run (~6 min)
#   RUNS=3 bench/run.sh                  # medians of 3 runs (targets interleaved)
#   TARGETS="local juicefs" bench/run.sh # without Cairn
#   SHARED=1 bench/run.sh                # Cairn and JuiceFS on one PostgreSQL + S3 server
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CAIRN=${CAIRN:-./bin/cairn}
JUICEFS=${JUICEFS:-juicefs}
TARGETS=${TARGETS:-local cairn juicefs}
BENCH_OUT=${BENCH_OUT:-./bench-results}
BENCH_TMP=${BENCH_TMP:-/tmp}       # parent of all scratch dirs (same disk for every target)
SHARED=${SHARED:-0}                # 1: shared mode (PostgreSQL metadata, S3 data; scripts/shared-env.sh)
RUNS=${RUNS:-1}                     # repeat everything; the table shows medians
SETTLE=${SETTLE:-10}               # seconds of quiet before each target (settle)
SEQ_SIZE=${SEQ_SIZE:-1G}           # file size for sequential write/read
# SEQ_BS: block sizes of the sequential rows; RAND_TESTS: random rows (either empty: skip)
if [[ $SHARED == 1 ]]; then
	SEQ_BS=${SEQ_BS-128k}
	RAND_TESTS=${RAND_TESTS-randrw-8k}
else
	SEQ_BS=${SEQ_BS-8k 32k 128k}
	RAND_TESTS=${RAND_TESTS-randrw-8k-1j randrw-8k randread-4k randwrite-4k}
fi
RAND_SIZE=${RAND_SIZE:-1G}         # file size for random workloads
RAND_RUNTIME=${RAND_RUNTIME:-15}   # seconds per random workload
RAND_JOBS=${RAND_JOBS:-4}          # psync threads for random workloads (randrw-8k-1j: 1)
RAND_WARM=${RAND_WARM:-1}          # 1: read the random file once before, so it is in the daemons' caches
META_FILES=${META_FILES:-10000}  # metadata rows (0: skip)
META_PROCS=${META_PROCS:-4}
SMALL_FILES=${SMALL_FILES:-4000}   # small-file rows: files written whole, read back, deleted (0: skip)
SMALL_SIZE=${SMALL_SIZE:-4k}       # their size
PROGRAMS=${PROGRAMS:-1}            # 1: real programs: tar -x of the Go source tree, rm -rf of it, git on src/crypto (0: skip)
# Same cache sizes for Cairn and JuiceFS (see bench/README.md for the mapping)
CACHE_MEM=${CACHE_MEM:-256M}       # Cairn --cache-mem (memory block cache)
BUFFER_SIZE=${BUFFER_SIZE:-256M}   # Cairn --buffer-size (write buffer)
CACHE_SIZE=${CACHE_SIZE:-4G}       # disk cache bound, both (--cache-size), in <scratch>/<target>/cache; 0: none
CAIRN_MOUNT_OPTS=${CAIRN_MOUNT_OPTS:-}
CAIRN_FORMAT_OPTS=${CAIRN_FORMAT_OPTS:-} # e.g. "--inline-max 0" (small files' data in the object store)
CAIRN_QUOTA=${CAIRN_QUOTA:-}       # e.g. "--bytes 1T --inodes 100000000": a directory quota on the benchmark's directory (the root)
JUICEFS_MOUNT_OPTS=${JUICEFS_MOUNT_OPTS:-}
MOOSEFS_MOUNT_OPTS=${MOOSEFS_MOUNT_OPTS:-} # extra mfsmount options (e.g. "-o mfscachemode=AUTO")

BENCH_NAME=bench
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"

need_root "drop_caches and FUSE mounts need it"
if [[ $PROGRAMS == 1 ]]; then
	need_cmd git "the programs rows"
	GOROOT_SRC=$(go env GOROOT)/src
	[[ -d $GOROOT_SRC/crypto ]] || die "no Go source tree at $GOROOT_SRC (PROGRAMS=0 skips the programs rows)"
fi
need_cmd fio scripts/install-test-deps.sh
need_cmd python3
[[ $SHARED == 0 || $SHARED == 1 ]] || die "SHARED must be 0 or 1"
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive number"
[[ $SETTLE =~ ^[0-9]+$ ]] || die "SETTLE must be a number of seconds"
JUICEFS_BUFFER_MIB=$(python3 "$HERE/benchlib.py" mib "$CACHE_MEM" "$BUFFER_SIZE") || die "bad CACHE_MEM or BUFFER_SIZE"
JUICEFS_CACHE_MIB=$(python3 "$HERE/benchlib.py" mib "$CACHE_SIZE") || die "bad CACHE_SIZE"
SHARED_ENV=$HERE/../scripts/shared-env.sh
if [[ $SHARED == 1 ]]; then
	[[ -x $SHARED_ENV ]] || die "$SHARED_ENV not found"
	need_cmd curl "creates the JuiceFS bucket"
fi
for w in $RAND_TESTS; do
	case $w in
	randread-4k | randwrite-4k | randrw-8k | randrw-8k-1j) ;;
	*) die "unknown random workload $w (use randrw-8k-1j, randrw-8k, randread-4k, randwrite-4k)" ;;
	esac
done
for t in $TARGETS; do
	case $t in
	local) ;;
	cairn) [[ -x $CAIRN ]] || die "cairn binary not found at $CAIRN (set CAIRN=...)" ;;
	juicefs) command -v "$JUICEFS" >/dev/null || die "juicefs not found (set JUICEFS=...)" ;;
	moosefs) command -v mfsmount >/dev/null || die "mfsmount not found (moosefs-client; scripts/install-test-deps.sh)" ;;
	*) die "unknown target $t (use local, cairn, juicefs, moosefs)" ;;
	esac
done

mkdir -p "$BENCH_OUT"
BENCH_OUT=$(cd "$BENCH_OUT" && pwd)
stamp=$(date +%Y%m%d-%H%M%S)
results=$BENCH_OUT/results-$stamp.tsv
table=$BENCH_OUT/results-$stamp.md
: >"$results"
ROOT=$(mktemp -d "$BENCH_TMP/cairn-bench.XXXXXX")
mounts=() # mount points we mounted, for cleanup
SHARED_DIR=""  # set once scripts/shared-env.sh start has been called
MFS_DIR=""     # set while bench/moosefs.sh runs a MooseFS master and chunkserver

unmount() { # mountpoint, kind
	local mp=$1 kind=$2
	mountpoint -q "$mp" || return 0
	case $kind in
	cairn) "$CAIRN" umount "$mp" >/dev/null 2>&1 || true ;;
	juicefs) "$JUICEFS" umount "$mp" >/dev/null 2>&1 || true ;;
	moosefs) umount "$mp" >/dev/null 2>&1 || true ;;
	esac
	local _
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		mountpoint -q "$mp" || return 0
		sleep 0.5
	done
	log "forcing lazy unmount of $mp"
	fusermount3 -u -z "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || true
}

cleanup() {
	local rc=$?
	set +e
	for m in "${mounts[@]}"; do unmount "${m%%|*}" "${m##*|}"; done
	if [[ -n $MFS_DIR ]]; then
		log "stopping MooseFS"
		"$HERE/moosefs.sh" stop "$MFS_DIR" || log "WARNING: moosefs.sh stop failed"
	fi
	if [[ -n $SHARED_DIR ]]; then
		log "stopping shared environment"
		"$SHARED_ENV" stop "$SHARED_DIR" || log "WARNING: shared-env.sh stop failed"
	fi
	if [[ ${BENCH_KEEP:-0} == 1 ]]; then log "keeping $ROOT"; else rm -rf "$ROOT"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

drop_caches() {
	sync
	echo 3 >/proc/sys/vm/drop_caches || log "WARNING: cannot drop caches"
}

# settle: before each target, flush what the one before left and wait
# SETTLE seconds. The virtual disk keeps writing back after the guest's
# fsync: Cairn, which ran right after the local directory's 3 GiB of
# sequential writes, measured 500-718 MB/s at 32K where it measured
# 958-1,219 alone (docs/performance.md).
settle() {
	sync
	[[ $SETTLE == 0 ]] || sleep "$SETTLE"
}

run=1 # current run (RUNS)
# results lines: target workload value unit run
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$run" >>"$results"; }

# fio wrapper: target, workload-name, kind(read|write|mixed), metric(bw|iops), fio args...
# With metric iops it also records the 99th percentile of completion
# latency (read and write together for mixed) as workload-p99, in ms.
runfio() {
	local target=$1 name=$2 kind=$3 metric=$4
	shift 4
	local json=$ROOT/fio-$target-$name.json
	if ! fio --output-format=json --output="$json" --name="$name" "$@" >"$ROOT/fio-$target-$name.err" 2>&1; then
		log "fio $name on $target failed:"
		tail -n 5 "$ROOT/fio-$target-$name.err" >&2
		record "$target" note "$name: fio failed" ""
		return 0
	fi
	local mbps iops p99
	read -r mbps iops p99 < <(python3 "$HERE/benchlib.py" fio "$json" "$kind")
	local v=$mbps unit=MB/s
	if [[ $metric == iops ]]; then v=$iops unit=IOPS; fi
	log "  $name: $mbps MB/s, $iops IOPS, p99 $p99 ms"
	record "$target" "$name" "$v" "$unit"
	if [[ $metric == iops ]]; then record "$target" "$name-p99" "$p99" ms; fi
	cp "$json" "$BENCH_OUT/fio-$stamp-r$run-$target-$name.json"
}

# setup_<target> prints the directory to benchmark in (on stdout)
setup_local() {
	rm -rf "$ROOT/local"
	mkdir -p "$ROOT/local"
	echo "$ROOT/local"
}

# shared mode: one PostgreSQL 15 + versitygw pair for Cairn and JuiceFS;
# sources its env file, so AWS_* reach cairn format/mount.
start_shared() {
	chmod 0755 "$ROOT" # the postgres user must reach its data directory
	SHARED_DIR=$ROOT/shared
	log "starting shared environment (PostgreSQL 15, versitygw) in $SHARED_DIR"
	"$SHARED_ENV" start "$SHARED_DIR" || die "shared-env.sh start failed"
	# shellcheck disable=SC1091  # written by shared-env.sh start
	source "$SHARED_DIR/env"
}

# s3_mkbucket NAME: JuiceFS sends LocationConstraint=us-east-1 with
# CreateBucket, which versitygw refuses, so the bucket is made beforehand.
s3_mkbucket() {
	local code
	code=$(curl -sS -o "$ROOT/mkbucket-$1.out" -w '%{http_code}' -X PUT \
		-H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' --aws-sigv4 aws:amz:us-east-1:s3 \
		--user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" "$S3_ENDPOINT/$1") || code=000
	[[ $code == 200 ]] || { cat "$ROOT/mkbucket-$1.out" >&2; die "cannot create bucket $1 (HTTP $code)"; }
}

# runsfx: a suffix for names that must differ between runs (databases, buckets)
runsfx() { if [[ $run -gt 1 ]]; then echo "$run"; fi; }

setup_cairn() {
	local d=$ROOT/cairn
	rm -rf "$d"
	mkdir -p "$d/meta" "$d/data" "$d/mnt" "$d/cache"
	local meta="pebble://$d/meta" data=${CAIRN_DATA_URL:-file://$d/data} logopt=()
	if [[ $SHARED == 1 ]]; then
		local name=cairnbench$(runsfx)
		meta=$("$SHARED_ENV" db "$SHARED_DIR" "$name") || die "cannot create database $name"
		data=${CAIRN_DATA_URL:-s3://$name?endpoint=$S3_ENDPOINT}
		logopt=(--log "$d/cairn.log")
	fi
	# shellcheck disable=SC2086  # CAIRN_FORMAT_OPTS is a word list
	"$CAIRN" format --data "$data" $CAIRN_FORMAT_OPTS "$meta" bench >"$d/format.log" 2>&1 ||
		{ cat "$d/format.log" >&2; die "cairn format failed"; }
	local disk=(--cache-dir "$d/cache" --cache-size "$CACHE_SIZE")
	if [[ $JUICEFS_CACHE_MIB == 0 ]]; then disk=(); fi
	# shellcheck disable=SC2206  # CAIRN_MOUNT_OPTS is a word list
	mount_cmd_cairn=("$CAIRN" mount -d -o allow_other "${logopt[@]}" --cache-mem "$CACHE_MEM" --buffer-size "$BUFFER_SIZE"
		"${disk[@]}" $CAIRN_MOUNT_OPTS "$meta" "$d/mnt")
	"${mount_cmd_cairn[@]}" >"$d/mount.log" 2>&1 ||
		{ cat "$d/mount.log" >&2; die "cairn mount failed"; }
	mounts+=("$d/mnt|cairn")
	wait_mounted "$d/mnt"
	if [[ -n $CAIRN_QUOTA ]]; then
		# shellcheck disable=SC2086  # CAIRN_QUOTA is a word list
		"$CAIRN" quota set $CAIRN_QUOTA "$meta" / >"$d/quota.log" 2>&1 ||
			{ cat "$d/quota.log" >&2; die "cairn quota set failed"; }
	fi
	echo "$d/mnt"
}

setup_juicefs() {
	local d=$ROOT/juicefs
	rm -rf "$d"
	mkdir -p "$d/bucket" "$d/cache" "$d/mnt"
	local meta="sqlite3://$d/meta.db" storage=(--storage file --bucket "$d/bucket/")
	if [[ $SHARED == 1 ]]; then
		local name=jfsbench$(runsfx)
		meta="$("$SHARED_ENV" db "$SHARED_DIR" "$name")&sslmode=disable" || die "cannot create database $name"
		s3_mkbucket "$name"
		storage=(--storage s3 --bucket "$S3_ENDPOINT/$name"
			--access-key "$AWS_ACCESS_KEY_ID" --secret-key "$AWS_SECRET_ACCESS_KEY")
	fi
	"$JUICEFS" format "${storage[@]}" "$meta" bench >"$d/format.log" 2>&1 ||
		{ cat "$d/format.log" >&2; die "juicefs format failed"; }
	# shellcheck disable=SC2206  # JUICEFS_MOUNT_OPTS is a word list
	mount_cmd_juicefs=("$JUICEFS" mount -d -o allow_other --buffer-size "$JUICEFS_BUFFER_MIB" --cache-dir "$d/cache"
		--cache-size "$JUICEFS_CACHE_MIB" --log "$d/juicefs.log"
		$JUICEFS_MOUNT_OPTS "$meta" "$d/mnt")
	"${mount_cmd_juicefs[@]}" >"$d/mount.log" 2>&1 ||
		{ cat "$d/mount.log" >&2; die "juicefs mount failed"; }
	mounts+=("$d/mnt|juicefs")
	wait_mounted "$d/mnt"
	echo "$d/mnt"
}

# MooseFS: a master and one chunkserver on this host (bench/moosefs.sh),
# started afresh for each run, mounted with mfsmount's defaults
setup_moosefs() {
	local d=$ROOT/moosefs
	if [[ -n $MFS_DIR ]]; then
		"$HERE/moosefs.sh" stop "$MFS_DIR" || die "cannot stop MooseFS"
		MFS_DIR=""
	fi
	rm -rf "$d"
	mkdir -p "$d/mnt"
	chmod 0755 "$ROOT" # the mfs user must reach its data directories
	MFS_DIR=$d/env
	"$HERE/moosefs.sh" start "$MFS_DIR" >&2 || { MFS_DIR=""; die "cannot start MooseFS"; }
	# shellcheck disable=SC1091
	source "$MFS_DIR/env"
	# shellcheck disable=SC2206  # MOOSEFS_MOUNT_OPTS is a word list
	mount_cmd_moosefs=(mfsmount "$d/mnt" -H "$MFS_HOST" -P "$MFS_PORT" -o allow_other $MOOSEFS_MOUNT_OPTS)
	"${mount_cmd_moosefs[@]}" >"$d/mount.log" 2>&1 ||
		{ cat "$d/mount.log" >&2; die "mfsmount failed"; }
	mounts+=("$d/mnt|moosefs")
	wait_mounted "$d/mnt"
	echo "$d/mnt"
}

# remount: unmount a target and mount it again with the same command, so
# that its daemon starts with empty memory caches (its disk cache stays, as
# after a restart); for the local directory, only the page cache is dropped
remount() { # dir, target
	local dir=$1 t=$2
	drop_caches
	[[ $t == local ]] && return 0
	unmount "$dir" "$t"
	local -n cmd=mount_cmd_$t
	"${cmd[@]}" >>"$ROOT/$t/mount.log" 2>&1 || { cat "$ROOT/$t/mount.log" >&2; die "$t: mounting again failed"; }
	wait_mounted "$dir"
}

wait_mounted() {
	local _
	for _ in $(seq 1 40); do
		mountpoint -q "$1" && return 0
		sleep 0.25
	done
	die "$1 did not get mounted"
}

# since NS: seconds since NS (date +%s%N), 3 decimals.
since() { awk -v a="$1" -v b="$(date +%s%N)" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'; }

# programs TARGET DIR: real programs, timed whole: tar -x of the Go
# source tree (one process), rm -rf of it, and git init/add/commit/gc/fsck
# of a copy of Go's src/crypto (the copy not timed).
programs() {
	local t=$1 dir=$2 s
	if [[ ! -f $ROOT/gosrc.tar ]]; then
		tar -C "$GOROOT_SRC/.." -cf "$ROOT/gosrc.tar" src
	fi
	mkdir -p "$dir/prog"
	s=$(date +%s%N)
	tar -C "$dir/prog" -xf "$ROOT/gosrc.tar"
	record "$t" prog-untar "$(since "$s")" s
	s=$(date +%s%N)
	rm -rf "$dir/prog"
	record "$t" prog-rmrf "$(since "$s")" s
	cp -r "$GOROOT_SRC/crypto" "$dir/git"
	s=$(date +%s%N)
	(cd "$dir/git" && git init -q && git add -A && git -c user.name=bench -c user.email=bench@localhost commit -q -m tree &&
		git gc -q && git fsck --no-progress) >"$ROOT/git-$t.log" 2>&1 || log "WARNING: git on $t failed (see $ROOT/git-$t.log)"
	record "$t" prog-git "$(since "$s")" s
	rm -rf "$dir/git"
	log "  programs: untar, rm -rf, git done"
}

bench_target() {
	local t=$1 dir
	log "== $t (run $run of $RUNS): setting up"
	# setup_* run in this shell (not $(...)) so mounts+=() is kept
	"setup_$t" >"$ROOT/dir.$t"
	dir=$(<"$ROOT/dir.$t")
	local fstype
	fstype=$(findmnt -n -o FSTYPE -T "$dir" || echo '?')
	log "   dir $dir ($fstype)"

	local direct=1
	if ! dd if=/dev/zero of="$dir/.odirect" bs=4k count=1 oflag=direct 2>/dev/null; then
		direct=0
		log "   O_DIRECT refused; random workloads run buffered"
		record "$t" note "O_DIRECT refused: random workloads are buffered" ""
	fi
	rm -f "$dir/.odirect"

	local bs
	for bs in $SEQ_BS; do
		rm -f "$dir/seq.dat"
		runfio "$t" "seq-write-$bs" write bw --filename="$dir/seq.dat" --rw=write \
			--bs="$bs" --size="$SEQ_SIZE" --ioengine=psync --end_fsync=1
		drop_caches
		runfio "$t" "seq-read-$bs" read bw --filename="$dir/seq.dat" --rw=read \
			--bs="$bs" --size="$SEQ_SIZE" --ioengine=psync
	done
	rm -f "$dir/seq.dat"

	if [[ -n ${RAND_TESTS// /} ]]; then
		log "   laying out $RAND_SIZE random-I/O file"
		fio --name=layout --filename="$dir/rand.dat" --rw=write --bs=1M --size="$RAND_SIZE" \
			--ioengine=psync --end_fsync=1 >/dev/null 2>&1 || log "WARNING: layout failed"
		if [[ $RAND_WARM == 1 ]]; then
			# the issue's p99 target holds "while the working set is in
			# cache": one read puts it in the daemons' caches (memory,
			# disk); the page cache is dropped after
			drop_caches
			cat "$dir/rand.dat" >/dev/null
		fi
		drop_caches
	fi
	local rcommon=(--filename="$dir/rand.dat" --size="$RAND_SIZE" --ioengine=psync
		--direct="$direct" --group_reporting --time_based --lat_percentiles=1
		--runtime="$RAND_RUNTIME" --ramp_time=2 --randrepeat=0)
	local w
	for w in $RAND_TESTS; do
		case $w in
		randread-4k) runfio "$t" randread-4k read iops "${rcommon[@]}" --numjobs="$RAND_JOBS" --rw=randread --bs=4k ;;
		randwrite-4k) runfio "$t" randwrite-4k write iops "${rcommon[@]}" --numjobs="$RAND_JOBS" --rw=randwrite --bs=4k ;;
		randrw-8k) runfio "$t" randrw-8k mixed iops "${rcommon[@]}" --numjobs="$RAND_JOBS" --rw=randrw --rwmixread=67 --bs=8k --unified_rw_reporting=both ;;
		randrw-8k-1j) runfio "$t" randrw-8k-1j mixed iops "${rcommon[@]}" --numjobs=1 --rw=randrw --rwmixread=67 --bs=8k --unified_rw_reporting=both ;;
		esac
	done
	rm -f "$dir/rand.dat"

	local phase ops
	if [[ $META_FILES != 0 ]]; then
		log "   metadata: $META_FILES files, $META_PROCS processes"
		while read -r phase ops; do
			log "  meta-$phase: $ops ops/s"
			record "$t" "meta-$phase" "$ops" ops/s
		done < <(python3 "$HERE/benchlib.py" meta "$dir" "$META_FILES" "$META_PROCS")
	fi

	if [[ $SMALL_FILES != 0 ]]; then
		# written whole and closed, then read back cold: after the file
		# system is mounted again (see remount)
		log "   small files: $SMALL_FILES of $SMALL_SIZE, $META_PROCS processes"
		while read -r phase ops; do
			log "  small-$phase: $ops files/s"
			record "$t" "small-$phase" "$ops" files/s
		done < <(python3 "$HERE/benchlib.py" small "$dir" "$SMALL_FILES" "$META_PROCS" "$SMALL_SIZE" 0 write)
		remount "$dir" "$t"
		while read -r phase ops; do
			log "  small-$phase: $ops files/s"
			record "$t" "small-$phase" "$ops" files/s
		done < <(python3 "$HERE/benchlib.py" small "$dir" "$SMALL_FILES" "$META_PROCS" "$SMALL_SIZE" 0 read,unlink)
	fi

	if [[ $PROGRAMS == 1 ]]; then
		programs "$t" "$dir"
	fi

	if [[ $t != local ]]; then
		unmount "$dir" "$t"
	fi
	log "== $t: done"
}

log "targets: $TARGETS; results in $BENCH_OUT; scratch $ROOT"
start=$SECONDS
if [[ $SHARED == 1 ]]; then
	for t in $TARGETS; do
		if [[ $t != local ]]; then
			start_shared
			break
		fi
	done
fi
for ((run = 1; run <= RUNS; run++)); do
	for t in $TARGETS; do
		settle
		bench_target "$t"
	done
done
run=$RUNS

{
	echo "# Cairn benchmark $stamp"
	echo
	echo "host: $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r), scratch on $(findmnt -n -o FSTYPE -T "$BENCH_TMP")"
	echo "seq: $SEQ_SIZE file, psync, write ends with fsync, read after drop_caches;" \
		"random: $RAND_SIZE file$([[ $RAND_WARM == 1 ]] && echo ", read once before (in the daemons' caches)"), $RAND_JOBS psync jobs (1 for the 1-job row), ${RAND_RUNTIME}s; meta: $META_FILES files, $META_PROCS processes; small files: $SMALL_FILES of $SMALL_SIZE${CAIRN_FORMAT_OPTS:+; Cairn formatted with $CAIRN_FORMAT_OPTS}"
	echo "caches, same for Cairn and JuiceFS: memory $CACHE_MEM block cache + $BUFFER_SIZE write buffer (JuiceFS --buffer-size $JUICEFS_BUFFER_MIB MiB)," \
		"$(if [[ $JUICEFS_CACHE_MIB == 0 ]]; then echo "no disk cache (Cairn: no --cache-dir; JuiceFS --cache-size 0)"; else echo "disk cache $CACHE_SIZE in scratch (JuiceFS --cache-size $JUICEFS_CACHE_MIB)"; fi)"
	if [[ $SHARED == 0 && -z ${CAIRN_DATA_URL:-} && $JUICEFS_CACHE_MIB != 0 && " $TARGETS " == *" cairn "* ]]; then
		echo "Cairn leaves its --cache-dir out: it is on the file system of its file:// data store, where it would only copy blocks (docs/design/0005-caches.md); JuiceFS fills its cache"
	fi
	if [[ $RUNS -gt 1 ]]; then echo "runs: $RUNS (all targets per run, in turn); the table shows medians, the TSV every run"; fi
	if [[ $SHARED == 1 ]]; then
		echo "mode: shared — PostgreSQL 15 metadata ($("${PGBIN:-/usr/lib/postgresql/15/bin}/postgres" --version 2>/dev/null | awk '{print $3}'), unix socket)" \
			"and versitygw S3 (loopback HTTP) for both Cairn and JuiceFS, one server each, a database and a bucket per file system"
	fi
	for t in $TARGETS; do
		case $t in
		juicefs)
			if [[ $SHARED == 1 ]]; then
				echo "juicefs: $("$JUICEFS" version 2>/dev/null | head -1), PostgreSQL meta (db jfsbench), versitygw S3 bucket jfsbench, opts: --buffer-size $JUICEFS_BUFFER_MIB --cache-size $JUICEFS_CACHE_MIB ${JUICEFS_MOUNT_OPTS:-}"
			else
				echo "juicefs: $("$JUICEFS" version 2>/dev/null | head -1), sqlite3 meta, file storage, opts: --buffer-size $JUICEFS_BUFFER_MIB --cache-size $JUICEFS_CACHE_MIB ${JUICEFS_MOUNT_OPTS:-}"
			fi
			;;
		moosefs)
			echo "moosefs: $(mfsmount --version 2>&1 | head -1) (Debian packages), master and one chunkserver on this host (chunks in scratch), mfsmount defaults ${MOOSEFS_MOUNT_OPTS:-}"
			;;
		cairn)
			if [[ $SHARED == 1 ]]; then
				echo "cairn: $CAIRN, PostgreSQL meta (db cairnbench), data ${CAIRN_DATA_URL:-versitygw S3 bucket cairnbench}, opts: --cache-mem $CACHE_MEM --buffer-size $BUFFER_SIZE --cache-size $CACHE_SIZE ${CAIRN_MOUNT_OPTS:-} (shared: no writeback cache)"
			else
				echo "cairn: $CAIRN ($("$CAIRN" version 2>/dev/null | head -1)), pebble meta, data ${CAIRN_DATA_URL:-file://…/data}, opts: --cache-mem $CACHE_MEM --buffer-size $BUFFER_SIZE $([[ $JUICEFS_CACHE_MIB == 0 ]] || echo "--cache-dir … --cache-size $CACHE_SIZE") ${CAIRN_MOUNT_OPTS:-}"
			fi
			;;
		esac
	done
	echo
	skip=() # shared mode runs fewer workloads: leave out rows nobody measured
	if [[ $SHARED == 1 ]]; then skip=(--skip-empty); fi
	# shellcheck disable=SC2086  # TARGETS is a word list
	python3 "$HERE/benchlib.py" table "$results" "${skip[@]}" $TARGETS
	echo
	echo "elapsed: $((SECONDS - start)) s"
} >"$table"
cat "$table"
log "table: $table"
