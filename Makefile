# Switchyard: one Go workspace (go.work), five modules. From the repository
# root, packages are named per module (./shared/...): a plain ./... does not
# cross module boundaries in a workspace.

GO      ?= go
BIN     ?= bin
CONFIG  ?= configs/gateway.yaml
# Peer gateways `make bench` measures beside Switchyard (tools/bench: portkey).
PEERS   ?=
# Requests per phase of the bench's wasted-calls mode (0: off).
WASTED  ?= 1050

MODULES := shared services/proxy services/prober services/admin tools
PKGS    := $(addprefix ./,$(addsuffix /...,$(MODULES)))
# Every command of every module (the main packages under cmd/).
CMDS    := ./services/proxy/cmd/... ./services/prober/cmd/... ./services/admin/cmd/... ./tools/cmd/...

# The build's version and commit, stamped into every binary (their -version,
# swctl version); without git, Go's own build information is used.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := $(if $(VERSION),-X switchyard.dev/shared/buildinfo.version=$(VERSION)) $(if $(COMMIT),-X switchyard.dev/shared/buildinfo.commit=$(COMMIT))
GOBUILD := $(GO) build -ldflags '$(LDFLAGS)'

# Keys the demo config (configs/demo.yaml) reads; the bundled fake providers
# accept any key.
DEMO_ENV := DEMO_FAKE_OPENAI_KEY_1=demo-openai-key-1 \
	DEMO_FAKE_OPENAI_KEY_2=demo-openai-key-2 \
	DEMO_FAKE_ANTHROPIC_KEY_1=demo-anthropic-key-1 \
	DEMO_FAKE_ANTHROPIC_KEY_2=demo-anthropic-key-2 \
	DEMO_ADMIN_TOKEN=demo-admin-token \
	DEMO_CREDENTIALS_KEY=000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f

.DEFAULT_GOAL := help
.PHONY: help build run demo test lint bench tidy images fleet-up fleet-down

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

build: ## build every module's binaries into ./bin
	@mkdir -p $(BIN)
	$(GOBUILD) -o $(BIN)/ $(CMDS)

images: ## build the container images (proxy, prober, admin, switchyard, swctl) from static host binaries: deploy/docker
	./deploy/docker/images.sh $(or $(TAG),dev)

COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)

fleet-up: images ## start the compose fleet (3-node NATS cluster, 2 proxies, prober, admin, fake provider): deploy/compose
	cd deploy/compose && $(COMPOSE) -p switchyard up -d

fleet-down: ## stop the compose fleet and remove its volumes
	cd deploy/compose && $(COMPOSE) -p switchyard down -v

run: ## run the gateway (proxy, prober, admin, embedded NATS) with CONFIG
	@mkdir -p $(BIN)
	$(GOBUILD) -o $(BIN)/switchyard ./tools/cmd/switchyard
	$(BIN)/switchyard -config $(CONFIG)

# The demo's NATS store (configs/demo.yaml nats.embedded.store_dir): removed
# at each start unless KEEP=1, so a demo starts with no holds, ladders or
# routing versions of an earlier run.
DEMO_STORE := data/demo-nats
KEEP    ?=

demo: ## run the gateway in front of two bundled fake providers, from a fresh state (KEEP=1 keeps the last run's)
	@mkdir -p $(BIN)
	$(GOBUILD) -o $(BIN)/switchyard ./tools/cmd/switchyard
	@if [ -z "$(KEEP)" ]; then rm -rf $(DEMO_STORE); fi
	$(DEMO_ENV) $(BIN)/switchyard -config configs/demo.yaml -fakes

# go test -json through tools/cmd/testsummary: per-package ok/FAIL lines and
# failing tests' output as go test prints them, then every skipped test with
# its reason; non-zero exit on any failure. Under CI=true a test that lacks
# an external tool (the nats CLI, chromium) fails instead of skipping.
test: ## every module's tests with the race detector; lists skipped tests at the end (CI=true: a missing tool fails, not skips)
	@mkdir -p $(BIN)
	@$(GO) build -o $(BIN)/testsummary ./tools/cmd/testsummary
	$(BIN)/testsummary -- $(GO) test -race -count=1 -json $(PKGS)

lint: ## gofmt check and go vet on every module
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

bench: ## run the load benchmark (tools/bench); PEERS=portkey adds peer gateways, WASTED=N sets the wasted-calls mode's requests (0: off)
	$(GO) run ./tools/bench $(if $(PEERS),-peers $(PEERS)) -wasted $(WASTED)

tidy: ## go mod tidy in every module, then sync the workspace
	@for m in $(MODULES); do echo "tidy $$m"; (cd $$m && $(GO) mod tidy) || exit 1; done
	$(GO) work sync
