#!/usr/bin/env bash
# What a flood of users who are already over their limit costs, side by side
# in one run.
#
#   bench/flood.sh [ROUNDS] [SECONDS]
#
# Defaults: 3 rounds, 10 s per run (about 6 minutes in all). Needs wrk, nginx,
# redis-server, redis-cli, curl and python3 (for free ports), and Go (apt-get
# install wrk nginx-light redis-server); Linux, for the CPU accounting in
# /proc. Everything listens on free 127.0.0.1 ports under a temporary
# directory and is stopped at the end.
#
# Seven contenders stand in front of one tiny nginx upstream that answers "ok"
# (1 worker), each limiting every user, by the header X-User-Id, to 1
# request per 10 s:
#   nginx      nginx limit_req keyed on $http_x_user_id, rate=6r/m (one
#              request every 10 s), burst 0, limit_req_status 429, the
#              rejections not logged (error_log crit), 1 worker
#   bare       the cheapest 429 net/http gives (bench/flood -bare): a
#              handler with a map of users, no framing guard, routing or
#              metrics, writing a fixed 429 with floodgate's headers; the
#              reference for what of the 429's cost is net/http's own
#   mem        floodgate, one fixed-window limit 1/10s, store: memory
#   redis-off  the same on Redis, store.local_rejects: false (every
#              request asks Redis)
#   redis-on   the same, store.local_rejects: true (the default: a key the
#              instance knows to be exhausted is rejected without asking)
#   four-on    the seeds' four limits (global, api, user, ip: bench/proxy.sh's
#              fg-limits) on Redis, sized so that the user limit 1/10s is the
#              one that rejects, local rejects on
#   four-off   the same, local rejects off
# Each Redis contender has its own redis-server (--save "" --appendonly no),
# so that its CPU and commands are its alone. Every floodgate believes
# 127.0.0.1's X-Forwarded-For, so the ip limit counts the addresses the
# load generators draw.
#
# Each round runs every contender in turn, twice:
#   closed loop  wrk -t2 -c64 -d SECONDS, each request from one of 2,000
#                users (and one of 100,000 addresses), after a 1 s warm-up
#                that puts every user over the limit: nearly every request
#                is rejected. A wrk Lua response hook counts 200, 429 and
#                other answers.
#   open loop    the seeds' surge, floodgate load's generator (bench/flood:
#                the same rehearse.Run, which also times the admitted
#                answers apart): 200/s, a jump to 5,000/s at 2 s held for a
#                second, a fall to 1,000/s over the next, then 1,000/s
#                ±15 %; 20,000 users and addresses; every 429 re-sent at
#                once, up to 3 times. Not nginx.
# For every run: requests/s, the status mix, the gateway's CPU per request
# (/proc/PID/stat utime+stime; nginx: its worker), Redis's CPU per request
# (INFO cpu, used_cpu_user+used_cpu_sys), Redis's calls per request (INFO
# commandstats after CONFIG RESETSTAT; "evals" counts EVAL/EVALSHA/FCALL,
# the store's decision calls, each one round trip for one decision or a
# batch; "cmds" counts every command, those its scripts run included; the
# script's own INFO and CONFIG calls are left out) and the share of
# floodgate's rejections answered without a store call
# (gateway_ratelimit_local_answers_total / gateway_rate_limited_total), and
# its store errors (gateway_ratelimit_store_errors_total: decisions over
# store.redis.timeout, or skipped while the gateway stops asking a failing
# Redis, all made by on_error instead; a run with many of them asked Redis
# less than it should have, and its Redis numbers are too low). In the open
# loop "per request" is per attempt, retries included.
#
# Targets (ratios taken per round, medians reported):
#   closed loop, local rejects on, one limit and four: Redis CPU
#     <= 0.5 µs/request and <= 0.02 Redis commands/request
#   requests/s redis-on / mem >= 0.95
#   requests/s mem / nginx >= 0.7
#   open loop (surge), local rejects on: <= 0.15 Redis commands/request;
#     the p99 of admitted answers with local rejects on against off
# Redis's CPU at rest (its cron, the gateway's pings) counts in its CPU per
# request: the script measures it while nginx runs and the summary says
# how much of the µs/request it is. The last lines are a markdown summary
# for docs/bench-log.md.
set -euo pipefail
ROUNDS=${1:-3}
SECS=${2:-10}
cd "$(dirname "$0")/.."
for cmd in wrk nginx redis-server redis-cli curl python3 go; do
	command -v $cmd >/dev/null || { echo "bench/flood.sh needs $cmd (apt-get install wrk nginx-light redis-server)" >&2; exit 1; }
