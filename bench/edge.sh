#!/usr/bin/env bash
# TLS termination and HTTP/2: floodgate against nginx, in one run.
#
#   bench/edge.sh [ROUNDS] [SECONDS]
#
# Defaults: 5 rounds of 5 s per run (about 6 minutes; 5 rounds of 4 s, 5). Needs go, nginx, wrk,
# h2load, redis-server, openssl and python3 (for free ports); Linux, for the
# CPU accounting in /proc. Run as root, it installs what is missing with
# apt-get (nginx wrk nghttp2-client redis-server openssl curl); none is a
# dependency of floodgate itself. Everything listens on free 127.0.0.1
# ports under a temporary directory and is stopped at the end.
#
# One certificate (ECDSA P-256, for 127.0.0.1 and localhost, made here with
# openssl) for both proxies, TLS 1.2 and 1.3, each side's default ciphers.
# Started once, side by side, in front of one tiny nginx upstream that
# answers "ok":
#   nginx      nginx with NGINX_WORKERS worker processes (default auto:
#              with TLS, 1 worker, as bench/proxy.sh has it, is about 2/3
#              as fast on 2 cores, where floodgate uses both); TLS on one
#              port for HTTP/1.1 and HTTP/2 (ALPN), ssl_session_cache, and
#              plain HTTP on another; proxy_pass with upstream keepalive;
#              no limit on the requests a client connection may carry
#   fg-plain   floodgate with no limits: server.listen (plain HTTP) and
#              server.listen_tls (HTTP/1.1 and HTTP/2 by ALPN)
#   fg-limits  the same with the seeds' four fixed-window limits (global,
#              api, user, ip) on a redis-server of its own, sized so that
#              everything is admitted (as bench/proxy.sh)
#   go-bare    bench/refproxy's bare net/http proxy, and go-stock, its
#   go-stock   httputil.ReverseProxy as it comes, over TLS with net/http's
#              own HTTP/2 server (ALPN h2 and http/1.1), as floodgate has
#              it: what a Go proxy can do with the same HTTP/2 server
# Each round runs, in turn, so that the machine's noise falls on all:
#   https/1.1  wrk -t2 -c64 over HTTPS (keep-alive): nginx, nginx with
#              one worker, fg-plain, go-bare, go-stock, fg-limits
#   h2         h2load -t2 -c16 -m10 (ALPN h2): nginx, nginx with one
#              worker, fg-plain, go-bare, go-stock
#   http/1.1   wrk -t2 -c64 over plain HTTP: nginx, fg-plain, fg-limits
# Every wrk request carries a user and a client IP drawn from 100,000
# values (X-User-Id, X-Forwarded-For; trusted), as in bench/proxy.sh, so
# that the limits count four counters a request. Per run: requests/s and
# the proxy's CPU per request (utime+stime of /proc/PID/stat; nginx: its
# master and workers). Then the medians of the rounds and of the per-round
# ratios: fg-plain/nginx over HTTPS/1.1, over h2 and, where TLS makes no
# difference, over plain HTTP/1.1 (nginx with worker_processes auto is the
# targets' baseline; one worker beside it); fg-plain/go-bare and the Go
# proxies against nginx over HTTPS/1.1 and h2; fg-limits/fg-plain over HTTPS next to
# the same over plain HTTP; each also by CPU per request (the steadier
# figure on a shared machine), with the CPU the limits add. A non-2xx
# answer, a failed h2load request or a connection that did not negotiate
# what it should stops the run. FLOODGATE=BINARY runs that build instead
# of building ./cmd/floodgate.
set -euo pipefail
ROUNDS=${1:-5}
SECS=${2:-5}
NGINX_WORKERS=${NGINX_WORKERS:-auto}
cd "$(dirname "$0")/.."

