#!/usr/bin/env bash
# Every decision to Kafka during a flood: what events.audit all costs the
# gateway, side by side in one run, and how many events a second one
# gateway's recorder sustains to Kafka.
#
#   bench/audit.sh [ROUNDS] [SECONDS] [RECORD_RATE]
#
# Defaults: 3 rounds, 10 s per run, 50,000 events/s (about 6 minutes in
# all). Needs wrk, redis-server, redis-cli, curl, python3 (for free
# ports) and Go (apt-get install wrk redis-server); Linux, for the CPU
# accounting in /proc. Everything listens on free 127.0.0.1 ports under
# a temporary directory and is stopped at the end.
#
# The Kafka cluster is franz-go's kfake in a process of its own (bench/kafka
# serve: 3 brokers, in memory, the real protocol), one topic of 6
# partitions per contender. Four floodgates, bench/flood.sh's closed-loop
# contenders, in front of one nginx-less upstream (floodgate upstream):
#   mem         one limit, user 1/10s by X-User-Id, store: memory
#   mem-audit   the same with events.audit: all to Kafka (sink: kafka,
#               acks all, a spool): every decision is an event
#   four        the seeds' four limits on Redis, local rejects on
#   four-audit  the same with events.audit: all to Kafka
# Each round runs every contender in turn, twice: the closed loop (wrk
# -t2 -c64, 2,000 users over their limit after a 1 s warm-up: nearly
# every request a 429 and an event) and the seeds' surge (bench/flood:
# 200/s, 5,000/s at 2 s, 20,000 users, every 429 re-sent at once, up to 3
# times). For every run: requests/s, the gateway's CPU per request
# (/proc/PID/stat), and for the audit contenders the events per request
# (gateway_events_total recorded), those dropped or failed, and the
# gateway's CPU per event: the CPU per request over the contender without
# audit in the same round, divided by the events per request.
#
# At the end the spools drain, and each audit contender's topic is read
# whole (bench/kafka count): every event recorded must be there, with
# the distinct ids counted apart from the records (a redelivery after a
# slow ack is the same id twice). Then one recorder (bench/kafka record,
# the gateway's events.Recorder with the Kafka sink and a spool) is driven
# at RECORD_RATE events/s for 30 s; its topic is read likewise.
#
# Targets: requests/s with audit >= 0.9 x without, in the same round;
# gateway CPU per recorded event <= 2 µs; no event dropped (spool
# included); RECORD_RATE events/s sustained with no loss.
set -euo pipefail
ROUNDS=${1:-3}
SECS=${2:-10}
RATE=${3:-50000}
cd "$(dirname "$0")/.."
for cmd in wrk redis-server redis-cli curl python3 go; do
	command -v $cmd >/dev/null || { echo "bench/audit.sh needs $cmd (apt-get install wrk redis-server)" >&2; exit 1; }
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
go build -o "$tmp/floodgate" ./cmd/floodgate
go build -o "$tmp/flood" ./bench/flood
go build -o "$tmp/kafka" ./bench/kafka

ALL=(mem mem-audit four four-audit)
AUDIT=(mem-audit four-audit)
declare -A port admin gwpid base
base[mem-audit]=mem
base[four-audit]=four

UP=$(freeport)
"$tmp/floodgate" upstream --listen "127.0.0.1:$UP" >"$tmp/upstream.log" 2>&1 &
pids+=($!)
RPORT=$(freeport)
redis-server --port "$RPORT" --bind 127.0.0.1 --dir "$tmp" --save "" --appendonly no >"$tmp/redis.log" 2>&1 &
pids+=($!)
kports="$(freeport),$(freeport),$(freeport)"
"$tmp/kafka" serve -ports "$kports" -topics "mem-audit,four-audit,record" >"$tmp/kafka.out" 2>&1 &
KPID=$!
pids+=($!)
for _ in $(seq 100); do grep -qs '^ready' "$tmp/kafka.out" && break; sleep 0.1; done
BROKERS=$(awk '/^ready/ {print $2}' "$tmp/kafka.out")
[ -n "$BROKERS" ] || { echo "bench/audit.sh: the Kafka cluster did not start:" >&2; cat "$tmp/kafka.out" >&2; exit 1; }
brokers_yaml="[\"${BROKERS//,/\", \"}\"]"

