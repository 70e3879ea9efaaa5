#!/usr/bin/env bash
# How long a runtime override set on one of three gateway instances takes
# to be in force on the other two.
#
#   bench/propagation.sh [ROUNDS]
#
# Each round starts a redis-server and three "floodgate serve" processes on
# free 127.0.0.1 ports (the test helpers of cmd/floodgate), sets 100
# overrides through PUT /admin/overrides on the first, and times each from
# the PUT's answer until both others report its version in
# GET /admin/overrides (polled every millisecond). It prints p50, p99 and
# the max of each round. Needs redis-server.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
for i in $(seq "$rounds"); do
	FLOODGATE_PROPAGATION=1 go test -count 1 -run '^TestOverridePropagation$' -v ./cmd/floodgate/ |
		sed -n 's/.*\(propagation to .*\)/round '"$i"': \1/p'
done
