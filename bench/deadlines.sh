#!/usr/bin/env bash
# Deadlines under overload (bench/RESULTS.md, "Deadlines"): a 4-slot
# llama-server on one thread (the tiny demo model), alone or behind
# sluice --upstream, at once, twice and four times its capacity through
# sluice, each open-loop run judged against one TTFT SLO:
#   alone:  requests straight to llama-server;
#   plain:  through sluice, the SLO not sent (the queue does not know it);
#   slo:    through sluice with X-SLO-TTFT-Ms (--slo-headers on).
# On two workloads: the ShareGPT sample (--max-tokens 64) and a synthetic
# one of mixed lengths (prompts of 16 to 600 words, about 60 to 2,300 of
# the demo model's tokens, within its 4,096 a slot; answers of 8 to
# 256). Before them, on each: the unloaded TTFT (one at a time, 60
# requests) and the capacity C (16 at once for $DEADLINE_S seconds).
# The SLO is $DEADLINE_SLO_MS when set, else 4 times the unloaded p99,
# rounded up to 50 ms (at least 200). Last, two classes at twice the
# ShareGPT capacity: interactive (500 ms, 80%) and batch (30 s, 20%), the
# levels sent or not.
#
# Every run starts a fresh llama-server (and sluice): llama-server alone
# keeps what it could not serve in its own queue. Runs last $DEADLINE_S
# seconds (default 20) after a 3 s warm-up; a request waits at most 60 s.
# $DEADLINE_WORKLOADS (default "sharegpt mixed") picks the workloads; the
# two classes run with sharegpt. Reports go to $SLUICE_BENCH_OUT (default bench/results/deadlines); the
# summary table to summary.md there.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${SLUICE_BENCH_OUT:-bench/results/deadlines}
SECONDS_EACH=${DEADLINE_S:-20}
BENCH=build/bench/sluice-bench
MODEL=build/tests/demo-tiny.gguf
LLAMA=${SLUICE_LLAMA_SERVER:-$(command -v llama-server ||
	echo "${XDG_CACHE_HOME:-$HOME/.cache}/sluice/llama.cpp/bin/llama-server")}
mkdir -p "$OUT"
pids=()
trap stop_all EXIT

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# llama-server, asked to stop with a thousand connections waiting in its
# own queue (alone at 4x), may not exit: after STOP_GRACE_S it is killed.
STOP_GRACE_S=5
stop_all() {
	local i p alive
	kill "${pids[@]}" 2>/dev/null || true
	for ((i = 0; i < STOP_GRACE_S * 10; i++)); do
		alive=0
		for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ "$alive" = 1 ] || break
		sleep 0.1
	done
	kill -9 "${pids[@]}" 2>/dev/null || true
	wait 2>/dev/null || true
	pids=()
}

# start NAME: a fresh llama-server ($llama) and sluice in front ($url).
start() {
	local name=$1 lport sport
	stop_all
	lport=$(free_port)
	"$LLAMA" -m "$MODEL" --host 127.0.0.1 --port "$lport" -np 4 -c 16384 \
		--threads 1 --metrics --no-webui >"$OUT/$name.llama.log" 2>&1 &
	llama_pid=$!
	pids+=($llama_pid)
	llama=http://127.0.0.1:$lport
	until curl -sf "$llama/health" >/dev/null; do sleep 0.1; done
	sport=$(free_port)
	build/sluice --listen "127.0.0.1:$sport" --upstream "$llama" \
		--log-level warn >"$OUT/$name.sluice.log" 2>&1 &
	pids+=($!)
	url=http://127.0.0.1:$sport
	until build/sluice --probe "$url/ready" 2>/dev/null; do sleep 0.1; done
}

