#!/usr/bin/env bash
# Recorded events to a Redis stream, and what recording costs the other routes.
#
#   bench/events.sh [ROUNDS] [SECONDS] [EVENT_RATE] [OTHER_RATE]
#
# Defaults: 3 rounds of 15 s, 10,000 recorded events/s, 2,000 req/s on the
# other route. Needs redis-server, redis-cli, curl, python3 (for free ports)
# and GNU time (/usr/bin/time, for the load generators' CPU); Linux, for
# the CPU accounting in /proc. Everything listens on free 127.0.0.1 ports under a temporary
# directory and is stopped at the end.
#
# The target (issue): 10,000 recorded events/s with bodies <= 1 KB into a
# Redis stream, while the p99 of the gateway's admitted requests on OTHER
# routes rises by no more than 1 ms.
#
# One floodgate serve, in front of "floodgate upstream" (no latency), with
# three routes:
#   recorded  breaker forced open through the admin API, fallback.record:
#             every request is answered 503 by the gateway and becomes an
#             event (spool in the temporary directory, sink: redis stream)
#   refused   the same without fallback.record: the control
#   other     plain, no limits, proxied to the upstream
# Each round runs, one after the other (so that the machine's noise falls on
# all of them):
#   A  baseline: "floodgate load" on other at OTHER_RATE for SECONDS
#   B  the same load on other AND, at the same time, "floodgate load" on
#      recorded at EVENT_RATE with a 1,024-byte body for SECONDS
#   C  as B, on refused: what 10,000 more requests a second cost the
#      machine without any recording, so that B-C is recording's own share
#   D  with BASE=REV in the environment: as B, against a second gateway
#      built from git revision REV (in a temporary worktree; its own spool
#      and stream), so that a change is measured against what it changes
#      in the same run; D-A compares with the current build's A
# "floodgate load" is open-loop: latency is measured from each request's
# scheduled send, so a saturated machine shows up as latency, not as a
# lower rate. The report gives, per round and as medians, other's p99 in A,
# B and C and the deltas; for B, the events the gateway answered
# "recorded": true (gateway_events_total{result="recorded"}) per second, the
# entries added to the stream during the phase per second, and how long the
# spool took to drain after the load stopped; for every phase the CPU each
# process used, and what the rest of the machine used (other tenants).
set -euo pipefail
ROUNDS=${1:-3}
SECS=${2:-15}
EVRATE=${3:-10000}
OTRATE=${4:-2000}
cd "$(dirname "$0")/.."
for cmd in redis-server redis-cli curl python3 go /usr/bin/time; do
	command -v $cmd >/dev/null || { echo "bench/events.sh needs $cmd (apt-get install redis-server curl python3 time)" >&2; exit 1; }
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
RED=$(freeport); UP=$(freeport); GW=$(freeport); ADM=$(freeport)
TOKEN=bench
STREAM=fg:events

go build -o "$tmp/floodgate" ./cmd/floodgate
fg="$tmp/floodgate"
BASE=${BASE:-}
if [ -n "$BASE" ]; then
	build_rev "$BASE" "$tmp/floodgate-base"
	GWB=$(freeport); ADMB=$(freeport)
fi

# No persistence: the stream is the sink under test, not Redis's disk. The
# gateway's spool is fsynced on every group commit either way.
redis-server --port "$RED" --bind 127.0.0.1 --dir "$tmp" --save "" --appendonly no >"$tmp/redis.log" 2>&1 &
redis_pid=$!
pids+=($!)
"$fg" upstream --listen "127.0.0.1:$UP" >"$tmp/upstream.log" 2>&1 &
up_pid=$!
pids+=($!)

# maxlen bounds Redis's memory over the rounds (~1.3 KB an entry); the
# stream's entries-added counter, not XLEN, measures what arrived.
cat >"$tmp/floodgate.yaml" <<YAML
server: {listen: "127.0.0.1:$GW"}
admin: {listen: "127.0.0.1:$ADM", token: $TOKEN}
events:
  sink: redis
  redis: {addrs: ["127.0.0.1:$RED"], stream: "$STREAM", maxlen: 200000}
  spool_dir: "$tmp/spool"
