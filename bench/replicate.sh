#!/usr/bin/env bash
# bench/replicate.sh — cairn replicate measured on this machine, embedded
# volumes (Pebble metadata, local data stores) on one disk:
#
#   1. the first copy of a source tree (Go's src, ~13,000 entries) to a new
#      volume, against rsync -a between two mounts, medians of $REPS, the
#      two interleaved;
#   2. the first copy of $FILES small files (1 KiB, kept inline; loaded
#      from a synthetic dump), against rsync -a of the same tree between
#      two mounts up to $RSYNC_MAX files (once: it is slow);
#   3. an incremental cycle after 1% of those files were rewritten;
#   4. the lag of a mounted volume replicating itself (--replicate-to,
#      --max-out-of-sync $LAG_BOUND) under a writer of $LAG_MBS MB/s of
#      mixed small and large files for $LAG_SECS s, sampled every second;
#   5. failover (seconds) and the reverse resynchronisation after writes on
#      the promoted volume (what it sends).
#
# Prints markdown tables (also saved under $BENCH_OUT).
#
#   bench/replicate.sh                          # everything, ~15 min
#   FILES=20000 LAG_SECS=15 LAG_BOUND=5s REPS=1 TREE=/usr/local/go/src/net bench/replicate.sh   # ~1 min
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
BENCH_NAME=replicate
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"

need_root "FUSE mounts with allow_other"
need_cmd rsync "Debian package rsync"
need_cmd python3
need_cmd /usr/bin/time "Debian package time"
CAIRN=${CAIRN:-$REPO/bin/cairn}
[[ -x $CAIRN ]] || die "no cairn binary at $CAIRN (make build)"
REPS=${REPS:-3}
FILES=${FILES:-"100000 1000000"}
RSYNC_MAX=${RSYNC_MAX:-100000}
TREE=${TREE:-$(go env GOROOT)/src}
LAG_SECS=${LAG_SECS:-120}
LAG_BOUND=${LAG_BOUND:-60s}
LAG_MBS=${LAG_MBS:-20}
BENCH_OUT=${BENCH_OUT:-./bench-results}
mkdir -p "$BENCH_OUT"
BENCH_OUT=$(cd "$BENCH_OUT" && pwd)
ROOT=${BENCH_TMP:-/var/tmp}/cairn-replicate.$$
stamp=$(date +%Y%m%d-%H%M%S)
table=$BENCH_OUT/replicate-$stamp.md
mkdir -p "$ROOT"
mounted=()
writer=""
cleanup() {
	if [[ -n $writer ]]; then kill "$writer" 2>/dev/null || true; fi
	for m in "${mounted[@]}"; do
		if mountpoint -q "$m"; then "$CAIRN" umount "$m" >/dev/null 2>&1 || umount -l "$m" || true; fi
	done
	rm -rf "$ROOT"
}
trap cleanup EXIT

# vol NAME: a new embedded volume under $ROOT/NAME (meta, data, mnt).
vol() {
	mkdir -p "$ROOT/$1/mnt"
	"$CAIRN" format --data "file://$ROOT/$1/data" "pebble://$ROOT/$1/meta" "$1" >/dev/null
}
meta() { echo "pebble://$ROOT/$1/meta"; }
mnt() {
	local name=$1
	shift
	"$CAIRN" mount -d -o allow_other --log "$ROOT/$name.mount.log" "$@" "$(meta "$name")" "$ROOT/$name/mnt" >/dev/null
	mounted+=("$ROOT/$name/mnt")
}
umnt() { "$CAIRN" umount "$ROOT/$1/mnt" >/dev/null; }

# timed CMD...: runs CMD (output in $ROOT/last.log); sets secs.
timed() {
	/usr/bin/time -f '%e' -o "$ROOT/time" "$@" >"$ROOT/last.log" 2>&1 ||
		{ cat "$ROOT/last.log" >&2; die "failed: $*"; }
	secs=$(tail -1 "$ROOT/time")
}

# forget_pairs NAME: deletes the replication snapshots a discarded
# destination left on volume NAME.
forget_pairs() {
	"$CAIRN" snapshot list --json "$(meta "$1")" | python3 -c '
import json, sys
for s in json.load(sys.stdin):
    if s["name"].startswith("replica."):
        print(s["name"])' | while read -r s; do "$CAIRN" snapshot delete "$(meta "$1")" "$s" >/dev/null; done
}

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
rate() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.0f", n / (s > 0 ? s : 0.01) }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a / (b > 0 ? b : 0.01) }'; }
cycle_field() { sed -n 's/.*replicated snapshot [^ ]* of "[^"]*": \([0-9]*\) records (\([0-9]*\) inodes), \([0-9]*\) objects, \([0-9]*\) bytes.*/\1 \2 \3 \4/p' "$ROOT/last.log"; }