done

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for f in "$tmp"/*.nginx.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

. bench/lib.sh
go build -o "$tmp/floodgate" ./cmd/floodgate
go build -o "$tmp/flood" ./bench/flood

CLOSED=(nginx bare mem redis-off redis-on four-on four-off)
OPEN=(mem redis-off redis-on four-on four-off)
REDIS=(redis-off redis-on four-on four-off)
declare -A port admin rport gwpid rpid idle0
UP=$(freeport)
for c in "${CLOSED[@]}"; do port[$c]=$(freeport); done

# nginx: the upstream, and the limit_req contender.
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
ngx up "$UP" 'location / { return 200 "ok"; }'
ngx limit "${port[nginx]}" 'location / { limit_req zone=u; limit_req_status 429; proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }' \
	'limit_req_zone $http_x_user_id zone=u:10m rate=6r/m;'

for c in "${REDIS[@]}"; do
	rport[$c]=$(freeport)
	mkdir -p "$tmp/redis-$c"
	redis-server --port "${rport[$c]}" --bind 127.0.0.1 --dir "$tmp/redis-$c" --save "" --appendonly no >"$tmp/redis-$c.log" 2>&1 &
	rpid[$c]=$!
	pids+=($!)
done

fgconf() { # contender store-block limits(one|four)
	local c=$1
	admin[$c]=$(freeport)
	{
		echo "server: {listen: \"127.0.0.1:${port[$c]}\", trusted_proxies: [127.0.0.1]}"
		echo "admin: {listen: \"127.0.0.1:${admin[$c]}\"}"
		echo "store: $2"
		if [ "$3" = four ]; then
			echo "global_limits:"
			echo "  - {name: global, key: [global], rate: 100000000/s}"
		fi
		echo "routes:"
		echo "  - id: api"
		echo "    match: {path: /**}"
		echo "    upstream: {targets: [\"http://127.0.0.1:$UP\"]}"
		echo "    limits:"
		if [ "$3" = four ]; then
			echo "      - {name: api, key: [route], rate: 100000000/s}"
			echo "      - {name: user, key: [\"header:X-User-Id\", path], fallback: [ip], rate: 1/10s}"
			echo "      - {name: ip, key: [ip], rate: 1000000/min}"
		else
			echo "      - {name: user, key: [\"header:X-User-Id\"], rate: 1/10s}"
		fi
	} >"$tmp/$c.yaml"
}
redisstore() { echo "{type: redis, local_rejects: $2, redis: {addrs: [\"127.0.0.1:${rport[$1]}\"]}}"; }
fgconf mem "{type: memory}" one
fgconf redis-off "$(redisstore redis-off false)" one
fgconf redis-on "$(redisstore redis-on true)" one
fgconf four-on "$(redisstore four-on true)" four
fgconf four-off "$(redisstore four-off false)" four
for c in "${OPEN[@]}"; do
	if ! "$tmp/floodgate" check -c "$tmp/$c.yaml" >"$tmp/check.out" 2>&1; then
		echo "bench/flood.sh: floodgate refuses the $c configuration:" >&2
		cat "$tmp/check.out" "$tmp/$c.yaml" >&2
		exit 1
	fi
done
for c in "${OPEN[@]}"; do
	# The rejections' WARN lines are sampled per route and limit; to a file.
	"$tmp/floodgate" serve -c "$tmp/$c.yaml" --watch=false 2>"$tmp/$c.log" &
	gwpid[$c]=$!
	pids+=($!)
done

# The bare net/http reference (bench/flood -bare).
"$tmp/flood" -bare "127.0.0.1:${port[bare]}" &
gwpid[bare]=$!
pids+=($!)

for c in "${CLOSED[@]}"; do
	for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:${port[$c]}/" && break; sleep 0.1; done
done
# The nginx contender's worker, whose CPU is the one that counts.
master=$(cat "$tmp/limit.nginx.pid")
for _ in $(seq 50); do
	gwpid[nginx]=$(pgrep -P "$master" | head -1 || true)
	[ -n "${gwpid[nginx]}" ] && break
	sleep 0.1
done
[ -n "${gwpid[nginx]}" ] || { echo "bench/flood.sh: no nginx worker under $master" >&2; exit 1; }
# Every contender admits a new user once and rejects it the second time.
for c in "${CLOSED[@]}"; do
	a=$(curl -s -o /dev/null -w '%{http_code}' -H "X-User-Id: probe-$c" "http://127.0.0.1:${port[$c]}/x")
	b=$(curl -s -o /dev/null -w '%{http_code}' -H "X-User-Id: probe-$c" "http://127.0.0.1:${port[$c]}/x")
	[ "$a $b" = "200 429" ] || { echo "bench/flood.sh: $c answered $a then $b, not 200 then 429" >&2; exit 1; }
done

cat >"$tmp/flood.lua" <<'LUA'
-- Each request from one of 2,000 users and one of 100,000 addresses; the
-- answers counted by status, summed over the threads at the end.
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
  local u, j = math.random(1, 2000), math.random(1, 100000)
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

HZ=$(getconf CLK_TCK)
# ticks PID: the process's user and system CPU so far, in clock ticks.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rcli() { redis-cli -p "${rport[$1]}" "${@:2}" | tr -d '\r'; }
# redis_cpu CONTENDER: Redis's user and system CPU so far, in seconds.
redis_cpu() { rcli "$1" INFO cpu | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f", s}'; }
# metric CONTENDER NAME: the sum of a floodgate counter over its labels.
metric() { curl -s "http://127.0.0.1:${admin[$1]}/metrics" | awk -v n="$2" '{k = $1; sub(/[{].*/, "", k)} k == n {s += $NF} END {printf "%d", s}'; }

