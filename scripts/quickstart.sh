#!/usr/bin/env bash
# Set up and run Cairn on the embedded default: build the binary, format a
# volume (Pebble metadata + local-directory data) and mount it.
#
#   sudo ./scripts/quickstart.sh            # volume under /var/lib/cairn, mounted at /mnt/cairn
#   CAIRN_HOME=/srv/cairn MNT=/srv/mnt ./scripts/quickstart.sh
#
# Re-running it reuses the existing volume (format refuses to overwrite it)
# and mounts it again if it is not mounted.
set -euo pipefail
cd "$(dirname "$0")/.."

CAIRN_HOME=${CAIRN_HOME:-/var/lib/cairn}
MNT=${MNT:-/mnt/cairn}
NAME=${NAME:-cairn}

log() { printf '[quickstart] %s\n' "$*" >&2; }

if [[ $(id -u) -ne 0 ]]; then
	log "run as root (FUSE mounts with allow_other and apt need it)"
	exit 1
fi
if ! command -v go >/dev/null; then
	log "Go is required (https://go.dev/dl); not found in PATH"
	exit 1
fi
if ! command -v fusermount3 >/dev/null; then
	log "installing fuse3"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3
fi
if [[ ! -e /dev/fuse ]]; then
	log "/dev/fuse is missing: load the fuse module (modprobe fuse)"
	exit 1
fi

log "building bin/cairn"
make -s build

META="pebble://$CAIRN_HOME/meta"
mkdir -p "$CAIRN_HOME" "$MNT"
if ! ./bin/cairn status "$META" >/dev/null 2>&1; then
	./bin/cairn format "$META" "$NAME"
fi
if mountpoint -q "$MNT"; then
	log "$MNT is already mounted"
else
	./bin/cairn mount -d -o allow_other --log "$CAIRN_HOME/mount.log" "$META" "$MNT"
fi
echo
echo "Cairn volume '$NAME' is mounted at: $MNT"
echo "  metadata: $META"
echo "  status:   ./bin/cairn status $META"
echo "  unmount:  ./bin/cairn umount $MNT"
