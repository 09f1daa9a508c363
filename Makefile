# pfedmma — the two entry points of the README:
#   make run    installs what is missing (OpenBLAS), builds, runs the default experiment
#   make test   installs what is missing, runs go vet and the whole test suite
GO        ?= go
BIN       := bin/pfedmma
# OpenBLAS in Debian 12 does not recognise recent Xeons and falls back to slow
# kernels; pick the AVX-512 ones when the CPU has them (the binary does the
# same by itself at start-up).
AVX512    := $(shell grep -qw avx512f /proc/cpuinfo 2>/dev/null && echo yes)
ifeq ($(AVX512),yes)
export OPENBLAS_CORETYPE ?= SkylakeX
endif
# Idle OpenBLAS threads sleep instead of spinning (see gemm.TuneCPU).
export OPENBLAS_THREAD_TIMEOUT ?= 4

.PHONY: run test deps build bench clean

# Debian packages: a C compiler and OpenBLAS for cgo, and Fashion-MNIST (the fashion-mnist
# preset and its test read /usr/share/datasets/fashion-mnist).
PKGS_NEEDED = $(if $(shell command -v gcc),,gcc libc6-dev) \
              $(if $(wildcard /usr/include/x86_64-linux-gnu/cblas.h /usr/include/cblas.h /usr/include/openblas/cblas.h),,libopenblas-dev) \
              $(if $(wildcard /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz),,dataset-fashion-mnist)

deps:
	@if [ -n "$(strip $(PKGS_NEEDED))" ]; then \
		echo "installing $(strip $(PKGS_NEEDED))"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(PKGS_NEEDED); \
	fi

build: deps
	$(GO) build -o $(BIN) ./cmd/pfedmma

run: build
	./$(BIN) run

test: deps
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 20m ./...
	@echo "pure-Go fallback (-tags purego, no cgo): the engine's packages"
	CGO_ENABLED=0 $(GO) vet -tags purego ./...
	CGO_ENABLED=0 $(GO) test -count=1 -tags purego ./gemm ./nn ./clip ./mma

bench: build
	./$(BIN) bench engine
	./$(BIN) bench train

clean:
	rm -rf bin runs
