#!/usr/bin/env bash
# Run fsx (the Rust fsx-rs, 0.3.2) data-integrity exerciser on a file in DIR.
#
#   scripts/run-fsx.sh DIR [SEEDS] [OPS]
#
# SEEDS: comma/space separated seeds (default "1 2 3"), or a count like "x5"
#        meaning seeds 1..5. OPS: operations per seed (default 50000).
# Each seed runs on its own file DIR/fsx.<seed> (removed on success).
#
# Operations enabled by the generated config (fsx.toml): pread, pwrite,
# mmap read, mmap write + msync, msync(MS_INVALIDATE), ftruncate grow/shrink,
# close/reopen, fsync, fdatasync, posix_fallocate, fallocate PUNCH_HOLE,
# sendfile, posix_fadvise, copy_file_range. File up to 8 MiB (crosses 4 MiB
# block boundaries), ops up to 256 KiB.
# FUSE notes: fallocate and copy_file_range reach the daemon as FUSE_FALLOCATE /
# FUSE_COPY_FILE_RANGE; a daemon that answers ENOSYS/EOPNOTSUPP makes fsx panic
# (exit 101). Disable them with FSX_DISABLE="posix_fallocate punch_hole
# copy_file_range". Shared writable mmap needs the mount not to use direct_io.
#
# Environment:
#   FSX            binary (default: fsx on PATH, else ~/.cargo/bin/fsx)
#   FSX_CONFIG     use this fsx TOML config instead of the generated one
#   FSX_DISABLE    space-separated weights to set to 0 in the generated config
#   FSX_FLEN       maximum file length (default 8388608)
#   FSX_OPMAX      maximum op size (default 262144)
#   FSX_TIMEOUT    seconds per seed before it is killed (default 1200)
#   FSX_ARTIFACTS  where failure artifacts (.fsxgood, logs) go
#                  (default /tmp/fsx-artifacts)
#
# Exit 0 if every seed completed, 1 otherwise. Closing line:
#   fsx: N passed, N failed
set -euo pipefail

if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
	sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
	exit 2
fi
DIR=$1
SEEDS=${2:-1 2 3}
OPS=${3:-50000}

[[ -d $DIR ]] || {
	echo "run-fsx: not a directory: $DIR" >&2
	exit 2
}
FSX=${FSX:-$(command -v fsx || echo "$HOME/.cargo/bin/fsx")}
[[ -x $FSX ]] || {
	echo "run-fsx: fsx not found (run scripts/install-test-deps.sh)" >&2
	exit 2
}

if [[ $SEEDS == x* ]]; then
	SEEDS=$(seq 1 "${SEEDS#x}")
fi
read -r -a seeds <<<"${SEEDS//,/ }"

ART=${FSX_ARTIFACTS:-/tmp/fsx-artifacts}
mkdir -p "$ART"
work=$(mktemp -d /tmp/run-fsx.XXXXXX)
trap 'rm -rf "$work"' EXIT

if [[ -n ${FSX_CONFIG:-} ]]; then
	cfg=$FSX_CONFIG
else
	cfg=$work/fsx.toml
	declare -A w=(
		[close_open]=2 [read]=10 [write]=10 [mapread]=5 [mapwrite]=5
		[invalidate]=1 [truncate]=3 [fsync]=1 [fdatasync]=1
		[posix_fallocate]=2 [punch_hole]=2 [sendfile]=2 [posix_fadvise]=1
		[copy_file_range]=2
	)
	for k in ${FSX_DISABLE:-}; do
		[[ -v "w[$k]" ]] || {
			echo "run-fsx: unknown op $k" >&2
			exit 2
		}
		w[$k]=0
	done
	{
		echo "flen = ${FSX_FLEN:-8388608}"
		echo "[opsize]"
		echo "max = ${FSX_OPMAX:-262144}"
		echo "[weights]"
		for k in "${!w[@]}"; do echo "$k = ${w[$k]}"; done
	} >"$cfg"
fi

fstype=$(findmnt -n -o FSTYPE -T "$DIR" 2>/dev/null || echo '?')
echo "run-fsx: $FSX on $DIR (fs: $fstype), seeds: ${seeds[*]}, ops: $OPS" >&2
pass=0
fail=0
failed=()
for s in "${seeds[@]}"; do
	f=$DIR/fsx.$s
	out=$ART/fsx.$s.log
	start=$SECONDS
	set +e
	timeout --kill-after=30 "${FSX_TIMEOUT:-1200}" \
		"$FSX" -f "$cfg" -N "$OPS" -S "$s" -P "$ART" "$f" >"$out" 2>&1
	rc=$?
	set -e
	dur=$((SECONDS - start))
	if [[ $rc -eq 0 ]] && grep -q 'All operations completed A-OK' "$out"; then
		pass=$((pass + 1))
		echo "seed $s: ok ($OPS ops, ${dur}s)"
		rm -f "$f" "$ART/fsx.$s.fsxgood" "$out"
	else
		fail=$((fail + 1))
		failed+=("$s")
		case $rc in
		1) why="data/size miscompare" ;;
		2) why="bad configuration" ;;
		101) why="panic (an operation returned an unexpected error)" ;;
		124 | 137) why="timeout" ;;
		*) why="exit $rc" ;;
		esac
		echo "seed $s: FAILED ($why, ${dur}s); log: $out, file kept: $f"
		grep -E 'miscompare|panicked|short|error|ERROR' "$out" | head -n 5 | sed 's/^/    /' || true
	fi
done
if ((fail)); then
	[[ -n ${FSX_CONFIG:-} ]] || cp "$cfg" "$ART/fsx.toml"
	echo "reproduce: $FSX -f ${FSX_CONFIG:-$ART/fsx.toml} -N $OPS -S <seed> -P $ART <file>; failed seeds: ${failed[*]}"
else
	rmdir "$ART" 2>/dev/null || true # nothing to keep: leave no empty directory
fi
echo "fsx: $pass passed, $fail failed"
((fail == 0))
