# make check is the one gate: the same command runs locally and in CI (.ci/run).

GO ?= go
# gofmt from the same toolchain as $(GO), so formatting never depends on
# which gofmt happens to be first on PATH.
GOFMT ?= $(shell $(GO) env GOROOT)/bin/gofmt

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# grpcnotrace leaves out gRPC's request tracing (golang.org/x/net/trace),
# which floodgate never turns on. It imports text/template, and a binary
# that links text/template keeps every exported method of every type, in
# case a template calls it by name: floodgate is 18 MB without it, 33 MB
# with it. A plain go build works the same, only larger.
TAGS ?= grpcnotrace

.PHONY: check deps quick fmt-check vet staticcheck race-check allocs-check test build bench image

# check: what the tests need, then gofmt, go vet, staticcheck, the
# race-enabled tests and the allocation pins
check: deps fmt-check vet staticcheck race-check allocs-check

# deps: install what the tests need and this machine lacks (Debian or
# Ubuntu, as root or through sudo), and start a Docker daemon; DEPS=0
# skips it. scripts/deps says what each piece is for.
deps:
	@scripts/deps

# The tests wait far more than they compute (upstreams, timeouts, Redis,
# processes): four packages at once, and four tests at once in each.
TESTFLAGS ?= -p 4 -parallel 4

# quick: the edit loop: gofmt, vet and the tests without -race and with
# -short, which leaves out the long end-to-end runs (the demo, the
# README's walk-through, the browser, Prometheus, the image, Redis Cluster
# and Sentinel); no staticcheck. It keeps go test's cache, so that it runs
# again only the packages an edit touched.
quick: fmt-check
	$(GO) vet ./...
	$(GO) test -short $(TESTFLAGS) ./...

fmt-check:
	@unformatted="$$($(GOFMT) -l .)"; \
	if [ -n "$$unformatted" ]; then \
		echo "gofmt: these files are not formatted (run gofmt -w on them):"; \
		echo "$$unformatted"; \
		exit 1; \
	fi

vet:
	$(GO) vet ./...

staticcheck:
	$(GO) tool staticcheck ./...

# PACED are the tests that judge floodgate against the clock while a load
# of their own runs in the same process: the demo's script, the README's
# walk-through, protection learning a mock API's capacity from its
# latency, the breaker's slow calls. Beside every other package's tests
# on two cores they measure the machine's delays as much as floodgate, so
# race-check runs them after the rest, one at a time. They live in
# PACED_PKGS; each name is anchored, so a renamed test runs with the rest.
PACED_PKGS := ./gateway ./internal/demo ./cmd/floodgate
PACED := ^(TestDemoScriptAndHold|TestDemoRedis|TestReadmeWalkthrough|TestProtectFleetKillAndJoin|TestProtectLearnsTheCapacity|TestProtectFleetSplit|TestProtectPriority|TestProtectPin|TestProtectWarmsUpWhenTheBreakerCloses|TestBreakerCycle|TestBreakerSlowCalls|TestBreakerIgnoresRejectedAndCancelled|TestBreakerTrialStreamsPastTimeout|TestBreakerForcedForAWhile)$$

# -race needs cgo, and cgo needs a C compiler; without one the toolchain
# turns cgo off and go test -race fails with a less helpful message.
race-check:
	@if [ "$$($(GO) env CGO_ENABLED)" != 1 ]; then \
		echo "go test -race needs cgo: install a C compiler (apt-get install gcc libc6-dev) or set CGO_ENABLED=1"; \
		exit 1; \
	fi
	$(GO) test -race -count=1 $(TESTFLAGS) -skip '$(PACED)' ./...
	$(GO) test -race -count=1 -p 1 -parallel 1 -run '$(PACED)' $(PACED_PKGS)

# allocs-check: the request path's allocation pins, which the race
# detector skips (it changes what allocates): a new allocation fails.
allocs-check:
	$(GO) test -count=1 -run 'Allocs$$' ./gateway ./limit/redisstore ./internal/framing

# test: the tests with the race detector, using the test cache
test:
	$(GO) test -race ./...

# build: bin/floodgate, stamped with the git version and commit, built
# with the build tags of TAGS
build:
	$(GO) build -tags "$(TAGS)" -ldflags "$(LDFLAGS)" -o bin/floodgate ./cmd/floodgate

# bench: every benchmark, with allocations, and no tests
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# image: the container image floodgate:$(VERSION), FROM scratch. The static
# binary and the CA certificates are put in build/image/ first, so docker
# build pulls nothing.
IMAGE ?= floodgate:$(VERSION)
CA_CERTS ?= /etc/ssl/certs/ca-certificates.crt
image:
	rm -rf build/image && mkdir -p build/image
	CGO_ENABLED=0 $(GO) build -trimpath -tags "$(TAGS)" -ldflags "-s -w $(LDFLAGS)" -o build/image/floodgate ./cmd/floodgate
	cp $(CA_CERTS) build/image/ca-certificates.crt
	cp deploy/docker/floodgate.yaml build/image/floodgate.yaml
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) -f Dockerfile build/image