fgconf() { # contender limits(one|four) audit(yes|no)
	local c=$1
	port[$c]=$(freeport)
	admin[$c]=$(freeport)
	{
		echo "server: {listen: \"127.0.0.1:${port[$c]}\", trusted_proxies: [127.0.0.1]}"
		echo "admin: {listen: \"127.0.0.1:${admin[$c]}\"}"
		if [ "$2" = four ]; then
			echo "store: {type: redis, local_rejects: true, redis: {addrs: [\"127.0.0.1:$RPORT\"]}}"
			echo "global_limits:"
			echo "  - {name: global, key: [global], rate: 100000000/s}"
		else
			echo "store: {type: memory}"
		fi
		if [ "$3" = yes ]; then
			echo "events:"
			echo "  sink: kafka"
			echo "  kafka: {brokers: $brokers_yaml, topic: $c}"
			echo "  spool_dir: \"$tmp/spool-$c\""
			echo "  audit: all"
			echo "  headers: [X-User-Id]"
		fi
		echo "routes:"
		echo "  - id: api"
		echo "    match: {path: /**}"
		echo "    upstream: {targets: [\"http://127.0.0.1:$UP\"]}"
		echo "    limits:"
		if [ "$2" = four ]; then
			echo "      - {name: api, key: [route], rate: 100000000/s}"
			echo "      - {name: user, key: [\"header:X-User-Id\", path], fallback: [ip], rate: 1/10s}"
			echo "      - {name: ip, key: [ip], rate: 1000000/min}"
		else
			echo "      - {name: user, key: [\"header:X-User-Id\"], rate: 1/10s}"
		fi
	} >"$tmp/$c.yaml"
}
fgconf mem one no
fgconf mem-audit one yes
fgconf four four no
fgconf four-audit four yes
for c in "${ALL[@]}"; do
	if ! "$tmp/floodgate" check -c "$tmp/$c.yaml" >"$tmp/check.out" 2>&1; then
		echo "bench/audit.sh: floodgate refuses the $c configuration:" >&2
		cat "$tmp/check.out" "$tmp/$c.yaml" >&2
		exit 1
	fi
	"$tmp/floodgate" serve -c "$tmp/$c.yaml" --watch=false 2>"$tmp/$c.log" &
	gwpid[$c]=$!
	pids+=($!)
done
for c in "${ALL[@]}"; do
	for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:${port[$c]}/" && break; sleep 0.1; done
	a=$(curl -s -o /dev/null -w '%{http_code}' -H "X-User-Id: probe-$c" "http://127.0.0.1:${port[$c]}/x")
	b=$(curl -s -o /dev/null -w '%{http_code}' -H "X-User-Id: probe-$c" "http://127.0.0.1:${port[$c]}/x")
	[ "$a $b" = "200 429" ] || { echo "bench/audit.sh: $c answered $a then $b, not 200 then 429" >&2; exit 1; }
done

cat >"$tmp/flood.lua" <<'LUA'
-- Each request from one of 2,000 users and one of 100,000 addresses.
local n = 0
function setup(thread) n = n + 1; thread:set("id", n) end
function init(args) math.randomseed(os.time() * 1000 + id) end
function request()
  local u, j = math.random(1, 2000), math.random(1, 100000)
  wrk.headers["X-User-Id"] = "u" .. u
  wrk.headers["X-Forwarded-For"] = string.format("10.%d.%d.%d", math.floor(j / 65536) % 256, math.floor(j / 256) % 256, j % 256)
  return wrk.format(nil, "/api/activities/lucky-meal/receive")
end
LUA

HZ=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# metric CONTENDER NAME [LABEL-MATCH]: the sum of a floodgate series over
# the lines that contain LABEL-MATCH.
metric() { curl -s "http://127.0.0.1:${admin[$1]}/metrics" | awk -v n="$2" -v m="${3:-}" '{k = $1; sub(/[{].*/, "", k)} k == n && index($1, m) {s += $NF} END {printf "%d", s}'; }
events() { metric "$1" gateway_events_total "result=\"$2\""; }
requests() { metric "$1" gateway_http_requests_total; }

