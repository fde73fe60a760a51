#!/usr/bin/env bash
# Interleaved A/B runs of Cairn mount settings, one small fio job each: the
# measurements of docs/fuse-tuning.md. Run as root.
#
#   bench/fuse-ab.sh ROUNDS TEST 'LABEL|ENV|FLAGS' 'LABEL|ENV|FLAGS' ...
#
#   bench/fuse-ab.sh 5 seqwrite-8k 'wb||' 'nowb||--writeback=false'
#   bench/fuse-ab.sh 3 coldread-32k 'ra1m||--object-latency 5ms' 'ra4m||--object-latency 5ms --max-readahead 4M'
#   bench/fuse-ab.sh 5 seqwrite-8k 'old|BIN=/tmp/cairn-old|' 'new|BIN=./bin/cairn|'
#
# Every (round, setting) formats a fresh embedded volume (Pebble metadata,
# file:// data, both under $BENCH_TMP), mounts it with `cairn mount -d`
# plus FLAGS, with the environment words ENV (BIN=PATH picks the binary),
# runs the test, unmounts. Settings are interleaved and their order rotates
# every round, so the machine's drift spreads over all of them. One line
# per run: TEST LABEL roundN VALUE..., where VALUE is MB/s and the mount
# process's CPU time during the measured job for the seq tests, IOPS and
# p99 ms for randrw and mmaprand, mean and p99 ms for mmapcold, ops/s for
# meta. Take medians.
#
# TEST:
#   seqwrite-BS   write $SIZE in BS writes, fsync at the end (counted)
#   seqread-BS    read $SIZE in BS reads: written, read once (in Cairn's memory
#                 cache), page cache dropped
#   coldread-BS   read $SIZE in BS reads from the data store: written, new mount
#                 process, page cache dropped
#   reread        read $SIZE again through a new open (fio invalidate=0)
#   mmaprand      random 4K reads through mmap (no madvise hint), $RT seconds
#   mmapcold      the first 300 random 4K reads through mmap of a $SIZE file in
#                 no cache (new mount process): what a page fault's read-around costs
#   randrw1, randrw4  8K 67/33 O_DIRECT, 1 or 4 jobs, $RSIZE file read once before, $RT s
#   meta          create/stat/unlink of $META_FILES files by 4 processes (benchlib.py meta)
#   meta-pause    the same with 2 s between the phases (past 1 s kernel timeouts)
#                 and a second stat pass (restat) before the unlinks
#
# Environment: CAIRN (./bin/cairn), SIZE (512M), RSIZE (256M), RT (8),
# META_FILES (4000), BENCH_TMP (/tmp). Wrap it in `flock /tmp/cairn-bench.lock`
# on a shared machine.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CAIRN=${CAIRN:-./bin/cairn}
SIZE=${SIZE:-512M}
RSIZE=${RSIZE:-256M}
RT=${RT:-8}
META_FILES=${META_FILES:-4000}
[[ $# -ge 3 ]] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "fuse-ab: run as root (drop_caches, FUSE mounts)" >&2; exit 2; }
rounds=$1 test=$2
shift 2
cfgs=("$@")
W=$(mktemp -d "${BENCH_TMP:-/tmp}/cairn-fuse-ab.XXXXXX")
mp=$W/mnt
PID=

cleanup() {
	if mountpoint -q "$mp"; then "$CAIRN" umount "$mp" >/dev/null 2>&1 || fusermount3 -uz "$mp"; fi
	rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

dropc() {
	sync
	echo 3 >/proc/sys/vm/drop_caches
}
bin() { # the BIN= word of an ENV, else $CAIRN
	local b=$CAIRN kv
	for kv in $1; do [[ $kv == BIN=* ]] && b=${kv#BIN=}; done
	echo "$b"
}
mountit() { # ENV FLAGS: mount the volume in $W/v, remember the mount process's pid
	# shellcheck disable=SC2086  # word lists
	env $1 "$(bin "$1")" mount -d -o allow_other --log "$W/mount.log" $2 "pebble://$W/v/meta" "$mp" >"$W/m.out"
	PID=$(sed -n 's/.*(pid \([0-9]*\),.*/\1/p' "$W/m.out")
}
fresh() { # ENV FLAGS: a new volume, mounted
	rm -rf "$W/v"
	mkdir -p "$W/v/meta" "$W/v/data" "$mp"
	"$(bin "$1")" format --data "file://$W/v/data" "pebble://$W/v/meta" ab >/dev/null
	mountit "$1" "$2"
}
umountit() { "$CAIRN" umount "$mp" >/dev/null; }
cpu() { awk '{print $14+$15}' "/proc/$PID/stat"; } # mount process CPU, 10 ms ticks
layout() { fio --name=l --filename="$1" --rw=write --bs=1M --size="$2" --ioengine=psync --end_fsync=1 >/dev/null; }
fioval() { # JSON KIND: MB/s for read|write, "IOPS p99ms" for mixed, read IOPS and p99 for randread, mean and p99 for first
	python3 - "$@" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
k = sys.argv[2]
p99 = lambda s: round(s["lat_ns"]["percentile"]["99.000000"] / 1e6, 2)
if k == "mixed":
    print(round(j["read"]["iops"] + j["write"]["iops"]), p99(j["mixed"]))
elif k == "randread":
    print(round(j["read"]["iops"]), p99(j["read"]))
elif k == "first":
    print(round(j["read"]["lat_ns"]["mean"] / 1e6, 2), p99(j["read"]))
else:
    print(round(j[k]["bw_bytes"] / 1e6, 1))
PY
}
seqjob() { # KIND fio-args: run one measured job, print MB/s and the mount's CPU
	local kind=$1 c0
	shift
	c0=$(cpu)
	fio --name=m "$@" --ioengine=psync --output-format=json --output="$W/o.json" >/dev/null
	echo "$(fioval "$W/o.json" "$kind") cpu $((($(cpu) - c0) * 10))ms"
}

run1() { # ENV FLAGS
	local bs
	case $test in
	seqwrite-*)
		bs=${test#seqwrite-}
		seqjob write --filename="$mp/f" --rw=write --bs="$bs" --size="$SIZE" --end_fsync=1
		;;
	seqread-*)
		bs=${test#seqread-}
		layout "$mp/f" "$SIZE"
		cat "$mp/f" >/dev/null
		dropc
		seqjob read --filename="$mp/f" --rw=read --bs="$bs" --size="$SIZE"
		;;
	coldread-*)
		bs=${test#coldread-}
		layout "$mp/f" "$SIZE"
		umountit
		dropc
		mountit "$1" "$2"
		seqjob read --filename="$mp/f" --rw=read --bs="$bs" --size="$SIZE"
		;;
	reread)
		layout "$mp/f" "$SIZE"
		cat "$mp/f" >/dev/null
		seqjob read --filename="$mp/f" --rw=read --bs=128k --size="$SIZE" --invalidate=0
		;;
	mmaprand)
		layout "$mp/f" "$SIZE"
		cat "$mp/f" >/dev/null
		dropc
		fio --name=m --filename="$mp/f" --rw=randread --bs=4k --size="$SIZE" --ioengine=mmap --fadvise_hint=0 \
			--time_based --runtime="$RT" --randrepeat=0 --lat_percentiles=1 --output-format=json --output="$W/o.json" >/dev/null
		fioval "$W/o.json" randread
		;;
	mmapcold)
		layout "$mp/f" "$SIZE"
		umountit
		dropc
		mountit "$1" "$2"
		fio --name=m --filename="$mp/f" --rw=randread --bs=4k --size="$SIZE" --ioengine=mmap --fadvise_hint=0 \
			--number_ios=300 --randrepeat=0 --lat_percentiles=1 --output-format=json --output="$W/o.json" >/dev/null
		fioval "$W/o.json" first
		;;
	randrw1 | randrw4)
		layout "$mp/r" "$RSIZE"
		dropc
		cat "$mp/r" >/dev/null
		dropc
		fio --name=m --filename="$mp/r" --rw=randrw --rwmixread=67 --bs=8k --size="$RSIZE" --direct=1 --ioengine=psync \
			--numjobs="${test#randrw}" --group_reporting --time_based --runtime="$RT" --ramp_time=1 --randrepeat=0 \
			--lat_percentiles=1 --unified_rw_reporting=both --output-format=json --output="$W/o.json" >/dev/null
		fioval "$W/o.json" mixed
		;;
	meta | meta-pause)
		local pause=0
		[[ $test == meta-pause ]] && pause=2
		python3 "$HERE/benchlib.py" meta "$mp" "$META_FILES" 4 "$pause" | tr '\n' ' '
		echo
		;;
	*)
		echo "fuse-ab: unknown test $test" >&2
		exit 2
		;;
	esac
}

n=${#cfgs[@]}
for ((r = 0; r < rounds; r++)); do
	for ((i = 0; i < n; i++)); do
		IFS='|' read -r label envs flags <<<"${cfgs[$(((i + r) % n))]}"
		fresh "$envs" "$flags"
		v=$(run1 "$envs" "$flags")
		umountit
		printf '%s\t%s\tround%d\t%s\n' "$test" "$label" "$r" "$v"
	done
done