# cmdcalls FILE: "command calls" per line of an INFO commandstats, without
# the INFO and CONFIG calls of this script.
cmdcalls() { awk -F: '/^cmdstat_/ {n = substr($1, 9); match($2, /calls=[0-9]+/); c = substr($2, RSTART + 6, RLENGTH - 6)
	if (n != "info" && n !~ /^config/) print n, c}' "$1"; }

# before/after CONTENDER: the counters around one run; after sets gw_us,
# redis_us, evals, cmds (per request over $nreq requests), lshare and serr
# (the decisions that failed and were made by on_error), "-" where they do
# not apply.
before() {
	g0=$(ticks "${gwpid[$1]}")
	if [ -n "${rport[$1]:-}" ]; then rcli "$1" CONFIG RESETSTAT >/dev/null; r0=$(redis_cpu "$1"); fi
	if [ -n "${admin[$1]:-}" ]; then
		l0=$(metric "$1" gateway_ratelimit_local_answers_total); j0=$(metric "$1" gateway_rate_limited_total)
		e0=$(metric "$1" gateway_ratelimit_store_errors_total)
	fi
	return 0
}
after() {
	local g1 r1
	g1=$(ticks "${gwpid[$1]}")
	gw_us=$(awk -v t=$((g1 - g0)) -v n="$nreq" -v hz="$HZ" 'BEGIN{printf "%.1f", n ? t * 1e6 / hz / n : 0}')
	redis_us=- evals=- cmds=- lshare=- serr=-
	[ -n "${admin[$1]:-}" ] && serr=$(($(metric "$1" gateway_ratelimit_store_errors_total) - e0))
	if [ -n "${rport[$1]:-}" ]; then
		r1=$(redis_cpu "$1")
		rcli "$1" INFO commandstats >"$tmp/cmdstats.$1"
		redis_us=$(awk -v a="$r0" -v b="$r1" -v n="$nreq" 'BEGIN{printf "%.3f", n ? (b - a) * 1e6 / n : 0}')
		read -r evals cmds < <(cmdcalls "$tmp/cmdstats.$1" | awk -v n="$nreq" '{all += $2} $1 ~ /^(eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro)$/ {ev += $2}
			END {printf "%.4f %.4f\n", n ? ev / n : 0, n ? all / n : 0}')
		local l1 j1
		l1=$(metric "$1" gateway_ratelimit_local_answers_total); j1=$(metric "$1" gateway_rate_limited_total)
		lshare=$(awk -v l=$((l1 - l0)) -v j=$((j1 - j0)) 'BEGIN{printf "%.1f", j ? 100 * l / j : 0}')
	fi
}

# closed CONTENDER ROUND: one wrk run; a row to $tmp/closed.
closed() {
	local url="http://127.0.0.1:${port[$1]}/"
	wrk -t2 -c64 -d1s -s "$tmp/flood.lua" "$url" >/dev/null 2>&1
	before "$1"
	wrk -t2 -c64 -d"${SECS}s" -s "$tmp/flood.lua" "$url" >"$tmp/wrk.out" 2>&1
	local rps s200 s429 sother errs
	rps=$(awk '/Requests\/sec/ {print $2}' "$tmp/wrk.out")
	read -r _ s200 s429 sother < <(grep '^status ' "$tmp/wrk.out")
	errs=$(awk '/Socket errors/ {gsub(/,/, ""); print $4 + $6 + $8 + $10}' "$tmp/wrk.out")
	nreq=$((s200 + s429 + sother))
	after "$1"
	echo "$2 $1 $rps $s200 $s429 $((sother + ${errs:-0})) $gw_us $redis_us $evals $cmds $lshare $serr" >>"$tmp/closed"
	cp "$tmp/cmdstats.$1" "$tmp/closed-cmdstats.$1" 2>/dev/null || true
}

# surge CONTENDER ROUND: one open-loop run; a row to $tmp/open.
STEP=$((SECS >= 8 ? 2 : 1))
surge() {
	before "$1"
	"$tmp/flood" -url "http://127.0.0.1:${port[$1]}/api/activities/lucky-meal/receive" -profile surge \
		-rate 5000 -from 200 -step-at "${STEP}s" -duration "${SECS}s" -users 20000 -ips 20000 \
		-retry immediate -seed "$2" >"$tmp/flood.out" 2>&1 || { cat "$tmp/flood.out" >&2; exit 1; }
	local kv
	kv=$(grep '^flood: ' "$tmp/flood.out")
	v() { echo "$kv" | tr ' ' '\n' | awk -F= -v k="$1" '$1 == k {print $2}'; }
	nreq=$(v sent)
	after "$1"
	echo "$2 $1 $nreq $(v ok) $(v 429) $(($(v 503) + $(v other) + $(v errors) + $(v dropped))) $(v p99) $(v ok_p99) $(v lag_p99) $gw_us $redis_us $evals $cmds $lshare $serr" >>"$tmp/open"
	cp "$tmp/cmdstats.$1" "$tmp/open-cmdstats.$1" 2>/dev/null || true
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nginx -v 2>&1 | cut -d' ' -f3), redis $(redis-server --version | cut -d' ' -f3 | cut -d= -f2), $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2), $(go version | cut -d' ' -f3), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "closed loop: wrk -t2 -c64 -d${SECS}s, 2,000 users; open loop: surge 200 -> 5000/s at ${STEP}s, ${SECS}s, 20,000 users, --retry immediate"
hclosed="%-9s %10s %8s %9s %6s %8s %9s %7s %7s %6s %6s"
hopen="%-9s %7s %6s %6s %6s %8s %8s %7s %8s %9s %7s %7s %6s %6s"
for i in $(seq "$ROUNDS"); do
	# Redis's own CPU at rest, with its gateway connected but idle: while
	# nginx runs.
	for c in "${REDIS[@]}"; do idle0[$c]=$(redis_cpu "$c"); done
	t0=$(date +%s.%N)
	for c in "${CLOSED[@]}"; do
		closed "$c" "$i"
		if [ "$c" = nginx ]; then
			t1=$(date +%s.%N)
			for r in "${REDIS[@]}"; do echo "$(redis_cpu "$r") ${idle0[$r]} $t0 $t1"; done |
				awk -v r="$i" '{s += ($1 - $2) * 1000 / ($4 - $3)} END {printf "%d %.2f\n", r, s / NR}' >>"$tmp/idle"
		fi
	done
	echo
	echo "round $i: an idle Redis used $(awk -v r="$i" '$1 == r {print $2}' "$tmp/idle") ms of CPU per second"
	echo "round $i, closed loop (per request: gateway CPU µs, Redis CPU µs, Redis evals and commands; local: % of rejections answered without Redis; serr: store errors, decided by on_error)"
	printf "$hclosed\n" contender req/s 200 429 other "gw µs" "redis µs" evals cmds local% serr
	awk -v r="$i" -v f="$hclosed" '$1 == r {printf f "\n", $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12}' "$tmp/closed"
	for c in "${OPEN[@]}"; do surge "$c" "$i"; done
	echo "round $i, open loop (per attempt, retries included; p99 of all from the scheduled send, p99 of 200s from their send, ms)"
	printf "$hopen\n" contender sent 200 429 other p99 "200 p99" "lag p99" "gw µs" "redis µs" evals cmds local% serr
	awk -v r="$i" -v f="$hopen" '$1 == r {printf f "\n", $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15}' "$tmp/open"
