# The rate limiter's everyday commands. `make help` lists them.

GO        ?= go
TOOL      := $(GO) tool -modfile=$(CURDIR)/tools/go.mod
PKGS      := ./...
BENCHTIME ?= 2s
BENCHCOUNT ?= 5
# Where make build, run, run-worker and loadgen put the programs.
BUILD_DIR ?= bin

.PHONY: FORCE docs help build run run-worker dev dev-down loadgen test test-go deps deps-dev check-generated check-deploy check-chart generate lint bench accuracy tools migrate binaries image scaling-kit release notice bench-stores

# apt-get needs root; elsewhere it goes through sudo.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

run-worker: $(BUILD_DIR)/worker ## the Restate worker on :9080 (needs restate-server and UNKEY_MYSQL_DSN)
	UNKEY_LOG_FORMAT=$${UNKEY_LOG_FORMAT:-text} $(BUILD_DIR)/worker

dev: ## the whole stack, two regions, on this machine without Docker (Ctrl-C stops it)
	scripts/dev.sh

dev-down: ## stop a stack that make dev started in another terminal
	scripts/dev.sh down

loadgen: $(BUILD_DIR)/loadgen ## drive the API: make loadgen ARGS='-url http://127.0.0.1:7070 -c 32 -n 100000' (bin/loadgen, built as the API is)
	$(BUILD_DIR)/loadgen $(ARGS)

run: $(BUILD_DIR)/api ## the API on 127.0.0.1:7070, region "local", in memory only, open (UNKEY_HTTP_ADDR=:7070 to serve every interface)
	UNKEY_REGION=$${UNKEY_REGION:-local} UNKEY_LOG_FORMAT=$${UNKEY_LOG_FORMAT:-text} \
		UNKEY_HTTP_ADDR=$${UNKEY_HTTP_ADDR:-127.0.0.1:7070} $(BUILD_DIR)/api

test: deps check-generated lint check-deploy check-chart test-go ## everything CI runs: generated code, lint, the alerting rules, the Helm chart, every test under -race
	@echo "==> make test: green"

RESTATE_SERVER := node_modules/@restatedev/restate-server-linux-x64/bin/restate-server
BUF            := node_modules/.bin/buf

