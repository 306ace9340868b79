#!/usr/bin/env bash
# The harness's runs of bench/RESULTS.md ("sluice-bench's scenarios"):
# sluice with bench/data/sluice.yaml (two demo models, one loaded at a
# time, two tenants' keys) in front of the llama-servers it starts, and
# one sluice-bench run per capability. Run from anywhere after
# `ninja -C build`; the reports (Markdown, JSON, JSONL, HTML) go to
# $SLUICE_BENCH_OUT (default bench/results/scenarios).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${SLUICE_BENCH_OUT:-bench/results/scenarios}
BENCH=build/bench/sluice-bench
mkdir -p "$OUT"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true' EXIT

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# start_sluice LOG ARGS...: sluice on a free port; sets $url.
start_sluice() {
	local log=$1 port
	shift
	port=$(free_port)
	build/sluice --listen "127.0.0.1:$port" "$@" >"$log" 2>&1 &
	pids+=($!)
	url=http://127.0.0.1:$port
	until build/sluice --probe "$url/ready" 2>/dev/null; do sleep 0.2; done
}

# run NAME ARGS...: one sluice-bench run, its table kept as NAME.md.
run() {
	local name=$1
	shift
	echo "== $name: sluice-bench $*" | tee "$OUT/$name.cmd"
	"$BENCH" --url "$url" --quiet --json "$OUT/$name.json" \
		--jsonl "$OUT/$name.jsonl" --html "$OUT/$name.html" "$@" |
		tee "$OUT/$name.md" || true
}

start_sluice "$OUT/sluice.log" --config bench/data/sluice.yaml
alice=(--api-key alice-secret)

run sharegpt "${alice[@]}" --dataset sharegpt \
	--dataset-path bench/data/sharegpt-sample.json --max-turns 4 \
	--think-time 0.5 --concurrency 4 --requests 60
run shared-prefix "${alice[@]}" --dataset shared-prefix --prefix-groups 4 \
	--prompts-per-group 10 --prefix-len 200 --suffix-len 10 \
	--max-tokens 16 --concurrency 4 --requests 40
run tenants --tenant 'alice:alice-secret:3:urgent;bob:bob-secret:1:batch' \
	--concurrency 8 --requests 120 --max-tokens 32
run gamma "${alice[@]}" --rate 8 --arrivals gamma --burstiness 0.5 \
	--ramp 2 --warmup 2 --duration 10 --requests 100000 --max-tokens 32 \
	--num-runs 3
# The search on the slow model (loaded first), which the range brackets.
"$BENCH" --url "$url" "${alice[@]}" --model-mix slow --requests 1 --quiet >/dev/null
run search "${alice[@]}" --model-mix slow --search on \
	--slo ttft=500ms,tpot=50ms --search-range 1-64 --search-steps 7 \
	--duration 8 --warmup 1 --requests 100000 --max-tokens 32
run cancel "${alice[@]}" --llama-url "$url" --llama-key alice-secret \
	--cancel-share 0.5 --cancel-after-tokens 4 --max-tokens 1000 \
	--concurrency 4 --requests 40
run cancel-plain "${alice[@]}" --stream off --llama-url "$url" \
	--llama-key alice-secret --cancel-share 0.5 --cancel-after-ms 100 \
	--max-tokens 1000 --concurrency 4 --requests 20
run swap "${alice[@]}" --model-mix tiny,slow,tiny,tiny --max-tokens 16 \
	--requests 24
kill "${pids[@]}"
wait 2>/dev/null || true
pids=()

# Failover: one model, two llama-servers; one is killed 5 s in.
cat >"$OUT/replicas.yaml" <<EOF
models:
  tiny:
    model: build/tests/demo-tiny.gguf
    replicas: 2
EOF
start_sluice "$OUT/sluice-replicas.log" --config "$OUT/replicas.yaml"
victim=$(sed -n 's/.*started llama-server\[\([0-9]*\)\].*/\1/p' \
	"$OUT/sluice-replicas.log" | head -1)
run failover --kill-at 5 --kill-pid "$victim" --concurrency 8 \
	--duration 12 --requests 100000 --max-tokens 64
kill "${pids[@]}"
wait 2>/dev/null || true
pids=()

# A load nobody waits for: big starts 4 s late (bench/slow-start.sh, a
# larger model's load) and its requests wait 1 s at most; slow and tiny
# follow each of big's, two models at most running.
cat >"$OUT/cancel-load.yaml" <<EOF2
max-loaded: 2
models:
  tiny:
    model: build/tests/demo-tiny.gguf
  slow:
    model: build/tests/demo-slow.gguf
    preload: false
  big:
    model: build/tests/demo-tiny.gguf
    preload: false
    queue-timeout: 1s
EOF2
SLOW_START_MODEL=big SLOW_START_S=4 \
	SLOW_START_EXE=${SLUICE_LLAMA_SERVER:-$(command -v llama-server ||
		echo "$HOME/.cache/sluice/llama.cpp/bin/llama-server")} \
	start_sluice "$OUT/sluice-cancel-load.log" \
	--llama-server bench/slow-start.sh --config "$OUT/cancel-load.yaml"
run cancel-load --model-mix big,slow,tiny --max-tokens 16 --requests 24 \
	--retry off
