#!/usr/bin/env bash
# Run the external suites against a real Cairn FUSE mount made by the
# binary: pjdfstest, fsx (3 seeds x 50,000 ops) and fio with verify.
# After the suites the volume is unmounted and must pass `cairn fsck`.
#
#   scripts/e2e.sh                 # all suites
#   SUITES="fsx fio" scripts/e2e.sh
#
# Needs root, /dev/fuse and scripts/install-test-deps.sh run before.
set -euo pipefail
cd "$(dirname "$0")/.."

SUITES=${SUITES:-"pjdfstest fsx fio"}
CAIRN=${CAIRN:-$PWD/bin/cairn}
export PATH=$HOME/.cargo/bin:$PATH

log() { printf '[e2e] %s\n' "$*" >&2; }

work=$(mktemp -d /tmp/cairn-e2e.XXXXXX)
# pjdfstest switches to unprivileged users: they must reach the mount point.
chmod 0755 "$work"
meta="pebble://$work/meta"
mnt="$work/mnt"
mkdir -p "$mnt"
cleanup() {
	if mountpoint -q "$mnt"; then
		"$CAIRN" umount "$mnt" 2>/dev/null || umount -l "$mnt" || true
	fi
	if [[ ${KEEP:-} == 1 ]]; then
		log "kept $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT

"$CAIRN" format "$meta" e2e >/dev/null
"$CAIRN" mount -d -o allow_other --log "$work/mount.log" "$meta" "$mnt"
chmod 0777 "$mnt"

status=0
summary=()
for s in $SUITES; do
	case $s in
	pjdfstest)
		mkdir -p "$mnt/pjd"
		chmod 0777 "$mnt/pjd"
		if out=$(scripts/run-pjdfstest.sh "$mnt/pjd" docs/pjdfstest-allowlist.txt 2>&1); then :; else status=1; fi
		printf '%s\n' "$out" | tail -40
		summary+=("$(printf '%s\n' "$out" | grep -E '^pjdfstest:' | tail -1)")
		;;
	fsx)
		mkdir -p "$mnt/fsx"
		if out=$(scripts/run-fsx.sh "$mnt/fsx" "1 2 3" 50000 2>&1); then :; else status=1; fi
		printf '%s\n' "$out" | tail -15
		summary+=("$(printf '%s\n' "$out" | grep -E '^fsx:' | tail -1)")
		;;
	fio)
		mkdir -p "$mnt/fio"
		if out=$(scripts/run-fio-verify.sh "$mnt/fio" 2>&1); then :; else status=1; fi
		printf '%s\n' "$out" | tail -15
		summary+=("$(printf '%s\n' "$out" | grep -E '^fio-verify:' | tail -1)")
		;;
	*)
		log "unknown suite $s"
		exit 2
		;;
	esac
done

"$CAIRN" umount "$mnt"
if ! "$CAIRN" fsck "$meta"; then
	log "fsck failed after the suites"
	status=1
fi
if [[ $status -ne 0 ]]; then
	log "mount log tail:"
	tail -50 "$work/mount.log" >&2 || true
fi
echo
echo "== e2e summary =="
printf '%s\n' "${summary[@]}"
exit $status
