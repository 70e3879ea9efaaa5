#!/usr/bin/env bash
# floodgate's own cost on top of the Go runtime: each of its request paths
# next to the cheapest Go program that does the same work, in one run.
#
#   bench/floor.sh [ROUNDS] [SECONDS]
#
# Defaults: 3 rounds, 8 s per run (about 5 minutes in all). Needs wrk,
# redis-server, redis-cli, curl, python3 (for free ports) and Go (apt-get
# install wrk redis-server), and nginx (apt-get install nginx-light) for the
# nginx contenders and the upstream: without it they are left out, with a
# note, and the upstream is a minimal net/http server instead. Linux, for
# the CPU accounting in /proc. Everything listens on free 127.0.0.1 ports
# under a temporary directory and is stopped at the end.
#
# Three groups of contenders, in front of one tiny upstream that answers
# "ok" (nginx, 1 worker):
#   flood: a flood of users already over their limit, 1 request per 10 s
#   each by X-User-Id; wrk -t2 -c64, each request from one of 2,000 users,
#   after a 1 s warm-up that puts every user over the limit
#     bare       bench/flood -bare: a net/http handler with a map of users
#                writing the same 429 (the Go floor)
#     mem        floodgate, one fixed-window limit 1/10s, store: memory
#     redis      the same on Redis, store.local_rejects: true
#     ngx-limit  nginx limit_req on $http_x_user_id, rate=6r/m, 1 worker
#   proxy: every request admitted and proxied; wrk -t2 -c64, users and
#   client addresses drawn from 100,000 values per request
#     go-bare    bench/refproxy -mode bare: the inbound request sent on
#                through an http.Transport that keeps enough idle
#                connections, the answer copied with pooled buffers (the
#                Go floor: the least a net/http proxy can do)
#     go-stock   bench/refproxy -mode stock: httputil.ReverseProxy as it
#                comes (its transport keeps 2 idle connections per host,
#                so under 64 connections it dials most of the time)
#     plain      floodgate without limits
#     four       floodgate with the seeds' four fixed-window limits (global,
#                api, user, ip; bench/proxy.sh's fg-limits) on Redis, sized
#                to admit everything
#     ngx-proxy  nginx proxy_pass with upstream keepalive, 1 worker
#   rls: Envoy's ShouldRateLimit over gRPC; bench/rlsload, 64 callers on 4
#   connections, two descriptors per call (remote_address from 100,000
#   values, and path), limits sized to admit everything (as bench/rls.sh),
#   each call with a deadline of its own as Envoy sends one (20 ms there;
#   1 s here, the store's timeout, so that a slow moment fails no call)
#     nothing    bench/rlsload -serve: answers OK, decides nothing (the
#                gRPC floor)
#     rls        floodgate's RLS (rls.listen) on Redis
# Each of redis, four and rls has its own redis-server (--save "",
# --appendonly no), so that its CPU is its contender's alone (its idle
# work, a few pings a second, included).
#
# Each round runs every contender once, in the order above, so that the
# machine's noise falls on all of them. Per contender and round: requests
# (calls) per second, the answers (200, 429, other: errors, and for the
# proxy and rls groups anything but 200/OK), and the CPU per request of
# each process: the contender's own (gw: floodgate, bare, go-bare,
# go-stock, nothing, or nginx's worker; /proc/PID/stat utime+stime), the
# upstream's (up: its nginx worker) and Redis's (INFO cpu). At the end:
# medians per contender, the medians of the per-round ratios of
# requests/s (mem/bare, redis/bare, four/plain, plain/go-bare,
# plain/go-stock, rls/nothing, and against nginx), the same ratios by the
# CPU per request of the contender's own process (the floor's µs over
# floodgate's: steadier than requests/s on a shared machine, where a
# neighbour's load lands on one run and not the next), and a markdown
# summary of the targets, met or not by requests/s:
#   flood of limited users, memory and Redis with local rejects
#                                        >= 0.9 x the bare 429
#   proxy with four Redis limits         >= 0.85 x floodgate without limits
#   RLS on Redis                         >= 0.75 x the do-nothing gRPC server
# Client, contenders, upstream and Redis share the machine's cores: the
# ratios, not the absolute numbers, are what carries to another machine.
# shellcheck disable=SC2059 # the tables' formats are in $hdr
set -euo pipefail
ROUNDS=${1:-3}
SECS=${2:-8}
cd "$(dirname "$0")/.."
for cmd in wrk redis-server redis-cli curl python3 go; do
	command -v $cmd >/dev/null || { echo "bench/floor.sh needs $cmd (apt-get install wrk redis-server)" >&2; exit 1; }