# watch_llama NAME: while it runs, llama-server's threads (most seen)
# and its CPU over the run, one line a second into NAME.threads: why it
# serves less alone (LLAMA-SERVER.md: a polling HTTP thread per waiting
# connection takes the CPU its compute thread needs).
watch_llama() {
	local name=$1
	(
		while kill -0 "$llama_pid" 2>/dev/null; do
			awk '/^Threads:/ { t = $2 } END { printf "%s ", t }' \
				"/proc/$llama_pid/status"
			awk '{ print $14 + $15 }' "/proc/$llama_pid/stat"
			sleep 1
		done
	) >"$OUT/$name.threads" 2>/dev/null &
	watcher=$!
}

# bench NAME TARGET ARGS...: one sluice-bench run.
bench() {
	local name=$1 target=$2
	shift 2
	echo "sluice-bench --url $target $*" >"$OUT/$name.cmd"
	watch_llama "$name"
	"$BENCH" --url "$target" --quiet on --json "$OUT/$name.json" \
		--jsonl "$OUT/$name.jsonl" --retry off --timeout 60 "$@" \
		>"$OUT/$name.md" || true
	kill "$watcher" 2>/dev/null || true
	wait "$watcher" 2>/dev/null || true
}

field() { # field FILE KEY
	python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['runs'][0][sys.argv[2]])" "$1" "$2"
}

declare -A WORKLOAD=(
	[sharegpt]="--dataset sharegpt --dataset-path bench/data/sharegpt-sample.json --max-tokens 64"
	[mixed]="--dataset synthetic --input-len uniform:16-600 --output-len uniform:8-256"
)

for w in ${DEADLINE_WORKLOADS:-sharegpt mixed}; do
	# shellcheck disable=SC2086 # the workload's flags, split on purpose
	set -- ${WORKLOAD[$w]}
	start "$w-unloaded"
	bench "$w-unloaded" "$url" "$@" --concurrency 1 --requests 60
	# A llama-server of its own: one that has just served the unloaded
	# run's prompts answers them again from its prompt cache (measured:
	# 42% of the mixed workload's prompt tokens), which overstates C.
	start "$w-capacity"
	bench "$w-capacity" "$url" "$@" --concurrency 16 --duration "$SECONDS_EACH" \
		--requests 1000000
	C=$(field "$OUT/$w-capacity.json" request_throughput)
	P99=$(field "$OUT/$w-unloaded.json" p99_ttft_ms)
	SLO=${DEADLINE_SLO_MS:-$(python3 -c "import math; print(max(200, math.ceil(4 * $P99 / 50) * 50))")}
	echo "$w: capacity $C/s, unloaded TTFT p99 $P99 ms, SLO $SLO ms" |
		tee "$OUT/$w-rates.txt"
	for m in 1 2 4; do
		R=$(python3 -c "print(round($m * $C, 2))")
		run=(--rate "$R" --duration "$SECONDS_EACH" --warmup 3
			--requests 1000000 --slo "ttft=${SLO}ms")
		start "$w-${m}x-alone"
		bench "$w-${m}x-alone" "$llama" "$@" "${run[@]}"
		start "$w-${m}x-plain"
		bench "$w-${m}x-plain" "$url" "$@" "${run[@]}"
		start "$w-${m}x-slo"
		bench "$w-${m}x-slo" "$url" "$@" "${run[@]}" --slo-headers on
	done
done

# Two classes at twice the ShareGPT capacity.
if [ ! -f "$OUT/sharegpt-capacity.json" ]; then
	stop_all
	python3 bench/deadlines-summary.py "$OUT" | tee "$OUT/summary.md"
	exit 0
fi
C=$(field "$OUT/sharegpt-capacity.json" request_throughput)
R=$(python3 -c "print(round(2 * $C, 2))")
# shellcheck disable=SC2086
set -- ${WORKLOAD[sharegpt]}
for headers in off on; do
	start "classes-$headers"
	bench "classes-$headers" "$url" "$@" --rate "$R" --duration "$SECONDS_EACH" \
		--warmup 3 --requests 1000000 --slo-headers "$headers" \
		--slo-mix interactive:ttft=500ms:0.8,batch:ttft=30s:0.2
done
stop_all

python3 bench/deadlines-summary.py "$OUT" | tee "$OUT/summary.md"
