#!/usr/bin/env bash
# Regenerate docs/cli.md from the binary's --help texts.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s build
{
	echo "# Command line"
	echo
	echo "Generated from \`cairn <verb> --help\` (regenerate with \`scripts/gen-cli-doc.sh\`)."
	echo
	for c in format mount umount status config info fsck gc stats warmup bench snapshot "snapshot create" "snapshot list" "snapshot restore" \
		"snapshot delete" "snapshot diff" find dump load backup "backup list" "backup now" "backup delete" "backup restore" replicate "replicate start" "replicate status" "replicate failover" "replicate reverse" "replicate stop" "replicate resume" quota "quota set" "quota get" "quota list" "quota delete" "quota check" trash "trash list" "trash restore" "trash purge" destroy gateway "gateway nfs" version; do
		echo "## cairn $c"
		echo
		echo '```'
		# shellcheck disable=SC2086 # "snapshot create" is two arguments
		bin/cairn $c --help
		echo '```'
		echo
	done
} >docs/cli.md
