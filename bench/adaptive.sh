#!/usr/bin/env bash
# Adaptive protection against a degrading API, beside today's static limit,
# through three gateways on one Redis.
#
#   bench/adaptive.sh
#   DURATION=20 CASES=500 bench/adaptive.sh     # a short try: about a minute
#
# Environment (defaults in brackets):
#   DURATION  seconds of each run [60]
#   CASES     the API's capacities C, one case each [250 500 1000 500-250-500];
#             A-B-C changes C from A to B to C in equal thirds of the run
#             (500-250-500 over 60 s: to 250 at 20 s, back to 500 at 40 s)
#   MODES     the gateways each case runs with [static protect]
#   STATIC    the static limit, requests a second [400]
#   PRIORITY  1: also the priority case; 0: not [1]
#   KEEP      set: keep the runs' files (logs, every attempt) and say where
# Needs redis-server, redis-cli, curl, python3 (for free ports) and Go.
# Everything listens on free 127.0.0.1 ports under a temporary directory and
# is stopped at the end. A case takes about 2 × (DURATION + 10) s.
#
# The API is floodgate upstream: 200 ms an answer up to C a second; past C,
# 3 s, and past 1.5 C, 503 after 3 s. Three gateways stand in front of it,
# store.type: redis on one redis-server, one route with an upstream timeout
# of 10 s (so that the API's 3 s answers reach the users as they are):
#   static    a limit on the route's key, rate: STATIC/s (fixed window),
#             held by the three together through Redis: today's answer
#   protect   protect: {}, which learns what the API takes (the three hold
#             one limit between them through Redis, each its share)
#   priority  (the priority case) protect with
#             priority: {key: header:X-Priority, levels: [high, low], max_wait: 250ms}
# All of them turn requests away with 429 (protect's reject.status: 429
# here), so that the users' side tells the gateways' refusals from the API's
# own 503s. Three floodgate load runs offer 800 requests a second between
# them, open loop, no retries, each request from one of a million users (no
# limit keys on the user), 70/15/15: 560/s to the first gateway, 120/s to
# each of the others (the priority case: half of each high, half low). They
# send at random times (--poisson), as independent clients arrive: evenly
# spaced runs at one rate lock their phase against each other, and a
# gateway can then favour one of them for the whole run. The load starts in
# the API's second 1 and ends with its second DURATION-1.
#
# Per case the script prints what reached the API in each second (the
# mock's own count, from its -v log, not the gateways'), beside C, one
# column per mode, then each mode's results against the targets:
#   drop to C     after C falls, the seconds until reached/s is under
#                 1.05 C for 3 s running (or to the end of the phase): <= 3 s
#                 (0 s: from the first second after the change)
#   rise to C     after C rises, the seconds until reached/s is 0.85 C or
#                 more for 3 s running: <= 15 s
#   from the start  the same as a drop, from the first second of the run,
#                 when more than 1.05 C is offered: how long the gateways
#                 took to find C (no target)
#   steady        the median of reached/s over the second half of each
#                 phase (a run of one C): 0.85 C to C (0.85 × 800 when C is
#                 more than the 800 offered)
#   admitted      requests a second answered other than 429, of those sent
#   failed or over 400 ms   the share of the admitted that were not 2xx or
#                 took over 2 × the healthy 200 ms, from the scheduled send
#                 (what the users saw): <= 1%; then the same of those sent
#                 in each phase's second half, the steady state (no target)
#   p99 admitted  the 99th percentile of the admitted requests' latency
#   admitted/offered by gateway   each gateway's share of its requests
#                 admitted, and all of them together: no gateway starved,
#                 none under half of all's
# The priority case (C = 500, protect with priority, 400/s high and 400/s
# low) adds the share of high admitted (>= 95%), what low got, and the p99
# of each. It is skipped, saying so, while floodgate check refuses its
# configuration.
set -euo pipefail
DURATION=${DURATION:-60}
CASES=${CASES:-250 500 1000 500-250-500}
MODES=${MODES:-static protect}
STATIC=${STATIC:-400}
PRIORITY=${PRIORITY:-1}
OFFERED=800
SPLIT=(560 120 120) # requests a second to each gateway: 70/15/15 of 800
cd "$(dirname "$0")/.."
for cmd in redis-server redis-cli curl python3 go; do
	command -v $cmd >/dev/null || { echo "bench/adaptive.sh needs $cmd (apt-get install redis-server curl)" >&2; exit 1; }
done
[ "$DURATION" -ge 9 ] || { echo "bench/adaptive.sh: DURATION=$DURATION: at least 9 s (three phases of 3 s)" >&2; exit 1; }