done

# Medians per contender, and of the per-round ratios.
median() { sort -n | awk '$1 == "-" {dash = 1} {a[NR] = $1} END {if (!NR || dash) print "-"; else print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
col() { awk -v c="$2" -v k="$3" '$2 == c {print $k}' "$1" | median; } # file contender column
ratio() { # file column contender-a contender-b: median of a/b over the rounds
	awk -v k="$2" -v a="$3" -v b="$4" '$2 == a {x[$1] = $k} $2 == b {y[$1] = $k}
		END {for (r in x) if (y[r] > 0) printf "%.3f\n", x[r] / y[r]}' "$1" | median
}
echo
echo "medians over $ROUNDS rounds, closed loop:"
printf "$hclosed\n" contender req/s 200 429 other "gw µs" "redis µs" evals cmds local% serr
for c in "${CLOSED[@]}"; do
	printf "$hclosed\n" "$c" $(for k in 3 4 5 6 7 8 9 10 11 12; do col "$tmp/closed" "$c" $k; done)
done
echo "medians over $ROUNDS rounds, open loop:"
printf "$hopen\n" contender sent 200 429 other p99 "200 p99" "lag p99" "gw µs" "redis µs" evals cmds local% serr
for c in "${OPEN[@]}"; do
	printf "$hopen\n" "$c" $(for k in 3 4 5 6 7 8 9 10 11 12 13 14 15; do col "$tmp/open" "$c" $k; done)
done
for f in closed open; do
	for c in redis-on four-on; do
		[ -f "$tmp/$f-cmdstats.$c" ] || continue
		echo "$f loop, $c, Redis commands of the last round: $(cmdcalls "$tmp/$f-cmdstats.$c" | tr '\n' ' ')"
	done
done

met() { awk -v v="$1" -v t="$3" -v op="$2" 'BEGIN{ if (v == "-" || v == "") print "?"; else if (op == "le") print (v <= t) ? "yes" : "**no**"; else print (v >= t) ? "yes" : "**no**" }'; }
both() { [ "$(met "$1" "$5" "$3")" = yes ] && [ "$(met "$2" "$5" "$4")" = yes ] && echo yes || echo "**no**"; } # a b target-a target-b op
c_on_r=$(col "$tmp/closed" redis-on 8); c_four_r=$(col "$tmp/closed" four-on 8)
c_on_e=$(col "$tmp/closed" redis-on 9); c_four_e=$(col "$tmp/closed" four-on 9)
c_on_c=$(col "$tmp/closed" redis-on 10); c_four_c=$(col "$tmp/closed" four-on 10)
on_mem=$(ratio "$tmp/closed" 3 redis-on mem); four_mem=$(ratio "$tmp/closed" 3 four-on mem)
mem_ngx=$(ratio "$tmp/closed" 3 mem nginx)
bare_ngx=$(ratio "$tmp/closed" 3 bare nginx); mem_bare=$(ratio "$tmp/closed" 3 mem bare)
o_on_e=$(col "$tmp/open" redis-on 12); o_four_e=$(col "$tmp/open" four-on 12)
o_on_c=$(col "$tmp/open" redis-on 13); o_four_c=$(col "$tmp/open" four-on 13)
p_on=$(col "$tmp/open" redis-on 8); p_off=$(col "$tmp/open" redis-off 8)
p4_on=$(col "$tmp/open" four-on 8); p4_off=$(col "$tmp/open" four-off 8)
echo
echo "summary, $(date -u '+%Y-%m-%d %H:%M') UTC, bench/flood.sh $ROUNDS $SECS ($(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nginx -v 2>&1 | cut -d' ' -f3), Redis $(redis-server --version | cut -d' ' -f3 | cut -d= -f2); medians of $ROUNDS rounds):"
echo
echo "| target | one limit | four limits | met |"
echo "|---|---|---|---|"
idle=$(awk '{print $2}' "$tmp/idle" | median)
idle_on=$(awk -v i="$idle" -v r="$(col "$tmp/closed" redis-on 3)" 'BEGIN{printf "%.2f", i * 1000 / r}')
idle_four=$(awk -v i="$idle" -v r="$(col "$tmp/closed" four-on 3)" 'BEGIN{printf "%.2f", i * 1000 / r}')
echo "| flood, local rejects: Redis CPU ≤ 0.5 µs/request | $c_on_r µs, $idle_on of it Redis at rest (off: $(col "$tmp/closed" redis-off 8)) | $c_four_r µs, $idle_four at rest (off: $(col "$tmp/closed" four-off 8)) | $(both "$c_on_r" "$c_four_r" 0.5 0.5 le) |"
echo "| flood, local rejects: ≤ 0.02 Redis commands/request | $c_on_e evals, $c_on_c commands with those scripts run (off: $(col "$tmp/closed" redis-off 9), $(col "$tmp/closed" redis-off 10)) | $c_four_e evals, $c_four_c commands (off: $(col "$tmp/closed" four-off 9), $(col "$tmp/closed" four-off 10)) | evals $(both "$c_on_e" "$c_four_e" 0.02 0.02 le), commands $(both "$c_on_c" "$c_four_c" 0.02 0.02 le) |"
echo "| flood: requests/s with local rejects ≥ 0.95 × memory store | $on_mem (redis-off: $(ratio "$tmp/closed" 3 redis-off mem)) | $four_mem (four-off: $(ratio "$tmp/closed" 3 four-off mem)) | $(met "$on_mem" ge 0.95) (one limit) |"
echo "| flood: requests/s memory store ≥ 0.7 × nginx limit_req | $mem_ngx ($(col "$tmp/closed" mem 3) against $(col "$tmp/closed" nginx 3) req/s; a bare net/http limiter: $bare_ngx × nginx, floodgate $mem_bare × it) | | $(met "$mem_ngx" ge 0.7) |"
echo "| surge, local rejects: ≤ 0.15 Redis commands/request | $o_on_e evals, $o_on_c commands (off: $(col "$tmp/open" redis-off 12), $(col "$tmp/open" redis-off 13)) | $o_four_e evals, $o_four_c commands (off: $(col "$tmp/open" four-off 12), $(col "$tmp/open" four-off 13)) | evals $(both "$o_on_e" "$o_four_e" 0.15 0.15 le), commands $(both "$o_on_c" "$o_four_c" 0.15 0.15 le) |"
echo "| surge: Redis CPU µs/request, local rejects on (off) | $(col "$tmp/open" redis-on 11) ($(col "$tmp/open" redis-off 11)) | $(col "$tmp/open" four-on 11) ($(col "$tmp/open" four-off 11)) | |"
echo "| surge: p99 of admitted (200) answers, local rejects on / off | $p_on / $p_off ms (median of the rounds' ratios $(ratio "$tmp/open" 8 redis-on redis-off); store errors $(col "$tmp/open" redis-on 15) / $(col "$tmp/open" redis-off 15)) | $p4_on / $p4_off ms ($(ratio "$tmp/open" 8 four-on four-off); store errors $(col "$tmp/open" four-on 15) / $(col "$tmp/open" four-off 15)) | |"
