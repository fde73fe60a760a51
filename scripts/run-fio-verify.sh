#!/usr/bin/env bash
# Data-integrity check with fio: random writes with verify=crc32c, then a
# separate read-back verify pass, at 4 KiB and 64 KiB block sizes.
#
#   scripts/run-fio-verify.sh DIR
#
# Environment:
#   FIO_SIZE     file size per job (default 128M; two jobs per block size)
#   FIO_BS       block sizes (default "4k 64k")
#   FIO_ENGINE   ioengine (default psync; libaio also works)
#   FIO_DIRECT   1 to use O_DIRECT (default 0; falls back to 0 if refused)
#   FIO_KEEP     1 to keep the data files
#
# Exit 0 when every pass verified, 1 on a verify failure or fio error.
# Closing line:  fio-verify: N passed, N failed
set -euo pipefail

if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
	sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
	exit 2
fi
DIR=$1
[[ -d $DIR ]] || {
	echo "run-fio-verify: not a directory: $DIR" >&2
	exit 2
}
command -v fio >/dev/null || {
	echo "run-fio-verify: fio not installed" >&2
	exit 2
}

SIZE=${FIO_SIZE:-128M}
ENGINE=${FIO_ENGINE:-psync}
DIRECT=${FIO_DIRECT:-0}
work=$(mktemp -d "$DIR/fio-verify.XXXXXX")
logs=$(mktemp -d /tmp/fio-verify-logs.XXXXXX)
cleanup() {
	if [[ ${FIO_KEEP:-0} != 1 ]]; then rm -rf "$work"; fi
	rm -rf "$logs"
}
trap cleanup EXIT

# O_DIRECT probe: FUSE file systems may refuse it (EINVAL) unless they allow it.
if [[ $DIRECT == 1 ]] && ! dd if=/dev/zero of="$work/.odirect" bs=4k count=1 oflag=direct 2>/dev/null; then
	echo "run-fio-verify: O_DIRECT refused on $DIR; using buffered I/O" >&2
	DIRECT=0
fi
rm -f "$work/.odirect"

pass=0
fail=0
run() { # name, fio args...
	local name=$1
	shift
	local out=$logs/$name.log
	local t0=$SECONDS
	# run in $logs: fio drops verify state files and bad-block dumps in its cwd
	if (cd "$logs" && fio --output-format=normal "$@") >"$out" 2>&1 && ! grep -qiE 'verify: bad|crc32c: verify failed|bad magic|err= *[1-9]' "$out"; then
		pass=$((pass + 1))
		echo "$name: ok ($((SECONDS - t0))s)"
	else
		fail=$((fail + 1))
		echo "$name: FAILED ($((SECONDS - t0))s)"
		grep -iE 'verify|err=|error' "$out" | head -n 10 | sed 's/^/    /' || true
		mkdir -p "/tmp/fio-verify-failed"
		cp -r "$logs/." "/tmp/fio-verify-failed/"
		echo "    full log and dumps: /tmp/fio-verify-failed/$name.log"
	fi
}

for bs in ${FIO_BS:-4k 64k}; do
	common=(--directory="$work" --filename_format="verify.$bs.\$jobnum" --size="$SIZE"
		--bs="$bs" --ioengine="$ENGINE" --direct="$DIRECT" --numjobs=2 --group_reporting
		--verify=crc32c --verify_fatal=1 --verify_dump=1 --do_verify=1)
	# 1) random writes over the whole file (random order, every block written
	#    once, random_generator lfsr keeps it a permutation), verified inline
	#    after the write phase ends, with an fsync at the end.
	run "randwrite-$bs" --name="randwrite-$bs" "${common[@]}" --rw=randwrite \
		--random_generator=lfsr --end_fsync=1 --verify_backlog=0
	# 2) read everything back in a fresh process (stale caches or lost
	#    writes show up here), verifying each block's header and crc32c.
	#    verify_only replays the same (seeded) write workload without writing.
	run "readback-$bs" --name="randwrite-$bs" "${common[@]}" --rw=randwrite \
		--random_generator=lfsr --verify_only=1 --invalidate=1
	# 3) overwrite the same files in a different random order with new
	#    contents (new seed): old data must not come back; verified at the end.
	#    (Mixed read/write through the page cache is fsx's job.)
	run "overwrite-$bs" --name="randwrite-$bs" "${common[@]}" --rw=randwrite \
		--randseed=4242 --random_generator=lfsr --end_fsync=1
done

echo "fio-verify: $pass passed, $fail failed"
((fail == 0))
