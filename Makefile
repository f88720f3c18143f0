# laggard — the two set-up commands in the README are `make demo` and `make test`.
GO      ?= go
PY      ?= /usr/bin/python3
PYVENV  ?= python3
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
BIN     := bin/laggard
LDFLAGS := -s -w

.PHONY: all deps deps-browser deps-alertmanager build demo test test-go test-py bench fuzz chaos eval clean native test-native

all: build

# System packages: PyTorch for the demo trainer and the Python client tests
# (Debian's python3-torch; there is no PyPI access in CI).
deps:
	@$(PY) -c "import torch" 2>/dev/null || { \
	  echo "installing python3-torch (Debian package)…"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch >/dev/null; }

# One static binary, UI and Python client embedded.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/laggard

demo: deps build
	./$(BIN) demo

# Headless Chromium for the UI tests (Debian's package; no browser download).
deps-browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing chromium (Debian package) for the UI tests…"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# Alertmanager for the notification tests (internal/notify starts a real
# one on a loopback port; Debian's package, whose service is not needed).
deps-alertmanager:
	@command -v prometheus-alertmanager >/dev/null 2>&1 || { \
	  echo "installing prometheus-alertmanager (Debian package) for the notification tests…"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus-alertmanager >/dev/null; }

test: deps deps-browser deps-alertmanager test-go test-py

test-go: test-native
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

# The NCCL LD_PRELOAD shim (native/ncclshim) with the system C compiler,
# and its C tests against a stub libnccl.so — no GPU needed. The Go reader's
# multi-process test (internal/agent/nccl) builds its own copy.
native:
	$(MAKE) -C native/ncclshim

test-native:
	$(MAKE) -C native/ncclshim test

# The client's unit tests run from the source tree; install_test.sh then
# pip-installs it offline (directory, sdist, editable) into a throwaway venv
# made by $(PYVENV) (falling back to Debian's python3-venv) and checks the
# installed copy from outside the tree.
test-py:
	$(PY) -m unittest discover -s clients/python/tests
	$(PY) -m unittest discover -s eval/tests
	PYVENV=$(PYVENV) bash clients/python/tests/install_test.sh

bench:
	$(GO) test -run='^$$' -bench=. -benchmem ./...

# Runs every fuzz target for FUZZTIME each.
fuzz:
	FUZZTIME=$${FUZZTIME:-30s} ./scripts/fuzz.sh

# The chaos and load suite at full size (internal/chaos): kill -9 with 64
# posters, load figures, fair share, disk full, 2,000 slow clients, every
# defect probe. Its short mode already runs inside `go test ./...` (test-go).
# Without -race, so the figures it logs are production-like.
chaos:
	LAGGARD_CHAOS=full $(GO) test -count=1 -v -timeout 30m ./internal/chaos/

# Reproduces StageFrontier's E3 hidden-rank routing table (see eval/README.md).
eval: deps build
	$(PY) eval/e3_routing.py --laggard ./$(BIN)

clean:
	rm -rf bin eval/out