tmp=$(mktemp -d)
pids=() # the processes running now
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [ -n "${KEEP:-}" ]; then echo "the runs' files are in $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

. bench/lib.sh
go build -o "$tmp/floodgate" ./cmd/floodgate

REDIS=$(freeport)
redis-server --port "$REDIS" --bind 127.0.0.1 --dir "$tmp" --save "" --appendonly no >"$tmp/redis.log" 2>&1 &
redis_pid=$!
pids=("$redis_pid")
for _ in $(seq 50); do redis-cli -p "$REDIS" PING >/dev/null 2>&1 && break; sleep 0.1; done

# gwconfig MODE UPSTREAM-PORT PORT ADMIN-PORT: a gateway's configuration.
gwconfig() {
	cat <<YAML
server: {listen: "127.0.0.1:$3"}
admin: {listen: "127.0.0.1:$4"}
store: {type: redis, redis: {addrs: ["127.0.0.1:$REDIS"]}}
routes:
  - id: api
    match: {path: /**}
    upstream: {targets: ["http://127.0.0.1:$2"], timeout: 10s}
YAML
	case $1 in
	static) echo "    limits: [{name: api, key: [route], rate: $STATIC/s}]" ;;
	protect) echo "    protect: {reject: {status: 429}}" ;;
	priority)
		echo "    protect:"
		echo "      reject: {status: 429}"
		echo "      priority: {key: \"header:X-Priority\", levels: [high, low], max_wait: 250ms}"
		;;
	esac
}

# phases SPEC: "C first last" for each phase of a case, the seconds of the
# run it spans (the first phase from second 1, where the load starts):
# "500 1 19", "250 20 39", "500 40 59" for 500-250-500 over 60 s.
phases() {
	local -a c
	local k
	IFS=- read -r -a c <<<"$1"
	for k in "${!c[@]}"; do
		echo "${c[k]} $((k == 0 ? 1 : k * DURATION / ${#c[@]})) $(((k + 1) * DURATION / ${#c[@]} - 1))"
	done
}

# schedule SPEC: SPEC as floodgate upstream --capacity-schedule takes it:
# "0s:500,20s:250,40s:500".
schedule() { phases "$1" | awk '{ printf "%s%ds:%d", (NR > 1 ? "," : ""), (NR > 1 ? $2 : 0), $1 }'; }

# offer DIR NAME URL RATE [HEADER]: one load generator, in the background,
# its attempts into DIR/NAME.csv.
offer() {
	seed=$((seed + 1))
	"$tmp/floodgate" load --url "$3" --rate "$4" --duration "$((DURATION - 1))s" --users 1000000 --poisson --seed "$seed" \
		${5:+--header "$5"} --attempts "$1/$2.csv" >"$1/$2.out" 2>&1 &
	loads+=($!)
	pids+=($!)
}

# run SPEC MODE DIR: one run, the API's log and each load's attempts into
# DIR. The priority case offers high and low to each gateway, half each.
run() {
	local spec=$1 mode=$2 dir=$3 i up upid ready url
	local -a ports admins gws=()
	loads=() seed=0
	mkdir -p "$dir"
	redis-cli -p "$REDIS" FLUSHALL >/dev/null
	up=$(freeport)
	for i in 0 1 2; do
		ports[i]=$(freeport) admins[i]=$(freeport)
		gwconfig "$mode" "$up" "${ports[i]}" "${admins[i]}" >"$dir/gw$i.yaml"
		"$tmp/floodgate" serve -c "$dir/gw$i.yaml" --watch=false 2>"$dir/gw$i.log" &
		gws+=($!)
		pids+=($!)
	done
	for i in 0 1 2; do
		ready=
		for _ in $(seq 100); do curl -sf "http://127.0.0.1:${admins[i]}/readyz" >/dev/null && ready=1 && break; sleep 0.1; done
		[ -n "$ready" ] || { echo "bench/adaptive.sh: gateway $i is not ready:" >&2; cat "$dir/gw$i.log" >&2; exit 1; }
	done
	"$tmp/floodgate" upstream --listen "127.0.0.1:$up" --latency 200ms --overload-latency 3s \
		--capacity-schedule "$(schedule "$spec")" -v 2>"$dir/upstream.log" &
	upid=$!
	pids+=($!)
	for _ in $(seq 250); do grep -qs listening "$dir/upstream.log" && break; sleep 0.02; done
	sleep 1 # the load starts in the API's second 1, and ends with its second DURATION-1
	for i in 0 1 2; do
		url="http://127.0.0.1:${ports[i]}/api/coupons/receive"
		if [ "$mode" = priority ]; then
			offer "$dir" "g$i-high" "$url" $((SPLIT[i] / 2)) "X-Priority: high"
			offer "$dir" "g$i-low" "$url" $((SPLIT[i] / 2)) "X-Priority: low"
		else
			offer "$dir" "g$i" "$url" "${SPLIT[i]}"
		fi
	done
	for p in "${loads[@]}"; do
		wait "$p" || { echo "bench/adaptive.sh: a load generator failed:" >&2; cat "$dir"/*.out >&2; exit 1; }
	done
	sleep 1 # the API's log line for its last second
	kill "$upid" "${gws[@]}"
	wait "$upid" "${gws[@]}" 2>/dev/null || true
	pids=("$redis_pid")
}

# reached DIR: "second reached" for each second of the run from the API's
# log ("t=21s rate=250/s ..." counts second 20).
reached() {
	sed -n 's/^floodgate upstream: t=\([0-9]*\)s rate=\([0-9]*\)\/s.*/\1 \2/p' "$1/upstream.log" |
		awk -v d="$DURATION" '$1 - 1 >= 1 && $1 - 1 < d { print $1 - 1, $2 }'
}

# api PHASES REACHED: "label|result|target" lines of what reached the API.
# For each phase: how fast reached/s followed the change that began it (for
# the first phase, when more than 1.05 C is offered, how fast it came under
# C), as the first second from which it stays within the bound for 3 s (or
# to the end of the phase); and the steady state, the median of the second
# half of the phase.
api() {
	awk -v offered="$OFFERED" '
		function verdict(ok) { return ok ? "yes" : "**no**" }
		function within(s) { return drop ? n[s] <= 1.05 * c : n[s] >= floor }
		FNR == NR { k++; cap[k] = $1; from[k] = $2; to[k] = $3; next }
		{ n[$1] = $2 }
		END {
			for (p = 1; p <= k; p++) {
				c = cap[p]
				floor = 0.85 * (c < offered ? c : offered)
				drop = (p == 1) ? offered > 1.05 * c : c < cap[p - 1]
				if (p > 1 || drop) {
					t = "never"
					for (s = from[p]; s <= to[p] && t == "never"; s++) {
						ok = 1
						for (i = s; i < s + 3 && i <= to[p]; i++) if (!within(i)) ok = 0
						if (ok) t = s - from[p] " s"
					}
					if (p == 1) printf "from the start: under 1.05 C|%s|\n", t
					else if (drop) printf "drop to %d: under 1.05 C|%s %s|<= 3 s\n", c, t, verdict(t != "never" && t + 0 <= 3)
					else printf "rise to %d: 0.85 C or more|%s %s|<= 15 s\n", c, t, verdict(t != "never" && t + 0 <= 15)
				}
				m = 0; delete v
				mid = int((from[p] + to[p] + 1) / 2)
				for (s = mid; s <= to[p]; s++) v[++m] = n[s] + 0
				asort(v)
				med = (m % 2) ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
				printf "steady, C=%d: median s %d-%d|%d/s = %.3f C %s|%d-%d/s\n", c, mid, to[p], med, med / c,
					verdict(med >= floor && med <= c), floor, c
			}
		}' "$1" "$2"
}

# users DIR PHASES: "label|result|target" lines of what the users saw, from
# the loads' attempts files (DIR/gN.csv, or gN-CLASS.csv in the priority
# case). An attempt answered other than 429 was admitted; it was bad when
# not 2xx or over 400 ms. The steady-state shares count the attempts sent in
# the second half of each phase.
users() {
	local f
	for f in "$1"/g*.csv; do tail -n +2 "$f" | sed "s/^/$(basename "$f" .csv),/"; done |
		awk -F, -v secs=$((DURATION - 1)) '
			function verdict(ok) { return ok ? "yes" : "**no**" }
			function p99(a, n,   i) { if (!n) return "-"; asort(a); i = int(n * 0.99 + 0.999); return sprintf("%.0f ms", a[i > n ? n : i]) }
			FNR == NR { split($0, f, " "); k++; mid[k] = int((f[2] + f[3] + 1) / 2); to[k] = f[3]; next }
			{ split($1, name, "-"); gw = name[1]; cls = name[2]; sent[gw]++; csent[cls]++; all++ }
			$4 != 429 {
				adm[gw]++; cadm[cls]++; a++; lat[a] = $3
				if (cls == "high") hi[++nhi] = $3
				if (cls == "low") lo[++nlo] = $3
				b = ($4 !~ /^2/ || $3 > 400); bad += b
				s = int($2 / 1000) + 1 # the API second it was sent in
				for (p = 1; p <= k; p++) if (s >= mid[p] && s <= to[p]) { sa[p]++; sb[p] += b }
			}
			END {
				printf "admitted|%.0f/s of %.0f/s|\n", a / secs, all / secs
				share = a ? 100 * bad / a : 0
				printf "failed or over 400 ms|%.2f%% of %d %s|<= 1%% of admitted\n", share, a, verdict(share <= 1)
				for (p = 1; p <= k; p++) printf "  of those sent in s %d-%d|%.2f%% of %d|\n", mid[p], to[p], sa[p] ? 100 * sb[p] / sa[p] : 0, sa[p]
				if (nhi + nlo) {
					h = csent["high"] ? 100 * cadm["high"] / csent["high"] : 0
					printf "high admitted|%.1f%% %s|>= 95%%\n", h, verdict(h >= 95)
					printf "low admitted|%.1f%%, %.0f/s|\n", csent["low"] ? 100 * cadm["low"] / csent["low"] : 0, cadm["low"] / secs
					printf "p99 admitted, high|%s|\n", p99(hi, nhi)
					printf "p99 admitted, low|%s|\n", p99(lo, nlo)
				} else
					printf "p99 admitted|%s|\n", p99(lat, a)
				fleet = all ? a / all : 0; starved = 0; per = ""
				for (g = 0; g < 3; g++) {
					r = sent["g" g] ? adm["g" g] / sent["g" g] : 0
					per = per sprintf(" %.2f", r)
					if (r < fleet / 2) starved++
				}
				printf "admitted/offered by gateway|%s (all %.2f) %s|none under half of all\n", substr(per, 2), fleet, verdict(!starved)
			}' "$2" -
}

# results DIR SPEC: a run's lines against the targets.
results() {
	phases "$2" >"$1/phases"
	reached "$1" >"$1/reached"
	api "$1/phases" "$1/reached"
	users "$1" "$1/phases"
}

# report SPEC TITLE MODE...: a case's runs: what reached the API in each
# second, one column per mode, then each mode's results side by side.
report() {
	local spec=$1 title=$2 m
	shift 2
	for m in "$@"; do results "$tmp/$spec/$m" "$spec" >"$tmp/$spec/$m/results"; done
	echo
	echo "$title"
	printf "%6s %6s" second C
	printf " %8s" "$@"
	echo "   requests that reached the API"
	phases "$spec" | awk '{ for (s = $2; s <= $3; s++) printf "%6d %6d\n", s, $1 }' >"$tmp/$spec/table"
	for m in "$@"; do
		awk 'FNR == NR { n[$1] = $2; next } { printf "%s %8s\n", $0, ($1 in n) ? n[$1] : "-" }' \
			"$tmp/$spec/$m/reached" "$tmp/$spec/table" >"$tmp/$spec/table.new"
		mv "$tmp/$spec/table.new" "$tmp/$spec/table"
	done
	cat "$tmp/$spec/table"
	echo
	for m in "$@"; do cat "$tmp/$spec/$m/results"; done |
		awk -F'|' -v modes="$*" '
			BEGIN { nm = split(modes, mode, " ") }
			{ line[NR] = $0 }
			END {
				rows = NR / nm # the modes have the same rows, one after the other
				printf "%-32s", ""
				for (j = 1; j <= nm; j++) printf "%-30s", mode[j]
				print "target"
				for (i = 1; i <= rows; i++) {
					split(line[i], f, "|"); printf "%-32s", f[1]; target = f[3]
					for (j = 1; j <= nm; j++) { split(line[(j - 1) * rows + i], f, "|"); printf "%-30s", f[2] }
					print target
				}
			}'
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), redis $(redis-server --version | cut -d' ' -f3 | cut -d= -f2), $(go version | cut -d' ' -f3), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$DURATION s a run; $OFFERED/s offered, ${SPLIT[0]}/${SPLIT[1]}/${SPLIT[2]} through 3 gateways on one Redis; the API: 200 ms up to C a second, 3 s past C, 503 after 3 s past 1.5 C; static: $STATIC/s"

for spec in $CASES; do
	for m in $MODES; do run "$spec" "$m" "$tmp/$spec/$m"; done
	# shellcheck disable=SC2086
	report "$spec" "case C=${spec//-/ -> }" $MODES
done

if [ "$PRIORITY" = 1 ]; then
	gwconfig priority 1 2 3 >"$tmp/priority.yaml"
	if ! "$tmp/floodgate" check -c "$tmp/priority.yaml" >"$tmp/check.out" 2>&1; then
		echo
		echo "priority case skipped: floodgate check refuses protect.priority ($(head -1 "$tmp/check.out" | sed "s|$tmp/||"))"
	else
		run 500 priority "$tmp/500/priority"
		report 500 "priority case: C=500, 400/s high and 400/s low (X-Priority)" priority
	fi
fi
