# pfedmma — the two entry points of the README:
#   make run    installs what is missing (OpenBLAS), builds, runs the default experiment
#   make test   installs what is missing, runs go vet and the whole test suite
GO        ?= go
BIN       := bin/pfedmma
# The suite passes, bit for bit, under whatever OpenBLAS kernel family the
# machine presets (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE): neither is set or
# changed here. Every binary that links package gemm, pfedmma and each test
# binary, picks the best family by itself when none is preset (gemm's init).

.PHONY: mutants-gremlins run test deps build bench fuzz proto clean docs mutants fixtures-maple fixtures verify-fixtures fixtures-dpfpl fixtures-fedmvp fixtures-external fixtures-promptsrc fixtures-prograd fixtures-plot

# Debian packages: a C compiler, OpenBLAS (float32 GEMM), oneDNN (the opt-in bfloat16
# path) and libjpeg-turbo (JPEG decoding as PIL does) for cgo, Fashion-MNIST (the fashion-mnist
# preset and its test read /usr/share/datasets/fashion-mnist) and Chromium (the dashboard's
# browser test).
PKGS_NEEDED = $(if $(shell command -v gcc),,gcc libc6-dev) \
              $(if $(wildcard /usr/include/x86_64-linux-gnu/cblas.h /usr/include/cblas.h /usr/include/openblas/cblas.h),,libopenblas-dev) \
              $(if $(wildcard /usr/include/jpeglib.h /usr/include/x86_64-linux-gnu/jpeglib.h),,libjpeg62-turbo-dev) \
              $(if $(wildcard /usr/include/oneapi/dnnl/dnnl.h),,libdnnl-dev) \
              $(if $(wildcard /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz),,dataset-fashion-mnist) \
              $(if $(shell command -v chromium),,chromium) \
              $(if $(shell command -v prometheus),,prometheus) \
              $(if $(shell command -v buildah),,buildah) \
              $(if $(shell command -v runc),,runc)

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
	CGO_ENABLED=0 $(GO) test -count=1 -timeout 20m -tags purego -skip '$(PUREGO_SKIP)' ./gemm ./nn ./clip/... ./methods/... ./prompt ./ot

# The pure-Go pass re-checks what differs without cgo: the fallback GEMM and
# kernels, CLIP, and each method's numerics against its fixtures (every
# method package's tests, and methods/conformance's step contract of every
# method). The seam's contracts (resume, network = simulation, privacy,
# aggregation, setting edges, which batches the loader drops) test the
# federation rather than the arithmetic and run in the main pass only
# (conformance's skipPureGo); predict = evaluation runs there
# for every method and here for pFedMMA and PromptFL (conformance's
# pureGoPredict), so the pure-Go path of a whole world run, its evaluation
# and predict stays exercised. ADAPT's domain-generalisation accuracy guard
# (a three-round training on the world at its full size) runs in the main
# pass only: with it, methods/adapt took 316 s in this pass (27 s in the main
# pass) on the 2-core machine.
PUREGO_SKIP = ^TestUnseenStyleAtLeastZeroShot$$

bench: build
	./$(BIN) bench engine
	./$(BIN) bench train

