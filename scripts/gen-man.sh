#!/usr/bin/env bash
# Regenerate docs/man (section 1 manual pages) from the binary's commands,
# dated by the last commit.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s build
rm -rf docs/man
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) bin/cairn gen-man docs/man
