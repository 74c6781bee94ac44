# stubvisor: `make run` serves testdata/models on :8000 (the OpenAI API on :9000),
# `make check` is the fast lane (short mode), `make test` runs every test.
PYTHON ?= /usr/bin/python3
GO     ?= go
BIN    := bin

.PHONY: all build fastpath run check test test-go test-race test-nethttp test-python test-deploy image vet deps deps-node deps-deploy deps-bench proto bench-ipc bench-stub bench-http bench-grpc bench-shm bench-ensemble soak gpu-check gpu-check-bundle soak-recycle clean

all: build

# deps installs what the Python stub and the tests need (Debian packages).
deps:
	@missing=""; \
	$(PYTHON) -c 'import numpy, msgpack' 2>/dev/null || missing="$$missing python3-numpy python3-msgpack"; \
	[ -e /usr/lib/x86_64-linux-gnu/libatomic.so.1 ] || [ -e /usr/lib/aarch64-linux-gnu/libatomic.so.1 ] || missing="$$missing libatomic1"; \
	[ -f "$$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ] || missing="$$missing python3-dev"; \
	command -v $(CC) >/dev/null || missing="$$missing gcc"; \
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

# The Python stub's compiled fast path (python/stubvisor/fastpath*.c), built
# against $(PYTHON)'s headers and named with its EXT_SUFFIX, so that only
# that interpreter's ABI loads it; python/embed.go carries it into the
# binary. A plain go build (no .so) runs the stub's pure-Python path.
PY_INCLUDE    := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
PY_EXT_SUFFIX := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))' 2>/dev/null)
FASTPATH      := python/stubvisor/fastpath$(PY_EXT_SUFFIX)

fastpath: $(FASTPATH)

FASTPATH_SRC  := $(wildcard python/stubvisor/fastpath*.c)

$(FASTPATH): $(FASTPATH_SRC) $(wildcard python/stubvisor/fastpath*.h)
	@test -n "$(PY_EXT_SUFFIX)" && test -f "$(PY_INCLUDE)/Python.h" || { \
		echo "fastpath: $(PYTHON) has no Python.h (apt-get install python3-dev)"; exit 1; }
	$(CC) -shared -fPIC -O2 -Wall -fno-strict-aliasing -fvisibility=hidden -I$(PY_INCLUDE) -o $(@D)/.fastpath.tmp $(FASTPATH_SRC) && mv $(@D)/.fastpath.tmp $@

build: fastpath
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
check: deps fastpath vet
	$(GO) test -short -count=1 -timeout 10m ./...

test: deps deps-node vet test-python test-go test-race test-deploy

test-go: fastpath
	$(GO) test -count=1 -timeout 20m ./...

# The concurrent core and the front ends once more under the race
# detector, and the end-to-end cases of clients cancelling mid-request, of
# large tensors read into, written from and given back to the stubs'
# arenas, and of the rate limiter against a binary built with it.
test-race: fastpath
	$(GO) test -race -count=1 -timeout 20m ./ipc/ ./shmpool/ ./stub/ ./supervisor/... ./server/...
	$(GO) test -race -count=1 -timeout 10m -run 'TestFaultClientsCancelMidRequest|TestLargeBinaryInputCutShort|TestLargeBinaryOutputs|TestLargeGRPCInputs|TestOpenAIChat|TestOpenAIDisconnectCancels|TestRateLimiter$$' ./cmd/stubvisor/

# The end-to-end suite once more with every server on --http-engine
# net/http, Go's own server (not part of make test: TestHTTPEngines,
# TestLargeBinaryOutputs and server/httpserve's tests run both engines
# there).
test-nethttp: fastpath
	STUBVISOR_TEST_HTTP_ENGINE=net/http $(GO) test -count=1 -timeout 20m ./cmd/stubvisor/

# The stub's tests with the compiled fast path, without it (the pure-Python
# path every other interpreter runs), and without msgpack.
test-python: fastpath
	$(PYTHON) -m unittest discover -s python/tests -t python
	STUBVISOR_PY_FASTPATH=0 $(PYTHON) -m unittest discover -s python/tests -t python
	PYTHONPATH=python/tests/nomsgpack $(PYTHON) -m unittest discover -s python/tests -t python

proto:
	./backendapi/proto/generate.sh

bench-ipc:
	$(GO) run ./cmd/stubvisor-bench ipc

bench-stub: fastpath
	$(GO) run ./cmd/stubvisor-bench stub

bench-http: deps-bench build
	$(GO) run ./cmd/stubvisor-bench http --python $(PYTHON) -neighbours 2 -quick -idle 10s -idle-models "$(RUN_MODELS)"

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

