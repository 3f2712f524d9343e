#!/usr/bin/env bash
# Reproduces the README's Performance table on this machine, over loopback:
# builds chatrelay and chatbench, then for every scenario starts a fresh
# server (guards of a public host raised by flags, as many open files as the
# hard limit allows), runs chatbench against it and stops it. S1–S6 run with
# --fsync=never, then S1–S2 again with --fsync=always.
#
#   cmd/chatbench/run.sh                 # the full run, ~8 minutes
#   cmd/chatbench/run.sh --quick         # a smoke run, ~1 minute
#   SCENARIOS=S3 FSYNC_MODES=never cmd/chatbench/run.sh --idle 19000
#
# Extra arguments go to every chatbench run. Environment: PORT (default
# 18931), OUT (results folder; default a new /tmp/chatbench.* folder),
# DATA_ROOT (where the servers' data folders go, i.e. the disk under test;
# default OUT), FSYNC_MODES (default "never always"), SCENARIOS (default
# S1–S6 with never, S1 S2 with always), QUIET (how long to wait for an idle
# machine before each scenario; default 60s).
set -euo pipefail
cd "$(dirname "$0")/../.."

port=${PORT:-18931}
out=${OUT:-$(mktemp -d /tmp/chatbench.XXXXXX)}
mkdir -p "$out"
data_root=${DATA_ROOT:-$out}
modes=${FSYNC_MODES:-never always}
bin=$out/bin
go build -o "$bin/chatrelay" ./cmd/chatrelay
go build -o "$bin/chatbench" ./cmd/chatbench

# Every stream is a file descriptor in the server (and one in chatbench).
ulimit -n "$(ulimit -Hn)"

{
	echo "# chatbench run $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "# machine: $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, $(uname -sr)"
	echo "# $(go version)"
	if git rev-parse --git-dir >/dev/null 2>&1; then
		echo "# commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- || echo ' (work tree modified)')"
	else
		echo "# commit ${COMMIT:-unknown} (exported tree)"
	fi
	echo "# data on $(df -T "$data_root" | awk 'NR==2 {print $2, $1}'); open files $(ulimit -n)"
} | tee "$out/results.txt"

pid=""
data=""
cleanup() {
	if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	if [ -n "$data" ]; then rm -rf "$data"; fi
	pid=""
	data=""
}
trap cleanup EXIT

# bench MODE SCENARIO [chatbench flags...]: one scenario on a fresh server.
bench() {
	local mode=$1 sc=$2
	shift 2
	data=$(mktemp -d "$data_root/data.XXXXXX")
	"$bin/chatrelay" serve --addr "127.0.0.1:$port" --data "$data" --fsync "$mode" \
		--rate-thread 1000000000 --rate-ip 1000000000 --max-threads 1000000 \
		--max-streams-per-thread 100000 --max-streams-per-ip 1000000 \
		--log-level warn >>"$out/server.log" 2>&1 &
	pid=$!
	"$bin/chatbench" --server "http://127.0.0.1:$port" --server-pid "$pid" \
		--label "fsync=$mode" --scenario "$sc" --quiet-wait "${QUIET:-60s}" \
		--chatrelay-bin "$bin/chatrelay" --data "$data" --reply-fsync "$mode" \
		--json-out "$out/results.jsonl" "$@" | tee -a "$out/results.txt" || true
	cleanup
}

for mode in $modes; do
	if [ "$mode" = never ]; then scenarios="S1 S2 S3 S4 S5 S6"; else scenarios="S1 S2"; fi
	for sc in ${SCENARIOS:-$scenarios}; do
		bench "$mode" "$sc" "$@"
	done
done
echo "# results in $out/results.txt and $out/results.jsonl"
