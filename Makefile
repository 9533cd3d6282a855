# The rate limiter's everyday commands. `make help` lists them.

GO        ?= go
TOOL      := $(GO) tool -modfile=$(CURDIR)/tools/go.mod
PKGS      := ./...
BENCHTIME ?= 2s
BENCHCOUNT ?= 5

.PHONY: help run run-worker dev dev-down loadgen test test-go deps deps-dev check-generated check-deploy check-chart generate lint bench accuracy tools migrate binaries image

# apt-get needs root; elsewhere it goes through sudo.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

run-worker: ## the Restate worker on :9080 (needs restate-server and UNKEY_MYSQL_DSN)
	UNKEY_LOG_FORMAT=$${UNKEY_LOG_FORMAT:-text} $(GO) run ./cmd/worker

dev: ## the whole stack, two regions, on this machine without Docker (Ctrl-C stops it)
	scripts/dev.sh

dev-down: ## stop a stack that make dev started in another terminal
	scripts/dev.sh down

loadgen: ## drive the API: make loadgen ARGS='-url http://127.0.0.1:7070 -c 32 -n 100000'
	$(GO) run ./cmd/loadgen $(ARGS)

run: ## the API on 127.0.0.1:7070, region "local", in memory only, open (UNKEY_HTTP_ADDR=:7070 to serve every interface)
	UNKEY_REGION=$${UNKEY_REGION:-local} UNKEY_LOG_FORMAT=$${UNKEY_LOG_FORMAT:-text} \
		UNKEY_HTTP_ADDR=$${UNKEY_HTTP_ADDR:-127.0.0.1:7070} $(GO) run ./cmd/api

test: deps tools check-generated lint check-deploy check-chart test-go ## everything CI runs: generated code, lint, the alerting rules, the Helm chart, every test under -race
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
# GOCACHE); on a cold cache that is the slow part of a first make test.
# sqlc is built without cgo: its PostgreSQL parser is then a WebAssembly
# build instead of a C library to compile, and this project's engine is
# MySQL's.
tools: ## build the pinned Go code generators and linters (a cold cache: a few minutes, once)
	@echo "==> building the pinned Go tools (protoc-gen-go, protoc-gen-connect-go, sqlc, staticcheck; cached after the first time)"
	$(TOOL) protoc-gen-go --version
	$(TOOL) protoc-gen-connect-go --version
	CGO_ENABLED=0 $(TOOL) sqlc version
	$(TOOL) staticcheck -version

test-go: deps ## the Go tests, under the race detector
	@echo "==> go test -race ./... (a cold build cache compiles every package first: minutes)"
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

check-deploy: deps ## check deploy/prometheus's alerting rules with promtool, and run their unit tests
	promtool check rules deploy/prometheus/*.rules.yaml
	cd deploy/prometheus && promtool test rules *.rules.test.yaml

check-chart: ## lint the chart strictly with its CI values at its minimum Kubernetes (tools/chartcheck: Helm's Go packages, no helm binary), and test chartcheck
	cd tools && $(GO) run ./chartcheck lint ../deploy/helm/ratelimit ../deploy/helm/ratelimit/ci/minimal-values.yaml ../deploy/helm/ratelimit/ci/full-values.yaml
	cd tools && $(GO) test -count=1 ./chartcheck

# The images: each static binary, CA certificates, non-root, reproducible
# (timestamps from the last commit), built with go-containerregistry, no
# Docker. Load with `docker load -i build/images/api.tar`.
IMAGE_TAG ?= dev
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

# What `api --version` and `worker --version` print (internal/version): the
# chart's appVersion, the commit (-dirty with uncommitted changes to tracked
# files) and its time, SOURCE_DATE_EPOCH, so that a build stays reproducible.
VERSION ?= $(shell sed -n 's/^appVersion: *"*\([^"]*\)"*$$/\1/p' deploy/helm/ratelimit/Chart.yaml)
COMMIT ?= $(shell c=$$(git rev-parse --short HEAD 2>/dev/null) && { git diff --quiet HEAD 2>/dev/null || c=$$c-dirty; echo $$c; } || echo unknown)
VERSION_PKG := github.com/unkeyed/ratelimit/internal/version
VERSION_LDFLAGS = -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).commit=$(COMMIT) -X $(VERSION_PKG).built=$(SOURCE_DATE_EPOCH)
BIN_DIR ?= build/bin
BINARIES ?= api worker

binaries: ## build/bin/api and worker (or BIN_DIR=…): the images' static linux/amd64 binaries, with their version
	mkdir -p $(BIN_DIR)
	for b in $(BINARIES); do \
		CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags='-s -w -buildid= $(VERSION_LDFLAGS)' \
			-o $(BIN_DIR)/$$b ./cmd/$$b || exit 1; \
	done

image: binaries ## build/images/api.tar and worker.tar: OCI images of the static binaries, without Docker
	mkdir -p build/images
	for b in api worker; do \
		(cd tools && SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./imagebuild -binary $(abspath $(BIN_DIR))/$$b -name $$b \
			-tag ratelimit-$$b:$(IMAGE_TAG) -out ../build/images/$$b.tar) || exit 1; \
	done

generate: $(RESTATE_SERVER) ## regenerate the Connect/protobuf and sqlc code, and the TypeScript example's
	@echo "==> make generate: buf (connect/, examples/typescript/gen/) and sqlc (db/)"
	cd connect && ../$(BUF) generate
	CGO_ENABLED=0 $(TOOL) sqlc generate
	cd examples/typescript && ../../$(BUF) generate ../../connect --template buf.gen.yaml --path ../../connect/ratelimit/v1/ratelimit.proto

check-generated: generate ## fail when regenerating changes a committed file
	@if [ -n "$$(git status --porcelain -- connect db examples/typescript/gen)" ]; then \
		echo "generated code is stale; run 'make generate' and commit:"; \
		git status --porcelain -- connect db examples/typescript/gen; git --no-pager diff --stat -- connect db examples/typescript/gen; exit 1; fi

lint: $(RESTATE_SERVER) ## gofmt, go vet, staticcheck and buf lint
	@echo "==> make lint: gofmt, go vet, staticcheck, buf lint"
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
		if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	$(TOOL) staticcheck $(PKGS)
	cd connect && ../$(BUF) lint

bench: ## the limiter's in-process benchmarks beside golang.org/x/time/rate (seconds), for docs/BENCHMARKS.md
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count $(BENCHCOUNT) ./services/ratelimit/

bench-stores: ## the stores' benchmarks: Redis and MariaDB the benchmarks start (minutes)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count $(BENCHCOUNT) ./services/ratelimit/redisstore/ ./services/ratelimit/mysqlstore/

migrate: ## apply the MySQL schema to UNKEY_MYSQL_DSN (idempotent)
	@test -n "$$UNKEY_MYSQL_DSN" || { echo "set UNKEY_MYSQL_DSN, e.g. root@tcp(127.0.0.1:3306)/ratelimit"; exit 1; }
	$(GO) run ./cmd/api migrate

accuracy: ## rewrite the accuracy tables of docs/ACCURACY.md (single process, region, cross-region, propagation, token budgets)
	ACCURACY_REPORT=$(CURDIR)/docs/ACCURACY.md $(GO) test -count=1 -run 'TestWrite.*Report' -timeout 30m ./services/ratelimit/