# Every native fuzz target for FUZZTIME each (crashers stay in the package's
# testdata/fuzz as seeds, which `go test` then always runs).
FUZZTIME ?= 30s
fuzz: deps
	@for d in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
		for f in $$(grep -h '^func Fuzz' $$d/*_test.go | sed 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
			echo "== $$d $$f"; \
			$(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=3s -parallel=1 $$d || exit 1; \
		done; \
	done

# Regenerates the committed gRPC/protobuf code (needs protobuf-compiler and the two Go plugins).
proto:
	@command -v protoc >/dev/null || { if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; $$SUDO apt-get install -y -qq protobuf-compiler; }
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
	PATH="$$($(GO) env GOPATH)/bin:$$PATH" protoc --proto_path=transport/pb --go_out=transport/pb --go_opt=paths=source_relative \
		--go-grpc_out=transport/pb --go-grpc_opt=paths=source_relative transport/pb/federation.proto

# Rewrites the generated blocks of README.md, docs/*.md, docs/*/README.md and methods/*/README.md (tables, summary
# sentences and the prose's figures of measured numbers, between <!-- generated:NAME --> markers; a fig-… or table-…
# marker names its own JSON evidence) from the JSON evidence under docs/;
# `go test ./internal/docsgen` (in `make test`) fails when they differ.
docs:
	$(GO) run ./tools/docsgen -root . -docs docs

clean:
	rm -rf bin runs

# MaPLe reference fixtures (testdata/maple) from the authors' code; not part of
# the build or the tests. Needs python3 with torch and numpy (Debian's
# python3-torch) and the authors' repository: MAPLE_REF holds its clip/model.py and
# trainers/maple.py (commit 69bce21), e.g. `git -C MIRROR archive HEAD clip/model.py
# trainers/maple.py | tar -x -C /tmp/maple-ref-src`. The verifier's finite
# differences take about 4 CPU-minutes.
MAPLE_REF ?= /tmp/maple-ref-src
fixtures-maple:
	/usr/bin/python3 reference/maple/make_fixture.py --ref $(MAPLE_REF) --testdata testdata
	/usr/bin/python3 -u reference/maple/verify.py --testdata testdata

# DP-FPL reference fixtures (testdata/dpfpl) from the authors' code (DPFPL_REF: a git
# mirror of linhhtran/DP-FPL, which vendors its own Dassl), checked by an independent
# float64 numpy version (reference/dpfpl/verify.py; about a CPU-minute of finite
# differences). Not part of build or test.
fixtures-dpfpl:
	$(FIXTURE_PY) reference/dpfpl/make_fixture.py
	$(FIXTURE_PY) reference/dpfpl/verify.py

# FedMVP reference fixtures (testdata/fedmvp) from the authors' code
# (mainaksingha01/FedMVP, read from its git mirror FEDMVP_REF), checked by an
# independent float64 numpy FedMVP (finite differences at sampled
# coordinates). Not part of build or test; needs Debian's python3-torch.
fixtures-fedmvp:
	FEDMVP_REF=$(FEDMVP_REF) $(FIXTURE_PY) reference/fedmvp/make_fixture.py
	$(FIXTURE_PY) -u reference/fedmvp/verify.py

FEDMVP_REF ?= /work/.mirror/mainaksingha01+FedMVP/repo

# PromptSRC reference fixtures (testdata/promptsrc) from the authors' code (PROMPTSRC_REF: a git
# mirror of muzairkhattak/PromptSRC; DASSL_REF: KaiyangZhou/Dassl.pytorch), checked by an
# independent float64 version (reference/promptsrc/verify.py: torch float64 as autograd
# engine, finite-difference spot checks; under a CPU-minute). Not part of build or test.
PROMPTSRC_REF ?= /work/.mirror/muzairkhattak+PromptSRC/repo
fixtures-promptsrc:
	PROMPTSRC_REF=$(PROMPTSRC_REF) $(FIXTURE_PY) reference/promptsrc/make_fixture.py
	$(FIXTURE_PY) -u reference/promptsrc/verify.py --testdata testdata

# ProGrad reference fixtures (testdata/prograd) from the authors' code (PROGRAD_REF: a git mirror
# of BeierZhu/Prompt-align, which ships ProGrad.public/ and its Dassl fork with the projection),
# checked by an independent float64 version (reference/prograd/verify.py; under a
# CPU-minute). Not part of build or test.
PROGRAD_REF ?= /work/.mirror/BeierZhu+Prompt-align/repo
fixtures-prograd:
	PROGRAD_REF=$(PROGRAD_REF) $(FIXTURE_PY) reference/prograd/make_fixture.py
	$(FIXTURE_PY) -u reference/prograd/verify.py --testdata testdata

# PLOT reference fixtures (testdata/plot) from the authors' code (PLOT_REF: a git mirror of
# CHENGY12/PLOT, plot-coop/), on clip-tiny (patch tokens) and clip-rn-tiny, checked by an
# independent float64 version (reference/plot/verify.py; a few CPU-minutes). Not part of
# build or test.
PLOT_REF ?= /work/.mirror/CHENGY12+PLOT/repo
fixtures-plot:
	PLOT_REF=$(PLOT_REF) $(FIXTURE_PY) reference/plot/make_fixture.py
	$(FIXTURE_PY) -u reference/plot/verify.py --testdata testdata

# Fixtures from outside the project for the methods the Go tests used to check only against
# themselves (testdata/clip_adapter, clip_lora, fedot, adapt; see reference/<method>/README.md):
# CLIP-Adapter and CLIP-LoRA from the authors' code (CLIPADAPTER_REF:
# gaopengcuhk/CLIP-Adapter over COOP_REF's clip/model.py and DASSL_REF; CLIPLORA_REF:
# MaxZanella/CLIP-LoRA), federated with PFEDMMA_REF's fed_utils.average_weights; FedOT and
# ADAPT (no public code) from independent float64 PyTorch versions written from the papers.
# Not part of build or test; needs Debian's python3-torch and the git mirrors (fetched into
# /work/.mirror); about 3 CPU-minutes.
fixtures-external:
	$(FIXTURE_PY) reference/clipadapter/make_fixture.py
	$(FIXTURE_PY) reference/fedot/make_fixture.py
	$(FIXTURE_PY) reference/cliplora/make_fixture.py
	$(FIXTURE_PY) reference/adapt/make_fixture.py

# Reference fixtures of testdata/cocoop, testdata/kgcoop and testdata/coop-positions,
# made by running the authors' PyTorch code (Debian's python3-torch, float32, CPU) and
# checked by independent float64 numpy versions (reference/<method>/verify.py, reference/positions/). Not part of build or
# test. The authors' repositories are read from git mirrors: COOP_REF
# (KaiyangZhou/CoOp), KGCOOP_REF (htyao89/KgCoOp), DASSL_REF (KaiyangZhou/Dassl.pytorch),
# PFEDMMA_REF (sajjad-ucsb/pFedMMA: FedPGP), FEDOTP_REF (HongxiaLee/FedOTP),
# PFEDMOAP_REF (ljaiverson/pFedMoAP). verify_positions_fl.py's central differences take
# about 10 CPU-minutes.
FIXTURE_PY ?= /usr/bin/python3
fixtures:
	$(FIXTURE_PY) reference/cocoop/make_fixture.py
	$(FIXTURE_PY) reference/kgcoop/make_fixture.py
	$(FIXTURE_PY) reference/positions/make_positions.py
	$(FIXTURE_PY) reference/positions/make_positions_fl.py
	$(MAKE) verify-fixtures

verify-fixtures:
	$(FIXTURE_PY) reference/cocoop/verify.py
	$(FIXTURE_PY) reference/kgcoop/verify.py
	$(FIXTURE_PY) reference/positions/verify_positions.py
	$(FIXTURE_PY) -u reference/positions/verify_positions_fl.py

# Mutation testing (issue 35; not part of `make test`). `make mutants` runs
# tools/mutants over MUTANT_PKGS: go-gremlins' default mutators and statuses,
# but every mutant of a package compiled into one test binary (mutant
# schemata) and run against only the tests that reach it, so the method
# packages take about an hour instead of gremlins' ten (18 s a mutant here).
# Reports and the kill-rate table land in docs/mutation/; a survivor that
# cannot change behaviour is triaged in docs/mutation/triage/<package>.txt.
# `make mutants-gremlins` runs go-gremlins/gremlins itself (the maintained
# tool; tools/mutants is checked against it on methods/kgcoop). Narrow either
# with `make mutants MUTANT_PKGS=./methods/kgcoop`.
GREMLINS     ?= github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0
MUTANT_PKGS  ?= $(shell $(GO) list ./methods/... ./federation/... ./secagg/... ./clip/... | grep -v -e /conformance$$ -e /methods/all$$ | sed 's|^github.com/pfedmma/pfedmma/|./|')
MUTANT_FLAGS ?= -workers 1
mutants:
	$(GO) run ./tools/mutants $(MUTANT_FLAGS) $(MUTANT_PKGS)

mutants-gremlins:
	@mkdir -p mutants
	@for p in $(MUTANT_PKGS); do \
		echo "== $$p"; \
		$(GO) run $(GREMLINS) unleash --workers 1 --timeout-coefficient 4 --output mutants/$$(echo $$p | sed 's|^\./||; s|/|_|g').json $$p || exit 1; \
	done