need=()
for c in nginx:nginx wrk:wrk h2load:nghttp2-client redis-server:redis-server openssl:openssl curl:curl; do
	command -v "${c%%:*}" >/dev/null || need+=("${c#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "bench/edge.sh: installing ${need[*]}" >&2
		apt-get update -qq >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
	else
		echo "bench/edge.sh needs ${need[*]} (apt-get install ${need[*]})" >&2
		exit 1
	fi
fi
for c in go python3; do
	command -v $c >/dev/null || { echo "bench/edge.sh needs $c" >&2; exit 1; }
done

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

# shellcheck source=bench/lib.sh
. bench/lib.sh
UP=$(freeport); NGX=$(freeport); NGXP=$(freeport); NGX1=$(freeport); RED=$(freeport)
PLAIN=$(freeport); PLAINS=$(freeport); LIM=$(freeport); LIMS=$(freeport)
ADM1=$(freeport); ADM2=$(freeport); BARES=$(freeport); STOCKS=$(freeport)

FLOODGATE=${FLOODGATE:-}
if [ -n "$FLOODGATE" ]; then
	cp "$FLOODGATE" "$tmp/floodgate"
else
	go build -o "$tmp/floodgate" ./cmd/floodgate
fi
go build -o "$tmp/refproxy" ./bench/refproxy

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
	-subj /CN=localhost -addext 'subjectAltName=DNS:localhost,IP:127.0.0.1' \
	-keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null

# nginx before 1.25.1 turns HTTP/2 on as a parameter of listen.
ngxver=$(nginx -v 2>&1 | sed -n 's|^nginx version: nginx/\([0-9.]*\).*|\1|p')
if [ "$(printf '%s\n' 1.25.1 "$ngxver" | sort -V | head -1)" = 1.25.1 ]; then
	h2listen=""; h2on="http2 on;"
else
	h2listen=" http2"; h2on=""
fi
ngx() { # name workers listen-line body
	cat >"$tmp/$1.conf" <<CONF
daemon off;
worker_processes $2;
pid $tmp/$1.pid;
error_log $tmp/$1.err;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 100000000;
  upstream up { server 127.0.0.1:$UP; keepalive 256; }
  server { $3 $4 }
}
CONF
	nginx -c "$tmp/$1.conf" -p "$tmp" &
	pids+=($!)
}
ngx up 1 "listen 127.0.0.1:$UP reuseport backlog=4096;" 'location / { return 200 "ok"; }'
tlsconf="ssl_certificate $tmp/cert.pem; ssl_certificate_key $tmp/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:SSL:10m; ssl_session_timeout 10m;"
proxy='location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }'
ngx px "$NGINX_WORKERS" "listen 127.0.0.1:$NGX ssl$h2listen reuseport backlog=4096; $h2on
    listen 127.0.0.1:$NGXP reuseport backlog=4096; $tlsconf" "$proxy"
ngx_pid=${pids[-1]}
ngx px1 1 "listen 127.0.0.1:$NGX1 ssl$h2listen reuseport backlog=4096; $h2on $tlsconf" "$proxy"
ngx1_pid=${pids[-1]}

redis-server --port "$RED" --bind 127.0.0.1 --dir "$tmp" --save "" --appendonly no >"$tmp/redis.log" 2>&1 &
pids+=($!)