routes:
  - id: recorded
    match: {path: /recorded/**}
    upstream: {targets: ["http://127.0.0.1:$UP"]}
    breaker: {enabled: true}
    fallback: {record: true}
  - id: refused
    match: {path: /refused/**}
    upstream: {targets: ["http://127.0.0.1:$UP"]}
    breaker: {enabled: true}
  - id: other
    match: {path: /other/**}
    upstream: {targets: ["http://127.0.0.1:$UP"]}
YAML
"$fg" check -c "$tmp/floodgate.yaml" >/dev/null
"$fg" serve -c "$tmp/floodgate.yaml" 2>"$tmp/serve.log" &
gw_pid=$!
pids+=($!)

waitfor() { # what, command...
	local what=$1; shift
	for _ in $(seq 200); do "$@" >/dev/null 2>&1 && return 0; sleep 0.05; done
	echo "timed out waiting for $what" >&2; exit 1
}
waitfor redis redis-cli -p "$RED" ping
waitfor upstream curl -sf "http://127.0.0.1:$UP/"
waitfor floodgate curl -sf "http://127.0.0.1:$ADM/healthz"
for r in recorded refused; do
	curl -sf -X POST -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$ADM/admin/breakers/$r?state=open" >/dev/null
done
if [ -n "$BASE" ]; then
	sed -e "s/127.0.0.1:$GW\"/127.0.0.1:$GWB\"/" -e "s/127.0.0.1:$ADM\"/127.0.0.1:$ADMB\"/" \
		-e "s|$tmp/spool|$tmp/spool-base|" -e "s/stream: \"$STREAM\"/stream: \"$STREAM-base\"/" \
		"$tmp/floodgate.yaml" >"$tmp/base.yaml"
	"$tmp/floodgate-base" serve -c "$tmp/base.yaml" 2>"$tmp/base.log" &
	pids+=($!)
	waitfor "the BASE floodgate" curl -sf "http://127.0.0.1:$ADMB/healthz"
	curl -sf -X POST -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$ADMB/admin/breakers/recorded?state=open" >/dev/null
fi

# A body of exactly 1,024 bytes.
BODY=$(python3 -c 'import json; p={"user":"u1","payload":""}; n=1024-len(json.dumps(p,separators=(",",":"))); p["payload"]="x"*n; print(json.dumps(p,separators=(",",":")),end="")')
[ ${#BODY} -eq 1024 ] || { echo "body is ${#BODY} bytes" >&2; exit 1; }

sample=$(curl -s -X POST -H 'Content-Type: application/json' --data "$BODY" "http://127.0.0.1:$GW/recorded/x")
case $sample in
*'"recorded":true'*) ;;
*) echo "the recorded route does not record: $sample" >&2; exit 1 ;;
esac

metric() { # name{labels} as printed by /metrics -> value (0 if absent)
	curl -sf "http://127.0.0.1:$ADM/metrics" | awk -v m="$1" 'index($0, m" ") == 1 {v = $2} END {printf "%d\n", v + 0}'
}
recorded() { metric 'gateway_events_total{result="recorded",type="breaker_rejected"}'; }
dropped() { metric 'gateway_events_total{result="dropped",type="breaker_rejected"}'; }
spooled() { metric 'gateway_events_spooled'; }
drained() { [ "$(spooled)" -eq 0 ]; }
added() { # entries ever added to the stream (Redis >= 7.0), 0 before the first
	redis-cli -p "$RED" XINFO STREAM "$STREAM" 2>/dev/null | awk 'prev == "entries-added" {print; found = 1} {prev = $0} END {if (!found) print 0}'
}
now() { date +%s.%N; }

# load OUT URL RATE [extra load flags...]; its CPU seconds go to OUT.cpu.
load() {
	local out=$1 url=$2 rate=$3; shift 3
	/usr/bin/time -f '%U %S' -o "$out.cpu" "$fg" load --url "$url" --rate "$rate" --duration "${SECS}s" "$@" >"$out" 2>&1
}
# CPU accounting, in clock ticks: a process's user+system time, and the
# whole machine's busy time (everything but idle and iowait), so that what
# the benchmark's processes did not use shows up as someone else's load.
HZ=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
busy() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
snap() { echo "$(busy) $(ticks "$gw_pid") $(ticks "$redis_pid") $(ticks "$up_pid")"; }
# cpuline BEFORE AFTER SECONDS LOADFILES... -> cores used by gateway, redis,
# upstream, the load generators, and anything else on the machine
cpuline() {
	local before=$1 after=$2 el=$3; shift 3
	local lg
	lg=$(cat "${@/%/.cpu}" | awk '{s += $1 + $2} END {print s + 0}')
	awk -v b="$before" -v a="$after" -v el="$el" -v hz="$HZ" -v lg="$lg" 'BEGIN {
		split(b, x, " "); split(a, y, " ")
		gw = (y[2] - x[2]) / hz; rd = (y[3] - x[3]) / hz; up = (y[4] - x[4]) / hz; all = (y[1] - x[1]) / hz
		other = all - gw - rd - up - lg; if (other < 0) other = 0
		printf "gateway %.2f  redis %.2f  upstream %.2f  load generators %.2f  rest of the machine %.2f  (cores, of %d)", gw / el, rd / el, up / el, lg / el, other / el, '"$(nproc)"'
	}'
}
field() { # file key -> the value after key on the summary's latency or rate line
	awk -v k="$2" '/^  (latency|rate|answers) / {for (i = 1; i < NF; i++) if ($i == k) {print $(i + 1); exit}}' "$1"
}
persec() { # file -> the p99 of each second, to tell a steady cost from stalls
	awk 'NF == 8 && $1 ~ /^[0-9]+$/ {printf "%s%s", sep, $8; sep = " "} END {print ""}' "$1"
}

OTHER="http://127.0.0.1:$GW/other/x"
REC="http://127.0.0.1:$GW/recorded/x"
REF="http://127.0.0.1:$GW/refused/x"
EVFLAGS=(--method POST --header 'Content-Type: application/json' --body "$BODY")

# Warm up: connections, the spool's first segment, Redis's stream.
SECS=3 load "$tmp/warm-o" "$OTHER" "$OTRATE" &
lo=$!
SECS=3 load "$tmp/warm-r" "$REC" "$EVRATE" "${EVFLAGS[@]}" &
le=$!
wait $lo $le
waitfor "the spool to drain after the warm-up" drained
if [ -n "$BASE" ]; then
	OTHERB="http://127.0.0.1:$GWB/other/x"
	RECB="http://127.0.0.1:$GWB/recorded/x"
	SECS=3 load "$tmp/warm-ob" "$OTHERB" "$OTRATE" &
	lo=$!
	SECS=3 load "$tmp/warm-rb" "$RECB" "$EVRATE" "${EVFLAGS[@]}" &
	le=$!
	wait $lo $le
	sleep 1
fi

# The machine may be shared: before each phase, wait (up to QUIET_WAIT
# seconds) until the rest of the machine uses less than 0.1 core over 2 s.
# Every phase's CPU accounting says how much it used anyway, and a round
# where it took more than NOISY cores is marked and left out of the clean
# medians.
QUIET_WAIT=${QUIET_WAIT:-120}
NOISY=${NOISY:-0.15}
quiet() {
	local end=$((SECONDS + QUIET_WAIT)) c0 c1 rest
	while :; do
		c0=$(snap); sleep 2; c1=$(snap)
		rest=$(awk -v b="$c0" -v a="$c1" -v hz="$HZ" 'BEGIN {split(b, x, " "); split(a, y, " "); print ((y[1] - x[1]) - (y[2] - x[2]) - (y[3] - x[3]) - (y[4] - x[4])) / hz / 2}')
		awk -v r="$rest" 'BEGIN {exit !(r < 0.1)}' && return 0
		[ $SECONDS -ge $end ] && return 0
	done
}
# rest CPULINE -> the "rest of the machine" cores in it
rest() { awk '{for (i = 1; i < NF; i++) if ($i == "machine") print $(i + 1)}' <<<"$1"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN {print b - a}'; }

echo "bench/events.sh: $ROUNDS rounds of ${SECS}s; other at $OTRATE req/s; recorded (and refused) at $EVRATE req/s, 1024-byte bodies"
echo "machine: $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); redis $(redis-server --version | awk '{print $3}' | cut -d= -f2); $(go version | awk '{print $3}')"
echo
echo "p99 of other, ms (from the scheduled send): A alone, B with the recorded load, C with the same load refused unrecorded"
fmt='%-5s  %-7s  %-7s  %-7s  %-7s  %-7s  %-10s  %-10s  %-7s  %-7s  %-8s  %s\n'
printf "$fmt" round "A p99" "B p99" "B-A" "C p99" "C-A" recorded/s stream/s dropped drain_s "rec p99" "noise (cores)${BASE:+   D p99 (BASE $BASE)  D-A  D rec p99}"
d99=(); dda=()
a99=(); b99=(); c99=(); dba=(); dca=(); dbc=(); recs=(); strm=(); drains=()
ca99=(); cb99=(); cc99=(); cdba=(); cdca=(); cdbc=(); crecs=(); cstrm=()
for i in $(seq "$ROUNDS"); do
	# A: other alone.
	quiet
	c0=$(snap); t0=$(now)
	load "$tmp/a$i" "$OTHER" "$OTRATE"
	c1=$(snap); t1=$(now)
	pa=$(field "$tmp/a$i" p99)
	cpua=$(cpuline "$c0" "$c1" "$(elapsed "$t0" "$t1")" "$tmp/a$i")

	# B: other and recorded together.
	quiet
	r0=$(recorded); d0=$(dropped); s0=$(added); c0=$(snap); t0=$(now)
	load "$tmp/b$i" "$OTHER" "$OTRATE" &
	lo=$!
	load "$tmp/e$i" "$REC" "$EVRATE" "${EVFLAGS[@]}" &
	le=$!
	wait $lo $le
	t1=$(now); c1=$(snap); s1=$(added); r1=$(recorded); d1=$(dropped)
	# Then until everything recorded is in the stream.
	for _ in $(seq 600); do drained && break; sleep 0.1; done
	t2=$(now); s2=$(added)
	pb=$(field "$tmp/b$i" p99)
	el=$(elapsed "$t0" "$t1")
	cpub=$(cpuline "$c0" "$c1" "$el" "$tmp/b$i" "$tmp/e$i")
	recps=$(awk -v a="$r0" -v b="$r1" -v s="$SECS" 'BEGIN {printf "%.0f", (b - a) / s}')
	strps=$(awk -v a="$s0" -v b="$s1" -v e="$el" 'BEGIN {printf "%.0f", (b - a) / e}')
	drain=$(awk -v a="$t1" -v b="$t2" 'BEGIN {printf "%.1f", b - a}')

	# C, the control: the same load on a route whose open breaker
	# answers the same 503 without recording, to tell the cost of
	# recording from that of 10,000 more requests a second on the machine.
	quiet
	c0=$(snap); t0=$(now)
	load "$tmp/c$i" "$OTHER" "$OTRATE" &
	lo=$!
	load "$tmp/f$i" "$REF" "$EVRATE" "${EVFLAGS[@]}" &
	le=$!
	wait $lo $le
	c1=$(snap); t1=$(now)
	pc=$(field "$tmp/c$i" p99)
	cpuc=$(cpuline "$c0" "$c1" "$(elapsed "$t0" "$t1")" "$tmp/c$i" "$tmp/f$i")

	# D: B against the BASE build.
	extra=""
	if [ -n "$BASE" ]; then
		quiet
		load "$tmp/d$i" "$OTHERB" "$OTRATE" &
		lo=$!
		load "$tmp/g$i" "$RECB" "$EVRATE" "${EVFLAGS[@]}" &
		le=$!
		wait $lo $le
		pd=$(field "$tmp/d$i" p99)
		da=$(awk -v a="$pa" -v b="$pd" 'BEGIN {printf "%.1f", b - a}')
		d99+=("$pd"); dda+=("$da")
		extra="   $pd  $da  $(field "$tmp/g$i" p99)"
	fi

	noise=$(printf '%s\n' "$(rest "$cpua")" "$(rest "$cpub")" "$(rest "$cpuc")" | sort -g | tail -1)
	ba=$(awk -v a="$pa" -v b="$pb" 'BEGIN {printf "%.1f", b - a}')
	ca=$(awk -v a="$pa" -v b="$pc" 'BEGIN {printf "%.1f", b - a}')
	bc=$(awk -v a="$pc" -v b="$pb" 'BEGIN {printf "%.1f", b - a}')
	a99+=("$pa"); b99+=("$pb"); c99+=("$pc"); dba+=("$ba"); dca+=("$ca"); dbc+=("$bc"); recs+=("$recps"); strm+=("$strps"); drains+=("$drain")
	mark=""
	if awk -v n="$noise" -v m="$NOISY" 'BEGIN {exit !(n > m)}'; then
		mark=" NOISY"
	else
		ca99+=("$pa"); cb99+=("$pb"); cc99+=("$pc"); cdba+=("$ba"); cdca+=("$ca"); cdbc+=("$bc"); crecs+=("$recps"); cstrm+=("$strps")
	fi
	printf "$fmt" "$i" "$pa" "$pb" "$ba" "$pc" "$ca" "$recps" "$strps" "$((d1 - d0))" "$drain" "$(field "$tmp/e$i" p99)" "$noise$mark$extra"
	{
		echo "=== round $i"
		echo "CPU in A: $cpua"
		echo "CPU in B: $cpub"
		echo "CPU in C: $cpuc"
		echo "--- A other"; sed -n '/^summary/,$p' "$tmp/a$i"
		echo "  p99 by second  $(persec "$tmp/a$i")"
		echo "--- B other"; sed -n '/^summary/,$p' "$tmp/b$i"
		echo "  p99 by second  $(persec "$tmp/b$i")"
		echo "--- B recorded"; sed -n '/^summary/,$p' "$tmp/e$i"
		echo "  p99 by second  $(persec "$tmp/e$i")"
		echo "    stream entries added: $((s1 - s0)) during the load, $((s2 - s0)) once the spool drained; recorded: $((r1 - r0)); dropped: $((d1 - d0))"
		echo "--- C other"; sed -n '/^summary/,$p' "$tmp/c$i"
		echo "  p99 by second  $(persec "$tmp/c$i")"
		echo "--- C refused (not recorded)"; sed -n '/^summary/,$p' "$tmp/f$i"
	} >>"$tmp/summaries"
done

median() { [ $# -gt 0 ] || { echo -; return; }; printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
medians() { # label arrays...
	echo "$1: other p99 A $(median $2) ms, B $(median $3) ms (B-A $(median $4) ms; target <= 1 ms), C $(median $5) ms (C-A $(median $6) ms);"
	echo "    B-C, recording's own share: $(median $9) ms"
	echo "    recorded $(median $7)/s, into the stream $(median $8)/s during the load (target $EVRATE/s)"
}
echo
medians "median of all $ROUNDS rounds" "${a99[*]}" "${b99[*]}" "${dba[*]}" "${c99[*]}" "${dca[*]}" "${recs[*]}" "${strm[*]}" "${dbc[*]}"
echo "    spool drained $(median "${drains[@]}") s after the load stopped"
[ -n "$BASE" ] && echo "    BASE $BASE: other p99 D $(median "${d99[@]}") ms (D-A $(median "${dda[@]}") ms)"
medians "median of the ${#ca99[@]} rounds with noise <= $NOISY cores" "${ca99[*]}" "${cb99[*]}" "${cdba[*]}" "${cc99[*]}" "${cdca[*]}" "${crecs[*]}" "${cstrm[*]}" "${cdbc[*]}"
echo
echo "load summaries and CPU (cores used during each phase):"
cat "$tmp/summaries"
