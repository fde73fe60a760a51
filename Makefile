GO ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)

.PHONY: build test unit vet fmt-check e2e bench clean

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/cairn ./cmd/cairn

# Everything CI runs: installs test dependencies, then vet, gofmt, unit
# tests with -race, FUSE tests, and the external suites on real mounts.
test:
	./scripts/test.sh

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l cmd internal); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

unit:
	$(GO) test -race -timeout 20m ./...

e2e: build
	./scripts/e2e.sh

bench: build
	./bench/run.sh

clean:
	rm -rf bin