tls="{certs: [{cert: $tmp/cert.pem, key: $tmp/key.pem}], min_version: \"1.2\"}"
cat >"$tmp/plain.yaml" <<YAML
server: {listen: "127.0.0.1:$PLAIN", listen_tls: "127.0.0.1:$PLAINS", tls: $tls}
admin: {listen: "127.0.0.1:$ADM1"}
routes:
  - id: api
    match: {path: /**}
    upstream: {targets: ["http://127.0.0.1:$UP"]}
YAML
cat >"$tmp/limits.yaml" <<YAML
server: {listen: "127.0.0.1:$LIM", listen_tls: "127.0.0.1:$LIMS", tls: $tls, trusted_proxies: [127.0.0.1]}
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
pids+=($!); plain_pid=$!
"$tmp/floodgate" serve -c "$tmp/limits.yaml" 2>"$tmp/limits.log" &
pids+=($!); lim_pid=$!
for mode in bare stock; do
	port=$BARES; [ $mode = stock ] && port=$STOCKS
	"$tmp/refproxy" -mode $mode -listen "127.0.0.1:$port" -upstream "http://127.0.0.1:$UP" \
		-tls-cert "$tmp/cert.pem" -tls-key "$tmp/key.pem" 2>"$tmp/$mode.log" &
	pids+=($!)
done
bare_pid=${pids[-2]}; stock_pid=${pids[-1]}

cat >"$tmp/vary.lua" <<'LUA'
math.randomseed(os.time())
request = function()
  local u, j = math.random(1, 100000), math.random(1, 100000)
  wrk.headers["X-User-Id"] = "u" .. u
  wrk.headers["X-Forwarded-For"] = string.format("10.%d.%d.%d", math.floor(j / 65536) % 256, math.floor(j / 256) % 256, j % 256)
  return wrk.format(nil, "/api/activities/lucky-meal/receive")
end
LUA

# Wait until each answers, then check what each negotiates.
for u in "http://127.0.0.1:$UP" "https://127.0.0.1:$NGX" "http://127.0.0.1:$NGXP" "https://127.0.0.1:$NGX1" "http://127.0.0.1:$PLAIN" "https://127.0.0.1:$PLAINS" \
	"http://127.0.0.1:$LIM" "https://127.0.0.1:$LIMS" "https://127.0.0.1:$BARES" "https://127.0.0.1:$STOCKS"; do
	ok=
	for _ in $(seq 100); do curl -sf --cacert "$tmp/cert.pem" "$u/" >/dev/null && { ok=1; break; }; sleep 0.1; done
	[ -n "$ok" ] || { echo "bench/edge.sh: nothing answers on $u:" >&2; tail -5 "$tmp"/*.log "$tmp"/*.err >&2; exit 1; }
done
for p in "$NGX" "$NGX1" "$PLAINS" "$LIMS" "$BARES" "$STOCKS"; do
	for want in "2 --http2" "1.1 --http1.1"; do
		got=$(curl -sf --cacert "$tmp/cert.pem" "${want#* }" -o /dev/null -w '%{http_version}' "https://127.0.0.1:$p/")
		[ "$got" = "${want%% *}" ] || { echo "bench/edge.sh: port $p answers HTTP/$got to curl ${want#* }" >&2; exit 1; }
	done
done
for p in "$LIM" "$LIMS"; do
	curl -sf --cacert "$tmp/cert.pem" "$([ "$p" = "$LIM" ] && echo http || echo https)://127.0.0.1:$p/x" -H 'X-User-Id: 1' -D - -o /dev/null |
		grep -qi '^ratelimit' || { echo "bench/edge.sh: fg-limits is not limiting on port $p" >&2; exit 1; }
done
tlsof() { openssl s_client -connect "127.0.0.1:$1" -CAfile "$tmp/cert.pem" </dev/null 2>/dev/null |
	awk '/^New, / {sub(/^New, /, ""); sub(/, Cipher is /, " "); print; exit}'; }

tck=$(getconf CLK_TCK)
ticks() { # PID: utime+stime of the process and its live children, in clock ticks
	local p t=0
	for p in "$1" $(pgrep -P "$1" || true); do
		t=$((t + $(sed 's/^.*) //' "/proc/$p/stat" | awk '{print $12 + $13}')))
	done
	echo "$t"
}
# run KIND URL PID -> "requests/s CPU-µs/request"
run() {
	local c0 c1 n rate
	c0=$(ticks "$3")
	case $1 in
	wrk)
		wrk -t2 -c64 -d"${SECS}s" -s "$tmp/vary.lua" "$2" >"$tmp/run.out" 2>&1
		if grep -q 'Non-2xx' "$tmp/run.out"; then echo "non-2xx answers from $2:" >&2; cat "$tmp/run.out" >&2; exit 1; fi
		n=$(awk '/ requests in / {print $1}' "$tmp/run.out")
		rate=$(awk '/^Requests\/sec/ {print $2}' "$tmp/run.out")
		;;
	h2)
		h2load -t2 -c16 -m10 -D "$SECS" "$2" >"$tmp/run.out" 2>&1 || true
		grep -q '^Application protocol: h2$' "$tmp/run.out" || { echo "h2load did not speak h2 to $2:" >&2; cat "$tmp/run.out" >&2; exit 1; }
		awk '/^requests:/ {if ($10 + $12 + $14 > 0) bad = 1} /^status codes:/ {if ($5 + $7 + $9 > 0) bad = 1} END {exit bad}' "$tmp/run.out" ||
			{ echo "h2load requests failed against $2:" >&2; cat "$tmp/run.out" >&2; exit 1; }
		n=$(awk '/^requests:/ {print $8}' "$tmp/run.out")
		rate=$(awk -v s="$SECS" '/^requests:/ {printf "%.2f", $8 / s}' "$tmp/run.out")
		;;
	esac
	c1=$(ticks "$3")
	awk -v r="$rate" -v n="$n" -v d=$((c1 - c0)) -v t="$tck" 'BEGIN {printf "%.0f %.1f", r, d * 1e6 / t / n}'
}

echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "software: nginx $ngxver (worker_processes $NGINX_WORKERS for the targets' baseline, and 1), $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2), $(h2load --version | head -1), $(openssl version | cut -d' ' -f1-2), $(go version | cut -d' ' -f3), redis $(redis-server --version | cut -d' ' -f3 | cut -d= -f2)"
echo "TLS as negotiated by OpenSSL's client: nginx $(tlsof "$NGX"); floodgate $(tlsof "$PLAINS"); go-bare $(tlsof "$BARES")"

# A short warm-up of each, not reported.
for u in "https://127.0.0.1:$NGX/:$ngx_pid" "https://127.0.0.1:$NGX1/:$ngx1_pid" "https://127.0.0.1:$PLAINS/:$plain_pid" \
	"https://127.0.0.1:$LIMS/:$lim_pid" "https://127.0.0.1:$BARES/:$bare_pid" "https://127.0.0.1:$STOCKS/:$stock_pid"; do
	SECS=1 run wrk "${u%:*}" "${u##*:}" >/dev/null
done

# The runs of a round, in their order: key, tool, URL, the proxy's pid, label.
runs=(
	"n1|wrk|https://127.0.0.1:$NGX/|$ngx_pid|HTTPS/1.1 nginx"
	"o1|wrk|https://127.0.0.1:$NGX1/|$ngx1_pid|HTTPS/1.1 nginx, 1 worker"
	"p1|wrk|https://127.0.0.1:$PLAINS/|$plain_pid|HTTPS/1.1 fg-plain"
	"b1|wrk|https://127.0.0.1:$BARES/|$bare_pid|HTTPS/1.1 go-bare"
	"s1|wrk|https://127.0.0.1:$STOCKS/|$stock_pid|HTTPS/1.1 go-stock"
	"l1|wrk|https://127.0.0.1:$LIMS/|$lim_pid|HTTPS/1.1 fg-limits"
	"n2|h2|https://127.0.0.1:$NGX/|$ngx_pid|h2 nginx"
	"o2|h2|https://127.0.0.1:$NGX1/|$ngx1_pid|h2 nginx, 1 worker"
	"p2|h2|https://127.0.0.1:$PLAINS/|$plain_pid|h2 fg-plain"
	"b2|h2|https://127.0.0.1:$BARES/|$bare_pid|h2 go-bare"
	"s2|h2|https://127.0.0.1:$STOCKS/|$stock_pid|h2 go-stock"
	"nh|wrk|http://127.0.0.1:$NGXP/|$ngx_pid|HTTP/1.1 nginx"
	"ph|wrk|http://127.0.0.1:$PLAIN/|$plain_pid|HTTP/1.1 fg-plain"
	"lh|wrk|http://127.0.0.1:$LIM/|$lim_pid|HTTP/1.1 fg-limits"
)
# Ratios per round: key, numerator, denominator, label. By requests/s
# a/b; by CPU per request the inverse, b's µs over a's, so that both read
# as a's speed against b's.
ratios=(
	"p1|n1|HTTPS/1.1 fg-plain / nginx, auto (target >= 0.5)"
	"p1|o1|HTTPS/1.1 fg-plain / nginx, 1 worker"
	"p1|b1|HTTPS/1.1 fg-plain / go-bare"
	"b1|n1|HTTPS/1.1 go-bare / nginx"
	"s1|n1|HTTPS/1.1 go-stock / nginx"
	"p2|n2|h2 fg-plain / nginx, auto (target >= 0.5)"
	"p2|o2|h2 fg-plain / nginx, 1 worker"
	"p2|b2|h2 fg-plain / go-bare"
	"b2|n2|h2 go-bare / nginx"
	"s2|n2|h2 go-stock / nginx"
	"ph|nh|HTTP/1.1 fg-plain / nginx"
	"l1|p1|fg-limits / fg-plain, HTTPS (target >= HTTP's)"
	"lh|ph|fg-limits / fg-plain, HTTP"
)
declare -A rps=() cpu=() col=()
add() { col[$1]="${col[$1]:-} $2"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
# shellcheck disable=SC2086 # one value a word
m() { median ${col[$1]}; }
for i in $(seq "$ROUNDS"); do
	for r in "${runs[@]}"; do
		IFS='|' read -r k tool url pid _ <<<"$r"
		out=$(run "$tool" "$url" "$pid")
		read -r x y <<<"$out"; rps[$k,$i]=$x; cpu[$k,$i]=$y
		add "$k" "${rps[$k,$i]}"; add "$k.c" "${cpu[$k,$i]}"
	done
	for r in "${ratios[@]}"; do
		IFS='|' read -r a b _ <<<"$r"
		add "$a/$b" "$(awk -v x="${rps[$a,$i]}" -v y="${rps[$b,$i]}" 'BEGIN {printf "%.3f", x / y}')"
		add "$a/$b.c" "$(awk -v x="${cpu[$a,$i]}" -v y="${cpu[$b,$i]}" 'BEGIN {printf "%.3f", y / x}')"
	done
	for a in 1 h; do
		add "d$a" "$(awk -v x="${cpu[l$a,$i]}" -v y="${cpu[p$a,$i]}" 'BEGIN {printf "%.1f", x - y}')"
	done
	echo "round $i of $ROUNDS done, load average $(cut -d' ' -f1 /proc/loadavg)" >&2
done

row() { printf '%-50s' "$1"; shift; printf ' %14s' "$@"; echo; }
hdr=(); for i in $(seq "$ROUNDS"); do hdr+=("round $i"); done; hdr+=(median)
echo
echo "requests/s (the proxy's CPU µs/request), runs of ${SECS}s"
row "" "${hdr[@]}"
for r in "${runs[@]}"; do
	IFS='|' read -r k _ _ _ label <<<"$r"
	cells=(); for i in $(seq "$ROUNDS"); do cells+=("${rps[$k,$i]} (${cpu[$k,$i]})"); done
	row "$label" "${cells[@]}" "$(m "$k") ($(m "$k.c"))"
done
echo
echo "ratios: by requests/s (by CPU per request)"
row "" "${hdr[@]}"
for r in "${ratios[@]}"; do
	IFS='|' read -r a b label <<<"$r"
	read -ra x <<<"${col[$a/$b]}"; read -ra y <<<"${col[$a/$b.c]}"
	cells=(); for i in $(seq 0 $((ROUNDS - 1))); do cells+=("${x[$i]} (${y[$i]})"); done
	row "$label" "${cells[@]}" "$(m "$a/$b") ($(m "$a/$b.c"))"
done
read -ra x <<<"${col[d1]}"; read -ra y <<<"${col[dh]}"
cells=(); for i in $(seq 0 $((ROUNDS - 1))); do cells+=("${x[$i]} / ${y[$i]}"); done
row "µs of CPU the limits add a request, HTTPS / HTTP" "${cells[@]}" "$(m d1) / $(m dh)"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
