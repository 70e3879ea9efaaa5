#!/usr/bin/env bash
# The framing corpus (gateway/framing_test.go) sent to nginx, as a reverse
# proxy is usually set up in front of the same recording upstream, and to
# floodgate: prints the table of the cases the two treat differently, as
# docs/framing.md shows it.
#
# Needs nginx (apt-get install nginx-light). Usage: bench/framing-nginx.sh [OUT.md]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
nginx=$(command -v nginx || true)
[ -n "$nginx" ] || { echo "bench/framing-nginx.sh needs nginx (apt-get install nginx-light)" >&2; exit 1; }
out=${1:-/dev/stdout}
"$nginx" -v
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -count=1 -run '^TestFramingNginx$' ./gateway/ -framing.nginx="$nginx" -framing.out="$tmp/table.md" >/dev/null
cat "$tmp/table.md" >"$out"
