#!/usr/bin/env bash
# floodgate's Envoy rate-limit service against envoyproxy/ratelimit and
# against a service that decides nothing, on one Redis, with one client.
#
#   bench/rls.sh [ROUNDS] [SECONDS]
#
# Defaults: 5 rounds of 10 s per server. Needs go, redis-server, redis-cli
# and python3 (for free ports); Linux, for the CPU accounting in /proc. The
# first run downloads envoyproxy/ratelimit's module (ENVOY_RATELIMIT, below)
# with go mod download and builds its src/service_cmd from a copy, with its
# own go.mod; floodgate does not depend on it. Everything listens on free
# 127.0.0.1 ports under a temporary directory and is stopped at the end.
#
# Started once, side by side:
#   redis-server       no persistence
#   floodgate          floodgate serve: rls.listen, the rule file below in
#                      rls.config_dir, store.type redis on that server
#                      (timeout 1s; local rejects as by default)
#   envoy              envoyproxy/ratelimit on the same server and the same
#                      rule file, by its environment, its defaults otherwise
#                      (no statsd, pool of 10, no pipelining window)
#   nothing            bench/rlsload -serve: answers OK and decides nothing,
#                      the gRPC ceiling
# Each round drives floodgate, envoy and nothing in turn, SECONDS each, so
# that the machine's noise falls on all three, with bench/rlsload: 64
# callers over 4 gRPC connections, two descriptors per call (remote_address
# drawn from 100,000 values, and path), limits sized to admit everything
# (a call not answered OK is counted failed). Per server and round: calls/s,
# the server process's CPU per call (utime+stime of /proc/PID/stat), and
# Redis's commands per call (INFO commandstats, INFO itself left out) and
# CPU per call (INFO cpu), and the client's own CPU per call. Then the
# medians of the rounds, and the medians of the per-round ratios
# floodgate/envoy and floodgate/nothing, of calls/s and of the server's
# CPU per call. Client,
# servers and Redis share the machine's cores; every idle server keeps its
# own background work (floodgate's health probe and fleet loop ask Redis a
# few times a second), which lands in the others' Redis counts.
set -euo pipefail
ROUNDS=${1:-5}
SECS=${2:-10}
ENVOY_RATELIMIT=${ENVOY_RATELIMIT:-github.com/envoyproxy/ratelimit@v1.4.1-0.20260122083618-3fb702589d36}
cd "$(dirname "$0")/.."
for cmd in go redis-server redis-cli python3; do
	command -v $cmd >/dev/null || { echo "bench/rls.sh needs $cmd (apt-get install redis-server python3)" >&2; exit 1; }
done

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

. bench/lib.sh
RED=$(freeport); FG=$(freeport); FGHTTP=$(freeport); FGADM=$(freeport)
EN=$(freeport); ENHTTP=$(freeport); ENDBG=$(freeport); NO=$(freeport)

go build -o "$tmp/floodgate" ./cmd/floodgate
go build -o "$tmp/rlsload" ./bench/rlsload
dir=$(go mod download -json "$ENVOY_RATELIMIT" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$dir/src/service_cmd" ] || { echo "bench/rls.sh: no src/service_cmd in $ENVOY_RATELIMIT ($dir)" >&2; exit 1; }
cp -r "$dir" "$tmp/ratelimit-src"
chmod -R u+w "$tmp/ratelimit-src"
(cd "$tmp/ratelimit-src" && GOFLAGS=-mod=mod go build -o "$tmp/ratelimit" ./src/service_cmd)

# One rule file for both services, in envoyproxy/ratelimit's format.
mkdir -p "$tmp/rules" "$tmp/runtime/ratelimit/config"
cat >"$tmp/rules/edge.yaml" <<'EOF'
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1000000000}
EOF
cp "$tmp/rules/edge.yaml" "$tmp/runtime/ratelimit/config/edge.yaml"

cat >"$tmp/floodgate.yaml" <<EOF
server:
  listen: "127.0.0.1:$FGHTTP"
admin:
  listen: "127.0.0.1:$FGADM"
rls:
  listen: "127.0.0.1:$FG"
  config_dir: $tmp/rules
store:
  type: redis
  redis:
    addrs: ["127.0.0.1:$RED"]
    timeout: 1s
EOF

redis-server --port "$RED" --bind 127.0.0.1 --dir "$tmp" --save "" --appendonly no >"$tmp/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do redis-cli -p "$RED" ping >/dev/null 2>&1 && break; sleep 0.1; done

"$tmp/floodgate" serve -c "$tmp/floodgate.yaml" >"$tmp/floodgate.log" 2>&1 &
pids+=($!); fg_pid=$!
env -i PATH="$PATH" HOME="$tmp" \
	RUNTIME_ROOT="$tmp/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
	REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$RED" USE_STATSD=false LOG_LEVEL=warn \
	HOST=127.0.0.1 PORT="$ENHTTP" GRPC_HOST=127.0.0.1 GRPC_PORT="$EN" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$ENDBG" \
	"$tmp/ratelimit" >"$tmp/envoy.log" 2>&1 &
pids+=($!); en_pid=$!
"$tmp/rlsload" -serve "127.0.0.1:$NO" >"$tmp/nothing.log" 2>&1 &
pids+=($!); no_pid=$!