{
	echo "# cairn replicate ($(date -u +%F), $(nproc) CPUs, $("$CAIRN" version 2>/dev/null | head -1))"
	echo
	echo "Embedded volumes (Pebble, local data stores) on one disk; whole commands timed."
	echo
} >"$table"

# 1. The Go source tree.
log "source tree: copying $TREE into a volume"
vol tsrc
mnt tsrc
cp -a "$TREE" "$ROOT/tsrc/mnt/src"
entries=$(find "$ROOT/tsrc/mnt/src" | wc -l)
bytes=$(du -sb "$TREE" | cut -f1)
umnt tsrc
rs=()
rp=()
for r in $(seq "$REPS"); do
	for what in repl rsync; do
		if [[ $((r % 2)) == 0 ]]; then what=$([[ $what == repl ]] && echo rsync || echo repl); fi
		if [[ $what == rsync ]]; then
			vol "rs$r"
			mnt tsrc
			mnt "rs$r"
			timed rsync -aH "$ROOT/tsrc/mnt/" "$ROOT/rs$r/mnt/"
			rs+=("$secs")
			umnt "rs$r"
			umnt tsrc
			rm -rf "${ROOT:?}/rs$r"
		else
			vol "rp$r"
			timed "$CAIRN" replicate start --once "$(meta tsrc)" "$(meta "rp$r")"
			rp+=("$secs")
			forget_pairs tsrc
			rm -rf "${ROOT:?}/rp$r"
		fi
		log "tree rep $r $what: $secs s"
	done
done
mrs=$(median "${rs[@]}")
mrp=$(median "${rp[@]}")
{
	echo "## First copy of a source tree ($entries entries, $((bytes / 1048576)) MiB), medians of $REPS"
	echo
	echo "| copy | seconds | entries/s | MB/s | runs (s) |"
	echo "|---|---:|---:|---:|---|"
	echo "| cairn replicate | $mrp | $(rate "$entries" "$mrp") | $(rate "$((bytes / 1000000))" "$mrp") | ${rp[*]} |"
	echo "| rsync -aH between two mounts | $mrs | $(rate "$entries" "$mrs") | $(rate "$((bytes / 1000000))" "$mrs") | ${rs[*]} |"
	echo
	echo "cairn replicate is **$(ratio "$mrs" "$mrp")×** rsync."
	echo
} >>"$table"
rm -rf "${ROOT:?}/tsrc"

# 2. Many small files, and 3. an incremental cycle on the largest set.
{
	echo "## Small files (1 KiB each, kept inline; 1,000 a directory)"
	echo
	echo "| files | step | seconds | inodes/s | records | objects | MB sent |"
	echo "|---:|---|---:|---:|---:|---:|---:|"
} >>"$table"
notes=()
for n in $FILES; do
	log "small files: loading $n files of 1 KiB"
	vol msrc
	"$CAIRN" gen-dump "$(meta msrc)" --files "$n" --size 1024 -o "$ROOT/syn.cdump" >/dev/null
	rm -rf "$ROOT/msrc/meta"
	"$CAIRN" load "$ROOT/syn.cdump" "$(meta msrc)" >/dev/null
	rm -f "$ROOT/syn.cdump"
	inodes=$((n + (n + 999) / 1000 + 1))
	vol mdst
	timed "$CAIRN" replicate start --once "$(meta msrc)" "$(meta mdst)"
	full=$secs
	read -r frec _ fobj fbytes <<<"$(cycle_field)"
	log "small files: $n replicated in $full s"
	echo "| $n | first copy, cairn replicate | $full | $(rate "$inodes" "$full") | $frec | $fobj | $(rate "$fbytes" 1000000) |" >>"$table"
	mnt msrc
	if ((n <= RSYNC_MAX)); then
		vol mrs
		mnt mrs
		timed rsync -aH "$ROOT/msrc/mnt/" "$ROOT/mrs/mnt/"
		umnt mrs
		rm -rf "${ROOT:?}/mrs"
		log "small files: $n by rsync in $secs s"
		echo "| $n | first copy, rsync -aH between two mounts | $secs | $(rate "$inodes" "$secs") | | | |" >>"$table"
		notes+=("$n files, first copy: cairn replicate is **$(ratio "$secs" "$full")×** rsync.")
	fi
	# 1% of the files rewritten through the mount.
	python3 - "$ROOT/msrc/mnt" <<'PY'
