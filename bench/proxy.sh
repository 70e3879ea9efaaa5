#!/usr/bin/env bash
# Proxy throughput and latency, as ratios against nginx in the same run.
#
#   bench/proxy.sh [ROUNDS] [SECONDS] [OPEN_LOOP_RATE]
#
# Needs wrk, nginx and redis-server (apt-get install wrk nginx-light
# redis-server); none of them is a dependency of floodgate itself. Everything
# listens on free ports under a temporary directory and is stopped at the end.
#
# Three proxies stand in front of one tiny nginx upstream that answers "ok":
#   nginx      nginx proxying with upstream keepalive (the baseline)
#   fg-plain   floodgate with no limits
#   fg-limits  floodgate with the seeds' four fixed-window limits (global,
#              api, user, ip) on Redis, sized so that everything is admitted;
#              users and IPs vary per request (wrk script below), so the
#              limit step really does four counters per request
#   go-stock   httputil.ReverseProxy as it comes (bench/refproxy)
#   go-bare    a bare, featureless net/http proxy with pooled buffers
#              (bench/refproxy): the issue's two Go reference points, so
#              that this machine's ratios can be read against the issue's
#   base-limits  with BASE=REV in the environment: fg-limits built from
#              git revision REV (in a temporary worktree), so that a change
#              is measured against what it changes in the same run
# Each round runs wrk -t2 -c64 against each proxy in turn (interleaved, so
# that the machine's noise falls on all of them); the report gives every
# round's requests/s and the median of the per-round ratios to nginx, and
# the CPU fg-limits and its Redis spent per request in its runs (from
# /proc/PID/stat): steadier than requests/s on a shared machine, and it
# says which side a change moved.
#
# Then the limit step's cost in latency, open loop: floodgate load offers
# OPEN_LOOP_RATE requests/s (default 5000) to fg-plain and fg-limits in
# turn, ROUNDS times, with users and IPs drawn from 100,000 values; the
# report gives the p99 of each and the median added p99, and, from
# fg-limits' gateway_ratelimit_store_duration_seconds histogram, the share
# of its limit steps that took 1 ms or less and the bucket of their p99:
# the step's own time, apart from what the machine's load adds to every
# request.
set -euo pipefail
ROUNDS=${1:-5}
SECS=${2:-10}
OPEN=${3:-5000}
cd "$(dirname "$0")/.."
for cmd in wrk nginx redis-server; do
	command -v $cmd >/dev/null || { echo "bench/proxy.sh needs $cmd (apt-get install wrk nginx-light redis-server)" >&2; exit 1; }
done

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	[ -f "$tmp/up.pid" ] && kill "$(cat "$tmp/up.pid")" 2>/dev/null || true
	[ -f "$tmp/px.pid" ] && kill "$(cat "$tmp/px.pid")" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

. bench/lib.sh
UP=$(freeport); NGX=$(freeport); PLAIN=$(freeport); LIM=$(freeport); RED=$(freeport)
STOCK=$(freeport); BARE=$(freeport)
ADM1=$(freeport); ADM2=$(freeport)

go build -o "$tmp/floodgate" ./cmd/floodgate
go build -o "$tmp/refproxy" ./bench/refproxy
BASE=${BASE:-}
if [ -n "$BASE" ]; then
	build_rev "$BASE" "$tmp/floodgate-base"
	BLIM=$(freeport); ADM3=$(freeport)
fi

ngx() { # name port body
	cat >"$tmp/$1.conf" <<CONF
worker_processes 1;
pid $tmp/$1.pid;
error_log $tmp/$1.err;
events { worker_connections 4096; }
http {
  access_log off;
  upstream up { server 127.0.0.1:$UP; keepalive 256; }
  server { listen 127.0.0.1:$2 reuseport backlog=4096; $3 }
}
CONF
	nginx -c "$tmp/$1.conf" -p "$tmp"
}
ngx up "$UP" 'location / { return 200 "ok"; }'
ngx px "$NGX" 'location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }'

redis-server --port "$RED" --bind 127.0.0.1 --save "" --appendonly no --daemonize no >"$tmp/redis.log" 2>&1 &
redis_pid=$!
pids+=($!)