# Wait until each answers a call OK.
for s in "floodgate $FG $fg_pid" "envoy $EN $en_pid" "nothing $NO $no_pid"; do
	read -r name port pid <<<"$s"
	ok=
	for _ in $(seq 300); do
		kill -0 "$pid" 2>/dev/null || break
		if "$tmp/rlsload" -addr "127.0.0.1:$port" -callers 1 -conns 1 -duration 1ms >/dev/null 2>&1; then ok=1; break; fi
		sleep 0.1
	done
	[ -n "$ok" ] || { echo "bench/rls.sh: $name does not answer on 127.0.0.1:$port:" >&2; tail -20 "$tmp/$name.log" >&2; exit 1; }
done

echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, $(redis-server --version | cut -d' ' -f3), $(go version | cut -d' ' -f3), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "envoyproxy/ratelimit: $ENVOY_RATELIMIT"

tck=$(getconf CLK_TCK)
proc_cpu() { sed 's/^.*) //' "/proc/$1/stat" | awk -v t="$tck" '{printf "%.6f", ($12 + $13) / t}'; } # utime+stime, s
redis_cpu() { redis-cli -p "$RED" INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f", s}'; }
redis_cmds() { redis-cli -p "$RED" INFO commandstats | tr -d '\r' | grep -v '^cmdstat_info:' | sed -n 's/^cmdstat_.*:calls=\([0-9]*\),.*/\1/p' | awk '{s += $1} END {print s + 0}'; }

run() { # NAME PORT PID -> "calls/s cpu-µs/call redis-cmds/call redis-µs/call failed client-µs/call"
	local c0 r0 k0 c1 r1 k1 out
	c0=$(proc_cpu "$3"); r0=$(redis_cpu); k0=$(redis_cmds)
	out=$("$tmp/rlsload" -addr "127.0.0.1:$2" -duration "${SECS}s" 2>>"$tmp/rlsload.err")
	c1=$(proc_cpu "$3"); r1=$(redis_cpu); k1=$(redis_cmds)
	echo "$1 $out" >>"$tmp/rlsload.log"
	awk -v o="$out" -v c0="$c0" -v c1="$c1" -v r0="$r0" -v r1="$r1" -v k0="$k0" -v k1="$k1" 'BEGIN {
		split(o, f, " "); n = f[2]; fail = f[4]; rate = f[8]; client = f[14]; sub(/µs.*/, "", client)
		printf "%.0f %.1f %.2f %.1f %d %s", rate, (c1 - c0) * 1e6 / n, (k1 - k0) / n, (r1 - r0) * 1e6 / n, fail, client
	}'
}

# A short warm-up of each, not reported.
for s in "$FG $fg_pid" "$EN $en_pid" "$NO $no_pid"; do
	read -r port pid <<<"$s"
	"$tmp/rlsload" -addr "127.0.0.1:$port" -duration 2s >/dev/null
done

hdr='%5s | %-32s | %-32s | %-14s | %-8s %-8s\n'
printf "\n$hdr" round "floodgate" "envoyproxy/ratelimit" "nothing" "fg/envoy" "fg/nothing"
printf "$hdr" "" "calls/s cpuµs rcmd redisµs fail" "calls/s cpuµs rcmd redisµs fail" "calls/s cpuµs" "calls/s" "calls/s"
declare -A col=()
add() { col[$1]="${col[$1]:-} $2"; }
for i in $(seq "$ROUNDS"); do
	read -r fr fc fk fu ff fl <<<"$(run floodgate "$FG" "$fg_pid")"
	read -r er ec ek eu ef el <<<"$(run envoy "$EN" "$en_pid")"
	read -r nr nc _ _ nf nl <<<"$(run nothing "$NO" "$no_pid")"
	a=$(awk -v x="$fr" -v y="$er" 'BEGIN {printf "%.2f", x / y}')
	b=$(awk -v x="$fr" -v y="$nr" 'BEGIN {printf "%.3f", x / y}')
	ca=$(awk -v x="$ec" -v y="$fc" 'BEGIN {printf "%.2f", x / y}')
	cb=$(awk -v x="$nc" -v y="$fc" 'BEGIN {printf "%.3f", x / y}')
	for k in fr fc fk fu fl er ec ek eu el nr nc nl a b ca cb; do add $k "${!k}"; done
	printf "$hdr" "$i" "$fr $fc $fk $fu $ff" "$er $ec $ek $eu $ef" "$nr $nc" "$a" "$b"
	[ "$ff$ef$nf" = 000 ] || { echo "calls failed; the first failures:" >&2; sort -u "$tmp/rlsload.err" | head -5 >&2; }
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
m() { median ${col[$1]}; }
echo
echo "medians of $ROUNDS rounds of ${SECS}s:"
printf '  %-22s %9s calls/s, %6s µs CPU/call, %5s Redis commands/call, %5s µs Redis CPU/call, %5s µs client CPU/call\n' \
	floodgate "$(m fr)" "$(m fc)" "$(m fk)" "$(m fu)" "$(m fl)" \
	envoyproxy/ratelimit "$(m er)" "$(m ec)" "$(m ek)" "$(m eu)" "$(m el)"
printf '  %-22s %9s calls/s, %6s µs CPU/call, %5s µs client CPU/call\n' nothing "$(m nr)" "$(m nc)" "$(m nl)"
echo "  calls/s: floodgate/envoy $(m a) (target >= 3), floodgate/nothing $(m b) (target >= 0.85)"
echo "  server CPU per call, as a speed: envoy/floodgate $(m ca), nothing/floodgate $(m cb)"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
