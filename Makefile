# stubvisor: `make run` serves testdata/models on :8000 (the OpenAI API on :9000),
# `make check` is the fast lane (short mode), `make test` runs every test.
PYTHON ?= /usr/bin/python3
GO     ?= go
BIN    := bin

.PHONY: all build run check test test-go test-race test-python vet deps deps-node deps-bench proto bench-ipc bench-stub bench-http bench-grpc bench-shm bench-ensemble soak clean

all: build

# deps installs what the Python stub and the tests need (Debian packages).
deps:
	@missing=""; \
	$(PYTHON) -c 'import numpy, msgpack' 2>/dev/null || missing="$$missing python3-numpy python3-msgpack"; \
	[ -e /usr/lib/x86_64-linux-gnu/libatomic.so.1 ] || [ -e /usr/lib/aarch64-linux-gnu/libatomic.so.1 ] || missing="$$missing libatomic1"; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

# deps-node installs node and npm when they are missing (Debian packages)
# and OpenAI's Node client for the OpenAI API's end-to-end test, from its
# lock file (npm ci).
OPENAI_NODE_TEST := cmd/stubvisor/testdata/openai
deps-node:
	@if ! command -v node >/dev/null || ! command -v npm >/dev/null; then \
		echo "installing: nodejs npm"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq nodejs npm; \
	fi
	cd $(OPENAI_NODE_TEST) && npm ci --no-audit --no-fund --loglevel=error

# deps-bench installs the FastAPI yardstick of bench-http (Debian packages).
deps-bench: deps
	@$(PYTHON) -c 'import fastapi, uvicorn, uvloop, httptools' 2>/dev/null || { \
		echo "installing: python3-fastapi python3-uvicorn python3-uvloop python3-httptools"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq \
			python3-fastapi python3-uvicorn python3-uvloop python3-httptools; }

build:
	$(GO) build -o $(BIN)/stubvisor ./cmd/stubvisor

# The example repository also holds models that fail on purpose (for the
# tests); run loads the ones that serve.
RUN_MODELS := add_sub identity_fp32 identity_all repeat_decoupled auto_complete error_codes batch_add seq_accumulate custom_metrics go_minimal go_repeat token_gen tiny_lm tiny_embed

run: deps build
	./$(BIN)/stubvisor --model-repository testdata/models --python $(PYTHON) \
		--model-control-mode explicit $(addprefix --load-model ,$(RUN_MODELS)) --openai-port 9000

vet:
	$(GO) vet ./...

# check is the inner loop: vet and every package's tests in short mode,
# where the slowest end-to-end cases skip themselves (about 100 s on two
# cores once the build cache is warm). test is the full gate.
check: deps vet
	$(GO) test -short -count=1 -timeout 10m ./...

test: deps deps-node vet test-python test-go test-race

test-go:
	$(GO) test -count=1 -timeout 20m ./...

# The concurrent core and the front ends once more under the race
# detector, and the end-to-end case of clients cancelling mid-request
# against a binary built with it.
test-race:
	$(GO) test -race -count=1 -timeout 20m ./ipc/ ./shmpool/ ./stub/ ./supervisor/... ./server/...
	$(GO) test -race -count=1 -timeout 10m -run 'TestFaultClientsCancelMidRequest|TestOpenAIChat|TestOpenAIDisconnectCancels' ./cmd/stubvisor/

test-python:
	$(PYTHON) -m unittest discover -s python/tests -t python
	PYTHONPATH=python/tests/nomsgpack $(PYTHON) -m unittest discover -s python/tests -t python

proto:
	./backendapi/proto/generate.sh

bench-ipc:
	$(GO) run ./cmd/stubvisor-bench ipc

bench-stub:
	$(GO) run ./cmd/stubvisor-bench stub

bench-http: deps-bench build
	$(GO) run ./cmd/stubvisor-bench http --python $(PYTHON)

bench-grpc: build
	$(GO) run ./cmd/stubvisor-bench grpc

bench-shm: build
	$(GO) run ./cmd/stubvisor-bench shm

bench-ensemble: build
	$(GO) run ./cmd/stubvisor-bench ensemble

# soak is not part of test: 5 minutes of mixed HTTP/gRPC load while stubs
# are killed at random (SOAK_ARGS=-duration=30s for a short run).
soak: build
	$(GO) run ./cmd/stubvisor-bench soak $(SOAK_ARGS)

clean:
	rm -rf $(BIN)
