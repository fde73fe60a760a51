#!/usr/bin/env bash
# Run the external suites against a real Cairn FUSE mount made by the
# binary: pjdfstest, fsx and fio with verify, first on an embedded volume
# (Pebble + local directory), then on a shared one (PostgreSQL + versitygw
# S3, started by scripts/shared-env.sh). After the suites each volume is
# unmounted and must pass `cairn fsck`.
#
#   scripts/e2e.sh                 # all suites, both modes
#   SUITES="fsx fio" MODES=shared scripts/e2e.sh
#
# fsx runs FSX_SEEDS x FSX_OPS (default "1 2 3" x 25,000) embedded and
# FSX_SHARED_SEEDS x FSX_SHARED_OPS (default "1 2" x 10,000) shared, so the
# whole test command stays well under 30 minutes on 2 cores (longer runs:
# FSX_OPS=50000 FSX_SHARED_OPS=20000, see docs/posix.md). Shared runs are
# much slower: every fsync and close is a PostgreSQL commit.
#
# Needs root, /dev/fuse and scripts/install-test-deps.sh run before.
set -euo pipefail
cd "$(dirname "$0")/.."

SUITES=${SUITES:-"pjdfstest fsx fio"}
MODES=${MODES:-"embedded shared"}
FSX_SEEDS=${FSX_SEEDS:-"1 2 3"}
FSX_OPS=${FSX_OPS:-25000}
FSX_SHARED_SEEDS=${FSX_SHARED_SEEDS:-"1 2"}
FSX_SHARED_OPS=${FSX_SHARED_OPS:-10000}
CAIRN=${CAIRN:-$PWD/bin/cairn}
export PATH=$HOME/.cargo/bin:$PATH

log() { printf '[e2e] %s\n' "$*" >&2; }

work=$(mktemp -d /tmp/cairn-e2e.XXXXXX)
# pjdfstest switches to unprivileged users: they must reach the mount point.
chmod 0755 "$work"
mnt=""
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
	if [[ -n $mnt ]] && mountpoint -q "$mnt"; then
		"$CAIRN" umount "$mnt" 2>/dev/null || umount -l "$mnt" || true
	fi
	if [[ -f $work/shared/env ]]; then
		scripts/shared-env.sh stop "$work/shared" || true
	fi
	if [[ ${KEEP:-} == 1 ]]; then
		log "kept $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT

status=0
summary=()

# run_suites MODE META: mount META, run the suites, unmount, fsck.
run_suites() {
	local mode=$1 meta=$2
	# Short: pjdfstest creates unix sockets, whose paths may not pass 107
	# bytes, deep below the mount point.
	mnt="$work/${mode:0:1}m"
	mkdir -p "$mnt"
	"$CAIRN" mount -d -o allow_other --log "$work/$mode/mount.log" "$meta" "$mnt"
	chmod 0777 "$mnt"
	local seeds=$FSX_SEEDS ops=$FSX_OPS
	if [[ $mode == shared ]]; then
		seeds=$FSX_SHARED_SEEDS ops=$FSX_SHARED_OPS
	fi
	local s out
	for s in $SUITES; do
		case $s in
		pjdfstest)
			mkdir -p "$mnt/pjd"
			chmod 0777 "$mnt/pjd"
			if out=$(scripts/run-pjdfstest.sh "$mnt/pjd" docs/pjdfstest-allowlist.txt 2>&1); then :; else status=1; fi
			printf '%s\n' "$out" | tail -40
			summary+=("$mode $(printf '%s\n' "$out" | grep -E '^pjdfstest:' | tail -1)")
			;;
		fsx)
			mkdir -p "$mnt/fsx"
			if out=$(scripts/run-fsx.sh "$mnt/fsx" "$seeds" "$ops" 2>&1); then :; else status=1; fi
			printf '%s\n' "$out" | tail -15
			summary+=("$mode $(printf '%s\n' "$out" | grep -E '^fsx:' | tail -1)")
			;;
		fio)
			mkdir -p "$mnt/fio"
			if out=$(scripts/run-fio-verify.sh "$mnt/fio" 2>&1); then :; else status=1; fi
			printf '%s\n' "$out" | tail -15
			summary+=("$mode $(printf '%s\n' "$out" | grep -E '^fio-verify:' | tail -1)")
			;;
		*)
			log "unknown suite $s"
			exit 2
			;;
		esac
	done
	# The suites remove their files: leave fsck a tree to check (the
	# source tree, many small files; and a file of whole 4 MiB blocks).
	cp -a internal "$mnt/tree"
	head -c 50M /dev/urandom >"$mnt/tree/random.bin"
	local sum
	sum=$(sha256sum <"$mnt/tree/random.bin")
	"$CAIRN" umount "$mnt"
	local fsck_out
	if ! fsck_out=$("$CAIRN" fsck "$meta" 2>&1); then
		log "$mode: fsck failed after the suites"
		status=1
	fi
	printf '%s\n' "$fsck_out"
	if grep -q 'checked 0 slices' <<<"$fsck_out"; then
		log "$mode: fsck had nothing to check"
		status=1
	fi
	summary+=("$mode fsck: $(printf '%s\n' "$fsck_out" | grep -E '^checked' | tail -1)")
	# The tree reads back after a remount.
	"$CAIRN" mount -d -o allow_other --log "$work/$mode/mount.log" "$meta" "$mnt"
	if [[ $(sha256sum <"$mnt/tree/random.bin") != "$sum" ]] || ! diff -r internal "$mnt/tree" --exclude=random.bin >/dev/null; then
		log "$mode: the tree written before fsck does not read back"
		status=1
	fi
	"$CAIRN" umount "$mnt"
	if [[ $status -ne 0 ]]; then
		log "$mode: mount log tail:"
		tail -50 "$work/$mode/mount.log" >&2 || true
	fi
}

for mode in $MODES; do
	log "== $mode volume =="
	case $mode in
	embedded)
		mkdir -p "$work/embedded"
		meta="pebble://$work/embedded/meta"
		"$CAIRN" format "$meta" e2e >/dev/null
		run_suites embedded "$meta"
		;;
	shared)
		scripts/shared-env.sh start "$work/shared"
		# shellcheck disable=SC1091  # written by shared-env.sh
		source "$work/shared/env"
		meta=$(scripts/shared-env.sh db "$work/shared" e2e)
		"$CAIRN" format --data "s3://e2e?endpoint=$S3_ENDPOINT" "$meta" e2e >/dev/null
		run_suites shared "$meta"
		;;
	*)
		log "unknown mode $mode (embedded, shared)"
		exit 2
		;;
	esac
done

echo
echo "== e2e summary =="
printf '%s\n' "${summary[@]}"
exit $status