# --- Container image and Kubernetes manifests (deploy/, docs/deploy.md) ---

IMAGE       ?= localhost/stubvisor:latest
BASE_IMAGE  ?= localhost/stubvisor-base:bookworm
SUITE       ?= bookworm
# The base root filesystem comes from the apt sources this machine has.
APT_SOURCES ?= $(firstword $(wildcard /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list))
IMAGE_PACKAGES := python3-numpy,python3-msgpack,libatomic1,curl,ca-certificates
ROOTFS      := $(BIN)/image/rootfs.tar
HELM_VERSION ?= v3.19.0
HELM        := $(BIN)/helm-$(HELM_VERSION)/helm
PODMAN      ?= podman
# runc and no default ulimits (deploy/containers.conf says why).
export CONTAINERS_CONF ?= $(CURDIR)/deploy/containers.conf

# deps-deploy installs what make image and test-deploy need (Debian packages).
deps-deploy:
	@missing=""; \
	for c in podman:podman runc:runc mmdebstrap:mmdebstrap newuidmap:uidmap; do \
		command -v $${c%%:*} >/dev/null 2>&1 || [ -x /usr/sbin/$${c%%:*} ] || missing="$$missing $${c#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

# The Debian 12 root filesystem of the image, made once (about a minute)
# and kept; remove it to pick up Debian updates.
$(ROOTFS):
	@mkdir -p $(@D)
	mmdebstrap --variant=minbase --format=tar --include=$(IMAGE_PACKAGES) \
		--aptopt='APT::Install-Recommends "false"' \
		--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
		--dpkgopt='path-exclude=/usr/share/info/*' \
		$(SUITE) $@.tmp $(APT_SOURCES)
	mv $@.tmp $@

# image builds $(IMAGE) from deploy/Containerfile on that root filesystem,
# with no container registry involved.
image: deps-deploy $(ROOTFS) fastpath
	@mkdir -p $(BIN)/image/ctx
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/image/ctx/stubvisor ./cmd/stubvisor
	$(PODMAN) import --quiet $(ROOTFS) $(BASE_IMAGE)
	$(PODMAN) build --pull=never --quiet -f deploy/Containerfile --build-arg BASE=$(BASE_IMAGE) -t $(IMAGE) $(BIN)/image/ctx

# helm is built from source through the Go module proxy, once.
$(HELM):
	GOBIN=$(abspath $(@D)) $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

# test-deploy runs the image in podman end to end and checks the chart and
# the KServe manifests against the Kubernetes and KServe schemas (its own
# Go module, so that the server's go.mod does not pull in Kubernetes).
test-deploy: image $(HELM)
	cd deploy && $(GO) vet ./...
	cd deploy && STUBVISOR_IMAGE=$(IMAGE) HELM=$(abspath $(HELM)) PODMAN="$(PODMAN)" \
		$(GO) test -count=1 -timeout 20m ./...

# soak-recycle is not part of test either: the leak model under load for
# SOAK_DURATION with MAX_RSS_MB recycling it and a hard MEMORY_LIMIT_MB
# above; no request may fail but the intended kills, and the server's RSS
# and fds stay flat (SOAK_DURATION=30s for a short run).
SOAK_DURATION ?= 5m
soak-recycle: deps fastpath
	STUBVISOR_SOAK_RECYCLE=$(SOAK_DURATION) $(GO) test -count=1 -timeout 30m -run 'TestSoakRecycle$$' -v ./cmd/stubvisor/

# gpu-check-bundle puts what the device check needs into bin/gpu-check: a
# stubvisor built without cgo (it needs only the C library at run time),
# the script and its models; the folder (or bin/gpu-check.tar.gz) is all a
# GPU machine with Python, torch and cuda-python needs, no Go. gpu-check
# builds it and runs it here (on a machine without a GPU, the checks say
# so); on the GPU machine run bin/gpu-check/run.sh.
GPU_CHECK := $(BIN)/gpu-check
gpu-check-bundle: fastpath
	rm -rf $(GPU_CHECK) && mkdir -p $(GPU_CHECK)
	CGO_ENABLED=0 $(GO) build -trimpath -o $(GPU_CHECK)/stubvisor ./cmd/stubvisor
	cp -r testdata/gpucheck/. $(GPU_CHECK)/
	tar -C $(BIN) -czf $(BIN)/gpu-check.tar.gz gpu-check

gpu-check: gpu-check-bundle
	PYTHON=$(PYTHON) $(GPU_CHECK)/run.sh

clean:
	rm -rf $(BIN) python/stubvisor/*.so