import os, sys
root = sys.argv[1]
for d in sorted(os.listdir(root)):
    p = os.path.join(root, d)
    if not os.path.isdir(p) or d.startswith("."):
        continue
    for i, f in enumerate(sorted(os.listdir(p))):
        if i % 100 == 0:
            with open(os.path.join(p, f), "wb") as fh:
                fh.write(os.urandom(1024))
PY
	umnt msrc
	timed "$CAIRN" replicate start --once "$(meta msrc)" "$(meta mdst)"
	read -r irec iino iobj ibytes <<<"$(cycle_field)"
	echo "| $n | incremental cycle after 1% rewritten ($iino inodes) | $secs | | $irec | $iobj | $(rate "$ibytes" 1000000) |" >>"$table"
	log "small files: $n, incremental in $secs s"
	rm -rf "${ROOT:?}/msrc" "${ROOT:?}/mdst"
done
{
	echo
	for note in "${notes[@]}"; do echo "$note"; done
	echo "rsync of more than $RSYNC_MAX files through two mounts is left out: at about 1,000 files/s it takes longer than the rest together. The incremental cycle reads the change log, not the tree."
	echo
} >>"$table"

# 4. Lag under a steady writer.
log "lag: $LAG_MBS MB/s for $LAG_SECS s, bound $LAG_BOUND"
vol lsrc
vol ldst
mnt lsrc --replicate-to "$(meta ldst)" --replicate-max-out-of-sync "$LAG_BOUND"
python3 - "$ROOT/lsrc/mnt" "$LAG_MBS" "$LAG_SECS" <<'EOF' &
import os, sys, time
root, mbs, secs = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
start, sent, i = time.time(), 0, 0
big = os.urandom(4 << 20)
small = os.urandom(16 << 10)
while time.time() - start < secs:
    d = os.path.join(root, "w%04d" % (i // 500))
    os.makedirs(d, exist_ok=True)
    data = big if i % 10 == 0 else small  # mixed: 4 MiB every tenth file, else 16 KiB
    with open(os.path.join(d, "f%06d" % i), "wb") as f:
        f.write(data)
    sent += len(data)
    i += 1
    ahead = sent / (mbs * 1e6) - (time.time() - start)
    if ahead > 0:
        time.sleep(ahead)
EOF
writer=$!
: >"$ROOT/lag.txt"
while kill -0 "$writer" 2>/dev/null; do
	"$CAIRN" replicate status --json "$(meta ldst)" 2>/dev/null | python3 -c '
import json, sys
s = json.load(sys.stdin)
print(s.get("lag", 0) / 1e9)' >>"$ROOT/lag.txt" 2>/dev/null || true
	sleep 1
done
wait "$writer" || die "the writer failed"
writer=""
written=$(du -sb "$ROOT/lsrc/data" | cut -f1)
umnt lsrc
read -r p50 p99 lmax n <<<"$(python3 - "$ROOT/lag.txt" <<'EOF'
import sys
v = sorted(float(x) for x in open(sys.argv[1]) if x.strip())
q = lambda p: v[min(len(v) - 1, int(p * len(v)))]
print("%.1f %.1f %.1f %d" % (q(0.5), q(0.99), v[-1], len(v)))
EOF
)"
{
	echo "## Lag under a steady writer ($LAG_MBS MB/s of mixed 16 KiB and 4 MiB files for $LAG_SECS s, --max-out-of-sync $LAG_BOUND, --replicate-to)"
	echo
	echo "| samples | lag p50 s | lag p99 s | lag max s | bound s |"
	echo "|---:|---:|---:|---:|---:|"
	echo "| $n | $p50 | $p99 | $lmax | ${LAG_BOUND%s} |"
	echo
	echo "The source's data store held $((written / 1048576)) MiB at the end."
	echo
} >>"$table"

# 5. Failover and reverse.
timed "$CAIRN" replicate failover "$(meta ldst)"
fo=$secs
mnt ldst
python3 - "$ROOT/ldst/mnt" <<'EOF'
import os, sys
root = sys.argv[1]
os.makedirs(os.path.join(root, "after"), exist_ok=True)
for i in range(100):
    with open(os.path.join(root, "after", "f%03d" % i), "wb") as f:
        f.write(os.urandom(1 << 20))
EOF
umnt ldst
timed "$CAIRN" replicate reverse --once "$(meta ldst)" "$(meta lsrc)"
rv=$secs
read -r rrec rino robj rbytes <<<"$(cycle_field)"
{
	echo "## Failover and reverse"
	echo
	echo "| step | seconds | records | objects | MB sent |"
	echo "|---|---:|---:|---:|---:|"
	echo "| failover (destination writable) | $fo | | | |"
	echo "| reverse after 100 MiB written on the promoted volume | $rv | $rrec | $robj | $(rate "$rbytes" 1000000) |"
	echo
} >>"$table"
cat "$table"
