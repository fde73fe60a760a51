#!/usr/bin/env bash
# Run the POSIX conformance suite pjdfstest (Rust rewrite, 0.2.2) against DIR.
#
#   scripts/run-pjdfstest.sh DIR [ALLOWLIST]
#
# DIR is a directory on the file system under test (e.g. a Cairn FUSE mount).
# Must run as root: many cases switch to the dummy users nobody and tests, so a
# FUSE mount must be mounted with -o allow_other or those cases fail with EACCES.
#
# ALLOWLIST (argument, or $PJD_ALLOWLIST): file of test names that may fail,
# one per line, '#' starts a comment. Failures not in it make the exit non-zero.
#
# Environment:
#   PJDFSTEST      binary (default: pjdfstest on PATH, else ~/.cargo/bin/pjdfstest)
#   PJD_CONFIG     use this pjdfstest TOML config instead of the generated one
#   PJD_FEATURES   opt-in features for the generated config
#                  (default: "posix_fallocate rename_ctime utimensat utime_now")
#                  "posix_fallocate rename_ctime" reproduces the 398-test
#                  reference run (ext4: 363 passed, 35 skipped)
#   PJD_NAPTIME    seconds slept between timestamp checks (default 0.01; must be
#                  larger than the fs timestamp granularity)
#   PJD_PATTERNS   space-separated substrings to select tests (default: all)
#   PJD_TIMEOUT    seconds before the whole run is killed (default 1800)
#   PJD_LOG        keep the full pjdfstest output here (default: temp file, kept
#                  and printed on failure)
#
# Output: per-test failures, then a closing line
#   pjdfstest: N passed, N failed, N skipped
# where "failed" counts failures not in the allowlist. Exit 0 when that is 0,
# 1 when there are unallowed failures, 2 when the suite could not run.
set -euo pipefail

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
	exit 2
}
[[ $# -ge 1 && $1 != -h && $1 != --help ]] || usage
DIR=$1
ALLOWLIST=${2:-${PJD_ALLOWLIST:-}}

die() {
	echo "run-pjdfstest: $*" >&2
	exit 2
}

[[ -d $DIR ]] || die "not a directory: $DIR"
[[ $(id -u) -eq 0 ]] || die "must run as root (tests switch users and chown)"
if [[ -n $ALLOWLIST && ! -r $ALLOWLIST ]]; then die "cannot read allowlist $ALLOWLIST"; fi

PJDFSTEST=${PJDFSTEST:-$(command -v pjdfstest || echo "$HOME/.cargo/bin/pjdfstest")}
[[ -x $PJDFSTEST ]] || die "pjdfstest not found (run scripts/install-test-deps.sh)"

# Dummy users: pjdfstest's default auth entries are nobody/<nobody's group> and
# tests/<tests's group>. Debian has nobody but not tests.
if ! getent passwd tests >/dev/null; then
	echo "run-pjdfstest: creating dummy user 'tests'" >&2
	useradd --system --user-group --no-create-home --home-dir / \
		--shell /usr/sbin/nologin tests
fi

# A FUSE mount without allow_other is invisible to the dummy users.
fstype=$(findmnt -n -o FSTYPE -T "$DIR" 2>/dev/null || true)
opts=$(findmnt -n -o OPTIONS -T "$DIR" 2>/dev/null || true)
if [[ $fstype == fuse* && $opts != *allow_other* ]]; then
	echo "run-pjdfstest: WARNING: $DIR is on $fstype without allow_other;" \
		"tests that switch users will fail" >&2
fi

work=$(mktemp -d /tmp/run-pjdfstest.XXXXXX)
trap 'rm -rf "$work"' EXIT

if [[ -n ${PJD_CONFIG:-} ]]; then
	cfg=$PJD_CONFIG
else
	cfg=$work/pjdfstest.toml
	{
		echo "[features]"
		for f in ${PJD_FEATURES:-posix_fallocate rename_ctime utimensat utime_now}; do
			echo "$f = {}"
		done
		echo "[settings]"
		echo "naptime = ${PJD_NAPTIME:-0.01}"
		echo "allow_remount = false"
	} >"$cfg"
fi

log=${PJD_LOG:-$work/pjdfstest.log}
# pjdfstest creates its own temp dir under -p; give it a fresh 0755 parent so a
# leftover from an aborted run cannot interfere.
base=$(mktemp -d "$DIR/pjdfstest.XXXXXX")
chmod 0755 "$base"

echo "run-pjdfstest: $PJDFSTEST -c $cfg -p $base (fs: ${fstype:-?})" >&2
read -r -a patterns <<<"${PJD_PATTERNS:-}"
set +e
# pjdfstest exits 1 when any test failed; the summary is parsed either way.
(cd "$base" && NO_COLOR=1 CLICOLOR=0 RUST_BACKTRACE=0 timeout --kill-after=30 "${PJD_TIMEOUT:-1800}" \
	"$PJDFSTEST" -c "$cfg" -p "$base" -- "${patterns[@]}") >"$log" 2>&1
rc=$?
set -e
rm -rf "$base" 2>/dev/null || echo "run-pjdfstest: could not remove $base" >&2

# Strip ANSI colour codes in case the binary ignores NO_COLOR.
sed -i 's/\x1b\[[0-9;]*m//g' "$log"

if ! grep -q '^Summary:' "$log"; then
	echo "run-pjdfstest: no summary (exit $rc); output tail:" >&2
	tail -n 30 "$log" >&2
	[[ -n ${PJD_LOG:-} ]] || cp "$log" "/tmp/pjdfstest-last.log"
	exit 2
fi

# Result lines are "<name><spaces><status>"; skip reasons and panic messages
# are indented with a tab.
awk -v allow="${ALLOWLIST:-/dev/null}" '
BEGIN {
	while ((getline line < allow) > 0) {
		sub(/#.*/, "", line); gsub(/^[ \t]+|[ \t]+$/, "", line)
		if (line != "") allowed[line] = 1
	}
}
/^[ \t]/ || /^Summary:/ || /^Backtrace:/ || NF < 2 {
	# continuation lines (panic message, assert left/right) of a failed test
	if (cur != "" && /^[ \t]/ && nmsg[cur]++ < 6) { l = $0; sub(/^[ \t]+/, "", l); msg[cur] = msg[cur] "\n    " l }
	next
}
{
	name = $1; status = $0; sub(/^[^ ]+ +/, "", status); cur = ""
	if (status == "ok") pass++
	else if (status == "skipped") skip++
	else if (status == "failed as expected") xfail++
	else if (status == "FAILED" || status == "PASSED UNEXPECTEDLY") {
		cur = name
		if (name in allowed) { afail++; alist = alist "  " name "\n"; seen[name] = 1 }
		else { fail++; flist = flist "  " name " (" status ")\n"; order[++n] = name }
	}
}
END {
	if (fail) {
		print "FAILED tests:"
		for (i = 1; i <= n; i++) {
			printf "  %s%s\n", order[i], msg[order[i]]
		}
	}
	if (afail) printf "allowed failures (%d):\n%s", afail, alist
	for (a in allowed) if (!(a in seen)) stale = stale "  " a "\n"
	if (stale != "") printf "allowlisted but not failing:\n%s", stale
	printf "pjdfstest: %d passed, %d failed, %d skipped\n", pass, fail, skip
	if (afail || xfail) printf "(plus %d allowlisted failures, %d expected failures)\n", afail, xfail
	exit(fail ? 1 : 0)
}' "$log" && status=0 || status=$?

grep '^Summary:' "$log" >&2
if [[ $status -ne 0 && -z ${PJD_LOG:-} ]]; then
	cp "$log" /tmp/pjdfstest-last.log
	echo "run-pjdfstest: full log in /tmp/pjdfstest-last.log" >&2
fi
exit "$status"
