# Helpers of the bench scripts, which source this file after cd-ing to the
# repository's root and making $tmp, their temporary directory.

# freeport prints a TCP port free on 127.0.0.1.
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# build_rev REV OUT builds ./cmd/floodgate as it was at git revision REV
# into OUT, from a temporary worktree, so that a script can run an earlier
# build beside the current one (BASE=REV).
build_rev() {
	git worktree add --detach "$tmp/rev" "$1" >/dev/null 2>&1 || { echo "$(basename "$0"): cannot check out $1" >&2; exit 1; }
	(cd "$tmp/rev" && go build -o "$2" ./cmd/floodgate)
	git worktree remove --force "$tmp/rev"
}
