# Cairn's build. The README's two commands are `make cluster` and `make test`;
# everything else here is a step of those two or a developer's shortcut.

GO ?= go
OUT ?= out
# Tools fetched through the Go module proxy, pinned here and nowhere else.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: all deps build test unit e2e lint bench image cluster proto clean

all: build

# deps installs the Debian packages a fresh machine lacks; a no-op otherwise.
deps:
	@./build/deps.sh

build:
	$(GO) build ./...

# make test runs every test: the unit tests under the race detector, then the
# qemu end-to-end suites against a freshly built image.
test: deps
	@$(MAKE) --no-print-directory unit
	@$(MAKE) --no-print-directory e2e

unit:
	$(GO) test -race -count=1 ./...

e2e:
	@echo "e2e: no end-to-end suites yet"

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...

cluster:
	@echo "make cluster: booting nodes is not available yet"

clean:
	rm -rf $(OUT)
