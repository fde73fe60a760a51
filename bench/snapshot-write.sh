#!/usr/bin/env bash
# First write after a snapshot, the classic checkpoint study: sequential
# overwrite of an existing file at 8K/32K/128K through a Cairn FUSE mount,
# before any snapshot (baseline), then for each of several snapshots the
# first and the second overwrite after it. Copy-on-first-modify designs
# measured about 0.35x on the first write; Cairn's target is >= 0.95x.
# Each round measures a baseline overwrite (no snapshot since the previous
# write), takes a snapshot, then measures the first and the second
# overwrite after it; medians over the rounds.
# Run as root after `make build` and scripts/install-test-deps.sh.
#
#   bench/snapshot-write.sh                    # 512 MiB file, 5 snapshots per block size
#   SIZE=256M ROUNDS=2 BS="128k" bench/snapshot-write.sh
set -euo pipefail

CAIRN=${CAIRN:-./bin/cairn}
SIZE=${SIZE:-512M}       # file overwritten each time
BS=${BS:-8k 32k 128k}
ROUNDS=${ROUNDS:-5}       # rounds of: overwrite, snapshot, first overwrite, second overwrite
BENCH_TMP=${BENCH_TMP:-/tmp}
BENCH_OUT=${BENCH_OUT:-./bench-results}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BENCH_NAME=snapshot-write
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
need_root "FUSE mount"
[[ -x $CAIRN ]] || die "cairn binary not found at $CAIRN (make build, or set CAIRN=...)"
need_cmd fio scripts/install-test-deps.sh
need_cmd python3

mkdir -p "$BENCH_OUT"
BENCH_OUT=$(cd "$BENCH_OUT" && pwd)
out=$BENCH_OUT/snapshot-write-$(date +%Y%m%d-%H%M%S).md
work=$(mktemp -d "$BENCH_TMP/cairn-snapwrite.XXXXXX")
mnt=$work/mnt
meta="pebble://$work/meta"
cleanup() {
	if mountpoint -q "$mnt"; then
		"$CAIRN" umount "$mnt" >/dev/null 2>&1 || fusermount3 -uz "$mnt" || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$mnt"
"$CAIRN" format --data "file://$work/data" "$meta" snapbench >/dev/null
"$CAIRN" mount -d --log "$work/mount.log" "$meta" "$mnt"

# overwrite BS: one sequential pass over the existing file, fsync at the
# end; prints MB/s.
overwrite() {
	fio --name=ow --filename="$mnt/file-$1" --rw=write --bs="$1" --size="$SIZE" \
		--ioengine=psync --end_fsync=1 --overwrite=1 --output-format=json 2>/dev/null |
		python3 -c 'import json,sys; j=json.load(sys.stdin); print("%.1f" % (j["jobs"][0]["write"]["bw_bytes"]/1e6))'
}

median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

{
	echo "# First write after a snapshot ($(date -u +%Y-%m-%d' '%H:%M) UTC)"
	echo
	echo "Sequential overwrite of a $SIZE file through a Cairn FUSE mount (embedded: Pebble + local directory), fsync at the end; MB/s; load average at start: $(cut -d' ' -f1 /proc/loadavg). $ROUNDS rounds of: baseline overwrite (no snapshot since the previous write), snapshot, first overwrite after it, second overwrite; medians."
	echo
	echo "| block size | baseline, median | first after snapshot (each round) | first, median | second, median | first / baseline | first / second |"
	echo "|---|---:|---|---:|---:|---:|---:|"
} >"$out"

snap=0
for bs in $BS; do
	log "bs=$bs: writing the file"
	fio --name=init --filename="$mnt/file-$bs" --rw=write --bs=1m --size="$SIZE" --ioengine=psync --end_fsync=1 >/dev/null
	# Rounds of: an overwrite with no snapshot since the previous write
	# (baseline), a snapshot, the first overwrite after it, the second.
	# Interleaving keeps the three in the same conditions (volume fill,
	# page cache, the machine's load at that moment).
	overwrite "$bs" >/dev/null # settle after the initial write
	base=() first=() second=()
	for ((r = 0; r < ROUNDS; r++)); do
		base+=("$(overwrite "$bs")")
		snap=$((snap + 1))
		"$CAIRN" snapshot create "$meta" "s$snap" >/dev/null
		first+=("$(overwrite "$bs")")
		second+=("$(overwrite "$bs")")
		log "bs=$bs: round $((r + 1)): baseline ${base[-1]}, snapshot s$snap, first ${first[-1]}, second ${second[-1]} MB/s"
	done
	b=$(echo "${base[*]}" | median)
	f=$(echo "${first[*]}" | median)
	s=$(echo "${second[*]}" | median)
	ratio=$(python3 -c "print('%.2f' % ($f/$b))")
	ratio2=$(python3 -c "print('%.2f' % ($f/$s))")
	echo "| $bs | $b | ${first[*]} | $f | $s | $ratio | $ratio2 |" >>"$out"
done

{
	echo
	echo '```'
	"$CAIRN" snapshot list "$meta" 2>&1 || true
	echo '```'
} >>"$out"
cat "$out"
log "table saved to $out"