cat >"$tmp/plain.yaml" <<YAML
server: {listen: "127.0.0.1:$PLAIN"}
admin: {listen: "127.0.0.1:$ADM1"}
routes:
  - id: api
    match: {path: /**}
    upstream: {targets: ["http://127.0.0.1:$UP"]}
YAML
cat >"$tmp/limits.yaml" <<YAML
server: {listen: "127.0.0.1:$LIM", trusted_proxies: [127.0.0.1]}
admin: {listen: "127.0.0.1:$ADM2"}
store: {type: redis, redis: {addrs: ["127.0.0.1:$RED"]}}
global_limits:
  - {name: global, key: [global], rate: 100000000/s}
routes:
  - id: api
    match: {path: /**}
    upstream: {targets: ["http://127.0.0.1:$UP"]}
    limits:
      - {name: api, key: [route], rate: 100000000/s}
      - {name: user, key: ["header:X-User-Id", path], fallback: [ip], rate: 1000000/10s}
      - {name: ip, key: [ip], rate: 1000000/min}
YAML
"$tmp/floodgate" serve -c "$tmp/plain.yaml" 2>"$tmp/plain.log" &
pids+=($!)
"$tmp/floodgate" serve -c "$tmp/limits.yaml" 2>"$tmp/limits.log" &
lim_pid=$!
pids+=($!)
if [ -n "$BASE" ]; then
	sed -e "s/127.0.0.1:$LIM/127.0.0.1:$BLIM/" -e "s/127.0.0.1:$ADM2/127.0.0.1:$ADM3/" "$tmp/limits.yaml" >"$tmp/base.yaml"
	"$tmp/floodgate-base" serve -c "$tmp/base.yaml" 2>"$tmp/base.log" &
	pids+=($!)
fi

"$tmp/refproxy" -mode stock -listen "127.0.0.1:$STOCK" -upstream "http://127.0.0.1:$UP" 2>"$tmp/stock.log" &
pids+=($!)
"$tmp/refproxy" -mode bare -listen "127.0.0.1:$BARE" -upstream "http://127.0.0.1:$UP" 2>"$tmp/bare.log" &
pids+=($!)

# Users and client IPs each drawn from 100,000 values per request, as the
# open-loop phase's floodgate load --users 100000 --ips 100000 draws them.
cat >"$tmp/vary.lua" <<'LUA'
math.randomseed(os.time())
request = function()
  local u, j = math.random(1, 100000), math.random(1, 100000)
  wrk.headers["X-User-Id"] = "u" .. u
  wrk.headers["X-Forwarded-For"] = string.format("10.%d.%d.%d", math.floor(j / 65536) % 256, math.floor(j / 256) % 256, j % 256)
  return wrk.format(nil, "/api/activities/lucky-meal/receive")
end
LUA

for p in $NGX $PLAIN $LIM $STOCK $BARE ${BLIM:-}; do
	for _ in $(seq 100); do curl -sf "http://127.0.0.1:$p/" >/dev/null && break; sleep 0.1; done
done
curl -sf "http://127.0.0.1:$LIM/x" -H 'X-User-Id: 1' -D - -o /dev/null | grep -qi '^ratelimit' || { echo "fg-limits is not limiting" >&2; exit 1; }

run() { # port -> requests/s
	wrk -t2 -c64 -d"${SECS}s" -s "$tmp/vary.lua" --latency "http://127.0.0.1:$1/" >"$tmp/wrk.out" 2>&1
	awk '/Requests\/sec/ {print $2}' "$tmp/wrk.out"
	grep -E '^\s+99%' "$tmp/wrk.out" | awk '{print $2}' >"$tmp/p99"
	if grep -q 'Non-2xx' "$tmp/wrk.out"; then echo "non-2xx answers on port $1:" >&2; cat "$tmp/wrk.out" >&2; exit 1; fi
}

# cpu PID: the process's user and system CPU so far, in clock ticks.
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# perreq TICKS REQ/S: µs of CPU per request over one run of SECS.
perreq() { awk -v t="$1" -v r="$2" -v s="$SECS" -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "%.1f", t * 1e6 / hz / (r * s)}'; }

echo "round  nginx req/s  go-stock  go-bare  fg-plain req/s (p99)  fg-limits req/s (p99)  stock/nginx  bare/nginx  plain/nginx  limits/nginx  fg-limits CPU µs/req: gateway redis${BASE:+  base-limits req/s  base/nginx}"
plain_r=(); lim_r=(); stock_r=(); bare_r=(); base_r=(); lgw=(); lred=()
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.3f", a/b}'; }
for i in $(seq "$ROUNDS"); do
	n=$(run $NGX)
	st=$(run $STOCK)
	ba=$(run $BARE)
	p=$(run $PLAIN); pp=$(cat "$tmp/p99")
	g0=$(cpu $lim_pid); r0=$(cpu $redis_pid)
	l=$(run $LIM); lp=$(cat "$tmp/p99")
	g=$(perreq $(($(cpu $lim_pid) - g0)) "$l"); r=$(perreq $(($(cpu $redis_pid) - r0)) "$l")
	lgw+=("$g"); lred+=("$r")
	rp=$(ratio "$p" "$n"); rl=$(ratio "$l" "$n"); rs=$(ratio "$st" "$n"); rb=$(ratio "$ba" "$n")
	plain_r+=("$rp"); lim_r+=("$rl"); stock_r+=("$rs"); bare_r+=("$rb")
	printf "%5d  %11s  %8s  %7s  %14s (%s)  %15s (%s)  %11s  %10s  %11s  %12s  %28s %5s" "$i" "$n" "$st" "$ba" "$p" "$pp" "$l" "$lp" "$rs" "$rb" "$rp" "$rl" "$g" "$r"
	if [ -n "$BASE" ]; then
		b=$(run $BLIM); rB=$(ratio "$b" "$n"); base_r+=("$rB")
		printf "  %17s  %10s" "$b" "$rB"
	fi
	echo
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END{print (NR%2)? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "median ratio to nginx: go-stock $(median "${stock_r[@]}"), go-bare $(median "${bare_r[@]}"), fg-plain $(median "${plain_r[@]}"), fg-limits $(median "${lim_r[@]}")${BASE:+, base-limits ($BASE) $(median "${base_r[@]}")}"
echo "(where the issue was measured: go-stock 0.31, go-bare 0.5)"
echo "fg-limits CPU per request, median: gateway $(median "${lgw[@]}") µs, Redis $(median "${lred[@]}") µs"

# The open-loop phase: latency from each request's scheduled send time.
p99() { # port -> p99 in ms
	"$tmp/floodgate" load --url "http://127.0.0.1:$1/api/activities/lucky-meal/receive" --profile const \
		--rate "$OPEN" --duration "${SECS}s" --users 100000 --ips 100000 >"$tmp/load.out" 2>&1
	grep -q ' other 0 ' "$tmp/load.out" || { echo "errors in the open-loop run on port $1:" >&2; cat "$tmp/load.out" >&2; exit 1; }
	awk '/latency/ {for (i = 1; i <= NF; i++) if ($i == "p99") print $(i+1)}' "$tmp/load.out"
}
# The limit step's own time, from fg-limits' store histogram over one run:
# the share of decisions (queueing for a batch included) within 1 ms, and
# the bucket that holds the 99th percentile.
storehist() { curl -sf "http://127.0.0.1:$ADM2/metrics" | grep '^gateway_ratelimit_store_duration_seconds_bucket'; }
storestep() { # before-file after-file -> "share<=1ms p99<=bound"
	awk '{ match($0, /le="[^"]*"/); le = substr($0, RSTART + 4, RLENGTH - 5); v = $NF
		if (FILENAME == ARGV[1]) { b[le] = v; next } d[++n] = le; c[le] = v - b[le] }
		END { tot = c["+Inf"]; if (tot <= 0) { print "-"; exit }
			for (i = 1; i <= n; i++) if (c[d[i]] >= 0.99 * tot) { p = d[i]; break }
			printf "%.2f%% %s", 100 * c["0.001"] / tot, (p == "+Inf" ? ">0.1s" : "<=" p * 1000 "ms") }' "$1" "$2"
}
echo
echo "open loop at $OPEN/s: round  fg-plain p99 ms  fg-limits p99 ms  added ms  limit steps <= 1 ms, their p99${BASE:+  base-limits p99 ms  added ms}"
added=(); badded=(); within=()
for i in $(seq "$ROUNDS"); do
	a=$(p99 $PLAIN)
	storehist >"$tmp/hist.before"
	b=$(p99 $LIM)
	storehist >"$tmp/hist.after"
	st=$(storestep "$tmp/hist.before" "$tmp/hist.after")
	within+=("${st%%%*}")
	d=$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2f", b-a}')
	added+=("$d")
	printf "%28d  %15s  %16s  %8s  %26s" "$i" "$a" "$b" "$d" "$st"
	if [ -n "$BASE" ]; then
		c=$(p99 $BLIM); e=$(awk -v a="$a" -v b="$c" 'BEGIN{printf "%.2f", b-a}'); badded+=("$e")
		printf "  %18s  %8s" "$c" "$e"
	fi
	echo
done
echo "median p99 added by the four limits on Redis at $OPEN/s: $(median "${added[@]}") ms${BASE:+ (base $BASE: $(median "${badded[@]}") ms)}"
echo "median share of limit steps (store decisions, batch queueing included) within 1 ms: $(median "${within[@]}") %"
