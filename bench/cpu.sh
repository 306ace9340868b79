#!/usr/bin/env bash
# sluice's own CPU per relayed token and per plain request, against the
# zero-delay mock llama-server:
#
#   bench/cpu.sh [SLUICE-BINARY]...
#
# stream   streams of 64 tokens at concurrency 32: CPU microseconds of the
#          sluice process per relayed token (its /proc utime+stime over the
#          run, divided by the tokens sluice-bench counted).
# plain    plain /v1/chat/completions answers of 64 tokens at concurrency
#          32, assembled from an upstream stream (--stream-upstream on) and
#          relayed (off, what the default, auto, does until a client leaves
#          one): CPU microseconds per request.
#
# ROUNDS, REQUESTS, TOKENS (per answer, default 64) and ENDPOINT
# (sluice-bench's --endpoint: chat, completions or completion) vary it.
#
# One mock serves every run; each run starts its own sluice on a free port.
# ROUNDS (default 3) rounds, alternating the binaries given (default
# build/sluice) within each round; one line per run.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then set -- build/sluice; fi
BENCH=build/bench/sluice-bench
MOCK=build/bench/mock-llama-server
ROUNDS=${ROUNDS:-3}
REQUESTS=${REQUESTS:-2000}
TOKENS=${TOKENS:-64}
ENDPOINT=${ENDPOINT:-chat}
logs=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$logs"' EXIT

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

mport=$(free_port)
"$MOCK" --port "$mport" --slots 4096 >"$logs/mock" 2>&1 &
pids+=($!)

run() { # run LABEL STREAM SLUICE-ARGS...
	local label=$1 stream=$2 port pid
	shift 2
	port=$(free_port)
	"$bin" --listen "127.0.0.1:$port" --log-level warn \
		--upstream "http://127.0.0.1:$mport" --batch-window 0 \
		--slots-per-upstream 4096 "$@" >"$logs/sluice" 2>&1 &
	pid=$!
	pids+=($pid)
	for _ in $(seq 300); do
		curl -sf "http://127.0.0.1:$port/ready" >/dev/null && break
		sleep 0.1
	done
	# A warm-up, so that connections and caches are in place.
	"$BENCH" --quiet on --url "http://127.0.0.1:$port" --stream "$stream" \
		--concurrency 32 --requests 200 --max-tokens "$TOKENS" \
		--endpoint "$ENDPOINT" >/dev/null
	local t0 t1
	t0=$(cpu_ticks "$pid")
	"$BENCH" --quiet on --url "http://127.0.0.1:$port" --stream "$stream" \
		--concurrency 32 --requests "$REQUESTS" --max-tokens "$TOKENS" \
		--endpoint "$ENDPOINT" \
		--json "$logs/out.json" >/dev/null
	t1=$(cpu_ticks "$pid")
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	python3 - "$logs/out.json" "$label" "$((t1 - t0))" "$hz" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
run = doc["runs"][0]
label, ticks, hz = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
cpu_us = ticks / hz * 1e6
ok = run["success"]
tokens = round(run["output_tokens_per_s"] * run["elapsed_s"])
print(f"{label:30s} requests {ok} tokens {tokens} cpu {cpu_us/1e6:.2f} s "
      f"= {cpu_us/ok:.1f} us/request, {cpu_us/max(tokens,1):.2f} us/token, "
      f"{run['req_per_s']:.0f} req/s, fail {run['fail']}")
PY
}

for _ in $(seq "$ROUNDS"); do
	for bin in "$@"; do
		run "$bin stream" on
		run "$bin plain-assembled" off --stream-upstream on
		run "$bin plain-relay" off --stream-upstream off
	done
done