# run MODE CONTENDER ROUND: one run; a row to $tmp/MODE.
run() {
	local mode=$1 c=$2 url="http://127.0.0.1:${port[$2]}/api/activities/lucky-meal/receive"
	[ "$mode" = closed ] && wrk -t2 -c64 -d1s -s "$tmp/flood.lua" "http://127.0.0.1:${port[$c]}/" >/dev/null 2>&1
	local g0 g1 q0 q1 e0 e1 d0 d1 k0 k1 rps
	g0=$(ticks "${gwpid[$c]}"); k0=$(ticks "$KPID"); q0=$(requests "$c")
	e0=$(events "$c" recorded); d0=$(($(events "$c" dropped) + $(events "$c" failed)))
	local t0 t1
	t0=$(date +%s.%N)
	if [ "$mode" = closed ]; then
		wrk -t2 -c64 -d"${SECS}s" -s "$tmp/flood.lua" "http://127.0.0.1:${port[$c]}/" >"$tmp/wrk.out" 2>&1
	else
		"$tmp/flood" -url "$url" -profile surge -rate 5000 -from 200 -step-at 2s -duration "${SECS}s" \
			-users 20000 -ips 20000 -retry immediate -seed "$3" >"$tmp/flood.out" 2>&1 || { cat "$tmp/flood.out" >&2; exit 1; }
	fi
	t1=$(date +%s.%N)
	g1=$(ticks "${gwpid[$c]}"); k1=$(ticks "$KPID"); q1=$(requests "$c")
	e1=$(events "$c" recorded); d1=$(($(events "$c" dropped) + $(events "$c" failed)))
	local n=$((q1 - q0))
	rps=$(awk -v n="$n" -v a="$t0" -v b="$t1" 'BEGIN{printf "%.0f", n / (b - a)}')
	echo "$3 $c $rps $(awk -v t=$((g1 - g0)) -v n="$n" -v hz="$HZ" 'BEGIN{printf "%.2f", n ? t * 1e6 / hz / n : 0}') \
$(awk -v e=$((e1 - e0)) -v n="$n" 'BEGIN{printf "%.3f", n ? e / n : 0}') $((d1 - d0)) \
$(awk -v t=$((k1 - k0)) -v e=$((e1 - e0)) -v hz="$HZ" 'BEGIN{printf "%.2f", e ? t * 1e6 / hz / e : 0}')" >>"$tmp/$mode"
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), redis $(redis-server --version | cut -d' ' -f3 | cut -d= -f2), $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2), $(go version | cut -d' ' -f3), load average $(cut -d' ' -f1-3 /proc/loadavg)"
hdr="%-10s %8s %7s %8s %8s %9s %9s"
# per_event FILE ROUND CONTENDER: the gateway's CPU per event in that
# round: the CPU per request over its base's, per event per request.
per_event() {
	awk -v r="$2" -v c="$3" -v b="${base[$3]:-}" '$1 == r && $2 == c {u = $4; e = $5} $1 == r && $2 == b {v = $4}
		END {if (e > 0) printf "%.2f\n", (u - v) / e; else print "-"}' "$1"
}
show() { # MODE ROUND
	printf "$hdr\n" contender req/s "gw µs" events/r lost "µs/event" "kafka µs"
	for c in "${ALL[@]}"; do
		awk -v r="$2" -v c="$c" -v f="$hdr" -v pe="$(per_event "$tmp/$1" "$2" "$c")" '$1 == r && $2 == c {
			if ($5 == 0) {pe = "-"; $5 = "-"; $6 = "-"; $7 = "-"}
			printf f "\n", $2, $3, $4, $5, $6, pe, $7}' "$tmp/$1"
	done
}
for i in $(seq "$ROUNDS"); do
	for c in "${ALL[@]}"; do run closed "$c" "$i"; done
	echo
	echo "round $i, closed loop (wrk -t2 -c64 -d${SECS}s; per request: gateway CPU µs, events; lost: dropped or failed events; µs/event: the gateway's CPU per event over the contender without audit; kafka µs: the cluster's CPU per event)"
	show closed "$i"
	for c in "${ALL[@]}"; do run open "$c" "$i"; done
	echo "round $i, surge (200 -> 5,000/s at 2 s, ${SECS}s, immediate retries)"
	show open "$i"
done