done
NGINX=
if command -v nginx >/dev/null; then
	NGINX=1
else
	echo "note: no nginx (apt-get install nginx-light): the nginx contenders are left out, and the upstream is a minimal net/http server" >&2
fi

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for f in "$tmp"/*.nginx.pid; do
		if [ -f "$f" ]; then kill "$(cat "$f")" 2>/dev/null || true; fi
	done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

# shellcheck source=bench/lib.sh
. bench/lib.sh
go build -o "$tmp/floodgate" ./cmd/floodgate
go build -o "$tmp/flood" ./bench/flood
go build -o "$tmp/refproxy" ./bench/refproxy
go build -o "$tmp/rlsload" ./bench/rlsload

FLOOD=(bare mem redis ${NGINX:+ngx-limit})
PROXY=(go-bare go-stock plain four ${NGINX:+ngx-proxy})
RLS=(nothing rls)
ALL=("${FLOOD[@]}" "${PROXY[@]}" "${RLS[@]}")
declare -A group port pid rport admin
for c in "${FLOOD[@]}"; do group[$c]=flood; done
for c in "${PROXY[@]}"; do group[$c]=proxy; done
for c in "${RLS[@]}"; do group[$c]=rls; done
for c in "${ALL[@]}"; do port[$c]=$(freeport); done
UP=$(freeport)

# nginx_worker MASTER-PID-FILE: the pid of the (single) worker.
nginx_worker() {
	local m w=
	m=$(cat "$1")
	for _ in $(seq 50); do
		w=$(pgrep -P "$m" | head -1 || true)
		[ -n "$w" ] && break
		sleep 0.1
	done
	[ -n "$w" ] || { echo "bench/floor.sh: no nginx worker under $m" >&2; exit 1; }
	echo "$w"
}
ngx() { # name port server-body [http-extra]
	cat >"$tmp/$1.conf" <<CONF
worker_processes 1;
pid $tmp/$1.nginx.pid;
error_log $tmp/$1.err crit;
events { worker_connections 4096; }
http {
  access_log off;
  upstream up { server 127.0.0.1:$UP; keepalive 256; }
  ${4:-}
  server { listen 127.0.0.1:$2 reuseport backlog=4096; $3 }
}
CONF
	nginx -c "$tmp/$1.conf" -p "$tmp" -e "$tmp/$1.err"
}

# The upstream.
if [ -n "$NGINX" ]; then
	ngx up "$UP" 'location / { return 200 "ok"; }'
	uppid=$(nginx_worker "$tmp/up.nginx.pid")
	# shellcheck disable=SC2016 # nginx's variable, not the shell's
	ngx limit "${port[ngx-limit]}" 'location / { limit_req zone=u; limit_req_status 429; proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }' \
		'limit_req_zone $http_x_user_id zone=u:10m rate=6r/m;'
	ngx px "${port[ngx-proxy]}" 'location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }'
	pid[ngx-limit]=$(nginx_worker "$tmp/limit.nginx.pid")
	pid[ngx-proxy]=$(nginx_worker "$tmp/px.nginx.pid")
else
	cat >"$tmp/up.go" <<'GO'
package main

import (
	"io"
	"net/http"
	"os"
)

func main() {
	http.ListenAndServe(os.Args[1], http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
}
GO
	go build -o "$tmp/up" "$tmp/up.go"
	"$tmp/up" "127.0.0.1:$UP" &
	uppid=$!
	pids+=($!)
fi

for c in redis four rls; do
	rport[$c]=$(freeport)
	mkdir -p "$tmp/redis-$c"
	redis-server --port "${rport[$c]}" --bind 127.0.0.1 --dir "$tmp/redis-$c" --save "" --appendonly no >"$tmp/redis-$c.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do redis-cli -p "${rport[$c]}" ping >/dev/null 2>&1 && break; sleep 0.1; done
done

# floodgate's configurations.
fgconf() { # contender body
	admin[$1]=$(freeport)
	{
		echo "admin: {listen: \"127.0.0.1:${admin[$1]}\"}"
		echo "$2"
	} >"$tmp/$1.yaml"
}
redisstore() { echo "{type: redis, local_rejects: true, redis: {addrs: [\"127.0.0.1:${rport[$1]}\"]}}"; }
fgconf mem "server: {listen: \"127.0.0.1:${port[mem]}\", trusted_proxies: [127.0.0.1]}
store: {type: memory}
routes:
  - id: api
    match: {path: /**}
    upstream: {targets: [\"http://127.0.0.1:$UP\"]}
    limits:
      - {name: user, key: [\"header:X-User-Id\"], rate: 1/10s}"
fgconf redis "server: {listen: \"127.0.0.1:${port[redis]}\", trusted_proxies: [127.0.0.1]}
store: $(redisstore redis)
routes:
  - id: api
    match: {path: /**}
    upstream: {targets: [\"http://127.0.0.1:$UP\"]}
    limits:
      - {name: user, key: [\"header:X-User-Id\"], rate: 1/10s}"
fgconf plain "server: {listen: \"127.0.0.1:${port[plain]}\"}
routes:
  - id: api
    match: {path: /**}
    upstream: {targets: [\"http://127.0.0.1:$UP\"]}"
# bench/proxy.sh's fg-limits, local rejects on (the default) and said.
fgconf four "server: {listen: \"127.0.0.1:${port[four]}\", trusted_proxies: [127.0.0.1]}
store: $(redisstore four)
global_limits:
  - {name: global, key: [global], rate: 100000000/s}
routes:
  - id: api
    match: {path: /**}
    upstream: {targets: [\"http://127.0.0.1:$UP\"]}
    limits:
      - {name: api, key: [route], rate: 100000000/s}
      - {name: user, key: [\"header:X-User-Id\", path], fallback: [ip], rate: 1000000/10s}
      - {name: ip, key: [ip], rate: 1000000/min}"
# bench/rls.sh's service and rule file.
mkdir -p "$tmp/rules"
cat >"$tmp/rules/edge.yaml" <<'EOF'
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1000000000}
EOF
fgconf rls "server: {listen: \"127.0.0.1:$(freeport)\"}
rls: {listen: \"127.0.0.1:${port[rls]}\", config_dir: $tmp/rules}
store: {type: redis, local_rejects: true, redis: {addrs: [\"127.0.0.1:${rport[rls]}\"], timeout: 1s}}"

for c in mem redis plain four rls; do
	if ! "$tmp/floodgate" check -c "$tmp/$c.yaml" >"$tmp/check.out" 2>&1; then
		echo "bench/floor.sh: floodgate refuses the $c configuration:" >&2
		cat "$tmp/check.out" "$tmp/$c.yaml" >&2
		exit 1
	fi
	# The rejections' WARN lines are sampled per route and limit; to a file.
	"$tmp/floodgate" serve -c "$tmp/$c.yaml" --watch=false >"$tmp/$c.log" 2>&1 &
	pid[$c]=$!
	pids+=($!)
done
"$tmp/flood" -bare "127.0.0.1:${port[bare]}" 2>"$tmp/bare.log" &
pid[bare]=$!
pids+=($!)
for m in bare stock; do
	"$tmp/refproxy" -mode $m -listen "127.0.0.1:${port[go-$m]}" -upstream "http://127.0.0.1:$UP" 2>"$tmp/go-$m.log" &
	pid[go-$m]=$!
	pids+=($!)
done
"$tmp/rlsload" -serve "127.0.0.1:${port[nothing]}" >"$tmp/nothing.log" 2>&1 &
pid[nothing]=$!
pids+=($!)

# Every contender up, and doing its work: a flood contender admits a new
# user once and rejects it the second time; a proxy answers 200 (four with
# its RateLimit headers); an RLS server answers a call OK.
for c in "${FLOOD[@]}" "${PROXY[@]}"; do
	for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:${port[$c]}/" && break; sleep 0.1; done
done
for c in "${FLOOD[@]}"; do
	a=$(curl -s -o /dev/null -w '%{http_code}' -H "X-User-Id: probe-$c" "http://127.0.0.1:${port[$c]}/x")
	b=$(curl -s -o /dev/null -w '%{http_code}' -H "X-User-Id: probe-$c" "http://127.0.0.1:${port[$c]}/x")
	[ "$a $b" = "200 429" ] || { echo "bench/floor.sh: $c answered $a then $b, not 200 then 429" >&2; exit 1; }
done
for c in "${PROXY[@]}"; do
	a=$(curl -s -o /dev/null -w '%{http_code}' -H "X-User-Id: probe" "http://127.0.0.1:${port[$c]}/x")
	[ "$a" = 200 ] || { echo "bench/floor.sh: $c answered $a, not 200:" >&2; curl -s -D - "http://127.0.0.1:${port[$c]}/x" >&2; exit 1; }
done
curl -sf "http://127.0.0.1:${port[four]}/x" -H 'X-User-Id: 1' -D - -o /dev/null | grep -qi '^ratelimit' || { echo "bench/floor.sh: four is not limiting" >&2; exit 1; }
for c in "${RLS[@]}"; do
	ok=
	for _ in $(seq 300); do
		kill -0 "${pid[$c]}" 2>/dev/null || break
		if "$tmp/rlsload" -addr "127.0.0.1:${port[$c]}" -callers 1 -conns 1 -duration 1ms >/dev/null 2>&1; then ok=1; break; fi
		sleep 0.1
	done
	[ -n "$ok" ] || { echo "bench/floor.sh: $c does not answer on 127.0.0.1:${port[$c]}:" >&2; tail -20 "$tmp/$c.log" >&2; exit 1; }
done

# wrk scripts: users (and addresses) drawn per request, the answers counted
# by status and summed over the threads at the end.
wrklua() { # file users
	cat >"$1" <<LUA
local threads, n = {}, 0
function setup(thread)
  n = n + 1
  thread:set("id", n)
  table.insert(threads, thread)
end
function init(args)
  math.randomseed(os.time() * 1000 + id)
  n200, n429, nother = 0, 0, 0
end
function request()
  local u, j = math.random(1, $2), math.random(1, 100000)
  wrk.headers["X-User-Id"] = "u" .. u
  wrk.headers["X-Forwarded-For"] = string.format("10.%d.%d.%d", math.floor(j / 65536) % 256, math.floor(j / 256) % 256, j % 256)
  return wrk.format(nil, "/api/activities/lucky-meal/receive")
end
function response(status, headers, body)
  if status == 200 then n200 = n200 + 1 elseif status == 429 then n429 = n429 + 1 else nother = nother + 1 end
end
function done(summary, latency, requests)
  local a, b, c = 0, 0, 0
  for _, t in ipairs(threads) do a = a + t:get("n200"); b = b + t:get("n429"); c = c + t:get("nother") end
  io.write(string.format("status %d %d %d\n", a, b, c))
end
LUA
}
wrklua "$tmp/flood.lua" 2000
wrklua "$tmp/proxy.lua" 100000

HZ=$(getconf CLK_TCK)
# ticks PID: the process's user and system CPU so far, in clock ticks.
ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
# redis_cpu CONTENDER: its Redis's user and system CPU so far, in seconds.
redis_cpu() { redis-cli -p "${rport[$1]}" INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f", s}'; }
perreq() { awk -v t="$1" -v n="$2" -v hz="$HZ" 'BEGIN{printf "%.1f", n ? t * 1e6 / hz / n : 0}'; } # ticks requests

# rls_ready CONTENDER: waits (up to 10 s) until one call is answered OK, so
# that a run starts on a server that answers.
rls_ready() {
	for _ in $(seq 100); do
		"$tmp/rlsload" -addr "127.0.0.1:${port[$1]}" -callers 1 -conns 1 -duration 1ms >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "bench/floor.sh: $1 does not answer OK" >&2
	exit 1
}

# run CONTENDER ROUND: one run; a row "round group contender req/s 200 429
# other gw-µs up-µs redis-µs" to $tmp/rows.
run() {
	local c=$1 g=${group[$1]} g0 u0 r0 rps s200 s429 sother errs n gw up red=- out
	if [ "$g" = rls ]; then
		rls_ready "$c"
		"$tmp/rlsload" -addr "127.0.0.1:${port[$c]}" -duration 1s >/dev/null 2>>"$tmp/rlsload.err"
		rls_ready "$c"
	else
		wrk -t2 -c64 -d1s -s "$tmp/$g.lua" "http://127.0.0.1:${port[$c]}/" >/dev/null 2>&1
	fi
	g0=$(ticks "${pid[$c]}"); u0=$(ticks "$uppid")
	[ -n "${rport[$c]:-}" ] && r0=$(redis_cpu "$c")
	if [ "$g" = rls ]; then
		out=$("$tmp/rlsload" -addr "127.0.0.1:${port[$c]}" -duration "${SECS}s" -timeout 1s 2>>"$tmp/rlsload.err") ||
			{ echo "bench/floor.sh: rlsload against $c failed:" >&2; cat "$tmp/rlsload.err" >&2; tail -5 "$tmp/$c.log" >&2; exit 1; }
		# calls N failed N seconds S calls/s R p50 Xµs p99 Yµs cpu Zµs/call
		read -r n sother rps < <(echo "$out" | awk '{printf "%d %d %.0f\n", $2, $4, $8}')
		s200=$((n - sother)) s429=-
	else
		wrk -t2 -c64 -d"${SECS}s" -s "$tmp/$g.lua" "http://127.0.0.1:${port[$c]}/" >"$tmp/wrk.out" 2>&1
		rps=$(awk '/Requests\/sec/ {printf "%.0f", $2}' "$tmp/wrk.out")
		read -r _ s200 s429 sother < <(grep '^status ' "$tmp/wrk.out")
		errs=$(awk '/Socket errors/ {gsub(/,/, ""); print $4 + $6 + $8 + $10}' "$tmp/wrk.out")
		n=$((s200 + s429 + sother))
		sother=$((sother + ${errs:-0}))
		# A proxy that answers anything but 200 is not doing the work.
		[ "$g" = proxy ] && sother=$((sother + s429))
	fi
	gw=$(perreq $(($(ticks "${pid[$c]}") - g0)) "$n")
	up=$(perreq $(($(ticks "$uppid") - u0)) "$n")
	[ "$g" = rls ] && up=-
	[ -n "${rport[$c]:-}" ] && red=$(awk -v a="$r0" -v b="$(redis_cpu "$c")" -v n="$n" 'BEGIN{printf "%.2f", n ? (b - a) * 1e6 / n : 0}')
	echo "$2 $g $c $rps $s200 $s429 $sother $gw $up $red" >>"$tmp/rows"
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), ${NGINX:+$(nginx -v 2>&1 | cut -d' ' -f3), }redis $(redis-server --version | cut -d' ' -f3 | cut -d= -f2), $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2), $(go version | cut -d' ' -f3), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "wrk -t2 -c64 -d${SECS}s (flood: 2,000 users over their limit; proxy: 100,000 users and addresses); rlsload 64 callers, 4 connections, 1 s deadlines, ${SECS}s"
[ -n "$NGINX" ] || echo "no nginx: the nginx contenders left out, the upstream a minimal net/http server"
hdr="%-6s %-10s %9s %9s %9s %7s %8s %8s %9s\n"
for i in $(seq "$ROUNDS"); do
	for c in "${ALL[@]}"; do run "$c" "$i"; done
	echo
	echo "round $i (CPU µs per request: gw = the contender's process, up = the upstream's nginx worker, redis = its Redis)"
	printf "$hdr" group contender req/s 200/OK 429 other "gw µs" "up µs" "redis µs"
	awk -v r="$i" -v f="$hdr" '$1 == r {printf f, $2, $3, $4, $5, $6, $7, $8, $9, $10}' "$tmp/rows"
done
[ -s "$tmp/rlsload.err" ] && { echo "rlsload reported errors; the first:" >&2; sort -u "$tmp/rlsload.err" | head -5 >&2; }

median() { sort -g | awk '$1 == "-" {dash = 1} {a[NR] = $1} END {if (!NR || dash) print "-"; else print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
col() { awk -v c="$1" -v k="$2" '$3 == c {print $k}' "$tmp/rows" | median; } # contender column
ratio() { # contender-a contender-b: median over the rounds of a's req/s / b's
	awk -v a="$1" -v b="$2" '$3 == a {x[$1] = $4} $3 == b {y[$1] = $4}
		END {for (r in x) if (y[r] > 0) printf "%.3f\n", x[r] / y[r]}' "$tmp/rows" | median
}
# cpuratio CONTENDER-A CONTENDER-B: median over the rounds of B's CPU per
# request / A's (A's speed against B's, by the CPU of its own process).
cpuratio() {
	awk -v a="$1" -v b="$2" '$3 == a {x[$1] = $8} $3 == b {y[$1] = $8}
		END {for (r in x) if (x[r] > 0) printf "%.3f\n", y[r] / x[r]}' "$tmp/rows" | median
}
echo
echo "medians over $ROUNDS rounds:"
printf "$hdr" group contender req/s 200/OK 429 other "gw µs" "up µs" "redis µs"
for c in "${ALL[@]}"; do
	# shellcheck disable=SC2046 # one word per column
	printf "$hdr" "${group[$c]}" "$c" $(for k in 4 5 6 7 8 9 10; do col "$c" $k; done)
done
mem_bare=$(ratio mem bare); redis_bare=$(ratio redis bare)
four_plain=$(ratio four plain); plain_ref=$(ratio plain go-bare); plain_stock=$(ratio plain go-stock); rls_no=$(ratio rls nothing)
echo
echo "medians of the per-round ratios of requests/s:"
echo "  flood:  mem/bare $mem_bare, redis/bare $redis_bare${NGINX:+, bare/ngx-limit $(ratio bare ngx-limit), mem/ngx-limit $(ratio mem ngx-limit)}"
echo "  proxy:  four/plain $four_plain, plain/go-bare $plain_ref, plain/go-stock $plain_stock${NGINX:+, go-bare/ngx-proxy $(ratio go-bare ngx-proxy), plain/ngx-proxy $(ratio plain ngx-proxy)}"
echo "  rls:    rls/nothing $rls_no"
c_mem=$(cpuratio mem bare); c_redis=$(cpuratio redis bare); c_four=$(cpuratio four plain); c_ref=$(cpuratio plain go-bare); c_rls=$(cpuratio rls nothing)
echo "the same by CPU per request (the floor's µs / floodgate's, its own process): mem $c_mem, redis $c_redis, four/plain $c_four, plain/go-bare $c_ref, rls $c_rls"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

met() { awk -v v="$1" -v t="$2" 'BEGIN{ if (v == "-" || v == "") print "?"; else print (v >= t) ? "yes" : "**no**" }'; }
rs() { col "$1" 4; }
us() { col "$1" 8; }
echo
echo "summary, $(date -u '+%Y-%m-%d %H:%M') UTC, bench/floor.sh $ROUNDS $SECS ($(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); medians of $ROUNDS rounds, one sitting):"
echo
echo "| target | requests/s ratio (req/s; CPU µs/req) | by CPU per request | met (requests/s) |"
echo "|---|---|---|---|"
echo "| flood of limited users, memory ≥ 0.9 × bare 429 | $mem_bare ($(rs mem) against $(rs bare); $(us mem) against $(us bare) µs) | $c_mem | $(met "$mem_bare" 0.9) |"
echo "| flood of limited users, Redis with local rejects ≥ 0.9 × bare 429 | $redis_bare ($(rs redis) against $(rs bare); $(us redis) µs, Redis $(col redis 10) µs) | $c_redis | $(met "$redis_bare" 0.9) |"
echo "| proxy with four Redis limits ≥ 0.85 × floodgate without limits | $four_plain ($(rs four) against $(rs plain); $(us four) against $(us plain) µs, Redis $(col four 10) µs) | $c_four | $(met "$four_plain" 0.85) |"
echo "| RLS on Redis ≥ 0.75 × do-nothing gRPC | $rls_no ($(rs rls) against $(rs nothing) calls/s; $(us rls) against $(us nothing) µs, Redis $(col rls 10) µs) | $c_rls | $(met "$rls_no" 0.75) |"
echo "| (no target) floodgate without limits / bare Go proxy | $plain_ref ($(rs plain) against $(rs go-bare); $(us plain) against $(us go-bare) µs; against httputil.ReverseProxy as it comes: $plain_stock, $(rs go-stock) req/s, $(us go-stock) µs) | $c_ref | |"
if [ -n "$NGINX" ]; then
	echo "| (no target) nginx: limit_req, proxy_pass | $(rs ngx-limit) req/s, $(us ngx-limit) µs; $(rs ngx-proxy) req/s, $(us ngx-proxy) µs | | |"
fi
