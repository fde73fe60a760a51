#!/usr/bin/env bash
# Show which durability syscalls each file system's daemon issues when an
# application writes 64 MiB and calls fsync (dd conv=fsync): strace on the
# Cairn mount process and on the JuiceFS mount process (sqlite3 metadata,
# local "file" storage). Prints one line per target with the counts.
#
#   bench/fsync-evidence.sh            # needs root, strace, juicefs, bin/cairn
set -euo pipefail
cd "$(dirname "$0")/.."
CAIRN=${CAIRN:-$PWD/bin/cairn}
JUICEFS=${JUICEFS:-$(command -v juicefs)}
work=$(mktemp -d /tmp/fsync-evidence.XXXXXX)
cleanup() {
	mountpoint -q "$work/c/mnt" && "$CAIRN" umount "$work/c/mnt" || true
	mountpoint -q "$work/j/mnt" && "$JUICEFS" umount "$work/j/mnt" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/c/mnt" "$work/j/mnt" "$work/j/bucket"

# trace PID MNT: count durability syscalls of PID during a 64 MiB write + fsync.
trace() {
	local pid=$1 mnt=$2 out=$3
	strace -q -f -p "$pid" -e trace=fsync,fdatasync,syncfs,sync,sync_file_range -o "$out" &
	local st=$!
	sleep 1
	dd if=/dev/urandom of="$mnt/f" bs=1M count=64 conv=fsync status=none
	sleep 1
	kill "$st" 2>/dev/null || true
	wait "$st" 2>/dev/null || true
	for c in fsync fdatasync syncfs sync sync_file_range; do
		printf '%s=%s ' "$c" "$(grep -cE "^[0-9]+ +$c\(" "$out" || true)"
	done
	echo
}

"$CAIRN" format "pebble://$work/c/meta" ev >/dev/null
"$CAIRN" mount -d "pebble://$work/c/meta" "$work/c/mnt" >/dev/null
cpid=$(grep -o 'pid [0-9]*' <<<"$("$CAIRN" status "pebble://$work/c/meta" | grep "$work/c/mnt")" | awk '{print $2}' || true)
[[ -n $cpid ]] || cpid=$(ps -eo pid,args | awk -v m="$work/c/mnt" '$2 ~ /cairn$/ && $3 == "mount" && index($0, m) {print $1; exit}')
echo "cairn   (pid $cpid): $(trace "$cpid" "$work/c/mnt" "$work/c.strace")"

"$JUICEFS" format --storage file --bucket "$work/j/bucket/" "sqlite3://$work/j/meta.db" evidence >/dev/null 2>&1
"$JUICEFS" mount -d --cache-dir "$work/j/cache" "sqlite3://$work/j/meta.db" "$work/j/mnt" >/dev/null 2>&1
sleep 2 # the launcher exits; the serving process stays
jpid=$(ps -eo pid,args | awk -v m="$work/j/mnt" '$2 ~ /juicefs$/ && $3 == "mount" && index($0, m) {p=$1} END {print p}')
if ! kill -0 "$jpid" 2>/dev/null; then
	echo "juicefs: serving process not found" >&2
	exit 1
fi
echo "juicefs (pid $jpid): $(trace "$jpid" "$work/j/mnt" "$work/j.strace")"
