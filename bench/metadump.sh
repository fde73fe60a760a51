#!/usr/bin/env bash
# bench/metadump.sh — the metadata tools at millions of files: cairn load,
# cairn dump and cairn find over a volume of FILES files (empty, or SIZE
# bytes kept inline) in directories of 1,000, with the metadata on Pebble
# on disk, on Pebble on tmpfs (the classic "metadata on a RAM disk"), and
# on PostgreSQL 15. Prints one markdown table (also saved under
# $BENCH_OUT): seconds, files/s and peak memory (the process's maximum
# resident set) of each step, timed as a user runs it (the whole command).
#
# The volume is made by loading a synthetic dump (cairn gen-dump: the files
# written straight as a dump), so the load row is the load of a dump of that
# many files; the dump row then dumps the loaded volume (a real dump), and
# find lists every entry of it.
#
#   bench/metadump.sh                                  # 1M and 10M, empty and 1 KiB files, all engines
#   FILES=1000000 SIZES=0 ENGINES=pebble-disk bench/metadump.sh   # one row, ~10 s
#   CAIRN=/path/to/cairn BENCH_OUT=/tmp/m bench/metadump.sh
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
BENCH_NAME=metadump
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"

need_root "PostgreSQL runs as the postgres user"
need_cmd /usr/bin/time "Debian package time"
CAIRN=${CAIRN:-$REPO/bin/cairn}
[[ -x $CAIRN ]] || die "no cairn binary at $CAIRN (make build)"
FILES=${FILES:-"1000000 10000000"}
SIZES=${SIZES:-"0 1024"}
ENGINES=${ENGINES:-"pebble-disk pebble-tmpfs postgres"}
BENCH_OUT=${BENCH_OUT:-./bench-results}
mkdir -p "$BENCH_OUT"
BENCH_OUT=$(cd "$BENCH_OUT" && pwd)
ROOT=${BENCH_TMP:-/var/tmp}/cairn-metadump.$$
TMPFS=${TMPFS_DIR:-/dev/shm}/cairn-metadump.$$
stamp=$(date +%Y%m%d-%H%M%S)
table=$BENCH_OUT/metadump-$stamp.md
mkdir -p "$ROOT" "$TMPFS"
shared=""
cleanup() {
	if [[ -n $shared ]]; then "$REPO/scripts/shared-env.sh" stop "$shared" || true; fi
	rm -rf "$ROOT" "$TMPFS"
}
trap cleanup EXIT

# timed NAME CMD...: runs CMD, its output in $ROOT/NAME.log; sets secs and
# rss_mib (peak resident memory).
timed() {
	local name=$1
	shift
	/usr/bin/time -f '%e %M' -o "$ROOT/$name.time" "$@" >"$ROOT/$name.log" 2>&1 ||
		{ cat "$ROOT/$name.log" >&2; die "$name failed: $*"; }
	read -r secs rss_kib <"$ROOT/$name.time"
	rss_mib=$((rss_kib / 1024))
}

rate() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.0f", n / (s > 0 ? s : 0.01) }'; }

has_find=0
if "$CAIRN" find --help >/dev/null 2>&1; then has_find=1; fi

{
	echo "# cairn dump / load / find at scale ($(date -u +%F), $(nproc) CPUs, $("$CAIRN" version 2>/dev/null | head -1))"
	echo
	echo "Whole commands, timed with /usr/bin/time: files/s counts every inode (files, directories, root)."
	echo
	echo "| files | file size | engine | load s | load files/s | load MiB | dump s | dump files/s | dump MiB | dump file | find s | find entries/s | find MiB |"
	echo "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
} >"$table"

"$CAIRN" format --data "file://$ROOT/data" "pebble://$ROOT/fmt" bench >"$ROOT/format.log" 2>&1 ||
	{ cat "$ROOT/format.log" >&2; die "format failed"; }

for n in $FILES; do
	for size in $SIZES; do
		syn=$ROOT/syn-$n-$size.cdump
		log "writing a synthetic dump of $n files of $size bytes"
		"$CAIRN" gen-dump "pebble://$ROOT/fmt" --files "$n" --size "$size" -o "$syn"
		inodes=$((n + (n + 999) / 1000 + 1))
		for engine in $ENGINES; do
			case $engine in
			pebble-disk) meta="pebble://$ROOT/meta-$n-$size" ;;
			pebble-tmpfs) meta="pebble://$TMPFS/meta-$n-$size" ;;
			postgres)
				if [[ -z $shared ]]; then
					shared=$ROOT/shared
					chmod 0755 "$ROOT"
					"$REPO/scripts/shared-env.sh" start "$shared" >/dev/null
				fi
				meta=$("$REPO/scripts/shared-env.sh" db "$shared" "md${n}s$size")
				;;
			*) die "unknown engine $engine (pebble-disk, pebble-tmpfs, postgres)" ;;
			esac
			log "$engine: load"
			timed load "$CAIRN" load "$syn" "$meta"
			row="| $n | $size | $engine | $secs | $(rate "$inodes" "$secs") | $rss_mib"
			log "$engine: dump"
			timed dump "$CAIRN" dump "$meta" -o "$ROOT/re.cdump"
			row+=" | $secs | $(rate "$inodes" "$secs") | $rss_mib | $(du -m "$ROOT/re.cdump" | cut -f1) MiB"
			if [[ $has_find == 1 ]]; then
				log "$engine: find"
				timed find "$CAIRN" find "$meta"
				lines=$(wc -l <"$ROOT/find.log")
				row+=" | $secs | $(rate "$lines" "$secs") | $rss_mib |"
			else
				row+=" | – | – | – |"
			fi
			echo "$row" >>"$table"
			log "$row"
			rm -f "$ROOT/re.cdump"
			case $engine in
			pebble-disk) rm -rf "$ROOT/meta-$n-$size" ;;
			pebble-tmpfs) rm -rf "$TMPFS/meta-$n-$size" ;;
			esac
		done
		rm -f "$syn"
	done
done
cat "$table"
