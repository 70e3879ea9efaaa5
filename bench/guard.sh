#!/usr/bin/env bash
# The request path's benchmarks, a base revision against the working tree,
# interleaved, and benchstat's comparison: what a change costs per request
# (time, bytes and allocations), before it lands.
#
#   bench/guard.sh BASE [ROUNDS]
#
# BASE is a commit-ish (main, HEAD~3, a tag); ROUNDS defaults to 6, and
# BENCHTIME in the environment (default 500ms) is each benchmark's
# -benchtime: about 3 minutes in all on 2 cores. Needs git, Go and
# redis-server (the Redis benchmarks start their own, as go test does);
# benchstat runs with go run at the version pinned below (fetched from
# the module proxy once). BASE is checked out with git worktree add into a
# temporary directory, and the test binaries are built there: nothing is
# written into the repository, and the worktree is removed at the end. The
# working tree is measured as it is, uncommitted changes included.
#
# The benchmarks, each package's test binary built once per side:
#   ./gateway            BenchmarkServeHTTP (no limits, four fixed windows
#                        on memory and on Redis, through a loopback
#                        upstream), BenchmarkReject (a 429 on memory: own
#                        request id, a new one, by ip), BenchmarkRejectLocally
#                        (a 429 on Redis from the store's memory)
#   ./limit/memory       BenchmarkDecide: one fixed window, four
#   ./limit/redisstore   BenchmarkDecideFourFixed/g64: four limits in one
#                        script call, 64 goroutines
#   ./rls                BenchmarkShouldRateLimit: do-nothing gRPC, the
#                        service on memory and on Redis
# Each round runs every binary once (-count 1, -benchmem) for BASE and for
# the working tree, the order of the two swapped from one round to the
# next, so that the machine's drift and noise fall on both. Then benchstat
# base=... work=...: per benchmark the median of each side with its
# confidence interval, and the change with its p-value (~ where the
# difference is not significant), for sec/op, B/op, allocs/op and each
# benchmark's own metrics. A change that adds to the request path shows
# here, and the allocation pins (go test ./gateway, TestRequestAllocs)
# fail on a new allocation.
set -euo pipefail
BASE=${1:?usage: bench/guard.sh BASE [ROUNDS]}
ROUNDS=${2:-6}
BENCHTIME=${BENCHTIME:-500ms}
BENCHSTAT=golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
cd "$(dirname "$0")/.."
root=$(pwd)
for cmd in git go redis-server; do
	command -v $cmd >/dev/null || { echo "bench/guard.sh needs $cmd" >&2; exit 1; }
done
rev=$(git rev-parse --verify --quiet "$BASE^{commit}") || { echo "bench/guard.sh: $BASE is not a commit" >&2; exit 1; }

# package and -bench regexp, one pair a line.
SUITES="gateway ^(BenchmarkServeHTTP|BenchmarkReject|BenchmarkRejectLocally)\$
limit/memory ^BenchmarkDecide\$/^(fixed_window|four_fixed_windows)\$
limit/redisstore ^BenchmarkDecideFourFixed\$/^g64\$
rls ^BenchmarkShouldRateLimit\$/^(grpc-only|memory|redis)\$"

tmp=$(mktemp -d)
cleanup() {
	git -C "$root" worktree remove --force "$tmp/src" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT
git worktree add --detach "$tmp/src" "$rev" >/dev/null 2>&1 || { echo "bench/guard.sh: cannot check out $BASE" >&2; exit 1; }

# build SIDE DIR: a test binary per package into $tmp/SIDE; a package that
# DIR does not have (or whose tests do not build there) is left out.
build() {
	mkdir -p "$tmp/$1"
	local pkg re
	while read -r pkg re; do
		if ! (cd "$2" && go test -c -o "$tmp/$1/${pkg//\//_}.test" "./$pkg") >"$tmp/build.out" 2>&1; then
			echo "note: ./$pkg does not build at $1, left out:" >&2
			head -5 "$tmp/build.out" >&2
		fi
	done <<<"$SUITES"
}
echo "building the test binaries of $BASE ($(git rev-parse --short "$rev")) and of the working tree"
build base "$tmp/src"
build work "$root"

# bench SIDE DIR: one round of every package's benchmarks, appended to
# $tmp/SIDE.txt.
bench() {
	local pkg re bin
	while read -r pkg re; do
		bin="$tmp/$1/${pkg//\//_}.test"
		[ -x "$bin" ] || continue
		(cd "$2/$pkg" && "$bin" -test.run '^$' -test.bench "$re" -test.benchmem -test.count 1 -test.benchtime "$BENCHTIME") >>"$tmp/$1.txt" 2>&1 ||
			{ echo "bench/guard.sh: ./$pkg's benchmarks failed at $1:" >&2; tail -20 "$tmp/$1.txt" >&2; exit 1; }
	done <<<"$SUITES"
}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(go version | cut -d' ' -f3), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$ROUNDS"); do
	if [ $((i % 2)) = 1 ]; then order="base work"; else order="work base"; fi
	for side in $order; do
		if [ "$side" = base ]; then bench base "$tmp/src"; else bench work "$root"; fi
	done
	echo "round $i of $ROUNDS done ($order), load average $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo
echo "base: $BASE ($(git rev-parse --short "$rev")); work: the working tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ', with changes')); $ROUNDS rounds, -benchtime $BENCHTIME"
echo
(cd "$tmp" && go run "$BENCHSTAT" base=base.txt work=work.txt)
