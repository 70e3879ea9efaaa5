#!/usr/bin/env bash
# Instructions Redis executes per decision of the seeds' four limits, as the
# store makes them alone (one call per decision, as at moderate load) and in
# batch calls of 1, 6 and 64 requests: a count, not a time, so that it holds
# on a busy machine.
#
#   bench/redis-instructions.sh [CALLS]
#   BASE=REV bench/redis-instructions.sh [CALLS]
#
# Needs valgrind and redis-server (apt-get install valgrind redis-server).
# Runs BenchmarkRedisInstructions (limit/redisstore/bench_test.go): a
# redis-server under callgrind, CALLS calls per kind (default 100),
# counters zeroed after a first call. The count is the server's user-space
# work (Lua, commands, parsing, replies); the kernel's (system calls, the
# loopback network) is not in it.
#
# With KEEP=DIR (an existing directory), the callgrind dump of each kind is
# kept there as NAME.callgrind (this tree's, not BASE's), for
# callgrind_annotate --inclusive=yes to show where the instructions went
# (Debian's redis-server has no symbols for Lua's own functions, but has
# Redis's and the commands').
#
# With BASE=REV the same benchmark also runs on the store as it was at git
# revision REV (a temporary worktree, with this tree's test files of
# limit/redisstore and internal/testredis laid over it), and the report
# gives both and their ratio.
set -euo pipefail
CALLS=${1:-100}
cd "$(dirname "$0")/.."
for cmd in valgrind callgrind_control redis-server go; do
	command -v $cmd >/dev/null || { echo "bench/redis-instructions.sh needs $cmd (apt-get install valgrind redis-server)" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/rev" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT

run() { # dir [keep-dir] -> "size instructions" lines
	(cd "$1" && FLOODGATE_CALLGRIND_KEEP=${2:-} go test -run '^$' -bench BenchmarkRedisInstructions -benchtime "${CALLS}x" ./limit/redisstore) |
		awk '/^BenchmarkRedisInstructions\// { split($1, a, "/"); sub(/-[0-9]+$/, "", a[2]); for (i = 1; i <= NF; i++) if ($i == "redis-instr/decision") print a[2], $(i-1) }'
}
run . "${KEEP:+$(realpath "$KEEP")}" >"$tmp/head"
if [ -n "${BASE:-}" ]; then
	git worktree add --detach "$tmp/rev" "$BASE" >/dev/null 2>&1 || { echo "cannot check out $BASE" >&2; exit 1; }
	cp limit/redisstore/*_test.go "$tmp/rev/limit/redisstore/"
	cp internal/testredis/*.go "$tmp/rev/internal/testredis/"
	run "$tmp/rev" >"$tmp/base"
	echo "batch     instructions/decision   base ($BASE)   ratio"
	join "$tmp/head" "$tmp/base" | awk '{ printf "%-8s  %22.0f  %14.0f  %6.3f\n", $1, $2, $3, $2 / $3 }'
else
	echo "batch     instructions/decision"
	awk '{ printf "%-8s  %22.0f\n", $1, $2 }' "$tmp/head"
fi