median() { sort -n | awk '{a[NR] = $1} END {if (!NR) print "-"; else print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
ratio() { # file contender-a contender-b: median over the rounds of a's req/s over b's
	awk -v a="$2" -v b="$3" '$2 == a {x[$1] = $3} $2 == b {y[$1] = $3} END {for (r in x) if (y[r] > 0) printf "%.3f\n", x[r] / y[r]}' "$1" | median
}
pe_median() { for i in $(seq "$ROUNDS"); do per_event "$1" "$i" "$2"; done | median; }
lost() { awk -v c="$2" '$2 == c {s += $6} END {print s + 0}' "$1"; }

# The spools drain; then every recorded event must be in its topic.
for c in "${AUDIT[@]}"; do
	for _ in $(seq 600); do [ "$(metric "$c" gateway_events_spooled)" = 0 ] && break; sleep 0.1; done
done
declare -A recorded found ids
for c in "${AUDIT[@]}"; do
	recorded[$c]=$(events "$c" recorded)
	read -r _ found[$c] _ ids[$c] < <("$tmp/kafka" count -brokers "$BROKERS" -topic "$c")
	echo "$c: recorded ${recorded[$c]} events (dropped $(events "$c" dropped), failed $(events "$c" failed), still spooled $(metric "$c" gateway_events_spooled)); the topic holds ${found[$c]} records of ${ids[$c]} distinct ids"
done
# The gateways stop: what is left is the recorder against the cluster.
for c in "${ALL[@]}"; do kill "${gwpid[$c]}" 2>/dev/null || true; done
echo
echo "recorder: $RATE events/s for 30 s to Kafka with a spool (bench/kafka record)"
mkdir -p "$tmp/spool-record"
"$tmp/kafka" record -brokers "$BROKERS" -topic record -rate "$RATE" -duration 30s -spool "$tmp/spool-record" | tee "$tmp/record.out"
read -r _ rfound _ rids < <("$tmp/kafka" count -brokers "$BROKERS" -topic record)
kv() { tr ' ' '\n' <"$tmp/record.out" | awk -F= -v k="$1" '$1 == k {print $2}'; }
echo "record: the topic holds $rfound records of $rids distinct ids"

echo
echo "summary, $(date -u '+%Y-%m-%d %H:%M') UTC, bench/audit.sh $ROUNDS $SECS $RATE ($(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); medians of $ROUNDS rounds):"
echo
echo "| target | one limit, memory | four limits, Redis | met |"
echo "|---|---|---|---|"
ge() { awk -v v="$1" -v t="$2" 'BEGIN{print (v != "-" && v >= t) ? "yes" : "**no**"}'; }
le() { awk -v v="$1" -v t="$2" 'BEGIN{print (v != "-" && v <= t) ? "yes" : "**no**"}'; }
rm_c=$(ratio "$tmp/closed" mem-audit mem); rf_c=$(ratio "$tmp/closed" four-audit four)
rm_o=$(ratio "$tmp/open" mem-audit mem); rf_o=$(ratio "$tmp/open" four-audit four)
pm=$(pe_median "$tmp/closed" mem-audit); pf=$(pe_median "$tmp/closed" four-audit)
echo "| closed-loop flood: requests/s with audit ≥ 0.9 × without | $rm_c | $rf_c | $([ "$(ge "$rm_c" 0.9)$(ge "$rf_c" 0.9)" = yesyes ] && echo yes || echo '**no**') |"
echo "| surge: attempts/s with audit / without (offered load; the same if nothing slows) | $rm_o | $rf_o | |"
echo "| gateway CPU per recorded event ≤ 2 µs (closed loop) | $pm µs | $pf µs | $([ "$(le "$pm" 2)$(le "$pf" 2)" = yesyes ] && echo yes || echo '**no**') |"
lm=$(($(lost "$tmp/closed" mem-audit) + $(lost "$tmp/open" mem-audit))); lf=$(($(lost "$tmp/closed" four-audit) + $(lost "$tmp/open" four-audit)))
miss_m=$((recorded[mem-audit] - ids[mem-audit])); miss_f=$((recorded[four-audit] - ids[four-audit]))
echo "| no event dropped, spool included: dropped or failed; recorded but not in the topic | $lm; $miss_m | $lf; $miss_f | $([ "$lm $lf $miss_m $miss_f" = "0 0 0 0" ] && echo yes || echo '**no**') |"
rec_ok=$([ "$(kv dropped) $(kv failed)" = "0 0" ] && [ "$rids" = "$(kv offered)" ] && echo yes || echo '**no**')
echo "| $RATE events/s to Kafka from one recorder, no loss | offered $(kv offered_rate)/s, delivered $(kv delivered_rate)/s, $(kv offered) offered, $rids in the topic ($rfound records), dropped $(kv dropped), drain $(kv drain_ms) ms, $(kv cpu_us_per_event) µs CPU per event | | $rec_ok |"
