# shellcheck shell=bash
# Helpers shared by the benchmark scripts. Source it after setting
# BENCH_NAME (the prefix of log lines):
#
#   BENCH_NAME=nfs-bench
#   source "$HERE/lib.sh"

# log MSG...: a time-stamped line on stderr.
log() { printf '[%s %(%H:%M:%S)T] %s\n' "$BENCH_NAME" -1 "$*" >&2; }

# die MSG...: log an error and exit 1.
die() {
	log "ERROR: $*"
	exit 1
}

# need_root WHY: exit unless running as root.
need_root() { [[ $(id -u) -eq 0 ]] || die "run as root ($1)"; }

# need_cmd CMD [HINT]: exit unless CMD is on PATH.
need_cmd() { command -v "$1" >/dev/null || die "$1 not installed${2:+ ($2)}"; }
