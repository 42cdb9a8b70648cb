# BAP runtime — the two commands a new user needs are `make run` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
BIN := bin/bap

.PHONY: run build deps generate check-generated lint-spec vet test test-go component-fixtures test-sdks test-mcp-conformance bench fuzz clean

## run: install what is missing, build, and serve (local profile, embedded PostgreSQL)
run: deps build
	$(BIN) serve

## build: build the one binary
build:
	$(GO) build -o $(BIN) ./server/cmd/bap

## deps: install missing Debian packages (postgresql, chromium, firefox-esr, …)
deps:
	scripts/install-deps.sh

## generate: rebuild every generated file from spec/ (code, and docs/api.html with the pinned Redocly CLI), the WebDriver BiDi client from codegen/bidigen/webdriver-bidi/*.cddl, docs/erd.md from migrations/ and the console's build from console/
generate:
	$(GO) run ./codegen/cmd/bapgen
	$(GO) tool oapi-codegen -config codegen/oapi-server.yaml server/internal/apigen/openapi.gen.json
	$(GO) tool oapi-codegen -config codegen/oapi-sdk-go.yaml server/internal/apigen/openapi.gen.json
	scripts/build-api-docs.sh
	scripts/build-console.sh

## check-generated: fail when `make generate` would change the tree
check-generated:
	scripts/check-generated.sh

## lint-spec: lint spec/openapi.yaml and spec/asyncapi.yaml with pinned tools
lint-spec:
	scripts/lint-spec.sh

## vet: go vet (with and without the mcpconformance tag) and gofmt
vet:
	$(GO) vet ./...
	$(GO) vet -tags mcpconformance ./server/internal/mcpserver/
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './tools/*')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

## help: list the make targets and what they do (from these `##` comments)
.PHONY: help
help:
	@awk '/^## [a-z-]+: /{t=$$2; sub(/:$$/, "", t); d=$$0; sub(/^## [a-z-]+: /, "", d); printf "  %-22s %s\n", t, d}' $(MAKEFILE_LIST)

## lint: golangci-lint (pinned by the tool directive in tools/golangci-lint/go.mod) with .golangci.yml
.PHONY: lint
lint:
	$$($(GO) -C tools/golangci-lint tool -n golangci-lint) run ./...

## test: every test (installs what is missing; starts its own PostgreSQL)
test: deps lint-spec check-generated vet lint cover-check test-go test-race test-sdks test-mcp-conformance conformance

# The mcpconformance tag compiles the MCP conformance fixtures into internal/mcpserver, for their
# tests; `make build` leaves them out of the production binary.
test-go: component-fixtures console-tools
	$(GO) test -tags mcpconformance -count=1 -timeout 30m ./...

# Race builds are about 2-10x slower: -race runs on the packages where that stays within CI's
# budget (measured in docs/test-strategy.md); the browser, e2e and cmd packages, whose cost is
# Chromium and child processes rather than Go, run without it in test-go.
RACE_PKGS ?= ./server/internal/task/ ./server/internal/policy/ ./server/internal/ids/ \
  ./server/internal/idempotency/ ./server/internal/redact/ ./server/internal/problem/ \
  ./server/internal/admission/ ./server/internal/ratelimit/ ./server/internal/events/ \
  ./server/internal/page/ ./server/internal/mcpcatalog/ ./server/internal/tracing/ \
  ./server/internal/serverkey/ ./server/internal/egress/ ./server/internal/schemaextract/ \
  ./server/internal/historychain/ ./server/internal/evidencebundle/ \
  ./server/internal/store/ ./server/internal/orchestrator/ ./server/internal/api/ \
  ./server/internal/app/ ./server/internal/mcpserver/ ./server/internal/auth/ \
  ./server/internal/warcrecord/
## test-race: go test -race on the pure and mid-size Go packages (RACE_PKGS)
.PHONY: test-race
test-race:
	$(GO) test -tags mcpconformance -race -count=1 -timeout 30m $(RACE_PKGS)

## cover: statement coverage of the Go suite per package and in total (cross-package), HTML report in coverage/
.PHONY: cover cover-check
cover: component-fixtures console-tools
	GO=$(GO) scripts/cover.sh

## cover-check: the cheap packages' coverage against their floors in scripts/coverage-floors.txt
cover-check:
	GO=$(GO) scripts/cover-check.sh

## console-tools: install the console's pinned npm tools (esbuild, TypeScript, playwright-core, axe-core; npm ci once; offline after)
.PHONY: console-tools
console-tools:
	scripts/install-console-tools.sh

## console-screenshots: retake docs/console/*.png (the pictures of docs/console.md) from the console's browser tests
.PHONY: console-screenshots
console-screenshots:
	scripts/console-screenshots.sh

## component-fixtures: install the pinned UI component libraries of the e2e fixture pages (npm ci once; offline after)
component-fixtures:
	scripts/install-component-fixtures.sh

## test-sdks: the Python, TypeScript and Rust SDK tests (Go's run in test-go)
test-sdks:
	scripts/test-sdks.sh

## test-mcp-conformance: the official MCP conformance suite against a real `bap serve` (/mcp-conformance and /mcp)
test-mcp-conformance:
	scripts/test-mcp-conformance.sh

## conformance: the conformance/ fixtures through the Go, TS, Python and Rust SDKs (and MCP) against one `bap serve`; results must be identical
.PHONY: conformance
conformance:
	scripts/conformance.sh

## fuzz: every Go fuzz target for FUZZTIME each (default 30s), executions and findings per target (their seed corpora run in `make test`)
FUZZTIME ?= 30s
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) scripts/fuzz.sh

## bench: benchmarks with a baseline in the same run (see docs/benchmarks.md)
bench: deps build component-fixtures
	scripts/bench.sh

clean:
	rm -rf bin
