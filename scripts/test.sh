#!/usr/bin/env bash
# The whole test run, as CI runs it: install what the tests need, then
# gofmt, go vet, unit and FUSE tests with -race, and the external suites
# (pjdfstest, fsx, fio verify) on real mounts of the built binary, on an
# embedded and on a shared (PostgreSQL + S3) volume.
#
#   sudo ./scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$HOME/.cargo/bin:$PATH
# Shared-mode tests start their own PostgreSQL and versitygw; here a
# missing server is a failure, not a skip.
export CAIRN_REQUIRE_SHARED=1

step() { printf '\n== %s ==\n' "$*"; }

step "install test dependencies"
scripts/install-test-deps.sh

step "gofmt"
make -s fmt-check

step "go vet"
go vet ./...

step "build"
make -s build

step "unit and FUSE tests (-race)"
go test -race -timeout 25m ./...

step "meta's tests again on the embedded engine (optimistic transactions side by side)"
CAIRN_META_TEST_STORE=pebble go test -race -timeout 10m ./internal/meta

step "external suites on a real mount"
scripts/e2e.sh

step "all tests passed"