# apt-get install, for each COMMAND=PACKAGE[+PACKAGE] whose command is
# missing, its packages, without those they merely recommend (chromium's
# recommend a desktop: udev, upower, mesa, printers; prometheus's a node
# exporter).
define apt_install_missing
	@missing=""; \
		for pair in $(1); do cmd=$${pair%%=*}; pkgs=$$(echo $${pair#*=} | tr + ' '); \
			command -v $$cmd >/dev/null 2>&1 || test -x /usr/sbin/$$cmd || missing="$$missing $$pkgs"; done; \
		if [ -n "$$missing" ]; then \
			echo "==> installing$$missing (apt-get)"; \
			$(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive \
				apt-get install -y -q --no-install-recommends $$missing; \
		fi
endef

deps-dev: $(RESTATE_SERVER) ## install what make dev runs where it is missing: redis-server, mariadb-server, and the pinned restate-server and buf (npm ci)
	$(call apt_install_missing,redis-server=redis-server mariadbd=mariadb-server mariadb-install-db=mariadb-server)

deps: deps-dev ## install what make test needs besides: promtool (prometheus), chromium (the dashboard's test), python3 (the Python example)
	$(call apt_install_missing,promtool=prometheus chromium=chromium+fonts-liberation python3=python3)

# The npm packages are pinned in package.json and package-lock.json: the
# restate-server binary (the tests run it directly, not through its node
# wrapper), buf's prebuilt binary, and what the tests drive.
$(RESTATE_SERVER): package.json package-lock.json
	@echo "==> installing the pinned npm packages (npm ci)"
	npm ci --no-audit --no-fund --ignore-scripts
	@test -x $@ && touch $@

# The pinned Go tools are compiled once and cached by the go command (in
# GOCACHE), on their first use: make test builds the generators only when
# tools/generated.sum says the generated code may be stale, and staticcheck.
# sqlc is built without cgo: its PostgreSQL parser is then a WebAssembly
# build instead of a C library to compile, and this project's engine is
# MySQL's.
tools: ## build the pinned Go code generators and linters (a cold cache: a few minutes, once)
	@echo "==> building the pinned Go tools (protoc-gen-go, protoc-gen-connect-go, sqlc, staticcheck; cached after the first time)"
	$(TOOL) protoc-gen-go --version
	$(TOOL) protoc-gen-connect-go --version
	CGO_ENABLED=0 $(TOOL) sqlc version
	$(TOOL) staticcheck -version

# The programs are built first, once (the tests that run them — the image,
# the commands of README.md and docs/, make dev, e2e — find them in the cache), and go test
# runs four test binaries at a time: on two cores, while some wait for the
# servers they started, others compile or run.
test-go: deps ## the Go tests, under the race detector
	@echo "==> make build: the programs, as the tests that run them build them (a cold cache compiles every dependency: minutes)"
	@$(MAKE) --no-print-directory build BUILD_DIR=$(CURDIR)/build/test-bin
	@echo "==> go test -race ./... (a cold cache compiles the tests' packages: minutes)"
	$(GO) test -race -count=1 -timeout 20m -p 4 $(PKGS)

check-deploy: deps ## check deploy/prometheus's alerting rules with promtool, and run their unit tests
	promtool check rules deploy/prometheus/*.rules.yaml
	cd deploy/prometheus && promtool test rules *.rules.test.yaml

check-chart: ## lint the chart strictly with its CI values at its minimum Kubernetes (tools/chartcheck: Helm's Go packages, no helm binary), and test chartcheck
	@echo "==> make check-chart: chartcheck's tests lint and render the chart (a first run on a machine builds Helm's packages)"
	cd tools && $(GO) test -count=1 ./chartcheck

# The images: each static binary, CA certificates, non-root, reproducible
# (timestamps from the last commit), built with go-containerregistry, no
# Docker. Load with `docker load -i build/images/api.tar`.
IMAGE_TAG ?= dev
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

# What `api --version` and `worker --version` print (internal/version): the
# chart's appVersion, the commit (-dirty with uncommitted changes to tracked
# files) and its time, SOURCE_DATE_EPOCH, so that a build stays reproducible.
CHART_VERSION := $(shell sed -n 's/^appVersion: *"*\([^"]*\)"*$$/\1/p' deploy/helm/ratelimit/Chart.yaml)
VERSION ?= $(CHART_VERSION)
# Read once (?= would run git at each use).
ifndef COMMIT
COMMIT := $(shell c=$$(git rev-parse --short HEAD 2>/dev/null) && { git diff --quiet HEAD 2>/dev/null || c=$$c-dirty; echo $$c; } || echo unknown)
endif
VERSION_PKG := github.com/unkeyed/ratelimit/internal/version
VERSION_LDFLAGS = -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).commit=$(COMMIT) -X $(VERSION_PKG).built=$(SOURCE_DATE_EPOCH)
BIN_DIR ?= build/bin
BINARIES ?= api worker

# Every binary this project builds to run — make build, run, run-worker,
# dev, binaries and image, and the tests that start the programs — is built
# the one way below: static (no cgo), without the builder's paths, with its
# version. One set of flags is one compile of the dependencies; on a cold
# cache each other set compiles all of them again (minutes on two cores).
GOBUILD = CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w -buildid= $(VERSION_LDFLAGS)'

build: $(BUILD_DIR)/api $(BUILD_DIR)/worker ## bin/api and bin/worker for this machine, static, with their version (BUILD_DIR=… to put them elsewhere)

# A program is built again only when a file it may be built from is newer
# than it (the non-test files of the module's directories the programs
# import, go.mod, go.sum) or what it would be built with changed: the
# version it is stamped with (a commit, a tree made dirty) or the Go
# toolchain. make run starts what make build built without linking it
# again, which go build would (a binary without a build id is never up to
# date to it). A file deleted is not noticed: make build -B builds anew.
# Each is one go build of what it imports and no more: make run compiles
# neither the worker's dependencies nor the tools'.
PROGRAM_DIRS    := cmd connect db internal services workflows
PROGRAM_SOURCES := go.mod go.sum $(shell find $(PROGRAM_DIRS) -type f ! -name '*_test.go' ! -path '*/testdata/*' 2>/dev/null)

$(BUILD_DIR)/api $(BUILD_DIR)/worker $(BUILD_DIR)/loadgen: $(BUILD_DIR)/%: $(PROGRAM_SOURCES) $(BUILD_DIR)/.version
	$(GOBUILD) -o $@ ./cmd/$*

# What the programs are built with, rewritten only when it changes: their
# version's flags and the toolchain.
BUILT_WITH = $(VERSION_LDFLAGS) $(shell $(GO) env GOVERSION GOOS GOARCH | tr '\n' ' ')
$(BUILD_DIR)/.version: FORCE
	@mkdir -p $(@D)
	@echo '$(BUILT_WITH)' | cmp -s - $@ || echo '$(BUILT_WITH)' > $@

FORCE:

binaries: ## build/bin/api and worker (or BIN_DIR=…): the images' static linux/amd64 binaries, with their version
	mkdir -p $(BIN_DIR)
	for b in $(BINARIES); do \
		GOOS=linux GOARCH=amd64 $(GOBUILD) -o $(BIN_DIR)/$$b ./cmd/$$b || exit 1; \
	done

IMAGE_DIR ?= build/images

image: binaries ## build/images/api.tar and worker.tar (or IMAGE_DIR=…): OCI images of the static binaries, without Docker (the API's also as /bin/ratelimit, for Envoy Gateway)
	mkdir -p $(IMAGE_DIR)
	for b in api worker; do \
		link=; [ $$b = api ] && link=bin/ratelimit; \
		(cd tools && SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./imagebuild -binary $(abspath $(BIN_DIR))/$$b -name $$b \
			-link "$$link" -tag ratelimit-$$b:$(IMAGE_TAG) -out $(abspath $(IMAGE_DIR))/$$b.tar) || exit 1; \
	done

# A release is the chart's appVersion (the one place a version is set):
# make release refuses another VERSION, a version CHANGELOG.md has no
# section for or that is tagged already, changes still listed under
# [Unreleased], and a tree with uncommitted changes (RELEASE_DIRTY=1, for
# a test, builds anyway but for the first two). Its directory holds what is published: the binaries, the
# images tagged with the version, LICENSE, NOTICE, CHANGELOG.md and
# SHA256SUMS over them (sha256sum -c SHA256SUMS checks a download).
RELEASE_DIR ?= build/release/$(VERSION)

release: ## build/release/VERSION/: the linux/amd64 binaries and images of the chart's appVersion, LICENSE, NOTICE, CHANGELOG.md and their SHA256SUMS
	@[ "$(VERSION)" = "$(CHART_VERSION)" ] || { echo "make release: VERSION=$(VERSION), but deploy/helm/ratelimit/Chart.yaml's appVersion is $(CHART_VERSION): set the version there, the one place"; exit 1; }
	@grep -q '^## \[$(VERSION)\] - [0-9]' CHANGELOG.md || { echo "make release: CHANGELOG.md has no section '## [$(VERSION)] - YYYY-MM-DD': write what changed first"; exit 1; }
	@[ -n "$(RELEASE_DIRTY)" ] || { git rev-parse --git-dir >/dev/null 2>&1 && [ -z "$$(git status --porcelain)" ]; } || { echo "make release: not a git checkout, or it has uncommitted changes (RELEASE_DIRTY=1 builds anyway, for a test)"; exit 1; }
	@[ -n "$(RELEASE_DIRTY)" ] || ! git rev-parse -q --verify "refs/tags/v$(VERSION)" >/dev/null || { echo "make release: v$(VERSION) is tagged already: set the next version in Chart.yaml's appVersion"; exit 1; }
	@[ -n "$(RELEASE_DIRTY)" ] || [ -z "$$(sed -n '/^## \[Unreleased\]/,/^## \[[0-9]/p' CHANGELOG.md | grep '^- ')" ] || { echo "make release: CHANGELOG.md's [Unreleased] section lists changes: move them under [$(VERSION)] first"; exit 1; }
	rm -rf $(RELEASE_DIR) && mkdir -p $(RELEASE_DIR)
	$(MAKE) --no-print-directory image BIN_DIR=$(RELEASE_DIR)/bin IMAGE_DIR=$(RELEASE_DIR)/images IMAGE_TAG=$(VERSION)
	cp LICENSE NOTICE CHANGELOG.md $(RELEASE_DIR)/
	cd $(RELEASE_DIR) && sha256sum bin/* images/* LICENSE NOTICE CHANGELOG.md > SHA256SUMS
	@echo "==> $(RELEASE_DIR): tag it with git tag v$(VERSION)"

notice: ## write NOTICE: the NOTICE files of the modules the programs link (scripts/notice.sh)
	scripts/notice.sh > NOTICE

# The generated code's digest (scripts/generated-sum.sh): make generate
# records it; make check-generated regenerates only when the tree's differs.
GENERATED_SUM := tools/generated.sum
GENERATED     := connect db examples/typescript/gen $(GENERATED_SUM)

generate: $(RESTATE_SERVER) ## regenerate the Connect/protobuf and sqlc code and the TypeScript example's, and record their digest in tools/generated.sum
	@echo "==> make generate: buf (connect/, examples/typescript/gen/) and sqlc (db/); a first run on a machine builds the Go generators (minutes)"
	cd connect && ../$(BUF) generate
	CGO_ENABLED=0 $(TOOL) sqlc generate
	cd examples/typescript && ../../$(BUF) generate ../../connect --template buf.gen.yaml --path ../../connect/ratelimit/v1/ratelimit.proto
	scripts/generated-sum.sh > $(GENERATED_SUM)

docs: ## rewrite the generated parts of docs/: every setting (docs/settings.md, from the programs' configuration) and the API reference (docs/api-reference.md, from the proto files)
	UPDATE_DOCS=1 $(GO) test -count=1 -p 1 -run 'TestSettingsReference|TestAPIReference' ./cmd/api ./cmd/worker ./docs

check-generated: $(RESTATE_SERVER) ## fail when regenerating would change a committed file (regenerates only when tools/generated.sum does not match the tree)
	@if [ "$$(scripts/generated-sum.sh)" = "$$(cat $(GENERATED_SUM) 2>/dev/null)" ]; then \
		echo "==> generated code: sources, generators and output are as $(GENERATED_SUM) recorded them: not regenerated"; \
	else \
		echo "==> generated code: the tree is not what $(GENERATED_SUM) recorded: regenerating"; \
		$(MAKE) --no-print-directory generate || exit 1; \
	fi
	@if [ -n "$$(git status --porcelain -- $(GENERATED))" ]; then \
		echo "generated code is stale; run 'make generate' and commit:"; \
		git status --porcelain -- $(GENERATED); git --no-pager diff --stat -- $(GENERATED); exit 1; fi

# go vet and staticcheck type-check against the race detector's build of
# the packages, the one test-go compiles: with the default build they would
# compile every dependency a second time (about two minutes on a cold cache
# of two cores). They so check the files of the race build (//go:build race).
lint: $(RESTATE_SERVER) ## gofmt, go vet, staticcheck and buf lint
	@echo "==> make lint: gofmt, go vet, staticcheck (a first run on a machine builds it), buf lint"
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
		if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet -race $(PKGS)
	@$(TOOL) staticcheck -version   # builds it (its own build without -race)
	GOFLAGS="$$GOFLAGS -race" $$($(TOOL) -n staticcheck) $(PKGS)
	cd connect && ../$(BUF) lint

bench: ## the limiter's in-process benchmarks beside golang.org/x/time/rate (seconds), for docs/BENCHMARKS.md
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count $(BENCHCOUNT) ./services/ratelimit/

bench-stores: ## the stores' benchmarks: Redis and MariaDB the benchmarks start (minutes)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count $(BENCHCOUNT) ./services/ratelimit/redisstore/ ./services/ratelimit/mysqlstore/

scaling-kit: ## build/scaling-kit.tgz: e2e's test binary, api and floorserver, static, and a script that runs BenchmarkScaling on a many-core machine without Go
	rm -rf build/scaling-kit && mkdir -p build/scaling-kit
	$(GOBUILD) -o build/scaling-kit/ ./cmd/api ./e2e/floorserver
	CGO_ENABLED=0 $(GO) test -c -trimpath -ldflags='-s -w' -o build/scaling-kit/e2e.test ./e2e
	cp scripts/scaling.sh build/scaling-kit/
	tar -czf build/scaling-kit.tgz -C build/scaling-kit .

migrate: ## apply the MySQL schema to UNKEY_MYSQL_DSN (idempotent)
	@test -n "$$UNKEY_MYSQL_DSN" || { echo "set UNKEY_MYSQL_DSN, e.g. root@tcp(127.0.0.1:3306)/ratelimit"; exit 1; }
	$(MAKE) --no-print-directory $(BUILD_DIR)/api
	$(BUILD_DIR)/api migrate

accuracy: ## rewrite the accuracy tables of docs/ACCURACY.md (single process, region, cross-region, propagation, the models, token budgets, under change)
	ACCURACY_REPORT=$(CURDIR)/docs/ACCURACY.md $(GO) test -count=1 -run 'TestWrite.*Report' -timeout 30m ./services/ratelimit/

