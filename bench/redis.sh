#!/usr/bin/env bash
# The Redis store's decisions against the ceilings that bound them, in one run.
#
#   bench/redis.sh [ROUNDS] [REQUESTS]
#
# Needs redis-server and redis-benchmark (apt-get install redis-server
# redis-tools). The scenario is the seeds': four fixed-window limits per
# decision (global, api, user, ip), users and IPs drawn from 100,000 values,
# limits sized so that everything is admitted.
#
# Each round runs, one after the other, so that the machine's noise falls on
# all of them:
#   redis-benchmark  -P 16 -c 64 -n REQUESTS -r 100000, replaying the store's
#                    own EVALSHA of decide.lua (printed below by
#                    bench/decidelat -print-evalsha, so it cannot drift from
#                    the store) on a redis-server started here: the most
#                    this Redis decides with this script
#   go test -bench   BenchmarkDecideFourFixed and BenchmarkSeedDesignFourEvals
#                    (g1, g64), -benchtime 3s, each on its own redis-server
#                    (internal/testredis); ROUNDS rounds of -count 1 give the
#                    samples -count ROUNDS would, interleaved
#   decidelat        one goroutine, unloaded: the latency percentiles
# and prints every round, then the medians of the per-round ratios.
set -euo pipefail
ROUNDS=${1:-3}
REQUESTS=${2:-1000000}
cd "$(dirname "$0")/.."
for cmd in redis-server redis-benchmark redis-cli go; do
	command -v $cmd >/dev/null || { echo "bench/redis.sh needs $cmd (apt-get install redis-server redis-tools)" >&2; exit 1; }
done

tmp=$(mktemp -d)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

. bench/lib.sh
PORT=$(freeport)
ADDR=127.0.0.1:$PORT
redis-server --port "$PORT" --bind 127.0.0.1 --dir "$tmp" --save "" --appendonly no >"$tmp/redis.log" 2>&1 &
pid=$!
for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

go build -o "$tmp/decidelat" ./bench/decidelat
go test -c -o "$tmp/redisstore.test" ./limit/redisstore

echo "machine: $(nproc) cores, $(redis-server --version | cut -d' ' -f3), $(go version | cut -d' ' -f3), load average $(cut -d' ' -f1-3 /proc/loadavg)"

# The store's exact command for the scenario, with redis-benchmark's
# __rand_int__ in place of the user and IP values.
mapfile -t EVALSHA < <("$tmp/decidelat" -redis "$ADDR" -print-evalsha)
echo "redis-benchmark command (bench/decidelat -print-evalsha; '' is an empty argument):"
printf '  '; for a in "${EVALSHA[@]}"; do printf "%s " "${a:-''}"; done; echo

redis_cpu() { redis-cli -p "$PORT" INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f", s}'; }

rb() { # -> "decisions/s redis-cpu-µs/decision"
	redis-cli -p "$PORT" FLUSHALL >/dev/null
	local c0 c1 out
	c0=$(redis_cpu)
	out=$(redis-benchmark -p "$PORT" -P 16 -c 64 -n "$REQUESTS" -r 100000 -q "${EVALSHA[@]}" 2>&1 | tr '\r' '\n' | grep 'requests per second' | tail -1)
	c1=$(redis_cpu)
	local rps
	rps=$(sed 's/.*: \([0-9.]*\) requests per second.*/\1/' <<<"$out")
	if [ "$(redis-cli -p "$PORT" INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:.*failed_calls=\([0-9]*\).*/\1/p')" != 0 ]; then
		echo "redis-benchmark: EVALSHA failed:" >&2
		redis-cli -p "$PORT" INFO errorstats >&2
		exit 1
	fi
	redis-cli -p "$PORT" CONFIG RESETSTAT >/dev/null
	awk -v r="$rps" -v a="$c0" -v b="$c1" -v n="$REQUESTS" 'BEGIN {printf "%.0f %.2f", r, (b - a) * 1e6 / n}'
}

gobench() { # -> lines "name decisions/s redis-cpu-µs/op"
	"$tmp/redisstore.test" -test.run '^$' -test.bench 'DecideFourFixed|SeedDesignFourEvals' \
		-test.benchtime 3s -test.count 1 2>&1 | tee -a "$tmp/gobench.log" |
		awk '/^Benchmark/ {
			name = $1; sub(/-[0-9]+$/, "", name); sub(/^Benchmark/, "", name)
			for (i = 2; i < NF; i++) { if ($(i+1) == "ns/op") ns = $i; if ($(i+1) == "redis-cpu-µs/op") cpu = $i }
			printf "%s %.0f %s\n", name, 1e9 / ns, cpu
		}'
}

p99() { # -> "p50 p99" of one goroutine, unloaded, in µs
	redis-cli -p "$PORT" FLUSHALL >/dev/null
	"$tmp/decidelat" -redis "$ADDR" -n 20000 -c 1 | tee -a "$tmp/decidelat.log" |
		sed -n 's/^p50 \([0-9.]*\)µs .* p99 \([0-9.]*\)µs .*/\1 \2/p'
}

printf '\n%5s | %-21s | %-21s %-21s | %-21s %-21s | %11s | %-17s %-14s\n' round \
	"redis-benchmark" "store g1" "store g64" "seed g1" "seed g64" "g1 p50/p99" "store/rbench" "store/seed"
printf '%5s | %-21s | %-21s %-21s | %-21s %-21s | %11s | %-17s %-14s\n' "" \
	"dec/s (redis µs)" "dec/s (redis µs)" "dec/s (redis µs)" "dec/s (redis µs)" "dec/s (redis µs)" "µs" "g64" "g64"
r_rb=(); r_seed=(); p99s=()
for i in $(seq "$ROUNDS"); do
	out=$(rb)
	read -r rbs rbc <<<"$out"
	out=$(gobench)
	declare -A g=() gc=()
	while read -r name rate cpu; do g[$name]=$rate; gc[$name]=$cpu; done <<<"$out"
	out=$(p99)
	read -r p50 p99v <<<"$out"
	a=$(awk -v s="${g[DecideFourFixed/g64]}" -v r="$rbs" 'BEGIN {printf "%.3f", s / r}')
	b=$(awk -v s="${g[DecideFourFixed/g64]}" -v r="${g[SeedDesignFourEvals/g64]}" 'BEGIN {printf "%.3f", s / r}')
	r_rb+=("$a"); r_seed+=("$b"); p99s+=("$p99v")
	printf '%5d | %-21s | %-21s %-21s | %-21s %-21s | %11s | %-17s %-14s\n' "$i" \
		"$rbs ($rbc)" \
		"${g[DecideFourFixed/g1]} (${gc[DecideFourFixed/g1]})" "${g[DecideFourFixed/g64]} (${gc[DecideFourFixed/g64]})" \
		"${g[SeedDesignFourEvals/g1]} (${gc[SeedDesignFourEvals/g1]})" "${g[SeedDesignFourEvals/g64]} (${gc[SeedDesignFourEvals/g64]})" \
		"$p50/$p99v" "$a" "$b"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
echo
echo "medians: store g64 / redis-benchmark $(median "${r_rb[@]}") (target >= 0.65)," \
	"store g64 / seed g64 $(median "${r_seed[@]}") (target >= 2)," \
	"g1 p99 $(median "${p99s[@]}") µs (target < 300)"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
