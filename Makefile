# meshrelay — build, test, generate, verify.
#
# `make test` is what CI runs: it installs what the tests need (redis-server,
# etcd, protoc from Debian; kube-apiserver built from its Go module into bin/),
# then runs unit and integration tests with -race.

SHELL       := /bin/bash
GO          ?= go
BIN         := $(CURDIR)/bin
export GOSUMDB   := off
export PATH      := $(BIN):$(PATH)
TOOLS_MOD   := tools/codegen/go.mod
PROTOS      := $(wildcard proto/*/v1/*.proto)
# FUZZTIME is a count of executions, not a duration: with a duration, Go
# before 1.27 can fail a fuzz target at the deadline with "context deadline
# exceeded" and no crasher (golang/go#75804). 50000x takes 1–20 s per target.
FUZZTIME    ?= 50000x
TESTFLAGS   ?=
BENCHTIME   ?= 1x

.PHONY: all build test test-unit test-fuzz testdeps generate verify lint bench bench-fleet demo ui clean publish-plugins

all: build

## build: the meshrelay binary and the four plugins into bin/.
build:
	$(GO) build -o $(BIN)/ ./cmd/...

## ui: rebuild the web UI (core/ui/web, Vite + TypeScript) into core/ui/dist, which is committed and embedded.
ui:
	cd core/ui/web && npm ci --no-audit --no-fund && npm run build

## testdeps: install redis-server, redis-cli, etcd, protoc and chromium; build kube-apiserver and helm.
testdeps:
	bash hack/testdeps.sh
	bash hack/helm.sh

## test: everything CI needs — dependencies, unit and integration tests with -race, bounded fuzzing.
test: testdeps
	CI=$${CI:-true} $(GO) test -race -timeout 30m $(TESTFLAGS) ./...
	$(MAKE) test-fuzz

## test-unit: unit tests only (integration tests skip when their servers are missing).
test-unit:
	$(GO) test -race ./...

## test-fuzz: run every fuzz target for FUZZTIME executions each.
test-fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/^func //'); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) $$pkg; \
	  done; \
	done

$(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc: $(TOOLS_MOD)
	GOBIN=$(BIN) $(GO) install -modfile=$(TOOLS_MOD) google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc

## generate: protobuf Go code, deepcopy functions and CRDs.
generate: $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc
	@command -v protoc >/dev/null || bash hack/testdeps.sh
	protoc -I proto --plugin=protoc-gen-go=$(BIN)/protoc-gen-go --plugin=protoc-gen-go-grpc=$(BIN)/protoc-gen-go-grpc \
	  --go_out=paths=source_relative:proto --go-grpc_out=paths=source_relative:proto $(PROTOS)
	$(GO) tool -modfile=$(TOOLS_MOD) controller-gen object paths=./api/...
	$(GO) tool -modfile=$(TOOLS_MOD) controller-gen crd paths=./api/... output:crd:artifacts:config=deploy/crds
	@# Gateways exist only in snapshots; the server never writes them as resources.
	rm -f deploy/crds/discovery.meshrelay.io_gateways.yaml

## verify: fail when generated code, go.mod/go.sum or formatting are out of date, or go vet complains.
verify: generate
	$(GO) mod tidy
	cd tools/codegen && $(GO) mod tidy
	@if [ -n "$$(git status --porcelain -- proto api deploy/crds go.mod go.sum tools)" ]; then \
	  echo "verify: generated code or go.mod/go.sum out of date:"; git status --porcelain -- proto api deploy/crds go.mod go.sum tools; git diff --stat; exit 1; fi
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "verify: gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## lint: gofmt and go vet.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## bench: Go benchmarks of the hot paths.
bench:
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) ./...

## bench-fleet: meshrelay bench against a simulated fleet (AGENTS, SERVICES, DURATION; more flags in BENCH_ARGS).
bench-fleet: build
	$(BIN)/meshrelay bench --plugins $(BIN) --agents $${AGENTS:-100} --services $${SERVICES:-50} --duration $${DURATION:-30s} $(BENCH_ARGS)

## demo: the one-command demo on embedded defaults (builds bin/ first).
demo: build
	$(BIN)/meshrelay demo

## publish-plugins: push the in-tree plugins, built for PLUGIN_PLATFORMS, to PLUGIN_REPO (oci://REGISTRY/PREFIX) as
## PREFIX/meshrelay-plugin-NAME, tagged with each plugin's version; PLUGIN_SIGN_KEY signs them, PLUGIN_PUSH_FLAGS adds flags (--plain-http).
PLUGIN_REPO      ?=
PLUGIN_PLATFORMS ?= linux/amd64 linux/arm64 darwin/arm64
PLUGIN_SIGN_KEY  ?=
PLUGIN_PUSH_FLAGS ?=
INTREE_PLUGINS   := istio envoy cilium gatewayapi
publish-plugins:
	@test -n "$(PLUGIN_REPO)" || { echo "publish-plugins: set PLUGIN_REPO=oci://REGISTRY/PREFIX"; exit 1; }
	$(GO) build -o $(BIN)/ ./cmd/meshrelay
	@set -e; for n in $(INTREE_PLUGINS); do \
	  for p in $(PLUGIN_PLATFORMS); do os=$${p%%/*}; arch=$${p#*/}; \
	    echo "build dist/plugins/meshrelay-plugin-$$n-$$os-$$arch"; \
	    CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags=-buildid= -o dist/plugins/meshrelay-plugin-$$n-$$os-$$arch ./cmd/meshrelay-plugin-$$n; \
	  done; \
	  $(BIN)/meshrelay plugin push dist/plugins/meshrelay-plugin-$$n-* $(PLUGIN_REPO)/meshrelay-plugin-$$n \
	    $(if $(PLUGIN_SIGN_KEY),--sign-key $(PLUGIN_SIGN_KEY)) $(PLUGIN_PUSH_FLAGS); \
	done

clean:
	rm -rf $(BIN)
